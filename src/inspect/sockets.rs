//! The process's TCP sockets with their options, read on duplicates of its
//! descriptors.

use super::{InspectError, procfs, ptrace_hint, sockopt};
use crate::record::inspect::Socket;
use std::collections::{BTreeSet, HashMap, HashSet};

/// One socket found in a process's descriptors.
pub(super) struct Held {
    pub(super) pid: u32,
    pub(super) fd: i32,
    pub(super) inode: u64,
}

/// The sockets with their options; sockets closed since they were listed are dropped.
pub(super) fn read_sockets(
    held: &[Held],
    by_inode: &HashMap<u64, &procfs::TcpEntry>,
    listen_ports: &HashSet<u16>,
    main: (u32, &sockopt::Pidfd),
    notes: &mut Vec<String>,
) -> Result<Vec<Socket>, InspectError> {
    let mut pidfds: HashMap<u32, Option<sockopt::Pidfd>> = HashMap::new();
    let (mut closed, mut gone) = (0, BTreeSet::new());
    let mut out = Vec::new();
    for h in held {
        let row = by_inode[&h.inode];
        let mut s = Socket {
            pid: h.pid,
            fd: h.fd,
            inode: h.inode,
            state: procfs::state_name(row.state).into(),
            role: if row.state == procfs::LISTEN {
                "listening"
            } else if listen_ports.contains(&row.local.port()) {
                "accepted"
            } else {
                "outgoing"
            },
            local: row.local.to_string(),
            peer: if row.state == procfs::LISTEN { "*:*".into() } else { row.peer.to_string() },
            pingpong: row.pingpong,
            quick_acks_left: row.quick,
            ..Socket::default()
        };
        let pfd = if h.pid == main.0 {
            Some(main.1)
        } else {
            pidfds.entry(h.pid).or_insert_with(|| sockopt::Pidfd::open(h.pid).ok()).as_ref()
        };
        match pfd.map(|p| p.sockopts(h.fd, h.inode)) {
            Some(Ok(o)) => {
                s.nodelay = Some(o.nodelay);
                s.cork = Some(o.cork);
                s.quickack = Some(o.quickack);
            }
            Some(Err(e)) => match e.raw_os_error() {
                Some(libc::EPERM) => {
                    return Err(InspectError::Permission {
                        at: format!("pid {}", h.pid),
                        what: "duplicate its sockets to read TCP_NODELAY (pidfd_getfd)".into(),
                        hint: ptrace_hint(Some(h.pid)),
                    });
                }
                Some(libc::ENOSYS) => {
                    return Err(InspectError::Unsupported {
                        at: format!("pid {}", h.pid),
                        what: format!(
                            "cannot duplicate its sockets: pidfd_getfd needs Linux 5.6 or later (this kernel: {})",
                            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim()
                        ),
                    });
                }
                // Closed, or the number reused, since the descriptors were listed.
                Some(libc::EBADF) => {
                    closed += 1;
                    continue;
                }
                Some(libc::ESRCH) => {
                    gone.insert(h.pid);
                }
                _ => notes.push(format!("pid {} fd {}: cannot read its options: {e}", h.pid, h.fd)),
            },
            None => {
                gone.insert(h.pid);
            }
        }
        out.push(s);
    }
    if closed > 0 {
        notes.push(format!("{closed} socket(s) closed while being read (left out)"));
    }
    for p in gone {
        notes.push(format!("pid {p} exited while its sockets were read; their options are unknown"));
    }
    Ok(out)
}
