//! The GEMM workload: `C[batch][M×N] (+)= A[batch][M×K] · B[batch][K×N]`, with its op
//! counts and compulsory bytes. Every operand is read once and C written once (plus read
//! once when accumulating): the minimum any schedule can move. Operand layout, padding,
//! alignment and a wider accumulator type are not modelled; C has the operands' dtype.

use crate::dtype::DType;
use crate::error::{checked_product, checked_sum, CoreError, Result};
use serde::{Deserialize, Serialize};

/// A (batched) matrix multiplication.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gemm {
    /// Rows of A and C.
    pub m: u64,
    /// Columns of B and C.
    pub n: u64,
    /// Reduction dimension.
    pub k: u64,
    /// Independent GEMMs, each with its own A, B and C.
    #[serde(default = "one")]
    pub batch: u64,
    /// Element type of A, B and C.
    pub dtype: DType,
    /// `C += A·B` (C is read once more) instead of `C = A·B`.
    #[serde(default)]
    pub accumulate: bool,
}

fn one() -> u64 {
    1
}

/// Bytes of each operand over the whole batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperandBytes {
    /// A: `batch · ceil(M·K·bits/8)`.
    pub a: u64,
    /// B: `batch · ceil(K·N·bits/8)`.
    pub b: u64,
    /// C: `batch · ceil(M·N·bits/8)`.
    pub c: u64,
}

impl Gemm {
    /// A validated GEMM with `batch = 1`, no accumulation.
    pub fn new(m: u64, n: u64, k: u64, dtype: DType) -> Result<Self> {
        let g = Gemm {
            m,
            n,
            k,
            batch: 1,
            dtype,
            accumulate: false,
        };
        g.validate()?;
        Ok(g)
    }

    /// Dimensions are ≥ 1, and FLOPs and compulsory bytes fit in 64 bits.
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [
            ("m", self.m),
            ("n", self.n),
            ("k", self.k),
            ("batch", self.batch),
        ] {
            if v == 0 {
                return Err(CoreError::invalid(
                    f,
                    v,
                    "GEMM dimensions must be at least 1",
                ));
            }
        }
        self.flops()?;
        self.compulsory_bytes()?;
        Ok(())
    }

    /// Multiply-accumulates: `batch · M · N · K`.
    pub fn macs(&self) -> Result<u64> {
        checked_product(&[self.batch, self.m, self.n, self.k], "batch·m·n·k (MACs)")
    }

    /// FLOPs: `2 · MACs`, plus `batch · M · N` additions when accumulating into C.
    pub fn flops(&self) -> Result<u64> {
        let two_macs = self
            .macs()?
            .checked_mul(2)
            .ok_or_else(|| CoreError::overflow("2·MACs (FLOPs)"))?;
        let acc = if self.accumulate {
            checked_product(&[self.batch, self.m, self.n], "batch·m·n")?
        } else {
            0
        };
        checked_sum(&[two_macs, acc], "FLOPs")
    }

    /// Bytes of A, B and C over the batch.
    pub fn operand_bytes(&self) -> Result<OperandBytes> {
        let per = |r: u64, c: u64, what: &str| -> Result<u64> {
            let elems = checked_product(&[r, c], what)?;
            let b = self.dtype.bytes_for(elems)?;
            b.checked_mul(self.batch)
                .ok_or_else(|| CoreError::overflow(what))
        };
        Ok(OperandBytes {
            a: per(self.m, self.k, "bytes of A")?,
            b: per(self.k, self.n, "bytes of B")?,
            c: per(self.m, self.n, "bytes of C")?,
        })
    }

    /// Compulsory DRAM bytes: `A + B + C` (`+ C` again when accumulating).
    pub fn compulsory_bytes(&self) -> Result<u64> {
        let o = self.operand_bytes()?;
        let c_reads = if self.accumulate { o.c } else { 0 };
        checked_sum(&[o.a, o.b, o.c, c_reads], "compulsory bytes")
    }

    /// Arithmetic intensity: `FLOPs / compulsory bytes` (FLOP per byte).
    pub fn arithmetic_intensity(&self) -> Result<f64> {
        Ok(self.flops()? as f64 / self.compulsory_bytes()? as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_compulsory_bytes() {
        // 2×3×4 fp32: A 2·4·4 = 32, B 4·3·4 = 48, C 2·3·4 = 24 -> 104 bytes.
        let g = Gemm::new(2, 3, 4, DType::Fp32).unwrap();
        assert_eq!(g.compulsory_bytes().unwrap(), 104);
        // MACs 24, FLOPs 48, AI 48/104.
        assert_eq!(g.macs().unwrap(), 24);
        assert_eq!(g.flops().unwrap(), 48);
        assert!((g.arithmetic_intensity().unwrap() - 48.0 / 104.0).abs() < 1e-15);
    }

    #[test]
    fn accumulate_reads_c_and_adds() {
        // 2×3×4 fp32 accumulate: 104 + 24 bytes; 48 + 6 FLOPs.
        let mut g = Gemm::new(2, 3, 4, DType::Fp32).unwrap();
        g.accumulate = true;
        assert_eq!(g.compulsory_bytes().unwrap(), 128);
        assert_eq!(g.flops().unwrap(), 54);
    }

    #[test]
    fn int4_operands_are_half_bytes() {
        // 128×128×128 int4: each operand 16384 elements × 0.5 byte = 8192 bytes.
        let g = Gemm::new(128, 128, 128, DType::Int4).unwrap();
        assert_eq!(g.compulsory_bytes().unwrap(), 3 * 8192);
    }

    #[test]
    fn zero_and_overflow_rejected() {
        let e = Gemm::new(0, 3, 4, DType::Fp32).unwrap_err().to_string();
        assert!(e.contains("`m`") && e.contains("= 0"), "{e}");
        let e = Gemm::new(1 << 30, 1 << 30, 1 << 30, DType::Fp32)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overflow"), "{e}");
    }
}

/// One of a GEMM's three operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operand {
    /// `A`, `M × K`.
    A,
    /// `B`, `K × N`.
    B,
    /// `C`, `M × N`.
    C,
}

impl Operand {
    /// A, B, C: the index order every per-operand array uses.
    pub const ALL: [Operand; 3] = [Operand::A, Operand::B, Operand::C];

    /// `a`, `b` or `c`, as files and JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            Operand::A => "a",
            Operand::B => "b",
            Operand::C => "c",
        }
    }
}

/// What a GEMM of a decomposed workload computes: a typed tag, so that callers select GEMMs
/// (the attention part, the MLP) without matching names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GemmRole {
    /// Not one of the roles below (a user's GEMM, a convolution's lowered GEMM).
    #[default]
    Other,
    /// Query projection.
    QProj,
    /// Key projection.
    KProj,
    /// Value projection.
    VProj,
    /// Attention scores `Q·Kᵀ`.
    AttnScores,
    /// Attention-weighted values `P·V`.
    AttnValues,
    /// Attention output projection.
    OProj,
    /// SwiGLU gate projection.
    MlpGate,
    /// MLP up projection.
    MlpUp,
    /// MLP down projection.
    MlpDown,
    /// Vocabulary projection of a whole model.
    LmHead,
    /// Latent attention: query down-projection to the query latent (`q_a`).
    QDown,
    /// Latent attention: query up-projection from the latent to the heads (`q_b`).
    QUp,
    /// Latent attention: down-projection to the KV latent and the shared rotary key (`kv_a`).
    KvDown,
    /// Latent attention: up-projection of cached latents to per-head keys and values (`kv_b`,
    /// the naive form).
    KvUp,
    /// Latent attention, absorbed form: each head's query mapped into the KV latent space.
    QAbsorb,
    /// Latent attention, absorbed form: each head's latent output mapped to its values.
    VAbsorb,
    /// Mixture of experts: the router's scores over the experts.
    Router,
    /// Mixture of experts: routed experts' gate projections (batch = experts touched).
    ExpertGate,
    /// Mixture of experts: routed experts' up projections.
    ExpertUp,
    /// Mixture of experts: routed experts' down projections.
    ExpertDown,
    /// Mixture of experts: shared (always active) experts' gate projection.
    SharedGate,
    /// Mixture of experts: shared experts' up projection.
    SharedUp,
    /// Mixture of experts: shared experts' down projection.
    SharedDown,
}

impl GemmRole {
    /// The snake-case name, which is also the GEMM's name in a transformer decomposition.
    pub fn name(self) -> &'static str {
        match self {
            GemmRole::Other => "other",
            GemmRole::QProj => "q_proj",
            GemmRole::KProj => "k_proj",
            GemmRole::VProj => "v_proj",
            GemmRole::AttnScores => "attn_scores",
            GemmRole::AttnValues => "attn_values",
            GemmRole::OProj => "o_proj",
            GemmRole::MlpGate => "mlp_gate",
            GemmRole::MlpUp => "mlp_up",
            GemmRole::MlpDown => "mlp_down",
            GemmRole::LmHead => "lm_head",
            GemmRole::QDown => "q_a",
            GemmRole::QUp => "q_b",
            GemmRole::KvDown => "kv_a",
            GemmRole::KvUp => "kv_b",
            GemmRole::QAbsorb => "q_absorb",
            GemmRole::VAbsorb => "v_absorb",
            GemmRole::Router => "router",
            GemmRole::ExpertGate => "expert_gate",
            GemmRole::ExpertUp => "expert_up",
            GemmRole::ExpertDown => "expert_down",
            GemmRole::SharedGate => "shared_gate",
            GemmRole::SharedUp => "shared_up",
            GemmRole::SharedDown => "shared_down",
        }
    }

    /// Part of attention: the q/k/v projections (or the latent-attention projections),
    /// scores, values and output projection.
    pub fn is_attention(self) -> bool {
        matches!(
            self,
            GemmRole::QProj
                | GemmRole::KProj
                | GemmRole::VProj
                | GemmRole::AttnScores
                | GemmRole::AttnValues
                | GemmRole::OProj
                | GemmRole::QDown
                | GemmRole::QUp
                | GemmRole::KvDown
                | GemmRole::KvUp
                | GemmRole::QAbsorb
                | GemmRole::VAbsorb
        )
    }

    fn is_other(&self) -> bool {
        *self == GemmRole::Other
    }
}

/// A GEMM with a name, as produced by decomposing a larger workload (a transformer block's
/// `q_proj`, a convolution's lowered GEMM).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NamedGemm {
    /// Name within the parent workload.
    pub name: String,
    /// The GEMM.
    pub gemm: Gemm,
    /// What it computes (`other` is omitted from JSON).
    #[serde(default, skip_serializing_if = "GemmRole::is_other")]
    pub role: GemmRole,
    /// Operands a fused kernel keeps on chip, so they cross DRAM neither way (default none).
    #[serde(default, skip_serializing_if = "OnChip::is_none")]
    pub on_chip: OnChip,
    /// Storage dtype of B when it differs from the GEMM's (weights stored narrower, a KV
    /// cache in its own dtype); the arithmetic stays at the GEMM's dtype (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_dtype: Option<DType>,
    /// Quantization groups of B at `b_dtype` (scales and zero points), counted in its bytes
    /// (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_groups: Option<QuantGroups>,
}

/// Weight-only quantization groups of a stored operand (weights narrower than the
/// arithmetic): one fp16 scale per `size` consecutive values of a column along K (the input
/// dimension), and with `zero_points` one zero point per group at the values' own width
/// (GPTQ's and AWQ's packed `qzeros`: asymmetric quantization). Their bytes count as the
/// weight's: a group of 128 int4 values with a scale and a zero point is 64 + 2 + 0.5 bytes.
///
/// ```
/// use tensorforge_core::gemm::QuantGroups;
/// use tensorforge_core::DType;
/// let g = QuantGroups { size: 128, zero_points: true };
/// // 4096 × 4096 int4 weights: 8 388 608 B of values, 32 · 4096 groups of
/// // (16 + 4) bits = 327 680 B: 8 716 288 B.
/// assert_eq!(g.matrix_bytes(4096, 4096, DType::Int4).unwrap(), 8_716_288);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantGroups {
    /// Values per group, along K.
    pub size: u64,
    /// A zero point per group as well as a scale.
    #[serde(default)]
    pub zero_points: bool,
}

impl QuantGroups {
    /// Bits of one group's scale and zero point for values of `dtype`: `16 + (bits(dtype) if
    /// zero points)`.
    pub fn bits_per_group(&self, dtype: DType) -> u64 {
        16 + if self.zero_points { dtype.bits() } else { 0 }
    }

    /// A group size of 0 is an error naming `field`.
    pub fn validate(&self, field: &str) -> Result<()> {
        if self.size == 0 {
            return Err(CoreError::invalid(
                field,
                0,
                "must be at least 1 value per group",
            ));
        }
        Ok(())
    }

    /// Bytes of a `k × n` matrix of `dtype` values in groups along K:
    /// `⌈(K·N·bits + ⌈K/G⌉·N·(16 + z)) / 8⌉`.
    pub fn matrix_bytes(&self, k: u64, n: u64, dtype: DType) -> Result<u64> {
        self.validate("group_size")?;
        let values = checked_product(&[k, n, dtype.bits()], "K·N·bits (quantized values)")?;
        let groups = checked_product(
            &[k.div_ceil(self.size), n, self.bits_per_group(dtype)],
            "⌈K/G⌉·N·bits (scales and zero points)",
        )?;
        Ok(checked_sum(&[values, groups], "quantized weight bits")?.div_ceil(8))
    }

    /// Bytes of `params` values of `dtype` counted as one column of groups:
    /// `⌈(P·bits + ⌈P/G⌉·(16 + z)) / 8⌉` (a whole model's weights: exact when G divides every
    /// matrix's K, as the usual 32–128 divide transformer widths).
    pub fn total_bytes(&self, params: u64, dtype: DType) -> Result<u64> {
        self.matrix_bytes(params, 1, dtype)
    }
}

/// Operands of a GEMM that a fused kernel keeps on chip (flash attention keeps the scores
/// `C` of `Q·Kᵀ` and the probabilities `A` of `P·V`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnChip {
    /// A arrives from the previous stage of the kernel instead of DRAM.
    #[serde(default)]
    pub a: bool,
    /// C stays for the next stage of the kernel instead of being written.
    #[serde(default)]
    pub c: bool,
}

impl OnChip {
    fn is_none(&self) -> bool {
        !self.a && !self.c
    }
}

impl NamedGemm {
    /// A GEMM with a name and no particular role.
    pub fn new(name: impl Into<String>, gemm: Gemm) -> NamedGemm {
        NamedGemm {
            name: name.into(),
            gemm,
            role: GemmRole::Other,
            on_chip: OnChip::default(),
            b_dtype: None,
            b_groups: None,
        }
    }

    /// DRAM bytes: the GEMM's compulsory bytes with B at [`NamedGemm::b_dtype`], less the
    /// operands kept on chip (`A + B' + C (+ C)`, minus A and/or C per
    /// [`NamedGemm::on_chip`]; `B' = batch · ceil(K·N·bits(b_dtype)/8)`, plus the scales and
    /// zero points of [`NamedGemm::b_groups`], [`QuantGroups::matrix_bytes`]).
    pub fn dram_bytes(&self) -> Result<u64> {
        let o = self.gemm.operand_bytes()?;
        let g = &self.gemm;
        let b = match (self.b_dtype, self.b_groups) {
            (Some(d), Some(q)) => checked_product(
                &[g.batch, q.matrix_bytes(g.k, g.n, d)?],
                "batch · quantized B bytes",
            )?,
            (Some(d), None) => {
                Gemm {
                    dtype: d,
                    ..self.gemm.clone()
                }
                .operand_bytes()?
                .b
            }
            (None, _) => o.b,
        };
        let a = if self.on_chip.a { 0 } else { o.a };
        let c = if self.on_chip.c { 0 } else { o.c };
        let c_reads = if self.gemm.accumulate { c } else { 0 };
        checked_sum(&[a, b, c, c_reads], "DRAM bytes")
    }
}
