//! Hostile input and permanent failures, against the embedded queue and against the
//! SQS-compatible server alike: one bad message never stalls its batch, a send that can never
//! succeed is not retried forever, a dead letter always fits, attempts count handler runs, and
//! outbox keys name the plugin that made them.
//!
//! Each case asserts the outcome, the reason text, and that nothing else was lost, run twice
//! or put back (a put-back would delay a message by a visibility timeout or more).

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use qhost::Host;
use qhost::sources::QueueSource;
use qhost::sources::SqsQueue;
use qhost::stores::{Acquired, IdempotencyStore, LeaseRequest, Released};
use qhost::testing::scoped_key as scoped;
use qhost::{Attribute, AttributeValue, Outgoing, Received};
use qhost_e2e::harness::{TestEnv, attr, contents, eventually, run_until_idle};
use qhost_e2e::sqs_server::{
    client, create_bucket, create_queue, drain, endpoint, s3_payloads, sdk_config, unique,
};

/// Where the messages live.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Embedded,
    Sqs,
}

const BOTH: [Backend; 2] = [Backend::Embedded, Backend::Sqs];

/// One test's queues and host on one backend.
struct Setup {
    env: TestEnv,
    backend: Backend,
}

impl Setup {
    fn new(backend: Backend) -> Self {
        Setup {
            env: TestEnv::new(),
            backend,
        }
    }

    /// A queue name for this test, created (with its `-dlq`) on SQS.
    async fn queue(&self, base: &str) -> String {
        match self.backend {
            Backend::Embedded => base.to_string(),
            Backend::Sqs => {
                let name = unique(base);
                create_queue(&name, &[]).await;
                create_queue(&format!("{name}-dlq"), &[]).await;
                name
            }
        }
    }

    fn source(&self) -> Arc<dyn QueueSource> {
        match self.backend {
            Backend::Embedded => Arc::new(self.env.queue()),
            Backend::Sqs => Arc::new(SqsQueue::from_sdk_config(&sdk_config())),
        }
    }

    /// A host consuming `queues` (name, plugin) with a visibility timeout of 5 s.
    async fn host(&self, queues: &[(&str, &str)]) -> Host {
        self.host_with(queues, "").await
    }

    /// As [`Setup::host`], offloading bodies over 1000 bytes to this backend's payload store:
    /// the embedded one, or S3 beside SQS.
    async fn host_with_payloads(&self, queues: &[(&str, &str)]) -> Host {
        let store = match self.backend {
            Backend::Embedded => "store = \"local\"".to_string(),
            Backend::Sqs => format!(
                "store = \"s3\"\nbucket = \"{}\"",
                create_bucket("hostile").await
            ),
        };
        let payload = format!("[payload]\n{store}\nthreshold-bytes = 1000\n");
        let host = self.host_with(queues, &payload).await;
        match self.backend {
            Backend::Embedded => host,
            Backend::Sqs => {
                let config = self.env.config(&payload);
                let payloads = qhost::payloads::open_with_s3(&config, Some(s3_payloads()))
                    .await
                    .expect("payload stores");
                host.with_payloads(payloads)
            }
        }
    }

    async fn host_with(&self, queues: &[(&str, &str)], extra: &str) -> Host {
        let mut text = extra.to_string();
        if let Backend::Sqs = self.backend {
            text.push_str(&format!(
                "[source]\nkind = \"sqs\"\nendpoint-url = \"{}\"\n",
                endpoint()
            ));
        }
        for (name, plugin) in queues {
            text.push_str(&format!(
                "[[queue]]\nname = \"{name}\"\nplugin = \"{plugin}\"\nwait-time-secs = 0\nvisibility-timeout-secs = 5\n"
            ));
        }
        let config = self.env.config(&text);
        match self.backend {
            Backend::Embedded => self.env.host(config).await,
            Backend::Sqs => Host::with_source(config, self.source())
                .await
                .expect("host starts"),
        }
    }

    async fn send(&self, msgs: &[Outgoing]) -> Vec<String> {
        self.source().send(msgs).await.expect("send")
    }

    /// Everything now in `queue` (removed from it on SQS).
    async fn take(&self, queue: &str) -> Vec<Received> {
        match self.backend {
            Backend::Embedded => contents(&self.env.queue(), queue).await,
            Backend::Sqs => drain(queue).await,
        }
    }

    /// The dead letters of `queue`, each with its reason.
    async fn dead_letters(&self, queue: &str) -> Vec<(Received, String)> {
        self.take(&format!("{queue}-dlq"))
            .await
            .into_iter()
            .map(|m| {
                let reason = attr(&m, "qhost-dead-letter-reason")
                    .expect("a reason")
                    .to_string();
                (m, reason)
            })
            .collect()
    }
}

fn binary(name: &str, bytes: &[u8]) -> Attribute {
    Attribute {
        name: name.into(),
        value: AttributeValue::Binary(bytes.to_vec()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_encoding_marker_is_dead_lettered_alone_and_its_batch_runs_at_once() {
    let setup = Setup::new(Backend::Sqs);
    setup.env.install("fixture", "fixture", "");
    let jobs = setup.queue("poison").await;
    let url = create_queue(&jobs, &[]).await;
    // Nine good messages and one that claims a base64 body it does not have, in one batch.
    let marker = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("base64")
        .build()
        .unwrap();
    let entries: Vec<_> = (0..10)
        .map(|i| {
            let entry = SendMessageBatchRequestEntry::builder().id(i.to_string());
            let entry = if i == 4 {
                entry
                    .message_body("this is *not* base64!")
                    .message_attributes("qhost-body-encoding", marker.clone())
            } else {
                entry.message_body(format!("ack {i}"))
            };
            entry.build().unwrap()
        })
        .collect();
    let sent = client()
        .send_message_batch()
        .queue_url(url)
        .set_entries(Some(entries))
        .send()
        .await
        .unwrap();
    assert!(sent.failed().is_empty(), "{:?}", sent.failed());
    let host = setup.host(&[(&jobs, "fixture")]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.dead_lettered, c.retried, c.busy),
        (9, 9, 1, 0, 0),
        "the nine ran once each, at their first delivery: {c:?}"
    );
    let dead = setup.dead_letters(&jobs).await;
    assert_eq!(dead.len(), 1);
    let (letter, reason) = &dead[0];
    assert!(
        reason.starts_with(
            "malformed message: the body is marked `qhost-body-encoding = base64` but is not base64: Invalid symbol"
        ),
        "{reason}"
    );
    assert_eq!(letter.body, b"this is *not* base64!", "kept as it arrived");
    assert!(setup.take(&jobs).await.is_empty());
}

/// The outbox refuses, before anything is committed, what SQS would refuse and what the plugin
/// was not granted; the handler hears why (the fixture rejects with it).
#[tokio::test(flavor = "multi_thread")]
async fn the_outbox_refuses_what_sqs_would_and_what_was_not_granted() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        let jobs = setup.queue("outbox-rules").await;
        let out = setup.queue("granted").await;
        let other = setup.queue("not-granted").await;
        let grant = format!("[outbox]\nqueues = [\"{out}\"]\n");
        setup.env.install("fixture", "fixture", &grant);
        let host = setup.host(&[(&jobs, "fixture")]).await;
        let bodies = [
            format!("attrs:{out}:7"),
            format!("attrs:{out}:8"),
            format!("send:{other}:hello"),
        ];
        let msgs: Vec<_> = bodies
            .iter()
            .map(|b| Outgoing::new(&jobs, b.as_str()))
            .collect();
        setup.send(&msgs).await;

        run_until_idle(&host).await;

        let c = host.stats().total();
        assert_eq!(
            (c.invoked, c.acked, c.dead_lettered, c.retried),
            (3, 1, 2, 0),
            "{backend:?}: {c:?}"
        );
        let sent = setup.take(&out).await;
        assert_eq!(sent.len(), 1, "{backend:?}");
        assert_eq!(sent[0].body, [0xff, 0x00, 0xfe], "{backend:?}");
        assert_eq!(
            sent[0].attributes.len(),
            9,
            "{backend:?}: seven of the plugin's and two of qhost's (the base64 marker hidden)"
        );
        let mut reasons: Vec<String> = setup
            .dead_letters(&jobs)
            .await
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        reasons.sort();
        assert_eq!(
            reasons,
            vec![
                format!(
                    "outbox refused: a message to `{out}` has 11 attributes (one of them the base64 marker a binary body needs); SQS allows 10"
                ),
                format!(
                    "outbox refused: this plugin may not send to queue `{other}` (its manifest's [outbox] queues must name it)"
                ),
            ],
            "{backend:?}"
        );
        assert!(setup.take(&other).await.is_empty(), "{backend:?}");
        assert!(setup.take(&jobs).await.is_empty(), "{backend:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outbox_to_a_missing_queue_is_dead_lettered_with_sqs_word_not_retried() {
    let setup = Setup::new(Backend::Sqs);
    setup.env.install("fixture", "fixture", "");
    let jobs = setup.queue("to-nowhere").await;
    let missing = unique("never-created");
    let host = setup.host(&[(&jobs, "fixture")]).await;
    let body = format!("send:{missing}:hello");
    setup.send(&[Outgoing::new(&jobs, body.as_str())]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!((c.invoked, c.dead_lettered, c.retried), (1, 1, 0), "{c:?}");
    let dead = setup.dead_letters(&jobs).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].1,
        format!("the outbox could not be sent: queue `{missing}` does not exist")
    );
    assert!(setup.take(&jobs).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_with_a_binary_body_and_five_attributes_fits() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        // Keyed by an attribute the message lacks: dead-lettered without running.
        let manifest = "[idempotency]\nkey = \"attribute:job-id\"\n";
        setup.env.install("fixture", "fixture", manifest);
        let jobs = setup.queue("binary-dead").await;
        let host = setup.host(&[(&jobs, "fixture")]).await;
        let mut msg = Outgoing::new(&jobs, vec![0xff, 0x00, 0x01, 0x80]);
        msg.attributes = (0..4)
            .map(|i| Attribute::string(format!("a{i}"), "v"))
            .chain([binary("blob", &[0, 1, 2])])
            .collect();
        setup.send(&[msg]).await;

        run_until_idle(&host).await;

        let dead = setup.dead_letters(&jobs).await;
        assert_eq!(dead.len(), 1, "{backend:?}");
        let (letter, reason) = &dead[0];
        assert!(
            reason.starts_with(
                "idempotency key source `attribute:job-id` is missing from the message"
            ),
            "{backend:?}: {reason}"
        );
        assert_eq!(letter.body, [0xff, 0x00, 0x01, 0x80], "{backend:?}");
        let folded = attr(letter, "qhost-original-attributes").expect("folded originals");
        for name in ["a0", "a3", "blob"] {
            assert!(
                folded.contains(&format!("\"{name}\"")),
                "{backend:?}: {folded}"
            );
        }
        assert_eq!(host.stats().total().invoked, 0, "{backend:?}");
        assert!(setup.take(&jobs).await.is_empty(), "{backend:?}");
    }
}

/// After many put-backs while its key was leased elsewhere, a message whose handler fails once
/// is retried, not dead-lettered: attempts count handler runs, not deliveries.
#[tokio::test(flavor = "multi_thread")]
async fn put_backs_while_busy_use_up_no_attempts() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        // Two attempts: one failure must not be the last.
        let manifest = "[limits]\nmax-attempts = 2\n";
        setup.env.install("fixture", "fixture", manifest);
        let jobs = setup.queue("outage").await;
        let seen = setup.queue("outage-seen").await;
        // Fails while its fencing token is below 3, so only at its first run: the test's
        // own lease below is token 1, the host's first run token 2.
        let body = format!("fail-below-fence:3;send:{seen}:done");
        let ids = setup.send(&[Outgoing::new(&jobs, body.as_str())]).await;
        let store = setup.env.store();
        let key = scoped("qhost", "fixture", &ids[0]);
        // Held until the host has put the message back at least once, however slowly the
        // host starts; then the test lets it go untouched, as an owner that did not run would.
        let request = LeaseRequest {
            key,
            ttl: Duration::from_secs(60),
            window: Duration::from_secs(60),
        };
        let held = store.acquire(&[request]).await.unwrap();
        let lease = match &held[0] {
            Ok(Acquired::Granted(lease)) => lease.clone(),
            other => panic!("{other:?}"),
        };
        let host = setup.host(&[(&jobs, "fixture")]).await;

        let release_once_busy = async {
            let what = format!("{backend:?}: the host finds the key busy");
            eventually(Duration::from_secs(120), &what, async || {
                host.stats().total().busy > 0
            })
            .await;
            store.release(&lease, Released::NotRun).await.unwrap();
        };
        tokio::join!(run_until_idle(&host), release_once_busy);

        let c = host.stats().total();
        assert!(c.busy >= 1, "{backend:?}: put back while leased: {c:?}");
        assert_eq!(
            (c.invoked, c.retried, c.acked, c.dead_lettered),
            (2, 1, 1, 0),
            "{backend:?}: one failed run, one good one: {c:?}"
        );
        assert_eq!(setup.take(&seen).await.len(), 1, "{backend:?}");
        assert!(setup.dead_letters(&jobs).await.is_empty(), "{backend:?}");
    }
}

/// Two plugins that share a business key, both sending to one queue: their messages carry
/// different derived keys, so the consumer downstream runs both.
#[tokio::test(flavor = "multi_thread")]
async fn two_plugins_sharing_a_key_do_not_suppress_each_other_downstream() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        let keyed = "[idempotency]\nkey = \"attribute:job-id\"\n";
        setup.env.install("billing", "fixture", keyed);
        setup.env.install("shipping", "fixture", keyed);
        setup.env.install("audit", "fixture", "");
        let (a, b) = (
            setup.queue("billing-in").await,
            setup.queue("shipping-in").await,
        );
        let down = setup.queue("audit-in").await;
        let host = setup
            .host(&[(&a, "billing"), (&b, "shipping"), (&down, "audit")])
            .await;
        let job = Attribute::string("job-id", "order-7");
        let body = format!("send:{down}:ack");
        let msgs: Vec<_> = [&a, &b]
            .iter()
            .map(|q| Outgoing::new(q.as_str(), body.as_str()).with_attribute(job.clone()))
            .collect();
        setup.send(&msgs).await;

        run_until_idle(&host).await;

        let counts = host.stats().snapshot();
        let audit = counts
            .get(&(down.clone(), "audit".to_string()))
            .expect("audit ran");
        assert_eq!(
            (audit.invoked, audit.duplicates),
            (2, 0),
            "{backend:?}: both messages ran downstream: {audit:?}"
        );
        let c = host.stats().total();
        assert_eq!((c.acked, c.duplicates), (4, 0), "{backend:?}: {c:?}");
    }
}

/// A fixture body of `len` bytes (offloaded, over the threshold) that sends `seen` to `sink`.
fn big_body(sink: &str, len: usize) -> Vec<u8> {
    let mut body = format!("send:{sink}:seen;").into_bytes();
    body.resize(len, b'x');
    body
}

/// A duplicate whose pointer leads to another message's payload acks without running, and
/// deletes nothing: the other message then runs with its payload.
#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_pointing_at_another_messages_payload_deletes_nothing() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        let keyed = "[idempotency]\nkey = \"attribute:job-id\"\n";
        setup.env.install("fixture", "fixture", keyed);
        let jobs = setup.queue("payload-thief").await;
        let sink = setup.queue("payload-sink").await;
        let host = setup.host_with_payloads(&[(&jobs, "fixture")]).await;
        let job = |id: &str| Attribute::string("job-id", id);
        setup
            .send(&[Outgoing::new(&jobs, "ack").with_attribute(job("j-1"))])
            .await;
        run_until_idle(&host).await;

        let real = Outgoing::new(&jobs, big_body(&sink, 3000)).with_attribute(job("j-2"));
        let offloaded = qhost::testing::payloads(&host)
            .offload_all("qhost", 0, vec![real])
            .await
            .expect("offload")
            .remove(0);
        assert!(qhost::testing::is_pointer(&offloaded.attributes));
        // Completed work's key, with the other message's pointer.
        let mut thief = offloaded.clone();
        thief.attributes.retain(|a| a.name != "job-id");
        thief.attributes.push(job("j-1"));
        setup.send(&[thief]).await;
        run_until_idle(&host).await;
        setup.send(&[offloaded]).await;
        run_until_idle(&host).await;

        let c = host.stats().total();
        assert_eq!(
            (c.invoked, c.acked, c.duplicates, c.dead_lettered),
            (2, 2, 1, 0),
            "{backend:?}: {c:?}"
        );
        let seen = setup.take(&sink).await;
        assert_eq!(
            seen.len(),
            1,
            "{backend:?}: the real message ran with its payload"
        );
        assert_eq!(seen[0].body, b"seen", "{backend:?}");
    }
}

/// A plugin keyed by the body is keyed by the payload, not by its pointer: an offloaded copy
/// of done work is a duplicate. `body-sha256` takes the digest a qhost pointer carries, so the
/// copy is recognised without fetching (here its payload is already gone).
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_keyed_by_the_body_is_keyed_by_the_payload_not_its_pointer() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        setup
            .env
            .install("by-id", "fixture", "[idempotency]\nkey = \"json:/id\"\n");
        setup.env.install(
            "by-sha",
            "fixture",
            "[idempotency]\nkey = \"body-sha256\"\n",
        );
        let (ids, shas) = (
            setup.queue("keyed-json").await,
            setup.queue("keyed-sha").await,
        );
        let host = setup
            .host_with_payloads(&[(&ids, "by-id"), (&shas, "by-sha")])
            .await;
        let json = |pad: usize| format!(r#"{{"id":"order-9","pad":"{}"}}"#, "p".repeat(pad));
        let sha_body = "x".repeat(3000);
        setup
            .send(&[
                Outgoing::new(&ids, json(10).as_str()),
                Outgoing::new(&shas, sha_body.as_str()),
            ])
            .await;
        run_until_idle(&host).await;

        let copies = vec![
            Outgoing::new(&ids, json(3000).as_str()),
            Outgoing::new(&shas, sha_body.as_str()),
        ];
        let copies = qhost::testing::payloads(&host)
            .offload_all("qhost", 0, copies)
            .await
            .expect("offload");
        assert!(
            copies
                .iter()
                .all(|m| qhost::testing::is_pointer(&m.attributes))
        );
        qhost::testing::payloads(&host)
            .cleanup(&copies[1].body, &copies[1].attributes)
            .await;
        setup.send(&copies).await;
        run_until_idle(&host).await;

        let c = host.stats().total();
        assert_eq!(
            (c.invoked, c.duplicates, c.dead_lettered),
            (2, 2, 0),
            "{backend:?}: both copies recognised as done: {c:?}"
        );
    }
}

/// A completed key that comes again with another body is reported, and dead-lettered when the
/// plugin says `on-conflict = "reject"`; the same body again is a plain duplicate.
#[tokio::test(flavor = "multi_thread")]
async fn a_done_key_with_another_body_is_reported_or_rejected() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        let keyed = "[idempotency]\nkey = \"attribute:job-id\"\n";
        setup.env.install("lenient", "fixture", keyed);
        let strict = format!("{keyed}on-conflict = \"reject\"\n");
        setup.env.install("strict", "fixture", &strict);
        let (a, b) = (
            setup.queue("lenient-in").await,
            setup.queue("strict-in").await,
        );
        let host = setup.host(&[(&a, "lenient"), (&b, "strict")]).await;
        let job = Attribute::string("job-id", "j-1");
        let first: Vec<_> = [&a, &b]
            .iter()
            .map(|q| Outgoing::new(q.as_str(), "ack").with_attribute(job.clone()))
            .collect();
        setup.send(&first).await;
        run_until_idle(&host).await;
        let again: Vec<_> = [&a, &a, &b]
            .iter()
            .zip(["ack", "ack:changed", "ack:changed"])
            .map(|(q, body)| Outgoing::new(q.as_str(), body).with_attribute(job.clone()))
            .collect();
        setup.send(&again).await;
        run_until_idle(&host).await;

        let counts = host.stats().snapshot();
        let of = |q: &str, p: &str| counts[&(q.to_string(), p.to_string())];
        let (lenient, strict) = (of(&a, "lenient"), of(&b, "strict"));
        assert_eq!(
            (
                lenient.invoked,
                lenient.duplicates,
                lenient.conflicts,
                lenient.dead_lettered
            ),
            (1, 2, 1, 0),
            "{backend:?}: {lenient:?}"
        );
        assert_eq!(
            (strict.invoked, strict.conflicts, strict.dead_lettered),
            (1, 1, 1),
            "{backend:?}: {strict:?}"
        );
        let dead = setup.dead_letters(&b).await;
        assert_eq!(dead.len(), 1, "{backend:?}");
        let ran = qhost_e2e::sha256_hex(b"ack");
        let this = qhost_e2e::sha256_hex(b"ack:changed");
        assert_eq!(
            dead[0].1,
            format!(
                "key `j-1` was completed on a body with sha256 {ran}, and this one's is {this}"
            ),
            "{backend:?}"
        );
        assert!(setup.dead_letters(&a).await.is_empty(), "{backend:?}");
    }
}

/// On the embedded queue a message whose stored attributes cannot be read (a database written
/// by something else) is dead-lettered alone; the rest of its batch runs.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_embedded_row_is_dead_lettered_alone() {
    let setup = Setup::new(Backend::Embedded);
    setup.env.install("fixture", "fixture", "");
    let bodies = ["ack 1", "poison", "ack 2"];
    let msgs: Vec<_> = bodies.iter().map(|b| Outgoing::new("jobs", *b)).collect();
    setup.send(&msgs).await;
    let db =
        rusqlite::Connection::open(qhost::testing::database_in(&setup.env.data_dir())).unwrap();
    db.execute(
        "UPDATE messages SET attributes = '{not json' WHERE body = ?1",
        [b"poison".as_slice()],
    )
    .unwrap();
    let host = setup.host(&[("jobs", "fixture")]).await;

    run_until_idle(&host).await;

    let c = host.stats().total();
    assert_eq!(
        (c.invoked, c.acked, c.dead_lettered, c.retried),
        (2, 2, 1, 0),
        "{c:?}"
    );
    let dead = setup.dead_letters("jobs").await;
    assert_eq!(dead.len(), 1);
    assert!(
        dead[0]
            .1
            .starts_with("malformed message: its attributes cannot be read"),
        "{}",
        dead[0].1
    );
    assert_eq!(dead[0].0.body, b"poison");
}

/// A pointer declaring more than `payload.max-bytes` is dead-lettered without a fetch.
#[tokio::test(flavor = "multi_thread")]
async fn a_pointer_declaring_10_gib_is_dead_lettered_without_fetching() {
    for backend in BOTH {
        let setup = Setup::new(backend);
        setup.env.install("fixture", "fixture", "");
        let jobs = setup.queue("huge-pointer").await;
        let host = setup.host_with_payloads(&[(&jobs, "fixture")]).await;
        let size = 10u64 << 30;
        let sha = "0".repeat(64);
        let body = format!(
            r#"["qhost.payload.v1",{{"store":"local","key":"k","size":{size},"sha256":"{sha}"}}]"#
        );
        let msg = Outgoing::new(&jobs, body.as_str())
            .with_attribute(Attribute::number("qhost-payload-size", size));
        setup.send(&[msg]).await;

        run_until_idle(&host).await;

        let dead = setup.dead_letters(&jobs).await;
        assert_eq!(dead.len(), 1, "{backend:?}");
        assert!(
            dead[0].1.ends_with(
                "declares 10737418240 bytes, over the 67108864-byte limit (payload.max-bytes)"
            ),
            "{backend:?}: {}",
            dead[0].1
        );
        assert_eq!(host.stats().total().invoked, 0, "{backend:?}");
    }
}
