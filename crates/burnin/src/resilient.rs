//! The resilient burn-in (`podnet burnin --resilient --pod PLAN`): the patterns' SEND streams
//! over the pod agent's channels — reliable, ordered, failing over along the route table — so
//! that the run goes on through a failure. Each message carries a header (kind, source,
//! destination, its index) and a seeded pattern checked where it lands; a host that dies has
//! its messages reported undeliverable by sequence number, and among the survivors every
//! message must arrive once, in order, undamaged. At the end each host tells each peer how many
//! messages it sent it (in order, after the last), so each receiver checks its count.
//!
//! [`run`] is a host's part over a joined [`PodAgent`]; [`PeerTally::take`] is the receiving
//! check, [`judge`] the verdict — each testable without a pod.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use perf::engine::pattern;
use pod::agent::{PodAgent, WINDOW};
use pod::member::Health;
use serde::Serialize;

use crate::pattern::Pattern;

/// A message's header: kind 1 (0 data, 1 done), src 2, dst 2, pad 3, count 8 (done: the
/// messages sent).
pub const HEAD: usize = 16;

/// A message's header bytes.
pub fn header(kind: u8, src: usize, dst: usize, count: u64) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    h[0] = kind;
    h[1..3].copy_from_slice(&(src as u16).to_be_bytes());
    h[3..5].copy_from_slice(&(dst as u16).to_be_bytes());
    h[8..16].copy_from_slice(&count.to_be_bytes());
    h
}

/// The pattern seed of the stream from `src` to `dst`.
pub fn seed(src: usize, dst: usize) -> u64 {
    0x7265_7369_6c69_656e ^ ((src as u64) << 16) ^ dst as u64
}

/// One data message of the stream `src` → `dst`: its header and its pattern.
pub fn message(src: usize, dst: usize, index: u64, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size.max(HEAD)];
    buf[..HEAD].copy_from_slice(&header(0, src, dst, index));
    pattern::fill(seed(src, dst), 0, index, &mut buf[HEAD..]);
    buf
}

/// What this host counted of one peer, both ways.
#[derive(Debug, Default, Clone)]
pub struct PeerTally {
    /// Data messages sent to it.
    pub sent: u64,
    /// Data messages received from it.
    pub received: u64,
    /// Received with a wrong header or pattern.
    pub damaged: u64,
    /// Received again (an index already seen).
    pub duplicates: u64,
    /// Indexes skipped.
    pub gaps: u64,
    /// Sequence numbers the channel gave up on.
    pub undeliverable: Vec<u64>,
    /// The count the peer said it sent this host (its `done`).
    pub told: Option<u64>,
    done_sent: bool,
    acked: u64,
    last_progress: Option<Instant>,
    /// The longest wait for an acknowledgement.
    pub max_stall: Duration,
    /// When it ended, Unix ms.
    pub stall_at_ms: u64,
    next_seq: u64,
}

impl PeerTally {
    /// Checks a message that arrived from `src` at host `me`: its header, its place in the
    /// stream, its pattern.
    pub fn take(&mut self, src: usize, me: usize, m: &[u8]) {
        if m.len() < HEAD || usize::from(u16::from_be_bytes([m[1], m[2]])) != src {
            self.damaged += 1;
            return;
        }
        let count = u64::from_be_bytes(m[8..16].try_into().unwrap_or_default());
        if m[0] == 1 {
            self.told = Some(count);
            return;
        }
        match count.cmp(&self.next_seq) {
            std::cmp::Ordering::Less => self.duplicates += 1,
            std::cmp::Ordering::Greater => {
                self.gaps += count - self.next_seq;
                self.next_seq = count + 1;
            }
            std::cmp::Ordering::Equal => self.next_seq += 1,
        }
        if pattern::check(seed(src, me), 0, count, &m[HEAD..]).is_some() {
            self.damaged += 1;
        }
        self.received += 1;
    }

    /// Progress: acknowledged messages (sent, done included, less `pending` and lost); the
    /// longest time without it.
    fn progress(&mut self, pending: u64, now: Instant) {
        let acked = (self.sent + u64::from(self.done_sent))
            .saturating_sub(pending + self.undeliverable.len() as u64);
        if acked > self.acked || pending == 0 {
            self.acked = acked;
            self.last_progress = Some(now);
        } else if let Some(lp) = self.last_progress {
            let stall = now.duration_since(lp);
            if stall > self.max_stall {
                self.max_stall = stall;
                self.stall_at_ms = unix_ms();
            }
        } else {
            self.last_progress = Some(now);
        }
    }
}

/// A host's part of the run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// This host's index in the pod.
    pub me: usize,
    /// The pod's host names.
    pub names: Vec<String>,
    /// The patterns whose edges carry streams (SEND patterns).
    pub patterns: Vec<Pattern>,
    /// A message's size, bytes (at least [`HEAD`]).
    pub size: usize,
    /// How long to send.
    pub seconds: Duration,
    /// Bytes per second at most (0: no limit).
    pub rate: f64,
}

/// The totals shown while the run goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Messages sent.
    pub sent: u64,
    /// Messages received and checked.
    pub received: u64,
    /// Messages the channels gave up on.
    pub undeliverable: usize,
}

/// One peer's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct PeerResult {
    /// The peer's name.
    pub peer: String,
    /// Declared down by the membership by the end.
    pub down: bool,
    /// Messages sent to it.
    pub sent: u64,
    /// Messages received from it.
    pub received: u64,
    /// What it said it sent.
    pub told: Option<u64>,
    /// Damaged.
    pub damaged: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Indexes skipped.
    pub gaps: u64,
    /// The undeliverable sequence numbers (`1-5,9`).
    pub undeliverable: String,
    /// How many.
    pub undeliverable_count: usize,
    /// The longest wait for an acknowledgement, ms.
    pub max_stall_ms: u64,
    /// When it ended, Unix ms.
    pub max_stall_at_unix_ms: u64,
    /// Every message once, in order, undamaged, the count as told.
    pub every_message_once: bool,
}

/// The peers' verdicts: a peer passes when nothing it sent was damaged, duplicated or
/// skipped and its count is as it told (a peer that is `down` may have gaps, no count, and
/// messages to it undeliverable). `from`: the peers that send to this host. Whether all pass.
pub fn judge(
    tally: &BTreeMap<usize, PeerTally>,
    from: &[usize],
    down: &[usize],
    names: &[String],
) -> (bool, Vec<PeerResult>) {
    let mut ok = true;
    let mut peers = Vec::new();
    for (&p, t) in tally {
        let is_dead = down.contains(&p);
        let count_ok = match t.told {
            Some(c) => c == t.received,
            None => is_dead || !from.contains(&p),
        };
        let clean = t.damaged == 0 && t.duplicates == 0 && (t.gaps == 0 || is_dead) && count_ok;
        let lost_ok = t.undeliverable.is_empty() || is_dead;
        ok &= clean && lost_ok;
        peers.push(PeerResult {
            peer: names.get(p).cloned().unwrap_or_else(|| p.to_string()),
            down: is_dead,
            sent: t.sent,
            received: t.received,
            told: t.told,
            damaged: t.damaged,
            duplicates: t.duplicates,
            gaps: t.gaps,
            undeliverable: ranges(&t.undeliverable),
            undeliverable_count: t.undeliverable.len(),
            max_stall_ms: t.max_stall.as_millis() as u64,
            max_stall_at_unix_ms: t.stall_at_ms,
            every_message_once: clean,
        });
    }
    (ok, peers)
}

/// A host's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every peer passed.
    pub ok: bool,
    /// Each peer's verdict.
    pub peers: Vec<PeerResult>,
    /// The hosts declared down at the end.
    pub down: Vec<usize>,
    /// Messages sent and received, in all.
    pub totals: Totals,
    /// How long it ran.
    pub elapsed: Duration,
}

/// The streams of one host: whom it sends to and whom it hears from, per the patterns.
fn edges(patterns: &[Pattern], me: usize, n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut to: Vec<usize> = Vec::new();
    let mut from: Vec<usize> = Vec::new();
    for p in patterns {
        for (a, b) in p.edges(n as u32) {
            let (a, b) = (a as usize, b as usize);
            if a == me && b != me && !to.contains(&b) {
                to.push(b);
            }
            if b == me && a != me && !from.contains(&a) {
                from.push(a);
            }
        }
    }
    (to, from)
}

/// The hosts the membership has declared down.
fn down_hosts(agent: &PodAgent) -> Vec<usize> {
    agent.status().members.iter().filter(|m| m.health == Health::Down).map(|m| m.index).collect()
}

/// The run's state on this host.
struct Run<'a> {
    agent: &'a PodAgent,
    plan: &'a Plan,
    to: Vec<usize>,
    from: Vec<usize>,
    tally: BTreeMap<usize, PeerTally>,
    t0: Instant,
    spent: f64,
    turn: usize,
    dead_now: Vec<usize>,
}

impl Run<'_> {
    fn totals(&self) -> Totals {
        Totals {
            sent: self.tally.values().map(|t| t.sent).sum(),
            received: self.tally.values().map(|t| t.received).sum(),
            undeliverable: self.tally.values().map(|t| t.undeliverable.len()).sum(),
        }
    }

    /// Sends a message per live peer in turn while windows have room and the rate allows.
    fn send(&mut self, now: Instant) -> Result<(), pod::agent::Error> {
        let (me, size, rate) = (self.plan.me, self.plan.size, self.plan.rate);
        let elapsed = now.duration_since(self.t0).as_secs_f64();
        let live: Vec<usize> =
            self.to.iter().copied().filter(|p| !self.dead_now.contains(p)).collect();
        let mut moved = true;
        while moved && !live.is_empty() {
            moved = false;
            for k in 0..live.len() {
                let p = live[(self.turn + k) % live.len()];
                let budget = rate == 0.0 || self.spent + size as f64 <= rate * elapsed;
                if self.agent.pending(p) >= WINDOW || !budget {
                    continue;
                }
                let t = self.tally.entry(p).or_default();
                self.spent += size as f64;
                self.agent.send(p, message(me, p, t.sent, size))?;
                t.sent += 1;
                moved = true;
            }
        }
        self.turn += 1;
        Ok(())
    }

    /// After the sending time, the `done` message to each live peer; progress per peer.
    fn follow(&mut self, sending: bool, now: Instant) -> Result<(), pod::agent::Error> {
        let me = self.plan.me;
        for &p in &self.to {
            let t = self.tally.entry(p).or_default();
            if !sending && !t.done_sent && !self.dead_now.contains(&p) {
                self.agent.send(p, header(1, me, p, t.sent).to_vec())?;
                t.done_sent = true;
            }
            t.progress(self.agent.pending(p) as u64, now);
        }
        self.collect_undeliverable();
        Ok(())
    }

    fn collect_undeliverable(&mut self) {
        for u in self.agent.take_undeliverable() {
            if let Some(t) = self.tally.get_mut(&usize::from(u.peer)) {
                t.undeliverable.push(u.seq);
            }
        }
    }

    /// Receives and checks a batch at most: sending must not starve while messages keep
    /// arriving.
    fn receive(&mut self) {
        let mut batch = 0;
        while batch < 256
            && let Some(d) = self.agent.recv(Duration::from_millis(2))
        {
            batch += 1;
            let src = usize::from(d.peer);
            self.tally.entry(src).or_default().take(src, self.plan.me, &d.payload);
        }
    }

    /// Every live peer has acknowledged everything and said what it sent.
    fn settled(&self) -> bool {
        self.tally.iter().all(|(&p, t)| {
            let dead = self.dead_now.contains(&p);
            let out_done = !self.to.contains(&p) || self.agent.pending(p) == 0 || dead;
            let in_done = !self.from.contains(&p) || t.told.is_some() || dead;
            out_done && in_done
        })
    }
}

/// Runs this host's part over `agent` (joined, every host alive): sends for
/// `plan.seconds`, then drains (15 s at most) until every live peer has acknowledged and
/// told its count; `tick` is called with the totals every half second.
pub fn run(
    agent: &PodAgent,
    plan: &Plan,
    tick: &mut dyn FnMut(&Totals),
) -> Result<Outcome, pod::agent::Error> {
    let (to, from) = edges(&plan.patterns, plan.me, plan.names.len());
    let mut tally: BTreeMap<usize, PeerTally> = BTreeMap::new();
    for &p in to.iter().chain(&from) {
        tally.entry(p).or_default();
    }
    let t0 = Instant::now();
    let mut r = Run { agent, plan, to, from, tally, t0, spent: 0.0, turn: 0, dead_now: Vec::new() };
    let drain_limit = plan.seconds + Duration::from_secs(15);
    let (mut last_tick, mut dead_at) = (t0, t0);
    loop {
        let now = Instant::now();
        let sending = now.duration_since(t0) < plan.seconds;
        if now.duration_since(dead_at) >= Duration::from_millis(200) {
            dead_at = now;
            r.dead_now = down_hosts(agent);
        }
        if sending {
            r.send(now)?;
        }
        r.follow(sending, now)?;
        r.receive();
        if now.duration_since(last_tick) >= Duration::from_millis(500) {
            last_tick = now;
            tick(&r.totals());
        }
        if !sending && (r.settled() || now.duration_since(t0) > drain_limit) {
            break;
        }
    }
    // Whatever is still queued to a host that is down will never be delivered: say so.
    let down = down_hosts(agent);
    for &p in r.to.iter().filter(|p| down.contains(p)) {
        agent.give_up(p);
    }
    r.collect_undeliverable();
    let (ok, peers) = judge(&r.tally, &r.from, &down, &plan.names);
    Ok(Outcome { ok, peers, down, totals: r.totals(), elapsed: t0.elapsed() })
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `1-5,9` from numbers.
pub fn ranges(v: &[u64]) -> String {
    let mut v = v.to_vec();
    v.sort_unstable();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        (0..3).map(|i| format!("h{i}")).collect()
    }

    /// A stream of 10 from host 1 to host 0, told as sent: it passes.
    fn clean() -> PeerTally {
        let mut t = PeerTally::default();
        for i in 0..10 {
            t.take(1, 0, &message(1, 0, i, 256));
        }
        t.take(1, 0, &header(1, 1, 0, 10));
        t
    }

    #[test]
    fn a_clean_stream_passes() {
        let t = clean();
        assert_eq!((t.received, t.damaged, t.duplicates, t.gaps, t.told), (10, 0, 0, 0, Some(10)));
        let (ok, peers) = judge(&BTreeMap::from([(1, t)]), &[1], &[], &names());
        assert!(ok, "{peers:?}");
        assert!(peers[0].every_message_once);
    }

    /// Each fault the check exists for is counted and fails the peer: a flipped payload
    /// byte, a header from another host, a message twice, one skipped, a count that
    /// disagrees, a message the channel gave up on to a live peer.
    #[test]
    fn every_fault_is_counted_and_fails_the_peer() {
        type Fault = Box<dyn Fn(&mut PeerTally)>;
        let faults: Vec<(&str, Fault)> = vec![
            (
                "damaged",
                Box::new(|t| {
                    let mut m = message(1, 0, 10, 256);
                    m[100] ^= 1;
                    t.take(1, 0, &m);
                }),
            ),
            ("wrong source", Box::new(|t| t.take(1, 0, &message(2, 0, 10, 256)))),
            ("duplicate", Box::new(|t| t.take(1, 0, &message(1, 0, 3, 256)))),
            ("gap", Box::new(|t| t.take(1, 0, &message(1, 0, 12, 256)))),
            ("miscount", Box::new(|t| t.take(1, 0, &header(1, 1, 0, 11)))),
            ("undeliverable", Box::new(|t| t.undeliverable.push(7))),
            ("short", Box::new(|t| t.take(1, 0, &[0u8; 8]))),
        ];
        for (what, fault) in faults {
            let mut t = clean();
            fault(&mut t);
            let (ok, peers) = judge(&BTreeMap::from([(1, t)]), &[1], &[], &names());
            assert!(!ok, "{what} passed: {peers:?}");
        }
    }

    /// A peer that died may leave gaps, no count and undeliverable messages: excused; but
    /// damage from it still fails.
    #[test]
    fn a_dead_peer_is_excused_its_losses_not_its_damage() {
        let mut t = PeerTally::default();
        for i in [0, 1, 5] {
            t.take(1, 0, &message(1, 0, i, 64));
        }
        t.undeliverable.extend([3, 4, 5, 9]);
        let (ok, peers) = judge(&BTreeMap::from([(1, t.clone())]), &[1], &[1], &names());
        assert!(ok, "{peers:?}");
        assert_eq!(peers[0].undeliverable, "3-5,9");
        let mut m = message(1, 0, 6, 64);
        m[40] ^= 0x80;
        t.take(1, 0, &m);
        assert!(!judge(&BTreeMap::from([(1, t)]), &[1], &[1], &names()).0);
    }

    #[test]
    fn streams_follow_the_patterns_edges() {
        let all = Pattern::from_name("all-to-all").unwrap();
        let (to, from) = edges(&[all], 1, 3);
        assert_eq!((to.len(), from.len()), (2, 2));
        assert!(!to.contains(&1) && !from.contains(&1));
    }
}
