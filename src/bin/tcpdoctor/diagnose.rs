//! `tcpdoctor diagnose`: its arguments, their mapping to the library's
//! options, --before's file, and the steps' and verdict's printing.

use crate::common::{
    TlsArgs, TraceMethodArg, check_url, exit, fail, html_file, print, print_json, read_option_file, trace_method,
    write_html,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::diagnose;
use tcpdoctor::measure::common::parse_positive_duration;
use tcpdoctor::record::diagnose::{Comparison, DiagnoseOutput, Summary};
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor diagnose --help` (and in the manual page).
pub const AFTER_HELP: &str = "Step 4 (capture) needs CAP_NET_RAW and step 5 (server process) needs the server on this \
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
(standard output or --html).";

#[derive(clap::Args)]
pub struct Args {
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

fn diagnose_options(a: &Args, trust: tcpdoctor::measure::tls::Trust) -> diagnose::Options {
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
fn read_before(f: &std::path::Path) -> Result<Summary, ExitCode> {
    let why = "so not a `diagnose --json` record, which is a few KB";
    let bytes = read_option_file("--before", f, diagnose::MAX_BEFORE_FILE, exit::USAGE, why)?;
    let v = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|e| fail(exit::USAGE, format!("--before {}: {e}", f.display())))?;
    Summary::from_json(&v)
        .ok_or_else(|| fail(exit::USAGE, format!("--before {}: not the output of `diagnose --json`", f.display())))
}

pub fn run(a: Args) -> ExitCode {
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
    // Each diagnosis's verdict as it is made (two with --verify).
    let mut verdict = |r: &tcpdoctor::record::diagnose::DiagnoseReport| {
        if !json {
            print(&report::diagnose::render_verdict(r))
        }
    };
    if let Some(after) = &a.verify {
        return match diagnose::verify(&o, after, &mut say, &mut verdict, &mut progress) {
            Ok((before, after, c)) => {
                if json {
                    print_json(&DiagnoseOutput::Verified { before: &before, after: &after, comparison: &c });
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
        verdict(&r);
        if a.try_nodelay {
            say(&format!("\n{}\n", report::style::head("TCP_NODELAY SET LIVE (--try-nodelay)")));
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
            let c = Comparison::new(before, Summary::of(&r));
            if json {
                print_json(&DiagnoseOutput::Compared { report: &r, comparison: &c });
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
