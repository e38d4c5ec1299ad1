//! Deploying plugins the ways users do, for the hot-reload tests and benchmark: a new build by
//! copy-then-rename, or an in-place overwrite written slowly enough to be caught half-way.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

/// `bytes` with a component-level custom section appended: the same behaviour, a different
/// content hash, so a test can tell "v1" from "v2" of one plugin by version.
pub fn build_variant(bytes: &[u8], tag: &str) -> Vec<u8> {
    let name = b"qhost-test-build";
    let mut payload = leb128(name.len() as u32);
    payload.extend_from_slice(name);
    payload.extend_from_slice(tag.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.extend(leb128(payload.len() as u32));
    out.extend(payload);
    out
}

fn leb128(mut n: u32) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Writes `bytes` to a hidden temporary file beside `target`, then renames it over `target`.
pub fn by_rename(target: &Path, bytes: &[u8]) {
    let dir = target.parent().expect("target has a directory");
    let name = target
        .file_name()
        .expect("target has a name")
        .to_string_lossy();
    let tmp = dir.join(format!(".{name}.partial"));
    std::fs::write(&tmp, bytes).expect("writing the new build");
    std::fs::rename(&tmp, target).expect("renaming the new build into place");
}

/// Overwrites `target` in place in `chunks` pieces with `pause` between them, the way a slow
/// copy over the old file does.
pub fn in_place_slowly(target: &Path, bytes: &[u8], chunks: usize, pause: Duration) {
    let mut file = std::fs::File::create(target).expect("truncating the plugin file");
    for piece in bytes.chunks(bytes.len().div_ceil(chunks)) {
        file.write_all(piece).expect("writing a piece");
        file.flush().expect("flushing");
        std::thread::sleep(pause);
    }
}
