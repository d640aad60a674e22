//! How the gate's reasons state the allowed change: a percentage for timed metrics, bytes
//! (scaled) for peak allocation, and the absolute allowance whenever it dwarfs the baseline
//! (the policy's 64 KiB floor on a 16 B peak is not "409600.0 %").

use std::collections::BTreeMap;
use tensorforge_ops::{gate, Date, Metric, Policy};
use tensorforge_record::{
    DeviceContext, HarnessSettings, Record, SoftwareContext, WorkloadIdentity,
};

fn rec(run: &str, t: i64, samples: Vec<f64>, peak_alloc_bytes: u64) -> Record {
    let mut params = BTreeMap::new();
    params.insert("m".into(), serde_json::json!(64));
    let w = WorkloadIdentity {
        kind: "gemm".into(),
        name: "g".into(),
        params,
        dtype: "f32".into(),
    };
    let d = DeviceContext {
        kind: "cpu".into(),
        cpu_model: "test".into(),
        ..Default::default()
    };
    Record::new(tensorforge_record::RecordParts {
        run_id: run.into(),
        workload: w,
        device: d,
        software: SoftwareContext::default(),
        harness: HarnessSettings::default(),
        samples_ns: samples,
        flops: None,
        bytes: None,
        peak_alloc_bytes: Some(peak_alloc_bytes),
        timestamp_unix_s: t,
        labels: BTreeMap::new(),
        source: "test".into(),
    })
    .unwrap()
}

/// The reason of the gate's `peak_alloc` row and of its `latency_p50` row, baseline peak
/// `base` bytes, candidate `cand` bytes, under the embedded policy (peak_alloc:
/// max_relative 0.10, max_absolute 65536 bytes; latency 5 %).
fn reasons(base: u64, cand: u64) -> (String, String) {
    let mut p = Policy::default_embedded();
    p.suite.bootstrap_resamples = 0;
    let today = Date::parse("2025-01-01", "t", "t").unwrap();
    let samples = vec![1000.0; 20];
    let g = gate(
        &p,
        &[rec("b", 1, samples.clone(), base)],
        &[rec("c", 2, samples, cand)],
        today,
    );
    let reason = |m: Metric| {
        g.rows
            .iter()
            .find(|r| r.metric == Some(m))
            .unwrap_or_else(|| panic!("no {} row: {:?}", m.name(), g.rows))
            .reason
            .clone()
    };
    (reason(Metric::PeakAlloc), reason(Metric::LatencyP50))
}

#[test]
fn a_peak_allocation_allowance_is_stated_in_bytes() {
    // 16 B baseline: the 64 KiB floor binds, 65536 / 16 = 4096 times the baseline.
    let (peak, latency) = reasons(16, 16);
    assert!(
        peak.contains("allowed increase of 64.00 KiB (4096× the baseline)"),
        "{peak}"
    );
    assert!(!peak.contains("409600"), "{peak}");
    // A timed metric keeps its percentage.
    assert!(latency.contains("allowed 5.0 %"), "{latency}");
    // 1 MiB baseline: 10 % of it (104857.6 B = 102.40 KiB) binds, over the 64 KiB floor.
    let (peak, _) = reasons(1 << 20, 1 << 20);
    assert!(
        peak.contains("allowed increase of 102.40 KiB (10.0 % of the baseline)"),
        "{peak}"
    );
    // A regression beyond it says the same allowance: 1 MiB -> 2 MiB.
    let (peak, _) = reasons(1 << 20, 2 << 20);
    assert!(
        peak.contains("beyond the allowed increase of 102.40 KiB (10.0 % of the baseline)"),
        "{peak}"
    );
    // No baseline allocation: no share of it, just the bytes.
    let (peak, _) = reasons(0, 0);
    assert!(peak.contains("allowed increase of 64.00 KiB"), "{peak}");
    assert!(!peak.contains("65536 bytes"), "{peak}");
}
