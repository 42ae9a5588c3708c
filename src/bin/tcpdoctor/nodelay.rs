//! `tcpdoctor nodelay`: its arguments, the switch or restore they ask for,
//! and the result's printing.

use crate::common::{Target, exit, fail, parse_target, print, print_json, resolve};
use std::process::ExitCode;
use tcpdoctor::report;

/// The notes and exit codes under `tcpdoctor nodelay --help` (and in the manual page).
pub const AFTER_HELP: &str = "PID is a process id; :PORT means the process listening on that TCP port (for nginx, its \
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
private, or standard output failed.";

#[derive(clap::Args)]
pub struct Args {
    /// A process id, or `:PORT` for the process listening on that TCP port.
    #[arg(value_name = "PID | :PORT", value_parser = parse_target)]
    target: Target,
    /// on: set TCP_NODELAY; off: clear it; restore: put back the values saved by on/off.
    #[arg(value_parser = ["on", "off", "restore"])]
    action: String,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> ExitCode {
    use tcpdoctor::nodelay::{self, NodelayError as E};
    let (pid, port) = match resolve(a.target) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let r = match a.action.as_str() {
        "restore" => nodelay::restore(pid),
        on => nodelay::switch(pid, port, on == "on"),
    };
    match r {
        Ok(r) if a.json => print_json(&r),
        Ok(r) => print(&report::nodelay::render(&r)),
        Err(e) => {
            let code = match e {
                E::NoProcess { .. } | E::Gone { .. } | E::NoSockets { .. } | E::NoState { .. } => exit::INPUT,
                E::Permission { .. } | E::Traced { .. } | E::Unsupported { .. } | E::Io { .. } => exit::NET,
                E::State(_) => exit::OUTPUT,
            };
            return fail(code, e);
        }
    }
    ExitCode::from(exit::OK)
}
