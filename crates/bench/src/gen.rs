//! Key and value-size generators: memtier_benchmark's key patterns (R, S, G,
//! Z, P) and size distributions, driven by a seeded generator so that a run
//! is reproducible (memtier's default is one constant seed for every client;
//! `--distinct-client-seed` and `--randomize` vary it).
//!
//! Nothing here allocates per call: generators are built once per
//! connection and then only produce numbers.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::config::{KeyConfig, KeyPattern, SizeSpec};

/// Seeded random source shared by a connection's generators.
pub struct Random {
    rng: SmallRng,
    /// Second normal deviate of the polar method, kept for the next call.
    spare: Option<f64>,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random { rng: SmallRng::seed_from_u64(seed.wrapping_add(1)), spare: None }
    }

    /// Uniform in [lo, hi], inclusive.
    #[inline]
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        self.rng.gen_range(lo..=hi)
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        self.rng.gen::<f64>()
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        self.rng.fill(buf);
    }

    /// A standard normal deviate (Marsaglia's polar method).
    pub fn normal(&mut self) -> f64 {
        if let Some(s) = self.spare.take() {
            return s;
        }
        loop {
            let u = self.unit() * 2.0 - 1.0;
            let v = self.unit() * 2.0 - 1.0;
            let s = u * u + v * v;
            if s < 1.0 && s > 0.0 {
                let m = (-2.0 * s.ln() / s).sqrt();
                self.spare = Some(v * m);
                return u * m;
            }
        }
    }
}

/// Zipf sampler over the key indices [lo, hi] with exponent `s`, by
/// rejection-inversion (Hörmann and Derflinger, ACM TOMACS 6(3), 1996):
/// constant expected time, no table, exact for any range size.
#[derive(Clone, Debug)]
pub struct Zipf {
    lo: f64,
    hi: f64,
    s: f64,
    h_lo: f64,
    h_hi: f64,
    /// Squeeze: a candidate this close to its rounded value is accepted at once.
    squeeze: f64,
}

impl Zipf {
    pub fn new(lo: u64, hi: u64, s: f64) -> Zipf {
        let lo = lo.max(1) as f64;
        let hi = (hi as f64).max(lo);
        let mut z = Zipf { lo, hi, s, h_lo: 0.0, h_hi: 0.0, squeeze: 0.0 };
        z.h_lo = z.big_h(lo + 0.5) - z.h(lo);
        z.h_hi = z.big_h(hi + 0.5);
        z.squeeze = lo + 1.0 - z.big_h_inv(z.big_h(lo + 1.5) - z.h(lo + 1.0));
        z
    }

    /// The unnormalised density x^-s.
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// An antiderivative of h.
    fn big_h(&self, x: f64) -> f64 {
        if (self.s - 1.0).abs() < 1e-9 {
            x.ln()
        } else {
            ((1.0 - self.s) * x.ln()).exp() / (1.0 - self.s)
        }
    }

    fn big_h_inv(&self, u: f64) -> f64 {
        if (self.s - 1.0).abs() < 1e-9 {
            u.exp()
        } else {
            (((1.0 - self.s) * u).ln() / (1.0 - self.s)).exp()
        }
    }

    pub fn sample(&self, r: &mut Random) -> u64 {
        loop {
            let u = self.h_hi + r.unit() * (self.h_lo - self.h_hi);
            let x = self.big_h_inv(u);
            let k = x.round().clamp(self.lo, self.hi);
            if k - x <= self.squeeze || u >= self.big_h(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// Chooses key indices for one connection.
pub struct KeyGen {
    min: u64,
    max: u64,
    stddev: f64,
    median: f64,
    zipf: Option<Zipf>,
    /// Next index of the sequential iterators, one per use (SET, GET, and
    /// one per arbitrary command), as memtier keeps one per command kind.
    next: Vec<u64>,
}

impl KeyGen {
    /// `slice` narrows the range for the P pattern: client `i` of `n` gets
    /// the i-th slice, the last one takes the leftover (memtier's rule).
    pub fn new(cfg: &KeyConfig, iterators: usize, slice: Option<(u64, u64)>, zipf_needed: bool) -> KeyGen {
        let (mut min, mut max) = (cfg.min, cfg.max);
        if let Some((i, n)) = slice {
            let range = (cfg.max - cfg.min) / n + 1;
            min = cfg.min + range * i;
            max = if i == n - 1 { cfg.max } else { (min + range - 1).min(cfg.max) };
            min = min.min(max);
        }
        let zipf = if zipf_needed { Some(Zipf::new(min, max, cfg.zipf_exp)) } else { None };
        KeyGen { min, max, stddev: cfg.stddev, median: cfg.median, zipf, next: vec![min; iterators.max(1)] }
    }

    #[cfg(test)]
    pub fn range(&self) -> (u64, u64) {
        (self.min, self.max)
    }

    /// Next key index for pattern `p`, using sequential iterator `iter`.
    #[inline]
    pub fn next(&mut self, p: KeyPattern, iter: usize, r: &mut Random) -> u64 {
        match p {
            KeyPattern::Random => r.range(self.min, self.max),
            KeyPattern::Gaussian => self.gaussian(r),
            KeyPattern::Zipf => match &self.zipf {
                Some(z) => z.sample(r),
                None => r.range(self.min.max(1), self.max.max(1)),
            },
            KeyPattern::Sequential | KeyPattern::Parallel => {
                let slot = &mut self.next[iter];
                let k = *slot;
                *slot = if k >= self.max { self.min } else { k + 1 };
                k
            }
        }
    }

    fn gaussian(&mut self, r: &mut Random) -> u64 {
        if self.min == self.max {
            return self.min;
        }
        let len = (self.max - self.min) as f64;
        let median = if self.median == 0.0 { len / 2.0 + self.min as f64 + 0.5 } else { self.median };
        let stddev = if self.stddev == 0.0 { len / 6.0 } else { self.stddev };
        loop {
            let v = r.normal() * stddev + median;
            if v >= self.min as f64 && v < self.max as f64 + 1.0 {
                return (v as u64).min(self.max);
            }
        }
    }
}

/// Chooses value sizes.
pub struct SizeGen {
    spec: SizeSpec,
    by_key: bool,
    key_min: u64,
    key_max: u64,
    /// Weighted list position: (item, uses of it so far).
    list_pos: (usize, u32),
}

impl SizeGen {
    pub fn new(spec: &SizeSpec, by_key: bool, key_min: u64, key_max: u64) -> SizeGen {
        SizeGen { spec: spec.clone(), by_key, key_min, key_max, list_pos: (0, 0) }
    }

    #[inline]
    pub fn next(&mut self, key: u64, r: &mut Random) -> u32 {
        match &self.spec {
            SizeSpec::Fixed(n) => *n,
            SizeSpec::Range { min, max } => {
                if self.by_key {
                    let span = (self.key_max - self.key_min).max(1) as f64;
                    let a = (key.saturating_sub(self.key_min)) as f64 / span;
                    ((f64::from(*max - *min) * a) as u32 + *min).clamp(*min, *max)
                } else {
                    r.range(u64::from(*min), u64::from(*max)) as u32
                }
            }
            SizeSpec::List(items) => {
                // Deterministic cycle: weight_1 times size_1, then size_2, ...
                let (mut i, mut used) = self.list_pos;
                while used >= items[i].1 {
                    i = (i + 1) % items.len();
                    used = 0;
                }
                self.list_pos = (i, used + 1);
                items[i].0
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn keycfg(min: u64, max: u64) -> KeyConfig {
        KeyConfig {
            prefix: "k".into(),
            min,
            max,
            set_pattern: KeyPattern::Random,
            get_pattern: KeyPattern::Random,
            stddev: 0.0,
            median: 0.0,
            zipf_exp: 1.0,
        }
    }

    #[test]
    fn seeds_are_reproducible() {
        let mut a = Random::new(7);
        let mut b = Random::new(7);
        let mut c = Random::new(8);
        let va: Vec<u64> = (0..10).map(|_| a.range(0, 1_000_000)).collect();
        let vb: Vec<u64> = (0..10).map(|_| b.range(0, 1_000_000)).collect();
        let vc: Vec<u64> = (0..10).map(|_| c.range(0, 1_000_000)).collect();
        assert_eq!(va, vb);
        assert_ne!(va, vc);
    }

    #[test]
    fn uniform_keys_cover_the_range_evenly() {
        let mut g = KeyGen::new(&keycfg(0, 99), 2, None, false);
        let mut r = Random::new(1);
        let mut counts = [0u32; 100];
        let n = 200_000;
        for _ in 0..n {
            let k = g.next(KeyPattern::Random, 0, &mut r);
            assert!(k <= 99);
            counts[k as usize] += 1;
        }
        // Expected 2000 per bucket, sd ~44: +-15% is over 6 sd.
        for c in counts {
            assert!((1700..2300).contains(&c), "{c}");
        }
    }

    #[test]
    fn sequential_wraps_and_iterators_are_independent() {
        let mut g = KeyGen::new(&keycfg(5, 7), 2, None, false);
        let mut r = Random::new(0);
        let s: Vec<u64> = (0..5).map(|_| g.next(KeyPattern::Sequential, 0, &mut r)).collect();
        assert_eq!(s, vec![5, 6, 7, 5, 6]);
        assert_eq!(g.next(KeyPattern::Sequential, 1, &mut r), 5);
    }

    #[test]
    fn parallel_slices_partition_the_range() {
        let cfg = keycfg(0, 99);
        let mut seen = Vec::new();
        for i in 0..3 {
            let g = KeyGen::new(&cfg, 1, Some((i, 3)), false);
            seen.push(g.range());
        }
        assert_eq!(seen, vec![(0, 33), (34, 67), (68, 99)]);
    }

    #[test]
    fn gaussian_mean_and_spread() {
        let mut g = KeyGen::new(&keycfg(0, 60_000), 1, None, false);
        let mut r = Random::new(3);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| g.next(KeyPattern::Gaussian, 0, &mut r) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        assert!((mean - 30_000.5).abs() < 150.0, "mean {mean}");
        // range/6 = 10000; truncation at +-3 sd shrinks it slightly.
        assert!((9_500.0..10_100.0).contains(&sd), "sd {sd}");
        let mut c = keycfg(0, 60_000);
        c.median = 10_000.0;
        c.stddev = 100.0;
        let mut g = KeyGen::new(&c, 1, None, false);
        let m = (0..10_000).map(|_| g.next(KeyPattern::Gaussian, 0, &mut r) as f64).sum::<f64>() / 10_000.0;
        assert!((m - 10_000.0).abs() < 10.0, "{m}");
    }

    #[test]
    fn gaussian_shape_with_given_median_and_stddev() {
        let mut c = keycfg(0, 100_000);
        c.median = 30_000.0;
        c.stddev = 5_000.0;
        let mut g = KeyGen::new(&c, 1, None, false);
        let mut r = Random::new(21);
        let n = 100_000;
        let mut xs: Vec<f64> = (0..n).map(|_| g.next(KeyPattern::Gaussian, 0, &mut r) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64).sqrt();
        // Standard errors: mean 16, sd about 11; the bounds are over 5 of them.
        assert!((mean - 30_000.0).abs() < 100.0, "mean {mean}");
        assert!((sd - 5_000.0).abs() < 75.0, "sd {sd}");
        xs.sort_by(f64::total_cmp);
        assert!((xs[n / 2] - 30_000.0).abs() < 100.0, "median {}", xs[n / 2]);
        // The bell's shape: 68.3% within one sd, 95.4% within two (a
        // uniform or triangular spread of the same sd gives 57.7% / 100%
        // and 65% / 96.6%).
        let within = |k: f64| xs.iter().filter(|x| (*x - 30_000.0).abs() < k * 5_000.0).count() as f64 / n as f64;
        assert!((within(1.0) - 0.6827).abs() < 0.008, "within 1 sd: {}", within(1.0));
        assert!((within(2.0) - 0.9545).abs() < 0.004, "within 2 sd: {}", within(2.0));
    }

    /// The exponent of the power law that best fits `counts_by_rank`
    /// (rank 1 first): the least-squares slope of ln count on ln rank.
    pub(crate) fn fitted_zipf_exponent(counts_by_rank: &[u64]) -> f64 {
        let pts: Vec<(f64, f64)> = counts_by_rank.iter().enumerate().map(|(i, &c)| (((i + 1) as f64).ln(), (c.max(1) as f64).ln())).collect();
        let n = pts.len() as f64;
        let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
        let cov: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let var: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
        -cov / var
    }

    #[test]
    fn key_generator_applies_the_zipf_exponent() {
        for exp in [0.5, 1.0, 2.0] {
            let mut c = keycfg(1, 1000);
            c.zipf_exp = exp;
            let mut g = KeyGen::new(&c, 1, None, true);
            let mut r = Random::new(13);
            let mut counts = vec![0u64; 1001];
            for _ in 0..200_000 {
                counts[g.next(KeyPattern::Zipf, 0, &mut r) as usize] += 1;
            }
            // Rank 1 is the lowest key.
            let fitted = fitted_zipf_exponent(&counts[1..=20]);
            assert!((fitted - exp).abs() < 0.05, "exponent {exp}: fitted {fitted}");
        }
    }

    #[test]
    fn zipf_follows_the_power_law() {
        for s in [1.0, 0.8, 1.5] {
            let z = Zipf::new(0, 1000, s);
            let mut r = Random::new(11);
            let n = 400_000;
            let mut counts = vec![0u64; 1001];
            for _ in 0..n {
                let k = z.sample(&mut r);
                assert!((1..=1000).contains(&k));
                counts[k as usize] += 1;
            }
            let norm: f64 = (1..=1000).map(|k| (k as f64).powf(-s)).sum();
            for k in [1usize, 2, 5, 10, 100] {
                let expect = n as f64 * (k as f64).powf(-s) / norm;
                let got = counts[k] as f64;
                let tol = 5.0 * expect.sqrt() + 0.02 * expect;
                assert!((got - expect).abs() < tol, "s={s} k={k} got {got} expect {expect}");
            }
        }
    }

    #[test]
    fn size_range_random_and_by_key() {
        let mut r = Random::new(5);
        let mut g = SizeGen::new(&SizeSpec::Range { min: 100, max: 1000 }, false, 0, 100);
        let xs: Vec<u32> = (0..100_000).map(|_| g.next(0, &mut r)).collect();
        assert!(xs.iter().all(|x| (100..=1000).contains(x)));
        let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len() as f64;
        assert!((mean - 550.0).abs() < 5.0, "{mean}");
        let mut g = SizeGen::new(&SizeSpec::Range { min: 100, max: 200 }, true, 0, 100);
        assert_eq!(g.next(0, &mut r), 100);
        assert_eq!(g.next(50, &mut r), 150);
        assert_eq!(g.next(100, &mut r), 200);
    }

    #[test]
    fn size_range_is_uniform_across_its_deciles() {
        let mut r = Random::new(9);
        let mut g = SizeGen::new(&SizeSpec::Range { min: 100, max: 1000 }, false, 0, 0);
        let n = 100_000;
        let mut deciles = [0u32; 10];
        for _ in 0..n {
            deciles[((g.next(0, &mut r) - 100) * 10 / 901) as usize] += 1;
        }
        // 10% each; the standard error of a share is 0.095%.
        for d in deciles {
            assert!((f64::from(d) / f64::from(n) - 0.1).abs() < 0.005, "{deciles:?}");
        }
    }

    #[test]
    fn size_list_cycles_by_weight() {
        let mut r = Random::new(0);
        let mut g = SizeGen::new(&SizeSpec::List(vec![(10, 2), (20, 1), (30, 0), (40, 3)]), false, 0, 0);
        let xs: Vec<u32> = (0..12).map(|_| g.next(0, &mut r)).collect();
        assert_eq!(xs, vec![10, 10, 20, 40, 40, 40, 10, 10, 20, 40, 40, 40]);
    }
}
