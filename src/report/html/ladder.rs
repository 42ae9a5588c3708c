//! A ladder (flow graph) as SVG: client left, server right, time flowing
//! down to scale, with a break marker where the line would be long and idle.

use crate::record::{Ladder, Mark, Row};
use crate::report::ladder::label;
use crate::tcp::Side;
use crate::words::dur;
use maud::{Markup, html};

const WIDTH: f64 = 820.0;
const CLIENT_X: f64 = 210.0;
const SERVER_X: f64 = 600.0;
const TOP: f64 = 64.0;
/// Arrows slope down by this much: a segment arrives after it leaves.
const SLANT: f64 = 10.0;
/// Rows are at least this far apart, whatever their times.
const MIN_STEP: f64 = 24.0;
/// Height the reference gap (the stall) is drawn at.
const REF_PX: f64 = 220.0;
/// Gaps drawn taller than this are cut to a break marker.
const BREAK_OVER_PX: f64 = 330.0;
const BREAK_PX: f64 = 44.0;
/// Height of the line naming a segment's TLS records.
const TLS_LINE: f64 = 14.0;

/// Y of each row, and the rows after which the line is broken (with the gap cut out, ns).
fn layout(rows: &[Row]) -> (Vec<f64>, Vec<(usize, i64)>) {
    let gaps: Vec<i64> = rows.windows(2).map(|w| (w[1].ts_ns - w[0].ts_ns).max(0)).collect();
    // The scale: the stall (small segment → held segment) is drawn REF_PX tall; without one,
    // the longest gap under a second.
    let stall = rows.iter().position(|r| r.mark == Some(Mark::SmallUnacked)).and_then(|a| {
        rows[a..].iter().position(|r| r.mark == Some(Mark::Held)).map(|b| rows[a + b].ts_ns - rows[a].ts_ns)
    });
    let reference = stall.unwrap_or_else(|| gaps.iter().copied().filter(|&g| g < 1_000_000_000).max().unwrap_or(0));
    let px_per_ns = REF_PX / reference.max(1_000_000) as f64;
    let mut ys = Vec::with_capacity(rows.len());
    let mut breaks = Vec::new();
    let mut y = TOP + 20.0;
    for (i, _) in rows.iter().enumerate() {
        if i > 0 {
            let g = gaps[i - 1];
            let scaled = g as f64 * px_per_ns;
            // A row with a TLS line under its arrow needs room for it.
            let min = if rows[i - 1].tls.is_some() { MIN_STEP + TLS_LINE } else { MIN_STEP };
            if scaled > BREAK_OVER_PX {
                breaks.push((i - 1, g));
                y += BREAK_PX + min;
            } else {
                y += scaled.max(min);
            }
        }
        ys.push(y);
    }
    (ys, breaks)
}

fn mark_class(m: Option<Mark>) -> &'static str {
    match m {
        Some(Mark::SmallUnacked) => "seg small",
        Some(Mark::LateAck) => "seg late",
        Some(Mark::Held) => "seg held",
        None => "seg",
    }
}

fn note(m: Option<Mark>) -> &'static str {
    match m {
        Some(Mark::SmallUnacked) => "small segment, not yet ACKed",
        Some(Mark::LateAck) => "delayed ACK",
        Some(Mark::Held) => "held by Nagle until the ACK",
        None => "",
    }
}

/// The ladder as an `<svg>` element.
pub fn svg(l: &Ladder) -> Markup {
    let (ys, breaks) = layout(&l.rows);
    let height = ys.last().map_or(TOP + 40.0, |y| y + SLANT + 40.0);
    // The stall bracket: from the small unacknowledged segment to the held one.
    let small = l.rows.iter().position(|r| r.mark == Some(Mark::SmallUnacked));
    let held = small.and_then(|a| l.rows[a..].iter().position(|r| r.mark == Some(Mark::Held)).map(|b| a + b));
    html! {
        svg class="ladder" xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img" aria-label=(l.title) {
            text class="end" x=(CLIENT_X) y="22" text-anchor="middle" { (l.client) }
            text class="role" x=(CLIENT_X) y="40" text-anchor="middle" { "client" }
            text class="end" x=(SERVER_X) y="22" text-anchor="middle" { (l.server) }
            text class="role" x=(SERVER_X) y="40" text-anchor="middle" { "server" }
            text class="axis" x="8" y="40" { "frame   time" }
            line class="life" x1=(CLIENT_X) y1=(TOP) x2=(CLIENT_X) y2=(height - 16.0) {}
            line class="life" x1=(SERVER_X) y1=(TOP) x2=(SERVER_X) y2=(height - 16.0) {}
            @for (i, gap) in &breaks {
                @let y = ys[*i] + SLANT + (BREAK_PX + MIN_STEP - SLANT) / 2.0;
                g class="break" {
                    rect x="4" y=(y - 10.0) width=(WIDTH - 8.0) height="20" {}
                    path d=(format!("M{} {} l8 -6 l8 12 l8 -6", CLIENT_X - 12.0, y)) {}
                    path d=(format!("M{} {} l8 -6 l8 12 l8 -6", SERVER_X - 12.0, y)) {}
                    text x=((CLIENT_X + SERVER_X) / 2.0) y=(y + 4.0) text-anchor="middle" {
                        "… " (dur(*gap)) " with nothing sent (not to scale) …"
                    }
                }
            }
            @if let (Some(a), Some(b)) = (small, held) {
                @let (y1, y2) = (ys[a], ys[b]);
                @let x = SERVER_X + 28.0;
                g class="stall" {
                    path d=(format!("M{} {y1} h8 V{y2} h-8", x - 8.0)) {}
                    text x=(x + 8.0) y=((y1 + y2) / 2.0 - 6.0) { "Nagle waits" }
                    text class="lost" x=(x + 8.0) y=((y1 + y2) / 2.0 + 12.0) {
                        (dur(l.rows[b].ts_ns - l.rows[a].ts_ns)) " lost"
                    }
                }
            }
            @for (r, y) in l.rows.iter().zip(&ys) {
                @let (x1, x2) = if r.from == Side::Client { (CLIENT_X, SERVER_X) } else { (SERVER_X, CLIENT_X) };
                @let dir = if r.from == Side::Client { 1.0 } else { -1.0 };
                g class=(mark_class(r.mark)) data-frame=(r.frame) {
                    text class="axis" x="8" y=(y + 4.0) { (r.frame) }
                    text class="axis" x="70" y=(y + 4.0) { (format!("{:.3} ms", r.t_ms)) }
                    line x1=(x1) y1=(y) x2=(x2) y2=(y + SLANT) {}
                    path d=(format!("M{} {} l{} -4 l0 8 z", x2, y + SLANT, -9.0 * dir)) {}
                    text x=((x1 + x2) / 2.0) y=(y - 2.0) text-anchor="middle" { (label(r)) }
                    @if let Some(t) = &r.tls {
                        text class="tls" x=((x1 + x2) / 2.0) y=(y + SLANT + 11.0) text-anchor="middle" { (t.label()) }
                    }
                    @if r.mark.is_some() {
                        text class="note" x=(if r.from == Side::Client { CLIENT_X - 8.0 } else { SERVER_X + 8.0 })
                            y=(y + 16.0) text-anchor=(if r.from == Side::Client { "end" } else { "start" }) {
                            (note(r.mark))
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RowKind;

    fn row(frame: u64, ms: f64, from: Side, kind: RowKind, mark: Option<Mark>) -> Row {
        Row {
            frame,
            ts_ns: (ms * 1e6) as i64,
            t_ms: ms,
            from,
            kind,
            flags: if kind == RowKind::Data { 0x18 } else { 0x10 },
            seq: 1,
            len: if kind == RowKind::Data { 100 } else { 0 },
            ack: Some(1),
            window: 100,
            mark,
            tls: None,
        }
    }

    #[test]
    fn the_stall_is_drawn_to_scale_and_a_long_idle_gap_is_cut() {
        let rows = vec![
            row(1, 0.0, Side::Client, RowKind::Data, None),
            row(2, 0.05, Side::Server, RowKind::Data, Some(Mark::SmallUnacked)),
            row(3, 40.05, Side::Client, RowKind::Ack, Some(Mark::LateAck)),
            row(4, 40.07, Side::Server, RowKind::Data, Some(Mark::Held)),
            row(5, 5040.0, Side::Client, RowKind::Data, None),
        ];
        let (ys, breaks) = layout(&rows);
        // 40 ms is the reference: ~REF_PX tall; 20 µs steps get the minimum.
        assert!((ys[2] - ys[1] - REF_PX).abs() < 1.0, "{ys:?}");
        assert_eq!(ys[3] - ys[2], MIN_STEP);
        assert_eq!(breaks, vec![(3, 4_999_930_000)]);
        assert_eq!(ys[4] - ys[3], BREAK_PX + MIN_STEP);
        let l = Ladder {
            connection: "1".into(),
            title: "t".into(),
            client: "c".into(),
            server: "s".into(),
            rows,
            truncated: false,
            times: None,
        };
        let s = svg(&l).into_string();
        assert!(s.contains(r#"<g class="stall">"#) && s.contains("40.0 ms lost"), "{s}");
        assert!(s.contains(r#"class="seg held""#) && s.contains("5.00 s with nothing sent"), "{s}");
        assert!(s.contains(">[P.] 100 B  seq 1<") && s.contains(">[.] ACK 1<"), "size and flags on each arrow: {s}");
    }
}
