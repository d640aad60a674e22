//! Code generation for fused kernels: each elementwise or row kernel of a
//! [`Program`](crate::fusion::Program) is
//! lowered to one loop nest, `for each row r: for each node: (a run of elementwise nodes in
//! one loop over the row's columns | a row operation over the whole row)`, and rendered as
//! C ([`c`]). Values of a run stay in registers; a value read by a later loop or a row op is
//! kept in a per-thread row of scratch; stored values go straight to their output.
//!
//! Left out (the interpreter runs them): matmul kernels, the RMSNorm+SwiGLU pattern, opaque
//! kernels (Concat, Slice, Gather, Conv, pooling), reductions that are not over the last
//! axis, broadcast (`Gather`) inputs of per-row values, and any op without a C form here.
//! [`c::render_program`] says why for each kernel it leaves out.

pub mod c;
pub mod cuda;
/// Triton rendering.
pub mod triton;

use crate::exec::{plan_nodes, Bind, NodePlan};
use crate::fusion::{Kernel, KernelKind};
use crate::ir::{norm_axis, Op, TypedGraph};
use std::collections::HashMap;

/// The fusion decisions that formed kernel `kernel`, one line each (`[+] node (rule):
/// reason`, newlines removed), for the comment above its generated source.
pub(crate) fn decision_lines(p: &crate::fusion::Program, kernel: &str) -> Vec<String> {
    p.decisions
        .iter()
        .filter(|d| d.target.as_deref() == Some(kernel))
        .map(|d| {
            format!(
                "[{}] {} ({}): {}",
                if d.accepted { "+" } else { "-" },
                d.node,
                d.rule,
                d.reason
            )
            .replace(['\n', '\r'], " ")
        })
        .collect()
}

/// The manifest's list of kernels left to the interpreter, with the reason.
pub(crate) fn interpreted_json(
    p: &crate::fusion::Program,
    skipped: &[(usize, String)],
) -> Vec<serde_json::Value> {
    skipped
        .iter()
        .map(|(i, why)| serde_json::json!({"kernel": p.kernels[*i].name, "reason": why}))
        .collect()
}

/// Longest row an elementwise kernel is cut into.
pub const ELEMENTWISE_ROW: usize = 4096;

/// How a node is evaluated in the loop nest.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Step {
    /// Full elementwise node inside run `usize`.
    Elem(usize),
    /// Per-row elementwise node (a scalar per row).
    PerRow,
    /// Row operation over the whole row.
    Row,
}

/// Ops evaluated element by element (the runs of the loop nest).
pub(crate) fn is_elementwise(op: &Op) -> bool {
    op.is_unary() || op.is_binary() || matches!(op, Op::Broadcast { .. })
}

/// A kernel lowered to the loop nest every backend renders.
pub(crate) struct Nest {
    /// The interpreter's plan of each node (binds, per-row flag, stores).
    pub(crate) plans: Vec<NodePlan>,
    /// An elementwise kernel, re-blocked into rows.
    pub(crate) elementwise: bool,
    /// Elements of the iteration domain.
    pub(crate) elems: usize,
    /// Rows and columns of the loop nest.
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// External tensors read, in argument order, and each one's slot.
    pub(crate) inputs: Vec<usize>,
    pub(crate) slot_of: HashMap<usize, usize>,
    /// How each node is evaluated.
    pub(crate) steps: Vec<Step>,
    /// Full values kept in a row of scratch (read outside their run, or row-op outputs).
    pub(crate) needs_row: Vec<bool>,
    /// Scratch offset of each such row.
    pub(crate) row_off: HashMap<usize, usize>,
    /// A LogSumExp needs one more scratch row.
    pub(crate) has_lse: bool,
    /// Floats of scratch per thread.
    pub(crate) scratch_floats: usize,
    /// Broadcast reads: (node position, bind index, node output shape, strides).
    pub(crate) gathers: Vec<(usize, usize, Vec<usize>, Vec<usize>)>,
    /// Inside a column loop, a row-major input reads as the value `in<slot>` and a scratch
    /// row as `ra<pos>`, a store sets `out<o>` and a scratch row's write `row<q>`, which the
    /// renderer loads and stores around the body (the CUDA target's vector accesses);
    /// false: `I<slot>[r * l + c]`, `a<pos>[c]`, `O<o>[r * l + c] = …` and `a<q>[c] = …`.
    pub(crate) flat_as_values: bool,
}

/// Operand `bi` of node `pi` as a C expression (the C and CUDA renderers share it): a value
/// of the same run is its register `v<pos>`, a full value from elsewhere its scratch row
/// `a<pos>[c]`, a per-row value `p<pos>`; an input is `I<slot>` indexed by the row `r` and
/// column `c` of an `l`-column nest (`col`: inside a loop over columns), or the values
/// `in<slot>` and `ra<pos>` (a scratch row's) where `flat_as_values`
/// ([`Nest::flat_as_values`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn operand(
    plans: &[NodePlan],
    steps: &[Step],
    slot_of: &HashMap<usize, usize>,
    l: usize,
    pi: usize,
    bi: usize,
    col: bool,
    flat_as_values: bool,
) -> Result<String, String> {
    let input = |t: usize| slot_of[&t];
    let p = &plans[pi];
    Ok(match &p.binds[bi] {
        Bind::Internal { pos, per_row, .. } => {
            if *per_row {
                format!("p{pos}")
            } else if !col {
                return Err("a per-row value reads a full value".into());
            } else if matches!((steps[*pos], steps[pi]), (Step::Elem(a), Step::Elem(b)) if a == b) {
                format!("v{pos}")
            } else if flat_as_values {
                format!("ra{pos}")
            } else {
                format!("a{pos}[c]")
            }
        }
        Bind::Flat(t) => {
            let i = input(*t);
            if p.per_row || !col {
                format!("I{i}[r]")
            } else if flat_as_values {
                format!("in{i}")
            } else {
                format!("I{i}[r * {l}LL + c]")
            }
        }
        Bind::Scalar(t) => format!("I{}[0]", input(*t)),
        Bind::PerRow(t) => format!("I{}[r]", input(*t)),
        Bind::Gather(t, st) => {
            let i = input(*t);
            let s_last = st.last().copied().unwrap_or(0);
            format!("I{i}[g{pi}_{bi} + c * {s_last}LL]")
        }
        Bind::Direct(t) => format!("I{}", input(*t)),
    })
}

/// The C statements that set `g<pos>_<bind>`, the element offset of row `r`'s start in each
/// broadcast input (row start `r·l` as a multi-index over the node's shape, dotted with the
/// input's strides); the C and CUDA renderers share them.
pub(crate) fn write_gather_bases(
    w: &mut String,
    gathers: &[(usize, usize, Vec<usize>, Vec<usize>)],
    l: usize,
) {
    use std::fmt::Write;
    for (pi, bi, shape, st) in gathers {
        let d = *shape.last().unwrap_or(&1) as u64;
        let s_last = st.last().copied().unwrap_or(0);
        let _ = writeln!(
            w,
            "        int64_t g{pi}_{bi} = ((r * {l}LL) % {d}LL) * {s_last}LL;"
        );
        let _ = writeln!(w, "        {{ int64_t rem = (r * {l}LL) / {d}LL;");
        for dd in (0..shape.len().saturating_sub(1)).rev() {
            let _ = writeln!(
                w,
                "          g{pi}_{bi} += (rem % {}LL) * {}LL; rem /= {}LL;",
                shape[dd].max(1),
                st[dd],
                shape[dd].max(1)
            );
        }
        let _ = writeln!(w, "        }}");
    }
}

impl Nest {
    /// Node `q`'s value as a C expression over its operands (`col`: inside a loop over the
    /// row's columns), for the C and CUDA renderers.
    pub(crate) fn node_expr(&self, tg: &TypedGraph, q: usize, col: bool) -> Result<String, String> {
        let p = &self.plans[q];
        let op = &tg.nodes[p.node].op;
        let args: Vec<String> = (0..p.binds.len())
            .map(|bi| {
                operand(
                    &self.plans,
                    &self.steps,
                    &self.slot_of,
                    self.cols,
                    q,
                    bi,
                    col,
                    self.flat_as_values,
                )
            })
            .collect::<Result<_, _>>()?;
        if args.len() == 1 {
            c::unary_expr(op, &args[0])
        } else {
            c::binary_expr(op, &args[0], &args[1])
        }
        .ok_or_else(|| format!("{} has no C form", op.name()))
    }

    /// The statements inside the column loop of the elementwise run starting at plan `pi`
    /// (each node's value in a register, its scratch row, its store), and the plan after
    /// the run.
    pub(crate) fn run_body(&self, tg: &TypedGraph, pi: usize) -> Result<(String, usize), String> {
        use std::fmt::Write;
        let l = self.cols;
        let run = self.steps[pi];
        let mut w = String::new();
        let mut q = pi;
        while q < self.plans.len() && self.steps[q] == run {
            let e = self.node_expr(tg, q, true)?;
            let _ = writeln!(w, "            const float v{q} = {e};");
            if self.needs_row[q] {
                if self.flat_as_values {
                    let _ = writeln!(w, "            row{q} = v{q};");
                } else {
                    let _ = writeln!(w, "            a{q}[c] = v{q};");
                }
            }
            if let Some(o) = self.plans[q].store {
                if self.flat_as_values {
                    let _ = writeln!(w, "            out{o} = v{q};");
                } else {
                    let _ = writeln!(w, "            O{o}[r * {l}LL + c] = v{q};");
                }
            }
            q += 1;
        }
        Ok((w, q))
    }

    /// A row op's addresses: the row it reads (`x`) and the row it writes (`ydst`: its
    /// scratch row, or straight into its output when nothing in the kernel reads it).
    pub(crate) fn row_addr(&self, tg: &TypedGraph, pi: usize) -> Result<(String, String), String> {
        let p = &self.plans[pi];
        let l = self.cols;
        let op = &tg.nodes[p.node].op;
        let x = match &p.binds[0] {
            Bind::Internal {
                pos,
                per_row: false,
                ..
            } => format!("a{pos}"),
            Bind::Flat(t) | Bind::Direct(t) => format!("(I{} + r * {l}LL)", self.slot_of[t]),
            _ => return Err(format!("{} reads a row it cannot address", op.name())),
        };
        let ydst = match (self.needs_row[pi], p.store) {
            (false, Some(o)) => format!("O{o} + r * {l}LL"),
            _ => format!("a{pi}"),
        };
        Ok((x, ydst))
    }

    /// Whether row op `pi` reads its row from an input (memory), not from a row this kernel
    /// computes into scratch just before (a prologue's): the prelude's `_in` helpers take
    /// their tails as overlapping vectors, which on a row just written wait on its stores.
    pub(crate) fn row_is_input(&self, pi: usize) -> bool {
        matches!(self.plans[pi].binds[0], Bind::Flat(_) | Bind::Direct(_))
    }

    /// Row op `pi`'s parameter `j` (a norm's gain or bias), which must come from memory.
    pub(crate) fn row_param(&self, tg: &TypedGraph, pi: usize, j: usize) -> Result<String, String> {
        let p = &self.plans[pi];
        match p.binds.get(j) {
            Some(Bind::Direct(t)) | Some(Bind::Flat(t)) => Ok(format!("I{}", self.slot_of[t])),
            _ => Err(format!(
                "{} parameters must come from memory",
                tg.nodes[p.node].op.name()
            )),
        }
    }
}

/// A broadcast input's view of its node's output shape (`shape`, element strides `st`)
/// with its trailing dims merged while they step as one: dim `i` joins the merged block
/// when its stride is the block's stride times the block's size (a contiguous run, or zero
/// across an input constant over them, as a `[1, C, 1, 1]` scale over `[1, C, H, W]`: one
/// block of `H·W`), or when its size is 1. The last stride is the block's. A row of
/// columns inside one block reads the input at `base + c·stride`; with the last dim alone,
/// a squeeze-and-excitation scale over 14 × 14 planes ran in rows of 14 values (0.27 ns a
/// value against 0.07 over 56 × 56 planes, AMD EPYC Zen 5).
pub(crate) fn merge_trailing(shape: &[usize], st: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let n = shape.len().min(st.len());
    if n == 0 {
        return (shape.to_vec(), st.to_vec());
    }
    let (mut size, stride) = (shape[n - 1], st[n - 1]);
    let mut i = n - 1;
    while i > 0 && (shape[i - 1] == 1 || st[i - 1] == stride * size) {
        size *= shape[i - 1];
        i -= 1;
    }
    let mut sh = shape[..i].to_vec();
    sh.push(size);
    let mut ss = st[..i].to_vec();
    ss.push(stride);
    (sh, ss)
}

/// Greatest common divisor (`gcd(0, b) = b`).
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Lower kernel `k` to the loop nest, or say why it has none.
pub(crate) fn lower(tg: &TypedGraph, k: &Kernel) -> Result<Nest, String> {
    match k.kind {
        KernelKind::Elementwise | KernelKind::Row => {}
        other => return Err(format!("{other:?} kernels run in the interpreter").to_lowercase()),
    }
    let plans: Vec<NodePlan> = plan_nodes(tg, k).map_err(|e| e.to_string())?;
    let elementwise = k.kind == KernelKind::Elementwise;
    let elems = usize::try_from(k.rows.saturating_mul(k.cols.max(1)))
        .map_err(|_| "too large".to_string())?;
    // Iteration domain.
    let (rows, cols) = if elementwise {
        // A row must stay inside one block of each broadcast input's merged trailing dims
        // (where the row's columns step it by one stride): their sizes' common divisor.
        let blocks = plans.iter().flat_map(|p| {
            p.binds.iter().filter_map(|b| match b {
                Bind::Gather(_, st) => Some(merge_trailing(&p.out_shape, st).0),
                _ => None,
            })
        });
        let l = match blocks.map(|sh| *sh.last().unwrap_or(&1)).reduce(gcd) {
            None => elems.clamp(1, ELEMENTWISE_ROW),
            Some(d) => (1..=d.clamp(1, ELEMENTWISE_ROW))
                .rev()
                .find(|l| d.is_multiple_of(*l))
                .unwrap_or(1),
        };
        (elems.div_ceil(l), l)
    } else {
        (k.rows as usize, (k.cols as usize).max(1))
    };
    let l = cols;

    // Input slots: every external tensor a node reads, in first-use order.
    let mut inputs: Vec<usize> = vec![];
    let mut slot_of: HashMap<usize, usize> = HashMap::new();
    for p in &plans {
        for b in &p.binds {
            if let Bind::Flat(t)
            | Bind::Scalar(t)
            | Bind::PerRow(t)
            | Bind::Gather(t, _)
            | Bind::Direct(t) = b
            {
                slot_of.entry(*t).or_insert_with(|| {
                    inputs.push(*t);
                    inputs.len() - 1
                });
            }
        }
    }
    // Steps and runs.
    let mut steps: Vec<Step> = vec![];
    let mut run = 0usize;
    let mut in_run = false;
    for p in &plans {
        let op = &tg.nodes[p.node].op;
        let s = if is_elementwise(op) {
            if p.per_row {
                Step::PerRow
            } else {
                if !in_run {
                    run += 1;
                    in_run = true;
                }
                Step::Elem(run)
            }
        } else {
            match op {
                Op::ReduceSum { axis, .. }
                | Op::ReduceMax { axis, .. }
                | Op::ReduceMean { axis, .. } => {
                    let x = &tg.tensors[tg.node_inputs[p.node][0]].shape;
                    if norm_axis(*axis, x.len()) != Some(x.len().saturating_sub(1)) {
                        return Err(format!("{} is not over the last axis", op.name()));
                    }
                    Step::Row
                }
                Op::Softmax { .. }
                | Op::LogSoftmax { .. }
                | Op::LogSumExp { .. }
                | Op::RmsNorm { .. }
                | Op::LayerNorm { .. } => Step::Row,
                other => return Err(format!("{} has no C form", other.name())),
            }
        };
        if !matches!(s, Step::Elem(_)) {
            in_run = false;
        }
        steps.push(s);
    }
    // Which full values need a scratch row: read outside their run, or produced by a row op.
    let mut needs_row = vec![false; plans.len()];
    for (pi, p) in plans.iter().enumerate() {
        for b in &p.binds {
            if let Bind::Internal { pos, per_row, .. } = b {
                if *per_row {
                    continue;
                }
                let same_run =
                    matches!((steps[*pos], steps[pi]), (Step::Elem(a), Step::Elem(b)) if a == b);
                if !same_run {
                    needs_row[*pos] = true;
                }
            }
        }
    }
    // A row op's full output needs a scratch row unless nothing in the kernel reads it and
    // it is stored: then it is written straight into its output row.
    let mut read_inside = vec![false; plans.len()];
    for p in &plans {
        for b in &p.binds {
            if let Bind::Internal { pos, .. } = b {
                read_inside[*pos] = true;
            }
        }
    }
    for (pi, p) in plans.iter().enumerate() {
        if steps[pi] == Step::Row && !p.per_row && (read_inside[pi] || p.store.is_none()) {
            needs_row[pi] = true;
        }
    }
    let mut row_off: HashMap<usize, usize> = HashMap::new();
    for (pi, need) in needs_row.iter().enumerate() {
        if *need {
            let n = row_off.len();
            row_off.insert(pi, n * l);
        }
    }
    // LogSumExp writes its row of e^(x − m) into one more scratch row.
    let has_lse = plans
        .iter()
        .any(|p| matches!(tg.nodes[p.node].op, Op::LogSumExp { .. }));
    let scratch_floats = (row_off.len() + usize::from(has_lse)) * l;

    // Per-row gather bases.
    let mut gathers: Vec<(usize, usize, Vec<usize>, Vec<usize>)> = vec![]; // (pos, bind, shape, strides)
    for (pi, p) in plans.iter().enumerate() {
        for (bi, b) in p.binds.iter().enumerate() {
            if let Bind::Gather(_, st) = b {
                if p.per_row {
                    return Err("a broadcast input of a per-row value".into());
                }
                let (shape, st) = merge_trailing(&p.out_shape, st);
                gathers.push((pi, bi, shape, st));
            }
        }
    }

    Ok(Nest {
        plans,
        elementwise,
        elems,
        rows,
        cols,
        inputs,
        slot_of,
        steps,
        needs_row,
        row_off,
        has_lse,
        scratch_floats,
        gathers,
        flat_as_values: false,
    })
}

#[cfg(test)]
mod tests {
    use super::merge_trailing;

    #[test]
    fn trailing_dims_merge_while_they_step_as_one() {
        // A [1, C, 1, 1] scale over [1, 672, 14, 14]: strides (0, 1, 0, 0); H and W are
        // constant for the scale (0 = 0·14), so one block of 14·14 = 196 with stride 0;
        // C's stride 1 ≠ 0·196 stops it, and the leading 1 joins nothing past it.
        let (sh, st) = merge_trailing(&[1, 672, 14, 14], &[0, 1, 0, 0]);
        assert_eq!((sh, st), (vec![1, 672, 196], vec![0, 1, 0]));
        // A bias over the last dim of [8, 5, 12]: strides (0, 0, 1): only the last dim.
        let (sh, st) = merge_trailing(&[8, 5, 12], &[0, 0, 1]);
        assert_eq!((sh, st), (vec![8, 5, 12], vec![0, 0, 1]));
        // A [2, 1, 3] input over [2, 4, 3] (strides 3, 0, 1): dim 1 (stride 0 ≠ 1·3) stops
        // the merge; a size-1 dim merges whatever its stride: [2, 1, 3] with (9, 7, 1)
        // gives one block of 3 under the leading 2.
        let (sh, st) = merge_trailing(&[2, 4, 3], &[3, 0, 1]);
        assert_eq!((sh, st), (vec![2, 4, 3], vec![3, 0, 1]));
        let (sh, st) = merge_trailing(&[2, 1, 3], &[9, 7, 1]);
        assert_eq!((sh, st), (vec![2, 3], vec![9, 1]));
        // A contiguous input merges all the way: [4, 5, 6] with (30, 6, 1) → one block of 120.
        let (sh, st) = merge_trailing(&[4, 5, 6], &[30, 6, 1]);
        assert_eq!((sh, st), (vec![120], vec![1]));
    }
}
