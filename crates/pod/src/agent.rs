//! The pod monitor's I/O driver: one thread for membership, the probe schedule, the reports
//! and localization (UDP control sockets bound to each rail's address: the control port and
//! send-only ones that spread each datagram's copies over ECMP paths), and
//! one thread per rail for its RDMA device (a UD QP that answers the peers' probes and takes
//! the answers to this host's). The cores it drives are sans-IO: [`crate::member`],
//! [`crate::probe`], [`crate::locate`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use providers::{ContextOptions, Progress};
use serde::Serialize;
use topology::{Component, Dev, Pod};
use verbs::{
    Access, CompletionChannel, CompletionQueue, Context, MemoryRegion, ModifyQp, QKey, QpCaps,
    QpInit, QpState, QpType, QueuePair, RecvWr, SendOp, SendWr, UdDest, WcOpcode, WcStatus,
};

mod chan;

pub use chan::{MAX_ACCEPTED_PER_PEER, MAX_MESSAGE, RouteEvent, WINDOW};

use crate::channel::{ChannelCounters, Delivered, Undeliverable};
use crate::flap::{self, Outages};
use crate::locate::{self, Finding};
use crate::member::{Health, Id, Membership, Timeouts};
use crate::probe::{
    self, Answered, JudgedPath, LoopHealth, Lost, Outgoing, Packet, PathState, ProbeConfig, Prober,
    Report,
};
use crate::route::PathView;
use crate::seal::{self, Key, PodKey, Purpose, RefusedCounts, Sealer};

/// The probe QPs' Q_Key.
pub const QKEY: u32 = 0x5044_0001;
/// The default UDP port of the membership channel (memberlist's and serf's).
pub const CONTROL_PORT: u16 = 7946;
/// Source ports of the membership channel on each rail: the control port, which receives,
/// and send-only ones; each datagram leaves from [`CONTROL_COPIES_PER_RAIL`] of them in turn.
const CONTROL_SOURCE_PORTS: usize = 8;
/// Copies of each membership datagram on each rail, from different source ports (so on
/// different ECMP paths where the fabric hashes on ports).
const CONTROL_COPIES_PER_RAIL: usize = 2;
/// A peer declared down this long has its unacknowledged channel messages reported
/// undeliverable (one that comes back as the same life sooner loses nothing).
pub const DOWN_GRACE: Duration = Duration::from_secs(2);
/// An unchanged report is broadcast again this often (a host that comes up has everyone's
/// again at once: each host republishes when it sees one come up).
pub const REPUBLISH: Duration = Duration::from_secs(30);
/// Announces to hosts not heard of, at most this many a second.
pub const JOINS_PER_SECOND: usize = 64;
/// A host that never answered is announced to at least this often.
pub const JOIN_BACKOFF_MAX: Duration = Duration::from_secs(32);
/// A host of the plan never heard from this long after the agent started is a finding
/// (`host-down`, "never heard from"): not started, another port or secret, or no path to it.
pub const NEVER_HEARD_AFTER: Duration = Duration::from_secs(3);
/// Bytes of a UD receive's GRH area.
const GRH: usize = 40;
/// Receives posted per rail.
const RECVS: usize = 256;
/// Send buffers per rail.
const SENDS: usize = 128;
/// A probe QP's sends are signaled one in this many.
const SIGNAL_EVERY: usize = 16;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The pod.
    pub pod: Pod,
    /// This host's index in it.
    pub me: usize,
    /// The membership channel's UDP port (on every rail's address).
    pub control_port: u16,
    /// The failure detector's timing.
    pub timeouts: Timeouts,
    /// The prober's.
    pub probe: ProbeConfig,
    /// How often this host's report is broadcast and the pod's faults located (half as
    /// often while the pod is calm: nothing lost anywhere and no channel traffic here; at
    /// once when a member's health changes).
    pub report_every: Duration,
    /// How long a finding must stand before it is shown (a host that left: at once; a
    /// single pair's path, or paths that lose some probes rather than all: five times this)
    /// — a fault whose evidence is still arriving names the pairs or the device it has
    /// reached before the component they share.
    pub settle: Duration,
    /// How long a finding shown stays once a location no longer names it: the pod is located
    /// again at each report that changes, and one location that misses a finding (a report
    /// that renews its evidence still on its way) is not its clearing.
    pub clear_after: Duration,
    /// The spines each pair's probes cross from each probe port, where the plan's route
    /// command said (`pod.route`): findings then name a ToR's link to a spine, or a spine.
    pub routes: topology::route::Routes,
    /// The pod's key, from the run's shared secret: every membership, gossip, probe and
    /// handshake datagram is authenticated with it (none: they are not — anyone who can
    /// reach the control port can speak for a host of the plan).
    pub key: Option<PodKey>,
}

impl AgentConfig {
    /// Host `me` of `pod` with the defaults: 100 ms probe period, reports every 200 ms.
    pub fn new(pod: Pod, me: usize) -> AgentConfig {
        AgentConfig {
            pod,
            me,
            control_port: CONTROL_PORT,
            timeouts: Timeouts::default(),
            probe: ProbeConfig::default(),
            report_every: Duration::from_millis(200),
            settle: Duration::from_millis(400),
            clear_after: Duration::from_secs(1),
            routes: topology::route::Routes::new(),
            key: None,
        }
    }
}

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pod plan does not fit.
    #[error("{0}")]
    Plan(String),
    /// A device could not be opened or set up.
    #[error("rail {rail} ({device}): {source}")]
    Device {
        /// The rail.
        rail: usize,
        /// Its device.
        device: String,
        /// Why.
        source: verbs::Error,
    },
    /// A control socket could not be bound.
    #[error("cannot bind the membership channel to {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// What the agent's probes meet, as it happens (the agent's Prometheus series).
pub trait Observer: Send + Sync {
    /// A probe answered.
    fn answered(&self, pod: &Pod, a: &Answered);
    /// A probe lost.
    fn lost(&self, pod: &Pod, l: &Lost);
    /// A probe sent.
    fn sent(&self, pod: &Pod, o: &Outgoing);
}

/// An observer that keeps nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn answered(&self, _: &Pod, _: &Answered) {}
    fn lost(&self, _: &Pod, _: &Lost) {}
    fn sent(&self, _: &Pod, _: &Outgoing) {}
}

/// A member as `podnet pod status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemberStatus {
    /// Its index in the plan.
    pub index: usize,
    /// Its name.
    pub host: String,
    /// Its health (this host itself: alive).
    pub health: Health,
    /// Seconds in that health.
    pub for_seconds: f64,
    /// Its incarnation.
    pub incarnation: u64,
}

/// The pod's paths, from every host's latest report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PathSummary {
    /// Hosts whose report arrived.
    pub reporting: usize,
    /// Paths reported.
    pub paths: usize,
    /// … ok.
    pub ok: usize,
    /// … lossy.
    pub lossy: usize,
    /// … dead.
    pub dead: usize,
    /// … losing near-MTU frames.
    pub large_lost: usize,
    /// Median of this host's paths' median round trips, µs.
    pub rtt_p50_us: u32,
}

/// One of this host's paths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MyPath {
    /// The path: `h0.r0 -> h3.r0`.
    pub path: String,
    /// Its state.
    pub state: PathState,
    /// Small probes sent and lost, in all.
    pub sent: u64,
    /// …
    pub lost: u64,
    /// Near-MTU probes sent and lost.
    pub large_sent: u64,
    /// …
    pub large_lost: u64,
    /// Median network round trip in the window, µs.
    pub rtt_p50_us: u32,
}

/// Something that changed, as this host saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    /// Seconds since the agent started.
    pub at_seconds: f64,
    /// Wall clock, ms since the Unix epoch.
    pub unix_ms: u64,
    /// `member` or `finding` (`finding-cleared` when one goes away).
    pub kind: String,
    /// What.
    pub text: String,
}

/// What the probing costs this host.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Cost {
    /// Small probes per round, near-MTU probes per round.
    pub per_round: (usize, usize),
    /// Probe and reply bytes sent (RoCE payload plus the 58 bytes of Ethernet, IP, UDP,
    /// BTH, DETH and ICRC), small and near-MTU.
    pub probe_bytes: (u64, u64),
    /// Membership datagrams' bytes sent (UDP payload plus 42 of headers), per copy per rail.
    pub control_bytes: u64,
    /// Seconds this host's agent has run.
    pub seconds: f64,
}

/// The agent's state, as `podnet pod status` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Status {
    /// This host.
    pub host: String,
    /// Its index.
    pub index: usize,
    /// The members, this host included.
    pub members: Vec<MemberStatus>,
    /// The pod's paths.
    pub paths: PathSummary,
    /// This host's paths.
    pub my_paths: Vec<MyPath>,
    /// What the pod's probes and membership point at.
    pub findings: Vec<Finding>,
    /// The last changes (at most 200).
    pub events: Vec<EventRecord>,
    /// How this host's monitoring loop ran (its CPU).
    pub host_loop: LoopHealth,
    /// Membership timers fired late since the start.
    pub late_timers: u64,
    /// What probing costs.
    pub cost: Cost,
    /// The route to each peer now (`null`: none reaches it).
    pub routes: BTreeMap<String, Option<crate::route::Route>>,
    /// The last route changes (at most 50).
    pub route_events: Vec<RouteEvent>,
    /// The pod channels.
    pub channels: ChannelStatus,
    /// Whether the pod's datagrams are authenticated (a shared secret); `false` is said
    /// loudly: anyone who reaches the control port can speak for a host.
    pub authenticated: bool,
    /// Datagrams refused (membership and gossip, probes, channel handshakes), by why.
    pub refused: RefusedCounts,
}

/// The pod channels of a host.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChannelStatus {
    /// Messages delivered, duplicates dropped, messages sent again, stale frames, messages
    /// reported undeliverable.
    pub counters: ChannelCounters,
    /// Frames relayed for other hosts.
    pub relayed: u64,
    /// Hops this host sends on that are connected.
    pub hops_up: usize,
    /// Connections other hosts opened to this one (at most
    /// [`MAX_ACCEPTED_PER_PEER`] per peer).
    pub accepted: usize,
}

struct RailIo {
    /// The device (kept open while the rail runs).
    _ctx: Context,
    pd: verbs::ProtectionDomain,
    cq: CompletionQueue,
    channel: CompletionChannel,
    qp: QueuePair,
    recv: MemoryRegion,
    send: MemoryRegion,
    slot: usize,
    free: Mutex<SendSlots>,
    addr: IpAddr,
    /// The port's active MTU: the largest probe and channel packet its links carry.
    mtu: verbs::Mtu,
}

struct Inner {
    cfg: AgentConfig,
    epoch: Instant,
    stop: AtomicBool,
    prober: Mutex<Prober>,
    status: Mutex<Status>,
    rails: Vec<RailIo>,
    observer: Arc<dyn Observer>,
    probe_bytes: [AtomicU64; 2],
    /// The probes' key (none: probes carry no tag).
    probe_key: Option<Key>,
    /// Probes and replies refused (a wrong tag, a prober not at its plan address).
    probes_refused: Mutex<RefusedCounts>,
    chan: Mutex<chan::ChanIo>,
    delivered: Condvar,
    wake: UnixDatagram,
    /// Each device's address, from the plan (per host, per rail): read once, not parsed
    /// from its device name at every probe.
    rail_ips: Vec<Vec<Option<IpAddr>>>,
}

impl Inner {
    /// Wakes the control loop (a message queued, a frame arrived, a send finished).
    fn wake(&self) {
        let _ = self.wake.send(&[1]);
    }

    /// Device `d`'s address in the plan ([`probe::rail_addr`]).
    fn rail_ip(&self, d: Dev) -> Option<IpAddr> {
        self.rail_ips.get(d.host)?.get(d.rail).copied().flatten()
    }
}

/// A running pod monitor.
pub struct PodAgent {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for PodAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodAgent").field("me", &self.inner.cfg.me).finish()
    }
}

fn open_rail(pod: &Pod, me: usize, r: usize, probe: &ProbeConfig) -> Result<RailIo, Error> {
    let device = pod.hosts[me].rails[r].device.clone();
    let err = |source| Error::Device { rail: r, device: device.clone(), source };
    let opts = ContextOptions { progress: Progress::Event, ..Default::default() };
    let ctx = providers::open(&device, &opts).map_err(err)?;
    let port_mtu = ctx.query_port().active_mtu;
    let channel = ctx.create_comp_channel().map_err(err)?;
    // The probe QP's and every channel QP's completions.
    let cq = ctx.create_cq(16384, Some(&channel)).map_err(err)?;
    let pd = ctx.alloc_pd().map_err(err)?;
    let caps = QpCaps { max_send_wr: SENDS as u32, max_recv_wr: RECVS as u32, max_inline_data: 0 };
    let qp = pd.create_qp(&QpInit { caps, ..QpInit::new(QpType::Ud, &cq) }).map_err(err)?;
    qp.modify(&ModifyQp {
        state: Some(QpState::Init),
        qkey: Some(QKey(QKEY)),
        ..Default::default()
    })
    .map_err(err)?;
    // A UD message is one packet: the largest probe is a 4096-byte MTU's.
    let mtu = verbs::Mtu::Mtu4096;
    let c = verbs::Connect::new(
        verbs::Path::new(ctx.ip(), verbs::Qpn::new(0)),
        verbs::Psn::new(0),
        verbs::Psn::new(0),
    );
    qp.connect(&verbs::Connect { path_mtu: mtu, ..c }).map_err(err)?;
    let slot = GRH + 4096usize.max(probe.large);
    let recv = pd.reg_mr(slot * RECVS, Access::LOCAL_WRITE).map_err(err)?;
    let send = pd.reg_mr(slot * SENDS, Access::LOCAL_WRITE).map_err(err)?;
    for i in 0..RECVS {
        qp.post_recv(RecvWr::new(i as u64).sge(
            recv.addr() + (i * slot) as u64,
            slot as u32,
            recv.lkey(),
        ))
        .map_err(err)?;
    }
    cq.req_notify().map_err(err)?;
    let addr = ctx.ip();
    Ok(RailIo {
        _ctx: ctx,
        pd,
        cq,
        channel,
        qp,
        recv,
        send,
        slot,
        free: Mutex::new(SendSlots { free: (0..SENDS).collect(), ..SendSlots::default() }),
        addr,
        mtu: port_mtu,
    })
}

/// The last point before `now` of the wall clock's grid of `period` (Unix time a multiple
/// of it). Every host's probe rounds, membership timers and reports fall on this grid (the
/// prober's epoch): with clocks in step, the pod's probes of a round arrive together, and a
/// rail's thread wakes once for a round's probes rather than once per prober.
fn wall_grid(now: Instant, period: Duration) -> Instant {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let into = unix % period.as_nanos().max(1);
    now.checked_sub(Duration::from_nanos(into as u64)).unwrap_or(now)
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl PodAgent {
    /// Opens this host's rails, binds the membership channel on each, joins the pod and
    /// starts probing.
    /// Near-MTU probes larger than a rail's active MTU would be lost on every path: they are
    /// sent at the smallest rail's (see [`PodAgent::probe_large`]).
    pub fn start(mut cfg: AgentConfig, observer: Arc<dyn Observer>) -> Result<PodAgent, Error> {
        let pod = &cfg.pod;
        let me = cfg.me;
        if me >= pod.hosts.len() {
            return Err(Error::Plan(format!(
                "host {me} is not in the pod ({} hosts)",
                pod.hosts.len()
            )));
        }
        // Probes and handshakes go to a soft device's RoCE port, 4791: a rail on another port
        // would never be reached (a host down for good, falsely).
        for h in &pod.hosts {
            for r in &h.rails {
                if let Ok(verbs::DeviceName::Soft { port, .. }) = r.device_name()
                    && port != verbs::ROCE_PORT
                {
                    return Err(Error::Plan(format!(
                        "host {:?}, rail {:?}: the pod monitor reaches soft devices on the RoCE \
                         port {}; give soft:<IP> without a port",
                        h.name,
                        r.device,
                        verbs::ROCE_PORT
                    )));
                }
            }
        }
        let rails: Vec<RailIo> = (0..pod.hosts[me].rails.len())
            .map(|r| open_rail(pod, me, r, &cfg.probe))
            .collect::<Result<_, _>>()?;
        if let Some(fits) = rails.iter().map(|r| r.mtu.bytes() as usize).min() {
            cfg.probe.large = cfg.probe.large.min(fits);
        }
        let mut sockets = Vec::new();
        for rail in &rails {
            let mut on_rail = Vec::with_capacity(CONTROL_SOURCE_PORTS);
            for i in 0..CONTROL_SOURCE_PORTS {
                // The first is the rail's control port (every datagram arrives there); the
                // others only send, from ports the kernel picks.
                let port = if i == 0 { cfg.control_port } else { 0 };
                let addr = SocketAddr::new(rail.addr, port);
                let s = UdpSocket::bind(addr).map_err(|source| Error::Bind { addr, source })?;
                s.set_nonblocking(true).map_err(|source| Error::Bind { addr, source })?;
                on_rail.push(s);
            }
            sockets.push(on_rail);
        }
        let (wake, woken) = UnixDatagram::pair()
            .map_err(|e| Error::Plan(format!("cannot make the wake-up socket: {e}")))?;
        let _ = wake.set_nonblocking(true);
        let _ = woken.set_nonblocking(true);
        let incarnation = unix_ms();
        let chan = chan::ChanIo::new(pod, me, incarnation, cfg.probe.port(0), cfg.key.as_ref());
        let probe_key = cfg.key.as_ref().map(|k| k.key(Purpose::Probe));
        let now = Instant::now();
        // Probe stamps and the prober's rounds count from one origin: the grid's last point.
        let epoch = wall_grid(now, cfg.probe.period);
        let rail_ips = (0..pod.hosts.len())
            .map(|h| {
                let rails = pod.hosts[h].rails.len();
                (0..rails).map(|r| probe::rail_addr(pod, Dev { host: h, rail: r })).collect()
            })
            .collect();
        let inner = Arc::new(Inner {
            chan: Mutex::new(chan),
            delivered: Condvar::new(),
            wake,
            prober: Mutex::new({
                let mut p = Prober::new(pod, me, cfg.probe, epoch);
                p.set_routes(&cfg.routes);
                p
            }),
            status: Mutex::new(Status {
                host: pod.hosts[me].name.clone(),
                index: me,
                ..Status::default()
            }),
            cfg,
            epoch,
            stop: AtomicBool::new(false),
            rails,
            observer,
            probe_bytes: [AtomicU64::new(0), AtomicU64::new(0)],
            probe_key,
            probes_refused: Mutex::new(RefusedCounts::default()),
            rail_ips,
        });
        let mut threads = Vec::new();
        for r in 0..inner.rails.len() {
            let i = inner.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("pod-rail{r}"))
                    .spawn(move || rail_loop(&i, r))
                    .map_err(|e| Error::Plan(format!("cannot start a thread: {e}")))?,
            );
        }
        let i = inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("pod-channels".into())
                .spawn(move || chan_loop(&i, woken))
                .map_err(|e| Error::Plan(format!("cannot start a thread: {e}")))?,
        );
        let i = inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("pod-control".into())
                .spawn(move || control_loop(&i, sockets, incarnation))
                .map_err(|e| Error::Plan(format!("cannot start a thread: {e}")))?,
        );
        Ok(PodAgent { inner, threads })
    }

    /// This host's probe UD QPs, by rail (where its peers' probes go).
    pub fn probe_qpns(&self) -> Vec<u32> {
        self.inner.rails.iter().map(|r| r.qp.qpn().get()).collect()
    }

    /// Bytes of the near-MTU probes sent: what was asked, or the smallest rail's active MTU
    /// where that is less (0: none).
    pub fn probe_large(&self) -> usize {
        self.inner.cfg.probe.large
    }

    /// The agent's state now.
    pub fn status(&self) -> Status {
        lock(&self.inner.status).clone()
    }

    /// The pod.
    pub fn pod(&self) -> &Pod {
        &self.inner.cfg.pod
    }

    /// Queues `payload` (at most [`MAX_MESSAGE`] bytes) to host `peer` on its pod channel;
    /// its sequence number. Delivered once, in order, unless reported undeliverable
    /// ([`PodAgent::take_undeliverable`]).
    pub fn send(&self, peer: usize, payload: Vec<u8>) -> Result<u64, Error> {
        if payload.len() > MAX_MESSAGE {
            return Err(Error::Plan(format!(
                "a message of {} bytes: at most {MAX_MESSAGE}",
                payload.len()
            )));
        }
        if peer == self.inner.cfg.me || peer >= self.inner.cfg.pod.hosts.len() {
            return Err(Error::Plan(format!("no peer {peer}")));
        }
        let seq = lock(&self.inner.chan).channels.send(peer as u16, payload);
        self.inner.wake();
        Ok(seq)
    }

    /// Messages to `peer` not acknowledged yet.
    pub fn pending(&self, peer: usize) -> usize {
        lock(&self.inner.chan).channels.pending(peer as u16)
    }

    /// The next message delivered to this host, waiting up to `timeout`.
    pub fn recv(&self, timeout: Duration) -> Option<Delivered> {
        let deadline = Instant::now() + timeout;
        let mut c = lock(&self.inner.chan);
        loop {
            if let Some(d) = c.delivered.pop_front() {
                return Some(d);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            c = self
                .inner
                .delivered
                .wait_timeout(c, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Gives up on `peer` (declared down): every message to it not acknowledged is reported
    /// undeliverable now.
    pub fn give_up(&self, peer: usize) {
        lock(&self.inner.chan).peer_down(peer as u16);
    }

    /// Takes the messages reported undeliverable since the last call.
    pub fn take_undeliverable(&self) -> Vec<Undeliverable> {
        std::mem::take(&mut lock(&self.inner.chan).undeliverable)
    }

    /// The route changes so far.
    pub fn route_events(&self) -> Vec<RouteEvent> {
        lock(&self.inner.chan).routes.clone()
    }

    /// The channels' counters, and frames relayed for others.
    pub fn channel_counters(&self) -> (ChannelCounters, u64) {
        let c = lock(&self.inner.chan);
        (c.channels.counters(), c.relayed)
    }

    /// Whether every member is alive (and none missing).
    pub fn all_alive(&self) -> bool {
        let s = self.status();
        !s.members.is_empty() && s.members.iter().all(|m| m.health == Health::Alive)
    }

    /// The agent's threads that ended though it was not stopped (a panic: its message went
    /// to stderr), by name; empty while it runs. The monitor has stopped watching then — its
    /// status no longer moves — and the program should say so and exit.
    pub fn ended_threads(&self) -> Vec<String> {
        if self.inner.stop.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.threads
            .iter()
            .filter(|t| t.is_finished())
            .map(|t| t.thread().name().unwrap_or("a pod thread").to_string())
            .collect()
    }

    /// Stops the threads (the pod sees this host go).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        self.inner.wake();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for PodAgent {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A rail's device: answers probes, takes answers, frees send buffers.
/// Raises this thread's priority (`nice`), where allowed: the pod monitor's threads must
/// stay responsive on a busy host, or it takes its own starvation for its peers' silence.
fn nice(n: i32) {
    // SAFETY: gettid and setpriority take no pointers; a refusal (no privilege) is ignored.
    unsafe {
        let tid = nix::libc::gettid();
        let _ = nix::libc::setpriority(nix::libc::PRIO_PROCESS, tid as nix::libc::id_t, n);
    }
}

/// The longest a rail's thread sleeps with nothing arriving: how soon it sees the stop
/// flag. Every probe, reply and completion wakes it sooner.
const RAIL_IDLE: Duration = Duration::from_millis(250);

fn rail_loop(inner: &Inner, r: usize) {
    nice(-10);
    let rail = &inner.rails[r];
    let mut wcs = [verbs::empty_wc(); 32];
    let mut buf = vec![0u8; probe::HEADER];
    while !inner.stop.load(Ordering::Relaxed) {
        let mut n = rail.cq.poll(&mut wcs);
        if n == 0 {
            // Arm, then look once more: a completion between the poll and the arming would
            // otherwise wait for the next.
            let _ = rail.cq.req_notify();
            n = rail.cq.poll(&mut wcs);
            if n == 0 {
                let _ = rail.channel.get_cq_event(Some(RAIL_IDLE));
                continue;
            }
        }
        for wc in &wcs[..n] {
            if wc.wr_id & chan::TAG != 0 {
                let mut c = lock(&inner.chan);
                c.on_completion(rail, wc, Instant::now());
                if !c.delivered.is_empty() {
                    inner.delivered.notify_all();
                }
                drop(c);
                inner.wake();
                continue;
            }
            match wc.opcode {
                WcOpcode::Recv => {
                    let slot = wc.wr_id as usize;
                    let at = slot * rail.slot;
                    let len = (wc.byte_len as usize).saturating_sub(GRH).min(rail.slot - GRH);
                    let mut grh = [0u8; GRH];
                    let got = wc.status == WcStatus::Success
                        && rail.recv.read(at, &mut grh).is_ok()
                        && rail.recv.read(at + GRH, &mut buf).is_ok();
                    let src = grh_source(&grh);
                    let hello = got && seal::is_sealed(&buf) && len <= 4096;
                    let mut msg = Vec::new();
                    if hello {
                        msg.resize(len, 0);
                        let _ = rail.recv.read(at + GRH, &mut msg);
                    }
                    let _ = rail.qp.post_recv(RecvWr::new(wc.wr_id).sge(
                        rail.recv.addr() + at as u64,
                        rail.slot as u32,
                        rail.recv.lkey(),
                    ));
                    if hello {
                        let ud = |rr: usize, b: &[u8], to: IpAddr, q: u32, port: u16| {
                            send_bytes(inner, rr, b, b.len(), to, q, port)
                        };
                        lock(&inner.chan).on_hello(&inner.cfg.pod, &inner.rails, &ud, r, src, &msg);
                        inner.wake();
                        continue;
                    }
                    if got {
                        on_probe(inner, r, &buf, src);
                    }
                }
                _ => {
                    // A send finished (or failed): its buffer is free, and those of the
                    // unsignaled sends posted before it.
                    let slot = (wc.wr_id >> 32) as usize;
                    lock(&rail.free).completed(slot);
                }
            }
        }
    }
}

/// The source address a UD receive's GRH area holds (IPv4 in its last 20 bytes).
fn grh_source(grh: &[u8; GRH]) -> Option<IpAddr> {
    match (grh[0] >> 4, grh[20] >> 4) {
        (6, _) => Some(IpAddr::from(<[u8; 16]>::try_from(&grh[8..24]).ok()?)),
        (_, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(&grh[32..36]).ok()?)),
        _ => None,
    }
}

/// A probe or a reply arrived on rail `r` from `src`. A probe is answered only when it comes
/// from the plan's address of the rail it names, at that address (never reflected to a third
/// party), and — in a pod with a secret — carries the pod's tag; a reply counts only with the
/// tag and the prober's own cookie.
fn on_probe(inner: &Inner, r: usize, buf: &[u8], src: Option<IpAddr>) {
    let Some(p) = Packet::read(buf) else { return };
    let refuse = |why: seal::Refused| lock(&inner.probes_refused).count(why);
    if let Some(k) = &inner.probe_key
        && !k.verify(&[&buf[..probe::SIGNED]], &buf[probe::SIGNED..probe::HEADER])
    {
        refuse(seal::Refused::BadTag);
        return;
    }
    if p.reply {
        let now = Instant::now();
        let a = lock(&inner.prober).on_reply(&p, now);
        if let Some(a) = a {
            inner.observer.answered(&inner.cfg.pod, &a);
        }
        return;
    }
    let prober = Dev { host: usize::from(p.host), rail: usize::from(p.src_rail) };
    let plan = (p.host as usize) < inner.cfg.pod.hosts.len()
        && usize::from(p.src_rail) < inner.cfg.pod.hosts[usize::from(p.host)].rails.len();
    if !plan
        || usize::from(p.dst_rail) != r
        || src != Some(p.addr)
        || inner.rail_ip(prober) != Some(p.addr)
    {
        refuse(seal::Refused::UnknownSender);
        return;
    }
    let t2 = stamp(inner, Instant::now());
    let reply = p.answer(t2, stamp(inner, Instant::now()));
    if send(inner, r, &reply, probe::HEADER, p.addr, p.qpn, p.port) {
        inner.probe_bytes[0].fetch_add(probe::HEADER as u64 + 58, Ordering::Relaxed);
    }
}

/// A rail's send buffers: free, and in flight in the order they were posted.
#[derive(Debug, Default)]
struct SendSlots {
    free: Vec<usize>,
    inflight: VecDeque<usize>,
    /// Sends posted since the last signaled one.
    unsignaled: usize,
}

impl SendSlots {
    /// The send in `slot` completed: it and every send posted before it are done (a QP
    /// completes its sends in order).
    fn completed(&mut self, slot: usize) {
        if !self.inflight.contains(&slot) {
            return;
        }
        while let Some(s) = self.inflight.pop_front() {
            self.free.push(s);
            if s == slot {
                break;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn stamp(inner: &Inner, now: Instant) -> u64 {
    now.saturating_duration_since(inner.epoch).as_nanos() as u64
}

/// Sends `p` (`len` bytes) from rail `r` to `qpn` at `to`, from UDP source port `port`.
fn send(inner: &Inner, r: usize, p: &Packet, len: usize, to: IpAddr, qpn: u32, port: u16) -> bool {
    let mut head = [0u8; probe::HEADER];
    if p.write(&mut head).is_none() {
        return false;
    }
    if let Some(k) = &inner.probe_key {
        let tag = k.tag(&[&head[..probe::SIGNED]]);
        head[probe::SIGNED..].copy_from_slice(&tag);
    }
    send_bytes(inner, r, &head, len, to, qpn, port)
}

/// Sends `len` bytes from rail `r`'s probe QP to `qpn` at `to` from UDP source port `port`,
/// the first of them `bytes` (a near-MTU probe is its header and whatever follows).
fn send_bytes(
    inner: &Inner,
    r: usize,
    bytes: &[u8],
    len: usize,
    to: IpAddr,
    qpn: u32,
    port: u16,
) -> bool {
    let Some(rail) = inner.rails.get(r) else { return false };
    if bytes.len() > rail.slot || len > rail.slot {
        return false;
    }
    // Held while posting: the slots in flight are in the order the QP completes them.
    let mut slots = lock(&rail.free);
    let Some(slot) = slots.free.pop() else {
        return false;
    };
    let at = slot * rail.slot;
    let ok = rail.send.write(at, bytes).is_ok();
    let dest = UdDest::new(to, verbs::Qpn::new(qpn), QKey(QKEY));
    let mut wr = SendWr::new((slot as u64) << 32, SendOp::Send).sge(
        rail.send.addr() + at as u64,
        len as u32,
        rail.send.lkey(),
    );
    wr.ud = Some(dest.from_udp_source_port(port).unwrap_or(dest));
    // One completion per SIGNAL_EVERY sends (or when buffers run short) frees them all: a
    // completion per probe would wake the rail's thread for nothing.
    wr.signaled = slots.unsignaled + 1 >= SIGNAL_EVERY || slots.free.len() < SIGNAL_EVERY;
    if ok && rail.qp.post_send(wr.clone()).is_ok() {
        slots.inflight.push_back(slot);
        slots.unsignaled = if wr.signaled { 0 } else { slots.unsignaled + 1 };
        return true;
    }
    slots.free.push(slot);
    false
}

/// The pod channels: connection handshakes, and frames onto their hops' QPs whenever a
/// message is queued, a frame arrives, a send finishes or a route changes (a thread of its
/// own: moving data must not delay the failure detector's timers).
fn chan_loop(inner: &Inner, woken: UnixDatagram) {
    let pod = &inner.cfg.pod;
    let mut wbuf = [0u8; 64];
    let ud = |r: usize, b: &[u8], to: IpAddr, q: u32, port: u16| {
        send_bytes(inner, r, b, b.len(), to, q, port)
    };
    let mut due = None;
    while !inner.stop.load(Ordering::Relaxed) {
        {
            // Until woken, or the next retransmission or connection attempt is due (and at
            // least once a second: the stop flag).
            let wait = due.map_or(Duration::from_secs(1), |d: Instant| {
                d.saturating_duration_since(Instant::now()).min(Duration::from_secs(1))
            });
            let ms = u16::try_from(wait.as_millis() + 1).unwrap_or(1000);
            let mut fds = [PollFd::new(woken.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::poll(&mut fds, PollTimeout::from(ms));
        }
        while woken.recv(&mut wbuf).is_ok() {}
        let mut c = lock(&inner.chan);
        c.pump(pod, &inner.rails, &ud, Instant::now());
        due = c.next_deadline();
    }
}

/// Membership, the probe schedule, reports and localization.
fn control_loop(inner: &Inner, sockets: Vec<Vec<UdpSocket>>, incarnation: u64) {
    let mut c = Control::new(inner, sockets, incarnation);
    nice(-10);
    while !inner.stop.load(Ordering::Relaxed) {
        c.step();
    }
}

/// What localization read last: it runs again only when the members' health or the reports
/// change.
struct Located {
    health: BTreeMap<u16, Health>,
    key: Vec<(u16, u64)>,
    /// The hosts whose membership flapped (see [`flap`]).
    flapping: Vec<usize>,
    reports: BTreeMap<u16, Report>,
    found: Vec<Finding>,
}

/// The control loop's state between wake-ups.
struct Control<'a> {
    inner: &'a Inner,
    sockets: Vec<Vec<UdpSocket>>,
    m: Membership,
    /// Every other host as the plan names it: joined until each has been heard of.
    seeds: Vec<Id>,
    addrs: Vec<IpAddr>,
    qpns: Vec<u32>,
    start: Instant,
    rx: Vec<u8>,
    next_report: Instant,
    next_join: Instant,
    control_bytes: u64,
    spray: usize,
    unreachable: BTreeSet<usize>,
    findings: Vec<Finding>,
    first_seen: BTreeMap<(String, String), Instant>,
    /// When each finding shown was last located.
    last_located: BTreeMap<(String, String), Instant>,
    down_since: BTreeMap<u16, Instant>,
    /// Each member's outages over the horizon: a one-rail host whose membership flaps is
    /// its rail.
    outages: Outages,
    last_published: Vec<u8>,
    published_loop: LoopHealth,
    published_at: Instant,
    republish: bool,
    decoded: BTreeMap<u16, (u64, Report)>,
    members_seen: u64,
    calm: bool,
    located: Option<Located>,
    /// Moves each time localization runs again; what [`Control::settle`] last settled, and
    /// whether findings were still waiting out their settling time then.
    located_gen: u64,
    settled: (u64, bool),
    path_names: BTreeMap<(usize, Dev), String>,
    events: VecDeque<EventRecord>,
    lag_window: VecDeque<(Instant, Duration)>,
    /// Membership datagrams sealed and opened.
    seal: Sealer,
    /// Each host's control addresses, from the plan: the only addresses datagrams go to
    /// and the only ones a host's datagrams are taken from.
    ctl_addrs: Vec<Vec<SocketAddr>>,
    /// Membership datagrams refused.
    refused: RefusedCounts,
    /// Hosts never heard of: when each is announced to next, and how long it waits then.
    join_backoff: BTreeMap<u16, (Instant, Duration)>,
}

impl<'a> Control<'a> {
    fn new(inner: &'a Inner, sockets: Vec<Vec<UdpSocket>>, incarnation: u64) -> Control<'a> {
        let cfg = &inner.cfg;
        let pod = &cfg.pod;
        let me = cfg.me;
        let n = pod.hosts.len();
        let addrs: Vec<IpAddr> = inner.rails.iter().map(|r| r.addr).collect();
        let qpns: Vec<u32> = inner.rails.iter().map(|r| r.qp.qpn().get()).collect();
        let ctl_addrs = |h: usize| -> Vec<SocketAddr> {
            (0..pod.hosts[h].rails.len())
                .filter_map(|r| probe::rail_addr(pod, Dev { host: h, rail: r }))
                .map(|a| SocketAddr::new(a, cfg.control_port))
                .collect()
        };
        let my_id = Id {
            host: me as u16,
            incarnation,
            boot: incarnation,
            addrs: ctl_addrs(me),
            qpns: qpns.clone(),
        };
        let start = Instant::now();
        let mut m = Membership::new(my_id, n, cfg.timeouts, unix_ms() ^ me as u64, start);
        let plan_addrs: Vec<Vec<SocketAddr>> = (0..n).map(ctl_addrs).collect();
        m.set_bounds(crate::member::Bounds {
            hosts: (0..n).map(|h| (plan_addrs[h].clone(), pod.hosts[h].rails.len())).collect(),
        });
        let seeds: Vec<Id> = (0..n)
            .filter(|&h| h != me)
            .map(|h| Id {
                host: h as u16,
                incarnation: 0,
                boot: 0,
                addrs: ctl_addrs(h),
                qpns: vec![],
            })
            .collect();
        // foca's periodic timers and the reports on the probe rounds' grid: a round is one
        // wake-up.
        let epoch = lock(&inner.prober).epoch();
        m.align(epoch, cfg.probe.period);
        // The first announces go out on the first wake-up, paced (see `join_missing`).
        let unreachable: BTreeSet<usize> = (0..n).filter(|&h| h != me).collect();
        lock(&inner.prober).set_down(&unreachable.iter().copied().collect::<Vec<_>>());
        Control {
            inner,
            sockets,
            m,
            seeds,
            addrs,
            qpns,
            start,
            rx: vec![0u8; 65536],
            next_report: epoch,
            next_join: start,
            control_bytes: 0,
            spray: 0,
            unreachable,
            findings: Vec::new(),
            first_seen: BTreeMap::new(),
            last_located: BTreeMap::new(),
            down_since: BTreeMap::new(),
            outages: Outages::default(),
            last_published: Vec::new(),
            published_loop: LoopHealth::default(),
            published_at: start,
            republish: false,
            decoded: BTreeMap::new(),
            members_seen: u64::MAX,
            calm: false,
            located: None,
            located_gen: 0,
            settled: (u64::MAX, true),
            path_names: BTreeMap::new(),
            events: VecDeque::new(),
            lag_window: VecDeque::new(),
            seal: Sealer::new(Purpose::Membership, cfg.key.as_ref(), me as u16, n),
            ctl_addrs: plan_addrs,
            refused: RefusedCounts::default(),
            join_backoff: BTreeMap::new(),
        }
    }

    fn record(&mut self, kind: &str, text: String) {
        self.events.push_back(EventRecord {
            at_seconds: self.start.elapsed().as_secs_f64(),
            unix_ms: unix_ms(),
            kind: kind.into(),
            text,
        });
        while self.events.len() > 200 {
            self.events.pop_front();
        }
    }

    /// One wake-up: datagrams, timers, membership, probes, and a report when one is due.
    fn step(&mut self) {
        let due = self.deadline();
        let readable = self.wait(due);
        let now = Instant::now();
        // How late the loop ran against its own deadline: this host's CPU, not the network.
        // The first deadlines fall on the grid's last point, before the loop started: not
        // late.
        let lag = now.saturating_duration_since(due.max(self.start));
        self.lag_window.push_back((now, lag));
        let window = self.inner.cfg.probe.window;
        while self.lag_window.front().is_some_and(|(t, _)| now.duration_since(*t) > window) {
            self.lag_window.pop_front();
        }
        // Every datagram first, then the timers.
        for (i, _) in readable.iter().enumerate().filter(|(_, r)| **r) {
            while let Ok((len, from)) = self.sockets[i][0].recv_from(&mut self.rx) {
                self.receive(len, from, now);
            }
        }
        let _ = self.m.handle_timeouts(now);
        if now >= self.next_join && self.m.members().len() + 1 < self.inner.cfg.pod.hosts.len() {
            self.join_missing(now);
        }
        self.transmit();
        let members_moved = self.member_events(now);
        self.refresh_members();
        let per_round = self.send_probes(now);
        // A member's change is shown at once; otherwise a report every `report_every`, or
        // every other one while the pod is calm (nothing lost anywhere, no traffic here).
        if now < self.next_report && !members_moved {
            return;
        }
        let every = self.inner.cfg.report_every.max(Duration::from_millis(1))
            * if self.calm { 2 } else { 1 };
        // On the grid (the rounds' epoch), a late report not made up.
        while self.next_report <= now {
            self.next_report += every;
        }
        self.report(now, per_round);
    }

    /// A membership datagram of `len` bytes (in `rx`) from `from`: handled only when it is
    /// sealed (authenticated, where the pod has a secret) by a host of the plan, sent from
    /// one of that host's own addresses, not a copy or a replay, and every identity in it
    /// one an honest member could have; refused and counted otherwise.
    fn receive(&mut self, len: usize, from: SocketAddr, now: Instant) {
        // The buffer is taken out while its datagram is handled (no copy per datagram).
        let rx = std::mem::take(&mut self.rx);
        match self.seal.open(&rx[..len], seal::unix_us()) {
            Ok((sender, data)) => {
                let at_home =
                    self.ctl_addrs[usize::from(sender)].iter().any(|a| a.ip() == from.ip());
                if at_home {
                    let _ = self.m.handle_from(sender, data, now);
                } else {
                    self.refused.unknown_sender += 1;
                }
            }
            Err(e) => self.refused.count(e),
        }
        self.rx = rx;
    }

    /// Announces this host to hosts not heard of yet (started later, or the first announce
    /// was lost): each again after 1 s, then 2, 4 … up to [`JOIN_BACKOFF_MAX`] while it stays
    /// silent, at most [`JOINS_PER_SECOND`] a second in all — a host in a plan of thousands
    /// whose others never came spends little on them.
    fn join_missing(&mut self, now: Instant) {
        let members = self.m.members();
        let backoff = &mut self.join_backoff;
        backoff.retain(|h, _| !members.contains_key(h));
        let due: Vec<Id> = self
            .seeds
            .iter()
            .filter(|s| !members.contains_key(&s.host))
            .filter(|s| backoff.get(&s.host).is_none_or(|(at, _)| *at <= now))
            .take(JOINS_PER_SECOND)
            .cloned()
            .collect();
        for s in &due {
            let (at, every) = backoff.entry(s.host).or_insert((now, Duration::from_millis(500)));
            *every = (*every * 2).min(JOIN_BACKOFF_MAX);
            *at = now + *every;
        }
        let _ = self.m.join(&due, now);
        self.next_join = now + Duration::from_secs(1);
    }

    /// The next thing due: a membership timer, a probe round or a report.
    fn deadline(&self) -> Instant {
        let now = Instant::now();
        let probe_due = lock(&self.inner.prober).next_deadline();
        [self.m.poll_timeout(), Some(probe_due), Some(self.next_report)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now)
            .min(now + self.inner.cfg.probe.period)
    }

    /// Waits for a datagram on any rail's control socket until `due`; which are readable.
    fn wait(&self, due: Instant) -> Vec<bool> {
        let wait = due.saturating_duration_since(Instant::now());
        let mut fds: Vec<PollFd> =
            self.sockets.iter().map(|s| PollFd::new(s[0].as_fd(), PollFlags::POLLIN)).collect();
        let t =
            PollTimeout::try_from(wait.as_millis().min(1000) as u32 + u32::from(!wait.is_zero()))
                .unwrap_or(PollTimeout::ZERO);
        let _ = nix::poll::poll(&mut fds, t);
        fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect()
    }

    /// Sends what membership has to send.
    fn transmit(&mut self) {
        while let Some((to, data)) = self.m.poll_transmit() {
            // Only to the plan's addresses of a plan host: never where a datagram says.
            let Some(addrs) = self.ctl_addrs.get(usize::from(to.host)) else { continue };
            // The answer to an announce is one datagram (the joiner announces again each
            // second until it hears): a request never makes more than it.
            let feed = foca::Codec::<Id>::decode_header(&mut foca::PostcardCodec, &data[..])
                .is_ok_and(|h| matches!(h.message, foca::Message::Feed));
            let data = self.seal.seal(&data, seal::unix_us());
            if feed {
                if let Some(a) = addrs.first()
                    && self.sockets[0][0].send_to(&data, a).is_ok()
                {
                    self.control_bytes += data.len() as u64 + 42;
                }
                continue;
            }
            // Every rail carries copies (one dead rail does not silence a host), each rail
            // two, from two of its source ports in turn: two ECMP hashes, different from one
            // datagram to the next, so that a spine that drops what is hashed onto it loses
            // a datagram only when both copies of every rail land on it, and never the same
            // pair's datagrams every time.
            self.spray = self.spray.wrapping_add(1);
            for (i, a) in addrs.iter().enumerate() {
                let rail = &self.sockets[i % self.sockets.len()];
                for k in 0..CONTROL_COPIES_PER_RAIL {
                    let s = &rail[(self.spray + k) % rail.len()];
                    if s.send_to(&data, a).is_ok() {
                        self.control_bytes += data.len() as u64 + 42;
                    }
                }
            }
        }
    }

    /// Members that came, went or were suspected: events, the channels told; whether any.
    fn member_events(&mut self, now: Instant) -> bool {
        let member_events = self.m.take_events();
        let moved = !member_events.is_empty();
        for e in member_events {
            let pod = &self.inner.cfg.pod;
            let name = pod.hosts.get(usize::from(e.host)).map_or("?", |h| h.name.as_str());
            let text = format!("{name} {}", health_word(e.health));
            self.record("member", text);
            if e.health != Health::Suspect {
                self.outages.record(usize::from(e.host), e.health == Health::Down, e.at);
            }
            match e.health {
                // Its messages are given up only if it stays down (a host that was only
                // suspected, or came back as the same life, loses nothing).
                Health::Down => {
                    self.down_since.entry(e.host).or_insert(now);
                }
                _ => {
                    // A host up (or back): it has no reports yet.
                    self.republish |= e.health == Health::Alive;
                    self.down_since.remove(&e.host);
                    if let Some(x) = self.m.members().get(&e.host) {
                        lock(&self.inner.chan).peer_up(e.host, x.id.boot);
                    }
                }
            }
        }
        let gone: Vec<u16> = self
            .down_since
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= DOWN_GRACE)
            .map(|(h, _)| *h)
            .collect();
        for h in gone {
            self.down_since.remove(&h);
            lock(&self.inner.chan).peer_down(h);
        }
        moved
    }

    /// What follows from the members (their probe QPs, who is unreachable), again only when
    /// they change.
    fn refresh_members(&mut self) {
        if self.m.changes() == self.members_seen {
            return;
        }
        self.members_seen = self.m.changes();
        let pod = &self.inner.cfg.pod;
        let me = self.inner.cfg.me;
        let known: BTreeMap<usize, Vec<u32>> =
            self.m.members().iter().map(|(h, x)| (usize::from(*h), x.id.qpns.clone())).collect();
        lock(&self.inner.chan).probe_qpns = known;
        let now_unreachable: BTreeSet<usize> = (0..pod.hosts.len())
            .filter(|&h| h != me)
            .filter(|h| {
                self.m.members().get(&(*h as u16)).is_none_or(|x| {
                    x.health == Health::Down || x.id.qpns.len() < pod.hosts[*h].rails.len()
                })
            })
            .collect();
        if now_unreachable != self.unreachable {
            self.unreachable = now_unreachable;
            lock(&self.inner.prober)
                .set_down(&self.unreachable.iter().copied().collect::<Vec<_>>());
        }
    }

    /// Sends the probes due and tells the observer of those sent and lost; the probes of a
    /// round (small, near-MTU).
    fn send_probes(&mut self, now: Instant) -> (usize, usize) {
        let inner = self.inner;
        let pod = &inner.cfg.pod;
        let (out, lost, per_round) = {
            let mut p = lock(&inner.prober);
            let out = p.poll(now, &self.addrs, &self.qpns);
            (out, p.take_lost(), p.per_round())
        };
        for o in &out {
            let qpn = self
                .m
                .members()
                .get(&(o.dst.host as u16))
                .and_then(|x| x.id.qpns.get(o.dst.rail).copied());
            let Some(to) = inner.rail_ip(o.dst) else { continue };
            let mut pk = o.packet;
            pk.t1 = stamp(inner, Instant::now());
            let sent = qpn.is_some_and(|q| send(inner, o.rail, &pk, o.len, to, q, o.port));
            if sent {
                inner.probe_bytes[usize::from(o.packet.large)]
                    .fetch_add(o.len as u64 + 58, Ordering::Relaxed);
                inner.observer.sent(pod, o);
            } else {
                lock(&inner.prober).unsent(o.packet.seq);
            }
        }
        for l in &lost {
            inner.observer.lost(pod, l);
        }
        per_round
    }

    /// This host's loop health over the probe window.
    fn host_loop(&self) -> LoopHealth {
        let worst = self.lag_window.iter().map(|(_, l)| *l).max().unwrap_or_default();
        let late = self
            .lag_window
            .iter()
            .filter(|(_, l)| l.as_millis() >= u128::from(probe::LATE_MS))
            .count();
        LoopHealth {
            local_health: self.m.local_health(),
            worst_lag_ms: worst.as_millis().min(u128::from(u32::MAX)) as u32,
            late_pct: (100 * late / self.lag_window.len().max(1)) as u8,
        }
    }

    /// A report: each path judged, this host's report published, the pod's located, the
    /// routes and the findings updated, the status rebuilt.
    fn report(&mut self, now: Instant, per_round: (usize, usize)) {
        let inner = self.inner;
        let host_loop = self.host_loop();
        // The peers this host has traffic for are probed every round; every other ToR is
        // while something is wrong anywhere (a loss here, a failing path in a report).
        let hot: Vec<usize> =
            lock(&inner.chan).channels.peers().into_iter().map(usize::from).collect();
        let elsewhere = self.located.as_ref().is_some_and(|l| {
            l.reports.values().any(|r| r.paths.iter().any(|p| p.state != PathState::Ok))
        });
        // Each path judged once for the report, the routes and the status.
        let (judged, report) = {
            let mut p = lock(&inner.prober);
            if host_loop.starved() {
                p.forget_horizon();
            }
            p.set_hot(&hot);
            let alert = elsewhere || p.any_loss();
            p.set_alert(alert);
            self.calm = !alert && hot.is_empty();
            let judged = p.judge_all();
            let report = p.broadcast_of(&judged, host_loop);
            (judged, report)
        };
        self.publish(now, report);
        let health = self.locate(now);
        self.route(now, &judged, &health);
        self.settle(now);
        let mut names = std::mem::take(&mut self.path_names);
        let status = self.build_status(&judged, &mut names, host_loop, per_round);
        self.path_names = names;
        *lock(&inner.status) = status;
    }

    /// Broadcasts this host's report when it changes, when a host came up (it learns
    /// everyone's) and every [`REPUBLISH`]. A starved loop's figures move all the time: while
    /// it stays starved they go out only with another change (what localization reads is that
    /// it is starved).
    fn publish(&mut self, now: Instant, mut report: Report) {
        let due = self.republish || now.duration_since(self.published_at) >= REPUBLISH;
        if !due && report.host_loop.starved() && self.published_loop.starved() {
            report.host_loop = self.published_loop;
        }
        let bytes = report.encode();
        if due || bytes != self.last_published {
            let _ = self.m.publish(bytes.clone());
            self.last_published = bytes;
            self.published_at = now;
            self.published_loop = report.host_loop;
            self.republish = false;
        }
    }

    /// The members' health (this host alive) and, when it or the reports changed, the pod
    /// located again.
    fn locate(&mut self, now: Instant) -> BTreeMap<u16, Health> {
        let me = self.inner.cfg.me;
        // Reports decoded once per version.
        let raw = self.m.reports();
        self.decoded.retain(|h, _| raw.contains_key(h));
        for (h, (version, b)) in raw {
            if self.decoded.get(&h).is_none_or(|(v, _)| *v != version) {
                match Report::decode(&b) {
                    Some(r) => self.decoded.insert(h, (version, r)),
                    None => self.decoded.remove(&h),
                };
            }
        }
        let mut health: BTreeMap<u16, Health> =
            self.m.members().iter().map(|(h, x)| (*h, x.health)).collect();
        health.insert(me as u16, Health::Alive);
        // Hosts of the plan never heard from, once the pod has had time to form: down.
        let unheard: Vec<u16> = if self.start.elapsed() >= NEVER_HEARD_AFTER {
            (0..self.inner.cfg.pod.hosts.len() as u16).filter(|h| !health.contains_key(h)).collect()
        } else {
            Vec::new()
        };
        for h in &unheard {
            health.insert(*h, Health::Down);
        }
        // The reports of the hosts not down, by version: what localization reads.
        let key: Vec<(u16, u64)> = self
            .decoded
            .iter()
            .filter(|(h, _)| health.get(h).is_some_and(|x| *x != Health::Down))
            .map(|(h, (v, _))| (*h, *v))
            .collect();
        let flaps = self.outages.flapping(now);
        let flapping: Vec<usize> = flaps.iter().map(|f| f.host).collect();
        if self
            .located
            .as_ref()
            .is_none_or(|l| l.health != health || l.key != key || l.flapping != flapping)
        {
            let reports: BTreeMap<u16, Report> = key
                .iter()
                .filter_map(|(h, _)| Some((*h, self.decoded.get(h)?.1.clone())))
                .collect();
            // The rails, ToRs and links named before (located, or still shown) stay while
            // their losses stay above the background and they have not healed.
            let held: BTreeSet<Component> = self
                .located
                .iter()
                .flat_map(|l| &l.found)
                .chain(&self.findings)
                .filter(|f| {
                    matches!(
                        f.at,
                        Component::Rail(_) | Component::Tor(_) | Component::TorSpine { .. }
                    )
                })
                .map(|f| f.at.clone())
                .collect();
            let mut found = locate::locate_held(
                &self.inner.cfg.pod,
                me,
                &health,
                &reports,
                &self.inner.cfg.routes,
                &held,
            );
            let pod = &self.inner.cfg.pod;
            let secs = self.start.elapsed().as_secs();
            for f in found.iter_mut().filter(|f| f.kind == "host-down") {
                if unheard.iter().any(|h| pod.hosts[usize::from(*h)].name == f.component) {
                    f.evidence = format!(
                        "never heard from in the {secs} s since this agent started: its agent not \
                         running, on another --pod-port or with another secret, or no path to it"
                    );
                }
            }
            flap::name_flaps(pod, &mut found, &flaps);
            self.located = Some(Located { health: health.clone(), key, reports, flapping, found });
            self.located_gen += 1;
        }
        health
    }

    /// Routes from this host's own paths (not the settled findings: traffic moves at once)
    /// and the others' reports.
    fn route(&self, now: Instant, judged: &[JudgedPath], health: &BTreeMap<u16, Health>) {
        let Some(located) = &self.located else { return };
        let views: BTreeMap<(usize, Dev), PathView> = judged
            .iter()
            .map(|jp| {
                let j = &jp.judged;
                // Other ports only where losses split by port (an ECMP path): a dead path's
                // ports that answered before it died carry nothing now.
                let carried = if j.ports.is_split() { j.ports.carried.clone() } else { vec![] };
                let v = PathView {
                    state: j.state,
                    carried,
                    lost: j.ports.lost.clone(),
                    clean_since: j.clean_since,
                };
                (jp.key, v)
            })
            .collect();
        let alive = |h: usize| health.get(&(h as u16)).is_some_and(|x| *x != Health::Down);
        let mut c = lock(&self.inner.chan);
        let changes = c.table.update(now, &views, &located.reports, &alive);
        let moved = !changes.is_empty();
        c.apply(&self.inner.cfg.pod, changes, unix_ms());
        drop(c);
        if moved {
            self.inner.wake();
        }
    }

    /// The findings that have been seen for their settling time; events for those that came
    /// and went.
    fn settle(&mut self, now: Instant) {
        // Nothing new to settle: the same findings, every one shown already.
        if self.settled == (self.located_gen, false) {
            return;
        }
        let Some(located) = &self.located else { return };
        let cfg = &self.inner.cfg;
        // By (kind, component), in sets: a pod of thousands of hosts has thousands of
        // findings (every host never heard from), compared each report.
        let key = |f: &Finding| (f.kind.clone(), f.component.clone());
        let raw = located.found.clone();
        let raw_keys: BTreeSet<(String, String)> = raw.iter().map(key).collect();
        let is_all = raw.len();
        for k in &raw_keys {
            self.last_located.insert(k.clone(), now);
        }
        // The findings shown that this location did not name stay for `clear_after` (one
        // that takes their place waits out its settling time meanwhile).
        let lingering: Vec<Finding> = self
            .findings
            .iter()
            .filter(|g| {
                !raw_keys.contains(&key(g))
                    && self
                        .last_located
                        .get(&key(g))
                        .is_some_and(|t| now.duration_since(*t) < cfg.clear_after)
            })
            .cloned()
            .collect();
        let kept: BTreeSet<(String, String)> =
            raw_keys.iter().cloned().chain(lingering.iter().map(key)).collect();
        self.last_located.retain(|k, _| kept.contains(k));
        self.first_seen.retain(|k, _| kept.contains(k));
        let lingers = !lingering.is_empty();
        // A finding shown stays shown while it is located (its settling time can grow: a
        // rail whose evidence became partial asks five times the time — it was cleared, and
        // shown again 1.6 s later).
        let shown: BTreeSet<(String, String)> = self.findings.iter().map(key).collect();
        let mut now_findings: Vec<Finding> = raw
            .into_iter()
            .filter(|f| {
                let since = *self.first_seen.entry(key(f)).or_insert(now);
                let settle = match f.kind.as_str() {
                    "host-down" => Duration::ZERO,
                    "link" => cfg.settle * 5,
                    _ if f.partial => cfg.settle * 5,
                    _ => cfg.settle,
                };
                shown.contains(&key(f)) || now.duration_since(since) >= settle
            })
            .collect();
        now_findings.extend(lingering);
        let was: BTreeSet<(String, String)> = self.findings.iter().map(key).collect();
        let is: BTreeSet<(String, String)> = now_findings.iter().map(key).collect();
        let new: Vec<String> = now_findings
            .iter()
            .filter(|f| !was.contains(&key(f)))
            .map(|f| format!("{}: {} — {}", f.kind, f.component, f.evidence))
            .collect();
        let cleared: Vec<String> = self
            .findings
            .iter()
            .filter(|g| !is.contains(&key(g)))
            .map(|g| format!("{}: {}", g.kind, g.component))
            .collect();
        for text in new {
            self.record("finding", text);
        }
        for text in cleared {
            self.record("finding-cleared", text);
        }
        let waiting = now_findings.len() < is_all || lingers;
        self.findings = now_findings;
        self.settled = (self.located_gen, waiting);
    }
}

fn health_word(h: Health) -> &'static str {
    match h {
        Health::Alive => "alive",
        Health::Suspect => "suspected",
        Health::Down => "down",
    }
}

impl Control<'_> {
    /// The status `pod status` and /metrics show: members, paths, findings, routes, cost.
    fn build_status(
        &self,
        judged: &[JudgedPath],
        path_names: &mut BTreeMap<(usize, Dev), String>,
        host_loop: LoopHealth,
        per_round: (usize, usize),
    ) -> Status {
        let (inner, m, start) = (self.inner, &self.m, self.start);
        let empty = BTreeMap::new();
        let reports = self.located.as_ref().map_or(&empty, |l| &l.reports);
        let (findings, events, control_bytes) = (&self.findings, &self.events, self.control_bytes);
        let pod = &inner.cfg.pod;
        let me = inner.cfg.me;
        let now = Instant::now();
        let mut members: Vec<MemberStatus> = (0..pod.hosts.len())
            .map(|h| {
                let x = m.members().get(&(h as u16));
                MemberStatus {
                    index: h,
                    host: pod.hosts[h].name.clone(),
                    health: if h == me {
                        Health::Alive
                    } else {
                        x.map_or(Health::Down, |x| x.health)
                    },
                    for_seconds: x.map_or(start, |x| x.since).elapsed().as_secs_f64(),
                    incarnation: if h == me {
                        m.me().incarnation
                    } else {
                        x.map_or(0, |x| x.id.incarnation)
                    },
                }
            })
            .collect();
        members.sort_by_key(|x| x.index);
        let mut s = PathSummary { reporting: reports.len(), ..PathSummary::default() };
        for p in reports.values().flat_map(|r| &r.paths) {
            s.paths += 1;
            match p.state {
                PathState::Ok => s.ok += 1,
                PathState::Lossy => s.lossy += 1,
                PathState::Dead => s.dead += 1,
                PathState::LargeLost => s.large_lost += 1,
            }
        }

        let my_paths: Vec<MyPath> = judged
            .iter()
            .map(|jp| {
                let (rail, d) = jp.key;
                let path = path_names.entry(jp.key).or_insert_with(|| {
                    format!("{} -> {}", pod.name(Dev { host: me, rail }), pod.name(d))
                });
                MyPath {
                    path: path.clone(),
                    state: jp.judged.state,
                    sent: jp.sent[0],
                    lost: jp.lost[0],
                    large_sent: jp.sent[1],
                    large_lost: jp.lost[1],
                    rtt_p50_us: jp.judged.rtt_p50.map_or(0, |d| d.as_micros() as u32),
                }
            })
            .collect();
        // The median round trip of this host's paths (the broadcasts leave `ok` paths' out).
        let mut rtts: Vec<u32> =
            my_paths.iter().map(|p: &MyPath| p.rtt_p50_us).filter(|r| *r > 0).collect();
        rtts.sort_unstable();
        s.rtt_p50_us = rtts.get(rtts.len() / 2).copied().unwrap_or(0);
        let (late_timers, _) = m.lateness();
        let (routes, route_events, channels) = {
            let c = lock(&inner.chan);
            let routes =
                c.table.routes().iter().map(|(p, r)| (pod.hosts[*p].name.clone(), *r)).collect();
            let ev = c.routes.iter().rev().take(50).rev().cloned().collect();
            let st = ChannelStatus {
                counters: c.channels.counters(),
                relayed: c.relayed,
                hops_up: c.hops_up(),
                accepted: c.accepted(),
            };
            (routes, ev, st)
        };
        let mut refused = self.refused;
        refused.implausible += m.implausible();
        refused.add(&lock(&inner.probes_refused));
        refused.add(&lock(&inner.chan).refused);
        Status {
            authenticated: inner.cfg.key.is_some(),
            refused,
            routes,
            route_events,
            channels,
            host: pod.hosts[me].name.clone(),
            index: me,
            members,
            paths: s,
            my_paths,
            findings: findings.to_vec(),
            events: events.iter().cloned().collect(),
            host_loop,
            late_timers,
            cost: Cost {
                per_round,
                probe_bytes: (
                    inner.probe_bytes[0].load(Ordering::Relaxed),
                    inner.probe_bytes[1].load(Ordering::Relaxed),
                ),
                control_bytes,
                seconds: now.duration_since(start).as_secs_f64(),
            },
        }
    }
}
