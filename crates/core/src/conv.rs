//! The 2-D convolution workload (NCHW-agnostic, grouped, strided, padded, dilated), its
//! lowering to a batched GEMM (one GEMM per group), and two DRAM-traffic models: implicit
//! GEMM (every tensor moved once, the compulsory minimum) and materialized im2col (the
//! patch matrix written to and read back from DRAM). Padding zeros are never fetched.
//! Left out: Winograd, FFT and other fast algorithms, bias / normalization / activation
//! epilogues, layout transforms, and halo re-reads between tiles of an implicit GEMM.

use crate::analysis::{analyze_gemm, GemmAnalysis, GemmOptions, LIMITATIONS, SCHEMA_VERSION};
use crate::dtype::DType;
use crate::error::{checked_product, checked_sum, CoreError, Result};
use crate::gemm::Gemm;
use crate::hardware::HardwareSpec;
use crate::roofline::{roofline, Roofline};
use serde::{Deserialize, Serialize};

fn one() -> u64 {
    1
}

fn fp16() -> DType {
    DType::Fp16
}

/// A 2-D convolution `out[B][Cout][Ho][Wo] = Σ in[B][Cin][H][W] ⋆ w[Cout][Cin/groups][kh][kw]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2d {
    /// Images per call, B (default 1).
    #[serde(default = "one")]
    pub batch: u64,
    /// Input channels, Cin.
    pub in_channels: u64,
    /// Input height, H, in pixels.
    pub height: u64,
    /// Input width, W, in pixels.
    pub width: u64,
    /// Output channels, Cout.
    pub out_channels: u64,
    /// Kernel height, kh.
    pub kernel_h: u64,
    /// Kernel width, kw.
    pub kernel_w: u64,
    /// Vertical stride (default 1).
    #[serde(default = "one")]
    pub stride_h: u64,
    /// Horizontal stride (default 1).
    #[serde(default = "one")]
    pub stride_w: u64,
    /// Zero rows added above and below the input (default 0).
    #[serde(default)]
    pub pad_h: u64,
    /// Zero columns added left and right of the input (default 0).
    #[serde(default)]
    pub pad_w: u64,
    /// Vertical dilation (default 1): kernel taps are `dilation_h` rows apart.
    #[serde(default = "one")]
    pub dilation_h: u64,
    /// Horizontal dilation (default 1): kernel taps are `dilation_w` columns apart.
    #[serde(default = "one")]
    pub dilation_w: u64,
    /// Channel groups, g (default 1; `g = Cin = Cout` is depthwise); divides Cin and Cout.
    #[serde(default = "one")]
    pub groups: u64,
    /// Element type of input, weights and output (default fp16).
    #[serde(default = "fp16")]
    pub dtype: DType,
}

/// One output extent: `floor((X + 2·pad − dilation·(k − 1) − 1) / stride) + 1`, checked.
fn out_extent(x: u64, pad: u64, k: u64, dilation: u64, stride: u64, axis: &str) -> Result<u64> {
    let padded = pad
        .checked_mul(2)
        .and_then(|p| p.checked_add(x))
        .ok_or_else(|| CoreError::overflow(format!("padded input {axis} (X + 2·pad)")))?;
    let effective = dilation
        .checked_mul(k - 1)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(|| CoreError::overflow(format!("effective kernel {axis} (d·(k−1)+1)")))?;
    if effective > padded {
        let (kf, xf) = if axis == "height" {
            ("kernel_h", "height")
        } else {
            ("kernel_w", "width")
        };
        return Err(CoreError::invalid(
            kf,
            k,
            format!(
                "effective kernel {axis} dilation·(k−1)+1 = {effective} exceeds the padded input {xf} {x} + 2·pad = {padded}"
            ),
        ));
    }
    Ok((padded - effective) / stride + 1)
}

impl Conv2d {
    /// Every dimension is ≥ 1 (pads may be 0), groups divide both channel counts, the
    /// effective kernel `d·(k−1)+1` fits in the padded input, and all products fit in 64 bits.
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [
            ("batch", self.batch),
            ("in_channels", self.in_channels),
            ("height", self.height),
            ("width", self.width),
            ("out_channels", self.out_channels),
            ("kernel_h", self.kernel_h),
            ("kernel_w", self.kernel_w),
            ("stride_h", self.stride_h),
            ("stride_w", self.stride_w),
            ("dilation_h", self.dilation_h),
            ("dilation_w", self.dilation_w),
            ("groups", self.groups),
        ] {
            if v == 0 {
                return Err(CoreError::invalid(f, v, "must be at least 1"));
            }
        }
        for (f, v) in [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
        ] {
            if v % self.groups != 0 {
                return Err(CoreError::invalid(
                    f,
                    v,
                    format!("must be divisible by groups = {}", self.groups),
                ));
            }
        }
        self.output_hw()?;
        self.lowered_gemm()?;
        self.input_bytes()?;
        self.weight_bytes()?;
        self.output_bytes()?;
        self.im2col_bytes()?;
        self.flops()?;
        Ok(())
    }

    /// Output `(Ho, Wo)`: `Ho = floor((H + 2·pad_h − dilation_h·(kh − 1) − 1) / stride_h) + 1`, likewise Wo.
    pub fn output_hw(&self) -> Result<(u64, u64)> {
        if self.kernel_h == 0 || self.kernel_w == 0 || self.stride_h == 0 || self.stride_w == 0 {
            return Err(CoreError::invalid(
                "kernel/stride",
                format!(
                    "{}x{} / {}x{}",
                    self.kernel_h, self.kernel_w, self.stride_h, self.stride_w
                ),
                "kernel and stride must be at least 1",
            ));
        }
        let ho = out_extent(
            self.height,
            self.pad_h,
            self.kernel_h,
            self.dilation_h,
            self.stride_h,
            "height",
        )?;
        let wo = out_extent(
            self.width,
            self.pad_w,
            self.kernel_w,
            self.dilation_w,
            self.stride_w,
            "width",
        )?;
        Ok((ho, wo))
    }

    fn check_groups(&self) -> Result<()> {
        if self.groups == 0
            || !self.in_channels.is_multiple_of(self.groups)
            || !self.out_channels.is_multiple_of(self.groups)
        {
            return Err(CoreError::invalid(
                "groups",
                self.groups,
                format!(
                    "must be at least 1 and divide in_channels = {} and out_channels = {}",
                    self.in_channels, self.out_channels
                ),
            ));
        }
        Ok(())
    }

    /// The GEMM it lowers to: per group `M = B·Ho·Wo`, `N = Cout/g`, `K = (Cin/g)·kh·kw`, `batch = g`.
    pub fn lowered_gemm(&self) -> Result<Gemm> {
        self.check_groups()?;
        let (ho, wo) = self.output_hw()?;
        let g = Gemm {
            m: checked_product(&[self.batch, ho, wo], "B·Ho·Wo (lowered M)")?,
            n: self.out_channels / self.groups,
            k: checked_product(
                &[self.in_channels / self.groups, self.kernel_h, self.kernel_w],
                "(Cin/g)·kh·kw (lowered K)",
            )?,
            batch: self.groups,
            dtype: self.dtype,
            accumulate: false,
        };
        g.validate()?;
        Ok(g)
    }

    /// Multiply-accumulates: `B·Ho·Wo·Cout·(Cin/g)·kh·kw` (the direct convolution's).
    pub fn macs(&self) -> Result<u64> {
        self.lowered_gemm()?.macs()
    }

    /// FLOPs: `2 · MACs`.
    pub fn flops(&self) -> Result<u64> {
        self.lowered_gemm()?.flops()
    }

    /// Input tensor bytes: `B·Cin·H·W` elements (padding zeros are not stored or fetched).
    pub fn input_bytes(&self) -> Result<u64> {
        let e = checked_product(
            &[self.batch, self.in_channels, self.height, self.width],
            "B·Cin·H·W (input elements)",
        )?;
        self.dtype.bytes_for(e)
    }

    /// Weight tensor bytes: `Cout·(Cin/g)·kh·kw` elements.
    pub fn weight_bytes(&self) -> Result<u64> {
        self.check_groups()?;
        let e = checked_product(
            &[
                self.out_channels,
                self.in_channels / self.groups,
                self.kernel_h,
                self.kernel_w,
            ],
            "Cout·(Cin/g)·kh·kw (weight elements)",
        )?;
        self.dtype.bytes_for(e)
    }

    /// Output tensor bytes: `B·Cout·Ho·Wo` elements.
    pub fn output_bytes(&self) -> Result<u64> {
        let (ho, wo) = self.output_hw()?;
        let e = checked_product(
            &[self.batch, self.out_channels, ho, wo],
            "B·Cout·Ho·Wo (output elements)",
        )?;
        self.dtype.bytes_for(e)
    }

    /// Elements of the materialized im2col matrix over all groups: `M·K·g = B·Ho·Wo·Cin·kh·kw`.
    pub fn im2col_elements(&self) -> Result<u64> {
        let g = self.lowered_gemm()?;
        checked_product(&[g.m, g.k, g.batch], "M·K·groups (im2col elements)")
    }

    /// Bytes of the materialized im2col matrix: `im2col_elements` in the conv's dtype.
    pub fn im2col_bytes(&self) -> Result<u64> {
        self.dtype.bytes_for(self.im2col_elements()?)
    }
}

/// DRAM traffic and roofline of the implicit-GEMM lowering.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvTraffic {
    /// `input + weights + output` bytes: every tensor moved once (compulsory).
    pub dram_bytes: u64,
    /// `flops / dram_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// Roofline of the conv's FLOPs over `dram_bytes` at its dtype.
    pub roofline: Roofline,
}

/// DRAM traffic and roofline of the materialized-im2col lowering.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Im2colTraffic {
    /// Bytes of the im2col matrix, `B·Ho·Wo·Cin·kh·kw` elements.
    pub im2col_bytes: u64,
    /// `im2col_bytes / input_bytes`: how much the patch matrix inflates the input.
    pub expansion_ratio: f64,
    /// `input + 2·im2col + weights + output` bytes (read input, write im2col, GEMM reads it back).
    pub dram_bytes: u64,
    /// `flops / dram_bytes`, FLOP per byte.
    pub arithmetic_intensity: f64,
    /// Roofline of the conv's FLOPs over `dram_bytes` at its dtype.
    pub roofline: Roofline,
}

/// The convolution analysis report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv2dAnalysis {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `model`.
    pub evidence: String,
    /// Always `conv2d`.
    pub kind: String,
    /// The workload.
    pub workload: Conv2d,
    /// Hardware name.
    pub hardware: String,
    /// Ho, output rows.
    pub output_height: u64,
    /// Wo, output columns.
    pub output_width: u64,
    /// The lowered GEMM: `M = B·Ho·Wo`, `N = Cout/g`, `K = (Cin/g)·kh·kw`, `batch = g`.
    pub lowered_gemm: Gemm,
    /// `B·Ho·Wo·Cout·(Cin/g)·kh·kw`.
    pub macs: u64,
    /// `2 · MACs`.
    pub flops: u64,
    /// `B·Cin·H·W` elements, bytes.
    pub input_bytes: u64,
    /// `Cout·(Cin/g)·kh·kw` elements, bytes.
    pub weight_bytes: u64,
    /// `B·Cout·Ho·Wo` elements, bytes.
    pub output_bytes: u64,
    /// Implicit GEMM: compulsory traffic `input + weights + output`.
    pub implicit_gemm: ConvTraffic,
    /// Materialized im2col: `input + 2·im2col + weights + output`.
    pub im2col: Im2colTraffic,
    /// The lowered GEMM analysed as a standalone GEMM (A = the im2col matrix): PE mapping,
    /// SRAM fit and tile schedules.
    pub gemm: GemmAnalysis,
    /// What the model leaves out.
    pub limitations: Vec<String>,
}

/// Convolution-specific omissions, appended to [`LIMITATIONS`].
pub const CONV2D_LIMITATIONS: &[&str] = &[
    "padding zeros are not fetched: input bytes count only the B·Cin·H·W real elements",
    "direct convolution only: no Winograd, FFT or other fast algorithms (MACs are the direct count)",
    "implicit-GEMM traffic is the compulsory minimum: each input element fetched once, halo re-reads between tiles not modelled",
    "im2col traffic assumes the patch matrix is written to DRAM once and read back once, with no on-chip reuse",
    "the `gemm` sub-analysis treats the lowered GEMM as standalone: its A operand is the im2col matrix",
    "no bias, normalization, activation or layout-transform (NCHW/NHWC) traffic",
];

/// Analyze a convolution on one chip: both traffic models plus the lowered GEMM's analysis.
pub fn analyze_conv2d(c: &Conv2d, hw: &HardwareSpec, opts: &GemmOptions) -> Result<Conv2dAnalysis> {
    c.validate()?;
    let (ho, wo) = c.output_hw()?;
    let g = c.lowered_gemm()?;
    let macs = g.macs()?;
    let flops = g.flops()?;
    let input = c.input_bytes()?;
    let weights = c.weight_bytes()?;
    let output = c.output_bytes()?;
    let implicit_bytes = checked_sum(&[input, weights, output], "implicit-GEMM DRAM bytes")?;
    let im2col_bytes = c.im2col_bytes()?;
    let im2col_dram = checked_sum(
        &[input, im2col_bytes, im2col_bytes, weights, output],
        "im2col DRAM bytes",
    )?;
    let implicit_gemm = ConvTraffic {
        dram_bytes: implicit_bytes,
        arithmetic_intensity: flops as f64 / implicit_bytes as f64,
        roofline: roofline(hw, c.dtype, flops as f64, implicit_bytes as f64, &[])?,
    };
    let im2col = Im2colTraffic {
        im2col_bytes,
        expansion_ratio: im2col_bytes as f64 / input as f64,
        dram_bytes: im2col_dram,
        arithmetic_intensity: flops as f64 / im2col_dram as f64,
        roofline: roofline(hw, c.dtype, flops as f64, im2col_dram as f64, &[])?,
    };
    let gemm = analyze_gemm(&g, hw, opts)?;
    Ok(Conv2dAnalysis {
        schema_version: SCHEMA_VERSION,
        evidence: "model".into(),
        kind: "conv2d".into(),
        workload: c.clone(),
        hardware: hw.name.clone(),
        output_height: ho,
        output_width: wo,
        lowered_gemm: g,
        macs,
        flops,
        input_bytes: input,
        weight_bytes: weights,
        output_bytes: output,
        implicit_gemm,
        im2col,
        gemm,
        limitations: LIMITATIONS
            .iter()
            .chain(CONV2D_LIMITATIONS)
            .map(|s| s.to_string())
            .collect(),
    })
}

/// Names of the built-in convolution presets (all fp16, batch 1, 64→128 channels at 56×56).
pub const CONV2D_PRESET_NAMES: &[&str] = &["conv_pointwise", "conv_spatial", "conv_downsample"];

impl Conv2d {
    /// Batch 1, `in_channels` → `out_channels` over `height` × `width` with a
    /// `kernel_h` × `kernel_w` kernel: stride 1, no padding, dilation 1, one group, fp16 (what
    /// the command line and the Python package start from before their other fields).
    pub fn new(
        in_channels: u64,
        out_channels: u64,
        height: u64,
        width: u64,
        kernel_h: u64,
        kernel_w: u64,
    ) -> Self {
        Conv2d {
            batch: 1,
            in_channels,
            height,
            width,
            out_channels,
            kernel_h,
            kernel_w,
            stride_h: 1,
            stride_w: 1,
            pad_h: 0,
            pad_w: 0,
            dilation_h: 1,
            dilation_w: 1,
            groups: 1,
            dtype: DType::Fp16,
        }
    }
}

/// A convolution preset: `conv_pointwise` (1×1), `conv_spatial` (3×3, pad 1), `conv_downsample`
/// (1×1 stride 2, the ResNet projection shortcut); all fp16, batch 1, 64→128 channels, 56×56.
pub fn conv2d_preset(name: &str) -> Result<Conv2d> {
    let base = Conv2d::new(64, 128, 56, 56, 1, 1);
    let c = match name {
        "conv_pointwise" => base,
        "conv_spatial" => Conv2d {
            kernel_h: 3,
            kernel_w: 3,
            pad_h: 1,
            pad_w: 1,
            ..base
        },
        "conv_downsample" => Conv2d {
            stride_h: 2,
            stride_w: 2,
            ..base
        },
        _ => {
            return Err(CoreError::Unknown {
                kind: "conv2d preset".into(),
                name: name.into(),
                valid: CONV2D_PRESET_NAMES.join(", "),
            })
        }
    };
    c.validate()?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets;
    use proptest::prelude::*;

    fn conv(cin: u64, h: u64, w: u64, cout: u64, k: u64) -> Conv2d {
        Conv2d {
            in_channels: cin,
            height: h,
            width: w,
            out_channels: cout,
            kernel_h: k,
            kernel_w: k,
            ..conv2d_preset("conv_pointwise").unwrap()
        }
    }

    #[test]
    fn reference_5x5_3x3_expansion() {
        // 5×5 single channel, 3×3 kernel, stride 1, no pad: Ho = Wo = (5 − 2 − 1)/1 + 1 = 3.
        // im2col: M·K = 9·9 = 81 elements vs 25 input elements -> ratio 81/25 = 3.24.
        let c = conv(1, 5, 5, 1, 3);
        assert_eq!(c.output_hw().unwrap(), (3, 3));
        let g = c.lowered_gemm().unwrap();
        assert_eq!((g.m, g.n, g.k, g.batch), (9, 1, 9, 1));
        let a = analyze_conv2d(
            &c,
            &presets::hardware("balanced").unwrap(),
            &GemmOptions::default(),
        )
        .unwrap();
        assert_eq!(a.im2col.im2col_bytes, 81 * 2);
        assert!((a.im2col.expansion_ratio - 3.24).abs() < 1e-12);
        // im2col DRAM: in 50 + 2·162 + w 18 + out 18 = 410; implicit 50 + 18 + 18 = 86.
        assert_eq!(a.implicit_gemm.dram_bytes, 86);
        assert_eq!(a.im2col.dram_bytes, 410);
        // MACs 9·9 = 81, FLOPs 162.
        assert_eq!(a.macs, 81);
        assert_eq!(a.flops, 162);
    }

    #[test]
    fn pointwise_implicit_bytes() {
        // in 64·56·56·2 = 401 408 + w 64·128·2 = 16 384 + out 128·56·56·2 = 802 816 = 1 220 608 B.
        let c = conv2d_preset("conv_pointwise").unwrap();
        let a = analyze_conv2d(
            &c,
            &presets::hardware("balanced").unwrap(),
            &GemmOptions::default(),
        )
        .unwrap();
        assert_eq!(a.input_bytes, 401_408);
        assert_eq!(a.weight_bytes, 16_384);
        assert_eq!(a.output_bytes, 802_816);
        assert_eq!(a.implicit_gemm.dram_bytes, 1_220_608);
        // 1×1 stride 1: im2col matrix equals the input, ratio 1.
        assert_eq!(a.im2col.expansion_ratio, 1.0);
        assert_eq!(a.evidence, "model");
        assert_eq!(a.kind, "conv2d");
        assert!(a.limitations.iter().any(|l| l.contains("padding zeros")));
        // The lowered GEMM's standalone analysis agrees on FLOPs.
        assert_eq!(a.gemm.flops, a.flops);
    }

    #[test]
    fn spatial_flops() {
        // Ho = Wo = (56 + 2 − 2 − 1)/1 + 1 = 56; FLOPs = 2·3136·128·64·9 = 462 422 016.
        let c = conv2d_preset("conv_spatial").unwrap();
        assert_eq!(c.output_hw().unwrap(), (56, 56));
        assert_eq!(c.flops().unwrap(), 462_422_016);
        // im2col elements 3136·64·9 = 1 806 336 vs input 200 704 -> ratio 9.
        assert_eq!(c.im2col_elements().unwrap(), 1_806_336);
    }

    #[test]
    fn downsample_halves_spatial() {
        // Ho = (56 − 1)/2 + 1 = 28 (floor 27.5 = 27, +1); M = 784, N = 128, K = 64.
        let c = conv2d_preset("conv_downsample").unwrap();
        assert_eq!(c.output_hw().unwrap(), (28, 28));
        let g = c.lowered_gemm().unwrap();
        assert_eq!((g.m, g.n, g.k, g.batch), (784, 128, 64, 1));
        // im2col reads every other pixel: 784·64 = 50 176 elements / 200 704 = 0.25.
        let a = analyze_conv2d(
            &c,
            &presets::hardware("balanced").unwrap(),
            &GemmOptions::default(),
        )
        .unwrap();
        assert!((a.im2col.expansion_ratio - 0.25).abs() < 1e-12);
    }

    #[test]
    fn grouped_and_dilated() {
        // Depthwise-ish: 8 → 16 channels, groups 4, 3×3 dilation 2, pad 2 on 10×10, batch 2.
        // Ho = (10 + 4 − 2·2 − 1)/1 + 1 = 10. Per group M = 2·100 = 200, N = 4, K = 2·9 = 18.
        let c = Conv2d {
            batch: 2,
            groups: 4,
            dilation_h: 2,
            dilation_w: 2,
            pad_h: 2,
            pad_w: 2,
            ..conv(8, 10, 10, 16, 3)
        };
        let g = c.lowered_gemm().unwrap();
        assert_eq!((g.m, g.n, g.k, g.batch), (200, 4, 18, 4));
        // MACs = B·Ho·Wo·Cout·(Cin/g)·kh·kw = 2·100·16·2·9 = 57 600.
        assert_eq!(c.macs().unwrap(), 57_600);
        // Weights 16·2·9 = 288 elements = 576 B fp16; the GEMM's B operand agrees.
        assert_eq!(c.weight_bytes().unwrap(), 576);
        assert_eq!(g.operand_bytes().unwrap().b, 576);
    }

    #[test]
    fn unknown_preset_lists_names() {
        let e = conv2d_preset("conv_huge").unwrap_err().to_string();
        assert!(e.contains("conv_huge") && e.contains("conv_spatial"), "{e}");
    }

    #[test]
    fn bad_inputs_rejected() {
        let ok = conv2d_preset("conv_spatial").unwrap();
        let e = Conv2d {
            in_channels: 0,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("in_channels") && e.contains("= 0"), "{e}");
        let e = Conv2d {
            stride_w: 0,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("stride_w"), "{e}");
        let e = Conv2d {
            groups: 3,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("divisible by groups") && e.contains("64"), "{e}");
        // 7×7 kernel on 5×5 input without padding does not fit.
        let e = conv(1, 5, 5, 1, 7).validate().unwrap_err().to_string();
        assert!(e.contains("kernel_h") && e.contains("exceeds"), "{e}");
        // Dilation makes a 3×3 kernel span 2·2+1 = 5 > 4.
        let e = Conv2d {
            dilation_w: 2,
            ..conv(1, 5, 4, 1, 3)
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("kernel_w"), "{e}");
        // Overflowing products are errors, not panics.
        let huge = Conv2d {
            batch: 1 << 30,
            height: 1 << 20,
            width: 1 << 20,
            ..conv(64, 1, 1, 64, 1)
        };
        let e = huge.validate().unwrap_err().to_string();
        assert!(e.contains("overflow"), "{e}");
        let e = Conv2d {
            pad_h: u64::MAX,
            ..ok.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflow"), "{e}");
        let e = Conv2d {
            dilation_h: u64::MAX,
            ..ok
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflow"), "{e}");
        assert!(analyze_conv2d(
            &huge,
            &presets::hardware("balanced").unwrap(),
            &GemmOptions::default()
        )
        .is_err());
    }

    #[test]
    fn serde_defaults_and_unknown_fields() {
        let c: Conv2d = serde_json::from_str(
            r#"{"in_channels": 64, "height": 56, "width": 56, "out_channels": 128, "kernel_h": 1, "kernel_w": 1}"#,
        )
        .unwrap();
        assert_eq!(c, conv2d_preset("conv_pointwise").unwrap());
        let back: Conv2d = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let e = serde_json::from_str::<Conv2d>(
            r#"{"in_channels": 64, "height": 56, "width": 56, "out_channels": 128, "kernel_h": 1, "kernel_w": 1, "padding": 1}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("padding"), "{e}");
    }

    proptest! {
        #[test]
        fn lowering_preserves_direct_macs(
            b in 1u64..4, g in 1u64..4, cin_g in 1u64..5, cout_g in 1u64..5,
            h in 1u64..20, w in 1u64..20, kh in 1u64..4, kw in 1u64..4,
            s in 1u64..3, p in 0u64..3, d in 1u64..3,
        ) {
            let c = Conv2d {
                batch: b, in_channels: g * cin_g, height: h, width: w, out_channels: g * cout_g,
                kernel_h: kh, kernel_w: kw, stride_h: s, stride_w: s, pad_h: p, pad_w: p,
                dilation_h: d, dilation_w: d, groups: g, dtype: DType::Fp32,
            };
            let fits = d * (kh - 1) < h + 2 * p && d * (kw - 1) < w + 2 * p;
            prop_assert_eq!(c.validate().is_ok(), fits);
            if fits {
                let (ho, wo) = c.output_hw().unwrap();
                // Count output positions directly: o·s ≤ H + 2p − d(k−1) − 1.
                let count = |x: u64, k: u64| (0..).take_while(|o| o * s + d * (k - 1) < x + 2 * p).count() as u64;
                prop_assert_eq!((ho, wo), (count(h, kh), count(w, kw)));
                prop_assert_eq!(c.macs().unwrap(), b * ho * wo * g * cout_g * cin_g * kh * kw);
                prop_assert_eq!(c.im2col_elements().unwrap(), b * ho * wo * g * cin_g * kh * kw);
            }
        }
    }
}
