//! Outbound HTTP from a plugin, against an API server on loopback that records every request:
//! the host's idempotency key reaches the API and is the same on every re-run of a message
//! (duplicates, a handler's retry, a host killed mid-request); what the grant does not allow is
//! refused inside the guest (its error is its outcome) and never reaches a listener; a slow API
//! fails at the handler's deadline and the message is retried; a response over the cap and one
//! request too many are errors in the guest.
//!
//! No request in these tests can leave the machine: every URL is a loopback address, and the
//! rules about other ranges (private, link-local, the metadata endpoint) are unit tests of
//! `runtime::http::address`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use qhost_e2e::api_server::{ApiServer, Recorded, Reply};
use qhost_e2e::harness::{Running, TestEnv, body_texts, contents, queue_toml, send_all};
use qhost_e2e::processes::HostProcess;

/// Requests so far carrying `key` as their idempotency key.
fn with_key<'a>(requests: &'a [Recorded], key: &str) -> Vec<&'a Recorded> {
    requests
        .iter()
        .filter(|r| r.header("idempotency-key") == Some(key))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_re_run_of_a_message_repeats_its_idempotency_key() {
    const JOBS: usize = 12;
    const SLOW: usize = 3;
    // Each key's first request gets a 503 (the handler asks for a retry); its second succeeds,
    // slowly for the first SLOW jobs, so the host is killed while those are in flight.
    let api = ApiServer::answering("127.0.0.1", |req, before| {
        let key = req.header("idempotency-key").unwrap_or_default();
        let seen = before
            .iter()
            .filter(|r| r.header("idempotency-key") == Some(key))
            .count();
        let slow = key
            .strip_prefix("mailer:job-")
            .and_then(|k| k.strip_suffix("/http/0"))
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|n| n < SLOW);
        match seen {
            0 => Reply::Status(503),
            1 if slow => Reply::After(Duration::from_secs(30)),
            _ => Reply::Status(200),
        }
    });
    let env = TestEnv::new();
    let manifest = format!(
        "[idempotency]\nkey = \"attribute:job\"\n[capabilities]\nhttp = [\"http://{}\"]\n\
         [limits]\ntimeout-ms = 60000\n",
        api.addr()
    );
    env.install("mailer", "fixture", &manifest);
    let config = env.config_file(&queue_toml("reminders", "mailer"));
    // Every job twice: a producer's duplicate.
    let url = api.url("/v3/mail/send");
    for _ in 0..2 {
        for job in 0..JOBS {
            let attr = qhost::Attribute::string("job", format!("job-{job}"));
            let body = format!("post:{url}");
            send_all(&env.queue(), "reminders", &[&body], &[attr]).await;
        }
    }
    let (first_config, second_config) = (config.clone(), config);
    let host = tokio::task::spawn_blocking(move || HostProcess::start_consuming(&first_config))
        .await
        .expect("qhost started");
    // Killed once every slow job's second request is in flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let requests = api.requests();
        let slow_in_flight = (0..SLOW)
            .filter(|j| {
                let key = format!("mailer:job-{j}/http/0");
                with_key(&requests, &key).len() >= 2
            })
            .count();
        if slow_in_flight == SLOW {
            break;
        }
        assert!(Instant::now() < deadline, "the slow requests never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.kill();
    let restarted =
        tokio::task::spawn_blocking(move || HostProcess::start_consuming(&second_config))
            .await
            .expect("qhost restarted");
    let queue = env.queue();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !contents(&queue, "reminders").await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the reminders were not all handled: {:?}",
            api.requests().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    restarted.stop();

    let requests = api.requests();
    let keys: BTreeSet<&str> = requests
        .iter()
        .map(|r| {
            r.header("idempotency-key")
                .expect("every request has a key")
        })
        .collect();
    let expected: BTreeSet<String> = (0..JOBS)
        .map(|j| format!("mailer:job-{j}/http/0"))
        .collect();
    assert_eq!(
        keys,
        expected.iter().map(String::as_str).collect(),
        "exactly one distinct key per reminder"
    );
    for key in &expected {
        let runs = with_key(&requests, key);
        let slow = (0..SLOW).any(|j| key.contains(&format!(":job-{j}/")));
        // A 503 and its retry; for the slow jobs also the run the kill cut short (which any
        // other job may have had too, if the kill found it between response and ack).
        let (least, most) = if slow { (3, 3) } else { (2, 3) };
        assert!(
            (least..=most).contains(&runs.len()),
            "{key}: {} requests: {runs:?}",
            runs.len()
        );
        let tokens: Vec<u64> = runs
            .iter()
            .map(|r| {
                r.header("qhost-fencing-token")
                    .and_then(|t| t.parse().ok())
                    .expect("a fencing token")
            })
            .collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{key}: each re-run holds a newer lease: {tokens:?}"
        );
        assert!(
            runs.iter()
                .all(|r| r.method == "POST" && r.path == "/v3/mail/send")
        );
    }
}

/// A plugin granted only `api`, with tight limits.
fn granted(env: &TestEnv, name: &str, api: &ApiServer, extra_grants: &[&str]) {
    let mut grants = vec![format!("\"http://{}\"", api.addr())];
    grants.extend(extra_grants.iter().map(|g| format!("\"{g}\"")));
    let manifest = format!(
        "[capabilities]\nhttp = [{}]\n[limits]\nhttp-requests = 2\nhttp-response-bytes = 4096\n",
        grants.join(", ")
    );
    env.install(name, "fixture", &manifest);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_grant_does_not_allow_fails_inside_the_guest_and_reaches_no_listener() {
    // The second listener is on another loopback address the grant does not name.
    let outside = ApiServer::answering("127.0.0.2", |_, _| Reply::Status(200));
    let to_outside = outside.url("/");
    let api = ApiServer::answering("127.0.0.1", move |req, _| match req.path.as_str() {
        "/redirect" => Reply::Redirect(to_outside.clone()),
        "/big" => Reply::Body(5000),
        "/streamed" => Reply::Streamed(64 * 1024),
        _ => Reply::Status(200),
    });
    let env = TestEnv::new();
    let port = api.addr().port();
    // `localhost` is granted by name: it resolves to loopback, which only a literal grant opens.
    granted(&env, "caller", &api, &[&format!("http://localhost:{port}")]);
    env.install("ungranted", "fixture", "");
    let config = env.config(&format!(
        "{}{}",
        queue_toml("calls", "caller"),
        queue_toml("plain", "ungranted")
    ));
    let cases = [
        ("ok", format!("get:ok:{}", api.url("/hello")), "200:2"),
        (
            "outside",
            format!("get:outside:{}", outside.url("/")),
            "ERR:HTTP-request-denied",
        ),
        (
            "by-name",
            format!("get:by-name:http://localhost:{port}/"),
            "ERR:destination-IP-prohibited",
        ),
        (
            "redirect",
            format!("get:redirect:{}", api.url("/redirect")),
            "302:0",
        ),
        (
            "followed",
            format!("follow:followed:{}", api.url("/redirect")),
            "ERR:HTTP-request-denied",
        ),
        (
            "too-many",
            format!("get-n:too-many:3:{}", api.url("/n")),
            "ERR:connection-limit-reached",
        ),
        (
            "big",
            format!("get:big:{}", api.url("/big")),
            "ERR:HTTP-response-body-size",
        ),
        (
            "streamed",
            format!("get:streamed:{}", api.url("/streamed")),
            "ERR:HTTP-response-body-size",
        ),
        (
            "other-scheme",
            format!("get:other-scheme:https://{}/", api.addr()),
            "ERR:HTTP-request-denied",
        ),
    ];
    let calls: Vec<&str> = cases.iter().map(|(_, body, _)| body.as_str()).collect();
    send_all(&env.queue(), "calls", &calls, &[]).await;
    let plain = format!("get:plain-out:{}", api.url("/from-ungranted"));
    send_all(&env.queue(), "plain", &[&plain], &[]).await;
    let running = Running::start(env.host(config).await);
    let queue = env.queue();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut results = BTreeMap::new();
    for (out, _, _) in cases
        .iter()
        .map(|(o, b, e)| (*o, b, e))
        .chain([("plain-out", &plain, &"")])
    {
        loop {
            let got = body_texts(&contents(&queue, out).await);
            if let Some(first) = got.first() {
                results.insert(out.to_string(), first.clone());
                break;
            }
            assert!(Instant::now() < deadline, "no result in {out}: {results:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let metrics = running.host().metrics().encode();
    running.stop().await;
    for (out, _, expected) in &cases {
        assert_eq!(results[*out], *expected, "{out}");
    }
    assert_eq!(
        results["plain-out"], "ERR:HTTP-request-denied",
        "no grant, no HTTP"
    );
    assert_eq!(
        outside.connections(),
        0,
        "the listener outside the grant saw a connection"
    );
    let paths: Vec<String> = api.requests().into_iter().map(|r| r.path).collect();
    assert!(
        !paths.iter().any(|p| p == "/from-ungranted"),
        "the plugin without a grant reached the API: {paths:?}"
    );
    // get-n made 2 requests (the limit) before the third was refused.
    assert_eq!(paths.iter().filter(|p| *p == "/n").count(), 2, "{paths:?}");
    for (result, at_least) in [
        ("sent", 6),
        ("denied", 3),
        ("prohibited", 1),
        ("too_many", 1),
        ("too_large", 2),
    ] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("qhost_http_requests_total{")
                    && l.contains("plugin=\"caller\"")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .unwrap_or_else(|| panic!("no {result} sample in\n{metrics}"));
        let value: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a count");
        assert!(value >= at_least, "{line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_api_fails_at_the_deadline_and_the_message_is_retried() {
    let api = ApiServer::answering("127.0.0.1", |_, before| {
        if before.is_empty() {
            Reply::After(Duration::from_secs(20))
        } else {
            Reply::Status(200)
        }
    });
    let env = TestEnv::new();
    let manifest = format!(
        "[capabilities]\nhttp = [\"http://{}\"]\n[limits]\ntimeout-ms = 1000\n",
        api.addr()
    );
    env.install("mailer", "fixture", &manifest);
    let config = env.config(&queue_toml("reminders", "mailer"));
    send_all(
        &env.queue(),
        "reminders",
        &[&format!("post:{}", api.url("/send"))],
        &[],
    )
    .await;
    let running = Running::start(env.host(config).await);
    running
        .wait_for(Duration::from_secs(60), |h| h.stats().total().acked == 1)
        .await;
    let host = running.stop().await;
    let total = host.stats().total();
    assert_eq!(total.acked, 1, "{total:?}");
    assert_eq!(total.dead_lettered, 0, "{total:?}");
    assert!(total.retried >= 1 && total.failures >= 1, "{total:?}");
    let requests = api.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(
        requests[0].header("idempotency-key"),
        requests[1].header("idempotency-key"),
        "the retry repeats the key"
    );
    let gap = requests[1].at.duration_since(requests[0].at);
    assert!(
        gap >= Duration::from_millis(900),
        "retried before the deadline: {gap:?}"
    );
    assert!(contents(&env.queue(), "reminders").await.is_empty());
}

/// Runs `body` through a fixture plugin with `manifest`, in a host with `config_extra`, and
/// returns what the fixture reported to its `out` queue.
async fn one_call(manifest: &str, config_extra: &str, body: &str) -> String {
    let env = TestEnv::new();
    env.install("caller", "fixture", manifest);
    let config = env.config(&format!(
        "{config_extra}\n{}",
        queue_toml("calls", "caller")
    ));
    send_all(&env.queue(), "calls", &[body], &[]).await;
    let running = Running::start(env.host(config).await);
    let queue = env.queue();
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        if let Some(first) = body_texts(&contents(&queue, "out").await)
            .into_iter()
            .next()
        {
            break first;
        }
        assert!(Instant::now() < deadline, "no result for {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    running.stop().await;
    result
}

#[tokio::test(flavor = "multi_thread")]
async fn https_to_a_private_ca_needs_its_ca_file() {
    let dir = tempfile::tempdir().expect("a certificate directory");
    let api = ApiServer::https(dir.path());
    let manifest = format!("[capabilities]\nhttp = [\"https://{}\"]\n", api.addr());
    let call = format!("get:out:https://{}/secure", api.addr());
    // The platform's roots do not know the test's CA.
    let untrusted = one_call(&manifest, "", &call).await;
    assert_eq!(untrusted, "ERR:TLS-certificate-error");
    assert!(
        api.requests().is_empty(),
        "a request went over an untrusted connection"
    );
    let ca = format!("[http]\nca-file = {:?}\n", dir.path().join("ca.crt"));
    assert_eq!(one_call(&manifest, &ca, &call).await, "200:2");
    assert_eq!(api.requests().len(), 1);
    // A CA file that cannot be read stops the host at start, naming it.
    let env = TestEnv::new();
    let missing = dir.path().join("missing-ca.pem");
    let config = env.config(&format!("[http]\nca-file = {missing:?}\n"));
    let err = qhost::Host::from_config(config)
        .await
        .expect_err("a missing CA file");
    assert!(format!("{err:#}").contains("missing-ca.pem"), "{err:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_idempotency_header_can_be_the_guest_s_renamed_or_off() {
    let api = ApiServer::start();
    let grant = format!("http = [\"http://{}\"]", api.addr());
    let url = api.url("/h");
    for (header, body) in [
        ("", format!("get-keyed:out:{url}")),
        (
            "idempotency-header = \"X-Request-Id\"",
            format!("get:out:{url}"),
        ),
        ("idempotency-header = \"\"", format!("get:out:{url}")),
    ] {
        let manifest = format!("[capabilities]\n{grant}\n{header}\n");
        assert_eq!(one_call(&manifest, "", &body).await, "200:2", "{manifest}");
    }
    let requests = api.requests();
    assert_eq!(requests.len(), 3);
    // The guest's own key is kept.
    assert_eq!(requests[0].header("idempotency-key"), Some("guest-chosen"));
    // Renamed: the host's key under the manifest's name, and no Idempotency-Key.
    assert_eq!(requests[1].header("idempotency-key"), None);
    let key = requests[1]
        .header("x-request-id")
        .expect("the renamed header");
    assert!(
        key.starts_with("caller:") && key.ends_with("/http/0"),
        "{key}"
    );
    // Off: no key at all; the fencing token always goes.
    assert_eq!(requests[2].header("idempotency-key"), None);
    assert!(
        requests
            .iter()
            .all(|r| r.header("qhost-fencing-token").is_some())
    );
}
