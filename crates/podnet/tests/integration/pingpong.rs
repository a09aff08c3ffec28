//! `podnet pingpong` against itself on loopback, and against Linux rxe's own
//! `ibv_rc_pingpong` across the QEMU guest's tap: each side as server and as client, IPv4 and
//! IPv6 GIDs, sizes 1 … 65536, `--verify` on podnet's side; then under 5 % RoCE loss in the
//! guest. After each clean run rxe must have received exactly the packets podnet sent, with no
//! sequence error or duplicate on either side.

use std::time::{Duration, Instant};

use rxevm::{Config, HOST_IP4, HOST_IP6, Vm};
use serde_json::Value;

use crate::util::{counter_delta as delta, in_netns, podnet, podnet_vs_guest, stderr, stdout};

#[test]
fn two_podnets_on_one_host_just_work() {
    let o = in_netns(
        "$PODNET pingpong -n 300 -s 4096 --timeout 30 > srv.txt 2>&1 & listening\n\
         $PODNET pingpong -n 300 -s 4096 --timeout 30 localhost; c=$?; wait $!; s=$?\n\
         echo SERVER; cat srv.txt; rm -f srv.txt; exit $((c + s))",
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    // The server took 127.0.0.1, the client the next loopback address.
    assert!(out.contains("local address:  LID 0x0000, QPN 0x"), "{out}");
    assert!(out.contains("GID ::ffff:127.0.0.2"), "{out}");
    assert!(out.contains("GID ::ffff:127.0.0.1"), "{out}");
    assert_eq!(out.matches("2457600 bytes in ").count(), 2, "{out}");
    assert_eq!(out.matches("300 iters in ").count(), 2, "{out}");
}

/// `--verify` is shown to fail: the fault hook damages every 5th payload after its ICRC
/// check, and the side that receives it names the message and byte and exits non-zero.
#[test]
fn verify_catches_damage_after_the_icrc() {
    crate::util::require_fault_injection();
    let o = in_netns(
        "export PODNET_FAULT_CORRUPT_EVERY=5\n\
         $PODNET pingpong -s 4096 -n 50 --verify --json --timeout 20 > srv.json 2> srv.err & listening\n\
         $PODNET pingpong -s 4096 -n 50 --verify --json --timeout 20 localhost > cli.json 2> cli.err; c=$?\n\
         wait $!; s=$?; echo \"rc=$c,$s\"; cat cli.json srv.json cli.err srv.err",
    );
    let out = stdout(&o);
    assert!(!out.contains("rc=0,0"), "{out}");
    assert!(out.contains("differs") || out.contains("\"ok\":false"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

/// A server's receive buffer does not start with the bytes an ibv_rc_pingpong client sends
/// (a podnet client without --verify sends the same): with every payload left unplaced by
/// the fault hook, the server's --verify fails instead of reading its own fill as the echo.
#[test]
fn verify_does_not_pass_on_what_the_buffer_held() {
    crate::util::require_fault_injection();
    let o = in_netns(
        "PODNET_FAULT_DROP_EVERY=1 $PODNET pingpong -s 4096 -n 20 --verify --timeout 20 > srv.txt 2>&1 & listening\n\
         $PODNET pingpong -s 4096 -n 20 --timeout 20 localhost > cli.txt 2>&1; c=$?\n\
         wait $!; s=$?; echo \"rc=$c,$s\"; cat srv.txt cli.txt",
    );
    let out = stdout(&o);
    assert!(!out.contains(",0\n"), "the server passed: {out}");
    assert!(out.contains("message 0: byte 0 is 0x84"), "{out}");
}

#[test]
fn verify_and_json_over_ipv6_in_event_mode() {
    let o = in_netns(
        "ip -6 addr add fd00::1/128 dev lo nodad; ip -6 addr add fd00::2/128 dev lo nodad\n\
         $PODNET pingpong -d soft:fd00::1 -e -s 65536 -n 50 --verify --json --timeout 30 > srv.json & listening\n\
         $PODNET pingpong -d soft:fd00::2 -e -s 65536 -n 50 --verify --json --timeout 30 fd00::1; c=$?\n\
         wait $!; s=$?; cat srv.json; rm -f srv.json; exit $((c + s))",
    );
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let rows: Vec<Value> =
        stdout(&o).lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["verify"]["ok"], true, "{r}");
        assert_eq!(r["verify"]["bytes_checked"], 50 * 65536, "{r}");
        assert_eq!(r["bytes"], 2 * 50 * 65536);
        assert_eq!(r["progress"], "event");
        assert_eq!(r["counters"]["icrc_errors"], 0);
        assert_eq!(r["counters"]["icrc_unverified"], 0);
        // 50 messages of 64 packets at MTU 1024, plus one ACK per message received.
        assert_eq!(r["counters"]["sent_pkts"], 50 * 64 + 50, "{r}");
    }
    assert_eq!(rows[0]["role"], "client");
    assert_eq!(rows[0]["remote"]["gid"], "fd00::1");
}

#[test]
fn bad_input_and_an_absent_peer_fail_cleanly() {
    for (args, msg) in [
        (&["pingpong", "-m", "1500"][..], "--mtu must be 256"),
        (&["pingpong", "-d", "soft:1.2.3"][..], "bad device name"),
        (&["pingpong", "-i", "2"][..], "one port"),
        (&["pingpong", "-g", "3", "--timeout", "1"][..], "GID index 3"),
        // Refused before anything is allocated (it once tried 56 GB).
        (&["pingpong", "-r", "1000000000"][..], "takes at most 16384 work requests per queue"),
    ] {
        let o = podnet(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
    }
    let t0 = Instant::now();
    let o = in_netns("$PODNET pingpong --timeout 2 127.0.0.1");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("Couldn't connect to 127.0.0.1:18515"), "{}", stderr(&o));
    let o = in_netns("$PODNET pingpong --timeout 1");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no client connected"), "{}", stderr(&o));
    // A server that accepts and then says nothing: a timeout, not "closed the connection".
    let o = in_netns(
        "python3 -c 'import socket,time; s=socket.socket(); s.bind((\"127.0.0.1\", 18515)); \
         s.listen(); c,_=s.accept(); time.sleep(4)' >/dev/null 2>&1 & sleep 0.5\n\
         $PODNET pingpong --timeout 1 127.0.0.1",
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no answer from the peer within 1s (--timeout) while waiting for its address"),
        "{err}"
    );
    // A peer that stops answering mid-exchange (stopped, not gone: its QP still exists) and
    // a timeout shorter than the retries: the error says so with the counters that moved.
    let o = in_netns(
        "$PODNET pingpong -n 100000000 > /dev/null 2>&1 & s=$!; listening\n\
         $PODNET pingpong -n 100000000 --timeout 0.2 localhost > /dev/null & c=$!\n\
         sleep 0.5; kill -STOP $s; wait $c; r=$?; kill -9 $s; exit $r",
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("no completion for 200ms (device counters: sent_pkts "), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20));
}

/// A process listens on TCP `port` in the tap namespace.
pub(crate) fn wait_listen(vm: &Vm, port: u16) {
    let want = format!(":{port:04X} ");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for f in ["tcp", "tcp6"] {
            let t = std::fs::read_to_string(format!("/proc/{}/net/{f}", vm.qemu_pid()))
                .unwrap_or_default();
            if t.lines().any(|l| l.contains(&want) && l.split_whitespace().nth(3) == Some("0A")) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "podnet never listened on TCP {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One run; returns podnet's JSON result, or `None` when ibv_rc_pingpong received everything
/// but exited before its last ACK reached podnet (the only failure a rerun may excuse).
fn run_one(
    vm: &Vm,
    gid: u32,
    v6: bool,
    size: u32,
    podnet_serves: bool,
    iters: u32,
) -> Option<(Value, String)> {
    let host = if v6 { HOST_IP6 } else { HOST_IP4 };
    let dev = format!("soft:{host}");
    let (s, n) = (size.to_string(), iters.to_string());
    let mut args = vec!["pingpong", "-d", &dev, "-g", "0", "-s", &s, "-n", &n];
    // Event mode: a busy-polling podnet would take a core from the emulated guest, whose rxe
    // then misses its 67 ms retransmit deadline now and then and resends what arrived.
    args.extend(["-e", "--verify", "--json", "--timeout", "120"]);
    let rc = format!("ibv_rc_pingpong -d rxe_eth -g {gid} -s {size} -n {iters}");
    let (o, guest_out) = podnet_vs_guest(vm, &args, &rc, host, podnet_serves);
    let what = format!(
        "{} size {size} {}",
        if v6 { "IPv6" } else { "IPv4" },
        if podnet_serves { "podnet serves" } else { "rc_pingpong serves" },
    );
    let all_received = guest_out.contains(&format!("{iters} iters in"));
    let last_unacked = format!("RetryExcErr for wr_id 2 ({} sent, {iters} received)", iters - 1);
    if all_received && stderr(&o).contains(&last_unacked) {
        // ibv_rc_pingpong got every message (it printed all its iterations) and exited, but
        // the ACK of podnet's last one never came: rxe completes a receive before it sends
        // the ACK and destroying the QP can drop it, or (under loss) the ACK was dropped and
        // the peer was gone before podnet's retransmission (docs/rxe-reference.md). podnet,
        // like ibv_rc_pingpong in its place, reports its last send as failed.
        eprintln!("{what}: rc_pingpong exited before its last ACK reached podnet; rerun");
        return None;
    }
    if !o.status.success() {
        // What rxe counted, beside podnet's own counters in its error.
        let rxe =
            vm.rxe_counters("rxe_eth").map(|c| format!("{c:?}")).unwrap_or_else(|e| e.to_string());
        panic!("{what}: podnet {}\nguest:\n{guest_out}\nrxe_eth counters: {rxe}", stderr(&o));
    }
    assert!(guest_out.contains(&format!("{iters} iters in")), "{what}\nguest:\n{guest_out}");
    let v: Value =
        serde_json::from_str(stdout(&o).trim()).unwrap_or_else(|e| panic!("{e}: {what}"));
    assert_eq!(v["verify"]["ok"], true, "{what}: {v}");
    assert_eq!(v["verify"]["bytes_checked"], u64::from(size) * u64::from(iters), "{what}");
    assert_eq!(v["counters"]["icrc_errors"], 0, "{what}: {v}");
    assert_eq!(v["counters"]["icrc_unverified"], 0, "{what}: {v}");
    Some((v, what))
}

/// Runs allowed per case without loss, where only the teardown race can take the last ACK.
const CLEAN_ATTEMPTS: u32 = 3;
/// Runs allowed per case under 5 % loss: there the last ACK is also dropped (one run in
/// twenty, by the drop rule alone), and ibv_rc_pingpong has exited before podnet retransmits,
/// so nothing answers. One CI run met it twice in a row; six in a row, even at one run in
/// five, happen about once in 15,000.
const LOSSY_ATTEMPTS: u32 = 6;

#[test]
fn pingpong_interoperates_with_rxe() {
    let t0 = Instant::now();
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let rxe = vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    // Warm-up, not checked: TCG translates the guest's rxe code paths the first time they
    // run, and a first message can stall past rxe's 67 ms retransmit deadline.
    for v6 in [false, true] {
        let gid = if v6 { rxe.eth.gid6 } else { rxe.eth.gid4 };
        for (size, podnet_serves) in [(1, true), (4096, false), (65536, true), (65536, false)] {
            run_one(&vm, gid, v6, size, podnet_serves, 5);
        }
    }
    eprintln!("warm-up done after {:.1} s", t0.elapsed().as_secs_f64());
    let iters = 100;
    // Reruns the teardown race (or the lost last ACK under loss) took: counted and printed.
    let (mut runs, mut reruns) = (0u32, 0u32);
    for v6 in [false, true] {
        let gid = if v6 { rxe.eth.gid6 } else { rxe.eth.gid4 };
        for size in [1, 64, 4096, 65536] {
            for podnet_serves in [true, false] {
                let mut before = vm.rxe_counters("rxe_eth").unwrap();
                let t = Instant::now();
                runs += 1;
                let (v, what) = (1..=CLEAN_ATTEMPTS)
                    .find_map(|attempt| {
                        if attempt > 1 {
                            reruns += 1;
                            before = vm.rxe_counters("rxe_eth").unwrap();
                        }
                        run_one(&vm, gid, v6, size, podnet_serves, iters)
                    })
                    .unwrap_or_else(|| panic!("the teardown race {CLEAN_ATTEMPTS} times in a row"));
                let after = vm.rxe_counters("rxe_eth").unwrap();
                let c = &v["counters"];
                let sent = c["sent_pkts"].as_u64().unwrap();
                // Every packet podnet sent reached rxe, but for unasked ACKs (after rxe resent a
                // message): one can come after ibv_rc_pingpong destroyed its QP, and rxe counts
                // no packet for a QP it no longer has.
                let unasked = c["unasked_acks"].as_u64().unwrap();
                let rcvd = delta(&after, &before, "rcvd_pkts");
                assert!(
                    rcvd <= sent && sent - rcvd <= unasked,
                    "{what}: podnet sent {sent} packets ({unasked} unasked ACKs), rxe received \
                     {rcvd}: {after:?}"
                );
                assert_eq!(
                    delta(&after, &before, "sent_pkts"),
                    c["rcvd_pkts"].as_u64().unwrap(),
                    "{what}"
                );
                for k in ["out_of_seq_request", "rcvd_seq_err", "duplicate_request"] {
                    assert_eq!(delta(&after, &before, k), 0, "{what}: rxe {k}: {after:?}");
                }
                for k in ["out_of_seq_request", "rcvd_seq_err", "retransmitted_pkts"] {
                    assert_eq!(c[k], 0, "{what}: podnet {k}: {c}");
                }
                // rxe's retransmit timer fires 67 ms after it was armed even when everything
                // since was ACKed, and resends the message in flight then
                // (docs/rxe-reference.md): podnet sees those as duplicates, and only those.
                let rxe_retries = delta(&after, &before, "completer_retry_err");
                let dups = c["duplicate_request"].as_u64().unwrap();
                let per_msg = u64::from(size.div_ceil(1024).max(1));
                assert!(
                    dups <= rxe_retries * per_msg,
                    "{what}: podnet saw {dups} duplicates, rxe retried {rxe_retries} times: {c}"
                );
                eprintln!(
                    "{what}: podnet sent {sent} packets, {:.1} usec/iter, {:.1} s",
                    v["usec_per_iter"].as_f64().unwrap(),
                    t.elapsed().as_secs_f64()
                );
            }
        }
    }
    // 5 % of RoCE packets dropped in the guest, both directions.
    vm.nft(
        "chain input { type filter hook input priority 0;\n\
           iifname \"eth0\" udp dport 4791 numgen random mod 100 < 5 drop\n}\n\
         chain output { type filter hook output priority 0;\n\
           oifname \"eth0\" udp dport 4791 numgen random mod 100 < 5 drop\n}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let before = vm.rxe_counters("rxe_eth").unwrap();
    let mut podnet_retrans = 0;
    for (v6, size, podnet_serves) in
        [(false, 65536, true), (false, 4096, false), (true, 65536, false), (true, 4096, true)]
    {
        let gid = if v6 { rxe.eth.gid6 } else { rxe.eth.gid4 };
        runs += 1;
        let (v, what) = (0..LOSSY_ATTEMPTS)
            .find_map(|attempt| {
                reruns += u32::from(attempt > 0);
                run_one(&vm, gid, v6, size, podnet_serves, iters)
            })
            .unwrap_or_else(|| panic!("the last ACK lost {LOSSY_ATTEMPTS} times in a row"));
        let r = v["counters"]["retransmitted_pkts"].as_u64().unwrap();
        eprintln!("{what} under 5% loss: podnet retransmitted {r}");
        podnet_retrans += r;
    }
    vm.nft_reset().unwrap();
    let after = vm.rxe_counters("rxe_eth").unwrap();
    let rxe_retries = delta(&after, &before, "completer_retry_err");
    eprintln!(
        "under loss: podnet retransmitted {podnet_retrans} packets, rxe completer_retry_err +{rxe_retries}"
    );
    assert!(podnet_retrans > 0, "podnet never retransmitted under 5% loss");
    assert!(rxe_retries > 0, "rxe never retried under 5% loss: {after:?}");
    let line = format!(
        "pingpong_interoperates_with_rxe: {:.1} s; {runs} cases, {reruns} reruns after \
         ibv_rc_pingpong exited before its last ACK (at most {} per case without loss, {} under \
         loss)",
        t0.elapsed().as_secs_f64(),
        CLEAN_ATTEMPTS - 1,
        LOSSY_ATTEMPTS - 1
    );
    eprintln!("{line}");
    crate::util::summary_note(&line);
}
