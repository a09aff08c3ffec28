//! The measurement loops over two soft devices in this process (127.0.0.1 and 127.0.0.2, in a
//! private network namespace): WRITE bandwidth moves the bytes it claims, SEND latency's
//! figures are ordered as they must be, and a failing work request stops the loop with it.

use perf::engine::{self, BwOp, RemoteBuffer, Side};
use verbs::{
    Access, CompletionQueue, Connect, Context, ContextOptions, MemoryRegion, ModifyQp, Mtu, Path,
    ProtectionDomain, Psn, QpInit, QpState, QpType, QueuePair, RKey, WcStatus,
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
    qp: QueuePair,
}

impl End {
    fn side(&self) -> Side<'_> {
        Side { qp: &self.qp, cq: &self.cq, mr: &self.mr }
    }
}

fn pair(len: usize) -> (End, End) {
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let make = |ip: &str| {
        let ctx = Context::soft(ip.parse().unwrap(), 4791, &ContextOptions::default()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(1024, None).unwrap();
        let mr = pd.reg_mr(len, all).unwrap();
        let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq)).unwrap();
        let init = ModifyQp { state: Some(QpState::Init), access: Some(all), ..Default::default() };
        qp.modify(&init).unwrap();
        End { ctx, _pd: pd, cq, mr, qp }
    };
    let (a, b) = (make("127.0.0.1"), make("127.0.0.2"));
    for (x, y, sq, rq) in [(&a, &b, 1, 2), (&b, &a, 2, 1)] {
        let path = Path { ip: y.ctx.ip(), qpn: y.qp.qpn() };
        // A 0.5 s ACK timeout: a busy CI machine's stalls must not look like loss.
        let c = Connect {
            path_mtu: Mtu::Mtu4096,
            timeout: 17,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            ..Connect::new(path, Psn::new(sq), Psn::new(rq))
        };
        x.qp.connect(&c).unwrap();
    }
    (a, b)
}

#[test]
fn write_bw_moves_what_it_reports() {
    netns();
    let size = 65536;
    let (a, b) = pair(size);
    let pattern: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
    a.mr.write(0, &pattern).unwrap();
    let remote = RemoteBuffer { addr: b.mr.addr(), rkey: b.mr.rkey() };
    let r = engine::write_bw(a.side(), remote, size, 2000, 16).unwrap();
    assert_eq!((r.size, r.iters), (65536, 2000));
    assert!(r.bw_avg > 1.0 && r.bw_peak >= r.bw_avg, "{r:?}");
    // Rate and bandwidth describe the same messages.
    let from_bw = r.bw_avg * perf::stats::PERFTEST_MB / size as f64;
    assert!((from_bw / (r.msg_rate * 1e6) - 1.0).abs() < 1e-9, "{r:?}");
    assert!(b.mr.to_vec(0, size).unwrap() == pattern, "the WRITEs landed");
    let c = a.ctx.counters();
    // 2,000 messages of 16 packets at MTU 4096, no retransmission on a clean loopback.
    assert_eq!(c.rdma_sends, 2000, "{c:?}");
    assert_eq!(c.sent_pkts, 2000 * 16, "{c:?}");
    eprintln!("write_bw 64 KiB: peak {:.1} avg {:.1} MB/s", r.bw_peak, r.bw_avg);
}

#[test]
fn send_lat_figures_are_ordered() {
    netns();
    let (a, b) = pair(4096);
    let iters = 2000;
    let responder = std::thread::spawn(move || {
        let r = engine::send_lat(b.side(), 2, iters, false).unwrap();
        (r, b.ctx.counters().rdma_recvs)
    });
    let l = engine::send_lat(a.side(), 2, iters, true).unwrap();
    let (lr, recvs) = responder.join().unwrap();
    for x in [l, lr] {
        assert_eq!((x.size, x.iters), (2, iters as u64));
        assert!(x.t_min > 0.0, "{x:?}");
        assert!(x.t_min <= x.t_typical && x.t_typical <= x.p99, "{x:?}");
        assert!(x.p99 <= x.p99_9 && x.p99_9 <= x.t_max, "{x:?}");
        assert!(x.t_min <= x.t_avg && x.t_avg <= x.t_max, "{x:?}");
    }
    assert_eq!(recvs, iters as u64);
    assert_eq!(a.ctx.counters().rdma_recvs, iters as u64);
    eprintln!("send_lat 2 B: typical {:.2} usec, p99.9 {:.2}", l.t_typical, l.p99_9);
}

#[test]
fn a_failing_work_request_stops_the_loop() {
    netns();
    let (a, b) = pair(4096);
    let remote = RemoteBuffer { addr: b.mr.addr(), rkey: RKey(b.mr.rkey().0 ^ 1) };
    let e = engine::write_bw(a.side(), remote, 4096, 10, 4).unwrap_err();
    assert!(
        matches!(e, engine::Error::Completion { wr_id: 0, status: WcStatus::RemAccessErr }),
        "{e}"
    );
}

#[test]
fn read_bw_brings_the_peers_bytes_and_fetch_add_runs_once_each() {
    netns();
    let size = 16384;
    let (a, b) = pair(size);
    let pattern: Vec<u8> = (0..size).map(|i| (i * 13 % 241) as u8).collect();
    b.mr.write(0, &pattern).unwrap();
    let remote = RemoteBuffer { addr: b.mr.addr(), rkey: b.mr.rkey() };
    let r = engine::bw(a.side(), remote, BwOp::Read, size, 500, 8).unwrap();
    assert_eq!((r.size, r.iters), (16384, 500));
    assert!(a.mr.to_vec(0, size).unwrap() == pattern, "the READs brought the peer's bytes");
    b.mr.write(0, &[0; 8]).unwrap();
    let r = engine::bw(a.side(), remote, BwOp::FetchAdd, 999, 1000, 16).unwrap();
    assert_eq!((r.size, r.iters), (8, 1000), "atomics are 8 bytes whatever the size asked");
    let word = u64::from_ne_bytes(b.mr.to_vec(0, 8).unwrap().try_into().unwrap());
    assert_eq!(word, 1000, "each fetch-and-add ran exactly once");
}

#[test]
fn send_bw_against_a_receive_sink() {
    netns();
    let (a, b) = pair(8192);
    let sink = std::thread::spawn(move || engine::recv_sink(b.side(), 8192, 3000, 128).unwrap());
    let remote = RemoteBuffer { addr: 0, rkey: RKey(0) };
    let r = engine::bw(a.side(), remote, BwOp::Send, 8192, 3000, 16).unwrap();
    assert_eq!(r.iters, 3000);
    assert_eq!(sink.join().unwrap(), 3000 * 8192, "every byte arrived");
}

#[test]
fn one_sided_latency_figures_are_ordered() {
    netns();
    let (a, b) = pair(4096);
    let remote = RemoteBuffer { addr: b.mr.addr(), rkey: b.mr.rkey() };
    for op in [BwOp::Read, BwOp::FetchAdd] {
        let l = engine::one_sided_lat(a.side(), remote, op, 64, 1000).unwrap();
        assert_eq!(l.iters, 1000, "{op:?}");
        assert!(l.t_min > 0.0 && l.t_min <= l.t_typical && l.t_typical <= l.p99, "{op:?} {l:?}");
        assert!(l.p99 <= l.p99_9 && l.p99_9 <= l.t_max, "{op:?} {l:?}");
    }
    let word = u64::from_ne_bytes(b.mr.to_vec(0, 8).unwrap().try_into().unwrap());
    assert_eq!(word, 1000);
}
