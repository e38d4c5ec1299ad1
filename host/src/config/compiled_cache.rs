//! Where compiled plugins are kept: `compiled-cache = true | false | "DIR"`.
//!
//! Compiling a component embedding an interpreter takes seconds of CPU, and a handler author
//! runs several commands on the same plugin in a row (`qhost test` in the project, `qhost
//! check` and `qhost run` beside it, each with its own data directory). So the default cache
//! is the user's, shared by every command and every data directory, as wasmtime's own cache
//! is: `$XDG_CACHE_HOME/qhost/compiled`, else `$HOME/.cache/qhost/compiled`. Entries are
//! named by the component's sha256 and the engine's compatibility hash, so sharing them is
//! safe (`runtime/cache.rs`).
//!
//! Where the user has no usable cache directory (no `HOME`, or one this user cannot write, as
//! for a service account or a container's unnamed user), the default is the data directory's
//! `compiled/`, as before. Deciding that creates nothing: a refused start leaves nothing
//! behind.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Visitor};

/// `compiled-cache` as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RawCompiledCache {
    /// `true` (the user's cache) or `false` (none).
    On(bool),
    /// A directory of the operator's choosing.
    At(PathBuf),
}

impl<'de> Deserialize<'de> for RawCompiledCache {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl Visitor<'_> for Either {
            type Value = RawCompiledCache;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true (the user's cache), false (none) or a directory")
            }

            fn visit_bool<E: de::Error>(self, on: bool) -> Result<Self::Value, E> {
                Ok(RawCompiledCache::On(on))
            }

            fn visit_str<E: de::Error>(self, dir: &str) -> Result<Self::Value, E> {
                if dir.is_empty() {
                    return Err(E::custom(
                        "an empty directory; say false for no cache, true for the user's",
                    ));
                }
                Ok(RawCompiledCache::At(dir.into()))
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// The cache directory `raw` asks for, `None` for none; the default (`true`) is the user's
/// cache when the environment names a usable one, else `data_dir/compiled`.
pub(crate) fn resolve(raw: Option<RawCompiledCache>, data_dir: &Path) -> Option<PathBuf> {
    let env = UserEnv {
        xdg_cache_home: std::env::var_os("XDG_CACHE_HOME"),
        home: std::env::var_os("HOME"),
    };
    resolve_in(raw, data_dir, env)
}

/// The variables the user's cache is found by.
struct UserEnv {
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
}

fn resolve_in(raw: Option<RawCompiledCache>, data_dir: &Path, env: UserEnv) -> Option<PathBuf> {
    match raw.unwrap_or(RawCompiledCache::On(true)) {
        RawCompiledCache::On(false) => None,
        RawCompiledCache::At(dir) => Some(dir),
        RawCompiledCache::On(true) => Some(
            user_cache_dir(env.xdg_cache_home, env.home)
                .filter(|dir| can_create(dir))
                .unwrap_or_else(|| data_dir.join("compiled")),
        ),
    }
}

/// The user's compiled-code cache as the XDG base directory rules name it: under
/// `$XDG_CACHE_HOME` if that is an absolute path, else under `$HOME/.cache` (a relative value
/// is ignored, as the rules say).
fn user_cache_dir(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let absolute = |v: OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = (xdg_cache_home.and_then(absolute))
        .or_else(|| home.and_then(absolute).map(|h| h.join(".cache")))?;
    Some(base.join("qhost").join("compiled"))
}

/// Whether `dir` is a directory, or could be created by this user: its nearest existing
/// ancestor is a directory this user may write. Creates nothing.
fn can_create(dir: &Path) -> bool {
    let Some(existing) = dir.ancestors().find(|a| a.symlink_metadata().is_ok()) else {
        return false;
    };
    if existing == dir {
        return dir.is_dir();
    }
    existing.is_dir() && rustix::fs::access(existing, rustix::fs::Access::WRITE_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(toml_value: &str) -> Result<RawCompiledCache, String> {
        #[derive(Deserialize)]
        struct Holder {
            c: RawCompiledCache,
        }
        toml::from_str::<Holder>(&format!("c = {toml_value}"))
            .map(|h| h.c)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_switch_or_a_directory_is_read_and_anything_else_is_refused_naming_both() {
        assert_eq!(parsed("true"), Ok(RawCompiledCache::On(true)));
        assert_eq!(parsed("false"), Ok(RawCompiledCache::On(false)));
        assert_eq!(
            parsed("\"/var/cache/qhost\""),
            Ok(RawCompiledCache::At("/var/cache/qhost".into()))
        );
        let wrong = parsed("3").unwrap_err();
        assert!(
            wrong.contains("true (the user's cache), false (none) or a directory"),
            "{wrong}"
        );
        let empty = parsed("\"\"").unwrap_err();
        assert!(empty.contains("say false for no cache"), "{empty}");
    }

    #[test]
    fn the_user_s_cache_follows_xdg_then_home_and_ignores_relative_values() {
        let dir = |xdg: Option<&str>, home: Option<&str>| {
            user_cache_dir(xdg.map(OsString::from), home.map(OsString::from))
        };
        assert_eq!(
            dir(Some("/x/cache"), Some("/home/u")),
            Some("/x/cache/qhost/compiled".into())
        );
        assert_eq!(
            dir(None, Some("/home/u")),
            Some("/home/u/.cache/qhost/compiled".into())
        );
        assert_eq!(
            dir(Some("relative"), Some("/home/u")),
            Some("/home/u/.cache/qhost/compiled".into())
        );
        assert_eq!(dir(None, Some("relative")), None);
        assert_eq!(dir(None, None), None);
    }

    #[test]
    fn a_directory_is_usable_if_it_exists_or_its_nearest_ancestor_is_writable() {
        let top = tempfile::tempdir().unwrap();
        assert!(can_create(top.path()));
        assert!(can_create(&top.path().join("a/b/c")));
        let file = top.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(!can_create(&file), "a file is not a directory");
        assert!(!can_create(&file.join("below")), "nor can one hold one");
    }

    #[test]
    fn off_is_none_a_directory_is_itself_and_the_default_is_the_user_s_where_usable() {
        let top = tempfile::tempdir().unwrap();
        let data = top.path().join("data");
        let env = |xdg: Option<&Path>, home: Option<&Path>| UserEnv {
            xdg_cache_home: xdg.map(|p| p.as_os_str().to_owned()),
            home: home.map(|p| p.as_os_str().to_owned()),
        };
        let off = Some(RawCompiledCache::On(false));
        assert_eq!(resolve_in(off, &data, env(None, Some(top.path()))), None);
        let at = Some(RawCompiledCache::At("/c".into()));
        assert_eq!(resolve_in(at, &data, env(None, None)), Some("/c".into()));
        let home = top.path().join("home");
        assert_eq!(
            resolve_in(None, &data, env(None, Some(&home))),
            Some(home.join(".cache/qhost/compiled")),
            "the user's, not yet created"
        );
        assert!(!home.exists(), "deciding created nothing");
        assert_eq!(
            resolve_in(None, &data, env(None, None)),
            Some(data.join("compiled")),
            "no HOME: the data directory's"
        );
        let file = top.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(
            resolve_in(None, &data, env(Some(&file), None)),
            Some(data.join("compiled")),
            "a cache home that cannot hold a directory: the data directory's"
        );
    }
}
