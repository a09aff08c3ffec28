//! One test per error and edge case of the transport: NAK codes and what they complete with,
//! retry and RNR exhaustion, PSN wrap-around, duplicate READ and atomic replay, NAK-once,
//! the Q_Key check, CNP rate limiting, and illegal posts and transitions.

mod sim;

use std::time::Duration;

use sim::{BUF_ADDR, Faults, Net, Params, Side, connect, ip, side, ud_ready};
use transport::{
    Access, Error, Event, Instant, Memory, ModifyQp, Mtu, QKey, QpCaps, QpState, QpType, RKey,
    RecvWr, SendOp, SendWr, UdDest, WcOpcode, WcStatus, WorkCompletion,
};

const BUF: usize = 1 << 20;

fn rc_pair(p: Params) -> (Net, Side, Side) {
    let mut net = Net::new(2, 7, Faults { delay: Duration::from_micros(5), ..Faults::default() });
    let a = side(&mut net, 0, QpType::Rc, BUF);
    let b = side(&mut net, 1, QpType::Rc, BUF);
    connect(&mut net, &a, &b, p);
    (net, a, b)
}

/// Runs until `cq` of `node` yields a completion (or `limit` passes).
fn next_wc(net: &mut Net, node: usize, s: &Side, limit: Duration) -> Option<WorkCompletion> {
    let mut got = None;
    net.run_until(limit, |net| {
        got = net.nodes[node].poll_completion(s.cq);
        got.is_some()
    });
    got
}

fn write(i: u64, b: &Side, addr: u64, len: u32, a: &Side) -> SendWr {
    SendWr::new(i, SendOp::Write { remote_addr: addr, rkey: RKey(b.mr.rkey) })
        .sge(BUF_ADDR, len, a.mr.lkey)
}

fn state(net: &Net, s: &Side) -> QpState {
    net.nodes[s.node].query_qp(s.qpn).unwrap().0
}

#[test]
fn a_vanished_peer_ends_in_retry_exc_err_within_the_bound() {
    let p = Params { timeout: 10, retry_cnt: 3, ..Params::default() };
    let (mut net, a, b) = rc_pair(p);
    net.faults.partition = true;
    for i in 0..3 {
        net.nodes[0].post_send(a.qpn, write(i, &b, BUF_ADDR, 100, &a)).unwrap();
    }
    let t0 = net.now;
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).expect("a completion");
    let elapsed = net.now.saturating_since(t0);
    let bound = Duration::from_nanos(2 * (3 + 1) * 4096 * (1 << 10));
    assert_eq!((wc.wr_id, wc.status), (0, WcStatus::RetryExcErr));
    assert!(elapsed <= bound, "RETRY_EXC_ERR after {elapsed:?}, bound {bound:?}");
    assert!(elapsed >= Duration::from_nanos(4 * 4096 * (1 << 10)), "gave up early: {elapsed:?}");
    for i in 1..3 {
        let wc = next_wc(&mut net, 0, &a, Duration::from_millis(1)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::WrFlushErr));
    }
    assert_eq!(state(&net, &a), QpState::Err);
    let c = net.nodes[0].counters();
    assert_eq!((c.retry_exceeded_err, c.local_ack_timeout_err), (1, 4), "{c:?}");
    assert_eq!(net.nodes[0].poll_event(), Some(Event::QpFatal(a.qpn)));
    assert_eq!(net.nodes[0].poll_event(), None, "one event per failure");
}

#[test]
fn an_srq_feeds_several_qps_and_raises_its_limit_event_once() {
    let mut net = Net::new(2, 7, Faults { delay: Duration::from_micros(5), ..Faults::default() });
    let senders = [side(&mut net, 0, QpType::Rc, BUF), side(&mut net, 0, QpType::Rc, BUF)];
    let n = &mut net.nodes[1];
    let pd = n.alloc_pd().unwrap();
    let cq = n.create_cq();
    let id = n.memory_mut().add(BUF);
    let mr = n.register_mr(pd, id, BUF_ADDR, BUF as u64, Access::LOCAL_WRITE).unwrap();
    let srq = n.create_srq(pd, 8).unwrap();
    let mut receivers = Vec::new();
    for _ in 0..2 {
        let qpn =
            n.create_qp_with_srq(pd, QpType::Rc, cq, cq, QpCaps::default(), Some(srq)).unwrap();
        let init = ModifyQp { state: Some(QpState::Init), ..Default::default() };
        n.modify_qp(qpn, &init).unwrap();
        receivers.push(sim::Side { node: 1, qpn, cq, pd, mr });
    }
    let err = n.post_recv(receivers[0].qpn, RecvWr::new(0)).unwrap_err();
    assert!(matches!(err, Error::InvalidWr(_)), "{err:?}");
    for i in 0..4 {
        let wr = RecvWr::new(100 + i).sge(BUF_ADDR + i * 64, 64, mr.lkey);
        n.post_srq_recv(srq, wr).unwrap();
    }
    n.arm_srq_limit(srq, 2).unwrap();
    for (a, b) in senders.iter().zip(&receivers) {
        connect(&mut net, a, b, Params::default());
    }
    for (k, a) in senders.iter().enumerate() {
        for i in 0..2 {
            let wr = SendWr::new(i, SendOp::Send).sge(BUF_ADDR, 16 + k as u32, a.mr.lkey);
            net.nodes[0].post_send(a.qpn, wr).unwrap();
        }
    }
    let mut got = Vec::new();
    for _ in 0..4 {
        let wc = next_wc(&mut net, 1, &receivers[0], Duration::from_secs(1)).expect("a receive");
        assert_eq!(wc.status, WcStatus::Success);
        got.push((wc.qp_num, wc.byte_len, wc.wr_id));
    }
    for (k, b) in receivers.iter().enumerate() {
        let on_qp = got.iter().filter(|g| g.0 == b.qpn && g.1 == 16 + k as u32).count();
        assert_eq!(on_qp, 2, "two receives completed on QP {}: {got:?}", b.qpn);
    }
    let mut ids: Vec<u64> = got.iter().map(|g| g.2).collect();
    ids.sort();
    assert_eq!(ids, [100, 101, 102, 103], "each SRQ receive used once");
    assert_eq!(net.nodes[1].srq_len(srq), Some(0));
    assert_eq!(net.nodes[1].poll_event(), Some(Event::SrqLimitReached(srq)));
    assert_eq!(net.nodes[1].poll_event(), None);
    for a in &senders {
        for i in 0..2 {
            let wc = next_wc(&mut net, 0, a, Duration::from_millis(1)).unwrap();
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        }
    }
    // An empty SRQ means RNR for every QP on it; one receive lets the next message in.
    let a = &senders[0];
    let wr = SendWr::new(9, SendOp::Send).sge(BUF_ADDR, 8, a.mr.lkey);
    net.nodes[0].post_send(a.qpn, wr).unwrap();
    assert!(next_wc(&mut net, 0, a, Duration::from_micros(200)).is_none());
    assert!(net.nodes[1].counters().send_rnr_err >= 1);
    net.nodes[1].post_srq_recv(srq, RecvWr::new(7).sge(BUF_ADDR, 64, mr.lkey)).unwrap();
    let wc = next_wc(&mut net, 0, a, Duration::from_secs(1)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success));
    assert!(net.nodes[1].destroy_srq(srq).is_err(), "an SRQ in use cannot be destroyed");
}

#[test]
fn retry_cnt_7_means_7_retries_not_forever() {
    let p = Params { timeout: 1, retry_cnt: 7, ..Params::default() };
    let (mut net, a, b) = rc_pair(p);
    net.faults.partition = true;
    net.nodes[0].post_send(a.qpn, write(0, &b, BUF_ADDR, 8, &a)).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1))
        .expect("RETRY_EXC_ERR, not an endless retry");
    assert_eq!(wc.status, WcStatus::RetryExcErr);
    assert_eq!(net.nodes[0].counters().local_ack_timeout_err, 8);
}

/// Posts `wr` on A, expects its completion with `status`, and that B's memory did not change.
fn expect_nak(net: &mut Net, a: &Side, b: &Side, wr: SendWr, status: WcStatus) {
    net.nodes[1].memory_mut().bytes_mut(b.mr.id)[..4096].fill(0xee);
    net.nodes[0].memory_mut().bytes_mut(a.mr.id)[..4096].fill(0x11);
    net.nodes[0].post_send(a.qpn, wr).unwrap();
    let wc = next_wc(net, 0, a, Duration::from_secs(1)).expect("a completion");
    assert_eq!(wc.status, status, "{wc:?}");
    assert!(
        net.nodes[1].memory().bytes(b.mr.id)[..4096].iter().all(|&x| x == 0xee),
        "responder memory touched"
    );
    assert_eq!(state(net, a), QpState::Err);
    assert_eq!(state(net, b), QpState::Err);
    assert_eq!(net.nodes[1].counters().sent_nak_err, 1);
}

#[test]
fn a_bad_rkey_is_a_remote_access_error() {
    let (mut net, a, b) = rc_pair(Params::default());
    let wr = SendWr::new(1, SendOp::Write { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey ^ 1) })
        .sge(BUF_ADDR, 64, a.mr.lkey);
    expect_nak(&mut net, &a, &b, wr, WcStatus::RemAccessErr);
}

#[test]
fn an_out_of_bounds_write_is_a_remote_access_error() {
    let (mut net, a, b) = rc_pair(Params::default());
    let wr = write(1, &b, BUF_ADDR + BUF as u64 - 10, 64, &a);
    expect_nak(&mut net, &a, &b, wr, WcStatus::RemAccessErr);
}

#[test]
fn a_missing_access_right_is_a_remote_access_error() {
    // The region lacks REMOTE_WRITE.
    let (mut net, a, b) = rc_pair(Params::default());
    let mr = net.nodes[1]
        .register_mr(b.pd, b.mr.id, BUF_ADDR, 4096, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let wr = SendWr::new(1, SendOp::Write { remote_addr: BUF_ADDR, rkey: RKey(mr.rkey) })
        .sge(BUF_ADDR, 64, a.mr.lkey);
    expect_nak(&mut net, &a, &b, wr, WcStatus::RemAccessErr);
    // The QP does not grant REMOTE_READ.
    let (mut net, a, b) = rc_pair(Params::default());
    let m = ModifyQp { access: Some(Access::REMOTE_WRITE), ..ModifyQp::default() };
    net.nodes[1].modify_qp(b.qpn, &m).unwrap();
    let wr = SendWr::new(1, SendOp::Read { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey) })
        .sge(BUF_ADDR, 64, a.mr.lkey);
    expect_nak(&mut net, &a, &b, wr, WcStatus::RemAccessErr);
    assert!(
        net.nodes[0].memory().bytes(a.mr.id)[..64].iter().all(|&x| x == 0x11),
        "READ wrote the requester's buffer"
    );
}

#[test]
fn a_region_of_another_pd_is_a_remote_access_error() {
    let (mut net, a, b) = rc_pair(Params::default());
    let other = net.nodes[1].alloc_pd().unwrap();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = net.nodes[1].register_mr(other, b.mr.id, BUF_ADDR, 4096, all).unwrap();
    let wr = SendWr::new(1, SendOp::Write { remote_addr: BUF_ADDR, rkey: RKey(mr.rkey) })
        .sge(BUF_ADDR, 64, a.mr.lkey);
    expect_nak(&mut net, &a, &b, wr, WcStatus::RemAccessErr);
}

#[test]
fn a_misaligned_atomic_is_an_invalid_request() {
    let (mut net, a, b) = rc_pair(Params::default());
    let wr = SendWr::new(
        1,
        SendOp::FetchAdd { remote_addr: BUF_ADDR + 4, rkey: RKey(b.mr.rkey), add: 1 },
    )
    .sge(BUF_ADDR, 8, a.mr.lkey);
    expect_nak(&mut net, &a, &b, wr, WcStatus::RemInvReqErr);
}

#[test]
fn a_send_longer_than_the_receive_is_an_invalid_request() {
    let (mut net, a, b) = rc_pair(Params::default());
    net.nodes[1].post_recv(b.qpn, RecvWr::new(9).sge(BUF_ADDR, 100, b.mr.lkey)).unwrap();
    net.nodes[0]
        .post_send(a.qpn, SendWr::new(1, SendOp::Send).sge(BUF_ADDR, 200, a.mr.lkey))
        .unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::RemInvReqErr);
    let r = next_wc(&mut net, 1, &b, Duration::from_millis(1)).unwrap();
    assert_eq!((r.wr_id, r.status), (9, WcStatus::LocLenErr));
}

#[test]
fn a_failing_memory_access_is_a_remote_operational_error() {
    // A region registered longer than the provider's buffer: the provider refuses the write.
    let (mut net, a, b) = rc_pair(Params::default());
    let id = net.nodes[1].memory_mut().add(64);
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let mr = net.nodes[1].register_mr(b.pd, id, 0x1000, 4096, all).unwrap();
    net.nodes[0]
        .post_send(
            a.qpn,
            SendWr::new(1, SendOp::Write { remote_addr: 0x1000, rkey: RKey(mr.rkey) })
                .sge(BUF_ADDR, 128, a.mr.lkey),
        )
        .unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::RemOpErr);
}

#[test]
fn psns_wrap_around_24_bits() {
    let p = Params { mtu: Mtu::Mtu256, psn_a: 0xff_ff80, psn_b: 0xff_fffe, ..Params::default() };
    let (mut net, a, b) = rc_pair(p);
    net.keep_log = true;
    for i in 0..64u64 {
        let off = i * 1024;
        net.nodes[0].memory_mut().bytes_mut(a.mr.id)[off as usize..off as usize + 1000]
            .fill(i as u8 + 1);
        let wr =
            SendWr::new(i, SendOp::Write { remote_addr: BUF_ADDR + off, rkey: RKey(b.mr.rkey) })
                .sge(BUF_ADDR + off, 1000, a.mr.lkey);
        net.nodes[0].post_send(a.qpn, wr).unwrap();
    }
    for i in 0..64 {
        let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    for i in 0..64usize {
        assert!(
            net.nodes[1].memory().bytes(b.mr.id)[i * 1024..i * 1024 + 1000]
                .iter()
                .all(|&x| x == i as u8 + 1)
        );
    }
    let psns: Vec<u32> =
        net.log.iter().filter(|(from, _, _)| *from == 0).map(|(_, _, p)| psn_of(p)).collect();
    assert!(
        psns.contains(&0xff_ffff) && psns.contains(&0) && psns.contains(&1),
        "no wrap in {psns:x?}"
    );
}

#[test]
fn rnr_naks_retry_until_a_receive_is_posted() {
    let p = Params { min_rnr_timer: 1, rnr_retry: 7, ..Params::default() };
    let (mut net, a, b) = rc_pair(p);
    net.nodes[0].memory_mut().bytes_mut(a.mr.id)[..32].fill(0x5a);
    net.nodes[0]
        .post_send(a.qpn, SendWr::new(1, SendOp::Send).sge(BUF_ADDR, 32, a.mr.lkey))
        .unwrap();
    assert!(
        next_wc(&mut net, 0, &a, Duration::from_micros(300)).is_none(),
        "completed with no receive posted"
    );
    assert!(net.nodes[0].counters().rcvd_rnr_err >= 3);
    assert!(net.nodes[1].counters().send_rnr_err >= 3);
    net.nodes[1].post_recv(b.qpn, RecvWr::new(7).sge(BUF_ADDR, 64, b.mr.lkey)).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
    let r = next_wc(&mut net, 1, &b, Duration::from_millis(1)).unwrap();
    assert_eq!((r.wr_id, r.byte_len, r.status), (7, 32, WcStatus::Success));
    assert!(net.nodes[1].memory().bytes(b.mr.id)[..32].iter().all(|&x| x == 0x5a));
}

#[test]
fn rnr_retries_run_out() {
    let p = Params { min_rnr_timer: 1, rnr_retry: 2, ..Params::default() };
    let (mut net, a, _b) = rc_pair(p);
    net.nodes[0]
        .post_send(a.qpn, SendWr::new(1, SendOp::Send).sge(BUF_ADDR, 32, a.mr.lkey))
        .unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr);
    let c = net.nodes[0].counters();
    assert_eq!((c.rcvd_rnr_err, c.retry_rnr_exceeded_err), (3, 1), "{c:?}");
}

#[test]
fn a_duplicate_read_is_replayed() {
    let (mut net, a, b) = rc_pair(Params { timeout: 4, ..Params::default() });
    for (k, x) in net.nodes[1].memory_mut().bytes_mut(b.mr.id)[..10_000].iter_mut().enumerate() {
        *x = (k * 7) as u8;
    }
    // The responder's first response packet is lost: the READ is asked again and replayed.
    net.drop_next = Some((1, 0, 1));
    let wr = SendWr::new(1, SendOp::Read { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey) })
        .sge(BUF_ADDR, 10_000, a.mr.lkey);
    net.nodes[0].post_send(a.qpn, wr).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::Success, WcOpcode::RdmaRead, 10_000)
    );
    assert_eq!(
        net.nodes[0].memory().bytes(a.mr.id)[..10_000],
        net.nodes[1].memory().bytes(b.mr.id)[..10_000]
    );
    assert!(net.nodes[1].counters().duplicate_request >= 1);
}

/// Two QPs each READ 1 MiB at once from a device whose READ window is 64 KiB (what a small
/// receive buffer holds): every READ request asks for at most the window, the READs go out
/// as several requests each, and at no point have the two QPs together asked for more
/// responses than the window beyond what the responder has sent. Both READs land whole.
#[test]
fn reads_are_asked_for_within_the_device_read_window() {
    const WINDOW: u64 = 64 << 10;
    const LEN: u32 = 1 << 20;
    let faults = Faults { delay: Duration::from_micros(5), ..Faults::default() };
    let mut net = Net::with_config(2, 7, faults, |c| {
        c.read_window = WINDOW;
        c.read_window_qp = WINDOW;
    });
    net.keep_log = true;
    let pairs: Vec<(Side, Side)> = (0..2)
        .map(|_| {
            let a = side(&mut net, 0, QpType::Rc, BUF);
            let b = side(&mut net, 1, QpType::Rc, BUF);
            connect(&mut net, &a, &b, Params::default());
            (a, b)
        })
        .collect();
    for (k, (a, b)) in pairs.iter().enumerate() {
        for (i, x) in net.nodes[1].memory_mut().bytes_mut(b.mr.id).iter_mut().enumerate() {
            *x = (i * 7 + k) as u8;
        }
        let wr =
            SendWr::new(k as u64, SendOp::Read { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey) })
                .sge(BUF_ADDR, LEN, a.mr.lkey);
        net.nodes[0].post_send(a.qpn, wr).unwrap();
    }
    for (a, b) in &pairs {
        let wc = next_wc(&mut net, 0, a, Duration::from_secs(1)).expect("the READ completes");
        assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, LEN), "{wc:?}");
        let (got, want) =
            (net.nodes[0].memory().bytes(a.mr.id), net.nodes[1].memory().bytes(b.mr.id));
        assert!(got[..LEN as usize] == want[..LEN as usize], "the READ landed wrong");
    }
    let mtu = u64::from(Params::default().mtu.bytes());
    let (mut asked, mut sent, mut requests, mut most) = (0u64, 0u64, 0u32, 0u64);
    for (from, _, p) in &net.log {
        match (from, p[0]) {
            // RDMA READ request: its RETH's DMA length, after the 12-byte BTH.
            (0, 0x0c) => {
                let len = u64::from(u32::from_be_bytes(p[24..28].try_into().unwrap()));
                assert!(len <= WINDOW, "a READ request asks for {len} bytes");
                asked += len.div_ceil(mtu);
                requests += 1;
            }
            // RDMA READ response first, middle, last, only.
            (1, 0x0d..=0x10) => sent += 1,
            _ => {}
        }
        most = most.max(asked.saturating_sub(sent));
    }
    assert!(requests >= 2 * (LEN as u64 / WINDOW) as u32, "{requests} requests");
    assert!(most <= WINDOW / mtu, "{most} response packets asked for and not yet sent");
}

/// An RC sender keeps at most its send window of packets unacknowledged: a 256-packet WRITE
/// through a 16-packet window never has more than 16 packets past the last PSN the responder
/// acknowledged, asks for ACKs often enough not to wait for a timer, and lands whole.
#[test]
fn a_sender_keeps_within_its_send_window() {
    let faults = Faults { delay: Duration::from_micros(5), ..Faults::default() };
    let mut net = Net::with_config(2, 7, faults, |c| c.send_window = 16);
    net.keep_log = true;
    let a = side(&mut net, 0, QpType::Rc, BUF);
    let b = side(&mut net, 1, QpType::Rc, BUF);
    connect(&mut net, &a, &b, Params { mtu: Mtu::Mtu256, ..Params::default() });
    for (i, x) in net.nodes[0].memory_mut().bytes_mut(a.mr.id)[..256 * 256].iter_mut().enumerate() {
        *x = (i * 13) as u8;
    }
    net.nodes[0].post_send(a.qpn, write(1, &b, BUF_ADDR, 256 * 256, &a)).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).expect("the WRITE completes");
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(net.nodes[0].counters().local_ack_timeout_err, 0, "it waited for a timer");
    assert!(
        net.nodes[0].memory().bytes(a.mr.id)[..256 * 256]
            == net.nodes[1].memory().bytes(b.mr.id)[..256 * 256]
    );
    // Nothing is acknowledged before the first PSN.
    let first = i64::from(Params::default().psn_a);
    let (mut sent, mut acked, mut most) = (None::<u32>, first - 1, 0i64);
    for (from, _, p) in &net.log {
        match (from, p[0]) {
            (0, 0x06..=0x0b) => sent = Some(psn_of(p)),
            (1, 0x11) => acked = i64::from(psn_of(p)),
            _ => continue,
        }
        if let Some(s) = sent {
            // PSNs do not wrap in 256 packets from Params::default's first.
            let out = i64::from(s) - acked;
            most = most.max(out);
        }
    }
    assert!(most <= 16, "{most} packets past the last acknowledged");
}

#[test]
fn qps_keep_together_within_the_device_send_window() {
    // Four QPs, each free to have 1024 packets in flight, into one peer; the device lets
    // them have 16 MTUs in flight together (plus one packet each for a QP with none).
    let faults = Faults { delay: Duration::from_micros(5), ..Faults::default() };
    let mut net = Net::with_config(2, 7, faults, |c| c.send_window_device = 16 * 256);
    net.keep_log = true;
    let pairs: Vec<(Side, Side)> = (0..4)
        .map(|_| {
            let a = side(&mut net, 0, QpType::Rc, BUF);
            let b = side(&mut net, 1, QpType::Rc, BUF);
            connect(&mut net, &a, &b, Params { mtu: Mtu::Mtu256, ..Params::default() });
            (a, b)
        })
        .collect();
    for (k, (a, b)) in pairs.iter().enumerate() {
        for (i, x) in
            net.nodes[0].memory_mut().bytes_mut(a.mr.id)[..64 * 256].iter_mut().enumerate()
        {
            *x = (i * 13 + k) as u8;
        }
        net.nodes[0].post_send(a.qpn, write(1, b, BUF_ADDR, 64 * 256, a)).unwrap();
    }
    for (a, b) in &pairs {
        let wc = next_wc(&mut net, 0, a, Duration::from_secs(1)).expect("the WRITE completes");
        assert_eq!(wc.status, WcStatus::Success);
        assert!(
            net.nodes[0].memory().bytes(a.mr.id)[..64 * 256]
                == net.nodes[1].memory().bytes(b.mr.id)[..64 * 256]
        );
    }
    assert_eq!(net.nodes[0].counters().local_ack_timeout_err, 0, "a QP waited for a timer");
    // Packets past the last acknowledged, per QP (by the responder's QPN on data, the
    // requester's on ACKs), summed over the QPs after every packet.
    let first = i64::from(Params::default().psn_a);
    let mut out: Vec<(Option<i64>, i64)> = vec![(None, first - 1); pairs.len()];
    let mut most = 0i64;
    for (from, _, p) in &net.log {
        let qpn = wire::bth::Packet::new_checked(&p[..]).unwrap().dest_qp();
        let k = match (from, p[0]) {
            (0, 0x06..=0x0b) => pairs.iter().position(|(_, b)| b.qpn == qpn),
            (1, 0x11) => pairs.iter().position(|(a, _)| a.qpn == qpn),
            _ => None,
        };
        let Some(k) = k else { continue };
        let psn = i64::from(psn_of(p));
        if *from == 0 {
            out[k].0 = Some(out[k].0.map_or(psn, |s| s.max(psn)));
        } else {
            out[k].1 = out[k].1.max(psn);
        }
        let total: i64 = out.iter().map(|(s, a)| s.map_or(0, |s| (s - a).max(0))).sum();
        most = most.max(total);
    }
    assert!(most <= 16 + 4, "{most} packets in flight on the device");
    assert!(
        most >= 8,
        "the QPs never had much in flight together ({most}): the test tests nothing"
    );
}

#[test]
fn each_connection_sends_from_its_own_udp_source_port() {
    // Two connections as Linux gives them ports (from both QPNs), one with a port chosen
    // through its flow label, as a probe walking ECMP paths would.
    let mut net = Net::new(2, 7, Faults { delay: Duration::from_micros(5), ..Faults::default() });
    net.keep_log = true;
    let chosen = wire::flow_label_for_udp_source_port(0xd00d).unwrap();
    let pairs: Vec<(Side, Side, u32)> = [0, 0, chosen]
        .into_iter()
        .map(|fl| {
            let a = side(&mut net, 0, QpType::Rc, BUF);
            let b = side(&mut net, 1, QpType::Rc, BUF);
            connect(&mut net, &a, &b, Params { flow_label: fl, ..Params::default() });
            (a, b, fl)
        })
        .collect();
    for (a, b, _) in &pairs {
        net.nodes[0].post_send(a.qpn, write(1, b, BUF_ADDR, 3 * 4096, a)).unwrap();
        assert_eq!(
            next_wc(&mut net, 0, a, Duration::from_secs(1)).unwrap().status,
            WcStatus::Success
        );
    }
    let mut ports = Vec::new();
    for (a, b, fl) in &pairs {
        let want = wire::udp_source_port(*fl, a.qpn, b.qpn);
        // Both directions (the WRITE's packets to b, the ACKs to a) leave from it.
        let seen: std::collections::BTreeSet<u16> = net
            .log
            .iter()
            .zip(&net.log_ports)
            .filter(|((_, _, p), _)| {
                let q = wire::bth::Packet::new_checked(&p[..]).unwrap().dest_qp();
                q == a.qpn || q == b.qpn
            })
            .map(|(_, port)| *port)
            .collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), [want], "QPs {:?}/{:?}", a.qpn, b.qpn);
        ports.push(want);
    }
    assert_eq!(ports[2], 0xd00d);
    assert!(ports[0] != ports[1] && ports.iter().all(|p| *p >= 0xc000), "{ports:x?}");
}

#[test]
fn a_duplicate_atomic_returns_the_saved_result_and_runs_once() {
    let (mut net, a, b) = rc_pair(Params { timeout: 4, ..Params::default() });
    net.nodes[1].memory_mut().bytes_mut(b.mr.id)[..8].copy_from_slice(&41u64.to_ne_bytes());
    net.drop_next = Some((1, 0, 1)); // the ATOMIC_ACKNOWLEDGE
    let wr =
        SendWr::new(1, SendOp::FetchAdd { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey), add: 1 })
            .sge(BUF_ADDR, 8, a.mr.lkey);
    net.nodes[0].post_send(a.qpn, wr).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::FetchAdd));
    let orig = u64::from_ne_bytes(net.nodes[0].memory().bytes(a.mr.id)[..8].try_into().unwrap());
    let now = u64::from_ne_bytes(net.nodes[1].memory().bytes(b.mr.id)[..8].try_into().unwrap());
    assert_eq!((orig, now), (41, 42), "the atomic ran twice or returned a fresh value");
    assert_eq!(net.nodes[1].counters().duplicate_request, 1);
}

#[test]
fn a_gap_is_naked_once() {
    let (mut net, a, b) = rc_pair(Params { mtu: Mtu::Mtu256, ..Params::default() });
    // A 16-packet WRITE whose second packet is lost: packets 3..16 arrive out of sequence,
    // one NAK is sent, the requester goes back to packet 2.
    net.drop_next = Some((0, 1, 1));
    net.nodes[0].post_send(a.qpn, write(1, &b, BUF_ADDR, 16 * 256, &a)).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
    let cb = net.nodes[1].counters();
    assert_eq!((cb.sent_seq_err, cb.out_of_seq_request), (1, 14), "{cb:?}");
    assert_eq!(net.nodes[0].counters().rcvd_seq_err, 1);
}

/// The PSN of a packet on the wire (BTH … ICRC).
fn psn_of(p: &[u8]) -> u32 {
    wire::bth::Packet::new_checked(p).unwrap().psn().get()
}

/// The PSNs of the ACKs (opcode 0x11) node `from` put on the wire, in order.
fn acks_from(net: &Net, from: usize) -> Vec<u32> {
    net.log
        .iter()
        .filter(|(f, _, p)| *f == from && p[0] == 0x11)
        .map(|(_, _, p)| psn_of(p))
        .collect()
}

/// An RC pair (256-byte MTU) that carried one 16-packet WRITE, logging what it sent; and the
/// WRITE's request packets, to be handed to the responder again.
fn one_write_of_16_packets() -> (Net, Side, Side, Vec<Vec<u8>>) {
    let (mut net, a, b) = rc_pair(Params { mtu: Mtu::Mtu256, ..Params::default() });
    net.keep_log = true;
    net.nodes[0].post_send(a.qpn, write(1, &b, BUF_ADDR, 16 * 256, &a)).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
    let requests: Vec<Vec<u8>> =
        net.log.iter().filter(|(f, _, _)| *f == 0).map(|(_, _, p)| p.clone()).collect();
    (net, a, b, requests)
}

#[test]
fn a_duplicate_is_acked_at_its_own_psn() {
    // A requester that went back to a message's start resends it packet by packet. A
    // duplicate is ACKed at its own PSN, never at the last PSN received: Linux rxe's
    // completer (6.1) takes an ACK of a message's last PSN that comes while it is still
    // resending the message as progress only, and if the ACK it then waits for is lost it
    // has nothing left to retry and never re-arms its timer — the QP stalls.
    let (mut net, _, _, requests) = one_write_of_16_packets();
    assert_eq!(requests.len(), 16);
    let last = psn_of(&requests[15]);
    assert_eq!(acks_from(&net, 1), [last], "one ACK, for the message's last packet");
    // Packet 5 again, asking for an ACK (a resent packet does).
    let again = |k: usize| {
        let mut p = requests[k].clone();
        p[8] |= 0x80;
        p
    };
    net.inject(0, 1, again(4));
    assert_eq!(acks_from(&net, 1), [last, psn_of(&requests[4])]);
    // Two duplicates answered by one ACK: it covers the later PSN of the two, in whichever
    // order they came.
    for (x, y) in [(9, 6), (7, 11)] {
        let n = acks_from(&net, 1).len();
        let (px, py) = (again(x), again(y));
        net.inject_quietly(0, 1, px);
        net.inject(0, 1, py);
        let acks = acks_from(&net, 1);
        assert_eq!(acks[n..], [psn_of(&requests[x.max(y)])], "{acks:?}");
    }
    // The message's last packet again: its ACK goes twice (the one ACK an rxe requester
    // that resent the whole message still waits for).
    let n = acks_from(&net, 1).len();
    net.inject(0, 1, again(15));
    assert_eq!(acks_from(&net, 1)[n..], [last, last]);
    assert_eq!(net.nodes[1].counters().duplicate_request, 6);
}

#[test]
fn a_requester_that_resent_and_fell_quiet_is_acked_again_unasked() {
    // A Linux rxe requester (6.1) that took an ACK of a message's last PSN as progress while
    // it was resending the message waits, without a timer, for one more ACK at or past that
    // PSN (docs/rxe-reference.md). If the ACKs of its resent last packet are lost, or that
    // packet itself, only an ACK the responder sends unasked frees it.
    let (mut net, a, b, requests) = one_write_of_16_packets();
    let last = psn_of(&requests[15]);
    // A clean exchange: no ACK beyond the one asked for, however long the requester is quiet.
    net.advance(Duration::from_secs(2));
    assert_eq!(acks_from(&net, 1), [last]);
    // Two packets of the message again, without AckReq, 40 ms apart: nothing at once, and
    // the requester counts as quiet only from the second.
    let ms = Duration::from_millis;
    net.inject(0, 1, requests[3].clone());
    net.advance(ms(40));
    net.inject(0, 1, requests[4].clone());
    net.advance(ms(40));
    assert_eq!(acks_from(&net, 1), [last]);
    // 50 ms after the second: the latest PSN, ACKed unasked; once more 400 ms later, should
    // that ACK be lost; then nothing.
    net.advance(ms(15));
    assert_eq!(acks_from(&net, 1), [last, last]);
    net.advance(ms(390));
    assert_eq!(acks_from(&net, 1), [last, last]);
    net.advance(ms(20));
    assert_eq!(acks_from(&net, 1), [last, last, last]);
    net.advance(Duration::from_secs(5));
    assert_eq!(acks_from(&net, 1), [last, last, last]);
    assert_eq!(net.nodes[1].counters().unasked_acks, 2);
    // Once a READ followed the WRITE, an ACK past the READ would complete it without its
    // data: a resent WRITE then gets only the ACK it asks for.
    let rd = SendWr::new(2, SendOp::Read { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey) })
        .sge(BUF_ADDR, 256, a.mr.lkey);
    net.nodes[0].post_send(a.qpn, rd).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
    let n = acks_from(&net, 1).len();
    net.inject(0, 1, requests[3].clone());
    net.advance(Duration::from_secs(2));
    assert_eq!(acks_from(&net, 1).len(), n);
    assert_eq!(net.nodes[1].counters().unasked_acks, 2);
}

#[test]
fn ud_drops_a_wrong_q_key_and_fills_the_grh_area() {
    let mut net = Net::new(2, 3, Faults::default());
    let a = side(&mut net, 0, QpType::Ud, BUF);
    let b = side(&mut net, 1, QpType::Ud, BUF);
    ud_ready(&mut net, &a);
    ud_ready(&mut net, &b);
    net.nodes[1].post_recv(b.qpn, RecvWr::new(5).sge(BUF_ADDR, 4096, b.mr.lkey)).unwrap();
    let send = |i, qkey| {
        let mut wr = SendWr::new(i, SendOp::SendWithImm(0xabcd)).sge(BUF_ADDR, 100, a.mr.lkey);
        wr.ud = Some(UdDest::new(ip(1), b.qpn, QKey(qkey)));
        wr
    };
    net.nodes[0].post_send(a.qpn, send(1, 0x2222_2222)).unwrap();
    assert!(next_wc(&mut net, 1, &b, Duration::from_millis(1)).is_none());
    assert_eq!(net.nodes[1].counters().qkey_violations, 1);
    net.nodes[0].post_send(a.qpn, send(2, 0x1111_1111)).unwrap();
    let r = next_wc(&mut net, 1, &b, Duration::from_millis(1)).unwrap();
    assert_eq!(
        (r.wr_id, r.byte_len, r.imm, r.src_qp, r.grh),
        (5, 140, Some(0xabcd), Some(a.qpn), true)
    );
    let g = &net.nodes[1].memory().bytes(b.mr.id)[..40];
    assert_eq!(&g[20..21], &[0x45]);
    assert_eq!(&g[32..36], &[10, 0, 0, 1], "source address in the IPv4 header");
}

#[test]
fn a_ud_datagram_leaves_from_the_source_port_its_address_handle_names() {
    let mut net = Net::new(2, 3, Faults::default());
    let a = side(&mut net, 0, QpType::Ud, BUF);
    let b = side(&mut net, 1, QpType::Ud, BUF);
    ud_ready(&mut net, &a);
    ud_ready(&mut net, &b);
    let send = |i, port: Option<u16>| {
        let mut wr = SendWr::new(i, SendOp::Send).sge(BUF_ADDR, 32, a.mr.lkey);
        let d = UdDest::new(ip(1), b.qpn, QKey(0x1111_1111));
        wr.ud = Some(port.map_or(d, |p| d.from_udp_source_port(p).unwrap()));
        wr
    };
    // Without a flow label: the QP's own port; with one, each datagram its own (a probe
    // walking ECMP paths), to 4791 always.
    let mut ports = Vec::new();
    for (i, p) in [None, Some(0xc123), Some(0xffff), Some(0xc000), None].into_iter().enumerate() {
        net.nodes[0].post_send(a.qpn, send(i as u64, p)).unwrap();
        let t = net.nodes[0].poll_transmit(Instant::ZERO).unwrap();
        assert_eq!(t.dst_port, 4791);
        ports.push(t.src_port);
    }
    let own = wire::udp_source_port(0, a.qpn, wire::Qpn::new(0));
    assert_eq!(ports, [own, 0xc123, 0xffff, 0xc000, own]);
    assert!(UdDest::new(ip(1), b.qpn, QKey(1)).from_udp_source_port(0xbfff).is_none());
}

#[test]
fn ce_marks_get_one_cnp_per_window() {
    let mut net =
        Net::new(2, 9, Faults { delay: Duration::from_micros(5), ce: 1.0, ..Faults::default() });
    let a = side(&mut net, 0, QpType::Rc, BUF);
    let b = side(&mut net, 1, QpType::Rc, BUF);
    connect(&mut net, &a, &b, Params::default());
    for i in 0..10 {
        net.nodes[0].post_send(a.qpn, write(i, &b, BUF_ADDR, 64, &a)).unwrap();
    }
    for _ in 0..10 {
        assert_eq!(
            next_wc(&mut net, 0, &a, Duration::from_millis(1)).unwrap().status,
            WcStatus::Success
        );
    }
    let cb = net.nodes[1].counters().clone();
    assert_eq!(cb.ecn_ce_rcvd, 10);
    assert_eq!((cb.cnp_sent, cb.cnp_rate_limited), (1, 9), "{cb:?}");
    // A window later, the next CE mark gets its own CNP.
    net.advance(Duration::from_micros(60));
    net.nodes[0].post_send(a.qpn, write(10, &b, BUF_ADDR, 64, &a)).unwrap();
    next_wc(&mut net, 0, &a, Duration::from_millis(1)).unwrap();
    assert_eq!(net.nodes[1].counters().cnp_sent, 2);
    assert!(net.nodes[0].counters().cnp_rcvd >= 2);
}

#[test]
fn packets_carry_the_traffic_class_ect0_by_default() {
    let (mut net, a, b) = rc_pair(Params::default());
    net.nodes[0].post_send(a.qpn, write(1, &b, BUF_ADDR, 8, &a)).unwrap();
    let t = net.nodes[0].poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(t.tos, 0x02);
    net.nodes[0]
        .modify_qp(a.qpn, &ModifyQp { traffic_class: Some(0x68 | 0x02), ..ModifyQp::default() })
        .unwrap();
    net.nodes[0].post_send(a.qpn, write(2, &b, BUF_ADDR, 8, &a)).unwrap();
    let t = net.nodes[0].poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(t.tos, 0x6a);
}

#[test]
fn illegal_posts_are_refused_with_a_clear_error() {
    let mut net = Net::new(2, 1, Faults::default());
    let uc = side(&mut net, 0, QpType::Uc, BUF);
    let ud = side(&mut net, 0, QpType::Ud, BUF);
    let read =
        SendWr::new(1, SendOp::Read { remote_addr: 0, rkey: RKey(1) }).sge(BUF_ADDR, 8, uc.mr.lkey);
    assert!(matches!(
        net.nodes[0].post_send(uc.qpn, read.clone()),
        Err(Error::OpNotSupported { op: "RDMA_READ", .. })
    ));
    let w = SendWr::new(1, SendOp::Write { remote_addr: 0, rkey: RKey(1) });
    assert!(matches!(net.nodes[0].post_send(ud.qpn, w), Err(Error::OpNotSupported { .. })));
    // INIT does not send.
    assert!(matches!(
        net.nodes[0].post_send(uc.qpn, SendWr::new(1, SendOp::Send)),
        Err(Error::BadState { .. })
    ));
    ud_ready(&mut net, &ud);
    let mut big = SendWr::new(1, SendOp::Send).sge(BUF_ADDR, 4097, ud.mr.lkey);
    big.ud = Some(UdDest::new(ip(1), ud.qpn, QKey(1)));
    assert!(matches!(net.nodes[0].post_send(ud.qpn, big), Err(Error::TooLong { .. })));
    let no_dest = SendWr::new(1, SendOp::Send);
    assert!(matches!(net.nodes[0].post_send(ud.qpn, no_dest), Err(Error::InvalidWr(_))));
    // Atomics need 8 bytes of local buffer.
    let (mut net, a, b) = rc_pair(Params::default());
    let short =
        SendWr::new(1, SendOp::FetchAdd { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey), add: 1 })
            .sge(BUF_ADDR, 4, a.mr.lkey);
    assert!(matches!(net.nodes[0].post_send(a.qpn, short), Err(Error::InvalidWr(_))));
    // A bad local key completes with LOC_PROT_ERR and takes the QP to ERR; later posts flush.
    net.nodes[0].post_send(a.qpn, SendWr::new(2, SendOp::Send).sge(BUF_ADDR, 8, 0xdead)).unwrap();
    assert_eq!(net.nodes[0].poll_completion(a.cq).unwrap().status, WcStatus::LocProtErr);
    net.nodes[0].post_send(a.qpn, SendWr::new(3, SendOp::Send)).unwrap();
    assert_eq!(net.nodes[0].poll_completion(a.cq).unwrap().status, WcStatus::WrFlushErr);
    // Illegal transitions.
    let to_rts = ModifyQp { state: Some(QpState::Rts), ..ModifyQp::default() };
    assert!(matches!(net.nodes[0].modify_qp(a.qpn, &to_rts), Err(Error::Transition(_))));
}

#[test]
fn the_queue_depth_is_enforced() {
    let mut net = Net::new(2, 1, Faults::default());
    let n = &mut net.nodes[0];
    let pd = n.alloc_pd().unwrap();
    let cq = n.create_cq();
    let qpn = n
        .create_qp(
            pd,
            QpType::Rc,
            cq,
            cq,
            QpCaps { max_send_wr: 2, max_recv_wr: 1, ..Default::default() },
        )
        .unwrap();
    n.modify_qp(qpn, &ModifyQp { state: Some(QpState::Init), ..ModifyQp::default() }).unwrap();
    n.post_recv(qpn, RecvWr::new(1)).unwrap();
    assert_eq!(n.post_recv(qpn, RecvWr::new(2)), Err(Error::QueueFull("receive")));
}

#[test]
fn scatter_gather_lists_on_both_sides() {
    let (mut net, a, b) = rc_pair(Params { mtu: Mtu::Mtu256, ..Params::default() });
    // 3 gather elements (100 + 300 + 50 bytes) into 2 scatter elements (200 + 1000).
    let src: Vec<u8> = (0..450u32).map(|i| (i * 13) as u8).collect();
    let mem = net.nodes[0].memory_mut().bytes_mut(a.mr.id);
    mem[0..100].copy_from_slice(&src[0..100]);
    mem[1000..1300].copy_from_slice(&src[100..400]);
    mem[5000..5050].copy_from_slice(&src[400..450]);
    let wr = SendWr::new(1, SendOp::Send)
        .sge(BUF_ADDR, 100, a.mr.lkey)
        .sge(BUF_ADDR + 1000, 300, a.mr.lkey)
        .sge(BUF_ADDR + 5000, 50, a.mr.lkey);
    net.nodes[1]
        .post_recv(
            b.qpn,
            RecvWr::new(2).sge(BUF_ADDR + 64, 200, b.mr.lkey).sge(BUF_ADDR + 8192, 1000, b.mr.lkey),
        )
        .unwrap();
    net.nodes[0].post_send(a.qpn, wr).unwrap();
    assert_eq!(
        next_wc(&mut net, 0, &a, Duration::from_millis(1)).unwrap().status,
        WcStatus::Success
    );
    let r = next_wc(&mut net, 1, &b, Duration::from_millis(1)).unwrap();
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 450));
    let got = net.nodes[1].memory().bytes(b.mr.id);
    assert_eq!(&got[64..264], &src[..200]);
    assert_eq!(&got[8192..8442], &src[200..]);
}

#[test]
fn unsignaled_work_completes_silently_and_in_order() {
    let (mut net, a, b) = rc_pair(Params::default());
    let mut wr = write(1, &b, BUF_ADDR, 64, &a);
    wr.signaled = false;
    net.nodes[0].post_send(a.qpn, wr).unwrap();
    net.nodes[0].post_send(a.qpn, write(2, &b, BUF_ADDR + 64, 64, &a)).unwrap();
    let wc = next_wc(&mut net, 0, &a, Duration::from_millis(1)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    assert!(next_wc(&mut net, 0, &a, Duration::from_millis(1)).is_none());
    assert_eq!(net.nodes[0].counters().rdma_sends, 2);
}

/// An inline WRITE takes its payload when it is posted (the buffer is the application's
/// again at once); a plain one reads the buffer when it transmits. Inline is for SEND and
/// WRITE, within the QP's `max_inline_data`, which the device bounds.
#[test]
fn an_inline_send_takes_its_payload_when_posted() {
    let (mut net, a, b) = rc_pair(Params::default());
    let fill = |net: &mut Net, v: u8| net.nodes[0].memory_mut().write(a.mr.id, 0, &[v; 200]);
    fill(&mut net, 1).unwrap();
    net.nodes[0].post_send(a.qpn, write(1, &b, BUF_ADDR + 4096, 200, &a).inlined()).unwrap();
    fill(&mut net, 2).unwrap();
    net.nodes[0].post_send(a.qpn, write(2, &b, BUF_ADDR + 8192, 200, &a)).unwrap();
    // Overwritten before either was transmitted.
    fill(&mut net, 3).unwrap();
    for id in [1, 2] {
        let wc = next_wc(&mut net, 0, &a, Duration::from_millis(50)).expect("a completion");
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
    let mut got = [0u8; 200];
    net.nodes[1].memory().read(b.mr.id, 4096, &mut got).unwrap();
    assert_eq!(got, [1; 200], "the inline WRITE carried what was there when it was posted");
    net.nodes[1].memory().read(b.mr.id, 8192, &mut got).unwrap();
    assert_eq!(got, [3; 200], "the plain WRITE carried what was there when it was sent");

    let too_long = write(3, &b, BUF_ADDR, 257, &a).inlined();
    assert!(matches!(
        net.nodes[0].post_send(a.qpn, too_long),
        Err(Error::TooLong { len: 257, max: 256 })
    ));
    let read = SendWr::new(4, SendOp::Read { remote_addr: BUF_ADDR, rkey: RKey(b.mr.rkey) })
        .sge(BUF_ADDR, 8, a.mr.lkey)
        .inlined();
    assert!(matches!(net.nodes[0].post_send(a.qpn, read), Err(Error::InvalidWr(_))));
    let n = &mut net.nodes[0];
    let caps = QpCaps { max_inline_data: 4096, ..QpCaps::default() };
    assert!(matches!(
        n.create_qp(a.pd, QpType::Rc, a.cq, a.cq, caps),
        Err(Error::CapTooLarge { what: "max_inline_data", asked: 4096, max: 1024 })
    ));
}

#[test]
fn a_protection_domain_is_freed_only_when_nothing_is_in_it() {
    use transport::{Endpoint, EndpointConfig, VecMemory};
    let mut ep = Endpoint::new(EndpointConfig::new(ip(0), 1), VecMemory::new());
    let (pd, other) = (ep.alloc_pd().unwrap(), ep.alloc_pd().unwrap());
    let cq = ep.create_cq();
    let id = ep.memory_mut().add(4096);
    let mr = ep.register_mr(pd, id, BUF_ADDR, 4096, Access::LOCAL_WRITE).unwrap();
    let qpn = ep.create_qp(pd, QpType::Rc, cq, cq, QpCaps::default()).unwrap();
    let srq = ep.create_srq(pd, 16).unwrap();
    assert_eq!(ep.pd_count(), 2);
    // Each object keeps it: ibv_dealloc_pd's EBUSY.
    assert_eq!(ep.dealloc_pd(pd), Err(Error::PdInUse(pd)));
    ep.destroy_srq(srq).unwrap();
    assert_eq!(ep.dealloc_pd(pd), Err(Error::PdInUse(pd)), "the QP is still in it");
    ep.destroy_qp(qpn).unwrap();
    assert_eq!(ep.dealloc_pd(pd), Err(Error::PdInUse(pd)), "the region is still in it");
    ep.deregister_mr(mr.lkey).unwrap();
    assert_eq!(ep.dealloc_pd(pd), Ok(()));
    assert_eq!(ep.pd_count(), 1);
    // Gone: nothing can be made in it, and it cannot be freed twice.
    assert_eq!(ep.dealloc_pd(pd), Err(Error::NoPd(pd)));
    let id = ep.memory_mut().add(64);
    assert_eq!(ep.register_mr(pd, id, 0, 64, Access::LOCAL_WRITE), Err(Error::NoPd(pd)));
    assert_eq!(ep.create_qp(pd, QpType::Ud, cq, cq, QpCaps::default()), Err(Error::NoPd(pd)));
    assert_eq!(ep.create_srq(pd, 1), Err(Error::NoPd(pd)));
    assert_eq!(ep.dealloc_pd(other), Ok(()));
    assert_eq!(ep.pd_count(), 0);
    // As many as the device allows, and more once one is freed.
    let mut cfg = EndpointConfig::new(ip(0), 1);
    cfg.max_pd = 3;
    let mut ep = Endpoint::new(cfg, VecMemory::new());
    let pds: Vec<_> = (0..3).map(|_| ep.alloc_pd().unwrap()).collect();
    assert_eq!(ep.alloc_pd(), Err(Error::Exhausted { what: "protection domains", max: 3 }));
    ep.dealloc_pd(pds[1]).unwrap();
    let again = ep.alloc_pd().unwrap();
    assert!(!pds.contains(&again), "a freed id is not given again at once");
}

#[test]
fn qpns_start_where_the_config_says_and_wrap_past_the_special_qps() {
    let mut cfg = transport::EndpointConfig::new(ip(0), 1);
    cfg.first_qpn = 0xff_fffe;
    let mut n = transport::Endpoint::new(cfg, transport::VecMemory::new());
    let pd = n.alloc_pd().unwrap();
    let cq = n.create_cq();
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_inline_data: 0 };
    let qpns: Vec<u32> =
        (0..3).map(|_| n.create_qp(pd, QpType::Rc, cq, cq, caps).unwrap().get()).collect();
    assert_eq!(qpns, [0xff_fffe, 0xff_ffff, 0x11]);
    // A random start lies in 0x11 ..= 0xFF_FFFF, and uses the whole range.
    let r = transport::EndpointConfig::random_qpn;
    assert_eq!((r(0), r(u64::from(0xff_ffffu32 - 0x11))), (0x11, 0xff_ffff));
    assert!((0..1000u64).map(|i| r(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))).all(|q| q >= 0x11));
}

#[test]
fn forged_packets_are_dropped_by_reason_before_their_icrc_is_computed() {
    // Node 2 is a third host on the network: it has no QP.
    let mut net = Net::new(3, 7, Faults { delay: Duration::from_micros(5), ..Faults::default() });
    let a = side(&mut net, 0, QpType::Rc, BUF);
    let b = side(&mut net, 1, QpType::Rc, BUF);
    connect(&mut net, &a, &b, Params::default());
    net.keep_log = true;
    net.nodes[0].post_send(a.qpn, write(1, &b, BUF_ADDR, 64, &a)).unwrap();
    assert_eq!(next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap().status, WcStatus::Success);
    let request = net.log.iter().find(|(f, _, _)| *f == 0).unwrap().2.clone();
    let ack = net.log.iter().find(|(f, _, p)| *f == 1 && p[0] == 0x11).unwrap().2.clone();
    // Without the IP header the ICRC cannot be checked and would count as unverified: a
    // packet dropped on its header alone never gets that far.
    let meta = |src: usize, to: usize| transport::RecvMeta {
        src: ip(src),
        dst: ip(to),
        src_port: 49152,
        dst_port: 4791,
        ecn: 0,
        ip_header: None,
    };
    let before = net.nodes[1].counters().clone();
    // b's QP, but from a third address.
    net.nodes[1].handle_datagram(net.now, &meta(2, 1), &request);
    // From a's address, to a QP b does not have.
    let mut stray = request.clone();
    stray[5..8].copy_from_slice(&(b.qpn.get() ^ 0x40_0000).to_be_bytes()[1..]);
    net.nodes[1].handle_datagram(net.now, &meta(0, 1), &stray);
    let c = net.nodes[1].counters();
    let d = |f: fn(&transport::Counters) -> u64| f(c) - f(&before);
    assert_eq!(d(|c| c.dropped_wrong_source), 1);
    assert_eq!(d(|c| c.dropped_unknown_qp), 1);
    assert_eq!(d(|c| c.dropped_pkts), 2);
    assert_eq!((d(|c| c.icrc_unverified), d(|c| c.rcvd_pkts), d(|c| c.icrc_errors)), (0, 0, 0));
    // From a's address to b's QP (a forger who knows the QPN), at PSNs no requester could
    // send now: far ahead of the expected PSN, far behind it. Dropped before the ICRC, and
    // unanswered: no NAK, no ACK that would send the real requester back.
    let with_psn = |p: &[u8], psn: u32| {
        let mut f = p.to_vec();
        f[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
        f
    };
    let expected = psn_of(&request) + 2; // the two WRITEs so far
    let before = net.nodes[1].counters().clone();
    for psn in [expected + (1 << 15), expected.wrapping_sub(1 << 17), expected + 0x7f_0000] {
        net.nodes[1].handle_datagram(net.now, &meta(0, 1), &with_psn(&request, psn & 0xff_ffff));
    }
    let c = net.nodes[1].counters();
    let d = |f: fn(&transport::Counters) -> u64| f(c) - f(&before);
    assert_eq!((d(|c| c.dropped_out_of_window), d(|c| c.icrc_unverified)), (3, 0));
    assert_eq!((d(|c| c.sent_seq_err), d(|c| c.duplicate_request)), (0, 0));
    assert!(net.nodes[1].poll_transmit(net.now).is_none(), "a forged request was answered");
    // Near the expected PSN it may be a real loss: that one gets as far as the ICRC (which
    // this test cannot check without the IP header) and is NAKed once.
    net.nodes[1].handle_datagram(net.now, &meta(0, 1), &with_psn(&request, expected + 5));
    let c = net.nodes[1].counters();
    assert_eq!(
        (c.icrc_unverified - before.icrc_unverified, c.sent_seq_err - before.sent_seq_err),
        (1, 1)
    );
    while net.nodes[1].poll_transmit(net.now).is_some() {}
    // A response for a PSN the requester never sent: dropped before its ICRC.
    let before = net.nodes[0].counters().clone();
    net.nodes[0].handle_datagram(net.now, &meta(1, 0), &with_psn(&ack, psn_of(&ack) + 1000));
    let c = net.nodes[0].counters();
    assert_eq!(c.dropped_out_of_window - before.dropped_out_of_window, 1);
    assert_eq!(c.icrc_unverified - before.icrc_unverified, 0);
    // A NAK "remote access error" from the real peer's address at a PSN the requester has
    // had acknowledged: ignored and counted; the connection carries on.
    let mut nak = ack.clone();
    nak[12] = 0x62;
    let before = net.nodes[0].counters().clone();
    net.inject(1, 0, nak);
    let c = net.nodes[0].counters();
    assert_eq!(c.dropped_out_of_window - before.dropped_out_of_window, 1);
    assert_eq!(state(&net, &a), QpState::Rts);
    net.nodes[0].post_send(a.qpn, write(2, &b, BUF_ADDR, 64, &a)).unwrap();
    assert_eq!(next_wc(&mut net, 0, &a, Duration::from_secs(1)).unwrap().status, WcStatus::Success);
}

/// A message asks for an ACK (AckReq) when its completion will be looked for — a signaled
/// WQE — and at least every 16th unsignaled one: a latency loop that signals one send in 16
/// costs its peer one ACK in 16. Every message is still acknowledged (ACKs are cumulative).
#[test]
fn unsignaled_messages_ask_for_an_ack_one_in_sixteen() {
    let (mut net, a, b) = rc_pair(Params::default());
    net.keep_log = true;
    for i in 0..40u64 {
        let mut wr = write(i, &b, BUF_ADDR + 64 * i, 64, &a);
        // One in 20 signaled: the 20th and the 40th.
        wr.signaled = i % 20 == 19;
        net.nodes[0].post_send(a.qpn, wr).unwrap();
        net.advance(Duration::from_micros(20));
    }
    let asked: Vec<u64> = net
        .log
        .iter()
        .filter(|(from, _, _)| *from == 0)
        .enumerate()
        .filter(|(_, (_, _, p))| p[8] & 0x80 != 0) // BTH byte 8: AckReq
        .map(|(i, _)| i as u64)
        .collect();
    // The 16th unsignaled (15), the signaled 20th (19), 16 later (35), the signaled 40th.
    assert_eq!(asked, [15, 19, 35, 39]);
    let acks = net.log.iter().filter(|(from, _, _)| *from == 1).count();
    assert_eq!(acks, 4, "one ACK per AckReq");
    for id in [19, 39] {
        let wc = next_wc(&mut net, 0, &a, Duration::from_millis(1)).expect("a completion");
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    }
    assert_eq!(net.nodes[0].counters().retransmitted_pkts, 0);
}

/// `query_qp` reports how far a connection got (as rxe and mlx5 do): the PSN the requester
/// sends next and the PSN the responder expects next, so that a UC initiator's peer can tell
/// whether the last packets landed. A lost last packet leaves the responder one behind.
#[test]
fn query_qp_reports_the_next_psns_of_both_directions() {
    let mut net = Net::new(2, 7, Faults { delay: Duration::from_micros(5), ..Faults::default() });
    let a = side(&mut net, 0, QpType::Uc, BUF);
    let b = side(&mut net, 1, QpType::Uc, BUF);
    let p = Params::default();
    connect(&mut net, &a, &b, p);
    let psns = |net: &Net, s: &Side| {
        let (_, attr) = net.nodes[s.node].query_qp(s.qpn).unwrap();
        (attr.sq_psn.get(), attr.rq_psn.get())
    };
    assert_eq!(psns(&net, &a), (p.psn_a, p.psn_b));
    assert_eq!(psns(&net, &b), (p.psn_b, p.psn_a));
    // Three 10,000-byte WRITEs at MTU 4096: three packets each.
    for i in 0..3 {
        net.nodes[0].post_send(a.qpn, write(i, &b, BUF_ADDR, 10_000, &a)).unwrap();
    }
    net.run_until(Duration::from_millis(10), |_| false);
    assert_eq!(psns(&net, &a), (p.psn_a + 9, p.psn_b));
    assert_eq!(psns(&net, &b), (p.psn_b, p.psn_a + 9));
    // The next WRITE's last packet is lost: the responder expects it still.
    net.drop_next = Some((0, 2, 1));
    net.nodes[0].post_send(a.qpn, write(3, &b, BUF_ADDR, 10_000, &a)).unwrap();
    net.run_until(Duration::from_millis(10), |_| false);
    assert_eq!(psns(&net, &a).0, p.psn_a + 12);
    assert_eq!(psns(&net, &b).1, p.psn_a + 11, "one behind the lost packet");
}
