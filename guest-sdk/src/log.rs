//! Log through the host, which tags each line with plugin, version, queue and message id.
//!
//! A plugin has no stdout or stderr of its own (the host grants none), so this is the way to
//! say something.

use crate::bindings::qhost::handler::log::{Level, write};

/// Log at trace level.
pub fn trace(message: &str) {
    write(Level::Trace, message);
}

/// Log at debug level.
pub fn debug(message: &str) {
    write(Level::Debug, message);
}

/// Log at info level.
pub fn info(message: &str) {
    write(Level::Info, message);
}

/// Log at warn level.
pub fn warn(message: &str) {
    write(Level::Warn, message);
}

/// Log at error level.
pub fn error(message: &str) {
    write(Level::Error, message);
}
