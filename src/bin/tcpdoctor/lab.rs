//! `tcpdoctor lab`: its arguments, the servers (and round trip) they start,
//! and the servers' listing.

use crate::common::{exit, fail, print, print_json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tcpdoctor::measure::common::{parse_positive_duration, parse_run_length};
use tcpdoctor::record::lab::LabRow;

/// The notes and exit codes under `tcpdoctor lab --help` (and in the manual page).
pub const AFTER_HELP: &str = "Servers: (a) nagle: keep-alive, header then body in two writes, Nagle on; (b) nodelay: \
the same with TCP_NODELAY; (c) think: 45 ms think time, then one write; with --nginx, Debian's nginx with \
tcp_nodelay off and on; nagle-tls and nodelay-tls: (a) and (b) over HTTPS (header and body as two TLS records), \
with a certificate made at start for localhost, 127.0.0.1 and ::1, written to a new directory (printed; give it \
to --cacert, or use -k) and removed when lab stops.

--rtt D (root) runs them in a network namespace tcpdoctor-lab-PID at 198.18.x.2, reached from this host through \
two TAP devices joined by a userspace bridge that delays every frame D/2 each way (at SCHED_FIFO priority); \
--loss PCT drops that share of IP frames each way (seeded by --seed). The namespace is deleted when lab ends \
(Ctrl-C, SIGTERM, --duration); one left by a killed run is deleted by the next lab --rtt.

Exit codes: 0 stopped by Ctrl-C or --duration; 2 bad command line; 3 a server could not start (nginx missing, \
no free port); 5 --rtt without root, or the namespace, TAPs or bridge could not be made.";

#[derive(clap::Args)]
pub struct Args {
    /// Also start Debian's nginx twice: tcp_nodelay off and on.
    #[arg(long)]
    nginx: bool,
    /// The nginx binary for --nginx (default: nginx on PATH, else /usr/sbin/nginx).
    #[arg(long, value_name = "PATH", requires = "nginx")]
    nginx_bin: Option<PathBuf>,
    /// Stop by itself after this long (default: until Ctrl-C).
    #[arg(short = 'd', long, value_parser = parse_run_length)]
    duration: Option<Duration>,
    /// Listen on PORT, PORT+1, … (nagle, nodelay, think, the two nginx, nagle-tls, nodelay-tls; default: free ports).
    #[arg(short = 'p', long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..=65528))]
    port: Option<u16>,
    /// Print the servers as JSON.
    #[arg(long)]
    json: bool,
    /// Put the servers behind a real round trip of D (half each way), in a network namespace (root).
    #[arg(long, value_name = "D", value_parser = parse_positive_duration)]
    rtt: Option<Duration>,
    /// With --rtt: drop this percentage of IP frames at random, each way.
    #[arg(long, value_name = "PCT", requires = "rtt", value_parser = parse_percent)]
    loss: Option<f64>,
    /// With --rtt: the seed of the random drops (the same seed drops the same frames).
    #[arg(long, value_name = "N", requires = "rtt", default_value_t = 1)]
    seed: u64,
}

/// A percentage from 0 to 100.
fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}`: a percentage from 0 to 100")),
    }
}

pub fn run(a: Args) -> ExitCode {
    use tcpdoctor::lab::{Mode, Server, nginx::Nginx, rtt::Path};
    tcpdoctor::interrupt::catch_all();
    // With --rtt the servers live in a namespace of their own behind the bridge.
    let path = match a.rtt.map(|rtt| Path::start(rtt, a.loss.unwrap_or(0.0) / 100.0, a.seed)).transpose() {
        Ok(p) => p.map(|(path, removed)| {
            for n in removed {
                eprintln!("tcpdoctor: removed network namespace {n}, left by a lab --rtt whose process is gone");
            }
            if let Err(e) = path.realtime() {
                eprintln!("tcpdoctor: warning: {e}");
            }
            path
        }),
        Err(e) => return fail(exit::NET, e),
    };
    let ip: std::net::IpAddr = path.as_ref().map_or([127, 0, 0, 1].into(), |p| p.server_ip().into());
    let port = |i: u16| a.port.map_or(0, |p| p + i);
    // The HTTPS twins' certificate, made now (for the bridge's address too).
    let cert = match tcpdoctor::lab::tls::Cert::generate(ip).and_then(|c| c.write_pem().map(|f| (c, f))) {
        Ok(c) => c,
        Err(e) => return fail(exit::INPUT, format!("https lab servers: {e}")),
    };
    let mut servers = Vec::new();
    // (a), (b), (c); then (a) and (b) over HTTPS, after the nginx ports.
    let modes =
        [(0, Mode::Nagle, false), (1, Mode::NoDelay, false), (2, Mode::Think(Duration::from_millis(45)), false)];
    for (i, m, tls) in modes.into_iter().chain([(5, Mode::Nagle, true), (6, Mode::NoDelay, true)]) {
        let bind = std::net::SocketAddr::new(ip, port(i));
        let start = || if tls { Server::start_tls(m, bind, &cert.0) } else { Server::start(m, bind) };
        let started = match &path {
            Some(p) => p.namespace().run(start).map_err(std::io::Error::other).and_then(|r| r),
            None => start(),
        };
        match started {
            Ok(s) => servers.push(s),
            Err(e) => {
                let name = format!("{}{}", m.name(), if tls { "-tls" } else { "" });
                return fail(exit::INPUT, format!("cannot start the {name} lab server on {bind}: {e}"));
            }
        }
    }
    let cacert = cert.1.1.display().to_string();
    let row = |s: &Server| {
        let mut r = LabRow::new(s.name(), s.url(), s.describe());
        if s.url().starts_with("https") {
            r.cacert = Some(cacert.clone());
        }
        r
    };
    let (plain, https): (Vec<&Server>, Vec<&Server>) = servers.iter().partition(|s| !s.url().starts_with("https"));
    let mut rows: Vec<LabRow> = plain.into_iter().map(row).collect();
    let mut nginxes = Vec::new();
    if a.nginx {
        for (i, on) in [(3, false), (4, true)] {
            let started = match &path {
                Some(p) => match a.port.map_or_else(|| p.free_port(), |_| Ok(port(i))) {
                    Ok(n) => Nginx::start_at(a.nginx_bin.as_deref(), on, (ip, n).into(), Some(p.namespace())),
                    Err(e) => Err(e),
                },
                None => Nginx::start(a.nginx_bin.as_deref(), on, port(i)),
            };
            match started {
                Ok(n) => {
                    let what = format!(
                        "Debian's nginx, sendfile on, tcp_nodelay {}",
                        if on { "on (the fix)" } else { "off (the stall)" }
                    );
                    let name = if on { "nginx-nodelay-on" } else { "nginx-nodelay-off" };
                    let mut r = LabRow::new(name, n.url(), what);
                    r.pid = Some(n.pid());
                    rows.push(r);
                    nginxes.push(n);
                }
                Err(e) => return fail(exit::INPUT, format!("--nginx: {e}")),
            }
        }
    }
    rows.extend(https.into_iter().map(row));
    if let Some(p) = &path {
        for r in &mut rows {
            r.namespace = Some(p.namespace().name().to_string());
        }
    }
    if a.json {
        print_json(&rows);
    } else {
        for r in &rows {
            print(&format!("{:<18} {:<25} {}\n", r.name, r.url, r.what));
        }
        if let Some(p) = &path {
            print(&format!("{}\n", p.describe()));
        }
        let until = a.duration.map_or("Ctrl-C".to_string(), |d| format!("{:.0} s or Ctrl-C", d.as_secs_f64()));
        print(&format!("https certificate (made now, for localhost, {}): {cacert}\n", cert.0.addresses()));
        print(&format!("serving until {until}; try: tcpdoctor diagnose {}\n", servers[0].url()));
        print(&format!("                      or: tcpdoctor diagnose --cacert {cacert} {}\n", servers[3].url()));
    }
    let deadline = a.duration.map(|d| std::time::Instant::now() + d);
    while !tcpdoctor::interrupt::requested() && deadline.is_none_or(|t| std::time::Instant::now() < t) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(nginxes);
    drop(servers);
    drop(path);
    ExitCode::from(exit::OK)
}
