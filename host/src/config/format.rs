//! How a queue's messages are read (`format`) and where each is routed (`routes`): the checked
//! form of the fields that the format step (`qhost-formats`) runs on.
//!
//! One routing table per queue, whatever the format: `routes = { NAME = PLUGIN, … }`, keyed by
//! what the format routes on (an SNS topic, an EventBridge detail-type, an S3 event, a Celery
//! task name, or the value of a qhost message's route attribute). `tasks` is Celery's spelling
//! of the same table, and `plugin` the default route. A message can only reach a plugin this
//! table (or the default) names.

use std::collections::BTreeMap;

use anyhow::bail;
pub(crate) use qhost_formats::FORMATS;
pub use qhost_formats::MessageFormat;
pub(crate) use qhost_formats::Routes;

use super::file::{RawQueue, RawRoutes};
use crate::celery::ContentType;
use crate::message::wire::valid_plugin_name;

/// The queue's format and routing table. `field` names a field of this queue in errors.
pub(super) fn format_of(
    q: &RawQueue,
    field: &dyn Fn(&str) -> String,
) -> anyhow::Result<(MessageFormat, Routes)> {
    let name = q.format.as_deref().unwrap_or("qhost");
    if !FORMATS.contains(&name) {
        bail!(
            "{} `{name}` is not a message format qhost reads ({})",
            field("format"),
            FORMATS.map(|f| format!("\"{f}\"")).join(", ")
        );
    }
    if name != "celery" {
        for (set, f) in [
            (q.tasks.is_some(), "tasks"),
            (q.accept_content.is_some(), "accept-content"),
        ] {
            if set {
                bail!("{} is for Celery queues; add format = \"celery\"", field(f));
            }
        }
    }
    if name != "qhost" && q.route_attribute.is_some() {
        bail!(
            "{} routes by what format = \"{name}\" reads; route-attribute is for format = \"qhost\"",
            field("route-attribute")
        );
    }
    let routes = routes_of(q, name, field)?;
    let format = match name {
        "qhost" => qhost(q, &routes, field)?,
        "celery" => MessageFormat::Celery {
            accept: accepted(q, field)?,
        },
        "sns" => MessageFormat::Sns,
        "eventbridge" => MessageFormat::EventBridge,
        _ => MessageFormat::S3,
    };
    if routes.table.is_empty() && routes.default.is_none() {
        let table = if name == "celery" { "tasks" } else { "routes" };
        bail!(
            "{} needs {} (each {}'s plugin) or {} (the plugin of every message)",
            field("format"),
            field(table),
            route_noun(name),
            field("plugin")
        );
    }
    Ok((format, routes))
}

/// What a route name is, by format: how errors and the reference speak of it.
pub(crate) fn route_noun(format: &str) -> &'static str {
    match format {
        "celery" => "task name",
        "sns" => "topic",
        "eventbridge" => "detail-type",
        "s3" => "event",
        _ => "route",
    }
}

/// The routing table as written: `routes` (a table, or for qhost's format a list of plugin
/// names), or Celery's `tasks`; `plugin` is the default.
fn routes_of(q: &RawQueue, format: &str, field: &dyn Fn(&str) -> String) -> anyhow::Result<Routes> {
    let (table, named) = match (&q.tasks, &q.routes) {
        (Some(_), Some(_)) => bail!(
            "{} and {} are one table; write one of them",
            field("tasks"),
            field("routes")
        ),
        (Some(tasks), None) => (tasks.clone(), "tasks"),
        (None, Some(RawRoutes::Table(table))) => (table.clone(), "routes"),
        (None, Some(RawRoutes::List(list))) if format == "qhost" => {
            let identity = list.iter().map(|p| (p.clone(), p.clone()));
            (identity.collect(), "routes")
        }
        (None, Some(RawRoutes::List(_))) => bail!(
            "{} is a table of {} to plugin for format = \"{format}\": routes = {{ \"NAME\" = \"PLUGIN\" }}",
            field("routes"),
            route_noun(format)
        ),
        (None, None) => (BTreeMap::new(), "routes"),
    };
    for (route, plugin) in &table {
        if route.is_empty() {
            bail!("{} has an empty {}", field(named), route_noun(format));
        }
        if !valid_plugin_name(plugin) {
            bail!(
                "{} routes `{route}` to `{plugin}`, which is not a valid plugin name",
                field(named)
            );
        }
    }
    if let Some(plugin) = &q.plugin
        && !valid_plugin_name(plugin)
    {
        bail!(
            "{} `{plugin}` is not a valid plugin name (letters, digits, - and _)",
            field("plugin")
        );
    }
    Ok(Routes {
        table,
        default: q.plugin.clone(),
    })
}

/// qhost's own format: a route attribute needs routes to choose from (deny by default), and
/// the default plugin's name is one of them.
fn qhost(
    q: &RawQueue,
    routes: &Routes,
    field: &dyn Fn(&str) -> String,
) -> anyhow::Result<MessageFormat> {
    if q.route_attribute.is_some() && routes.table.is_empty() {
        bail!(
            "{} needs {}: the plugins a message may choose (deny by default)",
            field("route-attribute"),
            field("routes")
        );
    }
    if routes.default.is_none() {
        bail!("{} is required", field("plugin"));
    }
    Ok(MessageFormat::Qhost {
        route_attribute: q.route_attribute.clone(),
    })
}

/// A Celery queue's accepted serializers.
fn accepted(q: &RawQueue, field: &dyn Fn(&str) -> String) -> anyhow::Result<Vec<ContentType>> {
    match &q.accept_content {
        None => Ok(vec![ContentType::Json]),
        Some(names) if names.is_empty() => bail!("{} is empty", field("accept-content")),
        Some(names) => names
            .iter()
            .map(|n| ContentType::parse(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{}: {e}", field("accept-content"))),
    }
}

#[cfg(test)]
mod tests {
    use crate::celery::ContentType;
    use crate::config::{Config, MessageFormat};

    fn queue(lines: &str) -> anyhow::Result<Config> {
        Config::parse(&format!("[[queue]]\nname = \"q\"\n{lines}"))
    }

    fn refusal(lines: &str) -> String {
        format!("{:#}", queue(lines).expect_err(lines))
    }

    #[test]
    fn a_celery_queue_routes_by_task_name_and_reads_json_unless_told() {
        let config =
            queue("format = \"celery\"\ntasks = { \"proj.a\" = \"pa\", \"proj.b\" = \"pb\" }\n")
                .unwrap();
        let q = &config.queues[0];
        assert_eq!(q.routes.lookup(&["proj.b".into()]), Some("pb"));
        assert_eq!(q.routes.default, None, "no default route");
        let accept = vec![ContentType::Json];
        assert_eq!(q.format, MessageFormat::Celery { accept });
        assert_eq!(q.plugin, "pa", "the queue's plugin is its first route's");
        assert_eq!(q.plugins().collect::<Vec<_>>(), ["pa", "pb"], "each once");

        let config = queue(
            "format = \"celery\"\nplugin = \"all\"\naccept-content = [\"json\", \"msgpack\"]\n",
        )
        .unwrap();
        let q = &config.queues[0];
        assert_eq!(q.routes.default.as_deref(), Some("all"));
        let accept = vec![ContentType::Json, ContentType::Msgpack];
        assert_eq!(q.format, MessageFormat::Celery { accept });
        let plain = queue("plugin = \"p\"\n").unwrap();
        let route_attribute = None;
        assert_eq!(
            plain.queues[0].format,
            MessageFormat::Qhost { route_attribute }
        );
    }

    #[test]
    fn every_format_takes_one_routing_table_keyed_by_what_it_routes_on() {
        let config = queue(
            "format = \"sns\"\nroutes = { \"orders\" = \"orders\", \"arn:aws:sns:us-east-1:1:refunds\" = \"refunds\" }\n",
        )
        .unwrap();
        let q = &config.queues[0];
        assert_eq!(q.format, MessageFormat::Sns);
        assert_eq!(
            q.plugin, "refunds",
            "the first route's plugin stands for the queue"
        );
        assert_eq!(q.plugins().collect::<Vec<_>>(), ["refunds", "orders"]);
        let config = queue("format = \"celery\"\nroutes = { \"proj.a\" = \"pa\" }\n").unwrap();
        assert_eq!(
            config.queues[0].routes.lookup(&["proj.a".into()]),
            Some("pa")
        );
        let config = queue("plugin = \"p\"\nroute-attribute = \"to\"\nroutes = [\"p2\"]").unwrap();
        assert_eq!(config.queues[0].routes.lookup(&["p2".into()]), Some("p2"));
        for format in ["eventbridge", "s3"] {
            let config = queue(&format!("format = \"{format}\"\nplugin = \"p\"")).unwrap();
            assert_eq!(config.queues[0].format.name(), format);
        }
    }

    #[test]
    fn nonsense_is_refused_with_the_field_s_name() {
        let cases = [
            (
                "format = \"rabbit\"\nplugin = \"p\"",
                "queue[0].format `rabbit` is not a message format qhost reads (\"qhost\", \"celery\", \"sns\", \"eventbridge\", \"s3\")",
            ),
            (
                "plugin = \"p\"\ntasks = { \"a\" = \"p\" }",
                "queue[0].tasks is for Celery queues",
            ),
            (
                "format = \"celery\"",
                "needs queue[0].tasks (each task name's plugin) or queue[0].plugin",
            ),
            (
                "format = \"sns\"",
                "needs queue[0].routes (each topic's plugin) or queue[0].plugin",
            ),
            (
                "format = \"celery\"\ntasks = { \"a\" = \"no good\" }",
                "routes `a` to `no good`",
            ),
            (
                "format = \"celery\"\nplugin = \"p\"\naccept-content = [\"pickle\"]",
                "queue[0].accept-content: `pickle` is never accepted",
            ),
            (
                "format = \"celery\"\nplugin = \"p\"\naccept-content = []",
                "accept-content is empty",
            ),
            (
                "format = \"celery\"\nplugin = \"p\"\nroute-attribute = \"r\"\nroutes = { \"q\" = \"q\" }",
                "route-attribute is for format = \"qhost\"",
            ),
            (
                "format = \"celery\"\ntasks = { \"a\" = \"p\" }\nroutes = { \"b\" = \"p\" }",
                "queue[0].tasks and queue[0].routes are one table",
            ),
            (
                "format = \"sns\"\nroutes = [\"p\"]",
                "queue[0].routes is a table of topic to plugin",
            ),
            (
                "format = \"eventbridge\"\nroutes = { \"\" = \"p\" }",
                "queue[0].routes has an empty detail-type",
            ),
        ];
        for (lines, says) in cases {
            let err = refusal(lines);
            assert!(err.contains(says), "{lines}: {err}");
        }
    }

    #[test]
    fn every_configuration_the_formats_guide_shows_is_one_qhost_takes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/formats.md");
        let guide = std::fs::read_to_string(path).expect("docs/formats.md");
        let blocks: Vec<&str> = guide.split("```toml\n").skip(1).collect();
        assert_eq!(blocks.len(), 3, "one per format");
        for block in blocks {
            let text = block.split("```").next().unwrap_or_default();
            let text: String = text
                .lines()
                .map(|l| format!("{}\n", l.trim_start()))
                .collect();
            let config = Config::parse(&text).unwrap_or_else(|e| panic!("{text}: {e:#}"));
            assert!(!config.queues[0].routes.table.is_empty(), "{text}");
        }
    }
}
