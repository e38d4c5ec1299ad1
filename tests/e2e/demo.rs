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
