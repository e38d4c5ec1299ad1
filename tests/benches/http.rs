//! The cost of an HTTP call made from a handler, against the same call from a native Rust
//! client, to the same server on loopback, in one run.
//!
//! - native: hyper's HTTP/1.1 client, a fresh connection per request (as the host makes one
//!   per request), and for reference one kept-alive connection;
//! - from a handler: the fixture plugin invoked directly on its invoker, once with a body
//!   that makes one GET (`get:out:URL`) and once with one that makes none (`ack`); their
//!   difference is what the call costs inside a handler: the grant check, the headers, DNS
//!   (none for an IP literal), the address check, the connection, and `wasi:http`'s resources
//!   and streams in and out of the guest.
//!
//! Three interleaved rounds, each figure the median. `cargo bench -p qhost-e2e --bench http`
//! (QHOST_BENCH_MESSAGES overrides the 2,000 calls per case and round).

use std::time::Instant;

use http_body_util::{BodyExt as _, Empty};
use hyper::body::Bytes;
use qhost::handlers::{HandlerMessage, Outcome};
use qhost::plugins::Plugin;
use qhost_e2e::api_server::ApiServer;
use qhost_e2e::cpu::CpuTime;

fn message(i: usize, body: &str) -> HandlerMessage {
    HandlerMessage {
        id: format!("m{i}"),
        idempotency_key: format!("k{i}"),
        fencing_token: 1,
        queue: "calls".into(),
        body: body.as_bytes().to_vec(),
        attributes: Vec::new(),
        receive_count: 1,
        sent_at_ms: 0,
        group_id: None,
        time_limit: None,
    }
}

fn load(api: &ApiServer) -> (tempfile::TempDir, Plugin) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("caller.wasm");
    std::fs::write(&path, qhost_e2e::plugin_bytes("fixture")).expect("plugin");
    let manifest = format!(
        "[capabilities]\nhttp = [\"http://{}\"]\n[limits]\nhttp-requests = 4\n[outbox]\nqueues = [\"*\"]\n",
        api.addr()
    );
    std::fs::write(path.with_extension("toml"), manifest).expect("manifest");
    let config = qhost::Config {
        compiled_cache: Some(qhost_e2e::workspace().join("target/test-compiled-cache")),
        ..Default::default()
    };
    let runtime = qhost::runtime_for(&config).expect("engine");
    let plugin = qhost::plugins::load_plugin(&runtime, &path).expect("loads");
    (dir, plugin)
}

/// Mean µs per handler call with this body: wall clock, and CPU of this process (the server's
/// included, the same in every case).
async fn handler(plugin: &Plugin, body: &str, n: usize, expect: &str) -> (f64, f64) {
    let (started, cpu) = (Instant::now(), CpuTime::now());
    for i in 0..n {
        let out = plugin.invoke(message(i, body)).await.expect("handled");
        assert_eq!(out.outcome, Outcome::Ack);
        if !expect.is_empty() {
            assert_eq!(out.outbox[0].body, expect.as_bytes(), "the call's result");
        }
    }
    per_call(started, cpu, n)
}

fn per_call(started: Instant, cpu: CpuTime, n: usize) -> (f64, f64) {
    let wall = started.elapsed().as_secs_f64() * 1e6 / n as f64;
    (wall, cpu.elapsed().micros_per(n))
}

/// A connection to the server, driven on its own task (and closed once the sender is dropped,
/// as the host drops a request's connection once its response is read).
async fn connect(api: &ApiServer) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let stream = tokio::net::TcpStream::connect(api.addr())
        .await
        .expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    sender
}

async fn get(sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>, api: &ApiServer) {
    let request = hyper::Request::get("/bench")
        .header("host", api.addr().to_string())
        .body(Empty::<Bytes>::new())
        .expect("a request");
    sender.ready().await.expect("the connection is ready");
    let response = sender.send_request(request).await.expect("a response");
    assert_eq!(response.status(), 200);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    assert_eq!(&body[..], b"ok");
}

/// Mean µs per native GET, on fresh connections or one kept alive: wall clock and CPU.
async fn native(api: &ApiServer, n: usize, keep_alive: bool) -> (f64, f64) {
    let (started, cpu) = (Instant::now(), CpuTime::now());
    if keep_alive {
        let mut sender = connect(api).await;
        for _ in 0..n {
            get(&mut sender, api).await;
        }
    } else {
        for _ in 0..n {
            get(&mut connect(api).await, api).await;
        }
    }
    per_call(started, cpu, n)
}

/// The median round's (wall, CPU), by wall clock.
fn median(mut v: Vec<(f64, f64)>) -> (f64, f64) {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = qhost_e2e::bench_messages(2000);
    let api = ApiServer::start();
    let (_dir, plugin) = load(&api);
    let get_call = format!("get:out:{}", api.url("/bench"));
    // Warm up every path once.
    native(&api, 50, false).await;
    handler(&plugin, &get_call, 50, "200:2").await;
    let (mut fresh, mut kept, mut bare, mut calling) = (vec![], vec![], vec![], vec![]);
    for _ in 0..3 {
        fresh.push(native(&api, n, false).await);
        kept.push(native(&api, n, true).await);
        bare.push(handler(&plugin, "ack", n, "").await);
        calling.push(handler(&plugin, &get_call, n, "200:2").await);
    }
    let (fresh, kept, bare, calling) = (median(fresh), median(kept), median(bare), median(calling));
    let call = (calling.0 - bare.0, calling.1 - bare.1);
    println!(
        "HTTP GET to a server on loopback (in this process), {n} calls per case, median of 3 rounds"
    );
    println!("                                                wall µs  ratio   CPU µs  ratio");
    let row = |name: &str, (wall, cpu): (f64, f64), ratios: bool| {
        if ratios {
            println!(
                "  {name:<44}{wall:>7.1}  {:>5.2}  {cpu:>7.1}  {:>5.2}",
                wall / fresh.0,
                cpu / fresh.1
            );
        } else {
            println!("  {name:<44}{wall:>7.1}         {cpu:>7.1}");
        }
    };
    row("native client, fresh connection (baseline)", fresh, true);
    row("native client, one kept-alive connection", kept, true);
    row("handler making no call", bare, false);
    row("handler making one call", calling, false);
    row("the call inside the handler (difference)", call, true);
    println!("  requests the server saw: {}", api.requests().len());
}
