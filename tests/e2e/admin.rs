//! The admin listener of a real `qhost run`: `/metrics` counts what happened, exactly, and
//! passes `promtool check metrics`; `/readyz` follows the idempotency store (the test's own
//! redis-server, stopped and started again) and goes 503 while draining after SIGTERM.

use std::time::Duration;

use qhost::Outgoing;
use qhost_e2e::admin::{get, promtool_check, sample, wait_for};
use qhost_e2e::harness::TestEnv;
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_server::{RedisServer, unique_namespace};

fn reminder(id: &str, customer: &str) -> String {
    format!(
        r#"{{"reminder-id":"{id}","email":"{id}@example.com","customer":"{customer}","month":"2026-12"}}"#
    )
}

/// A configuration file for `env` with `extra` TOML, written beside its directories.
fn config_file(env: &TestEnv, extra: &str) -> std::path::PathBuf {
    let path = env.plugins_dir().with_file_name("qhost.toml");
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\nshutdown-grace-secs = 30\n[retry]\nbase-secs = 0.5\nmax-secs = 1\n{extra}",
        env.plugins_dir(),
        env.data_dir()
    );
    std::fs::write(&path, text).expect("writing the configuration");
    path
}

fn handled(metrics: &str, outcome: &str) -> f64 {
    let labels = [("queue", "reminders"), ("outcome", outcome)];
    sample(metrics, "qhost_messages_handled_total", &labels).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_what_happened_and_pass_promtool() {
    let env = TestEnv::new();
    let manifest =
        std::fs::read_to_string(qhost_e2e::workspace().join("plugins/email-reminder/qhost.toml"))
            .unwrap();
    env.install("email-reminder", "email-reminder", &manifest);
    let config = config_file(&env, "[payload]\nstore = \"local\"\n");

    // 8 reminders; one more sent as 3 copies under one message id (2 duplicates); one that
    // is not a reminder (dead-lettered); one whose body (300,000 bytes of customer name) goes
    // to the payload store, as does the email it produces.
    let queue = env.queue();
    let bodies: Vec<Outgoing> = (0..8)
        .map(|i| Outgoing::new("reminders", reminder(&format!("r{i}"), "A").into_bytes()))
        .chain([Outgoing::new("reminders", b"not a reminder".to_vec())])
        .collect();
    use qhost::sources::QueueSource as _;
    queue.send(&bodies).await.unwrap();
    let copied = Outgoing::new("reminders", reminder("copied", "C").into_bytes());
    queue.send_copies(&[copied], 3).await.unwrap();
    let big = reminder("big", &"B".repeat(300_000));
    let payloads = qhost::payloads::open(&env.config("[payload]\nstore = \"local\"\n"))
        .await
        .unwrap();
    let offloaded = payloads
        .offload_all(
            "qhost",
            0,
            vec![Outgoing::new("reminders", big.clone().into_bytes())],
        )
        .await
        .unwrap();
    assert!(qhost::testing::is_pointer(&offloaded[0].attributes));
    queue.send(&offloaded).await.unwrap();

    let host = tokio::task::spawn_blocking(move || HostProcess::start_consuming(&config))
        .await
        .unwrap();
    let admin = host.admin_addr();
    let (_, metrics) = tokio::task::spawn_blocking(move || {
        wait_for(
            admin,
            "/metrics",
            Duration::from_secs(60),
            |status, body| {
                status == 200
                    && ["acked", "duplicate", "dead_lettered"]
                        .iter()
                        .map(|o| handled(body, o))
                        .sum::<f64>()
                        == 13.0
            },
        )
    })
    .await
    .unwrap();

    assert_eq!(handled(&metrics, "acked"), 10.0, "{metrics}");
    assert_eq!(handled(&metrics, "duplicate"), 2.0, "{metrics}");
    assert_eq!(handled(&metrics, "dead_lettered"), 1.0, "{metrics}");
    assert_eq!(handled(&metrics, "retried"), 0.0, "{metrics}");
    let per_plugin = [("queue", "reminders"), ("plugin", "email-reminder")];
    let count = |name: &str| sample(&metrics, name, &per_plugin).unwrap_or(-1.0);
    assert_eq!(count("qhost_handler_invocations_total"), 11.0, "{metrics}");
    assert_eq!(count("qhost_outbox_messages_sent_total"), 10.0, "{metrics}");
    assert_eq!(count("qhost_handler_failures_total"), 0.0, "{metrics}");
    assert_eq!(count("qhost_leases_lost_total"), 0.0, "{metrics}");
    // A copy that arrived while another held the key's lease was put back (busy) and received
    // again: every delivery is counted once.
    let busy = handled(&metrics, "busy");
    let consumed = sample(
        &metrics,
        "messaging_client_consumed_messages_total",
        &[("messaging_destination_name", "reminders")],
    );
    assert_eq!(consumed, Some(13.0 + busy), "{metrics}");
    let fetched = sample(&metrics, "qhost_payload_fetched_bytes_total", &[]);
    assert_eq!(fetched, Some(big.len() as f64), "{metrics}");
    let stored = sample(&metrics, "qhost_payload_stored_bytes_total", &[]).unwrap_or(0.0);
    assert!(stored > 300_000.0, "the big email was offloaded: {metrics}");
    let durations = [("messaging_destination_name", "reminders")];
    let observed = sample(
        &metrics,
        "messaging_process_duration_seconds_count",
        &durations,
    );
    assert_eq!(observed, Some(11.0), "{metrics}");
    assert_eq!(
        sample(&metrics, "qhost_messages_in_flight", &[]),
        Some(0.0),
        "{metrics}"
    );
    let info = [("plugin", "email-reminder")];
    assert_eq!(sample(&metrics, "qhost_plugin_info", &info), Some(1.0));
    let loaded = [("plugin", "email-reminder"), ("result", "loaded")];
    assert_eq!(
        sample(&metrics, "qhost_plugin_loads_total", &loaded),
        Some(1.0)
    );
    for backend in ["queue", "idempotency", "payload"] {
        let errors = sample(
            &metrics,
            "qhost_backend_errors_total",
            &[("backend", backend)],
        );
        assert_eq!(errors, Some(0.0), "{backend}: {metrics}");
    }
    promtool_check(&metrics, &env.data_dir());

    // The depth gauge catches up with the emptied queue at the next check.
    tokio::task::spawn_blocking(move || {
        wait_for(admin, "/metrics", Duration::from_secs(10), |_, body| {
            let visible = [("queue", "reminders"), ("state", "visible")];
            sample(body, "qhost_queue_messages", &visible) == Some(0.0)
        })
    })
    .await
    .unwrap();
    let summary = host.stop();
    assert_eq!(
        qhost_e2e::processes::summary_column(&summary, "reminders", "acked"),
        10,
        "the summary agrees: {summary}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_follows_the_store_and_ends_with_a_drain() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\ntimeout-ms = 120000\n");
    let mut redis = RedisServer::start();
    let config = config_file(
        &env,
        &format!(
            "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"\n\
             [[queue]]\nname = \"jobs\"\nplugin = \"fixture\"\nwait-time-secs = 1\n",
            redis.url(),
            unique_namespace("readyz")
        ),
    );
    let host = HostProcess::start_consuming(&config);
    let admin = host.admin_addr();
    let ready = |status: u16, _: &str| status == 200;
    let (_, body) = wait_for(admin, "/readyz", Duration::from_secs(20), ready);
    assert_eq!(body.trim(), r#"{"ready":true,"reasons":[]}"#);

    redis.kill();
    let (_, body) = wait_for(admin, "/readyz", Duration::from_secs(20), |status, _| {
        status == 503
    });
    let reasons: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reasons["ready"], false);
    let reasons = reasons["reasons"].as_array().unwrap();
    assert!(
        reasons.len() == 1
            && reasons[0]
                .as_str()
                .unwrap()
                .starts_with("idempotency store: "),
        "{body}"
    );
    assert_eq!(
        get(admin, "/healthz").0,
        200,
        "still live: a restart cures nothing"
    );

    redis.restart();
    wait_for(admin, "/readyz", Duration::from_secs(30), ready);

    // A handler asleep keeps the host draining after SIGTERM: not ready meanwhile.
    use qhost::sources::QueueSource as _;
    let sleeper = Outgoing::new("jobs", b"sleep:100000".to_vec());
    env.queue().send(&[sleeper]).await.unwrap();
    wait_for(admin, "/metrics", Duration::from_secs(20), |_, body| {
        sample(body, "qhost_messages_in_flight", &[]) == Some(1.0)
    });
    host.terminate();
    let (_, body) = wait_for(admin, "/readyz", Duration::from_secs(10), |status, _| {
        status == 503
    });
    assert!(
        body.contains("draining: shutting down after a signal"),
        "{body}"
    );
    assert_eq!(get(admin, "/healthz").0, 200);
    let (status, summary) = host
        .stop_now(Duration::from_secs(20))
        .expect("a second signal ends the drain");
    assert!(status.success(), "{status}");
    assert_eq!(
        qhost_e2e::processes::summary_column(&summary, "jobs", "released"),
        1,
        "{summary}"
    );
}
