//! The one seeded pseudo-random generator of the workspace (SplitMix64, Steele, Lea & Flood
//! 2014): bootstrap resampling and simulations in `ops`, the executors' random inputs in
//! `graph` and `measure`, synthetic graphs, and the tests' data. It decides nothing about statistics;
//! it is not cryptographic and makes no claim beyond passing the usual equidistribution
//! checks for 64-bit outputs.

/// SplitMix64: `state += 0x9E3779B97F4A7C15`, output is the state passed through two
/// xor-shift-multiply rounds.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole stream is fixed by `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 random bits: `(x >> 11) · 2^-53`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `0..n` (`n > 0`) by Lemire's multiply-shift; the bias is at most
    /// `n / 2^64`, negligible for resampling.
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Uniform f32 in [−1, 1) on a grid of 2^-23 (24 random bits): `(x >> 40) · 2^-23 − 1`.
    /// Executor and benchmark inputs: never a denormal, exactly 0 with probability 2^-24.
    pub fn next_f32_pm1(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 23) as f32) - 1.0
    }

    /// `n` values of [`SplitMix64::next_f32_pm1`] from a generator seeded with `seed`.
    pub fn f32_pm1_vec(seed: u64, n: usize) -> Vec<f32> {
        let mut r = SplitMix64::new(seed);
        (0..n).map(|_| r.next_f32_pm1()).collect()
    }

    /// Standard normal by Box–Muller: `sqrt(−2 ln u1) · cos(2π u2)`, `u1` in (0, 1].
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Mix a text key into a seed (FNV-1a 64 over the bytes, then xor), so each metric of each
/// workload draws its own reproducible stream regardless of evaluation order.
pub fn derive_seed(seed: u64, key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    seed ^ h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // Reference outputs of SplitMix64 seeded with 0 (Vigna's splitmix64.c):
        // 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f.
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn uniform_and_normal_moments() {
        let mut r = SplitMix64::new(7);
        let n = 200_000;
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let z = r.normal();
            s += z;
            s2 += z * z;
        }
        let mean = s / n as f64;
        let var = s2 / n as f64 - mean * mean;
        // Standard error of the mean is 1/sqrt(2e5) = 0.0022; allow 5 SE.
        assert!(mean.abs() < 0.011, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
        assert!((0..1000).all(|_| r.below(7) < 7));
        assert_ne!(derive_seed(1, "a"), derive_seed(1, "b"));
    }
}
