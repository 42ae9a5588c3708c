//! The `tcpdoctor` binary on bad input: exit codes (0 ok, 2 usage, 3 nothing
//! readable, 4 partial), and a stderr of exactly one line that starts with
//! `tcpdoctor: `, names the file (and the byte offset where one applies), and
//! never shows a panic.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

const BIN: &str = env!("CARGO_BIN_EXE_tcpdoctor");

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// A directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "tcpdoctor-cli-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_with(args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("run tcpdoctor");
    if let Some(input) = stdin {
        let mut w = child.stdin.take().unwrap();
        let input = input.to_vec();
        // Write from a thread so a child that exits early cannot deadlock us.
        std::thread::spawn(move || {
            let _ = w.write_all(&input);
        });
    }
    let Output { status, stdout, stderr } = child.wait_with_output().unwrap();
    Run {
        code: status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn run(args: &[&str]) -> Run {
    run_with(args, None)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

impl Run {
    /// Exit code as expected, and stderr is one `tcpdoctor: ` line containing every `needle`.
    fn expect(&self, code: i32, needles: &[&str]) -> &Self {
        let ctx = format!("exit {}\n--- stderr ---\n{}--- stdout ---\n{}", self.code, self.stderr, self.stdout);
        assert!(!self.stderr.contains("panicked"), "panic:\n{ctx}");
        assert!(!self.stderr.contains("RUST_BACKTRACE"), "panic:\n{ctx}");
        assert_eq!(self.code, code, "wrong exit code\n{ctx}");
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "stderr should be exactly one line\n{ctx}");
        assert!(lines[0].starts_with("tcpdoctor: "), "stderr should start with `tcpdoctor: `\n{ctx}");
        for n in needles {
            assert!(lines[0].contains(n), "stderr should mention {n:?}\n{ctx}");
        }
        self
    }

    /// Exit 0, nothing on stderr.
    fn expect_ok(&self) -> &Self {
        assert!(
            self.code == 0 && self.stderr.is_empty(),
            "expected a clean run: exit {}\n--- stderr ---\n{}",
            self.code,
            self.stderr
        );
        self
    }
}

fn pcap_header(link: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&4u16.to_le_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&65535u32.to_le_bytes());
    h.extend_from_slice(&link.to_le_bytes());
    h
}

fn record(out: &mut Vec<u8>, caplen: u32, data: &[u8]) {
    for v in [1_700_000_000u32, 0, caplen, data.len() as u32] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(data);
}

/// Offsets where the records of a little-endian µs/ns pcap end.
fn record_ends(b: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut off = 24;
    while off + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[off + 8..off + 12].try_into().unwrap()) as usize;
        if off + 16 + caplen > b.len() {
            break;
        }
        off += 16 + caplen;
        ends.push(off);
    }
    ends
}

fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}"))
}

// ---------------------------------------------------------------------------

#[test]
fn empty_file() {
    let t = TempDir::new("empty");
    let p = t.file("empty.pcap", b"");
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "empty"]);
}

#[test]
fn garbage_file() {
    let t = TempDir::new("garbage");
    let p = t.file("notes.txt", b"GET / HTTP/1.1\r\nHost: example\r\n\r\n");
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "not a pcap or pcapng file"]);
}

#[test]
fn wrong_magic() {
    let t = TempDir::new("magic");
    let mut b = pcap_header(1);
    b[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let p = t.file("magic.pcap", &b);
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "de ad be ef"]);
}

#[test]
fn header_shorter_than_24_bytes() {
    let t = TempDir::new("short");
    let p = t.file("short.pcap", &pcap_header(1)[..10]);
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "offset 0", "10 of 24 bytes"]);
}

#[test]
fn pcap_header_only_is_an_empty_verdict() {
    let t = TempDir::new("hdr");
    let p = t.file("header_only.pcap", &pcap_header(1));
    let r = run(&["analyze", s(&p)]);
    r.expect_ok();
    assert!(r.stdout.contains("0 packets"), "{}", r.stdout);
    assert!(r.stdout.contains("No stall found"), "{}", r.stdout);
    let r = run(&["analyze", "--json", s(&p)]);
    r.expect_ok();
    let v = json(&r.stdout);
    assert_eq!(v["inputs"][0]["packets"], 0);
    assert_eq!(v["findings"].as_array().unwrap().len(), 0);
}

/// Cut inside a record's data: the records before it are analysed (the Nagle
/// verdict is still found), exit 4, and stderr says which file and where.
#[test]
fn pcap_truncated_mid_record() {
    let full = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let ends = record_ends(&full);
    let last_good = ends[ends.len() - 2];
    let cut = last_good + 16 + 5; // inside the last record's data
    let t = TempDir::new("trunc");
    let p = t.file("truncated.pcap", &full[..cut]);
    let r = run(&["analyze", s(&p)]);
    r.expect(4, &[s(&p), &format!("offset {last_good}")]);
    assert!(r.stdout.contains("VERDICT"), "{}", r.stdout);
    assert!(r.stdout.contains("Nagle + delayed ACK"), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("{} packets", ends.len() - 1)), "{}", r.stdout);
    // The JSON report carries the damage too.
    let r = run(&["analyze", "--json", s(&p)]);
    assert_eq!(r.code, 4);
    let v = json(&r.stdout);
    let d = v["inputs"][0]["damage"].as_str().expect("damage in JSON");
    assert!(d.starts_with(&format!("offset {last_good}:")), "{d}");
}

/// Cut inside a record header (fewer than 16 bytes left).
#[test]
fn pcap_truncated_mid_record_header() {
    let full = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let ends = record_ends(&full);
    let cut = ends[10] + 7;
    let t = TempDir::new("trunchdr");
    let p = t.file("truncated_hdr.pcap", &full[..cut]);
    run(&["analyze", s(&p)]).expect(4, &[s(&p), &format!("offset {}", ends[10])]);
}

/// Cut inside the very first record: nothing readable, exit 3 with the offset.
#[test]
fn pcap_truncated_in_first_record() {
    let full = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let t = TempDir::new("trunc1");
    let p = t.file("first.pcap", &full[..24 + 20]);
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "offset 24"]);
}

/// Link type 147 (LINKTYPE_USER0): the records are read but none can be
/// decoded, so no input was usable: exit 3 (per the documented exit codes:
/// "unsupported link type"), naming the file and the link type.
#[test]
fn unknown_link_type() {
    let frame = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let mut b = pcap_header(147);
    let first = &frame[24 + 16..24 + 16 + 60];
    for _ in 0..5 {
        record(&mut b, first.len() as u32, first);
    }
    let t = TempDir::new("link");
    let p = t.file("user0.pcap", &b);
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "link type 147"]);
}

/// A record claiming ~4 GB in the middle of a file: damage at that record,
/// and the message gives the impossible length rather than guessing that the
/// capture "was probably interrupted" (the file goes on for 20 KB).
#[test]
fn absurd_caplen_mid_file() {
    let full = std::fs::read(data("wwr_nagle.pcap")).unwrap();
    let ends = record_ends(&full);
    let at = ends[20];
    let mut b = full.clone();
    b[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let t = TempDir::new("caplen");
    let p = t.file("caplen.pcap", &b);
    let r = run(&["analyze", s(&p)]);
    assert!(r.stdout.contains("21 packets"), "{}", r.stdout);
    assert!(r.stdout.contains("4294967280"), "claimed length not named:\n{}", r.stdout);
    assert!(!r.stdout.contains("probably interrupted"), "{}", r.stdout);
    r.expect(4, &[s(&p), &format!("offset {at}")]);
}

/// An absurd caplen in the first record: nothing readable, exit 3.
#[test]
fn absurd_caplen_first_record() {
    let mut b = pcap_header(1);
    record(&mut b, 0x7fff_ffff, &[0u8; 64]);
    let t = TempDir::new("caplen1");
    let p = t.file("caplen1.pcap", &b);
    run(&["analyze", s(&p)]).expect(3, &[s(&p), "offset 24"]);
}

#[test]
fn nonexistent_path() {
    let t = TempDir::new("missing");
    let p = t.0.join("does-not-exist.pcap");
    let r = run(&["analyze", s(&p)]);
    r.expect(3, &[s(&p), "No such file"]);
    // An open error has no byte offset; "offset 0: cannot open" reads as if
    // the file had been opened and was damaged at its first byte.
    assert!(!r.stderr.contains("offset"), "{}", r.stderr);
}

#[test]
fn a_directory() {
    let t = TempDir::new("dir");
    let r = run(&["analyze", s(&t.0)]);
    r.expect(3, &[s(&t.0), "directory"]);
    assert!(!r.stderr.contains("offset"), "{}", r.stderr);
}

/// `-` reads standard input: the same report as reading the file.
#[test]
fn stdin_gives_the_same_verdict_as_the_file() {
    let path = data("wwr_nagle.pcap");
    let bytes = std::fs::read(&path).unwrap();
    let from_file = run(&["analyze", "--json", s(&path)]);
    from_file.expect_ok();
    let from_stdin = run_with(&["analyze", "--json", "-"], Some(&bytes));
    from_stdin.expect_ok();
    let mut a = json(&from_file.stdout);
    let mut b = json(&from_stdin.stdout);
    assert_eq!(b["inputs"][0]["file"], "-");
    a["inputs"][0]["file"] = "-".into();
    b["inputs"][0]["file"] = "-".into();
    assert_eq!(a, b);
    assert!(!a["findings"].as_array().unwrap().is_empty());

    let text_file = run(&["analyze", s(&path)]);
    let text_stdin = run_with(&["analyze", "-"], Some(&bytes));
    assert_eq!(
        text_file.stdout.replace(s(&path), "-"),
        text_stdin.stdout,
        "text report differs between file and stdin"
    );
}

#[test]
fn empty_stdin() {
    run_with(&["analyze", "-"], Some(b"")).expect(3, &["-: ", "empty"]);
}

#[test]
fn stdin_twice_is_a_usage_error() {
    run_with(&["analyze", "-", "-"], Some(b"")).expect(2, &["standard input"]);
}

/// One good file and one garbage file: results from the good one, exit 4, and
/// stderr names the file that was skipped.
#[test]
fn one_good_file_and_one_garbage_file() {
    let t = TempDir::new("two");
    let bad = t.file("garbage.pcap", b"this is not a capture at all");
    let good = data("wwr_nagle.pcap");
    for args in [[s(&good), s(&bad)], [s(&bad), s(&good)]] {
        let r = run(&["analyze", args[0], args[1]]);
        r.expect(4, &[s(&bad)]);
        assert!(r.stdout.contains("Nagle + delayed ACK"), "{}", r.stdout);
        assert!(r.stdout.contains(s(&good)), "{}", r.stdout);
    }
    let r = run(&["analyze", "--json", s(&good), s(&bad)]);
    assert_eq!(r.code, 4);
    let v = json(&r.stdout);
    assert_eq!(v["inputs"].as_array().unwrap().len(), 1);
    let w = v["warnings"].as_array().unwrap();
    assert!(w.iter().any(|w| w.as_str().unwrap().contains(s(&bad))), "{w:?}");
}

/// One good file and one that does not exist: same as a garbage file.
#[test]
fn one_good_file_and_one_missing_file() {
    let t = TempDir::new("twomissing");
    let missing = t.0.join("missing.pcap");
    let good = data("wwr_nagle.pcap");
    let r = run(&["analyze", s(&good), s(&missing)]);
    r.expect(4, &[s(&missing)]);
    assert!(r.stdout.contains("Nagle + delayed ACK"), "{}", r.stdout);
}

#[test]
fn two_garbage_files() {
    let t = TempDir::new("twobad");
    let a = t.file("a.pcap", b"garbage one");
    let b = t.file("b.pcap", b"");
    // Nothing readable: both files and both reasons are named.
    run(&["analyze", s(&a), s(&b)]).expect(3, &[s(&a), "not a pcap", s(&b), "empty"]);
}

#[test]
fn filter_syntax_error_names_the_word() {
    let good = data("wwr_nagle.pcap");
    run(&["analyze", "--filter", "port 80 andd host 1.2.3.4", s(&good)]).expect(2, &["--filter", "andd"]);
    run(&["analyze", "--filter", "port eighty", s(&good)]).expect(2, &["--filter", "eighty"]);
    run(&["analyze", "--filter", "(port 80", s(&good)]).expect(2, &["--filter", ")"]);
}

#[test]
fn hostile_filters_are_refused_not_crashed_on() {
    // Each overflowed the parser's stack (exit 134) before its size and depth were bounded.
    let good = data("wwr_nagle.pcap");
    let parens = format!("{}port 80{}", "(".repeat(15_000), ")".repeat(15_000));
    let nots = format!("{}port 80", "!".repeat(120_000));
    let deep = format!("{}port 80{}", "(".repeat(100), ")".repeat(100));
    for f in [&parens, &nots] {
        run(&["analyze", "--filter", f, s(&good)]).expect(2, &["--filter", "more than 10000"]);
        run(&["capture", "-i", "lo", "-w", "/dev/null", f]).expect(2, &["filter", "more than 10000"]);
        run(&["watch", "-i", "lo", f]).expect(2, &["filter", "more than 10000"]);
    }
    run(&["analyze", "--filter", &deep, s(&good)]).expect(2, &["--filter", "more than 64 deep"]);
}

#[test]
fn flow_that_does_not_exist() {
    let good = data("wwr_nagle.pcap");
    let r = run(&["analyze", "--flow", "999", s(&good)]);
    r.expect(2, &["--flow 999", "no such connection"]);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn flow_that_exists() {
    let good = data("wwr_nagle.pcap");
    let r = run(&["analyze", "--flow", "1", s(&good)]);
    r.expect_ok();
    assert!(r.stdout.contains("Connection 1:"), "{}", r.stdout);
}

#[test]
fn no_files_is_a_usage_error() {
    let r = run(&["analyze"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"));
}

/// A listener nobody may reach: a bad command line is refused before any traffic.
struct Untouched(std::net::TcpListener);

impl Untouched {
    fn new() -> Untouched {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        Untouched(l)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.0.local_addr().unwrap().port())
    }

    fn assert_untouched(&self) {
        let r = self.0.accept();
        assert!(matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "a connection came: {r:?}");
    }
}

impl Run {
    /// Exit 2 from the argument parser: no panic, and the first stderr line says what is wrong.
    fn expect_usage(&self, needles: &[&str]) {
        let ctx = format!("exit {}\n--- stderr ---\n{}", self.code, self.stderr);
        assert!(!self.stderr.contains("panicked"), "panic:\n{ctx}");
        assert_eq!(self.code, 2, "wrong exit code\n{ctx}");
        let first = self.stderr.lines().next().unwrap_or_default();
        for n in needles {
            assert!(first.contains(n), "the first line should mention {n:?}\n{ctx}");
        }
    }
}

#[test]
fn bench_bad_command_lines_are_exit_2_before_any_traffic() {
    let server = Untouched::new();
    let url = server.url();
    let cases: [(&[&str], &[&str]); 11] = [
        (&["-c", "0"], &["--connections", "at least 1"]),
        (&["-t", "0"], &["--threads", "at least 1"]),
        (&["-R", "0"], &["--rate", "positive"]),
        (&["-R", "-3"], &["--rate", "positive"]),
        (&["-R", "NaN"], &["--rate", "positive"]),
        (&["-R", "inf"], &["--rate", "positive"]),
        (&["-H", "NoColon"], &["NoColon", "no colon"]),
        (&["-H", ": v"], &["name", "empty"]),
        (&["-H", "Bad Name: v"], &["Bad Name", "no spaces"]),
        (&["--method", ""], &["--method", "empty"]),
        (&["--method", "GE/T"], &["GE/T", "not an HTTP method"]),
    ];
    for (args, needles) in cases {
        let mut all = vec!["bench", "-d", "1s"];
        all.extend_from_slice(args);
        all.push(&url);
        run(&all).expect_usage(needles);
    }
    for (u, what) in [("http://127.0.0.1:0/", "port 0"), ("ftp://127.0.0.1/", "unknown scheme")] {
        run(&["bench", "-d", "1s", u]).expect(2, &[u, what]);
    }
    server.assert_untouched();
}

#[test]
fn diagnose_with_no_such_interface_fails_at_once_before_any_traffic() {
    let server = Untouched::new();
    let r = run(&["diagnose", "-i", "nosuchif0", &server.url()]);
    r.expect(2, &["-i nosuchif0: no such interface (`ip link` lists them)"]);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    server.assert_untouched();
}

/// Runs with at most 4 GB of address space, so a binary that reads an endless file
/// whole dies instead of taking the machine's memory.
fn run_capped(args: &[&str]) -> Run {
    let mut all = vec!["-c", "ulimit -v 4000000 && exec \"$0\" \"$@\"", BIN];
    all.extend_from_slice(args);
    let Output { status, stdout, stderr } = Command::new("sh").args(&all).stdin(Stdio::null()).output().unwrap();
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

#[test]
fn body_file_and_before_are_at_most_64_mib() {
    let dir = TempDir::new("limits");
    let big = dir.0.join("big");
    std::fs::File::create(&big).unwrap().set_len(65 << 20).unwrap(); // sparse: no disk used
    let server = Untouched::new();
    let url = server.url();
    for f in [s(&big), "/dev/zero"] {
        let r = run_capped(&["bench", "-d", "1s", "--body-file", f, &url]);
        r.expect(2, &[&format!("--body-file {f}: larger than 64 MiB"), "held in memory"]);
        let r = run_capped(&["diagnose", "--before", f, &url]);
        r.expect(2, &[&format!("--before {f}: larger than 64 MiB")]);
    }
    server.assert_untouched();
    // At the limit a body is fine: the request goes out (to a closed port here, so exit 5).
    let edge = dir.0.join("edge");
    std::fs::File::create(&edge).unwrap().set_len(64 << 20).unwrap();
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let r = run_capped(&[
        "bench",
        "-t1",
        "-c1",
        "-d",
        "200ms",
        "--body-file",
        s(&edge),
        &format!("http://127.0.0.1:{closed}/"),
    ]);
    r.expect(5, &["unable to connect", "Connection refused"]);
}
