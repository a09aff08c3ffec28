//! The transport's simulator scenarios again, now through the verbs API over real sockets:
//! this process against a `podnet-verbs-peer` process, over IPv4 and IPv6 loopback, in a
//! private network namespace per test, with nftables dropping RoCE datagrams where the
//! scenario asks for loss. RC delivers every message exactly once and byte-identical, in order;
//! UC and UD never deliver a damaged or duplicated one; errors end as verbs say they must.

mod common;

use std::time::{Duration, Instant};

use common::{Conn, Family, Local, Remote, private_netns};
use providers::Progress;
use verbs::{QpType, RKey, SendOp, SendWr, UdDest, WcStatus};

const SLOT: usize = 64 * 1024;
const SIZES: [usize; 6] = [0, 1, 1023, 1024, 1025, SLOT];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

/// RC: this process is the requester, the peer the responder; `window` messages in flight.
fn rc(op: Op, family: Family, loss: u32, progress: Progress, messages: usize) {
    const WINDOW: usize = 16;
    private_netns(loss);
    let (ip_a, ip_b) = family.ips();
    let a = Local::new(ip_a, progress, QpType::Rc, messages * SLOT);
    let mut peer = Remote::spawn();
    peer.open(ip_b);
    let b = peer.qp("rc", messages * SLOT, false);
    // On a clean network nothing may be retransmitted: a long ACK timeout (0.5 s) keeps a
    // busy CI machine's scheduling stalls from looking like loss. Under loss, 16.8 ms.
    let c = Conn { timeout: if loss > 0 { 12 } else { 17 }, ..Conn::default() };
    a.connect_with(&mut peer, ip_b, &b, &c);
    let size = |i: usize| match op {
        Op::CmpSwap | Op::FetchAdd => 8,
        _ => SIZES[i % SIZES.len()],
    };
    match op {
        Op::Send | Op::SendImm => peer.cmd(&format!("recv 0 {messages} {SLOT} {SLOT}")),
        Op::WriteImm => peer.cmd(&format!("recv 0 {messages} 0 0")),
        Op::Read => {
            for i in 0..messages {
                peer.cmd(&format!("fill {} {} {}", i * SLOT, size(i), 1000 + i));
            }
            vec![]
        }
        _ => vec![],
    };
    for i in 0..messages {
        a.mr.write(i * SLOT, &common::pattern_bytes(i as u64, size(i))).unwrap();
    }
    let raddr = |i: usize| b.addr + (i * SLOT) as u64;
    let rkey = RKey(b.rkey);
    let wr = |i: usize| {
        let op = match op {
            Op::Send => SendOp::Send,
            Op::SendImm => SendOp::SendWithImm(i as u32),
            Op::Write => SendOp::Write { remote_addr: raddr(i), rkey },
            Op::WriteImm => SendOp::WriteWithImm { remote_addr: raddr(i), rkey, imm: i as u32 },
            Op::Read => SendOp::Read { remote_addr: raddr(i), rkey },
            Op::CmpSwap => SendOp::CompareSwap {
                remote_addr: b.addr,
                rkey,
                compare: i as u64,
                swap: i as u64 + 1,
            },
            Op::FetchAdd => SendOp::FetchAdd { remote_addr: b.addr, rkey, add: 1 },
        };
        let mut w = SendWr::new(i as u64, op);
        if size(i) > 0 {
            w.sgl.push(a.mr.sge(i * SLOT, size(i)).unwrap());
        }
        w
    };
    let (mut posted, mut done) = (0, 0);
    let t0 = Instant::now();
    while done < messages {
        while posted < messages && posted - done < WINDOW {
            a.qp.post_send(wr(posted)).unwrap();
            posted += 1;
        }
        let wc = a.next_wc(Duration::from_secs(20)).unwrap_or_else(|| {
            panic!("{op:?}: no completion for message {done} after {:?}", t0.elapsed())
        });
        assert_eq!((wc.wr_id, wc.status), (done as u64, WcStatus::Success), "{op:?}: {wc:?}");
        match op {
            Op::Read => assert_eq!(wc.byte_len as usize, size(done)),
            Op::CmpSwap | Op::FetchAdd => {
                let orig = a.mr.to_vec(done * SLOT, 8).unwrap();
                let orig = u64::from_ne_bytes(orig.try_into().unwrap());
                if op == Op::CmpSwap {
                    assert_eq!(orig, done as u64, "compare-and-swap {done} saw {orig}");
                }
            }
            _ => {}
        }
        done += 1;
    }
    // What the responder got.
    match op {
        Op::Send | Op::SendImm | Op::WriteImm => {
            let wcs = peer.wait(messages, 10_000);
            assert_eq!(wcs.len(), messages, "{op:?}: receives completed");
            for (i, (id, status, opcode, len, imm)) in wcs.iter().enumerate() {
                assert_eq!((*id as usize, status.as_str()), (i, "Success"), "{op:?}");
                assert_eq!(*len as usize, size(i), "{op:?}: byte_len of message {i}");
                let want_imm = matches!(op, Op::SendImm | Op::WriteImm).then_some(i as u32);
                assert_eq!(*imm, want_imm, "{op:?}: immediate of message {i}");
                let want = if op == Op::WriteImm { "RecvRdmaWithImm" } else { "Recv" };
                assert_eq!(opcode, want);
            }
        }
        _ => {}
    }
    match op {
        Op::Send | Op::SendImm | Op::Write | Op::WriteImm => {
            let q: Vec<String> =
                (0..messages).map(|i| format!("{} {}", i * SLOT, size(i))).collect();
            let got = peer.cmd(&format!("digest {}", q.join(" ")));
            for (i, crc) in got.iter().enumerate() {
                let want = crc32fast::hash(&common::pattern_bytes(i as u64, size(i)));
                assert_eq!(crc, &want.to_string(), "{op:?}: payload of message {i} differs");
            }
        }
        Op::Read => {
            for i in 0..messages {
                let got = a.mr.to_vec(i * SLOT, size(i)).unwrap();
                assert!(got == common::pattern_bytes(1000 + i as u64, size(i)), "READ {i} differs");
            }
        }
        Op::CmpSwap | Op::FetchAdd => {
            let w: u64 = peer.cmd("word 0")[0].parse().unwrap();
            assert_eq!(w, messages as u64, "{op:?}: the remote word ran exactly once per message");
        }
    }
    let ca = a.ctx.counters();
    assert_eq!((ca.icrc_errors, ca.icrc_unverified), (0, 0), "{ca:?}");
    assert_eq!(peer.counter("icrc_unverified"), 0);
    if loss > 0 {
        let dropped = common::nft_dropped();
        assert!(dropped > 0, "nftables dropped nothing");
        let retrans = ca.retransmitted_pkts + peer.counter("retransmitted_pkts");
        assert!(retrans > 0, "{dropped} datagrams dropped but nothing was retransmitted: {ca:?}");
        eprintln!(
            "{op:?} {family:?}: {dropped} dropped, {retrans} retransmitted, {:?}",
            t0.elapsed()
        );
    } else {
        assert_eq!(ca.retransmitted_pkts, 0, "{ca:?}");
    }
}

/// UC (SEND, WRITE with immediate) and UD (SEND): whatever arrives is intact and arrives once.
fn unreliable(qp_type: QpType, family: Family, loss: u32, messages: usize) {
    private_netns(loss);
    let (ip_a, ip_b) = family.ips();
    let a = Local::new(ip_a, Progress::Event, qp_type, messages * SLOT);
    let mut peer = Remote::spawn();
    peer.open(ip_b);
    let ty = if qp_type == QpType::Uc { "uc" } else { "ud" };
    let b = peer.qp(ty, messages * SLOT, false);
    let c = Conn::default();
    a.connect_with(&mut peer, ip_b, &b, &c);
    let ud = qp_type == QpType::Ud;
    let size = |i: usize| if ud { [0, 1, 100, 1024][i % 4] } else { SIZES[i % SIZES.len()] };
    // UD receives start with the 40-byte GRH area.
    let grh = if ud { 40 } else { 0 };
    peer.cmd(&format!("recv 0 {messages} {SLOT} {SLOT}"));
    for i in 0..messages {
        a.mr.write(i * SLOT, &common::pattern_bytes(i as u64, size(i))).unwrap();
        let mut w = SendWr::new(i as u64, SendOp::SendWithImm(i as u32));
        if size(i) > 0 {
            w.sgl.push(a.mr.sge(i * SLOT, size(i)).unwrap());
        }
        if ud {
            w.ud = Some(UdDest::new(ip_b, b.qpn, verbs::QKey(common::QKEY)));
        }
        a.qp.post_send(w).unwrap();
        let wc = a.next_wc(Duration::from_secs(10)).expect("a send completion");
        assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
        if i % 8 == 7 {
            // Pace the sender a little so the peer's receive buffer never overflows.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let wcs = peer.wait(messages, 300);
    let mut seen = std::collections::HashSet::new();
    for (id, status, _, len, imm) in &wcs {
        let i = *imm.as_ref().expect("immediate data") as usize;
        assert_eq!(status, "Success");
        assert!(seen.insert(i), "message {i} delivered twice");
        assert_eq!(*len as usize, size(i) + grh, "byte_len of message {i}");
        let got = peer.cmd(&format!("digest {} {}", *id as usize * SLOT + grh, size(i)));
        let want = crc32fast::hash(&common::pattern_bytes(i as u64, size(i)));
        assert_eq!(got[0], want.to_string(), "message {i} arrived damaged");
    }
    if loss == 0 {
        assert_eq!(wcs.len(), messages, "{qp_type:?}: every message arrives on a clean network");
    } else {
        assert!(wcs.len() < messages, "{qp_type:?}: {loss}% loss but every message arrived");
        assert!(!wcs.is_empty(), "{qp_type:?}: nothing arrived at {loss}% loss");
    }
}

macro_rules! rc_tests {
    ($($name:ident: $op:ident, $fam:ident, $loss:expr, $prog:ident, $n:expr;)*) => {$(
        #[test]
        fn $name() {
            rc(Op::$op, Family::$fam, $loss, Progress::$prog, $n);
        }
    )*};
}

// Loss runs carry enough datagrams for ~20 drops or more: over IPv6 a message leaves as one
// GSO datagram (64 KiB of WRITE too), so 60 WRITEs or 100 atomics at 5 % dropped ~5 on
// average and now and then none, which the loss assertions (rightly) fail.
rc_tests! {
    rc_send_v4: Send, V4, 0, Event, 120;
    rc_send_imm_v6: SendImm, V6, 0, Busy, 120;
    rc_write_v4: Write, V4, 0, Busy, 120;
    rc_write_imm_v6: WriteImm, V6, 0, Event, 120;
    rc_read_v4: Read, V4, 0, Event, 120;
    rc_read_v6: Read, V6, 0, Busy, 60;
    rc_cmp_swap_v4: CmpSwap, V4, 0, Event, 200;
    rc_fetch_add_v6: FetchAdd, V6, 0, Event, 200;
    rc_send_v4_5pct_loss: Send, V4, 5, Event, 60;
    rc_write_v6_5pct_loss: Write, V6, 5, Event, 300;
    rc_write_imm_v4_5pct_loss: WriteImm, V4, 5, Busy, 60;
    rc_read_v4_5pct_loss: Read, V4, 5, Event, 60;
    rc_read_v6_20pct_loss: Read, V6, 20, Event, 30;
    rc_fetch_add_v4_20pct_loss: FetchAdd, V4, 20, Event, 100;
    rc_cmp_swap_v6_5pct_loss: CmpSwap, V6, 5, Busy, 400;
}

#[test]
fn uc_send_v4() {
    unreliable(QpType::Uc, Family::V4, 0, 60);
}

#[test]
fn uc_send_v6_20pct_loss() {
    unreliable(QpType::Uc, Family::V6, 20, 60);
}

#[test]
fn ud_send_v6() {
    unreliable(QpType::Ud, Family::V6, 0, 60);
}

#[test]
fn ud_send_v4_20pct_loss() {
    unreliable(QpType::Ud, Family::V4, 20, 100);
}

fn rc_pair(family: Family, c: &Conn) -> (Local, Remote, common::RemoteQp) {
    private_netns(0);
    let (ip_a, ip_b) = family.ips();
    let a = Local::new(ip_a, Progress::Event, QpType::Rc, 1 << 20);
    let mut peer = Remote::spawn();
    peer.open(ip_b);
    let b = peer.qp("rc", 1 << 20, false);
    a.connect_with(&mut peer, ip_b, &b, c);
    (a, peer, b)
}

#[test]
fn a_bad_rkey_is_a_remote_access_error_and_fatal_on_both_sides() {
    let (a, mut peer, b) = rc_pair(Family::V4, &Conn::default());
    let op = SendOp::Write { remote_addr: b.addr, rkey: RKey(b.rkey ^ 0x5a5a) };
    let w = SendWr { sgl: vec![a.mr.sge(0, 64).unwrap()].into(), ..SendWr::new(7, op) };
    a.qp.post_send(w).unwrap();
    let wc = a.next_wc(Duration::from_secs(5)).expect("a completion");
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::RemAccessErr));
    assert_eq!(
        a.ctx.get_async_event(Some(Duration::from_secs(1))),
        Some(verbs::AsyncEvent::QpFatal(a.qp.qpn()))
    );
    assert_eq!(a.qp.query().unwrap().0, verbs::QpState::Err);
    let t0 = Instant::now();
    let mut events = peer.cmd("events");
    while events.is_empty() && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
        events = peer.cmd("events");
    }
    assert_eq!(events, [format!("QpFatal({:?})", b.qpn)]);
    assert_eq!(peer.counter("sent_nak_err"), 1);
}

#[test]
fn rnr_retries_run_out_without_a_receive() {
    let c = Conn { rnr_retry: 2, min_rnr_timer: 1, ..Conn::default() };
    let (a, mut peer, _b) = rc_pair(Family::V6, &c);
    let w = SendWr { sgl: vec![a.mr.sge(0, 32).unwrap()].into(), ..SendWr::new(1, SendOp::Send) };
    a.qp.post_send(w).unwrap();
    let wc = a.next_wc(Duration::from_secs(5)).expect("a completion");
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr);
    assert_eq!(a.ctx.counters().rcvd_rnr_err, 3);
    assert_eq!(peer.counter("send_rnr_err"), 3);
}

#[test]
fn a_killed_peer_ends_in_retry_exc_err_within_the_bound() {
    let c = Conn { timeout: 10, retry_cnt: 3, ..Conn::default() };
    let (a, mut peer, b) = rc_pair(Family::V4, &c);
    peer.kill();
    let op = SendOp::Write { remote_addr: b.addr, rkey: RKey(b.rkey) };
    let t0 = Instant::now();
    for i in 0..3 {
        let w = SendWr { sgl: vec![a.mr.sge(0, 100).unwrap()].into(), ..SendWr::new(i, op) };
        a.qp.post_send(w).unwrap();
    }
    let wc = a.next_wc(Duration::from_secs(5)).expect("a completion");
    let elapsed = t0.elapsed();
    assert_eq!((wc.wr_id, wc.status), (0, WcStatus::RetryExcErr));
    // 4 timeouts of 4.096 µs × 2^10 ≈ 4.2 ms each; allow for a busy machine.
    assert!(elapsed >= Duration::from_micros(4 * 4194), "gave up early: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    for i in 1..3 {
        let wc = a.next_wc(Duration::from_secs(1)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::WrFlushErr));
    }
    assert_eq!(
        a.ctx.get_async_event(Some(Duration::from_secs(1))),
        Some(verbs::AsyncEvent::QpFatal(a.qp.qpn()))
    );
    assert_eq!(a.ctx.counters().retry_exceeded_err, 1);
}

#[test]
fn write_with_imm_into_an_srq() {
    private_netns(0);
    let (ip_a, ip_b) = Family::V6.ips();
    let a = Local::new(ip_a, Progress::Event, QpType::Rc, 1 << 20);
    let mut peer = Remote::spawn();
    peer.open(ip_b);
    let b = peer.qp("rc", 1 << 20, true);
    let c = Conn::default();
    a.connect_with(&mut peer, ip_b, &b, &c);
    peer.cmd("recv 0 4 0 0");
    for i in 0..4u32 {
        let op = SendOp::WriteWithImm { remote_addr: b.addr, rkey: RKey(b.rkey), imm: 100 + i };
        let w = SendWr {
            sgl: vec![a.mr.sge(0, 4096).unwrap()].into(),
            ..SendWr::new(u64::from(i), op)
        };
        a.qp.post_send(w).unwrap();
        assert_eq!(a.next_wc(Duration::from_secs(5)).unwrap().status, WcStatus::Success);
    }
    let wcs = peer.wait(4, 5000);
    let imms: Vec<Option<u32>> = wcs.iter().map(|w| w.4).collect();
    assert_eq!(imms, [Some(100), Some(101), Some(102), Some(103)]);
    assert!(wcs.iter().all(|w| w.2 == "RecvRdmaWithImm" && w.1 == "Success"), "{wcs:?}");
}

#[test]
fn ipv4_through_a_plain_udp_socket_recovers_the_id_and_counts_every_packet() {
    private_netns(0);
    let (ip_a, ip_b) = Family::V4.ips();
    let opts = providers::ContextOptions {
        ipv4_receive: providers::Ipv4Receive::Udp,
        ..Default::default()
    };
    let a = Local::with_options(ip_a, &opts, QpType::Rc, 1 << 20);
    let mut peer = Remote::spawn();
    peer.cmd(&format!("open soft:{ip_b} event udp"));
    let b = peer.qp("rc", 1 << 20, false);
    let c = Conn::default();
    a.connect_with(&mut peer, ip_b, &b, &c);
    a.mr.write(0, &common::pattern_bytes(3, 65536)).unwrap();
    for i in 0..4 {
        let op = SendOp::Read { remote_addr: b.addr, rkey: RKey(b.rkey) };
        let w = SendWr { sgl: vec![a.mr.sge(65536, 8192).unwrap()].into(), ..SendWr::new(i, op) };
        a.qp.post_send(w).unwrap();
        let op = SendOp::Write { remote_addr: b.addr, rkey: RKey(b.rkey) };
        let w = SendWr { sgl: vec![a.mr.sge(0, 65536).unwrap()].into(), ..SendWr::new(i, op) };
        a.qp.post_send(w).unwrap();
    }
    for _ in 0..8 {
        assert_eq!(a.next_wc(Duration::from_secs(5)).unwrap().status, WcStatus::Success);
    }
    let got = peer.cmd("digest 0 65536");
    assert_eq!(got[0], crc32fast::hash(&common::pattern_bytes(3, 65536)).to_string());
    let ca = a.ctx.counters();
    assert!(ca.rcvd_pkts > 0);
    assert_eq!(ca.icrc_unverified, ca.rcvd_pkts, "every packet is counted: {ca:?}");
    assert_eq!(ca.icrc_errors, 0);
    let (rcvd, unverified) = (peer.counter("rcvd_pkts"), peer.counter("icrc_unverified"));
    assert!(rcvd >= 256, "64 KiB WRITEs are 64 packets each");
    assert_eq!(unverified, rcvd);
}
