//! Payloads in S3 (or any S3-compatible server: the endpoint can be overridden, and path-style
//! addressing is used then, as such servers expect).
//!
//! Every call has its deadline ([`AwsDeadlines`]); reading a fetched object's body is bounded
//! by it too, since the SDK's timeouts end when the answer's head arrives.

use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;

use super::store::{PayloadError, PayloadStore};
use qhost_aws::{AwsDeadlines, AwsSettings, Failure};

/// An S3 client; [`S3Payloads::bucket`] gives the store for one bucket.
#[derive(Clone, Debug)]
pub struct S3Payloads {
    client: Client,
    /// How long reading an object's body may take.
    body_deadline: Duration,
}

/// One bucket as a payload store; keys are object keys.
#[derive(Clone, Debug)]
pub struct S3Bucket {
    client: Client,
    bucket: String,
    body_deadline: Duration,
}

fn unavailable(e: impl std::fmt::Display) -> PayloadError {
    PayloadError::Unavailable(format!("s3: {e}"))
}

/// A failed S3 call, in one line.
fn failed<E, R>(e: aws_sdk_s3::error::SdkError<E, R>) -> PayloadError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    unavailable(Failure::of(&e).text)
}

impl S3Payloads {
    /// A client with the standard AWS chain, and `settings`' region and endpoint if given.
    pub(crate) async fn connect(settings: &AwsSettings) -> Self {
        let sdk = settings.load().await;
        Self::with_deadlines(&sdk, settings.s3_path_style(), settings.deadlines)
    }

    /// A client from a ready SDK configuration; `path_style` for S3-compatible servers. Its
    /// calls take S3's default deadlines unless the configuration sets an attempt timeout.
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, path_style: bool) -> Self {
        Self::with_deadlines(sdk, path_style, AwsDeadlines::S3)
    }

    /// A client whose calls take `deadlines` unless `sdk` sets its own attempt timeout.
    pub fn with_deadlines(
        sdk: &aws_config::SdkConfig,
        path_style: bool,
        deadlines: AwsDeadlines,
    ) -> Self {
        let mut config = aws_sdk_s3::config::Builder::from(sdk).force_path_style(path_style);
        let attempt = sdk
            .timeout_config()
            .and_then(|t| t.operation_attempt_timeout());
        if attempt.is_none() {
            config = config.timeout_config(deadlines.timeouts(deadlines.call));
        }
        S3Payloads {
            client: Client::from_conf(config.build()),
            body_deadline: attempt.unwrap_or(deadlines.call),
        }
    }

    /// The store for `bucket`.
    pub fn bucket(&self, bucket: &str) -> S3Bucket {
        S3Bucket {
            client: self.client.clone(),
            bucket: bucket.to_string(),
            body_deadline: self.body_deadline,
        }
    }
}

#[async_trait]
impl PayloadStore for S3Bucket {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), PayloadError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(bytes.to_vec()))
            .send()
            .await
            .map_err(failed)?;
        Ok(())
    }

    async fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, PayloadError> {
        let object = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(object) => object,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                return Err(PayloadError::Missing(format!("s3://{}/{key}", self.bucket)));
            }
            Err(e) => return Err(failed(e)),
        };
        let larger = || PayloadError::Larger(format!("s3://{}/{key}", self.bucket), max);
        if object.content_length().is_some_and(|n| n as u64 > max) {
            return Err(larger());
        }
        // The declared length is the server's word; the stream is read within the limit too,
        // and within the deadline.
        let read = async {
            let mut body = object.body;
            let mut bytes = Vec::new();
            while let Some(chunk) = body.try_next().await.map_err(unavailable)? {
                if (bytes.len() + chunk.len()) as u64 > max {
                    return Err(larger());
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok(bytes)
        };
        tokio::time::timeout(self.body_deadline, read)
            .await
            .unwrap_or_else(|_| {
                Err(unavailable(
                    "the object's body did not arrive within the deadline",
                ))
            })
    }

    async fn delete(&self, key: &str) -> Result<(), PayloadError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(failed)?;
        Ok(())
    }
}
