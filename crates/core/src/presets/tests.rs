//! Tests of the built-in presets: every embedded hardware file parses and is named after
//! itself, each cites its sources, and the hand-checked figures of the real devices.

use super::*;
use crate::hardware::HardwareSpec;

const MIB: u64 = 1 << 20;
const GB: u64 = 1_000_000_000;

/// The reference model's abstract accelerators (the first four presets).
const ABSTRACT: [&str; 4] = ["small", "balanced", "compute_heavy", "bandwidth_heavy"];

/// The real-device presets.
fn devices() -> Vec<HardwareSpec> {
    hardware_presets()
        .into_iter()
        .filter(|h| !ABSTRACT.contains(&h.name.as_str()))
        .collect()
}

#[test]
fn every_embedded_file_parses_and_is_named_after_itself() {
    // `hardware_presets` parses these same texts and panics on an error: this test is what
    // keeps that panic out of users' hands.
    for (name, text) in HARDWARE_FILES {
        let h = HardwareSpec::from_toml_str(text, &format!("{name}.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&h.name, name);
    }
    // Abstract presets first, in order.
    let names: Vec<_> = HARDWARE_FILES.iter().map(|(n, _)| *n).collect();
    assert_eq!(names[..4], ABSTRACT);
}

/// The source keys (`[STAS]`, `[NV-H100-JP]`, ...) that `text` mentions: a `[`, an upper-case
/// letter, then letters, digits and `-`, not right after a letter (`baseLatencies[Ring]`).
fn keys(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut v = vec![];
    for (i, _) in text.match_indices('[') {
        if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b']') {
            continue;
        }
        let rest = &text[i + 1..];
        let Some(end) = rest.find(']') else { continue };
        let k = &rest[..end];
        if k.starts_with(|c: char| c.is_ascii_uppercase())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            v.push(k.to_string());
        }
    }
    v
}

#[test]
fn every_source_key_a_file_mentions_is_cited_in_full() {
    for (name, text) in HARDWARE_FILES {
        let h = HardwareSpec::from_toml_str(text, name).unwrap();
        // Each source is a full citation (a title and a URL or repository@commit:path), never a
        // bare key or a path outside the repository.
        let defined: Vec<String> = h
            .sources
            .iter()
            .map(|s| {
                assert!(!s.contains("shared/"), "{name}: {s}");
                keys(s).into_iter().next().unwrap_or_default()
            })
            .collect();
        for s in &h.sources {
            let located = s.contains("http")
                || s.contains("GitHub ")
                || s.contains("docs/model.md")
                || s.contains("not recorded");
            assert!(
                located && s.len() > 40,
                "{name}: source without a location: {s}"
            );
        }
        // Every key in a comment or a note is one of the file's sources.
        let comments: String = text
            .lines()
            .filter_map(|l| l.find('#').map(|i| &l[i..]))
            .collect::<Vec<_>>()
            .join("\n");
        let notes = h.notes.join("\n");
        for k in keys(&comments).into_iter().chain(keys(&notes)) {
            assert!(defined.contains(&k), "{name}: [{k}] is not in its sources");
        }
    }
}

#[test]
fn every_preset_validates_and_names_are_unique() {
    let all = hardware_presets();
    for h in &all {
        h.validate().unwrap_or_else(|e| panic!("{}: {e}", h.name));
    }
    let mut names: Vec<_> = all.iter().map(|h| h.name.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), all.len());
}

#[test]
fn abstract_peaks() {
    // balanced: 2·32·32·1e9 = 2.048e12 FLOP/s; 100 GB/s; 512 KiB.
    let b = hardware("balanced").unwrap();
    assert_eq!(b.peak_for(DType::Fp16).unwrap(), 2.048e12);
    assert_eq!(b.dram.bandwidth_bytes_per_s, Some(1e11));
    assert_eq!(b.tile_buffer().unwrap().capacity_bytes, Some(524288));
}

#[test]
fn unknown_lists_valid_names() {
    let e = hardware("h900").unwrap_err().to_string();
    assert!(e.contains("h900") && e.contains("balanced"), "{e}");
    assert!(gemm("gemm_huge")
        .unwrap_err()
        .to_string()
        .contains("gemm_tiny"));
}

#[test]
fn aliases_resolve() {
    for (alias, preset) in HARDWARE_ALIASES {
        assert_eq!(&hardware(alias).unwrap().name, preset);
    }
}

fn dev(name: &str) -> HardwareSpec {
    devices()
        .into_iter()
        .find(|h| h.name == name)
        .unwrap_or_else(|| panic!("missing preset {name}"))
}

fn peak(name: &str, d: DType) -> f64 {
    dev(name).peak_for(d).unwrap()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs()
}

#[test]
fn required_presets_exist_and_validate() {
    for n in [
        "nvidia_h100_sxm",
        "nvidia_h200",
        "nvidia_a100_sxm",
        "rtx_3050_laptop",
        "apple_m3_max",
        "tenstorrent_wormhole_n150",
        "tenstorrent_blackhole_p150",
        "amd_mi300x",
        "google_tpu_v5e",
    ] {
        dev(n).validate().unwrap_or_else(|e| panic!("{n}: {e}"));
    }
}

#[test]
fn every_device_is_documented_and_follows_conventions() {
    for h in devices() {
        assert!(
            !h.description.is_empty() && !h.sources.is_empty() && !h.notes.is_empty(),
            "{}",
            h.name
        );
        assert_eq!(h.dram.name, "dram", "{}", h.name);
        // DRAM capacity: vendor GB x 1e9, always a whole number of decimal GB.
        let cap = h.dram.capacity_bytes.unwrap();
        assert_eq!(cap % GB, 0, "{}", h.name);
        // No source gives an on-chip bandwidth: on-chip levels must not add roofs.
        assert!(
            h.onchip.iter().all(|l| l.bandwidth_bytes_per_s.is_none()),
            "{}",
            h.name
        );
        // Every preset says in its notes how it converted the capacity.
        assert!(h.notes.iter().any(|n| n.contains("decimal")), "{}", h.name);
    }
}

#[test]
fn h100_sxm_hand_checked() {
    let n = "nvidia_h100_sxm";
    // 528 tensor cores x 512 FMA/clk x 2 FLOP x 1.83e9 Hz = 989.43e12 ~ 989.4e12 (dense).
    assert_eq!(peak(n, DType::Bf16), 989.4e12);
    assert_eq!(peak(n, DType::Fp16), 989.4e12);
    assert!(close(528.0 * 512.0 * 2.0 * 1.83e9, 989.4e12, 1e-3));
    // 132 SMs x 128 FP32 lanes x 2 x 1.98e9 = 66.91e12.
    assert_eq!(peak(n, DType::Fp32), 66.9e12);
    assert!(close(132.0 * 128.0 * 2.0 * 1.98e9, 66.9e12, 1e-3));
    assert_eq!(peak(n, DType::Tf32), 494.7e12); // half of bf16
    assert_eq!(peak(n, DType::Fp8), 1978.9e12); // 2 x bf16
    assert!(dev(n).peak_for(DType::Int4).is_err()); // Hopper has no INT4
    let h = dev(n);
    assert_eq!(h.dram.bandwidth_bytes_per_s, Some(3.35e12)); // 3350 GB/s
    assert_eq!(h.dram.capacity_bytes, Some(80_000_000_000)); // "80 GB" decimal
                                                             // Tile buffer: 228 KiB = 233 472 B per SM, 132 instances; L2 50 MiB = 52 428 800 B.
    let tb = h.tile_buffer().unwrap();
    assert_eq!(
        (tb.name.as_str(), tb.capacity_bytes, tb.instances),
        ("smem_per_sm", Some(233_472), 132)
    );
    assert_eq!(h.onchip[1].capacity_bytes, Some(52_428_800));
    assert!(h.pe_array.is_none());
}

#[test]
fn h200_same_compute_as_h100_more_memory() {
    let (a, b) = (dev("nvidia_h100_sxm"), dev("nvidia_h200"));
    assert_eq!(a.peak_ops_per_s, b.peak_ops_per_s);
    assert_eq!(b.dram.bandwidth_bytes_per_s, Some(4.8e12)); // 4.8 TB/s
    assert_eq!(b.dram.capacity_bytes, Some(141_000_000_000)); // "141 GB"
}

#[test]
fn a100_hand_checked() {
    let n = "nvidia_a100_sxm";
    // 432 TCs x 256 FMA x 2 x 1.41e9 = 311.9e12 ~ 312e12.
    assert_eq!(peak(n, DType::Fp16), 312e12);
    assert!(close(432.0 * 256.0 * 2.0 * 1.41e9, 312e12, 1e-3));
    assert_eq!(peak(n, DType::Int8), 624e12);
    assert!(dev(n).peak_for(DType::Fp8).is_err()); // Ampere has no FP8
                                                   // 164 KiB = 167 936 B shared-memory carve-out per SM, x 108.
    let tb = dev(n).tile_buffer().unwrap().clone();
    assert_eq!((tb.capacity_bytes, tb.instances), (Some(167_936), 108));
}

#[test]
fn geforce_uses_fp32_accumulate_rate() {
    // RTX 3050 Laptop 4 GB @1740 MHz: 16 SMs x 512 FLOP/clk x 1.74e9 = 14.254e12 (FP32 acc);
    // FP16-accumulate would be 28.51e12. FP32: 2048 x 2 x 1.74e9 = 7.127e12.
    assert_eq!(peak("rtx_3050_laptop", DType::Fp16), 14.25e12);
    assert!(close(16.0 * 512.0 * 1.74e9, 14.25e12, 1e-3));
    assert!(close(
        2048.0 * 2.0 * 1.74e9,
        peak("rtx_3050_laptop", DType::Fp32),
        1e-3
    ));
    // RTX 4090: 165.2e12 FP32-acc = half of the 330.3e12 FP16-acc rate.
    assert_eq!(peak("nvidia_rtx_4090", DType::Bf16), 165.2e12);
    for n in ["rtx_3050_laptop", "nvidia_rtx_4090"] {
        assert!(
            dev(n).notes.iter().any(|s| s.contains("FP32-accumulate")),
            "{n}"
        );
    }
}

#[test]
fn tpu_pe_arrays_match_stated_peaks() {
    // v5e: 4 MXUs x 128^2 PEs x 2 FLOP x 1.5e9 Hz = 196.608e12, within 5 % (0.2 %) of 197e12.
    let v5e = dev("google_tpu_v5e");
    let d = v5e.pe_array.as_ref().unwrap().peak_flops_per_s();
    assert_eq!(d, 196.608e12);
    assert!(close(d, 197e12, 0.05) && close(d, peak("google_tpu_v5e", DType::Bf16), 0.003));
    assert_eq!(v5e.dram.bandwidth_bytes_per_s, Some(819e9));
    // 128 MiB = 134 217 728 B VMEM.
    assert_eq!(v5e.tile_buffer().unwrap().capacity_bytes, Some(134_217_728));
    // v4: 8 x 128^2 x 2 x 1.05e9 = 275.25e12 vs 275e12; v5p: 8 x 128^2 x 2 x 1.75e9 = 458.75e12 vs 459e12.
    let v4 = dev("google_tpu_v4").pe_array.unwrap().peak_flops_per_s();
    assert!(close(v4, 275e12, 0.01));
    let v5p = dev("google_tpu_v5p").pe_array.unwrap().peak_flops_per_s();
    assert!(close(v5p, 459e12, 0.01));
}

#[test]
fn mi300x_hand_checked() {
    // 1216 matrix cores x 256 FMA x 2 x 2.1e9 = 1307.4e12.
    assert!(close(
        1216.0 * 256.0 * 2.0 * 2.1e9,
        peak("amd_mi300x", DType::Bf16),
        1e-4
    ));
    let h = dev("amd_mi300x");
    // LDS 64 KiB x 304 CUs = 19 922 944 B; L2 4 MiB x 8 XCDs = 32 MiB.
    assert_eq!(
        h.tile_buffer().unwrap().total_capacity_bytes(),
        Some(19_922_944)
    );
    assert_eq!(h.onchip[1].total_capacity_bytes(), Some(32 * MIB));
}

#[test]
fn tenstorrent_and_apple_hand_checked() {
    // Wormhole n150: 72 Tensix x 1.5e6 B = 108e6 B (the spec page's 108 MB); 288 GB/s.
    let wh = dev("tenstorrent_wormhole_n150");
    assert_eq!(
        wh.tile_buffer().unwrap().total_capacity_bytes(),
        Some(108_000_000)
    );
    assert_eq!(wh.dram.bandwidth_bytes_per_s, Some(288e9));
    // Blackhole p150 at 140 Tensix: 140 x 1.5e6 = 210e6 B; 512 GB/s, not the 1 TB/s Ethernet figure.
    let bh = dev("tenstorrent_blackhole_p150");
    assert_eq!(
        bh.tile_buffer().unwrap().total_capacity_bytes(),
        Some(210_000_000)
    );
    assert_eq!(bh.dram.bandwidth_bytes_per_s, Some(512e9));
    assert!(
        bh.notes.iter().any(|s| s.contains("120")) && bh.notes.iter().any(|s| s.contains("140"))
    );
    // Apple M3 Max: 5120 ALUs x 2 x 1.398e9 = 14.315e12, printed as 14.3e12 (3rd-party); no bf16;
    // no on-chip level.
    let m3 = dev("apple_m3_max");
    assert!(close(
        5120.0 * 2.0 * 1.398e9,
        m3.peak_for(DType::Fp32).unwrap(),
        2e-3
    ));
    assert!(m3.peak_for(DType::Bf16).is_err() && m3.tile_buffer().is_none());
    assert!(m3.notes.iter().any(|s| s.contains("3rd-party")));
}

#[test]
fn interconnects_hand_checked() {
    let ic = |n: &str| dev(n).interconnect.unwrap();
    // NVLink 4: 900 GB/s duplex per GPU = 450e9 B/s each way, 18 links, 8 GPUs per board.
    for n in ["nvidia_h100_sxm", "nvidia_h200"] {
        let f = ic(n);
        assert_eq!(
            (f.name.as_str(), f.unidirectional_bytes_per_s, f.links),
            ("nvlink4", 450e9, Some(18))
        );
        assert_eq!(f.domain_devices, Some(8));
        // NVSwitch: a pair gets the full 450e9.
        assert_eq!(f.group_bytes_per_s(2), 450e9);
    }
    // NVLink 3: 600 GB/s duplex = 300e9 each way, 12 links.
    assert_eq!(ic("nvidia_a100_sxm").unidirectional_bytes_per_s, 300e9);
    // MI300X: 7 links x 64e9 = 448e9 each way (896 GB/s duplex); one peer is one link.
    let mi = ic("amd_mi300x");
    assert_eq!(mi.unidirectional_bytes_per_s, 7.0 * 64e9);
    assert_eq!(mi.group_bytes_per_s(2), 64e9);
    assert_eq!(mi.group_bytes_per_s(8), 448e9);
    // TPU v5e: 1600 Gbps / 8 = 200e9 B/s; 4 ICI links of 4.5e10; 256 chips per pod.
    let v5e = ic("google_tpu_v5e");
    assert_eq!(v5e.unidirectional_bytes_per_s, 1600e9 / 8.0);
    assert_eq!(v5e.group_bytes_per_s(2), 45e9);
    assert_eq!(v5e.group_bytes_per_s(8), 200e9); // min(200e9, 7·45e9 = 315e9)
    assert_eq!(v5e.domain_devices, Some(256));
}

#[test]
fn every_device_has_an_interconnect_or_says_why_not() {
    for h in devices() {
        match &h.interconnect {
            Some(ic) => {
                // The note names the fabric and the duplex figure it was halved from.
                assert!(
                    h.notes
                        .iter()
                        .any(|n| n.starts_with(&format!("interconnect {}", ic.name))),
                    "{}",
                    h.name
                );
            }
            None => assert!(
                h.notes
                    .iter()
                    .any(|n| n.starts_with("interconnect left out")),
                "{}",
                h.name
            ),
        }
    }
}

#[test]
fn no_fp16_or_bf16_peak_is_a_sparse_or_wrong_accumulate_figure() {
    // 2:4-sparse fp16/bf16 datasheet figures (2x dense), and GeForce FP16-accumulate rates.
    const WRONG: &[(f64, &str)] = &[
        (1979e12, "H100/H200 SXM sparse"),
        (1513e12, "H100 PCIe sparse"),
        (624e12, "A100 sparse"),
        (242e12, "L4 sparse"),
        (2614.9e12, "MI300X sparse"),
        (1.97e15, "H200 'dense' (mislabelled sparse)"),
        (
            330.3e12,
            "RTX 4090 FP16-accumulate / FP32-accumulate sparse",
        ),
        (28.51e12, "RTX 3050 Laptop FP16-accumulate"),
    ];
    for h in devices() {
        for d in [DType::Fp16, DType::Bf16] {
            if let Some(&p) = h.peak_ops_per_s.get(&d) {
                for (w, why) in WRONG {
                    assert!(
                        !close(p, *w, 0.005),
                        "{} {d} = {p:e} looks like {why}",
                        h.name
                    );
                }
            }
        }
    }
}
