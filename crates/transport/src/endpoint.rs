//! The endpoint: one device's transport — memory regions, QPs, CQs — driven by datagrams and
//! time.

use std::collections::{BTreeMap, VecDeque};

/// Hash maps keyed by numbers: foldhash is several times faster than SipHash on them.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::net::IpAddr;
use std::time::Duration;

use wire::bth;
use wire::ext::{Aeth, AtomicAckEth, AtomicEth, Deth, ImmDt, NakCode, Reth, Syndrome};
use wire::icrc::PseudoHeader;
use wire::{Opcode, Operation, Psn, Qpn, RKey, Transport, roce};

use crate::counters::Counters;
use crate::memory::{Access, Memory, MrId, MrInfo, PdId};
use crate::qp::{self, ModifyQp, QpAttr, QpCaps, QpState, QpType, TransitionError};
use crate::time::Instant;
use crate::wr::{RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};

/// A completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqId(pub u32);

/// A shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqId(pub u32);

/// An asynchronous event (`ibv_async_event`), from [`Endpoint::poll_event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The QP went to the error state on its own (IBV_EVENT_QP_FATAL): a retry limit was
    /// exceeded, a NAK or a local error ended it.
    QpFatal(Qpn),
    /// Fewer receives than the armed limit remain in the SRQ (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached(SrqId),
}

/// A shared receive queue's state.
#[derive(Debug)]
struct Srq {
    pd: PdId,
    rq: VecDeque<RecvWr>,
    max_wr: u32,
    /// Raise [`Event::SrqLimitReached`] when fewer remain; 0: disarmed.
    limit: u32,
}

/// What QPs share: completion queues, shared receive queues and the events they raise.
#[derive(Debug, Default)]
struct CqTable {
    queues: Vec<VecDeque<WorkCompletion>>,
    srqs: Vec<Option<Srq>>,
    events: VecDeque<Event>,
}

impl CqTable {
    fn srq(&self, id: SrqId) -> Option<&Srq> {
        self.srqs.get(id.0 as usize)?.as_ref()
    }

    fn srq_mut(&mut self, id: SrqId) -> Option<&mut Srq> {
        self.srqs.get_mut(id.0 as usize)?.as_mut()
    }

    fn srq_pop(&mut self, id: SrqId) -> Option<RecvWr> {
        let srq = self.srq_mut(id)?;
        let r = srq.rq.pop_front()?;
        if srq.limit != 0 && (srq.rq.len() as u64) < u64::from(srq.limit) {
            srq.limit = 0;
            self.events.push_back(Event::SrqLimitReached(id));
        }
        Some(r)
    }
}

impl core::ops::Deref for CqTable {
    type Target = [VecDeque<WorkCompletion>];
    fn deref(&self) -> &Self::Target {
        &self.queues
    }
}

impl core::ops::DerefMut for CqTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.queues
    }
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
}

impl EndpointConfig {
    /// Defaults for a device at `ip`.
    pub fn new(ip: IpAddr, key_seed: u64) -> EndpointConfig {
        EndpointConfig { ip, key_seed, cnp_interval: Duration::from_micros(50), ack_req_every: 64 }
    }
}

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
/// once it knows the IP header (`wire::icrc::seal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination address.
    pub dst: IpAddr,
    /// UDP destination port (4791).
    pub dst_port: u16,
    /// UDP source port: `0xC000 | hash(QPN)`, one per QP.
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

/// The RoCEv2 UDP source port of a QP, as Linux computes it (`rdma_get_udp_sport` with no
/// flow label set): the flow label `lqpn × rqpn`, folded (`v ^= v >> 20; v ^= v >> 40`, 20 bits),
/// then folded again into 14 bits above 0xC000. It depends on both QPNs, so both directions of
/// a connection use the same port; a UD QP (no remote QP) uses 0xC000.
pub(crate) fn src_port(lqpn: Qpn, rqpn: Qpn) -> u16 {
    let mut v = u64::from(lqpn.get()) * u64::from(rqpn.get());
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low as u16) | 0xc000
}

fn retransmit_timeout(code: u8) -> Option<Duration> {
    (code != 0).then(|| Duration::from_nanos(4096u64 << code.min(31)))
}

#[derive(Debug, Clone)]
struct SendWqe {
    wr: SendWr,
    /// Numbers WQEs in posting order (the QP's `wqe_seq` when posted).
    seq: u64,
    first_psn: Psn,
    npkts: u32,
    len: u64,
    /// READ: response bytes received so far.
    done_bytes: u64,
    /// An inline send's payload, copied when it was posted.
    inline: Option<Box<[u8]>>,
}

impl SendWqe {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }
    fn is_read_or_atomic(&self) -> bool {
        matches!(
            self.wr.op,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
}

/// A message the responder is in the middle of.
#[derive(Debug, Clone)]
enum InMsg {
    Send { recv: RecvWr, offset: u64, imm: Option<u32> },
    Write { mr: MrInfo, offset: u64, remaining: u64, total: u64 },
}

/// What the responder sends, in order.
#[derive(Debug, Clone)]
enum RespOut {
    Ack { psn: Psn, syndrome: u8, msn: u32 },
    Read { first_psn: Psn, mr: MrInfo, offset: u64, len: u64, next: u32, msn: u32 },
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// A READ or atomic the responder remembers, for duplicates.
#[derive(Debug, Clone, Copy)]
enum Resource {
    Read { psn: Psn, npkts: u32, mr: MrInfo, offset: u64, len: u64 },
    Atomic { psn: Psn, orig: u64 },
}

#[derive(Debug)]
struct QueuePair {
    qpn: Qpn,
    qp_type: QpType,
    state: QpState,
    pd: PdId,
    send_cq: CqId,
    recv_cq: CqId,
    caps: QpCaps,
    attr: QpAttr,
    // Requester.
    sq: VecDeque<SendWqe>,
    /// The `seq` the next posted WQE gets.
    wqe_seq: u64,
    /// The `seq` of the WQE the last request packet came from: where the next one most
    /// likely comes from too (a hint, checked before use).
    cursor: u64,
    /// PSN the next posted WQE starts at.
    post_psn: Psn,
    /// PSN of the next packet to send.
    next_psn: Psn,
    /// Oldest unacknowledged PSN.
    una: Psn,
    packets_since_ackreq: u32,
    retry_left: u8,
    rnr_left: u8,
    timer: Option<Instant>,
    rnr_until: Option<Instant>,
    /// Packets below this PSN were sent before (a restart is under way).
    resend_until: Psn,
    // Responder.
    rq: VecDeque<RecvWr>,
    epsn: Psn,
    msn: u32,
    nak_sent: bool,
    in_msg: Option<InMsg>,
    resp_out: VecDeque<RespOut>,
    resources: VecDeque<Resource>,
    last_cnp: Option<Instant>,
    /// UD: the last PSN accepted from each (address, source QP), to drop duplicates.
    ud_seen: HashMap<(IpAddr, Qpn), Psn>,
    /// Whether the QP is in the endpoint's queue of QPs that may have something to send.
    queued: bool,
    /// The shared receive queue its receives come from, if any.
    srq: Option<SrqId>,
}

impl QueuePair {
    fn mtu(&self) -> u64 {
        u64::from(self.attr.path_mtu.bytes())
    }
    fn npkts(&self, len: u64) -> u32 {
        (len.div_ceil(self.mtu()).max(1)) as u32
    }
    fn outstanding(&self) -> bool {
        self.una != self.next_psn
    }
}

#[derive(Debug, Default)]
struct MrTable {
    by_lkey: HashMap<u32, MrInfo>,
    by_rkey: HashMap<u32, u32>,
    /// The region found last by local and by remote key: a stream of packets names the same
    /// one again and again, and one compare beats a hash probe. Cleared on every change.
    hot_l: std::cell::Cell<Option<MrInfo>>,
    hot_r: std::cell::Cell<Option<MrInfo>>,
}

impl MrTable {
    fn insert(&mut self, mr: MrInfo) {
        self.by_lkey.insert(mr.lkey, mr);
        if mr.rkey != 0 {
            self.by_rkey.insert(mr.rkey, mr.lkey);
        }
        self.hot_l.set(None);
        self.hot_r.set(None);
    }

    fn remove(&mut self, lkey: u32) -> Option<MrInfo> {
        let mr = self.by_lkey.remove(&lkey)?;
        self.by_rkey.remove(&mr.rkey);
        self.hot_l.set(None);
        self.hot_r.set(None);
        Some(mr)
    }

    /// The region with local key `lkey`.
    fn by_l(&self, lkey: u32) -> Option<MrInfo> {
        if let Some(mr) = self.hot_l.get().filter(|m| m.lkey == lkey) {
            return Some(mr);
        }
        let mr = *self.by_lkey.get(&lkey)?;
        self.hot_l.set(Some(mr));
        Some(mr)
    }

    /// The region with remote key `rkey` (never 0: regions without remote access have none).
    fn by_r(&self, rkey: u32) -> Option<MrInfo> {
        if let Some(mr) = self.hot_r.get().filter(|m| m.rkey == rkey && rkey != 0) {
            return Some(mr);
        }
        let mr = *self.by_lkey.get(self.by_rkey.get(&rkey)?)?;
        self.hot_r.set(Some(mr));
        Some(mr)
    }

    /// Checks a local scatter/gather list: keys, PD, bounds and, when `write`, LOCAL_WRITE.
    fn check_sgl(&self, pd: PdId, sgl: &[Sge], write: bool) -> bool {
        sgl.iter().all(|s| {
            self.by_l(s.lkey).is_some_and(|mr| {
                mr.pd == pd
                    && mr.offset_of(s.addr, u64::from(s.length)).is_some()
                    && (!write || mr.access.contains(Access::LOCAL_WRITE))
            })
        })
    }

    /// The region a remote request of `len` bytes targets, and the offset in it. A zero-length
    /// request touches no memory, so it needs no valid key (IBTA); any other must pass
    /// [`MrTable::check_remote`].
    fn target(
        &self,
        pd: PdId,
        rkey: RKey,
        addr: u64,
        len: u64,
        need: Access,
        qp_access: Access,
    ) -> Option<(MrInfo, u64)> {
        if len == 0 {
            let none =
                MrInfo { id: MrId(0), pd, addr: 0, len: 0, access: Access(0), lkey: 0, rkey: 0 };
            return Some((none, 0));
        }
        self.check_remote(pd, rkey, addr, len, need, qp_access)
    }

    /// Checks a remote access; returns the region and the offset in it.
    fn check_remote(
        &self,
        pd: PdId,
        rkey: RKey,
        addr: u64,
        len: u64,
        need: Access,
        qp_access: Access,
    ) -> Option<(MrInfo, u64)> {
        let mr = self.by_r(rkey.0)?;
        if mr.pd != pd || !mr.access.contains(need) || !qp_access.contains(need) {
            return None;
        }
        Some((mr, mr.offset_of(addr, len)?))
    }
}

/// Copies bytes `[off, off + out.len())` of a scatter list out of memory.
fn gather<M: Memory>(mrs: &MrTable, mem: &M, sgl: &[Sge], mut off: u64, out: &mut [u8]) -> bool {
    let mut done = 0usize;
    for s in sgl {
        let len = u64::from(s.length);
        if off >= len {
            off -= len;
            continue;
        }
        let Some(mr) = mrs.by_l(s.lkey) else { return false };
        let n = ((len - off) as usize).min(out.len() - done);
        let Some(base) = mr.offset_of(s.addr, len) else { return false };
        if mem.read(mr.id, base + off, &mut out[done..done + n]).is_err() {
            return false;
        }
        done += n;
        off = 0;
        if done == out.len() {
            break;
        }
    }
    done == out.len()
}

/// Copies `data` into a scatter list at byte `off`; `Err(true)` when it does not fit.
fn scatter<M: Memory>(
    mrs: &MrTable,
    mem: &mut M,
    sgl: &[Sge],
    mut off: u64,
    data: &[u8],
) -> Result<(), bool> {
    let mut done = 0usize;
    for s in sgl {
        if done == data.len() {
            break;
        }
        let len = u64::from(s.length);
        if off >= len {
            off -= len;
            continue;
        }
        let mr = mrs.by_l(s.lkey).ok_or(false)?;
        let base = mr.offset_of(s.addr, len).ok_or(false)?;
        let n = ((len - off) as usize).min(data.len() - done);
        mem.write(mr.id, base + off, &data[done..done + n]).map_err(|_| false)?;
        done += n;
        off = 0;
    }
    if done == data.len() { Ok(()) } else { Err(true) }
}

/// One device's transport.
pub struct Endpoint<M: Memory> {
    cfg: EndpointConfig,
    mem: M,
    mrs: MrTable,
    pds: u32,
    qps: BTreeMap<Qpn, QueuePair>,
    next_qpn: u32,
    cqs: CqTable,
    counters: Counters,
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
        Endpoint {
            cfg,
            mem,
            mrs: MrTable::default(),
            pds: 0,
            qps: BTreeMap::new(),
            next_qpn: 0x11,
            cqs: CqTable::default(),
            counters: Counters::default(),
            ctrl: VecDeque::new(),
            active: VecDeque::new(),
            key_state,
            next_lkey: 1,
            bufs: BufPool::default(),
        }
    }

    /// The provider's memory.
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The provider's memory, mutable.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.mem
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The device's address.
    pub fn ip(&self) -> IpAddr {
        self.cfg.ip
    }

    /// A new protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        self.pds += 1;
        PdId(self.pds)
    }

    /// A new completion queue.
    pub fn create_cq(&mut self) -> CqId {
        self.cqs.queues.push(VecDeque::new());
        CqId(self.cqs.len() as u32 - 1)
    }

    fn next_key(&mut self) -> u32 {
        // splitmix64 over the seed: unguessable when the seed is.
        loop {
            self.key_state = self.key_state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.key_state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let k = (z ^ (z >> 31)) as u32;
            if k != 0 && !self.mrs.by_rkey.contains_key(&k) {
                return k;
            }
        }
    }

    /// Registers `len` bytes of the provider's buffer `id` at virtual address `addr`.
    pub fn register_mr(
        &mut self,
        pd: PdId,
        id: MrId,
        addr: u64,
        len: u64,
        access: Access,
    ) -> Result<MrInfo, Error> {
        if pd.0 == 0 || pd.0 > self.pds {
            return Err(Error::NoPd(pd));
        }
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(Error::InvalidMr("zero length or address overflow"));
        }
        let lkey = self.next_lkey;
        self.next_lkey += 1;
        let remote = Access(
            access.0 & (Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0),
        );
        let rkey = if remote.0 != 0 { self.next_key() } else { 0 };
        let mr = MrInfo { id, pd, addr, len, access, lkey, rkey };
        self.mrs.insert(mr);
        Ok(mr)
    }

    /// The region with local key `lkey`.
    pub fn mr(&self, lkey: u32) -> Option<&MrInfo> {
        self.mrs.by_lkey.get(&lkey)
    }

    /// Deregisters a region; later accesses with its keys fail.
    pub fn deregister_mr(&mut self, lkey: u32) -> Option<MrInfo> {
        self.mrs.remove(lkey)
    }

    /// Creates a QP in the RESET state.
    pub fn create_qp(
        &mut self,
        pd: PdId,
        qp_type: QpType,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
    ) -> Result<Qpn, Error> {
        self.create_qp_with_srq(pd, qp_type, send_cq, recv_cq, caps, None)
    }

    /// Creates a QP in the RESET state whose receives come from the shared receive queue
    /// `srq` (when given); such a QP refuses [`Endpoint::post_recv`].
    pub fn create_qp_with_srq(
        &mut self,
        pd: PdId,
        qp_type: QpType,
        send_cq: CqId,
        recv_cq: CqId,
        caps: QpCaps,
        srq: Option<SrqId>,
    ) -> Result<Qpn, Error> {
        if pd.0 == 0 || pd.0 > self.pds {
            return Err(Error::NoPd(pd));
        }
        if let Some(id) = srq {
            match self.cqs.srq(id) {
                Some(s) if s.pd == pd => {}
                Some(_) => return Err(Error::InvalidWr("the SRQ belongs to another PD")),
                None => return Err(Error::NoSrq(id)),
            }
        }
        for cq in [send_cq, recv_cq] {
            if cq.0 as usize >= self.cqs.len() {
                return Err(Error::NoCq(cq));
            }
        }
        if caps.max_inline_data > crate::qp::MAX_INLINE_DATA {
            return Err(Error::CapTooLarge {
                what: "max_inline_data",
                asked: caps.max_inline_data,
                max: crate::qp::MAX_INLINE_DATA,
            });
        }
        let qpn = Qpn::new(self.next_qpn);
        self.next_qpn += 1;
        let attr = QpAttr::default();
        self.qps.insert(
            qpn,
            QueuePair {
                qpn,
                qp_type,
                state: QpState::Reset,
                pd,
                send_cq,
                recv_cq,
                caps,
                attr,
                sq: VecDeque::new(),
                wqe_seq: 0,
                cursor: 0,
                post_psn: Psn::new(0),
                next_psn: Psn::new(0),
                una: Psn::new(0),
                packets_since_ackreq: 0,
                retry_left: 0,
                rnr_left: 0,
                timer: None,
                rnr_until: None,
                resend_until: Psn::new(0),
                rq: VecDeque::new(),
                epsn: Psn::new(0),
                msn: 0,
                nak_sent: false,
                in_msg: None,
                resp_out: VecDeque::new(),
                resources: VecDeque::new(),
                last_cnp: None,
                ud_seen: HashMap::default(),
                queued: false,
                srq,
            },
        );
        Ok(qpn)
    }

    /// Destroys a QP; its outstanding work is dropped without completions.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Error> {
        let mut qp = self.qps.remove(&qpn).ok_or(Error::NoQp(qpn))?;
        Self::return_to_srq(&mut self.cqs, &mut qp);
        Ok(())
    }

    /// Gives the receives a QP took from its SRQ (and has not begun to fill) back to the SRQ.
    fn return_to_srq(cqs: &mut CqTable, qp: &mut QueuePair) {
        let Some(srq) = qp.srq.and_then(|id| cqs.srq_mut(id)) else { return };
        if let Some(InMsg::Send { recv, .. }) = qp.in_msg.take() {
            qp.rq.push_front(recv);
        }
        while let Some(r) = qp.rq.pop_back() {
            srq.rq.push_front(r);
        }
    }

    /// A new shared receive queue in `pd` holding up to `max_wr` receives.
    pub fn create_srq(&mut self, pd: PdId, max_wr: u32) -> Result<SrqId, Error> {
        if pd.0 == 0 || pd.0 > self.pds {
            return Err(Error::NoPd(pd));
        }
        self.cqs.srqs.push(Some(Srq { pd, rq: VecDeque::new(), max_wr, limit: 0 }));
        Ok(SrqId(self.cqs.srqs.len() as u32 - 1))
    }

    /// Destroys a shared receive queue; refused while a QP uses it.
    pub fn destroy_srq(&mut self, id: SrqId) -> Result<(), Error> {
        if self.qps.values().any(|q| q.srq == Some(id)) {
            return Err(Error::InvalidWr("the SRQ is still used by a QP"));
        }
        let slot = self.cqs.srqs.get_mut(id.0 as usize).ok_or(Error::NoSrq(id))?;
        slot.take().map(|_| ()).ok_or(Error::NoSrq(id))
    }

    /// Arms the SRQ limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when fewer than `limit`
    /// receives remain, [`Event::SrqLimitReached`] is raised once and the limit disarms.
    pub fn arm_srq_limit(&mut self, id: SrqId, limit: u32) -> Result<(), Error> {
        let srq = self.cqs.srq_mut(id).ok_or(Error::NoSrq(id))?;
        srq.limit = limit;
        Ok(())
    }

    /// Posts a receive to a shared receive queue.
    pub fn post_srq_recv(&mut self, id: SrqId, wr: RecvWr) -> Result<(), Error> {
        let srq = self.cqs.srq(id).ok_or(Error::NoSrq(id))?;
        if srq.rq.len() >= srq.max_wr as usize {
            return Err(Error::QueueFull("shared receive"));
        }
        if !self.mrs.check_sgl(srq.pd, &wr.sgl, true) {
            return Err(Error::InvalidWr(
                "a receive buffer's key, bounds, PD or LOCAL_WRITE right is wrong",
            ));
        }
        if let Some(srq) = self.cqs.srq_mut(id) {
            srq.rq.push_back(wr);
        }
        Ok(())
    }

    /// The number of receives waiting in a shared receive queue.
    pub fn srq_len(&self, id: SrqId) -> Option<usize> {
        self.cqs.srq(id).map(|s| s.rq.len())
    }

    /// The number of completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.cqs.queues.get(cq.0 as usize).map_or(0, VecDeque::len)
    }

    /// The next asynchronous event (a QP that failed, an SRQ below its limit).
    pub fn poll_event(&mut self) -> Option<Event> {
        self.cqs.events.pop_front()
    }

    /// A QP's state and attributes.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr), Error> {
        self.qps.get(&qpn).map(|q| (q.state, q.attr)).ok_or(Error::NoQp(qpn))
    }

    /// Changes a QP's state and attributes (`ibv_modify_qp`).
    pub fn modify_qp(&mut self, qpn: Qpn, m: &ModifyQp) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoQp(qpn))?;
        let to = qp::check_transition(qp.qp_type, qp.state, m)?;
        qp::apply(&mut qp.attr, m);
        let from = qp.state;
        qp.state = to;
        match to {
            QpState::Reset => {
                Self::return_to_srq(&mut self.cqs, qp);
                qp.sq.clear();
                qp.rq.clear();
                qp.resp_out.clear();
                qp.resources.clear();
                qp.in_msg = None;
                qp.timer = None;
                qp.rnr_until = None;
            }
            QpState::Rtr if from == QpState::Init => {
                qp.epsn = qp.attr.rq_psn;
                qp.msn = 0;
                qp.nak_sent = false;
            }
            QpState::Rts if from == QpState::Rtr => {
                let p = qp.attr.sq_psn;
                qp.post_psn = p;
                qp.next_psn = p;
                qp.una = p;
                qp.resend_until = p;
                qp.retry_left = qp.attr.retry_cnt;
                qp.rnr_left = qp.attr.rnr_retry;
            }
            QpState::Err => {
                Self::flush(&mut self.cqs, qp);
            }
            _ => {}
        }
        self.mark(qpn);
        Ok(())
    }

    /// Completes everything outstanding on `qp` with WR_FLUSH_ERR.
    fn flush(cqs: &mut CqTable, qp: &mut QueuePair) {
        if qp.state != QpState::Err {
            // Not asked for by modify_qp: the QP failed on its own.
            cqs.events.push_back(Event::QpFatal(qp.qpn));
        }
        Self::return_to_srq(cqs, qp);
        qp.state = QpState::Err;
        qp.timer = None;
        qp.rnr_until = None;
        qp.resp_out.clear();
        for w in qp.sq.drain(..) {
            cqs[qp.send_cq.0 as usize].push_back(WorkCompletion {
                wr_id: w.wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: w.wr.op.wc_opcode(),
                byte_len: 0,
                imm: None,
                qp_num: qp.qpn,
                src_qp: None,
                grh: false,
            });
        }
        if let Some(InMsg::Send { recv, .. }) = qp.in_msg.take() {
            qp.rq.push_front(recv);
        }
        for r in qp.rq.drain(..) {
            cqs[qp.recv_cq.0 as usize].push_back(WorkCompletion {
                wr_id: r.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm: None,
                qp_num: qp.qpn,
                src_qp: None,
                grh: false,
            });
        }
    }

    /// Posts a send work request.
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoQp(qpn))?;
        let op_name = match wr.op {
            SendOp::Send => "SEND",
            SendOp::SendWithImm(_) => "SEND_WITH_IMM",
            SendOp::Write { .. } => "RDMA_WRITE",
            SendOp::WriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            SendOp::Read { .. } => "RDMA_READ",
            SendOp::CompareSwap { .. } => "ATOMIC_CMP_AND_SWP",
            SendOp::FetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        };
        let allowed = match qp.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.op,
                SendOp::Send
                    | SendOp::SendWithImm(_)
                    | SendOp::Write { .. }
                    | SendOp::WriteWithImm { .. }
            ),
            QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)),
        };
        if !allowed {
            return Err(Error::OpNotSupported { op: op_name, qp_type: qp.qp_type });
        }
        let len = wr.len();
        match qp.qp_type {
            QpType::Ud => {
                if wr.ud.is_none() {
                    return Err(Error::InvalidWr("a UD send needs a destination"));
                }
                if len > qp.mtu() {
                    return Err(Error::TooLong { len, max: qp.mtu() });
                }
            }
            _ if len > 1 << 31 => return Err(Error::TooLong { len, max: 1 << 31 }),
            _ => {}
        }
        let atomic = matches!(wr.op, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. });
        if atomic && len != 8 {
            return Err(Error::InvalidWr("an atomic needs exactly 8 bytes of local buffer"));
        }
        if wr.inline {
            if matches!(wr.op, SendOp::Read { .. }) || atomic {
                return Err(Error::InvalidWr("only SEND and WRITE carry their payload inline"));
            }
            if len > u64::from(qp.caps.max_inline_data) {
                return Err(Error::TooLong { len, max: u64::from(qp.caps.max_inline_data) });
            }
        }
        match qp.state {
            QpState::Rts | QpState::Sqd => {}
            QpState::Err => {
                self.cqs[qp.send_cq.0 as usize].push_back(WorkCompletion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: wr.op.wc_opcode(),
                    byte_len: 0,
                    imm: None,
                    qp_num: qpn,
                    src_qp: None,
                    grh: false,
                });
                return Ok(());
            }
            s => return Err(Error::BadState { qpn, state: s, verb: "post_send" }),
        }
        if qp.sq.len() >= qp.caps.max_send_wr as usize {
            return Err(Error::QueueFull("send"));
        }
        let local_write = matches!(wr.op, SendOp::Read { .. }) || atomic;
        if !self.mrs.check_sgl(qp.pd, &wr.sgl, local_write) {
            // The HCA finds the bad key when it executes the WR: a local protection error,
            // and the QP goes to the error state.
            let wc = WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::LocProtErr,
                opcode: wr.op.wc_opcode(),
                byte_len: 0,
                imm: None,
                qp_num: qpn,
                src_qp: None,
                grh: false,
            };
            self.cqs[qp.send_cq.0 as usize].push_back(wc);
            Self::flush(&mut self.cqs, qp);
            return Ok(());
        }
        // Inline: the payload is taken now; the buffer is the application's again.
        let inline = if wr.inline {
            let mut data = vec![0u8; len as usize];
            if !gather(&self.mrs, &self.mem, &wr.sgl, 0, &mut data) {
                return Err(Error::InvalidWr("an inline payload could not be read"));
            }
            Some(data.into_boxed_slice())
        } else {
            None
        };
        let npkts = match wr.op {
            SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
            _ if qp.qp_type == QpType::Ud => 1,
            _ => qp.npkts(len),
        };
        let first_psn = qp.post_psn;
        qp.post_psn = first_psn.add(npkts);
        let seq = qp.wqe_seq;
        qp.wqe_seq += 1;
        qp.sq.push_back(SendWqe { wr, seq, first_psn, npkts, len, done_bytes: 0, inline });
        self.mark(qpn);
        Ok(())
    }

    /// Posts a receive work request.
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), Error> {
        let qp = self.qps.get_mut(&qpn).ok_or(Error::NoQp(qpn))?;
        if qp.srq.is_some() {
            return Err(Error::InvalidWr("the QP takes its receives from an SRQ"));
        }
        match qp.state {
            QpState::Reset => {
                return Err(Error::BadState { qpn, state: qp.state, verb: "post_recv" });
            }
            QpState::Err => {
                self.cqs[qp.recv_cq.0 as usize].push_back(WorkCompletion {
                    wr_id: wr.wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp_num: qpn,
                    src_qp: None,
                    grh: false,
                });
                return Ok(());
            }
            _ => {}
        }
        if qp.rq.len() >= qp.caps.max_recv_wr as usize {
            return Err(Error::QueueFull("receive"));
        }
        if !self.mrs.check_sgl(qp.pd, &wr.sgl, true) {
            return Err(Error::InvalidWr(
                "a receive buffer's key, bounds, PD or LOCAL_WRITE right is wrong",
            ));
        }
        qp.rq.push_back(wr);
        Ok(())
    }

    /// The next completion of `cq`.
    pub fn poll_completion(&mut self, cq: CqId) -> Option<WorkCompletion> {
        self.cqs.queues.get_mut(cq.0 as usize)?.pop_front()
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
            .filter_map(|q| match (q.timer, q.rnr_until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            })
            .min()
    }
}

/// Builds a packet; `None` only if the Repr is inconsistent, which this module never makes.
/// Datagram buffers back from the driver, reused so that a busy device does not allocate
/// (and page-fault) one per packet.
#[derive(Debug, Default)]
struct BufPool(Vec<Vec<u8>>);

impl BufPool {
    /// Buffers kept at most (a few MiB of 4 KiB packets).
    const KEEP: usize = 1024;

    fn take(&mut self, len: usize) -> Vec<u8> {
        match self.0.pop() {
            Some(mut b) => {
                b.clear();
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }
}

fn packet(
    pool: &mut BufPool,
    qp: &QueuePair,
    dst: IpAddr,
    repr: &roce::Repr,
    payload: &[u8],
) -> Option<Transmit> {
    let mut buf = pool.take(repr.buffer_len(payload.len()));
    repr.emit(payload, &mut buf).ok()?;
    Some(transmit(qp, dst, buf))
}

/// A packet whose payload (`len` bytes) `fill` writes straight into the datagram buffer;
/// `None` when `fill` fails.
fn packet_with(
    pool: &mut BufPool,
    qp: &QueuePair,
    dst: IpAddr,
    repr: &roce::Repr,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> bool,
) -> Option<Transmit> {
    let mut buf = pool.take(repr.buffer_len(len));
    let hdr = repr.header_len();
    if !fill(&mut buf[hdr..hdr + len]) {
        return None;
    }
    repr.emit_around(len, &mut buf).ok()?;
    Some(transmit(qp, dst, buf))
}

fn transmit(qp: &QueuePair, dst: IpAddr, buf: Vec<u8>) -> Transmit {
    let rqpn = qp.attr.dest.map_or(Qpn::new(0), |d| d.qpn);
    Transmit {
        dst,
        dst_port: wire::ROCEV2_UDP_PORT,
        src_port: src_port(qp.qpn, rqpn),
        tos: qp.attr.traffic_class,
        payload: buf,
    }
}

/// The BTH transport of a QP type.
fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

/// The RC opcodes a responder answers with.
const RC_ACKNOWLEDGE: Opcode = Opcode::new(Transport::Rc, Operation::Acknowledge);
const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode::new(Transport::Rc, Operation::AtomicAcknowledge);

fn wc(
    qp: &QueuePair,
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status,
        opcode,
        byte_len,
        imm: None,
        qp_num: qp.qpn,
        src_qp: None,
        grh: false,
    }
}

const ACK_SYNDROME: u8 = 0x1f;

impl<M: Memory> Endpoint<M> {
    /// The next packet to send, if any: control packets first, then each QP's responder
    /// output and requester packets, round-robin.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit> {
        if let Some(t) = self.ctrl.pop_front() {
            self.counters.sent_pkts += 1;
            return Some(t);
        }
        // Each QP in the queue gets one chance per call; one that sent goes to the back
        // (round-robin), one with nothing to send leaves until something concerns it again.
        for _ in 0..self.active.len() {
            let qpn = self.active.pop_front()?;
            let Some(qp) = self.qps.get_mut(&qpn) else { continue };
            qp.queued = false;
            let t = self.next_response(qpn).or_else(|| self.next_request(qpn, now));
            if let Some(t) = t {
                self.mark(qpn);
                self.counters.sent_pkts += 1;
                return Some(t);
            }
        }
        None
    }

    fn next_response(&mut self, qpn: Qpn) -> Option<Transmit> {
        let qp = self.qps.get_mut(&qpn)?;
        let dest = qp.attr.dest?;
        let front = qp.resp_out.front_mut()?;
        match front {
            RespOut::Ack { psn, syndrome, msn } => {
                let mut r = roce::Repr::new(bth::Repr::new(RC_ACKNOWLEDGE, dest.qpn, *psn));
                r.aeth = Some(Aeth { syndrome: *syndrome, msn: *msn & 0xff_ffff });
                qp.resp_out.pop_front();
                packet(&mut self.bufs, qp, dest.ip, &r, &[])
            }
            RespOut::Atomic { psn, orig, msn } => {
                let mut r = roce::Repr::new(bth::Repr::new(RC_ATOMIC_ACKNOWLEDGE, dest.qpn, *psn));
                r.aeth = Some(Aeth { syndrome: ACK_SYNDROME, msn: *msn & 0xff_ffff });
                r.atomic_ack_eth = Some(AtomicAckEth { orig: *orig });
                qp.resp_out.pop_front();
                packet(&mut self.bufs, qp, dest.ip, &r, &[])
            }
            RespOut::Read { first_psn, mr, offset, len, next, msn } => {
                let mtu = u64::from(qp.attr.path_mtu.bytes());
                let npkts = (len.div_ceil(mtu)).max(1) as u32;
                let k = *next;
                let off = u64::from(k) * mtu;
                let chunk = (*len - off.min(*len)).min(mtu) as usize;
                let op = match (npkts, k) {
                    (1, _) => Operation::RdmaReadResponseOnly,
                    (_, 0) => Operation::RdmaReadResponseFirst,
                    (n, k) if k == n - 1 => Operation::RdmaReadResponseLast,
                    _ => Operation::RdmaReadResponseMiddle,
                };
                let opcode = Opcode::new(Transport::Rc, op);
                let mut r = roce::Repr::new(bth::Repr::new(opcode, dest.qpn, first_psn.add(k)));
                if op != Operation::RdmaReadResponseMiddle {
                    r.aeth = Some(Aeth { syndrome: ACK_SYNDROME, msn: *msn & 0xff_ffff });
                }
                let (id, at) = (mr.id, *offset + off);
                *next += 1;
                if *next >= npkts {
                    qp.resp_out.pop_front();
                }
                let mem = &self.mem;
                packet_with(&mut self.bufs, qp, dest.ip, &r, chunk, |buf| {
                    mem.read(id, at, buf).is_ok()
                })
            }
        }
    }

    fn next_request(&mut self, qpn: Qpn, now: Instant) -> Option<Transmit> {
        let qp = self.qps.get_mut(&qpn)?;
        if qp.state != QpState::Rts || qp.rnr_until.is_some() || qp.next_psn == qp.post_psn {
            return None;
        }
        let mtu = qp.mtu();
        // The WQE the next PSN belongs to: nearly always the one the last packet came from
        // or the next (a deep send queue would make a search cost a packet dearly); else
        // searched from the newest.
        let holds = |i: usize| {
            let w = qp.sq.get(i)?;
            let d = qp.next_psn.diff(w.first_psn);
            (d >= 0 && (d as u32) < w.npkts).then_some((i, d as u32))
        };
        let guess = qp.sq.front().map_or(0, |f| qp.cursor.wrapping_sub(f.seq) as usize);
        let idx = holds(guess).or_else(|| holds(guess.wrapping_add(1))).or_else(|| {
            for (i, w) in qp.sq.iter().enumerate().rev() {
                if qp.next_psn.diff(w.first_psn) >= 0 {
                    return holds(i);
                }
            }
            None
        });
        let (i, d) = idx?;
        qp.cursor = qp.sq[i].seq;
        let w = &qp.sq[i];
        // A READ or atomic starts only while fewer than max_rd_atomic precede it.
        if w.is_read_or_atomic() && d == 0 {
            let limit = usize::from(qp.attr.max_rd_atomic.max(1));
            if qp.sq.iter().take(i).filter(|w| w.is_read_or_atomic()).nth(limit - 1).is_some() {
                return None;
            }
        }
        let retransmit = qp.next_psn.diff(qp.resend_until) < 0;
        let psn = qp.next_psn;
        let (dest_ip, dest_qpn) = match (qp.qp_type, w.wr.ud, qp.attr.dest) {
            (QpType::Ud, Some(ud), _) => (ud.ip, ud.qpn),
            (_, _, Some(p)) => (p.ip, p.qpn),
            _ => return None,
        };
        let transport = transport_of(qp.qp_type);
        let mut b = bth::Repr::new(Opcode::new(transport, Operation::SendFirst), dest_qpn, psn);
        let mut gather_at = None;
        let mut consumed = 1u32;
        let mut last_of_wqe = false;
        let mut r;
        match w.wr.op {
            SendOp::Send
            | SendOp::SendWithImm(_)
            | SendOp::Write { .. }
            | SendOp::WriteWithImm { .. } => {
                let off = u64::from(d) * mtu;
                let chunk = (w.len - off.min(w.len)).min(mtu) as usize;
                let first = d == 0;
                let last = d == w.npkts - 1;
                last_of_wqe = last;
                let imm = match w.wr.op {
                    SendOp::SendWithImm(i) | SendOp::WriteWithImm { imm: i, .. } => Some(i),
                    _ => None,
                };
                let write = matches!(w.wr.op, SendOp::Write { .. } | SendOp::WriteWithImm { .. });
                use Operation::*;
                let op = match (write, first, last, imm.is_some()) {
                    (false, true, true, false) => SendOnly,
                    (false, true, true, true) => SendOnlyWithImmediate,
                    (false, true, false, _) => SendFirst,
                    (false, false, false, _) => SendMiddle,
                    (false, false, true, false) => SendLast,
                    (false, false, true, true) => SendLastWithImmediate,
                    (true, true, true, false) => RdmaWriteOnly,
                    (true, true, true, true) => RdmaWriteOnlyWithImmediate,
                    (true, true, false, _) => RdmaWriteFirst,
                    (true, false, false, _) => RdmaWriteMiddle,
                    (true, false, true, false) => RdmaWriteLast,
                    (true, false, true, true) => RdmaWriteLastWithImmediate,
                };
                b.opcode = Opcode::new(transport, op);
                b.solicited = last && w.wr.solicited;
                r = roce::Repr::new(b);
                if let (
                    true,
                    SendOp::Write { remote_addr, rkey }
                    | SendOp::WriteWithImm { remote_addr, rkey, .. },
                ) = (first, w.wr.op)
                {
                    r.reth = Some(Reth { va: remote_addr, rkey, dma_len: w.len as u32 });
                }
                if last {
                    r.immdt = imm.map(|value| ImmDt { value });
                }
                if let (QpType::Ud, Some(ud)) = (qp.qp_type, w.wr.ud) {
                    let qkey = if ud.qkey.0 & 0x8000_0000 != 0 { qp.attr.qkey } else { ud.qkey };
                    r.deth = Some(Deth { qkey, src_qp: qp.qpn });
                }
                gather_at = Some((off, chunk));
            }
            SendOp::Read { remote_addr, rkey } => {
                let off = u64::from(d) * mtu;
                b.opcode = Opcode::new(Transport::Rc, Operation::RdmaReadRequest);
                r = roce::Repr::new(b);
                r.reth = Some(Reth {
                    va: remote_addr + off,
                    rkey,
                    dma_len: (w.len - off.min(w.len)) as u32,
                });
                consumed = w.npkts - d;
            }
            SendOp::CompareSwap { remote_addr, rkey, compare, swap } => {
                b.opcode = Opcode::new(Transport::Rc, Operation::CompareSwap);
                r = roce::Repr::new(b);
                r.atomic_eth = Some(AtomicEth { va: remote_addr, rkey, swap_add: swap, compare });
            }
            SendOp::FetchAdd { remote_addr, rkey, add } => {
                b.opcode = Opcode::new(Transport::Rc, Operation::FetchAdd);
                r = roce::Repr::new(b);
                r.atomic_eth = Some(AtomicEth { va: remote_addr, rkey, swap_add: add, compare: 0 });
            }
        }
        if qp.qp_type == QpType::Rc {
            let req = matches!(
                w.wr.op,
                SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
            );
            qp.packets_since_ackreq += 1;
            // During a go-back-N restart every packet asks for an ACK: any one that returns
            // proves progress, so a lost ACK does not cost a retry.
            if req || last_of_wqe || retransmit || qp.packets_since_ackreq >= self.cfg.ack_req_every
            {
                r.bth.ack_req = true;
                qp.packets_since_ackreq = 0;
            }
        }
        let t = match gather_at {
            None => packet(&mut self.bufs, qp, dest_ip, &r, &[])?,
            Some((off, chunk)) => {
                let (mrs, mem, wqe) = (&self.mrs, &self.mem, &qp.sq[i]);
                let t =
                    packet_with(&mut self.bufs, qp, dest_ip, &r, chunk, |buf| match &wqe.inline {
                        Some(data) => {
                            let at = off as usize;
                            match data.get(at..at + buf.len()) {
                                Some(src) => {
                                    buf.copy_from_slice(src);
                                    true
                                }
                                None => false,
                            }
                        }
                        None => gather(mrs, mem, &wqe.wr.sgl, off, buf),
                    });
                match t {
                    Some(t) => t,
                    None => {
                        // A local key, bound or region that is gone: the WQE fails here.
                        let wqe = qp.sq.remove(i)?;
                        self.cqs[qp.send_cq.0 as usize].push_back(wc(
                            qp,
                            wqe.wr.wr_id,
                            WcStatus::LocProtErr,
                            wqe.wr.op.wc_opcode(),
                            0,
                        ));
                        Self::flush(&mut self.cqs, qp);
                        return None;
                    }
                }
            }
        };
        qp.next_psn = psn.add(consumed);
        if retransmit {
            self.counters.retransmitted_pkts += 1;
        }
        match qp.qp_type {
            QpType::Rc => {
                if qp.timer.is_none() {
                    qp.timer = retransmit_timeout(qp.attr.timeout).map(|d| now + d);
                }
            }
            _ => {
                // Unreliable: a WQE is done once its last packet is out.
                if last_of_wqe {
                    let wqe = qp.sq.remove(i)?;
                    qp.una = qp.next_psn;
                    self.counters.rdma_sends += 1;
                    if wqe.wr.signaled {
                        self.cqs[qp.send_cq.0 as usize].push_back(wc(
                            qp,
                            wqe.wr.wr_id,
                            WcStatus::Success,
                            wqe.wr.op.wc_opcode(),
                            0,
                        ));
                    }
                }
            }
        }
        Some(t)
    }

    /// Lets timers run: retransmission (go-back-N from the oldest unacknowledged PSN, or
    /// RETRY_EXC_ERR when the retries are spent) and the end of RNR waits.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qp in self.qps.values_mut() {
            let mut fired = false;
            if qp.rnr_until.is_some_and(|t| t <= now) {
                qp.rnr_until = None;
                fired = true;
            }
            if fired && !qp.queued {
                qp.queued = true;
                self.active.push_back(qp.qpn);
            }
            let Some(t) = qp.timer else { continue };
            if t > now {
                continue;
            }
            if !qp.queued {
                qp.queued = true;
                self.active.push_back(qp.qpn);
            }
            qp.timer = None;
            if qp.state != QpState::Rts && qp.state != QpState::Sqd || !qp.outstanding() {
                continue;
            }
            self.counters.local_ack_timeout_err += 1;
            if qp.retry_left == 0 {
                self.counters.retry_exceeded_err += 1;
                Self::fail_head(&mut self.cqs, qp, WcStatus::RetryExcErr);
                continue;
            }
            qp.retry_left -= 1;
            let una = qp.una;
            Self::rewind(&mut self.counters, qp, una);
        }
    }

    /// Restarts sending at `psn` (go-back-N).
    fn rewind(counters: &mut Counters, qp: &mut QueuePair, psn: Psn) {
        counters.completer_retry_err += 1;
        if qp.next_psn.diff(qp.resend_until) > 0 {
            qp.resend_until = qp.next_psn;
        }
        qp.next_psn = psn;
        qp.packets_since_ackreq = 0;
        qp.timer = None;
    }

    /// Completes the oldest send WQE with `status` and moves the QP to the error state.
    fn fail_head(cqs: &mut CqTable, qp: &mut QueuePair, status: WcStatus) {
        if let Some(w) = qp.sq.pop_front() {
            cqs[qp.send_cq.0 as usize].push_back(wc(
                qp,
                w.wr.wr_id,
                status,
                w.wr.op.wc_opcode(),
                0,
            ));
        }
        Self::flush(cqs, qp);
    }

    /// Takes a received RoCEv2 UDP payload (BTH … ICRC).
    pub fn handle_datagram(&mut self, now: Instant, meta: &RecvMeta<'_>, bytes: &[u8]) {
        let Ok(pkt) = roce::Packet::new_checked(bytes) else {
            self.counters.dropped_pkts += 1;
            return;
        };
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
                self.counters.icrc_errors += 1;
                return;
            }
            None => self.counters.icrc_unverified += 1,
        }
        self.counters.rcvd_pkts += 1;
        let op = pkt.opcode();
        if meta.ecn == 3 {
            self.counters.ecn_ce_rcvd += 1;
        }
        if op == Opcode::CNP {
            self.counters.cnp_rcvd += 1;
            return;
        }
        let qpn = pkt.bth().dest_qp();
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.dropped_pkts += 1;
            return;
        };
        let expected = match qp.qp_type {
            QpType::Rc => wire::Transport::Rc,
            QpType::Uc => wire::Transport::Uc,
            QpType::Ud => wire::Transport::Ud,
        };
        let receiving = matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd);
        let from_peer = qp.qp_type == QpType::Ud || qp.attr.dest.is_some_and(|d| d.ip == meta.src);
        if op.transport() != expected || op.name().is_none() || !receiving || !from_peer {
            self.counters.dropped_pkts += 1;
            return;
        }
        if meta.ecn == 3 {
            let to = match (qp.qp_type, pkt.deth(), qp.attr.dest) {
                (QpType::Ud, Some(d), _) => Some((meta.src, d.src_qp)),
                (_, _, Some(p)) => Some((p.ip, p.qpn)),
                _ => None,
            };
            if let Some((ip, dqp)) = to {
                if qp.last_cnp.is_some_and(|t| now.saturating_since(t) < self.cfg.cnp_interval) {
                    self.counters.cnp_rate_limited += 1;
                } else {
                    qp.last_cnp = Some(now);
                    let mut b = bth::Repr::new(Opcode::CNP, dqp, Psn::new(0));
                    b.becn = true;
                    if let Some(t) = packet(&mut self.bufs, qp, ip, &roce::Repr::new(b), &[0u8; 16])
                    {
                        self.counters.cnp_sent += 1;
                        self.ctrl.push_back(t);
                    }
                }
            }
        }
        let operation = op.operation();
        if qp.qp_type == QpType::Rc && operation.is_some_and(Operation::is_response) {
            self.on_response(now, qpn, &pkt);
        } else {
            // A packet that starts consuming a receive takes one from the SRQ, if the QP has
            // one and holds none already.
            if let Some(id) = qp.srq
                && qp.rq.is_empty()
                && operation.is_some_and(Operation::consumes_receive_at_start)
                && let Some(r) = self.cqs.srq_pop(id)
            {
                qp.rq.push_back(r);
            }
            match qp.qp_type {
                QpType::Rc => self.on_rc_request(qpn, &pkt),
                QpType::Uc => self.on_uc_request(qpn, &pkt),
                QpType::Ud => self.on_ud_request(qpn, meta, &pkt),
            }
        }
        self.mark(qpn);
    }
}

impl<M: Memory> Endpoint<M> {
    /// The requester's side: ACKs, NAKs, READ responses and atomic ACKs.
    fn on_response(&mut self, now: Instant, qpn: Qpn, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
            return;
        }
        let psn = pkt.bth().psn();
        // A response must be for a PSN this requester sent and has not had acknowledged.
        let sent = qp.next_psn.diff(qp.una).max(0);
        let behind = psn.diff(qp.una);
        let rto = retransmit_timeout(qp.attr.timeout);
        match pkt.opcode().operation() {
            Some(Operation::Acknowledge) => {
                let Some(aeth) = pkt.aeth() else { return };
                let syndrome = aeth.syndrome();
                match syndrome {
                    Syndrome::RnrNak(_) => self.counters.rcvd_rnr_err += 1,
                    Syndrome::Nak(NakCode::PsnSequenceError) => self.counters.rcvd_seq_err += 1,
                    _ => {}
                }
                // Only a PSN this requester sent and has not seen acknowledged
                // (0 <= behind < sent) counts; anything else is stale or forged.
                if behind < 0 || behind >= sent {
                    return;
                }
                let nak = match syndrome {
                    Syndrome::Ack(_) => {
                        Self::ack_through(&mut self.cqs, &mut self.counters, qp, psn, now, rto);
                        return;
                    }
                    Syndrome::Reserved(_) => return,
                    nak => nak,
                };
                // A NAK acknowledges every PSN before its own.
                let before = psn.add(0xff_ffff);
                Self::ack_through(&mut self.cqs, &mut self.counters, qp, before, now, rto);
                match nak {
                    Syndrome::RnrNak(t) => {
                        if qp.rnr_left == 0 {
                            self.counters.retry_rnr_exceeded_err += 1;
                            Self::fail_head(&mut self.cqs, qp, WcStatus::RnrRetryExcErr);
                            return;
                        }
                        if qp.rnr_left != 7 {
                            qp.rnr_left -= 1;
                        }
                        Self::rewind(&mut self.counters, qp, psn);
                        qp.rnr_until = Some(now + t.duration());
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        if qp.retry_left == 0 {
                            self.counters.retry_exceeded_err += 1;
                            Self::fail_head(&mut self.cqs, qp, WcStatus::RetryExcErr);
                            return;
                        }
                        qp.retry_left -= 1;
                        Self::rewind(&mut self.counters, qp, psn);
                    }
                    Syndrome::Nak(code) => {
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            _ => WcStatus::RemOpErr,
                        };
                        Self::fail_head(&mut self.cqs, qp, status);
                    }
                    Syndrome::Ack(_) | Syndrome::Reserved(_) => {}
                }
            }
            Some(Operation::AtomicAcknowledge) => {
                let Some(ack) = pkt.atomic_ack_eth() else { return };
                let Some(w) = qp.sq.front() else { return };
                let atomic =
                    matches!(w.wr.op, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. });
                if atomic && behind > 0 && behind < sent && qp.next_psn.diff(qp.una) > 0 {
                    // A later atomic's response: the responder executed ours and its response
                    // was lost (an implied NAK). Ask again now; it returns the saved result.
                    let una = qp.una;
                    Self::rewind(&mut self.counters, qp, una);
                    return;
                }
                if !atomic || psn != w.first_psn || behind != 0 {
                    return;
                }
                // The original value lands in the local buffer in host order.
                let orig = ack.orig.to_ne_bytes();
                if scatter(&self.mrs, &mut self.mem, &w.wr.sgl, 0, &orig).is_err() {
                    Self::fail_head(&mut self.cqs, qp, WcStatus::LocProtErr);
                    return;
                }
                Self::complete_head(&mut self.cqs, &mut self.counters, qp, 8);
                qp.una = psn.add(1);
                Self::progress(qp, now, rto);
            }
            _ => {
                // READ responses, in order.
                let Some(w) = qp.sq.front() else { return };
                if !matches!(w.wr.op, SendOp::Read { .. }) {
                    return;
                }
                if behind < 0 {
                    return; // duplicate
                }
                if behind > 0
                    || psn.diff(w.first_psn) < 0
                    || psn.diff(w.first_psn) >= w.npkts as i32
                {
                    // A gap: ask again from the first missing response (once per gap).
                    if qp.next_psn.diff(qp.una) > 0 && behind < sent {
                        let una = qp.una;
                        Self::rewind(&mut self.counters, qp, una);
                    }
                    return;
                }
                let mtu = qp.mtu();
                let k = psn.diff(w.first_psn) as u64;
                let data = pkt.payload();
                let expect = (w.len - (k * mtu).min(w.len)).min(mtu) as usize;
                if data.len() != expect {
                    Self::fail_head(&mut self.cqs, qp, WcStatus::BadRespErr);
                    return;
                }
                if scatter(&self.mrs, &mut self.mem, &w.wr.sgl, k * mtu, data).is_err() {
                    Self::fail_head(&mut self.cqs, qp, WcStatus::LocProtErr);
                    return;
                }
                let Some(w) = qp.sq.front_mut() else { return };
                w.done_bytes += data.len() as u64;
                let last = k as u32 == w.npkts - 1;
                let total = w.len as u32;
                qp.una = psn.add(1);
                if last {
                    Self::complete_head(&mut self.cqs, &mut self.counters, qp, total);
                }
                Self::progress(qp, now, rto);
            }
        }
    }

    /// Forward progress: retries are refilled and the timer restarted.
    fn progress(qp: &mut QueuePair, now: Instant, rto: Option<Duration>) {
        qp.retry_left = qp.attr.retry_cnt;
        qp.rnr_left = qp.attr.rnr_retry;
        qp.timer = if qp.outstanding() { rto.map(|d| now + d) } else { None };
    }

    fn complete_head(
        cqs: &mut [VecDeque<WorkCompletion>],
        counters: &mut Counters,
        qp: &mut QueuePair,
        byte_len: u32,
    ) {
        if let Some(w) = qp.sq.pop_front() {
            counters.rdma_sends += 1;
            if w.wr.signaled {
                cqs[qp.send_cq.0 as usize].push_back(wc(
                    qp,
                    w.wr.wr_id,
                    WcStatus::Success,
                    w.wr.op.wc_opcode(),
                    byte_len,
                ));
            }
        }
    }

    /// An acknowledgement of every PSN up to and including `p`.
    fn ack_through(
        cqs: &mut [VecDeque<WorkCompletion>],
        counters: &mut Counters,
        qp: &mut QueuePair,
        p: Psn,
        now: Instant,
        rto: Option<Duration>,
    ) {
        if p.diff(qp.una) < 0 {
            return;
        }
        let mut advanced = false;
        while let Some(w) = qp.sq.front() {
            if w.is_read_or_atomic() {
                if p.diff(w.first_psn) >= 0 && qp.next_psn.diff(qp.una) > 0 {
                    // The responder is past a READ/atomic whose response we lack: an implied
                    // NAK. Ask again from the first missing response.
                    let una = qp.una;
                    Self::rewind(counters, qp, una);
                }
                break;
            }
            if p.diff(w.last_psn()) >= 0 {
                let next = w.last_psn().add(1);
                Self::complete_head(cqs, counters, qp, 0);
                qp.una = next;
                advanced = true;
            } else {
                if p.diff(qp.una) >= 0 {
                    qp.una = p.add(1);
                    advanced = true;
                }
                break;
            }
        }
        if qp.sq.is_empty() {
            qp.una = qp.next_psn;
        }
        if advanced {
            Self::progress(qp, now, rto);
        }
    }
}

/// What a request packet is, from its operation bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Req {
    Send { first: bool, last: bool, imm: bool },
    Write { first: bool, last: bool, imm: bool },
    Read,
    Atomic,
}

fn classify(operation: Option<Operation>) -> Option<Req> {
    use Operation::*;
    Some(match operation? {
        SendFirst => Req::Send { first: true, last: false, imm: false },
        SendMiddle => Req::Send { first: false, last: false, imm: false },
        SendLast | SendLastWithInvalidate => Req::Send { first: false, last: true, imm: false },
        SendLastWithImmediate => Req::Send { first: false, last: true, imm: true },
        SendOnly | SendOnlyWithInvalidate => Req::Send { first: true, last: true, imm: false },
        SendOnlyWithImmediate => Req::Send { first: true, last: true, imm: true },
        RdmaWriteFirst => Req::Write { first: true, last: false, imm: false },
        RdmaWriteMiddle => Req::Write { first: false, last: false, imm: false },
        RdmaWriteLast => Req::Write { first: false, last: true, imm: false },
        RdmaWriteLastWithImmediate => Req::Write { first: false, last: true, imm: true },
        RdmaWriteOnly => Req::Write { first: true, last: true, imm: false },
        RdmaWriteOnlyWithImmediate => Req::Write { first: true, last: true, imm: true },
        RdmaReadRequest => Req::Read,
        CompareSwap | FetchAdd => Req::Atomic,
        _ => return None,
    })
}

/// How a request ended at the responder.
enum Outcome {
    /// Processed; the PSN advances.
    Done,
    /// No receive posted: RNR NAK, the PSN stays.
    Rnr,
    /// A class C/D error: NAK with this code and the QP goes to the error state.
    Nak(NakCode),
}

impl<M: Memory> Endpoint<M> {
    fn queue_ack(qp: &mut QueuePair, psn: Psn) {
        let msn = qp.msn;
        if let Some(RespOut::Ack { psn: p, syndrome: ACK_SYNDROME, msn: m }) =
            qp.resp_out.back_mut()
        {
            // ACKs are cumulative: the later PSN of the two covers the other.
            if psn.diff(*p) > 0 {
                *p = psn;
                *m = msn;
            }
            return;
        }
        qp.resp_out.push_back(RespOut::Ack { psn, syndrome: ACK_SYNDROME, msn });
    }

    /// The RC responder.
    fn on_rc_request(&mut self, qpn: Qpn, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        let b = pkt.bth();
        let psn = b.psn();
        let d = psn.diff(qp.epsn);
        let Some(req) = classify(pkt.opcode().operation()) else {
            self.counters.dropped_pkts += 1;
            return;
        };
        if d > 0 {
            // Ahead of the expected PSN: a packet was lost. NAK once per gap.
            self.counters.out_of_seq_request += 1;
            if !qp.nak_sent {
                qp.nak_sent = true;
                self.counters.sent_seq_err += 1;
                let msn = qp.msn;
                qp.resp_out.push_back(RespOut::Ack { psn: qp.epsn, syndrome: 0x60, msn });
            }
            return;
        }
        if d < 0 {
            self.counters.duplicate_request += 1;
            match req {
                Req::Read => {
                    let found = qp.resources.iter().rev().find_map(|r| match *r {
                        Resource::Read { psn: p, npkts, mr, offset, len } => {
                            let k = psn.diff(p);
                            (k >= 0 && (k as u32) < npkts).then_some((p, mr, offset, len, k as u32))
                        }
                        _ => None,
                    });
                    if let Some((first_psn, mr, offset, len, next)) = found {
                        let msn = qp.msn;
                        qp.resp_out.push_back(RespOut::Read {
                            first_psn,
                            mr,
                            offset,
                            len,
                            next,
                            msn,
                        });
                    }
                }
                Req::Atomic => {
                    let found = qp.resources.iter().rev().find_map(|r| match *r {
                        Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                        _ => None,
                    });
                    if let Some(orig) = found {
                        let msn = qp.msn;
                        qp.resp_out.push_back(RespOut::Atomic { psn, orig, msn });
                    }
                }
                Req::Send { last, .. } | Req::Write { last, .. } => {
                    // Linux rxe's completer (6.1) stalls for good on a message it is
                    // resending when an ACK of the message's last PSN comes while it is
                    // still sending it: it takes that ACK as progress only and waits for
                    // another once the last packet is out. If that one is lost it has
                    // nothing unacknowledged left to retry and never re-arms its timer
                    // (docs/rxe-reference.md). So a duplicate is ACKed at its own PSN,
                    // never ahead of what the requester has sent again, and the ACK of a
                    // duplicate that ends a message goes twice: that is the one ACK such
                    // a requester still waits for. Both only ever follow a retransmission.
                    if b.ack_req() {
                        Self::queue_ack(qp, psn);
                        if last {
                            let msn = qp.msn;
                            qp.resp_out.push_back(RespOut::Ack {
                                psn,
                                syndrome: ACK_SYNDROME,
                                msn,
                            });
                        }
                    }
                }
            }
            return;
        }
        let outcome = Self::execute(
            &self.mrs,
            &mut self.mem,
            &mut self.cqs,
            &mut self.counters,
            qp,
            pkt,
            req,
            false,
        );
        match outcome {
            Outcome::Done => {
                qp.nak_sent = false;
                if !matches!(req, Req::Read | Req::Atomic) {
                    qp.epsn = psn.add(1);
                    if b.ack_req() {
                        Self::queue_ack(qp, psn);
                    }
                }
            }
            Outcome::Rnr => {
                self.counters.send_rnr_err += 1;
                let msn = qp.msn;
                let syndrome = 0x20 | (qp.attr.min_rnr_timer & 0x1f);
                qp.resp_out.push_back(RespOut::Ack { psn, syndrome, msn });
            }
            Outcome::Nak(code) => {
                self.counters.sent_nak_err += 1;
                let Some(dest) = qp.attr.dest else { return };
                let mut r = roce::Repr::new(bth::Repr::new(RC_ACKNOWLEDGE, dest.qpn, psn));
                r.aeth =
                    Some(Aeth { syndrome: Syndrome::Nak(code).to_raw(), msn: qp.msn & 0xff_ffff });
                if let Some(t) = packet(&mut self.bufs, qp, dest.ip, &r, &[]) {
                    self.ctrl.push_back(t);
                }
                Self::flush(&mut self.cqs, qp);
            }
        }
    }

    /// Carries out one in-sequence request packet. `unreliable` (UC) drops instead of NAKing.
    #[allow(clippy::too_many_arguments)]
    fn execute(
        mrs: &MrTable,
        mem: &mut M,
        cqs: &mut [VecDeque<WorkCompletion>],
        counters: &mut Counters,
        qp: &mut QueuePair,
        pkt: &roce::Packet<&[u8]>,
        req: Req,
        unreliable: bool,
    ) -> Outcome {
        let mtu = qp.mtu() as usize;
        let data = pkt.payload();
        let psn = pkt.bth().psn();
        // Opcode sequence: a message in progress continues, else a new one starts.
        let continues = matches!(
            (&qp.in_msg, req),
            (Some(InMsg::Send { .. }), Req::Send { first: false, .. })
                | (Some(InMsg::Write { .. }), Req::Write { first: false, .. })
        );
        let starts = qp.in_msg.is_none()
            && matches!(
                req,
                Req::Send { first: true, .. }
                    | Req::Write { first: true, .. }
                    | Req::Read
                    | Req::Atomic
            );
        if !continues && !starts {
            return Outcome::Nak(NakCode::InvalidRequest);
        }
        // Payload sizes: FIRST and MIDDLE carry exactly the MTU, LAST 1..=MTU, ONLY 0..=MTU.
        let (first, last) = match req {
            Req::Send { first, last, .. } | Req::Write { first, last, .. } => (first, last),
            _ => (true, true),
        };
        let size_ok = match (first, last) {
            (true, true) => data.len() <= mtu,
            (_, false) => data.len() == mtu,
            (false, true) => !data.is_empty() && data.len() <= mtu,
        };
        if !size_ok {
            return Outcome::Nak(NakCode::InvalidRequest);
        }
        match req {
            Req::Send { first, last, imm } => {
                if first {
                    let Some(recv) = qp.rq.pop_front() else { return Outcome::Rnr };
                    qp.in_msg = Some(InMsg::Send { recv, offset: 0, imm: None });
                }
                let Some(InMsg::Send { recv, offset, imm: im }) = qp.in_msg.as_mut() else {
                    return Outcome::Nak(NakCode::InvalidRequest);
                };
                if imm {
                    *im = pkt.immdt().map(|i| i.value);
                }
                if let Err(too_long) = scatter(mrs, mem, &recv.sgl, *offset, data) {
                    let status = if too_long { WcStatus::LocLenErr } else { WcStatus::LocProtErr };
                    let wr_id = recv.wr_id;
                    qp.in_msg = None;
                    cqs[qp.recv_cq.0 as usize].push_back(wc(qp, wr_id, status, WcOpcode::Recv, 0));
                    return Outcome::Nak(NakCode::InvalidRequest);
                }
                *offset += data.len() as u64;
                if last {
                    let (wr_id, n, imm) = (recv.wr_id, *offset as u32, *im);
                    qp.in_msg = None;
                    qp.msn = qp.msn.wrapping_add(1);
                    counters.rdma_recvs += 1;
                    let mut c = wc(qp, wr_id, WcStatus::Success, WcOpcode::Recv, n);
                    c.imm = imm;
                    cqs[qp.recv_cq.0 as usize].push_back(c);
                }
                Outcome::Done
            }
            Req::Write { first, last, imm } => {
                // A WRITE with immediate consumes a receive: look before touching anything.
                if imm && qp.rq.is_empty() {
                    return Outcome::Rnr;
                }
                if first {
                    let Some(reth) = pkt.reth() else {
                        return Outcome::Nak(NakCode::InvalidRequest);
                    };
                    let total = u64::from(reth.dma_len);
                    let Some((mr, offset)) = mrs.target(
                        qp.pd,
                        reth.rkey,
                        reth.va,
                        total,
                        Access::REMOTE_WRITE,
                        qp.attr.access,
                    ) else {
                        return Outcome::Nak(NakCode::RemoteAccessError);
                    };
                    qp.in_msg = Some(InMsg::Write { mr, offset, remaining: total, total });
                }
                let Some(InMsg::Write { mr, offset, remaining, total }) = qp.in_msg.as_mut() else {
                    return Outcome::Nak(NakCode::InvalidRequest);
                };
                let n = data.len() as u64;
                if n > *remaining || (last && n != *remaining) {
                    qp.in_msg = None;
                    return Outcome::Nak(NakCode::InvalidRequest);
                }
                if n > 0 && mem.write(mr.id, *offset, data).is_err() {
                    qp.in_msg = None;
                    return Outcome::Nak(NakCode::RemoteOperationalError);
                }
                *offset += n;
                *remaining -= n;
                if last {
                    let total = *total as u32;
                    qp.in_msg = None;
                    qp.msn = qp.msn.wrapping_add(1);
                    if imm && let Some(recv) = qp.rq.pop_front() {
                        counters.rdma_recvs += 1;
                        let mut c =
                            wc(qp, recv.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm, total);
                        c.imm = pkt.immdt().map(|i| i.value);
                        cqs[qp.recv_cq.0 as usize].push_back(c);
                    }
                }
                Outcome::Done
            }
            Req::Read if !unreliable => {
                let Some(reth) = pkt.reth() else { return Outcome::Nak(NakCode::InvalidRequest) };
                let len = u64::from(reth.dma_len);
                let Some((mr, offset)) =
                    mrs.target(qp.pd, reth.rkey, reth.va, len, Access::REMOTE_READ, qp.attr.access)
                else {
                    return Outcome::Nak(NakCode::RemoteAccessError);
                };
                let npkts = (len.div_ceil(mtu as u64)).max(1) as u32;
                Self::remember(qp, Resource::Read { psn, npkts, mr, offset, len });
                qp.msn = qp.msn.wrapping_add(1);
                let msn = qp.msn;
                qp.resp_out.push_back(RespOut::Read {
                    first_psn: psn,
                    mr,
                    offset,
                    len,
                    next: 0,
                    msn,
                });
                qp.epsn = psn.add(npkts);
                Outcome::Done
            }
            Req::Atomic if !unreliable => {
                let Some(a) = pkt.atomic_eth() else {
                    return Outcome::Nak(NakCode::InvalidRequest);
                };
                if a.va % 8 != 0 {
                    return Outcome::Nak(NakCode::InvalidRequest);
                }
                let Some((mr, offset)) =
                    mrs.check_remote(qp.pd, a.rkey, a.va, 8, Access::REMOTE_ATOMIC, qp.attr.access)
                else {
                    return Outcome::Nak(NakCode::RemoteAccessError);
                };
                let r = if pkt.opcode().operation() == Some(Operation::CompareSwap) {
                    mem.compare_swap(mr.id, offset, a.compare, a.swap_add)
                } else {
                    mem.fetch_add(mr.id, offset, a.swap_add)
                };
                let Ok(orig) = r else { return Outcome::Nak(NakCode::RemoteOperationalError) };
                Self::remember(qp, Resource::Atomic { psn, orig });
                qp.msn = qp.msn.wrapping_add(1);
                let msn = qp.msn;
                qp.resp_out.push_back(RespOut::Atomic { psn, orig, msn });
                qp.epsn = psn.add(1);
                Outcome::Done
            }
            _ => Outcome::Nak(NakCode::InvalidRequest),
        }
    }

    fn remember(qp: &mut QueuePair, r: Resource) {
        while qp.resources.len() >= usize::from(qp.attr.max_dest_rd_atomic.max(1)) {
            qp.resources.pop_front();
        }
        qp.resources.push_back(r);
    }

    /// The UC responder: no ACKs, no NAKs; a gap or an error drops the rest of the message.
    fn on_uc_request(&mut self, qpn: Qpn, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        let psn = pkt.bth().psn();
        let Some(req) = classify(pkt.opcode().operation()) else {
            self.counters.dropped_pkts += 1;
            return;
        };
        let starts = matches!(req, Req::Send { first: true, .. } | Req::Write { first: true, .. });
        if psn.diff(qp.epsn) < 0 {
            // The duplicate region: UC never delivers a packet twice.
            self.counters.duplicate_request += 1;
            return;
        }
        if psn != qp.epsn || starts {
            // A new message, or a gap: whatever was in progress is abandoned (its receive is
            // reused, not completed).
            if psn != qp.epsn {
                self.counters.out_of_seq_request += 1;
            }
            if let Some(InMsg::Send { recv, .. }) = qp.in_msg.take() {
                qp.rq.push_front(recv);
            }
            if !starts {
                qp.epsn = psn.add(1);
                self.counters.dropped_pkts += 1;
                return;
            }
        }
        qp.epsn = psn.add(1);
        match Self::execute(
            &self.mrs,
            &mut self.mem,
            &mut self.cqs,
            &mut self.counters,
            qp,
            pkt,
            req,
            true,
        ) {
            Outcome::Done => {}
            Outcome::Rnr => self.counters.rcv_no_wqe += 1,
            Outcome::Nak(_) => {
                self.counters.dropped_pkts += 1;
                if let Some(InMsg::Send { recv, .. }) = qp.in_msg.take() {
                    qp.rq.push_front(recv);
                }
            }
        }
    }

    /// The UD responder: Q_Key check, the 40-byte GRH area, then the payload.
    fn on_ud_request(&mut self, qpn: Qpn, meta: &RecvMeta<'_>, pkt: &roce::Packet<&[u8]>) {
        let Some(qp) = self.qps.get_mut(&qpn) else { return };
        let Some(deth) = pkt.deth() else {
            self.counters.dropped_pkts += 1;
            return;
        };
        if deth.qkey != qp.attr.qkey {
            self.counters.qkey_violations += 1;
            return;
        }
        // IBTA does not ask a UD responder to look at PSNs, but a datagram the network
        // duplicated must not be delivered twice: accept only PSNs ahead of the last one from
        // the same sender (an older, reordered datagram is dropped, as UD may drop anything).
        let psn = pkt.bth().psn();
        let key = (meta.src, deth.src_qp);
        if qp.ud_seen.get(&key).is_some_and(|last| psn.diff(*last) <= 0) {
            self.counters.duplicate_request += 1;
            return;
        }
        let Some(recv) = qp.rq.pop_front() else {
            self.counters.rcv_no_wqe += 1;
            return;
        };
        qp.ud_seen.insert(key, psn);
        let data = pkt.payload();
        // The GRH area: the real IP header when the driver has it, else one rebuilt from what
        // it knows (an IPv4 Identification is then unknown: 0). IPv4 fills its last 20 bytes.
        let mut grh = [0u8; 40];
        let built = PseudoHeader::between(meta.src, meta.dst, meta.src_port, meta.dst_port)
            .map(|h| h.for_payload(pkt.covered().len() + roce::ICRC_LEN));
        let ip = match (meta.ip_header, &built) {
            (Some(h), _) => h,
            (None, Some(b)) => b.ip_header(),
            (None, None) => &[],
        };
        match ip.first().map(|b| b >> 4) {
            Some(4) if ip.len() >= 20 => grh[20..40].copy_from_slice(&ip[..20]),
            Some(6) if ip.len() >= 40 => grh.copy_from_slice(&ip[..40]),
            _ => {}
        }
        let status = match scatter(&self.mrs, &mut self.mem, &recv.sgl, 0, &grh)
            .and_then(|()| scatter(&self.mrs, &mut self.mem, &recv.sgl, 40, data))
        {
            Ok(()) => WcStatus::Success,
            Err(true) => WcStatus::LocLenErr,
            Err(false) => WcStatus::LocProtErr,
        };
        self.counters.rdma_recvs += 1;
        let mut c = wc(qp, recv.wr_id, status, WcOpcode::Recv, (40 + data.len()) as u32);
        if status == WcStatus::Success {
            c.imm = pkt.immdt().map(|i| i.value);
            c.src_qp = Some(deth.src_qp);
            c.grh = true;
        }
        self.cqs[qp.recv_cq.0 as usize].push_back(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_source_ports_match_rxe() {
        // Observed in testdata/rxe (both ends had the same QPN): 0x11 -> 49441,
        // 0x12 -> 49476, 0x14 -> 49552; and 0x16 -> 49636, 0x17 -> 49681.
        for (q, port) in [(0x11, 49441), (0x12, 49476), (0x14, 49552), (0x16, 49636), (0x17, 49681)]
        {
            assert_eq!(src_port(Qpn::new(q), Qpn::new(q)), port, "QPN {q:#x}");
        }
        // Symmetric, and the folds matter for large QPNs.
        assert_eq!(
            src_port(Qpn::new(0x11), Qpn::new(0x2345)),
            src_port(Qpn::new(0x2345), Qpn::new(0x11))
        );
        assert_eq!(src_port(Qpn::new(0), Qpn::new(0)), 0xc000);
    }

    #[test]
    fn retransmit_timeout_is_4_096_us_times_2_to_the_code() {
        assert_eq!(retransmit_timeout(0), None);
        assert_eq!(retransmit_timeout(1), Some(Duration::from_nanos(8192)));
        assert_eq!(retransmit_timeout(14), Some(Duration::from_nanos(4096 << 14)));
    }
}
