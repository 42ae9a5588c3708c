//! The `tcpdoctor` command: a thin layer over the library.

use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::analyze::{self, Options};
use tcpdoctor::capture::Capture;
use tcpdoctor::filter::Filter;
use tcpdoctor::inspect::{self, InspectError};
use tcpdoctor::measure::common::{
    Error as MeasureError, Family, parse_duration, parse_positive_duration, parse_run_length,
};
use tcpdoctor::measure::{probe, trace};
use tcpdoctor::report::{self, Report};

/// Exit codes (also in the README).
mod exit {
    /// Analysis ran on all input.
    pub const OK: u8 = 0;
    /// Bad command line (clap uses 2 as well).
    pub const USAGE: u8 = 2;
    /// No input could be read: missing file, not a capture, empty, unsupported link type;
    /// inspect: no such process, or nothing listens on the port.
    pub const INPUT: u8 = 3;
    /// Results printed, but part of the input was damaged or skipped (see warnings).
    pub const PARTIAL: u8 = 4;
    /// probe: no probe got a TCP answer; trace: the destination did not answer.
    pub const NO_REPLY: u8 = 1;
    /// probe/trace could not measure: a socket call failed (no route, no permission…);
    /// inspect could not read the process (no ptrace permission, kernel too old).
    pub const NET: u8 = 5;
}

#[derive(Parser)]
#[command(
    name = "tcpdoctor",
    version,
    about = "Finds where a TCP request's milliseconds go and names the cause with evidence."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Analyse pcap/pcapng captures: verdict, per-connection table, time breakdown, ladder.
    #[command(after_help = "Exit codes: 0 all input analysed; 2 bad command line; 3 no input could be read; \
4 results printed but part of the input was damaged or skipped (see WARNINGS).")]
    Analyze(AnalyzeArgs),
    /// HTTP/1.1 load like wrk (same flags and layout), plus time to first byte, read gaps and client knobs.
    #[command(after_help = "Exit codes: 0 the run completed (even with errors: they are counted in the report); \
2 bad command line; 3 the run could not start (bad URL, unresolvable host).\n\n\
Latency is measured from writing the request to the response's last byte (with -R, from when the request \
was due). Ctrl-C stops the run and prints what was measured.")]
    Bench(BenchArgs),
    /// TCP round trips to a port, like `hping3 -S`: raw SYNs with kernel timestamps, or timed connect().
    #[command(after_help = "Needs CAP_NET_RAW (root) for raw SYNs; without it, or with --unprivileged, each probe \
is a timed non-blocking connect() and tcpi_rtt is shown too (a note on stderr says so).

Exit codes: 0 at least one probe answered (open or closed); 1 no TCP answer at all (filtered); 2 bad command \
line; 3 HOST cannot be resolved (or has no address of the -4/-6 family); 5 cannot measure (a socket call failed: \
no route, no permission).")]
    Probe(ProbeArgs),
    /// The routers on the way to a TCP port, like `traceroute --tcp -n`.
    #[command(after_help = "Needs CAP_NET_RAW (root) for raw SYNs and a raw ICMP socket; without it, or with \
--unprivileged, each probe is a TTL-limited connect() whose ICMP error is read from the socket's error queue \
(IP_RECVERR). Addresses are always numeric (-n is accepted for compatibility).

Exit codes: 0 destination reached (open or closed); 1 not reached (max hops, or ICMP unreachable); 2 bad command \
line; 3 HOST cannot be resolved; 5 cannot measure (a socket call failed).")]
    Trace(TraceArgs),
    /// A live process's TCP sockets: TCP_NODELAY/TCP_CORK, tcp_info, its server software's own knob, host settings.
    #[command(after_help = "PID is a process id; :PORT means the process listening on that TCP port (for nginx, \
its master: the workers that share the listening socket are inspected with it, and only sockets on PORT are \
listed). Socket options are read on duplicates of the sockets (pidfd_getfd, Linux >= 5.6), which needs ptrace \
permission over the process (same user or root); nothing about the process is changed.

Exit codes: 0 inspected; 2 bad command line; 3 no such process, or nothing listens on PORT; 5 cannot inspect \
(no ptrace permission, kernel too old).")]
    Inspect(InspectArgs),
    /// Analyse the real captures bundled in tcpdoctor (nginx with tcp_nodelay off, then on).
    Demo {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct AnalyzeArgs {
    /// Capture files (pcap or pcapng); `-` reads standard input.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print the findings as JSON (schema in the README).
    #[arg(long)]
    json: bool,
    /// Only segments matching a tcpdump-style filter, e.g. 'tcp port 8080 and host 10.0.0.1'.
    #[arg(long, value_name = "EXPR")]
    filter: Option<String>,
    /// Draw this connection's packet ladder (ID from the connection table; `F:N` with several files).
    #[arg(long, value_name = "ID")]
    flow: Option<String>,
    /// Most rows in a ladder.
    #[arg(long, default_value_t = 60, value_name = "N")]
    ladder_rows: usize,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// http://HOST[:PORT][/PATH]
    url: String,
    /// Connections to keep open (all are used, whatever -t is).
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// Worker threads.
    #[arg(short = 't', long, default_value_t = 2)]
    threads: usize,
    /// Duration of the test, e.g. 10s, 2m.
    #[arg(short = 'd', long, default_value = "10s", value_parser = parse_run_length)]
    duration: Duration,
    /// Per-request timeout: a request without a complete response by then is counted and its connection replaced.
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration)]
    timeout: Duration,
    /// Print the latency percentiles (as wrk --latency).
    #[arg(long)]
    latency: bool,
    /// Add a request header, e.g. -H 'Accept: */*' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// Request method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Request body from a file.
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
    /// Fixed total request rate (requests/s); latency then counts from when each request was due (as wrk2).
    #[arg(short = 'R', long = "rate", value_name = "RATE")]
    rate: Option<f64>,
    /// A new connection for every request (like ab without -k).
    #[arg(long)]
    no_keepalive: bool,
    /// TCP_NODELAY on the client's sockets.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    nodelay: String,
    /// Set TCP_QUICKACK after every read, so this client never delays its ACKs.
    #[arg(long)]
    quickack: bool,
    /// Write the request header and body in two writes (reproduces a client-side Nagle stall with --nodelay off).
    #[arg(long)]
    split_writes: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct ProbeArgs {
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
    /// Time connect() even when raw sockets are allowed.
    #[arg(long)]
    unprivileged: bool,
    /// Print the results as JSON (schema in the README).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct InspectArgs {
    /// A process id, or `:PORT` for the process listening on that TCP port.
    #[arg(value_name = "PID | :PORT", value_parser = parse_target)]
    target: Target,
    /// How long to watch the host's delayed-ACK counters: seconds (`0.5`) or with a unit (`500ms`, `2s`).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    window: Duration,
    /// Print the results as JSON (schema in the README).
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy)]
enum Target {
    Pid(u32),
    Port(u16),
}

fn parse_target(s: &str) -> Result<Target, String> {
    if let Some(p) = s.strip_prefix(':') {
        return match p.parse::<u16>() {
            Ok(port) if port > 0 => Ok(Target::Port(port)),
            _ => Err(format!("`{s}`: a port is 1 to 65535, e.g. :8080")),
        };
    }
    match s.parse::<u32>() {
        Ok(pid) if pid > 0 => Ok(Target::Pid(pid)),
        _ => Err(format!("`{s}` is neither a process id nor :PORT")),
    }
}

fn inspect_failed(e: InspectError) -> ExitCode {
    let code = match e {
        InspectError::NoProcess { .. } => exit::INPUT,
        _ => exit::NET,
    };
    fail(code, e)
}

fn run_inspect(a: InspectArgs) -> ExitCode {
    let (pid, port) = match a.target {
        Target::Pid(pid) => (pid, None),
        Target::Port(port) => match inspect::find_listener(port) {
            Ok(Some(pid)) => (pid, Some(port)),
            Ok(None) => {
                return fail(
                    exit::INPUT,
                    format!("port {port}: nothing listens on it (checked /proc/net/tcp and tcp6)"),
                );
            }
            Err(e) => return inspect_failed(e),
        },
    };
    match inspect::inspect(pid, &inspect::Options { window: a.window, port }) {
        Ok(r) if a.json => {
            print_json(&r);
            ExitCode::from(exit::OK)
        }
        Ok(r) => {
            print(&report::inspect::render(&r));
            ExitCode::from(exit::OK)
        }
        Err(e) => inspect_failed(e),
    }
}

fn run_bench(a: BenchArgs) -> ExitCode {
    use std::io::IsTerminal;
    let body = match (&a.body, &a.body_file) {
        (Some(b), _) => b.clone().into_bytes(),
        (None, Some(f)) => match std::fs::read(f) {
            Ok(b) => b,
            Err(e) => return fail(exit::INPUT, format!("--body-file {}: {e}", f.display())),
        },
        (None, None) => Vec::new(),
    };
    let o = tcpdoctor::measure::bench::Options {
        url: a.url,
        threads: a.threads,
        connections: a.connections,
        duration: a.duration,
        timeout: a.timeout,
        method: a.method,
        headers: a.headers,
        body,
        rate: a.rate,
        keepalive: !a.no_keepalive,
        nodelay: a.nodelay == "on",
        quickack: a.quickack,
        split_writes: a.split_writes,
    };
    let tty = std::io::stderr().is_terminal();
    let total = a.duration;
    let mut progress = |t: std::time::Duration, n: u64| {
        if tty {
            eprint!(
                "\r\x1b[K  {:.0}s / {:.0}s  {n} requests  {:.0} req/s",
                t.as_secs_f64(),
                total.as_secs_f64(),
                n as f64 / t.as_secs_f64()
            );
        }
    };
    match tcpdoctor::measure::bench::run(&o, &mut progress) {
        Ok(r) => {
            if tty {
                eprint!("\r\x1b[K");
            }
            if a.json {
                print_json(&r);
            } else {
                print(&report::bench::render(&r, a.latency));
            }
            ExitCode::from(exit::OK)
        }
        Err(e) => fail(exit::INPUT, e),
    }
}

#[derive(clap::Args)]
struct TraceArgs {
    /// Host name or address.
    host: String,
    /// TCP port.
    #[arg(short = 'p', long, default_value_t = 80, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Numeric addresses (always the case; accepted for traceroute compatibility).
    #[arg(short = 'n')]
    numeric: bool,
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

#[derive(clap::Args)]
struct FamilyArgs {
    /// IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6')]
    ipv6: bool,
}

impl FamilyArgs {
    fn get(&self) -> Option<Family> {
        match (self.ipv4, self.ipv6) {
            (true, _) => Some(Family::V4),
            (_, true) => Some(Family::V6),
            _ => None,
        }
    }
}

fn print(s: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = out.write_all(s.as_bytes()).and_then(|_| out.flush());
}

fn output(r: &Report, json: bool) {
    if json {
        print_json(r);
    } else {
        print(&report::render(r));
    }
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("tcpdoctor: {msg}");
    ExitCode::from(code)
}

fn run_analyze(a: AnalyzeArgs) -> ExitCode {
    let filter = match a.filter.as_deref().map(Filter::parse).transpose() {
        Ok(f) => f,
        Err(e) => return fail(exit::USAGE, format!("--filter: {e}")),
    };
    let stdin_count = a.files.iter().filter(|f| f.as_os_str() == "-").count();
    if stdin_count > 1 {
        return fail(exit::USAGE, "standard input (`-`) can be given only once");
    }
    let mut caps = Vec::new();
    let mut skipped = Vec::new();
    for f in &a.files {
        match Capture::open(f) {
            Ok(c) => caps.push(c),
            Err(e) => skipped.push(format!("{}: {e}", f.display())),
        }
    }
    if caps.is_empty() {
        return fail(exit::INPUT, skipped.join("; "));
    }
    let opts = Options { filter, flow: a.flow.clone(), ladder_rows: a.ladder_rows };
    let mut r = match analyze::analyze(&caps, &opts) {
        Ok(r) => r,
        Err(e) if skipped.is_empty() => return fail(exit::INPUT, e),
        Err(e) => return fail(exit::INPUT, format!("{e}; also {}", skipped.join("; "))),
    };
    for s in &skipped {
        r.warnings.insert(0, format!("{s} (file skipped)"));
    }
    if let Some(id) = &a.flow
        && r.ladder.as_ref().is_none_or(|l| &l.connection != id && !l.connection.ends_with(&format!(":{id}")))
    {
        return fail(exit::USAGE, format!("--flow {id}: no such connection (ids are in the CONNECTIONS table)"));
    }
    output(&r, a.json);
    let partial =
        r.inputs.len() < a.files.len() || r.inputs.iter().any(|i| i.damage.is_some() || i.malformed_packets > 0);
    if partial {
        // One line: the first problem (file, offset, what), and how many more.
        let more = match r.warnings.len() {
            0 | 1 => String::new(),
            n => format!(" (+{} more warnings)", n - 1),
        };
        let first = r.warnings.first().map_or("part of the input was damaged", String::as_str);
        eprintln!("tcpdoctor: warning: {first}{more}");
        return ExitCode::from(exit::PARTIAL);
    }
    ExitCode::from(exit::OK)
}

fn measure_failed(e: MeasureError) -> ExitCode {
    match e {
        MeasureError::Resolve(_) => fail(exit::INPUT, e),
        MeasureError::Net(_) => fail(exit::NET, e),
    }
}

fn print_json<T: serde::Serialize>(v: &T) {
    print(&format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default()));
}

/// The start of a probe or trace: notes to stderr, the header line unless JSON.
fn start_measure(notes: &[String], json: bool, header: impl FnOnce() -> String) {
    for n in notes {
        eprintln!("tcpdoctor: note: {n}");
    }
    if !json {
        print(&header());
    }
}

/// The end of a probe or trace: the summary (or the JSON record) and the exit code.
fn finish_measure<T: serde::Serialize>(
    result: Result<T, MeasureError>,
    json: bool,
    summary: impl Fn(&T) -> String,
    answered: impl Fn(&T) -> bool,
) -> ExitCode {
    let r = match result {
        Ok(r) => r,
        Err(e) => return measure_failed(e),
    };
    if json {
        print_json(&r);
    } else {
        print(&summary(&r));
    }
    ExitCode::from(if answered(&r) { exit::OK } else { exit::NO_REPLY })
}

fn run_probe(a: ProbeArgs) -> ExitCode {
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

fn run_trace(a: TraceArgs) -> ExitCode {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Analyze(a) => run_analyze(a),
        Cmd::Bench(a) => run_bench(a),
        Cmd::Probe(a) => run_probe(a),
        Cmd::Trace(a) => run_trace(a),
        Cmd::Inspect(a) => run_inspect(a),
        Cmd::Demo { json } => match tcpdoctor::demo::run() {
            Ok(reports) => {
                if json {
                    let v: Vec<_> = reports.iter().map(|(_, r)| r).collect();
                    print_json(&v);
                } else {
                    for (title, r) in &reports {
                        print(&format!("== {title}\n\n"));
                        output(r, false);
                        print("\n");
                    }
                    print(&format!("{}\n", tcpdoctor::demo::proof(&reports[0].1, &reports[1].1)));
                }
                ExitCode::from(exit::OK)
            }
            Err(e) => fail(exit::INPUT, e),
        },
    }
}
