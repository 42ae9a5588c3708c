//! `nodelay` results: what was switched or put back, socket by socket, and its text.

use crate::escape::clean;
use crate::words::sockets;
use serde::Serialize;
use std::fmt::Write;

/// One run of `nodelay PID|:PORT on|off|restore`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct NodelayReport {
    /// Schema version ([`super::SCHEMA_VERSION`]).
    pub schema: u32,
    /// tcpdoctor's version.
    pub version: &'static str,
    /// `on`, `off` or `restore`.
    pub action: &'static str,
    /// The process.
    pub process: NodelayProcess,
    /// The port named (`:PORT`); null for every listening port of the process.
    pub port: Option<u16>,
    /// Every socket looked at: listening ones first.
    pub sockets: Vec<SocketChange>,
    /// The state file: where the previous values are (on, off), or were (restore: removed).
    pub state_file: String,
    /// restore: connections accepted while the change was in force, which
    /// inherited the value set from their listening socket (left as they are).
    pub accepted_since: usize,
    /// What the reader should know: inherited values, the software setting it itself…
    pub notes: Vec<String>,
}

/// The process whose sockets were changed.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct NodelayProcess {
    /// Process id.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// When it started (clock ticks after boot): with the pid, names it.
    pub start_time: u64,
    /// Its children that share a listening socket (nginx's workers).
    pub workers: Vec<u32>,
}

/// One socket and what happened to its TCP_NODELAY.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct SocketChange {
    /// The process holding it and its descriptor there.
    pub pid: u32,
    /// Descriptor number.
    pub fd: i32,
    /// The socket's inode.
    pub inode: u64,
    /// `listening` or `accepted`.
    pub role: &'static str,
    /// Local address.
    pub local: String,
    /// Peer address (`*:*` when listening).
    pub peer: String,
    /// TCP_NODELAY found (null: the socket had closed).
    pub before: Option<bool>,
    /// TCP_NODELAY after, read back (null: closed).
    pub after: Option<bool>,
    /// restore: the value saved before the first change.
    pub previous: Option<bool>,
    /// on/off: `switched`, `already`, or `inherited` (accepted after its
    /// listening socket was switched, so it has the new value: not saved); restore: `restored`, `unchanged` (the
    /// change had set the value it already had), `changed_by_process` (it set
    /// the value back itself: left as it is), `not_switched` (tcpdoctor
    /// stopped before switching it); all: `closed`.
    pub outcome: &'static str,
}

impl NodelayReport {
    /// Sockets with this outcome.
    pub fn count(&self, outcome: &str) -> usize {
        self.sockets.iter().filter(|s| s.outcome == outcome).count()
    }

    /// Sockets with this outcome, listening ones and connections apart.
    pub fn count_by_role(&self, outcome: &str) -> (usize, usize) {
        let n = |role| self.sockets.iter().filter(|s| s.outcome == outcome && s.role == role).count();
        (n("listening"), n("accepted"))
    }
}

fn onoff(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "-",
    }
}

/// Connections shown in the text; the JSON lists all.
const MAX_ROWS: usize = 24;

/// The report as text.
pub fn render(r: &NodelayReport) -> String {
    let mut s = String::new();
    let p = &r.process;
    let workers = match p.workers.len() {
        0 => String::new(),
        _ => format!(", workers {}", p.workers.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")),
    };
    let port = r.port.map(|p| format!(" on port {p}")).unwrap_or_default();
    let head = format!("pid {} {}{workers}", p.pid, clean(&p.comm));
    if r.action == "restore" {
        let _ = writeln!(
            s,
            "{head}: TCP_NODELAY put back{port}: {} restored, {} closed since, {} changed by the process since (left as they are), {} unchanged",
            sockets(r.count("restored")),
            r.count("closed"),
            r.count("changed_by_process"),
            r.count("unchanged") + r.count("not_switched")
        );
    } else {
        let (l, e) = r.count_by_role("switched");
        let _ = writeln!(
            s,
            "{head}: TCP_NODELAY {} set live{port}: {} switched ({l} listening, {e} established), {} already {}{}",
            r.action,
            sockets(l + e),
            r.count("already"),
            r.action,
            match r.count("inherited") {
                0 => String::new(),
                n => format!(", {n} inherited it from the listening socket"),
            }
        );
    }
    let wl = r.sockets.iter().map(|c| c.local.chars().count()).max().unwrap_or(0).max(5);
    let wp = r.sockets.iter().map(|c| c.peer.chars().count()).max().unwrap_or(0).max(4);
    let _ = writeln!(
        s,
        "  {:<7} {:<4} {:<11} {:<wl$} {:<wp$} {:<6} {:<6} outcome",
        "pid", "fd", "state", "local", "peer", "before", "after"
    );
    let mut shown = 0;
    for c in &r.sockets {
        if c.role != "listening" {
            shown += 1;
            if shown > MAX_ROWS {
                continue;
            }
        }
        let state = if c.role == "listening" { "listen" } else { "established" };
        let _ = writeln!(
            s,
            "  {:<7} {:<4} {:<11} {:<wl$} {:<wp$} {:<6} {:<6} {}",
            c.pid,
            c.fd,
            state,
            c.local,
            c.peer,
            onoff(c.before),
            onoff(c.after),
            c.outcome.replace('_', " ")
        );
    }
    if shown > MAX_ROWS {
        let _ = writeln!(s, "  … and {} more connections (--json lists all)", shown - MAX_ROWS);
    }
    if r.action == "restore" {
        let _ = writeln!(s, "state file {} removed", r.state_file);
    } else {
        let _ = writeln!(
            s,
            "previous values saved in {}; `tcpdoctor nodelay {} restore` puts them back",
            r.state_file, p.pid
        );
    }
    if !r.notes.is_empty() {
        let _ = writeln!(s, "{}", super::style::head("NOTES"));
        for n in &r.notes {
            let _ = writeln!(s, "  - {n}");
        }
    }
    s
}

/// `diagnose --try-nodelay`: TCP_NODELAY set live on the server, the load
/// run again with the same parameters, then put back (unless `--keep`).
#[derive(Clone, Debug, Serialize, Default, schemars::JsonSchema)]
pub struct TryNodelay {
    /// Why the experiment did not run (then nothing below is filled in).
    pub not_run: Option<String>,
    /// The server process (step 5's).
    pub pid: Option<u32>,
    /// Its name.
    pub name: Option<String>,
    /// The port switched.
    pub port: u16,
    /// Switched before the load: listening sockets.
    pub listening: usize,
    /// Switched before the load: established connections.
    pub established: usize,
    /// Found with TCP_NODELAY on already.
    pub already: usize,
    /// Connections switched while the load ran: accepted with the listening
    /// socket's new value, then given TCP_NODELAY off by the server itself.
    pub during_load: usize,
    /// Every socket switched, in order.
    pub sockets: Vec<SocketChange>,
    /// Where the previous values were saved.
    pub state_file: Option<String>,
    /// The load as diagnosed (step 2).
    pub before: Option<LoadSummary>,
    /// The same load with TCP_NODELAY set live.
    pub after: Option<LoadSummary>,
    /// That load, as bench measured it (as `load`).
    pub load: Option<super::load::LoadStep>,
    /// Left set (`--keep`).
    pub kept: bool,
    /// Put back: every socket still open has its previous value again.
    pub restored: bool,
    /// What the restore did, socket by socket.
    pub restore: Vec<SocketChange>,
    /// The proof in one sentence.
    pub proof: Option<String>,
    /// What else the reader should know.
    pub notes: Vec<String>,
}

/// A load run, in the numbers before/after compares.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct LoadSummary {
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Responses completed.
    pub requests: u64,
    /// Responses per second.
    pub requests_per_s: f64,
    /// Errors of every kind.
    pub errors: u64,
    /// Nagle stalls in the capture taken beside it (null: no capture).
    pub stalls: Option<u64>,
}

impl LoadSummary {
    /// From a load step, with the stalls its capture saw.
    pub fn of(l: &super::load::LoadStep, stalls: Option<u64>) -> LoadSummary {
        LoadSummary {
            p50_ms: l.latency.p50,
            p99_ms: l.latency.p99,
            requests: l.requests,
            requests_per_s: l.requests_per_s,
            errors: l.errors,
            stalls,
        }
    }
}

/// The experiment's block after its lines: notes, before/after, the proof.
pub fn render_try(t: &TryNodelay) -> String {
    use crate::words::ms;
    let mut s = String::new();
    if t.not_run.is_some() {
        return s;
    }
    for n in &t.notes {
        let _ = writeln!(s, "  - {n}");
    }
    let (Some(b), Some(a)) = (&t.before, &t.after) else { return s };
    let _ = writeln!(s, "BEFORE / AFTER");
    let row = |s: &mut String, what: &str, x: String, y: String| {
        let _ = writeln!(s, "  {what:<24} {x:>20} {y:>24}");
    };
    row(&mut s, "", "before".into(), "after: TCP_NODELAY live".into());
    row(&mut s, "median under load", ms(b.p50_ms), ms(a.p50_ms));
    row(&mut s, "p99 under load", ms(b.p99_ms), ms(a.p99_ms));
    row(&mut s, "requests", format!("{:.0}/s", b.requests_per_s), format!("{:.0}/s", a.requests_per_s));
    row(&mut s, "errors", b.errors.to_string(), a.errors.to_string());
    let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    row(&mut s, "Nagle stalls captured", n(b.stalls), n(a.stalls));
    if let Some(p) = &t.proof {
        let label = match a.p50_ms < b.p50_ms / 2.0 {
            true => super::style::good("PROOF:"),
            false => super::style::warn("RESULT:"),
        };
        let _ = writeln!(s, "{label} {p}");
    }
    s
}
