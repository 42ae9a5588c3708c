//! `tcpdoctor demo`: the main job. Live: lab servers started in-process,
//! diagnosed, then the Nagle one fixed and diagnosed again. Offline: the real
//! captures bundled in the binary, analysed.

use crate::analyze::{InputError, Options, analyze};
use crate::capture::Capture;
use crate::record::Report;
use crate::record::demo::{Case, LiveDemo};
use crate::record::diagnose::DiagnoseReport;
use crate::words::dur;

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

/// Starts the lab servers in this process, diagnoses each, then switches the
/// Nagle server to TCP_NODELAY and diagnoses it again: the fix, verified.
/// (d) is (a) over HTTPS, its certificate made now and trusted in-process.
/// `say` gets the progress lines, `verdict` each diagnosis as it is made.
pub fn live(
    o: &crate::diagnose::Options,
    say: &mut dyn FnMut(&str),
    verdict: &mut dyn FnMut(&DiagnoseReport),
) -> Result<LiveDemo, String> {
    use crate::diagnose;
    use crate::lab::{Mode, Server, tls::Cert};
    use crate::measure::tls::Trust;
    use crate::record::diagnose::{Comparison, Summary};
    let bind = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let cannot = |e| format!("cannot start a lab server on 127.0.0.1: {e}");
    let start = |m| Server::start(m, bind).map_err(cannot);
    let cert = Cert::generate(bind.ip())?;
    let servers = [
        ("(a)", start(Mode::Nagle)?),
        ("(b)", start(Mode::NoDelay)?),
        ("(c)", start(Mode::Think(std::time::Duration::from_millis(45)))?),
        ("(d)", Server::start_tls(Mode::Nagle, bind, &cert).map_err(cannot)?),
    ];
    let mut cases = Vec::new();
    for (label, s) in &servers {
        say(&format!("== {label} {}: {}\n", s.url(), s.describe()));
        let trust = Trust::Roots(vec![cert.der()]);
        let d = diagnose::run(&diagnose::Options { url: s.url(), trust, ..o.clone() }, say, &mut |_| {})
            .map_err(|e| e.to_string())?;
        verdict(&d);
        say("\n");
        cases.push(Case { label, server: s.describe(), diagnosis: d });
        if crate::interrupt::requested() {
            return Err("interrupted".into());
        }
    }
    let a = &servers[0].1;
    a.set_nodelay(true);
    say(&format!("== (a) again, after switching it to TCP_NODELAY (the fix): {}\n", a.url()));
    let after =
        diagnose::run(&diagnose::Options { url: a.url(), ..o.clone() }, say, &mut |_| {}).map_err(|e| e.to_string())?;
    verdict(&after);
    let fix = Comparison::new(Summary::of(&cases[0].diagnosis), Summary::of(&after));
    Ok(LiveDemo { schema: crate::record::SCHEMA_VERSION, cases, after_fix: after, fix })
}
