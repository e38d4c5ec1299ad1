//! `qhost new`: a handler project to start from, in Rust, Python or JavaScript, that builds as
//! it is. Each holds the WIT it is built against (the `handler` world of the `qhost:handler`
//! package this host serves), a handler that logs and acks, a commented manifest, a test file
//! that passes as generated (`qhost test`), and a README with the commands to build it, test
//! it, check it and run it.
//!
//! With `--batch` the handler is a batch handler (`handle-batch`, the `batch-handler` worlds):
//! it gets many messages per call and selects each before making its effects; the manifest
//! gains a commented `[batch]` table.
//!
//! A Rust project carries qhost's Rust SDK as `qhost-guest/` (the crate this repository's own
//! plugins use, written from the binary), so the Rust guide's code builds in it as it is, with
//! state, HTTP and Celery one line away, and nothing to fetch but crates.io's. A Python project
//! carries the SDK's helper modules the same way.
//!
//! The templates are files under `host/templates/` (`batch/` for the batch handlers' code),
//! embedded in the binary, with `{{name}}` (and, for Rust, `{{crate}}` and the SDK's
//! dependencies' versions) filled in.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::message::wire::valid_plugin_name;

/// The languages `qhost new` starts a handler in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    /// Rust, with qhost's SDK (`qhost-guest`, on wit-bindgen), built for `wasm32-wasip2`.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    JavaScript,
}

/// The handler's shape: one message per call, or a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `handle`: one message per call.
    Handler,
    /// `handle-batch`: many messages per call (`qhost new --batch`).
    Batch,
}

impl Shape {
    /// The world a JavaScript project builds against (the WIT it carries has no other
    /// packages), and the one a Python project does (the whole contract). A Rust project's
    /// SDK picks its own.
    fn worlds(self) -> (&'static str, &'static str) {
        match self {
            Shape::Handler => ("handler", "handler-full"),
            Shape::Batch => ("batch-handler", "batch-handler-full"),
        }
    }
}

/// The `[batch]` table a batch handler's manifest holds, its defaults commented out.
const BATCH_TABLE: &str = "# How many messages one call gathers at most (1 to 100), and how long a call waits for more\n\
# after its first message.\n[batch]\n# max-messages = {{max_messages}}\n# max-wait-ms = {{max_wait_ms}}\n\n";

impl std::str::FromStr for Language {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "rust" => Ok(Language::Rust),
            "python" | "py" => Ok(Language::Python),
            "js" | "javascript" => Ok(Language::JavaScript),
            other => Err(format!(
                "`{other}` is not a language qhost new knows: rust, python or js"
            )),
        }
    }
}

/// The WIT package the templates are built against: this host's, with only the `handler`
/// world (`handler-http` would need the WASI packages beside it).
const WIT: &str = include_str!("../../wit/handler.wit");
/// The whole WIT package with the WASI packages it uses, for a Python project.
const WIT_WITH_DEPS: [(&str, &str); 9] = [
    ("wit/handler.wit", WIT),
    ("wit/deps/cli.wit", include_str!("../../wit/deps/cli.wit")),
    (
        "wit/deps/clocks.wit",
        include_str!("../../wit/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../wit/deps/filesystem.wit"),
    ),
    ("wit/deps/http.wit", include_str!("../../wit/deps/http.wit")),
    ("wit/deps/io.wit", include_str!("../../wit/deps/io.wit")),
    (
        "wit/deps/keyvalue.wit",
        include_str!("../../wit/deps/keyvalue.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../wit/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../wit/deps/sockets.wit"),
    ),
];

/// The wit-bindgen a Rust handler generates its bindings with.
const WIT_BINDGEN: &str = "0.61.1";
/// The versions of the Rust SDK's other dependencies, as the workspace pins them.
const WASIP2: &str = "2.0.1";
const SERDE: &str = "1.0";
const SERDE_JSON: &str = "1.0";

/// qhost's Rust SDK, written into a Rust project as `qhost-guest/`: the crate this repository
/// builds its own plugins with, file for file, under a manifest of its own (no workspace).
const RUST_SDK: [(&str, &str); 10] = [
    (
        "qhost-guest/Cargo.toml",
        include_str!("../templates/rust/qhost-guest.toml"),
    ),
    (
        "qhost-guest/src/lib.rs",
        include_str!("../../guest-sdk/src/lib.rs"),
    ),
    (
        "qhost-guest/src/batch.rs",
        include_str!("../../guest-sdk/src/batch.rs"),
    ),
    (
        "qhost-guest/src/celery.rs",
        include_str!("../../guest-sdk/src/celery.rs"),
    ),
    (
        "qhost-guest/src/config.rs",
        include_str!("../../guest-sdk/src/config.rs"),
    ),
    (
        "qhost-guest/src/http.rs",
        include_str!("../../guest-sdk/src/http.rs"),
    ),
    (
        "qhost-guest/src/log.rs",
        include_str!("../../guest-sdk/src/log.rs"),
    ),
    (
        "qhost-guest/src/message.rs",
        include_str!("../../guest-sdk/src/message.rs"),
    ),
    (
        "qhost-guest/src/outbox.rs",
        include_str!("../../guest-sdk/src/outbox.rs"),
    ),
    (
        "qhost-guest/src/state.rs",
        include_str!("../../guest-sdk/src/state.rs"),
    ),
];

/// The handler's code in `language` and `shape`.
fn code(language: Language, shape: Shape) -> &'static str {
    match (language, shape) {
        (Language::Rust, Shape::Handler) => include_str!("../templates/rust/src/lib.rs"),
        (Language::Rust, Shape::Batch) => include_str!("../templates/batch/lib.rs"),
        (Language::Python, Shape::Handler) => include_str!("../templates/python/app.py"),
        (Language::Python, Shape::Batch) => include_str!("../templates/batch/app.py"),
        (Language::JavaScript, Shape::Handler) => include_str!("../templates/js/app.js"),
        (Language::JavaScript, Shape::Batch) => include_str!("../templates/batch/app.js"),
    }
}

/// (path in the project, template) for `language` and `shape`.
fn files(language: Language, shape: Shape) -> Vec<(&'static str, &'static str)> {
    let manifest = include_str!("../templates/manifest.toml");
    let mut files = match language {
        // A Rust project carries the SDK the guide builds on (`qhost_guest`): reachable with
        // no registry and no checkout of this repository, and the version this qhost serves.
        Language::Rust => [
            ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
            ("src/lib.rs", code(language, shape)),
        ]
        .into_iter()
        .chain(RUST_SDK)
        .collect(),
        // A Python project carries the SDK's helpers (HTTP, Celery) and a place for its PyPI
        // packages, so nothing has to be copied out of this repository.
        Language::Python => vec![
            ("app.py", code(language, shape)),
            (
                "requirements.txt",
                include_str!("../templates/python/requirements.txt"),
            ),
            (
                "qhost_http.py",
                include_str!("../../guest-sdk/python/qhost_http.py"),
            ),
            (
                "qhost_celery.py",
                include_str!("../../guest-sdk/python/qhost_celery.py"),
            ),
        ],
        Language::JavaScript => vec![
            ("app.js", code(language, shape)),
            ("package.json", include_str!("../templates/js/package.json")),
        ],
    };
    if (language, shape) == (Language::Python, Shape::Batch) {
        files.push((
            "qhost_batch.py",
            include_str!("../../guest-sdk/python/qhost_batch.py"),
        ));
    }
    files.push(("{{name}}.toml", manifest));
    files.push((
        "{{name}}.test.toml",
        include_str!("../templates/handler.test.toml"),
    ));
    files.push((".gitignore", ignored(language)));
    files
}

/// What a project's `.gitignore` keeps out of version control: what its build and the commands
/// run in it make (the component, the toolchain's packages, qhost's data directory).
fn ignored(language: Language) -> &'static str {
    match language {
        Language::Rust => "/target/\n/.qhost/\n",
        Language::Python => "/.venv/\n/deps/\n__pycache__/\n/{{name}}.wasm\n/.qhost/\n",
        Language::JavaScript => "/node_modules/\n/{{name}}.wasm\n/.qhost/\n",
    }
}

/// How to build the handler, and where the component lands.
fn build(language: Language) -> (&'static str, &'static str) {
    match language {
        Language::Rust => (
            "rustup target add wasm32-wasip2   # once\ncargo build --release --target wasm32-wasip2",
            "target/wasm32-wasip2/release/{{crate}}.wasm",
        ),
        Language::Python => (
            "python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1   # once\n\
             .venv/bin/pip install --target deps -r requirements.txt   # its PyPI packages\n\
             .venv/bin/componentize-py -d wit -w {{world}} componentize -p . -p deps app -o {{name}}.wasm",
            "{{name}}.wasm",
        ),
        Language::JavaScript => (
            "npm install   # once: componentize-js, pinned in package.json\nnpm run build",
            "{{name}}.wasm",
        ),
    }
}

/// The README: build, install, check, try.
fn readme(language: Language, shape: Shape) -> String {
    let (build, built) = build(language);
    let batch = match shape {
        Shape::Handler => "",
        Shape::Batch => {
            "\nIt is a batch handler: qhost gathers messages for it (`[batch]` in its manifest) and\n\
             calls it with many at once; it answers one outcome per message, in order, and selects\n\
             each message before making its effects, so each commits with its own message alone.\n\
             `qhost invoke plugins/{{name}}.wasm --batch messages.jsonl` runs one call on a body per\n\
             line.\n"
        }
    };
    let text = format!(
        "# {{{{name}}}}\n\n\
         A qhost handler. `qhost new` made it; it builds as it is.\n\n\
         Build the component:\n\n```sh\n{build}\n```\n\n\
         Install it where qhost runs (the plugins directory, `plugins/` by default), check it\n\
         loads, and try it on the embedded queue:\n\n```sh\n\
         mkdir -p ../plugins\n\
         cp {built} ../plugins/{{{{name}}}}.wasm && cp {{{{name}}}}.toml ../plugins/\n\
         cd .. && printf '[[queue]]\\nname = \"{{{{name}}}}\"\\nplugin = \"{{{{name}}}}\"\\n' > qhost.toml\n\
         qhost check\n\
         qhost send --queue {{{{name}}}} --body hello\n\
         qhost run --until-idle\n```\n\n\
         Test it: `{{{{name}}}}.test.toml` holds its cases (a message, and what must come of it);\n\
         `qhost test` runs them against the component the build wrote, and exits non-zero when\n\
         a case fails:\n\n```sh\nqhost test {{{{name}}}}.test.toml\n```\n\n\
         `qhost invoke plugins/{{{{name}}}}.wasm --body hello` runs one message through it with no\n\
         queue. `wit/handler.wit` is the contract: what a message holds, and what a handler may\n\
         answer (ack, retry, reject) and call (log, config, outbox). `{{{{name}}}}.toml` is its\n\
         manifest: the idempotency key qhost leases on, limits, and what it may send to.\n"
    );
    let sdk = match language {
        Language::Rust => {
            "\n`qhost-guest/` is qhost's Rust SDK, as this qhost serves it (qhost's `docs/handlers-rust.md`\n\
             walks through each part). What a handler may use beyond log, config and the outbox is\n\
             a line of code and a line of its manifest away: state, `qhost_guest::state::Bucket::open(\"counts\")`\n\
             with `keyvalue = [\"counts\"]` under `[capabilities]`; an API, `qhost_guest::http::Request`\n\
             with `http = [\"https://api.example.com\"]`; a Celery queue's tasks,\n\
             `features = [\"celery\"]` on `qhost-guest` in `Cargo.toml`.\n"
        }
        _ => "",
    };
    format!("{text}{batch}{sdk}")
}

/// The WIT without the worlds that need other packages (and their doc comments).
fn wit() -> String {
    let mut kept: Vec<&str> = Vec::new();
    let mut block: Vec<&str> = Vec::new();
    let mut in_world = false;
    for line in WIT.lines() {
        let top = !line.starts_with(' ') && !line.is_empty();
        if top && line.starts_with("world ") {
            in_world = true;
        }
        block.push(line);
        // A block is a top-level item with the doc comment above it, ended by its `}`.
        if (top && !line.starts_with("///") && !in_world) || (in_world && line == "}") {
            if !block.iter().any(|l| l.contains("wasi:")) {
                kept.append(&mut block);
            }
            block.clear();
            in_world = false;
        } else if line.is_empty() && !in_world {
            kept.append(&mut block);
        }
    }
    kept.append(&mut block);
    let mut text = kept.join("\n");
    while text.contains("\n\n\n") {
        text = text.replace("\n\n\n", "\n\n");
    }
    format!("{}\n", text.trim_end())
}

fn fill(template: &str, name: &str, language: Language, shape: Shape) -> String {
    // The manifest's commented defaults are the host's own, whatever they become.
    let defaults = crate::plugin::manifest::Manifest::default();
    let limits = &defaults.limits;
    let batch = crate::plugin::manifest::BatchShape::default();
    let (world, full) = shape.worlds();
    let batch_table = match shape {
        Shape::Handler => String::new(),
        Shape::Batch => BATCH_TABLE
            .replace("{{max_messages}}", &batch.max_messages.to_string())
            .replace("{{max_wait_ms}}", &batch.max_wait_ms.to_string()),
    };
    template
        .replace("{{batch}}", &batch_table)
        .replace(
            "{{world}}",
            if language == Language::Python {
                full
            } else {
                world
            },
        )
        .replace(
            "{{dedup_window_secs}}",
            &grouped(defaults.idempotency.dedup_window_secs),
        )
        .replace("{{timeout_ms}}", &grouped(limits.timeout_ms))
        .replace("{{memory_mib}}", &grouped(limits.memory_mib))
        .replace("{{max_attempts}}", &grouped(u64::from(limits.max_attempts)))
        .replace("{{built}}", build(language).1)
        .replace("{{name}}", name)
        .replace("{{crate}}", &name.replace('-', "_"))
        .replace("{{wit_bindgen}}", WIT_BINDGEN)
        .replace("{{wasip2}}", WASIP2)
        .replace("{{serde}}", SERDE)
        .replace("{{serde_json}}", SERDE_JSON)
        .replace("{{sdk_version}}", env!("CARGO_PKG_VERSION"))
}

/// `n` as TOML writes it for a reader: `86_400`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// Writes a new `language` handler named `name` into `dir` (which must not exist, or be
/// empty); returns the files written.
pub fn create(
    language: Language,
    shape: Shape,
    name: &str,
    dir: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    if !valid_plugin_name(name) {
        bail!("`{name}` cannot be a plugin name: 1 to 64 letters, digits, `-` and `_`");
    }
    let occupied = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
    if occupied {
        bail!(
            "{} exists and is not empty: name another with --dir",
            dir.display()
        );
    }
    let readme = readme(language, shape);
    let wit = wit();
    let mut all = files(language, shape);
    all.push(("README.md", &readme));
    match language {
        // componentize-py builds its bindings from one world: the whole contract, so the
        // helpers' imports (wasi:http, wasi:keyvalue) are there when a handler uses them.
        // The Rust SDK's bindings need the same (state through wasi:keyvalue).
        Language::Python | Language::Rust => all.extend(WIT_WITH_DEPS),
        Language::JavaScript => all.push(("wit/handler.wit", &wit)),
    }
    let mut written = Vec::new();
    for (path, template) in all {
        let path = dir.join(fill(path, name, language, shape));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, fill(template, name, language, shape))
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest says its commented values are the defaults: uncommented, they are.
    #[test]
    fn the_manifest_s_commented_defaults_are_the_host_s() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("hello");
        create(Language::Python, Shape::Handler, "hello", &at).unwrap();
        let text = std::fs::read_to_string(at.join("hello.toml")).unwrap();
        let uncommented: String = (text.lines())
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") && !rest.starts_with("queues") => rest,
                _ => l,
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(uncommented.contains("timeout-ms = 10_000"), "{uncommented}");
        let written = crate::plugin::manifest::Manifest::parse(&uncommented).unwrap();
        let defaults = crate::plugin::manifest::Manifest::default();
        assert_eq!(written.limits, defaults.limits);
        assert_eq!(written.idempotency, defaults.idempotency);
        assert_eq!(grouped(86_400), "86_400");
        assert_eq!(grouped(5), "5");
        assert_eq!(grouped(1_000_000), "1_000_000");
    }

    /// A Python project carries what its handler may need: the SDK's helpers, a place for
    /// PyPI packages, and the whole WIT with the WASI packages the helpers import.
    #[test]
    fn a_python_project_carries_its_helpers_and_the_whole_contract() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("hello");
        create(Language::Python, Shape::Handler, "hello", &at).unwrap();
        for file in [
            "qhost_http.py",
            "qhost_celery.py",
            "requirements.txt",
            "wit/deps/http.wit",
        ] {
            assert!(at.join(file).is_file(), "{file}");
        }
        let wit = std::fs::read_to_string(at.join("wit/handler.wit")).unwrap();
        assert!(wit.contains("world handler-full"), "{wit}");
        let readme = std::fs::read_to_string(at.join("README.md")).unwrap();
        assert!(
            readme.contains("-w handler-full componentize -p . -p deps app -o hello.wasm"),
            "{readme}"
        );
    }

    /// A batch project: the batch code, the batch worlds, a `[batch]` table that parses.
    #[test]
    fn a_batch_project_builds_against_the_batch_world_and_says_how_to_try_it() {
        let dir = tempfile::tempdir().unwrap();
        for language in [Language::Rust, Language::Python, Language::JavaScript] {
            let at = dir.path().join(format!("{language:?}"));
            create(language, Shape::Batch, "tally", &at).unwrap();
            let manifest = std::fs::read_to_string(at.join("tally.toml")).unwrap();
            assert!(
                manifest.contains("[batch]\n# max-messages = 10\n"),
                "{manifest}"
            );
            let uncommented = manifest.replace("# max-", "max-");
            let parsed = crate::plugin::manifest::Manifest::parse(&uncommented).unwrap();
            assert_eq!(parsed.batch, Some(Default::default()));
            let readme = std::fs::read_to_string(at.join("README.md")).unwrap();
            assert!(readme.contains("--batch messages.jsonl"), "{readme}");
            let wit = std::fs::read_to_string(at.join("wit/handler.wit")).unwrap();
            assert!(wit.contains("world batch-handler {"), "{wit}");
        }
        let rust = std::fs::read_to_string(dir.path().join("Rust/src/lib.rs")).unwrap();
        assert!(rust.contains("export_batch!(App)") && rust.contains("batch::each"));
        let python = dir.path().join("Python");
        assert!(python.join("qhost_batch.py").is_file());
        let readme = std::fs::read_to_string(python.join("README.md")).unwrap();
        assert!(
            readme.contains("-w batch-handler-full componentize"),
            "{readme}"
        );
        let js = std::fs::read_to_string(dir.path().join("JavaScript/package.json")).unwrap();
        assert!(js.contains("-n batch-handler -d http"), "{js}");
        let plain = dir.path().join("plain");
        create(Language::JavaScript, Shape::Handler, "plain", &plain).unwrap();
        let wit = std::fs::read_to_string(plain.join("wit/handler.wit")).unwrap();
        assert!(
            !wit.contains("wasi:") && wit.contains("world handler {"),
            "{wit}"
        );
        assert!(
            wit.contains("interface batch-item") && wit.ends_with("}\n"),
            "{wit}"
        );
        let manifest = std::fs::read_to_string(plain.join("plain.toml")).unwrap();
        assert!(!manifest.contains("[batch]"), "{manifest}");
    }

    #[test]
    fn a_rust_project_holds_the_handler_its_manifest_the_sdk_and_the_whole_contract() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path().join("hello-rs");
        let written = create(Language::Rust, Shape::Handler, "hello-rs", &at).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.strip_prefix(&at).unwrap().display().to_string())
            .collect();
        let sdk: Vec<String> = RUST_SDK.iter().map(|(p, _)| p.to_string()).collect();
        let expected: Vec<String> = ["Cargo.toml", "src/lib.rs"]
            .into_iter()
            .map(String::from)
            .chain(sdk)
            .chain(
                [
                    "hello-rs.toml",
                    "hello-rs.test.toml",
                    ".gitignore",
                    "README.md",
                ]
                .map(String::from),
            )
            .chain(WIT_WITH_DEPS.iter().map(|(p, _)| p.to_string()))
            .collect();
        assert_eq!(names, expected);
        let cargo = std::fs::read_to_string(at.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains("name = \"hello-rs\"")
                && cargo.contains("qhost-guest = { path = \"qhost-guest\" }"),
            "{cargo}"
        );
        let sdk = std::fs::read_to_string(at.join("qhost-guest/Cargo.toml")).unwrap();
        assert!(
            sdk.contains(&format!("wit-bindgen = {{ version = \"{WIT_BINDGEN}\""))
                && sdk.contains(&format!("version = \"{}\"", env!("CARGO_PKG_VERSION")))
                && !sdk.contains("{{"),
            "{sdk}"
        );
        let lib = std::fs::read_to_string(at.join("qhost-guest/src/lib.rs")).unwrap();
        assert_eq!(
            lib,
            include_str!("../../guest-sdk/src/lib.rs"),
            "the SDK as it is"
        );
        let readme = std::fs::read_to_string(at.join("README.md")).unwrap();
        assert!(
            readme.contains("target/wasm32-wasip2/release/hello_rs.wasm")
                && readme.contains("qhost_guest::state::Bucket::open"),
            "{readme}"
        );
        let wit = std::fs::read_to_string(at.join("wit/handler.wit")).unwrap();
        assert!(
            wit.contains("world handler-state {"),
            "the SDK's worlds: {wit}"
        );
        assert!(
            !std::fs::read_to_string(at.join("src/lib.rs"))
                .unwrap()
                .contains("{{")
        );

        let again = create(Language::Python, Shape::Handler, "other", &at)
            .unwrap_err()
            .to_string();
        assert!(again.contains("exists and is not empty"), "{again}");
        let workspace = include_str!("../../Cargo.toml");
        for (name, version) in [
            ("wit-bindgen", WIT_BINDGEN),
            ("wasip2", WASIP2),
            ("serde", SERDE),
        ] {
            assert!(
                workspace.contains(&format!("\n{name} = {{ version = \"{version}\"")),
                "the SDK's {name} is the workspace's"
            );
        }
        assert!(workspace.contains(&format!("\nserde_json = \"{SERDE_JSON}\"")));
        let sdk = include_str!("../../guest-sdk/Cargo.toml");
        let deps = ["serde", "serde_json", "wasip2", "wit-bindgen"];
        let listed = (sdk.lines())
            .filter_map(|l| l.split([' ', '.']).next())
            .filter(|name| deps.contains(name))
            .count();
        assert_eq!(
            listed,
            deps.len(),
            "the SDK depends on these and no others: {sdk}"
        );
        let bad = create(
            Language::Python,
            Shape::Handler,
            "no/slash",
            &dir.path().join("x"),
        )
        .unwrap_err();
        assert!(bad.to_string().contains("cannot be a plugin name"), "{bad}");
        assert_eq!("js".parse(), Ok(Language::JavaScript));
        assert!(
            "go".parse::<Language>()
                .unwrap_err()
                .contains("rust, python or js")
        );
    }
}
