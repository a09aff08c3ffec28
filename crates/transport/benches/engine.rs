//! Engine throughput: two in-memory RC QPs, 4 KiB MTU, 64 KiB RDMA WRITEs, no I/O, one core.
//! A benchmark, not a test: `cargo bench -p podnet-transport --bench engine`.
//!
//! Two figures: the engine alone (packets go straight from one endpoint to the other), and
//! with the ICRC work a driver adds on each side (seal on send, verify on receive).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant as Clock};

use transport::{
    Access, Endpoint, EndpointConfig, Instant, ModifyQp, Mtu, Path, QpCaps, QpState, QpType,
    RecvMeta, SendOp, SendWr, VecMemory,
};
use wire::icrc::PseudoHeader;
use wire::{Psn, RKey};

const MSG: u32 = 64 * 1024;
const WINDOW: u64 = 32;

fn run(messages: u64, icrc: bool) -> (Duration, u64, u64) {
    let ips = [IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))];
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mut eps = Vec::new();
    let mut info = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut ep = Endpoint::new(EndpointConfig::new(*ip, 42 + i as u64), VecMemory::new());
        let pd = ep.alloc_pd().unwrap();
        let cq = ep.create_cq();
        let id = ep.memory_mut().add((MSG as usize) * WINDOW as usize);
        let mr = ep.register_mr(pd, id, 0x10_0000, u64::from(MSG) * WINDOW, all).unwrap();
        let qpn = ep
            .create_qp(
                pd,
                QpType::Rc,
                cq,
                cq,
                QpCaps { max_send_wr: 256, max_recv_wr: 16, ..Default::default() },
            )
            .unwrap();
        ep.modify_qp(
            qpn,
            &ModifyQp { state: Some(QpState::Init), access: Some(all), ..Default::default() },
        )
        .unwrap();
        eps.push(ep);
        info.push((cq, mr, qpn));
    }
    for i in 0..2 {
        let (_, _, qpn) = info[i];
        let rtr = ModifyQp {
            state: Some(QpState::Rtr),
            path_mtu: Some(Mtu::Mtu4096),
            dest: Some(Path::new(ips[1 - i], info[1 - i].2)),
            rq_psn: Some(Psn::new(0)),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(1),
            ..Default::default()
        };
        eps[i].modify_qp(qpn, &rtr).unwrap();
        let rts = ModifyQp {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(0)),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        };
        eps[i].modify_qp(qpn, &rts).unwrap();
    }
    let (cq, mr, qpn) = info[0];
    let rkey = RKey(info[1].1.rkey);
    let (mut posted, mut done, mut packets) = (0u64, 0u64, 0u64);
    let now = Instant::ZERO;
    let start = Clock::now();
    while done < messages {
        while posted < messages && posted - done < WINDOW {
            let off = (posted % WINDOW) * u64::from(MSG);
            let wr = SendWr::new(posted, SendOp::Write { remote_addr: 0x10_0000 + off, rkey }).sge(
                0x10_0000 + off,
                MSG,
                mr.lkey,
            );
            eps[0].post_send(qpn, wr).unwrap();
            posted += 1;
        }
        for i in 0..2 {
            while let Some(mut t) = eps[i].poll_transmit(now) {
                packets += 1;
                // What a driver does: seal with the headers the packet goes out with; the
                // receiver verifies against the real IP header.
                let h = icrc.then(|| {
                    let h = PseudoHeader::between(ips[i], ips[1 - i], t.src_port, 4791)
                        .expect("one family");
                    h.seal(&mut t.payload).unwrap();
                    h.for_payload(t.payload.len())
                });
                let meta = RecvMeta {
                    src: ips[i],
                    dst: ips[1 - i],
                    src_port: t.src_port,
                    dst_port: 4791,
                    ecn: 2,
                    ip_header: h.as_ref().map(PseudoHeader::ip_header),
                };
                eps[1 - i].handle_datagram(now, &meta, &t.payload);
            }
        }
        while let Some(wc) = eps[0].poll_completion(cq) {
            assert_eq!(wc.status, transport::WcStatus::Success);
            done += 1;
        }
    }
    (start.elapsed(), packets, messages * u64::from(MSG))
}

fn main() {
    let messages = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000u64);
    run(200, false); // warm up
    for (label, icrc) in [("engine only", false), ("engine + ICRC seal/verify", true)] {
        let (t, packets, bytes) = run(messages, icrc);
        let s = t.as_secs_f64();
        println!(
            "{label:28} {messages} x 64 KiB WRITE, 4 KiB MTU: {:.3} s, {:.2} Mpackets/s, {:.2} GB/s of payload",
            s,
            packets as f64 / s / 1e6,
            bytes as f64 / s / 1e9
        );
    }
}
