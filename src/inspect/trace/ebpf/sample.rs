//! A trace's cost kept bounded on a busy server. Every traced call costs the
//! process CPU; on sockets with TCP_NODELAY (and no cork) Nagle holds nothing,
//! so once their calls come faster than a trace needs, only one such socket
//! in a power of two is traced for the rest of the window. Sockets with
//! Nagle on, and corked ones, are always all traced: the stall lives there.

use super::super::Known;
use std::time::Duration;

/// How long the window runs with every socket traced before the rate is judged.
pub(super) const LOOK_AFTER: Duration = Duration::from_millis(250);
/// Calls a second on TCP_NODELAY sockets that a trace keeps: at the
/// 0.15–0.5 µs a traced call costs, under 1 % of a core.
pub(super) const KEEP_PER_S: f64 = 20_000.0;
/// The sparsest sample.
const MAX_ONE_IN: u32 = 256;
/// Set (to calls a second) in the environment, replaces [`KEEP_PER_S`]: for tests.
const KEEP_ENV: &str = "TCPDOCTOR_TRACE_KEEP_PER_S";

/// What sampling did during a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sampled {
    /// One TCP_NODELAY socket in this many was traced from `from_s` on.
    pub one_in: u32,
    /// Seconds into the window.
    pub from_s: f64,
    /// Calls a second on TCP_NODELAY sockets before.
    pub rate: f64,
    /// The most a trace keeps.
    pub keep: f64,
}

/// Calls a second a trace keeps on TCP_NODELAY sockets.
pub(super) fn keep_per_s() -> f64 {
    std::env::var(KEEP_ENV).ok().and_then(|v| v.parse::<f64>().ok()).filter(|v| *v > 0.0).unwrap_or(KEEP_PER_S)
}

/// One in how many TCP_NODELAY sockets to trace when their calls come at
/// `rate` a second and a trace keeps `keep`: 1 (all) up to `keep`, then
/// the power of two that brings the rate under it (up to [`MAX_ONE_IN`]).
pub(super) fn one_in(rate: f64, keep: f64) -> u32 {
    if rate.is_nan() || rate <= keep {
        return 1;
    }
    let want = (rate / keep).ceil().min(f64::from(MAX_ONE_IN)) as u32;
    want.next_power_of_two().min(MAX_ONE_IN)
}

/// A socket's hash from its peer's port and its own (trace.bpf.c's `sock_hash`).
pub(super) fn sock_hash(peer_port: u16, local_port: u16) -> u32 {
    let mut h = u32::from(peer_port) << 16 | u32::from(local_port);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The value a traced socket's hash has under the mask of a one-in-`one_in`
/// sample: that of a connected socket known to have TCP_NODELAY (so the
/// sample keeps at least one), the one that shares it with the fewest other
/// known sockets (so it keeps few more); 0 when none is known.
pub(super) fn pick(known: &[Known], one_in: u32) -> u32 {
    let mask = one_in.saturating_sub(1);
    let port = |a: &str| a.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    let hashes: Vec<u32> = known
        .iter()
        .filter(|k| k.nodelay == Some(true) && k.cork != Some(true) && k.role != "listening")
        .filter_map(|k| Some(sock_hash(port(&k.peer)?, port(&k.local)?) & mask))
        .collect();
    // Counted per value (at most MAX_ONE_IN): a server may list many thousands.
    let mut sharing = vec![0u32; one_in.max(1) as usize];
    for &h in &hashes {
        sharing[h as usize] += 1;
    }
    hashes.iter().copied().min_by_key(|&h| sharing[h as usize]).unwrap_or(0)
}

/// What sampling did, in words (a note of the trace).
pub(super) fn note(s: &Sampled) -> String {
    format!(
        "calls on TCP_NODELAY sockets came at {:.0} a second in the first {:.2} s, more than the {:.0} a trace keeps: \
from then on one such socket in {} was traced, so their counts cover that sample (sockets with Nagle on, and corked \
ones, were all traced; `--sample all` traces every socket)",
        s.rate, s.from_s, s.keep, s.one_in
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_brings_the_rate_under_what_a_trace_keeps() {
        assert_eq!(one_in(0.0, 20_000.0), 1);
        assert_eq!(one_in(20_000.0, 20_000.0), 1);
        assert_eq!(one_in(20_001.0, 20_000.0), 2);
        assert_eq!(one_in(150_000.0, 20_000.0), 8);
        assert_eq!(one_in(160_001.0, 20_000.0), 16);
        assert_eq!(one_in(1e12, 20_000.0), MAX_ONE_IN);
        assert_eq!(one_in(f64::NAN, 20_000.0), 1);
        for rate in [25_000.0, 90_000.0, 1e6] {
            assert!(rate / f64::from(one_in(rate, 20_000.0)) <= 20_000.0, "{rate}");
        }
    }

    /// Sockets of one server (one local port, peer ports in a row) fall evenly into the sample.
    #[test]
    fn the_hash_spreads_sockets_of_one_server() {
        let hashes: Vec<u32> = (40_000..40_064).map(|p| sock_hash(p, 8080)).collect();
        for mask in [1u32, 3, 7] {
            let mut seen = vec![0; mask as usize + 1];
            for h in &hashes {
                seen[(h & mask) as usize] += 1;
            }
            assert!(seen.iter().all(|&n| n >= 64 / (mask as usize + 1) / 3), "mask {mask}: {seen:?}");
        }
        assert_ne!(sock_hash(1, 2), sock_hash(2, 1));
    }

    /// The socket kept is a connected one with TCP_NODELAY and no cork.
    #[test]
    fn the_socket_kept_is_a_known_tcp_nodelay_connection() {
        let k = |role, nodelay, cork, peer: &str| Known {
            pid: 1,
            fd: 3,
            inode: 9,
            role,
            local: "127.0.0.1:8080".into(),
            peer: peer.into(),
            nodelay,
            cork,
            mss: None,
        };
        assert_eq!(pick(&[], 8), 0);
        let listening = k("listening", Some(true), Some(false), "*:*");
        let nagle = k("accepted", Some(false), Some(false), "127.0.0.1:40001");
        let corked = k("accepted", Some(true), Some(true), "127.0.0.1:40002");
        let v6 = k("accepted", Some(true), None, "[::1]:40003");
        assert_eq!(pick(&[listening, nagle, corked, v6.clone()], 8), sock_hash(40003, 8080) & 7);
        // Of several, one whose value under the mask no other shares.
        let peers: Vec<u16> = (40_010..40_016).collect();
        let known: Vec<Known> =
            peers.iter().map(|p| k("accepted", Some(true), None, &format!("127.0.0.1:{p}"))).collect();
        let values: Vec<u32> = peers.iter().map(|&p| sock_hash(p, 8080) & 3).collect();
        let picked = pick(&known, 4);
        assert!(values.contains(&picked));
        let least = (0..4).filter(|v| values.contains(v)).map(|v| values.iter().filter(|&&o| o == v).count()).min();
        assert_eq!(Some(values.iter().filter(|&&o| o == picked).count()), least, "{values:?}");
        // Many thousands known: counted once each (and a sample of one in one never indexes past 0).
        let many: Vec<Known> =
            (1..20_000u16).map(|p| k("accepted", Some(true), None, &format!("10.0.0.1:{p}"))).collect();
        assert!(pick(&many, 256) < 256);
        assert_eq!(pick(&many, 1), 0);
    }
}
