//! Human-readable units, the one formatter every crate and the CLI use: times in
//! ns/µs/ms/s, bytes in B/KiB/MiB/GiB (binary), rates in GFLOP/s / TFLOP/s and GB/s (decimal,
//! as vendors publish them). Pure string formatting; it rounds to two decimals and models
//! nothing.

/// Format seconds with a scaled unit.
pub fn time(s: f64) -> String {
    if !s.is_finite() {
        return format!("{s}");
    }
    // −0 (an empty f64 sum is −0.0) prints as 0.
    let s = if s == 0.0 { 0.0 } else { s };
    let a = s.abs();
    if a < 1e-6 {
        format!("{:.2} ns", s * 1e9)
    } else if a < 1e-3 {
        format!("{:.2} µs", s * 1e6)
    } else if a < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.3} s", s)
    }
}

/// Format a byte count with a binary unit.
pub fn bytes(b: f64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b;
    let mut i = 0;
    while v.abs() >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{} B", b)
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Format an operation rate (FLOP/s or OP/s) with a decimal unit.
pub fn rate(r: f64, unit: &str) -> String {
    let (v, p) = scale(r);
    format!("{v:.2} {p}{unit}/s")
}

/// Format a bandwidth in bytes per second with a decimal unit.
pub fn bandwidth(r: f64) -> String {
    let (v, p) = scale(r);
    format!("{v:.2} {p}B/s")
}

/// Format a count with a decimal prefix (K, M, G...) and a unit, e.g. `2.15 GFLOP`.
pub fn count(c: f64, unit: &str) -> String {
    let (v, p) = scale(c);
    if p.is_empty() {
        // Below a thousand: an integer as is, a fraction to two decimals ("119.25 iter/s").
        let text = if c.fract() == 0.0 {
            format!("{c}")
        } else {
            format!("{c:.2}")
        };
        format!("{text} {unit}").trim_end().to_string()
    } else {
        format!("{v:.2} {p}{unit}")
    }
}

/// An integer with thousands separators, e.g. `1,048,576` (cycle and PE counts, where every
/// digit is meaningful).
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Format an energy given in picojoules with a scaled unit: `pJ`, `nJ`, `µJ`, `mJ`, `J`.
pub fn energy_pj(pj: f64) -> String {
    let a = pj.abs();
    if !pj.is_finite() || a < 1e3 {
        format!("{pj:.2} pJ")
    } else if a < 1e6 {
        format!("{:.2} nJ", pj / 1e3)
    } else if a < 1e9 {
        format!("{:.2} µJ", pj / 1e6)
    } else if a < 1e12 {
        format!("{:.2} mJ", pj / 1e9)
    } else {
        format!("{:.3} J", pj / 1e12)
    }
}

fn scale(r: f64) -> (f64, &'static str) {
    const P: [(f64, &str); 6] = [
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "K"),
    ];
    for (f, p) in P {
        if r.abs() >= f {
            return (r / f, p);
        }
    }
    (r, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales() {
        assert_eq!(time(-0.0), "0.00 ns");
        assert_eq!(time(552e-9), "552.00 ns");
        assert_eq!(time(48.18e-6), "48.18 µs");
        assert_eq!(bytes(1024.0 * 1536.0), "1.50 MiB");
        assert_eq!(bytes(104.0), "104 B");
        assert_eq!(rate(989.4e12, "FLOP"), "989.40 TFLOP/s");
        assert_eq!(bandwidth(3.35e12), "3.35 TB/s");
        // 119.25 iterations per second stays unprefixed, two decimals; 5e7 FLOP is 50 M.
        assert_eq!(count(119.2534, "iter/s"), "119.25 iter/s");
        assert_eq!(count(5e7, "FLOP"), "50.00 MFLOP");
        assert_eq!(count(7.0, "FLOP"), "7 FLOP");
        assert_eq!(grouped(1_048_576), "1,048,576");
        assert_eq!(grouped(999), "999");
        // 1.5e6 pJ = 1.5 µJ; 2.5e12 pJ = 2.5 J.
        assert_eq!(energy_pj(12.0), "12.00 pJ");
        assert_eq!(energy_pj(1.5e6), "1.50 µJ");
        assert_eq!(energy_pj(2.5e12), "2.500 J");
    }
}
