//! What deploys qhost: the container image (`Containerfile`, built by `scripts/image` with
//! podman from the binary these tests run, on an empty base) starts as a non-root user with no
//! shell, serves `/healthz` and the console, runs the demo plugin on the embedded queue once
//! per key, and drains on SIGTERM as PID 1; and the Kubernetes manifests in `deploy/kubernetes`
//! pass `kubernetes-validate` against the Kubernetes schemas.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use qhost_e2e::admin::wait_for;

/// podman's global flags that work inside a container as well as on a host: the vfs storage
/// driver (no overlay on overlay), runc on cgroupfs (crun refuses a hybrid cgroup layout; no
/// systemd) and events in a file.
const PODMAN_FLAGS: &str =
    "--runtime runc --storage-driver vfs --cgroup-manager cgroupfs --events-backend file";

fn podman() -> Command {
    let mut podman = Command::new("podman");
    podman.args(PODMAN_FLAGS.split(' '));
    podman
}

/// `podman run`, with limits a container may set without raising the machine's own (a
/// process without CAP_SYS_RESOURCE cannot raise its hard limits, which podman's defaults do).
fn podman_run() -> Command {
    let mut run = podman();
    run.args([
        "run",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
    ]);
    run
}

fn ok(command: &mut Command, what: &str) -> Output {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A directory the container's user (10001) may write to.
fn shared_dir(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(path).expect("a directory");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).expect("its mode");
}

/// Removes the container and the image when the test ends, however it ends.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = podman().args(["rm", "-f", &self.container]).output();
        let _ = podman().args(["rmi", "-f", &self.image]).output();
    }
}

#[test]
fn the_image_runs_the_demo_plugin_as_a_non_root_user_and_drains_on_sigterm() {
    let root = qhost_e2e::workspace();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let image = format!("localhost/qhost-test:{}", &id[..12]);
    let container = format!("qhost-test-{}", &id[..12]);
    let _cleanup = Cleanup {
        container: container.clone(),
        image: image.clone(),
    };
    let mut build = Command::new(root.join("scripts/image"));
    build
        .arg(&image)
        .env("QHOST_BINARY", qhost_e2e::processes::qhost_binary())
        .env("QHOST_PODMAN_FLAGS", PODMAN_FLAGS);
    ok(&mut build, "scripts/image");

    let inspect = ok(
        podman().args([
            "image",
            "inspect",
            "--format",
            "{{.Config.User}} {{json .Config.Entrypoint}}",
            &image,
        ]),
        "podman image inspect",
    );
    let inspected = String::from_utf8_lossy(&inspect.stdout);
    assert_eq!(inspected.trim(), r#"10001:10001 ["/usr/local/bin/qhost"]"#);
    let shell = podman_run()
        .args([
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "/bin/sh",
            &image,
            "-c",
            "true",
        ])
        .output()
        .unwrap();
    assert!(!shell.status.success(), "the image has no shell");

    let dir = tempfile::tempdir().unwrap();
    let (plugins, data, config) = (
        dir.path().join("plugins"),
        dir.path().join("data"),
        dir.path().join("config"),
    );
    for d in [&plugins, &data, &config] {
        shared_dir(d);
    }
    std::fs::write(
        plugins.join("email-reminder.wasm"),
        qhost_e2e::plugin_bytes("email-reminder"),
    )
    .unwrap();
    std::fs::copy(
        root.join("plugins/email-reminder/qhost.toml"),
        plugins.join("email-reminder.toml"),
    )
    .unwrap();
    let volumes = [
        format!("{}:/plugins:ro", plugins.display()),
        format!("{}:/data", data.display()),
        format!("{}:/config:ro", config.display()),
    ];
    let with_volumes = |command: &mut Command| {
        for v in &volumes {
            command.args(["-v", v]);
        }
    };

    // The seed's duplicate: one reminder sent twice, by the image's own `qhost send`.
    let reminder =
        r#"{"reminder-id":"r1","email":"a@example.com","customer":"A","month":"2026-12"}"#;
    let mut send = podman_run();
    send.args(["--rm", "--network", "none"]);
    with_volumes(&mut send);
    send.args([
        &image,
        "send",
        "--queue",
        "reminders",
        "--body",
        reminder,
        "--copies",
        "2",
    ]);
    ok(&mut send, "qhost send in the image");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut run = podman_run();
    run.args(["-d", "--name", &container, "--network", "host"])
        .args(["-e", &format!("QHOST_ADMIN_LISTEN=127.0.0.1:{port}")]);
    with_volumes(&mut run);
    run.arg(&image);
    ok(&mut run, "podman run");
    let admin: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let healthy = std::panic::catch_unwind(|| {
        wait_for(admin, "/healthz", Duration::from_secs(120), |status, _| {
            status == 200
        })
    });
    if let Err(panic) = healthy {
        let logs = podman().args(["logs", &container]).output();
        let state = podman()
            .args(["inspect", "--format", "{{json .State}}", &container])
            .output();
        eprintln!("the container's state: {state:?}\nits logs: {logs:?}");
        std::panic::resume_unwind(panic);
    }
    let (_, queues) = wait_for(
        admin,
        "/api/queues",
        Duration::from_secs(60),
        |status, body| {
            let v: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
            status == 200 && v[0]["totals"]["acked"] == 1 && v[0]["totals"]["duplicate"] == 1
        },
    );
    assert!(queues.contains("\"name\":\"reminders\""), "{queues}");

    ok(
        podman().args(["stop", "-t", "30", &container]),
        "podman stop",
    );
    let state = ok(
        podman().args(["inspect", "--format", "{{.State.ExitCode}}", &container]),
        "podman inspect",
    );
    assert_eq!(
        String::from_utf8_lossy(&state.stdout).trim(),
        "0",
        "SIGTERM drained and exited 0"
    );
    let logs = ok(podman().args(["logs", &container]), "podman logs");
    let summary = String::from_utf8_lossy(&logs.stdout);
    assert_eq!(
        qhost_e2e::processes::summary_column(&summary, "reminders", "acked"),
        1,
        "the summary it printed on the way out: {summary}"
    );
}

#[test]
fn the_kubernetes_manifests_pass_the_kubernetes_schemas() {
    let root = qhost_e2e::workspace();
    let validate = root.join("target/tools/moto/bin/kubernetes-validate");
    let dir = root.join("deploy/kubernetes");
    let out = Command::new(&validate)
        .args(["--strict", "--kubernetes-version", "1.33"])
        .arg(dir.join("configmap.yaml"))
        .arg(dir.join("deployment.yaml"))
        .output()
        .expect("kubernetes-validate (scripts/install-test-tools installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    for file in ["configmap.yaml", "deployment.yaml"] {
        assert!(said.contains(&format!("{file} passed")), "{said}");
    }
    // The check can fail: the same Deployment with a field of the wrong type does.
    let scratch = tempfile::tempdir().unwrap();
    let broken = scratch.path().join("deployment.yaml");
    let deployment = std::fs::read_to_string(dir.join("deployment.yaml")).unwrap();
    std::fs::write(&broken, deployment.replace("replicas: 2", "replicas: two")).unwrap();
    let refused = Command::new(&validate)
        .arg("--strict")
        .arg(&broken)
        .output()
        .unwrap();
    assert!(!refused.status.success(), "a wrong manifest is refused");
    // KEDA's ScaledObject is a custom resource, not in the Kubernetes schemas: it must name
    // the Deployment it scales and the queue its trigger reads.
    let scaled = std::fs::read_to_string(dir.join("scaledobject.yaml")).unwrap();
    for needed in [
        "kind: ScaledObject",
        "name: qhost",
        "type: aws-sqs-queue",
        "queueURL:",
    ] {
        assert!(scaled.contains(needed), "scaledobject.yaml: {needed}");
    }
    // The ConfigMap's qhost.toml is qhost's configuration (its token, which the pod reads
    // from the environment, given here as text).
    let config = std::fs::read_to_string(dir.join("configmap.yaml")).unwrap();
    let embedded = config
        .split("qhost.toml: |\n")
        .nth(1)
        .expect("the qhost.toml key");
    let toml: Vec<&str> = embedded
        .lines()
        .map(|l| l.strip_prefix("    ").unwrap_or(l))
        .collect();
    let toml = toml.join("\n").replace(
        r#"{ env = "QHOST_ADMIN_TOKEN" }"#,
        r#""a-token-for-this-test""#,
    );
    let parsed = qhost::Config::parse(&toml).unwrap_or_else(|e| panic!("qhost.toml: {e:#}"));
    assert_eq!(parsed.queues[0].name, "reminders");
    assert_eq!(parsed.admin_listen, Some("0.0.0.0:9464".parse().unwrap()));
}
