//! The `email-sender` examples, Rust, JavaScript and Python, as shipped (their own manifests, with the
//! grant and the API's URL pointed at an API server on loopback): each reminder reaches the
//! API under one idempotency key however often it is delivered or retried, with the API key
//! from a secret, and the API's answers decide the outcome.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use qhost_e2e::api_server::{ApiServer, Recorded, Reply};
use qhost_e2e::harness::{Running, TestEnv, contents, queue_toml, send_all};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::{guest_bytes, guest_manifest};

const API_KEY: &str = "sk-test-7f3e1";

fn reminder(id: &str, email: &str) -> String {
    format!(r#"{{"reminder-id":"{id}","email":"{email}","customer":"C","month":"2026-12"}}"#)
}

/// The shipped manifest with its grant and URL moved to `api`.
fn pointed_at(manifest: &str, api: &ApiServer) -> String {
    let manifest = manifest
        .replace(
            "\"https://api.sendgrid.com\"",
            &format!("\"http://{}\"", api.addr()),
        )
        .replace(
            "\"https://api.sendgrid.com/v3/mail/send\"",
            &format!("\"{}\"", api.url("/v3/mail/send")),
        );
    assert!(manifest.contains(&api.url("/v3/mail/send")), "{manifest}");
    manifest
}

/// An API that answers 503 to the first request for `flaky`'s key, 400 to `bad`, 202 else.
fn email_api(plugin: &'static str) -> ApiServer {
    ApiServer::answering("127.0.0.1", move |req, before| {
        let key = req.header("idempotency-key").unwrap_or_default();
        let seen = before
            .iter()
            .any(|r| r.header("idempotency-key") == Some(key));
        if key == format!("{plugin}:dec-bob/http/0") && !seen {
            Reply::Status(503)
        } else if String::from_utf8_lossy(&req.body).contains("bad@") {
            Reply::Status(400)
        } else {
            Reply::Status(202)
        }
    })
}

/// Requests by idempotency key.
fn by_key(requests: &[Recorded]) -> BTreeMap<String, Vec<&Recorded>> {
    let mut keys: BTreeMap<String, Vec<&Recorded>> = BTreeMap::new();
    for r in requests {
        let key = r.header("idempotency-key").unwrap_or("(none)").to_string();
        keys.entry(key).or_default().push(r);
    }
    keys
}

/// What both versions must show once every reminder is done.
fn check(plugin: &str, requests: &[Recorded]) {
    let keys = by_key(requests);
    let expected: Vec<String> = ["dec-alice", "dec-bad", "dec-bob", "dec-carol"]
        .iter()
        .map(|id| format!("{plugin}:{id}/http/0"))
        .collect();
    assert_eq!(
        keys.keys().cloned().collect::<Vec<_>>(),
        expected,
        "one key per reminder: {keys:#?}"
    );
    for (key, runs) in &keys {
        // bob's first request met a 503 and was retried under the same key.
        let want = if key.contains("dec-bob") { 2 } else { 1 };
        assert_eq!(runs.len(), want, "{key}: {runs:#?}");
        for r in runs {
            assert_eq!(r.method, "POST");
            assert_eq!(r.path, "/v3/mail/send");
            assert_eq!(
                r.header("authorization"),
                Some(&*format!("Bearer {API_KEY}"))
            );
            assert_eq!(r.header("content-type"), Some("application/json"));
            assert_eq!(
                r.header("content-length"),
                Some(&*r.body.len().to_string()),
                "the body goes with its length"
            );
            assert!(r.header("qhost-fencing-token").is_some());
            let body: serde_json::Value = serde_json::from_slice(&r.body).expect("JSON");
            assert_eq!(body["subject"], "Your 2026-12 reminder", "{body}");
        }
    }
}

async fn send_reminders(env: &TestEnv) {
    let alice = reminder("dec-alice", "alice@example.com");
    let bodies = [
        alice.as_str(),
        alice.as_str(), // a producer's duplicate
        &reminder("dec-bob", "bob@example.com"),
        &reminder("dec-carol", "carol@example.com"),
        &reminder("dec-bad", "bad@example.com"),
    ];
    send_all(&env.queue(), "reminders", &bodies, &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rust_email_sender_calls_the_api_once_per_reminder_with_its_secret() {
    let api = email_api("email-sender");
    let env = TestEnv::new();
    let shipped =
        std::fs::read_to_string(qhost_e2e::workspace().join("plugins/email-sender/qhost.toml"))
            .expect("the shipped manifest");
    env.install("email-sender", "email-sender", &pointed_at(&shipped, &api));
    let config = env.config_file(&format!(
        "[secrets]\nenv = [\"EMAIL_API_KEY\"]\n{}",
        queue_toml("reminders", "email-sender")
    ));
    send_reminders(&env).await;
    let host = tokio::task::spawn_blocking(move || {
        HostProcess::start_consuming_in(&config, &[], &[("EMAIL_API_KEY", API_KEY)])
    })
    .await
    .expect("qhost started");
    let queue = env.queue();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !contents(&queue, "reminders").await.is_empty() || api.requests().len() < 5 {
        assert!(Instant::now() < deadline, "not done: {:#?}", api.requests());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = host.stop();
    check("email-sender", &api.requests());
    let dead = contents(&queue, "reminders-dlq").await;
    assert_eq!(
        dead.len(),
        1,
        "the reminder the API refused is dead-lettered"
    );
    assert!(
        String::from_utf8_lossy(&dead[0].body).contains("bad@example.com"),
        "{dead:?}"
    );
    assert!(!log.contains(API_KEY), "the secret reached the log");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_email_sender_calls_the_api_with_fetch_once_per_reminder() {
    interpreted("email-sender-js").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_email_sender_calls_the_api_once_per_reminder() {
    interpreted("email-sender-py").await;
}

/// An interpreter guest's email-sender, in a host in this process.
async fn interpreted(plugin: &'static str) {
    let api = email_api(plugin);
    let env = TestEnv::with_shared_cache();
    // The key as text here: the secret's path from the environment is the Rust test's.
    let manifest = pointed_at(&guest_manifest(plugin), &api)
        .replace("{ env = \"EMAIL_API_KEY\" }", &format!("\"{API_KEY}\""));
    env.install_bytes(plugin, &guest_bytes(plugin), &manifest);
    let config = env.config(&queue_toml("reminders", plugin));
    send_reminders(&env).await;
    let running = Running::start(env.host(config).await);
    running
        .wait_for(Duration::from_secs(120), |h| {
            let total = h.stats().total();
            total.acked == 3 && total.dead_lettered == 1
        })
        .await;
    let host = running.stop().await;
    let total = host.stats().total();
    assert_eq!((total.acked, total.dead_lettered), (3, 1), "{total:?}");
    check(plugin, &api.requests());
}
