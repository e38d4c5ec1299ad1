//! How the source reaches NATS, and what it makes there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How the source authenticates, beside the URL's own `user:password@` or `token@`.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// The URL's credentials, or none.
    #[default]
    None,
    /// A token.
    Token(String),
    /// A user and password.
    UserPassword(String, String),
    /// An nkey seed (`SU…`).
    Nkey(String),
    /// A credentials file's text (a user JWT and its nkey seed).
    Credentials(String),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NatsAuth::None => "None",
            NatsAuth::Token(_) => "Token",
            NatsAuth::UserPassword(..) => "UserPassword",
            NatsAuth::Nkey(_) => "Nkey",
            NatsAuth::Credentials(_) => "Credentials",
        })
    }
}

/// A NATS JetStream source's settings.
#[derive(Clone, Debug)]
pub struct NatsSettings {
    /// The servers' URLs (`nats://HOST:PORT`, `tls://…`); the client fails over between them.
    pub servers: Vec<String>,
    /// How to authenticate.
    pub auth: NatsAuth,
    /// TLS for `tls://` servers (and any server that requires it): qhost's rustls client.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Whether the host creates a consumed queue's stream and durable consumer, and its
    /// dead-letter stream, when they are absent; otherwise they must exist.
    pub declare: bool,
    /// The durable pull consumer's name on each consumed stream.
    pub consumer: String,
    /// How long a delivery is held before JetStream delivers it again (the consumer's
    /// `ack_wait`, when qhost creates it), per queue; [`NatsSettings::default_hold`] for the
    /// rest.
    pub holds: HashMap<String, Duration>,
    /// The hold of a queue [`NatsSettings::holds`] does not name.
    pub default_hold: Duration,
    /// How many times JetStream delivers a message at most (`max_deliver` of a consumer qhost
    /// creates; `None`: no bound, the host's `max-attempts` decides).
    pub max_deliver: Option<i64>,
    /// How long a call waits for the server's answer (a publish's acknowledgement, an ack's
    /// confirmation, a stream's info).
    pub timeout: Duration,
}

impl NatsSettings {
    /// The settings for one server at `url`, with qhost's defaults: queues declared, the
    /// consumer `qhost`, 30 s holds, answers within 5 s.
    pub fn new(url: &str) -> Self {
        NatsSettings {
            servers: vec![url.to_string()],
            auth: NatsAuth::None,
            tls: None,
            declare: true,
            consumer: "qhost".into(),
            holds: HashMap::new(),
            default_hold: Duration::from_secs(30),
            max_deliver: None,
            timeout: Duration::from_secs(5),
        }
    }

    /// How long `queue`'s deliveries are held.
    pub(crate) fn hold(&self, queue: &str) -> Duration {
        self.holds.get(queue).copied().unwrap_or(self.default_hold)
    }
}
