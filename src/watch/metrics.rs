//! Prometheus metrics (prometheus-client, OpenMetrics text format).
//!
//! Label values are bounded: `endpoint` is a server endpoint from the capped
//! table (or `other`), `kind` one of four, `role` `client` or `server`. An
//! endpoint's series are created at 0 when it takes a slot and removed when
//! the slot is recycled.

use crate::record::watch::Kind;
use crate::tcp::Side;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

/// Buckets of `tcpdoctor_stall_seconds`, s: fine around the 40 ms delayed-ACK
/// minimum and the 200 ms RTO and delayed-ACK maximum, and at the 1 s / 3 s SYN timers.
pub const STALL_BUCKETS: [f64; 16] =
    [0.001, 0.005, 0.01, 0.02, 0.03, 0.04, 0.045, 0.05, 0.075, 0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 3.5];
/// Buckets of `tcpdoctor_exchange_latency_seconds`, s: 100 µs to 10 s, with 40 and 200 ms edges.
pub const LATENCY_BUCKETS: [f64; 17] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.04, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Labels of a finding counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FindingLabels {
    /// [`Kind::name`].
    pub kind: &'static str,
    /// Server endpoint (`ip:port`, `[v6]:port`) or `other`.
    pub endpoint: String,
    /// The side at fault: `client` or `server`.
    pub role: &'static str,
}

/// The `kind` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// [`Kind::name`].
    pub kind: &'static str,
}

/// The `endpoint` label alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabel {
    /// Server endpoint or `other`.
    pub endpoint: String,
}

/// Labels of `tcpdoctor_endpoint_owner`: the process serving an endpoint.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OwnerLabels {
    /// Server endpoint.
    pub endpoint: String,
    /// Its process id.
    pub pid: String,
    /// Its name (`comm`).
    pub comm: String,
    /// Its cgroup path (empty at the root).
    pub cgroup: String,
    /// Its container id (empty when none).
    pub container: String,
}

/// Most endpoints with an owner series: one each, so at most this many series.
pub const MAX_OWNERS: usize = 1024;

type FloatCounter = Counter<f64, AtomicU64>;

/// Every metric watch exports, registered in one registry.
pub struct Metrics {
    registry: Registry,
    stalls: Family<FindingLabels, Counter>,
    lost: Family<FindingLabels, FloatCounter>,
    stall_seconds: Family<KindLabel, Histogram, fn() -> Histogram>,
    latency: Family<EndpointLabel, Histogram, fn() -> Histogram>,
    owner: Family<OwnerLabels, Gauge>,
    /// Each endpoint's current owner series.
    owners: std::sync::Mutex<std::collections::HashMap<String, OwnerLabels>>,
    /// Packets captured (loopback duplicates left out).
    pub packets: Counter,
    /// Packets the kernel dropped for want of ring space.
    pub drops: Counter,
    /// Connections held now.
    pub tracked: Gauge,
    /// Connections finished early to stay under the cap.
    pub evicted: Counter,
    /// Connections whose server endpoint was folded into `other`.
    pub folded: Counter,
    /// Endpoint slots given to a new endpoint after theirs fell silent.
    pub recycled: Counter,
}

/// One endpoint's metric handles, looked up once (a family lookup takes a lock).
pub struct SlotMetrics {
    /// `tcpdoctor_exchange_latency_seconds{endpoint}`.
    pub latency: Histogram,
    stalls: [[Counter; 2]; 4],
    lost: [[FloatCounter; 2]; 4],
    stall_seconds: [Histogram; 4],
}

impl SlotMetrics {
    /// Counts a finding of `kind` caused by `role` that cost `ns`.
    pub fn found(&self, kind: Kind, role: Side, ns: i64) {
        let s = ns.max(0) as f64 / 1e9;
        self.stalls[kind.idx()][role.idx()].inc();
        self.lost[kind.idx()][role.idx()].inc_by(s);
        self.stall_seconds[kind.idx()].observe(s);
    }
}

fn finding_labels(kind: Kind, endpoint: &str, role: Side) -> FindingLabels {
    FindingLabels { kind: kind.name(), endpoint: endpoint.to_string(), role: role.name() }
}

fn stall_histogram() -> Histogram {
    Histogram::new(STALL_BUCKETS)
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric (all zero).
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tcpdoctor");
        let m = Metrics {
            stalls: Family::default(),
            lost: Family::default(),
            stall_seconds: Family::new_with_constructor(stall_histogram as fn() -> Histogram),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            owner: Family::default(),
            owners: Default::default(),
            packets: Counter::default(),
            drops: Counter::default(),
            tracked: Gauge::default(),
            evicted: Counter::default(),
            folded: Counter::default(),
            recycled: Counter::default(),
            registry: Registry::default(),
        };
        registry.register(
            "stalls",
            "Latency findings by kind (nagle_delayed_ack, retransmission_timeout, syn_retransmission, zero_window), server endpoint, and role of the side at fault",
            m.stalls.clone(),
        );
        registry.register_with_unit(
            "stall",
            "Time each finding cost (Nagle hold, wait for the re-send, connect, closed window), by kind",
            Unit::Seconds,
            m.stall_seconds.clone(),
        );
        registry.register_with_unit(
            "exchange_latency",
            "Request start to last response byte, per server endpoint",
            Unit::Seconds,
            m.latency.clone(),
        );
        registry.register_with_unit(
            "time_lost",
            "Time the findings cost, by kind, server endpoint and role",
            Unit::Seconds,
            m.lost.clone(),
        );
        registry.register(
            "endpoint_owner",
            "1 for the process that serves a stalled server endpoint (pid, comm, cgroup, container), learned with eBPF; join on endpoint",
            m.owner.clone(),
        );
        registry.register("capture_packets", "Packets captured (loopback duplicates left out)", m.packets.clone());
        registry.register("capture_drops", "Packets the kernel dropped (capture ring full)", m.drops.clone());
        registry.register("tracked_connections", "TCP connections being tracked", m.tracked.clone());
        registry.register(
            "evicted_connections",
            "Connections dropped from tracking to stay under --max-connections",
            m.evicted.clone(),
        );
        registry.register(
            "folded_connections",
            "Connections whose server endpoint was counted as endpoint=\"other\" (more than --max-endpoints)",
            m.folded.clone(),
        );
        registry.register(
            "recycled_endpoints",
            "Endpoint slots given to a new server endpoint because theirs was silent for --endpoint-idle (its series removed)",
            m.recycled.clone(),
        );
        for k in Kind::ALL {
            m.stall_seconds.get_or_create_owned(&KindLabel { kind: k.name() });
        }
        Metrics { registry, ..m }
    }

    /// The handles of one endpoint's series, created at zero so a rate over them is defined.
    pub fn slot(&self, endpoint: &str) -> SlotMetrics {
        let labels = |k: Kind, r: Side| finding_labels(k, endpoint, r);
        let both = |f: &dyn Fn(Side) -> FindingLabels, fam: &Family<FindingLabels, Counter>| {
            [fam.get_or_create_owned(&f(Side::Client)), fam.get_or_create_owned(&f(Side::Server))]
        };
        let both_f = |f: &dyn Fn(Side) -> FindingLabels| {
            [self.lost.get_or_create_owned(&f(Side::Client)), self.lost.get_or_create_owned(&f(Side::Server))]
        };
        SlotMetrics {
            latency: self.latency.get_or_create_owned(&EndpointLabel { endpoint: endpoint.to_string() }),
            stalls: Kind::ALL.map(|k| both(&|r| labels(k, r), &self.stalls)),
            lost: Kind::ALL.map(|k| both_f(&|r| labels(k, r))),
            stall_seconds: Kind::ALL.map(|k| self.stall_seconds.get_or_create_owned(&KindLabel { kind: k.name() })),
        }
    }

    /// Removes one endpoint's series (its slot went to another endpoint).
    pub fn remove_endpoint(&self, endpoint: &str) {
        for k in Kind::ALL {
            for r in [Side::Client, Side::Server] {
                let l = finding_labels(k, endpoint, r);
                self.stalls.remove(&l);
                self.lost.remove(&l);
            }
        }
        self.latency.remove(&EndpointLabel { endpoint: endpoint.to_string() });
        if let Some(l) = self.owners.lock().unwrap_or_else(|e| e.into_inner()).remove(endpoint) {
            self.owner.remove(&l);
        }
    }

    /// `endpoint`'s owner is `o`: one series per endpoint (a new owner replaces
    /// the old), at most [`MAX_OWNERS`] endpoints.
    pub fn set_owner(&self, endpoint: &str, o: &super::Owner) {
        let l = OwnerLabels {
            endpoint: endpoint.to_string(),
            pid: o.pid.to_string(),
            comm: o.comm.clone(),
            cgroup: o.cgroup.clone().unwrap_or_default(),
            container: o.container.clone().unwrap_or_default(),
        };
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        if owners.get(endpoint) == Some(&l) || (owners.len() >= MAX_OWNERS && !owners.contains_key(endpoint)) {
            return;
        }
        if let Some(old) = owners.insert(endpoint.to_string(), l.clone()) {
            self.owner.remove(&old);
        }
        self.owner.get_or_create(&l).set(1);
    }

    /// The metrics in OpenMetrics text format, with the build and process metrics.
    pub fn encode(&self) -> String {
        use prometheus_client::encoding::text;
        let mut s = String::with_capacity(16 << 10);
        // Writing into a String cannot fail.
        let _ = text::encode_registry(&mut s, &self.registry);
        let _ = text::encode_registry(&mut s, &super::process::REGISTRY);
        let _ = text::encode_eof(&mut s);
        s
    }
}
