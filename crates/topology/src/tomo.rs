//! Binary tomography over routed probes: where the fabric says which spine each probe
//! crossed (a plan's `pod.route`), the ToR–spine link or the spine that the failed probes
//! share and the passed ones clear.
//!
//! A probe from UDP source port `p` between devices under ToRs `a` and `b` goes out through
//! spine `f` (the hash of `a`'s ToR) and its answers come back through spine `r` (the hash of
//! `b`'s): it crosses the links `(a, f)`, `(b, f)`, `(b, r)` and `(a, r)`, each a ToR's link to
//! a spine in either direction. A candidate is one such link, or a spine (every link of it).
//! Greedily, the candidate whose probes failed most surely — the lower end of the Wilson
//! interval of its failed share — explains the failed probes it crosses, until none is left
//! or none explains two or more (on more than one device). A spine down fails every probe
//! through it, each of its links too: the spine explains more at the same share and is
//! chosen; one link down fails the probes through it and not those through the spine's other
//! links: the link's share is the higher. A spine that drops some flows only is judged over
//! all its probes, its links each over fewer: the spine's interval is the narrower.
//!
//! Some components lie on the very same probes (a plane of two ToRs: each path through one
//! ToR's link to spine `j` crosses the other's, and spine `j` is those two links): no
//! end-to-end measurement tells them apart. The chosen one carries the others as `twins`.

use std::collections::BTreeSet;

use crate::component::Component;
use crate::fabric::{Dev, Pod};
use crate::locate::PairOutcome;
use crate::score::wilson;

/// A candidate's lower bound below this explains nothing (a few failed probes among many
/// that carried through it).
const MIN_LOWER: f64 = 0.1;

/// A probe as the tomography sees it.
struct Obs {
    /// Its outcome (an index into the outcomes).
    o: usize,
    /// When it was sent, in the run's order.
    round: usize,
    /// Whether it carried.
    ok: bool,
    /// The ToR–spine links it crossed.
    links: BTreeSet<(String, usize)>,
}

/// What the tomography names: a component, the failed probes it explains out of those that
/// cross it, and the components no probe tells apart from it.
#[derive(Debug, Clone)]
pub(crate) struct Chosen {
    /// A ToR's link to a spine, or a spine.
    pub at: Component,
    /// Failed probes it explains.
    pub failed: usize,
    /// Probes that cross it.
    pub probes: usize,
    /// Components on exactly the same probes.
    pub twins: Vec<Component>,
    /// The outcomes (indices) whose failed probes it explains.
    pub outcomes: BTreeSet<usize>,
    /// The failed probes' ports, per outcome, the first few.
    pub ports: Vec<(usize, u16)>,
}

fn crosses(at: &Component, links: &BTreeSet<(String, usize)>) -> bool {
    match at {
        Component::TorSpine { tor, spine } => links.contains(&(tor.clone(), *spine)),
        Component::Spine { spine: Some(j), .. } => links.iter().any(|(_, s)| s == j),
        _ => false,
    }
}

/// The components the routed probes of `outcomes` point at; outcomes `skip` says are another
/// component's (a lossy ToR, a device that fails under its own ToR) are left out.
pub(crate) fn localize(
    pod: &Pod,
    outcomes: &[PairOutcome],
    skip: &dyn Fn(&PairOutcome) -> bool,
) -> Vec<Chosen> {
    let mut obs: Vec<Obs> = Vec::new();
    let mut ports: Vec<u16> = Vec::new();
    for (i, o) in outcomes.iter().enumerate() {
        let (ta, tb) = (&pod.rail(o.pair.0).tor, &pod.rail(o.pair.1).tor);
        if ta == tb || skip(o) {
            continue;
        }
        // A pair whose every probe failed is its devices' or its own, not a spine's: with
        // a probe through each spine, a spine fault fails some of them only.
        if !o.ports.is_empty() && o.ports.iter().all(|p| !p.1) {
            continue;
        }
        for &(port, ok) in o.ports.iter().chain(&o.measured) {
            let Some(&[f, r]) = o.routes.get(&port) else { continue };
            let links: BTreeSet<(String, usize)> =
                [(ta, f), (tb, f), (tb, r), (ta, r)].map(|(t, s)| (t.clone(), s)).into();
            obs.push(Obs { o: i, round: o.round, ok, links });
            ports.push(port);
        }
    }
    let tors: BTreeSet<String> = pod.tors().into_iter().map(|(t, _)| t).collect();
    let spines: BTreeSet<usize> =
        obs.iter().flat_map(|x| x.links.iter().map(|l| l.1)).collect::<BTreeSet<_>>();
    let mut cands: Vec<Component> = Vec::new();
    for &j in &spines {
        cands.push(Component::Spine { tors: tors.len(), spine: Some(j) });
        cands.extend(tors.iter().map(|t| Component::TorSpine { tor: t.clone(), spine: j }));
    }
    // The probes through each candidate, once.
    let through: Vec<Vec<usize>> = cands
        .iter()
        .map(|c| (0..obs.len()).filter(|&k| crosses(c, &obs[k].links)).collect())
        .collect();
    let mut left: BTreeSet<usize> = (0..obs.len()).filter(|&k| !obs[k].ok).collect();
    let mut out: Vec<Chosen> = Vec::new();
    while !left.is_empty() {
        let best = through
            .iter()
            .enumerate()
            .filter_map(|(i, on)| {
                let on = on.clone();
                let mine: Vec<usize> = on.iter().copied().filter(|k| left.contains(k)).collect();
                // Two or more failed probes, not all of one device.
                let devs = |k: &usize| {
                    let p = outcomes[obs[*k].o].pair;
                    [p.0, p.1]
                };
                let one_device = mine.first().is_some_and(|k0| {
                    devs(k0).into_iter().any(|d: Dev| mine.iter().all(|k| devs(k).contains(&d)))
                });
                if mine.len() < 2 || one_device {
                    return None;
                }
                // Judged from its first failed probe on: a fault that starts mid-run is not
                // cleared by what carried before it.
                let since = on.iter().filter(|k| !obs[**k].ok).map(|k| obs[*k].round).min()?;
                let on: Vec<usize> = on.into_iter().filter(|k| obs[*k].round >= since).collect();
                let failed = on.iter().filter(|k| !obs[**k].ok).count();
                let (lower, _) = wilson(failed, on.len());
                // Above what the probes elsewhere meanwhile lost (those not yet explained):
                // a few probes lost by chance (a busy host) name no link.
                let here: BTreeSet<usize> = on.iter().copied().collect();
                let rest: Vec<usize> = (0..obs.len())
                    .filter(|k| obs[*k].round >= since && !here.contains(k))
                    .filter(|k| obs[*k].ok || left.contains(k))
                    .collect();
                let (_, upper) = wilson(rest.iter().filter(|k| !obs[**k].ok).count(), rest.len());
                (lower >= MIN_LOWER && lower > upper).then_some((lower, mine.len(), i, on, mine))
            })
            // The surest first, then the one that explains more (a spine over its links at
            // the same share).
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some((_, _, i, on, mine)) = best else { break };
        let (c, all) = (&cands[i], &through[i]);
        let twins: Vec<Component> = cands
            .iter()
            .zip(&through)
            .filter(|(x, t)| *x != c && *t == all)
            .map(|(x, _)| x.clone())
            .collect();
        out.push(Chosen {
            at: c.clone(),
            failed: on.iter().filter(|k| !obs[**k].ok).count(),
            probes: on.len(),
            twins,
            outcomes: mine.iter().map(|k| obs[*k].o).collect(),
            ports: mine.iter().take(6).map(|k| (obs[*k].o, ports[*k])).collect(),
        });
        for k in mine {
            left.remove(&k);
        }
    }
    fold_spines(out, tors.len())
}

/// Two or more ToRs' links to one spine are that spine: a spine that drops some flows, or that failed after the first probes through
/// its other links had carried, leaves some of its links looking clean.
fn fold_spines(chosen: Vec<Chosen>, tors: usize) -> Vec<Chosen> {
    let mut by_spine: std::collections::BTreeMap<usize, Vec<Chosen>> = Default::default();
    let mut out = Vec::new();
    for c in chosen {
        match &c.at {
            Component::TorSpine { spine, .. } => by_spine.entry(*spine).or_default().push(c),
            _ => out.push(c),
        }
    }
    for (j, links) in by_spine {
        // (Twins are never both chosen: the first explains the other's probes.)
        if links.len() < 2 {
            out.extend(links);
            continue;
        }
        let mut spine = Chosen {
            at: Component::Spine { tors, spine: Some(j) },
            failed: 0,
            probes: 0,
            twins: Vec::new(),
            outcomes: BTreeSet::new(),
            ports: Vec::new(),
        };
        for l in links {
            spine.failed += l.failed;
            spine.probes += l.probes;
            spine.outcomes.extend(l.outcomes);
            spine.ports.extend(l.ports);
        }
        spine.ports.truncate(6);
        out.push(spine);
    }
    out
}
