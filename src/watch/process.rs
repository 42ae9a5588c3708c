//! The metrics every exporter has: `tcpdoctor_build_info` and the standard
//! `process_*` set, read from /proc/self at each scrape. They live in their own
//! registry because the main one prefixes every name with `tcpdoctor_`.

use procfs::process::{LimitValue, Process};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;
use std::sync::LazyLock;

/// The build's labels: the crate version, the compiler and the target triple.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    rustc: &'static str,
    target: &'static str,
}

const BUILD: BuildLabels = BuildLabels {
    version: env!("CARGO_PKG_VERSION"),
    rustc: env!("TCPDOCTOR_RUSTC"),
    target: env!("TCPDOCTOR_TARGET"),
};

/// The registry of these metrics (names unprefixed).
pub static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let mut r = Registry::default();
    r.register_collector(Box::new(ProcessCollector));
    r
});

#[derive(Debug)]
struct ProcessCollector;

/// The boot, in seconds since the Unix epoch: from the clocks, not /proc/stat,
/// which the systemd unit hides (`ProcSubset=pid`).
fn boot_epoch() -> f64 {
    let secs = |clock| {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes the one timespec given.
        unsafe { libc::clock_gettime(clock, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
    };
    secs(libc::CLOCK_REALTIME) - secs(libc::CLOCK_BOOTTIME)
}

fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, unit: Option<&Unit>, v: f64) -> fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(e.encode_descriptor(name, help, unit, g.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let info = ConstGauge::new(1);
        let mut m = e.encode_descriptor(
            "tcpdoctor_build_info",
            "1, labelled with the version, the compiler and the target it was built for",
            None,
            info.metric_type(),
        )?;
        info.encode(m.encode_family(&BUILD)?)?;
        // A /proc that cannot be read (hidden by a sandbox) leaves these out rather than failing the scrape.
        let Ok(me) = Process::myself() else { return Ok(()) };
        if let Ok(stat) = me.stat() {
            let tick = procfs::ticks_per_second() as f64;
            let cpu = ConstCounter::new((stat.utime + stat.stime) as f64 / tick);
            let m = e.encode_descriptor(
                "process_cpu",
                "User and system CPU time spent",
                Some(&Unit::Seconds),
                cpu.metric_type(),
            )?;
            cpu.encode(m)?;
            let page = procfs::page_size() as f64;
            gauge(
                &mut e,
                "process_resident_memory",
                "Resident memory size",
                Some(&Unit::Bytes),
                stat.rss as f64 * page,
            )?;
            gauge(&mut e, "process_virtual_memory", "Virtual memory size", Some(&Unit::Bytes), stat.vsize as f64)?;
            gauge(&mut e, "process_threads", "Number of OS threads", None, stat.num_threads as f64)?;
            let start = boot_epoch() + stat.starttime as f64 / tick;
            gauge(&mut e, "process_start_time", "Start time since the Unix epoch", Some(&Unit::Seconds), start)?;
        }
        if let Ok(n) = me.fd_count() {
            gauge(&mut e, "process_open_fds", "Number of open file descriptors", None, n as f64)?;
        }
        if let Ok(l) = me.limits() {
            let max = match l.max_open_files.soft_limit {
                LimitValue::Value(v) => v as f64,
                LimitValue::Unlimited => f64::INFINITY,
            };
            gauge(&mut e, "process_max_fds", "Maximum number of open file descriptors", None, max)?;
        }
        Ok(())
    }
}
