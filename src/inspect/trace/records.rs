//! The records the eBPF programs send (`src/ebpf/trace.bpf.c`), as laid out
//! there, and the `calls` map's codes that tell the programs what each
//! syscall number is.

use super::events::{self, Call, Dir, Sys};

/// What a syscall number is, in the `calls` map (low bits).
pub(super) const C_READ: u8 = 1;
pub(super) const C_WRITE: u8 = 2;
pub(super) const C_WAIT: u8 = 3;
pub(super) const C_SPLICE: u8 = 4;
pub(super) const C_ACCEPT: u8 = 5;
/// The register of the argument recorded (bits 4-5 of a `calls` value).
pub(super) const A_SHIFT: u8 = 4;

pub(super) const EV_CALL: u8 = 1;
pub(super) const EV_XMIT: u8 = 2;
pub(super) const EV_RETRANS: u8 = 3;
pub(super) const EV_DROP: u8 = 4;
pub(super) const EV_SOCK: u8 = 5;

/// `call.bits`.
pub(super) const B_LEFT: u8 = 1;
pub(super) const B_IN_FLIGHT: u8 = 2;
pub(super) const B_NONAGLE_SHIFT: u8 = 4;
/// `TCP_NAGLE_OFF` and `TCP_NAGLE_CORK` in `tcp_sock.nonagle`.
pub(super) const NAGLE_OFF: u8 = 1;
pub(super) const NAGLE_CORK: u8 = 2;

/// `struct call`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct CallRec {
    pub kind: u8,
    pub dir: u8,
    pub bits: u8,
    pub pad: u8,
    pub ino: u32,
    pub t: u64,
    pub t_enter: u64,
    pub tid: u32,
    pub tgid: u32,
    pub ret: i32,
    pub fd: i32,
    pub nr: u16,
    pub mss: u16,
    pub arg: u32,
    pub seq: u32,
    pub snd_nxt: u32,
}

/// `struct sockrec`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct SockRec {
    pub kind: u8,
    pub pad: u8,
    pub family: u16,
    pub ino: u32,
    pub lport: u16,
    pub rport: u16,
    pub pad2: u32,
    pub laddr: [u8; 16],
    pub raddr: [u8; 16],
}

/// `struct segment`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct SegRec {
    pub kind: u8,
    pub pad: [u8; 3],
    pub ino: u32,
    pub t: u64,
    pub seq: u32,
    pub end: u32,
}

/// `struct stage`: a CPU's records not yet sent to the ring (`stages`, read
/// after the programs are detached).
pub(super) const STAGE_BYTES: usize = 4096;

#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Stage {
    /// Bytes of `buf` in use.
    pub off: u32,
    pub n: u32,
    pub busy: u32,
    pub pad: u32,
    pub buf: [u8; STAGE_BYTES],
}

// SAFETY: plain integers and bytes, no padding: any bytes are a valid value.
unsafe impl aya::Pod for Stage {}

impl Stage {
    /// The records it holds, as bytes.
    pub fn used(&self) -> &[u8] {
        &self.buf[..(self.off as usize).min(STAGE_BYTES)]
    }
}

/// One record of the ring buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Record {
    Call(CallRec),
    Sock(SockRec),
    Segment(SegRec),
}

/// The record types: integers only, so any bytes are a valid value.
trait Plain: Copy {}
impl Plain for CallRec {}
impl Plain for SockRec {}
impl Plain for SegRec {}

/// Reads a `T` from the start of `b`.
fn read<T: Plain>(b: &[u8]) -> Option<T> {
    // SAFETY: `b` holds at least a T, and a T is plain integers.
    (b.len() >= size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// The size of a record of kind `kind`, as the programs write it.
fn size_of_kind(kind: u8) -> Option<usize> {
    match kind {
        EV_CALL => Some(size_of::<CallRec>()),
        EV_SOCK => Some(size_of::<SockRec>()),
        EV_XMIT | EV_RETRANS | EV_DROP => Some(size_of::<SegRec>()),
        _ => None,
    }
}

/// The records packed one after another in `b` (a ring item: one record, or a
/// CPU's stage of them). Stops at bytes of no known kind or a record cut short.
pub(super) fn records_in(b: &[u8]) -> impl Iterator<Item = Record> + '_ {
    let mut rest = b;
    std::iter::from_fn(move || {
        let n = size_of_kind(*rest.first()?)?;
        let r = Record::parse(rest.get(..n)?)?;
        rest = &rest[n..];
        Some(r)
    })
}

impl Record {
    /// A record as the programs wrote it; None when too short or of no known kind.
    pub fn parse(b: &[u8]) -> Option<Record> {
        match *b.first()? {
            EV_CALL => read(b).map(Record::Call),
            EV_SOCK => read(b).map(Record::Sock),
            EV_XMIT | EV_RETRANS | EV_DROP => read(b).map(Record::Segment),
            _ => None,
        }
    }

    /// When it was made (a socket's addresses: 0, as they precede its calls).
    pub fn t(&self) -> u64 {
        match self {
            Record::Call(c) => c.t,
            Record::Sock(_) => 0,
            Record::Segment(s) => s.t,
        }
    }
}

/// Which syscall argument the programs record for `call` (`sock`: on the
/// socket tracepoints): a send's flags (for MSG_MORE), or what a looping
/// call works toward (sendfile's and splice's byte count, the message count
/// of `*mmsg`), so that its passes can be joined.
pub(super) fn arg_index(call: Call, sock: bool) -> Option<usize> {
    match call {
        Call::Sendto => Some(3),
        Call::Sendmsg => Some(2),
        Call::Sendmmsg | Call::Recvmmsg if sock => Some(2),
        Call::Sendmmsg => Some(3),
        Call::Sendfile => Some(3),
        Call::Splice => Some(4),
        _ => None,
    }
}

/// The `calls` map's value for syscall `nr` (x86_64): what it is and which
/// register holds the argument to record (rdx, r10 or r8: arguments 2, 3, 4).
pub(super) fn code(nr: u32, sock: bool) -> u8 {
    let what = match events::classify(events::ARCH_X86_64, u64::from(nr)) {
        Some(Sys::Io(Call::Splice)) => C_SPLICE,
        Some(Sys::Io(c)) => match c.dir() {
            Dir::Read => C_READ,
            Dir::Write => C_WRITE,
            Dir::Wait => C_WAIT,
        },
        Some(Sys::Accept) => C_ACCEPT,
        _ => return 0,
    };
    let reg = match events::classify(events::ARCH_X86_64, u64::from(nr)) {
        Some(Sys::Io(c)) => arg_index(c, sock).map_or(0, |i| i as u8 - 1),
        _ => 0,
    };
    what | reg << A_SHIFT
}

#[cfg(test)]
mod tests {
    use super::*;

    const SENDFILE: u16 = 40;

    #[test]
    fn the_record_layouts_match_the_programs() {
        // struct call, sockrec and segment in trace.bpf.c.
        assert_eq!((size_of::<CallRec>(), size_of::<SockRec>(), size_of::<SegRec>()), (56, 48, 24));
        let mut b = [0u8; 56];
        b[0] = EV_CALL;
        b[4..8].copy_from_slice(&77u32.to_ne_bytes());
        b[40..42].copy_from_slice(&SENDFILE.to_ne_bytes());
        let Some(Record::Call(c)) = Record::parse(&b) else { panic!() };
        assert_eq!((c.ino, c.nr), (77, SENDFILE));
        assert_eq!(Record::parse(&b[..55]), None);
        b[0] = 9;
        assert_eq!(Record::parse(&b), None);
        // struct stage: the header, then the bytes.
        assert_eq!(size_of::<Stage>(), 16 + STAGE_BYTES);
    }

    #[test]
    fn a_stage_of_records_is_read_record_by_record() {
        let call = CallRec { kind: EV_CALL, ino: 3, t: 9, ..CallRec::default() };
        let seg = SegRec { kind: EV_XMIT, ino: 3, t: 10, seq: 1, end: 5, ..SegRec::default() };
        let sock = SockRec { kind: EV_SOCK, ino: 3, lport: 80, ..SockRec::default() };
        let mut b = Vec::new();
        for r in [&bytes(&sock)[..], &bytes(&call), &bytes(&seg), &bytes(&call)] {
            b.extend_from_slice(r);
        }
        let got: Vec<Record> = records_in(&b).collect();
        assert_eq!(got, [Record::Sock(sock), Record::Call(call), Record::Segment(seg), Record::Call(call)]);
        // Cut short, or followed by bytes of no kind: the whole records before it.
        assert_eq!(records_in(&b[..b.len() - 1]).count(), 3);
        b.extend_from_slice(&[0u8; 16]);
        assert_eq!(records_in(&b).count(), 4);
    }

    fn bytes<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: the record types are plain integers, read as bytes.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }

    #[test]
    fn the_calls_map_names_the_register_of_the_wanted_argument() {
        // sendto's flags in r10, sendmsg's in rdx, sendfile's count in r10, splice's length in r8.
        assert_eq!(code(44, true), C_WRITE | 2 << A_SHIFT);
        assert_eq!(code(46, true), C_WRITE | 1 << A_SHIFT);
        assert_eq!(code(40, true), C_WRITE | 2 << A_SHIFT);
        assert_eq!(code(275, true), C_SPLICE | 3 << A_SHIFT);
        // sendmmsg: the message count on the socket tracepoints, the flags on the syscall ones.
        assert_eq!((code(307, true), code(307, false)), (C_WRITE | 1 << A_SHIFT, C_WRITE | 2 << A_SHIFT));
        assert_eq!((code(0, true), code(232, true), code(288, true), code(60, true)), (C_READ, C_WAIT, C_ACCEPT, 0));
    }
}
