//! What the verbs share: exit codes, printing and failing, `--html` files,
//! bounded option files, and the arguments and parsers of more than one verb.

use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tcpdoctor::capture::live::LiveError;
use tcpdoctor::filter::Filter;
use tcpdoctor::inspect::{self, InspectError};
use tcpdoctor::measure::bench;
use tcpdoctor::measure::common::{Error as MeasureError, Family};
use tcpdoctor::output::{self, OutputFile};
use tcpdoctor::record::Report;
use tcpdoctor::report;

/// Exit codes (also in the README).
pub mod exit {
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
    /// probe/trace could not measure, capture could not capture: a socket call
    /// failed (no route, no permission…); inspect could not read the process
    /// (no ptrace permission, kernel too old).
    pub const NET: u8 = 5;
    /// bench/diagnose: nothing was measured (no connection, no response, a
    /// step that came back empty), so there is no number or verdict to give.
    pub const NOT_MEASURED: u8 = 5;
    /// The results could not be written: standard output or an output file
    /// failed (disk full, I/O error). A closed pipe is not a failure.
    pub const OUTPUT: u8 = 6;
}

/// Text to standard output, control characters from elsewhere escaped.
pub fn print(s: &str) {
    let s = tcpdoctor::escape::terminal(s);
    match report::width::stdout_width() {
        // A terminal: lines fit its width; pipes and files get them whole.
        Some(w) => output::print(&report::width::fit(&s, w)),
        None => output::print(&s),
    }
}

pub fn print_json<T: serde::Serialize>(v: &T) {
    let text = format!("{}\n", serde_json::to_string_pretty(v).unwrap_or_default());
    output::print(&tcpdoctor::escape::json(&text));
}

pub fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("tcpdoctor: {}", tcpdoctor::escape::terminal(&msg.to_string()));
    ExitCode::from(code)
}

pub fn output(r: &Report, json: bool) {
    if json {
        print_json(r);
    } else {
        print(&report::render(r));
    }
}

/// The `--html` file: its temporary file is created before the work starts,
/// so a bad path fails at once; it is renamed into place once written.
pub fn html_file(path: &Option<PathBuf>) -> Result<Option<OutputFile>, ExitCode> {
    let Some(p) = path else { return Ok(None) };
    match OutputFile::create(p) {
        Ok(f) => Ok(Some(f)),
        Err(e) => {
            Err(fail(exit::USAGE, format!("--html {}: cannot create it: {e} (choose a writable path)", p.display())))
        }
    }
}

/// Writes the HTML report (with any control character a server or process
/// slipped into it escaped) and says where on stderr (stdout keeps the text
/// or JSON); `code` is the exit code unless the file cannot be written.
pub fn write_html(file: Option<OutputFile>, html: impl FnOnce() -> String, code: u8) -> ExitCode {
    let Some(mut f) = file else { return ExitCode::from(code) };
    let p = f.path().display().to_string();
    match f.write_all(tcpdoctor::escape::document(&html()).as_bytes()).and_then(|()| f.commit()) {
        Ok(()) => {
            eprintln!("tcpdoctor: HTML report written to {p}");
            ExitCode::from(code)
        }
        Err(e) => fail(exit::OUTPUT, format!("--html {p}: cannot write it: {e}; the file was left as it was")),
    }
}

/// Reads a file named by `option`, refusing one over `limit` bytes (exit 2); `io_exit` when it cannot be read.
pub fn read_option_file(
    option: &str,
    path: &std::path::Path,
    limit: u64,
    io_exit: u8,
    why: &str,
) -> Result<Vec<u8>, ExitCode> {
    use tcpdoctor::input::{ReadError, read_bounded, size_words};
    read_bounded(path, limit).map_err(|e| match e {
        ReadError::Io(e) => fail(io_exit, format!("{option} {}: {e}", path.display())),
        ReadError::TooLarge => {
            fail(exit::USAGE, format!("{option} {}: larger than {} ({why})", path.display(), size_words(limit)))
        }
    })
}

/// A URL that cannot be used as written is a bad command line, found before any traffic.
pub fn check_url(url: &str) -> Result<(), ExitCode> {
    bench::split_url(url).map(drop).map_err(|e| fail(exit::USAGE, e))
}

/// How an https server's certificate is checked (bench, diagnose).
#[derive(Args)]
pub struct TlsArgs {
    /// https: accept any certificate (still encrypted, but the server is not checked), like curl -k.
    #[arg(short = 'k', long)]
    pub insecure: bool,
    /// https: trust only the CA certificates in this PEM file (at most 4 MiB), not the system's store.
    #[arg(long, value_name = "FILE", conflicts_with = "insecure")]
    pub cacert: Option<PathBuf>,
}

/// The largest `--cacert`: Debian's whole CA bundle is about 200 KB.
const MAX_CACERT: u64 = 4 << 20;

impl TlsArgs {
    pub fn trust(&self) -> Result<tcpdoctor::measure::tls::Trust, ExitCode> {
        use tcpdoctor::measure::tls::{Trust, parse_pem};
        if self.insecure {
            return Ok(Trust::Insecure);
        }
        let Some(f) = &self.cacert else { return Ok(Trust::System) };
        let why = "a CA bundle is a few hundred KB";
        let pem = read_option_file("--cacert", f, MAX_CACERT, exit::INPUT, why)?;
        parse_pem(&pem).map(Trust::Roots).map_err(|e| fail(exit::USAGE, format!("--cacert {}: {e}", f.display())))
    }
}

#[derive(Args)]
pub struct FamilyArgs {
    /// IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    ipv4: bool,
    /// IPv6 only.
    #[arg(short = '6')]
    ipv6: bool,
}

impl FamilyArgs {
    pub fn get(&self) -> Option<Family> {
        match (self.ipv4, self.ipv6) {
            (true, _) => Some(Family::V4),
            (_, true) => Some(Family::V6),
            _ => None,
        }
    }
}

/// `--method`, `--trace-method`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TraceMethodArg {
    Ebpf,
    Ptrace,
}

pub fn trace_method(m: Option<TraceMethodArg>) -> inspect::TraceMethod {
    match m {
        None => inspect::TraceMethod::Auto,
        Some(TraceMethodArg::Ebpf) => inspect::TraceMethod::Ebpf,
        Some(TraceMethodArg::Ptrace) => inspect::TraceMethod::Ptrace,
    }
}

#[derive(Clone, Copy)]
pub enum Target {
    Pid(u32),
    Port(u16),
}

pub fn parse_target(s: &str) -> Result<Target, String> {
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

pub fn inspect_failed(e: InspectError) -> ExitCode {
    let code = match e {
        InspectError::NoProcess { .. } => exit::INPUT,
        _ => exit::NET,
    };
    fail(code, e)
}

/// The process a PID or `:PORT` names, and the port.
pub fn resolve(t: Target) -> Result<(u32, Option<u16>), ExitCode> {
    match t {
        Target::Pid(pid) => Ok((pid, None)),
        Target::Port(port) => match inspect::find_listener(port) {
            Ok(Some(pid)) => Ok((pid, Some(port))),
            Ok(None) => Err(fail(
                exit::INPUT,
                format!(
                    "port {port}: nothing listens on it (checked /proc/net/tcp and tcp6); `ss -ltnp` lists \
the listening ports and their processes"
                ),
            )),
            Err(e) => Err(inspect_failed(e)),
        },
    }
}

/// A filter given as words after the interface (`capture`, `watch`); none when there are none.
pub fn filter_words(words: &[String]) -> Result<Option<Filter>, ExitCode> {
    if words.is_empty() {
        return Ok(None);
    }
    Filter::parse(&words.join(" ")).map(Some).map_err(|e| fail(exit::USAGE, format!("filter: {e}")))
}

pub fn live_exit(e: &LiveError) -> u8 {
    match e {
        LiveError::Filter(_) => exit::USAGE,
        LiveError::NoInterface(_) | LiveError::Write(_) => exit::INPUT,
        LiveError::Permission(_) | LiveError::Io(_) => exit::NET,
    }
}

pub fn measure_failed(e: MeasureError) -> ExitCode {
    match e {
        MeasureError::Resolve(_) => fail(exit::INPUT, e),
        MeasureError::Net(_) => fail(exit::NET, e),
    }
}

/// The start of a probe or trace: notes to stderr, the header line unless JSON.
pub fn start_measure(notes: &[String], json: bool, header: impl FnOnce() -> String) {
    for n in notes {
        eprintln!("tcpdoctor: note: {}", tcpdoctor::escape::terminal(n));
    }
    if !json {
        print(&header());
    }
}

/// The end of a probe or trace: the summary (or the JSON record) and the exit code.
pub fn finish_measure<T: serde::Serialize>(
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
