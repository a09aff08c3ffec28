//! Driver-independent series: which file of which driver each one comes from.
//!
//! Each normalized counter lists the files that count the same thing, in order of
//! preference; a port takes the first one it has. The table is `docs/metrics.md`'s mapping.

use crate::sample::PortSample;

/// Where a counter lives in a port's sysfs folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Folder {
    /// `counters/` (the IB PMA counters, every IB and RoCE driver but rxe).
    Counters,
    /// `hw_counters/` (the driver's own).
    Hw,
}

/// One driver's file for a normalized counter.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    /// The drivers that name it so (documentation).
    pub drivers: &'static str,
    /// The folder.
    pub folder: Folder,
    /// The file.
    pub file: &'static str,
}

/// A normalized counter: `podnet_rdma_<name>_total{device,port,netdev}`.
#[derive(Debug, Clone, Copy)]
pub struct Normalized {
    /// The name between `podnet_rdma_` and `_total`.
    pub name: &'static str,
    /// What it counts (the metric's HELP).
    pub help: &'static str,
    /// The factor from the file's value (`port_*_data` count 4-byte words).
    pub scale: u64,
    /// Its sources.
    pub aliases: &'static [Alias],
}

const fn c(drivers: &'static str, file: &'static str) -> Alias {
    Alias { drivers, folder: Folder::Counters, file }
}

const fn h(drivers: &'static str, file: &'static str) -> Alias {
    Alias { drivers, folder: Folder::Hw, file }
}

/// Every normalized counter.
pub const NORMALIZED: &[Normalized] = &[
    Normalized {
        name: "port_rcv_data_bytes",
        help: "Bytes received on the port (PMA port_rcv_data, 4-byte words, x4)",
        scale: 4,
        aliases: &[c("IB PMA: mlx5, bnxt_re, irdma, …", "port_rcv_data")],
    },
    Normalized {
        name: "port_xmit_data_bytes",
        help: "Bytes sent on the port (PMA port_xmit_data, 4-byte words, x4)",
        scale: 4,
        aliases: &[c("IB PMA", "port_xmit_data")],
    },
    Normalized {
        name: "port_rcv_packets",
        help: "Packets received on the port",
        scale: 1,
        aliases: &[
            c("IB PMA", "port_rcv_packets"),
            h("rxe, soft", "rcvd_pkts"),
            h("bnxt_re", "rx_pkts"),
        ],
    },
    Normalized {
        name: "port_xmit_packets",
        help: "Packets sent on the port",
        scale: 1,
        aliases: &[
            c("IB PMA", "port_xmit_packets"),
            h("rxe, soft", "sent_pkts"),
            h("bnxt_re", "tx_pkts"),
        ],
    },
    Normalized {
        name: "symbol_errors",
        help: "Physical-layer symbol errors (PMA symbol_error): a bad cable, optic or port",
        scale: 1,
        aliases: &[c("IB PMA", "symbol_error")],
    },
    Normalized {
        name: "link_downed",
        help: "Times the link went down (PMA link_downed)",
        scale: 1,
        aliases: &[c("IB PMA", "link_downed"), h("rxe", "link_downed")],
    },
    Normalized {
        name: "link_error_recovery",
        help: "Link error recoveries (PMA link_error_recovery): link flaps the port survived",
        scale: 1,
        aliases: &[c("IB PMA", "link_error_recovery")],
    },
    Normalized {
        name: "port_rcv_errors",
        help: "Received packets with errors (PMA port_rcv_errors)",
        scale: 1,
        aliases: &[c("IB PMA", "port_rcv_errors"), h("bnxt_re", "rx_roce_errors")],
    },
    Normalized {
        name: "port_xmit_discards",
        help: "Outbound packets discarded (PMA port_xmit_discards)",
        scale: 1,
        aliases: &[c("IB PMA", "port_xmit_discards"), h("bnxt_re", "tx_roce_discards")],
    },
    Normalized {
        name: "port_rcv_discards",
        help: "Inbound RoCE packets discarded by the device",
        scale: 1,
        aliases: &[h("bnxt_re", "rx_roce_discards")],
    },
    Normalized {
        name: "out_of_buffer",
        help: "Packets dropped for want of a receive WQE (mlx5 out_of_buffer)",
        scale: 1,
        aliases: &[h("mlx5", "out_of_buffer")],
    },
    Normalized {
        name: "out_of_sequence",
        help: "Request packets the responder received out of sequence: loss on the path",
        scale: 1,
        aliases: &[h("mlx5", "out_of_sequence"), h("rxe, soft", "out_of_seq_request")],
    },
    Normalized {
        name: "packet_seq_errors",
        help: "PSN sequence error NAKs the requester received: loss on the path",
        scale: 1,
        aliases: &[
            h("mlx5, bnxt_re (new)", "packet_seq_err"),
            h("rxe, soft", "rcvd_seq_err"),
            h("bnxt_re (old)", "seq_err_naks_rcvd"),
        ],
    },
    Normalized {
        name: "implied_nak_seq_errors",
        help: "Responses implying a lost request (READ/atomic responses out of order)",
        scale: 1,
        aliases: &[
            h("mlx5, bnxt_re (new)", "implied_nak_seq_err"),
            h("bnxt_re (old)", "missing_resp"),
        ],
    },
    Normalized {
        name: "local_ack_timeouts",
        help: "Requester ACK timeouts (a transport retry each): loss or a dead peer",
        scale: 1,
        aliases: &[
            h("mlx5, bnxt_re (new), soft", "local_ack_timeout_err"),
            h("bnxt_re (old)", "to_retransmits"),
        ],
    },
    Normalized {
        name: "rnr_nak_retries",
        help: "RNR NAKs the requester received: the peer had no receive posted",
        scale: 1,
        aliases: &[
            h("mlx5, bnxt_re (new)", "rnr_nak_retry_err"),
            h("rxe, soft", "rcvd_rnr_err"),
            h("bnxt_re (old)", "rnr_naks_rcvd"),
            h("irdma", "RNR received"),
        ],
    },
    Normalized {
        name: "rnr_naks_sent",
        help: "RNR NAKs the responder sent",
        scale: 1,
        aliases: &[h("rxe, soft", "send_rnr_err"), h("irdma", "RNR sent")],
    },
    Normalized {
        name: "duplicate_requests",
        help: "Request packets the responder received twice (retransmissions of the peer)",
        scale: 1,
        aliases: &[
            h("mlx5, rxe, soft, bnxt_re (new)", "duplicate_request"),
            h("bnxt_re (old)", "dup_req"),
        ],
    },
    Normalized {
        name: "retry_exceeded",
        help: "Work requests failed with RETRY_EXC_ERR: a connection given up",
        scale: 1,
        aliases: &[h("rxe, soft", "retry_exceeded_err"), h("bnxt_re", "max_retry_exceeded")],
    },
    Normalized {
        name: "cnp_sent",
        help: "Congestion notification packets sent (notification point)",
        scale: 1,
        aliases: &[h("mlx5", "np_cnp_sent"), h("irdma", "cnpSent"), h("soft", "cnp_sent")],
    },
    Normalized {
        name: "cnp_handled",
        help: "Congestion notification packets handled (reaction point): the sender slowed",
        scale: 1,
        aliases: &[h("mlx5", "rp_cnp_handled"), h("irdma", "cnpHandled"), h("soft", "cnp_rcvd")],
    },
    Normalized {
        name: "cnp_ignored",
        help: "Congestion notification packets ignored",
        scale: 1,
        aliases: &[h("mlx5", "rp_cnp_ignored"), h("irdma", "cnpIgnored")],
    },
    Normalized {
        name: "ecn_marked_packets",
        help: "RoCE packets received with ECN congestion experienced",
        scale: 1,
        aliases: &[
            h("mlx5", "np_ecn_marked_roce_packets"),
            h("irdma", "RxECNMrkd"),
            h("soft", "ecn_ce_rcvd"),
        ],
    },
    Normalized {
        name: "req_remote_access_errors",
        help: "Requests NAKed for a remote access error (a bad rkey or range)",
        scale: 1,
        aliases: &[
            h("mlx5, bnxt_re (new)", "req_remote_access_errors"),
            h("bnxt_re (old)", "remote_access_err"),
        ],
    },
    Normalized {
        name: "req_remote_invalid_requests",
        help: "Requests NAKed as invalid",
        scale: 1,
        aliases: &[
            h("mlx5, bnxt_re (new)", "req_remote_invalid_request"),
            h("bnxt_re (old)", "remote_invalid_req_err"),
        ],
    },
];

/// The width of the IB PMA counters that are narrower than 64 bits: they stop at
/// `2^width - 1` and stay there (saturate) until cleared.
pub fn pma_width(file: &str) -> Option<u32> {
    Some(match file {
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => 16,
        "link_error_recovery"
        | "link_downed"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => 8,
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => 4,
        // Without the extended counters these stop at 2^32 - 1.
        "port_xmit_data"
        | "port_rcv_data"
        | "port_xmit_packets"
        | "port_rcv_packets"
        | "port_xmit_wait"
        | "port_unicast_xmit_packets"
        | "port_unicast_rcv_packets"
        | "port_multicast_xmit_packets"
        | "port_multicast_rcv_packets" => 32,
        _ => return None,
    })
}

/// Whether `value` of `file` sits at its saturation value.
pub fn saturated(folder: Folder, file: &str, value: u64) -> bool {
    folder == Folder::Counters && pma_width(file).is_some_and(|w| value == (1u64 << w) - 1)
}

/// A port's value of `n`: (the alias used, the scaled value).
pub fn value(p: &PortSample, n: &Normalized) -> Option<(&'static Alias, u64)> {
    n.aliases.iter().find_map(|a| {
        let m = match a.folder {
            Folder::Counters => &p.counters,
            Folder::Hw => &p.hw_counters,
        };
        m.get(a.file).map(|v| (a, v.saturating_mul(n.scale)))
    })
}

/// The normalized counter called `name`.
pub fn find(name: &str) -> Option<&'static Normalized> {
    NORMALIZED.iter().find(|n| n.name == name)
}
