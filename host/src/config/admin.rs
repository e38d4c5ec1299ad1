//! `[admin] token`: the secret the console's actions (a redrive) ask for. Without one the
//! console is read-only. It is written as a secret is (`secret`: text, `{ env = "NAME" }` or
//! `{ file = "PATH" }`), read when the configuration is, so a missing secret is a start-up
//! error, not a refused click later.

use super::secret::{RawSecret, read};

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
pub(crate) fn token(raw: &RawSecret) -> anyhow::Result<AdminToken> {
    let text = read("admin.token", raw)?;
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
        let text = RawSecret::Text("0123456789abcdef".into());
        let t = token(&text).unwrap();
        assert!(t.accepts("0123456789abcdef") && !t.accepts("0123456789abcdeX") && !t.accepts(""));
        assert_eq!(format!("{t:?}"), "AdminToken(..)");
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("t"), "fedcba9876543210\n").unwrap();
        let mut file = RawSecret::File { file: "t".into() };
        file.relative_to(dir.path());
        assert!(token(&file).unwrap().accepts("fedcba9876543210"));
        let unset = RawSecret::Env {
            env: "QHOST_TEST_NO_SUCH_VARIABLE".into(),
        };
        let e = token(&unset).unwrap_err().to_string();
        assert!(
            e.contains("`QHOST_TEST_NO_SUCH_VARIABLE` is not set"),
            "{e}"
        );
        let short = token(&RawSecret::Text("short".into()))
            .unwrap_err()
            .to_string();
        assert!(short.contains("at least 16 characters"), "{short}");
    }
}
