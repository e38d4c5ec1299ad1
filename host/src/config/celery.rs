//! A queue that Celery producers send to (`format = "celery"`): which plugin runs each task
//! name, and which serializers the queue reads.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;

use super::file::{RawCelery, RawQueue};
use crate::celery::ContentType;
use crate::message::wire::valid_plugin_name;
use crate::redis_link::redacted;

/// Where qhost writes Celery's result records, as a Celery worker with the Redis result backend
/// does (`[celery] result-backend`).
#[derive(Clone, PartialEq, Eq)]
pub struct CeleryResults {
    /// The Redis server's URL (`redis://…` or `rediss://…`).
    pub url: String,
    /// How long a record is kept (`result-expires-secs`; Celery's `result_expires`, a day).
    pub expires: Duration,
}

impl std::fmt::Debug for CeleryResults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CeleryResults")
            .field("url", &redacted(&self.url))
            .field("expires", &self.expires)
            .finish()
    }
}

/// The checked `[celery]` section: `None` without a result backend.
pub(super) fn results_of(raw: Option<RawCelery>) -> anyhow::Result<Option<CeleryResults>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Some(url) = raw.result_backend else {
        if raw.result_expires_secs.is_some() {
            bail!("celery.result-expires-secs needs celery.result-backend");
        }
        return Ok(None);
    };
    if !(url.starts_with("redis://") || url.starts_with("rediss://"))
        || redis::parse_redis_url(&url).is_none()
    {
        bail!(
            "celery.result-backend `{}` must be a redis:// or rediss:// URL (the Redis result \
             backend is the one qhost writes)",
            redacted(&url)
        );
    }
    let expires = raw.result_expires_secs.unwrap_or(86_400);
    if expires == 0 {
        bail!("celery.result-expires-secs must be positive");
    }
    Ok(Some(CeleryResults {
        url,
        expires: Duration::from_secs(expires),
    }))
}

/// How a Celery queue's tasks are routed and read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CeleryQueue {
    /// The plugin of each task name (`tasks`). A message never chooses a plugin outside them.
    pub tasks: BTreeMap<String, String>,
    /// The plugin of a task not in `tasks` (the queue's `plugin`, when set); without one, such
    /// a task is dead-lettered.
    pub default: Option<String>,
    /// The serializers read (`accept-content`); JSON only unless the queue says otherwise, as in
    /// Celery.
    pub accept: Vec<ContentType>,
}

impl CeleryQueue {
    /// The plugin for task `name`, if the queue routes it.
    pub(crate) fn plugin_for(&self, name: &str) -> Option<&str> {
        (self.tasks.get(name).or(self.default.as_ref())).map(String::as_str)
    }
}

/// The queue's Celery settings: `None` for a queue of qhost's own messages. `field` names a
/// field of this queue in errors.
pub(super) fn celery_of(
    q: &RawQueue,
    field: &dyn Fn(&str) -> String,
) -> anyhow::Result<Option<CeleryQueue>> {
    let celery = match q.format.as_deref() {
        None | Some("qhost") => false,
        Some("celery") => true,
        Some(other) => bail!(
            "{} `{other}` is not a message format qhost reads (\"qhost\" or \"celery\")",
            field("format")
        ),
    };
    if !celery {
        for (set, name) in [
            (q.tasks.is_some(), "tasks"),
            (q.accept_content.is_some(), "accept-content"),
        ] {
            if set {
                bail!(
                    "{} is for Celery queues; add format = \"celery\"",
                    field(name)
                );
            }
        }
        return Ok(None);
    }
    if q.route_attribute.is_some() || q.routes.is_some() {
        bail!(
            "{} routes Celery tasks by name; use {} instead of route-attribute and routes",
            field("format"),
            field("tasks")
        );
    }
    let tasks = q.tasks.clone().unwrap_or_default();
    if tasks.is_empty() && q.plugin.is_none() {
        bail!(
            "{} needs {} (each task name's plugin) or {} (the plugin of every task)",
            field("format"),
            field("tasks"),
            field("plugin")
        );
    }
    for (task, plugin) in &tasks {
        if task.is_empty() {
            bail!("{} has an empty task name", field("tasks"));
        }
        if !valid_plugin_name(plugin) {
            bail!(
                "{} routes `{task}` to `{plugin}`, which is not a valid plugin name",
                field("tasks")
            );
        }
    }
    let accept = match &q.accept_content {
        None => vec![ContentType::Json],
        Some(names) if names.is_empty() => bail!("{} is empty", field("accept-content")),
        Some(names) => names
            .iter()
            .map(|n| ContentType::parse(n))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("{}: {e}", field("accept-content")))?,
    };
    Ok(Some(CeleryQueue {
        tasks,
        default: q.plugin.clone(),
        accept,
    }))
}

#[cfg(test)]
mod tests {
    use crate::celery::ContentType;
    use crate::config::Config;

    fn queue(lines: &str) -> anyhow::Result<Config> {
        Config::parse(&format!("[[queue]]\nname = \"celery\"\n{lines}"))
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
        let celery = q.celery.as_ref().expect("a celery queue");
        assert_eq!(celery.plugin_for("proj.b"), Some("pb"));
        assert_eq!(celery.plugin_for("proj.c"), None, "no default route");
        assert_eq!(celery.accept, [ContentType::Json]);
        assert_eq!(q.plugin, "pa", "the queue's plugin is its first route's");
        assert_eq!(q.plugins().collect::<Vec<_>>(), ["pa", "pb"], "each once");

        let config = queue(
            "format = \"celery\"\nplugin = \"all\"\naccept-content = [\"json\", \"msgpack\"]\n",
        )
        .unwrap();
        let celery = config.queues[0].celery.as_ref().unwrap();
        assert_eq!(celery.plugin_for("anything"), Some("all"));
        assert_eq!(celery.accept, [ContentType::Json, ContentType::Msgpack]);
        assert!(
            queue("plugin = \"p\"\n").unwrap().queues[0]
                .celery
                .is_none()
        );
    }

    #[test]
    fn nonsense_is_refused_with_the_field_s_name() {
        let cases = [
            (
                "format = \"rabbit\"\nplugin = \"p\"",
                "queue[0].format `rabbit` is not a message format",
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
                "format = \"celery\"\nplugin = \"p\"\nroute-attribute = \"r\"\nroutes = [\"q\"]",
                "routes Celery tasks by name",
            ),
        ];
        for (lines, says) in cases {
            let err = refusal(lines);
            assert!(err.contains(says), "{lines}: {err}");
        }
    }
}
