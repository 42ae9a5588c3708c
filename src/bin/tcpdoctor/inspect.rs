//! `tcpdoctor inspect`: its arguments, their mapping to the library's options,
//! and the report's printing.

use crate::common::{
    Target, TraceMethodArg, exit, inspect_failed, parse_target, print, print_json, resolve, trace_method,
};
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::inspect;
use tcpdoctor::measure::common::{parse_duration, parse_positive_duration};
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor inspect --help` (and in the manual page).
pub const AFTER_HELP: &str = "PID is a process id; :PORT means the process listening on that TCP port (for nginx, \
its master: the workers that share the listening socket are inspected with it, and only sockets on PORT are \
listed). Socket options are read on duplicates of the sockets (pidfd_getfd, Linux >= 5.6), which needs ptrace \
permission over the process (same user, root, or CAP_SYS_PTRACE); nothing about the process is changed. A \
process that exits during the window is still reported, flagged as exited.

--trace D records the process's reads and writes on TCP sockets for D (at most 60 s), then leaves it as it was. \
With eBPF (the default where it loads: Linux >= 5.11 with BTF, x86_64, CAP_BPF and CAP_PERFMON or root) programs \
at the kernel's socket tracepoints record them and the process never stops; the kernel also says, for each write, \
whether its bytes left during the call or were held (by Nagle, until the peer's ACK); on a busy server, once calls \
on TCP_NODELAY sockets pass 20,000 a second, only one such socket in 2, 4, 8… is traced after the first 0.25 s \
(sockets with Nagle on, and corked ones, always all; --sample all traces every socket). Otherwise ptrace is used, \
like `strace -f` (PTRACE_SEIZE on every thread of the process and its workers, Linux >= 5.3; waits are seen too): \
it stops the process at every syscall, so each takes some microseconds longer meanwhile; it needs ptrace \
permission (root or CAP_SYS_PTRACE, or the same user where kernel.yama.ptrace_scope allows it) and fails if \
another tracer (a debugger, strace) holds the process. --method ebpf|ptrace forces one. Either way it finds \
write-write-read: responses written in two or more small pieces with Nagle on, then a wait for the next request \
(the Nagle + delayed-ACK stall's shape), and the report measures and prints what tracing cost. Ctrl-C ends the \
trace early and reports what was recorded.

Exit codes: 0 inspected (also when the process exited during --trace: the report says so); 2 bad command line; \
3 no such process, or nothing listens on PORT; 5 cannot inspect or trace (no ptrace permission, already traced, \
kernel too old, or --method ebpf and the programs would not load); 6 the report could not be written to standard output.";

#[derive(clap::Args)]
pub struct Args {
    /// A process id, or `:PORT` for the process listening on that TCP port.
    #[arg(value_name = "PID | :PORT", value_parser = parse_target)]
    target: Target,
    /// How long to watch the host's delayed-ACK counters: seconds (`0.5`) or with a unit (`500ms`, `2s`).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    window: Duration,
    /// Also record reads and writes on TCP sockets for this long (at most 60s), e.g. 5s: with eBPF when it loads, else ptrace.
    #[arg(long, value_parser = parse_trace, value_name = "DURATION")]
    trace: Option<Duration>,
    /// Force how --trace records: `ebpf` (fail if it cannot load) or `ptrace`.
    #[arg(long, value_enum, requires = "trace")]
    method: Option<TraceMethodArg>,
    /// eBPF: `auto` traces one TCP_NODELAY socket in 2, 4, 8… once such sockets' calls pass 20,000 a second (Nagle and corked sockets always all), and then, while no Nagle or corked socket is seen, in 0.25 s slices of every 0.75 s; `all` traces every socket all the time.
    #[arg(long, value_enum, default_value = "auto", requires = "trace")]
    sample: SampleArg,
    /// Print the results as JSON (schema in the README).
    #[arg(long)]
    json: bool,
}

/// `--sample`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum SampleArg {
    Auto,
    All,
}

/// `--trace`: more than 0, at most [`inspect::MAX_TRACE`].
fn parse_trace(s: &str) -> Result<Duration, String> {
    let d = parse_positive_duration(s)?;
    if d > inspect::MAX_TRACE {
        return Err(format!(
            "`{s}`: at most {} s: the traced process's socket calls (with ptrace, all its syscalls) are slowed meanwhile (trace a few short windows instead)",
            inspect::MAX_TRACE.as_secs()
        ));
    }
    Ok(d)
}

pub fn run(a: Args) -> ExitCode {
    let (pid, port) = match resolve(a.target) {
        Ok(t) => t,
        Err(code) => return code,
    };
    if a.trace.is_some() {
        // Ctrl-C (or SIGTERM) ends the trace early: detach, then report what was recorded.
        tcpdoctor::interrupt::catch_all();
    }
    let o = inspect::Options {
        window: a.window,
        port,
        trace: a.trace,
        trace_optional: false,
        trace_method: trace_method(a.method),
        trace_sample: match a.sample {
            SampleArg::Auto => inspect::TraceSample::Auto,
            SampleArg::All => inspect::TraceSample::All,
        },
        announce: true,
        trace_ready: None,
    };
    match inspect::inspect(pid, &o) {
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
