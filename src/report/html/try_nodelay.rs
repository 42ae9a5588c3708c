//! `diagnose --try-nodelay --html`: the experiment's section, beside the verdict.

use super::ms;
use crate::record::nodelay::TryNodelay;
use maud::{Markup, html};

/// The fix tried live: the proof, before/after, what was switched and put back.
pub(super) fn section(t: &TryNodelay) -> Markup {
    let fell = matches!((&t.before, &t.after), (Some(b), Some(a)) if a.p50_ms < b.p50_ms / 2.0);
    let n = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    html! {
        section #try-nodelay .verdict.bad[!fell] {
            h2 { "TCP_NODELAY set live (--try-nodelay)" }
            @if let Some(why) = &t.not_run {
                p { "Not run: " (why) }
            } @else {
                @if let Some(p) = &t.proof { p.summary.fixed[fell].notfixed[!fell] { (p) } }
                @if let (Some(b), Some(a)) = (&t.before, &t.after) {
                    table {
                        thead { tr { th { "" } th.num { "before" } th.num { "after: TCP_NODELAY live" } } }
                        tbody {
                            tr { td { "median under load" } td.num { (ms(b.p50_ms)) } td.num { (ms(a.p50_ms)) } }
                            tr { td { "p99 under load" } td.num { (ms(b.p99_ms)) } td.num { (ms(a.p99_ms)) } }
                            tr { td { "requests/s" } td.num { (format!("{:.0}", b.requests_per_s)) }
                                 td.num { (format!("{:.0}", a.requests_per_s)) } }
                            tr { td { "errors" } td.num { (b.errors) } td.num { (a.errors) } }
                            tr { td { "Nagle stalls captured" } td.num { (n(b.stalls)) } td.num { (n(a.stalls)) } }
                        }
                    }
                }
                p {
                    "Switched on pid " (t.pid.map_or("-".into(), |p| p.to_string()))
                    @if let Some(name) = &t.name { " (" (name) ")" }
                    ", port " (t.port) ": " (t.listening) " listening, " (t.established) " established, "
                    (t.during_load) " during the load, " (t.already) " already on. "
                    @if t.kept { "Kept: " code { "tcpdoctor nodelay " (t.pid.unwrap_or(0)) " restore" } " puts it back." }
                    @else if t.restored { "Restored: " (t.restore.iter().filter(|s| s.outcome == "restored").count()) " put back." }
                    @else { strong.notfixed { "NOT restored." } }
                }
                @if !t.notes.is_empty() { ul { @for x in &t.notes { li { (x) } } } }
            }
        }
    }
}
