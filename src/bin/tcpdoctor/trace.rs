//! `tcpdoctor trace`: its arguments (traceroute's), their mapping to the
//! library's options, and each hop's line as it comes.

use crate::common::{FamilyArgs, finish_measure, print, start_measure};
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::measure::common::parse_positive_duration;
use tcpdoctor::measure::trace;
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor trace --help` (and in the manual page).
pub const AFTER_HELP: &str = "Needs CAP_NET_RAW (root) for raw SYNs and a raw ICMP socket; without it, or with \
--unprivileged, each probe is a TTL-limited connect() whose ICMP error is read from the socket's error queue \
(IP_RECVERR). Addresses are always numeric (-n is accepted for compatibility).

Exit codes: 0 destination reached (open or closed); 1 not reached (max hops, or ICMP unreachable); 2 bad command \
line; 3 HOST cannot be resolved; 5 cannot measure (a socket call failed); 6 the results could not be written to \
standard output.";

#[derive(clap::Args)]
pub struct Args {
    /// Host name or address.
    host: String,
    /// TCP port.
    #[arg(short = 'p', long, default_value_t = 80, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Numeric addresses (always the case; accepted for traceroute compatibility).
    #[arg(short = 'n')]
    numeric: bool,
    /// TCP SYN probes (what trace always sends; accepted for traceroute compatibility).
    #[arg(short = 'T', long = "tcp")]
    _tcp: bool,
    /// Largest TTL to try.
    #[arg(short = 'm', long, default_value_t = 30, value_name = "N", value_parser = clap::value_parser!(u8).range(1..))]
    max_hops: u8,
    /// Probes per hop.
    #[arg(short = 'q', long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10))]
    queries: u32,
    /// How long a hop waits for its answers: seconds (`0.5`) or with a unit (`500ms`).
    #[arg(short = 'w', long, default_value = "1s", value_parser = parse_positive_duration, value_name = "DURATION")]
    wait: Duration,
    #[command(flatten)]
    family: FamilyArgs,
    /// Use TTL-limited connect() even when raw sockets are allowed.
    #[arg(long)]
    unprivileged: bool,
    /// Print the results as JSON (schema in the README).
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> ExitCode {
    // -n changes nothing: output is always numeric.
    let _ = a.numeric;
    let opts = trace::Options {
        host: a.host,
        port: a.port,
        max_hops: a.max_hops,
        queries: a.queries,
        wait: a.wait,
        family: a.family.get(),
        unprivileged: a.unprivileged,
    };
    let json = a.json;
    let result = trace::run(&opts, |ev| match ev {
        trace::Event::Start(r) => {
            start_measure(&r.notes, json, || report::trace::render_header(r));
        }
        trace::Event::Hop(h) if !json => print(&report::trace::render_hop(h)),
        trace::Event::Hop(_) => {}
    });
    finish_measure(result, json, report::trace::render_summary, |r| r.reached)
}
