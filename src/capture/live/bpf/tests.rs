use super::interp::run;
use super::*;
use crate::capture::{Capture, LinkType, Network, network_layer};
use crate::wire;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::OnceLock;

/// A frame as the filter sees it, and as the analysis decodes it.
struct Frame {
    framing: Framing,
    /// What the kernel filter runs on.
    bpf: Vec<u8>,
    protocol: u16,
    link: LinkType,
    data: Vec<u8>,
    name: String,
}

impl Frame {
    fn verdict(&self, prog: &[Insn]) -> bool {
        run(prog, &self.bpf, self.protocol) != 0
    }
}

/// Every frame of every bundled capture (Ethernet ones as they are, the
/// others as a SOCK_DGRAM socket would see them), plus hand-made non-TCP ones.
fn frames() -> &'static Vec<Frame> {
    static F: OnceLock<Vec<Frame>> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let mut out = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        names.sort();
        for p in names {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            if ext != "pcap" && ext != "pcapng" {
                continue;
            }
            let cap = Capture::open(&p).unwrap();
            let mut packets = cap.packets().unwrap();
            while let Some(pkt) = packets.next() {
                let name = format!("{} frame {}", p.display(), pkt.frame);
                out.push(as_seen(pkt.link, pkt.data, name));
            }
        }
        assert!(out.len() > 3000, "{} frames", out.len());
        for (i, f) in odd_frames().into_iter().enumerate() {
            out.push(as_seen(LinkType::ETHERNET, &f, format!("odd frame {i}")));
        }
        out
    })
}

fn as_seen(link: LinkType, data: &[u8], name: String) -> Frame {
    let (framing, bpf, protocol) = if link == LinkType::ETHERNET {
        (Framing::Ethernet, untag(data), 0)
    } else {
        match network_layer(link, data) {
            Network::Ipv4(p) => (Framing::Network, p.to_vec(), 0x0800),
            Network::Ipv6(p) => (Framing::Network, p.to_vec(), 0x86dd),
            _ => (Framing::Network, Vec::new(), 0),
        }
    };
    Frame { framing, bpf, protocol, link, data: data.to_vec(), name }
}

/// What a packet socket sees of a tagged frame: the kernel keeps the
/// (outer) tag in the socket buffer's metadata, not in the data.
fn untag(frame: &[u8]) -> Vec<u8> {
    let tagged = frame.len() >= 18 && matches!(u16::from_be_bytes([frame[12], frame[13]]), 0x8100 | 0x88a8);
    if tagged { [&frame[..12], &frame[16..]].concat() } else { frame.to_vec() }
}

fn eth(ethertype: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(l3);
    f
}

/// IPv4 header (no options unless `ihl` > 5) + 20 bytes of transport header with ports 80 → 8080.
fn ipv4(proto: u8, ihl: u8, frag: u16) -> Vec<u8> {
    let mut p = vec![0x40 | ihl, 0, 0, 0, 0, 1, (frag >> 8) as u8, frag as u8, 64, proto, 0, 0];
    p.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    p.resize(usize::from(ihl) * 4, 1); // options: NOPs
    p.extend_from_slice(&[0, 80, 0x1f, 0x90]);
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 1, 0, 0, 0, 0, 0]);
    let total = p.len() as u16;
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p
}

fn ipv6(next: u8) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0, 0, 20, next, 64];
    p.extend_from_slice(&"fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    p.extend_from_slice(&"fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets());
    p.extend_from_slice(&[0, 80, 0x1f, 0x90, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 1, 0, 0, 0, 0, 0]);
    p
}

/// Frames the captures lack: not TCP, IPv4 options, VLAN-tagged, short.
fn odd_frames() -> Vec<Vec<u8>> {
    let mut tagged = eth(0x8100, &[0, 10]);
    tagged.extend_from_slice(&eth(0x0800, &ipv4(6, 6, 0))[12..]);
    vec![
        eth(0x0806, &[0, 1, 8, 0, 6, 4, 0, 1]),
        eth(0x0800, &ipv4(17, 5, 0)),
        eth(0x0800, &ipv4(1, 5, 0)),
        eth(0x0800, &ipv4(6, 7, 0x4000)),
        eth(0x86dd, &ipv6(17)),
        eth(0x86dd, &ipv6(6)),
        tagged,
        eth(0x0800, &ipv4(6, 5, 0)[..9]),
        vec![0; 6],
    ]
}

/// Decodes as `analyze` does: `Some(accepted)` by the filter, or `None`
/// when the comparison does not apply (damaged frames).
fn expected(f: &Frame, filter: Option<&Filter>) -> Option<bool> {
    match wire::decode(1, 0, f.link, &f.data, f.data.len() as u32) {
        Ok(Some(seg)) => Some(filter.is_none_or(|flt| flt.matches(&seg))),
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

/// Addresses and ports present in the captures, so random filters hit.
fn seen() -> &'static (Vec<IpAddr>, Vec<u16>) {
    static S: OnceLock<(Vec<IpAddr>, Vec<u16>)> = OnceLock::new();
    S.get_or_init(|| {
        let (mut ips, mut ports) = (BTreeSet::new(), BTreeSet::new());
        for f in frames() {
            if let Ok(Some(s)) = wire::decode(1, 0, f.link, &f.data, f.data.len() as u32) {
                ips.extend([s.src.ip, s.dst.ip]);
                ports.extend([s.src.port, s.dst.port]);
            }
        }
        (ips.into_iter().collect(), ports.into_iter().collect())
    })
}

fn addr() -> impl Strategy<Value = IpAddr> {
    let (ips, _) = seen();
    prop_oneof![
        3 => proptest::sample::select(ips.clone()),
        1 => any::<[u8; 4]>().prop_map(IpAddr::from),
        1 => any::<[u8; 16]>().prop_map(IpAddr::from),
    ]
}

fn port() -> impl Strategy<Value = u16> {
    let (_, ports) = seen();
    prop_oneof![3 => proptest::sample::select(ports.clone()), 1 => any::<u16>()]
}

/// One primitive of the grammar, as text.
fn primitive() -> impl Strategy<Value = String> {
    let dir = proptest::sample::select(vec!["", "src ", "dst ", "src or dst ", "src and dst "]);
    prop_oneof![
        (dir.clone(), addr()).prop_map(|(d, a)| format!("{d}host {a}")),
        (dir.clone(), addr(), any::<u8>()).prop_map(|(d, a, l)| {
            let len = u32::from(l) % if a.is_ipv4() { 33 } else { 129 };
            format!("{d}net {a}/{len}")
        }),
        (dir.clone(), port()).prop_map(|(d, p)| format!("{d}port {p}")),
        (dir, port(), port()).prop_map(|(d, a, b)| format!("{d}portrange {a}-{b}")),
        proptest::sample::select(vec!["tcp", "ip", "ip6", "udp", "icmp"]).prop_map(String::from),
        (port(), port()).prop_map(|(a, b)| format!("tcp port {a} or {b}")),
    ]
}

fn filter_text() -> impl Strategy<Value = String> {
    primitive().prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) and ({b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a}) || ({b})")),
            inner.clone().prop_map(|a| format!("not ({a})")),
            inner.prop_map(|a| format!("!({a})")),
        ]
    })
}

/// A packet socket that receives nothing (protocol 0, never bound), for
/// asking the kernel whether it accepts a program.
fn kernel_socket() -> Option<std::os::fd::OwnedFd> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "the kernel check needs root");
        eprintln!("SKIPPED: not root, the kernel's verdict on programs is not checked");
        return None;
    }
    Some(super::super::ring::packet_socket(false).expect("AF_PACKET socket"))
}

fn kernel_accepts(fd: &Option<std::os::fd::OwnedFd>, prog: &[Insn]) {
    if let Some(fd) = fd {
        use std::os::fd::AsFd;
        super::super::ring::attach_filter(fd.as_fd(), prog).unwrap_or_else(|e| panic!("kernel refused: {e}"));
    }
}

fn check(filter: Option<&Filter>, text: &str, kernel: &Option<std::os::fd::OwnedFd>) -> usize {
    let mut compared = 0;
    for framing in [Framing::Ethernet, Framing::Network] {
        let prog = compile(filter, framing, 65535).unwrap();
        kernel_accepts(kernel, &prog);
        for f in frames().iter().filter(|f| f.framing == framing) {
            let Some(want) = expected(f, filter) else { continue };
            assert_eq!(f.verdict(&prog), want, "filter {text:?} on {}", f.name);
            compared += 1;
        }
    }
    compared
}

#[test]
fn tcp_only_without_a_filter() {
    let kernel = kernel_socket();
    let n = check(None, "(none)", &kernel);
    assert!(n > 3000, "{n} frames compared");
    // The odd frames: only the TCP ones pass (the short one is rejected).
    let prog = compile(None, Framing::Ethernet, 96).unwrap();
    let odd: Vec<bool> = frames().iter().filter(|f| f.name.starts_with("odd")).map(|f| f.verdict(&prog)).collect();
    assert_eq!(odd, [false, false, false, true, false, true, true, false, false]);
    assert_eq!(run(&prog, &odd_frames()[3], 0), 96, "accepted frames are cut to the snap length");
    assert_eq!(run(&prog, &odd_frames()[6], 0), 0, "a tag still in the data fails, as in tcpdump without `vlan`");
}

#[test]
fn fragments_have_no_ports_as_in_tcpdump() {
    let first = eth(0x0800, &ipv4(6, 5, 0x2000)); // more fragments, offset 0
    let later = eth(0x0800, &ipv4(6, 5, 0x0010)); // offset 128 bytes
    let v = |f: &str, pkt: &[u8]| {
        let prog = compile(Some(&Filter::parse(f).unwrap()), Framing::Ethernet, 100).unwrap();
        run(&prog, pkt, 0) != 0
    };
    assert!(v("tcp", &first) && v("tcp", &later));
    assert!(v("port 80", &first) && !v("port 80", &later));
    assert!(v("host 10.0.0.2", &later));
    assert!(v("not port 80", &later), "a port test is false on a later fragment, so its negation passes");
    assert!(!v("dst portrange 1-100", &first) && v("dst portrange 8000-9000", &first));
}

#[test]
fn long_jumps_go_through_ja() {
    let (ips, _) = seen();
    let mut words: Vec<String> = (0..120).map(|i| format!("host 192.0.2.{i}")).collect();
    words.push(format!("host {}", ips[0]));
    words.push(format!("(port 1 and net {}/16)", ips[0]));
    let text = words.join(" or ");
    let f = Filter::parse(&text).unwrap();
    let prog = compile(Some(&f), Framing::Ethernet, 100).unwrap();
    assert!(prog.iter().any(|i| i.code == JA && i.k > 255), "no long jump in {} instructions", prog.len());
    assert!(prog.len() < 1000, "{} instructions", prog.len());
    let kernel = kernel_socket();
    assert!(check(Some(&f), &text, &kernel) > 3000);
    // Too long for the kernel: a clear error, not a refused attach.
    let huge = (0..1200).map(|i| format!("host 10.0.{}.{}", i / 256, i % 256)).collect::<Vec<_>>().join(" or ");
    let e = compile(Some(&Filter::parse(&huge).unwrap()), Framing::Ethernet, 100).unwrap_err();
    assert!(e.contains("more than the kernel's 4096"), "{e}");
}

#[test]
fn every_jump_lands_inside_and_ends_in_ret() {
    let f = Filter::parse("ip6 or (src net 10.0.0.0/8 and not portrange 1-1024)").unwrap();
    for framing in [Framing::Ethernet, Framing::Network] {
        let prog = compile(Some(&f), framing, 200).unwrap();
        assert_eq!(prog.last().unwrap().code, RET_K);
        for (pc, i) in prog.iter().enumerate() {
            let targets: Vec<usize> = match i.code & 0x07 {
                0x05 if i.code == JA => vec![pc + 1 + i.k as usize],
                0x05 => vec![pc + 1 + usize::from(i.jt), pc + 1 + usize::from(i.jf)],
                _ => vec![],
            };
            assert!(targets.iter().all(|t| *t < prog.len()), "jump out of the program at {pc}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn bpf_verdict_equals_filter_matches(text in filter_text()) {
        let f = Filter::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        // One socket for all cases would be enough, but a case must not depend on another.
        let kernel = kernel_socket();
        check(Some(&f), &text, &kernel);
    }
}
