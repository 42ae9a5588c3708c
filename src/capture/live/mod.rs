//! Live capture without libpcap: an AF_PACKET socket with a TPACKET_V3
//! ring, the filter compiled to classic BPF and run in the kernel, written
//! as pcap with nanosecond timestamps.
//!
//! - Ethernet and loopback interfaces are captured whole (LINKTYPE_ETHERNET);
//!   a VLAN tag the kernel took out of the frame is put back, as libpcap does.
//! - `any` uses a SOCK_DGRAM socket and writes Linux cooked headers
//!   (LINKTYPE_LINUX_SLL); other interface types (tun, wireguard, ppp…) are
//!   captured from the network header on (LINKTYPE_RAW).
//! - On loopback every packet is seen twice, going out and coming in; the
//!   outgoing copy is dropped and counted, as libpcap does.
//! - Only TCP over IPv4/IPv6 is kept, whatever the filter says.
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::{Duration, Instant};
//! use tcpdoctor::capture::live::{LiveCapture, LiveOptions};
//! let o = LiveOptions { iface: "lo".into(), filter: None, snaplen: 262_144 };
//! let mut cap = LiveCapture::open(&o)?; // capturing from here on
//! let mut pcap = Vec::new();
//! let stats = cap.record(&mut pcap, &AtomicBool::new(false), Some(Instant::now() + Duration::from_secs(1)), None)?;
//! # Ok::<(), tcpdoctor::capture::live::LiveError>(())
//! ```

mod bpf;
mod pcapng;
mod pick;
mod ring;
mod write;

use crate::capture::LinkType;
use crate::filter::Filter;
use bpf::Framing;
use std::fmt;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use write::{Output, append, flush, framed, pcap_header, write_error};

/// libpcap's largest snap length, and the default.
pub const MAX_SNAPLEN: u32 = 262_144;
/// Size of the receive ring: a few ms of a busy 10 Gb/s link, and enough
/// for a loopback benchmark between two reads.
const RING_BYTES: u32 = 8 << 20;
/// A block holding packets goes to user space within this time even if not
/// full (the kernel's retire timer), so packets do not wait for a block to fill.
const BLOCK_TIMEOUT_MS: u32 = 4;
/// Longest sleep between looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// After stop or the deadline, how long to wait for the block the kernel was
/// still filling (it is handed over at most one block timeout later).
const DRAIN: Duration = Duration::from_millis(2 * BLOCK_TIMEOUT_MS as u64 + 10);
/// How often the kernel's drop counter is read during a capture.
const STATS_EVERY: Duration = Duration::from_secs(1);

/// What to capture.
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// Interface name, or `any` for all of them.
    pub iface: String,
    /// Keep only matching packets (TCP is kept in any case; nothing else is).
    pub filter: Option<Filter>,
    /// Bytes kept of each packet (0 or more than [`MAX_SNAPLEN`] mean [`MAX_SNAPLEN`]).
    pub snaplen: u32,
}

/// What a [`LiveCapture::record`] call saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveStats {
    /// Packets written.
    pub packets: u64,
    /// Bytes of those packets written (captured lengths, without pcap headers).
    pub bytes: u64,
    /// Packets the kernel passed through the filter but had no room for
    /// (ring full), since the capture was opened or the previous `record`.
    pub kernel_drops: u64,
    /// Outgoing copies of loopback packets left out (each was kept once, incoming).
    pub loopback_duplicates: u64,
}

/// Why a capture could not start or go on. Each message is one line: what,
/// on which interface, and what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LiveError {
    /// No CAP_NET_RAW.
    Permission(String),
    /// No interface of that name.
    NoInterface(String),
    /// The filter cannot be compiled or the kernel refused the program.
    Filter(String),
    /// A system call on the capture side failed (ring allocation, interface down…).
    Io(String),
    /// Writing the pcap to `out` failed.
    Write(String),
}

impl fmt::Display for LiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LiveError::Permission(s)
            | LiveError::NoInterface(s)
            | LiveError::Filter(s)
            | LiveError::Io(s)
            | LiveError::Write(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for LiveError {}

/// The file format [`LiveCapture::record_as`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// pcap with the nanosecond magic.
    Pcap,
    /// pcapng: one section, one interface (`if_tsresol` 9), enhanced packet blocks.
    Pcapng,
}

impl FileFormat {
    /// pcapng for a name ending in `.pcapng`, as tcpdump's users expect; pcap otherwise.
    pub fn for_path(path: &std::path::Path) -> FileFormat {
        match path.extension() {
            Some(e) if e.eq_ignore_ascii_case("pcapng") => FileFormat::Pcapng,
            _ => FileFormat::Pcap,
        }
    }
}

pub use pick::{Picked, pick_interface};

/// An open capture: the socket is bound, the filter attached, and packets
/// are collected in the kernel ring from [`LiveCapture::open`] on.
pub struct LiveCapture {
    // Declared first so it is unmapped before the socket is closed.
    ring: ring::Ring,
    fd: OwnedFd,
    iface: String,
    output: Output,
    snaplen: u32,
    /// Next block to read.
    next: usize,
}

// diagnose opens the capture on one thread and records on another.
const _: () = {
    const fn send<T: Send>() {}
    send::<LiveCapture>()
};

fn os_error(iface: &str, what: &str, e: &io::Error) -> LiveError {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => LiveError::Permission(format!(
            "cannot capture on {iface} ({what}: {e}); needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` on the binary"
        )),
        Some(libc::ENODEV | libc::ENXIO) => no_interface(iface),
        Some(libc::ENETDOWN) => {
            LiveError::Io(format!("cannot capture on {iface}: it is down; bring it up (`ip link set {iface} up`)"))
        }
        _ => LiveError::Io(format!("cannot capture on {iface} ({what}: {e})")),
    }
}

/// Whether `iface` names an interface here (or is `any`), checked before a
/// command starts any traffic.
pub fn interface_exists(iface: &str) -> bool {
    iface == "any" || ring::if_index(iface).is_some()
}

fn no_interface(iface: &str) -> LiveError {
    LiveError::NoInterface(format!("no interface named '{iface}' here; list them with `ip link` (or use -i any)"))
}

impl LiveCapture {
    /// Opens the socket and ring and attaches the filter; packets are being
    /// captured when this returns.
    pub fn open(o: &LiveOptions) -> Result<LiveCapture, LiveError> {
        let iface = o.iface.as_str();
        let snaplen = if o.snaplen == 0 { MAX_SNAPLEN } else { o.snaplen.min(MAX_SNAPLEN) };
        let err = |what: &'static str| move |e: io::Error| os_error(iface, what, &e);
        let any = iface == "any";
        let ifindex = if any { 0 } else { ring::if_index(iface).ok_or_else(|| no_interface(iface))? };
        let mut fd = ring::packet_socket(any).map_err(err("packet socket"))?;
        let output = if any {
            Output::Cooked
        } else {
            match ring::hw_type(fd.as_fd(), iface).map_err(err("interface type"))? {
                libc::ARPHRD_ETHER | libc::ARPHRD_LOOPBACK => Output::Ethernet,
                _ => {
                    // No Ethernet header: let the kernel strip whatever link header there is.
                    fd = ring::packet_socket(true).map_err(err("packet socket"))?;
                    Output::Raw
                }
            }
        };
        ring::use_v3(fd.as_fd()).map_err(err("TPACKET_V3"))?;
        let framing = if output == Output::Ethernet { Framing::Ethernet } else { Framing::Network };
        let prog = bpf::compile(o.filter.as_ref(), framing, snaplen).map_err(LiveError::Filter)?;
        ring::attach_filter(fd.as_fd(), &prog).map_err(|e| {
            let why = if e.raw_os_error() == Some(libc::ENOMEM) {
                "; it is too big for net.core.optmem_max: shorten the filter or raise that sysctl"
            } else {
                ""
            };
            LiveError::Filter(format!(
                "the kernel refused the filter compiled for {iface} ({} BPF instructions): {e}{why}",
                prog.len()
            ))
        })?;
        // Blocks must hold the largest frame: header, sockaddr_ll, snaplen.
        let block_size = (snaplen + 4096).next_power_of_two().max(128 << 10);
        let ring = ring::Ring::new(fd.as_fd(), block_size, (RING_BYTES / block_size).max(2), BLOCK_TIMEOUT_MS)
            .map_err(err("receive ring"))?;
        ring::bind(fd.as_fd(), ifindex).map_err(err("bind"))?;
        // Binding to an interface that is down succeeds, with ENETDOWN pending.
        if let Some(e) = ring::pending_error(fd.as_fd()) {
            return Err(os_error(iface, "bind", &e));
        }
        Ok(LiveCapture { ring, fd, iface: iface.to_string(), output, snaplen, next: 0 })
    }

    /// The link type of the pcap [`record`](Self::record) writes.
    pub fn link(&self) -> LinkType {
        match self.output {
            Output::Ethernet => LinkType::ETHERNET,
            Output::Cooked => LinkType::LINUX_SLL,
            Output::Raw => LinkType::RAW,
        }
    }

    /// The snap length in effect.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    /// Writes pcap (ns) to `out`: [`record_as`](Self::record_as) with [`FileFormat::Pcap`].
    pub fn record(
        &mut self,
        out: &mut dyn Write,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        max_packets: Option<u64>,
    ) -> Result<LiveStats, LiveError> {
        self.record_as(FileFormat::Pcap, out, stop, deadline, max_packets)
    }

    /// Writes pcap or pcapng (ns) to `out` until `stop` is set, `deadline` passes, or
    /// `max_packets` is reached. Each call writes a whole pcap stream (file
    /// header first); packets are written a ring block at a time, so a
    /// reader of `out` sees them within a few ms. After a stop or the
    /// deadline, packets the kernel already holds are still written.
    pub fn record_as(
        &mut self,
        format: FileFormat,
        out: &mut dyn Write,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        max_packets: Option<u64>,
    ) -> Result<LiveStats, LiveError> {
        let mut buf = match format {
            FileFormat::Pcap => pcap_header(self.snaplen, self.link()),
            FileFormat::Pcapng => pcapng::header(self.snaplen, self.link(), &self.iface),
        };
        let (output, snaplen) = (self.output, self.snaplen);
        let mut scratch = Vec::new();
        let stats = self.pump(stop, deadline, max_packets, &mut |step, stats| match step {
            Step::Frame(f) => {
                append(&f, output, snaplen, format, &mut buf, &mut scratch, stats);
                Ok(())
            }
            Step::Tick => flush(out, &mut buf),
        })?;
        out.flush().map_err(write_error)?;
        Ok(stats)
    }

    /// Hands each captured packet to `on` instead of writing pcap, until
    /// `stop` is set or `deadline` passes, with a [`Live::Tick`] at least
    /// every 50 ms (after each ring block, while waiting for one, and once at
    /// the end) for periodic work. A packet's bytes are those
    /// [`record`](Self::record) would write, with [`link`](Self::link)'s header.
    pub fn each(
        &mut self,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        on: &mut dyn FnMut(Live<'_>),
    ) -> Result<LiveStats, LiveError> {
        let (output, snaplen, link) = (self.output, self.snaplen, self.link());
        let mut scratch = Vec::with_capacity(snaplen as usize + 32);
        self.pump(stop, deadline, None, &mut |step, stats| {
            match step {
                Step::Frame(f) => {
                    scratch.clear();
                    let (data, orig_len) = framed(&f, output, snaplen, &mut scratch);
                    stats.bytes += data.len() as u64;
                    let ts_ns = i64::from(f.sec) * 1_000_000_000 + i64::from(f.nsec);
                    on(Live::Packet(LivePacket { link, ts_ns, data, orig_len }));
                }
                Step::Tick => on(Live::Tick(stats)),
            }
            Ok(())
        })
    }

    /// The ring loop both [`record`](Self::record) and [`each`](Self::each)
    /// run: frames in order (loopback's outgoing copies left out and counted),
    /// a tick before each look at the ring, kernel drops read about once a second.
    fn pump(
        &mut self,
        stop: &AtomicBool,
        deadline: Option<Instant>,
        max_packets: Option<u64>,
        on: &mut dyn FnMut(Step<'_>, &mut LiveStats) -> Result<(), LiveError>,
    ) -> Result<LiveStats, LiveError> {
        let mut stats = LiveStats::default();
        let mut drain_until: Option<Instant> = None;
        let mut next_stats = Instant::now() + STATS_EVERY;
        loop {
            let now = Instant::now();
            if now >= next_stats {
                next_stats = now + STATS_EVERY;
                stats.kernel_drops += self.take_drops()?;
            }
            on(Step::Tick, &mut stats)?;
            if max_packets.is_some_and(|m| stats.packets >= m) {
                break;
            }
            if drain_until.is_none() && (stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| now >= d)) {
                drain_until = Some(now + DRAIN);
            }
            if drain_until.is_some_and(|d| now >= d) {
                break;
            }
            if let Some(block) = self.ring.block(self.next) {
                let r = each_frame(block, max_packets, &mut stats, &mut |f, st| on(Step::Frame(f), st));
                self.ring.release(self.next);
                r?;
                self.next = (self.next + 1) % self.ring.blocks();
                continue;
            }
            let until = drain_until.or(deadline).map_or(POLL, |d| d.saturating_duration_since(now).min(POLL));
            ring::wait(self.fd.as_fd(), until)
                .map_err(|e| LiveError::Io(format!("capture on {} stopped: {e}", self.iface)))?;
        }
        stats.kernel_drops += self.take_drops()?;
        on(Step::Tick, &mut stats)?;
        Ok(stats)
    }

    /// Packets dropped by the kernel since the last look (reading resets its counter).
    fn take_drops(&self) -> Result<u64, LiveError> {
        ring::take_stats(self.fd.as_fd()).map(|(_, d)| d).map_err(|e| os_error(&self.iface, "statistics", &e))
    }
}

/// One packet handed to [`LiveCapture::each`].
#[derive(Clone, Copy, Debug)]
pub struct LivePacket<'a> {
    /// Link type of `data` (the capture's [`LiveCapture::link`]).
    pub link: LinkType,
    /// Kernel timestamp, ns since the epoch.
    pub ts_ns: i64,
    /// The captured bytes (at most the snap length).
    pub data: &'a [u8],
    /// Length on the wire.
    pub orig_len: u32,
}

/// What [`LiveCapture::each`] hands its callback.
#[derive(Debug)]
pub enum Live<'a> {
    /// A captured packet.
    Packet(LivePacket<'a>),
    /// Time for periodic work; the counts so far (kernel drops are read about once a second).
    Tick(&'a LiveStats),
}

/// What the ring loop hands its caller.
enum Step<'a> {
    /// A packet (loopback duplicates already left out).
    Frame(ring::Frame<'a>),
    /// Before each look at the ring, and once at the end: time for periodic work.
    Tick,
}

/// The frames of a block worth keeping, in order: loopback's outgoing copies
/// are left out (and counted), and no more than `max_packets` in all.
fn each_frame(
    block: &[u8],
    max_packets: Option<u64>,
    stats: &mut LiveStats,
    on: &mut dyn FnMut(ring::Frame<'_>, &mut LiveStats) -> Result<(), LiveError>,
) -> Result<(), LiveError> {
    for f in ring::frames(block) {
        if max_packets.is_some_and(|m| stats.packets >= m) {
            break;
        }
        if f.hatype == libc::ARPHRD_LOOPBACK && f.pkttype == libc::PACKET_OUTGOING {
            stats.loopback_duplicates += 1;
            continue;
        }
        stats.packets += 1;
        on(f, stats)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ring::{Frame, test_block};
    use super::*;
    use crate::capture::{Network, network_layer};

    /// An Ethernet frame carrying a minimal IPv4 header.
    fn ether() -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00, 0x45];
        f.resize(34, 0);
        f
    }

    /// Runs `append` on one block and reads the result back as pcap.
    fn written(output: Output, snaplen: u32, max: Option<u64>, frames: &[Frame<'_>]) -> (Vec<u8>, LiveStats) {
        let link = match output {
            Output::Ethernet => LinkType::ETHERNET,
            Output::Cooked => LinkType::LINUX_SLL,
            Output::Raw => LinkType::RAW,
        };
        let mut buf = pcap_header(snaplen, link);
        let mut stats = LiveStats::default();
        let mut scratch = Vec::new();
        each_frame(&test_block(frames), max, &mut stats, &mut |f, st| {
            append(&f, output, snaplen, FileFormat::Pcap, &mut buf, &mut scratch, st);
            Ok(())
        })
        .unwrap();
        (buf, stats)
    }

    #[test]
    fn vlan_tags_are_put_back_and_loopback_copies_dropped() {
        let data = ether();
        let f = Frame { sec: 1, nsec: 5, len: 34, data: &data, ..Frame::default() };
        let tagged = Frame { status: libc::TP_STATUS_VLAN_VALID, vlan_tci: 10, ..f };
        let qinq = Frame { status: tagged.status | libc::TP_STATUS_VLAN_TPID_VALID, vlan_tpid: 0x88a8, ..tagged };
        let out_lo = Frame { hatype: libc::ARPHRD_LOOPBACK, pkttype: libc::PACKET_OUTGOING, ..f };
        let (pcap, stats) = written(Output::Ethernet, 1000, None, &[f, tagged, out_lo, qinq]);
        assert_eq!(stats, LiveStats { packets: 3, bytes: 34 + 38 + 38, kernel_drops: 0, loopback_duplicates: 1 });
        let (p, _) = crate::capture::all_packets(&pcap).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!((p[0].ts_ns, p[0].data, p[0].orig_len), (1_000_000_005, &data[..], 34));
        assert_eq!(&p[1].data[12..16], &[0x81, 0x00, 0, 10]);
        assert_eq!(&p[2].data[12..16], &[0x88, 0xa8, 0, 10]);
        assert_eq!(p[1].orig_len, 38);
        for q in &p {
            assert_eq!(network_layer(q.link, q.data), Network::Ipv4(&data[14..]));
        }
    }

    #[test]
    fn cooked_headers_snaplen_and_count() {
        let ip = &ether()[14..];
        let f = Frame {
            len: 20,
            hatype: libc::ARPHRD_ETHER,
            pkttype: libc::PACKET_OUTGOING,
            protocol: [0x08, 0x00],
            halen: 6,
            addr: [2, 0, 0, 0, 0, 9, 0, 0],
            data: ip,
            ..Frame::default()
        };
        let (pcap, stats) = written(Output::Cooked, 30, Some(2), &[f, f, f]);
        assert_eq!((stats.packets, stats.bytes), (2, 60), "count stops it; the header counts in the snap length");
        let (p, _) = crate::capture::all_packets(&pcap).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(&p[0].data[..16], &[0, 4, 0, 1, 0, 6, 2, 0, 0, 0, 0, 9, 0, 0, 0x08, 0x00]);
        assert_eq!((p[0].data.len(), p[0].orig_len), (30, 36));
        assert_eq!(network_layer(p[0].link, p[0].data), Network::Ipv4(&ip[..14]));
        let (pcap, _) = written(Output::Raw, 1000, None, &[f]);
        let (p, _) = crate::capture::all_packets(&pcap).unwrap();
        assert_eq!(network_layer(LinkType::RAW, p[0].data), Network::Ipv4(ip));
    }

    #[test]
    fn pcapng_reads_back_with_nanoseconds() {
        let data = ether();
        let frames = [Frame { sec: 7, nsec: 123_456_789, len: 40, data: &data[..33], ..Frame::default() }];
        let mut buf = pcapng::header(1000, LinkType::ETHERNET, "eth0");
        let (mut scratch, mut stats) = (Vec::new(), LiveStats::default());
        each_frame(&test_block(&frames), None, &mut stats, &mut |f, st| {
            append(&f, Output::Ethernet, 1000, FileFormat::Pcapng, &mut buf, &mut scratch, st);
            Ok(())
        })
        .unwrap();
        assert_eq!(&buf[..4], &[0x0a, 0x0d, 0x0d, 0x0a]);
        let (p, _) = crate::capture::all_packets(&buf).unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!((p[0].ts_ns, p[0].data, p[0].orig_len), (7_123_456_789, &data[..33], 40));
        assert_eq!(FileFormat::for_path("a/b.PCAPNG".as_ref()), FileFormat::Pcapng);
        assert_eq!(FileFormat::for_path("b.pcap".as_ref()), FileFormat::Pcap);
    }

    #[test]
    fn header_is_nanosecond_pcap() {
        let h = pcap_header(96, LinkType::LINUX_SLL);
        assert_eq!(h.len(), 24);
        assert_eq!(&h[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(crate::capture::all_packets(&h).unwrap().0.len(), 0);
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = os_error("eth0", "packet socket", &io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(e, LiveError::Permission(_)));
        assert!(e.to_string().contains("needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` on the binary"));
        let o = LiveOptions { iface: "no-such-if0".into(), filter: None, snaplen: 0 };
        let e = LiveCapture::open(&o).err().unwrap();
        assert!(matches!(e, LiveError::NoInterface(_)), "{e}");
        assert!(!e.to_string().contains('\n'));
    }
}
