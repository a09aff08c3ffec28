//! tshark (Wireshark's dissector, an implementation podnet did not write) dissects the shared
//! vectors and the frames podnet emits, and every field it shows must equal what
//! `podnet capture decode --json` says.
//!
//! Wireshark 4.0 (Debian 12) limits: it does not dissect XRCETH and reads the RD extension
//! headers at the wrong offset (its RoCE path places RDETH 8 bytes late, though its own
//! header-sequence names, e.g. `RDETH_DETH_RETH`, agree with IBTA and podnet), so for XRC and
//! RD opcodes only the BTH and UDP fields are compared. It shows no ICRC or payload for the
//! CNP and for opcodes it does not know.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::extra;
use crate::util::{self, require_tool, testdata};

const FIELDS: &[&str] = &[
    "frame.number",
    "udp.srcport",
    "udp.dstport",
    "ip.src",
    "ipv6.src",
    "ip.dst",
    "ipv6.dst",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "data.len",
    "infiniband.invariant.crc",
    "frame.time_epoch",
    "ip.dsfield.dscp",
    "ip.dsfield.ecn",
    "ipv6.tclass.dscp",
    "ipv6.tclass.ecn",
    "ip.ttl",
    "ipv6.hlim",
    "ip.id",
];

/// tshark's `frame.time_epoch` (`1764460800.000010000`) in nanoseconds.
fn epoch_ns(v: &str) -> u64 {
    let (s, f) = v.split_once('.').unwrap_or((v, "0"));
    let frac: String = f.chars().chain(std::iter::repeat('0')).take(9).collect();
    s.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
}

/// Runs tshark over `path` and returns one map of field → value per frame.
fn dissect(path: &Path) -> Vec<HashMap<String, String>> {
    require_tool("tshark");
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(path);
    // The vectors' own tshark command disables these heuristics so they cannot claim RoCE
    // payloads.
    for h in [
        "eth_over_ib",
        "fc_infiniband",
        "iser_infiniband",
        "lnet_ib",
        "rpcrdma_infiniband",
        "sdp_infiniband",
        "smb_direct_infiniband",
        "smcr_infiniband",
    ] {
        cmd.args(["--disable-heuristic", h]);
    }
    cmd.args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f", "-E", "quote=n"]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            FIELDS
                .iter()
                .zip(line.split('\t'))
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// tshark prints uint fields in decimal or `0x` hex, and byte fields (ImmDt, IETH) as bare hex.
fn num(field: &str, v: &str) -> u64 {
    if let Some(h) = v.strip_prefix("0x") {
        u64::from_str_radix(h, 16).unwrap()
    } else if field == "infiniband.immdt" || field == "infiniband.ieth" {
        u64::from_str_radix(v, 16).unwrap()
    } else {
        v.parse().unwrap_or_else(|_| panic!("{field}: {v}"))
    }
}

/// Compares every field tshark shows with podnet's record; returns how many were compared.
fn compare(ts: &HashMap<String, String>, row: &Value, what: &str) -> usize {
    let mut n = 0;
    let mut eq = |field: &str, want: Option<u64>| {
        let got = ts.get(field).map(|v| num(field, v));
        assert_eq!(got, want, "{what}: tshark {field} vs podnet; podnet says {row}");
        n += 1;
    };
    let u = |v: &Value| v.as_u64();
    let b = |v: &Value| v.as_bool().map(u64::from);
    let opcode = row["opcode"].as_u64().unwrap() as u8;
    eq("udp.srcport", u(&row["src_port"]));
    eq("udp.dstport", u(&row["dst_port"]));
    eq("infiniband.bth.opcode", Some(opcode.into()));
    eq("infiniband.bth.se", b(&row["se"]));
    eq("infiniband.bth.m", b(&row["migreq"]));
    eq("infiniband.bth.padcnt", u(&row["pad_count"]));
    eq("infiniband.bth.tver", u(&row["tver"]));
    eq("infiniband.bth.p_key", u(&row["pkey"]));
    eq("infiniband.bth.destqp", u(&row["dest_qp"]));
    eq("infiniband.bth.a", b(&row["ack_req"]));
    eq("infiniband.bth.psn", u(&row["psn"]));
    let src = ts.get("ip.src").or(ts.get("ipv6.src")).cloned();
    let dst = ts.get("ip.dst").or(ts.get("ipv6.dst")).cloned();
    assert_eq!(src.as_deref(), row["src"].as_str(), "{what}: src");
    assert_eq!(dst.as_deref(), row["dst"].as_str(), "{what}: dst");
    // The capture time and the IP fields decode appends.
    let ts = ts.get("frame.time_epoch").map(|v| epoch_ns(v));
    assert_eq!(ts, row["ts_ns"].as_u64(), "{what}: frame.time_epoch vs ts_ns; podnet says {row}");
    if row["ip_version"] == 4 {
        eq("ip.dsfield.dscp", u(&row["dscp"]));
        eq("ip.dsfield.ecn", u(&row["ecn"]));
        eq("ip.ttl", u(&row["ttl"]));
        eq("ip.id", u(&row["ip_id"]));
    } else {
        eq("ipv6.tclass.dscp", u(&row["dscp"]));
        eq("ipv6.tclass.ecn", u(&row["ecn"]));
        eq("ipv6.hlim", u(&row["ttl"]));
        assert!(row["ip_id"].is_null(), "{what}: IPv6 has no Identification: {row}");
    }
    let known = row["opcode_name"].is_string();
    let transport = opcode >> 5;
    if !known || transport == 2 || transport == 5 || opcode == 0x81 {
        // Unknown, RD, XRC and CNP: see the module comment.
        return n;
    }
    let reth = &row["reth"];
    let atomic = &row["atomic_eth"];
    // tshark shows the AtomicETH's VA and R_Key in the RETH fields.
    let va_rkey = if atomic.is_object() { atomic } else { reth };
    eq("infiniband.reth.va", u(&va_rkey["va"]));
    eq("infiniband.reth.r_key", u(&va_rkey["rkey"]));
    eq("infiniband.reth.dmalen", u(&reth["dma_len"]));
    eq("infiniband.aeth.syndrome", u(&row["aeth"]["syndrome"]));
    eq("infiniband.aeth.msn", u(&row["aeth"]["msn"]));
    eq("infiniband.immdt", u(&row["immdt"]));
    eq("infiniband.ieth", u(&row["ieth"]));
    eq("infiniband.atomiceth.swapdt", u(&atomic["swap_add"]));
    eq("infiniband.atomiceth.cmpdt", u(&atomic["compare"]));
    eq("infiniband.atomicacketh.origremdt", u(&row["atomic_ack_eth"]["orig"]));
    eq("infiniband.deth.q_key", u(&row["deth"]["qkey"]));
    eq("infiniband.deth.srcqp", u(&row["deth"]["src_qp"]));
    // tshark's data.len is payload plus pad, absent when both are zero.
    let len = row["payload_len"].as_u64().unwrap() + row["pad_count"].as_u64().unwrap();
    eq("data.len", (len > 0).then_some(len));
    let icrc = u64::from_str_radix(row["icrc"].as_str().unwrap(), 16).unwrap();
    eq("infiniband.invariant.crc", Some(icrc));
    n
}

#[test]
fn tshark_agrees_on_the_shared_vectors() {
    let path = testdata("roce/vectors.pcap");
    let rows = util::decode_json(&path);
    let ts = dissect(&path);
    assert_eq!(rows.len(), 24);
    assert_eq!(ts.len(), 24);
    let compared: usize = ts
        .iter()
        .zip(&rows)
        .enumerate()
        .map(|(i, (t, r))| compare(t, r, &format!("vector frame {}", i + 1)))
        .sum();
    assert!(compared > 24 * 11, "compared only {compared} fields");
}

#[test]
fn tshark_agrees_on_frames_podnet_emits() {
    let frames = extra::frames();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("extra.pcapng");
    std::fs::write(&path, extra::pcapng(&frames)).unwrap();
    let rows = util::decode_json(&path);
    let ts = dissect(&path);
    assert_eq!(ts.len(), frames.len());
    let mut compared = 0;
    for ((t, r), f) in ts.iter().zip(&rows).zip(&frames) {
        compared += compare(t, r, f.what);
    }
    eprintln!("tshark cross-check: {compared} fields over {} podnet-emitted frames", frames.len());
    assert!(compared > frames.len() * 11);
}
