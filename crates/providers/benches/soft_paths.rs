//! What each receive path of the soft provider costs, measured end to end through the verbs
//! API: two soft devices in this process (each with its own progress thread) in a private
//! network namespace, A writing to B over RC.
//!
//! `sudo cargo bench -p podnet-providers --bench soft_paths` (root: a network namespace and, for
//! the raw path, CAP_NET_RAW). Prints, per path and message size, goodput and B's receive
//! rate in packets per second.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use providers::{ContextOptions, Ipv4Receive, Progress};
use verbs::{
    Access, Connect, ModifyQp, Mtu, Path, Psn, QpCaps, QpInit, QpState, QpType, SendOp, SendWr,
    WcStatus, empty_wc,
};

fn netns() {
    // SAFETY: unshare has no memory-safety preconditions; it affects only this thread.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "run as root");
    for args in [
        &["link", "set", "lo", "up"][..],
        &["-6", "addr", "add", "fd00::1/128", "dev", "lo", "nodad"],
        &["-6", "addr", "add", "fd00::2/128", "dev", "lo", "nodad"],
    ] {
        assert!(std::process::Command::new("ip").args(args).status().unwrap().success());
    }
}

/// Moves `size`-byte WRITEs from a to b for `secs`; returns (bytes/s, packets/s at b).
fn run(ips: (&str, &str), v4: Ipv4Receive, size: usize, secs: f64) -> (f64, f64) {
    let opts = ContextOptions { progress: Progress::Event, ipv4_receive: v4, ..Default::default() };
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let a = providers::open_soft(ip(ips.0), 4791, &opts).unwrap();
    let b = providers::open_soft(ip(ips.1), 4791, &opts).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (pa.reg_mr(size, all).unwrap(), pb.reg_mr(size, all).unwrap());
    let (ca, cb) = (a.create_cq(512, None).unwrap(), b.create_cq(512, None).unwrap());
    let mut init = QpInit::new(QpType::Rc, &ca);
    init.caps = QpCaps { max_send_wr: 64, max_recv_wr: 16, ..Default::default() };
    let qa = pa.create_qp(&init).unwrap();
    let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cb)).unwrap();
    for (q, peer, pq) in [(&qa, ip(ips.1), qb.qpn()), (&qb, ip(ips.0), qa.qpn())] {
        let init = ModifyQp { state: Some(QpState::Init), access: Some(all), ..Default::default() };
        q.modify(&init).unwrap();
        let path = Path::new(peer, pq);
        let c = Connect {
            path_mtu: Mtu::Mtu4096,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            ..Connect::new(path, Psn::new(0), Psn::new(0))
        };
        q.connect(&c).unwrap();
    }
    let wr = SendWr {
        sgl: vec![ma.sge(0, size).unwrap()].into(),
        ..SendWr::new(0, SendOp::Write { remote_addr: mb.addr(), rkey: mb.rkey() })
    };
    let rx0 = b.counters().rcvd_pkts;
    let t0 = Instant::now();
    let (mut posted, mut done, mut bytes) = (0u64, 0u64, 0u64);
    let mut wc = [empty_wc(); 32];
    while t0.elapsed().as_secs_f64() < secs {
        while posted - done < 32 {
            qa.post_send(wr.clone()).unwrap();
            posted += 1;
        }
        let n = ca.poll(&mut wc);
        for c in &wc[..n] {
            assert_eq!(c.status, WcStatus::Success);
            bytes += size as u64;
        }
        done += n as u64;
        if n == 0 {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    let dt = t0.elapsed().as_secs_f64();
    let c = b.counters();
    assert_eq!(c.icrc_errors, 0);
    (bytes as f64 / dt, (c.rcvd_pkts - rx0) as f64 / dt)
}

fn main() {
    netns();
    let secs = std::env::var("SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    println!("{:34} {:>7} {:>12} {:>12}", "receive path", "size", "MB/s", "rx pkt/s");
    let paths = [
        ("IPv4 raw socket (full ICRC)", ("127.0.0.1", "127.0.0.2"), Ipv4Receive::Raw),
        ("IPv4 UDP, ID recovered (16-bit)", ("127.0.0.1", "127.0.0.2"), Ipv4Receive::Udp),
        ("IPv6 UDP (full ICRC)", ("fd00::1", "fd00::2"), Ipv4Receive::Auto),
    ];
    for size in [64, 4096, 65536] {
        for (name, ips, v4) in paths {
            let (bw, pps) = run(ips, v4, size, secs);
            println!("{name:34} {size:>7} {:>12.1} {:>12.0}", bw / 1e6, pps);
        }
    }
}
