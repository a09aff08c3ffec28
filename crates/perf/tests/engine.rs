//! The measurement loops over two soft devices in this process (127.0.0.1 and 127.0.0.2, in a
//! private network namespace): WRITE bandwidth moves the bytes it claims, SEND latency's
//! figures are ordered as they must be, and a failing work request stops the loop with it.

use perf::engine::{self, BwOp, BwPlan, LatPlan, Layout, Peer, RemoteBuffer, Side, Stop};
use providers::ContextOptions;
use verbs::{
    Access, CompletionQueue, Connect, Context, MemoryRegion, ModifyQp, Mtu, Path, ProtectionDomain,
    Psn, QpInit, QpState, QpType, QueuePair, RKey, WcStatus,
};

fn netns() {
    // SAFETY: unshare has no memory-safety preconditions; it affects only this thread.
    let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "unshare(CLONE_NEWNET): {} — needs root", std::io::Error::last_os_error());
    let up = std::process::Command::new("ip").args(["link", "set", "lo", "up"]).status();
    assert!(up.expect("ip (iproute2)").success());
}

struct End {
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qp: Vec<QueuePair>,
    layout: Layout,
}

impl End {
    fn side(&self) -> Side<'_> {
        Side {
            qps: &self.qp,
            cq: &self.cq,
            mr: &self.mr,
            channel: None,
            layout: self.layout,
            stall: engine::STALL,
            inline_size: 0,
        }
    }

    /// The peer's view of this end's remote area.
    fn peer(&self) -> Peer {
        let addr = self.mr.addr() + self.layout.remote(0, 0) as u64;
        Peer { buffer: RemoteBuffer { addr, rkey: self.mr.rkey() }, ud: None }
    }

    fn remote_bytes(&self, len: usize) -> Vec<u8> {
        self.mr.to_vec(self.layout.remote(0, 0), len).unwrap()
    }
}

fn plan(
    op: Option<BwOp>,
    sink: bool,
    size: usize,
    n: u64,
    depth: usize,
    peers: &[Peer],
) -> BwPlan<'_> {
    BwPlan {
        op,
        sink,
        size,
        tx_depth: depth,
        post_list: 1,
        cq_mod: 1,
        peers,
        stop: Stop::Iters(n),
        seeds: None,
        end_marker: false,
    }
}

fn pair(max_size: usize) -> (End, End) {
    let layout = Layout::new(max_size, false, false);
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let make = |ip: &str| {
        let ctx =
            providers::open_soft(ip.parse().unwrap(), 4791, &ContextOptions::default()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(1024, None).unwrap();
        let mr = pd.reg_mr(layout.region_len(1), all).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq)).unwrap();
        let init = ModifyQp { state: Some(QpState::Init), access: Some(all), ..Default::default() };
        qp.modify(&init).unwrap();
        End { ctx, _pd: pd, cq, mr, qp: vec![qp], layout }
    };
    let (a, b) = (make("127.0.0.1"), make("127.0.0.2"));
    for (x, y, sq, rq) in [(&a, &b, 1, 2), (&b, &a, 2, 1)] {
        let path = Path::new(y.ctx.ip(), y.qp[0].qpn());
        // A 0.5 s ACK timeout: a busy CI machine's stalls must not look like loss.
        let c = Connect {
            path_mtu: Mtu::Mtu4096,
            timeout: 17,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            ..Connect::new(path, Psn::new(sq), Psn::new(rq))
        };
        x.qp[0].connect(&c).unwrap();
    }
    (a, b)
}

#[test]
fn write_bw_moves_what_it_reports() {
    netns();
    let size = 65536;
    let (a, b) = pair(size);
    let pattern: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    a.mr.write(a.layout.local(0, 0), &pattern).unwrap();
    let peers = [b.peer()];
    let r = engine::bw(
        &a.side(),
        &plan(Some(BwOp::Write), false, size, 2000, 16, &peers),
        &mut |_, _| (),
    )
    .unwrap();
    let s = r.sent.unwrap();
    assert_eq!((s.size, s.iters, r.completed[0]), (65536, 2000, 2000));
    assert!(s.bw_avg > 1.0 && s.bw_peak >= s.bw_avg, "{s:?}");
    // Rate and bandwidth describe the same messages.
    let from_bw = s.bw_avg * perf::stats::PERFTEST_MB / size as f64;
    assert!((from_bw / (s.msg_rate * 1e6) - 1.0).abs() < 1e-9, "{s:?}");
    assert!(b.remote_bytes(size) == pattern, "the WRITEs landed");
    let c = a.ctx.counters();
    // 2,000 messages of 16 packets at MTU 4096, no retransmission on a clean loopback.
    assert_eq!(c.rdma_sends, 2000, "{c:?}");
    assert_eq!(c.sent_pkts, 2000 * 16, "{c:?}");
    eprintln!("write_bw 64 KiB: peak {:.1} avg {:.1} MB/s", s.bw_peak, s.bw_avg);
}

#[test]
fn cq_moderation_and_post_lists_account_for_every_message() {
    netns();
    let size = 4096;
    let (a, b) = pair(size);
    let peers = [b.peer()];
    // A completion every 100 messages, lists of 8 per post: every message is counted, once.
    let p = BwPlan {
        post_list: 8,
        cq_mod: 100,
        ..plan(Some(BwOp::Write), false, size, 2001, 128, &peers)
    };
    let r = engine::bw(&a.side(), &p, &mut |_, _| ()).unwrap();
    let s = r.sent.unwrap();
    assert_eq!((s.iters, r.completed[0]), (2001, 2001), "the last message asks for a completion");
    assert!(s.bw_avg > 0.0 && s.bw_peak >= s.bw_avg, "{s:?}");
    assert_eq!(a.ctx.counters().rdma_sends, 2001);
    // Moderation deeper than the queue is clamped to it, or the run would wait for ever.
    b.mr.write(b.layout.remote(0, 0), &[0; 8]).unwrap();
    let p = BwPlan { cq_mod: 1000, ..plan(Some(BwOp::FetchAdd), false, 8, 1000, 16, &peers) };
    let r = engine::bw(&a.side(), &p, &mut |_, _| ()).unwrap();
    assert_eq!(r.completed[0], 1000);
    let word = u64::from_ne_bytes(b.remote_bytes(8).try_into().unwrap());
    assert_eq!(word, 1000, "each fetch-and-add ran exactly once");
    // A run of a duration stops between completions: its tail still asks for one, so the
    // run ends with every message it posted completed (not stalled on an unsignaled tail).
    let before = a.ctx.counters().rdma_sends;
    let mut side = a.side();
    side.stall = std::time::Duration::from_secs(5);
    let p = BwPlan {
        stop: Stop::Duration(std::time::Duration::from_millis(300)),
        cq_mod: 100,
        ..plan(Some(BwOp::Write), false, size, 0, 128, &peers)
    };
    let t0 = std::time::Instant::now();
    let r = engine::bw(&side, &p, &mut |_, _| ()).unwrap();
    assert!(t0.elapsed() < std::time::Duration::from_secs(4), "{:?}", t0.elapsed());
    assert!(r.completed[0] > 0);
    assert_eq!(a.ctx.counters().rdma_sends - before, r.completed[0], "every posted message");
}

#[test]
fn send_lat_figures_are_ordered() {
    netns();
    let (a, b) = pair(4096);
    let iters = 2000;
    for e in [&a, &b] {
        engine::post_receives(&e.side(), engine::SEND_LAT_DEPTH).unwrap();
    }
    let lat = move |e: &End, peer: Peer, initiator: bool| {
        let p = LatPlan { size: 2, stop: Stop::Iters(iters), initiator, peer, seeds: None };
        engine::send_lat(&e.side(), &p, &mut |_, _| ()).unwrap().latency
    };
    let pa = b.peer();
    let pb = a.peer();
    let responder = std::thread::spawn(move || {
        let r = lat(&b, pb, false);
        (r, b.ctx.counters().rdma_recvs)
    });
    let l = lat(&a, pa, true);
    let (lr, recvs) = responder.join().unwrap();
    for x in [l, lr] {
        assert_eq!((x.size, x.iters), (2, iters));
        assert!(x.t_min > 0.0, "{x:?}");
        assert!(x.t_min <= x.t_typical && x.t_typical <= x.p99, "{x:?}");
        assert!(x.p99 <= x.p99_9 && x.p99_9 <= x.t_max, "{x:?}");
        assert!(x.t_min <= x.t_avg && x.t_avg <= x.t_max, "{x:?}");
    }
    assert_eq!(recvs, iters);
    assert_eq!(a.ctx.counters().rdma_recvs, iters);
    eprintln!("send_lat 2 B: typical {:.2} usec, p99.9 {:.2}", l.t_typical, l.p99_9);
}

/// `b`'s remote area under a wrong rkey: every access the peer makes fails.
fn wrong_rkey(b: &End) -> Peer {
    let mut peer = b.peer();
    peer.buffer.rkey = RKey(peer.buffer.rkey.0 ^ 1);
    peer
}

/// The error a loop must stop with when the first WRITE meets a wrong rkey.
fn assert_first_write_refused(e: engine::Error) {
    assert!(
        matches!(e, engine::Error::Completion { qp: 0, seq: 0, status: WcStatus::RemAccessErr }),
        "{e}"
    );
}

#[test]
fn a_failing_work_request_stops_the_loop() {
    netns();
    let (a, b) = pair(4096);
    let peers = [wrong_rkey(&b)];
    let e =
        engine::bw(&a.side(), &plan(Some(BwOp::Write), false, 4096, 10, 4, &peers), &mut |_, _| ())
            .unwrap_err();
    assert_first_write_refused(e);
}

/// WRITE latency asks for one completion in 16: a WRITE that fails unsignaled still
/// completes (with its error), and the wait for the peer's answer, which never comes, ends
/// with that error rather than at the stall limit.
#[test]
fn a_failing_unsignaled_write_stops_write_latency() {
    netns();
    let (a, b) = pair(4096);
    let peer = wrong_rkey(&b);
    let side = Side { stall: std::time::Duration::from_secs(5), ..a.side() };
    // Not the initiator: it WRITEs first (WRITE 0 is unsignaled), then waits for the answer.
    let p = LatPlan { size: 2, stop: Stop::Iters(100), initiator: false, peer, seeds: None };
    assert_first_write_refused(engine::write_lat(&side, &p, &mut |_, _| ()).unwrap_err());
}

#[test]
fn read_bw_brings_the_peers_bytes_and_fetch_add_runs_once_each() {
    netns();
    let size = 16384;
    let (a, b) = pair(size);
    let pattern: Vec<u8> = (0..size).map(|i| (i * 13 % 241) as u8).collect();
    b.mr.write(b.layout.remote(0, 0), &pattern).unwrap();
    let peers = [b.peer()];
    let r =
        engine::bw(&a.side(), &plan(Some(BwOp::Read), false, size, 500, 8, &peers), &mut |_, _| ())
            .unwrap();
    let s = r.sent.unwrap();
    assert_eq!((s.size, s.iters), (16384, 500));
    assert!(
        a.mr.to_vec(a.layout.local(0, 0), size).unwrap() == pattern,
        "the READs brought the peer's bytes"
    );
    b.mr.write(b.layout.remote(0, 0), &[0; 8]).unwrap();
    let r = engine::bw(
        &a.side(),
        &plan(Some(BwOp::FetchAdd), false, 999, 1000, 16, &peers),
        &mut |_, _| (),
    )
    .unwrap();
    let s = r.sent.unwrap();
    assert_eq!((s.size, s.iters), (8, 1000), "atomics are 8 bytes whatever the size asked");
    let word = u64::from_ne_bytes(b.remote_bytes(8).try_into().unwrap());
    assert_eq!(word, 1000, "each fetch-and-add ran exactly once");
}

#[test]
fn send_bw_against_a_receive_sink() {
    netns();
    let (a, b) = pair(8192);
    engine::post_receives(&b.side(), 128).unwrap();
    let sink = std::thread::spawn(move || {
        let r =
            engine::bw(&b.side(), &plan(None, true, 8192, 3000, 1, &[]), &mut |_, _| ()).unwrap();
        r.received.unwrap()
    });
    let peers = [b_peer_placeholder()];
    let r = engine::bw(
        &a.side(),
        &plan(Some(BwOp::Send), false, 8192, 3000, 16, &peers),
        &mut |_, _| (),
    )
    .unwrap();
    assert_eq!(r.sent.unwrap().iters, 3000);
    let got = sink.join().unwrap();
    assert_eq!((got.iters, got.size), (3000, 8192), "every message arrived");
    assert_eq!(got.bw_peak, 0.0, "a receiver reports no peak, as perftest's");
}

/// SENDs need no remote buffer.
fn b_peer_placeholder() -> Peer {
    Peer { buffer: RemoteBuffer { addr: 0, rkey: RKey(0) }, ud: None }
}

#[test]
fn one_sided_latency_figures_are_ordered() {
    netns();
    let (a, b) = pair(4096);
    for op in [BwOp::Read, BwOp::FetchAdd] {
        let p = LatPlan {
            size: 64,
            stop: Stop::Iters(1000),
            initiator: true,
            peer: b.peer(),
            seeds: None,
        };
        let l = engine::one_sided_lat(&a.side(), &p, op, &mut |_, _| ()).unwrap().latency;
        assert_eq!(l.iters, 1000, "{op:?}");
        assert!(l.t_min > 0.0 && l.t_min <= l.t_typical && l.t_typical <= l.p99, "{op:?} {l:?}");
        assert!(l.p99 <= l.p99_9 && l.p99_9 <= l.t_max, "{op:?} {l:?}");
    }
    let word = u64::from_ne_bytes(b.remote_bytes(8).try_into().unwrap());
    assert_eq!(word, 1000);
}

#[test]
fn data_validation_catches_a_changed_byte() {
    // The pattern check itself: a byte changed anywhere is found at its offset.
    let mut buf = vec![0u8; 4099];
    engine::pattern::fill(7, 1, 42, &mut buf);
    assert_eq!(engine::pattern::check(7, 1, 42, &buf), None);
    assert_eq!(engine::pattern::check(7, 1, 43, &buf), Some(0), "another message's pattern");
    buf[4097] ^= 0x10;
    assert_eq!(engine::pattern::check(7, 1, 42, &buf), Some(4097));
}
