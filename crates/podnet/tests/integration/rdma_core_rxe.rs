//! podnet's rdma-core provider on Linux rxe in the QEMU guest (the binary built here, run
//! there):
//! - podnet (rdma-core, `rxe_eth`) against podnet (soft, this host) across the tap: every
//!   perf test on every transport it runs on, each side as server and as client, every
//!   message checked (`--data-validation`) at both ends;
//! - podnet perf (rdma-core) on `rxeA` ↔ `rxeB` posting as perftest does on an RDMA device.
//!
//! The timed comparison with perftest on the same devices is a benchmark, not a test:
//! `cargo bench -p podnet --bench rxe_perf_compare` (`benches/rxe_perf_compare.rs`).

use std::time::{Duration, Instant};

use rxevm::{Config, HOST_IP4, Vm};
use serde_json::Value;

use crate::util::{podnet_vs_guest, stderr, stdout};

fn json_lines(s: &str) -> Vec<Value> {
    s.lines().filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok()).collect()
}

/// Checks one side's JSON: a result row (on the client: perftest's READ and atomic latency
/// servers print none) and a clean validation of `messages` messages.
fn check_side(what: &str, side: &str, out: &str, messages: u64, client: bool) {
    let v = json_lines(out);
    let row = v.iter().any(|r| r.get("MsgSize").is_some());
    assert!(row || !client, "{what}: {side} printed no row:\n{out}");
    let val = v
        .iter()
        .rev()
        .find_map(|r| r.get("data_validation"))
        .unwrap_or_else(|| panic!("{what}: {side} printed no validation:\n{out}"));
    assert_eq!(
        (val["ok"].as_bool(), val["errors"].as_u64()),
        (Some(true), Some(0)),
        "{what}: {side}: {val}"
    );
    assert_eq!(val["messages"], messages, "{what}: {side}: {val}");
}

/// The podnet a plain `cargo build -p podnet` gives (default features), which must open rxe
/// as it is: `PODNET_DEFAULT_BIN` (scripts/test.sh builds it before the tests), or built here
/// into its own target folder when that is unset.
fn default_features_binary() -> String {
    if let Some(bin) = std::env::var_os("PODNET_DEFAULT_BIN") {
        let bin = std::path::PathBuf::from(bin);
        assert!(bin.is_file(), "PODNET_DEFAULT_BIN={} is not a file", bin.display());
        return bin.display().to_string();
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = root.join("target/default-features");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(&root)
        .args(["build", "--locked", "-q", "-p", "podnet", "--target-dir"])
        .arg(&target)
        .output()
        .expect("run cargo");
    assert!(out.status.success(), "cargo build -p podnet failed: {}", stderr(&out));
    target.join("debug/podnet").display().to_string()
}

/// `podnet pingpong` (rdma-core, `rxe_eth`) against `podnet pingpong` (soft, the host), each
/// side as server and client, every byte of every message checked (`--verify`). The guest side
/// is the default-features binary: what `cargo build`/`cargo install` give opens rxe.
fn pingpong(vm: &Vm, gid: u32) {
    let podnet = default_features_binary();
    for podnet_serves in [true, false] {
        let what =
            format!("pingpong ({} serves)", if podnet_serves { "soft" } else { "rdma-core" });
        let host = [
            "pingpong",
            "-d",
            "soft:169.254.77.1",
            "-n",
            "100",
            "-s",
            "4096",
            "--verify",
            "--timeout",
            "60",
        ];
        let guest = format!(
            "{podnet} pingpong --provider rdma-core -d rxe_eth -g {gid} -n 100 -s 4096 --verify --timeout 60"
        );
        let connect_to = if podnet_serves { HOST_IP4 } else { "" };
        let (o, g) = podnet_vs_guest(vm, &host, &guest, connect_to, podnet_serves);
        assert!(o.status.success(), "{what}: soft side: {}{}\nguest:\n{g}", stdout(&o), stderr(&o));
        assert!(g.starts_with("rc=0"), "{what}: rdma-core side failed:\n{g}\nsoft: {}", stdout(&o));
        for (side, out) in [("soft", stdout(&o)), ("rdma-core", g)] {
            assert!(out.contains("100 iters"), "{what}: {side}:\n{out}");
        }
        eprintln!("{what}: 100 iterations, verified");
    }
}

fn interop(vm: &Vm, gid: u32) {
    let podnet = env!("CARGO_BIN_EXE_podnet");
    let n = 100u64;
    let cases: [(&str, &str, &str); 13] = [
        ("write-bw", "RC", ""),
        // UC has no retransmission: a burst of 64 KiB messages from the host overruns the
        // emulated guest's NIC queue and whole messages are lost (the check sees them as
        // differing bytes). One packet per message keeps the burst within the queue.
        ("write-bw", "UC", "-s 1024"),
        ("read-bw", "RC", ""),
        ("send-bw", "RC", ""),
        ("send-bw", "UC", "-s 1024"),
        ("send-bw", "UD", ""),
        ("atomic-bw", "RC", ""),
        ("atomic-bw", "RC", "-A CMP_AND_SWAP"),
        ("send-lat", "RC", ""),
        ("send-lat", "UD", ""),
        ("write-lat", "RC", ""),
        ("read-lat", "RC", ""),
        ("atomic-lat", "RC", ""),
    ];
    let nn = n.to_string();
    for (test, conn, extra) in cases {
        for podnet_serves in [true, false] {
            let t = Instant::now();
            let what = format!(
                "{test} -c {conn} {extra} ({} serves)",
                if podnet_serves { "soft" } else { "rdma-core" }
            );
            let mut host = vec![
                "perf",
                test,
                "-c",
                conn,
                "-d",
                "soft:169.254.77.1",
                "-e",
                "-n",
                &nn,
                "--data-validation",
                "--json",
                "--timeout",
                "60",
            ];
            host.extend(extra.split_whitespace());
            let guest = format!(
                "{podnet} perf {test} -c {conn} {extra} --provider rdma-core -d rxe_eth -x {gid} \
                 -e -n {n} --data-validation --json --timeout 60"
            );
            let connect_to = if podnet_serves { HOST_IP4 } else { "" };
            let (o, g) = podnet_vs_guest(vm, &host, &guest, connect_to, podnet_serves);
            assert!(
                o.status.success(),
                "{what}: soft side: {}{}\nguest:\n{g}",
                stdout(&o),
                stderr(&o)
            );
            assert!(
                g.starts_with("rc=0"),
                "{what}: rdma-core side failed:\n{g}\nsoft: {}",
                stdout(&o)
            );
            // Checked where they land: SEND/WRITE latency pings and pongs, atomics at both ends.
            let per = match test {
                "write-lat" | "send-lat" | "atomic-bw" | "atomic-lat" => 2 * n,
                _ => n,
            };
            check_side(&what, "soft", &stdout(&o), per, !podnet_serves);
            check_side(&what, "rdma-core", &g, per, podnet_serves);
            eprintln!(
                "{what}: {per} messages checked on both sides in {:.1} s",
                t.elapsed().as_secs_f64()
            );
        }
    }
}

/// On an RDMA device podnet posts as perftest does: one message per call (no post list) and
/// no CQ moderation above 8 KiB.
fn posts_as_perftest_does(vm: &Vm, a_gid: u32, b_gid: u32) {
    let p = format!(
        "{} perf write-bw --provider rdma-core -s 65536 -n 200",
        env!("CARGO_BIN_EXE_podnet")
    );
    let script = format!("pair '{p} -d rxeA -x {a_gid}' '{p} -d rxeB -x {b_gid} 169.254.88.1'");
    let out =
        vm.run("write-bw", &script, Duration::from_secs(150)).unwrap_or_else(|e| panic!("{e}"));
    let client = out.output.split_once("--- client:").map_or("", |(_, c)| c);
    assert!(
        client.contains("#bytes")
            && !client.contains("Post List")
            && client.contains(" CQ Moderation   : 1\n"),
        "{}",
        out.output
    );
}

/// `podnet qualify` with a plan of rdma-core device checks and a pair check on rxeA/rxeB.
fn qualify_on_rxe(vm: &Vm) {
    let plan = vm.out_dir().join("rxe-plan.toml");
    std::fs::write(
        &plan,
        "name = \"rxe in the guest\"\ndevices = [\"rxeA\", \"rxeB\"]\n\
         [host]\nmin_netdev_mtu = 1500\nnic_numa_node = true\n\
         [device]\nport_active = true\nroce_v2_gid = true\nmin_active_mtu = 1024\n\
         [[perf]]\ntest = \"write-bw\"\nsizes = [65536]\niters = 200\nmin_bw_vs_calibration = 0.1\n\
         [[perf]]\ntest = \"send-lat\"\niters = 200\nmax_median_us_vs_calibration = 10\n\
         [integrity]\nseconds = 2\n",
    )
    .unwrap();
    let out = vm
        .spawn(
            "qualify",
            &format!(
                "{} qualify --plan {} --report-dir $OUT/qual; echo rc=$?",
                env!("CARGO_BIN_EXE_podnet"),
                plan.display()
            ),
            Duration::from_secs(180),
        )
        .unwrap()
        .wait()
        .unwrap();
    assert!(out.output.contains("rc=0"), "qualify on rxe:\n{}", out.output);
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(vm.out_dir().join("qual/report.json")).unwrap(),
    )
    .unwrap();
    let status = |name: &str| -> String {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no check {name}: {report}"))
    };
    for d in ["rxeA", "rxeB"] {
        assert_eq!(status(&format!("device/{d}/present")), "pass");
        assert_eq!(status(&format!("device/{d}/port_active")), "pass");
        assert_eq!(status(&format!("device/{d}/roce_v2_gid")), "pass");
        assert_eq!(status(&format!("host/{d}/1/netdev_mtu")), "pass");
        // rxe is virtual: no PCI function, no NUMA node.
        assert_eq!(status(&format!("host/{d}/numa_node")), "skipped");
    }
    assert_eq!(status("perf/write-bw/65536B/rxeA<->rxeB/bandwidth"), "pass");
    assert_eq!(status("perf/send-lat/2B/rxeA<->rxeB/median"), "pass");
    assert_eq!(status("integrity/rxeA<->rxeB"), "pass");
    eprintln!("qualify on rxe: {}", out.output.lines().rev().nth(2).unwrap_or(""));
}

/// A 2-rank burn-in across the tap: rank 0 on this host (soft), rank 1 in the guest on rxe
/// (rdma-core), the ring pattern both ways, with nftables dropping 2 % of the RoCE packets
/// arriving in the guest. RC recovers every loss: zero integrity errors.
fn burnin_across_the_tap(vm: &Vm) {
    use std::process::Stdio;
    let podnet = env!("CARGO_BIN_EXE_podnet");
    vm.nft(
        "chain input { type filter hook input priority 0;\n\
           iifname \"eth0\" udp dport 4791 numgen random mod 100 < 2 counter drop\n}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let common = ["--world-size", "2", "--coordinator", "169.254.77.1:29400", "--patterns", "ring"];
    let tail = ["--duration", "4", "--sizes", "4096,65536", "--json", "--join-timeout", "90"];
    let host = vm
        .host_command(podnet)
        .args(["burnin", "--rank", "0", "-d", "soft:169.254.77.1"])
        .args(common)
        .args(tail)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let guest = vm
        .spawn(
            "burnin rank 1",
            &format!(
                "{podnet} burnin --rank 1 -d rxe_eth {} {}; echo rc=$?; nft list table inet podnet | grep -o 'packets [0-9]*'",
                common.join(" "),
                tail.join(" ")
            ),
            Duration::from_secs(240),
        )
        .unwrap()
        .wait()
        .unwrap();
    let o = host.wait_with_output().unwrap();
    vm.nft_reset().unwrap();
    assert!(
        o.status.success(),
        "rank 0 (host, soft): {}{}\nrank 1:\n{}",
        stdout(&o),
        stderr(&o),
        guest.output
    );
    assert!(guest.output.contains("rc=0"), "rank 1 (guest, rxe):\n{}", guest.output);
    let mut checked = 0;
    for (who, text) in [("rank 0", stdout(&o)), ("rank 1", guest.output.clone())] {
        let v: Value = text
            .lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{who}: {text}"));
        assert_eq!(v["ok"], true, "{who}: {v}");
        for e in v["edges"].as_array().unwrap() {
            assert_eq!(e["damaged"], 0, "{who}: {e}");
            if e["end"] == "receiver" {
                assert!(e["messages"].as_u64().unwrap() > 0, "{who}: {e}");
                checked += e["messages"].as_u64().unwrap();
            }
        }
    }
    let dropped =
        guest.output.lines().find_map(|l| l.strip_prefix("packets ")).unwrap_or("?").to_string();
    eprintln!(
        "burn-in across the tap: {checked} messages checked on both ranks, 0 damaged; nftables dropped {dropped} packets"
    );
}

#[test]
fn podnet_rdma_core_on_rxe() {
    let t0 = Instant::now();
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let rxe = vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    vm.warm_up_rxe(env!("CARGO_BIN_EXE_podnet"));
    interop(&vm, rxe.eth.gid4);
    pingpong(&vm, rxe.eth.gid4);
    eprintln!("interop done after {:.1} s", t0.elapsed().as_secs_f64());
    qualify_on_rxe(&vm);
    burnin_across_the_tap(&vm);
    posts_as_perftest_does(&vm, rxe.a.gid4, rxe.b.gid4);
    eprintln!("rdma-core on rxe: {:.1} s", t0.elapsed().as_secs_f64());
}
