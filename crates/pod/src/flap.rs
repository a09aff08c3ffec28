//! Members whose membership flaps: down, back, down again within the horizon.
//!
//! SWIM takes a host down when it answers no probe, direct or indirect, for the suspicion
//! timeout — the host, its agent, or every one of its rails. A host whose only rail's cable
//! flaps is all of these for a second or two, then back: each outage is a `host-down`, and
//! the cable is never named (a host that died stays down). This module keeps each member's
//! outages over the horizon and names the rail of a one-rail host that went down twice or
//! more and came back in between: its cable, its port or its NIC, flapping.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use topology::{Component, Dev, Pod};

use crate::locate::Finding;

/// How far back outages count: the probes' horizon.
pub const HORIZON: Duration = Duration::from_secs(30);
/// Outages within the horizon that make a member's membership flap (the last may still
/// last): one outage is a host that went and came back; two are a pattern.
pub const MIN_OUTAGES: usize = 2;
/// A flap has ended once the member has been back this long: longer than the outages
/// and the stretches between them of a link that flaps every 1–5 s (the per-component
/// loss tests ask the same quiet, [`crate::cable::MIN_QUIET_S`]).
pub const QUIET: Duration = Duration::from_secs(crate::cable::MIN_QUIET_S as u64);
/// An outage this many times the longest before it (and at least [`STAYS_DOWN_MIN`]) is no
/// longer the flap: the host stayed down.
pub const STAYS_DOWN_VS_LONGEST: u32 = 2;
/// … the shortest such outage.
pub const STAYS_DOWN_MIN: Duration = Duration::from_secs(2);

/// One member's flap, as of now.
#[derive(Debug, Clone, PartialEq)]
pub struct Flap {
    /// The host.
    pub host: usize,
    /// Its outages within the horizon.
    pub outages: usize,
    /// The longest outage that ended.
    pub longest: Duration,
    /// How long it has been down, where it is down now.
    pub down_for: Option<Duration>,
}

/// Each member's outages over the horizon: (went down, came back).
#[derive(Debug, Default)]
pub struct Outages {
    by_host: BTreeMap<usize, VecDeque<(Instant, Option<Instant>)>>,
}

impl Outages {
    /// Host `host` was taken down (`down`) or came back, at `at`.
    pub fn record(&mut self, host: usize, down: bool, at: Instant) {
        let q = self.by_host.entry(host).or_default();
        match (down, q.back_mut()) {
            (true, Some((_, None))) => {}
            (true, _) => q.push_back((at, None)),
            (false, Some((_, back @ None))) => *back = Some(at),
            (false, _) => {}
        }
    }

    /// The members whose membership flaps now: [`MIN_OUTAGES`] or more outages within the
    /// horizon, one of them over, not back for [`QUIET`] yet, and not down for
    /// [`STAYS_DOWN_VS_LONGEST`] times their longest outage.
    pub fn flapping(&mut self, now: Instant) -> Vec<Flap> {
        let mut out = Vec::new();
        for (&host, q) in &mut self.by_host {
            while q.front().is_some_and(|(_, back)| {
                back.is_some_and(|b| now.saturating_duration_since(b) > HORIZON)
            }) {
                q.pop_front();
            }
            let longest = q
                .iter()
                .filter_map(|(d, b)| Some(b.as_ref()?.saturating_duration_since(*d)))
                .max()
                .unwrap_or_default();
            let Some(&(last_down, back)) = q.back() else { continue };
            let over = q.iter().filter(|(_, b)| b.is_some()).count();
            let down_for = back.is_none().then(|| now.saturating_duration_since(last_down));
            let quiet = back.is_some_and(|b| now.saturating_duration_since(b) >= QUIET);
            let stayed = down_for
                .is_some_and(|d| d >= (longest * STAYS_DOWN_VS_LONGEST).max(STAYS_DOWN_MIN));
            if q.len() >= MIN_OUTAGES && over >= 1 && !quiet && !stayed {
                out.push(Flap { host, outages: q.len(), longest, down_for });
            }
        }
        self.by_host.retain(|_, q| !q.is_empty());
        out
    }
}

/// The findings with each flapping one-rail host's outages named as its rail, flapping: its
/// `host-down` (where it is down now) gives way to the rail, and a rail finding already
/// there gains the flap's words. A host of two or more rails that flaps is every rail at
/// once — the host — and stays a `host-down` while down.
pub fn name_flaps(pod: &Pod, found: &mut Vec<Finding>, flaps: &[Flap]) {
    for f in flaps {
        let Some(host) = pod.hosts.get(f.host) else { continue };
        if host.rails.len() != 1 {
            continue;
        }
        let at = Component::Rail(Dev { host: f.host, rail: 0 });
        let now = match f.down_for {
            Some(d) => format!("; down now, for {:.1} s", d.as_secs_f64()),
            None => String::new(),
        };
        let words = format!(
            "its host, on this one rail, was taken down by the pod's membership {} times in the \
             last {} s and came back each time (the longest outage {:.1} s){now}: the rail's \
             cable, port or NIC flapping — a host that died stays down",
            f.outages,
            HORIZON.as_secs(),
            f.longest.as_secs_f64()
        );
        found.retain(|x| !(x.kind == "host-down" && x.at == Component::Host(f.host)));
        match found.iter_mut().find(|x| x.at == at) {
            Some(x) => {
                x.severity = "error".into();
                x.evidence = format!("{}; {words}", x.evidence);
            }
            None => found.push(Finding {
                kind: "rail".into(),
                component: at.name(pod),
                severity: "error".into(),
                at,
                confidence: 1.0,
                evidence: words,
                paths: vec![],
                partial: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn two_outages_flap_and_one_or_a_host_that_stays_down_do_not() {
        let t0 = Instant::now();
        let mut o = Outages::default();
        // Down 1.5 s, back: one outage is no flap.
        o.record(3, true, at(t0, 0));
        o.record(3, false, at(t0, 1500));
        assert!(o.flapping(at(t0, 2000)).is_empty());
        // Down again: a flap at once, down now.
        o.record(3, true, at(t0, 3300));
        let f = o.flapping(at(t0, 3400));
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].host, f[0].outages), (3, 2));
        assert_eq!(f[0].longest, Duration::from_millis(1500));
        assert_eq!(f[0].down_for, Some(Duration::from_millis(100)));
        // Back: still flapping until quiet for QUIET.
        o.record(3, false, at(t0, 5000));
        assert_eq!(o.flapping(at(t0, 5000 + 6900)).len(), 1);
        assert!(o.flapping(at(t0, 5000 + 7000)).is_empty());
        // A host that flapped, then died: down for twice its longest outage, no more a flap.
        let mut o = Outages::default();
        for k in 0..3u64 {
            o.record(1, true, at(t0, k * 3000));
            o.record(1, false, at(t0, k * 3000 + 1200));
        }
        o.record(1, true, at(t0, 9000));
        assert_eq!(o.flapping(at(t0, 9000 + 1900)).len(), 1);
        assert!(o.flapping(at(t0, 9000 + 2400)).is_empty());
        // A killed host: one outage, never back.
        let mut o = Outages::default();
        o.record(2, true, at(t0, 0));
        assert!(o.flapping(at(t0, 20_000)).is_empty());
        // Outages older than the horizon are forgotten.
        let mut o = Outages::default();
        o.record(4, true, at(t0, 0));
        o.record(4, false, at(t0, 1000));
        o.record(4, true, at(t0, 32_000));
        assert!(o.flapping(at(t0, 32_100)).is_empty());
    }

    fn pod(rails: usize) -> Pod {
        crate::test_pod(4, rails, 2)
    }

    fn host_down(pod: &Pod, h: usize) -> Finding {
        Finding {
            kind: "host-down".into(),
            component: Component::Host(h).name(pod),
            severity: "error".into(),
            at: Component::Host(h),
            confidence: 1.0,
            evidence: String::new(),
            paths: vec![],
            partial: false,
        }
    }

    #[test]
    fn a_one_rail_host_that_flaps_is_its_rail_and_a_two_rail_host_stays_down() {
        let flap = |host| Flap {
            host,
            outages: 3,
            longest: Duration::from_millis(1800),
            down_for: Some(Duration::from_millis(400)),
        };
        let p = pod(1);
        let mut found = vec![host_down(&p, 2), host_down(&p, 0)];
        name_flaps(&p, &mut found, &[flap(2)]);
        let got: Vec<(&str, &Component)> = found.iter().map(|f| (f.kind.as_str(), &f.at)).collect();
        let rail = Component::Rail(Dev { host: 2, rail: 0 });
        assert_eq!(got, [("host-down", &Component::Host(0)), ("rail", &rail)]);
        assert_eq!(found[1].severity, "error");
        assert!(found[1].evidence.contains("3 times"), "{}", found[1].evidence);
        // A rail finding already there (the cable's loss test) keeps its place and gains it.
        let mut found = vec![Finding { kind: "rail".into(), at: rail.clone(), ..host_down(&p, 2) }];
        name_flaps(&p, &mut found, &[flap(2)]);
        assert_eq!(found.len(), 1);
        assert!(found[0].evidence.contains("flapping"));
        // Two rails: every rail at once is the host.
        let p = pod(2);
        let mut found = vec![host_down(&p, 2)];
        name_flaps(&p, &mut found, &[flap(2)]);
        assert_eq!(found, [host_down(&p, 2)]);
    }
}
