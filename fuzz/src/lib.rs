//! Peak-memory accounting shared by the fuzz targets.
//!
//! libFuzzer's `-malloc_limit_mb` catches one oversized allocation; it does not catch an
//! input that amplifies into many small ones. [`PeakAlloc`] wraps the system allocator and
//! counts live bytes, and [`within_budget`] runs one parse and fails (panics, which libFuzzer
//! reports as a crash and `tools/fuzz_all.sh` minimizes) when the bytes it held at its peak
//! exceed `100 × input + floor`. What it leaves out: memory mapped without the allocator
//! (none of the parsers map files) and the allocator's own overhead per block.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Live heap bytes right now.
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// The most live heap bytes seen since the last reset.
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Floor of the budget for every parser except ONNX: runtime structures (rayon's pool, error
/// strings, hash tables' first buckets) that do not scale with the input.
pub const FLOOR_BYTES: usize = 1 << 20;
/// Floor for ONNX import: the decoder allows folded constants up to 64 MiB whatever the file
/// size (`docs/onnx.md`, "decoded memory"), e.g. a `ConstantOfShape` attention mask.
pub const ONNX_FLOOR_BYTES: usize = 64 << 20;
/// The amplification the issue allows: peak bytes per input byte.
pub const MAX_BYTES_PER_INPUT_BYTE: usize = 100;

/// The system allocator with live and peak byte counters.
pub struct PeakAlloc;

// SAFETY: every call forwards to `System` unchanged; the counters are only bookkeeping.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE_BYTES.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

fn grew(bytes: usize) {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK_BYTES.fetch_max(live, Ordering::Relaxed);
}

/// Runs `f` (one parse of an `input_bytes`-long input) and panics when the heap it held at
/// its peak, above what was live when it started, exceeds
/// `MAX_BYTES_PER_INPUT_BYTE × input_bytes + floor_bytes`.
pub fn within_budget<R>(input_bytes: usize, floor_bytes: usize, f: impl FnOnce() -> R) -> R {
    let base = LIVE_BYTES.load(Ordering::Relaxed);
    PEAK_BYTES.store(base, Ordering::Relaxed);
    let r = f();
    let peak = PEAK_BYTES.load(Ordering::Relaxed).saturating_sub(base);
    let budget = MAX_BYTES_PER_INPUT_BYTE
        .saturating_mul(input_bytes)
        .saturating_add(floor_bytes);
    assert!(
        peak <= budget,
        "peak heap {peak} bytes for a {input_bytes}-byte input exceeds the budget of {budget} bytes"
    );
    r
}
