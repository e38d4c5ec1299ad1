//! Celery's own producer, unchanged, sending to SQS (moto, on loopback) through kombu's SQS
//! transport, and qhost consuming that queue with `format = "celery"`: each task runs once
//! through a Rust plugin, whatever serializer or compression sent it, a second publish of a
//! task id runs nothing, a countdown waits, an expired task is dropped, a time limit caps the
//! run, and what qhost will not
//! run (pickle, a task the queue does not route, a message that is not Celery's) is
//! dead-lettered with why while everything else flows.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qhost::sources::SqsQueue;
use qhost::{Host, Received};
use qhost_e2e::harness::{Running, TestEnv, attr};
use qhost_e2e::sqs_server::{TEST_ENV, collect, create_queue, drain, endpoint, sdk_config, unique};
use serde_json::Value;

/// The test venv's Python, with tests/support (`celery_app.py`, the scripts) on its path.
fn python() -> Command {
    let mut python = Command::new(qhost_e2e::workspace().join("target/tools/moto/bin/python"));
    python
        .envs(TEST_ENV)
        .env("PYTHONPATH", qhost_e2e::workspace().join("tests/support"));
    python
}

/// Runs `file`, a script in tests/support, with `args`; its stdout (it must exit 0).
fn run_script(file: &str, args: &[&str]) -> Vec<u8> {
    let path = qhost_e2e::workspace().join("tests/support").join(file);
    stdout_of(python().arg(path).args(args), file)
}

/// Runs Python `code` with `args` as its `sys.argv[1:]`; its stdout (it must exit 0).
fn run_code(code: &str, args: &[&str]) -> Vec<u8> {
    stdout_of(python().args(["-c", code]).args(args), "python -c")
}

fn stdout_of(command: &mut Command, what: &str) -> Vec<u8> {
    let out = command.output().expect("running Python");
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs Celery's producer (tests/support/celery_producer.py): its task ids by case.
fn produce(queue: &str, sink: &str) -> BTreeMap<String, String> {
    let out = run_script("celery_producer.py", &[endpoint(), queue, sink]);
    serde_json::from_slice(&out).expect("the producer's ids")
}

/// A queue named after `name`, its dead-letter queue and a sink, created on the server.
async fn queues(name: &str) -> (String, String, String) {
    let (queue, sink) = (unique(name), unique(&format!("{name}-done")));
    let dlq = format!("{queue}-dlq");
    for q in [&queue, &dlq, &sink] {
        create_queue(q, &[]).await;
    }
    (queue, dlq, sink)
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_from_celery_s_own_producer_run_once_each_and_the_rest_is_dead_lettered() {
    let env = TestEnv::new();
    let (queue, dlq, sink) = queues("celery").await;
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{sink}\"]\n[limits]\nmax-attempts = 1\n"),
    );
    let ids = produce(&queue, &sink);
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
         tasks = {{ \"proj.tasks.echo\" = \"fixture\" }}\naccept-content = [\"json\", \"msgpack\"]\n\
         wait-time-secs = 1\nvisibility-timeout-secs = 5\n",
        endpoint()
    ));
    let host = Host::with_source(config, Arc::new(SqsQueue::from_sdk_config(&sdk_config())))
        .await
        .expect("host starts");
    let running = Running::start(host);

    let ran = collect(&sink, 5).await;
    let dead = collect(&dlq, 4).await;
    running
        .wait_for(Duration::from_secs(10), |h| {
            let c = h.stats().total();
            c.expired == 1 && c.duplicates == 1
        })
        .await;
    let host = running.stop().await;

    // Each task the queue routes ran once, whatever serializer or compression sent it.
    let tasks = by_id(&ran);
    assert_eq!(ran.len(), 5, "{tasks:#?}");
    assert_eq!(tasks.len(), 5, "no task ran twice: {tasks:#?}");
    for case in ["plain", "countdown", "msgpack", "zlib", "when"] {
        assert!(tasks.contains_key(&ids[case]), "{case} ran: {tasks:#?}");
    }
    let plain = &tasks[&ids["plain"]];
    assert_eq!(plain["task"], "proj.tasks.echo");
    assert_eq!(plain["args"][1], 1);
    assert_eq!(plain["kwargs"]["month"], "2026-12");
    assert_eq!(tasks[&ids["msgpack"]]["args"][1], 3);
    assert_eq!(tasks[&ids["zlib"]]["args"][1], 4);
    assert_eq!(
        tasks[&ids["when"]]["args"][1], "2026-12-02T10:00:00+00:00",
        "kombu's datetime tag reaches the handler as its ISO string"
    );
    assert!(
        tasks[&ids["countdown"]]["eta"].is_string(),
        "the countdown became an eta the host waited for"
    );

    // What qhost will not run is dead-lettered with why; the expired task is dropped unrun.
    let mut reasons: Vec<String> = (dead.iter())
        .map(|m| {
            attr(m, "qhost-dead-letter-reason")
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    reasons.sort();
    assert_eq!(reasons.len(), 4, "{reasons:#?}");
    assert!(
        (reasons.iter()).any(|r| r.contains("plugin timed out after 1s")),
        "the task's time limit, not the plugin's 10 s: {reasons:#?}"
    );
    assert!(reasons.iter().any(|r| r.contains("pickle")), "{reasons:#?}");
    assert!(
        (reasons.iter()).any(
            |r| r.contains("task `proj.tasks.nobody_routes_this` is not one this queue routes")
        ),
        "{reasons:#?}"
    );
    assert!(
        (reasons.iter()).any(|r| r.contains("not a Celery message")),
        "{reasons:#?}"
    );
    // A dead letter is the message as Celery sent it, so a redrive sends Celery's message back.
    let unrouted = (dead.iter()).find_map(|m| {
        qhost::inspect_celery(&m.body, None)
            .ok()
            .filter(|r| r.id == ids["unknown"])
    });
    assert!(
        unrouted.is_some(),
        "the unrouted task's dead letter is its Celery message"
    );
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.duplicates, c.expired, c.dead_lettered),
        (6, 5, 1, 1, 4),
        "{c:?}"
    );
    assert!(drain(&queue).await.is_empty(), "nothing left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn celery_inspect_reads_a_message_celery_sent_and_says_where_a_queue_routes_it() {
    let env = TestEnv::new();
    let queue = unique("celery-inspect");
    create_queue(&queue, &[]).await;
    let ids = produce(&queue, "unused");
    let plain = (drain(&queue).await.into_iter())
        .find(|m| qhost::inspect_celery(&m.body, None).is_ok_and(|r| r.id == ids["plain"]))
        .expect("the plain task");
    std::fs::create_dir_all(env.data_dir()).unwrap();
    let file = env.data_dir().join("message.txt");
    std::fs::write(&file, &plain.body).unwrap();
    let config = env.config_file(&format!(
        "[[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
         tasks = {{ \"proj.tasks.other\" = \"fixture\" }}\n"
    ));
    let out = Command::new(qhost_e2e::processes::qhost_binary())
        .arg("--config")
        .arg(&config)
        .args(["celery", "inspect"])
        .arg(&file)
        .args(["--queue", &queue])
        .envs(qhost_e2e::processes::qhost_env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "task      proj.tasks.echo".to_string(),
        format!("key       {}", ids["plain"]),
        "kwargs    {\"month\":\"2026-12\"}".to_string(),
        "plugin    none (not routed: the queue routes proj.tasks.other and has no default plugin; it would be dead-lettered)".to_string(),
    ] {
        assert!(stdout.lines().any(|l| l == line), "`{line}` in:\n{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_celery_caller_waiting_on_a_result_gets_the_handler_s_value_and_a_rejection_is_re_raised()
{
    let env = TestEnv::new();
    let queue = unique("celery-results");
    create_queue(&queue, &[]).await;
    create_queue(&format!("{queue}-dlq"), &[]).await;
    env.install("fixture", "fixture", "");
    let redis = "redis://127.0.0.1:6379/0";
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [celery]\nresult-backend = \"{redis}\"\nresult-expires-secs = 600\n\
         [[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
         tasks = {{ \"proj.tasks.echo\" = \"fixture\" }}\nwait-time-secs = 1\n",
        endpoint()
    ));
    let host = Host::with_source(config, Arc::new(SqsQueue::from_sdk_config(&sdk_config())))
        .await
        .expect("host starts");
    let running = Running::start(host);

    let script = qhost_e2e::workspace().join("tests/support/celery_caller.py");
    let caller = tokio::process::Command::from(python())
        .arg(script)
        .args([endpoint(), &queue, redis])
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), caller)
        .await
        .expect("the caller got its results in time")
        .expect("running the Celery caller");
    running.stop().await;
    assert!(
        out.status.success(),
        "caller: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: BTreeMap<String, Value> = (String::from_utf8_lossy(&out.stdout).lines())
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .map(|v| (v["case"].as_str().unwrap().to_string(), v))
        .collect();

    let acked = &answers["acked"];
    assert_eq!(
        (&acked["state"], &acked["value"]),
        (&"SUCCESS".into(), &Value::Null),
        "{acked}"
    );
    let valued = &answers["valued"];
    assert_eq!(
        (&valued["state"], &valued["value"]),
        (
            &"SUCCESS".into(),
            &serde_json::json!({"sent": 2, "to": ["a@example.com"]})
        ),
        "the handler's result value: {valued}"
    );
    let unvalued = &answers["unvalued"];
    assert_eq!(unvalued["raised"], "TaskRejected", "{unvalued}");
    assert!(
        (unvalued["message"].as_str().unwrap()).contains("the result value is not JSON"),
        "the handler was told why its value was refused: {unvalued}"
    );
    let rejected = &answers["rejected"];
    assert_eq!(rejected["state"], "FAILURE", "{rejected}");
    assert_eq!(rejected["raised"], "TaskRejected", "{rejected}");
    assert!(
        rejected["message"]
            .as_str()
            .unwrap()
            .contains("no such customer"),
        "{rejected}"
    );
    let mut conn = qhost_e2e::redis_server::connect(redis).await;
    let id = acked["id"].as_str().unwrap();
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("celery-task-meta-{id}"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        (500..=600).contains(&ttl),
        "kept for result-expires-secs: {ttl}"
    );
}

/// A result record that cannot be written when its task completes (the result backend is
/// down) is not lost: it was committed with the completion, the message comes back, finds the
/// task complete with the record pending, and writes it then. The task does not run again.
#[tokio::test(flavor = "multi_thread")]
async fn a_result_record_the_backend_missed_is_written_on_redelivery_without_running_again() {
    let env = TestEnv::new();
    let (queue, dlq, sink) = queues("celery-pending").await;
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{sink}\"]\n"),
    );
    let mut backend = qhost_e2e::redis_server::RedisServer::start();
    let url = backend.url();
    backend.kill();
    let script = r#"
import sys
from celery_app import app_for
app, sink = app_for(sys.argv[1], sys.argv[2]), sys.argv[3]
print(app.send_task("proj.tasks.echo", args=[f"result:42;echo:{sink}"]).id)
"#;
    let out = run_code(script, &[endpoint(), &queue, &sink]);
    let id = String::from_utf8(out).unwrap().trim().to_string();
    let extra = format!("[celery]\nresult-backend = \"{url}\"\n");
    let running = Running::start(celery_host(celery_config(&env, &queue, &extra)).await);
    running
        .wait_for(Duration::from_secs(30), |h| h.stats().total().invoked == 1)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await; // its record's write fails meanwhile
    backend.restart();

    let mut conn = qhost_e2e::redis_server::connect(&url).await;
    let deadline = Instant::now() + Duration::from_secs(40);
    let record = loop {
        let record: Option<String> = (redis::cmd("GET").arg(format!("celery-task-meta-{id}")))
            .query_async(&mut conn)
            .await
            .unwrap();
        match record {
            Some(record) => break record,
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            None => panic!("the record was never written"),
        }
    };
    let host = running.stop().await;
    let record: Value = serde_json::from_str(&record).unwrap();
    assert_eq!(
        (&record["status"], &record["result"]),
        (&"SUCCESS".into(), &Value::from(42))
    );
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.dead_lettered),
        (1, 1, 0),
        "ran once: {c:?}"
    );
    assert!(c.duplicates >= 1, "the redelivery found it complete: {c:?}");
    let sent = [collect(&sink, 1).await, drain(&sink).await].concat();
    assert_eq!(
        sent.len(),
        1,
        "its outbox went once, after the record: {sent:#?}"
    );
    assert!(drain(&dlq).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_monthly_reminder_task_runs_once_in_python_however_often_it_is_sent() {
    let env = TestEnv::new();
    let (queue, sent) = (unique("reminders-celery"), unique("sent-emails"));
    for q in [&queue, &format!("{queue}-dlq"), &sent] {
        create_queue(q, &[]).await;
    }
    let manifest = qhost_e2e::guest_manifest("email-reminder-py").replace("sent-emails", &sent);
    env.install_bytes(
        "email-reminder",
        &qhost_e2e::guest_bytes("email-reminder-py"),
        &manifest,
    );
    // The seed's producer: the same reminder task sent twice under one id (a retried web
    // request), and another customer's.
    let script = r#"
import json, sys
from celery_app import app_for
app = app_for(sys.argv[1], sys.argv[2])
remind = lambda tid, email, who: app.send_task("tasks.cron_monthly_email_reminder", task_id=tid,
    kwargs={"email": email, "customer": who, "month": "2026-12"}).id
print(json.dumps([remind("a9e5a73a", "a@example.com", "A"), remind("a9e5a73a", "a@example.com", "A"),
                  remind(None, "b@example.com", "B")]))
"#;
    let out = run_code(script, &[endpoint(), &queue]);
    let ids: Vec<String> = serde_json::from_slice(&out).unwrap();
    let redis = "redis://127.0.0.1:6379/0";
    let mut conn = qhost_e2e::redis_server::connect(redis).await;
    let meta = |id: &str| format!("celery-task-meta-{id}");
    // The seed's id is fixed: forget an earlier run's record of it.
    let _: () = (redis::cmd("DEL").arg(meta(&ids[0])).arg(meta(&ids[2])))
        .query_async(&mut conn)
        .await
        .unwrap();
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [celery]\nresult-backend = \"{redis}\"\nresult-expires-secs = 600\n\
         [[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
         tasks = {{ \"tasks.cron_monthly_email_reminder\" = \"email-reminder\" }}\n\
         wait-time-secs = 1\n",
        endpoint()
    ));
    let host = Host::with_source(config, Arc::new(SqsQueue::from_sdk_config(&sdk_config())))
        .await
        .expect("host starts");
    let running = Running::start(host);
    let emails = collect(&sent, 2).await;
    running
        .wait_for(Duration::from_secs(10), |h| {
            h.stats().total().duplicates == 1
        })
        .await;
    let host = running.stop().await;

    let mut ids_mailed: Vec<String> = (emails.iter())
        .map(|m| {
            let email: Value = serde_json::from_slice(&m.body).unwrap();
            email["message-id"].as_str().unwrap().to_string()
        })
        .collect();
    ids_mailed.sort();
    let expected_of = |id: &str| format!("<{id}@reminders.qhost>");
    let mut expected = vec![expected_of(&ids[0]), expected_of(&ids[2])];
    expected.sort();
    assert_eq!(ids_mailed, expected, "one email per task id, keyed by it");
    for (id, message_id) in [
        (&ids[0], &expected_of(&ids[0])),
        (&ids[2], &expected_of(&ids[2])),
    ] {
        let record: String = (redis::cmd("GET").arg(meta(id)))
            .query_async(&mut conn)
            .await
            .unwrap();
        let record: Value = serde_json::from_str(&record).unwrap();
        assert_eq!(
            (&record["status"], &record["result"]),
            (
                &"SUCCESS".into(),
                &serde_json::json!({"message-id": message_id})
            ),
            "the Python handler's return value, for a caller's get(): {record}"
        );
    }
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.duplicates, c.dead_lettered),
        (2, 2, 1, 0),
        "{c:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_a_handler_sends_runs_on_a_celery_worker() {
    let env = TestEnv::new();
    let (jobs, tasks) = (unique("jobs"), unique("celery-tasks"));
    for q in [&jobs, &format!("{jobs}-dlq"), &tasks] {
        create_queue(q, &[]).await;
    }
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\ncelery = [\"{tasks}\"]\n"),
    );
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [[queue]]\nname = \"{jobs}\"\nplugin = \"fixture\"\nwait-time-secs = 1\n",
        endpoint()
    ));
    let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config()));
    let send = format!(
        r#"send:{tasks}:{{"task": "proj.tasks.record", "args": ["from qhost"], "kwargs": {{"n": 7}}}}"#
    );
    qhost::sources::QueueSource::send(sqs.as_ref(), &[qhost::Outgoing::new(&jobs, send)])
        .await
        .expect("sent");
    let host = Host::with_source(config, sqs).await.expect("host starts");
    qhost_e2e::harness::run_until_idle(&host).await;
    assert_eq!(host.stats().total().acked, 1);

    std::fs::create_dir_all(env.data_dir()).unwrap();
    let out = env.data_dir().join("ran.txt");
    let mut worker = tokio::process::Command::from(python())
        .env("QHOST_E2E_SQS", endpoint())
        .env("QHOST_E2E_QUEUE", &tasks)
        .env("QHOST_E2E_OUT", &out)
        .args([
            "-m",
            "celery",
            "-A",
            "celery_worker",
            "worker",
            "-Q",
            &tasks,
            "--pool=solo",
            "-l",
            "warning",
        ])
        .current_dir(env.data_dir())
        .kill_on_drop(true)
        .spawn()
        .expect("starting a Celery worker");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut ran = String::new();
    while ran.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        ran = std::fs::read_to_string(&out).unwrap_or_default();
    }
    worker.kill().await.ok();
    let lines: Vec<&str> = ran.lines().collect();
    assert_eq!(lines.len(), 1, "the worker ran it once: {ran:?}");
    let (id, rest) = lines[0].split_once(' ').unwrap();
    assert_eq!(rest, "from qhost 7");
    assert_eq!(id.len(), 36, "a task id as Celery's: {id}");
}

/// The seed's duplicate: two workers on one queue, a task slower than the visibility timeout.
/// The heartbeat keeps the message hidden and the lease held while it runs, so the other worker
/// never runs it, and a copy the producer sends again finds it leased or completed.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_task_on_two_hosts_runs_once_past_its_visibility_timeout() {
    let env = TestEnv::new();
    let (queue, _, sink) = queues("celery-slow").await;
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{sink}\"]\n"),
    );
    let script = r#"
import sys
from celery_app import app_for
app, sink = app_for(sys.argv[1], sys.argv[2]), sys.argv[3]
tid = app.send_task("proj.tasks.echo", args=[f"sleep:4000;echo:{sink}"]).id
app.send_task("proj.tasks.echo", args=[f"sleep:4000;echo:{sink}"], task_id=tid)
print(tid)
"#;
    run_code(script, &[endpoint(), &queue, &sink]);
    let namespace = qhost_e2e::redis_server::unique_namespace("celery-slow");
    let config = env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n\
         [idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{namespace}\"\n\
         [[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
         tasks = {{ \"proj.tasks.echo\" = \"fixture\" }}\n\
         wait-time-secs = 1\nvisibility-timeout-secs = 2\n",
        endpoint(),
        qhost_e2e::redis_server::shared_url()
    ));
    let mut hosts = Vec::new();
    for _ in 0..2 {
        let sqs = Arc::new(SqsQueue::from_sdk_config(&sdk_config()));
        let host = Host::with_source(config.clone(), sqs)
            .await
            .expect("host starts");
        hosts.push(Running::start(host));
    }
    let ran = collect(&sink, 1).await;
    // Long enough for a redelivery past the 2 s visibility, had the heartbeat not held it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ran: Vec<Received> = ran.into_iter().chain(drain(&sink).await).collect();
    let mut invoked = 0;
    for running in hosts {
        invoked += running.stop().await.stats().total().invoked;
    }
    assert_eq!(ran.len(), 1, "the task ran once across both hosts");
    assert_eq!(invoked, 1);
}

/// The configuration of a host consuming Celery queue `queue` on the SQS-compatible server,
/// its `proj.tasks.echo` run by the fixture; `extra` adds to it (a `[payload]` section).
fn celery_config(env: &TestEnv, queue: &str, extra: &str) -> qhost::Config {
    env.config(&format!(
        "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n{extra}\n\
         [[queue]]\nname = \"{queue}\"\nformat = \"celery\"\n\
         tasks = {{ \"proj.tasks.echo\" = \"fixture\" }}\n\
         wait-time-secs = 1\nvisibility-timeout-secs = 10\n",
        endpoint()
    ))
}

/// A host on `config`, consuming SQS.
async fn celery_host(config: qhost::Config) -> Host {
    Host::with_source(config, Arc::new(SqsQueue::from_sdk_config(&sdk_config())))
        .await
        .expect("host starts")
}

/// The tasks that ran, by id, from what the fixture echoed to a sink.
fn by_id(ran: &[Received]) -> BTreeMap<String, Value> {
    (ran.iter())
        .map(|m| {
            let task: Value = serde_json::from_slice(&m.body).expect("the task as JSON");
            let id = task["id"].as_str().expect("the task's id").to_string();
            (id, task)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn celery_s_chains_and_callbacks_carry_on_once_from_a_task_qhost_ran() {
    let env = TestEnv::new();
    let (queue, dlq, sink) = queues("celery-chain").await;
    // The plugin may send Celery tasks back to its own queue: where an unrouted chain goes on.
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{sink}\"]\ncelery = [\"{queue}\"]\n"),
    );
    let out = run_script("celery_workflows.py", &[endpoint(), &queue, &sink]);
    let ids: BTreeMap<String, String> = serde_json::from_slice(&out).expect("the ids");
    let running = Running::start(celery_host(celery_config(&env, &queue, "")).await);

    let ran = collect(&sink, 6).await;
    let dead = collect(&dlq, 1).await;
    running
        .wait_for(Duration::from_secs(10), |h| h.stats().total().acked == 6)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // time for a second copy, if one came
    let host = running.stop().await;
    let ran = [ran, drain(&sink).await].concat();

    let tasks = by_id(&ran);
    assert_eq!(ran.len(), 6, "each ran once: {tasks:#?}");
    for case in ["first", "second", "parent", "returns", "given"] {
        assert!(
            tasks.contains_key(&ids[case]),
            "{case} ran under its id: {tasks:#?}"
        );
    }
    let second = &tasks[&ids["second"]];
    assert_eq!(second["args"][1], "second");
    assert_eq!(
        (&second["parent_id"], &second["root_id"]),
        (
            &Value::from(ids["first"].as_str()),
            &Value::from(ids["first"].as_str())
        ),
        "the chain's next task names the first as parent and root"
    );
    let linked: Vec<&Value> = tasks
        .values()
        .filter(|t| t["args"][1] == "linked")
        .collect();
    assert_eq!(linked.len(), 1, "the callback ran once: {tasks:#?}");
    assert_eq!(linked[0]["parent_id"], Value::from(ids["parent"].as_str()));
    let given = &tasks[&ids["given"]]["args"];
    assert_eq!(
        (&given[0], &given[1]),
        (&Value::from(format!("echo:{sink}")), &Value::from("given")),
        "the first's return value goes first in the second's arguments"
    );

    // The chain whose next step goes where the plugin may not send: refused before it ran.
    assert_eq!(dead.len(), 1, "{dead:#?}");
    let why = attr(&dead[0], "qhost-dead-letter-reason").unwrap_or_default();
    assert!(
        why.contains("to queue `proj-elsewhere`, and plugin `fixture` may not send Celery tasks"),
        "{why}"
    );
    assert!(!tasks.contains_key(&ids["before"]));
    let c = host.stats().total();
    assert_eq!((c.invoked, c.acked, c.dead_lettered), (6, 6, 1), "{c:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_queue_s_tasks_run_once_each_though_kombu_dedups_nothing() {
    let env = TestEnv::new();
    let queue = format!("{}.fifo", unique("celery-fifo"));
    let sink = unique("celery-fifo-done");
    create_queue(&queue, &[]).await;
    create_queue(&queue.replace(".fifo", "-dlq.fifo"), &[]).await;
    create_queue(&sink, &[]).await;
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{sink}\"]\n"),
    );
    // kombu sends to a FIFO queue in group "default" with a random deduplication id, so SQS
    // takes the second publish of one id as a new message: qhost's lease is what keeps it once.
    let code = "import json, sys\n\
                from celery_app import app_for\n\
                app = app_for(sys.argv[1], sys.argv[2])\n\
                say = 'echo:' + sys.argv[3]\n\
                ids = [app.send_task('proj.tasks.echo', args=[say, n]).id for n in range(3)]\n\
                app.send_task('proj.tasks.echo', args=[say, 0], task_id=ids[0])\n\
                print(json.dumps(ids))";
    let out = run_code(code, &[endpoint(), &queue, &sink]);
    let ids: Vec<String> = serde_json::from_slice(&out).expect("the ids");
    let running = Running::start(celery_host(celery_config(&env, &queue, "")).await);
    let ran = collect(&sink, 3).await;
    running
        .wait_for(Duration::from_secs(10), |h| {
            h.stats().total().duplicates == 1
        })
        .await;
    let host = running.stop().await;
    let ran = [ran, drain(&sink).await].concat();

    let order: Vec<String> = (ran.iter())
        .map(|m| serde_json::from_slice::<Value>(&m.body).expect("a task")["id"].to_string())
        .collect();
    let sent: Vec<String> = ids.iter().map(|id| format!("\"{id}\"")).collect();
    assert_eq!(order, sent, "each ran once, in the group's order");
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.duplicates, c.dead_lettered),
        (3, 1, 0),
        "{c:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_600_kb_argument_offloaded_by_the_extended_client_runs_once() {
    use qhost_e2e::sqs_server::{create_bucket, object_keys, s3_payloads};
    let env = TestEnv::new();
    let (queue, _, sink) = queues("celery-large").await;
    let (theirs, ours) = (
        create_bucket("celery-producer").await,
        create_bucket("qhost").await,
    );
    env.install(
        "fixture",
        "fixture",
        &format!("[outbox]\nqueues = [\"{sink}\"]\n"),
    );
    let out = run_script("celery_large.py", &[endpoint(), &queue, &sink, &theirs]);
    let id = String::from_utf8_lossy(&out).trim().to_string();
    assert_eq!(
        object_keys(&theirs).await.len(),
        2,
        "the client offloaded both publishes"
    );

    let payload = format!(
        "[payload]\nstore = \"s3\"\nbucket = \"{ours}\"\nprefix = \"qhost/\"\n\
         allow = [\"s3://{theirs}/\"]\n"
    );
    let config = celery_config(&env, &queue, &payload);
    let payloads = qhost::payloads::open_with_s3(&config, Some(s3_payloads()))
        .await
        .expect("payload stores");
    let running = Running::start(celery_host(config).await.with_payloads(payloads));
    let ran = collect(&sink, 1).await;
    running
        .wait_for(Duration::from_secs(20), |h| {
            let c = h.stats().total();
            c.acked + c.duplicates == 2
        })
        .await;
    let host = running.stop().await;

    assert_eq!(ran.len(), 1, "one run for the id {id}");
    // The fixture's digest: LENGTH:FNV:ATTRIBUTES of the task it was given, whole.
    let digest = String::from_utf8_lossy(&ran[0].body).to_string();
    let length: usize = digest.split(':').next().unwrap().parse().expect("a length");
    assert!(
        length > 600_000,
        "the handler got the whole argument: {digest}"
    );
    assert!(digest.contains("celery-id"), "{digest}");
    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.duplicates, c.dead_lettered),
        (1, 1, 0),
        "{c:?}"
    );
}
