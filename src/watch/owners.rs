//! Who owns a stalled endpoint: the process (pid, comm, cgroup and
//! container) that sends on a local TCP endpoint, learned from the kernel by
//! `src/ebpf/owners.bpf.c` (`sock_send_length`, in the sender's own context)
//! into an LRU map of 8,192 endpoints. watch reads the map only when a
//! finding names an endpoint: no ptrace, no /proc scan per packet.

use crate::record::watch::Owner;
use aya::maps::{HashMap as BpfHash, MapData};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// `struct key` in owners.bpf.c.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Key {
    family: u16,
    port: u16,
    addr: [u8; 16],
}

/// `struct owner` in owners.bpf.c.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Value {
    cgroup: u64,
    seen_ns: u64,
    tgid: u32,
    pad: u32,
    comm: [u8; 16],
}

// SAFETY: plain integers and byte arrays, no padding the kernel could leave undefined (sizes 20 and 40).
unsafe impl aya::Pod for Key {}
// SAFETY: as above.
unsafe impl aya::Pod for Value {}

/// Most cgroup ids whose path is remembered.
const CGROUP_CACHE: usize = 1024;

/// The attached program and its map; dropping it detaches the program.
pub struct Owners {
    map: BpfHash<MapData, Key, Value>,
    cgroups: HashMap<u64, Option<String>>,
    _bpf: aya::Ebpf,
}

impl Owners {
    /// Loads and attaches the program; Err says why there will be no process labels.
    pub fn start() -> Result<Owners, String> {
        let mut bpf = crate::ebpf::load(crate::ebpf::OWNERS_OBJ, &[], &[("owner_send", "sock_send_length")])?;
        let map = bpf.take_map("owners").ok_or("the BPF object has no map owners")?;
        let map = BpfHash::try_from(map).map_err(|e| format!("BPF map: {e}"))?;
        Ok(Owners { map, cgroups: HashMap::new(), _bpf: bpf })
    }

    /// The process that last sent on local endpoint `ip:port`, if the kernel saw one.
    pub fn lookup(&mut self, endpoint: &str) -> Option<Owner> {
        let a: SocketAddr = endpoint.parse().ok()?;
        let mut k = Key { family: 0, port: a.port(), addr: [0; 16] };
        match a.ip() {
            IpAddr::V4(v4) => {
                k.family = libc::AF_INET as u16;
                k.addr[..4].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                // A v4-mapped address is a v4 socket to the kernel only if it was bound so; try both.
                Some(v4) => {
                    k.family = libc::AF_INET as u16;
                    k.addr[..4].copy_from_slice(&v4.octets());
                }
                None => {
                    k.family = libc::AF_INET6 as u16;
                    k.addr = v6.octets();
                }
            },
        }
        let v = self.map.get(&k, 0).ok()?;
        let comm = String::from_utf8_lossy(v.comm.split(|&b| b == 0).next().unwrap_or(&[])).into_owned();
        let cgroup = self.cgroup_path(v.cgroup);
        let container = cgroup.as_deref().and_then(container_id);
        Some(Owner { pid: v.tgid, comm, cgroup, container })
    }

    /// A cgroup v2 id is its directory's inode under /sys/fs/cgroup: found
    /// once per id by walking the tree (when a stall names it), then cached.
    fn cgroup_path(&mut self, id: u64) -> Option<String> {
        if let Some(p) = self.cgroups.get(&id) {
            return p.clone();
        }
        let p = find_cgroup(std::path::Path::new("/sys/fs/cgroup"), id, 0).filter(|p| p != "/");
        if self.cgroups.len() >= CGROUP_CACHE {
            self.cgroups.clear();
        }
        self.cgroups.insert(id, p.clone());
        p
    }
}

/// The directory under `dir` whose inode is `id`, as a path from the cgroup root.
fn find_cgroup(dir: &std::path::Path, id: u64, depth: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(dir).ok()?.ino() == id {
        let rel = dir.strip_prefix("/sys/fs/cgroup").ok()?;
        return Some(format!("/{}", rel.display()));
    }
    if depth >= 16 {
        return None;
    }
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir())
            && let Some(p) = find_cgroup(&e.path(), id, depth + 1)
        {
            return Some(p);
        }
    }
    None
}

/// A container id in a cgroup path: `docker-<64 hex>.scope`, `cri-containerd-…`,
/// `crio-…`, `libpod-…`, or a bare 64-hex component (`/docker/<id>`).
pub fn container_id(path: &str) -> Option<String> {
    path.rsplit('/').find_map(|part| {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let id = part.rsplit('-').next().unwrap_or(part);
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id[..12].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_come_from_the_common_cgroup_layouts() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        for p in [
            format!("/system.slice/docker-{id}.scope"),
            format!("/kubepods.slice/kubepods-burstable.slice/cri-containerd-{id}.scope"),
            format!("/machine.slice/libpod-{id}.scope/container"),
            format!("/docker/{id}"),
        ] {
            assert_eq!(container_id(&p).as_deref(), Some("0123456789ab"), "{p}");
        }
        assert_eq!(container_id("/system.slice/nginx.service"), None);
        assert_eq!(container_id("/user.slice/user-0.slice/session-3.scope"), None);
    }

    #[test]
    fn the_key_and_value_layouts_match_the_program() {
        assert_eq!(std::mem::size_of::<Key>(), 20);
        assert_eq!(std::mem::size_of::<Value>(), 40);
    }
}
