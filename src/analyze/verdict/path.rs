//! `network_latency`: exchanges whose time is mostly the path's round trip.

use super::{dur_ms, ms};
use crate::analyze::agg::ServerAgg;
use crate::record::NetworkLatencyFinding;
use crate::wire::Endpoint;

/// Round trip at or above which the path is worth naming, ms.
const PATH_RTT_MIN_MS: f64 = 1.0;

pub(super) fn network_finding(server: Endpoint, s: &ServerAgg) -> Option<NetworkLatencyFinding> {
    let rtt = s.rtt.spread();
    let total_p50 = s.total.quantile_ms(0.5);
    let path = s.sums.path.get();
    let share = path as f64 / s.sums.total().get().max(1) as f64;
    // Round trips take at least half of the exchanges' time, and no other part
    // (server, client, Nagle, loss) takes more of it than they do.
    let others = [s.sums.think.get(), s.sums.client.get(), s.sums.stall.get(), s.sums.loss.get()];
    if rtt.p50 < PATH_RTT_MIN_MS || share < 0.5 || others.iter().any(|&o| o > path) {
        return None;
    }
    let rounds = s.rounds as f64 / s.exchanges.max(1) as f64;
    let mut fix = vec![
        "The path, not TCP or the server: put client and server closer (same region or zone), or serve the clients from a replica or cache near them.".to_string(),
        "Fewer round trips per request: reuse connections (keep-alive, a pool) instead of a new handshake each time, and send independent requests in parallel or batched, not one after another.".to_string(),
    ];
    if rounds >= 1.5 {
        fix.push(format!(
            "Each exchange needs ~{rounds:.1} round trips: a response larger than the congestion window waits for ACKs; a larger initial window on the server (`ip route change ROUTE initcwnd 32 initrwnd 32`) or a smaller response saves them."
        ));
    }
    Some(NetworkLatencyFinding {
        summary: format!(
            "Network latency: exchanges with {server} take {} (p50), and the client ↔ server round trip of {} (p50) is {:.0} % of their time ({rounds:.1} round trips per exchange): TCP and the server are fine, the path costs the time.",
            dur_ms(total_p50),
            dur_ms(rtt.p50),
            share * 100.0,
        ),
        server: server.to_string(),
        exchanges: s.exchanges,
        rtt_ms: rtt,
        exchange_p50_ms: total_p50,
        rtt_share: (share * 1000.0).round() / 1000.0,
        round_trips_per_exchange: (rounds * 100.0).round() / 100.0,
        time_lost_ms: ms(path),
        example_frames: s.path_examples.frames(),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::{Exchange, Times};

    const MS: i64 = 1_000_000;

    fn server(n: usize, network: i64, think: i64, stall: i64, rounds: u32) -> ServerAgg {
        let mut s = ServerAgg::default();
        for k in 0..n as u64 {
            let transfer = network * i64::from(rounds - 1);
            let total = network + think + stall + transfer;
            let t = Times { network, think, transfer, stall, total, ..Times::default() };
            let x = Exchange { rounds, first_frame: 4 * k + 1, last_frame: 4 * k + 4, ..Exchange::default() };
            s.add_exchange(crate::analyze::ARRIVAL, &t, &x);
        }
        s.rtt.record_n(network, n as u32);
        s
    }

    fn ep() -> Endpoint {
        Endpoint { ip: [10, 0, 0, 1].into(), port: 8080 }
    }

    /// TCP_NODELAY across a 10 ms round trip, 0.2 ms of server time: the path is the time.
    #[test]
    fn a_path_that_is_most_of_the_exchange_is_said_out_loud() {
        let f = network_finding(ep(), &server(30, 10 * MS, MS / 5, 0, 1)).expect("a finding");
        assert!((9.9..10.1).contains(&f.rtt_ms.p50), "{f:?}");
        assert!(f.rtt_share > 0.95 && f.round_trips_per_exchange == 1.0, "{f:?}");
        assert!((f.time_lost_ms - 300.0).abs() < 1.0, "{f:?}");
        assert!(f.summary.contains("10.0 ms (p50)") && f.summary.contains("the path costs the time"), "{}", f.summary);
        assert_eq!(f.example_frames[..2], [1, 4]);
        assert!(!f.fix.iter().any(|x| x.contains("initcwnd")), "one round trip needs no larger window");
    }

    /// A response three windows long: three round trips, and the fix names the initial window.
    #[test]
    fn several_round_trips_per_exchange_name_the_window() {
        let f = network_finding(ep(), &server(10, 10 * MS, MS / 5, 0, 3)).expect("a finding");
        assert_eq!(f.round_trips_per_exchange, 3.0);
        assert!(f.fix.iter().any(|x| x.contains("initcwnd")), "{:?}", f.fix);
    }

    /// Loopback, Nagle across a real path, a slow server: the path is not the story.
    #[test]
    fn no_finding_when_the_path_is_short_or_something_else_costs_more() {
        assert!(network_finding(ep(), &server(30, MS / 50, MS / 5, 0, 1)).is_none(), "20 µs round trip");
        assert!(network_finding(ep(), &server(30, 10 * MS, MS / 5, 43 * MS, 1)).is_none(), "Nagle costs more");
        assert!(network_finding(ep(), &server(30, 10 * MS, 30 * MS, 0, 1)).is_none(), "the server costs more");
    }
}
