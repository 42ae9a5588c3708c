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
mod interp;
#[cfg(test)]
mod tests;
