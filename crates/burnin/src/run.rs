//! One rank's part of a burn-in: for each pattern, every edge from this rank is a stream of
//! SENDs to the peer and every edge to it a stream from the peer, all at once, each over its
//! own RC connection (perf's engine: a seeded pattern in every message, its sequence number in
//! the immediate data, every byte checked at the receiver). A damaged or missing byte is
//! reported with the peer, QP, message and byte offset; a rank the bootstrap loses stops the
//! run.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use perf::exchange::Role;
use perf::session::{self, Observer, Options, Outcome, PerfTest, Row};
use serde::Serialize;
use verbs::Context;

use crate::pattern::Pattern;
use rendezvous::bootstrap::{Failure, Session};

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The patterns, one after another.
    pub patterns: Vec<Pattern>,
    /// Every pattern's edges at once, with more QPs and deeper queues, after the others.
    pub extreme: bool,
    /// The message-size mix: each size gets an equal share of a pattern's time.
    pub sizes: Vec<usize>,
    /// Seconds per pattern.
    pub seconds: f64,
    /// Instead of `seconds`: this many messages per edge, QP and size.
    pub count: Option<u64>,
    /// QPs per edge.
    pub qps: usize,
    /// Where this rank's buffers are: host memory, or a GPU's (`--memory cuda:GPU`).
    pub memory: session::Placement,
}

/// Live totals for a progress bar.
#[derive(Debug, Default)]
pub struct Live {
    /// Bytes sent by this rank.
    pub bytes: AtomicU64,
    /// Messages sent by this rank.
    pub messages: AtomicU64,
    /// Damaged messages this rank received.
    pub errors: AtomicU64,
}

/// Which end of an edge this rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    /// This rank sent.
    Sender,
    /// This rank received and checked.
    Receiver,
}

/// One edge of one pattern, as this rank saw it.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeResult {
    /// The pattern (`extreme` for all at once).
    pub pattern: String,
    /// The sender.
    pub src: u32,
    /// The receiver.
    pub dst: u32,
    /// This rank's end.
    pub end: End,
    /// The peer's host.
    pub peer_host: String,
    /// Average bandwidth (sender), MB/s.
    pub mb_per_s: Option<f64>,
    /// A latency stream's figures per size (sender; the KV-cache round's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<LatencyRow>,
    /// Whether this end checks the bytes (the receiver of SENDs and WRITEs, the initiator
    /// of READs).
    pub checks: bool,
    /// Messages checked (receiver).
    pub messages: u64,
    /// Bytes checked (receiver).
    pub bytes: u64,
    /// Damaged messages (receiver).
    pub damaged: u64,
    /// The first damage: QP, message and byte offset.
    pub first_damage: Option<String>,
    /// The edge could not run.
    pub error: Option<String>,
}

/// One size of a latency stream.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct LatencyRow {
    /// Message size, bytes.
    pub size: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p99_9_us: f64,
    /// The slowest, µs.
    pub max_us: f64,
}

impl EdgeResult {
    /// Whether the edge ran and nothing was damaged (and the end that checks checked).
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.damaged == 0 && (!self.checks || self.messages > 0)
    }
}

/// A rank's address for the others, from the roster's `info`: `{"ip": "…", "port": N}`.
fn peer(session: &Session, rank: u32) -> Option<(IpAddr, u16, String)> {
    let m = session.roster.get(rank as usize)?;
    let ip = m.info["ip"].as_str()?.parse().ok()?;
    let port = u16::try_from(m.info["port"].as_u64()?).ok()?;
    Some((ip, port, m.host.clone()))
}

/// The side-channel port rank `dst` listens on for `src` in pattern number `k`.
fn port_for(base: u16, k: usize, n: u32, src: u32, slot: usize) -> u16 {
    base.wrapping_add(1 + ((k * SLOTS + slot) as u32 * n + src) as u16)
}

/// Streams one edge may carry in one round (the KV-cache round's background SENDs, READ and
/// WRITE latency, READ and WRITE bandwidth): each its own connection and port.
const SLOTS: usize = 5;

/// One stream of a round: an edge, the test it runs, and its place among the edge's streams.
#[derive(Debug, Clone)]
struct Job {
    /// `all-to-all`, `kv-cache/read-lat`, …: what the result is reported as.
    what: String,
    src: u32,
    dst: u32,
    slot: usize,
    o: Options,
    /// Which end checks the bytes (and must report messages checked).
    checks: End,
}

/// The KV-cache round's streams on a prefill → decode edge: READ and WRITE latency, one QP,
/// 4, 16 and 64 KiB (duration mode: percentiles); READ and WRITE bandwidth on many QPs at
/// the same sizes; every byte checked. The initiator (the prefill rank) is the client.
fn kv_jobs(plan: &Plan, gid_index: usize, src: u32, dst: u32) -> Vec<Job> {
    let tests = [
        (PerfTest::ReadLat, "read-lat", End::Sender),
        (PerfTest::WriteLat, "write-lat", End::Receiver),
        (PerfTest::ReadBw, "read-bw", End::Sender),
        (PerfTest::WriteBw, "write-bw", End::Receiver),
    ];
    tests
        .into_iter()
        .enumerate()
        .map(|(i, (t, name, checks))| {
            let mut o = stream_options(plan, t, vec![4096, 16384, 65536], gid_index);
            // A latency loop keeps one message in flight: on a loaded host a short share of
            // the time may measure none. At least 2 s a size.
            if let (false, Some(d)) = (t.is_bw(), o.duration) {
                o.duration = Some(d.max(Duration::from_secs(2)));
            }
            if t.is_bw() {
                o.qps = plan.qps.max(8);
                o.tx_depth = 16;
            }
            Job { what: format!("kv-cache/{name}"), src, dst, slot: i + 1, o, checks }
        })
        .collect()
}

/// What every burn-in stream runs with: `test` at `sizes`, `plan.count` messages per size or
/// `plan.seconds` shared among them, every byte checked, from `plan.memory`, over the GID
/// the device's address comes from (index 0 is a link-local one on RoCE NICs); overload is
/// the point, so a 1 s ACK timeout (× 7 retries) rides out the queues a burn-in builds,
/// where perftest's 67 ms gives a connection up within half a second.
fn stream_options(plan: &Plan, test: PerfTest, sizes: Vec<usize>, gid_index: usize) -> Options {
    let mut o = Options::new(test);
    o.sizes = sizes;
    match plan.count {
        Some(n) => o.iters = n.max(1),
        None => {
            let per_size = plan.seconds / o.sizes.len().max(1) as f64;
            o.duration = Some(Duration::from_secs_f64(per_size.max(0.2)));
        }
    }
    o.validate = true;
    o.memory = plan.memory;
    o.gid_index = gid_index;
    o.qp_timeout = 18;
    o.stall = Duration::from_secs(20);
    o.wait = Some(Duration::from_secs(60));
    o
}

struct Counting<'a> {
    live: &'a Live,
    last: (u64, u64),
}

impl Observer for Counting<'_> {
    fn measuring(&mut self, _size: usize) {
        self.last = (0, 0);
    }
    fn progress(&mut self, done: u64, bytes: u64) {
        self.live.messages.fetch_add(done.saturating_sub(self.last.0), Ordering::Relaxed);
        self.live.bytes.fetch_add(bytes.saturating_sub(self.last.1), Ordering::Relaxed);
        self.last = (done, bytes);
    }
}

const CONNECT: Duration = Duration::from_secs(30);

fn options(plan: &Plan, extreme: bool, gid_index: usize) -> Options {
    let mut o = stream_options(plan, PerfTest::SendBw, plan.sizes.clone(), gid_index);
    o.qps = if extreme { plan.qps.max(4) } else { plan.qps.max(1) };
    o.tx_depth = if extreme { 128 } else { 16 };
    // A completion per message: the queue refills as each one lands, not in steps.
    o.cq_mod = Some(1);
    o.rx_depth = if extreme { 1024 } else { 512 };
    o
}

fn accept(l: &TcpListener) -> Result<(TcpStream, SocketAddr), String> {
    let deadline = Instant::now() + CONNECT;
    l.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        match l.accept() {
            Ok((s, a)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok((s, a));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("the sender never connected: {e}")),
        }
    }
}

fn connect(to: SocketAddr) -> Result<TcpStream, String> {
    let deadline = Instant::now() + CONNECT;
    loop {
        match TcpStream::connect_timeout(&to, Duration::from_secs(1)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => return Err(format!("cannot reach {to}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Runs this rank's part of `plan`. `ctx` is this rank's device (event-driven); `base` the
/// port its roster entry names. Returns every edge this rank was an end of, or the rank the
/// bootstrap lost.
pub fn run(
    session: &Session,
    ctx: &Context,
    plan: &Plan,
    base: u16,
    live: &Arc<Live>,
) -> Result<Vec<EdgeResult>, Failure> {
    let me = session.world().rank;
    let n = session.world().size;
    // Each round: its streams, all at once.
    let send = |what: &str, edges: Vec<(u32, u32)>, extreme: bool| -> Vec<Job> {
        let o = options(plan, extreme, ctx.gid_index());
        edges
            .into_iter()
            .map(|(src, dst)| Job {
                what: what.to_string(),
                src,
                dst,
                slot: 0,
                o: o.clone(),
                checks: End::Receiver,
            })
            .collect()
    };
    let mut rounds: Vec<Vec<Job>> = plan
        .patterns
        .iter()
        .map(|p| match p {
            // The KV-cache transfer under all-to-all load: both at once.
            Pattern::KvCache => {
                let mut jobs = send("kv-cache/all-to-all", Pattern::AllToAll.edges(n), false);
                for (src, dst) in p.edges(n) {
                    jobs.extend(kv_jobs(plan, ctx.gid_index(), src, dst));
                }
                jobs
            }
            p => send(p.name(), p.edges(n), false),
        })
        .collect();
    if plan.extreme {
        let mut all: Vec<(u32, u32)> = Pattern::ALL.iter().flat_map(|p| p.edges(n)).collect();
        all.sort_unstable();
        all.dedup();
        rounds.push(send("extreme", all, true));
    }
    let mut results = Vec::new();
    for (k, jobs) in rounds.iter().enumerate() {
        let mine: Vec<&Job> = jobs.iter().filter(|j| j.src == me || j.dst == me).collect();
        // Listen for every sender first: they connect as soon as they get here.
        let mut listeners = Vec::new();
        for j in mine.iter().filter(|j| j.dst == me) {
            let addr = SocketAddr::new(ctx.ip(), port_for(base, k, n, j.src, j.slot));
            let l = TcpListener::bind(addr).map_err(|e| Failure {
                rank: me,
                host: session.roster[me as usize].host.clone(),
                reason: format!("cannot listen on {addr}: {e}"),
            })?;
            listeners.push((*j, l));
        }
        // Owned threads, not scoped ones: when a rank is lost the run returns at once and the
        // process ends, with edges to the lost rank still waiting on it.
        let mut handles = Vec::new();
        for (j, l) in listeners {
            let (o, ctx) = (j.o.clone(), ctx.clone());
            let peer_host = peer(session, j.src).map(|p| p.2).unwrap_or_default();
            handles.push((
                j,
                End::Receiver,
                peer_host,
                std::thread::spawn(move || -> Result<Outcome, String> {
                    let (sock, from) = accept(&l)?;
                    session::run(
                        &ctx,
                        &o,
                        Role::Server,
                        &sock,
                        from.ip(),
                        true,
                        &mut session::Quiet,
                    )
                    .map_err(|e| e.to_string())
                }),
            ));
        }
        for j in mine.iter().filter(|j| j.src == me) {
            let Some((ip, pbase, host)) = peer(session, j.dst) else { continue };
            let (o, ctx, live, slot) = (j.o.clone(), ctx.clone(), live.clone(), j.slot);
            handles.push((
                *j,
                End::Sender,
                host,
                std::thread::spawn(move || -> Result<Outcome, String> {
                    let sock = connect(SocketAddr::new(ip, port_for(pbase, k, n, me, slot)))?;
                    let mut obs = Counting { live: &live, last: (0, 0) };
                    session::run(&ctx, &o, Role::Client, &sock, ip, true, &mut obs)
                        .map_err(|e| e.to_string())
                }),
            ));
        }
        // Wait for the edges, watching the bootstrap: a lost rank ends the run now.
        loop {
            if let Some(f) = session.failure() {
                return Err(f);
            }
            if handles.iter().all(|h| h.3.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut outcome = Vec::new();
        for (j, end, peer_host, h) in handles {
            let r = h.join().unwrap_or_else(|_| Err("the edge's thread panicked".into()));
            let mut e = EdgeResult {
                pattern: j.what.clone(),
                src: j.src,
                dst: j.dst,
                end,
                peer_host,
                mb_per_s: None,
                latency: Vec::new(),
                checks: end == j.checks,
                messages: 0,
                bytes: 0,
                damaged: 0,
                first_damage: None,
                error: None,
            };
            match r {
                Ok(out) => {
                    let bws: Vec<f64> = out
                        .rows
                        .iter()
                        .filter_map(|r| if let Row::Bw(b) = r { Some(b.bw_avg) } else { None })
                        .collect();
                    if end == End::Sender && !bws.is_empty() {
                        e.mb_per_s = Some(bws.iter().sum::<f64>() / bws.len() as f64);
                    }
                    if end == End::Sender {
                        e.latency = out
                            .rows
                            .iter()
                            .filter_map(|r| match r {
                                Row::Lat(l) => Some(LatencyRow {
                                    size: l.size,
                                    p50_us: l.t_typical,
                                    p99_us: l.p99,
                                    p99_9_us: l.p99_9,
                                    max_us: l.t_max,
                                }),
                                Row::Bw(_) => None,
                            })
                            .collect();
                    }
                    if end == j.checks
                        && let Some(v) = out.validation
                    {
                        e.messages = v.messages;
                        e.bytes = v.bytes;
                        e.damaged = v.errors;
                        e.first_damage = v.first_error;
                        live.errors.fetch_add(v.errors, Ordering::Relaxed);
                    }
                }
                Err(msg) => e.error = Some(msg),
            }
            outcome.push(e);
        }
        results.extend(outcome);
    }
    Ok(results)
}
