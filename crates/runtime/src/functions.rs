//! Compiled functions kept between compilations: Cranelift's incremental compilation cache,
//! on disk beside the compiled-code cache.
//!
//! The compiled-code cache (`cache.rs`) saves a whole component, so it helps only when the
//! same `.wasm` loads again. A plugin rebuilt after an edit is new bytes, and an interpreter
//! plugin is mostly the interpreter: a Python handler's component carries CPython's 13,000
//! functions, identical in every Python plugin and every build of one. Cranelift can look each
//! function up by the hash of its IR (with the target and every code-generation setting) before
//! compiling it, and this store keeps what it compiled. A second Python plugin, or the same one
//! after an edit, then compiles only its own functions. On this machine (`--bench reload`,
//! release) a second Python component compiled in 0.42 of the time with no cache, and the first
//! in 1.22 of it (writing 13,000 entries, 65 MB): what is left is parsing, translation and
//! hashing, which the lookup needs. JavaScript components share far fewer functions (0.93).
//!
//! Entries are files named by the key's hex (two levels, so no directory grows past a few
//! thousand names), written to a temporary file and renamed into place. Cranelift stores its
//! own version in each entry and refuses one from another release. The code is machine code
//! put into the compiled component unverified, so the store lives only inside a compiled-code
//! cache directory that passed its ownership and permission checks (`CompiledCache::open`),
//! and until one is named it stores nothing: an engine is built before its cache is chosen.

use std::borrow::Cow;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Compiled functions by the hash of their IR, in a directory set once.
#[derive(Debug, Default)]
pub(crate) struct FunctionCache {
    dir: OnceLock<PathBuf>,
}

impl FunctionCache {
    /// Keeps functions in `dir` from now on (created private on the first write). `dir` must be
    /// inside a checked compiled-code cache (module docs). A second call changes nothing.
    pub(crate) fn keep_in(&self, dir: PathBuf) {
        let _ = self.dir.set(dir);
    }

    /// Where the entry for `key` is, once a directory is set.
    fn entry(&self, key: &[u8]) -> Option<PathBuf> {
        let name = hex::encode(key);
        let (shard, rest) = name.split_at(name.len().min(2));
        Some(self.dir.get()?.join(shard).join(rest))
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let entry = self.entry(key)?;
        // Not `is_file`, which follows a symbolic link to wherever it leads.
        let regular = std::fs::symlink_metadata(&entry).is_ok_and(|m| m.file_type().is_file());
        regular
            .then(|| std::fs::read(&entry).ok())
            .flatten()
            .map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let Some(entry) = self.entry(key) else {
            return false;
        };
        write_entry(&entry, &value).is_ok()
    }
}

/// Writes `bytes` to `entry` through a temporary file renamed into place, so a reader never
/// sees half an entry; the shard directory is created private.
fn write_entry(entry: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    let shard = entry.parent().ok_or(std::io::ErrorKind::InvalidInput)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(shard)?;
    let tmp = shard.join(format!(".{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = std::fs::File::create(&tmp)
        .and_then(|mut file| file.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, entry));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use wasmtime::CacheStore as _;

    #[test]
    fn nothing_is_kept_until_a_directory_is_named_then_entries_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::default();
        assert!(!cache.insert(b"key", b"code".to_vec()));
        assert!(cache.get(b"key").is_none());
        cache.keep_in(dir.path().join("functions"));
        assert!(cache.insert(&[0xab, 0xcd, 0xef], b"code".to_vec()));
        assert_eq!(
            cache.get(&[0xab, 0xcd, 0xef]).as_deref(),
            Some(&b"code"[..])
        );
        assert!(dir.path().join("functions/ab/cdef").is_file());
        assert!(cache.get(&[0xab, 0xcd, 0xee]).is_none());
    }

    #[test]
    fn a_planted_link_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::default();
        cache.keep_in(dir.path().to_path_buf());
        std::fs::write(dir.path().join("elsewhere"), b"code").unwrap();
        std::fs::create_dir(dir.path().join("ab")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), dir.path().join("ab/cd")).unwrap();
        assert!(cache.get(&[0xab, 0xcd]).is_none());
    }

    /// The engine's functions come back from the store: a component compiled a second time in
    /// a new engine sharing the directory reads entries and writes none.
    #[test]
    fn a_second_engine_finds_the_functions_the_first_compiled() {
        let dir = tempfile::tempdir().unwrap();
        // A component holding one core module: `(func (param i32) (result i32)
        // local.get 0 i32.const 7 i32.mul)`.
        let module: &[u8] = &[
            0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // core module, version 1
            0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // type: (i32) -> i32
            0x03, 0x02, 0x01, 0x00, // one function of that type
            0x0a, 0x09, 0x01, 0x07, 0x00, 0x20, 0x00, 0x41, 0x07, 0x6c, 0x0b, // its body
        ];
        let mut bytes = b"\0asm\x0d\x00\x01\x00\x01".to_vec();
        bytes.push(module.len() as u8);
        bytes.extend_from_slice(module);
        let compile = || {
            let functions = Arc::new(CountingStore::default());
            functions.inner.keep_in(dir.path().to_path_buf());
            let mut config = wasmtime::Config::new();
            config.wasm_component_model(true);
            config
                .enable_incremental_compilation(functions.clone())
                .unwrap();
            let engine = wasmtime::Engine::new(&config).unwrap();
            engine.precompile_component(&bytes).unwrap();
            functions
        };
        let first = compile();
        assert!(
            first.inserted() > 0,
            "the first compile stores its functions"
        );
        let second = compile();
        assert_eq!(second.inserted(), 0, "the second finds them all");
        assert!(second.found() > 0);
    }

    /// A store that counts what passes through it.
    #[derive(Debug, Default)]
    struct CountingStore {
        inner: FunctionCache,
        found: std::sync::atomic::AtomicUsize,
        inserted: std::sync::atomic::AtomicUsize,
    }

    impl CountingStore {
        fn found(&self) -> usize {
            self.found.load(std::sync::atomic::Ordering::Relaxed)
        }
        fn inserted(&self) -> usize {
            self.inserted.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    impl wasmtime::CacheStore for CountingStore {
        fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
            let got = self.inner.get(key);
            if got.is_some() {
                self.found
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            got
        }
        fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
            self.inserted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.insert(key, value)
        }
    }
}
