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
