//! doctor on the hand-made host trees of `testdata/doctor` (written by its `make.py`): every
//! finding kind is found on the host that has the problem and not on the clean one.

use std::path::PathBuf;

use doctor::{Report, Severity, Source, diagnose};

fn tree(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/doctor").join(name)
}

fn run(name: &str) -> Report {
    diagnose(&Source::recorded(&tree(name)).expect("a tree"))
}

/// (kind, component, severity) of every finding kind the problem host must show.
const EXPECTED: &[(&str, &str, Severity)] = &[
    ("cpu-governor", "cpu", Severity::Warning),
    ("numa-balancing", "memory", Severity::Warning),
    ("thp", "memory", Severity::Info),
    ("hugepages", "memory", Severity::Warning),
    ("hugepages", "memory", Severity::Info),
    ("smt", "cpu", Severity::Info),
    ("cpu-boost-off", "cpu", Severity::Info),
    ("c-states", "cpu", Severity::Info),
    ("kernel-cmdline", "kernel", Severity::Info),
    ("pcie-link", "mlx5_0 (0000:3b:00.0)", Severity::Error),
    ("pcie-link", "GPU 0000:5e:00.0", Severity::Error),
    ("pcie-aer", "mlx5_0 (0000:3b:00.0)", Severity::Warning),
    ("pcie-mrrs", "mlx5_0 (0000:3b:00.0)", Severity::Info),
    // Both downstream ports of the switch the NICs share with the second GPU.
    ("acs-redirect", "PCIe bridge 0000:3a:00.0", Severity::Warning),
    ("acs-redirect", "PCIe bridge 0000:3a:01.0", Severity::Warning),
    ("irq-affinity", "mlx5_0 (0000:3b:00.0)", Severity::Warning),
    ("roce-mtu", "mlx5_0 port 1 (ens1f0np0)", Severity::Info),
    ("roce-v2-gid", "mlx5_1 port 1", Severity::Error),
    // `conf/all` applies to every netdev.
    ("rp-filter", "ens1f0np0", Severity::Warning),
    ("rp-filter", "ens1f1np1", Severity::Warning),
    ("arp-ignore", "ens1f0np0", Severity::Warning),
    ("arp-ignore", "ens1f1np1", Severity::Warning),
    ("arp-announce", "ens1f0np0", Severity::Warning),
    ("arp-announce", "ens1f1np1", Severity::Warning),
    ("ecn-off", "mlx5_0 (ens1f0np0)", Severity::Warning),
    ("fec-off", "mlx5_0 (ens1f0np0)", Severity::Error),
    ("dscp-trust", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("fec-uncorrectable", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("module-rx-power", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("module-power-low", "mlx5_0 (ens1f0np0)", Severity::Error),
    ("phy-symbol-errors", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("phy-crc-errors", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("phy-link-down", "mlx5_1 (ens1f1np1)", Severity::Warning),
    // fw_fatal in error (an error), fw with errors it recovered from (a warning).
    ("devlink-health", "mlx5_0 (0000:3b:00.0)", Severity::Error),
    ("devlink-health", "mlx5_0 (0000:3b:00.0)", Severity::Warning),
    ("iommu-translated", "mlx5_0 (0000:3b:00.0)", Severity::Info),
    ("pfc-off", "mlx5_0 (ens1f0np0)", Severity::Warning),
    ("ring-size", "mlx5_0 (ens1f0np0)", Severity::Info),
    ("module-temperature", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("source-routing", "mlx5_0 (ens1f0np0)", Severity::Warning),
    ("source-routing", "mlx5_1 (ens1f1np1)", Severity::Warning),
    ("irqbalance", "irq", Severity::Warning),
    ("log:pcie-link-limited", "0000:3b:00.0", Severity::Error),
    ("log:aer-corrected", "0000:3a:00.0", Severity::Warning),
    ("log:module-event", "0000:3b:00.1", Severity::Warning),
    ("log:tx-timeout", "ens1f0np0", Severity::Error),
    ("log:error-cqe", "ens1f0np0", Severity::Error),
    ("log:nic-firmware-health", "0000:3b:00.0", Severity::Error),
    ("log:link-down", "ens1f1np1", Severity::Warning),
    ("log:unrecognised", "mlx5_core", Severity::Info),
];

#[test]
fn every_problem_of_the_problem_host_is_found_with_its_evidence() {
    let r = run("mlx5-problems");
    assert_eq!(r.host.as_deref(), Some("gpu07"));
    assert_eq!(r.devices, ["mlx5_0", "mlx5_1"]);
    for (kind, component, sev) in EXPECTED {
        let f = r
            .findings
            .iter()
            .find(|f| f.kind == *kind && f.component == *component && f.severity == *sev)
            .unwrap_or_else(|| panic!("{kind} on {component} not found: {:#?}", r.findings));
        assert_eq!(f.severity, *sev, "{f:?}");
        assert!(!f.evidence.is_empty() && !f.why.is_empty() && !f.fix.is_empty(), "{f:?}");
    }
    // The figures behind the findings.
    let link = r
        .findings
        .iter()
        .find(|f| f.kind == "pcie-link" && f.component.starts_with("mlx5_0"))
        .unwrap();
    assert_eq!(link.seen, "PCIe link at 8.0 GT/s PCIe x8, capable of 16.0 GT/s PCIe x16");
    let aer = r.findings.iter().find(|f| f.kind == "pcie-aer").unwrap();
    assert!(
        aer.seen.starts_with("15 correctable PCIe errors, 0.62 an hour since boot"),
        "{}",
        aer.seen
    );
    let gov = r.findings.iter().find(|f| f.kind == "cpu-governor").unwrap();
    assert_eq!(gov.seen, "governor powersave on 2 of 4 CPUs");
    let irq = r.findings.iter().find(|f| f.kind == "irq-affinity").unwrap();
    assert!(irq.seen.starts_with("1 of 2 IRQs"), "{}", irq.seen);
    assert!(irq.evidence.iter().any(|e| e == "proc/irq/120/smp_affinity_list = 2-3"));
    // Errors first; the exit status's count.
    assert_eq!(r.findings[0].severity, Severity::Error);
    assert_eq!(r.errors(), 10);
    // Every kind is one a plan may name.
    for f in &r.findings {
        assert!(doctor::KINDS.contains(&f.kind.as_str()), "{} is not in doctor::KINDS", f.kind);
    }
    // Nothing beyond what is expected.
    assert_eq!(r.findings.len(), EXPECTED.len(), "{:#?}", r.findings);
}

#[test]
fn the_clean_host_has_no_finding_but_the_unrecognised_lines() {
    let r = run("clean");
    assert_eq!(r.devices, ["mlx5_0", "mlx5_1"]);
    let kinds: Vec<(&str, &str)> =
        r.findings.iter().map(|f| (f.kind.as_str(), f.component.as_str())).collect();
    assert_eq!(kinds, [("log:unrecognised", "mlx5_core")], "{:#?}", r.findings);
    assert_eq!(r.errors(), 0);
    let log = r.log.as_ref().expect("the log was read");
    assert_eq!((log.lines, log.events.len()), (3, 0));
}

#[test]
fn a_folder_that_is_no_host_tree_is_refused() {
    let e = Source::recorded(&tree("no-such-host")).unwrap_err();
    assert!(e.to_string().contains("not a recorded host"), "{e}");
}

#[test]
fn the_recorded_vm_has_no_rdma_device_and_nothing_wrong() {
    // `podnet doctor --record` on the 2-core development VM (no RDMA hardware, no cpufreq).
    let r = run("vm-recorded");
    assert!(r.devices.is_empty());
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(r.log.as_ref().is_some_and(|l| l.lines > 500), "its kernel log was recorded");
}

#[test]
fn the_recorded_rxe_guest_is_a_multi_rail_host_with_arp_to_fix() {
    // `podnet doctor --record` in the QEMU guest after rxevm's setup_rxe (the test
    // doctor_rxe::… with PODNET_DOCTOR_KEEP): rxeA on vA, rxeB on vB, rxe_eth on eth0, MTU
    // 1500, arp_ignore and arp_announce at the kernel's defaults.
    let r = run("rxe-guest");
    assert_eq!(r.devices, ["rxeA", "rxeB", "rxe_eth"]);
    let mut got: Vec<(String, String)> =
        r.findings.iter().map(|f| (f.kind.clone(), f.component.clone())).collect();
    got.sort();
    let mut want: Vec<(String, String)> = ["eth0", "vA", "vB"]
        .iter()
        .flat_map(|nd| {
            [("arp-announce".to_string(), nd.to_string()), ("arp-ignore".into(), nd.to_string())]
        })
        .chain([
            // Its policy routing matches destinations (`to … iif lo`), not sources.
            ("source-routing".into(), "rxeA (vA)".into()),
            ("source-routing".into(), "rxeB (vB)".into()),
            ("source-routing".into(), "rxe_eth (eth0)".into()),
            ("roce-mtu".into(), "rxeA port 1 (vA)".into()),
            ("roce-mtu".into(), "rxeB port 1 (vB)".into()),
            ("roce-mtu".into(), "rxe_eth port 1 (eth0)".into()),
            ("thp".into(), "memory".into()),
        ])
        .collect();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(r.errors(), 0);
}

#[test]
fn compare_names_the_host_whose_versions_differ_from_the_pods() {
    let reports: Vec<(String, Report)> = ["mlx5-problems", "clean", "clean-b"]
        .iter()
        .map(|t| {
            let r = run(t);
            (r.host.clone().unwrap(), r)
        })
        .collect();
    assert_eq!(reports[0].1.versions["mlx5_0 firmware"], "22.36.1010");
    assert_eq!(reports[1].1.versions["kernel"], "6.1.0-21-amd64");
    let f = doctor::compare(&reports);
    let mut seen: Vec<(&str, &str)> =
        f.iter().map(|f| (f.component.as_str(), f.seen.as_str())).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("gpu07", "kernel 6.1.0-18-amd64, where 2 of 3 hosts run 6.1.0-21-amd64"),
            ("gpu07", "mlx5_0 firmware 22.36.1010, where 2 of 3 hosts run 22.39.1002"),
            ("gpu07", "mlx5_1 firmware 22.36.1010, where 2 of 3 hosts run 22.39.1002"),
            ("gpu07", "mlx5_core driver 23.10-1.1.9, where 2 of 3 hosts run 24.04-0.6.6"),
        ]
    );
    assert!(
        f.iter()
            .all(|f| f.kind == "version-mismatch" && doctor::KINDS.contains(&"version-mismatch"))
    );
    // The same versions everywhere: nothing.
    assert!(doctor::compare(&reports[1..]).is_empty());
}

/// A report sent across a pod fits the bootstrap's line: the log's copies and the evidence
/// past the first line go first, then the least severe findings, with one finding saying how
/// many were left out; the errors stay.
#[test]
fn a_report_fits_the_line_it_is_sent_on() {
    let r = run("mlx5-problems");
    assert_eq!(r.fit(1 << 20), r, "a report that fits is sent whole");
    let size = |r: &Report| serde_json::to_vec(r).unwrap().len();
    let whole = size(&r);
    let limit = 12_000;
    assert!(whole > limit, "the problem host's report is {whole} bytes");
    let f = r.fit(limit);
    assert!(size(&f) <= limit, "{} bytes", size(&f));
    assert_eq!(f.errors(), r.errors());
    let last = f.findings.last().unwrap();
    assert_eq!(last.kind, "report-truncated");
    let left = r.findings.len() - (f.findings.len() - 1);
    assert!(left > 0);
    assert!(last.seen.starts_with(&format!("{left} of {} findings", r.findings.len())), "{last:?}");
    assert_eq!(f.versions, r.versions);
}

#[test]
fn the_two_ports_of_one_adapter_on_different_firmware_are_a_finding() {
    // The clean dual-port host, one port's firmware updated and the adapter not reset.
    let dir = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", tree("clean").display()))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(ok.success());
    let r = diagnose(&Source::recorded(dir.path()).unwrap());
    assert!(!r.findings.iter().any(|f| f.kind == "firmware-mismatch"), "{:?}", r.findings);
    std::fs::write(dir.path().join("sys/class/infiniband/mlx5_1/fw_ver"), "22.41.1000\n").unwrap();
    let r = diagnose(&Source::recorded(dir.path()).unwrap());
    let f = r.findings.iter().find(|f| f.kind == "firmware-mismatch");
    let f = f.unwrap_or_else(|| panic!("not found: {:?}", r.findings));
    assert_eq!(f.severity, Severity::Warning);
    assert!(
        f.seen.contains("mlx5_0 22.39.1002") && f.seen.contains("mlx5_1 22.41.1000"),
        "{}",
        f.seen
    );
}
