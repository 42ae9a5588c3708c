//! `nodelay`'s text, and `--try-nodelay`'s before/after block.

use crate::escape::clean;
use crate::record::nodelay::{NodelayReport, TryNodelay};
use crate::words::sockets;
use std::fmt::Write;

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
