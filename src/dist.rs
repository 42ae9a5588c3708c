//! Distributions of durations: a log-linear histogram over µs with 1/128
//! relative bucket width (±0.4 %). Recording is a few instructions, so it
//! can run per exchange on the hot path; merging is bucket-wise addition.

use crate::report::Spread;

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
/// Values up to 2^32 µs (71 minutes); larger ones land in the last bucket.
const BUCKETS: usize = SUB + (32 - SUB_BITS as usize) * SUB;

/// A mergeable distribution of durations.
#[derive(Clone, Debug, Default)]
pub struct Dist {
    counts: Vec<u32>,
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
    /// Records a duration in ns (negative counts as 0).
    #[inline]
    pub fn record(&mut self, ns: i64) {
        let us = (ns.max(0) / 1000) as u64;
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        self.counts[bucket(us)] += 1;
        self.n += 1;
        self.max_us = self.max_us.max(us);
    }
    /// Adds another distribution.
    pub fn merge(&mut self, other: &Dist) {
        if other.n == 0 {
            return;
        }
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
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
    /// Largest value, ms.
    pub fn max_ms(&self) -> f64 {
        self.max_us as f64 / 1e3
    }
    /// Buckets with values: (middle of the bucket in µs, count).
    fn filled(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.counts
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
        for (b, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return value(b).min(self.max_us as f64);
            }
        }
        self.max_us as f64
    }
    /// Median, 90th percentile and maximum, ms.
    pub fn spread(&self) -> Spread {
        if self.n == 0 {
            return Spread::default();
        }
        let r = |us: f64| (us / 1e3 * 1e3).round() / 1e3;
        Spread { p50: r(self.quantile_us(0.5)), p90: r(self.quantile_us(0.9)), max: r(self.max_us as f64) }
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
}
