//! Where a walk's bytes come from: a slice (a mapped file or bytes in
//! memory) or a stream (standard input, a FIFO or a device) read into a
//! bounded buffer. Both offer the bytes at
//! the read position the same way, so one parser serves both; only a stream
//! can answer "need more bytes".

use super::{Mapped, WINDOW};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

/// A stream's buffer starts at this size and grows only for one record larger
/// than it (bounded by the formats' record limits: 256 KiB pcap, 16 MiB pcapng).
pub(crate) const STREAM_BUFFER: usize = 1 << 20;
/// How often a blocked read looks at the stop flag.
const POLL_MS: libc::c_int = 100;

/// A stream's input.
pub(crate) enum Input {
    /// A file descriptor: reads wait in poll(2), so Ctrl-C is noticed.
    File(std::fs::File),
    /// Any reader (tests, fuzzing): the stop flag is looked at between reads.
    Reader(Box<dyn Read + Send>),
}

/// What a walk says of a file that now ends at `size`, before the record it was reading.
fn shrank(size: u64) -> String {
    format!("the file shrank to {size} bytes while being read (truncated at offset {size})")
}

pub(crate) struct Stream {
    input: Input,
    buf: Vec<u8>,
    /// Unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// Offset in the input of `buf[0]`.
    base: u64,
    eof: bool,
}

/// How a refill ended.
pub(crate) enum Fill {
    /// The bytes asked for are there, or the input ended.
    Done,
    /// The stop flag was raised while waiting.
    Stopped,
    /// Reading failed.
    Failed(std::io::Error),
}

impl Stream {
    /// A stream read through a buffer of `size` bytes (at least 1).
    pub(crate) fn new(input: Input, size: usize) -> Stream {
        if let Input::File(f) = &input {
            widen_pipe(f, size);
        }
        Stream { input, buf: vec![0; size.max(1)], start: 0, end: 0, base: 0, eof: false }
    }

    /// Reads until `need` unread bytes are buffered or the input ends.
    fn refill(&mut self, need: usize, stop: Option<&AtomicBool>) -> Fill {
        if self.start + need > self.buf.len() {
            // Move the partial record to the front; grow only if it cannot fit at all.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.base += self.start as u64;
            self.start = 0;
            if need > self.buf.len() {
                self.buf.resize(need, 0);
            }
        }
        while self.end - self.start < need && !self.eof {
            if let Some(s) = stop {
                if s.load(Ordering::Relaxed) {
                    return Fill::Stopped;
                }
                if let Input::File(f) = &self.input
                    && !readable(f)
                {
                    continue;
                }
            }
            let r = match &mut self.input {
                Input::File(f) => f.read(&mut self.buf[self.end..]),
                Input::Reader(r) => r.read(&mut self.buf[self.end..]),
            };
            match r {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Fill::Failed(e),
            }
        }
        Fill::Done
    }
}

/// The bytes of a walk.
pub(crate) enum Source<'a> {
    Slice(Slice<'a>),
    Stream(Stream),
}

/// What the walk needs from its bytes; implemented by [`Slice`] and
/// [`Stream`], so each walk is compiled for its own kind (no per-record dispatch).
pub(crate) trait Bytes {
    /// The unread bytes, and whether no more will come.
    fn peek(&self) -> (&[u8], bool);
    /// Offset in the input of the first unread byte.
    fn offset(&self) -> u64;
    /// Index in [`Bytes::storage`] of the first unread byte.
    fn cursor(&self) -> usize;
    /// The bytes that [`Bytes::cursor`] indexes.
    fn storage(&self) -> &[u8];
    fn consume(&mut self, n: usize);
    /// Makes `need` unread bytes available if the input has them.
    fn fill(&mut self, need: usize, stop: Option<&AtomicBool>) -> Fill;
    /// Whether the record ending at storage index `end` is still the input's.
    fn check(&mut self, end: usize) -> Result<(), String>;
    /// Whether the reader entered a new window of a mapped file (then mapped ahead of it).
    fn next_window(&mut self) -> bool;
}

impl Bytes for Stream {
    #[inline]
    fn peek(&self) -> (&[u8], bool) {
        (&self.buf[self.start..self.end], self.eof)
    }
    #[inline]
    fn offset(&self) -> u64 {
        self.base + self.start as u64
    }
    #[inline]
    fn cursor(&self) -> usize {
        self.start
    }
    #[inline]
    fn storage(&self) -> &[u8] {
        &self.buf[..self.end]
    }
    #[inline]
    fn consume(&mut self, n: usize) {
        self.start += n;
    }
    fn fill(&mut self, need: usize, stop: Option<&AtomicBool>) -> Fill {
        self.refill(need, stop)
    }
    #[inline]
    fn check(&mut self, _: usize) -> Result<(), String> {
        Ok(())
    }
    #[inline]
    fn next_window(&mut self) -> bool {
        false
    }
}

impl Bytes for Slice<'_> {
    #[inline]
    fn peek(&self) -> (&[u8], bool) {
        (&self.bytes[self.pos..], true)
    }
    #[inline]
    fn offset(&self) -> u64 {
        self.pos as u64
    }
    #[inline]
    fn cursor(&self) -> usize {
        self.pos
    }
    #[inline]
    fn storage(&self) -> &[u8] {
        self.bytes
    }
    #[inline]
    fn consume(&mut self, n: usize) {
        self.pos += n;
    }
    fn fill(&mut self, _: usize, _: Option<&AtomicBool>) -> Fill {
        Fill::Done
    }
    #[inline]
    fn check(&mut self, end: usize) -> Result<(), String> {
        self.check_mapped(end)
    }
    #[inline]
    fn next_window(&mut self) -> bool {
        if self.pos < self.window_end {
            return false;
        }
        self.window_end += WINDOW;
        self.window();
        true
    }
}

/// Asks for a pipe as large as the buffer: a 64 KiB pipe (the default) costs
/// a read, a poll and a wake-up of the writer every 64 KiB. Any user may grow
/// a pipe to `/proc/sys/fs/pipe-max-size` (1 MiB by default); when the kernel
/// refuses, the pipe keeps its size.
fn widen_pipe(f: &std::fs::File, size: usize) {
    use std::os::unix::fs::FileTypeExt;
    if f.metadata().is_ok_and(|m| m.file_type().is_fifo()) {
        let size = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
        // SAFETY: fcntl on a descriptor we own; the call only resizes the pipe's buffer.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETPIPE_SZ, size) };
    }
}

/// Waits up to [`POLL_MS`] for `f` to have bytes (or an end, or an error) to read.
fn readable(f: &std::fs::File) -> bool {
    let mut p = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, POLL_MS) };
    // An error other than EINTR: let read() report it.
    n > 0 || (n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted)
}

/// A slice walked in place; for a mapped file, with the check for a file
/// that shrank under the walk.
pub(crate) struct Slice<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) map: Option<&'a Mapped>,
    /// End of the window the reader is in.
    window_end: usize,
    /// This reader's slot among the mapping's readers.
    slot: usize,
    /// Bytes known to be the file's: all of them until a read faulted.
    limit: usize,
    /// The fault offset `limit` was computed for.
    seen: usize,
    tail_checked: bool,
}

impl<'a> Slice<'a> {
    pub(crate) fn new(bytes: &'a [u8], map: Option<&'a Mapped>) -> Slice<'a> {
        Slice {
            bytes,
            pos: 0,
            map,
            window_end: WINDOW,
            slot: map.map_or(0, |m| m.readers.join()),
            limit: usize::MAX,
            seen: usize::MAX,
            tail_checked: false,
        }
    }

    /// Read-ahead and release around the reader (mapped files).
    pub(crate) fn window(&self) {
        if let Some(m) = self.map {
            m.window(self.slot, self.pos);
        }
    }

    /// After a record `[pos, end)` of a mapped file was parsed: `Err(what)`
    /// when the file no longer holds all of it.
    ///
    /// A record straddling the cut reads zeros past the new end without
    /// faulting when the rest of it lies in the same page as the end, so a
    /// fault alone would come too late. Touching the page after the record's
    /// last byte settles it: if the file now ends before the record does, that
    /// page lies wholly past the end and faults, and the record is dropped
    /// instead of analysed with zeros. The last page of the mapping has no
    /// page after it, so there the file's size is asked once instead. (A cut
    /// landing between this check and the decoding of this one record is not
    /// caught; it costs at most that record.)
    #[inline(always)]
    fn check_mapped(&mut self, end: usize) -> Result<(), String> {
        let Some(m) = self.map else { return Ok(()) };
        crate::prefetch::ahead(self.bytes, end);
        let next_page = (end.saturating_sub(1) | 4095) + 1;
        if next_page < self.bytes.len() {
            // The page after that one is asked for ahead (a hint, which cannot
            // fault): the touch below then finds it in cache instead of
            // waiting for memory once per page.
            crate::prefetch::line(self.bytes.as_ptr().wrapping_add(next_page + 4096));
            // SAFETY: in bounds of the mapping; a fault there is handled (sigbus.rs).
            unsafe { std::ptr::read_volatile(self.bytes.as_ptr().add(next_page)) };
        } else if !self.tail_checked {
            self.check_tail(m);
        }
        let zeroed = m.guard.zeroed_from();
        if zeroed != self.seen {
            self.saw_fault(m, zeroed);
        }
        if end <= self.limit {
            return Ok(());
        }
        Err(Self::cut(m, end, zeroed))
    }

    /// The last page of the mapping: its size is asked once.
    #[cold]
    fn check_tail(&mut self, m: &Mapped) {
        self.tail_checked = true;
        self.limit = self.limit.min(m.size() as usize);
    }

    /// A read faulted at `zeroed`: the bytes known to be the file's end there, or sooner.
    #[cold]
    fn saw_fault(&mut self, m: &Mapped, zeroed: usize) {
        self.seen = zeroed;
        self.limit = self.limit.min(zeroed).min(m.size() as usize);
    }

    /// What went wrong with a record ending at `end`, past what is known to be the file's.
    #[cold]
    fn cut(m: &Mapped, end: usize, zeroed: usize) -> String {
        let size = m.size();
        if size < end as u64 {
            shrank(size)
        } else {
            format!("the file could not be read from offset {zeroed} (an I/O error while it was mapped)")
        }
    }
}

impl Drop for Slice<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.map {
            m.readers.leave(self.slot);
        }
    }
}
