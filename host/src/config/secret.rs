//! A secret in the configuration (the admin token, a broker's password): written as text, or
//! as where to read it, `{ env = "NAME" }` (the host's environment) or `{ file = "PATH" }` (a
//! final newline dropped, as a mounted secret file has). Read when the configuration is, so a
//! missing secret is a start-up error naming its field.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A secret as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawSecret {
    Text(String),
    Env { env: String },
    File { file: PathBuf },
}

impl RawSecret {
    /// Makes a file reference relative to `base`, as the file's other paths are.
    pub(crate) fn relative_to(&mut self, base: &Path) {
        if let RawSecret::File { file } = self
            && file.is_relative()
        {
            *file = base.join(&*file);
        }
    }
}

/// The secret `raw` names, read now; errors name `field`.
pub(crate) fn read(field: &str, raw: &RawSecret) -> anyhow::Result<String> {
    Ok(match raw {
        RawSecret::Text(text) => text.clone(),
        RawSecret::Env { env } => std::env::var(env)
            .map_err(|_| anyhow::anyhow!("{field}: the environment variable `{env}` is not set"))?,
        RawSecret::File { file } => {
            let text = std::fs::read_to_string(file)
                .map_err(|e| anyhow::anyhow!("{field}: cannot read `{}`: {e}", file.display()))?;
            text.strip_suffix('\n').unwrap_or(&text).to_string()
        }
    })
}
