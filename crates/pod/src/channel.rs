//! Pod channels, sans-IO: reliable, ordered messages between hosts above whatever carries
//! them (RC QPs along the route table's routes), so that a route change — a QP torn down
//! with messages in flight, the same messages sent again on another path, the old path
//! delivering late — neither loses nor duplicates a message. Each message has a channel
//! sequence number; the receiver delivers in order, once, and acknowledges cumulatively; the
//! sender keeps what is not acknowledged and sends it again after a route change or a
//! timeout. A peer declared down (or restarted: a new incarnation) takes its channel with
//! it: every message not acknowledged is reported undeliverable, by sequence number, never
//! dropped silently.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

/// The frame format's magic (`PDCH`).
const MAGIC: u32 = 0x5044_4348;
/// Bytes of a frame's header: magic 4, kind 1, pad 1, src 2, dst 2, pad 2, src incarnation
/// 8, dst incarnation 8, seq 8, len 4.
pub const HEADER: usize = 40;

/// A frame on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// An acknowledgement (else data).
    pub ack: bool,
    /// The sending host.
    pub src: u16,
    /// The destination host (a relay forwards a frame that is not for it).
    pub dst: u16,
    /// The sender's incarnation.
    pub src_inc: u64,
    /// The incarnation of the destination the sender knows (0: not known yet).
    pub dst_inc: u64,
    /// Data: the message's sequence number; ack: the next sequence number expected.
    pub seq: u64,
    /// The message (empty for an ack).
    pub payload: Vec<u8>,
}

impl Frame {
    /// The frame's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER + self.payload.len());
        b.extend_from_slice(&MAGIC.to_be_bytes());
        b.push(u8::from(self.ack));
        b.push(0);
        b.extend_from_slice(&self.src.to_be_bytes());
        b.extend_from_slice(&self.dst.to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&self.src_inc.to_be_bytes());
        b.extend_from_slice(&self.dst_inc.to_be_bytes());
        b.extend_from_slice(&self.seq.to_be_bytes());
        b.extend_from_slice(&(self.payload.len() as u32).to_be_bytes());
        b.extend_from_slice(&self.payload);
        b
    }

    /// A frame from its bytes; `None` if they are not one.
    pub fn decode(b: &[u8]) -> Option<Frame> {
        let h = b.get(..HEADER)?;
        let u64_at = |i: usize| u64::from_be_bytes(h[i..i + 8].try_into().unwrap_or_default());
        if u32::from_be_bytes([h[0], h[1], h[2], h[3]]) != MAGIC || h[4] > 1 {
            return None;
        }
        let len = u32::from_be_bytes([h[36], h[37], h[38], h[39]]) as usize;
        let payload = b.get(HEADER..HEADER + len)?.to_vec();
        Some(Frame {
            ack: h[4] == 1,
            src: u16::from_be_bytes([h[6], h[7]]),
            dst: u16::from_be_bytes([h[8], h[9]]),
            src_inc: u64_at(12),
            dst_inc: u64_at(20),
            seq: u64_at(28),
            payload,
        })
    }
}

/// A message delivered, in order, once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// From which host.
    pub peer: u16,
    /// Its channel sequence number.
    pub seq: u64,
    /// The message.
    pub payload: Vec<u8>,
}

/// A message that will never be delivered: its peer went down (or restarted) before
/// acknowledging it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Undeliverable {
    /// To which host.
    pub peer: u16,
    /// Its channel sequence number.
    pub seq: u64,
    /// Why.
    pub why: String,
}

#[derive(Debug, Default)]
struct Peer {
    /// The peer's incarnation (0: unknown yet).
    inc: u64,
    next: u64,
    /// Sent, not acknowledged: seq → (message, last sent).
    unacked: BTreeMap<u64, (Vec<u8>, Option<Instant>)>,
    /// Waiting for the window.
    queued: VecDeque<(u64, Vec<u8>)>,
    /// Everything below this was acknowledged.
    acked: u64,
    expected: u64,
    early: BTreeMap<u64, Vec<u8>>,
    ack_due: bool,
    /// Messages sent to it or received from it.
    traffic: u64,
}

/// Counters of a host's channels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ChannelCounters {
    /// Messages delivered.
    pub delivered: u64,
    /// Duplicates received and dropped.
    pub duplicates: u64,
    /// Messages sent again (route change or timeout).
    pub resent: u64,
    /// Frames of an old incarnation dropped.
    pub stale: u64,
    /// Messages reported undeliverable.
    pub undeliverable: u64,
    /// Data frames refused for being beyond the receive window (a peer that does not keep
    /// to it): not buffered.
    pub beyond_window: u64,
    /// Protocol errors: an acknowledgement of messages never sent. The channel is given up
    /// (every message not acknowledged reported undeliverable), never trimmed silently.
    pub protocol_errors: u64,
}

/// This host's channels to every peer.
#[derive(Debug)]
pub struct Channels {
    me: u16,
    inc: u64,
    window: usize,
    rto: Duration,
    peers: BTreeMap<u16, Peer>,
    delivered: Vec<Delivered>,
    lost: Vec<Undeliverable>,
    counters: ChannelCounters,
}

impl Channels {
    /// The peers this host has sent messages to or received messages from.
    pub fn peers(&self) -> Vec<u16> {
        self.peers.iter().filter(|(_, p)| p.traffic > 0).map(|(h, _)| *h).collect()
    }

    /// When [`Channels::poll_frames`] has something to send again (the earliest
    /// retransmission); `None` when nothing is in flight (nothing to do until a message is
    /// queued or a frame arrives).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.peers
            .values()
            .flat_map(|p| p.unacked.values())
            .map(|(_, sent)| sent.map_or(Instant::now(), |t| t + self.rto))
            .min()
    }

    /// Host `me`'s channels, in its incarnation `inc`: at most `window` messages in flight
    /// per peer, sent again after `rto` unacknowledged.
    pub fn new(me: u16, inc: u64, window: usize, rto: Duration) -> Channels {
        Channels {
            me,
            inc,
            window: window.max(1),
            rto,
            peers: BTreeMap::new(),
            delivered: Vec::new(),
            lost: Vec::new(),
            counters: ChannelCounters::default(),
        }
    }

    /// Queues a message to `peer`; its sequence number.
    pub fn send(&mut self, peer: u16, payload: Vec<u8>) -> u64 {
        let p = self.peers.entry(peer).or_default();
        let seq = p.next;
        p.next += 1;
        p.traffic += 1;
        p.queued.push_back((seq, payload));
        seq
    }

    /// Messages to `peer` not acknowledged yet (in flight and queued).
    pub fn pending(&self, peer: u16) -> usize {
        self.peers.get(&peer).map_or(0, |p| p.unacked.len() + p.queued.len())
    }

    /// The frames to send now, by peer: acknowledgements due, messages the window lets out,
    /// messages unacknowledged for longer than the timeout.
    pub fn poll_frames(&mut self, now: Instant) -> Vec<Frame> {
        let mut out = Vec::new();
        for (&peer, p) in &mut self.peers {
            if p.ack_due {
                p.ack_due = false;
                out.push(Frame {
                    ack: true,
                    src: self.me,
                    dst: peer,
                    src_inc: self.inc,
                    dst_inc: p.inc,
                    seq: p.expected,
                    payload: vec![],
                });
            }
            while p.unacked.len() < self.window
                && let Some((seq, m)) = p.queued.pop_front()
            {
                p.unacked.insert(seq, (m, None));
            }
            for (&seq, (m, sent)) in &mut p.unacked {
                let due = sent.is_none_or(|t| now.saturating_duration_since(t) >= self.rto);
                if due {
                    if sent.is_some() {
                        self.counters.resent += 1;
                    }
                    *sent = Some(now);
                    out.push(Frame {
                        ack: false,
                        src: self.me,
                        dst: peer,
                        src_inc: self.inc,
                        dst_inc: p.inc,
                        seq,
                        payload: m.clone(),
                    });
                }
            }
        }
        out
    }

    /// The route to `peer` changed: every message in flight goes again on the new one.
    pub fn route_changed(&mut self, peer: u16) {
        if let Some(p) = self.peers.get_mut(&peer) {
            for (_, sent) in p.unacked.values_mut() {
                if sent.is_some() {
                    *sent = None;
                    self.counters.resent += 1;
                }
            }
        }
    }

    /// A frame for this host arrived.
    pub fn on_frame(&mut self, f: &Frame) {
        if f.dst != self.me || (f.dst_inc != 0 && f.dst_inc != self.inc) {
            self.counters.stale += 1;
            return;
        }
        let known = self.peers.get(&f.src).map_or(0, |p| p.inc);
        if f.src_inc < known {
            self.counters.stale += 1;
            return;
        }
        // The peer's first word, or a new life of it.
        self.peer_up(f.src, f.src_inc);
        let p = self.peers.entry(f.src).or_default();
        if f.ack {
            // What was sent: up to the highest sequence number put in flight.
            let sent_to = p.unacked.keys().next_back().map_or(0, |s| s + 1).max(p.acked);
            if f.seq > sent_to {
                self.counters.protocol_errors += 1;
                self.give_up(f.src, "the peer acknowledged messages never sent (a protocol error)");
                return;
            }
            let acked: Vec<u64> = p.unacked.range(..f.seq).map(|(s, _)| *s).collect();
            for s in acked {
                p.unacked.remove(&s);
            }
            p.acked = p.acked.max(f.seq);
            return;
        }
        p.ack_due = true;
        p.traffic += 1;
        if f.seq < p.expected || p.early.contains_key(&f.seq) {
            self.counters.duplicates += 1;
            return;
        }
        // A sender keeps at most `window` messages in flight: one further ahead is not
        // buffered (it comes again once the gap is filled).
        if f.seq >= p.expected.saturating_add(self.window as u64) {
            self.counters.beyond_window += 1;
            return;
        }
        p.early.insert(f.seq, f.payload.clone());
        while let Some(m) = p.early.remove(&p.expected) {
            self.delivered.push(Delivered { peer: f.src, seq: p.expected, payload: m });
            self.counters.delivered += 1;
            p.expected += 1;
        }
    }

    /// The membership knows `peer` in incarnation `inc`: frames go to that life of it (an
    /// older life's unacknowledged messages are undeliverable).
    pub fn peer_up(&mut self, peer: u16, inc: u64) {
        let known = self.peers.get(&peer).map_or(0, |p| p.inc);
        if inc > known {
            if known != 0 {
                self.give_up(peer, "the peer restarted before acknowledging it");
            }
            self.peers.entry(peer).or_default().inc = inc;
        }
    }

    /// Reports every message to `peer` not acknowledged (in flight and queued) undeliverable,
    /// and starts its channel afresh, keeping the incarnation it knew.
    fn give_up(&mut self, peer: u16, why: &str) {
        let Some(p) = self.peers.remove(&peer) else { return };
        for seq in p.unacked.keys().copied().chain(p.queued.iter().map(|(s, _)| *s)) {
            self.lost.push(Undeliverable { peer, seq, why: why.into() });
            self.counters.undeliverable += 1;
        }
        self.peers.insert(peer, Peer { inc: p.inc, ..Peer::default() });
    }

    /// `peer` was declared down: every message to it not acknowledged is undeliverable, and
    /// its channel starts afresh should it come back.
    pub fn peer_down(&mut self, peer: u16) {
        // Its incarnation is kept: frames of its old life that arrive late are stale.
        self.give_up(peer, "the peer was declared down before acknowledging it");
    }

    /// Takes the messages delivered since the last call, in order per peer.
    pub fn take_delivered(&mut self) -> Vec<Delivered> {
        std::mem::take(&mut self.delivered)
    }

    /// Takes the messages reported undeliverable since the last call.
    pub fn take_undeliverable(&mut self) -> Vec<Undeliverable> {
        std::mem::take(&mut self.lost)
    }

    /// The counters.
    pub fn counters(&self) -> ChannelCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn chance(&mut self, pct: u64) -> bool {
            self.next() % 100 < pct
        }
    }

    #[test]
    fn a_frame_reads_back_as_written() {
        let f = Frame {
            ack: false,
            src: 3,
            dst: 700,
            src_inc: 1_796_000_000_123,
            dst_inc: 9,
            seq: 1 << 40,
            payload: b"tensor".to_vec(),
        };
        assert_eq!(Frame::decode(&f.encode()), Some(f.clone()));
        let mut b = f.encode();
        b.pop();
        assert_eq!(Frame::decode(&b), None, "a short frame");
        b[0] = 0;
        assert_eq!(Frame::decode(&b), None);
    }

    /// Two hosts over a path that drops, duplicates and reorders, with the route changed
    /// (everything in flight sent again) every so often: every message arrives once, in
    /// order.
    #[test]
    fn messages_arrive_once_in_order_through_loss_duplicates_and_route_changes() {
        let t0 = Instant::now();
        let mut a = Channels::new(0, 11, 16, Duration::from_millis(50));
        let mut b = Channels::new(1, 22, 16, Duration::from_millis(50));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut wire: Vec<(Instant, Frame)> = Vec::new();
        let n = 2000u64;
        for i in 0..n {
            a.send(1, i.to_be_bytes().to_vec());
        }
        let mut got = Vec::new();
        let mut now = t0;
        for step in 0..20_000u32 {
            now += Duration::from_millis(1);
            if step % 700 == 0 {
                a.route_changed(1);
            }
            for f in a.poll_frames(now).into_iter().chain(b.poll_frames(now)) {
                if rng.chance(10) {
                    continue; // lost
                }
                let delay = Duration::from_micros(200 + rng.next() % 5000);
                if rng.chance(5) {
                    wire.push((now + delay * 2, f.clone())); // a duplicate, late
                }
                wire.push((now + delay, f));
            }
            let (due, rest): (Vec<_>, Vec<_>) = wire.drain(..).partition(|(t, _)| *t <= now);
            wire = rest;
            for (_, f) in due {
                if f.dst == 1 { b.on_frame(&f) } else { a.on_frame(&f) }
            }
            got.extend(b.take_delivered());
            if got.len() as u64 == n && a.pending(1) == 0 {
                break;
            }
        }
        let seqs: Vec<u64> = got.iter().map(|d| d.seq).collect();
        assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "once each, in order");
        for d in &got {
            assert_eq!(d.payload, d.seq.to_be_bytes());
        }
        assert_eq!(a.pending(1), 0, "all acknowledged");
        assert!(b.counters().duplicates > 0 && a.counters().resent > 0, "{:?}", b.counters());
        assert!(a.take_undeliverable().is_empty());
    }

    #[test]
    fn a_peer_that_dies_gets_its_unacknowledged_messages_reported_and_nothing_else() {
        let t0 = Instant::now();
        let mut a = Channels::new(0, 1, 4, Duration::from_millis(50));
        let mut b = Channels::new(1, 2, 4, Duration::from_millis(50));
        for i in 0..10u64 {
            a.send(1, vec![i as u8]);
        }
        // The first window arrives and is acknowledged; then b dies.
        for f in a.poll_frames(t0) {
            b.on_frame(&f);
        }
        for f in b.poll_frames(t0) {
            a.on_frame(&f);
        }
        let delivered: Vec<u64> = b.take_delivered().iter().map(|d| d.seq).collect();
        assert_eq!(delivered, [0, 1, 2, 3]);
        a.poll_frames(t0); // the next window goes out, to nobody
        a.peer_down(1);
        let lost: Vec<u64> = a.take_undeliverable().iter().map(|u| u.seq).collect();
        assert_eq!(lost, (4..10).collect::<Vec<_>>(), "delivered + undeliverable = all sent");
        // A late frame of b's old life changes nothing; b's new life starts a new channel.
        let mut b2 = Channels::new(1, 3, 4, Duration::from_millis(50));
        a.peer_up(1, 3);
        let s = a.send(1, vec![42]);
        assert_eq!(s, 0, "a new channel");
        for f in a.poll_frames(t0) {
            b2.on_frame(&f);
        }
        assert_eq!(b2.take_delivered()[0].payload, [42]);
        let stale =
            Frame { ack: true, src: 1, dst: 0, src_inc: 1, dst_inc: 1, seq: 99, payload: vec![] };
        a.on_frame(&stale);
        assert!(a.counters().stale >= 1);
    }

    #[test]
    fn a_restarted_sender_starts_a_new_stream_and_its_old_frames_are_stale() {
        let t0 = Instant::now();
        let mut a = Channels::new(0, 5, 8, Duration::from_millis(50));
        let mut b = Channels::new(1, 6, 8, Duration::from_millis(50));
        a.send(1, vec![1]);
        let old = a.poll_frames(t0);
        for f in &old {
            b.on_frame(f);
        }
        let mut a2 = Channels::new(0, 7, 8, Duration::from_millis(50));
        a2.send(1, vec![2]);
        for f in a2.poll_frames(t0) {
            b.on_frame(&f);
        }
        for f in &old {
            b.on_frame(f); // the old life, late
        }
        let got: Vec<(u64, Vec<u8>)> =
            b.take_delivered().into_iter().map(|d| (d.seq, d.payload)).collect();
        assert_eq!(got, [(0, vec![1]), (0, vec![2])]);
        assert_eq!(b.counters().stale, 1);
    }

    #[test]
    fn a_receiver_buffers_no_further_ahead_than_the_window() {
        let mut b = Channels::new(1, 6, 8, Duration::from_millis(50));
        let data = |seq: u64| Frame {
            ack: false,
            src: 0,
            dst: 1,
            src_inc: 5,
            dst_inc: 6,
            seq,
            payload: vec![0; 1000],
        };
        // A peer that sends far ahead of what it was acknowledged: nothing of it is kept.
        for seq in 8..10_008 {
            b.on_frame(&data(seq));
        }
        assert_eq!(b.counters().beyond_window, 10_000);
        assert!(b.peers.get(&0).is_some_and(|p| p.early.is_empty()));
        // Within the window: buffered until the gap fills, then delivered in order.
        for seq in (0..8).rev() {
            b.on_frame(&data(seq));
        }
        let got: Vec<u64> = b.take_delivered().iter().map(|d| d.seq).collect();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn an_ack_beyond_what_was_sent_is_a_protocol_error_and_loses_nothing_silently() {
        let t0 = Instant::now();
        let mut a = Channels::new(0, 5, 4, Duration::from_millis(50));
        for i in 0..10u8 {
            a.send(1, vec![i]);
        }
        // Four in flight (the window), six queued.
        assert_eq!(a.poll_frames(t0).len(), 4);
        let ack =
            |seq| Frame { ack: true, src: 1, dst: 0, src_inc: 6, dst_inc: 5, seq, payload: vec![] };
        // An honest ack of the first two.
        a.on_frame(&ack(2));
        assert_eq!(a.pending(1), 8);
        // An ack of all ten, though only four were ever sent.
        a.on_frame(&ack(10));
        assert_eq!(a.counters().protocol_errors, 1);
        let lost: Vec<u64> = a.take_undeliverable().iter().map(|u| u.seq).collect();
        assert_eq!(lost, (2..10).collect::<Vec<_>>(), "every message not acknowledged, reported");
        assert_eq!(a.pending(1), 0);
    }
}
