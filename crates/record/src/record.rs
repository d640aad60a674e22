//! The measurement record: what was run (workload identity and its fingerprint), where
//! (device context), with what (software context), how (harness settings), and what
//! happened (raw latency samples, statistics, throughput, peak allocation). Records are
//! evidence of the *measurement* kind and never carry model predictions. Two records are
//! comparable only when their fingerprints match. The record does not model clock
//! frequency scaling, thermal state or co-tenant load: it states the context it knows.

use crate::error::RecordError;
use crate::limits::check_record_json;
use crate::stats::LatencyStats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tensorforge_core::text::{shorten, SHORT_VALUE_CHARS};

/// Version of the record JSON; bumped on any incompatible change. Version 2 added the
/// harness's batching and clock fields and the `instructions` count; version-1 records are
/// still read (the new fields take their defaults).
pub const RECORD_SCHEMA_VERSION: u32 = 2;

/// Oldest record schema this build still reads.
pub const RECORD_SCHEMA_VERSION_MIN: u32 = 1;

fn one() -> u64 {
    1
}

/// What was run: kind plus canonical parameters plus dtype. The display `name` is not part
/// of the identity, so a preset and a file describing the same work compare equal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkloadIdentity {
    /// Workload kind, e.g. `gemm`, `conv2d`, `kernel`, `graph`, `attention`.
    pub kind: String,
    /// Human-readable name (not part of the fingerprint).
    pub name: String,
    /// Canonical parameters (e.g. `{"m":128,"n":128,"k":128,"batch":1}`); keys sorted.
    pub params: BTreeMap<String, serde_json::Value>,
    /// Element type, e.g. `f32`.
    pub dtype: String,
}

impl WorkloadIdentity {
    /// The canonical JSON of (kind, params, dtype): keys sorted, no whitespace.
    pub fn canonical_json(&self) -> String {
        // serde_json maps are BTreeMaps (no preserve_order feature), so keys are sorted at
        // every depth; numbers print in their shortest round-trip form.
        let v = serde_json::json!({
            "dtype": self.dtype,
            "kind": self.kind,
            "params": serde_json::to_value(&self.params).unwrap_or_default(),
        });
        tensorforge_core::digest::canonical_json(&v)
    }

    /// `sha256(canonical_json)` as 64 lowercase hex digits.
    pub fn fingerprint(&self) -> String {
        tensorforge_core::digest::sha256_hex(&[self.canonical_json().as_bytes()])
    }
}

/// GPU part of the device context (for ingested GPU records).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct GpuContext {
    /// Device name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Device index on its host.
    pub index: u32,
    /// Driver version string.
    pub driver: Option<String>,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: Option<String>,
    /// Device memory in bytes.
    pub memory_bytes: Option<u64>,
    /// The GPU's UUID (`GPU-…`), when read from the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Streaming multiprocessors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// L2 cache, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_bytes: Option<u64>,
    /// SM clock when measured, MHz (NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock when measured, MHz (NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_clock_mhz: Option<u32>,
    /// Enforced power limit, W (NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
}

/// Where the measurement ran.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DeviceContext {
    /// `cpu` or `gpu`.
    pub kind: String,
    /// CPU model string (from /proc/cpuinfo on Linux).
    pub cpu_model: String,
    /// Logical CPUs on the host.
    pub logical_cores: u32,
    /// Threads the harness used.
    pub threads_used: u32,
    /// Host memory in bytes, when known.
    pub memory_bytes: Option<u64>,
    /// Operating system, e.g. `linux`.
    pub os: String,
    /// Kernel release, when known.
    pub kernel: Option<String>,
    /// Host name is deliberately not recorded; `machine_id` is a stable hash of the
    /// (cpu_model, logical_cores, memory_bytes, os) tuple used to select "this machine".
    pub machine_id: String,
    /// GPU context for GPU records.
    pub gpu: Option<GpuContext>,
}

/// What software produced the measurement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct SoftwareContext {
    /// TensorForge version.
    pub tensorforge_version: String,
    /// Git commit of the build, when known.
    pub git_commit: Option<String>,
    /// rustc version of the build, when known.
    pub rustc_version: Option<String>,
    /// Key crate versions (faer, rayon...).
    pub crates: BTreeMap<String, String>,
    /// Framework versions for ingested records (torch, cuda...).
    pub frameworks: BTreeMap<String, String>,
}

/// How the harness ran.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct HarnessSettings {
    /// Untimed warm-up iterations.
    pub warmup_iterations: u64,
    /// Minimum timed iterations.
    pub min_iterations: u64,
    /// Minimum total timed duration in ns.
    pub time_budget_ns: u64,
    /// Threads used.
    pub threads: u32,
    /// Whether inputs rotated across buffers to defeat cache residency.
    pub rotating_buffers: bool,
    /// Free-text note (e.g. "working set fits in LLC; results are cache-warm").
    pub note: Option<String>,
    /// Iterations timed together as one sample (each sample is the batch's time divided by
    /// this); 1 when every call is timed on its own.
    #[serde(default = "one")]
    pub batch_iterations: u64,
    /// Resolution of the clock the harness read, ns (smallest non-zero step seen), when
    /// measured.
    #[serde(default)]
    pub timer_resolution_ns: Option<f64>,
    /// Cost of one timing read pair plus an empty call through the harness, ns, when
    /// measured; a per-iteration change smaller than this cannot be resolved.
    #[serde(default)]
    pub overhead_ns: Option<f64>,
}

/// Throughput derived from the p50 latency.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    /// Iterations per second = 1e9 / p50_ns.
    pub iterations_per_s: f64,
    /// FLOP/s = flops / p50 seconds, when the workload has a FLOP count.
    pub flops_per_s: Option<f64>,
    /// Bytes/s = bytes moved / p50 seconds, when the workload has a byte count.
    pub bytes_per_s: Option<f64>,
}

/// One measured workload in one run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Record {
    /// Always [`RECORD_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The run this record belongs to (all records of one invocation share it).
    pub run_id: String,
    /// What was run.
    pub workload: WorkloadIdentity,
    /// `workload.fingerprint()`, stored so a tampered identity is detectable.
    pub fingerprint: String,
    /// Where.
    pub device: DeviceContext,
    /// With what.
    pub software: SoftwareContext,
    /// How.
    pub harness: HarnessSettings,
    /// Raw per-iteration latencies in ns.
    pub samples_ns: Vec<f64>,
    /// Statistics of `samples_ns`.
    pub stats: LatencyStats,
    /// Throughput from p50.
    pub throughput: Throughput,
    /// FLOPs per iteration, when known.
    pub flops: Option<f64>,
    /// Bytes moved per iteration (compulsory), when known.
    pub bytes: Option<f64>,
    /// Peak bytes allocated during the timed region (counting allocator), when known.
    pub peak_alloc_bytes: Option<u64>,
    /// Seconds since the Unix epoch at the end of the measurement.
    pub timestamp_unix_s: i64,
    /// Labels: commit, branch, run id, anything the user passes.
    pub labels: BTreeMap<String, String>,
    /// Where it came from: `harness`, or `ingest:criterion`, `ingest:hyperfine`...
    pub source: String,
    /// Instructions retired per iteration, counted (not timed) by callgrind or hardware
    /// counters, when measured; see `instructions_source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<f64>,
    /// How `instructions` was counted (`callgrind`, `perf`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_source: Option<String>,
    /// Events counted under a cache simulator (instructions, simulated cache misses and the
    /// cycle estimate built from them), when counted; see [`CountedEvents`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<CountedEvents>,
    /// Why counting this workload failed (the counter crashed or timed out), when it did:
    /// the count metrics of this record are then an error, never a pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_error: Option<String>,
    /// Extra work deliberately added to every call (gate sensitivity trials), when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injected_work: Option<InjectedWork>,
}

/// The counter behind [`CountedEvents`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Counter {
    /// `valgrind --tool=callgrind --cache-sim=yes` with a fixed cache geometry.
    Callgrind,
}

/// Event counts per iteration of one workload, from a counter that executes the code
/// under a simulator: the same numbers whatever else the machine is doing.
///
/// The cycle estimate weighs misses as iai-callgrind and CodSpeed do:
/// `estimated_cycles = instructions + 5 · l1_misses + 35 · ll_misses`. It is a ranking
/// device for regressions, not this CPU's cycles: the weights are fixed, the caches are
/// simulated with [`CountedEvents::cache_model`], and prefetching, out-of-order overlap and
/// the TLB are left out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CountedEvents {
    /// What counted.
    pub counter: Counter,
    /// The counted instance as a workload name (`gemm:m=64:n=512:k=512:batch=1`): the timed
    /// instance, or a smaller one of the same kind when [`CountedEvents::work_divisor`] > 1.
    pub instance: String,
    /// How many times less work the counted instance does than the timed one (1 = the same
    /// instance). Counts are per iteration *of the counted instance*.
    pub work_divisor: u64,
    /// Counted iterations (after one uncounted warm-up call).
    pub iterations: u64,
    /// Instructions executed per iteration (callgrind `Ir`).
    pub instructions: f64,
    /// First-level misses per iteration (`I1mr + D1mr + D1mw`).
    pub l1_misses: f64,
    /// Last-level misses per iteration (`ILmr + DLmr + DLmw`).
    pub ll_misses: f64,
    /// `instructions + 5 · l1_misses + 35 · ll_misses` per iteration.
    pub estimated_cycles: f64,
    /// The simulated caches, e.g. `I1 32768 B 8-way, D1 32768 B 8-way, LL 8388608 B 16-way, 64 B lines`.
    pub cache_model: String,
}

impl CountedEvents {
    /// Cycles charged per first-level miss in [`CountedEvents::estimated_cycles`].
    pub const L1_MISS_CYCLES: f64 = 5.0;
    /// Cycles charged per last-level miss.
    pub const LL_MISS_CYCLES: f64 = 35.0;

    /// `instructions + 5 · l1_misses + 35 · ll_misses`.
    ///
    /// ```
    /// use tensorforge_record::CountedEvents;
    /// // 1000 instructions, 10 L1 misses, 2 LL misses: 1000 + 50 + 70.
    /// assert_eq!(CountedEvents::estimate_cycles(1000.0, 10.0, 2.0), 1120.0);
    /// ```
    pub fn estimate_cycles(instructions: f64, l1_misses: f64, ll_misses: f64) -> f64 {
        instructions + Self::L1_MISS_CYCLES * l1_misses + Self::LL_MISS_CYCLES * ll_misses
    }
}

/// How [`InjectedWork`] slows a workload down.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InjectionMode {
    /// After each call, an instance of the same workload with `fraction` of its work runs:
    /// the workload's own code, on its own buffers.
    Work,
    /// After each call, one read pass (one load per 64-byte line) over `fraction` × the
    /// workload's compulsory bytes of memory that no call has touched recently (a ring
    /// larger than the caches): a memory-bound slowdown.
    Stream,
}

/// A slowdown injected on purpose (`TENSORFORGE_INJECT_EXTRA_WORK`) to test the gate's power.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InjectedWork {
    /// What the extra work is.
    pub mode: InjectionMode,
    /// How much, as a fraction of the workload's work (mode `work`) or bytes (`stream`).
    pub fraction: f64,
}

impl InjectedWork {
    /// One line for reports: `work +10.0 %` or `stream +10.0 %`.
    pub fn describe(&self) -> String {
        let m = match self.mode {
            InjectionMode::Work => "extra work",
            InjectionMode::Stream => "extra read pass",
        };
        format!("{m} +{:.1} %", self.fraction * 100.0)
    }
}

/// What a caller supplies to build a [`Record`] ([`Record::new`] derives the fingerprint,
/// statistics and throughput from it): named fields instead of twelve positional arguments.
#[derive(Clone, Debug)]
pub struct RecordParts {
    /// Run the record belongs to.
    pub run_id: String,
    /// What was measured.
    pub workload: WorkloadIdentity,
    /// Where.
    pub device: DeviceContext,
    /// With what software.
    pub software: SoftwareContext,
    /// How the harness ran.
    pub harness: HarnessSettings,
    /// Per-sample latencies, ns.
    pub samples_ns: Vec<f64>,
    /// FLOPs per iteration, when known.
    pub flops: Option<f64>,
    /// Bytes moved per iteration, when known.
    pub bytes: Option<f64>,
    /// Peak heap held by the workload, bytes.
    pub peak_alloc_bytes: Option<u64>,
    /// When, Unix seconds.
    pub timestamp_unix_s: i64,
    /// Free labels.
    pub labels: BTreeMap<String, String>,
    /// Where the samples came from (`tensorforge bench`, `ingest:hyperfine`...).
    pub source: String,
}

impl Record {
    /// Build a record from raw samples, computing statistics and throughput; rejects empty,
    /// non-finite or negative samples.
    pub fn new(parts: RecordParts) -> Result<Record, RecordError> {
        let RecordParts {
            run_id,
            workload,
            device,
            software,
            harness,
            samples_ns,
            flops,
            bytes,
            peak_alloc_bytes,
            timestamp_unix_s,
            labels,
            source,
        } = parts;
        let stats = LatencyStats::from_samples(&samples_ns)?;
        let throughput = Throughput::from_p50(stats.p50_ns, flops, bytes);
        let fingerprint = workload.fingerprint();
        Ok(Record {
            schema_version: RECORD_SCHEMA_VERSION,
            run_id,
            workload,
            fingerprint,
            device,
            software,
            harness,
            samples_ns,
            stats,
            throughput,
            flops,
            bytes,
            peak_alloc_bytes,
            timestamp_unix_s,
            labels,
            source,
            instructions: None,
            instructions_source: None,
            counts: None,
            count_error: None,
            injected_work: None,
        })
    }

    /// Check invariants of a record read from outside: every string within the limits of
    /// [`crate::limits`] (no NUL character, bounded length in bytes; checked first, so the
    /// other messages can show the values), schema version, fingerprint matches identity,
    /// samples finite and non-negative, statistics consistent with the samples.
    pub fn validate(&self) -> Result<(), RecordError> {
        let name = &shorten(&self.workload.name, SHORT_VALUE_CHARS);
        let json = serde_json::to_value(self)
            .map_err(|e| RecordError::invalid(name, "record", "…", e.to_string()))?;
        check_record_json(&json).map_err(|v| v.into_error(name))?;
        if !(RECORD_SCHEMA_VERSION_MIN..=RECORD_SCHEMA_VERSION).contains(&self.schema_version) {
            return Err(RecordError::invalid(
                name,
                "schema_version",
                self.schema_version.to_string(),
                format!("this build reads schema_version {RECORD_SCHEMA_VERSION_MIN} to {RECORD_SCHEMA_VERSION}"),
            ));
        }
        if let Some(i) = self.instructions {
            if !(i.is_finite() && i >= 0.0) {
                return Err(RecordError::invalid(
                    name,
                    "instructions",
                    i.to_string(),
                    "must be a finite, non-negative count",
                ));
            }
        }
        if let Some(c) = &self.counts {
            for (field, v) in [
                ("counts.instructions", c.instructions),
                ("counts.l1_misses", c.l1_misses),
                ("counts.ll_misses", c.ll_misses),
                ("counts.estimated_cycles", c.estimated_cycles),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(RecordError::invalid(
                        name,
                        field,
                        v.to_string(),
                        "must be a finite, non-negative count",
                    ));
                }
            }
            if c.work_divisor == 0 || c.iterations == 0 {
                return Err(RecordError::invalid(
                    name,
                    "counts.work_divisor/iterations",
                    format!("{}/{}", c.work_divisor, c.iterations),
                    "must be at least 1",
                ));
            }
        }
        let fp = self.workload.fingerprint();
        if fp != self.fingerprint {
            return Err(RecordError::invalid(
                name,
                "fingerprint",
                shorten(&self.fingerprint, SHORT_VALUE_CHARS),
                format!("does not match the workload identity (expected {fp})"),
            ));
        }
        let recomputed = LatencyStats::from_samples(&self.samples_ns)
            .map_err(|e| RecordError::invalid(name, "samples_ns", "…", e.to_string()))?;
        if recomputed.count != self.stats.count {
            return Err(RecordError::invalid(
                name,
                "stats.count",
                self.stats.count.to_string(),
                format!("samples_ns holds {} samples", recomputed.count),
            ));
        }
        Ok(())
    }

    /// Parse one record from JSON and validate it; `source_name` names the file in errors.
    pub fn from_json_str(text: &str, source_name: &str) -> Result<Record, RecordError> {
        let r: Record = serde_json::from_str(text).map_err(|e| RecordError::Parse {
            source_name: source_name.to_string(),
            message: e.to_string(),
        })?;
        r.validate().map_err(|e| e.with_source(source_name))?;
        Ok(r)
    }
}

impl Throughput {
    /// Throughput from a p50 latency in ns and optional per-iteration FLOPs and bytes.
    pub fn from_p50(p50_ns: f64, flops: Option<f64>, bytes: Option<f64>) -> Throughput {
        let s = p50_ns * 1e-9;
        let per_s = |x: f64| if s > 0.0 { x / s } else { f64::INFINITY };
        Throughput {
            iterations_per_s: per_s(1.0),
            flops_per_s: flops.map(per_s),
            bytes_per_s: bytes.map(per_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(m: u64, dtype: &str) -> WorkloadIdentity {
        let mut params = BTreeMap::new();
        params.insert("m".into(), serde_json::json!(m));
        params.insert("n".into(), serde_json::json!(64));
        params.insert("k".into(), serde_json::json!(32));
        WorkloadIdentity {
            kind: "gemm".into(),
            name: "g".into(),
            params,
            dtype: dtype.into(),
        }
    }

    #[test]
    fn fingerprint_is_sha256_of_canonical_json() {
        use sha2::{Digest, Sha256};
        let w = gemm(128, "f32");
        assert_eq!(
            w.canonical_json(),
            r#"{"dtype":"f32","kind":"gemm","params":{"k":32,"m":128,"n":64}}"#
        );
        // Independent check: sha256 of that exact string, computed with sha2 directly.
        let expect: String =
            Sha256::digest(br#"{"dtype":"f32","kind":"gemm","params":{"k":32,"m":128,"n":64}}"#)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
        assert_eq!(w.fingerprint(), expect);
        assert_eq!(w.fingerprint().len(), 64);
    }

    #[test]
    fn fingerprint_matches_python_canonical_json() {
        // Computed with python3 (the expression tools/torch_gemm_suite.py uses):
        // python3 -c 'import json,hashlib; print(hashlib.sha256(json.dumps({"dtype":"bf16",
        //   "kind":"gemm","params":{"batch":1,"k":4096,"m":4096,"n":4096,
        //   "transpose_b":False,"layout":"row_major"}}, sort_keys=True,
        //   separators=(",",":")).encode()).hexdigest())'
        let mut params = BTreeMap::new();
        params.insert("m".into(), serde_json::json!(4096));
        params.insert("n".into(), serde_json::json!(4096));
        params.insert("k".into(), serde_json::json!(4096));
        params.insert("batch".into(), serde_json::json!(1));
        params.insert("layout".into(), serde_json::json!("row_major"));
        params.insert("transpose_b".into(), serde_json::json!(false));
        let w = WorkloadIdentity {
            kind: "gemm".into(),
            name: "from python".into(),
            params,
            dtype: "bf16".into(),
        };
        assert_eq!(
            w.fingerprint(),
            "b79bc6965d8c8b1873ad5e4ce5f0d6ca84cef44f9fc1776fd951833c892e3135"
        );
    }

    #[test]
    fn fingerprint_ignores_name_and_differs_on_every_identity_field() {
        let a = gemm(128, "f32");
        let mut renamed = a.clone();
        renamed.name = "other".into();
        assert_eq!(a.fingerprint(), renamed.fingerprint());
        assert_ne!(a.fingerprint(), gemm(129, "f32").fingerprint());
        assert_ne!(a.fingerprint(), gemm(128, "f64").fingerprint());
        let mut kind = a.clone();
        kind.kind = "conv2d".into();
        assert_ne!(a.fingerprint(), kind.fingerprint());
        let mut extra = a.clone();
        extra.params.insert("batch".into(), serde_json::json!(1));
        assert_ne!(a.fingerprint(), extra.fingerprint());
    }

    #[test]
    fn record_round_trips_and_rejects_tampering() {
        let r = Record::new(crate::record::RecordParts {
            run_id: "run-1".into(),
            workload: gemm(8, "f32"),
            device: DeviceContext::default(),
            software: SoftwareContext::default(),
            harness: HarnessSettings::default(),
            samples_ns: vec![10.0, 20.0, 30.0],
            flops: Some(1000.0),
            bytes: None,
            peak_alloc_bytes: None,
            timestamp_unix_s: 0,
            labels: BTreeMap::new(),
            source: "harness".into(),
        })
        .unwrap();
        // p50 of [10,20,30] = 20 ns -> 1000 flops / 20e-9 s = 5e10 FLOP/s.
        assert_eq!(r.throughput.flops_per_s, Some(5e10));
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(Record::from_json_str(&text, "r.json").unwrap(), r);
        let tampered = text.replace("\"m\":8", "\"m\":9");
        let err = Record::from_json_str(&tampered, "r.json").unwrap_err();
        assert!(err.to_string().contains("r.json"), "{err}");
        assert!(err.to_string().contains("fingerprint"), "{err}");
        let missing = text.replace(",\"source\":\"harness\"", "");
        assert_ne!(missing, text);
        assert!(Record::from_json_str(&missing, "r.json").is_err());
    }

    #[test]
    fn nan_samples_are_rejected() {
        let r = Record::new(crate::record::RecordParts {
            run_id: "run".into(),
            workload: gemm(8, "f32"),
            device: DeviceContext::default(),
            software: SoftwareContext::default(),
            harness: HarnessSettings::default(),
            samples_ns: vec![1.0, f64::NAN],
            flops: None,
            bytes: None,
            peak_alloc_bytes: None,
            timestamp_unix_s: 0,
            labels: BTreeMap::new(),
            source: "harness".into(),
        });
        assert!(r.is_err());
    }

    fn valid_record() -> Record {
        Record::new(crate::record::RecordParts {
            run_id: "run-1".into(),
            workload: gemm(8, "f32"),
            device: DeviceContext::default(),
            software: SoftwareContext::default(),
            harness: HarnessSettings::default(),
            samples_ns: vec![10.0, 20.0, 30.0],
            flops: None,
            bytes: None,
            peak_alloc_bytes: None,
            timestamp_unix_s: 0,
            labels: BTreeMap::new(),
            source: "harness".into(),
        })
        .unwrap()
    }

    #[test]
    fn string_limits_are_checked_in_bytes_at_every_depth() {
        use crate::limits::*;
        // "é" is 2 bytes in UTF-8: 256 of them are exactly WORKLOAD_NAME_MAX_BYTES = 512.
        let mut r = valid_record();
        r.workload.name = "é".repeat(256);
        assert_eq!(r.workload.name.len(), 512);
        r.validate().unwrap();
        // One more byte (513) is refused, naming the field, the size and the limit.
        r.workload.name.push('a');
        let e = r.validate().unwrap_err().to_string();
        assert!(
            e.contains("`workload.name`") && e.contains("513 bytes") && e.contains("512 bytes"),
            "{e}"
        );
        // The value is cut to 40 characters and its size given: 40 × "é", then "… (513 bytes)".
        assert!(
            e.contains(&format!("{}… (513 bytes)", "é".repeat(40))),
            "{e}"
        );
        // A NUL three levels down in a parameter (the fingerprint is recomputed, so only the
        // NUL can be the reason).
        let mut r = valid_record();
        r.workload
            .params
            .insert("shape".into(), serde_json::json!([1, {"x": "a\u{0}b"}]));
        r.fingerprint = r.workload.fingerprint();
        let e = r.validate().unwrap_err().to_string();
        assert!(
            e.contains("`workload.params.shape[1].x` = `a\\0b`") && e.contains("NUL"),
            "{e}"
        );
        // Keys too: a software crate name of STRING_MAX_BYTES + 1 bytes.
        let mut r = valid_record();
        r.software
            .crates
            .insert("k".repeat(STRING_MAX_BYTES + 1), "1".into());
        let e = r.validate().unwrap_err().to_string();
        assert!(e.contains("key is 65537 bytes"), "{e}");
        assert!(!e.contains(&"k".repeat(41)), "the key is shortened: {e}");
    }
}
