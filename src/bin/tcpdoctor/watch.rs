//! `tcpdoctor watch`: its arguments, their mapping to the library's options,
//! and the metrics server they ask for.

use crate::common::{exit, fail, filter_words, live_exit};
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::capture::live::{LiveCapture, LiveOptions};
use tcpdoctor::measure::common::{parse_positive_duration, parse_run_length};
use tcpdoctor::output;

/// The notes and exit codes under `tcpdoctor watch --help` (and in the manual page).
pub const AFTER_HELP: &str = "Runs until Ctrl-C, SIGTERM or --duration, then prints a final summary and analyze's \
verdict over the whole run. Findings: Nagle + delayed-ACK stalls, retransmission timeouts, SYN retransmissions, \
zero windows; at most --max-lines lines per server endpoint, kind and role per summary interval (the rest are \
counted in the summary). --metrics serves Prometheus (OpenMetrics) text at http://ADDR/metrics; only loopback \
addresses unless --metrics-public. Needs CAP_NET_RAW (root, or `setcap cap_net_raw+ep` on the binary).

Exit codes: 0 stopped (Ctrl-C, SIGTERM, --duration); 2 bad command line or filter, or a non-loopback --metrics \
address without --metrics-public; 3 no such interface, or the --metrics address cannot be bound; 5 cannot capture \
(no CAP_NET_RAW, interface down, a socket call failed); 6 standard output failed (without --metrics, watch \
ends when nobody reads its lines; with it, it goes on).";

#[derive(clap::Args)]
pub struct Args {
    /// Interface to capture on; `any` for all of them.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    iface: String,
    /// Filter, tcpdump-style, e.g. `tcp port 8080` (quoted or as separate words).
    #[arg(value_name = "FILTER")]
    filter: Vec<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Allow a --metrics address that is not loopback (the metrics name your servers and clients).
    #[arg(long)]
    metrics_public: bool,
    /// JSON lines instead of text (one object per finding and per summary).
    #[arg(long)]
    json: bool,
    /// Stop after this long, e.g. 30s, 2h (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_parser = parse_run_length, value_name = "DURATION")]
    duration: Option<Duration>,
    /// Time between summaries.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration, value_name = "DURATION")]
    summary_every: Duration,
    /// Most connections tracked at once; beyond it the longest silent are evicted (and counted).
    #[arg(long, default_value_t = 100_000, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    max_connections: u64,
    /// Most server endpoints counted by name; connections to more are counted as `other`.
    #[arg(long, default_value_t = 256, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_endpoints: u64,
    /// With the endpoint table full, a new endpoint takes the slot of one silent this long (its series are removed).
    #[arg(long, default_value = "10m", value_parser = parse_positive_duration, value_name = "DURATION")]
    endpoint_idle: Duration,
    /// Forget a connection silent this long.
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration, value_name = "DURATION")]
    idle_timeout: Duration,
    /// Finding lines per server endpoint, kind and role in one summary interval (0: summaries only).
    #[arg(long, default_value_t = 5, value_name = "N")]
    max_lines: u32,
}

/// Bytes kept of each packet by watch: headers and the start of a response
/// (enough for its `Server:` header); payload lengths come from the IP header.
const WATCH_SNAPLEN: u32 = 2048;

pub fn run(a: Args) -> ExitCode {
    use tcpdoctor::watch::{self, Limits, Metrics, MetricsServer};
    let filter = match filter_words(&a.filter) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let metrics_addr = match a.metrics.as_deref().map(|m| (m, m.parse::<std::net::SocketAddr>())) {
        None => None,
        Some((m, Err(_))) => {
            return fail(
                exit::USAGE,
                format!("--metrics {m}: not an address and port (e.g. 127.0.0.1:9464 or [::1]:9464)"),
            );
        }
        Some((m, Ok(addr))) if !addr.ip().is_loopback() && !a.metrics_public => {
            return fail(
                exit::USAGE,
                format!(
                    "--metrics {m}: not a loopback address, so anyone who can reach it reads the metrics; add --metrics-public to mean it"
                ),
            );
        }
        Some((_, Ok(addr))) => Some(addr),
    };
    let what = filter.as_ref().map(|_| format!(" ({})", a.filter.join(" "))).unwrap_or_default();
    let o = LiveOptions { iface: a.iface.clone(), filter, snaplen: WATCH_SNAPLEN };
    let mut cap = match LiveCapture::open(&o) {
        Ok(c) => c,
        Err(e) => return fail(live_exit(&e), e),
    };
    let metrics = metrics_addr.map(|_| std::sync::Arc::new(Metrics::new()));
    let server = match (metrics_addr, &metrics) {
        (Some(addr), Some(m)) => match MetricsServer::start(addr, m.clone()) {
            Ok(s) => Some(s),
            Err(e) => {
                return fail(
                    exit::INPUT,
                    format!("--metrics {addr}: cannot listen: {e}; choose another address or port"),
                );
            }
        },
        _ => None,
    };
    let ro = watch::RunOptions {
        watch: watch::Options {
            idle: a.idle_timeout,
            max_connections: usize::try_from(a.max_connections).unwrap_or(usize::MAX),
            limits: Limits {
                max_endpoints: usize::try_from(a.max_endpoints).unwrap_or(usize::MAX),
                lines_per_interval: a.max_lines,
                endpoint_idle: a.endpoint_idle,
            },
        },
        summary_every: a.summary_every,
        duration: a.duration,
        json: a.json,
    };
    // SIGTERM too: under systemd or Kubernetes that is how it is asked to stop.
    tcpdoctor::interrupt::catch_all();
    let at = server.as_ref().map(|s| format!(", metrics at http://{}/metrics", s.addr())).unwrap_or_default();
    eprintln!("tcpdoctor: watching {}{what}{at}; a summary every {:?}; Ctrl-C stops", a.iface, a.summary_every);
    // Which process owns a stalled endpoint: from the kernel when eBPF loads.
    let owners = match watch::Owners::start() {
        Ok(o) => Some(o),
        Err(why) => {
            eprintln!("tcpdoctor: findings will not name the owning process: eBPF is not available ({why})");
            None
        }
    };
    let mut out = output::Stdout;
    let r = watch::run(&mut cap, &ro, metrics, owners, tcpdoctor::interrupt::flag(), &mut out);
    drop(server);
    match r {
        Ok(_) => ExitCode::from(exit::OK),
        Err(e) => fail(live_exit(&e), e),
    }
}
