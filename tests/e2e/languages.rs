//! Handlers in Python and JavaScript: the `email-reminder` example, built from source by the
//! pinned toolchains (componentize-py, componentize-js), on the embedded queue and on the
//! SQS-compatible server. Each run sends two reminders (one of them twice), which must give two
//! emails through the outbox and one suppressed duplicate, and one body that makes the handler
//! throw, which must be retried and dead-lettered with the exception's text.

use std::sync::Arc;
use std::time::Duration;

use qhost::Host;
use qhost::Received;
use qhost::sources::SqsQueue;
use qhost_e2e::harness::{Running, TestEnv, attr, contents, queue_toml, run_until_idle, send_all};
use qhost_e2e::sqs_server::{create_queue, drain, endpoint, sdk_config, unique};
use qhost_e2e::{guest_bytes, guest_manifest};

const REASON: &str = "qhost-dead-letter-reason";

fn reminder(id: &str, email: &str) -> String {
    format!(r#"{{"reminder-id":"{id}","email":"{email}","customer":"C","month":"2026-12"}}"#)
}

/// Installs the `lang` build as `email-reminder`, its emails going to `sent`, an instance
/// handling up to `reuse` messages.
fn install(env: &TestEnv, lang: &str, sent: &str, reuse: u32) -> String {
    let bytes = guest_bytes(lang);
    let manifest = guest_manifest(lang)
        .replace(
            "sent-queue = \"sent-emails\"",
            &format!("sent-queue = \"{sent}\""),
        )
        .replace(
            "queues = [\"sent-emails\"]",
            &format!("queues = [\"{sent}\"]"),
        )
        .replace("[limits]", &format!("[limits]\nreuse-instance = {reuse}"));
    env.install_bytes("email-reminder", &bytes, &manifest);
    qhost::plugins::plugin_version(&bytes)
}

/// What every language must show: two emails with the key as Message-Id, from this version;
/// one dead letter carrying the exception text after 4 attempts; one duplicate suppressed.
fn check(host: &Host, sent: &[Received], dead: &[Received], version: &str, exception: &str) {
    let mut ids: Vec<String> = sent
        .iter()
        .map(|m| {
            let email: serde_json::Value = serde_json::from_slice(&m.body).expect("JSON email");
            assert_eq!(
                attr(m, "qhost-producer"),
                Some(format!("email-reminder@{version}").as_str())
            );
            email["message-id"]
                .as_str()
                .expect("message-id")
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["<r1@reminders.qhost>", "<r2@reminders.qhost>"]);
    assert_eq!(dead.len(), 1, "one dead letter");
    let reason = attr(&dead[0], REASON).unwrap_or_default();
    assert!(
        reason.starts_with("gave up after 4 attempts: plugin trapped")
            && reason.contains(exception),
        "{reason}"
    );
    let c = host.stats().total();
    assert_eq!(
        (c.duplicates, c.acked, c.invoked, c.dead_lettered),
        (1, 2, 6, 1),
        "{c:?}"
    );
}

async fn on_the_embedded_queue(lang: &str, exception: &str, reuse: u32) {
    let env = TestEnv::with_shared_cache();
    let version = install(&env, lang, "sent-emails", reuse);
    let host = env
        .host(env.config(&queue_toml("reminders", "email-reminder")))
        .await;
    let q = env.queue();
    let (r1, r2) = (
        reminder("r1", "a@example.com"),
        reminder("r2", "b@example.com"),
    );
    send_all(&q, "reminders", &[&r1, &r2, "[]"], &[]).await;
    send_all(&q, "reminders", &[&r2], &[]).await;

    run_until_idle(&host).await;

    let sent = contents(&q, "sent-emails").await;
    let dead = contents(&q, "reminders-dlq").await;
    check(&host, &sent, &dead, &version, exception);
}

async fn on_sqs(lang: &str, exception: &str) {
    let env = TestEnv::with_shared_cache();
    let (jobs, sent_queue) = (unique("reminders"), unique("sent-emails"));
    for q in [&jobs, &format!("{jobs}-dlq"), &sent_queue] {
        create_queue(q, &[]).await;
    }
    let version = install(&env, lang, &sent_queue, 1);
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"email-reminder\"\nwait-time-secs = 1\nvisibility-timeout-secs = 10\n",
        endpoint()
    ));
    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config()));
    let host = Host::with_source(config, sqs.clone())
        .await
        .expect("host starts");
    let (r1, r2) = (
        reminder("r1", "a@example.com"),
        reminder("r2", "b@example.com"),
    );
    send_all(sqs.as_ref(), &jobs, &[&r1, &r2, "[]"], &[]).await;
    send_all(sqs.as_ref(), &jobs, &[&r2], &[]).await;

    let running = Running::start(host);
    running
        .wait_for(Duration::from_secs(90), |h| {
            let c = h.stats().total();
            c.acked + c.duplicates >= 3 && c.dead_lettered >= 1
        })
        .await;
    let host = running.stop().await;

    let sent = drain(&sent_queue).await;
    let dead = drain(&format!("{jobs}-dlq")).await;
    check(&host, &sent, &dead, &version, exception);
}

const PYTHON: (&str, &str) = (
    "email-reminder-py",
    "TypeError: list indices must be integers or slices, not str",
);
const JAVASCRIPT: (&str, &str) = ("email-reminder-js", "email is undefined");

#[tokio::test(flavor = "multi_thread")]
async fn python_on_the_embedded_queue() {
    on_the_embedded_queue(PYTHON.0, PYTHON.1, 1).await;
}

/// With instances reused, each message still runs once, and the instance that threw is
/// dropped rather than reused (the throwing message fails the same way all four times).
#[tokio::test(flavor = "multi_thread")]
async fn python_reusing_instances_on_the_embedded_queue() {
    on_the_embedded_queue(PYTHON.0, PYTHON.1, 50).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_on_the_embedded_queue() {
    on_the_embedded_queue(JAVASCRIPT.0, JAVASCRIPT.1, 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_reusing_instances_on_the_embedded_queue() {
    on_the_embedded_queue(JAVASCRIPT.0, JAVASCRIPT.1, 50).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_on_sqs() {
    on_sqs(PYTHON.0, PYTHON.1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_on_sqs() {
    on_sqs(JAVASCRIPT.0, JAVASCRIPT.1).await;
}
