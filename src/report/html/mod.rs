//! Self-contained HTML reports (`--html FILE`): the verdict and fix first,
//! then packet ladders (the worst stalled exchanges, the slowest of connections
//! that never stalled), latency histograms and the connection table. Everything is inline (no scripts, fonts or images
//! from elsewhere), so the file works offline and can be attached to a ticket.

mod chart;
mod ladder;
mod try_nodelay;

use crate::record::bench::BenchReport;
use crate::record::diagnose::{Comparison, DiagnoseReport, LoadStep};
use crate::record::{Breakdown, Connection, ExchangeTimes, Finding, Ladder, Report};
use crate::words::dur;
use chart::Series;
use maud::{DOCTYPE, Markup, PreEscaped, html};

/// Connection rows an HTML report lists (the JSON has them all).
const CONN_ROWS: usize = 200;

const CSS: &str = include_str!("page.css");
const JS: &str = include_str!("page.js");

fn ms(v: f64) -> String {
    dur((v * 1e6).round() as i64)
}

/// Text with `backticked` spans set as code (the fixes quote commands and config lines).
fn rich(text: &str) -> Markup {
    html! {
        @for (i, part) in text.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

/// The whole page around `body`.
fn page(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="generator" content=(format!("tcpdoctor {}", env!("CARGO_PKG_VERSION")));
                title { (title) }
                // Errors are recorded on the page so a headless check can see them.
                script { (PreEscaped("window.addEventListener('error',function(e){document.documentElement.setAttribute('data-error',String(e.message));});")) }
                style { (PreEscaped(CSS)) }
            }
            body {
                (body)
                footer {
                    "tcpdoctor " (env!("CARGO_PKG_VERSION")) " · JSON schema " (crate::record::SCHEMA_VERSION)
                    " · this page has no external resources"
                }
                script { (PreEscaped(JS)) }
            }
        }
    }
    .into_string()
}

/// The ladders with a picker: a `--flow` connection, the worst stalled exchanges and the
/// slowest exchange of connections that did not stall, each with its time breakdown.
/// `none` says why there is no stalled exchange.
fn ladders(flow: Option<&Ladder>, stalled: &[Ladder], slowest: &[Ladder], none: &str) -> Markup {
    let all: Vec<&Ladder> = flow.into_iter().chain(stalled).chain(slowest).collect();
    // Option values index `all`: the groups number on from the flow ladder.
    let at = usize::from(flow.is_some());
    let groups = [
        ("Stalled exchanges, worst first", stalled, at),
        ("Slowest exchange of connections without a stall", slowest, at + stalled.len()),
    ];
    html! {
        section #ladder {
            h2 { "Exchanges, packet by packet" }
            @if stalled.is_empty() {
                p.empty {
                    (none)
                    @if !slowest.is_empty() { " Below: the slowest exchange of up to 10 connections." }
                }
            } @else {
                p.note {
                    "Client on the left, server on the right, time flowing down to scale (long idle gaps are cut). "
                    "Orange: the small segment Nagle waits on; red: the delayed ACK and the segment Nagle held."
                }
            }
            @if all.len() > 1 {
                label {
                    "Exchange: "
                    select #ladder-pick {
                        @if let Some(l) = flow { option value="0" { (l.title) } }
                        @for (name, ls, first) in groups {
                            @if !ls.is_empty() {
                                optgroup label=(name) {
                                    @for (i, l) in ls.iter().enumerate() { option value=(first + i) { (l.title) } }
                                }
                            }
                        }
                    }
                }
            }
            @for (i, l) in all.iter().enumerate() {
                div.ladder-view data-i=(i) hidden[i > 0] {
                    h3 { (l.title) }
                    @if let Some(t) = &l.times {
                        (chart::breakdown(t))
                    }
                    (ladder::svg(l))
                    @if l.truncated {
                        p.note { "More segments exist than are drawn." }
                    }
                }
            }
        }
    }
}

fn mean_times(b: &Breakdown) -> ExchangeTimes {
    ExchangeTimes {
        total_ms: b.total_ms,
        network_ms: b.network_ms,
        think_ms: b.think_ms,
        upstream_ms: b.upstream_ms,
        client_wait_ms: b.client_wait_ms,
        transfer_ms: b.transfer_ms,
        stall_ms: b.stall_ms,
        loss_ms: b.loss_ms,
    }
}

/// Per server: the latency histogram and where the mean exchange's time goes.
fn servers(bs: &[Breakdown]) -> Markup {
    html! {
        @if !bs.is_empty() {
            section #latency {
                h2 { "Latency per exchange, by server" }
                @for b in bs {
                    h3 {
                        (b.server)
                        @if let Some(n) = &b.server_name { " " (n) }
                        @if let Some(s) = &b.server_software { " (" (s) ")" }
                        " · " (b.exchanges) " exchanges"
                    }
                    (chart::histogram(
                        &[Series { name: "exchanges", class: "a", hist: &b.latency_histogram }],
                        &chart::percentiles("", b.total_spread_ms.p50, b.total_spread_ms.p90, b.total_spread_ms.p99, b.total_spread_ms.max),
                    ))
                    p.note { "Mean exchange:" }
                    (chart::breakdown(&mean_times(b)))
                }
            }
        }
    }
}

/// The connection table, sortable, most time lost first.
fn connections(cs: &[Connection], omitted: u64) -> Markup {
    let more = cs.len().saturating_sub(CONN_ROWS) as u64 + omitted;
    html! {
        @if !cs.is_empty() {
            section #connections {
                h2 { "Connections" }
                p.note { "Most time lost first; click a column to sort." }
                table.sortable {
                    thead { tr {
                        th { "id" } th { "client" } th { "server" } th.num { "packets" } th.num { "exchanges" }
                        th.num { "stalls" } th.num { "retrans" } th.num { "lost" } th.num { "rtt" } th.num { "duration" }
                    } }
                    tbody {
                        @for c in cs.iter().take(CONN_ROWS) {
                            tr.hot[c.time_lost_ms > 0.0] {
                                td.num data-v=(c.first_frame) { (c.id) }
                                td.mono { (c.client) }
                                td.mono { (c.server) @if c.roles_from == "lower_port" { "?" } @if let Some(n) = &c.server_name { " " (n) } }
                                td.num { (c.packets) } td.num { (c.exchanges) } td.num { (c.stalls) }
                                td.num { (c.retransmissions) }
                                td.num data-v=(c.time_lost_ms) { (ms(c.time_lost_ms)) }
                                td.num data-v=(c.rtt_ms.unwrap_or(-1.0)) { (c.rtt_ms.map_or("-".into(), ms)) }
                                td.num data-v=(c.duration_ms) { (ms(c.duration_ms)) }
                            }
                        }
                    }
                }
                @if more > 0 {
                    p.note { (more) " more connections are in the JSON output (" code { "--json" } ")." }
                }
            }
        }
    }
}

fn finding(f: &Finding) -> Markup {
    html! {
        p.summary { (f.summary()) }
        @match f {
            Finding::NagleDelayedAck(n) => {
                p { "Nagle runs on " strong { (n.nagle_side.endpoint) } " (" (n.nagle_side.role) "); "
                    strong { (n.delayed_ack_side.host) } " (" (n.delayed_ack_side.role) ") delays its ACKs. "
                    (n.stalls) " stalls, median " (ms(n.stall_ms.p50)) ", " (ms(n.time_lost_ms)) " lost in all. ACK timer: "
                    (n.ack_timer) "; the " (n.delayed_ack_side.role) "'s delay, median " (ms(n.ack_delay_ms.p50)) " ("
                    (crate::report::text::captured(n.capture_point, n.rtt_to_client_ms, n.rtt_to_server_ms)) ")." }
                @if !n.fix.is_empty() {
                    h3 { "Fix" }
                    ol.fix { @for x in &n.fix { li { (rich(x)) } } }
                }
                @if let Some(ex) = n.example_frames.get(..3) {
                    p.note { "Evidence: frame " (ex[0]) " small segment, frame " (ex[1]) " late ACK, frame " (ex[2])
                        " held segment (Wireshark: " code { "frame.number in {" (ex[0]) "," (ex[1]) "," (ex[2]) "}" } ")." }
                }
            }
            Finding::Expect100Continue(crate::record::ExpectFinding { fix, .. })
            | Finding::UpstreamWait(crate::record::UpstreamWaitFinding { fix, .. })
            | Finding::NetworkLatency(crate::record::NetworkLatencyFinding { fix, .. }) => {
                h3 { "Fix" }
                ol.fix { @for x in fix { li { (rich(x)) } } }
            }
            _ => {}
        }
    }
}

/// `analyze --html`.
pub fn analyze(r: &Report) -> String {
    let bad = !r.findings.is_empty();
    let files: Vec<&str> = r.inputs.iter().map(|i| i.file.as_str()).collect();
    // A `--flow` ladder has no exchange times.
    let flow = r.ladder.as_ref().filter(|l| l.times.is_none());
    page(
        &format!("tcpdoctor: {}", files.join(", ")),
        html! {
            h1 { "tcpdoctor analyze" }
            @for i in &r.inputs {
                p.meta { (i.file) ": " (i.packets) " packets, " (i.connections) " connections, " (ms(i.duration_ms)) " (" (i.format) ")" }
            }
            section.verdict.bad[bad] {
                h2 { "Verdict" }
                @if !bad {
                    p.summary { "No stall found: no Nagle + delayed-ACK holds, retransmissions, slow connects, zero windows or slow responders." }
                }
                @for f in &r.findings { (finding(f)) }
            }
            (ladders(flow, &r.stalled_exchanges, &r.slowest_exchanges, "No exchange stalled (analyze --flow ID draws any connection)."))
            (servers(&r.breakdown))
            (connections(&r.connections, r.connections_omitted))
            (warnings(&r.warnings))
        },
    )
}

fn warnings(w: &[String]) -> Markup {
    html! {
        @if !w.is_empty() {
            section.warnings { h2 { "Warnings" } ul { @for x in w { li { (x) } } } }
        }
    }
}

/// `bench --html`.
pub fn bench(r: &BenchReport) -> String {
    let l = &r.latency;
    let points: Vec<chart::Point> =
        r.timeline.iter().map(|p| (p.t_s, p.p50_ms, p.p99_ms, p.max_ms, p.requests_per_s)).collect();
    page(
        &format!("tcpdoctor bench {}", r.url),
        html! {
            h1 { "tcpdoctor bench" }
            p.meta { (r.url) " · " (r.connections) " connections, " (r.threads) " threads, " (format!("{:.1}", r.elapsed_s)) " s"
                @if r.interrupted { " (interrupted)" } }
            section.verdict.bad[!r.notes.is_empty()] {
                h2 { "Result" }
                p.summary { (r.requests) " requests, " (format!("{:.0}", r.requests_per_s)) "/s; median " (ms(l.p50)) ", p99 " (ms(l.p99)) }
                @for n in &r.notes { p { (rich(n)) } }
                @if r.errors.total() > 0 {
                    p { "Errors: connect " (r.errors.connect) ", read " (r.errors.read) ", write " (r.errors.write)
                        ", timeout " (r.errors.timeout) ", status " (r.errors.status) ", malformed " (r.errors.malformed) }
                }
            }
            section #latency {
                h2 { "Latency" }
                (chart::histogram(
                    &[Series { name: "requests", class: "a", hist: &r.latency_histogram }],
                    &chart::percentiles("", l.p50, l.p90, l.p99, l.max),
                ))
                table {
                    thead { tr { th { "" } th.num { "p50" } th.num { "p90" } th.num { "p99" } th.num { "max" } } }
                    tbody {
                        @for (name, d) in [("latency", &r.latency), ("time to first byte", &r.time_to_first_byte), ("largest read gap", &r.max_read_gap)] {
                            tr { td { (name) } td.num { (ms(d.p50)) } td.num { (ms(d.p90)) } td.num { (ms(d.p99)) } td.num { (ms(d.max)) } }
                        }
                    }
                }
            }
            section #over-time {
                h2 { "Latency over time" }
                (chart::timeline(&points, r.timeline_step_s))
            }
            (ladders(None, &[], &[], "bench sees no packets: run `tcpdoctor diagnose URL --html FILE` (as root) or `tcpdoctor analyze CAPTURE --html FILE` for the ladder."))
        },
    )
}

fn step_row(name: &str, s: &LoadStep) -> Markup {
    html! {
        tr {
            td { (name) }
            td.num { (s.connections) }
            td.num { (s.requests) }
            td.num { (ms(s.latency.p50)) }
            td.num { (ms(s.latency.p99)) }
            td.num { (ms(s.max_read_gap.p50)) }
            td.num { (s.errors) }
        }
    }
}

/// `diagnose --html` (with a before/after comparison from `--verify` or `--before`).
pub fn diagnose(r: &DiagnoseReport, cmp: Option<&Comparison>) -> String {
    let v = &r.verdict;
    let mut series = Vec::new();
    let mut marks = Vec::new();
    if let Some(c) = cmp {
        if let Some(h) = &c.before.latency_histogram {
            series.push(Series { name: "before, under load", class: "b", hist: h });
        }
        if let Some(h) = &c.after.latency_histogram {
            series.push(Series { name: "after, under load", class: "c", hist: h });
        }
        // A comparison keeps p50 and p99 of each side (`--before` reads them from a JSON file).
        for (name, p) in [
            ("before p50", c.before.p50_ms),
            ("before p99", c.before.p99_ms),
            ("after p50", c.after.p50_ms),
            ("after p99", c.after.p99_ms),
        ] {
            marks.extend(p.map(|p| (name.to_string(), p)));
        }
    } else {
        for (name, class, s) in [
            ("one request alone", "c", &r.alone),
            ("under load", "b", &r.load),
            ("load with TCP_QUICKACK", "a", &r.quickack),
        ] {
            if let Some(s) = s.as_ref().filter(|s| s.requests > 0) {
                series.push(Series { name, class, hist: &s.latency_histogram });
            }
        }
        if let Some(d) = r.load.as_ref().map(|l| &l.latency) {
            marks = chart::percentiles("load ", d.p50, d.p90, d.p99, d.max);
        }
    }
    let cap = r.capture.as_ref();
    let no_ladder = match (cap, r.missing.iter().find(|m| m.starts_with("step 4"))) {
        (Some(_), _) => "No exchange stalled in the capture.".to_string(),
        (None, Some(why)) => format!("No ladder: {why}."),
        (None, None) => "No ladder: no packets were captured.".to_string(),
    };
    page(
        &format!("tcpdoctor diagnose {}", r.url),
        html! {
            h1 { "tcpdoctor diagnose" }
            p.meta { (r.url) " (" (r.address) ") · " (format!("{:.1}", r.elapsed_s)) " s" }
            @if let Some(c) = cmp {
                section.verdict.bad[!c.fixed] {
                    h2 { "Before / after" }
                    p.summary.fixed[c.fixed].notfixed[!c.fixed] {
                        @if c.fixed { "FIXED" } @else { "NOT FIXED" }
                        ": median latency under load " (c.before.p50_ms.map_or("-".into(), ms)) " → " (c.after.p50_ms.map_or("-".into(), ms))
                        @if c.speedup_p50 > 0.0 { " (" (format!("{:.0}", c.speedup_p50)) "×)" }
                    }
                    table {
                        thead { tr { th { "" } th { "before" } th { "after" } } }
                        tbody {
                            tr { td { "url" } td.mono { (c.before.url) } td.mono { (c.after.url) } }
                            tr { td { "verdict" } td { (c.before.cause) } td { (c.after.cause) } }
                            tr { td { "p99 under load" } td { (c.before.p99_ms.map_or("-".into(), ms)) } td { (c.after.p99_ms.map_or("-".into(), ms)) } }
                            tr { td { "requests/s" } td { (c.before.requests_per_s.map_or("-".into(), |x| format!("{x:.0}"))) }
                                 td { (c.after.requests_per_s.map_or("-".into(), |x| format!("{x:.0}"))) } }
                            tr { td { "Nagle stalls captured" } td { (c.before.stalls.map_or("-".into(), |x| x.to_string())) }
                                 td { (c.after.stalls.map_or("-".into(), |x| x.to_string())) } }
                        }
                    }
                }
            }
            section.verdict.bad[v.cause != "none"] {
                h2 { "Verdict (" (v.confidence) " confidence)" }
                p.summary { (v.summary) }
                @if v.lost_per_request_ms > 0.0 { p { "Time lost per request: " strong { (ms(v.lost_per_request_ms)) } } }
                @if !v.fix.is_empty() { h3 { "Fix" } ol.fix { @for f in &v.fix { li { (rich(f)) } } } }
                @if !v.evidence.is_empty() { h3 { "Evidence" } ul { @for e in &v.evidence { li { (rich(e)) } } } }
                @if !r.missing.is_empty() { h3 { "Not checked" } ul { @for m in &r.missing { li { (m) } } } }
            }
            @if let Some(t) = &r.try_nodelay { (try_nodelay::section(t)) }
            section #steps {
                h2 { "Measurements" }
                @if let Some(t) = &r.rtt {
                    p { "TCP round trip: min " (t.min_ms.map_or("-".into(), ms)) ", avg " (t.avg_ms.map_or("-".into(), ms))
                        " (" (t.method) ", " (t.received) " of " (t.sent) " answered)" }
                }
                table {
                    thead { tr { th { "" } th.num { "connections" } th.num { "requests" } th.num { "p50" } th.num { "p99" }
                        th.num { "read gap p50" } th.num { "errors" } } }
                    tbody {
                        @if let Some(s) = &r.alone { (step_row("one request alone (fresh connections)", s)) }
                        @if let Some(s) = &r.load { (step_row("under keep-alive load", s)) }
                        @if let Some(s) = &r.quickack { (step_row("load, client TCP_QUICKACK", s)) }
                    }
                }
                @if let Some(s) = &r.server {
                    p { "Server process: pid " (s.pid) " " (s.name) " (" (s.software_name) "); " (s.nagle_on) " of "
                        (s.established) " established connections have Nagle on" }
                }
                @if let Some(c) = cap {
                    p { "Capture on " (c.interface) ": " (c.packets) " packets, " (c.kernel_drops) " dropped by the kernel"
                        @if c.truncated { " (stopped at its packet limit)" } }
                }
            }
            section #histogram {
                h2 { "Latency" }
                (chart::histogram(&series, &marks))
            }
            (ladders(None, cap.map_or(&[][..], |c| &c.stalled_exchanges[..]), cap.map_or(&[][..], |c| &c.slowest_exchanges[..]), &no_ladder))
            @if let Some(c) = cap {
                (servers(&c.breakdown))
                (connections(&c.connections, 0))
            }
        },
    )
}
