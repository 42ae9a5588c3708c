//! `tcpdoctor probe`: its arguments (hping3's), their mapping to the library's
//! options, and each probe's line as it comes.

use crate::common::{FamilyArgs, finish_measure, print, start_measure};
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::measure::common::{parse_duration, parse_positive_duration};
use tcpdoctor::measure::probe;
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor probe --help` (and in the manual page).
pub const AFTER_HELP: &str = "Needs CAP_NET_RAW (root) for raw SYNs; without it, or with --unprivileged, each probe \
is a timed non-blocking connect() and tcpi_rtt is shown too (a note on stderr says so).

Exit codes: 0 at least one probe answered (open or closed); 1 no TCP answer at all (filtered); 2 bad command \
line; 3 HOST cannot be resolved (or has no address of the -4/-6 family); 5 cannot measure (a socket call failed: \
no route, no permission); 6 the results could not be written to standard output.";

#[derive(clap::Args)]
pub struct Args {
    /// Host name or address.
    host: String,
    /// TCP port.
    #[arg(short = 'p', long, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Probes to send.
    #[arg(short = 'c', long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    count: u32,
    /// Time between probes: seconds (`0.2`) or with a unit (`200ms`, `1s`).
    #[arg(short = 'i', long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    interval: Duration,
    /// How long a probe waits for its answer before it counts as filtered.
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration, value_name = "DURATION")]
    timeout: Duration,
    #[command(flatten)]
    family: FamilyArgs,
    /// SYN probes (what probe always sends; accepted for hping3 compatibility).
    #[arg(short = 'S', long = "syn")]
    _syn: bool,
    /// Time connect() even when raw sockets are allowed.
    #[arg(long)]
    unprivileged: bool,
    /// Print the results as JSON (schema in the README).
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> ExitCode {
    let opts = probe::Options {
        host: a.host,
        port: a.port,
        count: a.count,
        interval: a.interval,
        timeout: a.timeout,
        family: a.family.get(),
        unprivileged: a.unprivileged,
    };
    let json = a.json;
    let result = probe::run(&opts, |ev| match ev {
        probe::Event::Start(r) => {
            start_measure(&r.notes, json, || report::probe::render_header(r));
        }
        probe::Event::Probe(p) if !json => print(&report::probe::render_probe(p, opts.port)),
        probe::Event::Probe(_) => {}
    });
    finish_measure(result, json, report::probe::render_summary, |r| r.summary.received > 0)
}
