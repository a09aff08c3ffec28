//! The shared known-good RoCEv2 frames (`testdata/roce/vectors.json`, cross-checked by scapy,
//! an independent ICRC implementation, a ConnectX-4 Lx capture and tshark): every good frame
//! decodes to exactly the recorded fields and its ICRC verifies, every corrupted one fails its
//! ICRC, and `roce::Repr::emit` reproduces each good frame's RoCE part byte for byte.

use serde_json::Value;
use wire::frame::{self, LinkType};
use wire::{icrc, roce};

fn vectors() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/roce/vectors.json");
    let text = std::fs::read_to_string(path).expect("testdata/roce/vectors.json");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["vectors"].as_array().unwrap().clone()
}

fn num(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap(),
        other => panic!("not a number: {other}"),
    }
}

#[test]
fn every_vector_decodes_to_its_recorded_fields() {
    let vs = vectors();
    assert_eq!(vs.len(), 28);
    let mut good = 0;
    for v in &vs {
        let idx = v["index"].as_u64().unwrap();
        let bytes = hex::decode(v["frame_hex"].as_str().unwrap()).unwrap();
        let d = &v["decoded"];
        let f = frame::parse(LinkType::Ethernet, &bytes, wire::ROCEV2_UDP_PORT)
            .unwrap_or_else(|e| panic!("vector {idx}: {e:?}"));
        assert!(f.is_complete(), "vector {idx}");
        // IP and UDP.
        let ip = if d.get("ipv4").is_some() { &d["ipv4"] } else { &d["ipv6"] };
        let addr = |a: std::net::IpAddr| match a {
            std::net::IpAddr::V4(a) => a.to_string(),
            // The vectors spell IPv6 addresses as 32 hex digits.
            std::net::IpAddr::V6(a) => hex::encode(a.octets()),
        };
        assert_eq!(addr(f.ip.src), ip["src"].as_str().unwrap(), "vector {idx}");
        assert_eq!(addr(f.ip.dst), ip["dst"].as_str().unwrap(), "vector {idx}");
        if let Some(tc) = ip.get("tc") {
            assert_eq!(u64::from(f.ip.tos), num(tc), "vector {idx}");
            assert_eq!(u64::from(f.ip.ttl), num(&ip["hop_limit"]), "vector {idx}");
        }
        if let Some(id) = ip.get("id") {
            assert_eq!(u64::from(f.ip.ttl), num(&ip["ttl"]), "vector {idx}");
            assert_eq!(u64::from(f.ip.id.unwrap()), num(id), "vector {idx}");
            assert_eq!(u64::from(f.ip.tos), num(&ip["tos"]), "vector {idx}");
        }
        assert_eq!(u64::from(f.udp.src_port), num(&d["udp"]["sport"]), "vector {idx}");
        assert_eq!(u64::from(f.udp.dst_port), num(&d["udp"]["dport"]), "vector {idx}");
        assert_eq!(u64::from(f.udp.length), num(&d["udp"]["len"]), "vector {idx}");
        // BTH.
        let p = roce::Packet::new_checked(f.roce).unwrap_or_else(|e| panic!("vector {idx}: {e}"));
        let b = p.bth();
        let bj = &d["bth"];
        assert_eq!(u64::from(b.opcode().0), num(&bj["opcode"]), "vector {idx}");
        assert_eq!(b.opcode().name(), bj["opcode_name"].as_str(), "vector {idx}");
        assert_eq!(u64::from(b.solicited()), num(&bj["se"]), "vector {idx}");
        assert_eq!(u64::from(b.mig_req()), num(&bj["migreq"]), "vector {idx}");
        assert_eq!(u64::from(b.pad_count()), num(&bj["padcnt"]), "vector {idx}");
        assert_eq!(u64::from(b.tver()), num(&bj["tver"]), "vector {idx}");
        assert_eq!(u64::from(b.pkey()), num(&bj["pkey"]), "vector {idx}");
        assert_eq!(u64::from(b.fecn()), num(&bj["fecn"]), "vector {idx}");
        assert_eq!(u64::from(b.becn()), num(&bj["becn"]), "vector {idx}");
        assert_eq!(u64::from(b.resv6()), num(&bj["resv6"]), "vector {idx}");
        assert_eq!(u64::from(b.dest_qp().get()), num(&bj["destqp"]), "vector {idx}");
        assert_eq!(u64::from(b.ack_req()), num(&bj["ackreq"]), "vector {idx}");
        assert_eq!(u64::from(b.resv7()), num(&bj["resv7"]), "vector {idx}");
        assert_eq!(u64::from(b.psn().get()), num(&bj["psn"]), "vector {idx}");
        // Extension headers: present exactly when recorded, with the recorded values.
        match d.get("reth") {
            Some(r) => {
                let x = p.reth().unwrap();
                assert_eq!(
                    (x.va, u64::from(x.rkey.0), u64::from(x.dma_len)),
                    (num(&r["va"]), num(&r["rkey"]), num(&r["dmalen"]))
                );
            }
            None => assert!(p.reth().is_none(), "vector {idx}"),
        }
        match d.get("aeth") {
            Some(a) => {
                let x = p.aeth().unwrap();
                assert_eq!(
                    (u64::from(x.syndrome), u64::from(x.msn)),
                    (num(&a["syndrome"]), num(&a["msn"]))
                );
            }
            None => assert!(p.aeth().is_none(), "vector {idx}"),
        }
        match d.get("deth") {
            Some(a) => {
                let x = p.deth().unwrap();
                assert_eq!(
                    (u64::from(x.qkey.0), u64::from(x.src_qp.get())),
                    (num(&a["qkey"]), num(&a["srcqp"]))
                );
            }
            None => assert!(p.deth().is_none(), "vector {idx}"),
        }
        match d.get("immdt") {
            Some(a) => assert_eq!(u64::from(p.immdt().unwrap().value), num(a)),
            None => assert!(p.immdt().is_none(), "vector {idx}"),
        }
        match d.get("atomiceth") {
            Some(a) => {
                let x = p.atomic_eth().unwrap();
                assert_eq!(x.va, num(&a["va"]));
                assert_eq!(u64::from(x.rkey.0), num(&a["rkey"]));
                assert_eq!(x.swap_add, num(&a["swap_add"]));
                assert_eq!(x.compare, num(&a["compare"]));
            }
            None => assert!(p.atomic_eth().is_none(), "vector {idx}"),
        }
        match d.get("atomicacketh") {
            Some(a) => assert_eq!(p.atomic_ack_eth().unwrap().orig, num(&a["orig"])),
            None => assert!(p.atomic_ack_eth().is_none(), "vector {idx}"),
        }
        // Payload, pad and ICRC.
        assert_eq!(p.payload().len() as u64, num(&d["payload_len"]), "vector {idx}");
        // Large payloads are recorded by length only (payload_hex null).
        if let Some(h) = d["payload_hex"].as_str() {
            assert_eq!(hex::encode(p.payload()), h, "vector {idx}");
        }
        assert_eq!(
            hex::encode(p.icrc_bytes()),
            v["icrc_wire_hex"].as_str().unwrap(),
            "vector {idx}"
        );
        let corrupted = v["corrupted"].as_bool().unwrap();
        assert_eq!(f.icrc_ok(), Some(!corrupted), "vector {idx}: ICRC verdict");
        assert_eq!(v["icrc_valid"].as_bool(), Some(!corrupted), "vector {idx}");
        let expected = icrc::compute(f.ip.header, f.udp.header, p.covered()).unwrap();
        assert_eq!(
            hex::encode(expected.to_le_bytes()),
            v["expected_icrc_hex"].as_str().unwrap(),
            "vector {idx}"
        );
        if !corrupted {
            good += 1;
            // emit reproduces BTH … ICRC byte for byte.
            let repr = roce::Repr::parse(&p);
            let mut out = vec![0u8; repr.buffer_len(p.payload().len())];
            let n = repr.emit(p.payload(), &mut out).unwrap();
            assert_eq!(n, f.roce.len(), "vector {idx}");
            icrc::seal(f.ip.header, f.udp.header, &mut out).unwrap();
            assert_eq!(hex::encode(&out), hex::encode(f.roce), "vector {idx}: emit");
        }
    }
    assert_eq!(good, 24);
}

#[test]
fn the_pcap_holds_the_good_vectors_in_order() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/roce/vectors.pcap");
    let file = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
    let good: Vec<String> = vectors()
        .iter()
        .filter(|v| !v["corrupted"].as_bool().unwrap())
        .map(|v| v["frame_hex"].as_str().unwrap().to_string())
        .collect();
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        assert_eq!(hex::encode(&p.data), good[n]);
        let f = frame::parse(LinkType::Ethernet, &p.data, 4791).unwrap();
        assert_eq!(f.icrc_ok(), Some(true));
        n += 1;
    }
    assert_eq!(n, 24);
}

/// The IPv4 ID recovered from the ICRC is the real one, for every IPv4 frame Linux rxe put on
/// the wire in the recorded sessions (incrementing IDs a plain UDP socket never sees), and a
/// damaged packet recovers no ID or a wrong one.
#[test]
fn ipv4_ids_recover_from_rxe_icrcs() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/rxe");
    let (mut checked, mut rejected) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with("-ipv4.pcap") || name.ends_with(".tcp.pcap") {
            continue;
        }
        let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            let f = frame::parse(LinkType::Ethernet, &p.data, 4791).unwrap();
            let id = f.ip.id.unwrap();
            let got = icrc::recover_ipv4_id(f.ip.header, f.udp.header, f.roce).unwrap();
            assert_eq!(got, Some(id), "{name}");
            checked += 1;
            let mut bad = f.roce.to_vec();
            let at = bad.len() / 2;
            bad[at] ^= 0x04;
            if icrc::recover_ipv4_id(f.ip.header, f.udp.header, &bad).unwrap() != Some(id) {
                rejected += 1;
            }
        }
    }
    assert!(checked > 1000, "only {checked} frames");
    assert_eq!(rejected, checked, "a damaged packet recovered the right ID");
}
