//! The `/metrics` server under attack, on loopback: what it answers (both
//! formats, 404, 405, 400, 431, HEAD), keep-alive, the head deadline, the
//! connection lifetime; scrapes while a slowloris client drips, while 10,000
//! idle connections are held against `tcpdoctor watch --metrics` (its open
//! descriptors stay under the cap) and while it is out of descriptors.
//! Each attack test prints its scrape latencies (`metrics-bench:` lines,
//! shown with `--nocapture`), the figures in bench/RESULTS.md.

mod common;

use common::{Proc, free_port, require_root, tcpdoctor};
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tcpdoctor::watch::{Metrics, MetricsServer};

/// How long a test client waits for an answer before calling it lost.
const PATIENCE: Duration = Duration::from_secs(5);

/// A server on a free loopback port whose packet counter reads 7.
fn start() -> MetricsServer {
    let m = Arc::new(Metrics::new());
    m.packets.inc_by(7);
    MetricsServer::start("127.0.0.1:0".parse().unwrap(), m).unwrap()
}

/// One HTTP response.
#[derive(Debug)]
struct Answer {
    status_line: String,
    /// By lower-case name.
    headers: HashMap<String, String>,
    body: String,
}

/// Reads one response: its head, then Content-Length bytes of body (none for HEAD).
fn read_answer(r: &mut impl BufRead, head_only: bool) -> io::Result<Answer> {
    let mut status_line = String::new();
    if r.read_line(&mut status_line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let Some((name, value)) = line.trim_end().split_once(':') else { break };
        headers.insert(name.to_ascii_lowercase(), value.trim().to_string());
    }
    let len: usize = headers.get("content-length").map_or(Ok(0), |v| v.parse()).map_err(io::Error::other)?;
    let mut body = vec![0; if head_only { 0 } else { len }];
    r.read_exact(&mut body)?;
    Ok(Answer { status_line: status_line.trim_end().to_string(), headers, body: String::from_utf8_lossy(&body).into() })
}

/// Sends `req` on a new connection and reads the answer.
fn ask(addr: SocketAddr, req: &[u8], head_only: bool) -> Answer {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(req).unwrap();
    read_answer(&mut BufReader::new(c), head_only).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(req)))
}

/// One scrape as Prometheus sends it, on a new connection: its time to a
/// complete 200 with the metrics, or what went wrong (after [`PATIENCE`] at most).
fn scrape(addr: SocketAddr) -> Result<Duration, String> {
    let t = Instant::now();
    let mut c = TcpStream::connect_timeout(&addr, PATIENCE).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let a = read_answer(&mut BufReader::new(c), false).map_err(|e| format!("after {:?}: {e}", t.elapsed()))?;
    if a.status_line != "HTTP/1.1 200 OK" || !a.body.contains("\ntcpdoctor_capture_packets_total ") {
        return Err(format!("{a:?}"));
    }
    Ok(t.elapsed())
}

/// Prints p50, p99 and the worst of `scrapes` (lost ones last), then checks
/// each was answered within `limit`.
fn check_scrapes(what: &str, scrapes: &[Result<Duration, String>], limit: Duration) {
    let mut ms: Vec<f64> =
        scrapes.iter().map(|s| s.as_ref().map_or(f64::INFINITY, |d| d.as_secs_f64() * 1e3)).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| match ms.get(((q * ms.len() as f64).ceil() as usize).max(1) - 1) {
        Some(v) if v.is_finite() => format!("{v:.2} ms"),
        Some(_) => "lost".into(),
        None => "-".into(),
    };
    let lost = scrapes.iter().filter(|s| s.is_err()).count();
    eprintln!(
        "metrics-bench: {what}: {} scrapes, p50 {}, p99 {}, max {}, {lost} lost (no answer in {PATIENCE:?})",
        ms.len(),
        at(0.5),
        at(0.99),
        at(1.0)
    );
    assert!(!scrapes.is_empty(), "{what}: no scrape");
    for (i, s) in scrapes.iter().enumerate() {
        match s {
            Ok(d) => assert!(*d <= limit, "{what}: scrape {i} took {d:?} (limit {limit:?})"),
            Err(e) => panic!("{what}: scrape {i}: {e}"),
        }
    }
}

/// Reads from `c` until the server closes it (EOF or reset); how long that took from `since`.
fn closed_after(c: &mut TcpStream, since: Instant, limit: Duration) -> Option<Duration> {
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 4096];
    while since.elapsed() < limit {
        match c.read(&mut buf) {
            Ok(0) => return Some(since.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(since.elapsed()),
        }
    }
    None
}

/// A connection closed `t` after the start of a bound `d` was closed by that bound.
fn assert_near(t: Duration, d: Duration) {
    assert!(
        t >= d - Duration::from_millis(100) && t <= d + Duration::from_millis(500),
        "closed after {t:?}, not {d:?}"
    );
}

#[test]
fn answers_metrics_in_both_formats_and_refuses_the_rest() {
    let srv = start();
    let a = srv.addr();
    let om = ask(
        a,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
        false,
    );
    assert_eq!(om.status_line, "HTTP/1.1 200 OK");
    assert!(om.headers["content-type"].starts_with("application/openmetrics-text; version=1.0.0"), "{om:?}");
    assert!(
        om.body.contains("\n# TYPE tcpdoctor_capture_packets counter\ntcpdoctor_capture_packets_total 7\n"),
        "{om:?}"
    );
    assert!(om.body.ends_with("# EOF\n"));
    let classic = ask(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(classic.headers["content-type"].starts_with("text/plain; version=0.0.4"), "{classic:?}");
    assert!(
        classic.body.contains("\n# TYPE tcpdoctor_capture_packets_total counter\ntcpdoctor_capture_packets_total 7\n")
    );
    assert!(!classic.body.contains("# EOF") && !classic.body.contains("# UNIT"));
    assert!(ask(a, b"GET / HTTP/1.1\r\n\r\n", false).status_line.starts_with("HTTP/1.1 404 "));
    let post = ask(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", false);
    assert!(post.status_line.starts_with("HTTP/1.1 405 ") && post.headers["allow"] == "GET, HEAD", "{post:?}");
    assert!(ask(a, b"hello\r\n\r\n", false).status_line.starts_with("HTTP/1.1 400 "));
    let head = ask(a, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n", true);
    assert!(head.status_line.ends_with(" 200 OK"), "{head:?}");
    // The GET's length, no body; the process_* values (CPU time, memory) may
    // have changed by a digit or two between the two requests.
    let len = |r: &str| r.parse::<i64>().unwrap();
    let (h, g) = (len(&head.headers["content-length"]), len(&classic.headers["content-length"]));
    assert!((h - g).abs() < 64, "HEAD: the GET's length ({g}), not {h}");
    let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    big.resize(MetricsServer::MAX_HEAD, b'a');
    assert!(ask(a, &big, false).status_line.starts_with("HTTP/1.1 431 "));
    drop(srv);
    assert!(TcpStream::connect(a).is_err(), "stopped on drop");
}

#[test]
fn keeps_a_connection_alive_then_closes_it_when_idle_past_the_head_deadline() {
    let srv = start();
    let mut c = TcpStream::connect(srv.addr()).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    for _ in 0..3 {
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let a = read_answer(&mut r, false).expect("an answer on the same connection");
        assert_eq!(a.status_line, "HTTP/1.1 200 OK");
    }
    let idle = closed_after(&mut c, Instant::now(), PATIENCE).expect("closed when idle");
    assert_near(idle, MetricsServer::HEAD_DEADLINE);
}

#[test]
fn closes_a_connection_whose_head_does_not_arrive_within_the_deadline() {
    let srv = start();
    let mut c = TcpStream::connect(srv.addr()).unwrap();
    let opened = Instant::now();
    // A byte every 300 ms: each comes well within any per-read timeout.
    let mut closed = None;
    for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: ".iter().chain(std::iter::repeat(&b'a')).take(20) {
        if c.write_all(&[*b]).is_err() {
            closed = Some(opened.elapsed());
            break;
        }
        let by = opened.elapsed() + Duration::from_millis(300);
        if let Some(t) = closed_after(&mut c, opened, by) {
            closed = Some(t);
            break;
        }
    }
    assert_near(closed.expect("never closed while dripping a head for 6 s"), MetricsServer::HEAD_DEADLINE);
}

#[test]
fn closes_a_busy_connection_at_the_end_of_its_lifetime() {
    let srv = start();
    let mut c = TcpStream::connect(srv.addr()).unwrap();
    let opened = Instant::now();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let life = MetricsServer::LIFETIME;
    let mut answered = 0;
    let closed = loop {
        assert!(opened.elapsed() < life * 2, "still open after {:?}", opened.elapsed());
        if c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").is_err() {
            break opened.elapsed();
        }
        match read_answer(&mut r, false) {
            Ok(a) => assert_eq!(a.status_line, "HTTP/1.1 200 OK"),
            Err(_) => break opened.elapsed(),
        }
        answered += 1;
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_near(closed, life);
    assert!(answered > 50, "{answered} answers on one connection before it closed");
}

#[test]
fn scrapes_are_answered_while_a_slowloris_client_drips() {
    let srv = start();
    let a = srv.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let first_byte = Arc::new(AtomicBool::new(false));
    // One client sending a byte every 1.5 s, reconnecting when closed; 60 s at most.
    let drip = std::thread::spawn({
        let (stop, first_byte) = (stop.clone(), first_byte.clone());
        move || {
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                let Ok(mut c) = TcpStream::connect(a) else {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                };
                let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: ".iter().chain(std::iter::repeat(&b'a'));
                for b in head {
                    if c.write_all(&[*b]).is_err() || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    first_byte.store(true, Ordering::Relaxed);
                    let next = Instant::now() + Duration::from_millis(1500);
                    while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
    });
    let t = Instant::now();
    while !first_byte.load(Ordering::Relaxed) && t.elapsed() < PATIENCE {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(first_byte.load(Ordering::Relaxed), "the slowloris client could not connect");
    std::thread::sleep(Duration::from_millis(200));
    // 150 ms apart, so they span the slowloris being closed and reconnecting.
    let scrapes: Vec<_> = (0..20)
        .map(|_| {
            let s = scrape(a);
            std::thread::sleep(Duration::from_millis(150));
            s
        })
        .collect();
    stop.store(true, Ordering::Relaxed);
    drip.join().unwrap();
    check_scrapes("slowloris (a byte every 1.5 s)", &scrapes, Duration::from_millis(500));
}

/// Raises this process's open-file soft limit to its hard limit; false
/// (skipped outside CI) if even that is under `need`.
fn raise_nofile(need: u64) -> bool {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the one rlimit given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
    }
    if l.rlim_max < need {
        assert!(
            std::env::var("CI").is_err(),
            "open-file hard limit {} is under {need}; raise it (ulimit -Hn)",
            l.rlim_max
        );
        eprintln!("SKIPPED: open-file hard limit {} is under {need}", l.rlim_max);
        return false;
    }
    true
}

/// `tcpdoctor watch` serving metrics on a free port (capturing a port
/// nobody uses, so the attack costs its capture nothing), with at most
/// `nofile` open files if given; its metrics address.
fn watch_metrics(nofile: Option<u64>) -> (Proc, SocketAddr) {
    let (port, quiet) = (free_port(), free_port());
    let mut cmd = tcpdoctor();
    cmd.stdout(Stdio::null())
        .args(["watch", "-i", "lo", &format!("tcp port {quiet}"), "--duration", "120s"])
        .args(["--metrics", &format!("127.0.0.1:{port}")]);
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe, and touches only the child.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
            });
        }
    }
    let (p, line) = Proc::started_on(cmd, true);
    assert!(line.contains(&format!("metrics at http://127.0.0.1:{port}/metrics")), "{line}");
    (p, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn open_fds(p: &Proc) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", p.0.id())).unwrap().count()
}

#[test]
fn ten_thousand_idle_connections_do_not_lock_out_scrapes() {
    const IDLE: usize = 10_000;
    if !require_root() || !raise_nofile(IDLE as u64 + 1000) {
        return;
    }
    let (w, addr) = watch_metrics(None);
    let before = open_fds(&w);
    let opened = Arc::new(AtomicUsize::new(0));
    let (done, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    // Opens IDLE connections (60 s at most) and holds them, sending nothing.
    let flood = std::thread::spawn({
        let (opened, done, stop) = (opened.clone(), done.clone(), stop.clone());
        move || {
            let until = Instant::now() + Duration::from_secs(60);
            let mut held = Vec::with_capacity(IDLE);
            while held.len() < IDLE && Instant::now() < until {
                if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    held.push(c);
                    opened.store(held.len(), Ordering::Relaxed);
                }
            }
            done.store(true, Ordering::Relaxed);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until + Duration::from_secs(60) {
                std::thread::sleep(Duration::from_millis(10));
            }
            held.len()
        }
    });
    // Scrapes while the flood comes in (once 1000 are open, or after 5 s),
    // then 20 with all of them held; 90 s at most.
    let (started, until) = (Instant::now(), Instant::now() + Duration::from_secs(90));
    let (mut scrapes, mut during, mut after, mut most_fds) = (vec![], 0, 0, 0);
    while after < 20 && Instant::now() < until {
        if opened.load(Ordering::Relaxed) < 1000 && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let flooding = !done.load(Ordering::Relaxed);
        scrapes.push(scrape(addr));
        most_fds = most_fds.max(open_fds(&w));
        if flooding {
            during += 1;
        } else {
            after += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    let what = format!("{IDLE} idle connections ({during} scrapes while they were opened)");
    let held = flood.join().unwrap();
    eprintln!("metrics-bench: {what}: {held} opened; watch's open files {before} before, at most {most_fds} during");
    check_scrapes(&what, &scrapes, Duration::from_secs(1));
    assert_eq!(held, IDLE, "connections opened");
    assert!(during > 0, "no scrape while the connections were opened");
    let cap = MetricsServer::MAX_CONNECTIONS;
    // A few more than the cap: a scrape reads /proc/self (process_*) through transient descriptors.
    assert!(most_fds <= before + cap + 8, "watch had {most_fds} files open ({before} before; cap {cap})");
}

#[test]
fn scrapes_are_answered_when_the_server_runs_out_of_descriptors() {
    const IDLE: usize = 300;
    if !require_root() || !raise_nofile(IDLE as u64 + 1000) {
        return;
    }
    // 64 open files: far fewer than the connection cap.
    let (w, addr) = watch_metrics(Some(64));
    let held: Vec<TcpStream> =
        (0..IDLE).map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap()).collect();
    let scrapes: Vec<_> = (0..10)
        .map(|_| {
            let s = scrape(addr);
            std::thread::sleep(Duration::from_millis(50));
            s
        })
        .collect();
    assert!(open_fds(&w) <= 64);
    drop(held);
    check_scrapes(&format!("{IDLE} idle connections, 64 open files"), &scrapes, Duration::from_secs(1));
}

/// The value of the sample line `name` (labels included) in an exposition.
fn sample(body: &str, name: &str) -> f64 {
    let line = body.lines().find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '));
    let line = line.unwrap_or_else(|| panic!("no {name} in\n{body}"));
    line[name.len() + 1..].parse().unwrap_or_else(|e| panic!("{line}: {e}"))
}

/// A `/proc/PID/status` field.
fn status_field(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = s.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or_else(|| panic!("no {field}"));
    l.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn watch_exports_build_info_and_process_metrics_of_itself() {
    if !require_root() {
        return;
    }
    let spawned = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let (w, addr) = watch_metrics(Some(777));
    let pid = w.0.id();
    let om = ask(addr, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n", false).body;
    let rustc = std::process::Command::new(std::env::var("RUSTC").unwrap_or("rustc".into())).arg("--version").output();
    let rustc = String::from_utf8(rustc.unwrap().stdout).unwrap();
    let info = format!(
        "tcpdoctor_build_info{{version=\"{}\",rustc=\"{}\",target=\"{}-unknown-linux-",
        env!("CARGO_PKG_VERSION"),
        rustc.split_whitespace().nth(1).unwrap(),
        std::env::consts::ARCH
    );
    assert!(om.contains(&info), "{info} not in\n{om}");
    assert!(om.contains("\n# TYPE process_cpu_seconds counter\n"), "{om}");
    assert!(sample(&om, "process_cpu_seconds_total") >= 0.0);
    assert_eq!(sample(&om, "process_max_fds"), 777.0, "the limit watch was started with");
    // The answering connection is open too: within a few of what /proc shows now.
    let fds = sample(&om, "process_open_fds");
    assert!((fds - open_fds(&w) as f64).abs() <= 3.0, "{fds} open vs {}", open_fds(&w));
    assert_eq!(sample(&om, "process_threads") as u64, status_field(pid, "Threads"));
    let rss = sample(&om, "process_resident_memory_bytes");
    let rss_now = status_field(pid, "VmRSS") as f64 * 1024.0;
    assert!(rss > 1e6 && (rss - rss_now).abs() < rss_now * 0.5, "rss {rss} vs {rss_now}");
    assert!(sample(&om, "process_virtual_memory_bytes") >= rss);
    let start = sample(&om, "process_start_time_seconds");
    assert!((start - spawned).abs() < 2.0, "started at {start}, spawned at {spawned}");
    // The classic text format carries them as well, and one `# EOF` ends OpenMetrics.
    let classic = ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n", false).body;
    assert!(classic.contains("\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total "), "{classic}");
    assert!(classic.contains("\n# TYPE tcpdoctor_build_info gauge\ntcpdoctor_build_info{"), "{classic}");
    assert_eq!(om.matches("# EOF").count(), 1);
    assert!(om.ends_with("# EOF\n"));
}
