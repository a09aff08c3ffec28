//! The physical layer of one netdev, as `ethtool` reports it: the FEC mode and its block
//! counters, the PHY's error counters, and the cable module's temperature, receive power and
//! power mode. One reader serves doctor's findings and the agent's series.

use crate::Source;

/// A PHY error counter from `ethtool -S` (mlx5's names): (key, finding kind, why it matters).
pub const PHY_COUNTERS: &[(&str, &str, &str)] = &[
    (
        "rx_pcs_symbol_err_phy",
        "phy-symbol-errors",
        "symbol errors the PHY could not correct: a dirty or failing cable, optic or port; packets are lost to them",
    ),
    (
        "rx_crc_errors_phy",
        "phy-crc-errors",
        "frames with a bad CRC: corrupted on the wire, each a lost RoCE packet",
    ),
    (
        "link_down_events_phy",
        "phy-link-down",
        "the link went down: every QP on it stalled or failed",
    ),
];

/// What `ethtool` says of one netdev's physical layer; `None` where it says nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Phy {
    /// The active FEC encoding (`RS`, `BaseR`, `Off`), `ethtool --show-fec`.
    pub fec: Option<String>,
    /// FEC blocks corrected since the counters started (`ethtool -I --show-fec`).
    pub fec_corrected: Option<u64>,
    /// FEC blocks that could not be corrected: each a lost frame.
    pub fec_uncorrectable: Option<u64>,
    /// [`PHY_COUNTERS`] the driver has, with their values.
    pub counters: Vec<(&'static str, u64)>,
    /// The module's temperature, °C (`ethtool -m`).
    pub module_temp: Option<f64>,
    /// Its own high warning threshold, °C.
    pub module_temp_warn: Option<f64>,
    /// Its own high alarm threshold, °C.
    pub module_temp_alarm: Option<f64>,
    /// Receive power per lane, mW (`ethtool -m`: `Rcvr signal avg optical power(Channel N)`,
    /// or an SFP's `Receiver signal average optical power`).
    pub rx_power_mw: Vec<f64>,
    /// The module's own low warning and low alarm thresholds for receive power, mW.
    pub rx_power_low: (Option<f64>, Option<f64>),
    /// The module's power mode (`ethtool --show-module`: `high`, `low`).
    pub power_mode: Option<String>,
}

/// The first number after `key :` in `ethtool -m`'s `key : value unit / …` lines.
fn field(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(" : ").or_else(|| l.split_once(':'))?;
        (k.trim() == key).then(|| v.split_whitespace().next()?.parse::<f64>().ok()).flatten()
    })
}

/// Reads `nd`'s physical layer through `src` (four `ethtool` commands, recorded as
/// `cmd/ethtool-show-fec-ND`, `cmd/ethtool-S-ND`, `cmd/ethtool-m-ND`,
/// `cmd/ethtool-show-module-ND`).
pub fn read(src: &Source, nd: &str) -> Phy {
    let mut p = Phy::default();
    if let Some(fec) =
        src.command(&format!("ethtool-show-fec-{nd}"), &["ethtool", "-I", "--show-fec", nd])
    {
        // ethtool's netlink/fec.c: `Active FEC encoding: RS`, then under `Statistics:`
        // `  corrected_blocks: N` (per lane after it, as `Lane 0: N` lines or `[ per_lane: …]`).
        let count = |key: &str| {
            fec.lines().find_map(|l| {
                l.trim()
                    .strip_prefix(key)?
                    .strip_prefix(':')?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        };
        p.fec = fec
            .lines()
            .find_map(|l| l.trim().strip_prefix("Active FEC encoding:"))
            .map(|a| a.trim().to_string());
        p.fec_corrected = count("corrected_blocks");
        p.fec_uncorrectable = count("uncorrectable_blocks");
    }
    if let Some(stats) = src.command(&format!("ethtool-S-{nd}"), &["ethtool", "-S", nd]) {
        for (key, _, _) in PHY_COUNTERS {
            if let Some(n) = stats.lines().find_map(|l| {
                l.trim().strip_prefix(key)?.strip_prefix(':')?.trim().parse::<u64>().ok()
            }) {
                p.counters.push((key, n));
            }
        }
    }
    if let Some(m) = src.command(&format!("ethtool-m-{nd}"), &["ethtool", "-m", nd]) {
        // ethtool's sff-common.c, qsfp.c and sfpdiag.c print these labels.
        p.module_temp = field(&m, "Module temperature");
        p.module_temp_warn = field(&m, "Module temperature high warning threshold");
        p.module_temp_alarm = field(&m, "Module temperature high alarm threshold");
        p.rx_power_mw = m
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(" : ")?;
                let k = k.trim();
                (k.starts_with("Rcvr signal avg optical power")
                    || k == "Receiver signal average optical power")
                    .then(|| v.split_whitespace().next()?.parse::<f64>().ok())
                    .flatten()
            })
            .collect();
        p.rx_power_low = (
            field(&m, "Laser rx power low warning threshold"),
            field(&m, "Laser rx power low alarm threshold"),
        );
    }
    if let Some(m) =
        src.command(&format!("ethtool-show-module-{nd}"), &["ethtool", "--show-module", nd])
    {
        // ethtool's netlink/module.c: `power-mode: high` (older releases without the colon).
        p.power_mode = m.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("power-mode")?;
            (!rest.starts_with('-'))
                .then(|| rest.trim_start_matches(':').trim().to_string())
                .filter(|v| !v.is_empty())
        });
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, Source) {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("sys")).unwrap();
        std::fs::create_dir_all(d.path().join("proc")).unwrap();
        for (rel, text) in files {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let s = Source::recorded(d.path()).unwrap();
        (d, s)
    }

    /// ethtool 6.1's `-I --show-fec` (per-lane lines) and a later one's (`[ per_lane: … ]`),
    /// a QSFP28's diagnostics, and `--show-module` with and without the colon.
    #[test]
    fn ethtool_output_reads_as_ethtool_prints_it() {
        let (_d, s) = tree(&[
            (
                "cmd/ethtool-show-fec-eth0",
                "FEC parameters for eth0:\nSupported/Configured FEC encodings: Auto RS\n\
                 Active FEC encoding: RS\nStatistics:\n  corrected_blocks: 256\n    Lane 0: 255\n    \
                 Lane 1: 1\n  uncorrectable_blocks: 145\n    Lane 0: 128\n    Lane 1: 17\n",
            ),
            (
                "cmd/ethtool-show-fec-eth1",
                "FEC parameters for eth1:\nActive FEC encoding: RS\nStatistics:\n  \
                 corrected_blocks: 7 [ per_lane: 3, 4 ]\n  uncorrectable_blocks: 0 [ per_lane: 0, 0 ]\n",
            ),
            (
                "cmd/ethtool-m-eth0",
                "\tModule temperature                        : 41.50 degrees C / 106.70 degrees F\n\
                 \tRcvr signal avg optical power(Channel 1)  : 0.5470 mW / -2.62 dBm\n\
                 \tRcvr signal avg optical power(Channel 2)  : 0.0021 mW / -26.78 dBm\n\
                 \tLaser rx power low alarm threshold        : 0.0467 mW / -13.31 dBm\n\
                 \tLaser rx power low warning threshold      : 0.0933 mW / -10.30 dBm\n",
            ),
            (
                "cmd/ethtool-show-module-eth0",
                "Module parameters for eth0:\npower-mode-policy: auto\npower-mode: low\n",
            ),
            (
                "cmd/ethtool-show-module-eth1",
                "Module parameters for eth1:\npower-mode-policy high\npower-mode high\n",
            ),
        ]);
        let p = read(&s, "eth0");
        assert_eq!(p.fec.as_deref(), Some("RS"));
        assert_eq!((p.fec_corrected, p.fec_uncorrectable), (Some(256), Some(145)));
        assert_eq!(p.module_temp, Some(41.5));
        assert_eq!(p.rx_power_mw, vec![0.547, 0.0021]);
        assert_eq!(p.rx_power_low, (Some(0.0933), Some(0.0467)));
        assert_eq!(p.power_mode.as_deref(), Some("low"));
        let q = read(&s, "eth1");
        assert_eq!((q.fec_corrected, q.fec_uncorrectable), (Some(7), Some(0)));
        assert_eq!(q.power_mode.as_deref(), Some("high"));
        assert_eq!(read(&s, "eth2"), Phy::default());
    }
}
