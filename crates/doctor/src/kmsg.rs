//! The kernel log read for what pod engineers meet: PCIe links trained below their
//! capability, AER errors, NIC firmware health reports, failed firmware commands, port module
//! (cable) events, transmit timeouts, link flaps, error CQEs, QPs failed by the device. Each pattern is the fixed text
//! of the kernel's or the driver's own format string (the source file is named beside it);
//! repeats are grouped per kind and device with their count and first and last time, and the
//! lines of the RDMA drivers and AER that no pattern recognises are counted and shown.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Severity;

/// One kernel log line.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    /// Seconds since boot, where the line says.
    pub t: Option<f64>,
    /// The message (`mlx5_core 0000:3b:00.0: …`).
    pub text: String,
}

/// Splits a kernel log into lines: `/dev/kmsg` records (`PRIO,SEQ,USEC,FLAGS;text`, with
/// their ` KEY=value` continuation lines skipped), `dmesg` lines (`[  12.345678] text`), or
/// journal lines (`… kernel: text`); other lines are taken whole.
pub fn parse(log: &str) -> Vec<LogLine> {
    let mut out = Vec::new();
    for l in log.lines() {
        if l.starts_with(' ') && l.contains('=') && !out.is_empty() {
            continue; // a /dev/kmsg record's dictionary (SUBSYSTEM=, DEVICE=)
        }
        let l = l.trim_end();
        if l.is_empty() {
            continue;
        }
        if let Some((head, text)) = l.split_once(';')
            && let [_, _, usec, _] = head.split(',').take(4).collect::<Vec<_>>()[..]
            && let Ok(us) = usec.parse::<u64>()
        {
            out.push(LogLine { t: Some(us as f64 / 1e6), text: text.to_string() });
        } else if let Some(rest) = l.strip_prefix('[')
            && let Some((ts, text)) = rest.split_once(']')
            && let Ok(t) = ts.trim().parse::<f64>()
        {
            out.push(LogLine { t: Some(t), text: text.trim_start().to_string() });
        } else if let Some((_, text)) = l.split_once(" kernel: ") {
            // A journal line; it may carry a dmesg timestamp too.
            let p = parse(text);
            out.push(p.into_iter().next().unwrap_or(LogLine { t: None, text: text.into() }));
        } else {
            out.push(LogLine { t: None, text: l.to_string() });
        }
    }
    out
}

/// What a recognised line means.
struct Pattern {
    kind: &'static str,
    /// Fixed text of the format string that the line must contain.
    needle: &'static str,
    severity: fn(&str) -> Severity,
    why: &'static str,
    fix: &'static str,
}

const fn always(s: Severity) -> fn(&str) -> Severity {
    match s {
        Severity::Error => |_| Severity::Error,
        Severity::Warning => |_| Severity::Warning,
        Severity::Info => |_| Severity::Info,
    }
}

/// The patterns, most specific first.
const PATTERNS: &[Pattern] = &[
    // drivers/pci/pci.c, __pcie_print_link_status(): "%u.%03u Gb/s available PCIe bandwidth,
    // limited by %s x%d link at %s (capable of %u.%03u Gb/s with %s x%d link)".
    Pattern {
        kind: "pcie-link-limited",
        needle: "Gb/s available PCIe bandwidth, limited by",
        severity: always(Severity::Error),
        why: "the device's PCIe link trained below what it and its slot can do: RDMA bandwidth is capped at the link's",
        fix: "reseat the card or its riser, check the slot's wiring and BIOS bifurcation; `podnet doctor` shows current vs max link speed and width",
    },
    // drivers/pci/pcie/aer.c, aer_print_error(): "PCIe Bus Error: severity=%s, type=%s, (%s)"
    // with aer_error_severity_string[] = "Uncorrected (Non-Fatal)", "Uncorrected (Fatal)",
    // "Corrected" (older kernels: "Correctable").
    Pattern {
        kind: "aer-uncorrected",
        needle: "PCIe Bus Error: severity=Uncorrected",
        severity: always(Severity::Error),
        why: "an uncorrectable PCIe error: transactions were lost; the device may have been reset or may hang",
        fix: "check the card's seating, slot and riser; update the NIC firmware and BIOS; replace the card if it repeats",
    },
    Pattern {
        kind: "aer-corrected",
        needle: "PCIe Bus Error: severity=Correct",
        severity: always(Severity::Warning),
        why: "corrected PCIe errors are replays on the link: a rising rate costs bandwidth and latency and precedes uncorrectable ones",
        fix: "watch the rate (AER counters in sysfs); reseat or replace the card or riser if it keeps rising",
    },
    // drivers/net/ethernet/mellanox/mlx5/core/health.c, poll_health(): "device's health
    // compromised - reached miss count"; print_health_info(): "assert_var[%d] 0x%08x",
    // "synd 0x%x: %s".
    Pattern {
        kind: "nic-firmware-health",
        needle: "health compromised",
        severity: always(Severity::Error),
        why: "the NIC's firmware stopped updating its health counter: it is hung or has asserted",
        fix: "collect `devlink health show` and the firmware dump, then reset the device (`devlink dev reload`) or reboot; update the firmware",
    },
    Pattern {
        kind: "nic-firmware-health",
        needle: "assert_var[",
        severity: always(Severity::Error),
        why: "the NIC's firmware asserted (its health buffer is printed)",
        fix: "collect `devlink health show` and the firmware dump for the vendor; update the firmware",
    },
    // drivers/net/ethernet/broadcom/bnxt/bnxt.c, bnxt_async_event_process():
    // "Firmware fatal reset event received" and "Firmware non-fatal reset event received,
    // max wait time %d msec" (kernels before 6.2 word it so).
    Pattern {
        kind: "nic-firmware-reset",
        needle: "Firmware fatal reset event received",
        severity: always(Severity::Error),
        why: "the NIC's firmware hit a fatal error and resets the device: every QP on it failed",
        fix: "collect `devlink health` and the firmware's crash dump; update the firmware",
    },
    Pattern {
        kind: "nic-firmware-reset",
        needle: "Firmware non-fatal reset event received",
        severity: always(Severity::Warning),
        why: "the NIC's firmware resets the device (an update or a recovery): its QPs were torn down meanwhile",
        fix: "if nobody updated the firmware, collect `devlink health` for the vendor",
    },
    // drivers/net/ethernet/mellanox/mlx5/core/cmd.c, mlx5_cmd_out_err() / mlx5_cmd_check():
    // "%s(0x%x) op_mod(0x%x) failed, status %s(0x%x), syndrome (0x%x)".
    Pattern {
        kind: "nic-command-failed",
        needle: "failed, status ",
        severity: always(Severity::Error),
        why: "the NIC's firmware refused a command (status and syndrome name the reason): resources, configuration or firmware state",
        fix: "look the syndrome up in the firmware release notes; a resource status (e.g. bad resource state, exceeded lim) often means a limit to raise (log_max_qp, max MRs)",
    },
    // drivers/infiniband/hw/irdma/utils.c, irdma_handle_cqp_op(): "[%s Error][op_code=%d]
    // status=%d waiting=%d completion_err=%d maj=0x%x min=0x%x" — a control-QP command the
    // device failed (or that timed out: status -110).
    Pattern {
        kind: "nic-command-failed",
        needle: " Error][op_code=",
        severity: always(Severity::Error),
        why: "the device failed a command of its control QP (maj and min codes name the reason; status -110: it did not answer in time)",
        fix: "look the maj/min codes up with Intel's irdma release notes; repeated timeouts mean the device needs a reset and newer NVM/firmware",
    },
    // drivers/infiniband/hw/irdma/hw.c, irdma_process_aeq(): "abnormal ae_id = 0x%x bool
    // qp=%d qp_id = %d" — an asynchronous event that moved a QP to error.
    Pattern {
        kind: "qp-async-error",
        needle: "abnormal ae_id = ",
        severity: always(Severity::Warning),
        why: "the device moved a QP to error on an asynchronous event (ae_id: a bad or unregistered memory key, a bounds or rights violation, too many retries): one connection failed",
        fix: "look the ae_id up in irdma's defs.h (IRDMA_AE_*); access errors point at the application's memory registration, retries at the path",
    },
    // drivers/infiniband/hw/irdma/main.c, irdma_request_reset(): "Requesting a reset" — after
    // a critical error the RDMA driver has the LAN driver (ice) reset the function.
    Pattern {
        kind: "nic-firmware-reset",
        needle: "Requesting a reset",
        severity: always(Severity::Error),
        why: "the RDMA driver hit a critical error and asked for the function to be reset: every QP on it failed",
        fix: "read the lines before it for the cause; update the ice/irdma drivers and the NVM",
    },
    // drivers/net/ethernet/mellanox/mlx5/core/events.c, port_module(): "Port module
    // event[error]: module %u, %s, %s" (status, error: "High Temperature", "Bad or shorted
    // cable/module", "Power Budget Exceeded", …) and "Port module event: module %u, %s"
    // ("Cable plugged", "Cable unplugged").
    Pattern {
        kind: "module-error",
        needle: "Port module event[error]",
        severity: always(Severity::Error),
        why: "the port's cable or transceiver module reports an error: the link will be down or flap",
        fix: "replace the cable or module (high temperature: check the airflow); `ethtool -m` reads the module",
    },
    Pattern {
        kind: "module-event",
        needle: "Port module event: module",
        severity: |l| {
            if l.contains("unplugged") { Severity::Warning } else { Severity::Info }
        },
        why: "a cable or module was unplugged or plugged: the port lost its link meanwhile",
        fix: "if nobody touched the cable, reseat or replace it",
    },
    // net/sched/sch_generic.c, dev_watchdog(): "NETDEV WATCHDOG: %s (%s): transmit queue %u
    // timed out"; drivers/net/ethernet/mellanox/mlx5/core/en_main.c, mlx5e_tx_timeout_work():
    // "TX timeout on queue: %d, SQ: 0x%x, …".
    Pattern {
        kind: "tx-timeout",
        needle: "NETDEV WATCHDOG:",
        severity: always(Severity::Error),
        why: "a transmit queue stopped completing: the NIC or its driver stalled (often with PFC storms or firmware trouble)",
        fix: "check the port's PFC pause counters and the firmware health; update driver and firmware",
    },
    Pattern {
        kind: "tx-timeout",
        needle: "TX timeout on queue",
        severity: always(Severity::Error),
        why: "a transmit queue stopped completing: the NIC or its driver stalled (often with PFC storms or firmware trouble)",
        fix: "check the port's PFC pause counters and the firmware health; update driver and firmware",
    },
    // drivers/net/ethernet/mellanox/mlx5/core/en/txrx.h, mlx5e_dump_error_cqe(): "Error cqe
    // on cqn 0x%x, ci 0x%x, qn 0x%x, opcode 0x%x, syndrome 0x%x, vendor syndrome 0x%x".
    Pattern {
        kind: "error-cqe",
        needle: "Error cqe on cqn",
        severity: always(Severity::Error),
        why: "the NIC completed work with an error (syndrome and vendor syndrome say which): a queue was moved to error and recovered",
        fix: "look the syndrome up; repeated ones with a local protection or length error point at the driver, with a remote one at the peer",
    },
    // drivers/net/ethernet/mellanox/mlx5/core/en_main.c, mlx5e_update_carrier():
    // netdev_info(…, "Link down\n") / "Link up\n".
    Pattern {
        kind: "link-down",
        needle: ": Link down",
        severity: always(Severity::Warning),
        why: "the port lost its link: every QP on it stalled until it came back (RC retries, or errors past the retry count)",
        fix: "count the flaps over time; a link that flaps needs its cable, module or switch port checked",
    },
];

/// The drivers whose lines no pattern recognises are counted and shown.
const WATCHED: &[&str] = &["mlx5_core", "mlx5_ib", "bnxt_en", "bnxt_re", "irdma", "ice"];

/// A recognised kind of kernel log line on one device, its repeats grouped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEvent {
    /// What it is (`pcie-link-limited`, `aer-corrected`, `nic-firmware-health`, …).
    pub kind: String,
    /// The device it names (a PCI address, a netdev), or `kernel`.
    pub device: String,
    /// The worst severity among its lines.
    pub severity: Severity,
    /// How many lines.
    pub count: usize,
    /// Seconds since boot of the first and last (where the log says).
    pub first_s: Option<f64>,
    /// As `first_s`, of the last.
    pub last_s: Option<f64>,
    /// The first line.
    pub example: String,
    /// Why it matters.
    pub why: String,
    /// What to do.
    pub fix: String,
}

/// Lines of a watched driver (or AER) that no pattern recognised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unrecognised {
    /// The driver (`mlx5_core`) or `AER`.
    pub source: String,
    /// How many lines.
    pub count: usize,
    /// The first few.
    pub examples: Vec<String>,
}

/// What the log says: recognised events by kind and device, and the rest counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LogReport {
    /// Lines read.
    pub lines: usize,
    /// Recognised events.
    pub events: Vec<LogEvent>,
    /// Unrecognised lines of the watched drivers and of AER.
    pub unrecognised: Vec<Unrecognised>,
}

/// The device a line names: `driver BUS:DEV.FN[ netdev]: …` (dev_printk and netdev_printk's
/// prefixes), or `pci BUS:DEV.FN: …`.
fn device_of(text: &str) -> (Option<&str>, Option<String>) {
    let mut it = text.split_whitespace();
    let driver = it.next();
    let Some(addr) = it.next() else { return (driver, None) };
    let a = addr.trim_end_matches(':');
    if !looks_pci(a) {
        // ibdev_printk under an auxiliary device: "irdma ice.roce.0 irdma0: …".
        if !addr.ends_with(':')
            && addr.contains('.')
            && let Some(ib) = it.next().and_then(|d| d.strip_suffix(':'))
        {
            return (driver, Some(ib.to_string()));
        }
        return (driver, None);
    }
    // netdev_printk: "driver addr netdev: …".
    if !addr.ends_with(':')
        && let Some(nd) = it.next()
        && let Some(nd) = nd.strip_suffix(':')
    {
        return (driver, Some(nd.to_string()));
    }
    (driver, Some(a.to_string()))
}

/// `0000:3b:00.0` (the domain optional).
fn looks_pci(s: &str) -> bool {
    let hex = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_hexdigit());
    let mut p = s.rsplitn(3, ':');
    let (Some(df), Some(bus)) = (p.next(), p.next()) else { return false };
    let domain_ok = p.next().is_none_or(hex);
    let Some((dev, f)) = df.split_once('.') else { return false };
    domain_ok && hex(bus) && hex(dev) && hex(f)
}

/// Reads a kernel log.
pub fn recognise(log: &str) -> LogReport {
    let lines = parse(log);
    let mut events: BTreeMap<(String, String), LogEvent> = BTreeMap::new();
    let mut unrec: BTreeMap<String, Unrecognised> = BTreeMap::new();
    for l in &lines {
        let (driver, dev) = device_of(&l.text);
        // NETDEV WATCHDOG names the netdev and driver in its own text.
        let dev = dev.or_else(|| {
            let rest = l.text.split_once("NETDEV WATCHDOG: ")?.1;
            Some(rest.split_whitespace().next()?.to_string())
        });
        if let Some(p) = PATTERNS.iter().find(|p| l.text.contains(p.needle)) {
            let device = dev.unwrap_or_else(|| "kernel".into());
            let sev = (p.severity)(&l.text);
            let e =
                events.entry((p.kind.to_string(), device.clone())).or_insert_with(|| LogEvent {
                    kind: p.kind.into(),
                    device,
                    severity: sev,
                    count: 0,
                    first_s: l.t,
                    last_s: l.t,
                    example: l.text.clone(),
                    why: p.why.into(),
                    fix: p.fix.into(),
                });
            e.count += 1;
            e.severity = e.severity.max(sev);
            e.last_s = l.t.or(e.last_s);
            continue;
        }
        let source = if l.text.contains("AER:") {
            Some("AER")
        } else {
            driver.and_then(|d| WATCHED.iter().copied().find(|w| *w == d))
        };
        if let Some(s) = source {
            let u = unrec.entry(s.to_string()).or_insert_with(|| Unrecognised {
                source: s.into(),
                count: 0,
                examples: vec![],
            });
            u.count += 1;
            if u.examples.len() < 5 {
                u.examples.push(l.text.clone());
            }
        }
    }
    LogReport {
        lines: lines.len(),
        events: events.into_values().collect(),
        unrecognised: unrec.into_values().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_log_formats_read_alike() {
        let kmsg = "4,1201,17982092,-;mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n SUBSYSTEM=pci\n DEVICE=+pci:0000:41:00.0\n";
        let dmesg = "[   17.982092] mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n";
        let journal = "Nov 02 10:41:26 gpu07 kernel: mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count\n";
        for (log, t) in [(kmsg, Some(17.982092)), (dmesg, Some(17.982092)), (journal, None)] {
            let r = recognise(log);
            assert_eq!(r.lines, 1, "{log}");
            assert_eq!(r.events.len(), 1);
            let e = &r.events[0];
            assert_eq!(
                (e.kind.as_str(), e.device.as_str()),
                ("nic-firmware-health", "0000:41:00.0")
            );
            assert_eq!(e.severity, Severity::Error);
            assert_eq!(e.first_s, t);
        }
    }

    // Real lines: from public bug reports and kernel mailing-list threads (the PCIe and AER
    // ones), and from the drivers' format strings filled in as the kernel prints them.
    #[test]
    fn real_lines_are_recognised_grouped_and_linked_to_their_device() {
        let log = "\
[    0.276602] pci 0000:01:00.0: 63.008 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x8 link at 0000:00:01.0 (capable of 126.016 Gb/s with 8.0 GT/s PCIe x16 link)
[ 4908.274566] pcieport 0000:00:1c.0: AER: Corrected error received: 0000:00:1c.0
[ 4908.274589] pcieport 0000:00:1c.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
[ 4908.274595] pcieport 0000:00:1c.0:   device [8086:9d13] error status/mask=00000001/00002000
[ 5776.242699] pcieport 0000:00:1c.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
[   50.947829] pcieport 0000:00:1b.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Receiver ID)
[   17.982092] mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count
[   17.982217] mlx5_core 0000:41:00.0: print_health_info:458:(pid 0): assert_var[0] 0x00000001
[  120.000001] mlx5_core 0000:41:00.0: mlx5_cmd_out_err:838:(pid 2913): CREATE_MKEY(0x200) op_mod(0x0) failed, status bad resource state(0x9), syndrome (0x7ca1e3), err(-22)
[  130.100000] mlx5_core 0000:41:00.0: Port module event: module 0, Cable unplugged
[  131.100000] mlx5_core 0000:41:00.0: Port module event: module 0, Cable plugged
[  140.100000] mlx5_core 0000:41:00.0: Port module event[error]: module 0, Cable error, High Temperature
[  150.000000] NETDEV WATCHDOG: ens1f0np0 (mlx5_core): transmit queue 3 timed out 5376 ms
[  160.000000] mlx5_core 0000:41:00.0 ens1f0np0: Error cqe on cqn 0x40a, ci 0x1d, qn 0x12f4, opcode 0xd, syndrome 0x4, vendor syndrome 0x51
[  170.000000] mlx5_core 0000:41:00.0 ens1f0np0: Link down
[  171.000000] mlx5_core 0000:41:00.0 ens1f0np0: Link up
[  172.000000] mlx5_core 0000:41:00.0 ens1f0np0: Link down
[  180.000000] bnxt_en 0000:5b:00.0 ens2f0np0: Firmware fatal reset event received
[  181.000000] bnxt_en 0000:5b:00.0 ens2f0np0: Firmware non-fatal reset event received, max wait time 4000 msec
[  190.000000] irdma ice.roce.0 irdma0: abnormal ae_id = 0x503 bool qp=1 qp_id = 7
[  191.000000] irdma ice.roce.0 irdma0: [Modify QP Cmd Error][op_code=21] status=-110 waiting=1 completion_err=1 maj=0xffff min=0x8029
[  192.000000] irdma ice.roce.0 irdma0: Requesting a reset
[  193.000000] irdma ice.roce.0 irdma0: some message no pattern knows
[    2.100000] mlx5_core 0000:41:00.0: firmware version: 22.39.1002
[    2.200000] e1000e 0000:00:19.0 eth0: NIC Link is Up 1000 Mbps Full Duplex
";
        let r = recognise(log);
        assert_eq!(r.lines, 25);
        let get = |k: &str, d: &str| {
            r.events
                .iter()
                .find(|e| e.kind == k && e.device == d)
                .unwrap_or_else(|| panic!("{k} on {d} not among {:#?}", r.events))
        };
        assert_eq!(get("pcie-link-limited", "0000:01:00.0").severity, Severity::Error);
        let cor = get("aer-corrected", "0000:00:1c.0");
        assert_eq!((cor.count, cor.first_s, cor.last_s), (2, Some(4908.274589), Some(5776.242699)));
        assert_eq!(cor.severity, Severity::Warning);
        assert_eq!(get("aer-uncorrected", "0000:00:1b.0").severity, Severity::Error);
        assert_eq!(get("nic-firmware-health", "0000:41:00.0").count, 2);
        assert!(get("nic-command-failed", "0000:41:00.0").example.contains("syndrome (0x7ca1e3)"));
        let m = get("module-event", "0000:41:00.0");
        assert_eq!((m.count, m.severity), (2, Severity::Warning), "unplugged is the worst");
        assert_eq!(get("module-error", "0000:41:00.0").severity, Severity::Error);
        assert_eq!(get("tx-timeout", "ens1f0np0").count, 1);
        assert_eq!(get("error-cqe", "ens1f0np0").severity, Severity::Error);
        assert_eq!(get("link-down", "ens1f0np0").count, 2);
        let bnxt = get("nic-firmware-reset", "ens2f0np0");
        assert_eq!((bnxt.count, bnxt.severity), (2, Severity::Error), "the fatal one is the worst");
        // irdma prints through ibdev_printk: the line names the RDMA device.
        assert_eq!(get("qp-async-error", "irdma0").severity, Severity::Warning);
        assert!(get("nic-command-failed", "irdma0").example.contains("maj=0xffff min=0x8029"));
        assert_eq!(get("nic-firmware-reset", "irdma0").severity, Severity::Error);
        assert_eq!(r.events.len(), 14, "{:#?}", r.events);
        // Not dropped: AER's own lines and mlx5's that no pattern knows; e1000e's are not
        // watched.
        let aer = r.unrecognised.iter().find(|u| u.source == "AER").unwrap();
        assert_eq!(aer.count, 1);
        let mlx = r.unrecognised.iter().find(|u| u.source == "mlx5_core").unwrap();
        assert_eq!(mlx.count, 2, "{mlx:?}");
        assert!(mlx.examples.iter().any(|e| e.contains("firmware version")));
        let irdma = r.unrecognised.iter().find(|u| u.source == "irdma").unwrap();
        assert_eq!(irdma.count, 1);
        assert_eq!(r.unrecognised.len(), 3);
    }

    #[test]
    fn a_quiet_log_has_no_event() {
        let r = recognise(
            "[    0.000000] Linux version 6.1.0-18-amd64\n[    2.1] mlx5_core 0000:41:00.0: firmware version: 22.39.1002\n",
        );
        assert!(r.events.is_empty());
        assert_eq!(r.lines, 2);
        assert_eq!(recognise("").lines, 0);
    }
}
