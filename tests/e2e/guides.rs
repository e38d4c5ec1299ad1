//! The handler guides run as written: each guide's walk-through (its files and shell blocks, in
//! order) is carried out in an empty directory with `qhost` on PATH, and every summary the
//! guide shows after a shell block is the one that block's `qhost run` printed (and every
//! `qhost test` report the one it printed, timings aside). So do the testing guide and each
//! language guide's "Testing a handler".
//!
//! What a reader replaces is replaced here too, and nothing else: `path/to/qhost` (and the
//! Rust guide's `../qhost`) becomes this checkout, and the README's `cargo install` is the
//! binary under test, already on PATH. The README's "Five minutes" runs the same way. The toolchains are installed as the guides
//! say (`pip install`, `npm install`, `cargo build`), but offline, like every test: from what
//! `scripts/build-guest-plugins` fetched (a wheel to find, a primed npm cache) and the crates
//! the workspace's own build left in cargo's cache. A guide whose versions drift from those
//! fails here.

use std::path::Path;
use std::process::Command;

use qhost_e2e::processes::{qhost_binary, qhost_env};

/// A fenced block of a guide: its language and its text.
#[derive(Debug)]
struct Block {
    lang: String,
    text: String,
}

/// The fenced blocks of `guide` after the heading `start` (the top without one) and before the
/// heading `stop` (the end without one): a walk-through.
fn walk_through(guide: &str, start: Option<&str>, stop: Option<&str>) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    let mut started = start.is_none();
    for line in guide.lines() {
        match open.as_mut() {
            None if !started => started = Some(line) == start,
            None if Some(line) == stop => break,
            None => {
                if let Some(lang) = line.strip_prefix("```") {
                    open = Some(Block {
                        lang: lang.trim().to_string(),
                        text: String::new(),
                    });
                }
            }
            Some(_) if line == "```" => blocks.extend(open.take()),
            Some(block) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
        }
    }
    assert!(open.is_none(), "an unclosed block");
    blocks
}

/// The file a source block says it is, by its first line (`# app.py`, `// src/lib.rs`).
fn file_name(block: &Block) -> Option<&str> {
    let first = block.text.lines().next()?;
    let name = (first
        .strip_prefix("# ")
        .or_else(|| first.strip_prefix("// ")))?;
    let source = ["toml", "rust", "python", "js"].contains(&block.lang.as_str());
    (source && !name.contains(' ') && name.contains('.')).then_some(name)
}

/// The summary table in `output`: its header line and the rows under it, blanks folded.
fn summary(output: &str) -> Vec<String> {
    let fold = |l: &str| l.split_whitespace().collect::<Vec<_>>().join(" ");
    output
        .lines()
        .skip_while(|l| {
            let mut words = l.split_whitespace();
            !(words.next() == Some("queue") && words.any(|w| w == "received"))
        })
        .take_while(|l| !l.trim().is_empty())
        .map(fold)
        .collect()
}

/// A `qhost test` report in `output`, without its timings (`(3 ms)`), which vary; empty when
/// there is none.
fn test_report(output: &str) -> Vec<String> {
    let ends = output.lines().any(|l| {
        let words: Vec<&str> = l.split_whitespace().collect();
        words.len() >= 4 && words[1] == "passed," && words[3] == "failed"
    });
    if !ends {
        return Vec::new();
    }
    (output.lines())
        .map(|l| match (l.rfind(" ("), l.ends_with(" ms)")) {
            (Some(at), true) => l[..at].to_string(),
            _ => l.to_string(),
        })
        .collect()
}

/// Carries out the walk-through of `guide` (a file under `docs/`) up to the heading `stop`.
fn run_guide(guide: &str, stop: &str) {
    run_walk_through(guide, None, Some(stop));
}

/// Carries out the walk-through of `guide` from the heading `start` to the heading `stop`.
fn run_walk_through(guide: &str, start: Option<&str>, stop: Option<&str>) {
    let root = qhost_e2e::workspace().canonicalize().expect("the checkout");
    let root = root.display().to_string();
    let text = std::fs::read_to_string(format!("{root}/docs/{guide}")).expect("the guide");
    let top = tempfile::tempdir().expect("a directory");
    // Blocks run one level down, so a walk-through's `..` is still the test's own.
    let dir = top.path().join("here");
    std::fs::create_dir(&dir).expect("a working directory");
    let bin = tempfile::tempdir().expect("a directory for qhost");
    std::os::unix::fs::symlink(qhost_binary(), bin.path().join("qhost")).expect("qhost on PATH");
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The README's install line is the binary under test, already on PATH.
    let reader = |s: &str| {
        (s.replace("path/to/qhost", &root))
            .replace("\"../../qhost/", &format!("\"{root}/"))
            .replace("\"../qhost/", &format!("\"{root}/"))
            .replace("cargo install --locked --path cli", "command -v qhost")
    };
    let mut last_output: Option<String> = None;
    let mut shown = 0;
    for block in walk_through(&text, start, stop) {
        if let Some(name) = file_name(&block) {
            let file = dir.join(name);
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("its directory");
            std::fs::write(&file, reader(&block.text)).expect("writing the file");
        } else if block.lang == "sh" {
            last_output = Some(run_block(&dir, &path, &reader(&block.text), guide));
        } else if block.lang == "text" && !test_report(&block.text).is_empty() {
            let ran = last_output.take().expect("a report follows a shell block");
            assert_eq!(
                test_report(&ran),
                test_report(&block.text),
                "{guide}: what qhost test printed, against what the guide shows:\n{ran}"
            );
            shown += 1;
        } else if block.lang == "text" && !summary(&block.text).is_empty() {
            let ran = last_output.take().expect("a summary follows a shell block");
            assert_eq!(
                summary(&ran),
                summary(&block.text),
                "{guide}: what run printed, against what the guide shows:\n{ran}"
            );
            shown += 1;
        }
    }
    assert!(shown > 0, "{guide} shows what a run prints");
}

/// Runs one shell block in `dir`; it must succeed. Returns what it printed.
fn run_block(dir: &Path, path: &str, script: &str, guide: &str) -> String {
    let wheels = qhost_e2e::workspace().join("target/tools/wheels");
    let out = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", wheels)
        .env("npm_config_offline", "true")
        .env("CARGO_NET_OFFLINE", "true")
        // The guides' Rust projects share one build directory (cargo's intermediate artefacts,
        // not the components they write in their own target/), as `qhost new`'s do.
        .env(
            "CARGO_BUILD_BUILD_DIR",
            qhost_e2e::workspace().join("target/new-projects"),
        )
        .env_remove("QHOST_CONFIG")
        .env_remove("CARGO_TARGET_DIR")
        .envs(qhost_env())
        .output()
        .expect("running bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{guide}: the block\n{script}\nfailed:\n{stdout}{stderr}"
    );
    stdout
}

#[test]
fn the_rust_guide_runs_as_written() {
    qhost_e2e::built_plugins(); // the guest SDK's crates in cargo's cache
    run_guide("handlers-rust.md", "## What the host does for you");
}

#[test]
fn the_python_guide_runs_as_written() {
    qhost_e2e::built_guests(); // fetches the componentize-py wheel
    run_guide("handlers-python.md", "## Exceptions");
}

#[test]
fn the_javascript_guide_runs_as_written() {
    qhost_e2e::built_guests(); // primes npm's cache with componentize-js
    run_guide("handlers-javascript.md", "## Exceptions");
}

/// The README's "Five minutes", in a new directory as it says (its `cargo install` is the
/// binary under test).
#[test]
fn the_readme_s_five_minutes_run_as_written() {
    qhost_e2e::built_plugins(); // wit-bindgen's crates in cargo's cache
    run_walk_through(
        "../README.md",
        Some("## Five minutes with qhost"),
        Some("## Seeing it run, and deploying it"),
    );
}

/// The Celery guide's Python example, copied into a `qhost new python` project as it says,
/// builds as the project does and runs the tasks `qhost send --celery-task` puts on the queue.
#[test]
fn the_celery_guide_s_python_example_runs_in_a_new_project() {
    qhost_e2e::built_guests(); // fetches the componentize-py wheel
    run_walk_through(
        "celery.md",
        Some("### The Python example, in a project of your own"),
        Some("## 4. Check a message before you switch"),
    );
}

#[test]
fn the_testing_guide_runs_as_written() {
    qhost_e2e::built_plugins(); // the example plugins' crates in cargo's cache
    run_walk_through("testing.md", None, Some("## A test file"));
}

/// The three language guides.
const LANGUAGE_GUIDES: [&str; 3] = [
    "handlers-rust.md",
    "handlers-python.md",
    "handlers-javascript.md",
];

#[test]
fn each_language_guide_s_batch_handler_runs_as_written() {
    qhost_e2e::built_plugins();
    qhost_e2e::built_guests();
    for guide in LANGUAGE_GUIDES {
        run_walk_through(guide, Some("## Batches"), Some("## Testing a handler"));
    }
}

#[test]
fn each_language_guide_s_handler_tests_run_as_written() {
    qhost_e2e::built_plugins();
    qhost_e2e::built_guests();
    for guide in LANGUAGE_GUIDES {
        run_walk_through(guide, Some("## Testing a handler"), None);
    }
}

/// `cargo install` without `--locked` resolves every dependency afresh: an untested set, and a
/// long rebuild. Every place that tells a reader to install says `--locked`.
#[test]
fn every_cargo_install_the_docs_give_is_locked() {
    let root = qhost_e2e::workspace();
    let mut pages = vec![root.join("README.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/");
    pages.extend(docs.filter_map(|e| e.ok().map(|e| e.path())));
    let mut unlocked = Vec::new();
    for page in pages
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(page).expect("a page");
        for line in text.lines() {
            if line.contains("cargo install ") && !line.contains("cargo install --locked") {
                unlocked.push(format!("{}: {line}", page.display()));
            }
        }
    }
    assert!(unlocked.is_empty(), "{unlocked:#?}");
}

#[test]
fn a_walk_through_is_read_block_by_block_up_to_its_end() {
    let guide = "# T\n```toml\n# Cargo.toml\n[package]\n```\n```sh\nqhost run\n```\n\
                 ```text\nqueue  plugin  received\ng  h  1\n```\n## Stop\n```sh\nnot run\n```\n";
    let blocks = walk_through(guide, None, Some("## Stop"));
    let langs: Vec<&str> = blocks.iter().map(|b| b.lang.as_str()).collect();
    assert_eq!(langs, ["toml", "sh", "text"]);
    assert_eq!(file_name(&blocks[0]), Some("Cargo.toml"));
    assert_eq!(file_name(&blocks[1]), None);
    assert_eq!(summary(&blocks[2].text), ["queue plugin received", "g h 1"]);
    let run = "queue g: plugin h loads\nqueue a  received\n1 2\n\nafter";
    assert_eq!(summary(run), ["queue a received", "1 2"]);
    let report = "f (plugin p)\n  pass  c (3 ms)\n\n1 passed, 0 failed\n";
    assert_eq!(
        test_report(report),
        ["f (plugin p)", "  pass  c", "", "1 passed, 0 failed"]
    );
    let later = walk_through(
        "```sh\nskipped\n```\n## Go\n```sh\nrun\n```\n",
        Some("## Go"),
        None,
    );
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].text, "run\n");
}
