//! Dead-letter tools on a real `qhost run`, on the embedded queue and on the SQS-compatible
//! server: three reminders dead-lettered by a misconfigured plugin, `qhost dlq peek` shows why,
//! the plugin is fixed by hot reload, and `qhost dlq redrive` sends them back to run once each.

use std::sync::Arc;
use std::time::{Duration, Instant};

use qhost::Outgoing;
use qhost::sources::QueueSource;
use qhost_e2e::harness::TestEnv;
use qhost_e2e::processes::{HostProcess, summary_column};
use qhost_e2e::sqs_server::{create_queue, endpoint, sdk_config, unique};

/// The email-reminder manifest sending to `sent_queue` (granted only `granted`).
fn manifest(sent_queue: &str, granted: &str) -> String {
    format!(
        "[idempotency]\nkey = \"json:/reminder-id\"\n[limits]\nmax-attempts = 1\n\
         [outbox]\nqueues = [\"{granted}\"]\n[config]\nsent-queue = \"{sent_queue}\"\n"
    )
}

fn qhost(config: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    qhost_e2e::processes::run_with_config(config, args)
}

async fn wait_until(queue: &dyn QueueSource, name: &str, total: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let depth = queue.depth(name).await.expect("depth");
        if depth.total() == total {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{name}` holds {depth:?}, not {total}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The scenario on a queue backend: `source` is the `[source]` section, `queue` a client of
/// the same queues.
async fn dead_letter_fix_and_redrive(
    env: &TestEnv,
    source: &str,
    queue: Arc<dyn QueueSource>,
    jobs: &str,
    sent: &str,
) {
    let dlq = format!("{jobs}-dlq");
    env.install_bytes(
        "email-reminder",
        &qhost_e2e::plugin_bytes("email-reminder"),
        &manifest("nowhere", sent),
    );
    let config = env.plugins_dir().with_file_name("qhost.toml");
    std::fs::write(
        &config,
        format!(
            "plugins-dir = {:?}\ndata-dir = {:?}\n{source}\n\
             [[queue]]\nname = \"{jobs}\"\nplugin = \"email-reminder\"\nwait-time-secs = 1\n",
            env.plugins_dir(),
            env.data_dir()
        ),
    )
    .expect("writing the configuration");
    let bodies: Vec<Outgoing> = (0..3)
        .map(|i| {
            let body = format!(
                r#"{{"reminder-id":"d{i}","email":"d{i}@example.com","customer":"D","month":"2026-12"}}"#
            );
            Outgoing::new(jobs, body.into_bytes())
        })
        .collect();
    queue.send(&bodies).await.expect("sending the reminders");

    let host = HostProcess::start_consuming(&config);
    wait_until(queue.as_ref(), &dlq, 3).await;
    wait_until(queue.as_ref(), jobs, 0).await;

    let (ok, out, err) = qhost(&config, &["dlq", "peek", "--queue", &dlq]);
    assert!(ok, "{err}");
    assert!(out.ends_with("3 dead letter(s) shown\n"), "{out}");
    assert_eq!(
        out.matches(&format!("  from {jobs} by email-reminder@"))
            .count(),
        3,
        "{out}"
    );
    assert_eq!(
        out.matches("reason: gave up after 1 attempts: the handler asked for a retry")
            .count(),
        3,
        "{out}"
    );
    assert!(out.contains(r#"body:   {"reminder-id":"d0""#), "{out}");
    // Named by the queue they came from, the letters are read where they are.
    let (ok, by_source, err) = qhost(&config, &["dlq", "peek", "--queue", jobs]);
    assert!(ok, "{err}");
    assert_eq!(by_source, out);
    assert!(
        err.contains(&format!(
            "{jobs} is a consumed queue: its dead letters are in {dlq}"
        )),
        "{err}"
    );
    wait_until(queue.as_ref(), &dlq, 3).await;

    // The fix: the manifest names the granted queue; the running host reloads it.
    let manifest_file = env.plugins_dir().join("email-reminder.toml");
    std::fs::write(&manifest_file, manifest(sent, sent)).expect("writing the fixed manifest");
    let deadline = Instant::now() + Duration::from_secs(30);
    while host.log().matches("plugin loaded").count() < 2 {
        assert!(Instant::now() < deadline, "not reloaded:\n{}", host.log());
        std::thread::sleep(Duration::from_millis(50));
    }

    let (ok, out, err) = qhost(&config, &["dlq", "redrive", "--queue", &dlq]);
    assert!(ok, "{out}{err}");
    assert!(out.ends_with("3 redriven, 0 left\n"), "{out}");
    assert_eq!(out.matches(&format!(" -> {jobs}\n")).count(), 3, "{out}");
    wait_until(queue.as_ref(), sent, 3).await;
    wait_until(queue.as_ref(), &dlq, 0).await;
    wait_until(queue.as_ref(), jobs, 0).await;
    let summary = host.stop();
    assert_eq!(summary_column(&summary, jobs, "acked"), 3, "{summary}");
    assert_eq!(summary_column(&summary, jobs, "dead"), 3, "{summary}");
    assert_eq!(summary_column(&summary, jobs, "ran"), 6, "{summary}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_peeked_and_redriven_on_the_local_queue() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.data_dir()).unwrap();
    let queue: Arc<dyn QueueSource> = Arc::new(env.queue());
    let source = "[source]\nqueues = [\"sent-emails\"]";
    dead_letter_fix_and_redrive(&env, source, queue, "reminders", "sent-emails").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_are_peeked_and_redriven_on_sqs() {
    let env = TestEnv::new();
    let (jobs, sent) = (unique("dlq-jobs"), unique("dlq-sent"));
    for name in [&jobs, &format!("{jobs}-dlq"), &sent] {
        create_queue(name, &[]).await;
    }
    let source = format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"",
        endpoint()
    );
    let queue: Arc<dyn QueueSource> =
        Arc::new(qhost::sources::SqsQueue::from_sdk_config(&sdk_config()));
    dead_letter_fix_and_redrive(&env, &source, queue, &jobs, &sent).await;
}

/// `qhost purge` empties a queue: refused without a terminal to ask or --yes, done with it.
async fn purge_on(env: &TestEnv, source: &str, queue: Arc<dyn QueueSource>, name: &str) {
    let config = env.config_file(source);
    let messages: Vec<Outgoing> = (0..3)
        .map(|i| Outgoing::new(name, format!("m{i}")))
        .collect();
    queue.send(&messages).await.expect("send");
    let (ok, _, err) = qhost(&config, &["purge", "--queue", name]);
    assert!(!ok && err.contains("confirm with --yes"), "{err}");
    wait_until(queue.as_ref(), name, 3).await;
    let (ok, out, err) = qhost(&config, &["purge", "--queue", name, "--yes"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("purg") && out.contains(name), "{out}");
    wait_until(queue.as_ref(), name, 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn purge_asks_then_empties_the_local_queue_and_an_sqs_queue() {
    let env = TestEnv::new();
    let local: Arc<dyn QueueSource> = Arc::new(env.queue());
    purge_on(&env, "", local, "jobs").await;
    let jobs = unique("purge");
    create_queue(&jobs, &[]).await;
    let source = format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"",
        endpoint()
    );
    let sqs: Arc<dyn QueueSource> =
        Arc::new(qhost::sources::SqsQueue::from_sdk_config(&sdk_config()));
    let env = TestEnv::new();
    purge_on(&env, &source, Arc::clone(&sqs), &jobs).await;

    // What SQS has no form of is refused as such, and nothing is sent or taken.
    let config = env.config_file(&source);
    let (ok, _, err) = qhost(&config, &["peek", "--queue", &jobs]);
    assert!(!ok, "peek on SQS succeeded");
    assert!(err.contains("peek works on the embedded queue"), "{err}");
    let send = ["send", "--queue", &jobs, "--body", "twice", "--copies", "2"];
    let (ok, _, err) = qhost(&config, &send);
    assert!(!ok, "copies on SQS were sent");
    assert!(
        err.contains("copies of one message works on the embedded queue only"),
        "{err}"
    );
    let (ok, _, err) = qhost(&config, &["send", "--queue", &jobs, "--body", "once"]);
    assert!(ok, "{err}");
    wait_until(sqs.as_ref(), &jobs, 1).await;
}
