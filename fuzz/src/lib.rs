//! Peak-memory budget shared by the fuzz targets.
//!
//! libFuzzer's `-malloc_limit_mb` catches one oversized allocation; it does not catch an
//! input that amplifies into many small ones. This crate installs the workspace's counting
//! allocator (`tensorforge_measure::alloc::CountingAlloc`) for every target, which runs each
//! input inside [`within_budget`], which fails (panics, which libFuzzer reports as a crash and
//! `tools/fuzz_all.sh` minimizes) when the heap held at the peak of one parse exceeds
//! `100 × input + floor`. What it leaves out: memory mapped without the allocator (none of the
//! parsers map files) and the allocator's own overhead per block.

use tensorforge_measure::alloc::{peak_bytes_since, reset_peak, CountingAlloc};

/// Installed here once for every target binary that links this crate (all of them call
/// [`within_budget`]).
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

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

#[cfg(test)]
mod tests {
    // One test: the counters are process-wide, so two tests on two threads would see each
    // other's allocations.
    #[test]
    fn the_budget_passes_a_small_parse_and_fails_an_amplifying_one() {
        // 100 input bytes allow 100 · 100 + 0 = 10 000 bytes: holding 5 000 passes.
        super::within_budget(100, 0, || std::hint::black_box(vec![0u8; 5_000]).len());
        // 10 input bytes allow 1 000 bytes: holding 10 000 fails.
        let r = std::panic::catch_unwind(|| {
            super::within_budget(10, 0, || std::hint::black_box(vec![0u8; 10_000]).len())
        });
        assert!(r.is_err());
    }
}
