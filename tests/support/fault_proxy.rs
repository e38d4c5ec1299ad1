//! A fault-injecting HTTP proxy between qhost and the SQS-compatible server, on loopback.
//!
//! Requests are HTTP/1.1 with a `Content-Length` body, as the AWS SDK sends them; the SQS
//! operation is read from the `X-Amz-Target` header (`AmazonSQS.ReceiveMessage`). Rules pick
//! requests by operation and order and apply one [`Fault`] each: an SQS error answer, a reset
//! before or after the request reached the server, a delay, or a **black hole** (the request is
//! forwarded and done by the server, and its answer never comes back: the connection is held
//! open and silent). Everything else is passed through.
//!
//! The proxy runs on a thread of its own, so sync and async tests alike can use it, and stops
//! when dropped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What happens to a chosen request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// An SQS error answer with this status: 500 `InternalError`, 503 `ServiceUnavailable`.
    Status(u16),
    /// The connection is reset before the request reaches the server.
    ResetBefore,
    /// The request is done by the server, then the connection is reset instead of answered.
    ResetAfter,
    /// The answer is held back this long.
    Delay(Duration),
    /// The request is done by the server and its answer never comes.
    BlackHole,
}

/// Requests of one operation to apply a fault to: every `every`-th one (counting from the
/// first), while `left` lasts.
#[derive(Clone, Debug)]
struct Rule {
    operation: String,
    every: u64,
    fault: Fault,
    left: u64,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    /// Requests seen by operation.
    seen: BTreeMap<String, u64>,
    /// Faults applied, by operation and fault.
    applied: BTreeMap<(String, Fault), u64>,
}

impl State {
    /// Counts a request of `operation` and picks the fault for it, if a rule applies.
    fn choose(&mut self, operation: &str) -> Option<Fault> {
        let n = self.seen.entry(operation.to_string()).or_default();
        *n += 1;
        let n = *n;
        let rule = self
            .rules
            .iter_mut()
            .find(|r| r.operation == operation && r.left > 0 && n.is_multiple_of(r.every))?;
        rule.left -= 1;
        let fault = rule.fault;
        *self
            .applied
            .entry((operation.to_string(), fault))
            .or_default() += 1;
        Some(fault)
    }
}

/// A running proxy.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream` (`http://127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> Self {
        let upstream: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("an upstream HOST:PORT on loopback");
        assert!(
            upstream.ip().is_loopback(),
            "the proxy forwards to loopback only"
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("its address");
        let state = Arc::new(Mutex::new(State::default()));
        let stop = CancellationToken::new();
        let (shared, stopped) = (Arc::clone(&state), stop.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(serve(listener, upstream, shared, stopped));
        });
        FaultProxy { addr, state, stop }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The endpoint to give qhost instead of the server's.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Applies `fault` to every `every`-th request of `operation` (an SQS action name such as
    /// `ReceiveMessage`), `times` times at most. Rules are tried in the order they were added.
    pub fn inject(&self, operation: &str, every: u64, fault: Fault, times: u64) {
        self.state().rules.push(Rule {
            operation: operation.to_string(),
            every: every.max(1),
            fault,
            left: times,
        });
    }

    /// Removes every rule: from now on everything passes through.
    pub fn heal(&self) {
        self.state().rules.clear();
    }

    /// Requests of `operation` seen so far.
    pub fn seen(&self, operation: &str) -> u64 {
        let state = self.state();
        state.seen.get(operation).copied().unwrap_or(0)
    }

    /// How often `fault` was applied to `operation`.
    pub fn applied(&self, operation: &str, fault: Fault) -> u64 {
        let state = self.state();
        let key = (operation.to_string(), fault);
        state.applied.get(&key).copied().unwrap_or(0)
    }
}

/// The rules and counts, whatever a panicking holder left them as.
fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(
    listener: std::net::TcpListener,
    upstream: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: CancellationToken,
) {
    let listener = TcpListener::from_std(listener).expect("a tokio listener");
    loop {
        let (client, _) = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => continue,
            },
        };
        let (state, stop) = (Arc::clone(&state), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = connection(client, upstream, state) => {}
            }
        });
    }
}

/// One HTTP message: its head (through the blank line) and body.
struct Message {
    head: Vec<u8>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<String> {
        let text = String::from_utf8_lossy(&self.head);
        text.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_string())
        })
    }

    fn bytes(&self) -> Vec<u8> {
        [self.head.as_slice(), self.body.as_slice()].concat()
    }
}

/// Reads one message from `stream` (`buffer` holds bytes already read past the last one); `None`
/// at the end of the stream. Without a `Content-Length`, the body runs to the end of the stream.
async fn read_message(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Message> {
    let end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 16 * 1024];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head: Vec<u8> = buffer.drain(..end).collect();
    let mut message = Message {
        head,
        body: Vec::new(),
    };
    match message
        .header("content-length")
        .and_then(|n| n.parse::<usize>().ok())
    {
        Some(length) => {
            while buffer.len() < length {
                let mut chunk = [0u8; 16 * 1024];
                let n = stream.read(&mut chunk).await.ok()?;
                if n == 0 {
                    return None;
                }
                buffer.extend_from_slice(&chunk[..n]);
            }
            message.body = buffer.drain(..length).collect();
        }
        None if message.head.starts_with(b"HTTP/") => {
            let _ = stream.read_to_end(buffer).await;
            message.body = std::mem::take(buffer);
        }
        None => {}
    }
    Some(message)
}

/// Serves one client connection, request by request.
async fn connection(mut client: TcpStream, upstream: SocketAddr, state: Arc<Mutex<State>>) {
    let mut buffer = Vec::new();
    while let Some(request) = read_message(&mut client, &mut buffer).await {
        let operation = request
            .header("x-amz-target")
            .and_then(|t| t.rsplit('.').next().map(str::to_string))
            .unwrap_or_default();
        let fault = lock(&state).choose(&operation);
        match fault {
            Some(Fault::Status(status)) => {
                let _ = client.write_all(&sqs_error(status)).await;
            }
            Some(Fault::ResetBefore) => return reset(client),
            Some(Fault::ResetAfter) => {
                let _ = forward(&request, upstream).await;
                return reset(client);
            }
            Some(Fault::Delay(pause)) => {
                let answer = forward(&request, upstream).await;
                tokio::time::sleep(pause).await;
                let Some(answer) = answer else {
                    return reset(client);
                };
                let _ = client.write_all(&answer).await;
            }
            Some(Fault::BlackHole) => {
                let _ = forward(&request, upstream).await;
                // Silent until the client gives up and closes.
                let mut sink = [0u8; 1024];
                while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            None => {
                let Some(answer) = forward(&request, upstream).await else {
                    return reset(client);
                };
                if client.write_all(&answer).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Sends `request` to the server on a connection of its own and returns the whole answer.
async fn forward(request: &Message, upstream: SocketAddr) -> Option<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await.ok()?;
    server.write_all(&request.bytes()).await.ok()?;
    let mut buffer = Vec::new();
    let answer = read_message(&mut server, &mut buffer).await?;
    // The client's connection stays open for its next request whatever the server did with its
    // own: the answer goes back without the server's `Connection: close`.
    let head = String::from_utf8_lossy(&answer.head)
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\r\n"))
        .collect::<String>();
    let length = if answer.header("content-length").is_some() {
        String::new()
    } else {
        format!("content-length: {}\r\n", answer.body.len())
    };
    Some([format!("{head}{length}\r\n").into_bytes(), answer.body].concat())
}

/// An SQS error answer in the JSON protocol, as SQS sends it.
fn sqs_error(status: u16) -> Vec<u8> {
    let (code, reason) = match status {
        503 => ("ServiceUnavailable", "Service Unavailable"),
        _ => ("InternalError", "Internal Server Error"),
    };
    let body = format!(
        "{{\"__type\":\"com.amazonaws.sqs#{code}\",\"message\":\"injected by the test proxy\"}}"
    );
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/x-amz-json-1.0\r\n\
         x-amzn-query-error: {code};Receiver\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Resets `stream`: closed with no linger, so the peer reads a reset, not an orderly end.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pick_every_nth_request_of_their_operation_while_they_last() {
        let mut state = State::default();
        state.rules.push(Rule {
            operation: "ReceiveMessage".into(),
            every: 2,
            fault: Fault::Status(500),
            left: 2,
        });
        let picked: Vec<Option<Fault>> = (0..6).map(|_| state.choose("ReceiveMessage")).collect();
        assert_eq!(
            picked,
            [
                None,
                Some(Fault::Status(500)),
                None,
                Some(Fault::Status(500)),
                None,
                None
            ]
        );
        assert_eq!(state.choose("SendMessageBatch"), None);
        assert_eq!(state.seen["ReceiveMessage"], 6);
    }
}
