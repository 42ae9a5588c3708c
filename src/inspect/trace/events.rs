//! What the tracer records: the syscalls it knows by number (x86_64 and
//! aarch64), the calls on TCP sockets with their times and results, and the
//! sockets they were made on.

/// `AUDIT_ARCH_X86_64`, as `PTRACE_GET_SYSCALL_INFO` reports it.
pub(crate) const ARCH_X86_64: u32 = 0xC000_003E;
/// `AUDIT_ARCH_AARCH64`.
pub(crate) const ARCH_AARCH64: u32 = 0xC000_00B7;

/// `MSG_MORE`: the sender says more data follows, so the kernel holds this
/// piece on purpose (like `TCP_CORK`), and Nagle has nothing to stall.
pub(crate) const MSG_MORE: u64 = 0x8000;

/// Which way a recorded call goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dir {
    /// Data handed to the kernel for a socket.
    Write,
    /// Data asked from a socket (or EAGAIN: none yet).
    Read,
    /// A wait for any descriptor to become ready (epoll, poll, select).
    Wait,
}

/// A recorded syscall.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Call {
    Read,
    Readv,
    Pread64,
    Preadv,
    Preadv2,
    Recvfrom,
    Recvmsg,
    Recvmmsg,
    Write,
    Writev,
    Pwrite64,
    Pwritev,
    Pwritev2,
    Sendto,
    Sendmsg,
    Sendmmsg,
    Sendfile,
    /// `splice` into a socket (a write) or out of one (a read).
    Splice,
    EpollWait,
    EpollPwait,
    EpollPwait2,
    Poll,
    Ppoll,
    Select,
    Pselect6,
    /// Data sent on a socket outside a socket syscall (io_uring, a send the
    /// kernel makes itself): seen only by eBPF on the socket tracepoints.
    SockSend,
    /// Data received the same way.
    SockRecv,
}

impl Call {
    /// The syscall's name, as strace prints it.
    pub fn name(self) -> &'static str {
        match self {
            Call::Read => "read",
            Call::Readv => "readv",
            Call::Pread64 => "pread64",
            Call::Preadv => "preadv",
            Call::Preadv2 => "preadv2",
            Call::Recvfrom => "recvfrom",
            Call::Recvmsg => "recvmsg",
            Call::Recvmmsg => "recvmmsg",
            Call::Write => "write",
            Call::Writev => "writev",
            Call::Pwrite64 => "pwrite64",
            Call::Pwritev => "pwritev",
            Call::Pwritev2 => "pwritev2",
            Call::Sendto => "sendto",
            Call::Sendmsg => "sendmsg",
            Call::Sendmmsg => "sendmmsg",
            Call::Sendfile => "sendfile",
            Call::Splice => "splice",
            Call::EpollWait => "epoll_wait",
            Call::EpollPwait => "epoll_pwait",
            Call::EpollPwait2 => "epoll_pwait2",
            Call::Poll => "poll",
            Call::Ppoll => "ppoll",
            Call::Select => "select",
            Call::Pselect6 => "pselect6",
            Call::SockSend => "sock_sendmsg",
            Call::SockRecv => "sock_recvmsg",
        }
    }

    /// Its direction (`Splice` is decided per call: see [`Call::fds`]).
    pub fn dir(self) -> Dir {
        match self {
            Call::Read
            | Call::Readv
            | Call::Pread64
            | Call::Preadv
            | Call::Preadv2
            | Call::Recvfrom
            | Call::Recvmsg
            | Call::Recvmmsg
            | Call::SockRecv => Dir::Read,
            Call::Write
            | Call::Writev
            | Call::Pwrite64
            | Call::Pwritev
            | Call::Pwritev2
            | Call::Sendto
            | Call::Sendmsg
            | Call::Sendmmsg
            | Call::Sendfile
            | Call::Splice
            | Call::SockSend => Dir::Write,
            Call::EpollWait
            | Call::EpollPwait
            | Call::EpollPwait2
            | Call::Poll
            | Call::Ppoll
            | Call::Select
            | Call::Pselect6 => Dir::Wait,
        }
    }

    /// The descriptors the call may act on, with the direction for each:
    /// `splice(in, _, out, …)` reads `in` and writes `out`; waits have none.
    pub fn fds(self, args: &[u64; 6]) -> [Option<(i32, Dir)>; 2] {
        let fd = |a: u64| a as i32;
        match self.dir() {
            Dir::Wait => [None, None],
            _ if self == Call::Splice => [Some((fd(args[2]), Dir::Write)), Some((fd(args[0]), Dir::Read))],
            d => [Some((fd(args[0]), d)), None],
        }
    }

    /// Whether the call's flags carry `MSG_MORE`.
    pub fn more(self, args: &[u64; 6]) -> bool {
        let flags = match self {
            Call::Sendto | Call::Sendmmsg => args[3],
            Call::Sendmsg => args[2],
            _ => 0,
        };
        flags & MSG_MORE != 0
    }

    /// Whether the return value counts messages, not bytes.
    pub fn counts_messages(self) -> bool {
        matches!(self, Call::Sendmmsg | Call::Recvmmsg)
    }
}

/// A syscall the tracer acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sys {
    /// Recorded (on a TCP socket, or a wait).
    Io(Call),
    /// `close(fd)`: the number may be reused.
    Close,
    /// `close_range(first, last, flags)`.
    CloseRange,
    /// `dup2`/`dup3(old, new)`: `new` now names another file.
    DupTo,
    /// `accept`/`accept4(listener)`: the result is a new connection of that listener.
    Accept,
    /// `socket`, `dup`: the result may be a reused descriptor number.
    NewFd,
    /// `fcntl(fd, cmd, …)`: with F_DUPFD or F_DUPFD_CLOEXEC, like `dup`.
    Fcntl,
    /// `setsockopt(fd, level, name, …)`: TCP_NODELAY or TCP_CORK may change.
    SetSockOpt,
    /// `execve`/`execveat`: close-on-exec descriptors are gone.
    Exec,
}

/// What syscall `nr` is on `arch` (an `AUDIT_ARCH_*` value); None when it is
/// none of ours or the architecture is not one we know (a 32-bit process).
pub(crate) fn classify(arch: u32, nr: u64) -> Option<Sys> {
    match arch {
        ARCH_X86_64 => x86_64(nr),
        ARCH_AARCH64 => aarch64(nr),
        _ => None,
    }
}

/// Numbers from arch/x86/entry/syscalls/syscall_64.tbl.
fn x86_64(nr: u64) -> Option<Sys> {
    use Call::*;
    Some(match nr {
        0 => Sys::Io(Read),
        1 => Sys::Io(Write),
        3 => Sys::Close,
        7 => Sys::Io(Poll),
        17 => Sys::Io(Pread64),
        18 => Sys::Io(Pwrite64),
        19 => Sys::Io(Readv),
        20 => Sys::Io(Writev),
        23 => Sys::Io(Select),
        32 | 41 => Sys::NewFd, // dup, socket
        72 => Sys::Fcntl,
        33 | 292 => Sys::DupTo, // dup2, dup3
        40 => Sys::Io(Sendfile),
        43 | 288 => Sys::Accept,
        44 => Sys::Io(Sendto),
        45 => Sys::Io(Recvfrom),
        46 => Sys::Io(Sendmsg),
        47 => Sys::Io(Recvmsg),
        54 => Sys::SetSockOpt,
        59 | 322 => Sys::Exec,
        232 => Sys::Io(EpollWait),
        270 => Sys::Io(Pselect6),
        271 => Sys::Io(Ppoll),
        275 => Sys::Io(Splice),
        281 => Sys::Io(EpollPwait),
        295 => Sys::Io(Preadv),
        296 => Sys::Io(Pwritev),
        299 => Sys::Io(Recvmmsg),
        307 => Sys::Io(Sendmmsg),
        327 => Sys::Io(Preadv2),
        328 => Sys::Io(Pwritev2),
        436 => Sys::CloseRange,
        441 => Sys::Io(EpollPwait2),
        _ => return None,
    })
}

/// Numbers from include/uapi/asm-generic/unistd.h (aarch64 has no
/// epoll_wait, poll, select, dup2 or accept-less variants of its own).
fn aarch64(nr: u64) -> Option<Sys> {
    use Call::*;
    Some(match nr {
        22 => Sys::Io(EpollPwait),
        23 | 198 => Sys::NewFd, // dup, socket
        24 => Sys::DupTo,       // dup3
        25 => Sys::Fcntl,
        57 => Sys::Close,
        63 => Sys::Io(Read),
        64 => Sys::Io(Write),
        65 => Sys::Io(Readv),
        66 => Sys::Io(Writev),
        67 => Sys::Io(Pread64),
        68 => Sys::Io(Pwrite64),
        69 => Sys::Io(Preadv),
        70 => Sys::Io(Pwritev),
        71 => Sys::Io(Sendfile),
        72 => Sys::Io(Pselect6),
        73 => Sys::Io(Ppoll),
        76 => Sys::Io(Splice),
        202 | 242 => Sys::Accept,
        206 => Sys::Io(Sendto),
        207 => Sys::Io(Recvfrom),
        208 => Sys::SetSockOpt,
        211 => Sys::Io(Sendmsg),
        212 => Sys::Io(Recvmsg),
        221 | 281 => Sys::Exec,
        243 => Sys::Io(Recvmmsg),
        269 => Sys::Io(Sendmmsg),
        286 => Sys::Io(Preadv2),
        287 => Sys::Io(Pwritev2),
        436 => Sys::CloseRange,
        441 => Sys::Io(EpollPwait2),
        _ => return None,
    })
}

/// Whether Nagle could hold a small write on the socket at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Nagle {
    /// TCP_NODELAY off, not corked, no MSG_MORE: Nagle decides.
    On,
    /// TCP_NODELAY on.
    Off,
    /// TCP_CORK on or MSG_MORE: held on purpose, then sent together.
    Corked,
    /// The options could not be read.
    Unknown,
}

impl Nagle {
    /// From the socket's options at the time of a write.
    pub fn of(nodelay: Option<bool>, cork: Option<bool>, more: bool) -> Nagle {
        match (nodelay, cork) {
            _ if more || cork == Some(true) => Nagle::Corked,
            (Some(true), _) => Nagle::Off,
            (Some(false), Some(false)) => Nagle::On,
            _ => Nagle::Unknown,
        }
    }

    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Nagle::On => "nagle",
            Nagle::Off => "nodelay",
            Nagle::Corked => "corked",
            Nagle::Unknown => "unknown",
        }
    }
}

/// Where a socket's connection comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Role {
    /// Accepted on a port the process listens on (the server side).
    Accepted,
    /// Connected by the process (the client side).
    Outgoing,
    /// A listening socket.
    Listening,
    /// Not in /proc/net/tcp any more.
    Unknown,
}

impl Role {
    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Accepted => "accepted",
            Role::Outgoing => "outgoing",
            Role::Listening => "listening",
            Role::Unknown => "unknown",
        }
    }

    /// From the name `inspect` gives a socket (the inverse of [`Role::name`]).
    pub fn from_name(name: &str) -> Role {
        match name {
            "listening" => Role::Listening,
            "accepted" => Role::Accepted,
            "outgoing" => Role::Outgoing,
            _ => Role::Unknown,
        }
    }
}

/// A TCP socket a recorded call was made on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sock {
    /// The process whose descriptor it was first seen as.
    pub pid: u32,
    /// That descriptor.
    pub fd: i32,
    /// Socket inode.
    pub inode: u64,
    /// Server or client side.
    pub role: Role,
    /// Local `ip:port`, when known.
    pub local: Option<String>,
    /// Local port, when known (an accepted socket's is its listener's).
    pub port: Option<u16>,
    /// Peer `ip:port`, when known.
    pub peer: Option<String>,
    /// Send MSS from tcp_info, when the socket was still there to ask.
    pub mss: Option<u32>,
    /// Accepted while the trace ran: its first response is the connection's first.
    pub accepted_in_window: bool,
}

/// One recorded call on a TCP socket, or a wait.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Event {
    /// Syscall entry, ns since the trace started.
    pub t_ns: u64,
    /// Syscall exit, ns since the trace started.
    pub end_ns: u64,
    /// Thread that made it.
    pub tid: u32,
    /// The syscall.
    pub call: Call,
    /// Write, read, or wait (for `splice`, which side was the socket).
    pub dir: Dir,
    /// Index of the socket in the socket table; None for waits.
    pub sock: Option<u32>,
    /// The descriptor as the process named it (-1 for waits).
    pub fd: i32,
    /// Return value: bytes (messages for `*mmsg`, ready descriptors for
    /// waits), or -errno.
    pub ret: i64,
    /// For writes: whether Nagle could hold it.
    pub nagle: Nagle,
}

#[cfg(test)]
mod tests {
    use super::*;

    // libc's numbers are the running target's: each table is checked on its own architecture.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x86_64_numbers_match_libc() {
        let want: &[(libc::c_long, Sys)] = &[
            (libc::SYS_read, Sys::Io(Call::Read)),
            (libc::SYS_write, Sys::Io(Call::Write)),
            (libc::SYS_writev, Sys::Io(Call::Writev)),
            (libc::SYS_readv, Sys::Io(Call::Readv)),
            (libc::SYS_pwrite64, Sys::Io(Call::Pwrite64)),
            (libc::SYS_pwritev2, Sys::Io(Call::Pwritev2)),
            (libc::SYS_sendto, Sys::Io(Call::Sendto)),
            (libc::SYS_sendmsg, Sys::Io(Call::Sendmsg)),
            (libc::SYS_sendmmsg, Sys::Io(Call::Sendmmsg)),
            (libc::SYS_sendfile, Sys::Io(Call::Sendfile)),
            (libc::SYS_splice, Sys::Io(Call::Splice)),
            (libc::SYS_recvfrom, Sys::Io(Call::Recvfrom)),
            (libc::SYS_recvmsg, Sys::Io(Call::Recvmsg)),
            (libc::SYS_recvmmsg, Sys::Io(Call::Recvmmsg)),
            (libc::SYS_epoll_wait, Sys::Io(Call::EpollWait)),
            (libc::SYS_epoll_pwait, Sys::Io(Call::EpollPwait)),
            (libc::SYS_epoll_pwait2, Sys::Io(Call::EpollPwait2)),
            (libc::SYS_poll, Sys::Io(Call::Poll)),
            (libc::SYS_ppoll, Sys::Io(Call::Ppoll)),
            (libc::SYS_select, Sys::Io(Call::Select)),
            (libc::SYS_pselect6, Sys::Io(Call::Pselect6)),
            (libc::SYS_close, Sys::Close),
            (libc::SYS_close_range, Sys::CloseRange),
            (libc::SYS_dup2, Sys::DupTo),
            (libc::SYS_dup3, Sys::DupTo),
            (libc::SYS_accept, Sys::Accept),
            (libc::SYS_accept4, Sys::Accept),
            (libc::SYS_socket, Sys::NewFd),
            (libc::SYS_setsockopt, Sys::SetSockOpt),
            (libc::SYS_execve, Sys::Exec),
        ];
        for &(nr, sys) in want {
            assert_eq!(classify(ARCH_X86_64, nr as u64), Some(sys), "syscall {nr}");
        }
        assert_eq!(classify(ARCH_X86_64, libc::SYS_futex as u64), None);
        // A 32-bit process (AUDIT_ARCH_I386) is not decoded.
        assert_eq!(classify(0x4000_0003, 4), None);
    }

    #[cfg(target_arch = "aarch64")]
    #[test]
    fn aarch64_numbers_match_libc() {
        let want: &[(libc::c_long, Sys)] = &[
            (libc::SYS_read, Sys::Io(Call::Read)),
            (libc::SYS_write, Sys::Io(Call::Write)),
            (libc::SYS_writev, Sys::Io(Call::Writev)),
            (libc::SYS_sendto, Sys::Io(Call::Sendto)),
            (libc::SYS_sendmsg, Sys::Io(Call::Sendmsg)),
            (libc::SYS_sendfile, Sys::Io(Call::Sendfile)),
            (libc::SYS_splice, Sys::Io(Call::Splice)),
            (libc::SYS_recvfrom, Sys::Io(Call::Recvfrom)),
            (libc::SYS_epoll_pwait, Sys::Io(Call::EpollPwait)),
            (libc::SYS_ppoll, Sys::Io(Call::Ppoll)),
            (libc::SYS_pselect6, Sys::Io(Call::Pselect6)),
            (libc::SYS_close, Sys::Close),
            (libc::SYS_dup3, Sys::DupTo),
            (libc::SYS_accept4, Sys::Accept),
            (libc::SYS_setsockopt, Sys::SetSockOpt),
        ];
        for &(nr, sys) in want {
            assert_eq!(classify(ARCH_AARCH64, nr as u64), Some(sys), "syscall {nr}");
        }
    }

    #[test]
    fn aarch64_numbers_are_the_generic_table() {
        assert_eq!(classify(ARCH_AARCH64, 64), Some(Sys::Io(Call::Write)));
        assert_eq!(classify(ARCH_AARCH64, 66), Some(Sys::Io(Call::Writev)));
        assert_eq!(classify(ARCH_AARCH64, 71), Some(Sys::Io(Call::Sendfile)));
        assert_eq!(classify(ARCH_AARCH64, 207), Some(Sys::Io(Call::Recvfrom)));
        assert_eq!(classify(ARCH_AARCH64, 22), Some(Sys::Io(Call::EpollPwait)));
        assert_eq!(classify(ARCH_AARCH64, 57), Some(Sys::Close));
        assert_eq!(classify(ARCH_AARCH64, 242), Some(Sys::Accept));
        // x86_64's write number is aarch64's io_setup.
        assert_eq!(classify(ARCH_AARCH64, 1), None);
    }

    #[test]
    fn splice_and_flags_name_the_socket_side() {
        let mut a = [0u64; 6];
        a[0] = 5;
        a[2] = 7;
        assert_eq!(Call::Splice.fds(&a), [Some((7, Dir::Write)), Some((5, Dir::Read))]);
        assert_eq!(Call::Sendfile.fds(&a), [Some((5, Dir::Write)), None]);
        assert_eq!(Call::EpollWait.fds(&a), [None, None]);
        a[3] = MSG_MORE;
        assert!(Call::Sendto.more(&a) && !Call::Sendmsg.more(&a) && !Call::Write.more(&a));
        assert_eq!(Nagle::of(Some(false), Some(false), false), Nagle::On);
        assert_eq!(Nagle::of(Some(false), Some(false), true), Nagle::Corked);
        assert_eq!(Nagle::of(Some(true), Some(false), false), Nagle::Off);
        assert_eq!(Nagle::of(Some(false), Some(true), false), Nagle::Corked);
        assert_eq!(Nagle::of(None, None, false), Nagle::Unknown);
    }
}
