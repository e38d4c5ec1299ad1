//! Log output: text for people (the default), or one JSON object per line for log pipelines
//! (`QHOST_LOG_FORMAT=json`), each carrying the spans it was logged in (`spans`: the delivery's
//! queue and message id, the handler call's plugin and version) beside its own fields; a
//! handler's line repeats those at the top level, where log pipelines look for them.
//! `QHOST_LOG` filters either way (`info` by default, with the AWS configuration chain's own
//! warnings left out: a missing region or credentials is one error of qhost's that says where it
//! looked).

use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::EnvFilter;

/// Whether the process logs JSON (set by [`init`]).
static JSON: AtomicBool = AtomicBool::new(false);

/// Whether log lines are JSON objects: there, a handler's line repeats its span's fields at the
/// top level, where log pipelines look for them; in text the span prefix already shows them.
pub(crate) fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// The variable that picks the format.
pub(crate) const FORMAT_VAR: &str = "QHOST_LOG_FORMAT";

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The format `value` names (`text` or `json`), or why it names none.
    pub(crate) fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None | Some("") | Some("text") => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some(other) => Err(format!(
                "{FORMAT_VAR} is `{other}`; it must be `text` or `json`"
            )),
        }
    }

    /// The format `QHOST_LOG_FORMAT` names.
    pub fn from_env() -> Result<Self, String> {
        Self::parse(std::env::var(FORMAT_VAR).ok().as_deref())
    }
}

/// Installs the process's logger.
pub fn init(format: LogFormat) {
    JSON.store(format == LogFormat::Json, Ordering::Relaxed);
    let filter = EnvFilter::try_from_env("QHOST_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,aws_config=error,aws_runtime=error"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_text_unless_json_is_asked_for() {
        assert_eq!(LogFormat::parse(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some("text")), Ok(LogFormat::Text));
        assert_eq!(LogFormat::parse(Some(" json ")), Ok(LogFormat::Json));
        let err = LogFormat::parse(Some("yaml")).unwrap_err();
        assert!(err.contains("QHOST_LOG_FORMAT is `yaml`"), "{err}");
    }
}
