//! The ranks meet at rank 0 over TCP: each connects to the coordinator's address (rank 0
//! listens on exactly that address, never on every interface), proves it belongs to the run,
//! says who it is and what the others need to know of it, and gets the roster of every rank.
//! From then on rank 0 and each other rank exchange heartbeats; a rank that closes its
//! connection or stops answering for `dead_after` is reported by rank and host to every other
//! rank, which stop.
//!
//! The protocol is one JSON object per line. Rank 0 speaks first, to every connection:
//! `{"challenge":{"nonce":"…","version":"0.1.0","world_size":4,"secret":true}}`; the joiner
//! answers `{"hello":{"rank":1,"host":"node7","info":…,"world_size":4,"version":"0.1.0",
//! "nonce":"…","proof":"…"}}`; rank 0 answers `{"refused":{"reason":"…"}}` or, once every rank
//! has joined, `{"roster":{"members":[…],"proof":"…"}}`. Then `"heartbeat"`,
//! `{"abort":{"rank":3,"host":"node9","reason":"…"}}`, `{"done":{"rank":1,"ok":true}}`,
//! `{"finish":{"ok":true}}`.
//!
//! What a connection can and cannot do to rank 0 ([`Coordinator`] limits): joiners are handled
//! concurrently (at most [`MAX_HANDSHAKES`] at once, [`MAX_HANDSHAKES_PER_SOURCE`] from one
//! address: one beyond either closes the oldest of its address, or the oldest of all), each
//! within [`HELLO_WITHIN`] and [`Timeouts::handshake`] (a silent connection is closed then, and
//! never holds up the others: silent connections reopened as fast as they close keep no rank
//! out),
//! and every line is capped in size ([`HELLO_LIMIT`], [`LINE_LIMIT`]). A hello is refused when
//! it runs another podnet version or world size, names a rank outside the world or one already
//! claimed, or, where the run has a shared [`Secret`], does not prove it: the proof is an
//! HMAC-SHA256 over both sides' nonces and the rank, keyed with the secret, so the secret itself
//! never crosses the wire, and rank 0 proves it too (in the roster), so a joiner does not follow
//! an impostor. The secret authenticates ranks; it does not encrypt the traffic.
//!
//! Timeouts ([`Timeouts`]): `join` (default 60 s) bounds how long rank 0 waits for every rank
//! to join and a rank keeps trying to reach rank 0; `handshake` (10 s) how long one connection
//! may take to say hello; `heartbeat` (1 s) is the interval between heartbeats; `dead_after`
//! (5 s) is the silence after which a peer is declared lost.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;

use crate::world::World;

/// The podnet version every rank of a run must share.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The most joiners rank 0 talks to at once; a connection past it is closed at once (a real
/// rank tries again).
pub const MAX_HANDSHAKES: usize = 64;
/// Handshakes under way from one source address, at most: a connection beyond closes that
/// address's oldest (one host cannot fill the slots the others need).
pub const MAX_HANDSHAKES_PER_SOURCE: usize = 8;
/// How long a connection has to answer the challenge with its hello (a rank answers at
/// once), whatever [`Timeouts::handshake`] allows for the rest.
pub const HELLO_WITHIN: Duration = Duration::from_secs(3);

/// The longest hello rank 0 reads; a longer one is refused.
pub const HELLO_LIMIT: usize = 256 << 10;

/// The longest line read once the ranks have met (heartbeats, verdicts); the roster a rank
/// reads is allowed [`ROSTER_LIMIT`].
pub const LINE_LIMIT: usize = 64 << 10;

/// The longest roster a rank reads.
pub const ROSTER_LIMIT: usize = 64 << 20;

/// The longest secret file read.
pub const SECRET_LIMIT: u64 = 4096;

/// The bootstrap's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long rank 0 waits for every rank, and a rank tries to reach rank 0.
    pub join: Duration,
    /// How long one connection may take to say hello to rank 0.
    pub handshake: Duration,
    /// The interval between heartbeats.
    pub heartbeat: Duration,
    /// The silence after which a peer is lost.
    pub dead_after: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            join: Duration::from_secs(60),
            handshake: Duration::from_secs(10),
            heartbeat: Duration::from_secs(1),
            dead_after: Duration::from_secs(5),
        }
    }
}

/// The shared secret of a run: every rank has the same one (from a file or the environment,
/// as a launcher provides it) and proves it without sending it.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Why a secret could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The file could not be read.
    #[error("secret file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is longer than [`SECRET_LIMIT`].
    #[error("secret file {0}: longer than {SECRET_LIMIT} bytes (is it the right file?)")]
    TooLong(String),
    /// Nothing but white space.
    #[error("{0}: the secret is empty")]
    Empty(String),
    /// Both a file and the environment give one.
    #[error("both a secret file and {SECRET_ENV} are given: give one")]
    Both,
}

/// The environment variable that may hold the secret itself (launchers pass environment
/// variables to every rank).
pub const SECRET_ENV: &str = "PODNET_SECRET";

impl Secret {
    /// The secret from bytes (white space at either end dropped; empty is an error). `what`
    /// names where it came from, for the error.
    pub fn new(bytes: &[u8], what: &str) -> Result<Self, SecretError> {
        let s = bytes.trim_ascii();
        if s.is_empty() {
            return Err(SecretError::Empty(what.to_string()));
        }
        Ok(Secret(s.to_vec()))
    }

    /// Reads a secret file (at most [`SECRET_LIMIT`] bytes).
    pub fn from_file(path: &Path) -> Result<Self, SecretError> {
        let name = path.display().to_string();
        let read = |source| SecretError::Read { path: name.clone(), source };
        let f = std::fs::File::open(path).map_err(read)?;
        let mut bytes = Vec::new();
        f.take(SECRET_LIMIT + 1).read_to_end(&mut bytes).map_err(read)?;
        if bytes.len() as u64 > SECRET_LIMIT {
            return Err(SecretError::TooLong(name));
        }
        Secret::new(&bytes, &format!("secret file {name}"))
    }

    /// The run's secret from a file or the value of [`SECRET_ENV`], or none (either, not both).
    pub fn from_sources(
        file: Option<&Path>,
        env: Option<&[u8]>,
    ) -> Result<Option<Self>, SecretError> {
        match (file, env) {
            (Some(_), Some(_)) => Err(SecretError::Both),
            (Some(p), None) => Secret::from_file(p).map(Some),
            (None, Some(v)) => Secret::new(v, SECRET_ENV).map(Some),
            (None, None) => Ok(None),
        }
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC keys may be any length"));
        for p in parts {
            m.update(&(p.len() as u32).to_le_bytes());
            m.update(p);
        }
        m
    }

    /// A 32-byte key for `purpose` (HMAC-SHA256 of the purpose keyed with the secret): what
    /// another protocol authenticates with, never the secret itself.
    pub fn derive_key(&self, purpose: &str) -> [u8; 32] {
        self.mac(&[b"podnet-key/1", purpose.as_bytes()]).finalize().into_bytes().into()
    }

    /// The MAC a joiner's proof is: over both nonces and its rank.
    fn joiner_mac(&self, coordinator_nonce: &str, joiner_nonce: &str, rank: u32) -> Hmac<Sha256> {
        self.mac(&[
            b"podnet-rendezvous/1 joiner",
            coordinator_nonce.as_bytes(),
            joiner_nonce.as_bytes(),
            &rank.to_le_bytes(),
        ])
    }

    /// The MAC rank 0's proof is: over the same nonces the other way round.
    fn coordinator_mac(&self, joiner_nonce: &str, coordinator_nonce: &str) -> Hmac<Sha256> {
        self.mac(&[
            b"podnet-rendezvous/1 coordinator",
            joiner_nonce.as_bytes(),
            coordinator_nonce.as_bytes(),
        ])
    }

    fn joiner_proof(&self, coordinator_nonce: &str, joiner_nonce: &str, rank: u32) -> String {
        hex::encode(self.joiner_mac(coordinator_nonce, joiner_nonce, rank).finalize().into_bytes())
    }

    fn coordinator_proof(&self, joiner_nonce: &str, coordinator_nonce: &str) -> String {
        hex::encode(self.coordinator_mac(joiner_nonce, coordinator_nonce).finalize().into_bytes())
    }
}

/// Whether a hex `proof` is `mac`'s tag (compared in constant time).
fn proves(mac: Hmac<Sha256>, proof: &str) -> bool {
    hex::decode(proof).is_ok_and(|p| mac.verify_slice(&p).is_ok())
}

fn nonce() -> String {
    let mut b = [0u8; 16];
    // Without the kernel's randomness no nonce is worth having; a fixed one would let a
    // recorded proof be replayed.
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    hex::encode(b)
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

/// What a joiner says of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Hello {
    #[serde(flatten)]
    member: Member,
    /// Missing in a hello from a podnet older than the check.
    #[serde(default)]
    world_size: Option<u32>,
    #[serde(default)]
    version: Option<String>,
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    proof: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Msg {
    Challenge {
        nonce: String,
        version: String,
        world_size: u32,
        secret: bool,
    },
    Hello(Hello),
    Refused {
        reason: String,
    },
    Roster {
        members: Vec<Member>,
        proof: Option<String>,
    },
    Heartbeat,
    Abort(Failure),
    Done {
        rank: u32,
        ok: bool,
    },
    Finish {
        ok: bool,
    },
    /// A workload's own message (rank 0 to a rank, or a rank to rank 0).
    Data(Value),
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
    #[error(
        "rank(s) {} never joined within {:?} (joined: {joined:?}){}",
        missing.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
        after,
        turned_away_text(turned_away)
    )]
    NotJoined {
        /// The ranks missing.
        missing: Vec<u32>,
        /// Those that joined.
        joined: Vec<u32>,
        /// The join timeout.
        after: Duration,
        /// The connections rank 0 turned away, and why (the first [`TURNED_AWAY_KEPT`]).
        turned_away: Vec<String>,
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
    /// Rank 0 turned this rank away.
    #[error("the coordinator {addr} turned this rank away: {reason}")]
    Refused {
        /// Rank 0's address.
        addr: SocketAddr,
        /// Its reason.
        reason: String,
    },
    /// The shared secret did not check out on this rank's side.
    #[error("the coordinator {addr}: {reason}")]
    Unauthenticated {
        /// Rank 0's address.
        addr: SocketAddr,
        /// What was wrong.
        reason: String,
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

/// How many turned-away connections rank 0 remembers for its error.
pub const TURNED_AWAY_KEPT: usize = 8;

fn turned_away_text(t: &[String]) -> String {
    if t.is_empty() { String::new() } else { format!("; turned away: {}", t.join("; ")) }
}

/// `m` as one line, newline included.
fn line_of(m: &Msg) -> std::io::Result<String> {
    let mut line = serde_json::to_string(m).map_err(std::io::Error::other)?;
    line.push('\n');
    Ok(line)
}

fn write_line(w: &Mutex<TcpStream>, line: &str) -> std::io::Result<()> {
    w.lock().unwrap_or_else(PoisonError::into_inner).write_all(line.as_bytes())
}

fn send(w: &Mutex<TcpStream>, m: &Msg) -> std::io::Result<()> {
    write_line(w, &line_of(m)?)
}

/// Reads one message of at most `limit` bytes (`None`: the peer closed). A longer line is an
/// error after `limit` bytes, whatever the peer goes on sending.
fn recv(r: &mut BufReader<TcpStream>, limit: usize) -> std::io::Result<Option<Msg>> {
    let mut line = Vec::new();
    let n = r.by_ref().take(limit as u64 + 1).read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') {
        if line.len() > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a line longer than {limit} bytes"),
            ));
        }
        // The peer closed in the middle of a line.
        return Ok(None);
    }
    serde_json::from_slice(&line)
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
        let got = recv(r, LINE_LIMIT);
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
    /// Rank 0: a lost rank is being announced to the others (its failure is published once
    /// they have been told, so that a workload that stops on it cannot close the links first).
    announcing: bool,
    /// Rank 0: which ranks said done, and how.
    done: Vec<(u32, bool)>,
    /// The others: rank 0's verdict.
    finish: Option<bool>,
    /// The workload's messages not yet taken: (from rank, body).
    inbox: std::collections::VecDeque<(u32, Value)>,
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
/// when every rank has joined (with the roster), or fails naming who is missing. With a
/// `secret`, every rank must have the same one.
pub fn join(
    world: &World,
    host: &str,
    info: Value,
    t: &Timeouts,
    secret: Option<&Secret>,
) -> Result<Session, BootstrapError> {
    let me = Member { rank: world.rank, host: host.to_string(), info };
    if world.rank == 0 { coordinate(world, me, t, secret) } else { connect(world, me, t, secret) }
}

/// What a handshake thread hands the coordinator.
enum Joined {
    /// A hello that passed every check a connection can pass alone.
    Hello {
        id: u64,
        member: Member,
        /// Rank 0's nonce for this connection, and the joiner's.
        nonces: (String, String),
        addr: SocketAddr,
        link: Link,
    },
    /// A connection turned away (already told why), or one that said nothing useful.
    Away { id: u64, why: Option<String> },
}

/// Rank 0's side of one connection: the challenge, the hello, the checks that need no other
/// connection. Runs on its own thread; rank 0 closes the socket at the handshake deadline.
fn handshake(
    id: u64,
    s: TcpStream,
    addr: SocketAddr,
    size: u32,
    secret: Option<&Secret>,
    out: &mpsc::Sender<Joined>,
) {
    let away = |why: Option<String>| {
        let _ = out.send(Joined::Away { id, why });
    };
    let Ok(w) = s.try_clone() else { return away(None) };
    let w = Arc::new(Mutex::new(w));
    let mine = nonce();
    let challenge = Msg::Challenge {
        nonce: mine.clone(),
        version: VERSION.into(),
        world_size: size,
        secret: secret.is_some(),
    };
    if send(&w, &challenge).is_err() {
        return away(None);
    }
    let mut r = BufReader::new(s);
    let hello = match recv(&mut r, HELLO_LIMIT) {
        Ok(Some(Msg::Hello(h))) => h,
        // Silence until the deadline, a closed connection, or not a rank (a port scan, a
        // stale process): nothing to say to it.
        Ok(_) => return away(None),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            let why = format!("{addr}: not a hello ({e})");
            let _ = send(&w, &Msg::Refused { reason: why.clone() });
            return away(Some(why));
        }
        Err(_) => return away(None),
    };
    let m = &hello.member;
    let who = format!("{addr} claiming rank {} ({})", m.rank, m.host);
    let refuse = |reason: String| {
        let _ = send(&w, &Msg::Refused { reason: reason.clone() });
        let _ = w.lock().unwrap_or_else(PoisonError::into_inner).flush();
        away(Some(format!("{who}: {reason}")));
    };
    if hello.version.as_deref() != Some(VERSION) {
        let theirs = hello.version.as_deref().unwrap_or("one that does not say (older)");
        return refuse(format!("it runs podnet {theirs}; rank 0 runs podnet {VERSION}"));
    }
    if hello.world_size != Some(size) {
        let theirs = hello.world_size.map_or_else(|| "none".into(), |n| n.to_string());
        return refuse(format!("it was started with world size {theirs}; this run has {size}"));
    }
    if m.rank == 0 {
        return refuse("rank 0 is the coordinator itself (two ranks started as 0?)".into());
    }
    if m.rank >= size {
        return refuse(format!("rank {} is outside the world (ranks 0..{size})", m.rank));
    }
    if let Some(secret) = secret {
        let ok = hello
            .proof
            .as_deref()
            .is_some_and(|p| proves(secret.joiner_mac(&mine, &hello.nonce, m.rank), p));
        if !ok {
            let why = if hello.proof.is_none() {
                "this run has a shared secret and it gave no proof (give it the same --secret-file \
                 or PODNET_SECRET)"
            } else {
                "its proof of the shared secret is wrong (another secret?)"
            };
            return refuse(why.into());
        }
    }
    let _ = out.send(Joined::Hello {
        id,
        member: hello.member,
        nonces: (mine, hello.nonce),
        addr,
        link: (w, r),
    });
}

fn coordinate(
    world: &World,
    me: Member,
    t: &Timeouts,
    secret: Option<&Secret>,
) -> Result<Session, BootstrapError> {
    let listener = control_listener(world.coordinator)
        .map_err(|source| BootstrapError::Bind { addr: world.coordinator, source })?;
    let _ = listener.set_nonblocking(true);
    let deadline = Instant::now() + t.join;
    let n = world.size as usize;
    let mut members: Vec<Option<Member>> = vec![None; n];
    let mut nonces: Vec<(String, String)> = vec![Default::default(); n];
    let mut claimed_from: Vec<Option<SocketAddr>> = vec![None; n];
    members[0] = Some(me);
    let mut conns: Vec<Option<Link>> = (0..n).map(|_| None).collect();
    let (tx, rx) = mpsc::channel::<Joined>();
    // The connections still in their handshake: a handle to close each at its deadline, and
    // its source address.
    let mut pending: Vec<(u64, TcpStream, Instant, std::net::IpAddr)> = Vec::new();
    let mut next_id = 0u64;
    let mut turned_away: Vec<String> = Vec::new();
    let (mut silent, mut busy) = (0usize, 0usize);
    let note = |list: &mut Vec<String>, why: String| {
        if list.len() < TURNED_AWAY_KEPT {
            list.push(why);
        }
    };
    while members.iter().any(Option::is_none) {
        let now = Instant::now();
        if now >= deadline {
            let missing = (0..n as u32).filter(|r| members[*r as usize].is_none()).collect();
            let joined = (0..n as u32).filter(|r| members[*r as usize].is_some()).collect();
            for (_, s, _, _) in &pending {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            if silent > 0 {
                note(
                    &mut turned_away,
                    format!("{silent} connection(s) said no hello within {:?}", t.handshake),
                );
            }
            if busy > 0 {
                note(
                    &mut turned_away,
                    format!(
                        "{busy} connection(s) closed for newer ones: {MAX_HANDSHAKES} handshakes \
                         ({MAX_HANDSHAKES_PER_SOURCE} from one address) were under way"
                    ),
                );
            }
            return Err(BootstrapError::NotJoined { missing, joined, after: t.join, turned_away });
        }
        let mut idle = true;
        while let Ok(j) = rx.try_recv() {
            idle = false;
            match j {
                Joined::Away { id, why } => {
                    pending.retain(|(i, _, _, _)| *i != id);
                    if let Some(why) = why {
                        note(&mut turned_away, why);
                    }
                }
                Joined::Hello { id, member, nonces: pair, addr, link } => {
                    pending.retain(|(i, _, _, _)| *i != id);
                    let rank = member.rank as usize;
                    if let Some(first) = &members[rank] {
                        let reason = format!(
                            "rank {rank} is already claimed by {} ({})",
                            first.host,
                            claimed_from[rank].map_or_else(|| "?".into(), |a| a.to_string())
                        );
                        let _ = send(&link.0, &Msg::Refused { reason: reason.clone() });
                        note(
                            &mut turned_away,
                            format!("{addr} claiming rank {rank} ({}): {reason}", member.host),
                        );
                    } else {
                        members[rank] = Some(member);
                        nonces[rank] = pair;
                        claimed_from[rank] = Some(addr);
                        conns[rank] = Some(link);
                    }
                }
            }
        }
        // Close the handshakes past their deadline: their threads end, their ranks retry.
        pending.retain(|(_, s, end, _)| {
            if now >= *end {
                let _ = s.shutdown(std::net::Shutdown::Both);
                silent += 1;
                false
            } else {
                true
            }
        });
        // (An accept error — no connection waiting, or out of descriptors — waits a moment.)
        if let Ok((s, addr)) = listener.accept() {
            {
                idle = false;
                // Room for it: the oldest handshake of its address goes when that address
                // has its share, else the oldest of all when every slot is taken (a rank
                // answers in milliseconds: the oldest is the one least likely a rank's).
                let from = addr.ip();
                let mine = pending.iter().filter(|p| p.3 == from).count();
                let oldest = if mine >= MAX_HANDSHAKES_PER_SOURCE {
                    pending.iter().position(|p| p.3 == from)
                } else if pending.len() >= MAX_HANDSHAKES {
                    Some(0)
                } else {
                    None
                };
                if let Some(i) = oldest {
                    let (_, old, _, _) = pending.remove(i);
                    let _ = old.shutdown(std::net::Shutdown::Both);
                    busy += 1;
                }
                let _ = s.set_nonblocking(false);
                let end = (now + t.handshake.min(HELLO_WITHIN)).min(deadline);
                let _ = s.set_read_timeout(Some(
                    end.saturating_duration_since(now).max(Duration::from_millis(10)),
                ));
                let _ = s.set_write_timeout(Some(t.handshake.max(Duration::from_millis(10))));
                let Ok(handle) = s.try_clone() else { continue };
                let id = next_id;
                next_id += 1;
                pending.push((id, handle, end, from));
                let (tx, secret) = (tx.clone(), secret.cloned());
                let size = world.size;
                std::thread::spawn(move || handshake(id, s, addr, size, secret.as_ref(), &tx));
            }
        }
        if idle {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // Handshakes still under way when the last rank joined: closed.
    for (_, s, _, _) in &pending {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    let roster: Vec<Member> = members.into_iter().flatten().collect();
    let shared = Arc::new(Mutex::new(Shared::default()));
    let gap = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let links: Vec<Option<Arc<Mutex<TcpStream>>>> =
        conns.iter().map(|c| c.as_ref().map(|(w, _)| w.clone())).collect();
    for (rank, w) in links.iter().enumerate() {
        let Some(w) = w else { continue };
        let (coordinator_nonce, joiner_nonce) = &nonces[rank];
        let proof = secret.map(|s| s.coordinator_proof(joiner_nonce, coordinator_nonce));
        send(w, &Msg::Roster { members: roster.clone(), proof })
            .map_err(|e| BootstrapError::Protocol(format!("sending the roster: {e}")))?;
    }
    // A reader per rank: heartbeats keep it alive; silence or a closed connection loses it,
    // and every other rank hears which.
    let heard = Arc::new(Heard::new(conns.len(), t.dead_after));
    let me = roster.first().map(|m| m.host.clone()).unwrap_or_default();
    for (rank, c) in conns.into_iter().enumerate() {
        let Some((_, mut r)) = c else { continue };
        let (shared, stop, links, host) =
            (shared.clone(), stop.clone(), links.clone(), roster[rank].host.clone());
        let (gap, heard, me) = (gap.clone(), heard.clone(), me.clone());
        let dead = t.dead_after;
        let _ = r.get_ref().set_read_timeout(Some(dead));
        std::thread::spawn(move || {
            let reason = watch(&mut r, dead, &gap, |m| {
                heard.from(rank);
                match m {
                    Msg::Done { ok, .. } => lock(&shared).done.push((rank as u32, ok)),
                    Msg::Data(v) => lock(&shared).inbox.push_back((rank as u32, v)),
                    _ => {}
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
            if s.failure.is_none() && !s.announcing {
                s.announcing = true;
                drop(s);
                let f = match heard.cut_off(rank) {
                    Some(reason) => Failure { rank: 0, host: me, reason },
                    None => Failure { rank: rank as u32, host, reason },
                };
                for (k, w) in links.iter().enumerate() {
                    if k != rank
                        && let Some(w) = w
                    {
                        let _ = send(w, &Msg::Abort(f.clone()));
                    }
                }
                lock(&shared).failure = Some(f);
            }
        });
    }
    heartbeats(links.clone(), stop.clone(), t.heartbeat);
    Ok(Session { world: world.clone(), roster, shared, stop, links, timeouts: *t, gap })
}

/// When rank 0 last heard from each rank, and from any: what tells a rank that went silent
/// from rank 0's own control path cut (its cable, NIC or network), which silences every rank
/// at once.
struct Heard {
    base: Instant,
    /// Per rank, ns since `base`.
    last: Vec<AtomicU64>,
    /// From any rank, ns since `base`.
    any: AtomicU64,
    /// The last stretch of half of `dead` or more with no word from any rank: its end
    /// (since `base`) and its length, ns.
    quiet_end: AtomicU64,
    quiet_len: AtomicU64,
    dead: Duration,
}

impl Heard {
    fn new(ranks: usize, dead: Duration) -> Heard {
        Heard {
            base: Instant::now(),
            last: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            any: AtomicU64::new(0),
            quiet_end: AtomicU64::new(0),
            quiet_len: AtomicU64::new(0),
            dead,
        }
    }

    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// A message from `rank`.
    fn from(&self, rank: usize) {
        let now = self.now();
        self.last[rank].store(now, Ordering::Relaxed);
        let before = self.any.swap(now, Ordering::Relaxed);
        let gap = now.saturating_sub(before);
        if gap >= (self.dead / 2).as_nanos() as u64 {
            self.quiet_len.store(gap, Ordering::Relaxed);
            self.quiet_end.store(now, Ordering::Relaxed);
        }
    }

    /// Rank `lost` went silent: whether every other rank went silent with it — none heard
    /// from for half of `dead` now, or (two others or more) none for half of `dead` at once
    /// while `lost` was silent (a cable that flaps: the others came back, `lost`'s
    /// connection, its retransmissions backed off, not yet) — and why, then. Needs two ranks
    /// or more besides rank 0 (one cannot tell its path from rank 0's).
    fn cut_off(&self, lost: usize) -> Option<String> {
        let now = self.now();
        let others: Vec<u64> = (1..self.last.len())
            .filter(|k| *k != lost)
            .map(|k| now.saturating_sub(self.last[k].load(Ordering::Relaxed)))
            .collect();
        let half = (self.dead / 2).as_nanos() as u64;
        if others.is_empty() {
            return None;
        }
        let ranks = self.last.len() - 1;
        if others.iter().all(|s| *s >= half) {
            let least = Duration::from_nanos(others.iter().copied().min().unwrap_or(0));
            return Some(format!(
                "heard from none of the {ranks} other ranks for {:.1} s or more: all went silent \
                 at once, so the cut is this host's own control path (its cable, NIC or network)",
                least.as_secs_f64()
            ));
        }
        let (end, len) =
            (self.quiet_end.load(Ordering::Relaxed), self.quiet_len.load(Ordering::Relaxed));
        let window = self.dead.as_nanos() as u64 + half;
        (others.len() >= 2 && len > 0 && now.saturating_sub(end) <= window).then(|| {
            format!(
                "lost rank {lost}, silent since none of the {ranks} ranks was heard from for \
                 {:.1} s at once ({:.1} s ago) and the others came back: the cut is this \
                 host's own control path (its cable, NIC or network), coming and going",
                Duration::from_nanos(len).as_secs_f64(),
                Duration::from_nanos(now.saturating_sub(end)).as_secs_f64()
            )
        })
    }
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

/// The largest TCP segment the rendezvous sends, and asks its peer for: 536 bytes, what every
/// IPv4 host must take. The ranks' connections cross the pod's own fabric, where one link
/// whose MTU is smaller than the hosts' (a misconfigured cable or port, and a fabric that
/// sends no ICMP) drops every full-size segment: the rank would look dead to rank 0, and the
/// MTU fault — which qualify's near-MTU probes exist to name — would pass for a dead host.
pub const CONTROL_MSS: u32 = 536;

/// A TCP socket for `addr`'s family with its segments at most [`CONTROL_MSS`].
fn control_socket(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_tcp_mss(CONTROL_MSS)?;
    Ok(s)
}

/// Rank 0's listener at `addr`: its connections' segments at most [`CONTROL_MSS`] (the
/// accepted sockets take the option from it).
fn control_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = control_socket(addr)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(128)?;
    Ok(s.into())
}

/// One try at rank 0: connect, read the challenge. `Err` for what is worth another try (rank 0
/// not listening yet, or busy).
fn reach(world: &World, t: &Timeouts) -> std::io::Result<(TcpStream, BufReader<TcpStream>, Msg)> {
    let s = control_socket(world.coordinator)?;
    s.connect_timeout(&world.coordinator.into(), Duration::from_secs(1))?;
    let s = TcpStream::from(s);
    s.set_read_timeout(Some(t.handshake.max(Duration::from_millis(10))))?;
    s.set_write_timeout(Some(t.handshake.max(Duration::from_millis(10))))?;
    let mut r = BufReader::new(s.try_clone()?);
    match recv(&mut r, LINE_LIMIT) {
        Ok(Some(m)) => Ok((s, r, m)),
        Ok(None) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the coordinator closed the connection before its challenge (busy?)",
        )),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Err(std::io::Error::new(
                e.kind(),
                format!(
                    "connected, but no challenge came within {:?} (a podnet older than {VERSION}, \
                     or not podnet, listens there?)",
                    t.handshake
                ),
            ))
        }
        Err(e) => Err(e),
    }
}

fn connect(
    world: &World,
    me: Member,
    t: &Timeouts,
    secret: Option<&Secret>,
) -> Result<Session, BootstrapError> {
    let addr = world.coordinator;
    let deadline = Instant::now() + t.join;
    let (s, mut r, challenge) = loop {
        match reach(world, t) {
            Ok(got) => break got,
            Err(e) if Instant::now() >= deadline => {
                return Err(BootstrapError::Unreachable { addr, after: t.join, source: e });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let Msg::Challenge { nonce: theirs, version, world_size, secret: wants_secret } = challenge
    else {
        return Err(BootstrapError::Protocol(format!(
            "expected rank 0's challenge, got {challenge:?} (a podnet older than {VERSION}?)"
        )));
    };
    if secret.is_some() && !wants_secret {
        // Do not tell an impostor who we are.
        return Err(BootstrapError::Unauthenticated {
            addr,
            reason: format!(
                "this rank has a shared secret but the coordinator (podnet {version}, world size \
                 {world_size}) asks for none: give rank 0 the same secret"
            ),
        });
    }
    let mine = nonce();
    let proof = secret.map(|s| s.joiner_proof(&theirs, &mine, me.rank));
    let hello = Hello {
        member: me,
        world_size: Some(world.size),
        version: Some(VERSION.into()),
        nonce: mine.clone(),
        proof,
    };
    let w = Arc::new(Mutex::new(s));
    send(&w, &Msg::Hello(hello))
        .map_err(|e| BootstrapError::Protocol(format!("saying hello: {e}")))?;
    // Rank 0 answers when every rank has joined, within its join timeout.
    let _ = r.get_ref().set_read_timeout(Some(t.join + t.dead_after));
    let (roster, proof) = match recv(&mut r, ROSTER_LIMIT) {
        Ok(Some(Msg::Roster { members, proof })) => (members, proof),
        Ok(Some(Msg::Refused { reason })) => return Err(BootstrapError::Refused { addr, reason }),
        Ok(Some(Msg::Abort(f))) => return Err(f.into()),
        Ok(None) => {
            return Err(Failure {
                rank: 0,
                host: addr.to_string(),
                reason: "closed the bootstrap before every rank joined".into(),
            }
            .into());
        }
        Ok(Some(m)) => {
            return Err(BootstrapError::Protocol(format!("expected the roster, got {m:?}")));
        }
        Err(e) => return Err(BootstrapError::Protocol(format!("waiting for the roster: {e}"))),
    };
    if let Some(secret) = secret {
        let ok =
            proof.as_deref().is_some_and(|p| proves(secret.coordinator_mac(&mine, &theirs), p));
        if !ok {
            return Err(BootstrapError::Unauthenticated {
                addr,
                reason: "its roster does not prove the shared secret: not following it".into(),
            });
        }
    }
    let coordinator_host = roster.first().map_or_else(|| addr.to_string(), |m| m.host.clone());
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
                Msg::Data(v) => {
                    lock(&shared).inbox.push_back((0, v));
                    true
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

    /// Sends the workload's message `body` to rank `to`: rank 0 to any other rank, the others
    /// to rank 0 only. A message is one line of at most [`LINE_LIMIT`] bytes.
    pub fn send(&self, to: u32, body: Value) -> Result<(), BootstrapError> {
        let link = if self.world.rank == 0 {
            self.links.get(to as usize).and_then(Clone::clone)
        } else if to == 0 {
            self.links.first().and_then(Clone::clone)
        } else {
            None
        };
        let Some(w) = link else {
            return Err(BootstrapError::Protocol(format!(
                "rank {} has no link to rank {to} (only rank 0 speaks to every rank)",
                self.world.rank
            )));
        };
        let sending =
            |e: std::io::Error| BootstrapError::Protocol(format!("sending to rank {to}: {e}"));
        let line = line_of(&Msg::Data(body)).map_err(sending)?;
        // The reader takes at most LINE_LIMIT bytes before the newline.
        let len = line.len() - 1;
        if len >= LINE_LIMIT {
            return Err(BootstrapError::Protocol(format!(
                "a message of {len} bytes is over the {LINE_LIMIT}-byte line limit"
            )));
        }
        write_line(&w, &line).map_err(sending)
    }

    /// The next message of the workload, (from rank, body), waiting at most `timeout`
    /// (`Ok(None)`: none came). Messages that came before a rank was lost are taken first;
    /// then the loss is the error.
    pub fn recv(&self, timeout: Duration) -> Result<Option<(u32, Value)>, BootstrapError> {
        let until = Instant::now() + timeout;
        loop {
            let mut s = lock(&self.shared);
            if let Some(m) = s.inbox.pop_front() {
                return Ok(Some(m));
            }
            if let Some(f) = &s.failure {
                return Err(f.clone().into());
            }
            drop(s);
            if Instant::now() >= until {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A rank lost so far (the workload checks it, and stops).
    pub fn failure(&self) -> Option<Failure> {
        lock(&self.shared).failure.clone()
    }

    /// Ends the run: every rank says whether its part went well; rank 0 waits for all of
    /// them and tells everyone the verdict. Fails if a rank was lost or reported a failure.
    pub fn finish(&self, ok: bool) -> Result<(), BootstrapError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranks_connections_send_segments_no_larger_than_any_ipv4_path_takes() {
        let listener = control_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let s = control_socket(addr).unwrap();
        s.connect(&addr.into()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        // Loopback's MTU is 64 KiB: without the option each side's MSS is near it.
        let mss = |t: &TcpStream| socket2::SockRef::from(t).tcp_mss().unwrap();
        assert!(s.tcp_mss().unwrap() <= CONTROL_MSS, "{}", s.tcp_mss().unwrap());
        assert!(mss(&accepted) <= CONTROL_MSS, "{}", mss(&accepted));
    }
}
