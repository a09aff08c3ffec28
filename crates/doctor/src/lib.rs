//! `podnet doctor`: why a host or NIC underperforms for RDMA.
//!
//! One pass over a host — the live one or a tree recorded from another (`--record`,
//! `--root`) — that reads CPU and memory settings, each RDMA device's (and GPU's) PCIe link
//! and AER counters, the netdevs under the RDMA devices (MTU, RoCE v2 GIDs, IRQ placement,
//! the settings a host with several NICs needs), and the kernel log, and says what it found:
//! severity, component, what was seen, why it matters for RDMA, the command that fixes it,
//! and the evidence (the file and its value, or the log line).
//!
//! Everything is read through [`Source`], so what the live host gives and what a recording
//! gives are diagnosed by the same code; recording is reading with a copy kept.

#![forbid(unsafe_code)]

pub mod checks;
pub mod kmsg;
pub mod phy;
pub mod source;
pub mod tune;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use kmsg::{LogEvent, LogReport};
pub use source::Source;

/// Every kind of finding doctor makes (what a qualify plan's `host.doctor` may name).
pub const KINDS: &[&str] = &[
    "cpu-governor",
    "numa-balancing",
    "thp",
    "hugepages",
    "smt",
    "cpu-boost-off",
    "c-states",
    "kernel-cmdline",
    "pcie-link",
    "pcie-aer",
    "pcie-mrrs",
    "acs-redirect",
    "irq-affinity",
    "roce-mtu",
    "roce-v2-gid",
    "rp-filter",
    "arp-ignore",
    "arp-announce",
    "ecn-off",
    "fec-off",
    "fec-uncorrectable",
    "module-rx-power",
    "module-power-low",
    "phy-symbol-errors",
    "phy-crc-errors",
    "phy-link-down",
    "devlink-health",
    "pfc-off",
    "dscp-trust",
    "ring-size",
    "module-temperature",
    "source-routing",
    "iommu-translated",
    "irqbalance",
    "version-mismatch",
    "log:pcie-link-limited",
    "log:aer-uncorrected",
    "log:aer-corrected",
    "log:nic-firmware-health",
    "log:nic-firmware-reset",
    "log:nic-command-failed",
    "log:module-error",
    "log:module-event",
    "log:tx-timeout",
    "log:error-cqe",
    "log:qp-async-error",
    "log:link-down",
    "log:unrecognised",
];

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; not a fault.
    Info,
    /// Costs performance or precedes faults.
    Warning,
    /// Broken, or caps the host below what its hardware can do (doctor exits 1).
    Error,
}

impl Severity {
    /// `error`, `warning`, `info`.
    pub fn word(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One thing doctor found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// What kind (`cpu-governor`, `pcie-link`, `rp-filter`, `log:aer-corrected`, …).
    pub kind: String,
    /// Where: `cpu`, a device (`mlx5_0 (0000:3b:00.0)`), a netdev, `kernel`.
    pub component: String,
    /// What was seen.
    pub seen: String,
    /// Why it matters for RDMA.
    pub why: String,
    /// The command (or action) that fixes it.
    pub fix: String,
    /// The files and values, or log lines, it rests on.
    pub evidence: Vec<String>,
}

/// What one run found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The host's name (`proc/sys/kernel/hostname`), where readable.
    pub host: Option<String>,
    /// The RDMA devices looked at.
    pub devices: Vec<String>,
    /// Findings, errors first.
    pub findings: Vec<Finding>,
    /// The kernel log, read: `None` where it could not be (not root; not recorded).
    pub log: Option<LogReport>,
    /// What should match across a pod's hosts: `kernel` (its release), `<device> firmware`,
    /// `<device> board`, `<driver> driver` (where the module says).
    pub versions: std::collections::BTreeMap<String, String>,
}

impl Report {
    /// How many findings of error severity.
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    /// How many findings of severity `s`.
    pub fn count(&self, s: Severity) -> usize {
        self.findings.iter().filter(|f| f.severity == s).count()
    }

    /// The report made to fit `limit` bytes of JSON (to cross a pod's bootstrap link): the
    /// log's events are already findings and go first, then evidence past each finding's
    /// first line, then the last findings (notes before warnings before errors; one more
    /// finding says how many were left out). Every error and warning survives unless they
    /// alone are too big.
    pub fn fit(&self, limit: usize) -> Report {
        let size = |r: &Report| serde_json::to_vec(r).map_or(usize::MAX, |v| v.len());
        let mut r = self.clone();
        if size(&r) <= limit {
            return r;
        }
        if let Some(l) = &mut r.log {
            l.events.clear();
            l.unrecognised.clear();
        }
        for f in &mut r.findings {
            f.evidence.truncate(1);
        }
        let full = std::mem::take(&mut r.findings);
        let mut keep = full.len();
        loop {
            // Findings are sorted errors first: the last kept is the least severe.
            r.findings = full[..keep].to_vec();
            if keep < full.len() {
                r.findings.push(Finding {
                    severity: Severity::Info,
                    kind: "report-truncated".into(),
                    component: r.host.clone().unwrap_or_else(|| "this host".into()),
                    seen: format!(
                        "{} of {} findings left out to fit {limit} bytes",
                        full.len() - keep,
                        full.len()
                    ),
                    why: "a pod's hosts send their reports to rank 0 over the bootstrap link"
                        .into(),
                    fix: "run podnet doctor on this host to see all of them".into(),
                    evidence: Vec::new(),
                });
            }
            if keep == 0 || size(&r) <= limit {
                return r;
            }
            keep -= 1;
        }
    }
}

/// Why doctor could not run.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// `--root` names a folder without `sys/` or `proc/`.
    #[error("{0}: not a recorded host (no sys/ or proc/ in it)")]
    NotATree(PathBuf),
    /// `--record` names a folder that holds something already.
    #[error("{0}: the recording folder is not empty")]
    RecordNotEmpty(PathBuf),
    /// The recording folder could not be made.
    #[error("{0}: cannot record there: {1}")]
    Record(PathBuf, std::io::Error),
}

/// Diagnoses the host `src` reads.
pub fn diagnose(src: &Source) -> Report {
    let mut findings = Vec::new();
    let devices = checks::rdma_devices(src);
    checks::cpu(src, &mut findings);
    checks::hugepages(src, &devices, &mut findings);
    checks::pcie(src, &devices, &mut findings);
    checks::acs(src, &devices, &mut findings);
    checks::netdevs(src, &devices, &mut findings);
    checks::nic(src, &devices, &mut findings);
    checks::adapters(src, &devices, &mut findings);
    let log = src.kernel_log().map(|l| kmsg::recognise(&l));
    if let Some(l) = &log {
        findings.extend(l.events.iter().map(|e| Finding {
            severity: e.severity,
            kind: format!("log:{}", e.kind),
            component: e.device.clone(),
            seen: match (e.count, e.first_s, e.last_s) {
                (1, Some(t), _) => format!("1 kernel log line at {t:.0} s after boot"),
                (n, Some(a), Some(b)) => {
                    format!("{n} kernel log lines, {a:.0} s to {b:.0} s after boot")
                }
                (n, _, _) => format!("{n} kernel log lines"),
            },
            why: e.why.clone(),
            fix: e.fix.clone(),
            evidence: vec![e.example.clone()],
        }));
        findings.extend(l.unrecognised.iter().map(|u| Finding {
            severity: Severity::Info,
            kind: "log:unrecognised".into(),
            component: u.source.clone(),
            seen: format!(
                "{} kernel log lines from {} that doctor does not recognise",
                u.count, u.source
            ),
            why: "shown, not dropped: read them for what doctor does not know yet".into(),
            fix: "—".into(),
            evidence: u.examples.clone(),
        }));
    }
    findings.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| (&a.kind, &a.component).cmp(&(&b.kind, &b.component)))
    });
    Report {
        host: src.read("proc/sys/kernel/hostname"),
        devices: devices.iter().map(|d| d.name.clone()).collect(),
        findings,
        log,
        versions: checks::versions(src, &devices),
    }
}

/// Findings across hosts: each version (kernel, NIC firmware, board, driver) that a host
/// does not share with most of the others. `reports` are (host, its report).
pub fn compare(reports: &[(String, Report)]) -> Vec<Finding> {
    let mut keys: Vec<&String> = reports.iter().flat_map(|(_, r)| r.versions.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for key in keys {
        let vals: Vec<(&String, &String)> =
            reports.iter().filter_map(|(h, r)| Some((h, r.versions.get(key)?))).collect();
        let mut counts: std::collections::BTreeMap<&String, usize> = Default::default();
        for (_, v) in &vals {
            *counts.entry(*v).or_default() += 1;
        }
        if counts.len() < 2 {
            continue;
        }
        let (most, n) = counts
            .iter()
            .max_by_key(|(v, n)| (**n, std::cmp::Reverse(**v)))
            .map(|(v, n)| (*v, *n))
            .unwrap_or((vals[0].1, 0));
        // With no majority (a tie), every host that differs from the most common is named.
        for (h, v) in vals.iter().filter(|(_, v)| *v != most) {
            out.push(Finding {
                severity: Severity::Warning,
                kind: "version-mismatch".into(),
                component: (*h).clone(),
                seen: format!("{key} {v}, where {n} of {} hosts run {most}", vals.len()),
                why: "hosts of one pod should run the same kernel, driver and NIC firmware: a difference changes RDMA behaviour (congestion control, bugs fixed or not) on some paths only".into(),
                fix: if key.ends_with("firmware") {
                    format!("flash {h}'s {key} to {most} (mlxfwmanager or the vendor's firmware tool)")
                } else {
                    format!("install the {key} {most} on {h}, as on the others")
                },
                evidence: vec![format!("{h}: {key} = {v}")],
            });
        }
    }
    out
}
