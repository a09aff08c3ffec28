//! Per-port health: `down` from the port's state, `degraded` when a counter's rate over the
//! window passes its threshold, `ok` otherwise. Thresholds come from a TOML file:
//!
//! ```toml
//! window_seconds = 60
//! [degraded]               # events per second over the window above which a port is degraded
//! symbol_errors = 0
//! out_of_sequence = 1
//! pfc_rx_pause_duration_us = 100000
//! ```
//!
//! A key left out keeps its default ([`Thresholds::default`], listed in `docs/metrics.md`);
//! an unknown key or a bad value is an error naming the file, line and key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::rates::{NoRate, SeriesKey, Tracker};
use host::{PhysState, PortState};

use crate::sample::{PortSample, Snapshot};

/// The rates a port's health looks at, besides the normalized counters: PFC pause time per
/// priority of the port's netdev, in microseconds per second.
pub const PFC_RATES: [&str; 2] = ["pfc_rx_pause_duration_us", "pfc_tx_pause_duration_us"];

/// Health thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// The window rates are taken over, in seconds.
    pub window_seconds: f64,
    /// Rate (per second) above which each counter makes a port degraded.
    pub degraded: BTreeMap<String, f64>,
}

impl Default for Thresholds {
    fn default() -> Self {
        let d = [
            ("symbol_errors", 0.0),
            ("link_downed", 0.0),
            ("link_error_recovery", 0.0),
            ("port_rcv_errors", 0.0),
            ("port_xmit_discards", 0.0),
            ("port_rcv_discards", 0.0),
            ("out_of_buffer", 0.0),
            ("out_of_sequence", 1.0),
            ("packet_seq_errors", 1.0),
            ("implied_nak_seq_errors", 1.0),
            ("local_ack_timeouts", 0.1),
            ("retry_exceeded", 0.0),
            ("rnr_nak_retries", 100.0),
            ("cnp_sent", 10_000.0),
            ("cnp_handled", 10_000.0),
            ("ecn_marked_packets", 10_000.0),
            ("pfc_rx_pause_duration_us", 100_000.0),
            ("pfc_tx_pause_duration_us", 100_000.0),
        ];
        Thresholds {
            window_seconds: 60.0,
            degraded: d.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }
}

/// A thresholds file that cannot be used: it could not be read, or a line of it is not valid.
pub type ThresholdsError = config::FileError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    window_seconds: Option<f64>,
    #[serde(default)]
    degraded: BTreeMap<String, f64>,
}

impl Thresholds {
    /// Reads a thresholds file over the defaults.
    pub fn load(path: &Path) -> Result<Thresholds, ThresholdsError> {
        Thresholds::parse(&config::read(path)?, &path.display().to_string())
    }

    /// Parses thresholds (`path` names the source in errors).
    pub fn parse(text: &str, path: &str) -> Result<Thresholds, ThresholdsError> {
        let file = config::TomlFile::new(path, text);
        let f: File = file.parse()?;
        let mut t = Thresholds::default();
        if let Some(w) = f.window_seconds {
            if !(w.is_finite() && w > 0.0) {
                return Err(file.invalid_at(
                    "window_seconds",
                    format!("window_seconds = {w}: must be a positive number of seconds"),
                ));
            }
            t.window_seconds = w;
        }
        for (k, v) in f.degraded {
            if !t.degraded.contains_key(&k) {
                let known: Vec<&str> = t.degraded.keys().map(String::as_str).collect();
                return Err(file.invalid_at(
                    &k,
                    format!("unknown key `degraded.{k}` (known: {})", known.join(", ")),
                ));
            }
            if !(v.is_finite() && v >= 0.0) {
                return Err(file.invalid_at(&k, format!("degraded.{k} = {v}: must be a rate >= 0")));
            }
            t.degraded.insert(k, v);
        }
        Ok(t)
    }
}

/// A port's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Everything within thresholds.
    Ok,
    /// Up, but a rate passed its threshold.
    Degraded,
    /// Not usable: the port (or its netdev) is not up.
    Down,
}

impl State {
    /// `ok`, `degraded`, `down`.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Ok => "ok",
            State::Degraded => "degraded",
            State::Down => "down",
        }
    }
}

/// A port's health and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PortHealth {
    /// The device.
    pub device: String,
    /// The port.
    pub port: u8,
    /// The netdev under it.
    pub netdev: Option<String>,
    /// The verdict.
    pub state: State,
    /// Why (empty when ok).
    pub reasons: Vec<String>,
    /// The rates looked at (per second), by counter; absent without two samples.
    pub rates: BTreeMap<String, f64>,
}

/// The tracker key of a port's normalized counter.
pub fn port_key(p: &PortSample, name: &str) -> SeriesKey {
    (p.device.clone(), p.info.port, name.to_string())
}

/// The tracker key of a netdev's PFC series for one priority.
pub fn pfc_key(netdev: &str, priority: u8, name: &str) -> SeriesKey {
    (format!("netdev:{netdev}"), priority, name.to_string())
}

/// Judges every port of `snap` with the rates in `tracker`.
pub fn evaluate(snap: &Snapshot, tracker: &Tracker, th: &Thresholds) -> Vec<PortHealth> {
    snap.ports
        .iter()
        .map(|p| {
            let mut reasons = Vec::new();
            let mut rates = BTreeMap::new();
            let state_name = p.info.state.map_or("unknown", PortState::name);
            let phys = p.info.phys_state.map_or("unknown", PhysState::name);
            let mut down = false;
            if p.info.state != Some(PortState::Active) {
                down = true;
                reasons.push(format!("port state {state_name}"));
            }
            if p.info.phys_state != Some(PhysState::LinkUp) {
                down = true;
                reasons.push(format!("physical state {phys}"));
            }
            let nd = p.info.netdev.as_ref().and_then(|n| snap.netdevs.get(n));
            if let Some(nd) = nd
                && nd.oper_up == Some(false)
            {
                down = true;
                reasons.push(format!("netdev {} is down", nd.name));
            }
            let mut degraded = false;
            for n in crate::names::NORMALIZED {
                let limit = th.degraded.get(n.name);
                match tracker.rate(&port_key(p, n.name)) {
                    Ok(r) => {
                        rates.insert(n.name.to_string(), r.per_second);
                        if let Some(limit) = limit
                            && r.per_second > *limit
                        {
                            degraded = true;
                            reasons.push(format!(
                                "{} {:.3}/s > {limit}/s over {:.0} s",
                                n.name, r.per_second, r.span
                            ));
                        }
                    }
                    Err(NoRate::Saturated) if limit.is_some() => {
                        reasons.push(format!(
                            "{} saturated: rate unknown (clear the counter)",
                            n.name
                        ));
                    }
                    Err(_) => {}
                }
            }
            if let Some(nd) = nd {
                for name in PFC_RATES {
                    let Some(limit) = th.degraded.get(name) else { continue };
                    for prio in nd.pfc.keys() {
                        if let Ok(r) = tracker.rate(&pfc_key(&nd.name, *prio, name)) {
                            rates.insert(format!("{name}{{priority={prio}}}"), r.per_second);
                            if r.per_second > *limit {
                                degraded = true;
                                reasons.push(format!(
                                    "{name} priority {prio} {:.0} us/s > {limit} us/s",
                                    r.per_second
                                ));
                            }
                        }
                    }
                }
            }
            let state = if down {
                State::Down
            } else if degraded {
                State::Degraded
            } else {
                State::Ok
            };
            PortHealth {
                device: p.device.clone(),
                port: p.info.port,
                netdev: p.info.netdev.clone(),
                state,
                reasons,
                rates,
            }
        })
        .collect()
}

/// Feeds every rate-bearing series of `snap` into `tracker` at time `t`.
pub fn observe(tracker: &mut Tracker, snap: &Snapshot, t: f64) {
    for p in &snap.ports {
        for n in crate::names::NORMALIZED {
            if let Some((alias, v)) = crate::names::value(p, n) {
                let raw = v / n.scale.max(1);
                let sat = crate::names::saturated(alias.folder, alias.file, raw);
                tracker.observe(port_key(p, n.name), t, v, sat);
            }
        }
    }
    for nd in snap.netdevs.values() {
        for (prio, pfc) in &nd.pfc {
            for (name, v) in
                [(PFC_RATES[0], pfc.rx_pause_duration_us), (PFC_RATES[1], pfc.tx_pause_duration_us)]
            {
                if let Some(v) = v {
                    tracker.observe(pfc_key(&nd.name, *prio, name), t, v, false);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thresholds_file_over_the_defaults() {
        let t =
            Thresholds::parse("window_seconds = 30\n[degraded]\nout_of_sequence = 5\n", "t.toml")
                .unwrap();
        assert_eq!(t.window_seconds, 30.0);
        assert_eq!(t.degraded["out_of_sequence"], 5.0);
        assert_eq!(t.degraded["symbol_errors"], 0.0);
    }

    #[test]
    fn bad_files_name_the_file_line_and_key() {
        let e =
            Thresholds::parse("window_seconds = 30\n[degraded]\nout_of_seqence = 5\n", "t.toml")
                .unwrap_err();
        let m = e.to_string();
        assert!(m.starts_with("t.toml:3: unknown key `degraded.out_of_seqence`"), "{m}");
        let e = Thresholds::parse("window_seconds = -1\n", "t.toml").unwrap_err().to_string();
        assert!(e.starts_with("t.toml:1: window_seconds = -1"), "{e}");
        let e = Thresholds::parse("\nwindow = 3\n", "t.toml").unwrap_err().to_string();
        assert!(e.starts_with("t.toml:2:") && e.contains("window"), "{e}");
        let e = Thresholds::parse("[degraded]\nsymbol_errors = \"x\"\n", "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:2:"), "{e}");
    }
}
