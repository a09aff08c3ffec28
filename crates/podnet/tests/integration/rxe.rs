//! Linux Soft-RoCE as the reference peer (issue 3), in one guest boot: the host side of the tap
//! exchanges UDP/4791 with the guest over IPv4 and IPv6; then ibv_rc_pingpong and the six
//! perftest tools run between two rxe devices over the veth wire, IPv4 and IPv6 GIDs, and
//! `podnet capture decode` must decode every frame they put on the wire with its ICRC OK.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use rxevm::record;
use rxevm::{Config, GUEST_IP4, GUEST_IP6, HOST_IP4, HOST_IP6, Vm};
use serde_json::Value;

use crate::util::{self, testdata};

/// Guest side: echo every datagram that reaches UDP/4791 on the virtio NIC, both families.
const ECHO_PY: &str = r#"
import select, socket
s4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s4.bind(('169.254.77.2', 4791))
s6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); s6.bind(('fd77::2', 4791))
open(__import__('os').environ['OUT'] + '/echo.ready', 'w').close()
n = 0
while n < 6:
    r, _, _ = select.select([s4, s6], [], [], 60)
    if not r: break
    for s in r:
        data, peer = s.recvfrom(2048); s.sendto(data, peer); n += 1
print('echoed', n, flush=True)
"#;

fn udp_exchange(vm: &Vm) {
    std::fs::write(vm.out_dir().join("echo.py"), ECHO_PY).unwrap();
    let job =
        vm.spawn("udp echo", "export OUT; python3 $OUT/echo.py", Duration::from_secs(90)).unwrap();
    let ready = vm.out_dir().join("echo.ready");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        if Instant::now() > deadline || job.is_finished() {
            panic!("the guest's UDP echo did not start: {:?}", job.wait());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let sockets = vm
        .in_host_netns(|| {
            let s4 = UdpSocket::bind(format!("{HOST_IP4}:4791")).unwrap();
            let s6 = UdpSocket::bind(format!("[{HOST_IP6}]:4791")).unwrap();
            (s4, s6)
        })
        .unwrap();
    let (s4, s6) = sockets;
    for s in [&s4, &s6] {
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    }
    let targets: [(&UdpSocket, SocketAddr); 2] = [
        (&s4, format!("{GUEST_IP4}:4791").parse().unwrap()),
        (&s6, format!("[{GUEST_IP6}]:4791").parse().unwrap()),
    ];
    let mut echoed = 0;
    for (sock, to) in targets {
        for i in 0..3u8 {
            let msg = [b'R', b'o', b'C', b'E', i, to.is_ipv6() as u8];
            // Resend until the echo comes back (the guest may still be binding).
            loop {
                sock.send_to(&msg, to).unwrap();
                let mut buf = [0u8; 64];
                match sock.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        assert_eq!(from, to, "echo from the guest's address and port 4791");
                        assert_eq!(&buf[..n], &msg);
                        echoed += 1;
                        break;
                    }
                    Err(_) => assert!(Instant::now() < deadline, "no UDP/4791 echo from {to}"),
                }
            }
        }
    }
    assert_eq!(echoed, 6);
    let out = job.wait().unwrap();
    assert!(out.output.contains("echoed 6"), "{}", out.output);
}

fn decode_all_ok(pcap: &std::path::Path) -> usize {
    let (rows, summary): (Vec<Value>, String) = util::decode_json_and_summary(pcap);
    for r in &rows {
        assert_eq!(r["icrc_ok"], true, "{}: {r}", pcap.display());
        assert!(r.get("error").is_none(), "{}: {r}", pcap.display());
    }
    assert!(summary.contains(", 0 not RoCEv2"), "{}: {summary}", pcap.display());
    rows.len()
}

#[test]
fn rxe_tools_on_the_wire_decode_with_every_icrc_ok() {
    let t0 = Instant::now();
    let vm = Vm::boot(&Config::default()).unwrap_or_else(|e| panic!("{e}"));
    let boot = vm.boot_time();
    eprintln!("rxe guest up in {:.1} s: {}", boot.as_secs_f64(), vm.ready_line());
    udp_exchange(&vm);
    let rxe = vm.setup_rxe().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    // The committed recordings use 64 KiB for the bandwidth tools; 16 KiB keeps this suite
    // well inside its CI budget under emulation.
    let sessions = record::sessions(3, Some(16384));
    let recorded =
        record::record(&vm, &rxe, &sessions, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(recorded.len(), 18);
    for r in &recorded {
        let frames = decode_all_ok(&r.roce_pcap);
        assert!(frames >= 4, "{}: only {frames} RoCE frames captured", r.session.name);
        let t = std::fs::read_to_string(&r.transcript).unwrap();
        assert!(
            t.lines().any(|l| l.starts_with("c>s ")) && t.lines().any(|l| l.starts_with("s>c ")),
            "{}:\n{t}",
            r.session.name
        );
        eprintln!("{:32} {frames:5} RoCE frames, every ICRC ok", r.session.name);
    }
    loss_and_ecn_rules(&vm, &rxe);
    eprintln!(
        "rxe suite: boot {:.1} s, total {:.1} s",
        boot.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn the_committed_recordings_decode_with_every_icrc_ok() {
    let dir = testdata("rxe");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("testdata/rxe") {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".pcap") && !name.ends_with(".tcp.pcap") {
            assert!(decode_all_ok(&p) > 0, "{name}");
            n += 1;
        }
    }
    assert_eq!(n, 18, "testdata/rxe should hold 18 RoCE captures");
}

/// nftables inside the guest: 5 % of the RoCE packets arriving on vB are dropped, and every
/// one leaving vA is marked CE. The transfer must still complete, rxe's recovery counters must
/// rise, and the marks must be on the wire with every ICRC still OK (the ICRC masks the TOS).
fn loss_and_ecn_rules(vm: &Vm, rxe: &rxevm::RxeSetup) {
    let before_a = vm.rxe_counters("rxeA").unwrap();
    let before_b = vm.rxe_counters("rxeB").unwrap();
    vm.nft(
        "chain input { type filter hook input priority 0;\n\
           iifname \"vB\" udp dport 4791 numgen random mod 100 < 5 drop\n}\n\
         chain output { type filter hook output priority 0;\n\
           oifname \"vA\" udp dport 4791 ip ecn set ce\n}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pcap = vm.out_dir().join("loss.pcap");
    let script = format!(
        "rm -f $OUT/.tcpdump.err; cap_start vB {pcap} 'udp port 4791'\n\
         pair 'ib_write_bw -d {b} -x {gb} -n 10 -F' 'ib_write_bw -d {a} -x {ga} -n 10 -F 127.0.0.1' >/dev/null; rc=$?\n\
         cap_stop || exit 1; exit $rc",
        pcap = pcap.display(),
        a = rxe.a.name,
        b = rxe.b.name,
        ga = rxe.a.gid4,
        gb = rxe.b.gid4
    );
    vm.run("write_bw under 5% loss, CE marks", &script, Duration::from_secs(240))
        .unwrap_or_else(|e| panic!("{e}"));
    vm.nft_reset().unwrap();
    let after_a = vm.rxe_counters("rxeA").unwrap();
    let after_b = vm.rxe_counters("rxeB").unwrap();
    let delta = util::counter_delta;
    // rxeB receives the WRITEs: a lost packet shows there as an out-of-sequence request; rxeA,
    // the requester, sees the NAK or times out and resends.
    let oos = delta(&after_b, &before_b, "out_of_seq_request");
    let seq_err = delta(&after_a, &before_a, "rcvd_seq_err");
    let retries = delta(&after_a, &before_a, "completer_retry_err");
    eprintln!(
        "under 5% loss: rxeB out_of_seq_request +{oos}, rxeA rcvd_seq_err +{seq_err}, \
         completer_retry_err +{retries}"
    );
    assert!(
        oos + seq_err + retries > 0,
        "no recovery counted under loss:\n{after_a:?}\n{after_b:?}"
    );
    // The marks, on the wire, from the receiving side.
    let frames = decode_all_ok(&pcap);
    let human = util::stdout(&util::podnet(&["capture", "decode", pcap.to_str().unwrap()]));
    let ce = human.lines().filter(|l| l.contains(" > 169.254.88.2:4791 CE ")).count();
    eprintln!("{frames} frames captured on vB, {ce} CE-marked, every ICRC ok");
    assert!(ce > 0, "no CE-marked frames from vA:\n{human}");
}
