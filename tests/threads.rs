//! `analyze --threads N` splits a file's connections between threads and
//! merges the parts: the report must be byte for byte the one a single thread
//! makes, on every capture in tests/data and on larger mixtures of them
//! (many connections across shards, handshake-less connections whose roles
//! hang on other connections, ties, sweeps of the table, a full endpoint table).

mod common;

use common::tcpdoctor;
use std::path::{Path, PathBuf};
use tcpdoctor::capture::{LinkType, all_packets};

/// Windows small enough that a test capture spans many, whose starts the
/// shards guess (and sometimes guess wrong): windowed.rs's test knob.
const SMALL_WINDOW: &str = "3000";

/// Exit code, stdout and stderr of `analyze FILE --threads N`, as JSON or
/// text, optionally with the file read in windows of `window` bytes.
fn analyze_in(file: &Path, threads: u32, json: bool, window: Option<&str>) -> (Option<i32>, Vec<u8>, Vec<u8>) {
    let mut cmd = tcpdoctor();
    cmd.arg("analyze").arg(file).args(["--threads", &threads.to_string()]);
    if let Some(w) = window {
        cmd.env("TCPDOCTOR_ANALYZE_WINDOW", w);
    }
    if json {
        cmd.arg("--json");
    }
    let o = cmd.output().unwrap();
    (o.status.code(), o.stdout, o.stderr)
}

fn analyze(file: &Path, threads: u32, json: bool) -> (Option<i32>, Vec<u8>, Vec<u8>) {
    analyze_in(file, threads, json, None)
}

/// The JSON report, checked to be the same on 1, 2 and 3 threads, and on 2
/// with small windows (and the text too).
fn same_on_any_threads(file: &Path) -> serde_json::Value {
    for json in [true, false] {
        let one = analyze(file, 1, json);
        assert!(
            matches!(one.0, Some(0 | 4)),
            "{}: exit {:?}: {}",
            file.display(),
            one.0,
            String::from_utf8_lossy(&one.2)
        );
        for (n, window) in [(2, None), (3, None), (2, Some(SMALL_WINDOW))] {
            let many = analyze_in(file, n, json, window);
            let how = format!("{n} threads{}", window.map_or(String::new(), |w| format!(" in {w}-byte windows")));
            assert_eq!(one.0, many.0, "{}: exit code on {how}", file.display());
            if one.1 != many.1 {
                let (a, b) = (String::from_utf8_lossy(&one.1), String::from_utf8_lossy(&many.1));
                let at = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(0);
                panic!(
                    "{}: the {} report differs on {how}, first at line {}:\n 1: {}\n {n}: {}",
                    file.display(),
                    if json { "JSON" } else { "text" },
                    at + 1,
                    a.lines().nth(at).unwrap_or(""),
                    b.lines().nth(at).unwrap_or("")
                );
            }
        }
        if json {
            return serde_json::from_slice(&one.1).unwrap();
        }
    }
    unreachable!()
}

#[test]
fn every_capture_reports_the_same_on_one_two_and_three_threads() {
    let mut files = common::captures();
    files.sort();
    assert!(files.len() >= 30, "{} captures", files.len());
    for f in &files {
        same_on_any_threads(f);
    }
}

/// Shifts the port of `seg` (an Ethernet frame) that `shift` picks — the
/// higher one (`server`: false, clients' ports) or the lower (servers') — by
/// `by`, staying above 1024. Other frames are left alone.
fn shift_port(frame: &mut [u8], by: u32, server: bool) {
    if frame.len() < 14 + 20 || frame[12..14] != [8, 0] || frame[14 + 9] != 6 {
        return;
    }
    let ihl = usize::from(frame[14] & 15) * 4;
    let tcp = 14 + ihl;
    if frame.len() < tcp + 4 {
        return;
    }
    let port = |f: &[u8], at: usize| u16::from_be_bytes([f[at], f[at + 1]]);
    let (src, dst) = (port(frame, tcp), port(frame, tcp + 2));
    let pick_src = (src > dst) != server;
    let at = if pick_src { tcp } else { tcp + 2 };
    let p = u32::from(port(frame, at));
    let moved = if p < 1024 { p } else { 1024 + (p - 1024 + by) % (65536 - 1024) };
    frame[at..at + 2].copy_from_slice(&(moved as u16).to_be_bytes());
}

/// A capture to copy into a mixture: name, copies, shift the servers' ports
/// (else the clients'), the range of its packets copied.
const ALL: std::ops::Range<usize> = 0..usize::MAX;

type Part = (&'static str, u32, bool, std::ops::Range<usize>);

/// One pcap (ns timestamps, Ethernet) of copies of captures, copy `j`
/// starting `j × spacing_ns` after the first and with its clients' (or
/// servers') ports shifted by `j × stride`, all interleaved in time.
fn mixture(parts: &[Part], spacing_ns: i64, stride: u32) -> Vec<u8> {
    let mut frames: Vec<(i64, u32, usize, Vec<u8>, u32)> = Vec::new();
    for (k, (name, copies, server, range)) in parts.iter().enumerate() {
        let (copies, server) = (*copies, *server);
        let bytes = std::fs::read(common::data(name)).unwrap();
        let (packets, damage) = all_packets(&bytes).unwrap();
        assert!(damage.is_none(), "{name}");
        let t0 = packets.first().map_or(0, |p| p.ts_ns);
        for j in 0..copies {
            for (i, p) in packets.iter().enumerate().take(range.end).skip(range.start) {
                // Linux cooked headers (SLL, SLL2) become Ethernet ones: one link type for all.
                let (head, proto_at) = match p.link {
                    LinkType(1) => (14, 12),
                    LinkType(113) => (16, 14),
                    LinkType(276) => (20, 0),
                    l => panic!("{name}: link type {l}"),
                };
                let mut data = vec![0u8; 12];
                data.extend_from_slice(&p.data[proto_at..proto_at + 2]);
                data.extend_from_slice(&p.data[head..]);
                shift_port(&mut data, j * stride + k as u32 * 7919, server);
                let ts = 1_700_000_000_000_000_000 + p.ts_ns - t0 + i64::from(j) * spacing_ns;
                frames.push((ts, j, i + (k << 32), data, p.orig_len + 14 - head as u32));
            }
        }
    }
    frames.sort_by_key(|f| (f.0, f.1, f.2));
    // pcap, little-endian, ns timestamps: magic, version 2.4, zone, sigfigs, snaplen, Ethernet.
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_3c4d_u32.to_le_bytes());
    out.extend_from_slice(&[2, 0, 4, 0]);
    for v in [0u32, 0, 262_144, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for (ts, _, _, data, orig) in frames {
        let (s, ns) = (ts / 1_000_000_000, ts % 1_000_000_000);
        for v in [s as u32, ns as u32, data.len() as u32, orig] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&data);
    }
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Hundreds of connections from copies of real captures, interleaved: Nagle
/// stalls, losses, an upstream behind a proxy, TLS, handshake-less copies
/// whose roles rest on other copies' connections (held by other shards).
#[test]
fn a_mixture_of_real_captures_reports_the_same_on_one_two_and_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let parts = [
        ("midstream_port61000.pcap", 24, false, ALL),
        ("rtt/midstream_high_port.pcap", 8, false, ALL),
        ("nginx_nodelay_off.pcap", 10, false, ALL),
        ("nginx_nodelay_on.pcap", 6, false, ALL),
        ("loss_nagle_srv.pcap", 6, false, ALL),
        ("loss_netns.pcap", 6, false, ALL),
        ("rtt/proxy_jdk.pcap", 8, false, ALL),
        ("rtt/expect_100.pcap", 8, false, ALL),
        ("zero_window.pcap", 6, false, ALL),
        // The middle of the first body only: no handshake, no telling content.
        ("zero_window.pcap", 12, false, 7..108),
        ("tls/tls_resume.pcap", 8, false, ALL),
        ("think45.pcap", 10, false, ALL),
        ("wwr_nagle.pcap", 20, false, ALL),
        ("post_split_client.pcap", 10, false, ALL),
    ];
    let file = write(dir.path(), "mixture.pcap", &mixture(&parts, 3_000_000, 13));
    let r = same_on_any_threads(&file);
    assert!(r["inputs"][0]["connections"].as_u64().unwrap() > 200, "{}", r["inputs"][0]);
    let conns = r["connections"].as_array().unwrap();
    let roles = |from: &str| conns.iter().filter(|c| c["roles_from"] == from).count();
    let all: std::collections::BTreeMap<&str, usize> =
        conns.iter().map(|c| c["roles_from"].as_str().unwrap()).map(|k| (k, roles(k))).collect();
    assert!(roles("shared_endpoint") > 0, "roles taken from other connections' endpoints: {all:?}");
    assert!(r["stalled_exchanges"].as_array().unwrap().len() >= 10, "ladders");
    let kinds: Vec<&str> = r["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"upstream_wait") && kinds.contains(&"zero_window"), "{kinds:?}");
}

/// A file cut in the middle of a record: the same damage, and the same
/// report of what came before it, on any number of threads.
#[test]
fn a_damaged_mixture_reports_the_same_on_one_two_and_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let parts = [("wwr_nagle.pcap", 30, false, ALL), ("midstream_port61000.pcap", 6, false, ALL)];
    let mut bytes = mixture(&parts, 5_000_000, 13);
    bytes.truncate(bytes.len() - 100);
    let r = same_on_any_threads(&write(dir.path(), "cut.pcap", &bytes));
    assert!(r["inputs"][0]["damage"].is_string(), "{}", r["inputs"][0]);
}

/// More frames than a sweep interval (connections closed long ago are
/// finished mid-file) and more connections than the report lists.
#[test]
fn thousands_of_connections_report_the_same_on_one_two_and_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let parts =
        [("syn_retry.pcap", 4200, false, ALL), ("wwr_nagle.pcap", 40, false, ALL), ("think45.pcap", 20, false, ALL)];
    let file = write(dir.path(), "many.pcap", &mixture(&parts, 1_000_000, 13));
    let r = same_on_any_threads(&file);
    let input = &r["inputs"][0];
    assert!(input["packets"].as_u64().unwrap() > 1 << 16, "more than one sweep interval: {input}");
    assert!(input["connections"].as_u64().unwrap() > 4096, "{input}");
    assert!(r["connections_omitted"].as_u64().unwrap() > 0, "the connection rows were trimmed");
}

/// More server endpoints than an endpoint table keeps: which are kept
/// depends on the order one thread meets them, so the file is analysed on
/// one thread after all; the report says so the same way.
#[test]
fn more_servers_than_kept_reports_the_same_on_one_two_and_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "servers.pcap", &mixture(&[("wwr_nagle.pcap", 560, true, ALL)], 2_000_000, 1));
    let r = same_on_any_threads(&file);
    let warned = r["warnings"].as_array().unwrap().iter().any(|w| w.as_str().unwrap().contains("server endpoints"));
    assert!(warned, "{}", r["warnings"]);
}

/// A thread count outside 1–256 is a usage error naming the option (exit 2).
#[test]
fn a_thread_count_out_of_range_is_a_usage_error() {
    for bad in ["0", "257", "two"] {
        let o = tcpdoctor().args(["analyze", "--threads", bad]).arg(common::data("wwr_nagle.pcap")).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--threads {bad}: {err}");
        assert!(err.contains("--threads") && o.stdout.is_empty(), "--threads {bad}: {err}");
    }
}

/// With `--filter`, and with several files sharing the threads (4 threads, 2
/// files: each file split in 2; 6: in 3), the report is still the one-thread one.
#[test]
fn filters_and_several_files_report_the_same_on_any_threads() {
    let dir = tempfile::tempdir().unwrap();
    let parts = [
        ("midstream_port61000.pcap", 8, false, ALL),
        ("wwr_nagle.pcap", 20, false, ALL),
        ("think45.pcap", 10, false, ALL),
    ];
    let mix = write(dir.path(), "mix.pcap", &mixture(&parts, 3_000_000, 13));
    let other = common::data("rtt/proxy_jdk.pcap");
    let run = |threads: &str, args: &[&str]| {
        let o = tcpdoctor().arg("analyze").args(args).args(["--json", "--threads", threads]).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let (mix, other) = (mix.to_str().unwrap(), other.to_str().unwrap());
    for args in [vec![mix, "--filter", "not port 61000"], vec![mix, other], vec![mix, other, "--filter", "tcp"]] {
        let one = run("1", &args);
        for n in ["2", "4", "6"] {
            assert!(one == run(n, &args), "{args:?}: differs on {n} threads");
        }
    }
}

/// A pcapng block of `kind` (little-endian), its body padded to 4 bytes.
fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (body.len().next_multiple_of(4) + 12) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out.resize(out.len() + body.len().next_multiple_of(4) - body.len(), 0);
    out.extend_from_slice(&len.to_le_bytes());
}

/// Frames a shard does not own are neither timed nor counted by it: the
/// counts that each frame's owner makes (timestamps clamped, frames of a
/// link type that cannot be read, in the order met) add up to one thread's.
/// A pcapng of a mixture on an Ethernet interface, every 50th frame also
/// sent on an interface of an unsupported link type (and every 70th on a
/// third one), and every 97th frame 20 days late.
#[test]
fn clamped_times_and_unreadable_link_types_count_the_same_on_one_two_and_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let parts = [("midstream_port61000.pcap", 8, false, ALL), ("wwr_nagle.pcap", 20, false, ALL)];
    let pcap = mixture(&parts, 3_000_000, 13);
    let (packets, _) = all_packets(&pcap).unwrap();
    let mut out = Vec::new();
    let mut shb = 0x1a2b_3c4d_u32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut out, 0x0a0d_0d0a, &shb);
    for link in [1u16, 147, 148] {
        let mut idb = link.to_le_bytes().to_vec();
        idb.extend_from_slice(&[0, 0, 0, 0, 4, 0]);
        block(&mut out, 1, &idb);
    }
    let epb = |out: &mut Vec<u8>, iface: u32, ts_ns: i64, data: &[u8], orig: u32| {
        let us = (ts_ns / 1000) as u64;
        let mut b = Vec::new();
        for v in [iface, (us >> 32) as u32, us as u32, data.len() as u32, orig] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(data);
        block(out, 6, &b);
    };
    const DAY_NS: i64 = 86_400_000_000_000;
    for (i, p) in packets.iter().enumerate() {
        let late = if i % 97 == 96 { 20 * DAY_NS } else { 0 };
        epb(&mut out, 0, p.ts_ns + late, p.data, p.orig_len);
        for (every, iface) in [(50, 1), (70, 2)] {
            if i % every == every - 1 {
                epb(&mut out, iface, p.ts_ns, p.data, p.orig_len);
            }
        }
    }
    let r = same_on_any_threads(&write(dir.path(), "links.pcapng", &out));
    let warnings: Vec<&str> = r["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()).collect();
    let says = |what: &str| warnings.iter().any(|w| w.contains(what));
    let n = packets.len();
    assert!(says(&format!("{} packets have timestamps more than 13 days", n / 97)), "{warnings:?}");
    assert!(says(&format!("link type 147 is not supported; skipped {} packets", n / 50)), "{warnings:?}");
    assert!(says(&format!("link type 148 is not supported; skipped {} packets", n / 70)), "{warnings:?}");
}

/// Ctrl-C before the walks start: every shard finishes the window of the
/// file it is in (windowed.rs) and stops after the same frame, so the parts
/// merge, and the report is the one a single thread makes of the bytes
/// before that offset.
#[test]
fn a_stop_ends_every_shard_after_the_same_frame() {
    use std::sync::atomic::AtomicBool;
    use tcpdoctor::analyze::{Options, analyze};
    use tcpdoctor::capture::Capture;
    let parts =
        [("syn_retry.pcap", 8400, false, ALL), ("wwr_nagle.pcap", 80, false, ALL), ("think45.pcap", 20, false, ALL)];
    let bytes = mixture(&parts, 1_000_000, 13);
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(true)));
    let report = |bytes: &[u8], threads: usize, stop: Option<&'static AtomicBool>| {
        let o = Options { ladder_rows: 60, threads: Some(threads), stop, ..Options::default() };
        let r = analyze(&[Capture::from_bytes("many.pcap", bytes.to_vec())], &o).unwrap();
        serde_json::to_value(&r).unwrap()
    };
    for threads in [2, 3] {
        let mut r = report(&bytes, threads, Some(stop));
        let n = r["inputs"][0]["packets"].as_u64().unwrap();
        assert!(n > 0 && (n as usize) < bytes.len() / 60, "{threads} threads: stopped after {n} frames");
        let said = format!("many.pcap: interrupted (Ctrl-C) after {n} packets, at offset ");
        let w = r["warnings"].as_array().unwrap().iter().filter_map(|w| w.as_str()?.strip_prefix(&said)).next();
        let offset = w.map_or(bytes.len(), |w| w.split(';').next().unwrap().parse().unwrap());
        let mut one = report(&bytes[..offset], 1, None);
        assert_eq!(one["inputs"][0]["packets"], n, "the offset is the end of frame {n}");
        for x in [&mut r, &mut one] {
            let o = x.as_object_mut().unwrap();
            o.remove("inputs");
            o.remove("warnings");
            o.remove("interrupted");
        }
        assert_eq!(r, one, "{threads} threads");
    }
}

/// A xorshift generator: the same mutants on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// Damaged and oddly captured copies of every capture in tests/data (frames
/// cut as a snap length cuts them, header bytes changed, frames dropped,
/// repeated, swapped or moved back in time), written as pcap or pcapng: one
/// thread and several still make the same report. (Fuzzing found a frame cut by the
/// snap length going to the wrong shard this way.)
#[test]
fn mutated_captures_report_the_same_on_one_two_and_three_threads() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = common::captures();
    files.sort();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut made = 0;
    for f in &files {
        let bytes = std::fs::read(f).unwrap();
        let (packets, _) = all_packets(&bytes).unwrap();
        let Some(link) = packets.first().map(|p| p.link) else { continue };
        if packets.len() < 8 || packets.iter().any(|p| p.link != link) {
            continue;
        }
        for m in 0..3 {
            let mut frames: Vec<(i64, Vec<u8>, u32)> =
                packets.iter().map(|p| (p.ts_ns, p.data.to_vec(), p.orig_len)).collect();
            let n = frames.len();
            for _ in 0..1 + rng.below(n / 4) {
                let i = rng.below(n);
                let f = &mut frames[i];
                match rng.below(6) {
                    0 | 1 => {
                        let keep = 14 + rng.below(f.1.len().saturating_sub(14));
                        f.1.truncate(keep);
                    }
                    2 => {
                        let at = rng.below(f.1.len().min(80));
                        if let Some(b) = f.1.get_mut(at) {
                            *b = rng.below(256) as u8;
                        }
                    }
                    3 => f.0 -= rng.below(50_000_000) as i64,
                    4 if i + 1 < n => frames.swap(i, i + 1),
                    _ => {
                        let copy = frames[i].clone();
                        frames.insert(i, copy);
                    }
                }
            }
            if m == 2 {
                frames.remove(rng.below(frames.len()));
            }
            // The second as pcapng (one interface in ns), the others as pcap (ns timestamps).
            let mut out = Vec::new();
            let ng = m == 1;
            if ng {
                let mut shb = 0x1a2b_3c4d_u32.to_le_bytes().to_vec();
                shb.extend_from_slice(&[1, 0, 0, 0]);
                shb.extend_from_slice(&(-1i64).to_le_bytes());
                block(&mut out, 0x0a0d_0d0a, &shb);
                let mut idb = (link.0 as u16).to_le_bytes().to_vec();
                // Snap length 0, then if_tsresol = 9 and the end of options.
                idb.extend_from_slice(&[0, 0, 0, 0, 0, 0, 9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
                block(&mut out, 1, &idb);
            } else {
                out.extend_from_slice(&0xa1b2_3c4d_u32.to_le_bytes());
                out.extend_from_slice(&[2, 0, 4, 0]);
                for v in [0u32, 0, 262_144, link.0] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            for (ts, data, orig) in &frames {
                let orig = (*orig).max(data.len() as u32);
                if ng {
                    let mut b = Vec::new();
                    for v in [0, (*ts as u64 >> 32) as u32, *ts as u32, data.len() as u32, orig] {
                        b.extend_from_slice(&v.to_le_bytes());
                    }
                    b.extend_from_slice(data);
                    block(&mut out, 6, &b);
                } else {
                    let (s, ns) = (ts.div_euclid(1_000_000_000), ts.rem_euclid(1_000_000_000));
                    for v in [s as u32, ns as u32, data.len() as u32, orig] {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    out.extend_from_slice(data);
                }
            }
            let name =
                format!("{}-{m}.{}", f.file_stem().unwrap().to_string_lossy(), if ng { "pcapng" } else { "pcap" });
            let r = same_on_any_threads(&write(dir.path(), &name, &out));
            assert_eq!(r["inputs"][0]["format"], if ng { "pcapng" } else { "pcap" });
            assert!(r["inputs"][0]["packets"].as_u64() >= Some(frames.len() as u64 / 2), "{}", r["inputs"][0]);
            made += 1;
        }
    }
    assert!(made >= 90, "{made} mutants");
}

/// Files with no packet, or whose first record is cut: the same exit code,
/// report and message on any threads (a pcap file's first window holds no
/// whole record).
#[test]
fn files_with_no_whole_packet_report_the_same_on_any_threads() {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::read(common::data("wwr_nagle.pcap")).unwrap();
    for cut in [24, 30, 40, 24 + 16 + 20] {
        let file = write(dir.path(), &format!("cut{cut}.pcap"), &real[..cut]);
        for json in [true, false] {
            let one = analyze(&file, 1, json);
            for (n, window) in [(2, None), (3, None), (2, Some(SMALL_WINDOW)), (2, Some("64"))] {
                assert_eq!(one, analyze_in(&file, n, json, window), "{cut} bytes on {n} threads, window {window:?}");
            }
        }
    }
}
