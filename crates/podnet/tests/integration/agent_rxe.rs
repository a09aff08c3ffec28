//! `podnet agent` on Linux rxe in the QEMU guest, live: with traffic between `rxeA` and `rxeB`
//! its counters rise and rates are computed; with nftables dropping 5 % of the RoCE packets
//! arriving on vB the sequence-error series rise and rxeB turns `degraded`; with vB set down,
//! rxeB is `down`.

use std::time::Duration;

use rxevm::{Config, Vm};
use serde_json::Value;

fn port<'a>(v: &'a Value, dev: &str) -> &'a Value {
    v["ports"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["device"] == dev))
        .unwrap_or_else(|| panic!("no {dev} in {v}"))
}

fn rate(p: &Value, name: &str) -> f64 {
    p["rates"][name].as_f64().unwrap_or_else(|| panic!("no {name} rate in {p}"))
}

/// Runs `tool` (perftest) rxeA → rxeB for 9 s and, 2 s in, the agent once (3 s between its
/// two samples); returns the agent's JSON.
fn agent_during_traffic(vm: &Vm, rxe: &rxevm::RxeSetup, tool: &str, th: &str, what: &str) -> Value {
    let podnet = env!("CARGO_BIN_EXE_podnet");
    let script = format!(
        "{tool} -d rxeB -x {gb} -D 9 -F >/dev/null 2>&1 & s=$!\n\
         wait_tcp 18515 $s || exit 1\n\
         {tool} -d rxeA -x {ga} -D 9 -F 127.0.0.1 >/dev/null 2>&1 & c=$!\n\
         sleep 2; {podnet} agent --once --json --interval 3 --thresholds {th} > $OUT/agent.json; echo agent rc=$?\n\
         wait $c; wait $s; cat $OUT/agent.json",
        ga = rxe.a.gid4,
        gb = rxe.b.gid4,
    );
    let out = vm.run(what, &script, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    let json =
        out.output.lines().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{}", out.output));
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn agent_on_rxe_sees_traffic_loss_and_a_link_down() {
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let rxe = vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    let th = vm.out_dir().join("health.toml");
    std::fs::write(
        &th,
        "window_seconds = 30\n[degraded]\nout_of_sequence = 0\npacket_seq_errors = 0\n",
    )
    .unwrap();
    let th = th.display().to_string();

    // Clean traffic — a ping-pong, one message in flight: packets counted both ways, rates
    // computed, every port ok. (A full-speed stream is not clean here: the emulated guest's
    // receive path drops some of it, and rxe counts the gaps.)
    let v = agent_during_traffic(&vm, &rxe, "ib_write_lat", &th, "agent, ping-pong");
    let (a, b) = (port(&v, "rxeA"), port(&v, "rxeB"));
    assert!(rate(a, "port_xmit_packets") > 10.0, "{a}");
    assert!(rate(b, "port_rcv_packets") > 10.0, "{b}");
    assert_eq!(rate(b, "out_of_sequence"), 0.0, "{b}");
    assert_eq!((a["state"].as_str(), b["state"].as_str()), (Some("ok"), Some("ok")), "{v}");
    eprintln!(
        "clean: rxeA sends {:.0} packets/s, rxeB receives {:.0}/s",
        rate(a, "port_xmit_packets"),
        rate(b, "port_rcv_packets")
    );

    // 5 % of the RoCE packets arriving on vB dropped: rxeB sees gaps, rxeA is NAKed.
    vm.nft(
        "chain input { type filter hook input priority 0;\n\
           iifname \"vB\" udp dport 4791 numgen random mod 100 < 5 drop\n}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let v = agent_during_traffic(&vm, &rxe, "ib_write_bw", &th, "agent, 5% loss");
    vm.nft_reset().unwrap();
    let (a, b) = (port(&v, "rxeA"), port(&v, "rxeB"));
    assert!(rate(b, "out_of_sequence") > 0.0, "{b}");
    assert!(rate(a, "packet_seq_errors") > 0.0, "{a}");
    assert_eq!(b["state"], "degraded", "{b}");
    let why = b["reasons"].to_string();
    assert!(why.contains("out_of_sequence"), "{why}");
    eprintln!(
        "5% loss: rxeB out_of_sequence {:.1}/s, rxeA packet_seq_errors {:.1}/s; rxeB {why}",
        rate(b, "out_of_sequence"),
        rate(a, "packet_seq_errors")
    );

    // vB down: rxeB's port and netdev are down.
    let podnet = env!("CARGO_BIN_EXE_podnet");
    let out = vm
        .run(
            "agent, vB down",
            &format!(
                "ip link set vB down; sleep 1\n\
                 {podnet} agent --once --json --interval 0.5 > $OUT/down.json; echo rc=$?\n\
                 ip link set vB up; cat $OUT/down.json"
            ),
            Duration::from_secs(60),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.output.contains("rc=1"), "--once exits 1 with a port down: {}", out.output);
    let json = out.output.lines().find(|l| l.starts_with('{')).unwrap();
    let v: Value = serde_json::from_str(json).unwrap();
    let b = port(&v, "rxeB");
    assert_eq!(b["state"], "down", "{b}");
    assert!(b["reasons"].to_string().contains("netdev vB is down"), "{b}");
    assert_eq!(port(&v, "rxe_eth")["state"], "ok", "{v}");
}
