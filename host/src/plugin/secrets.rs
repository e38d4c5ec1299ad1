//! Secrets from the host. A `[config]` value in a plugin's manifest may be `{ env = "NAME" }` or
//! `{ file = "/run/secrets/NAME" }` instead of text: the host reads it when the plugin loads,
//! and the plugin reads the value through `config.get` like any other setting. So an API key
//! lives where the platform keeps secrets (the environment, a mounted secret file), never in
//! the plugins directory.
//!
//! Deny by default. The manifest sits in the plugins directory beside the plugin, so naming a
//! variable or a file there grants nothing by itself: the host's configuration lists the
//! variables (`[secrets] env`, names or `PREFIX*`) and the directories (`[secrets] dirs`)
//! plugins may read. The host's own credentials (`AWS_*`, a Redis password) stay out of reach
//! unless an operator lists them.
//!
//! A secret that cannot be read refuses the plugin with the reason, naming the setting and the
//! variable or file, never the value; the version already serving goes on. Resolved values are
//! kept in [`Settings`], whose `Debug` shows keys only.

use std::collections::BTreeMap;
use std::path::Path;

use super::manifest::ConfigValue;
pub(crate) use crate::config::SecretsGrant;
pub(crate) use crate::runtime::Settings;

/// The largest secret file read.
const MAX_SECRET_BYTES: u64 = 64 * 1024;

/// Resolves `config` under `grant`, or says which setting cannot be read and why.
pub(crate) fn resolve(
    config: &BTreeMap<String, ConfigValue>,
    grant: &SecretsGrant,
) -> Result<Settings, String> {
    let mut settings = BTreeMap::new();
    for (key, value) in config {
        let resolved = match value {
            ConfigValue::Text(text) => Ok(text.clone()),
            ConfigValue::Env(name) => from_env(name, grant),
            ConfigValue::File(path) => from_file(path, grant),
        };
        let value = resolved.map_err(|why| format!("config.{key}: {why}"))?;
        settings.insert(key.clone(), value);
    }
    Ok(Settings::new(settings))
}

fn from_env(name: &str, grant: &SecretsGrant) -> Result<String, String> {
    if !grant.allows_env(name) {
        return Err(format!(
            "the variable {name} is not granted: the host's [secrets] env does not list it \
             (add it under [secrets] env in qhost.toml)"
        ));
    }
    std::env::var(name).map_err(|e| match e {
        std::env::VarError::NotPresent => format!("the variable {name} is not set"),
        std::env::VarError::NotUnicode(_) => format!("the variable {name} is not UTF-8"),
    })
}

fn from_file(path: &Path, grant: &SecretsGrant) -> Result<String, String> {
    let real = grant.allowed_file(path)?;
    let shown = path.display();
    let size = std::fs::metadata(&real)
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .len();
    if size > MAX_SECRET_BYTES {
        return Err(format!(
            "{shown} is {size} bytes, over the {MAX_SECRET_BYTES} a secret may be"
        ));
    }
    let text = std::fs::read_to_string(&real).map_err(|e| format!("cannot read {shown}: {e}"))?;
    // Secret files are often written with a final newline, which is not part of the secret.
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(env: &[&str], dirs: &[&Path]) -> SecretsGrant {
        SecretsGrant {
            env: env.iter().map(|s| s.to_string()).collect(),
            dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
        }
    }

    fn config(entries: &[(&str, ConfigValue)]) -> BTreeMap<String, ConfigValue> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn a_granted_variable_and_file_resolve_and_never_show_in_debug() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "file-s3cret\n").unwrap();
        // PATH is set in every test environment; it stands in for a granted variable.
        let path_value = std::env::var("PATH").unwrap();
        let settings = resolve(
            &config(&[
                ("path", ConfigValue::Env("PATH".into())),
                ("token", ConfigValue::File(dir.path().join("token"))),
                ("plain", ConfigValue::Text("hello".into())),
            ]),
            &grant(&["PAT*"], &[dir.path()]),
        )
        .unwrap();
        assert_eq!(settings.get("path"), Some(path_value.as_str()));
        assert_eq!(settings.get("token"), Some("file-s3cret"));
        assert_eq!(settings.get("plain"), Some("hello"));
        let shown = format!("{settings:?}");
        assert_eq!(shown, r#"{"path", "plain", "token"}"#);
        assert!(!shown.contains("s3cret"));
    }

    #[test]
    fn nothing_is_granted_by_default() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("token"), "x").unwrap();
        let none = SecretsGrant::default();
        let env = resolve(&config(&[("k", ConfigValue::Env("PATH".into()))]), &none);
        assert_eq!(
            env.unwrap_err(),
            "config.k: the variable PATH is not granted: the host's [secrets] env does not list it \
             (add it under [secrets] env in qhost.toml)"
        );
        let file = ConfigValue::File(dir.path().join("token"));
        let err = resolve(&config(&[("k", file)]), &none).unwrap_err();
        assert!(err.contains("is outside the directories"), "{err}");
    }

    #[test]
    fn a_file_may_not_leave_its_directory_by_dots_or_links() {
        let granted = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("host-key"), "k").unwrap();
        std::os::unix::fs::symlink(outside.path().join("host-key"), granted.path().join("link"))
            .unwrap();
        let g = grant(&[], &[granted.path()]);
        for sneaky in [
            granted.path().join("link"),
            granted
                .path()
                .join("..")
                .join(outside.path().file_name().unwrap())
                .join("host-key"),
            granted.path().to_path_buf(),
        ] {
            let err = resolve(&config(&[("k", ConfigValue::File(sneaky.clone()))]), &g);
            assert!(err.is_err(), "{} was read", sneaky.display());
        }
    }

    #[test]
    fn a_missing_or_oversized_secret_says_which_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 70_000]).unwrap();
        let g = grant(&["QHOST_SURELY_UNSET_*"], &[dir.path()]);
        let unset = ConfigValue::Env("QHOST_SURELY_UNSET_VAR".into());
        assert_eq!(
            resolve(&config(&[("api-key", unset)]), &g).unwrap_err(),
            "config.api-key: the variable QHOST_SURELY_UNSET_VAR is not set"
        );
        let gone = ConfigValue::File(dir.path().join("gone"));
        let err = resolve(&config(&[("token", gone)]), &g).unwrap_err();
        assert!(err.starts_with("config.token: cannot read "), "{err}");
        let err = resolve(&config(&[("token", ConfigValue::File(big))]), &g).unwrap_err();
        assert!(err.contains("70000 bytes, over the 65536"), "{err}");
    }

    #[test]
    fn a_grant_names_variables_or_prefixes_and_absolute_dirs() {
        assert!(
            grant(
                &["SENDGRID_API_KEY", "STRIPE_*"],
                &[Path::new("/run/secrets")]
            )
            .check()
            .is_ok()
        );
        for bad in ["*", "", "A-B", "1X"] {
            assert!(grant(&[bad], &[]).check().is_err(), "{bad}");
        }
        assert!(grant(&[], &[Path::new("secrets")]).check().is_err());
    }
}
