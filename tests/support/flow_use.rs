//! What the flow tests and the flow bench read off a fleet (docs/flow.md): how much of a
//! concurrency limit a key's runs used, and each host's waits and put-backs by flow key.

use std::time::Duration;

use crate::admin::get;
use crate::api_server::Recorded;
use crate::processes::HostProcess;

/// How much of a concurrency `limit` `requests` used: their run time (each took `run` at the
/// API) over the span from the first's start to the last's end, times the limit.
pub fn limit_used(requests: &[Recorded], run: Duration, limit: usize) -> f64 {
    let (Some(first), Some(last)) = (requests.first(), requests.last()) else {
        return 0.0;
    };
    let span = (last.at + run).duration_since(first.at).as_secs_f64();
    requests.len() as f64 * run.as_secs_f64() / (span * limit as f64)
}

/// Each host's flow keys as its console lists them: (messages that waited, put back over
/// the limit, store calls made for waiting messages), added up across hosts.
pub fn waits<'a>(hosts: impl IntoIterator<Item = &'a HostProcess>) -> (u64, u64, u64) {
    let (mut waited, mut put_back, mut asks) = (0, 0, 0);
    for host in hosts {
        let (status, body) = get(host.admin_addr(), "/api/flow");
        assert_eq!(status, 200, "{body}");
        let keys: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        for key in keys.as_array().expect("a list") {
            waited += key["waited"].as_u64().expect("waited");
            put_back += key["flow_limited"].as_u64().expect("flow_limited");
            asks += key["wait_asks"].as_u64().expect("wait_asks");
        }
    }
    (waited, put_back, asks)
}
