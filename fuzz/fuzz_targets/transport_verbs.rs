//! Arbitrary sequences of posts, state changes, deliveries, losses and time between two
//! endpoints: no panic, and the requester never completes more than was posted.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use transport::{
    Access, Endpoint, EndpointConfig, Instant, ModifyQp, Mtu, Path, QKey, QpCaps, QpState, QpType, RecvMeta, RecvWr,
    SendOp, SendWr, VecMemory,
};
use wire::{Psn, RKey};

fuzz_target!(|data: &[u8]| {
    let Some((&t, ops)) = data.split_first() else { return };
    let qp_type = [QpType::Rc, QpType::Uc, QpType::Ud][t as usize % 3];
    let ips: [std::net::IpAddr; 2] = ["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()];
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mut eps = Vec::new();
    let mut info = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut ep = Endpoint::new(EndpointConfig::new(*ip, i as u64), VecMemory::new());
        let pd = ep.alloc_pd().unwrap();
        let cq = ep.create_cq();
        let id = ep.memory_mut().add(1 << 16);
        let mr = ep.register_mr(pd, id, 0x10000, 1 << 16, all).unwrap();
        let qpn = ep.create_qp(pd, qp_type, cq, cq, QpCaps { max_send_wr: 16, max_recv_wr: 16, max_inline_data: 256 }).unwrap();
        eps.push(ep);
        info.push((cq, mr, qpn));
    }
    let bring_up = |eps: &mut Vec<Endpoint<VecMemory>>, i: usize| {
        let (_, _, qpn) = info[i];
        let peer = info[1 - i].2;
        let ms = [
            ModifyQp { state: Some(QpState::Reset), ..Default::default() },
            ModifyQp { state: Some(QpState::Init), access: Some(all), qkey: Some(QKey(9)), ..Default::default() },
            ModifyQp {
                state: Some(QpState::Rtr),
                path_mtu: Some(Mtu::Mtu256),
                dest: Some(Path::new(ips[1 - i], peer)),
                rq_psn: Some(Psn::new(0xff_fff0)),
                max_dest_rd_atomic: Some(2),
                min_rnr_timer: Some(0),
                ..Default::default()
            },
            ModifyQp {
                state: Some(QpState::Rts),
                sq_psn: Some(Psn::new(0xff_fff0)),
                timeout: Some(1),
                retry_cnt: Some(3),
                rnr_retry: Some(3),
                max_rd_atomic: Some(2),
                ..Default::default()
            },
        ];
        for m in &ms {
            let _ = eps[i].modify_qp(qpn, m);
        }
    };
    bring_up(&mut eps, 0);
    bring_up(&mut eps, 1);
    let mut now = Instant::ZERO;
    let mut posted = [0u64; 2];
    let mut completed = [0u64; 2];
    for chunk in ops.chunks(4) {
        let [op, a, b, c] = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0), *chunk.get(3).unwrap_or(&0)];
        let i = (op & 1) as usize;
        let (cq, mr, qpn) = info[i];
        let rkey = RKey(info[1 - i].1.rkey ^ u32::from(c & 0x80 != 0));
        let len = u32::from(a) * 7 + u32::from(b);
        let addr = 0x10000 + u64::from(c) * 64;
        match op >> 1 & 7 {
            0 | 1 => {
                let ops = [
                    SendOp::Send,
                    SendOp::SendWithImm(7),
                    SendOp::Write { remote_addr: addr, rkey },
                    SendOp::WriteWithImm { remote_addr: addr, rkey, imm: 1 },
                    SendOp::Read { remote_addr: addr, rkey },
                    SendOp::FetchAdd { remote_addr: addr, rkey, add: 1 },
                    SendOp::CompareSwap { remote_addr: addr, rkey, compare: 0, swap: 1 },
                ];
                let o = ops[b as usize % ops.len()];
                let l = if matches!(o, SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. }) { 8 } else { len };
                let mut wr = SendWr::new(posted[i], o).sge(0x10000, l, mr.lkey);
                wr.ud = Some(transport::UdDest::new(ips[1 - i], info[1 - i].2, QKey(9)));
                // Some go inline (payload taken at the post), some of them past the limit.
                wr.inline = c & 0x40 != 0;
                if eps[i].post_send(qpn, wr).is_ok() {
                    posted[i] += 1;
                }
            }
            2 => {
                let _ = eps[i].post_recv(qpn, RecvWr::new(9).sge(0x10000 + u64::from(a) * 16, len, mr.lkey));
            }
            3 => {
                // Deliver (or lose, or corrupt) what endpoint i has to send.
                let mut k = 0u32;
                while let Some(mut t) = eps[i].poll_transmit(now) {
                    k += 1;
                    if k > 100_000 {
                        panic!("transmit queue unbounded");
                    }
                    if k % 7 == u32::from(a % 7) && a & 0x40 != 0 {
                        continue; // lost
                    }
                    if c & 0x40 != 0 && !t.payload.is_empty() {
                        let at = usize::from(b) % t.payload.len();
                        t.payload[at] ^= 0x10;
                    }
                    let meta = RecvMeta { src: ips[i], dst: ips[1 - i], src_port: t.src_port, dst_port: 4791, ecn: c & 3, ip_header: None };
                    eps[1 - i].handle_datagram(now, &meta, &t.payload);
                }
            }
            4 => {
                now = now + Duration::from_micros(u64::from(a) * u64::from(b) + 1);
                eps[0].handle_timeout(now);
                eps[1].handle_timeout(now);
            }
            5 => {
                let states = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Err];
                let _ = eps[i].modify_qp(qpn, &ModifyQp { state: Some(states[a as usize % 6]), ..Default::default() });
            }
            6 => bring_up(&mut eps, i),
            _ => {}
        }
        while let Some(wc) = eps[i].poll_completion(cq) {
            if wc.opcode != transport::WcOpcode::Recv && wc.opcode != transport::WcOpcode::RecvRdmaWithImm {
                completed[i] += 1;
            }
        }
        assert!(completed[i] <= posted[i], "more send completions than posts");
    }
});
