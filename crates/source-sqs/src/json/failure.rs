//! How a call on the JSON client fails, and which failures are worth another attempt.
//!
//! SQS answers an error with a JSON body (`__type`, `message`) and, because it keeps its
//! older query API's error codes, an `x-amzn-query-error: <code>;<Sender|Receiver>` header.
//! The code is read as the SDK reads it (the header's first, then `__type` without its
//! namespace), so the classification downstream (`refusal.rs`, expired receipts) sees the
//! same codes whichever client made the call.

use std::time::Duration;

/// A call that failed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CallError {
    /// SQS answered with an error.
    #[error("{}", service_line(.code, .message))]
    Service {
        /// The HTTP status.
        status: u16,
        /// SQS's error code (`QueueDoesNotExist`, `AWS.SimpleQueueService.NonExistentQueue`).
        code: String,
        /// SQS's message, if it gave one.
        message: Option<String>,
    },
    /// No answer came within the attempt's deadline.
    #[error("no answer within the deadline")]
    TimedOut,
    /// No connection could be opened within the connect deadline.
    #[error("could not connect within the deadline")]
    ConnectTimedOut,
    /// The connection failed (refused, reset, TLS).
    #[error("connection failed: {0}")]
    Connection(String),
    /// An answer came that could not be read as the call's answer.
    #[error("the answer could not be read: {0}")]
    Unreadable(String),
    /// No credentials or region to sign with, or no endpoint to send to.
    #[error("{0}")]
    Setup(String),
}

fn service_line(code: &str, message: &Option<String>) -> String {
    match message {
        Some(message) => format!("{code}: {message}"),
        None => code.to_string(),
    }
}

/// Error codes that mean "slow down" or "try again": the SDK's standard retry policy's
/// throttling and transient codes, as SQS and its compatibles use them.
const RETRIABLE_CODES: [&str; 9] = [
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
];

impl CallError {
    /// Whether another attempt may succeed: the network, a deadline, a 5xx, throttling.
    pub(crate) fn is_retriable(&self) -> bool {
        match self {
            CallError::Service { status, code, .. } => {
                *status >= 500 || *status == 429 || RETRIABLE_CODES.contains(&code.as_str())
            }
            CallError::TimedOut
            | CallError::ConnectTimedOut
            | CallError::Connection(_)
            | CallError::Unreadable(_) => true,
            CallError::Setup(_) => false,
        }
    }

    /// Whether the call ran out of time.
    pub(crate) fn timed_out(&self) -> bool {
        matches!(self, CallError::TimedOut | CallError::ConnectTimedOut)
    }

    /// SQS's error code, if SQS answered with one.
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            CallError::Service { code, .. } => Some(code),
            _ => None,
        }
    }

    /// The error SQS answered with: status `status`, the `x-amzn-query-error` header's value
    /// if it sent one, and the body.
    pub(crate) fn from_answer(status: u16, query_error: Option<&str>, body: &[u8]) -> CallError {
        #[derive(serde::Deserialize, Default)]
        #[serde(default)]
        struct ErrorBody {
            #[serde(rename = "__type")]
            kind: Option<String>,
            code: Option<String>,
            #[serde(alias = "Message")]
            message: Option<String>,
        }
        let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
        let from_header = query_error
            .and_then(|h| h.split_once(';'))
            .map(|(code, _)| code.to_string());
        let code = from_header
            .or_else(|| {
                parsed
                    .code
                    .or(parsed.kind)
                    .map(|c| sanitize(&c).to_string())
            })
            .unwrap_or_else(|| format!("HTTP {status}"));
        CallError::Service {
            status,
            code,
            message: parsed.message,
        }
    }
}

/// An error type without its namespace (`com.amazonaws.sqs#`) or trailing URL (`:http://…`).
fn sanitize(code: &str) -> &str {
    let code = code.split(':').next().unwrap_or(code);
    code.rsplit('#').next().unwrap_or(code)
}

/// How long to wait before attempt `attempt` (2, 3, …): the SDK's standard policy, a random
/// share of one second doubled per attempt, at most 20 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let ceiling = Duration::from_secs(1)
        .saturating_mul(1 << attempt.saturating_sub(2).min(5))
        .min(Duration::from_secs(20));
    ceiling.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_error_header_names_the_code_and_the_body_the_message() {
        let e = CallError::from_answer(
            400,
            Some("AWS.SimpleQueueService.NonExistentQueue;Sender"),
            br#"{"__type":"com.amazonaws.sqs#QueueDoesNotExist","message":"gone"}"#,
        );
        assert_eq!(e.code(), Some("AWS.SimpleQueueService.NonExistentQueue"));
        assert_eq!(
            e.to_string(),
            "AWS.SimpleQueueService.NonExistentQueue: gone"
        );
        assert!(!e.is_retriable());
    }

    #[test]
    fn without_the_header_the_type_names_the_code() {
        let e = CallError::from_answer(
            400,
            None,
            br#"{"__type":"com.amazonaws.sqs#ReceiptHandleIsInvalid:http://x","Message":"old"}"#,
        );
        assert_eq!(e.code(), Some("ReceiptHandleIsInvalid"));
        assert_eq!(e.to_string(), "ReceiptHandleIsInvalid: old");
        let bare = CallError::from_answer(503, None, b"<html>busy</html>");
        assert_eq!(bare.to_string(), "HTTP 503");
        assert!(bare.is_retriable(), "a 5xx is worth another attempt");
    }

    #[test]
    fn throttling_and_the_network_are_retried_and_refusals_are_not() {
        let throttled = CallError::from_answer(400, Some("RequestThrottled;Sender"), b"{}");
        assert!(throttled.is_retriable());
        assert!(CallError::TimedOut.is_retriable() && CallError::TimedOut.timed_out());
        assert!(CallError::Connection("reset".into()).is_retriable());
        assert!(!CallError::Setup("no region".into()).is_retriable());
        let refused = CallError::from_answer(400, Some("InvalidParameterValue;Sender"), b"{}");
        assert!(!refused.is_retriable());
    }

    #[test]
    fn backoff_grows_per_attempt_within_its_ceiling() {
        for _ in 0..100 {
            assert!(backoff(2) <= Duration::from_secs(1));
            assert!(backoff(3) <= Duration::from_secs(2));
            assert!(backoff(30) <= Duration::from_secs(20));
        }
    }
}
