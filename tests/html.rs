//! `--html` reports: written by `analyze`, `bench` and `diagnose` from real
//! captures and real servers, checked for well-formed markup and no outside
//! resources, and rendered in headless Chromium (Debian's package): the page
//! runs its script without errors (a self-test shows the check catches them),
//! shows the verdict and the ladder with the stall highlighted, sorts its
//! connection table on a click, and a screenshot is kept in
//! target/test-artifacts/. A 64 MiB capture built from the nginx captures shows
//! the report stays bounded and analyze's progress bar appears on a terminal.

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

/// What went wrong on a page Chromium loaded: its script did not finish, threw (the
/// page records uncaught errors on `<html data-error>`), or logged to the console.
fn page_problems(dom: &str, stderr: &str) -> Vec<String> {
    let mut p = Vec::new();
    if !dom.contains("data-ready=\"1\"") {
        p.push("the page's script did not finish".to_string());
    }
    if let Some((_, e)) = dom.split_once(" data-error=\"") {
        p.push(format!("script error: {}", e.split('"').next().unwrap_or_default()));
    }
    p.extend(stderr.lines().filter(|l| l.contains(":CONSOLE")).map(|l| format!("console: {l}")));
    p
}

/// The page ran its script to the end, threw nothing and logged nothing to the console.
fn loads_cleanly(dom: &str, stderr: &str) {
    let p = page_problems(dom, stderr);
    assert!(p.is_empty(), "{p:#?}");
}

/// The verdict section of the page as Chromium rendered it.
fn verdict_in(dom: &str) -> &str {
    let at = dom.find("<section class=\"verdict").unwrap_or_else(|| panic!("no verdict section: {dom}"));
    let end = dom[at..].find("</section>").map_or(dom.len(), |e| at + e);
    &dom[at..end]
}

/// A copy of `page` with `script` run after the page's own, and where it is.
fn with_script(page: &Path, name: &str, script: &str) -> PathBuf {
    let html = std::fs::read_to_string(page).unwrap();
    let out = tmp(name);
    std::fs::write(&out, html.replace("</body>", &format!("<script>{script}</script></body>"))).unwrap();
    out
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
    let verdict = verdict_in(&dom);
    assert!(verdict.contains("were held ~43.6 ms until 127.0.0.1 (client) sent a delayed ACK"), "{verdict}");
    assert!(verdict.contains("<code>tcp_nodelay on;</code>"), "{verdict}");
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
        assert!(verdict_in(&dom).contains("No stall found"), "{dom}");
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
            c.args(["diagnose", &nagle, "--json", "--html"]).arg(&diag_html);
            c
        },
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(1), "a cause is found: {}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(&diag_html).unwrap();
    well_formed(&html).unwrap();
    self_contained(&html);
    assert!(html.contains("Nagle + delayed ACK") && html.contains("one request alone"));
    // The requests alone are drawn: as many in the histogram as were measured, and as bars.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let alone = v["alone"]["requests"].as_u64().unwrap();
    let bins = v["alone"]["latency_histogram"]["bins"].as_array().unwrap();
    let drawn: u64 = bins.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert!(alone > 0 && drawn == alone, "{alone} requests alone, {drawn} in the histogram: {:#}", v["alone"]);
    assert!(html.contains(&format!("one request alone ({alone})")), "legend of the alone series");
    assert!(html.contains("<title>one request alone, "), "no bar for the requests alone");
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
        let verdicts = [
            (&bench_html, "bench", "delayed-ACK timer (40 ms minimum)"),
            (&diag_html, "diagnose", "Nagle + delayed ACK"),
            (&verify_html, "diagnose-verify", "FIXED: median latency under load"),
        ];
        for (p, name, verdict) in verdicts {
            let (dom, err) = chromium(p, "", None);
            loads_cleanly(&dom, &err);
            assert!(verdict_in(&dom).contains(verdict), "{name}: {verdict:?} not in {dom}");
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
    // A wide terminal: lines fitted to 80 columns would split the marks checked below.
    let cmd = format!(
        "stty rows 50 cols 200; {} analyze {}",
        env!("CARGO_BIN_EXE_tcpdoctor"),
        common::data("nginx_nodelay_off.pcap").display()
    );
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

/// The console check must be able to fail: pages with a deliberate script error, a
/// console message and a script that stops early are each caught, for the right reason.
#[test]
fn the_console_check_catches_script_errors() {
    if !require("chromium") {
        return;
    }
    let (page, _) = analyze_html("nginx_nodelay_off.pcap", "console-check");
    let (dom, err) = chromium(&page, "", None);
    assert_eq!(page_problems(&dom, &err), Vec::<String>::new(), "the page itself is clean");
    let thrown = with_script(&page, "thrown.html", "noSuchFunction();");
    let (dom, err) = chromium(&thrown, "", None);
    let p = page_problems(&dom, &err);
    assert!(p.iter().any(|m| m.starts_with("script error: ") && m.contains("noSuchFunction")), "{p:#?}");
    assert!(p.iter().any(|m| m.starts_with("console: ") && m.contains("noSuchFunction")), "{p:#?}");
    let logged = with_script(&page, "logged.html", "console.error('deliberate');");
    let (dom, err) = chromium(&logged, "", None);
    assert_eq!(page_problems(&dom, &err).len(), 1, "{:#?}", page_problems(&dom, &err));
    // The page's own script broken before its end: it never says it is ready.
    let html = std::fs::read_to_string(&page).unwrap();
    let stopped = tmp("stopped.html");
    std::fs::write(&stopped, html.replace("document.body.setAttribute(\"data-ready\"", "nope.x(\"data-ready\""))
        .unwrap();
    let (dom, err) = chromium(&stopped, "", None);
    assert!(page_problems(&dom, &err).contains(&"the page's script did not finish".to_string()));
}

/// Clicking a column header sorts the connection table (ascending, then descending).
/// The report comes from several captures at once (one connection each, of different
/// sizes). The click is made by a script the test appends to a copy of the page, after
/// the page's own: that needs no test hook in the report and no DevTools protocol client,
/// and `--dump-dom` then shows what the click did.
#[test]
fn the_connection_table_sorts_when_a_header_is_clicked() {
    if !require("chromium") {
        return;
    }
    let page = tmp("sortable.html");
    let files =
        ["nginx_nodelay_off.pcap", "think45.pcap", "wwr_nagle.pcap", "nginx_nodelay_on.pcap", "wwr_nodelay.pcap"];
    let out = bin().arg("analyze").args(files.map(common::data)).arg("--html").arg(&page).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // Column 3 is "packets"; each order is read as the page shows it.
    let click = r##"(function () {
      var t = document.querySelector("#connections table"), th = t.tHead.rows[0].cells[3];
      function order() { return Array.prototype.map.call(t.tBodies[0].rows, function (r) { return r.cells[3].textContent.trim(); }).join(","); }
      var seen = [order()];
      th.click(); seen.push(order(), th.getAttribute("aria-sort"));
      th.click(); seen.push(order(), th.getAttribute("aria-sort"));
      document.body.setAttribute("data-sort-test", seen.join("|"));
    })();"##;
    let (dom, err) = chromium(&with_script(&page, "sortable-click.html", click), "", None);
    loads_cleanly(&dom, &err);
    let seen = dom.split("data-sort-test=\"").nth(1).and_then(|s| s.split('"').next()).expect("the click script ran");
    let parts: Vec<&str> = seen.split('|').collect();
    let nums = |s: &str| s.split(',').map(|n| n.parse::<u64>().unwrap()).collect::<Vec<_>>();
    let (before, asc, desc) = (nums(parts[0]), nums(parts[1]), nums(parts[3]));
    assert_eq!(before.len(), files.len(), "{seen}");
    assert!(!before.is_sorted(), "most time lost first is not by packets, so the click has work to do: {seen}");
    assert!(asc.is_sorted() && parts[2] == "ascending", "{seen}");
    assert!(desc.iter().rev().is_sorted() && parts[4] == "descending", "{seen}");
}

/// A capture of 64 MiB or more made from real ones: copies of nginx_nodelay_off.pcap (one
/// connection, 39 stalls) and nginx_nodelay_on.pcap (one connection, none) one after the
/// other, each copy's client on its own address (127.x.y.2 and 127.x.y.3).
fn big_capture() -> PathBuf {
    struct Rec {
        ts_us: u64,
        data: Vec<u8>,
        orig: u32,
    }
    // Ethernet + IPv4: where the TCP header starts, and a port in it.
    let tcp = |d: &[u8]| 14 + usize::from(d[14] & 15) * 4;
    let port = |d: &[u8], at: usize| u16::from_be_bytes([d[tcp(d) + at], d[tcp(d) + at + 1]]);
    let read = |name: &str| -> (Vec<u8>, Vec<Rec>, u16) {
        let b = std::fs::read(common::data(name)).unwrap();
        assert_eq!(b[..4], [0xd4, 0xc3, 0xb2, 0xa1], "{name}: a little-endian µs pcap");
        let u32at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let (mut recs, mut at) = (Vec::new(), 24);
        while at + 16 <= b.len() {
            let len = u32at(at + 8) as usize;
            let ts_us = u64::from(u32at(at)) * 1_000_000 + u64::from(u32at(at + 4));
            recs.push(Rec { ts_us, data: b[at + 16..at + 16 + len].to_vec(), orig: u32at(at + 12) });
            at += 16 + len;
        }
        // The server port is where the first SYN (without ACK) went.
        let syn = recs.iter().find(|r| r.data[tcp(&r.data) + 13] & 0x12 == 0x02).expect("a SYN");
        let server = port(&syn.data, 2);
        (b[..24].to_vec(), recs, server)
    };
    let files = [read("nginx_nodelay_off.pcap"), read("nginx_nodelay_on.pcap")];
    let per_copy: usize = files.iter().flat_map(|f| &f.1).map(|r| 16 + r.data.len()).sum();
    let copies = (64 << 20) / per_copy + 1;
    let mut out = Vec::with_capacity(24 + copies * per_copy);
    out.extend_from_slice(&files[0].0);
    for k in 0..copies {
        for (f, (_, recs, server)) in files.iter().enumerate() {
            // Copy k of file f starts 2k + f seconds in (the first file lasts 1.7 s).
            let start = (2 * k + f) as u64 * 1_000_000;
            for r in recs {
                let mut d = r.data.clone();
                // The client's address is the source unless the server sent it.
                let at = if port(&d, 0) == *server { 30 } else { 26 };
                d[at..at + 4].copy_from_slice(&[127, (k >> 8) as u8, k as u8, 2 + f as u8]);
                let ts = start + r.ts_us - recs[0].ts_us;
                for v in [(ts / 1_000_000) as u32, (ts % 1_000_000) as u32, d.len() as u32, r.orig] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out.extend_from_slice(&d);
            }
        }
    }
    let path = tmp("big.pcap");
    std::fs::write(&path, &out).unwrap();
    path
}

/// A capture of 64 MiB or more: `analyze` shows its progress bar on a terminal (none into
/// a pipe), and the HTML report of its ~1250 connections stays bounded: 20 stalled
/// exchanges and the slowest of 10 connections without a stall, under 2 MB.
#[test]
fn a_big_capture_gets_a_progress_bar_and_a_bounded_report() {
    let pcap = big_capture();
    assert!(std::fs::metadata(&pcap).unwrap().len() >= 64 << 20);
    let page = tmp("big.html");
    let out = bin().arg("analyze").arg(&pcap).arg("--html").arg(&page).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1254 connections"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("analysing") && !err.contains('\x1b'), "no bar into a pipe: {err:?}");
    let html = std::fs::read_to_string(&page).unwrap();
    well_formed(&html).unwrap();
    assert!(html.len() < 2_000_000, "{} bytes", html.len());
    let (stalled, slowest) = (picker_group(&html, STALLED), picker_group(&html, SLOWEST));
    assert_eq!((stalled.len(), slowest.len()), (20, 10), "{stalled:?} {slowest:?}");
    assert!(stalled.iter().all(|o| o.contains("Worst stalled exchange: ")), "one per connection: {stalled:?}");
    assert!(slowest.iter().all(|o| o.contains("(no stall)")), "{slowest:?}");
    if require("script") {
        let cmd = format!("{} analyze {}", env!("CARGO_BIN_EXE_tcpdoctor"), pcap.display());
        // `script` gives the command a pseudo-terminal.
        let out = Command::new("script").args(["-qec", &cmd, "/dev/null"]).env("TERM", "xterm").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("  analysing ") && text.contains(" MiB"), "{text:?}");
        assert!(text.contains("VERDICT"), "{text:?}");
    }
    let _ = std::fs::remove_file(&pcap);
}
