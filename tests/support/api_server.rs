//! An HTTP API on loopback for the outbound-HTTP tests: it records every request (method,
//! path, headers, body, arrival time) and every connection accepted, and answers as the test
//! says, per request: a status, a delay, a redirect, a body of some size. It runs on its own
//! thread and runtime, so it keeps answering while a test blocks on a `qhost` process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use rustls::pki_types::pem::PemObject as _;

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Its method.
    pub method: String,
    /// Its path and query.
    pub path: String,
    /// Its headers, names in lower case (the last value of a repeated one).
    pub headers: BTreeMap<String, String>,
    /// Its body.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// What to answer.
#[derive(Clone, Debug)]
pub enum Reply {
    /// This status, with a short body.
    Status(u16),
    /// 200 after a wait.
    After(Duration),
    /// 302 to this URL.
    Redirect(String),
    /// 200 with a body of this many bytes.
    Body(usize),
    /// 200 with a body of this many bytes sent in 1 KiB chunks, its length not announced
    /// (chunked transfer encoding).
    Streamed(usize),
}

/// A body of `left` bytes in 1 KiB frames with no size hint, so hyper sends it chunked.
struct Chunks {
    left: usize,
}

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = self.left.min(1024);
        self.left -= n;
        let frame = hyper::body::Frame::data(Bytes::from(vec![b'x'; n]));
        std::task::Poll::Ready(Some(Ok(frame)))
    }
}

type Answer = dyn Fn(&Recorded, &[Recorded]) -> Reply + Send + Sync;

/// The server.
pub struct ApiServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Recorded>>>,
    connections: Arc<AtomicUsize>,
    in_flight: Arc<InFlight>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ApiServer {
    /// A server on a free port of 127.0.0.1 that answers 200 to everything.
    pub fn start() -> Self {
        Self::answering("127.0.0.1", |_, _| Reply::Status(200))
    }

    /// A server on a free port of `ip` (a loopback address) that answers with `answer`, given
    /// the request and every request before it.
    pub fn answering(
        ip: &str,
        answer: impl Fn(&Recorded, &[Recorded]) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Self::serving(ip, None, answer)
    }

    /// An HTTPS server on a free port of 127.0.0.1 answering 200, its certificate for that
    /// address signed by a CA made for the test; the CA's certificate is `ca.crt` in `dir`.
    pub fn https(dir: &std::path::Path) -> Self {
        crate::redis_tls::certificates(dir);
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(dir.join("server.crt"))
            .and_then(|c| c.collect::<Result<Vec<_>, _>>())
            .expect("the server certificate");
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(dir.join("server.key"))
            .expect("the server key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("a server configuration");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        Self::serving("127.0.0.1", Some(acceptor), |_, _| Reply::Status(200))
    }

    fn serving(
        ip: &str,
        tls: Option<tokio_rustls::TlsAcceptor>,
        answer: impl Fn(&Recorded, &[Recorded]) -> Reply + Send + Sync + 'static,
    ) -> Self {
        let listener =
            std::net::TcpListener::bind((ip, 0)).expect("binding the API server on loopback");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("its address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let in_flight = Arc::new(InFlight::default());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let answer: Arc<Answer> = Arc::new(answer);
        let (kept, accepted) = (Arc::clone(&requests), Arc::clone(&connections));
        let counted = Arc::clone(&in_flight);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the API server's runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
                tokio::select! {
                    _ = stopped => {}
                    () = serve(listener, tls, (kept, accepted, counted), answer) => {}
                }
            });
        });
        ApiServer {
            addr,
            requests,
            connections,
            in_flight,
            _stop: stop,
        }
    }

    /// `http://IP:PORT` with `path` after it.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("requests").clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The most requests it was answering at once (from arrival to the answer).
    pub fn most_at_once(&self) -> usize {
        self.in_flight.most.load(Ordering::SeqCst)
    }

    /// Requests it is answering now.
    pub fn answering_now(&self) -> usize {
        self.in_flight.now.load(Ordering::SeqCst)
    }
}

/// Requests being answered, and the most there have been at once.
#[derive(Debug, Default)]
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// One request counted in [`InFlight`] until dropped.
struct Answering(Arc<InFlight>);

impl Answering {
    fn start(in_flight: &Arc<InFlight>) -> Self {
        let now = in_flight.now.fetch_add(1, Ordering::SeqCst) + 1;
        in_flight.most.fetch_max(now, Ordering::SeqCst);
        Answering(Arc::clone(in_flight))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What every connection's requests are recorded in.
type Kept = (Arc<Mutex<Vec<Recorded>>>, Arc<AtomicUsize>, Arc<InFlight>);

async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    (kept, accepted, in_flight): Kept,
    answer: Arc<Answer>,
) {
    while let Ok((stream, _)) = listener.accept().await {
        accepted.fetch_add(1, Ordering::SeqCst);
        let (kept, answer) = (Arc::clone(&kept), Arc::clone(&answer));
        let in_flight = Arc::clone(&in_flight);
        let service = hyper::service::service_fn(move |req| {
            let answering = Answering::start(&in_flight);
            let answered = respond(req, Arc::clone(&kept), Arc::clone(&answer));
            async move {
                let response = answered.await;
                drop(answering);
                response
            }
        });
        let http = hyper::server::conn::http1::Builder::new();
        match &tls {
            None => {
                tokio::spawn(http.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that refuses the certificate ends the handshake: nothing to serve.
                    if let Ok(stream) = acceptor.accept(stream).await {
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = http.serve_connection(io, service).await;
                    }
                });
            }
        }
    }
}

async fn respond(
    req: Request<Incoming>,
    kept: Arc<Mutex<Vec<Recorded>>>,
    answer: Arc<Answer>,
) -> Result<Response<BoxBody<Bytes, std::convert::Infallible>>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
        at: Instant::now(),
    };
    let reply = {
        let mut all = kept.lock().expect("requests");
        let reply = answer(&recorded, &all);
        all.push(recorded);
        reply
    };
    let response = match reply {
        Reply::Streamed(len) => {
            let body = BoxBody::new(Chunks { left: len });
            return Ok(Response::new(body));
        }
        Reply::Status(status) => Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(b"ok"))),
        Reply::After(wait) => {
            tokio::time::sleep(wait).await;
            Response::builder().body(Full::new(Bytes::from_static(b"late")))
        }
        Reply::Redirect(to) => Response::builder()
            .status(302)
            .header("location", to)
            .body(Full::new(Bytes::new())),
        Reply::Body(len) => Response::builder().body(Full::new(Bytes::from(vec![b'x'; len]))),
    };
    Ok(response.expect("a response").map(|b| b.boxed()))
}
