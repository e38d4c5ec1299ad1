//! The console's fleet, on real hosts sharing a real Redis and a real SQS-compatible server:
//! two hosts show as two in the fleet table (in a real browser), a queue paused from the page
//! stops being received on both and runs once resumed through the API, a forged action is
//! refused, and a host killed with SIGKILL shows as gone within its heartbeat.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fantoccini::Locator;
use qhost_e2e::admin::{get, post, post_as, wait_for};
use qhost_e2e::browser::Browser;
use qhost_e2e::harness::TestEnv;
use qhost_e2e::harness::send_all;
use qhost_e2e::processes::{HostProcess, run_with_config};
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{create_queue, fleet_host_config, sdk_config, unique};
use serde_json::Value;

const TOKEN: &str = "fleet-console-token-0123456789";

/// Waits (off the async threads) until `GET path` answers JSON for which `done` holds.
async fn until(
    admin: SocketAddr,
    path: &str,
    done: impl Fn(&Value) -> bool + Send + 'static,
) -> Value {
    let path = path.to_string();
    let (_, body) = tokio::task::spawn_blocking(move || {
        wait_for(admin, &path, Duration::from_secs(60), |status, body| {
            status == 200 && done(&serde_json::from_str(body).unwrap_or_default())
        })
    })
    .await
    .expect("the wait finished");
    serde_json::from_str(&body).expect("JSON")
}

fn json(admin: SocketAddr, path: &str) -> Value {
    let (status, body) = get(admin, path);
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).expect("JSON")
}

/// The `received` of `jobs` on one host.
fn received(admin: SocketAddr) -> u64 {
    json(admin, "/api/queues")[0]["totals"]["received"]
        .as_u64()
        .expect("a count")
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_make_a_fleet_a_pause_holds_both_and_a_killed_host_is_gone() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let jobs = unique("fleet-console");
    create_queue(&jobs, &[]).await;
    create_queue(&format!("{jobs}-dlq"), &[]).await;
    let redis = format!(
        "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"\n[admin]\ntoken = \"{TOKEN}\"",
        shared_url(),
        unique_namespace("fleet-console")
    );
    let configs: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|name| fleet_host_config(&env, name, 4, &redis, (&jobs, "fixture")))
        .collect();
    let config_a = configs[0].clone();
    let (a, b) = tokio::task::spawn_blocking(move || {
        (
            HostProcess::start_consuming(&configs[0]),
            HostProcess::start_consuming(&configs[1]),
        )
    })
    .await
    .unwrap();
    let (admin_a, admin_b) = (a.admin_addr(), b.admin_addr());
    let (pid_b, pid_a) = (b.pid(), a.pid());
    let fleet = until(admin_a, "/api/fleet", |v| {
        let hosts = v["hosts"].as_array().cloned().unwrap_or_default();
        hosts.len() == 2 && hosts.iter().all(|h| h["state"] == "live")
    })
    .await;
    assert!(
        fleet["this_host"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/{pid_a}")),
        "{fleet}"
    );

    // The fleet table in the browser: two live hosts, this one first.
    let browser = Browser::open(&format!("http://{admin_a}/")).await;
    let rows = browser
        .eval("return document.querySelectorAll('#fleet tr[data-host]').length")
        .await;
    assert_eq!(rows, 2, "two hosts share the store");
    assert_eq!(browser.text("#fleet tr[data-host] td.state").await, "live");
    assert!(
        browser
            .text("#fleet tr[data-host]")
            .await
            .contains("(this host)")
    );

    // Pause from the page, with the token typed into its form.
    let form = (browser.client)
        .form(Locator::Css("tr[data-queue] form.pause"))
        .await
        .expect("a pause button beside the queue");
    form.set_by_name("token", TOKEN).await.unwrap();
    form.submit().await.unwrap();
    let done = (browser.client.wait())
        .for_element(Locator::Id("done"))
        .await
        .unwrap();
    let said = done.text().await.unwrap();
    assert!(
        said.contains("paused: every host stops receiving it"),
        "{said}"
    );
    for admin in [admin_a, admin_b] {
        until(admin, "/api/queues", |v| v[0]["paused"]["by"] == "console").await;
    }
    // A receive already waiting when the pause came gives its messages back; then nothing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sqs = qhost::sources::SqsQueue::from_sdk_config(&sdk_config());
    send_all(&sqs, &jobs, &["ack"; 20], &[]).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        (received(admin_a), received(admin_b)),
        (0, 0),
        "paused on both hosts: nothing received"
    );
    browser
        .client
        .goto(&format!("http://{admin_a}/"))
        .await
        .unwrap();
    assert!(
        browser
            .text("tr[data-queue] .paused")
            .await
            .contains("paused by console")
    );

    // A forged action: no token, or a wrong one. The queue stays paused.
    let (status, _) = post(admin_a, &format!("/api/resume?queue={jobs}"), "");
    assert_eq!(status, 403);
    let (status, body) = post(
        admin_b,
        "/actions/resume",
        &format!("queue={jobs}&token=fleet-console-token-wrong-0000"),
    );
    assert_eq!(status, 403, "{body}");
    assert!(json(admin_b, "/api/queues")[0]["paused"].is_object());

    // Resume through the API: both hosts receive again, and the twenty run once.
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let (status, body) = post_as(admin_b, &format!("/api/resume?queue={jobs}"), "", &bearer);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (&answer["action"], &answer["changed"]),
        (&"resume".into(), &true.into()),
        "{answer}"
    );
    let queues = until(admin_a, "/api/queues", |v| v[0]["fleet"]["acked"] == 20).await;
    assert!(queues[0]["paused"].is_null(), "{queues}");

    // Host b killed: it goes silent, and host a shows it gone within its heartbeat.
    b.kill();
    let fleet = until(admin_a, "/api/fleet", move |v| {
        (v["hosts"].as_array().into_iter().flatten()).any(|h| {
            h["id"]
                .as_str()
                .is_some_and(|id| id.ends_with(&format!("/{pid_b}")))
                && h["state"] == "gone"
        })
    })
    .await;
    let alive: Vec<&Value> = (fleet["hosts"].as_array().unwrap().iter())
        .filter(|h| h["state"] == "live")
        .collect();
    assert_eq!(alive.len(), 1, "{fleet}");
    browser.client.refresh().await.unwrap();
    let states = browser
        .eval("return Array.from(document.querySelectorAll('#fleet td.state')).map(e => e.textContent).join(',')")
        .await;
    assert_eq!(states, "live,gone");
    assert_eq!(browser.console_errors().await, Vec::<String>::new());
    a.stop();

    // Host a shut down in order: its last entry says so, as `qhost fleet` reads the store.
    let (ok, out, err) = run_with_config(&config_a, &["fleet"]);
    assert!(ok, "{err}");
    let line = (out.lines())
        .find(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|id| id.ends_with(&format!("/{pid_a}")))
        })
        .unwrap_or_else(|| panic!("host a in {out}"));
    assert_eq!(line.split_whitespace().nth(1), Some("stopped"), "{out}");
}
