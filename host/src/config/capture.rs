//! A queue's `capture`: a sample of the messages its plugins handle, written as recorded
//! messages (the format `qhost replay` reads) under the data directory, for trying a new
//! version on real traffic before it serves.
//!
//! ```toml
//! [[queue]]
//! name = "reminders"
//! plugin = "email-reminder"
//! capture = { every = 100 }                       # every 100th handled message
//! # capture = { percent = 2.5, max-bytes = 1048576 }   # or a share of message ids
//! ```
//!
//! Off unless asked for. `max-bytes` (default 64 MiB) caps what the capture keeps on disk.

use serde::Deserialize;

/// Default cap on the bytes a queue's capture keeps.
const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// The smallest cap: room for a few messages of SQS's largest size.
const MIN_MAX_BYTES: u64 = 4 << 20;

/// `capture` as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct RawCapture {
    pub every: Option<u64>,
    pub percent: Option<f64>,
    pub max_bytes: Option<u64>,
}

/// Which handled messages are written.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sample {
    /// Every n-th one a host handles on the queue.
    Every(u64),
    /// Those whose message id hashes under this share (0 to 1): the same ids on every host.
    Share(f64),
}

/// A queue's checked capture.
#[derive(Clone, Debug, PartialEq)]
pub struct CaptureConfig {
    /// Which messages.
    pub sample: Sample,
    /// The most the capture keeps on disk, in bytes, across its two files.
    pub max_bytes: u64,
}

impl Eq for CaptureConfig {}

/// Checks `raw`; `field` names the queue's `capture` in errors.
pub(crate) fn capture(field: &str, raw: &RawCapture) -> anyhow::Result<CaptureConfig> {
    let sample = match (raw.every, raw.percent) {
        (Some(_), Some(_)) => anyhow::bail!("{field}: give `every` or `percent`, not both"),
        (None, None) => anyhow::bail!("{field}: give `every` (every n-th message) or `percent`"),
        (Some(0), None) => anyhow::bail!("{field}.every must be at least 1"),
        (Some(n), None) => Sample::Every(n),
        (None, Some(p)) if p > 0.0 && p <= 100.0 => Sample::Share(p / 100.0),
        (None, Some(p)) => anyhow::bail!("{field}.percent is {p}: above 0, at most 100"),
    };
    let max_bytes = raw.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    if max_bytes < MIN_MAX_BYTES {
        anyhow::bail!("{field}.max-bytes is {max_bytes}: at least {MIN_MAX_BYTES} (4 MiB)");
    }
    Ok(CaptureConfig { sample, max_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(text: &str) -> anyhow::Result<CaptureConfig> {
        let raw: RawCapture = toml::from_str(text)?;
        capture("queue[0].capture", &raw)
    }

    #[test]
    fn a_sample_and_a_cap_are_read_and_nonsense_is_refused_by_name() {
        let every = checked("every = 10").unwrap();
        assert_eq!(
            every,
            CaptureConfig {
                sample: Sample::Every(10),
                max_bytes: 64 << 20
            }
        );
        let share = checked("percent = 2.5\nmax-bytes = 8388608").unwrap();
        assert_eq!(
            (share.sample, share.max_bytes),
            (Sample::Share(0.025), 8 << 20)
        );
        for (text, expected) in [
            ("", "give `every` (every n-th message) or `percent`"),
            ("every = 1\npercent = 5.0", "not both"),
            ("every = 0", "queue[0].capture.every must be at least 1"),
            ("percent = 0.0", "queue[0].capture.percent is 0"),
            ("percent = 101.0", "queue[0].capture.percent is 101"),
            (
                "every = 2\nmax-bytes = 10",
                "queue[0].capture.max-bytes is 10",
            ),
        ] {
            let e = checked(text).unwrap_err().to_string();
            assert!(
                e.contains(expected),
                "`{text}`: expected `{expected}` in {e}"
            );
        }
        let typo = toml::from_str::<RawCapture>("evry = 3").unwrap_err();
        assert!(typo.to_string().contains("unknown field `evry`"));
    }
}
