//! The console in a real browser (headless Chromium over WebDriver): against a `qhost run` on
//! the embedded queue, the page shows a known run (counts, the dead letter and its reason, the
//! plugin's version after a hot reload), a hostile message body stays text (no script runs,
//! nothing is refused by the page's policy), and a redrive through the page with the admin
//! token runs the message again; without the token there is no button and a forged POST is
//! refused. Against the SQS-compatible server, the page shows the queue's counts and depth.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fantoccini::Locator;
use qhost::Outgoing;
use qhost::sources::QueueSource as _;
use qhost_e2e::admin::{post, post_as, wait_for};
use qhost_e2e::browser::Browser;
use qhost_e2e::harness::{Running, TestEnv, contents};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::sqs_server::{create_queue, endpoint, sdk_config, unique};
use serde_json::Value;

const TOKEN: &str = "console-test-token-0123456789";
/// A message the fixture rejects, whose reason and body are markup.
const HOSTILE: &str = "reject:<script>document.title='owned'</script><img src=x onerror=alert(1)>";

/// A configuration file consuming `jobs` with the plugin `fixture`, and `extra`.
fn config_file(env: &TestEnv, extra: &str) -> PathBuf {
    let path = env.plugins_dir().with_file_name("qhost.toml");
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\n{extra}\n[[queue]]\nname = \"jobs\"\nplugin = \"fixture\"\n",
        env.plugins_dir(),
        env.data_dir()
    );
    std::fs::write(&path, text).expect("writing the configuration");
    path
}

/// Waits (off the async threads) until `GET path` answers JSON for which `done` holds.
async fn api_until(
    admin: std::net::SocketAddr,
    path: &'static str,
    done: fn(&Value) -> bool,
) -> Value {
    let (_, body) = tokio::task::spawn_blocking(move || {
        wait_for(admin, path, Duration::from_secs(60), |status, body| {
            status == 200 && done(&serde_json::from_str(body).unwrap_or_default())
        })
    })
    .await
    .expect("the wait finished");
    serde_json::from_str(&body).expect("JSON")
}

async fn start(config: &Path) -> HostProcess {
    let config = config.to_path_buf();
    tokio::task::spawn_blocking(move || HostProcess::start_consuming(&config))
        .await
        .expect("the host started")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_a_run_escapes_a_hostile_body_and_redrives_with_the_token() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 1\n");
    // The new build forwards to `next`, which only the test reads: declared, so it exists.
    let extra = format!("[admin]\ntoken = \"{TOKEN}\"\n[source]\nqueues = [\"next\"]");
    let config = config_file(&env, &extra);
    let queue = env.queue();
    let acks: Vec<Outgoing> = (0..3).map(|_| Outgoing::new("jobs", "ack")).collect();
    queue.send(&acks).await.unwrap();
    queue.send(&[Outgoing::new("jobs", HOSTILE)]).await.unwrap();
    let host = start(&config).await;
    let admin = host.admin_addr();
    api_until(admin, "/api/queues", |v| {
        v[0]["totals"]["acked"] == 3 && v[0]["totals"]["dead"] == 1
    })
    .await;

    let browser = Browser::open(&format!("http://{admin}/")).await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        "qhost console",
        "no script of the message ran"
    );
    assert_eq!(browser.text("tr[data-queue=jobs] td.acked").await, "3");
    assert_eq!(browser.text("tr[data-queue=jobs] td.dead").await, "1");
    let reason = browser.text("table.dead-letters td.reason").await;
    assert!(
        reason.contains("<script>document.title='owned'</script>"),
        "shown as text: {reason}"
    );
    let preview = browser
        .eval("return document.querySelector('pre.preview').textContent")
        .await;
    assert_eq!(preview, HOSTILE, "the body, as text");
    let images = browser
        .eval("return document.querySelectorAll('img').length")
        .await;
    assert_eq!(images, 0, "the body's <img> is not an element");
    assert_eq!(
        browser.console_errors().await,
        Vec::<String>::new(),
        "nothing failed or was refused"
    );
    let first = browser.text("tr[data-plugin=fixture] code.version").await;

    // A new build of the plugin (one that acks and forwards its body to `next`), dropped in.
    let plugin = env.plugins_dir().join("fixture.wasm");
    let staged = plugin.with_extension("wasm.new");
    std::fs::write(&staged, qhost_e2e::plugin_bytes("prev-wit")).unwrap();
    std::fs::rename(&staged, &plugin).unwrap();
    let plugins = api_until(admin, "/api/plugins", |v| v[0]["loads"] == 2).await;
    let second = plugins[0]["version"].as_str().unwrap().to_string();
    assert_ne!(first, second);
    browser.client.refresh().await.unwrap();
    assert_eq!(
        browser.text("tr[data-plugin=fixture] code.version").await,
        second
    );

    // Redrive the dead letter through the page: the token typed into its form.
    let form = (browser.client)
        .form(Locator::Css("table.dead-letters form.redrive"))
        .await
        .expect("a redrive button beside the dead letter");
    form.set_by_name("token", TOKEN).await.unwrap();
    form.submit().await.unwrap();
    let done = (browser.client.wait())
        .for_element(Locator::Id("redriven"))
        .await
        .unwrap();
    let said = done.text().await.unwrap();
    assert!(
        said.starts_with("1 dead letter(s) of jobs sent back"),
        "{said}"
    );
    api_until(admin, "/api/queues", |v| v[0]["totals"]["acked"] == 4).await;
    let forwarded = contents(&env.queue(), "next").await;
    let bodies: Vec<&[u8]> = forwarded.iter().map(|m| m.body.as_slice()).collect();
    assert_eq!(
        bodies,
        [HOSTILE.as_bytes()],
        "the redriven message ran on the new version, once"
    );
    assert!(
        contents(&env.queue(), "jobs-dlq").await.is_empty(),
        "and left the dead-letter queue"
    );

    // The API's door to the same action, for scripts: the token as a bearer.
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    let (status, body) = post_as(admin, "/api/redrive?queue=jobs", "", &bearer);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer,
        serde_json::json!({"queue": "jobs", "moved": [], "left": []})
    );
    let (status, _) = post(admin, "/api/redrive?queue=jobs", "");
    assert_eq!(status, 403, "no bearer, no action");

    // Purging the dead-letter queue: a letter there, then none.
    env.queue()
        .send(&[Outgoing::new("jobs-dlq", "a letter to purge")])
        .await
        .unwrap();
    let (status, body) = post_as(admin, "/api/purge-dead-letters?queue=jobs", "", &bearer);
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        answer["message"], "jobs-dlq: 1 dead letter(s) deleted",
        "{answer}"
    );
    assert!(contents(&env.queue(), "jobs-dlq").await.is_empty());
    let (status, body) = post_as(admin, "/api/promote?plugin=fixture", "", &bearer);
    assert_eq!(status, 404, "no canary runs: {body}");
    assert!(body.contains("has no canary running"), "{body}");

    // A forged POST: no token, or a wrong one.
    for form in [
        "queue=jobs",
        "queue=jobs&token=console-test-token-wrong-000000",
    ] {
        let (status, body) = post(admin, "/actions/redrive", form);
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("needs the admin token"), "{body}");
    }
    host.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_the_console_has_no_buttons_and_refuses_actions() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 1\n");
    let config = config_file(&env, "");
    env.queue()
        .send(&[Outgoing::new("jobs", "reject:no")])
        .await
        .unwrap();
    let host = start(&config).await;
    let admin = host.admin_addr();
    api_until(admin, "/api/queues", |v| v[0]["totals"]["dead"] == 1).await;

    let browser = Browser::open(&format!("http://{admin}/")).await;
    assert_eq!(browser.text("table.dead-letters td.reason").await, "no");
    let forms = browser
        .eval("return document.querySelectorAll('form').length")
        .await;
    assert_eq!(forms, 0, "a read-only console has no buttons");
    let note = browser.text("p.read-only").await;
    assert!(
        note.contains("pause and resume a queue") && note.contains("[admin] token"),
        "it says what a token would enable: {note}"
    );
    for (path, form) in [
        ("/actions/pause", format!("queue=jobs&token={TOKEN}")),
        (
            "/actions/purge-dead-letters",
            format!("queue=jobs&token={TOKEN}"),
        ),
        ("/actions/promote", format!("plugin=fixture&token={TOKEN}")),
    ] {
        let (status, body) = post(admin, path, &form);
        assert_eq!(status, 403, "{path}: {body}");
    }
    let (status, body) = post(
        admin,
        "/actions/redrive",
        &format!("queue=jobs&token={TOKEN}"),
    );
    assert_eq!(status, 403);
    assert!(body.contains("the console is read-only"), "{body}");
    assert_eq!(
        contents(&env.queue(), "jobs-dlq").await.len(),
        1,
        "the dead letter stays"
    );
    host.stop();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_an_sqs_queue_s_counts_and_depth() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let queue = unique("console");
    create_queue(&queue, &[]).await;
    create_queue(&format!("{queue}-dlq"), &[]).await;
    let sqs = Arc::new(qhost::sources::SqsQueue::from_sdk_config(&sdk_config()));
    let bodies: Vec<Outgoing> = (0..5).map(|_| Outgoing::new(&queue, "ack")).collect();
    sqs.send(&bodies).await.unwrap();
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[queue]]\nname = \"{queue}\"\nplugin = \"fixture\"\nwait-time-secs = 1\n",
        endpoint()
    ));
    let admin = qhost::AdminServer::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let host = qhost::Host::with_source(config, sqs)
        .await
        .expect("host starts");
    admin.serve_host(host.admin_view());
    let running = Running::start(host);
    let addr = admin.local_addr();
    api_until(addr, "/api/queues", |v| {
        v[0]["totals"]["acked"] == 5 && v[0]["depth"]["visible"] == 0
    })
    .await;

    let browser = Browser::open(&format!("http://{addr}/")).await;
    let row = format!("tr[data-queue='{queue}']");
    assert_eq!(browser.text(&format!("{row} td.acked")).await, "5");
    assert_eq!(browser.text(&format!("{row} td.visible")).await, "0");
    assert_eq!(
        browser.text(&format!("{row} .dead-letter-depth")).await,
        "0"
    );
    assert_eq!(browser.console_errors().await, Vec::<String>::new());
    running.stop().await;
}
