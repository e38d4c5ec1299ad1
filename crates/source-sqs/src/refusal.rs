//! Which SQS errors are permanent: the request is wrong and will be refused again however
//! often it is sent (a bad attribute, a missing queue), as opposed to transient (throttling, a
//! 5xx, a network failure), which the pipeline retries.
//!
//! Only codes that describe the message or its target are permanent. An access-denied or a
//! signature error is a deployment problem that an operator fixes; treating it as permanent
//! would dead-letter every message while it lasts.

/// Error codes SQS gives a request that can never succeed as it is.
const PERMANENT: [&str; 13] = [
    "InvalidParameterValue",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "InvalidMessageContents",
    "MissingParameter",
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "BatchRequestTooLong",
    "BatchEntryIdsNotDistinct",
    "InvalidBatchEntryId",
    "TooManyEntriesInBatchRequest",
    "UnsupportedOperation",
    "AWS.SimpleQueueService.UnsupportedOperation",
];

/// Whether an error `code` from SQS means the request can never succeed.
pub(super) fn is_permanent(code: &str) -> bool {
    PERMANENT.contains(&code)
        || PERMANENT
            .iter()
            .any(|p| code.rsplit('.').next().is_some_and(|tail| tail == *p))
}

/// Whether an error `code` from SQS says a receipt no longer names a delivery (its visibility
/// lapsed and the message was received again, or it was deleted).
pub(super) fn receipt_expired(code: &str) -> bool {
    code.contains("ReceiptHandleIsInvalid") || code.contains("MessageNotInflight")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_and_target_errors_are_permanent_and_service_errors_are_not() {
        for code in [
            "InvalidParameterValue",
            "InvalidAttributeName",
            "AWS.SimpleQueueService.NonExistentQueue",
            "QueueDoesNotExist",
            "AWS.SimpleQueueService.InvalidAttributeValue",
        ] {
            assert!(is_permanent(code), "{code}");
        }
        for code in [
            "RequestThrottled",
            "ThrottlingException",
            "ServiceUnavailable",
            "InternalError",
            "AccessDenied",
            "",
        ] {
            assert!(!is_permanent(code), "{code}");
        }
    }
}
