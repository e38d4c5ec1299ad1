//! Shared AWS setup for the SQS queue and the S3 payload store: the standard configuration
//! chain (credentials, region, profile, `AWS_ENDPOINT_URL`) with the overrides qhost's
//! configuration may set, one HTTPS client, and path-style S3 addressing for S3-compatible
//! servers.
//!
//! The HTTPS client is hyper with rustls on *ring*, built here rather than taken from the
//! SDK's default (rustls on aws-lc, whose C build cost more than the rest of the SDK).
//!
//! Every call has a deadline ([`AwsDeadlines`]): the SDK's own defaults bound only the connect,
//! so an answer that never arrives (a half-open connection, a load balancer that swallows a
//! reply) would hang the call, and whatever waits on it, forever. A timed-out attempt is retried
//! by the SDK's standard retry policy like any transient error, within the operation deadline
//! (and likewise by the JSON client on the SQS hot path, `qhost-source-sqs`).
//!
//! A crate of its own because two backends share it, the SQS source (`qhost-source-sqs`) and
//! the host's S3 payload store, and neither should depend on the other.

use std::time::Duration;

use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use aws_smithy_types::timeout::TimeoutConfig;

/// Attempts the SDK's standard retry policy (and the SQS JSON client) makes of one call.
pub const ATTEMPTS: u32 = 3;
/// How long the credentials chain may look at start.
const CREDENTIALS_WAIT: Duration = Duration::from_secs(10);

/// How long calls to an AWS service may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwsDeadlines {
    /// Opening a connection (TCP and TLS).
    pub connect: Duration,
    /// One attempt of a call, from sending the request to the whole answer. A call makes at
    /// most three attempts, so it ends within about three times this.
    pub call: Duration,
    /// A long-polling receive: its wait plus this margin, per attempt.
    pub receive_margin: Duration,
}

impl AwsDeadlines {
    /// The defaults for SQS: answers take milliseconds, so seconds mean a lost answer.
    pub const SQS: AwsDeadlines = AwsDeadlines {
        connect: Duration::from_secs(3),
        call: Duration::from_secs(5),
        receive_margin: Duration::from_secs(5),
    };

    /// The defaults for S3: a payload of many megabytes takes longer to move.
    pub const S3: AwsDeadlines = AwsDeadlines {
        call: Duration::from_secs(30),
        ..AwsDeadlines::SQS
    };

    /// The SDK's timeouts for calls whose attempts may take `attempt`.
    pub fn timeouts(&self, attempt: Duration) -> TimeoutConfig {
        TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(attempt)
            .operation_timeout(attempt * ATTEMPTS + Duration::from_secs(2))
            .build()
    }
}

impl Default for AwsDeadlines {
    fn default() -> Self {
        AwsDeadlines::SQS
    }
}

/// Where to find an AWS service (or a compatible server), and how long its calls may take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AwsSettings {
    /// Region; otherwise the AWS chain (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// Endpoint override for compatible servers; `AWS_ENDPOINT_URL` also works.
    pub endpoint_url: Option<String>,
    /// Deadlines of its calls.
    pub deadlines: AwsDeadlines,
}

impl AwsSettings {
    /// The AWS configuration chain, with these overrides and qhost's HTTPS client.
    pub async fn load(&self) -> aws_config::SdkConfig {
        let deadlines = &self.deadlines;
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(https_client())
            .timeout_config(deadlines.timeouts(deadlines.call));
        if let Some(region) = &self.region {
            loader = loader.region(aws_config::Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        loader.load().await
    }

    /// Checks, before any call, what the SDK would otherwise report as a configuration error
    /// deep inside its first request: that a region is set and that the standard chain finds
    /// credentials. Each failure says where it looked and what to set.
    pub async fn check(&self) -> anyhow::Result<()> {
        use aws_credential_types::provider::ProvideCredentials as _;
        let sdk = self.load().await;
        if sdk.region().is_none() {
            anyhow::bail!(
                "no AWS region: set `region` under [source] in qhost.toml, or AWS_REGION \
                 (or a region in the profile AWS_PROFILE names)"
            );
        }
        let Some(provider) = sdk.credentials_provider() else {
            anyhow::bail!("no AWS credentials provider is configured");
        };
        let found = tokio::time::timeout(CREDENTIALS_WAIT, provider.provide_credentials()).await;
        let why = match found {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {}s", CREDENTIALS_WAIT.as_secs()),
        };
        anyhow::bail!(
            "no AWS credentials found (checked: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the \
             profile AWS_PROFILE names in ~/.aws/config and ~/.aws/credentials, web identity, \
             SSO, and the container and instance metadata endpoints): {why}"
        )
    }

    /// Whether S3 should be addressed path-style: S3-compatible servers at an overridden
    /// endpoint expect it, where AWS itself uses virtual-hosted buckets.
    pub fn s3_path_style(&self) -> bool {
        self.endpoint_url.is_some()
    }
}

/// The HTTPS client qhost's AWS clients use (for an SDK configuration built by hand, as
/// `SqsQueue::from_sdk_config` takes).
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// A failed AWS call in one short line: the service's error code and message, or what went
/// wrong on the way (no answer in time, a connection that failed, an answer that could not be
/// read). Never the raw HTTP response: a log line carries what an operator acts on.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    /// The line.
    pub text: String,
    /// Whether the call ran out of time.
    pub timed_out: bool,
}

impl Failure {
    /// Describes `e`.
    pub fn of<E, R>(e: &SdkError<E, R>) -> Failure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + 'static,
    {
        let (text, timed_out) = match e {
            SdkError::TimeoutError(_) => ("no answer within the deadline".to_string(), true),
            SdkError::DispatchFailure(d) if d.is_timeout() => {
                ("could not connect within the deadline".to_string(), true)
            }
            SdkError::DispatchFailure(_) => {
                (format!("connection failed: {}", root_cause(e)), false)
            }
            SdkError::ResponseError(_) => ("the answer could not be read".to_string(), false),
            SdkError::ServiceError(_) => {
                let code = e.code().unwrap_or("an error without a code");
                match e.message() {
                    Some(message) => (format!("{code}: {message}"), false),
                    None => (code.to_string(), false),
                }
            }
            _ => (root_cause(e), false),
        };
        Failure { text, timed_out }
    }
}

/// The innermost cause of `e` (the one that says what happened: "Connection refused",
/// "Missing Region"), cut to a line.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    let mut text = inner.to_string();
    if text.len() > 200 {
        let cut = (0..=200)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    text
}
