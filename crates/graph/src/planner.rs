//! Static memory planning over a program's kernel order. Each materialized tensor (graph
//! inputs and every tensor a kernel writes; weights and constants are resident parameters
//! and are not planned) lives from the step that produces it to the last step that reads
//! it (graph outputs: to the end). Offsets come from greedy-by-size best fit (Pisarchyk &
//! Lee 2020, the TFLite arena planner) and from a lifetime-ordered best fit; the smaller
//! arena wins. Sizes are rounded up to the alignment. The lower bound is the maximum over
//! steps of the live (aligned) bytes. Every plan is verified: no two tensors live at the
//! same step may overlap. Left out: in-place reuse of an input by its consumer,
//! fragmentation across calls, per-kernel scratch.

use crate::error::{GraphError, Result};
use crate::fusion::{exposed, readers, Program};
use crate::ir::{Op, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

/// Default offset alignment.
pub const DEFAULT_ALIGN_BYTES: u64 = 64;

/// A tensor to place: size and inclusive lifetime in steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Tensor name.
    pub name: String,
    /// Unaligned size.
    pub bytes: u64,
    /// First step live.
    pub first_step: usize,
    /// Last step live (inclusive).
    pub last_step: usize,
}

/// A placed tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Tensor name.
    pub name: String,
    /// Unaligned size.
    pub bytes: u64,
    /// Size rounded up to the alignment.
    pub aligned_bytes: u64,
    /// Arena offset.
    pub offset_bytes: u64,
    /// First step live.
    pub first_step: usize,
    /// Last step live (inclusive).
    pub last_step: usize,
}

/// A memory plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// JSON schema version.
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Graph name.
    pub graph: String,
    /// Offset alignment.
    pub align_bytes: u64,
    /// Steps (kernels) in the order planned.
    pub steps: usize,
    /// Kernel name of each step.
    pub step_kernels: Vec<String>,
    /// `greedy_by_size` or `lifetime_ordered`.
    pub algorithm: String,
    /// Arena size of the chosen plan.
    pub peak_bytes: u64,
    /// Max over steps of live aligned bytes.
    pub lower_bound_bytes: u64,
    /// peak / lower bound (1 when both are 0).
    pub peak_to_lower_bound: f64,
    /// Sum of aligned sizes (no reuse at all).
    pub no_reuse_bytes: u64,
    /// Arena of greedy-by-size best fit.
    pub greedy_by_size_bytes: u64,
    /// Arena of lifetime-ordered best fit.
    pub lifetime_ordered_bytes: u64,
    /// Step where live bytes peak.
    pub peak_step: usize,
    /// Tensors live at that step.
    pub peak_live_tensors: Vec<String>,
    /// Always true in a returned plan: overlaps are errors.
    pub verified_no_overlap: bool,
    /// Placements.
    pub tensors: Vec<Placement>,
}

/// Lifetimes of the materialized tensors of a program.
pub fn intervals(p: &Program) -> Vec<Interval> {
    let tg = &p.graph;
    let kof = p.kernel_of_node();
    let steps = p.kernels.len().max(1);
    let mut out = vec![];
    let mut add = |t: usize, first: usize| {
        let mut last = first;
        for r in readers(tg, t) {
            if let Some(k) = kof[r] {
                last = last.max(k);
            }
        }
        if exposed(tg, t) {
            last = steps - 1;
        }
        out.push(Interval {
            name: tg.tensors[t].name.clone(),
            bytes: tg.tensors[t].bytes,
            first_step: first,
            last_step: last,
        });
    };
    for (i, n) in tg.nodes.iter().enumerate() {
        if matches!(n.op, Op::Input { .. }) {
            add(tg.node_outputs[i][0], 0);
        }
    }
    for (k, kr) in p.kernels.iter().enumerate() {
        for &t in &kr.outputs {
            add(t, k);
        }
    }
    out
}

fn align_up(v: u64, a: u64) -> Result<u64> {
    v.checked_add(a - 1)
        .map(|x| x / a * a)
        .ok_or_else(|| GraphError::Argument(format!("size {v} overflows when aligned to {a}")))
}

/// Best-fit placement in the given order; returns offsets by item index and the arena size.
fn best_fit(items: &[(u64, usize, usize)], order: &[usize]) -> (Vec<u64>, u64) {
    let mut offs = vec![0u64; items.len()];
    // Placed items sorted by offset: (offset, size, first, last).
    let mut placed: Vec<(u64, u64, usize, usize)> = Vec::with_capacity(items.len());
    let mut arena = 0u64;
    for &i in order {
        let (size, f, l) = items[i];
        let mut prev_end = 0u64;
        let mut best: Option<(u64, u64)> = None; // (gap, offset)
        for &(o, s, pf, pl) in &placed {
            if pl < f || pf > l {
                continue;
            }
            if o >= prev_end {
                let gap = o - prev_end;
                let better = match best {
                    None => true,
                    Some((g, _)) => gap < g,
                };
                if gap >= size && better {
                    best = Some((gap, prev_end));
                }
            }
            prev_end = prev_end.max(o.saturating_add(s));
        }
        let off = best.map(|(_, o)| o).unwrap_or(prev_end);
        offs[i] = off;
        arena = arena.max(off.saturating_add(size));
        let pos = placed.partition_point(|&(o, ..)| o <= off);
        placed.insert(pos, (off, size, f, l));
    }
    (offs, arena)
}

/// Check that no two simultaneously live placements overlap.
pub fn verify(ts: &[Placement]) -> Result<()> {
    let mut idx: Vec<usize> = (0..ts.len()).collect();
    idx.sort_by_key(|&i| ts[i].offset_bytes);
    // Sweep by offset: compare each with the following ones that start before it ends.
    for (a_pos, &a) in idx.iter().enumerate() {
        let ta = &ts[a];
        let end = ta.offset_bytes + ta.aligned_bytes;
        for &b in &idx[a_pos + 1..] {
            let tb = &ts[b];
            if tb.offset_bytes >= end {
                break;
            }
            if ta.aligned_bytes == 0 || tb.aligned_bytes == 0 {
                continue;
            }
            if ta.first_step <= tb.last_step && tb.first_step <= ta.last_step {
                return Err(GraphError::Overlap {
                    a: ta.name.clone(),
                    b: tb.name.clone(),
                    detail: format!(
                        "[{}, {}) steps {}..={} vs [{}, {}) steps {}..={}",
                        ta.offset_bytes,
                        end,
                        ta.first_step,
                        ta.last_step,
                        tb.offset_bytes,
                        tb.offset_bytes + tb.aligned_bytes,
                        tb.first_step,
                        tb.last_step
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Plan a set of intervals over `steps` steps.
pub fn plan_intervals(
    graph: &str,
    ivs: &[Interval],
    steps: usize,
    step_kernels: Vec<String>,
    align: u64,
) -> Result<MemoryPlan> {
    if align == 0 || !align.is_power_of_two() {
        return Err(GraphError::Argument(format!(
            "alignment {align} must be a power of two >= 1"
        )));
    }
    let steps = steps.max(1);
    let mut items = Vec::with_capacity(ivs.len());
    for iv in ivs {
        items.push((
            align_up(iv.bytes, align)?,
            iv.first_step,
            iv.last_step.min(steps - 1),
        ));
    }
    // Live bytes per step (difference array).
    let mut diff = vec![0i128; steps + 1];
    for &(s, f, l) in &items {
        diff[f] += s as i128;
        diff[l + 1] -= s as i128;
    }
    let (mut live, mut lb, mut peak_step) = (0i128, 0i128, 0usize);
    for (s, d) in diff.iter().take(steps).enumerate() {
        live += d;
        if live > lb {
            lb = live;
            peak_step = s;
        }
    }
    let no_reuse = items
        .iter()
        .try_fold(0u64, |a, &(s, ..)| a.checked_add(s))
        .ok_or_else(|| GraphError::Argument("total tensor bytes overflow".into()))?;
    let mut by_size: Vec<usize> = (0..items.len()).collect();
    by_size.sort_by(|&a, &b| {
        items[b]
            .0
            .cmp(&items[a].0)
            .then(items[a].1.cmp(&items[b].1))
    });
    let mut by_life: Vec<usize> = (0..items.len()).collect();
    by_life.sort_by(|&a, &b| {
        items[a]
            .1
            .cmp(&items[b].1)
            .then(items[b].0.cmp(&items[a].0))
    });
    let (o1, a1) = best_fit(&items, &by_size);
    let (o2, a2) = best_fit(&items, &by_life);
    let (offs, arena, alg) = if a1 <= a2 {
        (o1, a1, "greedy_by_size")
    } else {
        (o2, a2, "lifetime_ordered")
    };
    let tensors: Vec<Placement> = ivs
        .iter()
        .zip(&items)
        .zip(&offs)
        .map(|((iv, &(s, f, l)), &o)| Placement {
            name: iv.name.clone(),
            bytes: iv.bytes,
            aligned_bytes: s,
            offset_bytes: o,
            first_step: f,
            last_step: l,
        })
        .collect();
    verify(&tensors)?;
    let lb = lb as u64;
    Ok(MemoryPlan {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        graph: graph.into(),
        align_bytes: align,
        steps,
        step_kernels,
        algorithm: alg.into(),
        peak_bytes: arena,
        lower_bound_bytes: lb,
        peak_to_lower_bound: if lb == 0 {
            1.0
        } else {
            arena as f64 / lb as f64
        },
        no_reuse_bytes: no_reuse,
        greedy_by_size_bytes: a1,
        lifetime_ordered_bytes: a2,
        peak_step,
        peak_live_tensors: tensors
            .iter()
            .filter(|t| {
                t.first_step <= peak_step && peak_step <= t.last_step && t.aligned_bytes > 0
            })
            .map(|t| t.name.clone())
            .collect(),
        verified_no_overlap: true,
        tensors,
    })
}

/// Plan a program's memory.
pub fn plan(p: &Program, align: u64) -> Result<MemoryPlan> {
    let ivs = intervals(p);
    let names = p.kernels.iter().map(|k| k.name.clone()).collect();
    plan_intervals(&p.graph.name, &ivs, p.kernels.len(), names, align)
}

/// Error when the plan does not fit `capacity_bytes`, naming the peak step and its tensors.
pub fn check_capacity(plan: &MemoryPlan, capacity_bytes: u64) -> Result<()> {
    if plan.peak_bytes <= capacity_bytes {
        return Ok(());
    }
    let live: Vec<String> = plan
        .tensors
        .iter()
        .filter(|t| plan.peak_live_tensors.contains(&t.name))
        .map(|t| format!("{} ({} B)", t.name, t.aligned_bytes))
        .collect();
    Err(GraphError::Capacity {
        capacity_bytes,
        peak_bytes: plan.peak_bytes,
        live_bytes: plan.lower_bound_bytes,
        step: plan.peak_step,
        kernel: plan
            .step_kernels
            .get(plan.peak_step)
            .cloned()
            .unwrap_or_else(|| "-".into()),
        live: live.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(name: &str, bytes: u64, f: usize, l: usize) -> Interval {
        Interval {
            name: name.into(),
            bytes,
            first_step: f,
            last_step: l,
        }
    }

    #[test]
    fn hand_checked_plan() {
        // a 100 B (steps 0-1), b 64 B (1-2), c 200 B (2-3), d 64 B (3). Aligned to 64:
        // a 128, b 64, c 256, d 64. Live: step0 128, step1 192, step2 320, step3 320.
        let ivs = [
            iv("a", 100, 0, 1),
            iv("b", 64, 1, 2),
            iv("c", 200, 2, 3),
            iv("d", 64, 3, 3),
        ];
        let p = plan_intervals("t", &ivs, 4, vec![], 64).unwrap();
        assert_eq!(p.lower_bound_bytes, 320);
        assert_eq!(p.no_reuse_bytes, 128 + 64 + 256 + 64);
        assert!(p.peak_bytes >= p.lower_bound_bytes);
        // Greedy by size: c at 0; a (overlaps none of c's steps? a 0-1, c 2-3: disjoint) at 0;
        // b overlaps a and c -> above both: 256; d overlaps c -> first gap after c: 256.
        assert_eq!(p.greedy_by_size_bytes, 320);
        let e = check_capacity(&p, 300).unwrap_err().to_string();
        assert!(e.contains("step 2") && e.contains("c (256 B)"), "{e}");
        assert!(plan_intervals("t", &ivs, 4, vec![], 48).is_err());
    }

    #[test]
    fn verify_catches_overlap() {
        let mk = |n: &str, o: u64, f: usize, l: usize| Placement {
            name: n.into(),
            bytes: 64,
            aligned_bytes: 64,
            offset_bytes: o,
            first_step: f,
            last_step: l,
        };
        assert!(verify(&[mk("a", 0, 0, 1), mk("b", 32, 1, 2)]).is_err());
        assert!(verify(&[mk("a", 0, 0, 1), mk("b", 32, 2, 3)]).is_ok());
        assert!(verify(&[mk("a", 0, 0, 1), mk("b", 64, 0, 3)]).is_ok());
    }
}
