//! The ranks meet at rank 0 over TCP: each connects to the coordinator's address (rank 0
//! listens on exactly that address, never on every interface), says who it is and what the
//! others need to know of it, and gets the roster of every rank. From then on rank 0 and each
//! other rank exchange heartbeats; a rank that closes its connection or stops answering for
//! `dead_after` is reported by rank and host to every other rank, which stop.
//!
//! The protocol is one JSON object per line:
//! `{"hello":{"rank":1,"host":"node7","info":…}}`, `{"roster":[…]}`, `"heartbeat"`,
//! `{"abort":{"rank":3,"host":"node9","reason":"…"}}`, `{"done":{"rank":1,"ok":true}}`,
//! `{"finish":{"ok":true}}`.
//!
//! Timeouts ([`Timeouts`]): `join` (default 60 s) bounds how long rank 0 waits for every rank
//! to join and a rank keeps trying to reach rank 0; `heartbeat` (1 s) is the interval between
//! heartbeats; `dead_after` (5 s) is the silence after which a peer is declared lost.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::world::World;

/// The bootstrap's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long rank 0 waits for every rank, and a rank tries to reach rank 0.
    pub join: Duration,
    /// The interval between heartbeats.
    pub heartbeat: Duration,
    /// The silence after which a peer is lost.
    pub dead_after: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            join: Duration::from_secs(60),
            heartbeat: Duration::from_secs(1),
            dead_after: Duration::from_secs(5),
        }
    }
}

/// A rank as the others know it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Member {
    /// Its rank.
    pub rank: u32,
    /// Its host name.
    pub host: String,
    /// What it tells the others (its devices, its ports).
    pub info: Value,
}

/// A rank that was lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("rank {rank} ({host}) {reason}")]
pub struct Failure {
    /// The rank.
    pub rank: u32,
    /// Its host.
    pub host: String,
    /// What happened.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Msg {
    Hello(Member),
    Roster(Vec<Member>),
    Heartbeat,
    Abort(Failure),
    Done { rank: u32, ok: bool },
    Finish { ok: bool },
}

/// Why the ranks could not meet, or a run could not end well.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// Rank 0 could not listen on the coordinator address.
    #[error("rank 0 cannot listen on the coordinator address {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Some ranks never joined.
    #[error("rank(s) {} never joined within {:?} (joined: {joined:?})", missing.iter().map(u32::to_string).collect::<Vec<_>>().join(", "), after)]
    NotJoined {
        /// The ranks missing.
        missing: Vec<u32>,
        /// Those that joined.
        joined: Vec<u32>,
        /// The join timeout.
        after: Duration,
    },
    /// Rank 0 could not be reached.
    #[error("cannot reach the coordinator {addr} within {after:?}: {source}")]
    Unreachable {
        /// Its address.
        addr: SocketAddr,
        /// The join timeout.
        after: Duration,
        /// The last cause.
        #[source]
        source: std::io::Error,
    },
    /// A peer broke the protocol.
    #[error("bootstrap protocol: {0}")]
    Protocol(String),
    /// A rank was lost.
    #[error(transparent)]
    Lost(#[from] Failure),
    /// Some rank finished with a failure of its own.
    #[error("rank(s) {} reported failures", .0.iter().map(u32::to_string).collect::<Vec<_>>().join(", "))]
    RanksFailed(Vec<u32>),
}

fn send(w: &Mutex<TcpStream>, m: &Msg) -> std::io::Result<()> {
    let mut line = serde_json::to_string(m).map_err(std::io::Error::other)?;
    line.push('\n');
    w.lock().unwrap_or_else(PoisonError::into_inner).write_all(line.as_bytes())
}

fn recv(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<Msg>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// A connection to a rank: the shared writer and the reader.
type Link = (Arc<Mutex<TcpStream>>, BufReader<TcpStream>);

/// Reads a peer's messages, handing each to `on` (which returns `false` to stop reading),
/// until the peer is lost; returns why (`None`: `on` stopped).
fn watch(
    r: &mut BufReader<TcpStream>,
    dead: Duration,
    gap: &AtomicU64,
    mut on: impl FnMut(Msg) -> bool,
) -> Option<String> {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, TimedOut, WouldBlock};
    let mut last = Instant::now();
    loop {
        let got = recv(r);
        // How late the peer's word came: what --dead-after must outlast.
        let now = Instant::now();
        gap.fetch_max(now.duration_since(last).as_nanos() as u64, Ordering::Relaxed);
        last = now;
        match got {
            Ok(Some(m)) => {
                if !on(m) {
                    return None;
                }
            }
            Ok(None) => return Some("closed its connection (the process ended)".into()),
            // A process that ends with unread heartbeats resets the connection.
            Err(e) if matches!(e.kind(), ConnectionReset | ConnectionAborted) => {
                return Some("closed its connection (the process ended)".into());
            }
            Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => {
                return Some(format!("sent no heartbeat for {dead:?}"));
            }
            Err(e) => return Some(format!("connection failed: {e}")),
        }
    }
}

#[derive(Default)]
struct Shared {
    failure: Option<Failure>,
    /// Rank 0: which ranks said done, and how.
    done: Vec<(u32, bool)>,
    /// The others: rank 0's verdict.
    finish: Option<bool>,
}

/// A rank's place in a run that has met.
pub struct Session {
    world: World,
    /// Every rank, by rank.
    pub roster: Vec<Member>,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    /// Rank 0: a writer per other rank (index = rank); the others: the one to rank 0.
    links: Vec<Option<Arc<Mutex<TcpStream>>>>,
    timeouts: Timeouts,
    /// The longest silence heard from a peer so far, nanoseconds.
    gap: Arc<AtomicU64>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("world", &self.world).field("roster", &self.roster).finish()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for l in self.links.iter().flatten() {
            let _ =
                l.lock().unwrap_or_else(PoisonError::into_inner).shutdown(std::net::Shutdown::Both);
        }
    }
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Joins the run: rank 0 listens and waits for everyone, the others connect to it. Returns
/// when every rank has joined (with the roster), or fails naming who is missing.
pub fn join(
    world: &World,
    host: &str,
    info: Value,
    t: &Timeouts,
) -> Result<Session, BootstrapError> {
    let me = Member { rank: world.rank, host: host.to_string(), info };
    if world.rank == 0 { coordinate(world, me, t) } else { connect(world, me, t) }
}

fn coordinate(world: &World, me: Member, t: &Timeouts) -> Result<Session, BootstrapError> {
    let listener = TcpListener::bind(world.coordinator)
        .map_err(|source| BootstrapError::Bind { addr: world.coordinator, source })?;
    let _ = listener.set_nonblocking(true);
    let deadline = Instant::now() + t.join;
    let n = world.size as usize;
    let mut members: Vec<Option<Member>> = vec![None; n];
    members[0] = Some(me);
    let mut conns: Vec<Option<Link>> = (0..n).map(|_| None).collect();
    while members.iter().any(Option::is_none) {
        let now = Instant::now();
        if now >= deadline {
            let missing = (0..n as u32).filter(|r| members[*r as usize].is_none()).collect();
            let joined = (0..n as u32).filter(|r| members[*r as usize].is_some()).collect();
            return Err(BootstrapError::NotJoined { missing, joined, after: t.join });
        }
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_read_timeout(Some(
                    deadline.saturating_duration_since(now).max(Duration::from_millis(10)),
                ));
                let Ok(w) = s.try_clone() else { continue };
                let mut r = BufReader::new(s);
                match recv(&mut r) {
                    Ok(Some(Msg::Hello(m)))
                        if (m.rank as usize) < n && members[m.rank as usize].is_none() =>
                    {
                        let rank = m.rank as usize;
                        members[rank] = Some(m);
                        conns[rank] = Some((Arc::new(Mutex::new(w)), r));
                    }
                    Ok(Some(Msg::Hello(m))) => {
                        let why = if (m.rank as usize) >= n {
                            "is outside the world"
                        } else {
                            "joined twice"
                        };
                        let f = Failure {
                            rank: m.rank,
                            host: m.host,
                            reason: format!("{why} (world size {n})"),
                        };
                        let _ = send(&Mutex::new(w), &Msg::Abort(f));
                    }
                    // Not a rank (a port scan, a stale process): ignored.
                    _ => {}
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let roster: Vec<Member> = members.into_iter().flatten().collect();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let gap = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let links: Vec<Option<Arc<Mutex<TcpStream>>>> =
        conns.iter().map(|c| c.as_ref().map(|(w, _)| w.clone())).collect();
    for w in links.iter().flatten() {
        send(w, &Msg::Roster(roster.clone()))
            .map_err(|e| BootstrapError::Protocol(format!("sending the roster: {e}")))?;
    }
    // A reader per rank: heartbeats keep it alive; silence or a closed connection loses it,
    // and every other rank hears which.
    for (rank, c) in conns.into_iter().enumerate() {
        let Some((_, mut r)) = c else { continue };
        let (shared, stop, links, host) =
            (shared.clone(), stop.clone(), links.clone(), roster[rank].host.clone());
        let gap = gap.clone();
        let dead = t.dead_after;
        let _ = r.get_ref().set_read_timeout(Some(dead));
        std::thread::spawn(move || {
            let reason = watch(&mut r, dead, &gap, |m| {
                if let Msg::Done { ok, .. } = m {
                    lock(&shared).done.push((rank as u32, ok));
                }
                true
            })
            .unwrap_or_default();
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let mut s = lock(&shared);
            if s.done.iter().any(|(r, _)| *r as usize == rank) && s.finish.is_some() {
                return;
            }
            if s.failure.is_none() {
                let f = Failure { rank: rank as u32, host, reason };
                s.failure = Some(f.clone());
                drop(s);
                for (k, w) in links.iter().enumerate() {
                    if k != rank
                        && let Some(w) = w
                    {
                        let _ = send(w, &Msg::Abort(f.clone()));
                    }
                }
            }
        });
    }
    heartbeats(links.clone(), stop.clone(), t.heartbeat);
    Ok(Session { world: world.clone(), roster, shared, stop, links, timeouts: *t, gap })
}

fn heartbeats(links: Vec<Option<Arc<Mutex<TcpStream>>>>, stop: Arc<AtomicBool>, every: Duration) {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for w in links.iter().flatten() {
                let _ = send(w, &Msg::Heartbeat);
            }
            std::thread::sleep(every);
        }
    });
}

fn connect(world: &World, me: Member, t: &Timeouts) -> Result<Session, BootstrapError> {
    let deadline = Instant::now() + t.join;
    let s = loop {
        match TcpStream::connect_timeout(&world.coordinator, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) if Instant::now() >= deadline => {
                return Err(BootstrapError::Unreachable {
                    addr: world.coordinator,
                    after: t.join,
                    source: e,
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let w =
        Arc::new(Mutex::new(s.try_clone().map_err(|e| BootstrapError::Protocol(e.to_string()))?));
    send(&w, &Msg::Hello(me))
        .map_err(|e| BootstrapError::Protocol(format!("saying hello: {e}")))?;
    // Rank 0 answers when every rank has joined, within its join timeout.
    let _ = s.set_read_timeout(Some(t.join + t.dead_after));
    let mut r = BufReader::new(s);
    let roster = match recv(&mut r) {
        Ok(Some(Msg::Roster(m))) => m,
        Ok(Some(Msg::Abort(f))) => return Err(f.into()),
        Ok(None) => {
            return Err(Failure {
                rank: 0,
                host: world.coordinator.to_string(),
                reason: "closed the bootstrap before every rank joined".into(),
            }
            .into());
        }
        Ok(Some(m)) => {
            return Err(BootstrapError::Protocol(format!("expected the roster, got {m:?}")));
        }
        Err(e) => return Err(BootstrapError::Protocol(format!("waiting for the roster: {e}"))),
    };
    let coordinator_host =
        roster.first().map_or_else(|| world.coordinator.to_string(), |m| m.host.clone());
    let shared = Arc::new(Mutex::new(Shared::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let gap = Arc::new(AtomicU64::new(0));
    let dead = t.dead_after;
    let _ = r.get_ref().set_read_timeout(Some(dead));
    {
        let (shared, stop, gap) = (shared.clone(), stop.clone(), gap.clone());
        std::thread::spawn(move || {
            let lost = watch(&mut r, dead, &gap, |m| match m {
                Msg::Abort(f) => {
                    lock(&shared).failure.get_or_insert(f);
                    false
                }
                Msg::Finish { ok } => {
                    lock(&shared).finish = Some(ok);
                    false
                }
                _ => true,
            });
            let Some(reason) = lost else { return };
            if !stop.load(Ordering::Relaxed) {
                lock(&shared).failure.get_or_insert(Failure {
                    rank: 0,
                    host: coordinator_host,
                    reason,
                });
            }
        });
    }
    heartbeats(vec![Some(w.clone())], stop.clone(), t.heartbeat);
    let links = vec![Some(w)];
    Ok(Session { world: world.clone(), roster, shared, stop, links, timeouts: *t, gap })
}

impl Session {
    /// This rank's world.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The longest silence heard from a peer so far (heartbeats come every
    /// [`Timeouts::heartbeat`]; under load they come late, and `dead_after` must outlast it).
    pub fn longest_silence(&self) -> Duration {
        Duration::from_nanos(self.gap.load(Ordering::Relaxed))
    }

    /// The bootstrap's timeouts.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// A rank lost so far (the workload checks it, and stops).
    pub fn failure(&self) -> Option<Failure> {
        lock(&self.shared).failure.clone()
    }

    /// Ends the run: every rank says whether its part went well; rank 0 waits for all of
    /// them and tells everyone the verdict. Fails if a rank was lost or reported a failure.
    pub fn finish(self, ok: bool) -> Result<(), BootstrapError> {
        let n = self.world.size as usize;
        if self.world.rank == 0 {
            loop {
                let s = lock(&self.shared);
                if let Some(f) = &s.failure {
                    return Err(f.clone().into());
                }
                if s.done.len() + 1 >= n {
                    break;
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(20));
            }
            let mut s = lock(&self.shared);
            let failed: Vec<u32> = s
                .done
                .iter()
                .filter(|(_, ok)| !ok)
                .map(|(r, _)| *r)
                .chain((!ok).then_some(0))
                .collect();
            s.finish = Some(failed.is_empty());
            drop(s);
            for w in self.links.iter().flatten() {
                let _ = send(w, &Msg::Finish { ok: failed.is_empty() });
            }
            // Let the verdicts leave before the connections close.
            std::thread::sleep(Duration::from_millis(50));
            if failed.is_empty() { Ok(()) } else { Err(BootstrapError::RanksFailed(failed)) }
        } else {
            let w = self.links[0]
                .clone()
                .ok_or_else(|| BootstrapError::Protocol("no link to rank 0".into()))?;
            send(&w, &Msg::Done { rank: self.world.rank, ok })
                .map_err(|e| BootstrapError::Protocol(format!("saying done: {e}")))?;
            let _ = self.timeouts;
            loop {
                let s = lock(&self.shared);
                if let Some(f) = &s.finish {
                    return if *f { Ok(()) } else { Err(BootstrapError::RanksFailed(Vec::new())) };
                }
                if let Some(f) = &s.failure {
                    return Err(f.clone().into());
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
