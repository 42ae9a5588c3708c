//! `tcpdoctor capture`: its arguments (tcpdump's), the live capture they open,
//! and the file written.

use crate::common::{exit, fail, filter_words, live_exit};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::capture::live::{LiveCapture, LiveError, LiveOptions, MAX_SNAPLEN};
use tcpdoctor::measure::common::parse_run_length;
use tcpdoctor::output::{self, OutputFile};

/// The notes and exit codes under `tcpdoctor capture --help` (and in the manual page).
pub const AFTER_HELP: &str = "Only TCP over IPv4 and IPv6 is captured; FILTER narrows it further (tcpdump syntax: \
[src|dst] host ADDR, net ADDR/LEN, port N, portrange N-M, tcp, ip, ip6, and, or, not, parentheses). The filter \
runs in the kernel. Timestamps are in nanoseconds. On loopback, the outgoing copy of each packet is left out. \
Ctrl-C stops the capture and leaves a complete file. Needs CAP_NET_RAW (root, or `setcap cap_net_raw+ep` on the \
binary).

Exit codes: 0 captured (even 0 packets); 2 bad command line or filter; 3 no such interface, or FILE cannot be \
written; 5 cannot capture (no CAP_NET_RAW, interface down, a socket call failed); 6 FILE or standard output \
failed during the capture. FILE is written as .FILE.XXXXXX.tmp beside it and renamed to FILE when the capture \
ends.";

#[derive(clap::Args)]
pub struct Args {
    /// Interface to capture on; `any` for all of them (written with Linux cooked headers).
    /// Default: the route to the filter's host, else the first interface up that is not loopback.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    iface: Option<String>,
    /// Filter, tcpdump-style, e.g. `tcp port 8080 and host 10.0.0.1` (quoted or as separate words).
    #[arg(value_name = "FILTER")]
    filter: Vec<String>,
    /// Write the packets to this file (pcapng when it ends in `.pcapng`, else pcap); `-` for standard output.
    #[arg(short = 'w', value_name = "FILE")]
    write: PathBuf,
    /// Stop after this long, e.g. 10s, 2m (default: until Ctrl-C or -c).
    #[arg(long, value_parser = parse_run_length, value_name = "DURATION")]
    duration: Option<Duration>,
    /// Stop after this many packets.
    #[arg(short = 'c', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Numeric addresses and ports (`-n`, `-nn`): capture never resolves names; accepted for tcpdump compatibility.
    #[arg(short = 'n', action = clap::ArgAction::Count)]
    _numeric: u8,
    /// Bytes kept of each packet (0 means 262144, the most).
    #[arg(short = 's', long, default_value_t = MAX_SNAPLEN, value_name = "N",
          value_parser = clap::value_parser!(u32).range(0..=MAX_SNAPLEN as i64))]
    snaplen: u32,
}

pub fn run(a: Args) -> ExitCode {
    let filter = match filter_words(&a.filter) {
        Ok(f) => f,
        Err(code) => return code,
    };
    let iface = match a.iface {
        Some(i) => i,
        None => match tcpdoctor::capture::live::pick_interface(filter.as_ref()) {
            Ok(p) => {
                eprintln!("tcpdoctor: no -i given: capturing on {} ({})", p.iface, p.why);
                p.iface
            }
            Err(e) => return fail(live_exit(&e), e),
        },
    };
    let o = LiveOptions { iface: iface.clone(), filter, snaplen: a.snaplen };
    let mut cap = match LiveCapture::open(&o) {
        Ok(c) => c,
        Err(e) => return fail(live_exit(&e), e),
    };
    let name = a.write.display().to_string();
    // A file is written beside its name and renamed into place at the end.
    let mut file = None;
    let mut stdout = output::Stdout;
    let out: &mut dyn Write = if name == "-" {
        &mut stdout
    } else {
        match OutputFile::create(&a.write) {
            Ok(f) => file.insert(f),
            Err(e) => return fail(exit::INPUT, format!("{name}: cannot write: {e}")),
        }
    };
    // SIGTERM and SIGHUP too: however it is stopped, the file is completed.
    tcpdoctor::interrupt::catch_all();
    eprintln!("tcpdoctor: capturing on {iface}, link-type {}, snapshot length {} bytes", cap.link(), cap.snaplen());
    let deadline = a.duration.map(|d| std::time::Instant::now() + d);
    let format = tcpdoctor::capture::live::FileFormat::for_path(&a.write);
    let stats = match cap.record_as(format, out, tcpdoctor::interrupt::flag(), deadline, a.count) {
        Ok(s) => s,
        // Standard output's failure is reported by main; a reader that went away ends it quietly.
        Err(LiveError::Write(_)) if name == "-" => return ExitCode::from(exit::OK),
        Err(e @ LiveError::Write(_)) => return fail(exit::OUTPUT, format!("{name}: {e}")),
        Err(e) => return fail(live_exit(&e), e),
    };
    if let Some(f) = file
        && let Err(e) = f.commit()
    {
        return fail(exit::OUTPUT, format!("{name}: cannot write: {e}"));
    }
    eprintln!(
        "{} packets captured, {} dropped by kernel, {} loopback duplicates removed",
        stats.packets, stats.kernel_drops, stats.loopback_duplicates
    );
    ExitCode::from(exit::OK)
}
