//! The verdict when no request got a complete response: the port is closed,
//! the server accepts but never answers (or answers something else), or the
//! address cannot be reached. Each needs a different fix: telling someone
//! whose server is stuck to check that it runs and listens sends them the
//! wrong way.

use super::facts::{Facts, NoAnswer};
use crate::record::diagnose::Verdict;

/// The verdict when neither step 2 run got a complete response.
pub fn verdict(f: &Facts<'_>) -> Verdict {
    let (kind, why) = f.alone_error.unwrap_or((NoAnswer::Unreachable, "no request got a complete response"));
    let rtt = f.rtt.filter(|r| r.sent > 0);
    let all_rst = rtt.filter(|r| r.open == 0 && r.closed > 0);
    let mut evidence = Vec::new();
    if let Some(r) = all_rst {
        evidence.push(format!("step 1: port closed: {} of {} probes answered with RST", r.closed, r.sent));
    } else if let Some(r) = rtt.filter(|r| r.open > 0) {
        evidence.push(format!(
            "step 1: {} of {} probes answered with SYN-ACK: the kernel accepts connections on the port",
            r.open, r.sent
        ));
    }
    evidence.push(format!("step 2: {why}"));
    let server = &f.server;
    // A connect that failed where the probes met RSTs is a closed port too.
    let closed = kind == NoAnswer::Refused || (kind == NoAnswer::Unreachable && all_rst.is_some());
    let (cause, summary, fix): (&'static str, String, Vec<String>) = match kind {
        _ if closed => (
            "closed",
            format!("Nothing listens on {server}: the port is closed (connections are refused with a RST)."),
            vec![
                "Start the server, or use the port it listens on: `ss -ltnp` on its host lists the listening ports and their processes.".into(),
            ],
        ),
        NoAnswer::Refused | NoAnswer::Unreachable => (
            "unreachable",
            format!("{server} cannot be reached: {why}."),
            vec![
                "Check the path: `ip route get` to the address, firewalls on both hosts (`nft list ruleset`), then that the server listens on that address (`ss -ltnp` on its host).".into(),
            ],
        ),
        NoAnswer::Silent => (
            "no_response",
            format!(
                "{server} accepts connections, but the application behind it never answered: {why}. It is stuck, overloaded, or does not speak HTTP/1.x on this port."
            ),
            vec![
                "Look inside the server process: its logs; whether all its workers are busy or blocked (a thread dump: `jstack PID`, `py-spy dump --pid PID`, `gdb -p PID -batch -ex 'thread apply all bt'`); its accept queue (`ss -ltn`: Recv-Q at the Send-Q limit means it stopped accepting).".into(),
                "Check that this port speaks plain HTTP/1.x, not TLS or HTTP/2 only (`curl -sv --max-time 5 URL`).".into(),
            ],
        ),
        NoAnswer::Closed => (
            "no_response",
            format!("{server} accepts connections but closes or resets them before a complete response: {why}."),
            vec![
                "Read the server's logs: it drops the connection while handling the request (a crash, a limit, a proxy whose upstream is gone).".into(),
            ],
        ),
        NoAnswer::NotHttp => (
            "no_response",
            format!("{server} answers, but not in HTTP/1.x: {why}."),
            vec![
                "Point tcpdoctor at the port that speaks plain HTTP/1.x (it speaks http:// only, not TLS), or find what answers on this one (`ss -ltnp`).".into(),
            ],
        ),
    };
    Verdict { cause, summary, confidence: "high", evidence, fix, ..Verdict::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::diagnose::RttStep;

    fn probes(open: u32, closed: u32) -> RttStep {
        RttStep { method: "raw_syn", sent: 5, received: open + closed, open, closed, min_ms: None, avg_ms: None }
    }

    fn facts<'a>(rtt: &'a RttStep, kind: NoAnswer, why: &'a str) -> Facts<'a> {
        Facts { server: "127.0.0.1:9".into(), rtt: Some(rtt), alone_error: Some((kind, why)), ..Facts::default() }
    }

    #[test]
    fn refused_is_closed_and_silent_is_not_told_to_check_it_listens() {
        let rst = probes(0, 5);
        let v = verdict(&facts(&rst, NoAnswer::Refused, "connect to 127.0.0.1:9: Connection refused"));
        assert_eq!(v.cause, "closed");
        assert!(v.summary.contains("Nothing listens") && v.evidence[0].contains("5 of 5 probes answered with RST"));
        assert!(v.fix[0].contains("ss -ltnp"));

        let open = probes(5, 0);
        let v = verdict(&facts(&open, NoAnswer::Silent, "no complete response from 127.0.0.1:9 within 1000 ms"));
        assert_eq!(v.cause, "no_response");
        assert!(v.summary.contains("accepts connections") && v.summary.contains("never answered"), "{}", v.summary);
        assert!(v.evidence[0].contains("5 of 5 probes answered with SYN-ACK"));
        let all = format!("{} {:?}", v.summary, v.fix);
        assert!(!all.contains("runs and listens") && !all.contains("Start the server"), "{all}");

        // A connect that timed out where the probes met RSTs: closed as well.
        assert_eq!(verdict(&facts(&rst, NoAnswer::Unreachable, "timed out")).cause, "closed");
        assert_eq!(verdict(&facts(&probes(0, 0), NoAnswer::Unreachable, "timed out")).cause, "unreachable");
        assert_eq!(verdict(&facts(&open, NoAnswer::NotHttp, "not HTTP")).cause, "no_response");
    }
}
