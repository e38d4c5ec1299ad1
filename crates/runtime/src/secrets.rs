//! `[secrets]`: what plugins may read from the host, checked as the rest of the configuration
//! is (the host parses the section). The host's `plugin::secrets` resolves a plugin's
//! `{ env = … }` and `{ file = … }` settings under it when the plugin loads.

use std::path::{Path, PathBuf};

/// What plugins may read from the host: `[secrets]` in the host's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretsGrant {
    /// Variable names (`SENDGRID_API_KEY`) or prefixes (`SENDGRID_*`).
    pub env: Vec<String>,
    /// Directories whose files may be read (absolute).
    pub dirs: Vec<PathBuf>,
}

impl SecretsGrant {
    /// Checks a grant as written in the host's configuration.
    pub fn check(&self) -> Result<(), String> {
        for pattern in &self.env {
            let name = pattern.strip_suffix('*').unwrap_or(pattern);
            let valid = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if name.is_empty() || !valid || name.starts_with(|c: char| c.is_ascii_digit()) {
                return Err(format!(
                    "secrets.env `{pattern}` is not a variable name or a NAME_* prefix (a bare \
                     `*` would hand plugins every variable of the host, its credentials included)"
                ));
            }
        }
        for dir in &self.dirs {
            if !dir.is_absolute() {
                return Err(format!(
                    "secrets.dirs `{}` must be an absolute path",
                    dir.display()
                ));
            }
        }
        Ok(())
    }

    pub fn allows_env(&self, name: &str) -> bool {
        self.env.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        })
    }

    /// `path` resolved (links followed), if it is inside a granted directory.
    pub fn allowed_file(&self, path: &Path) -> Result<PathBuf, String> {
        let real = path
            .canonicalize()
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let inside = self.dirs.iter().any(|dir| {
            dir.canonicalize()
                .is_ok_and(|dir| real.starts_with(&dir) && real != dir)
        });
        if inside {
            Ok(real)
        } else {
            Err(format!(
                "{} is outside the directories the host's [secrets] dirs grants",
                path.display()
            ))
        }
    }
}
