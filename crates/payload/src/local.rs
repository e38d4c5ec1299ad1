//! Payloads in the embedded store: one file per payload under `DATA_DIR/payloads`, written to a
//! temporary name and renamed, so a reader never sees half a payload; in memory when there is
//! no data directory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::io::AsyncReadExt as _;

use super::store::{PayloadError, PayloadStore};

/// The embedded payload store.
#[derive(Debug)]
pub(crate) struct LocalPayloads {
    dir: Option<PathBuf>,
    memory: Mutex<HashMap<String, Vec<u8>>>,
}

/// Keys become file names, so only plain names are accepted.
fn checked(key: &str) -> Result<&str, PayloadError> {
    let plain = !key.is_empty()
        && key.len() <= 200
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain {
        Ok(key)
    } else {
        Err(PayloadError::Missing(format!(
            "local:{key} (not a valid key)"
        )))
    }
}

fn io(e: std::io::Error) -> PayloadError {
    PayloadError::Unavailable(format!("local payload store: {e}"))
}

impl LocalPayloads {
    /// A store in `dir` (created), or in memory.
    pub(crate) fn open(dir: Option<PathBuf>) -> anyhow::Result<Self> {
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir).map_err(|e| {
                anyhow::anyhow!("creating the payload directory {}: {e}", dir.display())
            })?;
        }
        Ok(LocalPayloads {
            dir,
            memory: Mutex::default(),
        })
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl PayloadStore for LocalPayloads {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<(), PayloadError> {
        let key = checked(key)?;
        let Some(dir) = &self.dir else {
            self.memory().insert(key.to_string(), bytes.to_vec());
            return Ok(());
        };
        let (path, tmp) = (dir.join(key), dir.join(format!(".{key}.tmp")));
        let bytes = bytes.to_vec();
        tokio::task::spawn_blocking(move || {
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)
        })
        .await
        .map_err(|e| PayloadError::Unavailable(e.to_string()))?
        .map_err(io)
    }

    async fn get(&self, key: &str, max: u64) -> Result<Vec<u8>, PayloadError> {
        let key = checked(key)?;
        let missing = || PayloadError::Missing(format!("local:{key}"));
        let larger = || PayloadError::Larger(format!("local:{key}"), max);
        let Some(dir) = &self.dir else {
            let bytes = self.memory().get(key).cloned().ok_or_else(missing)?;
            return if bytes.len() as u64 > max {
                Err(larger())
            } else {
                Ok(bytes)
            };
        };
        let file = match tokio::fs::File::open(dir.join(key)).await {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => return Err(io(e)),
        };
        let mut bytes = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .await
            .map_err(io)?;
        if bytes.len() as u64 > max {
            return Err(larger());
        }
        Ok(bytes)
    }

    async fn delete(&self, key: &str) -> Result<(), PayloadError> {
        let key = checked(key)?;
        let Some(dir) = &self.dir else {
            self.memory().remove(key);
            return Ok(());
        };
        match tokio::fs::remove_file(dir.join(key)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        }
    }
}
