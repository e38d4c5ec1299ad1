//! `qhost celery inspect`: what qhost reads from a Celery message and what it would do with it,
//! for people moving a task to qhost.

use super::{ContentType, decode};
use crate::config::{MessageFormat, QueueConfig};

/// A Celery message as qhost reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct CeleryReport {
    /// The task name.
    pub task: String,
    /// The task id.
    pub id: String,
    /// The Celery protocol version it came in.
    pub protocol: u8,
    /// Retries before this publish.
    pub retries: u64,
    /// Positional and keyword arguments, as JSON.
    pub args: String,
    /// Keyword arguments, as JSON.
    pub kwargs: String,
    /// The eta and expiry as the message wrote them.
    pub eta: Option<String>,
    /// See `eta`.
    pub expires: Option<String>,
    /// The idempotency key qhost leases it under.
    pub key: String,
    /// On a queue: the plugin it routes to, or why none.
    pub route: Option<Result<String, String>>,
}

/// Reads `raw` (an SQS message body) as a Celery task; with `queue`, as that queue reads it
/// (its accepted serializers) and where it routes it. Without one, JSON and msgpack are read.
pub fn inspect(raw: &[u8], queue: Option<&QueueConfig>) -> Result<CeleryReport, String> {
    let accept = match queue.map(|q| (q, &q.format)) {
        None => vec![ContentType::Json, ContentType::Msgpack],
        Some((_, MessageFormat::Celery { accept })) => accept.clone(),
        Some((q, _)) => {
            return Err(format!(
                "queue `{}` is not a Celery queue (format = \"celery\")",
                q.name
            ));
        }
    };
    let task = decode(raw, &accept).map_err(|e| e.to_string())?;
    let route = queue.map(|q| {
        let routes = &q.routes;
        (routes.lookup(std::slice::from_ref(&task.name)))
            .or(routes.default.as_deref())
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "not routed: the queue routes {} and has no default plugin; it would be \
                     dead-lettered",
                    routes.names()
                )
            })
    });
    Ok(CeleryReport {
        key: task.key(),
        args: task.args.to_string(),
        kwargs: task.kwargs.to_string(),
        eta: task.eta.map(|s| s.text),
        expires: task.expires.map(|s| s.text),
        task: task.name,
        id: task.id,
        protocol: task.protocol,
        retries: task.retries,
        route,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::celery::fixtures::v2_json;
    use crate::config::Config;

    #[test]
    fn a_report_says_what_qhost_reads_and_where_the_queue_routes_it() {
        let raw = v2_json("proj.a", "id-1", json!([1]), json!({"k": "v"}));
        let report = inspect(&raw, None).unwrap();
        assert_eq!(
            (report.task.as_str(), report.key.as_str()),
            ("proj.a", "id-1")
        );
        assert_eq!(
            (report.args.as_str(), report.kwargs.as_str()),
            ("[1]", r#"{"k":"v"}"#)
        );
        assert_eq!(report.route, None);

        let config = Config::parse(
            "[[queue]]\nname = \"celery\"\nformat = \"celery\"\ntasks = { \"proj.b\" = \"pb\" }\n\
             [[queue]]\nname = \"jobs\"\nplugin = \"p\"\n",
        )
        .unwrap();
        let routed = inspect(&raw, Some(&config.queues[0]))
            .unwrap()
            .route
            .unwrap();
        assert!(
            routed
                .unwrap_err()
                .contains("routes proj.b and has no default plugin")
        );
        let err = inspect(&raw, Some(&config.queues[1])).unwrap_err();
        assert_eq!(
            err,
            "queue `jobs` is not a Celery queue (format = \"celery\")"
        );
        assert!(
            inspect(b"nope", None)
                .unwrap_err()
                .starts_with("not a Celery message")
        );
    }
}
