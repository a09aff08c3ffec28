//! `podnet devices`: a recorded sysfs tree (an mlx5-like port and Linux rxe's, as the QEMU
//! guest shows them), and the soft devices of a network namespace with a 1500-byte interface.

use std::fs;
use std::path::Path;

use serde_json::Value;

use crate::util::{in_netns, podnet, stderr, stdout};

fn put(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, format!("{text}\n")).unwrap();
}

/// An mlx5-like device on a 9000-byte netdev and rxe as the guest shows it (values recorded
/// there: `podnet devices` read the same files in the QEMU guest, see perf_rxe.rs).
fn tree(root: &Path) {
    let m = "class/infiniband/mlx5_0";
    put(root, &format!("{m}/node_guid"), "b8ce:f603:00a1:b2c3");
    put(root, &format!("{m}/fw_ver"), "22.39.1002");
    put(root, &format!("{m}/ports/1/state"), "4: ACTIVE");
    put(root, &format!("{m}/ports/1/phys_state"), "5: LinkUp");
    put(root, &format!("{m}/ports/1/rate"), "200 Gb/sec (4X HDR)");
    put(root, &format!("{m}/ports/1/link_layer"), "Ethernet");
    put(root, &format!("{m}/ports/1/gids/0"), "fe80:0000:0000:0000:bace:f6ff:fea1:b2c3");
    put(root, &format!("{m}/ports/1/gid_attrs/types/0"), "IB/RoCE v1");
    put(root, &format!("{m}/ports/1/gid_attrs/ndevs/0"), "ens1f0np0");
    put(root, &format!("{m}/ports/1/gids/3"), "0000:0000:0000:0000:0000:ffff:0a00:0001");
    put(root, &format!("{m}/ports/1/gid_attrs/types/3"), "RoCE v2");
    put(root, &format!("{m}/ports/1/gid_attrs/ndevs/3"), "ens1f0np0");
    put(root, &format!("{m}/ports/1/gids/4"), "0000:0000:0000:0000:0000:0000:0000:0000");
    fs::create_dir_all(root.join("drivers/mlx5_core")).unwrap();
    fs::create_dir_all(root.join(format!("{m}/device"))).unwrap();
    std::os::unix::fs::symlink(
        root.join("drivers/mlx5_core"),
        root.join(format!("{m}/device/driver")),
    )
    .unwrap();
    put(root, "class/net/ens1f0np0/mtu", "9000");
    let r = "class/infiniband/rxe_eth";
    put(root, &format!("{r}/node_guid"), "5054:00ff:fe12:3456");
    put(root, &format!("{r}/fw_ver"), "0.0.0");
    put(root, &format!("{r}/parent"), "eth0");
    put(root, &format!("{r}/ports/1/state"), "4: ACTIVE");
    put(root, &format!("{r}/ports/1/phys_state"), "5: LinkUp");
    put(root, &format!("{r}/ports/1/rate"), "2.5 Gb/sec (1X SDR)");
    put(root, &format!("{r}/ports/1/link_layer"), "Ethernet");
    put(root, &format!("{r}/ports/1/gids/1"), "0000:0000:0000:0000:0000:ffff:a9fe:4d02");
    put(root, &format!("{r}/ports/1/gid_attrs/types/1"), "RoCE v2");
    put(root, &format!("{r}/ports/1/gid_attrs/ndevs/1"), "eth0");
    put(root, "class/net/eth0/mtu", "1500");
}

#[test]
fn a_recorded_sysfs_tree_reads_as_ibv_devinfo_and_ibdev2netdev_tell() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let root = dir.path().to_str().unwrap();
    let o = podnet(&["devices", "--json", "--no-soft", "--sysfs-root", root]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let devs = v.as_array().unwrap();
    assert_eq!(devs.len(), 2, "{v}");
    let (m, r) = (&devs[0], &devs[1]);
    assert_eq!((m["name"].as_str(), m["provider"].as_str()), (Some("mlx5_0"), Some("mlx5_core")));
    assert_eq!(m["fw_ver"], "22.39.1002");
    let p = &m["ports"][0];
    assert_eq!((p["state"].as_str(), p["phys_state"].as_str()), (Some("ACTIVE"), Some("LinkUp")));
    assert_eq!((p["speed_gbps"].as_f64(), p["width"].as_str()), (Some(200.0), Some("4X")));
    assert_eq!((p["netdev"].as_str(), p["active_mtu"].as_u64()), (Some("ens1f0np0"), Some(4096)));
    let gids = p["gids"].as_array().unwrap();
    assert_eq!(gids.len(), 2, "the zero GID is left out: {p}");
    assert_eq!((gids[0]["index"].as_u64(), gids[0]["type"].as_str()), (Some(0), Some("RoCE v1")));
    assert_eq!(
        (gids[1]["gid"].as_str(), gids[1]["type"].as_str()),
        (Some("::ffff:10.0.0.1"), Some("RoCE v2"))
    );
    assert_eq!(
        (r["provider"].as_str(), r["ports"][0]["netdev"].as_str()),
        (Some("rxe"), Some("eth0"))
    );
    assert_eq!(r["ports"][0]["active_mtu"], 1024, "1500-byte netdev: {r}");
    // The table.
    let o = podnet(&["devices", "--gids", "--no-soft", "--sysfs-root", root]);
    let t = stdout(&o);
    let row = t.lines().find(|l| l.starts_with("mlx5_0")).expect("a row per port");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "mlx5_0",
            "mlx5_core",
            "1",
            "ACTIVE",
            "LinkUp",
            "4096",
            "200",
            "Gb/s",
            "4X",
            "Ethernet",
            "ens1f0np0",
            "22.39.1002",
            "b8ce:f603:00a1:b2c3"
        ]
    );
    let gid_rows: Vec<Vec<&str>> = t
        .lines()
        .skip_while(|l| !l.starts_with("device   port"))
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(gid_rows.len(), 3, "{t}");
    assert_eq!(gid_rows[2], ["rxe_eth", "1", "1", "::ffff:169.254.77.2", "RoCE", "v2", "eth0"]);
}

#[test]
fn soft_devices_follow_the_interfaces_and_their_mtus() {
    let o = in_netns(
        "ip link add pn0 type veth peer name pn1 && ip link set pn1 up && ip link set pn0 mtu 1500 up && \
         ip addr add 10.9.8.7/24 dev pn0 && $PODNET devices --json",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let find = |name: &str| v.as_array().unwrap().iter().find(|d| d["name"] == name).cloned();
    let lo = find("soft:127.0.0.1").expect("loopback");
    assert_eq!(
        (lo["ports"][0]["active_mtu"].as_u64(), lo["ports"][0]["netdev"].as_str()),
        (Some(4096), Some("lo"))
    );
    let d = find("soft:10.9.8.7").unwrap_or_else(|| panic!("the dummy's address: {v}"));
    assert_eq!(d["ports"][0]["active_mtu"], 1024);
    assert_eq!(d["ports"][0]["state"], "ACTIVE");
    assert_eq!(d["ports"][0]["gids"][0]["gid"], "::ffff:10.9.8.7");
    // Its limits, as ibv_devinfo -v shows a device's.
    let l = &d["limits"];
    assert_eq!((l["max_qp"].as_u64(), l["max_qp_wr"].as_u64()), (Some(16384), Some(16384)), "{d}");
    assert_eq!(l["max_mr_size"].as_u64(), Some(1 << 32), "{d}");
    // A soft device opened there uses that MTU too.
    let o = in_netns(
        "ip link add pn0 type veth peer name pn1 && ip link set pn1 up && ip link set pn0 mtu 1500 up && \
         ip addr add 10.9.8.7/24 dev pn0 && ip addr add 10.9.8.8/24 dev pn0 && \
         $PODNET perf send-lat -n 5 -d soft:10.9.8.7 --timeout 10 > /dev/null & sleep 0.3; \
         $PODNET perf send-lat -n 5 -d soft:10.9.8.8 --timeout 10 10.9.8.7",
    );
    assert!(stdout(&o).contains(" Mtu             : 1024[B]"), "{}{}", stdout(&o), stderr(&o));
}

/// This host has no RDMA device (and, in a mount namespace, no libibverbs): `--provider
/// rdma-core` says which, in one line, and exits 2 — while the soft devices still work.
#[test]
fn rdma_core_on_a_host_without_rdma_says_so_plainly() {
    let one_line = |o: &std::process::Output, want: &str| {
        let e = stderr(o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert_eq!(e.trim().lines().count(), 1, "one line: {e}");
        assert!(e.contains(want), "{want:?} not in {e:?}");
        assert!(!e.contains("panicked"), "{e}");
    };
    if !cfg!(feature = "rdma-core") {
        let o = podnet(&["perf", "write-bw", "--provider", "rdma-core"]);
        one_line(&o, "built without the rdma-core provider");
        return;
    }
    let o = podnet(&["perf", "write-bw", "--provider", "rdma-core", "--timeout", "2"]);
    one_line(&o, "no RDMA device found");
    let o = podnet(&["pingpong", "-d", "mlx5_0"]);
    one_line(&o, "no RDMA device named \"mlx5_0\"");
    let o = podnet(&["perf", "send-lat", "--provider", "soft", "-d", "rxe0"]);
    one_line(&o, "--provider soft drives soft devices");
    let o = podnet(&["perf", "send-lat", "--provider", "rdma-core", "-d", "soft:127.0.0.1"]);
    one_line(&o, "is a soft device");
    // Without libibverbs: a bind mount of /dev/null over it, in a private mount namespace.
    let lib = ["/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib64/libibverbs.so.1"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("libibverbs.so.1 (scripts/deps.sh installs rdma-core's libibverbs1)");
    let o = std::process::Command::new("unshare")
        .args([
            "--mount",
            "sh",
            "-c",
            &format!("mount --bind /dev/null {lib} && exec \"$PODNET\" perf write-bw -d mlx5_0"),
        ])
        .env("PODNET", env!("CARGO_BIN_EXE_podnet"))
        .output()
        .expect("unshare runs");
    one_line(&o, "libibverbs.so.1 (rdma-core) could not be loaded");
    // The soft devices are still listed.
    let o = podnet(&["devices", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v.as_array().unwrap().iter().any(|d| d["provider"] == "soft"), "{v}");
}

/// A `--sysfs-root` that is not a sysfs tree is an error, and a tree without RDMA devices
/// says so and fails rather than printing an empty table.
#[test]
fn a_root_without_devices_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let o = podnet(&["devices", "--no-soft", "--sysfs-root", root]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no class/ folder there"), "{}", stderr(&o));
    fs::create_dir_all(dir.path().join("class/net")).unwrap();
    let o = podnet(&["devices", "--no-soft", "--sysfs-root", root]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("no RDMA devices under"), "{}", stderr(&o));
}

/// GPUs from a two-socket host's sysfs links (`testdata/gpu-host`, written by its make.sh):
/// each with its PCI address, NUMA node and nearest RDMA NIC — under one PCIe switch (PIX),
/// through the host bridge (PHB), the far socket's NIC last (SYS).
#[test]
fn gpus_are_listed_with_the_nic_nearest_each() {
    let root = crate::util::testdata("gpu-host/sys");
    let root = root.to_str().unwrap();
    let o = podnet(&["devices", "--gpus", "--json", "--sysfs-root", root]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let g = v.as_array().unwrap();
    assert_eq!(g.len(), 2, "{v}");
    assert_eq!((g[0]["pci"].as_str(), g[0]["numa_node"].as_i64()), (Some("0000:3c:00.0"), Some(0)));
    assert_eq!(
        (g[0]["nearest_nic"].as_str(), g[0]["distance"].as_str()),
        (Some("mlx5_0"), Some("PIX"))
    );
    assert_eq!(g[0]["nics"][1]["device"], "mlx5_1");
    assert_eq!(g[0]["nics"][1]["distance"], "SYS");
    assert_eq!((g[1]["pci"].as_str(), g[1]["numa_node"].as_i64()), (Some("0000:d8:00.0"), Some(1)));
    assert_eq!(
        (g[1]["nearest_nic"].as_str(), g[1]["distance"].as_str()),
        (Some("mlx5_1"), Some("PHB"))
    );
    let o = podnet(&["devices", "--gpus", "--sysfs-root", root]);
    let text = stdout(&o);
    assert!(
        text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>()
            == ["0000:3c:00.0", "nvidia", "0", "mlx5_0", "PIX", "mlx5_1", "SYS"]),
        "{text}"
    );
    // The device table lists them after the devices; a tree without GPUs says so with --gpus.
    let o = podnet(&["devices", "--no-soft", "--sysfs-root", root]);
    assert!(stdout(&o).contains("nearest nic"), "{}", stdout(&o));
    let empty = tempfile::tempdir().unwrap();
    fs::create_dir_all(empty.path().join("class/net")).unwrap();
    let o = podnet(&["devices", "--gpus", "--sysfs-root", empty.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("no GPU under"), "{}", stderr(&o));
}
