//! Which server software the process is, and its own TCP_NODELAY knob:
//! nginx (`nginx -T`), the JDK's `com.sun.net.httpserver`
//! (`sun.net.httpserver.nodelay`), Python, Node.js, Go, or other.
//!
//! The kind comes from the executable the kernel says the process runs,
//! never from `comm` or the command line, which the process can rewrite.
//! nginx and node are run only as the process itself ([`run_as`]).

use super::run_as::{self, Target};
use super::{nginx, procfs};
use crate::record::inspect::{Setting, Software};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long `nginx -T`, `nginx -v` or `node --version` may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(5);

/// What is known about the process before classifying it.
pub(crate) struct Proc {
    pub pid: u32,
    pub comm: String,
    pub cmdline: Vec<String>,
    pub exe: Option<PathBuf>,
}

impl Proc {
    /// Reads `pid`'s names from /proc.
    pub fn read(pid: u32) -> Proc {
        Proc { pid, comm: procfs::comm(pid), cmdline: procfs::cmdline(pid), exe: procfs::exe(pid) }
    }

    /// The executable's file name ("" when the kernel does not say).
    fn exe_name(&self) -> String {
        let name = self.exe.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
        // A replaced binary reads as "name (deleted)".
        name.map(|n| n.trim_end_matches(" (deleted)").to_string()).unwrap_or_default()
    }
}

/// Classifies the process. `port` narrows nginx's settings to the server
/// block that listens on it.
pub(crate) fn classify(p: &Proc, port: Option<u16>) -> Software {
    let exe = p.exe_name();
    if exe == "nginx" {
        return nginx_software(p, port);
    }
    if exe == "java" {
        return java(p);
    }
    if exe.starts_with("python") {
        return python(p);
    }
    if exe == "node" || exe == "nodejs" {
        return node(p);
    }
    // The file the process runs, not a path it could swap meanwhile.
    let running = PathBuf::from(format!("/proc/{}/exe", p.pid));
    if let Some(version) = p.exe.as_ref().and_then(|_| go_version(&running)) {
        return Software {
            kind: "go",
            name: format!("Go program {exe} ({version})"),
            nodelay_setting: Some(true),
            setting_source: Some("default (net sets TCP_NODELAY on every TCP connection)".into()),
            notes: vec!["Go turns TCP_NODELAY on unless the program calls TCPConn.SetNoDelay(false).".into()],
            ..Software::default()
        };
    }
    Software {
        kind: "other",
        name: if exe.is_empty() { p.comm.clone() } else { exe },
        notes: vec!["TCP_NODELAY is this program's own choice; the sockets' `nodelay` column shows it.".into()],
        ..Software::default()
    }
}

fn nginx_software(p: &Proc, port: Option<u16>) -> Software {
    let mut s = Software { kind: "nginx", name: "nginx".into(), ..Software::default() };
    // The master's configuration, arguments, directory and user are the ones
    // that matter: a worker's parent running the same executable is its master.
    let master = procfs::ppid(p.pid).filter(|&pp| run_as::same_executable(p.pid, pp)).unwrap_or(p.pid);
    let args = nginx_args(&procfs::cmdline(master));
    let bin = procfs::exe(master).unwrap_or_else(|| PathBuf::from("nginx"));
    let shown = format!("{} -T {}", bin.display(), args.join(" "));
    let note = "nginx sets TCP_NODELAY on a connection only once it goes keep-alive (after its first response), \
and with tcp_nopush on uses TCP_CORK while sending a file";
    let target = match Target::pin(master) {
        Ok(t) => t,
        Err(why) => {
            s.notes.push(format!(
                "`{shown}` not run: {why}; its own TCP_NODELAY setting is unknown (nginx's default is on)"
            ));
            s.notes.push(note.into());
            return s;
        }
    };
    if let Ok((_, out, err)) = target.run("nginx", &["-v".into()], TOOL_TIMEOUT)
        && let Some(v) = format!("{out}{err}").split("nginx/").nth(1).and_then(|v| v.split_whitespace().next())
    {
        s.name = format!("nginx {v}");
    }
    let mut dump_args = vec!["-T".to_string()];
    dump_args.extend(args);
    match target.run("nginx", &dump_args, TOOL_TIMEOUT) {
        Ok((status, out, _)) if status.success() && out.contains("# configuration file ") => {
            let eff = nginx::effective(&out, port);
            s.nodelay_setting = eff.tcp_nodelay.as_ref().map(|v| v.value == "on");
            s.setting_source = eff.tcp_nodelay.as_ref().map(|v| {
                if v.source == "default" { "nginx default (`nginx -T` sets none)".into() } else { format!("`{shown}`") }
            });
            s.settings = [eff.tcp_nodelay, eff.sendfile, eff.tcp_nopush, eff.keepalive_timeout]
                .into_iter()
                .flatten()
                .collect::<Vec<Setting>>();
            s.notes.extend(eff.notes);
        }
        Ok((_, _, err)) => {
            let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("no configuration dump").trim();
            s.notes.push(format!(
                "`{shown}` (as uid {}) failed: {first}; nginx's default is tcp_nodelay on",
                target.creds.uid
            ));
        }
        Err(e) => s.notes.push(format!(
            "could not run `{shown}` as uid {}: {e}; nginx's default is tcp_nodelay on",
            target.creds.uid
        )),
    }
    s.notes.push(note.into());
    s
}

/// The `-c`, `-p` and `-g` arguments of an nginx master's command line.
fn nginx_args(cmdline: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cmdline.len() {
        let flag = &cmdline[i];
        i += 1;
        if !matches!(flag.as_str(), "-c" | "-p" | "-g") || i >= cmdline.len() {
            continue;
        }
        let mut v = cmdline[i].clone();
        i += 1;
        // A rewritten title was split on spaces: a `-g` value runs to its `;`.
        while flag == "-g" && !v.ends_with(';') && i < cmdline.len() {
            v.push(' ');
            v.push_str(&cmdline[i]);
            i += 1;
        }
        out.push(flag.clone());
        out.push(v);
    }
    out
}

/// The JDK's property parse: `Boolean.getBoolean`-style, "true" in any case.
fn java_property(args: &[String], name: &str) -> Option<bool> {
    let key = format!("-D{name}=");
    args.iter().rev().find_map(|a| a.strip_prefix(&key)).map(|v| v.eq_ignore_ascii_case("true"))
}

/// Options the JVM also reads from its environment.
fn java_env_options(pid: u32) -> Vec<String> {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/environ")) else { return Vec::new() };
    raw.split(|&b| b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            let (k, v) = kv.split_once('=')?;
            matches!(k, "JAVA_TOOL_OPTIONS" | "JDK_JAVA_OPTIONS")
                .then(|| v.split_whitespace().map(String::from).collect::<Vec<_>>())
        })
        .flatten()
        .collect()
}

fn java(p: &Proc) -> Software {
    const PROP: &str = "sun.net.httpserver.nodelay";
    let from_cmdline = java_property(&p.cmdline, PROP);
    let from_env = java_property(&java_env_options(p.pid), PROP);
    // The JDK server's dispatcher thread is named "HTTP-Dispatcher".
    let httpserver = from_cmdline.is_some()
        || from_env.is_some()
        || p.cmdline.iter().any(|a| a.contains("com.sun.net.httpserver"))
        || procfs::thread_names(p.pid).iter().any(|t| t == "HTTP-Dispatcher");
    let main = p.cmdline.iter().skip(1).find(|a| !a.starts_with('-') && !a.contains('/')).cloned();
    let name = match &main {
        Some(m) => format!("Java {m}"),
        None => "Java".into(),
    };
    if !httpserver {
        return Software {
            kind: "java",
            name,
            notes: vec![
                "java.net.Socket starts with Nagle on (setTcpNoDelay(true) turns it off); Tomcat, Jetty and Netty \
turn TCP_NODELAY on by default"
                    .into(),
            ],
            ..Software::default()
        };
    }
    let (value, source) = match (from_cmdline, from_env) {
        (Some(v), _) => (v, format!("-D{PROP} on the command line")),
        (None, Some(v)) => (v, format!("-D{PROP} in JAVA_TOOL_OPTIONS/JDK_JAVA_OPTIONS")),
        (None, None) => (false, format!("JDK default ({PROP} not set)")),
    };
    Software {
        kind: "jdk-httpserver",
        name: format!("{name} (com.sun.net.httpserver)"),
        nodelay_setting: Some(value),
        setting_source: Some(source),
        settings: vec![Setting {
            name: PROP.into(),
            value: value.to_string(),
            source: if from_cmdline.or(from_env).is_some() { "config" } else { "default" },
        }],
        notes: vec![format!("the JDK HttpServer leaves Nagle on unless started with -D{PROP}=true")],
    }
}

fn python(p: &Proc) -> Software {
    let script = p.cmdline.iter().skip(1).find(|a| !a.starts_with('-')).map(|a| {
        let m = p.cmdline.windows(2).find(|w| w[0] == "-m").map(|w| w[1].clone());
        m.unwrap_or_else(|| Path::new(a).file_name().map_or(a.clone(), |n| n.to_string_lossy().into_owned()))
    });
    Software {
        kind: "python",
        name: script.map_or("Python".into(), |s| format!("Python {s}")),
        notes: vec![
            "Python sockets start with Nagle on; socketserver/http.server leave it on (StreamRequestHandler.\
disable_nagle_algorithm = False), asyncio transports turn TCP_NODELAY on"
                .into(),
        ],
        ..Software::default()
    }
}

fn node(p: &Proc) -> Software {
    let mut notes = Vec::new();
    let version = match Target::pin(p.pid) {
        Ok(t) => t
            .run("node", &["--version".into()], TOOL_TIMEOUT)
            .ok()
            .map(|(_, out, _)| out.trim().to_string())
            .filter(|v| v.starts_with('v')),
        Err(why) => {
            notes.push(format!("`node --version` not run: {why}"));
            None
        }
    };
    notes.push(
        "Node's http server and agent turn TCP_NODELAY on (noDelay, default true since v18); a plain \
net.Socket starts with Nagle on (socket.setNoDelay())"
            .into(),
    );
    Software {
        kind: "node",
        name: version.map_or("Node.js".into(), |v| format!("Node.js {v}")),
        notes,
        ..Software::default()
    }
}

/// Go's version from the `.go.buildinfo` ELF section, if `exe` is a Go program.
/// ("go" alone when the section exists but holds no inline version.)
pub(crate) fn go_version(exe: &Path) -> Option<String> {
    let f = File::open(exe).ok()?;
    let (off, size) = elf_section(&f, ".go.buildinfo")?;
    let mut buf = vec![0u8; size.min(4096) as usize];
    f.read_exact_at(&mut buf, off).ok()?;
    if !buf.starts_with(b"\xff Go buildinf:") {
        return None;
    }
    // Go ≥ 1.18: flag bit 2 means the version follows inline as a varint-prefixed string at 32.
    if buf.get(15).is_some_and(|f| f & 2 != 0)
        && let Some(v) = uvarint_str(&buf[32.min(buf.len())..])
    {
        return Some(v);
    }
    Some("go".into())
}

fn uvarint_str(b: &[u8]) -> Option<String> {
    let (mut n, mut shift, mut i) = (0usize, 0, 0);
    loop {
        let c = *b.get(i)?;
        n |= usize::from(c & 0x7f) << shift;
        i += 1;
        if c < 0x80 {
            break;
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
    let s = b.get(i..i + n)?;
    Some(String::from_utf8_lossy(s).into_owned())
}

/// `(file offset, size)` of the ELF section named `want`.
fn elf_section(f: &File, want: &str) -> Option<(u64, u64)> {
    let mut h = [0u8; 64];
    f.read_exact_at(&mut h, 0).ok()?;
    if &h[..4] != b"\x7fELF" {
        return None;
    }
    let wide = h[4] == 2;
    let le = h[5] == 1;
    let rd = |b: &[u8], at: usize, n: usize| -> u64 {
        let s = &b[at..at + n];
        let mut v = 0u64;
        for i in 0..n {
            let byte = if le { s[n - 1 - i] } else { s[i] };
            v = (v << 8) | u64::from(byte);
        }
        v
    };
    let (shoff, shentsize, shnum, shstrndx) = if wide {
        (rd(&h, 0x28, 8), rd(&h, 0x3a, 2), rd(&h, 0x3c, 2), rd(&h, 0x3e, 2))
    } else {
        (rd(&h, 0x20, 4), rd(&h, 0x2e, 2), rd(&h, 0x30, 2), rd(&h, 0x32, 2))
    };
    // Bounded reads: at most 4096 entries of at most 256 bytes (real ones are 64 or 40).
    if shnum == 0 || shnum > 4096 || shentsize < if wide { 64 } else { 40 } || shentsize > 256 || shstrndx >= shnum {
        return None;
    }
    let mut table = vec![0u8; (shnum * shentsize) as usize];
    f.read_exact_at(&mut table, shoff).ok()?;
    // (name offset, file offset, size) of section i.
    let sect = |i: u64| {
        let e = &table[(i * shentsize) as usize..];
        if wide { (rd(e, 0, 4), rd(e, 24, 8), rd(e, 32, 8)) } else { (rd(e, 0, 4), rd(e, 16, 4), rd(e, 20, 4)) }
    };
    let (_, str_off, str_size) = sect(shstrndx);
    let mut names = vec![0u8; str_size.min(1 << 20) as usize];
    f.read_exact_at(&mut names, str_off).ok()?;
    (0..shnum).map(sect).find_map(|(name, off, size)| {
        let n = names.get(name as usize..)?;
        let n = &n[..n.iter().position(|&c| c == 0)?];
        (n == want.as_bytes()).then_some((off, size))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn nginx_master_arguments_survive_the_rewritten_title() {
        let title = s(&["nginx:", "master", "process", "/usr/sbin/nginx", "-c", "/tmp/x/nginx.conf", "-p", "/tmp/x"]);
        assert_eq!(nginx_args(&title), s(&["-c", "/tmp/x/nginx.conf", "-p", "/tmp/x"]));
        let g = s(&["nginx:", "master", "process", "nginx", "-g", "daemon", "off;", "-c", "a.conf"]);
        assert_eq!(nginx_args(&g), s(&["-g", "daemon off;", "-c", "a.conf"]));
    }

    #[test]
    fn jdk_property_is_read_like_the_jdk_does() {
        let a = s(&["java", "-Dsun.net.httpserver.nodelay=TRUE", "-cp", ".", "Main"]);
        assert_eq!(java_property(&a, "sun.net.httpserver.nodelay"), Some(true));
        let b = s(&["java", "-Dsun.net.httpserver.nodelay=true", "-Dsun.net.httpserver.nodelay=yes", "M"]);
        assert_eq!(java_property(&b, "sun.net.httpserver.nodelay"), Some(false));
        assert_eq!(java_property(&s(&["java", "M"]), "sun.net.httpserver.nodelay"), None);
    }

    /// A little-endian 64-bit ELF with sections: null, .shstrtab, `name` holding `data`.
    fn elf(name: &str, data: &[u8]) -> Vec<u8> {
        let mut strtab = b"\0.shstrtab\0".to_vec();
        let name_off = strtab.len() as u32;
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
        let str_at = 64u64;
        let data_at = str_at + strtab.len() as u64;
        let sh_at = data_at + data.len() as u64;
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[0x28..0x30].copy_from_slice(&sh_at.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&strtab);
        f.extend_from_slice(data);
        let mut sh = |name: u32, off: u64, size: u64| {
            let mut e = [0u8; 64];
            e[..4].copy_from_slice(&name.to_le_bytes());
            e[24..32].copy_from_slice(&off.to_le_bytes());
            e[32..40].copy_from_slice(&size.to_le_bytes());
            f.extend_from_slice(&e);
        };
        sh(0, 0, 0);
        sh(1, str_at, strtab.len() as u64);
        sh(name_off, data_at, data.len() as u64);
        f
    }

    #[test]
    fn go_programs_are_known_by_their_buildinfo_section() {
        let dir = std::env::temp_dir().join(format!("tcpdoctor-elf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut info = b"\xff Go buildinf:\x08\x02".to_vec();
        info.resize(32, 0);
        info.push(8);
        info.extend_from_slice(b"go1.22.1");
        let go = dir.join("go");
        std::fs::write(&go, elf(".go.buildinfo", &info)).unwrap();
        assert_eq!(go_version(&go).as_deref(), Some("go1.22.1"));
        let other = dir.join("other");
        std::fs::write(&other, elf(".rodata", &info)).unwrap();
        assert_eq!(go_version(&other), None);
        // A real binary that is not Go: this test itself.
        assert_eq!(go_version(&std::env::current_exe().unwrap()), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
