//! The measurement loops, on podnet's verbs API: what runs between connecting the QPs and
//! reporting. Each loop takes a timestamp at every post and every completion, and [`stats`]
//! turns them into perftest's figures.
//!
//! One [`Side`] is a set of connected QPs sharing a CQ and one memory region laid out by a
//! [`Layout`]: each QP owns a *local* area (what it sends from, where its READs and atomics
//! land) and a *remote* area (what its peer writes, reads and sends into), each `slots`
//! slots of `stride` bytes. Without data validation there is one slot and every message uses
//! it, as perftest does; with validation message `k` uses slot `k mod slots`, carries
//! [`pattern`] bytes seeded by its sender, QP and `k`, and is checked where it lands.
//!
//! [`stats`]: crate::stats

use std::time::{Duration, Instant};

use verbs::{
    CompletionChannel, CompletionQueue, MemoryRegion, QueuePair, RKey, RecvWr, SendOp, SendWr,
    UdDest, WcOpcode, WcStatus, WorkCompletion, empty_wc,
};

use crate::stats::{Bandwidth, Latency, LatencyBuckets, LatencyRecorder, ticks};

/// Why a measurement stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verb failed.
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    /// A work request completed with an error.
    #[error("QP {qp}: work request {seq} completed with {status:?}")]
    Completion {
        /// The QP (index in the side).
        qp: usize,
        /// The message number on that QP.
        seq: u64,
        /// Its status.
        status: WcStatus,
    },
    /// Nothing completed for too long: the peer is gone or the network dropped everything.
    #[error("no completion for {0:?}: the peer stopped answering")]
    Stalled(Duration),
    /// Nothing to measure.
    #[error("no messages were measured")]
    Empty,
}

/// The page size podnet announces as perftest's `cycle_buffer`.
pub const PAGE: usize = 4096;

/// The bytes a UD receive starts with: room for the GRH.
pub const GRH: usize = 40;

/// Where each QP's buffers sit in the side's memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per slot (a multiple of 64, at least the largest message plus a GRH for UD).
    pub stride: usize,
    /// Slots per area.
    pub slots: usize,
    /// Bytes per area (at least `stride × slots`; more when cut for a smaller message).
    pub area: usize,
}

impl Layout {
    /// A layout for messages up to `max_size` bytes: one slot, or with `validate` as many as
    /// fit in 32 MiB per area (at most 4,096, at least one); an area is at least a page.
    pub fn new(max_size: usize, ud: bool, validate: bool) -> Layout {
        let stride = (max_size.max(8) + if ud { GRH } else { 0 }).next_multiple_of(64);
        let slots = if validate { ((32 << 20) / stride).clamp(1, 4096) } else { 1 };
        // At least a page: perftest cycles its remote address through `cycle_buffer` (the
        // page size it announces) when messages are smaller, atomics included.
        Layout { stride, slots, area: (stride * slots).max(PAGE) }
    }

    /// The same areas cut into slots for messages of `size` bytes: with data validation,
    /// a sweep's small sizes then get many slots (up to 4,096), so each of their messages
    /// stays in place to be checked; without, the one slot.
    pub fn for_message(&self, size: usize, ud: bool) -> Layout {
        if self.slots == 1 {
            return *self;
        }
        let stride = (size.max(8) + if ud { GRH } else { 0 }).next_multiple_of(64);
        Layout { stride, slots: (self.area / stride).clamp(1, 4096), area: self.area }
    }

    /// The region length `qps` QPs need.
    pub fn region_len(&self, qps: usize) -> usize {
        2 * self.area * qps
    }

    /// Offset of QP `qp`'s local slot `slot`.
    pub fn local(&self, qp: usize, slot: usize) -> usize {
        2 * self.area * qp + self.stride * (slot % self.slots)
    }

    /// Offset of QP `qp`'s remote (peer-visible) slot `slot`.
    pub fn remote(&self, qp: usize, slot: usize) -> usize {
        2 * self.area * qp + self.area + self.stride * (slot % self.slots)
    }
}

/// The bytes data validation puts in message `seq` of QP `qp` from a sender seeded `seed`.
pub mod pattern {
    fn word(seed: u64, qp: usize, seq: u64, i: usize) -> u64 {
        // splitmix64 over (seed, qp, seq, word index): cheap, and no two messages alike.
        let mut z = seed
            ^ (qp as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)
            ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ (i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `buf` with the pattern.
    pub fn fill(seed: u64, qp: usize, seq: u64, buf: &mut [u8]) {
        for (i, c) in buf.chunks_mut(8).enumerate() {
            c.copy_from_slice(&word(seed, qp, seq, i).to_le_bytes()[..c.len()]);
        }
    }

    /// The offset of the first byte of `buf` that differs from the pattern.
    pub fn check(seed: u64, qp: usize, seq: u64, buf: &[u8]) -> Option<usize> {
        check_at(seed, qp, seq, 0, buf)
    }

    /// [`check`] for the part of a pattern that starts `at` bytes in (a multiple of 8).
    pub fn check_at(seed: u64, qp: usize, seq: u64, at: usize, buf: &[u8]) -> Option<usize> {
        let first = at / 8;
        buf.chunks(8).enumerate().find_map(|(i, c)| {
            let w = word(seed, qp, seq, first + i).to_le_bytes();
            c.iter().zip(w).position(|(a, b)| *a != b).map(|o| i * 8 + o)
        })
    }
}

/// One side of a measurement: its QPs, their CQ and buffer.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// The connected QPs.
    pub qps: &'a [QueuePair],
    /// The CQ of every QP's sends and receives.
    pub cq: &'a CompletionQueue,
    /// The buffer messages come from and go to.
    pub mr: &'a MemoryRegion,
    /// Sleep on this channel for completions (perftest's `-e`) instead of busy-polling.
    pub channel: Option<&'a CompletionChannel>,
    /// Where the buffers are.
    pub layout: Layout,
    /// How long to wait for a completion before giving up.
    pub stall: Duration,
    /// SENDs and WRITEs up to this many bytes go inline.
    pub inline_size: usize,
}

/// The peer's buffer, for WRITE, READ and atomics.
#[derive(Debug, Clone, Copy)]
pub struct RemoteBuffer {
    /// Its address.
    pub addr: u64,
    /// Its remote key.
    pub rkey: RKey,
}

/// What one QP needs to reach its peer.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    /// The peer QP's remote area.
    pub buffer: RemoteBuffer,
    /// UD: where sends go.
    pub ud: Option<UdDest>,
}

/// When a loop ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many messages per QP.
    Iters(u64),
    /// After this long (perftest's `-D`).
    Duration(Duration),
}

/// The default stall limit.
pub const STALL: Duration = Duration::from_secs(10);

/// What data validation found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validation {
    /// Messages whose payload was checked.
    pub messages: u64,
    /// Bytes checked.
    pub bytes: u64,
    /// Messages that differed.
    pub errors: u64,
    /// The first difference: QP, message and byte offset.
    pub first_error: Option<String>,
}

impl Validation {
    /// Adds what another check found.
    pub fn merge(&mut self, o: &Validation) {
        self.messages += o.messages;
        self.bytes += o.bytes;
        self.errors += o.errors;
        if self.first_error.is_none() {
            self.first_error.clone_from(&o.first_error);
        }
    }

    fn record(&mut self, len: usize, what: impl FnOnce() -> Option<String>) {
        self.messages += 1;
        self.bytes += len as u64;
        if let Some(e) = what() {
            self.errors += 1;
            if self.first_error.is_none() {
                self.first_error = Some(e);
            }
        }
    }
}

/// The seeds of data validation: this side's patterns and the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seeds {
    /// What this side writes and sends.
    pub mine: u64,
    /// What the peer writes and sends (and keeps in its remote area for READs).
    pub peer: u64,
}

/// What a bandwidth loop posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BwOp {
    /// RDMA WRITE to the peer's buffer.
    Write,
    /// RDMA READ from the peer's buffer.
    Read,
    /// 8-byte fetch-and-add on the peer's buffer.
    FetchAdd,
    /// 8-byte compare-and-swap on the peer's buffer.
    CompareSwap,
    /// SEND; the peer sinks them.
    Send,
}

impl BwOp {
    /// Whether this is an atomic (8 bytes whatever the size).
    pub fn is_atomic(self) -> bool {
        matches!(self, BwOp::FetchAdd | BwOp::CompareSwap)
    }
}

/// A bandwidth run.
#[derive(Debug, Clone)]
pub struct BwPlan<'a> {
    /// What this side initiates, if anything.
    pub op: Option<BwOp>,
    /// Whether this side receives the peer's SENDs.
    pub sink: bool,
    /// Bytes per message.
    pub size: usize,
    /// Operations in flight per QP.
    pub tx_depth: usize,
    /// Work requests per `ibv_post_send` call, at most (perftest's `-l`; 1 is one call per
    /// message, perftest's default; `session::Options::post_list_on` picks the device's).
    pub post_list: usize,
    /// A completion is asked for every this many messages per QP (perftest's `-Q`), and for
    /// the last: RC, UC and UD send queues complete in order, so one completion accounts for
    /// every message before it. In a run of a duration the last message of each posting pass
    /// asks for one too, so the run's tail is never left without one when the clock stops.
    /// At most `tx_depth`.
    pub cq_mod: usize,
    /// One per QP.
    pub peers: &'a [Peer],
    /// When to stop.
    pub stop: Stop,
    /// Data validation.
    pub seeds: Option<Seeds>,
    /// Duration mode between two podnet sides on RC: the SEND side ends with a marker (a
    /// zero-length SEND with immediate data `END`) once every message it sent is
    /// acknowledged, and the receiving side runs until the marker arrives on every QP — so a
    /// message retransmitted late, after loss, is still received and checked in this run
    /// instead of landing in the next size's receives. Without it the receiver stops a
    /// fixed time after its deadline (all perftest can do).
    pub end_marker: bool,
}

/// The immediate data of [`BwPlan::end_marker`]'s marker.
pub const END: u32 = u32::MAX;

/// What a bandwidth run measured.
#[derive(Debug, Clone, Default)]
pub struct BwOutcome {
    /// The figures of what this side initiated.
    pub sent: Option<Bandwidth>,
    /// The figures of what it received (peak 0, as perftest's receiver reports).
    pub received: Option<Bandwidth>,
    /// Operations completed per QP.
    pub completed: Vec<u64>,
    /// Messages received per QP.
    pub receives: Vec<u64>,
    /// Data validation.
    pub validation: Validation,
}

const RECV_BIT: u64 = 1 << 63;
const QP_SHIFT: u32 = 40;
const SEQ_MASK: u64 = (1 << QP_SHIFT) - 1;

fn wr_id(qp: usize, seq: u64) -> u64 {
    (qp as u64) << QP_SHIFT | (seq & SEQ_MASK)
}

fn split(id: u64) -> (usize, u64) {
    (((id & !RECV_BIT) >> QP_SHIFT) as usize, id & SEQ_MASK)
}

/// A busy-polling loop looks at the tick counter (the TSC) once per this many empty polls,
/// and reads the OS clock (for its deadline and stall limit) only once it has spun for
/// [`CLOCK_TICKS`] ticks, and then once per as many: a completion that is already there or
/// comes soon costs no clock read at all. The OS clock is a system call where the kernel's
/// clocksource is not the TSC (HPET in VMs, and it takes QEMU's global lock in the guest), and
/// one that lands while the awaited completion arrives delays the answer by as much. Counting
/// polls alone was not enough: how long a poll takes varies a hundredfold (a load of one
/// byte, an `ibv_poll_cq`). Measured: BENCHMARKS.md, "Hot paths", H6.
const CLOCK_EVERY: u32 = 64;

/// TSC ticks between a busy loop's OS clock reads: 2^21, 0.4–2 ms at 1–5 GHz.
const CLOCK_TICKS: u64 = 1 << 21;

/// Reads of the watched byte between looks at the tick counter in WRITE latency's wait.
const WATCH_SPINS: u32 = 1024;

/// When a busy loop reads the OS clock: [`ClockGate::due`] once [`CLOCK_TICKS`] ticks have
/// passed since its first look, and every [`CLOCK_TICKS`] after.
#[derive(Default)]
struct ClockGate {
    next: Option<u64>,
    polls: u32,
}

impl ClockGate {
    /// After one more empty poll: [`ClockGate::due`], looked at every [`CLOCK_EVERY`] polls.
    fn due_after_poll(&mut self) -> bool {
        self.polls = self.polls.wrapping_add(1);
        self.polls.is_multiple_of(CLOCK_EVERY) && self.due()
    }

    fn due(&mut self) -> bool {
        let t = ticks();
        match self.next {
            Some(n) if t < n => false,
            Some(_) => {
                self.next = Some(t + CLOCK_TICKS);
                true
            }
            None => {
                self.next = Some(t + CLOCK_TICKS);
                false
            }
        }
    }
}

/// Waits for completions: polling, or on the side's channel. Returns 0 when `until` passes
/// first; fails after the side's stall limit without one.
fn wait_wc(
    s: &Side<'_>,
    out: &mut [WorkCompletion],
    until: Option<Instant>,
) -> Result<usize, Error> {
    let mut t0 = None::<Instant>;
    let mut gate = ClockGate::default();
    loop {
        let n = try_wc(s, out)?;
        if n > 0 {
            return Ok(n);
        }
        // No PAUSE (`spin_loop`) between polls, as perftest's loops have none: a poll is a
        // read of the CQ's memory already, and under TCG a PAUSE leaves the translated code
        // and takes QEMU's global lock (BENCHMARKS.md, "Hot paths", H7).
        if s.channel.is_none() && !gate.due_after_poll() {
            continue;
        }
        let now = Instant::now();
        let t0 = *t0.get_or_insert(now);
        if until.is_some_and(|u| now >= u) {
            return Ok(0);
        }
        if let Some(ch) = s.channel {
            s.cq.req_notify()?;
            let n = try_wc(s, out)?;
            if n > 0 {
                return Ok(n);
            }
            let mut left = s.stall.saturating_sub(t0.elapsed());
            if let Some(u) = until {
                left = left.min(u.saturating_duration_since(now));
            }
            if ch.get_cq_event(Some(left)).is_none() && t0.elapsed() >= s.stall {
                return Err(Error::Stalled(s.stall));
            }
            continue;
        }
        if now.duration_since(t0) > s.stall {
            return Err(Error::Stalled(s.stall));
        }
    }
}

fn next_wc(s: &Side<'_>, out: &mut [WorkCompletion]) -> Result<usize, Error> {
    wait_wc(s, out, None)
}

/// Polls once without waiting (for loops that must also watch memory or a clock).
#[inline]
fn try_wc(s: &Side<'_>, out: &mut [WorkCompletion]) -> Result<usize, Error> {
    let n = s.cq.poll(out);
    for wc in &out[..n] {
        if wc.status != WcStatus::Success {
            let (qp, seq) = split(wc.wr_id);
            return Err(Error::Completion { qp, seq, status: wc.status });
        }
    }
    Ok(n)
}

/// Tests only (feature `fault-injection`): with `PODNET_FAULT_RECV_HOLD_MS=N` a receiver
/// waits N ms before it reposts each receive, so that with one posted (`-r 1`) the sender's
/// next SENDs meet an empty receive queue and draw RNR NAKs.
#[cfg(feature = "fault-injection")]
fn fault_recv_hold() {
    static HOLD: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    let hold = HOLD.get_or_init(|| {
        let ms: u64 = std::env::var("PODNET_FAULT_RECV_HOLD_MS").ok()?.parse().ok()?;
        eprintln!("podnet: FAULT INJECTION: each receive reposted {ms} ms late");
        Some(std::time::Duration::from_millis(ms))
    });
    if let Some(d) = hold {
        std::thread::sleep(*d);
    }
}

/// A receive into a whole slot (room for the largest message and, on UD, the GRH).
fn recv_wr(s: &Side<'_>, qp: usize, slot: usize) -> Result<RecvWr, Error> {
    let mut r = RecvWr::new(RECV_BIT | wr_id(qp, slot as u64));
    r.sgl.push(s.mr.sge(s.layout.remote(qp, slot), s.layout.stride)?);
    Ok(r)
}

/// Posts `depth` receives on every QP, one per slot: what a receiving side does before the
/// barrier that starts the measurement. [`bw`] reposts each as it completes, so `depth`
/// stay posted through a sweep.
pub fn post_receives(s: &Side<'_>, depth: usize) -> Result<(), Error> {
    for q in 0..s.qps.len() {
        let wrs: Vec<RecvWr> =
            (0..depth).map(|slot| recv_wr(s, q, slot)).collect::<Result<_, _>>()?;
        s.qps[q].post_recv_batch(&wrs)?;
    }
    Ok(())
}

fn grh(qp: &QueuePair) -> usize {
    if qp.qp_type() == verbs::QpType::Ud { GRH } else { 0 }
}

/// Fills every QP's remote area with one continuous pattern (`seed`, message 0): what READ
/// validation reads back, whatever the message size.
pub fn fill_remote(s: &Side<'_>, seed: u64) -> Result<(), Error> {
    let mut buf = vec![0u8; s.layout.area];
    for q in 0..s.qps.len() {
        pattern::fill(seed, q, 0, &mut buf);
        s.mr.write(s.layout.remote(q, 0), &buf)?;
    }
    Ok(())
}

/// Checks what the peer's WRITEs left in this side's remote areas after it completed
/// `counts[q]` writes of `size` bytes on QP `q` with seed `seed`: each slot holds the last
/// message that went to it.
pub fn check_written(s: &Side<'_>, size: usize, seed: u64, counts: &[u64]) -> Validation {
    let mut v = Validation::default();
    let slots = s.layout.slots as u64;
    let mut buf = vec![0u8; size];
    for (q, &n) in counts.iter().enumerate().take(s.qps.len()) {
        for j in 0..slots.min(n) {
            let last = j + (n - 1 - j) / slots * slots;
            if s.mr.read(s.layout.remote(q, j as usize), &mut buf).is_err() {
                v.record(0, || Some(format!("QP {q}: slot {j} is outside the buffer")));
                continue;
            }
            v.record(size, || {
                pattern::check(seed, q, last, &buf)
                    .map(|o| format!("QP {q}: WRITE {last}, byte {o} differs"))
            });
        }
    }
    v
}

/// Checks the counters the peer's atomics left: slot `j` of QP `q` counts the operations
/// that went to it.
pub fn check_atomics(s: &Side<'_>, counts: &[u64]) -> Validation {
    let mut v = Validation::default();
    let slots = s.layout.slots as u64;
    for (q, &n) in counts.iter().enumerate().take(s.qps.len()) {
        for j in 0..slots.min(n) {
            let want = n / slots + u64::from(j < n % slots);
            let mut b = [0u8; 8];
            let got =
                s.mr.read(s.layout.remote(q, j as usize), &mut b).map(|_| u64::from_le_bytes(b));
            v.record(8, || match got {
                Ok(g) if g == want => None,
                Ok(g) => Some(format!("QP {q}: atomic slot {j} holds {g}, expected {want}")),
                Err(e) => Some(format!("QP {q}: atomic slot {j}: {e}")),
            });
        }
    }
    v
}

/// Zeroes the counters the peer's atomics left (`counts` per QP, as [`check_atomics`]
/// reads them), so that the next size of a sweep starts from 0 as its initiator expects.
pub fn reset_atomics(s: &Side<'_>, counts: &[u64]) -> Result<(), Error> {
    let slots = s.layout.slots as u64;
    for (q, &n) in counts.iter().enumerate().take(s.qps.len()) {
        for j in 0..slots.min(n) {
            s.mr.write(s.layout.remote(q, j as usize), &[0u8; 8])?;
        }
    }
    Ok(())
}

/// The send work request of message `seq` on QP `q`.
fn send_wr(
    s: &Side<'_>,
    q: usize,
    seq: u64,
    op: BwOp,
    size: usize,
    peer: &Peer,
    seeds: Option<Seeds>,
) -> Result<SendWr, Error> {
    let slots = s.layout.slots as u64;
    let slot = (seq % slots) as usize;
    let local = s.layout.local(q, slot);
    let remote_addr = peer.buffer.addr + (s.layout.stride * slot) as u64;
    let rkey = peer.buffer.rkey;
    let round = seq / slots;
    let validate = seeds.is_some();
    let send_op = match op {
        BwOp::Write => SendOp::Write { remote_addr, rkey },
        BwOp::Read => SendOp::Read { remote_addr, rkey },
        BwOp::FetchAdd => SendOp::FetchAdd { remote_addr, rkey, add: 1 },
        BwOp::CompareSwap if validate => {
            SendOp::CompareSwap { remote_addr, rkey, compare: round, swap: round + 1 }
        }
        BwOp::CompareSwap => SendOp::CompareSwap { remote_addr, rkey, compare: 0, swap: 0 },
        BwOp::Send if validate => SendOp::SendWithImm(seq as u32),
        BwOp::Send => SendOp::Send,
    };
    let len = if op.is_atomic() { 8 } else { size };
    if let Some(sd) = seeds
        && matches!(op, BwOp::Write | BwOp::Send)
        && len > 0
    {
        let mut buf = vec![0u8; len];
        pattern::fill(sd.mine, q, seq, &mut buf);
        s.mr.write(local, &buf)?;
    }
    let mut w = SendWr::new(wr_id(q, seq), send_op);
    if len > 0 {
        w.sgl.push(s.mr.sge(local, len)?);
    }
    w.ud = peer.ud;
    w.inline = matches!(op, BwOp::Write | BwOp::Send) && len > 0 && len <= s.inline_size;
    Ok(w)
}

/// Checks the data of a completed READ or atomic (`seq` on QP `q`).
fn check_completion(
    s: &Side<'_>,
    q: usize,
    seq: u64,
    op: BwOp,
    size: usize,
    seeds: Seeds,
) -> (usize, Option<String>) {
    let slots = s.layout.slots as u64;
    let local = s.layout.local(q, (seq % slots) as usize);
    if op == BwOp::Read {
        let got = match s.mr.to_vec(local, size) {
            Ok(g) => g,
            Err(e) => return (0, Some(format!("QP {q}: READ {seq}: {e}"))),
        };
        let at = s.layout.stride * (seq % slots) as usize;
        let e = pattern::check_at(seeds.peer, q, 0, at, &got)
            .map(|o| format!("QP {q}: READ {seq}, byte {o} differs"));
        return (size, e);
    }
    let mut b = [0u8; 8];
    let want = seq / slots;
    match s.mr.read(local, &mut b) {
        Ok(()) if u64::from_le_bytes(b) == want => (8, None),
        Ok(()) => {
            let got = u64::from_le_bytes(b);
            (8, Some(format!("QP {q}: atomic {seq} fetched {got}, expected {want}")))
        }
        Err(e) => (0, Some(format!("QP {q}: atomic {seq}: {e}"))),
    }
}

/// Checks a received message in slot `slot` of QP `q`; on UD, that it came from the peer
/// `from` (perftest's Q_Key is fixed: anyone who can reach the QP can send to it).
fn check_receive(
    s: &Side<'_>,
    q: usize,
    slot: usize,
    wc: &WorkCompletion,
    expect: Option<u64>,
    seed: u64,
    from: Option<verbs::UdDest>,
) -> (usize, Option<String>) {
    let g = grh(&s.qps[q]);
    let len = (wc.byte_len as usize).saturating_sub(g);
    if let Some(peer) = from {
        // The GRH area: an IPv6 header (source at bytes 8..24) or, on RoCEv2 over IPv4,
        // 20 bytes of nothing and the IPv4 header (source at bytes 32..36).
        let src = s.mr.to_vec(s.layout.remote(q, slot), g).ok().and_then(|h| {
            if h.get(20).is_some_and(|b| b >> 4 == 4) {
                let a: [u8; 4] = h.get(32..36)?.try_into().ok()?;
                Some(std::net::IpAddr::from(a))
            } else {
                let gid: [u8; 16] = h.get(8..24)?.try_into().ok()?;
                verbs::Gid(gid).to_ip()
            }
        });
        let qpn_ok = wc.src_qp == Some(peer.qpn);
        if !qpn_ok || src.is_some_and(|ip| ip != peer.ip) {
            let qpn = wc.src_qp.map_or("?".to_string(), |q| format!("{:#x}", q.get()));
            let at = src.map_or("?".to_string(), |ip| ip.to_string());
            let e = format!(
                "QP {q}: a UD message not from the peer: from QPN {qpn} at {at} (the peer is \
                 QPN {:#x} at {})",
                peer.qpn.get(),
                peer.ip
            );
            return (len, Some(e));
        }
    }
    let Some(imm) = wc.imm else {
        return (len, Some(format!("QP {q}: a message without its sequence number")));
    };
    // The sequence number travels as 32-bit immediate data; extend it from what we expect.
    let seq = match expect {
        Some(e) => (e & !0xffff_ffff) | u64::from(imm),
        None => u64::from(imm),
    };
    if let Some(e) = expect
        && e != seq
    {
        return (len, Some(format!("QP {q}: message {seq} arrived where {e} was expected")));
    }
    match s.mr.to_vec(s.layout.remote(q, slot) + g, len) {
        Ok(got) => (
            len,
            pattern::check(seed, q, seq, &got)
                .map(|o| format!("QP {q}: SEND {seq}, byte {o} differs")),
        ),
        Err(e) => (0, Some(format!("QP {q}: SEND {seq}: {e}"))),
    }
}

/// A progress report: messages done so far and bytes they moved.
pub type OnProgress<'a> = &'a mut dyn FnMut(u64, u64);

/// Bandwidth: what `plan` asks, on every QP of `s` at once, until `plan.stop`.
pub fn bw(s: &Side<'_>, plan: &BwPlan<'_>, progress: OnProgress<'_>) -> Result<BwOutcome, Error> {
    let nq = s.qps.len();
    let op = plan.op;
    let size = if op.is_some_and(BwOp::is_atomic) { 8 } else { plan.size };
    let iters = match plan.stop {
        Stop::Iters(n) => n,
        Stop::Duration(_) => u64::MAX,
    };
    let deadline = match plan.stop {
        Stop::Duration(d) => Some(Instant::now() + d),
        Stop::Iters(_) => None,
    };
    // Receivers keep going a little after the deadline: the sender's last messages.
    let recv_deadline = deadline.map(|d| d + Duration::from_millis(300));
    let tx_depth =
        if plan.seeds.is_some() { plan.tx_depth.min(s.layout.slots) } else { plan.tx_depth };
    let tx_depth = tx_depth.max(1) as u64;
    // Every window of tx_depth messages holds one that asks for a completion.
    let cq_mod = (plan.cq_mod as u64).clamp(1, tx_depth);
    let post_list = plan.post_list.max(1);
    let mut out = BwOutcome { completed: vec![0; nq], receives: vec![0; nq], ..Default::default() };
    let mut posted = vec![0u64; nq];
    let keep_times = deadline.is_none();
    let cap = if keep_times { (iters * nq as u64).min(1 << 24) as usize } else { 0 };
    let (mut t_post, mut t_done) = (Vec::with_capacity(cap), Vec::with_capacity(cap));
    // Duration mode: the peak is the best 100 ms stretch.
    let mut window = (Instant::now(), 0u64);
    let mut best_window = 0.0f64;
    let epoch = Instant::now();
    let ns = || epoch.elapsed().as_nanos() as u64;
    let (mut first_recv, mut last_recv) = (None::<u64>, 0u64);
    let mut recv_bytes = 0u64;
    let mut next_recv_seq = vec![0u64; nq];
    let mut wc = [empty_wc(); 64];
    let mut done_total = 0u64;
    let mut last_report = Instant::now();
    let mut stopped = false;
    let mut batch = Vec::with_capacity(tx_depth as usize);
    let marking = plan.end_marker && op == Some(BwOp::Send);
    let (mut markers_posted, mut markers_done, mut ends_seen) = (false, 0usize, 0usize);
    loop {
        stopped |= deadline.is_some_and(|d| Instant::now() >= d);
        // Everything sent is acknowledged: tell the receiver this run is over.
        if marking
            && !markers_posted
            && (0..nq).all(|q| out.completed[q] >= posted[q])
            && (stopped || (0..nq).all(|q| posted[q] >= iters))
        {
            for q in 0..nq {
                let mut w = SendWr::new(wr_id(q, SEQ_MASK), SendOp::SendWithImm(END));
                if let Some(ud) = plan.peers[q].ud {
                    w.ud = Some(ud);
                }
                s.qps[q].post_send(w)?;
            }
            markers_posted = true;
        }
        if let Some(op) = op
            && !stopped
        {
            #[allow(clippy::needless_range_loop)] // q indexes four per-QP tables
            for q in 0..nq {
                batch.clear();
                while posted[q] < iters && posted[q] - out.completed[q] < tx_depth {
                    let seq = posted[q];
                    let mut w = send_wr(s, q, seq, op, size, &plan.peers[q], plan.seeds)?;
                    w.signaled = seq % cq_mod == cq_mod - 1 || seq + 1 == iters;
                    batch.push(w);
                    posted[q] += 1;
                    if keep_times {
                        t_post.push(ns());
                    }
                }
                if deadline.is_some()
                    && let Some(w) = batch.last_mut()
                {
                    w.signaled = true;
                }
                for list in batch.chunks(post_list) {
                    s.qps[q].post_send_batch(list)?;
                }
            }
        }
        let sends_left = op.is_some()
            && ((0..nq).any(|q| out.completed[q] < posted[q] || (!stopped && posted[q] < iters))
                || (marking && markers_done < nq));
        let recvs_left = plan.sink
            && if plan.end_marker {
                ends_seen < nq
            } else {
                match recv_deadline {
                    Some(d) => Instant::now() < d,
                    None => out.receives.iter().any(|&r| r < iters),
                }
            };
        if !sends_left && !recvs_left {
            break;
        }
        // Wake for the clock while it matters; drain what is in flight without one.
        let until = if !sends_left {
            if plan.end_marker { None } else { recv_deadline }
        } else if !stopped {
            deadline
        } else {
            None
        };
        let n = wait_wc(s, &mut wc, until)?;
        let t = ns();
        for c in &wc[..n] {
            let (q, seq) = split(c.wr_id);
            if q >= nq {
                continue;
            }
            if c.wr_id & RECV_BIT != 0
                || matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
            {
                let slot = seq as usize;
                if plan.end_marker
                    && c.imm == Some(END)
                    && (c.byte_len as usize).saturating_sub(grh(&s.qps[q])) == 0
                {
                    ends_seen += 1;
                    s.qps[q].post_recv(recv_wr(s, q, slot)?)?;
                    continue;
                }
                out.receives[q] += 1;
                first_recv.get_or_insert(t);
                last_recv = t;
                let len = (c.byte_len as usize).saturating_sub(grh(&s.qps[q]));
                recv_bytes += len as u64;
                if let Some(sd) = plan.seeds {
                    let expect =
                        (s.qps[q].qp_type() == verbs::QpType::Rc).then_some(next_recv_seq[q]);
                    let from = plan.peers[q].ud;
                    let (l, e) = check_receive(s, q, slot, c, expect, sd.peer, from);
                    out.validation.record(l, || e);
                    next_recv_seq[q] += 1;
                }
                // Repost into the same slot: the depth stays posted for the next size too.
                #[cfg(feature = "fault-injection")]
                fault_recv_hold();
                s.qps[q].post_recv(recv_wr(s, q, slot)?)?;
                done_total += 1;
            } else if marking && seq == SEQ_MASK {
                markers_done += 1;
            } else {
                // This completion and every unsignaled message before it.
                let first = out.completed[q];
                let k = (seq + 1).saturating_sub(first);
                out.completed[q] += k;
                done_total += k;
                if keep_times {
                    t_done.extend(std::iter::repeat_n(t, k as usize));
                }
                if let (Some(sd), Some(op)) = (plan.seeds, op)
                    && matches!(op, BwOp::Read | BwOp::FetchAdd | BwOp::CompareSwap)
                {
                    for seq in first..=seq {
                        let (l, e) = check_completion(s, q, seq, op, size, sd);
                        out.validation.record(l, || e);
                    }
                }
            }
        }
        if !keep_times && op.is_some() {
            let el = window.0.elapsed();
            if el >= Duration::from_millis(100) {
                let msgs: u64 = out.completed.iter().sum();
                let rate = (msgs - window.1) as f64 / el.as_secs_f64();
                best_window = best_window.max(rate);
                window = (Instant::now(), msgs);
            }
        }
        if last_report.elapsed() >= Duration::from_millis(250) {
            last_report = Instant::now();
            progress(done_total, done_total * size as u64);
        }
    }
    let total: u64 = out.completed.iter().sum();
    if op.is_some() {
        out.sent = if keep_times {
            Bandwidth::from_times(size as u64, &t_post, &t_done)
        } else {
            sent_over(size as u64, total, epoch.elapsed().as_secs_f64(), best_window)
        };
        if out.sent.is_none() {
            return Err(Error::Empty);
        }
    }
    if plan.sink {
        let got: u64 = out.receives.iter().sum();
        let span = first_recv.map(|f| last_recv.saturating_sub(f)).unwrap_or(0);
        let elapsed = epoch.elapsed().as_secs_f64();
        out.received = received_over(plan.size as u64, got, span, recv_bytes, elapsed);
    }
    Ok(out)
}

/// A duration run's sending side: `total` messages of `size` in `secs`, the best 100 ms
/// stretch at `best_window` messages per second.
fn sent_over(size: u64, total: u64, secs: f64, best_window: f64) -> Option<Bandwidth> {
    (total > 0).then(|| {
        let avg = (total * size) as f64 / secs / crate::stats::PERFTEST_MB;
        let peak = best_window * size as f64 / crate::stats::PERFTEST_MB;
        Bandwidth {
            size,
            iters: total,
            bw_peak: peak.max(avg),
            bw_avg: avg,
            msg_rate: total as f64 / secs / 1e6,
        }
    })
}

/// The receiving side: `got` messages, `bytes` in all, `span_ns` from the first to the last
/// (the whole run, `elapsed` seconds, when that is no time).
fn received_over(size: u64, got: u64, span_ns: u64, bytes: u64, elapsed: f64) -> Option<Bandwidth> {
    (got > 0).then(|| {
        // From the first receive to the last, plus one message's share.
        let secs = (span_ns as f64 / 1e9) * got as f64 / (got as f64 - 1.0).max(1.0);
        let secs = if secs > 0.0 { secs } else { elapsed };
        Bandwidth {
            size,
            iters: got,
            bw_peak: 0.0,
            bw_avg: bytes as f64 / secs / crate::stats::PERFTEST_MB,
            msg_rate: got as f64 / secs / 1e6,
        }
    })
}

/// A latency run on one QP (perftest's latency tests use one).
#[derive(Debug, Clone, Copy)]
pub struct LatPlan {
    /// Bytes per message.
    pub size: usize,
    /// When to stop.
    pub stop: Stop,
    /// This side sends first (the client).
    pub initiator: bool,
    /// The peer.
    pub peer: Peer,
    /// Data validation.
    pub seeds: Option<Seeds>,
}

/// What a latency run measured.
#[derive(Debug, Clone)]
pub struct LatOutcome {
    /// The figures.
    pub latency: Latency,
    /// Every interval, as histogram buckets.
    pub buckets: Option<LatencyBuckets>,
    /// Every interval in the order measured, one way in µs (perftest's `-U`); `None` for a
    /// run of a duration.
    pub intervals: Option<Vec<f64>>,
    /// Operations completed.
    pub completed: u64,
    /// Data validation.
    pub validation: Validation,
}

/// A latency run's outcome from its recorder.
fn lat_outcome(
    rec: &LatencyRecorder,
    completed: u64,
    validation: Validation,
) -> Result<LatOutcome, Error> {
    Ok(LatOutcome {
        latency: rec.finish().ok_or(Error::Empty)?,
        buckets: rec.buckets(),
        intervals: rec.intervals(),
        completed,
        validation,
    })
}

fn lat_iters(stop: Stop) -> (u64, Option<Instant>) {
    match stop {
        Stop::Iters(n) => (n, None),
        Stop::Duration(d) => (u64::MAX, Some(Instant::now() + d)),
    }
}

/// SEND and WRITE latency ask for every this many sends' completion; the send queue must
/// hold that many (a NIC such as mlx5 frees an unsignaled send's slot only when a later
/// signaled one's completion is polled).
pub const SIGNAL_EVERY: u64 = 16;

/// Receives a SEND-latency side keeps posted (see [`send_lat`]).
pub const SEND_LAT_DEPTH: usize = 64;

/// SEND latency, one side of a ping-pong: the initiator sends first; each side sends after
/// the peer's message arrives. The figures come from this side's post times (one way: half
/// of each round trip). In duration mode each side stops at its own deadline.
pub fn send_lat(
    s: &Side<'_>,
    plan: &LatPlan,
    progress: OnProgress<'_>,
) -> Result<LatOutcome, Error> {
    let (iters, deadline) = lat_iters(plan.stop);
    let qp = &s.qps[0];
    let rc = qp.qp_type() == verbs::QpType::Rc;
    // The receives are posted before the run (`post_receives(s, SEND_LAT_DEPTH)`, ahead of
    // the barrier that starts it: on UC and UD a message that finds none is lost, and the
    // ping-pong with it) and each is reposted as it completes, so the next size of a sweep
    // finds them too.
    let mut rec = LatencyRecorder::new(plan.size as u64, 2.0, deadline.is_some());
    rec.reserve(iters.saturating_add(1));
    let mut v = Validation::default();
    let (mut sent, mut received) = (0u64, 0u64);
    let mut wc = [empty_wc(); 4];
    let mut last_report = Instant::now();
    // The work requests, built once into the provider's form (as perftest's are): a post
    // changes the id and the signaled flag alone. With data validation each send is built
    // as it goes (its payload is filled then).
    let mut recvs = (0..s.layout.slots)
        .map(|k| Ok(qp.prepare_recv(recv_wr(s, 0, k)?)?))
        .collect::<Result<Vec<_>, Error>>()?;
    let mut template =
        qp.prepare_send(send_wr(s, 0, 0, BwOp::Send, plan.size, &plan.peer, None)?)?;
    let mut post = |sent: &mut u64, rec: &mut LatencyRecorder| -> Result<(), Error> {
        rec.post();
        // Only every 16th send asks for a completion (the rest are freed with it, so the
        // send queue holds SIGNAL_EVERY: a NIC frees unsignaled slots only then): the
        // ping-pong waits for the peer's message, and a send completion per message would
        // wake an event-mode waiter for nothing.
        let signaled = *sent % SIGNAL_EVERY == SIGNAL_EVERY - 1;
        if plan.seeds.is_some() {
            let mut w = send_wr(s, 0, *sent, BwOp::Send, plan.size, &plan.peer, plan.seeds)?;
            w.signaled = signaled;
            qp.post_send_batch(std::slice::from_ref(&w))?;
        } else {
            template.set_wr_id(wr_id(0, *sent));
            template.set_signaled(signaled);
            qp.post_prepared_send(&mut template)?;
        }
        *sent += 1;
        Ok(())
    };
    if plan.initiator {
        post(&mut sent, &mut rec)?;
    }
    'run: while received < iters || sent < iters {
        let n = wait_wc(s, &mut wc, deadline)?;
        if n == 0 {
            break;
        }
        for c in &wc[..n] {
            if c.wr_id & RECV_BIT == 0 {
                continue;
            }
            let slot = split(c.wr_id).1 as usize;
            if let Some(sd) = plan.seeds {
                let (l, e) =
                    check_receive(s, 0, slot, c, rc.then_some(received), sd.peer, plan.peer.ud);
                v.record(l, || e);
            }
            received += 1;
            // The slot is one of this side's receives (no division where it is in range:
            // under TCG a `div` is a helper call).
            let k = if slot < recvs.len() { slot } else { slot % recvs.len() };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                qp.post_prepared_recv(&mut recvs[k])?;
                break 'run;
            }
            if sent < iters {
                post(&mut sent, &mut rec)?;
            }
            // The answer first, then the receive back in its slot: the ping-pong waits on the
            // send, and SEND_LAT_DEPTH - 1 others are still posted for the peer's next one.
            qp.post_prepared_recv(&mut recvs[k])?;
        }
        if received.is_multiple_of(64) && last_report.elapsed() >= Duration::from_millis(250) {
            last_report = Instant::now();
            progress(received, received * plan.size as u64);
        }
    }
    lat_outcome(&rec, sent, v)
}

/// WRITE latency as perftest measures it: each side WRITEs `size` bytes to the peer, the
/// last byte a counter, and polls its own buffer for the peer's counter before the next.
/// The peer's writes land at this side's remote slot 0; the last byte of write `k` is
/// `k + 1` (mod 256). In duration mode each side stops at its own deadline and leaves the
/// message in flight then unanswered (as perftest does).
pub fn write_lat(
    s: &Side<'_>,
    plan: &LatPlan,
    progress: OnProgress<'_>,
) -> Result<LatOutcome, Error> {
    let (iters, deadline) = lat_iters(plan.stop);
    let size = plan.size.max(1);
    let qp = &s.qps[0];
    let poll_at = s.layout.remote(0, 0) + size - 1;
    let post_at = s.layout.local(0, 0);
    let remote_addr = plan.peer.buffer.addr;
    let rkey = plan.peer.buffer.rkey;
    let mut rec = LatencyRecorder::new(size as u64, 2.0, deadline.is_some());
    rec.reserve(iters.saturating_add(1));
    let mut v = Validation::default();
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut wc = [empty_wc(); 1];
    let mut buf = vec![0u8; size];
    let mut last_report = Instant::now();
    let past = |d: Option<Instant>| d.is_some_and(|d| Instant::now() >= d);
    // One work request, built once into the provider's form (as perftest's is): each post
    // changes its id and signaled flag alone.
    let mut w = SendWr::new(0, SendOp::Write { remote_addr, rkey });
    w.sgl.push(s.mr.sge(post_at, size)?);
    w.inline = size <= s.inline_size;
    let mut template = qp.prepare_send(w)?;
    // The peer's counter and this side's, in place where the provider maps the region (as
    // perftest's `poll_buf` and `post_buf`): no call between seeing the peer's write and
    // posting this side's.
    let watched = s.mr.mapped_byte(poll_at)?;
    let counter = s.mr.mapped_byte(post_at + size - 1)?;
    // The last WRITE is signaled and its completion waited for right after its post: the
    // sends are done when they are all posted.
    'run: while scnt < iters || rcnt < iters {
        if past(deadline) {
            break;
        }
        if (plan.initiator || scnt != 0) && rcnt < iters {
            // Wait for the peer's write number rcnt: its last byte turns rcnt + 1.
            let want = (rcnt + 1) as u8;
            let mut t0 = None::<Instant>;
            let mut gate = ClockGate::default();
            // Under validation, a counter byte that is neither the last value nor the next
            // is a damaged WRITE: reported as such, not waited for until the stall limit.
            let mut damaged = None;
            loop {
                if let Some(b) = &watched {
                    if (0..WATCH_SPINS).any(|_| b.load() == want) {
                        break;
                    }
                    if !gate.due() {
                        continue;
                    }
                } else if s.mr.watch_byte(poll_at, want, WATCH_SPINS)? {
                    break;
                } else if !gate.due() {
                    continue;
                }
                // A WRITE that failed completes even unsignaled, and its peer never answers:
                // the error, not the stall limit, ends the wait.
                try_wc(s, &mut wc)?;
                if plan.seeds.is_some() {
                    let mut b = [0u8; 1];
                    s.mr.read(poll_at, &mut b)?;
                    if b[0] != want && b[0] != rcnt as u8 {
                        damaged = Some(b[0]);
                        break;
                    }
                }
                if past(deadline) {
                    break 'run;
                }
                if t0.get_or_insert_with(Instant::now).elapsed() > s.stall {
                    return Err(Error::Stalled(s.stall));
                }
            }
            if let Some(got) = damaged {
                // Counted as the WRITE it was, damaged: the ping-pong goes on.
                v.record(size, || {
                    Some(format!(
                        "QP 0: WRITE {rcnt}, its last byte is {got:#04x}, not the counter {want:#04x}"
                    ))
                });
            } else if let Some(sd) = plan.seeds
                && size > 1
            {
                s.mr.read(s.layout.remote(0, 0), &mut buf)?;
                let e = pattern::check(sd.peer, 0, rcnt, &buf[..size - 1])
                    .map(|o| format!("QP 0: WRITE {rcnt}, byte {o} differs: {:02x?}", &buf));
                v.record(size, || e);
            }
            rcnt += 1;
        }
        if scnt < iters {
            if let Some(sd) = plan.seeds {
                pattern::fill(sd.mine, 0, scnt, &mut buf);
                buf[size - 1] = (scnt + 1) as u8;
                s.mr.write(post_at, &buf)?;
            } else if let Some(c) = &counter {
                // The counter byte alone (the rest never changes), as perftest writes it.
                c.store((scnt + 1) as u8);
            } else {
                s.mr.write(post_at + size - 1, &[(scnt + 1) as u8])?;
            }
            rec.post();
            // Only every 16th WRITE, and the last, asks for a completion (as SEND latency's
            // sends): the poll is then off the ping-pong's path 15 times in 16
            // (BENCHMARKS.md, "Hot paths", H8).
            let signaled = scnt % SIGNAL_EVERY == SIGNAL_EVERY - 1 || scnt + 1 == iters;
            template.set_wr_id(wr_id(0, scnt));
            template.set_signaled(signaled);
            qp.post_prepared_send(&mut template)?;
            scnt += 1;
            if signaled && wait_wc(s, &mut wc, deadline)? == 0 {
                break 'run;
            }
        }
        if scnt.is_multiple_of(64) && last_report.elapsed() >= Duration::from_millis(250) {
            last_report = Instant::now();
            progress(scnt, scnt * size as u64);
        }
    }
    // A run of iterations has seen its last WRITE's completion (it is signaled). A run of a
    // duration leaves the message in flight at its deadline, as perftest does: write
    // latency has no barrier after it, and the peer, stopped at its own deadline, may have
    // closed its QP before answering (the completion would be a retry error a few hundred
    // milliseconds on). One that has already come is looked at.
    if deadline.is_some() {
        try_wc(s, &mut wc)?;
    }
    lat_outcome(&rec, scnt, v)
}

/// READ or atomic latency (round-trip factor 1): one operation at a time.
pub fn one_sided_lat(
    s: &Side<'_>,
    plan: &LatPlan,
    op: BwOp,
    progress: OnProgress<'_>,
) -> Result<LatOutcome, Error> {
    let (iters, deadline) = lat_iters(plan.stop);
    let size = if op.is_atomic() { 8 } else { plan.size };
    let mut rec = LatencyRecorder::new(size as u64, 1.0, deadline.is_some());
    rec.reserve(iters.saturating_add(1));
    let mut v = Validation::default();
    let mut wc = [empty_wc(); 1];
    let mut last_report = Instant::now();
    let mut i = 0u64;
    // The deadline is looked at when the clock gate opens, not at every operation (the OS
    // clock is a system call on some hosts): the peer is passive and waits for the close, so
    // running up to a gate interval over costs nothing. The two-sided loops look every
    // iteration: there the side that stops late would post to a peer that has gone.
    let mut run_clock = ClockGate::default();
    while i < iters && !deadline.is_some_and(|d| run_clock.due() && Instant::now() >= d) {
        rec.post();
        s.qps[0].post_send(send_wr(s, 0, i, op, size, &plan.peer, plan.seeds)?)?;
        next_wc(s, &mut wc)?;
        if let Some(sd) = plan.seeds {
            let (l, e) = check_completion(s, 0, i, op, size, sd);
            v.record(l, || e);
        }
        i += 1;
        if i.is_multiple_of(64) && last_report.elapsed() >= Duration::from_millis(250) {
            last_report = Instant::now();
            progress(i, i * size as u64);
        }
    }
    // The interval after the last operation ends with its completion.
    rec.post();
    let mut out = lat_outcome(&rec, i, v)?;
    out.latency.iters = i;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_gate_opens_after_its_ticks_and_not_before() {
        let mut g = ClockGate::default();
        let t0 = ticks();
        assert!(!g.due(), "the first look starts the interval");
        let mut looks = 0u64;
        while !g.due() {
            looks += 1;
        }
        let waited = ticks() - t0;
        assert!(waited >= CLOCK_TICKS, "opened after {waited} ticks");
        assert!(looks > 0);
        assert!(!g.due(), "closed again at once");
        // Counting polls: the tick counter is looked at only every CLOCK_EVERY of them.
        let mut g = ClockGate::default();
        assert!((1..CLOCK_EVERY).all(|_| !g.due_after_poll()));
        assert_eq!(g.next, None, "no look at the ticks before the CLOCK_EVERY-th poll");
        assert!(!g.due_after_poll(), "the first look starts the interval");
        assert!(g.next.is_some());
    }
}
