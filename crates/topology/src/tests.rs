//! The pod's shapes, pair sets, rounds and attribution, on pods built as scripts/emupod.sh
//! builds them.

use std::collections::BTreeSet;

use crate::*;

/// `hosts` hosts of `rails` rails, `per` hosts per ToR (ToR per rack and rail), as
/// scripts/emupod.sh builds them.
fn pod(hosts: usize, rails: usize, per: usize, set: PairSet) -> Pod {
    Pod {
        pairs: set,
        peers_per_tor: 1,
        seed: 1,
        link_gbps: Some(0.2),
        source_ports: 4,
        spines: None,
        spine_link_gbps: None,
        route: None,
        progress: PodProgress::Event,
        stall_seconds: 5.0,
        qp_timeout: 14,
        tx_depth: None,
        bisection: None,
        incast: None,
        hosts: (0..hosts)
            .map(|i| Host {
                name: format!("h{i}"),
                rails: (0..rails)
                    .map(|r| Rail {
                        device: format!("soft:10.{}.{i}.1", r + 1),
                        tor: format!("t{}", (i / per) * rails + r),
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[test]
fn pair_sets_and_their_sizes() {
    let p = pod(6, 2, 2, PairSet::All);
    assert_eq!(p.pairs().len(), 60);
    assert_eq!(p.all_pairs(), 60);
    let count = |s| Pod { pairs: s, ..p.clone() }.pairs().len();
    assert_eq!(count(PairSet::RailAligned), 30);
    // Same ToR: 3 racks x 2 rails, one pair of hosts each.
    assert_eq!(count(PairSet::SameTor), 6);
    assert_eq!(count(PairSet::CrossTor), 54);
    assert!(
        Pod { pairs: PairSet::SameTor, ..p.clone() }
            .pairs()
            .iter()
            .all(|(a, b)| p.same_tor(*a, *b))
    );
    // Sampled: O(N.k), not O(N^2), and every device is covered.
    let big = pod(64, 2, 4, PairSet::Sampled);
    let s = big.pairs();
    assert!(s.len() <= 128 * 2, "{}", s.len());
    assert!(s.len() * 30 < big.all_pairs(), "{} of {}", s.len(), big.all_pairs());
    let seen: BTreeSet<Dev> = s.iter().flat_map(|(a, b)| [*a, *b]).collect();
    assert_eq!(seen.len(), 128);
    assert_eq!(s, big.pairs(), "the same seed, the same pairs");
}

#[test]
fn rounds_are_disjoint_and_cover_every_pair_once() {
    for (hosts, rails, set) in [
        (6, 2, PairSet::RailAligned),
        (5, 2, PairSet::All),
        (16, 2, PairSet::RailAligned),
        (7, 3, PairSet::CrossTor),
    ] {
        let p = pod(hosts, rails, 2, set);
        let pairs = p.pairs();
        let r = rounds(&p, &pairs);
        let mut all: Vec<(Dev, Dev)> = r.iter().flatten().copied().collect();
        all.sort();
        let mut want = pairs.clone();
        want.sort();
        assert_eq!(all, want, "{hosts}x{rails} {set:?}");
        for round in &r {
            let mut devs = BTreeSet::new();
            for (a, b) in round {
                assert!(devs.insert(*a) && devs.insert(*b), "a device twice in a round");
            }
        }
        if set == PairSet::RailAligned {
            // N hosts in N - 1 rounds (N even), N (odd): the rails share a round.
            assert_eq!(r.len(), hosts - 1 + hosts % 2, "{hosts}x{rails}");
        }
    }
}

#[test]
fn flows_beside_each_other_are_those_that_share_a_tors_spine_links() {
    // 6 hosts x 1 rail, 2 per ToR: t0 = {h0, h1}, t1 = {h2, h3}, t2 = {h4, h5}.
    let p = pod(6, 1, 2, PairSet::All);
    let d = |h| Dev { host: h, rail: 0 };
    let flows = [(d(0), d(2)), (d(1), d(4)), (d(3), d(5)), (d(4), d(5))];
    let b = beside(&p, &flows);
    // h0->h2 and h1->h4 leave t0 together; h1->h4 and h3->h5 both arrive at t2; h4->h5 is
    // under one ToR and meets nobody.
    assert_eq!(b[0], vec![(1, "t0".to_string())]);
    assert_eq!(b[1], vec![(0, "t0".to_string()), (2, "t2".to_string())]);
    assert_eq!(b[2], vec![(1, "t2".to_string())]);
    assert!(b[3].is_empty());
    // Apart: every pair once, and no round can collide.
    for (hosts, rails, set) in [(6, 1, PairSet::All), (12, 2, PairSet::RailAligned)] {
        let p = pod(hosts, rails, 2, set);
        let pairs = p.pairs();
        let r = apart(&p, &pairs);
        let mut all: Vec<(Dev, Dev)> = r.iter().flatten().copied().collect();
        all.sort();
        assert_eq!(all, pairs, "{hosts}x{rails}");
        for round in &r {
            for (dir, flows) in
                [round.clone(), round.iter().map(|&(a, b)| (b, a)).collect::<Vec<_>>()]
                    .into_iter()
                    .enumerate()
            {
                assert!(beside(&p, &flows).iter().all(Vec::is_empty), "{dir}: {round:?}");
            }
            let mut devs = BTreeSet::new();
            assert!(round.iter().all(|(a, b)| devs.insert(*a) && devs.insert(*b)));
        }
        assert!(r.len() < pairs.len(), "pairs under one ToR and ToR-disjoint pairs share rounds");
    }
}

#[test]
fn bisection_and_incast_shapes() {
    let p = pod(6, 2, 2, PairSet::RailAligned);
    let b = bisection(&p);
    assert_eq!(b.len(), 6);
    assert!(b.iter().all(|(a, c)| a.host < 3 && c.host >= 3 && a.rail == c.rail));
    let i = incasts(&p, 4);
    assert_eq!(i.len(), 6, "one per ToR");
    for (_, rx, from) in &i {
        assert_eq!(from.len(), 4);
        assert!(from.iter().all(|d| d.rail == rx.rail && d.host != rx.host));
        assert!(!p.same_tor(from[0], *rx), "senders from other ToRs first");
    }
}

fn outcome(p: &Pod, a: Dev, b: Dev, bad: &dyn Fn(Dev, Dev) -> bool) -> PairOutcome {
    let failed = bad(a, b);
    PairOutcome {
        pair: (a, b),
        failed,
        failed_checks: if failed { vec![format!("perf/{}", p.name(a))] } else { vec![] },
        ports: vec![],
        routes: Default::default(),
        measured: vec![],
        round: 0,
    }
}

#[test]
fn attribution_names_the_component_that_fails() {
    let p = pod(6, 2, 2, PairSet::All);
    let pairs = p.pairs();
    let run = |bad: &dyn Fn(Dev, Dev) -> bool| {
        let o: Vec<PairOutcome> = pairs.iter().map(|(a, b)| outcome(&p, *a, *b, bad)).collect();
        attribute(&p, &o)
    };
    let d = |h, r| Dev { host: h, rail: r };
    // A clean pod: nobody; a pod where everything fails: no one component.
    assert!(run(&|_, _| false).is_empty());
    let s = run(&|_, _| true);
    assert_eq!(
        (s.len(), s[0].kind.as_str(), s[0].component.as_str()),
        (1, "pod", "12 of 12 devices")
    );
    // One rail of h2: that rail, nothing else.
    let s = run(&|a, b| a == d(2, 1) || b == d(2, 1));
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!((s[0].kind.as_str(), s[0].confidence), ("rail", 1.0));
    assert!(s[0].component.starts_with("h2.r1 (soft:10.2.2.1, ToR t3)"), "{}", s[0].component);
    // Both rails of h4: the host.
    let s = run(&|a, b| a.host == 4 || b.host == 4);
    assert_eq!((s.len(), s[0].kind.as_str(), s[0].component.as_str()), (1, "host", "h4"));
    // Every device under ToR t2 (rack 1, rail 0: hosts 2 and 3): the ToR.
    let under_t2 = |x: Dev| x.rail == 0 && (x.host == 2 || x.host == 3);
    let s = run(&|a, b| under_t2(a) ^ under_t2(b));
    assert_eq!((s.len(), s[0].kind.as_str(), s[0].component.as_str()), (1, "tor", "t2"), "{s:?}");
    // One pair alone: the link between them.
    let s = run(&|a, b| (a, b) == (d(0, 0), d(5, 1)));
    assert_eq!((s.len(), s[0].kind.as_str()), (1, "link"));
    // Source ports that split on cross-ToR pairs of one ToR: its spine links.
    let o: Vec<PairOutcome> = pairs
        .iter()
        .map(|&(a, b)| {
            let mut o = outcome(&p, a, b, &|_, _| false);
            if !p.same_tor(a, b) && (p.rail(a).tor == "t3" || p.rail(b).tor == "t3") {
                o.ports = vec![(49152, true), (49153, false), (49154, true), (49155, false)];
                o.failed = a.host == 0; // the default port hashed onto the dead path
                if a.host == 1 {
                    // Every probe hashed onto a live spine, the default port did not.
                    o.ports = vec![(49152, true), (49154, true)];
                    o.failed = true;
                }
            }
            o
        })
        .collect();
    let s = attribute(&p, &o);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(
        (s[0].kind.as_str(), s[0].component.as_str()),
        ("spine-path", "the spine links of t3")
    );
    assert!(s[0].evidence.contains("ports 49153, 49155 did not carry"), "{}", s[0].evidence);
    assert!(s[0].pairs.iter().any(|p| p.starts_with("h1.")), "the unsplit failures too");
    assert!(s[0].evidence.contains("more pair(s) failed on their own source port"));
}

/// A lossy ToR fails every pair of the devices under it, those under it among
/// themselves too, and may split a pair's probes (one lost): that is the ToR, not its
/// spine links (the agent's test of a lossy ToR saw "the spine links of t3").
#[test]
fn a_lossy_tor_is_the_tor_not_its_spine_links() {
    let p = pod(6, 2, 2, PairSet::RailAligned);
    let under = |d: Dev| p.rail(d).tor == "t3";
    let o: Vec<PairOutcome> = p
        .pairs()
        .iter()
        .map(|&(a, b)| {
            let mut o = outcome(&p, a, b, &|a, b| under(a) || under(b));
            if !p.same_tor(a, b) {
                let lost = (a, b) == (Dev { host: 0, rail: 1 }, Dev { host: 3, rail: 1 });
                o.ports = vec![(49152, true), (49153, !lost), (49154, true)];
                if o.failed && !lost {
                    o.ports.iter_mut().for_each(|p| p.1 = false);
                }
            }
            o
        })
        .collect();
    let s = attribute(&p, &o);
    let got: Vec<(&str, &str)> =
        s.iter().map(|x| (x.kind.as_str(), x.component.as_str())).collect();
    assert!(got.contains(&("tor", "t3")), "{s:#?}");
    assert!(!got.iter().any(|g| g.1 == "the spine links of t3"), "{s:#?}");
}

/// The emulated pod's cases (seen under load in CI): t1's spine link down splits the
/// pairs crossing t1, and a lossy rail (h4.r1, under t5) loses a probe on one source
/// port of a pair that does not cross t1. That split is the rail's, not a third spine
/// path: t1's links and the rail are named, nothing else. And when every probe of the
/// pairs from t1 to t5 hashed onto the dead link (they fail whole, no split), t1 is still
/// the one ToR in every ToR pair with path evidence.
#[test]
fn a_lossy_cable_between_two_tors_is_its_rail_not_their_spine_path() {
    // 4 hosts, 1 rail, 2 per ToR (t0 = h0 h1, t1 = h2 h3); h1's cable loses 3 %: its pair
    // under its ToR fails, and its pairs across lose a probe on one source port or fail.
    let p = pod(4, 1, 2, PairSet::RailAligned);
    let h1 = Dev { host: 1, rail: 0 };
    let o: Vec<PairOutcome> = p
        .pairs()
        .iter()
        .map(|&(a, b)| {
            let mut o = outcome(&p, a, b, &|a, b| (a == h1 || b == h1) && p.same_tor(a, b));
            if !p.same_tor(a, b) {
                o.ports = vec![(49152, true), (49153, true), (49154, true), (49155, true)];
                if a == h1 || b == h1 {
                    o.ports[b.host % 4].1 = false;
                }
            }
            o
        })
        .collect();
    let s = attribute(&p, &o);
    let got: Vec<(&str, &str)> =
        s.iter().map(|x| (x.kind.as_str(), x.component.as_str())).collect();
    assert_eq!(got.len(), 1, "{s:#?}");
    assert_eq!(got[0].0, "rail", "{s:#?}");
    assert!(got[0].1.starts_with("h1.r0 "), "{s:#?}");
}

#[test]
fn a_lossy_tor_between_two_tors_is_the_tor_not_their_spine_path() {
    // 4 hosts, 1 rail, 2 per ToR; t1 (h2, h3) drops 3 % at every port: its own pair fails,
    // and every pair across loses a probe on some source port.
    let p = pod(4, 1, 2, PairSet::RailAligned);
    let under = |d: Dev| d.host >= 2;
    let o: Vec<PairOutcome> = p
        .pairs()
        .iter()
        .map(|&(a, b)| {
            let mut o = outcome(&p, a, b, &|a, b| under(a) && under(b));
            if !p.same_tor(a, b) {
                o.ports = vec![(49152, true), (49153, true), (49154, true), (49155, true)];
                o.ports[a.host + b.host - 2].1 = false;
            }
            o
        })
        .collect();
    let s = attribute(&p, &o);
    let got: Vec<(&str, &str)> =
        s.iter().map(|x| (x.kind.as_str(), x.component.as_str())).collect();
    assert_eq!(got, [("tor", "t1")], "{s:#?}");
}

#[test]
fn a_lossy_rail_does_not_hide_behind_a_spine_split() {
    let p = pod(6, 2, 2, PairSet::RailAligned);
    let h4 = Dev { host: 4, rail: 1 };
    for t5_whole in [false, true] {
        let o: Vec<PairOutcome> = p
            .pairs()
            .iter()
            .map(|&(a, b)| {
                let mut o = outcome(&p, a, b, &|a, b| a == h4 || b == h4);
                let on = |d: Dev, t: &str| p.rail(d).tor == t;
                if !p.same_tor(a, b) {
                    o.ports = vec![(49152, true), (49153, true), (49154, true), (49155, true)];
                    if on(a, "t1") ^ on(b, "t1") {
                        if t5_whole && (on(a, "t5") || on(b, "t5")) {
                            o.ports.iter_mut().for_each(|p| p.1 = false);
                            o.failed = true;
                        } else {
                            o.ports[1].1 = false;
                            o.ports[3].1 = false;
                            o.failed |= a.host == 0;
                        }
                    } else if (a, b) == (Dev { host: 3, rail: 1 }, h4) {
                        o.ports[2].1 = false; // a probe lost on the lossy rail
                    }
                }
                o
            })
            .collect();
        let s = attribute(&p, &o);
        let got: Vec<(&str, &str)> =
            s.iter().map(|x| (x.kind.as_str(), x.component.as_str())).collect();
        assert_eq!(got.len(), 2, "{t5_whole}: {s:#?}");
        assert_eq!(got[1], ("spine-path", "the spine links of t1"), "{s:#?}");
        assert_eq!(got[0].0, "rail", "{s:#?}");
        assert!(got[0].1.starts_with("h4.r1 "), "{s:#?}");
    }
}

/// A pair's ECMP paths: under one ToR the two cables; across ToRs one path a spine, each
/// crossing both cables and both ToRs' links to that spine; without spines in the plan one
/// path through an unknown spine.
#[test]
fn a_pairs_ecmp_paths_cross_its_cables_and_one_spine_each() {
    let mut p = pod(4, 1, 2, PairSet::All);
    let (a, b, c) = (Dev { host: 0, rail: 0 }, Dev { host: 1, rail: 0 }, Dev { host: 2, rail: 0 });
    assert!(p.same_tor(a, b) && !p.same_tor(a, c));
    assert_eq!(p.ecmp_paths(a, b), vec![vec![Link::HostTor(a), Link::HostTor(b)]]);
    let unknown = p.ecmp_paths(a, c);
    assert_eq!(unknown.len(), 1);
    assert!(unknown[0].contains(&Link::TorSpine { tor: "t0".into(), spine: None }));
    p.spines = Some(3);
    p.validate().unwrap();
    let paths = p.ecmp_paths(a, c);
    assert_eq!(paths.len(), 3);
    for (k, path) in paths.iter().enumerate() {
        assert_eq!(
            path,
            &vec![
                Link::HostTor(a),
                Link::TorSpine { tor: "t0".into(), spine: Some(k) },
                Link::TorSpine { tor: "t1".into(), spine: Some(k) },
                Link::HostTor(c),
            ]
        );
    }
    p.spines = Some(0);
    assert_eq!(p.validate().unwrap_err().0, "spines");
}

/// Each component's kind, its name in reports (the words qualify and the agent have always
/// printed) and the links it stands for.
#[test]
fn components_are_named_as_reports_name_them_and_stand_for_their_links() {
    let mut p = pod(4, 2, 2, PairSet::RailAligned);
    p.spines = Some(2);
    let d = Dev { host: 3, rail: 1 };
    let far = Dev { host: 0, rail: 1 };
    let cases = [
        (Component::Pod { flagged: 5, devices: 8 }, "pod", "5 of 8 devices", 0),
        (Component::Host(2), "host", "h2", 0),
        (Component::Tor("t3".into()), "tor", "t3", 0),
        (Component::Rail(d), "rail", "h3.r1 (soft:10.2.3.1, ToR t3)", 1),
        (Component::SpineLinks("t3".into()), "spine-path", "the spine links of t3", 2),
        (Component::SpinePath("t1".into(), "t3".into()), "spine-path", "t1 <-> t3", 4),
        (
            Component::Spine { tors: 4, spine: None },
            "spine",
            "a spine: ECMP paths between all 4 ToRs",
            0,
        ),
        (Component::Path(far, d), "link", "h0.r1 <-> h3.r1", 6),
    ];
    for (c, kind, name, links) in cases {
        assert_eq!((c.kind(), c.name(&p).as_str()), (kind, name), "{c:?}");
        assert_eq!(c.links(&p).len(), links, "{c:?}: {:?}", c.links(&p));
    }
    assert_eq!(Component::Path(far, d).tors(&p), vec!["t1", "t3"]);
    assert!(Component::Rail(d).links(&p).contains(&Link::HostTor(d)));
}

/// attribute names its suspects through the vocabulary: each suspect's kind and component
/// are its part's.
#[test]
fn every_suspect_is_named_by_its_component() {
    let p = pod(8, 2, 2, PairSet::All);
    let bad = Dev { host: 5, rail: 0 };
    let outcomes: Vec<PairOutcome> = p
        .pairs()
        .into_iter()
        .map(|(a, b)| PairOutcome {
            pair: (a, b),
            failed: a == bad || b == bad,
            failed_checks: vec![],
            ports: vec![],
            routes: Default::default(),
            measured: vec![],
            round: 0,
        })
        .collect();
    let sus = attribute(&p, &outcomes);
    assert_eq!(sus.len(), 1, "{sus:#?}");
    assert_eq!(sus[0].at, Component::Rail(bad));
    for s in &sus {
        assert_eq!((s.kind.as_str(), s.component.clone()), (s.at.kind(), s.at.name(&p)));
    }
}

#[test]
fn one_device_written_two_ways_is_one_device() {
    let plan = |a: &str, b: &str, same_host: bool| -> Pod {
        let mut p = pod(2, 1, 2, PairSet::All);
        let rail = |d: &str, t: &str| Rail { device: d.into(), tor: t.into() };
        if same_host {
            p.hosts[0].rails = vec![rail(a, "t0"), rail(b, "t1")];
        } else {
            p.hosts[0].rails = vec![rail(a, "t0")];
            p.hosts[1].rails = vec![rail(b, "t0")];
        }
        p
    };
    for (a, b) in [
        ("soft:10.1.0.1", "soft:10.1.0.1:4791"),
        ("soft:10.1.0.1", "soft:::ffff:10.1.0.1"),
        ("soft:[::ffff:10.1.0.1]:4791", "soft:10.1.0.1"),
    ] {
        for same_host in [true, false] {
            let e = plan(a, b, same_host).validate().unwrap_err();
            assert_eq!(e.0, "device", "{a} {b}: {e:?}");
        }
    }
    assert!(plan("soft:10.1.0.1", "soft:10.1.0.2", false).validate().is_ok());
}

#[test]
fn the_pair_count_is_the_pairs_without_making_them() {
    for set in
        [PairSet::All, PairSet::SameTor, PairSet::CrossTor, PairSet::RailAligned, PairSet::Sampled]
    {
        for (hosts, rails, per) in [(2, 1, 2), (8, 2, 2), (12, 2, 4), (9, 3, 3)] {
            let p = pod(hosts, rails, per, set);
            let n = p.pairs().len();
            if set == PairSet::Sampled {
                assert!(n <= p.pair_count(), "{set:?} {hosts}x{rails}: {n} > {}", p.pair_count());
            } else {
                assert_eq!(p.pair_count(), n, "{set:?} {hosts}x{rails}/{per}");
            }
        }
    }
}

/// A fabric's ECMP hash, as the routers of a test fabric hash: the spine a flow from `a` to
/// `b` on `port` crosses.
fn hash(a: Dev, b: Dev, port: u16, spines: usize) -> usize {
    let mut x = (a.host as u64) << 40 | (b.host as u64) << 20 | u64::from(port);
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((x ^ (x >> 29)) % spines as u64) as usize
}

/// Every pair of `p` probed from 8 source ports, the routes known; `lost` says which probes
/// (by the links they cross, and their port) did not carry.
type Lost<'a> = &'a dyn Fn(Dev, Dev, &BTreeSet<(String, usize)>, u16) -> bool;

fn routed(p: &Pod, spines: usize, lost: Lost) -> Vec<PairOutcome> {
    p.pairs()
        .into_iter()
        .map(|(a, b)| {
            let (ta, tb) = (p.rail(a).tor.clone(), p.rail(b).tor.clone());
            let mut o = outcome(p, a, b, &|_, _| false);
            if ta != tb {
                for k in 0..8u16 {
                    let port = 0xC000 + 7 + k * 0x800;
                    let (f, r) = (hash(a, b, port, spines), hash(b, a, port, spines));
                    let links: BTreeSet<(String, usize)> = [(&ta, f), (&tb, f), (&tb, r), (&ta, r)]
                        .map(|(t, s)| (t.clone(), s))
                        .into();
                    o.ports.push((port, !lost(a, b, &links, port)));
                    o.routes.insert(port, [f, r]);
                }
            }
            o
        })
        .collect()
}

fn ats(s: &[Suspect]) -> Vec<(String, Component)> {
    s.iter().map(|x| (x.kind.clone(), x.at.clone())).collect()
}

#[test]
fn routed_probes_name_the_tor_spine_link_or_the_spine_they_share() {
    // Three ToRs of one rail, three spines.
    let p = Pod { spines: Some(3), ..pod(9, 1, 3, PairSet::All) };
    let spine = |j| Component::Spine { tors: 3, spine: Some(j) };
    let link = |t: &str, j| Component::TorSpine { tor: t.into(), spine: j };
    // Nothing lost: nothing named.
    assert_eq!(attribute(&p, &routed(&p, 3, &|_, _, _, _| false)), vec![]);
    // t1's link to spine 2 down: that link, nothing else.
    let s = attribute(&p, &routed(&p, 3, &|_, _, l, _| l.contains(&("t1".into(), 2))));
    assert_eq!(ats(&s), [("spine-link".into(), link("t1", 2))], "{s:#?}");
    assert!(s[0].evidence.contains("source-port probes through it failed"), "{}", s[0].evidence);
    // Spine 1 down: the spine, not each of its links.
    let s = attribute(&p, &routed(&p, 3, &|_, _, l, _| l.iter().any(|x| x.1 == 1)));
    assert_eq!(ats(&s), [("spine".into(), spine(1))], "{s:#?}");
    // Spine 0 dropping some flows only (by the flow's hash, as a partial black hole does).
    let s = attribute(
        &p,
        &routed(&p, 3, &|a, b, l, port| {
            l.iter().any(|x| x.1 == 0) && hash(a, b, port ^ 0x55, 2) == 0
        }),
    );
    assert_eq!(ats(&s), [("spine".into(), spine(0))], "{s:#?}");
}

#[test]
fn routed_probes_leave_a_lossy_cable_to_its_rail() {
    let p = Pod { spines: Some(2), ..pod(9, 1, 3, PairSet::All) };
    let bad = Dev { host: 4, rail: 0 };
    // One probe in three of the device's lost, whatever path it took.
    let s = attribute(&p, &routed(&p, 2, &|a, b, _, port| (a == bad || b == bad) && port % 3 != 1));
    assert_eq!(ats(&s), [("rail".into(), Component::Rail(bad))], "{s:#?}");
}

#[test]
fn in_a_plane_of_two_tors_the_tomography_says_what_it_cannot_tell_apart() {
    // Two ToRs, one rail: t0's link to spine 1 and t1's lie on the very same probes, and
    // spine 1 is those two links.
    let p = Pod { spines: Some(2), ..pod(4, 1, 2, PairSet::All) };
    let s = attribute(&p, &routed(&p, 2, &|_, _, l, _| l.contains(&("t0".into(), 1))));
    assert_eq!(s.len(), 1, "{s:#?}");
    assert!(
        [
            Component::Spine { tors: 2, spine: Some(1) },
            Component::TorSpine { tor: "t0".into(), spine: 1 },
            Component::TorSpine { tor: "t1".into(), spine: 1 }
        ]
        .contains(&s[0].at),
        "{s:#?}"
    );
    assert!(s[0].evidence.contains("no probe tells it from"), "{}", s[0].evidence);
    // The scorer counts any of them as naming a fault on any of them, there only.
    let two = Shape { racks: 2, rails: 1, ..Shape::draw(1) };
    let three = Shape { racks: 3, ..two.clone() };
    let (l0, l1) = (
        Component::TorSpine { tor: "rack0-rail0".into(), spine: 1 },
        Component::TorSpine { tor: "rack1-rail0".into(), spine: 1 },
    );
    let sp = Component::Spine { tors: 2, spine: Some(1) };
    assert!(score::twins(&two, &l0, &l1) && score::twins(&two, &l0, &sp));
    assert!(!score::twins(&three, &l0, &l1) && !score::twins(&three, &l0, &sp));
    let two_rails = Shape { rails: 2, ..two.clone() };
    assert!(score::twins(&two_rails, &l0, &l1) && !score::twins(&two_rails, &l0, &sp));
    let other_spine = Component::TorSpine { tor: "rack1-rail0".into(), spine: 0 };
    assert!(!score::twins(&two, &l0, &other_spine));
}

/// The large-frame outcomes of `small`'s pairs whose small probes carried, `lost` deciding
/// which near-MTU probes did not.
fn large_of(p: &Pod, small: &[PairOutcome], spines: usize, lost: Lost) -> Vec<PairOutcome> {
    let big = routed(p, spines, lost);
    small.iter().zip(big).filter(|(s, _)| s.ports.iter().all(|x| x.1)).map(|(_, b)| b).collect()
}

#[test]
fn near_mtu_probes_name_an_mtu_and_take_the_bandwidth_failures_through_it() {
    let p = Pod { spines: Some(3), ..pod(9, 1, 3, PairSet::All) };
    let t1s2 = ("t1".to_string(), 2);
    // Small probes carry; the bandwidth tests of some pairs through t1 fail (their own
    // port hashed onto spine 2); large frames through t1's link to spine 2 vanish.
    let mut small = routed(&p, 3, &|_, _, _, _| false);
    for o in &mut small {
        if !p.same_tor(o.pair.0, o.pair.1)
            && [o.pair.0, o.pair.1].iter().any(|d| p.rail(*d).tor == "t1")
            && hash(o.pair.0, o.pair.1, 1, 3) == 2
        {
            o.failed = true;
            o.failed_checks = vec!["perf/write-bw".into()];
        }
    }
    let large = large_of(&p, &small, 3, &|_, _, l, _| l.contains(&t1s2));
    let s = attribute_mtu(&p, &small, &large);
    let link = Component::TorSpine { tor: "t1".into(), spine: 2 };
    assert_eq!(ats(&s), [("mtu".into(), link)], "{s:#?}");
    assert!(s[0].evidence.starts_with("near-MTU probes lost"), "{}", s[0].evidence);
    // A cable's MTU: every large frame of the device lost, its bandwidth tests failed.
    let bad = Dev { host: 4, rail: 0 };
    let mut small = routed(&p, 3, &|_, _, _, _| false);
    for o in &mut small {
        if o.pair.0 == bad || o.pair.1 == bad {
            o.failed = true;
            o.failed_checks = vec!["perf/write-bw".into()];
        }
    }
    let large = large_of(&p, &small, 3, &|a, b, _, _| a == bad || b == bad);
    let s = attribute_mtu(&p, &small, &large);
    assert_eq!(ats(&s), [("mtu".into(), Component::Rail(bad))], "{s:#?}");
    // A lossy cable loses small and large probes alike: a rail, not an MTU.
    let lossy = |a: Dev, b: Dev, _: &BTreeSet<(String, usize)>, port: u16| {
        (a == bad || b == bad) && port % 3 != 1
    };
    let small = routed(&p, 3, &lossy);
    let large = large_of(&p, &small, 3, &lossy);
    let s = attribute_mtu(&p, &small, &large);
    assert_eq!(ats(&s), [("rail".into(), Component::Rail(bad))], "{s:#?}");
}

#[test]
fn a_spine_that_fails_mid_run_is_judged_from_its_first_lost_probe() {
    // Pairs probed over four rounds; spine 1 forwards nothing from the second on.
    let p = Pod { spines: Some(3), ..pod(9, 1, 3, PairSet::All) };
    let mut os = routed(&p, 3, &|_, _, _, _| false);
    for (i, o) in os.iter_mut().enumerate() {
        o.round = i % 4;
        if o.round >= 1 {
            for (port, ok) in o.ports.iter_mut() {
                *ok = !o.routes[port].contains(&1);
            }
        }
    }
    let s = attribute(&p, &os);
    assert_eq!(ats(&s), [("spine".into(), Component::Spine { tors: 3, spine: Some(1) })], "{s:#?}");
}

#[test]
fn a_tor_whose_own_pairs_fail_whichever_devices_they_join_is_the_tor() {
    // Three hosts under t0; loss at its every port fails each pair under it and half of
    // its pairs across the spines: too few of any device's pairs to suspect the device.
    let p = pod(9, 1, 3, PairSet::All);
    let t0 = |d: Dev| d.host < 3;
    let os: Vec<PairOutcome> = p
        .pairs()
        .into_iter()
        .map(|(a, b)| {
            let bad = (t0(a) && t0(b)) || ((t0(a) || t0(b)) && (a.host + b.host) % 2 == 0);
            outcome(&p, a, b, &|_, _| bad)
        })
        .collect();
    let s = attribute(&p, &os);
    assert_eq!(ats(&s)[0], ("tor".into(), Component::Tor("t0".into())), "{s:#?}");
    assert_eq!(s.len(), 1, "{s:#?}");
    // One lossy device under it fails only its own pairs there: not the ToR.
    let d = Dev { host: 0, rail: 0 };
    let os: Vec<PairOutcome> =
        p.pairs().into_iter().map(|(a, b)| outcome(&p, a, b, &|a, b| a == d || b == d)).collect();
    assert_eq!(ats(&attribute(&p, &os)), [("rail".into(), Component::Rail(d))]);
}
