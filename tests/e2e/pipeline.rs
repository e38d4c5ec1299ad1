//! The data path end to end on the embedded backends, with real plugins built from source.

use std::sync::Arc;
use std::time::Duration;

use qhost::Attribute;
use qhost::Host;
use qhost::plugins::Registry;
use qhost::sources::QueueSource;
use qhost::stores::KeyStatus;
use qhost_e2e::faults::FailingAcks;
use qhost_e2e::harness::{Running, TestEnv, attr, contents, queue_toml, run_until_idle, send_all};

const REMINDER_MANIFEST: &str = "[idempotency]\nkey = \"json:/reminder-id\"\non-missing = \"message-id\"\n[outbox]\nqueues = [\"sent-emails\"]\n[config]\nsent-queue = \"sent-emails\"\n";

fn reminder(id: &str, email: &str) -> String {
    format!(r#"{{"reminder-id":"{id}","email":"{email}","customer":"C","month":"2026-12"}}"#)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_sent_twice_emails_once() {
    let env = TestEnv::new();
    env.install("email-reminder", "email-reminder", REMINDER_MANIFEST);
    let host = env
        .host(env.config(&queue_toml("reminders", "email-reminder")))
        .await;
    let q = env.queue();
    let (r1, r2) = (
        reminder("r-1", "a@example.com"),
        reminder("r-2", "b@example.com"),
    );
    send_all(&q, "reminders", &[&r1, &r1, &r2], &[]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    // Both copies of r-1 may arrive in one batch: the second then finds the key leased (busy),
    // comes back, and is suppressed as a duplicate. Either way the handler runs once per reminder.
    assert_eq!((c.invoked, c.acked, c.duplicates), (2, 2, 1), "{c:?}");
    assert_eq!(c.received, 3 + c.busy, "{c:?}");
    let sent = contents(&q, "sent-emails").await;
    assert_eq!(sent.len(), 2, "one email per reminder");
    let key_of = |m| attr(m, "qhost-idempotency-key").unwrap().to_string();
    let mut keys: Vec<_> = sent.iter().map(key_of).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec!["email-reminder:r-1/0", "email-reminder:r-2/0"],
        "derived keys name the producing plugin"
    );
    let to_r1 = sent
        .iter()
        .find(|m| key_of(m) == "email-reminder:r-1/0")
        .unwrap();
    let email: serde_json::Value = serde_json::from_slice(&to_r1.body).unwrap();
    assert_eq!(email["message-id"], "<r-1@reminders.qhost>");
    assert_eq!(email["to"], "a@example.com");
    assert_eq!(email["fencing-token"], 1);
    assert!(contents(&q, "reminders").await.is_empty());
    let status = env
        .store()
        .status("qhost:{email-reminder:r-1}")
        .await
        .unwrap();
    assert_eq!(status, KeyStatus::Completed { pending_outbox: 0 });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redelivery_after_a_failed_delete_is_acked_without_running() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let config = env.config(
        &queue_toml("jobs", "fixture")
            .replace("visibility-timeout-secs = 5", "visibility-timeout-secs = 1"),
    );
    let real = Host::from_config(config.clone()).await.unwrap();
    // Every delete attempt of the first batch fails, so the message comes back with the same id.
    let source = Arc::new(FailingAcks::wrap(qhost::testing::source(&real), 3));
    let registry = Registry::new(real.registry().get("fixture").map(|p| (*p).clone()));
    let host = Host::new(config, source, qhost::testing::store(&real), registry);
    let ids = send_all(&env.queue(), "jobs", &["send:out:done"], &[]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.duplicates), (1, 1, 1), "{c:?}");
    let out = contents(&env.queue(), "out").await;
    assert_eq!(out.len(), 1, "the outbox message went out once");
    assert_eq!(
        attr(&out[0], "qhost-idempotency-key"),
        Some(format!("fixture:{}/0", ids[0]).as_str())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_later_succeeds() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 5\n");
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    send_all(&env.queue(), "jobs", &["flaky:3"], &[]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.retried, c.acked, c.dead_lettered),
        (3, 2, 1, 0),
        "{c:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_message_is_dead_lettered_with_its_reason() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    let q = env.queue();
    let ids = send_all(
        &q,
        "jobs",
        &["reject:customer does not exist"],
        &[Attribute::string("trace", "t-1")],
    )
    .await;

    run_until_idle(&host).await;

    let dead = contents(&q, "jobs-dlq").await;
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!(d.body, b"reject:customer does not exist");
    assert_eq!(
        attr(d, "qhost-dead-letter-reason"),
        Some("customer does not exist")
    );
    assert_eq!(attr(d, "qhost-plugin"), Some("fixture"));
    assert_eq!(attr(d, "qhost-plugin-version").map(str::len), Some(12));
    assert_eq!(attr(d, "qhost-attempts"), Some("1"));
    assert_eq!(attr(d, "qhost-source-queue"), Some("jobs"));
    assert_eq!(
        attr(d, "trace"),
        Some("t-1"),
        "original attributes are kept"
    );
    assert_ne!(d.id, ids[0]);
    let c = host.stats().total();
    assert_eq!((c.invoked, c.dead_lettered, c.acked), (1, 1, 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outbox_message_chains_to_a_second_queue_once() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let queues = format!(
        "{}{}",
        queue_toml("first", "fixture"),
        queue_toml("second", "fixture")
    );
    let host = env.host(env.config(&queues)).await;
    send_all(
        &env.queue(),
        "first",
        &["send:second:ack", "send:second:ack"],
        &[],
    )
    .await;

    run_until_idle(&host).await;

    let stats = host.stats().snapshot();
    let first = stats[&("first".to_string(), "fixture".to_string())];
    let second = stats[&("second".to_string(), "fixture".to_string())];
    assert_eq!((first.invoked, first.outbox_sent), (2, 2));
    assert_eq!((second.received, second.invoked, second.acked), (2, 2, 2));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outbox_copy_is_dropped_downstream_by_its_derived_key() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let host = env.host(env.config(&queue_toml("jobs", "fixture"))).await;
    // Two copies of one outbox message, as a crash between commit and send would leave.
    let key = Attribute::string("qhost-idempotency-key", "parent/0");
    send_all(&env.queue(), "jobs", &["ack", "ack"], &[key]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.invoked, c.duplicates), (1, 1), "{c:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_send_from_another_process_reaches_a_running_host() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let config = env.config(&queue_toml("jobs", "fixture"));
    let running = Running::start(env.host(config).await);
    // A separate connection to the same database file, as `qhost send` would open.
    send_all(&env.queue(), "jobs", &["ack"], &[]).await;
    let done = |h: &Host| h.stats().total().acked > 0;
    running.wait_for(Duration::from_secs(10), done).await;
    let host = running.stop().await;
    assert_eq!(host.stats().total().acked, 1);
    assert_eq!(env.queue().depth("jobs").await.unwrap().total(), 0);
}

/// A route attribute selects only the plugins its queue lists: anything else, even a loaded
/// plugin, is dead-lettered with the reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_can_route_only_to_its_queues_listed_plugins() {
    let env = TestEnv::new();
    for name in ["main", "listed", "unlisted"] {
        env.install(name, "fixture", "");
    }
    let queue = format!(
        "{}route-attribute = \"to\"\nroutes = [\"listed\"]\n",
        queue_toml("jobs", "main")
    );
    let host = env.host(env.config(&queue)).await;
    for (to, body) in [
        ("listed", "send:seen:listed"),
        ("unlisted", "send:seen:unlisted"),
    ] {
        send_all(
            &env.queue(),
            "jobs",
            &[body],
            &[Attribute::string("to", to)],
        )
        .await;
    }
    send_all(&env.queue(), "jobs", &["send:seen:main"], &[]).await;

    run_until_idle(&host).await;

    let seen: Vec<String> = contents(&env.queue(), "seen")
        .await
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    let mut seen = seen;
    seen.sort();
    assert_eq!(seen, ["listed", "main"]);
    let dead = contents(&env.queue(), "jobs-dlq").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        attr(&dead[0], "qhost-dead-letter-reason"),
        Some(
            "route attribute `to` holds `unlisted`, which is not one of this queue's routes (listed)"
        )
    );
    let invoked = host.stats().invocations_by_version("unlisted");
    assert!(
        invoked.is_empty(),
        "the unlisted plugin never ran: {invoked:?}"
    );
}
