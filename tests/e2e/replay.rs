//! `qhost replay`: two versions of a plugin (the fixture under two manifests, the new file's
//! bytes changed so it is another version) on recorded messages. The table and the exit code
//! say where they agree and where they differ in outcome, outbox and HTTP; HTTP requests are
//! recorded, never sent (a loopback server the grant names counts zero); a broken line is named
//! and the rest replayed. Dead letters read with `dlq peek --jsonl` replay as they are.

use std::path::{Path, PathBuf};

use qhost_e2e::api_server::ApiServer;
use qhost_e2e::processes::run_in;

/// `bytes` as another version: the same component under another content hash.
fn another_version(bytes: Vec<u8>) -> Vec<u8> {
    qhost_e2e::deploy::build_variant(&bytes, "new")
}

/// Installs the fixture as `greeter` in `dir/SUB` with `manifest`; returns the .wasm's path.
fn install(dir: &Path, sub: &str, bytes: &[u8], manifest: &str) -> PathBuf {
    let plugins = dir.join(sub);
    std::fs::create_dir_all(&plugins).expect("a plugins directory");
    let wasm = plugins.join("greeter.wasm");
    std::fs::write(&wasm, bytes).expect("the plugin");
    std::fs::write(plugins.join("greeter.toml"), manifest).expect("its manifest");
    wasm
}

fn line(id: &str, body: &str) -> String {
    serde_json::json!({ "id": id, "queue": "greetings", "body": body }).to_string()
}

#[test]
fn two_versions_on_recorded_messages_agree_and_differ_as_the_table_and_exit_code_say() {
    let api = ApiServer::start();
    let dir = tempfile::tempdir().unwrap();
    let grant = format!(
        "[capabilities]\nhttp = [\"http://{}\"]\n[outbox]\nqueues = [\"out\"]\n",
        api.addr()
    );
    let fixture = qhost_e2e::plugin_bytes("fixture");
    let old = install(
        dir.path(),
        "old",
        &fixture,
        &format!("{grant}[config]\nmode = \"old\"\n"),
    );
    let new = install(
        dir.path(),
        "new",
        &another_version(fixture),
        &format!("{grant}[config]\nmode = \"new\"\nstrict = \"on\"\n"),
    );
    let hook = api.url("/hook");
    let extra = api.url("/extra");
    let agree = [
        line("m-ack", "ack"),
        line("m-post", &format!("post:{hook}")),
    ];
    let outcome = line("m-strict", "if-config:strict:reject:too strict now");
    let outbox = line("m-mode", "send-config:mode:out");
    let http = line("m-extra", &format!("if-config:strict:get:out:{extra}"));
    let file = |name: &str, lines: &[&str]| {
        let path = dir.path().join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.display().to_string()
    };
    let all = file(
        "all.jsonl",
        &[
            &agree[0],
            &agree[1],
            &outcome,
            &outbox,
            &http,
            "{not a message",
        ],
    );
    let replay = |messages: &str| {
        run_in(
            dir.path(),
            &[
                "replay",
                "--plugin",
                new.to_str().unwrap(),
                "--against",
                old.to_str().unwrap(),
                "--messages",
                messages,
            ],
        )
    };

    let (code, out, err) = replay(&all);
    assert_eq!(code, Some(3), "an outcome differs: {out}{err}");
    let row = |id: &str| {
        (out.lines())
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("no row for {id}: {out}"))
            .to_string()
    };
    assert!(row("m-ack").contains("ack") && row("m-ack").ends_with("same      same"));
    let post = row("m-post");
    assert!(
        post.ends_with("same      same"),
        "both POST the same: {post}"
    );
    let strict = row("m-strict");
    assert!(strict.starts_with("   3*"), "{strict}");
    assert!(
        out.contains("outcome old: ack\n") && out.contains("outcome new: reject: too strict now\n"),
        "{out}"
    );
    assert!(row("m-mode").contains("DIFFERS   same"), "{out}");
    assert!(
        out.contains("outbox old: out <- old") && out.contains("outbox new: out <- new"),
        "{out}"
    );
    assert!(row("m-extra").ends_with("DIFFERS   DIFFERS"), "{out}");
    assert!(
        out.contains(&format!("http new:   GET {extra} (0 bytes")),
        "the request the new version would make: {out}"
    );
    assert!(
        out.contains(
            "5 message(s) replayed: outcomes differ on 1, outboxes on 2, HTTP requests on 1; 1 line(s) unreadable"
        ),
        "{out}"
    );
    assert!(
        out.contains("cost old: ") && out.contains("cost new: "),
        "{out}"
    );
    assert!(
        err.contains("line 6: not a message") && err.contains("the rest were replayed"),
        "{err}"
    );

    let (code, out, err) = replay(&file("agree.jsonl", &[&agree[0], &agree[1]]));
    assert_eq!(code, Some(0), "all agree: {out}{err}");
    let (code, out, err) = replay(&file("effects.jsonl", &[&agree[0], &outbox, &http]));
    assert_eq!(code, Some(4), "only effects differ: {out}{err}");
    let (code, out, err) = replay(&file("broken.jsonl", &[&agree[0], "[1, 2]"]));
    assert_eq!(code, Some(5), "only a line unreadable: {out}{err}");
    assert!(err.contains("line 2: not a message"), "{err}");

    let serving = |name: &str| {
        run_in(
            dir.path(),
            &[
                "--plugins-dir",
                "old",
                "replay",
                "--plugin",
                new.to_str().unwrap(),
                "--serving",
                name,
                "--messages",
                &all,
            ],
        )
    };
    let (code, out, err) = serving("greeter");
    assert_eq!(code, Some(3), "against the plugins directory's: {out}{err}");
    let (code, _, err) = serving("../old/greeter");
    assert_eq!(code, Some(1));
    assert!(err.contains("--serving takes a plugin name"), "{err}");

    assert!(
        api.requests().is_empty() && api.connections() == 0,
        "a replay sends nothing: {:?}",
        api.requests()
    );
}

#[test]
fn dead_letters_peeked_as_json_lines_replay_through_a_fixed_version() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = qhost_e2e::plugin_bytes("fixture");
    let strict = "[config]\nstrict = \"on\"\n";
    install(dir.path(), "plugins", &fixture, strict);
    let fixed = install(dir.path(), "fixed", &another_version(fixture), "");
    std::fs::write(
        dir.path().join("qhost.toml"),
        "[[queue]]\nname = \"greetings\"\nplugin = \"greeter\"\n",
    )
    .unwrap();
    for body in [
        "if-config:strict:reject:refused by the strict version",
        "ack",
    ] {
        let (code, out, err) = run_in(
            dir.path(),
            &[
                "send",
                "--queue",
                "greetings",
                "--body",
                body,
                "--attr",
                "tenant=acme",
            ],
        );
        assert_eq!(code, Some(0), "{out}{err}");
    }
    let (code, out, err) = run_in(dir.path(), &["run", "--until-idle"]);
    assert_eq!(code, Some(0), "{out}{err}");

    let (code, jsonl, err) = run_in(
        dir.path(),
        &["dlq", "peek", "--queue", "greetings-dlq", "--jsonl"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("1 dead letter(s) written"), "{err}");
    let lines: Vec<serde_json::Value> = (jsonl.lines())
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 1, "{jsonl}");
    let letter = &lines[0];
    assert_eq!(letter["queue"], "greetings", "its source queue: {letter}");
    assert_eq!(
        letter["body"],
        "if-config:strict:reject:refused by the strict version"
    );
    assert_eq!(
        letter["attributes"],
        serde_json::json!([{ "name": "tenant", "value": { "string": "acme" } }]),
        "its own attributes, without the verdict: {letter}"
    );
    let file = dir.path().join("dead.jsonl");
    std::fs::write(&file, &jsonl).unwrap();
    let (code, out, err) = run_in(
        dir.path(),
        &[
            "replay",
            "--plugin",
            fixed.to_str().unwrap(),
            "--serving",
            "greeter",
            "--messages",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(
        code,
        Some(3),
        "the fix acks what was dead-lettered: {out}{err}"
    );
    assert!(
        out.contains("outcome old: reject: refused by the strict version\n")
            && out.contains("outcome new: ack\n"),
        "{out}"
    );
}

/// A directory holding the fixture as `greeter` and a configuration consuming `greetings` with
/// it, every second message captured.
fn capturing_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    install(
        dir.path(),
        "plugins",
        &qhost_e2e::plugin_bytes("fixture"),
        "",
    );
    std::fs::write(
        dir.path().join("qhost.toml"),
        "[[queue]]\nname = \"greetings\"\nplugin = \"greeter\"\n[queue.capture]\nevery = 2\n",
    )
    .expect("qhost.toml");
    dir
}

fn send_all(dir: &Path, bodies: &[String]) {
    for body in bodies {
        let (code, out, err) = run_in(dir, &["send", "--queue", "greetings", "--body", body]);
        assert_eq!(code, Some(0), "{out}{err}");
    }
}

#[test]
fn a_capture_samples_what_the_handler_was_given_and_replays_as_it_is() {
    let dir = capturing_dir();
    let bodies: Vec<String> = (0..6).map(|i| format!("log:message {i}")).collect();
    send_all(dir.path(), &bodies);
    let (code, out, err) = run_in(dir.path(), &["run", "--until-idle"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let file = dir.path().join(".qhost/capture/greetings.jsonl");
    let text = std::fs::read_to_string(&file).expect("the capture");
    let records: Vec<serde_json::Value> = (text.lines())
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(records.len(), 3, "every second of six: {text}");
    for record in &records {
        assert_eq!(record["queue"], "greetings");
        let id = record["id"].as_str().expect("an id");
        assert_eq!(
            record["key"], id,
            "keyed by message id, as the host leased it"
        );
        assert!(
            record["body"]
                .as_str()
                .is_some_and(|b| b.starts_with("log:message "))
        );
    }
    let wasm = dir.path().join("plugins/greeter.wasm");
    let (code, out, err) = run_in(
        dir.path(),
        &[
            "replay",
            "--plugin",
            wasm.to_str().unwrap(),
            "--serving",
            "greeter",
            "--messages",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "a version agrees with itself: {out}{err}");
    assert!(
        out.contains("3 message(s) replayed: outcomes differ on 0"),
        "{out}"
    );
}

#[test]
fn a_capture_that_cannot_be_written_warns_once_and_the_host_serves_on() {
    let dir = capturing_dir();
    std::fs::create_dir_all(dir.path().join(".qhost")).expect(".qhost");
    std::fs::write(dir.path().join(".qhost/capture"), "a file, not a directory").expect("it");
    let bodies: Vec<String> = (0..8).map(|i| format!("log:message {i}")).collect();
    send_all(dir.path(), &bodies);
    let (code, out, err) = run_in(dir.path(), &["run", "--until-idle"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(
        qhost_e2e::processes::summary_column(&out, "greetings", "acked"),
        8,
        "every message handled: {out}"
    );
    assert_eq!(
        err.matches("cannot write the capture").count(),
        1,
        "one warning for four lines: {err}"
    );
}
