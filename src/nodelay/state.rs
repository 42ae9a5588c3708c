//! The state file: each socket's TCP_NODELAY from before `nodelay` changed
//! it, written before the first change, so that `restore` works after Ctrl-C,
//! a kill or a crash. One file per process, named by its pid and start time
//! (a later process that reuses the pid is never "restored"), in a directory
//! only this user may enter: /run/tcpdoctor for root, else
//! $XDG_RUNTIME_DIR/tcpdoctor. Files are written beside their name and renamed
//! into place, through the directory's own descriptor (/proc/self/fd/N), so a
//! directory swapped in after the checks is never written.

use crate::output::OutputFile;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The largest state file read: ~150 bytes a socket, so ~400,000 sockets.
const MAX_STATE: u64 = 64 << 20;

/// What `restore` needs to put a process's sockets back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Saved {
    /// The format's version.
    pub schema: u32,
    /// The process (the one `nodelay` was given, or that listens on the port).
    pub pid: u32,
    /// Its start time (clock ticks after boot, /proc/PID/stat field 22).
    pub start_time: u64,
    /// Its name then.
    pub comm: String,
    /// The port named (`:PORT`), if one was.
    pub port: Option<u16>,
    /// Every socket changed, in the order they were found.
    pub sockets: Vec<SavedSocket>,
}

/// One socket `nodelay` changed (or was about to).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SavedSocket {
    /// The process holding it, and its descriptor there.
    pub pid: u32,
    pub fd: i32,
    /// The socket's inode: what identifies it, whoever holds it.
    pub inode: u64,
    /// A listening socket (the others are connections accepted on one).
    pub listening: bool,
    pub local: String,
    pub peer: String,
    /// TCP_NODELAY before tcpdoctor first changed it.
    pub previous: bool,
    /// The value tcpdoctor set last.
    pub set: bool,
    /// Whether that value was set: false while the file is written ahead of
    /// the change (and after a crash before it).
    pub applied: bool,
}

/// The state directory, opened and checked.
pub struct Dir {
    path: PathBuf,
    dir: File,
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

impl Dir {
    /// This user's state directory, created (0700) when missing.
    pub fn open() -> Result<Dir, String> {
        if euid() == 0 {
            return Dir::at(Path::new("/run/tcpdoctor"));
        }
        match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(d) if d.is_absolute() => Dir::at(&d.join("tcpdoctor")),
            _ => Err("no private directory for the state file: $XDG_RUNTIME_DIR is not set (or not absolute); \
set it to a directory only you can enter (root uses /run/tcpdoctor)"
                .into()),
        }
    }

    /// `path` as the state directory: made 0700 if missing; refused when it
    /// is a link, not a directory, another user's, or open to others.
    pub fn at(path: &Path) -> Result<Dir, String> {
        let shown = path.display();
        match fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("state directory {shown}: cannot create it: {e}")),
        }
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| format!("state directory {shown}: cannot open it as a directory (not a link): {e}"))?;
        let m = dir.metadata().map_err(|e| format!("state directory {shown}: {e}"))?;
        let me = euid();
        if m.uid() != me {
            return Err(format!(
                "state directory {shown} belongs to uid {}, not to uid {me}: it cannot be trusted; remove it",
                m.uid()
            ));
        }
        if m.mode() & 0o077 != 0 {
            return Err(format!(
                "state directory {shown} has mode {:04o}: others may enter it; `chmod 700 {shown}` or remove it",
                m.mode() & 0o7777
            ));
        }
        Ok(Dir { path: path.to_path_buf(), dir })
    }

    /// Holds the directory's lock (one `nodelay` change at a time) until the
    /// guard is dropped; gives up after 5 s.
    pub fn lock(&self) -> Result<Lock<'_>, String> {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(self.dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Lock(self));
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(format!("state directory {}: cannot lock it: {e}", self.path.display()));
            }
            if Instant::now() > until {
                return Err(format!(
                    "state directory {}: another tcpdoctor has held its lock for 5 s; try again",
                    self.path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn name(pid: u32, start: u64) -> String {
        format!("{pid}-{start}.json")
    }

    /// The file's name as shown to people.
    pub fn shown(&self, pid: u32, start: u64) -> PathBuf {
        self.path.join(Dir::name(pid, start))
    }

    /// The same file, reached through the directory's descriptor.
    fn via(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.dir.as_raw_fd()))
    }

    /// The saved state of process (`pid`, `start`), if any.
    pub fn load(&self, pid: u32, start: u64) -> Result<Option<Saved>, String> {
        let shown = self.shown(pid, start);
        let path = self.via(&Dir::name(pid, start));
        let m = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", shown.display())),
        };
        if !m.is_file() || m.uid() != euid() {
            return Err(format!("{}: not a file of this user; remove it", shown.display()));
        }
        let bytes = crate::input::read_bounded(&path, MAX_STATE).map_err(|e| match e {
            crate::input::ReadError::Io(e) => format!("{}: {e}", shown.display()),
            crate::input::ReadError::TooLarge => {
                format!("{}: over 64 MiB, not a state file; remove it", shown.display())
            }
        })?;
        let s: Saved = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a tcpdoctor state file ({e}); remove it", shown.display()))?;
        if (s.pid, s.start_time) != (pid, start) {
            return Err(format!("{}: holds the state of another process; remove it", shown.display()));
        }
        Ok(Some(s))
    }

    /// Writes `s` (beside its name, then renamed into place); returns its name.
    pub fn save(&self, s: &Saved) -> Result<PathBuf, String> {
        let shown = self.shown(s.pid, s.start_time);
        let fail = |e: std::io::Error| format!("{}: cannot write it: {e}; nothing was changed", shown.display());
        let mut f = OutputFile::create(&self.via(&Dir::name(s.pid, s.start_time))).map_err(fail)?;
        let text = serde_json::to_vec_pretty(s).map_err(|e| fail(std::io::Error::other(e)))?;
        f.write_all(&text).map_err(fail)?;
        f.commit_private().map_err(fail)?;
        Ok(shown)
    }

    /// Removes the state of (`pid`, `start`).
    pub fn remove(&self, pid: u32, start: u64) -> Result<(), String> {
        match fs::remove_file(self.via(&Dir::name(pid, start))) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("{}: cannot remove it: {e}", self.shown(pid, start).display())),
        }
    }

    /// Start times of the states saved for `pid` (more than one only when
    /// the pid was reused).
    pub fn saved_for(&self, pid: u32) -> Vec<u64> {
        let Ok(d) = fs::read_dir(self.via("")) else { return Vec::new() };
        let prefix = format!("{pid}-");
        let mut v: Vec<u64> = d
            .filter_map(|e| {
                let n = e.ok()?.file_name().into_string().ok()?;
                n.strip_prefix(&prefix)?.strip_suffix(".json")?.parse().ok()
            })
            .collect();
        v.sort_unstable();
        v
    }
}

/// The held lock of a [`Dir`].
pub struct Lock<'a>(&'a Dir);

impl Drop for Lock<'_> {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor the directory owns.
        unsafe { libc::flock(self.0.dir.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn saved(pid: u32, start: u64) -> Saved {
        Saved {
            schema: 1,
            pid,
            start_time: start,
            comm: "x".into(),
            port: Some(80),
            sockets: vec![SavedSocket {
                pid,
                fd: 3,
                inode: 99,
                listening: true,
                local: "127.0.0.1:80".into(),
                peer: "*:*".into(),
                previous: false,
                set: true,
                applied: false,
            }],
        }
    }

    #[test]
    fn made_private_written_by_rename_and_read_back() {
        let base = tempfile::tempdir().unwrap();
        let path = base.path().join("tcpdoctor");
        let d = Dir::at(&path).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o700);
        assert!(d.load(7, 11).unwrap().is_none());
        let _l = d.lock().unwrap();
        let shown = d.save(&saved(7, 11)).unwrap();
        assert_eq!(shown, path.join("7-11.json"));
        assert_eq!(fs::metadata(&shown).unwrap().mode() & 0o777, 0o600, "only its owner reads it");
        let back = d.load(7, 11).unwrap().unwrap();
        assert_eq!((back.sockets[0].inode, back.sockets[0].set), (99, true));
        // Only the file: no temporary one left beside it.
        let names: Vec<_> = fs::read_dir(&path).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["7-11.json"]);
        assert_eq!(d.saved_for(7), [11]);
        assert!(d.saved_for(71).is_empty());
        // Another process's state under this name is refused, not used.
        fs::write(path.join("8-1.json"), serde_json::to_vec(&saved(7, 11)).unwrap()).unwrap();
        assert!(d.load(8, 1).unwrap_err().contains("another process"));
        fs::write(path.join("8-2.json"), "{").unwrap();
        assert!(d.load(8, 2).unwrap_err().contains("not a tcpdoctor state file"));
        d.remove(7, 11).unwrap();
        assert!(d.load(7, 11).unwrap().is_none());
    }

    #[test]
    fn a_directory_open_to_others_or_a_link_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let wide = base.path().join("wide");
        fs::create_dir(&wide).unwrap();
        fs::set_permissions(&wide, fs::Permissions::from_mode(0o755)).unwrap();
        let e = Dir::at(&wide).err().unwrap();
        assert!(e.contains("mode 0755") && e.contains("chmod 700"), "{e}");
        let link = base.path().join("link");
        std::os::unix::fs::symlink(base.path(), &link).unwrap();
        let e = Dir::at(&link).err().unwrap();
        assert!(e.contains("not a link"), "{e}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let theirs = base.path().join("theirs");
            fs::create_dir(&theirs).unwrap();
            fs::set_permissions(&theirs, fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
            let e = Dir::at(&theirs).err().unwrap();
            assert!(e.contains("belongs to uid 65534, not to uid 0"), "{e}");
        }
        let file = base.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(Dir::at(&file).is_err());
    }

    #[test]
    fn the_lock_is_exclusive() {
        let base = tempfile::tempdir().unwrap();
        let a = Dir::at(&base.path().join("d")).unwrap();
        let b = Dir::at(&base.path().join("d")).unwrap();
        let held = a.lock().unwrap();
        let t = Instant::now();
        let e = b.lock().err().unwrap();
        assert!(e.contains("held its lock") && t.elapsed() >= Duration::from_secs(5), "{e}");
        drop(held);
        assert!(b.lock().is_ok());
    }
}
