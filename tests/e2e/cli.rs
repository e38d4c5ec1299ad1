//! The `qhost` binary: bad configuration is one clear error naming the field; send and peek
//! reach the local queue.

use std::process::Command;

fn qhost(dir: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qhost-under-test"));
    c.current_dir(dir).env_remove("QHOST_CONFIG");
    c
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
        ("[[queue\n", "TOML parse error"),
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
    assert!(
        stderr.contains("plugins directory plugins does not exist"),
        "{stderr}"
    );
}

#[test]
fn send_then_peek_shows_the_message_with_its_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let sent = qhost(dir.path())
        .args([
            "send",
            "--queue",
            "jobs",
            "--body",
            "hello",
            "--attr",
            "k=v",
            "--attr",
            "n:number=7",
        ])
        .output()
        .unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let id = String::from_utf8(sent.stdout).unwrap().trim().to_string();
    let peek = qhost(dir.path()).args(["peek", "jobs"]).output().unwrap();
    let shown = String::from_utf8(peek.stdout).unwrap();
    assert!(
        shown.contains(&id) && shown.contains("hello") && shown.contains("k=v, n=7"),
        "{shown}"
    );
    let bad = qhost(dir.path())
        .args([
            "send",
            "--queue",
            "jobs",
            "--body",
            "x",
            "--attr",
            "n:number=seven",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("`seven` is not a number"));
}
