//! `tcpdoctor bench`: its arguments (wrk's and ab's), their mapping to the
//! library's options, and the results' printing.

use crate::common::{TlsArgs, check_url, exit, fail, html_file, print, print_json, read_option_file, write_html};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::measure::bench;
use tcpdoctor::measure::common::{parse_positive_duration, parse_run_length};
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor bench --help` (and in the manual page).
pub const AFTER_HELP: &str = "Exit codes: 0 the run completed and measured responses (errors are counted in the \
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
was due). Ctrl-C stops the run and prints what was measured.";

#[derive(clap::Args)]
pub struct Args {
    /// http://HOST[:PORT][/PATH]
    url: String,
    /// Connections to keep open (all are used, whatever -t is).
    #[arg(short = 'c', long, default_value_t = 10, value_parser = at_least_one)]
    connections: usize,
    /// Worker threads.
    #[arg(short = 't', long, default_value_t = 2, value_parser = at_least_one)]
    threads: usize,
    /// Duration of the test, e.g. 10s, 2m (default 10s; with -n, at most 10m unless given).
    #[arg(short = 'd', long, value_parser = parse_run_length)]
    duration: Option<Duration>,
    /// A fixed number of requests (as ab -n): a new connection for each, whose connect counts in its time, unless -k.
    #[arg(short = 'n', long = "requests", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    requests: Option<u64>,
    /// With -n: keep-alive, as ab -k. Without -n: skip the certificate check, as --insecure.
    #[arg(short = 'k')]
    k: bool,
    /// Per-request timeout: a request without a complete response by then is counted and its connection replaced.
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration)]
    timeout: Duration,
    /// Print the latency percentiles (as wrk --latency).
    #[arg(long)]
    latency: bool,
    /// Add a request header, e.g. -H 'Accept: */*' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER", value_parser = parse_header)]
    headers: Vec<String>,
    /// Request method.
    #[arg(long, default_value = "GET", value_parser = bench::check_method)]
    method: String,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    /// Request body from a file (at most 64 MiB).
    #[arg(long, value_name = "FILE")]
    body_file: Option<PathBuf>,
    /// Fixed total request rate (requests/s); latency then counts from when each request was due (as wrk2).
    #[arg(short = 'R', long = "rate", value_name = "RATE", value_parser = parse_rate, allow_negative_numbers = true)]
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
    /// Also write a self-contained HTML report (verdict, ladder, histograms, tables) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// https: accept any certificate (still encrypted, but the server is not checked), like curl -k.
    #[arg(long)]
    insecure: bool,
    /// https: trust only the CA certificates in this PEM file (at most 4 MiB), not the system's store.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    cacert: Option<PathBuf>,
}

/// bench's `-n` without `-d`: the longest the requests may take.
const REQUESTS_CAP: Duration = Duration::from_secs(600);

/// `-c`, `-t`: a whole number, 1 or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a whole number")),
    }
}

/// `-R`: a positive, finite number of requests/s.
fn parse_rate(s: &str) -> Result<f64, String> {
    let r = s.parse::<f64>().map_err(|_| format!("`{s}` is not a number of requests/s"))?;
    bench::check_rate(r)
}

/// `-H`: one `Name: value` line.
fn parse_header(s: &str) -> Result<String, String> {
    bench::check_header(s).map(|()| s.to_string())
}

pub fn run(a: Args) -> ExitCode {
    if let Err(code) = check_url(&a.url) {
        return code;
    }
    let body = match (&a.body, &a.body_file) {
        (Some(b), _) => b.clone().into_bytes(),
        (None, Some(f)) => match read_option_file(
            "--body-file",
            f,
            bench::MAX_BODY_FILE,
            exit::INPUT,
            "the body is held in memory and sent with every request; use a smaller one",
        ) {
            Ok(b) => b,
            Err(code) => return code,
        },
        (None, None) => Vec::new(),
    };
    // -k is ab's keep-alive with -n (ab's habit), else curl's and wrk users' --insecure.
    let ab = a.requests.is_some();
    let insecure = a.insecure || (a.k && !ab);
    if insecure && a.cacert.is_some() {
        return fail(exit::USAGE, "-k/--insecure and --cacert together: choose one (with -n, -k means keep-alive)");
    }
    let tls = TlsArgs { insecure, cacert: a.cacert.clone() };
    let trust = match tls.trust() {
        Ok(t) => t,
        Err(code) => return code,
    };
    let duration = a.duration.unwrap_or(if ab { REQUESTS_CAP } else { Duration::from_secs(10) });
    if ab && a.no_keepalive && a.k {
        return fail(exit::USAGE, "-k (keep-alive with -n) and --no-keepalive together: choose one");
    }
    let o = bench::Options {
        url: a.url,
        threads: a.threads,
        connections: a.connections,
        duration,
        requests: a.requests,
        timeout: a.timeout,
        method: a.method,
        headers: a.headers,
        body,
        rate: a.rate,
        keepalive: if ab { a.k } else { !a.no_keepalive },
        nodelay: a.nodelay == "on",
        quickack: a.quickack,
        split_writes: a.split_writes,
        trust,
    };
    let html = match html_file(&a.html) {
        Ok(h) => h,
        Err(code) => return code,
    };
    let bar = report::progress::RunBar::new("", duration);
    tcpdoctor::interrupt::catch();
    let result = bench::run(&o, &mut |t, n| bar.update(t, n));
    drop(bar);
    match result {
        Ok(r) => {
            if a.json {
                print_json(&r);
            } else {
                print(&report::bench::render(&r, a.latency));
            }
            match &r.nothing_measured {
                Some(why) => {
                    write_html(html, || report::html::bench(&r), exit::NOT_MEASURED);
                    fail(exit::NOT_MEASURED, format!("nothing measured: {why}"))
                }
                None => write_html(html, || report::html::bench(&r), exit::OK),
            }
        }
        Err(e @ bench::BenchError::Usage(_)) => fail(exit::USAGE, e),
        Err(e @ (bench::BenchError::Start(_) | bench::BenchError::Certificate(_))) => fail(exit::INPUT, e),
        Err(bench::BenchError::NotMeasured(why)) => fail(exit::NOT_MEASURED, format!("nothing measured: {why}")),
    }
}
