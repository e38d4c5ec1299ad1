//! `qhost plugins check`: what a `.wasm` file is, before it is dropped into the plugins directory,
//! and whether it would load there: the component, its world, and its manifest beside it, each
//! checked as the host's loader checks them.

use std::path::Path;

use anyhow::Context as _;

use super::loader::{check_is_component, load_file, version_of};
use crate::runtime::Runtime;

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
    /// `None` if it would load as it is (component, world, manifest, limits, secrets);
    /// otherwise why not.
    pub problem: Option<String>,
}

/// Compiles `path`, lists what it imports and exports, and loads it as the host would (with its
/// manifest). Only an unreadable file or one that is not a component at all is an error; any
/// other problem is reported in the result.
pub fn check_file(runtime: &Runtime, path: &Path) -> anyhow::Result<CheckReport> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    check_is_component(&bytes).with_context(|| format!("{} cannot be a plugin", path.display()))?;
    let component = runtime
        .compile(&bytes)
        .with_context(|| format!("{} is not a valid WebAssembly component", path.display()))?;
    let ty = component.component_type();
    let engine = runtime.engine();
    let imports = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
    let exports = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let problem = load_file(runtime, path)
        .err()
        .map(|e| format!("{:#}", e.reason));
    Ok(CheckReport {
        version: version_of(&bytes),
        size: bytes.len(),
        imports,
        exports,
        problem,
    })
}
