//! The operator's console of a real `qhost run` on the embedded queue: the page and its JSON
//! API show what happened (counts, the plugin and its version, the dead letter and its reason),
//! and what a message says is shown as text, never as markup.

use std::time::Duration;

use qhost::Outgoing;
use qhost::sources::QueueSource as _;
use qhost_e2e::admin::{get, wait_for};
use qhost_e2e::harness::TestEnv;
use qhost_e2e::processes::HostProcess;
use serde_json::Value;

/// A configuration file for `env` consuming `jobs` with the fixture plugin.
fn config_file(env: &TestEnv) -> std::path::PathBuf {
    let path = env.plugins_dir().with_file_name("qhost.toml");
    let text = format!(
        "plugins-dir = {:?}\ndata-dir = {:?}\n[[queue]]\nname = \"jobs\"\nplugin = \"fixture\"\n",
        env.plugins_dir(),
        env.data_dir()
    );
    std::fs::write(&path, text).expect("writing the configuration");
    path
}

/// What a message says, sent to be rejected: its reason and its body are both markup.
const HOSTILE: &str = "reject:<script>document.title='owned'</script><img src=x onerror=alert(1)>";

#[tokio::test(flavor = "multi_thread")]
async fn the_console_shows_what_happened_and_escapes_what_messages_say() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "[limits]\nmax-attempts = 1\n");
    let config = config_file(&env);
    let queue = env.queue();
    let acks: Vec<Outgoing> = (0..3).map(|_| Outgoing::new("jobs", "ack")).collect();
    queue.send(&acks).await.unwrap();
    queue
        .send_copies(&[Outgoing::new("jobs", "ack")], 2)
        .await
        .unwrap();
    queue.send(&[Outgoing::new("jobs", HOSTILE)]).await.unwrap();

    let host = tokio::task::spawn_blocking(move || HostProcess::start_consuming(&config))
        .await
        .unwrap();
    let admin = host.admin_addr();
    let (_, queues) = tokio::task::spawn_blocking(move || {
        wait_for(
            admin,
            "/api/queues",
            Duration::from_secs(60),
            |status, body| {
                let v: Value = serde_json::from_str(body).unwrap_or_default();
                let t = &v[0]["totals"];
                status == 200 && t["acked"] == 4 && t["dead"] == 1 && t["duplicate"] == 1
            },
        )
    })
    .await
    .unwrap();
    let queues: Value = serde_json::from_str(&queues).unwrap();
    let jobs = &queues[0];
    assert_eq!(
        (&jobs["name"], &jobs["plugin"], &jobs["format"]),
        (
            &Value::from("jobs"),
            &Value::from("fixture"),
            &Value::from("qhost")
        ),
        "{jobs}"
    );
    assert_eq!(jobs["ran"], 5, "{jobs}");
    // What the host did with its deliveries adds up to what it received.
    let t = &jobs["totals"];
    let fates = [
        "acked",
        "duplicate",
        "busy",
        "retried",
        "deferred",
        "dead",
        "released",
    ];
    let ended: u64 = (fates.iter().chain(&["skipped", "running"]))
        .map(|f| t[f].as_u64().unwrap())
        .sum();
    assert_eq!(Some(ended), t["received"].as_u64(), "{jobs}");
    // A copy that met the other's lease is put back and received again.
    assert!(jobs["totals"]["received"].as_u64().unwrap() >= 6, "{jobs}");
    assert_eq!(jobs["dead_letter_queue"], "jobs-dlq");

    let (status, plugins) = get(admin, "/api/plugins");
    assert_eq!(status, 200);
    let plugins: Value = serde_json::from_str(&plugins).unwrap();
    let fixture = &plugins[0];
    assert_eq!(
        (&fixture["name"], &fixture["loads"]),
        (&"fixture".into(), &1.into())
    );
    let version = fixture["version"].as_str().expect("a serving version");
    let loaded = fixture["loaded_at_ms"].as_u64().expect("when it loaded");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    assert!(loaded <= now.as_millis() as u64 && loaded + 120_000 > now.as_millis() as u64);
    assert_eq!(fixture["limits"]["max-attempts"], 1, "{fixture}");
    assert!(
        fixture["costs"]["calls"].as_u64().unwrap() >= 5,
        "{fixture}"
    );

    let (status, dead) = get(admin, "/api/dead-letters?queue=jobs");
    assert_eq!(status, 200);
    let dead: Value = serde_json::from_str(&dead).unwrap();
    assert_eq!(dead.as_array().unwrap().len(), 1, "{dead}");
    let letter = &dead[0];
    assert_eq!(letter["attempts"], 1);
    assert_eq!(
        letter["preview"], HOSTILE,
        "the API gives the body as it was"
    );
    assert!(
        letter["reason"].as_str().unwrap().contains("<script>"),
        "{letter}"
    );
    let (status, unknown) = get(admin, "/api/dead-letters?queue=nope");
    assert_eq!(status, 404);
    assert!(unknown.contains("no consumed queue `nope`"), "{unknown}");

    let (status, page) = get(admin, "/");
    assert_eq!(status, 200);
    assert!(page.contains("<tr data-queue=\"jobs\">"), "{page}");
    assert!(page.contains("<td class=\"acked\">4</td>"), "{page}");
    assert!(
        page.contains(&format!("<code class=\"version\">{version}</code>")),
        "{page}"
    );
    assert!(
        page.contains("<td class=\"dead\">1</td>") && page.contains("received = acked + duplicate"),
        "{page}"
    );
    // Markup characters escaped (a quote needs none in text, and the page quotes every
    // attribute with `"`).
    let shown =
        "&lt;script&gt;document.title='owned'&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;";
    assert!(
        page.contains(&format!("<pre class=\"preview\">reject:{shown}</pre>")),
        "{page}"
    );
    assert_eq!(
        page.matches("<script").count(),
        1,
        "the page's own script only: {page}"
    );
    assert!(!page.contains("<img"), "no markup from a message: {page}");
    host.stop();
}
