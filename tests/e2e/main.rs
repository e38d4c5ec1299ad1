//! qhost's end-to-end tests, in one binary: plugins built from source once per run, real
//! servers (Redis, an SQS- and S3-compatible server) started once per run where tests can
//! share them, and the `qhost` command itself.
//!
//! One binary rather than one per file: each test binary links wasmtime and the AWS SDK, and
//! linking them ten times cost more than running every test. Run a part with a filter:
//! `cargo test -p qhost-e2e --test e2e redis::`.

mod admin;
mod bad_input;
mod batches;
mod browser;
mod celery;
mod cli;
mod cluster;
mod console;
mod console_fleet;
mod demo;
mod dlq;
mod email_sender;
mod faults;
mod fleet;
mod flow;
mod formats;
mod guides;
mod handler_tests;
mod hostile;
mod http;
mod isolation;
mod lanes;
mod languages;
mod nats;
mod new;
mod packaging;
mod payload;
mod pipeline;
mod postgres;
mod postgres_fleet;
mod postgres_outbox;
mod rabbitmq;
mod rabbitmq_flow;
mod rate;
mod redis;
mod reload;
mod replay;
mod rollout;
mod schedules;
mod secrets;
mod sqs;
mod state;
mod state_storm;
mod storms;
mod traces;
