//! `tensorforge serve`: the serving view of a decoder model read from a Hugging Face
//! `config.json` — prefill and decode time lower bounds, tokens/s, the binding roof, memory
//! per device and the largest batch that fits, over a grid of batch sizes and context
//! lengths, split over devices by `--tp/--pp/--ep/--dp`. It parses, calls
//! `tensorforge_core::serve::serve`, prints (a table, or `--json`), and writes the plot that
//! `tensorforge_job::serve_plot` draws (`--svg`). Every number is computed in the Core.

use super::{parse_list, parse_positive, print_json, read_text, HwArgs};
use crate::fmt;
use crate::render::{self, Table};
use anyhow::{bail, Result};
use clap::Args;
use std::fmt::Write;
use std::path::Path;
use tensorforge_core::gemm::QuantGroups;
use tensorforge_core::parallel::Parallelism;
use tensorforge_core::serve::{
    serve, ServeOptions, ServeReport, DEFAULT_BATCHES, DEFAULT_CONTEXTS,
};
use tensorforge_core::transformer::{
    decoder_from_hf_config, AttentionKernel, MlaForm, Phase, Routing,
};
use tensorforge_core::DType;

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// `tensorforge serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A Hugging Face config.json (read offline).
    #[arg(long, value_name = "FILE")]
    pub config: String,
    #[command(flatten)]
    pub hw: HwArgs,
    /// Tensor-parallel degree (devices splitting every layer).
    #[arg(long, default_value_t = 1)]
    pub tp: u64,
    /// Pipeline-parallel degree (stages of consecutive layers).
    #[arg(long, default_value_t = 1)]
    pub pp: u64,
    /// Expert-parallel degree (mixture-of-experts models only).
    #[arg(long, default_value_t = 1)]
    pub ep: u64,
    /// Data-parallel degree (whole replicas; multiplies tokens/s).
    #[arg(long, default_value_t = 1)]
    pub dp: u64,
    /// Decode batch sizes, sequences per replica (comma-separated).
    #[arg(long, value_name = "LIST", default_value_t = list(DEFAULT_BATCHES))]
    pub batch: String,
    /// Context lengths: prompt tokens for prefill, cached tokens for decode (comma-separated).
    #[arg(long, value_name = "LIST", default_value_t = list(DEFAULT_CONTEXTS))]
    pub context: String,
    /// Element type of activations and arithmetic, and of weights and KV cache unless
    /// --weight-dtype / --kv-dtype say otherwise (default bf16).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Storage dtype of the weights when narrower than --dtype (weight-only quantization,
    /// e.g. int4, int8, fp8).
    #[arg(long)]
    pub weight_dtype: Option<String>,
    /// Weight-only quantization groups: one fp16 scale per N weights along each matrix's
    /// input dimension, counted in the weight bytes (GPTQ and AWQ: 128; needs --weight-dtype).
    #[arg(long, value_name = "N")]
    pub group_size: Option<u64>,
    /// With --group-size: a zero point per group too, at the weight dtype's width.
    #[arg(long, requires = "group_size")]
    pub zero_points: bool,
    /// Storage dtype of the KV cache (default: --dtype).
    #[arg(long)]
    pub kv_dtype: Option<String>,
    /// How attention runs: fused (flash attention, what serving stacks run; the default here)
    /// or materialized (scores and probabilities cross DRAM, `analyze model`'s default).
    #[arg(long, value_parser = ["fused", "materialized"], default_value = "fused")]
    pub attention_kernel: String,
    /// Latent attention's form (models with kv_lora_rank): naive (up-project every cached
    /// latent, the default) or absorbed (attend over the latents).
    #[arg(long, value_parser = ["naive", "absorbed"])]
    pub mla_form: Option<String>,
    /// Distinct experts a batch touches (mixture-of-experts models): expected (uniform
    /// routing, the default) or worst_case (min(E, T·k)).
    #[arg(long, value_parser = ["expected", "worst_case"])]
    pub routing: Option<String>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Write the plot of tokens/s against batch (one line per context) to this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<String>,
}

/// Run `serve`.
pub fn run(a: ServeArgs) -> Result<()> {
    let batches = parse_list(&a.batch, "--batch", |s| parse_positive(s, "--batch"))?;
    let contexts = parse_list(&a.context, "--context", |s| parse_positive(s, "--context"))?;
    let dtype = a
        .dtype
        .as_deref()
        .map(DType::parse)
        .transpose()?
        .unwrap_or(DType::Bf16);
    let hw = a.hw.load()?;
    let text = read_text(&a.config)?;
    let mut model = decoder_from_hf_config(&text, &a.config, 1, 1, Phase::Decode, 0, dtype)?;
    model.block.attention_kernel = if a.attention_kernel == "materialized" {
        AttentionKernel::Materialized
    } else {
        AttentionKernel::Fused
    };
    if let Some(d) = &a.weight_dtype {
        model.block.weight_dtype = Some(DType::parse(d)?);
    }
    if let Some(size) = a.group_size {
        model.block.weight_groups = Some(QuantGroups {
            size,
            zero_points: a.zero_points,
        });
    }
    if let Some(d) = &a.kv_dtype {
        model.block.kv_dtype = Some(DType::parse(d)?);
    }
    if let Some(f) = &a.mla_form {
        let Some(mla) = model.block.mla.as_mut() else {
            bail!("--mla-form needs a model with latent attention (kv_lora_rank in its config)");
        };
        mla.form = if f == "absorbed" {
            MlaForm::Absorbed
        } else {
            MlaForm::Naive
        };
    }
    if let Some(r) = &a.routing {
        let Some(moe) = model.block.moe.as_mut() else {
            bail!("--routing needs a mixture-of-experts model");
        };
        moe.routing = if r == "worst_case" {
            Routing::WorstCase
        } else {
            Routing::Expected
        };
    }
    let opts = ServeOptions {
        parallelism: Parallelism {
            tp: a.tp,
            pp: a.pp,
            ep: a.ep,
            dp: a.dp,
        },
        batches,
        contexts,
    };
    let r = serve(&model, &hw, &opts)?;
    if let Some(path) = &a.svg {
        let p = Path::new(path);
        if p.file_name().is_none() {
            bail!("invalid value for `--svg`: `{path}` is not a file name");
        }
        tensorforge_store::write_atomic(p, tensorforge_job::serve_plot::serve_svg(&r).as_bytes())?;
    }
    if a.json {
        print_json(&r)
    } else {
        print!("{}", report(&r));
        Ok(())
    }
}

fn fits(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// The human-readable serving report.
pub fn report(r: &ServeReport) -> String {
    let p = &r.parallelism;
    // One device per replica sends nothing: its interconnect column reads `-`.
    let comm = |s: f64| {
        if r.replica_devices > 1 {
            fmt::time(s)
        } else {
            "-".to_string()
        }
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Serving view of {} on {} ({}): lower bounds from the model, not measurements",
        r.model, r.hardware, r.dtype
    );
    let _ = writeln!(
        o,
        "  storage: weights {}, KV cache {}; attention {}",
        r.weight_dtype,
        r.kv_dtype,
        match r.attention_kernel {
            AttentionKernel::Fused => "fused (flash attention)",
            AttentionKernel::Materialized => "materialized (scores and probabilities in DRAM)",
        }
    );
    let _ = writeln!(
        o,
        "  split: tp {} x pp {} x ep {} = {} device(s) per replica, dp {} replica(s), {} device(s)",
        p.tp, p.pp, p.ep, r.replica_devices, p.dp, r.devices
    );
    let _ = writeln!(
        o,
        "  interconnect: {}",
        match (&r.interconnect, r.interconnect_bytes_per_s) {
            (Some(n), Some(bw)) => format!("{n}, {} per device each way", fmt::bandwidth(bw)),
            _ => "none given by the hardware".into(),
        }
    );
    let _ = writeln!(
        o,
        "  weights: {} parameters, {} on the device holding the most; DRAM per device: {}",
        fmt::count(r.weight_params as f64, ""),
        fmt::bytes(r.weight_bytes_per_device as f64),
        r.memory_capacity_bytes_per_device
            .map_or("unknown".into(), |c| fmt::bytes(c as f64))
    );
    let _ = writeln!(
        o,
        "\nPrefill, one request (time to first token without queueing)"
    );
    let mut t = Table::new(&[
        "context",
        "time",
        "prompt tokens/s",
        "bound",
        "compute",
        "memory",
        "interconnect",
    ]);
    for x in &r.prefill {
        t.row(vec![
            x.context.to_string(),
            fmt::time(x.time_s),
            fmt::count(x.tokens_per_s, ""),
            x.binding_roof.clone(),
            fmt::time(x.compute_time_s),
            fmt::time(x.memory_time_s),
            comm(x.interconnect_time_s),
        ]);
    }
    o.push_str(&t.render());
    let _ = writeln!(
        o,
        "\nDecode (one step: every sequence gains a token; time per output token)"
    );
    let mut t = Table::new(&[
        "context",
        "batch",
        "time/token",
        "tokens/s",
        "bound",
        "interconnect",
        "KV cache/device",
        "memory/device",
        "fits",
    ]);
    for x in &r.decode {
        t.row(vec![
            x.context.to_string(),
            x.batch.to_string(),
            fmt::time(x.step_time_s),
            fmt::count(x.tokens_per_s, ""),
            x.binding_roof.clone(),
            comm(x.interconnect_time_s),
            fmt::bytes(x.kv_cache_bytes_per_device as f64),
            fmt::bytes(x.memory_bytes_per_device as f64),
            fits(x.fits).into(),
        ]);
    }
    o.push_str(&t.render());
    // Where a decode step's interconnect time goes: the first decode point's collectives,
    // each as latency (α₀ + steps · α) plus bytes over bandwidth.
    if let Some(x) = r.decode.iter().find(|x| !x.collectives.is_empty()) {
        let _ = writeln!(
            o,
            "\nCollectives of one decode step (context {}, batch {}): latency + bytes / bandwidth",
            x.context, x.batch
        );
        let mut t = Table::new(&[
            "collective",
            "where",
            "count",
            "devices",
            "bytes/device",
            "steps",
            "latency",
            "bandwidth term",
            "total",
        ]);
        for c in &x.collectives {
            t.row(vec![
                format!("{:?}", c.kind),
                c.name.clone(),
                c.count.to_string(),
                c.group_devices.to_string(),
                fmt::bytes(c.bytes_per_device as f64),
                c.steps.to_string(),
                fmt::time(c.latency_s),
                fmt::time(c.bandwidth_time_s),
                fmt::time(c.total_time_s),
            ]);
        }
        o.push_str(&t.render());
    }
    let _ = writeln!(
        o,
        "\nLargest batch that fits (weights + KV cache per device)"
    );
    let mut t = Table::new(&["context", "KV cache per sequence", "largest batch"]);
    for x in &r.largest_batch {
        t.row(vec![
            x.context.to_string(),
            fmt::bytes(x.kv_cache_bytes_per_sequence as f64),
            x.largest_batch
                .map_or("unknown (no DRAM capacity)".into(), |n| n.to_string()),
        ]);
    }
    o.push_str(&t.render());
    o.push('\n');
    o.push_str(&render::limitations(&r.limitations));
    o
}
