//! A loopback SQS responder for benchmarks that measure the client: canned answers to the calls
//! qhost makes (AWS JSON 1.0, as aws-sdk-sqs speaks it), over HTTP/1.1 keep-alive, from a thread
//! of its own, so the SDK's and the host's CPU can be read apart from the server's (the
//! responder's thread CPU is read from `/proc` and left out).
//!
//! It hands out a set number of deliveries (body `ack`, ten per receive), then answers receives
//! with none (a receive with `WaitTimeSeconds` waits for more, as SQS's long polling does). It
//! accepts every delete, visibility change and send, echoing the entries' ids, and counts each
//! call by operation. Its depth counts what it handed out and was not deleted as in flight, so a
//! host that waits for an empty queue waits for its last deletes.
//!
//! It keeps no queue. What it hands out again is what SQS would: a message whose visibility a
//! consumer changed (a put-back, handed out at the next receive, its timeout not waited for; a
//! heartbeat's extension would count as one too, so the benches' handlers are too quick for
//! one), and, when asked ([`Responder::duplicate_every`]), every n-th delivery a copy of a
//! message handed out a given number of messages earlier, with a receipt handle of its own: the
//! at-least-once delivery a consumer must suppress.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

/// The operations it counts, in the order [`Responder::requests`] returns them.
pub const OPERATIONS: [&str; 7] = [
    "ReceiveMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
    "SendMessageBatch",
    "GetQueueAttributes",
    "GetQueueUrl",
];

/// What the responder shares with its thread.
#[derive(Default)]
struct State {
    /// Deliveries still to hand out (duplicates included, put-backs not).
    left: AtomicUsize,
    /// Every n-th delivery is a duplicate (0: none).
    duplicate_every: AtomicUsize,
    /// How many messages back a duplicate reaches.
    duplicate_distance: AtomicU64,
    deliveries: AtomicU64,
    duplicates: AtomicU64,
    /// The first message of the latest offer: a duplicate reaches back no further, so each
    /// consumer meets only duplicates of what it was handed itself.
    first_offered: AtomicU64,
    /// Numbers receipt handles, so each delivery has its own.
    receipts: AtomicU64,
    /// Messages put back by a visibility change, handed out again first.
    again: Mutex<VecDeque<u64>>,
    /// Wakes receives that wait (long polling) when messages are offered or put back.
    arrived: tokio::sync::Notify,
    /// Handed out and not deleted yet: what SQS reports as not visible.
    in_flight: AtomicUsize,
    next_id: AtomicU64,
    calls: [AtomicU64; OPERATIONS.len()],
    tid: AtomicI32,
    /// Starts every message id, so two runs' messages never share an id (a store keeps the
    /// keys it completed for its dedup window).
    run: String,
}

/// A running responder.
pub struct Responder {
    addr: SocketAddr,
    state: Arc<State>,
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Responder {
    /// Starts one on a free loopback port, on a thread of its own.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("its address");
        listener.set_nonblocking(true).expect("non-blocking");
        let state = Arc::new(State {
            run: uuid::Uuid::new_v4().simple().to_string(),
            ..State::default()
        });
        let served = Arc::clone(&state);
        let thread = std::thread::Builder::new().name("sqs-responder".into());
        thread
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                served
                    .tid
                    .store(unsafe { libc::gettid() }, Ordering::Relaxed);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(serve(listener, served));
            })
            .expect("the responder's thread");
        while state.tid.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Responder { addr, state }
    }

    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Hands out `n` more messages.
    pub fn offer(&self, n: usize) {
        let next = self.state.next_id.load(Ordering::Relaxed);
        self.state.first_offered.store(next, Ordering::Relaxed);
        self.state.left.fetch_add(n, Ordering::Relaxed);
        self.state.arrived.notify_waiters();
    }

    /// Makes every `n`-th delivery from now on a duplicate (0: none) of the message handed out
    /// `distance` messages before it: far back (a few hundred), its first copy has finished, as
    /// a redelivery minutes later finds it; close (a few), the copies meet in one batch or while
    /// the first runs, as a producer's retried send does.
    pub fn duplicate_every(&self, n: usize, distance: u64) {
        self.state.duplicate_every.store(n, Ordering::Relaxed);
        (self.state.duplicate_distance).store(distance.max(1), Ordering::Relaxed);
    }

    /// Duplicates handed out so far.
    pub fn duplicates(&self) -> u64 {
        self.state.duplicates.load(Ordering::Relaxed)
    }

    /// Calls so far, by operation (see [`OPERATIONS`]).
    pub fn requests(&self) -> [u64; OPERATIONS.len()] {
        std::array::from_fn(|i| self.state.calls[i].load(Ordering::Relaxed))
    }

    /// CPU time its thread has used so far, user and system apart.
    pub fn cpu(&self) -> crate::cpu::CpuTime {
        let tid = self.state.tid.load(Ordering::Relaxed);
        crate::proc_tree::stat_cpu_apart(&format!("/proc/self/task/{tid}/stat"))
    }
}

async fn serve(listener: std::net::TcpListener, state: Arc<State>) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(answer(&state, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(state: &State, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let target = (req.headers().get("x-amz-target"))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("AmazonSQS."))
        .unwrap_or_default()
        .to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let input: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(op) = OPERATIONS.iter().position(|o| *o == target) else {
        return respond(400, &json!({"__type": "InvalidAction", "message": target}));
    };
    state.calls[op].fetch_add(1, Ordering::Relaxed);
    let echo = || {
        let ids: Vec<Value> = (input["Entries"].as_array().into_iter().flatten())
            .map(|e| json!({"Id": e["Id"], "MessageId": format!("s-{}", e["Id"].as_str().unwrap_or("")), "MD5OfMessageBody": "0"}))
            .collect();
        json!({"Successful": ids, "Failed": []})
    };
    match OPERATIONS[op] {
        "DeleteMessageBatch" => {
            let deleted = input["Entries"].as_array().map_or(0, Vec::len);
            let _ = (state.in_flight).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(deleted))
            });
        }
        "ChangeMessageVisibility" => put_back(state, &input),
        "ChangeMessageVisibilityBatch" => {
            for entry in input["Entries"].as_array().into_iter().flatten() {
                put_back(state, entry);
            }
        }
        _ => {}
    }
    let output = match OPERATIONS[op] {
        "ReceiveMessage" => json!({"Messages": receive(state, &input).await}),
        "DeleteMessageBatch" | "ChangeMessageVisibilityBatch" | "SendMessageBatch" => echo(),
        "GetQueueAttributes" => json!({"Attributes": {
            "ApproximateNumberOfMessages": visible(state).to_string(),
            "ApproximateNumberOfMessagesNotVisible": state.in_flight.load(Ordering::Relaxed).to_string(),
            "ApproximateNumberOfMessagesDelayed": "0"}}),
        "GetQueueUrl" => json!({"QueueUrl": format!("http://sqs.local/000000000000/{}",
            input["QueueName"].as_str().unwrap_or("q"))}),
        _ => json!({}),
    };
    respond(200, &output)
}

/// Up to ten messages; with none to hand out, a receive that asks to wait (`WaitTimeSeconds`)
/// waits for some to be offered or put back, as SQS's long polling does.
async fn receive(state: &State, input: &Value) -> Vec<Value> {
    let wait = Duration::from_secs(input["WaitTimeSeconds"].as_u64().unwrap_or(0));
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let arrived = state.arrived.notified();
        tokio::pin!(arrived);
        arrived.as_mut().enable();
        let got = messages(state);
        if !got.is_empty() || tokio::time::Instant::now() >= deadline {
            return got;
        }
        let _ = tokio::time::timeout_at(deadline, arrived).await;
    }
}

/// Messages a receive would hand out now: the deliveries left and the put-backs.
fn visible(state: &State) -> usize {
    state.left.load(Ordering::Relaxed) + state.again.lock().expect("the put-backs").len()
}

/// A message whose visibility a consumer changed: handed out again at the next receive.
fn put_back(state: &State, entry: &Value) {
    let id = (entry["ReceiptHandle"].as_str())
        .and_then(|r| r.strip_prefix("r-"))
        .and_then(|r| r.split('-').next())
        .and_then(|id| id.parse().ok());
    if let Some(id) = id {
        state.again.lock().expect("the put-backs").push_back(id);
        state.arrived.notify_waiters();
        let _ = (state.in_flight).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            Some(n.saturating_sub(1))
        });
    }
}

/// Up to ten messages: put-backs first, then the deliveries left.
fn messages(state: &State) -> Vec<Value> {
    let mut ids: Vec<u64> = {
        let mut again = state.again.lock().expect("the put-backs");
        let n = again.len().min(10);
        again.drain(..n).collect()
    };
    let mut taken = 0;
    let _ = state
        .left
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            taken = left.min(10 - ids.len());
            Some(left - taken)
        });
    let every = state.duplicate_every.load(Ordering::Relaxed) as u64;
    let distance = state.duplicate_distance.load(Ordering::Relaxed);
    for _ in 0..taken {
        let delivery = state.deliveries.fetch_add(1, Ordering::Relaxed);
        let next = state.next_id.load(Ordering::Relaxed);
        let first = state.first_offered.load(Ordering::Relaxed);
        if every > 0 && delivery % every == every - 1 && next >= first + distance {
            state.duplicates.fetch_add(1, Ordering::Relaxed);
            ids.push(next - distance);
        } else {
            ids.push(state.next_id.fetch_add(1, Ordering::Relaxed));
        }
    }
    state.in_flight.fetch_add(ids.len(), Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    (ids.into_iter())
        .map(|id| {
            let receipt = state.receipts.fetch_add(1, Ordering::Relaxed);
            json!({"MessageId": format!("{}-{id}", state.run), "ReceiptHandle": format!("r-{id}-{receipt}"),
                   "MD5OfBody": "82d7ba7ea655a2bbde5a4e2153a66dae", "Body": "ack",
                   "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": now.to_string()}})
        })
        .collect()
}

fn respond(status: u16, value: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    (response.headers_mut()).insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-amz-json-1.0"),
    );
    response
}
