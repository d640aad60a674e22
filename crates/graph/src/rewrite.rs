//! Graph rewrites applied before fusion, each recorded as a [`Decision`] with its reason.
//! Numerics ("zero-overflow reformulation"): Log(Add(Exp a, Exp b)) → LogAddExp(a, b);
//! Log(ReduceSum(Exp x)) → LogSumExp(x); Div(Exp x, ReduceSum(Exp x)) → Softmax(x). Named
//! pattern: RMSNorm → (MatMul gate, MatMul up) → SiLU → Mul → the Kernels crate's fused
//! RMSNorm+SwiGLU. Layout: a scalar Mul after views (Reshape, Transpose) moves before them,
//! into the producer's kernel. Exact: scalar multiplications by powers of two folded
//! ([`power_of_two_scales`]). Rewrites replace the root node and drop nodes left without
//! readers; a pattern whose intermediates are read elsewhere (or are graph outputs) is
//! refused.
//! Not covered: algebraic simplification beyond powers of two, constant folding in general,
//! commuted or scaled variants.

use crate::error::Result;
use crate::ir::{norm_axis, BinaryFn, Graph, Op, OpClass, TypedGraph, UnaryFn};
use serde::{Deserialize, Serialize};

/// Where a decision was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// A numerics rewrite (overflow-safe forms).
    Rewrite,
    /// A multi-node pattern replaced by one op.
    Pattern,
    /// The fuser grouping nodes into kernels.
    Fusion,
}

impl Stage {
    /// The name used in JSON and text (`rewrite`, `pattern`, `fusion`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Rewrite => "rewrite",
            Stage::Pattern => "pattern",
            Stage::Fusion => "fusion",
        }
    }
}

impl std::fmt::Display for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The rule behind a rewrite or fusion decision (its JSON and text name in snake_case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FusionRule {
    /// A view (reshape, transpose, slice) joins its producer's kernel without moving data.
    View,
    /// The two GEMMs of a SwiGLU pair share their input.
    SwigluPair,
    /// Two elementwise kernels of one domain whose outputs meet in one op merge into one
    /// kernel (GELU's `0.5·x` and `1 + tanh(…)` branches).
    SiblingMerge,
    /// `Where(IsNaN(s), 0, s)` over a softmax `s` rewritten to `Max(s, 0)`, which fuses into
    /// the softmax's row kernel.
    SoftmaxNanGuard,
    /// A fusion was considered and refused (the reason says why).
    Refused,
    /// The node starts a kernel of its own.
    NewKernel,
    /// `log(exp(a) + exp(b))` rewritten to the overflow-safe LogAddExp.
    Logaddexp,
    /// `log(sum(exp(x)))` rewritten to the overflow-safe LogSumExp.
    Logsumexp,
    /// `exp(x) / sum(exp(x))` rewritten to the max-subtracting Softmax.
    Softmax,
    /// RMSNorm followed by a SwiGLU MLP matched as one fused pattern.
    RmsnormSwiglu,
    /// An elementwise op over a broadcast joins its producer.
    BroadcastChain,
    /// An elementwise op joins an elementwise kernel of the same domain.
    ElementwiseChain,
    /// An elementwise op on a reduction's output joins the row kernel.
    ReductionEpilogue,
    /// An elementwise op on a row kernel's input joins it.
    RowPrologue,
    /// An op on one value per row joins the row kernel.
    RowScalarEpilogue,
    /// An elementwise op on a matmul's output joins it as an epilogue.
    MatmulEpilogue,
    /// An elementwise op on a convolution's output (activation, residual Add) joins the
    /// convolution's kernel, applied while the output is in cache.
    ConvEpilogue,
    /// An elementwise producer joins the reduction that reads it (the kernel becomes a row kernel).
    ProducerIntoReduction,
    /// A reduction over the same rows joins a row kernel.
    DependentReduction,
    /// Scores, scale, mask, softmax and the weighted sum of an attention matched as one
    /// streamed kernel (`FusedAttention`).
    Attention,
    /// `1 + tanh(u)` rewritten to `2·sigmoid(2u)` (GELU's tanh form): no cancellation where
    /// tanh(u) nears −1, and one exponential where tanh evaluates two branches.
    TanhPlusOne,
    /// `Mul(views(y), c)` with `c` a scalar constant rewritten to `views(Mul(y, c))`: the
    /// same products before the layout change, where the multiply joins `y`'s producer (a
    /// linear layer's epilogue) instead of running as a kernel of its own over the
    /// rearranged tensor (the query and key scales after the head-split Transpose).
    ScaleBeforeView,
    /// Exact GELU written out, `x · 0.5 · (1 + erf(x/√2))` in any order of its two products
    /// (the division by √2 or the product by 1/√2), rewritten to one `GeluErf(x)`.
    GeluErf,
    /// Scalar multiplications folded where one factor is a power of two, exactly:
    /// `Mul(Mul(a, c1), c2)` → `Mul(a, c1·c2)`, and `Mul(Mul(p, c1), Mul(q, c2))` →
    /// `Mul(p, q)` where `c1·c2 = 1` (GELU's `0.5·x · 2σ(2u)` after `tanh_plus_one`).
    PowerOfTwoScale,
    /// `MatMul(views(Mul(a, c1)), views(Mul(b, c2)))` → `Mul(MatMul(views(a), views(b)),
    /// c1·c2)`: scalar scales of a product's operands applied once to the product, where
    /// they join its epilogue (the query and key scales PyTorch's attention export puts on
    /// each side, the key's over a transposed copy).
    ScaleAfterProduct,
    /// `Conv2d(Pad(x, zeros on H and W), w)` → `Conv2d(x, w)` with the pads added to the
    /// convolution's: it reads its zero padding in place (PyTorch's `ZeroPad2d` before a
    /// `padding=0` convolution: EfficientNet, MobileNet-style stems).
    PadIntoConv,
}

impl FusionRule {
    /// The rule's name as JSON and the text output write it.
    pub fn name(self) -> &'static str {
        match self {
            FusionRule::View => "view",
            FusionRule::SwigluPair => "swiglu_pair",
            FusionRule::SiblingMerge => "sibling_merge",
            FusionRule::SoftmaxNanGuard => "softmax_nan_guard",
            FusionRule::Refused => "refused",
            FusionRule::NewKernel => "new_kernel",
            FusionRule::Logaddexp => "logaddexp",
            FusionRule::Logsumexp => "logsumexp",
            FusionRule::Softmax => "softmax",
            FusionRule::RmsnormSwiglu => "rmsnorm_swiglu",
            FusionRule::BroadcastChain => "broadcast_chain",
            FusionRule::ElementwiseChain => "elementwise_chain",
            FusionRule::ReductionEpilogue => "reduction_epilogue",
            FusionRule::RowPrologue => "row_prologue",
            FusionRule::RowScalarEpilogue => "row_scalar_epilogue",
            FusionRule::MatmulEpilogue => "matmul_epilogue",
            FusionRule::ConvEpilogue => "conv_epilogue",
            FusionRule::ProducerIntoReduction => "producer_into_reduction",
            FusionRule::DependentReduction => "dependent_reduction",
            FusionRule::Attention => "attention",
            FusionRule::ScaleBeforeView => "scale_before_view",
            FusionRule::TanhPlusOne => "tanh_plus_one",
            FusionRule::PowerOfTwoScale => "power_of_two_scale",
            FusionRule::GeluErf => "gelu_erf",
            FusionRule::ScaleAfterProduct => "scale_after_product",
            FusionRule::PadIntoConv => "pad_into_conv",
        }
    }
}

impl std::fmt::Display for FusionRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One accepted or refused decision of a rewrite or of the fuser, with its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Where it was taken.
    pub stage: Stage,
    /// The node decided about.
    pub node: String,
    /// The kernel (or rewrite result) it joined or would have joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Whether the fusion / rewrite was done.
    pub accepted: bool,
    /// The rule applied or refused.
    pub rule: FusionRule,
    /// Why.
    pub reason: String,
}

impl Decision {
    pub(crate) fn new(
        stage: Stage,
        node: &str,
        target: Option<&str>,
        accepted: bool,
        rule: FusionRule,
        reason: impl Into<String>,
    ) -> Self {
        Decision {
            stage,
            node: node.into(),
            target: target.map(|s| s.to_string()),
            accepted,
            rule,
            reason: reason.into(),
        }
    }
}

/// Naive vs rewritten value at an input where the naive f32 form overflows (for reasons).
pub fn overflow_demo(rule: FusionRule) -> String {
    match rule {
        FusionRule::Logaddexp => {
            let (a, b) = (100.0f32, 100.0f32);
            let naive = (a.exp() + b.exp()).ln();
            let safe = tensorforge_kernels::logaddexp(a, b);
            format!("at a = b = 100 (f32) the naive form gives exp(100) = {} and log(inf) = {naive}; LogAddExp gives {safe:.6}", a.exp())
        }
        FusionRule::Logsumexp => {
            let x = [100.0f32, 100.0];
            let naive = (x[0].exp() + x[1].exp()).ln();
            let mut out = [0.0f32];
            let safe = tensorforge_kernels::logsumexp(
                &x,
                tensorforge_kernels::Shape2::new(1, 2),
                &mut out,
            )
            .map(|_| out[0])
            .unwrap_or(f32::NAN);
            format!("at x = [100, 100] (f32) the naive form gives log(inf) = {naive}; LogSumExp gives {safe:.6}")
        }
        _ => {
            let x = [100.0f32, 100.0];
            let s = x[0].exp() + x[1].exp();
            let naive = x[0].exp() / s;
            let mut out = [0.0f32; 2];
            let safe =
                tensorforge_kernels::softmax(&x, tensorforge_kernels::Shape2::new(1, 2), &mut out)
                    .map(|_| out[0])
                    .unwrap_or(f32::NAN);
            format!("at x = [100, 100] (f32) the naive form gives inf / inf = {naive}; Softmax gives {safe}")
        }
    }
}

/// Apply every rewrite; returns the rewritten graph (outputs made explicit) and the
/// decisions. The result is re-validated by the caller.
pub fn rewrite(tg: &TypedGraph) -> Result<(Graph, Vec<Decision>)> {
    let mut nodes = tg.nodes.clone();
    let mut dec = vec![];
    let prod = |t: usize| tg.producer[t];
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let tname = |t: usize| tg.tensors[t].name.clone();
    for i in 0..tg.nodes.len() {
        let n = &tg.nodes[i];
        let ins = &tg.node_inputs[i];
        match &n.op {
            Op::Unary { f: UnaryFn::Log } => {
                let t = ins[0];
                match op_of(t) {
                    Op::Binary { f: BinaryFn::Add } => {
                        let p = prod(t);
                        let (u, v) = (tg.node_inputs[p][0], tg.node_inputs[p][1]);
                        if matches!(op_of(u), Op::Unary { f: UnaryFn::Exp })
                            && matches!(op_of(v), Op::Unary { f: UnaryFn::Exp })
                        {
                            let a = tg.node_inputs[prod(u)][0];
                            let b = tg.node_inputs[prod(v)][0];
                            nodes[i].op = Op::Binary {
                                f: BinaryFn::LogAddExp,
                            };
                            nodes[i].inputs = vec![tname(a), tname(b)];
                            dec.push(Decision::new(
                                Stage::Rewrite,
                                &n.name,
                                Some("LogAddExp"),
                                true,
                                FusionRule::Logaddexp,
                                format!(
                                    "Log(Add(Exp({}), Exp({}))) -> LogAddExp: exp overflows f32 above 88.72, \
                                     max(a,b) + log1p(exp(-|a-b|)) never does; {}",
                                    tname(a),
                                    tname(b),
                                    overflow_demo(FusionRule::Logaddexp)
                                ),
                            ));
                        }
                    }
                    Op::ReduceSum { axis, keepdims } => {
                        let p = prod(t);
                        let u = tg.node_inputs[p][0];
                        if matches!(op_of(u), Op::Unary { f: UnaryFn::Exp }) {
                            let x = tg.node_inputs[prod(u)][0];
                            let rank = tg.tensors[x].shape.len();
                            if norm_axis(*axis, rank) == Some(rank.saturating_sub(1)) {
                                nodes[i].op = Op::LogSumExp {
                                    axis: -1,
                                    keepdims: *keepdims,
                                };
                                nodes[i].inputs = vec![tname(x)];
                                dec.push(Decision::new(
                                    Stage::Rewrite,
                                    &n.name,
                                    Some("LogSumExp"),
                                    true,
                                    FusionRule::Logsumexp,
                                    format!(
                                        "Log(ReduceSum(Exp({}))) -> LogSumExp: subtracting the row max first keeps exp <= 1; {}",
                                        tname(x),
                                        overflow_demo(FusionRule::Logsumexp)
                                    ),
                                ));
                            } else {
                                dec.push(Decision::new(
                                    Stage::Rewrite,
                                    &n.name,
                                    Some("LogSumExp"),
                                    false,
                                    FusionRule::Logsumexp,
                                    format!("Log(ReduceSum(Exp)) reduces axis {axis}, not the last axis; the LogSumExp kernel reduces the last axis only"),
                                ));
                            }
                        }
                    }
                    _ => {}
                }
            }
            Op::Binary { f: BinaryFn::Div } => {
                let (e, s) = (ins[0], ins[1]);
                if let (Op::Unary { f: UnaryFn::Exp }, Op::ReduceSum { axis, keepdims }) =
                    (op_of(e), op_of(s))
                {
                    let x = tg.node_inputs[prod(e)][0];
                    let e2 = tg.node_inputs[prod(s)][0];
                    let same = e2 == e
                        || (matches!(op_of(e2), Op::Unary { f: UnaryFn::Exp })
                            && tg.node_inputs[prod(e2)][0] == x);
                    let rank = tg.tensors[x].shape.len();
                    let last = norm_axis(*axis, rank) == Some(rank.saturating_sub(1));
                    let shape_ok = tg.tensors[tg.node_outputs[i][0]].shape == tg.tensors[x].shape;
                    if same && last && *keepdims && shape_ok {
                        nodes[i].op = Op::Softmax { axis: -1 };
                        nodes[i].inputs = vec![tname(x)];
                        dec.push(Decision::new(
                            Stage::Rewrite,
                            &n.name,
                            Some("Softmax"),
                            true,
                            FusionRule::Softmax,
                            format!(
                                "Div(Exp({x}), ReduceSum(Exp({x}))) -> Softmax: exp(x - max) cannot overflow; {}",
                                overflow_demo(FusionRule::Softmax),
                                x = tname(x)
                            ),
                        ));
                    } else if same {
                        dec.push(Decision::new(
                            Stage::Rewrite,
                            &n.name,
                            Some("Softmax"),
                            false,
                            FusionRule::Softmax,
                            "Div(Exp, ReduceSum(Exp)) matched but the sum is not over the last axis with keepdims; the Softmax kernel needs both",
                        ));
                    }
                }
            }
            Op::Binary { f: BinaryFn::Mul } => {
                if let Some(d) = swiglu_pattern(tg, i, &mut nodes) {
                    dec.push(d);
                } else if let Some(d) = scale_before_view(tg, i, &mut nodes) {
                    dec.push(d);
                }
            }
            Op::Binary { f: BinaryFn::Add } => {
                if let Some(d) = tanh_plus_one(tg, i, &mut nodes) {
                    dec.push(d);
                }
            }
            Op::Where => {
                if let Some(d) = softmax_nan_guard(tg, i, &mut nodes) {
                    dec.push(d);
                }
            }
            Op::Conv2d { .. } => {
                if let Some(d) = pad_into_conv(tg, i, &mut nodes) {
                    dec.push(d);
                }
            }
            _ => {}
        }
    }
    Ok((without_dead_nodes(tg, nodes), dec))
}

/// `Conv2d(Pad(x), w, b)` where the Pad is a constant-zero pad of the spatial axes only
/// (`pads` ≥ 0, none on N or C): the convolution takes `x` with the Pad's counts added to its
/// own `[top, left, bottom, right]`. Exact: the padded positions are zeros either way. The
/// Pad stays for any other reader (it is dropped when the convolution was its only one).
fn pad_into_conv(tg: &TypedGraph, i: usize, nodes: &mut [crate::ir::Node]) -> Option<Decision> {
    let x = tg.node_inputs[i][0];
    let p = tg.producer[x];
    let Op::Pad {
        pads,
        mode: crate::ir::PadMode::Constant,
        value,
    } = &tg.nodes[p].op
    else {
        return None;
    };
    let Op::Conv2d { pads: cp, .. } = &tg.nodes[i].op else {
        return None;
    };
    if *value != 0.0 || pads.len() != 8 || pads.iter().any(|v| *v < 0) || cp.len() != 4 {
        return None;
    }
    if pads[0] != 0 || pads[1] != 0 || pads[4] != 0 || pads[5] != 0 {
        return None;
    }
    // ONNX pads [n, c, h, w] begins then ends; Conv2d's [top, left, bottom, right].
    let add = [pads[2], pads[3], pads[6], pads[7]];
    let mut merged = Vec::with_capacity(4);
    for (c, a) in cp.iter().zip(add) {
        merged.push(c.checked_add(usize::try_from(a).ok()?)?);
    }
    let src = tg.node_inputs[p][0];
    let Op::Conv2d {
        strides,
        dilations,
        group,
        ..
    } = tg.nodes[i].op.clone()
    else {
        return None;
    };
    nodes[i].op = Op::Conv2d {
        strides,
        pads: merged.clone(),
        dilations,
        group,
    };
    nodes[i].inputs[0] = tg.tensors[src].name.clone();
    Some(Decision::new(
        Stage::Rewrite,
        &tg.nodes[i].name,
        Some("Conv2d"),
        true,
        FusionRule::PadIntoConv,
        format!(
            "Conv2d(Pad({}, zeros {:?})) -> Conv2d pads {:?}: the convolution reads its zero padding in place, the padded copy ({} bytes) is not written",
            tg.tensors[src].name, add, merged, tg.tensors[x].bytes
        ),
    ))
}

/// The graph of `nodes` with the nodes left without readers dropped (sources are kept: they
/// are the interface): what the graph outputs reach backwards, one pass over the edges
/// (removing readerless nodes round by round was quadratic on a long dead chain).
fn without_dead_nodes(tg: &TypedGraph, mut nodes: Vec<crate::ir::Node>) -> Graph {
    let tname = |t: usize| tg.tensors[t].name.clone();
    let outputs: Vec<String> = tg.outputs.iter().map(|&t| tname(t)).collect();
    let mut producer: rustc_hash::FxHashMap<&str, usize> = Default::default();
    for (i, n) in nodes.iter().enumerate() {
        for o in n.output_names_ref() {
            producer.insert(o, i);
        }
    }
    let mut live = vec![false; nodes.len()];
    let mut stack: Vec<usize> = outputs
        .iter()
        .filter_map(|o| producer.get(o.as_str()).copied())
        .collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut live[i], true) {
            continue;
        }
        for t in &nodes[i].inputs {
            if let Some(&p) = producer.get(t.as_str()) {
                if !live[p] {
                    stack.push(p);
                }
            }
        }
    }
    drop(producer);
    let mut k = 0;
    nodes.retain(|n| {
        let keep = live[k] || n.op.base_class() == OpClass::Source;
        k += 1;
        keep
    });
    let mut g = Graph::new(tg.name.clone(), nodes);
    g.outputs = outputs;
    g
}

/// Scores per batch matrix (`Sq · Sk`) from which an attention is streamed as one kernel
/// (1024 × 1024). Measured on a causal block of 4 heads of 64 (docs/performance.md,
/// "Attention without the score matrix"): at 512 × 512 the batched GEMMs and the softmax's
/// row kernel were 7–15 % faster than streaming, at 1024 × 1024 streaming was 11–25 %
/// faster; sizes between were not measured.
pub const ATTENTION_MIN_SCORES: usize = 1 << 20;

/// The attention pattern, applied after the other rewrites (it matches the softmax and the
/// NaN guard they produce): `MatMul(P, v)` with `P = Softmax(x, last axis)` (or
/// `Max(Softmax(x), 0)`, the rewritten guard), `x = y [+ mask]`, `y = z [· c | / c]` with a
/// scalar constant `c`, and `z = MatMul(q, kt)`, every intermediate read only inside the
/// pattern, becomes one `FusedAttention(q, kt, v [, mask])` when each batch matrix has at
/// least [`ATTENTION_MIN_SCORES`] scores. Returns the graph unchanged (None) when nothing
/// matched, and a decision for every match, taken or refused.
pub fn attention(tg: &TypedGraph) -> Result<(Option<Graph>, Vec<Decision>)> {
    Ok(pass(
        tg,
        |op| matches!(op, Op::MatMul),
        |tg, i, nodes| attention_pattern(tg, i, nodes),
    ))
}

/// Scalar scales moved from a product's operands to the product, applied after the other
/// rewrites: `MatMul(x, y)` where `x` (or `y`, or both) is `views(Mul(a, c))` (a chain of
/// Reshapes and Transposes, possibly empty, over a multiplication by a one-element f32
/// constant) becomes `Mul(MatMul(views(a), views(b)), c1·c2)`: equal in exact arithmetic,
/// since (c1·A)(c2·B) = c1·c2·AB. The one multiplication left joins the product's epilogue
/// (with an attention's mask, in registers), where each operand's ran as a kernel of its
/// own over a rearranged copy: PyTorch's export of `scaled_dot_product_attention` scales
/// the query and the transposed key by `d^(-1/4)` each (GPT-2, Llama), and the key's
/// `Mul` reads a transposed copy (23 µs a layer at one thread in GPT-2 h256, 128 tokens,
/// AMD EPYC Zen 3, AVX2; docs/performance.md, "Attention scales after the product").
///
/// An operand is left alone when its `Mul` already joins its producer's kernel for free: `a`
/// comes from a MatMul or an elementwise op and is read only by that `Mul` (what
/// [`FusionRule::ScaleBeforeView`] arranges). Every tensor of a moved chain must be f32,
/// have one reader, not be a graph output, and keep `a`'s shape (a scale that broadcasts
/// is not moved); `c1`, `c2` and `c1·c2` must be normal numbers. Rounding differs from the
/// graph's in the last bits (one rounding of the scale, not two): not exact, as
/// [`power_of_two_scales`] is, and onnxruntime's `MatMulScaleFusion` makes the same change.
/// New names: `<matmul>::unscaled` (the product), `<matmul>::scale` (the constant) and
/// `<matmul>::rescale` (the Mul, which writes the MatMul's old output).
pub fn scale_after_product(tg: &TypedGraph) -> Result<(Option<Graph>, Vec<Decision>)> {
    Ok(pass(
        tg,
        |op| matches!(op, Op::MatMul),
        scale_after_product_at,
    ))
}

/// [`scale_after_product`]'s match at the MatMul node `i`.
fn scale_after_product_at(
    tg: &TypedGraph,
    i: usize,
    nodes: &mut Vec<crate::ir::Node>,
) -> Option<Decision> {
    let fp32 = |t: usize| tg.tensors[t].dtype == crate::ir::DType::Fp32;
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let scalar = |t: usize| match op_of(t) {
        Op::Constant { value, .. } if tg.tensors[t].numel == 1 && fp32(t) => {
            Some(*value as f32).filter(|c| c.is_normal())
        }
        _ => None,
    };
    let private = |t: usize, reader: usize| {
        tg.consumers[t].len() == 1
            && tg.consumers[t][0] == reader
            && !tg.outputs.contains(&t)
            && fp32(t)
    };
    // Operand `t` of the MatMul: (the Mul node, its operand position of `a`, the first view's
    // node or the MatMul, c, the views' names) when it is `views(Mul(a, c))` and moving c
    // gains a kernel.
    let scaled = |t: usize| -> Option<(usize, usize, usize, f32, Vec<String>)> {
        let mut x = t;
        let mut reader = i;
        let mut views = vec![];
        while matches!(op_of(x), Op::Reshape { .. } | Op::Transpose { .. }) {
            if !private(x, reader) {
                return None;
            }
            reader = tg.producer[x];
            views.push(tg.nodes[reader].name.clone());
            x = tg.node_inputs[reader][0];
        }
        let m = tg.producer[x];
        if !matches!(tg.nodes[m].op, Op::Binary { f: BinaryFn::Mul }) || !private(x, reader) {
            return None;
        }
        let (apos, c) = match *tg.node_inputs[m].as_slice() {
            [a, b] if scalar(b).is_some() && scalar(a).is_none() => (0, scalar(b)?),
            [a, b] if scalar(a).is_some() && scalar(b).is_none() => (1, scalar(a)?),
            _ => return None,
        };
        let a = tg.node_inputs[m][apos];
        if !fp32(a) || tg.tensors[a].shape != tg.tensors[x].shape {
            return None;
        }
        // Free where it is: the Mul joins a's producer (a MatMul's or an elementwise
        // kernel's epilogue).
        let free = matches!(op_of(a), Op::MatMul | Op::Binary { .. } | Op::Unary { .. })
            && tg.consumers[a].len() == 1
            && !tg.outputs.contains(&a);
        if free {
            return None;
        }
        views.reverse();
        Some((m, apos, reader, c, views))
    };
    let ins = &tg.node_inputs[i];
    let out = *tg.node_outputs[i].first()?;
    if ins.len() != 2 || !fp32(out) || ins[0] == ins[1] {
        return None;
    }
    let sides: Vec<_> = ins.iter().map(|&t| scaled(t)).collect();
    if sides.iter().all(Option::is_none) {
        return None;
    }
    let c = sides
        .iter()
        .flatten()
        .fold(1.0f32, |acc, &(_, _, _, c, _)| acc * c);
    if !c.is_normal() {
        return None;
    }
    let node = tg.nodes[i].name.clone();
    let [unscaled, cname, rescale] = fresh_names(tg, &node, ["unscaled", "scale", "rescale"])?;
    let name = |t: usize| tg.tensors[t].name.clone();
    let mut moved = vec![];
    for (pos, side) in sides.iter().enumerate() {
        let Some((m, apos, reader, c, views)) = side else {
            continue;
        };
        let a = name(tg.node_inputs[*m][*apos]);
        let mul_out = name(tg.node_outputs[*m][0]);
        // The first view (or the MatMul itself) reads `a` in place of the Mul's output.
        let slot = if *reader == i { pos } else { 0 };
        debug_assert_eq!(nodes[*reader].inputs[slot], mul_out);
        nodes[*reader].inputs[slot] = a.clone();
        let through = if views.is_empty() {
            String::new()
        } else {
            format!(" through {}", views.join(" -> "))
        };
        moved.push(format!("{mul_out} = {a} · {c:e}{through}"));
    }
    let orig = name(out);
    nodes[i].outputs = vec![unscaled.clone()];
    nodes.push(f32_constant(&cname, vec![], c));
    let mut mul = crate::ir::Node::new(
        rescale,
        Op::Binary { f: BinaryFn::Mul },
        &[unscaled.as_str(), cname.as_str()],
    );
    mul.outputs = vec![orig];
    nodes.push(mul);
    Some(Decision::new(
        Stage::Rewrite,
        &node,
        Some("MatMul"),
        true,
        FusionRule::ScaleAfterProduct,
        format!(
            "MatMul of scaled operands ({}) -> MatMul of the unscaled operands · {c:e}: (c1·A)(c2·B) = c1·c2·AB; the scale joins the product's epilogue instead of a kernel of its own per operand (rounded once, not twice: the last bits differ)",
            moved.join("; ")
        ),
    ))
}

/// Exact GELU as exporters write it, found before the other rewrites (which could move one
/// of its scalar products before a view and so change what `x` holds): a `Mul` whose
/// operands, through one more private `Mul`, are `x`, the scalar `0.5` and
/// `Add(Erf(s), 1)` with `s = Div(x, √2)` or `Mul(x, 1/√2)` (either operand order at every
/// node; torch's `x * (1 + erf(x / √2)) * 0.5`, and the ONNX importer's lowering of `Gelu`
/// and `BiasGelu`, `(x · 0.5) · (1 + erf(x / √2))`), every intermediate read only inside
/// the pattern and not a graph output, all of it f32, the result of `x`'s shape: the root
/// becomes [`UnaryFn::GeluErf`] of `x`. Returns the graph unchanged (None) when nothing
/// matched.
///
/// One function in place of five ops: the JIT's `tf_gelu_erf` runs at 0.96 ns per element
/// against 1.35 for the composite in one C driver (AMD EPYC Zen 3, AVX2;
/// docs/performance.md), and for x < 0 it computes x·Φ(x) directly, where the composite's
/// `1 + erf(x/√2)` cancels (no correct digit below x ≈ −5).
pub fn exact_gelu(tg: &TypedGraph) -> Result<(Option<Graph>, Vec<Decision>)> {
    Ok(pass(
        tg,
        |op| matches!(op, Op::Binary { f: BinaryFn::Mul }),
        |tg, i, nodes| gelu_erf_pattern(tg, i, nodes),
    ))
}

/// One rewrite pass: `matcher` at every node whose op `root` accepts, over one copy of the
/// nodes (it reads the graph as it was, and edits the copy); the graph without the nodes
/// left dead and every decision, or no graph when none was accepted.
fn pass(
    tg: &TypedGraph,
    root: impl Fn(&Op) -> bool,
    matcher: impl Fn(&TypedGraph, usize, &mut Vec<crate::ir::Node>) -> Option<Decision>,
) -> (Option<Graph>, Vec<Decision>) {
    let mut nodes = tg.nodes.clone();
    let dec: Vec<Decision> = (0..tg.nodes.len())
        .filter(|&i| root(&tg.nodes[i].op))
        .filter_map(|i| matcher(tg, i, &mut nodes))
        .collect();
    if !dec.iter().any(|d| d.accepted) {
        return (None, dec);
    }
    (Some(without_dead_nodes(tg, nodes)), dec)
}

/// [`exact_gelu`]'s match at the Mul node `i`.
fn gelu_erf_pattern(tg: &TypedGraph, i: usize, nodes: &mut [crate::ir::Node]) -> Option<Decision> {
    use crate::ir::DType;
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let fp32 = |t: usize| tg.tensors[t].dtype == DType::Fp32;
    // A one-element constant within `tol` of `want` (exporters write f32 roundings of √2).
    let scalar = |t: usize, want: f64, tol: f64| {
        tg.tensors[t].numel == 1
            && matches!(op_of(t), Op::Constant { value, .. } if (value - want).abs() <= tol)
    };
    let private = |t: usize| tg.consumers[t].len() == 1 && !tg.outputs.contains(&t) && fp32(t);
    let pair = |t: usize| match tg.node_inputs[tg.producer[t]].as_slice() {
        &[a, b] => Some((a, b)),
        _ => None,
    };
    // `t = Add(Erf(x/√2), 1)`: returns x.
    let one_plus_erf = |t: usize| -> Option<usize> {
        if !private(t) || !matches!(op_of(t), Op::Binary { f: BinaryFn::Add }) {
            return None;
        }
        let (u, v) = pair(t)?;
        let e = match (scalar(u, 1.0, 0.0), scalar(v, 1.0, 0.0)) {
            (false, true) => u,
            (true, false) => v,
            _ => return None,
        };
        if !private(e) || !matches!(op_of(e), Op::Unary { f: UnaryFn::Erf }) {
            return None;
        }
        let s = tg.node_inputs[tg.producer[e]][0];
        if !private(s) {
            return None;
        }
        let (a, b) = pair(s)?;
        let (r2, h) = (std::f64::consts::SQRT_2, std::f64::consts::FRAC_1_SQRT_2);
        match op_of(s) {
            Op::Binary { f: BinaryFn::Div } if scalar(b, r2, 1e-6) => Some(a),
            Op::Binary { f: BinaryFn::Mul } if scalar(b, h, 1e-6) => Some(a),
            Op::Binary { f: BinaryFn::Mul } if scalar(a, h, 1e-6) => Some(b),
            _ => None,
        }
    };
    let ins = &tg.node_inputs[i];
    let out = *tg.node_outputs[i].first()?;
    if ins.len() != 2 || !fp32(out) {
        return None;
    }
    let mut found = None;
    for (inner, other) in [(ins[0], ins[1]), (ins[1], ins[0])] {
        if !private(inner) || !matches!(op_of(inner), Op::Binary { f: BinaryFn::Mul }) {
            continue;
        }
        let Some((m1, m2)) = pair(inner) else {
            continue;
        };
        let leaves = [other, m1, m2];
        for (h, o, x) in [
            (0, 1, 2),
            (0, 2, 1),
            (1, 0, 2),
            (1, 2, 0),
            (2, 0, 1),
            (2, 1, 0),
        ] {
            if scalar(leaves[h], 0.5, 0.0) && one_plus_erf(leaves[o]) == Some(leaves[x]) {
                found = Some(leaves[x]);
            }
        }
    }
    let x = found?;
    if !fp32(x) || tg.tensors[x].shape != tg.tensors[out].shape {
        return None;
    }
    let name = tg.tensors[x].name.clone();
    nodes[i].op = Op::Unary {
        f: UnaryFn::GeluErf,
    };
    nodes[i].inputs = vec![name.clone()];
    Some(Decision::new(
        Stage::Rewrite,
        &tg.nodes[i].name,
        Some("GeluErf"),
        true,
        FusionRule::GeluErf,
        format!(
            "x · 0.5 · (1 + Erf(x / √2)) over {name} -> GeluErf({name}): one function where five ops ran, \
             and x·Φ(x) without the cancellation of 1 + erf(x/√2) for x < 0"
        ),
    ))
}

/// Scalar multiplications folded where a factor is a power of two, applied after the
/// other rewrites (it finds the `2` that `tanh_plus_one` introduces):
/// - `Mul(Mul(a, c1), c2)` → `Mul(a, c1·c2)` (GPT-2's `2·(0.79788·r)` → `1.59577·r`);
/// - `Mul(Mul(p, c1), Mul(q, c2))` → `Mul(p, q)` where `c1·c2 = 1` (its `(0.5·x)·(2·σ)` →
///   `x·σ`),
///
/// with `c1`, `c2` one-element f32 constants, one of them (both, in the second form) a power
/// of two, and each inner product read only here. Scaling by 2^k commutes with rounding, so
/// `round(round(a·c1)·2^k) = round(a·c1·2^k)`: the result is the same float wherever no
/// intermediate overflows or leaves the normal range, and where one does, the folded form is
/// the more accurate. Nodes and tensors keep their names; a new constant is named
/// `<node>::scale`. Returns the graph unchanged (None) when nothing matched.
pub fn power_of_two_scales(tg: &TypedGraph) -> Result<(Option<Graph>, Vec<Decision>)> {
    Ok(pass(
        tg,
        |op| matches!(op, Op::Binary { f: BinaryFn::Mul }),
        fold_scales,
    ))
}

/// The names `<node>::<suffix>` for the nodes and tensors a rewrite adds, or `None` when the
/// graph already has one of them (the rewrite is then not made).
fn fresh_names<const N: usize>(
    tg: &TypedGraph,
    node: &str,
    suffixes: [&str; N],
) -> Option<[String; N]> {
    let names = suffixes.map(|s| format!("{node}::{s}"));
    let taken = |n: &String| {
        tg.tensors.iter().any(|t| &t.name == n) || tg.nodes.iter().any(|x| &x.name == n)
    };
    (!names.iter().any(taken)).then_some(names)
}

/// A Constant node `name` of f32 `value` over `shape`, added by a rewrite.
fn f32_constant(name: &str, shape: Vec<usize>, value: f32) -> crate::ir::Node {
    crate::ir::Node::new(
        name,
        Op::Constant {
            shape,
            dtype: crate::ir::DType::Fp32,
            value: value as f64,
        },
        &[],
    )
}

/// A finite, normal power of two (its f32 mantissa bits are zero).
fn power_of_two(c: f32) -> bool {
    c.is_normal() && c.to_bits() & 0x007f_ffff == 0
}

fn fold_scales(tg: &TypedGraph, i: usize, nodes: &mut Vec<crate::ir::Node>) -> Option<Decision> {
    let fp32 = |t: usize| tg.tensors[t].dtype == crate::ir::DType::Fp32;
    // The value of a one-element f32 constant.
    let scalar = |t: usize| match &tg.nodes[tg.producer[t]].op {
        Op::Constant { value, .. } if tg.tensors[t].numel == 1 && fp32(t) => Some(*value as f32),
        _ => None,
    };
    // `t = Mul(a, c)` (either order) read only by node i, not a graph output, with the
    // shape of `a` (so dropping the constant changes no broadcast): (a, c's tensor, c).
    let scaled = |t: usize| -> Option<(usize, usize, f32)> {
        let pn = tg.producer[t];
        if !matches!(tg.nodes[pn].op, Op::Binary { f: BinaryFn::Mul })
            || tg.consumers[t].len() != 1
            || tg.outputs.contains(&t)
        {
            return None;
        }
        let (a, c) = match *tg.node_inputs[pn].as_slice() {
            [a, b] if scalar(b).is_some() && scalar(a).is_none() => (a, b),
            [a, b] if scalar(a).is_some() && scalar(b).is_none() => (b, a),
            _ => return None,
        };
        (tg.tensors[a].shape == tg.tensors[t].shape && fp32(a)).then(|| (a, c, scalar(c).unwrap()))
    };
    let out = tg.node_outputs[i][0];
    let name = |t: usize| tg.tensors[t].name.clone();
    let (x, y) = (tg.node_inputs[i][0], tg.node_inputs[i][1]);
    // Mul(Mul(p, c1), Mul(q, c2)), both powers of two, c1·c2 = 1.
    if let (Some((p, _, c1)), Some((q, _, c2))) = (scaled(x), scaled(y)) {
        if x != y && power_of_two(c1) && power_of_two(c2) && c1 * c2 == 1.0 {
            nodes[i].inputs = vec![name(p), name(q)];
            return Some(Decision::new(
                Stage::Rewrite,
                &tg.nodes[i].name,
                Some("Mul"),
                true,
                FusionRule::PowerOfTwoScale,
                format!(
                    "Mul(Mul({p}, {c1:e}), Mul({q}, {c2:e})) -> Mul({p}, {q}): the scales are powers of two whose product is 1, so the product is the same float; two multiplications fewer",
                    p = name(p),
                    q = name(q)
                ),
            ));
        }
    }
    // Mul(Mul(a, c1), c2) with c1 or c2 a power of two.
    let (t, c2t) = match (scalar(x), scalar(y)) {
        (None, Some(_)) => (x, y),
        (Some(_), None) => (y, x),
        _ => return None,
    };
    let c2 = scalar(c2t)?;
    let (a, _, c1) = scaled(t)?;
    let c = c1 * c2;
    if !(power_of_two(c1) || power_of_two(c2))
        || !c.is_normal()
        || tg.tensors[out].shape != tg.tensors[a].shape
    {
        return None;
    }
    let node = tg.nodes[i].name.clone();
    let [cname] = fresh_names(tg, &node, ["scale"])?;
    let shape = match &tg.nodes[tg.producer[c2t]].op {
        Op::Constant { shape, .. } => shape.clone(),
        _ => return None,
    };
    nodes.push(f32_constant(&cname, shape, c));
    nodes[i].inputs = vec![name(a), cname];
    Some(Decision::new(
        Stage::Rewrite,
        &node,
        Some("Mul"),
        true,
        FusionRule::PowerOfTwoScale,
        format!(
            "Mul(Mul({a}, {c1:e}), {c2:e}) -> Mul({a}, {c:e}): one factor is a power of two, so the product is the same float; one multiplication fewer",
            a = name(a)
        ),
    ))
}

fn attention_pattern(tg: &TypedGraph, i: usize, nodes: &mut [crate::ir::Node]) -> Option<Decision> {
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let name = |t: usize| tg.tensors[t].name.clone();
    let input = |t: usize, j: usize| tg.node_inputs[tg.producer[t]][j];
    let scalar = |t: usize| match op_of(t) {
        Op::Constant { value, .. } if tg.tensors[t].numel == 1 => Some(*value),
        _ => None,
    };
    let (p, v) = (tg.node_inputs[i][0], tg.node_inputs[i][1]);
    let mut inner = vec![p];
    // The softmax, behind the rewritten NaN guard or not.
    let (sm, zero_masked_rows) = match op_of(p) {
        Op::Softmax { .. } => (p, false),
        Op::Binary { f: BinaryFn::Max } => {
            let (a, b) = (input(p, 0), input(p, 1));
            if matches!(op_of(a), Op::Softmax { .. }) && scalar(b) == Some(0.0) {
                inner.push(a);
                (a, true)
            } else {
                return None;
            }
        }
        _ => return None,
    };
    let Op::Softmax { axis } = op_of(sm) else {
        return None;
    };
    let x = input(sm, 0);
    let rank = tg.tensors[x].shape.len();
    if norm_axis(*axis, rank) != Some(rank.saturating_sub(1)) {
        return None;
    }
    inner.push(x);
    // The scores: `t` itself a MatMul's output, or `z · c`, `c · z`, `z / c` with `z` one
    // and `c` a scalar constant. Returns `z` and the factor.
    let scores = |t: usize| -> Option<(usize, f64)> {
        match op_of(t) {
            Op::MatMul => Some((t, 1.0)),
            Op::Binary { f } if matches!(f, BinaryFn::Mul | BinaryFn::Div) => {
                let (a, b) = (input(t, 0), input(t, 1));
                let (z, c) = match (scalar(b), scalar(a)) {
                    (Some(c), _) => (a, c),
                    (None, Some(c)) if *f == BinaryFn::Mul => (b, c),
                    _ => return None,
                };
                let c = if *f == BinaryFn::Div { 1.0 / c } else { c };
                matches!(op_of(z), Op::MatMul).then_some((z, c))
            }
            _ => None,
        }
    };
    // x = y + mask (either order: y is the side that holds the scores), or x = y.
    let (y, mask, (z, scale)) = match op_of(x) {
        Op::Binary { f: BinaryFn::Add } => {
            let (a, b) = (input(x, 0), input(x, 1));
            match (scores(a), scores(b)) {
                (Some(zs), _) => (a, Some(b), zs),
                (None, Some(zs)) => (b, Some(a), zs),
                _ => return None,
            }
        }
        _ => (x, None, scores(x)?),
    };
    inner.extend([y, z]);
    let (q, kt) = (input(z, 0), input(z, 1));
    let node = &tg.nodes[i].name;
    let refuse = |why: String| {
        Some(Decision::new(
            Stage::Pattern,
            node,
            Some("FusedAttention"),
            false,
            FusionRule::Attention,
            why,
        ))
    };
    inner.sort_unstable();
    inner.dedup();
    for &t in &inner {
        let readers = &tg.consumers[t];
        if readers.len() != 1 || tg.is_output(t) {
            return refuse(format!(
                "intermediate `{}` is read outside the attention or is a graph output; the streamed kernel never stores it",
                name(t)
            ));
        }
    }
    let (qs, ks, vs) = (
        &tg.tensors[q].shape,
        &tg.tensors[kt].shape,
        &tg.tensors[v].shape,
    );
    let r = qs.len();
    if r < 2
        || ks.len() != r
        || vs.len() != r
        || qs[..r - 2] != ks[..r - 2]
        || qs[..r - 2] != vs[..r - 2]
    {
        return refuse(format!(
            "q {qs:?}, kt {ks:?} and v {vs:?} do not share one rank and leading dims (no batch broadcast in the streamed kernel)"
        ));
    }
    let scores = &tg.tensors[z].shape;
    if let Some(m) = mask {
        let ms = &tg.tensors[m].shape;
        if ms.len() > r
            || crate::ir::broadcast_shapes(ms, scores).as_deref() != Some(&scores[..])
            || tg.tensors[m].dtype != tg.tensors[q].dtype
        {
            return refuse(format!(
                "mask `{}` {ms:?} does not broadcast to the scores {scores:?} in their dtype",
                name(m)
            ));
        }
    }
    let per = scores[r - 2].saturating_mul(scores[r - 1]);
    if per < ATTENTION_MIN_SCORES {
        return refuse(format!(
            "{} x {} scores per head ({} KiB): below {} scores per head the batched GEMMs and the softmax row kernel measured faster than streaming",
            scores[r - 2],
            scores[r - 1],
            per * 4 / 1024,
            ATTENTION_MIN_SCORES
        ));
    }
    nodes[i].op = Op::FusedAttention {
        scale,
        zero_masked_rows,
    };
    let mut ins = vec![name(q), name(kt), name(v)];
    ins.extend(mask.map(name));
    nodes[i].inputs = ins;
    Some(Decision::new(
        Stage::Pattern,
        node,
        Some("FusedAttention"),
        true,
        FusionRule::Attention,
        format!(
            "MatMul({q}, {kt}){s}{m} -> Softmax{g} -> MatMul(·, {v}) streams keys in blocks with a running max and sum: the {sq} x {sk} scores per head ({kib} KiB, {total} MiB for all heads) never reach memory",
            q = name(q),
            kt = name(kt),
            v = name(v),
            s = if scale == 1.0 { String::new() } else { format!(" · {scale}") },
            m = mask.map(|m| format!(" + {}", name(m))).unwrap_or_default(),
            g = if zero_masked_rows { " (NaN guard: fully masked rows give 0)" } else { "" },
            sq = scores[r - 2],
            sk = scores[r - 1],
            kib = per * 4 / 1024,
            total = tg.tensors[z].bytes / (1 << 20),
        ),
    ))
}

/// `Add(Tanh(u), c)` (either order) with `c` a one-element Constant 1 and the Tanh read only
/// here: `1 + tanh(u) = 2·σ(2u)` exactly in real arithmetic, so the Add becomes
/// `Mul(Sigmoid(Mul(u, 2)), 2)` (a new Constant 2 of `c`'s shape, so the broadcast is the
/// same). In f32 it is the better form: where tanh(u) nears −1 (GELU's negative inputs),
/// `1 + tanh(u)` cancels and keeps few correct bits, `2σ(2u)` keeps its relative accuracy;
/// and σ takes one exponential and one division, where the C tanh evaluates a polynomial
/// branch and an exponential branch (GPT-2's GELU epilogue: 1.14 → 0.82 ns per element
/// in a C driver over its generated kernel, AMD EPYC Zen 3, AVX2). The new nodes are named
/// after the Add (`<add>::two`, `::2u`, `::sigmoid`); a name already taken refuses it.
fn tanh_plus_one(tg: &TypedGraph, i: usize, nodes: &mut Vec<crate::ir::Node>) -> Option<Decision> {
    let ins = &tg.node_inputs[i];
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let one = |t: usize| {
        matches!(op_of(t), Op::Constant { value, .. } if *value == 1.0) && tg.tensors[t].numel == 1
    };
    let tanh = |t: usize| matches!(op_of(t), Op::Unary { f: UnaryFn::Tanh });
    let (th, c) = match (ins.as_slice(), ins.len()) {
        (&[a, b], 2) if tanh(a) && one(b) => (a, b),
        (&[a, b], 2) if one(a) && tanh(b) => (b, a),
        _ => return None,
    };
    let u = tg.node_inputs[tg.producer[th]][0];
    let fp32 = |t: usize| tg.tensors[t].dtype == crate::ir::DType::Fp32;
    if tg.consumers[th].len() != 1 || tg.outputs.contains(&th) || !fp32(u) || !fp32(th) {
        return None;
    }
    let add = tg.nodes[i].name.clone();
    let [two, twice, sig] = fresh_names(tg, &add, ["two", "2u", "sigmoid"])?;
    let shape = match op_of(c) {
        Op::Constant { shape, .. } => shape.clone(),
        _ => return None,
    };
    let name = |t: usize| tg.tensors[t].name.clone();
    nodes.push(crate::ir::Node::new(
        two.clone(),
        Op::Constant {
            shape,
            dtype: crate::ir::DType::Fp32,
            value: 2.0,
        },
        &[],
    ));
    nodes.push(crate::ir::Node::new(
        twice.clone(),
        Op::Binary { f: BinaryFn::Mul },
        &[&name(u), &two],
    ));
    nodes.push(crate::ir::Node::new(
        sig.clone(),
        Op::Unary {
            f: UnaryFn::Sigmoid,
        },
        &[&twice],
    ));
    nodes[i].op = Op::Binary { f: BinaryFn::Mul };
    nodes[i].inputs = vec![sig, two];
    Some(Decision::new(
        Stage::Rewrite,
        &add,
        Some("Sigmoid"),
        true,
        FusionRule::TanhPlusOne,
        format!(
            "Add(Tanh({u}), 1) -> 2·Sigmoid(2·{u}): equal in exact arithmetic; no cancellation where tanh nears -1, and one exponential instead of tanh's two branches",
            u = name(u)
        ),
    ))
}

/// `Mul(t, c)` (either order) with `c` a one-element Constant and `t` the end of a chain of
/// views (Reshape, Transpose) of `y`, where `y` comes from a MatMul or an elementwise op:
/// the Mul moves before the views, `views(Mul(y, c))`. Each element is multiplied by the
/// same `c` either way (a view moves no value), so the result is bit for bit the same; the
/// Mul then joins `y`'s producer kernel (a linear layer's epilogue, in registers) where it
/// ran as an elementwise kernel of its own over the rearranged tensor. ViT's and GPT-2's
/// exporters scale the query and key after the head-split Transpose this way. Every tensor
/// of the chain, `y` and the Mul's output must have one reader and not be graph outputs.
fn scale_before_view(tg: &TypedGraph, i: usize, nodes: &mut [crate::ir::Node]) -> Option<Decision> {
    let ins = &tg.node_inputs[i];
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let scalar = |t: usize| matches!(op_of(t), Op::Constant { .. }) && tg.tensors[t].numel == 1;
    let (tpos, c) = match (scalar(ins[0]), scalar(ins[1])) {
        (false, true) => (0, ins[1]),
        (true, false) => (1, ins[0]),
        _ => return None,
    };
    let t = ins[tpos];
    let out = tg.node_outputs[i][0];
    let only_reader = |x: usize, reader: usize| {
        tg.consumers[x].len() == 1 && tg.consumers[x][0] == reader && !tg.outputs.contains(&x)
    };
    if tg.outputs.contains(&out) || tg.tensors[out].shape != tg.tensors[t].shape {
        return None;
    }
    // Walk the views back from t to y.
    let mut views = vec![];
    let mut x = t;
    let mut reader = i;
    while matches!(op_of(x), Op::Reshape { .. } | Op::Transpose { .. }) {
        if !only_reader(x, reader) {
            return None;
        }
        reader = tg.producer[x];
        views.push(reader);
        x = tg.node_inputs[reader][0];
    }
    let y = x;
    let first_view = *views.last()?;
    let producer_ok = matches!(op_of(y), Op::MatMul | Op::Binary { .. } | Op::Unary { .. });
    if !producer_ok || !only_reader(y, first_view) || tg.tensors[y].dtype != tg.tensors[out].dtype {
        return None;
    }
    let name = |t: usize| tg.tensors[t].name.clone();
    // Mul(y, c) (operands in their order) → the first view reads it → the Mul's readers read
    // the last view's output.
    nodes[i].inputs[tpos] = name(y);
    nodes[first_view].inputs[0] = name(out);
    for &r in &tg.consumers[out] {
        for inp in nodes[r].inputs.iter_mut() {
            if *inp == name(out) {
                *inp = name(t);
            }
        }
    }
    let view_names: Vec<&str> = views
        .iter()
        .rev()
        .map(|&v| tg.nodes[v].name.as_str())
        .collect();
    Some(Decision::new(
        Stage::Rewrite,
        &tg.nodes[i].name,
        Some(&tg.nodes[tg.producer[y]].name),
        true,
        FusionRule::ScaleBeforeView,
        format!(
            "Mul({t}, {c}) -> {views}(Mul({y}, {c})): a scalar multiply commutes with the views ({views}), the same products bit for bit; it joins {y}'s producer instead of running as a kernel of its own over the rearranged tensor",
            t = name(t),
            c = name(c),
            y = name(y),
            views = view_names.join(" -> ")
        ),
    ))
}

/// `Where(IsNaN(s), z, s)` with `s` a Softmax and `z` a Constant 0: the guard PyTorch's
/// exporters put after a masked softmax (a fully masked row is NaN; it becomes 0). A softmax
/// is NaN or in [0, 1] (never −0), so the guard equals `Max(s, z)` with Max the IEEE maxNum
/// (NaN ignored: `fmax(NaN, 0) = 0`, `fmax(s, 0) = s`), an elementwise op that joins the
/// softmax's row kernel, where the Where ran as a kernel of its own reading the softmax and a
/// NaN mask back from memory. The IsNaN is then dead and dropped.
fn softmax_nan_guard(tg: &TypedGraph, i: usize, nodes: &mut [crate::ir::Node]) -> Option<Decision> {
    let ins = &tg.node_inputs[i];
    let (c, z, s) = (ins[0], ins[1], ins[2]);
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    let guard = matches!(op_of(c), Op::Unary { f: UnaryFn::IsNaN })
        && tg.node_inputs[tg.producer[c]][0] == s
        && matches!(op_of(s), Op::Softmax { .. })
        && matches!(op_of(z), Op::Constant { value, .. } if *value == 0.0)
        && tg.tensors[tg.node_outputs[i][0]].shape == tg.tensors[s].shape;
    if !guard {
        return None;
    }
    let name = |t: usize| tg.tensors[t].name.clone();
    nodes[i].op = Op::Binary { f: BinaryFn::Max };
    nodes[i].inputs = vec![name(s), name(z)];
    Some(Decision::new(
        Stage::Rewrite,
        &tg.nodes[i].name,
        Some("Max"),
        true,
        FusionRule::SoftmaxNanGuard,
        format!(
            "Where(IsNaN({s}), 0, {s}) -> Max({s}, 0): a softmax is NaN or in [0, 1], and maxNum(NaN, 0) = 0, maxNum(v, 0) = v there; the Max joins the softmax's row kernel instead of a kernel of its own reading the softmax and a NaN mask back",
            s = name(s)
        ),
    ))
}

fn swiglu_pattern(tg: &TypedGraph, i: usize, nodes: &mut [crate::ir::Node]) -> Option<Decision> {
    let ins = &tg.node_inputs[i];
    let name = &tg.nodes[i].name;
    let op_of = |t: usize| &tg.nodes[tg.producer[t]].op;
    for (s, u) in [(ins[0], ins[1]), (ins[1], ins[0])] {
        if !matches!(op_of(s), Op::Unary { f: UnaryFn::Silu }) {
            continue;
        }
        let g = tg.node_inputs[tg.producer[s]][0];
        if !(matches!(op_of(g), Op::MatMul) && matches!(op_of(u), Op::MatMul)) {
            continue;
        }
        let (mg, mu) = (tg.producer[g], tg.producer[u]);
        let (h, wg) = (tg.node_inputs[mg][0], tg.node_inputs[mg][1]);
        let (h2, wu) = (tg.node_inputs[mu][0], tg.node_inputs[mu][1]);
        let eps = match op_of(h) {
            Op::RmsNorm { eps } => *eps,
            _ => continue,
        };
        let refuse = |why: String| {
            Some(Decision::new(
                Stage::Pattern,
                name,
                Some("RMSNormSwiGLU"),
                false,
                FusionRule::RmsnormSwiglu,
                why,
            ))
        };
        if h != h2 {
            return refuse(format!(
                "gate and up MatMuls read different tensors (`{}` vs `{}`); the fused kernel needs one RMSNorm output",
                tg.tensors[h].name, tg.tensors[h2].name
            ));
        }
        if tg.tensors[wg].shape.len() != 2 || tg.tensors[wu].shape != tg.tensors[wg].shape {
            return refuse("the weights must be two matrices [D, F] of one shape".into());
        }
        let mut readers = tg.consumers[h].clone();
        readers.sort();
        let mut want = vec![mg, mu];
        want.sort();
        let inner = [
            (h, want.clone()),
            (g, vec![tg.producer[s]]),
            (s, vec![i]),
            (u, vec![i]),
        ];
        for (t, w) in inner {
            let mut r = tg.consumers[t].clone();
            r.sort();
            if r != w || tg.is_output(t) {
                return refuse(format!(
                    "intermediate `{}` is read outside the pattern or is a graph output; the fused kernel never materializes it",
                    tg.tensors[t].name
                ));
            }
        }
        let rn = tg.producer[h];
        let x = &tg.tensors[tg.node_inputs[rn][0]].name;
        let gamma = &tg.tensors[tg.node_inputs[rn][1]].name;
        nodes[i].op = Op::RmsNormSwiGlu { eps };
        nodes[i].inputs = vec![
            x.clone(),
            gamma.clone(),
            tg.tensors[wg].name.clone(),
            tg.tensors[wu].name.clone(),
        ];
        return Some(Decision::new(
            Stage::Pattern,
            name,
            Some("RMSNormSwiGLU"),
            true,
            FusionRule::RmsnormSwiglu,
            format!(
                "RMSNorm({x}) -> MatMul gate / MatMul up -> SiLU -> Mul matches the Kernels crate's fused RMSNorm+SwiGLU: \
                 h, gate, up and SiLU(gate) stay in row blocks and never reach DRAM"
            ),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked softmax with PyTorch's NaN guard; `src` is the Where's third input and
    /// `zero` the guard's fill value.
    fn guarded(src: &str, zero: f64) -> Graph {
        // `e` (another value than the softmax) only where the Where reads it.
        let e = if src == "e" {
            r#"{"name":"e","op":"Exp","inputs":["x"]},"#
        } else {
            ""
        };
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
          {{"name":"x","op":"Input","attrs":{{"shape":[3,4],"dtype":"fp32"}}}},
          {{"name":"s","op":"Softmax","attrs":{{"axis":-1}},"inputs":["x"]}},
          {e}
          {{"name":"n","op":"IsNaN","inputs":["s"]}},
          {{"name":"z","op":"Constant","attrs":{{"shape":[1],"dtype":"fp32","value":{zero}}}}},
          {{"name":"y","op":"Where","inputs":["n","z","{src}"]}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_softmax_nan_guard_becomes_a_max_in_the_softmax_kernel() {
        let c = crate::fusion::compile(&guarded("s", 0.0)).unwrap();
        assert!(c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::SoftmaxNanGuard && d.accepted));
        // One row kernel: the softmax and its Max (the IsNaN dropped, the Where gone).
        assert_eq!(c.fused.kernels.len(), 1, "{:#?}", c.fused.kernels);
        // Row 0 finite, row 1 fully masked (−∞: softmax NaN, the guard gives 0), row 2 with
        // a NaN logit (NaN, also 0); against the guard's definition.
        let inf = f32::NEG_INFINITY;
        let x = vec![
            1.0,
            2.0,
            3.0,
            4.0,
            inf,
            inf,
            inf,
            inf,
            0.0,
            f32::NAN,
            1.0,
            2.0,
        ];
        let ins: std::collections::HashMap<String, Vec<f32>> = [("x".to_string(), x)].into();
        let y = crate::exec::execute(&c.fused, &ins).unwrap().outputs[0]
            .2
            .clone();
        let e: Vec<f64> = (1..=4).map(|v| (v as f64).exp()).collect();
        let sum: f64 = e.iter().sum();
        for j in 0..4 {
            assert!((y[j] as f64 - e[j] / sum).abs() < 1e-6, "{j}: {}", y[j]);
        }
        assert_eq!(&y[4..], &[0.0; 8], "fully masked and NaN rows are 0");
    }

    /// A linear layer's output split into heads and scaled after the Transpose (ViT's query
    /// and key); `extra` adds a second reader of the Transpose's output.
    fn scaled_heads(extra: bool) -> Graph {
        let other = if extra {
            r#",{"name":"o","op":"Exp","inputs":["t"]}"#
        } else {
            ""
        };
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
          {{"name":"x","op":"Input","attrs":{{"shape":[1,6,8],"dtype":"fp32"}}}},
          {{"name":"w","op":"Weight","attrs":{{"shape":[8,8],"dtype":"fp32"}}}},
          {{"name":"b","op":"Weight","attrs":{{"shape":[8],"dtype":"fp32"}}}},
          {{"name":"mm","op":"MatMul","inputs":["x","w"]}},
          {{"name":"y","op":"Add","inputs":["mm","b"]}},
          {{"name":"r","op":"Reshape","attrs":{{"shape":[1,6,2,4]}},"inputs":["y"]}},
          {{"name":"t","op":"Transpose","attrs":{{"perm":[0,2,1,3]}},"inputs":["r"]}},
          {{"name":"c","op":"Constant","attrs":{{"shape":[1],"dtype":"fp32","value":0.35}}}},
          {{"name":"q","op":"Mul","inputs":["t","c"]}},
          {{"name":"z","op":"Exp","inputs":["q"]}}{other}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_scale_after_a_head_split_moves_into_the_linear_layer() {
        let c = crate::fusion::compile(&scaled_heads(false)).unwrap();
        let d = c
            .decisions
            .iter()
            .find(|d| d.rule == FusionRule::ScaleBeforeView)
            .expect("the rewrite fired");
        assert!(d.accepted && d.reason.contains("r -> t"), "{}", d.reason);
        // The Mul now reads the linear layer's output and joins its matmul kernel; the
        // views read the Mul; Exp reads the views' end (still [1, 2, 6, 4]).
        let g = &c.fused.graph;
        let node = |n: &str| g.nodes.iter().position(|x| x.name == n).unwrap();
        assert_eq!(g.nodes[node("q")].inputs, vec!["y", "c"]);
        assert_eq!(g.nodes[node("r")].inputs, vec!["q"]);
        assert_eq!(g.nodes[node("z")].inputs, vec!["t"]);
        let z = g.node_outputs[node("z")][0];
        assert_eq!(g.tensors[z].shape, vec![1, 2, 6, 4]);
        let k = c
            .fused
            .kernels
            .iter()
            .find(|k| k.nodes.contains(&node("mm")))
            .unwrap();
        assert!(k.nodes.contains(&node("q")), "{:?}", k.nodes);
        // The same values as the graph as written (same products; the GEMM paths of the
        // fused and unfused programs may round the bias differently).
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&c.unfused.graph, &mut ins, 3).unwrap();
        let a = crate::exec::execute(&c.fused, &ins).unwrap();
        let b = crate::exec::execute(&c.unfused, &ins).unwrap();
        for (x, y) in a.outputs[0].2.iter().zip(&b.outputs[0].2) {
            assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{x} vs {y}");
        }
    }

    #[test]
    fn a_scale_of_a_view_read_elsewhere_stays() {
        let c = crate::fusion::compile(&scaled_heads(true)).unwrap();
        assert!(!c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::ScaleBeforeView));
    }

    /// GELU in its tanh form as exporters write it (GPT-2): 0.5·x·(1 + tanh(√(2/π)·(x +
    /// 0.044715·x³))); `extra` gives the Tanh a second reader.
    fn gelu_tanh(extra: bool) -> Graph {
        let other = if extra {
            r#",{"name":"o","op":"Exp","inputs":["t"]}"#
        } else {
            ""
        };
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
          {{"name":"x","op":"Input","attrs":{{"shape":[6],"dtype":"fp32"}}}},
          {{"name":"ca","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.044715}}}},
          {{"name":"cs","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.7978845608028654}}}},
          {{"name":"one","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":1.0}}}},
          {{"name":"half","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.5}}}},
          {{"name":"p","op":"Pow","attrs":{{"exponent":3.0}},"inputs":["x"]}},
          {{"name":"q","op":"Mul","inputs":["p","ca"]}},
          {{"name":"r","op":"Add","inputs":["x","q"]}},
          {{"name":"u","op":"Mul","inputs":["r","cs"]}},
          {{"name":"t","op":"Tanh","inputs":["u"]}},
          {{"name":"a","op":"Add","inputs":["one","t"]}},
          {{"name":"h","op":"Mul","inputs":["x","half"]}},
          {{"name":"y","op":"Mul","inputs":["h","a"]}}{other}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn one_plus_tanh_becomes_twice_a_sigmoid_and_stays_accurate_where_it_cancelled() {
        let c = crate::fusion::compile(&gelu_tanh(false)).unwrap();
        let d = c
            .decisions
            .iter()
            .find(|d| d.rule == FusionRule::TanhPlusOne)
            .expect("the rewrite fired");
        assert!(d.accepted && d.node == "a", "{d:?}");
        let g = &c.fused.graph;
        assert!(!g
            .nodes
            .iter()
            .any(|n| matches!(n.op, Op::Unary { f: UnaryFn::Tanh })));
        assert!(g.nodes.iter().any(|n| n.name == "a::sigmoid"));
        // Against GELU in f64. At x = −5, u = 0.79788·(−5 − 0.044715·125) = −8.449 and
        // 1 + tanh(u) = 2/(1 + e^16.9) ≈ 9.2e-8, below half an ulp of 1 in f32 (5.96e-8 is
        // one ulp below 1): the form as written keeps at most one correct bit there.
        let x = vec![-5.0f32, -3.0, -0.5, 0.0, 0.7, 4.0];
        let ins: std::collections::HashMap<String, Vec<f32>> =
            [("x".to_string(), x.clone())].into();
        let y = &crate::exec::execute(&c.fused, &ins).unwrap().outputs[0].2;
        for (&xv, &yv) in x.iter().zip(y) {
            let xd = xv as f64;
            let u = 0.797_884_560_802_865_4 * (xd + 0.044715 * xd * xd * xd);
            let want = 0.5 * xd * (1.0 + u.tanh());
            assert!(
                (yv as f64 - want).abs() <= 1e-5 * want.abs() + 1e-30,
                "gelu({xv}) = {yv}, want {want:e}"
            );
        }
    }

    /// Exact GELU over x[8] as torch exports it, `(x · (1 + erf(x / √2))) · 0.5`, or (`importer`)
    /// as the ONNX importer lowers `Gelu`, `(x · 0.5) · (1 + erf(x · (1/√2)))` with its
    /// constants on the other side; `half` is the 0.5 constant's value, `erf_in` the tensor the
    /// scaling reads (x, or another input z), `extra` a second reader of the Erf.
    fn gelu_erf_graph(importer: bool, half: f64, erf_in: &str, extra: bool) -> Graph {
        let other = if extra {
            r#",{"name":"o","op":"Exp","inputs":["e"]}"#
        } else {
            ""
        };
        let body = if importer {
            format!(
                r#"{{"name":"s","op":"Mul","inputs":["c","{erf_in}"]}},
          {{"name":"e","op":"Erf","inputs":["s"]}},
          {{"name":"a","op":"Add","inputs":["one","e"]}},
          {{"name":"h","op":"Mul","inputs":["half","x"]}},
          {{"name":"y","op":"Mul","inputs":["a","h"]}}"#
            )
        } else {
            format!(
                r#"{{"name":"s","op":"Div","inputs":["{erf_in}","c"]}},
          {{"name":"e","op":"Erf","inputs":["s"]}},
          {{"name":"a","op":"Add","inputs":["e","one"]}},
          {{"name":"m","op":"Mul","inputs":["x","a"]}},
          {{"name":"y","op":"Mul","inputs":["m","half"]}}"#
            )
        };
        // torch writes √2 and 1/√2 rounded to f32: 1.4142135381698608, 0.7071067690849304.
        let c = if importer {
            0.7071067690849304
        } else {
            1.4142135381698608
        };
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
          {{"name":"x","op":"Input","attrs":{{"shape":[8],"dtype":"fp32"}}}},
          {{"name":"z","op":"Input","attrs":{{"shape":[8],"dtype":"fp32"}}}},
          {{"name":"c","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":{c}}}}},
          {{"name":"one","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":1.0}}}},
          {{"name":"half","op":"Constant","attrs":{{"shape":[1],"dtype":"fp32","value":{half}}}}},
          {body}{other}],
          "outputs":["y"{o}]}}"#,
            o = if extra { r#","o""# } else { "" }
        ))
        .unwrap()
    }

    #[test]
    fn exact_gelu_in_either_order_becomes_one_op_and_keeps_the_tail() {
        for importer in [false, true] {
            let c = crate::fusion::compile(&gelu_erf_graph(importer, 0.5, "x", false)).unwrap();
            let d = c
                .decisions
                .iter()
                .find(|d| d.rule == FusionRule::GeluErf)
                .expect("the rewrite fired");
            assert!(d.accepted && d.node == "y", "{d:?}");
            let g = &c.fused.graph;
            let gelu: Vec<_> = g
                .nodes
                .iter()
                .filter(|n| {
                    n.op == Op::Unary {
                        f: UnaryFn::GeluErf,
                    }
                })
                .collect();
            assert_eq!(gelu.len(), 1, "{:?}", g.nodes);
            assert_eq!(gelu[0].inputs, ["x"]);
            assert!(
                !g.nodes
                    .iter()
                    .any(|n| matches!(n.op, Op::Unary { f: UnaryFn::Erf })),
                "the composite's nodes are gone"
            );
            // Against x·Φ(x) = 0.5·x·erfc(−x/√2) in f64: relative 1e-5 where |y| > 1e-6, and
            // 8e-8 absolute below (the bound of both GeluErf implementations' far tails; at
            // x = −6 the true value is −5.92e-9). At x = −4, Φ = 3.17e-5 and the composite's
            // 1 + erf(−4/√2) keeps an absolute error of about half an ulp of 1 (3e-8), 0.1 %
            // of Φ: it fails the relative bound the rewritten op meets.
            let x = vec![-6.0f32, -4.0, -2.5, -0.5, 0.0, 1e-3, 0.7, 4.0];
            let ins: std::collections::HashMap<String, Vec<f32>> =
                [("x".to_string(), x.clone()), ("z".to_string(), x.clone())].into();
            for p in [&c.fused, &c.unfused] {
                let y = &crate::exec::execute(p, &ins).unwrap().outputs[0].2;
                for (&xv, &yv) in x.iter().zip(y) {
                    let xd = f64::from(xv);
                    let want = 0.5 * xd * libm::erfc(-xd * std::f64::consts::FRAC_1_SQRT_2);
                    let err = (f64::from(yv) - want).abs();
                    let tol = if !std::ptr::eq(p, &c.fused) {
                        // the composite, as written: absolute error about half an ulp of 1
                        2e-7 * xd.abs().max(1.0)
                    } else if want.abs() > 1e-6 {
                        1e-5 * want.abs()
                    } else {
                        8e-8
                    };
                    if xv == -4.0 && !std::ptr::eq(p, &c.fused) {
                        assert!(err > 1e-5 * want.abs(), "the composite cancels at −4");
                    }
                    assert!(
                        err <= tol,
                        "gelu({xv}) = {yv:e}, want {want:e} (importer form: {importer})"
                    );
                }
            }
        }
    }

    #[test]
    fn near_misses_of_exact_gelu_are_left_alone() {
        // 0.4 is not a half; the Erf reads z, not x; the Erf is read elsewhere.
        for g in [
            gelu_erf_graph(false, 0.4, "x", false),
            gelu_erf_graph(true, 0.5, "z", false),
            gelu_erf_graph(false, 0.5, "x", true),
            gelu_erf_graph(true, 0.5, "x", true),
        ] {
            let c = crate::fusion::compile(&g).unwrap();
            assert!(
                !c.decisions.iter().any(|d| d.rule == FusionRule::GeluErf),
                "{:?}",
                c.decisions
            );
            assert!(c
                .fused
                .graph
                .nodes
                .iter()
                .any(|n| matches!(n.op, Op::Unary { f: UnaryFn::Erf })));
        }
    }

    /// `y = Mul(Mul(a, 0.75), 2)`, `z = Mul(Mul(p, 0.5), Mul(q, 2))`, `w = Mul(Mul(a, 0.3),
    /// 0.7)` (no power of two), `v = Mul(Mul(a, 4), 0.25)` whose inner product `s` is also
    /// read by `o` when `shared`.
    fn scales(shared: bool) -> Graph {
        let other = if shared {
            r#",{"name":"o","op":"Exp","inputs":["s"]}"#
        } else {
            ""
        };
        let c = |n: &str, v: f64| {
            format!(
                r#"{{"name":"{n}","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":{v}}}}},"#
            )
        };
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
          {{"name":"a","op":"Input","attrs":{{"shape":[64],"dtype":"fp32"}}}},
          {{"name":"p","op":"Input","attrs":{{"shape":[64],"dtype":"fp32"}}}},
          {{"name":"q","op":"Input","attrs":{{"shape":[64],"dtype":"fp32"}}}},
          {}{}{}{}{}{}{}{}
          {{"name":"m","op":"Mul","inputs":["a","k075"]}},
          {{"name":"y","op":"Mul","inputs":["m","k2"]}},
          {{"name":"ph","op":"Mul","inputs":["khalf","p"]}},
          {{"name":"q2","op":"Mul","inputs":["q","k2b"]}},
          {{"name":"z","op":"Mul","inputs":["ph","q2"]}},
          {{"name":"n","op":"Mul","inputs":["a","k03"]}},
          {{"name":"w","op":"Mul","inputs":["n","k07"]}},
          {{"name":"s","op":"Mul","inputs":["a","k4"]}},
          {{"name":"v","op":"Mul","inputs":["k025","s"]}}{other}]}}"#,
            c("k075", 0.75),
            c("k2", 2.0),
            c("khalf", 0.5),
            c("k2b", 2.0),
            c("k03", 0.3),
            c("k07", 0.7),
            c("k4", 4.0),
            c("k025", 0.25),
        ))
        .unwrap()
    }

    #[test]
    fn power_of_two_scales_fold_to_the_same_floats() {
        let c = crate::fusion::compile(&scales(false)).unwrap();
        let folded: Vec<&str> = c
            .decisions
            .iter()
            .filter(|d| d.rule == FusionRule::PowerOfTwoScale && d.accepted)
            .map(|d| d.node.as_str())
            .collect();
        // w's constants are 0.3 and 0.7: neither a power of two, left alone.
        assert_eq!(folded, ["y", "z", "v"]);
        let g = &c.fused.graph;
        let node = |n: &str| g.nodes.iter().find(|x| x.name == n).unwrap();
        assert_eq!(node("y").inputs, ["a", "y::scale"]);
        // 0.75 · 2 = 1.5; 4 · 0.25 = 1.
        assert!(matches!(node("y::scale").op, Op::Constant { value, .. } if value == 1.5));
        assert!(matches!(node("v::scale").op, Op::Constant { value, .. } if value == 1.0));
        assert_eq!(node("z").inputs, ["p", "q"]);
        for gone in ["m", "ph", "q2", "s"] {
            assert!(!g.nodes.iter().any(|x| x.name == gone), "{gone} left");
        }
        assert!(g.nodes.iter().any(|x| x.name == "n"));
        // Bit for bit the unfolded graph's results, over normal-range values of both signs
        // and magnitudes from 2^-60 to 2^60.
        let mut rng = tensorforge_core::rng::SplitMix64::new(7);
        let mut vals = || -> Vec<f32> {
            (0..64)
                .map(|_| {
                    let m = 1.0 + rng.next_f64();
                    let e = (rng.next_f64() * 120.0 - 60.0).round() as i32;
                    let s = if rng.next_f64() < 0.5 { -1.0 } else { 1.0 };
                    (s * m * 2f64.powi(e)) as f32
                })
                .collect()
        };
        let ins: std::collections::HashMap<String, Vec<f32>> = [
            ("a".to_string(), vals()),
            ("p".to_string(), vals()),
            ("q".to_string(), vals()),
        ]
        .into();
        let fused = crate::exec::execute(&c.fused, &ins).unwrap().outputs;
        let unfused = crate::exec::execute(&c.unfused, &ins).unwrap().outputs;
        assert_eq!(fused.len(), 4);
        for ((name, _, f), (_, _, u)) in fused.iter().zip(&unfused) {
            let fb: Vec<u32> = f.iter().map(|v| v.to_bits()).collect();
            let ub: Vec<u32> = u.iter().map(|v| v.to_bits()).collect();
            assert_eq!(fb, ub, "{name}");
        }
    }

    #[test]
    fn a_scaled_product_read_elsewhere_is_not_folded() {
        let c = crate::fusion::compile(&scales(true)).unwrap();
        assert!(!c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::PowerOfTwoScale && d.node == "v"));
    }

    #[test]
    fn gelu_tanh_loses_its_half_and_twos() {
        // After tanh_plus_one: (0.5·x)·(2·σ(2·(0.79788·r))) -> x·σ(1.59577·r).
        let c = crate::fusion::compile(&gelu_tanh(false)).unwrap();
        let g = &c.fused.graph;
        let value = |t: &str| {
            g.nodes
                .iter()
                .find(|n| n.name == t)
                .and_then(|n| match n.op {
                    Op::Constant { value, .. } => Some(value),
                    _ => None,
                })
        };
        for n in &g.nodes {
            if matches!(n.op, Op::Binary { f: BinaryFn::Mul }) {
                for t in &n.inputs {
                    assert!(
                        !matches!(value(t), Some(v) if v == 0.5 || v == 2.0),
                        "{} still multiplies by {t}",
                        n.name
                    );
                }
            }
        }
        let y = g.nodes.iter().find(|n| n.name == "y").unwrap();
        assert_eq!(y.inputs, ["x", "a::sigmoid"]);
    }

    #[test]
    fn a_tanh_read_elsewhere_stays() {
        let c = crate::fusion::compile(&gelu_tanh(true)).unwrap();
        assert!(!c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::TanhPlusOne));
    }

    #[test]
    fn other_wheres_are_left_alone() {
        // The value guarded is not the softmax; the fill is not 0.
        for g in [guarded("e", 0.0), guarded("s", -1.0)] {
            let c = crate::fusion::compile(&g).unwrap();
            assert!(!c
                .decisions
                .iter()
                .any(|d| d.rule == FusionRule::SoftmaxNanGuard));
        }
    }

    #[test]
    fn numerics_rewrites_fire_and_show_overflow() {
        let text = r#"{"nodes":[
          {"name":"a","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"b","op":"Input","attrs":{"shape":[4],"dtype":"fp32"}},
          {"name":"ea","op":"Exp","inputs":["a"]},
          {"name":"eb","op":"Exp","inputs":["b"]},
          {"name":"s","op":"Add","inputs":["ea","eb"]},
          {"name":"y","op":"Log","inputs":["s"]}]}"#;
        let tg = Graph::from_json_str(text).unwrap().validate().unwrap();
        let (g, d) = rewrite(&tg).unwrap();
        assert_eq!(g.nodes.len(), 3, "Exp, Exp, Add dropped: {:?}", g.nodes);
        assert!(d[0].accepted && d[0].reason.contains("inf"), "{:?}", d);
        assert!(g.nodes.iter().any(|n| n.op
            == Op::Binary {
                f: BinaryFn::LogAddExp
            }));
        assert!(overflow_demo(FusionRule::Softmax).contains("NaN"));
        assert!(overflow_demo(FusionRule::Logsumexp).contains("100.693"));
    }

    /// An attention over `heads` heads of `seq` positions: q, k, v inputs `[1, heads, seq,
    /// 8]`, kᵀ as a Transpose of k, scores · 0.125, plus a `[1, 1, seq, seq]` mask input,
    /// Softmax, optionally PyTorch's NaN guard, then · v.
    fn attention_graph(heads: usize, seq: usize, guard: bool) -> Graph {
        let sh = format!("[1,{heads},{seq},8]");
        let p = if guard {
            r#"{"name":"nan","op":"IsNaN","inputs":["sm"]},
               {"name":"z","op":"Constant","attrs":{"shape":[],"dtype":"fp32","value":0.0}},
               {"name":"p","op":"Where","inputs":["nan","z","sm"]},"#
        } else {
            r#"{"name":"p","op":"Neg","inputs":["nsm"]},
               {"name":"nsm","op":"Neg","inputs":["sm"]},"#
        };
        Graph::from_json_str(&format!(
            r#"{{"schema_version":1,"name":"attn","nodes":[
              {{"name":"q","op":"Input","attrs":{{"shape":{sh},"dtype":"fp32"}}}},
              {{"name":"k","op":"Input","attrs":{{"shape":{sh},"dtype":"fp32"}}}},
              {{"name":"v","op":"Input","attrs":{{"shape":{sh},"dtype":"fp32"}}}},
              {{"name":"mask","op":"Input","attrs":{{"shape":[1,1,{seq},{seq}],"dtype":"fp32"}}}},
              {{"name":"kt","op":"Transpose","attrs":{{"perm":[0,1,3,2]}},"inputs":["k"]}},
              {{"name":"s","op":"MatMul","inputs":["q","kt"]}},
              {{"name":"c","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.125}}}},
              {{"name":"ss","op":"Mul","inputs":["s","c"]}},
              {{"name":"sm_in","op":"Add","inputs":["ss","mask"]}},
              {{"name":"sm","op":"Softmax","attrs":{{"axis":-1}},"inputs":["sm_in"]}},
              {p}
              {{"name":"y","op":"MatMul","inputs":["p","v"]}}
            ],"outputs":["y"]}}"#
        ))
        .unwrap()
    }

    /// The attention pattern's first decision.
    fn attention_decision(c: &crate::fusion::Compiled) -> &Decision {
        c.decisions
            .iter()
            .find(|d| d.rule == FusionRule::Attention)
            .expect("an attention decision")
    }

    #[test]
    fn a_long_attention_streams_without_its_scores() {
        // 1024 × 1024 scores per head (the threshold): one FusedAttention replaces both
        // MatMuls, the scale, the mask Add and the softmax, and agrees with the unfused
        // program. Causal mask (−∞ above the diagonal) so the running max matters; with the
        // NaN guard, row 0 of a mask that also hides key 0 is fully masked and gives 0.
        let seq = 1024;
        for guard in [false, true] {
            let g = attention_graph(2, seq, guard);
            let c = crate::fusion::compile(&g).unwrap();
            let fa: Vec<_> = c
                .fused
                .graph
                .nodes
                .iter()
                .filter(|n| matches!(n.op, Op::FusedAttention { .. }))
                .collect();
            if !guard {
                // The two Negs between the softmax and the product break the pattern.
                assert!(fa.is_empty());
                continue;
            }
            assert_eq!(
                fa.len(),
                1,
                "{:?}",
                c.decisions
                    .iter()
                    .filter(|d| d.rule == FusionRule::Attention)
                    .collect::<Vec<_>>()
            );
            assert!(matches!(
                fa[0].op,
                Op::FusedAttention { scale, zero_masked_rows: true } if scale == 0.125
            ));
            assert!(!c
                .fused
                .graph
                .nodes
                .iter()
                .any(|n| matches!(n.op, Op::Softmax { .. })));
            let d = attention_decision(&c);
            assert!(
                d.accepted && d.reason.contains("1024 x 1024"),
                "{}",
                d.reason
            );
            let mut ins = std::collections::HashMap::new();
            crate::exec::fill_inputs(&c.unfused.graph, &mut ins, 5).unwrap();
            let mut mask = vec![0f32; seq * seq];
            for i in 0..seq {
                for j in 0..seq {
                    if j > i || j == 0 {
                        mask[i * seq + j] = f32::NEG_INFINITY;
                    }
                }
            }
            ins.insert("mask".into(), mask);
            let a = crate::exec::execute(&c.fused, &ins).unwrap();
            let b = crate::exec::execute(&c.unfused, &ins).unwrap();
            let (ya, yb) = (&a.outputs[0].2, &b.outputs[0].2);
            let scale = yb.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (i, (x, y)) in ya.iter().zip(yb).enumerate() {
                assert!((x - y).abs() <= 1e-5 * scale, "{i}: {x} vs {y}");
            }
            // Row 0 of each head: every key masked, 0 through the guard.
            for h in 0..2 {
                assert!(ya[h * seq * 8..h * seq * 8 + 8].iter().all(|&v| v == 0.0));
            }
        }
    }

    /// Attention scores as PyTorch's export of `scaled_dot_product_attention` writes them:
    /// `Mul(Transpose(q), c) · Mul(Transpose(k), c)`, with `q_op` applied to `q` first
    /// ("" for none, or an op such as "Neg" that makes the query's scale free where it is),
    /// the query's scaled tensor also a graph output when `q_out`, and `kc_shape` the key
    /// scale's constant shape.
    fn scaled_scores_graph(q_op: &str, q_out: bool, kc_shape: &str) -> Graph {
        let (q_src, extra) = if q_op.is_empty() {
            ("qt", String::new())
        } else {
            (
                "qn",
                format!(r#"{{"name":"qn","op":"{q_op}","inputs":["qt"]}},"#),
            )
        };
        let outs = if q_out { r#"["s","qs"]"# } else { r#"["s"]"# };
        Graph::from_json_str(&format!(
            r#"{{"schema_version":1,"name":"scores","nodes":[
              {{"name":"q","op":"Input","attrs":{{"shape":[1,6,2,8],"dtype":"fp32"}}}},
              {{"name":"k","op":"Input","attrs":{{"shape":[1,2,6,8],"dtype":"fp32"}}}},
              {{"name":"qt","op":"Transpose","attrs":{{"perm":[0,2,1,3]}},"inputs":["q"]}},
              {extra}
              {{"name":"cq","op":"Constant","attrs":{{"shape":[],"dtype":"fp32","value":0.35355338}}}},
              {{"name":"qs","op":"Mul","inputs":["{q_src}","cq"]}},
              {{"name":"kt","op":"Transpose","attrs":{{"perm":[0,1,3,2]}},"inputs":["k"]}},
              {{"name":"ck","op":"Constant","attrs":{{"shape":{kc_shape},"dtype":"fp32","value":0.35355338}}}},
              {{"name":"ks","op":"Mul","inputs":["ck","kt"]}},
              {{"name":"s","op":"MatMul","inputs":["qs","ks"]}}
            ],"outputs":{outs}}}"#
        ))
        .unwrap()
    }

    /// The fused and unfused programs of `c` on seeded inputs: the largest difference of
    /// output 0 relative to its largest magnitude.
    fn fused_vs_unfused(c: &crate::fusion::Compiled) -> f32 {
        let mut ins = std::collections::HashMap::new();
        crate::exec::fill_inputs(&c.unfused.graph, &mut ins, 11).unwrap();
        let a = crate::exec::execute(&c.fused, &ins).unwrap();
        let b = crate::exec::execute(&c.unfused, &ins).unwrap();
        let (ya, yb) = (&a.outputs[0].2, &b.outputs[0].2);
        assert_eq!(ya.len(), 2 * 6 * 6);
        let scale = yb.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0);
        ya.iter()
            .zip(yb)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
            / scale
    }

    /// `x → Pad → Conv2d` with the given Pad (`pads`, `mode`, `value`), the convolution's
    /// own pads `[0, 1, 0, 1]`, stride 2.
    fn padded_conv_graph(pads: &str, mode: &str, value: f64) -> Graph {
        Graph::from_json_str(&format!(
            r#"{{"nodes":[
              {{"name":"x","op":"Input","attrs":{{"shape":[1,2,6,7],"dtype":"fp32"}}}},
              {{"name":"w","op":"Weight","attrs":{{"shape":[3,2,3,3],"dtype":"fp32"}}}},
              {{"name":"xp","op":"Pad","inputs":["x"],"attrs":{{"pads":{pads},"mode":"{mode}","value":{value:?}}}}},
              {{"name":"y","op":"Conv2d","inputs":["xp","w"],"attrs":{{"strides":[2,2],"pads":[0,1,0,1],"dilations":[1,1],"group":1}}}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_zero_pad_of_the_spatial_axes_becomes_the_convolutions_own() {
        let run = |c: &crate::fusion::Compiled| {
            let mut ins = std::collections::HashMap::new();
            crate::exec::fill_inputs(&c.unfused.graph, &mut ins, 5).unwrap();
            let a = crate::exec::execute(&c.fused, &ins).unwrap();
            let b = crate::exec::execute(&c.unfused, &ins).unwrap();
            assert_eq!(a.outputs[0].1, b.outputs[0].1);
            // Exact: the padded positions are zeros either way.
            assert_eq!(a.outputs[0].2, b.outputs[0].2);
        };
        // Pads top 1, left 0, bottom 2, right 1 added to the convolution's [0, 1, 0, 1]:
        // [top 0+1, left 1+0, bottom 0+2, right 1+1] = [1, 1, 2, 2].
        let c = crate::fusion::compile(&padded_conv_graph("[0,0,1,0,0,0,2,1]", "constant", 0.0))
            .unwrap();
        let conv = c.fused.graph.nodes.iter().find(|n| n.name == "y").unwrap();
        assert!(matches!(&conv.op, Op::Conv2d { pads, .. } if pads == &[1, 1, 2, 2]));
        assert_eq!(conv.inputs[0], "x");
        assert!(!c.fused.graph.nodes.iter().any(|n| n.name == "xp"));
        assert!(c
            .decisions
            .iter()
            .any(|d| d.rule == FusionRule::PadIntoConv && d.accepted && d.node == "y"));
        run(&c);
        // Left alone: a pad of the batch axis, a non-zero fill, a mirror pad, a crop.
        for (pads, mode, value) in [
            ("[1,0,0,0,0,0,0,0]", "constant", 0.0),
            ("[0,0,1,1,0,0,1,1]", "constant", 0.5),
            ("[0,0,1,1,0,0,1,1]", "reflect", 0.0),
            ("[0,0,-1,0,0,0,1,1]", "constant", 0.0),
        ] {
            let c = crate::fusion::compile(&padded_conv_graph(pads, mode, value)).unwrap();
            assert!(
                c.fused.graph.nodes.iter().any(|n| n.name == "xp"),
                "{pads} {mode} {value}"
            );
            assert!(!c
                .decisions
                .iter()
                .any(|d| d.rule == FusionRule::PadIntoConv));
            run(&c);
        }
    }

    #[test]
    fn scales_on_both_operands_move_after_the_product() {
        let c = crate::fusion::compile(&scaled_scores_graph("", false, "[]")).unwrap();
        let d: Vec<_> = c
            .decisions
            .iter()
            .filter(|d| d.rule == FusionRule::ScaleAfterProduct)
            .collect();
        assert_eq!(d.len(), 1);
        assert!(d[0].accepted && d[0].node == "s");
        assert!(d[0].reason.contains("qs = qt") && d[0].reason.contains("ks = kt"));
        let g = &c.fused.graph;
        // Neither operand's Mul is left: the product reads the Transposes, and one Mul
        // by 0.35355338² (the f32 product, rounded once) writes `s`.
        assert!(!g.nodes.iter().any(|n| n.name == "qs" || n.name == "ks"));
        let want = 0.35355338f32 * 0.35355338f32;
        let scale = g.nodes.iter().find(|n| n.name == "s::scale").unwrap();
        assert!(matches!(scale.op, Op::Constant { value, .. } if value == want as f64));
        let mul = g.nodes.iter().find(|n| n.name == "s::rescale").unwrap();
        assert_eq!(mul.output_names(), ["s"]);
        assert_eq!(mul.inputs, ["s::unscaled", "s::scale"]);
        // Rounding once instead of twice: each score differs by a few f32 ulps at most
        // (8 products of |q·k| ≤ 1 per score; 1e-6 of the largest is ~8 ulps of it).
        let err = fused_vs_unfused(&c);
        assert!(err <= 1e-6, "{err}");
    }

    #[test]
    fn scales_that_cost_nothing_or_are_read_elsewhere_stay() {
        let moved = |g: &Graph| -> Vec<String> {
            let c = crate::fusion::compile(g).unwrap();
            assert!(fused_vs_unfused(&c) <= 1e-6);
            c.decisions
                .iter()
                .filter(|d| d.rule == FusionRule::ScaleAfterProduct && d.accepted)
                .map(|d| d.reason.clone())
                .collect()
        };
        // (query op, scaled query an output, key scale shape, the side that moves, the one
        // that stays): the query's Mul joins the Neg's kernel for free; a scaled query that is
        // also a graph output stays; a key scale of 6 values (one per column of kᵀ, [1, 2, 8,
        // 6]) is not a scalar and stays.
        for (q_op, q_out, kc, moves, stays) in [
            ("Neg", false, "[]", "ks = kt", "qs ="),
            ("", true, "[]", "ks = kt", "qs ="),
            ("", false, "[6]", "qs = qt", "ks ="),
        ] {
            let r = moved(&scaled_scores_graph(q_op, q_out, kc));
            assert_eq!(r.len(), 1);
            assert!(r[0].contains(moves) && !r[0].contains(stays), "{}", r[0]);
        }
        // Both kept: nothing to move, no decision.
        assert!(moved(&scaled_scores_graph("Neg", false, "[6]")).is_empty());
    }

    #[test]
    fn a_short_attention_keeps_its_kernels_and_says_why() {
        let c = crate::fusion::compile(&attention_graph(2, 128, true)).unwrap();
        assert!(!c
            .fused
            .graph
            .nodes
            .iter()
            .any(|n| matches!(n.op, Op::FusedAttention { .. })));
        let d = attention_decision(&c);
        assert!(
            !d.accepted && d.reason.contains("128 x 128"),
            "{}",
            d.reason
        );
    }
}
