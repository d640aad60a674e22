//! Input values for a run: seeded uniform values in [−1, 1) for every Input and Weight the
//! caller did not supply, and whole numbers for integer tensors (indices every `Gather`
//! reading them accepts, 0/1 for booleans, else [0, 100)). Left out: any other
//! distribution; supplied values are only checked for their element count.

use super::pool::check_size;
use crate::error::{GraphError, Result};
use crate::ir::{norm_axis, DType, Op, TypedGraph};
use std::collections::HashMap;

/// The largest integer magnitude an input may hold: every integer up to 2^24 is an exact f32.
pub const MAX_EXACT_INT: u64 = 1 << 24;

/// Convert one input's values to the executor's f32 into `out` (cleared first, its allocation
/// reused): floats and 8-bit integers as they are, 32- and 64-bit integers only while exact.
/// The error is the first integer beyond [`MAX_EXACT_INT`] in magnitude.
///
/// ```
/// use tensorforge_kernels::call::DataRef;
/// let mut v = vec![];
/// tensorforge_graph::exec::to_executor_values(DataRef::I64(&[3, -7]), &mut v).unwrap();
/// assert_eq!(v, [3.0, -7.0]);
/// assert_eq!(tensorforge_graph::exec::to_executor_values(DataRef::I64(&[1 << 25]), &mut v), Err(1 << 25));
/// ```
pub fn to_executor_values(
    data: tensorforge_kernels::call::DataRef<'_>,
    out: &mut Vec<f32>,
) -> std::result::Result<(), i64> {
    use tensorforge_kernels::call::DataRef;
    let exact = |x: i64| -> std::result::Result<f32, i64> {
        if x.unsigned_abs() > MAX_EXACT_INT {
            Err(x)
        } else {
            Ok(x as f32)
        }
    };
    out.clear();
    out.reserve(data.len());
    match data {
        DataRef::F32(s) => out.extend_from_slice(s),
        DataRef::F64(s) => out.extend(s.iter().map(|&x| x as f32)),
        DataRef::U8(s) => out.extend(s.iter().map(|&x| x as f32)),
        DataRef::I8(s) => out.extend(s.iter().map(|&x| x as f32)),
        DataRef::I32(s) => {
            for &x in s {
                out.push(exact(x.into())?);
            }
        }
        DataRef::I64(s) => {
            for &x in s {
                out.push(exact(x)?);
            }
        }
    }
    Ok(())
}

/// Deterministic uniform values in [−1, 1) for inputs not supplied
/// ([`tensorforge_core::rng::SplitMix64::f32_pm1_vec`]).
pub fn random_values(n: usize, seed: u64) -> Vec<f32> {
    tensorforge_core::rng::SplitMix64::f32_pm1_vec(seed, n)
}

/// Seeded random values for every Input and Weight of `tg` not already in `given`.
pub fn fill_inputs(
    tg: &TypedGraph,
    given: &mut HashMap<String, Vec<f32>>,
    seed: u64,
) -> Result<()> {
    check_size(tg)?;
    for (i, n) in tg.nodes.iter().enumerate() {
        if matches!(n.op, Op::Input { .. } | Op::Weight { .. }) {
            let t = &tg.tensors[tg.node_outputs[i][0]];
            if let Some(v) = given.get(&t.name) {
                if v.len() as u64 != t.numel {
                    return Err(GraphError::Input {
                        tensor: t.name.clone(),
                        detail: format!(
                            "has {} elements, the graph declares {:?} ({} elements)",
                            v.len(),
                            t.shape,
                            t.numel
                        ),
                    });
                }
                continue;
            }
            let n = usize::try_from(t.numel).map_err(|_| GraphError::Input {
                tensor: t.name.clone(),
                detail: "too large for this machine".into(),
            })?;
            let h = t
                .name
                .bytes()
                .fold(seed, |a, b| a.wrapping_mul(31).wrapping_add(b as u64));
            let mut v = random_values(n, h);
            if let Some(hi) = integer_range(tg, tg.node_outputs[i][0]) {
                // Whole numbers in [0, hi): valid indices for every Gather that reads them.
                for x in &mut v {
                    *x = (((*x + 1.0) * 0.5 * hi as f32) as usize).min(hi - 1) as f32;
                }
            }
            given.insert(t.name.clone(), v);
        }
    }
    Ok(())
}

/// For a generated integer tensor `t`: values are drawn from `[0, hi)`, `hi` the shortest
/// axis a `Gather` indexes with it (directly, or through Casts and views, as an optimizer's
/// int64 → int32 Cast before an embedding lookup), 2 for booleans, else 100. `None` for
/// float tensors.
fn integer_range(tg: &TypedGraph, t: usize) -> Option<usize> {
    let spec = &tg.tensors[t];
    if !spec.dtype.is_integer() {
        return None;
    }
    // `t` and what Casts and views of it carry the same values.
    let mut same = vec![t];
    let mut k = 0;
    while k < same.len() {
        let v = same[k];
        for (n, node) in tg.nodes.iter().enumerate() {
            if matches!(node.op, Op::Cast { .. } | Op::Reshape { .. })
                && tg.node_inputs[n].first() == Some(&v)
            {
                same.extend(tg.node_outputs[n].iter().copied());
            }
        }
        k += 1;
    }
    let gathered = tg
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(n, node)| match node.op {
            Op::Gather { axis } if tg.node_inputs[n].get(1).is_some_and(|i| same.contains(i)) => {
                let d = &tg.tensors[tg.node_inputs[n][0]].shape;
                norm_axis(axis, d.len()).map(|a| d[a])
            }
            _ => None,
        })
        .min();
    Some(
        gathered
            .unwrap_or(if spec.dtype == DType::Bool { 2 } else { 100 })
            .max(1),
    )
}
