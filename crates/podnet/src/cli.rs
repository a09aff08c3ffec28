//! Command-line flags, parsed once.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// RDMA pod networking: verbs, benchmarks, qualification, burn-in, telemetry and capture
/// analysis for RoCEv2 and InfiniBand pods.
#[derive(Debug, Parser)]
#[command(name = "podnet", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// RoCEv2 packet-capture analysis.
    #[command(subcommand)]
    Capture(CaptureCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum CaptureCommand {
    /// Decode every RoCEv2 frame of a pcap or pcapng file.
    ///
    /// Reads captures of the link types tcpdump writes (Ethernet with 802.1Q/QinQ tags, Linux
    /// cooked SLL and SLL2 from `tcpdump -i any`, raw IP), IPv4 and IPv6. A frame is RoCEv2 when
    /// it is UDP to the RoCEv2 port. Each frame's ICRC is checked; frames whose trailer the
    /// capture's snap length cut are reported as unchecked. The last line counts RoCEv2 frames,
    /// ICRC results and frames that are not RoCEv2 (on stderr with --json).
    ///
    /// Exit status: 0 when the file was read to its end, 2 when it is missing, empty,
    /// truncated or not a capture.
    #[command(after_help = "Examples:\n  podnet capture decode roce.pcap\n  \
        tcpdump -i any -w - udp port 4791 | podnet capture decode --json - | jq .opcode_name")]
    Decode(DecodeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// The capture file (pcap or pcapng); `-` reads standard input.
    pub(crate) file: PathBuf,

    /// One JSON object per RoCEv2 frame on stdout (keys: frame, ip_version, src, dst, src_port,
    /// dst_port, opcode, opcode_name, se, migreq, pad_count, tver, pkey, fecn, becn, dest_qp,
    /// ack_req, psn, reth, aeth, deth, immdt, ieth, atomic_eth, atomic_ack_eth, rdeth, xrceth,
    /// payload_len, icrc, icrc_ok); the summary goes to stderr.
    #[arg(long)]
    pub(crate) json: bool,

    /// UDP destination port that marks RoCEv2.
    #[arg(long, value_name = "PORT", default_value_t = wire::ROCEV2_UDP_PORT)]
    pub(crate) roce_port: u16,
}
