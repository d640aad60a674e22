//! DRAM traffic accounting and a roofline time per kernel. Each kernel reads each of its
//! input storage tensors once (a Gather's or a Slice's data only as far as the selected
//! elements, at most the output's bytes) and writes each of its outputs once; tensors internal to a
//! fused kernel cost nothing; views cost nothing. FLOPs: 2·M·N·K per matmul, one per output
//! element for elementwise ops (transcendentals count as one), a few per element for the
//! row ops (stated in [`node_flops`]). Time per kernel is `max(FLOPs / peak, bytes / DRAM
//! bandwidth)` on the chosen chip. Left out: caches (a re-read that would hit L2 is still
//! charged), launch overhead, imperfect overlap, weight reuse across calls.

use crate::error::{GraphError, Result};
use crate::fusion::{Compiled, Kernel, KernelKind, Program};
use crate::ir::{DType, Op, TypedGraph, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};
use tensorforge_core::{Bound, HardwareSpec};

/// Traffic and roofline time of one kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTraffic {
    /// Kernel name.
    pub name: String,
    /// Loop-nest kind.
    pub kind: KernelKind,
    /// Node names, in order.
    pub nodes: Vec<String>,
    /// Named pattern, when recognized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Tensors read from memory.
    pub reads: Vec<String>,
    /// Tensors written to memory.
    pub writes: Vec<String>,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read + written bytes.
    pub total_bytes: u64,
    /// Floating-point (or integer) operations.
    pub flops: u64,
    /// FLOPs / total_bytes.
    pub arithmetic_intensity: f64,
    /// flops / peak, ns.
    pub compute_time_ns: f64,
    /// bytes / DRAM bandwidth, ns.
    pub memory_time_ns: f64,
    /// max of the two, ns.
    pub time_ns: f64,
    /// `memory`, `compute` or `balanced`.
    pub bound: String,
}

/// Totals of one program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramTraffic {
    /// Kernel count.
    pub kernel_count: usize,
    /// Sum of read bytes.
    pub read_bytes: u64,
    /// Sum of written bytes.
    pub write_bytes: u64,
    /// Read + written.
    pub total_bytes: u64,
    /// Sum of FLOPs.
    pub flops: u64,
    /// Sum of per-kernel roofline times, ns.
    pub time_ns: f64,
    /// Per kernel.
    pub kernels: Vec<KernelTraffic>,
}

/// Before vs after fusion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficSummary {
    /// Unfused total bytes.
    pub unfused_bytes: u64,
    /// Fused total bytes.
    pub fused_bytes: u64,
    /// unfused / fused (1 when both are 0).
    pub reduction_ratio: f64,
    /// 1 − fused / unfused, percent.
    pub saved_percent: f64,
    /// Unfused roofline time, ns.
    pub unfused_time_ns: f64,
    /// Fused roofline time, ns.
    pub fused_time_ns: f64,
}

/// The `fuse` report: kernels, decisions, traffic before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FuseReport {
    /// JSON schema version.
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Graph name.
    pub graph: String,
    /// Hardware preset used for the roofline times.
    pub hardware: String,
    /// Fused kernels with traffic and time.
    pub kernels: Vec<KernelTraffic>,
    /// Unfused kernels (one per op) with traffic and time.
    pub unfused_kernels: Vec<KernelTraffic>,
    /// Totals.
    pub traffic: TrafficSummary,
    /// Every rewrite and fusion decision with its reason.
    pub decisions: Vec<crate::rewrite::Decision>,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// What the traffic model omits.
pub const LIMITATIONS: &[&str] = &[
    "each kernel reads each input tensor once and writes each output once: no cache hits, no re-reads for tiling",
    "tensors internal to a fused kernel cost no DRAM traffic; views (Reshape, Transpose) are free aliases",
    "time per kernel is the roofline max(FLOPs/peak, bytes/bandwidth): no launch overhead, no imperfect overlap",
    "elementwise ops count 1 FLOP per element, transcendentals included",
];

/// FLOPs of one node: matmul 2·M·N·K; a function of the op table its
/// [`UnaryFn::flops_per_element`](crate::optable::UnaryFn::flops_per_element) (or the binary
/// one's) per output element (1, LogAddExp 3); other elementwise ops 1; reductions 1 per
/// input element; Softmax / LogSoftmax 4, LogSumExp 3, RMSNorm 4, LayerNorm 7 per element; RMSNorm+SwiGLU 4·T·D + 4·T·D·F + 5·T·F; Conv2d 2 · outputs · (C/group)·R·S;
/// MaxPool2d / AvgPool2d one compare or add per window element; CumSum one add per element;
/// Recurrence, per step, direction and batch row, 2·H·G·H for the recurrent product and the
/// cell's elementwise ops at 1 each (LSTM 13·H: 4·H adds of the projection, 3 sigmoids, 2
/// tanh, 3 products, 1 sum of H each; GRU 12·H);
/// sources, views, casts, Slice, Pad, Where, Gather, GatherElements and opaque ops 0.
pub fn node_flops(tg: &TypedGraph, i: usize) -> u64 {
    let out = tg.tensors[tg.node_outputs[i][0]].numel;
    let in0 = tg.node_inputs[i]
        .first()
        .map(|&t| tg.tensors[t].numel)
        .unwrap_or(0);
    match &tg.nodes[i].op {
        Op::Input { .. } | Op::Weight { .. } | Op::Constant { .. } => 0,
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Broadcast { .. }
        | Op::Concat { .. }
        | Op::Slice { .. }
        | Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::Pad { .. }
        | Op::Where => 0,
        Op::Conv2d { group, .. } => {
            // 2 FLOPs per multiply-add: out · (C/group) · R · S of them.
            let w = &tg.tensors[tg.node_inputs[i][1]].shape;
            let _ = group;
            let per_out = w.get(1..).map_or(0, |s| s.iter().product::<usize>()) as u64;
            out.saturating_mul(per_out).saturating_mul(2)
        }
        Op::MaxPool2d { kernel, .. } | Op::AvgPool2d { kernel, .. } => {
            out.saturating_mul(kernel.iter().product::<usize>() as u64)
        }
        Op::Cast { .. } | Op::Opaque { .. } => 0,
        Op::MatMul => {
            let a = &tg.tensors[tg.node_inputs[i][0]].shape;
            let k = *a.last().unwrap_or(&0) as u64;
            out.saturating_mul(k).saturating_mul(2)
        }
        Op::ReduceSum { .. } | Op::ReduceMax { .. } | Op::ReduceMean { .. } => in0,
        Op::Softmax { .. } | Op::LogSoftmax { .. } | Op::RmsNorm { .. } => in0.saturating_mul(4),
        Op::LogSumExp { .. } => in0.saturating_mul(3),
        Op::Unary { f } => out.saturating_mul(f.flops_per_element()),
        Op::Binary { f } => out.saturating_mul(f.flops_per_element()),
        Op::LayerNorm { .. } => in0.saturating_mul(7),
        Op::FusedAttention { .. } => {
            // Per batch matrix: 2·Sq·Sk·D (scores) + 2·Sq·Sk·Dv (weighted sum) + 5·Sq·Sk
            // (scale, mask, max, exp, sum).
            let ins = &tg.node_inputs[i];
            let q = &tg.tensors[ins[0]].shape;
            let kt = &tg.tensors[ins[1]].shape;
            let v = &tg.tensors[ins[2]].shape;
            let r = q.len();
            let dims = |s: &[usize], j: usize| s.get(j).copied().unwrap_or(0) as u64;
            let lead = q[..r.saturating_sub(2)]
                .iter()
                .fold(1u64, |a, &d| a.saturating_mul(d as u64));
            let (sq, d) = (dims(q, r.wrapping_sub(2)), dims(q, r.wrapping_sub(1)));
            let (sk, dv) = (dims(kt, r.wrapping_sub(1)), dims(v, r.wrapping_sub(1)));
            let scores = lead.saturating_mul(sq).saturating_mul(sk);
            scores.saturating_mul(d.saturating_add(dv).saturating_mul(2).saturating_add(5))
        }
        Op::Recurrence { cell, .. } => {
            // xw [S, B, D·G·H], rt [D, H, G·H].
            let xw = &tg.tensors[tg.node_inputs[i][0]].shape;
            let rt = &tg.tensors[tg.node_inputs[i][1]].shape;
            let dim = |s: &[usize], j: usize| s.get(j).copied().unwrap_or(0) as u64;
            let (h, g) = (dim(rt, 1), cell.gates() as u64);
            let cell_ops = match cell {
                crate::ir::RecurrentCell::Lstm => 13,
                _ => 12,
            };
            let per_row = h
                .saturating_mul(g)
                .saturating_mul(h)
                .saturating_mul(2)
                .saturating_add(h.saturating_mul(cell_ops));
            dim(xw, 0)
                .saturating_mul(dim(xw, 1))
                .saturating_mul(dim(rt, 0))
                .saturating_mul(per_row)
        }
        Op::RmsNormSwiGlu { .. } => {
            let x = &tg.tensors[tg.node_inputs[i][0]];
            let d = *x.shape.last().unwrap_or(&0) as u64;
            let f = *tg.tensors[tg.node_inputs[i][2]].shape.last().unwrap_or(&0) as u64;
            let t = x.numel.checked_div(d).unwrap_or(0);
            t.saturating_mul(d)
                .saturating_mul(4)
                .saturating_add(t.saturating_mul(d).saturating_mul(f).saturating_mul(4))
                .saturating_add(t.saturating_mul(f).saturating_mul(5))
        }
        _ => out,
    }
}

fn peak(hw: &HardwareSpec, dtype: DType) -> f64 {
    hw.peak_for(dtype)
        .or_else(|_| hw.peak_for(DType::Fp32))
        .or_else(|_| hw.peak_for(DType::Fp16))
        .unwrap_or_else(|_| hw.peak_ops_per_s.values().cloned().fold(0.0, f64::max))
}

/// Bytes kernel `k` reads: each input storage tensor once, except that a Gather
/// (embedding lookup), a GatherElements or a Slice reads only the selected elements of its data: at most
/// the output's bytes, never more than the whole input.
pub fn kernel_read_bytes(tg: &TypedGraph, k: &Kernel) -> u64 {
    let gathered = |t: usize| {
        k.nodes.iter().find_map(|&n| match tg.nodes[n].op {
            Op::Gather { .. } | Op::GatherElements { .. } | Op::Slice { .. }
                if tg.node_inputs[n][0] == t =>
            {
                Some(tg.tensors[tg.node_outputs[n][0]].bytes)
            }
            _ => None,
        })
    };
    k.inputs
        .iter()
        .map(|&t| {
            let b = tg.tensors[t].bytes;
            gathered(t).map_or(b, |g| g.min(b))
        })
        .sum()
}

/// What one kernel moves and computes, without a chip: the counts that
/// [`kernel_traffic`] turns into times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelCounts {
    /// Kernel name.
    pub name: String,
    /// Loop-nest kind.
    pub kind: KernelKind,
    /// Named pattern, when recognized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Bytes read ([`kernel_read_bytes`]).
    pub read_bytes: u64,
    /// Bytes written: each output once.
    pub write_bytes: u64,
    /// Read + written bytes.
    pub total_bytes: u64,
    /// Operations ([`node_flops`] summed over the kernel's nodes).
    pub flops: u64,
}

/// Bytes and FLOPs of one kernel; no hardware spec is needed to count.
pub fn kernel_counts(tg: &TypedGraph, k: &Kernel) -> KernelCounts {
    let read_bytes = kernel_read_bytes(tg, k);
    let write_bytes: u64 = k.outputs.iter().map(|&t| tg.tensors[t].bytes).sum();
    KernelCounts {
        name: k.name.clone(),
        kind: k.kind,
        pattern: k.pattern.clone(),
        read_bytes,
        write_bytes,
        total_bytes: read_bytes + write_bytes,
        flops: k.nodes.iter().map(|&n| node_flops(tg, n)).sum(),
    }
}

/// Bytes and FLOPs of every kernel of a program, in order; no hardware spec is needed.
pub fn program_counts(p: &Program) -> Vec<KernelCounts> {
    p.kernels
        .iter()
        .map(|k| kernel_counts(&p.graph, k))
        .collect()
}

/// Total DRAM bytes of a program: the sum of [`kernel_counts`]' `total_bytes`.
pub fn program_bytes(p: &Program) -> u64 {
    program_counts(p).iter().map(|k| k.total_bytes).sum()
}

/// Traffic and time of one kernel: [`kernel_counts`] on `hw`'s roofs.
pub fn kernel_traffic(tg: &TypedGraph, k: &Kernel, hw: &HardwareSpec) -> KernelTraffic {
    let KernelCounts {
        read_bytes,
        write_bytes,
        total_bytes: total,
        flops,
        ..
    } = kernel_counts(tg, k);
    let dtype = k
        .nodes
        .last()
        .map(|&n| tg.tensors[tg.node_outputs[n][0]].dtype)
        .unwrap_or(DType::Fp32);
    let p = peak(hw, dtype);
    let bw = hw.dram.bandwidth_bytes_per_s.unwrap_or(0.0);
    let compute_time_ns = if p > 0.0 { flops as f64 / p * 1e9 } else { 0.0 };
    let memory_time_ns = if bw > 0.0 {
        total as f64 / bw * 1e9
    } else {
        0.0
    };
    KernelTraffic {
        name: k.name.clone(),
        kind: k.kind,
        nodes: k.nodes.iter().map(|&n| tg.nodes[n].name.clone()).collect(),
        pattern: k.pattern.clone(),
        reads: k
            .inputs
            .iter()
            .map(|&t| tg.tensors[t].name.clone())
            .collect(),
        writes: k
            .outputs
            .iter()
            .map(|&t| tg.tensors[t].name.clone())
            .collect(),
        read_bytes,
        write_bytes,
        total_bytes: total,
        flops,
        arithmetic_intensity: if total > 0 {
            flops as f64 / total as f64
        } else {
            0.0
        },
        compute_time_ns,
        memory_time_ns,
        time_ns: compute_time_ns.max(memory_time_ns),
        bound: Bound::classify(compute_time_ns, memory_time_ns)
            .label()
            .to_string(),
    }
}

/// Traffic of every kernel of a program and the totals.
pub fn program_traffic(p: &Program, hw: &HardwareSpec) -> ProgramTraffic {
    let kernels: Vec<KernelTraffic> = p
        .kernels
        .iter()
        .map(|k| kernel_traffic(&p.graph, k, hw))
        .collect();
    let read_bytes = kernels.iter().map(|k| k.read_bytes).sum();
    let write_bytes = kernels.iter().map(|k| k.write_bytes).sum();
    ProgramTraffic {
        kernel_count: kernels.len(),
        read_bytes,
        write_bytes,
        total_bytes: read_bytes + write_bytes,
        flops: kernels.iter().map(|k| k.flops).sum(),
        time_ns: kernels.iter().map(|k| k.time_ns).sum(),
        kernels,
    }
}

/// Before / after summary of two program traffics.
pub fn summary(unfused: &ProgramTraffic, fused: &ProgramTraffic) -> TrafficSummary {
    let (u, f) = (unfused.total_bytes, fused.total_bytes);
    TrafficSummary {
        unfused_bytes: u,
        fused_bytes: f,
        reduction_ratio: if f > 0 { u as f64 / f as f64 } else { 1.0 },
        saved_percent: if u > 0 {
            100.0 * (1.0 - f as f64 / u as f64)
        } else {
            0.0
        },
        unfused_time_ns: unfused.time_ns,
        fused_time_ns: fused.time_ns,
    }
}

/// The full `fuse` report.
pub fn fuse_report(c: &Compiled, hw: &HardwareSpec) -> Result<FuseReport> {
    if hw.dram.bandwidth_bytes_per_s.is_none() {
        return Err(GraphError::Argument(format!(
            "hardware `{}` has no DRAM bandwidth",
            hw.name
        )));
    }
    let u = program_traffic(&c.unfused, hw);
    let f = program_traffic(&c.fused, hw);
    Ok(FuseReport {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        graph: c.fused.graph.name.clone(),
        hardware: hw.name.clone(),
        traffic: summary(&u, &f),
        kernels: f.kernels,
        unfused_kernels: u.kernels,
        decisions: c.decisions.clone(),
        limitations: LIMITATIONS.iter().map(|s| s.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::compile;
    use crate::ir::Graph;

    #[test]
    fn chain_traffic_hand_checked() {
        // x [1024] fp32 = 4096 B. Unfused: Exp reads x, writes e (8192); Neg reads e, writes y
        // (8192): 16384 B. Fused: reads x, writes y: 8192 B; ratio 2.
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[1024],"dtype":"fp32"}},
          {"name":"e","op":"Exp","inputs":["x"]},
          {"name":"y","op":"Neg","inputs":["e"]}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let hw = tensorforge_core::presets::hardware("balanced").unwrap();
        let r = fuse_report(&c, &hw).unwrap();
        assert_eq!(r.traffic.unfused_bytes, 16384);
        assert_eq!(r.traffic.fused_bytes, 8192);
        assert_eq!(r.traffic.reduction_ratio, 2.0);
        // balanced: 100 GB/s -> 8192 B take 81.92 ns; 2048 FLOPs at 2.048e12 take 1 ns.
        assert!((r.kernels[0].memory_time_ns - 81.92).abs() < 1e-9);
        assert_eq!(r.kernels[0].bound, "memory");
    }

    #[test]
    fn gather_reads_only_the_gathered_rows() {
        // Table [1000, 64] fp32 = 256 000 B; 3 int64 ids = 24 B; output [3, 64] fp32 = 768 B.
        // The lookup reads 768 B of the table (not 256 000) + 24 B of ids, writes 768 B.
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"table","op":"Weight","attrs":{"shape":[1000,64],"dtype":"fp32"}},
          {"name":"ids","op":"Input","attrs":{"shape":[3],"dtype":"int64"}},
          {"name":"e","op":"Gather","inputs":["table","ids"],"attrs":{"axis":0}}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let hw = tensorforge_core::presets::hardware("balanced").unwrap();
        let t = program_traffic(&c.fused, &hw);
        assert_eq!((t.read_bytes, t.write_bytes), (768 + 24, 768));
    }

    #[test]
    fn recurrence_flops_and_bytes_hand_checked() {
        // GRU, one direction, S = 4 steps, B = 2, H = 3 (G·H = 9): per step and row
        // 2·3·9 = 54 for h·Rᵀ + 12·3 = 36 for the cell: 4·2·90 = 720 FLOPs.
        // Reads xw 4·2·9 = 72, rt 27, h0 6, Rb_h 3 values = 108 · 4 B = 432 B; writes the
        // [4 + 1, 1, 2, 3] output (finals): 30 · 4 = 120 B.
        let g = Graph::from_json_str(
            r#"{"nodes":[
          {"name":"xw","op":"Input","attrs":{"shape":[4,2,9],"dtype":"fp32"}},
          {"name":"rt","op":"Weight","attrs":{"shape":[1,3,9],"dtype":"fp32"}},
          {"name":"h0","op":"Input","attrs":{"shape":[1,2,3],"dtype":"fp32"}},
          {"name":"rb","op":"Weight","attrs":{"shape":[1,3],"dtype":"fp32"}},
          {"name":"y","op":"Recurrence","inputs":["xw","rt","h0","rb"],
           "attrs":{"cell":"gru","direction":"forward","finals":true}}]}"#,
        )
        .unwrap();
        let c = compile(&g).unwrap();
        let hw = tensorforge_core::presets::hardware("balanced").unwrap();
        let t = program_traffic(&c.fused, &hw);
        assert_eq!((t.read_bytes, t.write_bytes), (432, 120));
        let tg = &c.fused.graph;
        assert_eq!(node_flops(tg, 4), 720);
    }
}
