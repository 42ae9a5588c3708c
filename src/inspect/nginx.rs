//! nginx's effective TCP settings from its `nginx -T` dump: the files are
//! parsed, `include`s expanded, and `http` → `server` (the one listening on
//! the port) → `location /` overrides applied.

use crate::record::inspect::Setting;

/// The settings that decide how nginx writes, with nginx's defaults.
const KNOBS: [(&str, &str); 4] =
    [("tcp_nodelay", "on"), ("sendfile", "off"), ("tcp_nopush", "off"), ("keepalive_timeout", "75s")];

/// The effective value of each knob, and where other blocks differ.
#[derive(Debug, Default)]
pub(crate) struct Effective {
    pub tcp_nodelay: Option<Setting>,
    pub sendfile: Option<Setting>,
    pub tcp_nopush: Option<Setting>,
    pub keepalive_timeout: Option<Setting>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone)]
struct Directive {
    name: String,
    args: Vec<String>,
    block: Option<Vec<Directive>>,
}

/// The files of a `nginx -T` dump: `# configuration file PATH:` then its text.
fn split_files(dump: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = Vec::new();
    for line in dump.lines() {
        if let Some(p) = line.strip_prefix("# configuration file ").and_then(|r| r.strip_suffix(':')) {
            files.push((p.to_string(), String::new()));
        } else if let Some((_, text)) = files.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    files
}

#[derive(Debug, PartialEq)]
enum Tok {
    Word(String),
    Open,
    Close,
    End,
}

fn tokens(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut it = text.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            c if c.is_whitespace() => {}
            '#' => {
                for c in it.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '{' => out.push(Tok::Open),
            '}' => out.push(Tok::Close),
            ';' => out.push(Tok::End),
            '"' | '\'' => {
                let mut w = String::new();
                while let Some(d) = it.next() {
                    match d {
                        '\\' => w.extend(it.next()),
                        d if d == c => break,
                        d => w.push(d),
                    }
                }
                out.push(Tok::Word(w));
            }
            c => {
                let mut w = String::from(c);
                while let Some(&d) = it.peek() {
                    if d.is_whitespace() || d == ';' || d == '{' || d == '}' {
                        // `${var}` braces belong to the word.
                        if d == '{' && w.ends_with('$') {
                            w.extend(it.by_ref().take_while(|&e| e != '}'));
                            w.push('}');
                            continue;
                        }
                        break;
                    }
                    w.push(d);
                    it.next();
                }
                out.push(Tok::Word(w));
            }
        }
    }
    out
}

/// Directives of a token stream, up to its end or an unmatched `}`.
fn parse(toks: &mut std::iter::Peekable<std::vec::IntoIter<Tok>>) -> Vec<Directive> {
    let mut out = Vec::new();
    while let Some(t) = toks.next() {
        let name = match t {
            Tok::Word(w) => w,
            Tok::Close => break,
            Tok::Open | Tok::End => continue,
        };
        let mut args = Vec::new();
        let mut block = None;
        while let Some(t) = toks.next() {
            match t {
                Tok::Word(w) => args.push(w),
                Tok::End => break,
                Tok::Open => {
                    block = Some(parse(toks));
                    break;
                }
                Tok::Close => break,
            }
        }
        out.push(Directive { name, args, block });
    }
    out
}

/// Shell-style match with `*` and `?` (what nginx's `include` globs use here).
fn glob(pat: &[u8], s: &[u8]) -> bool {
    match (pat.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&pat[1..], s) || (!s.is_empty() && glob(pat, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&pat[1..], &s[1..]),
        (Some(p), Some(c)) if p == c => glob(&pat[1..], &s[1..]),
        _ => false,
    }
}

/// Replaces `include` directives by the parsed files they name.
fn expand(ds: Vec<Directive>, files: &[(String, String)], dir: &str, depth: u32) -> Vec<Directive> {
    let mut out = Vec::new();
    for mut d in ds {
        if d.name == "include" && d.block.is_none() && depth < 16 {
            let pat = d.args.first().cloned().unwrap_or_default();
            let pat = if pat.starts_with('/') { pat } else { format!("{dir}/{pat}") };
            for (_, text) in files.iter().filter(|(p, _)| glob(pat.as_bytes(), p.as_bytes())) {
                let inner = parse(&mut tokens(text).into_iter().peekable());
                out.extend(expand(inner, files, dir, depth + 1));
            }
            continue;
        }
        d.block = d.block.map(|b| expand(b, files, dir, depth));
        out.push(d);
    }
    out
}

/// The port of a `listen` argument (`8080`, `127.0.0.1:8080`, `[::]:8080`, `*:80`; a bare host means 80).
fn listen_port(arg: &str) -> Option<u16> {
    if arg.starts_with("unix:") {
        return None;
    }
    let tail = match arg.strip_prefix('[') {
        Some(r) => r.split_once(']')?.1,
        None => arg,
    };
    match tail.rsplit_once(':') {
        Some((_, p)) => p.parse().ok(),
        None => tail.parse().ok().or(Some(80)),
    }
}

fn block<'a>(ds: &'a [Directive], name: &str) -> impl Iterator<Item = &'a Directive> {
    ds.iter().filter(move |d| d.name == name && d.block.is_some())
}

/// The last value of `knob` set directly in `ds`.
fn value(ds: &[Directive], knob: &str) -> Option<String> {
    ds.iter().rev().find(|d| d.name == knob && d.block.is_none()).map(|d| d.args.join(" "))
}

/// Effective settings for the server on `port` (or at `http` level without one).
pub(crate) fn effective(dump: &str, port: Option<u16>) -> Effective {
    let files = split_files(dump);
    let mut eff = Effective::default();
    let Some((main, text)) = files.first() else { return eff };
    let dir = main.rsplit_once('/').map_or(".", |(d, _)| d);
    let top = expand(parse(&mut tokens(text).into_iter().peekable()), &files, dir, 0);
    let http: Vec<Directive> = block(&top, "http").flat_map(|d| d.block.clone().unwrap_or_default()).collect();
    let server = port.and_then(|port| {
        block(&http, "server").find(|s| {
            let body = s.block.as_deref().unwrap_or_default();
            body.iter().any(|d| d.name == "listen" && d.args.first().and_then(|a| listen_port(a)) == Some(port))
        })
    });
    let server_body = server.and_then(|s| s.block.as_deref()).unwrap_or_default();
    let root_loc =
        block(server_body, "location").find(|l| l.args == ["/"]).and_then(|l| l.block.as_deref()).unwrap_or_default();
    let mut picked = Vec::new();
    for (knob, default) in KNOBS {
        let set = value(root_loc, knob).or_else(|| value(server_body, knob)).or_else(|| value(&http, knob));
        let s = match set {
            Some(v) => Setting { name: knob.into(), value: v, source: "config" },
            None => Setting { name: knob.into(), value: default.into(), source: "default" },
        };
        picked.push(s);
    }
    // Other servers and locations that say something else.
    let mut differ = Vec::new();
    for s in block(&http, "server") {
        let body = s.block.as_deref().unwrap_or_default();
        let ports: Vec<String> = body
            .iter()
            .filter(|d| d.name == "listen")
            .filter_map(|d| d.args.first().and_then(|a| listen_port(a)).map(|p| format!(":{p}")))
            .collect();
        let here = format!("server {}", if ports.is_empty() { "(no listen)".into() } else { ports.join(" ") });
        let chosen = server.is_some_and(|c| std::ptr::eq(c, s));
        let mut places: Vec<(String, &[Directive])> = Vec::new();
        if !chosen {
            places.push((here.clone(), body));
        }
        for l in block(body, "location") {
            if !(chosen && l.args == ["/"]) {
                places.push((format!("{here} location {}", l.args.join(" ")), l.block.as_deref().unwrap_or_default()));
            }
        }
        for (place, ds) in places {
            for p in picked.iter().take(3) {
                if let Some(v) = value(ds, &p.name)
                    && v != p.value
                {
                    differ.push(format!("{} {v} in {place}", p.name));
                }
            }
        }
    }
    if port.is_some() && server.is_none() && !http.is_empty() {
        eff.notes.push("no server block listens on that port explicitly; showing the http-level settings".into());
    }
    if !differ.is_empty() {
        let more = differ.len().saturating_sub(5);
        differ.truncate(5);
        let tail = if more > 0 { format!(" (+{more} more)") } else { String::new() };
        eff.notes.push(format!("elsewhere in the config: {}{tail}", differ.join("; ")));
    }
    let mut it = picked.into_iter();
    eff.tcp_nodelay = it.next();
    eff.sendfile = it.next();
    eff.tcp_nopush = it.next();
    eff.keepalive_timeout = it.next();
    eff
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "# configuration file /etc/nginx/nginx.conf:
user www-data;
events { worker_connections 768; }
http {
    sendfile on;   # comment with tcp_nodelay off;
    include /etc/nginx/conf.d/*.conf;
    log_format main '$remote_addr \"${request}\" {x}';
    server {
        listen 127.0.0.1:8080;
        location / { root /srv; }
        location /api { tcp_nodelay off; }
    }
}

# configuration file /etc/nginx/conf.d/tuning.conf:
tcp_nopush on;
server {
    listen [::]:9090 default_server;
    tcp_nodelay off;
    keepalive_timeout 5s 5s;
}
";

    fn get(s: &Option<Setting>) -> (&str, &'static str) {
        let s = s.as_ref().unwrap();
        (s.value.as_str(), s.source)
    }

    #[test]
    fn http_level_defaults_and_includes() {
        let e = effective(DUMP, Some(8080));
        assert_eq!(get(&e.tcp_nodelay), ("on", "default"));
        assert_eq!(get(&e.sendfile), ("on", "config"));
        assert_eq!(get(&e.tcp_nopush), ("on", "config"), "from the included file");
        assert_eq!(get(&e.keepalive_timeout), ("75s", "default"));
        let notes = e.notes.join("\n");
        assert!(notes.contains("tcp_nodelay off in server :9090"), "{notes}");
        assert!(notes.contains("tcp_nodelay off in server :8080 location /api"), "{notes}");
    }

    #[test]
    fn the_server_on_the_port_overrides_http() {
        let e = effective(DUMP, Some(9090));
        assert_eq!(get(&e.tcp_nodelay), ("off", "config"));
        assert_eq!(get(&e.keepalive_timeout), ("5s 5s", "config"));
        let e = effective(DUMP, Some(1234));
        assert_eq!(get(&e.tcp_nodelay), ("on", "default"));
        assert!(e.notes[0].contains("no server block listens on that port"));
        assert!(effective("", None).tcp_nodelay.is_none());
    }

    #[test]
    fn listen_and_glob_forms() {
        for (a, p) in [("8080", Some(8080)), ("127.0.0.1:81", Some(81)), ("[::]:82", Some(82)), ("*:83", Some(83))] {
            assert_eq!(listen_port(a), p, "{a}");
        }
        assert_eq!(listen_port("localhost"), Some(80));
        assert_eq!(listen_port("unix:/run/x.sock"), None);
        assert!(glob(b"/etc/nginx/conf.d/*.conf", b"/etc/nginx/conf.d/a.conf"));
        assert!(!glob(b"/etc/nginx/conf.d/*.conf", b"/etc/nginx/conf.d/a.conf.bak"));
        assert!(glob(b"mime.type?", b"mime.types"));
    }
}
