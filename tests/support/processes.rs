//! `qhost` as separate processes, for tests where two hosts share a queue or one is killed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `qhost` command as `cargo test` built it for this package (see `Cargo.toml`): beside the
/// `deps` folder that holds the running test executable.
pub fn qhost_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let bin = profile_dir.join("qhost-under-test");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test`",
        bin.display()
    );
    bin
}

/// What every `qhost` a test starts runs with:
///
/// - its admin listener on a free loopback port, so tests running at once never contend for
///   the default one;
/// - the user's cache (`XDG_CACHE_HOME`) under `target/test-cache`, shared by every command
///   the run starts as a user's commands share theirs, so a plugin is compiled once per run
///   (an interpreter takes seconds of CPU) and the tests write nothing to the real home.
pub fn qhost_env() -> [(&'static str, PathBuf); 2] {
    [
        ("QHOST_ADMIN_LISTEN", "127.0.0.1:0".into()),
        (
            "XDG_CACHE_HOME",
            crate::workspace().join("target/test-cache"),
        ),
    ]
}

/// Runs `qhost ARGS` in `dir` to its end, without a `QHOST_CONFIG` from the environment:
/// (exit code, stdout, stderr).
pub fn run_in(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(qhost_binary())
        .current_dir(dir)
        .env_remove("QHOST_CONFIG")
        .envs(qhost_env())
        .args(args)
        .output()
        .expect("running qhost");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

/// Runs `qhost --config CONFIG ARGS` to its end, with the test AWS environment: (whether it
/// succeeded, stdout, stderr).
pub fn run_with_config(config: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(qhost_binary())
        .arg("--config")
        .arg(config)
        .args(args)
        .envs(crate::sqs_server::TEST_ENV)
        .envs(qhost_env())
        .output()
        .expect("running qhost");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// A running `qhost --config FILE run`, its stdout captured (the summary it prints on exit).
#[derive(Debug)]
pub struct HostProcess {
    child: Option<Child>,
    /// Where its log goes, when it is kept.
    log: Option<PathBuf>,
}

impl HostProcess {
    /// Starts `qhost run` with this configuration file.
    pub fn start(config: &Path) -> Self {
        Self::spawn(config, Stdio::null(), &[], &[])
    }

    /// Starts `qhost run` and waits until it logs that it is consuming its queues.
    pub fn start_consuming(config: &Path) -> Self {
        Self::start_consuming_with(config, &[])
    }

    /// As [`HostProcess::start_consuming`], with extra arguments to `qhost run`.
    pub fn start_consuming_with(config: &Path, run_args: &[&str]) -> Self {
        Self::start_consuming_in(config, run_args, &[])
    }

    /// As [`HostProcess::start_consuming_with`], with these variables set for it too.
    pub fn start_consuming_in(config: &Path, run_args: &[&str], vars: &[(&str, &str)]) -> Self {
        let log = config.with_extension(format!("{}.log", uuid::Uuid::new_v4().simple()));
        let file = std::fs::File::create(&log).expect("log file");
        let mut host = Self::spawn(config, Stdio::from(file), run_args, vars);
        host.log = Some(log);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !host.log().contains("consuming") {
            assert!(
                Instant::now() < deadline,
                "qhost did not start consuming; its log:\n{}",
                host.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        host
    }

    /// What it has logged so far (empty unless started with a kept log).
    pub fn log(&self) -> String {
        (self.log.as_ref())
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The address its admin listener logged it serves on.
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        let log = self.log();
        let line = (log.lines())
            .find(|l| l.contains("admin listener serving"))
            .unwrap_or_else(|| panic!("no admin listener in the log:\n{log}"));
        let addr = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("address="))
            .unwrap_or_else(|| panic!("no address in `{line}`"));
        addr.parse().expect("an IP:PORT")
    }

    fn spawn(config: &Path, stderr: Stdio, run_args: &[&str], vars: &[(&str, &str)]) -> Self {
        let child = Command::new(qhost_binary())
            .arg("--config")
            .arg(config)
            .arg("run")
            .args(run_args)
            .env("QHOST_LOG", "info")
            .envs(crate::sqs_server::TEST_ENV)
            .envs(qhost_env())
            .envs(vars.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("starting qhost");
        HostProcess {
            child: Some(child),
            log: None,
        }
    }

    /// One SIGTERM, without waiting: the host starts draining.
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            let pid = child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
    }

    /// SIGKILL: no drain, no release, leases left to lapse. Returns its whole log, read once
    /// the process is gone (a log read before the kill misses what it wrote in between).
    pub fn kill(mut self) -> String {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.log()
    }

    /// SIGTERM twice, a moment apart (the second skips the rest of the grace period), then
    /// waits up to `limit`; returns the exit status and what it printed, or `None` if it was
    /// still running then (it is killed).
    pub fn stop_now(self, limit: Duration) -> Option<(std::process::ExitStatus, String)> {
        self.signal_and_wait(2, limit)
    }

    /// One SIGTERM, then waits up to `limit` for the exit: the exit status and what it printed,
    /// or `None` if it did not exit in time (it is killed then).
    pub fn terminate_within(self, limit: Duration) -> Option<(std::process::ExitStatus, String)> {
        self.signal_and_wait(1, limit)
    }

    fn signal_and_wait(
        mut self,
        signals: usize,
        limit: Duration,
    ) -> Option<(std::process::ExitStatus, String)> {
        let mut child = self.child.take().expect("running");
        let pid = child.id().to_string();
        for i in 0..signals {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
        let deadline = Instant::now() + limit;
        while child.try_wait().expect("waiting for qhost").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().expect("qhost exits");
        Some((
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ))
    }

    /// SIGTERM, then waits; returns what it printed (the summary table).
    pub fn stop(self) -> String {
        self.stop_with_log().0
    }

    /// SIGTERM, then waits; returns what it printed (the summary table) and its whole log, read
    /// once it has exited: a host goes on working while it drains, and what it logs then counts.
    pub fn stop_with_log(mut self) -> (String, String) {
        let child = self.child.take().expect("running");
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let out = child.wait_with_output().expect("qhost exits");
        assert!(out.status.success(), "qhost exited with {}", out.status);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            self.log(),
        )
    }
}

impl Drop for HostProcess {
    /// A test that fails part-way leaves no host running.
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
        }
    }
}

/// Starts `qhost run` with `config`, lets it work for `busy` once it is consuming, and
/// SIGKILLs it; `kills` times. Returns how many kills there were.
pub fn kill_repeatedly(config: &Path, kills: usize, busy: Duration) -> usize {
    for _ in 0..kills {
        let host = HostProcess::start_consuming(config);
        std::thread::sleep(busy);
        host.kill();
    }
    kills
}

/// A column of the summary table summed over rows of `queue`.
pub fn summary_column(summary: &str, queue: &str, column: &str) -> u64 {
    let mut lines = summary.lines();
    let Some(header) = lines.next() else { return 0 };
    let Some(index) = header.split_whitespace().position(|h| h == column) else {
        return 0;
    };
    lines
        .filter(|l| l.split_whitespace().next() == Some(queue))
        .filter_map(|l| l.split_whitespace().nth(index)?.parse::<u64>().ok())
        .sum()
}
