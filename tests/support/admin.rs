//! A client for qhost's admin listener: plain HTTP/1.1 GETs over a loopback socket, and the
//! samples of a Prometheus text exposition.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// `GET path` on the admin listener: the status code and the body.
pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    exchange(stream, addr, path)
}

fn exchange(mut stream: TcpStream, addr: SocketAddr, path: &str) -> (u16, String) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {response:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// Polls `GET path` until `done(status, body)` holds; panics with the last answer after
/// `limit`.
pub fn wait_for(
    addr: SocketAddr,
    path: &str,
    limit: Duration,
    done: impl Fn(u16, &str) -> bool,
) -> (u16, String) {
    let deadline = Instant::now() + limit;
    loop {
        // A listener that is not bound yet (a process or a container still starting) is
        // waited for like an answer that is not the expected one yet.
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(stream) => {
                let (status, body) = exchange(stream, addr, path);
                if done(status, &body) {
                    return (status, body);
                }
                assert!(
                    Instant::now() < deadline,
                    "GET {path} still answers {status}: {body}"
                );
            }
            Err(e) => assert!(
                Instant::now() < deadline,
                "GET {path}: nothing listens on {addr} after {limit:?}: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of the sample `name{labels}` (every label given must match; others may be
/// present), or `None` when there is no such sample.
pub fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(exposition, name, labels).next()
}

/// The sum of every series of metric `name` carrying `labels` (whatever its other labels, such
/// as one series per queue), 0 when there is none.
pub fn total(exposition: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(exposition, name, labels).sum()
}

/// The values of the series of metric `name` carrying `labels`, in exposition order.
fn samples<'a>(
    exposition: &'a str,
    name: &'a str,
    labels: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = f64> + 'a {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(move |line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            let matches = metric == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            matches.then(|| value.parse().ok()).flatten()
        })
}

/// Runs `promtool check metrics` on the exposition; panics with its complaint, if any.
pub fn promtool_check(exposition: &str, scratch: &Path) {
    let file = scratch.join("metrics.txt");
    std::fs::write(&file, exposition).expect("write the exposition");
    let out = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).expect("the exposition"))
        .output()
        .expect("promtool (Debian's prometheus package; scripts/install-test-tools installs it)");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `POST path` with a form body on the admin listener: the status and the body.
pub fn post(addr: std::net::SocketAddr, path: &str, form: &str) -> (u16, String) {
    post_as(addr, path, form, "")
}

/// [`post`] with extra header lines (each ending in CRLF).
pub fn post_as(addr: std::net::SocketAddr, path: &str, form: &str, headers: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         {headers}Content-Length: {}\r\nConnection: close\r\n\r\n{form}",
        form.len()
    )
    .expect("the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a header end");
    let status = (head.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_string())
}
