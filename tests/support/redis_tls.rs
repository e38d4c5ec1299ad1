//! A `redis-server` that speaks only TLS and asks for a password, with a certificate from a
//! certificate authority made for the test (by `openssl`), so nothing trusts it by default.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The server's password.
pub const PASSWORD: &str = "tls-test-s3cret";

/// A TLS Redis of this test's own, killed on drop.
#[derive(Debug)]
pub struct TlsRedis {
    port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl is installed (scripts/install-test-tools installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.crt`), and a server certificate it signed for IP 127.0.0.1 (`server.crt`,
/// `server.key`), written to `dir`.
pub(crate) fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=qhost test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1\n").expect("ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// `redis-server` arguments for TLS only on `tls_port`, with the certificates [`certificates`]
/// wrote to its working directory, and [`PASSWORD`].
pub(crate) fn server_args(tls_port: &str) -> Vec<&str> {
    vec![
        "--port",
        "0",
        "--tls-port",
        tls_port,
        "--tls-cert-file",
        "server.crt",
        "--tls-key-file",
        "server.key",
        "--tls-ca-cert-file",
        "ca.crt",
        "--tls-auth-clients",
        "no",
        "--requirepass",
        PASSWORD,
    ]
}

impl TlsRedis {
    /// Makes the certificates and starts the server; returns once it accepts connections.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        certificates(dir.path());
        let port = crate::redis_server::free_port();
        let tls_port = port.to_string();
        let child =
            crate::redis_server::spawn_redis_server(Some(dir.path()), &server_args(&tls_port));
        crate::redis_server::wait_until_listening(port, "redis-server (TLS)");
        TlsRedis { port, child, dir }
    }

    /// `rediss://` with the password.
    pub fn url(&self) -> String {
        format!("rediss://:{PASSWORD}@127.0.0.1:{}/", self.port)
    }

    /// The CA that signed the server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
