//! The configuration file as written: every field optional, unknown fields refused.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `qhost.toml` as parsed, before checking.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawConfig {
    pub plugins_dir: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub max_in_flight: Option<u32>,
    pub lanes: Option<u32>,
    pub shutdown_grace_secs: Option<u64>,
    pub max_plugin_memory_mib: Option<u64>,
    pub watch_plugins: Option<bool>,
    pub compiled_cache: Option<super::compiled_cache::RawCompiledCache>,
    pub allow_unloaded_plugins: Option<bool>,
    pub source: Option<RawSource>,
    pub idempotency: Option<RawIdempotency>,
    pub retry: Option<RawRetry>,
    pub payload: Option<crate::payload::config::RawPayload>,
    pub admin: Option<RawAdmin>,
    pub secrets: Option<RawSecrets>,
    pub http: Option<RawHttp>,
    pub timeouts: Option<super::deadlines::RawTimeouts>,
    pub celery: Option<RawCelery>,
    pub rollout: Option<super::rollout::RawRollout>,
    #[serde(rename = "queue")]
    pub queues: Option<Vec<RawQueue>>,
    #[serde(rename = "schedule")]
    pub schedules: Option<Vec<super::schedule::RawSchedule>>,
}

impl RawConfig {
    /// Makes the file's relative paths relative to `base`, the directory it was read from (as
    /// a user reads them), and fills in the directories' defaults there: a configuration means
    /// the same from any working directory.
    pub(crate) fn relative_to(&mut self, base: &Path) {
        let at = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        at(self.plugins_dir.get_or_insert_with(|| "plugins".into()));
        at(self.data_dir.get_or_insert_with(|| ".qhost".into()));
        if let Some(super::compiled_cache::RawCompiledCache::At(dir)) = &mut self.compiled_cache {
            at(dir);
        }
        let secret_dirs = self.secrets.as_mut().and_then(|s| s.dirs.as_mut());
        secret_dirs.into_iter().flatten().for_each(at);
        let http_ca = self.http.as_mut().and_then(|h| h.ca_file.as_mut());
        let redis_ca = self.idempotency.as_mut().and_then(|i| i.ca_file.as_mut());
        let source_ca = self.source.as_mut().and_then(|s| s.ca_file.as_mut());
        http_ca
            .into_iter()
            .chain(redis_ca)
            .chain(source_ca)
            .for_each(at);
        if let Some(source) = self.source.as_mut() {
            source.credentials_file.as_mut().into_iter().for_each(at);
            let secrets = [&mut source.password, &mut source.token, &mut source.nkey];
            secrets
                .into_iter()
                .flatten()
                .for_each(|s| s.relative_to(base));
        }
        if let Some(token) = self.admin.as_mut().and_then(|a| a.token.as_mut()) {
            token.relative_to(base);
        }
        if let Some(password) = self.idempotency.as_mut().and_then(|i| i.password.as_mut()) {
            password.relative_to(base);
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawSource {
    pub kind: Option<String>,
    pub queues: Option<Vec<String>>,
    pub region: Option<String>,
    pub endpoint_url: Option<String>,
    pub url: Option<String>,
    pub password: Option<super::secret::RawSecret>,
    pub prefetch: Option<u32>,
    pub declare: Option<bool>,
    pub queue_type: Option<String>,
    pub delivery_limit: Option<u32>,
    pub delay_by: Option<String>,
    pub ordered: Option<std::collections::BTreeSet<String>>,
    pub consumer_timeout_ms: Option<u64>,
    pub exchanges: Option<std::collections::BTreeMap<String, RawExchange>>,
    pub install_pgmq: Option<bool>,
    pub poll_ms: Option<u64>,
    pub notify: Option<bool>,
    pub pool_size: Option<u32>,
    pub ca_file: Option<PathBuf>,
    pub token: Option<super::secret::RawSecret>,
    pub nkey: Option<super::secret::RawSecret>,
    pub credentials_file: Option<PathBuf>,
    pub consumer: Option<String>,
    pub max_deliver: Option<i64>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawExchange {
    pub exchange: String,
    pub routing_key: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawIdempotency {
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub url: Option<String>,
    pub urls: Option<Vec<String>>,
    pub cluster: Option<bool>,
    pub ca_file: Option<std::path::PathBuf>,
    pub password: Option<super::secret::RawSecret>,
    pub schema: Option<String>,
    pub pool_size: Option<u32>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawSecrets {
    pub env: Option<Vec<String>>,
    pub dirs: Option<Vec<PathBuf>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawHttp {
    pub ca_file: Option<PathBuf>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawAdmin {
    pub listen: Option<String>,
    pub token: Option<super::secret::RawSecret>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawRetry {
    pub base_secs: Option<f64>,
    pub max_secs: Option<f64>,
}

/// A queue's `routes` as written: a table of route name to plugin, or (for qhost's own
/// format) the list of plugins a route attribute may name.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawRoutes {
    List(Vec<String>),
    Table(std::collections::BTreeMap<String, String>),
}

/// `[celery]` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawCelery {
    pub result_backend: Option<String>,
    pub result_expires_secs: Option<u64>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawQueue {
    pub name: Option<String>,
    pub url: Option<String>,
    pub plugin: Option<String>,
    pub visibility_timeout_secs: Option<u32>,
    pub wait_time_secs: Option<u32>,
    pub batch_size: Option<u32>,
    pub dead_letter: Option<String>,
    pub route_attribute: Option<String>,
    pub routes: Option<RawRoutes>,
    pub max_receives: Option<u32>,
    pub heartbeat: Option<bool>,
    pub pollers: Option<u32>,
    pub priority: Option<u32>,
    pub format: Option<String>,
    pub tasks: Option<std::collections::BTreeMap<String, String>>,
    pub accept_content: Option<Vec<String>>,
    pub capture: Option<super::capture::RawCapture>,
}
