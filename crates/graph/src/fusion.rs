//! Fusion: groups the nodes of a validated graph into kernels, greedily in topological
//! order, and records a reason for every decision, accepted or refused (as XLA's fusion
//! decisions and TVM's FuseOps pass do). Rules: elementwise and broadcast chains fuse;
//! elementwise producers fuse into a last-axis reduction; a last-axis reduction may be
//! followed by a broadcast elementwise epilogue in the same kernel (the RMSNorm / softmax
//! shape); a kernel holds at most one independent reduction (later reductions must depend
//! on an earlier one over the same rows); a matmul takes an elementwise epilogue (bias,
//! activation) and the SwiGLU gate ⊙ up pair when both matmuls read the same input; no
//! merge may create a cycle between kernels; views (Reshape, Transpose) are aliases and cost
//! nothing. Left out: matmul prologues, horizontal fusion of unrelated ops, tiling choices,
//! recomputation (a fused value read outside its kernel is written once).

use crate::error::Result;
use crate::ir::{norm_axis, BinaryFn, Graph, Op, OpClass, TypedGraph};
use crate::rewrite::{rewrite, Decision, FusionRule, Stage};
use serde::{Deserialize, Serialize};

/// What kind of loop nest a kernel is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelKind {
    /// A flat elementwise loop over one domain.
    Elementwise,
    /// Row-wise: prologue, last-axis reduction(s), broadcast epilogue.
    Row,
    /// Matrix product with an elementwise epilogue.
    Matmul,
    /// A reduction over a non-last axis, alone.
    Reduction,
    /// A named fused pattern (RMSNorm+SwiGLU).
    Pattern,
    /// Concat or an opaque op, alone.
    Opaque,
}

impl KernelKind {
    /// The snake-case name, as serialized (`elementwise`, `row`, `matmul`, ...).
    pub fn label(self) -> &'static str {
        match self {
            KernelKind::Elementwise => "elementwise",
            KernelKind::Row => "row",
            KernelKind::Matmul => "matmul",
            KernelKind::Reduction => "reduction",
            KernelKind::Pattern => "pattern",
            KernelKind::Opaque => "opaque",
        }
    }
}

/// One kernel of a program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// `k0`, `k1`, ...
    pub name: String,
    /// Loop-nest kind.
    pub kind: KernelKind,
    /// Node indices into the program's graph, in topological order.
    pub nodes: Vec<usize>,
    /// Rows of the iteration domain (elementwise: the element count).
    pub rows: u64,
    /// Columns of the iteration domain (1 for elementwise; the reduced or N axis otherwise).
    pub cols: u64,
    /// Storage tensors read from memory (ids, deduplicated, views resolved).
    pub inputs: Vec<usize>,
    /// Tensors written to memory (ids).
    pub outputs: Vec<usize>,
    /// Named pattern, when recognized.
    pub pattern: Option<String>,
}

/// A validated graph cut into kernels, in execution order.
#[derive(Debug, Clone)]
pub struct Program {
    /// The graph the kernels index into.
    pub graph: TypedGraph,
    /// Kernels in a dependency-respecting order.
    pub kernels: Vec<Kernel>,
    /// Fusion decisions (empty for the unfused program).
    pub decisions: Vec<Decision>,
    /// What the executor derives from the kernels once and reuses run after run (each
    /// blocked kernel's node plan); filled on the first run.
    pub(crate) exec_memo: crate::exec::ExecMemo,
}

/// The original graph unfused, and the rewritten graph fused, with every decision.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// One kernel per op of the original graph.
    pub unfused: Program,
    /// Rewritten and fused.
    pub fused: Program,
    /// Rewrite, pattern and fusion decisions, in order.
    pub decisions: Vec<Decision>,
}

/// Validate, rewrite and fuse.
pub fn compile(g: &Graph) -> Result<Compiled> {
    let tg = g.validate()?;
    let (gg, mut decisions) = crate::rewrite::exact_gelu(&tg)?;
    let gtg = gg.map(|g| g.into_typed()).transpose()?;
    let (rg, rest) = rewrite(gtg.as_ref().unwrap_or(&tg))?;
    decisions.extend(rest);
    let mut rtg = rg.into_typed()?;
    let (pg, products) = crate::rewrite::scale_after_product(&rtg)?;
    decisions.extend(products);
    if let Some(pg) = pg {
        rtg = pg.into_typed()?;
    }
    let (ag, attention) = crate::rewrite::attention(&rtg)?;
    decisions.extend(attention);
    if let Some(ag) = ag {
        rtg = ag.into_typed()?;
    }
    let (sg, scales) = crate::rewrite::power_of_two_scales(&rtg)?;
    decisions.extend(scales);
    if let Some(sg) = sg {
        rtg = sg.into_typed()?;
    }
    let unfused = Program::unfused(tg);
    let fused = Program::fused(rtg);
    decisions.extend(fused.decisions.iter().cloned());
    Ok(Compiled {
        unfused,
        fused,
        decisions,
    })
}

#[derive(Debug, Clone)]
struct Group {
    kind: KernelKind,
    nodes: Vec<usize>,
    /// Elementwise: [numel]; Row: the row domain R; Matmul: the output shape.
    domain: Vec<usize>,
    reductions: Vec<usize>,
    matmuls: Vec<usize>,
    alive: bool,
}

/// True when `a` and `b` are the same shape once leading axes of size 1 are dropped
/// (`[1, 128, 1024]` and `[128, 1024]`): the same elements in the same order, and any
/// broadcast against the trailing axes the same.
pub(crate) fn same_but_leading_ones(a: &[usize], b: &[usize]) -> bool {
    let strip = |s: &[usize]| {
        let lead = s.iter().take_while(|&&d| d == 1).count();
        s[lead..].to_vec()
    };
    strip(a) == strip(b)
}

fn numel(s: &[usize]) -> u64 {
    s.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}

/// The bias a matmul kernel's GEMM can add itself: `(add node, bias tensor)` when the node
/// after the kernel's one MatMul is `product + b` (either order) with `b` one value per
/// output column (shape `[N]` or `[1, …, 1, N]`), the Add is the product's only reader, and
/// the product is not stored. The executor then starts the output rows at the bias and
/// accumulates the product onto them, so no pass over the product adds it.
pub fn matmul_bias(tg: &TypedGraph, k: &Kernel) -> Option<(usize, usize)> {
    if k.kind != KernelKind::Matmul || k.nodes.len() < 2 {
        return None;
    }
    let (mm, add) = (k.nodes[0], k.nodes[1]);
    let b = bias_add(tg, mm, add)?;
    let prod = tg.node_outputs[mm][0];
    (!k.outputs.contains(&prod)).then_some((add, b))
}

/// The bias tensor when node `add` is `product + b` (either order) over MatMul `mm`'s
/// product, `b` one value per output column (shape `[N]` or `[1, …, 1, N]`), the Add of
/// the product's shape and its only reader: what [`matmul_bias`] folds into the GEMM.
fn bias_add(tg: &TypedGraph, mm: usize, add: usize) -> Option<usize> {
    if !matches!(tg.nodes[mm].op, Op::MatMul)
        || !matches!(tg.nodes[add].op, Op::Binary { f: BinaryFn::Add })
    {
        return None;
    }
    let prod = tg.node_outputs[mm][0];
    let ins = &tg.node_inputs[add];
    let b = match (ins[0] == prod, ins[1] == prod) {
        (true, false) => ins[1],
        (false, true) => ins[0],
        _ => return None,
    };
    let ps = &tg.tensors[prod].shape;
    let bs = &tg.tensors[b].shape;
    let n = *ps.last()?;
    let per_column = bs.last() == Some(&n) && bs[..bs.len() - 1].iter().all(|&d| d == 1);
    let same_shape = tg.tensors[tg.node_outputs[add][0]].shape == *ps;
    // The Add reads the product directly (checked above); nothing else reads it, not even
    // through a view. (A direct look at the consumers: this runs on every run of the kernel.)
    let only_reader = tg.consumers[prod] == [add];
    (per_column && same_shape && only_reader).then_some(b)
}

/// The last-axis reduction that node `i`'s value reaches through a chain of elementwise ops
/// over the same shape, each value read only by the next op and not a graph output (the
/// attention scores' scale and mask before their softmax, a residual sum before a
/// LayerNorm that is its only reader): that reduction's row kernel can take the whole chain
/// as its prologue.
fn feeds_row_reduction(tg: &TypedGraph, i: usize) -> Option<usize> {
    let mut t = tg.node_outputs[i][0];
    let shape = &tg.tensors[t].shape;
    loop {
        let [next] = tg.consumers[t].as_slice() else {
            return None;
        };
        if exposed(tg, t) {
            return None;
        }
        let next = *next;
        let op = &tg.nodes[next].op;
        if is_last_axis_reduction(op, shape.len()) {
            return (tg.node_inputs[next].first() == Some(&t)).then_some(next);
        }
        let out = *tg.node_outputs[next].first()?;
        let elementwise = matches!(tg.class(next), OpClass::Elementwise | OpClass::Broadcast)
            && (op.is_unary() || op.is_binary());
        if !elementwise || tg.tensors[out].shape != *shape {
            return None;
        }
        t = out;
    }
}

/// The elementwise epilogue of a matmul kernel as a kernel of its own: every node of the
/// kernel other than its MatMuls, over the products' shape, reading the products from
/// memory (bias, activation, residual, scale; a gated MLP's `silu(x·Wg) · (x·Wu)` reads
/// two). Its outputs are the kernel's outputs other than the products. When the GEMM adds
/// the bias itself ([`matmul_bias`]), the epilogue starts after that Add and reads its
/// output instead. `None` unless the kernel starts with a MatMul, has at least one unary or
/// binary node of the first product's shape besides its MatMuls, every other MatMul has that
/// shape too and reads only tensors from outside the kernel (so that every product can be
/// computed, whole, before the epilogue runs).
pub fn matmul_epilogue(tg: &TypedGraph, k: &Kernel) -> Option<Kernel> {
    matmul_epilogue_with(tg, k, true)
}

/// [`matmul_epilogue`]; with `gemm_adds_bias` false the bias Add stays in the epilogue
/// (a GEMM that does not add the bias itself, such as the GPU executor's cuBLAS call).
pub fn matmul_epilogue_with(tg: &TypedGraph, k: &Kernel, gemm_adds_bias: bool) -> Option<Kernel> {
    if k.kind != KernelKind::Matmul {
        return None;
    }
    let (&first, rest) = k.nodes.split_first()?;
    if !matches!(tg.nodes[first].op, Op::MatMul) || rest.is_empty() {
        return None;
    }
    let (prod, rest) = match matmul_bias(tg, k).filter(|_| gemm_adds_bias) {
        Some((add, _)) => (tg.node_outputs[add][0], &rest[1..]),
        None => (tg.node_outputs[first][0], rest),
    };
    let shape = &tg.tensors[prod].shape;
    let mut products = vec![prod];
    let mut nodes = vec![];
    for &n in rest {
        let op = &tg.nodes[n].op;
        let out = tg.node_outputs[n][0];
        if !same_but_leading_ones(&tg.tensors[out].shape, shape) {
            return None;
        }
        if matches!(op, Op::MatMul) {
            let inside = tg.node_inputs[n]
                .iter()
                .any(|&t| k.nodes.contains(&tg.producer[tg.base(t)]));
            if inside {
                return None;
            }
            products.push(out);
        } else if op.is_unary() || op.is_binary() {
            nodes.push(n);
        } else {
            return None;
        }
    }
    if nodes.is_empty() {
        return None;
    }
    let mut inputs: Vec<usize> = k.inputs.clone();
    inputs.extend(&products);
    Some(Kernel {
        name: k.name.clone(),
        kind: KernelKind::Elementwise,
        nodes,
        rows: tg.tensors[prod].numel,
        cols: 1,
        inputs,
        outputs: k
            .outputs
            .iter()
            .copied()
            .filter(|t| !products.contains(t))
            .collect(),
        pattern: k.pattern.clone(),
    })
}

impl Program {
    /// Every non-source, non-view node as its own kernel.
    pub fn unfused(tg: TypedGraph) -> Program {
        let mut groups = vec![];
        for i in 0..tg.nodes.len() {
            let c = tg.class(i);
            if c == OpClass::Source || c == OpClass::View {
                continue;
            }
            groups.push(new_group(&tg, i));
        }
        let kernels = finalize(&tg, groups);
        Program {
            graph: tg,
            kernels,
            decisions: vec![],
            exec_memo: Default::default(),
        }
    }

    /// Greedy fusion with a decision per node.
    pub fn fused(tg: TypedGraph) -> Program {
        let n = tg.nodes.len();
        let mut group_of: Vec<Option<usize>> = vec![None; n];
        let mut groups: Vec<Group> = vec![];
        let mut dec = vec![];
        for i in 0..n {
            let c = tg.class(i);
            let name = tg.nodes[i].name.clone();
            if c == OpClass::Source {
                continue;
            }
            if c == OpClass::View {
                dec.push(Decision::new(
                    Stage::Fusion,
                    &name,
                    None,
                    true,
                    FusionRule::View,
                    format!(
                        "{} is a view: it aliases `{}`, needs no kernel and moves no bytes",
                        tg.nodes[i].op.name(),
                        tg.tensors[tg.node_inputs[i][0]].name
                    ),
                ));
                continue;
            }
            // Candidate producer kernels, in input order.
            let mut cands: Vec<usize> = vec![];
            for &t in &tg.node_inputs[i] {
                let b = tg.base(t);
                if let Some(g) = group_of[tg.producer[b]] {
                    if !cands.contains(&g) {
                        cands.push(g);
                    }
                }
            }
            let mut joined = None;
            // SwiGLU gate ⊙ up: merge two matmul kernels that share their input.
            if matches!(tg.nodes[i].op, Op::Binary { f: BinaryFn::Mul }) && cands.len() == 2 {
                let (g1, g2) = (cands[0], cands[1]);
                if let Some(reason) = swiglu_merge(&tg, &groups, &group_of, i, g1, g2) {
                    match reason {
                        Ok(r) => {
                            let (keep, drop) = (g1.min(g2), g1.max(g2));
                            merge_groups(&mut groups, &mut group_of, keep, drop);
                            groups[keep].nodes.push(i);
                            group_of[i] = Some(keep);
                            dec.push(Decision::new(
                                Stage::Fusion,
                                &name,
                                Some(&kname(keep)),
                                true,
                                FusionRule::SwigluPair,
                                r,
                            ));
                            joined = Some(keep);
                        }
                        Err(r) => {
                            dec.push(Decision::new(
                                Stage::Fusion,
                                &name,
                                Some(&kname(g1)),
                                false,
                                FusionRule::SwigluPair,
                                r,
                            ));
                        }
                    }
                }
            }
            // Two elementwise kernels of this op's domain meet here: one kernel (neither
            // output stored) instead of one of them stored and read back.
            if joined.is_none()
                && cands.len() == 2
                && matches!(c, OpClass::Elementwise | OpClass::Broadcast)
            {
                let (g1, g2) = (cands[0].min(cands[1]), cands[0].max(cands[1]));
                if let Some(r) = sibling_merge(&tg, &groups, &group_of, i, g1, g2) {
                    merge_groups(&mut groups, &mut group_of, g1, g2);
                    dec.push(Decision::new(
                        Stage::Fusion,
                        &name,
                        Some(&kname(g1)),
                        true,
                        FusionRule::SiblingMerge,
                        r,
                    ));
                    cands.retain(|&g| g != g2);
                }
            }
            if joined.is_none() {
                for &g in &cands {
                    let verdict = rules(&tg, &groups[g], &group_of, g, i).and_then(|ok| {
                        for &h in &cands {
                            if h != g && reaches(&tg, &group_of, &groups, g, h) {
                                return Err(format!(
                                    "would create a cycle: kernel {} depends on kernel {} and also feeds `{name}`",
                                    kname(h),
                                    kname(g)
                                ));
                            }
                        }
                        Ok(ok)
                    });
                    match verdict {
                        Ok((rule, reason)) => {
                            if rule == FusionRule::ProducerIntoReduction {
                                let r = tg.tensors[tg.node_inputs[i][0]].shape.clone();
                                groups[g].kind = KernelKind::Row;
                                groups[g].domain = r;
                            }
                            if tg.class(i) == OpClass::Reduction {
                                groups[g].reductions.push(i);
                            }
                            groups[g].nodes.push(i);
                            group_of[i] = Some(g);
                            dec.push(Decision::new(
                                Stage::Fusion,
                                &name,
                                Some(&kname(g)),
                                true,
                                rule,
                                reason,
                            ));
                            joined = Some(g);
                            break;
                        }
                        Err(reason) => {
                            dec.push(Decision::new(
                                Stage::Fusion,
                                &name,
                                Some(&kname(g)),
                                false,
                                FusionRule::Refused,
                                reason,
                            ));
                        }
                    }
                }
            }
            if joined.is_none() {
                let g = groups.len();
                groups.push(new_group(&tg, i));
                group_of[i] = Some(g);
                let why = if cands.is_empty() {
                    "every input comes from memory (a graph input, weight or constant)".to_string()
                } else {
                    "no producer kernel accepted it (see the refusals above)".to_string()
                };
                dec.push(Decision::new(
                    Stage::Fusion,
                    &name,
                    Some(&kname(g)),
                    true,
                    FusionRule::NewKernel,
                    format!("starts kernel {} ({:?}): {why}", kname(g), groups[g].kind)
                        .to_lowercase(),
                ));
            }
        }
        let (kernels, order) = finalize_with_order(&tg, groups);
        // Decisions named kernels by creation index (g<i>); rename to the final k<j>.
        let names: std::collections::HashMap<usize, usize> =
            order.iter().enumerate().map(|(ki, &g)| (g, ki)).collect();
        for d in &mut dec {
            d.reason = rename_kernels(&d.reason, &names);
            if let Some(t) = &d.target {
                if let Some(g) = t.strip_prefix('g').and_then(|x| x.parse::<usize>().ok()) {
                    if let Some(k) = names.get(&g) {
                        d.target = Some(format!("k{k}"));
                    }
                }
            }
        }
        Program {
            graph: tg,
            kernels,
            decisions: dec,
            exec_memo: Default::default(),
        }
    }

    /// Kernel index running each node (None for sources and views).
    pub fn kernel_of_node(&self) -> Vec<Option<usize>> {
        let mut v = vec![None; self.graph.nodes.len()];
        for (k, kr) in self.kernels.iter().enumerate() {
            for &n in &kr.nodes {
                v[n] = Some(k);
            }
        }
        v
    }
}

/// Replace every `kernel g<i>` in `text` by `kernel k<j>` per `names` (creation → final).
fn rename_kernels(text: &str, names: &std::collections::HashMap<usize, usize>) -> String {
    const PAT: &str = "kernel g";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(p) = rest.find(PAT) {
        out.push_str(&rest[..p]);
        let after = &rest[p + PAT.len()..];
        let digits = after.bytes().take_while(|b| b.is_ascii_digit()).count();
        match after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|g| names.get(&g))
        {
            Some(k) => out.push_str(&format!("kernel k{k}")),
            None => out.push_str(&rest[p..p + PAT.len() + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

fn kname(g: usize) -> String {
    format!("g{g}")
}

fn new_group(tg: &TypedGraph, i: usize) -> Group {
    let out = tg.tensors[tg.node_outputs[i][0]].shape.clone();
    let op = &tg.nodes[i].op;
    let (kind, domain) = match tg.class(i) {
        OpClass::Elementwise | OpClass::Broadcast => {
            (KernelKind::Elementwise, vec![numel(&out) as usize])
        }
        OpClass::Matmul => (KernelKind::Matmul, out),
        OpClass::Reduction => {
            let x = &tg.tensors[tg.node_inputs[i][0]].shape;
            if is_last_axis_reduction(op, x.len()) {
                (KernelKind::Row, x.clone())
            } else {
                (KernelKind::Reduction, x.clone())
            }
        }
        _ => match op {
            Op::RmsNormSwiGlu { .. } => (KernelKind::Pattern, out),
            _ => (KernelKind::Opaque, out),
        },
    };
    Group {
        kind,
        nodes: vec![i],
        domain,
        reductions: if tg.class(i) == OpClass::Reduction {
            vec![i]
        } else {
            vec![]
        },
        matmuls: if kind == KernelKind::Matmul {
            vec![i]
        } else {
            vec![]
        },
        alive: true,
    }
}

/// True when `op` reduces (or normalizes) the last axis of a rank-`rank` input.
pub fn is_last_axis_reduction(op: &Op, rank: usize) -> bool {
    match op {
        Op::ReduceSum { axis, .. } | Op::ReduceMax { axis, .. } | Op::ReduceMean { axis, .. } => {
            rank > 0 && norm_axis(*axis, rank) == Some(rank - 1)
        }
        Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::LogSumExp { .. }
        | Op::RmsNorm { .. }
        | Op::LayerNorm { .. } => rank > 0,
        _ => false,
    }
}

/// Does the node `i` depend (inside group `g`) on any node in `targets`?
fn depends_within(
    tg: &TypedGraph,
    group_of: &[Option<usize>],
    g: usize,
    i: usize,
    targets: &[usize],
) -> bool {
    let mut stack: Vec<usize> = vec![i];
    let mut seen = std::collections::HashSet::new();
    while let Some(n) = stack.pop() {
        for &t in &tg.node_inputs[n] {
            let p = tg.producer[tg.base(t)];
            if group_of[p] == Some(g) && seen.insert(p) {
                if targets.contains(&p) {
                    return true;
                }
                stack.push(p);
            }
        }
    }
    false
}

/// Is group `to` reachable from group `from` through at least one edge? Edges go from
/// lower to higher topological positions, so the search never visits a node after the last
/// node of `to`.
fn reaches(
    tg: &TypedGraph,
    group_of: &[Option<usize>],
    groups: &[Group],
    from: usize,
    to: usize,
) -> bool {
    // Group-level reachability: a kernel runs as a unit, so once any node of kernel h is
    // reached, every output of h counts, including outputs of h's nodes that come earlier
    // in node order than the node that was reached. (Pruning by node index is therefore
    // unsound here: a late node can make a whole kernel depend on `from`.)
    let mut seen = vec![false; groups.len()];
    seen[from] = true;
    let mut stack: Vec<usize> = groups[from].nodes.clone();
    while let Some(n) = stack.pop() {
        for &t in &tg.node_outputs[n] {
            for r in readers(tg, t) {
                if let Some(h) = group_of[r] {
                    if h == to {
                        return true;
                    }
                    if !seen[h] {
                        seen[h] = true;
                        stack.extend(groups[h].nodes.iter().copied());
                    }
                }
            }
        }
    }
    false
}

/// Non-view nodes reading `t`, directly or through views.
pub fn readers(tg: &TypedGraph, t: usize) -> Vec<usize> {
    let mut out = vec![];
    let mut stack = vec![t];
    while let Some(x) = stack.pop() {
        for &c in &tg.consumers[x] {
            if tg.nodes[c].op.base_class() == OpClass::View {
                stack.extend(tg.node_outputs[c].iter().copied());
            } else if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// True when `t` or a view of it is a graph output.
pub fn exposed(tg: &TypedGraph, t: usize) -> bool {
    if tg.is_output(t) {
        return true;
    }
    tg.consumers[t].iter().any(|&c| {
        tg.nodes[c].op.base_class() == OpClass::View
            && tg.node_outputs[c].iter().any(|&o| exposed(tg, o))
    })
}

type Verdict = std::result::Result<(FusionRule, String), String>;

/// Bytes of f32 product above which an elementwise chain that leads only to a row reduction
/// goes to that reduction's row kernel rather than the matmul's epilogue (fusion rule 5):
/// a 32 KiB L1 data cache. Below it the epilogue's round trip stays in L1, and the row
/// kernel's extra loop per row cost more: bert_block's 4 × 16 × 16 scores ran 1 µs of 36
/// slower with their division in the softmax's kernel (AMD EPYC Zen 3, AVX2, `run --bench`,
/// builds alternated; docs/performance.md, "Scale and mask into the softmax's row kernel").
const PROLOGUE_MIN_PRODUCT_BYTES: u64 = 32 << 10;

/// Most elementwise nodes a convolution kernel takes as its epilogue (ResNet's Add + ReLU).
const CONV_EPILOGUE_MAX: usize = 3;

/// Whether node `i` joins convolution kernel `g` as an epilogue: a unary op, or a binary op
/// with its other operand from memory of the same shape or of one element (ReLU6's bounds),
/// applied to the kernel's last value (the convolution's output or the previous epilogue
/// node's), which nothing else reads.
fn conv_epilogue(
    tg: &TypedGraph,
    grp: &Group,
    group_of: &[Option<usize>],
    g: usize,
    i: usize,
) -> Verdict {
    let k = kname(g);
    let op = &tg.nodes[i].op;
    let out = &tg.tensors[tg.node_outputs[i][0]].shape;
    // Every input of the output's shape, or of one element with the output no smaller.
    let shapes_fit = tg.node_inputs[i].iter().all(|&t| {
        let sh = &tg.tensors[t].shape;
        sh == out || (tg.tensors[t].numel == 1 && sh.len() <= out.len())
    });
    let elementwise = matches!(tg.class(i), OpClass::Elementwise | OpClass::Broadcast);
    if !elementwise || !shapes_fit || !(op.is_unary() || op.is_binary()) {
        return Err(format!(
            "kernel {k} is a convolution; only a unary op, or a binary op with an operand of the same shape or of one element, joins it as an epilogue"
        ));
    }
    if grp.nodes.len() > CONV_EPILOGUE_MAX {
        return Err(format!(
            "kernel {k}'s convolution already has {CONV_EPILOGUE_MAX} epilogue ops"
        ));
    }
    let last = tg.node_outputs[*grp.nodes.last().unwrap_or(&grp.nodes[0])][0];
    let mut chain = 0;
    for &t in &tg.node_inputs[i] {
        if group_of[tg.producer[tg.base(t)]] == Some(g) {
            if t != last || &tg.tensors[t].shape != out {
                return Err(format!(
                    "input `{}` is not kernel {k}'s last value (a view of it, an earlier one, or broadcast)",
                    tg.tensors[t].name
                ));
            }
            chain += 1;
        }
    }
    if chain != 1 {
        return Err(format!("reads kernel {k}'s value {chain} times"));
    }
    if tg.consumers[last] != [i] || exposed(tg, last) {
        return Err(format!(
            "`{}` is also read elsewhere or is a graph output; it must be stored",
            tg.tensors[last].name
        ));
    }
    Ok((
        FusionRule::ConvEpilogue,
        format!(
            "{} applied to kernel {k}'s convolution output while it is in cache, instead of a kernel of its own that reads it back",
            op.name()
        ),
    ))
}

fn rules(tg: &TypedGraph, grp: &Group, group_of: &[Option<usize>], g: usize, i: usize) -> Verdict {
    let k = kname(g);
    let op = &tg.nodes[i].op;
    let out = &tg.tensors[tg.node_outputs[i][0]].shape;
    let class = tg.class(i);
    if grp.kind == KernelKind::Opaque && matches!(tg.nodes[grp.nodes[0]].op, Op::Conv2d { .. }) {
        return conv_epilogue(tg, grp, group_of, g, i);
    }
    match grp.kind {
        KernelKind::Reduction | KernelKind::Pattern | KernelKind::Opaque => {
            return Err(format!(
                "kernel {k} is a standalone {} kernel; nothing fuses into it",
                format!("{:?}", grp.kind).to_lowercase()
            ))
        }
        _ => {}
    }
    if matches!(class, OpClass::Opaque) {
        return Err(format!("{} runs as its own kernel", op.name()));
    }
    if class == OpClass::Matmul {
        return Err(format!(
            "MatMul reads its operands from memory; prologue fusion into a matmul is not modelled (kernel {k} is stored first)"
        ));
    }
    // Inputs that are internal to the candidate group.
    let mut internal = vec![];
    for (pos, &t) in tg.node_inputs[i].iter().enumerate() {
        let b = tg.base(t);
        if group_of[tg.producer[b]] == Some(g) {
            if t != b {
                // The whole chain of views down to the stored value: a Transpose anywhere
                // in it (a Reshape of a Transpose, as exporters write for grouped-query
                // attention) reorders the elements.
                let mut via = &tg.nodes[tg.producer[t]].op;
                let mut v = t;
                while v != b {
                    let op = &tg.nodes[tg.producer[v]].op;
                    if matches!(op, Op::Transpose { .. }) {
                        via = op;
                        break;
                    }
                    v = tg.node_inputs[tg.producer[v]][0];
                }
                // A matmul kernel's epilogue runs over its output in its own layout: a
                // view of it fuses only when it adds or drops leading axes of size 1 (the
                // `[1, S, D]` around a `[S, D]` product that exporters write), which moves
                // no element and leaves every broadcast over the trailing axes as it is.
                let matmul_view = grp.kind == KernelKind::Matmul
                    && same_but_leading_ones(&tg.tensors[t].shape, &tg.tensors[b].shape);
                if matches!(via, Op::Transpose { .. })
                    || (grp.kind != KernelKind::Elementwise && !matmul_view)
                {
                    return Err(format!(
                        "input `{}` reaches it through a {} view of kernel {k}'s value; fusing across it would change the element order",
                        tg.tensors[t].name,
                        via.name()
                    ));
                }
            }
            internal.push((pos, t));
        }
    }
    let n_out = numel(out);
    let dom = &grp.domain;
    let dom_n = numel(dom);
    match (grp.kind, class) {
        (KernelKind::Elementwise, OpClass::Elementwise | OpClass::Broadcast) => {
            if n_out != dom_n {
                return Err(format!(
                    "output {out:?} has {n_out} elements, kernel {k} iterates over {dom_n}; a broadcast out of a fused value is not fused"
                ));
            }
            for &(_, t) in &internal {
                if tg.tensors[t].numel != dom_n {
                    return Err(format!(
                        "input `{}` does not cover kernel {k}'s domain",
                        tg.tensors[t].name
                    ));
                }
            }
            let t = &tg.tensors[internal[0].1].name;
            let rule = if class == OpClass::Broadcast {
                FusionRule::BroadcastChain
            } else {
                FusionRule::ElementwiseChain
            };
            let what = if class == OpClass::Broadcast {
                "broadcast elementwise"
            } else {
                "elementwise"
            };
            Ok((
                rule,
                format!("{what} op on kernel {k}'s {dom_n}-element domain: `{t}` stays in registers instead of a DRAM round trip"),
            ))
        }
        (KernelKind::Row, OpClass::Elementwise | OpClass::Broadcast) => {
            let cols = *dom.last().unwrap_or(&1) as u64;
            let rows = dom_n.checked_div(cols).unwrap_or(0);
            let mut row_scalar = dom.clone();
            if let Some(l) = row_scalar.last_mut() {
                *l = 1;
            }
            if out == dom {
                for &(_, t) in &internal {
                    let s = &tg.tensors[t].shape;
                    if s != dom && *s != row_scalar {
                        return Err(format!(
                            "input `{}` {s:?} is neither the row domain {dom:?} nor one value per row {row_scalar:?}",
                            tg.tensors[t].name
                        ));
                    }
                }
                let after = depends_within(tg, group_of, g, i, &grp.reductions);
                if after {
                    Ok((
                        FusionRule::ReductionEpilogue,
                        format!(
                            "broadcast elementwise epilogue after kernel {k}'s last-axis reduction, applied while the row is in cache (the RMSNorm / softmax shape)"
                        ),
                    ))
                } else {
                    Ok((
                        FusionRule::RowPrologue,
                        format!("elementwise on kernel {k}'s row domain {dom:?}, computed per row"),
                    ))
                }
            } else if n_out == rows && internal.iter().all(|&(_, t)| tg.tensors[t].numel == rows) {
                Ok((
                    FusionRule::RowScalarEpilogue,
                    format!("one value per row of kernel {k} (on the reduction's output), no extra pass"),
                ))
            } else {
                Err(format!(
                    "output {out:?} is neither kernel {k}'s row domain {dom:?} nor one value per row"
                ))
            }
        }
        (KernelKind::Matmul, OpClass::Elementwise | OpClass::Broadcast) => {
            // The epilogue reads the product back from memory (the GEMM runs whole first)
            // unless it is the bias the GEMM adds itself; a chain that ends in a row
            // reduction is better read once, by that reduction's row kernel.
            let bias = grp.nodes.len() == 1 && bias_add(tg, grp.nodes[0], i).is_some();
            let in_l1 = dom_n.saturating_mul(4) <= PROLOGUE_MIN_PRODUCT_BYTES;
            if let (false, false, Some(r)) = (bias, in_l1, feeds_row_reduction(tg, i)) {
                return Err(format!(
                    "{} and what follows it lead only to the row reduction {} ({}): the row kernel takes them as its prologue and reads kernel {k}'s product once, where an epilogue would read it, write its result, and the row kernel read that again",
                    op.name(),
                    tg.nodes[r].name,
                    tg.nodes[r].op.name()
                ));
            }
            if !same_but_leading_ones(out, dom) {
                return Err(format!(
                    "output {out:?} differs from the matmul output {dom:?}; not an epilogue"
                ));
            }
            for &(_, t) in &internal {
                if !same_but_leading_ones(&tg.tensors[t].shape, dom) {
                    return Err(format!(
                        "input `{}` is not a full matmul output tile",
                        tg.tensors[t].name
                    ));
                }
            }
            Ok((
                FusionRule::MatmulEpilogue,
                format!("elementwise epilogue (bias / activation) applied to kernel {k}'s output tile before it is stored"),
            ))
        }
        (_, OpClass::Reduction) => {
            let x = &tg.tensors[tg.node_inputs[i][0]];
            if !is_last_axis_reduction(op, x.shape.len()) {
                return Err(format!(
                    "{} does not reduce the last axis of `{}`; only last-axis (row) reductions fuse",
                    op.name(),
                    x.name
                ));
            }
            if internal.iter().any(|&(pos, _)| pos != 0) {
                return Err(format!(
                    "a parameter of {} comes from kernel {k}; only the reduced operand fuses",
                    op.name()
                ));
            }
            if internal.is_empty() {
                return Err(format!(
                    "the reduced operand `{}` is not computed in kernel {k}",
                    x.name
                ));
            }
            match grp.kind {
                KernelKind::Elementwise => {
                    if x.numel != dom_n {
                        return Err(format!("`{}` does not cover kernel {k}'s domain", x.name));
                    }
                    Ok((
                        FusionRule::ProducerIntoReduction,
                        format!(
                            "kernel {k}'s elementwise producers of `{}` fuse into the last-axis {}: computed per row, never stored",
                            x.name,
                            op.name()
                        ),
                    ))
                }
                KernelKind::Row => {
                    if &x.shape != dom {
                        return Err(format!("`{}` {:?} is not kernel {k}'s row domain {dom:?}", x.name, x.shape));
                    }
                    if !depends_within(tg, group_of, g, i, &grp.reductions) {
                        let r = &tg.nodes[grp.reductions[0]].name;
                        return Err(format!(
                            "kernel {k} already holds the independent reduction `{r}`; at most one independent reduction per kernel"
                        ));
                    }
                    Ok((
                        FusionRule::DependentReduction,
                        format!("depends on kernel {k}'s reduction over the same rows: one more pass over a row in cache (e.g. max then sum)"),
                    ))
                }
                _ => Err(format!(
                    "a reduction does not fuse into matmul kernel {k}: a row would span several output tiles"
                )),
            }
        }
        _ => Err(format!("no rule fuses {} into kernel {k}", op.name())),
    }
}

fn swiglu_merge(
    tg: &TypedGraph,
    groups: &[Group],
    group_of: &[Option<usize>],
    i: usize,
    g1: usize,
    g2: usize,
) -> Option<std::result::Result<String, String>> {
    let (a, b) = (&groups[g1], &groups[g2]);
    if a.kind != KernelKind::Matmul || b.kind != KernelKind::Matmul {
        return None;
    }
    let out = &tg.tensors[tg.node_outputs[i][0]].shape;
    if a.matmuls.len() != 1 || b.matmuls.len() != 1 {
        return Some(Err("a kernel holds at most the gate and up matmuls".into()));
    }
    let ia = tg.base(tg.node_inputs[a.matmuls[0]][0]);
    let ib = tg.base(tg.node_inputs[b.matmuls[0]][0]);
    if ia != ib {
        return Some(Err(format!(
            "the two matmuls read different inputs (`{}`, `{}`); gate ⊙ up fuses only when they share one",
            tg.tensors[ia].name, tg.tensors[ib].name
        )));
    }
    if &a.domain != out || &b.domain != out {
        return Some(Err(
            "the Mul output is not the shape of both matmul outputs".into(),
        ));
    }
    for &(x, y) in &[(g1, g2), (g2, g1)] {
        if reaches(tg, group_of, groups, x, y) {
            return Some(Err(format!(
                "would create a cycle: kernel {} feeds kernel {}",
                kname(x),
                kname(y)
            )));
        }
    }
    Some(Ok(format!(
        "SwiGLU gate ⊙ up: both matmuls read `{}`, so one kernel computes the two products per tile and multiplies them before storing",
        tg.tensors[ia].name
    )))
}

/// Moves every node (and matmul) of group `drop` into group `keep`, which stays in node
/// order, and retires `drop`.
fn merge_groups(groups: &mut [Group], group_of: &mut [Option<usize>], keep: usize, drop: usize) {
    let moved = std::mem::take(&mut groups[drop].nodes);
    let mm = std::mem::take(&mut groups[drop].matmuls);
    groups[drop].alive = false;
    for &m in &moved {
        group_of[m] = Some(keep);
    }
    groups[keep].nodes.extend(moved);
    groups[keep].nodes.sort();
    groups[keep].matmuls.extend(mm);
}

/// Why elementwise kernels `g1` and `g2`, both feeding elementwise node `i`, can be one
/// kernel: both elementwise (no matmul, no reduction) over as many elements as `i`'s output,
/// and neither reading the other's outputs, directly or through another kernel (merging would
/// make a cycle, or override a refusal between them). `None` when they cannot.
fn sibling_merge(
    tg: &TypedGraph,
    groups: &[Group],
    group_of: &[Option<usize>],
    i: usize,
    g1: usize,
    g2: usize,
) -> Option<String> {
    let (a, b) = (&groups[g1], &groups[g2]);
    let out = &tg.tensors[tg.node_outputs[i][0]].shape;
    let elementwise = |k: &Group| {
        k.kind == KernelKind::Elementwise && k.matmuls.is_empty() && k.reductions.is_empty()
    };
    let dom = [numel(out) as usize];
    if !elementwise(a) || !elementwise(b) || a.domain != dom || b.domain != dom {
        return None;
    }
    if reaches(tg, group_of, groups, g1, g2) || reaches(tg, group_of, groups, g2, g1) {
        return None;
    }
    // The input of `i` each kernel computes.
    let from = |g: usize| {
        tg.node_inputs[i]
            .iter()
            .find(|&&t| group_of[tg.producer[tg.base(t)]] == Some(g))
            .map_or(String::new(), |&t| tg.tensors[t].name.clone())
    };
    Some(format!(
        "its inputs `{}` and `{}` come from two elementwise kernels over the same {}-element domain: merged into kernel {}, so neither makes a DRAM round trip",
        from(g1),
        from(g2),
        dom[0],
        kname(g1)
    ))
}

fn finalize(tg: &TypedGraph, groups: Vec<Group>) -> Vec<Kernel> {
    finalize_with_order(tg, groups).0
}

/// Kernels in execution order and, for each, the index of the group it came from
/// (dead groups, emptied by a merge, are skipped).
fn finalize_with_order(tg: &TypedGraph, groups: Vec<Group>) -> (Vec<Kernel>, Vec<usize>) {
    let ng = groups.len();
    let mut gof = vec![usize::MAX; tg.nodes.len()];
    for (g, gr) in groups.iter().enumerate() {
        for &n in &gr.nodes {
            gof[n] = g;
        }
    }
    // Group DAG and a topological order (ties: smallest first node).
    let mut succ: Vec<Vec<usize>> = vec![vec![]; ng];
    let mut indeg = vec![0usize; ng];
    for (g, gr) in groups.iter().enumerate() {
        for &n in &gr.nodes {
            for &t in &tg.node_outputs[n] {
                for r in readers(tg, t) {
                    let h = gof[r];
                    if h != usize::MAX && h != g && !succ[g].contains(&h) {
                        succ[g].push(h);
                        indeg[h] += 1;
                    }
                }
            }
        }
    }
    let key = |g: usize| groups[g].nodes.iter().copied().min().unwrap_or(0);
    let mut ready: std::collections::BTreeSet<(usize, usize)> = (0..ng)
        .filter(|&g| indeg[g] == 0 && groups[g].alive)
        .map(|g| (key(g), g))
        .collect();
    let mut order = vec![];
    while let Some(&(k0, g)) = ready.iter().next() {
        ready.remove(&(k0, g));
        order.push(g);
        for &h in &succ[g] {
            indeg[h] -= 1;
            if indeg[h] == 0 {
                ready.insert((key(h), h));
            }
        }
    }
    // A cycle cannot occur (the fuser checks), but never drop kernels if it did.
    let mut placed = vec![false; ng];
    for &g in &order {
        placed[g] = true;
    }
    for (g, gr) in groups.iter().enumerate() {
        if gr.alive && !placed[g] {
            order.push(g);
        }
    }
    let mut kernels = vec![];
    for (ki, &g) in order.iter().enumerate() {
        let gr = &groups[g];
        let mut nodes = gr.nodes.clone();
        nodes.sort();
        let mut inputs = vec![];
        let mut outputs = vec![];
        for &n in &nodes {
            for &t in &tg.node_inputs[n] {
                let b = tg.base(t);
                if gof[tg.producer[b]] != g && !inputs.contains(&b) {
                    inputs.push(b);
                }
            }
            for &t in &tg.node_outputs[n] {
                let outside = readers(tg, t).iter().any(|&r| gof[r] != g);
                if outside || exposed(tg, t) {
                    outputs.push(t);
                }
            }
        }
        let (rows, cols) = match gr.kind {
            KernelKind::Row | KernelKind::Matmul => {
                let c = *gr.domain.last().unwrap_or(&1) as u64;
                (numel(&gr.domain).checked_div(c).unwrap_or(0), c)
            }
            _ => (numel(&gr.domain), 1),
        };
        let mut pattern = None;
        for &n in &nodes {
            match &tg.nodes[n].op {
                Op::RmsNormSwiGlu { .. } => pattern = Some("rmsnorm_swiglu".to_string()),
                Op::LayerNorm { .. } => {
                    let x = tg.base(tg.node_inputs[n][0]);
                    let p = tg.producer[x];
                    if gof[p] == g && matches!(tg.nodes[p].op, Op::Binary { f: BinaryFn::Add }) {
                        pattern = Some("add_layernorm".to_string());
                    }
                }
                Op::RmsNorm { .. } if pattern.is_none() => pattern = Some("rmsnorm".to_string()),
                Op::Softmax { .. } if pattern.is_none() => pattern = Some("softmax".to_string()),
                _ => {}
            }
        }
        if gr.matmuls.len() == 2 {
            pattern = Some("swiglu_gate_up".to_string());
        }
        kernels.push(Kernel {
            name: format!("k{ki}"),
            kind: gr.kind,
            nodes,
            rows,
            cols,
            inputs,
            outputs,
            pattern,
        });
    }
    (kernels, order)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(text: &str) -> Graph {
        Graph::from_json_str(text).unwrap()
    }

    #[test]
    fn kernel_kind_labels_are_the_serialized_names() {
        for k in [
            KernelKind::Elementwise,
            KernelKind::Row,
            KernelKind::Matmul,
            KernelKind::Reduction,
            KernelKind::Pattern,
            KernelKind::Opaque,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.label());
        }
    }

    /// A residual block's tail: conv → Add(skip) → ReLU is one kernel; a second conv whose
    /// output is also a graph output keeps its ReLU apart (the output must be stored). The
    /// fused program's values equal the unfused program's (same code paths: exactly).
    #[test]
    fn a_convolution_takes_its_activation_and_residual_as_an_epilogue() {
        let c = compile(&g(r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[1,4,6,6],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[4,4,3,3],"dtype":"fp32"}},
          {"name":"w2","op":"Weight","attrs":{"shape":[4,4,3,3],"dtype":"fp32"}},
          {"name":"c","op":"Conv2d","inputs":["x","w"],"attrs":{"strides":[1,1],"pads":[1,1,1,1],"dilations":[1,1],"group":1}},
          {"name":"a","op":"Add","inputs":["c","x"]},
          {"name":"r","op":"ReLU","inputs":["a"]},
          {"name":"c2","op":"Conv2d","inputs":["r","w2"],"attrs":{"strides":[1,1],"pads":[1,1,1,1],"dilations":[1,1],"group":1}},
          {"name":"r2","op":"ReLU","inputs":["c2"]}],
          "outputs":["r2","c2"]}"#))
        .unwrap();
        let p = &c.fused;
        assert_eq!(p.kernels.len(), 3, "{:#?}", c.decisions);
        let names = |k: &Kernel| -> Vec<String> {
            k.nodes
                .iter()
                .map(|&n| p.graph.nodes[n].name.clone())
                .collect()
        };
        assert_eq!(names(&p.kernels[0]), ["c", "a", "r"]);
        assert_eq!(names(&p.kernels[1]), ["c2"]);
        assert_eq!(names(&p.kernels[2]), ["r2"]);
        let refused = c
            .decisions
            .iter()
            .find(|d| d.node == "r2" && !d.accepted)
            .unwrap();
        assert!(
            refused.reason.contains("graph output"),
            "{}",
            refused.reason
        );
        assert!(c
            .decisions
            .iter()
            .any(|d| d.node == "a" && d.accepted && d.rule == FusionRule::ConvEpilogue));
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&p.graph, &mut ins, 3).unwrap();
        let fused = crate::exec::execute(p, &ins).unwrap();
        let unfused = crate::exec::execute(&c.unfused, &ins).unwrap();
        assert_eq!(fused.outputs, unfused.outputs);
    }

    /// ReLU6 (`Clip` as ClipLow and ClipHigh by one-element bounds) and a scalar `Mul` join
    /// a depthwise convolution (blocked across channels, 7 × 7) and a dense one as their
    /// epilogue; the convolution applies the clamp to its sums itself, the Mul runs after it.
    /// The fused program's values equal the unfused program's exactly (a clamp is exact).
    #[test]
    fn a_convolution_takes_relu6_by_scalar_bounds_as_its_epilogue() {
        let c = compile(&g(r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[1,24,7,7],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[24,1,3,3],"dtype":"fp32"}},
          {"name":"w2","op":"Weight","attrs":{"shape":[16,24,1,1],"dtype":"fp32"}},
          {"name":"lo","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":-0.25}},
          {"name":"hi","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":0.5}},
          {"name":"s","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":3.0}},
          {"name":"c","op":"Conv2d","inputs":["x","w"],"attrs":{"strides":[1,1],"pads":[1,1,1,1],"dilations":[1,1],"group":24}},
          {"name":"l","op":"ClipLow","inputs":["c","lo"]},
          {"name":"h","op":"ClipHigh","inputs":["l","hi"]},
          {"name":"m","op":"Mul","inputs":["h","s"]},
          {"name":"c2","op":"Conv2d","inputs":["m","w2"],"attrs":{"strides":[1,1],"pads":[0,0,0,0],"dilations":[1,1],"group":1}},
          {"name":"l2","op":"ClipLow","inputs":["c2","lo"]},
          {"name":"h2","op":"ClipHigh","inputs":["l2","hi"]}]}"#))
        .unwrap();
        let p = &c.fused;
        let names: Vec<Vec<&str>> = p
            .kernels
            .iter()
            .map(|k| {
                k.nodes
                    .iter()
                    .map(|&n| p.graph.nodes[n].name.as_str())
                    .collect()
            })
            .collect();
        assert_eq!(
            names,
            [vec!["c", "l", "h", "m"], vec!["c2", "l2", "h2"]],
            "{:#?}",
            c.decisions
        );
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&p.graph, &mut ins, 5).unwrap();
        let fused = crate::exec::execute(p, &ins).unwrap();
        let unfused = crate::exec::execute(&c.unfused, &ins).unwrap();
        assert_eq!(fused.outputs, unfused.outputs);
        // The clamp bit: values at both bounds occur (fill_inputs draws from [−1, 1]).
        let y = &fused.outputs[0].2;
        assert!(y.contains(&-0.25) && y.contains(&0.5), "{y:?}");
    }

    #[test]
    fn a_convolution_adds_its_residual_before_the_relu_as_it_stores() {
        // ResNet's block end: conv → Add(residual) → Relu, in one kernel; the convolution
        // applies both as it stores (the GEMM's tile, Winograd's output transform, the
        // depthwise kernel then a pass), with exactly the values of the nodes run apart.
        // Three geometries: 1×1 (the GEMM reading the input in place), 3×3 on 32 channels of
        // 28 × 28 (Winograd: 32·32·9·784 = 7.2 Mi multiply-adds), depthwise 3×3; the
        // residual is the block's input.
        for (c, w, group) in [
            (16, "[16,16,1,1]", 1),
            (32, "[32,32,3,3]", 1),
            (16, "[16,1,3,3]", 16),
        ] {
            let pad = if w.ends_with("3,3]") { 1 } else { 0 };
            let c = compile(&g(&format!(
                r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":[1,{c},28,28],"dtype":"fp32"}}}},
              {{"name":"w","op":"Weight","attrs":{{"shape":{w},"dtype":"fp32"}}}},
              {{"name":"b","op":"Weight","attrs":{{"shape":[{c}],"dtype":"fp32"}}}},
              {{"name":"conv","op":"Conv2d","inputs":["x","w","b"],"attrs":{{"strides":[1,1],"pads":[{pad},{pad},{pad},{pad}],"dilations":[1,1],"group":{group}}}}},
              {{"name":"sum","op":"Add","inputs":["x","conv"]}},
              {{"name":"y","op":"ReLU","inputs":["sum"]}}]}}"#
            )))
            .unwrap();
            let p = &c.fused;
            assert_eq!(p.kernels.len(), 1, "{:#?}", c.decisions);
            let mut ins = std::collections::HashMap::new();
            crate::exec::fill_inputs(&p.graph, &mut ins, 9).unwrap();
            let fused = crate::exec::execute(p, &ins).unwrap();
            let unfused = crate::exec::execute(&c.unfused, &ins).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let y = &fused.outputs[0].2;
            assert_eq!(bits(y), bits(&unfused.outputs[0].2), "{w}");
            // Both sides of the ReLU occur: zeros and positive values.
            assert!(y.contains(&0.0) && y.iter().any(|&v| v > 0.0), "{w}");
        }
    }

    #[test]
    fn elementwise_chain_is_one_kernel() {
        let c = compile(&g(r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[8],"dtype":"fp32"}},
          {"name":"a","op":"Add","inputs":["x","b"]},
          {"name":"t","op":"Tanh","inputs":["a"]},
          {"name":"r","op":"Reshape","attrs":{"shape":[32]},"inputs":["t"]},
          {"name":"y","op":"Neg","inputs":["r"]}]}"#))
        .unwrap();
        assert_eq!(c.unfused.kernels.len(), 3);
        assert_eq!(c.fused.kernels.len(), 1, "{:#?}", c.decisions);
        let k = &c.fused.kernels[0];
        assert_eq!(k.inputs.len(), 2);
        assert_eq!(k.outputs.len(), 1);
        assert!(c.decisions.iter().any(|d| d.rule == FusionRule::View));
    }

    #[test]
    fn a_per_column_bias_is_added_by_the_gemm_and_nothing_else_is() {
        // (bias shape, folds?): one value per output column folds; a full [4, 6] addend (a
        // residual) or a per-row [4, 1] one does not.
        for (bshape, folds) in [
            ("[6]", true),
            ("[1,6]", true),
            ("[4,6]", false),
            ("[4,1]", false),
        ] {
            let c = compile(&g(&format!(
                r#"{{"nodes":[
              {{"name":"a","op":"Input","attrs":{{"shape":[4,8],"dtype":"fp32"}}}},
              {{"name":"w","op":"Weight","attrs":{{"shape":[8,6],"dtype":"fp32"}}}},
              {{"name":"b","op":"Weight","attrs":{{"shape":{bshape},"dtype":"fp32"}}}},
              {{"name":"p","op":"MatMul","inputs":["a","w"]}},
              {{"name":"y","op":"Add","inputs":["b","p"]}}]}}"#
            )))
            .unwrap();
            let k = &c.fused.kernels[0];
            assert_eq!(k.nodes.len(), 2, "{bshape}: MatMul + Add in one kernel");
            assert_eq!(matmul_bias(&c.fused.graph, k).is_some(), folds, "{bshape}");
            // Either way the executor's result is the definition: y = b + a·w.
            let mut ins = std::collections::HashMap::new();
            crate::exec::fill_inputs(&c.fused.graph, &mut ins, 5).unwrap();
            let y = crate::exec::execute(&c.fused, &ins).unwrap();
            let bcols = if bshape == "[4,1]" { 1 } else { 6 };
            for i in 0..4 {
                for j in 0..6 {
                    let dot: f64 = (0..8)
                        .map(|q| ins["a"][i * 8 + q] as f64 * ins["w"][q * 6 + j] as f64)
                        .sum();
                    let bv = match bshape {
                        "[4,6]" => ins["b"][i * 6 + j],
                        "[4,1]" => ins["b"][i],
                        _ => ins["b"][j],
                    } as f64;
                    let got = y.outputs[0].2[i * 6 + j] as f64;
                    assert!(
                        (got - dot - bv).abs() < 1e-5,
                        "{bshape} ({i},{j}) cols {bcols}"
                    );
                }
            }
        }
        // A product that is also read elsewhere keeps its Add in the epilogue.
        let c = compile(&g(r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[8,6],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[6],"dtype":"fp32"}},
          {"name":"p","op":"MatMul","inputs":["a","w"]},
          {"name":"y","op":"Add","inputs":["p","b"]},
          {"name":"z","op":"Mul","inputs":["y","p"]}]}"#))
        .unwrap();
        assert!(matmul_bias(&c.fused.graph, matmul_kernel(&c)).is_none());
    }

    /// The first matmul kernel of `c`'s fused program.
    fn matmul_kernel(c: &Compiled) -> &Kernel {
        c.fused
            .kernels
            .iter()
            .find(|k| k.kind == KernelKind::Matmul)
            .unwrap()
    }

    #[test]
    fn a_chain_into_a_row_reduction_is_its_prologue_not_the_matmuls_epilogue() {
        // Scores of `b` heads of `s` × `s` (head size 8), scaled, masked, softmaxed; with
        // `extra_reader` the scaled scores are also read by a Neg.
        let scores = |b: usize, s: usize, extra_reader: bool| {
            let z = if extra_reader {
                r#",{"name":"z","op":"Neg","inputs":["sc"]}"#
            } else {
                ""
            };
            g(&format!(
                r#"{{"nodes":[
              {{"name":"q","op":"Input","attrs":{{"shape":[{b},{s},8],"dtype":"fp32"}}}},
              {{"name":"kt","op":"Input","attrs":{{"shape":[{b},8,{s}],"dtype":"fp32"}}}},
              {{"name":"mask","op":"Input","attrs":{{"shape":[1,{s},{s}],"dtype":"fp32"}}}},
              {{"name":"s","op":"MatMul","inputs":["q","kt"]}},
              {{"name":"c","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.125}}}},
              {{"name":"sc","op":"Mul","inputs":["s","c"]}},
              {{"name":"sm_in","op":"Add","inputs":["sc","mask"]}},
              {{"name":"p","op":"Softmax","attrs":{{"axis":-1}},"inputs":["sm_in"]}}{z}]}}"#
            ))
        };
        let ops = |c: &Compiled, kind: KernelKind| -> Vec<String> {
            let k = c.fused.kernels.iter().find(|k| k.kind == kind).unwrap();
            k.nodes
                .iter()
                .map(|&n| c.fused.graph.nodes[n].name.clone())
                .collect()
        };
        // 4 × 64 × 64 scores (64 KiB, above PROLOGUE_MIN_PRODUCT_BYTES): the scale and the
        // mask join the softmax's row kernel, which reads the product once.
        let (b, s) = (4, 64);
        assert!(4 * b * s * s > PROLOGUE_MIN_PRODUCT_BYTES as usize);
        let c = compile(&scores(b, s, false)).unwrap();
        assert_eq!(ops(&c, KernelKind::Matmul), ["s"]);
        assert_eq!(ops(&c, KernelKind::Row), ["sc", "sm_in", "p"]);
        let d = c
            .decisions
            .iter()
            .find(|d| d.node == "sc" && d.rule == FusionRule::Refused)
            .unwrap();
        assert!(
            d.reason.contains("row reduction p (Softmax)"),
            "{}",
            d.reason
        );
        // The scaled scores are also read by a Neg: the scale (and the Neg) stay the
        // matmul's epilogue; the mask Add, read only by the softmax, joins the row kernel.
        let c2 = compile(&scores(b, s, true)).unwrap();
        assert_eq!(ops(&c2, KernelKind::Matmul), ["s", "sc", "z"]);
        assert_eq!(ops(&c2, KernelKind::Row), ["sm_in", "p"]);
        // 2 × 6 × 6 scores stay in L1 either way: the chain stays the matmul's epilogue.
        let small = compile(&scores(2, 6, false)).unwrap();
        assert_eq!(ops(&small, KernelKind::Matmul), ["s", "sc", "sm_in"]);
        // The fused program computes the definition: softmax(q·kt·0.125 + mask) per row.
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&c.fused.graph, &mut ins, 3).unwrap();
        let y = crate::exec::execute(&c.fused, &ins).unwrap();
        let out = &y.outputs[0].2;
        for h in 0..b {
            for i in 0..s {
                let x: Vec<f64> = (0..s)
                    .map(|j| {
                        let dot: f64 = (0..8)
                            .map(|t| {
                                ins["q"][(h * s + i) * 8 + t] as f64
                                    * ins["kt"][(h * 8 + t) * s + j] as f64
                            })
                            .sum();
                        dot * 0.125 + ins["mask"][i * s + j] as f64
                    })
                    .collect();
                let m = x.iter().cloned().fold(f64::MIN, f64::max);
                let sum: f64 = x.iter().map(|v| (v - m).exp()).sum();
                for j in 0..s {
                    let want = (x[j] - m).exp() / sum;
                    let got = out[(h * s + i) * s + j] as f64;
                    assert!((got - want).abs() < 1e-6, "({h},{i},{j}) {got} vs {want}");
                }
            }
        }
        // A linear layer's bias stays with the GEMM (it adds it itself); the residual Add
        // after it joins the LayerNorm's row kernel (a 128 × 96 product, 48 KiB).
        let c = compile(&g(r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[128,8],"dtype":"fp32"}},
          {"name":"r","op":"Input","attrs":{"shape":[128,96],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[8,96],"dtype":"fp32"}},
          {"name":"b","op":"Weight","attrs":{"shape":[96],"dtype":"fp32"}},
          {"name":"gam","op":"Weight","attrs":{"shape":[96],"dtype":"fp32"}},
          {"name":"bet","op":"Weight","attrs":{"shape":[96],"dtype":"fp32"}},
          {"name":"p","op":"MatMul","inputs":["a","w"]},
          {"name":"y","op":"Add","inputs":["p","b"]},
          {"name":"h","op":"Add","inputs":["y","r"]},
          {"name":"n","op":"LayerNorm","inputs":["h","gam","bet"]}]}"#))
        .unwrap();
        assert_eq!(ops(&c, KernelKind::Matmul), ["p", "y"]);
        assert_eq!(ops(&c, KernelKind::Row), ["h", "n"]);
        assert!(matmul_bias(&c.fused.graph, matmul_kernel(&c)).is_some());
    }

    #[test]
    fn an_epilogue_through_a_leading_ones_view_fuses_into_the_matmul() {
        // GPT-2's exported MLP: the `[S, D]` product viewed as `[1, S, D]` before GELU. The
        // view moves no element, so the activation joins the matmul's kernel as its
        // epilogue; a view that regroups the rows ([2, 16] of a [4, 8] product) does not.
        let graph = |shape: &str| {
            g(&format!(
                r#"{{"nodes":[
          {{"name":"a","op":"Input","attrs":{{"shape":[4,8],"dtype":"fp32"}}}},
          {{"name":"w","op":"Weight","attrs":{{"shape":[8,8],"dtype":"fp32"}}}},
          {{"name":"mm","op":"MatMul","inputs":["a","w"]}},
          {{"name":"m","op":"Reshape","attrs":{{"shape":{shape}}},"inputs":["mm"]}},
          {{"name":"y","op":"Tanh","inputs":["m"]}}]}}"#
            ))
        };
        let fused = compile(&graph("[1,4,8]")).unwrap();
        assert_eq!(fused.fused.kernels.len(), 1, "{:#?}", fused.fused.kernels);
        assert_eq!(fused.fused.kernels[0].kind, KernelKind::Matmul);
        assert!(fused
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::MatmulEpilogue));
        let apart = compile(&graph("[2,16]")).unwrap();
        assert_eq!(apart.fused.kernels.len(), 2, "{:#?}", apart.fused.kernels);
        assert!(same_but_leading_ones(&[1, 1, 4, 8], &[4, 8]));
        assert!(!same_but_leading_ones(&[4, 1, 8], &[4, 8]));
        assert!(!same_but_leading_ones(&[2, 16], &[4, 8]));
    }

    #[test]
    fn sibling_elementwise_kernels_meeting_in_one_op_merge() {
        // GELU-tanh's shape: two branches over a reshaped product `m` (a reshape that
        // regroups the rows keeps them out of the matmul's kernel) meet in `y`. Without the
        // merge, `t`'s kernel stores its output and `y`'s kernel reads it back; with it, one
        // elementwise kernel after the matmul.
        let c = compile(&g(r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"w","op":"Weight","attrs":{"shape":[8,8],"dtype":"fp32"}},
          {"name":"mm","op":"MatMul","inputs":["a","w"]},
          {"name":"m","op":"Reshape","attrs":{"shape":[2,16]},"inputs":["mm"]},
          {"name":"h","op":"Mul","inputs":["m","m"]},
          {"name":"p","op":"Neg","inputs":["m"]},
          {"name":"t","op":"Tanh","inputs":["p"]},
          {"name":"y","op":"Mul","inputs":["h","t"]}]}"#))
        .unwrap();
        let names = |k: &Kernel| -> Vec<String> {
            k.nodes
                .iter()
                .map(|&n| c.fused.graph.nodes[n].name.clone())
                .collect()
        };
        let ew: Vec<&Kernel> = c
            .fused
            .kernels
            .iter()
            .filter(|k| k.kind == KernelKind::Elementwise)
            .collect();
        assert_eq!(ew.len(), 1, "{:#?}", c.fused.kernels);
        for n in ["h", "p", "t", "y"] {
            assert!(
                names(ew[0]).contains(&n.to_string()),
                "{n} in {:?}",
                names(ew[0])
            );
        }
        // Only `y` leaves the kernel.
        assert_eq!(ew[0].outputs.len(), 1);
        assert!(c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::SiblingMerge));
        // Fused and unfused agree.
        let mut inputs = std::collections::HashMap::new();
        crate::exec::fill_inputs(&c.fused.graph, &mut inputs, 3).unwrap();
        let f = crate::exec::execute(&c.fused, &inputs).unwrap();
        let u = crate::exec::execute(&c.unfused, &inputs).unwrap();
        for (x, y) in f.outputs[0].2.iter().zip(&u.outputs[0].2) {
            assert!((x - y).abs() <= 1e-6, "{x} vs {y}");
        }
    }

    #[test]
    fn a_reshape_of_a_transpose_is_not_fused_across() {
        // Found by a dynamo export of grouped-query attention: Broadcast -> Reshape ->
        // Transpose -> Reshape -> Mul. Fusing the Mul into the Broadcast's kernel read the
        // values in the wrong order (max error 0.93 against the unfused program).
        let c = compile(&g(r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[2,2,1,8,16],"dtype":"fp32"}},
          {"name":"e","op":"Broadcast","attrs":{"shape":[2,2,2,8,16]},"inputs":["x"]},
          {"name":"r","op":"Reshape","attrs":{"shape":[8,8,16]},"inputs":["e"]},
          {"name":"t","op":"Transpose","attrs":{"perm":[0,2,1]},"inputs":["r"]},
          {"name":"r2","op":"Reshape","attrs":{"shape":[2,4,16,8]},"inputs":["t"]},
          {"name":"c","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":0.5}},
          {"name":"y","op":"Mul","inputs":["r2","c"]}]}"#))
        .unwrap();
        assert_eq!(c.fused.kernels.len(), 2, "{:#?}", c.decisions);
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&c.unfused.graph, &mut ins, 3).unwrap();
        let f = crate::exec::execute(&c.fused, &ins).unwrap();
        let u = crate::exec::execute(&c.unfused, &ins).unwrap();
        assert_eq!(f.outputs[0].2, u.outputs[0].2);
    }

    #[test]
    fn softmax_shape_is_one_row_kernel_and_independent_reductions_split() {
        let c = compile(&g(r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"m","op":"ReduceMax","attrs":{"axis":-1},"inputs":["x"]},
          {"name":"d","op":"Sub","inputs":["x","m"]},
          {"name":"e","op":"Exp","inputs":["d"]},
          {"name":"s","op":"ReduceSum","attrs":{"axis":-1},"inputs":["e"]},
          {"name":"y","op":"Div","inputs":["e","s"]}]}"#))
        .unwrap();
        assert_eq!(c.fused.kernels.len(), 1, "{:#?}", c.decisions);
        assert_eq!(c.fused.kernels[0].kind, KernelKind::Row);
        let c = compile(&g(r#"{"nodes":[
          {"name":"x","op":"Input","attrs":{"shape":[4,8],"dtype":"fp32"}},
          {"name":"e","op":"Exp","inputs":["x"]},
          {"name":"m","op":"ReduceMax","attrs":{"axis":-1},"inputs":["e"]},
          {"name":"s","op":"ReduceSum","attrs":{"axis":-1},"inputs":["e"]}]}"#))
        .unwrap();
        assert_eq!(c.fused.kernels.len(), 2);
        assert!(c
            .decisions
            .iter()
            .any(|d| !d.accepted && d.reason.contains("at most one independent reduction")));
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;

    fn load(name: &str) -> Compiled {
        let p = format!(
            "{}/../../examples/graphs/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&p).unwrap();
        compile(&Graph::from_json_str(&text).unwrap()).unwrap()
    }

    #[test]
    fn example_graphs_fuse_as_documented() {
        let c = load("rmsnorm_swiglu_mlp");
        let pats: Vec<_> = c
            .fused
            .kernels
            .iter()
            .filter_map(|k| k.pattern.clone())
            .collect();
        assert!(
            pats.contains(&"rmsnorm_swiglu".to_string()),
            "{:#?}",
            c.decisions
        );
        // RMSNormSwiGLU kernel, then MatMul down + residual Add epilogue.
        assert_eq!(c.fused.kernels.len(), 2);
        let c = load("attention_softmax");
        assert_eq!(c.fused.kernels.len(), 2, "{:#?}", c.decisions);
        assert!(c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::Softmax && d.accepted));
        let c = load("logaddexp_chain");
        assert_eq!(c.fused.kernels.len(), 1);
        assert_eq!(
            c.decisions
                .iter()
                .filter(|d| d.rule == FusionRule::Logaddexp && d.accepted)
                .count(),
            2
        );
        let c = load("residual_layernorm");
        assert_eq!(c.fused.kernels.len(), 1);
        assert_eq!(c.fused.kernels[0].pattern.as_deref(), Some("add_layernorm"));
        assert_eq!(c.fused.kernels[0].outputs.len(), 2);
        let c = load("elementwise_chain");
        assert_eq!(c.fused.kernels.len(), 1);
        assert_eq!(c.unfused.kernels.len(), 8);
    }
}
