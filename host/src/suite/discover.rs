//! Which files `qhost test` runs: the paths it is given (a file as it is, a folder searched for
//! `*.test.toml`), or with none, the test files in the current directory (where `qhost new`
//! writes a project's), beside the plugins and under `tests/`.

use std::path::{Path, PathBuf};

use anyhow::bail;

use crate::config::Config;

/// What a test file's name ends with.
const SUFFIX: &str = ".test.toml";

/// Folders a search never enters: build output and installed packages.
const SKIPPED: [&str; 3] = ["target", "node_modules", ".venv"];

/// The test files `paths` name, in order; none given: those in the current directory (not
/// below it), in `config`'s plugins directory and under `tests/`, each once. Finding none is
/// an error: a run that tests nothing must not pass.
pub fn test_files(config: &Config, paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    if paths.is_empty() {
        here(&mut files)?;
        for dir in [config.plugins_dir.as_path(), Path::new("tests")] {
            if dir.is_dir() {
                let mut found = Vec::new();
                search(dir, &mut found)?;
                let seen = |f: &PathBuf| files.iter().any(|h: &PathBuf| same_file(h, f));
                found.retain(|f| !seen(f));
                files.extend(found);
            }
        }
        if files.is_empty() {
            bail!(
                "no test files: none named *{SUFFIX} here, in {} or in tests/ (or name files and folders: qhost test PATH…)",
                config.plugins_dir.display()
            );
        }
        return Ok(files);
    }
    for path in paths {
        if path.is_file() {
            files.push(path.clone());
        } else if path.is_dir() {
            let before = files.len();
            search(path, &mut files)?;
            if files.len() == before {
                bail!("{}: no file in it is named *{SUFFIX}", path.display());
            }
        } else {
            bail!("{}: no such file or folder", path.display());
        }
    }
    Ok(files)
}

/// Adds the test files in the current directory itself, sorted, to `files`, named as a user
/// would name them (`hello.test.toml`, not `./hello.test.toml`).
fn here(files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(".")
        .map_err(|e| anyhow::anyhow!("reading the current directory: {e}"))?
        .filter_map(|e| e.ok().map(|e| PathBuf::from(e.file_name())))
        .filter(|p| p.is_file() && p.to_str().is_some_and(|n| n.ends_with(SUFFIX)))
        .collect();
    entries.sort();
    files.extend(entries);
    Ok(())
}

/// Whether two paths name one file (`hello.test.toml` and `./plugins/../hello.test.toml`).
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Adds the test files under `dir`, sorted, to `files`.
fn search(dir: &Path, files: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !name.starts_with('.') && !SKIPPED.contains(&name) {
                search(&path, files)?;
            }
        } else if name.ends_with(SUFFIX) {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_searched_for_test_files_and_nothing_found_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for file in [
            "a.test.toml",
            "b.toml",
            "sub/c.test.toml",
            "target/d.test.toml",
        ] {
            let path = root.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        let config = Config::default();
        let found = test_files(&config, &[root.to_path_buf()]).unwrap();
        let names: Vec<_> = (found.iter())
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.test.toml", "sub/c.test.toml"]);
        let empty = root.join("empty");
        std::fs::create_dir(&empty).unwrap();
        let err = test_files(&config, &[empty]).unwrap_err().to_string();
        assert!(
            err.ends_with("empty: no file in it is named *.test.toml"),
            "{err}"
        );
        let err = test_files(&config, &[root.join("nope")])
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("nope: no such file or folder"), "{err}");
    }
}
