//! The `tcpdoctor` command: a thin layer over the library.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
#[path = "tcpdoctor/demo.rs"]
mod demo;
#[path = "tcpdoctor/diagnose.rs"]
mod diagnose;
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

use common::{exit, fail};

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
    Diagnose(diagnose::Args),
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
    Demo(demo::Args),
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
        Cmd::Diagnose(a) => diagnose::run(a),
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
        Cmd::Demo(a) => demo::run(a),
    }
}
