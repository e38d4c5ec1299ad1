//! `[admin] token`: the secret the console's actions (a redrive) ask for. Without one the
//! console is read-only. It is written as text, or as where to read it: `{ env = "NAME" }`
//! (the host's environment) or `{ file = "PATH" }` (a final newline dropped), read when the
//! configuration is, so a missing secret is a start-up error, not a refused click later.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[admin] token` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawToken {
    Text(String),
    Env { env: String },
    File { file: PathBuf },
}

impl RawToken {
    /// Makes a file reference relative to `base`, as the file's other paths are.
    pub(crate) fn relative_to(&mut self, base: &Path) {
        if let RawToken::File { file } = self
            && file.is_relative()
        {
            *file = base.join(&*file);
        }
    }
}

/// The admin token. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// Whether `offered` is the token (compared in time independent of where they differ).
    pub(crate) fn accepts(&self, offered: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), offered.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
    }
}

/// The token `raw` names, read now.
pub(crate) fn token(raw: &RawToken) -> anyhow::Result<AdminToken> {
    let text = match raw {
        RawToken::Text(text) => text.clone(),
        RawToken::Env { env } => std::env::var(env).map_err(|_| {
            anyhow::anyhow!("admin.token: the environment variable `{env}` is not set")
        })?,
        RawToken::File { file } => {
            let text = std::fs::read_to_string(file).map_err(|e| {
                anyhow::anyhow!("admin.token: cannot read `{}`: {e}", file.display())
            })?;
            text.strip_suffix('\n').unwrap_or(&text).to_string()
        }
    };
    if text.len() < 16 {
        anyhow::bail!(
            "admin.token must be at least 16 characters (it guards the console's actions); \
             `openssl rand -hex 16` makes one"
        );
    }
    Ok(AdminToken(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_read_from_where_it_is_written_and_never_shown() {
        let text = RawToken::Text("0123456789abcdef".into());
        let t = token(&text).unwrap();
        assert!(t.accepts("0123456789abcdef") && !t.accepts("0123456789abcdeX") && !t.accepts(""));
        assert_eq!(format!("{t:?}"), "AdminToken(..)");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t"), "fedcba9876543210\n").unwrap();
        let mut file = RawToken::File { file: "t".into() };
        file.relative_to(dir.path());
        assert!(token(&file).unwrap().accepts("fedcba9876543210"));
        let unset = RawToken::Env {
            env: "QHOST_TEST_NO_SUCH_VARIABLE".into(),
        };
        let e = token(&unset).unwrap_err().to_string();
        assert!(
            e.contains("`QHOST_TEST_NO_SUCH_VARIABLE` is not set"),
            "{e}"
        );
        let short = token(&RawToken::Text("short".into()))
            .unwrap_err()
            .to_string();
        assert!(short.contains("at least 16 characters"), "{short}");
    }
}
