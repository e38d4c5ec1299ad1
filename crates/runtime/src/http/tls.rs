//! The TLS client plugins' HTTPS requests use: rustls on ring, trusting the platform's roots
//! and, when the host's `[http] ca-file` names one, a private CA's certificates as well.
//!
//! Built once per host, at start: a CA file that cannot be read, or holds no certificate, is a
//! start-up error rather than every request's.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

/// A client configuration shared by every request.
pub type TlsClient = Arc<rustls::ClientConfig>;

/// The platform's roots, plus those in `ca_file`.
pub fn client(ca_file: Option<&Path>) -> anyhow::Result<TlsClient> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for error in &native.errors {
        tracing::debug!(%error, "a platform root certificate could not be read");
    }
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        add_ca_file(&mut roots, path)?;
    } else if added == 0 {
        tracing::warn!(
            "no platform root certificates found: HTTPS requests from plugins will fail"
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn add_ca_file(roots: &mut rustls::RootCertStore, path: &Path) -> anyhow::Result<()> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("[http] ca-file {}", path.display()))?;
    anyhow::ensure!(
        !certs.is_empty(),
        "[http] ca-file {}: no certificate in it",
        path.display()
    );
    for cert in certs {
        roots
            .add(cert)
            .with_context(|| format!("[http] ca-file {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_that_cannot_be_used_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("missing.pem");
        let err = client(Some(&missing)).expect_err("a missing file");
        assert!(format!("{err:#}").contains("missing.pem"), "{err:#}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").expect("write");
        let err = client(Some(&empty)).expect_err("no certificate");
        assert!(format!("{err:#}").contains("no certificate"), "{err:#}");
    }
}
