//! Real captures, transformed: sequence numbers that wrap mid-connection, a
//! capture that starts after the handshake, reordered segments. The verdict
//! must not change (or must change only as documented).

mod common;

use common::{data, nagle};
use tcpdoctor::analyze::{Options, analyze};
use tcpdoctor::capture::Capture;
use tcpdoctor::record::Report;

/// A little-endian µs pcap of Ethernet frames, split into records.
struct Pcap {
    header: Vec<u8>,
    records: Vec<(Vec<u8>, Vec<u8>)>,
}

fn read(name: &str) -> Pcap {
    let b = std::fs::read(data(name)).unwrap();
    assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1], "little-endian µs pcap");
    assert_eq!(b[20], 1, "Ethernet");
    let mut records = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        records.push((b[at..at + 16].to_vec(), b[at + 16..at + 16 + caplen].to_vec()));
        at += 16 + caplen;
    }
    Pcap { header: b[..24].to_vec(), records }
}

impl Pcap {
    fn bytes(&self) -> Vec<u8> {
        let mut out = self.header.clone();
        for (h, d) in &self.records {
            out.extend_from_slice(h);
            out.extend_from_slice(d);
        }
        out
    }
    fn analyze(&self) -> Report {
        analyze(&[Capture::from_bytes("transformed", self.bytes())], &Options::default()).unwrap()
    }
}

/// (offset of the TCP header, source port) of an Ethernet/IPv4 frame.
fn tcp_at(frame: &[u8]) -> (usize, u16) {
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let t = 14 + ihl;
    (t, u16::from_be_bytes([frame[t], frame[t + 1]]))
}

fn add(frame: &mut [u8], at: usize, delta: u32) {
    let v = u32::from_be_bytes(frame[at..at + 4].try_into().unwrap()).wrapping_add(delta);
    frame[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[test]
fn sequence_numbers_wrapping_mid_connection_change_nothing() {
    let base = read("wwr_nagle.pcap");
    let before = base.analyze();
    let mut p = read("wwr_nagle.pcap");
    // Move each side's ISN to just below 2^32 so both wrap a few KB in.
    let (t, _) = tcp_at(&p.records[0].1);
    let isn_client = u32::from_be_bytes(p.records[0].1[t + 4..t + 8].try_into().unwrap());
    let (t, _) = tcp_at(&p.records[1].1);
    let isn_server = u32::from_be_bytes(p.records[1].1[t + 4..t + 8].try_into().unwrap());
    let dc = 0u32.wrapping_sub(isn_client).wrapping_sub(1000);
    let ds = 0u32.wrapping_sub(isn_server).wrapping_sub(5000);
    for (_, f) in &mut p.records {
        let (t, sport) = tcp_at(f);
        let (dseq, dack) = if sport == 28101 { (ds, dc) } else { (dc, ds) };
        add(f, t + 4, dseq);
        add(f, t + 8, dack);
    }
    let after = p.analyze();
    let (a, b) = (nagle(&before)[0], nagle(&after)[0]);
    assert_eq!((a.stalls, &a.example_frames), (b.stalls, &b.example_frames));
    assert_eq!(before.breakdown[0].exchanges, after.breakdown[0].exchanges);
    assert_eq!(after.connections[0].retransmissions, 0, "a wrap is not a retransmission");
}

/// Cuts every frame after its TCP header, as `tcpdump -s` with a small snap length does.
fn strip_payload(p: &mut Pcap) {
    for (h, f) in &mut p.records {
        let (t, _) = tcp_at(f);
        f.truncate(t + usize::from(f[t + 12] >> 4) * 4);
        h[8..12].copy_from_slice(&(f.len() as u32).to_le_bytes());
    }
}

/// Moves port `from` to `to` in every frame (checksums are not checked).
fn move_port(p: &mut Pcap, from: u16, to: u16) {
    for (_, f) in &mut p.records {
        let (t, _) = tcp_at(f);
        for at in [t, t + 2] {
            if f[at..at + 2] == from.to_be_bytes() {
                f[at..at + 2].copy_from_slice(&to.to_be_bytes());
            }
        }
    }
}

fn server_nagle_found(r: &Report) {
    let n = nagle(r);
    assert_eq!(n.len(), 1, "{:#?}", r.findings);
    assert_eq!((n[0].nagle_side.endpoint.as_str(), n[0].nagle_side.role), ("127.0.0.1:28101", "server"));
    assert!(n[0].stalls >= 27);
}

#[test]
fn capture_started_after_the_handshake_takes_the_roles_from_the_request_line() {
    let mut p = read("wwr_nagle.pcap");
    p.records.drain(..3); // SYN, SYN-ACK, ACK
    let r = p.analyze();
    server_nagle_found(&r);
    assert_eq!(r.connections[0].roles_from, "content");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn without_payload_the_ephemeral_port_tells_the_roles_then_the_lower_port_guesses_and_says_so() {
    let mut p = read("wwr_nagle.pcap");
    p.records.drain(..3);
    strip_payload(&mut p);
    let r = p.analyze();
    server_nagle_found(&r);
    // The client's port, 45144, is in Linux's default ephemeral range; 28101 is not.
    assert_eq!(r.connections[0].roles_from, "ephemeral_port");
    // Nothing guessed; the one warning says no request line was captured.
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].contains("30 requests were cut by the capture's snap length"), "{:?}", r.warnings);
    // A client port outside it (and above the server's): only the lower port is left, a guess.
    move_port(&mut p, 45144, 30001);
    let r = p.analyze();
    server_nagle_found(&r);
    assert_eq!(r.connections[0].roles_from, "lower_port");
    assert!(r.warnings.iter().any(|w| w.contains("lower port")), "{:?}", r.warnings);
}

#[test]
fn a_mid_stream_capture_without_payload_takes_the_roles_from_the_shared_server_endpoint() {
    // Server port 61000, client ports 20000-30000, neither in an ephemeral
    // range here: only the endpoint the four connections share tells.
    let mut p = read("midstream_port61000.pcap");
    strip_payload(&mut p);
    let r = p.analyze();
    let n = nagle(&r);
    assert_eq!(n.len(), 1, "{:#?}", r.findings);
    assert_eq!((n[0].nagle_side.endpoint.as_str(), n[0].nagle_side.role), ("10.99.0.1:61000", "server"));
    assert_eq!((n[0].delayed_ack_side.host.as_str(), n[0].delayed_ack_side.role), ("10.99.0.2", "client"));
    assert!(n[0].stalls >= 86, "{}", n[0].stalls);
    for c in &r.connections {
        assert_eq!((c.server.as_str(), c.roles_from), ("10.99.0.1:61000", "shared_endpoint"), "{c:?}");
    }
    // The first connection's first data came before any other connection:
    // guessed wrong by port, corrected once the others showed the server.
    assert!(
        r.warnings.iter().any(|w| w.contains("swapped by later evidence (first: connection 1,")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn capture_started_mid_connection_on_the_client_side_still_finds_the_server() {
    // Keep only the second half: the first frame seen is mid-stream.
    let mut p = read("post_split_client.pcap");
    let half = p.records.len() / 2;
    p.records.drain(..half);
    let r = p.analyze();
    let n = nagle(&r);
    assert_eq!(n.len(), 1, "{:#?}", r.findings);
    assert_eq!(n[0].nagle_side.role, "client");
    assert_eq!(r.connections[0].server, "127.0.0.1:28108");
}

#[test]
fn swapped_data_segments_are_reordering_not_loss() {
    // Swap two consecutive server data frames' contents (times stay in order):
    // the later bytes arrive first, the earlier ones 3 ms or less after.
    let mut p = read("loss_netns.pcap");
    let is_data_from = |f: &[u8], port: u16| {
        let (t, sport) = tcp_at(f);
        let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let ihl = usize::from(f[14] & 0x0f) * 4;
        sport == port && total > ihl + usize::from(f[t + 12] >> 4) * 4
    };
    let i = (0..p.records.len() - 1)
        .find(|&i| is_data_from(&p.records[i].1, 28109) && is_data_from(&p.records[i + 1].1, 28109))
        .expect("two back-to-back data frames");
    let (a, b) = (p.records[i].1.clone(), p.records[i + 1].1.clone());
    p.records[i].1 = b;
    p.records[i + 1].1 = a;
    // Record headers (caplen) must follow their frames.
    let (ha, hb) = (p.records[i].0.clone(), p.records[i + 1].0.clone());
    p.records[i].0[8..16].copy_from_slice(&hb[8..16]);
    p.records[i + 1].0[8..16].copy_from_slice(&ha[8..16]);
    let before = common::run("loss_netns.pcap");
    let after = p.analyze();
    let count = |r: &Report| r.connections.iter().map(|c| c.retransmissions).sum::<u64>();
    assert_eq!(count(&before), count(&after), "reordering must not count as retransmission");
}

/// One server, two connections: the Nagle capture and the TCP_NODELAY one moved
/// onto the same port. Only one connection stalls, but the finding counts the
/// server's responses on both ("29 of 60", not "29 of 30").
#[test]
fn a_servers_exchanges_count_every_connection_not_only_the_stalled_ones() {
    let mut clean = read("wwr_nodelay.pcap");
    for (_, f) in &mut clean.records {
        let (t, _) = tcp_at(f);
        for at in [t, t + 2] {
            if f[at..at + 2] == 28102u16.to_be_bytes() {
                f[at..at + 2].copy_from_slice(&28101u16.to_be_bytes());
            }
        }
    }
    let caps =
        vec![Capture::from_bytes("nagle", read("wwr_nagle.pcap").bytes()), Capture::from_bytes("clean", clean.bytes())];
    let r = analyze(&caps, &Options::default()).unwrap();
    let n = nagle(&r);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].nagle_side.endpoint, "127.0.0.1:28101");
    assert_eq!((n[0].exchanges, n[0].connections), (60, 1), "{:?}", n[0]);
    assert!(n[0].summary.contains(&format!("{} of 60 responses", n[0].stalls)), "{}", n[0].summary);
}
