//! Classic BPF (the kernel's socket-filter language) compiled from a
//! [`Filter`], so that the kernel drops what tcpdoctor would throw away
//! before it is copied to the ring.
//!
//! The program accepts only TCP over IPv4 (any header length; non-first
//! fragments have no ports, as in tcpdump) and over IPv6 (TCP right after
//! the fixed header, as tcpdump's `tcp`), then the filter expression. It is
//! specialised per address family, so every load is at a constant offset
//! (IPv4 ports: `ldxb 4*([nh]&0xf)`) and `ip`/`ip6` cost nothing.
//!
//! VLAN: the kernel moves a received frame's tag out of the data before
//! packet sockets see it, so tagged traffic passes as untagged. A tag still
//! in the data (the inner one of QinQ, or sent by a device without VLAN
//! offload) makes the frame fail, as in tcpdump without `vlan`.
//!
//! Code is generated backwards: every piece is emitted after the code it
//! jumps to, so jump offsets are known when emitted and a conditional jump
//! further than 255 instructions goes through an unconditional one.

use crate::filter::{Dir, Expr, Filter};
use std::net::IpAddr;

/// One classic BPF instruction, as `SO_ATTACH_FILTER` takes it.
pub(crate) type Insn = libc::sock_filter;

/// How the bytes the filter sees begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// An Ethernet header (ARPHRD_ETHER, and ARPHRD_LOOPBACK which uses the
    /// same 14 bytes).
    Ethernet,
    /// The network header at offset 0 and its EtherType in the socket
    /// buffer's protocol field: SOCK_DGRAM packet sockets (`any`, tun…).
    Network,
}

// Instruction codes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const ALU_AND_K: u16 = 0x54;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// `ld [SKF_AD_OFF + SKF_AD_PROTOCOL]`: the skb's protocol, host order.
const AD_PROTOCOL: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32;

const ETH_IPV4: u32 = 0x0800;
const ETH_IPV6: u32 = 0x86dd;
const TCP: u32 = 6;

/// The kernel's limit on a classic program's length (BPF_MAXINSNS).
pub(crate) const MAX_INSNS: usize = libc::BPF_MAXINSNS as usize;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

/// A position in the program under construction, counted from its end.
type Label = usize;

/// The program, last instruction first.
struct Asm {
    rev: Vec<Insn>,
}

impl Asm {
    fn push(&mut self, code: u16, jt: u8, jf: u8, k: u32) -> Label {
        self.rev.push(Insn { code, jt, jf, k });
        self.rev.len() - 1
    }

    /// Offset of `to` from an instruction about to be pushed.
    fn dist(&self, to: Label) -> usize {
        self.rev.len() - to - 1
    }

    fn ret(&mut self, k: u32) -> Label {
        self.push(RET_K, 0, 0, k)
    }

    /// Makes `to` the next instruction in program order.
    fn goto(&mut self, to: Label) {
        if to + 1 != self.rev.len() {
            let d = self.dist(to) as u32;
            self.push(JA, 0, 0, d);
        }
    }

    /// A load or ALU instruction, continuing at `next`.
    fn op(&mut self, code: u16, k: u32, next: Label) -> Label {
        self.goto(next);
        self.push(code, 0, 0, k)
    }

    /// A conditional jump; targets out of a byte's reach go through `ja`.
    fn jump(&mut self, code: u16, k: u32, mut t: Label, mut f: Label) -> Label {
        loop {
            if self.dist(t) > 255 {
                let d = self.dist(t) as u32;
                t = self.push(JA, 0, 0, d);
            } else if self.dist(f) > 255 {
                let d = self.dist(f) as u32;
                f = self.push(JA, 0, 0, d);
            } else {
                break;
            }
        }
        let (jt, jf) = (self.dist(t) as u8, self.dist(f) as u8);
        self.push(code, jt, jf, k)
    }

    /// `A == k`, or `lo <= A <= hi`.
    fn in_range(&mut self, lo: u32, hi: u32, t: Label, f: Label) -> Label {
        if lo == hi {
            return self.jump(JEQ_K, lo, t, f);
        }
        let below_hi = if hi >= 0xffff { t } else { self.jump(JGT_K, hi, f, t) };
        if lo == 0 { below_hi } else { self.jump(JGE_K, lo, below_hi, f) }
    }

    /// Loads a 32-bit word at `at`, masks it, compares it with `want`.
    fn word_is(&mut self, at: u32, mask: u32, want: u32, t: Label, f: Label) -> Label {
        let mut l = self.jump(JEQ_K, want & mask, t, f);
        if mask != u32::MAX {
            l = self.op(ALU_AND_K, mask, l);
        }
        self.op(LD_W_ABS, at, l)
    }

    /// Applies `one` (which tests the source when given `true`) per the direction.
    fn by_dir(
        &mut self,
        dir: Dir,
        t: Label,
        f: Label,
        mut one: impl FnMut(&mut Asm, bool, Label, Label) -> Label,
    ) -> Label {
        match dir {
            Dir::Src => one(self, true, t, f),
            Dir::Dst => one(self, false, t, f),
            Dir::Either => {
                let dst = one(self, false, t, f);
                one(self, true, t, dst)
            }
            Dir::Both => {
                let dst = one(self, false, t, f);
                one(self, true, dst, f)
            }
        }
    }

    /// An address test; `nh` is the network header's offset.
    fn net(&mut self, nh: u32, dir: Dir, addr: IpAddr, len: u8, t: Label, f: Label) -> Label {
        match addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                let want = u32::from(a);
                self.by_dir(dir, t, f, |asm, src, t, f| asm.word_is(nh + if src { 12 } else { 16 }, mask, want, t, f))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                let want = u128::from(a);
                self.by_dir(dir, t, f, |asm, src, t, f| {
                    let base = nh + if src { 8 } else { 24 };
                    // The last word first: each word's success leads to the next one.
                    let mut next = t;
                    for i in (0..4u32).rev() {
                        let shift = 96 - 32 * i;
                        let m = (mask >> shift) as u32;
                        if m != 0 {
                            next = asm.word_is(base + 4 * i, m, (want >> shift) as u32, next, f);
                        }
                    }
                    next
                })
            }
        }
    }

    /// A port test on the TCP header.
    fn ports(&mut self, fam: Family, nh: u32, dir: Dir, (lo, hi): (u16, u16), t: Label, f: Label) -> Label {
        let (lo, hi) = (u32::from(lo), u32::from(hi));
        match fam {
            Family::V6 => self.by_dir(dir, t, f, |asm, src, t, f| {
                let l = asm.in_range(lo, hi, t, f);
                asm.op(LD_H_ABS, nh + 40 + if src { 0 } else { 2 }, l)
            }),
            Family::V4 => {
                // X = IPv4 header length, loaded once for both ports.
                let cmp = self.by_dir(dir, t, f, |asm, src, t, f| {
                    let l = asm.in_range(lo, hi, t, f);
                    asm.op(LD_H_IND, nh + if src { 0 } else { 2 }, l)
                });
                let l = self.op(LDX_B_MSH, nh, cmp);
                // A fragment other than the first has no TCP header.
                let l = self.jump(JSET_K, 0x1fff, f, l);
                self.op(LD_H_ABS, nh + 6, l)
            }
        }
    }

    /// The (folded) expression for one family and network-header offset.
    fn expr(&mut self, e: &Expr, fam: Family, nh: u32, t: Label, f: Label) -> Label {
        match e {
            Expr::True => t,
            Expr::False => f,
            // Folded away before; kept total.
            Expr::V4 => {
                if fam == Family::V4 {
                    t
                } else {
                    f
                }
            }
            Expr::V6 => {
                if fam == Family::V6 {
                    t
                } else {
                    f
                }
            }
            Expr::Not(x) => self.expr(x, fam, nh, f, t),
            Expr::And(a, b) => {
                let b = self.expr(b, fam, nh, t, f);
                self.expr(a, fam, nh, b, f)
            }
            Expr::Or(a, b) => {
                let b = self.expr(b, fam, nh, t, f);
                self.expr(a, fam, nh, t, b)
            }
            Expr::Net(dir, addr, len) => self.net(nh, *dir, *addr, *len, t, f),
            Expr::Ports(dir, lo, hi) => self.ports(fam, nh, *dir, (*lo, *hi), t, f),
        }
    }

    /// TCP over one family at network offset `nh`, then the expression.
    fn family(&mut self, e: &Expr, fam: Family, nh: u32, accept: Label, reject: Label) -> Label {
        let folded = fold(e, fam);
        let body = self.expr(&folded, fam, nh, accept, reject);
        let l = self.jump(JEQ_K, TCP, body, reject);
        // IPv4 protocol / IPv6 next header.
        self.op(LD_B_ABS, nh + if fam == Family::V4 { 9 } else { 6 }, l)
    }

    /// With the EtherType in A: to the IPv4 or IPv6 code (network header at `nh`), or reject.
    fn dispatch(&mut self, e: &Expr, nh: u32, accept: Label, reject: Label) -> Label {
        let v6 = self.family(e, Family::V6, nh, accept, reject);
        let v4 = self.family(e, Family::V4, nh, accept, reject);
        let is6 = self.jump(JEQ_K, ETH_IPV6, v6, reject);
        self.jump(JEQ_K, ETH_IPV4, v4, is6)
    }
}

/// Removes what one family makes constant (`ip`, `ip6`, the other family's
/// addresses, `/0` networks) and folds the constants.
fn fold(e: &Expr, fam: Family) -> Expr {
    use Expr::*;
    let b = |v: bool| if v { True } else { False };
    match e {
        True | False => e.clone(),
        V4 => b(fam == Family::V4),
        V6 => b(fam == Family::V6),
        Net(_, a, len) => {
            if a.is_ipv4() != (fam == Family::V4) {
                False
            } else if *len == 0 {
                True
            } else {
                e.clone()
            }
        }
        Ports(..) => e.clone(),
        Not(x) => match fold(x, fam) {
            True => False,
            False => True,
            x => Not(Box::new(x)),
        },
        And(x, y) => match (fold(x, fam), fold(y, fam)) {
            (False, _) | (_, False) => False,
            (True, z) | (z, True) => z,
            (x, y) => And(Box::new(x), Box::new(y)),
        },
        Or(x, y) => match (fold(x, fam), fold(y, fam)) {
            (True, _) | (_, True) => True,
            (False, z) | (z, False) => z,
            (x, y) => Or(Box::new(x), Box::new(y)),
        },
    }
}

/// Compiles "TCP and `filter`" for `framing`; accepted packets are cut to
/// `snaplen` bytes. Fails only when the program would exceed the kernel's
/// limit of 4096 instructions.
pub(crate) fn compile(filter: Option<&Filter>, framing: Framing, snaplen: u32) -> Result<Vec<Insn>, String> {
    let e = filter.map_or(Expr::True, |f| f.expr().clone());
    let mut a = Asm { rev: Vec::new() };
    let reject = a.ret(0);
    let accept = a.ret(snaplen.max(1));
    match framing {
        Framing::Network => {
            let d = a.dispatch(&e, 0, accept, reject);
            a.op(LD_W_ABS, AD_PROTOCOL, d);
        }
        Framing::Ethernet => {
            let d = a.dispatch(&e, 14, accept, reject);
            a.op(LD_H_ABS, 12, d);
        }
    }
    if a.rev.len() > MAX_INSNS {
        return Err(format!(
            "the filter compiles to {} BPF instructions, more than the kernel's {MAX_INSNS}; shorten it",
            a.rev.len()
        ));
    }
    a.rev.reverse();
    Ok(a.rev)
}

#[cfg(test)]
pub(crate) mod interp {
    //! A classic BPF interpreter with the kernel's semantics for what the
    //! compiler emits (and a little more): a load outside the packet ends
    //! the program with 0.

    use super::Insn;

    /// Runs `prog` on `pkt`; `protocol` answers `ld [SKF_AD_OFF + SKF_AD_PROTOCOL]`.
    pub(crate) fn run(prog: &[Insn], pkt: &[u8], protocol: u16) -> u32 {
        let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
        let load = |at: u32, size: u32| -> Option<u32> {
            if at == super::AD_PROTOCOL && size == 4 {
                return Some(u32::from(protocol));
            }
            let at = at as usize;
            let b = pkt.get(at..at.checked_add(size as usize)?)?;
            Some(b.iter().fold(0u32, |v, &c| v << 8 | u32::from(c)))
        };
        let mut pc = 0usize;
        while let Some(i) = prog.get(pc) {
            pc += 1;
            let size = match i.code & 0x18 {
                0x00 => 4,
                0x08 => 2,
                _ => 1,
            };
            let src = if i.code & 0x08 != 0 { x } else { i.k };
            match i.code & 0x07 {
                0x00 => {
                    a = match i.code & 0xe0 {
                        0x00 => i.k,
                        0x20 => match load(i.k, size) {
                            Some(v) => v,
                            None => return 0,
                        },
                        0x40 => match x.checked_add(i.k).and_then(|at| load(at, size)) {
                            Some(v) => v,
                            None => return 0,
                        },
                        0x60 => mem[i.k as usize & 15],
                        0x80 => pkt.len() as u32,
                        m => panic!("ld mode {m:#x}"),
                    }
                }
                0x01 => {
                    x = match i.code & 0xe0 {
                        0x00 => i.k,
                        0x60 => mem[i.k as usize & 15],
                        0x80 => pkt.len() as u32,
                        0xa0 => match load(i.k, 1) {
                            Some(v) => 4 * (v & 0xf),
                            None => return 0,
                        },
                        m => panic!("ldx mode {m:#x}"),
                    }
                }
                0x02 => mem[i.k as usize & 15] = a,
                0x03 => mem[i.k as usize & 15] = x,
                0x04 => {
                    a = match i.code & 0xf0 {
                        0x00 => a.wrapping_add(src),
                        0x10 => a.wrapping_sub(src),
                        0x20 => a.wrapping_mul(src),
                        0x40 => a | src,
                        0x50 => a & src,
                        0x60 => a.checked_shl(src).unwrap_or(0),
                        0x70 => a.checked_shr(src).unwrap_or(0),
                        0x80 => a.wrapping_neg(),
                        op => panic!("alu op {op:#x}"),
                    }
                }
                0x05 => {
                    let taken = match i.code & 0xf0 {
                        0x00 => {
                            pc += i.k as usize;
                            continue;
                        }
                        0x10 => a == src,
                        0x20 => a > src,
                        0x30 => a >= src,
                        0x40 => a & src != 0,
                        op => panic!("jmp op {op:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                0x06 => return if i.code & 0x18 == 0x10 { a } else { i.k },
                _ => {
                    if i.code & 0xf8 == 0x80 {
                        a = x;
                    } else {
                        x = a;
                    }
                }
            }
        }
        panic!("fell off the end of the program")
    }
}

#[cfg(test)]
mod tests {
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
}
