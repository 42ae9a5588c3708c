//! `tcpdoctor watch` on loopback beside the lab's servers (root): findings as
//! they happen, the Prometheus endpoint scraped over HTTP and parsed strictly
//! (and by promtool), JSON lines, Ctrl-C and SIGTERM, the connection cap under
//! churn, every error with its one line and exit code, the DaemonSet's
//! capabilities; and the files in deploy/ (the README shows them; promtool
//! checks and unit-tests the alert rules).

mod common;

use common::{Proc, require, require_root, run_bounded};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcpdoctor"))
}

/// The lab's servers (name → port), stopping after 2 minutes whatever happens.
fn lab() -> (Proc, HashMap<String, u16>) {
    let mut c = bin().args(["lab", "--json", "-d", "120s"]).stdout(Stdio::piped()).spawn().unwrap();
    let out = c.stdout.take().unwrap();
    let p = Proc(c);
    let mut text = String::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        let end = line == "]";
        text.push_str(&line);
        if end {
            break;
        }
    }
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ports = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let url = s["url"].as_str().unwrap();
            let port = url.trim_end_matches('/').rsplit(':').next().unwrap().parse().unwrap();
            (s["name"].as_str().unwrap().to_string(), port)
        })
        .collect();
    (p, ports)
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `watch`, its output collected as it comes.
struct Watching {
    proc: Proc,
    out: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    err: Arc<Mutex<String>>,
}

fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<String>>, first: Option<mpsc::Sender<()>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = String::new();
        let mut first = first;
        while r.read_line(&mut line).is_ok_and(|n| n > 0) {
            into.lock().unwrap().push_str(&line);
            line.clear();
            if let Some(tx) = first.take() {
                let _ = tx.send(());
            }
        }
    })
}

/// Starts `watch ARGS` and waits (10 s at most) for its "watching" line, the sign the capture is open.
fn watch(args: &[&str]) -> Watching {
    let mut c = bin()
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
    let (tx, rx) = mpsc::channel();
    let readers = vec![
        collect(c.stdout.take().unwrap(), out.clone(), None),
        collect(c.stderr.take().unwrap(), err.clone(), Some(tx)),
    ];
    let w = Watching { proc: Proc(c), out, readers, err };
    rx.recv_timeout(Duration::from_secs(10)).expect("watch printed nothing on stderr within 10 s");
    let first = w.err.lock().unwrap().clone();
    assert!(first.starts_with("tcpdoctor: watching lo"), "{first}");
    w
}

impl Watching {
    /// Sends `sig` and waits (10 s at most) for the exit; returns it with stdout and stderr.
    fn stop(mut self, sig: libc::c_int) -> (ExitStatus, String, String) {
        // SAFETY: kill(2) on the PID of the child this test started, not yet reaped.
        unsafe { libc::kill(self.proc.0.id() as libc::pid_t, sig) };
        let until = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = self.proc.0.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "watch still running 10 s after signal {sig}");
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            r.join().unwrap();
        }
        let out = self.out.lock().unwrap().clone();
        let err = self.err.lock().unwrap().clone();
        (status, out, err)
    }
}

/// Load on a lab server with `tcpdoctor bench` (bounded in time by -d and by run_bounded).
fn bench(args: &[&str], port: u16) {
    let mut c = bin();
    c.arg("bench").args(args).arg(format!("http://127.0.0.1:{port}/"));
    let (out, _) = run_bounded(c, Duration::from_secs(20));
    assert!(out.status.success(), "bench: {}", String::from_utf8_lossy(&out.stderr));
}

/// GET /metrics over plain HTTP/1.1 (the connection kept alive, as
/// Prometheus keeps it); returns (content type, body).
fn scrape(port: u16, openmetrics: bool) -> (String, String) {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let accept =
        if openmetrics { "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n" } else { "" };
    write!(c, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n{accept}\r\n").unwrap();
    let mut r = BufReader::new(c);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK\r\n");
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let Some((name, value)) = line.trim_end().split_once(':') else { break };
        headers.insert(name.to_ascii_lowercase(), value.trim().to_string());
    }
    let ctype = headers.get("content-type").expect("a content type").clone();
    let len: usize = headers["content-length"].parse().unwrap();
    let mut body = vec![0; len];
    r.read_exact(&mut body).expect("as many bytes as Content-Length says");
    (ctype, String::from_utf8(body).unwrap())
}

/// One sample of an exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

/// Parses `name{k="v",…} value`, label values unescaped.
fn sample_line(line: &str) -> Result<Sample, String> {
    let bad = |why: &str| format!("{why}: {line}");
    let name_end = line.find(['{', ' ']).ok_or_else(|| bad("no value"))?;
    let name = &line[..name_end];
    if !valid_name(name) {
        return Err(bad("bad metric name"));
    }
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(r) = rest.strip_prefix('{') {
        let mut r = r;
        loop {
            if let Some(after) = r.strip_prefix('}') {
                r = after;
                break;
            }
            let eq = r.find('=').ok_or_else(|| bad("label without ="))?;
            let key = &r[..eq];
            if !valid_name(key) || key.contains(':') {
                return Err(bad("bad label name"));
            }
            r = r[eq + 1..].strip_prefix('"').ok_or_else(|| bad("label value not quoted"))?;
            let mut value = String::new();
            let mut chars = r.char_indices();
            let end = loop {
                match chars.next() {
                    None => return Err(bad("label value not closed")),
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        _ => return Err(bad("bad escape")),
                    },
                    Some((_, '\n')) => return Err(bad("newline in a label value")),
                    Some((_, c)) => value.push(c),
                }
            };
            if labels.insert(key.to_string(), value).is_some() {
                return Err(bad("label repeated"));
            }
            r = &r[end + 1..];
            if let Some(after) = r.strip_prefix(',') {
                r = after;
            } else if !r.starts_with('}') {
                return Err(bad("labels not separated by commas"));
            }
        }
        rest = r;
    }
    let value = rest.strip_prefix(' ').ok_or_else(|| bad("no space before the value"))?;
    if value.contains(' ') {
        return Err(bad("a timestamp or trailing text"));
    }
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse::<f64>().map_err(|_| bad("value is not a number"))?,
    };
    Ok(Sample { name: name.to_string(), labels, value })
}

/// A strict reader of the Prometheus text format (0.0.4) or of OpenMetrics
/// text: HELP then TYPE for each family, once; every sample in its family
/// with the suffixes its type allows; no duplicate series; counters ≥ 0;
/// histogram buckets cumulative with `+Inf` equal to `_count`; OpenMetrics
/// ends with `# EOF`.
fn parse_exposition(text: &str, openmetrics: bool) -> Result<Vec<Sample>, String> {
    if !text.ends_with('\n') {
        return Err("does not end with a newline".into());
    }
    let mut lines: Vec<&str> = text.lines().collect();
    if openmetrics {
        if lines.pop() != Some("# EOF") {
            return Err("OpenMetrics text must end with # EOF".into());
        }
    } else if text.contains("# EOF") || text.contains("# UNIT") {
        return Err("# EOF or # UNIT in the classic format".into());
    }
    let mut families: HashSet<String> = HashSet::new();
    let mut family: Option<(String, String)> = None;
    let mut pending_help: Option<String> = None;
    let mut series = HashSet::new();
    let mut samples = Vec::new();
    for line in lines {
        if line.is_empty() {
            return Err("empty line".into());
        }
        if let Some(r) = line.strip_prefix("# HELP ") {
            let name = r.split(' ').next().unwrap_or("");
            if !valid_name(name) || pending_help.is_some() {
                return Err(format!("bad HELP: {line}"));
            }
            pending_help = Some(name.to_string());
            continue;
        }
        if let Some(r) = line.strip_prefix("# TYPE ") {
            let (name, ty) = r.split_once(' ').ok_or(format!("bad TYPE: {line}"))?;
            if pending_help.take().as_deref() != Some(name) {
                return Err(format!("TYPE without its HELP first: {line}"));
            }
            if !["counter", "gauge", "histogram"].contains(&ty) {
                return Err(format!("unexpected type: {line}"));
            }
            if !families.insert(name.to_string()) {
                return Err(format!("family declared twice: {name}"));
            }
            if !openmetrics && ty == "counter" && !name.ends_with("_total") {
                return Err(format!("classic counter family without _total: {name}"));
            }
            family = Some((name.to_string(), ty.to_string()));
            continue;
        }
        if let Some(r) = line.strip_prefix("# UNIT ") {
            let (name, unit) = r.split_once(' ').ok_or(format!("bad UNIT: {line}"))?;
            if family.as_ref().map(|f| f.0.as_str()) != Some(name) || !name.ends_with(&format!("_{unit}")) {
                return Err(format!("UNIT not matching its family: {line}"));
            }
            continue;
        }
        if line.starts_with('#') {
            return Err(format!("unexpected comment: {line}"));
        }
        let s = sample_line(line)?;
        let (fam, ty) = family.as_ref().ok_or(format!("sample before any TYPE: {line}"))?;
        let suffix = s.name.strip_prefix(fam.as_str()).ok_or(format!("sample outside its family {fam}: {line}"))?;
        let allowed: &[&str] = match (ty.as_str(), openmetrics) {
            ("counter", true) => &["_total"],
            ("histogram", _) => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        if !allowed.contains(&suffix) {
            return Err(format!("suffix {suffix:?} not allowed for a {ty}: {line}"));
        }
        if (ty == "counter" || suffix == "_bucket" || suffix == "_count") && (s.value.is_nan() || s.value < 0.0) {
            return Err(format!("negative count: {line}"));
        }
        if suffix == "_bucket" && !s.labels.contains_key("le") {
            return Err(format!("bucket without le: {line}"));
        }
        if !series.insert(format!("{}{:?}", s.name, s.labels)) {
            return Err(format!("series repeated: {line}"));
        }
        samples.push(s);
    }
    if pending_help.is_some() {
        return Err("HELP without TYPE at the end".into());
    }
    check_histograms(&samples)?;
    Ok(samples)
}

/// Buckets rise with `le`, and the `+Inf` bucket equals `_count`.
fn check_histograms(samples: &[Sample]) -> Result<(), String> {
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for s in samples {
        if let Some(base) = s.name.strip_suffix("_bucket") {
            let mut l = s.labels.clone();
            let le = l.remove("le").unwrap();
            let le: f64 = if le == "+Inf" { f64::INFINITY } else { le.parse().map_err(|_| format!("bad le {le}"))? };
            buckets.entry(format!("{base}{l:?}")).or_default().push((le, s.value));
        } else if let Some(base) = s.name.strip_suffix("_count") {
            counts.insert(format!("{base}{:?}", s.labels), s.value);
        }
    }
    for (k, b) in &buckets {
        for w in b.windows(2) {
            if !(w[0].0 < w[1].0 && w[0].1 <= w[1].1) {
                return Err(format!("{k}: buckets not cumulative in le order: {b:?}"));
            }
        }
        let last = b.last().unwrap();
        if last.0 != f64::INFINITY || Some(&last.1) != counts.get(k) {
            return Err(format!("{k}: +Inf bucket {last:?} is not _count {:?}", counts.get(k)));
        }
    }
    Ok(())
}

/// The series of server-side Nagle stalls of endpoint `ep`.
fn key(ep: &str) -> [(&str, &str); 3] {
    [("kind", "nagle_delayed_ack"), ("endpoint", ep), ("role", "server")]
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
}

/// Every `tcpdoctor_stalls_total` series of endpoint `ep`, each kind and role; `None` where one is missing.
fn stall_series(samples: &[Sample], ep: &str) -> Vec<Option<f64>> {
    let kinds = ["nagle_delayed_ack", "retransmission_timeout", "syn_retransmission", "zero_window"];
    let each = |k| {
        ["client", "server"]
            .map(|r| value(samples, "tcpdoctor_stalls_total", &[("kind", k), ("endpoint", ep), ("role", r)]))
    };
    kinds.into_iter().flat_map(each).collect()
}

/// Scrapes (classic format) until `ready` holds, for 5 s at most.
fn scrape_until(port: u16, ready: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, text) = scrape(port, false);
        let m = parse_exposition(&text, false).unwrap_or_else(|e| panic!("{e}\n{text}"));
        if ready(&m) {
            return m;
        }
        assert!(Instant::now() < until, "not there 5 s on:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_parser_rejects_what_prometheus_would() {
    let good = "# HELP a_total x.\n# TYPE a_total counter\na_total{k=\"v\\\"\"} 1\n";
    assert!(parse_exposition(good, false).is_ok());
    for bad in [
        "# TYPE a_total counter\na_total 1\n",                               // no HELP
        "# HELP a x.\n# TYPE a counter\na 1\n",                              // classic counter without _total
        "# HELP a_total x.\n# TYPE a_total counter\na_total{k=v} 1\n",       // unquoted
        "# HELP a_total x.\n# TYPE a_total counter\na_total -1\n",           // negative counter
        "# HELP a_total x.\n# TYPE a_total counter\na_total 1\na_total 2\n", // repeated series
        "# HELP a_total x.\n# TYPE a_total counter\nb_total 1\n",            // outside its family
        "# HELP h x.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 0\n",
        "# HELP h x.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 1\nh_sum 0\n",
        "# HELP g x.\n# TYPE g gauge\ng one\n",
    ] {
        assert!(parse_exposition(bad, false).is_err(), "accepted: {bad}");
    }
    let om = "# HELP a x.\n# TYPE a counter\na_total 1\n# EOF\n";
    assert!(parse_exposition(om, true).is_ok());
    assert!(parse_exposition("# HELP a x.\n# TYPE a counter\na_total 1\n", true).is_err(), "no # EOF");
}

/// The main proof: the Nagle server's stall counter rises from the 0 it was
/// created at (a scrape before the load and one after, as Prometheus sees the
/// step), its TCP_NODELAY twin's series exist and stay 0, finding lines name
/// the right side, and Ctrl-C ends it with exit 0 and a final summary.
#[test]
fn stalls_counted_for_the_nagle_server_and_not_for_its_nodelay_twin() {
    if !require_root() {
        return;
    }
    let (_lab, ports) = lab();
    let (nagle, nodelay) = (ports["nagle"], ports["nodelay"]);
    let mport = free_port();
    let filter = format!("tcp port {nagle} or tcp port {nodelay}");
    let maddr = format!("127.0.0.1:{mport}");
    let w = watch(&["-i", "lo", &filter, "--metrics", &maddr, "--summary-every", "1s", "--duration", "60s"]);
    let (n, d) = (format!("127.0.0.1:{nagle}"), format!("127.0.0.1:{nodelay}"));
    // A bare connect makes each server known: its series appear, at 0, before any stall.
    for port in [nagle, nodelay] {
        drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
    }
    let known = |m: &[Sample]| [&n, &d].iter().all(|ep| stall_series(m, ep).iter().all(Option::is_some));
    let before = scrape_until(mport, known);
    for ep in [&n, &d] {
        assert_eq!(stall_series(&before, ep), [Some(0.0); 8], "{ep}: every kind and role at 0 before the load");
    }
    let a = std::thread::spawn(move || bench(&["-c4", "-d2s"], nagle));
    // A fixed rate keeps the twin's load within what an unoptimised test build captures.
    bench(&["-c4", "-d2s", "-R", "1000"], nodelay);
    a.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));

    let (ctype, text) = scrape(mport, false);
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    let m = parse_exposition(&text, false).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let stalls = value(&m, "tcpdoctor_stalls_total", &key(&n)).expect("a stall series for the Nagle server");
    assert!(stalls >= 20.0, "0 before, {stalls} after 2 s of load on the Nagle server:\n{text}");
    assert_eq!(stall_series(&m, &d), [Some(0.0); 8], "the TCP_NODELAY twin's series exist and are 0:\n{text}");
    let lost = value(&m, "tcpdoctor_time_lost_seconds_total", &key(&n)).unwrap();
    assert!((0.035 * stalls..0.06 * stalls).contains(&lost), "~44 ms per stall: {lost} s for {stalls}");
    let twin = value(&m, "tcpdoctor_exchange_latency_seconds_count", &[("endpoint", &d)]).unwrap();
    assert!(twin >= 500.0, "the twin's exchanges are measured: {twin}");
    let slow = value(&m, "tcpdoctor_exchange_latency_seconds_bucket", &[("endpoint", &n), ("le", "0.025")]);
    let all = value(&m, "tcpdoctor_exchange_latency_seconds_count", &[("endpoint", &n)]).unwrap();
    assert!(slow.unwrap() < all / 2.0, "most Nagle exchanges take over 25 ms");
    let in_40 = value(&m, "tcpdoctor_stall_seconds_bucket", &[("kind", "nagle_delayed_ack"), ("le", "0.05")]).unwrap()
        - value(&m, "tcpdoctor_stall_seconds_bucket", &[("kind", "nagle_delayed_ack"), ("le", "0.03")]).unwrap();
    assert!(in_40 >= 0.9 * stalls, "stalls sit in the 30-50 ms buckets");
    assert!(value(&m, "tcpdoctor_capture_packets_total", &[]).unwrap() > 1000.0);
    assert!(value(&m, "tcpdoctor_capture_drops_total", &[]).is_some());
    assert!(value(&m, "tcpdoctor_tracked_connections", &[]).is_some());
    assert_eq!(value(&m, "tcpdoctor_evicted_connections_total", &[]), Some(0.0));

    let (ctype, om) = scrape(mport, true);
    assert!(ctype.starts_with("application/openmetrics-text; version=1.0.0"), "{ctype}");
    let om = parse_exposition(&om, true).unwrap_or_else(|e| panic!("{e}\n{om}"));
    assert!(value(&om, "tcpdoctor_stalls_total", &key(&n)).unwrap() >= stalls);
    if require("promtool") {
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A 404 for anything else.
    let mut c = TcpStream::connect(("127.0.0.1", mport)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    assert!(s.starts_with("HTTP/1.1 404 "), "{s}");

    let (status, out, err) = w.stop(libc::SIGINT);
    assert_eq!(status.code(), Some(0), "Ctrl-C ends it with 0: {err}");
    let nagle_lines: Vec<&str> = out.lines().filter(|l| l.contains("Nagle + delayed ACK: the server ")).collect();
    assert!(nagle_lines.len() >= 2, "finding lines printed:\n{out}");
    for l in &nagle_lines {
        assert!(l.contains(&format!("the server {n} held part of a response")), "{l}");
        assert!(l.contains("until the client 127.0.0.1 sent a delayed ACK"), "{l}");
    }
    assert!(!out.lines().any(|l| l.contains(&format!("the server {d} held"))), "the twin is never blamed:\n{out}");
    assert!(out.lines().filter(|l| l.contains(" SUMMARY last ")).count() >= 2, "periodic summaries:\n{out}");
    let fin = out.split(" FINAL SUMMARY over ").nth(1).unwrap_or_else(|| panic!("no final summary:\n{out}"));
    let row = fin.lines().find(|l| l.trim_start().starts_with(&n)).unwrap();
    assert!(row.contains(" ms") && row.contains("more finding lines not shown"), "{row}");
    assert!(fin.contains("Nagle + delayed ACK: ") && fin.contains(&format!("from {n} (server")), "{fin}");
    assert!(!fin.contains(&format!("from {d} (server")), "{fin}");
    assert!(err.lines().count() == 1, "only the start line on stderr: {err}");
}

/// `--json`: every line is an object; findings and summaries, the last one final.
#[test]
fn json_lines_parse() {
    if !require_root() {
        return;
    }
    let (_lab, ports) = lab();
    let nagle = ports["nagle"];
    let filter = format!("tcp port {nagle}");
    let w = watch(&["-i", "lo", &filter, "--json", "--summary-every", "500ms", "--max-lines", "2"]);
    bench(&["-c2", "-d1500ms"], nagle);
    std::thread::sleep(Duration::from_millis(600));
    let (status, out, _) = w.stop(libc::SIGINT);
    assert_eq!(status.code(), Some(0));
    let lines: Vec<serde_json::Value> =
        out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let findings: Vec<_> = lines.iter().filter(|v| v["type"] == "finding").collect();
    assert!(!findings.is_empty(), "{out}");
    let f = findings[0];
    assert_eq!((f["kind"].as_str(), f["role"].as_str()), (Some("nagle_delayed_ack"), Some("server")));
    assert_eq!(f["server"], format!("127.0.0.1:{nagle}"));
    assert!(f["ms"].as_f64().is_some_and(|ms| (35.0..60.0).contains(&ms)), "{f}");
    assert!(f["ack_delay_ms"].as_f64().is_some() && f["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    let summaries: Vec<_> = lines.iter().filter(|v| v["type"] == "summary").collect();
    assert!(summaries.len() >= 2, "{out}");
    let last = summaries.last().unwrap();
    assert_eq!(last["final"], true);
    assert!(std::ptr::eq(*last, lines.last().unwrap()), "the final summary is the last line");
    let ep = &last["endpoints"][0];
    assert_eq!(ep["server"], format!("127.0.0.1:{nagle}"));
    let stalls = ep["findings"]["nagle_delayed_ack"].as_u64().unwrap();
    let shown = findings.len() as u64;
    assert_eq!(stalls, shown + ep["not_shown"].as_u64().unwrap(), "every finding printed or counted");
    assert!(last["verdict"][0].as_str().unwrap().starts_with("Nagle + delayed ACK: "));
}

/// Many short connections with a low cap: evictions counted, never more
/// tracked than the cap; SIGTERM (systemd's stop) ends it with 0.
#[test]
fn churn_stays_under_the_connection_cap() {
    if !require_root() {
        return;
    }
    let (_lab, ports) = lab();
    let port = ports["nodelay"];
    let mport = free_port();
    let filter = format!("tcp port {port}");
    let maddr = format!("127.0.0.1:{mport}");
    let w = watch(&["-i", "lo", &filter, "--metrics", &maddr, "--max-connections", "20", "--summary-every", "1s"]);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, peak) = (stop.clone(), Arc::new(Mutex::new(0.0f64)));
    let peak2 = peak.clone();
    // Scrape while the churn runs: the gauge never exceeds the cap.
    let scraper = std::thread::spawn(move || {
        let mut n = 0;
        while !s2.load(std::sync::atomic::Ordering::Relaxed) && n < 200 {
            let (_, t) = scrape(mport, false);
            let m = parse_exposition(&t, false).unwrap();
            let v = value(&m, "tcpdoctor_tracked_connections", &[]).unwrap();
            let mut p = peak2.lock().unwrap();
            *p = p.max(v);
            n += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    bench(&["--no-keepalive", "-c4", "-d2s", "-R", "500"], port);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    scraper.join().unwrap();
    let (_, t) = scrape(mport, false);
    let m = parse_exposition(&t, false).unwrap();
    let evicted = value(&m, "tcpdoctor_evicted_connections_total", &[]).unwrap();
    let exchanges =
        value(&m, "tcpdoctor_exchange_latency_seconds_count", &[("endpoint", &format!("127.0.0.1:{port}"))]);
    assert!(exchanges.unwrap() >= 500.0, "the connections were analysed: {exchanges:?}");
    assert!(evicted >= 400.0, "~1000 connections through a table of 20: {evicted} evicted");
    let tracked = value(&m, "tcpdoctor_tracked_connections", &[]).unwrap();
    let peak = *peak.lock().unwrap();
    assert!(tracked <= 20.0 && peak <= 20.0 && peak > 0.0, "tracked {tracked}, peak {peak}");
    let (status, out, err) = w.stop(libc::SIGTERM);
    assert_eq!(status.code(), Some(0), "SIGTERM ends it with 0: {err}");
    let fin = out.split(" FINAL SUMMARY over ").nth(1).unwrap_or_else(|| panic!("no final summary:\n{out}"));
    let n: u64 = fin.split("; ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok()).unwrap();
    assert!(n as f64 >= evicted, "the final summary counts the evictions: {fin}");
}

/// Errors: one line on stderr and the documented exit code, before capturing anything.
#[test]
fn errors_are_one_line_with_their_exit_code() {
    if !require_root() {
        return;
    }
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    // (arguments, exit code, words of the message, whether it is ours: clap's own usage errors add a hint line)
    let cases: Vec<(Vec<&str>, i32, &str, bool)> = vec![
        (vec!["-i", "no-such-if0"], 3, "no interface named 'no-such-if0'", true),
        (vec!["-i", "lo", "tcp", "port"], 2, "filter: ", true),
        (vec!["-i", "lo", "--metrics", "0.0.0.0:9464"], 2, "not a loopback address", true),
        (vec!["-i", "lo", "--metrics", "[::]:9464"], 2, "add --metrics-public to mean it", true),
        (vec!["-i", "lo", "--metrics", "localhost"], 2, "not an address and port", true),
        (vec!["-i", "lo", "--metrics", &busy], 3, "cannot listen: ", true),
        (vec!["-i", "lo", "--max-connections", "0"], 2, "max-connections", false),
        (vec!["-i", "lo", "--summary-every", "0s"], 2, "summary-every", false),
    ];
    for (args, code, want, ours) in cases {
        let mut c = bin();
        c.arg("watch").args(&args).args(["--duration", "2s"]);
        let (out, took) = run_bounded(c, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        if ours {
            assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
        }
        assert!(took < Duration::from_secs(2), "{args:?} failed at once, not after capturing");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    if require("setpriv") {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
            .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
            .args(["watch", "-i", "lo", "--duration", "2s"]);
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{err}");
        assert!(err.contains("needs CAP_NET_RAW: run as root or `setcap cap_net_raw+ep` on the binary"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    drop(taken);
}

fn deploy(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(path)
}

/// What the README shows is the files in deploy/, whole; promtool checks the
/// alert rules and runs their unit tests (which series fire, which do not).
#[test]
fn deploy_files_are_the_readmes_and_the_rules_pass_promtool() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for (path, lang) in [
        ("systemd/tcpdoctor-watch.service", "ini"),
        ("systemd/tcpdoctor.default", "sh"),
        ("kubernetes/daemonset.yaml", "yaml"),
        ("prometheus/prometheus.yml", "yaml"),
        ("prometheus/tcpdoctor-rules.yml", "yaml"),
    ] {
        let text = std::fs::read_to_string(deploy(path)).unwrap();
        assert!(readme.contains(&format!("```{lang}\n{text}```\n")), "README does not show deploy/{path} as it is");
    }
    if !require("promtool") {
        return;
    }
    for args in [["check", "rules", "tcpdoctor-rules.yml"], ["test", "rules", "tcpdoctor-rules.test.yml"]] {
        let mut c = Command::new("promtool");
        c.args(args).current_dir(deploy("prometheus"));
        let (out, _) = run_bounded(c, Duration::from_secs(60));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("SUCCESS"), "promtool {args:?}: {text}");
    }
}

/// The DaemonSet's security context, as near as a test gets to it: uid 0
/// with NET_RAW alone and no_new_privs runs watch. And why not a non-root
/// user with `setcap`: under no_new_privs, exec grants file capabilities only
/// within the permitted set the process already had, so one that had none
/// (as Docker leaves a non-root container user) exits 5; without
/// no_new_privs the same binary runs.
#[test]
fn net_raw_alone_suffices_and_no_new_privs_stops_file_capabilities() {
    if !require_root() || !require("setpriv") || !require("capsh") || !require("setcap") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("tcpdoctor-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let capable = dir.join("tcpdoctor");
    std::fs::copy(env!("CARGO_BIN_EXE_tcpdoctor"), &capable).unwrap();
    let st = Command::new("setcap").arg("cap_net_raw+ep").arg(&capable).status().unwrap();
    assert!(st.success(), "setcap");
    let maddr = format!("127.0.0.1:{}", free_port());
    let watch = ["watch", "-i", "lo", "--duration", "1s"];
    let exit = |c: Command| {
        let (out, _) = run_bounded(c, Duration::from_secs(10));
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let mut root = Command::new("setpriv");
    root.args(["--bounding-set=-all,+net_raw", "--inh-caps=-all", "--no-new-privs"])
        .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(watch)
        .args(["--metrics", &maddr]);
    let (code, err) = exit(root);
    assert_eq!(code, Some(0), "uid 0 with NET_RAW only: {err}");
    // capsh drops to uid 65534 with empty permitted and effective sets, then runs `sh -c`.
    let nobody = |script: &str| {
        let mut c = Command::new("capsh");
        c.args(["--gid=65534", "--groups=65534", "--uid=65534", "--", "-c", script]).arg(&capable).args(watch);
        c
    };
    let (code, err) = exit(nobody(r#"exec setpriv --no-new-privs "$0" "$@""#));
    assert_eq!(code, Some(5), "file capabilities under no_new_privs: {err}");
    assert!(err.contains("needs CAP_NET_RAW"), "{err}");
    let (code, err) = exit(nobody(r#"exec "$0" "$@""#));
    assert_eq!(code, Some(0), "file capabilities without no_new_privs: {err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
