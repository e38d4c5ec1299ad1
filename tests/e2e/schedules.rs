//! Schedules (`[[schedule]]`) on real hosts: `qhost run` processes sharing a real Redis and a
//! queue of the SQS-compatible server. Each tick's message carries its tick (`qhost-tick`), so
//! counting the target queue's messages per tick shows what the fleet fired: every tick once,
//! through kills, restarts, an outage, a pause and clocks that disagree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use qhost_e2e::harness::{TestEnv, attr, take_all};
use qhost_e2e::processes::HostProcess;
use qhost_e2e::redis_server::{shared_url, unique_namespace};
use qhost_e2e::sqs_server::{
    TEST_ENV, create_queue, endpoint, fleet_host_config, patient_queue, unique,
};

/// A fleet's configuration files: each host consumes `jobs` (the fixture plugin) and runs
/// `schedules`, on Redis namespace `ns`.
struct Fleet {
    env: TestEnv,
    jobs: String,
    ns: String,
}

impl Fleet {
    async fn new(test: &str) -> Self {
        let env = TestEnv::new();
        env.install("fixture", "fixture", "");
        let jobs = unique(&format!("{test}-jobs"));
        create_queue(&jobs, &[]).await;
        create_queue(&format!("{jobs}-dlq"), &[]).await;
        Fleet {
            env,
            jobs,
            ns: unique_namespace(test),
        }
    }

    /// Host `name`'s configuration with `schedules` appended.
    fn config(&self, name: &str, schedules: &str) -> PathBuf {
        let redis = format!(
            "[idempotency]\nkind = \"redis\"\nurl = \"{}\"\nnamespace = \"{}\"",
            shared_url(),
            self.ns
        );
        let path = fleet_host_config(&self.env, name, 4, &redis, (&self.jobs, "fixture"));
        let text = std::fs::read_to_string(&path).expect("the host's configuration") + schedules;
        std::fs::write(&path, text).expect("the host's configuration");
        path
    }
}

/// A schedule every second sending `body` to `queue`, with `more` lines.
fn every_second(name: &str, queue: &str, body: &str, more: &str) -> String {
    format!(
        "\n[[schedule]]\nname = \"{name}\"\ncron = \"* * * * * *\"\nqueue = \"{queue}\"\nbody = \"{body}\"\n{more}\n"
    )
}

/// `qhost --config CONFIG ARGS…` to its end: (success, stdout and stderr).
fn qhost(config: &Path, args: &[&str]) -> (bool, String) {
    let (ok, out, err) = qhost_e2e::processes::run_with_config(config, args);
    (ok, out + &err)
}

/// The messages on `queue` now, counted per `qhost-tick` (taken off the queue; hosts may go on
/// sending while it looks); each one's tick and when the server says it was sent (ms).
async fn ticks(queue: &str, seen: &mut BTreeMap<String, usize>) -> Vec<(String, u64)> {
    let sqs = patient_queue(endpoint());
    let mut sent = Vec::new();
    for m in take_all(&sqs, queue, Duration::ZERO).await {
        let tick = attr(&m, "qhost-tick").expect("a tick's message names its tick");
        *seen.entry(tick.to_string()).or_default() += 1;
        sent.push((tick.to_string(), m.sent_at_ms));
    }
    sent
}

/// The ticks of an every-second schedule from `first` to `last`, as labels.
fn seconds(first: &str, last: &str) -> Vec<String> {
    let (a, b): (jiff::Timestamp, jiff::Timestamp) = (
        first.parse().expect("a tick"),
        last.parse().expect("a tick"),
    );
    (a.as_second()..=b.as_second())
        .map(|s| {
            jiff::Timestamp::from_second(s)
                .expect("a second")
                .to_string()
        })
        .collect()
}

/// The ticks hosts logged sending for a claimant that did not (a host SIGKILLed between its
/// send and the mark that records it: the one way a tick's message goes out twice, under its
/// one key, which a consumer drops).
fn resent(logs: &[String]) -> Vec<String> {
    (logs.iter().flat_map(|l| l.lines()))
        .filter(|l| l.contains("tick sent for the host that claimed it"))
        .filter_map(|l| {
            Some(
                l.split("tick=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .to_string(),
            )
        })
        .collect()
}

/// Asserts every tick from the first seen to the last seen came exactly once (twice only where
/// a host logged sending it again for a claimant killed mid-send); how many ticks.
fn each_once(seen: &BTreeMap<String, usize>, logs: &[String]) -> usize {
    let (first, last) = (
        seen.keys().next().expect("some tick"),
        seen.keys().last().expect("some tick"),
    );
    let again = resent(logs);
    let twice: Vec<_> = (seen.iter())
        .filter(|(t, n)| **n != 1 && !(**n == 2 && again.contains(t)))
        .collect();
    assert!(twice.is_empty(), "ticks sent more than once: {twice:?}");
    let missing: Vec<String> = seconds(first, last)
        .into_iter()
        .filter(|t| !seen.contains_key(t))
        .collect();
    assert!(missing.is_empty(), "ticks never sent: {missing:?}");
    seen.len()
}

/// A number on `qhost schedule list`'s counts line: `N fired`, `N missed` or `N skipped`.
fn count(list: &str, what: &str) -> u64 {
    let line = (list.lines())
        .find(|l| l.trim_start().starts_with("counts:"))
        .unwrap_or_else(|| panic!("no counts in:\n{list}"));
    let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let at = words.iter().position(|w| *w == what).expect("the count");
    words[at - 1].parse().expect("a number")
}

#[tokio::test(flavor = "multi_thread")]
async fn three_hosts_fire_every_tick_once_while_one_at_a_time_is_killed_and_restarted() {
    let fleet = Fleet::new("sched-fleet").await;
    let target = unique("sched-ticks");
    create_queue(&target, &[]).await;
    let schedule = every_second("every-second", &target, "tick", "catch-up-secs = 60");
    let configs: Vec<PathBuf> = (0..3)
        .map(|i| fleet.config(&format!("host-{i}"), &schedule))
        .collect();
    let mut hosts: Vec<Option<HostProcess>> = (configs.iter())
        .map(|c| Some(HostProcess::start_consuming(c)))
        .collect();
    let mut seen = BTreeMap::new();
    let started = Instant::now();
    let (mut kills, mut logs) = (0, Vec::new());
    while started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_secs(4)).await;
        let victim = kills % 3;
        let host = hosts[victim].take().expect("running");
        logs.push(host.kill());
        kills += 1;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        hosts[victim] = Some(HostProcess::start_consuming(&configs[victim]));
        ticks(&target, &mut seen).await;
    }
    // Each log is read once its host has exited: a host that re-sends a tick for a claimant
    // killed 10 s before may do it while the others stop, and its log line is what allows the copy.
    for host in hosts.iter_mut().filter_map(Option::take) {
        logs.push(host.stop_with_log().1);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    ticks(&target, &mut seen).await;
    let n = each_once(&seen, &logs);
    assert!(n >= 55, "a minute of ticks: {n}");
    let firing_hosts = logs.iter().filter(|l| l.contains("tick fired")).count();
    assert!(firing_hosts >= 2, "more than one host process fired ticks");
    let (ok, list) = qhost(&configs[0], &["schedule", "list"]);
    assert!(ok, "{list}");
    assert_eq!(count(&list, "missed"), 0, "none missed:\n{list}");
    println!(
        "schedule fleet: {n} ticks in {:.0} s, each once, {kills} hosts SIGKILLed and restarted",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_outage_ticks_inside_catch_up_fire_once_oldest_first_and_older_ones_are_missed() {
    let fleet = Fleet::new("sched-catch-up").await;
    let (all, latest) = (unique("sched-all"), unique("sched-latest"));
    create_queue(&all, &[]).await;
    create_queue(&latest, &[]).await;
    let schedules = every_second("all", &all, "tick", "catch-up-secs = 8")
        + &every_second(
            "latest",
            &latest,
            "tick",
            "catch-up-secs = 8\ncatch-up-policy = \"latest\"",
        );
    let config = fleet.config("host", &schedules);
    let host = HostProcess::start_consuming(&config);
    tokio::time::sleep(Duration::from_secs(3)).await;
    host.kill();
    let stopped = jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let restarted = jiff::Timestamp::now();
    let host = HostProcess::start_consuming(&config);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = host.stop_with_log().1;

    let mut seen_all = BTreeMap::new();
    ticks(&all, &mut seen_all).await;
    let again = resent(std::slice::from_ref(&log));
    assert!(
        (seen_all.iter()).all(|(t, n)| *n == 1 || (*n == 2 && again.contains(t))),
        "each once: {seen_all:?}"
    );
    // The restarted host logs the newest tick it counted as missed: every tick of the outage up
    // to it was not sent, and the 8 s after it (the catch-up window) were, each once.
    let sec = |t: &str| t.parse::<jiff::Timestamp>().expect("a tick").as_second();
    let newest = (log.lines())
        .find(|l| l.contains("older than the catch-up window") && l.contains("schedule=all"))
        .and_then(|l| l.split("newest=").nth(1)?.split_whitespace().next())
        .map(sec)
        .unwrap_or_else(|| panic!("the missed ticks are logged:\n{log}"));
    let before: Vec<i64> = (seen_all.keys().map(|t| sec(t)))
        .filter(|t| *t <= stopped.as_second())
        .collect();
    let last_before = *before.last().expect("ticks before the outage");
    let sent = |t: i64| {
        seen_all.contains_key(
            &jiff::Timestamp::from_second(t)
                .expect("a second")
                .to_string(),
        )
    };
    let missed_span: Vec<i64> = (last_before + 1..=newest).filter(|t| sent(*t)).collect();
    assert!(
        missed_span.is_empty(),
        "missed ticks were sent: {missed_span:?}"
    );
    let window: Vec<i64> = (newest + 1..=newest + 8).filter(|t| !sent(*t)).collect();
    assert!(
        window.is_empty(),
        "the catch-up window's ticks were all sent: {window:?}"
    );
    assert!(
        newest > stopped.as_second() + 5 && newest < restarted.as_second() + 5,
        "{newest}"
    );
    let gap = (newest + 1..restarted.as_second())
        .filter(|t| sent(*t))
        .count();
    let caught_up: Vec<&str> = (log.lines())
        .filter(|l| l.contains("tick fired") && l.contains("schedule=all"))
        .filter_map(|l| l.split("tick=").nth(1)?.split_whitespace().next())
        .collect();
    let mut sorted = caught_up.clone();
    sorted.sort();
    assert_eq!(caught_up, sorted, "caught up oldest first");

    let mut seen_latest = BTreeMap::new();
    ticks(&latest, &mut seen_latest).await;
    let gap_latest = seen_latest
        .keys()
        .filter(|t| {
            let t: jiff::Timestamp = t.parse().unwrap();
            t > stopped && t < restarted
        })
        .count();
    assert!(
        gap_latest <= 1,
        "latest: only the newest of the outage's ticks: {seen_latest:?}"
    );
    let (ok, list) = qhost(&config, &["schedule", "list"]);
    assert!(ok, "{list}");
    let sections: Vec<&str> = list.split("\nlatest:").collect();
    let missed_all = count(sections[0], "missed");
    // One more when the kill fell between a tick's send and its record (a few ms a second):
    // that tick was sent, and counted missed too.
    let expected = (newest - last_before) as u64;
    assert!(
        missed_all == expected || missed_all == expected + 1,
        "all: the outage's ticks before the window, {last_before} to {newest}:\n{list}"
    );
    let missed_latest = count(sections[1], "missed");
    assert!(
        missed_latest >= 18,
        "latest: every tick but the newest:\n{list}"
    );
    println!(
        "catch-up: {gap} of the outage's ticks fired (all), {missed_all} missed; latest: {gap_latest} fired, {missed_latest} missed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_schedule_fires_nothing_and_a_backfill_fires_exactly_what_it_missed() {
    let fleet = Fleet::new("sched-pause").await;
    let target = unique("sched-paused");
    create_queue(&target, &[]).await;
    let config = fleet.config("a", &every_second("paused", &target, "tick", ""));
    let other = fleet.config("b", &every_second("paused", &target, "tick", ""));
    let hosts = [
        HostProcess::start_consuming(&config),
        HostProcess::start_consuming(&other),
    ];
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ok, out) = qhost(&config, &["schedule", "pause", "paused"]);
    assert!(ok && out.contains("paused"), "{out}");
    let paused_at = jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_millis(1500)).await; // every host follows within a second
    let mut before = BTreeMap::new();
    ticks(&target, &mut before).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut during = BTreeMap::new();
    ticks(&target, &mut during).await;
    assert!(during.is_empty(), "nothing fired while paused: {during:?}");
    let (ok, out) = qhost(&config, &["schedule", "resume", "paused"]);
    assert!(ok && out.contains("resumed"), "{out}");
    let resumed_at = jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for host in hosts {
        host.stop();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut after = BTreeMap::new();
    ticks(&target, &mut after).await;
    assert!(!after.is_empty(), "it fires again once resumed");

    let (from, to) = (
        before.keys().last().unwrap().clone(),
        after.keys().next().unwrap().clone(),
    );
    let (ok, out) = qhost(
        &config,
        &[
            "schedule", "backfill", "paused", "--from", &from, "--to", &to,
        ],
    );
    assert!(ok, "{out}");
    let mut backfilled = BTreeMap::new();
    ticks(&target, &mut backfilled).await;
    let expected: Vec<String> = seconds(&from, &to)[1..]
        .iter()
        .rev()
        .skip(1)
        .rev()
        .cloned()
        .collect();
    let got: Vec<String> = backfilled.keys().cloned().collect();
    assert_eq!(
        got, expected,
        "exactly the ticks it missed, each once:\n{out}"
    );
    assert!(backfilled.values().all(|n| *n == 1));
    let (ok, again) = qhost(
        &config,
        &[
            "schedule", "backfill", "paused", "--from", &from, "--to", &to,
        ],
    );
    assert!(
        ok && again.contains("0 tick(s) fired"),
        "a second backfill fires nothing:\n{again}"
    );
    println!(
        "pause: {} ticks before, none in {:.1} s paused, {} backfilled",
        before.len(),
        resumed_at.duration_since(paused_at).as_secs_f64(),
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn overlap_skip_never_fires_a_tick_while_the_previous_one_runs() {
    let fleet = Fleet::new("sched-overlap").await;
    let (work, sink) = (unique("sched-work"), unique("sched-sink"));
    for q in [&work, &format!("{work}-dlq"), &sink] {
        create_queue(q, &[]).await;
    }
    // The ticks go to a queue this host consumes: the fixture takes three seconds a tick.
    let body = format!("sleep:3000;report:{sink}");
    let schedule = every_second("slow", &work, &body, "overlap = \"skip\"")
        + &format!(
            "\n[[queue]]\nname = \"{work}\"\nplugin = \"fixture\"\nwait-time-secs = 1\nvisibility-timeout-secs = 10\n"
        );
    let config = fleet.config("host", &schedule);
    let host = HostProcess::start_consuming(&config);
    tokio::time::sleep(Duration::from_secs(13)).await;
    let log = host.log();
    let (status, api) = qhost_e2e::admin::get(host.admin_addr(), "/api/schedules");
    assert_eq!(status, 200, "{api}");
    let api: serde_json::Value = serde_json::from_str(&api).expect("JSON");
    assert_eq!(api[0]["name"], "slow", "{api}");
    assert!(
        api[0]["record"]["skipped"].as_u64() >= Some(5),
        "the console's figures: {api}"
    );
    let (_, page) = qhost_e2e::admin::get(host.admin_addr(), "/");
    assert!(
        page.contains("data-schedule=\"slow\""),
        "a panel in the console"
    );
    let (ok, list) = qhost(&config, &["schedule", "list"]);
    host.stop();
    assert!(ok, "{list}");
    let fired: Vec<jiff::Timestamp> = (log.lines())
        .filter(|l| l.contains("tick fired"))
        .filter_map(|l| {
            l.split("tick=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(fired.len() >= 2, "some ticks fired: {fired:?}\n{log}");
    for pair in fired.windows(2) {
        let apart = pair[1].duration_since(pair[0]).as_secs();
        assert!(
            apart >= 3,
            "a tick fired while the previous one ran: {fired:?}"
        );
    }
    let skipped = count(&list, "skipped");
    assert!(skipped >= 6, "the ticks in between were skipped:\n{list}");
    assert!(
        log.contains("tick skipped: the previous tick's message is being handled"),
        "and logged, saying why"
    );
    println!(
        "overlap skip: {} ticks fired at least 3 s apart, {skipped} skipped",
        fired.len()
    );
}

/// Two hosts whose clocks are `ahead_ms` and `behind_ms` off the store's, the ahead one started
/// first (so it is the one that finds the new schedule), the behind one SIGKILLed and restarted
/// part-way: every tick once, none missing from the schedule's first second, and none sent
/// before its time by more than 1 s (the SQS-compatible server's send time against the tick).
/// A tick the killed host claimed and had not sent is sent late by the other host: late is
/// allowed, early is not.
async fn skewed_fleet_fires_on_the_store_s_clock(test: &str, ahead_ms: i64, behind_ms: i64) {
    let fleet = Fleet::new(test).await;
    let target = unique(&format!("{test}-ticks"));
    create_queue(&target, &[]).await;
    let schedule = every_second("skewed", &target, "tick", "catch-up-secs = 60");
    let (a, b) = (fleet.config("a", &schedule), fleet.config("b", &schedule));
    let offset = |ms: i64| [("QHOST_TEST_CLOCK_OFFSET_MS", ms.to_string())];
    let start = |config: &Path, ms: i64| {
        let vars = offset(ms);
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        HostProcess::start_consuming_in(config, &[], &vars)
    };
    let ahead = start(&a, ahead_ms);
    let behind = start(&b, behind_ms);
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mut logs = vec![behind.kill()];
    let mut seen = BTreeMap::new();
    let mut sent = ticks(&target, &mut seen).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let behind = start(&b, behind_ms);
    // Longer than a claim may stay unsent (10 s): a tick the killed host claimed and never sent
    // holds the schedule back until another host sends it, then the ticks after it catch up.
    tokio::time::sleep(Duration::from_secs(12)).await;
    shows_its_skew(&ahead, ahead_ms);
    shows_its_skew(&behind, behind_ms);
    let (ok, list) = qhost(&a, &["schedule", "list"]);
    assert!(ok, "{list}");
    let by_list = skew_in(&list, "that host's clock ");
    assert!(
        [ahead_ms, behind_ms]
            .iter()
            .any(|ms| (by_list - *ms as f64 / 1000.0).abs() < 0.5),
        "`schedule list` shows the firing host's skew beside the lag:\n{list}"
    );
    assert!(
        skew_in(&list, "this machine's clock: ").abs() < 0.5,
        "{list}"
    );
    logs.extend([ahead.stop_with_log().1, behind.stop_with_log().1]);
    sent.extend(ticks(&target, &mut seen).await);
    let n = each_once(&seen, &logs);
    let first = seen.keys().next().expect("some tick");
    assert!(
        n >= 13,
        "{n} ticks from {first}: {seen:?}\n{}",
        logs.join("\n")
    );
    assert_eq!(
        *first,
        first_tick_after(&started_from(&logs)),
        "the schedule's first ticks are sent"
    );
    let early: Vec<(String, i64)> = (sent.iter())
        .map(|(tick, at_ms)| (tick.clone(), tick_ms(tick) - *at_ms as i64))
        .filter(|(_, early_ms)| *early_ms > 1000)
        .collect();
    assert!(
        early.is_empty(),
        "ticks sent before their time (ms early): {early:?}"
    );
    let after: Vec<i64> = sent.iter().map(|(t, at)| *at as i64 - tick_ms(t)).collect();
    println!(
        "clocks {ahead_ms} ms and {behind_ms} ms off: {n} ticks, each once, sent from {} to {} ms after their ticks",
        after.iter().min().unwrap_or(&0),
        after.iter().max().unwrap_or(&0)
    );
}

/// Asserts `host`'s metrics and console show its clock `ms` off the store's (within 0.5 s).
fn shows_its_skew(host: &HostProcess, ms: i64) {
    let want = ms as f64 / 1000.0;
    let (_, metrics) = qhost_e2e::admin::get(host.admin_addr(), "/metrics");
    let metric = (metrics.lines())
        .find_map(|l| l.strip_prefix("qhost_schedule_clock_skew_seconds "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no skew metric:\n{metrics}"));
    assert!((metric - want).abs() < 0.5, "metric {metric}, clock {want}");
    let (_, page) = qhost_e2e::admin::get(host.admin_addr(), "/");
    let console = skew_in(&page, "This host's clock is ");
    assert!(
        (console - want).abs() < 0.5,
        "console {console}, clock {want}"
    );
}

/// The signed seconds written after `label` in `text` (`+4.002 s`).
fn skew_in(text: &str, label: &str) -> f64 {
    (text.split(label).nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` in:\n{text}"))
}

/// Where the fleet started the schedule (`schedule starts`, `from=`), checked against the real
/// time of the log line that says so: the store's clock, whatever the clock of the host that
/// logged it.
fn started_from(logs: &[String]) -> jiff::Timestamp {
    let line = (logs.iter().flat_map(|l| l.lines()))
        .find(|l| l.contains("schedule starts"))
        .unwrap_or_else(|| panic!("no host started the schedule:\n{}", logs.join("\n")));
    let logged: jiff::Timestamp = (line.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("a log line starts with its time: {line}"));
    let from: jiff::Timestamp = (line.split("from=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the line names where it starts: {line}"));
    let gap = from.duration_since(logged).abs();
    assert!(
        gap < jiff::SignedDuration::from_millis(500),
        "the schedule starts at the store's time, not the host's ({gap:?} apart): {line}"
    );
    from
}

/// The label of an every-second schedule's first tick after `t`.
fn first_tick_after(t: &jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second() + 1)
        .expect("a second")
        .to_string()
}

/// A tick's label as milliseconds since the Unix epoch.
fn tick_ms(label: &str) -> i64 {
    label
        .parse::<jiff::Timestamp>()
        .expect("a tick")
        .as_millisecond()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_whose_clocks_are_five_seconds_apart_fire_each_tick_once_and_none_early() {
    skewed_fleet_fires_on_the_store_s_clock("sched-skew", 2500, -2500).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_four_seconds_ahead_and_one_nine_behind_fire_each_tick_on_time() {
    skewed_fleet_fires_on_the_store_s_clock("sched-skew-49", 4000, -9000).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_whose_clock_is_far_off_fires_nothing_and_says_so() {
    let fleet = Fleet::new("sched-far").await;
    let target = unique("sched-far");
    create_queue(&target, &[]).await;
    let config = fleet.config(
        "far",
        &every_second("far", &target, "tick", "max-clock-skew-secs = 5"),
    );
    let host =
        HostProcess::start_consuming_in(&config, &[], &[("QHOST_TEST_CLOCK_OFFSET_MS", "60000")]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = host.log();
    host.stop();
    let mut seen = BTreeMap::new();
    ticks(&target, &mut seen).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert!(log.contains("too far from the store's"), "{log}");
}

/// The venv's `python -m celery …` with tests/support on its path, aimed at `queue`.
fn celery(queue: &str, dir: &Path, out: &Path, args: &[&str]) -> tokio::process::Child {
    let python = qhost_e2e::workspace().join("target/tools/moto/bin/python");
    tokio::process::Command::new(python)
        .envs(TEST_ENV)
        .env("PYTHONPATH", qhost_e2e::workspace().join("tests/support"))
        .env("QHOST_E2E_SQS", endpoint())
        .env("QHOST_E2E_QUEUE", queue)
        .env("QHOST_E2E_OUT", out)
        .args(["-m", "celery"])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{}.log", uuid_of(args)))).expect("log"))
        .kill_on_drop(true)
        .spawn()
        .expect("starting celery")
}

fn uuid_of(args: &[&str]) -> String {
    let what = args.get(2).copied().unwrap_or("celery");
    format!("{what}-{}", uuid::Uuid::new_v4().simple())
}

/// Task ids a Celery worker ran, from its `ID TEXT N` lines, by the text.
fn ran(out: &Path) -> BTreeMap<String, Vec<String>> {
    let mut by_text: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(out).unwrap_or_default().lines() {
        let mut words = line.split(' ');
        if let (Some(id), Some(text)) = (words.next(), words.next()) {
            by_text
                .entry(text.to_string())
                .or_default()
                .push(id.to_string());
        }
    }
    by_text
}

/// The documented mistake, side by side: two `celery beat` processes on one broker, and two
/// qhost hosts running the same every-second schedule as a `celery-task`, for 40 s. A real
/// Celery worker runs what both send. Every beat sends each tick under a task id of its own,
/// so the worker runs it once per beat; qhost's ticks are claimed once across the hosts and
/// carry a task id derived from the tick, so the worker runs each once.
#[tokio::test(flavor = "multi_thread")]
async fn two_celery_beats_fire_each_tick_twice_where_two_qhost_hosts_fire_it_once() {
    let fleet = Fleet::new("sched-beat").await;
    let (beat_q, qhost_q) = (unique("sched-beat"), unique("sched-qhost"));
    create_queue(&beat_q, &[]).await;
    create_queue(&qhost_q, &[]).await;
    let schedule = format!(
        "\n[[schedule]]\nname = \"monthly-reminder\"\ncron = \"* * * * * *\"\n\
         celery-task = \"proj.tasks.record\"\nargs = [\"qhost\"]\nqueue = \"{qhost_q}\"\n"
    );
    let configs = [fleet.config("a", &schedule), fleet.config("b", &schedule)];
    let dir = fleet.env.data_dir();
    std::fs::create_dir_all(&dir).expect("data directory");
    let out = dir.join("ran.txt");
    let queues = format!("{beat_q},{qhost_q}");
    let mut worker = celery(
        &beat_q,
        &dir,
        &out,
        &[
            "-A",
            "celery_worker",
            "worker",
            "-Q",
            &queues,
            "--pool=solo",
            "-l",
            "warning",
        ],
    );
    let started = jiff::Timestamp::now();
    let mut beats: Vec<_> = (0..2)
        .map(|i| {
            let file = dir.join(format!("beat-{i}-schedule"));
            let file = file.to_str().expect("a path");
            celery(
                &beat_q,
                &dir,
                &out,
                &["-A", "celery_beat", "beat", "-s", file, "-l", "info"],
            )
        })
        .collect();
    let hosts: Vec<HostProcess> = configs
        .iter()
        .map(|c| HostProcess::start_consuming(c))
        .collect();
    tokio::time::sleep(Duration::from_secs(40)).await;
    for beat in &mut beats {
        beat.kill().await.ok();
    }
    let logs: Vec<String> = (hosts.into_iter())
        .map(|host| host.stop_with_log().1)
        .collect();
    let seconds = jiff::Timestamp::now().duration_since(started).as_secs();
    tokio::time::sleep(Duration::from_secs(8)).await; // the worker catches up
    worker.kill().await.ok();

    let runs = ran(&out);
    let (beat, ours) = (
        runs.get("beat").cloned().unwrap_or_default(),
        runs.get("qhost").cloned().unwrap_or_default(),
    );
    let distinct = |ids: &[String]| ids.iter().collect::<std::collections::BTreeSet<_>>().len();
    let fired: Vec<usize> = logs
        .iter()
        .map(|l| l.matches("tick fired").count())
        .collect();
    let (ok, list) = qhost(&configs[0], &["schedule", "list"]);
    assert!(ok, "{list}");
    println!(
        "side by side, {seconds} s, a tick a second:\n  two celery beats: {} tasks sent and run, {} distinct task ids: \
         every tick ran about twice, and no consumer can tell the copies apart\n  two qhost hosts: ticks fired {fired:?} \
         (by host), {} tasks run, {} distinct task ids: each tick once",
        beat.len(),
        distinct(&beat),
        ours.len(),
        distinct(&ours)
    );
    assert!(ours.len() >= 30, "the worker ran qhost's ticks: {runs:?}");
    assert_eq!(distinct(&ours), ours.len(), "no qhost tick ran twice");
    // A host logs a tick once it is recorded; one stopped between the two recorded it unlogged.
    let (logged, recorded) = (fired.iter().sum::<usize>() as u64, count(&list, "fired"));
    assert!(
        (logged..=logged + 2).contains(&recorded),
        "{logged} logged:\n{list}"
    );
    assert!(
        ours.len() as u64 <= count(&list, "fired"),
        "every task the worker ran is a tick fired once"
    );
}

/// `qhost check` reads each tick as its queue's consumer would: which plugin and key, or why it
/// would be dead-lettered; and a schedule that cannot be read is refused naming its field.
#[test]
fn check_says_where_each_tick_runs_and_refuses_what_its_queue_would_not_run() {
    let env = TestEnv::new();
    env.install("fixture", "fixture", "");
    let dir = env
        .plugins_dir()
        .parent()
        .expect("the test directory")
        .to_path_buf();
    let base = "[[queue]]\nname = \"jobs\"\nplugin = \"fixture\"\n\n[[queue]]\nname = \"celery\"\n\
                plugin = \"fixture\"\nformat = \"celery\"\n";
    let good = format!("{base}{}", every_second("plain", "jobs", "ack", ""))
        + "\n[[schedule]]\nname = \"reminder\"\ncron = \"0 9 1 * *\"\ntimezone = \"Europe/Berlin\"\n\
           celery-task = \"proj.tasks.cron_monthly_email_reminder\"\n";
    std::fs::write(dir.join("qhost.toml"), &good).expect("config");
    let (code, out, err) = qhost_e2e::processes::run_in(&dir, &["check"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("schedule plain: `* * * * * *` in UTC"),
        "{out}"
    );
    assert!(
        out.contains("runs on plugin fixture, key schedule:plain:"),
        "{out}"
    );
    assert!(
        out.contains("schedule reminder: `0 9 1 * *` in Europe/Berlin, next at "),
        "{out}"
    );

    let refused = format!("{base}{}", every_second("plain", "celery", "hello", ""));
    std::fs::write(dir.join("qhost.toml"), refused).expect("config");
    let (code, out, err) = qhost_e2e::processes::run_in(&dir, &["check"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("which its queue would not run: not a Celery message"),
        "{out}"
    );
    assert!(
        err.contains("1 schedule(s) send ticks their queue would dead-letter"),
        "{err}"
    );

    let zone = good.replace("Europe/Berlin", "Europe/Atlantis");
    std::fs::write(dir.join("qhost.toml"), zone).expect("config");
    let (code, _, err) = qhost_e2e::processes::run_in(&dir, &["check"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("schedule `reminder`: timezone: `Europe/Atlantis` is not a time zone"),
        "{err}"
    );
}
