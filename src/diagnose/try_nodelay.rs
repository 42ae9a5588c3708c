//! `diagnose --try-nodelay`: after the verdict, TCP_NODELAY set live on the
//! server's sockets of the port (as `nodelay on` does), the load run again
//! with the same parameters (and the capture beside it), then put back unless
//! `--keep`: the fix proven on the running server, without a restart.

use super::{Options, Progress, local, measured, timed_bench};
use crate::escape::clean;
use crate::nodelay;
use crate::record::diagnose::{DiagnoseReport, LoadStep};
use crate::record::nodelay::{LoadSummary, TryNodelay};
use crate::words::{ms, sockets};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often, early in the load, connections are looked at again: a server
/// that sets TCP_NODELAY off itself on each new connection undoes what the
/// listening socket gave it, and such connections are switched too.
const WATCH_EVERY: Duration = Duration::from_millis(50);
/// For at most this long (or half the load).
const WATCH_FOR: Duration = Duration::from_secs(1);

/// Why the experiment cannot run against this diagnosis, if it cannot.
fn cannot(r: &DiagnoseReport) -> Option<String> {
    if r.load.is_none() {
        return Some("the load (step 2) measured nothing, so there is nothing to compare".into());
    }
    if !r.local {
        return Some(format!(
            "the server {} is not on this host: the switch works only on a server's own host (run tcpdoctor there)",
            r.address
        ));
    }
    if r.server.is_none() {
        let why = r.missing.iter().find(|m| m.starts_with("step 5")).map(|m| format!(" ({m})")).unwrap_or_default();
        return Some(format!("step 5 did not find the server's process{why}; the switch needs it"));
    }
    if crate::interrupt::requested() {
        return Some("interrupted (Ctrl-C, SIGTERM or SIGHUP)".into());
    }
    None
}

/// Runs the experiment for diagnosis `r`; `say` gets its lines as they
/// happen (the caller prints the section's heading).
pub fn run(
    o: &Options,
    r: &DiagnoseReport,
    keep: bool,
    say: &mut dyn FnMut(&str),
    progress: &mut dyn FnMut(Progress),
) -> TryNodelay {
    let addr: Option<SocketAddr> = r.address.parse().ok();
    let mut t = TryNodelay { port: addr.map_or(0, |a| a.port()), kept: keep, ..TryNodelay::default() };
    if let Some(why) = cannot(r) {
        return not_run_said(t, say, why);
    }
    let (Some(server), Some(addr), Some(load)) = (&r.server, addr, &r.load) else { return t };
    let (pid, name) = (server.pid, clean(&server.name).into_owned());
    (t.pid, t.name) = (Some(pid), Some(name.clone()));
    if let Some(f) = nodelay::saved(pid) {
        return not_run_said(
            t,
            say,
            format!(
                "pid {pid} already has TCP_NODELAY changed by `tcpdoctor nodelay` (saved in {}): put it back first \
(`tcpdoctor nodelay {pid} restore`), so that the experiment's restore does not undo that change",
                f.display()
            ),
        );
    }
    let switched = match nodelay::switch(pid, Some(addr.port()), true) {
        Ok(s) => s,
        Err(e) => return not_run_said(t, say, e.to_string()),
    };
    (t.listening, t.established) = switched.count_by_role("switched");
    t.already = switched.count("already");
    t.state_file = Some(switched.state_file.clone());
    t.sockets = switched.sockets.into_iter().filter(|s| s.outcome == "switched").collect();
    say(&format!(
        "[try] TCP_NODELAY set live on pid {pid} ({name}), port {}: {} listening, {} established connection(s) \
switched, {} already on; previous values in {} (if this run is killed: `tcpdoctor nodelay {pid} restore`)\n",
        addr.port(),
        t.listening,
        t.established,
        t.already,
        switched.state_file
    ));

    // The load again, the capture beside it, and a watch on new connections.
    let mut notes = Vec::new();
    let cap = o.capture.then(|| local::start_capture(o, addr, &mut notes)).flatten();
    let stop = Arc::new(AtomicBool::new(false));
    let watch = watch_connections(pid, addr.port(), o.connections, o.load / 2, stop.clone());
    let result = timed_bench(o, "load, TCP_NODELAY ", o.load, false, progress);
    stop.store(true, Ordering::Relaxed);
    let (during, watched, watch_error) =
        watch.join().unwrap_or((Vec::new(), Duration::ZERO, Some("the watch thread failed".into())));
    let capture = cap.and_then(|c| local::finish_capture(c, &mut notes));
    t.during_load = during.len();
    t.sockets.extend(during);
    if let Some(e) = watch_error {
        notes.push(format!("connections were not watched during the load: {e}"));
    }

    // Put back before anything else can go wrong.
    let back_line = if keep {
        format!("[try] kept: TCP_NODELAY stays on (`tcpdoctor nodelay {pid} restore` puts it back)\n")
    } else {
        match nodelay::restore(pid) {
            Ok(back) => {
                t.restored = true;
                notes.extend(back.notes.iter().cloned());
                let line = format!("[try] restored: {}\n", restore_words(&back));
                t.restore = back.sockets;
                line
            }
            Err(e) => {
                notes.push(format!("not restored: {e}"));
                format!("[try] NOT restored: {e}\n")
            }
        }
    };
    let after = match measured(result) {
        Ok(b) => b,
        Err(e) => {
            say(&format!("[try] Under load      nothing measured: {e}\n"));
            say(&back_line);
            notes.push(format!("the load with TCP_NODELAY measured nothing: {e}"));
            t.notes = notes;
            return t;
        }
    };
    if after.interrupted {
        notes.push("interrupted (Ctrl-C, SIGTERM or SIGHUP): the load with TCP_NODELAY ran short".into());
    }
    let after = LoadStep::of(&after);
    say(&format!("[try] Under load      {}\n", super::load_line(&after)));
    say(&back_line);
    if t.during_load > 0 {
        notes.insert(
            0,
            format!(
                "the server set TCP_NODELAY off itself on {} connection(s) of the load, which had inherited it on from \
the listening socket: switched again while the load ran, all within {} ms of its start (requests before that \
still had Nagle)",
                t.during_load,
                watched.as_millis()
            ),
        );
    }
    let stalls = |c: &crate::record::diagnose::CaptureStep| {
        c.findings
            .iter()
            .map(|f| if let crate::record::Finding::NagleDelayedAck(n) = f { n.stalls } else { 0 })
            .sum::<u64>()
    };
    let before = LoadSummary::of(load, r.capture.as_ref().map(stalls));
    let after_sum = LoadSummary::of(&after, capture.as_ref().map(stalls));
    t.proof = Some(proof(pid, &name, &before, &after_sum, &t));
    (t.before, t.after, t.load) = (Some(before), Some(after_sum), Some(after));
    t.notes = notes;
    t
}

/// The experiment, not run: the line saying why, and the record.
fn not_run_said(mut t: TryNodelay, say: &mut dyn FnMut(&str), why: String) -> TryNodelay {
    say(&format!("[try] not run: {why}\n"));
    t.not_run = Some(why);
    t
}

/// "with TCP_NODELAY set live on pid 1234 (nginx), the median under load fell from 43.9 ms to 120 µs; restored".
fn proof(pid: u32, name: &str, b: &LoadSummary, a: &LoadSummary, t: &TryNodelay) -> String {
    let what = if a.p50_ms < b.p50_ms / 2.0 {
        format!("fell from {} to {}", ms(b.p50_ms), ms(a.p50_ms))
    } else if a.p50_ms > b.p50_ms * 1.5 {
        format!("rose from {} to {}", ms(b.p50_ms), ms(a.p50_ms))
    } else {
        format!("stayed at {} ({} before): Nagle is not what slows it", ms(a.p50_ms), ms(b.p50_ms))
    };
    let end = match (t.kept, t.restored) {
        (true, _) => "kept",
        (false, true) => "restored",
        (false, false) => "NOT restored",
    };
    format!("with TCP_NODELAY set live on pid {pid} ({name}), the median under load {what}; {end}")
}

/// What the restore did, in a few words.
fn restore_words(r: &crate::record::nodelay::NodelayReport) -> String {
    let mut w = vec![format!("{} put back to TCP_NODELAY off", sockets(r.count("restored")))];
    if r.count("closed") > 0 {
        w.push(format!("{} closed since (the load's connections)", r.count("closed")));
    }
    if r.count("changed_by_process") > 0 {
        w.push(format!("{} set back by the server itself", r.count("changed_by_process")));
    }
    if r.accepted_since > 0 {
        w.push(format!("{} accepted meanwhile keep it on", r.accepted_since));
    }
    w.join(", ")
}

/// Switches, early in the load, connections on `port` that have TCP_NODELAY
/// off again; stops once `connections` established ones have it on, after
/// `limit` (at most [`WATCH_FOR`]), or when told. Returns the rows switched
/// and when the last of them was.
fn watch_connections(
    pid: u32,
    port: u16,
    connections: usize,
    limit: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<crate::record::nodelay::SocketChange>, Duration, Option<String>)> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let until = start + limit.min(WATCH_FOR);
        let mut last = Duration::ZERO;
        let mut switched = Vec::new();
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            std::thread::sleep(WATCH_EVERY);
            match nodelay::switch(pid, Some(port), true) {
                Ok(r) => {
                    let on = r.sockets.iter().filter(|s| s.role == "accepted" && s.after == Some(true)).count();
                    let n = switched.len();
                    switched.extend(r.sockets.into_iter().filter(|s| s.role == "accepted" && s.outcome == "switched"));
                    if switched.len() > n {
                        last = start.elapsed();
                    }
                    if on >= connections {
                        break;
                    }
                }
                Err(e) => return (switched, last, Some(e.to_string())),
            }
        }
        (switched, last, None)
    })
}
