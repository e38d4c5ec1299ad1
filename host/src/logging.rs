//! Log output: text for people (the default), or one JSON object per line for log pipelines
//! (`QHOST_LOG_FORMAT=json`), each carrying the spans it was logged in (`spans`: the delivery's
//! queue and message id, the handler call's plugin and version) beside its own fields; a
//! handler's line repeats those at the top level, where log pipelines look for them.
//! How much is logged is decided in this order: the command line's verbosity (`-v`, `--quiet`),
//! then `QHOST_LOG`, then the command's own default: `info` for `qhost run` (a host's lines are
//! its record), `warn` for one-shot commands (they print what they did; a log line there is
//! news). The AWS configuration chain's own warnings are left out below `-vv`: a missing region
//! or credentials is one error of qhost's that says where it looked.

use tracing_subscriber::EnvFilter;

/// Whether log lines are JSON objects (set by [`init`]): there, a handler's line repeats its
/// span's fields at the top level, where log pipelines look for them; in text the span prefix
/// already shows them. The flag is the runtime's, which writes handlers' lines.
pub(crate) fn is_json() -> bool {
    qhost_runtime::logs_json()
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

/// What a command's log lines are to its user, which sets what it logs by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Voice {
    /// Its record (`qhost run`): `info`.
    Host,
    /// A handler's run that the user watches (`qhost invoke`): warnings, and the handler's own
    /// lines from `info` up. The pipeline it runs through says only errors: how the run ended
    /// (a dead letter, a retry) is the command's own output.
    Handler,
    /// A one-shot command whose output says what happened: warnings only (the pipeline's, for
    /// `replay` and `test`, errors only, as for `invoke`).
    Command,
}

/// How much to log, as the command line and the command decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    /// Errors only (`--quiet`), whatever `QHOST_LOG` says.
    Quiet,
    /// `QHOST_LOG` if set, else the command's default (see [`Voice`]).
    Default(Voice),
    /// `-v` (`info`), `-vv` (`debug`), `-vvv` (`trace`), whatever `QHOST_LOG` says.
    Verbose(u8),
}

impl Verbosity {
    /// The filter directives this verbosity picks, given `QHOST_LOG`'s value.
    pub(crate) fn directives(self, env: Option<&str>) -> String {
        const QUIET_AWS: &str = ",aws_config=error,aws_runtime=error";
        // `invoke`, `replay` and `test` run messages through the host's pipeline, whose
        // warnings (a dead letter sent, a retry) are what their own output reports.
        const QUIET_PIPELINE: &str = ",qhost::pipeline=error";
        match (self, env.map(str::trim).filter(|v| !v.is_empty())) {
            (Verbosity::Quiet, _) => "error".into(),
            (Verbosity::Verbose(1), _) => format!("info{QUIET_AWS}"),
            (Verbosity::Verbose(2), _) => "debug".into(),
            (Verbosity::Verbose(_), _) => "trace".into(),
            (Verbosity::Default(_), Some(env)) => env.into(),
            (Verbosity::Default(Voice::Host), None) => format!("info{QUIET_AWS}"),
            (Verbosity::Default(Voice::Handler), None) => {
                format!("warn,qhost::plugin=info{QUIET_PIPELINE}{QUIET_AWS}")
            }
            (Verbosity::Default(Voice::Command), None) => {
                format!("warn{QUIET_PIPELINE}{QUIET_AWS}")
            }
        }
    }
}

/// Installs the process's logger.
pub fn init(format: LogFormat, verbosity: Verbosity) {
    qhost_runtime::set_logs_json(format == LogFormat::Json);
    let env = std::env::var("QHOST_LOG").ok();
    let directives = verbosity.directives(env.as_deref());
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("warning: QHOST_LOG `{directives}` is not a log filter ({e}); using `info`");
        EnvFilter::new("info")
    });
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

    #[test]
    fn flags_beat_qhost_log_which_beats_the_command_s_default() {
        let host = Verbosity::Default(Voice::Host);
        let one_shot = Verbosity::Default(Voice::Command);
        let invoke = Verbosity::Default(Voice::Handler);
        assert!(host.directives(None).starts_with("info,"));
        assert!(
            one_shot
                .directives(None)
                .starts_with("warn,qhost::pipeline=error,aws")
        );
        assert!(
            invoke
                .directives(None)
                .starts_with("warn,qhost::plugin=info,qhost::pipeline=error,"),
            "the handler's own lines, not the pipeline's"
        );
        assert_eq!(invoke.directives(Some("error")), "error");
        assert_eq!(one_shot.directives(Some("debug")), "debug");
        assert_eq!(one_shot.directives(Some("  ")), one_shot.directives(None));
        assert_eq!(Verbosity::Quiet.directives(Some("debug")), "error");
        assert!(
            Verbosity::Verbose(1)
                .directives(Some("warn"))
                .starts_with("info,")
        );
        assert_eq!(Verbosity::Verbose(2).directives(None), "debug");
        assert_eq!(Verbosity::Verbose(7).directives(None), "trace");
    }
}
