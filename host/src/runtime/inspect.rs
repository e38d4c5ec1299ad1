//! `qhost plugins check`: what a `.wasm` file is, before it is dropped into the plugins directory.

use std::path::Path;

use anyhow::Context as _;

use super::engine::Runtime;
use super::loader::{check_world, version_of};

/// What a file holds and whether qhost can run it.
#[derive(Debug)]
pub struct CheckReport {
    /// Content-hash version it would load as.
    pub version: String,
    /// Size in bytes.
    pub size: usize,
    /// Names of the interfaces and functions it imports.
    pub imports: Vec<String>,
    /// Names of what it exports.
    pub exports: Vec<String>,
    /// `None` if it implements the world with what qhost provides; otherwise why not.
    pub problem: Option<String>,
}

/// Compiles `path` and checks it against the `qhost:handler` world. Only an unreadable file or
/// one that is not a component at all is an error; a mismatch is reported in the result.
pub fn check_file(runtime: &Runtime, path: &Path) -> anyhow::Result<CheckReport> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let component = runtime
        .compile(&bytes)
        .with_context(|| format!("{} is not a valid WebAssembly component", path.display()))?;
    let ty = component.component_type();
    let engine = runtime.engine();
    let imports = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
    let exports = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let problem = check_world(runtime, &component)
        .err()
        .map(|e| format!("{e:#}"));
    Ok(CheckReport {
        version: version_of(&bytes),
        size: bytes.len(),
        imports,
        exports,
        problem,
    })
}
