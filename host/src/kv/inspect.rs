//! `qhost kv get|list PLUGIN BUCKET [KEY]`: a plugin's committed state as the configured
//! store holds it, for operators and handler authors. Read-only: state changes only with a
//! run's completion.

use super::grant::valid_bucket_name;
use super::run::MAX_LISTED;
use crate::config::Config;
use crate::idempotency::commit::stored_bucket;

/// The committed value of `key` in `plugin`'s bucket `bucket`.
pub async fn kv_get(
    config: &Config,
    plugin: &str,
    bucket: &str,
    key: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
    let stored = checked(config, plugin, bucket)?;
    let store = crate::host::open_store(config).await?;
    let mut values = store.kv_get(&stored, &[key.to_string()]).await?;
    Ok(values.pop().flatten())
}

/// The committed keys of `plugin`'s bucket `bucket`, in order (at most 10,000).
pub async fn kv_list(config: &Config, plugin: &str, bucket: &str) -> anyhow::Result<Vec<String>> {
    let stored = checked(config, plugin, bucket)?;
    let store = crate::host::open_store(config).await?;
    Ok(store.kv_list(&stored, MAX_LISTED).await?)
}

/// The stored bucket, once the names are names.
fn checked(config: &Config, plugin: &str, bucket: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        crate::message::wire::valid_plugin_name(plugin),
        "`{plugin}` is not a plugin name"
    );
    anyhow::ensure!(
        valid_bucket_name(bucket),
        "`{bucket}` is not a bucket name (letters, digits, `.`, `_` or `-`)"
    );
    Ok(stored_bucket(&config.namespace, plugin, bucket))
}
