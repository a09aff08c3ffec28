//! Writes a synthetic RoCEv2 capture for benchmarks: a mix like a busy RC connection set.
//!
//! `cargo run --release -p podnet-wire --example synth_capture -- FRAMES OUT.pcap`
//!
//! Per 20 frames: 8 ACKs, 5 SEND_ONLY of 64 B, 3 RDMA_WRITE_ONLY of 256 B, 2 READ requests,
//! 2 READ_RESPONSE_ONLY of 1024 B; IPv4, 1 in 4 frames IPv6; 64 QPs. Every frame is valid
//! with a correct ICRC.

use std::io::BufWriter;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use wire::ext::{Aeth, Reth};
use wire::frame::{FrameBuilder, IpParams, Link};
use wire::{Opcode, Psn, Qpn, RKey, bth, roce};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(n), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: synth_capture FRAMES OUT.pcap");
        std::process::exit(2);
    };
    let n: u64 = n.parse().expect("FRAMES is a number");
    let file = std::fs::File::create(&out).expect("create the output file");
    let header = PcapHeader { datalink: pcap_file::DataLink::ETHERNET, ..Default::default() };
    let mut w = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header).unwrap();
    let link = Link::Ethernet { src: [2, 0, 0, 0, 0, 1], dst: [2, 0, 0, 0, 0, 2], vlans: vec![] };
    let payload = vec![0xa5u8; 1024];
    let mut frame = Vec::with_capacity(2048);
    let mut bytes = 0u64;
    for i in 0..n {
        let qp = (i % 64) as u32 + 0x100;
        let psn = Psn::new(i as u32);
        let ip = if i % 4 == 3 {
            IpParams::V6 {
                src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
                dst: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
                traffic_class: 2,
                flow_label: 0,
                hop_limit: 64,
            }
        } else {
            IpParams::V4 {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                tos: 2,
                ttl: 64,
                id: i as u16,
            }
        };
        let b = FrameBuilder {
            link: link.clone(),
            ip,
            src_port: 0xc000 | (qp as u16 & 0x3fff),
            dst_port: 4791,
            udp_checksum: false,
        };
        let (op, len) = match i % 20 {
            0..=7 => (0x11, 0),
            8..=12 => (0x04, 64),
            13..=15 => (0x0a, 256),
            16..=17 => (0x0c, 0),
            _ => (0x10, 1024),
        };
        let mut r = roce::Repr::with_zeroed_headers(bth::Repr::new(Opcode(op), Qpn::new(qp), psn));
        if r.reth.is_some() {
            r.reth = Some(Reth { va: 0x7f00_0000_0000 + i * 64, rkey: RKey(0x1234), dma_len: 256 });
        }
        if r.aeth.is_some() {
            r.aeth = Some(Aeth { syndrome: 0x1f, msn: i as u32 & 0xff_ffff });
        }
        frame.clear();
        b.build_into(&r, &payload[..len], &mut frame).unwrap();
        bytes += frame.len() as u64;
        let ts = Duration::from_nanos(1_764_460_800_000_000_000 + i * 1000);
        w.write_packet(&PcapPacket::new(ts, frame.len() as u32, &frame)).unwrap();
    }
    eprintln!("{n} frames, {bytes} bytes of frames, written to {out}");
}
