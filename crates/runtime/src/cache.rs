//! The compiled-code cache: a plugin compiled once is not compiled again on the next start.
//!
//! Compiling a component with Cranelift takes from a fraction of a second (a small Rust
//! plugin) to many seconds (a component embedding an interpreter). The cache keeps wasmtime's
//! own serialized form of each compiled component in a directory, named by
//!
//! - the sha256 of the `.wasm` bytes (so a changed plugin is a different entry), and
//! - the engine's compatibility hash (wasmtime version, target and every setting that affects
//!   code generation, so a host upgrade or a different engine configuration never loads code
//!   compiled for another).
//!
//! Entries are written to a temporary file and renamed into place, so a crash mid-write leaves
//! no half entry under a real name, and two hosts sharing the directory never read each
//! other's partial writes. An entry that fails to load (truncated by a full disk, written by
//! an incompatible build) is ignored and rewritten.
//!
//! Loading an entry runs code wasmtime produced without re-verifying it, so the directory must
//! be writable only by the user qhost runs as: it is that user's own cache directory (or the
//! data directory's, or one the operator names: `config/compiled_cache.rs`), created private,
//! and [`CompiledCache::open`] refuses one that is a symbolic link, is owned by another user,
//! or is writable by group or others (qhost then compiles without a cache, and says so once). An
//! entry that is not a regular file (a symbolic link planted in the directory) is never loaded.

// The only unsafe code in qhost: loading wasmtime's serialized code (see the SAFETY notes).
#![allow(unsafe_code)]

use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// How components were obtained since the runtime started.
#[derive(Debug, Default)]
pub struct CompileCounters {
    compiled: AtomicU64,
    cache_hits: AtomicU64,
}

impl CompileCounters {
    /// Components compiled by Cranelift.
    pub fn compiled(&self) -> u64 {
        self.compiled.load(Ordering::Relaxed)
    }

    /// Components loaded from the cache without compiling.
    pub fn cache_hits(&self) -> u64 {
        self.cache_hits.load(Ordering::Relaxed)
    }

    pub(super) fn count_compiled(&self) {
        self.compiled.fetch_add(1, Ordering::Relaxed);
    }

    fn count_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }
}

/// A directory of compiled components.
#[derive(Clone, Debug)]
pub(crate) struct CompiledCache {
    dir: PathBuf,
    engine_hash: String,
}

/// A `Hasher` over sha256: the engine's compatibility hash must name the same entry from one
/// process to the next, which `DefaultHasher` does not promise.
struct StableHasher(Sha256);

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().unwrap_or_default())
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn engine_hash(engine: &Engine) -> String {
    let mut hasher = StableHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let digest = hasher.0.finalize();
    hex::encode(&digest[..8])
}

/// Why a directory cannot hold code qhost will run, if it cannot.
fn untrusted(dir: &Path) -> anyhow::Result<Option<String>> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("reading the compiled-code cache {}", dir.display()))?;
    let mode = meta.permissions().mode();
    let me = rustix::process::geteuid().as_raw();
    Ok(if meta.file_type().is_symlink() {
        Some("a symbolic link".into())
    } else if !meta.is_dir() {
        Some("not a directory".into())
    } else if meta.uid() != me {
        Some(format!(
            "owned by user {}, not by {me}, which qhost runs as",
            meta.uid()
        ))
    } else if mode & 0o022 != 0 {
        Some(format!(
            "writable by group or others (mode {:o})",
            mode & 0o777
        ))
    } else {
        None
    })
}

impl CompiledCache {
    /// A cache in `dir` for code compiled by `engine` (the directory is created, private to
    /// this user); `None` if `dir` cannot be trusted with code (see the module docs), which is
    /// logged.
    pub(crate) fn open(dir: &Path, engine: &Engine) -> anyhow::Result<Option<Self>> {
        use std::os::unix::fs::DirBuilderExt as _;
        if std::fs::symlink_metadata(dir).is_err() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("creating the compiled-code cache {}", dir.display()))?;
        }
        if let Some(why) = untrusted(dir)? {
            tracing::warn!(cache = %dir.display(), "not using the compiled-code cache: it is {why}; plugins are compiled on every load");
            return Ok(None);
        }
        Ok(Some(CompiledCache {
            dir: dir.to_path_buf(),
            engine_hash: engine_hash(engine),
        }))
    }

    /// The entry for these bytes.
    pub(crate) fn entry(&self, bytes: &[u8]) -> PathBuf {
        let content = qhost_message::digest::sha256_hex(bytes);
        self.dir
            .join(format!("{content}-{}.cwasm", self.engine_hash))
    }

    /// The component for `bytes`: from the cache if it holds a loadable entry, otherwise
    /// compiled and stored.
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        counters: &Arc<CompileCounters>,
        bytes: &[u8],
    ) -> anyhow::Result<Component> {
        // The engine would also take the text format here, which loading without the cache
        // does not; keep the two paths alike.
        anyhow::ensure!(
            bytes.starts_with(b"\0asm"),
            "not a WebAssembly binary (no \\0asm header)"
        );
        let entry = self.entry(bytes);
        let present = regular(&entry);
        if present && let Some(component) = load(engine, counters, &entry) {
            return Ok(component);
        }
        // Another process may be compiling these bytes (hosts started together, `qhost check`
        // beside `qhost run`): wait for it, then take what it stored. (An entry that was there
        // and would not load is compiled again at once.)
        let _compiling = Compiling::wait_for(&entry);
        if !present
            && regular(&entry)
            && let Some(component) = load(engine, counters, &entry)
        {
            return Ok(component);
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(anyhow::Error::from)?;
        counters.count_compiled();
        if let Err(e) = store(&entry, &compiled) {
            tracing::warn!(entry = %entry.display(), error = %format!("{e:#}"), "could not write the compiled-code cache");
        }
        // SAFETY: `compiled` was produced by this engine's `precompile_component` just above.
        unsafe { Component::deserialize(engine, &compiled) }.map_err(anyhow::Error::from)
    }
}

/// The component in `entry`, a regular file, if it loads.
fn load(engine: &Engine, counters: &CompileCounters, entry: &Path) -> Option<Component> {
    // SAFETY: entries are written only by `store` below, from wasmtime's own
    // `precompile_component`, into a directory only qhost writes (see the module docs);
    // wasmtime checks the header and engine compatibility before using the code.
    match unsafe { Component::deserialize_file(engine, entry) } {
        Ok(component) => {
            counters.count_hit();
            Some(component)
        }
        Err(e) => {
            tracing::warn!(entry = %entry.display(), error = %format!("{e:#}"), "ignoring an unusable compiled-code cache entry");
            None
        }
    }
}

/// Whether `entry` is a regular file: not `is_file`, which follows a symbolic link to wherever
/// it leads.
fn regular(entry: &Path) -> bool {
    std::fs::symlink_metadata(entry).is_ok_and(|m| m.file_type().is_file())
}

/// Held while this process compiles one entry: another process that wants the same entry
/// waits on the lock file, then loads what this one stored instead of compiling it again. The
/// file goes when the lock does; one that cannot be made or locked (a full disk) only means the
/// work may be done twice. The wait is bounded (`LOCK_WAIT`): a holder that is stopped or wedged
/// delays a start, it does not stop it.
struct Compiling {
    path: PathBuf,
    _file: Option<std::fs::File>,
}

/// How long a compile waits for another process's compile of the same bytes: far longer than
/// compiling the largest interpreter component takes.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl Compiling {
    /// Takes the lock for `entry`, waiting while another process holds it (up to `LOCK_WAIT`).
    fn wait_for(entry: &Path) -> Self {
        let path = entry.with_extension("lock");
        let file = std::fs::File::create(&path).ok();
        if let Some(file) = &file {
            lock_within(file, LOCK_WAIT, &path);
        }
        Compiling { path, _file: file }
    }
}

/// Locks `file`, trying until `wait` has passed.
fn lock_within(file: &std::fs::File, wait: std::time::Duration, path: &Path) {
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return,
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => {
                let error = e.to_string();
                tracing::info!(lock = %path.display(), %error, "compiling without waiting for another process's compile of the same plugin");
                return;
            }
        }
    }
}

impl Drop for Compiling {
    fn drop(&mut self) {
        // Removed while still held: a process waiting on this file finds the entry stored once
        // it has the lock, and one arriving later makes a new file and finds it at once.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes an entry atomically: a temporary file in the same directory, synced, then renamed.
fn store(entry: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = entry.parent().context("cache entry has no directory")?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        entry
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        uuid::Uuid::new_v4().simple()
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, entry)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", entry.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_hash_is_stable_and_names_entries_by_content() {
        let engine = Engine::default();
        assert_eq!(engine_hash(&engine), engine_hash(&engine));
        let dir = tempfile::tempdir().unwrap();
        let cache = CompiledCache::open(dir.path(), &engine).unwrap().unwrap();
        assert_ne!(cache.entry(b"a"), cache.entry(b"b"));
        assert_eq!(cache.entry(b"a"), cache.entry(b"a"));
    }

    #[test]
    fn a_second_load_is_a_hit_and_a_corrupt_entry_is_recompiled() {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = CompiledCache::open(&dir.path().join("cache"), &engine)
            .unwrap()
            .unwrap();
        let counters = Arc::new(CompileCounters::default());
        // The smallest component: the magic number, version 0x0d, layer 1.
        let bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
        cache.load_or_compile(&engine, &counters, &bytes).unwrap();
        cache.load_or_compile(&engine, &counters, &bytes).unwrap();
        assert_eq!((counters.compiled(), counters.cache_hits()), (1, 1));
        std::fs::write(cache.entry(&bytes), b"not compiled code").unwrap();
        cache.load_or_compile(&engine, &counters, &bytes).unwrap();
        assert_eq!((counters.compiled(), counters.cache_hits()), (2, 1));
        cache.load_or_compile(&engine, &counters, &bytes).unwrap();
        assert_eq!((counters.compiled(), counters.cache_hits()), (2, 2));
        // A planted link is not followed: the entry is compiled again.
        let elsewhere = dir.path().join("elsewhere.cwasm");
        std::fs::rename(cache.entry(&bytes), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, cache.entry(&bytes)).unwrap();
        cache.load_or_compile(&engine, &counters, &bytes).unwrap();
        assert_eq!((counters.compiled(), counters.cache_hits()), (3, 2));
    }

    /// A process that finds another compiling the same bytes waits, then loads its entry.
    #[test]
    fn a_compile_under_way_elsewhere_is_waited_for_not_repeated() {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        let engine = Engine::new(&config).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = CompiledCache::open(dir.path(), &engine).unwrap().unwrap();
        let bytes = b"\0asm\x0d\x00\x01\x00".to_vec();
        let entry = cache.entry(&bytes);
        let elsewhere = Compiling::wait_for(&entry);
        let waiter = {
            let (cache, engine, bytes) = (cache.clone(), engine.clone(), bytes.clone());
            std::thread::spawn(move || {
                let counters = Arc::new(CompileCounters::default());
                cache.load_or_compile(&engine, &counters, &bytes).unwrap();
                (counters.compiled(), counters.cache_hits())
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        store(&entry, &engine.precompile_component(&bytes).unwrap()).unwrap();
        drop(elsewhere);
        assert_eq!(
            waiter.join().unwrap(),
            (0, 1),
            "loaded what the other stored"
        );
        assert!(!entry.with_extension("lock").exists(), "the lock file goes");
    }

    /// A holder that never lets go (a stopped process) delays a compile by the wait, no more.
    #[test]
    fn a_lock_held_past_the_wait_is_given_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let held = std::fs::File::create(&path).unwrap();
        held.lock().unwrap();
        let other = std::fs::File::open(&path).unwrap();
        let started = std::time::Instant::now();
        lock_within(&other, std::time::Duration::from_millis(200), &path);
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(200),
            "{waited:?}"
        );
        assert!(matches!(
            other.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        drop(held);
        lock_within(&other, std::time::Duration::ZERO, &path);
        assert!(
            matches!(
                std::fs::File::open(&path).unwrap().try_lock(),
                Err(std::fs::TryLockError::WouldBlock)
            ),
            "taken once free"
        );
    }

    #[test]
    fn a_directory_others_can_write_or_a_link_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let engine = Engine::default();
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(CompiledCache::open(&shared, &engine).unwrap().is_none());
        let why = untrusted(&shared).unwrap().unwrap();
        assert!(
            why.contains("writable by group or others (mode 777)"),
            "{why}"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert_eq!(
            untrusted(&link).unwrap().as_deref(),
            Some("a symbolic link")
        );
        let fresh = dir.path().join("fresh");
        assert!(CompiledCache::open(&fresh, &engine).unwrap().is_some());
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "created private");
    }
}
