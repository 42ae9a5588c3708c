//! Robustness: tcpdoctor must never panic or hang on damaged, truncated or
//! hostile input, and must say exactly how much of a damaged file it read.
//!
//! * Prefixes of real captures (every byte near the start and around every
//!   record boundary, plus thousands of random cut points): `analyze` fails
//!   only when nothing could be read, otherwise reports the damage and exactly
//!   the packets of the complete records (counted here independently by walking
//!   the record headers), and never finds more stalls than the whole file.
//! * Byte flips, garbage after a valid header, and structured hostile headers
//!   (huge caplen, IPv4 IHL < 5, TCP data offset < 5 or past the packet, IPv6
//!   extension chains, pcapng timestamp resolution/offset extremes).
//! * Unit level: `capture::Packets` and `wire::decode` on arbitrary bytes.
//! * Every input above is analysed twice: in memory and streamed in small
//!   chunks through a small buffer (as standard input is); the two reports
//!   (or errors) must be identical.
//! * Regression tests for crashes found by `fuzz/` (bytes inline).
//!
//! Every analysis runs under a watchdog, so a hang fails the test instead of
//! stalling it.

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;
use tcpdoctor::analyze::{Options, analyze};
use tcpdoctor::capture::{Capture, LinkType, Packets};
use tcpdoctor::record::{Finding, Report};
use tcpdoctor::wire;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

fn opts() -> Options {
    Options { ladder_rows: 60, ..Default::default() }
}

/// Longest a single analysis of a small input may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(10);

/// A reader that hands out its bytes in chunks of 1 to 97 bytes, as a pipe might.
struct Chunks {
    bytes: Vec<u8>,
    at: usize,
    n: usize,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.n = (self.n * 31 + 7) % 97;
        let k = (self.n + 1).min(buf.len()).min(self.bytes.len() - self.at);
        buf[..k].copy_from_slice(&self.bytes[self.at..self.at + k]);
        self.at += k;
        Ok(k)
    }
}

/// The same bytes as a stream: in chunks, through a 64-byte buffer that must
/// grow and compact as records straddle refills.
fn streamed(name: &str, bytes: Vec<u8>) -> Capture {
    Capture::from_reader_buffered(name, Chunks { bytes, at: 0, n: 0 }, 64)
}

/// Runs `analyze` on `bytes` in a thread under a watchdog, both in memory and
/// streamed; the two must give the same report (or the same error). A panic
/// in the analysis is re-raised here (so the test fails with its message); a
/// hang fails the test. The report is also rendered (text and JSON) so the
/// output paths see the same hostile data.
fn analyze_guarded(name: &str, bytes: Vec<u8>) -> Result<Report, String> {
    let (tx, rx) = mpsc::channel();
    let name = name.to_string();
    let h = std::thread::spawn(move || {
        let run = |cap: Capture| {
            let r = analyze(&[cap], &opts()).map_err(|e| {
                assert_eq!(e.file, name, "the error names the input");
                e.to_string()
            });
            let json = match &r {
                Ok(rep) => {
                    let _ = tcpdoctor::report::render(rep);
                    Ok(serde_json::to_string(rep).expect("report serialises"))
                }
                Err(e) => Err(e.clone()),
            };
            (r, json)
        };
        let (r, json) = run(Capture::from_bytes(&name, bytes.clone()));
        let (_, stream_json) = run(streamed(&name, bytes));
        assert_eq!(json, stream_json, "{name}: the stream's report differs from the file's");
        let _ = tx.send(r);
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(r) => {
            let _ = h.join();
            r
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("analysis thread ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("analysis did not finish within {WATCHDOG:?} (hang)")
        }
    }
}

fn data_path(name: &str) -> String {
    format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn read_data(name: &str) -> Vec<u8> {
    std::fs::read(data_path(name)).unwrap_or_else(|e| panic!("tests/data/{name}: {e}"))
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

/// Record layout of a capture, found by walking its headers here (not with
/// tcpdoctor's reader): where the file header ends, and where every block or
/// record ends (with whether it carries a packet).
#[derive(Debug)]
struct Layout {
    /// End of the file header (pcap: 24; pcapng: end of the first SHB).
    header_end: usize,
    /// (end offset, carries a packet), in file order.
    blocks: Vec<(usize, bool)>,
}

impl Layout {
    fn of(b: &[u8]) -> Layout {
        match le32(b, 0) {
            0x0a0d_0d0a => Self::pcapng(b),
            m => Self::pcap(b, m),
        }
    }

    fn pcap(b: &[u8], magic: u32) -> Layout {
        let (big, hdr) = match magic {
            0xa1b2_c3d4 | 0xa1b2_3c4d => (false, 16),
            0xd4c3_b2a1 | 0x4d3c_b2a1 => (true, 16),
            0xa1b2_cd34 => (false, 24),
            m => panic!("not a pcap magic: {m:#x}"),
        };
        let mut blocks = Vec::new();
        let mut off = 24;
        while off + hdr <= b.len() {
            let caplen = if big { be32(b, off + 8) } else { le32(b, off + 8) } as usize;
            let end = off + hdr + caplen;
            if end > b.len() {
                break;
            }
            blocks.push((end, true));
            off = end;
        }
        Layout { header_end: 24, blocks }
    }

    fn pcapng(b: &[u8]) -> Layout {
        let big = be32(b, 8) == 0x1a2b_3c4d;
        let rd = |at: usize| if big { be32(b, at) } else { le32(b, at) };
        let mut blocks = Vec::new();
        let mut off = 0;
        while off + 12 <= b.len() {
            let (t, l) = (rd(off), rd(off + 4) as usize);
            if l < 12 || off + l > b.len() {
                break;
            }
            blocks.push((off + l, t == 6 || t == 3));
            off += l;
        }
        Layout { header_end: blocks[0].0, blocks }
    }

    /// Packets in complete records before `cut`.
    fn packets_before(&self, cut: usize) -> u64 {
        self.blocks.iter().filter(|(end, pkt)| *pkt && *end <= cut).count() as u64
    }

    /// Start of the record that `cut` falls inside, or `None` at a boundary.
    fn damaged_record(&self, cut: usize) -> Option<usize> {
        let mut start = self.header_end;
        for &(end, _) in &self.blocks {
            if end == cut || cut == self.header_end {
                return None;
            }
            if end > cut {
                return Some(start);
            }
            start = end;
        }
        (cut != start).then_some(start)
    }
}

/// A real capture, its independently computed layout, and what the whole file finds.
struct Fixture {
    name: &'static str,
    bytes: Vec<u8>,
    layout: Layout,
    /// Nagle stalls per endpoint, over the whole file.
    stalls: HashMap<String, u64>,
    total_stalls: u64,
    retransmissions: u64,
}

fn nagle_stalls(r: &Report) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for f in &r.findings {
        if let Finding::NagleDelayedAck(n) = f {
            *m.entry(n.nagle_side.endpoint.clone()).or_default() += n.stalls;
        }
    }
    m
}

fn retransmissions(r: &Report) -> u64 {
    r.findings
        .iter()
        .map(|f| match f {
            Finding::Retransmission(x) => x.retransmissions,
            _ => 0,
        })
        .sum()
}

impl Fixture {
    fn load(name: &'static str) -> Fixture {
        let bytes = read_data(name);
        let layout = Layout::of(&bytes);
        let full = analyze_guarded(name, bytes.clone()).expect("the whole file analyses");
        assert_eq!(full.inputs[0].packets, layout.packets_before(bytes.len()));
        assert!(full.inputs[0].damage.is_none(), "{name} is not damaged");
        let stalls = nagle_stalls(&full);
        let total_stalls = full.connections.iter().map(|c| c.stalls).sum();
        assert!(total_stalls > 0, "{name} has Nagle stalls to lose");
        Fixture { name, layout, stalls, total_stalls, retransmissions: retransmissions(&full), bytes }
    }

    /// The properties of one prefix of the file.
    fn check_prefix(&self, cut: usize) {
        let name = self.name;
        let r = analyze_guarded(name, self.bytes[..cut].to_vec());
        let complete = self.layout.packets_before(cut);
        let damaged = if cut < self.layout.header_end { Some(0) } else { self.layout.damaged_record(cut) };
        let rep = match r {
            Err(e) => {
                assert!(
                    complete == 0 && damaged.is_some(),
                    "{name} cut at {cut}: Err ({e}) although {complete} complete packets \
                     (damaged record: {damaged:?}) could be read"
                );
                assert!(e.starts_with(name), "{e}");
                assert!(e.contains("offset "), "error gives no offset: {e}");
                return;
            }
            Ok(rep) => rep,
        };
        assert!(!(complete == 0 && cut < self.layout.header_end), "{name} cut at {cut} (inside the file header): Ok");
        let input = &rep.inputs[0];
        assert_eq!(input.packets, complete, "{name} cut at {cut}: packets read vs complete records");
        match damaged {
            Some(at) => {
                let d = input
                    .damage
                    .as_deref()
                    .unwrap_or_else(|| panic!("{name} cut at {cut} (inside the record at {at}): no damage reported"));
                assert!(
                    d.starts_with(&format!("offset {at}:")),
                    "{name} cut at {cut}: damage should be at offset {at}, got {d:?}"
                );
                assert!(
                    rep.warnings.iter().any(|w| w.starts_with(name) && w.contains(d)),
                    "{name} cut at {cut}: damage not in warnings {:?}",
                    rep.warnings
                );
            }
            None => {
                assert!(input.damage.is_none(), "{name} cut at {cut} (a record boundary): damage {:?}", input.damage)
            }
        }
        // Findings on a prefix never claim more than the whole file.
        for (ep, n) in nagle_stalls(&rep) {
            let full = self.stalls.get(&ep).copied().unwrap_or(0);
            assert!(n <= full, "{name} cut at {cut}: {n} stalls for {ep}, whole file has {full}");
        }
        let stalls: u64 = rep.connections.iter().map(|c| c.stalls).sum();
        assert!(stalls <= self.total_stalls, "{name} cut at {cut}");
        assert!(retransmissions(&rep) <= self.retransmissions, "{name} cut at {cut}");
    }

    /// Every offset in the first 200 bytes and within 3 bytes of every record boundary.
    fn interesting_cuts(&self) -> Vec<usize> {
        let len = self.bytes.len();
        let mut cuts: Vec<usize> = (0..=200.min(len)).collect();
        for &(end, _) in &self.layout.blocks {
            cuts.extend(end.saturating_sub(3)..=(end + 3).min(len));
        }
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }
}

fn wwr_nagle() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| Fixture::load("wwr_nagle.pcap"))
}

fn nagle_ns() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| Fixture::load("nagle_ns.pcapng"))
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Do not write proptest-regressions/ files into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Capture and frame builders
// ---------------------------------------------------------------------------

fn pcap_header(link: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&262_144u32.to_le_bytes());
    h.extend_from_slice(&link.to_le_bytes());
    h
}

fn pcap_record(out: &mut Vec<u8>, ts_sec: u32, ts_usec: u32, caplen: u32, orig: u32, data: &[u8]) {
    for v in [ts_sec, ts_usec, caplen, orig] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(data);
}

fn pcapng_block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let mut body = body.to_vec();
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
    let len = (body.len() + 12) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&body);
    out.extend_from_slice(&len.to_le_bytes());
}

fn pcapng_shb(out: &mut Vec<u8>) {
    let mut b = Vec::new();
    b.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(-1i64).to_le_bytes());
    pcapng_block(out, 0x0a0d_0d0a, &b);
}

fn pcapng_idb(out: &mut Vec<u8>, link: u16, tsresol: Option<u8>, tsoffset: Option<i64>) {
    let mut b = Vec::new();
    b.extend_from_slice(&link.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&262_144u32.to_le_bytes());
    if let Some(r) = tsresol {
        b.extend_from_slice(&9u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&[r, 0, 0, 0]);
    }
    if let Some(o) = tsoffset {
        b.extend_from_slice(&14u16.to_le_bytes());
        b.extend_from_slice(&8u16.to_le_bytes());
        b.extend_from_slice(&o.to_le_bytes());
    }
    if tsresol.is_some() || tsoffset.is_some() {
        b.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
    }
    pcapng_block(out, 1, &b);
}

fn pcapng_epb(out: &mut Vec<u8>, if_id: u32, ts: u64, orig: u32, data: &[u8]) {
    let mut b = Vec::new();
    b.extend_from_slice(&if_id.to_le_bytes());
    b.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
    b.extend_from_slice(&(ts as u32).to_le_bytes());
    b.extend_from_slice(&(data.len() as u32).to_le_bytes());
    b.extend_from_slice(&orig.to_le_bytes());
    b.extend_from_slice(data);
    pcapng_block(out, 6, &b);
}

/// Link types the reader supports, plus one it does not.
const LINKS: [u32; 11] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147];

/// The link-layer header of `link` in front of an IPv4 or IPv6 packet.
fn link_header(link: u32, v6: bool, vlan_tags: u8) -> Vec<u8> {
    let et: [u8; 2] = if v6 { [0x86, 0xdd] } else { [0x08, 0x00] };
    match link {
        0 => vec![if v6 { 30 } else { 2 }, 0, 0, 0],
        108 => vec![0, 0, 0, if v6 { 24 } else { 2 }],
        1 => {
            let mut h = vec![0u8; 12];
            for _ in 0..vlan_tags {
                h.extend_from_slice(&[0x81, 0x00, 0, 7]);
            }
            h.extend_from_slice(&et);
            h
        }
        113 => {
            let mut h = vec![0u8; 14];
            h.extend_from_slice(&et);
            h
        }
        276 => {
            let mut h = et.to_vec();
            h.resize(20, 0);
            h
        }
        147 => vec![0xde, 0xad],
        _ => Vec::new(),
    }
}

/// One hostile-or-not TCP/IP frame, described field by field.
#[derive(Debug, Clone)]
struct FrameSpec {
    v6: bool,
    vlan_tags: u8,
    reverse: bool,
    /// IPv4 header length nibble (0..=15; < 5 is invalid).
    ihl: u8,
    /// IPv4 total length / IPv6 payload length: `None` = correct value.
    ip_len: Option<u16>,
    frag: u16,
    proto: u8,
    /// IPv6 extension headers: (header type, length byte, fragment field).
    ext: Vec<(u8, u8, u16)>,
    /// TCP data offset nibble (0..=15; < 5 invalid, may point past the packet).
    tcp_off: u8,
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    options: Vec<u8>,
    payload: usize,
    /// Captured bytes kept (snap length), `None` = all.
    snap: Option<usize>,
    /// Added to the frame length to make `orig_len`.
    orig_extra: u32,
}

impl FrameSpec {
    fn bytes(&self, link: u32) -> Vec<u8> {
        let mut tcp = Vec::new();
        let (sp, dp): (u16, u16) = if self.reverse { (80, 40000) } else { (40000, 80) };
        tcp.extend_from_slice(&sp.to_be_bytes());
        tcp.extend_from_slice(&dp.to_be_bytes());
        tcp.extend_from_slice(&self.seq.to_be_bytes());
        tcp.extend_from_slice(&self.ack.to_be_bytes());
        tcp.push(self.tcp_off << 4);
        tcp.push(self.flags);
        tcp.extend_from_slice(&self.window.to_be_bytes());
        tcp.extend_from_slice(&[0, 0, 0, 0]);
        tcp.extend_from_slice(&self.options);
        tcp.extend(std::iter::repeat_n(b'x', self.payload));

        let (a, b) = if self.reverse { (2u8, 1u8) } else { (1, 2) };
        let mut ip = Vec::new();
        if self.v6 {
            let mut chain = Vec::new();
            let types: Vec<u8> = self.ext.iter().map(|e| e.0).collect();
            for (i, &(_, len, frag)) in self.ext.iter().enumerate() {
                let next = types.get(i + 1).copied().unwrap_or(self.proto);
                let size = match types[i] {
                    44 => 8,
                    51 => (usize::from(len) + 2) * 4,
                    _ => (usize::from(len) + 1) * 8,
                };
                let mut h = vec![0u8; size.max(4)];
                h[0] = next;
                h[1] = len;
                h[2..4].copy_from_slice(&frag.to_be_bytes());
                chain.extend_from_slice(&h);
            }
            let plen = self.ip_len.unwrap_or((chain.len() + tcp.len()) as u16);
            ip.extend_from_slice(&[0x60, 0, 0, 0]);
            ip.extend_from_slice(&plen.to_be_bytes());
            ip.push(types.first().copied().unwrap_or(self.proto));
            ip.push(64);
            let mut s = [0u8; 16];
            s[15] = a;
            ip.extend_from_slice(&s);
            s[15] = b;
            ip.extend_from_slice(&s);
            ip.extend_from_slice(&chain);
        } else {
            let opts = usize::from(self.ihl).saturating_sub(5) * 4;
            let total = self.ip_len.unwrap_or((20 + opts + tcp.len()) as u16);
            ip.push(0x40 | self.ihl);
            ip.push(0);
            ip.extend_from_slice(&total.to_be_bytes());
            ip.extend_from_slice(&[0, 0]);
            ip.extend_from_slice(&self.frag.to_be_bytes());
            ip.extend_from_slice(&[64, self.proto, 0, 0]);
            ip.extend_from_slice(&[10, 0, 0, a, 10, 0, 0, b]);
            ip.extend(std::iter::repeat_n(1u8, opts));
        }
        ip.extend_from_slice(&tcp);
        let mut f = link_header(link, self.v6, self.vlan_tags);
        f.extend_from_slice(&ip);
        f
    }
}

fn frame_spec() -> impl Strategy<Value = FrameSpec> {
    let ext = prop::collection::vec(
        (
            prop::sample::select(vec![0u8, 43, 44, 51, 60, 135, 139, 140, 50, 59, 6, 17]),
            prop_oneof![Just(0u8), 0u8..4, any::<u8>()],
            prop_oneof![Just(0u16), any::<u16>()],
        ),
        0..20,
    );
    (
        (any::<bool>(), 0u8..3, any::<bool>(), prop_oneof![Just(5u8), 0u8..16]),
        (
            prop_oneof![3 => Just(None), 1 => any::<u16>().prop_map(Some)],
            prop_oneof![3 => Just(0u16), 1 => any::<u16>()],
            prop_oneof![4 => Just(6u8), 1 => any::<u8>()],
            prop_oneof![Just(Vec::new()), ext],
        ),
        (
            prop_oneof![3 => 5u8..9, 1 => 0u8..16],
            any::<u8>(),
            prop_oneof![1000u32..4000, any::<u32>()],
            prop_oneof![1000u32..4000, any::<u32>()],
            prop_oneof![Just(0u16), any::<u16>()],
            prop::collection::vec(any::<u8>(), 0..40),
        ),
        (
            prop_oneof![0usize..3, 0usize..1500],
            prop_oneof![3 => Just(None), 1 => (0usize..120).prop_map(Some)],
            prop_oneof![Just(0u32), any::<u32>()],
        ),
    )
        .prop_map(
            |(
                (v6, vlan_tags, reverse, ihl),
                (ip_len, frag, proto, ext),
                (tcp_off, flags, seq, ack, window, options),
                (payload, snap, orig_extra),
            )| FrameSpec {
                v6,
                vlan_tags,
                reverse,
                ihl,
                ip_len,
                frag,
                proto,
                ext,
                tcp_off,
                flags,
                seq,
                ack,
                window,
                options,
                payload,
                snap,
                orig_extra,
            },
        )
}

/// A pcap of `frames` on `link`, with hostile record headers mixed in.
fn hostile_pcap(link: u32, frames: &[(FrameSpec, u32, u32, bool)]) -> Vec<u8> {
    let mut out = pcap_header(link);
    for (f, ts_sec, ts_usec, huge_caplen) in frames {
        let full = f.bytes(link);
        let data = &full[..f.snap.unwrap_or(full.len()).min(full.len())];
        let orig = (full.len() as u32).saturating_add(f.orig_extra);
        let caplen = if *huge_caplen { u32::MAX - 3 } else { data.len() as u32 };
        pcap_record(&mut out, *ts_sec, *ts_usec, caplen, orig, data);
    }
    out
}

// ---------------------------------------------------------------------------
// (a) Prefixes of real captures
// ---------------------------------------------------------------------------

#[test]
fn layouts_match_the_reader_on_whole_files() {
    // The independent record walk agrees with tcpdoctor on the intact files.
    for f in [wwr_nagle(), nagle_ns()] {
        let mut p = Packets::new(&f.bytes).unwrap();
        let mut n = 0u64;
        while p.next().is_some() {
            n += 1;
        }
        assert_eq!(n, f.layout.packets_before(f.bytes.len()), "{}", f.name);
        assert!(n > 100, "{}: {n} packets", f.name);
    }
}

#[test]
fn pcap_prefixes_near_the_start_and_every_record_boundary() {
    let f = wwr_nagle();
    for cut in f.interesting_cuts() {
        f.check_prefix(cut);
    }
}

#[test]
fn pcapng_prefixes_near_the_start_and_every_block_boundary() {
    let f = nagle_ns();
    for cut in f.interesting_cuts() {
        f.check_prefix(cut);
    }
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn pcap_prefixes_at_random_offsets(x in any::<prop::sample::Index>()) {
        let f = wwr_nagle();
        f.check_prefix(x.index(f.bytes.len() + 1));
    }

    #[test]
    fn pcapng_prefixes_at_random_offsets(x in any::<prop::sample::Index>()) {
        let f = nagle_ns();
        f.check_prefix(x.index(f.bytes.len() + 1));
    }
}

// ---------------------------------------------------------------------------
// (b) Damaged and hostile input
// ---------------------------------------------------------------------------

const MUTATED: [&str; 6] = [
    "wwr_nagle.pcap",
    "nagle_ns.pcapng",
    "any_sll2.pcap",
    "wwr_nagle_ipv6.pcap",
    "wwr_nagle_be.pcap",
    "wwr_nagle_ns.pcap",
];

fn mutated_sources() -> &'static Vec<Vec<u8>> {
    static S: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    S.get_or_init(|| MUTATED.iter().map(|n| read_data(n)).collect())
}

proptest! {
    #![proptest_config(config(300))]

    /// Random byte flips anywhere in real captures (headers included).
    #[test]
    fn byte_flips_never_panic_or_hang(
        which in 0..MUTATED.len(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..24),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut b = mutated_sources()[which].clone();
        for (i, x) in &flips {
            let at = i.index(b.len());
            b[at] ^= x;
        }
        if let Some(c) = cut {
            b.truncate(c.index(b.len() + 1));
        }
        let _ = analyze_guarded(MUTATED[which], b);
    }

    /// Flips confined to the first records' headers, where damage is most varied.
    #[test]
    fn header_flips_never_panic_or_hang(
        which in 0..MUTATED.len(),
        flips in prop::collection::vec((0usize..400, any::<u8>()), 1..12),
    ) {
        let mut b = mutated_sources()[which].clone();
        for (at, x) in &flips {
            b[*at] = *x;
        }
        let _ = analyze_guarded(MUTATED[which], b);
    }

    /// A valid file header of any kind, then random bytes.
    #[test]
    fn garbage_after_a_valid_header_never_panics(
        magic in prop::sample::select(vec![0xa1b2_c3d4u32, 0xd4c3_b2a1, 0xa1b2_3c4d, 0x4d3c_b2a1, 0xa1b2_cd34]),
        link in prop::sample::select(LINKS.to_vec()),
        garbage in prop::collection::vec(any::<u8>(), 0..3000),
        pcapng in any::<bool>(),
    ) {
        let mut b = if pcapng {
            let mut b = Vec::new();
            pcapng_shb(&mut b);
            pcapng_idb(&mut b, link as u16, None, None);
            b
        } else {
            let mut h = pcap_header(link);
            h[..4].copy_from_slice(&magic.to_le_bytes());
            h
        };
        b.extend_from_slice(&garbage);
        let _ = analyze_guarded("garbage", b);
    }

    /// Well-formed record framing around hostile IPv4/IPv6/TCP headers, with the
    /// occasional absurd caplen. Frames share one 4-tuple so the tracker and the
    /// detectors see them as one connection.
    #[test]
    fn hostile_headers_never_panic_or_hang(
        link in prop::sample::select(LINKS.to_vec()),
        frames in prop::collection::vec(
            (frame_spec(), 0u32..4, 0u32..1_000_000, prop::bool::weighted(0.05)),
            1..24,
        ),
    ) {
        let b = hostile_pcap(link, &frames);
        if let Ok(r) = analyze_guarded("hostile", b) {
            let i = &r.inputs[0];
            prop_assert!(i.tcp_segments + i.other_packets + i.malformed_packets <= i.packets);
        }
    }

    /// pcapng interfaces with any timestamp resolution and offset, and any
    /// timestamps: the time arithmetic must not overflow.
    #[test]
    fn pcapng_timestamp_extremes_never_panic(
        tsresol in prop::option::of(prop_oneof![0u8..=19, 0x80u8..=0xbf, any::<u8>()]),
        tsoffset in prop::option::of(prop_oneof![any::<i64>(), -2_000_000_000i64..2_000_000_000]),
        frames in prop::collection::vec(
            (frame_spec(), prop_oneof![any::<u64>(), 0u64..10_000_000_000]),
            1..12,
        ),
    ) {
        let mut b = Vec::new();
        pcapng_shb(&mut b);
        pcapng_idb(&mut b, 1, tsresol, tsoffset);
        for (f, ts) in &frames {
            let data = f.bytes(1);
            pcapng_epb(&mut b, 0, *ts, data.len() as u32, &data);
        }
        let _ = analyze_guarded("timestamps.pcapng", b);
    }
}

// ---------------------------------------------------------------------------
// (c) Unit level: the packet walker and the wire decoder
// ---------------------------------------------------------------------------

type Walked = (Vec<(u64, i64, LinkType, Vec<u8>, u32)>, Option<String>, Option<(u64, u64)>);

fn walk_all(p: &mut Packets<'_>, len: usize) -> Walked {
    let mut out = Vec::new();
    while let Some(pkt) = p.next() {
        assert_eq!(pkt.frame, out.len() as u64 + 1);
        // Every record takes at least 12 bytes, so this bounds the walk.
        assert!(out.len() <= len / 12 + 1, "walk does not advance");
        let _ = wire::decode(pkt.frame, pkt.ts_ns, pkt.link, pkt.data, pkt.orig_len);
        out.push((pkt.frame, pkt.ts_ns, pkt.link, pkt.data.to_vec(), pkt.orig_len));
    }
    if let Some(d) = p.damage() {
        assert!(d.offset <= len as u64, "damage offset past the end: {d}");
    }
    (out, p.damage().map(|d| d.to_string()), p.undeclared())
}

/// Walks `bytes` in memory and streamed: the same packets, damage and skipped blocks, or the same error.
fn walk(bytes: &[u8]) {
    let whole = Packets::new(bytes).map(|mut p| walk_all(&mut p, bytes.len())).map_err(|e| e.to_string());
    let cap = streamed("walk", bytes.to_vec());
    let stream = cap.packets().map(|mut p| walk_all(&mut p, bytes.len())).map_err(|e| e.to_string());
    assert_eq!(whole, stream);
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn packets_over_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        walk(&bytes);
    }

    #[test]
    fn packets_over_bytes_behind_a_magic(
        magic in prop::sample::select(vec![
            [0xd4u8, 0xc3, 0xb2, 0xa1], [0xa1, 0xb2, 0xc3, 0xd4], [0x4d, 0x3c, 0xb2, 0xa1],
            [0xa1, 0xb2, 0x3c, 0x4d], [0x34, 0xcd, 0xb2, 0xa1], [0x0a, 0x0d, 0x0d, 0x0a],
        ]),
        rest in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut b = magic.to_vec();
        b.extend_from_slice(&rest);
        walk(&b);
    }

    #[test]
    fn decode_arbitrary_bytes_for_every_link_type(
        link in prop_oneof![prop::sample::select(LINKS.to_vec()), any::<u32>()],
        data in prop::collection::vec(any::<u8>(), 0..200),
        orig in prop_oneof![Just(0u32), 0u32..300, any::<u32>()],
    ) {
        if let Ok(Some(s)) = wire::decode(1, 0, LinkType(link), &data, orig) {
            prop_assert!(s.payload.len() <= data.len());
            prop_assert!(s.payload.len() as u64 <= u64::from(s.len));
        }
    }

    /// Arbitrary bytes behind a correct link header and IP version nibble, so
    /// the IP and TCP parsers (not just the link layer) see the garbage.
    #[test]
    fn decode_garbage_behind_a_valid_link_header(
        link in prop::sample::select(LINKS.to_vec()),
        v6 in any::<bool>(),
        vlan_tags in 0u8..3,
        mut ip in prop::collection::vec(any::<u8>(), 0..200),
        orig in prop_oneof![Just(0u32), 0u32..300, any::<u32>()],
    ) {
        if let Some(b) = ip.first_mut() {
            *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x40 };
        }
        let mut data = link_header(link, v6, vlan_tags);
        data.extend_from_slice(&ip);
        let _ = wire::decode(1, 0, LinkType(link), &data, orig);
    }

    #[test]
    fn decode_hostile_frames_for_every_link_type(
        link in prop::sample::select(LINKS.to_vec()),
        f in frame_spec(),
    ) {
        let full = f.bytes(link);
        let data = &full[..f.snap.unwrap_or(full.len()).min(full.len())];
        let orig = (full.len() as u32).saturating_add(f.orig_extra);
        if let Ok(Some(s)) = wire::decode(1, 0, LinkType(link), data, orig) {
            prop_assert!(s.payload.len() as u64 <= u64::from(s.len));
            if f.ext.is_empty() && f.snap.is_none() {
                prop_assert_eq!(s.flags.0, f.flags);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Hand-written edge cases
// ---------------------------------------------------------------------------

fn eth_tcp(f: &FrameSpec) -> Vec<u8> {
    f.bytes(1)
}

fn plain_frame() -> FrameSpec {
    FrameSpec {
        v6: false,
        vlan_tags: 0,
        reverse: false,
        ihl: 5,
        ip_len: None,
        frag: 0,
        proto: 6,
        ext: Vec::new(),
        tcp_off: 5,
        flags: 0x18,
        seq: 1000,
        ack: 2000,
        window: 512,
        options: Vec::new(),
        payload: 10,
        snap: None,
        orig_extra: 0,
    }
}

#[test]
fn invalid_header_lengths_are_malformed_not_fatal() {
    let mut specs = Vec::new();
    for ihl in [0u8, 1, 4] {
        specs.push(FrameSpec { ihl, ..plain_frame() });
    }
    for tcp_off in [0u8, 4, 15] {
        specs.push(FrameSpec { tcp_off, ..plain_frame() });
    }
    let mut b = pcap_header(1);
    for (i, s) in specs.iter().enumerate() {
        let d = eth_tcp(s);
        pcap_record(&mut b, 1, i as u32, d.len() as u32, d.len() as u32, &d);
    }
    let r = analyze_guarded("bad_lengths.pcap", b).expect("records are readable");
    assert_eq!(r.inputs[0].packets, 6);
    assert_eq!(r.inputs[0].malformed_packets, 6);
    assert!(r.warnings.iter().any(|w| w.contains("malformed")), "{:?}", r.warnings);
}

#[test]
fn ipv6_extension_chain_too_long_is_malformed() {
    let f = FrameSpec { v6: true, ext: vec![(60, 0, 0); 40], ..plain_frame() };
    let d = f.bytes(1);
    let r = wire::decode(1, 0, LinkType::ETHERNET, &d, d.len() as u32);
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn absurd_caplen_is_damage_at_its_record() {
    let good = eth_tcp(&plain_frame());
    let mut b = pcap_header(1);
    pcap_record(&mut b, 1, 0, good.len() as u32, good.len() as u32, &good);
    let at = b.len();
    pcap_record(&mut b, 1, 1, u32::MAX, 60, &good);
    let r = analyze_guarded("caplen.pcap", b).expect("one packet is readable");
    assert_eq!(r.inputs[0].packets, 1);
    let d = r.inputs[0].damage.as_deref().expect("damage reported");
    assert!(d.starts_with(&format!("offset {at}:")), "{d}");
}

/// Binary timestamp resolution (`if_tsresol` with the top bit set, e.g. 2^-20 s)
/// is valid pcapng; a capture using it must be read, not reported as damaged.
#[test]
fn pcapng_binary_timestamp_resolution_is_accepted() {
    let mut b = Vec::new();
    pcapng_shb(&mut b);
    pcapng_idb(&mut b, 1, Some(0x80 | 20), None);
    let d = eth_tcp(&plain_frame());
    pcapng_epb(&mut b, 0, 3 << 20, d.len() as u32, &d);
    let r = analyze_guarded("binres.pcapng", b).expect("readable");
    assert_eq!(r.inputs[0].packets, 1);
    assert!(
        r.inputs[0].damage.is_none(),
        "valid if_tsresol 0x94 (2^-20 s) reported as damage: {:?}",
        r.inputs[0].damage
    );
    assert_eq!(r.inputs[0].start_s, 3.0);
}

/// Timestamps before 1970 (negative `if_tsoffset`): the duration arithmetic
/// must not overflow, and the duration must not come out negative or huge.
#[test]
fn pcapng_negative_timestamps() {
    let mut b = Vec::new();
    pcapng_shb(&mut b);
    pcapng_idb(&mut b, 1, Some(9), Some(i64::MIN));
    let d = eth_tcp(&plain_frame());
    pcapng_epb(&mut b, 0, 0, d.len() as u32, &d);
    pcapng_epb(&mut b, 0, 1_000_000, d.len() as u32, &d);
    let r = analyze_guarded("negative_ts.pcapng", b).expect("readable");
    let dur = r.inputs[0].duration_ms;
    assert!((0.0..=1.0).contains(&dur), "duration {dur} ms for 1 ms of packets");
}

/// A classic pcap whose clock jumps back and forth by the whole u32 range of
/// ts_sec (a damaged record header or a stepped clock): four request/response
/// exchanges each with ~136 years of server "think time". The per-server sums
/// in `analyze.rs` (`sum_total`, `sum_think`, ...) must not overflow.
#[test]
fn pcap_clock_jumps_across_exchanges() {
    let mut b = pcap_header(1);
    // PSH without ACK: no RTT samples, so the jumps are not cancelled out by a
    // (negative) round-trip estimate.
    let mut f = FrameSpec { flags: 0x08, ..plain_frame() };
    let (mut cseq, mut sseq) = (1000u32, 5000u32);
    for i in 0..8u32 {
        let server = i % 2 == 1;
        f.reverse = server;
        (f.seq, f.ack) = if server { (sseq, cseq) } else { (cseq, sseq) };
        let d = eth_tcp(&f);
        let ts = if server { u32::MAX } else { 0 };
        pcap_record(&mut b, ts, 999_999, d.len() as u32, d.len() as u32, &d);
        if server { sseq += 10 } else { cseq += 10 }
    }
    analyze_guarded("clock_jumps.pcap", b).expect("readable");
}

/// The same data segment re-sent three times ~136 years after the first copy
/// (ts_sec 0, then u32::MAX): the time-lost sums for retransmissions
/// (`ConnState::lost_ns`, `CountAgg::lost_ns`) must not overflow.
#[test]
fn pcap_retransmissions_after_a_clock_jump() {
    let mut b = pcap_header(1);
    let f = plain_frame();
    let d = eth_tcp(&f);
    for ts in [0u32, u32::MAX, u32::MAX, u32::MAX] {
        pcap_record(&mut b, ts, 0, d.len() as u32, d.len() as u32, &d);
    }
    let r = analyze_guarded("resent.pcap", b).expect("readable");
    assert_eq!(r.inputs[0].tcp_segments, 4);
}

/// pcapng timestamps that wrap when converted to ns (µs units near 2^63/1000):
/// a zero window that closes at ~i64::MIN and a connection that ends at
/// ~i64::MAX. `ZeroWindow::finish` (`last_ts - c.ts`) and the input duration
/// must not overflow.
#[test]
fn pcapng_timestamps_that_wrap_to_negative() {
    let mut b = Vec::new();
    pcapng_shb(&mut b);
    pcapng_idb(&mut b, 1, None, None);
    let f = FrameSpec { window: 0, flags: 0x10, payload: 0, ..plain_frame() };
    let d = eth_tcp(&f);
    pcapng_epb(&mut b, 0, 9_223_372_036_854_776, d.len() as u32, &d);
    pcapng_epb(&mut b, 0, 9_223_372_036_854_775, d.len() as u32, &d);
    analyze_guarded("wrap.pcapng", b).expect("readable");
}

// ---------------------------------------------------------------------------
// Regression tests for crashes found by fuzz/ (cargo +nightly fuzz run packets)
// ---------------------------------------------------------------------------

/// fuzz/artifacts/packets/crash-04fddc57… minimised (472 bytes): a raw-IP
/// (LINKTYPE 101) µs pcap of one connection, 8 records cut to 40 bytes; the
/// first has ts_sec 0xfffffffe (year 2106), the rest 0x6b026d47 (year 2026),
/// so the clock runs ~80 years backwards; the resulting durations make
/// `a.sum_network += network` / `a.sum_total += total` in
/// `Collector::exchange` (src/analyze.rs) overflow.
#[test]
fn fuzz_crash_exchange_sums_overflow() {
    const INPUT: [u8; 472] = [
        0xd4, 0xc3, 0xb2, 0xa1, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x04, 0x00, 0x65, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff, 0x7f, 0x54, 0x00, 0x01, 0x28, 0x00, 0x00, 0x00,
        0x77, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x77, 0xc9, 0x29, 0x40, 0x00, 0x40, 0x06, 0x73, 0x55, 0x7f, 0x00,
        0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0xb0, 0x58, 0x6d, 0xc5, 0xa1, 0xf4, 0x38, 0xed, 0xe6, 0x0a, 0xe4, 0xac,
        0x80, 0x18, 0x00, 0x40, 0xfe, 0x6b, 0x00, 0x00, 0x47, 0x6d, 0x02, 0x6b, 0x60, 0x64, 0x09, 0x00, 0x28, 0x00,
        0x00, 0x00, 0x8c, 0x02, 0x00, 0x00, 0x45, 0x00, 0x02, 0x8c, 0x9e, 0x9b, 0x40, 0x00, 0x40, 0x06, 0x9b, 0xce,
        0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0x6d, 0xc5, 0xb0, 0x58, 0xe6, 0x0a, 0xe5, 0x16, 0xa1, 0xf4,
        0x39, 0x30, 0x80, 0x18, 0x00, 0x40, 0x00, 0x81, 0x00, 0x00, 0x47, 0x6d, 0x02, 0x6b, 0xb0, 0x64, 0x09, 0x00,
        0x28, 0x00, 0x00, 0x00, 0x77, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x77, 0xc9, 0x2c, 0x40, 0x00, 0x40, 0x06,
        0x73, 0x52, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0xb0, 0x58, 0x6d, 0xc5, 0xa1, 0xf4, 0x39, 0x30,
        0xe6, 0x0a, 0xe7, 0x6e, 0x80, 0x18, 0x00, 0x40, 0xfe, 0x6b, 0x00, 0x00, 0x47, 0x6d, 0x02, 0x6b, 0x5d, 0x0e,
        0x0a, 0x00, 0x28, 0x00, 0x00, 0x00, 0x8c, 0x02, 0x00, 0x00, 0x45, 0x00, 0x02, 0x8c, 0x9e, 0x9d, 0x40, 0x00,
        0x40, 0x06, 0x9b, 0xcc, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0x6d, 0xc5, 0xb0, 0x58, 0xe6, 0x0a,
        0xe7, 0xd8, 0xa1, 0xf4, 0x39, 0x73, 0x80, 0x18, 0x00, 0x40, 0x00, 0x81, 0x00, 0x00, 0x47, 0x6d, 0x02, 0x6b,
        0x38, 0x0f, 0x0a, 0x00, 0x28, 0x00, 0x00, 0x00, 0x77, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x77, 0xc9, 0x2f,
        0x40, 0x00, 0x40, 0x06, 0x73, 0x4f, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0xb0, 0x58, 0x6d, 0xc5,
        0xa1, 0xf4, 0x39, 0x73, 0xe6, 0x0a, 0xea, 0x30, 0x80, 0x18, 0x00, 0x40, 0xfe, 0x6b, 0x00, 0x00, 0x47, 0x6d,
        0x02, 0x6b, 0xd1, 0x0f, 0x0a, 0x00, 0x28, 0x00, 0x00, 0x00, 0x9e, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x9e,
        0x9e, 0x9e, 0x40, 0x00, 0x40, 0x06, 0x9d, 0xb9, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01, 0x6d, 0xc5,
        0xb0, 0x58, 0xe6, 0x0a, 0xea, 0x30, 0xa1, 0xf4, 0x39, 0xb6, 0x80, 0x18, 0x00, 0x40, 0xfe, 0x92, 0x00, 0x00,
        0x47, 0x6d, 0x02, 0x6b, 0xd2, 0xba, 0x0a, 0x00, 0x28, 0x00, 0x00, 0x00, 0x77, 0x00, 0x00, 0x00, 0x45, 0x00,
        0x00, 0x77, 0xc9, 0x32, 0x40, 0x00, 0x40, 0x06, 0x73, 0x4c, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01,
        0xb0, 0x58, 0x6d, 0xc5, 0xa1, 0xf4, 0x39, 0xb6, 0xe6, 0x0a, 0xec, 0xf2, 0x80, 0x18, 0x00, 0x40, 0xfe, 0x6b,
        0x00, 0x00, 0x47, 0x6d, 0x02, 0x6b, 0x61, 0xbb, 0x0a, 0x00, 0x28, 0x00, 0x00, 0x00, 0x9e, 0x00, 0x00, 0x00,
        0x45, 0x00, 0x00, 0x9e, 0x9e, 0xa0, 0x40, 0x00, 0x40, 0x06, 0x9d, 0xb7, 0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00,
        0x00, 0x01, 0x6d, 0xc5, 0xb0, 0x58, 0xe6, 0x0a, 0xec, 0xf2, 0xa1, 0xf4, 0x39, 0xf9, 0x80, 0x18, 0x00, 0x40,
        0xfe, 0x92, 0x00, 0x00,
    ];
    analyze_guarded("fuzz-crash-04fddc57.pcap", INPUT.to_vec()).expect("readable");
}

/// The clock steps back 5 s between a client segment and the server's ACK of
/// it: that is no round-trip sample, and no RTT in the report may be negative.
#[test]
fn clock_stepping_back_gives_no_negative_rtt() {
    let mut b = pcap_header(1);
    let client = FrameSpec { seq: 1000, ack: 5000, ..plain_frame() };
    let server_ack = FrameSpec { reverse: true, seq: 5000, ack: 1010, flags: 0x10, payload: 0, ..plain_frame() };
    let server_data = FrameSpec { reverse: true, seq: 5000, ack: 1010, ..plain_frame() };
    let client_ack = FrameSpec { seq: 1010, ack: 5010, flags: 0x10, payload: 0, ..plain_frame() };
    for (ts, f) in [(10, &client), (5, &server_ack), (20, &server_data), (21, &client_ack)] {
        let d = eth_tcp(f);
        pcap_record(&mut b, ts, 0, d.len() as u32, d.len() as u32, &d);
    }
    let r = analyze_guarded("clock_back.pcap", b).expect("readable");
    for c in &r.connections {
        assert!(c.rtt_ms.is_none_or(|x| x >= 0.0), "negative RTT {:?} ms for connection {}", c.rtt_ms, c.id);
    }
    for x in &r.breakdown {
        assert!(x.network_ms >= 0.0, "negative network time {} ms", x.network_ms);
    }
}
