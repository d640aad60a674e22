//! Multi-device parallelism for a decoder model: tensor (TP), pipeline (PP), expert (EP) and
//! data (DP) parallelism over N devices, built on the single-device whole-model analysis
//! ([`ModelAnalysis`]). It gives, for the busiest device of each pipeline stage, the FLOPs,
//! DRAM bytes, weight and KV-cache memory; the collectives each kind of parallelism implies
//! with their bytes per device; and the time of each collective on the interconnect roof
//! (bytes / bandwidth, [`Interconnect`]) added to the stage's roofline time.
//!
//! What it models, in one line each (formulas in the item docs and docs/model.md,
//! "Multi-device"):
//! - TP (Megatron-style): attention split by heads, the MLP by its hidden width, embedding and
//!   LM head by vocabulary; norms and residual adds replicated; two ring all-reduces of the
//!   hidden state per layer, one after the vocabulary-parallel embedding, one gather of the
//!   logits. KV heads split over the devices, or replicated when tp > kv_heads.
//! - PP: `layers / pp` consecutive layers per stage, the embedding on the first stage, the final
//!   norm and LM head on the last; one point-to-point transfer of the hidden state between
//!   consecutive stages.
//! - EP (mixture-of-experts models only): the routed experts split over `ep · tp` devices,
//!   attention and the other non-expert parts data-parallel over the `ep` ranks; two
//!   all-to-alls of the routed tokens per MoE layer ([`expert_all_to_all_bytes`]).
//! - DP: whole replicas serving different requests; no communication in inference.
//!
//! Latent attention's cache (one latent per token for all heads) is replicated across the
//! tensor-parallel devices rather than split.
//!
//! Left out: overlap of communication with compute (times add), per-message latency and
//! collective-library protocol overheads, the slower network between scale-up domains (a
//! larger group is only flagged), activation and workspace memory, the duplicated full-width
//! activations of column-/row-parallel GEMMs (per-device bytes are a lower bound), sequence
//! parallelism, and load imbalance beyond what the stage layout implies.

use crate::analysis::{LIMITATIONS, SCHEMA_VERSION};
use crate::dtype::DType;
use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::gemm::GemmRole;
use crate::hardware::{HardwareSpec, Interconnect};
use crate::roofline::roofline;
use crate::transformer::{analyze_model, DecoderModel, ElementwiseKind, ModelAnalysis};
use serde::{Deserialize, Serialize};

fn one() -> u64 {
    1
}

/// Degrees of parallelism. Devices per model replica `tp · pp · ep`; devices in all
/// `tp · pp · ep · dp`. Every degree defaults to 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parallelism {
    /// Tensor-parallel degree: devices that split every layer's matrices.
    #[serde(default = "one")]
    pub tp: u64,
    /// Pipeline-parallel degree: stages of consecutive layers.
    #[serde(default = "one")]
    pub pp: u64,
    /// Expert-parallel degree: devices that split a mixture of experts' experts.
    #[serde(default = "one")]
    pub ep: u64,
    /// Data-parallel degree: whole replicas, each serving its own requests.
    #[serde(default = "one")]
    pub dp: u64,
}

impl Default for Parallelism {
    fn default() -> Self {
        Parallelism {
            tp: 1,
            pp: 1,
            ep: 1,
            dp: 1,
        }
    }
}

impl Parallelism {
    /// Devices holding one replica of the model: `tp · pp · ep`, checked.
    pub fn replica_devices(&self) -> Result<u64> {
        checked_product(
            &[self.tp, self.pp, self.ep],
            "tp · pp · ep (devices per replica)",
        )
    }

    /// Devices in all: `tp · pp · ep · dp`, checked.
    pub fn devices(&self) -> Result<u64> {
        checked_product(
            &[self.tp, self.pp, self.ep, self.dp],
            "tp · pp · ep · dp (devices)",
        )
    }

    /// KV heads each device caches under tensor parallelism: `Hkv / tp` when `tp ≤ Hkv`, else
    /// 1 (each KV head replicated `tp / Hkv` times). Assumes [`Parallelism::validate_for`].
    pub fn kv_heads_per_device(&self, kv_heads: u64) -> u64 {
        if self.tp <= kv_heads {
            kv_heads / self.tp
        } else {
            1
        }
    }

    /// Check the degrees against a model: every degree ≥ 1; `tp` divides `heads`, and
    /// divides `kv_heads` or is a multiple of it (the KV heads are then replicated), and
    /// divides the MLP width of every layer kind (`d_ff` for dense layers, `moe.expert_d_ff`
    /// and the shared experts' width with a mixture of experts); `pp` divides `layers`; `ep`
    /// is 1 for a dense model and otherwise divides `moe.experts`; the device count fits in 64
    /// bits. Each error names the degree and its value.
    pub fn validate_for(&self, m: &DecoderModel) -> Result<()> {
        for (f, v) in [
            ("tp", self.tp),
            ("pp", self.pp),
            ("ep", self.ep),
            ("dp", self.dp),
        ] {
            if v == 0 {
                return Err(CoreError::invalid(f, v, "must be at least 1"));
            }
        }
        self.devices()?;
        let b = &m.block;
        let (t, h, hkv) = (self.tp, b.heads, b.effective_kv_heads());
        if !h.is_multiple_of(t) {
            return Err(CoreError::invalid(
                "tp",
                t,
                format!("must divide heads = {h} (each device computes heads / tp query heads)"),
            ));
        }
        if hkv == 0 || !(hkv.is_multiple_of(t) || t.is_multiple_of(hkv)) {
            return Err(CoreError::invalid(
                "tp",
                t,
                format!(
                    "must divide kv_heads = {hkv} or be a multiple of it (then each KV head is replicated tp / kv_heads times)"
                ),
            ));
        }
        let mut widths = vec![];
        if b.moe.is_none() || m.first_dense_layers > 0 {
            widths.push(("d_ff", b.d_ff));
        }
        if let Some(moe) = &b.moe {
            widths.push(("moe.expert_d_ff", moe.expert_d_ff));
            let shared = moe.effective_shared_d_ff()?;
            if shared > 0 {
                widths.push(("moe.shared_d_ff", shared));
            }
        }
        for (name, w) in widths {
            if !w.is_multiple_of(t) {
                return Err(CoreError::invalid(
                    "tp",
                    t,
                    format!("must divide {name} = {w} (each device holds {name} / tp MLP columns)"),
                ));
            }
        }
        if !m.layers.is_multiple_of(self.pp) {
            return Err(CoreError::invalid(
                "pp",
                self.pp,
                format!(
                    "must divide layers = {} (each stage holds layers / pp layers)",
                    m.layers
                ),
            ));
        }
        if self.ep > 1 {
            let Some(moe) = &b.moe else {
                return Err(CoreError::invalid(
                    "ep",
                    self.ep,
                    "this model has no experts (a dense MLP): expert parallelism needs a mixture of experts; use ep = 1",
                ));
            };
            if self.ep > moe.experts || !moe.experts.is_multiple_of(self.ep) {
                return Err(CoreError::invalid(
                    "ep",
                    self.ep,
                    format!(
                        "must divide moe.experts = {} (each device holds experts / ep routed experts)",
                        moe.experts
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Bytes one device sends (and receives) in a ring all-reduce of `message_bytes` over
/// `devices`: a reduce-scatter and an all-gather of `p − 1` steps of `M / p` each,
/// `⌈2·(p − 1)·M / p⌉`; 0 for one device.
///
/// ```
/// use tensorforge_core::parallel::ring_all_reduce_bytes;
/// // 8 devices, 1 MiB: 2·7/8 · 1 048 576 = 1 835 008 bytes per device.
/// assert_eq!(ring_all_reduce_bytes(1 << 20, 8).unwrap(), 1_835_008);
/// assert_eq!(ring_all_reduce_bytes(1 << 20, 1).unwrap(), 0);
/// ```
pub fn ring_all_reduce_bytes(message_bytes: u64, devices: u64) -> Result<u64> {
    share_bytes(
        message_bytes,
        2,
        devices,
        "2·(p − 1)·M / p (all-reduce bytes)",
    )
}

/// Bytes the gathering device receives in a gather (or one device in an all-gather) of a
/// message of `message_bytes` split evenly over `devices`: `⌈(p − 1)·M / p⌉`.
pub fn gather_bytes(message_bytes: u64, devices: u64) -> Result<u64> {
    share_bytes(message_bytes, 1, devices, "(p − 1)·M / p (gather bytes)")
}

fn share_bytes(m: u64, factor: u64, p: u64, what: &str) -> Result<u64> {
    if p == 0 {
        return Err(CoreError::invalid("devices", 0, "must be at least 1"));
    }
    let v = (factor as u128 * (p as u128 - 1) * m as u128).div_ceil(p as u128);
    u64::try_from(v).map_err(|_| CoreError::overflow(what))
}

/// Bytes one device sends in one all-to-all that dispatches its routed tokens to the experts
/// of `ep` devices (combining the experts' outputs sends as many again). Each of the
/// `tokens_per_device` tokens goes to `top_k` experts; under uniform routing a share
/// `(ep − 1) / ep` of them live on other devices, and each carries the hidden state of
/// `d_model` elements: `⌈T_dev · k · D · bytes(dtype) · (ep − 1) / ep⌉`.
///
/// `ep` must be between 1 and `experts` (each device holds at least one expert) and `top_k`
/// between 1 and `experts`.
///
/// ```
/// use tensorforge_core::parallel::expert_all_to_all_bytes;
/// use tensorforge_core::DType;
/// // 16 tokens, top-2 of 8 experts on 4 devices, D = 4096, bf16:
/// // 16·2·4096·2 B · 3/4 = 196 608 bytes.
/// assert_eq!(expert_all_to_all_bytes(16, 2, 4096, DType::Bf16, 8, 4).unwrap(), 196_608);
/// ```
pub fn expert_all_to_all_bytes(
    tokens_per_device: u64,
    top_k: u64,
    d_model: u64,
    dtype: DType,
    experts: u64,
    ep: u64,
) -> Result<u64> {
    if experts == 0 {
        return Err(CoreError::invalid("experts", 0, "must be at least 1"));
    }
    if ep == 0 || ep > experts {
        return Err(CoreError::invalid(
            "ep",
            ep,
            format!("must be between 1 and the number of experts = {experts} (each device holds at least one expert)"),
        ));
    }
    if top_k == 0 || top_k > experts {
        return Err(CoreError::invalid(
            "top_k",
            top_k,
            format!("must be between 1 and experts = {experts}"),
        ));
    }
    let elems = checked_product(
        &[tokens_per_device, top_k, d_model],
        "T·k·D (routed elements)",
    )?;
    let bytes = dtype.bytes_for(elems)?;
    share_bytes(bytes, 1, ep, "T·k·D·bytes·(ep − 1)/ep (all-to-all bytes)")
}

/// A collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// Ring all-reduce: `2·(p − 1)/p` of the message per device.
    AllReduce,
    /// Gather to one device: `(p − 1)/p` of the message received.
    Gather,
    /// One device sends the whole message to the next.
    PointToPoint,
    /// Every device sends a share of its tokens to every other (expert dispatch/combine).
    AllToAll,
}

impl CollectiveKind {
    /// Steps on the critical path of one collective over `p` devices, each one message to a
    /// neighbour (the step counts of NCCL's ring model): ring all-reduce `2·(p − 1)` (a
    /// reduce-scatter and an all-gather), gather `p − 1`, all-to-all `p − 1` (pairwise
    /// exchanges), point-to-point 1; none in a group of one device.
    ///
    /// ```
    /// use tensorforge_core::parallel::CollectiveKind;
    /// assert_eq!(CollectiveKind::AllReduce.steps(8), 14);
    /// assert_eq!(CollectiveKind::AllToAll.steps(4), 3);
    /// assert_eq!(CollectiveKind::PointToPoint.steps(2), 1);
    /// assert_eq!(CollectiveKind::AllReduce.steps(1), 0);
    /// ```
    pub fn steps(self, p: u64) -> u64 {
        let hops = p.saturating_sub(1);
        match self {
            CollectiveKind::AllReduce => hops.saturating_mul(2),
            CollectiveKind::Gather | CollectiveKind::AllToAll => hops,
            CollectiveKind::PointToPoint => u64::from(p > 1),
        }
    }
}

/// One collective of a forward pass, for the busiest device of one stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Collective {
    /// What it is.
    pub kind: CollectiveKind,
    /// Where it happens: `attention_and_mlp_outputs`, `embedding_output`, `logits`,
    /// `stage_activations`.
    pub name: String,
    /// The pipeline stage it belongs to (the sending stage for point-to-point).
    pub stage: u64,
    /// Devices taking part.
    pub group_devices: u64,
    /// How many times it runs in one forward pass.
    pub count: u64,
    /// The full message (the tensor being reduced, gathered or sent), bytes.
    pub message_bytes: u64,
    /// Bytes one device sends (receives, for a gather) per occurrence.
    pub bytes_per_device: u64,
    /// Interconnect bandwidth per device for this group, one direction, bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Steps on its critical path ([`CollectiveKind::steps`]).
    pub steps: u64,
    /// `α₀ + steps · α` ([`crate::hardware::Interconnect::latency_s`]), seconds per
    /// occurrence; 0 when the interconnect gives no latency.
    pub latency_s: f64,
    /// `bytes_per_device / bandwidth`, seconds per occurrence.
    pub bandwidth_time_s: f64,
    /// `latency_s + bandwidth_time_s`, seconds per occurrence.
    pub time_s: f64,
    /// `count · time_s`, seconds.
    pub total_time_s: f64,
}

/// The load of the busiest device (tensor-parallel rank) of one pipeline stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageLoad {
    /// Stage index, 0 first.
    pub stage: u64,
    /// First layer of the stage.
    pub first_layer: u64,
    /// Layers in the stage, `layers / pp`.
    pub layers: u64,
    /// FLOPs on one device of the stage.
    pub flops: u64,
    /// DRAM bytes one device of the stage moves (a lower bound, see the module comment).
    pub dram_bytes: u64,
    /// Weight bytes one device of the stage holds.
    pub weight_bytes: u64,
    /// KV-cache bytes one device of the stage holds (and reads).
    pub kv_cache_bytes: u64,
    /// `weight_bytes + kv_cache_bytes`.
    pub memory_bytes: u64,
    /// `flops / peak`, seconds.
    pub compute_time_s: f64,
    /// `dram_bytes / bandwidth` (the slowest memory roof), seconds.
    pub memory_time_s: f64,
    /// Tensor-parallel collectives of the stage plus its point-to-point send, seconds.
    pub interconnect_time_s: f64,
    /// `max(compute, memory) + interconnect`, seconds (no overlap).
    pub time_s: f64,
    /// `compute`, the memory level's name (`dram`) or `interconnect`: the largest term.
    pub binding_roof: String,
}

/// The multi-device report of one forward pass.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParallelAnalysis {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `parallel`.
    pub kind: String,
    /// Hardware name.
    pub hardware: String,
    /// The interconnect's name, when the hardware gives one.
    pub interconnect: Option<String>,
    /// The degrees.
    pub parallelism: Parallelism,
    /// Devices per replica, `tp · pp · ep`.
    pub replica_devices: u64,
    /// Devices in all, `tp · pp · ep · dp`.
    pub devices: u64,
    /// Tokens in the replica's pass, `T = batch · S_q`.
    pub tokens: u64,
    /// Tokens one device's attention sees: `⌈batch / ep⌉ · S_q` (attention runs
    /// data-parallel over the expert-parallel ranks).
    pub tokens_per_device: u64,
    /// Routed experts each device holds, `E / ep` (absent for a dense model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts_per_device: Option<u64>,
    /// KV heads each device caches (`Hkv / tp`, or 1 when replicated; 1 latent with latent
    /// attention).
    pub kv_heads_per_device: u64,
    /// How many devices hold each KV head (`tp / Hkv` when tp > Hkv, `tp` for a latent, else
    /// 1).
    pub kv_head_replication: u64,
    /// The divisor of one rank's KV cache under tensor parallelism: `min(tp, Hkv)`, or 1 for
    /// latent attention.
    pub kv_cache_split: u64,
    /// One row per pipeline stage: the busiest device of the stage.
    pub stages: Vec<StageLoad>,
    /// Every collective of the pass.
    pub collectives: Vec<Collective>,
    /// The largest per-device memory (weights + KV cache) over the stages, bytes.
    pub max_memory_bytes: u64,
    /// One forward pass through every stage in turn: `Σ stage time + (pp − 1) · transfer`,
    /// seconds.
    pub pass_time_s: f64,
    /// The busiest stage's time including its send to the next stage, seconds.
    pub busiest_stage_time_s: f64,
    /// `Σ stage compute time`, seconds.
    pub compute_time_s: f64,
    /// `Σ stage memory time`, seconds.
    pub memory_time_s: f64,
    /// `Σ stage interconnect time` (collectives and transfers), seconds.
    pub interconnect_time_s: f64,
    /// The roof with the largest time summed over the stages: `compute`, the memory level
    /// (`dram`) or `interconnect`.
    pub binding_roof: String,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// Multi-device omissions, appended to [`LIMITATIONS`].
pub const PARALLEL_LIMITATIONS: &[&str] = &[
    "tensor parallelism as in Megatron-LM: q/k/v, gate/up and the LM head split by output columns, o_proj and down by input rows, attention by heads, the embedding by vocabulary; norms and residual adds run replicated on every device",
    "per-device DRAM bytes = (single-device bytes − KV cache − replicated ops) / tp + KV cache / min(tp, kv_heads) + replicated ops: the full-width activations each device reads before a column-parallel GEMM or writes after a row-parallel one are counted once for the group, so per-device bytes are a lower bound",
    "tp must divide kv_heads or be a multiple of it; when tp > kv_heads each KV head is cached on tp / kv_heads devices, and the duplicated k/v projection work is not added; latent attention's cache (one latent per token for all heads) is replicated on every tensor-parallel device, its latent projections are counted split",
    "collective time = α₀ + steps · α + bytes per device / interconnect bandwidth (Hockney's α-β cost in NCCL's ring form: all-reduce 2(p−1) steps and 2(p−1)/p of the message, gather and all-to-all p−1 steps, a send 1); α₀ and α come from the interconnect (the NVLink presets: NCCL's default tuner constants for its LL protocol, 6.6 µs + 0.6 µs per step); an interconnect without them gets no latency term, which at small decode batches is most of a collective's time; tree and NVLS algorithms, protocol switching by message size and bandwidth lost to the LL protocol's flags are not modelled",
    "communication does not overlap compute: a stage's collective and transfer times are added to its roofline time",
    "pipeline stages hold layers / pp consecutive layers of the average layer; the first stage adds the embedding, the last the final norm and LM head (with a copy of a tied embedding)",
    "data parallelism replicates the whole model: no communication in inference",
    "expert parallelism: the routed experts split over ep · tp devices (ep must divide the experts); attention and every non-expert part run data-parallel over the ep ranks, each with ⌈batch / ep⌉ sequences; routing is uniform, so each device gets 1/(ep·tp) of the routed work and of the experts touched; two all-to-alls per MoE layer (dispatch, combine) of the routed hidden states leaving the device, shared by the tp ranks",
    "pipeline stages with a mixture of experts and dense first layers get the average layer's work; the all-to-alls are placed in the stages that hold MoE layers",
    "memory per device counts weights and KV cache only: activations, workspace, allocator fragmentation and the framework's own memory are not",
    "a group larger than the interconnect's domain crosses a slower scale-out network that is not modelled (the times are then optimistic)",
];

/// Quantities of one stage before the tensor-parallel split: total and replicated parts.
struct StageWork {
    flops: u64,
    rep_flops: u64,
    bytes: u64,
    rep_bytes: u64,
    weights: u64,
    rep_weights: u64,
    kv: u64,
}

/// `⌈(total − replicated) / t⌉ + replicated`: the busiest of `t` devices when the replicated
/// part runs on every device and the rest splits evenly.
fn split(total: u64, replicated: u64, t: u64, what: &str) -> Result<u64> {
    checked_sum(
        &[total.saturating_sub(replicated).div_ceil(t), replicated],
        what,
    )
}

fn interconnect_for(hw: &HardwareSpec, replica_devices: u64) -> Result<Option<&Interconnect>> {
    match (&hw.interconnect, replica_devices) {
        (_, 1) => Ok(hw.interconnect.as_ref()),
        (Some(ic), _) => Ok(Some(ic)),
        (None, n) => Err(CoreError::invalid(
            "interconnect",
            "(missing)",
            format!(
                "hardware `{}` gives no interconnect bandwidth, and tp · pp · ep = {n} devices must communicate; use a hardware file with an [interconnect] table (docs/hardware.md) or tp = pp = ep = 1",
                hw.name
            ),
        )),
    }
}

/// Routed-expert GEMM rows of an analysis, summed over its mixture-of-experts layers:
/// `(FLOPs, DRAM bytes)`; `(0, 0)` for a dense model.
fn routed_expert_rows(x: &ModelAnalysis) -> Result<(u64, u64)> {
    let roles = [
        GemmRole::ExpertGate,
        GemmRole::ExpertUp,
        GemmRole::ExpertDown,
    ]
    .map(GemmRole::name);
    let rows: Vec<_> = x
        .block
        .gemms
        .iter()
        .filter(|g| roles.contains(&g.name.as_str()))
        .collect();
    let moe_layers = x.layers.saturating_sub(x.dense_layers);
    let f = checked_sum(
        &rows.iter().map(|g| g.flops).collect::<Vec<_>>(),
        "expert FLOPs",
    )?;
    let b = checked_sum(
        &rows.iter().map(|g| g.compulsory_bytes).collect::<Vec<_>>(),
        "expert bytes",
    )?;
    Ok((
        checked_product(&[moe_layers, f], "layers · expert FLOPs")?,
        checked_product(&[moe_layers, b], "layers · expert bytes")?,
    ))
}

/// Split a single-device whole-model analysis over `par` on `hw` (the chip `a` was analysed
/// on): per-stage loads of the busiest device, the collectives and their times.
///
/// With `t = tp`, `p = pp`, `e = ep`, `s = layers / p`, `n` the norm parameters per channel.
/// Without experts (`e = 1`) every quantity comes from `a`; with expert parallelism the
/// non-expert part comes from the same model analysed at the batch of one expert-parallel
/// rank, `⌈B / e⌉` (attention and everything but the routed experts run data-parallel over
/// the `e` ranks), and the routed experts' part from `a` (the whole replica's tokens, spread
/// over `e · t` devices). From those: `F`, `B`, `W`, `K` the FLOPs, DRAM bytes, weight bytes
/// and KV-cache bytes without the routed experts; `F_x`, `B_x` the routed-expert GEMM rows,
/// `W_x = bytes_w(moe_layers · E · mlp_matrices · D · F_e)`; the embedding, final-norm and
/// LM-head rows; `R_F`, `R_B` the norm and residual rows per layer (replicated under TP);
/// `W_r = bytes_w(2·n·D)` the norm weights per layer, where `bytes_w(x) = ⌈x · W_all / P⌉`
/// uses the analysis' weight bytes per parameter (so any weight dtype is followed):
///
/// ```text
/// layers' share  X_layers = X − embedding − final norm − LM head      (X ∈ F, B, W)
/// stage i        X_i = X_layers / p (+ embedding on i = 0, + final norm + LM head on i = p−1;
///                the last stage also holds a copy of a tied embedding when p > 1)
/// replicated     rep_i = s·R (+ final norm on the last stage)
/// KV split       c = min(t, Hkv)  (1 for latent attention: the latent is replicated)
/// per device     f_i = ⌈(F_i − repF_i)/t⌉ + repF_i + ⌈F_x / p / (e·t)⌉
///                k_i = ⌈K / p / c⌉
///                b_i = ⌈(B_i − K/p − repB_i)/t⌉ + k_i + repB_i + ⌈B_x / p / (e·t)⌉
///                w_i = ⌈(W_i − repW_i)/t⌉ + repW_i + ⌈W_x / p / (e·t)⌉,  memory_i = w_i + k_i
/// stage time     T_i = max(f_i / peak, b_i / bw_dram) + Σ collectives of stage i
/// collectives    (T_d = tokens of one rank) all-reduce of bytes(T_d·D): 2 per layer (after
///                attention, after the MLP), one after the embedding; gather of the
///                bytes(T_lm·V) logits; each ring_all_reduce_bytes / gather_bytes over
///                min(U, (t−1)·peer); point-to-point bytes(T_d·D) between stages over
///                min(U, peer); per MoE layer two all-to-alls (dispatch, combine) of
///                ⌈expert_all_to_all_bytes(T_d, k, D, E, e) / t⌉ over min(U, (e−1)·peer)
/// pass           Σ_i T_i   (each T_i holds its send to the next stage)
/// ```
pub fn analyze_parallel(
    a: &ModelAnalysis,
    hw: &HardwareSpec,
    par: &Parallelism,
) -> Result<ParallelAnalysis> {
    let m = &a.workload;
    par.validate_for(m)?;
    if a.hardware != hw.name {
        return Err(CoreError::invalid(
            "hardware",
            &hw.name,
            format!("the model was analysed on `{}`", a.hardware),
        ));
    }
    let replica_devices = par.replica_devices()?;
    let devices = par.devices()?;
    let ic = interconnect_for(hw, replica_devices)?;
    let dt = m.block.dtype;
    let d = m.block.d_model;
    let (t, p, e) = (par.tp, par.pp, par.ep);
    let s = m.layers / p;
    let et = checked_product(&[e, t], "ep · tp")?;
    let hkv = a.block.kv_heads;
    let latent = m.block.mla.is_some();
    let kv_share = if latent { 1 } else { t.min(hkv).max(1) };

    // Bytes of `params` weight parameters at the model's weight storage: the analysis' weight
    // bytes per parameter, `⌈params · W / P⌉` (exact for whole-byte dtypes), so a weight
    // dtype other than the activations' is followed without naming it here.
    let (w_all, p_all) = (a.totals.weight_bytes, a.weight_params.max(1));
    let weight_bytes = |params: u64| -> Result<u64> {
        u64::try_from((params as u128 * w_all as u128).div_ceil(p_all as u128))
            .map_err(|_| CoreError::overflow("weight bytes"))
    };

    // The non-expert part at one expert-parallel rank's batch.
    let rank_owned;
    let rank: &ModelAnalysis = if e > 1 {
        let mut mr = m.clone();
        mr.block.batch = m.block.batch.div_ceil(e);
        rank_owned = analyze_model(&mr, hw)?;
        &rank_owned
    } else {
        a
    };
    let (f_x, b_x) = routed_expert_rows(a)?;
    let (f_x_rank, b_x_rank) = routed_expert_rows(rank)?;
    let w_x = match &m.block.moe {
        Some(moe) => weight_bytes(checked_product(
            &[
                m.block_layers(),
                moe.experts,
                m.block.mlp.matrices(),
                d,
                moe.expert_d_ff,
            ],
            "layers · E · mlp_matrices · D · F_e (routed expert weights)",
        )?)?,
        None => 0,
    };

    // Whole-model parts from the analysis.
    let w_emb = weight_bytes(checked_product(&[m.vocab_size, d], "V·D")?)?;
    let w_head = if m.tie_word_embeddings { 0 } else { w_emb };
    let w_final_norm = weight_bytes(checked_product(
        &[m.block.norm.params_per_channel(), d],
        "final norm parameters",
    )?)?;
    let w_norms_per_layer = weight_bytes(checked_product(
        &[2, m.block.norm.params_per_channel(), d],
        "norm parameters per layer",
    )?)?;
    let (emb, fnorm, lm) = (&rank.embedding, &rank.final_norm, &rank.lm_head);
    let tot = &rank.totals;
    let f_layers = tot.flops.saturating_sub(checked_sum(
        &[emb.flops, fnorm.flops, lm.flops, f_x_rank],
        "end FLOPs",
    )?);
    let b_layers = tot.dram_bytes.saturating_sub(checked_sum(
        &[
            emb.dram_bytes,
            fnorm.dram_bytes,
            lm.compulsory_bytes,
            b_x_rank,
        ],
        "end bytes",
    )?);
    let w_layers = tot.weight_bytes.saturating_sub(checked_sum(
        &[w_emb, w_head, w_final_norm, w_x],
        "end weights",
    )?);
    let replicated = |k: ElementwiseKind| {
        matches!(
            k,
            ElementwiseKind::LayerNorm | ElementwiseKind::RmsNorm | ElementwiseKind::ResidualAdd
        )
    };
    let rows = rank.block.non_gemm.iter().filter(|r| replicated(r.op));
    let rep_f_layer = checked_sum(
        &rows.clone().map(|r| r.flops).collect::<Vec<_>>(),
        "replicated FLOPs",
    )?;
    let rep_b_layer = checked_sum(
        &rows.map(|r| r.dram_bytes).collect::<Vec<_>>(),
        "replicated bytes",
    )?;
    let kv_stage = tot.kv_cache_bytes.div_ceil(p);
    let expert_share = |x: u64| x.div_ceil(p).div_ceil(et);

    let stage_work = |i: u64| -> Result<StageWork> {
        let (first, last) = (i == 0, i + 1 == p);
        let pick = |c: bool, v: u64| if c { v } else { 0 };
        let head_copy = if m.tie_word_embeddings && p > 1 {
            w_emb
        } else {
            w_head
        };
        Ok(StageWork {
            flops: checked_sum(
                &[
                    f_layers.div_ceil(p),
                    pick(first, emb.flops),
                    pick(last, fnorm.flops),
                    pick(last, lm.flops),
                ],
                "stage FLOPs",
            )?,
            rep_flops: checked_sum(
                &[
                    checked_product(&[s, rep_f_layer], "replicated FLOPs")?,
                    pick(last, fnorm.flops),
                ],
                "replicated FLOPs",
            )?,
            bytes: checked_sum(
                &[
                    b_layers.div_ceil(p),
                    pick(first, emb.dram_bytes),
                    pick(last, fnorm.dram_bytes),
                    pick(last, lm.compulsory_bytes),
                ],
                "stage bytes",
            )?,
            rep_bytes: checked_sum(
                &[
                    checked_product(&[s, rep_b_layer], "replicated bytes")?,
                    pick(last, fnorm.dram_bytes),
                ],
                "replicated bytes",
            )?,
            weights: checked_sum(
                &[
                    w_layers.div_ceil(p),
                    pick(first, w_emb),
                    pick(last, w_final_norm),
                    pick(last, head_copy),
                ],
                "stage weights",
            )?,
            rep_weights: checked_sum(
                &[
                    checked_product(&[s, w_norms_per_layer], "replicated weights")?,
                    pick(last, w_final_norm),
                ],
                "replicated weights",
            )?,
            kv: kv_stage,
        })
    };

    // Collectives.
    let tokens = a.block.tokens;
    let tokens_rank = rank.block.tokens;
    let hidden_msg = dt.bytes_for(checked_product(&[tokens_rank, d], "T·D (hidden state)")?)?;
    let logits_msg = dt.bytes_for(checked_product(
        &[rank.lm_head_tokens, m.vocab_size],
        "T_lm·V (logits)",
    )?)?;
    let dispatch = match (&m.block.moe, e) {
        (Some(moe), e) if e > 1 => {
            let x = expert_all_to_all_bytes(tokens_rank, moe.top_k, d, dt, moe.experts, e)?;
            Some((x, x.div_ceil(t)))
        }
        _ => None,
    };
    let first_moe_layer = if m.block.moe.is_some() {
        m.first_dense_layers
    } else {
        m.layers
    };
    let group_bw = |g: u64| ic.map_or(f64::INFINITY, |ic| ic.group_bytes_per_s(g));
    let mut collectives = Vec::new();
    let mut push = |kind: CollectiveKind, name: &str, stage, group, count, msg, bytes: u64| {
        let bw = group_bw(group);
        let steps = kind.steps(group);
        let latency_s = ic.map_or(0.0, |ic| ic.latency_s(steps));
        let bandwidth_time_s = bytes as f64 / bw;
        let time_s = latency_s + bandwidth_time_s;
        collectives.push(Collective {
            kind,
            name: name.into(),
            stage,
            group_devices: group,
            count,
            message_bytes: msg,
            bytes_per_device: bytes,
            bandwidth_bytes_per_s: bw,
            steps,
            latency_s,
            bandwidth_time_s,
            time_s,
            total_time_s: count as f64 * time_s,
        });
    };
    for i in 0..p {
        if t > 1 {
            let ar = ring_all_reduce_bytes(hidden_msg, t)?;
            push(
                CollectiveKind::AllReduce,
                "attention_and_mlp_outputs",
                i,
                t,
                checked_product(&[2, s], "2 · layers per stage")?,
                hidden_msg,
                ar,
            );
            if i == 0 {
                push(
                    CollectiveKind::AllReduce,
                    "embedding_output",
                    i,
                    t,
                    1,
                    hidden_msg,
                    ar,
                );
            }
            if i + 1 == p {
                push(
                    CollectiveKind::Gather,
                    "logits",
                    i,
                    t,
                    1,
                    logits_msg,
                    gather_bytes(logits_msg, t)?,
                );
            }
        }
        if let Some((msg, bytes)) = dispatch {
            // MoE layers of this stage: [i·s, (i+1)·s) ∩ [first_dense_layers, layers).
            let moe_layers = ((i + 1) * s).saturating_sub((i * s).max(first_moe_layer));
            if moe_layers > 0 {
                push(
                    CollectiveKind::AllToAll,
                    "expert_dispatch_and_combine",
                    i,
                    e,
                    checked_product(&[2, moe_layers], "2 · MoE layers per stage")?,
                    msg,
                    bytes,
                );
            }
        }
        if i + 1 < p {
            push(
                CollectiveKind::PointToPoint,
                "stage_activations",
                i,
                2,
                1,
                hidden_msg,
                hidden_msg,
            );
        }
    }

    let dram_name = hw.dram.name.clone();
    let mut stages = Vec::new();
    for i in 0..p {
        let w = stage_work(i)?;
        let flops = checked_sum(
            &[
                split(w.flops, w.rep_flops, t, "stage FLOPs per device")?,
                expert_share(f_x),
            ],
            "stage FLOPs per device",
        )?;
        let kv = w.kv.div_ceil(kv_share);
        let bytes = checked_sum(
            &[
                w.bytes
                    .saturating_sub(w.kv)
                    .saturating_sub(w.rep_bytes)
                    .div_ceil(t),
                kv,
                w.rep_bytes,
                expert_share(b_x),
            ],
            "stage bytes per device",
        )?;
        let weights = checked_sum(
            &[
                split(w.weights, w.rep_weights, t, "stage weights per device")?,
                expert_share(w_x),
            ],
            "stage weights per device",
        )?;
        let rl = roofline(hw, dt, flops as f64, bytes as f64, &[])?;
        let comm: f64 = collectives
            .iter()
            .filter(|c| c.stage == i)
            .map(|c| c.total_time_s)
            .fold(0.0, |x, y| x + y);
        let (compute_s, memory_s) = (rl.compute_time_s, rl.memory_time_s);
        let memory_roof = rl
            .levels
            .iter()
            .max_by(|x, y| x.time_s.total_cmp(&y.time_s))
            .map_or(dram_name.clone(), |l| l.level.clone());
        stages.push(StageLoad {
            stage: i,
            first_layer: i * s,
            layers: s,
            flops,
            dram_bytes: bytes,
            weight_bytes: weights,
            kv_cache_bytes: kv,
            memory_bytes: checked_sum(&[weights, kv], "memory per device")?,
            compute_time_s: compute_s,
            memory_time_s: memory_s,
            interconnect_time_s: comm,
            time_s: compute_s.max(memory_s) + comm,
            binding_roof: binding(compute_s, memory_s, comm, &memory_roof),
        });
    }
    // Each stage's interconnect time holds its collectives and its send to the next stage,
    // so the pass (every stage in turn) is the sum of the stage times.
    let pass_time_s: f64 = stages.iter().map(|st| st.time_s).fold(0.0, |x, y| x + y);
    let interconnect_time_s: f64 = stages
        .iter()
        .map(|st| st.interconnect_time_s)
        .fold(0.0, |x, y| x + y);
    let busiest_stage_time_s = stages.iter().map(|st| st.time_s).fold(0.0, f64::max);
    let compute_time_s: f64 = stages
        .iter()
        .map(|st| st.compute_time_s)
        .fold(0.0, |x, y| x + y);
    let memory_time_s: f64 = stages
        .iter()
        .map(|st| st.memory_time_s)
        .fold(0.0, |x, y| x + y);
    let mut limitations: Vec<String> = LIMITATIONS
        .iter()
        .chain(PARALLEL_LIMITATIONS)
        .map(|s| s.to_string())
        .collect();
    if let Some(ic) = ic {
        if let Some(dom) = ic.domain_devices.filter(|dom| replica_devices > *dom) {
            limitations.push(format!(
                "{replica_devices} devices per replica exceed one {} domain ({dom} devices): part of the traffic crosses the scale-out network, which is slower than modelled",
                ic.name
            ));
        }
        if !ic.has_latency() && !collectives.is_empty() {
            limitations.push(format!(
                "interconnect `{}` gives no per-message latency (collective_latency_s, step_latency_s): its collectives are bandwidth terms only, optimistic by microseconds each",
                ic.name
            ));
        }
    }
    Ok(ParallelAnalysis {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "parallel".into(),
        hardware: hw.name.clone(),
        interconnect: ic.map(|ic| ic.name.clone()),
        parallelism: *par,
        replica_devices,
        devices,
        tokens,
        tokens_per_device: tokens_rank,
        experts_per_device: m.block.moe.as_ref().map(|x| x.experts / e),
        kv_heads_per_device: if latent {
            1
        } else {
            par.kv_heads_per_device(hkv)
        },
        kv_head_replication: if latent {
            t
        } else if t > hkv {
            t / hkv.max(1)
        } else {
            1
        },
        kv_cache_split: kv_share,
        max_memory_bytes: stages.iter().map(|st| st.memory_bytes).max().unwrap_or(0),
        stages,
        collectives,
        pass_time_s,
        busiest_stage_time_s,
        compute_time_s,
        memory_time_s,
        interconnect_time_s,
        binding_roof: binding(
            compute_time_s,
            memory_time_s,
            interconnect_time_s,
            &dram_name,
        ),
        limitations,
    })
}

/// The largest of the three terms: `compute`, `memory_roof` (a memory level's name) or
/// `interconnect`; ties go to compute, then memory.
fn binding(compute_s: f64, memory_s: f64, interconnect_s: f64, memory_roof: &str) -> String {
    if interconnect_s > compute_s && interconnect_s > memory_s {
        "interconnect".into()
    } else if memory_s > compute_s {
        memory_roof.into()
    } else {
        "compute".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;
    use crate::transformer::{analyze_model, decoder_from_hf_config, Phase};

    const LLAMA2: &str = include_str!("../data/models/llama2_7b_config.json");
    const LLAMA3: &str = include_str!("../data/models/llama3_8b_config.json");
    const MIXTRAL: &str = include_str!("../data/models/mixtral_8x7b_config.json");
    const DEEPSEEK_V3: &str = include_str!("../data/models/deepseek_v3_config.json");

    /// A decode step of `batch` sequences with `kv` cached tokens, bf16.
    fn decode(cfg: &str, batch: u64, kv: u64) -> DecoderModel {
        decoder_from_hf_config(cfg, "cfg", batch, 1, Phase::Decode, kv, DType::Bf16).unwrap()
    }

    fn par(tp: u64, pp: u64) -> Parallelism {
        Parallelism {
            tp,
            pp,
            ..Parallelism::default()
        }
    }

    fn run(m: &DecoderModel, hw: &str, p: Parallelism) -> Result<ParallelAnalysis> {
        let hw = presets::hardware(hw).unwrap();
        let a = analyze_model(m, &hw).unwrap();
        analyze_parallel(&a, &hw, &p)
    }

    fn tiny(heads: u64, kv_heads: u64, hidden: u64, d_ff: u64, layers: u64) -> DecoderModel {
        let cfg = format!(
            r#"{{"hidden_size": {hidden}, "num_attention_heads": {heads}, "num_key_value_heads": {kv_heads},
                "intermediate_size": {d_ff}, "num_hidden_layers": {layers}, "vocab_size": 100,
                "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": true}}"#
        );
        decode(&cfg, 1, 15)
    }

    #[test]
    fn one_device_is_the_single_device_analysis() {
        let m = decode(LLAMA2, 1, 4095);
        let hw = presets::hardware("nvidia_h100_sxm").unwrap();
        let a = analyze_model(&m, &hw).unwrap();
        let r = analyze_parallel(&a, &hw, &Parallelism::default()).unwrap();
        let st = &r.stages[0];
        assert_eq!(r.stages.len(), 1);
        assert_eq!(
            (st.flops, st.dram_bytes, st.weight_bytes, st.kv_cache_bytes),
            (
                a.totals.flops,
                a.totals.dram_bytes,
                a.totals.weight_bytes,
                a.totals.kv_cache_bytes
            )
        );
        assert!(r.collectives.is_empty() && r.interconnect_time_s == 0.0);
        // One stage, no communication: the roofline of the model's totals.
        assert_eq!(r.pass_time_s, a.roofline.time_lower_bound_s);
        assert_eq!(r.binding_roof, "dram");
        assert_eq!((r.devices, r.replica_devices), (1, 1));
    }

    #[test]
    fn tensor_parallel_weights_split_and_norms_replicate_llama2() {
        // Llama-2-7B, bf16: 13 476 831 232 weight bytes (docs/model.md). Norm weights are
        // replicated: 32 layers · 2 · 4096 · 2 B = 524 288, + final norm 4096 · 2 B = 8192,
        // = 532 480. tp = 2: (13 476 831 232 − 532 480) / 2 + 532 480 = 6 738 681 856.
        let m = decode(LLAMA2, 1, 4095);
        let r = run(&m, "nvidia_h100_sxm", par(2, 1)).unwrap();
        assert_eq!(r.stages[0].weight_bytes, 6_738_681_856);
        // KV cache at L = 4096: 32 layers · 2 · 32 heads · 128 · 4096 · 2 B = 2 GiB; 32 KV
        // heads over 2 devices: 1 GiB each.
        assert_eq!(r.stages[0].kv_cache_bytes, 1 << 30);
        assert_eq!(r.stages[0].memory_bytes, 6_738_681_856 + (1 << 30));
        assert_eq!((r.kv_heads_per_device, r.kv_head_replication), (16, 1));
    }

    #[test]
    fn kv_heads_replicate_when_tp_exceeds_them_llama3() {
        // Llama-3-8B (8 KV heads), L = 4096: 32 · 2 · 8 · 128 · 4096 · 2 B = 512 MiB.
        let m = decode(LLAMA3, 1, 4095);
        let one = run(&m, "nvidia_h100_sxm", par(1, 1)).unwrap();
        assert_eq!(one.stages[0].kv_cache_bytes, 512 << 20);
        // tp = 8: one KV head per device, 64 MiB.
        let t8 = run(&m, "nvidia_h100_sxm", par(8, 1)).unwrap();
        assert_eq!(t8.stages[0].kv_cache_bytes, 64 << 20);
        // tp = 16 > 8 KV heads: each head on 2 devices, still 64 MiB per device.
        let t16 = run(&m, "nvidia_h100_sxm", par(16, 1)).unwrap();
        assert_eq!(t16.stages[0].kv_cache_bytes, 64 << 20);
        assert_eq!((t16.kv_heads_per_device, t16.kv_head_replication), (1, 2));
        // 16 devices exceed the 8-GPU NVLink domain: said, not hidden.
        assert!(t16
            .limitations
            .iter()
            .any(|l| l.contains("exceed one nvlink4 domain (8 devices)")));
        assert!(!t8.limitations.iter().any(|l| l.contains("exceed one")));
    }

    #[test]
    fn pipeline_stages_hold_their_layers_and_ends_llama2() {
        // Layers' weights: 32 · (4·4096² + 3·4096·11008 + 2·4096) · 2 B = 12 952 535 040;
        // embedding = LM head = 32000 · 4096 · 2 B = 262 144 000; final norm 8192.
        // pp = 2: stage 0 = 12 952 535 040 / 2 + 262 144 000 = 6 738 411 520;
        //         stage 1 = 6 476 267 520 + 8192 + 262 144 000 = 6 738 419 712.
        let m = decode(LLAMA2, 1, 4095);
        let r = run(&m, "nvidia_h100_sxm", par(1, 2)).unwrap();
        let w: Vec<u64> = r.stages.iter().map(|s| s.weight_bytes).collect();
        assert_eq!(w, [6_738_411_520, 6_738_419_712]);
        assert_eq!((r.stages[1].first_layer, r.stages[1].layers), (16, 16));
        // KV: 2 GiB over 2 stages.
        assert!(r.stages.iter().all(|s| s.kv_cache_bytes == 1 << 30));
        assert_eq!(r.max_memory_bytes, 6_738_419_712 + (1 << 30));
        // tp = 2 and pp = 2: stage 0 = (6 738 411 520 − 16 layers · 16 384) / 2 + 262 144
        // = (6 738 411 520 − 262 144) / 2 + 262 144 = 3 369 336 832.
        let r = run(&m, "nvidia_h100_sxm", par(2, 2)).unwrap();
        assert_eq!(r.stages[0].weight_bytes, 3_369_336_832);
        assert_eq!(r.stages[0].kv_cache_bytes, 1 << 29);
        // Every stage's time is its roofline time plus its communication, and the pass is
        // their sum (no overlap).
        for s in &r.stages {
            let t = s.compute_time_s.max(s.memory_time_s) + s.interconnect_time_s;
            assert!((s.time_s - t).abs() <= 1e-15, "{s:?}");
        }
        let sum: f64 = r.stages.iter().map(|s| s.time_s).sum();
        assert!((r.pass_time_s - sum).abs() <= 1e-15);
    }

    #[test]
    fn a_tied_embedding_is_copied_to_the_last_stage() {
        // Tiny model: V = 100, D = 64, bf16, tied: the embedding (100 · 64 · 2 B = 12 800 B)
        // is counted once in one stage and held by both the first and the last of two stages.
        let m = tiny(4, 2, 64, 128, 4);
        let one = run(&m, "nvidia_h100_sxm", par(1, 1)).unwrap();
        let two = run(&m, "nvidia_h100_sxm", par(1, 2)).unwrap();
        let sum: u64 = two.stages.iter().map(|s| s.weight_bytes).sum();
        assert_eq!(sum, one.stages[0].weight_bytes + 12_800);
    }

    #[test]
    fn tensor_parallel_collectives_hand_checked_llama3_h100() {
        // Decode, batch 32, bf16, tp = 8 on NVLink 4 (450e9 B/s each way, switched).
        // Hidden state: 32 · 4096 · 2 B = 262 144 B; ring all-reduce per device
        // 2 · 7/8 · 262 144 = 458 752 B, 458 752 / 450e9 = 1.0194 µs, 2 per layer · 32 = 64.
        let m = decode(LLAMA3, 32, 2048);
        let r = run(&m, "nvidia_h100_sxm", par(8, 1)).unwrap();
        let ar = r
            .collectives
            .iter()
            .find(|c| c.name == "attention_and_mlp_outputs")
            .unwrap();
        assert_eq!(ar.kind, CollectiveKind::AllReduce);
        assert_eq!(
            (ar.count, ar.message_bytes, ar.bytes_per_device),
            (64, 262_144, 458_752)
        );
        assert_eq!(ar.bandwidth_time_s, 458_752.0 / 450e9);
        // Latency (NCCL's ring LL constants on NVLink): 2 · (8 − 1) = 14 steps,
        // 6.6 µs + 14 · 0.6 µs = 15.0 µs, some 15 times the bandwidth term.
        assert_eq!(ar.steps, 14);
        assert!((ar.latency_s - 15.0e-6).abs() < 1e-15, "{ar:?}");
        assert!((ar.time_s - (15.0e-6 + 458_752.0 / 450e9)).abs() < 1e-15);
        // The vocabulary-parallel embedding adds one more all-reduce of the same message.
        let emb = r
            .collectives
            .iter()
            .find(|c| c.name == "embedding_output")
            .unwrap();
        assert_eq!((emb.count, emb.bytes_per_device), (1, 458_752));
        // Logits: 32 · 128 256 · 2 B = 8 208 384 B, gathered: 7/8 of it = 7 182 336 B.
        let lg = r.collectives.iter().find(|c| c.name == "logits").unwrap();
        assert_eq!(
            (lg.kind, lg.message_bytes, lg.bytes_per_device),
            (CollectiveKind::Gather, 8_208_384, 7_182_336)
        );
        // 65 all-reduces of 15.0 µs latency each, and the gather of 7 steps:
        // 6.6 + 7 · 0.6 = 10.8 µs.
        let total = 65.0 * (15.0e-6 + 458_752.0 / 450e9) + 10.8e-6 + 7_182_336.0 / 450e9;
        assert!(
            (r.interconnect_time_s - total).abs() <= 1e-12,
            "{}",
            r.interconnect_time_s
        );
        assert_eq!(r.stages[0].interconnect_time_s, r.interconnect_time_s);
    }

    #[test]
    fn a_full_mesh_pair_gets_one_link_mi300x() {
        // MI300X: 7 Infinity Fabric links of 64e9 B/s each way. tp = 2: one peer, one link;
        // the all-reduce of 2 devices moves 2 · 1/2 · M = M = 262 144 B at 64e9 B/s.
        let m = decode(LLAMA3, 32, 2048);
        let r = run(&m, "amd_mi300x", par(2, 1)).unwrap();
        let ar = &r.collectives[0];
        assert_eq!(
            (ar.bytes_per_device, ar.bandwidth_bytes_per_s),
            (262_144, 64e9)
        );
        // pp = 2: one point-to-point send of the hidden state, also one link: 4.096 µs.
        let r = run(&m, "amd_mi300x", par(1, 2)).unwrap();
        let p2p: Vec<&Collective> = r.collectives.iter().collect();
        assert_eq!(p2p.len(), 1);
        assert_eq!(p2p[0].kind, CollectiveKind::PointToPoint);
        assert_eq!(p2p[0].time_s, 262_144.0 / 64e9);
        assert_eq!(r.stages[0].interconnect_time_s, p2p[0].time_s);
        assert_eq!(r.stages[1].interconnect_time_s, 0.0);
    }

    #[test]
    fn ring_gather_and_all_to_all_bytes_hand_checked() {
        // 2(p−1)/p · M: p = 2 → M; p = 4 → 1.5 M; p = 3, M = 10 → ⌈40/3⌉ = 14.
        assert_eq!(ring_all_reduce_bytes(1000, 2).unwrap(), 1000);
        assert_eq!(ring_all_reduce_bytes(1000, 4).unwrap(), 1500);
        assert_eq!(ring_all_reduce_bytes(10, 3).unwrap(), 14);
        // (p−1)/p · M: p = 8, M = 800 → 700.
        assert_eq!(gather_bytes(800, 8).unwrap(), 700);
        assert!(ring_all_reduce_bytes(1, 0).is_err());
        // Mixtral-like: 64 tokens per device, top-2 of 8 experts over 8 devices, D = 4096,
        // bf16: 64·2·4096·2 = 1 048 576 B, 7/8 of it leaves the device = 917 504 B.
        assert_eq!(
            expert_all_to_all_bytes(64, 2, 4096, DType::Bf16, 8, 8).unwrap(),
            917_504
        );
        // One device: nothing leaves it.
        assert_eq!(
            expert_all_to_all_bytes(64, 2, 4096, DType::Bf16, 8, 1).unwrap(),
            0
        );
        // More devices than experts.
        let e = expert_all_to_all_bytes(64, 2, 4096, DType::Bf16, 8, 16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`ep` = 16") && e.contains("experts = 8"), "{e}");
        let e = expert_all_to_all_bytes(64, 9, 4096, DType::Bf16, 8, 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`top_k` = 9"), "{e}");
    }

    #[test]
    fn expert_parallel_mixtral_hand_checked() {
        // Mixtral-8x7B, bf16: routed experts 32 layers · 8 · 3 · 4096 · 14 336 params
        // = 45 097 156 608, · 2 B = 90 194 313 216 bytes; the rest (attention, router, norms,
        // embedding, LM head) 46 702 792 704 − 45 097 156 608 = 1 605 636 096 params
        // = 3 211 272 192 bytes. ep = 8: one expert per GPU,
        // 3 211 272 192 + 90 194 313 216 / 8 = 14 485 561 344 bytes.
        let m = decode(MIXTRAL, 64, 2048);
        let ep8 = Parallelism {
            ep: 8,
            ..Parallelism::default()
        };
        let r = run(&m, "nvidia_h100_sxm", ep8).unwrap();
        let st = &r.stages[0];
        assert_eq!(st.weight_bytes, 14_485_561_344);
        assert_eq!((r.experts_per_device, r.replica_devices), (Some(1), 8));
        // Attention runs data-parallel: 64 / 8 = 8 sequences per GPU, whose KV cache at
        // L = 2049 is 8 · 32 · 2 · 8 · 128 · 2049 · 2 B = 8 · 268 566 528 = 2 148 532 224.
        assert_eq!(r.tokens_per_device, 8);
        assert_eq!(st.kv_cache_bytes, 2_148_532_224);
        // Dispatch and combine per MoE layer: 8 tokens · top-2 · 4096 · 2 B = 131 072 B, of
        // which 7/8 leave the GPU = 114 688 B; 2 · 32 layers = 64 all-to-alls.
        let a2a = r
            .collectives
            .iter()
            .find(|c| c.kind == CollectiveKind::AllToAll)
            .unwrap();
        assert_eq!(
            (a2a.count, a2a.bytes_per_device, a2a.group_devices),
            (64, 114_688, 8)
        );
        assert_eq!(a2a.bandwidth_time_s, 114_688.0 / 450e9);
        // 8 − 1 = 7 pairwise steps: 6.6 µs + 7 · 0.6 µs = 10.8 µs.
        assert_eq!(a2a.steps, 7);
        assert!((a2a.time_s - (10.8e-6 + 114_688.0 / 450e9)).abs() < 1e-15);
        // The whole model on one GPU holds every expert: 93 405 585 408 bytes.
        let one = run(&m, "nvidia_h100_sxm", Parallelism::default()).unwrap();
        assert_eq!(one.stages[0].weight_bytes, 93_405_585_408);
        assert_eq!(one.experts_per_device, Some(8));
        // Expert parallelism must split the 8 experts evenly.
        for bad in [3, 16] {
            let e = run(
                &m,
                "nvidia_h100_sxm",
                Parallelism {
                    ep: bad,
                    ..Parallelism::default()
                },
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("`ep` = {bad}")) && e.contains("moe.experts = 8"),
                "{e}"
            );
        }
    }

    #[test]
    fn latent_attention_cache_is_replicated_across_tensor_parallel_devices() {
        // DeepSeek-V3 caches kv_lora_rank + qk_rope_head_dim = 576 elements per token per
        // layer for all 128 heads: tp = 8 splits the heads but every GPU keeps the latent.
        let m = decode(DEEPSEEK_V3, 1, 4095);
        let one = run(&m, "nvidia_h200", Parallelism::default()).unwrap();
        let t8 = run(&m, "nvidia_h200", par(8, 1)).unwrap();
        // 61 layers · 576 · 4096 · 2 B = 287 834 112 bytes on every GPU.
        assert_eq!(one.stages[0].kv_cache_bytes, 287_834_112);
        assert_eq!(t8.stages[0].kv_cache_bytes, 287_834_112);
        assert_eq!((t8.kv_cache_split, t8.kv_head_replication), (1, 8));
    }

    #[test]
    fn bad_degrees_name_the_field_and_value() {
        let llama3 = decode(LLAMA3, 1, 15);
        let err =
            |m: &DecoderModel, hw: &str, p: Parallelism| run(m, hw, p).unwrap_err().to_string();
        let e = err(&llama3, "nvidia_h100_sxm", par(0, 1));
        assert!(e.contains("`tp` = 0"), "{e}");
        let e = err(
            &llama3,
            "nvidia_h100_sxm",
            Parallelism {
                dp: 0,
                ..Parallelism::default()
            },
        );
        assert!(e.contains("`dp` = 0"), "{e}");
        let e = err(&llama3, "nvidia_h100_sxm", par(3, 1));
        assert!(e.contains("`tp` = 3") && e.contains("heads = 32"), "{e}");
        // 12 heads, 4 KV heads: tp = 6 divides the heads but neither divides nor is a
        // multiple of the KV heads.
        let e = err(&tiny(12, 4, 96, 192, 4), "nvidia_h100_sxm", par(6, 1));
        assert!(e.contains("`tp` = 6") && e.contains("kv_heads = 4"), "{e}");
        // d_ff = 130 is not a multiple of tp = 4.
        let e = err(&tiny(4, 4, 64, 130, 4), "nvidia_h100_sxm", par(4, 1));
        assert!(e.contains("`tp` = 4") && e.contains("d_ff = 130"), "{e}");
        let e = err(&llama3, "nvidia_h100_sxm", par(1, 3));
        assert!(e.contains("`pp` = 3") && e.contains("layers = 32"), "{e}");
        let e = err(
            &llama3,
            "nvidia_h100_sxm",
            Parallelism {
                ep: 2,
                ..Parallelism::default()
            },
        );
        assert!(e.contains("`ep` = 2") && e.contains("no experts"), "{e}");
        // A chip without an interconnect cannot host tp = 2; dp needs none.
        let e = err(&llama3, "nvidia_l4", par(2, 1));
        assert!(
            e.contains("`interconnect`") && e.contains("nvidia_l4"),
            "{e}"
        );
        let dp = Parallelism {
            dp: 4,
            ..Parallelism::default()
        };
        let r = run(&llama3, "nvidia_l4", dp).unwrap();
        assert_eq!((r.devices, r.replica_devices), (4, 1));
    }
}
