//! Frames the shared vectors lack, emitted by podnet: VLAN and QinQ tags, SLL, SLL2 and raw IP
//! link types, IETH, FETCH_ADD, a multi-packet READ, UC and UD with immediate, RD, XRC, NAKs,
//! a CE-marked CNP and unknown opcodes. They are kept in `testdata/roce/podnet-extra.pcapng`
//! (one interface per link type); `PODNET_REGEN_TESTDATA=1` rewrites it. tshark cross-checks
//! them field by field (`tshark.rs`).

use std::borrow::Cow;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::{PcapNgReader, PcapNgWriter};
use wire::ext::{Aeth, AtomicEth, Deth, Ieth, ImmDt, Rdeth, Reth, XrcEth};
use wire::frame::{FrameBuilder, IpParams, Link, LinkType, VlanTag};
use wire::{Opcode, Psn, QKey, Qpn, RKey, bth, roce};

use crate::util::{self, testdata};

/// One frame: what it shows, its link type and bytes.
pub(crate) struct Extra {
    pub(crate) what: &'static str,
    pub(crate) link: LinkType,
    pub(crate) bytes: Vec<u8>,
}

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

fn v4(id: u16) -> IpParams {
    IpParams::V4 {
        src: Ipv4Addr::new(10, 1, 0, 1),
        dst: Ipv4Addr::new(10, 1, 0, 2),
        tos: 0x02, // ECT(0), as rxe and ConnectX send by default
        ttl: 64,
        id,
    }
}

fn v6() -> IpParams {
    IpParams::V6 {
        src: "fd00:1::1".parse::<Ipv6Addr>().unwrap(),
        dst: "fd00:1::2".parse::<Ipv6Addr>().unwrap(),
        traffic_class: 0x02,
        flow_label: 0,
        hop_limit: 64,
    }
}

fn eth(vlans: Vec<VlanTag>, ip: IpParams) -> FrameBuilder {
    FrameBuilder {
        link: Link::Ethernet { src: MAC_A, dst: MAC_B, vlans },
        ip,
        src_port: 0xc123,
        dst_port: 4791,
        udp_checksum: false,
    }
}

fn hdr(op: u8, qp: u32, psn: u32) -> roce::Repr {
    // Requesters set AckReq on the last packet of a message; responses never do.
    let request = !(0x0d..=0x12).contains(&(op & 0x1f));
    roce::Repr::with_zeroed_headers(bth::Repr {
        ack_req: request && Opcode(op).is_last_or_only(),
        ..bth::Repr::new(Opcode(op), Qpn::new(qp), Psn::new(psn))
    })
}

fn payload(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

/// Every extra frame, in file order.
pub(crate) fn frames() -> Vec<Extra> {
    let mut out = Vec::new();
    let mut add = |what, b: &FrameBuilder, r: roce::Repr, p: &[u8]| {
        out.push(Extra { what, link: b.link.link_type(), bytes: b.build(&r, p).unwrap() });
    };
    let plain4 = eth(vec![], v4(0x1234));
    let plain6 = eth(vec![], v6());

    let b = eth(vec![VlanTag { tpid: 0x8100, pcp: 3, vid: 100 }], v4(1));
    add("RC SEND_ONLY, 802.1Q VLAN 100 PCP 3", &b, hdr(0x04, 0x11, 1), &payload(64, 1));

    let b = eth(
        vec![VlanTag { tpid: 0x88a8, pcp: 0, vid: 10 }, VlanTag { tpid: 0x8100, pcp: 5, vid: 200 }],
        v4(2),
    );
    let mut r = hdr(0x0a, 0x12, 2);
    r.reth = Some(Reth { va: 0x7f00_0000_1000, rkey: RKey(0x0102_0304), dma_len: 64 });
    add("RC RDMA_WRITE_ONLY, QinQ 802.1ad 10 / 802.1Q 200", &b, r, &payload(64, 2));

    let mut r = hdr(0x17, 0x13, 3);
    r.ieth = Some(Ieth { rkey: RKey(0xdead_beef) });
    add("RC SEND_ONLY_WITH_INVALIDATE (IETH)", &plain4, r, &payload(33, 3));

    let mut r = hdr(0x16, 0x13, 4);
    r.ieth = Some(Ieth { rkey: RKey(0x0bad_cafe) });
    add("RC SEND_LAST_WITH_INVALIDATE (IETH), IPv6", &plain6, r, &payload(100, 4));

    let mut r = hdr(0x14, 0x14, 5);
    r.atomic_eth =
        Some(AtomicEth { va: 0x7f00_0000_2008, rkey: RKey(0x55aa_55aa), swap_add: 42, compare: 0 });
    add("RC FETCH_ADD", &plain4, r, &[]);

    // A 10,000-byte READ at a 4096 MTU: request, then three response packets.
    let mut r = hdr(0x0c, 0x15, 100);
    r.reth = Some(Reth { va: 0x7f00_0001_0000, rkey: RKey(0x0000_1234), dma_len: 10_000 });
    add("RC RDMA_READ_REQUEST, 10000 bytes", &plain4, r, &[]);
    let mut r = hdr(0x0d, 0x16, 100);
    r.aeth = Some(Aeth { syndrome: 0x1f, msn: 9 });
    add("RC RDMA_READ_RESPONSE_FIRST", &plain4, r, &payload(4096, 5));
    add("RC RDMA_READ_RESPONSE_MIDDLE", &plain4, hdr(0x0e, 0x16, 101), &payload(4096, 6));
    let mut r = hdr(0x0f, 0x16, 102);
    r.aeth = Some(Aeth { syndrome: 0x1f, msn: 10 });
    add("RC RDMA_READ_RESPONSE_LAST", &plain4, r, &payload(1808, 7));

    let mut r = hdr(0x0b, 0x17, 6);
    r.reth = Some(Reth { va: 0x1000, rkey: RKey(0x77), dma_len: 5 });
    r.immdt = Some(ImmDt { value: 0x0a0b_0c0d });
    add("RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", &plain4, r, &payload(5, 8));

    let mut r = hdr(0x25, 0x21, 7);
    r.immdt = Some(ImmDt { value: 0x1122_3344 });
    add("UC SEND_ONLY_WITH_IMMEDIATE", &plain4, r, &payload(7, 9));
    let mut r = hdr(0x29, 0x21, 8);
    r.immdt = Some(ImmDt { value: 0x5566_7788 });
    add("UC RDMA_WRITE_LAST_WITH_IMMEDIATE", &plain6, r, &payload(12, 10));

    let deth = Deth { qkey: QKey(0x1111_1111), src_qp: Qpn::new(0x42) };
    let mut r = hdr(0x65, 0x31, 9);
    r.deth = Some(deth);
    r.immdt = Some(ImmDt { value: 0xfeed_f00d });
    add("UD SEND_ONLY_WITH_IMMEDIATE", &plain4, r, &payload(128, 11));
    add("UD SEND_ONLY_WITH_IMMEDIATE, IPv6", &plain6, r, &payload(1, 12));

    let rdeth = Some(Rdeth { ee_context: 0x00ab_cdef });
    let mut r = hdr(0x44, 0x41, 10);
    r.rdeth = rdeth;
    r.deth = Some(deth);
    add("RD SEND_ONLY (RDETH, DETH)", &plain4, r, &payload(20, 13));
    let mut r = hdr(0x4c, 0x41, 11);
    r.rdeth = rdeth;
    r.deth = Some(deth);
    r.reth = Some(Reth { va: 0x2000, rkey: RKey(0x99), dma_len: 512 });
    add("RD RDMA_READ_REQUEST (RDETH, DETH, RETH)", &plain4, r, &[]);
    let mut r = hdr(0x51, 0x41, 11);
    r.rdeth = rdeth;
    r.aeth = Some(Aeth { syndrome: 0x00, msn: 3 });
    add("RD ACKNOWLEDGE (RDETH, AETH)", &plain4, r, &[]);

    let mut r = hdr(0xa4, 0x51, 12);
    r.xrceth = Some(XrcEth { xrc_srq: 0x0000_0777 });
    add("XRC SEND_ONLY (XRCETH)", &plain4, r, &payload(16, 14));
    let mut r = hdr(0xa6, 0x51, 13);
    r.xrceth = Some(XrcEth { xrc_srq: 0x0000_0777 });
    r.reth = Some(Reth { va: 0x3000, rkey: RKey(0xaa), dma_len: 8192 });
    add("XRC RDMA_WRITE_FIRST (XRCETH, RETH)", &plain4, r, &payload(4096, 15));

    let mut r = hdr(0x11, 0x18, 14);
    r.aeth = Some(Aeth { syndrome: 0x2e, msn: 20 });
    add("RC ACKNOWLEDGE, RNR NAK timer 14 (1.28 ms)", &plain4, r, &[]);
    let mut r = hdr(0x11, 0x18, 15);
    r.aeth = Some(Aeth { syndrome: 0x62, msn: 20 });
    add("RC ACKNOWLEDGE, NAK remote access error", &plain6, r, &[]);

    let ce = IpParams::V6 {
        src: "fd00:1::1".parse().unwrap(),
        dst: "fd00:1::2".parse().unwrap(),
        traffic_class: 0x03,
        flow_label: 0x5_4321,
        hop_limit: 7,
    };
    let b = FrameBuilder { ip: ce, ..plain6.clone() };
    let mut r = hdr(0x81, 0x19, 0);
    r.bth.becn = true;
    r.bth.ack_req = false;
    add("CNP, IPv6, CE-marked", &b, r, &[0u8; 16]);

    add("unknown opcode 0x18 (RC reserved)", &plain4, hdr(0x18, 0x1a, 16), &payload(8, 16));
    add("unknown opcode 0xc0 (manufacturer)", &plain6, hdr(0xc0, 0x1a, 17), &payload(3, 17));

    let sll = FrameBuilder { link: Link::LinuxSll { src: MAC_A }, ..plain4.clone() };
    add("RC SEND_ONLY, Linux cooked capture (SLL)", &sll, hdr(0x04, 0x1b, 18), &payload(10, 18));
    let sll2 = FrameBuilder { link: Link::LinuxSll2 { src: MAC_A, ifindex: 3 }, ..plain6.clone() };
    let mut r = hdr(0x0a, 0x1b, 19);
    r.reth = Some(Reth { va: 0x4000, rkey: RKey(0xbb), dma_len: 300 });
    add("RC RDMA_WRITE_ONLY, Linux cooked capture v2 (SLL2), IPv6", &sll2, r, &payload(300, 19));
    let raw = FrameBuilder { link: Link::RawIp, udp_checksum: true, ..plain4.clone() };
    let mut r = hdr(0x11, 0x1c, 20);
    r.aeth = Some(Aeth { syndrome: 0x1f, msn: 21 });
    add("RC ACKNOWLEDGE, raw IP, UDP checksum set", &raw, r, &[]);
    out
}

/// The interfaces of the pcapng file, one per link type, in this order.
pub(crate) const LINKS: [LinkType; 4] =
    [LinkType::Ethernet, LinkType::LinuxSll, LinkType::LinuxSll2, LinkType::RawIp];

/// Serializes the frames as pcapng.
pub(crate) fn pcapng(frames: &[Extra]) -> Vec<u8> {
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    for l in LINKS {
        let idb = InterfaceDescriptionBlock {
            linktype: DataLink::from(l.linktype()),
            snaplen: 0,
            options: vec![],
        };
        w.write_pcapng_block(idb).unwrap();
    }
    for (i, f) in frames.iter().enumerate() {
        let epb = EnhancedPacketBlock {
            interface_id: LINKS.iter().position(|l| *l == f.link).unwrap() as u32,
            // pcap-file writes the Duration's nanoseconds as the raw tick count, which a
            // reader takes at the interface's resolution (microseconds: no if_tsresol): so
            // microseconds go in as "nanoseconds". 2025-11-30, 10 µs apart.
            timestamp: Duration::from_nanos(1_764_460_800_000_000 + i as u64 * 10),
            original_len: f.bytes.len() as u32,
            data: Cow::Borrowed(&f.bytes),
            options: vec![],
        };
        w.write_pcapng_block(epb).unwrap();
    }
    w.into_inner()
}

#[test]
fn the_committed_pcapng_is_what_podnet_emits() {
    let path = testdata("roce/podnet-extra.pcapng");
    let now = pcapng(&frames());
    if std::env::var_os("PODNET_REGEN_TESTDATA").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let committed = std::fs::read(&path)
        .expect("testdata/roce/podnet-extra.pcapng (PODNET_REGEN_TESTDATA=1 writes it)");
    assert!(
        committed == now,
        "podnet-extra.pcapng differs from what podnet emits now; rerun with PODNET_REGEN_TESTDATA=1 if the change is intended"
    );
    // And pcap-file reads it back with the right interfaces.
    let mut r = PcapNgReader::new(&committed[..]).unwrap();
    let mut n = 0;
    while let Some(b) = r.next_block() {
        if let pcap_file::pcapng::Block::EnhancedPacket(_) = b.unwrap() {
            n += 1;
        }
    }
    assert_eq!(n, frames().len());
}

#[test]
fn every_extra_frame_decodes_with_icrc_ok() {
    let frames = frames();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extra.pcapng");
    std::fs::write(&path, pcapng(&frames)).unwrap();
    let rows = util::decode_json(&path);
    assert_eq!(rows.len(), frames.len());
    for (row, f) in rows.iter().zip(&frames) {
        assert_eq!(row["icrc_ok"], true, "{}: {row}", f.what);
        assert!(row.get("error").is_none(), "{}: {row}", f.what);
        let op = row["opcode"].as_u64().unwrap() as u8;
        match op {
            0x18 | 0xc0 => assert!(row["opcode_name"].is_null(), "{}", f.what),
            _ => assert!(row["opcode_name"].is_string(), "{}", f.what),
        }
    }
    // Spot checks that the link layers and the extension headers were read.
    let by = |what: &str| &rows[frames.iter().position(|f| f.what.starts_with(what)).unwrap()];
    assert_eq!(by("RC SEND_ONLY_WITH_INVALIDATE")["ieth"], 0xdead_beefu32);
    assert_eq!(by("RC FETCH_ADD")["atomic_eth"]["swap_add"], 42);
    assert_eq!(by("RD RDMA_READ_REQUEST")["rdeth"]["ee_context"], 0xab_cdef);
    assert_eq!(by("RD RDMA_READ_REQUEST")["reth"]["dma_len"], 512);
    assert_eq!(by("XRC RDMA_WRITE_FIRST")["xrceth"]["xrc_srq"], 0x777);
    assert_eq!(by("RC ACKNOWLEDGE, RNR")["aeth"]["syndrome"], 0x2e);
    assert_eq!(by("RC RDMA_WRITE_ONLY, Linux cooked capture v2")["src"], "fd00:1::1");
    assert_eq!(by("RC RDMA_READ_RESPONSE_LAST")["payload_len"], 1808);
    assert_eq!(by("unknown opcode 0xc0")["payload_len"], 3);
}
