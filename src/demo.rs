//! `tcpdoctor demo`: the main job on real captures bundled in the binary.

use crate::analyze::{InputError, Options, analyze};
use crate::capture::Capture;
use crate::report::Report;

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

/// Analyses each bundled capture on its own.
pub fn run() -> Result<Vec<(&'static str, Report)>, InputError> {
    let opts = Options {
        ladder_rows: 60,
        ..Options::default()
    };
    CAPTURES
        .iter()
        .map(|(title, name, bytes)| {
            Ok((
                *title,
                analyze(&[Capture::from_static(name, bytes)], &opts)?,
            ))
        })
        .collect()
}
