//! DSE throughput: candidates fully evaluated per second by `tensorforge_core::dse::explore`.
//!
//! `cargo bench -p tensorforge-core --bench dse`. One 1024×1024×1024 fp16 GEMM on the
//! `balanced` preset (32×32 PEs at 1 GHz, 512 KiB SRAM, 100 GB/s): 16 values per tile list
//! (16..=256 step 16), 4 PE shapes, all 6 loop orders and all 3 dataflows =
//! 16³ · 4 · 6 · 3 = 294,912 candidates, every one of them feasible (the largest tile,
//! 256×256×256 fp16, needs 3 · 128 KiB = 384 KiB ≤ 512 KiB), so the reported element rate is
//! full evaluations per second. A second case turns on double buffering and fill/drain:
//! 3,240 candidates become infeasible (only counted), and its element count is the
//! 291,672 feasible, fully evaluated candidates.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;
use tensorforge_core::dse::{explore, DesignSpace};
use tensorforge_core::mapping::Dataflow;
use tensorforge_core::{presets, DType, Gemm};

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

fn bench_dse(c: &mut Criterion) {
    let hw = presets::hardware("balanced").expect("balanced preset");
    let g = Gemm::new(1024, 1024, 1024, DType::Fp16).expect("gemm");
    let mut group = c.benchmark_group("dse");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5));

    let s = space();
    let r = explore(&g, &hw, &s, 10).expect("explore");
    assert_eq!(r.candidates_total, 294_912);
    assert_eq!(
        r.evaluated, r.candidates_total,
        "every candidate is feasible"
    );
    eprintln!(
        "dse/explore_1024_balanced: {} candidates, {} evaluated; single run {:.3} ms = {:.1} M evaluations/s; best {}",
        r.candidates_total,
        r.evaluated,
        r.elapsed_s * 1e3,
        r.evaluations_per_s / 1e6,
        r.why.split(". ").next().unwrap_or("")
    );
    group.throughput(Throughput::Elements(r.evaluated));
    group.bench_function("explore_1024_balanced", |b| {
        b.iter(|| explore(black_box(&g), black_box(&hw), black_box(&s), 10).expect("explore"))
    });

    let s2 = DesignSpace {
        double_buffer: true,
        fill_drain: true,
        ..space()
    };
    let r2 = explore(&g, &hw, &s2, 10).expect("explore");
    eprintln!(
        "dse/explore_1024_balanced_db_fd: {} candidates, {} evaluated, infeasible {:?}",
        r2.candidates_total, r2.evaluated, r2.infeasible
    );
    group.throughput(Throughput::Elements(r2.evaluated));
    group.bench_function("explore_1024_balanced_double_buffer_fill_drain", |b| {
        b.iter(|| explore(black_box(&g), black_box(&hw), black_box(&s2), 10).expect("explore"))
    });
    group.finish();
}

criterion_group!(benches, bench_dse);
criterion_main!(benches);
