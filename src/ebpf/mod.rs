//! eBPF: the objects tcpdoctor embeds, loading them, and why they would not load.
//!
//! The programs' C source is beside this file (`trace.bpf.c` for `inspect
//! --trace`, `owners.bpf.c` for `watch`'s process labels, `kernel.h` the
//! kernel types they read). `scripts/build-bpf.sh` compiles them with clang
//! into the checked-in `.bpf.o` objects, so building tcpdoctor needs no
//! clang; a unit test fails when an object is not the build of its source.
//! Loading is aya's (pure Rust): CO-RE relocations against the running
//! kernel's BTF, then tracepoints attached by name, raw or BTF-typed
//! (`tp_btf`; no tracefs, no kprobes). Every program is attached through a link that lives in a file
//! descriptor of this process only (nothing is pinned): when tcpdoctor
//! ends, however it ends, the kernel detaches them.

use aya::programs::Program;
use aya::{Btf, Ebpf, EbpfLoader};

/// `inspect --trace`'s programs.
pub(crate) static TRACE_OBJ: &[u8] = aya::include_bytes_aligned!("trace.bpf.o");
/// `watch`'s owner programs.
pub(crate) static OWNERS_OBJ: &[u8] = aya::include_bytes_aligned!("owners.bpf.o");

/// Loads `obj` with its `(name, value)` constants set and attaches each
/// `(program, raw tracepoint)`; the error is why eBPF cannot be used here, in words.
pub(crate) fn load(obj: &[u8], consts: &[(&str, u8)], attach: &[(&str, &str)]) -> Result<Ebpf, String> {
    load_with(obj, consts, attach, &[])
}

/// [`load`], and also loads (verifies) the BTF tracepoint programs `later`
/// without attaching them: the caller attaches and detaches them.
pub(crate) fn load_with(
    obj: &[u8],
    consts: &[(&str, u8)],
    attach: &[(&str, &str)],
    later: &[(&str, &str)],
) -> Result<Ebpf, String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("the eBPF programs are built for x86_64 only".into());
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err("the kernel has no BTF (/sys/kernel/btf/vmlinux: CONFIG_DEBUG_INFO_BTF off)".into());
    }
    // Without the capabilities, say so without calling bpf(): a sandbox that
    // filters it (the systemd unit) must not see the call at all.
    if !may_load_bpf() {
        return Err("not permitted: this process lacks CAP_BPF and CAP_PERFMON (needs root, or both)".into());
    }
    raise_memlock();
    let mut loader = EbpfLoader::new();
    for (name, value) in consts {
        loader.override_global(name, value, true);
    }
    let mut bpf = loader.load(obj).map_err(|e| why("loading the BPF object", &error_chain(&e)))?;
    let mut btf = None;
    let all = attach.iter().map(|p| (p, true)).chain(later.iter().map(|p| (p, false)));
    for (&(prog, tp), now) in all {
        let loading = |e: &dyn std::error::Error| why(&format!("loading {prog}"), &error_chain(e));
        let attaching =
            |e: &dyn std::error::Error| why(&format!("attaching {prog} to the {tp} tracepoint"), &error_chain(e));
        match bpf.program_mut(prog) {
            Some(Program::RawTracePoint(p)) if now => {
                p.load().map_err(|e| loading(&e))?;
                p.attach(tp).map_err(|e| attaching(&e))?;
            }
            // BTF-typed: the kernel's types say what each argument is.
            Some(Program::BtfTracePoint(p)) => {
                if btf.is_none() {
                    btf = Some(Btf::from_sys_fs().map_err(|e| why("reading the kernel's BTF", &error_chain(&e)))?);
                }
                p.load(tp, btf.as_ref().expect("read above")).map_err(|e| loading(&e))?;
                if now {
                    p.attach().map_err(|e| attaching(&e))?;
                }
            }
            Some(Program::RawTracePoint(_)) => {
                return Err(format!("the BPF object's program {prog} is a raw tracepoint: attached at load only"));
            }
            Some(_) => return Err(format!("the BPF object's program {prog} is not a tracepoint program")),
            None => return Err(format!("the BPF object has no program {prog}")),
        }
    }
    Ok(bpf)
}

/// Whether the effective capabilities allow loading tracing programs: CAP_BPF
/// and CAP_PERFMON, or CAP_SYS_ADMIN (which covers both).
fn may_load_bpf() -> bool {
    const SYS_ADMIN: u32 = 21;
    const PERFMON: u32 = 38;
    const BPF: u32 = 39;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(eff) =
        status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    else {
        // Unknown: let the kernel decide.
        return true;
    };
    let has = |c: u32| eff & (1 << c) != 0;
    has(SYS_ADMIN) || (has(BPF) && has(PERFMON))
}

/// An error and its causes, as one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

/// The cause in words: missing privileges, a locked-down kernel, or the error itself.
fn why(step: &str, err: &str) -> String {
    let lock = std::fs::read_to_string("/sys/kernel/security/lockdown").unwrap_or_default();
    if lock.contains("[confidentiality]") {
        return format!(
            "{step}: the kernel is locked down (confidentiality), which forbids reading kernel memory from BPF"
        );
    }
    let denied = err.contains("Operation not permitted") || err.contains("Permission denied") || err.contains("EPERM");
    if denied {
        return format!("{step}: not permitted (needs root, or CAP_BPF and CAP_PERFMON)");
    }
    let line: String = err.lines().next().unwrap_or(err).chars().take(300).collect();
    format!("{step}: {line}")
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; raise ours (only ours) as far as allowed.
fn raise_memlock() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on our own process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &r);
        }
    }
}

/// CLOCK_MONOTONIC now, ns: the clock `bpf_ktime_get_ns` reads.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use ring::digest::{SHA256, digest};
    use std::path::Path;

    /// The checked-in objects are the build of the current sources:
    /// `scripts/build-bpf.sh` records both in SOURCES.sha256.
    #[test]
    fn objects_are_built_from_the_current_source() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ebpf");
        let list = std::fs::read_to_string(dir.join("SOURCES.sha256")).unwrap();
        let mut names = Vec::new();
        for line in list.lines() {
            let (want, name) = line.split_once("  ").unwrap();
            let bytes = std::fs::read(dir.join(name)).unwrap();
            let got: String = digest(&SHA256, &bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, want, "src/ebpf/{name} changed since scripts/build-bpf.sh last ran: run it");
            names.push(name);
        }
        // Every source is listed, so a new one cannot slip past.
        for e in std::fs::read_dir(&dir).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            if n.ends_with(".c") || n.ends_with(".h") || n.ends_with(".o") {
                assert!(names.contains(&n.as_str()), "src/ebpf/{n} is not in SOURCES.sha256: run scripts/build-bpf.sh");
            }
        }
        // The embedded bytes are those files.
        assert_eq!(super::TRACE_OBJ, std::fs::read(dir.join("trace.bpf.o")).unwrap());
        assert_eq!(super::OWNERS_OBJ, std::fs::read(dir.join("owners.bpf.o")).unwrap());
    }

    /// Both objects load and attach on this kernel (root; CI must have it).
    #[test]
    fn the_objects_load_and_attach_here() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var("CI").is_err(), "CI=true: this test needs root");
            eprintln!("skipped: needs root");
            return;
        }
        // inspect --trace's two sets (socket tracepoints, and the syscall fallback), and watch's.
        let sock = &[("trace_send", "sock_send_length"), ("trace_recv", "sock_recv_length")][..];
        let packets = &[("trace_xmit", "net_dev_start_xmit"), ("trace_retransmit", "tcp_retransmit_skb")][..];
        for (obj, consts, progs) in [
            (super::TRACE_OBJ, &[("syscalls", 0u8)][..], [sock, packets].concat()),
            (
                super::TRACE_OBJ,
                &[("syscalls", 1)][..],
                [&[("trace_exit", "sys_exit"), ("trace_drop", "kfree_skb")][..], packets].concat(),
            ),
            (super::OWNERS_OBJ, &[][..], vec![("owner_send", "sock_send_length")]),
        ] {
            let bpf = super::load(obj, consts, &progs).unwrap_or_else(|e| panic!("{e}"));
            drop(bpf);
        }
    }
}
