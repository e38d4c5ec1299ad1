//! The queue boundary as the host uses it: the contract (`QueueSource`, its errors and the
//! capabilities a source declares) is the `qhost-source` crate's, re-exported here under the
//! names the host's modules use, beside the sources the host ships, each a crate of its own:
//! SQS (`sqs`, `qhost-source-sqs`), the embedded queue (`local`, `qhost-source-local`),
//! RabbitMQ (`rabbitmq`, `qhost-source-rabbitmq`), pgmq's queues in PostgreSQL (`pgmq`,
//! `qhost-source-pgmq`) and NATS JetStream (`nats`, `qhost-source-nats`).

pub(crate) use qhost_source::*;

pub(crate) use qhost_source_local as local;
pub(crate) use qhost_source_nats as nats;
pub(crate) use qhost_source_pgmq as pgmq;
pub(crate) use qhost_source_rabbitmq as rabbitmq;
pub(crate) use qhost_source_sqs as sqs;
