//! A response body with the plugin's size cap and the request's deadline on it.
//!
//! The cap is counted as bytes arrive, so a server that sends more than it announced (or
//! announces nothing and streams without end) is cut off at the cap, not after it has filled
//! the host's memory; the guest's read fails with `HTTP-response-body-size`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;
use wasmtime_wasi_http::Error;

use super::counts::{HttpCounts, HttpResult};

/// `hyper`'s incoming body, bounded.
pub(super) struct Bounded {
    inner: hyper::body::Incoming,
    left: u64,
    limit: u64,
    deadline: Pin<Box<Sleep>>,
    counts: Arc<HttpCounts>,
    done: bool,
}

impl Bounded {
    pub(super) fn new(
        inner: hyper::body::Incoming,
        limit: u64,
        deadline: tokio::time::Instant,
        counts: Arc<HttpCounts>,
    ) -> Self {
        Bounded {
            inner,
            left: limit,
            limit,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            counts,
            done: false,
        }
    }

    fn fail(
        &mut self,
        error: Error,
        result: HttpResult,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        self.done = true;
        self.counts.count(result);
        Poll::Ready(Some(Err(error)))
    }
}

impl Body for Bounded {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Pending => {
                ready!(self.deadline.as_mut().poll(cx));
                return self.fail(Error::ConnectionReadTimeout, HttpResult::Timeout);
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                return Poll::Ready(Some(Err(Error::Hyper(e))));
            }
            Poll::Ready(Some(Ok(frame))) => frame,
        };
        if let Some(data) = frame.data_ref() {
            let len = data.len() as u64;
            if len > self.left {
                let limit = self.limit;
                return self.fail(
                    Error::HttpResponseBodySize(Some(limit)),
                    HttpResult::TooLarge,
                );
            }
            self.left -= len;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
