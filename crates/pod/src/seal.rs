//! Sealed datagrams, sans-IO: what the pod monitor's hosts send each other over UDP and UD
//! (membership and gossip, channel handshakes) carries its sender, a counter and — when the
//! pod has a shared secret — an HMAC-SHA256 tag, so that nothing outside the pod can speak
//! for one of its hosts and nothing recorded can be played back.
//!
//! ```text
//! magic "PDS1" (4) | flags (1: bit 0 keyed) | purpose (1) | sender host (2) | counter (8)
//! | payload | tag (16, keyed only: HMAC-SHA256 over all that precedes it, truncated)
//! ```
//!
//! The key of each purpose is derived from the pod key ([`PodKey`]), itself derived from the
//! run's shared secret, so a membership datagram cannot be passed off as a handshake. The
//! counter is the sender's clock in microseconds, moved on by one where the clock has not:
//! a receiver keeps, per host of the plan, the last [`REPLAY_WINDOW`] counters it accepted
//! and refuses a counter it has seen (a copy from another rail: counted as a copy) or one
//! older than all of them (a replay), and — before it has heard the host — a counter more
//! than [`MAX_SKEW`] from its own clock. What it keeps is bounded by the plan's hosts.
//!
//! Without a secret the same frame goes out unkeyed: the sender is still checked against
//! the plan and copies and replays are still refused, but anyone who can reach the port can
//! speak for any host. The agent says so when it starts and in `pod status`.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use serde::Serialize;
use sha2::Sha256;

/// The frame's magic.
const MAGIC: [u8; 4] = *b"PDS1";
/// Bytes before the payload.
pub const HEADER: usize = 16;
/// Bytes of the tag of a keyed frame.
pub const TAG: usize = 16;
/// Counters remembered per sender.
pub const REPLAY_WINDOW: usize = 256;
/// How far a sender's first counter may be from this host's clock.
pub const MAX_SKEW: Duration = Duration::from_secs(300);

/// What a sealed frame is for: each purpose has its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Purpose {
    /// Membership and gossip (the UDP control channel).
    Membership = 1,
    /// Pod-channel handshakes (between the probe UD QPs).
    Hello = 2,
    /// Probes and their replies.
    Probe = 3,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::Membership => b"podnet-pod/1 membership",
            Purpose::Hello => b"podnet-pod/1 channel-hello",
            Purpose::Probe => b"podnet-pod/1 probe",
        }
    }
}

/// The pod's key: 32 bytes derived from the run's shared secret (the rendezvous's
/// `Secret::derive_key`), from which each purpose's key is derived.
#[derive(Clone)]
pub struct PodKey([u8; 32]);

impl std::fmt::Debug for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PodKey(…)")
    }
}

impl PodKey {
    /// The pod key from 32 derived bytes.
    pub fn new(bytes: [u8; 32]) -> PodKey {
        PodKey(bytes)
    }

    /// The key of one purpose.
    pub fn key(&self, purpose: Purpose) -> Key {
        let mut m = hmac_of(&self.0);
        m.update(purpose.label());
        Key(m.finalize().into_bytes().into())
    }
}

/// A purpose's key.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(…)")
    }
}

impl Key {
    /// The HMAC of `parts`, in order.
    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut m = hmac_of(&self.0);
        for p in parts {
            m.update(p);
        }
        m
    }

    /// The first [`TAG`] bytes of the HMAC of `parts`, in order.
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG] {
        let full: [u8; 32] = self.mac(parts).finalize().into_bytes().into();
        let mut t = [0u8; TAG];
        t.copy_from_slice(&full[..TAG]);
        t
    }

    /// Whether `tag` is the tag of `parts` (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.mac(parts).verify_truncated_left(tag).is_ok()
    }
}

fn hmac_of(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC keys may be any length"))
}

/// The wall clock in microseconds since the Unix epoch.
pub fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Whether `frame` begins as a sealed frame does.
pub fn is_sealed(frame: &[u8]) -> bool {
    frame.len() >= HEADER && frame[..4] == MAGIC
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not a sealed frame (or cut short).
    #[error("not a sealed frame")]
    Malformed,
    /// Sealed for another purpose.
    #[error("sealed for another purpose")]
    Purpose,
    /// Unkeyed, and this host has the pod's secret (or keyed, and it has none).
    #[error("unauthenticated (this host and the sender disagree on the secret)")]
    Unauthenticated,
    /// Its tag is wrong: another secret, or forged.
    #[error("its tag is wrong")]
    BadTag,
    /// Its sender is not a host of the plan.
    #[error("its sender is not a host of the plan")]
    UnknownSender,
    /// A counter accepted before: a copy from another rail.
    #[error("a copy")]
    Copy,
    /// Older than every counter remembered, or far from this host's clock: played back.
    #[error("a replay")]
    Replay,
}

/// Frames refused, by why (what `pod status` and /metrics show).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RefusedCounts {
    /// Not sealed, or for another purpose.
    pub malformed: u64,
    /// Without the pod's authentication (or with it, on a host that has no secret).
    pub unauthenticated: u64,
    /// With a wrong tag.
    pub bad_tag: u64,
    /// From a host not in the plan, or from an address that is not the host's.
    pub unknown_sender: u64,
    /// Played back.
    pub replayed: u64,
    /// Carrying what an honest peer could not send (an identity or version out of bounds).
    pub implausible: u64,
}

impl RefusedCounts {
    /// Counts one refusal (a copy is not one).
    pub fn count(&mut self, r: Refused) {
        match r {
            Refused::Malformed | Refused::Purpose => self.malformed += 1,
            Refused::Unauthenticated => self.unauthenticated += 1,
            Refused::BadTag => self.bad_tag += 1,
            Refused::UnknownSender => self.unknown_sender += 1,
            Refused::Replay => self.replayed += 1,
            Refused::Copy => {}
        }
    }

    /// Every refusal.
    pub fn total(&self) -> u64 {
        self.malformed
            + self.unauthenticated
            + self.bad_tag
            + self.unknown_sender
            + self.replayed
            + self.implausible
    }

    /// Adds another's counts.
    pub fn add(&mut self, o: &RefusedCounts) {
        self.malformed += o.malformed;
        self.unauthenticated += o.unauthenticated;
        self.bad_tag += o.bad_tag;
        self.unknown_sender += o.unknown_sender;
        self.replayed += o.replayed;
        self.implausible += o.implausible;
    }
}

/// Seals and opens one purpose's frames for one host of a pod of `hosts`.
#[derive(Debug)]
pub struct Sealer {
    purpose: Purpose,
    key: Option<Key>,
    me: u16,
    counter: u64,
    /// Per plan host: the counters accepted lately.
    seen: Vec<BTreeSet<u64>>,
}

impl Sealer {
    /// Host `me` of a pod of `hosts`; `key` the pod's (none: unkeyed frames).
    pub fn new(purpose: Purpose, key: Option<&PodKey>, me: u16, hosts: usize) -> Sealer {
        Sealer {
            purpose,
            key: key.map(|k| k.key(purpose)),
            me,
            counter: 0,
            seen: vec![BTreeSet::new(); hosts],
        }
    }

    /// Whether frames are keyed.
    pub fn keyed(&self) -> bool {
        self.key.is_some()
    }

    /// `payload` sealed, its counter `now_us` (or one past the last).
    pub fn seal(&mut self, payload: &[u8], now_us: u64) -> Vec<u8> {
        self.counter = now_us.max(self.counter + 1);
        let mut b = Vec::with_capacity(HEADER + payload.len() + TAG);
        b.extend_from_slice(&MAGIC);
        b.push(u8::from(self.key.is_some()));
        b.push(self.purpose as u8);
        b.extend_from_slice(&self.me.to_be_bytes());
        b.extend_from_slice(&self.counter.to_be_bytes());
        b.extend_from_slice(payload);
        if let Some(k) = &self.key {
            let t = k.tag(&[&b]);
            b.extend_from_slice(&t);
        }
        b
    }

    /// The sender and the payload of a sealed frame, once (a copy or a replay is refused).
    pub fn open<'a>(&mut self, frame: &'a [u8], now_us: u64) -> Result<(u16, &'a [u8]), Refused> {
        let (sender, counter, payload) = self.check(frame)?;
        let seen = &mut self.seen[usize::from(sender)];
        if seen.contains(&counter) {
            return Err(Refused::Copy);
        }
        // Older than every counter remembered once the window is full, or — before —
        // older than all and far from this host's clock (a recording played to a host that
        // has not heard the sender, or has just started).
        let near = now_us.abs_diff(counter) <= MAX_SKEW.as_micros() as u64;
        let replay = match seen.first() {
            None => !near,
            Some(&oldest) => counter < oldest && (seen.len() >= REPLAY_WINDOW || !near),
        };
        if replay {
            return Err(Refused::Replay);
        }
        if seen.len() >= REPLAY_WINDOW {
            seen.pop_first();
        }
        seen.insert(counter);
        Ok((sender, payload))
    }

    /// The frame's sender, counter and payload if it is sealed for this purpose, by a host
    /// of the plan, and (keyed) its tag is right.
    fn check<'a>(&self, frame: &'a [u8]) -> Result<(u16, u64, &'a [u8]), Refused> {
        if frame.len() < HEADER || frame[..4] != MAGIC {
            return Err(Refused::Malformed);
        }
        if frame[5] != self.purpose as u8 {
            return Err(Refused::Purpose);
        }
        let keyed = frame[4] & 1 != 0;
        if keyed != self.key.is_some() {
            return Err(Refused::Unauthenticated);
        }
        let body = match &self.key {
            Some(k) => {
                let Some(cut) = frame.len().checked_sub(TAG).filter(|c| *c >= HEADER) else {
                    return Err(Refused::Malformed);
                };
                if !k.verify(&[&frame[..cut]], &frame[cut..]) {
                    return Err(Refused::BadTag);
                }
                &frame[..cut]
            }
            None => frame,
        };
        let sender = u16::from_be_bytes([body[6], body[7]]);
        if usize::from(sender) >= self.seen.len() {
            return Err(Refused::UnknownSender);
        }
        let counter = u64::from_be_bytes(body[8..16].try_into().unwrap_or_default());
        Ok((sender, counter, &body[HEADER..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> PodKey {
        PodKey::new([b; 32])
    }

    #[test]
    fn a_sealed_frame_opens_once_and_only_with_the_same_key() {
        let now = unix_us();
        let mut a = Sealer::new(Purpose::Membership, Some(&key(1)), 0, 3);
        let mut b = Sealer::new(Purpose::Membership, Some(&key(1)), 1, 3);
        let f = a.seal(b"hello", now);
        assert_eq!(b.open(&f, now), Ok((0, &b"hello"[..])));
        // The copy another rail carries.
        assert_eq!(b.open(&f, now), Err(Refused::Copy));
        // Another secret, another purpose, no secret.
        let mut other = Sealer::new(Purpose::Membership, Some(&key(2)), 2, 3);
        assert_eq!(other.open(&a.seal(b"x", now), now), Err(Refused::BadTag));
        let mut hello = Sealer::new(Purpose::Hello, Some(&key(1)), 2, 3);
        assert_eq!(hello.open(&a.seal(b"x", now), now), Err(Refused::Purpose));
        let mut open = Sealer::new(Purpose::Membership, None, 2, 3);
        assert_eq!(open.open(&a.seal(b"x", now), now), Err(Refused::Unauthenticated));
        assert_eq!(b.open(&open.seal(b"x", now), now), Err(Refused::Unauthenticated));
    }

    #[test]
    fn a_flipped_bit_anywhere_is_refused() {
        let now = unix_us();
        let mut a = Sealer::new(Purpose::Membership, Some(&key(1)), 0, 2);
        let f = a.seal(b"payload", now);
        for i in 0..f.len() {
            for bit in 0..8 {
                let mut g = f.clone();
                g[i] ^= 1 << bit;
                let mut b = Sealer::new(Purpose::Membership, Some(&key(1)), 1, 2);
                assert!(b.open(&g, now).is_err(), "byte {i} bit {bit}");
            }
        }
        let mut b = Sealer::new(Purpose::Membership, Some(&key(1)), 1, 2);
        assert!(b.open(&f[..f.len() - 1], now).is_err());
        assert!(b.open(&f[..HEADER - 1], now).is_err());
    }

    #[test]
    fn a_sender_outside_the_plan_is_refused_with_or_without_a_key() {
        let now = unix_us();
        for k in [None, Some(key(1))] {
            let mut stranger = Sealer::new(Purpose::Membership, k.as_ref(), 7, 8);
            let mut b = Sealer::new(Purpose::Membership, k.as_ref(), 1, 3);
            assert_eq!(b.open(&stranger.seal(b"x", now), now), Err(Refused::UnknownSender));
        }
    }

    #[test]
    fn replays_are_refused_and_reordering_within_the_window_is_not() {
        let now = unix_us();
        let mut a = Sealer::new(Purpose::Membership, Some(&key(1)), 0, 2);
        let mut b = Sealer::new(Purpose::Membership, Some(&key(1)), 1, 2);
        let frames: Vec<Vec<u8>> =
            (0..REPLAY_WINDOW as u64 + 10).map(|i| a.seal(b"m", now + i)).collect();
        // Two swapped in flight: both taken.
        assert!(b.open(&frames[1], now).is_ok());
        assert!(b.open(&frames[0], now).is_ok());
        for f in &frames[2..] {
            assert!(b.open(f, now).is_ok());
        }
        // Every one of them again, and the oldest (forgotten now) too.
        for f in &frames {
            assert!(matches!(b.open(f, now), Err(Refused::Copy | Refused::Replay)));
        }
        // A recording from long ago, to a host that never heard the sender.
        let mut fresh = Sealer::new(Purpose::Membership, Some(&key(1)), 1, 2);
        let old = Sealer::new(Purpose::Membership, Some(&key(1)), 0, 2)
            .seal(b"m", now - 2 * MAX_SKEW.as_micros() as u64);
        assert_eq!(fresh.open(&old, now), Err(Refused::Replay));
        // A sender whose clock runs a little behind is heard.
        let behind =
            Sealer::new(Purpose::Membership, Some(&key(1)), 0, 2).seal(b"m", now - 1_000_000);
        assert!(fresh.open(&behind, now).is_ok());
    }

    #[test]
    fn what_is_remembered_is_bounded_by_the_plan() {
        let now = unix_us();
        let mut a = Sealer::new(Purpose::Membership, None, 0, 2);
        let mut b = Sealer::new(Purpose::Membership, None, 1, 2);
        for i in 0..10_000 {
            let _ = b.open(&a.seal(b"m", now + i), now);
        }
        assert!(b.seen.iter().all(|s| s.len() <= REPLAY_WINDOW));
        assert_eq!(b.seen.len(), 2);
    }
}
