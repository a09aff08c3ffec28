//! The Prometheus exposition (OpenMetrics text, `prometheus-client`) of one scrape.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::health::{PortHealth, State};
use crate::names::{self, Folder, NORMALIZED};
use crate::sample::Snapshot;

/// One scrape and its verdicts, as the exposition encodes them.
#[derive(Debug, Default)]
pub struct Scrape {
    /// What was read.
    pub snap: Snapshot,
    /// Each port's health.
    pub health: Vec<PortHealth>,
    /// The benchmark results published to the agent's folder ([`crate::bench`]).
    pub bench: Vec<crate::bench::Record>,
}

/// What else the agent exports beside the scrape (its probe's histograms).
pub trait Extra {
    /// Registers more metrics.
    fn register(&self, registry: &mut Registry);
}

/// The exposition format a scraper asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (`application/openmetrics-text`).
    OpenMetrics,
    /// Prometheus text 0.0.4 (`text/plain`), what `promtool check metrics` reads.
    Text,
}

impl Format {
    /// The format an `Accept` header asks for (OpenMetrics only when named).
    pub fn negotiate(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// OpenMetrics text as Prometheus text 0.0.4: a counter's HELP and TYPE name its `_total`
/// samples, and the UNIT and EOF lines go.
pub fn to_text_format(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = help.take() {
                out.push_str(h);
                out.push('\n');
            }
            help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if ty == "counter" { format!("{name}_total") } else { name.to_string() };
            if let Some(h) = help.take() {
                let text = h.splitn(4, ' ').nth(3).unwrap_or("");
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {ty}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Renders one scrape, its health verdicts and the rates behind them (OpenMetrics text).
pub fn render(scrape: Arc<Scrape>, extra: Option<&dyn Extra>) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(ScrapeCollector(scrape)));
    if let Some(x) = extra {
        x.register(&mut reg);
    }
    let mut out = String::with_capacity(256 * 1024);
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// Encodes a scrape as constant metrics, straight from the snapshot: no registry of
/// families to fill and hash on every scrape.
#[derive(Debug)]
struct ScrapeCollector(Arc<Scrape>);

fn counter(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: u64) -> fmt::Result {
    ConstCounter::new(v).encode(m.encode_family(&labels)?)
}

fn counter_f(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: f64) -> fmt::Result {
    ConstCounter::new(v).encode(m.encode_family(&labels)?)
}

fn gauge(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: i64) -> fmt::Result {
    ConstGauge::new(v).encode(m.encode_family(&labels)?)
}

fn gauge_f(m: &mut MetricEncoder<'_>, labels: &[(&str, &str)], v: f64) -> fmt::Result {
    ConstGauge::new(v).encode(m.encode_family(&labels)?)
}

const PORT_STATE_HELP: &str =
    "Logical port state (ibv_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)";
const PHYS_STATE_HELP: &str = "Physical port state (1 Sleep, 2 Polling, 3 Disabled, \
    4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest)";

impl Collector for ScrapeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let Scrape { snap, health, bench } = &*self.0;
        encode_ports(&mut enc, snap)?;
        encode_netdevs(&mut enc, snap)?;
        encode_health(&mut enc, health)?;
        encode_bench(&mut enc, bench)?;
        encode_sources(&mut enc, snap)
    }
}

/// The RDMA ports: info, states, rate, MTU, GIDs, the normalized counters and every raw one.
fn encode_ports(enc: &mut DescriptorEncoder<'_>, snap: &Snapshot) -> fmt::Result {
    let ports: Vec<(String, &str)> = snap
        .ports
        .iter()
        .map(|p| (p.info.port.to_string(), p.info.netdev.as_deref().unwrap_or("")))
        .collect();
    let each = |f: &mut dyn FnMut(&crate::sample::PortSample, &str, &str) -> fmt::Result| {
        snap.ports.iter().zip(&ports).try_for_each(|(p, (port, nd))| f(p, port, nd))
    };
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_port_info",
            "An RDMA port: its netdev, driver and link layer (value 1)",
            None,
            MetricType::Gauge,
        )?;
        each(&mut |p, port, nd| {
            let l = [
                ("device", p.device.as_str()),
                ("port", port),
                ("netdev", nd),
                ("driver", p.driver.as_str()),
                ("link_layer", p.info.link_layer.name()),
            ];
            gauge(&mut m, &l, 1)
        })?;
    }
    for (name, help, pick) in [
        ("podnet_rdma_port_state_id", PORT_STATE_HELP, 0),
        ("podnet_rdma_port_physical_state_id", PHYS_STATE_HELP, 1),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
        each(&mut |p, port, _| {
            let id = if pick == 0 {
                p.info.state.map(|s| s.id())
            } else {
                p.info.phys_state.map(|s| s.id())
            };
            match id {
                Some(id) => gauge(&mut m, &[("device", &p.device), ("port", port)], id.into()),
                None => Ok(()),
            }
        })?;
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_port_rate_bytes_per_second",
            "Link rate from sysfs, bytes per second",
            None,
            MetricType::Gauge,
        )?;
        each(&mut |p, port, _| match p.info.speed_gbps {
            Some(g) => gauge_f(&mut m, &[("device", &p.device), ("port", port)], g * 1e9 / 8.0),
            None => Ok(()),
        })?;
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_port_active_mtu_bytes",
            "Active RDMA MTU",
            None,
            MetricType::Gauge,
        )?;
        each(&mut |p, port, _| match p.info.active_mtu {
            Some(v) => gauge(&mut m, &[("device", &p.device), ("port", port)], i64::from(v)),
            None => Ok(()),
        })?;
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_port_roce_v2_gids",
            "RoCE v2 GIDs in the port's table",
            None,
            MetricType::Gauge,
        )?;
        each(&mut |p, port, _| {
            gauge(&mut m, &[("device", &p.device), ("port", port)], p.info.roce_v2_gids() as i64)
        })?;
    }
    for n in NORMALIZED {
        let name = format!("podnet_rdma_{}", n.name);
        let mut m = enc.encode_descriptor(&name, n.help, None, MetricType::Counter)?;
        each(&mut |p, port, nd| match names::value(p, n) {
            Some((_, v)) => {
                counter(&mut m, &[("device", &p.device), ("port", port), ("netdev", nd)], v)
            }
            None => Ok(()),
        })?;
    }
    for (name, help, folder) in [
        (
            "podnet_rdma_port_counters",
            "Every file of the port's counters/ folder (IB PMA), unscaled, by file name",
            Folder::Counters,
        ),
        (
            "podnet_rdma_hw_counters",
            "Every file of the port's hw_counters/ folder (the driver's), unscaled, by file name",
            Folder::Hw,
        ),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        each(&mut |p, port, _| {
            let map = if folder == Folder::Counters { &p.counters } else { &p.hw_counters };
            map.iter().try_for_each(|(c, v)| {
                counter(&mut m, &[("device", &p.device), ("port", port), ("counter", c)], *v)
            })
        })?;
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_pma_saturated",
            "A PMA counter at its saturation value: it no longer counts and has no rate",
            None,
            MetricType::Gauge,
        )?;
        each(&mut |p, port, _| {
            p.counters
                .iter()
                .filter(|(c, v)| names::saturated(Folder::Counters, c, **v))
                .try_for_each(|(c, _)| {
                    gauge(&mut m, &[("device", &p.device), ("port", port), ("counter", c)], 1)
                })
        })?;
    }
    Ok(())
}

/// The netdevs: operstate, statistics and PFC per priority.
fn encode_netdevs(enc: &mut DescriptorEncoder<'_>, snap: &Snapshot) -> fmt::Result {
    // Netdevs: statistics and PFC.
    {
        let mut m = enc.encode_descriptor(
            "podnet_netdev_up",
            "The netdev's operstate is up",
            None,
            MetricType::Gauge,
        )?;
        for nd in snap.netdevs.values() {
            if let Some(up) = nd.oper_up {
                gauge(&mut m, &[("netdev", &nd.name)], i64::from(up))?;
            }
        }
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_netdev_statistic",
            "The netdev's statistics/ files (class/net/<netdev>/statistics)",
            None,
            MetricType::Counter,
        )?;
        for nd in snap.netdevs.values() {
            for (k, v) in &nd.stats {
                counter(&mut m, &[("netdev", &nd.name), ("statistic", k)], *v)?;
            }
        }
    }
    let prios: Vec<(&str, String, &crate::sample::Pfc)> = snap
        .netdevs
        .values()
        .flat_map(|nd| nd.pfc.iter().map(|(p, pfc)| (nd.name.as_str(), p.to_string(), pfc)))
        .collect();
    {
        let mut m = enc.encode_descriptor(
            "podnet_pfc_enabled",
            "PFC enabled for the priority (DCB)",
            None,
            MetricType::Gauge,
        )?;
        for (nd, prio, p) in &prios {
            if let Some(e) = p.enabled {
                gauge(&mut m, &[("netdev", nd), ("priority", prio)], i64::from(e))?;
            }
        }
    }
    for (name, help, pick) in [
        ("podnet_pfc_rx_pause_frames", "PFC pause frames received, per priority", 0),
        ("podnet_pfc_tx_pause_frames", "PFC pause frames sent, per priority", 1),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (nd, prio, p) in &prios {
            if let Some(v) = if pick == 0 { p.rx_pause } else { p.tx_pause } {
                counter(&mut m, &[("netdev", nd), ("priority", prio)], v)?;
            }
        }
    }
    for (name, help, pick) in [
        (
            "podnet_pfc_rx_pause_duration_seconds",
            "Time the peer kept this port paused, per priority",
            0,
        ),
        (
            "podnet_pfc_tx_pause_duration_seconds",
            "Time this port kept the peer paused, per priority",
            1,
        ),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (nd, prio, p) in &prios {
            let v = if pick == 0 { p.rx_pause_duration_us } else { p.tx_pause_duration_us };
            if let Some(v) = v {
                counter_f(&mut m, &[("netdev", nd), ("priority", prio)], v as f64 / 1e6)?;
            }
        }
    }
    Ok(())
}

/// Each port's health and the rates behind it.
fn encode_health(enc: &mut DescriptorEncoder<'_>, health: &[PortHealth]) -> fmt::Result {
    // Health and the rates behind it.
    let hp: Vec<(String, &str)> =
        health.iter().map(|h| (h.port.to_string(), h.netdev.as_deref().unwrap_or(""))).collect();
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_port_health",
            "Port health: 1 for the current state (ok, degraded, down), 0 for the others",
            None,
            MetricType::Gauge,
        )?;
        for (h, (port, nd)) in health.iter().zip(&hp) {
            for s in [State::Ok, State::Degraded, State::Down] {
                let l = [
                    ("device", h.device.as_str()),
                    ("port", port),
                    ("netdev", nd),
                    ("state", s.as_str()),
                ];
                gauge(&mut m, &l, i64::from(h.state == s))?;
            }
        }
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_rdma_rate_per_second",
            "Rate of a normalized counter over the health window",
            None,
            MetricType::Gauge,
        )?;
        for (h, (port, _)) in health.iter().zip(&hp) {
            for (k, v) in &h.rates {
                gauge_f(&mut m, &[("device", &h.device), ("port", port), ("counter", k)], *v)?;
            }
        }
    }
    Ok(())
}

/// The benchmarks: the latest run of each published test.
fn encode_bench(enc: &mut DescriptorEncoder<'_>, bench: &[crate::bench::Record]) -> fmt::Result {
    // Benchmarks: the latest run of each published test.
    let bl: Vec<(&crate::bench::Record, String)> =
        bench.iter().map(|r| (r, r.size.to_string())).collect();
    let labels = |r: &'_ crate::bench::Record, size: &'_ str| {
        [
            ("test", r.test.clone()),
            ("device", r.device.clone()),
            ("peer", r.peer.clone()),
            ("size_bytes", size.to_string()),
        ]
    };
    {
        let mut m = enc.encode_descriptor(
            "podnet_bench_latency_seconds",
            "One-way latency of every iteration of the latest published run of a latency \
             benchmark (podnet perf --publish)",
            None,
            MetricType::Histogram,
        )?;
        for (r, size) in &bl {
            if let Some(h) = &r.latency_seconds {
                let l = labels(r, size);
                m.encode_family(&l)?.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    h.sum,
                    h.count,
                    &h.per_bucket(),
                    None,
                )?;
            }
        }
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_bench_bandwidth_bytes_per_second",
            "Average bandwidth of the latest published run of a bandwidth benchmark",
            None,
            MetricType::Gauge,
        )?;
        for (r, size) in &bl {
            if let Some(bw) = r.bandwidth_bytes_per_second {
                ConstGauge::new(bw).encode(m.encode_family(&labels(r, size))?)?;
            }
        }
    }
    {
        let mut m = enc.encode_descriptor(
            "podnet_bench_finished_timestamp_seconds",
            "When the latest published run of a benchmark finished (Unix time)",
            None,
            MetricType::Gauge,
        )?;
        for (r, size) in &bl {
            ConstGauge::new(r.finished_unix).encode(m.encode_family(&labels(r, size))?)?;
        }
    }
    Ok(())
}

/// The sources the scrape could not read, and those served from an earlier sample.
fn encode_sources(enc: &mut DescriptorEncoder<'_>, snap: &Snapshot) -> fmt::Result {
    // Sources that failed.
    {
        let mut m = enc.encode_descriptor(
            "podnet_agent_source_error",
            "A source the last scrape could not read (1), named by kind, device, port and path",
            None,
            MetricType::Gauge,
        )?;
        for e in &snap.errors {
            let port = e.port.map(|p| p.to_string()).unwrap_or_default();
            let l =
                [("source", e.source), ("device", &e.device), ("port", &port), ("path", &e.path)];
            gauge(&mut m, &l, 1)?;
        }
    }
    // Sources served from an earlier sample.
    {
        let mut m = enc.encode_descriptor(
            "podnet_agent_source_age_seconds",
            "How old the sample served for a source that did not answer in time is \
             (present only while it is late)",
            None,
            MetricType::Gauge,
        )?;
        for st in &snap.stale {
            gauge_f(&mut m, &[("source", st.source), ("device", &st.device)], st.age_seconds)?;
        }
    }
    let m = enc.encode_descriptor(
        "podnet_agent_source_errors",
        "Sources the last scrape could not read",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(snap.errors.len() as i64).encode(m)
}
