//! Packet sources: pcap and pcapng files (memory-mapped) or standard input.
//!
//! A [`Capture`] owns the bytes; [`Capture::packets`] walks them without
//! copying. A damaged record stops the walk and is reported once through
//! [`Packets::damage`], so the caller keeps what was read before it.

mod link;
pub mod live;
mod pcap;
mod pcapng;

pub use link::{LinkType, Network, network_layer};

use std::fmt;
use std::io::Read;
use std::path::Path;

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

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
    Static(&'static [u8]),
}

/// A capture file's bytes, held for the duration of the analysis.
pub struct Capture {
    /// Name used in messages (the path, or `-` for stdin).
    pub name: String,
    bytes: Bytes,
    /// Mapped bytes before this offset have been handed back to the kernel.
    released: std::sync::atomic::AtomicUsize,
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
    /// Memory-maps a file (`-` reads standard input to its end).
    pub fn open(path: &Path) -> Result<Capture, OpenError> {
        let name = path.display().to_string();
        if name == "-" {
            let mut buf = Vec::new();
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .map_err(|e| OpenError::io(format!("cannot read standard input: {e}")))?;
            return Ok(Capture { name, bytes: Bytes::Owned(buf), released: Default::default() });
        }
        let file = std::fs::File::open(path).map_err(|e| OpenError::io(format!("cannot open: {e}")))?;
        let meta = file.metadata().map_err(|e| OpenError::io(e.to_string()))?;
        if meta.is_dir() {
            return Err(OpenError::io("is a directory, not a capture file"));
        }
        let bytes = if meta.is_file() {
            if meta.len() == 0 {
                Bytes::Owned(Vec::new())
            } else {
                // SAFETY: the map is read-only; a file truncated under us by another
                // process would fault, as with any mmap-based reader (tcpdump -r, tshark).
                let map =
                    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| OpenError::io(format!("cannot map: {e}")))?;
                #[cfg(unix)]
                let _ = map.advise(memmap2::Advice::Sequential);
                Bytes::Mapped(map)
            }
        } else {
            // FIFOs and character devices (e.g. /dev/stdin, process substitution).
            let mut buf = Vec::new();
            let mut f = file;
            f.read_to_end(&mut buf).map_err(|e| OpenError::io(e.to_string()))?;
            Bytes::Owned(buf)
        };
        Ok(Capture { name, bytes, released: Default::default() })
    }

    /// Wraps bytes already in memory (bundled captures, tests, fuzzing).
    pub fn from_bytes(name: &str, bytes: Vec<u8>) -> Capture {
        Capture { name: name.to_string(), bytes: Bytes::Owned(bytes), released: Default::default() }
    }

    /// Wraps bytes compiled into the binary.
    pub fn from_static(name: &str, bytes: &'static [u8]) -> Capture {
        Capture { name: name.to_string(), bytes: Bytes::Static(bytes), released: Default::default() }
    }

    /// The raw bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
            Bytes::Static(s) => s,
        }
    }

    /// Tells the kernel the reader is at `offset` of a mapped file: map the
    /// next window now, and drop the pages more than a window behind from this
    /// process (they stay in the page cache). A no-op for bytes in memory.
    pub fn window(&self, offset: usize) {
        let Bytes::Mapped(m) = &self.bytes else {
            return;
        };
        let ahead = WINDOW.min(m.len().saturating_sub(offset));
        if ahead > 0 {
            // Older kernels lack MADV_POPULATE_READ; WILLNEED still starts read-ahead.
            if m.advise_range(memmap2::Advice::PopulateRead, offset, ahead).is_err() {
                let _ = m.advise_range(memmap2::Advice::WillNeed, offset, ahead);
            }
        }
        let page = 4096;
        let upto = offset.saturating_sub(WINDOW) / page * page;
        let from = self.released.load(std::sync::atomic::Ordering::Relaxed);
        if upto > from {
            // SAFETY: the walk is past these bytes and no slice into them is kept
            // (packets are decoded and dropped in order). For a read-only private
            // file mapping, DONTNEED only drops our page-table entries: a later
            // access would read the same file bytes again.
            let _ = unsafe { m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, from, upto - from) };
            self.released.store(upto, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Recognises the format and starts walking the packets.
    pub fn packets(&self) -> Result<Packets<'_>, OpenError> {
        Packets::new(self.bytes())
    }
}

/// Iterator over the packets of a capture. Stops at the first damaged record;
/// [`Packets::damage`] then says where and why.
pub struct Packets<'a> {
    inner: Inner<'a>,
    frame: u64,
    damage: Option<Damage>,
}

enum Inner<'a> {
    Pcap(pcap::Reader<'a>),
    PcapNg(pcapng::Reader<'a>),
}

/// What a format reader yields for one record.
pub(crate) enum Record<'a> {
    Packet {
        ts_ns: i64,
        link: LinkType,
        data: &'a [u8],
        orig_len: u32,
    },
    /// A block that carries no packet (interface description, statistics…).
    Skip,
}

impl<'a> Packets<'a> {
    /// Recognises pcap or pcapng by magic number.
    pub fn new(bytes: &'a [u8]) -> Result<Packets<'a>, OpenError> {
        if bytes.is_empty() {
            return Err(OpenError::at(0, "empty file (no capture header)"));
        }
        let inner = match format_of(bytes) {
            Some(Format::Pcap) => Inner::Pcap(pcap::Reader::new(bytes)?),
            Some(Format::PcapNg) => Inner::PcapNg(pcapng::Reader::new(bytes)?),
            None => {
                let n = bytes.len().min(4);
                return Err(OpenError::at(
                    0,
                    format!(
                        "not a pcap or pcapng file (magic {}); write captures with `tcpdump -w` or `tshark -w`",
                        hex(&bytes[..n])
                    ),
                ));
            }
        };
        Ok(Packets { inner, frame: 0, damage: None })
    }

    /// The container format.
    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Pcap(_) => Format::Pcap,
            Inner::PcapNg(_) => Format::PcapNg,
        }
    }

    /// Byte offset of the next record.
    pub fn offset(&self) -> u64 {
        match &self.inner {
            Inner::Pcap(r) => r.offset(),
            Inner::PcapNg(r) => r.offset(),
        }
    }

    /// Where reading stopped early, if it did.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }
}

impl<'a> Iterator for Packets<'a> {
    type Item = Packet<'a>;

    #[inline]
    fn next(&mut self) -> Option<Packet<'a>> {
        loop {
            let rec = match &mut self.inner {
                Inner::Pcap(r) => r.next(&mut self.damage)?,
                Inner::PcapNg(r) => r.next(&mut self.damage)?,
            };
            if let Record::Packet { ts_ns, link, data, orig_len } = rec {
                self.frame += 1;
                return Some(Packet { frame: self.frame, ts_ns, link, data, orig_len });
            }
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
