//! `qhost new`: a project in each language, a handler and a batch handler (`--batch`), builds
//! as it is, with the command its README gives, its test file passes (`qhost test`), and the
//! component passes `qhost check` and handles messages on the embedded queue.

use std::path::{Path, PathBuf};
use std::process::Command;

use qhost_e2e::processes::{qhost_binary, summary_column};

/// (language, name, whether it is a batch handler).
const LANGUAGES: [(&str, &str, bool); 6] = [
    ("rust", "hello-rs", false),
    ("python", "hello-py", false),
    ("js", "hello-js", false),
    ("rust", "tally-rs", true),
    ("python", "tally-py", true),
    ("js", "tally-js", true),
];

fn qhost(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(qhost_binary())
        .current_dir(dir)
        .args(args)
        .env_remove("QHOST_CONFIG")
        .envs(qhost_e2e::processes::qhost_env())
        .output()
        .expect("running qhost");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Builds the project in `dir` with the command its README gives (the toolchains are the
/// pinned ones the guest plugins are built with); returns the component's path.
fn build(language: &str, name: &str, batch: bool, dir: &Path) -> PathBuf {
    let root = qhost_e2e::workspace();
    let world = if batch { "batch-handler" } else { "handler" };
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
            format!("-d wit -w {world}-full componentize -p . -p deps app -o {name}.wasm")
                .split(' ')
                .map(String::from)
                .collect(),
            dir.join(format!("{name}.wasm")),
        ),
        _ => (
            root.join("plugins/email-reminder-js/node_modules/.bin/componentize-js"),
            format!("app.js --wit wit -n {world} -d http fetch-event -o {name}.wasm")
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
    // Offline, like every test: the crates a Rust project needs are in cargo's cache. The
    // projects share one build directory (cargo's intermediate artefacts, not the component it
    // writes in the project), so the second compiles wit-bindgen no more. A target directory
    // set for the workspace's own build is not the project's: its README's path is under its
    // own target/.
    let out = Command::new(&program)
        .current_dir(dir)
        .args(&args)
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_BUILD_BUILD_DIR", root.join("target/new-projects"))
        .env_remove("CARGO_TARGET_DIR")
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

/// What `git add --all` would add in `project`, built and tested: the files a user commits.
fn would_commit(project: &Path) -> Vec<String> {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .current_dir(project)
            .args(args)
            .output()
            .expect("running git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "--quiet"]);
    let added = git(&["add", "--all", "--dry-run"]);
    std::fs::remove_dir_all(project.join(".git")).expect("removing .git");
    (added.lines())
        .filter_map(|l| l.strip_prefix("add '")?.strip_suffix('\''))
        .map(String::from)
        .collect()
}

#[test]
fn a_new_project_in_each_language_builds_as_it_is_and_passes_check() {
    // Installs the pinned componentize-py and componentize-js, if missing.
    qhost_e2e::built_guests();
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (language, name, batch) in LANGUAGES {
        let new = ["new", language, name, "--batch"];
        let (ok, out, err) = qhost(dir.path(), &new[..if batch { 4 } else { 3 }]);
        assert!(ok, "{err}");
        assert!(out.contains(&format!("created {name}/README.md")), "{out}");
    }
    let built: Vec<PathBuf> = std::thread::scope(|s| {
        let builds: Vec<_> = (LANGUAGES.iter())
            .map(|&(language, name, batch)| {
                let project = dir.path().join(name);
                s.spawn(move || build(language, name, batch, &project))
            })
            .collect();
        builds
            .into_iter()
            .map(|b| b.join().expect("a build"))
            .collect()
    });

    // Each project's own test file passes as generated, with the command its README gives.
    for (language, name, _) in LANGUAGES {
        let project = dir.path().join(name);
        let command = format!("qhost test {name}.test.toml");
        let readme = std::fs::read_to_string(project.join("README.md")).expect("its README");
        assert!(readme.contains(&command), "{language}: {readme}");
        let (ok, out, err) = qhost(&project, &["test", &format!("{name}.test.toml")]);
        assert!(ok, "{language}: {out}{err}");
        assert!(out.ends_with("\n1 passed, 0 failed\n"), "{language}: {out}");
        let committed = would_commit(&project);
        let made = |p: &&String| {
            p.ends_with(".wasm")
                || [".qhost/", "target/", ".venv/", "deps/", "node_modules/"]
                    .iter()
                    .any(|d| p.starts_with(d))
        };
        let made: Vec<&String> = committed.iter().filter(made).collect();
        assert!(
            made.is_empty(),
            "{language}: the build's output is ignored: {made:?}"
        );
        assert!(
            committed.contains(&".gitignore".to_string()),
            "{committed:?}"
        );
    }

    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins/");
    let mut config = String::new();
    for ((_, name, _), wasm) in LANGUAGES.iter().zip(&built) {
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
    for (_, name, _) in LANGUAGES {
        assert!(
            out.contains(&format!("queue {name}: plugin {name} loads")),
            "{out}"
        );
        let (ok, _, err) = qhost(dir.path(), &["send", "--queue", name, "--body", "hello"]);
        assert!(ok, "{err}");
        let (ok, _, err) = qhost(dir.path(), &["send", "--queue", name, "--body", "again"]);
        assert!(ok, "{err}");
    }
    let (ok, summary, err) = qhost(
        dir.path(),
        &["run", "--until-idle", "--fail-on-dead-letter"],
    );
    assert!(ok, "{err}");
    for (_, name, batch) in LANGUAGES {
        assert_eq!(summary_column(&summary, name, "acked"), 2, "{summary}");
        assert!(err.contains(&format!("{name} handled `hello`")), "{err}");
        if batch {
            // A batch handler runs one call on a file's lines, as its README says.
            let readme = std::fs::read_to_string(dir.path().join(name).join("README.md"))
                .expect("its README");
            assert!(readme.contains("--batch messages.jsonl"), "{readme}");
            let lines = dir.path().join("messages.jsonl");
            std::fs::write(&lines, "one\ntwo\nthree\n").expect("messages.jsonl");
            let wasm = format!("plugins/{name}.wasm");
            let (ok, out, err) = qhost(
                dir.path(),
                &["-v", "invoke", &wasm, "--batch", "messages.jsonl"],
            );
            assert!(ok, "{out}{err}");
            assert!(out.contains("batch:    3 message(s) in one call"), "{out}");
            assert_eq!(out.matches("outcome:  ack").count(), 3, "{out}");
            assert!(err.contains(&format!("{name} got 3 messages")), "{err}");
        }
    }
}
