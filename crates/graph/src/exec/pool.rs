//! The memory of a run: f32 buffers recycled within a run (a buffer comes back after the
//! last kernel that reads it, by the planner's lifetimes) and across runs (as a
//! preallocated arena would be), each request served by the most recently released buffer
//! that fits (the one likeliest still in cache), and the check that refuses a graph above
//! the executor's element cap or above the memory the OS reports available, every tensor
//! counted once as f32. Left out: the planner's offsets (buffers are whole vectors, not
//! regions packed into one arena), in-place reuse of an input by its consumer.

use crate::error::{GraphError, Result};
use crate::ir::TypedGraph;

/// Largest total element count the executor allocates across all tensors (2³² f32 values,
/// 16 GiB); larger graphs are refused with an error rather than aborting on allocation.
pub const MAX_EXEC_ELEMENTS: u64 = 1 << 32;

/// Runs needing fewer bytes than this are not checked against the available memory.
pub(super) const CHECK_MEMORY_ABOVE_BYTES: u64 = 64 << 20;

pub(super) fn check_size(tg: &TypedGraph) -> Result<()> {
    let total = tg
        .tensors
        .iter()
        .fold(0u64, |a, t| a.saturating_add(t.numel));
    if total > MAX_EXEC_ELEMENTS {
        let big = tg
            .tensors
            .iter()
            .max_by_key(|t| t.numel)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        return Err(GraphError::Input {
            tensor: big,
            detail: format!(
                "the graph holds {total} elements in all, more than the executor's limit of {MAX_EXEC_ELEMENTS}"
            ),
        });
    }
    // Every tensor held once as f32 is an upper bound on what a run allocates: refuse a run
    // that cannot fit in the memory the OS says is available, instead of aborting in an
    // allocation half-way through. Asking the OS reads /proc/meminfo (about 10 µs, ten times
    // a small model's whole run), so runs that need under CHECK_MEMORY_ABOVE_BYTES skip it.
    let need = total.saturating_mul(4);
    if need < CHECK_MEMORY_ABOVE_BYTES {
        return Ok(());
    }
    if let Some(avail) = available_memory_bytes() {
        if need > avail {
            let big = tg
                .tensors
                .iter()
                .max_by_key(|t| t.numel)
                .map(|t| (t.name.clone(), t.shape.clone()))
                .unwrap_or_default();
            return Err(GraphError::Input {
                tensor: big.0,
                detail: format!(
                    "shape {:?}: running the graph needs up to {} of f32 buffers, and {} is available (MemAvailable, or TENSORFORGE_MEMORY_LIMIT_BYTES)",
                    big.1,
                    tensorforge_core::units::bytes(need as f64),
                    tensorforge_core::units::bytes(avail as f64)
                ),
            });
        }
    }
    Ok(())
}

/// The memory a run may use, in bytes: `MemAvailable` from `/proc/meminfo`, capped by
/// `TENSORFORGE_MEMORY_LIMIT_BYTES` when set (`None` when neither is known).
pub fn available_memory_bytes() -> Option<u64> {
    let os = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            kib.checked_mul(1024)
        });
    let cap = std::env::var("TENSORFORGE_MEMORY_LIMIT_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match (os, cap) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Recycled buffers, so that repeated runs (benchmarks) do not pay first-touch page faults
/// on every fresh allocation, as a runtime with a preallocated arena would not. A request
/// for `n` values takes the most recently released buffer of capacity `n` to `2n`: the
/// output of a kernel then goes where a tensor was just read, still in cache, rather than
/// into the buffer its length last had (one run earlier, evicted since). Against buffers
/// kept by exact length, MobileNetV2's whole run took 3614–4537 against 4132–4628 µs (one
/// thread, `run --bench --reps 100`, three alternated rounds; AMD EPYC Zen 5) and its
/// maximum resident memory 136 against 140 MB (docs/performance.md, twenty-first
/// session). A graph output leaves the pool with the run's result; [`Pool::recycle`] takes
/// it back. A fresh buffer is zeroed by the OS as its pages are first written (not by a
/// pass of its own), and one of 2 MiB or more asks Linux for transparent huge pages, so
/// that writing it faults once per 2 MiB instead of once per 4 KiB: copying 64 MiB into
/// fresh memory took 54–57 ms with 4 KiB pages and 12.5–12.6 ms with huge pages, against
/// 8.6–8.7 ms into memory already paged in (`tools/fresh_pages.c` on the AMD EPYC Zen 3 VM,
/// AVX2; docs/performance.md).
#[derive(Debug, Default)]
pub struct Pool {
    /// Released buffers, oldest first.
    free: Vec<Vec<f32>>,
    /// Scratch vectors of the block evaluator (empty, with capacity), kept between kernels
    /// and runs instead of allocated for each kernel.
    spare: Vec<Vec<f32>>,
}

/// Scratch vectors a pool keeps at most.
const MAX_SPARE: usize = 64;

impl Pool {
    /// An empty scratch vector with room for `cap` values (one kept from earlier when there
    /// is one).
    pub(super) fn scratch(&mut self, cap: usize) -> Vec<f32> {
        let mut v = self.spare.pop().unwrap_or_default();
        v.clear();
        v.reserve(cap);
        v
    }

    /// Keep a scratch vector for a later [`Pool::scratch`].
    pub(super) fn keep_scratch(&mut self, v: Vec<f32>) {
        if self.spare.len() < MAX_SPARE && v.capacity() > 0 {
            self.spare.push(v);
        }
    }

    /// A buffer of exactly `n` elements (contents unspecified); an allocation the machine
    /// cannot satisfy is an error, not an abort.
    pub(super) fn take(&mut self, n: usize) -> Result<Vec<f32>> {
        // The most recently released buffer that fits (the likeliest still in cache), of
        // at most twice the length: first one whose values up to `n` are its own (no
        // writes), else one with the capacity (its new values zeroed).
        let fits = |b: &Vec<f32>| b.capacity() >= n && b.capacity() <= n.saturating_mul(2);
        if let Some(i) = self.free.iter().rposition(|b| fits(b) && b.len() >= n) {
            let mut b = self.free.remove(i);
            b.truncate(n);
            return Ok(b);
        }
        if let Some(i) = self.free.iter().rposition(fits) {
            let mut b = self.free.remove(i);
            b.resize(n, 0.0);
            return Ok(b);
        }
        fresh(n)
    }

    pub(super) fn put(&mut self, b: Vec<f32>) {
        if b.capacity() > 0 {
            self.free.push(b);
        }
    }

    /// Keep `v` (an output vector of an earlier run, [`super::ExecResult::outputs`]) for a
    /// later buffer of half its capacity to all of it ([`Pool`]). A run hands its outputs over instead of copying
    /// them, so its pool no longer holds them; a loop that hands them back here runs every
    /// later call on memory already paged in, as onnxruntime's `run` does (a 64 MiB softmax
    /// output costs it no fresh pages: 13.2 ms a call at the median against 12.5 with the
    /// output bound to a preallocated array, `tools/ort_output_memory.py`,
    /// docs/performance.md).
    /// Without it, each run's outputs are fresh memory (see [`Pool`]).
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use tensorforge_graph::exec::{execute_pooled, Pool};
    /// let g = tensorforge_graph::Graph::from_json_str(r#"{"nodes":[
    ///   {"name":"x","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
    ///   {"name":"y","op":"Exp","inputs":["x"]}]}"#).unwrap();
    /// let p = tensorforge_graph::fusion::compile(&g).unwrap().fused;
    /// let ins = HashMap::from([("x".to_string(), vec![0.0f32; 4])]);
    /// let mut pool = Pool::default();
    /// let r = execute_pooled(&p, &ins, &mut pool).unwrap();
    /// assert_eq!(pool.held_bytes(), 0); // the output was handed over
    /// for (_, _, v) in r.outputs {
    ///     pool.recycle(v);
    /// }
    /// assert_eq!(pool.held_bytes(), 16);
    /// ```
    pub fn recycle(&mut self, v: Vec<f32>) {
        if !v.is_empty() {
            self.put(v);
        }
    }

    /// Bytes held for reuse; constant across repeated runs of one program.
    pub fn held_bytes(&self) -> usize {
        self.free
            .iter()
            .map(|b| b.capacity() * std::mem::size_of::<f32>())
            .sum()
    }
}

/// Bytes from which a fresh buffer asks for transparent huge pages (one huge page).
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// A fresh buffer of `n` zeros whose pages are untouched until first written (the global
/// allocator's zeroed allocation: memory the OS maps is zero already, so nothing writes it
/// here), with [`advise_huge_pages`] over it; an allocation the machine cannot satisfy is an
/// error, not an abort.
fn fresh(n: usize) -> Result<Vec<f32>> {
    let oom = || {
        GraphError::Argument(format!(
            "cannot allocate a buffer of {n} f32 values ({}): out of memory",
            tensorforge_core::units::bytes(n as f64 * 4.0)
        ))
    };
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<f32>(n).map_err(|_| oom())?;
    // SAFETY: the layout's size is non-zero (n > 0 f32 values).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<f32>();
    if p.is_null() {
        return Err(oom());
    }
    advise_huge_pages(p.cast::<u8>(), layout.size());
    // SAFETY: `p` comes from the global allocator with the layout of `n` f32 values (what a
    // Vec<f32> of capacity n deallocates with), and all n values are initialized: all-zero
    // bits are 0.0.
    Ok(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// Ask Linux to back the whole 2 MiB-aligned huge pages inside `[p, p + bytes)` with
/// transparent huge pages (`madvise(MADV_HUGEPAGE)`; a no-op below [`HUGE_PAGE_BYTES`], on
/// other systems, and where the kernel's THP setting is `never`). Advice only: a failure
/// changes nothing but speed, so it is ignored.
fn advise_huge_pages(p: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        if bytes < HUGE_PAGE_BYTES {
            return;
        }
        let start = (p as usize).next_multiple_of(HUGE_PAGE_BYTES);
        let end = (p as usize + bytes) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
        if end > start {
            // SAFETY: [start, end) lies inside the allocation of `bytes` bytes at `p`;
            // MADV_HUGEPAGE changes no contents and no mapping, only how later faults in
            // the range are served.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_takes_the_latest_buffer_that_fits() {
        let mut pool = Pool::default();
        let a = pool.take(100).unwrap();
        let b = pool.take(100).unwrap();
        let c = pool.take(400).unwrap();
        let (pa, pb, pc) = (a.as_ptr(), b.as_ptr(), c.as_ptr());
        pool.put(a);
        pool.put(c);
        pool.put(b);
        // 60 values: b (capacity 100, released last) fits; c (400 > 2 × 60) does not.
        let d = pool.take(60).unwrap();
        assert_eq!((d.as_ptr(), d.len()), (pb, 60));
        // 80: a, the one left of capacity 80 to 160.
        let e = pool.take(80).unwrap();
        assert_eq!(e.as_ptr(), pa);
        // 90: none of capacity 90 to 180 is left (c holds 400): a fresh buffer.
        let f = pool.take(90).unwrap();
        assert!(![pa, pb, pc].contains(&f.as_ptr()));
        // 100 after d (60 values) comes back: d's capacity again, its new values zeroed.
        let mut d = d;
        d.iter_mut().for_each(|v| *v = 7.0);
        pool.put(d);
        let g = pool.take(100).unwrap();
        assert_eq!(g.as_ptr(), pb);
        assert!(g[..60].iter().all(|&v| v == 7.0) && g[60..].iter().all(|&v| v == 0.0));
        // Everything held is counted by capacity: c (400) alone, then g and f too.
        assert_eq!(pool.held_bytes(), 400 * 4);
        pool.put(g);
        pool.put(f);
        pool.put(e);
        assert_eq!(pool.held_bytes(), (400 + 100 + 90 + 100) * 4);
    }
}
