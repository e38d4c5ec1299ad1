//! Signing the JSON client's requests: SigV4 with `aws-sigv4` (the crate the SDK signs with),
//! from credentials the configuration chain provides, cached until shortly before they expire.
//!
//! The SDK caches credentials in its client (a lazy identity cache), not in the provider; a
//! provider asked on every request would ask the instance metadata service or STS on every
//! request. So the signer keeps the last credentials and asks again a minute before they
//! expire, one request asking while the rest use what is cached; if asking fails while the
//! old ones are still valid, the old ones serve.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use aws_sdk_sqs::config::{ProvideCredentials as _, SharedCredentialsProvider};
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_smithy_runtime_api::client::identity::Identity;

use super::failure::CallError;

/// How long before their expiry credentials are renewed.
const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// How long asking the provider may take.
const PROVIDER_WAIT: Duration = Duration::from_secs(10);

/// Signs requests for one service in one region.
#[derive(Debug)]
pub(crate) struct Signer {
    provider: Option<SharedCredentialsProvider>,
    region: String,
    service: &'static str,
    cached: ArcSwapOption<Identity>,
    renewing: tokio::sync::Mutex<()>,
}

impl Signer {
    pub(crate) fn new(
        provider: Option<SharedCredentialsProvider>,
        region: String,
        service: &'static str,
    ) -> Self {
        Signer {
            provider,
            region,
            service,
            cached: ArcSwapOption::empty(),
            renewing: tokio::sync::Mutex::new(()),
        }
    }

    /// Credentials to sign with now.
    pub(crate) async fn identity(&self) -> Result<Arc<Identity>, CallError> {
        if let Some(identity) = self.cached.load_full().filter(|i| fresh(i)) {
            return Ok(identity);
        }
        let _renewing = self.renewing.lock().await;
        let cached = self.cached.load_full();
        if let Some(identity) = cached.clone().filter(|i| fresh(i)) {
            return Ok(identity);
        }
        let provider = (self.provider.as_ref())
            .ok_or_else(|| CallError::Setup("no AWS credentials provider is configured".into()))?;
        let asked = tokio::time::timeout(PROVIDER_WAIT, provider.provide_credentials()).await;
        let why = match asked {
            Ok(Ok(credentials)) => {
                let identity = Arc::new(Identity::from(credentials));
                self.cached.store(Some(identity.clone()));
                return Ok(identity);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {}s", PROVIDER_WAIT.as_secs()),
        };
        match cached.filter(|i| !expired(i)) {
            Some(identity) => {
                tracing::warn!(%why, "could not renew AWS credentials; the current ones serve until they expire");
                Ok(identity)
            }
            None => Err(CallError::Setup(format!("no AWS credentials: {why}"))),
        }
    }

    /// Signs `request`, whose body is `body`, with `identity`.
    pub(crate) fn sign<B>(
        &self,
        identity: &Identity,
        request: &mut http::Request<B>,
        body: &[u8],
    ) -> Result<(), CallError> {
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(identity)
            .region(&self.region)
            .name(self.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| CallError::Setup(format!("signing: {e}")))?
            .into();
        let uri = request.uri().to_string();
        let headers = (request.headers().iter())
            .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
        let signable = SignableRequest::new("POST", &uri, headers, SignableBody::Bytes(body))
            .map_err(|e| CallError::Setup(format!("signing: {e}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| CallError::Setup(format!("signing: {e}")))?
            .into_parts();
        instructions.apply_to_request_http1x(request);
        Ok(())
    }
}

fn fresh(identity: &Identity) -> bool {
    identity
        .expiration()
        .is_none_or(|at| at > SystemTime::now() + RENEW_BEFORE)
}

fn expired(identity: &Identity) -> bool {
    identity
        .expiration()
        .is_some_and(|at| at <= SystemTime::now())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use aws_credential_types::provider::future::ProvideCredentials as Provided;
    use aws_sdk_sqs::config::Credentials;
    use aws_sdk_sqs::config::ProvideCredentials;

    use super::*;

    /// A provider that counts its calls and hands out credentials expiring `lasting` from now.
    #[derive(Debug)]
    struct Counting {
        calls: Arc<AtomicUsize>,
        lasting: Duration,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(&'a self) -> Provided<'a>
        where
            Self: 'a,
        {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let expiry = SystemTime::now() + self.lasting;
            Provided::ready(Ok(Credentials::new(
                format!("key{n}"),
                "secret",
                None,
                Some(expiry),
                "test",
            )))
        }
    }

    fn signer(lasting: Duration) -> (Signer, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let provider = SharedCredentialsProvider::new(Counting {
            calls: calls.clone(),
            lasting,
        });
        (
            Signer::new(Some(provider), "us-east-1".into(), "sqs"),
            calls,
        )
    }

    fn key(identity: &Identity) -> String {
        let credentials: &Credentials = identity.data().unwrap();
        credentials.access_key_id().to_string()
    }

    #[tokio::test]
    async fn credentials_are_asked_for_once_while_they_last() {
        let (signer, calls) = signer(Duration::from_secs(3600));
        for _ in 0..5 {
            assert_eq!(key(&signer.identity().await.unwrap()), "key0");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn credentials_about_to_expire_are_renewed() {
        let (signer, calls) = signer(RENEW_BEFORE / 2);
        assert_eq!(key(&signer.identity().await.unwrap()), "key0");
        assert_eq!(key(&signer.identity().await.unwrap()), "key1");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_provider_is_a_clear_error() {
        let signer = Signer::new(None, "us-east-1".into(), "sqs");
        let e = signer.identity().await.unwrap_err();
        assert!(e.to_string().contains("no AWS credentials provider"), "{e}");
    }

    #[tokio::test]
    async fn a_signed_request_carries_sigv4_headers() {
        let (signer, _) = signer(Duration::from_secs(3600));
        let identity = signer.identity().await.unwrap();
        let mut request = http::Request::post("https://sqs.us-east-1.amazonaws.com/")
            .header("host", "sqs.us-east-1.amazonaws.com")
            .body(())
            .unwrap();
        signer.sign(&identity, &mut request, b"{}").unwrap();
        let auth = request.headers()["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with("AWS4-HMAC-SHA256 Credential=key0/"),
            "{auth}"
        );
        assert!(auth.contains("/us-east-1/sqs/aws4_request"), "{auth}");
        assert!(request.headers().contains_key("x-amz-date"));
    }
}
