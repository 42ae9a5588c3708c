//! Distributions of durations: a log-linear histogram over µs with 1/128
//! relative bucket width (±0.4 %). Recording is a few instructions, so it
//! can run per exchange on the hot path; merging is bucket-wise addition.

/// Percentiles of a duration, ms.
#[derive(Clone, Copy, Debug, serde::Serialize, Default, PartialEq, schemars::JsonSchema)]
pub struct Spread {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
/// Values up to 2^32 µs (71 minutes); larger ones land in the last bucket.
const BUCKETS: usize = SUB + (32 - SUB_BITS as usize) * SUB;

/// A mergeable distribution of durations.
#[derive(Clone, Debug, Default)]
pub struct Dist {
    /// Allocated at the first value (most distributions stay empty); a fixed
    /// size, so recording needs no bounds check.
    counts: Option<Box<[u32; BUCKETS]>>,
    n: u64,
    max_us: u64,
}

#[inline]
fn bucket(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros(); // ≥ SUB_BITS
    let mant = (us >> (exp - SUB_BITS)) as usize & (SUB - 1);
    (SUB + (exp - SUB_BITS) as usize * SUB + mant).min(BUCKETS - 1)
}

/// Middle of a bucket, µs.
fn value(b: usize) -> f64 {
    if b < SUB {
        return b as f64;
    }
    let exp = (b - SUB) / SUB + SUB_BITS as usize;
    let mant = (b - SUB) % SUB;
    let width = 1u64 << (exp - SUB_BITS as usize);
    ((SUB + mant) as u64 * width) as f64 + width as f64 / 2.0
}

impl Dist {
    /// The counts, allocated (zeroed) at first use.
    #[inline(always)]
    fn buckets(&mut self) -> &mut [u32; BUCKETS] {
        self.counts.get_or_insert_with(|| Box::new([0; BUCKETS]))
    }

    /// The counts (empty when nothing was recorded).
    fn counts(&self) -> &[u32] {
        self.counts.as_deref().map_or(&[], |c| &c[..])
    }

    /// Records a duration in ns (negative counts as 0).
    #[inline]
    pub fn record(&mut self, ns: i64) {
        // Unsigned: dividing by a constant takes fewer instructions.
        let us = ns.max(0) as u64 / 1000;
        self.buckets()[bucket(us)] += 1;
        self.n += 1;
        self.max_us = self.max_us.max(us);
    }
    /// Records a duration in ns `n` times.
    pub fn record_n(&mut self, ns: i64, n: u32) {
        if n == 0 {
            return;
        }
        let us = ns.max(0) as u64 / 1000;
        self.buckets()[bucket(us)] += n;
        self.n += u64::from(n);
        self.max_us = self.max_us.max(us);
    }
    /// Adds another distribution.
    pub fn merge(&mut self, other: &Dist) {
        if other.n == 0 {
            return;
        }
        let counts = other.counts();
        for (a, b) in self.buckets().iter_mut().zip(counts) {
            *a += b;
        }
        self.n += other.n;
        self.max_us = self.max_us.max(other.max_us);
    }
    /// Number of values.
    pub fn count(&self) -> u64 {
        self.n
    }
    /// The `q` quantile (0..=1), ms; 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.n == 0 { 0.0 } else { self.quantile_us(q) / 1e3 }
    }
    /// Smallest value, ms (its bucket's middle: ±0.4 %); 0 when empty.
    pub fn min_ms(&self) -> f64 {
        self.filled().next().map_or(0.0, |(v, _)| v / 1e3)
    }
    /// Largest value, ms.
    pub fn max_ms(&self) -> f64 {
        self.max_us as f64 / 1e3
    }
    /// Buckets with values: (middle of the bucket in µs, count).
    fn filled(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.counts()
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, &c)| (value(b).min(self.max_us as f64), u64::from(c)))
    }
    /// Mean and standard deviation, ms (from the buckets: ±0.4 %).
    pub fn mean_stdev_ms(&self) -> (f64, f64) {
        if self.n == 0 {
            return (0.0, 0.0);
        }
        let n = self.n as f64;
        let mean = self.filled().map(|(v, c)| v * c as f64).sum::<f64>() / n;
        let var = self.filled().map(|(v, c)| (v - mean).powi(2) * c as f64).sum::<f64>() / n;
        (mean / 1e3, var.sqrt() / 1e3)
    }
    /// Share (0..=1) of values between `lo_ms` and `hi_ms`, both included.
    pub fn share_between(&self, lo_ms: f64, hi_ms: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let (lo, hi) = (lo_ms * 1e3, hi_ms * 1e3);
        self.filled().filter(|(v, _)| (lo..=hi).contains(v)).map(|(_, c)| c).sum::<u64>() as f64 / self.n as f64
    }
    fn quantile_us(&self, q: f64) -> f64 {
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0u64;
        for (b, &c) in self.counts().iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return value(b).min(self.max_us as f64);
            }
        }
        self.max_us as f64
    }
    /// Median, 90th and 99th percentiles and maximum, ms.
    pub fn spread(&self) -> Spread {
        if self.n == 0 {
            return Spread::default();
        }
        let r = |us: f64| (us / 1e3 * 1e3).round() / 1e3;
        Spread {
            p50: r(self.quantile_us(0.5)),
            p90: r(self.quantile_us(0.9)),
            p99: r(self.quantile_us(0.99)),
            max: r(self.max_us as f64),
        }
    }
}

/// Bins per factor of ten in [`Coarse`] and in the report's histograms.
pub const BINS_PER_DECADE: u32 = 20;
/// Coarse bins: [0, 1 µs), then 20 per decade up to 10^8 µs (100 s), then one for the rest.
const COARSE_BINS: usize = 2 + 8 * BINS_PER_DECADE as usize;

/// Bin of a duration in µs.
#[inline]
fn coarse_bin(us: f64) -> usize {
    if us < 1.0 {
        return 0;
    }
    ((us.log10() * f64::from(BINS_PER_DECADE)).floor() as usize + 1).min(COARSE_BINS - 1)
}

/// Lower and upper edge of a coarse bin, ms (the last bin's upper edge is infinite).
pub fn coarse_edges_ms(b: usize) -> (f64, f64) {
    let edge = |k: usize| 10f64.powf(k as f64 / f64::from(BINS_PER_DECADE)) / 1e3;
    match b {
        0 => (0.0, 1e-3),
        _ if b >= COARSE_BINS - 1 => (edge(b - 1), f64::INFINITY),
        _ => (edge(b - 1), edge(b)),
    }
}

/// A small fixed-size histogram of durations (log bins, ±6 %): cheap enough to
/// keep one per second of a run, for latency over time and for drawing.
#[derive(Clone, Debug)]
pub struct Coarse {
    counts: [u32; COARSE_BINS],
    n: u64,
    max_ns: i64,
}

impl Default for Coarse {
    fn default() -> Coarse {
        Coarse { counts: [0; COARSE_BINS], n: 0, max_ns: 0 }
    }
}

impl Coarse {
    /// Records a duration in ns (negative counts as 0).
    #[inline]
    pub fn record(&mut self, ns: i64) {
        let ns = ns.max(0);
        self.counts[coarse_bin(ns as f64 / 1e3)] += 1;
        self.n += 1;
        self.max_ns = self.max_ns.max(ns);
    }
    /// Adds another histogram.
    pub fn merge(&mut self, o: &Coarse) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.max_ns = self.max_ns.max(o.max_ns);
    }
    /// Number of values.
    pub fn count(&self) -> u64 {
        self.n
    }
    /// Largest value, ms.
    pub fn max_ms(&self) -> f64 {
        self.max_ns as f64 / 1e6
    }
    /// The `q` quantile (0..=1), ms: the geometric middle of its bin, never above the maximum; 0 when empty.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0u64;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (lo, hi) = coarse_edges_ms(b);
                let mid = if b == 0 {
                    hi / 2.0
                } else if hi.is_finite() {
                    (lo * hi).sqrt()
                } else {
                    lo
                };
                return mid.min(self.max_ms());
            }
        }
        self.max_ms()
    }
    /// The filled bins: (bin, count).
    pub fn bins(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, c)| **c > 0).map(|(b, &c)| (b, u64::from(c)))
    }
}

impl From<&Dist> for Coarse {
    /// Re-bins a fine distribution (each fine bucket goes whole into the coarse bin of its middle).
    fn from(d: &Dist) -> Coarse {
        let mut c = Coarse::default();
        for (us, n) in d.filled() {
            let b = &mut c.counts[coarse_bin(us)];
            *b = b.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
        c.n = d.n;
        c.max_ns = d.max_us as i64 * 1000;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_half_a_percent() {
        let mut d = Dist::default();
        for ms in 1..=100 {
            d.record(ms * 1_000_000);
        }
        let s = d.spread();
        assert!((s.p50 - 50.0).abs() <= 50.0 * 0.005, "{s:?}");
        assert!((s.p90 - 90.0).abs() <= 90.0 * 0.005, "{s:?}");
        assert!((s.p99 - 99.0).abs() <= 99.0 * 0.005, "{s:?}");
        assert_eq!(s.max, 100.0);
    }

    #[test]
    fn buckets_are_monotonic_and_merge_adds() {
        let mut last = 0;
        for us in (0..5_000_000u64).step_by(997) {
            let b = bucket(us);
            assert!(b >= last);
            assert!((value(b) - us as f64).abs() <= us as f64 / 128.0 + 1.0, "{us}");
            last = b;
        }
        let (mut a, mut b) = (Dist::default(), Dist::default());
        a.record(40_000_000);
        b.record(200_000_000);
        b.record(-5);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.spread().max, 200.0);
        assert_eq!(Dist::default().spread(), Spread::default());
    }

    #[test]
    fn coarse_bins_cover_their_values_and_rebin_a_fine_distribution() {
        for us in [0.5, 1.0, 9.99, 10.0, 40_000.0, 43_700.0, 99_999_999.0, 1e12] {
            let (lo, hi) = coarse_edges_ms(coarse_bin(us));
            assert!(lo <= us / 1e3 * 1.000_001 && us / 1e3 < hi, "{us} µs in [{lo}, {hi}) ms");
        }
        let (mut c, mut d) = (Coarse::default(), Dist::default());
        for i in 0..1000 {
            let ns = if i % 10 == 0 { 200_000_000 } else { 40_000_000 + i * 1000 };
            c.record(ns);
            d.record(ns);
        }
        let r = Coarse::from(&d);
        assert_eq!((c.count(), r.count()), (1000, 1000));
        assert_eq!(c.bins().collect::<Vec<_>>(), r.bins().collect::<Vec<_>>());
        // ±6 %: half a bin of 10^(1/20).
        assert!((c.quantile_ms(0.5) - 40.5).abs() < 40.5 * 0.06, "{}", c.quantile_ms(0.5));
        assert_eq!(c.quantile_ms(1.0), 200.0);
        assert_eq!(Coarse::default().quantile_ms(0.5), 0.0);
    }
}
