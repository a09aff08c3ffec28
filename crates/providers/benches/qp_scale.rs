//! What a soft device costs a host that talks to many peers: resident memory and idle CPU with
//! 1, 100 and 1,000 connected RC QPs at default queue depths, event-driven progress.
//!
//! `sudo cargo bench -p podnet-providers --bench qp_scale` (root: a private network namespace).
//! Both ends live in this process (devices 127.0.0.1 and 127.0.0.2), so the figures are for
//! 2 × N QPs; each QP's receive queue is filled to its default depth (512) and one message
//! crosses every connection before the idle measurement.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use providers::{ContextOptions, Progress};
use verbs::{
    Access, Connect, ModifyQp, Mtu, Path, Psn, QpCaps, QpInit, QpState, QpType, RecvWr, SendOp,
    SendWr, WcStatus, empty_wc,
};

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF covers every thread of the process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn scenario(n: usize) {
    let opts = ContextOptions { progress: Progress::Event, ..Default::default() };
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let base = rss_kib();
    let a = providers::open_soft(ip("127.0.0.1"), 4791, &opts).unwrap();
    let b = providers::open_soft(ip("127.0.0.2"), 4791, &opts).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ma, mb) = (pa.reg_mr(65536, all).unwrap(), pb.reg_mr(65536, all).unwrap());
    let (ca, cb) = (a.create_cq(65536, None).unwrap(), b.create_cq(65536, None).unwrap());
    let t_setup = Instant::now();
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        let mut ia = QpInit::new(QpType::Rc, &ca);
        ia.caps = QpCaps::default();
        let qa = pa.create_qp(&ia).unwrap();
        let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cb)).unwrap();
        for (q, peer, pq) in [(&qa, ip("127.0.0.2"), qb.qpn()), (&qb, ip("127.0.0.1"), qa.qpn())] {
            let init =
                ModifyQp { state: Some(QpState::Init), access: Some(all), ..Default::default() };
            q.modify(&init).unwrap();
            let path = Path::new(peer, pq);
            let c = Connect {
                path_mtu: Mtu::Mtu1024,
                max_rd_atomic: 16,
                max_dest_rd_atomic: 16,
                ..Connect::new(path, Psn::new(0), Psn::new(0))
            };
            q.connect(&c).unwrap();
        }
        let wrs: Vec<RecvWr> = (0..QpCaps::default().max_recv_wr)
            .map(|i| RecvWr {
                sgl: vec![mb.sge(0, 64).unwrap()].into(),
                ..RecvWr::new(u64::from(i))
            })
            .collect();
        qb.post_recv_batch(&wrs).unwrap();
        let wrs: Vec<RecvWr> = (0..QpCaps::default().max_recv_wr)
            .map(|i| RecvWr {
                sgl: vec![ma.sge(0, 64).unwrap()].into(),
                ..RecvWr::new(u64::from(i))
            })
            .collect();
        qa.post_recv_batch(&wrs).unwrap();
        pairs.push((qa, qb));
    }
    let setup = t_setup.elapsed();
    // One SEND over every connection, so every QP has run.
    for (qa, _) in &pairs {
        qa.post_send(SendWr {
            sgl: vec![ma.sge(0, 64).unwrap()].into(),
            ..SendWr::new(0, SendOp::Send)
        })
        .unwrap();
    }
    let mut wc = [empty_wc(); 64];
    let (mut sa, mut rb) = (0, 0);
    let t0 = Instant::now();
    while (sa < n || rb < n) && t0.elapsed() < Duration::from_secs(30) {
        let k = ca.poll(&mut wc);
        sa += wc[..k].iter().filter(|c| c.status == WcStatus::Success).count();
        let k = cb.poll(&mut wc);
        rb += wc[..k].iter().filter(|c| c.status == WcStatus::Success).count();
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!((sa, rb), (n, n), "every connection carried its message");
    std::thread::sleep(Duration::from_millis(200));
    let rss = rss_kib();
    let c0 = cpu_time();
    let idle = Duration::from_secs(5);
    std::thread::sleep(idle);
    let cpu = cpu_time() - c0;
    println!(
        "{n:>5} QPs per side  setup {:>7.1} ms  RSS +{:>7} KiB ({:>5.1} KiB per QP)  idle CPU {:>5.2} %",
        setup.as_secs_f64() * 1e3,
        rss.saturating_sub(base),
        rss.saturating_sub(base) as f64 / (2 * n) as f64,
        cpu.as_secs_f64() / idle.as_secs_f64() * 100.0
    );
}

fn main() {
    if let Some(n) = std::env::args().find_map(|a| a.strip_prefix("--child=")?.parse().ok()) {
        scenario(n);
        return;
    }
    // SAFETY: unshare has no memory-safety preconditions; it affects only this thread.
    assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "run as root");
    let up = std::process::Command::new("ip").args(["link", "set", "lo", "up"]).status();
    assert!(up.unwrap().success());
    // One process per size (in this namespace), so memory a previous size freed does not
    // blur the next.
    for n in [1, 100, 1000] {
        let st = std::process::Command::new(std::env::current_exe().unwrap())
            .arg(format!("--child={n}"))
            .status()
            .unwrap();
        assert!(st.success());
    }
}
