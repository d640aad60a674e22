#![no_main]
//! Fuzz target: the four ingest formats (pytest-benchmark, Google Benchmark, criterion, hyperfine).
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    tensorforge_fuzz::within_budget(data.len(), tensorforge_fuzz::FLOOR_BYTES, || {
        if let Ok(text) = std::str::from_utf8(data) {
            use tensorforge_store::ingest::{parse_series, IngestFormat};
            for f in [
                IngestFormat::PytestBenchmark,
                IngestFormat::GoogleBenchmark,
                IngestFormat::Criterion,
                IngestFormat::Hyperfine,
            ] {
                let _ = parse_series(f, text, "bench.json", None);
            }
        }
    });
});
