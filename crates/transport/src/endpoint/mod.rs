//! The endpoint: one device's transport — memory regions, QPs, CQs — driven by datagrams and
//! time.

mod completer;
mod objects;
mod packets;
mod queue_pair;
mod requester;
mod responder;
mod tables;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Hash maps keyed by numbers: foldhash is several times faster than SipHash on them.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::net::IpAddr;
use std::time::Duration;

use wire::bth;
use wire::icrc::PseudoHeader;
use wire::{Opcode, Operation, Psn, Qpn, roce};

use verbs::{Counters, CqId, PdId, QpState, QpType, SrqId, WorkCompletion};

use crate::memory::Memory;
use crate::qp::TransitionError;
use crate::time::Instant;

use packets::*;
use queue_pair::*;
use tables::*;

/// An asynchronous event (`ibv_async_event`), from [`Endpoint::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The QP went to the error state on its own (IBV_EVENT_QP_FATAL): a retry limit was
    /// exceeded, a NAK or a local error ended it.
    QpFatal(Qpn),
    /// Fewer receives than the armed limit remain in the SRQ (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached(SrqId),
}

/// Configuration of an endpoint.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// The device's address (the source of every packet).
    pub ip: IpAddr,
    /// Seed for memory keys. Providers must take it from the OS's random source so that R_Keys
    /// are unguessable; tests fix it for repeatability.
    pub key_seed: u64,
    /// At most one CNP per QP in this interval (default 50 µs).
    pub cnp_interval: Duration,
    /// The requester sets AckReq after this many packets without one (rxe: 64).
    pub ack_req_every: u32,
    /// The most protection domains allocated at once (rxe's `max_pd`: 0x7ff0).
    pub max_pd: u32,
    /// The first QPN given out (24 bits; 0 and 1 are the special QPs). Providers take it
    /// from the OS's random source, as the key seed: a peer that guesses a QPN can forge
    /// packets to it (`new` gives rxe's 0x11, for tests).
    pub first_qpn: u32,
    /// READ response bytes the device's QPs together may have asked for and not yet
    /// received. A READ asks for a burst the requester cannot slow once asked for; asked for
    /// beyond what the driver's receive buffer holds, it is lost, and asked for again into
    /// the same overrun. Providers set it from their receive buffer (default 4 MiB). Large
    /// READs go out as several READ requests within it.
    pub read_window: u64,
    /// The most one QP may have asked for and not received (default 1 MiB): where its
    /// window starts and what it grows back to after a loss halved it.
    pub read_window_qp: u64,
    /// Packets an RC QP may have sent and not had acknowledged (default 1024): halved on a
    /// NAK or a timeout (not below 64), grown by about one a window acknowledged. A sender
    /// that knows it caused a loss — many senders into one receive buffer — backs off
    /// instead of resending the same burst into the same overrun.
    pub send_window: u32,
    /// RC SEND and WRITE bytes (packets × MTU) the device's QPs together may have sent and
    /// not had acknowledged (default 4 MiB); a QP with nothing in flight may always send one
    /// packet. Many QPs into one peer's receive buffer overrun it even when each keeps to
    /// its own window: providers set it from their receive buffer, the best guess of a
    /// like peer's.
    pub send_window_device: u64,
}

impl EndpointConfig {
    /// Defaults for a device at `ip`.
    pub fn new(ip: IpAddr, key_seed: u64) -> EndpointConfig {
        EndpointConfig {
            ip,
            key_seed,
            cnp_interval: Duration::from_micros(50),
            ack_req_every: 64,
            max_pd: 0x7ff0,
            first_qpn: FIRST_QPN,
            read_window: 4 << 20,
            read_window_qp: 1 << 20,
            send_window: 1024,
            send_window_device: 4 << 20,
        }
    }

    /// A first QPN from 64 random bits: anywhere in 0x11 ..= 0xFF_FFFF.
    pub fn random_qpn(bits: u64) -> u32 {
        FIRST_QPN + (bits % u64::from(MAX_QPN - FIRST_QPN + 1)) as u32
    }
}

/// The lowest QPN a QP gets (as rxe's first).
pub const FIRST_QPN: u32 = 0x11;
/// The largest QPN (24 bits).
pub const MAX_QPN: u32 = 0xFF_FFFF;

/// Metadata of a received datagram.
#[derive(Debug, Clone, Copy)]
pub struct RecvMeta<'a> {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// The IP ECN bits (3: CE).
    pub ecn: u8,
    /// The received IP header, if the driver saw it (needed to verify the ICRC of IPv4
    /// packets: it covers the Identification field).
    pub ip_header: Option<&'a [u8]>,
}

/// A packet to send: a RoCEv2 UDP payload whose last four bytes (the ICRC) the driver fills in
/// once it knows the IP header (`wire::icrc::PseudoHeader::seal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination address.
    pub dst: IpAddr,
    /// UDP destination port (4791).
    pub dst_port: u16,
    /// UDP source port: the connection's, as Linux gives it ([`wire::udp_source_port`] of
    /// the path's flow label and both QPNs); the driver sends from it.
    pub src_port: u16,
    /// IP traffic class / TOS (DSCP and ECN bits).
    pub tos: u8,
    /// BTH … pad, then four zero bytes for the ICRC.
    pub payload: Vec<u8>,
}

/// Why a verb was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No such QP.
    #[error("no QP {0}")]
    NoQp(Qpn),
    /// No such CQ.
    #[error("no CQ {0:?}")]
    NoCq(CqId),
    /// No such shared receive queue.
    #[error("no SRQ {0:?}")]
    NoSrq(SrqId),
    /// As many objects of a kind as the device allows exist already.
    #[error("the device allows {max} {what}")]
    Exhausted {
        /// The objects.
        what: &'static str,
        /// The most there may be.
        max: u32,
    },
    /// The protection domain still holds a memory region, QP or SRQ.
    #[error("protection domain {0:?} still has memory regions, QPs or SRQs")]
    PdInUse(PdId),
    /// No such protection domain.
    #[error("no protection domain {0:?}")]
    NoPd(PdId),
    /// A state change was refused.
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// The QP's state does not allow the verb.
    #[error("QP {qpn} is {state:?}, which does not allow {verb}")]
    BadState {
        /// The QP.
        qpn: Qpn,
        /// Its state.
        state: QpState,
        /// The verb.
        verb: &'static str,
    },
    /// The operation is not defined for the QP type.
    #[error("{op} is not supported on a {qp_type:?} QP")]
    OpNotSupported {
        /// The operation.
        op: &'static str,
        /// The QP type.
        qp_type: QpType,
    },
    /// The queue is full.
    #[error("the {0} queue is full")]
    QueueFull(&'static str),
    /// The message is too long for the QP (UD: the path MTU; others: 2^31 bytes).
    #[error("message of {len} bytes exceeds {max}")]
    TooLong {
        /// The length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A work request is malformed (UD without a destination, an atomic without 8 bytes…).
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    /// A memory region cannot be registered (zero length, address overflow).
    #[error("invalid memory region: {0}")]
    InvalidMr(&'static str),
    /// A QP capability beyond what the device grants.
    #[error("{what} of {asked} exceeds the device's {max}")]
    CapTooLarge {
        /// The capability.
        what: &'static str,
        /// What was asked for.
        asked: u32,
        /// The most the device grants.
        max: u32,
    },
}

fn retransmit_timeout(code: u8) -> Option<Duration> {
    (code != 0).then(|| Duration::from_nanos(4096u64 << code.min(31)))
}

/// One device's transport.
pub struct Endpoint<M: Memory> {
    cfg: EndpointConfig,
    dev: Device<M>,
    /// The protection domains allocated, and the last id given.
    pds: BTreeSet<u32>,
    next_pd: u32,
    qps: BTreeMap<Qpn, QueuePair>,
    next_qpn: u32,
    /// Control packets (NAKs that end a QP, CNPs) ready to go.
    ctrl: VecDeque<Transmit>,
    /// QPs that may have something to send, served round-robin. A QP joins when work is
    /// posted, its state changes, a packet or a timer concerns it; it leaves when it has
    /// nothing to send.
    active: VecDeque<Qpn>,
    key_state: u64,
    next_lkey: u32,
    bufs: BufPool,
}

impl<M: Memory> Endpoint<M> {
    /// Gives a sent datagram's buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.bufs.0.len() < BufPool::KEEP {
            self.bufs.0.push(buf);
        }
    }

    /// A device at `cfg.ip` over the provider's memory `mem`.
    pub fn new(cfg: EndpointConfig, mem: M) -> Endpoint<M> {
        let key_state = cfg.key_seed ^ 0x9e37_79b9_7f4a_7c15;
        let next_qpn = cfg.first_qpn.clamp(FIRST_QPN, MAX_QPN);
        Endpoint {
            cfg,
            dev: Device {
                mem,
                mrs: MrTable::default(),
                cqs: CqTable::default(),
                counters: Counters::default(),
            },
            pds: BTreeSet::new(),
            next_pd: 0,
            qps: BTreeMap::new(),
            next_qpn,
            ctrl: VecDeque::new(),
            active: VecDeque::new(),
            key_state,
            next_lkey: 1,
            bufs: BufPool::default(),
        }
    }

    /// The provider's memory.
    pub fn memory(&self) -> &M {
        &self.dev.mem
    }

    /// The provider's memory, mutable.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.dev.mem
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.dev.counters
    }

    /// The device's address.
    pub fn ip(&self) -> IpAddr {
        self.cfg.ip
    }
}

impl<M: Memory> Endpoint<M> {
    /// The next completion of `cq`.
    pub fn poll_completion(&mut self, cq: CqId) -> Option<WorkCompletion> {
        self.dev.cqs.queues.get_mut(cq.0 as usize)?.pop_front()
    }

    /// Puts `qpn` in the queue of QPs that may have something to send.
    fn mark(&mut self, qpn: Qpn) {
        if let Some(qp) = self.qps.get_mut(&qpn)
            && !qp.queued
        {
            qp.queued = true;
            self.active.push_back(qpn);
        }
    }

    /// When [`Endpoint::handle_timeout`] wants to be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.qps
            .values()
            .flat_map(|q| [q.req.timer, q.req.rnr_until, q.resp.reack.map(|(t, _)| t)])
            .flatten()
            .min()
    }
}

impl<M: Memory> Endpoint<M> {
    /// Takes a received RoCEv2 UDP payload (BTH … ICRC), or a GSO run of them seen as one
    /// IPv4 datagram (see [`Endpoint::gso_run_segment`]).
    pub fn handle_datagram(&mut self, now: Instant, meta: &RecvMeta<'_>, bytes: &[u8]) {
        match (self.gso_run_segment(meta, bytes), meta.ip_header) {
            (Some(seg), Some(h)) if h.len() <= 60 => {
                // Segment k left with the Identification of the first plus k, as Linux's GSO
                // numbers them (and as it would have reached a wire); the ICRC of each covers
                // its own, so each is checked with it, as if it came alone.
                let mut ip = [0u8; 60];
                let ip = &mut ip[..h.len()];
                ip.copy_from_slice(h);
                let id0 = u16::from_be_bytes([h[4], h[5]]);
                for (k, segment) in bytes.chunks(seg).enumerate() {
                    ip[4..6].copy_from_slice(&id0.wrapping_add(k as u16).to_be_bytes());
                    self.handle_packet(now, &RecvMeta { ip_header: Some(ip), ..*meta }, segment);
                }
            }
            _ => self.handle_packet(now, meta, bytes),
        }
    }

    /// The segment size of a GSO run that reached this device as one IPv4 datagram, or
    /// `None` if `bytes` is one packet.
    ///
    /// Over loopback or a veth, a UDP GSO send reaches the receiver unsegmented, and a raw
    /// socket (the one that shows IPv4 headers) does not segment it. A run is told from a
    /// packet without guessing: its first packet is one whose length its headers give
    /// ([`roce::len_from_headers`]: a FIRST or MIDDLE packet carries exactly the QP's path
    /// MTU, an RDMA WRITE ONLY its RETH's length, a READ request, an atomic or an ACK no
    /// payload) — a datagram longer than that is several packets, each of that packet's size
    /// but the last. A sender leads runs only with such packets (podnet's soft device does);
    /// a run led by another is one datagram that fails its checks.
    fn gso_run_segment(&self, meta: &RecvMeta<'_>, bytes: &[u8]) -> Option<usize> {
        let ipv4 = meta.ip_header.and_then(|h| h.first()).is_some_and(|b| b >> 4 == 4);
        if !ipv4 {
            return None;
        }
        let qp = self.qps.get(&bth::Packet::new_checked(bytes).ok()?.dest_qp())?;
        let seg = roce::len_from_headers(bytes, qp.mtu() as usize)?;
        (bytes.len() > seg).then_some(seg)
    }

    /// Takes one received RoCEv2 packet.
    fn handle_packet(&mut self, now: Instant, meta: &RecvMeta<'_>, bytes: &[u8]) {
        let Ok(pkt) = roce::Packet::new_checked(bytes) else {
            self.dev.counters.dropped_pkts += 1;
            return;
        };
        let op = pkt.opcode();
        let qpn = pkt.bth().dest_qp();
        // The header checks first, as rxe's `hdr_check` does before its ICRC check: a packet
        // for no QP of this device, or one not from a connected QP's peer, costs a lookup,
        // not a CRC over its payload (a flood of forged packets is dropped cheaply).
        if op != Opcode::CNP {
            let Some(qp) = self.qps.get(&qpn) else {
                self.dev.counters.dropped_pkts += 1;
                self.dev.counters.dropped_unknown_qp += 1;
                return;
            };
            let expected = match qp.qp_type {
                QpType::Rc => wire::Transport::Rc,
                QpType::Uc => wire::Transport::Uc,
                QpType::Ud => wire::Transport::Ud,
            };
            let receiving = matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd);
            if op.transport() != expected || op.name().is_none() || !receiving {
                self.dev.counters.dropped_pkts += 1;
                return;
            }
            // A connected QP takes packets from its peer's address only. Not from its UDP
            // source port: in RoCEv2 that is ECMP entropy a NIC may choose and change.
            if qp.qp_type != QpType::Ud && qp.attr.dest.is_none_or(|d| d.ip != meta.src) {
                self.dev.counters.dropped_pkts += 1;
                self.dev.counters.dropped_wrong_source += 1;
                return;
            }
            // An RC packet whose PSN no peer could send now: dropped before its ICRC and
            // unanswered, so a forger who knows the QPN but not the PSN costs a lookup, not
            // a CRC, a NAK or an ACK.
            if qp.qp_type == QpType::Rc && !plausible_psn(qp, op.operation(), pkt.bth().psn()) {
                self.dev.counters.dropped_pkts += 1;
                self.dev.counters.dropped_out_of_window += 1;
                return;
            }
        }
        // The ICRC: over the real IP header when the driver has it; an IPv6 header can be
        // rebuilt from what the socket tells (every field it covers is known).
        let (sp, dp) = (meta.src_port, meta.dst_port);
        let verdict = match (meta.ip_header, meta.src, meta.dst) {
            (Some(h), _, _) => {
                PseudoHeader::with_ip_header(h, sp, dp).and_then(|h| h.verify(bytes)).ok()
            }
            (None, IpAddr::V6(s), IpAddr::V6(d)) => {
                PseudoHeader::ipv6(s, d, sp, dp).verify(bytes).ok()
            }
            _ => None,
        };
        match verdict {
            Some(true) => {}
            Some(false) => {
                self.dev.counters.icrc_errors += 1;
                return;
            }
            None => self.dev.counters.icrc_unverified += 1,
        }
        self.dev.counters.rcvd_pkts += 1;
        if meta.ecn == 3 {
            self.dev.counters.ecn_ce_rcvd += 1;
        }
        if op == Opcode::CNP {
            self.dev.counters.cnp_rcvd += 1;
            return;
        }
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        if meta.ecn == 3 {
            let to = match (qp.qp_type, pkt.deth(), qp.attr.dest) {
                (QpType::Ud, Some(d), _) => Some((meta.src, d.src_qp)),
                (_, _, Some(p)) => Some((p.ip, p.qpn)),
                _ => None,
            };
            if let Some((ip, dqp)) = to {
                if qp.resp.last_cnp.is_some_and(|t| now.saturating_since(t) < self.cfg.cnp_interval)
                {
                    self.dev.counters.cnp_rate_limited += 1;
                } else {
                    qp.resp.last_cnp = Some(now);
                    let mut b = bth::Repr::new(Opcode::CNP, dqp, Psn::new(0));
                    b.becn = true;
                    if let Some(t) = packet(&mut self.bufs, qp, ip, &roce::Repr::new(b), &[0u8; 16])
                    {
                        self.dev.counters.cnp_sent += 1;
                        self.ctrl.push_back(t);
                    }
                }
            }
        }
        let operation = op.operation();
        if qp.qp_type == QpType::Rc && operation.is_some_and(Operation::is_response) {
            let una = qp.req.una;
            self.on_response(now, qpn, &pkt);
            // Its oldest unacknowledged PSN may have moved: fewer READ responses to come,
            // a wider send window.
            if let Some(qp) = self.qps.get_mut(&qpn) {
                let mtu = qp.mtu();
                self.dev.cqs.account(&mut qp.req, mtu);
                let acked = qp.req.una.diff(una);
                if acked > 0 {
                    qp.req.grow_send_window(acked as u32, self.cfg.send_window);
                }
            }
        } else {
            // A packet that starts consuming a receive takes one from the SRQ, if the QP has
            // one and holds none already.
            if let Some(id) = qp.srq
                && qp.resp.rq.is_empty()
                && operation.is_some_and(Operation::consumes_receive_at_start)
                && let Some(r) = self.dev.cqs.srq_pop(id)
            {
                qp.resp.rq.push_back(r);
            }
            match qp.qp_type {
                QpType::Rc => self.on_rc_request(now, qpn, &pkt),
                QpType::Uc => self.on_uc_request(qpn, &pkt),
                QpType::Ud => self.on_ud_request(qpn, meta, &pkt),
            }
        }
        self.mark(qpn);
    }
}

/// How far ahead of the expected PSN an RC request is still taken for a loss (and NAKed
/// once): more than any requester keeps in flight (podnet's at most its send window and a
/// READ window, rxe 128 packets). Further ahead it is dropped unanswered — a requester that
/// did lose that much recovers on its retransmit timer — so a forged request with a random
/// PSN draws a NAK once in 1,024 tries, not once in 2.
pub(crate) const MAX_PSN_AHEAD: i32 = 1 << 14;

/// How far behind the expected PSN an RC SEND or WRITE is still taken for a retransmission
/// (and ACKed). READ and atomic requests further behind are still looked up among the
/// responder's saved resources (a lost READ of many packets is asked for again from its first
/// PSN), and answered only if one matches.
pub(crate) const MAX_PSN_BEHIND: i32 = 1 << 16;

/// Whether an RC packet's PSN is one its peer could send now: a request near the expected
/// PSN, a response for a PSN this requester sent and has not had acknowledged (what the
/// completer takes; the same test, before the ICRC).
fn plausible_psn(qp: &QueuePair, op: Option<Operation>, psn: Psn) -> bool {
    match op {
        Some(o) if o.is_response() => {
            let behind = psn.diff(qp.req.una);
            behind >= 0 && behind < qp.req.next_psn.diff(qp.req.una).max(0)
        }
        Some(Operation::RdmaReadRequest | Operation::CompareSwap | Operation::FetchAdd) => {
            psn.diff(qp.resp.epsn) <= MAX_PSN_AHEAD
        }
        _ => (-MAX_PSN_BEHIND..=MAX_PSN_AHEAD).contains(&psn.diff(qp.resp.epsn)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retransmit_timeout_is_4_096_us_times_2_to_the_code() {
        assert_eq!(retransmit_timeout(0), None);
        assert_eq!(retransmit_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(retransmit_timeout(14), Some(Duration::from_nanos(4096 << 14)));
    }
}
