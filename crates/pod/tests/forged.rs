//! The pod monitor against forged membership: agents of a three-host pod on soft devices on
//! loopback addresses, and an attacker who sends what foca would accept — an announce of a
//! healthy host with the highest incarnation, from outside the plan and from the host's own
//! address — with and without the pod's secret.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pod::agent::{AgentConfig, NoObserver, PodAgent};
use pod::member::{Health, Id, Membership, Timeouts};
use pod::seal::{PodKey, Purpose, Sealer, unix_us};

fn ip(net: u8, host: u8) -> IpAddr {
    IpAddr::from([127, 77, net, host])
}

/// Three hosts, one rail each, on 127.77.`net`.1–3.
fn plan(net: u8) -> topology::Pod {
    let hosts: Vec<serde_json::Value> = (1..=3u8)
        .map(|i| {
            serde_json::json!({
                "name": format!("h{i}"),
                "rails": [{"device": format!("soft:{}", ip(net, i)), "tor": "tor0"}],
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({"pairs": "rail-aligned", "hosts": hosts})).unwrap()
}

const PORT: u16 = 17946;

fn start(net: u8, key: Option<PodKey>) -> Vec<PodAgent> {
    let agents = start_only(net, key, &[0, 1, 2]);
    let t0 = Instant::now();
    while !agents.iter().all(PodAgent::all_alive) {
        assert!(t0.elapsed() < Duration::from_secs(20), "the pod did not form");
        std::thread::sleep(Duration::from_millis(50));
    }
    agents
}

/// The agents of hosts `which` only.
fn start_only(net: u8, key: Option<PodKey>, which: &[usize]) -> Vec<PodAgent> {
    let pod = plan(net);
    which
        .iter()
        .map(|&me| {
            let mut cfg = AgentConfig::new(pod.clone(), me);
            cfg.control_port = PORT;
            cfg.probe.large = 0;
            cfg.key = key.clone();
            PodAgent::start(cfg, Arc::new(NoObserver)).expect("an agent")
        })
        .collect()
}

/// Announces of host 1 as an attacker makes them: its own membership with host 1's number,
/// `incarnation`, and `addrs`, joining hosts 0 and 2.
fn forged_announces(net: u8, incarnation: u64, addrs: Vec<SocketAddr>) -> Vec<Vec<u8>> {
    let t0 = Instant::now();
    let id = Id { host: 1, incarnation, boot: 0, addrs, qpns: vec![] };
    let mut m = Membership::new(id, 3, Timeouts::default(), 7, t0);
    let seed = |h: u16, i: u8| Id {
        host: h,
        incarnation: 0,
        boot: 0,
        addrs: vec![SocketAddr::new(ip(net, i), PORT)],
        qpns: vec![],
    };
    m.join(&[seed(0, 1), seed(2, 3)], t0).unwrap();
    std::iter::from_fn(|| m.poll_transmit().map(|(_, d)| d)).collect()
}

/// Sends `frames` to hosts 0 and 2 from `from`, every 20 ms for `for_`.
fn flood(from: &UdpSocket, net: u8, frames: &[Vec<u8>], for_: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < for_ {
        for f in frames {
            for i in [1, 3] {
                let _ = from.send_to(f, SocketAddr::new(ip(net, i), PORT));
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Host 1 is alive at hosts 0 and 2, at an incarnation its own clock could have made.
fn host1_stands(agents: &[PodAgent]) {
    let ceiling = unix_us() / 1000 + pod::member::MAX_INCARNATION_AHEAD_MS;
    for a in [&agents[0], &agents[2]] {
        let s = a.status();
        let m = &s.members[1];
        assert_eq!(m.health, Health::Alive, "{}: host 1 is {:?}", s.host, m.health);
        assert!(m.incarnation <= ceiling, "{}: host 1 at incarnation {}", s.host, m.incarnation);
        assert!(s.findings.is_empty(), "{}: {:?}", s.host, s.findings);
        assert!(s.refused.total() > 0, "{}: nothing counted as refused", s.host);
    }
}

#[test]
fn forged_announces_from_outside_the_plan_or_past_the_clock_take_no_host_down() {
    let net = 1;
    let agents = start(net, None);
    assert!(!agents[0].status().authenticated);
    let outside = UdpSocket::bind((ip(net, 99), 0)).unwrap();
    outside.set_nonblocking(true).unwrap();
    let victim = SocketAddr::new(ip(net, 99), outside.local_addr().unwrap().port());
    // The highest incarnation, answers to go to the attacker's (or a victim's) address,
    // 100 times over: the bare datagrams foca reads, and the same sealed as host 1.
    let mut open = Sealer::new(Purpose::Membership, None, 1, 3);
    let bare = forged_announces(net, u64::MAX - 1, vec![victim; 100]);
    let sealed: Vec<Vec<u8>> = bare.iter().map(|d| open.seal(d, unix_us())).collect();
    let before = agents[0].status().cost.control_bytes;
    flood(&outside, net, &[bare.clone(), sealed].concat(), Duration::from_secs(2));
    // From host 1's own address (another port), with the plan's addresses but an
    // incarnation an hour past the clock: an insider without the secret.
    let inside = UdpSocket::bind((ip(net, 2), 0)).unwrap();
    let home = vec![SocketAddr::new(ip(net, 2), PORT)];
    let ahead = forged_announces(net, unix_us() / 1000 + 3_600_000, home);
    let ahead: Vec<Vec<u8>> = ahead.iter().map(|d| open.seal(d, unix_us())).collect();
    flood(&inside, net, &ahead, Duration::from_secs(2));
    std::thread::sleep(Duration::from_secs(1));
    host1_stands(&agents);
    // Nothing went to the address the datagrams named; membership traffic did not grow.
    let mut buf = [0u8; 2048];
    assert!(outside.recv_from(&mut buf).is_err(), "an agent answered toward a non-plan address");
    let spent = agents[0].status().cost.control_bytes - before;
    assert!(spent < 200_000, "host 0 sent {spent} membership bytes in 5 s of attack");
}

#[test]
fn with_the_pods_secret_nothing_unsealed_or_forged_is_believed() {
    let net = 2;
    let key = PodKey::new([7; 32]);
    let agents = start(net, Some(key));
    assert!(agents[0].status().authenticated);
    // From host 1's own address: a datagram foca reads, one sealed without a key, one sealed
    // with another secret's key, all claiming an incarnation the host could have.
    let inside = UdpSocket::bind((ip(net, 2), 0)).unwrap();
    let home = vec![SocketAddr::new(ip(net, 2), PORT)];
    let bare = forged_announces(net, unix_us() / 1000 + 60_000, home);
    let mut unkeyed = Sealer::new(Purpose::Membership, None, 1, 3);
    let mut other = Sealer::new(Purpose::Membership, Some(&PodKey::new([8; 32])), 1, 3);
    let mut frames = bare.clone();
    frames.extend(bare.iter().map(|d| unkeyed.seal(d, unix_us())));
    frames.extend(bare.iter().map(|d| other.seal(d, unix_us())));
    flood(&inside, net, &frames, Duration::from_secs(3));
    std::thread::sleep(Duration::from_secs(1));
    host1_stands(&agents);
    let r = agents[0].status().refused;
    assert!(r.unauthenticated > 0 && r.bad_tag > 0 && r.malformed > 0, "{r:?}");
}

#[test]
fn an_announce_is_answered_with_one_datagram() {
    // Host 1's agent does not run: whoever holds its control address hears what the others
    // send it.
    let net = 3;
    let agents = start_only(net, None, &[0, 2]);
    let host1 = UdpSocket::bind((ip(net, 2), PORT)).unwrap();
    host1.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut open = Sealer::new(Purpose::Membership, None, 1, 3);
    let mut reader = Sealer::new(Purpose::Membership, None, 1, 3);
    let feeds = |sock: &UdpSocket, reader: &mut Sealer, for_: Duration| {
        let t0 = Instant::now();
        let mut n = 0;
        let mut buf = [0u8; 65536];
        while t0.elapsed() < for_ {
            let Ok(len) = sock.recv(&mut buf) else { continue };
            // Every datagram, copies included (not through a seal's replay check).
            if !pod::seal::is_sealed(&buf[..len]) || reader.keyed() {
                continue;
            }
            let body = &buf[pod::seal::HEADER..len];
            let h = foca::Codec::<Id>::decode_header(&mut foca::PostcardCodec, body);
            n += usize::from(h.is_ok_and(|h| matches!(h.message, foca::Message::Feed)));
        }
        n
    };
    let home = vec![SocketAddr::new(ip(net, 2), PORT)];
    let mut sent = 0;
    for _ in 0..5 {
        let announces = forged_announces(net, unix_us() / 1000, home.clone());
        let to_host0: Vec<&Vec<u8>> = announces.iter().take(1).collect();
        for a in to_host0 {
            host1.send_to(&open.seal(a, unix_us()), SocketAddr::new(ip(net, 1), PORT)).unwrap();
            sent += 1;
        }
        std::thread::sleep(Duration::from_millis(700));
    }
    let got = feeds(&host1, &mut reader, Duration::from_millis(500));
    drop(agents);
    assert!((1..=sent).contains(&got), "{sent} announces to host 0 drew {got} answers");
}

/// A UD QP on a soft device at `addr`, receives posted.
struct Ud {
    _ctx: verbs::Context,
    cq: verbs::CompletionQueue,
    qp: verbs::QueuePair,
    mr: verbs::MemoryRegion,
}

impl Ud {
    fn open(addr: IpAddr) -> Ud {
        use verbs::*;
        let ctx = providers::open(&format!("soft:{addr}"), &providers::ContextOptions::default())
            .unwrap();
        let cq = ctx.create_cq(64, None).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let caps = QpCaps { max_send_wr: 16, max_recv_wr: 16, max_inline_data: 0 };
        let qp = pd.create_qp(&QpInit { caps, ..QpInit::new(QpType::Ud, &cq) }).unwrap();
        qp.modify(&ModifyQp {
            state: Some(QpState::Init),
            qkey: Some(QKey(pod::agent::QKEY)),
            ..Default::default()
        })
        .unwrap();
        let c = Connect::new(Path::new(addr, Qpn::new(0)), Psn::new(0), Psn::new(0));
        qp.connect(&c).unwrap();
        let mr = pd.reg_mr(8 * 4096, Access::LOCAL_WRITE).unwrap();
        for i in 0..4u64 {
            qp.post_recv(RecvWr::new(i).sge(mr.addr() + 4096 * (i + 4), 4096, mr.lkey())).unwrap();
        }
        Ud { _ctx: ctx, cq, qp, mr }
    }

    fn send(&self, bytes: &[u8], to: IpAddr, qpn: u32) {
        use verbs::*;
        self.mr.write(0, bytes).unwrap();
        let mut wr =
            SendWr::new(99, SendOp::Send).sge(self.mr.addr(), bytes.len() as u32, self.mr.lkey());
        wr.ud = Some(UdDest::new(to, Qpn::new(qpn), QKey(pod::agent::QKEY)));
        self.qp.post_send(wr).unwrap();
    }

    /// Receives within `for_`.
    fn received(&self, for_: Duration) -> usize {
        let t0 = Instant::now();
        let mut wcs = [verbs::empty_wc(); 8];
        let mut n = 0;
        while t0.elapsed() < for_ {
            let k = self.cq.poll(&mut wcs);
            n += wcs[..k].iter().filter(|w| w.opcode == verbs::WcOpcode::Recv).count();
            std::thread::sleep(Duration::from_millis(5));
        }
        n
    }
}

#[test]
fn a_probe_is_never_reflected_to_a_third_party() {
    let net = 4;
    let agents = start(net, None);
    let attacker = Ud::open(ip(net, 99));
    let victim = Ud::open(ip(net, 98));
    let qpn = agents[0].probe_qpns()[0];
    // A probe that names the victim as the prober (its address and QP), and one that names a
    // plan host's address but comes from elsewhere.
    for (addr, to_qpn) in
        [(ip(net, 98), victim.qp.qpn().get()), (ip(net, 3), victim.qp.qpn().get())]
    {
        let p = pod::probe::Packet {
            reply: false,
            large: false,
            host: 2,
            src_rail: 0,
            dst_rail: 0,
            port: 0xf000,
            seq: 1,
            t1: 0,
            t2: 0,
            t3: 0,
            qpn: to_qpn,
            addr,
            cookie: 0,
        };
        let mut b = [0u8; pod::probe::HEADER];
        p.write(&mut b).unwrap();
        for _ in 0..10 {
            attacker.send(&b, ip(net, 1), qpn);
        }
    }
    assert_eq!(victim.received(Duration::from_millis(500)), 0, "a probe was reflected");
    let r = agents[0].status().refused;
    assert!(r.unknown_sender >= 20, "{r:?}");
}

#[test]
fn forged_channel_handshakes_allocate_nothing() {
    let net = 5;
    let agents = start(net, None);
    let attacker = Ud::open(ip(net, 99));
    let qpn = agents[0].probe_qpns()[0];
    let mut seal = Sealer::new(Purpose::Hello, None, 2, 3);
    // Host 2 (at its plan address, as the datagram says) asks for a connection, again and
    // again with a new QP number: bare, as the handshake used to go, and sealed.
    for q in 0..300u32 {
        let hello = serde_json::json!({"Connect": {
            "from": 2, "inc": 1, "rail": 0, "peer_rail": 0, "port": 0xf000, "qpn": 1000 + q,
            "psn": 1, "addr": ip(net, 3).to_string(), "probe_qpn": attacker.qp.qpn().get(),
        }});
        let json = serde_json::to_vec(&hello).unwrap();
        let bare = [&b"PDHL"[..], &json].concat();
        attacker.send(&bare, ip(net, 1), qpn);
        attacker.send(&seal.seal(&json, unix_us()), ip(net, 1), qpn);
        if q % 8 == 7 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let s = agents[0].status();
    assert_eq!(s.channels.accepted, 0, "forged handshakes were given QPs");
    assert!(s.refused.unknown_sender > 0, "{:?}", s.refused);
}

#[test]
fn hosts_of_the_plan_never_heard_from_are_a_finding() {
    // Host 0 alone: the two others never start.
    let agents = start_only(6, None, &[0]);
    std::thread::sleep(pod::agent::NEVER_HEARD_AFTER + Duration::from_secs(1));
    let s = agents[0].status();
    let down: Vec<&str> = s
        .findings
        .iter()
        .filter(|f| f.kind == "host-down" && f.evidence.contains("never heard from"))
        .map(|f| f.component.as_str())
        .collect();
    assert_eq!(down, ["h2", "h3"], "{:?}", s.findings);
}

#[test]
fn a_rail_on_another_udp_port_is_refused_not_watched_as_down_forever() {
    let mut pod = plan(7);
    pod.hosts[1].rails[0].device = format!("soft:{}:5000", ip(7, 2));
    let e = PodAgent::start(AgentConfig::new(pod, 0), Arc::new(NoObserver)).unwrap_err();
    assert!(e.to_string().contains("without a port"), "{e}");
}

#[test]
fn a_lone_agent_in_a_plan_of_ten_thousand_spends_little_on_the_missing() {
    // Host 0 on loopback; 9,999 others at loopback addresses nothing answers from (a
    // datagram to each leaves: it is counted).
    let hosts: Vec<serde_json::Value> = (0..10_000u32)
        .map(|i| {
            let dev = if i == 0 {
                format!("soft:{}", ip(8, 1))
            } else {
                format!("soft:127.80.{}.{}", i / 250, i % 250 + 1)
            };
            serde_json::json!({"name": format!("h{i}"), "rails": [{"device": dev, "tor": format!("t{}", i / 16)}]})
        })
        .collect();
    let pod: topology::Pod =
        serde_json::from_value(serde_json::json!({"pairs": "rail-aligned", "hosts": hosts}))
            .unwrap();
    let mut cfg = AgentConfig::new(pod, 0);
    cfg.control_port = PORT;
    let a = PodAgent::start(cfg, Arc::new(NoObserver)).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let (b0, t0) = (a.status().cost.control_bytes, Instant::now());
    std::thread::sleep(Duration::from_secs(4));
    let spent = a.status().cost.control_bytes - b0;
    let per_s = spent as f64 / t0.elapsed().as_secs_f64();
    // 64 announces a second at most (two copies each): ~20 KB/s, not a copy to each of
    // 9,999 hosts every second (~3 MB/s).
    assert!(per_s < 100_000.0, "{per_s:.0} membership bytes/s toward hosts that never answer");
}
