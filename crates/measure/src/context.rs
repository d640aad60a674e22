//! Where and with what a measurement ran: the device context read from Linux's /proc and
//! /sys (CPU model, logical cores, memory, OS, kernel release, last-level cache size) and the
//! software context captured at build time (TensorForge version, git commit, rustc, faer and
//! rayon versions). It leaves out what it cannot read cheaply and reliably: clock
//! frequency and its scaling, SMT topology, NUMA layout, co-tenant load. The host name is
//! never recorded; `machine_id` is a hash of (cpu_model, logical_cores, memory_bytes, os).

use std::collections::BTreeMap;
use tensorforge_store::{DeviceContext, SoftwareContext};

/// Fallback last-level cache size when sysfs does not say, in bytes (32 MiB).
pub const FALLBACK_LLC_BYTES: u64 = 32 << 20;

/// Hex digits of the sha256 kept in a machine id.
const MACHINE_ID_HEX: usize = 16;

fn sha256_hex(text: &str) -> String {
    tensorforge_core::digest::sha256_hex(&[text.as_bytes()])
}

/// `sha256(cpu_model | logical_cores | memory_bytes | os)` as a 16-hex-digit prefix.
pub fn machine_id(
    cpu_model: &str,
    logical_cores: u32,
    memory_bytes: Option<u64>,
    os: &str,
) -> String {
    let mem = memory_bytes.map(|m| m.to_string()).unwrap_or_default();
    let mut h = sha256_hex(&format!("{cpu_model}|{logical_cores}|{mem}|{os}"));
    h.truncate(MACHINE_ID_HEX);
    h
}

/// CPU model from `/proc/cpuinfo` text (`model name`, else `Hardware`/`Processor`), or `unknown`.
pub fn parse_cpu_model(cpuinfo: &str) -> String {
    for key in ["model name", "Hardware", "Processor", "cpu model"] {
        for line in cpuinfo.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if k.trim() == key && !v.trim().is_empty() {
                    return v.trim().to_string();
                }
            }
        }
    }
    "unknown".into()
}

/// `MemTotal` from `/proc/meminfo` text, in bytes.
pub fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A sysfs cache size such as `32768K`, `1M` or `512`, in bytes.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1024),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mult)
}

/// Last-level cache size of cpu0 from sysfs (the highest `level` among data/unified caches)
/// and where the figure came from; [`FALLBACK_LLC_BYTES`] when sysfs does not say.
pub fn llc_bytes() -> (u64, String) {
    let base = "/sys/devices/system/cpu/cpu0/cache";
    let mut best: Option<(u32, u64, String)> = None;
    if let Ok(dir) = std::fs::read_dir(base) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if !name.starts_with("index") {
                continue;
            }
            let p = e.path();
            let read = |f: &str| std::fs::read_to_string(p.join(f)).ok();
            let level: Option<u32> = read("level").and_then(|s| s.trim().parse().ok());
            let kind = read("type").unwrap_or_default();
            let size = read("size").and_then(|s| parse_cache_size(&s));
            if let (Some(level), Some(size)) = (level, size) {
                if kind.trim() == "Instruction" {
                    continue;
                }
                if best.as_ref().map(|b| level > b.0).unwrap_or(true) {
                    best = Some((level, size, format!("{base}/{name}/size (L{level})")));
                }
            }
        }
    }
    match best {
        Some((_, size, src)) if size > 0 => (size, src),
        _ => (
            FALLBACK_LLC_BYTES,
            "fallback 32 MiB (sysfs cache size not readable)".into(),
        ),
    }
}

fn logical_cores(cpuinfo: &str) -> u32 {
    let n = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().map(str::trim) == Some("processor"))
        .count();
    if n > 0 {
        n as u32
    } else {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    }
}

/// Logical cores of this host (`processor` entries of /proc/cpuinfo, else the OS's answer).
pub fn host_logical_cores() -> u32 {
    logical_cores(&std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default())
}

/// The device context of this host with `threads_used` harness threads.
pub fn device_context(threads_used: u32) -> DeviceContext {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = parse_cpu_model(&cpuinfo);
    let cores = logical_cores(&cpuinfo);
    let memory_bytes = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| parse_mem_total(&m));
    let os = std::env::consts::OS.to_string();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    DeviceContext {
        kind: "cpu".into(),
        machine_id: machine_id(&cpu_model, cores, memory_bytes, &os),
        cpu_model,
        logical_cores: cores,
        threads_used,
        memory_bytes,
        os,
        kernel,
        gpu: None,
    }
}

/// The software context of this build.
pub fn software_context() -> SoftwareContext {
    let mut crates = BTreeMap::new();
    crates.insert(
        "faer".to_string(),
        option_env!("TF_FAER_VERSION")
            .unwrap_or("unknown")
            .to_string(),
    );
    crates.insert(
        "rayon".to_string(),
        option_env!("TF_RAYON_VERSION")
            .unwrap_or("unknown")
            .to_string(),
    );
    SoftwareContext {
        tensorforge_version: env!("CARGO_PKG_VERSION").to_string(),
        git_commit: option_env!("TF_GIT_COMMIT").map(str::to_string),
        rustc_version: option_env!("TF_RUSTC_VERSION").map(str::to_string),
        crates,
        frameworks: BTreeMap::new(),
    }
}

/// The software signature a calibration is valid for: sha256 (16 hex digits) of the
/// TensorForge version, rustc version and the faer/rayon versions. The git commit is
/// deliberately left out, so a commit that does not change the toolchain or the kernels'
/// dependencies keeps a calibration usable (it is still recorded in the provenance).
pub fn software_signature(s: &SoftwareContext) -> String {
    let crates: Vec<String> = s.crates.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let text = format!(
        "tensorforge={}|rustc={}|{}",
        s.tensorforge_version,
        s.rustc_version.as_deref().unwrap_or("unknown"),
        crates.join(",")
    );
    let mut h = sha256_hex(&text);
    h.truncate(MACHINE_ID_HEX);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_text() {
        let cpuinfo = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(parse_cpu_model(cpuinfo), "AMD EPYC 7B13");
        assert_eq!(logical_cores(cpuinfo), 2);
        assert_eq!(parse_cpu_model(""), "unknown");
        assert_eq!(
            parse_mem_total("MemTotal:       24683584 kB\nMemFree: 1 kB\n"),
            Some(24683584 * 1024)
        );
        assert_eq!(parse_mem_total("nothing"), None);
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn machine_id_is_stable_and_sensitive() {
        let a = machine_id("cpu", 2, Some(1024), "linux");
        assert_eq!(a.len(), 16);
        assert_eq!(a, machine_id("cpu", 2, Some(1024), "linux"));
        assert_ne!(a, machine_id("cpu", 4, Some(1024), "linux"));
        assert_ne!(a, machine_id("cpu", 2, None, "linux"));
        let d = device_context(1);
        assert_eq!(d.kind, "cpu");
        assert!(d.logical_cores >= 1);
        assert_eq!(
            d.machine_id,
            machine_id(&d.cpu_model, d.logical_cores, d.memory_bytes, &d.os)
        );
    }

    #[test]
    fn signature_ignores_commit() {
        let mut s = software_context();
        let a = software_signature(&s);
        s.git_commit = Some("deadbeef".into());
        assert_eq!(a, software_signature(&s));
        s.rustc_version = Some("rustc 0.0.0".into());
        assert_ne!(a, software_signature(&s));
        assert!(llc_bytes().0 > 0);
    }
}
