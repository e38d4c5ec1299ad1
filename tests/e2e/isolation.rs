//! A fresh instance starts from the component's initial memory, however its predecessor in
//! the pool slot wrote: the fixture's `scribble` writes 48 separate runs of pages in its
//! initialized data and 48 in its zeroed data (more than the pooling allocator's page scan
//! reports at once), and rejects if it finds any earlier write. Reusing an instance shows the
//! check can fail.

use qhost::handlers::{HandlerMessage, Outcome};
use qhost::plugins::Plugin;

fn scribble(i: usize) -> HandlerMessage {
    HandlerMessage {
        id: format!("m{i}"),
        idempotency_key: format!("k{i}"),
        fencing_token: 1,
        queue: "jobs".into(),
        body: b"scribble".to_vec(),
        attributes: Vec::new(),
        receive_count: 1,
        sent_at_ms: 0,
        group_id: None,
        time_limit: None,
    }
}

/// The fixture with `manifest`, loaded from `dir` on an engine of its own.
fn fixture(manifest: &str, dir: &std::path::Path) -> Plugin {
    std::fs::create_dir_all(dir).expect("plugin directory");
    let path = dir.join("fixture.wasm");
    std::fs::write(&path, qhost_e2e::plugin_bytes("fixture")).expect("plugin");
    std::fs::write(path.with_extension("toml"), manifest).expect("manifest");
    let mut config = qhost::Config::parse("max-in-flight = 2\n").expect("config");
    config.data_dir = None;
    let runtime = qhost::runtime_for(&config).expect("engine");
    qhost::plugins::load_plugin(&runtime, &path).expect("loads")
}

#[tokio::test(flavor = "multi_thread")]
async fn no_message_sees_what_an_earlier_one_wrote_to_memory() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let plugin = fixture("", &dir.path().join("fresh"));
    let costs = || plugin.costs().expect("a wasm plugin counts its costs");
    let before = costs().instances;
    for i in 0..20 {
        let out = plugin.invoke(scribble(i)).await.expect("invoked");
        assert_eq!(out.outcome, Outcome::Ack, "message {i}");
    }
    assert_eq!(
        costs().instances - before,
        20,
        "one fresh instance per message"
    );

    let reused = fixture("[limits]\nreuse-instance = 5\n", &dir.path().join("reused"));
    let first = reused.invoke(scribble(0)).await.expect("invoked");
    assert_eq!(first.outcome, Outcome::Ack);
    let second = reused.invoke(scribble(1)).await.expect("invoked");
    assert_eq!(
        second.outcome,
        Outcome::Reject("page 0 holds an earlier message's write".into()),
        "an instance reused for a second message sees the first one's writes"
    );
}
