//! The Prometheus exposition (OpenMetrics text, `prometheus-client`) of one scrape.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::health::{PortHealth, State};
use crate::names::{self, Folder, NORMALIZED};
use crate::sample::Snapshot;

type Labels = Vec<(String, String)>;
type Counters = Family<Labels, Counter<u64>>;
type Gauges = Family<Labels, Gauge<i64>>;
type FGauges = Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>;
type SCounters = Family<Labels, Counter<f64, std::sync::atomic::AtomicU64>>;

fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn counter(f: &Counters, labels: Labels, v: u64) {
    f.get_or_create(&labels).inc_by(v);
}

/// What else the agent exports beside the scrape (its probe's histograms, its own health).
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

/// Renders one scrape, its health verdicts and the rates behind them.
pub fn render(snap: &Snapshot, health: &[PortHealth], extra: Option<&dyn Extra>) -> String {
    let mut reg = Registry::default();
    let info = Gauges::default();
    let state = Gauges::default();
    let phys = Gauges::default();
    let rate = FGauges::default();
    let mtu = Gauges::default();
    let gids = Gauges::default();
    let raw_port = Counters::default();
    let raw_hw = Counters::default();
    let saturated = Gauges::default();
    let normalized: Vec<Counters> = NORMALIZED.iter().map(|_| Counters::default()).collect();
    for p in &snap.ports {
        let port = p.port.to_string();
        let nd = p.netdev.clone().unwrap_or_default();
        let base = l(&[("device", &p.device), ("port", &port)]);
        info.get_or_create(&l(&[
            ("device", &p.device),
            ("port", &port),
            ("netdev", &nd),
            ("driver", &p.driver),
            ("link_layer", &p.link_layer),
        ]))
        .set(1);
        if let Some(s) = &p.state {
            state.get_or_create(&base).set(i64::from(s.id));
        }
        if let Some(s) = &p.phys_state {
            phys.get_or_create(&base).set(i64::from(s.id));
        }
        if let Some(g) = p.rate_gbps {
            rate.get_or_create(&base).set(g * 1e9 / 8.0);
        }
        if let Some(m) = p.active_mtu {
            mtu.get_or_create(&base).set(i64::from(m));
        }
        gids.get_or_create(&base).set(p.roce_v2_gids as i64);
        for (folder, map, fam) in
            [(Folder::Counters, &p.counters, &raw_port), (Folder::Hw, &p.hw_counters, &raw_hw)]
        {
            for (name, v) in map {
                let mut lb = base.clone();
                lb.push(("counter".into(), name.clone()));
                counter(fam, lb.clone(), *v);
                if names::saturated(folder, name, *v) {
                    saturated.get_or_create(&lb).set(1);
                }
            }
        }
        for (n, fam) in NORMALIZED.iter().zip(&normalized) {
            if let Some((_, v)) = names::value(p, n) {
                counter(fam, l(&[("device", &p.device), ("port", &port), ("netdev", &nd)]), v);
            }
        }
    }
    reg.register(
        "podnet_rdma_port_info",
        "An RDMA port: its netdev, driver and link layer (value 1)",
        info,
    );
    reg.register(
        "podnet_rdma_port_state_id",
        "Logical port state (ibv_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER)",
        state,
    );
    reg.register(
        "podnet_rdma_port_physical_state_id",
        "Physical port state (1 Sleep, 2 Polling, 3 Disabled, 4 PortConfigurationTraining, 5 LinkUp, 6 LinkErrorRecovery, 7 PhyTest)",
        phys,
    );
    reg.register(
        "podnet_rdma_port_rate_bytes_per_second",
        "Link rate from sysfs, bytes per second",
        rate,
    );
    reg.register("podnet_rdma_port_active_mtu_bytes", "Active RDMA MTU", mtu);
    reg.register("podnet_rdma_port_roce_v2_gids", "RoCE v2 GIDs in the port's table", gids);
    for (n, fam) in NORMALIZED.iter().zip(normalized) {
        reg.register(format!("podnet_rdma_{}", n.name), n.help, fam);
    }
    reg.register(
        "podnet_rdma_port_counters",
        "Every file of the port's counters/ folder (IB PMA), unscaled, by file name",
        raw_port,
    );
    reg.register(
        "podnet_rdma_hw_counters",
        "Every file of the port's hw_counters/ folder (the driver's), unscaled, by file name",
        raw_hw,
    );
    reg.register(
        "podnet_rdma_pma_saturated",
        "A PMA counter at its saturation value: it no longer counts and has no rate",
        saturated,
    );

    // Netdevs: statistics and PFC.
    let nd_up = Gauges::default();
    let nd_stats = Counters::default();
    let pfc_en = Gauges::default();
    let (rx_p, tx_p) = (Counters::default(), Counters::default());
    let (rx_d, tx_d) = (SCounters::default(), SCounters::default());
    for nd in snap.netdevs.values() {
        if let Some(up) = nd.oper_up {
            nd_up.get_or_create(&l(&[("netdev", &nd.name)])).set(i64::from(up));
        }
        for (k, v) in &nd.stats {
            counter(&nd_stats, l(&[("netdev", &nd.name), ("statistic", k)]), *v);
        }
        for (prio, p) in &nd.pfc {
            let lb = l(&[("netdev", &nd.name), ("priority", &prio.to_string())]);
            if let Some(e) = p.enabled {
                pfc_en.get_or_create(&lb).set(i64::from(e));
            }
            for (fam, v) in [(&rx_p, p.rx_pause), (&tx_p, p.tx_pause)] {
                if let Some(v) = v {
                    counter(fam, lb.clone(), v);
                }
            }
            for (fam, v) in [(&rx_d, p.rx_pause_duration_us), (&tx_d, p.tx_pause_duration_us)] {
                if let Some(v) = v {
                    fam.get_or_create(&lb).inc_by(v as f64 / 1e6);
                }
            }
        }
    }
    reg.register("podnet_netdev_up", "The netdev's operstate is up", nd_up);
    reg.register(
        "podnet_netdev_statistic",
        "The netdev's statistics/ files (class/net/<netdev>/statistics)",
        nd_stats,
    );
    reg.register("podnet_pfc_enabled", "PFC enabled for the priority (DCB)", pfc_en);
    reg.register("podnet_pfc_rx_pause_frames", "PFC pause frames received, per priority", rx_p);
    reg.register("podnet_pfc_tx_pause_frames", "PFC pause frames sent, per priority", tx_p);
    reg.register(
        "podnet_pfc_rx_pause_duration_seconds",
        "Time the peer kept this port paused, per priority",
        rx_d,
    );
    reg.register(
        "podnet_pfc_tx_pause_duration_seconds",
        "Time this port kept the peer paused, per priority",
        tx_d,
    );

    // Health and the rates behind it.
    let hs = Gauges::default();
    let rates = FGauges::default();
    for h in health {
        let port = h.port.to_string();
        let nd = h.netdev.clone().unwrap_or_default();
        for s in [State::Ok, State::Degraded, State::Down] {
            hs.get_or_create(&l(&[
                ("device", &h.device),
                ("port", &port),
                ("netdev", &nd),
                ("state", s.as_str()),
            ]))
            .set(i64::from(h.state == s));
        }
        for (k, v) in &h.rates {
            rates
                .get_or_create(&l(&[("device", &h.device), ("port", &port), ("counter", k)]))
                .set(*v);
        }
    }
    reg.register(
        "podnet_rdma_port_health",
        "Port health: 1 for the current state (ok, degraded, down), 0 for the others",
        hs,
    );
    reg.register(
        "podnet_rdma_rate_per_second",
        "Rate of a normalized counter over the health window",
        rates,
    );

    // Sources that failed.
    let errs = Gauges::default();
    for e in &snap.errors {
        let port = e.port.map(|p| p.to_string()).unwrap_or_default();
        errs.get_or_create(&l(&[
            ("source", e.source),
            ("device", &e.device),
            ("port", &port),
            ("path", &e.path),
        ]))
        .set(1);
    }
    reg.register(
        "podnet_agent_source_error",
        "A source the last scrape could not read (1), named by kind, device, port and path",
        errs,
    );
    let n_err = Gauge::<i64>::default();
    n_err.set(snap.errors.len() as i64);
    reg.register("podnet_agent_source_errors", "Sources the last scrape could not read", n_err);
    if let Some(x) = extra {
        x.register(&mut reg);
    }
    let mut out = String::with_capacity(64 * 1024);
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}
