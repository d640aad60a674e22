//! `tensorforge explore gemm|conv2d|transformer`: rank user-supplied candidates.

use super::analyze::{BlockArgs, ConvShapeArgs, GemmShapeArgs};
use super::{parse_list, parse_pe, parse_positive, print_json, read_text, HwArgs};
use crate::render;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use tensorforge_core::dse::{explore, explore_many, DesignSpace, RankBy, DEFAULT_MAX_CANDIDATES};
use tensorforge_core::{Dataflow, LoopOrder, NamedGemm};

/// Arguments of `explore`.
#[derive(Args, Debug)]
pub struct ExploreArgs {
    #[command(subcommand)]
    kind: ExploreKind,
}

#[derive(Subcommand, Debug)]
enum ExploreKind {
    /// One GEMM.
    Gemm {
        #[command(flatten)]
        shape: GemmShapeArgs,
        #[command(flatten)]
        space: SpaceArgs,
    },
    /// A convolution's lowered GEMM.
    Conv2d {
        #[command(flatten)]
        shape: ConvShapeArgs,
        #[command(flatten)]
        space: SpaceArgs,
    },
    /// Every GEMM of a transformer block: best mapping per GEMM, summed.
    Transformer {
        #[command(flatten)]
        block: BlockArgs,
        #[command(flatten)]
        space: SpaceArgs,
    },
}

/// The candidate lists (or a candidates file) and output options.
#[derive(Args, Debug)]
struct SpaceArgs {
    #[command(flatten)]
    hw: HwArgs,
    /// A candidates file (TOML with the DesignSpace fields); list flags override its fields.
    #[arg(long, value_name = "FILE")]
    candidates: Option<String>,
    /// Tile sizes along M, comma-separated.
    #[arg(long)]
    tile_m: Option<String>,
    /// Tile sizes along N, comma-separated.
    #[arg(long)]
    tile_n: Option<String>,
    /// Tile sizes along K, comma-separated.
    #[arg(long)]
    tile_k: Option<String>,
    /// PE shapes ROWSxCOLS, comma-separated (default: the chip's own array).
    #[arg(long)]
    pe: Option<String>,
    /// Schedules / loop orders, comma-separated, or `all` (default all six).
    #[arg(long)]
    schedules: Option<String>,
    /// Dataflows, comma-separated (os, ws, is or full names; default output-stationary).
    #[arg(long)]
    dataflows: Option<String>,
    /// Require double-buffered tiles to fit: 2·(A+B)+C.
    #[arg(long)]
    double_buffer: bool,
    /// Add the systolic fill/drain term.
    #[arg(long)]
    fill_drain: bool,
    /// SRAM capacity in bytes (default: the chip's tile buffer).
    #[arg(long)]
    sram_bytes: Option<u64>,
    /// Clock in Hz (required when the chip has no PE array).
    #[arg(long)]
    clock_hz: Option<f64>,
    /// Refuse, before evaluating, a space larger than this.
    #[arg(long)]
    max_candidates: Option<u64>,
    /// What to minimize first: latency (default), energy, or edp (energy × overlapped
    /// time). Energy needs sourced energies for the PE array, the tile buffer and DRAM.
    #[arg(long, value_name = "METRIC")]
    rank: Option<String>,
    /// How many ranked candidates to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl SpaceArgs {
    fn space(&self) -> Result<DesignSpace> {
        let mut s = match &self.candidates {
            Some(f) => DesignSpace::from_toml_str(&read_text(f)?, f)?,
            None => DesignSpace {
                max_candidates: DEFAULT_MAX_CANDIDATES,
                ..DesignSpace::default()
            },
        };
        let ints = |v: &str, flag: &str| parse_list(v, flag, |x| parse_positive(x, flag));
        if let Some(v) = &self.tile_m {
            s.tile_m = ints(v, "--tile-m")?;
        }
        if let Some(v) = &self.tile_n {
            s.tile_n = ints(v, "--tile-n")?;
        }
        if let Some(v) = &self.tile_k {
            s.tile_k = ints(v, "--tile-k")?;
        }
        if let Some(v) = &self.pe {
            s.pe_shapes = parse_list(v, "--pe", parse_pe)?;
        }
        if let Some(v) = &self.schedules {
            s.orders = if v.trim() == "all" {
                LoopOrder::ALL.to_vec()
            } else {
                parse_list(v, "--schedules", |x| Ok(LoopOrder::parse(x)?))?
            };
        }
        if let Some(v) = &self.dataflows {
            s.dataflows = if v.trim() == "all" {
                Dataflow::ALL.to_vec()
            } else {
                parse_list(v, "--dataflows", |x| Ok(Dataflow::parse(x)?))?
            };
        }
        s.double_buffer |= self.double_buffer;
        s.fill_drain |= self.fill_drain;
        if self.sram_bytes.is_some() {
            s.sram_bytes = self.sram_bytes;
        }
        if self.clock_hz.is_some() {
            s.clock_hz = self.clock_hz;
        }
        if let Some(m) = self.max_candidates {
            s.max_candidates = m;
        }
        if let Some(r) = &self.rank {
            s.rank = RankBy::parse(r)?;
        }
        if s.tile_m.is_empty() || s.tile_n.is_empty() || s.tile_k.is_empty() {
            bail!("give the tile lists --tile-m, --tile-n and --tile-k (or a --candidates file with tile_m, tile_n, tile_k)");
        }
        s.validate()?;
        Ok(s)
    }
}

fn many(gemms: &[NamedGemm], sp: &SpaceArgs) -> Result<()> {
    let hw = sp.hw.load()?;
    let space = sp.space()?;
    let r = explore_many(gemms, &hw, &space, sp.top).map_err(flag_hint)?;
    if sp.json {
        print_json(&r)
    } else {
        print!("{}", render::explore_many(&r));
        Ok(())
    }
}

/// Run `explore`.
pub fn run(a: ExploreArgs) -> Result<()> {
    match a.kind {
        ExploreKind::Gemm { shape, space: sp } => {
            let g = shape.gemm()?;
            let hw = sp.hw.load()?;
            let space = sp.space()?;
            let r = explore(&g, &hw, &space, sp.top).map_err(flag_hint)?;
            if sp.json {
                print_json(&r)
            } else {
                print!("{}", render::explore(&r));
                Ok(())
            }
        }
        ExploreKind::Conv2d { shape, space } => {
            let c = shape.conv()?;
            let g = NamedGemm::new("lowered_conv", c.lowered_gemm()?);
            many(&[g], &space)
        }
        ExploreKind::Transformer { block, space } => {
            let b = block.block()?;
            many(&b.decompose()?.gemms, &space)
        }
    }
}

/// The Core names its cap `max_candidates`; on the command line it is a flag.
fn flag_hint(e: tensorforge_core::CoreError) -> anyhow::Error {
    match e {
        tensorforge_core::CoreError::TooManyCandidates { .. } => {
            anyhow::anyhow!("{e} (--max-candidates N)")
        }
        e => e.into(),
    }
}
