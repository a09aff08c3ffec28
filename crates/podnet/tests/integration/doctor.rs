//! `podnet doctor`: the hand-made trees of `testdata/doctor` (exit status, text and JSON),
//! bad input, and `--record` then `--root` on this host (a 2-core VM without RDMA hardware):
//! the recording diagnoses exactly as the live host did.

use serde_json::Value;

use crate::util::{podnet, stderr, stdout, testdata};

#[test]
fn doctor_names_the_problem_hosts_faults_and_exits_1() {
    let root = testdata("doctor/mlx5-problems");
    let o = podnet(&["doctor", "--root", root.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.starts_with(
            "podnet doctor: gpu07: RDMA devices mlx5_0, mlx5_1; kernel log: 13 lines read"
        ),
        "{text}"
    );
    assert!(
        text.lines().nth(1).is_some_and(|l| l.starts_with("versions: kernel 6.1.0-18-amd64; ")
            && l.contains("mlx5_0 firmware 22.36.1010")),
        "{text}"
    );
    assert!(text.contains("ERROR    pcie-link                mlx5_0 (0000:3b:00.0): PCIe link at 8.0 GT/s PCIe x8, capable of 16.0 GT/s PCIe x16"), "{text}");
    assert!(text.contains("         fix: sysctl -w kernel.numa_balancing=0"), "{text}");
    assert!(text.contains("10 errors, 29 warnings, 11 notes"), "{text}");
    let o = podnet(&["doctor", "--root", root.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("one JSON object");
    let f = v["findings"].as_array().unwrap();
    assert_eq!(f.len(), 50);
    assert!(f.iter().any(|f| f["kind"] == "log:nic-firmware-health" && f["severity"] == "error"));
    assert_eq!(v["log"]["events"].as_array().unwrap().len(), 7);
}

#[test]
fn doctor_on_the_clean_host_exits_0() {
    let root = testdata("doctor/clean");
    let o = podnet(&["doctor", "--root", root.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("0 errors, 0 warnings, 1 notes"), "{}", stdout(&o));
}

#[test]
fn doctor_refuses_bad_input_in_one_line() {
    let o = podnet(&["doctor", "--root", "/nonexistent/host"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("not a recorded host") && e.lines().count() == 1, "{e}");
    // A recording never lands on top of something else.
    let full = testdata("doctor/clean");
    let o =
        podnet(&["doctor", "--root", full.to_str().unwrap(), "--record", full.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("the recording folder is not empty"), "{}", stderr(&o));
}

#[test]
fn doctor_record_then_root_diagnoses_as_the_live_host() {
    let dir = std::env::temp_dir().join(format!("podnet-doctor-rec-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let live = podnet(&["doctor", "--json", "--record", dir.to_str().unwrap()]);
    assert!(matches!(live.status.code(), Some(0 | 1)), "{}", stderr(&live));
    let again = podnet(&["doctor", "--json", "--root", dir.to_str().unwrap()]);
    let recorded = std::fs::read_dir(&dir).unwrap().count();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(again.status.code(), live.status.code());
    let (a, b): (Value, Value) = (
        serde_json::from_str(&stdout(&live)).unwrap(),
        serde_json::from_str(&stdout(&again)).unwrap(),
    );
    assert_eq!(a, b, "the recording diagnoses differently");
    // What the live host gave was read at all: its CPUs, and (as root, as the tests run) its
    // kernel log.
    assert!(recorded >= 2, "sys/ and proc/ at least");
    assert!(a["log"]["lines"].as_u64().unwrap() > 0, "the kernel log was not read: {a}");
}

/// The agent exports doctor's health side: the problem host's NIC at x8 of x16, its AER
/// count, its kernel log's events — and the clean host's link at full width and no events;
/// each family is defined in docs/metrics.md.
#[test]
fn the_agent_exports_pcie_links_aer_the_physical_layer_and_kernel_log_events() {
    let print = |tree: &str| {
        let root = testdata(&format!("doctor/{tree}"));
        let o = podnet(&[
            "agent",
            "--print",
            "--interval",
            "0.2",
            "--sysfs-root",
            root.join("sys").to_str().unwrap(),
            "--procfs-root",
            root.join("proc").to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let bad = print("mlx5-problems");
    for line in [
        "podnet_pcie_link_width{device=\"mlx5_0\",pci=\"0000:3b:00.0\"} 8",
        "podnet_pcie_link_max_width{device=\"mlx5_0\",pci=\"0000:3b:00.0\"} 16",
        "podnet_pcie_link_speed_gts{device=\"mlx5_0\",pci=\"0000:3b:00.0\"} 8.0",
        "podnet_pcie_link_width{device=\"gpu\",pci=\"0000:5e:00.0\"} 8",
        "podnet_pcie_aer_errors{device=\"mlx5_0\",pci=\"0000:3b:00.0\",severity=\"correctable\"} 15",
        "podnet_kernel_log_events{kind=\"nic-firmware-health\",device=\"0000:3b:00.0\",severity=\"error\"} 1",
        "podnet_kernel_log_events{kind=\"aer-corrected\",device=\"0000:3a:00.0\",severity=\"warning\"} 2",
        "podnet_kernel_log_unrecognised_lines{source=\"mlx5_core\"} 3",
        "podnet_nic_fec_active{device=\"mlx5_0\",netdev=\"ens1f0np0\",mode=\"Off\"} 1",
        "podnet_nic_fec_uncorrectable_blocks{device=\"mlx5_1\",netdev=\"ens1f1np1\"} 37",
        "podnet_nic_phy_errors{device=\"mlx5_1\",netdev=\"ens1f1np1\",counter=\"rx_pcs_symbol_err_phy\"} 1234",
        "podnet_nic_module_temperature_celsius{device=\"mlx5_1\",netdev=\"ens1f1np1\"} 74.12",
        "podnet_nic_module_low_power{device=\"mlx5_0\",netdev=\"ens1f0np0\"} 1",
    ] {
        assert!(bad.lines().any(|l| l == line), "no {line} in:\n{bad}");
    }
    let clean = print("clean");
    assert!(
        clean
            .lines()
            .any(|l| l == "podnet_pcie_link_width{device=\"mlx5_0\",pci=\"0000:3b:00.0\"} 16")
    );
    assert!(!clean.lines().any(|l| l.starts_with("podnet_kernel_log_events{")), "{clean}");
    for line in [
        "podnet_nic_fec_uncorrectable_blocks{device=\"mlx5_1\",netdev=\"ens1f1np1\"} 0",
        "podnet_nic_module_low_power{device=\"mlx5_0\",netdev=\"ens1f0np0\"} 0",
    ] {
        assert!(clean.lines().any(|l| l == line), "no {line} in:\n{clean}");
    }
    let dim = bad
        .lines()
        .find_map(|l| {
            l.strip_prefix("podnet_nic_module_rx_power_dbm{device=\"mlx5_1\",netdev=\"ens1f1np1\",lane=\"3\"} ")
        })
        .and_then(|v| v.parse::<f64>().ok());
    assert!(dim.is_some_and(|d| (d + 11.55).abs() < 0.01), "lane 3 at {dim:?} dBm");
    let doc = std::fs::read_to_string(testdata("../docs/metrics.md")).unwrap();
    for name in bad
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .filter(|n| n.starts_with("podnet_pcie_") || n.starts_with("podnet_kernel_log_"))
    {
        assert!(doc.contains(&format!("`{name}{{")), "{name} is not in docs/metrics.md");
    }
}

/// A qualify plan names doctor's findings that must not be found: on the problem host they
/// fail (with the finding and its evidence), on the clean one they pass; a kind doctor does
/// not make is a plan error.
#[test]
fn qualify_runs_doctors_checks_as_host_checks() {
    let dir = std::env::temp_dir().join(format!("podnet-doctor-qualify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        "name = \"doctor\"\ndevices = [\"soft:127.0.0.1\"]\n[host]\ndoctor = [\"error\", \"irq-affinity\", \"thp\"]\n",
    )
    .unwrap();
    let run = |tree: &str| {
        let sys = testdata(&format!("doctor/{tree}/sys"));
        let o = podnet(&[
            "qualify",
            "--plan",
            plan.to_str().unwrap(),
            "--sysfs-root",
            sys.to_str().unwrap(),
            "--json",
            "--report-dir",
            dir.join(tree).to_str().unwrap(),
        ]);
        let v: Value =
            serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
        let checks: Vec<(String, String, String)> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"].as_str().unwrap().starts_with("host/doctor/"))
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["status"].as_str().unwrap().to_string(),
                    c["detail"].to_string(),
                )
            })
            .collect();
        (o.status.code(), checks)
    };
    let (code, bad) = run("mlx5-problems");
    assert_eq!(code, Some(1));
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad.iter().all(|c| c.1 == "fail"), "{bad:?}");
    let irq = bad.iter().find(|c| c.0 == "host/doctor/irq-affinity").unwrap();
    assert!(irq.2.contains("proc/irq/120") || irq.2.contains("local_cpulist"), "{irq:?}");
    let (code, clean) = run("clean");
    assert_eq!(code, Some(0), "{clean:?}");
    assert!(clean.len() == 3 && clean.iter().all(|c| c.1 == "pass"), "{clean:?}");
    std::fs::write(
        &plan,
        "name = \"x\"\ndevices = [\"soft:127.0.0.1\"]\n[host]\ndoctor = [\"pcie-lnk\"]\n",
    )
    .unwrap();
    let o = podnet(&["qualify", "--plan", plan.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("\"pcie-lnk\" is not a kind of doctor finding"), "{}", stderr(&o));
}

/// `--compare` over three recorded hosts: the versions side by side, the odd host's marked,
/// exit 1; two hosts alike: exit 0.
#[test]
fn doctor_compare_marks_the_host_that_differs() {
    let t = |n: &str| testdata(&format!("doctor/{n}")).to_str().unwrap().to_string();
    let (bad, a, b) = (t("mlx5-problems"), t("clean"), t("clean-b"));
    let o = podnet(&["doctor", "--compare", &bad, &a, &b]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.lines().any(|l| l.starts_with("gpu07") && l.contains("*22.36.1010")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("gpu08") && !l.contains('*')), "{text}");
    assert!(text.contains("3 hosts, 4 version mismatches"), "{text}");
    let o = podnet(&["doctor", "--compare", &a, &b, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["hosts"].as_array().unwrap().len(), 2);
    assert!(v["findings"].as_array().unwrap().is_empty());
    let o = podnet(&["doctor", "--compare", &a]);
    assert_eq!(o.status.code(), Some(2), "one host is no comparison");
}

/// A pod at once: three hosts (namespaces on a bridge, each diagnosing one recorded host)
/// run the same `doctor --hostfile`; rank 0 prints every host side by side, marks the one
/// whose firmware and kernel differ, lists its errors, and exits 1 (a host has errors); the
/// clean rank 1 exits 0, the problem host's own rank 1.
#[test]
fn doctor_over_a_hostfile_reports_the_pod_at_rank_0() {
    let t = |n: &str| testdata(&format!("doctor/{n}")).to_str().unwrap().to_string();
    let o = crate::util::in_netns(&format!(
        "set -e\n\
         {hosts}\
         printf '10.79.0.1\\n10.79.0.2\\n10.79.0.3\\n' > hosts\n\
         R1={a} R2={b} R3={bad}\n\
         for i in 3 2 1; do eval root=\\$R$i\n\
           ip netns exec pdh$$_$i \"$PODNET\" doctor --hostfile hosts --root $root > o$i 2> e$i &\n\
           eval p$i=$!\n\
         done\n\
         set +e; for i in 1 2 3; do eval wait \\$p$i; echo \"rc$i=$?\"; done\n\
         for i in 1 2 3; do echo \"== host $i\"; cat o$i e$i; done",
        a = t("clean"),
        b = t("clean-b"),
        bad = t("mlx5-problems"),
        hosts = crate::util::bridged_hosts("pd", "10.79.0", 3),
    ));
    let out = stdout(&o);
    for (host, rc) in [(1, 1), (2, 0), (3, 1)] {
        assert!(out.contains(&format!("rc{host}={rc}")), "host {host}: {out}{}", stderr(&o));
    }
    let rank0 = out.split("== host 1\n").nth(1).unwrap_or("").split("== host 2").next().unwrap();
    assert!(rank0.contains("gpu07 (rank 2)"), "{rank0}");
    assert!(
        rank0.lines().any(|l| l.starts_with("gpu07 (rank 2)") && l.contains("*22.36.1010")),
        "{rank0}"
    );
    assert!(rank0.lines().any(|l| l.starts_with("gpu08 (rank 0)") && !l.contains('*')), "{rank0}");
    assert!(rank0.contains("ERROR    pcie-link                gpu07 (rank 2): mlx5_0"), "{rank0}");
    assert!(rank0.contains("3 hosts, 4 version mismatches (* above), 10 errors in all"), "{rank0}");
    let host3 = out.split("== host 3\n").nth(1).unwrap_or("");
    assert!(host3.contains("rank 2 (gpu07): report sent to rank 0 (10 errors"), "{host3}");
}
