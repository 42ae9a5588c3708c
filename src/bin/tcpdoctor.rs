//! The `tcpdoctor` command: a thin layer over the library.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use tcpdoctor::output;
use tcpdoctor::report;

/// In the static (musl) binary, mimalloc instead of musl's allocator, which
/// serialises every allocation behind one lock (see Cargo.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    #[command(after_help = analyze::AFTER_HELP)]
    Analyze(analyze::Args),
    /// HTTP/1.1 load like wrk (same flags and layout), plus time to first byte, read gaps and client knobs.
    #[command(after_help = bench::AFTER_HELP)]
    Bench(bench::Args),
    /// TCP round trips to a port, like `hping3 -S`: raw SYNs with kernel timestamps, or timed connect().
    #[command(after_help = probe::AFTER_HELP)]
    Probe(probe::Args),
    /// The routers on the way to a TCP port, like `traceroute --tcp -n`.
    #[command(after_help = trace::AFTER_HELP)]
    Trace(trace::Args),
    /// Capture TCP packets to a pcap file, like `tcpdump -w` (no libpcap needed).
    #[command(after_help = capture::AFTER_HELP)]
    Capture(capture::Args),
    /// A live process's TCP sockets: TCP_NODELAY/TCP_CORK, tcp_info, its server software's own knob, host settings.
    #[command(after_help = inspect::AFTER_HELP)]
    Inspect(inspect::Args),
    /// Switch TCP_NODELAY on (or off) live on a server's sockets, and restore it: the fix, tried without a restart.
    #[command(after_help = nodelay::AFTER_HELP)]
    Nodelay(nodelay::Args),
    /// The whole method against a URL: RTT, alone vs under load, quick-ACK A/B, capture, server process, verdict.
    #[command(after_help = diagnose::AFTER_HELP)]
    Diagnose(diagnose::Args),
    /// Start reproduction servers on 127.0.0.1 (or behind a real round trip) and print their URLs (Ctrl-C stops them).
    #[command(after_help = lab::AFTER_HELP)]
    Lab(lab::Args),
    /// Live detection on an interface: a line per finding as it happens, summaries per server, Prometheus metrics.
    #[command(after_help = watch::AFTER_HELP)]
    Watch(watch::Args),
    /// The main job on built-in lab servers: diagnose (a) Nagle, (b) TCP_NODELAY, (c) think time, (d) Nagle over HTTPS, then verify the fix.
    #[command(after_help = "--offline analyses the real nginx captures bundled in the binary instead (no traffic).")]
    Demo(demo::Args),
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
