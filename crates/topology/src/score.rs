//! The scorer of a fault campaign (issue 44), written before the runs: for each fault of
//! the catalogue ([`crate::fault`]), what must be named, by which tool, at which severity,
//! and what counts as a match; what a finding the faults do not explain is; and how an
//! agent's findings over time are timed (named, flicker, cleared).
//!
//! The rules:
//! - **Named** means at error severity — what an operator is paged for — except a host
//!   starved of CPU, which the agent names `host-cpu` at warning by design (not the
//!   network's fault; its paths are kept out of the network verdicts).
//! - A cable fault (a host's cable) matches only a `rail` naming that device (an `mtu`
//!   naming it, for an MTU); a host-pair `link` does not. A cable down under a host of one
//!   rail is that host gone to everyone: `host-down` (`host` for qualify) naming the host.
//! - A ToR–spine link fault matches only a finding that names that ToR and that spine
//!   ([`Component::TorSpine`]; `mtu` for an MTU).
//! - Except where no end-to-end measurement can tell them apart ([`twins`]): in a plane of
//!   two ToRs every path through one ToR's link to spine `j` crosses the other's, and with
//!   one rail spine `j` is those two links. There a finding naming any of them matches a
//!   fault on any of them (added with the tomography, before its draws ran: the first
//!   slice's rule demanded what no probe can see).
//! - A spine down or black-holing some flows matches only a `spine` naming that spine.
//! - A ToR dropping at every port matches only a `tor` naming that ToR.
//! - A host killed or frozen matches only `host-down` (the agent) or `host` (qualify)
//!   naming that host; a host starved, only `host-cpu` naming it (the agent).
//! - Which tool must name it ([`Need`]): a cable at part of its rate needs load, so
//!   qualify's alone (the agent's probes cannot see it); a starved host the agent's alone
//!   (qualify measures what the host can do); every other kind both.
//! - A finding is **explained** by a fault when it lies on the fault's place (a finding on
//!   a path through the bad cable, under the bad ToR, across the spines for a spine fault,
//!   on the bad host); a finding of warning or error severity no fault explains is an
//!   **extra** — on a clean pod, a false alarm.

use serde::{Deserialize, Serialize};

use crate::component::Component;
use crate::fabric::{Dev, Link};
use crate::fault::{Fault, Kind, Place, TorId};
use crate::shape::Shape;

/// A tool's severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Informational: not counted.
    Info,
    /// Degraded, or not the network.
    Warning,
    /// What an operator is paged for.
    Error,
}

/// One finding as a tool said it: a qualify suspect (always error: it failed checks) or an
/// agent finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Said {
    /// Its kind (`rail`, `spine`, `mtu`, `host-down`, …).
    pub kind: String,
    /// Its severity.
    pub severity: Severity,
    /// The component it names.
    pub at: Component,
}

/// Which tools must name a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Need {
    /// `podnet qualify` across the pod.
    pub qualify: bool,
    /// `podnet agent --pod`.
    pub agent: bool,
}

/// Which tools must name a fault of `kind` (see the module's rules).
pub fn need(kind: Kind) -> Need {
    match kind {
        Kind::Slow => Need { qualify: true, agent: false },
        Kind::HostStarved => Need { qualify: false, agent: true },
        _ => Need { qualify: true, agent: true },
    }
}

/// A tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// `podnet qualify`.
    Qualify,
    /// `podnet agent --pod`.
    Agent,
}

/// Whether `said` names `fault` (see the module's rules).
pub fn names(shape: &Shape, fault: &Fault, tool: Tool, said: &Said) -> bool {
    let warning_ok = fault.kind == Kind::HostStarved && said.kind == "host-cpu";
    if said.severity < Severity::Error && !warning_ok {
        return false;
    }
    let host_gone = |h: usize| match tool {
        Tool::Agent => said.kind == "host-down" && said.at == Component::Host(h),
        Tool::Qualify => said.kind == "host" && said.at == Component::Host(h),
    };
    let mtu = fault.kind == Kind::Mtu;
    let kind_ok = |k: &str| if mtu { said.kind == "mtu" } else { said.kind == k };
    match (&fault.at, fault.kind) {
        (Place::Host(h), Kind::HostKilled | Kind::HostFrozen) => host_gone(*h),
        (Place::Host(h), Kind::HostStarved) => {
            said.kind == "host-cpu" && said.at == Component::Host(*h)
        }
        (Place::Cable(d), _) => {
            let one_rail_down =
                shape.rails == 1 && matches!(fault.kind, Kind::Down) && host_gone(d.host);
            one_rail_down || (kind_ok("rail") && said.at == Component::Rail(*d))
        }
        (Place::SpineLink { tor, spine }, _) => {
            (kind_ok("spine-link") || kind_ok("spine"))
                && twins(shape, &Component::TorSpine { tor: tor.name(), spine: *spine }, &said.at)
        }
        (Place::Spine(j), Kind::SpineDown | Kind::PartialBlackhole) => {
            let at = Component::Spine { tors: shape.racks * shape.rails, spine: Some(*j) };
            matches!(said.kind.as_str(), "spine" | "spine-link") && twins(shape, &at, &said.at)
        }
        (Place::Tor(t), Kind::TorLoss) => said.kind == "tor" && said.at == Component::Tor(t.name()),
        _ => false,
    }
}

/// Whether `a` (a ToR's link to a spine, or a spine) and `b` lie on the very same paths, so
/// that no end-to-end measurement tells them apart: they are the same, or, in a plane of two
/// ToRs (two racks), the two ToRs' links to one spine — and that spine itself where the pod
/// has that one plane (one rail). A path joins two devices of one rail.
pub fn twins(shape: &Shape, a: &Component, b: &Component) -> bool {
    let link_of = |c: &Component| match c {
        Component::TorSpine { tor, spine } => Some((tor.clone(), *spine)),
        _ => None,
    };
    let spine_of = |c: &Component| match c {
        Component::Spine { spine: Some(j), .. } => Some(*j),
        Component::TorSpine { spine, .. } => Some(*spine),
        _ => None,
    };
    let rail_of = |tor: &str| tor.rsplit_once("-rail").map(|(_, r)| r.to_string());
    if a == b {
        return matches!(a, Component::TorSpine { .. } | Component::Spine { spine: Some(_), .. });
    }
    if shape.racks != 2 || spine_of(a).is_none() || spine_of(a) != spine_of(b) {
        return false;
    }
    match (link_of(a), link_of(b)) {
        (Some((t, _)), Some((u, _))) => rail_of(&t) == rail_of(&u),
        (Some(_), None) | (None, Some(_)) => shape.rails == 1,
        (None, None) => true,
    }
}

/// Whether `said` lies on `fault`'s place: a finding the fault explains, though it may not
/// name it.
pub fn explains(shape: &Shape, fault: &Fault, said: &Said) -> bool {
    let pod = shape.pod();
    let on_host = |h: usize, at: &Component| match at {
        Component::Host(x) => *x == h,
        Component::Rail(d) => d.host == h,
        Component::Path(a, b) => a.host == h || b.host == h,
        _ => false,
    };
    let crosses_spines = |at: &Component| match at {
        Component::Path(a, b) => !pod.same_tor(*a, *b),
        Component::SpineLinks(_)
        | Component::SpinePath(..)
        | Component::TorSpine { .. }
        | Component::Spine { .. } => true,
        _ => false,
    };
    let under = |t: &TorId, at: &Component| {
        let name = t.name();
        match at {
            Component::Tor(x) => *x == name,
            _ => at.tors(&pod).contains(&name.as_str()),
        }
    };
    let links = said.at.links(&pod);
    match &fault.at {
        Place::Host(h) => on_host(*h, &said.at),
        Place::Cable(d) => {
            links.contains(&Link::HostTor(*d))
                || on_host(d.host, &said.at) && shape.rails == 1
                || said.at == Component::Rail(*d)
        }
        Place::SpineLink { tor, spine } => {
            crosses_spines(&said.at) && under(tor, &said.at)
                || matches!(&said.at, Component::Spine { .. })
                || twins(shape, &Component::TorSpine { tor: tor.name(), spine: *spine }, &said.at)
        }
        Place::Spine(_) => crosses_spines(&said.at),
        Place::Tor(t) => under(t, &said.at) || on_tor_hosts(shape, t, &said.at),
    }
}

/// Whether `at` is a device, rail or host under ToR `t`.
fn on_tor_hosts(shape: &Shape, t: &TorId, at: &Component) -> bool {
    let mine = |d: &Dev| TorId::of(shape, *d) == *t;
    match at {
        Component::Rail(d) => mine(d),
        Component::Path(a, b) => mine(a) || mine(b),
        Component::Host(h) => (0..shape.rails).any(|r| mine(&Dev { host: *h, rail: r })),
        _ => false,
    }
}

/// One tool's answer to one draw, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    /// Per fault (in the draw's order): whether the tool named it, where it must.
    pub named: Vec<Option<bool>>,
    /// Its position in the tool's list (0-based) where named.
    pub rank: Vec<Option<usize>>,
    /// Findings of warning or error severity that no fault explains (on a clean pod:
    /// false alarms).
    pub extra: Vec<Said>,
}

impl Verdict {
    /// Every fault the tool must name, named.
    pub fn right(&self) -> bool {
        self.named.iter().all(|n| n.unwrap_or(true))
    }
}

/// Judges what `tool` said of a draw with `faults` on `shape`.
pub fn judge(shape: &Shape, faults: &[Fault], tool: Tool, said: &[Said]) -> Verdict {
    let must = |f: &Fault| match tool {
        Tool::Qualify => need(f.kind).qualify,
        Tool::Agent => need(f.kind).agent,
    };
    let rank: Vec<Option<usize>> =
        faults.iter().map(|f| said.iter().position(|s| names(shape, f, tool, s))).collect();
    let named = faults.iter().zip(&rank).map(|(f, r)| must(f).then_some(r.is_some())).collect();
    let extra = said
        .iter()
        .filter(|s| s.severity >= Severity::Warning)
        .filter(|s| !faults.iter().any(|f| names(shape, f, tool, s) || explains(shape, f, s)))
        .cloned()
        .collect();
    Verdict { named, rank, extra }
}

/// What the agent said over a draw, timed against one fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    /// Seconds from the fault's start to the first finding naming it (that then held).
    pub named_after: Option<f64>,
    /// Times a finding naming it cleared while the fault stayed (then came back or not).
    pub flicker: usize,
    /// Seconds from the heal to the last finding naming it gone.
    pub cleared_after: Option<f64>,
}

/// Times `fault`, started at `start` and healed at `heal` (seconds on the snapshots'
/// clock), from the agent's findings at each snapshot time.
pub fn timeline(
    shape: &Shape,
    fault: &Fault,
    start: f64,
    heal: Option<f64>,
    snapshots: &[(f64, Vec<Said>)],
) -> Timeline {
    let named_at = |s: &[Said]| s.iter().any(|x| names(shape, fault, Tool::Agent, x));
    let during: Vec<(f64, bool)> = snapshots
        .iter()
        .filter(|(t, _)| *t >= start && heal.is_none_or(|h| *t < h))
        .map(|(t, s)| (*t, named_at(s)))
        .collect();
    let named_after = during.iter().find(|(_, n)| *n).map(|(t, _)| t - start);
    let flicker = during.windows(2).filter(|w| w[0].1 && !w[1].1).count();
    let cleared_after = heal.and_then(|h| {
        let after: Vec<&(f64, Vec<Said>)> = snapshots.iter().filter(|(t, _)| *t >= h).collect();
        // The first snapshot after the heal from which it is never named again.
        let last_named = after.iter().rposition(|(_, s)| named_at(s));
        match last_named {
            None => after.first().map(|(t, _)| t - h),
            Some(i) => after.get(i + 1).map(|(t, _)| t - h),
        }
    });
    Timeline { named_after, flicker, cleared_after }
}

/// The Wilson score interval of `k` successes in `n` at 95 % (z = 1.96): (low, high).
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n, z) = (k as f64, n as f64, 1.96f64);
    let p = k / n;
    let den = 1.0 + z * z / n;
    let mid = (p + z * z / (2.0 * n)) / den;
    let half = z * ((p * (1.0 - p) + z * z / (4.0 * n)) / n).sqrt() / den;
    ((mid - half).max(0.0), (mid + half).min(1.0))
}

/// A pod's component from a shape's place, where one names it: what a tool that names the
/// fault right says.
pub fn component(shape: &Shape, at: &Place) -> Component {
    match at {
        Place::Cable(d) => Component::Rail(*d),
        Place::SpineLink { tor, spine } => Component::TorSpine { tor: tor.name(), spine: *spine },
        Place::Spine(j) => Component::Spine { tors: shape.racks * shape.rails, spine: Some(*j) },
        Place::Tor(t) => Component::Tor(t.name()),
        Place::Host(h) => Component::Host(*h),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{Direction, Scenario};
    use crate::shape::Uplink;

    fn shape() -> Shape {
        // 3 racks x 2 hosts, 2 rails, 2 spines, 1:1.
        Shape {
            seed: 1,
            racks: 3,
            hosts_per_tor: 2,
            rails: 2,
            spines: 2,
            uplink: Uplink::OneToOne,
            host_mbit: 100,
            mtu: 9000,
            ecmp_seed: 1,
        }
    }

    fn said(kind: &str, at: Component) -> Said {
        Said { kind: kind.into(), severity: Severity::Error, at }
    }

    fn fault(kind: Kind, at: Place) -> Fault {
        Fault { kind, at, strength: 1.0, direction: Direction::Both, start_s: 0.0 }
    }

    #[test]
    fn a_cable_fault_is_named_only_by_its_rail() {
        let s = shape();
        let d = Dev { host: 3, rail: 1 };
        let f = fault(Kind::Loss, Place::Cable(d));
        let right = said("rail", Component::Rail(d));
        let v = judge(&s, std::slice::from_ref(&f), Tool::Agent, std::slice::from_ref(&right));
        assert!(v.right() && v.extra.is_empty(), "{v:?}");
        // A wrong answer is a miss: the other rail of the host, the host, a host-pair link
        // through the cable, a warning.
        let other = Dev { host: 3, rail: 0 };
        for wrong in [
            said("rail", Component::Rail(other)),
            said("host", Component::Host(3)),
            said("link", Component::Path(d, Dev { host: 0, rail: 1 })),
            Said { severity: Severity::Warning, ..right.clone() },
        ] {
            let v = judge(&s, std::slice::from_ref(&f), Tool::Agent, std::slice::from_ref(&wrong));
            assert_eq!(v.named, vec![Some(false)], "{wrong:?} named it");
        }
        // The link through the cable is explained (not an extra); the other rail is not.
        let v = judge(
            &s,
            std::slice::from_ref(&f),
            Tool::Qualify,
            &[said("link", Component::Path(d, Dev { host: 0, rail: 1 })), right.clone()],
        );
        assert!(v.right() && v.extra.is_empty() && v.rank == vec![Some(1)], "{v:?}");
        let v = judge(&s, &[f], Tool::Qualify, &[said("rail", Component::Rail(other)), right]);
        assert_eq!(v.extra.len(), 1, "{v:?}");
    }

    #[test]
    fn a_spine_link_fault_needs_that_tor_and_that_spine() {
        let s = shape();
        let tor = TorId { rack: 1, rail: 0 };
        let f = fault(Kind::Loss, Place::SpineLink { tor, spine: 1 });
        let ok = said("spine-link", Component::TorSpine { tor: tor.name(), spine: 1 });
        assert!(names(&s, &f, Tool::Qualify, &ok));
        for wrong in [
            said("spine-link", Component::TorSpine { tor: tor.name(), spine: 0 }),
            said("spine-path", Component::SpineLinks(tor.name())),
            said("spine-path", Component::SpinePath("rack0-rail0".into(), tor.name())),
            said("spine", Component::Spine { tors: 6, spine: Some(1) }),
        ] {
            assert!(!names(&s, &f, Tool::Qualify, &wrong), "{wrong:?} named it");
            // … though each is explained by it, not an extra.
            assert!(explains(&s, &f, &wrong), "{wrong:?}");
        }
        // An MTU there is named as an mtu.
        let m = fault(Kind::Mtu, Place::SpineLink { tor, spine: 1 });
        assert!(!names(&s, &m, Tool::Agent, &ok));
        assert!(names(&s, &m, Tool::Agent, &Said { kind: "mtu".into(), ..ok }));
        // The other end of a path through it, or a rail under another ToR, is not explained
        // by it: a healthy link or device blamed.
        let far_end =
            said("spine-link", Component::TorSpine { tor: "rack0-rail0".into(), spine: 1 });
        assert!(!names(&s, &f, Tool::Qualify, &far_end) && !explains(&s, &f, &far_end));
        let far = said("rail", Component::Rail(Dev { host: 5, rail: 1 }));
        assert!(!explains(&s, &f, &far));
    }

    #[test]
    fn hosts_spines_and_tors_are_named_by_their_own_kind() {
        let s = shape();
        let killed = fault(Kind::HostKilled, Place::Host(2));
        assert!(names(&s, &killed, Tool::Agent, &said("host-down", Component::Host(2))));
        assert!(!names(&s, &killed, Tool::Agent, &said("host-down", Component::Host(3))));
        assert!(!names(&s, &killed, Tool::Agent, &said("host", Component::Host(2))));
        assert!(names(&s, &killed, Tool::Qualify, &said("host", Component::Host(2))));
        let starved = fault(Kind::HostStarved, Place::Host(2));
        let cpu = Said { severity: Severity::Warning, ..said("host-cpu", Component::Host(2)) };
        assert!(names(&s, &starved, Tool::Agent, &cpu), "a warning, by design");
        assert_eq!(need(Kind::HostStarved), Need { qualify: false, agent: true });
        assert_eq!(need(Kind::Slow), Need { qualify: true, agent: false });
        let spine = fault(Kind::SpineDown, Place::Spine(1));
        assert!(names(
            &s,
            &spine,
            Tool::Agent,
            &said("spine", Component::Spine { tors: 6, spine: Some(1) })
        ));
        assert!(!names(
            &s,
            &spine,
            Tool::Agent,
            &said("spine", Component::Spine { tors: 6, spine: None })
        ));
        assert!(!names(
            &s,
            &spine,
            Tool::Agent,
            &said("spine", Component::Spine { tors: 6, spine: Some(0) })
        ));
        let t = TorId { rack: 2, rail: 1 };
        let tor = fault(Kind::TorLoss, Place::Tor(t));
        assert!(names(&s, &tor, Tool::Qualify, &said("tor", Component::Tor(t.name()))));
        assert!(!names(
            &s,
            &tor,
            Tool::Qualify,
            &said("tor", Component::Tor("rack2-rail0".into()))
        ));
        // What a right answer says, from the place.
        for (f, tool) in [(&killed, Tool::Agent), (&spine, Tool::Qualify), (&tor, Tool::Agent)] {
            let kind = match f.kind {
                Kind::HostKilled => "host-down",
                Kind::SpineDown => "spine",
                _ => "tor",
            };
            assert!(names(&s, f, tool, &said(kind, component(&s, &f.at))), "{f:?}");
        }
    }

    #[test]
    fn a_clean_pod_with_any_finding_is_a_false_alarm() {
        let s = shape();
        let v = judge(&s, &[], Tool::Agent, &[]);
        assert!(v.right() && v.extra.is_empty());
        let info = Said { severity: Severity::Info, ..said("rail", Component::Tor("x".into())) };
        assert!(judge(&s, &[], Tool::Agent, &[info]).extra.is_empty(), "info is not an alarm");
        let warn = Said { severity: Severity::Warning, ..said("link", Component::Tor("x".into())) };
        assert_eq!(judge(&s, &[], Tool::Agent, &[warn]).extra.len(), 1);
        // A host's fault explains findings on that host, not another host's.
        let starved = fault(Kind::HostStarved, Place::Host(2));
        let other = Said { severity: Severity::Warning, ..said("host-cpu", Component::Host(4)) };
        assert_eq!(judge(&s, std::slice::from_ref(&starved), Tool::Agent, &[other]).extra.len(), 1);
        let mine =
            said("link", Component::Path(Dev { host: 2, rail: 0 }, Dev { host: 4, rail: 0 }));
        assert!(judge(&s, &[starved], Tool::Agent, &[mine]).extra.is_empty());
    }

    #[test]
    fn the_timeline_times_naming_flicker_and_clearing() {
        let s = shape();
        let d = Dev { host: 1, rail: 0 };
        let f = fault(Kind::Loss, Place::Cable(d));
        let yes = vec![said("rail", Component::Rail(d))];
        let no: Vec<Said> = vec![];
        // Fault from 10 s to 40 s; named at 18 s, gone at 20 s, back at 22 s; cleared at 52.
        let snaps: Vec<(f64, Vec<Said>)> = (0..30)
            .map(|i| {
                let t = f64::from(i) * 2.0;
                let on = (18.0..20.0).contains(&t) || (22.0..52.0).contains(&t);
                (t, if on { yes.clone() } else { no.clone() })
            })
            .collect();
        let tl = timeline(&s, &f, 10.0, Some(40.0), &snaps);
        assert_eq!(tl, Timeline { named_after: Some(8.0), flicker: 1, cleared_after: Some(12.0) });
        // Never named.
        let tl = timeline(&s, &f, 10.0, Some(40.0), &[(12.0, no.clone()), (42.0, no)]);
        assert_eq!(tl, Timeline { named_after: None, flicker: 0, cleared_after: Some(2.0) });
    }

    #[test]
    fn wilson_intervals() {
        let (lo, hi) = wilson(5, 5);
        assert!((lo - 0.566).abs() < 0.001 && hi == 1.0, "{lo} {hi}");
        let (lo, hi) = wilson(0, 10);
        assert!(lo == 0.0 && (hi - 0.278).abs() < 0.001, "{hi}");
        let (lo, hi) = wilson(95, 100);
        assert!((lo - 0.888).abs() < 0.001 && (hi - 0.978).abs() < 0.001, "{lo} {hi}");
    }

    #[test]
    fn every_kind_draws_within_its_range_on_every_shape_and_can_be_made_and_healed() {
        for seed in 0..200u64 {
            let s = Shape::draw(seed);
            let pod = s.pod();
            for kind in Kind::ALL {
                let f = Fault::draw(seed, &s, kind);
                assert_eq!(f, Fault::draw(seed, &s, kind), "the same seed, the same fault");
                match &f.at {
                    Place::Cable(d) => assert!(d.host < s.hosts() && d.rail < s.rails),
                    Place::SpineLink { tor, spine } => {
                        assert!(tor.rack < s.racks && tor.rail < s.rails && *spine < s.spines);
                        assert!(pod.tors().iter().any(|(t, _)| *t == tor.name()));
                    }
                    Place::Spine(j) => assert!(*j < s.spines),
                    Place::Tor(t) => assert!(pod.tors().iter().any(|(x, _)| *x == t.name())),
                    Place::Host(h) => assert!(*h < s.hosts()),
                }
                let inside = |(lo, hi): (f64, f64)| f.strength >= lo && f.strength <= hi;
                match kind {
                    Kind::Loss | Kind::TorLoss => assert!(inside(crate::fault::ranges::LOSS_PCT)),
                    Kind::Slow => assert!(inside(crate::fault::ranges::SLOW_SHARE)),
                    Kind::Mtu => {
                        assert!(f.strength < f64::from(s.largest_frame()), "{f:?} {s:?}");
                        assert!(f.strength >= f64::from(1500.min(s.largest_frame() / 2)));
                    }
                    _ => {}
                }
                let make = f.inject(&s);
                assert!(!make.is_empty(), "{f:?}");
                assert!(make.iter().all(|c| c[1] == "NAME"), "{make:?}");
                assert_eq!(f.heal(&s).is_empty(), kind == Kind::HostKilled, "{f:?}");
                assert!(!f.describe(&s).is_empty());
                // A right answer names it; the scorer knows what that is.
                let n = need(kind);
                assert!(n.qualify || n.agent);
            }
            let sc = Scenario::draw(seed, &s, Kind::Loss);
            assert!(!sc.faults.is_empty() && sc.faults.len() <= 2);
        }
        // Over 200 seeds: both link places, every direction, a second fault, a late start.
        let all: Vec<Scenario> =
            (0..200).map(|seed| Scenario::draw(seed, &Shape::draw(seed), Kind::Loss)).collect();
        assert!(all.iter().any(|s| s.faults.len() == 2));
        assert!(all.iter().any(|s| s.faults[0].start_s > 0.0));
        assert!(all.iter().any(|s| matches!(s.faults[0].at, Place::Cable(_))));
        assert!(all.iter().any(|s| matches!(s.faults[0].at, Place::SpineLink { .. })));
        for d in [Direction::Both, Direction::In, Direction::Out] {
            assert!(all.iter().any(|s| s.faults[0].direction == d), "{d:?}");
        }
    }
}
