//! Where results go. Standard output remembers its first failure, so a
//! command can end with it instead of exiting 0 after losing its report; a
//! closed pipe (`| head`) only marks it closed, so long runs stop quietly.
//! Output files are written to a fresh temporary file beside the target and
//! renamed into place when complete: a failed run never leaves an empty or
//! half file, and a symlink planted at the name is replaced, not followed.

use std::fs::Permissions;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED: AtomicBool = AtomicBool::new(false);
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

/// Writes `s` to standard output and flushes. After a failure it writes
/// nothing more; the failure is kept for [`failure`].
pub fn print(s: &str) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        note(&e);
    }
}

/// Records a failed write to standard output.
fn note(e: &io::Error) {
    CLOSED.store(true, Ordering::Relaxed);
    if e.kind() != io::ErrorKind::BrokenPipe {
        let mut f = FAILURE.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert_with(|| e.to_string());
    }
}

/// Whether standard output can no longer be written (closed pipe or error).
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// The first write error other than a closed pipe, in words.
pub fn failure() -> Option<String> {
    FAILURE.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Standard output as a [`Write`] for code that takes one (watch's lines):
/// the same bookkeeping as [`print()`]; once closed, writes fail with the error.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if closed() {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        io::stdout().lock().write(buf).inspect_err(note)
    }
    fn flush(&mut self) -> io::Result<()> {
        if closed() {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        io::stdout().lock().flush().inspect_err(note)
    }
}

/// A file being written: bytes go to a temporary file in the target's
/// directory; [`OutputFile::commit`] renames it into place. Dropped without a
/// commit, the temporary file is removed and the target is untouched.
pub struct OutputFile {
    path: PathBuf,
    tmp: BufWriter<tempfile::NamedTempFile>,
}

impl OutputFile {
    /// Creates the temporary file now, so a path that cannot be written fails
    /// before any work is done. The temporary name is `.NAME.XXXXXX.tmp`.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        let name = path.file_name().ok_or_else(|| io::Error::other("names a directory, not a file"))?;
        if path.is_dir() {
            return Err(io::Error::other("is a directory"));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(plain)?;
        Ok(OutputFile { path: path.to_path_buf(), tmp: BufWriter::with_capacity(1 << 16, tmp) })
    }

    /// The name it will have.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes, gives the file the mode a plain create would (0666 less the
    /// umask; the temporary file is 0600), and renames it over the target.
    pub fn commit(self) -> io::Result<()> {
        self.commit_mode(0o666 & !umask())
    }

    /// As [`OutputFile::commit`], keeping the file 0600: for files only their
    /// owner should read (state saved about another process).
    pub fn commit_private(self) -> io::Result<()> {
        self.commit_mode(0o600)
    }

    fn commit_mode(self, mode: u32) -> io::Result<()> {
        let tmp = self.tmp.into_inner().map_err(|e| e.into_error())?;
        tmp.as_file().set_permissions(Permissions::from_mode(mode))?;
        tmp.persist(&self.path).map(drop).map_err(|e| e.error)
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tmp.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

/// The OS error without tempfile's ` at path "…"` (a random name that means
/// nothing to the reader: the message names the target instead).
fn plain(e: io::Error) -> io::Error {
    match e.to_string().split_once(" at path \"") {
        Some((what, _)) => io::Error::new(e.kind(), what.to_string()),
        None => e,
    }
}

/// This process's umask, read without changing it (`umask(2)` can only set
/// it, which would race with other threads creating files).
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").map(|v| v.trim().to_string())))
        .and_then(|v| u32::from_str_radix(&v, 8).ok())
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn commits_by_rename_and_leaves_nothing_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("r.html");
        std::fs::write(&target, "old report").unwrap();
        // Dropped without commit: the old file is untouched and no temporary is left.
        let mut f = OutputFile::create(&target).unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old report");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A symlink at the name is replaced, and what it pointed at is not written.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let link = dir.path().join("out.pcap");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let mut f = OutputFile::create(&link).unwrap();
        f.write_all(b"new").unwrap();
        f.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        let meta = std::fs::symlink_metadata(&link).unwrap();
        assert!(meta.is_file(), "the link was replaced by a file");
        assert_eq!(meta.mode() & 0o777, 0o666 & !umask());
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "new");
        assert!(OutputFile::create(dir.path()).is_err());
        assert!(OutputFile::create(&dir.path().join("no/such/dir/f")).is_err());
    }
}
