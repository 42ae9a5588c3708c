//! `tcpdoctor demo`: the main job on built-in lab servers, or on the bundled
//! captures with `--offline`, and its printing.

use crate::common::{exit, fail, output, print, print_json};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Analyse the bundled captures (nginx tcp_nodelay off, then on) instead of running lab servers.
    #[arg(long)]
    offline: bool,
}

pub fn run(a: Args) -> ExitCode {
    if a.offline { offline(a.json) } else { live(a.json) }
}

fn live(json: bool) -> ExitCode {
    tcpdoctor::interrupt::catch();
    let o = tcpdoctor::diagnose::Options::default();
    let mut say = |line: &str| {
        if !json {
            print(line)
        }
    };
    let mut verdict = |r: &tcpdoctor::record::diagnose::DiagnoseReport| {
        if !json {
            print(&tcpdoctor::report::diagnose::render_verdict(r))
        }
    };
    match tcpdoctor::demo::live(&o, &mut say, &mut verdict) {
        Ok(d) => {
            if json {
                print_json(&d);
            } else {
                print(&tcpdoctor::report::diagnose::render_comparison(&d.fix));
            }
            ExitCode::from(exit::OK)
        }
        Err(e) => fail(exit::NET, e),
    }
}

fn offline(json: bool) -> ExitCode {
    match tcpdoctor::demo::run() {
        Ok(reports) => {
            if json {
                let v: Vec<_> = reports.iter().map(|(_, r)| r).collect();
                print_json(&v);
            } else {
                for (title, r) in &reports {
                    print(&format!("== {title}\n\n"));
                    output(r, false);
                    print("\n");
                }
                print(&format!("{}\n", tcpdoctor::demo::proof(&reports[0].1, &reports[1].1)));
            }
            ExitCode::from(exit::OK)
        }
        Err(e) => fail(exit::INPUT, e),
    }
}
