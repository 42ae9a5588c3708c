//! Packet sources: pcap and pcapng files (memory-mapped), or streams
//! (standard input, FIFOs, devices) read through a bounded buffer.
//!
//! A [`Capture`] owns the bytes; [`Capture::packets`] walks them without
//! copying. A damaged record stops the walk and is reported once through
//! [`Packets::damage`], so the caller keeps what was read before it.

mod link;
pub mod live;
mod pcap;
mod pcapng;
mod readers;
mod sigbus;
mod source;
#[cfg(test)]
pub(crate) mod test_files;
mod walk;
pub(crate) mod windows;

pub use link::{LinkType, Network, network_layer};
pub(crate) use walk::{Head, Record, Step};
pub use walk::{Packets, all_packets};

use source::{Input, STREAM_BUFFER, Slice, Source, Stream};
use std::fmt;
use std::io::{Read, Seek};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

/// One captured frame, borrowed from the capture's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// 1-based frame number, as Wireshark counts them.
    pub frame: u64,
    /// Capture time in nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// Link type of the interface the frame was captured on.
    pub link: LinkType,
    /// Captured bytes (possibly cut by the snap length).
    pub data: &'a [u8],
    /// Length of the frame on the wire.
    pub orig_len: u32,
}

/// Where a damaged input stopped being readable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset in the file of the record that could not be read.
    pub offset: u64,
    /// What was wrong there.
    pub what: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}: {}", self.offset, self.what)
    }
}

/// An input that cannot be read at all.
#[derive(Debug)]
pub struct OpenError {
    /// Byte offset of the problem; `None` when the file could not be opened or read.
    pub offset: Option<u64>,
    /// What was wrong.
    pub what: String,
}

impl OpenError {
    /// An I/O problem: the bytes could not be had at all.
    pub fn io(what: impl Into<String>) -> OpenError {
        OpenError { offset: None, what: what.into() }
    }
    /// A problem with the file's contents at `offset`.
    pub fn at(offset: u64, what: impl Into<String>) -> OpenError {
        OpenError { offset: Some(offset), what: what.into() }
    }
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.offset {
            Some(o) => write!(f, "offset {o}: {}", self.what),
            None => write!(f, "{}", self.what),
        }
    }
}

/// A mapped regular file. Fields drop in order: the mapping is unregistered
/// from the SIGBUS handler before it is unmapped.
pub(crate) struct Mapped {
    guard: sigbus::Guard,
    map: memmap2::Mmap,
    /// Kept open to learn the file's size if it shrinks during the walk.
    file: std::fs::File,
    readers: readers::Readers,
}

impl Mapped {
    fn new(file: std::fs::File) -> Result<Mapped, OpenError> {
        // SAFETY: the map is read-only. If another process truncates the file, a
        // read past the new end faults; sigbus.rs turns that fault into zero pages
        // and a flag, which the walk checks after every record (source.rs).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| OpenError::io(format!("cannot map: {e}")))?;
        let _ = map.advise(memmap2::Advice::Sequential);
        let guard = sigbus::register(map.as_ptr(), map.len());
        Ok(Mapped { guard, map, file, readers: readers::Readers::default() })
    }

    /// The file's size now.
    fn size(&self) -> u64 {
        self.file.metadata().map_or(0, |m| m.len())
    }

    /// Tells the kernel the reader in `slot` is at `offset`: drop the pages
    /// more than a window behind the last reader from this process (they stay
    /// in the page cache). May wait for the last reader (readers.rs).
    ///
    /// Nothing is mapped ahead: the reads' faults map 16 pages at a time,
    /// and MADV_POPULATE_READ, which then walks every page again, cost one
    /// reader 1.6 % more time (bench/RESULTS.md, tenth session).
    fn window(&self, slot: usize, offset: usize) {
        let m = &self.map;
        let behind = self.readers.moved_to(slot, offset);
        if !behind.is_empty() {
            // SAFETY: every reader is past these bytes and no slice into them is
            // kept (packets are decoded and dropped in order). For a read-only
            // private file mapping, DONTNEED only drops our page-table entries:
            // a later access would read the same file bytes again.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, behind.start, behind.len()) };
        }
    }
}

enum Bytes {
    Mapped(Mapped),
    Owned(Vec<u8>),
    Static(&'static [u8]),
    /// Read once, as the walk goes; `None` once a walk has taken it.
    Stream(Mutex<Option<Input>>, usize),
}

/// A capture's bytes, held for the duration of the analysis: a regular file is
/// memory-mapped; standard input, FIFOs and devices are streamed through a
/// bounded buffer as the walk goes.
pub struct Capture {
    /// Name used in messages (the path, or `-` for stdin).
    pub name: String,
    bytes: Bytes,
}

/// Read-ahead / release window for mapped files: keeps resident memory at a
/// few windows whatever the file size, and maps pages in bulk instead of
/// faulting them one by one.
pub const WINDOW: usize = 8 << 20;

/// The container format, recognised by its magic number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic libpcap, either byte order, µs or ns timestamps.
    Pcap,
    /// pcapng, any number of sections and interfaces.
    PcapNg,
}

impl Capture {
    /// Opens a capture: a regular file is mapped, anything else (`-` for
    /// standard input, a FIFO, a device) is streamed.
    pub fn open(path: &Path) -> Result<Capture, OpenError> {
        let name = path.display().to_string();
        let (file, stdin) = if name == "-" {
            let fd = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| OpenError::io(format!("cannot read standard input: {e}")))?;
            (std::fs::File::from(fd), true)
        } else {
            (std::fs::File::open(path).map_err(|e| OpenError::io(format!("cannot open: {e}")))?, false)
        };
        let meta = file.metadata().map_err(|e| OpenError::io(e.to_string()))?;
        if meta.is_dir() {
            return Err(OpenError::io("is a directory, not a capture file"));
        }
        // Standard input redirected from a file is mapped too, if it is read from the start.
        let at_start = || !stdin || (&file).stream_position().is_ok_and(|p| p == 0);
        let bytes = if meta.is_file() && at_start() {
            if meta.len() == 0 { Bytes::Owned(Vec::new()) } else { Bytes::Mapped(Mapped::new(file)?) }
        } else {
            Bytes::Stream(Mutex::new(Some(Input::File(file))), STREAM_BUFFER)
        };
        Ok(Capture { name, bytes })
    }

    /// Wraps bytes already in memory (bundled captures, tests, fuzzing).
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Capture {
        Capture { name: name.to_string(), bytes: Bytes::Owned(bytes) }
    }

    /// Wraps bytes compiled into the binary.
    pub fn from_static(name: &str, bytes: &'static [u8]) -> Capture {
        Capture { name: name.to_string(), bytes: Bytes::Static(bytes) }
    }

    /// Streams from a reader, as standard input is (tests, fuzzing).
    pub fn from_reader(name: &str, reader: impl Read + Send + 'static) -> Capture {
        Capture::from_reader_buffered(name, reader, STREAM_BUFFER)
    }

    /// Like [`Capture::from_reader`], with a buffer that starts at `size` bytes
    /// (tests and fuzzing use tiny ones, so records straddle every refill).
    pub fn from_reader_buffered(name: &str, reader: impl Read + Send + 'static, size: usize) -> Capture {
        let input = Mutex::new(Some(Input::Reader(Box::new(reader))));
        Capture { name: name.to_string(), bytes: Bytes::Stream(input, size) }
    }

    /// The size in bytes; `None` for a stream, whose size is known only at its end.
    pub fn len(&self) -> Option<u64> {
        match &self.bytes {
            Bytes::Mapped(m) => Some(m.map.len() as u64),
            Bytes::Owned(v) => Some(v.len() as u64),
            Bytes::Static(s) => Some(s.len() as u64),
            Bytes::Stream(..) => None,
        }
    }

    /// All its bytes, for a capture in memory or mapped (not a stream): the
    /// packets a walk lends lie in them, for as long as the capture lives.
    pub fn bytes(&self) -> Option<&[u8]> {
        match &self.bytes {
            Bytes::Mapped(m) => Some(&m.map),
            Bytes::Owned(v) => Some(v),
            Bytes::Static(s) => Some(s),
            Bytes::Stream(..) => None,
        }
    }

    /// Whether the capture is known to hold no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// Recognises the format and starts walking the packets. A stream can be
    /// walked once.
    pub fn packets(&self) -> Result<Packets<'_>, OpenError> {
        self.packets_until(None)
    }

    /// Like [`Capture::packets`]; the walk ends early, as if the input ended,
    /// once `stop` is raised (a wait for a stream's bytes notices it within 0.1 s).
    pub fn packets_until(&self, stop: Option<&'static AtomicBool>) -> Result<Packets<'_>, OpenError> {
        match &self.bytes {
            Bytes::Mapped(m) => Packets::start(Source::Slice(Slice::new(&m.map, Some(m))), stop),
            Bytes::Owned(v) => Packets::start(Source::Slice(Slice::new(v, None)), stop),
            Bytes::Static(s) => Packets::start(Source::Slice(Slice::new(s, None)), stop),
            Bytes::Stream(input, size) => {
                let input = input.lock().unwrap_or_else(|e| e.into_inner()).take();
                let input = input.ok_or_else(|| OpenError::io("was already read (a stream can be read once)"))?;
                Packets::start(Source::Stream(Stream::new(input, *size)), stop)
            }
        }
    }
}

/// A mapped file stays open (its size is asked again if it shrinks during the
/// walk): raises the soft open-files limit toward the hard one so that `files`
/// of them, and a few more, fit. Beyond the hard limit, opening says so.
pub fn make_room_for(files: usize) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let want = (files as u64).saturating_add(64).min(lim.rlim_max);
        if want > lim.rlim_cur {
            lim.rlim_cur = want;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The format of a capture, from its first four bytes.
pub fn format_of(bytes: &[u8]) -> Option<Format> {
    let magic: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
    match u32::from_le_bytes(magic) {
        0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 | 0xa1b2_cd34 => Some(Format::Pcap),
        0x0a0d_0d0a => Some(Format::PcapNg),
        _ => None,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}
