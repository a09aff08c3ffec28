//! Property tests: emit → parse round trips for every opcode, IPv4 and IPv6, payloads of
//! 0..=4096 bytes, through whole frames with every link type.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use wire::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Rdeth, Reth, XrcEth};
use wire::frame::{self, FrameBuilder, IpParams, Link, VlanTag};
use wire::{Opcode, Psn, QKey, Qpn, RKey, bth, roce};

fn arb_bth() -> impl Strategy<Value = bth::Repr> {
    (any::<u8>(), any::<[bool; 6]>(), any::<u16>(), 0u32..1 << 24, 0u32..1 << 24).prop_map(
        |(op, f, pkey, qp, psn)| bth::Repr {
            opcode: Opcode(op),
            solicited: f[0],
            mig_req: f[1],
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: f[2],
            becn: f[3],
            dest_qp: Qpn::new(qp),
            ack_req: f[4],
            psn: Psn::new(psn),
        },
    )
}

prop_compose! {
    fn arb_repr()(bth in arb_bth(), a in any::<[u64; 4]>(), b in any::<[u32; 6]>(), syn in any::<u8>()) -> roce::Repr {
        let mut r = roce::Repr::with_zeroed_headers(bth);
        let e = bth.opcode.ext_headers();
        use wire::ExtHeaders as H;
        if e.contains(H::RDETH) { r.rdeth = Some(Rdeth { ee_context: b[0] & 0xff_ffff }); }
        if e.contains(H::DETH) { r.deth = Some(Deth { qkey: QKey(b[1]), src_qp: Qpn::new(b[2]) }); }
        if e.contains(H::XRCETH) { r.xrceth = Some(XrcEth { xrc_srq: b[3] & 0xff_ffff }); }
        if e.contains(H::RETH) { r.reth = Some(Reth { va: a[0], rkey: RKey(b[4]), dma_len: b[5] }); }
        if e.contains(H::ATOMIC_ETH) {
            r.atomic_eth = Some(AtomicEth { va: a[0], rkey: RKey(b[4]), swap_add: a[1], compare: a[2] });
        }
        if e.contains(H::AETH) { r.aeth = Some(Aeth { syndrome: syn, msn: b[5] & 0xff_ffff }); }
        if e.contains(H::ATOMIC_ACK_ETH) { r.atomic_ack_eth = Some(AtomicAckEth { orig: a[3] }); }
        if e.contains(H::IMMDT) { r.immdt = Some(ImmDt { value: b[0] }); }
        if e.contains(H::IETH) { r.ieth = Some(Ieth { rkey: RKey(b[1]) }); }
        r
    }
}

fn arb_builder() -> impl Strategy<Value = FrameBuilder> {
    let link = prop_oneof![
        Just(Link::Ethernet { src: [2, 0, 0, 0, 0, 1], dst: [2, 0, 0, 0, 0, 2], vlans: vec![] }),
        (0u16..4095, 0u8..8).prop_map(|(vid, pcp)| Link::Ethernet {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlans: vec![VlanTag { tpid: 0x8100, pcp, vid }],
        }),
        (0u16..4095, 0u16..4095).prop_map(|(a, b)| Link::Ethernet {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlans: vec![
                VlanTag { tpid: 0x88a8, pcp: 3, vid: a },
                VlanTag { tpid: 0x8100, pcp: 5, vid: b }
            ],
        }),
        Just(Link::LinuxSll { src: [2, 0, 0, 0, 0, 1] }),
        Just(Link::LinuxSll2 { src: [2, 0, 0, 0, 0, 1], ifindex: 7 }),
        Just(Link::RawIp),
    ];
    let ip = prop_oneof![
        (any::<u32>(), any::<u32>(), any::<u8>(), 1u8.., any::<u16>()).prop_map(
            |(s, d, tos, ttl, id)| {
                IpParams::V4 { src: Ipv4Addr::from(s), dst: Ipv4Addr::from(d), tos, ttl, id }
            }
        ),
        (any::<u128>(), any::<u128>(), any::<u8>(), 0u32..1 << 20, any::<u8>()).prop_map(
            |(s, d, traffic_class, flow_label, hop_limit)| IpParams::V6 {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                traffic_class,
                flow_label,
                hop_limit,
            }
        ),
    ];
    (link, ip, any::<u16>(), any::<bool>()).prop_map(|(link, ip, src_port, udp_checksum)| {
        FrameBuilder { link, ip, src_port, dst_port: 4791, udp_checksum }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn emit_parse_round_trip(repr in arb_repr(), builder in arb_builder(), payload in proptest::collection::vec(any::<u8>(), 0..=4096)) {
        let payload: &[u8] = if repr.bth.opcode.has_payload() { &payload } else { &[] };
        let bytes = builder.build(&repr, payload).unwrap();
        let f = frame::parse(builder.link.link_type(), &bytes, 4791).unwrap();
        prop_assert!(f.is_complete());
        prop_assert_eq!(f.icrc_ok(), Some(true));
        prop_assert_eq!(f.udp.src_port, builder.src_port);
        if let Link::Ethernet { vlans, .. } = &builder.link {
            let got: Vec<VlanTag> = f.vlans.iter().flatten().copied().collect();
            prop_assert_eq!(&got, vlans);
        }
        match builder.ip {
            IpParams::V4 { src, dst, tos, ttl, id } => {
                prop_assert_eq!(f.ip.src, src);
                prop_assert_eq!(f.ip.dst, dst);
                prop_assert_eq!((f.ip.tos, f.ip.ttl, f.ip.id), (tos, ttl, Some(id)));
            }
            IpParams::V6 { src, dst, traffic_class, hop_limit, .. } => {
                prop_assert_eq!(f.ip.src, src);
                prop_assert_eq!(f.ip.dst, dst);
                prop_assert_eq!((f.ip.tos, f.ip.ttl), (traffic_class, hop_limit));
            }
        }
        let p = roce::Packet::new_checked(f.roce).unwrap();
        prop_assert_eq!(p.payload(), payload);
        let pad = roce::pad_for(payload.len());
        prop_assert_eq!(p.bth().pad_count(), pad);
        let back = roce::Repr::parse(&p);
        prop_assert_eq!(back, roce::Repr { bth: bth::Repr { pad_count: pad, ..repr.bth }, ..repr });
        prop_assert_eq!(roce::Repr::parse_headers(f.roce).unwrap(), back);
        // Re-emitting the parsed packet gives the same bytes.
        let mut again = vec![0u8; back.buffer_len(payload.len())];
        back.emit(p.payload(), &mut again).unwrap();
        wire::icrc::seal(f.ip.header, f.udp.header, &mut again).unwrap();
        prop_assert_eq!(&again[..], f.roce);
        // Any single flipped bit in the invariant part fails the ICRC.
        let mut bad = bytes.clone();
        let roce_at = bytes.len() - f.roce.len();
        let flip = roce_at + (payload.len() + 7) % (f.roce.len() - 4);
        if flip != roce_at + 4 {
            bad[flip] ^= 0x10;
            let g = frame::parse(builder.link.link_type(), &bad, 4791).unwrap();
            prop_assert_eq!(g.icrc_ok(), Some(false));
        }
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        for link in [frame::LinkType::Ethernet, frame::LinkType::LinuxSll, frame::LinkType::LinuxSll2, frame::LinkType::RawIp] {
            if let Ok(f) = frame::parse(link, &data, 4791) {
                let _ = f.icrc_ok();
                let _ = roce::Repr::parse_headers(f.roce);
            }
        }
        if let Ok(p) = roce::Packet::new_checked(&data[..]) {
            let _ = (p.payload(), roce::Repr::parse(&p), p.icrc());
        }
    }
}
