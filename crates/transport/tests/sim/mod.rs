//! A deterministic network for transport tests: endpoints exchange packets in virtual time
//! through a seeded fault model. Packets travel with real IPv4 headers and ICRCs, so
//! corruption is caught the way a NIC catches it. The seed is printed when a test fails.

#![allow(dead_code, unreachable_pub)]

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use transport::{
    Access, CqId, Endpoint, EndpointConfig, Instant, ModifyQp, MrInfo, Mtu, Path, PdId, QKey,
    QpCaps, QpState, QpType, Qpn, RecvMeta, Transmit, VecMemory,
};
use wire::Psn;
use wire::icrc::PseudoHeader;

/// A small, fast, seeded generator (xorshift64*).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// What the network does to packets.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    /// Drop probability.
    pub loss: f64,
    /// Probability that a packet is held back by up to `reorder_by` extra.
    pub reorder: f64,
    pub reorder_by: Duration,
    /// Probability that a packet is delivered twice.
    pub dup: f64,
    /// Probability that one bit of a packet is flipped.
    pub corrupt: f64,
    /// Probability that a packet arrives CE-marked.
    pub ce: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Drop everything (a vanished peer).
    pub partition: bool,
    /// Each node sends IPv4 GSO runs as podnet's soft device does (of two packets or more,
    /// where the device makes them of four or more), and they arrive whole, as
    /// over loopback: consecutive packets to one peer, the first one whose length its
    /// headers give (`wire::roce::len_from_headers`), of its size but the last (at most 64,
    /// 65,000 bytes), one datagram whose packet k carries the IP Identification of the first
    /// plus k. The faults apply to the datagram.
    pub gso: bool,
}

impl Faults {
    /// `loss`, plus 2 % reordering (up to 30 µs), 1 % duplication and 0.5 % corruption.
    pub fn lossy(loss: f64) -> Faults {
        Faults {
            loss,
            reorder: 0.02,
            reorder_by: Duration::from_micros(30),
            dup: 0.01,
            corrupt: 0.005,
            ce: 0.0,
            delay: Duration::from_micros(5),
            partition: false,
            gso: false,
        }
    }
}

struct InFlight {
    at: Instant,
    seq: u64,
    to: usize,
    ip: [u8; 20],
    src_port: u16,
    ecn: u8,
    payload: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// Endpoints on a simulated wire.
pub struct Net {
    pub now: Instant,
    pub nodes: Vec<Endpoint<VecMemory>>,
    pub faults: Faults,
    pub rng: Rng,
    pub seed: u64,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    ip_id: u16,
    /// Packets put on the wire, and dropped by the fault model.
    pub sent: u64,
    pub dropped: u64,
    /// Datagrams that held a GSO run of more than one packet ([`Faults::gso`]).
    pub runs: u64,
    /// Node `.0`: let `.1` more packets through, then drop the next `.2`, whatever the fault
    /// model says.
    pub drop_next: Option<(usize, u32, u32)>,
    /// Every packet put on the wire: (from, to, RoCE bytes), for inspection.
    pub log: Vec<(usize, usize, Vec<u8>)>,
    /// With `keep_log`, every datagram the fault model dropped: (when, from, to, RoCE bytes).
    pub drop_log: Vec<(Instant, usize, usize, Vec<u8>)>,
    /// The UDP source port of each packet in `log`.
    pub log_ports: Vec<u16>,
    pub keep_log: bool,
    /// A capture point at one node's port: what it sends as it leaves (before the network's
    /// faults), what it receives as it arrives (after them, CE marks in its IP header).
    pub tap: Option<Tap>,
}

/// What a capture point at node `node` saw: (time, raw IPv4 frame: IP, UDP, RoCE).
#[derive(Debug, Default)]
pub struct Tap {
    pub node: usize,
    pub frames: Vec<(Instant, Vec<u8>)>,
}

/// A raw IPv4 frame of `payload` (BTH … ICRC) under IP header `ip`, its ECN set to `ecn`.
fn raw_frame(ip: &[u8; 20], ecn: u8, src_port: u16, payload: &[u8]) -> Vec<u8> {
    let mut h = *ip;
    h[1] = (h[1] & !3) | (ecn & 3);
    let total = (20 + 8 + payload.len()) as u16;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    wire::frame::set_ipv4_checksum(&mut h);
    let mut f = h.to_vec();
    f.extend_from_slice(&src_port.to_be_bytes());
    f.extend_from_slice(&wire::ROCEV2_UDP_PORT.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

pub fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

impl Net {
    pub fn new(n: usize, seed: u64, faults: Faults) -> Net {
        Net::with_config(n, seed, faults, |_| {})
    }

    /// As [`Net::new`], each node's configuration changed by `f` first.
    pub fn with_config(
        n: usize,
        seed: u64,
        faults: Faults,
        f: impl Fn(&mut EndpointConfig),
    ) -> Net {
        let nodes = (0..n)
            .map(|i| {
                let mut cfg = EndpointConfig::new(ip(i), seed ^ ((i as u64 + 1) * 0x1234_5678));
                f(&mut cfg);
                Endpoint::new(cfg, VecMemory::new())
            })
            .collect();
        Net {
            now: Instant::ZERO,
            nodes,
            faults,
            rng: Rng::new(seed),
            seed,
            queue: BinaryHeap::new(),
            seq: 0,
            ip_id: 0,
            sent: 0,
            dropped: 0,
            runs: 0,
            drop_next: None,
            log: Vec::new(),
            log_ports: Vec::new(),
            drop_log: Vec::new(),
            keep_log: false,
            tap: None,
        }
    }

    fn node_of(&self, addr: IpAddr) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| ip(i) == addr)
    }

    /// The IPv4 header of a packet from node `from` to node `to`, its ICRC sealed into
    /// `payload` (BTH … ICRC); `None` off IPv4.
    fn seal(
        &mut self,
        from: usize,
        to: usize,
        tos: u8,
        (src_port, dst_port): (u16, u16),
        payload: &mut [u8],
    ) -> Option<[u8; 20]> {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (ip(from), ip(to)) else { return None };
        self.ip_id = self.ip_id.wrapping_add(1);
        let h = PseudoHeader::ipv4(src, dst, self.ip_id, true, src_port, dst_port).with_tos(tos);
        h.seal(payload).expect("seal");
        let h = h.for_payload(payload.len());
        Some(h.ip_header().try_into().expect("20 bytes"))
    }

    /// Hands node `to` a packet as if node `from` had sent it now (`payload`: BTH … ICRC,
    /// the ICRC recomputed here), bypassing the fault model; what it answers goes on the
    /// wire at once.
    pub fn inject(&mut self, from: usize, to: usize, payload: Vec<u8>) {
        self.inject_quietly(from, to, payload);
        self.transmit();
    }

    /// [`Net::inject`], leaving what `to` answers queued there (to be sent with what the
    /// next packet brings).
    pub fn inject_quietly(&mut self, from: usize, to: usize, mut payload: Vec<u8>) {
        // Any source port: a RoCEv2 receiver does not look at it.
        let ports = (49152, wire::ROCEV2_UDP_PORT);
        let h = self.seal(from, to, 0, ports, &mut payload).expect("IPv4 nodes");
        let meta = RecvMeta {
            src: ip(from),
            dst: ip(to),
            src_port: ports.0,
            dst_port: ports.1,
            ecn: 0,
            ip_header: Some(&h),
        };
        self.nodes[to].handle_datagram(self.now, &meta, &payload);
    }

    /// Moves every ready packet onto the wire.
    fn transmit(&mut self) {
        for i in 0..self.nodes.len() {
            let mut ready: Vec<Transmit> =
                std::iter::from_fn(|| self.nodes[i].poll_transmit(self.now)).collect();
            let mut at = 0;
            while at < ready.len() {
                let n = if self.faults.gso { gso_run(&ready[at..]) } else { 1 };
                self.put_on_wire(i, &mut ready[at..at + n]);
                at += n;
            }
        }
    }

    /// Seals `run` (packets of one GSO run, or one packet) and puts it on the wire as one
    /// datagram, through the fault model.
    fn put_on_wire(&mut self, i: usize, run: &mut [Transmit]) {
        let (dst, tos, src_port) = (run[0].dst, run[0].tos, run[0].src_port);
        let Some(to) = self.node_of(dst) else { return };
        let mut payload = Vec::new();
        let mut first = None;
        for u in run.iter_mut() {
            let mut p = std::mem::take(&mut u.payload);
            let Some(h) = self.seal(i, to, u.tos, (u.src_port, u.dst_port), &mut p) else {
                return;
            };
            first.get_or_insert(h);
            self.sent += 1;
            if self.keep_log {
                self.log.push((i, to, p.clone()));
                self.log_ports.push(u.src_port);
            }
            if payload.is_empty() {
                payload = p;
            } else {
                payload.extend_from_slice(&p);
            }
        }
        let Some(h) = first else { return };
        if let Some(t) = &mut self.tap
            && t.node == i
        {
            t.frames.push((self.now, raw_frame(&h, run[0].tos & 3, src_port, &payload)));
        }
        if run.len() > 1 {
            self.runs += 1;
        }
        if let Some((from, skip, n)) = self.drop_next
            && from == i
        {
            if skip > 0 {
                self.drop_next = Some((from, skip - 1, n));
            } else {
                self.drop_next = if n > 1 { Some((from, 0, n - 1)) } else { None };
                self.dropped += 1;
                return;
            }
        }
        let f = self.faults;
        if f.partition || self.rng.chance(f.loss) {
            self.dropped += 1;
            if self.keep_log {
                self.drop_log.push((self.now, i, to, payload));
            }
            return;
        }
        let copies = if self.rng.chance(f.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut p = payload.clone();
            if self.rng.chance(f.corrupt) {
                let bit = self.rng.below(p.len() as u64 * 8);
                p[(bit / 8) as usize] ^= 1 << (bit % 8);
            }
            let mut at = self.now + f.delay;
            if self.rng.chance(f.reorder) {
                at = at + Duration::from_nanos(self.rng.below(f.reorder_by.as_nanos() as u64 + 1));
            }
            let ecn = if self.rng.chance(f.ce) { 3 } else { tos & 3 };
            self.seq += 1;
            self.queue.push(Reverse(InFlight {
                at,
                seq: self.seq,
                to,
                ip: h,
                src_port,
                ecn,
                payload: p,
            }));
        }
    }

    /// Lets `d` of virtual time pass, delivering whatever falls due.
    pub fn advance(&mut self, d: Duration) {
        let target = self.now + d;
        self.run_until(d, |net| net.now >= target);
        self.now = self.now.max(target);
    }

    /// Runs until `done` holds or nothing is left to happen; false if `limit` of virtual time
    /// passed first.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            self.transmit();
            let mut quiet = 0;
            let next = loop {
                let next_packet = self.queue.peek().map(|r| r.0.at);
                let next_timer = self.nodes.iter().filter_map(|n| n.poll_timeout()).min();
                match (next_packet, next_timer) {
                    (Some(a), Some(b)) => break a.min(b),
                    (Some(t), None) | (None, Some(t)) => break t,
                    (None, None) => {
                        // Quiet: the workload may have work to post now that it has reaped.
                        if done(self) {
                            return true;
                        }
                        let before = self.sent;
                        self.transmit();
                        if self.sent == before {
                            quiet += 1;
                            if quiet >= 3 {
                                return false;
                            }
                        } else {
                            quiet = 0;
                        }
                    }
                }
            };
            if next > end {
                return false;
            }
            self.now = self.now.max(next);
            while self.queue.peek().is_some_and(|r| r.0.at <= self.now) {
                let Some(Reverse(p)) = self.queue.pop() else { break };
                if let Some(t) = &mut self.tap
                    && t.node == p.to
                {
                    t.frames.push((self.now, raw_frame(&p.ip, p.ecn, p.src_port, &p.payload)));
                }
                let src = IpAddr::V4(Ipv4Addr::new(p.ip[12], p.ip[13], p.ip[14], p.ip[15]));
                let dst = IpAddr::V4(Ipv4Addr::new(p.ip[16], p.ip[17], p.ip[18], p.ip[19]));
                let meta = RecvMeta {
                    src,
                    dst,
                    src_port: p.src_port,
                    dst_port: 4791,
                    ecn: p.ecn,
                    ip_header: Some(&p.ip),
                };
                self.nodes[p.to].handle_datagram(self.now, &meta, &p.payload);
            }
            for n in &mut self.nodes {
                n.handle_timeout(self.now);
            }
        }
    }
}

/// How many of `ready`'s head packets form one IPv4 GSO run, as podnet's soft device groups
/// them (at least 1).
fn gso_run(ready: &[Transmit]) -> usize {
    let t = &ready[0];
    let seg = t.payload.len();
    if !t.payload.first().is_some_and(|&b| wire::Opcode(b).len_in_headers()) {
        return 1;
    }
    let (mut n, mut bytes) = (1, seg);
    while let Some(u) = ready.get(n) {
        let len = u.payload.len();
        if n == 64
            || u.dst != t.dst
            || u.tos != t.tos
            || u.src_port != t.src_port
            || ready[n - 1].payload.len() != seg
            || len > seg
            || bytes + len > 65_000
        {
            break;
        }
        bytes += len;
        n += 1;
    }
    n
}

/// One side of a connection: its QP, CQs, PD and a registered buffer.
#[derive(Debug, Clone, Copy)]
pub struct Side {
    pub node: usize,
    pub qpn: Qpn,
    pub cq: CqId,
    pub pd: PdId,
    pub mr: MrInfo,
}

pub const BUF_ADDR: u64 = 0x7f00_0000_0000;

/// Sets up a QP of `qp_type` on node `node` with a `buf_len`-byte buffer.
pub fn side(net: &mut Net, node: usize, qp_type: QpType, buf_len: usize) -> Side {
    let n = &mut net.nodes[node];
    let pd = n.alloc_pd().unwrap();
    let cq = n.create_cq();
    let id = n.memory_mut().add(buf_len);
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = n.register_mr(pd, id, BUF_ADDR, buf_len as u64, access).unwrap();
    let qpn = n
        .create_qp(
            pd,
            qp_type,
            cq,
            cq,
            QpCaps { max_send_wr: 256, max_recv_wr: 1024, max_inline_data: 256 },
        )
        .unwrap();
    let m = ModifyQp {
        state: Some(QpState::Init),
        access: Some(access),
        qkey: Some(QKey(0x1111_1111)),
        ..Default::default()
    };
    n.modify_qp(qpn, &m).unwrap();
    Side { node, qpn, cq, pd, mr }
}

/// Connection parameters.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    pub mtu: Mtu,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub psn_a: u32,
    pub psn_b: u32,
    /// The GRH flow label both sides set (0: the UDP source port follows from the QPNs).
    pub flow_label: u32,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            mtu: Mtu::Mtu4096,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            psn_a: 0x100,
            psn_b: 0xff_fff0,
            flow_label: 0,
        }
    }
}

/// Brings two sides to RTS, connected to each other.
pub fn connect(net: &mut Net, a: &Side, b: &Side, p: Params) {
    for (x, y, sq, rq) in [(a, b, p.psn_a, p.psn_b), (b, a, p.psn_b, p.psn_a)] {
        let n = &mut net.nodes[x.node];
        let rtr = ModifyQp {
            state: Some(QpState::Rtr),
            path_mtu: Some(p.mtu),
            dest: Some(Path { flow_label: p.flow_label, ..Path::new(ip(y.node), y.qpn) }),
            rq_psn: Some(Psn::new(rq)),
            max_dest_rd_atomic: Some(p.max_rd_atomic),
            min_rnr_timer: Some(p.min_rnr_timer),
            ..Default::default()
        };
        n.modify_qp(x.qpn, &rtr).unwrap();
        let rts = ModifyQp {
            state: Some(QpState::Rts),
            sq_psn: Some(Psn::new(sq)),
            timeout: Some(p.timeout),
            retry_cnt: Some(p.retry_cnt),
            rnr_retry: Some(p.rnr_retry),
            max_rd_atomic: Some(p.max_rd_atomic),
            ..Default::default()
        };
        n.modify_qp(x.qpn, &rts).unwrap();
    }
}

/// Brings a UD QP to RTS.
pub fn ud_ready(net: &mut Net, s: &Side) {
    let n = &mut net.nodes[s.node];
    n.modify_qp(
        s.qpn,
        &ModifyQp { state: Some(QpState::Rtr), path_mtu: Some(Mtu::Mtu4096), ..Default::default() },
    )
    .unwrap();
    n.modify_qp(
        s.qpn,
        &ModifyQp { state: Some(QpState::Rts), sq_psn: Some(Psn::new(0)), ..Default::default() },
    )
    .unwrap();
}

/// The deterministic payload of message `i` (its index is in the first bytes when it fits).
pub fn pattern(seed: u64, i: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0x9e37_79b9));
    let mut v: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
    for (k, b) in i.to_le_bytes().iter().enumerate().take(len) {
        v[k] = *b;
    }
    v
}
