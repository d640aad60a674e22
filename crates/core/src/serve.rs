//! A serving view of a decoder model on one chip type, split over devices by
//! [`Parallelism`]: over a grid of batch sizes and context lengths, the prefill time of one
//! request and the decode time per output token (lower bounds: each pipeline stage on the
//! roofline as one kernel, plus the collectives on the interconnect roof, see
//! [`analyze_parallel`]), decode tokens per second, the binding roof, the weight and
//! KV-cache memory per device, whether they fit in the device's DRAM, and the largest batch
//! that fits at each context.
//!
//! Prefill: one request of `context` tokens (batch 1, empty cache). Decode: `batch`
//! sequences, each with `kv_cache_len = context` cached tokens, one new token each (attending
//! over `context + 1` positions). Every number derives from [`analyze_model`]'s totals and
//! rows, so a model feature the analysis adds (experts, latent attention, windows) reaches
//! this view without change here.
//!
//! Left out: continuous batching and scheduling, chunked prefill and its interference with
//! decode, queueing, sequences of different lengths, KV-cache paging and prefix sharing,
//! speculative decoding, sampling, per-message latency of collectives, activation and
//! workspace memory (so "fits" is necessary, not sufficient), and everything
//! [`analyze_parallel`] and [`analyze_model`] leave out.

use crate::analysis::SCHEMA_VERSION;
use crate::dtype::DType;
use crate::error::{checked_product, CoreError, Result};
use crate::hardware::HardwareSpec;
use crate::parallel::{analyze_parallel, Collective, ParallelAnalysis, Parallelism};
use crate::transformer::{analyze_model, AttentionKernel, DecoderModel, LmHeadTokens, Phase};
use serde::{Deserialize, Serialize};

/// Most entries in `batches` or in `contexts`.
pub const MAX_GRID_AXIS: usize = 64;

/// Batch sizes of the default grid.
pub const DEFAULT_BATCHES: &[u64] = &[1, 8, 32, 64, 128, 256];
/// Context lengths of the default grid.
pub const DEFAULT_CONTEXTS: &[u64] = &[2048, 8192];

/// What to evaluate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServeOptions {
    /// How the model is split over devices.
    pub parallelism: Parallelism,
    /// Decode batch sizes: sequences in flight per replica.
    pub batches: Vec<u64>,
    /// Context lengths: prompt tokens for prefill, cached tokens for decode.
    pub contexts: Vec<u64>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            parallelism: Parallelism::default(),
            batches: DEFAULT_BATCHES.to_vec(),
            contexts: DEFAULT_CONTEXTS.to_vec(),
        }
    }
}

/// Prefill of one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefillPoint {
    /// Prompt tokens.
    pub context: u64,
    /// Lower bound on the time to process the prompt (time to first token without
    /// queueing), seconds: one pass through every stage.
    pub time_s: f64,
    /// `context / time_s`, prompt tokens per second for one request.
    pub tokens_per_s: f64,
    /// `compute`, a memory level (`dram`) or `interconnect`.
    pub binding_roof: String,
    /// Compute time summed over the stages, seconds.
    pub compute_time_s: f64,
    /// Memory time summed over the stages, seconds.
    pub memory_time_s: f64,
    /// Collective and transfer time, seconds.
    pub interconnect_time_s: f64,
    /// The collectives of the pass, each with its latency and bandwidth terms (empty on one
    /// device).
    #[serde(default)]
    pub collectives: Vec<Collective>,
}

/// One decode step of `batch` sequences at `context`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodePoint {
    /// Cached tokens per sequence.
    pub context: u64,
    /// Sequences in flight per replica.
    pub batch: u64,
    /// Pipeline micro-batches, `m = min(pp, batch)`, each of `⌈batch / m⌉` sequences.
    pub micro_batches: u64,
    /// Lower bound on one step (every sequence gains one token), which is also the time per
    /// output token of each sequence: `max(pass(b_m), m · busiest stage(b_m))`, seconds.
    pub step_time_s: f64,
    /// `dp · batch / step_time_s`, output tokens per second over all replicas.
    pub tokens_per_s: f64,
    /// `batch / step_time_s`, output tokens per second of one replica.
    pub tokens_per_s_per_replica: f64,
    /// The roof of the term that sets the step: `compute`, a memory level or `interconnect`.
    pub binding_roof: String,
    /// Collective and transfer time inside `step_time_s`, seconds.
    pub interconnect_time_s: f64,
    /// The collectives of one pass of the timed micro-batch, each with its latency and
    /// bandwidth terms (empty on one device).
    #[serde(default)]
    pub collectives: Vec<Collective>,
    /// KV cache of the `batch` sequences held by the busiest device, bytes.
    pub kv_cache_bytes_per_device: u64,
    /// Weights held by the busiest device, bytes.
    pub weight_bytes_per_device: u64,
    /// `weights + KV cache` on the device holding the most, bytes.
    pub memory_bytes_per_device: u64,
    /// `memory_bytes_per_device ≤ DRAM capacity`; `None` when the capacity is unknown.
    pub fits: Option<bool>,
}

/// The largest batch that fits at one context.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LargestBatch {
    /// Cached tokens per sequence.
    pub context: u64,
    /// KV cache one sequence adds on the busiest device holding it, bytes.
    pub kv_cache_bytes_per_sequence: u64,
    /// `ep · ⌊(capacity − weights) / kv_cache_bytes_per_sequence⌋` (each device caches
    /// `⌈batch / ep⌉` sequences; 0 when the weights alone do not fit); `None` when the
    /// capacity is unknown.
    pub largest_batch: Option<u64>,
}

/// The serving report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServeReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `serve`.
    pub kind: String,
    /// The model's label (its config file).
    pub model: String,
    /// Hardware name.
    pub hardware: String,
    /// Activation and arithmetic dtype.
    pub dtype: DType,
    /// Storage dtype of the weights.
    pub weight_dtype: DType,
    /// Storage dtype of the KV cache.
    pub kv_dtype: DType,
    /// How attention runs: `fused` (flash attention) or `materialized`.
    pub attention_kernel: AttentionKernel,
    /// The degrees.
    pub parallelism: Parallelism,
    /// Devices per replica, `tp · pp · ep`.
    pub replica_devices: u64,
    /// Devices in all, `tp · pp · ep · dp`.
    pub devices: u64,
    /// The interconnect's name, when the hardware gives one.
    pub interconnect: Option<String>,
    /// One direction, per device, over all links, bytes per second.
    pub interconnect_bytes_per_s: Option<f64>,
    /// DRAM capacity of one device, bytes; `None` when the hardware does not give it.
    pub memory_capacity_bytes_per_device: Option<u64>,
    /// Weight parameters of the whole model.
    pub weight_params: u64,
    /// Weights on the device holding the most, bytes.
    pub weight_bytes_per_device: u64,
    /// One row per context.
    pub prefill: Vec<PrefillPoint>,
    /// One row per (context, batch), contexts outer.
    pub decode: Vec<DecodePoint>,
    /// One row per context.
    pub largest_batch: Vec<LargestBatch>,
    /// What the view leaves out.
    pub limitations: Vec<String>,
}

/// Serving-specific omissions, listed first in a report's limitations.
pub const SERVE_LIMITATIONS: &[&str] = &[
    "prefill: one request of `context` tokens at batch 1 with an empty cache; decode: `batch` sequences each with kv_cache_len = context, attending over context + 1 positions; all times are lower bounds",
    "pipeline decode: the batch runs as m = min(pp, batch) micro-batches of ⌈batch/m⌉; a step takes at least one micro-batch's pass through every stage and at least m times the busiest stage; prefill runs one request through the stages in turn",
    "fits = weights + KV cache ≤ DRAM capacity per device; activations, workspace, CUDA/runtime context and fragmentation are not counted, so fitting is necessary, not sufficient",
    "every sequence holds its full context in the KV cache: no paging, prefix sharing or sequences of different lengths",
    "continuous batching, chunked prefill, prefill/decode interference, scheduling, queueing and sampling are not modelled",
];

fn check_axis(field: &str, v: &[u64]) -> Result<()> {
    if v.is_empty() {
        return Err(CoreError::invalid(field, "[]", "give at least one value"));
    }
    if v.len() > MAX_GRID_AXIS {
        return Err(CoreError::invalid(
            field,
            format!("{} values", v.len()),
            format!("at most {MAX_GRID_AXIS} values"),
        ));
    }
    if let Some(z) = v.iter().find(|x| **x == 0) {
        return Err(CoreError::invalid(field, z, "must be at least 1"));
    }
    Ok(())
}

/// The model at one serving point (`phase`, `batch`, prompt or cache length).
fn at(m: &DecoderModel, phase: Phase, batch: u64, context: u64) -> DecoderModel {
    let mut x = m.clone();
    x.block.batch = batch;
    x.block.phase = phase;
    x.lm_head_tokens = LmHeadTokens::Last;
    match phase {
        Phase::Prefill => {
            x.block.seq_len = context;
            x.block.kv_cache_len = 0;
        }
        Phase::Decode => {
            x.block.seq_len = 1;
            x.block.kv_cache_len = context;
        }
    }
    x
}

fn split(
    m: &DecoderModel,
    hw: &HardwareSpec,
    par: &Parallelism,
    phase: Phase,
    batch: u64,
    context: u64,
) -> Result<ParallelAnalysis> {
    let a = analyze_model(&at(m, phase, batch, context), hw)?;
    analyze_parallel(&a, hw, par)
}

/// The serving view of `m` (its batch, sequence length, phase and cache length are replaced
/// at every grid point) on `hw` split by `opts.parallelism`.
///
/// ```text
/// prefill(c)        = pass time of one request of c tokens        (analyze_parallel)
/// decode(c, B):  m  = min(pp, B),  b = ⌈B / m⌉
///                step = max(pass(c, b), m · busiest_stage(c, b))
///                tokens/s = dp · B / step
/// memory(c, B)      = max over stages of (weights + KV cache of B sequences) per device
/// largest batch(c)  = ep · ⌊(capacity − weights) / KV per sequence⌋  (KV is linear in B)
/// ```
pub fn serve(m: &DecoderModel, hw: &HardwareSpec, opts: &ServeOptions) -> Result<ServeReport> {
    check_axis("batch", &opts.batches)?;
    check_axis("context", &opts.contexts)?;
    let par = &opts.parallelism;
    par.validate_for(m)?;
    let pp = par.pp;
    let capacity = hw.dram.total_capacity_bytes();
    let mut prefill = Vec::new();
    let mut decode = Vec::new();
    let mut largest = Vec::new();
    let mut weight_bytes_per_device = 0;
    let mut parallel_limitations = Vec::new();
    for &c in &opts.contexts {
        let p = split(m, hw, par, Phase::Prefill, 1, c)?;
        prefill.push(PrefillPoint {
            context: c,
            time_s: p.pass_time_s,
            tokens_per_s: c as f64 / p.pass_time_s,
            binding_roof: p.binding_roof.clone(),
            compute_time_s: p.compute_time_s,
            memory_time_s: p.memory_time_s,
            interconnect_time_s: p.interconnect_time_s,
            collectives: p.collectives.clone(),
        });
        // One sequence: the weights and the KV cache each sequence adds, per device.
        let one = split(m, hw, par, Phase::Decode, 1, c)?;
        let weights = one.stages.iter().map(|s| s.weight_bytes).max().unwrap_or(0);
        let kv_seq = one
            .stages
            .iter()
            .map(|s| s.kv_cache_bytes)
            .max()
            .unwrap_or(0);
        weight_bytes_per_device = weights;
        if parallel_limitations.is_empty() {
            parallel_limitations = one.limitations.clone();
        }
        // With expert parallelism a device holds the KV cache of ⌈B / ep⌉ sequences, so
        // memory(B) ≤ capacity ⟺ ⌈B / ep⌉ ≤ ⌊(capacity − weights) / kv⌋ ⟺ B ≤ ep · that.
        largest.push(LargestBatch {
            context: c,
            kv_cache_bytes_per_sequence: kv_seq,
            largest_batch: match capacity {
                None => None,
                Some(cap) if cap < weights => Some(0),
                Some(cap) => Some(
                    (cap - weights)
                        .checked_div(kv_seq)
                        .unwrap_or(u64::MAX)
                        .saturating_mul(par.ep),
                ),
            },
        });
        for &b in &opts.batches {
            let full = split(m, hw, par, Phase::Decode, b, c)?;
            let micro = pp.min(b);
            let mb = b.div_ceil(micro);
            let smaller;
            let timed = if mb == b {
                &full
            } else {
                smaller = split(m, hw, par, Phase::Decode, mb, c)?;
                &smaller
            };
            let busiest = timed
                .stages
                .iter()
                .max_by(|x, y| x.time_s.total_cmp(&y.time_s))
                .ok_or_else(|| CoreError::invalid("pp", pp, "no pipeline stage"))?;
            let many = micro as f64 * timed.busiest_stage_time_s;
            let (step, roof, comm) = if many > timed.pass_time_s {
                (
                    many,
                    busiest.binding_roof.clone(),
                    micro as f64 * busiest.interconnect_time_s,
                )
            } else {
                (
                    timed.pass_time_s,
                    timed.binding_roof.clone(),
                    timed.interconnect_time_s,
                )
            };
            let kv = full
                .stages
                .iter()
                .map(|s| s.kv_cache_bytes)
                .max()
                .unwrap_or(0);
            let mem = full.max_memory_bytes;
            let per_replica = b as f64 / step;
            decode.push(DecodePoint {
                context: c,
                batch: b,
                micro_batches: micro,
                step_time_s: step,
                tokens_per_s: par.dp as f64 * per_replica,
                tokens_per_s_per_replica: per_replica,
                binding_roof: roof,
                interconnect_time_s: comm,
                collectives: timed.collectives.clone(),
                kv_cache_bytes_per_device: kv,
                weight_bytes_per_device: weights,
                memory_bytes_per_device: mem,
                fits: capacity.map(|cap| mem <= cap),
            });
        }
    }
    let mut limitations: Vec<String> = SERVE_LIMITATIONS.iter().map(|s| s.to_string()).collect();
    if capacity.is_none() {
        limitations.push(format!(
            "hardware `{}` gives no DRAM capacity: fits and largest batch are unknown",
            hw.name
        ));
    }
    limitations.extend(parallel_limitations);
    // The single-device analysis' own omissions, except its "single device" line, which the
    // multi-device model replaces.
    let probe = analyze_model(&at(m, Phase::Decode, 1, opts.contexts[0]), hw)?;
    for l in probe.limitations {
        if !l.starts_with("single device") && !limitations.contains(&l) {
            limitations.push(l);
        }
    }
    Ok(ServeReport {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "serve".into(),
        model: m.name.clone(),
        hardware: hw.name.clone(),
        dtype: m.block.dtype,
        weight_dtype: m.block.weight_dtype(),
        kv_dtype: m.block.kv_dtype(),
        attention_kernel: m.block.attention_kernel,
        parallelism: *par,
        replica_devices: par.replica_devices()?,
        devices: checked_product(&[par.replica_devices()?, par.dp], "devices")?,
        interconnect: hw.interconnect.as_ref().map(|i| i.name.clone()),
        interconnect_bytes_per_s: hw
            .interconnect
            .as_ref()
            .map(|i| i.unidirectional_bytes_per_s),
        memory_capacity_bytes_per_device: capacity,
        weight_params: probe.weight_params,
        weight_bytes_per_device,
        prefill,
        decode,
        largest_batch: largest,
        limitations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;
    use crate::transformer::decoder_from_hf_config;

    const LLAMA3: &str = include_str!("../data/models/llama3_8b_config.json");
    const MIXTRAL: &str = include_str!("../data/models/mixtral_8x7b_config.json");

    fn llama3() -> DecoderModel {
        decoder_from_hf_config(LLAMA3, "llama3", 1, 1, Phase::Decode, 0, DType::Bf16).unwrap()
    }

    fn opts(tp: u64, pp: u64, batches: &[u64], contexts: &[u64]) -> ServeOptions {
        ServeOptions {
            parallelism: Parallelism {
                tp,
                pp,
                ..Parallelism::default()
            },
            batches: batches.to_vec(),
            contexts: contexts.to_vec(),
        }
    }

    fn report(hw: &str, o: &ServeOptions) -> ServeReport {
        serve(&llama3(), &presets::hardware(hw).unwrap(), o).unwrap()
    }

    #[test]
    fn one_h100_memory_and_largest_batch_hand_checked() {
        // Llama-3-8B bf16: 8 030 261 248 params · 2 B = 16 060 522 496 weight bytes.
        // KV per sequence at context 2048 (L = 2049): 32 · 2 · 8 · 128 · 2049 · 2 B
        // = 268 566 528. H100: 80e9 B; ⌊(80e9 − 16 060 522 496) / 268 566 528⌋ = ⌊238.08⌋ = 238.
        let r = report("nvidia_h100_sxm", &opts(1, 1, &[238, 239], &[2048]));
        assert_eq!(r.weight_bytes_per_device, 16_060_522_496);
        let lb = &r.largest_batch[0];
        assert_eq!(lb.kv_cache_bytes_per_sequence, 268_566_528);
        assert_eq!(lb.largest_batch, Some(238));
        // The largest batch fits, one more does not.
        assert_eq!(r.decode[0].fits, Some(true));
        assert_eq!(r.decode[1].fits, Some(false));
        assert_eq!(
            r.decode[0].memory_bytes_per_device,
            16_060_522_496 + 238 * 268_566_528
        );
        assert_eq!(r.memory_capacity_bytes_per_device, Some(80_000_000_000));
        assert_eq!((r.evidence.as_str(), r.kind.as_str()), ("model", "serve"));
    }

    #[test]
    fn decode_collectives_carry_latency_hand_checked_h100_tp2() {
        // Llama-3-8B decode, batch 1, tp = 2 on H100 NVLink 4. Per layer 2 all-reduces of
        // the hidden state, 1 · 4096 · 2 B = 8 192 B; a ring of 2 moves 2 · 1/2 · 8 192 =
        // 8 192 B per device: 8 192 / 450e9 = 18.2 ns. Latency (NCCL ring, LL protocol):
        // 2 · (2 − 1) = 2 steps, 6.6 µs + 2 · 0.6 µs = 7.8 µs, some 430 times as much.
        // 64 of them per token (plus the embedding's): at least 64 · 7.8 = 499.2 µs of
        // interconnect per token, where the bandwidth terms alone gave 1.2 µs.
        let r = report("nvidia_h100_sxm", &opts(2, 1, &[1], &[2048]));
        let d = &r.decode[0];
        let ar = d
            .collectives
            .iter()
            .find(|c| c.name == "attention_and_mlp_outputs")
            .unwrap();
        assert_eq!((ar.count, ar.bytes_per_device, ar.steps), (64, 8_192, 2));
        assert!((ar.latency_s - 7.8e-6).abs() < 1e-15, "{ar:?}");
        assert_eq!(ar.bandwidth_time_s, 8_192.0 / 450e9);
        assert!(d.interconnect_time_s >= 64.0 * 7.8e-6, "{d:?}");
        let sum: f64 = d.collectives.iter().map(|c| c.total_time_s).sum();
        assert!((d.interconnect_time_s - sum).abs() < 1e-12, "{d:?}");
        // The latency source is in the hardware's sources and the limitations name the model.
        assert!(r.limitations.iter().any(|l| l.contains("α₀ + steps · α")));
        // MI300X's preset gives no latency: bandwidth terms only, and said so.
        let mi = report("amd_mi300x", &opts(2, 1, &[1], &[2048]));
        assert!(mi.decode[0].collectives.iter().all(|c| c.latency_s == 0.0));
        assert!(mi
            .limitations
            .iter()
            .any(|l| l.contains("`infinity_fabric` gives no per-message latency")));
    }

    #[test]
    fn one_device_times_are_the_model_roofline() {
        let hw = presets::hardware("nvidia_h100_sxm").unwrap();
        let r = report("nvidia_h100_sxm", &opts(1, 1, &[1, 32], &[2048]));
        for (i, b) in [1u64, 32].iter().enumerate() {
            let a = analyze_model(&at(&llama3(), Phase::Decode, *b, 2048), &hw).unwrap();
            let d = &r.decode[i];
            assert_eq!(d.step_time_s, a.roofline.time_lower_bound_s);
            assert_eq!(d.tokens_per_s, *b as f64 / a.roofline.time_lower_bound_s);
            // Decode of an 8 B model is bound by DRAM at these batches.
            assert_eq!(d.binding_roof, "dram");
            assert_eq!(d.interconnect_time_s, 0.0);
        }
        // Batch 1: the weights (16.06e9 B) less the embedding table, of which decode reads only
        // the gathered row (128 256 · 4096 · 2 B = 1.05e9), plus the KV cache (0.27e9), over
        // 3.35e12 B/s: (16.06 − 1.05 + 0.27)e9 / 3.35e12 ≈ 4.56 ms per token.
        assert!(
            (r.decode[0].step_time_s - 4.56e-3).abs() < 0.02e-3,
            "{:?}",
            r.decode[0]
        );
        let a = analyze_model(&at(&llama3(), Phase::Prefill, 1, 2048), &hw).unwrap();
        let p = &r.prefill[0];
        assert_eq!(p.time_s, a.roofline.time_lower_bound_s);
        assert_eq!(p.tokens_per_s, 2048.0 / p.time_s);
        // A 2048-token prompt is compute-bound.
        assert_eq!(p.binding_roof, "compute");
    }

    #[test]
    fn tpu_v5e_needs_two_chips_for_llama3() {
        // 16 060 522 496 weight bytes > 16e9: nothing fits on one v5e.
        let r = report("google_tpu_v5e", &opts(1, 1, &[1], &[2048]));
        assert_eq!(r.largest_batch[0].largest_batch, Some(0));
        assert_eq!(r.decode[0].fits, Some(false));
        // tp = 2: (16 060 522 496 − 32·16 384 − 8192) / 2 + 532 480 = 8 030 527 488 weight
        // bytes per chip, KV per sequence 268 566 528 / 2 = 134 283 264:
        // ⌊(16e9 − 8 030 527 488) / 134 283 264⌋ = ⌊59.35⌋ = 59.
        let r = report("google_tpu_v5e", &opts(2, 1, &[1], &[2048]));
        assert_eq!(r.weight_bytes_per_device, 8_030_527_488);
        assert_eq!(r.largest_batch[0].kv_cache_bytes_per_sequence, 134_283_264);
        assert_eq!(r.largest_batch[0].largest_batch, Some(59));
        assert_eq!(r.decode[0].fits, Some(true));
        assert_eq!(r.interconnect.as_deref(), Some("ici"));
        assert!(r.decode[0].interconnect_time_s > 0.0);
    }

    #[test]
    fn pipeline_decode_uses_micro_batches() {
        // pp = 2, batch 8: 2 micro-batches of 4; the step is the larger of one micro-batch's
        // pass and twice the busiest stage at batch 4.
        let hw = presets::hardware("nvidia_h100_sxm").unwrap();
        let o = opts(1, 2, &[1, 8], &[2048]);
        let r = report("nvidia_h100_sxm", &o);
        let a4 = analyze_model(&at(&llama3(), Phase::Decode, 4, 2048), &hw).unwrap();
        let p4 = analyze_parallel(&a4, &hw, &o.parallelism).unwrap();
        let d = &r.decode[1];
        assert_eq!(d.micro_batches, 2);
        assert_eq!(
            d.step_time_s,
            p4.pass_time_s.max(2.0 * p4.busiest_stage_time_s)
        );
        // Batch 1 cannot be split: one micro-batch through both stages.
        assert_eq!(r.decode[0].micro_batches, 1);
        // Memory is for all 8 sequences: the KV cache of 16 layers of 8 sequences.
        assert_eq!(d.kv_cache_bytes_per_device, 8 * 268_566_528 / 2);
    }

    #[test]
    fn data_parallel_replicas_multiply_throughput() {
        let mut o = opts(1, 1, &[32], &[2048]);
        let one = report("nvidia_h100_sxm", &o);
        o.parallelism.dp = 4;
        let four = report("nvidia_h100_sxm", &o);
        assert_eq!(four.devices, 4);
        assert_eq!(
            four.decode[0].tokens_per_s,
            4.0 * one.decode[0].tokens_per_s
        );
        assert_eq!(four.decode[0].step_time_s, one.decode[0].step_time_s);
    }

    #[test]
    fn unknown_capacity_is_said() {
        // The abstract `balanced` preset gives no DRAM capacity.
        let r = report("balanced", &opts(1, 1, &[1], &[128]));
        assert_eq!(r.decode[0].fits, None);
        assert_eq!(r.largest_batch[0].largest_batch, None);
        assert!(r.limitations.iter().any(|l| l.contains("no DRAM capacity")));
        assert!(!r.limitations.iter().any(|l| l.starts_with("single device")));
    }

    #[test]
    fn expert_parallel_largest_batch_mixtral() {
        // Mixtral-8x7B over 8 H100 with ep = 8: 14 485 561 344 weight bytes per GPU
        // (core::parallel's hand check); each GPU caches ⌈B / 8⌉ sequences of 268 566 528 B
        // (context 2048): ⌊(80e9 − 14 485 561 344) / 268 566 528⌋ = ⌊243.9⌋ = 243 per GPU,
        // so 8 · 243 = 1944 sequences fit and 1945 (⌈1945/8⌉ = 244 per GPU) do not.
        let m = decoder_from_hf_config(MIXTRAL, "mixtral", 1, 1, Phase::Decode, 0, DType::Bf16)
            .unwrap();
        let o = ServeOptions {
            parallelism: Parallelism {
                ep: 8,
                ..Parallelism::default()
            },
            batches: vec![1944, 1945],
            contexts: vec![2048],
        };
        let r = serve(&m, &presets::hardware("nvidia_h100_sxm").unwrap(), &o).unwrap();
        assert_eq!(r.weight_bytes_per_device, 14_485_561_344);
        assert_eq!(r.largest_batch[0].largest_batch, Some(1944));
        assert_eq!(r.decode[0].fits, Some(true));
        assert_eq!(r.decode[1].fits, Some(false));
        assert_eq!(r.decode[0].kv_cache_bytes_per_device, 243 * 268_566_528);
    }

    #[test]
    fn bad_grid_names_the_field() {
        let hw = presets::hardware("nvidia_h100_sxm").unwrap();
        let e = serve(&llama3(), &hw, &opts(1, 1, &[1, 0], &[2048]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`batch` = 0"), "{e}");
        let e = serve(&llama3(), &hw, &opts(1, 1, &[1], &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`context`"), "{e}");
        let many: Vec<u64> = (1..=65).collect();
        let e = serve(&llama3(), &hw, &opts(1, 1, &many, &[2048]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`batch` = 65 values"), "{e}");
        let e = serve(&llama3(), &hw, &opts(5, 1, &[1], &[2048]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("`tp` = 5"), "{e}");
    }
}
