//! How qhost connects to PostgreSQL (the store, and pgmq queues): the database's URL and
//! password, a pool of connections, TLS, and the deadlines every call keeps.
//!
//! TLS is rustls on ring (as the rest of qhost), used as the URL's `sslmode` says, with
//! libpq's meanings, so a URL copied from a team's other clients means the same here:
//! `disable` never; `prefer` (the default) when the server offers it and `require` always,
//! both without checking the server's certificate (libpq does not either: they protect from
//! eavesdroppers, not from a server that pretends); `verify-ca` and `verify-full` always, the
//! certificate checked against the platform's roots and `ca-file`'s, and its name against the
//! host's (rustls checks both, so `verify-ca` is as strict as `verify-full`).

mod identity;

use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

pub use identity::{Identity, identity};

/// A PostgreSQL database to connect to.
#[derive(Clone)]
pub struct PgTarget {
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=…]` (or libpq's key=value
    /// form).
    pub url: String,
    /// The password, when the URL carries none.
    pub password: Option<String>,
    /// Connections at most.
    pub pool_size: usize,
    /// The TLS client, for a server that offers TLS.
    pub tls: Arc<rustls::ClientConfig>,
    /// How long a call waits for a free connection, and for a new one to connect.
    pub wait: Duration,
    /// The longest a statement runs before the server cancels it.
    pub statement_timeout: Duration,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

/// The pool for `target`; it connects lazily, on the first call.
pub fn pool(target: &PgTarget) -> anyhow::Result<Pool> {
    let (config, tls) = connection(target)?;
    let manager = Manager::from_config(
        config,
        tls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(target.pool_size.max(1))
        .wait_timeout(Some(target.wait))
        .create_timeout(Some(target.wait))
        .runtime(Runtime::Tokio1)
        .build()
        .context("the PostgreSQL connection pool")
}

/// How a connection to `target` is made: the driver's configuration (the URL's, with the
/// password, deadlines and name qhost adds) and the TLS connector its `sslmode` calls for. The
/// pool's connections are made so; a connection of a caller's own (a listener) too.
pub fn connection(
    target: &PgTarget,
) -> anyhow::Result<(
    tokio_postgres::Config,
    tokio_postgres_rustls::MakeRustlsConnect,
)> {
    let (url, verify) = tls_mode(&target.url);
    let mut config =
        tokio_postgres::Config::from_str(&url).context("not a PostgreSQL connection URL")?;
    if let Some(password) = &target.password {
        config.password(password);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(target.wait);
    }
    let timeout = format!(
        "-c statement_timeout={}",
        target.statement_timeout.as_millis()
    );
    let options = match config.get_options() {
        Some(theirs) => format!("{theirs} {timeout}"),
        None => timeout,
    };
    config.options(&options);
    if config.get_application_name().is_none() {
        config.application_name("qhost");
    }
    let tls = if verify {
        (*target.tls).clone()
    } else {
        unverified(&target.tls)
    };
    Ok((config, tokio_postgres_rustls::MakeRustlsConnect::new(tls)))
}

/// The URL as the driver reads it (which knows `disable`, `prefer` and `require`), and whether
/// the server's certificate is checked: `verify-ca` and `verify-full` become `require`, checked.
fn tls_mode(url: &str) -> (String, bool) {
    for strict in ["sslmode=verify-full", "sslmode=verify-ca"] {
        if url.contains(strict) {
            return (url.replace(strict, "sslmode=require"), true);
        }
    }
    (url.to_string(), false)
}

/// `checked` with its certificate check taken out (libpq's `prefer` and `require`); the
/// handshake's signatures are still verified, with the same provider's algorithms.
fn unverified(checked: &rustls::ClientConfig) -> rustls::ClientConfig {
    let mut config = checked.clone();
    let provider = Arc::clone(config.crypto_provider());
    config
        .dangerous()
        .set_certificate_verifier(Arc::new(AnyCertificate(provider)));
    config
}

/// Accepts whatever certificate the server shows (see [`unverified`]).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.0.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `name` as a quoted SQL identifier.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::{quoted, tls_mode};

    #[test]
    fn verify_modes_become_require_with_the_certificate_checked() {
        let url = "postgres://u@db.example/app?sslmode=verify-full&connect_timeout=3";
        assert_eq!(
            tls_mode(url),
            (
                "postgres://u@db.example/app?sslmode=require&connect_timeout=3".into(),
                true
            )
        );
        assert!(tls_mode("host=db sslmode=verify-ca").1);
        for unchecked in ["postgres://u@h/d", "postgres://u@h/d?sslmode=require"] {
            assert_eq!(tls_mode(unchecked), (unchecked.to_string(), false));
        }
    }

    #[test]
    fn identifiers_are_quoted_whatever_they_hold() {
        assert_eq!(quoted("qhost"), "\"qhost\"");
        assert_eq!(quoted("a\"; DROP"), "\"a\"\"; DROP\"");
    }
}
