//! Where results go: output files are renamed into place only when complete
//! (a failed run leaves an existing file as it was; a symlink at the name is
//! replaced, not followed), a failed write to standard output ends with exit
//! 6 and one line, and a closed pipe ends quietly.

mod common;

use common::{Proc, data, free_port, require, require_root, tcpdoctor, wait_listening};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn full() -> File {
    File::options().write(true).open("/dev/full").expect("/dev/full")
}

/// Runs `cmd` with stdout on /dev/full: (exit code, stderr).
fn into_full(mut cmd: Command) -> (i32, String) {
    let out = cmd.stdout(full()).stderr(Stdio::piped()).stdin(Stdio::null()).output().unwrap();
    (out.status.code().expect("exited"), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn only_line(stderr: &str, needles: &[&str]) {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected:\n{stderr}");
    assert!(lines[0].starts_with("tcpdoctor: "), "{stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "{n:?} missing:\n{stderr}");
    }
}

/// Root's file (`name`.victim, in `dir`, out of nobody's reach) and, in a
/// directory of user nobody's, a symlink `name` → it that nobody planted:
/// the attack on a root tool writing to a path a local user controls.
fn planted(dir: &Path, name: &str, text: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let victim = dir.join(format!("{name}.victim"));
    std::fs::write(&victim, text).unwrap();
    // nobody may pass through `dir` (but write nothing in it) to reach its own directory.
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let theirs = dir.join("nobody");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let link = theirs.join(name);
    let ok = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "ln", "-s"])
        .arg(&victim)
        .arg(&link)
        .status()
        .unwrap();
    assert!(ok.success(), "nobody could not plant {}", link.display());
    assert_eq!(std::fs::symlink_metadata(&link).unwrap().uid(), 65534);
    (victim, link)
}

#[test]
fn a_failed_analyze_leaves_the_old_html_report_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    std::fs::write(&html, "yesterday's report").unwrap();
    let garbage = dir.path().join("garbage.pcap");
    std::fs::write(&garbage, b"not a capture at all").unwrap();
    let out = tcpdoctor().args(["analyze", "--html"]).arg(&html).arg(&garbage).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(std::fs::read_to_string(&html).unwrap(), "yesterday's report");
    // Nothing else left behind (the temporary file is removed).
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn html_reports_replace_a_planted_symlink_instead_of_following_it() {
    if !require_root() || !require("setpriv") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (victim, link) = planted(dir.path(), "r.html", "root's file");
    let out = tcpdoctor().args(["analyze", "--html"]).arg(&link).arg(data("wwr_nagle.pcap")).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file");
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_file(), "the symlink was replaced by the report");
    assert!(std::fs::read_to_string(&link).unwrap().contains("<html"));
    // The mode a plain create gives (0666 less the umask), not the temporary file's 0600.
    assert_eq!(meta.mode() & 0o044, 0o044, "mode {:o}", meta.mode());
}

#[test]
fn capture_files_appear_whole_when_the_capture_ends() {
    if !require_root() || !require("setpriv") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (victim, link) = planted(dir.path(), "out.pcap", "root's file");
    let port = free_port();
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let mut c = tcpdoctor()
        .args(["capture", "-i", "lo", "-w"])
        .arg(&link)
        .args(["tcp", "port", &port.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for "capturing on …", then make some packets.
    let mut err = c.stderr.take().unwrap();
    let mut first = [0u8; 64];
    let _ = err.read(&mut first).unwrap();
    for _ in 0..3 {
        let _ = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = listener.accept().unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    // While it runs, the name still holds the symlink: nothing was written through it.
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    // SIGTERM (as systemd or timeout would stop it) completes the file.
    // SAFETY: kill(2) on the PID of the child this test started.
    unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
    let status = c.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file");
    let r = tcpdoctor().args(["analyze", "--json"]).arg(&link).output().unwrap();
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(v["inputs"][0]["packets"].as_u64().unwrap() >= 9, "{}", v["inputs"][0]);
    assert_eq!(std::fs::read_dir(link.parent().unwrap()).unwrap().count(), 1, "no temporary file left");
}

#[test]
fn a_full_disk_on_stdout_is_an_error_not_a_success() {
    let mut a = tcpdoctor();
    a.args(["analyze"]).arg(data("wwr_nagle.pcap"));
    let (code, err) = into_full(a);
    assert_eq!(code, 6);
    only_line(&err, &["cannot write to standard output", "No space left on device"]);
    let mut j = tcpdoctor();
    j.args(["analyze", "--json"]).arg(data("wwr_nagle.pcap"));
    assert_eq!(into_full(j).0, 6);
    let mut d = tcpdoctor();
    d.args(["demo", "--offline"]);
    assert_eq!(into_full(d).0, 6);
}

#[test]
fn bench_json_into_a_full_disk_exits_6() {
    if !require("python3") {
        return;
    }
    let port = free_port();
    let mut s = Command::new("python3");
    s.args(["-m", "http.server", "--bind", "127.0.0.1", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    let mut server = Proc(s.spawn().unwrap());
    wait_listening(port, &mut server);
    let mut b = tcpdoctor();
    b.args(["bench", "--json", "-c1", "-t1", "-d", "300ms", &format!("http://127.0.0.1:{port}/")]);
    let (code, err) = into_full(b);
    assert_eq!(code, 6, "{err}");
    only_line(&err, &["cannot write to standard output"]);
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let mut c = tcpdoctor()
        .args(["analyze"])
        .arg(data("nginx_nodelay_off.pcap"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read one byte, then close the pipe, as `| head -c1` does.
    let mut one = [0u8; 1];
    c.stdout.take().unwrap().read_exact(&mut one).unwrap();
    let out = c.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn watch_without_metrics_stops_when_nobody_reads_it() {
    if !require_root() {
        return;
    }
    let mut c = tcpdoctor()
        .args(["watch", "-i", "lo", "--summary-every", "100ms", "--duration", "30s", "tcp", "port", "9"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    c.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe is closed now; the next summary fails and watch ends.
    let t = Instant::now();
    let mut p = Proc(c);
    while p.0.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(5), "watch still runs with nobody reading");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(p.0.wait().unwrap().code(), Some(0));
}

/// The directories `lab --nginx` used to write into (`tcpdoctor-lab-nginx-PID-PORT`),
/// planted by user nobody for the next `n` PIDs, with nginx.conf and nginx.pid
/// linked to `victims`.
fn plant_lab_dirs(ports: [u16; 2], n: u32, victims: [&Path; 2]) -> Vec<std::path::PathBuf> {
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid").unwrap().trim().parse().unwrap();
    let tmp = std::env::temp_dir();
    let dirs: Vec<_> = (last..last + n)
        .flat_map(|pid| ports.map(|port| tmp.join(format!("tcpdoctor-lab-nginx-{pid}-{port}"))))
        .collect();
    let script = format!(
        "import os,sys\nfor d in sys.argv[1:]:\n os.mkdir(d, 0o777)\n os.symlink({:?}, d + '/nginx.conf')\n os.symlink({:?}, d + '/nginx.pid')\n",
        victims[0].to_str().unwrap(),
        victims[1].to_str().unwrap()
    );
    let ok = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", &script])
        .args(&dirs)
        .status()
        .unwrap();
    assert!(ok.success(), "planting as nobody failed");
    dirs
}

/// `tcpdoctor lab --nginx -p BASE`: the process and its servers (name, URL), or None if it could not start.
fn lab_on(base: u16) -> Option<(Proc, Vec<(String, String)>)> {
    use std::io::BufRead;
    let mut c = tcpdoctor()
        .args(["lab", "--json", "--nginx", "-d", "300s", "-p", &base.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(c.stdout.take().unwrap());
    let p = Proc(c);
    // The JSON list ends with a line "]"; a lab that could not start prints nothing.
    let mut text = String::new();
    for line in out.lines() {
        let line = line.ok()?;
        text.push_str(&line);
        if line == "]" {
            break;
        }
    }
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let servers = v.as_array()?.iter().map(|s| (s["name"].as_str().unwrap().into(), s["url"].as_str().unwrap().into()));
    Some((p, servers.collect()))
}

#[test]
fn lab_nginx_never_writes_through_a_planted_directory() {
    if !require_root() || !require("nginx") || !require("setpriv") || !require("python3") {
        return;
    }
    // Root's files, out of nobody's reach.
    let safe = tempfile::tempdir().unwrap();
    let conf_victim = safe.path().join("conf-victim");
    let pid_victim = safe.path().join("pid-victim");
    std::fs::write(&conf_victim, "root's config").unwrap();
    std::fs::write(&pid_victim, "root's pid file").unwrap();
    // lab takes seven ports from -p on. Bases come from below the kernel's
    // ephemeral range, where other tests' client sockets never land; retry when
    // another test's server took one meanwhile.
    let (lab, servers, dirs) = (0..20u16)
        .find_map(|i| {
            let base = 20000 + (std::process::id() as u16 % 1000) * 10 + i * 7;
            let free = (base..base + 7).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
            if !free {
                return None;
            }
            let dirs = plant_lab_dirs([base + 3, base + 4], 3000, [&conf_victim, &pid_victim]);
            match lab_on(base) {
                Some((lab, servers)) => Some((lab, servers, dirs)),
                None => {
                    dirs.iter().for_each(|d| drop(std::fs::remove_dir_all(d)));
                    None
                }
            }
        })
        .expect("lab --nginx started within 20 tries");
    // nginx's prefix (-p DIR) is a fresh directory only root can enter.
    let url = common::url_of(&servers, "nginx-nodelay-off");
    let nginx = tcpdoctor::inspect::find_listener(common::port_of(url)).unwrap().expect("nginx listens");
    let cmdline = std::fs::read(format!("/proc/{nginx}/cmdline")).unwrap();
    let args: Vec<String> = cmdline.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
    let prefix = args.windows(2).find(|w| w[0] == "-p").map(|w| w[1].clone()).expect("-p DIR");
    let meta = std::fs::metadata(&prefix).unwrap();
    drop(lab);
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    assert_eq!(std::fs::read_to_string(&conf_victim).unwrap(), "root's config");
    assert_eq!(std::fs::read_to_string(&pid_victim).unwrap(), "root's pid file");
    assert!(!dirs.iter().any(|d| d.to_str() == Some(prefix.as_str())), "a planted directory was used");
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "{prefix}");
    assert!(!Path::new(&prefix).exists(), "{prefix} removed when lab stopped");
}
