//! A plan with a `[pod]` run across hosts: every host runs the same command, the ranks meet
//! through the rendezvous (podnet-rendezvous, as burn-in's do), and rank 0 runs the plan —
//! it sends each rank what to serve and what to measure, round by round, over the rendezvous
//! links, judges the figures against the pod's own medians and the link rate, attributes the
//! failures, and writes the reports. Every other rank is a worker: it opens its rails'
//! devices, serves and measures as told, and answers with the figures.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use perf::exchange::Role;
use perf::session::{self, Options, Outcome, PerfTest, Quiet, Row};
use providers::{ContextOptions, Progress};
use rendezvous::bootstrap::{BootstrapError, Session};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use verbs::Context;

use crate::check::{Measurement, Threshold, median};
use crate::plan::{PerfCheck, Plan};
use crate::report::{
    BwPoint, Check, Contention, HostFacts, LatPoint, Matrix, PairResult, PodSummary, Report,
    RoundReport, Status,
};
use crate::run::RunProgress;
use topology::{Bisection, Dev, Incast, PairOutcome, Pod, PodProgress};

/// One perf test a worker runs, as rank 0 sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    /// The test (`write-bw`, `send-lat`, …).
    pub test: String,
    /// Message sizes.
    pub sizes: Vec<usize>,
    /// Messages per size (`None`: perf's default), unless `seconds`.
    pub iters: Option<u64>,
    /// Seconds of traffic instead of a count.
    pub seconds: Option<f64>,
    /// Seconds without a completion before the test fails.
    pub stall: f64,
    /// The UDP source ports of the QPs (both sides), QP `i` from the `i`-th: one for a
    /// probe of one ECMP path, one a QP for a test spread over known paths; none, the
    /// ports the QP numbers hash to.
    #[serde(default)]
    pub udp_source_ports: Vec<u16>,
    /// The RC ACK timeout code.
    #[serde(default = "default_timeout")]
    pub qp_timeout: u8,
    /// Operations in flight per QP (bandwidth tests; `None`: perf's default).
    #[serde(default)]
    pub tx_depth: Option<usize>,
    /// QPs (each its own UDP source port, so its own ECMP hash).
    #[serde(default = "one")]
    pub qps: usize,
}

fn default_timeout() -> u8 {
    14
}

fn one() -> usize {
    1
}

impl TestSpec {
    fn options(&self) -> Options {
        let t = PerfTest::from_name(&self.test).unwrap_or(PerfTest::WriteBw);
        let mut o = Options::new(t);
        if !self.sizes.is_empty() {
            o.sizes = self.sizes.clone();
        }
        if let Some(n) = self.iters {
            o.iters = n;
        }
        o.duration = self.seconds.map(Duration::from_secs_f64);
        o.stall = Duration::from_secs_f64(self.stall);
        o.wait = Some(Duration::from_secs_f64(self.stall + 30.0 + self.seconds.unwrap_or(0.0)));
        o.udp_source_ports = self.udp_source_ports.clone();
        o.qp_timeout = self.qp_timeout;
        o.qps = self.qps.max(1);
        if let Some(d) = self.tx_depth.filter(|_| t.is_bw()) {
            o.tx_depth = d;
        }
        o
    }

    /// How long one connection attempt of its side channel waits, and how many it makes:
    /// the side channel crosses the rail's own fabric, where an ECMP path that drops loses
    /// every SYN (and SYN-ACK) of one connection — its retransmissions hash the same way —
    /// while a new connection, from a new ephemeral port, hashes anew. Half the stall time
    /// (at least half a second, at most five) an attempt, [`CONNECT_ATTEMPTS`] of them.
    fn connect_attempt(&self) -> Duration {
        Duration::from_secs_f64(self.stall.clamp(1.0, 10.0) / 2.0)
    }

    /// The longest its side channel may take to connect: every attempt timed out.
    fn connect_worst(&self) -> Duration {
        self.connect_attempt() * CONNECT_ATTEMPTS
    }
}

/// Connection attempts of a test's side channel, each from a new ephemeral port: with one
/// of two ECMP paths dead, all four lost one time in sixteen (one attempt: one in two, and
/// the probe over it says nothing of its own path).
const CONNECT_ATTEMPTS: u32 = 4;

/// Connects the side channel to `peer`, again from a new ephemeral port (a new ECMP hash)
/// after an attempt that timed out, up to [`CONNECT_ATTEMPTS`] times; any other error
/// (refused, unreachable) ends it.
fn connect_side_channel(peer: SocketAddr, t: &TestSpec) -> std::io::Result<TcpStream> {
    let mut tried = 0;
    loop {
        tried += 1;
        match TcpStream::connect_timeout(&peer, t.connect_attempt()) {
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && tried < CONNECT_ATTEMPTS => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{e} ({tried} attempts from as many source ports)"),
                ));
            }
            other => return other,
        }
    }
}

/// What rank 0 tells a rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Cmd {
    /// Listen on `device`'s address and serve `tests`, one connection each, in order.
    Serve { job: u64, device: String, tests: Vec<TestSpec> },
    /// Connect to `peer` from `device` and run `tests`, in order.
    Measure { job: u64, device: String, peer: SocketAddr, tests: Vec<TestSpec> },
    /// The run is over.
    Done { verdict: String },
}

/// A figure as it travels back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Figure {
    /// Bandwidth, MB/s (2^20).
    Bw {
        /// Message size.
        size: u64,
        /// Average bandwidth.
        mb_per_s: f64,
    },
    /// Latency, µs.
    Lat {
        /// Message size.
        size: u64,
        /// Minimum.
        min: f64,
        /// Median.
        median: f64,
        /// 99th percentile.
        p99: f64,
        /// 99.9th percentile.
        p99_9: f64,
    },
}

/// One test's result on the measuring side.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TestResult {
    /// Its figures, one per size.
    pub figures: Vec<Figure>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// It failed on the wire — the RDMA traffic stalled or a work request failed — not in
    /// setting up (the side channel, a verb): what a path that drops looks like.
    #[serde(default)]
    pub on_wire: bool,
    /// Packets the measuring device sent during the test.
    pub sent_pkts: u64,
    /// Of those, sent again by go-back-N.
    pub retransmitted_pkts: u64,
    /// The measuring device's counters that moved during the test (`name delta, …`), when
    /// it sent anything again: what the cause is read from (NAKs, timeouts).
    #[serde(default)]
    pub counters: String,
}

/// What a rank answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
enum Reply {
    Listening {
        job: u64,
        addr: SocketAddr,
    },
    NotServing {
        job: u64,
        error: String,
    },
    Measured {
        job: u64,
        results: Vec<TestResult>,
    },
    /// The server side of the job's `test`-th test failed (its client fails too, often with
    /// no more than a closed side channel to say why).
    ServerFailed {
        job: u64,
        test: usize,
        error: String,
    },
}

/// What a rank tells rank 0 of itself when it joins.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankInfo {
    /// The host's facts and its devices'.
    pub facts: HostFacts,
}

/// The devices a worker opened, by name.
struct Worker {
    progress: Progress,
    devices: Mutex<HashMap<String, Arc<Context>>>,
}

impl Worker {
    fn new(progress: PodProgress) -> Worker {
        let progress = match progress {
            PodProgress::Busy => Progress::Busy,
            PodProgress::Event => Progress::Event,
        };
        Worker { progress, devices: Mutex::new(HashMap::new()) }
    }

    fn open(&self, name: &str) -> Result<Arc<Context>, String> {
        let mut d = self.devices.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = d.get(name) {
            return Ok(c.clone());
        }
        let opts = ContextOptions { progress: self.progress, ..Default::default() };
        let c = Arc::new(providers::open(name, &opts).map_err(|e| format!("{name}: {e}"))?);
        d.insert(name.to_string(), c.clone());
        Ok(c)
    }

    /// Handles one command on threads of its own; answers through `reply`.
    fn handle(self: &Arc<Self>, cmd: Cmd, reply: Arc<dyn Fn(Reply) + Send + Sync>) {
        match cmd {
            Cmd::Serve { job, device, tests } => {
                let ctx = match self.open(&device) {
                    Ok(c) => c,
                    Err(error) => return reply(Reply::NotServing { job, error }),
                };
                let listener = match TcpListener::bind((ctx.ip(), 0)) {
                    Ok(l) => l,
                    Err(e) => {
                        let error = format!("cannot listen on {}: {e}", ctx.ip());
                        return reply(Reply::NotServing { job, error });
                    }
                };
                let addr = match listener.local_addr() {
                    Ok(a) => a,
                    Err(e) => return reply(Reply::NotServing { job, error: e.to_string() }),
                };
                reply(Reply::Listening { job, addr });
                let events = self.progress == Progress::Event;
                std::thread::spawn(move || {
                    serve(&ctx, &listener, &tests, events, &mut |test, error| {
                        reply(Reply::ServerFailed { job, test, error });
                    });
                });
            }
            Cmd::Measure { job, device, peer, tests } => {
                let me = self.clone();
                std::thread::spawn(move || {
                    let events = me.progress == Progress::Event;
                    let results = match me.open(&device) {
                        Ok(ctx) => tests.iter().map(|t| measure(&ctx, peer, t, events)).collect(),
                        Err(error) => vec![
                            TestResult { error: Some(error), ..Default::default() };
                            tests.len()
                        ],
                    };
                    reply(Reply::Measured { job, results });
                });
            }
            Cmd::Done { .. } => {}
        }
    }
}

/// Serves `tests` on `listener`, a connection each; gives up on a client that does not come
/// (its side failed before connecting). A session that fails is told to `failed` (the
/// test's index, the error) before its side channel closes.
fn serve(
    ctx: &Context,
    listener: &TcpListener,
    tests: &[TestSpec],
    events: bool,
    failed: &mut dyn FnMut(usize, String),
) {
    let _ = listener.set_nonblocking(true);
    for (i, t) in tests.iter().enumerate() {
        let o = Options { gid_index: ctx.gid_index(), ..t.options() };
        let until = Instant::now() + Duration::from_secs_f64(t.stall + 30.0);
        let Some((sock, peer)) = accept_client(listener, until) else { return };
        if let Err(e) = session::run(ctx, &o, Role::Server, &sock, peer.ip(), events, &mut Quiet) {
            failed(i, e.to_string());
        }
    }
}

/// The next connection on `listener` (non-blocking) whose client speaks, waiting until
/// `until`; `None` once it has passed.
///
/// A connection closed before its first byte is one the client gave up on: its connect
/// attempt timed out ([`TestSpec::connect_attempt`]) just as the handshake completed — a
/// lost SYN is sent again after 1 s, as long as an attempt of a 2 s stall lasts — and it
/// connected again from another port. Served, it would fail the session and the client's
/// real connection would wait in the accept queue of a listener about to close.
fn accept_client(listener: &TcpListener, until: Instant) -> Option<(TcpStream, SocketAddr)> {
    loop {
        match listener.accept() {
            Ok((s, peer)) => {
                let _ = s.set_nonblocking(false);
                let wait = until.saturating_duration_since(Instant::now());
                let _ = s.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
                let mut first = [0u8; 1];
                // The client speaks first (`exchange::Channel::swap`); a client that says
                // nothing in time fails its session as before.
                let abandoned = match s.peek(&mut first) {
                    Ok(n) => n == 0,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                };
                let _ = s.set_read_timeout(None);
                if !abandoned {
                    return Some((s, peer));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(_) => return None,
        }
    }
}

/// Runs one test against `peer`; with `events`, waiting on completion events (the device
/// makes progress on events too) rather than polling.
fn measure(ctx: &Context, peer: SocketAddr, t: &TestSpec, events: bool) -> TestResult {
    let o = Options { gid_index: ctx.gid_index(), ..t.options() };
    let before = ctx.counters();
    let run = connect_side_channel(peer, t)
        .map_err(|e| (false, format!("cannot connect to {peer}: {e}")))
        .and_then(|sock| {
            session::run(ctx, &o, Role::Client, &sock, peer.ip(), events, &mut Quiet).map_err(|e| {
                let wire =
                    matches!(e, session::Error::OnTheWire { .. } | session::Error::Engine(_));
                (wire, e.to_string())
            })
        });
    let after = ctx.counters();
    let (sent_pkts, retransmitted_pkts) = (
        after.sent_pkts.saturating_sub(before.sent_pkts),
        after.retransmitted_pkts.saturating_sub(before.retransmitted_pkts),
    );
    let counters = if retransmitted_pkts > 0 {
        let moved: Vec<String> = after
            .iter()
            .zip(before.iter())
            .filter(|((_, a), (_, b))| a > b)
            .map(|((k, a), (_, b))| format!("{k} {}", a - b))
            .collect();
        moved.join(", ")
    } else {
        String::new()
    };
    match run {
        Ok(out) => TestResult {
            figures: figures(&out),
            error: None,
            on_wire: false,
            sent_pkts,
            retransmitted_pkts,
            counters,
        },
        Err((on_wire, e)) => TestResult {
            error: Some(e),
            on_wire,
            sent_pkts,
            retransmitted_pkts,
            counters,
            ..Default::default()
        },
    }
}

fn figures(out: &Outcome) -> Vec<Figure> {
    out.rows
        .iter()
        .map(|r| match r {
            Row::Bw(b) => Figure::Bw { size: b.size, mb_per_s: b.bw_avg },
            Row::Lat(l) => Figure::Lat {
                size: l.size,
                min: l.t_min,
                median: l.t_typical,
                p99: l.p99,
                p99_9: l.p99_9,
            },
        })
        .collect()
}

/// This host's facts, and its rails' devices' (`rails`: the plan's devices for this rank).
pub fn host_facts(sys: &Path, rank: u32, name: &str, rails: &[topology::Rail]) -> HostFacts {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let devices = rails
        .iter()
        .enumerate()
        .map(|(i, r)| crate::report::device_facts(sys, i, &r.device, &r.tor))
        .collect();
    HostFacts {
        rank,
        name: name.to_string(),
        hostname: rendezvous::world::hostname(),
        kernel,
        version: rendezvous::bootstrap::VERSION.to_string(),
        devices,
    }
}

/// Which plan host rank `rank` on host `hostname` plays: the host of that name when the plan
/// names exactly one so, else `hosts[rank]`. Each rank decides for itself and says so in its
/// facts (`HostFacts::name`); rank 0 checks that the ranks play every host once.
pub fn place(pod: &Pod, rank: u32, hostname: &str) -> usize {
    let mut named = pod.hosts.iter().enumerate().filter(|(_, h)| h.name == hostname);
    match (named.next(), named.next()) {
        (Some((i, _)), None) => i,
        _ => rank as usize,
    }
}

/// How this rank's part ended.
#[derive(Debug)]
pub enum PodRun {
    /// Rank 0: the run's report.
    Report(Box<Report>),
    /// Another rank: it served and measured until rank 0 said the run was over, with its
    /// verdict (`12 checks passed, 1 failed, 0 skipped`).
    Followed(String),
}

/// Runs this rank's part: rank 0 runs the plan, the others work for it.
pub fn run(
    plan: &Plan,
    session: Session,
    sys: &Path,
    progress: &mut dyn RunProgress,
) -> Result<PodRun, BootstrapError> {
    let pod = plan.pod.as_ref().ok_or_else(|| BootstrapError::Protocol("no pod".into()))?;
    let session = Arc::new(session);
    let worker = Arc::new(Worker::new(pod.progress));
    if session.world().rank != 0 {
        let s = session.clone();
        let reply: Arc<dyn Fn(Reply) + Send + Sync> = Arc::new(move |r: Reply| {
            let _ = s.send(0, serde_json::to_value(&r).unwrap_or(Value::Null));
        });
        let verdict = loop {
            let Some((_, v)) = session.recv(Duration::from_secs(1))? else { continue };
            match serde_json::from_value::<Cmd>(v) {
                Ok(Cmd::Done { verdict }) => break verdict,
                Ok(cmd) => worker.handle(cmd, reply.clone()),
                Err(e) => return Err(BootstrapError::Protocol(format!("from rank 0: {e}"))),
            }
        };
        session.finish(true)?;
        return Ok(PodRun::Followed(verdict));
    }
    if session.roster.len() != pod.hosts.len() {
        return Err(BootstrapError::Protocol(format!(
            "the world has {} ranks and the pod {} hosts",
            session.roster.len(),
            pod.hosts.len()
        )));
    }
    // Each rank says which host it plays (`podrun::place`); every host once.
    let mut places = vec![0usize; session.roster.len()];
    let mut facts: Vec<Option<HostFacts>> = vec![None; pod.hosts.len()];
    for (rank, m) in session.roster.iter().enumerate() {
        let info = serde_json::from_value::<RankInfo>(m.info.clone()).map_err(|e| {
            BootstrapError::Protocol(format!("rank {rank} ({}) said no facts: {e}", m.host))
        })?;
        let Some(h) = pod.hosts.iter().position(|h| h.name == info.facts.name) else {
            return Err(BootstrapError::Protocol(format!(
                "rank {rank} ({}) plays {:?}, which is no host of the plan",
                m.host, info.facts.name
            )));
        };
        if facts[h].is_some() {
            return Err(BootstrapError::Protocol(format!(
                "two ranks play host {:?} (the second: rank {rank}, {}): give each host of the \
                 plan a distinct host name, or none of the ranks' names",
                info.facts.name, m.host
            )));
        }
        places[rank] = h;
        facts[h] = Some(info.facts);
    }
    // As many ranks as hosts, none twice: every host is played.
    let facts: Vec<HostFacts> = facts.into_iter().flatten().collect();
    let (tx, rx) = mpsc::channel::<Reply>();
    let tx = Mutex::new(tx);
    let local: Arc<dyn Fn(Reply) + Send + Sync> = Arc::new(move |r| {
        let _ = tx.lock().unwrap_or_else(PoisonError::into_inner).send(r);
    });
    let mut rank_of = vec![0u32; pod.hosts.len()];
    for (rank, h) in places.iter().enumerate() {
        rank_of[*h] = rank as u32;
    }
    let bus = Bus { session: session.clone(), worker: worker.clone(), local, rx, rank_of };
    let mut coord = Coordinator {
        plan,
        pod,
        bus: &bus,
        progress,
        next_job: 0,
        line_rates: BTreeMap::new(),
        silent_ranks: BTreeMap::new(),
        routes: BTreeMap::new(),
    };
    let report = coord.run(&facts, sys);
    // A host lost mid-run (frozen, killed, cut off) stops the run; the report still says
    // which, as the suspect, rather than leaving nothing behind — and which ranks it had
    // waited on meanwhile, beside it.
    if let Err(BootstrapError::Lost(f)) = &report {
        let silent = std::mem::take(&mut coord.silent_ranks);
        // Rank 0 cut off from every rank at once: the device its coordinator address is
        // on, where it is one of its rails (its own cable, port or ToR).
        let control = (f.rank == 0)
            .then(|| {
                let h = places[0];
                let at = session.world().coordinator.ip();
                (0..pod.hosts[h].rails.len())
                    .map(|rail| Dev { host: h, rail })
                    .find(|d| worker.open(&pod.rail(*d).device).is_ok_and(|c| c.ip() == at))
            })
            .flatten();
        let r = lost_report(plan, pod, &places, facts, f, &silent, control);
        return Ok(PodRun::Report(Box::new(r)));
    }
    let verdict = match &report {
        Ok(r) => {
            let s = r.summary();
            format!("{} checks passed, {} failed, {} skipped", s.passed, s.failed, s.skipped)
        }
        Err(e) => format!("the run failed: {e}"),
    };
    for rank in 1..session.world().size {
        let _ = session.send(
            rank,
            serde_json::to_value(Cmd::Done { verdict: verdict.clone() }).unwrap_or(Value::Null),
        );
    }
    let report = report?;
    // A rank that left without its goodbye (crashed, or a rogue) does not cost the report.
    if let Err(e) = session.finish(true) {
        progress.note(&format!("the run's end: {e} (the report stands)"));
    }
    Ok(PodRun::Report(Box::new(report)))
}

/// The report of a run whose ranks `missing` never joined (`error`: the rendezvous's words):
/// each one's host as a suspect — the plan's host of that rank (a rank that never joined
/// could not say its host name) — with a failed `pod/<host>/joined` check; nothing was
/// measured.
pub fn not_joined_report(plan: &Plan, missing: &[u32], error: &str) -> Report {
    let mut r = Report::new(&plan.name);
    let Some(pod) = &plan.pod else { return r };
    for &rank in missing {
        let Some(host) = pod.hosts.get(rank as usize) else { continue };
        let check = format!("pod/{}/joined", host.name);
        r.checks.push(
            Measurement::new(check.clone())
                .want(Threshold::Unset(format!("rank {rank} never joined: {error}")))
                .judge(None),
        );
        let evidence = format!(
            "rank {rank} never joined the run ({error}): the host is down, frozen, not started, \
             or cut off on its control path (every rail, where the coordinator is reached over \
             the rails); nothing was measured"
        );
        let mut s =
            topology::Suspect::on(pod, topology::Component::Host(rank as usize), 1.0, evidence);
        s.checks = vec![check];
        r.suspects.push(s);
    }
    r.devices = pod.devices().into_iter().map(|d| pod.name(d)).collect();
    r
}

/// The report of a run that stopped when rank `f.rank` was lost: it as the suspect, and each
/// rank in `silent` (it heartbeat, but did not do what it was asked) beside it. Rank 0 itself
/// lost (every rank went silent at once): its control path is the suspect — `control`, the
/// rail its coordinator address is on, where it is one; else its host.
fn lost_report(
    plan: &Plan,
    pod: &Pod,
    places: &[usize],
    facts: Vec<HostFacts>,
    f: &rendezvous::bootstrap::Failure,
    silent: &BTreeMap<u32, String>,
    control: Option<Dev>,
) -> Report {
    let name_of = |rank: u32| {
        places
            .get(rank as usize)
            .map_or_else(|| format!("rank {rank}"), |h| pod.hosts[*h].name.clone())
    };
    let name = name_of(f.rank);
    let mut r = Report::new(&plan.name);
    let host = places.get(f.rank as usize).map(|h| topology::Component::Host(*h));
    let (check, evidence, at) = match (f.rank, control) {
        (0, Some(d)) => (
            format!("pod/{}/control-path", pod.name(d)),
            format!(
                "{f}; the coordinator listens on {}'s address: its cable, port or ToR; the \
                 figures measured before it are not in this report",
                pod.name(d)
            ),
            Some(topology::Component::Rail(d)),
        ),
        (0, None) => (
            format!("pod/{name}/control-path"),
            format!("{f}; the figures measured before it are not in this report"),
            host,
        ),
        _ => (
            format!("pod/{name}/reachable"),
            format!(
                "{f}: the host stopped answering the rendezvous mid-run (frozen, killed or cut \
                 off on its control path); the figures measured before it are not in this \
                 report"
            ),
            host,
        ),
    };
    r.checks.push(
        Measurement::new(check.clone())
            .want(Threshold::Unset(format!("{f}: the run stopped there")))
            .judge(None),
    );
    let mut s = match at {
        Some(at) => topology::Suspect::on(pod, at, 1.0, evidence),
        None => topology::Suspect {
            kind: "host".into(),
            component: name.clone(),
            confidence: 1.0,
            evidence,
            pairs: Vec::new(),
            checks: Vec::new(),
            // A rank with no place in the plan (none is lost before it has one).
            at: topology::Component::Host(usize::MAX),
        },
    };
    s.checks = vec![check];
    r.suspects.push(s);
    // Rank 0 cut off: every rank was silent to it, none is beside it.
    let beside = if f.rank == 0 { &BTreeMap::new() } else { silent };
    for (rank, what) in beside.iter().filter(|(r, _)| **r != f.rank) {
        let Some(&h) = places.get(*rank as usize) else { continue };
        let other = name_of(*rank);
        let check = format!("pod/{other}/answers");
        r.checks.push(
            Measurement::new(check.clone())
                .want(Threshold::Unset(format!("rank {rank} ({other}) {what}")))
                .judge(None),
        );
        let evidence = format!("rank {rank} ({other}) {what}: a hung or misbehaving rank");
        let mut s = topology::Suspect::on(pod, topology::Component::Host(h), 0.8, evidence);
        s.checks = vec![check];
        r.suspects.push(s);
    }
    r.hosts = facts;
    r.devices = pod.devices().into_iter().map(|d| pod.name(d)).collect();
    r.pod = Some(PodSummary {
        pair_set: pod.pairs.as_str().into(),
        pairs: 0,
        all_pairs: pod.all_pairs(),
        coverage: 0.0,
        devices_covered: 0,
        devices: pod.devices().len(),
    });
    r
}

/// Rank 0's way to the ranks, itself included.
struct Bus {
    session: Arc<Session>,
    worker: Arc<Worker>,
    local: Arc<dyn Fn(Reply) + Send + Sync>,
    rx: mpsc::Receiver<Reply>,
    /// The rank of each plan host.
    rank_of: Vec<u32>,
}

impl Bus {
    fn send(&self, host: usize, cmd: Cmd) -> Result<(), BootstrapError> {
        let rank = self.rank_of[host];
        if rank == 0 {
            self.worker.handle(cmd, self.local.clone());
            Ok(())
        } else {
            self.session.send(rank, serde_json::to_value(cmd).unwrap_or(Value::Null))
        }
    }

    /// The next answer and the rank it came from (rank 0's own worker: 0). An answer that
    /// does not parse is returned as `None` in its place: a rank's bug, not rank 0's end.
    fn recv(&self, timeout: Duration) -> Result<Option<(u32, Option<Reply>)>, BootstrapError> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(r) = self.rx.try_recv() {
                return Ok(Some((0, Some(r))));
            }
            if let Some((rank, v)) = self.session.recv(Duration::from_millis(2))? {
                return Ok(Some((rank, serde_json::from_value(v).ok())));
            }
            if Instant::now() >= until {
                return Ok(None);
            }
        }
    }
}

/// One direction of a measurement: `client` measures against `server`.
#[derive(Debug, Clone)]
struct Job {
    client: Dev,
    server: Dev,
    tests: Vec<TestSpec>,
}

impl Job {
    /// How long its tests may take: each one's duration, its stall timeout and 30 s (an
    /// iteration count's time on the slowest link).
    fn budget(&self) -> Duration {
        self.each_stalling(30.0)
    }

    /// How long its tests take when each runs its time and then stalls out: what a working
    /// client may spend on it without a word (an iteration count's own time is not known).
    fn worst_case(&self) -> Duration {
        self.each_stalling(0.0)
    }

    /// Each test's side channel at its slowest to connect, its duration, its stall timeout,
    /// and `extra` seconds a test.
    fn each_stalling(&self, extra: f64) -> Duration {
        let s: f64 = self
            .tests
            .iter()
            .map(|t| t.connect_worst().as_secs_f64() + t.stall + extra + t.seconds.unwrap_or(0.0))
            .sum();
        Duration::from_secs_f64(s.clamp(0.0, 86_400.0))
    }
}

/// How long a server's rank has to say it listens.
const LISTEN_WITHIN: Duration = Duration::from_secs(15);
/// A bandwidth above this × the slower end's line rate is not a measurement.
const PLAUSIBLE_VS_LINE: f64 = 1.25;
/// … and, with no line rate known, above this (MB/s: 8 Tbit/s).
const PLAUSIBLE_MB_S: f64 = 1_000_000.0;

/// Where a job stands.
enum JobState {
    /// Its server's rank was asked to listen (then); it has until then.
    Listening { asked: Instant, until: Instant },
    /// Its client's rank was asked to measure (then); it has until then.
    Measuring { asked: Instant, until: Instant },
    /// Its results.
    Done(Vec<TestResult>),
}

impl JobState {
    fn until(&self) -> Option<Instant> {
        match self {
            JobState::Listening { until, .. } | JobState::Measuring { until, .. } => Some(*until),
            JobState::Done(_) => None,
        }
    }
}

/// A rank waited on this long when another is lost is named beside it (a rank that answers
/// heartbeats but not its work, not the one that died, is what held the run).
const SILENT_AT_LOSS: Duration = Duration::from_secs(5);

struct Coordinator<'a> {
    plan: &'a Plan,
    pod: &'a Pod,
    bus: &'a Bus,
    progress: &'a mut dyn RunProgress,
    next_job: u64,
    /// Each device's line rate, MB/s, where known.
    line_rates: BTreeMap<Dev, f64>,
    /// Ranks that heartbeat but did not do what they were asked, and what.
    silent_ranks: BTreeMap<u32, String>,
    /// The probe ports chosen with the fabric's routes (`pod.route`).
    routes: Routes,
}

/// A pair-direction's figures, for judging: (client, server, one result per test).
type Measured = (Dev, Dev, Vec<TestResult>);

/// A probe's result: its UDP source port (0: the QP's own), whether it was near-MTU, and
/// whether it carried.
#[derive(Debug, Clone, Copy)]
struct Probed {
    port: u16,
    large: bool,
    /// Carried, lost on the wire, or `None`: it could not be set up (its side channel, a
    /// TCP flow of its own ECMP hash, failed) and says nothing of its port's path.
    ok: Option<bool>,
    /// Its slowest round trip, µs, where it carried: one above half the ACK timeout waited
    /// for a packet sent again (lost on the way).
    slowest_us: Option<f64>,
}

impl Probed {
    /// It carried every packet the first time: no round trip waited for a retransmission
    /// (longer than half the ACK timeout `timeout_code`, 4.096 µs × 2^code).
    fn clean(&self, timeout_code: u8) -> Option<bool> {
        let half_timeout_us = 4.096 * f64::from(1u32 << timeout_code.min(31)) / 2.0;
        Some(self.ok? && self.slowest_us.is_none_or(|us| us < half_timeout_us))
    }
}

/// Each pair-direction's probes.
type Probes = BTreeMap<(Dev, Dev), Vec<Probed>>;

/// Each cross-ToR pair-direction's probe ports, where the fabric said which spines a flow
/// from each crosses (out, back).
type Routes = BTreeMap<(Dev, Dev), Vec<(u16, [usize; 2])>>;

/// A near-MTU probe's message: full-size frames at a 1024- or a 4096-byte RoCE MTU.
const NEAR_MTU: usize = 4096;

/// Source ports the route command is asked about per cross-ToR pair-direction, spread over
/// 0xC000-0xFFFF; the probes take those that cross every spine each way.
const ROUTE_CANDIDATES: usize = 16;

/// How many times the bisection round runs, at most, where its QPs cannot be spread over
/// the spines (no route command): a flow's QPs all hashed onto one ToR's spine link halve
/// a non-blocking pod's aggregate, and new QPs hash anew; a fabric short of capacity falls
/// short each time.
const BISECTION_ATTEMPTS: usize = 3;

/// A job per flow of `ends` (client, server), each running `spec` with its QPs' source ports
/// from `spread` (the flow's list, in order); without it, the ports the QPs hash to.
fn spread_jobs(ends: &[(Dev, Dev)], spec: &TestSpec, spread: Option<&[Vec<u16>]>) -> Vec<Job> {
    ends.iter()
        .enumerate()
        .map(|(i, &(client, server))| Job {
            client,
            server,
            tests: vec![TestSpec {
                udp_source_ports: spread.and_then(|s| s.get(i)).cloned().unwrap_or_default(),
                ..spec.clone()
            }],
        })
        .collect()
}

/// The ports a route command is asked about for each flow: [`ROUTE_CANDIDATES`], spread.
fn route_candidates() -> Vec<u16> {
    (0..ROUTE_CANDIDATES).map(|i| spread_port(i, ROUTE_CANDIDATES)).collect()
}

/// A port `i` of `n` spread over the RoCEv2 source ports.
fn spread_port(i: usize, n: usize) -> u16 {
    0xC000 + ((i * 0x4000 / n.max(1)) as u16) + 7
}

/// Each cross-ToR pair-direction's flows of the same phase that shared a ToR's spine links
/// with it (the flow, and the ToR): those an ECMP hash may have put on its link.
type Beside = BTreeMap<(Dev, Dev), Vec<((Dev, Dev), String)>>;

/// A note per pair-direction (what its check details add).
type Notes = BTreeMap<(Dev, Dev), String>;

/// What a pass over rounds measured.
struct Pass {
    measured: Vec<Measured>,
    ports: Probes,
    beside: Beside,
    /// The round each pair-direction was probed in.
    when: BTreeMap<(Dev, Dev), usize>,
}

/// A probe's check: `path/C->S/udp-source-port-P[/4096B]` (or `path/C->S/4096B` from the
/// QP's own port), carried or what went wrong.
fn probe_check(pod: &Pod, c: Dev, s: Dev, p: &Probed) -> Check {
    let Probed { port, large, ok, slowest_us } = *p;
    let clean = p.clean(pod.qp_timeout);
    let said = match (ok, clean) {
        (Some(true), Some(true)) => "carried".to_string(),
        (Some(true), _) => format!(
            "carried, a packet sent again (a round trip of {:.0} ms)",
            slowest_us.unwrap_or(0.0) / 1000.0
        ),
        (Some(false), _) => "lost".into(),
        (None, _) => "not set up (its side channel failed)".into(),
    };
    let ok = clean == Some(true);
    let path = format!("path/{}->{}", pod.name(c), pod.name(s));
    let (name, what) = match (port, large) {
        (0, _) => (format!("{path}/{NEAR_MTU}B"), "from the QP's own port".into()),
        (p, false) => (format!("{path}/udp-source-port-{p}"), format!("from UDP source port {p}")),
        (p, true) => {
            (format!("{path}/udp-source-port-{p}/{NEAR_MTU}B"), format!("from UDP source port {p}"))
        }
    };
    let size = if large { NEAR_MTU } else { 2 };
    let why = match ok {
        true => String::new(),
        false if said.starts_with("carried") => {
            format!("a packet {what} was lost and sent again: loss on this ECMP path")
        }
        false if said == "lost" && large => format!(
            "nothing came back {what} at full-size frames (an MTU below the path's, \
             or a port that drops large frames)"
        ),
        false if said == "lost" => {
            format!("nothing came back {what} (an ECMP path that drops)")
        }
        false => format!("the probe {what} could not be set up: {said}"),
    };
    Measurement::new(name)
        .words(if ok { "carried" } else { &said })
        .want(Threshold::Is("carried".into()))
        .detail(format!("{size}-byte SEND latency probe {what}"))
        .on_fail(why)
        .judge(None)
}

/// Of `cands` (a port and the spines a flow from it crosses, out and back), the ports that
/// cross every one of `spines` spines each way where they can, then others up to `want`.
fn cover(cands: &[(u16, [usize; 2])], spines: usize, want: usize) -> Vec<(u16, [usize; 2])> {
    let mut out: Vec<(u16, [usize; 2])> = Vec::new();
    let (mut out_seen, mut back_seen) = (vec![false; spines], vec![false; spines]);
    loop {
        let gain = |c: &(u16, [usize; 2])| {
            usize::from(!out_seen.get(c.1[0]).copied().unwrap_or(true))
                + usize::from(!back_seen.get(c.1[1]).copied().unwrap_or(true))
        };
        let best = cands
            .iter()
            .filter(|c| !out.contains(c))
            .max_by_key(|c| (gain(c), std::cmp::Reverse(c.0)));
        match best {
            Some(c) if gain(c) > 0 => {
                out_seen[c.1[0]] = true;
                back_seen[c.1[1]] = true;
                out.push(*c);
            }
            _ => break,
        }
    }
    for c in cands {
        if out.len() >= want {
            break;
        }
        if !out.contains(c) {
            out.push(*c);
        }
    }
    out
}

/// Runs a route command (`sh -c`, a plan's `pod.route`) on `flows` ([`topology::route`]:
/// a line `SRC DST SPORT` each on its standard input, a spine's index or `-` each back).
pub fn ask_routes(
    cmd: &str,
    flows: &[topology::route::Flow],
) -> Result<Vec<Option<usize>>, String> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("the route command `{cmd}` did not start: {e}"))?;
    let input = topology::route::request(flows);
    let mut stdin = child.stdin.take().ok_or("no standard input")?;
    // Written from a thread: the command may answer before it has read everything.
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().map_err(|e| format!("the route command: {e}"))?;
    let _ = writer.join();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "the route command `{cmd}` failed ({}): {}",
            out.status,
            err.lines().next().unwrap_or("")
        ));
    }
    topology::route::parse(&String::from_utf8_lossy(&out.stdout), flows.len())
        .map_err(|why| format!("the route command `{cmd}` {why}"))
}

impl Coordinator<'_> {
    /// Runs `jobs` at once: every server listens, then every client measures. The results,
    /// in the jobs' order. Rank 0 trusts no rank: an answer counts only from the rank the job
    /// was given to, for a job of this phase in the state it is in, with figures a link could
    /// carry; anything else is set aside (and said). A job waits for its server's rank to
    /// listen at most [`LISTEN_WITHIN`], and for its client's figures at most the time its
    /// tests hold ([`Job::budget`]): a rank that heartbeats but never answers is named, and
    /// holds the phase no longer than its own work would have.
    fn phase(&mut self, jobs: &[Job]) -> Result<Vec<Vec<TestResult>>, BootstrapError> {
        let base = self.next_job;
        self.next_job += jobs.len() as u64;
        let mut states: Vec<JobState> = Vec::with_capacity(jobs.len());
        // What servers said of their failed sessions: (job, test) → error.
        let mut server_failed: BTreeMap<(usize, usize), String> = BTreeMap::new();
        for (i, j) in jobs.iter().enumerate() {
            let device = self.pod.rail(j.server).device.clone();
            self.bus.send(
                j.server.host,
                Cmd::Serve { job: base + i as u64, device, tests: j.tests.clone() },
            )?;
            let asked = Instant::now();
            states.push(JobState::Listening { asked, until: asked + LISTEN_WITHIN });
        }
        loop {
            let next = states.iter().filter_map(JobState::until).min();
            let Some(next) = next else { break };
            let now = Instant::now();
            if now >= next {
                for (i, st) in states.iter_mut().enumerate() {
                    if st.until().is_some_and(|u| u <= now) {
                        *st = JobState::Done(self.silent(&jobs[i], st));
                    }
                }
                continue;
            }
            let got = match self.bus.recv(next - now) {
                Ok(got) => got,
                Err(BootstrapError::Lost(f)) => {
                    self.waiting_at_loss(jobs, &states, f.rank);
                    return Err(BootstrapError::Lost(f));
                }
                Err(e) => return Err(e),
            };
            let Some((rank, reply)) = got else { continue };
            let Some(reply) = reply else {
                self.progress
                    .note(&format!("rank {rank}: an answer that does not parse, set aside"));
                continue;
            };
            let job = match &reply {
                Reply::Listening { job, .. }
                | Reply::NotServing { job, .. }
                | Reply::Measured { job, .. }
                | Reply::ServerFailed { job, .. } => *job,
            };
            let Some(i) = job.checked_sub(base).map(|i| i as usize).filter(|i| *i < jobs.len())
            else {
                if matches!(reply, Reply::ServerFailed { .. }) && job < base {
                    // A server that failed after its client (which said why): its word
                    // came after the phase.
                    continue;
                }
                self.progress.note(&format!(
                    "rank {rank}: an answer for job {job}, not one of this phase's ({base}–{}), set aside",
                    base + jobs.len() as u64
                ));
                continue;
            };
            let j = &jobs[i];
            let (server, client) =
                (self.bus.rank_of[j.server.host], self.bus.rank_of[j.client.host]);
            match (reply, &states[i]) {
                (Reply::Listening { job, addr }, JobState::Listening { .. }) if rank == server => {
                    let device = self.pod.rail(j.client).device.clone();
                    self.bus.send(
                        j.client.host,
                        Cmd::Measure { job, device, peer: addr, tests: j.tests.clone() },
                    )?;
                    let asked = Instant::now();
                    states[i] = JobState::Measuring { asked, until: asked + j.budget() };
                }
                (Reply::NotServing { error, .. }, JobState::Listening { .. }) if rank == server => {
                    states[i] = JobState::Done(vec![
                        TestResult {
                            error: Some(format!("the server side: {error}")),
                            ..Default::default()
                        };
                        j.tests.len()
                    ]);
                }
                (Reply::Measured { results, .. }, JobState::Measuring { .. }) if rank == client => {
                    states[i] = JobState::Done(self.plausible(j, results));
                }
                (Reply::ServerFailed { test, error, .. }, _)
                    if rank == server && test < j.tests.len() =>
                {
                    server_failed.insert((i, test), error);
                }
                (r, _) => self.progress.note(&format!(
                    "rank {rank}: {} for job {job}, which is not its to answer now, set aside",
                    match r {
                        Reply::Listening { .. } => "listening",
                        Reply::NotServing { .. } => "not serving",
                        Reply::Measured { .. } => "figures",
                        Reply::ServerFailed { .. } => "a failed session",
                    }
                )),
            }
        }
        Ok(states
            .into_iter()
            .enumerate()
            .map(|(i, s)| match s {
                JobState::Done(mut r) => {
                    for (k, t) in r.iter_mut().enumerate() {
                        if let (Some(mine), Some(theirs)) = (&t.error, server_failed.get(&(i, k))) {
                            let host = &self.pod.hosts[jobs[i].server.host].name;
                            t.error = Some(format!("{mine}; the server side ({host}): {theirs}"));
                        }
                    }
                    r
                }
                _ => Vec::new(),
            })
            .collect())
    }

    /// Rank `lost` was lost: the ranks other jobs had waited on for [`SILENT_AT_LOSS`] or
    /// more — a client beyond its job's [`Job::worst_case`] too — are kept as silent (the
    /// report names them beside the lost one).
    fn waiting_at_loss(&mut self, jobs: &[Job], states: &[JobState], lost: u32) {
        for (j, st) in jobs.iter().zip(states) {
            // A client inside the time its tests take when every one stalls (a probe of a
            // dead path, a frozen peer) is at work, not silent.
            let (dev, what, asked, working) = match st {
                JobState::Listening { asked, .. } => {
                    (j.server, "had not listened", *asked, Duration::ZERO)
                }
                JobState::Measuring { asked, .. } => {
                    (j.client, "had not sent its figures", *asked, j.worst_case())
                }
                JobState::Done(_) => continue,
            };
            let rank = self.bus.rank_of[dev.host];
            if rank != lost && asked.elapsed() >= SILENT_AT_LOSS + working {
                self.silent_ranks.entry(rank).or_insert_with(|| {
                    format!(
                        "{what} {:.0} s after rank 0 asked, when rank {lost} was lost, though it \
                         answers heartbeats",
                        asked.elapsed().as_secs_f64()
                    )
                });
            }
        }
    }

    /// A job whose rank stayed silent past its deadline: every test failed, naming the rank
    /// and what it did not do.
    fn silent(&mut self, j: &Job, st: &JobState) -> Vec<TestResult> {
        let (dev, what, within) = match st {
            JobState::Listening { .. } => (j.server, "listen", LISTEN_WITHIN),
            _ => (j.client, "send its figures", j.budget()),
        };
        let rank = self.bus.rank_of[dev.host];
        self.silent_ranks.entry(rank).or_insert_with(|| {
            format!(
                "did not {what} within {:.0} s, though it answers heartbeats",
                within.as_secs_f64()
            )
        });
        let error = format!(
            "rank {rank} ({}) did not {what} within {:.0} s, though it still answers heartbeats \
             (a hung or misbehaving rank)",
            self.pod.hosts[dev.host].name,
            within.as_secs_f64()
        );
        vec![TestResult { error: Some(error), ..Default::default() }; j.tests.len()]
    }

    /// The client's results, one per test, each figure one a link could carry: above
    /// [`PLAUSIBLE_VS_LINE`] × the slower end's line rate (or [`PLAUSIBLE_MB_S`] where no rate
    /// is known), not a number, or a latency out of order, and the test fails as implausible.
    fn plausible(&self, j: &Job, mut results: Vec<TestResult>) -> Vec<TestResult> {
        results.resize_with(j.tests.len(), || TestResult {
            error: Some("the rank sent fewer results than tests".into()),
            ..Default::default()
        });
        results.truncate(j.tests.len());
        let line = [j.client, j.server]
            .iter()
            .filter_map(|d| self.line_rates.get(d).copied())
            .reduce(f64::min);
        let ceiling = line.map_or(PLAUSIBLE_MB_S, |l| l * PLAUSIBLE_VS_LINE);
        for r in &mut results {
            let bad = r.figures.iter().find_map(|f| match *f {
                Figure::Bw { mb_per_s, .. } if !(mb_per_s.is_finite() && mb_per_s >= 0.0) => {
                    Some(format!("a bandwidth of {mb_per_s} MB/s"))
                }
                Figure::Bw { mb_per_s, .. } if mb_per_s > ceiling => Some(format!(
                    "{mb_per_s:.0} MB/s, above {ceiling:.0} MB/s ({})",
                    if line.is_some() { "1.25 × the line rate" } else { "any host link" }
                )),
                Figure::Lat { min, median, p99, p99_9, .. } => {
                    let v = [min, median, p99, p99_9];
                    let ordered = v.windows(2).all(|w| w[0] <= w[1]);
                    (!(v.iter().all(|x| x.is_finite() && *x >= 0.0) && ordered))
                        .then(|| format!("latencies out of order or not numbers: {v:?} µs"))
                }
                Figure::Bw { .. } => None,
            });
            if let Some(why) = bad {
                *r = TestResult {
                    error: Some(format!("an implausible figure from the rank: {why}")),
                    ..Default::default()
                };
            }
        }
        results
    }

    /// A test with the pod's stall time, ACK timeout and depth.
    fn spec(
        &self,
        test: &str,
        sizes: Vec<usize>,
        iters: Option<u64>,
        seconds: Option<f64>,
    ) -> TestSpec {
        TestSpec {
            test: test.into(),
            sizes,
            iters,
            seconds,
            stall: self.pod.stall_seconds,
            udp_source_ports: Vec::new(),
            qp_timeout: self.pod.qp_timeout,
            tx_depth: self.pod.tx_depth,
            qps: 1,
        }
    }

    fn specs(&self) -> Vec<TestSpec> {
        self.plan
            .perf
            .iter()
            .map(|pc| self.spec(&pc.test, pc.sizes.clone(), pc.iters, pc.seconds))
            .collect()
    }

    /// The UDP source port a cross-ToR pair is measured from where the fabric's routes are
    /// known: one of its probe ports (which one turns with the pair, so that the pairs'
    /// measurements spread over the spines), so that a failed measurement — a link slow but
    /// not lossy fails no probe — is evidence on a known path.
    fn measure_port(&self, client: Dev, server: Dev) -> Option<u16> {
        let ports = self.routes.get(&(client, server)).filter(|r| !r.is_empty())?;
        let (a, b) = if client <= server { (client, server) } else { (server, client) };
        Some(ports[(a.host * 31 + b.host * 7 + a.rail) % ports.len()].0)
    }

    /// The probes of a pair, client to server: across ToRs a short SEND latency test per
    /// source port (those chosen with the fabric's routes, else spread), small and near-MTU;
    /// under one ToR a near-MTU one from the QP's own port.
    fn probes(&self, client: Dev, server: Dev) -> Vec<TestSpec> {
        let probe = |port: Option<u16>, size: usize| TestSpec {
            // A path that carries answers within a retransmission or two.
            stall: self.pod.stall_seconds.min(1.0),
            udp_source_ports: port.into_iter().collect(),
            ..self.spec("send-lat", vec![size], Some(50), None)
        };
        if self.pod.same_tor(client, server) {
            return if self.pod.source_ports > 0 { vec![probe(None, NEAR_MTU)] } else { vec![] };
        }
        let ports: Vec<u16> = match self.routes.get(&(client, server)) {
            Some(r) => r.iter().map(|(p, _)| *p).collect(),
            None => {
                let n = self.pod.source_ports;
                (0..n).map(|i| spread_port(i, n)).collect()
            }
        };
        // Small and near-MTU from each port in turn: a fault that starts mid-way meets both
        // alike, and does not pass for an MTU.
        ports.iter().flat_map(|p| [probe(Some(*p), 2), probe(Some(*p), NEAR_MTU)]).collect()
    }

    /// Asks the plan's route command which spines each cross-ToR pair's candidate ports
    /// cross, out and back, and keeps per pair-direction the ports that cross every spine
    /// each way (then others, up to `pod.source_ports`). A command that fails is a failed
    /// check, and the probes go from spread ports.
    fn choose_ports(&mut self, pairs: &[(Dev, Dev)], checks: &mut Vec<Measurement>) {
        let pod = self.pod;
        let Some(cmd) = pod.route.as_deref() else { return };
        let ports = route_candidates();
        let asks = topology::route::flows(pod, pairs, &ports);
        let started = Instant::now();
        let check = Measurement::new("pod/route")
            .detail(format!("{} flows asked of the route command `{cmd}`", asks.len()));
        let answers = match ask_routes(cmd, &asks) {
            Ok(a) => a,
            Err(why) => {
                checks.push(check.want(Threshold::Unset(why)));
                return;
            }
        };
        let spines =
            pod.spines.unwrap_or(0).max(answers.iter().flatten().map(|j| j + 1).max().unwrap_or(0));
        let routes = topology::route::routes(pod, pairs, &ports, &answers);
        for &(a, b) in pairs.iter().filter(|(a, b)| !pod.same_tor(*a, *b)) {
            let key = if a <= b { (a, b) } else { (b, a) };
            // Out and back as a flow from `a` sees them.
            let cands: Vec<(u16, [usize; 2])> = ports
                .iter()
                .filter_map(|p| {
                    let [f, r] = *routes.get(&(key, *p))?;
                    Some((*p, if key.0 == a { [f, r] } else { [r, f] }))
                })
                .collect();
            let chosen = cover(&cands, spines, pod.source_ports);
            self.routes.insert((b, a), chosen.iter().map(|(p, [f, r])| (*p, [*r, *f])).collect());
            self.routes.insert((a, b), chosen);
        }
        checks.push(check.took(started.elapsed()));
    }

    /// A short exchange before the figures count: the first packets to a new neighbour wait
    /// for ARP at every hop, and the kernel keeps only ~200 KB of them meanwhile (a RoCE NIC
    /// resolves the address when the QP connects; a soft device's kernel sockets do not).
    fn warmup(&self) -> TestSpec {
        self.spec("send-lat", vec![2], Some(20), None)
    }

    /// The rounds, both directions of each pair; the figures of each direction, and the
    /// flows each shared a ToR's spine links with.
    fn rounds(
        &mut self,
        rounds: &[Vec<(Dev, Dev)>],
        what: &str,
        rounds_out: &mut Vec<RoundReport>,
    ) -> Result<Pass, BootstrapError> {
        let specs = self.specs();
        let mut measured = Vec::new();
        let mut ports: Probes = BTreeMap::new();
        let mut when = BTreeMap::new();
        let mut beside: Beside = BTreeMap::new();
        let total = rounds.len();
        for (k, round) in rounds.iter().enumerate() {
            let started = Instant::now();
            let mut packets = 0u64;
            for dir in 0..2 {
                self.progress.starting(&format!(
                    "{what} round {} of {total}: {} pairs, {}",
                    k + 1,
                    round.len(),
                    if dir == 0 { "forward" } else { "back" }
                ));
                let ends: Vec<(Dev, Dev)> =
                    round.iter().map(|&(a, b)| if dir == 0 { (a, b) } else { (b, a) }).collect();
                for (i, near) in topology::beside(self.pod, &ends).into_iter().enumerate() {
                    if !near.is_empty() {
                        beside
                            .insert(ends[i], near.into_iter().map(|(j, t)| (ends[j], t)).collect());
                    }
                }
                // One test at a time across the round (a latency figure is not taken beside
                // another pair's bandwidth test), the warm-up first.
                // A pair-direction whose warm-up failed (a dead path) is not measured further:
                // each of its tests would wait out the stall timeout to fail the same way.
                let mut results: Vec<Vec<TestResult>> = vec![Vec::new(); ends.len()];
                let mut dead: Vec<Option<String>> = vec![None; ends.len()];
                for (k, spec) in
                    std::iter::once(self.warmup()).chain(specs.iter().cloned()).enumerate()
                {
                    let live: Vec<usize> = (0..ends.len()).filter(|i| dead[*i].is_none()).collect();
                    let jobs: Vec<Job> = live
                        .iter()
                        .map(|&i| Job {
                            client: ends[i].0,
                            server: ends[i].1,
                            tests: vec![TestSpec {
                                udp_source_ports: self
                                    .measure_port(ends[i].0, ends[i].1)
                                    .into_iter()
                                    .collect(),
                                ..spec.clone()
                            }],
                        })
                        .collect();
                    let res = self.phase(&jobs)?;
                    for (&i, r) in live.iter().zip(res) {
                        packets += r.iter().map(|t| t.sent_pkts).sum::<u64>();
                        if k == 0 {
                            // The warm-up's figures do not count.
                            dead[i] = r.iter().find_map(|t| t.error.clone());
                        } else {
                            results[i].extend(r);
                        }
                    }
                    if k > 0 {
                        for (i, why) in dead.iter().enumerate() {
                            if let Some(why) = why {
                                results[i].push(TestResult {
                                    error: Some(format!(
                                        "not measured: the warm-up exchange failed: {why}"
                                    )),
                                    ..Default::default()
                                });
                            }
                        }
                    }
                }
                // The probes (source ports, small and near-MTU), one way, in the first pass.
                if dir == 0 && what == "pairs" {
                    let jobs: Vec<Job> = ends
                        .iter()
                        .map(|&(client, server)| Job {
                            client,
                            server,
                            tests: self.probes(client, server),
                        })
                        .filter(|j| !j.tests.is_empty())
                        .collect();
                    if !jobs.is_empty() {
                        let res = self.phase(&jobs)?;
                        for (j, r) in jobs.iter().zip(res) {
                            packets += r.iter().map(|t| t.sent_pkts).sum::<u64>();
                            when.insert((j.client, j.server), k);
                            let list = ports.entry((j.client, j.server)).or_default();
                            for (spec, pr) in j.tests.iter().zip(r) {
                                list.push(Probed {
                                    port: spec.udp_source_ports.first().copied().unwrap_or(0),
                                    large: spec.sizes.first() == Some(&NEAR_MTU),
                                    ok: match (&pr.error, pr.on_wire) {
                                        (None, _) => Some(true),
                                        (Some(_), true) => Some(false),
                                        (Some(_), false) => None,
                                    },
                                    slowest_us: pr.figures.iter().find_map(|f| match f {
                                        Figure::Lat { p99_9, .. } => Some(*p99_9),
                                        Figure::Bw { .. } => None,
                                    }),
                                });
                            }
                        }
                    }
                }
                for ((client, server), r) in ends.into_iter().zip(results) {
                    measured.push((client, server, r));
                }
            }
            rounds_out.push(RoundReport {
                name: format!("{what} {}", k + 1),
                pairs: round
                    .iter()
                    .map(|(a, b)| format!("{} <-> {}", self.pod.name(*a), self.pod.name(*b)))
                    .collect(),
                packets,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        Ok(Pass { measured, ports, beside, when })
    }

    /// Source ports for `flows`' QPs, `qps` a flow, that spread them evenly over the spines
    /// ([`topology::route::spread`]), from the plan's route command; why not, without one
    /// or where it failed.
    fn spread(&self, flows: &[(Dev, Dev)], qps: usize) -> Result<Vec<Vec<u16>>, String> {
        let pod = self.pod;
        let cmd = pod.route.as_deref().ok_or("no route command")?;
        let ports = route_candidates();
        let answers = ask_routes(cmd, &topology::route::flows(pod, flows, &ports))?;
        let routes = topology::route::routes(pod, flows, &ports, &answers);
        Ok(topology::route::spread(pod, flows, qps, &ports, &routes))
    }

    /// The bisection round: half the hosts to the other half at once, the aggregate against
    /// the flows' line rate.
    fn bisection(
        &mut self,
        b: &Bisection,
        usable: &[bool],
        line_rate: &dyn Fn(Dev) -> Option<f64>,
        report: &mut Report,
        rounds: &mut Vec<RoundReport>,
    ) -> Result<(), BootstrapError> {
        let pod = self.pod;
        let flows: Vec<(Dev, Dev)> = topology::bisection(pod)
            .into_iter()
            .filter(|(a, c)| usable[a.host] && usable[c.host])
            .collect();
        // Each flow over several QPs, each its own ECMP hash: a few flows hashed onto one
        // spine link would judge the schedule, not the fabric. Where the fabric's routes are
        // known, the QPs are given ports that spread them over the spines; else a figure
        // short of the threshold is measured again, the QPs hashed anew.
        let spread = self.spread(&flows, b.qps);
        let spec =
            TestSpec { qps: b.qps, ..self.spec("write-bw", vec![b.size], None, Some(b.seconds)) };
        let jobs = spread_jobs(&flows, &spec, spread.as_deref().ok());
        let rate = bisection_capacity(pod, &flows, line_rate);
        let want = b.min_vs_line_rate * rate;
        let attempts = if spread.is_ok() { 1 } else { BISECTION_ATTEMPTS };
        let started = Instant::now();
        let mut tries: Vec<f64> = Vec::new();
        let mut packets = 0;
        let errors = loop {
            self.progress.starting(&match tries.last() {
                None => format!("bisection: {} flows at once", jobs.len()),
                Some(x) => format!("bisection again, its QPs hashed anew ({x:.1} MB/s before)"),
            });
            let res = self.phase(&jobs)?;
            packets += res.iter().flatten().map(|t| t.sent_pkts).sum::<u64>();
            tries.push(
                res.iter().flat_map(|r| r.iter().flat_map(|t| t.figures.iter())).map(bw_of).sum(),
            );
            let errors: Vec<String> =
                res.iter().flatten().filter_map(|t| t.error.clone()).collect();
            if tries[tries.len() - 1] >= want || rate <= 0.0 || tries.len() >= attempts {
                break errors;
            }
        };
        let total = tries.iter().copied().fold(0.0, f64::max);
        let how = match &spread {
            Ok(_) => "; its QPs spread over the spines by the route command".to_string(),
            Err(why) if tries.len() == 1 => format!("; its QPs on their own hashes ({why})"),
            Err(why) => format!(
                "; its QPs on their own hashes ({why}): {:.1} MB/s the first time, the best of \
                 {} counts",
                tries[0],
                tries.len()
            ),
        };
        let m = Measurement::new("pod/bisection/aggregate")
            .figure(total, "MB/s")
            .want(if rate > 0.0 {
                Threshold::AtLeast(want)
            } else {
                Threshold::Unset("no link rate (set pod.link_gbps for soft devices)".into())
            })
            .threshold_text(format!(
                ">= {want:.1} ({} x {} flows' capacity {rate:.1})",
                b.min_vs_line_rate,
                flows.len()
            ))
            .detail(format!(
                "{} flows from the first half of the hosts to the second at once{how}{}",
                flows.len(),
                if errors.is_empty() {
                    String::new()
                } else {
                    format!("; {} failed: {}", errors.len(), errors[0])
                }
            ))
            .took(started.elapsed());
        let ch = m.judge(None);
        self.progress.done(&ch);
        report.checks.push(ch);
        rounds.push(RoundReport {
            name: "bisection".into(),
            pairs: flows
                .iter()
                .map(|(a, c)| format!("{} -> {}", pod.name(*a), pod.name(*c)))
                .collect(),
            packets,
            seconds: started.elapsed().as_secs_f64(),
        });
        Ok(())
    }

    /// The incast rounds, one per ToR: each sender's share of the receiver's bandwidth and
    /// what it sent again.
    fn incast(
        &mut self,
        inc: &Incast,
        usable: &[bool],
        report: &mut Report,
        rounds: &mut Vec<RoundReport>,
    ) -> Result<(), BootstrapError> {
        let pod = self.pod;
        for (tor, rx, from) in topology::incasts(pod, inc.senders) {
            if !usable[rx.host] {
                continue;
            }
            let from: Vec<Dev> = from.into_iter().filter(|d| usable[d.host]).collect();
            // Each sender over several QPs (each its own ECMP hash), as many bytes in flight
            // as one QP would have: two senders under one ToR hashed onto one spine link
            // would judge the hash, not the fairness into the receiver.
            let spec = TestSpec {
                qps: inc.qps,
                tx_depth: self.pod.tx_depth.map(|d| (d / inc.qps).max(1)),
                ..self.spec("write-bw", vec![inc.size], None, Some(inc.seconds))
            };
            // Where the routes are known, the QPs spread over the spines.
            let ends: Vec<(Dev, Dev)> = from.iter().map(|&d| (d, rx)).collect();
            let spread = self.spread(&ends, inc.qps).ok();
            let jobs = spread_jobs(&ends, &spec, spread.as_deref());
            self.progress.starting(&format!(
                "incast into {} under {tor}: {} senders",
                pod.name(rx),
                jobs.len()
            ));
            let started = Instant::now();
            let res = self.phase(&jobs)?;
            let bws: Vec<f64> = res
                .iter()
                .map(|r| r.iter().flat_map(|t| t.figures.iter()).map(bw_of).sum())
                .collect();
            let total: f64 = bws.iter().sum();
            let caps: Vec<f64> =
                from.iter().map(|&d| incast_cap(pod, &self.line_rates, &from, d, rx)).collect();
            let fairs = fair_shares(total, &caps);
            // Across an oversubscribed fabric the senders' spine links, not the receiver's
            // link, limit the incast, and each sender's share follows how the ECMP hash
            // spread its QPs over them: the shares are shown, the aggregate is judged.
            let rx_rate = self.line_rates.get(&rx).copied();
            let uplinks = pod.spine_link_gbps.zip(pod.spines).map(|(g, n)| {
                let tors: BTreeSet<&str> = from
                    .iter()
                    .filter(|d| !pod.same_tor(**d, rx))
                    .map(|d| pod.rail(*d).tor.as_str())
                    .collect();
                mb_per_s(g) * (n * tors.len()) as f64
            });
            let spine_limited =
                uplinks.filter(|up| *up > 0.0).map(|up| rx_rate.map_or(up, |rx| up.min(rx)));
            if let Some(up) = spine_limited {
                let err = res.iter().flatten().find_map(|t| t.error.clone());
                let m = Measurement::new(format!("pod/incast/{tor}/aggregate"))
                    .figure(total, "MB/s")
                    .want(match err {
                        Some(e) => Threshold::Unset(e),
                        None => Threshold::AtLeast(0.5 * up),
                    })
                    .threshold_text(format!(
                        ">= {:.1} (0.5 x the receiver's link or the senders' spine links, \
                         the slower: {up:.1})",
                        0.5 * up
                    ))
                    .detail(format!(
                        "{} senders into {} across an oversubscribed fabric, whose spine links \
                         are slower than a host's",
                        from.len(),
                        pod.name(rx)
                    ))
                    .took(started.elapsed());
                let ch = m.judge(None);
                self.progress.done(&ch);
                report.checks.push(ch);
            }
            for (((d, bw), r), fair) in from.iter().zip(&bws).zip(&res).zip(fairs) {
                let base = format!("pod/incast/{tor}/{}->{}", pod.name(*d), pod.name(rx));
                let share = if fair > 0.0 { bw / fair } else { 0.0 };
                let err = r.iter().find_map(|t| t.error.clone());
                let judged = spine_limited.is_none();
                let m = Measurement::new(format!("{base}/share"))
                    .figure(share, "x fair")
                    .want(match &err {
                        Some(e) => Threshold::Unset(e.clone()),
                        None if judged => Threshold::AtLeast(1.0 - inc.max_unfairness),
                        None => Threshold::None,
                    })
                    .threshold_text(if judged {
                        format!(
                            "{:.2}-{:.2} x fair ({fair:.1} MB/s)",
                            1.0 - inc.max_unfairness,
                            1.0 + inc.max_unfairness
                        )
                    } else {
                        "not judged: the spine links limit this incast (the aggregate is)".into()
                    })
                    .detail(format!(
                        "{bw:.1} MB/s of {total:.1} MB/s into {} from {} senders",
                        pod.name(rx),
                        bws.len()
                    ))
                    .took(started.elapsed());
                let mut ch = m.judge(None);
                if judged && share > 1.0 + inc.max_unfairness {
                    ch.status = Status::Fail;
                }
                self.progress.done(&ch);
                report.checks.push(ch);
                let (sent, re) =
                    r.iter().fold((0, 0), |a, t| (a.0 + t.sent_pkts, a.1 + t.retransmitted_pkts));
                let ratio = if sent > 0 { re as f64 / sent as f64 } else { 0.0 };
                let ch = Measurement::new(format!("{base}/retransmitted"))
                    .figure(ratio, "per packet sent")
                    .want(Threshold::AtMost(inc.max_retransmitted))
                    .detail(format!(
                        "{re} of {sent} packets sent again (no congestion control reacts to CNPs yet: incast measures loss recovery)"
                    ))
                    .judge(None);
                self.progress.done(&ch);
                report.checks.push(ch);
            }
            rounds.push(RoundReport {
                name: format!("incast {tor}"),
                pairs: from
                    .iter()
                    .map(|d| format!("{} -> {}", pod.name(*d), pod.name(rx)))
                    .collect(),
                packets: res.iter().flatten().map(|t| t.sent_pkts).sum(),
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        Ok(())
    }

    /// Judges the pairs measured, measuring again apart (no other pair on its ToRs' spine
    /// links) each that failed; the checks, and a note per pair-direction measured again.
    /// `contention` gains the pair-directions that failed beside others and passed apart.
    fn judge_apart(
        &mut self,
        pairs: &[(Dev, Dev)],
        measured: &mut [Measured],
        beside: &Beside,
        line_rate: &dyn Fn(Dev) -> Option<f64>,
        rounds: &mut Vec<RoundReport>,
        contention: &mut Vec<Contention>,
    ) -> Result<(Vec<Judged>, Notes), BootstrapError> {
        let (plan, pod) = (self.plan, self.pod);
        let collided = |c: Dev, s: Dev| beside.contains_key(&(c, s));
        // Judge. A pod's medians are of the pair-directions measured alone on their links
        // (no other flow of their phase on a ToR's spine links, or measured again apart),
        // where a kind has three or more (else of every one): an ECMP collision halves a
        // figure on a non-blocking fabric, and collisions would pull the median down.
        //
        // A figure outside its threshold is measured again before it fails, in rounds where
        // no two pairs share a ToR's spine links (`topology::apart`): a pair that failed
        // beside others of its round may have met them on one link (contention, which the
        // schedule made), and one slow run on a busy host is noise — two in a row, alone on
        // its links, are the pair. A test that could not finish (no completion within the
        // stall time) is no noise. Without retries (`retries = 0`) only the pairs that had
        // company on a link are measured again. Once the pairs measured apart have moved a
        // median, the pairs that now fail are measured apart too, until none newly fails
        // (each pair is measured apart once: a pass per median move at most).
        let mut apart_done: BTreeSet<(Dev, Dev)> = BTreeSet::new();
        // The first run's failed checks of each pair-direction measured apart.
        let mut first_failed: BTreeMap<(Dev, Dev), Vec<Check>> = BTreeMap::new();
        let mut again_note: BTreeMap<(Dev, Dev), String> = BTreeMap::new();
        let mut medians = judged_medians(plan, pod, measured, &collided);
        for _ in 0..=pairs.len() {
            let judged = judge_with(plan, pod, measured, line_rate, &medians);
            let failed_pairs: Vec<(Dev, Dev)> = pairs
                .iter()
                .copied()
                .filter(|(a, b)| {
                    let mine = |c: Dev, s: Dev| (c, s) == (*a, *b) || (c, s) == (*b, *a);
                    let missed = judged.iter().any(|(c, s, ms)| {
                        mine(*c, *s)
                            && ms.iter().any(|m| m.status == Status::Fail && m.measured.is_some())
                    });
                    let broke = measured
                        .iter()
                        .any(|(c, s, r)| mine(*c, *s) && r.iter().any(|t| t.error.is_some()));
                    let company = collided(*a, *b) || collided(*b, *a);
                    missed
                        && !broke
                        && !apart_done.contains(&(*a, *b))
                        && (plan.retries > 0 || company)
                })
                .collect();
            if failed_pairs.is_empty() {
                break;
            }
            for (c, s, cs) in &judged {
                if failed_pairs.iter().any(|p| *p == (*c, *s) || *p == (*s, *c)) {
                    let f = cs.iter().filter(|m| m.status == Status::Fail).cloned().collect();
                    first_failed.insert((*c, *s), f);
                }
            }
            let again = self.rounds(&topology::apart(pod, &failed_pairs), "apart", rounds)?;
            for (c, s, r) in again.measured {
                apart_done.insert((c, s));
                let Some(m) = measured.iter_mut().find(|m| (m.0, m.1) == (c, s)) else {
                    continue;
                };
                let first = first_failed.get(&(c, s)).filter(|f| !f.is_empty()).map(with_figures);
                let note = match (beside.get(&(c, s)), first) {
                    (Some(near), Some(f)) => format!(
                        "the first run ({}) shared {} with {}; measured again with no other \
                         pair on its ToRs' spine links",
                        f.join(", "),
                        spine_links_of(near),
                        flows_of(pod, near)
                    ),
                    (_, Some(f)) => format!(
                        "measured twice (the first run failed: {}), the second with no other \
                         pair on its ToRs' spine links",
                        f.join(", ")
                    ),
                    _ => "measured twice (the other direction failed)".into(),
                };
                again_note.insert((c, s), note);
                m.2 = r;
            }
            medians = judged_medians(plan, pod, measured, &|c, s| {
                collided(c, s) && !apart_done.contains(&(c, s))
            });
        }
        let judged = judge_with(plan, pod, measured, line_rate, &medians);
        // Contention: pair-directions that failed beside others and passed apart.
        for (c, s, cs) in &judged {
            if let (Some(near), Some(f)) = (beside.get(&(*c, *s)), first_failed.get(&(*c, *s)))
                && !f.is_empty()
                && cs.iter().all(|m| m.status != Status::Fail)
            {
                contention.push(Contention {
                    flow: format!("{}->{}", pod.name(*c), pod.name(*s)),
                    beside: near
                        .iter()
                        .map(|((a, b), _)| format!("{}->{}", pod.name(*a), pod.name(*b)))
                        .collect(),
                    links: spine_links_of(near),
                    first: with_figures(f),
                    apart: with_figures(cs.iter().filter(|m| f.iter().any(|x| x.name == m.name))),
                });
            }
        }
        Ok((judged, again_note))
    }

    fn run(&mut self, facts: &[HostFacts], _sys: &Path) -> Result<Report, BootstrapError> {
        let t0 = Instant::now();
        let plan = self.plan;
        let pod = self.pod;
        let mut report = Report::new(&plan.name);
        let mut checks: Vec<Measurement> = Vec::new();
        // Every device of every host opened.
        let mut usable = vec![true; pod.hosts.len()];
        for (h, f) in facts.iter().enumerate() {
            let host = &pod.hosts[h];
            for d in &f.devices {
                let name = format!("device/{}.r{}/present", host.name, d.rail);
                checks.push(match &d.error {
                    None => Measurement::new(name)
                        .detail(format!("{} opened ({})", d.device, d.provider)),
                    Some(e) => {
                        usable[h] = false;
                        Measurement::new(name).want(Threshold::Unset(e.clone()))
                    }
                });
            }
        }
        let line_rate = |d: Dev| -> Option<f64> {
            let f = facts[d.host].devices.get(d.rail)?;
            f.link_gbps.or(pod.link_gbps).map(mb_per_s)
        };
        self.line_rates =
            pod.devices().into_iter().filter_map(|d| Some((d, line_rate(d)?))).collect();
        let pairs: Vec<(Dev, Dev)> =
            pod.pairs().into_iter().filter(|(a, b)| usable[a.host] && usable[b.host]).collect();
        let mut rounds = Vec::new();
        self.choose_ports(&pairs, &mut checks);
        let Pass { mut measured, ports, beside, when } =
            self.rounds(&topology::rounds(pod, &pairs), "pairs", &mut rounds)?;
        let (judged, again_note) = self.judge_apart(
            &pairs,
            &mut measured,
            &beside,
            &line_rate,
            &mut rounds,
            &mut report.contention,
        )?;
        let mut outcomes: Vec<PairOutcome> = Vec::new();
        let mut large: Vec<PairOutcome> = Vec::new();
        for &(a, b) in &pairs {
            let mine: Vec<&(Dev, Dev, Vec<Check>)> = judged
                .iter()
                .filter(|(c, s, _)| (*c, *s) == (a, b) || (*c, *s) == (b, a))
                .collect();
            let failed_checks: Vec<String> = mine
                .iter()
                .flat_map(|(_, _, cs)| {
                    cs.iter().filter(|c| c.status == Status::Fail).map(|c| c.name.clone())
                })
                .collect();
            let probed: Vec<Probed> =
                [(a, b), (b, a)].iter().filter_map(|k| ports.get(k)).flatten().copied().collect();
            let of = |large: bool| -> Vec<(u16, bool)> {
                probed
                    .iter()
                    .filter(|p| p.large == large)
                    .filter_map(|p| Some((p.port, p.clean(pod.qp_timeout)?)))
                    .collect()
            };
            let status = if failed_checks.is_empty()
                && probed.iter().all(|p| p.clean(pod.qp_timeout) == Some(true))
            {
                Status::Pass
            } else {
                Status::Fail
            };
            report.pairs.push(PairResult { a: pod.name(a), b: pod.name(b), status });
            // The spines of each port, as the pair's client saw them (a probe crosses both).
            let routes: BTreeMap<u16, [usize; 2]> = [(a, b), (b, a)]
                .iter()
                .filter_map(|k| self.routes.get(k))
                .flatten()
                .copied()
                .collect();
            let round = when.get(&(a, b)).or_else(|| when.get(&(b, a))).copied().unwrap_or(0);
            let small = of(false);
            // Each direction's measurements, from their known port: carried, or failed.
            let mut measured = Vec::new();
            for (c, s) in [(a, b), (b, a)] {
                let Some(port) = self.measure_port(c, s) else { continue };
                let failed = mine.iter().any(|(x, y, cs)| {
                    (*x, *y) == (c, s) && cs.iter().any(|m| m.status == Status::Fail)
                });
                measured.push((port, !failed));
            }
            if small.iter().all(|p| p.1) {
                large.push(PairOutcome {
                    pair: (a, b),
                    failed: false,
                    failed_checks: vec![],
                    ports: of(true),
                    routes: routes.clone(),
                    measured: vec![],
                    round,
                });
            }
            outcomes.push(PairOutcome {
                pair: (a, b),
                failed: !failed_checks.is_empty(),
                failed_checks,
                ports: small,
                routes,
                measured,
                round,
            });
        }
        for m in checks {
            report.checks.push(m.judge(None));
        }
        for (c, s, cs) in judged {
            for mut ch in cs {
                if let Some(n) = again_note.get(&(c, s)) {
                    ch.detail = format!("{}; {n}", ch.detail);
                }
                self.progress.done(&ch);
                report.checks.push(ch);
            }
        }
        for ((c, s), list) in &ports {
            for p in list {
                let ch = probe_check(pod, *c, *s, p);
                self.progress.done(&ch);
                report.checks.push(ch);
            }
        }
        // Figures for the charts and the matrices.
        let specs = self.specs();
        for (c, s, results) in &measured {
            let pair = format!("{}->{}", pod.name(*c), pod.name(*s));
            for (spec, r) in specs.iter().zip(results) {
                for f in &r.figures {
                    match f {
                        Figure::Bw { size, mb_per_s } => report.bandwidth.push(BwPoint {
                            pair: pair.clone(),
                            test: spec.test.clone(),
                            size: *size,
                            mb_per_s: *mb_per_s,
                        }),
                        Figure::Lat { size, min, median, p99, p99_9 } => {
                            report.latency.push(LatPoint {
                                pair: pair.clone(),
                                test: spec.test.clone(),
                                size: *size,
                                min: *min,
                                median: *median,
                                p99: *p99,
                                p99_9: *p99_9,
                            })
                        }
                    }
                }
            }
        }
        report.matrices = matrices(pod, &measured, &specs);
        // Bisection and incast.
        if let Some(b) = &pod.bisection {
            self.bisection(b, &usable, &line_rate, &mut report, &mut rounds)?;
        }
        if let Some(inc) = &pod.incast {
            self.incast(inc, &usable, &mut report, &mut rounds)?;
        }
        report.suspects = topology::attribute_mtu(pod, &outcomes, &large);
        report.rounds = rounds;
        report.hosts = facts.to_vec();
        let all = pod.all_pairs();
        let covered: std::collections::BTreeSet<Dev> =
            pairs.iter().flat_map(|(a, b)| [*a, *b]).collect();
        report.pod = Some(PodSummary {
            pair_set: pod.pairs.as_str().into(),
            pairs: pairs.len(),
            all_pairs: all,
            coverage: if all == 0 { 0.0 } else { pairs.len() as f64 / all as f64 },
            devices_covered: covered.len(),
            devices: pod.devices().len(),
        });
        report.devices = pod.devices().into_iter().map(|d| pod.name(d)).collect();
        report.seconds = t0.elapsed().as_secs_f64();
        Ok(report)
    }
}

/// What an incast sender could send at most, MB/s, were the receiver's link not the limit:
/// its line rate (and the receiver's), and across an oversubscribed fabric its share of its
/// ToR's uplinks with the other senders under that ToR (its QPs spread over the spines).
/// Unknown rates: no cap.
fn incast_cap(pod: &Pod, line: &BTreeMap<Dev, f64>, senders: &[Dev], d: Dev, rx: Dev) -> f64 {
    let rate = match (line.get(&d), line.get(&rx)) {
        (Some(a), Some(b)) => a.min(*b),
        _ => f64::INFINITY,
    };
    match pod.spine_link_gbps.zip(pod.spines) {
        Some((g, n)) if !pod.same_tor(d, rx) => {
            let under =
                senders.iter().filter(|s| pod.rail(**s).tor == pod.rail(d).tor).count().max(1);
            rate.min(mb_per_s(g) * n as f64 / under as f64)
        }
        _ => rate,
    }
}

/// Each sender's fair share of `total`, in proportion to what it could send (`caps`;
/// equal where they are all alike or unknown): with no congestion control reacting (podnet
/// has no DCQCN yet), a queue drains its senders in proportion to what each offers.
fn fair_shares(total: f64, caps: &[f64]) -> Vec<f64> {
    let finite = caps.iter().all(|c| c.is_finite() && *c > 0.0);
    let sum: f64 = caps.iter().sum();
    if !finite || sum <= 0.0 {
        return vec![total / caps.len().max(1) as f64; caps.len()];
    }
    caps.iter().map(|c| total * c / sum).collect()
}

/// What `flows` could carry at once, MB/s: each flow's line rate, and across the spines no
/// more than a ToR's uplinks carry out of it (or into it) where the fabric is oversubscribed
/// (`pod.spine_link_gbps` × `pod.spines`).
fn bisection_capacity(pod: &Pod, flows: &[(Dev, Dev)], line: &dyn Fn(Dev) -> Option<f64>) -> f64 {
    let rate = |(a, b): (Dev, Dev)| line(a).zip(line(b)).map_or(0.0, |(x, y)| x.min(y));
    let uplinks = pod.spine_link_gbps.zip(pod.spines).map(|(g, n)| mb_per_s(g) * n as f64);
    let Some(up) = uplinks else { return flows.iter().map(|f| rate(*f)).sum() };
    // Per ToR, what its flows across the spines leave with, and arrive with.
    let mut out: BTreeMap<&str, f64> = BTreeMap::new();
    let mut inn: BTreeMap<&str, f64> = BTreeMap::new();
    let mut local = 0.0;
    for &(a, b) in flows {
        if pod.same_tor(a, b) {
            local += rate((a, b));
        } else {
            *out.entry(pod.rail(a).tor.as_str()).or_default() += rate((a, b));
            *inn.entry(pod.rail(b).tor.as_str()).or_default() += rate((a, b));
        }
    }
    let capped = |m: &BTreeMap<&str, f64>| m.values().map(|v| v.min(up)).sum::<f64>();
    local + capped(&out).min(capped(&inn))
}

/// A link rate in Gb/s as MB/s (MiB/s, perf's unit).
fn mb_per_s(gbps: f64) -> f64 {
    gbps * 1e9 / 8.0 / 1_048_576.0
}

fn bw_of(f: &Figure) -> f64 {
    match f {
        Figure::Bw { mb_per_s, .. } => *mb_per_s,
        Figure::Lat { .. } => 0.0,
    }
}

/// The group a pair-direction's figure is compared within: test, size, figure, and whether
/// the pair shares a ToR (one hop) or crosses the spines.
fn group(pod: &Pod, c: Dev, s: Dev, test: &str, size: u64, figure: &str) -> String {
    let kind = if pod.same_tor(c, s) { "same-tor" } else { "cross-tor" };
    format!("{test}/{size}/{figure}/{kind}")
}

/// The pod's median of each group: a bandwidth's, of the pair-directions that had no company
/// on a ToR's spine links (`collided` false), where a group has three or more of them, else
/// of all; a latency's, of all.
fn judged_medians(
    plan: &Plan,
    pod: &Pod,
    measured: &[Measured],
    collided: &dyn Fn(Dev, Dev) -> bool,
) -> BTreeMap<String, f64> {
    // (every figure, the figures of flows alone on their links) per group.
    let mut all: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (c, s, results) in measured {
        let alone = !collided(*c, *s);
        for (pc, r) in plan.perf.iter().zip(results) {
            for f in &r.figures {
                // A latency test's few bytes share a link with anything.
                let (key, v, alone) = match f {
                    Figure::Bw { size, mb_per_s } => {
                        (group(pod, *c, *s, &pc.test, *size, "bw"), *mb_per_s, alone)
                    }
                    Figure::Lat { size, median, .. } => {
                        (group(pod, *c, *s, &pc.test, *size, "median"), *median, true)
                    }
                };
                let e = all.entry(key).or_default();
                e.0.push(v);
                if alone {
                    e.1.push(v);
                }
            }
        }
    }
    all.into_iter()
        .filter_map(|(k, (mut every, mut alone))| {
            let m = if alone.len() >= 3 { median(&mut alone) } else { median(&mut every) };
            Some((k, m?))
        })
        .collect()
}

/// A check's name without its `perf/` and pair: `write-bw/65536B/bandwidth`.
fn short_check(name: &str) -> String {
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        ["perf", test, size, _pair, what] => format!("{test}/{size}/{what}"),
        _ => name.to_string(),
    }
}

/// Checks with their figures, short: `write-bw/65536B/bandwidth 6.0 MB/s, want >= …`.
fn with_figures<'a>(checks: impl IntoIterator<Item = &'a Check>) -> Vec<String> {
    checks.into_iter().map(|m| format!("{} {}", short_check(&m.name), m.figure())).collect()
}

/// The ToRs' spine links some flows shared: `t0's spine links`, `the spine links of t0
/// and t2`.
fn spine_links_of(near: &[((Dev, Dev), String)]) -> String {
    let tors: BTreeSet<&str> = near.iter().map(|(_, t)| t.as_str()).collect();
    let tors: Vec<&str> = tors.into_iter().collect();
    match tors.as_slice() {
        [one] => format!("{one}'s spine links"),
        many => format!("the spine links of {}", many.join(" and ")),
    }
}

/// The flows by name: `h1.r0->h4.r0, h3.r0->h5.r0`.
fn flows_of(pod: &Pod, near: &[((Dev, Dev), String)]) -> String {
    near.iter()
        .map(|((a, b), _)| format!("{}->{}", pod.name(*a), pod.name(*b)))
        .collect::<Vec<_>>()
        .join(", ")
}

type Judged = (Dev, Dev, Vec<Check>);

/// A pair's line rate, MB/s: the slower of its devices', and across the spines of an
/// oversubscribed fabric (`pod.spine_link_gbps`) no more than one spine link's.
fn path_rate(pod: &Pod, line: &dyn Fn(Dev) -> Option<f64>, c: Dev, s: Dev) -> Option<f64> {
    let rate = line(c).zip(line(s)).map(|(a, b)| a.min(b))?;
    Some(match pod.spine_link_gbps {
        Some(g) if !pod.same_tor(c, s) => rate.min(mb_per_s(g)),
        _ => rate,
    })
}

/// What a pair's figures are judged against: the pod, each device's line rate, the pod's
/// medians.
struct Yardsticks<'a> {
    pod: &'a Pod,
    line: &'a dyn Fn(Dev) -> Option<f64>,
    medians: &'a BTreeMap<String, f64>,
}

fn judge_with(
    plan: &Plan,
    pod: &Pod,
    measured: &[Measured],
    line: &dyn Fn(Dev) -> Option<f64>,
    medians: &BTreeMap<String, f64>,
) -> Vec<Judged> {
    let ys = Yardsticks { pod, line, medians };
    measured
        .iter()
        .map(|(c, s, results)| {
            let pair = format!("{}->{}", pod.name(*c), pod.name(*s));
            let mut out = Vec::new();
            for (pc, r) in plan.perf.iter().zip(results) {
                if let Some(e) = &r.error {
                    out.push(
                        Measurement::new(format!("perf/{}/{pair}", pc.test))
                            .want(Threshold::Unset(e.clone()))
                            .judge(None),
                    );
                    continue;
                }
                for f in &r.figures {
                    let mut cs = judge_figure(&ys, pc, (*c, *s), &pair, f);
                    if r.retransmitted_pkts > 0 {
                        for ch in &mut cs {
                            ch.detail = format!(
                                "{}; {} of {} packets sent again (device counters: {})",
                                ch.detail, r.retransmitted_pkts, r.sent_pkts, r.counters
                            );
                        }
                    }
                    out.extend(cs);
                }
            }
            (*c, *s, out)
        })
        .collect()
}

/// The checks of one figure: every threshold of the plan's entry that applies, the
/// tightest bound deciding, each reported.
fn judge_figure(
    ys: &Yardsticks<'_>,
    pc: &PerfCheck,
    (c, s): (Dev, Dev),
    pair: &str,
    f: &Figure,
) -> Vec<Check> {
    let Yardsticks { pod, line, medians } = *ys;
    let kind = if pod.same_tor(c, s) { "same ToR" } else { "across the spines" };
    let detail = format!("{} {pair} ({kind})", pc.test);
    let mut out = Vec::new();
    // (bound, text) candidates; the tightest one decides.
    // Held to the tightest of the candidate bounds (bound, how it reads), if any.
    let held = |m: Measurement, cands: Vec<(f64, String)>, higher: bool| {
        let tightest = cands
            .into_iter()
            .reduce(|a, b| if (higher && b.0 > a.0) || (!higher && b.0 < a.0) { b } else { a });
        match tightest {
            Some((b, t)) => m
                .want(if higher { Threshold::AtLeast(b) } else { Threshold::AtMost(b) })
                .threshold_text(t)
                .judge(None),
            None => m.judge(None),
        }
    };
    match f {
        Figure::Bw { size, mb_per_s } => {
            let mut cands = Vec::new();
            if let Some(a) = pc.min_bw_mb_per_s {
                cands.push((a, format!(">= {a}")));
            }
            if let (Some(x), Some(rate)) = (pc.min_bw_vs_line_rate, path_rate(pod, line, c, s)) {
                cands.push((x * rate, format!(">= {:.1} ({x} x line rate {rate:.1})", x * rate)));
            }
            if let (Some(x), Some(m)) =
                (pc.min_bw_vs_pod_median, medians.get(&group(pod, c, s, &pc.test, *size, "bw")))
            {
                cands.push((x * m, format!(">= {:.1} ({x} x pod median {m:.1})", x * m)));
            }
            let name = format!("perf/{}/{size}B/{pair}/bandwidth", pc.test);
            let m = Measurement::new(name).figure(*mb_per_s, "MB/s").detail(detail.clone());
            out.push(held(m, cands, true));
        }
        Figure::Lat { size, median: med, p99_9, .. } => {
            let mut cands = Vec::new();
            if let Some(a) = pc.max_median_us {
                cands.push((a, format!("<= {a}")));
            }
            if let (Some(x), Some(m)) = (
                pc.max_median_us_vs_pod_median,
                medians.get(&group(pod, c, s, &pc.test, *size, "median")),
            ) {
                cands.push((x * m, format!("<= {:.1} ({x} x pod median {m:.1})", x * m)));
            }
            let name = format!("perf/{}/{size}B/{pair}/median", pc.test);
            let m = Measurement::new(name).figure(*med, "us").detail(detail.clone());
            out.push(held(m, cands, false));
            let mut cands = Vec::new();
            if let Some(a) = pc.max_p99_9_us {
                cands.push((a, format!("<= {a}")));
            }
            if let Some(x) = pc.max_p99_9_us_vs_median {
                cands.push((x * med, format!("<= {:.1} ({x} x its median {med:.1})", x * med)));
            }
            let name = format!("perf/{}/{size}B/{pair}/p99.9", pc.test);
            let m = Measurement::new(name).figure(*p99_9, "us").detail(detail);
            out.push(held(m, cands, false));
        }
    }
    out
}

/// A matrix per bandwidth test and size (and per latency test and size, the median):
/// sender rows, receiver columns.
fn matrices(pod: &Pod, measured: &[Measured], specs: &[TestSpec]) -> Vec<Matrix> {
    let devs = pod.devices();
    let names: Vec<String> = devs.iter().map(|d| pod.name(*d)).collect();
    let idx = |d: Dev| devs.iter().position(|x| *x == d);
    let mut out: BTreeMap<(usize, u64, bool), Matrix> = BTreeMap::new();
    for (c, s, results) in measured {
        let (Some(i), Some(j)) = (idx(*c), idx(*s)) else { continue };
        for (k, (spec, r)) in specs.iter().zip(results).enumerate() {
            for f in &r.figures {
                let (size, v, bw) = match f {
                    Figure::Bw { size, mb_per_s } => (*size, *mb_per_s, true),
                    Figure::Lat { size, median, .. } => (*size, *median, false),
                };
                let m = out.entry((k, size, bw)).or_insert_with(|| Matrix {
                    title: format!(
                        "{} {} B: {}",
                        spec.test,
                        size,
                        if bw {
                            "bandwidth, MB/s (row sends)"
                        } else {
                            "median latency, µs (row asks)"
                        }
                    ),
                    unit: if bw { "MB/s".into() } else { "us".into() },
                    higher_is_better: bw,
                    devices: names.clone(),
                    cells: vec![vec![None; names.len()]; names.len()],
                    median: None,
                    ratios: Vec::new(),
                });
                m.cells[i][j] = Some(v);
            }
        }
    }
    out.into_values()
        .map(|mut m| {
            let mut all: Vec<f64> = m.cells.iter().flatten().flatten().copied().collect();
            m.median = median(&mut all);
            // The reference of a cell: the median of its kind (one hop, or across spines).
            let kind = |i: usize, j: usize| pod.same_tor(devs[i], devs[j]);
            let of_kind = |same: bool| {
                let mut v: Vec<f64> = (0..devs.len())
                    .flat_map(|i| (0..devs.len()).map(move |j| (i, j)))
                    .filter(|(i, j)| kind(*i, *j) == same)
                    .filter_map(|(i, j)| m.cells[i][j])
                    .collect();
                median(&mut v)
            };
            let (near, far) = (of_kind(true), of_kind(false));
            m.ratios = (0..devs.len())
                .map(|i| {
                    (0..devs.len())
                        .map(|j| {
                            let v = m.cells[i][j]?;
                            let r = if kind(i, j) { near } else { far }?;
                            Some(if m.higher_is_better { v / r } else { r / v.max(1e-9) })
                        })
                        .collect()
                })
                .collect();
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener whose accept queue is full: the kernel drops every new SYN, as a dead
    /// ECMP path does (and the held connection that fills it).
    fn full_listener() -> (socket2::Socket, SocketAddr, TcpStream) {
        use socket2::{Domain, Socket, Type};
        let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        l.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
        l.listen(0).unwrap();
        let addr = l.local_addr().unwrap().as_socket().unwrap();
        // Backlog 0 holds one established connection; the next SYNs are dropped.
        let held = TcpStream::connect(addr).unwrap();
        (l, addr, held)
    }

    #[test]
    fn a_connection_its_client_gave_up_on_is_not_served() {
        use std::io::Write;
        use std::net::Ipv4Addr;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        // The attempt that timed out as its handshake completed: closed before a byte.
        drop(TcpStream::connect(addr).unwrap());
        let mut real = TcpStream::connect(addr).unwrap();
        real.write_all(b"v").unwrap();
        let until = Instant::now() + Duration::from_secs(5);
        let (_, peer) = accept_client(&listener, until).expect("the client that spoke");
        assert_eq!(peer, real.local_addr().unwrap(), "served the abandoned connection");
        // None comes: given up at the deadline.
        let t0 = Instant::now();
        assert!(accept_client(&listener, t0 + Duration::from_millis(200)).is_none());
        assert!(t0.elapsed() >= Duration::from_millis(200));
    }

    /// A short `send-lat` with a stall limit of `stall` seconds.
    fn send_lat(stall: f64) -> TestSpec {
        TestSpec {
            test: "send-lat".into(),
            sizes: vec![2],
            iters: Some(50),
            seconds: None,
            stall,
            udp_source_ports: Vec::new(),
            qp_timeout: 14,
            tx_depth: None,
            qps: 1,
        }
    }

    #[test]
    fn a_server_whose_session_fails_says_why() {
        use std::io::{Read, Write};
        let ctx = providers::open("soft:127.0.0.77", &ContextOptions::default()).unwrap();
        let listener = TcpListener::bind((ctx.ip(), 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let t = send_lat(2.0);
        let (tx, rx) = mpsc::channel();
        let server = std::thread::spawn(move || {
            serve(&ctx, &listener, &[t], false, &mut |i, e| tx.send((i, e)).unwrap());
        });
        // A client of another exchange version: the server's session fails at the opening,
        // and the client sees no more than its side channel closing.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&[b'9'; perf::exchange::VERSION_LEN]).unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        server.join().unwrap();
        let (i, error) = rx.recv_timeout(Duration::from_secs(1)).expect("the server's error");
        assert_eq!(i, 0);
        assert!(error.contains("version"), "{error}");
    }

    #[test]
    fn a_side_channel_whose_syns_vanish_tries_again_from_new_ports() {
        let t = send_lat(1.0);
        assert_eq!(t.connect_attempt(), Duration::from_millis(500));
        // Every attempt dropped: four of them, said in the error.
        let (_l, addr, _held) = full_listener();
        let started = Instant::now();
        let err = connect_side_channel(addr, &t).unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("4 attempts"), "{err}");
        assert!(took >= Duration::from_millis(1900) && took < Duration::from_secs(6), "{took:?}");
        // The queue frees during the first attempt: a later attempt connects.
        let (l, addr, held) = full_listener();
        let freer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let (s, _) = l.accept().unwrap();
            drop((s, held));
            std::thread::sleep(Duration::from_secs(3));
            l
        });
        let started = Instant::now();
        let sock = connect_side_channel(addr, &t);
        assert!(sock.is_ok(), "{sock:?}");
        assert!(started.elapsed() >= Duration::from_millis(450), "{:?}", started.elapsed());
        drop(freer);
        // Refused is no dead path: at once, no second attempt.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let started = Instant::now();
        let err = connect_side_channel(port, &t).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
        assert!(started.elapsed() < Duration::from_millis(400));
    }

    #[test]
    fn probe_ports_cross_every_spine_each_way() {
        // 16 candidates over 3 spines, out and back drawn apart.
        let cands: Vec<(u16, [usize; 2])> =
            (0..16).map(|i| (spread_port(i, 16), [i % 3, (i / 3 + 1) % 3])).collect();
        let got = cover(&cands, 3, 4);
        for j in 0..3 {
            assert!(got.iter().any(|c| c.1[0] == j) && got.iter().any(|c| c.1[1] == j), "{got:?}");
        }
        assert!(got.len() >= 3 && got.len() <= 4, "{got:?}");
        // Fewer spines than it wants: filled up to `want`.
        assert_eq!(cover(&cands, 1, 6).len(), 6);
    }

    #[test]
    fn the_route_command_is_asked_once_and_held_to_its_answers() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let flows =
            [(ip("10.1.0.1"), ip("10.1.2.1"), 49159), (ip("10.1.2.1"), ip("10.1.0.1"), 50000)];
        let got = ask_routes("awk '{ print $3 % 4 }'", &flows).unwrap();
        assert_eq!(got, [Some(49159 % 4), Some(50000 % 4)]);
        assert_eq!(ask_routes("echo -; echo 1", &flows).unwrap(), [None, Some(1)]);
        let err = ask_routes("echo 1", &flows).unwrap_err();
        assert!(err.contains("answered 1 lines for 2 flows"), "{err}");
        let err = ask_routes("echo spine-a; echo 1", &flows).unwrap_err();
        assert!(err.contains("a spine's index"), "{err}");
        let err = ask_routes("echo nope >&2; exit 3", &flows).unwrap_err();
        assert!(err.contains("failed") && err.contains("nope"), "{err}");
    }

    #[test]
    fn hosts_that_never_joined_are_the_reports_suspects() {
        let shape = topology::Shape::draw(12);
        let plan = Plan::parse(&crate::plan::for_shape(&shape, None), "shape.toml").unwrap();
        let mut r = not_joined_report(&plan, &[1, 99], "rank(s) 1, 99 never joined within 30s");
        let s = r.summarize();
        assert_eq!((s.failed, r.suspects.len()), (1, 1), "rank 99 plays no host: {r:?}");
        assert_eq!(r.suspects[0].at, topology::Component::Host(1));
        assert_eq!(r.suspects[0].kind, "host");
        assert!(r.checks[0].name.ends_with("/joined"), "{:?}", r.checks[0]);
        assert!(r.text().contains("never joined"), "{}", r.text());
    }

    #[test]
    fn fair_shares_follow_what_each_sender_can_offer() {
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
        assert!(close(&fair_shares(12.0, &[f64::INFINITY; 3]), &[4.0, 4.0, 4.0]));
        assert!(close(&fair_shares(12.0, &[5.0; 3]), &[4.0, 4.0, 4.0]));
        // Two senders across 3:1 spine links that offer 4 each, one under the receiver's
        // ToR that offers 12: a FIFO drains them 6 : 2 : 2 of 10.
        assert!(close(&fair_shares(10.0, &[12.0, 4.0, 4.0]), &[6.0, 2.0, 2.0]));
        assert!(close(&fair_shares(0.0, &[1.0, 3.0]), &[0.0, 0.0]));
    }

    #[test]
    fn an_oversubscribed_fabric_caps_what_crosses_the_spines() {
        // 3:1 under 2 hosts per ToR and 2 spines at 100 Mbit/s: 33 Mbit/s spine links.
        let shape = topology::Shape {
            seed: 1,
            racks: 2,
            hosts_per_tor: 2,
            rails: 1,
            spines: 2,
            uplink: topology::Uplink::ThreeToOne,
            host_mbit: 100,
            mtu: 9000,
            ecmp_seed: 1,
        };
        let pod = shape.pod();
        let mb = |mbit: f64| mb_per_s(mbit / 1000.0);
        let line = |_: Dev| Some(mb(100.0));
        let d = |h| Dev { host: h, rail: 0 };
        let near = path_rate(&pod, &line, d(0), d(1)).unwrap();
        let far = path_rate(&pod, &line, d(0), d(2)).unwrap();
        assert!((near - mb(100.0)).abs() < 1e-9 && (far - mb(33.0)).abs() < 1e-9, "{near} {far}");
        // The bisection: r0h0 -> r1h0 and r0h1 -> r1h1 leave one ToR over 2 x 33 Mbit/s.
        let cap = bisection_capacity(&pod, &[(d(0), d(2)), (d(1), d(3))], &line);
        assert!((cap - mb(66.0)).abs() < 1e-9, "{cap}");
        // Non-blocking: each flow's line rate.
        let flat = topology::Shape { uplink: topology::Uplink::EachLinkAll, ..shape }.pod();
        let cap = bisection_capacity(&flat, &[(d(0), d(2)), (d(1), d(3))], &line);
        assert!((cap - mb(200.0)).abs() < 1e-9, "{cap}");
        // An incast into r1h0: r1h1 is under its ToR; r0h0 and r0h1 share r0's uplinks.
        let rates: BTreeMap<Dev, f64> = (0..4).map(|h| (d(h), mb(100.0))).collect();
        let senders = [d(1), d(0), d(3)];
        assert!((incast_cap(&pod, &rates, &senders, d(3), d(2)) - mb(100.0)).abs() < 1e-9);
        let two = [d(0), d(1), d(3)];
        let cap = incast_cap(&pod, &rates, &two, d(0), d(2));
        assert!((cap - mb(33.0)).abs() < 1e-9, "two senders share 2 x 33 Mbit/s: {cap}");
    }
}
