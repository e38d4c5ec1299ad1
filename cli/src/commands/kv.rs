//! `qhost kv get|list PLUGIN BUCKET [KEY]`: a plugin's committed state, read from the store
//! the configuration names.

use qhost::Config;

/// Prints the committed value of `key` as text (bytes that are not UTF-8 shown replaced);
/// exit code 1 when there is none.
pub(crate) async fn kv_get(
    config: &Config,
    plugin: &str,
    bucket: &str,
    key: &str,
) -> anyhow::Result<std::process::ExitCode> {
    match qhost::kv_get(config, plugin, bucket, key).await? {
        Some(value) => {
            println!("{}", String::from_utf8_lossy(&value));
            Ok(std::process::ExitCode::SUCCESS)
        }
        None => {
            eprintln!("{plugin}/{bucket}: no value for `{key}`");
            Ok(std::process::ExitCode::from(1))
        }
    }
}

/// Prints the bucket's committed keys, one per line.
pub(crate) async fn kv_list(config: &Config, plugin: &str, bucket: &str) -> anyhow::Result<()> {
    for key in qhost::kv_list(config, plugin, bucket).await? {
        println!("{key}");
    }
    Ok(())
}
