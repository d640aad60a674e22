//! Peak-memory budget shared by the fuzz targets.
//!
//! libFuzzer's `-malloc_limit_mb` catches one oversized allocation; it does not catch an
//! input that amplifies into many small ones. Each target installs the workspace's counting
//! allocator (`tensorforge_measure::alloc::CountingAlloc`) and runs every input inside
//! [`within_budget`], which fails (panics, which libFuzzer reports as a crash and
//! `tools/fuzz_all.sh` minimizes) when the heap held at the peak of one parse exceeds
//! `100 × input + floor`. What it leaves out: memory mapped without the allocator (none of the
//! parsers map files) and the allocator's own overhead per block.

pub use tensorforge_measure::alloc::CountingAlloc;
use tensorforge_measure::alloc::{peak_bytes_since, reset_peak};

/// Floor of the budget for every parser except ONNX: runtime structures (rayon's pool, error
/// strings, hash tables' first buckets) that do not scale with the input.
pub const FLOOR_BYTES: usize = 1 << 20;
/// Floor for ONNX import: the decoder allows folded constants up to 64 MiB whatever the file
/// size (`docs/onnx.md`, "decoded memory"), e.g. a `ConstantOfShape` attention mask.
pub const ONNX_FLOOR_BYTES: usize = 64 << 20;
/// The amplification the issue allows: peak bytes per input byte.
pub const MAX_BYTES_PER_INPUT_BYTE: usize = 100;

/// Runs `f` (one parse of an `input_bytes`-long input) and panics when the heap it held at
/// its peak, above what was live when it started, exceeds
/// `MAX_BYTES_PER_INPUT_BYTE × input_bytes + floor_bytes`.
pub fn within_budget<R>(input_bytes: usize, floor_bytes: usize, f: impl FnOnce() -> R) -> R {
    let base = reset_peak();
    let r = f();
    let peak = peak_bytes_since(base);
    let budget = MAX_BYTES_PER_INPUT_BYTE
        .saturating_mul(input_bytes)
        .saturating_add(floor_bytes) as u64;
    assert!(
        peak <= budget,
        "peak heap {peak} bytes for a {input_bytes}-byte input exceeds the budget of {budget} bytes"
    );
    r
}
