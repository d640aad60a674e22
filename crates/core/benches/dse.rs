//! DSE throughput: candidates explored per second by `tensorforge_core::dse::explore`
//! (every candidate counted, checked for feasibility and placed in the ranking, the tie
//! count and the Pareto front; see `Prepared::eval_range` for which records need not be
//! built to do that).
//!
//! `cargo bench -p tensorforge-core --bench dse` runs criterion over five cases on one
//! 1024×1024×1024 fp16 GEMM on the `balanced` preset (32×32 PEs at 1 GHz, 512 KiB SRAM,
//! 100 GB/s), all 6 loop orders:
//!
//! - `explore_1024_balanced`: 16 values per tile list (16..=256 step 16), 4 PE shapes, all 3
//!   dataflows: 16³ · 4 · 6 · 3 = 294,912 candidates, every one of them feasible (the
//!   largest tile, 256×256×256 fp16, needs 3 · 128 KiB = 384 KiB ≤ 512 KiB).
//! - `explore_1024_balanced_double_buffer_fill_drain`: the same with double buffering and
//!   fill/drain: 3,240 candidates become infeasible (only counted); its element count is the
//!   291,672 feasible ones.
//! - `explore_1024_balanced_25pe`: 13 values per tile list (16..=208 step 16), 25 PE shapes
//!   (rows and columns each one of 8, 16, 32, 64, 128), all 3 dataflows:
//!   13³ · 25 · 6 · 3 = 988,650 candidates, all feasible (208×208×208 fp16 needs
//!   3 · 84,500 B = 253,500 B).
//! - `explore_1024_balanced_4pe_os` and `explore_1024_balanced_25pe_os`: the CLI's default
//!   dataflow list (output-stationary only), so a (tile, PE shape) group holds 6 candidates
//!   instead of 18 and the once-per-group work (the Pareto insertion) weighs three times as
//!   much; 18 values per tile list (16..=288 step 16; 288×288×288 fp16 needs
//!   3 · 165,888 B = 497,664 B ≤ 512 KiB, all feasible), with the 4 PE shapes
//!   (18³ · 4 · 6 = 139,968 candidates) or the 25 (18³ · 25 · 6 = 874,800).
//!
//! - `explore_1024_balanced_energy` and `explore_1024_balanced_25pe_edp`: the first and the
//!   third space ranked by energy and by energy-delay product (every candidate's per-level
//!   traffic and energy, `crate::levels`, with the preset's Horowitz 45 nm energies).
//!
//! `TF_DSE_ROUNDS=N` replaces criterion by a plain loop for comparing two builds on a shared
//! machine: for each case, N rounds of `TF_DSE_CALLS` (default 20) timed `explore` calls
//! after one warm-up call. Each round gives candidates per second (evaluated candidates of
//! all calls / the round's wall time) and per CPU-second (the same over the CPU time all
//! threads of the process spent in the round, from `/proc/self/task/*/schedstat`; less
//! sensitive to other work on a shared machine, but it counts rayon's idle spinning too);
//! one line per case prints min / median / max of each over the rounds, in millions.
//! `TF_DSE_CASE=NAME` runs one case only. Run the built binary directly, e.g.
//! `TF_DSE_ROUNDS=7 target/release/deps/dse-<hash> --bench`.

use criterion::{black_box, Criterion, Throughput};
use std::time::{Duration, Instant};
use tensorforge_core::dse::{explore, DesignSpace, RankBy};
use tensorforge_core::mapping::Dataflow;
use tensorforge_core::{presets, DType, Gemm};

/// The few-PE list: 16 tile values per dimension, 4 PE shapes.
fn space() -> DesignSpace {
    let tiles: Vec<u64> = (1..=16).map(|i| i * 16).collect();
    DesignSpace {
        tile_m: tiles.clone(),
        tile_n: tiles.clone(),
        tile_k: tiles,
        pe_shapes: vec![(16, 16), (32, 32), (16, 64), (64, 16)],
        orders: vec![],
        dataflows: Dataflow::ALL.to_vec(),
        ..DesignSpace::default()
    }
}

/// The 25-PE list: 13 tile values per dimension, the 25 PE shapes of [`pe_25`].
fn space_25pe() -> DesignSpace {
    let tiles: Vec<u64> = (1..=13).map(|i| i * 16).collect();
    DesignSpace {
        tile_m: tiles.clone(),
        tile_n: tiles.clone(),
        tile_k: tiles,
        pe_shapes: pe_25(),
        orders: vec![],
        dataflows: Dataflow::ALL.to_vec(),
        ..DesignSpace::default()
    }
}

/// The 25 PE shapes: every (rows, cols) in {8, 16, 32, 64, 128}².
fn pe_25() -> Vec<(u64, u64)> {
    let sides = [8u64, 16, 32, 64, 128];
    sides
        .iter()
        .flat_map(|&r| sides.iter().map(move |&c| (r, c)))
        .collect()
}

/// One dataflow (the CLI's default), 18 tile values per dimension, the given PE shapes.
fn space_os(pe_shapes: Vec<(u64, u64)>) -> DesignSpace {
    let tiles: Vec<u64> = (1..=18).map(|i| i * 16).collect();
    DesignSpace {
        tile_m: tiles.clone(),
        tile_n: tiles.clone(),
        tile_k: tiles,
        pe_shapes,
        orders: vec![],
        dataflows: vec![],
        ..DesignSpace::default()
    }
}

/// `(name, space, candidates_total, evaluated)` of every case, checked once.
fn cases() -> Vec<(&'static str, DesignSpace, u64, u64)> {
    vec![
        ("explore_1024_balanced", space(), 294_912, 294_912),
        (
            "explore_1024_balanced_double_buffer_fill_drain",
            DesignSpace {
                double_buffer: true,
                fill_drain: true,
                ..space()
            },
            294_912,
            291_672,
        ),
        ("explore_1024_balanced_25pe", space_25pe(), 988_650, 988_650),
        (
            "explore_1024_balanced_4pe_os",
            space_os(space().pe_shapes),
            139_968,
            139_968,
        ),
        (
            "explore_1024_balanced_25pe_os",
            space_os(pe_25()),
            874_800,
            874_800,
        ),
        (
            "explore_1024_balanced_energy",
            DesignSpace {
                rank: RankBy::Energy,
                ..space()
            },
            294_912,
            294_912,
        ),
        (
            "explore_1024_balanced_25pe_edp",
            DesignSpace {
                rank: RankBy::Edp,
                ..space_25pe()
            },
            988_650,
            988_650,
        ),
    ]
}

fn bench_dse(c: &mut Criterion) {
    let hw = presets::hardware("balanced").expect("balanced preset");
    let g = Gemm::new(1024, 1024, 1024, DType::Fp16).expect("gemm");
    let mut group = c.benchmark_group("dse");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5));
    for (name, s, total, evaluated) in cases() {
        let r = explore(&g, &hw, &s, 10).expect("explore");
        assert_eq!((r.candidates_total, r.evaluated), (total, evaluated));
        eprintln!(
            "dse/{name}: {} candidates, {} evaluated, infeasible {:?}; single run {:.3} ms = {:.1} M evaluations/s; pareto {}; best {}",
            r.candidates_total,
            r.evaluated,
            r.infeasible,
            r.elapsed_s * 1e3,
            r.evaluations_per_s / 1e6,
            r.pareto.len(),
            r.why.split(". ").next().unwrap_or("")
        );
        group.throughput(Throughput::Elements(r.evaluated));
        group.bench_function(name, |b| {
            b.iter(|| explore(black_box(&g), black_box(&hw), black_box(&s), 10).expect("explore"))
        });
    }
    group.finish();
}

/// The `TF_DSE_ROUNDS` mode: min / median / max candidates per second over rounds.
fn rounds(n: usize) {
    let calls: usize = std::env::var("TF_DSE_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let hw = presets::hardware("balanced").expect("balanced preset");
    let g = Gemm::new(1024, 1024, 1024, DType::Fp16).expect("gemm");
    let only = std::env::var("TF_DSE_CASE").ok();
    for (name, s, total, evaluated) in cases() {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let r = explore(&g, &hw, &s, 10).expect("explore");
        assert_eq!((r.candidates_total, r.evaluated), (total, evaluated));
        let (mut rates, mut cpu_rates) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (t, c) = (Instant::now(), cpu_ns());
            for _ in 0..calls {
                black_box(explore(black_box(&g), &hw, black_box(&s), 10).expect("explore"));
            }
            let work = (evaluated * calls as u64) as f64;
            rates.push(work / t.elapsed().as_secs_f64());
            if let (Some(c0), Some(c1)) = (c, cpu_ns()) {
                cpu_rates.push(work / ((c1 - c0) as f64 * 1e-9));
            }
        }
        let mmm = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            let k = v.len();
            format!(
                "min {:.1} / median {:.1} / max {:.1}",
                v[0] / 1e6,
                v[k / 2] / 1e6,
                v[k - 1] / 1e6
            )
        };
        let cpu = if cpu_rates.len() == n {
            format!("; per CPU-second {}", mmm(&mut cpu_rates))
        } else {
            String::new()
        };
        println!(
            "{name}: {evaluated} candidates x {calls} calls, {n} rounds, M candidates/s {}{cpu}",
            mmm(&mut rates)
        );
    }
}

/// CPU time of every thread of this process so far, ns (the first field of each
/// `/proc/self/task/*/schedstat`); `None` where that is not available.
fn cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let text = std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
        total += text.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

fn main() {
    if let Some(n) = std::env::var("TF_DSE_ROUNDS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        rounds(n);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_dse(&mut c);
    c.final_summary();
}
