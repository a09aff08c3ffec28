//! Route-around, sans-IO: for each peer host, the way this host's traffic to it goes now,
//! chosen from what the probes saw — the cheapest route that works:
//! 1. the home rail, from the UDP source port in use (nothing to do);
//! 2. the same rail from another UDP source port, one whose probes carried (a new port
//!    rehashes the flow away from a dead ECMP path: a ToR-spine link, a spine);
//! 3. another rail of this host, to the peer's device on that rail (a dead NIC, port, cable
//!    or ToR);
//! 4. a relay: a healthy peer that reaches the destination (every rail of this host or of
//!    the peer's ToR side cut off from each other).
//!
//! A route is left only when its path fails (dead, or lossy) and is returned to (fail back)
//! once the home path has answered cleanly for [`FAIL_BACK_AFTER`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use topology::{Dev, Pod};

use crate::probe::{PathState, Report};

/// A home path that answers cleanly this long is taken back.
pub const FAIL_BACK_AFTER: Duration = Duration::from_secs(3);
/// A hop whose QP failed is not used again for this long (unless nothing else works).
pub const AVOID_FOR: Duration = Duration::from_secs(5);

/// How traffic to a peer goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Route {
    /// From this host's `rail` to the peer's device on `peer_rail`, from UDP source port
    /// `port`.
    Direct {
        /// This host's rail.
        rail: usize,
        /// The peer's rail.
        peer_rail: usize,
        /// The UDP source port.
        port: u16,
    },
    /// Through host `via`: this host's `rail` to `via`'s device on the same rail, from
    /// `port`; `via` forwards on its own route.
    Relay {
        /// The relay.
        via: usize,
        /// This host's rail.
        rail: usize,
        /// The UDP source port.
        port: u16,
    },
}

impl Route {
    /// The route's first hop: (this host's rail, the next host, its rail, the port).
    pub fn hop(&self, peer: usize) -> (usize, usize, usize, u16) {
        match *self {
            Route::Direct { rail, peer_rail, port } => (rail, peer, peer_rail, port),
            Route::Relay { via, rail, port } => (rail, via, rail, port),
        }
    }

    /// Its cost class: 0 home, 1 another port, 2 another rail, 3 a relay.
    fn class(&self, home: &Route) -> u8 {
        match (self, home) {
            _ if self == home => 0,
            (Route::Direct { rail: a, .. }, Route::Direct { rail: b, .. }) if a == b => 1,
            (Route::Direct { .. }, _) => 2,
            (Route::Relay { .. }, _) => 3,
        }
    }
}

/// A route change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The peer.
    pub peer: usize,
    /// The route left (`None`: there was none).
    pub from: Option<Route>,
    /// The route taken (`None`: no route reaches the peer now).
    pub to: Option<Route>,
    /// Why, in words.
    pub why: String,
    /// When (the caller's clock).
    #[serde(skip)]
    pub at: Instant,
}

/// What the table knows of one path of this host.
#[derive(Debug, Clone, PartialEq)]
pub struct PathView {
    /// Its state.
    pub state: PathState,
    /// Ports whose probes carried last (when the path is split by port).
    pub carried: Vec<u16>,
    /// Ports whose probes were lost twice running.
    pub lost: Vec<u16>,
    /// Since when every probe of the path has been answered.
    pub clean_since: Option<Instant>,
}

/// This host's routes to every peer.
#[derive(Debug)]
pub struct RouteTable {
    me: usize,
    rails: Vec<usize>,
    home: BTreeMap<usize, Route>,
    now: BTreeMap<usize, Option<Route>>,
    /// When the home path was last seen failing, per peer.
    home_bad_at: BTreeMap<usize, Instant>,
    /// Each host's rail count.
    host_rails: Vec<usize>,
    /// Hops whose QP failed: (next host, rail, its rail, port) → when.
    avoid: BTreeMap<(usize, usize, usize, u16), Instant>,
}

impl RouteTable {
    /// The table of host `me`: every peer's home route is rail `r` to the peer's rail `r`
    /// (the first rail both have), from `home_port`.
    pub fn new(pod: &Pod, me: usize, home_port: u16) -> RouteTable {
        let mine = pod.hosts.get(me).map_or(0, |h| h.rails.len());
        let mut home = BTreeMap::new();
        let mut now = BTreeMap::new();
        for (h, host) in pod.hosts.iter().enumerate() {
            if h == me || host.rails.is_empty() || mine == 0 {
                continue;
            }
            // Spread the peers over the rails: peer h starts on rail h mod rails.
            let rail = h % mine.min(host.rails.len());
            let r = Route::Direct { rail, peer_rail: rail, port: home_port };
            home.insert(h, r);
            now.insert(h, Some(r));
        }
        RouteTable {
            me,
            rails: (0..mine).collect(),
            home,
            now,
            home_bad_at: BTreeMap::new(),
            host_rails: pod.hosts.iter().map(|h| h.rails.len()).collect(),
            avoid: BTreeMap::new(),
        }
    }

    /// The route to `peer` now (`None`: none reaches it).
    pub fn route(&self, peer: usize) -> Option<Route> {
        self.now.get(&peer).copied().flatten()
    }

    /// Every peer's route now.
    pub fn routes(&self) -> &BTreeMap<usize, Option<Route>> {
        &self.now
    }

    /// Re-decides every route from this host's paths (`mine`: (rail, device) → view), the
    /// other hosts' reports (for relays) and which hosts are alive; the changes.
    pub fn update(
        &mut self,
        now: Instant,
        mine: &BTreeMap<(usize, Dev), PathView>,
        reports: &BTreeMap<u16, Report>,
        alive: &dyn Fn(usize) -> bool,
    ) -> Vec<Change> {
        // Answered every probe for FAIL_BACK_AFTER: healed, though a path judges lossy while
        // its old losses are in the window.
        let healed = |v: &PathView| {
            v.clean_since.is_some_and(|t| now.saturating_duration_since(t) >= FAIL_BACK_AFTER)
        };
        let ok = |rail: usize, d: Dev| {
            mine.get(&(rail, d)).is_none_or(|v| {
                matches!(v.state, PathState::Ok | PathState::LargeLost)
                    || (v.state == PathState::Lossy && healed(v))
            })
        };
        // Whether host `v`'s report says its rail `r` reaches `d`.
        let relays = |v: usize, r: usize, d: Dev| {
            reports.get(&(v as u16)).is_some_and(|rep| {
                rep.paths.iter().any(|p| {
                    usize::from(p.rail) == r
                        && usize::from(p.host) == d.host
                        && usize::from(p.dst_rail) == d.rail
                        && p.state == PathState::Ok
                })
            })
        };
        self.avoid.retain(|_, t| now.duration_since(*t) < AVOID_FOR);
        let avoid = self.avoid.clone();
        let avoided = |peer: usize, r: &Route| {
            let (rail, next, pr, port) = r.hop(peer);
            avoid.contains_key(&(next, rail, pr, port))
        };
        let mut changes = Vec::new();
        let peers: Vec<usize> = self.home.keys().copied().collect();
        for peer in peers {
            let home = self.home[&peer];
            let cur = self.now.get(&peer).copied().flatten();
            if !alive(peer) {
                if cur.is_some() {
                    self.set(peer, None, "the peer is down".into(), now, &mut changes);
                }
                continue;
            }
            let Route::Direct { rail: hr, peer_rail: hp, port: hport } = home else { continue };
            let home_dev = Dev { host: peer, rail: hp };
            let home_ok = ok(hr, home_dev)
                && mine.get(&(hr, home_dev)).is_none_or(|v| !v.lost.contains(&hport));
            // Failing now: not answering since its last loss. (A healed path judges lossy
            // while its old losses are in the window; its clean time is what counts, and
            // counting it here too would double the wait.)
            if !home_ok && mine.get(&(hr, home_dev)).is_none_or(|v| v.clean_since.is_none()) {
                self.home_bad_at.insert(peer, now);
            }
            let works = |r: &Route| match *r {
                Route::Direct { rail, peer_rail, port } => {
                    let d = Dev { host: peer, rail: peer_rail };
                    (ok(rail, d) && mine.get(&(rail, d)).is_none_or(|v| !v.lost.contains(&port)))
                        || mine.get(&(rail, d)).is_some_and(|v| v.carried.contains(&port))
                }
                Route::Relay { via, rail, port } => {
                    let d = Dev { host: via, rail };
                    alive(via)
                        && ok(rail, d)
                        && mine.get(&(rail, d)).is_none_or(|v| !v.lost.contains(&port))
                        && (0..self.host_rails[via])
                            .any(|r| relays(via, r, Dev { host: peer, rail: r }))
                }
            };
            // Fail back once the home path has answered every probe for a while.
            let home_clean = mine.get(&(hr, home_dev)).is_none_or(|v| {
                healed(v) && !v.lost.contains(&hport) && v.state != PathState::Dead
            });
            if cur != Some(home)
                && home_clean
                && !avoided(peer, &home)
                && self
                    .home_bad_at
                    .get(&peer)
                    .is_none_or(|t| now.duration_since(*t) >= FAIL_BACK_AFTER)
            {
                self.set(peer, Some(home), "the home path answers again".into(), now, &mut changes);
                continue;
            }
            if cur.as_ref().is_some_and(|c| works(c) && !avoided(peer, c)) {
                continue;
            }
            // The cheapest route that works.
            let mut cands: Vec<Route> = vec![home];
            if let Some(v) = mine.get(&(hr, home_dev)) {
                cands.extend(v.carried.iter().map(|&port| Route::Direct {
                    rail: hr,
                    peer_rail: hp,
                    port,
                }));
            }
            for &r in &self.rails {
                if r != hr {
                    cands.push(Route::Direct { rail: r, peer_rail: r, port: hport });
                }
            }
            for &r in &self.rails {
                for via in self.home.keys().copied().filter(|&v| v != peer && v != self.me) {
                    cands.push(Route::Relay { via, rail: r, port: hport });
                }
            }
            // Paths that lose some probes still deliver (RC retransmits): when no route
            // answers cleanly, one that is not dead beats none.
            let limps = |r: &Route| {
                let (rail, next, pr, port) = r.hop(peer);
                let d = Dev { host: next, rail: pr };
                alive(next)
                    && mine
                        .get(&(rail, d))
                        .is_none_or(|v| v.state != PathState::Dead && !v.lost.contains(&port))
            };
            let mut usable: Vec<Route> = cands.iter().copied().filter(|c| works(c)).collect();
            if usable.is_empty() {
                usable = cands
                    .into_iter()
                    .filter(|c| limps(c) && matches!(c, Route::Direct { .. }))
                    .collect();
            }
            // A hop whose QP failed only when nothing else works.
            let pick = usable
                .iter()
                .filter(|c| !avoided(peer, c))
                .min_by_key(|c| c.class(&home))
                .or_else(|| usable.iter().min_by_key(|c| c.class(&home)))
                .copied();
            let why = match (cur, pick) {
                (_, Some(p)) if p.class(&home) == 1 => {
                    "the home path is lost on its UDP source port (an ECMP path): another port"
                        .to_string()
                }
                (_, Some(p)) if p.class(&home) == 2 => {
                    "the home rail's path fails: another rail".to_string()
                }
                (_, Some(_)) => "no direct path answers: through a healthy peer".to_string(),
                (_, None) => "no route answers".to_string(),
            };
            if pick != cur {
                self.set(peer, pick, why, now, &mut changes);
            }
        }
        changes
    }

    /// The QP of hop (`next`, `rail`, `peer_rail`, `port`) failed: the peers routed through
    /// it lose their route until the next [`RouteTable::update`] picks another, and the hop
    /// is avoided for [`AVOID_FOR`]; those peers.
    pub fn failed_hop(
        &mut self,
        next: usize,
        rail: usize,
        peer_rail: usize,
        port: u16,
        now: Instant,
    ) -> Vec<usize> {
        self.avoid.insert((next, rail, peer_rail, port), now);
        let hit: Vec<usize> = self
            .now
            .iter()
            .filter(|(peer, r)| r.is_some_and(|r| r.hop(**peer) == (rail, next, peer_rail, port)))
            .map(|(p, _)| *p)
            .collect();
        for &p in &hit {
            self.now.insert(p, None);
            self.home_bad_at.insert(p, now);
        }
        hit
    }

    fn set(
        &mut self,
        peer: usize,
        to: Option<Route>,
        why: String,
        at: Instant,
        out: &mut Vec<Change>,
    ) {
        let from = self.now.insert(peer, to).flatten();
        out.push(Change { peer, from, to, why, at });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_pod;

    fn view(state: PathState, carried: &[u16], lost: &[u16]) -> PathView {
        PathView { state, carried: carried.to_vec(), lost: lost.to_vec(), clean_since: None }
    }

    #[test]
    fn a_failing_path_moves_to_the_cheapest_route_that_works_and_back_when_healed() {
        let pod = test_pod(4, 2, 2);
        let t0 = Instant::now();
        let mut t = RouteTable::new(&pod, 0, 0xf000);
        let alive = |_| true;
        let none = BTreeMap::new();
        // Peer 3's home: rail 1 (3 mod 2).
        assert_eq!(t.route(3), Some(Route::Direct { rail: 1, peer_rail: 1, port: 0xf000 }));
        let d3 = Dev { host: 3, rail: 1 };
        // Its home port lost twice running, others carry: another port on the same rail.
        let mut mine = BTreeMap::new();
        mine.insert((1, d3), view(PathState::Lossy, &[0xf007, 0xf00e], &[0xf000]));
        let c = t.update(t0, &mine, &none, &alive);
        assert_eq!(c.len(), 1);
        assert_eq!(t.route(3), Some(Route::Direct { rail: 1, peer_rail: 1, port: 0xf007 }));
        // The whole rail dead: rail 0.
        mine.insert((1, d3), view(PathState::Dead, &[], &[0xf000, 0xf007, 0xf00e]));
        t.update(t0 + Duration::from_secs(1), &mine, &none, &alive);
        assert_eq!(t.route(3), Some(Route::Direct { rail: 0, peer_rail: 0, port: 0xf000 }));
        // Healed: back home after FAIL_BACK_AFTER of clean probes, not before.
        mine.clear();
        let healed = t0 + Duration::from_secs(2);
        assert!(t.update(healed, &mine, &none, &alive).is_empty());
        t.update(healed + FAIL_BACK_AFTER, &mine, &none, &alive);
        assert_eq!(t.route(3), Some(Route::Direct { rail: 1, peer_rail: 1, port: 0xf000 }));
        // A peer that is down has no route.
        let c = t.update(healed + FAIL_BACK_AFTER, &mine, &none, &|h| h != 2);
        assert_eq!((c[0].peer, c[0].to), (2, None));
    }

    #[test]
    fn a_healed_path_whose_old_losses_are_still_in_the_window_is_taken_back_after_fail_back() {
        // After a heal the window still holds the losses (the path judges lossy), but every
        // probe since `healed` answered: the home path is taken back FAIL_BACK_AFTER later,
        // not twice that (CI saw no fail back within 6 s of a rail link coming back up).
        let pod = test_pod(4, 2, 2);
        let t0 = Instant::now();
        let mut t = RouteTable::new(&pod, 0, 0xf000);
        let alive = |_| true;
        let none = BTreeMap::new();
        let d3 = Dev { host: 3, rail: 1 };
        let mut mine = BTreeMap::new();
        mine.insert((1, d3), view(PathState::Dead, &[], &[0xf000]));
        t.update(t0, &mine, &none, &alive);
        assert_eq!(t.route(3), Some(Route::Direct { rail: 0, peer_rail: 0, port: 0xf000 }));
        let healed = t0 + Duration::from_secs(2);
        let tick = Duration::from_millis(100);
        let mut at = healed;
        while at < healed + FAIL_BACK_AFTER + 2 * tick {
            let clean = PathView { clean_since: Some(healed), ..view(PathState::Lossy, &[], &[]) };
            mine.insert((1, d3), clean);
            let c = t.update(at, &mine, &none, &alive);
            if !c.is_empty() {
                assert_eq!(c[0].why, "the home path answers again");
                break;
            }
            at += tick;
        }
        assert_eq!(t.route(3), Some(Route::Direct { rail: 1, peer_rail: 1, port: 0xf000 }));
        assert!(at >= healed + FAIL_BACK_AFTER, "taken back after {:?}", at - healed);
        // And kept while it goes on answering (the old losses still in the window).
        for _ in 0..20 {
            at += tick;
            let c = t.update(at, &mine, &none, &alive);
            assert!(c.is_empty(), "{c:?}");
        }
        // A new loss: away again.
        mine.insert((1, d3), view(PathState::Lossy, &[], &[]));
        assert_eq!(t.update(at + tick, &mine, &none, &alive).len(), 1);
    }

    #[test]
    fn with_every_direct_path_dead_a_healthy_peer_relays() {
        let pod = test_pod(4, 1, 2);
        let t0 = Instant::now();
        let mut t = RouteTable::new(&pod, 0, 0xf000);
        let mut mine = BTreeMap::new();
        mine.insert((0, Dev { host: 3, rail: 0 }), view(PathState::Dead, &[], &[0xf000]));
        // Host 1 reaches host 3; host 2 does not.
        let mut reports = BTreeMap::new();
        let path = |host, state| crate::probe::PathReport {
            rail: 0,
            host,
            dst_rail: 0,
            state,
            small: (10, 0),
            large: (0, 0),
            lost_ports: vec![],
            ok_ports: vec![],
            lost_large_ports: vec![],
            ok_large_ports: vec![],
            rtt_p50_us: 50,
        };
        reports.insert(
            1,
            Report { host: 1, paths: vec![path(3, PathState::Ok)], ..Report::default() },
        );
        reports.insert(
            2,
            Report { host: 2, paths: vec![path(3, PathState::Dead)], ..Report::default() },
        );
        t.update(t0, &mine, &reports, &|_| true);
        assert_eq!(t.route(3), Some(Route::Relay { via: 1, rail: 0, port: 0xf000 }));
        // Nobody relays: no route.
        reports.remove(&1);
        t.update(t0, &mine, &reports, &|_| true);
        assert_eq!(t.route(3), None);
    }
}
