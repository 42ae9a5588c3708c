//! `tcpdoctor analyze`: its arguments, their mapping to the library's options,
//! and the report's printing.

use crate::common::{exit, fail, html_file, output, write_html};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::analyze::{self, Options};
use tcpdoctor::capture::Capture;
use tcpdoctor::filter::Filter;
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor analyze --help` (and in the manual page).
pub const AFTER_HELP: &str = "Regular files are mapped; `-`, FIFOs and devices are streamed (memory for the open \
connections, not the input). Ctrl-C stops reading and prints the report of what was read.\n\n\
Exit codes: 0 all input analysed, or stopped by Ctrl-C; 2 bad command line; 3 no input could be read; \
4 results printed but part of the input was damaged or skipped (see WARNINGS); 6 the report could not be written \
(standard output or --html failed; a closed pipe is not a failure).";

#[derive(clap::Args)]
pub struct Args {
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
    /// Also write a self-contained HTML report (verdict, ladder, histograms, tables) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Threads in all (default: one per core, up to 16). With fewer files than threads each file's
    /// connections are split between threads (with the default, only files of 16 MiB or more); the
    /// report is the same for any number. 1: one file after another on one thread.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
}

pub fn run(a: Args) -> ExitCode {
    let filter = match a.filter.as_deref().map(Filter::parse).transpose() {
        Ok(f) => f,
        Err(e) => return fail(exit::USAGE, format!("--filter: {e}")),
    };
    let stdin_count = a.files.iter().filter(|f| f.as_os_str() == "-").count();
    if stdin_count > 1 {
        return fail(exit::USAGE, "standard input (`-`) can be given only once");
    }
    let html = match html_file(&a.html) {
        Ok(h) => h,
        Err(code) => return code,
    };
    let mut caps = Vec::new();
    let mut skipped = Vec::new();
    tcpdoctor::capture::make_room_for(a.files.len());
    for f in &a.files {
        match Capture::open(f) {
            Ok(c) => caps.push(c),
            Err(e) => skipped.push(format!("{}: {e}", f.display())),
        }
    }
    if caps.is_empty() {
        return fail(exit::INPUT, skipped.join("; "));
    }
    // Streams have no size: no bar for them.
    let total: u64 = caps.iter().map(|c| c.len().unwrap_or(0)).sum();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Ctrl-C stops the walks; the report covers what was read (a second Ctrl-C kills).
    tcpdoctor::interrupt::catch();
    let opts = Options {
        filter,
        flow: a.flow.clone(),
        ladder_rows: a.ladder_rows,
        progress: Some(done.clone()),
        stop: Some(tcpdoctor::interrupt::flag()),
        threads: a.threads.map(usize::from),
    };
    let bar = analysis_bar(total, done);
    let result = analyze::analyze(&caps, &opts);
    if let Some((bar, stop)) = bar {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = bar.join();
    }
    let mut r = match result {
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
    let partial = r.inputs.len() < a.files.len()
        || r.inputs.iter().any(|i| i.damage.is_some() || i.malformed_packets > 0 || i.skipped_blocks > 0);
    if partial {
        // One line: the first problem (file, offset, what), and how many more.
        let more = match r.warnings.len() {
            0 | 1 => String::new(),
            n => format!(" (+{} more warnings)", n - 1),
        };
        let first = r.warnings.first().map_or("part of the input was damaged", String::as_str);
        eprintln!("tcpdoctor: warning: {}{more}", tcpdoctor::escape::terminal(first));
    }
    if let Some(w) = r.warnings.iter().find(|w| w.contains(": interrupted (Ctrl-C)")) {
        eprintln!("tcpdoctor: {}", tcpdoctor::escape::terminal(w));
    }
    write_html(html, || report::html::analyze(&r), if partial { exit::PARTIAL } else { exit::OK })
}

/// A progress bar for analyses of large inputs (≥ 64 MiB), drawn from another thread;
/// none when stderr is not a terminal.
fn analysis_bar(
    total: u64,
    done: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Option<(std::thread::JoinHandle<()>, std::sync::Arc<std::sync::atomic::AtomicBool>)> {
    use std::io::IsTerminal;
    use std::sync::atomic::Ordering;
    if total < 64 << 20 || !std::io::stderr().is_terminal() {
        return None;
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let h = std::thread::spawn(move || {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "  analysing {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        while !stop2.load(Ordering::Relaxed) {
            bar.set_position(done.load(Ordering::Relaxed).min(total));
            std::thread::sleep(Duration::from_millis(100));
        }
        bar.finish_and_clear();
    });
    Some((h, stop))
}
