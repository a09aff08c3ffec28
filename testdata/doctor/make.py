#!/usr/bin/env python3
"""Writes doctor's hand-made host trees (run from this folder; the output is committed).

Each tree mirrors the live paths doctor reads (sys/..., proc/..., and the kernel log as kmsg)
in the layout `podnet doctor --record` writes, so `podnet doctor --root DIR` diagnoses it.

mlx5-problems/  two ConnectX-like RoCE ports and an NVIDIA GPU with one problem of every kind
                doctor checks: powersave governors, NUMA balancing, THP always, SMT, a NIC at
                Gen3 x8 in a Gen4 x16 slot, corrected AER errors, IRQs on the far node, a
                netdev at MTU 1500, a port without a RoCE v2 GID, strict rp_filter and
                arp_ignore/arp_announce 0 on a multi-rail host, a GPU at x8 of x16, and a
                kernel log with firmware, AER, module, watchdog, error-CQE and link events.
clean/          the same host with every setting right and a quiet log (and newer kernel,
                driver and firmware); clean-b/ the same again, named gpu09: a pod of three
                for `doctor --compare`.
vm-recorded/    is not made here: `podnet doctor --record` on the 2-core development VM.
rxe-guest/      is not made here: `podnet doctor --record` in the QEMU guest with rxe
                (PODNET_DOCTOR_KEEP=DIR and the test doctor_rxe::…).
"""
import json
import math
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def put(root, rel, text):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")


def config_space(mrrs_code):
    """A PCIe function's config space: Mellanox's vendor ID, a capabilities list with the
    PCIe capability at 0x60 (MaxPayload 256 supported and set, MaxReadReq 128 << code)."""
    c = bytearray(256)
    c[0:4] = bytes([0xb3, 0x15, 0x1d, 0x10])  # 15b3:101d
    c[0x06] = 0x10
    c[0x34] = 0x40
    c[0x40:0x42] = bytes([0x01, 0x60])  # power management, next 0x60
    c[0x60:0x62] = bytes([0x10, 0x00])  # PCI Express, last
    c[0x64] = 0x01
    ctl = (1 << 5) | (mrrs_code << 12)
    c[0x68:0x6a] = ctl.to_bytes(2, "little")
    return bytes(c)


def bridge_config(acs_ctl):
    """A PCIe switch port's 4 KiB config space (as root reads it): an ACS extended capability
    (0x000d) at 0x100 with every control supported and ACS Control `acs_ctl`."""
    c = bytearray(4096)
    c[0:4] = bytes([0xb5, 0x10, 0x87, 0x97])  # 10b5:9787, a PCIe switch
    c[0x0e] = 0x01  # a bridge's header
    c[0x100:0x104] = (0x000d | (1 << 16)).to_bytes(4, "little")  # ACS v1, the last
    c[0x104:0x106] = (0x007f).to_bytes(2, "little")
    c[0x106:0x108] = acs_ctl.to_bytes(2, "little")
    return bytes(c)


def aer(kind, counts):
    names = {
        "correctable": ["RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr",
                        "CorrIntErr", "HeaderOF"],
        "fatal": ["Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt",
                  "UnxCmplt", "RxOF", "MalfTLP", "ECRC", "UnsupReq", "ACSViol"],
    }
    names["nonfatal"] = names["fatal"]
    total = {"correctable": "TOTAL_ERR_COR", "fatal": "TOTAL_ERR_FATAL",
             "nonfatal": "TOTAL_ERR_NONFATAL"}[kind]
    lines = [f"{n} {counts.get(n, 0)}" for n in names[kind]]
    lines.append(f"{total} {sum(counts.values())}")
    return "\n".join(lines)


def host(root, bad, name=None):
    shutil.rmtree(root, ignore_errors=True)
    put(root, "proc/sys/kernel/hostname", name or ("gpu07" if bad else "gpu08"))
    put(root, "proc/sys/kernel/osrelease", "6.1.0-18-amd64" if bad else "6.1.0-21-amd64")
    put(root, "sys/module/mlx5_core/version", "23.10-1.1.9" if bad else "24.04-0.6.6")
    put(root, "proc/uptime", "86400.00 170000.00")
    put(root, "proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.1.0-18-amd64 root=/dev/sda1 ro"
        + (" intel_iommu=on iommu=pt" if bad else ""))
    for c in range(4):
        gov = "powersave" if bad and c < 2 else "performance"
        put(root, f"sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor", gov)
    put(root, "sys/devices/system/cpu/smt/active", "1" if bad else "0")
    put(root, "sys/devices/system/cpu/cpufreq/boost", "0" if bad else "1")
    for n, (name, lat) in enumerate([("POLL", 0), ("C1", 2), ("C1E", 10), ("C6", 133)]):
        st = f"sys/devices/system/cpu/cpu0/cpuidle/state{n}"
        put(root, f"{st}/name", name)
        put(root, f"{st}/latency", str(lat))
        put(root, f"{st}/disable", "1" if name == "C6" and not bad else "0")
    put(root, "proc/sys/kernel/numa_balancing", "1" if bad else "0")
    put(root, "sys/kernel/mm/transparent_hugepage/enabled",
        "[always] madvise never" if bad else "always [madvise] never")
    # Huge pages of 2 MiB: on the problem host all taken, and all on node 1 (the NICs are on
    # node 0); on the clean one half free, on node 0.
    hp = "sys/kernel/mm/hugepages/hugepages-2048kB"
    put(root, f"{hp}/nr_hugepages", "1024")
    put(root, f"{hp}/free_hugepages", "0" if bad else "512")
    for node in range(2):
        on = (node == 1) if bad else (node == 0)
        put(root, f"sys/devices/system/node/node{node}/hugepages/hugepages-2048kB/nr_hugepages",
            "1024" if on else "0")
    for i, (dev, pci, nd, irq0) in enumerate([("mlx5_0", "0000:3b:00.0", "ens1f0np0", 120),
                                               ("mlx5_1", "0000:3b:00.1", "ens1f1np1", 140)]):
        d = f"sys/class/infiniband/{dev}"
        put(root, f"{d}/fw_ver", "22.36.1010" if bad else "22.39.1002")
        put(root, f"{d}/board_id", "MT_0000000359")
        put(root, f"{d}/device/uevent", f"DRIVER=mlx5_core\nPCI_CLASS=20000\nPCI_SLOT_NAME={pci}")
        slow = bad and i == 0
        put(root, f"{d}/device/current_link_speed", "8.0 GT/s PCIe" if slow else "16.0 GT/s PCIe")
        put(root, f"{d}/device/max_link_speed", "16.0 GT/s PCIe")
        put(root, f"{d}/device/current_link_width", "8" if slow else "16")
        put(root, f"{d}/device/max_link_width", "16")
        put(root, f"{d}/device/aer_dev_correctable",
            aer("correctable", {"RxErr": 12, "BadTLP": 3} if slow else {}))
        put(root, f"{d}/device/aer_dev_nonfatal", aer("nonfatal", {}))
        put(root, f"{d}/device/aer_dev_fatal", aer("fatal", {}))
        put(root, f"{d}/device/numa_node", "0")
        put(root, f"{d}/device/iommu_group/type", "DMA-FQ" if slow else "identity")
        with open(os.path.join(root, f"{d}/device/config"), "wb") as f:
            f.write(config_space(2 if slow else 5))  # MaxReadReq 512, or 4096
        put(root, f"{d}/device/local_cpulist", "0-1")
        for k in range(2):
            irq = irq0 + k
            put(root, f"{d}/device/msi_irqs/{irq}", "msix")
            put(root, f"proc/irq/{irq}/smp_affinity_list", "2-3" if slow and k == 0 else str(k))
        p = f"{d}/ports/1"
        put(root, f"{p}/link_layer", "Ethernet")
        put(root, f"{p}/gid_attrs/ndevs/0", nd)
        put(root, f"{p}/gid_attrs/ndevs/1", nd)
        put(root, f"{p}/gid_attrs/types/0", "IB/RoCE v1")
        put(root, f"{p}/gid_attrs/types/1", "IB/RoCE v1" if bad and i == 1 else "RoCE v2")
        put(root, f"sys/class/net/{nd}/mtu", "1500" if bad and i == 0 else "9000")
        put(root, f"sys/class/net/{nd}/speed", "100000")
        for prio in range(8):
            put(root, f"sys/class/net/{nd}/ecn/roce_np/enable/{prio}", "0" if bad and i == 0 else "1")
            put(root, f"sys/class/net/{nd}/ecn/roce_rp/enable/{prio}", "1")
        # What `ethtool --show-fec` and `ethtool -S` print (mlx5's names).
        fec = "Off" if bad and i == 0 else "RS"
        # `ethtool -I --show-fec` (ethtool 6.1's netlink/fec.c: per-lane lines under each).
        corr, uncorr = (123456789, 37) if bad and i == 1 else (1024, 0)
        put(root, f"cmd/ethtool-show-fec-{nd}", "\n".join([
            f"FEC parameters for {nd}:", "Supported/Configured FEC encodings: Auto RS BaseR",
            f"Active FEC encoding: {fec}", "Statistics:", f"  corrected_blocks: {corr}",
            f"    Lane 0: {corr}", f"  uncorrectable_blocks: {uncorr}", f"    Lane 0: {uncorr}"]))
        # `ethtool --show-module` (netlink/module.c): the first rail's module in low power.
        low_power = bad and i == 0
        put(root, f"cmd/ethtool-show-module-{nd}", "\n".join([
            f"Module parameters for {nd}:", "power-mode-policy: auto",
            f"power-mode: {'low' if low_power else 'high'}"]))
        pfc = "0:off 1:off 2:off 3:off" if bad and i == 0 else "0:off 1:off 2:off 3:on"
        # `dcb app show` (iproute2's dcb_app.c; DSCP names where iproute2 knows them): the
        # problem host maps only CNPs' DSCP (CS6, 48) to priority 6, not RoCE's 26 to 3.
        put(root, f"cmd/dcb-app-{nd}", "dscp-prio CS6:6" if bad else "dscp-prio 26:3 CS6:6")
        put(root, f"cmd/dcb-pfc-{nd}", f"pfc-cap 8 macsec-bypass off delay 4096\nprio-pfc {pfc} 4:off 5:off 6:off 7:off")
        rx = 1024 if bad and i == 0 else 8192
        put(root, f"cmd/ethtool-g-{nd}", "\n".join([
            f"Ring parameters for {nd}:", "Pre-set maximums:", "RX:\t\t8192", "RX Mini:\tn/a",
            "RX Jumbo:\tn/a", "TX:\t\t8192", "Current hardware settings:", f"RX:\t\t{rx}",
            "RX Mini:\tn/a", "RX Jumbo:\tn/a", f"TX:\t\t{rx}"]))
        hot = bad and i == 1
        put(root, f"cmd/ethtool-m-{nd}", "\n".join([
            "\tIdentifier                                : 0x11 (QSFP28)",
            "\tVendor name                               : NVIDIA",
            f"\tModule temperature                        : {74.12 if hot else 45.27:.2f} degrees C / 165.42 degrees F",
            "\tModule temperature high alarm threshold   : 80.00 degrees C / 176.00 degrees F",
            "\tModule temperature high warning threshold : 70.00 degrees C / 158.00 degrees F",
        ] + [
            # Receive power per lane (qsfp.c); the hot module's third lane is dim.
            f"\tRcvr signal avg optical power(Channel {ch})  : {0.0700 if hot and ch == 3 else 0.8123:.4f} mW / "
            f"{10 * math.log10(0.0700 if hot and ch == 3 else 0.8123):.2f} dBm" for ch in range(1, 5)
        ] + [
            "\tLaser rx power low alarm threshold        : 0.0467 mW / -13.31 dBm",
            "\tLaser rx power low warning threshold      : 0.0933 mW / -10.30 dBm",
        ]))
        phy = bad and i == 1
        put(root, f"cmd/ethtool-S-{nd}", "\n".join([
            "NIC statistics:",
            "     rx_packets: 81234567",
            "     tx_packets: 79123456",
            f"     rx_crc_errors_phy: {17 if phy else 0}",
            f"     rx_pcs_symbol_err_phy: {1234 if phy else 0}",
            f"     rx_corrected_bits_phy: {987654 if phy else 12}",
            f"     link_down_events_phy: {3 if phy else 0}",
        ]))
        for key, good, worse in [("rp_filter", "2", "0"), ("arp_ignore", "1", "0"),
                                 ("arp_announce", "2", "0")]:
            put(root, f"proc/sys/net/ipv4/conf/{nd}/{key}", worse if bad else good)
    for key, good, worse in [("rp_filter", "2", "1"), ("arp_ignore", "1", "0"),
                             ("arp_announce", "2", "0")]:
        put(root, f"proc/sys/net/ipv4/conf/all/{key}", worse if bad else good)
    # What `ip -j -4 addr show` and `ip -j rule show` print: one address per rail, and (on
    # the clean host) a rule per rail's source.
    addr = lambda nd, a: {"ifname": nd, "addr_info": [{"family": "inet", "local": a, "prefixlen": 24}]}
    put(root, "cmd/ip-addr.json", json.dumps([addr("lo", "127.0.0.1"), addr("ens1f0np0", "10.1.7.1"),
                                               addr("ens1f1np1", "10.2.7.1")]))
    rules = [{"priority": 0, "src": "all", "table": "local"}]
    if not bad:
        rules += [{"priority": 100, "src": "10.1.7.1", "table": "101"},
                  {"priority": 101, "src": "10.2.7.0", "srclen": 24, "table": "102"}]
    rules += [{"priority": 32766, "src": "all", "table": "main"},
              {"priority": 32767, "src": "all", "table": "default"}]
    put(root, "cmd/ip-rule.json", json.dumps(rules))
    if bad:  # what `pgrep -x irqbalance` prints
        put(root, "cmd/pgrep-irqbalance", "1187")
    # What `devlink -j health show` prints.
    rep = lambda name, state, err, rec: {"reporter": name, "state": state, "error": err,
                                          "recover": rec, "grace_period": 500,
                                          "auto_recover": True, "auto_dump": True}
    put(root, "cmd/devlink-health.json", json.dumps({"health": {
        "pci/0000:3b:00.0": [rep("fw", "healthy", 2 if bad else 0, 2 if bad else 0),
                             rep("fw_fatal", "error" if bad else "healthy", 1 if bad else 0, 0)],
        "pci/0000:3b:00.1": [rep("fw", "healthy", 0, 0), rep("fw_fatal", "healthy", 0, 0)],
    }}))
    # An NVIDIA GPU (3D controller), and a NIC function that is not a GPU.
    g = "sys/bus/pci/devices/0000:5e:00.0"
    put(root, f"{g}/class", "0x030200")
    put(root, f"{g}/vendor", "0x10de")
    put(root, f"{g}/current_link_speed", "32.0 GT/s PCIe")
    put(root, f"{g}/max_link_speed", "32.0 GT/s PCIe")
    put(root, f"{g}/current_link_width", "8" if bad else "16")
    put(root, f"{g}/max_link_width", "16")
    # A second GPU beside the NICs under one PCIe switch (root port 38:00.0, upstream 39:00.0,
    # downstream 3a:00.0 to the NICs and 3a:01.0 to the GPU): what `ls -l /sys/bus/pci/devices`
    # prints, and the downstream ports' ACS (the problem host redirects peer-to-peer: SV, RR,
    # CR, UF on; the clean one source validation only).
    g2 = "sys/bus/pci/devices/0000:3c:00.0"
    put(root, f"{g2}/class", "0x030200")
    put(root, f"{g2}/vendor", "0x10de")
    put(root, f"{g2}/current_link_speed", "32.0 GT/s PCIe")
    put(root, f"{g2}/max_link_speed", "32.0 GT/s PCIe")
    put(root, f"{g2}/current_link_width", "16")
    put(root, f"{g2}/max_link_width", "16")
    tree = {
        "0000:38:00.0": "pci0000:38/0000:38:00.0",
        "0000:39:00.0": "pci0000:38/0000:38:00.0/0000:39:00.0",
        "0000:3a:00.0": "pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0",
        "0000:3a:01.0": "pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:01.0",
        "0000:3b:00.0": "pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0/0000:3b:00.0",
        "0000:3b:00.1": "pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:00.0/0000:3b:00.1",
        "0000:3c:00.0": "pci0000:38/0000:38:00.0/0000:39:00.0/0000:3a:01.0/0000:3c:00.0",
        "0000:5d:00.0": "pci0000:5d/0000:5d:00.0",
        "0000:5e:00.0": "pci0000:5d/0000:5d:00.0/0000:5e:00.0",
    }
    put(root, "cmd/pci-devices", "\n".join(["total 0"] + [
        f"lrwxrwxrwx 1 root root 0 Dec  5 09:12 {bdf} -> ../../../devices/{path}"
        for bdf, path in sorted(tree.items())]))
    for port in ["0000:3a:00.0", "0000:3a:01.0"]:
        p = os.path.join(root, f"sys/bus/pci/devices/{port}/config")
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(bridge_config(0x001d if bad else 0x0001))
        put(root, f"sys/bus/pci/devices/{port}/class", "0x060400")
    put(root, "sys/bus/pci/devices/0000:3b:00.0/class", "0x020000")
    put(root, "sys/bus/pci/devices/0000:3b:00.0/vendor", "0x15b3")
    # The kernel log as /dev/kmsg gives it (PRIO,SEQ,USEC,FLAGS;text and the device).
    quiet = [
        (6, 0, "Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)"),
        (6, 2100000, "mlx5_core 0000:3b:00.0: firmware version: 22.39.1002"),
        (6, 2300000, "mlx5_core 0000:3b:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 97656Mbps"),
    ]
    events = [
        (6, 410000, "pci 0000:3b:00.0: 63.008 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x8 link at 0000:3a:00.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)"),
        (4, 4908274589, "pcieport 0000:3a:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"),
        (4, 5776242699, "pcieport 0000:3a:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"),
        (6, 7130100000, "mlx5_core 0000:3b:00.1: Port module event: module 1, Cable unplugged"),
        (6, 7131100000, "mlx5_core 0000:3b:00.1: Port module event: module 1, Cable plugged"),
        (3, 8150000000, "NETDEV WATCHDOG: ens1f0np0 (mlx5_core): transmit queue 3 timed out 5376 ms"),
        (3, 8160000000, "mlx5_core 0000:3b:00.0 ens1f0np0: Error cqe on cqn 0x40a, ci 0x1d, qn 0x12f4, opcode 0xd, syndrome 0x4, vendor syndrome 0x51"),
        (3, 9017982092, "mlx5_core 0000:3b:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count"),
        (6, 9170000000, "mlx5_core 0000:3b:00.1 ens1f1np1: Link down"),
        (6, 9171000000, "mlx5_core 0000:3b:00.1 ens1f1np1: Link up"),
    ]
    lines = sorted(quiet + (events if bad else []), key=lambda e: e[1])
    kmsg = []
    for seq, (prio, us, text) in enumerate(lines):
        kmsg.append(f"{prio},{seq},{us},-;{text}")
        if text.startswith("mlx5_core"):
            kmsg.append(" SUBSYSTEM=pci")
            kmsg.append(f" DEVICE=+pci:{text.split()[1].rstrip(':')}")
    put(root, "kmsg", "\n".join(kmsg))


host(os.path.join(HERE, "mlx5-problems"), True)
host(os.path.join(HERE, "clean"), False)
host(os.path.join(HERE, "clean-b"), False, "gpu09")
