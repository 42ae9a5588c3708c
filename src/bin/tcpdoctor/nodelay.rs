//! `tcpdoctor nodelay`: its arguments, the switch or restore they ask for,
//! and the result's printing.

use crate::common::{Target, exit, fail, parse_target, print, print_json, resolve};
use std::process::ExitCode;
use tcpdoctor::report;

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
