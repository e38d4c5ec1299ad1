//! The SQS source against a real SQS-compatible server (moto, on loopback) through
//! aws-sdk-sqs: the same code qhost runs against Amazon SQS.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use qhost::Host;
use qhost::sources::SqsQueue;
use qhost::sources::{QueueSource, SourceError};
use qhost::{Attribute, AttributeValue, Outgoing, Received};
use qhost_e2e::harness::{Running, TestEnv, attr, run_until_idle, send_all};
use qhost_e2e::processes::{HostProcess, summary_column};
use qhost_e2e::sqs_server::{arn, create_queue, drain, endpoint, sdk_config, unique};

fn sqs() -> SqsQueue {
    SqsQueue::from_sdk_config(&sdk_config())
}

/// Creates `name` and `name-dlq`; returns the names.
async fn queue_pair(name: &str) -> (String, String) {
    let name = unique(name);
    let dlq = format!("{name}-dlq");
    create_queue(&name, &[]).await;
    create_queue(&dlq, &[]).await;
    (name, dlq)
}

fn queue_toml(name: &str, plugin: &str, extra: &str) -> String {
    format!(
        "[[queue]]\nname = \"{name}\"\nplugin = \"{plugin}\"\nwait-time-secs = 1\nvisibility-timeout-secs = 5\n{extra}\n"
    )
}

async fn host(env: &TestEnv, queues: &str) -> Host {
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n{queues}",
        endpoint()
    ));
    Host::with_source(config, Arc::new(sqs()))
        .await
        .expect("host starts")
}

async fn send(queue: &str, bodies: &[&str], attributes: &[Attribute]) -> Vec<String> {
    send_all(&sqs(), queue, bodies, attributes).await
}

fn keys(msgs: &[Received]) -> Vec<String> {
    let mut keys: Vec<String> = msgs
        .iter()
        .filter_map(|m| attr(m, "qhost-idempotency-key").map(str::to_string))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[tokio::test(flavor = "multi_thread")]
async fn reminders_over_sqs_email_once_and_dead_letter_junk() {
    let env = TestEnv::new();
    env.install("email-reminder", "email-reminder", "[idempotency]\nkey = \"json:/reminder-id\"\non-missing = \"message-id\"\n[outbox]\nqueues = [\"SENT\"]\n[config]\nsent-queue = \"SENT\"\n");
    let (reminders, dlq) = queue_pair("reminders").await;
    let sent = unique("sent-emails");
    create_queue(&sent, &[]).await;
    let manifest = std::fs::read_to_string(env.plugins_dir().join("email-reminder.toml"))
        .unwrap()
        .replace("SENT", &sent);
    std::fs::write(env.plugins_dir().join("email-reminder.toml"), manifest).unwrap();
    let host = host(&env, &queue_toml(&reminders, "email-reminder", "")).await;
    let r1 = r#"{"reminder-id":"r-1","email":"a@example.com","customer":"A","month":"2026-12"}"#;
    let r2 = r#"{"reminder-id":"r-2","email":"b@example.com","customer":"B","month":"2026-12"}"#;
    send(&reminders, &[r1, r1, r2, "junk"], &[]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.duplicates, c.dead_lettered),
        (3, 2, 1, 1),
        "{c:?}"
    );
    assert_eq!(
        keys(&drain(&sent).await),
        vec!["email-reminder:r-1/0", "email-reminder:r-2/0"]
    );
    let dead = drain(&dlq).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body, b"junk");
    assert!(
        attr(&dead[0], "qhost-dead-letter-reason")
            .unwrap()
            .starts_with("not a reminder")
    );
    assert_eq!(
        attr(&dead[0], "qhost-source-queue"),
        Some(reminders.as_str())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn poison_after_max_attempts_reaches_the_dead_letter_queue_with_its_reason() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 2\n");
    let (jobs, dlq) = queue_pair("jobs").await;
    let host = host(&env, &queue_toml(&jobs, "fixture", "")).await;
    send(&jobs, &["trap"], &[Attribute::string("tenant", "t1")]).await;

    run_until_idle(&host).await;

    let dead = drain(&dlq).await;
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    let reason = attr(d, "qhost-dead-letter-reason").unwrap();
    assert!(
        reason.starts_with("gave up after 2 attempts: plugin trapped")
            && reason.contains("fixture asked to trap"),
        "{reason}"
    );
    assert_eq!(attr(d, "qhost-plugin"), Some("fixture"));
    assert_eq!(attr(d, "qhost-attempts"), Some("2"));
    assert_eq!(attr(d, "tenant"), Some("t1"));
    assert!(
        drain(&jobs).await.is_empty(),
        "deleted only after its dead letter was sent"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queue_redrive_policy_dead_letters_what_the_host_keeps_failing_to_finish() {
    let env = TestEnv::new();
    // The host would retry 10 times; the queue's own redrive policy gives up after 2 receives.
    env.install(
        "fixture",
        "fixture",
        "[limits]\ntimeout-ms = 100\nmax-attempts = 10\n",
    );
    let name = unique("redriven");
    let dlq = format!("{name}-dlq");
    let dlq_url = create_queue(&dlq, &[]).await;
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":"2"}}"#,
        arn(&dlq_url).await
    );
    create_queue(&name, &[(QueueAttributeName::RedrivePolicy, policy)]).await;
    let host = host(&env, &queue_toml(&name, "fixture", "")).await;
    send(&name, &["loop"], &[]).await;

    run_until_idle(&host).await;

    let dead = drain(&dlq).await;
    assert_eq!(dead.len(), 1, "moved by the queue's redrive policy");
    assert_eq!(dead[0].body, b"loop");
    assert_eq!(host.stats().total().invoked, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_heartbeat_keeps_a_long_handler_from_being_redelivered() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\ntimeout-ms = 20000\n");
    let (jobs, _) = queue_pair("slow").await;
    // The handler runs more than three times the visibility timeout.
    let host = host(
        &env,
        &queue_toml(&jobs, "fixture", "")
            .replace("visibility-timeout-secs = 5", "visibility-timeout-secs = 2"),
    )
    .await;
    send(&jobs, &["sleep:6500"], &[]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.received, c.invoked, c.acked, c.busy),
        (1, 1, 1, 0),
        "{c:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_delay_hides_the_message_until_it_is_due() {
    let (jobs, _) = queue_pair("delay").await;
    let q = sqs();
    send(&jobs, &["x"], &[]).await;
    let got = q
        .receive(&jobs, 1, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    q.put_back(&jobs, &got[0].handle, Duration::from_secs(3))
        .await
        .unwrap();
    let early = q
        .receive(&jobs, 1, Duration::from_secs(30), Duration::from_secs(1))
        .await
        .unwrap();
    assert!(early.is_empty(), "hidden while the retry delay runs");
    let later = q
        .receive(&jobs, 1, Duration::from_secs(30), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(later.len(), 1, "visible once it is due");
    assert_eq!(later[0].delivery_count, 2);
    let acks = q
        .settle(&jobs, &[got[0].handle.clone(), later[0].handle.clone()])
        .await
        .unwrap();
    assert!(
        acks[1].is_ok(),
        "the current receipt deletes: {:?}",
        acks[1]
    );
    assert!(
        matches!(acks[0], Ok(()) | Err(SourceError::HandleExpired)),
        "a superseded receipt is at worst expired, never a backend failure: {:?}",
        acks[0]
    );
    assert_eq!(q.depth(&jobs).await.unwrap().total(), 0, "deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_attributes_non_utf8_bodies_and_a_1_mib_body_round_trip() {
    let (jobs, _) = queue_pair("bytes").await;
    let q = sqs();
    let binary = vec![0u8, 159, 146, 150, 255];
    let mut odd = Outgoing::new(&jobs, vec![0xC3, 0x28, 0x00, 0xFF, b'x']);
    odd.attributes = vec![
        Attribute {
            name: "blob".into(),
            value: AttributeValue::Binary(binary.clone()),
        },
        Attribute::number("n", "12.5"),
    ];
    let limit = 1024 * 1024;
    let big = Outgoing::new(&jobs, vec![b'a'; limit]);
    q.send(&[odd.clone()]).await.unwrap();
    q.send(&[big]).await.unwrap();
    let mut got = drain(&jobs).await;
    got.sort_by_key(|m| m.body.len());
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].body, odd.body, "a non-UTF-8 body arrives as sent");
    assert_eq!(
        got[0].attributes,
        {
            let mut a = odd.attributes.clone();
            a.sort_by(|x, y| x.name.cmp(&y.name));
            a
        },
        "the encoding marker is hidden, the binary attribute intact"
    );
    assert_eq!(
        got[1].body.len(),
        limit,
        "a body at the 1 MiB limit arrives whole"
    );
    let over = Outgoing::new(&jobs, vec![b'a'; limit + 1]);
    let err = q.send(&[over]).await.unwrap_err();
    assert!(err.is_permanent(), "{err}");
    let err = err.to_string();
    assert!(err.contains("1048577 bytes, over SQS's"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_group_is_handled_in_order_even_across_a_retry() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let jobs = unique("orders.fifo");
    create_queue(&jobs, &[]).await;
    create_queue(&jobs.replace(".fifo", "-dlq.fifo"), &[]).await; // the default dead-letter name
    let seen = unique("seen.fifo");
    create_queue(&seen, &[]).await;
    let config = queue_toml(&jobs, "fixture", "");
    let host = host(&env, &config).await;
    let mut msgs = Vec::new();
    for i in 0..10 {
        for group in ["a", "b", "c"] {
            let step = if group == "a" && i == 4 {
                "flaky:2;"
            } else {
                ""
            };
            let mut m = Outgoing::new(&jobs, format!("{step}send:{seen}:{group}-{i:02}"));
            m.group_id = Some(group.into());
            m.dedup_id = Some(format!("{group}-{i}"));
            msgs.push(m);
        }
    }
    sqs().send(&msgs).await.unwrap();

    run_until_idle(&host).await;

    let order: Vec<String> = drain(&seen)
        .await
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    assert_eq!(order.len(), 30, "{order:?}");
    for group in ["a", "b", "c"] {
        let mine: Vec<&String> = order.iter().filter(|b| b.starts_with(group)).collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "group {group} in order: {mine:?}");
    }
    assert_eq!(host.stats().total().retried, 1);
}

/// FIFO messages received behind a long-running one of their group are kept hidden while they
/// wait. Otherwise their visibility lapses while they wait, and once the first is deleted the
/// queue hands them out again while this host is running them.
#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_message_waiting_behind_a_long_one_is_kept_hidden() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\ntimeout-ms = 20000\n");
    let jobs = unique("waiting.fifo");
    create_queue(&jobs, &[]).await;
    create_queue(&jobs.replace(".fifo", "-dlq.fifo"), &[]).await;
    let config = queue_toml(&jobs, "fixture", "")
        .replace("visibility-timeout-secs = 5", "visibility-timeout-secs = 2");
    let host = host(&env, &config).await;
    let msgs: Vec<Outgoing> = ["sleep:5000", "sleep:3000", "ack"]
        .iter()
        .enumerate()
        .map(|(i, body)| {
            let mut m = Outgoing::new(&jobs, *body);
            m.group_id = Some("g".into());
            m.dedup_id = Some(format!("m-{i}"));
            m
        })
        .collect();
    sqs().send(&msgs).await.unwrap();

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.received, c.invoked, c.acked, c.busy, c.duplicates),
        (3, 3, 3, 0, 0),
        "each delivered once: {c:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_mid_stream_and_restarting_loses_nothing() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let (jobs, _) = queue_pair("restart").await;
    let out = unique("restart-out");
    create_queue(&out, &[]).await;
    let config = queue_toml(&jobs, "fixture", "");
    // One handler outlives the 5 s grace period: it is released then, and runs again later.
    let slow = format!("sleep:7000;send:{out}:slow");
    send(&jobs, &[slow.as_str()], &[]).await;
    let body = format!("sleep:30;send:{out}:done");
    send(&jobs, &vec![body.as_str(); 120], &[]).await;

    let running = Running::start(host(&env, &config).await);
    running
        .wait_for(Duration::from_secs(60), |h| h.stats().total().acked >= 20)
        .await;
    let first = running.stop().await;
    let c = first.stats().total();
    let done_first = c.acked;
    assert!(done_first < 121, "stopped mid-stream");
    assert_eq!(
        c.released, 1,
        "the slow one was released at the grace expiry: {c:?}"
    );

    let second = host(&env, &config).await;
    run_until_idle(&second).await;

    assert_eq!(
        keys(&drain(&out).await).len(),
        121,
        "every message's effect, exactly one key each"
    );
    let c = second.stats().total();
    assert_eq!(
        done_first + c.acked,
        121,
        "nothing handled twice, nothing lost: {c:?}"
    );
}

/// A `qhost run` process on `jobs` with a shutdown grace of `grace_secs` and a 120 s visibility
/// timeout, once its fixture guest (deadline two minutes) is running `body`, and a client.
async fn a_host_with_a_guest_asleep(
    env: &TestEnv,
    jobs: &str,
    grace_secs: u64,
    body: &str,
) -> (HostProcess, SqsQueue) {
    env.install("fixture", "fixture", "[limits]\ntimeout-ms = 120000\n");
    let config = env
        .plugins_dir()
        .parent()
        .expect("the test directory")
        .join("host.toml");
    std::fs::write(
        &config,
        format!(
            "plugins-dir = {:?}\ndata-dir = {:?}\nshutdown-grace-secs = {grace_secs}\n\
             [source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"\n{}",
            env.plugins_dir(),
            env.data_dir(),
            endpoint(),
            queue_toml(jobs, "fixture", "").replace(
                "visibility-timeout-secs = 5",
                "visibility-timeout-secs = 120"
            )
        ),
    )
    .expect("writing the host's configuration");
    send(jobs, &[body], &[]).await;
    let host = HostProcess::start_consuming(&config);
    let q = sqs();
    for _ in 0..100 {
        if q.depth(jobs).await.expect("queue depth").invisible == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (host, q)
}

/// The one message on `jobs` is `body`, receivable at once (not hidden for its 120 s visibility).
async fn assert_visible_again(q: &SqsQueue, jobs: &str, body: &str) {
    let back = q
        .receive(jobs, 1, Duration::from_secs(30), Duration::from_secs(2))
        .await
        .expect("receive");
    assert_eq!(back.len(), 1, "visible again, not hidden for 120 s");
    assert_eq!(back[0].body, body.as_bytes());
}

/// A second signal ends the grace period at once: the running handler's message is released
/// (visible again, not hidden for its visibility timeout) and the process exits.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_releases_at_once_and_exits() {
    let env = TestEnv::new();
    let (jobs, _) = queue_pair("second-signal").await;
    let (host, q) = a_host_with_a_guest_asleep(&env, &jobs, 60, "sleep:50000").await;

    let stopped = tokio::task::spawn_blocking(|| host.stop_now(Duration::from_secs(20)))
        .await
        .unwrap();

    let (status, summary) = stopped.expect("exited long before its 60 s grace period");
    assert!(status.success(), "{status}");
    assert_eq!(summary_column(&summary, &jobs, "released"), 1, "{summary}");
    assert_visible_again(&q, &jobs, "sleep:50000").await;
}

/// One SIGTERM with a guest asleep in a host call (a WASI sleep far longer than the grace
/// period, under a deadline longer still): at the end of the grace period the call is cancelled,
/// its message released, visible again at once, and the process exits.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_a_guest_asleep_in_a_host_call_exits_at_the_grace_period() {
    let env = TestEnv::new();
    let (jobs, _) = queue_pair("asleep").await;
    let (host, q) = a_host_with_a_guest_asleep(&env, &jobs, 2, "sleep:100000").await;

    let started = Instant::now();
    let stopped = tokio::task::spawn_blocking(|| host.terminate_within(Duration::from_secs(20)))
        .await
        .unwrap();
    let took = started.elapsed();

    let (status, summary) = stopped.expect("exited long before the guest would wake");
    assert!(status.success(), "{status}");
    assert!(
        took >= Duration::from_secs(2),
        "waited out the grace period first: {took:?}"
    );
    assert_eq!(summary_column(&summary, &jobs, "released"), 1, "{summary}");
    assert_visible_again(&q, &jobs, "sleep:100000").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_host_processes_share_one_queue() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let (jobs, _) = queue_pair("shared").await;
    let out = unique("shared-out");
    create_queue(&out, &[]).await;
    let config = env.plugins_dir().parent().unwrap().join("host.toml");
    std::fs::write(
        &config,
        format!(
            "plugins-dir = {:?}\ndata-dir = {:?}\nmax-in-flight = 8\n[retry]\nbase-secs = 0.01\nmax-secs = 1\n\
             [source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\nregion = \"us-east-1\"\n{}",
            env.plugins_dir(), env.data_dir(), endpoint(), queue_toml(&jobs, "fixture", "")
        ),
    )
    .unwrap();
    let body = format!("sleep:10;send:{out}:done");
    send(&jobs, &vec![body.as_str(); 200], &[]).await;

    let (a, b) = (
        HostProcess::start_consuming(&config),
        HostProcess::start_consuming(&config),
    );
    let q = sqs();
    for _ in 0..600 {
        if q.depth(&jobs).await.unwrap().total() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (sa, sb) = (a.stop(), b.stop());

    let ran = (
        summary_column(&sa, &jobs, "ran"),
        summary_column(&sb, &jobs, "ran"),
    );
    assert_eq!(
        ran.0 + ran.1,
        200,
        "each message ran once across both hosts: {ran:?}"
    );
    assert!(ran.0 > 0 && ran.1 > 0, "both hosts took a share: {ran:?}");
    assert_eq!(keys(&drain(&out).await).len(), 200);
}

/// With no `endpoint-url` in qhost.toml, the environment names the server, as the AWS chain
/// reads it: `AWS_ENDPOINT_URL_SQS` before `AWS_ENDPOINT_URL`. The general one here is a port
/// where nothing listens, so a call on either client (the SDK's for the queue's URL, qhost's own
/// for receives, deletes and sends) that read the wrong one would fail.
#[tokio::test(flavor = "multi_thread")]
async fn the_sqs_endpoint_can_come_from_the_environment_alone() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let (jobs, _) = queue_pair("env-endpoint").await;
    let out = unique("env-endpoint-out");
    create_queue(&out, &[]).await;
    let config = env.plugins_dir().parent().unwrap().join("host.toml");
    std::fs::write(
        &config,
        format!(
            "plugins-dir = {:?}\ndata-dir = {:?}\n[source]\nkind = \"sqs\"\n{}",
            env.plugins_dir(),
            env.data_dir(),
            queue_toml(&jobs, "fixture", "")
        ),
    )
    .unwrap();
    let body = format!("send:{out}:done");
    send(&jobs, &vec![body.as_str(); 20], &[]).await;
    let host = HostProcess::start_consuming_in(
        &config,
        &[],
        &[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9"),
            ("AWS_ENDPOINT_URL_SQS", endpoint()),
        ],
    );
    let q = sqs();
    let started = Instant::now();
    while q.depth(&jobs).await.unwrap().total() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not drained; the host's log:\n{}",
            host.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let summary = host.stop();
    assert_eq!(summary_column(&summary, &jobs, "ran"), 20, "{summary}");
    assert_eq!(
        keys(&drain(&out).await).len(),
        20,
        "each run's message sent"
    );
}

#[test]
fn a_missing_queue_or_an_unreachable_endpoint_is_one_clear_error_at_start() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let dir = env.plugins_dir().parent().unwrap().to_path_buf();
    let cases = [
        (
            endpoint().to_string(),
            "SQS queue `no-such-queue` does not exist",
        ),
        ("http://127.0.0.1:9".to_string(), "cannot reach SQS"),
    ];
    for (url, expected) in cases {
        let config = dir.join("bad.toml");
        std::fs::write(
            &config,
            format!(
                "plugins-dir = {:?}\ndata-dir = {:?}\n[source]\nkind = \"sqs\"\nendpoint-url = \"{url}\"\n{}",
                env.plugins_dir(),
                env.data_dir(),
                queue_toml("no-such-queue", "fixture", "")
            ),
        )
        .unwrap();
        let out = std::process::Command::new(qhost_e2e::processes::qhost_binary())
            .args(["--config"])
            .arg(&config)
            .arg("run")
            .envs(qhost_e2e::sqs_server::TEST_ENV)
            .envs(qhost_e2e::processes::qhost_env())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains(expected),
            "expected `{expected}` in: {stderr}"
        );
    }
}

/// `qhost send` checks only the queue it sends to: the default consumed queue (`reminders`)
/// and a configured queue whose plugin file is missing do not stand in its way.
#[tokio::test(flavor = "multi_thread")]
async fn send_needs_only_the_queue_it_names() {
    let env = TestEnv::new();
    let target = unique("send-only");
    create_queue(&target, &[]).await;
    let dir = env.plugins_dir().parent().unwrap().to_path_buf();
    let send = |queue: &str, queues: &str| {
        let config = dir.join("send.toml");
        std::fs::write(
            &config,
            format!(
                "plugins-dir = {:?}\ndata-dir = {:?}\n[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n{queues}",
                env.plugins_dir(),
                env.data_dir(),
                endpoint()
            ),
        )
        .unwrap();
        std::process::Command::new(qhost_e2e::processes::qhost_binary())
            .arg("--config")
            .arg(&config)
            .args(["send", "--queue", queue, "--body", "hello"])
            .envs(qhost_e2e::sqs_server::TEST_ENV)
            .envs(qhost_e2e::processes::qhost_env())
            .output()
            .unwrap()
    };
    let unconfigured = send(&target, "");
    let with_a_missing_plugin = send(&target, &queue_toml("not-created", "not-installed", ""));
    for out in [&unconfigured, &with_a_missing_plugin] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let received = drain(&target).await;
    assert_eq!(received.len(), 2);
    assert!(received.iter().all(|m| m.body == b"hello"));

    let missing = send("no-such-queue", "");
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(
        stderr.trim(),
        "error: SQS queue `no-such-queue` does not exist"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn put_backs_together_share_one_visibility_call_and_each_gets_its_own_answer() {
    let (jobs, _) = queue_pair("putback").await;
    let q = sqs();
    send(&jobs, &["a", "b", "c"], &[]).await;
    let mut got = Vec::new();
    while got.len() < 3 {
        got.extend(
            q.receive(&jobs, 10, Duration::from_secs(30), Duration::from_secs(1))
                .await
                .unwrap(),
        );
    }
    let mut entries: Vec<(String, Duration)> = (got.iter())
        .map(|m| (m.handle.clone(), Duration::ZERO))
        .collect();
    entries.push((format!("{}-stale", got[0].handle), Duration::ZERO));
    let before = q
        .requests()
        .change_visibility
        .load(std::sync::atomic::Ordering::Relaxed);
    let answers = q.put_back_batch(&jobs, &entries).await.unwrap();
    let calls = q
        .requests()
        .change_visibility
        .load(std::sync::atomic::Ordering::Relaxed)
        - before;
    assert_eq!(calls, 1, "four changes, one call");
    assert!(answers[..3].iter().all(Result::is_ok), "{answers:?}");
    assert!(
        matches!(answers[3], Err(SourceError::HandleExpired)),
        "a receipt SQS does not know is expired, not a failed call: {answers:?}"
    );
    let mut again = Vec::new();
    while again.len() < 3 {
        let more = q
            .receive(&jobs, 10, Duration::from_secs(30), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(!more.is_empty(), "the three put back are visible again");
        again.extend(more);
    }
    assert!(again.iter().all(|m| m.delivery_count == 2), "{again:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn busy_copies_of_one_key_go_back_together_and_run_once() {
    let env = TestEnv::new();
    env.install(
        "fixture",
        "fixture",
        "[idempotency]\nkey = \"attribute:job\"\n[limits]\ntimeout-ms = 20000\n",
    );
    let (jobs, _) = queue_pair("busy").await;
    let q = Arc::new(sqs());
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n{}",
        endpoint(),
        queue_toml(&jobs, "fixture", "")
    ));
    let host = Host::with_source(config, Arc::clone(&q) as Arc<dyn QueueSource>)
        .await
        .expect("host starts");
    // A producer that sent one job ten times: one batch, one lease granted, nine copies busy.
    let job = [Attribute::string("job", "j1")];
    send(&jobs, &["sleep:1500"; 10], &job).await;
    let sqs_requests =
        || (q.requests().change_visibility).load(std::sync::atomic::Ordering::Relaxed);

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked), (1, 1), "{c:?}");
    assert_eq!(c.duplicates + c.acked, 10, "every copy deleted: {c:?}");
    assert!(c.busy >= 1, "copies met the lease while it was held: {c:?}");
    assert!(
        sqs_requests() < c.busy,
        "{} busy put-backs took {} visibility calls",
        c.busy,
        sqs_requests()
    );
}

/// The source contract's conformance suite (the one the embedded queue runs in its unit tests)
/// on the SQS-compatible server, through qhost's SQS client: every case on queues of its own.
#[tokio::test(flavor = "multi_thread")]
async fn sqs_conforms_to_the_source_contract() {
    let source = Arc::new(qhost_e2e::sqs_server::patient_queue(endpoint()));
    let new_queue: qhost::testing::NewQueue = Arc::new(|name, fifo| {
        let name = unique(&format!("conf-{name}{}", if fifo { ".fifo" } else { "" }));
        Box::pin(async move {
            create_queue(&name, &[]).await;
            name
        })
    });
    qhost::testing::assert_source_conforms(source, new_queue, "SQS").await;
}
