//! Two network namespaces joined by the delay bridge, for scripts that make
//! captures across a real round trip (tests/data/rtt/make.sh). As root:
//!
//! ```sh
//! cargo run --release --example rtt_pair -- --name rttfix --one-way 5ms [--loss 3 --seed 1] [--drop-log FILE]
//! ```
//!
//! prints `ready CLIENT_NS CLIENT_ADDR SERVER_NS SERVER_ADDR INTERFACE` once
//! both ends answer, forwards until SIGINT/SIGTERM or `-d`, then prints each
//! direction's counters as JSON, writes the dropped frames to `--drop-log`
//! (one line each: time, direction, the TCP segment) and deletes both
//! namespaces.

use clap::Parser;
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};
use tcpdoctor::capture::LinkType;
use tcpdoctor::lab::bridge::{Dropped, Shape};
use tcpdoctor::lab::link::{Link, NS_INTERFACE};
use tcpdoctor::measure::common::{parse_duration, parse_run_length};

#[derive(Parser)]
struct Args {
    /// Namespace prefix: NAME-c (client, 198.18.0.1) and NAME-s (server, 198.18.0.2).
    #[arg(long)]
    name: String,
    /// Delay each way.
    #[arg(long, value_parser = parse_duration)]
    one_way: Duration,
    /// Percent of IP frames dropped, each direction.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Seed of the drops.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Forward at normal priority instead of SCHED_FIFO.
    #[arg(long)]
    no_rt: bool,
    /// Write the dropped frames here when done.
    #[arg(long)]
    drop_log: Option<std::path::PathBuf>,
    /// Stop by itself after this long.
    #[arg(short = 'd', long, value_parser = parse_run_length, default_value = "30m")]
    duration: Duration,
}

fn main() -> std::process::ExitCode {
    let a = Args::parse();
    if !(0.0..=100.0).contains(&a.loss) {
        eprintln!("rtt_pair: --loss {}: a percentage from 0 to 100", a.loss);
        return std::process::ExitCode::from(2);
    }
    tcpdoctor::interrupt::catch_all();
    let shape = Shape { one_way: a.one_way, loss: a.loss / 100.0, seed: a.seed, realtime: !a.no_rt };
    let deadline = Instant::now() + a.duration;
    let net = Ipv4Addr::new(198, 18, 0, 0);
    let mut link = match Link::pair(&a.name, net, shape, Some(deadline)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rtt_pair: {e}");
            return std::process::ExitCode::from(5);
        }
    };
    if let Err(e) = link.realtime() {
        eprintln!("rtt_pair: warning: {e}");
    }
    let (c, s) = (link.end(0).clone(), link.end(1).clone());
    println!(
        "ready {} {} {} {} {NS_INTERFACE}",
        c.namespace.as_deref().unwrap_or(""),
        c.addr,
        s.namespace.as_deref().unwrap_or(""),
        s.addr
    );
    let _ = std::io::stdout().flush();
    while !tcpdoctor::interrupt::requested() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    link.stop();
    let [up, down] = link.stats();
    println!("{}", serde_json::json!({"client_to_server": up, "server_to_client": down}));
    if let Some(path) = &a.drop_log {
        let text: String = link.dropped().iter().map(describe).collect();
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("rtt_pair: {}: {e}", path.display());
            return std::process::ExitCode::from(6);
        }
    }
    std::process::ExitCode::SUCCESS
}

/// `UNIX_TIME DIRECTION SRC > DST FLAGS seq S ack A len N` (or the ethertype for what is not TCP).
fn describe(d: &Dropped) -> String {
    let t = d.unix_ns as f64 / 1e9;
    let dir = if d.direction == 0 { "client->server" } else { "server->client" };
    match tcpdoctor::wire::decode(0, d.unix_ns, LinkType::ETHERNET, &d.head, d.len as u32) {
        Ok(Some(s)) => format!(
            "{t:.6} {dir} {}:{} > {}:{} flags [{}] seq {} ack {} len {}\n",
            s.src.ip,
            s.src.port,
            s.dst.ip,
            s.dst.port,
            flags(s.flags.0),
            s.seq,
            s.ack,
            s.len
        ),
        _ => format!("{t:.6} {dir} not TCP ({} bytes kept)\n", d.head.len()),
    }
}

/// Flags as tcpdump writes them (`S`, `F`, `R`, `P`, `.` for ACK).
fn flags(f: u8) -> String {
    [(0x02, 'S'), (0x01, 'F'), (0x04, 'R'), (0x08, 'P'), (0x10, '.')]
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, c)| *c)
        .collect()
}
