//! `lab --rtt`: the lab's servers in a network namespace of their own,
//! `tcpdoctor-lab-PID`, reached from this host through the delay bridge: a
//! TAP here with the first address of a /30 of 198.18.0.0/15 that no route
//! of the host covers, its twin in the namespace with the second.
//!
//! The TAPs vanish with this process's descriptors, however it ends; the
//! namespace is deleted on drop, and a later start deletes any
//! `tcpdoctor-lab-PID` whose process is gone (left by a run that was killed).

use super::bridge::Shape;
use super::link::{Link, Place, free_net};
use super::netns::{self, Netns};
use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

/// Namespaces are named PREFIX-PID.
pub const PREFIX: &str = "tcpdoctor-lab";

/// The servers' side of the path, joined to this host.
pub struct Path {
    link: Link,
    rtt: Duration,
    loss: f64,
}

impl Path {
    /// Builds the path: `rtt` round trip (half each way), `loss` (0 to 1) of
    /// IP frames dropped each way with `seed`. Returns it and the names of
    /// the leftover namespaces it removed first.
    pub fn start(rtt: Duration, loss: f64, seed: u64) -> Result<(Path, Vec<String>), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("lab --rtt needs root: it creates a network namespace, TAP devices, addresses and \
                        neighbour entries; run it as root"
                .into());
        }
        let removed = netns::remove_leftovers(PREFIX);
        let net = free_net().ok_or("lab --rtt: every /30 of 198.18.0.0/15 is covered by a route of this host")?;
        let ns = Netns::create(&format!("{PREFIX}-{}", std::process::id())).map_err(|e| format!("lab --rtt: {e}"))?;
        let shape = Shape { one_way: rtt / 2, loss, seed, realtime: true };
        let link =
            Link::new(Place::Host, Place::Namespace(ns), net, shape, None).map_err(|e| format!("lab --rtt: {e}"))?;
        Ok((Path { link, rtt, loss }, removed))
    }

    /// The servers' namespace.
    pub fn namespace(&self) -> &Netns {
        self.link.namespace(1).expect("the servers' end has a namespace")
    }

    /// The servers' address (inside the namespace).
    pub fn server_ip(&self) -> Ipv4Addr {
        self.link.end(1).addr
    }

    /// A port free on the servers' address.
    pub fn free_port(&self) -> Result<u16, String> {
        let ip = self.server_ip();
        let bound = self.namespace().run(|| TcpListener::bind((ip, 0)).and_then(|l| l.local_addr()))?;
        bound.map(|a| a.port()).map_err(|e| format!("cannot pick a free port on {ip}: {e}"))
    }

    /// Why the bridge runs without real-time priority, if it does.
    pub fn realtime(&self) -> Result<(), String> {
        self.link.realtime()
    }

    /// One line: where the servers are and how they are reached.
    pub fn describe(&self) -> String {
        let (host, srv) = (self.link.end(0), self.link.end(1));
        let ms = |d: Duration| format!("{}", d.as_secs_f64() * 1e3);
        format!(
            "the servers are at {} in network namespace {}, reached from this host through TAP {} ({}): {} ms each way (RTT {} ms), {}",
            srv.addr,
            self.namespace().name(),
            host.interface,
            host.addr,
            ms(self.rtt / 2),
            ms(self.rtt),
            if self.loss > 0.0 {
                format!("{} % of IP frames dropped each way", self.loss * 100.0)
            } else {
                "no loss".into()
            }
        )
    }
}
