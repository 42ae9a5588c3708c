//! `tcpdoctor demo`: the main job on real captures bundled in the binary.

use crate::analyze::{InputError, Options, analyze};
use crate::capture::Capture;
use crate::report::Report;
use crate::report::text::dur;

/// Bundled captures: (title, file name, bytes).
pub const CAPTURES: [(&str, &str, &[u8]); 2] = [
    (
        "nginx 1.22 with `tcp_nodelay off` (keep-alive, ab -k)",
        "nginx_nodelay_off.pcap",
        include_bytes!("../tests/data/nginx_nodelay_off.pcap"),
    ),
    (
        "the same nginx with `tcp_nodelay on` (the fix)",
        "nginx_nodelay_on.pcap",
        include_bytes!("../tests/data/nginx_nodelay_on.pcap"),
    ),
];

/// The before/after comparison that proves the fix: mean exchange time and
/// stall count without and with TCP_NODELAY.
pub fn proof(before: &Report, after: &Report) -> String {
    let mean = |r: &Report| r.breakdown.first().map_or(0.0, |b| b.total_ms);
    let stalls = |r: &Report| r.connections.iter().map(|c| c.stalls).sum::<u64>();
    let (b, a) = (mean(before), mean(after));
    let speedup = if a > 0.0 { format!(", {:.0}x faster", b / a) } else { String::new() };
    format!(
        "PROOF: with tcp_nodelay on, the mean exchange takes {} instead of {}{speedup}; stalls {} -> {}.",
        dur((a * 1e6) as i64),
        dur((b * 1e6) as i64),
        stalls(before),
        stalls(after)
    )
}

/// Analyses each bundled capture on its own.
pub fn run() -> Result<Vec<(&'static str, Report)>, InputError> {
    let opts = Options { ladder_rows: 60, ..Options::default() };
    CAPTURES
        .iter()
        .map(|(title, name, bytes)| Ok((*title, analyze(&[Capture::from_static(name, bytes)], &opts)?)))
        .collect()
}
