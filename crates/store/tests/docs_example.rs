//! The example GPU record in docs/records.md (written by tools/torch_gemm_suite.py's
//! `build_record`) parses and validates as a Rust `Record`, so the documented format, the
//! Python writer and the Rust reader agree.

use tensorforge_store::{Record, Store};

/// docs/records.md, read at run time (it lies outside the crate, so it is not compiled in).
fn doc() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/records.md");
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn example_block(doc: &str) -> &str {
    let start = doc
        .find("### Example GPU record")
        .expect("docs/records.md has an example section");
    let rest = &doc[start..];
    let open = rest.find("```json\n").expect("a json code block") + "```json\n".len();
    let close = rest[open..].find("\n```").expect("closed code block");
    &rest[open..open + close]
}

#[test]
fn documented_gpu_record_is_valid() {
    let r = Record::from_json_str(example_block(&doc()), "docs/records.md").unwrap();
    let gpu = r.device.gpu.as_ref().expect("the example is a GPU record");
    assert_eq!(r.device.kind, "gpu");
    assert_eq!(gpu.name, "NVIDIA H100 80GB HBM3");
    assert_eq!(r.workload.dtype, "bf16");
    assert_eq!(r.stats.count, r.samples_ns.len());
    // Python's statistics equal Rust's on the same samples.
    let rust = tensorforge_store::LatencyStats::from_samples(&r.samples_ns).unwrap();
    assert_eq!(rust.p50_ns, r.stats.p50_ns);
    assert!((rust.p90_ns - r.stats.p90_ns).abs() < 1e-6);
    assert!((rust.stddev_ns - r.stats.stddev_ns).abs() < 1e-6);
    // And it stores.
    let dir = std::env::temp_dir().join(format!("tf-docs-{}", tensorforge_store::new_run_id()));
    let s = Store::open(&dir.join("s.sqlite")).unwrap();
    s.insert_run(std::slice::from_ref(&r)).unwrap();
    assert_eq!(s.find_run("nightly", None).unwrap().run_id, r.run_id);
}
