//! `nodelay on|off`: the previous values saved, then every listening socket
//! (first, so that connections accepted from then on inherit the value) and
//! every established connection accepted on them switched and read back.

use super::sockets::{Found, Server};
use super::state::{Dir, Saved, SavedSocket};
use super::{NodelayError, pin, state_err, tracer};
use crate::inspect::procfs;
use crate::record::nodelay::{NodelayProcess, NodelayReport, SocketChange};
use crate::words::sockets;
use std::collections::HashSet;
use std::time::Duration;

/// Looks after the switch for connections accepted in the meantime (they
/// started with the listening socket's old value) at most this many times.
const PASSES: usize = 3;
/// Between those looks: time for a connection in the accept queue to be accepted.
const PASS_GAP: Duration = Duration::from_millis(20);

/// Sets TCP_NODELAY to `on` on the listening sockets of process `pid` (on
/// `port`, or all) and the established connections accepted on them. A
/// second call keeps the values saved by the first, so `restore` puts back
/// what was there before either.
pub fn switch(pid: u32, port: Option<u16>, on: bool) -> Result<NodelayReport, NodelayError> {
    let p = pin(pid)?;
    let (pid, start_time) = (p.pid, p.start_time);
    let server = Server::read(pid, p.pidfd)?;
    for w in std::iter::once(pid).chain(server.workers.iter().copied()) {
        if let Some((by, comm)) = tracer(w) {
            return Err(NodelayError::Traced { pid: w, by, comm });
        }
    }
    let mut found = server.sockets(port);
    if !found.iter().any(|s| s.listening) {
        return Err(NodelayError::NoSockets { pid, port });
    }
    let dir = Dir::open().map_err(state_err)?;
    let _lock = dir.lock().map_err(state_err)?;
    let comm = procfs::comm(pid);
    let mut saved = dir.load(pid, start_time).map_err(state_err)?.unwrap_or_else(|| Saved {
        schema: 1,
        pid,
        start_time,
        comm: comm.clone(),
        port,
        sockets: Vec::new(),
    });
    let ports: HashSet<u16> = found.iter().filter(|s| s.listening).map(|s| s.local.port()).collect();
    // Ports whose listening socket an earlier call already switched to `on`:
    // a new connection there with `on` inherited it, and is not recorded (its
    // "previous" value would be the one we set).
    let inherited: HashSet<u16> = saved
        .sockets
        .iter()
        .filter(|x| x.listening && x.applied && x.set == on && x.previous != on)
        .filter_map(|x| x.local.parse::<std::net::SocketAddr>().ok().map(|a| a.port()))
        .collect();
    let known: HashSet<u64> = saved.sockets.iter().map(|x| x.inode).collect();
    let mut changes = Vec::new();
    let mut done: HashSet<u64> = HashSet::new();
    let mut server = server;
    let mut file = dir.shown(pid, start_time);
    for pass in 0..PASSES {
        if pass > 0 {
            // Connections accepted since the listing started with the old value.
            std::thread::sleep(PASS_GAP);
            let again = pin(pid).and_then(|p| {
                if p.start_time != start_time {
                    return Err(NodelayError::NoProcess { pid });
                }
                Server::read(pid, p.pidfd)
            });
            let Ok(s) = again else { break };
            server = s;
            found = server.sockets(port).into_iter().filter(|s| ports.contains(&s.local.port())).collect();
        }
        // Read what each has now; keep only what this pass has not handled.
        let mut plan: Vec<(Found, bool)> = Vec::new();
        let todo: Vec<&Found> = found.iter().filter(|s| !done.contains(&s.inode)).collect();
        for s in todo {
            match server.get(s)? {
                // Accepted since the listening socket was switched: it inherited the new value.
                Some(v) if v == on && (pass > 0 || inherited_from(s, &inherited, &known)) => {
                    done.insert(s.inode);
                    changes.push(change(s, Some(v), Some(v), None, "inherited"));
                }
                Some(v) => plan.push((s.clone(), v)),
                None if pass == 0 => changes.push(change(s, None, None, None, "closed")),
                None => {}
            }
        }
        if plan.is_empty() && pass > 0 {
            break;
        }
        for (s, v) in &plan {
            record(&mut saved, s, *v, on);
        }
        // Saved before the first change: a crash from here on leaves a state to restore.
        file = dir.save(&saved).map_err(state_err)?;
        for (s, v) in plan {
            done.insert(s.inode);
            let after = if v == on { Some(v) } else { server.set(&s, on)? };
            if let Some(x) = saved.sockets.iter_mut().find(|x| x.inode == s.inode) {
                x.applied = after.is_some();
            }
            let outcome = match after {
                None => "closed",
                Some(_) if v == on => "already",
                Some(_) => "switched",
            };
            changes.push(change(&s, Some(v), after, None, outcome));
        }
        dir.save(&saved).map_err(state_err)?;
    }
    let mut report = NodelayReport {
        schema: crate::record::SCHEMA_VERSION,
        version: env!("CARGO_PKG_VERSION"),
        action: if on { "on" } else { "off" },
        process: NodelayProcess { pid, comm, start_time, workers: server.workers.clone() },
        port,
        sockets: changes,
        state_file: file.display().to_string(),
        accepted_since: 0,
        notes: Vec::new(),
    };
    report.notes = notes(&report, on);
    Ok(report)
}

/// Whether `s` is a connection accepted on a port whose listening socket had
/// already been switched, and not one recorded before.
fn inherited_from(s: &Found, ports: &HashSet<u16>, known: &HashSet<u64>) -> bool {
    !s.listening && ports.contains(&s.local.port()) && !known.contains(&s.inode)
}

/// Adds `s` to the saved state, or updates it: the previous value stays the
/// one from before the first change.
fn record(saved: &mut Saved, s: &Found, now: bool, on: bool) {
    match saved.sockets.iter_mut().find(|x| x.inode == s.inode) {
        Some(x) => {
            (x.pid, x.fd, x.set, x.applied) = (s.pid, s.fd, on, false);
        }
        None => saved.sockets.push(SavedSocket {
            pid: s.pid,
            fd: s.fd,
            inode: s.inode,
            listening: s.listening,
            local: s.local.to_string(),
            peer: if s.listening { "*:*".into() } else { s.peer.to_string() },
            previous: now,
            set: on,
            applied: false,
        }),
    }
}

/// One row of the report.
pub(super) fn change(
    s: &Found,
    before: Option<bool>,
    after: Option<bool>,
    previous: Option<bool>,
    outcome: &'static str,
) -> SocketChange {
    SocketChange {
        pid: s.pid,
        fd: s.fd,
        inode: s.inode,
        role: if s.listening { "listening" } else { "accepted" },
        local: s.local.to_string(),
        peer: if s.listening { "*:*".into() } else { s.peer.to_string() },
        before,
        after,
        previous,
        outcome,
    }
}

/// What the switch means beyond the table.
fn notes(r: &NodelayReport, on: bool) -> Vec<String> {
    let word = if on { "on" } else { "off" };
    let mut n = Vec::new();
    let listening_was: Vec<bool> =
        r.sockets.iter().filter(|s| s.role == "listening").filter_map(|s| s.before).collect();
    let conns: Vec<bool> = r.sockets.iter().filter(|s| s.role == "accepted").filter_map(|s| s.before).collect();
    if on && listening_was.iter().all(|&v| !v) && !conns.is_empty() && conns.iter().all(|&v| v) {
        n.push(format!(
            "the listening socket had TCP_NODELAY off while all {} established connections already had it on: the \
server sets it itself on each connection (nginx with `tcp_nodelay on` does once a connection goes keep-alive), so \
its connections were not stalled by Nagle; what changed is that new connections now start with it on",
            conns.len()
        ));
    }
    n.push(format!(
        "connections accepted from now on start with TCP_NODELAY {word}, inherited from the listening socket, unless \
the server sets the option itself on each connection"
    ));
    n.push(
        "the change lasts until the sockets close or `restore`: a reload that opens new listening sockets does not \
carry it over; the lasting fix is the server's own setting"
            .into(),
    );
    let closed = r.count("closed");
    if closed > 0 {
        n.push(format!("{} closed before they could be switched", sockets(closed)));
    }
    n
}
