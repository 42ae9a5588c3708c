//! Named network namespaces, made and removed with `ip netns` (only a
//! root-owned `ip` from the system directories, with a cleared environment),
//! and code or commands run inside one.

use crate::inspect::bounded::run_bounded;
use crate::inspect::host::{SYSTEM_DIRS, system_tool};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Where `ip netns` keeps the named namespaces.
pub const DIR: &str = "/run/netns";

/// Runs the system's `ip` with `args`; the error quotes the command and what `ip` said.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let quoted = format!("`ip {}`", args.join(" "));
    let bin = system_tool("ip", &SYSTEM_DIRS)
        .ok_or_else(|| format!("{quoted}: no root-owned `ip` in {} (install iproute2)", SYSTEM_DIRS.join(", ")))?;
    let mut cmd = Command::new(bin);
    cmd.args(args).env_clear().env("LANG", "C");
    let (status, _, err) = run_bounded(&mut cmd, Duration::from_secs(10)).map_err(|e| format!("{quoted}: {e}"))?;
    if !status.success() {
        return Err(format!("{quoted}: {}", err.trim()));
    }
    Ok(())
}

/// A named network namespace made here; deleted when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Makes namespace `name` (`ip netns add`) with its `lo` up. A name
    /// already taken is an error, never reused.
    pub fn create(name: &str) -> Result<Netns, String> {
        let plain = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            return Err(format!("{name:?}: a namespace name is 1-64 letters, digits, '-' or '_'"));
        }
        if std::path::Path::new(DIR).join(name).exists() {
            return Err(format!("network namespace {name} already exists (`ip netns del {name}` removes it)"));
        }
        ip(&["netns", "add", name])?;
        let ns = Netns { name: name.to_string() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file that names it (`/run/netns/NAME`).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(DIR).join(&self.name)
    }

    fn open(&self) -> Result<File, String> {
        File::open(self.path()).map_err(|e| format!("{}: {e}", self.path().display()))
    }

    /// `ip -n NAME args`.
    pub fn ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Runs `f` on a thread inside the namespace: sockets and TAP devices it
    /// creates belong to the namespace (and keep working from any thread).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, String> {
        let file = self.open()?;
        let name = &self.name;
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on a descriptor we own; CLONE_NEWNET moves only this thread.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(format!("cannot enter network namespace {name}: {}", io::Error::last_os_error()));
                }
                Ok(f())
            })
            .join()
            .unwrap_or_else(|_| Err(format!("a thread in network namespace {name} panicked")))
        })
    }

    /// A command that runs `program` inside the namespace (as `ip netns exec`
    /// does for the network; mounts are left as they are).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Result<Command, String> {
        let file = self.open()?;
        let mut cmd = Command::new(program);
        // SAFETY: setns is async-signal-safe and changes only the child.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(cmd)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// The namespaces `PREFIX-PID` whose process no longer exists (left by a
/// run that was killed): deleted; returns their names. One whose PID is
/// alive is left alone, even if the PID was reused.
pub fn remove_leftovers(prefix: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(DIR) else { return Vec::new() };
    let mut gone = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid != std::process::id()
            && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            && ip(&["netns", "del", &name]).is_ok()
        {
            gone.push(name);
        }
    }
    gone.sort();
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_plain_are_refused_before_any_command() {
        for bad in ["", "a/b", "../x", "a b", &"x".repeat(65)] {
            let e = Netns::create(bad).unwrap_err();
            assert!(e.contains("a namespace name is"), "{bad:?}: {e}");
        }
    }
}
