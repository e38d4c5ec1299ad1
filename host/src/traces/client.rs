//! The OTLP exporter's HTTP client. The SDK's batch processor exports from a thread of its own,
//! outside any async runtime, while hyper needs tokio: each export is therefore spawned onto the
//! host's runtime and awaited from the exporter's thread. HTTPS uses rustls with the platform's
//! roots, as the AWS clients do.

use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// An HTTP(S) client whose requests run on a tokio runtime.
#[derive(Debug)]
pub(super) struct OnRuntime {
    client: HyperClient<HttpsConnector<HttpConnector>>,
    runtime: tokio::runtime::Handle,
}

impl OnRuntime {
    /// A client for `runtime`, each request bounded by `timeout`.
    pub(super) fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> std::io::Result<Self> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(OnRuntime {
            client: HyperClient::new(connector, timeout, None),
            runtime,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        sent.await?
    }
}
