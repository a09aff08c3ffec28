//! `podnet capture decode`: the JSON schema against the shared vectors, ICRC verdicts, cut
//! frames, frames that are not RoCEv2, pcapng and stdin, and bad input.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::util::{self, podnet, stderr, stdout, testdata, write_pcap};

fn vectors() -> Vec<Value> {
    let text = std::fs::read_to_string(testdata("roce/vectors.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v["vectors"].as_array().unwrap().clone()
}

fn hexnum(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap(),
        _ => panic!("{v}"),
    }
}

const KEYS: &[&str] = &[
    "frame",
    "ip_version",
    "src",
    "dst",
    "src_port",
    "dst_port",
    "opcode",
    "opcode_name",
    "se",
    "migreq",
    "pad_count",
    "tver",
    "pkey",
    "fecn",
    "becn",
    "dest_qp",
    "ack_req",
    "psn",
    "reth",
    "aeth",
    "deth",
    "immdt",
    "ieth",
    "atomic_eth",
    "atomic_ack_eth",
    "rdeth",
    "xrceth",
    "payload_len",
    "icrc",
    "icrc_ok",
    "ts_ns",
    "dscp",
    "ecn",
    "ttl",
    "ip_id",
    "encap",
];

#[test]
fn json_matches_every_recorded_vector_field() {
    let vs = vectors();
    // All 28 frames, the 4 corrupted ones included, in index order.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.pcap");
    let frames: Vec<(Vec<u8>, u32)> = vs
        .iter()
        .map(|v| {
            let b = hex::decode(v["frame_hex"].as_str().unwrap()).unwrap();
            let n = b.len() as u32;
            (b, n)
        })
        .collect();
    write_pcap(&path, 1, &frames);
    let (rows, summary) = util::decode_json_and_summary(&path);
    assert_eq!(rows.len(), 28);
    // The keys added since the first release come after the first ones, in this order.
    let line = stdout(&podnet(&["capture", "decode", "--json", path.to_str().unwrap()]));
    let first = line.lines().next().unwrap();
    let at = |k: &str| first.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("{k}: {first}"));
    assert!(
        at("icrc_ok") < at("ts_ns")
            && at("ts_ns") < at("dscp")
            && at("dscp") < at("ecn")
            && at("ecn") < at("ttl")
            && at("ttl") < at("ip_id"),
        "{first}"
    );
    for (v, row) in vs.iter().zip(&rows) {
        let idx = v["index"].as_u64().unwrap();
        let keys: Vec<&str> = row.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        let mut want: Vec<&str> = KEYS.to_vec();
        want.sort();
        let mut got = keys.clone();
        got.sort();
        assert_eq!(got, want, "vector {idx}: keys");
        let d = &v["decoded"];
        let bth = &d["bth"];
        assert_eq!(row["frame"], idx + 1);
        let (ipv, ip) = if d.get("ipv4").is_some() { (4, &d["ipv4"]) } else { (6, &d["ipv6"]) };
        assert_eq!(row["ip_version"], ipv);
        let addr = |s: &str| -> String {
            if ipv == 4 {
                s.to_string()
            } else {
                let b: [u8; 16] = hex::decode(s).unwrap().try_into().unwrap();
                std::net::Ipv6Addr::from(b).to_string()
            }
        };
        assert_eq!(row["src"], addr(ip["src"].as_str().unwrap()), "vector {idx}");
        assert_eq!(row["dst"], addr(ip["dst"].as_str().unwrap()), "vector {idx}");
        assert_eq!(row["src_port"], d["udp"]["sport"]);
        assert_eq!(row["dst_port"], d["udp"]["dport"]);
        assert_eq!(row["opcode"], bth["opcode"], "vector {idx}");
        assert_eq!(row["opcode_name"], bth["opcode_name"], "vector {idx}");
        for (k, j) in [
            ("se", "se"),
            ("migreq", "migreq"),
            ("fecn", "fecn"),
            ("becn", "becn"),
            ("ack_req", "ackreq"),
        ] {
            assert_eq!(row[k].as_bool().unwrap(), bth[j] == 1, "vector {idx}: {k}");
        }
        for (k, j) in [
            ("pad_count", "padcnt"),
            ("tver", "tver"),
            ("pkey", "pkey"),
            ("dest_qp", "destqp"),
            ("psn", "psn"),
        ] {
            assert_eq!(row[k], bth[j], "vector {idx}: {k}");
        }
        match d.get("reth") {
            Some(r) => {
                assert_eq!(row["reth"]["va"].as_u64().unwrap(), hexnum(&r["va"]));
                assert_eq!(row["reth"]["rkey"].as_u64().unwrap(), hexnum(&r["rkey"]));
                assert_eq!(row["reth"]["dma_len"], r["dmalen"]);
            }
            None => assert!(row["reth"].is_null()),
        }
        match d.get("aeth") {
            Some(a) => assert_eq!(
                row["aeth"],
                serde_json::json!({"syndrome": a["syndrome"], "msn": a["msn"]})
            ),
            None => assert!(row["aeth"].is_null()),
        }
        match d.get("deth") {
            Some(a) => {
                assert_eq!(row["deth"]["qkey"].as_u64().unwrap(), hexnum(&a["qkey"]));
                assert_eq!(row["deth"]["src_qp"], a["srcqp"]);
            }
            None => assert!(row["deth"].is_null()),
        }
        match d.get("immdt") {
            Some(a) => assert_eq!(row["immdt"].as_u64().unwrap(), hexnum(a)),
            None => assert!(row["immdt"].is_null()),
        }
        match d.get("atomiceth") {
            Some(a) => {
                assert_eq!(row["atomic_eth"]["va"].as_u64().unwrap(), hexnum(&a["va"]));
                assert_eq!(row["atomic_eth"]["rkey"].as_u64().unwrap(), hexnum(&a["rkey"]));
                assert_eq!(row["atomic_eth"]["swap_add"], a["swap_add"]);
                assert_eq!(row["atomic_eth"]["compare"], a["compare"]);
            }
            None => assert!(row["atomic_eth"].is_null()),
        }
        match d.get("atomicacketh") {
            Some(a) => assert_eq!(row["atomic_ack_eth"]["orig"], a["orig"]),
            None => assert!(row["atomic_ack_eth"].is_null()),
        }
        assert!(row["ieth"].is_null() && row["rdeth"].is_null() && row["xrceth"].is_null());
        assert_eq!(row["payload_len"], d["payload_len"], "vector {idx}");
        assert_eq!(row["icrc"], v["icrc_wire_hex"], "vector {idx}");
        assert_eq!(row["icrc_ok"], !v["corrupted"].as_bool().unwrap(), "vector {idx}");
    }
    assert_eq!(
        summary.trim(),
        "28 frames: 28 RoCEv2 (ICRC 24 ok, 4 bad, 0 unchecked; 0 undecodable), 0 not RoCEv2"
    );
}

#[test]
fn human_output_ends_with_the_summary() {
    let o = podnet(&["capture", "decode", testdata("roce/vectors.pcap").to_str().unwrap()]);
    assert!(o.status.success());
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 25);
    assert!(lines[0].starts_with("1 10.0.17.1:0 > 10.0.18.1:4791 CNP(0x81) qp 0x000118 psn 0 BECN len 16 icrc 82fd002a ok"), "{}", lines[0]);
    assert!(lines[21].contains("AETH NAK psn-sequence-error msn 66"), "{}", lines[21]);
    assert_eq!(
        lines[24],
        "24 frames: 24 RoCEv2 (ICRC 24 ok, 0 bad, 0 unchecked; 0 undecodable), 0 not RoCEv2"
    );
}

#[test]
fn frames_cut_by_the_snap_length() {
    // Vector 9: RDMA_WRITE_ONLY, 256-byte payload (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 +
    // RETH 16 = 70 header bytes).
    let v = &vectors()[8];
    let full = hex::decode(v["frame_hex"].as_str().unwrap()).unwrap();
    let orig = full.len() as u32;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cut.pcap");
    let cuts = [100usize, 70, 60, 45, 30];
    let frames: Vec<(Vec<u8>, u32)> = cuts.iter().map(|&c| (full[..c].to_vec(), orig)).collect();
    write_pcap(&path, 1, &frames);
    let o = podnet(&["capture", "decode", "--json", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: Vec<Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 4, "the frame cut inside the UDP header is not known to be RoCEv2");
    // Cut in the payload: every header known, the payload length too (from UDP), ICRC unchecked.
    for r in &rows[..2] {
        assert!(r.get("error").is_none(), "{r}");
        assert_eq!(r["reth"]["dma_len"], 256);
        assert_eq!(r["payload_len"], 256);
        assert!(r["icrc"].is_null() && r["icrc_ok"].is_null(), "{r}");
    }
    // Cut inside the RETH: the BTH is read, the extension headers are not.
    assert_eq!(rows[2]["error"], "truncated");
    assert_eq!(rows[2]["opcode"], 10);
    assert_eq!(rows[2]["psn"], 8_388_607);
    assert!(rows[2].get("reth").is_none() && rows[2].get("payload_len").is_none());
    assert!(rows[2]["icrc_ok"].is_null());
    // Cut inside the BTH: only the IP and UDP fields.
    assert_eq!(rows[3]["error"], "truncated");
    assert_eq!(rows[3]["frame"], 4);
    assert_eq!(rows[3]["src"], "192.168.10.1");
    assert_eq!(rows[3]["dst_port"], 4791);
    assert!(rows[3].get("opcode").is_none());
    assert_eq!(
        stderr(&o).trim(),
        "5 frames: 4 RoCEv2 (ICRC 0 ok, 0 bad, 4 unchecked; 2 undecodable), 1 not RoCEv2 (1 cut before UDP, 0 of unsupported link types)"
    );
    let human = stdout(&podnet(&["capture", "decode", path.to_str().unwrap()]));
    assert!(human.contains("truncated: 3 of 288 UDP payload bytes captured"), "{human}");
    assert!(human.contains("icrc unchecked (cut by snap length)"), "{human}");
}

#[test]
fn frames_that_are_not_roce_are_counted_and_the_port_is_a_flag() {
    use wire::frame::{FrameBuilder, IpParams, Link};
    use wire::{Opcode, Operation, Psn, Qpn, Transport, bth, roce};
    let roce_frame = |dst_port: u16| {
        let b = FrameBuilder {
            link: Link::Ethernet {
                src: [2, 0, 0, 0, 0, 1],
                dst: [2, 0, 0, 0, 0, 2],
                vlans: vec![],
            },
            ip: IpParams::V4 {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                tos: 2,
                ttl: 64,
                id: 0,
            },
            src_port: 0xc000,
            dst_port,
            udp_checksum: false,
        };
        let r = roce::Repr::with_zeroed_headers(bth::Repr::new(
            Opcode::new(Transport::Rc, Operation::SendOnly),
            Qpn::new(5),
            Psn::new(6),
        ));
        b.build(&r, b"hello").unwrap()
    };
    let dns = roce_frame(53);
    let mut arp = hex::decode(
        "ffffffffffff020000000001080600010800060400010200000000010a0000010000000000000a000002",
    )
    .unwrap();
    arp.resize(60, 0);
    let mut tcp = roce_frame(4791);
    tcp[23] = 6; // IPv4 protocol: TCP
    let frames: Vec<(Vec<u8>, u32)> = [roce_frame(4791), dns.clone(), arp, tcp, roce_frame(4792)]
        .into_iter()
        .map(|f| {
            let n = f.len() as u32;
            (f, n)
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.pcap");
    write_pcap(&path, 1, &frames);
    let o = podnet(&["capture", "decode", path.to_str().unwrap()]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.ends_with(
            "5 frames: 1 RoCEv2 (ICRC 1 ok, 0 bad, 0 unchecked; 0 undecodable), 4 not RoCEv2\n"
        ),
        "{out}"
    );
    let o = podnet(&["capture", "decode", "--json", "--roce-port", "4792", path.to_str().unwrap()]);
    let rows: Vec<Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["frame"], 5);
    assert_eq!(rows[0]["dst_port"], 4792);
    assert_eq!(rows[0]["icrc_ok"], true);
}

#[test]
fn pcapng_and_stdin_read_like_pcap() {
    // The same frames as vectors.pcap, as pcapng.
    use pcap_file::pcap::PcapReader;
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    let pcap = std::fs::read(testdata("roce/vectors.pcap")).unwrap();
    let mut r = PcapReader::new(&pcap[..]).unwrap();
    let mut w = PcapNgWriter::new(Vec::new()).unwrap();
    w.write_pcapng_block(InterfaceDescriptionBlock {
        linktype: pcap_file::DataLink::ETHERNET,
        snaplen: 0,
        options: vec![],
    })
    .unwrap();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            // pcap-file writes the Duration's nanoseconds as the raw tick count, read at
            // the interface's resolution (microseconds: no if_tsresol).
            timestamp: std::time::Duration::from_nanos(p.timestamp.as_micros() as u64),
            original_len: p.orig_len,
            data: p.data,
            options: vec![],
        })
        .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let ng = dir.path().join("v.pcapng");
    std::fs::write(&ng, w.into_inner()).unwrap();
    let from_pcap = stdout(&podnet(&[
        "capture",
        "decode",
        "--json",
        testdata("roce/vectors.pcap").to_str().unwrap(),
    ]));
    let from_ng = stdout(&podnet(&["capture", "decode", "--json", ng.to_str().unwrap()]));
    assert_eq!(from_pcap, from_ng);
    assert_eq!(from_pcap.lines().count(), 24);
    let mut child = Command::new(env!("CARGO_BIN_EXE_podnet"))
        .args(["capture", "decode", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&pcap).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    assert_eq!(stdout(&o), from_pcap);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"this is not a capture\n").unwrap();
    let tiny = dir.path().join("tiny.pcap");
    std::fs::write(&tiny, [0xd4, 0xc3]).unwrap();
    let pcap = std::fs::read(testdata("roce/vectors.pcap")).unwrap();
    let cut_record = dir.path().join("cut-record.pcap");
    std::fs::write(&cut_record, &pcap[..pcap.len() - 30]).unwrap();
    let cut_header = dir.path().join("cut-header.pcap");
    std::fs::write(&cut_header, &pcap[..10]).unwrap();
    let missing = dir.path().join("missing.pcap");
    let cases = [
        (&empty, "the file is empty"),
        (&text, "not a pcap or pcapng file"),
        (&tiny, "not a pcap or pcapng file"),
        (&cut_record, "truncated after frame 23"),
        (&cut_header, ""),
        (&missing, "cannot open"),
    ];
    for (path, needle) in cases {
        for json in [false, true] {
            let mut args = vec!["capture", "decode"];
            if json {
                args.push("--json");
            }
            args.push(path.to_str().unwrap());
            let o = podnet(&args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{path:?}: {err}");
            let error_lines: Vec<&str> =
                err.lines().filter(|l| l.starts_with("podnet: ")).collect();
            assert_eq!(error_lines.len(), 1, "{path:?}: {err}");
            assert!(error_lines[0].contains(needle), "{path:?}: {err}");
            assert!(!err.contains("panicked"), "{path:?}: {err}");
        }
    }
    // The frames before the damage were still decoded.
    let o = podnet(&["capture", "decode", "--json", cut_record.to_str().unwrap()]);
    assert_eq!(stdout(&o).lines().count(), 23);
    // A usage error is clap's, also exit 2.
    let o = podnet(&["capture", "decode", "--roce-port", "70000", "x.pcap"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn help_explains_the_command() {
    let o = podnet(&["capture", "decode", "--help"]);
    assert!(o.status.success());
    let h = stdout(&o);
    for needle in ["pcapng", "SLL2", "--json", "--roce-port", "4791", "ICRC", "Exit status"] {
        assert!(h.contains(needle), "--help lacks {needle}:\n{h}");
    }
}

/// A switch mirror's copies, as ERSPAN II and III (with and without its platform subheader)
/// and type I carry them, and cut short by a snap length: each decodes as the frame it
/// carries (`encap` names the mirror's encapsulation, the ICRC is unchecked where cut); GRE
/// with another payload is counted and named, not read.
#[test]
fn erspan_mirrors_decode_as_the_frames_they_carry() {
    // The longest good vector (one with a payload to cut into).
    let plain = vectors()
        .iter()
        .map(|v| hex::decode(v["frame_hex"].as_str().unwrap()).unwrap())
        .filter(|b| {
            let mut p = decode_one(b);
            p.pop().is_some_and(|r| r["icrc_ok"] == true)
        })
        .max_by_key(Vec::len)
        .unwrap();
    // Outer Ethernet / IPv4 (GRE) / `gre` / `erspan` / the frame.
    let wrap = |gre: &[u8], erspan: &[u8], frame: &[u8]| -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        let total = (20 + gre.len() + erspan.len() + frame.len()) as u16;
        let t = total.to_be_bytes();
        f.extend_from_slice(&[
            0x45, 0, t[0], t[1], 0, 0, 0x40, 0, 64, 47, 0, 0, 10, 9, 0, 1, 10, 9, 0, 2,
        ]);
        f.extend_from_slice(gre);
        f.extend_from_slice(erspan);
        f.extend_from_slice(frame);
        f
    };
    let gre_seq = |proto: [u8; 2]| vec![0x10, 0x00, proto[0], proto[1], 0, 0, 0, 42];
    let frames: Vec<Vec<u8>> = vec![
        wrap(&gre_seq([0x88, 0xbe]), &[0x10, 0x64, 0x00, 0x05, 0, 0, 0, 0], &plain),
        wrap(&gre_seq([0x22, 0xeb]), &[0x20, 0x64, 0x00, 0x05, 1, 2, 3, 4, 0, 0, 0, 0], &plain),
        wrap(
            &gre_seq([0x22, 0xeb]),
            &[0x20, 0x64, 0x00, 0x05, 1, 2, 3, 4, 0, 0, 0, 1, 9, 9, 9, 9, 9, 9, 9, 9],
            &plain,
        ),
        wrap(&[0, 0, 0x88, 0xbe], &[], &plain),
        wrap(&[0, 0, 0x65, 0x58], &[], &plain),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mirror.pcap");
    // All whole, then the first two cut short of their ICRC (a mirror's snap length).
    let mut all: Vec<(Vec<u8>, u32)> = frames.iter().map(|f| (f.clone(), f.len() as u32)).collect();
    all.extend(frames.iter().take(2).map(|f| (f[..f.len() - 6].to_vec(), f.len() as u32)));
    write_pcap(&path, 1, &all);
    let (rows, summary) = util::decode_json_and_summary(&path);
    let want = decode_one(&plain);
    let want = &want[0];
    assert_eq!(rows.len(), 6, "{rows:?}");
    for (row, encap) in rows[..4].iter().zip(["erspan2", "erspan3", "erspan3", "erspan1"]) {
        assert_eq!(row["encap"], encap, "{row}");
        for k in [
            "src",
            "dst",
            "opcode",
            "dest_qp",
            "psn",
            "icrc",
            "icrc_ok",
            "payload_len",
            "dscp",
            "ttl",
        ] {
            assert_eq!(row[k], want[k], "{encap}: {k}: {row}");
        }
    }
    for row in &rows[4..] {
        assert!(row["encap"].is_string() && row["icrc_ok"].is_null(), "cut: {row}");
        assert_eq!(row["dest_qp"], want["dest_qp"], "{row}");
    }
    assert!(summary.contains("6 came in ERSPAN (a switch mirror)"), "{summary}");
    assert!(
        summary.contains("1 in an encapsulation podnet does not read: 1 in GRE transparent Ethernet bridging (0x6558)"),
        "{summary}"
    );
}

/// `capture decode --json` of one Ethernet frame.
fn decode_one(frame: &[u8]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.pcap");
    write_pcap(&p, 1, &[(frame.to_vec(), frame.len() as u32)]);
    util::decode_json_and_summary(&p).0
}
