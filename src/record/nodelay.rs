//! `nodelay`'s record: what was switched or put back, socket by socket; and
//! `diagnose --try-nodelay`'s, the same switch tried under load.

use serde::Serialize;

/// One run of `nodelay PID|:PORT on|off|restore`.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct NodelayReport {
    /// Schema version (`SCHEMA_VERSION`).
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
