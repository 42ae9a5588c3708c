//! The `tcpdoctor` command: a thin layer over the library.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::diagnose;

use tcpdoctor::measure::common::parse_positive_duration;

use tcpdoctor::output::{self};
use tcpdoctor::report;

#[path = "tcpdoctor/analyze.rs"]
mod analyze;
#[path = "tcpdoctor/bench.rs"]
mod bench;
#[path = "tcpdoctor/capture.rs"]
mod capture;
#[path = "tcpdoctor/common.rs"]
mod common;
#[path = "tcpdoctor/docs.rs"]
mod docs;
#[path = "tcpdoctor/inspect.rs"]
mod inspect;
#[path = "tcpdoctor/lab.rs"]
mod lab;
#[path = "tcpdoctor/nodelay.rs"]
mod nodelay;
#[path = "tcpdoctor/probe.rs"]
mod probe;
#[path = "tcpdoctor/trace.rs"]
mod trace;
#[path = "tcpdoctor/watch.rs"]
mod watch;

use common::{
    TlsArgs, TraceMethodArg, check_url, exit, fail, html_file, output, print, print_json, read_option_file,
    trace_method, write_html,
};

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
    #[command(after_help = "Regular files are mapped; `-`, FIFOs and devices are streamed (memory for the open \
connections, not the input). Ctrl-C stops reading and prints the report of what was read.\n\n\
Exit codes: 0 all input analysed, or stopped by Ctrl-C; 2 bad command line; 3 no input could be read; \
4 results printed but part of the input was damaged or skipped (see WARNINGS); 6 the report could not be written \
(standard output or --html failed; a closed pipe is not a failure).")]
    Analyze(analyze::Args),
    /// HTTP/1.1 load like wrk (same flags and layout), plus time to first byte, read gaps and client knobs.
    #[command(after_help = "Exit codes: 0 the run completed and measured responses (errors are counted in the \
report); 2 bad command line: a URL that cannot be used as written (syntax, port 0), -c/-t/-R of 0, a -H \
without a colon or with a bad name, a bad --method, a --body-file over 64 MiB, a --cacert with no PEM \
certificate; 3 the run could not start (host that does not resolve, unreadable --body-file or --cacert, too few \
open files, no CA certificate in the system's store) or the server's TLS certificate was refused (expired, \
unknown issuer, wrong name: one line says which); 5 nothing was measured: no connection could \
be made (the first connect error says why), or none got a complete response (the report is printed, then one line \
says why); 6 the results could not be written (standard output or --html).\n\n\
https:// URLs speak TLS 1.3 or 1.2 (rustls), SNI from the host name, ALPN http/1.1; the certificate is checked \
against the system's CA store unless --cacert or -k. Handshake times, resumed sessions, version and cipher suite \
are reported.\n\n\
Latency is measured from writing the request to the response's last byte (with -R, from when the request \
was due). Ctrl-C stops the run and prints what was measured.")]
    Bench(bench::Args),
    /// TCP round trips to a port, like `hping3 -S`: raw SYNs with kernel timestamps, or timed connect().
    #[command(after_help = "Needs CAP_NET_RAW (root) for raw SYNs; without it, or with --unprivileged, each probe \
is a timed non-blocking connect() and tcpi_rtt is shown too (a note on stderr says so).

Exit codes: 0 at least one probe answered (open or closed); 1 no TCP answer at all (filtered); 2 bad command \
line; 3 HOST cannot be resolved (or has no address of the -4/-6 family); 5 cannot measure (a socket call failed: \
no route, no permission); 6 the results could not be written to standard output.")]
    Probe(probe::Args),
    /// The routers on the way to a TCP port, like `traceroute --tcp -n`.
    #[command(after_help = "Needs CAP_NET_RAW (root) for raw SYNs and a raw ICMP socket; without it, or with \
--unprivileged, each probe is a TTL-limited connect() whose ICMP error is read from the socket's error queue \
(IP_RECVERR). Addresses are always numeric (-n is accepted for compatibility).

Exit codes: 0 destination reached (open or closed); 1 not reached (max hops, or ICMP unreachable); 2 bad command \
line; 3 HOST cannot be resolved; 5 cannot measure (a socket call failed); 6 the results could not be written to \
standard output.")]
    Trace(trace::Args),
    /// Capture TCP packets to a pcap file, like `tcpdump -w` (no libpcap needed).
    #[command(after_help = "Only TCP over IPv4 and IPv6 is captured; FILTER narrows it further (tcpdump syntax: \
[src|dst] host ADDR, net ADDR/LEN, port N, portrange N-M, tcp, ip, ip6, and, or, not, parentheses). The filter \
runs in the kernel. Timestamps are in nanoseconds. On loopback, the outgoing copy of each packet is left out. \
Ctrl-C stops the capture and leaves a complete file. Needs CAP_NET_RAW (root, or `setcap cap_net_raw+ep` on the \
binary).

Exit codes: 0 captured (even 0 packets); 2 bad command line or filter; 3 no such interface, or FILE cannot be \
written; 5 cannot capture (no CAP_NET_RAW, interface down, a socket call failed); 6 FILE or standard output \
failed during the capture. FILE is written as .FILE.XXXXXX.tmp beside it and renamed to FILE when the capture \
ends.")]
    Capture(capture::Args),
    /// A live process's TCP sockets: TCP_NODELAY/TCP_CORK, tcp_info, its server software's own knob, host settings.
    #[command(after_help = "PID is a process id; :PORT means the process listening on that TCP port (for nginx, \
its master: the workers that share the listening socket are inspected with it, and only sockets on PORT are \
listed). Socket options are read on duplicates of the sockets (pidfd_getfd, Linux >= 5.6), which needs ptrace \
permission over the process (same user, root, or CAP_SYS_PTRACE); nothing about the process is changed. A \
process that exits during the window is still reported, flagged as exited.

--trace D records the process's reads, writes and waits on TCP sockets for D (at most 60 s) with ptrace, like \
`strace -f` (PTRACE_SEIZE on every thread of the process and its workers, Linux >= 5.3; no eBPF), then detaches \
and leaves it as it was. It finds write-write-read: responses written in two or more small pieces with Nagle on, \
then a wait for the next request (the Nagle + delayed-ACK stall's shape). Tracing stops the process at every \
syscall: each one takes some microseconds longer meanwhile; the report measures and prints that cost. It needs \
ptrace permission (root or CAP_SYS_PTRACE, or the same user where kernel.yama.ptrace_scope allows it) and fails if \
another tracer (a debugger, strace) holds the process. Ctrl-C ends the trace early and reports what was recorded.

Exit codes: 0 inspected (also when the process exited during --trace: the report says so); 2 bad command line; \
3 no such process, or nothing listens on PORT; 5 cannot inspect or trace (no ptrace permission, already traced, \
kernel too old); 6 the report could not be written to standard output.")]
    Inspect(inspect::Args),
    /// Switch TCP_NODELAY on (or off) live on a server's sockets, and restore it: the fix, tried without a restart.
    #[command(after_help = "PID is a process id; :PORT means the process listening on that TCP port (for nginx, its \
master, with the workers that share its listening socket). on|off sets TCP_NODELAY on its listening sockets (on \
PORT, or all of them) and on the established connections accepted on them, through duplicates of the sockets \
(pidfd_getfd, Linux >= 5.6; needs ptrace permission: root, CAP_SYS_PTRACE or the same user); connections accepted \
later inherit the value from the listening socket. Before the first change the previous values are saved in \
/run/tcpdoctor/PID-STARTTIME.json (root; otherwise $XDG_RUNTIME_DIR/tcpdoctor/), so restore puts them back after \
Ctrl-C or a crash; a second on/off keeps the first saved values. restore puts back every saved socket still open \
(those the process changed itself since are left as they are and listed) and removes the file. A process under \
another tracer (a debugger, strace) is refused.

Caveats: the server may set the option itself later (nginx sets TCP_NODELAY per keep-alive connection when its \
own tcp_nodelay is on); listening sockets created after a reload do not inherit the change; the lasting fix is \
the server's own configuration (diagnose names it).

Exit codes: 0 switched or restored (also when nothing needed changing); 2 bad command line; 3 no such process, \
nothing listens on PORT, no listening TCP socket in the process (on PORT), or restore: nothing saved for it (a \
process that is gone has its saved state removed); 5 cannot: no ptrace permission, already traced by another \
process, kernel too old, a socket call failed; 6 the state file could not be written (nothing was changed) or its directory is not \
private, or standard output failed.")]
    Nodelay(nodelay::Args),
    /// The whole method against a URL: RTT, alone vs under load, quick-ACK A/B, capture, server process, verdict.
    #[command(after_help = "Step 4 (capture) needs CAP_NET_RAW and step 5 (server process) needs the server on this \
host and ptrace permission over it; without them the verdict comes from steps 1-3 and NOT CHECKED says what is \
missing. Step 5 also traces the server's reads and writes with ptrace for 0.5 s of the load (as `inspect --trace`), \
which slows the requests it serves meanwhile.

--try-nodelay (after the verdict, for a server on this host found in step 5) sets TCP_NODELAY live on the server's \
listening socket(s) of the port and its established connections (as `tcpdoctor nodelay :PORT on`; the previous \
values saved first in /run/tcpdoctor), runs the load again with the same parameters, restores every socket (unless \
--keep) and prints BEFORE / AFTER with the proof in one line. Otherwise one line says why it cannot. If the run is \
killed, `tcpdoctor nodelay PID restore` puts the values back. The exit code stays the verdict's.

Exit codes: 0 no latency problem found (with --verify/--before: the fix worked); 1 a cause was found (with \
--verify/--before: not fixed); 2 bad command line: a URL that cannot be used as written (syntax, port 0), \
-i naming no interface, a --before file that is not a `diagnose --json` record or is over 64 MiB, a --cacert with \
no PEM certificate; 3 unknown host, unreadable --cacert, or the server's TLS certificate refused (one line says \
why: expired, unknown issuer, wrong name); \
5 the server did not answer HTTP (verdict closed, no_response or unreachable), or a step the verdict needs \
measured nothing (one line says which step and why, and there is no verdict); 6 the results could not be written \
(standard output or --html).")]
    Diagnose(DiagnoseArgs),
    /// Start reproduction servers on 127.0.0.1 (or behind a real round trip) and print their URLs (Ctrl-C stops them).
    #[command(after_help = "Servers: (a) nagle: keep-alive, header then body in two writes, Nagle on; (b) nodelay: \
the same with TCP_NODELAY; (c) think: 45 ms think time, then one write; with --nginx, Debian's nginx with \
tcp_nodelay off and on; nagle-tls and nodelay-tls: (a) and (b) over HTTPS (header and body as two TLS records), \
with a certificate made at start for localhost, 127.0.0.1 and ::1, written to a new directory (printed; give it \
to --cacert, or use -k) and removed when lab stops.

--rtt D (root) runs them in a network namespace tcpdoctor-lab-PID at 198.18.x.2, reached from this host through \
two TAP devices joined by a userspace bridge that delays every frame D/2 each way (at SCHED_FIFO priority); \
--loss PCT drops that share of IP frames each way (seeded by --seed). The namespace is deleted when lab ends \
(Ctrl-C, SIGTERM, --duration); one left by a killed run is deleted by the next lab --rtt.

Exit codes: 0 stopped by Ctrl-C or --duration; 2 bad command line; 3 a server could not start (nginx missing, \
no free port); 5 --rtt without root, or the namespace, TAPs or bridge could not be made.")]
    Lab(lab::Args),
    /// Live detection on an interface: a line per finding as it happens, summaries per server, Prometheus metrics.
    #[command(after_help = "Runs until Ctrl-C, SIGTERM or --duration, then prints a final summary and analyze's \
verdict over the whole run. Findings: Nagle + delayed-ACK stalls, retransmission timeouts, SYN retransmissions, \
zero windows; at most --max-lines lines per server endpoint, kind and role per summary interval (the rest are \
counted in the summary). --metrics serves Prometheus (OpenMetrics) text at http://ADDR/metrics; only loopback \
addresses unless --metrics-public. Needs CAP_NET_RAW (root, or `setcap cap_net_raw+ep` on the binary).

Exit codes: 0 stopped (Ctrl-C, SIGTERM, --duration); 2 bad command line or filter, or a non-loopback --metrics \
address without --metrics-public; 3 no such interface, or the --metrics address cannot be bound; 5 cannot capture \
(no CAP_NET_RAW, interface down, a socket call failed); 6 standard output failed (without --metrics, watch \
ends when nobody reads its lines; with it, it goes on).")]
    Watch(watch::Args),
    /// The main job on built-in lab servers: diagnose (a) Nagle, (b) TCP_NODELAY, (c) think time, (d) Nagle over HTTPS, then verify the fix.
    #[command(after_help = "--offline analyses the real nginx captures bundled in the binary instead (no traffic).")]
    /// Print a shell completion script (bash, zsh or fish) to standard output.
    #[command(after_help = "Load it for this shell with `source <(tcpdoctor completions bash)`, or install it: \
bash /usr/share/bash-completion/completions/tcpdoctor, zsh /usr/share/zsh/vendor-completions/_tcpdoctor, \
fish /usr/share/fish/vendor_completions.d/tcpdoctor.fish (the .deb installs all three).

Exit codes: 0 written; 2 bad command line (a shell other than bash, zsh or fish); 6 standard output failed.")]
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: docs::CompletionShell,
    },
    /// Print the manual page (roff, section 1) to standard output: `tcpdoctor man | man -l -`.
    #[command(after_help = "One page for the whole command: each command's options, notes and exit codes. \
Install it as /usr/share/man/man1/tcpdoctor.1 (the .deb does).

Exit codes: 0 written; 2 bad command line; 6 standard output failed.")]
    Man,
    Demo {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Analyse the bundled captures (nginx tcp_nodelay off, then on) instead of running lab servers.
        #[arg(long)]
        offline: bool,
    },
}

#[derive(clap::Args)]
struct DiagnoseArgs {
    /// http://HOST[:PORT][/PATH]
    url: String,
    /// Also diagnose URL2 (the fixed server) and print before/after side by side.
    #[arg(long, value_name = "URL2", conflicts_with = "before")]
    verify: Option<String>,
    /// Compare with an earlier run saved with `--json > FILE` (re-run after a fix; at most 64 MiB).
    #[arg(long, value_name = "FILE")]
    before: Option<PathBuf>,
    /// Keep-alive connections for the load.
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: u32,
    /// How long the load runs.
    #[arg(short = 'd', long, default_value = "2s", value_parser = parse_positive_duration)]
    duration: Duration,
    /// Per-request timeout.
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration)]
    timeout: Duration,
    /// Interface to capture on (default: the one the route to the server uses).
    #[arg(short = 'i', long, value_name = "IFACE")]
    interface: Option<String>,
    /// Do not capture packets.
    #[arg(long)]
    no_capture: bool,
    /// Do not inspect the server process.
    #[arg(long)]
    no_inspect: bool,
    /// After the verdict, set TCP_NODELAY live on the server's sockets, run the load again, then restore them.
    #[arg(long, conflicts_with_all = ["verify", "no_inspect"])]
    try_nodelay: bool,
    /// With --try-nodelay: leave TCP_NODELAY set (`tcpdoctor nodelay PID restore` puts it back).
    #[arg(long, requires = "try_nodelay")]
    keep: bool,
    /// Force how step 5 traces the server: `ebpf` or `ptrace` (default: eBPF when it loads, else ptrace).
    #[arg(long, value_enum)]
    trace_method: Option<TraceMethodArg>,
    /// Print the whole record as JSON.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report (verdict, ladder, histograms, tables) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    #[command(flatten)]
    tls: TlsArgs,
}

fn diagnose_options(a: &DiagnoseArgs, trust: tcpdoctor::measure::tls::Trust) -> diagnose::Options {
    diagnose::Options {
        url: a.url.clone(),
        connections: a.connections as usize,
        load: a.duration,
        timeout: a.timeout,
        capture: !a.no_capture,
        interface: a.interface.clone(),
        inspect: !a.no_inspect,
        trust,
        trace_method: trace_method(a.trace_method),
        ..diagnose::Options::default()
    }
}

/// diagnose's failures: each kind has its exit code.
fn diagnose_failed(e: diagnose::DiagnoseError) -> ExitCode {
    use diagnose::DiagnoseError as E;
    let code = match e {
        E::Usage(_) => exit::USAGE,
        E::Resolve(_) | E::Certificate(_) => exit::INPUT,
        E::NotMeasured(_) => exit::NOT_MEASURED,
    };
    fail(code, e)
}

/// A file saved with `diagnose --json`, for `--before`.
fn read_before(f: &std::path::Path) -> Result<report::diagnose::Summary, ExitCode> {
    let why = "so not a `diagnose --json` record, which is a few KB";
    let bytes = read_option_file("--before", f, diagnose::MAX_BEFORE_FILE, exit::USAGE, why)?;
    let v = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| fail(exit::USAGE, format!("--before {}: {e}", f.display())))?;
    report::diagnose::Summary::from_json(&v)
        .ok_or_else(|| fail(exit::USAGE, format!("--before {}: not the output of `diagnose --json`", f.display())))
}

fn run_diagnose(a: DiagnoseArgs) -> ExitCode {
    // Everything the command line names is checked before any traffic.
    for url in std::iter::once(&a.url).chain(&a.verify) {
        if let Err(code) = check_url(url) {
            return code;
        }
    }
    if let Some(i) = a.interface.as_deref().filter(|i| !tcpdoctor::capture::live::interface_exists(i)) {
        return fail(exit::USAGE, format!("-i {i}: no such interface (`ip link` lists them)"));
    }
    let before = match a.before.as_deref().map(read_before).transpose() {
        Ok(b) => b,
        Err(code) => return code,
    };
    let html = match html_file(&a.html) {
        Ok(h) => h,
        Err(code) => return code,
    };
    if a.try_nodelay {
        // SIGTERM and SIGHUP too: the server's sockets are put back however the run is asked to end.
        tcpdoctor::interrupt::catch_all();
    } else {
        tcpdoctor::interrupt::catch();
    }
    let o = match a.tls.trust() {
        Ok(t) => diagnose_options(&a, t),
        Err(code) => return code,
    };
    let json = a.json;
    let mut say = |line: &str| {
        if !json {
            print(line)
        }
    };
    // The load steps' bars, as bench draws its own.
    let mut bar = None;
    let mut progress = |p: diagnose::Progress| match p {
        diagnose::Progress::Start(what, total) => bar = Some(report::progress::RunBar::new(what, total)),
        diagnose::Progress::Tick(t, n) => bar.iter().for_each(|b| b.update(t, n)),
        diagnose::Progress::End => bar = None,
    };
    if let Some(after) = &a.verify {
        return match diagnose::verify(&o, after, &mut say, &mut progress) {
            Ok((before, after, c)) => {
                if json {
                    print_json(&report::diagnose::DiagnoseOutput::Verified {
                        before: &before,
                        after: &after,
                        comparison: &c,
                    });
                } else {
                    print(&report::diagnose::render_comparison(&c));
                }
                write_html(
                    html,
                    || report::html::diagnose(&before, Some(&c)),
                    if c.fixed { exit::OK } else { exit::NO_REPLY },
                )
            }
            Err(e) => diagnose_failed(e),
        };
    }
    if !json {
        print(&format!("tcpdoctor diagnose {}\n", a.url));
    }
    let run = diagnose::run(&o, &mut say, &mut progress).map(|mut r| {
        if !json {
            print(&report::diagnose::render_verdict(&r));
        }
        if a.try_nodelay {
            let t = diagnose::try_nodelay::run(&o, &r, a.keep, &mut say, &mut progress);
            if !json {
                print(&report::nodelay::render_try(&t));
            }
            r.try_nodelay = Some(t);
        }
        r
    });
    match (run, before) {
        (Ok(r), Some(before)) => {
            let c = report::diagnose::Comparison::new(before, report::diagnose::Summary::of(&r));
            if json {
                print_json(&report::diagnose::DiagnoseOutput::Compared { report: &r, comparison: &c });
            } else {
                print(&report::diagnose::render_comparison(&c));
            }
            write_html(html, || report::html::diagnose(&r, Some(&c)), if c.fixed { exit::OK } else { exit::NO_REPLY })
        }
        (Ok(r), None) => {
            if json {
                print_json(&r);
            }
            let code = match r.verdict.cause {
                "none" => exit::OK,
                "closed" | "no_response" | "unreachable" => exit::NOT_MEASURED,
                _ => exit::NO_REPLY,
            };
            write_html(html, || report::html::diagnose(&r, None), code)
        }
        (Err(e), _) => diagnose_failed(e),
    }
}

fn run_demo(json: bool) -> ExitCode {
    tcpdoctor::interrupt::catch();
    let o = diagnose::Options::default();
    let mut say = |line: &str| {
        if !json {
            print(line)
        }
    };
    match tcpdoctor::demo::live(&o, &mut say) {
        Ok(d) => {
            if json {
                print_json(&d);
            }
            ExitCode::from(exit::OK)
        }
        Err(e) => fail(exit::NET, e),
    }
}

fn main() -> ExitCode {
    report::style::enable_for_terminal();
    let cli = Cli::parse();
    let code = run(cli);
    match output::failure() {
        Some(e) => fail(exit::OUTPUT, format!("cannot write to standard output: {e}; the report is incomplete")),
        None => code,
    }
}

fn run(cli: Cli) -> ExitCode {
    match cli.cmd {
        Cmd::Analyze(a) => analyze::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Probe(a) => probe::run(a),
        Cmd::Trace(a) => trace::run(a),
        Cmd::Inspect(a) => inspect::run(a),
        Cmd::Nodelay(a) => nodelay::run(a),
        Cmd::Capture(a) => capture::run(a),
        Cmd::Diagnose(a) => run_diagnose(a),
        Cmd::Lab(a) => lab::run(a),
        Cmd::Watch(a) => watch::run(a),
        Cmd::Completions { shell } => {
            output::print(&docs::completions(<Cli as clap::CommandFactory>::command(), shell));
            ExitCode::from(exit::OK)
        }
        Cmd::Man => match docs::man(<Cli as clap::CommandFactory>::command()) {
            Ok(page) => {
                output::print(&page);
                ExitCode::from(exit::OK)
            }
            Err(e) => fail(exit::OUTPUT, format!("cannot render the manual page: {e}")),
        },
        Cmd::Demo { json, offline: false } => run_demo(json),
        Cmd::Demo { json, offline: true } => match tcpdoctor::demo::run() {
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
