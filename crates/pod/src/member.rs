//! Membership and failure detection over every host of a pod: SWIM, as the `foca` crate
//! implements it, driven sans-IO (the caller brings datagrams and the time; this module
//! hands back datagrams and the next deadline).
//!
//! Two things are added around foca:
//! - **Local health** (Lifeguard's local health multiplier; foca has SWIM's suspicion but
//!   not this): a host whose own loop runs late — a saturated CPU, a frozen process that
//!   resumes — would otherwise time out probes whose answers sit unread in its socket and
//!   declare healthy peers dead. Each timer foca asks for is stretched by `1 + lhm`, where
//!   `lhm` (0–[`MAX_LHM`]) rises each time a timer fires later than [`Timeouts::late`] and
//!   falls back each probe period that runs on time. The driver also reads every pending
//!   datagram before it fires any timer.
//! - **Reports**: foca's custom broadcasts carry each host's latest path report (what its
//!   probes saw), so every host holds the pod's whole path matrix.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::num::{NonZeroU8, NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use foca::{BroadcastHandler, Config, Foca, Identity, Invalidates, Notification, Timer};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::{Deserialize, Serialize};

/// The local health multiplier's ceiling: timers stretch to at most 9× when starved.
pub const MAX_LHM: u32 = 8;

/// A member of the pod: its host (index in the plan), the incarnation of its process
/// (start time, ms since the epoch, then +1 per rejoin: a restarted host wins over its old
/// self), where its membership messages go, and the QPNs of its probe QPs by rail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Id {
    /// The host's index in the pod plan.
    pub host: u16,
    /// Which identity of the host's agent: its start (ms since the epoch), +1 each time it
    /// rejoins after being declared down.
    pub incarnation: u64,
    /// Which life of the host's agent: its start, ms since the epoch (a rejoin keeps it; a
    /// restart changes it). The pod channels' epoch.
    pub boot: u64,
    /// The control addresses (one per rail: a message goes out on every one, so one dead rail
    /// does not make a host look dead).
    pub addrs: Vec<SocketAddr>,
    /// The probe UD QP of each rail.
    pub qpns: Vec<u32>,
}

impl Identity for Id {
    type Addr = u16;

    fn renew(&self) -> Option<Self> {
        // At least the clock: an identity renewed after a conflict starts from now, never
        // from a figure someone else made up.
        let now = crate::seal::unix_us() / 1000;
        Some(Id { incarnation: (self.incarnation + 1).max(now), ..self.clone() })
    }

    fn addr(&self) -> u16 {
        self.host
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        self.incarnation > adversary.incarnation
    }
}

/// How far an identity's incarnation may run ahead of the receiver's clock (ms): the sender's
/// clock skew, and its rejoins (+1 each, a handful in a day).
pub const MAX_INCARNATION_AHEAD_MS: u64 = 300_000 + 100_000;
/// Bytes of a report's body, at most.
pub const MAX_REPORT: usize = 1000;

/// What an honest member's identity looks like, from the plan: which hosts exist, their
/// control addresses and rails. A datagram carrying another is refused whole.
#[derive(Debug, Clone, Default)]
pub struct Bounds {
    /// Each plan host's control addresses (empty: not checked) and rails.
    pub hosts: Vec<(Vec<SocketAddr>, usize)>,
}

impl Bounds {
    /// Plan hosts with no address check (`rails` each).
    pub fn hosts(n: usize, rails: usize) -> Bounds {
        Bounds { hosts: vec![(Vec::new(), rails); n] }
    }

    /// Whether `id` is one an honest member of the plan could have, at `now_ms`.
    pub fn plausible(&self, id: &Id, now_ms: u64) -> bool {
        let Some((addrs, rails)) = self.hosts.get(usize::from(id.host)) else { return false };
        let ceiling = now_ms.saturating_add(MAX_INCARNATION_AHEAD_MS);
        (addrs.is_empty() || *addrs == id.addrs)
            && (id.qpns.is_empty() || id.qpns.len() == *rails)
            && id.addrs.len() <= 16
            && id.boot <= id.incarnation
            && id.incarnation <= ceiling
    }
}

/// foca's postcard codec, refusing what no honest member sends: an identity outside the
/// plan, at another address or with an incarnation past the clock; a header whose sender is
/// not the host that sealed the datagram.
struct Checked {
    inner: foca::PostcardCodec,
    shared: Arc<Mutex<Check>>,
}

#[derive(Debug, Default)]
struct Check {
    bounds: Bounds,
    /// The host that sealed the datagram being read (none: not known).
    sender: Option<u16>,
    implausible: u64,
    /// Per host: the identity's incarnation and the highest of foca's own incarnations seen
    /// for it.
    foca: std::collections::HashMap<u16, (u64, u16)>,
}

/// foca's own incarnation of a member rises by one each time it refutes a suspicion: a jump
/// past the highest seen for the same identity by more than this is refused.
pub const MAX_FOCA_STEP: u16 = 64;
/// … and, for an identity not seen yet, a value above this.
pub const MAX_FOCA_FIRST: u16 = 4096;

impl Check {
    /// Whether foca's incarnation `inc` of `id` is one an honest peer could have reached;
    /// the highest is kept.
    fn foca_plausible(&mut self, id: &Id, inc: u16) -> bool {
        let ok = match self.foca.get(&id.host) {
            Some(&(ours, seen)) if ours == id.incarnation => {
                inc <= seen.saturating_add(MAX_FOCA_STEP)
            }
            // An older identity of the host: foca takes the newer one regardless.
            Some(&(ours, _)) if ours > id.incarnation => true,
            _ => inc <= MAX_FOCA_FIRST,
        };
        if ok {
            let e = self.foca.entry(id.host).or_insert((id.incarnation, inc));
            if id.incarnation > e.0 {
                *e = (id.incarnation, inc);
            } else if id.incarnation == e.0 {
                e.1 = e.1.max(inc);
            }
        }
        ok
    }
}

impl Checked {
    fn check(&self, ids: &[&Id], foca: Option<(&Id, u16)>) -> Result<(), postcard::Error> {
        let now = crate::seal::unix_us() / 1000;
        let mut c = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.iter().all(|id| c.bounds.plausible(id, now))
            && foca.is_none_or(|(id, inc)| c.foca_plausible(id, inc))
        {
            Ok(())
        } else {
            c.implausible += 1;
            Err(postcard::Error::SerdeDeCustom)
        }
    }
}

impl foca::Codec<Id> for Checked {
    type Error = postcard::Error;

    fn encode_header(
        &mut self,
        header: &foca::Header<Id>,
        buf: impl bytes::BufMut,
    ) -> Result<(), Self::Error> {
        self.inner.encode_header(header, buf)
    }

    fn decode_header(&mut self, buf: impl bytes::Buf) -> Result<foca::Header<Id>, Self::Error> {
        let h = self.inner.decode_header(buf)?;
        let named = match &h.message {
            foca::Message::PingReq { target, .. } | foca::Message::IndirectAck { target, .. } => {
                Some(target)
            }
            foca::Message::IndirectPing { origin, .. }
            | foca::Message::ForwardedAck { origin, .. } => Some(origin),
            _ => None,
        };
        let mut ids = vec![&h.src, &h.dst];
        ids.extend(named);
        self.check(&ids, Some((&h.src, h.src_incarnation)))?;
        let sender = self.shared.lock().unwrap_or_else(PoisonError::into_inner).sender;
        if sender.is_some_and(|s| s != h.src.host) {
            self.shared.lock().unwrap_or_else(PoisonError::into_inner).implausible += 1;
            return Err(postcard::Error::SerdeDeCustom);
        }
        Ok(h)
    }

    fn encode_member(
        &mut self,
        member: &foca::Member<Id>,
        buf: impl bytes::BufMut,
    ) -> Result<(), Self::Error> {
        self.inner.encode_member(member, buf)
    }

    fn decode_member(&mut self, buf: impl bytes::Buf) -> Result<foca::Member<Id>, Self::Error> {
        let m = self.inner.decode_member(buf)?;
        self.check(&[m.id()], Some((m.id(), m.incarnation())))?;
        Ok(m)
    }
}

/// The failure detector's timing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timeouts {
    /// A random member is probed this often.
    pub probe_period: Duration,
    /// A direct probe unanswered this long goes indirect.
    pub probe_rtt: Duration,
    /// A suspect that does not refute in this long is down.
    pub suspect_to_down: Duration,
    /// A timer fired this late means this host's own loop was starved.
    pub late: Duration,
}

impl Default for Timeouts {
    /// Sized for a 100 ms probe period: a dead host is probed within ~1–2 periods by one of
    /// the others, suspected after 100 ms, down 300 ms later — well under a second.
    fn default() -> Timeouts {
        Timeouts {
            probe_period: Duration::from_millis(100),
            probe_rtt: Duration::from_millis(40),
            suspect_to_down: Duration::from_millis(300),
            late: Duration::from_millis(25),
        }
    }
}

impl Timeouts {
    /// foca's configuration for a pod of `hosts`.
    fn config(&self, hosts: usize) -> Config {
        let n = NonZeroU32::new(hosts.max(1) as u32).unwrap_or(NonZeroU32::MIN);
        let mut c = Config::new_lan(n);
        c.probe_period = self.probe_period;
        c.probe_rtt = self.probe_rtt;
        c.suspect_to_down_after = self.suspect_to_down;
        c.num_indirect_probes = NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN);
        c.max_packet_size = NonZeroUsize::new(1400).unwrap_or(NonZeroUsize::MIN);
        // Reports are disseminated by gossip too, not only on probes: a path report reaches
        // every host within a few gossip rounds.
        c.periodic_gossip = Some(foca::PeriodicParams {
            frequency: self.probe_period,
            num_members: NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN),
        });
        c.periodic_announce = Some(foca::PeriodicParams {
            frequency: Duration::from_secs(2),
            num_members: NonZeroUsize::MIN,
        });
        c.periodic_announce_to_down_members = Some(foca::PeriodicParams {
            frequency: Duration::from_secs(1),
            num_members: NonZeroUsize::new(2).unwrap_or(NonZeroUsize::MIN),
        });
        c.notify_down_members = true;
        c.max_transmissions = NonZeroU8::new(8).unwrap_or(NonZeroU8::MIN);
        c.remove_down_after = None;
        c
    }
}

/// How long a datagram is remembered to drop its copies from the other rails.
pub const SEEN_FOR: Duration = Duration::from_millis(500);
const SEEN_MAX: usize = 512;

/// How a member stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Answering.
    Alive,
    /// Someone's probe went unanswered; it has a while to refute.
    Suspect,
    /// Declared down.
    Down,
}

/// A foca member state as a [`Health`].
fn health_of(s: foca::State) -> Health {
    match s {
        foca::State::Alive => Health::Alive,
        foca::State::Suspect => Health::Suspect,
        foca::State::Down => Health::Down,
    }
}

/// A change of a member's health, as this host saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// When (the caller's clock).
    #[serde(skip)]
    pub at: Instant,
    /// The host.
    pub host: u16,
    /// Its new health.
    pub health: Health,
}

/// A member as this host sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its identity (the latest incarnation).
    pub id: Id,
    /// Its health.
    pub health: Health,
    /// Since when (the caller's clock).
    pub since: Instant,
}

/// A report as broadcast: (origin host, version), then the body, opaque here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Envelope {
    host: u16,
    version: u64,
    body: Vec<u8>,
}

/// A broadcast's key: a newer version from the same host replaces an older one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReportKey {
    host: u16,
    version: u64,
}

impl Invalidates for ReportKey {
    fn invalidates(&self, other: &Self) -> bool {
        self.host == other.host && self.version >= other.version
    }
}

/// The latest report of each host, by host.
pub type Reports = BTreeMap<u16, (u64, Vec<u8>)>;

/// Why a broadcast was refused.
#[derive(Debug, thiserror::Error)]
#[error("a report that does not decode: {0}")]
pub struct BadReport(postcard::Error);

struct Gossip {
    reports: Arc<Mutex<Reports>>,
    shared: Arc<Mutex<Check>>,
}

impl BroadcastHandler<Id> for Gossip {
    type Key = ReportKey;
    type Error = BadReport;

    fn receive_item(
        &mut self,
        data: &[u8],
        _: Option<&Id>,
    ) -> Result<Option<ReportKey>, BadReport> {
        let e: Envelope = postcard::from_bytes(data).map_err(BadReport)?;
        {
            // A report of a host in the plan, of a size one sends, at a version (its clock,
            // ms) an honest host could have reached.
            let now = crate::seal::unix_us() / 1000;
            let mut c = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
            if usize::from(e.host) >= c.bounds.hosts.len()
                || e.body.len() > MAX_REPORT
                || e.version > now.saturating_add(MAX_INCARNATION_AHEAD_MS)
            {
                c.implausible += 1;
                return Err(BadReport(postcard::Error::SerdeDeCustom));
            }
        }
        let mut r = self.reports.lock().unwrap_or_else(PoisonError::into_inner);
        match r.get(&e.host) {
            Some((v, _)) if *v >= e.version => Ok(None),
            _ => {
                let key = ReportKey { host: e.host, version: e.version };
                r.insert(e.host, (e.version, e.body));
                Ok(Some(key))
            }
        }
    }
}

/// What foca asked of its runtime during one call.
struct Rt {
    now: Instant,
    stretch: u32,
    seq: u64,
    timers: BTreeMap<(Instant, u64), Timer<Id>>,
    /// Periodic timers fall on this grid (epoch, period): see [`Membership::align`].
    grid: Option<(Instant, Duration)>,
    out: Vec<(Id, Vec<u8>)>,
    notes: Vec<Note>,
}

enum Note {
    Up(Id),
    Down(Id),
    Rename(Id),
    Defunct,
}

impl foca::Runtime<Id> for Rt {
    fn notify(&mut self, n: Notification<'_, Id>) {
        match n {
            Notification::MemberUp(id) => self.notes.push(Note::Up(id.clone())),
            Notification::MemberDown(id) => self.notes.push(Note::Down(id.clone())),
            Notification::Rename(_, id) => self.notes.push(Note::Rename(id.clone())),
            Notification::Defunct => self.notes.push(Note::Defunct),
            _ => {}
        }
    }

    fn send_to(&mut self, to: Id, data: &[u8]) {
        self.out.push((to, data.to_vec()));
    }

    fn submit_after(&mut self, event: Timer<Id>, after: Duration) {
        self.seq += 1;
        let mut at = self.now + after * (1 + self.stretch);
        let periodic = matches!(
            event,
            Timer::ProbeRandomMember(_)
                | Timer::PeriodicGossip(_)
                | Timer::PeriodicAnnounce(_)
                | Timer::PeriodicAnnounceDown(_)
        );
        if let Some((epoch, period)) = self.grid.filter(|(_, p)| periodic && !p.is_zero()) {
            // The nearest point of the grid still ahead: the period holds on average, and
            // the host's periodic work shares one wake-up.
            let since = at.saturating_duration_since(epoch).as_nanos();
            let p = period.as_nanos();
            let k = (since + p / 2) / p;
            let snapped = epoch + Duration::from_nanos((k * p).min(u128::from(u64::MAX)) as u64);
            at = if snapped > self.now { snapped } else { snapped + period };
        }
        self.timers.insert((at, self.seq), event);
    }
}

/// Why a membership call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// foca refused a datagram or a call.
    #[error("membership: {0}")]
    Foca(#[from] foca::Error),
    /// A report too large to broadcast.
    #[error("a report of {0} bytes does not fit a membership datagram")]
    TooLarge(usize),
}

/// This host's view of the pod's membership.
pub struct Membership {
    foca: Foca<Id, Checked, SmallRng, Gossip>,
    check: Arc<Mutex<Check>>,
    rt: Rt,
    timeouts: Timeouts,
    lhm: u32,
    reports: Arc<Mutex<Reports>>,
    version: u64,
    members: BTreeMap<u16, Member>,
    /// Datagrams seen lately (when, hash): the copies the other rails carry are dropped.
    seen: VecDeque<(Instant, u64)>,
    seen_hasher: std::hash::RandomState,
    copies: u64,
    /// Moves whenever a member is added or its identity or health changes.
    changes: u64,
    events: Vec<Event>,
    /// The largest lateness of a timer seen, and how many fired late.
    worst_late: Duration,
    late_timers: u64,
    /// When a datagram last arrived from any member.
    last_heard: Option<Instant>,
    /// When the first datagram arrived after a silence of [`Membership::cut_off_after`]:
    /// the suspicions raised meanwhile have this long to be refuted.
    heard_again: Option<Instant>,
    /// Suspicions whose timeout fell while this host was cut off, held back.
    held_back: u64,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("me", self.foca.identity())
            .field("lhm", &self.lhm)
            .field("members", &self.members.len())
            .finish()
    }
}

impl Membership {
    /// This host (`me`) in a pod of `hosts`, its random choices seeded by `seed`.
    pub fn new(me: Id, hosts: usize, timeouts: Timeouts, seed: u64, now: Instant) -> Membership {
        let reports = Arc::new(Mutex::new(Reports::new()));
        let rails = me.addrs.len().max(me.qpns.len());
        let check =
            Arc::new(Mutex::new(Check { bounds: Bounds::hosts(hosts, rails), ..Check::default() }));
        let foca = Foca::with_custom_broadcast(
            me,
            timeouts.config(hosts),
            SmallRng::seed_from_u64(seed),
            Checked { inner: foca::PostcardCodec, shared: check.clone() },
            Gossip { reports: reports.clone(), shared: check.clone() },
        );
        Membership {
            foca,
            check,
            rt: Rt {
                now,
                stretch: 0,
                seq: 0,
                timers: BTreeMap::new(),
                grid: None,
                out: Vec::new(),
                notes: Vec::new(),
            },
            timeouts,
            lhm: 0,
            reports,
            version: 0,
            changes: 0,
            seen: VecDeque::new(),
            seen_hasher: std::hash::RandomState::new(),
            copies: 0,
            members: BTreeMap::new(),
            events: Vec::new(),
            worst_late: Duration::ZERO,
            late_timers: 0,
            last_heard: None,
            heard_again: None,
            held_back: 0,
        }
    }

    /// This host's identity.
    pub fn me(&self) -> &Id {
        self.foca.identity()
    }

    /// Asks `seeds` (the other hosts, as the plan names them; their QPNs unknown yet) to let
    /// this host in.
    pub fn join(&mut self, seeds: &[Id], now: Instant) -> Result<(), Error> {
        self.rt.now = now;
        for s in seeds {
            self.foca.announce(s.clone(), &mut self.rt)?;
        }
        self.absorb(now);
        Ok(())
    }

    /// What an honest member's identity looks like (default: the hosts of the pod, with
    /// this host's number of rails, at any address).
    pub fn set_bounds(&mut self, bounds: Bounds) {
        self.check.lock().unwrap_or_else(PoisonError::into_inner).bounds = bounds;
    }

    /// Datagrams and reports refused for carrying what no honest member sends.
    pub fn implausible(&self) -> u64 {
        self.check.lock().unwrap_or_else(PoisonError::into_inner).implausible
    }

    /// A membership datagram arrived from host `sender` (as its seal says): every identity
    /// in it is checked against the plan and the clock, and its header must be the sender's.
    pub fn handle_from(&mut self, sender: u16, data: &[u8], now: Instant) -> Result<(), Error> {
        self.check.lock().unwrap_or_else(PoisonError::into_inner).sender = Some(sender);
        let r = self.handle_datagram(data, now);
        self.check.lock().unwrap_or_else(PoisonError::into_inner).sender = None;
        r
    }

    /// A membership datagram arrived.
    pub fn handle_datagram(&mut self, data: &[u8], now: Instant) -> Result<(), Error> {
        if self.last_heard.is_none_or(|t| now.saturating_duration_since(t) > self.cut_off_after()) {
            self.heard_again = Some(now);
        }
        self.last_heard = Some(now);
        // Every rail carries a copy of each message: the second copy is dropped here (foca
        // would answer a ping twice, on every rail). A datagram repeated byte for byte
        // within the window tells foca nothing new.
        let h = {
            use std::hash::{BuildHasher, Hasher};
            let mut x = self.seen_hasher.build_hasher();
            x.write(data);
            x.finish()
        };
        while self.seen.front().is_some_and(|(t, _)| now.saturating_duration_since(*t) > SEEN_FOR) {
            self.seen.pop_front();
        }
        if self.seen.iter().any(|(_, s)| *s == h) {
            self.copies += 1;
            return Ok(());
        }
        if self.seen.len() >= SEEN_MAX {
            self.seen.pop_front();
        }
        self.seen.push_back((now, h));
        self.rt.now = now;
        self.rt.stretch = self.lhm;
        let r = self.foca.handle_data(data, &mut self.rt);
        self.absorb(now);
        r.map_err(Error::from)
    }

    /// The next deadline to call [`Membership::handle_timeouts`] at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.rt.timers.keys().next().map(|(at, _)| *at)
    }

    /// Fires every timer due by `now`. Read every pending datagram first: an answer that sits
    /// unread is not a silent peer.
    pub fn handle_timeouts(&mut self, now: Instant) -> Result<(), Error> {
        self.rt.now = now;
        let mut result = Ok(());
        while let Some((&(at, seq), _)) = self.rt.timers.first_key_value() {
            if at > now {
                break;
            }
            let Some(t) = self.rt.timers.remove(&(at, seq)) else { break };
            let late = now.saturating_duration_since(at);
            let probe = matches!(t, Timer::ProbeRandomMember(_));
            if late > self.timeouts.late {
                self.late_timers += 1;
                self.worst_late = self.worst_late.max(late);
                self.lhm = (self.lhm + 1).min(MAX_LHM);
            } else if probe {
                self.lhm = self.lhm.saturating_sub(1);
            }
            self.rt.stretch = self.lhm;
            if matches!(t, Timer::ChangeSuspectToDown { .. }) && self.cut_off(now) {
                // Cut off, or just back: what it suspected may be no one's fault but its
                // own rails'. The suspicion stays, and is judged again a timeout later.
                self.held_back += 1;
                self.rt.seq += 1;
                self.rt.timers.insert((now + self.timeouts.suspect_to_down, self.rt.seq), t);
                continue;
            }
            if let Err(e) = self.foca.handle_timer(t, &mut self.rt) {
                result = Err(e.into());
            }
        }
        self.absorb(now);
        result
    }

    /// How long a silence of every member means this host is cut off (three probe
    /// periods: each host pings one member and gossips to three a period, so a host hears
    /// several datagrams a period while any path to it carries).
    fn cut_off_after(&self) -> Duration {
        self.timeouts.probe_period * 3
    }

    /// Whether this host is cut off from the pod — two or more members not down, and
    /// nothing heard from any of them for [`Membership::cut_off_after`] — or heard from
    /// them again less than a suspicion timeout ago. A host whose own rails are cut (a
    /// flapping cable of a one-rail host, its ToR dropping everything) suspects every member
    /// it probes meanwhile; declared down, those would spread pod-wide as it comes back (SWIM
    /// takes a member down for good at its incarnation: each must rejoin). Its suspicions
    /// wait instead, and the members refute them once it hears them again. With one other
    /// member, its silence says nothing of who is cut off: it is judged as SWIM would.
    fn cut_off(&self, now: Instant) -> bool {
        let others = self.members.values().filter(|m| m.health != Health::Down).count();
        let silent = self
            .last_heard
            .is_some_and(|t| now.saturating_duration_since(t) > self.cut_off_after());
        let back = self
            .heard_again
            .is_some_and(|t| now.saturating_duration_since(t) < self.timeouts.suspect_to_down);
        others >= 2 && (silent || back)
    }

    /// Suspicions held back while this host was cut off (each time one fell due).
    pub fn held_back(&self) -> u64 {
        self.held_back
    }

    /// The next datagram to send: (to whom, bytes). Send it to every address of the member.
    pub fn poll_transmit(&mut self) -> Option<(Id, Vec<u8>)> {
        if self.rt.out.is_empty() { None } else { Some(self.rt.out.remove(0)) }
    }

    /// Broadcasts this host's report (`body`, opaque here), replacing its last.
    pub fn publish(&mut self, body: Vec<u8>) -> Result<(), Error> {
        // The clock (ms), moved on by one where it has not: a restarted host's reports are
        // newer than its last life's, and no version runs far past the clock (a receiver
        // refuses one that does).
        self.version = (self.version + 1).max(crate::seal::unix_us() / 1000);
        let host = self.me().host;
        let e = Envelope { host, version: self.version, body };
        let data = postcard::to_allocvec(&e).map_err(|_| Error::TooLarge(0))?;
        if data.len() > MAX_REPORT {
            return Err(Error::TooLarge(data.len()));
        }
        self.foca.add_broadcast(&data)?;
        Ok(())
    }

    /// The latest report of every host (its own included).
    pub fn reports(&self) -> Reports {
        self.reports.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Puts foca's periodic timers (its probe of a random member, gossip, announcements) on
    /// the points `epoch + k × period`: with the host's own periodic work on the same grid
    /// (its probe rounds), a period costs one wake-up instead of one per timer.
    pub fn align(&mut self, epoch: Instant, period: Duration) {
        self.rt.grid = Some((epoch, period));
    }

    /// Datagrams dropped as copies of one handled within [`SEEN_FOR`] (one per rail but
    /// the first, typically).
    pub fn copies(&self) -> u64 {
        self.copies
    }

    /// A count that moves whenever [`Membership::members`] changes (a member added, or
    /// its identity or health changed): what is derived from the members need be derived
    /// again only then.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The members this host knows, itself excluded.
    pub fn members(&self) -> &BTreeMap<u16, Member> {
        &self.members
    }

    /// Takes the health changes seen since the last call.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The local health multiplier now (0: healthy).
    pub fn local_health(&self) -> u32 {
        self.lhm
    }

    /// Timers that fired late, and the latest of them.
    pub fn lateness(&self) -> (u64, Duration) {
        (self.late_timers, self.worst_late)
    }

    /// Folds foca's notifications and suspicions into the member table.
    fn absorb(&mut self, now: Instant) {
        for n in std::mem::take(&mut self.rt.notes) {
            match n {
                Note::Up(id) | Note::Rename(id) => self.set(id, Health::Alive, now),
                Note::Down(id) => self.set(id, Health::Down, now),
                Note::Defunct => {}
            }
        }
        // Suspicion is not notified: read it from the membership state (cloning only the
        // members whose health or identity changed: this runs on every call).
        let changed: Vec<(Id, foca::State)> = self
            .foca
            .iter_membership_state()
            .filter(|m| {
                let known = self.members.get(&m.id().host);
                let h = health_of(m.state());
                known.is_none_or(|k| k.health != h || k.id.incarnation != m.id().incarnation)
            })
            .map(|m| (m.id().clone(), m.state()))
            .collect();
        for (id, s) in changed {
            let h = health_of(s);
            let newest =
                self.members.get(&id.host).is_none_or(|m| m.id.incarnation <= id.incarnation);
            if newest {
                self.set(id, h, now);
            }
        }
    }

    fn set(&mut self, id: Id, health: Health, now: Instant) {
        if id.host == self.me().host {
            return;
        }
        let host = id.host;
        match self.members.get_mut(&host) {
            Some(m) if m.id.incarnation > id.incarnation => {}
            Some(m) => {
                let changed = m.health != health;
                if changed || m.id != id {
                    self.changes += 1;
                }
                m.id = id;
                if changed {
                    m.health = health;
                    m.since = now;
                    self.events.push(Event { at: now, host, health });
                }
            }
            None => {
                self.changes += 1;
                self.members.insert(host, Member { id, health, since: now });
                self.events.push(Event { at: now, host, health });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod of `n` memberships exchanging datagrams in virtual time, each delayed `delay`;
    /// hosts in `dead` neither send nor receive; hosts in `slow` run their loop only every
    /// `slow_every`.
    struct Sim {
        t0: Instant,
        now: Instant,
        ms: Vec<Membership>,
        flight: Vec<(Instant, u16, Vec<u8>)>,
        dead: Vec<u16>,
        /// Hosts whose loop runs, but whose datagrams are lost both ways (their cables).
        cut: Vec<u16>,
        slow: Vec<u16>,
        slow_every: Duration,
        last_run: Vec<Instant>,
        copies: bool,
        sent: u64,
    }

    fn id(h: u16) -> Id {
        Id {
            host: h,
            incarnation: 1,
            boot: 1,
            addrs: vec![SocketAddr::from(([10, 1, h as u8, 1], 7946))],
            qpns: vec![],
        }
    }

    impl Sim {
        fn new(n: u16) -> Sim {
            let t0 = Instant::now();
            let mut ms: Vec<Membership> = (0..n)
                .map(|h| Membership::new(id(h), n as usize, Timeouts::default(), h as u64, t0))
                .collect();
            for (h, m) in ms.iter_mut().enumerate() {
                let seeds: Vec<Id> = (0..n).filter(|&o| o != h as u16).map(id).collect();
                m.join(&seeds, t0).unwrap();
            }
            Sim {
                t0,
                now: t0,
                ms,
                flight: Vec::new(),
                dead: vec![],
                cut: vec![],
                slow: vec![],
                slow_every: Duration::ZERO,
                last_run: vec![t0; n as usize],
                copies: false,
                sent: 0,
            }
        }

        /// A pod whose hosts put their periodic timers on a `period` grid from the start.
        fn aligned(n: u16, period: Duration) -> Sim {
            let mut s = Sim::new(n);
            let t0 = s.t0;
            for m in &mut s.ms {
                m.align(t0, period);
            }
            s
        }

        fn step(&mut self, dt: Duration) {
            self.now += dt;
            let now = self.now;
            for h in 0..self.ms.len() {
                let hh = h as u16;
                if self.dead.contains(&hh) {
                    continue;
                }
                if self.slow.contains(&hh) && now - self.last_run[h] < self.slow_every {
                    continue;
                }
                self.last_run[h] = now;
                // Datagrams first, then timers.
                let mine: Vec<Vec<u8>> = {
                    let (arrived, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.flight)
                        .into_iter()
                        .partition(|(at, to, _)| *to == hh && *at <= now);
                    self.flight = rest;
                    arrived.into_iter().map(|(_, _, d)| d).collect()
                };
                for d in mine {
                    let _ = self.ms[h].handle_datagram(&d, now);
                }
                let _ = self.ms[h].handle_timeouts(now);
                while let Some((to, d)) = self.ms[h].poll_transmit() {
                    self.sent += 1;
                    let lost = [hh, to.host].iter().any(|x| self.cut.contains(x));
                    if !self.dead.contains(&to.host) && !lost {
                        if self.copies {
                            // The other rail's copy, a little later.
                            self.flight.push((now + Duration::from_micros(80), to.host, d.clone()));
                        }
                        self.flight.push((now + Duration::from_micros(50), to.host, d));
                    }
                }
            }
        }

        fn run(&mut self, d: Duration) {
            let end = self.now + d;
            while self.now < end {
                self.step(Duration::from_millis(1));
            }
        }

        fn health(&self, at: u16, of: u16) -> Option<Health> {
            self.ms[at as usize].members().get(&of).map(|m| m.health)
        }
    }

    #[test]
    fn every_host_joins_and_a_dead_one_is_down_everywhere_within_a_second() {
        let mut s = Sim::new(8);
        s.run(Duration::from_secs(2));
        for h in 0..8 {
            for o in (0..8).filter(|&o| o != h) {
                assert_eq!(s.health(h, o), Some(Health::Alive), "{h} sees {o}");
            }
        }
        s.dead.push(3);
        let died = s.now;
        let mut seen = vec![None; 8];
        while s.now - died < Duration::from_secs(3) {
            s.step(Duration::from_millis(1));
            for h in (0..8u16).filter(|&h| h != 3) {
                if seen[h as usize].is_none() && s.health(h, 3) == Some(Health::Down) {
                    seen[h as usize] = Some(s.now - died);
                }
            }
        }
        let worst = seen.iter().enumerate().filter(|(h, _)| *h != 3).map(|(_, t)| t.unwrap()).max();
        assert!(worst.unwrap() < Duration::from_secs(1), "{seen:?}");
        // Nobody else was suspected meanwhile.
        for h in (0..8u16).filter(|&h| h != 3) {
            for o in (0..8u16).filter(|&o| o != h && o != 3) {
                assert_eq!(s.health(h, o), Some(Health::Alive));
            }
        }
        let _ = s.t0;
    }

    /// Down events among `hosts` seen anywhere since the last call.
    fn downs(s: &mut Sim) -> Vec<(u16, u16)> {
        let mut out = Vec::new();
        for (h, m) in s.ms.iter_mut().enumerate() {
            for e in m.take_events() {
                if e.health == Health::Down {
                    out.push((h as u16, e.host));
                }
            }
        }
        out
    }

    #[test]
    fn a_starved_host_does_not_declare_healthy_peers_down() {
        // Host 2's loop runs only every 250 ms (a saturated CPU): the answers to its probes
        // and the refutations of its suspicions wait unread for longer than a probe period.
        let mut s = Sim::new(6);
        s.run(Duration::from_secs(2));
        downs(&mut s);
        s.slow = vec![2];
        s.slow_every = Duration::from_millis(250);
        s.run(Duration::from_secs(20));
        let d = downs(&mut s);
        assert!(d.iter().all(|(_, of)| *of == 2), "a healthy host was declared down: {d:?}");
        assert!(s.ms[2].lateness().0 > 0, "the starvation was seen");
        assert!(s.ms[2].local_health() > 0);
    }

    #[test]
    fn a_host_cut_off_again_and_again_takes_no_one_else_down() {
        // Host 5's only cable flaps: down 1.8 s, up 1.8 s. Each time, the others take it
        // down; it suspects every member it probes meanwhile, and must not take them down
        // (nor spread that as it comes back).
        let mut s = Sim::new(8);
        s.run(Duration::from_secs(2));
        downs(&mut s);
        let mut of5 = 0;
        for _ in 0..5 {
            s.cut = vec![5];
            s.run(Duration::from_millis(1800));
            s.cut.clear();
            s.run(Duration::from_millis(1800));
            let d = downs(&mut s);
            of5 += d.iter().filter(|(_, of)| *of == 5).count();
            let others: Vec<&(u16, u16)> = d.iter().filter(|(_, of)| *of != 5).collect();
            assert!(others.is_empty(), "taken down beside host 5: {others:?}");
        }
        // Host 5 was down at every other host, each time.
        assert!(of5 >= 5 * 7, "host 5 taken down {of5} times");
        assert!(s.ms[5].held_back() > 0);
        // Back for good: no one else taken down, and every host sees every other alive (a
        // suspicion host 5 raised while cut off, its gossip spent into the void, waits for
        // the next exchange of member lists to be refuted: seconds).
        s.run(Duration::from_secs(12));
        let d = downs(&mut s);
        assert!(d.is_empty(), "{d:?}");
        for a in 0..8 {
            for b in (0..8).filter(|&b| b != a) {
                assert_eq!(s.health(a, b), Some(Health::Alive), "{a} sees {b}");
            }
        }
    }

    #[test]
    fn a_copy_of_each_datagram_from_another_rail_is_handled_once() {
        let run = |copies: bool| {
            let mut s = Sim::new(6);
            s.copies = copies;
            s.run(Duration::from_secs(3));
            for a in 0..6 {
                for b in (0..6).filter(|&b| b != a) {
                    assert_eq!(s.health(a, b), Some(Health::Alive), "{a} sees {b}");
                }
            }
            (s.sent, s.ms.iter().map(Membership::copies).sum::<u64>())
        };
        let (once, none) = run(false);
        let (twice, dropped) = run(true);
        // Alone, a datagram repeats byte for byte only rarely (a repeated announce).
        assert!(none * 50 <= once, "{none} of {once} dropped without copies");
        // Every copy that arrived was dropped, and none was answered: a copy per rail does
        // not multiply the answers (a ping answered twice would be).
        assert!(dropped as f64 >= 0.9 * twice as f64, "{dropped} of {twice}");
        assert!((twice as f64) < 1.1 * once as f64, "sent {twice} with copies, {once} without");
    }

    #[test]
    fn periodic_timers_fall_on_the_probe_rounds_grid() {
        let period = Duration::from_millis(100);
        let mut s = Sim::aligned(6, period);
        s.run(Duration::from_millis(1500));
        let mut periodic = 0;
        for m in &s.ms {
            for ((at, _), t) in &m.rt.timers {
                if matches!(t, Timer::ProbeRandomMember(_) | Timer::PeriodicGossip(_)) {
                    periodic += 1;
                    let off = at.duration_since(s.t0).as_nanos() % period.as_nanos();
                    assert_eq!(off, 0, "{t:?} at {:?}", at.duration_since(s.t0));
                }
            }
        }
        assert!(periodic >= 6, "{periodic} periodic timers");
        for a in 0..6 {
            for b in (0..6).filter(|&b| b != a) {
                assert_eq!(s.health(a, b), Some(Health::Alive), "{a} sees {b}");
            }
        }
    }

    #[test]
    fn a_report_reaches_every_host_and_a_newer_one_replaces_it() {
        let mut s = Sim::new(6);
        s.run(Duration::from_secs(1));
        s.ms[4].publish(b"first".to_vec()).unwrap();
        s.run(Duration::from_millis(600));
        s.ms[4].publish(b"second".to_vec()).unwrap();
        s.run(Duration::from_millis(800));
        for h in 0..6 {
            let r = s.ms[h].reports();
            assert_eq!(r.get(&4).map(|(_, b)| b.as_slice()), Some(&b"second"[..]), "host {h}");
        }
    }

    #[test]
    fn gossip_an_honest_host_could_not_send_is_refused_and_memory_stays_bounded() {
        let check = Arc::new(Mutex::new(Check { bounds: Bounds::hosts(4, 1), ..Check::default() }));
        let reports = Arc::new(Mutex::new(Reports::new()));
        let mut g = Gossip { reports: reports.clone(), shared: check.clone() };
        let env = |host, version, body: Vec<u8>| {
            postcard::to_allocvec(&Envelope { host, version, body }).unwrap()
        };
        let now = crate::seal::unix_us() / 1000;
        // The highest version: would shut out the host's own true reports for good.
        assert!(g.receive_item(&env(1, u64::MAX, vec![1]), None).is_err());
        assert!(
            g.receive_item(&env(1, now + 2 * MAX_INCARNATION_AHEAD_MS, vec![1]), None).is_err()
        );
        // Made-up hosts, any number of them: nothing kept.
        for h in 4..5000u16 {
            assert!(g.receive_item(&env(h, now, vec![0; 900]), None).is_err());
        }
        assert!(g.receive_item(&env(1, now, vec![0; MAX_REPORT + 1]), None).is_err());
        assert!(reports.lock().unwrap().is_empty());
        assert_eq!(check.lock().unwrap().implausible, (5000 - 4) + 3);
        // An honest report is taken, and a newer one of the same host replaces it.
        assert!(g.receive_item(&env(1, now, vec![1]), None).unwrap().is_some());
        assert!(g.receive_item(&env(1, now + 1, vec![2]), None).unwrap().is_some());
        assert_eq!(reports.lock().unwrap().get(&1), Some(&(now + 1, vec![2])));
    }

    #[test]
    fn an_identity_outside_the_plan_or_past_the_clock_is_implausible() {
        let addr = |h: u8| SocketAddr::from(([10, 1, h, 1], 7946));
        let b = Bounds { hosts: (0..3).map(|h| (vec![addr(h)], 1)).collect() };
        let now = crate::seal::unix_us() / 1000;
        let honest =
            Id { host: 1, incarnation: now, boot: now, addrs: vec![addr(1)], qpns: vec![7] };
        assert!(b.plausible(&honest, now));
        assert!(b.plausible(&Id { incarnation: now + 5, ..honest.clone() }, now), "rejoins");
        for bad in [
            Id { incarnation: u64::MAX, ..honest.clone() },
            Id { incarnation: now + 2 * MAX_INCARNATION_AHEAD_MS, ..honest.clone() },
            Id { host: 3, ..honest.clone() },
            Id { addrs: vec![SocketAddr::from(([192, 0, 2, 1], 53))], ..honest.clone() },
            Id { addrs: vec![addr(1); 100], ..honest.clone() },
            Id { qpns: vec![1, 2, 3], ..honest.clone() },
            Id { boot: now + 1, ..honest.clone() },
        ] {
            assert!(!b.plausible(&bad, now), "{bad:?}");
        }
        // A renewed identity starts from the clock, never past it by more than one.
        let renewed = Id { incarnation: 5, ..honest.clone() }.renew().unwrap();
        assert!(renewed.incarnation >= now && b.plausible(&renewed, now + 1));
    }

    #[test]
    fn a_datagram_whose_header_is_not_its_senders_is_refused() {
        let t0 = Instant::now();
        // Host 1's announce, handed to host 0 as if host 0's seal said it came from host 2
        // (a pod of 3: 2 is in the plan) — the sender of record must be the header's.
        let mut m1 = Membership::new(id(1), 3, Timeouts::default(), 1, t0);
        m1.join(&[id(0)], t0).unwrap();
        let (_, data) = m1.poll_transmit().unwrap();
        let mut m0 = Membership::new(id(0), 3, Timeouts::default(), 0, t0);
        assert!(m0.handle_from(2, &data, t0).is_err());
        assert!(m0.poll_transmit().is_none(), "nothing answered");
        assert_eq!(m0.implausible(), 1);
        // (Past the window in which the same bytes are dropped as another rail's copy.)
        let later = t0 + 2 * SEEN_FOR;
        m0.handle_from(1, &data, later).unwrap();
        assert!(m0.poll_transmit().is_some_and(|(to, _)| to.host == 1), "answered");
    }

    #[test]
    fn foca_incarnations_cannot_jump_past_what_refutations_reach() {
        let mut c = Check::default();
        let h1 = id(1);
        // The highest at once (a suspicion the host could never refute): refused.
        assert!(!c.foca_plausible(&h1, u16::MAX));
        assert!(c.foca_plausible(&h1, 3));
        // One refutation at a time, or a few missed: taken; a leap: refused.
        assert!(c.foca_plausible(&h1, 4));
        assert!(c.foca_plausible(&h1, 4 + MAX_FOCA_STEP));
        assert!(!c.foca_plausible(&h1, 4 + 3 * MAX_FOCA_STEP));
        // A renewed identity (a new incarnation of ours) starts again from a small figure.
        let renewed = Id { incarnation: h1.incarnation + 1, ..h1.clone() };
        assert!(c.foca_plausible(&renewed, 0));
        assert!(!c.foca_plausible(&renewed, MAX_FOCA_STEP + 1));
    }
}
