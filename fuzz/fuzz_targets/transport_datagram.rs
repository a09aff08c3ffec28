//! Arbitrary datagrams into a QP of every type, in every state: no panic, and what the
//! endpoint queues stays bounded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use transport::{
    Access, Endpoint, EndpointConfig, Instant, ModifyQp, Mtu, Path, QKey, QpCaps, QpState, QpType, RecvMeta, RecvWr,
    SendOp, SendWr, VecMemory,
};
use wire::{Psn, Qpn, RKey};

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud][data[0] as usize % 3];
    let target = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Err][data[1] as usize % 5];
    let peer: std::net::IpAddr = "10.0.0.2".parse().unwrap();
    let mut ep = Endpoint::new(EndpointConfig::new("10.0.0.1".parse().unwrap(), 1), VecMemory::new());
    let pd = ep.alloc_pd().unwrap();
    let cq = ep.create_cq();
    let id = ep.memory_mut().add(1 << 16);
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = ep.register_mr(pd, id, 0x1000, 1 << 16, all).unwrap();
    let qpn = ep.create_qp(pd, qp_type, cq, cq, QpCaps::default()).unwrap();
    let steps = [
        ModifyQp { state: Some(QpState::Init), access: Some(all), qkey: Some(QKey(7)), ..Default::default() },
        ModifyQp {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::Mtu256),
            dest: Some(Path::new(peer, Qpn::new(0x11))),
            rq_psn: Some(Psn::new(0)),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(1),
            ..Default::default()
        },
        ModifyQp {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(0)),
            timeout: Some(1),
            retry_cnt: Some(2),
            rnr_retry: Some(2),
            max_rd_atomic: Some(4),
            ..Default::default()
        },
    ];
    for m in &steps {
        if ep.query_qp(qpn).unwrap().0 == target {
            break;
        }
        let _ = ep.modify_qp(qpn, m);
    }
    if target == QpState::Err {
        let _ = ep.modify_qp(qpn, &ModifyQp { state: Some(QpState::Err), ..Default::default() });
    }
    for i in 0..4 {
        let _ = ep.post_recv(qpn, RecvWr::new(i).sge(0x1000 + i * 1024, 1024, mr.lkey));
    }
    let _ = ep.post_send(qpn, SendWr::new(1, SendOp::Read { remote_addr: 0, rkey: RKey(1) }).sge(0x1000, 600, mr.lkey));
    let mut now = Instant::ZERO;
    // The rest: datagrams, each prefixed by a length byte; their BTH is aimed at our QP.
    let mut rest = &data[2..];
    while let Some((&n, tail)) = rest.split_first() {
        let n = (n as usize).min(tail.len());
        let mut dg = tail[..n].to_vec();
        rest = &tail[n..];
        if dg.len() >= 8 {
            dg[5..8].copy_from_slice(&qpn.get().to_be_bytes()[1..]);
        }
        let meta = RecvMeta { src: peer, dst: "10.0.0.1".parse().unwrap(), src_port: 0xc000, dst_port: 4791, ecn: dg.len() as u8 & 3, ip_header: None };
        ep.handle_datagram(now, &meta, &dg);
        now = now + std::time::Duration::from_micros(n as u64 * 3);
        ep.handle_timeout(now);
        let mut sent = 0;
        while ep.poll_transmit(now).is_some() {
            sent += 1;
            assert!(sent < 100_000, "transmit queue unbounded");
        }
        while ep.poll_completion(cq).is_some() {}
    }
});
