//! State that outlives a message: the `wasi:keyvalue` buckets the plugin's manifest grants.
//!
//! ```toml
//! # NAME.toml
//! [capabilities]
//! keyvalue = ["counts", { bucket = "reminded", ttl-secs = 3456000 }]
//! ```
//!
//! ```ignore
//! let counts = qhost_guest::state::Bucket::open("counts")?;
//! let sent = counts.increment(&format!("sent/{domain}"), 1)?;
//! ```
//!
//! Writes are held by the host and committed with the run's completion: kept only if the
//! handler acks, and only once per idempotency key, however often the message is delivered.
//! Reads see what is committed plus this run's own writes. A key read with [`Bucket::get`] or
//! [`Bucket::exists`] is checked at commit: if another run changed it meanwhile, this run's
//! results are dropped and it runs again, so "read, decide, write" on a key does not race.
//! [`Bucket::increment`] never conflicts; the value it returns is this run's view (the
//! committed count plus its own increments), and the commit adds to whatever is committed then.

use crate::bindings::wasi::keyvalue::{atomics, store};

/// Why a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The bucket is not granted to this plugin.
    NotGranted(String),
    /// The host refused the call (a bound, a value that is not a counter) or could not serve
    /// it; the text says which.
    Refused(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotGranted(bucket) => write!(
                f,
                "bucket `{bucket}` is not granted (the manifest's [capabilities] keyvalue must name it)"
            ),
            Error::Refused(text) => f.write_str(text),
        }
    }
}

impl std::error::Error for Error {}

fn error(bucket: &str, e: store::Error) -> Error {
    match e {
        store::Error::AccessDenied | store::Error::NoSuchStore => {
            Error::NotGranted(bucket.to_string())
        }
        store::Error::Other(text) => Error::Refused(text),
    }
}

/// An open bucket.
#[derive(Debug)]
pub struct Bucket {
    name: String,
    inner: store::Bucket,
}

impl Bucket {
    /// Opens a bucket the manifest grants.
    pub fn open(name: &str) -> Result<Bucket, Error> {
        let inner = store::open(name).map_err(|e| error(name, e))?;
        Ok(Bucket {
            name: name.to_string(),
            inner,
        })
    }

    /// The value of `key`, as this run sees it.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(key).map_err(|e| error(&self.name, e))
    }

    /// The value of `key` as text (bytes that are not UTF-8 replaced).
    pub fn get_text(&self, key: &str) -> Result<Option<String>, Error> {
        Ok(self
            .get(key)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Whether `key` has a value.
    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        self.inner.exists(key).map_err(|e| error(&self.name, e))
    }

    /// Sets `key` (committed with the run).
    pub fn set(&self, key: &str, value: impl AsRef<[u8]>) -> Result<(), Error> {
        (self.inner)
            .set(key, value.as_ref())
            .map_err(|e| error(&self.name, e))
    }

    /// Deletes `key` (committed with the run).
    pub fn delete(&self, key: &str) -> Result<(), Error> {
        self.inner.delete(key).map_err(|e| error(&self.name, e))
    }

    /// Adds `delta` to the counter at `key` (absent counts as 0); the counter as this run
    /// sees it after.
    pub fn increment(&self, key: &str, delta: u64) -> Result<u64, Error> {
        atomics::increment(&self.inner, key, delta).map_err(|e| error(&self.name, e))
    }

    /// The bucket's keys as this run sees them, in order (at most 10,000).
    pub fn keys(&self) -> Result<Vec<String>, Error> {
        let mut keys = Vec::new();
        let mut cursor = None;
        loop {
            let page = (self.inner)
                .list_keys(cursor)
                .map_err(|e| error(&self.name, e))?;
            keys.extend(page.keys);
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(keys),
            }
        }
    }
}
