//! The `qhost` binary: bad configuration is one clear error naming the field; send and peek
//! reach the local queue.

use std::process::Command;

fn qhost(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qhost-under-test"));
    c.current_dir(dir)
        .env_remove("QHOST_CONFIG")
        .envs(qhost_e2e::processes::qhost_env());
    c
}

/// A directory whose `plugins/` holds the built plugin crate `crate_name` as `name`, with
/// `manifest` beside it; the directory and the `.wasm`'s path.
fn with_plugin(
    crate_name: &str,
    name: &str,
    manifest: &str,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a directory");
    let plugins = dir.path().join("plugins");
    std::fs::create_dir(&plugins).expect("plugins/");
    let wasm = plugins.join(format!("{name}.wasm"));
    std::fs::write(&wasm, qhost_e2e::plugin_bytes(crate_name)).expect("the plugin");
    std::fs::write(plugins.join(format!("{name}.toml")), manifest).expect("its manifest");
    (dir, wasm)
}

/// An example plugin under its own manifest (`plugins/NAME/qhost.toml`), as [`with_plugin`].
fn with_example(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let manifest = qhost_e2e::workspace().join(format!("plugins/{name}/qhost.toml"));
    let manifest = std::fs::read_to_string(manifest).expect("its manifest");
    with_plugin(name, name, &manifest)
}

/// A directory whose `plugins/` holds the email-reminder example under its own manifest; the
/// directory and the `.wasm`'s path.
fn with_the_reminder() -> (tempfile::TempDir, std::path::PathBuf) {
    with_example("email-reminder")
}

/// Runs `qhost send ARGS` in `dir`, checks it succeeded, and returns the message id it printed.
fn send(dir: &std::path::Path, args: &[&str]) -> String {
    let sent = qhost(dir)
        .arg("send")
        .args(args)
        .output()
        .expect("running qhost send");
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    String::from_utf8(sent.stdout)
        .expect("a message id")
        .trim()
        .to_string()
}

/// `qhost run --until-idle` in `dir` at log filter `filter`: it must succeed; what it logged.
fn run_logged(dir: &std::path::Path, filter: &str) -> String {
    let out = qhost(dir)
        .args(["run", "--until-idle"])
        .env("QHOST_LOG", filter)
        .output()
        .expect("running qhost run");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_malformed_config_file_names_the_field_and_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[[queue]]\nname = \"q\"\nplugin = \"p\"\nbatch-size = 50\n",
            "queue[0].batch-size is 50",
        ),
        ("max-in-flight = \"lots\"\n", "max-in-flight"),
        (
            "[[queue]]\nname = \"q\"\nplugn = \"p\"\n",
            "unknown field `plugn`",
        ),
        (
            "[[queue]]\nname = \"q\"\nplugn = \"p\"\n",
            "did you mean `plugin`?",
        ),
        ("[[queue\n", "TOML parse error"),
        (
            "[rollout]\nmode = \"canary\"\npercent = 120\npromote-after-secs = 60\n",
            "rollout.percent is 120",
        ),
        (
            "[rollout]\nmode = \"canary\"\n",
            "a canary needs a promotion rule",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(dir.path().join("bad.toml"), text).unwrap();
        let out = qhost(dir.path())
            .args(["--config", "bad.toml", "run"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(
            stderr.contains("bad.toml") && stderr.contains(expected),
            "expected `{expected}` in: {stderr}"
        );
    }
}

#[test]
fn a_missing_plugins_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = qhost(dir.path()).args(["run"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let plugins = dir.path().canonicalize().unwrap().join("plugins");
    assert!(
        stderr.contains(&format!(
            "plugins directory {} does not exist: create it",
            plugins.display()
        )),
        "{stderr}"
    );
    // It says which configuration it ran on, and a refused start leaves nothing behind.
    assert!(
        stderr.contains(
            "error: on the built-in defaults (queue `reminders` for plugin `email-reminder`; \
             no qhost.toml here: write one, or name one with --config): plugins directory"
        ),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    let out = qhost(dir.path())
        .args(["run", "--until-idle"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("error: on the built-in defaults (queue `reminders`")
            && stderr.contains("queue `reminders` routes to plugin `email-reminder`, but there is no email-reminder.wasm"),
        "{stderr}"
    );
    let left: Vec<String> = (std::fs::read_dir(dir.path()).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["plugins"], "no .qhost/ from a refused start");
}

#[test]
fn send_then_peek_shows_the_message_with_its_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let id = send(
        dir.path(),
        &[
            "--queue",
            "reminders",
            "--body",
            "hello",
            "--attr",
            "k=v",
            "--attr",
            "n:number=7",
        ],
    );
    let peek = qhost(dir.path())
        .args(["peek", "--queue", "reminders"])
        .output()
        .unwrap();
    let shown = String::from_utf8(peek.stdout).unwrap();
    assert!(
        shown.contains(&id) && shown.contains("hello") && shown.contains("k=v, n=7"),
        "{shown}"
    );
    let bad = qhost(dir.path())
        .args([
            "send",
            "--queue",
            "reminders",
            "--body",
            "x",
            "--attr",
            "n:number=seven",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`seven` is not a number"));
}

/// `QHOST_LOG_FORMAT=json`: every line on stderr is a JSON object, and what a handler logs
/// carries its plugin, version and message id, and the `invoke` span it ran in. An unknown
/// format is refused before anything runs.
#[test]
fn json_logs_are_one_object_per_line_with_the_handlers_fields() {
    let (dir, _) = with_the_reminder();
    let body = r#"{"reminder-id":"r1","email":"a@example.com","customer":"A","month":"2026-12"}"#;
    send(dir.path(), &["--queue", "reminders", "--body", body]);

    let bad = qhost(dir.path())
        .env("QHOST_LOG_FORMAT", "yaml")
        .args(["run", "--until-idle"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("QHOST_LOG_FORMAT is `yaml`"));

    let ran = qhost(dir.path())
        .env("QHOST_LOG_FORMAT", "json")
        .env("QHOST_LOG", "info")
        .args(["run", "--until-idle"])
        .output()
        .unwrap();
    assert!(ran.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&ran.stderr)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let from_handler = lines
        .iter()
        .find(|l| l["target"] == "qhost::plugin")
        .unwrap_or_else(|| panic!("no handler line in {lines:?}"));
    assert_eq!(from_handler["plugin"], "email-reminder", "{from_handler}");
    assert_eq!(from_handler["queue"], "reminders", "{from_handler}");
    assert!(
        from_handler["version"]
            .as_str()
            .is_some_and(|v| v.len() == 12)
    );
    assert!(
        from_handler["message_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    assert_eq!(from_handler["span"]["name"], "invoke", "{from_handler}");
    let delivery = (from_handler["spans"].as_array())
        .and_then(|spans| spans.iter().find(|s| s["name"] == "delivery"))
        .unwrap_or_else(|| panic!("no delivery span in {from_handler}"));
    assert_eq!(
        delivery["message_id"], from_handler["message_id"],
        "{from_handler}"
    );
    assert_eq!(delivery["queue"], "reminders", "{from_handler}");
}

#[test]
fn an_admin_port_in_use_or_a_bad_address_is_one_error_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let cases = [
        (
            addr.as_str(),
            format!(
                "admin.listen (--admin-listen): cannot listen on {addr}: Address already in use \
                 (os error 98); another qhost (or another program) may be serving there: give \
                 this one another address with --admin-listen 127.0.0.1:0"
            ),
        ),
        (
            "localhost:9464",
            "admin.listen `localhost:9464` is not an address: IP:PORT".to_string(),
        ),
    ];
    for (listen, expected) in cases {
        let out = qhost(dir.path())
            .args(["run", "--until-idle", "--admin-listen", listen])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{listen}: {stderr}");
        assert!(
            stderr.contains(&expected),
            "expected `{expected}` in: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one error: {stderr}");
    }
    std::fs::write(dir.path().join("q.toml"), "[admin]\nlisten = \"\"\n").unwrap();
    let off = qhost(dir.path())
        .env("QHOST_LOG", "info")
        .env_remove("QHOST_ADMIN_LISTEN")
        .args(["--config", "q.toml", "run", "--until-idle"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&off.stderr);
    assert!(!stderr.contains("admin listener"), "turned off: {stderr}");
}

/// A run until idle is a job: the console's default address taken (here by this test, or by
/// whatever already holds it) does not stop it; and an empty queue says so.
#[test]
fn a_run_until_idle_goes_on_without_a_console_when_the_default_port_is_taken() {
    let dir = worker_dir("");
    let _held = std::net::TcpListener::bind(qhost::DEFAULT_ADMIN_LISTEN);
    let out = qhost(dir.path())
        .env_remove("QHOST_ADMIN_LISTEN")
        .args(["run", "--until-idle"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the console's default address is in use"),
        "{stderr}"
    );
    assert_eq!(
        stdout.trim(),
        "nothing was received: every consumed queue was empty"
    );
}

#[test]
fn version_names_the_wit_package_and_the_embedded_wasmtime() {
    let dir = tempfile::tempdir().unwrap();
    let out = qhost(dir.path()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lock = std::fs::read_to_string(qhost_e2e::workspace().join("Cargo.lock")).unwrap();
    let wasmtime = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"wasmtime\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = ")))
        .unwrap()
        .trim_matches('"');
    assert_eq!(
        text.trim(),
        format!("qhost 0.1.0 (serves qhost:handler@0.1.2, wasmtime {wasmtime})")
    );
}

#[test]
fn invoke_runs_one_message_and_says_the_outcome_in_its_exit_code() {
    let (dir, reminder) = with_the_reminder();
    let plugins = dir.path().join("plugins");
    let fixture = plugins.join("fixture.wasm");
    std::fs::write(&fixture, qhost_e2e::plugin_bytes("fixture")).unwrap();
    std::fs::write(plugins.join("fixture.toml"), "[limits]\ntimeout-ms = 300\n").unwrap();
    let invoke = |file: &std::path::Path, args: &[&str]| {
        let out = qhost(dir.path())
            .arg("invoke")
            .arg(file)
            .args(args)
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let body = r#"{"reminder-id":"r1","email":"a@example.com","customer":"A","month":"2026-12"}"#;

    let (code, out, err) = invoke(&reminder, &["--body", body]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        err.contains("reminder for a@example.com queued as"),
        "the handler's own info line, without -v: {err}"
    );
    assert!(out.contains("key:      r1\n"), "{out}");
    assert!(out.contains("outcome:  ack\n"), "{out}");
    assert!(
        out.contains("outbox:   1 message(s) it would send"),
        "{out}"
    );
    assert!(out.contains("  -> sent-emails  "), "{out}");
    assert!(out.contains("cost:     "), "{out}");

    let (code, out, err) = invoke(&reminder, &["--body", body, "--set", "sent-queue=other"]);
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(
        err.contains("this plugin may not send to queue `other`"),
        "its log line: {err}"
    );

    let (code, out, _) = invoke(&reminder, &["--body", "not a reminder"]);
    assert_eq!(code, Some(4), "{out}");
    assert!(
        out.contains("outcome:  reject: not a reminder: the body is not JSON; a reminder is an object with reminder-id, email, customer and month"),
        "{out}"
    );

    let (code, out, _) = invoke(&fixture, &["--body", r#"result:{"sent":2}"#]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("result:   {\"sent\":2}\n"),
        "the run's result value: {out}"
    );

    let (code, out, _) = invoke(&fixture, &["--body", "sleep:10000"]);
    assert_eq!(code, Some(5), "{out}");
    assert!(
        out.contains("failed: plugin timed out after 300ms"),
        "{out}"
    );

    let (code, out, err) = invoke(&plugins.join("absent.wasm"), &["--body", "x"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(err.contains("absent.wasm was not loaded"), "{err}");
}

/// A plugins directory holding the fixture as `worker`, under `manifest`, and a configuration
/// consuming queue `jobs` with it.
fn worker_dir(manifest: &str) -> tempfile::TempDir {
    let (dir, _) = with_plugin("fixture", "worker", manifest);
    let config = "[retry]\nbase-secs = 0.01\nmax-secs = 0.05\n[[queue]]\nname = \"jobs\"\nplugin = \"worker\"\n";
    std::fs::write(dir.path().join("qhost.toml"), config).expect("qhost.toml");
    dir
}

#[test]
fn a_broken_manifest_stops_the_run_and_the_messages_wait() {
    let dir = worker_dir("[limits]\nmemory-mb = 64\n");
    send(dir.path(), &["--queue", "jobs", "--body", "ack"]);
    let out = qhost(dir.path())
        .args(["-c", "qhost.toml", "run", "--until-idle"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("queue `jobs` routes to plugin `worker`, which did not load:")
            && stderr.contains("unknown field `memory-mb`")
            && stderr.contains("did you mean `memory-mib`?")
            && stderr.contains("--allow-unloaded-plugins"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("unknown field `memory-mb`").count(),
        1,
        "a load error is reported once: {stderr}"
    );
    let peek = qhost(dir.path())
        .args(["-c", "qhost.toml", "peek", "--queue", "jobs"])
        .output()
        .unwrap();
    let waiting = String::from_utf8_lossy(&peek.stdout);
    assert_eq!(waiting.lines().count(), 1, "the message waits: {waiting}");

    // Started anyway, the run leaves the queue alone and ends at once.
    let out = qhost(dir.path())
        .args([
            "-c",
            "qhost.toml",
            "run",
            "--until-idle",
            "--allow-unloaded-plugins",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("not consuming: the queue's plugin is not loaded"),
        "{stderr}"
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        qhost_e2e::processes::summary_column(&summary, "jobs", "received"),
        0
    );
}

#[test]
fn fail_on_dead_letter_exits_six_after_a_dead_letter() {
    let dir = worker_dir("");
    send(
        dir.path(),
        &["--queue", "jobs", "--body", "reject:bad input"],
    );
    let run = |extra: &[&str]| {
        qhost(dir.path())
            .args(["-c", "qhost.toml", "run", "--until-idle"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = run(&["--fail-on-dead-letter"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("1 message(s) were dead-lettered (--fail-on-dead-letter)"),
        "{stderr}"
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        qhost_e2e::processes::summary_column(&summary, "jobs", "dead"),
        1
    );
    send(dir.path(), &["--queue", "jobs", "--body", "ack"]);
    let out = run(&["--fail-on-dead-letter"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `qhost ARGS` in `dir`: (exit code, stdout, stderr).
fn run_in(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = qhost(dir).args(args).output().expect("running qhost");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

#[test]
fn plugins_check_loads_the_file_with_its_manifest_and_fails_on_any_problem() {
    let dir = worker_dir("");
    let (code, stdout, stderr) = run_in(dir.path(), &["plugins", "check", "plugins/worker.wasm"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("loads:    yes, with plugins/worker.toml"),
        "{stdout}"
    );

    std::fs::write(
        dir.path().join("plugins/worker.toml"),
        "[limits]\nmemory-mb = 64\n",
    )
    .unwrap();
    let (code, _, stderr) = run_in(dir.path(), &["plugins", "check", "plugins/worker.wasm"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("plugins/worker.wasm would not load")
            && stderr.contains("unknown field `memory-mb`"),
        "{stderr}"
    );

    // A core module gets the way to make a component, not the parser's words.
    std::fs::write(dir.path().join("plugins/core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let (code, _, stderr) = run_in(dir.path(), &["plugins", "check", "plugins/core.wasm"]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("wasm-tools component new"), "{stderr}");
}

#[test]
fn check_validates_the_deploy_and_reads_qhost_toml_here_by_default() {
    let dir = worker_dir("");
    // No --config: ./qhost.toml is read (it consumes `jobs` with `worker`).
    let (code, stdout, stderr) = run_in(dir.path(), &["check"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("config:   qhost.toml: 1 queue(s)")
            && stdout.contains("queue jobs: plugin worker loads")
            && stdout.contains("ok: `qhost run` would start"),
        "{stdout}"
    );
    // A one-shot command prints its report and logs only warnings unless asked.
    assert!(!stderr.contains("INFO"), "{stderr}");
    let (code, _, verbose) = run_in(dir.path(), &["check", "-v"]);
    assert_eq!(code, Some(0), "{verbose}");
    assert!(
        verbose.contains("INFO")
            && verbose.contains("using the configuration file in this directory"),
        "{verbose}"
    );

    std::fs::write(dir.path().join("plugins/worker.wasm"), b"hi\n").unwrap();
    let (code, stdout, stderr) = run_in(dir.path(), &["check"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("queue jobs: plugin worker does not load:")
            && stderr.contains("1 problem(s): `qhost run` would refuse to start"),
        "{stdout}\n{stderr}"
    );
}

/// A typo in a plugin's outbox grant is named by `qhost check`: each queue the plugin may send
/// to, whether a `[[queue]]` here consumes it, and (on SQS) whether it exists at all.
#[test]
fn check_names_each_outbox_queue_no_queue_consumes_and_each_the_source_refuses() {
    let dir = worker_dir("[outbox]\nqueues = [\"jobs\", \"sent-emials\"]\n");
    let (code, stdout, stderr) = run_in(dir.path(), &["check"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains("  outbox jobs: consumed here (queue jobs)")
            && stdout.contains("  outbox sent-emials: the source refuses it: queue `sent-emials` does not exist on the embedded queue")
            && stderr.contains("1 outbox queue(s) the source refuses"),
        "{stdout}{stderr}"
    );
    // Run anyway, the send is refused as SQS refuses one to a missing queue: the message is
    // dead-lettered with the reason, and nothing waits in the misspelt queue.
    send(
        dir.path(),
        &["--queue", "jobs", "--body", "send:sent-emials:hello"],
    );
    let (code, _, stderr) = run_in(dir.path(), &["run", "--until-idle"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, dead, _) = run_in(dir.path(), &["dlq", "peek", "--queue", "jobs"]);
    assert!(
        dead.contains("the outbox could not be sent: queue `sent-emials` does not exist"),
        "{dead}"
    );
    let (_, typo, _) = run_in(dir.path(), &["peek", "--queue", "sent-emials"]);
    assert!(typo.is_empty(), "{typo}");
    // Declared in [source] queues, it exists, and only its having no reader is reported.
    let config = std::fs::read_to_string(dir.path().join("qhost.toml")).unwrap();
    let declared = format!("{config}[source]\nqueues = [\"sent-emials\"]\n");
    std::fs::write(dir.path().join("qhost.toml"), declared).unwrap();
    let (code, stdout, stderr) = run_in(dir.path(), &["check"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("  outbox sent-emials: no [[queue]] here consumes it")
            && stdout.contains(
                "ok: `qhost run` would start; 1 outbox queue(s) no [[queue]] here consumes"
            ),
        "{stdout}"
    );

    // A route to a plugin file that is not there names the ones that are.
    std::fs::write(
        dir.path().join("typo.toml"),
        "[[queue]]\nname = \"jobs\"\nplugin = \"wroker\"\n",
    )
    .unwrap();
    let (code, stdout, _) = run_in(dir.path(), &["-c", "typo.toml", "check"]);
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains("wroker.wasm (did you mean `worker`? it holds: worker)"),
        "{stdout}"
    );

    // On SQS, a queue that does not exist is refused: every send to it would fail.
    let sqs = qhost_e2e::sqs_server::client();
    let jobs = qhost_e2e::sqs_server::unique("jobs");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for name in [jobs.clone(), format!("{jobs}-dlq")] {
        runtime
            .block_on(sqs.create_queue().queue_name(name).send())
            .expect("creating the queue");
    }
    let config = format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n[[queue]]\nname = \"{jobs}\"\nplugin = \"worker\"\n",
        qhost_e2e::sqs_server::endpoint()
    );
    std::fs::write(dir.path().join("sqs.toml"), config).unwrap();
    let grant = format!("[outbox]\nqueues = [\"{jobs}\", \"sent-emials\"]\n");
    std::fs::write(dir.path().join("plugins/worker.toml"), grant).unwrap();
    let out = qhost(dir.path())
        .args(["-c", "sqs.toml", "check"])
        .envs(qhost_e2e::sqs_server::TEST_ENV)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("  outbox {jobs}: consumed here"))
            && stdout.contains("  outbox sent-emials: the source refuses it: SQS queue `sent-emials` does not exist")
            && stderr.contains("1 outbox queue(s) the source refuses: every send to them would fail"),
        "{stdout}{stderr}"
    );
}

#[test]
fn a_config_files_paths_are_relative_to_the_file_not_the_working_directory() {
    let dir = worker_dir("");
    let elsewhere = tempfile::tempdir().unwrap();
    let config = dir.path().join("qhost.toml");
    let config = config.to_str().unwrap();
    let (code, stdout, stderr) = run_in(elsewhere.path(), &["-c", config, "check"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{}/plugins/worker.wasm", dir.path().display())),
        "{stdout}"
    );
}

#[test]
fn a_type_mistake_in_the_config_says_what_to_write() {
    let dir = tempfile::tempdir().unwrap();
    for (text, hint) in [
        ("[queue]\nname = \"q\"\nplugin = \"p\"\n", "write [[queue]]"),
        (
            "[[queue]]\nname = \"q\"\nplugin = \"p\"\nbatch-size = \"10\"\n",
            "a whole number, written without quotes",
        ),
    ] {
        std::fs::write(dir.path().join("bad.toml"), text).unwrap();
        let (code, _, stderr) = run_in(dir.path(), &["-c", "bad.toml", "check"]);
        assert_eq!(code, Some(1));
        assert!(stderr.contains(hint), "{text}: {stderr}");
    }
}

#[test]
fn send_and_peek_say_what_is_wrong_and_what_is_there() {
    let dir = worker_dir("");
    let (code, _, stderr) = run_in(dir.path(), &["send", "--queue", "jobs.fifo", "--body", "x"]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("`jobs.fifo` is a FIFO queue: give the message group with --group"),
        "{stderr}"
    );
    let args = [
        "send",
        "--queue",
        "jobs",
        "--attr",
        "qhost-foo=1",
        "--body",
        "x",
    ];
    let (code, _, stderr) = run_in(dir.path(), &args);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("attribute qhost-foo: names starting with qhost- are the host's own"),
        "{stderr}"
    );
    // On the embedded queue a queue the configuration does not declare does not exist: the
    // send is refused, naming the near name, the queues there are and how to create one.
    let (code, stdout, stderr) = run_in(dir.path(), &["send", "--queue", "jbos", "--body", "x"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("queue `jbos` does not exist on the embedded queue (did you mean `jobs`?)")
            && stderr.contains("are jobs, jobs-dlq.")
            && stderr.contains(r#"[source] queues = ["jbos"]"#),
        "{stderr}"
    );
    let (_, stdout, stderr) = run_in(dir.path(), &["peek", "--queue", "jbos"]);
    assert!(
        stdout.is_empty() && stderr.contains("0 messages in `jbos`"),
        "nothing was sent: {stdout}{stderr}"
    );
    // Declared but consumed by no queue: sent, with a warning; --strict refuses it.
    let config = std::fs::read_to_string(dir.path().join("qhost.toml")).unwrap();
    let declared = format!("{config}[source]\nqueues = [\"other\"]\n");
    std::fs::write(dir.path().join("qhost.toml"), declared).unwrap();
    let (code, _, stderr) = run_in(dir.path(), &["send", "--queue", "other", "--body", "x"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("warning: no configured queue consumes `other`")
            && stderr.contains("(configured: jobs)"),
        "{stderr}"
    );
    let strict = ["send", "--queue", "other", "--body", "y", "--strict"];
    let (code, stdout, stderr) = run_in(dir.path(), &strict);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("not sent (--strict)"), "{stderr}");
    let (_, stdout, _) = run_in(dir.path(), &["peek", "--queue", "other"]);
    assert_eq!(
        stdout.lines().count(),
        1,
        "only the first was sent: {stdout}"
    );
    // Without a qhost.toml, the queues named are the built-in defaults'.
    let empty = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run_in(
        empty.path(),
        &["send", "--queue", "remindrs", "--body", "x"],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("(did you mean `reminders`?)")
            && stderr.contains(
                "no qhost.toml here: the built-in defaults' queues are reminders, reminders-dlq, sent-emails"
            ),
        "{stderr}"
    );
    let (code, _, stderr) = run_in(
        empty.path(),
        &["send", "--queue", "sent-emails", "--body", "x"],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("no qhost.toml here: the built-in defaults consume only `reminders`"),
        "{stderr}"
    );

    let mut child = qhost(dir.path())
        .args(["send", "--queue", "jobs", "--body-file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"from stdin").unwrap();
    assert!(child.wait_with_output().unwrap().status.success());
    let (code, stdout, stderr) = run_in(dir.path(), &["peek", "--queue", "jobs"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("from stdin"), "{stdout}");
    assert!(!stderr.contains("warning"), "jobs is consumed: {stderr}");

    let (code, stdout, stderr) = run_in(dir.path(), &["peek", "--queue", "empty"]);
    assert_eq!(code, Some(0));
    assert_eq!(stdout, "", "nothing on stdout for scripts to count");
    assert!(stderr.contains("0 messages in `empty`"), "{stderr}");
}

#[test]
fn sqs_without_a_region_or_credentials_says_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugins")).unwrap();
    // Nothing listens there, and nothing is asked: the checks come first.
    let config = "[source]\nkind = \"sqs\"\nendpoint-url = \"http://127.0.0.1:9\"\n";
    std::fs::write(dir.path().join("sqs.toml"), config).unwrap();
    let bare = |c: &mut Command| {
        for var in [
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_PROFILE",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
        ] {
            c.env_remove(var);
        }
        // No profile files, and no instance metadata endpoint (off loopback) is ever asked.
        c.env("AWS_CONFIG_FILE", "/nonexistent/qhost-test")
            .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/qhost-test")
            .env("AWS_EC2_METADATA_DISABLED", "true");
    };
    let mut no_region = qhost(dir.path());
    bare(&mut no_region);
    let out = no_region
        .args(["-c", "sqs.toml", "send", "--queue", "q", "--body", "x"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no AWS region: set `region` under [source] in qhost.toml, or AWS_REGION"),
        "{stderr}"
    );

    let mut no_credentials = qhost(dir.path());
    bare(&mut no_credentials);
    let out = no_credentials
        .env("AWS_REGION", "us-east-1")
        .args(["-c", "sqs.toml", "send", "--queue", "q", "--body", "x"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no AWS credentials found (checked: AWS_ACCESS_KEY_ID"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("WARN"),
        "one error, not the chain's warnings: {stderr}"
    );
}

#[test]
fn invoke_sends_nothing_over_http_unless_allowed_and_names_the_way_to_a_secret() {
    let api = qhost_e2e::api_server::ApiServer::start();
    let dir = worker_dir(
        "[capabilities]\nhttp = [\"http://127.0.0.1:*\"]\n[outbox]\nqueues = [\"out\"]\n",
    );
    let get = format!("get:out:{}", api.url("/ping"));
    let (code, stdout, stderr) = run_in(
        dir.path(),
        &["invoke", "plugins/worker.wasm", "--body", &get],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(
            "http:     not allowed (http://127.0.0.1:* granted by its manifest); pass --allow-http"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("ERR:HTTP-request-denied"),
        "refused inside the guest: {stdout}"
    );
    assert_eq!(api.requests().len(), 0, "nothing was sent");
    let (code, stdout, stderr) = run_in(
        dir.path(),
        &[
            "invoke",
            "plugins/worker.wasm",
            "--allow-http",
            "--body",
            &get,
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("-> out  200:"), "{stdout}");
    assert_eq!(api.requests().len(), 1, "asked to, it called the API");

    std::fs::write(
        dir.path().join("plugins/worker.toml"),
        "[config]\napi-key = { env = \"QHOST_TEST_API_KEY\" }\n",
    )
    .unwrap();
    let (code, _, stderr) = run_in(
        dir.path(),
        &["invoke", "plugins/worker.wasm", "--body", "ack"],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("the variable QHOST_TEST_API_KEY is not granted")
            && stderr.contains("add it under [secrets] env in qhost.toml")
            && stderr.contains("or give the value with --set KEY=VALUE"),
        "{stderr}"
    );
}

#[test]
fn a_warning_about_a_delivery_names_its_queue_and_message_at_the_warn_filter() {
    let dir = worker_dir("");
    let id = send(
        dir.path(),
        &["--queue", "jobs", "--body", "reject:no such user"],
    );
    let stderr = run_logged(dir.path(), "warn");
    let line = (stderr.lines())
        .find(|l| l.contains("dead-lettering"))
        .unwrap_or_else(|| panic!("no dead-letter line in {stderr}"));
    for field in ["queue=jobs".to_string(), format!("message_id={id}")] {
        assert_eq!(line.matches(&field).count(), 1, "{field} once in `{line}`");
    }
}

#[test]
fn text_logs_show_a_handlers_context_once_whatever_the_filter() {
    let dir = worker_dir("");
    for filter in ["info", "warn,qhost::plugin=info"] {
        send(
            dir.path(),
            &["--queue", "jobs", "--body", "log:hello from the handler"],
        );
        let stderr = run_logged(dir.path(), filter);
        let line = (stderr.lines())
            .find(|l| l.contains("hello from the handler"))
            .unwrap_or_else(|| panic!("{filter}: no handler line in {stderr}"));
        for field in ["plugin=", "version=", "message_id=", "queue="] {
            assert_eq!(
                line.matches(field).count(),
                1,
                "{filter}: {field} once in `{line}`"
            );
        }
    }
}

/// A batch handler logs before it selects a message: its line names the plugin and the queue,
/// and no `message_id=""`; the host's line about one order of the call names that order.
#[test]
fn a_batch_handlers_line_before_it_selects_a_message_carries_no_empty_message_id() {
    let (dir, _) = with_example("order-tally");
    let config = "[[queue]]\nname = \"orders\"\nplugin = \"order-tally\"\n";
    std::fs::write(dir.path().join("qhost.toml"), config).expect("qhost.toml");
    let order = r#"{"order-id":"o1","customer":"c","cents":100}"#;
    send(dir.path(), &["--queue", "orders", "--body", order]);
    let id = send(dir.path(), &["--queue", "orders", "--body", "not an order"]);

    let stderr = run_logged(dir.path(), "info");
    let line = (stderr.lines())
        .find(|l| l.contains("tallying 2 orders"))
        .unwrap_or_else(|| panic!("no batch line in {stderr}"));
    assert!(
        line.contains("plugin=order-tally") && !line.contains("message_id"),
        "{line}"
    );
    let per_message = (stderr.lines())
        .find(|l| l.contains(&format!("message_id={id}")))
        .unwrap_or_else(|| panic!("no line for the selected message {id} in {stderr}"));
    assert!(per_message.contains("queue=orders"), "{per_message}");
}

/// `qhost send` puts a Celery task on a queue as Celery sends one (`--celery-task`, or
/// `--format celery` with the task as the body), and wraps a body as SNS delivers it
/// (`--format sns`): the reminder runs from each. A bare body on a Celery queue is sent as it
/// is, with a note naming the flags, and is dead-lettered as not a Celery message.
#[test]
fn send_puts_a_celery_task_or_a_wrapped_body_on_a_queue_as_its_producer_would() {
    let (dir, _) = with_the_reminder();
    let config = "[[queue]]\nname = \"celery\"\nformat = \"celery\"\n\
                  tasks = { \"proj.tasks.send_reminder\" = \"email-reminder\" }\n\
                  [[queue]]\nname = \"notes\"\nformat = \"sns\"\nplugin = \"email-reminder\"\n\
                  [source]\nqueues = [\"sent-emails\"]\n";
    std::fs::write(dir.path().join("qhost.toml"), config).expect("qhost.toml");
    let reminder = |id: &str| {
        format!(
            r#"{{"reminder-id":"{id}","email":"{id}@example.com","customer":"C","month":"2026-12"}}"#
        )
    };
    let kwargs = reminder("by-flag");
    send(
        dir.path(),
        &[
            "--queue",
            "celery",
            "--celery-task",
            "proj.tasks.send_reminder",
            "--kwargs",
            &kwargs,
        ],
    );
    let task = format!(
        r#"{{"task":"proj.tasks.send_reminder","kwargs":{}}}"#,
        reminder("by-format")
    );
    send(
        dir.path(),
        &["--queue", "celery", "--format", "celery", "--body", &task],
    );
    send(
        dir.path(),
        &[
            "--queue",
            "notes",
            "--format",
            "sns",
            "--body",
            &reminder("by-sns"),
        ],
    );
    let bare = qhost(dir.path())
        .args(["send", "--queue", "celery", "--body", &task])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&bare.stderr);
    assert!(bare.status.success(), "{stderr}");
    assert!(
        stderr
            .contains("note: queue `celery` reads celery messages, and the body was sent as it is")
            && stderr.contains("--celery-task NAME --args JSON --kwargs JSON"),
        "{stderr}"
    );
    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "send",
            "--queue",
            "celery",
            "--celery-task",
            "t",
            "--args",
            "not json",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(stderr.contains("--args is JSON"), "{stderr}");
    let (code, _, stderr) = run_in(
        dir.path(),
        &[
            "send", "--queue", "notes", "--format", "kafka", "--body", "x",
        ],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("--format `kafka`") && stderr.contains("sns, eventbridge, s3, celery"),
        "{stderr}"
    );

    let (code, _, stderr) = run_in(dir.path(), &["run", "--until-idle"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (_, sent, _) = run_in(dir.path(), &["peek", "--queue", "sent-emails"]);
    for id in ["by-flag", "by-format", "by-sns"] {
        assert!(sent.contains(&format!("{id}@example.com")), "{id}: {sent}");
    }
    let (_, dead, _) = run_in(dir.path(), &["dlq", "peek", "--queue", "celery"]);
    assert!(dead.contains("not a Celery message"), "{dead}");
}

/// On the embedded defaults: the example reminder records the address-month it reminded, a
/// second reminder for it under another id sends nothing, `qhost kv` reads the record, and
/// `qhost invoke` prints the write a run would commit.
#[test]
fn qhost_kv_reads_what_a_run_committed_and_invoke_shows_what_it_would() {
    let (dir, wasm) = with_the_reminder();
    let reminder = |id: &str| {
        format!(
            r#"{{"reminder-id":"{id}","email":"a@example.com","customer":"A","month":"2026-12"}}"#
        )
    };
    let send_and_run = |id: &str| {
        send(
            dir.path(),
            &["--queue", "reminders", "--body", &reminder(id)],
        );
        let ran = qhost(dir.path()).args(["run", "--until-idle"]).output();
        let ran = ran.expect("qhost run");
        assert!(
            ran.status.success(),
            "{}",
            String::from_utf8_lossy(&ran.stderr)
        );
        String::from_utf8_lossy(&ran.stderr).into_owned()
    };
    send_and_run("r1");
    let log = send_and_run("r2");
    assert!(
        log.contains("a@example.com was reminded for 2026-12 already (by r1); not sending again"),
        "{log}"
    );
    let peeked = qhost(dir.path())
        .args(["peek", "--queue", "sent-emails"])
        .output()
        .unwrap();
    let sent = String::from_utf8_lossy(&peeked.stdout);
    assert_eq!(
        sent.matches("a@example.com").count(),
        2,
        "one email (body and attribute): {sent}"
    );

    let out = |args: &[&str]| {
        let o = qhost(dir.path()).args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    assert_eq!(
        out(&["kv", "list", "email-reminder", "reminded"]),
        (Some(0), "a@example.com/2026-12\n".into())
    );
    let get = |key: &str| out(&["kv", "get", "email-reminder", "reminded", key]);
    assert_eq!(get("a@example.com/2026-12"), (Some(0), "r1\n".into()));
    assert_eq!(get("b@example.com/2026-12").0, Some(1), "no value");
    let (code, _) = out(&["kv", "get", "email-reminder", "../x", "k"]);
    assert_eq!(code, Some(1), "not a bucket name");

    let invoked = qhost(dir.path())
        .args(["invoke", wasm.to_str().unwrap(), "--body", &reminder("r3")])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&invoked.stdout);
    assert!(
        printed.contains(
            "state:    1 write(s) it would commit\n  reminded/a@example.com/2026-12 = r3\n"
        ),
        "invoke runs on an empty in-memory store and prints the write:\n{printed}"
    );
}

#[test]
fn qhost_inspect_says_what_each_format_reads_where_a_queue_routes_it_and_why_it_would_not() {
    let dir = tempfile::tempdir().expect("a directory");
    std::fs::create_dir(dir.path().join("plugins")).expect("plugins/");
    std::fs::write(
        dir.path().join("qhost.toml"),
        "[[queue]]\nname = \"uploads\"\nformat = \"s3\"\nroutes = { \"ObjectCreated:*\" = \"thumbs\" }\n",
    )
    .expect("qhost.toml");
    // The routed plugin keys by bucket: inspect derives the key from its manifest.
    std::fs::write(
        dir.path().join("plugins/thumbs.toml"),
        "[idempotency]\nkey = \"attribute:s3-bucket\"\n",
    )
    .expect("its manifest");
    let record = |event: &str, key: &str, sequencer: &str| {
        serde_json::json!({"eventName": event, "s3": {"bucket": {"name": "photos"},
            "object": {"key": key, "eTag": "e", "sequencer": sequencer}}})
    };
    let notification = serde_json::json!({"Records": [
        record("ObjectCreated:Put", "a+b.jpg", "01"),
        record("ObjectRemoved:Delete", "c.jpg", "02"),
    ]});
    std::fs::write(dir.path().join("n.json"), notification.to_string()).expect("n.json");
    let out = qhost(dir.path())
        .args(["inspect", "--queue", "uploads", "n.json"])
        .output()
        .expect("running qhost inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    for line in [
        "format    s3",
        "run 1",
        "route     ObjectCreated:Put, then ObjectCreated:*, then photos",
        "plugin    thumbs",
        "key       photos",
        "attribute s3-key = a b.jpg",
        "run 2",
        "plugin    none (event `ObjectRemoved:Delete` is not one this queue routes (routes: ObjectCreated:*) and it has no default plugin; it would be dead-lettered)",
        "key       photos/c.jpg/02",
    ] {
        assert!(text.lines().any(|l| l == line), "`{line}` in:\n{text}");
    }

    let out = qhost(dir.path())
        .args(["inspect", "--format", "eventbridge", "n.json"])
        .output()
        .expect("running qhost inspect");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error: not an EventBridge event: no `id`; a queue would dead-letter it"),
        "{err}"
    );
}
