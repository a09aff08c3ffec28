#!/usr/bin/env python3
"""Writes the agent's sysfs fixtures (run from this folder; the output is committed).

mlx5/     a ConnectX-6 Dx-like RoCE port: every PMA counter and every RoCE hw_counter the
          field notes list (30), a 9000-byte netdev with statistics, ethtool statistics with
          PFC per priority (mlx5's names) and DCB PFC data (`dcb pfc show`).
bnxt_re/  a bnxt_re-like device: hw_counters with bnxt_re's names, no counters/ folder.
broken/   an mlx5-like device whose files fail: `N/A (no PMA)`, a dangling link (unreadable
          even for root), a non-number, a port whose state cannot be read — beside a healthy
          second device, which must still be served.
rxe/      is recorded in the QEMU guest (crates/podnet/tests/integration/agent_rxe.rs).
"""
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))

PMA = [
    "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
    "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
    "port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets",
    "VL15_dropped",
]
MLX5_HW = [
    "duplicate_request", "implied_nak_seq_err", "local_ack_timeout_err", "np_cnp_sent",
    "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence", "packet_seq_err",
    "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors",
    "req_remote_invalid_request", "resp_cqe_error", "resp_cqe_flush_error",
    "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans", "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests",
    "rx_dct_connect", "rx_icrc_encapsulated", "rx_read_requests", "rx_write_requests",
]
BNXT_HW = [
    "active_qps", "active_srqs", "active_cqs", "active_mrs", "active_mws", "rx_pkts",
    "rx_bytes", "tx_pkts", "tx_bytes", "recoverable_errors", "tx_roce_errors",
    "tx_roce_discards", "rx_roce_errors", "rx_roce_discards", "to_retransmits",
    "seq_err_naks_rcvd", "max_retry_exceeded", "rnr_naks_rcvd", "missing_resp",
    "unrecoverable_err", "bad_resp_err", "local_qp_op_err", "local_protection_err",
    "mem_mgmt_op_err", "remote_invalid_req_err", "remote_access_err", "remote_op_err",
    "dup_req", "res_exceed_max", "res_length_mismatch",
]
NETDEV_STATS = [
    "rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "rx_crc_errors", "tx_bytes",
    "tx_packets", "tx_errors", "tx_dropped", "tx_carrier_errors",
]


def put(root, rel, text):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(f"{text}\n")


def link(root, rel, target):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    os.symlink(target, p)


WIDTH = {
    "symbol_error": 16, "port_rcv_errors": 16, "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16, "port_xmit_discards": 16, "VL15_dropped": 16,
    "link_error_recovery": 8, "link_downed": 8, "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8, "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
}


def value(name, k):
    """A deterministic, distinct value per counter, below its PMA width's saturation."""
    v = 1000 * (k + 1) + sum(map(ord, name)) % 997
    w = WIDTH.get(name)
    return v % ((1 << w) - 1) if w else v


def port(root, dev, n, netdev, gid_v4, rate, counters=True, hw=(), driver_hw=None):
    d = f"class/infiniband/{dev}/ports/{n}"
    put(root, f"{d}/state", "4: ACTIVE")
    put(root, f"{d}/phys_state", "5: LinkUp")
    put(root, f"{d}/rate", rate)
    put(root, f"{d}/link_layer", "Ethernet")
    put(root, f"{d}/gids/0", "fe80:0000:0000:0000:bace:f6ff:fea1:b2c3")
    put(root, f"{d}/gid_attrs/types/0", "IB/RoCE v1")
    put(root, f"{d}/gid_attrs/ndevs/0", netdev)
    put(root, f"{d}/gids/3", gid_v4)
    put(root, f"{d}/gid_attrs/types/3", "RoCE v2")
    put(root, f"{d}/gid_attrs/ndevs/3", netdev)
    if counters:
        for k, c in enumerate(PMA):
            put(root, f"{d}/counters/{c}", value(c, k))
    for k, c in enumerate(hw):
        put(root, f"{d}/hw_counters/{c}", value(c, k))
    if hw:
        put(root, f"{d}/hw_counters/lifespan", 10)


def device(root, dev, driver, guid, fw):
    put(root, f"class/infiniband/{dev}/node_guid", guid)
    put(root, f"class/infiniband/{dev}/fw_ver", fw)
    put(root, f"class/infiniband/{dev}/board_id", "MT_0000000222")
    put(root, f"class/infiniband/{dev}/hca_type", "MT4125")
    os.makedirs(os.path.join(root, f"bus/pci/drivers/{driver}"), exist_ok=True)
    link(root, f"class/infiniband/{dev}/device/driver", f"../../../../bus/pci/drivers/{driver}")


def netdev(root, name, mtu=9000, up=True):
    put(root, f"class/net/{name}/mtu", mtu)
    put(root, f"class/net/{name}/operstate", "up" if up else "down")
    for k, s in enumerate(NETDEV_STATS):
        put(root, f"class/net/{name}/statistics/{s}", value(s, k))


def mlx5(root):
    device(root, "mlx5_0", "mlx5_core", "b8ce:f603:00a1:b2c3", "22.39.1002")
    port(root, "mlx5_0", 1, "ens1f0np0", "0000:0000:0000:0000:0000:ffff:0a00:0001",
         "200 Gb/sec (4X HDR)", hw=MLX5_HW)
    netdev(root, "ens1f0np0")
    lines = ["NIC statistics:", "     rx_packets: 123456", "     tx_packets: 654321"]
    for p in range(8):
        lines += [
            f"     rx_prio{p}_bytes: {p * 1000}", f"     rx_prio{p}_packets: {p * 10}",
            f"     rx_prio{p}_pause: {p * 7 if p == 3 else 0}",
            f"     rx_prio{p}_pause_duration: {p * 700 if p == 3 else 0}",
            f"     rx_prio{p}_pause_transition: 0",
            f"     tx_prio{p}_pause: {p * 4 if p == 3 else 0}",
            f"     tx_prio{p}_pause_duration: {p * 400 if p == 3 else 0}",
        ]
    put(root, "podnet/ethtool/ens1f0np0", "\n".join(lines))
    put(root, "podnet/dcb/ens1f0np0",
        "pfc-cap 8 macsec-bypass off delay 4096\n"
        "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n"
        "requests 0:0 1:0 2:0 3:12 4:0 5:0 6:0 7:0\n"
        "indications 0:0 1:0 2:0 3:21 4:0 5:0 6:0 7:0")


def bnxt(root):
    device(root, "bnxt_re0", "bnxt_en", "0a0b:0cff:fe0d:0e0f", "224.0.110.0")
    port(root, "bnxt_re0", 1, "ens2f0np0", "0000:0000:0000:0000:0000:ffff:0a00:0102",
         "100 Gb/sec (4X EDR)", counters=False, hw=BNXT_HW)
    netdev(root, "ens2f0np0")


def broken(root):
    mlx5(root)
    device(root, "mlx5_1", "mlx5_core", "b8ce:f603:00a1:b2c4", "22.39.1002")
    port(root, "mlx5_1", 1, "ens1f1np1", "0000:0000:0000:0000:0000:ffff:0a00:0002",
         "200 Gb/sec (4X HDR)", hw=MLX5_HW)
    netdev(root, "ens1f1np1")
    d = "class/infiniband/mlx5_1/ports/1"
    put(root, f"{d}/counters/port_xmit_wait", "N/A (no PMA)")
    os.remove(os.path.join(root, f"{d}/counters/symbol_error"))
    link(root, f"{d}/counters/symbol_error", "../../../../../../nowhere/symbol_error")
    put(root, f"{d}/hw_counters/out_of_sequence", "lots")
    # A driver with names node_exporter stumbled over (irdma: spaces, capitals).
    put(root, f"{d}/hw_counters/RNR sent", 5)
    put(root, f"{d}/hw_counters/cnpHandled", 9)
    # A second port whose state file is gone.
    port(root, "mlx5_1", 2, "ens1f1np1", "0000:0000:0000:0000:0000:ffff:0a00:0003",
         "200 Gb/sec (4X HDR)", hw=MLX5_HW[:3])
    os.remove(os.path.join(root, "class/infiniband/mlx5_1/ports/2/state"))
    # A 16-bit PMA counter stuck at its saturation value, and a 32-bit data counter at its.
    put(root, "class/infiniband/mlx5_1/ports/2/counters/symbol_error", 65535)
    put(root, "class/infiniband/mlx5_1/ports/2/counters/port_xmit_data", 4294967295)


def bench(root, devices=8, ports=2, extra=50):
    """The scrape benchmark's host: `devices` mlx5 devices of `ports` ports, each port with
    the 21 PMA counters, the 29 RoCE hw_counters and `extra` more hw_counters (~100 files)."""
    hw = MLX5_HW + [f"extra_counter_{i:02}" for i in range(extra)]
    for d in range(devices):
        dev = f"mlx5_{d}"
        device(root, dev, "mlx5_core", f"b8ce:f603:00a1:b2{d:02x}", "22.39.1002")
        for p in range(1, ports + 1):
            nd = f"ens{d}f{p}np{p}"
            port(root, dev, p, nd, f"0000:0000:0000:0000:0000:ffff:0a00:{d:02x}{p:02x}",
                 "200 Gb/sec (4X HDR)", hw=hw)
            netdev(root, nd)


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--bench":
        shutil.rmtree(sys.argv[2], ignore_errors=True)
        bench(sys.argv[2])
        sys.exit(0)
    for name, build in [("mlx5", mlx5), ("bnxt_re", bnxt), ("broken", broken)]:
        root = os.path.join(HERE, name, "sys")
        shutil.rmtree(root, ignore_errors=True)
        build(root)
        print(f"{name}/sys written")
