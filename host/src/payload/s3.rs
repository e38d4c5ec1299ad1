//! Payloads in S3 (or any S3-compatible server: the endpoint can be overridden, and path-style
//! addressing is used then, as such servers expect).

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::primitives::ByteStream;

use super::store::{PayloadError, PayloadStore};
use crate::aws::AwsSettings;

/// An S3 client; [`S3Payloads::bucket`] gives the store for one bucket.
#[derive(Clone, Debug)]
pub struct S3Payloads {
    client: Client,
}

/// One bucket as a payload store; keys are object keys.
#[derive(Clone, Debug)]
pub struct S3Bucket {
    client: Client,
    bucket: String,
}

fn unavailable(e: impl std::fmt::Display) -> PayloadError {
    PayloadError::Unavailable(format!("s3: {e}"))
}

impl S3Payloads {
    /// A client with the standard AWS chain, and `settings`' region and endpoint if given.
    pub async fn connect(settings: &AwsSettings) -> Self {
        Self::from_sdk_config(&settings.load().await, settings.s3_path_style())
    }

    /// A client from a ready SDK configuration; `path_style` for S3-compatible servers.
    pub fn from_sdk_config(sdk: &aws_config::SdkConfig, path_style: bool) -> Self {
        let config = aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(path_style)
            .build();
        S3Payloads {
            client: Client::from_conf(config),
        }
    }

    /// The store for `bucket`.
    pub fn bucket(&self, bucket: &str) -> S3Bucket {
        S3Bucket {
            client: self.client.clone(),
            bucket: bucket.to_string(),
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
            .map_err(|e| unavailable(aws_sdk_s3::error::DisplayErrorContext(e)))?;
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
            Err(e) => return Err(unavailable(aws_sdk_s3::error::DisplayErrorContext(e))),
        };
        let larger = || PayloadError::Larger(format!("s3://{}/{key}", self.bucket), max);
        if object.content_length().is_some_and(|n| n as u64 > max) {
            return Err(larger());
        }
        // The declared length is the server's word; the stream is read within the limit too.
        let mut body = object.body;
        let mut bytes = Vec::new();
        while let Some(chunk) = body.try_next().await.map_err(unavailable)? {
            if (bytes.len() + chunk.len()) as u64 > max {
                return Err(larger());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    async fn delete(&self, key: &str) -> Result<(), PayloadError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| unavailable(aws_sdk_s3::error::DisplayErrorContext(e)))?;
        Ok(())
    }
}
