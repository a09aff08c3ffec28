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

impl EdgeResult {
    /// Whether the edge ran and nothing was damaged.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.damaged == 0 && (self.end == End::Sender || self.messages > 0)
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
fn port_for(base: u16, k: usize, n: u32, src: u32) -> u16 {
    base.wrapping_add(1 + (k as u32 * n + src) as u16)
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

fn options(plan: &Plan, extreme: bool) -> Options {
    let mut o = Options::new(PerfTest::SendBw);
    o.sizes = plan.sizes.clone();
    match plan.count {
        Some(n) => o.iters = n.max(1),
        None => {
            let per_size = plan.seconds / plan.sizes.len().max(1) as f64;
            o.duration = Some(Duration::from_secs_f64(per_size.max(0.2)));
        }
    }
    o.validate = true;
    o.memory = plan.memory;
    o.qps = if extreme { plan.qps.max(4) } else { plan.qps.max(1) };
    o.tx_depth = if extreme { 128 } else { 16 };
    // A completion per message: the queue refills as each one lands, not in steps.
    o.cq_mod = Some(1);
    o.rx_depth = if extreme { 1024 } else { 512 };
    // Overload is the point: a 1 s ACK timeout (× 7 retries) rides out the queues a burn-in
    // builds, where perftest's 67 ms gives a connection up within half a second.
    o.qp_timeout = 18;
    o.stall = Duration::from_secs(20);
    o.wait = Some(Duration::from_secs(60));
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
    // (name, edges, extreme) for each round.
    type Round = (String, Vec<(u32, u32)>, bool);
    let mut rounds: Vec<Round> =
        plan.patterns.iter().map(|p| (p.name().to_string(), p.edges(n), false)).collect();
    if plan.extreme {
        let mut all: Vec<(u32, u32)> = Pattern::ALL.iter().flat_map(|p| p.edges(n)).collect();
        all.sort_unstable();
        all.dedup();
        rounds.push(("extreme".into(), all, true));
    }
    let mut results = Vec::new();
    for (k, (name, edges, extreme)) in rounds.iter().enumerate() {
        let mut o = options(plan, *extreme);
        // The GID the device's address comes from (index 0 is a link-local one on RoCE NICs).
        o.gid_index = ctx.gid_index();
        let mine: Vec<(u32, u32)> =
            edges.iter().copied().filter(|(s, d)| *s == me || *d == me).collect();
        // Listen for every sender first: they connect as soon as they get here.
        let mut listeners = Vec::new();
        for (s, d) in &mine {
            if *d == me {
                let addr = SocketAddr::new(ctx.ip(), port_for(base, k, n, *s));
                let l = TcpListener::bind(addr).map_err(|e| Failure {
                    rank: me,
                    host: session.roster[me as usize].host.clone(),
                    reason: format!("cannot listen on {addr}: {e}"),
                })?;
                listeners.push((*s, l));
            }
        }
        // Owned threads, not scoped ones: when a rank is lost the run returns at once and the
        // process ends, with edges to the lost rank still waiting on it.
        let mut handles = Vec::new();
        for (src, l) in listeners {
            let (o, ctx) = (o.clone(), ctx.clone());
            let peer_host = peer(session, src).map(|p| p.2).unwrap_or_default();
            handles.push((
                src,
                me,
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
        for (s, d) in &mine {
            if *s != me {
                continue;
            }
            let Some((ip, pbase, host)) = peer(session, *d) else { continue };
            let (o, ctx, live, d) = (o.clone(), ctx.clone(), live.clone(), *d);
            handles.push((
                me,
                d,
                End::Sender,
                host,
                std::thread::spawn(move || -> Result<Outcome, String> {
                    let sock = connect(SocketAddr::new(ip, port_for(pbase, k, n, me)))?;
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
            if handles.iter().all(|h| h.4.is_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut outcome = Vec::new();
        for (src, dst, end, peer_host, h) in handles {
            let r = h.join().unwrap_or_else(|_| Err("the edge's thread panicked".into()));
            let mut e = EdgeResult {
                pattern: name.clone(),
                src,
                dst,
                end,
                peer_host,
                mb_per_s: None,
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
                    if end == End::Receiver
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
