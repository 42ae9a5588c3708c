//! Runs a target's own executable (`nginx -T`, `node --version`) as the
//! target itself: its effective uid and gid, its groups, at most its
//! capabilities, no new privileges, its root and working directory, a clean
//! environment. The executable is the one the kernel says the target runs,
//! opened by descriptor, so no path can be swapped in between. tcpdoctor runs
//! as root; a program the target chose must never run with more than the
//! target has. When the switch is impossible (tcpdoctor not root and a
//! different user) or any step of it fails, nothing runs.

use super::bounded::run_bounded;
use super::sockopt::Pidfd;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;

/// The environment the helper gets: nothing of ours, nothing of the target's.
const ENV: [&str; 2] = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"];

/// Who a process is, from /proc/PID/status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Creds {
    /// Effective uid and gid: what it acts as now. The helper gets these as
    /// real, effective and saved ids, so it cannot switch to anything else.
    pub uid: u32,
    pub gid: u32,
    /// Its real, effective, saved and filesystem ids are not all one uid and
    /// one gid: a set-user-ID program, or one in the middle of changing users.
    pub mixed: bool,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// Capability sets (bit n = capability n).
    pub cap_prm: u64,
    pub cap_eff: u64,
    pub cap_bnd: u64,
}

/// The credentials in /proc/PID/status text.
pub(crate) fn parse_status(text: &str) -> Result<Creds, String> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .ok_or_else(|| format!("no {name} line in its status"))
    };
    // Real, effective, saved, filesystem.
    let ids = |name: &str| -> Result<Vec<u32>, String> {
        let v = field(name)?;
        let ids: Vec<u32> = v.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if ids.len() == 4 { Ok(ids) } else { Err(format!("bad {name} line: {v:?}")) }
    };
    let (uids, gids) = (ids("Uid")?, ids("Gid")?);
    let caps = |name: &str| -> Result<u64, String> {
        let v = field(name)?.trim();
        u64::from_str_radix(v, 16).map_err(|_| format!("bad {name} line: {v:?}"))
    };
    let groups = field("Groups")?
        .split_whitespace()
        .map(|g| g.parse().map_err(|_| format!("bad Groups entry {g:?}")))
        .collect::<Result<Vec<u32>, String>>()?;
    Ok(Creds {
        uid: uids[1],
        gid: gids[1],
        mixed: uids.iter().any(|&u| u != uids[1]) || gids.iter().any(|&g| g != gids[1]),
        groups,
        cap_prm: caps("CapPrm")?,
        cap_eff: caps("CapEff")?,
        cap_bnd: caps("CapBnd")?,
    })
}

/// A process pinned for running its executable as itself.
pub(crate) struct Target {
    pub creds: Creds,
    /// Capabilities the helper may keep: the target's permitted and bounding
    /// sets, none when the target's capabilities belong to another user namespace.
    keep: u64,
    exe: OwnedFd,
    cwd: OwnedFd,
    /// Its root, when it differs from ours (a container, another mount namespace).
    root: Option<OwnedFd>,
}

fn open_path(path: &str, dir: bool) -> io::Result<OwnedFd> {
    let flags = libc::O_PATH | if dir { libc::O_DIRECTORY } else { 0 };
    // std adds O_CLOEXEC: nothing else we run inherits it.
    Ok(OpenOptions::new().read(true).custom_flags(flags).open(path)?.into())
}

fn same_inode(a: &str, b: &str) -> bool {
    matches!((fs::metadata(a), fs::metadata(b)), (Ok(x), Ok(y)) if (x.dev(), x.ino()) == (y.dev(), y.ino()))
}

/// Whether processes `a` and `b` run the same executable file.
pub(crate) fn same_executable(a: u32, b: u32) -> bool {
    same_inode(&format!("/proc/{a}/exe"), &format!("/proc/{b}/exe"))
}

/// This process's own ids, as the kernel holds them.
fn own_creds() -> (u32, u32, Vec<u32>) {
    // SAFETY: geteuid/getegid have no preconditions; getgroups writes at most
    // `n` entries into a buffer of that size (n from a first call with 0).
    unsafe {
        let n = libc::getgroups(0, std::ptr::null_mut()).max(0);
        let mut g = vec![0 as libc::gid_t; n as usize];
        let got = libc::getgroups(n, g.as_mut_ptr()).max(0);
        g.truncate(got as usize);
        (libc::geteuid(), libc::getegid(), g)
    }
}

fn same_groups(a: &[u32], b: &[u32]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    a.dedup();
    b.sort_unstable();
    b.dedup();
    a == b
}

/// Why tcpdoctor cannot become `target`, if it cannot: only root switches
/// users or enters another root; anyone else runs a helper only for a
/// process that is already exactly itself.
pub(crate) fn cannot_switch(own: (u32, u32, &[u32]), target: &Creds, other_root: bool) -> Option<String> {
    let (uid, gid, groups) = own;
    if uid == 0 {
        return None;
    }
    if other_root {
        return Some(format!(
            "it runs in another root directory (a container); only root can enter it (tcpdoctor runs as uid {uid})"
        ));
    }
    if (target.uid, target.gid) != (uid, gid) || !same_groups(groups, &target.groups) {
        return Some(format!(
            "tcpdoctor runs as uid {uid} gid {gid}, the process as uid {} gid {}: only root can run it as the process's user",
            target.uid, target.gid
        ));
    }
    None
}

impl Target {
    /// Pins process `pid` and reads who it is. Err says, in one plain
    /// sentence, why its executable will not be run.
    pub fn pin(pid: u32) -> Result<Target, String> {
        let pidfd = Pidfd::open(pid).map_err(|e| format!("cannot pin the process: {e}"))?;
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
        let creds = parse_status(&status)?;
        let exe = open_path(&format!("/proc/{pid}/exe"), false)
            .map_err(|e| format!("cannot open its executable (/proc/{pid}/exe): {e}"))?;
        // A set-user-ID program runs with ids its caller does not have and
        // decides itself what to do with them (a real uid of 0 would tell it
        // root called): such a process is never run as any of its ids.
        if creds.mixed {
            return Err(
                "its real, effective and saved ids differ (a set-user-ID program?): none of them alone is its own"
                    .into(),
            );
        }
        let mode = File::from(exe.try_clone().map_err(|e| format!("cannot duplicate a descriptor: {e}"))?)
            .metadata()
            .map_err(|e| format!("cannot read its executable's mode: {e}"))?
            .mode();
        if mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            return Err("its executable is set-user-ID or set-group-ID: such a program is never run for it".into());
        }
        let cwd = open_path(&format!("/proc/{pid}/cwd"), true)
            .map_err(|e| format!("cannot open its working directory (/proc/{pid}/cwd): {e}"))?;
        let other_root = !same_inode(&format!("/proc/{pid}/root"), "/")
            || !same_inode(&format!("/proc/{pid}/ns/mnt"), "/proc/self/ns/mnt");
        let root = match other_root {
            true => Some(
                open_path(&format!("/proc/{pid}/root"), true)
                    .map_err(|e| format!("cannot open its root directory (/proc/{pid}/root): {e}"))?,
            ),
            false => None,
        };
        // Its capabilities count only inside its own user namespace.
        let same_userns = same_inode(&format!("/proc/{pid}/ns/user"), "/proc/self/ns/user");
        let keep = if same_userns { creds.cap_prm & creds.cap_bnd } else { 0 };
        // Alive now, so the pid was not reused: everything above was read from it.
        if pidfd.exited() {
            return Err("it exited while it was being read".into());
        }
        let (uid, gid, groups) = own_creds();
        if let Some(why) = cannot_switch((uid, gid, &groups), &creds, other_root) {
            return Err(why);
        }
        Ok(Target { creds, keep, exe, cwd, root })
    }

    /// Runs the target's executable with `args` (`argv[0]` is `name`) as the
    /// target, output captured, killed after `limit`.
    pub fn run(&self, name: &str, args: &[String], limit: Duration) -> io::Result<(ExitStatus, String, String)> {
        let cstr =
            |s: &str| CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in argument"));
        let argv = std::iter::once(name).chain(args.iter().map(String::as_str)).map(cstr).collect::<Result<_, _>>()?;
        let envp = ENV.iter().map(|e| cstr(e)).collect::<Result<_, _>>()?;
        let last_cap: u32 =
            fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40);
        let mut rl = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: rl is a live rlimit struct.
        let fd_limit = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 { rl.rlim_cur } else { 1024 };
        let (_, _, own_groups) = own_creds();
        let plan = Plan::new(PlanParts {
            exe: self.exe.as_raw_fd(),
            cwd: self.cwd.as_raw_fd(),
            root: self.root.as_ref().map(AsRawFd::as_raw_fd),
            uid: self.creds.uid,
            gid: self.creds.gid,
            set_groups: !same_groups(&own_groups, &self.creds.groups),
            groups: self.creds.groups.clone(),
            keep: self.keep,
            eff: self.creds.cap_eff & self.keep,
            last_cap: last_cap.min(63),
            fd_limit: fd_limit.min(1 << 20) as libc::c_uint,
            argv,
            envp,
        });
        // The program named here is never reached: the child executes the
        // pinned descriptor itself, or fails.
        let mut cmd = Command::new("/");
        // SAFETY: the closure runs in the forked child before exec and makes
        // only raw system calls on data prepared before the fork (no
        // allocation, no locks): async-signal-safe.
        unsafe {
            cmd.pre_exec(move || Err(plan.become_target_and_exec()));
        }
        run_bounded(&mut cmd, limit)
    }
}

/// Everything the child needs, prepared before the fork.
struct PlanParts {
    exe: RawFd,
    cwd: RawFd,
    root: Option<RawFd>,
    uid: u32,
    gid: u32,
    set_groups: bool,
    groups: Vec<u32>,
    keep: u64,
    eff: u64,
    last_cap: u32,
    fd_limit: libc::c_uint,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

struct Plan {
    p: PlanParts,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `p`'s CStrings, which the Plan owns and
// never changes; the Plan is only read, in the child.
unsafe impl Send for Plan {}
// SAFETY: as above.
unsafe impl Sync for Plan {}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_V3: u32 = 0x2008_0522;
const CAP_SETPCAP: u32 = 8;

fn ok(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// (effective, permitted) of the calling thread.
fn capget() -> io::Result<(u64, u64)> {
    let mut h = CapHeader { version: CAP_V3, pid: 0 };
    let mut d = [CapData::default(); 2];
    // SAFETY: a v3 header and two data entries, as capget(2) wants.
    ok(unsafe { libc::syscall(libc::SYS_capget, &raw mut h, d.as_mut_ptr()) })?;
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((join(d[0].effective, d[1].effective), join(d[0].permitted, d[1].permitted)))
}

impl Plan {
    fn new(p: PlanParts) -> Plan {
        let ptrs = |v: &[CString]| v.iter().map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        let argv = ptrs(&p.argv);
        let envp = ptrs(&p.envp);
        Plan { p, argv, envp }
    }

    /// In the child: becomes the target, then executes its executable.
    /// Returns only on failure, and then nothing has run.
    fn become_target_and_exec(&self) -> io::Error {
        match self.become_target() {
            Ok(()) => {
                // SAFETY: execveat on the pinned descriptor with NUL-terminated
                // argv/envp arrays of live C strings; "" with AT_EMPTY_PATH
                // means the descriptor itself.
                unsafe {
                    libc::syscall(
                        libc::SYS_execveat,
                        self.p.exe,
                        c"".as_ptr(),
                        self.argv.as_ptr(),
                        self.envp.as_ptr(),
                        libc::AT_EMPTY_PATH,
                    )
                };
                io::Error::last_os_error()
            }
            Err(e) => e,
        }
    }

    fn become_target(&self) -> io::Result<()> {
        let p = &self.p;
        // SAFETY (whole block): raw system calls on descriptors and buffers
        // owned by `self`; each result is checked.
        unsafe {
            // Its root first, while still root: its own config paths and
            // libraries, not ours (a container's nginx reads its /etc/nginx).
            if let Some(root) = p.root {
                ok(libc::fchdir(root).into())?;
                ok(libc::chroot(c".".as_ptr()).into())?;
            }
            // nginx resolves a relative -c/-p against its working directory.
            ok(libc::fchdir(p.cwd).into())?;
            // A uid-0 target with fewer capabilities (a container's root): an
            // exec as uid 0 gets the bounding set, so cut it to the target's.
            if capget()?.0 & (1 << CAP_SETPCAP) != 0 {
                for c in 0..=p.last_cap {
                    if p.keep & (1 << c) == 0 {
                        ok(libc::prctl(libc::PR_CAPBSET_DROP, c as libc::c_ulong, 0, 0, 0).into())?;
                    }
                }
            }
            ok(libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0).into())?;
            // Raw calls: they change this (only) thread, with no libc locking.
            if p.set_groups {
                ok(libc::syscall(libc::SYS_setgroups, p.groups.len(), p.groups.as_ptr()))?;
            }
            ok(libc::syscall(libc::SYS_setresgid, p.gid, p.gid, p.gid))?;
            ok(libc::syscall(libc::SYS_setresuid, p.uid, p.uid, p.uid))?;
            // Whatever the securebits, keep at most the target's capabilities.
            let (eff, prm) = capget()?;
            let (eff, prm) = (eff & p.eff & p.keep, prm & p.keep);
            let lo = |v: u64| v as u32;
            let hi = |v: u64| (v >> 32) as u32;
            let mut h = CapHeader { version: CAP_V3, pid: 0 };
            let d = [
                CapData { effective: lo(eff), permitted: lo(prm), inheritable: 0 },
                CapData { effective: hi(eff), permitted: hi(prm), inheritable: 0 },
            ];
            ok(libc::syscall(libc::SYS_capset, &raw mut h, d.as_ptr()))?;
            // Check what the kernel holds now, not what was asked.
            let (mut r, mut e, mut s) = (0u32, 0u32, 0u32);
            ok(libc::syscall(libc::SYS_getresuid, &raw mut r, &raw mut e, &raw mut s))?;
            let uids_ok = [r, e, s] == [p.uid; 3];
            ok(libc::syscall(libc::SYS_getresgid, &raw mut r, &raw mut e, &raw mut s))?;
            let (eff, prm) = capget()?;
            if !uids_ok || [r, e, s] != [p.gid; 3] || eff & !p.keep != 0 || prm & !p.keep != 0 {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            // No setuid bit or file capability can raise it past this.
            ok(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0).into())?;
            // Nothing of ours leaks in: every descriptor above stdio closes at exec.
            let all =
                libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
            if all < 0 {
                for fd in 3..p.fd_limit as libc::c_int {
                    libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tnginx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t812\nPid:\t812\n\
Uid:\t1000\t33\t33\t33\nGid:\t1000\t34\t34\t34\nFDSize:\t64\nGroups:\t4 24 27 \n\
CapInh:\t0000000000000000\nCapPrm:\t0000000000000400\nCapEff:\t0000000000000400\n\
CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\n";

    #[test]
    fn credentials_from_status_text() {
        let c = parse_status(STATUS).unwrap();
        assert_eq!((c.uid, c.gid, c.mixed), (33, 34, true), "the effective ids; the real ones differ");
        let same = parse_status(&STATUS.replace("Uid:\t1000", "Uid:\t33").replace("Gid:\t1000", "Gid:\t34")).unwrap();
        assert!(!same.mixed);
        assert!(parse_status(&STATUS.replace("Uid:\t1000\t33\t33\t33", "Uid:\t33")).is_err());
        assert_eq!(c.groups, vec![4, 24, 27]);
        assert_eq!((c.cap_prm, c.cap_eff, c.cap_bnd), (0x400, 0x400, 0x1ff_ffff_ffff));
        let none = parse_status(&STATUS.replace("Groups:\t4 24 27 ", "Groups:\t")).unwrap();
        assert!(none.groups.is_empty());
        let e = parse_status(&STATUS.replace("CapPrm:\t0000000000000400", "CapPrm:\tzz")).unwrap_err();
        assert_eq!(e, "bad CapPrm line: \"zz\"");
        assert_eq!(parse_status("Name:\tx\n").unwrap_err(), "no Uid line in its status");
    }

    #[test]
    fn only_root_switches_users() {
        let t = parse_status(STATUS).unwrap();
        assert_eq!(cannot_switch((0, 0, &[]), &t, true), None);
        assert_eq!(cannot_switch((33, 34, &[27, 24, 4]), &t, false), None, "already exactly the target");
        let e = cannot_switch((1000, 1000, &[4, 24, 27]), &t, false).unwrap();
        assert_eq!(
            e,
            "tcpdoctor runs as uid 1000 gid 1000, the process as uid 33 gid 34: only root can run it as the process's user"
        );
        assert!(cannot_switch((33, 34, &[4]), &t, false).is_some(), "other groups");
        assert!(cannot_switch((33, 34, &[4, 24, 27]), &t, true).unwrap().contains("another root directory"));
    }

    /// Whether we are root; with CI=true, not being root fails the test.
    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        assert!(root || std::env::var("CI").as_deref() != Ok("true"), "this test needs root");
        if !root {
            eprintln!("SKIPPED: needs root");
        }
        root
    }

    /// A shell started (by `setpriv`) with `args`, in `dir`; killed by its PID on drop.
    struct Shell(std::process::Child);

    impl Shell {
        fn start(setpriv: &[&str], dir: &std::path::Path) -> Shell {
            let mut c = Command::new("setpriv");
            c.args(setpriv).args(["--", "/bin/sh", "-c", "sleep 30; :"]).current_dir(dir);
            let s = Shell(c.stdin(std::process::Stdio::null()).spawn().expect("setpriv"));
            // Wait until setpriv has become the shell.
            let exe = format!("/proc/{}/exe", s.0.id());
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while fs::read_link(&exe).is_ok_and(|p| p.ends_with("setpriv")) && std::time::Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            s
        }

        /// What its own executable, run as it, says about itself.
        fn report(&self) -> String {
            let t = Target::pin(self.0.id()).unwrap();
            let script = "grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status; \
pwd; env | sort; ls /proc/self/fd | tr '\\n' ' '";
            let (st, out, err) = t.run("sh", &["-c".into(), script.into()], Duration::from_secs(5)).unwrap();
            assert!(st.success(), "{err}");
            out
        }
    }

    impl Drop for Shell {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// As root: a nobody process's executable runs as nobody, with no
    /// capabilities, no new privileges, in its directory, with a clean
    /// environment and only stdio open (`ls` adds its own fd 3).
    #[test]
    fn runs_as_the_target_user() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
        let sh = Shell::start(&["--reuid=65534", "--regid=65534", "--clear-groups"], dir.path());
        let out = sh.report();
        for want in [
            "Uid:\t65534\t65534\t65534\t65534",
            "Gid:\t65534\t65534\t65534\t65534",
            "Groups:\t \n",
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "CapAmb:\t0000000000000000",
            "NoNewPrivs:\t1",
            "\nLANG=C\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nPWD=",
            "\n0 1 2 3 ",
        ] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        let cwd = fs::canonicalize(dir.path()).unwrap();
        assert!(out.contains(&format!("\n{}\n", cwd.display())), "{out}");
        assert!(!out.contains("RUST") && !out.contains("CARGO"), "our environment leaked: {out}");
    }

    /// As root: a root process with only CAP_NET_BIND_SERVICE (a container's
    /// root) gets its executable run with no more than that.
    #[test]
    fn a_reduced_root_keeps_only_its_capabilities() {
        if !root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let sh = Shell::start(&["--bounding-set=-all,+net_bind_service"], dir.path());
        let status = fs::read_to_string(format!("/proc/{}/status", sh.0.id())).unwrap();
        assert_eq!(parse_status(&status).unwrap().cap_prm, 1 << 10, "{status}");
        let out = sh.report();
        for want in ["Uid:\t0\t0\t0\t0", "CapPrm:\t0000000000000400", "CapBnd:\t0000000000000400", "NoNewPrivs:\t1"] {
            assert!(out.contains(want), "{want:?} not in:\n{out}");
        }
        assert!(!out.contains("CapEff:\t000001ff"), "{out}");
    }
}
