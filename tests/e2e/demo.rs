//! `scripts/demo` as a newcomer meets it after following the README's tutorial in the
//! checkout: a `qhost.toml` left in the checkout's root, consuming a queue and a plugin the
//! demo does not have. The demo reads only its own configuration, so it passes; run on the
//! binary under test (`QHOST_BINARY`), the plugins as the tests build them.

use std::path::PathBuf;
use std::process::Command;

use qhost_e2e::processes::qhost_binary;

/// A file placed for a test and removed after it, unless it was there before.
struct Stray {
    path: PathBuf,
    placed: bool,
}

impl Stray {
    fn place(path: PathBuf, text: &str) -> Self {
        let placed = !path.exists();
        if placed {
            std::fs::write(&path, text).expect("the stray file");
        }
        Stray { path, placed }
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        if self.placed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[test]
fn the_demo_passes_beside_a_stray_qhost_toml_in_the_checkout() {
    qhost_e2e::built_plugins(); // the demo's own plugin build then finds them built
    let root = qhost_e2e::workspace().canonicalize().expect("the checkout");
    let _stray = Stray::place(
        root.join("qhost.toml"),
        "[[queue]]\nname = \"hello\"\nplugin = \"hello\"\n",
    );
    let out = Command::new("bash")
        .arg(root.join("scripts/demo"))
        .current_dir(&root)
        .env("QHOST_BINARY", qhost_binary())
        .envs(qhost_e2e::processes::qhost_env())
        .env_remove("QHOST_CONFIG")
        .env_remove("QHOST_LOG")
        .output()
        .expect("running scripts/demo");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.trim_end().ends_with("demo OK"), "{stdout}");
    assert!(
        !stderr.contains("no configured queue consumes"),
        "the stray configuration was not read: {stderr}"
    );
}

/// Writes an executable script `name` into `dir`.
fn script(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// `scripts/demo` with `env` set, from the checkout: (whether it succeeded, stdout, stderr).
fn demo(env: &[(&str, std::ffi::OsString)]) -> (bool, String, String) {
    qhost_e2e::built_plugins(); // the demo's own plugin build then finds them built
    let root = qhost_e2e::workspace().canonicalize().expect("the checkout");
    let out = Command::new("bash")
        .arg(root.join("scripts/demo"))
        .current_dir(&root)
        .envs(qhost_e2e::processes::qhost_env())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("QHOST_CONFIG")
        .env_remove("QHOST_LOG")
        .output()
        .expect("running scripts/demo");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// A `CARGO_TARGET_DIR` set for every build (a common global setting): the demo runs the qhost
/// cargo built there. `cargo` here is the real one except that the release build of the host
/// is skipped (it would take many minutes), its binary already in place: the binary under test.
#[test]
fn under_a_cargo_target_dir_the_demo_runs_the_binary_cargo_built_there() {
    let target = tempfile::tempdir().unwrap();
    std::fs::create_dir(target.path().join("release")).unwrap();
    std::os::unix::fs::symlink(qhost_binary(), target.path().join("release/qhost")).unwrap();
    let bin = tempfile::tempdir().unwrap();
    let real_cargo = real_cargo();
    script(
        bin.path(),
        "cargo",
        &format!(
            "#!/usr/bin/env bash\nif [[ \"$1\" == build && \" $* \" == *' --release -p qhost-cli '* ]]; then exit 0; fi\nexec '{}' \"$@\"\n",
            real_cargo.display()
        ),
    );
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (ok, out, err) = demo(&[
        ("PATH", path.into()),
        ("CARGO_TARGET_DIR", target.path().into()),
    ]);
    assert!(ok, "{out}\n{err}");
    assert!(out.trim_end().ends_with("demo OK"), "{out}");
}

/// The cargo this test runs under (`CARGO`, which `cargo test` sets), else the one on `PATH`:
/// never the bare name, which the wrapper put first on `PATH` would resolve to itself, and
/// `exec` itself forever.
fn real_cargo() -> PathBuf {
    if let Some(cargo) = std::env::var_os("CARGO") {
        return cargo.into();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    (std::env::split_paths(&path))
        .map(|dir| dir.join("cargo"))
        .find(|cargo| cargo.is_file())
        .expect("cargo on PATH")
}

/// A failing step prints the banner naming its line and what the hosts logged: a step inside
/// one of the demo's functions too (the error trap is inherited: `set -E`).
#[test]
fn a_failing_step_prints_the_banner_and_the_logs() {
    let bin = tempfile::tempdir().unwrap();
    let real = qhost_binary();
    for (verb, log) in [("test", None), ("run", Some("--- part1.log"))] {
        // The qhost the demo is given fails the first `qhost VERB` it is asked for.
        let failing = script(
            bin.path(),
            &format!("qhost-failing-{verb}"),
            &format!(
                "#!/usr/bin/env bash\nfor a in \"$@\"; do [[ $a == {verb} ]] && {{ echo 'forced failure of {verb}' >&2; exit 3; }}; done\nexec '{}' \"$@\"\n",
                real.display()
            ),
        );
        let (ok, out, err) = demo(&[("QHOST_BINARY", failing.into())]);
        assert!(!ok, "{out}");
        assert!(!out.contains("demo OK"), "{out}");
        assert!(
            err.contains("demo FAILED at scripts/demo line"),
            "{verb}: the banner: {err}"
        );
        assert!(err.contains(&format!("forced failure of {verb}")), "{err}");
        if let Some(log) = log {
            assert!(err.contains(log), "{verb}: the host's log shown: {err}");
        }
    }
}
