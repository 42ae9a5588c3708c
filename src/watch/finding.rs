//! A live finding's line: who did what, for how long, and the fix.

use crate::detect::Observation;
use crate::record::watch::{Finding, Kind};
use crate::tcp::{ConnInfo, Side};
use crate::words::dur;

/// The finding's sentence: who did what, for how long.
pub(super) fn finding(info: &ConnInfo, kind: Kind, from: Side, ns: i64, o: Observation) -> Finding {
    let (client, server) = (info.client.to_string(), info.server.to_string());
    let who = |side: Side| match side {
        Side::Server => format!("the server {server}"),
        Side::Client => format!("the client {client}"),
    };
    let mut ack_delay_ms = None;
    let mut ack_timer = None;
    let summary = match o {
        Observation::Stall(s) if s.timer => {
            let what = if s.nagle == Side::Server { "a response" } else { "a request" };
            format!(
                "Nagle + loss: {} held part of {what} {} until its loss timer sent it (the ACK from the {} {} was lost); fix: TCP_NODELAY on {}",
                who(s.nagle),
                dur(ns),
                s.nagle.other().name(),
                info.endpoint(s.nagle.other()).ip,
                info.endpoint(s.nagle),
            )
        }
        Observation::Stall(s) => {
            let what = if s.nagle == Side::Server { "a response" } else { "a request" };
            let timer = crate::analyze::verdict::ack_timer(crate::record::ms(s.ack_delay_ns));
            let peer = info.endpoint(s.nagle.other()).ip;
            let text = format!(
                "Nagle + delayed ACK: {} held part of {what} {} until the {} {peer} sent a delayed ACK ({timer}); fix: TCP_NODELAY on {}",
                who(s.nagle),
                dur(ns),
                s.nagle.other().name(),
                info.endpoint(s.nagle),
            );
            ack_delay_ms = Some(crate::record::ms(s.ack_delay_ns));
            ack_timer = Some(timer);
            text
        }
        Observation::Retransmission { .. } => format!(
            "Retransmission timeout: {} re-sent bytes {} after the first copy (to the {} {}); loss, not Nagle",
            who(from),
            dur(ns),
            from.other().name(),
            info.endpoint(from.other()),
        ),
        Observation::SynRetry { retries, answered, .. } => {
            let what = if from == Side::Client { "SYN" } else { "SYN-ACK" };
            let end = if answered { "connecting took" } else { "never answered, given up after" };
            format!(
                "Slow connect: {} sent its {what} {} times ({client} → {server}); {end} {} (the 1 s SYN timer: a dropped SYN, full accept queue or firewall)",
                who(from),
                retries + 1,
                dur(ns)
            )
        }
        Observation::ZeroWindow { .. } => format!(
            "Zero window: {} closed its receive window for {}; the {} had to wait (the {} application is not reading fast enough)",
            who(from),
            dur(ns),
            from.other().name(),
            from.name(),
        ),
        Observation::Exchange(_) | Observation::ExpectWait { .. } | Observation::HeadUnread { .. } => String::new(),
    };
    Finding {
        ts_ns: 0,
        kind,
        server,
        client,
        role: from.name(),
        ms: crate::record::ms(ns),
        ack_delay_ms,
        ack_timer,
        summary,
        owner: None,
    }
}
