//! `qhost test`: a handler's tests as data. A test file (`*.test.toml`) names a plugin and
//! holds cases: a message as its producer sends it, the world it runs in (config and secrets,
//! state before, canned HTTP answers, the clock), and what must come of it (the outcome, the
//! outbox, the state writes, the HTTP requests, the result value, log lines). Cases run on the
//! one engine `invoke` and `replay` use (`oneshot::bench`), with the host's semantics: the key
//! the manifest derives, the lease, a completed key finished as a duplicate, state committed
//! with the run, and nothing beyond the test's own world (no queue, network or host
//! environment).
//!
//! | module    | role                                                                  |
//! |-----------|-----------------------------------------------------------------------|
//! | `file`    | a test file, read and checked (every mistake one error naming its field) |
//! | `expect`  | what a step must come to, and the differences from what it came to   |
//! | `run`     | a file's cases in fresh worlds, each step through the engine          |
//! | `discover`| which files `qhost test` runs                                         |
//! | `junit`   | the report as JUnit XML                                               |
//! | `record`  | recorded messages turned into cases (`qhost test --record`)          |
//! | `watch`   | a plugin or test file changing (`qhost test --watch`)                |

mod discover;
mod expect;
mod file;
mod junit;
mod record;
mod run;
mod watch;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;

pub use discover::test_files;
pub use record::{Recorded, record_cases};
pub use watch::Watch;

/// What a `qhost test` run found.
#[derive(Debug, Default)]
pub struct TestRun {
    /// Each file that could be read, in order.
    pub files: Vec<FileReport>,
    /// The files that could not be read, each with why (one error naming the file, the case
    /// and the field).
    pub errors: Vec<String>,
}

/// One test file's run.
#[derive(Debug)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// The plugin file it tests.
    pub plugin: PathBuf,
    /// Why its plugin could not be run at all (it does not load), when it could not.
    pub broken: Option<String>,
    /// Its cases that ran, in order.
    pub cases: Vec<CaseReport>,
    /// How long the file took.
    pub took: Duration,
}

/// One case's run.
#[derive(Debug)]
pub struct CaseReport {
    /// Its name.
    pub name: String,
    /// How what came differed from what it expects, one line each: none when it passed.
    pub differences: Vec<String>,
    /// How long it took.
    pub took: Duration,
}

impl CaseReport {
    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }
}

impl TestRun {
    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.cases().filter(|c| c.passed()).count()
    }

    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.cases().filter(|c| !c.passed()).count()
    }

    /// Files that could not be read or whose plugin would not load.
    pub fn broken(&self) -> usize {
        self.errors.len() + self.files.iter().filter(|f| f.broken.is_some()).count()
    }

    /// Whether everything passed: every file read, every plugin loaded, every case passed.
    pub fn ok(&self) -> bool {
        self.failed() == 0 && self.broken() == 0 && self.passed() > 0
    }

    /// The report as JUnit XML: a test suite per file, a test case per case.
    pub fn junit(&self) -> String {
        junit::render(self)
    }

    fn cases(&self) -> impl Iterator<Item = &CaseReport> {
        self.files.iter().flat_map(|f| f.cases.iter())
    }
}

/// Runs the test files `files` (found by [`test_files`]), plugin names looked up in `config`'s
/// plugins directory. Blocking: the cases run on a runtime of their own, on a paused clock
/// (see `runtime::world`).
pub fn run_files(config: &Config, files: &[PathBuf]) -> anyhow::Result<TestRun> {
    let config = config.clone();
    let files = files.to_vec();
    on_paused_clock(async move {
        let runner = run::Runner::new(&config)?;
        let mut report = TestRun::default();
        for path in &files {
            match file::TestFile::read(path, &config.plugins_dir) {
                Ok(file) => report.files.push(runner.run_file(&file).await),
                Err(e) => report.errors.push(e.to_string()),
            }
        }
        runner.log_compiled();
        Ok(report)
    })
}

/// Runs `work` to its end on a runtime of its own whose clock is paused: time moves only when
/// nothing is ready to run (a guest's sleep passes at once), and by what the guest computes.
fn on_paused_clock<T>(work: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let clock = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    clock.block_on(work)
}

/// The files a run reads: the test files and the plugin files and manifests they name, for
/// `--watch`.
pub fn watched(config: &Config, run: &TestRun, files: &[PathBuf]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = files.to_vec();
    for file in &run.files {
        paths.push(file.plugin.clone());
        paths.push(file.plugin.with_extension("toml"));
    }
    paths.push(config.plugins_dir.clone());
    paths.retain(|p| !p.as_os_str().is_empty());
    paths.sort();
    paths.dedup();
    paths
}

/// Where a path is shown from: relative to the working directory when it is under it.
pub(crate) fn shown(path: &Path) -> String {
    let here = std::env::current_dir().unwrap_or_default();
    path.strip_prefix(&here)
        .unwrap_or(path)
        .display()
        .to_string()
}
