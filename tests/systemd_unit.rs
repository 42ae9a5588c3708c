//! deploy/systemd: the unit passes `systemd-analyze verify`, its exposure
//! (`systemd-analyze security --offline=yes`) is at most 3.0, and what it
//! allows is what watch uses: its command line, built from
//! /etc/default/tcpdoctor as systemd expands it, runs as an unprivileged user
//! with only the ambient CAP_NET_RAW and no_new_privs (DynamicUser's lot), and
//! every system call and socket family watch makes (traced with strace while
//! it captures and is scraped) passes SystemCallFilter= and
//! RestrictAddressFamilies=.

mod common;

use common::{free_port, require, require_root, run_bounded};
use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpdoctor");

fn deploy(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd").join(name)
}

fn unit() -> String {
    std::fs::read_to_string(deploy("tcpdoctor-watch.service")).unwrap()
}

/// Every value of `key=` in the unit, in order.
fn settings(unit: &str, key: &str) -> Vec<String> {
    unit.lines().filter_map(|l| l.strip_prefix(&format!("{key}="))).map(str::to_string).collect()
}

fn analyze(args: &[&str], dir: &Path) -> (bool, String) {
    let mut c = Command::new("systemd-analyze");
    c.args(args).current_dir(dir);
    let (out, _) = run_bounded(c, Duration::from_secs(60));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn unit_verifies_and_its_exposure_is_at_most_3() {
    if !require("systemd-analyze") {
        return;
    }
    // verify wants the command to exist: the binary under test stands for the installed one.
    let text = unit();
    assert!(text.contains("\nExecStart=tcpdoctor watch "), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let here = text.replace("\nExecStart=tcpdoctor ", &format!("\nExecStart={BIN} "));
    std::fs::write(dir.path().join("tcpdoctor-watch.service"), here).unwrap();
    let (ok, out) = analyze(&["verify", "--man=no", "./tcpdoctor-watch.service"], dir.path());
    assert!(ok && out.trim().is_empty(), "systemd-analyze verify: {out}");
    let (ok, out) = analyze(&["security", "--offline=yes", "./tcpdoctor-watch.service"], dir.path());
    assert!(ok, "systemd-analyze security: {out}");
    let level = out
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for tcpdoctor-watch.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no exposure level in {out}"));
    eprintln!("systemd-unit: exposure {level}");
    assert!(level <= 3.0, "exposure {level} > 3.0:\n{out}");
}

/// /etc/default/tcpdoctor's assignments.
fn defaults() -> HashMap<String, String> {
    let text = std::fs::read_to_string(deploy("tcpdoctor.default")).unwrap();
    let vars: HashMap<_, _> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split_once('=').unwrap_or_else(|| panic!("not KEY=VALUE: {l}")))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(vars.len(), 3, "{vars:?}");
    vars
}

/// The unit's ExecStart as systemd expands it: `${X}` one word, `$X` split at blanks.
fn exec_start(vars: &HashMap<String, String>) -> Vec<String> {
    let line = settings(&unit(), "ExecStart");
    assert_eq!(line.len(), 1, "{line:?}");
    let mut argv = Vec::new();
    for w in line[0].split_whitespace() {
        if let Some(k) = w.strip_prefix("${").and_then(|w| w.strip_suffix('}')) {
            argv.push(vars.get(k).unwrap_or_else(|| panic!("{k} is not in tcpdoctor.default")).clone());
        } else if let Some(k) = w.strip_prefix('$') {
            argv.extend(vars[k].split_whitespace().map(str::to_string));
        } else {
            argv.push(w.to_string());
        }
    }
    assert_eq!(argv[0], "tcpdoctor");
    argv[0] = BIN.to_string();
    argv
}

/// The unit's command line with the metrics on a free port and a bounded run.
fn command_line(extra: &[&str]) -> (Vec<String>, u16) {
    let mut vars = defaults();
    assert!(settings(&unit(), "EnvironmentFile") == ["/etc/default/tcpdoctor"]);
    let port = free_port();
    assert_eq!(vars["TCPDOCTOR_METRICS"], "127.0.0.1:9464");
    vars.insert("TCPDOCTOR_METRICS".into(), format!("127.0.0.1:{port}"));
    let mut argv = exec_start(&vars);
    argv.extend(extra.iter().map(|s| s.to_string()));
    (argv, port)
}

/// Runs `cmd` (a watch serving metrics on `port`), scraping it twice while it
/// runs; its exit code and standard error.
fn run_scraped(cmd: Command, port: u16) -> (Option<i32>, String) {
    let scraper = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(15);
        let mut bodies = Vec::new();
        while bodies.len() < 2 && Instant::now() < until {
            if let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) {
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
                let mut body = String::new();
                let _ = c.read_to_string(&mut body);
                // A scrape that meets watch's end (its --duration) is closed
                // unanswered: not an answer, so it is not counted.
                if !body.is_empty() {
                    bodies.push(body);
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bodies
    });
    let (out, _) = run_bounded(cmd, Duration::from_secs(30));
    let bodies = scraper.join().unwrap();
    assert_eq!(bodies.len(), 2, "watch never answered on 127.0.0.1:{port}");
    for b in bodies {
        assert!(b.contains("\nprocess_open_fds "), "{b}");
    }
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `setpriv` arguments for what the unit grants: a dynamic user, CAP_NET_RAW only, no_new_privs.
fn unit_privileges() -> [&'static str; 7] {
    [
        "--reuid=61934",
        "--regid=61934",
        "--clear-groups",
        "--no-new-privs",
        "--inh-caps=-all,+net_raw",
        "--ambient-caps=-all,+net_raw",
        "--bounding-set=-all,+net_raw",
    ]
}

#[test]
fn the_units_command_runs_with_dynamic_users_privileges() {
    if !require_root() || !require("setpriv") {
        return;
    }
    let (argv, port) = command_line(&["--duration", "5s"]);
    let mut c = Command::new("setpriv");
    c.args(unit_privileges()).args(&argv);
    let (code, err) = run_scraped(c, port);
    assert_eq!(code, Some(0), "{argv:?}: {err}");
    assert!(err.contains(&format!("metrics at http://127.0.0.1:{port}/metrics")), "{err}");
}

/// The system calls in a `systemd-analyze syscall-filter` group, its nested groups expanded.
fn group(name: &str, into: &mut BTreeSet<String>) {
    let (ok, out) = analyze(&["syscall-filter", name], Path::new("/"));
    assert!(ok, "syscall-filter {name}: {out}");
    for w in out.lines().skip(1).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if w.starts_with('@') {
            group(w, into);
        } else {
            into.insert(w.to_string());
        }
    }
}

#[test]
fn watchs_system_calls_and_socket_families_pass_the_units_filters() {
    if !require_root() || !require("strace") || !require("systemd-analyze") {
        return;
    }
    let text = unit();
    let (mut allowed, mut denied) = (BTreeSet::new(), BTreeSet::new());
    for f in settings(&text, "SystemCallFilter") {
        let (set, list) = match f.strip_prefix('~') {
            Some(rest) => (&mut denied, rest.to_string()),
            None => (&mut allowed, f),
        };
        for w in list.split_whitespace() {
            if w.starts_with('@') {
                group(w, set)
            } else {
                set.insert(w.to_string());
            }
        }
    }
    let families: Vec<String> =
        settings(&text, "RestrictAddressFamilies").join(" ").split(' ').map(String::from).collect();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace");
    let (argv, port) = command_line(&["--duration", "5s"]);
    // With the unit's privileges, as under systemd (root would also load eBPF).
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-o"]).arg(&log).arg("setpriv").args(unit_privileges()).args(&argv);
    let (code, err) = run_scraped(c, port);
    assert_eq!(code, Some(0), "{err}");
    let trace = std::fs::read_to_string(&log).unwrap();
    // Lines are "PID name(args…" (or "<… name resumed>", whose call was already seen).
    let mut used = BTreeSet::new();
    let mut socket_families = BTreeSet::new();
    // setpriv's own calls (dropping privileges) come before it executes watch.
    let exec = format!("execve(\"{}\"", argv[0]);
    let from = trace.lines().position(|l| l.contains(&exec)).expect("watch executed");
    for l in trace.lines().skip(from) {
        // strace pads the PID to five columns.
        let Some(call) = l.split_once(' ').map(|(_, rest)| rest.trim_start()) else { continue };
        let Some((name, args)) = call.split_once('(') else { continue };
        if name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            used.insert(name.to_string());
            if name == "socket" {
                socket_families.insert(args.split(',').next().unwrap().to_string());
            }
        }
    }
    assert!(
        used.contains("setsockopt") && used.contains("accept4"),
        "the trace missed watch's work: {used:?} in {} lines: {err}",
        trace.lines().count()
    );
    let refused: Vec<_> = used.iter().filter(|s| !allowed.contains(*s) || denied.contains(*s)).collect();
    assert!(refused.is_empty(), "SystemCallFilter= would refuse {refused:?}");
    assert!(socket_families.contains("AF_PACKET"), "{socket_families:?}");
    let outside: Vec<_> = socket_families.iter().filter(|f| !families.contains(f)).collect();
    assert!(outside.is_empty(), "RestrictAddressFamilies={families:?} would refuse {outside:?}");
}
