//! `qhost new`: a project in each language builds as it is, with the command its README gives,
//! its test file passes (`qhost test`), and the component passes `qhost check` and handles a
//! message on the embedded queue.

use std::path::{Path, PathBuf};
use std::process::Command;

use qhost_e2e::processes::{qhost_binary, summary_column};

const LANGUAGES: [(&str, &str); 3] = [
    ("rust", "hello-rs"),
    ("python", "hello-py"),
    ("js", "hello-js"),
];

fn qhost(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(qhost_binary())
        .current_dir(dir)
        .args(args)
        .env_remove("QHOST_CONFIG")
        .envs(qhost_e2e::processes::ADMIN_ENV)
        .output()
        .expect("running qhost");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Builds the project in `dir` with the command its README gives (the toolchains are the
/// pinned ones the guest plugins are built with); returns the component's path.
fn build(language: &str, name: &str, dir: &Path) -> PathBuf {
    let root = qhost_e2e::workspace();
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("its README");
    let (program, args, built): (PathBuf, Vec<String>, PathBuf) = match language {
        "rust" => (
            "cargo".into(),
            ["build", "--release", "--target", "wasm32-wasip2"]
                .map(String::from)
                .to_vec(),
            dir.join(format!(
                "target/wasm32-wasip2/release/{}.wasm",
                name.replace('-', "_")
            )),
        ),
        "python" => (
            root.join("target/tools/componentize-py/bin/componentize-py"),
            format!("-d wit -w handler-full componentize -p . -p deps app -o {name}.wasm")
                .split(' ')
                .map(String::from)
                .collect(),
            dir.join(format!("{name}.wasm")),
        ),
        _ => (
            root.join("plugins/email-reminder-js/node_modules/.bin/componentize-js"),
            format!("app.js --wit wit -n handler -d http fetch-event -o {name}.wasm")
                .split(' ')
                .map(String::from)
                .collect(),
            dir.join(format!("{name}.wasm")),
        ),
    };
    let said = match language {
        "js" => std::fs::read_to_string(dir.join("package.json")).expect("package.json"),
        _ => readme,
    };
    assert!(
        said.contains(&args.join(" ")),
        "the documented command: {said}"
    );
    if language == "python" {
        // Its PyPI packages (none yet), installed as the README says.
        let pip = ".venv/bin/pip install --target deps -r requirements.txt";
        assert!(said.contains(pip), "{said}");
        let venv_pip = root.join("target/tools/componentize-py/bin/pip");
        let out = Command::new(venv_pip)
            .current_dir(dir)
            .args(["install", "--target", "deps", "-r", "requirements.txt"])
            .env("PIP_NO_INDEX", "1")
            .output()
            .expect("pip");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Offline, like every test: the crates a Rust project needs are in cargo's cache.
    let out = Command::new(&program)
        .current_dir(dir)
        .args(&args)
        .env("CARGO_NET_OFFLINE", "true")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        out.status.success(),
        "building {name}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    built
}

#[test]
fn a_new_project_in_each_language_builds_as_it_is_and_passes_check() {
    // Installs the pinned componentize-py and componentize-js, if missing.
    qhost_e2e::built_guests();
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (language, name) in LANGUAGES {
        let (ok, out, err) = qhost(dir.path(), &["new", language, name]);
        assert!(ok, "{err}");
        assert!(out.contains(&format!("created {name}/README.md")), "{out}");
    }
    let built: Vec<PathBuf> = std::thread::scope(|s| {
        let builds: Vec<_> = (LANGUAGES.iter())
            .map(|&(language, name)| {
                let project = dir.path().join(name);
                s.spawn(move || build(language, name, &project))
            })
            .collect();
        builds
            .into_iter()
            .map(|b| b.join().expect("a build"))
            .collect()
    });

    // Each project's own test file passes as generated, with the command its README gives.
    for (language, name) in LANGUAGES {
        let project = dir.path().join(name);
        let command = format!("qhost test {name}.test.toml");
        let readme = std::fs::read_to_string(project.join("README.md")).expect("its README");
        assert!(readme.contains(&command), "{language}: {readme}");
        let (ok, out, err) = qhost(&project, &["test", &format!("{name}.test.toml")]);
        assert!(ok, "{language}: {out}{err}");
        assert!(out.ends_with("\n1 passed, 0 failed\n"), "{language}: {out}");
    }

    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins/");
    let mut config = String::new();
    for ((_, name), wasm) in LANGUAGES.iter().zip(&built) {
        std::fs::copy(wasm, plugins.join(format!("{name}.wasm"))).expect("installing it");
        let manifest = dir.path().join(name).join(format!("{name}.toml"));
        std::fs::copy(manifest, plugins.join(format!("{name}.toml"))).expect("its manifest");
        config.push_str(&format!(
            "[[queue]]\nname = \"{name}\"\nplugin = \"{name}\"\n"
        ));
    }
    std::fs::write(dir.path().join("qhost.toml"), config).expect("qhost.toml");
    let (ok, out, err) = qhost(dir.path(), &["check"]);
    assert!(ok, "{out}{err}");
    for (_, name) in LANGUAGES {
        assert!(
            out.contains(&format!("queue {name}: plugin {name} loads")),
            "{out}"
        );
        let (ok, _, err) = qhost(dir.path(), &["send", "--queue", name, "--body", "hello"]);
        assert!(ok, "{err}");
    }
    let (ok, summary, err) = qhost(
        dir.path(),
        &["run", "--until-idle", "--fail-on-dead-letter"],
    );
    assert!(ok, "{err}");
    for (_, name) in LANGUAGES {
        assert_eq!(summary_column(&summary, name, "acked"), 1, "{summary}");
        assert!(err.contains(&format!("{name} handled `hello`")), "{err}");
    }
}
