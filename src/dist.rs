//! Distributions of durations (HDR histograms, µs resolution).

use crate::report::Spread;
use hdrhistogram::Histogram;

/// A mergeable distribution of durations.
#[derive(Clone, Debug)]
pub struct Dist(Histogram<u64>);

impl Default for Dist {
    fn default() -> Self {
        // 1 µs .. 1 hour, 3 significant digits: a few tens of KB at most.
        Dist(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"))
    }
}

impl Dist {
    /// Records a duration in ns (clamped to the range).
    pub fn record(&mut self, ns: i64) {
        let us = (ns / 1000).clamp(1, 3_600_000_000) as u64;
        self.0.saturating_record(us);
    }
    /// Adds another distribution.
    pub fn merge(&mut self, other: &Dist) {
        // Same bounds on both sides, so this cannot fail.
        let _ = self.0.add(&other.0);
    }
    /// Number of values.
    pub fn count(&self) -> u64 {
        self.0.len()
    }
    /// Median, 90th percentile and maximum, ms.
    pub fn spread(&self) -> Spread {
        if self.0.is_empty() {
            return Spread::default();
        }
        let q = |x: f64| self.0.value_at_quantile(x) as f64 / 1000.0;
        Spread {
            p50: q(0.5),
            p90: q(0.9),
            max: self.0.max() as f64 / 1000.0,
        }
    }
}
