//! The pooling allocator: how many instance slots there are, how large each is, and how a slot
//! is reset between messages.
//!
//! A fresh instance per message makes the reset the hot path. By default wasmtime resets a slot
//! by `madvise`-ing its memory and tables away; the next instance then page-faults every page it
//! touches back in, copy-on-write from the memory image, and every `madvise` and every
//! copy-on-write fault of a multi-threaded process flushes the TLB of the other CPUs with an
//! inter-processor interrupt (a VM exit on virtual machines). Profiles of the release host
//! showed half of all CPU in the kernel that way.
//!
//! On Linux 6.7 and later qhost keeps up to [`KEEP_RESIDENT`] of each slot's memory and table
//! resident instead: the `PAGEMAP_SCAN` ioctl finds the pages the last instance wrote, only those
//! are copied back from the image (or zeroed), and the next instance finds them present. The
//! cost of a reset then follows what the guest dirtied, not the size of its memory. Measured
//! with `cargo bench --bench languages` (release): Rust `email-reminder` fresh instantiate + call
//! 63 → 21 µs, JavaScript 1,225 → 555 µs; and the pipeline bench's wasm plugin went from 0.55
//! to about 0.95 of the native handler.
//!
//! The scan reports at most 32 separate runs of dirty pages at a time; wasmtime as published
//! decommits everything past the 32nd, which for an interpreter (whose call writes a few hundred
//! scattered pages) was nearly everything: a Python handler's fresh instance page-faulted about
//! 290 times per message. qhost builds against a copy of wasmtime whose scan resumes where the
//! kernel stopped (`vendor/wasmtime/QHOST.md`): 1.3 faults per message, and the Python
//! email-reminder 3,048 → 1,359 µs fresh, JavaScript 1,080 → 704 µs (release, the two builds
//! alternated).
//!
//! The price is memory: a slot that has served a message keeps up to 4 MiB of memory and 4 MiB
//! of table resident while idle, so a host at `max-in-flight = 64` whose guests dirty that much
//! (interpreters do; the Rust examples dirty a few hundred KiB) holds up to about 512 MiB more
//! than with wasmtime's default.
//!
//! Without the ioctl, keeping memory resident means `memset`-ing the whole kept range on every
//! reset, which measured no better than wasmtime's default, so older kernels keep the default.
//! A batched decommit and copy-on-write off measured within noise, and are left at wasmtime's
//! defaults.

use wasmtime::{Enabled, PoolingAllocationConfig};

/// Memory and table bytes a slot keeps resident between instances, where the kernel can say
/// which pages were written. Larger than any compiled example's memory (the Rust examples use
/// about 1.1 MiB) and the JavaScript guest's working set.
const KEEP_RESIDENT: usize = 4 << 20;

/// Table elements a slot can hold: four times the largest example's table (the JavaScript
/// guest's 7,691). A plugin whose table is larger is refused at load by the instantiation check.
const TABLE_ELEMENTS: usize = 32_768;

/// The first kernel with the `PAGEMAP_SCAN` ioctl.
const PAGEMAP_SCAN_SINCE: (u32, u32) = (6, 7);

/// A pool of `instances` slots whose memories may grow to `max_memory_mib`, with the reset
/// strategy this kernel supports.
pub(crate) fn config(instances: u32, max_memory_mib: u64) -> PoolingAllocationConfig {
    let instances = instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    // Components built by language toolchains hold several core modules (the program, WASI
    // adapters, shims); interpreter guests more than compiled ones.
    pool.total_component_instances(instances)
        .total_core_instances(instances * 16)
        .total_memories(instances * 4)
        .total_tables(instances * 8)
        .max_memories_per_module(1)
        .max_tables_per_module(4)
        .table_elements(TABLE_ELEMENTS)
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        .max_memory_size((max_memory_mib as usize) << 20);
    if kernel_has_pagemap_scan() {
        // `Auto`: where the ioctl is refused all the same (a restricted container), a reset
        // falls back to `memset`, which measured no worse than the default.
        pool.pagemap_scan(Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT);
    }
    pool
}

/// Whether the running kernel has `PAGEMAP_SCAN`.
fn kernel_has_pagemap_scan() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .and_then(|release| kernel_version(&release))
        .is_some_and(|version| version >= PAGEMAP_SCAN_SINCE)
}

/// `(major, minor)` from a kernel release string such as `6.18.44-fc-v595`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_are_read_as_major_and_minor() {
        assert_eq!(kernel_version("6.18.44-fc-v595\n"), Some((6, 18)));
        assert_eq!(kernel_version("6.1.0-amzn2023"), Some((6, 1)));
        assert_eq!(kernel_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(kernel_version("garbage"), None);
        assert!((6, 18) >= PAGEMAP_SCAN_SINCE);
        assert!((6, 1) < PAGEMAP_SCAN_SINCE);
        assert!((5, 15) < PAGEMAP_SCAN_SINCE);
    }
}
