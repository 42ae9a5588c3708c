//! `nodelay restore`: every saved socket still open put back to its previous
//! TCP_NODELAY, unless the process has set it itself since; then the state
//! file is removed.

use super::sockets::Server;
use super::state::{Dir, SavedSocket};
use super::switch::change;
use super::{NodelayError, pin, state_err, tracer};
use crate::record::nodelay::{NodelayProcess, NodelayReport};
use crate::words::sockets;
use std::collections::HashSet;

/// Puts back what `switch` changed in process `pid` and removes its state.
/// A process that is gone, or a pid that now names another process, has its
/// stale state removed (its sockets closed with it) and is an error.
pub fn restore(pid: u32) -> Result<NodelayReport, NodelayError> {
    let p = match pin(pid) {
        Ok(p) => p,
        Err(NodelayError::NoProcess { pid }) => return Err(gone(pid)),
        Err(e) => return Err(e),
    };
    let (pid, start_time) = (p.pid, p.start_time);
    let server = Server::read(pid, p.pidfd)?;
    let dir = Dir::open().map_err(state_err)?;
    let _lock = dir.lock().map_err(state_err)?;
    let Some(saved) = dir.load(pid, start_time).map_err(state_err)? else {
        // Saved for an earlier process that had this pid: its sockets are gone.
        let stale: Vec<u64> = dir.saved_for(pid).into_iter().filter(|&s| s != start_time).collect();
        for s in &stale {
            dir.remove(pid, *s).map_err(state_err)?;
        }
        return Err(NodelayError::NoState { pid, dir: dir.path().to_path_buf(), stale: stale.len() });
    };
    let mut changes = Vec::new();
    for x in &saved.sockets {
        let Some(s) = server.find(x.inode) else {
            changes.push(closed(x));
            continue;
        };
        let Some(now) = server.get(s)? else {
            changes.push(closed(x));
            continue;
        };
        let (after, outcome) = if x.previous == x.set {
            (Some(now), "unchanged")
        } else if now == x.set {
            (server.set(s, x.previous)?, "restored")
        } else if x.applied {
            (Some(now), "changed_by_process")
        } else {
            (Some(now), "not_switched")
        };
        let outcome = if after.is_none() { "closed" } else { outcome };
        changes.push(change(s, Some(now), after, Some(x.previous), outcome));
    }
    // Connections accepted while the change was in force took the listening socket's new value.
    let known: HashSet<u64> = saved.sockets.iter().map(|x| x.inode).collect();
    let changed_ports: HashSet<(u16, bool)> = saved
        .sockets
        .iter()
        .filter(|x| x.listening && x.previous != x.set)
        .filter_map(|x| x.local.parse::<std::net::SocketAddr>().ok().map(|a| (a.port(), x.set)))
        .collect();
    let mut accepted_since = 0;
    for s in server.sockets(None).iter().filter(|s| !s.listening && !known.contains(&s.inode)) {
        for &(port, set) in &changed_ports {
            if s.local.port() == port && server.get(s)? == Some(set) {
                accepted_since += 1;
            }
        }
    }
    dir.remove(pid, start_time).map_err(state_err)?;
    let mut report = NodelayReport {
        schema: crate::record::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        action: "restore",
        process: NodelayProcess { pid, comm: saved.comm.clone(), start_time, workers: server.workers.clone() },
        port: saved.port,
        sockets: changes,
        state_file: dir.shown(pid, start_time).display().to_string(),
        accepted_since,
        notes: Vec::new(),
    };
    report.notes = notes(&report, tracer(pid));
    Ok(report)
}

/// The error for a process that is gone: its saved states are removed.
fn gone(pid: u32) -> NodelayError {
    let Ok(dir) = Dir::open() else { return NodelayError::NoProcess { pid } };
    let Ok(_lock) = dir.lock() else { return NodelayError::NoProcess { pid } };
    let removed: Vec<_> =
        dir.saved_for(pid).into_iter().filter(|&s| dir.remove(pid, s).is_ok()).map(|s| dir.shown(pid, s)).collect();
    if removed.is_empty() { NodelayError::NoProcess { pid } } else { NodelayError::Gone { pid, removed } }
}

/// A saved socket that is no longer open.
fn closed(x: &SavedSocket) -> crate::record::nodelay::SocketChange {
    crate::record::nodelay::SocketChange {
        pid: x.pid,
        fd: x.fd,
        inode: x.inode,
        role: if x.listening { "listening" } else { "accepted" },
        local: x.local.clone(),
        peer: x.peer.clone(),
        before: None,
        after: None,
        previous: Some(x.previous),
        outcome: "closed",
    }
}

fn notes(r: &NodelayReport, traced: Option<(u32, String)>) -> Vec<String> {
    let mut n = Vec::new();
    let by_process = r.count("changed_by_process");
    if by_process > 0 {
        n.push(format!(
            "{} had been set back to the previous value by the process itself since the change: left as they are",
            sockets(by_process)
        ));
    }
    if r.count("not_switched") > 0 {
        n.push(format!(
            "{} had not been switched yet when the change stopped (Ctrl-C or a crash): nothing to put back",
            sockets(r.count("not_switched"))
        ));
    }
    if r.accepted_since > 0 {
        n.push(format!(
            "{} connections accepted while the change was in force keep the value they inherited from the listening \
socket (the process may have set the option on them itself, which cannot be told apart): they end when they close",
            r.accepted_since
        ));
    }
    if r.sockets.iter().any(|s| s.role == "listening" && s.outcome == "closed") {
        n.push("a listening socket changed has closed (a reload or restart?): the ones that replace it never had the change".into());
    }
    if let Some((by, comm)) = traced {
        n.push(format!(
            "the process is traced by pid {by} ({}): restored anyway, since this only puts back what tcpdoctor changed",
            crate::escape::clean(&comm)
        ));
    }
    n
}
