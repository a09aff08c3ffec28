//! The pod channels' I/O: an RC QP per route hop this host sends on (it connects it with a
//! handshake sent between the two hosts' probe UD QPs from the hop's own UDP source port, so
//! the handshake takes the ECMP path the hop's RC traffic will), an RC QP per hop another
//! host sends to this one on (accepted on request), the channels' frames posted as SENDs
//! along the route table's routes, frames for other hosts relayed, QP failures taken as route
//! failures.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use topology::{Dev, Pod};
use verbs::{
    Access, MemoryRegion, ModifyQp, Path, Psn, QpCaps, QpInit, QpState, QpType, Qpn, QueuePair,
    RecvWr, SendOp, SendWr, WcStatus, WorkCompletion,
};

use super::RailIo;
use crate::channel::{Channels, Delivered, Frame, Undeliverable};
use crate::probe;
use crate::route::{Change, Route, RouteTable};
use crate::seal::{PodKey, Purpose, RefusedCounts, Sealer, unix_us};

fn hello_bytes(h: &Hello) -> Vec<u8> {
    serde_json::to_vec(h).unwrap_or_default()
}

/// The largest message a channel carries, bytes.
pub const MAX_MESSAGE: usize = 16 * 1024;
/// A frame's buffer.
const SLOT: usize = MAX_MESSAGE + crate::channel::HEADER;
/// Sends in flight per connection (and the channels' window per peer).
pub const WINDOW: usize = 32;
/// Receives posted per accepted connection.
const RECVS: usize = 2 * WINDOW + 8;
/// A work request id of a channel QP has this bit (the probe QP's do not).
pub(crate) const TAG: u64 = 1 << 63;
/// A connection request unanswered this long is sent again; after 10 tries the hop fails.
const RETRY: Duration = Duration::from_millis(200);

/// Connections accepted from one peer, at most (a route hop each: its rails × the ports
/// routes take; a peer asking for more has its oldest dropped).
pub const MAX_ACCEPTED_PER_PEER: usize = 16;

/// The handshake, between the probe UD QPs.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Hello {
    /// Host `from` (incarnation `inc`, at `addr`, probe QP `probe_qpn`) asks to send from its
    /// `rail` QP `qpn` to this host's `peer_rail`, from UDP source port `port`.
    Connect {
        from: u16,
        inc: u64,
        rail: u8,
        peer_rail: u8,
        port: u16,
        qpn: u32,
        psn: u32,
        addr: IpAddr,
        probe_qpn: u32,
    },
    /// Accepted: this host's QP for it.
    Accept { from: u16, rail: u8, port: u16, qpn: u32, psn: u32, for_qpn: u32 },
}

/// Sends a datagram from a rail's probe QP: (rail, bytes, to, its QPN, UDP source port).
pub(crate) type UdSend<'a> = &'a dyn Fn(usize, &[u8], IpAddr, u32, u16) -> bool;

/// A route hop this host sends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct HopKey {
    pub(crate) next: usize,
    pub(crate) rail: usize,
    pub(crate) peer_rail: usize,
    pub(crate) port: u16,
}

enum ConnState {
    Connecting { since: Instant, last_try: Instant, tries: u32 },
    Up,
    Failed,
}

struct Conn {
    id: u32,
    qp: QueuePair,
    psn: u32,
    mr: MemoryRegion,
    free: Vec<usize>,
    state: ConnState,
    backlog: VecDeque<Vec<u8>>,
}

struct Accepted {
    /// When it was accepted (the oldest of a peer's goes first).
    at: Instant,
    qp: QueuePair,
    mr: MemoryRegion,
    /// (host, incarnation, its QPN): a repeated request gets the same answer.
    key: (u16, u64, u32),
    psn: u32,
}

/// A route change, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RouteEvent {
    /// Wall clock, ms since the Unix epoch.
    pub unix_ms: u64,
    /// The peer.
    pub peer: String,
    /// The route left.
    pub from: Option<Route>,
    /// The route taken.
    pub to: Option<Route>,
    /// Why.
    pub why: String,
}

/// The channels and their QPs.
pub(crate) struct ChanIo {
    me: usize,
    inc: u64,
    pub(crate) channels: Channels,
    pub(crate) table: RouteTable,
    conns: BTreeMap<HopKey, Conn>,
    by_id: HashMap<u32, HopKey>,
    next_id: u32,
    accepted: HashMap<u32, Accepted>,
    forward: VecDeque<Frame>,
    pub(crate) delivered: VecDeque<Delivered>,
    pub(crate) undeliverable: Vec<Undeliverable>,
    pub(crate) routes: Vec<RouteEvent>,
    pub(crate) relayed: u64,
    /// Every peer's probe QPNs by rail (from the membership).
    pub(crate) probe_qpns: BTreeMap<usize, Vec<u32>>,
    /// The life of each peer the membership knows alive: a handshake from another is
    /// refused.
    boots: BTreeMap<u16, u64>,
    /// Handshakes sealed and opened (authenticated with the pod's secret where it has one).
    seal: Sealer,
    /// Handshakes refused: not sealed, forged, played back, not from the plan host at its
    /// address, or from a life of the host the membership does not know.
    pub(crate) refused: RefusedCounts,
}

fn psn() -> u32 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos()))
        & 0xff_ffff
}

impl ChanIo {
    pub(crate) fn new(
        pod: &Pod,
        me: usize,
        inc: u64,
        home_port: u16,
        key: Option<&PodKey>,
    ) -> ChanIo {
        ChanIo {
            boots: BTreeMap::new(),
            seal: Sealer::new(Purpose::Hello, key, me as u16, pod.hosts.len()),
            refused: RefusedCounts::default(),
            me,
            inc,
            channels: Channels::new(me as u16, inc, WINDOW, Duration::from_millis(400)),
            table: RouteTable::new(pod, me, home_port),
            conns: BTreeMap::new(),
            by_id: HashMap::new(),
            next_id: 1,
            accepted: HashMap::new(),
            forward: VecDeque::new(),
            delivered: VecDeque::new(),
            undeliverable: Vec::new(),
            routes: Vec::new(),
            relayed: 0,
            probe_qpns: BTreeMap::new(),
        }
    }

    /// `peer` is known in its life `boot`: an older life's unacknowledged messages are
    /// undeliverable.
    pub(crate) fn peer_up(&mut self, peer: u16, boot: u64) {
        self.boots.insert(peer, boot);
        // Connections from an earlier life of it go.
        self.accepted.retain(|_, a| a.key.0 != peer || a.key.1 == boot);
        self.channels.peer_up(peer, boot);
        self.keep_lost();
    }

    /// `peer` is given up: its unacknowledged messages are undeliverable.
    pub(crate) fn peer_down(&mut self, peer: u16) {
        // Its connections to this host go with it (a new life asks again).
        self.boots.remove(&peer);
        self.accepted.retain(|_, a| a.key.0 != peer);
        self.channels.peer_down(peer);
        self.keep_lost();
    }

    /// Moves what the channels reported undeliverable to where the agent takes it from.
    fn keep_lost(&mut self) {
        let lost = self.channels.take_undeliverable();
        self.undeliverable.extend(lost);
    }

    /// Takes route changes into account: the channels of peers whose route changed send
    /// everything in flight again.
    pub(crate) fn apply(&mut self, pod: &Pod, changes: Vec<Change>, unix_ms: u64) {
        for c in changes {
            self.channels.route_changed(c.peer as u16);
            self.routes.push(RouteEvent {
                unix_ms,
                peer: pod.hosts[c.peer].name.clone(),
                from: c.from,
                to: c.to,
                why: c.why,
            });
        }
        self.keep_lost();
    }

    /// When [`ChanIo::pump`] has something to do by itself: a retransmission or a
    /// connection attempt due (`None`: nothing until woken — a message queued, a frame, a
    /// completion or a route change).
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let retry = self.conns.values().filter_map(|c| match c.state {
            ConnState::Connecting { last_try, .. } => Some(last_try + RETRY),
            _ => None,
        });
        retry.chain(self.channels.next_deadline()).min()
    }

    /// Moves frames: the channels' (and those to relay) onto their hops' QPs; asks for the
    /// hops not connected yet.
    pub(crate) fn pump(&mut self, pod: &Pod, rails: &[RailIo], ud: UdSend<'_>, now: Instant) {
        let mut frames: Vec<Frame> = self.forward.drain(..).collect();
        frames.extend(self.channels.poll_frames(now));
        for f in frames {
            let dst = usize::from(f.dst);
            let Some(route) = self.table.route(dst) else { continue };
            let (rail, next, peer_rail, port_) = route.hop(dst);
            let key = HopKey { next, rail, peer_rail, port: port_ };
            if !self.conns.contains_key(&key) {
                if let Some(c) = self.open(rails, key) {
                    self.conns.insert(key, c);
                } else {
                    continue;
                }
            }
            // Acknowledgements first (they free the peer's window), and never dropped.
            if let Some(c) = self.conns.get_mut(&key) {
                if f.ack {
                    c.backlog.push_front(f.encode());
                } else if c.backlog.len() < 4 * WINDOW {
                    c.backlog.push_back(f.encode());
                }
            }
        }
        // Connect, retry, post.
        let mut failed = Vec::new();
        for (key, c) in &mut self.conns {
            match c.state {
                ConnState::Connecting { since, last_try, tries } => {
                    if tries == 0 || now.duration_since(last_try) >= RETRY {
                        if tries >= 10 {
                            c.state = ConnState::Failed;
                            failed.push(*key);
                            continue;
                        }
                        let (Some(rail), Some(to)) = (
                            rails.get(key.rail),
                            probe::rail_addr(pod, Dev { host: key.next, rail: key.peer_rail }),
                        ) else {
                            continue;
                        };
                        let hello = Hello::Connect {
                            from: self.me as u16,
                            inc: self.inc,
                            rail: key.rail as u8,
                            peer_rail: key.peer_rail as u8,
                            port: key.port,
                            qpn: c.qp.qpn().get(),
                            psn: c.psn,
                            addr: rail.addr,
                            probe_qpn: rail.qp.qpn().get(),
                        };
                        let peer_qpn = self
                            .probe_qpns
                            .get(&key.next)
                            .and_then(|q| q.get(key.peer_rail))
                            .copied();
                        if let Some(q) = peer_qpn {
                            let b = self.seal.seal(&hello_bytes(&hello), unix_us());
                            ud(key.rail, &b, to, q, key.port);
                        }
                        c.state = ConnState::Connecting { since, last_try: now, tries: tries + 1 };
                    }
                }
                ConnState::Up => {
                    while !c.backlog.is_empty()
                        && let Some(slot) = c.free.pop()
                    {
                        let Some(b) = c.backlog.pop_front() else { break };
                        let at = slot * SLOT;
                        let mut wr =
                            SendWr::new(TAG | (u64::from(c.id) << 20) | slot as u64, SendOp::Send)
                                .sge(c.mr.addr() + at as u64, b.len() as u32, c.mr.lkey());
                        wr.signaled = true;
                        if c.mr.write(at, &b).is_err() || c.qp.post_send(wr).is_err() {
                            c.free.push(slot);
                            c.state = ConnState::Failed;
                            failed.push(*key);
                            break;
                        }
                    }
                }
                ConnState::Failed => {}
            }
        }
        for key in failed {
            self.hop_failed(key, now);
        }
    }

    /// A hop's QP failed: its peers' routes through it are failed, and it is dropped.
    fn hop_failed(&mut self, key: HopKey, now: Instant) {
        if let Some(c) = self.conns.remove(&key) {
            self.by_id.remove(&c.id);
        }
        for peer in self.table.failed_hop(key.next, key.rail, key.peer_rail, key.port, now) {
            self.channels.route_changed(peer as u16);
        }
    }

    /// A new QP for hop `key` (connecting).
    fn open(&mut self, rails: &[RailIo], key: HopKey) -> Option<Conn> {
        let rail = rails.get(key.rail)?;
        let qp = rc_qp(rail, WINDOW as u32 + 4, 4).ok()?;
        let mr = rail.pd.reg_mr(SLOT * WINDOW, Access::LOCAL_WRITE).ok()?;
        let id = self.next_id;
        self.next_id += 1;
        self.by_id.insert(id, key);
        let now = Instant::now();
        Some(Conn {
            id,
            qp,
            psn: psn(),
            mr,
            free: (0..WINDOW).collect(),
            state: ConnState::Connecting { since: now, last_try: now, tries: 0 },
            backlog: VecDeque::new(),
        })
    }

    /// A sealed handshake datagram arrived on rail `r`'s probe QP from `src` (the address its
    /// IP header names). Nothing is allocated for a handshake that is not sealed by a plan
    /// host at its own address, in the life the membership knows.
    pub(crate) fn on_hello(
        &mut self,
        pod: &Pod,
        rails: &[RailIo],
        ud: UdSend<'_>,
        r: usize,
        src: Option<IpAddr>,
        frame: &[u8],
    ) {
        let (sender, data) = match self.seal.open(frame, unix_us()) {
            Ok(x) => x,
            Err(e) => {
                self.refused.count(e);
                return;
            }
        };
        let Ok(h) = serde_json::from_slice::<Hello>(data) else {
            self.refused.malformed += 1;
            return;
        };
        let (from, rail) = match &h {
            Hello::Connect { from, rail, .. } | Hello::Accept { from, rail, .. } => {
                (*from, usize::from(*rail))
            }
        };
        let expected = probe::rail_addr(pod, Dev { host: usize::from(from), rail });
        if from != sender || expected.is_none() || src != expected {
            self.refused.unknown_sender += 1;
            return;
        }
        match h {
            Hello::Connect {
                inc, peer_rail, port, qpn, psn: their_psn, addr, probe_qpn, ..
            } => {
                if usize::from(peer_rail) != r || Some(addr) != expected {
                    self.refused.unknown_sender += 1;
                    return;
                }
                if self.boots.get(&from) != Some(&inc) {
                    self.refused.implausible += 1;
                    return;
                }
                let key = (from, inc, qpn);
                let existing =
                    self.accepted.iter().find(|(_, a)| a.key == key).map(|(q, a)| (*q, a.psn));
                let (mine, my_psn) = match existing {
                    Some(x) => x,
                    None => {
                        self.make_room(from);
                        let Some(a) = accept(&rails[r], addr, qpn, their_psn, port, key) else {
                            return;
                        };
                        let q = a.qp.qpn().get();
                        let p = a.psn;
                        self.accepted.insert(q, a);
                        (q, p)
                    }
                };
                let reply = Hello::Accept {
                    from: self.me as u16,
                    rail: r as u8,
                    port,
                    qpn: mine,
                    psn: my_psn,
                    for_qpn: qpn,
                };
                let b = self.seal.seal(&hello_bytes(&reply), unix_us());
                ud(r, &b, addr, probe_qpn, port);
            }
            Hello::Accept { qpn, psn: their_psn, for_qpn, .. } => {
                let Some((key, c)) = self
                    .conns
                    .iter_mut()
                    .find(|(k, c)| k.next == usize::from(from) && c.qp.qpn().get() == for_qpn)
                else {
                    return;
                };
                if !matches!(c.state, ConnState::Connecting { .. }) {
                    return;
                }
                let Some(ip) = probe::rail_addr(pod, Dev { host: key.next, rail: key.peer_rail })
                else {
                    return;
                };
                let path = Path::new(ip, Qpn::new(qpn));
                let path = path.with_udp_source_port(key.port).unwrap_or(path);
                let Some(rail) = rails.get(key.rail) else { return };
                let ok = connect(&c.qp, path, c.psn, their_psn, rail.mtu).is_ok();
                c.state = if ok { ConnState::Up } else { ConnState::Failed };
            }
        }
    }

    /// Drops `peer`'s oldest accepted connections until it may have one more.
    fn make_room(&mut self, peer: u16) {
        loop {
            let of_peer: Vec<(u32, Instant)> = self
                .accepted
                .iter()
                .filter(|(_, a)| a.key.0 == peer)
                .map(|(q, a)| (*q, a.at))
                .collect();
            if of_peer.len() < MAX_ACCEPTED_PER_PEER {
                return;
            }
            if let Some((q, _)) = of_peer.iter().min_by_key(|(_, at)| *at) {
                self.accepted.remove(q);
            }
        }
    }

    /// Connections accepted from other hosts now.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.len()
    }

    /// A completion of a channel QP (its work request id has [`TAG`]).
    pub(crate) fn on_completion(&mut self, rail: &RailIo, wc: &WorkCompletion, now: Instant) {
        let id = ((wc.wr_id & !TAG) >> 20) as u32;
        let slot = (wc.wr_id & 0xf_ffff) as usize;
        if matches!(wc.opcode, verbs::WcOpcode::Recv) {
            let Some(a) = self.accepted.get(&wc.qp_num.get()) else { return };
            let mut buf = vec![0u8; wc.byte_len as usize];
            let got = wc.status == WcStatus::Success && a.mr.read(slot * SLOT, &mut buf).is_ok();
            let _ = a.qp.post_recv(RecvWr::new(wc.wr_id).sge(
                a.mr.addr() + (slot * SLOT) as u64,
                SLOT as u32,
                a.mr.lkey(),
            ));
            if wc.status != WcStatus::Success {
                // The sender's QP broke: this one is flushed; the sender connects anew.
                self.accepted.remove(&wc.qp_num.get());
                return;
            }
            let Some(f) = got.then(|| Frame::decode(&buf)).flatten() else { return };
            if usize::from(f.dst) == self.me {
                self.channels.on_frame(&f);
                self.delivered.extend(self.channels.take_delivered());
                self.keep_lost();
            } else {
                self.relayed += 1;
                self.forward.push_back(f);
            }
            let _ = rail;
            return;
        }
        let Some(key) = self.by_id.get(&id).copied() else { return };
        if wc.status == WcStatus::Success {
            if let Some(c) = self.conns.get_mut(&key) {
                c.free.push(slot);
            }
        } else {
            self.hop_failed(key, now);
        }
    }

    /// The hops this host sends on that are up.
    pub(crate) fn hops_up(&self) -> usize {
        self.conns.values().filter(|c| matches!(c.state, ConnState::Up)).count()
    }
}

/// An RC QP on `rail` in INIT.
fn rc_qp(rail: &RailIo, sends: u32, recvs: u32) -> verbs::Result<QueuePair> {
    let caps = QpCaps { max_send_wr: sends, max_recv_wr: recvs, max_inline_data: 0 };
    let qp = rail.pd.create_qp(&QpInit { caps, ..QpInit::new(QpType::Rc, &rail.cq) })?;
    qp.modify(&ModifyQp {
        state: Some(QpState::Init),
        access: Some(Access::LOCAL_WRITE),
        ..Default::default()
    })?;
    Ok(qp)
}

/// Brings `qp` to RTS towards `path` at the rail's active MTU `mtu` (larger packets would
/// not cross its links): an ACK timeout of 134 ms and 5 retries (a dead hop fails in about
/// 0.8 s, if the probes did not move the route first), RNR retried forever (the receiver's
/// buffers come back).
fn connect(qp: &QueuePair, path: Path, sq: u32, rq: u32, mtu: verbs::Mtu) -> verbs::Result<()> {
    let c = verbs::Connect {
        path_mtu: mtu,
        timeout: 15,
        retry_cnt: 5,
        rnr_retry: 7,
        ..verbs::Connect::new(path, Psn::new(sq), Psn::new(rq))
    };
    qp.connect(&c)
}

/// Accepts a connection from `addr` QP `qpn` (first PSN `their_psn`), answering from
/// `port`.
fn accept(
    rail: &RailIo,
    addr: IpAddr,
    qpn: u32,
    their_psn: u32,
    port: u16,
    key: (u16, u64, u32),
) -> Option<Accepted> {
    let qp = rc_qp(rail, 4, RECVS as u32).ok()?;
    let mr = rail.pd.reg_mr(SLOT * RECVS, Access::LOCAL_WRITE).ok()?;
    for i in 0..RECVS {
        qp.post_recv(RecvWr::new(TAG | i as u64).sge(
            mr.addr() + (i * SLOT) as u64,
            SLOT as u32,
            mr.lkey(),
        ))
        .ok()?;
    }
    let mine = psn();
    let path = Path::new(addr, Qpn::new(qpn));
    let path = path.with_udp_source_port(port).unwrap_or(path);
    connect(&qp, path, mine, their_psn, rail.mtu).ok()?;
    Some(Accepted { at: Instant::now(), qp, mr, key, psn: mine })
}
