//! `tensorforge analyze gemm|conv2d|transformer|model`.

use super::{parse_pe, print_json, HwArgs};
use crate::render;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use tensorforge_core::conv::{analyze_conv2d, conv2d_preset, Conv2d};
use tensorforge_core::gemm::QuantGroups;
use tensorforge_core::transformer::{
    analyze_model, analyze_transformer, decoder_from_hf_config, transformer_preset,
    AttentionKernel, DecoderModel, LmHeadTokens, MlaForm, MlpKind, NormKind, Phase, Routing,
    TransformerBlock,
};
use tensorforge_core::{
    analyze_gemm, presets, DType, Dataflow, Gemm, GemmOptions, HardwareSpec, PeArray, Tile,
};

/// Arguments of `analyze`.
#[derive(Args, Debug)]
pub struct AnalyzeArgs {
    #[command(subcommand)]
    kind: AnalyzeKind,
}

#[derive(Subcommand, Debug)]
enum AnalyzeKind {
    /// A (batched) GEMM: C[M×N] = A[M×K] · B[K×N].
    Gemm(GemmArgs),
    /// A 2-D convolution, lowered to GEMM (implicit-GEMM and materialized-im2col traffic).
    Conv2d(ConvArgs),
    /// One transformer block: named GEMMs plus norms, softmax, activation, residuals, rotary.
    Transformer(TransformerArgs),
    /// A whole decoder model: layers × block + embedding + LM head (flags or a HF config.json).
    Model(ModelArgs),
}

/// PE-array, SRAM and tile options shared by GEMM-shaped analyses.
#[derive(Args, Debug, Clone, Default)]
pub struct MappingArgs {
    /// PE array ROWSxCOLS overriding the chip's (keeps its clock unless --clock-hz).
    #[arg(long, value_name = "RxC")]
    pub pe: Option<String>,
    /// Clock in Hz for --pe when the chip has no PE array.
    #[arg(long)]
    pub clock_hz: Option<f64>,
    /// On-chip SRAM capacity in bytes for the fit check (default: the chip's tile buffer).
    #[arg(long)]
    pub sram_bytes: Option<u64>,
    /// Tile TMxTNxTK: computes DRAM traffic of every loop order.
    #[arg(long, value_name = "TMxTNxTK")]
    pub tile: Option<String>,
    /// Dataflow of the primary PE mapping: output-stationary (default), weight-stationary, input-stationary.
    #[arg(long)]
    pub dataflow: Option<String>,
    /// Add a systolic fill/drain term of rows + cols − 2 cycles per fold.
    #[arg(long)]
    pub fill_drain: bool,
}

impl MappingArgs {
    /// Convert to Core options for `hw`.
    pub fn options(&self, hw: &HardwareSpec) -> Result<GemmOptions> {
        let pe = match &self.pe {
            None => None,
            Some(s) => Some(pe_override(s, self.clock_hz, hw)?),
        };
        if let Some(c) = self.clock_hz {
            if !(c.is_finite() && c > 0.0) {
                bail!("invalid value for `--clock-hz`: {c} (must be positive and finite)");
            }
        }
        if self.sram_bytes == Some(0) {
            bail!("invalid value for `--sram-bytes`: 0 (must be at least 1)");
        }
        Ok(GemmOptions {
            pe,
            sram_bytes: self.sram_bytes,
            tile: self.tile.as_deref().map(Tile::parse).transpose()?,
            dataflow: self.dataflow.as_deref().map(Dataflow::parse).transpose()?,
            fill_drain: self.fill_drain,
        })
    }
}

/// A PE array of `spec` (ROWSxCOLS) using the chip's clock and MACs/PE/cycle, or `clock_hz`.
pub fn pe_override(spec: &str, clock_hz: Option<f64>, hw: &HardwareSpec) -> Result<PeArray> {
    let (rows, cols) = parse_pe(spec)?;
    Ok(PeArray::resized(hw, rows, cols, clock_hz)?)
}

/// GEMM shape from a preset or from flags.
#[derive(Args, Debug, Clone)]
pub struct GemmShapeArgs {
    /// GEMM preset (see `tensorforge workloads list`).
    #[arg(long, conflicts_with_all = ["m", "n", "k"])]
    pub preset: Option<String>,
    /// Rows of A and C.
    #[arg(long)]
    pub m: Option<u64>,
    /// Columns of B and C.
    #[arg(long)]
    pub n: Option<u64>,
    /// Reduction dimension.
    #[arg(long)]
    pub k: Option<u64>,
    /// Independent GEMMs in the batch.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Element type: fp32, tf32, bf16, fp16, fp8, int8, int4 (default fp16).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Accumulate into C (C += A·B): C is read once more.
    #[arg(long)]
    pub accumulate: bool,
}

impl GemmShapeArgs {
    /// Build the validated GEMM.
    pub fn gemm(&self) -> Result<Gemm> {
        let mut g = match (&self.preset, self.m, self.n, self.k) {
            (Some(p), ..) => presets::gemm(p)?,
            (None, Some(m), Some(n), Some(k)) => Gemm {
                m,
                n,
                k,
                batch: 1,
                dtype: DType::Fp16,
                accumulate: false,
            },
            _ => bail!(
                "missing {}: give either --preset NAME or all of --m, --n and --k",
                missing(&[
                    ("--m", self.m.is_some()),
                    ("--n", self.n.is_some()),
                    ("--k", self.k.is_some()),
                ])
            ),
        };
        if let Some(b) = self.batch {
            g.batch = b;
        }
        if let Some(d) = &self.dtype {
            g.dtype = DType::parse(d)?;
        }
        g.accumulate |= self.accumulate;
        g.validate()?;
        Ok(g)
    }
}

#[derive(Args, Debug)]
struct GemmArgs {
    #[command(flatten)]
    shape: GemmShapeArgs,
    #[command(flatten)]
    hw: HwArgs,
    #[command(flatten)]
    mapping: MappingArgs,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

/// Parse `V` or `VHxVW` into (h, w).
/// The flags of `flags` not given (`false`), as `--n and --k` or `--a, --b and --c`.
fn missing(flags: &[(&str, bool)]) -> String {
    let absent: Vec<&str> = flags
        .iter()
        .filter(|(_, given)| !given)
        .map(|(name, _)| *name)
        .collect();
    match absent.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn pair(s: &str, flag: &str) -> Result<(u64, u64)> {
    let parts: Vec<&str> = s.split(['x', 'X', '×']).collect();
    let p = |t: &str| t.trim().parse::<u64>();
    match parts.as_slice() {
        [v] => {
            if let Ok(v) = p(v) {
                return Ok((v, v));
            }
        }
        [h, w] => {
            if let (Ok(h), Ok(w)) = (p(h), p(w)) {
                return Ok((h, w));
            }
        }
        _ => {}
    }
    bail!("invalid value for `{flag}`: `{s}` (expected N or HxW with non-negative integers)")
}

/// Convolution shape from a preset or flags (flags override a preset).
#[derive(Args, Debug, Clone)]
pub struct ConvShapeArgs {
    /// Conv2D preset (see `tensorforge workloads list`).
    #[arg(long)]
    pub preset: Option<String>,
    /// Batch size.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Input channels.
    #[arg(long)]
    pub cin: Option<u64>,
    /// Output channels.
    #[arg(long)]
    pub cout: Option<u64>,
    /// Input height.
    #[arg(long)]
    pub height: Option<u64>,
    /// Input width.
    #[arg(long)]
    pub width: Option<u64>,
    /// Kernel size: K or KHxKW.
    #[arg(long)]
    pub kernel: Option<String>,
    /// Stride: S or SHxSW.
    #[arg(long)]
    pub stride: Option<String>,
    /// Zero padding per side: P or PHxPW.
    #[arg(long)]
    pub pad: Option<String>,
    /// Dilation: D or DHxDW.
    #[arg(long)]
    pub dilation: Option<String>,
    /// Channel groups (Cin = Cout = groups is depthwise).
    #[arg(long)]
    pub groups: Option<u64>,
    /// Element type (default fp16).
    #[arg(long)]
    pub dtype: Option<String>,
}

impl ConvShapeArgs {
    /// Build the validated convolution.
    pub fn conv(&self) -> Result<Conv2d> {
        let mut c = match &self.preset {
            Some(p) => conv2d_preset(p)?,
            None => {
                let (Some(cin), Some(cout), Some(h), Some(w), Some(k)) =
                    (self.cin, self.cout, self.height, self.width, &self.kernel)
                else {
                    bail!(
                        "missing {}: give either --preset NAME or all of --cin, --cout, --height, --width and --kernel",
                        missing(&[
                            ("--cin", self.cin.is_some()),
                            ("--cout", self.cout.is_some()),
                            ("--height", self.height.is_some()),
                            ("--width", self.width.is_some()),
                            ("--kernel", self.kernel.is_some()),
                        ])
                    );
                };
                let (kh, kw) = pair(k, "--kernel")?;
                Conv2d::new(cin, cout, h, w, kh, kw)
            }
        };
        if self.preset.is_some() {
            if let Some(v) = self.cin {
                c.in_channels = v;
            }
            if let Some(v) = self.cout {
                c.out_channels = v;
            }
            if let Some(v) = self.height {
                c.height = v;
            }
            if let Some(v) = self.width {
                c.width = v;
            }
            if let Some(k) = &self.kernel {
                (c.kernel_h, c.kernel_w) = pair(k, "--kernel")?;
            }
        }
        if let Some(v) = self.batch {
            c.batch = v;
        }
        if let Some(s) = &self.stride {
            (c.stride_h, c.stride_w) = pair(s, "--stride")?;
        }
        if let Some(s) = &self.pad {
            (c.pad_h, c.pad_w) = pair(s, "--pad")?;
        }
        if let Some(s) = &self.dilation {
            (c.dilation_h, c.dilation_w) = pair(s, "--dilation")?;
        }
        if let Some(g) = self.groups {
            c.groups = g;
        }
        if let Some(d) = &self.dtype {
            c.dtype = DType::parse(d)?;
        }
        c.validate()?;
        Ok(c)
    }
}

#[derive(Args, Debug)]
struct ConvArgs {
    #[command(flatten)]
    shape: ConvShapeArgs,
    #[command(flatten)]
    hw: HwArgs,
    #[command(flatten)]
    mapping: MappingArgs,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

/// Transformer block shape from a preset or flags (flags override a preset).
#[derive(Args, Debug, Clone)]
pub struct BlockArgs {
    /// Transformer preset (see `tensorforge workloads list`).
    #[arg(long)]
    pub preset: Option<String>,
    /// How attention runs: materialized (scores and probabilities cross DRAM, the default)
    /// or fused (flash attention: they stay on chip).
    #[arg(long, value_parser = ["materialized", "fused"])]
    pub attention_kernel: Option<String>,
    /// Storage dtype of the weights when narrower than --dtype (weight-only quantization,
    /// e.g. int4, int8, fp8); arithmetic stays at --dtype.
    #[arg(long)]
    pub weight_dtype: Option<String>,
    /// Weight-only quantization groups: one fp16 scale per N weights along each matrix's
    /// input dimension, counted in the weight bytes (GPTQ and AWQ: 128; needs --weight-dtype).
    #[arg(long, value_name = "N")]
    pub group_size: Option<u64>,
    /// With --group-size: a zero point per group too, at the weight dtype's width
    /// (asymmetric quantization, GPTQ's and AWQ's packed zeros).
    #[arg(long, requires = "group_size")]
    pub zero_points: bool,
    /// Storage dtype of the KV cache (default: --dtype).
    #[arg(long)]
    pub kv_dtype: Option<String>,
    /// Sequences in the batch.
    #[arg(long)]
    pub batch: Option<u64>,
    /// New tokens per sequence in prefill (ignored in decode: one token).
    #[arg(long)]
    pub seq: Option<u64>,
    /// Model width D.
    #[arg(long)]
    pub d_model: Option<u64>,
    /// Query heads H.
    #[arg(long)]
    pub heads: Option<u64>,
    /// Key/value heads (H = MHA, 1 = MQA, between = GQA); default H.
    #[arg(long)]
    pub kv_heads: Option<u64>,
    /// Head dimension; default D / H.
    #[arg(long)]
    pub head_dim: Option<u64>,
    /// MLP hidden width F.
    #[arg(long)]
    pub d_ff: Option<u64>,
    /// MLP kind: gelu (2 matrices) or swiglu (3 matrices).
    #[arg(long)]
    pub mlp: Option<String>,
    /// Norm kind: layernorm or rmsnorm.
    #[arg(long)]
    pub norm: Option<String>,
    /// Attention is not causal (default: causal).
    #[arg(long)]
    pub no_causal: bool,
    /// prefill (default) or decode.
    #[arg(long)]
    pub phase: Option<String>,
    /// Tokens already in the KV cache.
    #[arg(long)]
    pub kv_cache_len: Option<u64>,
    /// Element type (default fp16).
    #[arg(long)]
    pub dtype: Option<String>,
}

fn parse_mlp(s: &str) -> Result<MlpKind> {
    MlpKind::parse(s).map_err(|e| anyhow::anyhow!("invalid value for `--mlp`: {e}"))
}

fn parse_norm(s: &str) -> Result<NormKind> {
    NormKind::parse(s).map_err(|e| anyhow::anyhow!("invalid value for `--norm`: {e}"))
}

fn parse_phase(s: &str) -> Result<Phase> {
    Phase::parse(s).map_err(|e| anyhow::anyhow!("invalid value for `--phase`: {e}"))
}

impl BlockArgs {
    /// Apply the run-time fields (batch, seq, phase, cache, dtype) to `b`.
    fn apply_runtime(&self, b: &mut TransformerBlock) -> Result<()> {
        if let Some(v) = self.batch {
            b.batch = v;
        }
        if let Some(v) = self.seq {
            b.seq_len = v;
        }
        if let Some(p) = &self.phase {
            b.phase = parse_phase(p)?;
        }
        if let Some(v) = self.kv_cache_len {
            b.kv_cache_len = v;
        }
        if let Some(d) = &self.dtype {
            b.dtype = DType::parse(d)?;
        }
        if self.no_causal {
            b.causal = false;
        }
        self.apply_storage(b)
    }

    /// Attention kernel and storage dtypes (after the block's own fields).
    fn apply_storage(&self, b: &mut TransformerBlock) -> Result<()> {
        if let Some(k) = &self.attention_kernel {
            b.attention_kernel = parse_attention_kernel(k);
        }
        if let Some(d) = &self.weight_dtype {
            b.weight_dtype = Some(DType::parse(d)?);
        }
        if let Some(size) = self.group_size {
            b.weight_groups = Some(QuantGroups {
                size,
                zero_points: self.zero_points,
            });
        }
        if let Some(d) = &self.kv_dtype {
            b.kv_dtype = Some(DType::parse(d)?);
        }
        Ok(())
    }

    /// Apply the architecture fields (widths, heads, kinds) to `b`.
    fn apply_arch(&self, b: &mut TransformerBlock) -> Result<()> {
        if let Some(v) = self.d_model {
            b.d_model = v;
        }
        if let Some(v) = self.heads {
            b.heads = v;
        }
        if self.kv_heads.is_some() {
            b.kv_heads = self.kv_heads;
        }
        if self.head_dim.is_some() {
            b.head_dim = self.head_dim;
        }
        if let Some(v) = self.d_ff {
            b.d_ff = v;
        }
        if let Some(m) = &self.mlp {
            b.mlp = parse_mlp(m)?;
        }
        if let Some(n) = &self.norm {
            b.norm = parse_norm(n)?;
        }
        Ok(())
    }

    /// Build the validated block.
    pub fn block(&self) -> Result<TransformerBlock> {
        let mut b = match &self.preset {
            Some(p) => transformer_preset(p)?,
            None => {
                let seq = self.seq.or(if self.phase.as_deref() == Some("decode") {
                    Some(1)
                } else {
                    None
                });
                let (Some(seq), Some(d), Some(h), Some(f)) =
                    (seq, self.d_model, self.heads, self.d_ff)
                else {
                    bail!(
                        "missing {}: give either --preset NAME or all of --seq, --d-model, --heads and --d-ff",
                        missing(&[
                            ("--seq", seq.is_some()),
                            ("--d-model", self.d_model.is_some()),
                            ("--heads", self.heads.is_some()),
                            ("--d-ff", self.d_ff.is_some()),
                        ])
                    );
                };
                TransformerBlock::new(seq, d, h, f)
            }
        };
        self.apply_arch(&mut b)?;
        self.apply_runtime(&mut b)?;
        b.validate()?;
        Ok(b)
    }
}

fn parse_attention_kernel(k: &str) -> AttentionKernel {
    if k == "fused" {
        AttentionKernel::Fused
    } else {
        AttentionKernel::Materialized
    }
}

#[derive(Args, Debug)]
struct TransformerArgs {
    #[command(flatten)]
    block: BlockArgs,
    #[command(flatten)]
    hw: HwArgs,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ModelArgs {
    /// A Hugging Face config.json (read offline); block flags then override run-time fields.
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// Decoder layers (without --config).
    #[arg(long)]
    layers: Option<u64>,
    /// Vocabulary size (without --config).
    #[arg(long)]
    vocab_size: Option<u64>,
    /// The LM head shares the embedding matrix (without --config).
    #[arg(long)]
    tie_embeddings: bool,
    /// Tokens the LM head projects: last (default in prefill) or all.
    #[arg(long)]
    lm_head_tokens: Option<String>,
    /// Latent attention's form (models with kv_lora_rank): naive (up-project every cached
    /// latent, the default) or absorbed (attend over the latents).
    #[arg(long, value_parser = ["naive", "absorbed"])]
    mla_form: Option<String>,
    /// Distinct experts a batch touches (mixture-of-experts models): expected (uniform
    /// routing, the default) or worst_case (min(E, T·k)).
    #[arg(long, value_parser = ["expected", "worst_case"])]
    routing: Option<String>,
    #[command(flatten)]
    block: BlockArgs,
    #[command(flatten)]
    hw: HwArgs,
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
}

impl ModelArgs {
    fn model(&self) -> Result<DecoderModel> {
        let mut m = match &self.config {
            Some(path) => {
                if self.block.preset.is_some() {
                    bail!("--config and --preset cannot be combined");
                }
                let text = super::read_text(path)?;
                let phase = self
                    .block
                    .phase
                    .as_deref()
                    .map(parse_phase)
                    .transpose()?
                    .unwrap_or(Phase::Prefill);
                let seq = match (self.block.seq, phase) {
                    (Some(s), _) => s,
                    (None, Phase::Decode) => 1,
                    (None, Phase::Prefill) => bail!("--seq is required with --config in prefill"),
                };
                let dtype = self
                    .block
                    .dtype
                    .as_deref()
                    .map(DType::parse)
                    .transpose()?
                    .unwrap_or(DType::Fp16);
                let mut m = decoder_from_hf_config(
                    &text,
                    path,
                    self.block.batch.unwrap_or(1),
                    seq,
                    phase,
                    self.block.kv_cache_len.unwrap_or(0),
                    dtype,
                )?;
                if self.block.no_causal {
                    m.block.causal = false;
                }
                m
            }
            None => {
                let (Some(layers), Some(vocab)) = (self.layers, self.vocab_size) else {
                    bail!("give either --config FILE or --layers and --vocab-size with the block flags (or --preset)");
                };
                DecoderModel {
                    name: String::new(),
                    block: self.block.block()?,
                    layers,
                    vocab_size: vocab,
                    tie_word_embeddings: self.tie_embeddings,
                    lm_head_tokens: LmHeadTokens::Last,
                    first_dense_layers: 0,
                    notes: vec![],
                }
            }
        };
        self.block.apply_storage(&mut m.block)?;
        if let Some(f) = &self.mla_form {
            let Some(mla) = m.block.mla.as_mut() else {
                bail!(
                    "--mla-form needs a model with latent attention (kv_lora_rank in its config)"
                );
            };
            mla.form = if f == "absorbed" {
                MlaForm::Absorbed
            } else {
                MlaForm::Naive
            };
        }
        if let Some(r) = &self.routing {
            let Some(moe) = m.block.moe.as_mut() else {
                bail!("--routing needs a mixture-of-experts model");
            };
            moe.routing = if r == "worst_case" {
                Routing::WorstCase
            } else {
                Routing::Expected
            };
        }
        if let Some(t) = &self.lm_head_tokens {
            m.lm_head_tokens = match t.trim().to_ascii_lowercase().as_str() {
                "all" => LmHeadTokens::All,
                "last" => LmHeadTokens::Last,
                _ => bail!("invalid value for `--lm-head-tokens`: `{t}` (valid: all, last)"),
            };
        }
        m.validate()?;
        Ok(m)
    }
}

/// Run `analyze`.
pub fn run(a: AnalyzeArgs) -> Result<()> {
    match a.kind {
        AnalyzeKind::Conv2d(c) => {
            let conv = c.shape.conv()?;
            let hw = c.hw.load()?;
            let opts = c.mapping.options(&hw)?;
            let r = analyze_conv2d(&conv, &hw, &opts)?;
            if c.json {
                print_json(&r)
            } else {
                print!("{}", render::conv(&r, &hw));
                Ok(())
            }
        }
        AnalyzeKind::Transformer(t) => {
            let b = t.block.block()?;
            let hw = t.hw.load()?;
            let r = analyze_transformer(&b, &hw)?;
            if t.json {
                print_json(&r)
            } else {
                print!("{}", render::transformer(&r));
                Ok(())
            }
        }
        AnalyzeKind::Model(m) => {
            let model = m.model()?;
            let hw = m.hw.load()?;
            let r = analyze_model(&model, &hw)?;
            if m.json {
                print_json(&r)
            } else {
                print!("{}", render::model(&r));
                Ok(())
            }
        }
        AnalyzeKind::Gemm(g) => {
            let gemm = g.shape.gemm()?;
            let hw = g.hw.load()?;
            let opts = g.mapping.options(&hw)?;
            let r = analyze_gemm(&gemm, &hw, &opts)?;
            if g.json {
                print_json(&r)
            } else {
                print!("{}", render::gemm(&r, &hw));
                Ok(())
            }
        }
    }
}
