//! Localization: from what was measured of each pair, the component at fault — a host, a
//! rail (a device, its port or its cable), a ToR, a spine path, a spine, or the path between
//! two devices. qualify's attribution of failed pairs and the pod agent's findings from its
//! probes both call it, so that both name a fault in one vocabulary.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::component::Component;
use crate::fabric::{Dev, Pod};
use crate::tomo::{self, Chosen};

/// What was measured of a pair (both directions together): whether it failed, the checks
/// that failed, and the probes over UDP source ports (port, whether it carried traffic).
#[derive(Debug, Clone, PartialEq)]
pub struct PairOutcome {
    /// The pair.
    pub pair: (Dev, Dev),
    /// Whether any check of the pair failed.
    pub failed: bool,
    /// The failed checks' names.
    pub failed_checks: Vec<String>,
    /// Probes over chosen source ports: (port, carried).
    pub ports: Vec<(u16, bool)>,
    /// Where the fabric says (a plan's `pod.route`): the spines a probe from each port
    /// crossed, out and back.
    pub routes: BTreeMap<u16, [usize; 2]>,
    /// Its measurements across ToRs from a known port (qualify's, with the fabric's routes):
    /// (port, whether they passed) — evidence on a path, as a probe's is, for the faults that
    /// fail measurements and no probe (a slow link).
    pub measured: Vec<(u16, bool)>,
    /// When the pair was probed, in the run's order (qualify's round; 0 for all in the
    /// agent's window): a fault that starts mid-run is judged on what came after it.
    pub round: usize,
}

/// A component the failures point at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Suspect {
    /// `host`, `rail`, `tor`, `spine-path`, `link`, or `pod` (most of it failed: no one
    /// component stands out).
    pub kind: String,
    /// Which (`node03`, `node03.r1 (mlx5_1, ToR rack2-rail1)`, `rack2-rail1`,
    /// `rack1-rail0 <-> rack2-rail0`, `node01.r0 <-> node04.r0`).
    pub component: String,
    /// Failed pairs over measured pairs of the component: 1.0 when every one failed.
    pub confidence: f64,
    /// In words: what failed and what did not.
    pub evidence: String,
    /// The failed pairs it explains.
    pub pairs: Vec<String>,
    /// The failed checks among them (the first few).
    pub checks: Vec<String>,
    /// The part of the pod it names (`kind` and `component` are its words), for programs.
    pub at: Component,
}

impl Suspect {
    /// A suspect on `at`, its kind and name in `pod`'s words.
    pub fn on(pod: &Pod, at: Component, confidence: f64, evidence: String) -> Suspect {
        Suspect {
            kind: at.kind().into(),
            component: at.name(pod),
            confidence,
            evidence,
            pairs: Vec::new(),
            checks: Vec::new(),
            at,
        }
    }

    /// The same with the failed pairs and checks it explains.
    pub fn explaining(mut self, pairs: Vec<String>, checks: Vec<String>) -> Suspect {
        self.pairs = pairs;
        self.checks = checks;
        self
    }

    /// The same, judged from near-MTU probes lost while small ones carried: an `mtu` (the
    /// whole pod at fault stays `pod`), its evidence saying so. Qualify's and the agent's
    /// words for it.
    pub fn near_mtu(self) -> Suspect {
        Suspect {
            kind: if self.kind == "pod" { self.kind } else { "mtu".into() },
            evidence: format!(
                "near-MTU probes lost while small ones carried: {} — frames above some size \
                 vanish here (an MTU set lower on a link, a port that drops large frames)",
                self.evidence
            ),
            ..self
        }
    }
}

/// A device is suspected when at least this share of its pairs failed (and two or more).
pub const DEVICE_SHARE: f64 = 0.75;

/// A pair whose probes both carried and did not is a path (hash) failure, not a device's.
/// Under one ToR no spine is crossed: such a pair fails as its devices do.
fn split(pod: &Pod, o: &PairOutcome) -> bool {
    !pod.same_tor(o.pair.0, o.pair.1)
        && o.ports.iter().any(|(_, ok)| *ok)
        && o.ports.iter().any(|(_, ok)| !*ok)
}

/// A pair failed a check, or some of its source ports carried nothing.
fn failed(o: &PairOutcome) -> bool {
    o.failed || o.ports.iter().any(|(_, ok)| !*ok)
}

/// A pair's two ToRs, in order.
fn tors_of(pod: &Pod, o: &PairOutcome) -> (String, String) {
    let (ta, tb) = (&pod.rail(o.pair.0).tor, &pod.rail(o.pair.1).tor);
    if ta <= tb { (ta.clone(), tb.clone()) } else { (tb.clone(), ta.clone()) }
}

/// Where the evidence points at spine paths rather than devices.
struct SpinePaths<'a> {
    /// Per ToR pair, the pairs whose source ports split (those of the common ToR only, when
    /// there is one).
    spine: ByTors<'a>,
    /// The one ToR in every ToR pair with path evidence: its spine links.
    common: Option<String>,
    /// Pairs that split, but between ToRs the common ToR's links do not explain.
    not_path: BTreeSet<(Dev, Dev)>,
}

/// Pairs per ToR pair (the lower name first).
type ByTors<'a> = BTreeMap<(String, String), Vec<&'a PairOutcome>>;

/// A ToR pair's evidence: its pairs whose source ports split, and those that failed whole.
fn tor_pair_evidence<'a>(
    spine: &ByTors<'a>,
    whole: &ByTors<'a>,
    k: &(String, String),
) -> Vec<&'a PairOutcome> {
    spine.get(k).into_iter().chain(whole.get(k)).flatten().copied().collect()
}

/// ToRs whose own pairs (no spine crossed) fail — at fault themselves, or their devices —
/// and the devices of those pairs (their cables).
fn lossy<'a>(pod: &'a Pod, outcomes: &[PairOutcome]) -> (BTreeSet<&'a String>, BTreeSet<Dev>) {
    let under: Vec<&PairOutcome> =
        outcomes.iter().filter(|o| failed(o) && pod.same_tor(o.pair.0, o.pair.1)).collect();
    (
        under.iter().map(|o| &pod.rail(o.pair.0).tor).collect(),
        under.iter().flat_map(|o| [o.pair.0, o.pair.1]).collect(),
    )
}

/// The spine paths the pairs point at.
fn spine_paths<'a>(pod: &Pod, outcomes: &'a [PairOutcome]) -> SpinePaths<'a> {
    let split = |o: &PairOutcome| split(pod, o);
    let tors_of = |o: &PairOutcome| tors_of(pod, o);
    // Spine paths: per ToR pair, the pairs whose source ports split.
    let mut spine: ByTors = BTreeMap::new();
    for o in outcomes.iter().filter(|o| split(o)) {
        spine.entry(tors_of(o)).or_default().push(o);
    }
    // One ToR in every ToR pair with path evidence (two or more, one of them split): its
    // spine links. Path evidence is a split, or failed pairs on more than one device (a
    // pair whose probes all hashed onto the dead path fails whole: one in eight with four
    // source ports and two spines). A lossy device splits and fails its own pairs too (a
    // probe lost on one source port): a ToR pair whose splits and failures all share one
    // device is that device's, not a path's. A ToR whose pairs under it fail too is lossy
    // or dead itself: not its spine links.
    let holds = |t: &String, k: &(String, String)| k.0 == *t || k.1 == *t;
    let one_device = |os: &[&PairOutcome]| {
        let Some(first) = os.first().map(|o| o.pair) else { return true };
        [first.0, first.1].into_iter().any(|d| os.iter().all(|o| o.pair.0 == d || o.pair.1 == d))
    };
    let mut whole: ByTors = BTreeMap::new();
    for o in outcomes.iter().filter(|o| failed(o) && !split(o)) {
        let k = tors_of(o);
        if k.0 != k.1 {
            whole.entry(k).or_default().push(o);
        }
    }
    let (lossy_tors, lossy_devs) = lossy(pod, outcomes);
    // Whether `os` (two or more pairs) all share one device that failed under its own ToR
    // too: evidence that shares a device only by timing (the first probes through a bad
    // spine link) stays the path's.
    let a_lossy_devices = |os: &[&PairOutcome]| {
        os.len() >= 2
            && [os[0].pair.0, os[0].pair.1].into_iter().any(|d| {
                lossy_devs.contains(&d) && os.iter().all(|o| o.pair.0 == d || o.pair.1 == d)
            })
    };
    // A ToR pair whose splits and failures (two or more pairs) all share one device that
    // fails under its own ToR too is that device's: a lossy cable loses a probe on one
    // source port and not another, and fails its pairs whole, across every ToR it talks to.
    // A ToR pair with a ToR whose own pairs fail is that ToR's (or its devices'): a ToR
    // dropping at every port does the same. A lossy ToR owns its ToR pairs' evidence when it fails toward every other ToR it was
    // measured with, each time on more than one device (a lossy device under it fails
    // toward them on one).
    let owns = |t: &String| {
        lossy_tors.contains(t)
            && outcomes.iter().map(&tors_of).filter(|k| k.0 != k.1 && (k.0 == *t || k.1 == *t)).all(
                |k| {
                    let os = tor_pair_evidence(&spine, &whole, &k);
                    !os.is_empty() && !one_device(&os)
                },
            )
    };
    let device_only: Vec<(String, String)> = spine
        .keys()
        .filter(|k| {
            let os = tor_pair_evidence(&spine, &whole, k);
            a_lossy_devices(&os) || owns(&k.0) || owns(&k.1)
        })
        .cloned()
        .collect();
    let mut not_path: BTreeSet<(Dev, Dev)> = BTreeSet::new();
    for k in device_only {
        if let Some(os) = spine.remove(&k) {
            not_path.extend(os.iter().map(|o| o.pair));
        }
    }
    let evidence: BTreeSet<&(String, String)> = spine
        .keys()
        .chain(whole.iter().filter(|(_, os)| !one_device(os)).map(|(k, _)| k))
        .collect();
    let tors: BTreeSet<&String> = spine.keys().flat_map(|(a, b)| [a, b]).collect();
    let common = tors
        .into_iter()
        .map(|t| {
            let off: Vec<&(String, String)> =
                evidence.iter().copied().filter(|k| !holds(t, k)).collect();
            (t, evidence.len() - off.len(), off)
        })
        .filter(|(t, _, _)| !lossy_tors.contains(*t))
        .filter(|(_, on, off)| {
            *on >= 2 && off.iter().all(|k| one_device(&tor_pair_evidence(&spine, &whole, k)))
        })
        .min_by_key(|(_, _, off)| off.len())
        .map(|(t, _, _)| t.clone());
    if let Some(t) = &common {
        spine.retain(|k, os| {
            let keep = holds(t, k);
            if !keep {
                not_path.extend(os.iter().map(|o| o.pair));
            }
            keep
        });
    }
    SpinePaths { spine, common, not_path }
}

/// The devices suspected: at least [`DEVICE_SHARE`] of their pairs failed, two or more
/// (`tally`: measured, failed).
fn flagged(tally: &BTreeMap<Dev, (usize, usize)>) -> BTreeSet<Dev> {
    tally
        .iter()
        .filter(|(_, (n, f))| *f >= 2 && *f as f64 >= DEVICE_SHARE * *n as f64)
        .map(|(d, _)| *d)
        .collect()
}

/// Whether a ToR's own pairs (no spine crossed, among `under`) fail whichever of its
/// devices they join: for each device under it a pair under it without that device failed
/// too, and at least half of them did — a ToR dropping at every port, which fails too few of
/// each device's pairs to suspect the device (a lossy device fails only its own).
fn own_pairs_fail(outcomes: &[PairOutcome], under: &[Dev]) -> bool {
    let own: Vec<&PairOutcome> = outcomes
        .iter()
        .filter(|o| under.contains(&o.pair.0) && under.contains(&o.pair.1))
        .collect();
    let bad: Vec<&&PairOutcome> = own.iter().filter(|o| failed(o)).collect();
    under.len() >= 3
        && bad.len() >= 2
        && 2 * bad.len() >= own.len()
        && under.iter().all(|d| bad.iter().any(|o| o.pair.0 != *d && o.pair.1 != *d))
}

/// From the pairs measured, the suspects: hosts (every rail of a host suspected), ToRs
/// (every device under a ToR, on two or more hosts), rails (a device, its port or its cable),
/// spine paths (cross-ToR pairs where some source ports carried and others did not) and,
/// for a failed pair nothing else explains, the path between its two devices.
pub fn attribute(pod: &Pod, outcomes: &[PairOutcome]) -> Vec<Suspect> {
    let pname = |(a, b): (Dev, Dev)| format!("{} <-> {}", pod.name(a), pod.name(b));
    let split = |o: &PairOutcome| split(pod, o);
    let tors_of = |o: &PairOutcome| tors_of(pod, o);
    // Where the fabric says which spine each probe crossed, the links and spines the failed
    // probes share (tomography); else the ToR pairs whose probes split.
    let routed = outcomes.iter().any(|o| !o.routes.is_empty());
    let chosen: Vec<Chosen> = if routed {
        let (lossy_tors, lossy_devs) = lossy(pod, outcomes);
        let skip = |o: &PairOutcome| {
            [o.pair.0, o.pair.1]
                .iter()
                .any(|d| lossy_devs.contains(d) || lossy_tors.contains(&pod.rail(*d).tor))
        };
        tomo::localize(pod, outcomes, &skip)
    } else {
        Vec::new()
    };
    let on_chosen: BTreeSet<(Dev, Dev)> =
        chosen.iter().flat_map(|c| c.outcomes.iter().map(|&i| outcomes[i].pair)).collect();
    let SpinePaths { spine, common, not_path } = if routed {
        SpinePaths { spine: BTreeMap::new(), common: None, not_path: BTreeSet::new() }
    } else {
        spine_paths(pod, outcomes)
    };
    let by_path = |o: &PairOutcome| {
        if routed { on_chosen.contains(&o.pair) } else { split(o) && !not_path.contains(&o.pair) }
    };
    // Whether a chosen link or spine lies on a failed cross-ToR pair's paths.
    let touches = |c: &Chosen, o: &PairOutcome| {
        let (ta, tb) = tors_of(o);
        ta != tb
            && match &c.at {
                Component::TorSpine { tor, .. } => *tor == ta || *tor == tb,
                _ => true,
            }
    };
    // A failed cross-ToR pair between ToRs whose paths split (or touching the one ToR in all
    // of them, or a link or spine the tomography chose): its default source port hashed onto
    // the dead path, though its probes did not.
    let on_split_path = |o: &PairOutcome| {
        let (ta, tb) = tors_of(o);
        ta != tb
            && failed(o)
            && (spine.contains_key(&(ta.clone(), tb.clone()))
                || common.as_ref().is_some_and(|c| *c == ta || *c == tb)
                || chosen.iter().any(|c| touches(c, o)))
    };
    let mut tally: BTreeMap<Dev, (usize, usize)> = BTreeMap::new();
    for o in outcomes {
        // A pair that fails on some ECMP paths only says nothing of its devices.
        if by_path(o) || on_split_path(o) {
            continue;
        }
        for d in [o.pair.0, o.pair.1] {
            let t = tally.entry(d).or_default();
            t.0 += 1;
            if failed(o) {
                t.1 += 1;
            }
        }
    }
    let flagged = flagged(&tally);
    let share = |ds: &[Dev]| {
        let (n, f) =
            ds.iter().filter_map(|d| tally.get(d)).fold((0, 0), |a, t| (a.0 + t.0, a.1 + t.1));
        if n == 0 { 0.0 } else { f as f64 / n as f64 }
    };
    let explained_by =
        |o: &PairOutcome, ds: &[Dev]| ds.contains(&o.pair.0) || ds.contains(&o.pair.1);
    let evidence_of = |ds: &[Dev], what: &str| -> (Vec<String>, Vec<String>, String) {
        let mine: Vec<&PairOutcome> =
            outcomes.iter().filter(|o| explained_by(o, ds) && failed(o) && !by_path(o)).collect();
        let total = outcomes.iter().filter(|o| explained_by(o, ds)).count();
        let pairs: Vec<String> = mine.iter().map(|o| pname(o.pair)).collect();
        let checks: Vec<String> =
            mine.iter().flat_map(|o| o.failed_checks.iter().cloned()).take(6).collect();
        let text = format!("{} of the {total} pairs of {what} failed", mine.len());
        (pairs, checks, text)
    };
    let mut out = Vec::new();
    let mut covered: BTreeSet<Dev> = BTreeSet::new();
    // Most of the pod at fault is no component: the thresholds, the link rate the plan
    // assumes, or something every host shares.
    if flagged.len() >= 3 && 2 * flagged.len() > tally.len() {
        let all: Vec<Dev> = tally.keys().copied().collect();
        let (pairs, checks, text) = evidence_of(&all, "the pod");
        let at = Component::Pod { flagged: flagged.len(), devices: tally.len() };
        let evidence = format!(
            "{text}: no one component stands out — the thresholds, the link rate the plan \
             assumes, or what every host shares (load, configuration)"
        );
        return vec![Suspect::on(pod, at, share(&all), evidence).explaining(pairs, checks)];
    }
    // Hosts: every rail of the host (two or more rails, else it is a rail).
    for (h, host) in pod.hosts.iter().enumerate() {
        let ds: Vec<Dev> = (0..host.rails.len()).map(|r| Dev { host: h, rail: r }).collect();
        if ds.len() >= 2 && ds.iter().all(|d| flagged.contains(d)) {
            let (pairs, checks, text) = evidence_of(&ds, &format!("its {} rails", ds.len()));
            let evidence = format!(
                "{text}: every rail of the host (its CPU, memory, PCIe, or the host itself)"
            );
            out.push(
                Suspect::on(pod, Component::Host(h), share(&ds), evidence)
                    .explaining(pairs, checks),
            );
            covered.extend(ds);
        }
    }
    // ToRs: every device under it not explained yet, on two or more hosts.
    for (tor, under) in pod.tors() {
        let hosts: BTreeSet<usize> = under.iter().map(|d| d.host).collect();
        if hosts.len() >= 2
            && under.iter().all(|d| !covered.contains(d))
            && (under.iter().all(|d| flagged.contains(d)) || own_pairs_fail(outcomes, &under))
        {
            let (pairs, checks, text) =
                evidence_of(&under, &format!("the {} devices under it", under.len()));
            let evidence = format!("{text}; the devices of other ToRs passed among themselves");
            out.push(
                Suspect::on(pod, Component::Tor(tor.clone()), share(&under), evidence)
                    .explaining(pairs, checks),
            );
            covered.extend(under);
        }
    }
    // Rails: a device, its port or its cable.
    for &d in &flagged {
        if covered.contains(&d) {
            continue;
        }
        let (pairs, checks, text) = evidence_of(&[d], "the device");
        let r = pod.rail(d);
        let evidence = format!(
            "{text}, with peers that passed elsewhere: the NIC, its port or its cable to {}",
            r.tor
        );
        out.push(
            Suspect::on(pod, Component::Rail(d), share(&[d]), evidence).explaining(pairs, checks),
        );
        covered.insert(d);
    }
    let spine_suspect = |at: Component, os: &[&PairOutcome]| {
        let bad: usize = os.iter().map(|o| o.ports.iter().filter(|p| !p.1).count()).sum();
        let all: usize = os.iter().map(|o| o.ports.len()).sum();
        let ports: Vec<String> = os
            .iter()
            .filter(|o| by_path(o))
            .take(4)
            .map(|o| {
                let dead: Vec<String> =
                    o.ports.iter().filter(|p| !p.1).map(|p| p.0.to_string()).collect();
                format!("{}: ports {} did not carry", pname(o.pair), dead.join(", "))
            })
            .collect();
        let split = os.iter().filter(|o| by_path(o)).count();
        // How many of the pairs it explains show the split themselves.
        let confidence = if os.is_empty() { 0.0 } else { split as f64 / os.len() as f64 };
        let evidence = format!(
            "{bad} of {all} source-port probes over {split} pair(s) carried nothing while the \
             others carried, and {} more pair(s) failed on their own source port: a ToR-spine \
             link or a spine, for the ECMP hashes that use it ({})",
            os.len() - split,
            ports.join("; ")
        );
        Suspect::on(pod, at, confidence, evidence).explaining(
            os.iter().map(|o| pname(o.pair)).collect(),
            os.iter().flat_map(|o| o.failed_checks.iter().cloned()).take(6).collect(),
        )
    };
    let all_covered: Vec<Dev> = covered.iter().copied().collect();
    // The failed pairs a spine suspect explains beyond those whose probes split.
    let also = |keep: &dyn Fn(&PairOutcome) -> bool| -> Vec<&PairOutcome> {
        outcomes
            .iter()
            .filter(|o| {
                !by_path(o) && on_split_path(o) && !explained_by(o, &all_covered) && keep(o)
            })
            .collect()
    };
    for c in &chosen {
        let mut os: Vec<&PairOutcome> = c.outcomes.iter().map(|&i| &outcomes[i]).collect();
        os.extend(also(&|o| {
            touches(c, o) && !c.outcomes.iter().any(|&i| outcomes[i].pair == o.pair)
        }));
        out.push(chosen_suspect(pod, c, outcomes, &os));
    }
    if let Some(t) = &common {
        let mut os: Vec<&PairOutcome> = spine.values().flatten().copied().collect();
        os.extend(also(&|_| true));
        out.push(spine_suspect(Component::SpineLinks(t.clone()), &os));
    } else {
        for (k, os) in &spine {
            let mut os = os.clone();
            os.extend(also(&|o| tors_of(o) == *k));
            out.push(spine_suspect(Component::SpinePath(k.0.clone(), k.1.clone()), &os));
        }
    }
    // What is left: failed pairs no suspect explains.
    for o in outcomes {
        if failed(o) && !by_path(o) && !on_split_path(o) && !explained_by(o, &all_covered) {
            let evidence = "this pair failed while both devices passed with their other peers: \
                            the path between them";
            out.push(
                Suspect::on(pod, Component::Path(o.pair.0, o.pair.1), 1.0, evidence.into())
                    .explaining(
                        vec![pname(o.pair)],
                        o.failed_checks.iter().take(6).cloned().collect(),
                    ),
            );
        }
    }
    out
}

/// The suspect the tomography chose, explaining `os`.
fn chosen_suspect(pod: &Pod, c: &Chosen, outcomes: &[PairOutcome], os: &[&PairOutcome]) -> Suspect {
    let pname = |(a, b): (Dev, Dev)| format!("{} <-> {}", pod.name(a), pod.name(b));
    let ports: Vec<String> = c
        .ports
        .iter()
        .map(|(i, p)| format!("{} from port {p}", pname(outcomes[*i].pair)))
        .collect();
    let twins = if c.twins.is_empty() {
        String::new()
    } else {
        let names: Vec<String> = c.twins.iter().map(|t| t.name(pod)).collect();
        format!(
            "; no probe tells it from {} (every path through one crosses the other)",
            names.join(" or ")
        )
    };
    let evidence = format!(
        "{} of the {} source-port probes through it failed, probes elsewhere carried (the \
         fabric's routes: which spine each probe crossed, out and back): {}{twins}",
        c.failed,
        c.probes,
        ports.join(", ")
    );
    let confidence = c.failed as f64 / c.probes.max(1) as f64;
    Suspect::on(pod, c.at.clone(), confidence, evidence).explaining(
        os.iter().map(|o| pname(o.pair)).collect(),
        os.iter().flat_map(|o| o.failed_checks.iter().cloned()).take(6).collect(),
    )
}

/// Whether the pair `(a, b)` lies on `at`: a host or ToR of it, a link its ECMP paths cross,
/// a spine it crosses, or the pair itself.
pub fn lies_on(pod: &Pod, at: &Component, (a, b): (Dev, Dev)) -> bool {
    match at {
        Component::Pod { .. } => true,
        Component::Host(h) => a.host == *h || b.host == *h,
        Component::Tor(t) => pod.rail(a).tor == *t || pod.rail(b).tor == *t,
        Component::Spine { .. } => !pod.same_tor(a, b),
        Component::Path(x, y) => (*x, *y) == (a, b) || (*y, *x) == (a, b),
        _ => {
            let links = at.links(pod);
            pod.ecmp_paths(a, b).iter().flatten().any(|l| links.contains(l))
        }
    }
}

/// [`attribute`] of what small probes and the measurements say (`small`), and of what
/// near-MTU probes say where small ones carried (`large`: their ports, nothing else failed):
/// a component whose large frames vanish is named `mtu`, and the suspects of `small` whose
/// every failed pair lies on one (a bandwidth test of full-size frames through it) are its.
pub fn attribute_mtu(pod: &Pod, small: &[PairOutcome], large: &[PairOutcome]) -> Vec<Suspect> {
    let mut sus = attribute(pod, small);
    if !large.iter().any(failed) {
        return sus;
    }
    let pname = |(a, b): (Dev, Dev)| format!("{} <-> {}", pod.name(a), pod.name(b));
    let by_name: BTreeMap<String, &PairOutcome> =
        small.iter().map(|o| (pname(o.pair), o)).collect();
    // Large frames on the components that lose small probes too are lost with them: a lossy
    // rail or a dead spine path loses a near-MTU probe as it loses a small one, and its
    // peers' large frames say nothing of theirs.
    let losing: Vec<Component> = sus
        .iter()
        .filter(|s| {
            s.pairs.iter().filter_map(|n| by_name.get(n)).any(|o| o.ports.iter().any(|p| !p.1))
        })
        .map(|s| s.at.clone())
        .collect();
    let large: Vec<PairOutcome> = large
        .iter()
        .filter(|o| !losing.iter().any(|at| lies_on(pod, at, o.pair)))
        .cloned()
        .collect();
    let large = large.as_slice();
    // The probes of the pairs on `at` that failed, and all of them.
    let lost = |os: &[PairOutcome], at: &Component| {
        let ports: Vec<bool> = os
            .iter()
            .filter(|o| lies_on(pod, at, o.pair))
            .flat_map(|o| o.ports.iter().map(|p| p.1))
            .collect();
        (ports.iter().filter(|ok| !**ok).count(), ports.len().max(1))
    };
    let share = |(k, n): (usize, usize)| k as f64 / n as f64;
    // Two or more near-MTU probes lost (one is a packet lost, as on any link), and small
    // ones lost far less often: a lossy link loses a near-MTU probe as it loses a small one.
    let big: Vec<Suspect> = attribute(pod, large)
        .into_iter()
        .filter(|s| s.kind != "pod")
        .filter(|s| {
            let l = lost(large, &s.at);
            l.0 >= 2 && share(lost(small, &s.at)) * 3.0 < share(l)
        })
        .map(Suspect::near_mtu)
        .collect();
    sus.retain(|s| {
        let pairs: Vec<(Dev, Dev)> =
            s.pairs.iter().filter_map(|n| by_name.get(n)).map(|o| o.pair).collect();
        pairs.is_empty() || !pairs.iter().all(|p| big.iter().any(|b| lies_on(pod, &b.at, *p)))
    });
    sus.extend(big);
    sus
}

/// [`attribute`], with the spine paths between three or more ToR pairs that touch
/// every ToR folded into one `spine` finding (a spine, or all its links, failing for the
/// ECMP hashes that cross it).
pub fn attribute_with_spines(pod: &Pod, outcomes: &[PairOutcome]) -> Vec<Suspect> {
    let sus = attribute(pod, outcomes);
    let spine: Vec<&Suspect> = sus
        .iter()
        .filter(|s| matches!(s.at, Component::SpinePath(..) | Component::SpineLinks(_)))
        .collect();
    // The ToRs at either end of the ECMP paths that split (one ToR's spine links name no
    // ToR pair).
    let touched: BTreeSet<&str> = spine
        .iter()
        .filter_map(|s| match &s.at {
            Component::SpinePath(a, b) => Some([a.as_str(), b.as_str()]),
            _ => None,
        })
        .flatten()
        .collect();
    // ToRs of the rails that saw traffic at all.
    let probed: BTreeSet<String> = outcomes
        .iter()
        .flat_map(|o| [pod.rail(o.pair.0).tor.clone(), pod.rail(o.pair.1).tor.clone()])
        .collect();
    if spine.len() < 3 || touched.len() < probed.len().max(3) {
        return sus;
    }
    let pairs: Vec<String> = spine.iter().flat_map(|s| s.pairs.iter().cloned()).collect();
    let conf = spine.iter().map(|s| s.confidence).sum::<f64>() / spine.len() as f64;
    let n = spine.len();
    let at = Component::Spine { tors: touched.len(), spine: None };
    let evidence = format!(
        "between {n} ToR pairs some source ports carry and others do not, touching every \
         ToR: one spine (or every link of one) fails for the hashes that cross it"
    );
    let mut rest: Vec<Suspect> =
        sus.iter().filter(|s| s.at.kind() != "spine-path").cloned().collect();
    rest.push(Suspect::on(pod, at, conf, evidence).explaining(pairs, vec![]));
    rest
}
