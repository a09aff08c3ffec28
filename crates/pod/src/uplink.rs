//! The pod's per-link loss test: a ToR's link to one spine that drops a few percent of its
//! packets at random. Each probe between two ToRs crosses, out and back, the links of both
//! ToRs to one or two spines (which, the fabric's routes say: [`topology::route`]); a lossy
//! link loses a few percent of the probes that cross it and none of the others — spread
//! over every pair of hosts across the two ToRs and every one of their paths, below what
//! any path's window shows. Pooled per link over the horizon, as 007 and NetBouncer pool
//! per component, it stands out.
//!
//! **The counts**: every host that lost a probe in the horizon reports its small probes to
//! each other ToR by the two spines they crossed ([`Crossings`]); the pod sums them into
//! classes (two ToRs, two spines). A class crosses the links of both ToRs to both spines.
//!
//! **The test**, per link, each time the pod's reports change: `k` of the `n` probes of
//! the classes that cross it were lost; under the null hypothesis the link loses what the
//! pod's other links lose (`p0`: the median of their shares over the classes that do not
//! cross this link, at least [`crate::cable::BACKGROUND_FLOOR`]), and `P(X ≥ k)` for
//! `X ~ Binomial(n, p0)` must be at most [`crate::cable::ALPHA`] (the cables' bar; a link
//! named before stays while it is below [`crate::cable::HOLD_ALPHA`] and has not healed,
//! [`crate::cable::healed`]). Greedy, the surest
//! first: a link named explains every class that crosses it, which are taken out before
//! the others are tried — the other ToR's link to the same spine then keeps only its
//! classes with third ToRs. In a plane of two ToRs every class that crosses one ToR's link
//! to a spine crosses the other's: the two are twins no probe tells apart; the one named
//! before (held) is named again, else the first in the plan's order of ToRs, its twin in the
//! evidence, and either held holds both.
//!
//! **What is not a link**: a loss that the link's ToR's other links share (a cable under
//! the ToR, the ToR itself: their losses fall on every spine), or its spine's links from
//! other ToRs (the spine): the null hypothesis's share is at least theirs, pooled over
//! their classes that do not cross the link; and two links named under one ToR or to one
//! spine. False alarms are bounded as the
//! cables' are: at most `ALPHA` per link and test, a test per probe round.

use std::collections::{BTreeMap, BTreeSet};

use topology::Pod;

use crate::cable::{
    ALPHA, BACKGROUND_FLOOR, HOLD_ALPHA, MIN_LOST, Part, binomial_tail, healed, pooled_since,
};
use crate::probe::{Crossings, Report};

/// Of two links named under one ToR or to one spine, one that loses this many times the
/// other's share is the link; the other is not (both go otherwise).
pub const DOMINANT: f64 = 5.0;

/// A ToR's link to a spine: (the ToR's index in [`Pod::tors`], the spine).
pub type Link = (u16, u8);

/// Probes between two ToRs (the lower index first) whose round trips crossed the same two
/// spines (the lower first).
type Class = (u16, u16, [u8; 2]);

/// A ToR's link to a spine that loses probes above the background.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkLoss {
    /// The ToR's name.
    pub tor: String,
    /// The spine.
    pub spine: usize,
    /// Its twin, where the pod cannot tell them apart: the other ToR of a plane of two.
    pub twin: Option<String>,
    /// Small probes across it over the horizon (those of links named before it taken
    /// out) …
    pub judged: u32,
    /// … and lost.
    pub lost: u32,
    /// The loss share the test took as the background.
    pub background: f64,
    /// `P(X ≥ lost)` by chance.
    pub p_value: f64,
}

/// Whether class `c` crosses link `l`.
fn crosses(c: &Class, l: Link) -> bool {
    (c.0 == l.0 || c.1 == l.0) && c.2.contains(&l.1)
}

/// The other ToR's link to the same spine, in a plane of two ToRs: every class across `l`
/// crosses it too.
fn twin_of(classes: &BTreeMap<Class, (u32, u32)>, l: Link) -> Option<Link> {
    let across: BTreeSet<u16> = classes
        .keys()
        .filter(|c| crosses(c, l))
        .map(|c| if c.0 == l.0 { c.1 } else { c.0 })
        .collect();
    match across.iter().collect::<Vec<_>>()[..] {
        [t] => Some((*t, l.1)),
        _ => None,
    }
}

/// (judged, lost) over the classes that cross `l` and none of `not`.
fn counts(classes: &BTreeMap<Class, (u32, u32)>, l: Link, not: &[Link]) -> (u32, u32) {
    classes
        .iter()
        .filter(|(c, _)| crosses(c, l) && !not.iter().any(|x| crosses(c, *x)))
        .fold((0, 0), |(n, k), (_, v)| (n + v.0, k + v.1))
}

/// The links whose probes are lost above the background, by the test above; `excluded`
/// hosts' reports are left out; `held`, the links named before (by ToR name and spine),
/// stay while their losses stay below [`HOLD_ALPHA`].
pub fn link_loss(
    pod: &Pod,
    reports: &BTreeMap<u16, Report>,
    excluded: &BTreeSet<usize>,
    held: &BTreeSet<(String, usize)>,
) -> Vec<LinkLoss> {
    let tors = pod.tors();
    let tor_index: BTreeMap<&str, u16> =
        tors.iter().enumerate().map(|(i, (t, _))| (t.as_str(), i as u16)).collect();
    let mut classes: BTreeMap<Class, (u32, u32)> = BTreeMap::new();
    // Each class's reports, for when it last lost: (judged, lost, since, quiet).
    let mut parts: BTreeMap<Class, Vec<Part>> = BTreeMap::new();
    for r in reports.values() {
        let host = usize::from(r.host);
        if excluded.contains(&host) || host >= pod.hosts.len() {
            continue;
        }
        for Crossings { rail, tor, spines, judged, lost, quiet, since } in &r.crossings {
            let rail = usize::from(*rail);
            if rail >= pod.hosts[host].rails.len() || usize::from(*tor) >= tors.len() {
                continue;
            }
            let me = tor_index[pod.hosts[host].rails[rail].tor.as_str()];
            if me == *tor {
                continue;
            }
            let class = (me.min(*tor), me.max(*tor), *spines);
            let e = classes.entry(class).or_default();
            e.0 += judged;
            e.1 += lost.min(judged);
            parts.entry(class).or_default().push((*judged, *lost, *since, *quiet));
        }
    }
    let links: BTreeSet<Link> = classes
        .keys()
        .flat_map(|c| [(c.0, c.2[0]), (c.0, c.2[1]), (c.1, c.2[0]), (c.1, c.2[1])])
        .collect();
    // The median share of the links but `l`, over their classes that do not cross it.
    let background = |classes: &BTreeMap<Class, (u32, u32)>, l: Link| -> f64 {
        let mut shares: Vec<f64> = links
            .iter()
            .filter(|x| **x != l)
            .map(|x| counts(classes, *x, &[l]))
            .filter(|(n, _)| *n > 0)
            .map(|(n, k)| f64::from(k) / f64::from(n))
            .collect();
        shares.sort_by(f64::total_cmp);
        shares.get(shares.len() / 2).copied().unwrap_or(0.0).max(BACKGROUND_FLOOR)
    };
    let name = |l: Link| tors[usize::from(l.0)].0.clone();
    // Named before.
    let was = |x: Link| held.contains(&(name(x), usize::from(x.1)));
    let mut named: Vec<LinkLoss> = Vec::new();
    let mut done: BTreeSet<Link> = BTreeSet::new();
    loop {
        let best = links
            .iter()
            .filter(|l| !done.contains(l))
            .filter_map(|&l| {
                let (n, k) = counts(&classes, l, &[]);
                if k < MIN_LOST {
                    return None;
                }
                // The ToR's other links, and the spine's links from other ToRs, over the
                // classes that do not cross this one: where they lose as much, the loss is a
                // cable's or the ToR's (every spine), or the spine's (every ToR).
                let pooled = |mates: &dyn Fn(&Link) -> bool| {
                    let (n, k) = links
                        .iter()
                        .filter(|x| **x != l && mates(x))
                        .map(|x| counts(&classes, *x, &[l]))
                        .fold((0, 0), |(n, k), c| (n + c.0, k + c.1));
                    f64::from(k) / f64::from(n.max(1))
                };
                let p0 = background(&classes, l)
                    .max(pooled(&|x| x.0 == l.0))
                    .max(pooled(&|x| x.1 == l.1));
                let p = binomial_tail(n, k, p0);
                let bar = if was(l) || twin_of(&classes, l).is_some_and(was) {
                    HOLD_ALPHA
                } else {
                    ALPHA
                };
                // Healed: as long without a loss as its share makes unlikely.
                let across: Vec<Part> = parts
                    .iter()
                    .filter(|(c, _)| crosses(c, l) && classes.contains_key(c))
                    .flat_map(|(_, v)| v.iter().copied())
                    .collect();
                let (since, quiet) = pooled_since(&across);
                (p <= bar && !healed(n, k, p0, since, quiet)).then_some((l, n, k, p0, p))
            })
            .min_by(|a, b| a.4.total_cmp(&b.4).then(b.2.cmp(&a.2)));
        let Some((l, judged, lost, background, p_value)) = best else { break };
        // Twins are named steadily: the one named before, else the first in the plan's order.
        let (shown, twin) = match twin_of(&classes, l) {
            Some(other) => {
                let first = if was(l) || was(other) { was(other) } else { other.0 < l.0 };
                if first { (other, Some(name(l))) } else { (l, Some(name(other))) }
            }
            None => (l, None),
        };
        classes.retain(|c, _| !crosses(c, l));
        done.insert(l);
        named.push(LinkLoss {
            tor: name(shown),
            spine: usize::from(l.1),
            twin,
            judged,
            lost,
            background,
            p_value,
        });
    }
    // Two under one ToR, or two to one spine: a cable or the ToR, or the spine — unless one
    // loses many times what each of the others does (a link flapping, whose transitions
    // cost its ToR's other links a burst): it is kept, they go.
    let share = |l: &LinkLoss| f64::from(l.lost) / f64::from(l.judged.max(1));
    let crowded = |a: &LinkLoss| {
        named.iter().any(|b| {
            !std::ptr::eq(a, b)
                && (b.tor == a.tor || b.spine == a.spine)
                && share(a) < DOMINANT * share(b)
        })
    };
    let keep: Vec<bool> = named.iter().map(|a| !crowded(a)).collect();
    named.into_iter().zip(keep).filter(|(_, k)| *k).map(|(a, _)| a).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cable::tests::Coin;
    use crate::test_pod;
    use topology::Dev;

    /// Reports of a pod in which every device sends `each` probes to every device of its rail
    /// under another ToR over the horizon, spread evenly over every (out, back) pair of
    /// `spines` spines; a probe crosses its own ToR's link and the other's to each, and is
    /// lost at each crossing with probability `loss(tor, spine)` in 100,000, and on the way
    /// with `cable(src, dst)` in 100,000.
    pub(crate) fn drawn(
        pod: &Pod,
        spines: u8,
        each: u32,
        coin: &mut Coin,
        loss: &dyn Fn(u16, u8) -> u64,
        cable: &dyn Fn(Dev, Dev) -> u64,
    ) -> BTreeMap<u16, Report> {
        let tors = pod.tors();
        let tor = |d: Dev| tors.iter().position(|(_, ds)| ds.contains(&d)).unwrap() as u16;
        let mut out: BTreeMap<u16, Report> = BTreeMap::new();
        for d in pod.devices() {
            let mut by: BTreeMap<(u16, [u8; 2]), (u32, u32)> = BTreeMap::new();
            for e in pod.devices() {
                if e.rail != d.rail || tor(e) == tor(d) {
                    continue;
                }
                for i in 0..each {
                    let (s, b) = ((i % u32::from(spines)) as u8, (i / u32::from(spines)) as u8);
                    let b = b % spines;
                    let hops = [(tor(d), s), (tor(e), s), (tor(e), b), (tor(d), b)];
                    let lost =
                        hops.iter().any(|h| coin.lost(loss(h.0, h.1))) || coin.lost(cable(d, e));
                    let c = by.entry((tor(e), [s.min(b), s.max(b)])).or_default();
                    c.0 += 1;
                    c.1 += u32::from(lost);
                }
            }
            let r = out
                .entry(d.host as u16)
                .or_insert_with(|| Report { host: d.host as u16, ..Report::default() });
            r.crossings.extend(by.into_iter().map(|((tor, spines), (judged, lost))| Crossings {
                rail: d.rail as u8,
                tor,
                spines,
                judged,
                lost,
                quiet: 0,
                since: 0,
            }));
        }
        out
    }

    fn named(pod: &Pod, r: &BTreeMap<u16, Report>) -> Vec<(String, usize)> {
        link_loss(pod, r, &BTreeSet::new(), &BTreeSet::new())
            .into_iter()
            .map(|l| (l.tor, l.spine))
            .collect()
    }

    #[test]
    fn a_link_losing_two_percent_is_named_and_not_its_spine_or_its_tor() {
        // 3 ToRs of 2 hosts, 3 spines: rack1's link to spine 2 loses 2 % each crossing.
        let pod = test_pod(6, 1, 2);
        let mut coin = Coin(0x5851_f42d_4c95_7f2d);
        let mut hits = 0;
        for _ in 0..50 {
            let r = drawn(
                &pod,
                3,
                144,
                &mut coin,
                &|t, s| if (t, s) == (1, 2) { 2_000 } else { 0 },
                &|_, _| 0,
            );
            let n = named(&pod, &r);
            assert!(n.iter().all(|l| *l == ("rack1-rail0".to_string(), 2)), "{n:?}");
            hits += usize::from(!n.is_empty());
        }
        assert!(hits >= 45, "named in {hits} of 50 tests");
    }

    #[test]
    fn in_a_plane_of_two_tors_the_first_twin_is_named_with_the_other_in_its_evidence() {
        let pod = test_pod(4, 1, 2);
        let mut coin = Coin(0x2545_f491_4f6c_dd1d);
        let r = drawn(
            &pod,
            2,
            300,
            &mut coin,
            &|t, s| if (t, s) == (1, 0) { 3_000 } else { 0 },
            &|_, _| 0,
        );
        let found = link_loss(&pod, &r, &BTreeSet::new(), &BTreeSet::new());
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].tor.as_str(), found[0].spine), ("rack0-rail0", 0));
        assert_eq!(found[0].twin.as_deref(), Some("rack1-rail0"));
        // The other named before: it stays the one named (a twin that changed name was a
        // finding cleared and another raised).
        let held = BTreeSet::from([("rack1-rail0".to_string(), 0)]);
        let found = link_loss(&pod, &r, &BTreeSet::new(), &held);
        assert_eq!(
            (found[0].tor.as_str(), found[0].twin.as_deref()),
            ("rack1-rail0", Some("rack0-rail0"))
        );
    }

    #[test]
    fn a_link_that_healed_lets_go_though_its_losses_are_still_in_the_horizon() {
        // rack1's link to spine 2 lost 5 % over the horizon (a flapping link's outages, a
        // partial black hole's flows): named while it loses; once every class across it has
        // gone 7 s and as many probes without a loss as 5 % makes unlikely (0.95^n ≤ 10⁻⁴:
        // n ≥ 180), it lets go, held or not.
        let pod = test_pod(6, 1, 2);
        let mut coin = Coin(0x5851_f42d_4c95_7f2d);
        let mut r =
            drawn(&pod, 3, 144, &mut coin, &|t, s| u64::from((t, s) == (1, 2)) * 5_000, &|_, _| 0);
        let held = BTreeSet::from([("rack1-rail0".to_string(), 2)]);
        let link = [("rack1-rail0".to_string(), 2)];
        // Every class across it lost last `q` s ago, and has crossed it since at its rate.
        let quiet = |r: &mut BTreeMap<u16, Report>, q: u16| {
            for c in r.values_mut().flat_map(|x| &mut x.crossings) {
                (c.quiet, c.since) =
                    if c.lost > 0 { (q, c.judged * u32::from(q) / 30) } else { (30, c.judged) };
            }
        };
        let at = |r: &BTreeMap<u16, Report>, held: &BTreeSet<(String, usize)>| {
            link_loss(&pod, r, &BTreeSet::new(), held)
                .into_iter()
                .map(|l| (l.tor, l.spine))
                .collect::<Vec<_>>()
        };
        let n = link_loss(&pod, &r, &BTreeSet::new(), &held)[0].judged;
        for q in [0, 2] {
            quiet(&mut r, q);
            assert_eq!(at(&r, &BTreeSet::new()), link, "quiet {q} s");
            assert_eq!(at(&r, &held), link, "quiet {q} s, held");
        }
        // 180 of its probes: this many seconds at its rate (7 at least).
        let q = ((180 * 30_u32).div_ceil(n) as u16 + 1).max(crate::cable::MIN_QUIET_S);
        assert!(q < 30, "{n} probes across it");
        // A flapping link's quiet stretch: not yet.
        quiet(&mut r, crate::cable::MIN_QUIET_S - 1);
        assert_eq!(at(&r, &held), link);
        quiet(&mut r, q);
        assert_eq!(at(&r, &BTreeSet::new()), [], "quiet {q} s");
        assert_eq!(at(&r, &held), [], "quiet {q} s, held");
    }

    #[test]
    fn a_cable_a_tor_or_a_spine_losing_is_no_link() {
        let pod = test_pod(8, 1, 2);
        let mut coin = Coin(0x9e37_79b9_7f4a_7c15);
        let bad = Dev { host: 2, rail: 0 };
        for _ in 0..20 {
            // h2's cable loses 4 % of everything through it.
            let r = drawn(&pod, 4, 64, &mut coin, &|_, _| 0, &|a, b| {
                if a == bad || b == bad { 4_000 } else { 0 }
            });
            assert_eq!(named(&pod, &r), [], "a cable");
            // ToR rack3 loses 2 % at every port: every link of it.
            let r =
                drawn(&pod, 4, 64, &mut coin, &|t, _| if t == 3 { 2_000 } else { 0 }, &|_, _| 0);
            assert_eq!(named(&pod, &r), [], "a ToR");
            // Spine 1 loses 2 % on every link.
            let r =
                drawn(&pod, 4, 64, &mut coin, &|_, s| if s == 1 { 2_000 } else { 0 }, &|_, _| 0);
            assert_eq!(named(&pod, &r), [], "a spine");
        }
    }

    #[test]
    fn a_link_losing_many_times_what_its_tors_other_link_does_is_named_alone() {
        // rack1's link to spine 2 loses a quarter (flapping), its link to spine 0 3 % (the
        // transitions' bursts): each passes the test; the first is the link.
        let pod = test_pod(6, 1, 2);
        let mut coin = Coin(0xbf58_476d_1ce4_e5b9);
        let loss = |t, s| match (t, s) {
            (1, 2) => 25_000,
            (1, 0) => 3_000,
            _ => 0,
        };
        let r = drawn(&pod, 3, 144, &mut coin, &loss, &|_, _| 0);
        assert_eq!(named(&pod, &r), [("rack1-rail0".to_string(), 2)]);
        // Comparable losses on both: neither (a cable under rack1, or rack1).
        let r = drawn(
            &pod,
            3,
            144,
            &mut coin,
            &|t, s| if t == 1 && s != 1 { 3_000 } else { 0 },
            &|_, _| 0,
        );
        assert_eq!(named(&pod, &r), []);
    }

    #[test]
    fn a_clean_pod_at_the_background_bound_raises_no_alarm() {
        // 4 ToRs of 2 hosts, 4 spines, every crossing losing 2.5·10⁻⁴ (a probe ~10⁻³):
        // 5,000 tests of fresh draws.
        let pod = test_pod(8, 1, 2);
        let mut coin = Coin(0x1405_7b7e_f767_814f);
        let alarms: usize = (0..5_000)
            .map(|_| named(&pod, &drawn(&pod, 4, 48, &mut coin, &|_, _| 25, &|_, _| 0)).len())
            .sum();
        assert_eq!(alarms, 0, "false alarms in 5,000 tests of a clean pod");
    }
}
