//! The verbs objects one by one on the soft provider: GIDs and port attributes, keys, bounds,
//! protection domains, SRQs, completion channels, asynchronous events, the loopback rule.
//! Each test runs in its own network namespace.

mod common;

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{ALL, Conn, Local, private_netns};
use providers::{ContextOptions, Progress};
use verbs::{
    Access, AsyncEvent, Context, Error, GidType, LinkLayer, Mtu, PhysState, PortState, QpInit,
    QpType, RKey, RecvWr, SendOp, SendWr, WcStatus,
};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn port_attributes_and_roce_v2_gids() {
    private_netns(0);
    let c4 = providers::open("soft:127.0.0.1", &ContextOptions::default()).unwrap();
    let c6 = providers::open("soft:[fd00::1]:4791", &ContextOptions::default()).unwrap();
    assert_eq!(c4.device_name(), "soft:127.0.0.1");
    assert_eq!(c6.device_name(), "soft:fd00::1");
    let p = c4.query_port();
    assert_eq!(
        (p.state, p.phys_state, p.active_mtu, p.lid, p.link_layer),
        (PortState::Active, Some(PhysState::LinkUp), Mtu::Mtu4096, 0, LinkLayer::Ethernet)
    );
    let g = c4.query_gid(0).unwrap();
    assert_eq!(g.gid.to_string(), "0000:0000:0000:0000:0000:ffff:7f00:0001");
    assert_eq!((g.gid_type, g.gid.to_ip()), (GidType::RoceV2, Some(ip("127.0.0.1"))));
    assert_eq!(c6.query_gid(0).unwrap().gid.to_ip(), Some(ip("fd00::1")));
    let e = c4.query_gid(1).unwrap_err();
    assert!(matches!(e, Error::NoGid { index: 1, len: 1, .. }), "{e}");
    // Other names go to the rdma-core provider; this host has no RDMA device.
    let e = providers::open("mlx5_0", &ContextOptions::default()).unwrap_err();
    if cfg!(feature = "rdma-core") {
        assert!(matches!(e, Error::NoRdmaDevice { .. } | Error::NoLibibverbs), "{e}");
        assert!(e.to_string().contains("mlx5_0") || e.to_string().contains("libibverbs"), "{e}");
    } else {
        assert!(matches!(e, Error::NotBuilt), "{e}");
    }
    let e = providers::open("soft:1.2.3", &ContextOptions::default()).unwrap_err();
    assert!(matches!(e, Error::BadDeviceName { .. }), "{e}");
}

#[test]
fn the_default_device_takes_the_next_free_loopback_address() {
    private_netns(0);
    let opts = ContextOptions::default();
    let names: Vec<String> = (0..3)
        .map(|_| providers::open("soft", &opts).unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(Context::device_name)
        .collect();
    assert_eq!(names, ["soft:127.0.0.1", "soft:127.0.0.2", "soft:127.0.0.3"]);
    // An explicit name that is taken is an error, not a silent move.
    let _a = providers::open("soft:127.0.0.9", &opts).unwrap();
    let e = providers::open("soft:127.0.0.9", &opts).unwrap_err();
    assert!(e.to_string().contains("soft:127.0.0.9"), "{e}");
}

#[test]
fn rkeys_are_unique_and_unguessable() {
    private_netns(0);
    let mut all = Vec::new();
    for dev in ["soft:127.0.0.1", "soft:127.0.0.2"] {
        let ctx = providers::open(dev, &ContextOptions::default()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let mrs: Vec<_> = (0..500).map(|_| pd.reg_mr(64, ALL).unwrap()).collect();
        let keys: Vec<u32> = mrs.iter().map(|m| m.rkey().0).collect();
        assert_eq!(keys.iter().collect::<HashSet<_>>().len(), keys.len(), "duplicate rkeys");
        let steps: HashSet<u32> = keys.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > 490, "rkeys follow a pattern: {} distinct steps", steps.len());
        let local = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
        assert_eq!(local.rkey(), RKey(0), "no remote right, no rkey");
        all.push(keys);
    }
    let a: HashSet<_> = all[0].iter().collect();
    assert!(all[1].iter().filter(|k| a.contains(k)).count() < 3, "two devices share keys");
}

#[test]
fn memory_regions_check_bounds_and_outlive_nothing() {
    private_netns(0);
    let (a, b) = common::local_pair(4096);
    assert!(matches!(a.mr.sge(4000, 97), Err(Error::OutOfBounds { .. })));
    assert!(a.mr.write(4095, &[1, 2]).is_err());
    assert!(a.mr.read(usize::MAX, &mut [0]).is_err());
    // A work request naming a region that is gone fails with a protection error; nothing
    // touches freed memory.
    let pd = a.pd.reg_mr(4096, ALL).unwrap();
    let sge = pd.sge(0, 100).unwrap();
    drop(pd);
    let op = SendOp::Write { remote_addr: b.mr.addr(), rkey: b.mr.rkey() };
    a.qp.post_send(SendWr { sgl: vec![sge].into(), ..SendWr::new(1, op) }).unwrap();
    let wc = a.next_wc(Duration::from_secs(2)).unwrap();
    assert_eq!(wc.status, WcStatus::LocProtErr);
}

#[test]
fn protection_domains_isolate() {
    private_netns(0);
    let (a, b) = common::local_pair(4096);
    // A region of another PD on the responder: remote access error.
    let other = b.ctx.alloc_pd().unwrap().reg_mr(4096, ALL).unwrap();
    let op = SendOp::Write { remote_addr: other.addr(), rkey: other.rkey() };
    a.qp.post_send(SendWr { sgl: vec![a.mr.sge(0, 8).unwrap()].into(), ..SendWr::new(1, op) })
        .unwrap();
    assert_eq!(a.next_wc(Duration::from_secs(2)).unwrap().status, WcStatus::RemAccessErr);
    assert_eq!(other.to_vec(0, 8).unwrap(), [0; 8], "the other PD's memory changed");
}

#[test]
fn an_srq_serves_two_qps_and_signals_its_limit() {
    private_netns(0);
    let opts = ContextOptions::default();
    let server = providers::open("soft:127.0.0.1", &opts).unwrap();
    let pd = server.alloc_pd().unwrap();
    let cq = server.create_cq(64, None).unwrap();
    let mr = pd.reg_mr(1 << 16, ALL).unwrap();
    let srq = pd.create_srq(16).unwrap();
    let mut init = QpInit::new(QpType::Rc, &cq);
    init.srq = Some(&srq);
    let qps = [pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap()];
    let e = qps[0].post_recv(RecvWr::new(0)).unwrap_err();
    assert!(e.to_string().contains("SRQ"), "{e}");
    for i in 0..4 {
        srq.post_recv(RecvWr {
            sgl: vec![mr.sge(i * 1024, 1024).unwrap()].into(),
            ..RecvWr::new(i as u64)
        })
        .unwrap();
    }
    srq.arm_limit(3).unwrap();
    let clients: Vec<Local> = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|c| Local::new(ip(c), Progress::Event, QpType::Rc, 4096))
        .collect();
    let c = Conn::default();
    let rev = c.reversed();
    for (qp, cl) in qps.iter().zip(&clients) {
        let m = verbs::ModifyQp {
            state: Some(verbs::QpState::Init),
            access: Some(ALL),
            ..Default::default()
        };
        qp.modify(&m).unwrap();
        cl.connect(server.ip(), qp.qpn(), &c);
        common::connect_qp(qp, cl.ctx.ip(), cl.qp.qpn(), &rev);
    }
    for (k, cl) in clients.iter().enumerate() {
        cl.mr.write(0, &[k as u8 + 1; 100]).unwrap();
        cl.qp
            .post_send(SendWr {
                sgl: vec![cl.mr.sge(0, 100).unwrap()].into(),
                ..SendWr::new(0, SendOp::Send)
            })
            .unwrap();
        assert_eq!(cl.next_wc(Duration::from_secs(2)).unwrap().status, WcStatus::Success);
    }
    let mut got = Vec::new();
    for _ in 0..2 {
        let wc = cq.poll_one_blocking(Duration::from_secs(2)).expect("a receive");
        got.push((wc.qp_num, wc.wr_id));
        let first = mr.to_vec(wc.wr_id as usize * 1024, 1).unwrap()[0];
        let k = qps.iter().position(|q| q.qpn() == wc.qp_num).unwrap();
        assert_eq!(first, k as u8 + 1, "QP {k}'s message landed in receive {}", wc.wr_id);
    }
    let ids: HashSet<u64> = got.iter().map(|g| g.1).collect();
    assert_eq!(ids, HashSet::from([0, 1]), "{got:?}");
    let ev = server.get_async_event(Some(Duration::from_secs(1)));
    assert!(matches!(ev, Some(AsyncEvent::SrqLimitReached(_))), "{ev:?}");
}

#[test]
fn a_completion_channel_blocks_until_the_completion() {
    private_netns(0);
    let (a, b) = common::local_pair(4096);
    b.cq.req_notify().unwrap();
    let t0 = Instant::now();
    assert_eq!(b.channel.get_cq_event(Some(Duration::from_millis(50))), None);
    assert!(t0.elapsed() >= Duration::from_millis(50));
    b.qp.post_recv(RecvWr { sgl: vec![b.mr.sge(0, 64).unwrap()].into(), ..RecvWr::new(5) })
        .unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        a.qp.post_send(SendWr {
            sgl: vec![a.mr.sge(0, 64).unwrap()].into(),
            ..SendWr::new(1, SendOp::SendWithImm(9))
        })
        .unwrap();
        a
    });
    let ev = b.channel.get_cq_event(Some(Duration::from_secs(5)));
    assert_eq!(ev, Some(b.cq.id()));
    let mut wc = [verbs::empty_wc()];
    assert_eq!(b.cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].imm, wc[0].byte_len), (5, Some(9), 64));
    // One event per arming.
    assert_eq!(b.channel.get_cq_event(Some(Duration::from_millis(20))), None);
    drop(sender.join().unwrap());
}

/// A thread that waited for completion events drives the device meanwhile (its progress
/// thread sleeps); once it stops waiting, the progress thread takes the device over within a
/// millisecond — a peer's WRITEs into it are acknowledged though nobody polls it.
#[test]
fn a_device_whose_event_waiter_left_is_served_at_once() {
    private_netns(0);
    let (a, b) = common::local_pair(4096);
    b.qp.post_recv(RecvWr { sgl: vec![b.mr.sge(0, 64).unwrap()].into(), ..RecvWr::new(5) })
        .unwrap();
    b.cq.req_notify().unwrap();
    let waiter = std::thread::spawn(move || {
        let ev = b.channel.get_cq_event(Some(Duration::from_secs(5)));
        (b, ev)
    });
    std::thread::sleep(Duration::from_millis(50));
    a.qp.post_send(SendWr {
        sgl: vec![a.mr.sge(0, 64).unwrap()].into(),
        ..SendWr::new(1, SendOp::Send)
    })
    .unwrap();
    let (b, ev) = waiter.join().unwrap();
    assert_eq!(ev, Some(b.cq.id()));
    assert_eq!(a.next_wc(Duration::from_secs(2)).unwrap().status, WcStatus::Success);
    // Nobody waits on b or polls it now.
    std::thread::sleep(Duration::from_millis(20));
    let op = SendOp::Write { remote_addr: b.mr.addr(), rkey: b.mr.rkey() };
    for i in 0..5u8 {
        a.mr.write(0, &[i + 1; 64]).unwrap();
        let t0 = Instant::now();
        a.qp.post_send(SendWr { sgl: vec![a.mr.sge(0, 64).unwrap()].into(), ..SendWr::new(2, op) })
            .unwrap();
        assert_eq!(a.next_wc(Duration::from_secs(5)).unwrap().status, WcStatus::Success);
        // A progress thread left asleep would answer only after its longest sleep (1 s).
        let took = t0.elapsed();
        assert!(took < Duration::from_millis(300), "WRITE {i} acknowledged after {took:?}");
    }
    assert_eq!(b.mr.to_vec(0, 64).unwrap(), vec![5; 64]);
}

#[test]
fn an_unreachable_network_is_a_port_error_then_active_again() {
    private_netns(0);
    let a = Local::new(ip("127.0.0.1"), Progress::Event, QpType::Ud, 4096);
    let c = Conn::default();
    a.connect(ip("127.0.0.1"), a.qp.qpn(), &c);
    // No route to 10.0.0.0/8 in this namespace.
    let dest = verbs::UdDest::new(ip("10.1.2.3"), verbs::Qpn::new(0x11), verbs::QKey(1));
    let w = SendWr {
        sgl: vec![a.mr.sge(0, 8).unwrap()].into(),
        ud: Some(dest),
        ..SendWr::new(1, SendOp::Send)
    };
    a.qp.post_send(w).unwrap();
    assert_eq!(a.ctx.get_async_event(Some(Duration::from_secs(1))), Some(AsyncEvent::PortErr));
    assert_eq!(a.ctx.query_port().state, PortState::Down);
    let dest = verbs::UdDest { ip: ip("127.0.0.1"), ..dest };
    let w = SendWr {
        sgl: vec![a.mr.sge(0, 8).unwrap()].into(),
        ud: Some(dest),
        ..SendWr::new(2, SendOp::Send)
    };
    a.qp.post_send(w).unwrap();
    assert_eq!(a.ctx.get_async_event(Some(Duration::from_secs(1))), Some(AsyncEvent::PortActive));
    assert_eq!(a.ctx.query_port().state, PortState::Active);
}

/// A RoCE datagram to `dst`:4791 from a plain UDP socket: a SEND_ONLY to QP 0x99 with an
/// ICRC over the header Linux will build (DF, ID 0), correct or with one bit flipped.
const RC_SEND_ONLY: wire::Opcode =
    wire::Opcode::new(wire::Transport::Rc, wire::Operation::SendOnly);

fn inject(src: IpAddr, dst: IpAddr, qpn: verbs::Qpn, good: bool) {
    let sock = socket2::Socket::new(
        if dst.is_ipv4() { socket2::Domain::IPV4 } else { socket2::Domain::IPV6 },
        socket2::Type::DGRAM,
        None,
    )
    .unwrap();
    sock.bind(&std::net::SocketAddr::new(src, 4791).into()).unwrap();
    let mut b = wire::bth::Repr::new(RC_SEND_ONLY, qpn, verbs::Psn::new(1));
    b.ack_req = true;
    let r = wire::roce::Repr::new(b);
    let mut pkt = vec![0u8; r.buffer_len(8)];
    r.emit(&[7u8; 8], &mut pkt).unwrap();
    if src.is_ipv4() {
        let v: i32 = libc::IP_PMTUDISC_DO;
        // SAFETY: passes a live i32 and its size; the kernel only reads it.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&raw const v).cast(),
                4,
            )
        };
        assert_eq!(rc, 0, "DF, so Linux sends Identification 0");
    }
    // What Linux sends on this socket: IPv4 with DF and Identification 0, or IPv6.
    let h = wire::icrc::PseudoHeader::between(src, dst, 4791, 4791).expect("one family");
    h.seal(&mut pkt).unwrap();
    if !good {
        pkt[13] ^= 0x10;
    }
    sock.send_to(&pkt, &std::net::SocketAddr::new(dst, 4791).into()).unwrap();
}

#[test]
fn every_datagram_is_icrc_checked() {
    private_netns(0);
    // A third IPv6 address, for a sender that is not the QP's peer.
    let ok = std::process::Command::new("ip")
        .args(["-6", "addr", "add", "fd00::3/128", "dev", "lo", "nodad"])
        .status()
        .unwrap();
    assert!(ok.success());
    for (dev, src) in [("127.0.0.1", "127.0.0.5"), ("fd00::1", "fd00::2")] {
        // An RC QP connected to `src` (QP 0x99 there), expecting PSN 1.
        let l = Local::new(ip(dev), Progress::Event, QpType::Rc, 4096);
        let conn = Conn { psn_remote: 1, ..Conn::default() };
        common::connect_qp(&l.qp, ip(src), verbs::Qpn::new(0x99), &conn);
        let qpn = l.qp.qpn();
        inject(ip(src), ip(dev), qpn, true);
        inject(ip(src), ip(dev), qpn, false);
        inject(ip(src), ip(dev), qpn, true);
        let ctx = &l.ctx;
        let t0 = Instant::now();
        while ctx.counters().rcvd_pkts + ctx.counters().icrc_errors < 3 {
            assert!(t0.elapsed() < Duration::from_secs(2), "{dev}: {:?}", ctx.counters());
            std::thread::sleep(Duration::from_millis(5));
        }
        let c = ctx.counters();
        // The good ones pass the ICRC (and, with no receive posted, are answered by an RNR
        // NAK); the damaged one is counted and dropped.
        assert_eq!((c.rcvd_pkts, c.icrc_errors, c.icrc_unverified), (2, 1, 0), "{dev}: {c:?}");
        assert_eq!(c.dropped_pkts, 0, "{dev}: {c:?}");
        // The same packet from another address, and one for a QP the device does not have,
        // are dropped on their headers: counted by reason, their ICRC never computed.
        let other = if dev.contains(':') { "fd00::3" } else { "127.0.0.6" };
        inject(ip(other), ip(dev), qpn, true);
        inject(ip(src), ip(dev), verbs::Qpn::new(qpn.get() ^ 0x40_0000), false);
        while ctx.counters().dropped_pkts < 2 {
            assert!(t0.elapsed() < Duration::from_secs(4), "{dev}: {:?}", ctx.counters());
            std::thread::sleep(Duration::from_millis(5));
        }
        let c = ctx.counters();
        assert_eq!((c.dropped_wrong_source, c.dropped_unknown_qp), (1, 1), "{dev}: {c:?}");
        assert_eq!((c.rcvd_pkts, c.icrc_errors), (2, 1), "{dev}: {c:?}");
    }
}

/// What reaches the wire: a capture on lo shows the QP's traffic class in the TOS byte, DF and
/// Identification 0 (what the ICRC was computed over), and every ICRC verifies in podnet's
/// decoder — which the receiving device also proved by accepting every packet.
#[test]
fn the_wire_carries_the_qp_traffic_class_df_and_id_0() {
    private_netns(0);
    let pcap = std::env::temp_dir().join(format!("podnet-tos-{}.pcap", std::process::id()));
    let mut dump = std::process::Command::new("tcpdump")
        .args(["--immediate-mode", "-Z", "root", "-i", "lo", "-U", "-w"])
        .args([pcap.to_str().unwrap(), "udp port 4791"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tcpdump (scripts/deps.sh installs it)");
    let mut first = String::new();
    let mut err = std::io::BufReader::new(dump.stderr.take().unwrap());
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    assert!(first.contains("listening on"), "tcpdump: {first}");
    let (a, b) = common::local_pair(8192);
    a.qp.modify(&verbs::ModifyQp { traffic_class: Some(0x68), ..Default::default() }).unwrap();
    let op = SendOp::Write { remote_addr: b.mr.addr(), rkey: b.mr.rkey() };
    a.qp.post_send(SendWr { sgl: vec![a.mr.sge(0, 8192).unwrap()].into(), ..SendWr::new(1, op) })
        .unwrap();
    assert_eq!(a.next_wc(Duration::from_secs(2)).unwrap().status, WcStatus::Success);
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(dump.id() as i32, libc::SIGINT) };
    let _ = dump.wait();
    let text = std::process::Command::new("tcpdump")
        .args(["-r", pcap.to_str().unwrap(), "-v", "-n"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    let _ = std::fs::remove_file(&pcap);
    let headers: Vec<&str> = text.lines().filter(|l| l.contains("proto UDP")).collect();
    // 8 WRITE packets at MTU 1024 from A — the FIRST (1,056 bytes) alone, the 6 MIDDLE and
    // the LAST (1,040 each) as one GSO run, which loopback never segments (segmented, they
    // would carry IDs 0 to 6) — and one ACK from B.
    assert_eq!(headers.len(), 3, "{text}");
    let from_a = headers.iter().filter(|l| l.contains("tos 0x68,")).count();
    assert_eq!(from_a, 2, "A's packets carry DSCP 26:\n{text}");
    assert!(text.contains("UDP, length 7280"), "7 packets in one datagram:\n{text}");
    assert!(headers.iter().all(|l| l.contains("id 0,") && l.contains("flags [DF]")), "{text}");
    assert_eq!(b.ctx.counters().rcvd_pkts, 8);
    assert_eq!(b.ctx.counters().icrc_errors, 0);
}

#[test]
fn the_fault_hook_damages_payloads_past_the_icrc() {
    private_netns(0);
    let clean = ContextOptions { progress: Progress::Event, ..Default::default() };
    let faulty = ContextOptions {
        fault: providers::FaultInjection { corrupt_every: Some(3), drop_every: None },
        ..clean.clone()
    };
    let a = Local::with_options(ip("127.0.0.1"), &clean, QpType::Rc, 1 << 16);
    let b = Local::with_options(ip("127.0.0.2"), &faulty, QpType::Rc, 1 << 16);
    let c = Conn::default();
    a.connect(b.ctx.ip(), b.qp.qpn(), &c);
    b.connect(a.ctx.ip(), a.qp.qpn(), &c.reversed());
    let mut damaged = Vec::new();
    for i in 0..9u64 {
        let msg = common::pattern_bytes(i, 1000);
        a.mr.write(0, &msg).unwrap();
        b.qp.post_recv(RecvWr {
            sgl: vec![b.mr.sge(4096, 1000).unwrap()].into(),
            ..RecvWr::new(i)
        })
        .unwrap();
        a.qp.post_send(SendWr {
            sgl: vec![a.mr.sge(0, 1000).unwrap()].into(),
            ..SendWr::new(i, SendOp::Send)
        })
        .unwrap();
        assert_eq!(a.next_wc(Duration::from_secs(2)).unwrap().status, WcStatus::Success);
        assert_eq!(b.next_wc(Duration::from_secs(2)).unwrap().status, WcStatus::Success);
        let got = b.mr.to_vec(4096, 1000).unwrap();
        let diff: Vec<usize> = (0..1000).filter(|k| got[*k] != msg[*k]).collect();
        if !diff.is_empty() {
            damaged.push((i, diff));
        }
    }
    // Every third payload, one byte in its middle; the transport saw nothing wrong.
    assert_eq!(damaged, vec![(2, vec![500]), (5, vec![500]), (8, vec![500])]);
    assert_eq!(b.ctx.counters().icrc_errors, 0);
    // The application's own writes are never touched.
    b.mr.write(0, &[7; 64]).unwrap();
    assert_eq!(b.mr.to_vec(0, 64).unwrap(), [7; 64]);
}

/// A soft device's QPNs start at a random point of the 24-bit space (not rxe's 0x11 every
/// time): a local process that cannot guess a QPN cannot forge a packet to it.
#[test]
fn qpns_start_at_random() {
    private_netns(0);
    let opts = ContextOptions::default();
    let first: Vec<u32> = ["soft:127.0.0.1", "soft:127.0.0.2", "soft:127.0.0.3"]
        .iter()
        .map(|d| {
            let ctx = providers::open(d, &opts).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let cq = ctx.create_cq(4, None).unwrap();
            pd.create_qp(&QpInit::new(QpType::Rc, &cq)).unwrap().qpn().get()
        })
        .collect();
    // Three devices with the same first QPN, or one at 0x11, happen once in 2^24 or more.
    assert!(first.iter().all(|q| *q != 0x11 && *q <= 0xff_ffff), "{first:x?}");
    assert!(first[0] != first[1] || first[1] != first[2], "{first:x?}");
}

/// A soft device says what it takes (`ibv_query_device`) and refuses more, before it
/// allocates: an 8 GiB region is refused at once, not allocated.
#[test]
fn limits_are_advertised_and_enforced_before_allocation() {
    private_netns(0);
    let ctx = providers::open("soft:127.0.0.1", &ContextOptions::default()).unwrap();
    let l = ctx.query_device().unwrap();
    assert_eq!(l, providers::SOFT_LIMITS);
    assert!(l.max_qp_wr >= 4096 && l.max_cqe >= 65536 && l.max_mr_size >= 1 << 30, "{l:?}");
    let kind = |e: Error| e.kind();
    let pd = ctx.alloc_pd().unwrap();
    let t0 = Instant::now();
    let e = pd.reg_mr(1 << 33, ALL).unwrap_err();
    assert_eq!(kind(e), verbs::ErrorKind::InvalidArgument);
    assert!(t0.elapsed() < Duration::from_secs(1), "refused before allocating 8 GiB");
    let e = ctx.create_cq(l.max_cqe + 1, None).unwrap_err();
    assert!(e.to_string().contains(&format!("at most {}", l.max_cqe)), "{e}");
    let cq = ctx.create_cq(l.max_cqe, None).unwrap();
    let mut init = QpInit::new(QpType::Rc, &cq);
    init.caps = verbs::QpCaps { max_recv_wr: l.max_qp_wr + 1, ..Default::default() };
    let e = pd.create_qp(&init).unwrap_err();
    assert_eq!(kind(e), verbs::ErrorKind::InvalidArgument);
    init.caps.max_recv_wr = l.max_qp_wr;
    pd.create_qp(&init).unwrap();
    assert_eq!(
        kind(pd.create_srq(l.max_srq_wr + 1).unwrap_err()),
        verbs::ErrorKind::InvalidArgument
    );
}
