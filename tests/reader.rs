//! Capture input that must never crash, hang or exhaust memory, through the
//! real binary: a file truncated while analyze maps it, a stream of hundreds
//! of MB through a pipe (same report as the file, bounded RSS), Ctrl-C on a
//! pipe whose writer stays, endless devices, a pcapng block naming an
//! undeclared interface, more servers than the aggregates keep, and more
//! mapped files than the soft open-files limit.
//!
//! Big inputs are built from tests/data/nginx_nodelay_off.pcap: copy `k` of
//! its records gets client port 20000 + k and timestamps shifted by 2 s × k,
//! so every copy is one more connection to the same server.

mod common;

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpdoctor");

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// Little-endian µs pcap of Ethernet/IPv4/TCP frames, cut into header and records.
struct Template {
    header: Vec<u8>,
    /// (ts_sec, ts_usec, frame bytes, original length)
    records: Vec<(u32, u32, Vec<u8>, u32)>,
    client_port: u16,
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

impl Template {
    fn load() -> Template {
        let b = std::fs::read(data("nginx_nodelay_off.pcap")).unwrap();
        assert_eq!(le32(&b, 0), 0xa1b2_c3d4);
        let mut records = Vec::new();
        let mut at = 24;
        while at < b.len() {
            let caplen = le32(&b, at + 8) as usize;
            records.push((le32(&b, at), le32(&b, at + 4), b[at + 16..at + 16 + caplen].to_vec(), le32(&b, at + 12)));
            at += 16 + caplen;
        }
        // The first frame is the client's SYN: its source port is the client's.
        let syn = &records[0].2;
        let tcp = 14 + usize::from(syn[14] & 15) * 4;
        let client_port = u16::from_be_bytes([syn[tcp], syn[tcp + 1]]);
        Template { header: b[..24].to_vec(), records, client_port }
    }

    /// Bytes of copy `k` (records only).
    fn copy(&self, k: u32, out: &mut Vec<u8>) {
        self.copy_to(k, false, out)
    }

    /// Copy `k`, its client port or (`server`) its server port changed.
    fn copy_to(&self, k: u32, server: bool, out: &mut Vec<u8>) {
        let port = (20000 + k).to_be_bytes();
        for (sec, usec, frame, orig) in &self.records {
            let mut f = frame.clone();
            let tcp = 14 + usize::from(f[14] & 15) * 4;
            let from_client = u16::from_be_bytes([f[tcp], f[tcp + 1]]) == self.client_port;
            let at = if from_client != server { tcp } else { tcp + 2 };
            f[at..at + 2].copy_from_slice(&port[2..]);
            for v in [sec + 2 * k, *usec, f.len() as u32, *orig] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&f);
        }
    }

    fn copy_len(&self) -> usize {
        self.records.iter().map(|r| 16 + r.2.len()).sum()
    }
}

/// Waits for `child` up to `limit`, killing it (by PID) if it runs longer.
fn wait_bounded(child: &mut Child, limit: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tcpdoctor still running after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

fn read_all(r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut r = r;
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

/// A file shrinks to half while analyze has it open: the walk stops at the
/// cut with a warning naming the offset, the report covers the records before
/// it, exit 4 (before: SIGBUS, exit 135, no message). Deterministic: analyze
/// maps the big file, then blocks opening the FIFO given after it; the test
/// truncates once the mapping shows in /proc/PID/maps, and only then opens
/// the FIFO's other end, so the walks start after the cut. One thread walks
/// the mapping; four sort and analyse its windows: both say the same.
#[test]
fn a_file_truncated_under_one_thread_ends_with_a_warning_and_exit_4() {
    truncated_while_open(&[]);
}

#[test]
fn a_file_truncated_while_mapped_ends_with_a_warning_and_exit_4() {
    truncated_while_open(&["--threads", "4"]);
}

fn truncated_while_open(threads: &[&str]) {
    let t = Template::load();
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.pcap");
    let copies = (200 << 20) / t.copy_len() as u32 + 1;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
    out.write_all(&t.header).unwrap();
    let mut buf = Vec::new();
    let mut ends = vec![24u64]; // where each record ends
    for k in 0..copies {
        buf.clear();
        t.copy(k, &mut buf);
        out.write_all(&buf).unwrap();
        for r in &t.records {
            ends.push(ends.last().unwrap() + 16 + r.2.len() as u64);
        }
    }
    out.into_inner().unwrap().sync_all().unwrap();
    let len = *ends.last().unwrap();
    assert!(len >= 200 << 20);
    let fifo = dir.path().join("trigger.pcap");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a path in our private temp dir.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);

    let mut child = Command::new(BIN)
        .args(["analyze", "--json"])
        .args(threads)
        .arg(&big)
        .arg(&fifo)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = read_all(child.stdout.take().unwrap());
    let stderr = read_all(child.stderr.take().unwrap());
    // Once big.pcap shows in its maps, analyze waits in open(FIFO), before any walk.
    let maps = format!("/proc/{}/maps", child.id());
    let start = Instant::now();
    while !std::fs::read_to_string(&maps).unwrap_or_default().contains(big.to_str().unwrap()) {
        assert!(start.elapsed() < Duration::from_secs(30), "big.pcap never mapped");
        std::thread::sleep(Duration::from_millis(5));
    }
    let half = len / 2;
    std::fs::OpenOptions::new().write(true).open(&big).unwrap().set_len(half).unwrap();
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(&std::fs::read(data("wwr_nagle.pcap")).unwrap()).unwrap();
    drop(w);
    let status = wait_bounded(&mut child, Duration::from_secs(120));
    let (stdout, stderr) = (stdout.join().unwrap(), String::from_utf8_lossy(&stderr.join().unwrap()).into_owned());
    assert_eq!(status.code(), Some(4), "{status:?}\n{stderr}");
    let r = json(&stdout);
    let whole = ends.iter().filter(|e| **e <= half).count() as u64 - 1;
    let cut_record = ends[whole as usize];
    assert_eq!(r["inputs"][0]["packets"], whole, "the records wholly before the cut");
    let what = format!("the file shrank to {half} bytes while being read (truncated at offset {half})");
    assert_eq!(r["inputs"][0]["damage"], format!("offset {cut_record}: {what}"), "{stderr}");
    assert_eq!(r["inputs"][1]["packets"], 157, "the other file is whole");
    assert!(stderr.starts_with("tcpdoctor: warning: ") && stderr.contains(&what), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // Results for the part read: every connection before the cut, the Nagle stall found.
    let copies_before = whole / t.records.len() as u64;
    assert!(r["inputs"][0]["connections"].as_u64().unwrap() >= copies_before, "{}", r["inputs"][0]);
    assert!(r["findings"].as_array().unwrap().iter().any(|f| f["kind"] == "nagle_delayed_ack"));
}

/// Runs `tcpdoctor ARGS` with its stdin fed by `feed` (from a thread: the
/// writer's errors, e.g. a closed pipe, end it quietly). Returns the exit
/// status, stdout, stderr, the child's peak RSS in KiB (wait4's rusage of
/// this child alone) and the wall time.
fn run_fed(
    args: &[&str],
    feed: impl FnOnce(&mut std::process::ChildStdin) -> std::io::Result<()> + Send + 'static,
    limit: Duration,
    pre: impl FnOnce(&mut Command),
) -> (ExitStatus, Vec<u8>, String, i64, Duration) {
    use std::os::unix::process::ExitStatusExt;
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    pre(&mut cmd);
    let start = Instant::now();
    // Reaped below by wait4, which also gives this child's own rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = feed(&mut stdin);
    });
    let stdout = read_all(child.stdout.take().unwrap());
    let stderr = read_all(child.stderr.take().unwrap());
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: an empty rusage for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child; it is reaped here and nowhere else.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        assert_eq!(r, pid);
        let _ = tx.send((status, ru.ru_maxrss));
    });
    let (status, rss) = rx.recv_timeout(limit).unwrap_or_else(|_| {
        // SAFETY: kill(2) on the PID of the child this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("tcpdoctor {args:?} still running after {limit:?}; killed")
    });
    let took = start.elapsed();
    writer.join().unwrap();
    let err = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
    (ExitStatus::from_raw(status), stdout.join().unwrap(), err, rss, took)
}

/// The input file names differ; everything else must not.
fn without_file_names(mut v: Value) -> Value {
    for i in v["inputs"].as_array_mut().unwrap() {
        i["file"] = Value::Null;
    }
    for w in v["warnings"].as_array_mut().unwrap() {
        *w = Value::Null;
    }
    v
}

/// Peak RSS allowed for a streamed analysis: the 1 MiB read buffer, the
/// process itself (a few MiB), and per-connection state for the few open
/// connections, with room to spare; the input is ten times this.
const STREAM_RSS_BOUND_KIB: i64 = 64 << 10;

/// Hundreds of MB of captured connections written by a generator into a pipe
/// (never stored whole on the way in): the report equals the one for the same
/// bytes as a file (written alongside, for the comparison), and analyze's peak
/// RSS stays under 64 MiB while the input is 10× that (before: RSS ≈ input).
#[test]
fn a_stream_ten_times_the_memory_bound_gives_the_file_s_report() {
    let t = std::sync::Arc::new(Template::load());
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.pcap");
    let input_bytes = (STREAM_RSS_BOUND_KIB << 10) * 10 + 1;
    let copies = input_bytes as usize / t.copy_len() + 1;
    let (t2, copy2) = (t.clone(), copy.clone());
    let feed = move |pipe: &mut std::process::ChildStdin| -> std::io::Result<()> {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&copy2)?);
        let mut buf = t2.header.clone();
        for k in 0..copies as u32 {
            t2.copy(k, &mut buf);
            pipe.write_all(&buf)?;
            file.write_all(&buf)?;
            buf.clear();
        }
        file.flush()
    };
    let (status, stdout, stderr, rss_kib, took) =
        run_fed(&["analyze", "--json", "-"], feed, Duration::from_secs(600), |_| {});
    eprintln!("streamed {} MiB in {took:?}: peak RSS {rss_kib} KiB", input_bytes >> 20);
    assert_eq!(status.code(), Some(0), "{status:?}\n{stderr}");
    let streamed = json(&stdout);
    assert_eq!(std::fs::metadata(&copy).unwrap().len(), 24 + (copies * t.copy_len()) as u64);
    assert_eq!(streamed["inputs"][0]["packets"], copies * t.records.len());
    assert_eq!(streamed["inputs"][0]["connections"], copies);
    assert!(
        rss_kib < STREAM_RSS_BOUND_KIB,
        "peak RSS {rss_kib} KiB for a {} MiB stream (bound {STREAM_RSS_BOUND_KIB} KiB)",
        input_bytes >> 20
    );
    let out = Command::new(BIN).args(["analyze", "--json"]).arg(&copy).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(without_file_names(streamed), without_file_names(json(&out.stdout)));
}

/// Ctrl-C while the writer keeps the pipe open: the report of what was read,
/// a warning saying so, exit 0, within a second (before: killed by SIGINT).
#[test]
fn ctrl_c_on_an_open_pipe_prints_the_report_so_far() {
    let bytes = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let n = bytes.len();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let mut cmd = Command::new(BIN);
    cmd.args(["analyze", "--json", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = read_all(child.stdout.take().unwrap());
    let stderr = read_all(child.stderr.take().unwrap());
    stdin.write_all(&bytes).unwrap();
    // The pipe stays open until the test ends.
    let holder = std::thread::spawn(move || {
        let _ = rx.recv();
        drop(stdin);
    });
    // Wait until analyze has read all the bytes (its read count covers them) and sits in its wait.
    let io = format!("/proc/{}/io", child.id());
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&io).unwrap_or_default();
        let rchar: usize = text.lines().find_map(|l| l.strip_prefix("rchar: ")).map_or(0, |v| v.parse().unwrap());
        if rchar >= n {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "analyze never read its input ({text})");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on the PID of the child this test started.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let sent = Instant::now();
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    let took = sent.elapsed();
    let _ = tx.send(());
    holder.join().unwrap();
    let err = String::from_utf8_lossy(&stderr.join().unwrap()).into_owned();
    assert_eq!(status.code(), Some(0), "{status:?}\n{err}");
    assert!(took < Duration::from_secs(1), "took {took:?} to stop after Ctrl-C");
    let r = json(&stdout.join().unwrap());
    assert_eq!(r["inputs"][0]["packets"], 157);
    assert_eq!(r["inputs"][0]["interrupted"], true);
    let warning = format!("-: interrupted (Ctrl-C) after 157 packets, at offset {n}; the report covers those");
    assert!(r["warnings"].as_array().unwrap().iter().any(|w| *w == warning.as_str()), "{}", r["warnings"]);
    assert!(r["findings"].as_array().unwrap().iter().any(|f| f["kind"] == "nagle_delayed_ack"));
    assert_eq!(err.trim_end(), format!("tcpdoctor: {warning}"));
}

/// Limits the child's address space to 1 GiB, so that code reading an endless
/// input whole fails fast instead of taking the machine's memory.
fn at_most_1_gib(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: 1 << 30, rlim_max: 1 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Endless inputs: devices are not captures (exit 3 at once); a valid header
/// followed by endless zeros stops at the first record (before: each was read
/// whole until memory ran out).
#[test]
fn endless_inputs_fail_at_once() {
    for dev in ["/dev/zero", "/dev/urandom"] {
        let (status, _, err, _, took) = run_fed(&["analyze", dev], |_| Ok(()), Duration::from_secs(10), at_most_1_gib);
        assert_eq!(status.code(), Some(3), "{dev}: {status:?}\n{err}");
        assert!(err.starts_with(&format!("tcpdoctor: {dev}: offset 0: not a pcap or pcapng file")), "{err}");
        assert!(took < Duration::from_secs(1), "{dev}: took {took:?}");
    }
    let header = std::fs::read(data("wwr_nagle.pcap")).unwrap()[..24].to_vec();
    let feed = move |pipe: &mut std::process::ChildStdin| -> std::io::Result<()> {
        pipe.write_all(&header)?;
        let zeros = vec![0u8; 1 << 16];
        // Bounded: 4 GiB at most; a reader that stops reading closes the pipe long before.
        for _ in 0..(1 << 16) {
            pipe.write_all(&zeros)?;
        }
        Ok(())
    };
    let (status, _, err, _, took) = run_fed(&["analyze", "-"], feed, Duration::from_secs(30), at_most_1_gib);
    assert_eq!(status.code(), Some(3), "{status:?}\n{err}");
    assert!(err.contains("-: offset 24: packet record says the packet was 0 bytes long"), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// An EPB naming interface 7 between valid packets of a real pcapng: skipped
/// with one warning, every packet after it analysed, exit 4 (before: the walk
/// ended there and every later packet was lost).
#[test]
fn a_pcapng_block_naming_an_undeclared_interface_is_skipped() {
    let orig = std::fs::read(data("nagle_ns.pcapng")).unwrap();
    // Walk the blocks (little-endian file), find the 10th EPB and copy it with interface 7.
    assert_eq!(&orig[8..12], &[0x4d, 0x3c, 0x2b, 0x1a]);
    let (mut at, mut epbs) = (0, 0);
    let (insert_at, bad) = loop {
        let (kind, len) = (le32(&orig, at), le32(&orig, at + 4) as usize);
        if kind == 6 {
            epbs += 1;
            if epbs == 10 {
                let mut b = orig[at..at + len].to_vec();
                b[8..12].copy_from_slice(&7u32.to_le_bytes());
                break (at, b);
            }
        }
        at += len;
    };
    let mut edited = orig[..insert_at].to_vec();
    edited.extend_from_slice(&bad);
    edited.extend_from_slice(&orig[insert_at..]);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("orig.pcapng"), dir.path().join("edited.pcapng"));
    std::fs::write(&a, &orig).unwrap();
    std::fs::write(&b, &edited).unwrap();
    let run = |p: &Path| Command::new(BIN).args(["analyze", "--json"]).arg(p).output().unwrap();
    let (o, e) = (run(&a), run(&b));
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(e.status.code(), Some(4), "{}", String::from_utf8_lossy(&e.stderr));
    let (o, e_json) = (json(&o.stdout), json(&e.stdout));
    let warning =
        format!("{}: 1 packet blocks name an undeclared interface (first at offset {insert_at}); skipped", b.display());
    assert_eq!(e_json["warnings"], serde_json::json!([warning]));
    assert_eq!(e_json["inputs"][0]["skipped_blocks"], 1);
    assert!(e_json["inputs"][0]["damage"].is_null());
    assert_eq!(String::from_utf8_lossy(&e.stderr).trim_end(), format!("tcpdoctor: warning: {warning}"));
    // Every packet of the original was analysed, with the same findings.
    assert_eq!(e_json["inputs"][0]["packets"], o["inputs"][0]["packets"]);
    assert_eq!(e_json["findings"], o["findings"]);
    assert_eq!(e_json["connections"], o["connections"]);
}

/// Connections to more distinct servers than the per-file bound: the first
/// 512 keep their aggregates, the rest are counted in a warning, so memory
/// does not grow with the number of servers a stream names (before: every
/// server kept two 13 KiB histograms until the end).
#[test]
fn aggregates_are_kept_for_a_bounded_number_of_servers() {
    let t = Template::load();
    let mut bytes = t.header.clone();
    for k in 0..600 {
        t.copy_to(k, true, &mut bytes);
    }
    let caps = [tcpdoctor::capture::Capture::from_bytes("servers.pcap", bytes)];
    let opts = tcpdoctor::analyze::Options { ladder_rows: 60, ..Default::default() };
    let r = tcpdoctor::analyze::analyze(&caps, &opts).unwrap();
    assert_eq!(r.inputs[0].connections, 600);
    assert_eq!(r.breakdown.len(), 512);
    assert_eq!(r.findings.iter().filter(|f| matches!(f, tcpdoctor::record::Finding::NagleDelayedAck(_))).count(), 512);
    let w = r.warnings.iter().find(|w| w.contains("more than 512 server endpoints")).expect("a warning");
    // 88 connections' exchanges and stalls (40 and 39 each) were dropped.
    assert!(w.contains(&format!(" {} observations ", 88 * (40 + 39))), "{w}");
}

/// Mapped files stay open during the analysis (to ask a shrinking file's size):
/// 1100 of them under a soft open-files limit of 256 are all analysed, the
/// limit raised toward the hard one as needed.
#[test]
fn more_files_than_the_soft_open_files_limit() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("wwr_nagle.pcap");
    std::fs::copy(data("wwr_nagle.pcap"), &src).unwrap();
    let mut paths = Vec::new();
    for i in 0..1100 {
        let p = dir.path().join(format!("{i}.pcap"));
        std::fs::hard_link(&src, &p).unwrap();
        paths.push(p);
    }
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit on a live rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    assert!(lim.rlim_max >= 1200, "the hard limit ({}) leaves no room to test this", lim.rlim_max);
    let mut cmd = Command::new(BIN);
    cmd.args(["analyze", "--json"]).args(&paths).stdout(Stdio::piped()).stderr(Stdio::piped());
    {
        use std::os::unix::process::CommandExt;
        let hard = lim.rlim_max;
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit { rlim_cur: 256, rlim_max: hard };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &l) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let r = json(&out.stdout);
    assert_eq!(r["inputs"].as_array().unwrap().len(), 1100);
    assert!(r["inputs"].as_array().unwrap().iter().all(|i| i["packets"] == 157));
}

/// A pipe into `analyze -` is grown to the reader's 1 MiB buffer, so a big
/// stream costs a read (and a wake-up of the writer) per MiB, not per 64 KiB:
/// 5,500 reads and context switches became 335 on the 339 MB bench capture.
#[test]
fn a_pipe_into_analyze_is_grown_to_the_reader_s_buffer() {
    use std::os::fd::AsRawFd;
    let bytes = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let mut child = Command::new(BIN)
        .args(["analyze", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = read_all(child.stdout.take().unwrap());
    // SAFETY: F_GETPIPE_SZ on the write end this test holds.
    let size = || unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETPIPE_SZ) };
    let start = Instant::now();
    while size() < 1 << 20 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(size(), 1 << 20, "the pipe was not grown");
    stdin.write_all(&bytes).unwrap();
    drop(stdin);
    let status = wait_bounded(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(0));
    let r = json(&stdout.join().unwrap());
    assert_eq!(r["inputs"][0]["packets"], 157);
}

/// A reader that hands out its bytes in chunks of pseudo-random sizes (1 to
/// 16 bytes mostly, sometimes up to 4 KiB, sometimes an interrupted read).
struct Chunks {
    data: Vec<u8>,
    at: usize,
    rng: u64,
}

impl std::io::Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let n = match self.rng % 8 {
            0 if self.at < self.data.len() => return Err(std::io::ErrorKind::Interrupted.into()),
            0..=5 => 1 + (self.rng >> 8) as usize % 16,
            _ => 1 + (self.rng >> 8) as usize % 4096,
        };
        let n = n.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

type Seen = (Vec<(u64, i64, u32, Vec<u8>, u32)>, Option<String>, Option<(u64, u64)>);

fn walk(p: &mut tcpdoctor::capture::Packets<'_>) -> Seen {
    let mut out = Vec::new();
    while let Some(x) = p.next() {
        out.push((x.frame, x.ts_ns, x.link.0, x.data.to_vec(), x.orig_len));
    }
    (out, p.damage().map(|d| d.to_string()), p.undeclared())
}

/// [`walk`] by `Packets::for_each` (the loop `analyze` runs on one thread).
fn walk_each(p: &mut tcpdoctor::capture::Packets<'_>) -> Seen {
    let mut out = Vec::new();
    p.for_each(|x| out.push((x.frame, x.ts_ns, x.link.0, x.data.to_vec(), x.orig_len)));
    assert_eq!(p.frames(), out.len() as u64, "the walk counts what it gave");
    (out, p.damage().map(|d| d.to_string()), p.undeclared())
}

/// The streaming reader gives exactly the packets, damage and skipped blocks
/// of the walk over the same bytes in memory, for every capture in
/// tests/data, cut short at several points and with a record header
/// damaged, read in random chunks into buffers from 1 byte to 1 MiB (so
/// records straddle refills, and whole ones are taken from the buffer as it
/// stands). The fuzz target `stream` does the same on arbitrary bytes.
/// `Packets::for_each` gives the same as `next`, in memory and streamed.
#[test]
fn a_stream_read_in_any_chunks_walks_as_the_bytes_in_memory() {
    use tcpdoctor::capture::{Capture, Packets};
    let mut checked = 0;
    for p in common::captures() {
        let bytes = std::fs::read(&p).unwrap();
        let mut variants = vec![bytes.clone()];
        for cut in [bytes.len() / 3, bytes.len() / 2 + 7, bytes.len() - 1] {
            variants.push(bytes[..cut].to_vec());
        }
        if bytes.len() > 200 {
            let mut bad = bytes.clone();
            bad[100..104].copy_from_slice(&u32::MAX.to_le_bytes());
            variants.push(bad);
        }
        for (i, v) in variants.iter().enumerate() {
            let whole = Packets::new(v).map(|mut w| walk(&mut w)).map_err(|e| e.to_string());
            let each = Packets::new(v).map(|mut w| walk_each(&mut w)).map_err(|e| e.to_string());
            assert_eq!(whole, each, "for_each in memory: {} variant {i}", p.display());
            for (seed, size) in [(1u64, 1usize), (7, 61), (99, 4096), (12345, 1 << 20)] {
                let reader = Chunks { data: v.clone(), at: 0, rng: (seed * 0x9e37_79b9 + i as u64) | 1 };
                let stream = Capture::from_reader_buffered("chunks", reader, size);
                let streamed = stream.packets().map(|mut w| walk(&mut w)).map_err(|e| e.to_string());
                assert_eq!(whole, streamed, "{} variant {i}, buffer {size}", p.display());
                let reader = Chunks { data: v.clone(), at: 0, rng: (seed * 0x9e37_79b9 + i as u64) | 1 };
                let stream = Capture::from_reader_buffered("chunks", reader, size);
                let each = stream.packets().map(|mut w| walk_each(&mut w)).map_err(|e| e.to_string());
                assert_eq!(whole, each, "for_each: {} variant {i}, buffer {size}", p.display());
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
}
