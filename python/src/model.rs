//! The analytical Core from Python: GEMM, convolution, transformer-block and whole-model
//! analysis, the serving view, bounded exploration and the hardware presets. Each function
//! builds the Core's inputs from keyword arguments with the CLI's defaults (a preset, or the
//! shape fields; fp16; the `balanced` chip) and returns the result as the JSON text the
//! CLI's `--json` prints, which the Python package turns into a result object
//! (`to_dict()` is that JSON). Model evidence only: nothing here measures.

use crate::{guard, os_err, to_json, value_err};
use pyo3::prelude::*;
use tensorforge_core::conv::{analyze_conv2d, conv2d_preset, Conv2d};
use tensorforge_core::dse::{explore, DesignSpace, RankBy, DEFAULT_MAX_CANDIDATES};
use tensorforge_core::gemm::QuantGroups;
use tensorforge_core::parallel::Parallelism;
use tensorforge_core::serve::{serve, ServeOptions, DEFAULT_BATCHES, DEFAULT_CONTEXTS};
use tensorforge_core::transformer::{
    analyze_model, analyze_transformer, decoder_from_hf_config, transformer_preset,
    AttentionKernel, LmHeadTokens, MlaForm, MlpKind, NormKind, Phase, Routing, TransformerBlock,
};
use tensorforge_core::{
    analyze_gemm, presets, DType, Dataflow, Gemm, GemmOptions, HardwareSpec, LoopOrder, PeArray,
    Tile,
};

/// The chip: a preset name, a hardware file (TOML or JSON), or the default `balanced`.
pub(crate) fn hardware(hw: Option<&str>, hw_file: Option<&str>) -> PyResult<HardwareSpec> {
    match (hw, hw_file) {
        (Some(_), Some(_)) => Err(value_err("give `hw` or `hw_file`, not both")),
        (_, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| os_err(format!("{f}: cannot read file: {e}")))?;
            HardwareSpec::from_file_text(&text, f).map_err(value_err)
        }
        (Some(n), None) => presets::hardware(n).map_err(value_err),
        (None, None) => presets::hardware("balanced").map_err(value_err),
    }
}

fn dtype(s: &str) -> PyResult<DType> {
    DType::parse(s).map_err(value_err)
}

fn gemm_of(
    preset: Option<&str>,
    mnk: (Option<u64>, Option<u64>, Option<u64>),
    batch: Option<u64>,
    dt: Option<&str>,
    accumulate: bool,
) -> PyResult<Gemm> {
    let mut g = match (preset, mnk) {
        (Some(_), (Some(_), _, _) | (_, Some(_), _) | (_, _, Some(_))) => {
            return Err(value_err("give `preset` or `m`, `n`, `k`, not both"))
        }
        (Some(p), _) => presets::gemm(p).map_err(value_err)?,
        (None, (Some(m), Some(n), Some(k))) => Gemm {
            m,
            n,
            k,
            batch: 1,
            dtype: DType::Fp16,
            accumulate: false,
        },
        _ => return Err(value_err("give either `preset` or all of `m`, `n` and `k`")),
    };
    if let Some(b) = batch {
        g.batch = b;
    }
    if let Some(d) = dt {
        g.dtype = dtype(d)?;
    }
    g.accumulate |= accumulate;
    g.validate().map_err(value_err)?;
    Ok(g)
}

#[allow(clippy::too_many_arguments)]
fn options(
    hw: &HardwareSpec,
    pe: Option<(u64, u64)>,
    clock_hz: Option<f64>,
    sram_bytes: Option<u64>,
    tile: Option<&str>,
    dataflow: Option<&str>,
    fill_drain: bool,
) -> PyResult<GemmOptions> {
    if let Some(c) = clock_hz {
        if !(c.is_finite() && c > 0.0) {
            return Err(value_err(format!(
                "invalid value for `clock_hz`: {c} (must be positive and finite)"
            )));
        }
    }
    if sram_bytes == Some(0) {
        return Err(value_err(
            "invalid value for `sram_bytes`: 0 (must be at least 1)",
        ));
    }
    Ok(GemmOptions {
        pe: pe
            .map(|(r, c)| PeArray::resized(hw, r, c, clock_hz))
            .transpose()
            .map_err(value_err)?,
        sram_bytes,
        tile: tile.map(Tile::parse).transpose().map_err(value_err)?,
        dataflow: dataflow
            .map(Dataflow::parse)
            .transpose()
            .map_err(value_err)?,
        fill_drain,
    })
}

/// `tensorforge analyze gemm --json`.
#[pyfunction]
#[pyo3(signature = (m = None, n = None, k = None, *, batch = None, dtype = None, accumulate = false,
    preset = None, hw = None, hw_file = None, pe = None, clock_hz = None, sram_bytes = None,
    tile = None, dataflow = None, fill_drain = false))]
#[allow(clippy::too_many_arguments)]
fn _analyze_gemm(
    m: Option<u64>,
    n: Option<u64>,
    k: Option<u64>,
    batch: Option<u64>,
    dtype: Option<&str>,
    accumulate: bool,
    preset: Option<&str>,
    hw: Option<&str>,
    hw_file: Option<&str>,
    pe: Option<(u64, u64)>,
    clock_hz: Option<f64>,
    sram_bytes: Option<u64>,
    tile: Option<&str>,
    dataflow: Option<&str>,
    fill_drain: bool,
) -> PyResult<String> {
    guard(|| {
        let g = gemm_of(preset, (m, n, k), batch, dtype, accumulate)?;
        let spec = hardware(hw, hw_file)?;
        let o = options(&spec, pe, clock_hz, sram_bytes, tile, dataflow, fill_drain)?;
        to_json(&analyze_gemm(&g, &spec, &o).map_err(value_err)?)
    })
}

/// `tensorforge analyze conv2d --json` (`kernel`, `stride`, `pad`, `dilation` as (h, w)).
#[pyfunction]
#[pyo3(signature = (*, preset = None, batch = None, cin = None, cout = None, height = None,
    width = None, kernel = None, stride = None, pad = None, dilation = None, groups = None,
    dtype = None, hw = None, hw_file = None, pe = None, clock_hz = None, sram_bytes = None,
    tile = None, dataflow = None, fill_drain = false))]
#[allow(clippy::too_many_arguments)]
fn _analyze_conv2d(
    preset: Option<&str>,
    batch: Option<u64>,
    cin: Option<u64>,
    cout: Option<u64>,
    height: Option<u64>,
    width: Option<u64>,
    kernel: Option<(u64, u64)>,
    stride: Option<(u64, u64)>,
    pad: Option<(u64, u64)>,
    dilation: Option<(u64, u64)>,
    groups: Option<u64>,
    dtype: Option<&str>,
    hw: Option<&str>,
    hw_file: Option<&str>,
    pe: Option<(u64, u64)>,
    clock_hz: Option<f64>,
    sram_bytes: Option<u64>,
    tile: Option<&str>,
    dataflow: Option<&str>,
    fill_drain: bool,
) -> PyResult<String> {
    guard(|| {
        let mut c = match preset {
            Some(p) => conv2d_preset(p).map_err(value_err)?,
            None => {
                let (Some(ci), Some(co), Some(h), Some(w), Some((kh, kw))) =
                    (cin, cout, height, width, kernel)
                else {
                    return Err(value_err(
                        "give either `preset` or all of `cin`, `cout`, `height`, `width` and `kernel`",
                    ));
                };
                Conv2d::new(ci, co, h, w, kh, kw)
            }
        };
        if preset.is_some() {
            if let Some(v) = cin {
                c.in_channels = v;
            }
            if let Some(v) = cout {
                c.out_channels = v;
            }
            if let Some(v) = height {
                c.height = v;
            }
            if let Some(v) = width {
                c.width = v;
            }
            if let Some((h, w)) = kernel {
                (c.kernel_h, c.kernel_w) = (h, w);
            }
        }
        if let Some(v) = batch {
            c.batch = v;
        }
        if let Some(s) = stride {
            (c.stride_h, c.stride_w) = s;
        }
        if let Some(s) = pad {
            (c.pad_h, c.pad_w) = s;
        }
        if let Some(s) = dilation {
            (c.dilation_h, c.dilation_w) = s;
        }
        if let Some(g) = groups {
            c.groups = g;
        }
        if let Some(d) = dtype {
            c.dtype = self::dtype(d)?;
        }
        c.validate().map_err(value_err)?;
        let spec = hardware(hw, hw_file)?;
        let o = options(&spec, pe, clock_hz, sram_bytes, tile, dataflow, fill_drain)?;
        to_json(&analyze_conv2d(&c, &spec, &o).map_err(value_err)?)
    })
}

/// The run-time and storage fields every block-shaped analysis takes.
#[allow(clippy::too_many_arguments)]
fn apply_runtime(
    b: &mut TransformerBlock,
    batch: Option<u64>,
    seq: Option<u64>,
    phase: Option<&str>,
    kv_cache_len: Option<u64>,
    dt: Option<&str>,
    causal: bool,
    attention_kernel: Option<&str>,
    weight_dtype: Option<&str>,
    kv_dtype: Option<&str>,
    groups: (Option<u64>, bool),
) -> PyResult<()> {
    if let Some(v) = batch {
        b.batch = v;
    }
    if let Some(v) = seq {
        b.seq_len = v;
    }
    if let Some(p) = phase {
        b.phase = Phase::parse(p).map_err(value_err)?;
    }
    if let Some(v) = kv_cache_len {
        b.kv_cache_len = v;
    }
    if let Some(d) = dt {
        b.dtype = dtype(d)?;
    }
    if !causal {
        b.causal = false;
    }
    apply_storage(b, attention_kernel, weight_dtype, kv_dtype, groups)
}

fn apply_storage(
    b: &mut TransformerBlock,
    attention_kernel: Option<&str>,
    weight_dtype: Option<&str>,
    kv_dtype: Option<&str>,
    groups: (Option<u64>, bool),
) -> PyResult<()> {
    match groups {
        (Some(size), zero_points) => b.weight_groups = Some(QuantGroups { size, zero_points }),
        (None, true) => {
            return Err(value_err(
                "invalid value for `zero_points`: True needs `group_size` (the values per quantization group)",
            ))
        }
        (None, false) => {}
    }
    if let Some(k) = attention_kernel {
        b.attention_kernel = match k {
            "fused" => AttentionKernel::Fused,
            "materialized" => AttentionKernel::Materialized,
            other => {
                return Err(value_err(format!(
                    "invalid value for `attention_kernel`: `{other}` (valid: fused, materialized)"
                )))
            }
        };
    }
    if let Some(d) = weight_dtype {
        b.weight_dtype = Some(dtype(d)?);
    }
    if let Some(d) = kv_dtype {
        b.kv_dtype = Some(dtype(d)?);
    }
    Ok(())
}

/// `tensorforge analyze transformer --json`: one block from a preset or its widths.
#[pyfunction]
#[pyo3(signature = (preset = None, *, seq = None, d_model = None, heads = None, d_ff = None,
    kv_heads = None, head_dim = None, mlp = None, norm = None, batch = None, phase = None,
    kv_cache_len = None, dtype = None, causal = true, attention_kernel = None,
    weight_dtype = None, group_size = None, zero_points = false, kv_dtype = None, hw = None,
    hw_file = None))]
#[allow(clippy::too_many_arguments)]
fn _analyze_transformer(
    preset: Option<&str>,
    seq: Option<u64>,
    d_model: Option<u64>,
    heads: Option<u64>,
    d_ff: Option<u64>,
    kv_heads: Option<u64>,
    head_dim: Option<u64>,
    mlp: Option<&str>,
    norm: Option<&str>,
    batch: Option<u64>,
    phase: Option<&str>,
    kv_cache_len: Option<u64>,
    dtype: Option<&str>,
    causal: bool,
    attention_kernel: Option<&str>,
    weight_dtype: Option<&str>,
    group_size: Option<u64>,
    zero_points: bool,
    kv_dtype: Option<&str>,
    hw: Option<&str>,
    hw_file: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let mut b = match preset {
            Some(p) => transformer_preset(p).map_err(value_err)?,
            None => {
                let s = seq.or((phase == Some("decode")).then_some(1));
                let (Some(s), Some(d), Some(h), Some(f)) = (s, d_model, heads, d_ff) else {
                    return Err(value_err(
                        "give either `preset` or all of `seq`, `d_model`, `heads` and `d_ff`",
                    ));
                };
                TransformerBlock::new(s, d, h, f)
            }
        };
        if let Some(v) = d_model {
            b.d_model = v;
        }
        if let Some(v) = heads {
            b.heads = v;
        }
        if kv_heads.is_some() {
            b.kv_heads = kv_heads;
        }
        if head_dim.is_some() {
            b.head_dim = head_dim;
        }
        if let Some(v) = d_ff {
            b.d_ff = v;
        }
        if let Some(m) = mlp {
            b.mlp = MlpKind::parse(m).map_err(value_err)?;
        }
        if let Some(n) = norm {
            b.norm = NormKind::parse(n).map_err(value_err)?;
        }
        apply_runtime(
            &mut b,
            batch,
            seq,
            phase,
            kv_cache_len,
            dtype,
            causal,
            attention_kernel,
            weight_dtype,
            kv_dtype,
            (group_size, zero_points),
        )?;
        b.validate().map_err(value_err)?;
        let spec = hardware(hw, hw_file)?;
        to_json(&analyze_transformer(&b, &spec).map_err(value_err)?)
    })
}

fn mla_routing(
    m: &mut tensorforge_core::transformer::DecoderModel,
    mla_form: Option<&str>,
    routing: Option<&str>,
) -> PyResult<()> {
    if let Some(f) = mla_form {
        let Some(mla) = m.block.mla.as_mut() else {
            return Err(value_err(
                "`mla_form` needs a model with latent attention (kv_lora_rank in its config)",
            ));
        };
        mla.form = match f {
            "absorbed" => MlaForm::Absorbed,
            "naive" => MlaForm::Naive,
            o => {
                return Err(value_err(format!(
                    "invalid value for `mla_form`: `{o}` (valid: naive, absorbed)"
                )))
            }
        };
    }
    if let Some(r) = routing {
        let Some(moe) = m.block.moe.as_mut() else {
            return Err(value_err("`routing` needs a mixture-of-experts model"));
        };
        moe.routing = match r {
            "worst_case" => Routing::WorstCase,
            "expected" => Routing::Expected,
            o => {
                return Err(value_err(format!(
                    "invalid value for `routing`: `{o}` (valid: expected, worst_case)"
                )))
            }
        };
    }
    Ok(())
}

/// `tensorforge analyze model --config FILE --json`: a whole decoder from a Hugging Face
/// config (`config_text` named `config_source` in errors).
#[pyfunction]
#[pyo3(signature = (config_text, config_source, *, batch = None, seq = None, phase = None,
    kv_cache_len = None, dtype = None, causal = true, attention_kernel = None,
    weight_dtype = None, group_size = None, zero_points = false, kv_dtype = None,
    mla_form = None, routing = None, lm_head_tokens = None, hw = None, hw_file = None))]
#[allow(clippy::too_many_arguments)]
fn _analyze_model(
    config_text: &str,
    config_source: &str,
    batch: Option<u64>,
    seq: Option<u64>,
    phase: Option<&str>,
    kv_cache_len: Option<u64>,
    dtype: Option<&str>,
    causal: bool,
    attention_kernel: Option<&str>,
    weight_dtype: Option<&str>,
    group_size: Option<u64>,
    zero_points: bool,
    kv_dtype: Option<&str>,
    mla_form: Option<&str>,
    routing: Option<&str>,
    lm_head_tokens: Option<&str>,
    hw: Option<&str>,
    hw_file: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let ph = phase
            .map(Phase::parse)
            .transpose()
            .map_err(value_err)?
            .unwrap_or(Phase::Prefill);
        let s = match (seq, ph) {
            (Some(s), _) => s,
            (None, Phase::Decode) => 1,
            (None, Phase::Prefill) => {
                return Err(value_err("`seq` is required with a config in prefill"))
            }
        };
        let dt = dtype.map(self::dtype).transpose()?.unwrap_or(DType::Fp16);
        let mut m = decoder_from_hf_config(
            config_text,
            config_source,
            batch.unwrap_or(1),
            s,
            ph,
            kv_cache_len.unwrap_or(0),
            dt,
        )
        .map_err(value_err)?;
        if !causal {
            m.block.causal = false;
        }
        apply_storage(
            &mut m.block,
            attention_kernel,
            weight_dtype,
            kv_dtype,
            (group_size, zero_points),
        )?;
        mla_routing(&mut m, mla_form, routing)?;
        if let Some(t) = lm_head_tokens {
            m.lm_head_tokens = match t.trim().to_ascii_lowercase().as_str() {
                "all" => LmHeadTokens::All,
                "last" => LmHeadTokens::Last,
                _ => {
                    return Err(value_err(format!(
                        "invalid value for `lm_head_tokens`: `{t}` (valid: all, last)"
                    )))
                }
            };
        }
        m.validate().map_err(value_err)?;
        let spec = hardware(hw, hw_file)?;
        to_json(&analyze_model(&m, &spec).map_err(value_err)?)
    })
}

/// `tensorforge serve --config FILE --json`: tokens/s, latency and memory fit per batch and
/// context under a parallelism plan.
#[pyfunction]
#[pyo3(signature = (config_text, config_source, *, hw = None, hw_file = None, tp = 1, pp = 1,
    ep = 1, dp = 1, batch = None, context = None, dtype = None, weight_dtype = None,
    group_size = None, zero_points = false, kv_dtype = None, attention_kernel = "fused",
    mla_form = None, routing = None))]
#[allow(clippy::too_many_arguments)]
fn _serve(
    config_text: &str,
    config_source: &str,
    hw: Option<&str>,
    hw_file: Option<&str>,
    tp: u64,
    pp: u64,
    ep: u64,
    dp: u64,
    batch: Option<Vec<u64>>,
    context: Option<Vec<u64>>,
    dtype: Option<&str>,
    weight_dtype: Option<&str>,
    group_size: Option<u64>,
    zero_points: bool,
    kv_dtype: Option<&str>,
    attention_kernel: &str,
    mla_form: Option<&str>,
    routing: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let positive = |v: Vec<u64>, name: &str| -> PyResult<Vec<u64>> {
            if v.is_empty() || v.contains(&0) {
                return Err(value_err(format!(
                    "invalid value for `{name}`: {v:?} (expected a non-empty list of positive integers)"
                )));
            }
            Ok(v)
        };
        let batches = positive(batch.unwrap_or_else(|| DEFAULT_BATCHES.to_vec()), "batch")?;
        let contexts = positive(
            context.unwrap_or_else(|| DEFAULT_CONTEXTS.to_vec()),
            "context",
        )?;
        let dt = dtype.map(self::dtype).transpose()?.unwrap_or(DType::Bf16);
        let spec = hardware(hw, hw_file)?;
        let mut model =
            decoder_from_hf_config(config_text, config_source, 1, 1, Phase::Decode, 0, dt)
                .map_err(value_err)?;
        apply_storage(
            &mut model.block,
            Some(attention_kernel),
            weight_dtype,
            kv_dtype,
            (group_size, zero_points),
        )?;
        mla_routing(&mut model, mla_form, routing)?;
        let opts = ServeOptions {
            parallelism: Parallelism { tp, pp, ep, dp },
            batches,
            contexts,
        };
        to_json(&serve(&model, &spec, &opts).map_err(value_err)?)
    })
}

/// `tensorforge explore gemm --json`: every candidate of the supplied lists evaluated,
/// ranked, the winner's reason given.
#[pyfunction]
#[pyo3(signature = (m = None, n = None, k = None, *, tile_m, tile_n, tile_k, batch = None,
    dtype = None, preset = None, pe = None, schedules = None, dataflows = None,
    double_buffer = false, fill_drain = false, sram_bytes = None, clock_hz = None,
    max_candidates = None, top = 10, hw = None, hw_file = None, rank = None))]
#[allow(clippy::too_many_arguments)]
fn _explore_gemm(
    m: Option<u64>,
    n: Option<u64>,
    k: Option<u64>,
    tile_m: Vec<u64>,
    tile_n: Vec<u64>,
    tile_k: Vec<u64>,
    batch: Option<u64>,
    dtype: Option<&str>,
    preset: Option<&str>,
    pe: Option<Vec<(u64, u64)>>,
    schedules: Option<Vec<String>>,
    dataflows: Option<Vec<String>>,
    double_buffer: bool,
    fill_drain: bool,
    sram_bytes: Option<u64>,
    clock_hz: Option<f64>,
    max_candidates: Option<u64>,
    top: usize,
    hw: Option<&str>,
    hw_file: Option<&str>,
    rank: Option<&str>,
) -> PyResult<String> {
    guard(|| {
        let g = gemm_of(preset, (m, n, k), batch, dtype, false)?;
        let spec = hardware(hw, hw_file)?;
        let mut s = DesignSpace {
            rank: match rank {
                Some(r) => RankBy::parse(r).map_err(value_err)?,
                None => RankBy::Latency,
            },
            max_candidates: max_candidates.unwrap_or(DEFAULT_MAX_CANDIDATES),
            tile_m,
            tile_n,
            tile_k,
            double_buffer,
            fill_drain,
            sram_bytes,
            clock_hz,
            ..DesignSpace::default()
        };
        if let Some(p) = pe {
            s.pe_shapes = p;
        }
        if let Some(v) = schedules {
            s.orders = if v.len() == 1 && v[0] == "all" {
                LoopOrder::ALL.to_vec()
            } else {
                v.iter()
                    .map(|x| LoopOrder::parse(x))
                    .collect::<Result<_, _>>()
                    .map_err(value_err)?
            };
        }
        if let Some(v) = dataflows {
            s.dataflows = if v.len() == 1 && v[0] == "all" {
                Dataflow::ALL.to_vec()
            } else {
                v.iter()
                    .map(|x| Dataflow::parse(x))
                    .collect::<Result<_, _>>()
                    .map_err(value_err)?
            };
        }
        s.validate().map_err(value_err)?;
        to_json(&explore(&g, &spec, &s, top).map_err(value_err)?)
    })
}

/// `tensorforge hw list --json`.
#[pyfunction]
fn _hw_list() -> PyResult<String> {
    guard(|| {
        to_json(&serde_json::json!({
            "schema_version": tensorforge_core::hardware::HARDWARE_SCHEMA_VERSION,
            "presets": presets::hardware_presets(),
        }))
    })
}

/// `tensorforge hw show NAME --json` (or a hardware file's contents, validated).
#[pyfunction]
#[pyo3(signature = (name = None, *, hw_file = None))]
fn _hw_show(name: Option<&str>, hw_file: Option<&str>) -> PyResult<String> {
    guard(|| to_json(&hardware(name, hw_file)?))
}

/// This machine as the package's benchmarks name it: CPU model, logical cores, and the
/// vector level the kernels run at (`TENSORFORGE_SIMD` caps it), as JSON text.
#[pyfunction]
fn _machine() -> PyResult<String> {
    guard(|| {
        let d = tensorforge_measure::context::device_context(1);
        to_json(&serde_json::json!({
            "cpu_model": d.cpu_model,
            "logical_cores": d.logical_cores,
            "simd": tensorforge_kernels::vmath::level().name(),
        }))
    })
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_machine, m)?)?;
    m.add_function(wrap_pyfunction!(_analyze_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(_analyze_conv2d, m)?)?;
    m.add_function(wrap_pyfunction!(_analyze_transformer, m)?)?;
    m.add_function(wrap_pyfunction!(_analyze_model, m)?)?;
    m.add_function(wrap_pyfunction!(_serve, m)?)?;
    m.add_function(wrap_pyfunction!(_explore_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(_hw_list, m)?)?;
    m.add_function(wrap_pyfunction!(_hw_show, m)?)?;
    Ok(())
}
