#![no_main]
//! Fuzz target: NumPy .npy decoding.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        let _ = tensorforge_kernels::npy::parse_npy(data);
    });
});
