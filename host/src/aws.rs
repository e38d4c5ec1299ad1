//! Shared AWS setup for the SQS queue and the S3 payload store: the standard configuration
//! chain (credentials, region, profile, `AWS_ENDPOINT_URL`) with the overrides qhost's
//! configuration may set, one HTTPS client, and path-style S3 addressing for S3-compatible
//! servers.
//!
//! The HTTPS client is hyper with rustls on *ring*, built here rather than taken from the
//! SDK's default (rustls on aws-lc, whose C build cost more than the rest of the SDK).

use aws_sdk_sqs::config::SharedHttpClient;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

/// Where to find an AWS service (or a compatible server).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AwsSettings {
    /// Region; otherwise the AWS chain (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// Endpoint override for compatible servers; `AWS_ENDPOINT_URL` also works.
    pub endpoint_url: Option<String>,
}

impl AwsSettings {
    /// The AWS configuration chain, with these overrides and qhost's HTTPS client.
    pub async fn load(&self) -> aws_config::SdkConfig {
        let mut loader =
            aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https_client());
        if let Some(region) = &self.region {
            loader = loader.region(aws_config::Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        loader.load().await
    }

    /// Whether S3 should be addressed path-style: S3-compatible servers at an overridden
    /// endpoint expect it, where AWS itself uses virtual-hosted buckets.
    pub(crate) fn s3_path_style(&self) -> bool {
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
