//! The guest's own words for a trap: what its language runtime printed to stderr, cut down to
//! the error a handler author recognises.
//!
//! A handler that throws traps its instance, and the runtime's stderr then holds the exception
//! and, after it, the plumbing of the trap itself: componentize-py's "Python function threw an
//! unexpected exception" panic, a Rust panic's `RUST_BACKTRACE` note, SpiderMonkey's abort
//! redirect. The dead-letter reason gets the error line and where it was raised; the log gets
//! the whole stderr, less componentize-py's panic after a Python traceback (its runtime's
//! plumbing, not the handler's words).

/// The error in `stderr`, for the languages whose shape is known: a Python traceback, a
/// JavaScript error with its `Stack:`, a Rust panic. `None` when none is recognised.
pub(crate) fn guest_error(stderr: &str) -> Option<String> {
    python(stderr)
        .or_else(|| javascript(stderr))
        .or_else(|| rust(stderr))
}

/// `stderr` for the log: after a Python traceback, componentize-py's own panic (`thread
/// '<unnamed>' panicked at runtime/src/lib.rs…`, its message and the `RUST_BACKTRACE` note) is
/// left out. Anything else is kept as it is.
pub(crate) fn for_the_log(stderr: &str) -> String {
    if !stderr.contains("Traceback (most recent call last):") {
        return stderr.to_string();
    }
    let mut out = Vec::new();
    let mut lines = stderr.lines();
    while let Some(line) = lines.next() {
        if line.contains("panicked at runtime/src/lib.rs") {
            for rest in lines.by_ref() {
                if rest.starts_with("note: run with `RUST_BACKTRACE") {
                    break;
                }
            }
            continue;
        }
        out.push(line);
    }
    out.join("\n").trim_end().to_string()
}

/// `TypeError: … (app.py line 33, in handle)` from the last traceback.
fn python(stderr: &str) -> Option<String> {
    let start = stderr.rfind("Traceback (most recent call last):")?;
    let block: Vec<&str> = stderr[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let error = block.iter().rev().find(|l| !l.starts_with(' '))?.trim();
    let place = block.iter().rev().find_map(|l| {
        let rest = l.trim().strip_prefix("File \"")?;
        let (file, at) = rest.split_once("\", ")?;
        let file = file.rsplit('/').next().unwrap_or(file);
        Some(format!("{file} {}", at.trim()))
    });
    Some(match place {
        Some(place) => format!("{error} ({place})"),
        None => error.to_string(),
    })
}

/// `can't access property … (at handle@app.js:28:7)`: the message, and the first frame of the
/// `Stack:` that follows it.
fn javascript(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines();
    let message = lines.next()?.trim();
    let frame = lines.skip_while(|l| l.trim() != "Stack:").nth(1)?.trim();
    let frame = match frame.split_once('@') {
        Some((function, place)) => {
            format!("{function}@{}", place.rsplit('/').next().unwrap_or(place))
        }
        None => frame.to_string(),
    };
    Some(format!("{message} (at {frame})"))
}

/// `panicked at src/lib.rs:10:5: MESSAGE` from a Rust panic.
fn rust(stderr: &str) -> Option<String> {
    let mut lines = stderr.lines().skip_while(|l| !l.contains("panicked at "));
    let head = lines.next()?;
    let place = head.split("panicked at ").nth(1)?.trim_end_matches(':');
    let message: Vec<&str> = lines
        .take_while(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    Some(format!("panicked at {place}: {}", message.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_exception_is_its_last_traceback_line_and_where_it_was_raised() {
        let stderr = "Traceback (most recent call last):\n  File \"/0/app.py\", line 33, in handle\nTypeError: list indices must be integers or slices, not str\n\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1280:25:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(
            guest_error(stderr).unwrap(),
            "TypeError: list indices must be integers or slices, not str (app.py line 33, in handle)"
        );
        assert_eq!(
            for_the_log(stderr),
            "Traceback (most recent call last):\n  File \"/0/app.py\", line 33, in handle\nTypeError: list indices must be integers or slices, not str",
            "the runtime's panic is not the handler's words"
        );
        let chained = "Traceback (most recent call last):\n  File \"/0/a.py\", line 3, in f\nKeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"/0/app.py\", line 9, in handle\nNameError: name 'nope' is not defined";
        assert_eq!(
            guest_error(chained).unwrap(),
            "NameError: name 'nope' is not defined (app.py line 9, in handle)"
        );
    }

    #[test]
    fn a_javascript_error_is_its_message_and_first_frame() {
        let stderr = "can't access property \"includes\", email is undefined\nStack:\n  handle@plugins/email-reminder-js/app.js:28:7\n  export_handle@/tmp/x/sources/initializer.js:445:15\n\nRedirecting call to abort() to mozalloc_abort";
        assert_eq!(
            guest_error(stderr).unwrap(),
            "can't access property \"includes\", email is undefined (at handle@app.js:28:7)"
        );
    }

    #[test]
    fn a_rust_panic_is_its_message_and_place() {
        let stderr = "thread '<unnamed>' panicked at src/lib.rs:10:5:\nindex out of bounds: the len is 0 but the index is 3\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(
            guest_error(stderr).unwrap(),
            "panicked at src/lib.rs:10:5: index out of bounds: the len is 0 but the index is 3"
        );
        assert_eq!(
            for_the_log(stderr),
            stderr,
            "a Rust guest's panic is its own"
        );
        assert_eq!(guest_error("some words a guest printed"), None);
        assert_eq!(guest_error(""), None);
    }
}
