//! `inspect`'s text.

use crate::escape::clean;
use crate::record::inspect::{Host, InspectReport, Software, Trace};
use crate::words::{ms, plural_s};
use std::fmt::Write;

/// Most connections listed in the text (listening sockets are always listed); `--json` has all.
const TEXT_ROWS: usize = 24;

/// The whole report as text: the process, the summary sentence, then the
/// details (software, sockets, host), then what to change.
pub fn render(r: &InspectReport) -> String {
    let mut o = String::new();
    let p = &r.process;
    // The command line and the name are the process's own to set: shown escaped.
    let _ = write!(o, "PROCESS {} {}", p.pid, clean(if p.cmdline.is_empty() { &p.comm } else { &p.cmdline }));
    if let Some(uid) = p.uid {
        let _ = write!(o, " (uid {uid})");
    }
    o.push('\n');
    if !p.workers.is_empty() {
        let w: Vec<String> = p.workers.iter().map(u32::to_string).collect();
        let _ = writeln!(o, "  workers sharing its listening sockets: {}", w.join(" "));
    }
    if p.exited {
        o.push_str("  exited during the inspection: its sockets are shown as they were before\n");
    }
    let _ = writeln!(o, "SUMMARY {}", r.summary.text);
    if let Some(port) = r.port {
        let _ = writeln!(o, "  sockets on local port {port} only");
    }
    render_software(&mut o, &r.software);
    render_sockets(&mut o, r);
    render_host(&mut o, &r.host);
    if let Some(t) = &r.trace {
        render_trace(&mut o, t);
    }
    if !r.advice.is_empty() {
        o.push_str("\nADVICE\n");
        for a in &r.advice {
            let _ = writeln!(o, "  - {a}");
        }
    }
    if !r.notes.is_empty() {
        o.push_str("\nNOTES\n");
        for n in &r.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}

fn render_software(o: &mut String, s: &Software) {
    let _ = write!(o, "\nSOFTWARE {}", clean(&s.name));
    if s.kind == "other" {
        o.push_str(" (no server software tcpdoctor knows)");
    }
    o.push('\n');
    if let Some(v) = s.nodelay_setting {
        let _ = write!(o, "  its own setting: TCP_NODELAY {}", on_off(v));
        if let Some(src) = &s.setting_source {
            let _ = write!(o, "; source: {}", clean(src));
        }
        o.push('\n');
    }
    if !s.settings.is_empty() {
        let v: Vec<String> = s
            .settings
            .iter()
            .map(|x| {
                if x.source == "default" {
                    format!("{} {} (default)", x.name, clean(&x.value))
                } else {
                    format!("{} {}", x.name, clean(&x.value))
                }
            })
            .collect();
        let _ = writeln!(o, "  {}", v.join(", "));
    }
    // Notes may quote a helper's error output (`nginx -T` failed: …).
    for n in &s.notes {
        let _ = writeln!(o, "  {}", clean(n));
    }
}

fn on_off(v: bool) -> &'static str {
    if v { "on" } else { "off" }
}

fn opt_flag(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    }
}

fn render_sockets(o: &mut String, r: &InspectReport) {
    let _ = writeln!(o, "\nSOCKETS ({})", r.sockets.len());
    if r.sockets.is_empty() {
        return;
    }
    let multi = !r.process.workers.is_empty();
    // Listening sockets first (the list is sorted so), then the first connections.
    let listening = r.sockets.iter().take_while(|s| s.state == "listen").count();
    let shown = r.sockets.len().min(listening + TEXT_ROWS);
    let rows: Vec<Vec<String>> = r.sockets[..shown]
        .iter()
        .map(|s| {
            let mut row = Vec::new();
            if multi {
                row.push(s.pid.to_string());
            }
            row.push(s.fd.to_string());
            row.push(s.state.clone());
            row.push(s.local.clone());
            row.push(s.peer.clone());
            row.push(opt_flag(s.nodelay).into());
            row.push(opt_flag(s.cork).into());
            let listen = s.state == "listen";
            row.push(match s.pingpong {
                _ if listen => "-".into(),
                Some(true) => "delayed".into(),
                Some(false) => match s.quick_acks_left {
                    Some(q) if q > 0 => format!("quick({q})"),
                    _ => "quick".into(),
                },
                None => "?".into(),
            });
            match &s.info {
                Some(i) if !listen => {
                    row.push(format!("{:.3}", i.rtt_ms));
                    row.push(format!("{:.0}", i.ato_ms));
                    row.push(i.mss.to_string());
                    row.push(i.rcv_mss.to_string());
                    row.push(i.unacked.to_string());
                    row.push(i.notsent.map_or("?".into(), |n| n.to_string()));
                    row.push(i.total_retrans.to_string());
                }
                _ => row.extend(std::iter::repeat_n("-".to_string(), 7)),
            }
            if s.held_now {
                row.push("HELD".into());
            }
            row
        })
        .collect();
    let mut head: Vec<&str> = Vec::new();
    if multi {
        head.push("pid");
    }
    head.extend([
        "fd", "state", "local", "peer", "nodelay", "cork", "acks", "rtt_ms", "ato_ms", "mss", "rcvmss", "unacked",
        "notsent", "retrans",
    ]);
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |o: &mut String, cells: &[String]| {
        let mut l = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let w = width.get(i).copied().unwrap_or(0);
            let _ = write!(l, " {c:<w$}");
        }
        let _ = writeln!(o, "{}", l.trim_end());
    };
    line(o, &head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for row in &rows {
        line(o, row);
    }
    let rest = &r.sockets[shown..];
    if !rest.is_empty() {
        let held = rest.iter().filter(|s| s.held_now).count();
        let nagle = rest.iter().filter(|s| s.state == "established" && s.nodelay == Some(false)).count();
        let _ = writeln!(
            o,
            "  … {} more not shown ({nagle} with Nagle on, {held} holding a segment); --json lists every socket",
            rest.len()
        );
    }
}

fn render_host(o: &mut String, h: &Host) {
    let _ = write!(o, "\nHOST over {:.1} s:", h.window_ms / 1e3);
    if h.counters.is_empty() {
        o.push_str(" TcpExt counters unreadable");
    }
    let c: Vec<String> = h.counters.iter().map(|c| format!("{} +{}", c.name, c.delta)).collect();
    let _ = writeln!(o, " {}", c.join(", "));
    let sysctl = |v: Option<i64>| v.map_or("absent".to_string(), |v| v.to_string());
    let _ = writeln!(
        o,
        "  tcp_autocorking {}, tcp_pingpong_thresh {}",
        sysctl(h.tcp_autocorking),
        sysctl(h.tcp_pingpong_thresh)
    );
    for r in &h.routes {
        let q = r.quickack.map_or("-".to_string(), |q| q.to_string());
        let m = r.rto_min_ms.map_or("-".to_string(), |m| {
            if m >= 1000.0 && m % 1000.0 == 0.0 { format!("{}s", m / 1000.0) } else { format!("{m}ms") }
        });
        let _ = writeln!(o, "  route to {}: quickack {q}, rto_min {m} ({})", r.peer, r.route);
    }
}

/// The `--trace` section: counts per kind, the fraction in pieces, one example, the cost.
pub fn render_trace(o: &mut String, t: &Trace) {
    let _ = writeln!(
        o,
        "\nWRITE PATTERN traced {:.1} s with {}{}: {} thread{} of {} process{}, {} TCP socket{}, {} calls",
        t.traced_ms / 1e3,
        t.method,
        if t.interrupted { " (stopped by Ctrl-C)" } else { "" },
        t.threads,
        plural_s(t.threads),
        t.processes.len(),
        if t.processes.len() == 1 { "" } else { "es" },
        t.sockets,
        plural_s(t.sockets),
        t.calls
    );
    for k in &t.kinds {
        let nagle = match k.nagle {
            "nagle" => "Nagle on",
            "nodelay" => "TCP_NODELAY",
            "corked" => "corked",
            _ => "options unknown",
        };
        // The shape is write-write-read only where Nagle can hold the second piece.
        let small = match k.nagle {
            "nagle" => format!("{} write-write-read", k.write_write_read),
            "nodelay" => format!("{} in small pieces, sent at once", k.write_write_read),
            "corked" => format!("{} in small pieces, sent together", k.write_write_read),
            _ => format!("{} in small pieces", k.write_write_read),
        };
        let _ = writeln!(
            o,
            "  {:<24} {:>6} response{}: {} in one piece, {} in pieces ({small}) on {} socket{}",
            format!("{}, {nagle}:", k.role),
            k.responses,
            if k.responses == 1 { " " } else { "s" },
            k.single,
            k.in_pieces,
            k.sockets,
            plural_s(k.sockets)
        );
    }
    if let Some(f) = t.nagle_in_pieces_fraction {
        let _ = write!(o, "  {:.0} % of responses on Nagle sockets were written in pieces", f * 100.0);
        match (t.gap_wwr_ms, t.gap_other_ms) {
            (Some(w), Some(x)) => {
                let _ = write!(o, "; last piece → next request: median {} (other responses {})", ms(w), ms(x));
            }
            (Some(w), None) => {
                let _ = write!(o, "; last piece → next request: median {}", ms(w));
            }
            _ => {}
        }
        o.push('\n');
    }
    let _ = writeln!(o, "  {}", t.text);
    if let Some(ex) = &t.example {
        let conn = match (&ex.local, &ex.peer) {
            (Some(l), Some(p)) => format!(", {l} ↔ {p}"),
            _ => String::new(),
        };
        let nagle = match ex.nagle {
            "nagle" => "Nagle on",
            "nodelay" => "TCP_NODELAY on",
            "corked" => "corked",
            _ => "options unknown",
        };
        let _ = writeln!(o, "  example: pid {} fd {}{conn}, {nagle}", ex.pid, ex.fd);
        let half = ex.lines.len() - ex.lines.len() / 2;
        for (i, l) in ex.lines.iter().enumerate() {
            if ex.elided > 0 && i == half {
                let _ = writeln!(o, "    … {} more calls", ex.elided);
            }
            let _ = writeln!(o, "    {}", l.text);
        }
        if let Some(g) = ex.gap_ms {
            let _ = writeln!(o, "    last write → next request's data: {}", ms(g));
        }
    }
    if let Some(h) = &t.kernel_hold {
        let _ = writeln!(o, "  {}", h.text);
    }
    let cost = t.overhead.as_ref().map(|c| &c.text).or(t.cost.as_ref().map(|c| &c.text));
    let _ = writeln!(o, "  cost ({}): {}", t.method, cost.map_or("", |s| s.as_str()));
    for n in &t.notes {
        let _ = writeln!(o, "  note: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::inspect::{Process, Socket, Summary};

    fn sock(state: &str, nodelay: Option<bool>) -> Socket {
        Socket { state: state.into(), nodelay, ..Socket::default() }
    }

    fn report(sockets: Vec<Socket>) -> InspectReport {
        InspectReport {
            schema: 1,
            version: "0",
            process: Process { pid: 42, comm: "srv".into(), uid: Some(0), ..Process::default() },
            port: None,
            software: Software { kind: "other", name: "srv".into(), ..Software::default() },
            summary: Summary::of(&sockets),
            sockets,
            host: Host::default(),
            advice: vec!["set TCP_NODELAY".into()],
            notes: Vec::new(),
            trace: None,
        }
    }

    #[test]
    fn text_leads_with_the_summary_and_lists_a_bounded_number_of_connections() {
        let mut socks = vec![sock("listen", Some(false))];
        for i in 0..30 {
            let mut s = sock("established", Some(false));
            s.fd = 10 + i;
            s.held_now = i >= 28;
            socks.push(s);
        }
        let t = render(&report(socks));
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "PROCESS 42 srv (uid 0)");
        assert_eq!(
            lines[1],
            "SUMMARY 30 of 30 established connections have Nagle on (TCP_NODELAY off); 2 holding a segment right now"
        );
        assert!(t.contains("SOFTWARE srv (no server software tcpdoctor knows)"), "{t}");
        // The listener and 24 connections, then a count of the rest.
        assert_eq!(t.lines().filter(|l| l.contains(" listen ")).count(), 1, "{t}");
        assert_eq!(t.lines().filter(|l| l.starts_with("  ") && l.contains(" established ")).count(), TEXT_ROWS, "{t}");
        assert!(
            t.contains("… 6 more not shown (6 with Nagle on, 2 holding a segment); --json lists every socket"),
            "{t}"
        );
        assert!(t.contains("\nADVICE\n  - set TCP_NODELAY\n"), "{t}");
        let few = render(&report(vec![sock("listen", Some(false)), sock("established", Some(true))]));
        assert!(!few.contains("more not shown"), "{few}");
        assert!(few.lines().nth(1).unwrap().starts_with("SUMMARY 0 of 1 established connection has Nagle on"));
    }
}
