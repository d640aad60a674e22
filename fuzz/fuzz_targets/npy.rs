#![no_main]
//! Fuzz target: NumPy .npy decoding.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = tensorforge_kernels::npy::parse_npy(data);
});
