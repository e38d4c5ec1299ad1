//! Running a message outside a host: a plugin file loaded as a host loads it ([`bench`]), its
//! messages run through the host's own pipeline (`pipeline::alone`), under the three commands
//! that do it. `qhost invoke` runs one message through one plugin file ([`invoke`]); `qhost replay`
//! runs recorded messages through two versions (the `replay` module); `qhost test` runs a test
//! file's cases in a canned world (the `suite` module).

pub(crate) mod bench;
mod invoke;

pub(crate) use bench::Ended;
pub(crate) use invoke::since;
pub use invoke::{InvokeRequest, Ran, invoke_batch_file, invoke_file};
