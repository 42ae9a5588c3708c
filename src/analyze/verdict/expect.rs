//! `expect_100_continue`: a client waiting for a `100 Continue` that never comes.

use super::{dur_ms, ms};
use crate::analyze::agg::CountAgg;
use crate::record::{ExpectFinding, HostRole};
use crate::wire::Endpoint;
use crate::words::{dur, plural};
use std::net::IpAddr;

pub(super) fn expect_finding(client: IpAddr, server: Endpoint, a: &CountAgg) -> ExpectFinding {
    let d = a.dist.spread();
    let cut = match a.inferred {
        0 => String::new(),
        n if n == a.events => " (the capture cut their heads before the header: their shape says so)".into(),
        n => format!(" ({n} with the head cut before the header: their shape says so)"),
    };
    ExpectFinding {
        summary: format!(
            "Expect: 100-continue: {}{cut} from {client} (client) to {server} sent their head, then waited {} (p50) for a 100 Continue the server never sent before sending the body; {} lost. The client's wait, not the server's think time and not TCP.",
            plural(a.events, "request"),
            dur_ms(d.p50),
            dur(a.lost_ns)
        ),
        client: HostRole { host: client.to_string(), role: "client" },
        server: server.to_string(),
        requests: a.events,
        header_cut: a.inferred,
        connections: a.connections,
        wait_ms: d,
        time_lost_ms: ms(a.lost_ns),
        example_frames: a.examples.frames(),
        fix: vec![
            format!(
                "Server ({server}): answer a request carrying `Expect: 100-continue` at once, with `100 Continue` or with its final status."
            ),
            format!(
                "Client ({client}): do not ask: send an empty `Expect:` header (curl: `-H 'Expect:'`), or wait less (curl: `--expect100-timeout 0.1`)."
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_client_host_the_wait_and_both_fixes() {
        let mut a = CountAgg::default();
        a.add_expect(crate::analyze::ARRIVAL, 1_001_000_000, [4, 9], true, true);
        a.add_expect(crate::analyze::ARRIVAL, 1_002_000_000, [14, 19], false, false);
        let f = expect_finding([10, 0, 0, 2].into(), Endpoint { ip: [10, 0, 0, 1].into(), port: 80 }, &a);
        assert_eq!((f.client.host.as_str(), f.client.role, f.server.as_str()), ("10.0.0.2", "client", "10.0.0.1:80"));
        assert_eq!((f.requests, f.connections, f.example_frames.as_slice()), (2, 1, &[4, 9, 14, 19][..]));
        assert!((1000.0..1004.0).contains(&f.wait_ms.p50) && (f.time_lost_ms - 2003.0).abs() < 0.01, "{f:?}");
        assert_eq!(f.header_cut, 1);
        assert!(
            f.summary.starts_with("Expect: 100-continue: 2 requests (1 with the head cut before the header: their shape says so) from 10.0.0.2 (client) to 10.0.0.1:80"),
            "{}",
            f.summary
        );
        assert!(f.fix[0].contains("100 Continue") && f.fix[1].contains("-H 'Expect:'"), "{:?}", f.fix);
    }
}
