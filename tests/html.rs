//! `--html` reports: written by `analyze`, `bench` and `diagnose` from real
//! captures and real servers, checked for well-formed markup and no outside
//! resources, and rendered in headless Chromium (Debian's package): the page
//! runs its script without errors, shows the verdict and the ladder with the
//! stall highlighted, and a screenshot is kept in target/test-artifacts/.

mod common;

use common::{Proc, free_port, lab, port_of, require, require_root, run_bounded, url_of};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcpdoctor"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tcpdoctor-html-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn artifacts() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Elements that have no end tag in HTML.
const VOID: &[&str] = &["meta", "link", "br", "hr", "img", "input", "col", "wbr", "source", "area", "base"];

/// A strict check of the markup we write: every element closed in order, attributes
/// quoted, script and style bodies skipped as raw text. Returns the element count.
fn well_formed(html: &str) -> Result<usize, String> {
    let (mut i, mut stack, mut count) = (0usize, Vec::<String>::new(), 0usize);
    let line = |at: usize| html[..at].matches('\n').count() + 1;
    while let Some(off) = html[i..].find('<') {
        let at = i + off;
        if html[at..].starts_with("<!DOCTYPE") || html[at..].starts_with("<!doctype") {
            i = at + html[at..].find('>').ok_or("unterminated doctype")? + 1;
            continue;
        }
        if html[at..].starts_with("<!--") {
            i = at + html[at..].find("-->").ok_or("unterminated comment")? + 3;
            continue;
        }
        let end = at + html[at..].find('>').ok_or_else(|| format!("line {}: unterminated tag", line(at)))?;
        let tag = &html[at + 1..end];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack.pop().ok_or_else(|| format!("line {}: </{name}> closes nothing", line(at)))?;
            if open != name {
                return Err(format!("line {}: </{name}> closes <{open}>", line(at)));
            }
            i = end + 1;
            continue;
        }
        let name: String = tag.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
        if name.is_empty() {
            return Err(format!("line {}: stray '<'", line(at)));
        }
        // Attribute values must be quoted, and quotes balanced.
        let (mut quoted, mut after_eq) = (false, false);
        for c in tag.chars() {
            if after_eq && c != '"' {
                return Err(format!("line {}: unquoted attribute value in <{tag}>", line(at)));
            }
            after_eq = !quoted && c == '=';
            if c == '"' {
                quoted = !quoted;
            }
        }
        if quoted {
            return Err(format!("line {}: unbalanced quotes in <{tag}>", line(at)));
        }
        count += 1;
        i = end + 1;
        if tag.ends_with('/') || VOID.contains(&name.as_str()) {
            continue;
        }
        if name == "script" || name == "style" {
            let close = format!("</{name}>");
            i += html[i..].find(&close).ok_or_else(|| format!("line {}: <{name}> never closed", line(at)))?;
        }
        stack.push(name);
    }
    match stack.pop() {
        Some(open) => Err(format!("<{open}> never closed")),
        None => Ok(count),
    }
}

#[test]
fn the_checker_catches_bad_markup() {
    assert!(well_formed("<!DOCTYPE html><html><body><p>a<br></p></body></html>").is_ok());
    assert!(well_formed("<html><body><p>a</body></html>").unwrap_err().contains("closes <p>"));
    assert!(well_formed("<html><div class=x></div></html>").unwrap_err().contains("unquoted"));
    assert!(well_formed("<html><script>if (a < b) {}</script></html>").is_ok());
    assert!(well_formed("<html>").unwrap_err().contains("never closed"));
}

/// Nothing is fetched from elsewhere: no links, no remote sources, no CSS urls.
fn self_contained(html: &str) {
    for bad in ["<link", "src=\"http", "href=\"http", "url(", "@import", "<img", "<iframe"] {
        assert!(!html.contains(bad), "the report refers to something outside it: {bad}");
    }
}

/// Loads the page in headless Chromium; returns the DOM after scripts ran, and stderr.
fn chromium(page: &Path, fragment: &str, screenshot: Option<&Path>) -> (String, String) {
    let profile = tmp(&format!("chromium-profile-{}", page.file_stem().unwrap().to_string_lossy()));
    let mut c = Command::new("chromium");
    c.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        .args(["--disable-extensions", "--no-first-run", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()));
    match screenshot {
        Some(png) => c.arg("--window-size=1000,2600").arg(format!("--screenshot={}", png.display())),
        None => c.arg("--dump-dom"),
    };
    c.arg(format!("file://{}{fragment}", page.display()));
    let (out, _) = run_bounded(c, Duration::from_secs(90));
    let _ = std::fs::remove_dir_all(&profile);
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The page ran its script to the end, threw nothing and logged nothing to the console.
fn loads_cleanly(dom: &str, stderr: &str) {
    assert!(dom.contains("data-ready=\"1\""), "the page's script did not finish: {dom}");
    assert!(!dom.contains(" data-error=\""), "a script error: {dom}");
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
}

/// The picker's options in the group labelled `group`.
fn picker_group<'a>(html: &'a str, group: &str) -> Vec<&'a str> {
    let Some((_, rest)) = html.split_once(&format!("<optgroup label=\"{group}\">")) else { return vec![] };
    let body = rest.split("</optgroup>").next().unwrap_or_default();
    body.split("<option ").skip(1).collect()
}

const STALLED: &str = "Stalled exchanges, worst first";
const SLOWEST: &str = "Slowest exchange of connections without a stall";

fn png_written(p: &Path) {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(b.starts_with(b"\x89PNG\r\n\x1a\n") && b.len() > 10_000, "{} is not a screenshot", p.display());
}

fn analyze_html(capture: &str, name: &str) -> (PathBuf, String) {
    let out_path = tmp(&format!("{name}.html"));
    let out =
        bin().args(["analyze", &common::data(capture).to_string_lossy(), "--html"]).arg(&out_path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTML report written to"));
    let html = std::fs::read_to_string(&out_path).unwrap();
    (out_path, html)
}

#[test]
fn analyze_report_of_nginx_with_nagle_renders_with_the_stall_highlighted() {
    let (path, html) = analyze_html("nginx_nodelay_off.pcap", "nginx-off");
    well_formed(&html).unwrap();
    self_contained(&html);
    assert!(html.contains("were held ~43.6 ms until 127.0.0.1 (client) sent a delayed ACK"), "verdict missing");
    assert!(html.contains("<code>tcp_nodelay on;</code>"), "the nginx fix, with its config line as code");
    assert!(html.contains(r#"<svg class="ladder""#) && html.contains(r#"<g class="stall">"#));
    assert!(html.contains(r#"class="seg held""#) && html.contains(r#"class="seg late""#));
    assert!(html.contains("delayed ACK ~40 ms"), "the histogram's delayed-ACK band");
    // One connection, 39 stalls: the picker offers its worst few, each with its breakdown.
    let stalled = picker_group(&html, STALLED);
    assert_eq!(stalled.len(), 3, "{stalled:?}");
    assert!(stalled.iter().all(|o| o.contains(": connection 1, ")), "{stalled:?}");
    assert!(stalled[1].contains("Worst stalled exchange #2: connection 1, 43.8 ms lost"), "{stalled:?}");
    assert!(picker_group(&html, SLOWEST).is_empty(), "its only connection stalled");
    assert_eq!(html.matches("<div class=\"ladder-view\"").count(), 3);
    assert_eq!(html.matches("<div class=\"breakdown\">").count(), 3 + 1, "a breakdown per exchange, and the mean");
    if !require("chromium") {
        return;
    }
    let (dom, err) = chromium(&path, "", None);
    loads_cleanly(&dom, &err);
    assert!(dom.contains("47.7 ms lost") && dom.contains("held by Nagle until the ACK"), "{dom}");
    let png = artifacts().join("analyze-nginx-nodelay-off.png");
    chromium(&path, "", Some(&png));
    png_written(&png);
}

#[test]
fn analyze_report_without_a_stall_says_so() {
    let (path, html) = analyze_html("nginx_nodelay_on.pcap", "nginx-on");
    well_formed(&html).unwrap();
    assert!(html.contains("No stall found") && html.contains("No exchange stalled"));
    // The connection did not stall: its slowest exchange is drawn, with its breakdown.
    assert!(html.contains("<h3>Slowest exchange: connection 1, 168 µs (no stall)</h3><div class=\"breakdown\">"));
    assert!(html.contains(r#"<svg class="ladder""#) && !html.contains(r#"<g class="stall">"#));
    if require("chromium") {
        let (dom, err) = chromium(&path, "", None);
        loads_cleanly(&dom, &err);
    }
}

/// 100 keep-alive connections to the Nagle lab server, captured: 100 connections that
/// all stall. The report stays small, lists the worst exchange of 20 connections in a
/// picker (at most 10 more for connections without a stall) and every connection in the
/// table; `#x=N` opens exchange N.
#[test]
fn a_hundred_stalling_connections_make_a_small_report_with_a_picker() {
    if !require_root() {
        return;
    }
    let (_lab, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle").to_string();
    let port = port_of(&nagle).to_string();
    let pcap = tmp("hundred.pcap");
    let cap = bin()
        .args(["capture", "-i", "lo", "-w"])
        .arg(&pcap)
        .args(["--duration", "4s", "-s", "200", "tcp", "port", &port])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cap = Proc(cap);
    std::thread::sleep(Duration::from_millis(700));
    let (out, _) = run_bounded(
        {
            let mut c = bin();
            c.args(["bench", "-t2", "-c100", "-d1500ms", "--json", &nagle]);
            c
        },
        Duration::from_secs(20),
    );
    assert!(out.status.success());
    let mut cap = cap;
    let st = cap.0.wait().unwrap();
    assert!(st.success(), "capture failed");
    let html_path = tmp("hundred.html");
    let out = bin().arg("analyze").arg(&pcap).arg("--html").arg(&html_path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&html_path).unwrap();
    well_formed(&html).unwrap();
    self_contained(&html);
    let size = html.len();
    assert!(size < 2_000_000, "{size} bytes for 100 connections");
    let stalled = picker_group(&html, STALLED);
    assert_eq!(stalled.len(), 20, "the 20 worst stalled exchanges in the picker");
    assert!(stalled.iter().all(|o| !o.contains('#')), "one per connection when 20 connections stalled: {stalled:?}");
    assert!(html.matches("<option ").count() <= 30);
    assert!(html.matches("<tr class=\"hot\">").count() >= 99, "the stalled connections in the table");
    eprintln!("100-connection report: {size} bytes");
    if require("chromium") {
        let (dom, err) = chromium(&html_path, "#x=7", None);
        loads_cleanly(&dom, &err);
        // The fragment opened exchange 7 and hid the first.
        assert!(dom.contains(r#"<div class="ladder-view" data-i="7">"#), "exchange 7 not shown");
        assert!(dom.contains(r#"<div class="ladder-view" data-i="0" hidden="">"#), "exchange 0 still shown");
    }
}

#[test]
fn bench_and_diagnose_reports_from_a_live_run() {
    let (_lab, servers) = lab(&[]);
    let nagle = url_of(&servers, "nagle").to_string();
    let bench_html = tmp("bench.html");
    let (out, _) = run_bounded(
        {
            let mut c = bin();
            c.args(["bench", "-t1", "-c4", "-d2500ms", &nagle, "--html"]).arg(&bench_html);
            c
        },
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&bench_html).unwrap();
    well_formed(&html).unwrap();
    self_contained(&html);
    assert!(html.contains(r#"<svg class="chart timeline""#) && html.contains("latency (log scale)"));
    assert!(html.contains("delayed-ACK timer (40 ms minimum)"), "bench's note on the 40 ms cluster");
    // Latency over time: one point per second of the run (the last partial).
    assert_eq!(html.matches("requests/s</title>").count(), 3, "three seconds in the timeline");

    let diag_html = tmp("diagnose.html");
    let (out, _) = run_bounded(
        {
            let mut c = bin();
            c.args(["diagnose", &nagle, "--html"]).arg(&diag_html);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "a cause is found: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&diag_html).unwrap();
    well_formed(&html).unwrap();
    self_contained(&html);
    assert!(html.contains("Nagle + delayed ACK") && html.contains("one request alone"));
    // As root the capture gives the ladder; without it, the page says what is missing.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert_eq!(html.contains(r#"<g class="stall">"#), root, "ladder present iff the capture ran");

    // The fix verified: before and after overlaid in one histogram.
    let verify_html = tmp("verify.html");
    let (out, _) = run_bounded(
        {
            let mut c = bin();
            c.args(["diagnose", &nagle, "--verify", url_of(&servers, "nodelay"), "--no-capture", "--html"])
                .arg(&verify_html);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&verify_html).unwrap();
    well_formed(&html).unwrap();
    assert!(html.contains("FIXED") && html.contains("before, under load") && html.contains("after, under load"));
    assert!(html.contains(r#"class="bars b""#) && html.contains(r#"class="bars c""#), "two series overlaid");
    if require("chromium") {
        for (p, name) in [(&bench_html, "bench"), (&diag_html, "diagnose"), (&verify_html, "diagnose-verify")] {
            let (dom, err) = chromium(p, "", None);
            loads_cleanly(&dom, &err);
            let png = artifacts().join(format!("{name}.png"));
            chromium(p, "", Some(&png));
            png_written(&png);
        }
    }
}

#[test]
fn an_html_path_that_cannot_be_written_fails_at_once() {
    let out = bin()
        .args(["analyze", &common::data("wwr_nagle.pcap").to_string_lossy(), "--html", "/nonexistent/dir/r.html"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--html /nonexistent/dir/r.html: cannot create it") && err.lines().count() == 1, "{err}");
    let port = free_port();
    let out = bin()
        .args(["bench", "-d1s", &format!("http://127.0.0.1:{port}/"), "--html", "/nonexistent/x.html"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "fails before the run");
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    if !require("script") {
        return;
    }
    let cmd =
        format!("{} analyze {}", env!("CARGO_BIN_EXE_tcpdoctor"), common::data("nginx_nodelay_off.pcap").display());
    // `script` gives the command a pseudo-terminal.
    let on_tty = |no_color: Option<&str>| {
        let mut c = Command::new("script");
        c.args(["-qec", &cmd, "/dev/null"]).env("TERM", "xterm");
        match no_color {
            Some(v) => c.env("NO_COLOR", v),
            None => c.env_remove("NO_COLOR"),
        };
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    let coloured = on_tty(None);
    assert!(coloured.contains("\x1b[1;31m* Nagle") || coloured.contains("* \x1b[1;31mNagle"), "{coloured:?}");
    assert!(coloured.contains("\x1b[1;31m  << delayed ACK\x1b[0m"), "{coloured:?}");
    assert!(!on_tty(Some("1")).contains('\x1b'), "NO_COLOR=1 turns colour off");
    let piped = bin().arg("analyze").arg(common::data("nginx_nodelay_off.pcap")).output().unwrap();
    assert!(!String::from_utf8_lossy(&piped.stdout).contains('\x1b'), "no colour into a pipe");
}

#[test]
fn a_flow_ladder_comes_first_in_the_picker() {
    let p = tmp("flow.html");
    let out = bin()
        .args(["analyze", &common::data("nagle_ns.pcapng").to_string_lossy(), "--flow", "2", "--html"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let html = std::fs::read_to_string(&p).unwrap();
    well_formed(&html).unwrap();
    let options: Vec<&str> = html.split("<option ").skip(1).collect();
    // The flow, connection 1's worst three stalls, connection 2's slowest exchange.
    assert_eq!(options.len(), 5, "{options:?}");
    assert!(options[0].contains("value=\"0\">Connection 2: "), "{options:?}");
    assert!(options[1].contains("value=\"1\">Worst stalled exchange: connection 1"), "{options:?}");
    assert!(options[4].contains("value=\"4\">Slowest exchange: connection 2"), "{options:?}");
    assert_eq!(picker_group(&html, STALLED).len(), 3);
}
