//! `qhost inspect`: what qhost reads from a message, by the format that reads it: for each run
//! the message holds, its route and the plugin a queue sends it to, its key, and the body and
//! attributes its handler is given. A message a queue would dead-letter says why.
//!
//! Keys are derived as the host derives them, from the routed plugin's manifest in the plugins
//! directory (its `[idempotency] key`); without a queue, by the default key source, which reads
//! the id the format names.

use std::path::Path;

use super::{Admit, Route, Run};
use crate::config::{Config, MessageFormat, QueueConfig};
use crate::message::{Attribute, Received};
use crate::plugin::manifest::Manifest;

/// What qhost reads from one message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspected {
    /// The format that read it.
    pub format: &'static str,
    /// Its runs, in order (none: the message holds nothing to run, and is acked).
    pub runs: Vec<InspectedRun>,
}

/// One run of an inspected message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InspectedRun {
    /// The names its route is looked up by, in order (empty: the default plugin).
    pub route: Vec<String>,
    /// With a queue: the plugin it runs on, or why it would not run.
    pub plugin: Option<Result<String, String>>,
    /// The idempotency key it is leased under, or why it has none.
    pub key: Result<String, String>,
    /// The body its handler is given.
    pub body: Vec<u8>,
    /// The attributes its handler is given.
    pub attributes: Vec<Attribute>,
}

/// Reads `msg` as queue `queue` of `config` does (its format, routes and plugins' manifests),
/// or, without a queue, as `format` does.
pub fn inspect(
    config: &Config,
    msg: &Received,
    queue: Option<&QueueConfig>,
    format: Option<&MessageFormat>,
) -> Result<Inspected, String> {
    let format = match (queue, format) {
        (Some(q), _) => q.format.clone(),
        (None, Some(f)) => f.clone(),
        (None, None) => MessageFormat::Qhost {
            route_attribute: None,
        },
    };
    let named = QueueConfig {
        format: format.clone(),
        ..queue.cloned().unwrap_or_else(|| config.queues[0].clone())
    };
    let reader = super::for_queue(&super::open(config), &named);
    let runs = (reader.read(msg, &msg.body, &msg.attributes)).map_err(|e| e.to_string())?;
    let runs = runs.into_iter().map(|run| {
        let plugin = queue.map(|q| plugin_for(q, &run));
        let manifest = (plugin.as_ref().and_then(|p| p.as_ref().ok()))
            .and_then(|name| manifest_of(&config.plugins_dir, name));
        inspected(msg, run, plugin, manifest)
    });
    Ok(Inspected {
        format: format.name(),
        runs: runs.collect(),
    })
}

/// The report of one run.
fn inspected(
    msg: &Received,
    run: Run,
    plugin: Option<Result<String, String>>,
    manifest: Option<Manifest>,
) -> InspectedRun {
    let route = match &run.route {
        Route::Default => Vec::new(),
        Route::Named { names, .. } => names.clone(),
        Route::Chosen { value, .. } => vec![value.clone()],
    };
    let key = super::key_of(&run, msg, manifest.as_ref());
    let (body, attributes) = run.view_of(msg);
    InspectedRun {
        route,
        plugin,
        key,
        body,
        attributes,
    }
}

/// Where `queue` routes `run`, or why it would not run it.
fn plugin_for(queue: &QueueConfig, run: &Run) -> Result<String, String> {
    let plugin = (run.route.plugin(&queue.routes, &queue.plugin))
        .map_err(|unrouted| format!("{unrouted}; it would be dead-lettered"))?;
    match &run.admit {
        Admit::Now => Ok(plugin.to_string()),
        Admit::NotDue { eta, .. } => {
            Err(format!("{plugin}, once due at {eta}: put back until then"))
        }
        Admit::Expired { expires } => Err(format!("expired at {expires}: acked without running")),
        Admit::Refused(why) => Err(format!("{why}: it would be dead-lettered")),
    }
}

/// The manifest of plugin `name` in `dir`, when it has one that parses.
fn manifest_of(dir: &Path, name: &str) -> Option<Manifest> {
    let text = std::fs::read_to_string(dir.join(format!("{name}.toml"))).ok()?;
    Manifest::parse(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tests::received;

    fn config(queue: &str) -> Config {
        Config::parse(&format!("[[queue]]\nname = \"q\"\n{queue}")).unwrap()
    }

    #[test]
    fn a_report_says_each_run_s_route_plugin_key_body_and_attributes() {
        let config = config("format = \"sns\"\nroutes = { \"orders\" = \"orders-plugin\" }");
        let body = serde_json::json!({
            "Type": "Notification", "MessageId": "m-1", "Message": "hi",
            "TopicArn": "arn:aws:sns:us-east-1:1:orders",
        })
        .to_string();
        let report = inspect(&config, &received(&body), Some(&config.queues[0]), None).unwrap();
        assert_eq!(report.format, "sns");
        let run = &report.runs[0];
        assert_eq!(run.route, ["arn:aws:sns:us-east-1:1:orders", "orders"]);
        assert_eq!(run.plugin, Some(Ok("orders-plugin".to_string())));
        assert_eq!(run.key, Ok("m-1".to_string()));
        assert_eq!(run.body, b"hi");

        let elsewhere = body.replace(":orders\"", ":refunds\"");
        let report = inspect(
            &config,
            &received(&elsewhere),
            Some(&config.queues[0]),
            None,
        );
        let plugin = report.unwrap().runs[0].plugin.clone().unwrap();
        assert_eq!(
            plugin.unwrap_err(),
            "topic `arn:aws:sns:us-east-1:1:refunds` is not one this queue routes (routes: orders) \
             and it has no default plugin; it would be dead-lettered"
        );
    }

    #[test]
    fn without_a_queue_the_format_reads_and_what_it_refuses_says_why() {
        let config = Config::default();
        let eventbridge = MessageFormat::EventBridge;
        let refused = inspect(&config, &received("[]"), None, Some(&eventbridge)).unwrap_err();
        assert_eq!(refused, "not an EventBridge event: no `id`");
        let plain = inspect(&config, &received("hello"), None, None).unwrap();
        assert_eq!(plain.format, "qhost");
        assert_eq!(
            plain.runs[0].key,
            Ok("sqs-id".to_string()),
            "the message id"
        );
        assert_eq!(plain.runs[0].plugin, None);
    }
}
