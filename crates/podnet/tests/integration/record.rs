//! `podnet capture record` against real traffic: soft devices on loopback (IPv4 and IPv6)
//! and across a veth between two namespaces, recorded while `podnet pingpong` runs, stopped
//! with SIGINT; the recording decodes with every ICRC good and `capture analyze` counts, per
//! direction, the packets each device says it sent. Other UDP on the link is not recorded.

use std::path::Path;

use serde_json::Value;

use crate::util::{bridged_hosts, in_netns, podnet, stdout};

/// Packets from `src` in a capture, as `capture analyze --json` counts them.
fn packets_from(file: &Path, src: &str) -> u64 {
    let o = podnet(&["capture", "analyze", "--json", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["findings"], Value::Array(vec![]), "{v}");
    v["connections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["directions"].as_array().unwrap().clone())
        .filter(|d| d["src"] == src)
        .map(|d| d["packets"].as_u64().unwrap())
        .sum()
}

/// Every frame of `file` RoCEv2 with a good ICRC; how many.
fn all_good(file: &Path) -> u64 {
    let o = podnet(&["capture", "decode", "--json", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let recs: Vec<Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(!recs.is_empty(), "nothing recorded");
    for r in &recs {
        assert_eq!(r["icrc_ok"], true, "{r}");
    }
    let summary = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(summary.contains(", 0 not RoCEv2"), "{summary}");
    recs.len() as u64
}

/// Runs `script` (recording into rec.pcapng) in a namespace; the pingpong client's JSON
/// and the recorder's.
fn recorded(script: &str) -> (Value, Value, tempfile::TempDir) {
    let keep = tempfile::tempdir().unwrap();
    let o = in_netns(&format!("OUT={}\n{script}", keep.path().display()));
    let text = stdout(&o);
    assert!(o.status.success(), "{text}\n{}", String::from_utf8_lossy(&o.stderr));
    let client: Value =
        serde_json::from_str(&std::fs::read_to_string(keep.path().join("client.json")).unwrap())
            .unwrap();
    let rec: Value =
        serde_json::from_str(&std::fs::read_to_string(keep.path().join("rec.json")).unwrap())
            .unwrap_or_else(|e| panic!("{e}: {text}"));
    (client, rec, keep)
}

/// `record IFACE [ARGS [NETNS]]` starts the recorder on IFACE (in namespace NETNS, if given)
/// and waits until it listens; `stop` stops it with SIGINT and waits for it.
const RECORD: &str = "record() { ${3:+ip netns exec $3} $PODNET capture record -i $1 -w $OUT/rec.pcapng --json $2 > $OUT/rec.json 2> $OUT/rec.err & REC=$!\n\
    for _ in $(seq 100); do grep -q recording $OUT/rec.err && break; sleep 0.05; done; }\n\
    stop() { kill -INT $REC; wait $REC; }\n";

#[test]
fn record_on_loopback_agrees_with_the_devices() {
    for (a, b) in [("127.0.0.1", "127.0.0.2"), ("fd00::1", "fd00::2")] {
        let script = format!(
            "{RECORD}ip addr add fd00::1/64 dev lo nodad; ip addr add fd00::2/64 dev lo nodad\n\
             record lo\n\
             bash -c 'for i in 1 2 3; do echo noise > /dev/udp/127.0.0.1/9999; done' 2>/dev/null\n\
             $PODNET pingpong -d soft:{a} -n 40 -s 4096 & SRV=$!; listening\n\
             $PODNET pingpong -d soft:{b} -n 40 -s 4096 --json {a} > $OUT/client.json\n\
             wait $SRV; stop\n"
        );
        let (client, rec, dir) = recorded(&script);
        let file = dir.path().join("rec.pcapng");
        let frames = all_good(&file);
        assert_eq!(rec["kernel_dropped"], 0, "{rec}");
        assert!(rec["frames"].as_u64().unwrap() > 0, "{rec}");
        // The client's packets, as many as its device sent; and the server's as many as
        // the client's device received (loopback: nothing lost between).
        let c = &client["counters"];
        assert_eq!(packets_from(&file, b), c["sent_pkts"].as_u64().unwrap(), "{a}: {client}");
        assert_eq!(packets_from(&file, a), c["rcvd_pkts"].as_u64().unwrap(), "{a}: {client}");
        assert_eq!(frames, c["sent_pkts"].as_u64().unwrap() + c["rcvd_pkts"].as_u64().unwrap());
        eprintln!(
            "lo {a}: {frames} frames, every ICRC good; client sent {}, received {}",
            c["sent_pkts"], c["rcvd_pkts"]
        );
    }
}

#[test]
fn record_on_a_veth_keeps_or_splits_offload_runs() {
    for split in ["", "--split-gso"] {
        let script = format!(
            "{RECORD}{}\
             H1=rech$$_1; H2=rech$$_2\n\
             ip netns exec $H2 $PODNET pingpong -d soft:10.77.0.2 -n 40 -s 16384 & SRV=$!\n\
             sleep 0.3\n\
             record eth0 '{split}' $H1\n\
             ip netns exec $H1 $PODNET pingpong -d soft:10.77.0.1 -n 40 -s 16384 --json 10.77.0.2 > $OUT/client.json\n\
             wait $SRV; stop\n",
            bridged_hosts("rec", "10.77.0", 2)
        );
        let (client, rec, dir) = recorded(&script);
        let file = dir.path().join("rec.pcapng");
        let frames = all_good(&file);
        let c = &client["counters"];
        let (sent, rcvd) = (c["sent_pkts"].as_u64().unwrap(), c["rcvd_pkts"].as_u64().unwrap());
        assert_eq!(packets_from(&file, "10.77.0.1"), sent, "{split}: {client}");
        assert_eq!(packets_from(&file, "10.77.0.2"), rcvd, "{split}: {client}");
        let written = rec["frames"].as_u64().unwrap();
        eprintln!(
            "veth {split:?}: {written} frames written, {frames} packets decoded; device sent {sent}, received {rcvd}"
        );
        if split.is_empty() {
            // Offload runs stay whole: fewer frames than packets.
            assert!(written < sent + rcvd, "{rec}: no offload run was recorded");
        } else {
            assert_eq!((written, frames), (sent + rcvd, sent + rcvd), "{rec}");
        }
    }
}

/// CE marks on ECT traffic between podnet devices (nftables on the sender's way out, before
/// the capture point): the receiver answers with CNPs, and `analyze` counts the marks and the
/// CNPs as the receiver's own counters do (`ecn_ce_rcvd`, `cnp_sent`) — a `congestion`
/// finding on the receiver's QP, not "CE seen, no CNP".
#[test]
fn record_ce_marks_and_the_cnps_that_answer_them() {
    let script = format!(
        "{RECORD}{}H1=rech$$_1; H2=rech$$_2\n\
         ip netns exec $H1 nft -f - <<'NFT'\n\
         table inet cemark {{\n chain out {{\n type filter hook output priority 0;\n oifname \"eth0\" udp dport 4791 ip ecn set ce\n }}\n}}\n\
         NFT\n\
         ip netns exec $H2 $PODNET pingpong -d soft:10.78.0.2 -n 40 -s 4096 --json > $OUT/server.json & SRV=$!\n\
         sleep 0.3\n\
         record eth0 '' $H1\n\
         ip netns exec $H1 $PODNET pingpong -d soft:10.78.0.1 -n 40 -s 4096 --json 10.78.0.2 > $OUT/client.json\n\
         wait $SRV; stop\n",
        bridged_hosts("rec", "10.78.0", 2)
    );
    let (_, _, dir) = recorded(&script);
    let server: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("server.json")).unwrap())
            .unwrap();
    let file = dir.path().join("rec.pcapng");
    all_good(&file);
    let o = podnet(&["capture", "analyze", "--json", file.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = v["connections"][0]["directions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["src"] == "10.78.0.1")
        .unwrap()
        .clone();
    let c = &server["counters"];
    assert!(c["cnp_sent"].as_u64().unwrap() > 0, "{server}");
    assert_eq!(d["congestion"]["ce"], c["ecn_ce_rcvd"], "{d}");
    assert_eq!(d["congestion"]["cnps"], c["cnp_sent"], "{d}");
    let f = &v["findings"][0];
    assert_eq!(f["kind"], "congestion", "{v}");
    assert!(f["flow"].as_str().unwrap().starts_with("10.78.0.1 > 10.78.0.2 QP "), "{f}");
    eprintln!(
        "CE: {} marked, {} CNPs (server counters: ecn_ce_rcvd {}, cnp_sent {})",
        d["congestion"]["ce"], d["congestion"]["cnps"], c["ecn_ce_rcvd"], c["cnp_sent"]
    );
}

/// The soft device's own capture point (`PODNET_CAPTURE=FILE`, `{ip}` the device's address):
/// each side of a pingpong across a veth records both directions from inside its device;
/// each file decodes with every ICRC good and holds, per direction, the packets the
/// client's device counted.
#[test]
fn a_soft_device_records_itself() {
    let script = format!(
        "{}H1=rech$$_1; H2=rech$$_2\n\
         export PODNET_CAPTURE=$OUT/tap-{{ip}}.pcapng\n\
         ip netns exec $H2 $PODNET pingpong -d soft:10.79.0.2 -n 30 -s 16384 & SRV=$!\n\
         sleep 0.3\n\
         ip netns exec $H1 $PODNET pingpong -d soft:10.79.0.1 -n 30 -s 16384 --json 10.79.0.2 > $OUT/client.json\n\
         wait $SRV; echo '{{}}' > $OUT/rec.json\n",
        bridged_hosts("rec", "10.79.0", 2)
    );
    let (client, _, dir) = recorded(&script);
    let c = &client["counters"];
    let (sent, rcvd) = (c["sent_pkts"].as_u64().unwrap(), c["rcvd_pkts"].as_u64().unwrap());
    for side in ["10.79.0.1", "10.79.0.2"] {
        let file = dir.path().join(format!("tap-{side}.pcapng"));
        let frames = all_good(&file);
        assert_eq!(packets_from(&file, "10.79.0.1"), sent, "{side}: {client}");
        assert_eq!(packets_from(&file, "10.79.0.2"), rcvd, "{side}: {client}");
        eprintln!("tap of {side}: {frames} frames; client sent {sent}, received {rcvd}");
    }
}

/// A recorder that falls behind: held (SIGSTOP) with a 1 MiB queue while 5,000 datagrams
/// to the RoCEv2 port cross loopback, then let go and stopped at once (SIGINT). Every
/// datagram that reached the port's socket (a UDP socket with a 64 MiB queue counts them: a
/// loaded host may drop a few before the capture point, which none of this sees) is either
/// in the file or in the kernel's drop count — the drops are real ones (more than half),
/// loopback's outgoing copies are neither (the filter leaves them out in the kernel), and
/// what was queued when the stop came is written, not thrown away.
#[test]
fn a_recorder_that_falls_behind_counts_what_the_kernel_dropped() {
    // Counts what reached the port's socket; prints {"sent": N, "received": M}.
    const FLOOD: &str = r#"
import json, socket
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
r.bind(("127.0.0.1", 4791))
r.setblocking(False)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n = sum(s.sendto(bytes(1000), ("127.0.0.1", 4791)) == 1000 for _ in range(5000))
m = 0
try:
    while r.recv(2000):
        m += 1
except BlockingIOError:
    pass
print(json.dumps({"sent": n, "received": m}))
"#;
    let script = format!(
        "{RECORD}record lo '--buffer 1'\nkill -STOP $REC\n\
         python3 - > $OUT/client.json <<'PY'{FLOOD}PY\n\
         kill -CONT $REC; stop\n"
    );
    let (client, rec, dir) = recorded(&script);
    let (sent, received) = (client["sent"].as_u64().unwrap(), client["received"].as_u64().unwrap());
    let (frames, dropped) =
        (rec["frames"].as_u64().unwrap(), rec["kernel_dropped"].as_u64().unwrap());
    eprintln!(
        "{sent} sent ({received} reached the port) while the recorder was held: {frames} written, {dropped} dropped"
    );
    assert!(received > sent * 9 / 10, "{client}");
    assert!(dropped > received / 2, "the kernel dropped only {dropped} of {received}: {rec}");
    assert_eq!(frames + dropped, received, "{rec}");
    // The file holds what the summary says.
    let o =
        podnet(&["capture", "decode", "--json", dir.path().join("rec.pcapng").to_str().unwrap()]);
    let summary = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(summary.starts_with(&format!("{frames} frames:")), "{summary}");
}
