//! Root never runs a program a target chose with more privilege than the
//! target has. Each attack runs here as root with artefacts owned by nobody
//! in a fresh private directory: a nobody-owned program named `nginx`
//! (inspect by PID, by port, and diagnose), Debian's nginx started by nobody
//! whose config gains a `load_module` of a nobody-owned library, a Python
//! process that names itself "nginx", and an `ip` put first on PATH. Each
//! artefact records the ids it ran with; no record may show uid 0. Controls:
//! nginx started by root (its worker as nobody) and by nobody is still read
//! from `nginx -T`, and tcpdoctor without root runs nothing for a root nginx.

mod common;

use common::{Proc, free_port, require, require_root, tcpdoctor, wait_listening};
use serde_json::Value;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// nobody and nogroup on Debian.
const NOBODY: u32 = 65534;

/// Tests that start servers and load run one at a time: two cores are shared.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `setpriv` that runs what follows as nobody, without groups.
fn as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
    c
}

/// C that appends one line to `marker` beside the running executable (or
/// beside `at`): the arguments, then the ids and capabilities from
/// /proc/self/status, `|`-separated.
const MARK_C: &str = r#"
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void mark(const char *dir, int argc, char **argv) {
    char path[4200];
    snprintf(path, sizeof path, "%s/marker", dir);
    FILE *out = fopen(path, "a");
    if (!out) return;
    fprintf(out, "args=");
    for (int i = 1; i < argc; i++) fprintf(out, "%s%s", i > 1 ? " " : "", argv[i]);
    FILE *st = fopen("/proc/self/status", "r");
    char line[512];
    while (st && fgets(line, sizeof line, st)) {
        static const char *keep[] = {"Uid:", "Gid:", "Groups:", "CapPrm:", "CapEff:", "NoNewPrivs:"};
        for (unsigned k = 0; k < sizeof keep / sizeof *keep; k++)
            if (!strncmp(line, keep[k], strlen(keep[k]))) {
                line[strcspn(line, "\n")] = 0;
                fprintf(out, "|%s", line);
            }
    }
    fprintf(out, "\n");
    if (st) fclose(st);
    fclose(out);
}
"#;

/// A program named nginx: `nginx serve PORT` answers HTTP/1.1 keep-alive on
/// 127.0.0.1:PORT (a worker process per connection); run any other way, it marks.
const FAKE_NGINX_C: &str = r#"
#include <stdlib.h>
#include <signal.h>
#include <arpa/inet.h>
#include <sys/prctl.h>
#include <sys/socket.h>
int main(int argc, char **argv) {
    if (argc != 3 || strcmp(argv[1], "serve")) {
        char dir[4096];
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0) return 2;
        dir[n] = 0;
        *strrchr(dir, '/') = 0;
        mark(dir, argc, argv);
        return 1;
    }
    signal(SIGCHLD, SIG_IGN);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 64)) return 3;
    printf("listening\n");
    fflush(stdout);
    for (;;) {
        int c = accept(l, 0, 0);
        if (c < 0) continue;
        if (fork() == 0) {
            /* It keeps the listening socket: inspect then counts it as a worker, with its connection. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            static const char resp[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
            char buf[8192];
            size_t have = 0;
            for (;;) {
                ssize_t r = read(c, buf + have, sizeof buf - have - 1);
                if (r <= 0) _exit(0);
                have += r;
                buf[have] = 0;
                char *end;
                while ((end = strstr(buf, "\r\n\r\n"))) {
                    if (write(c, resp, sizeof resp - 1) < 0) _exit(0);
                    have -= (end + 4 - buf);
                    memmove(buf, end + 4, have + 1);
                }
                if (have >= sizeof buf - 1) _exit(0);
            }
        }
        close(c);
    }
}
"#;

/// A library whose constructor marks when anything loads it (nginx's
/// `load_module` dlopens it before it finds it is no module).
const EVIL_SO_C: &str = r#"
__attribute__((constructor)) static void evil(void) {
    char dir[4096];
    strcpy(dir, __FILE__);
    *strrchr(dir, '/') = 0;
    char *argv[] = {"evil.so", "loaded", 0};
    mark(dir, 2, argv);
}
"#;

/// A fresh private directory (0700) owned by nobody; removed on drop.
fn nobody_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix("tcpdoctor-sec-").tempdir().unwrap();
    chown(d.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    d
}

/// Compiles C `src` in `dir` into `out` (`-shared` when `lib`), owned by nobody.
fn compile(dir: &Path, name: &str, src: &str, lib: bool) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, format!("{MARK_C}{src}")).unwrap();
    let out = dir.join(name);
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-Wall", "-o"]).arg(&out).arg(&c);
    if lib {
        cc.args(["-shared", "-fPIC"]);
    }
    let (o, _) = common::run_bounded(cc, Duration::from_secs(60));
    assert!(o.status.success(), "cc {name}: {}", String::from_utf8_lossy(&o.stderr));
    for f in [&c, &out] {
        chown(f, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    out
}

/// The lines of `dir/marker` (none when nothing marked).
fn marks(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("marker")).unwrap_or_default().lines().map(String::from).collect()
}

/// The numbers after `field:` in a marker line.
fn ids(line: &str, field: &str) -> Vec<u64> {
    let v = line.split('|').find_map(|f| f.strip_prefix(field)?.strip_prefix(':')).unwrap_or_else(|| {
        panic!("no {field} in {line}");
    });
    let radix = if field.starts_with("Cap") { 16 } else { 10 };
    v.split_whitespace().map(|n| u64::from_str_radix(n, radix).unwrap()).collect()
}

/// Every run recorded ran as nobody, with no capability and no_new_privs; and there was one.
fn assert_ran_only_as_nobody(dir: &Path, what: &str) {
    let lines = marks(dir);
    assert!(!lines.is_empty(), "{what}: nothing ran at all (expected runs as nobody)");
    for l in &lines {
        assert_eq!(ids(l, "Uid"), vec![u64::from(NOBODY); 4], "{what}: ran with another uid: {l}");
        assert_eq!(ids(l, "Gid"), vec![u64::from(NOBODY); 4], "{what}: ran with another gid: {l}");
        assert!(ids(l, "Groups").iter().all(|&g| g != 0), "{what}: ran in group 0: {l}");
        assert_eq!(ids(l, "CapEff"), vec![0], "{what}: ran with capabilities: {l}");
        assert_eq!(ids(l, "CapPrm"), vec![0], "{what}: ran with capabilities: {l}");
        assert_eq!(ids(l, "NoNewPrivs"), vec![1], "{what}: ran without no_new_privs: {l}");
    }
}

/// `tcpdoctor ARGS…` (bounded), its JSON; `path` first on PATH when given.
fn tcpdoctor_json(args: &[&str], path: Option<&Path>) -> Value {
    let mut c = tcpdoctor();
    c.args(args);
    if let Some(p) = path {
        c.env("PATH", format!("{}:{}", p.display(), std::env::var("PATH").unwrap_or_default()));
    }
    let (o, _) = common::run_bounded(c, Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out} {}", String::from_utf8_lossy(&o.stderr)))
}

/// A nobody-owned program named nginx, started by nobody on a loopback port:
/// inspect by PID, by port, and diagnose (step 5) run it, if at all, only as
/// nobody. An `ip` first on PATH (nobody's, in the same directory) is never
/// run: diagnose's route lookups take `ip` from root-owned system directories.
#[test]
fn a_nobody_program_named_nginx_runs_only_as_nobody() {
    if !require_root() || !require("cc") || !require("setpriv") {
        return;
    }
    let _g = serial();
    let dir = nobody_dir();
    let bin = compile(dir.path(), "nginx", FAKE_NGINX_C, false);
    let port = free_port();
    let mut c = as_nobody();
    c.arg(&bin).args(["serve", &port.to_string()]);
    let (mut p, line) = Proc::started(c);
    assert_eq!(line.trim(), "listening");
    wait_listening(port, &mut p);
    let pid = p.0.id().to_string();

    let fake_ip = dir.path().join("ip");
    std::fs::write(&fake_ip, format!("#!/bin/sh\nid -u >> {}/ip-ran\nexit 1\n", dir.path().display())).unwrap();
    std::fs::set_permissions(&fake_ip, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown(&fake_ip, Some(NOBODY), Some(NOBODY)).unwrap();

    let by_pid = tcpdoctor_json(&["inspect", &pid, "--json", "--window", "0"], None);
    let by_port = tcpdoctor_json(&["inspect", &format!(":{port}"), "--json", "--window", "0"], None);
    for v in [&by_pid, &by_port] {
        assert_eq!(v["process"]["pid"].to_string(), pid);
        assert_eq!(v["software"]["kind"], "nginx", "named by its executable: {:#}", v["software"]);
    }
    let url = format!("http://127.0.0.1:{port}/");
    let d = tcpdoctor_json(&["diagnose", &url, "--json", "-d", "2s", "-c", "2", "--no-capture"], Some(dir.path()));
    assert!(d["load"]["requests"].as_u64().unwrap() > 0, "the server answered: {:#}", d["load"]);
    assert_eq!(d["server"]["software"], "nginx", "step 5 reached the software: {:#}", d["server"]);
    assert!(d["server"]["established"].as_u64().unwrap() > 0, "connections to look up routes for: {:#}", d["server"]);

    assert_ran_only_as_nobody(dir.path(), "the fake nginx");
    let lines = marks(dir.path());
    assert!(lines.iter().any(|l| l.starts_with("args=-v|")), "{lines:#?}");
    assert!(lines.iter().any(|l| l.starts_with("args=-T|")), "{lines:#?}");
    let ip_ran = std::fs::read_to_string(dir.path().join("ip-ran")).unwrap_or_default();
    assert_eq!(ip_ran, "", "the `ip` first on PATH ran (as uid {ip_ran})");
}

/// The fake nginx made set-user-ID root: started by nobody (real uid nobody,
/// effective root) it is never run, since a set-user-ID program told root
/// called it would trust its arguments; started by root, not either. The
/// notes say why, and nothing marks.
#[test]
fn a_set_user_id_program_named_nginx_is_never_run() {
    if !require_root() || !require("cc") || !require("setpriv") {
        return;
    }
    let _g = serial();
    let dir = nobody_dir();
    let bin = compile(dir.path(), "nginx", FAKE_NGINX_C, false);
    chown(&bin, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o4755)).unwrap();
    for (by_nobody, why) in [
        (true, "not run: its real, effective and saved ids differ (a set-user-ID program?)"),
        (false, "not run: its executable is set-user-ID or set-group-ID"),
    ] {
        let port = free_port();
        let mut c = if by_nobody { as_nobody() } else { Command::new(&bin) };
        if by_nobody {
            c.arg(&bin);
        }
        c.args(["serve", &port.to_string()]);
        let (mut p, line) = Proc::started(c);
        assert_eq!(line.trim(), "listening");
        wait_listening(port, &mut p);
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.0.id())).unwrap();
        let uid = if by_nobody { "\nUid:\t65534\t0\t0\t0\n" } else { "\nUid:\t0\t0\t0\t0\n" };
        assert!(status.contains(uid), "{status}");
        let v = tcpdoctor_json(&["inspect", &format!(":{port}"), "--json", "--window", "0"], None);
        assert_eq!(marks(dir.path()), Vec::<String>::new(), "it ran");
        assert_eq!(v["software"]["kind"], "nginx");
        assert!(notes(&v["software"]).contains(why), "{:#}", v["software"]);
    }
}

/// nginx started as `user` (nobody: by setpriv) with `conf`; listening when this returns.
fn start_nginx(dir: &Path, port: u16, nobody: bool, user_line: &str) -> Proc {
    let d = dir.display().to_string();
    let conf = std::fs::read_to_string(common::data("lab/nginx.conf.template"))
        .unwrap()
        .replace("user root;", user_line)
        .replace("@PREFIX@", &d)
        .replace("@ROOT@", &format!("{d}/www"))
        .replace("@PORT@", &port.to_string())
        .replace("@NODELAY@", "off");
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    if nobody {
        for f in ["www", "nginx.conf"] {
            chown(dir.join(f), Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }
    let mut c = if nobody { as_nobody() } else { Command::new("/usr/sbin/nginx") };
    if nobody {
        c.arg("/usr/sbin/nginx");
    }
    c.arg("-p").arg(dir).arg("-c").arg(dir.join("nginx.conf")).arg("-e").arg(dir.join("error.log"));
    let mut p = Proc(c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap());
    wait_listening(port, &mut p);
    p
}

/// The software record's notes, one string.
fn notes(sw: &Value) -> String {
    sw["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect::<Vec<_>>().join("\n")
}

/// Debian's nginx started by nobody with its own readable config: read as
/// nobody (`tcp_nodelay off` found). Then its config gains `load_module` of a
/// nobody-owned library, as an attacker would after start-up: the next
/// `nginx -T` loads it, but only as nobody.
#[test]
fn nobody_nginx_is_read_as_nobody_and_its_load_module_never_loads_as_root() {
    if !require_root() || !require("nginx") || !require("cc") || !require("setpriv") {
        return;
    }
    let _g = serial();
    let dir = nobody_dir();
    let port = free_port();
    let _p = start_nginx(dir.path(), port, true, "");
    let target = format!(":{port}");

    let v = tcpdoctor_json(&["inspect", &target, "--json", "--window", "0"], None);
    let sw = &v["software"];
    assert_eq!(v["process"]["uid"], NOBODY, "{:#}", v["process"]);
    assert_eq!((&sw["kind"], &sw["nodelay_setting"]), (&"nginx".into(), &false.into()), "{sw:#}");
    assert!(sw["setting_source"].as_str().unwrap().contains(" -T -p "), "{sw:#}");
    assert!(sw["name"].as_str().unwrap().starts_with("nginx 1."), "{sw:#}");

    let evil = compile(dir.path(), "evil.so", EVIL_SO_C, true);
    let conf = dir.path().join("nginx.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(&conf, format!("load_module {};\n{text}", evil.display())).unwrap();
    assert!(marks(dir.path()).is_empty(), "nothing loaded it yet");

    let v = tcpdoctor_json(&["inspect", &target, "--json", "--window", "0"], None);
    assert_ran_only_as_nobody(dir.path(), "load_module's library");
    let sw = &v["software"];
    assert_eq!(sw["kind"], "nginx");
    assert_eq!(sw["nodelay_setting"], Value::Null, "the dump failed on the non-module: {sw:#}");
    assert!(notes(sw).contains("(as uid 65534) failed:"), "{sw:#}");
}

/// Debian's nginx started by root, its worker as nobody (`user nobody
/// nogroup;`), its config in a root-only directory: inspecting the worker
/// still reads the master's config, as the master's user (root), so the
/// normal case keeps working. tcpdoctor without root (nobody with
/// CAP_SYS_PTRACE, enough to read the sockets) runs nothing for it and says why.
#[test]
fn root_nginx_is_read_as_its_master_and_not_without_root() {
    if !require_root() || !require("nginx") || !require("setpriv") {
        return;
    }
    let _g = serial();
    let dir = tempfile::Builder::new().prefix("tcpdoctor-sec-root-").tempdir().unwrap();
    let port = free_port();
    let p = start_nginx(dir.path(), port, false, "user nobody nogroup;");
    let master = p.0.id();
    let kids = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children")).unwrap();
    let worker = kids.split_whitespace().next().expect("a worker").to_string();
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).unwrap();
    assert!(status.contains("\nUid:\t65534\t65534\t65534\t65534\n"), "the worker runs as nobody: {status}");

    for v in [
        tcpdoctor_json(&["inspect", &worker, "--json", "--window", "0"], None),
        tcpdoctor_json(&["inspect", &format!(":{port}"), "--json", "--window", "0"], None),
    ] {
        let sw = &v["software"];
        assert_eq!((&sw["kind"], &sw["nodelay_setting"]), (&"nginx".into(), &false.into()), "{sw:#}");
        assert!(sw["setting_source"].as_str().unwrap().contains(" -T -p "), "{sw:#}");
    }

    let mut c = as_nobody();
    c.args(["--inh-caps=+sys_ptrace", "--ambient-caps=+sys_ptrace", env!("CARGO_BIN_EXE_tcpdoctor")]).args([
        "inspect",
        &format!(":{port}"),
        "--json",
        "--window",
        "0",
    ]);
    let (o, _) = common::run_bounded(c, Duration::from_secs(60));
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let sw = &v["software"];
    assert_eq!((&sw["kind"], &sw["nodelay_setting"]), (&"nginx".into(), &Value::Null), "{sw:#}");
    let n = notes(sw);
    assert!(
        n.contains(" not run: tcpdoctor runs as uid 65534 gid 65534, the process as uid 0 gid 0: only root can run it"),
        "{n}"
    );
}

/// A Python process (nobody's) that sets its comm to "nginx" is Python:
/// nothing is executed for it (strace sees no execve but tcpdoctor's own).
#[test]
fn a_python_process_calling_itself_nginx_is_python_and_nothing_runs() {
    if !require_root() || !require("strace") || !require("setpriv") {
        return;
    }
    let _g = serial();
    let dir = nobody_dir();
    let port = free_port();
    let script = format!(
        "import ctypes, socket, time\n\
ctypes.CDLL(None).prctl(15, b'nginx', 0, 0, 0)\n\
s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen()\n\
print('listening', flush=True)\n\
time.sleep(60)\n"
    );
    let mut c = as_nobody();
    c.args(["/usr/bin/python3", "-c", &script]).current_dir(dir.path());
    let (mut p, line) = Proc::started(c);
    assert_eq!(line.trim(), "listening");
    wait_listening(port, &mut p);
    let pid = p.0.id().to_string();
    assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap(), "nginx\n");

    let log = dir.path().join("execs");
    let mut c = Command::new("strace");
    c.args(["-f", "-qq", "-e", "trace=execve,execveat", "-o"])
        .arg(&log)
        .arg(env!("CARGO_BIN_EXE_tcpdoctor"))
        .args(["inspect", &pid, "--json", "--window", "0"]);
    let (o, _) = common::run_bounded(c, Duration::from_secs(60));
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    let execs = std::fs::read_to_string(&log).unwrap();
    let others: Vec<&str> = execs.lines().filter(|l| !l.contains(env!("CARGO_BIN_EXE_tcpdoctor"))).collect();
    assert!(others.is_empty(), "tcpdoctor executed something: {others:#?}");
    assert_eq!(v["process"]["comm"], "nginx");
    assert_eq!(v["software"]["kind"], "python", "{:#}", v["software"]);
}
