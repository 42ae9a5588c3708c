//! Latency histograms as the records carry them (for drawing).

use serde::Serialize;

/// A latency histogram: log-spaced bins (20 per decade, ±6 %), empty bins left out.
#[derive(Clone, Debug, Serialize, serde::Deserialize, Default, PartialEq, schemars::JsonSchema)]
pub struct Histogram {
    /// Filled bins, shortest first.
    pub bins: Vec<Bin>,
}

/// One histogram bin.
#[derive(Clone, Copy, Debug, Serialize, serde::Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Bin {
    /// Lower edge, ms.
    pub lo_ms: f64,
    /// Upper edge, ms (for the last bin, over 100 s: the largest value).
    pub hi_ms: f64,
    /// Values in [lo_ms, hi_ms).
    pub count: u64,
}

impl From<&crate::dist::Coarse> for Histogram {
    fn from(c: &crate::dist::Coarse) -> Histogram {
        let r = |v: f64| (v * 1e6).round() / 1e6;
        let bins = c
            .bins()
            .map(|(b, count)| {
                let (lo, hi) = crate::dist::coarse_edges_ms(b);
                Bin { lo_ms: r(lo), hi_ms: r(if hi.is_finite() { hi } else { c.max_ms().max(lo) }), count }
            })
            .collect();
        Histogram { bins }
    }
}

impl From<&crate::dist::Dist> for Histogram {
    fn from(d: &crate::dist::Dist) -> Histogram {
        Histogram::from(&crate::dist::Coarse::from(d))
    }
}
