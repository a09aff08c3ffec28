//! Which pairs of devices a pod run measures, and when: the pair sets, the round-robin rounds
//! of disjoint pairs, the bisection and the incasts.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::fabric::{Dev, Pod};

/// Which pairs of devices a pod run measures (always devices on two different hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairSet {
    /// Every pair of devices on different hosts.
    All,
    /// Pairs under the same ToR.
    SameTor,
    /// Pairs under different ToRs.
    CrossTor,
    /// Rail i to rail i across hosts: the paths collectives use.
    #[default]
    RailAligned,
    /// Each device against `peers_per_tor` devices under its own ToR and as many under other
    /// ToRs (each under another): O(N.k) pairs, coverage reported.
    Sampled,
}

impl PairSet {
    /// The plan's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PairSet::All => "all",
            PairSet::SameTor => "same-tor",
            PairSet::CrossTor => "cross-tor",
            PairSet::RailAligned => "rail-aligned",
            PairSet::Sampled => "sampled",
        }
    }
}

impl Pod {
    /// The pairs of the plan's set, each (lower host, higher host), in order.
    pub fn pairs(&self) -> Vec<(Dev, Dev)> {
        let devs = self.devices();
        let mut out = Vec::new();
        if self.pairs == PairSet::Sampled {
            // k peers under the device's own ToR and k under other ToRs (each under another
            // one, in a seeded order): O(N.k) pairs, every device and, over a pod, most ToR
            // pairs covered (the report counts them).
            let mut set = BTreeSet::new();
            for &d in &devs {
                let mut near: Vec<Dev> = devs
                    .iter()
                    .copied()
                    .filter(|p| p.host != d.host && self.same_tor(*p, d))
                    .collect();
                near.sort_by_key(|p| mix(self.seed, d, *p));
                let mut far: Vec<Dev> = devs
                    .iter()
                    .copied()
                    .filter(|p| p.host != d.host && !self.same_tor(*p, d))
                    .collect();
                far.sort_by_key(|p| mix(self.seed, d, *p));
                let mut tors = BTreeSet::new();
                let far = far.into_iter().filter(|p| tors.insert(self.rail(*p).tor.clone()));
                for p in
                    near.into_iter().take(self.peers_per_tor).chain(far.take(self.peers_per_tor))
                {
                    set.insert(if d.host < p.host { (d, p) } else { (p, d) });
                }
            }
            return set.into_iter().collect();
        }
        for (i, &a) in devs.iter().enumerate() {
            for &b in &devs[i + 1..] {
                if a.host == b.host {
                    continue;
                }
                let keep = match self.pairs {
                    PairSet::All => true,
                    PairSet::SameTor => self.same_tor(a, b),
                    PairSet::CrossTor => !self.same_tor(a, b),
                    PairSet::RailAligned => a.rail == b.rail,
                    PairSet::Sampled => unreachable!("handled above"),
                };
                if keep {
                    out.push((a, b));
                }
            }
        }
        out
    }

    /// How many pairs [`Pod::pairs`] gives, without making them (O(devices)): exact for every
    /// set but `sampled`, whose figure is its bound (each device and at most
    /// `2 × peers_per_tor` peers).
    pub fn pair_count(&self) -> usize {
        let choose2 = |k: usize| k * k.saturating_sub(1) / 2;
        // Pairs under one ToR across hosts: all under it, less those of one host.
        let same_tor = || {
            let mut by_tor: std::collections::HashMap<
                &str,
                (usize, std::collections::HashMap<usize, usize>),
            > = std::collections::HashMap::new();
            for d in self.devices() {
                let e = by_tor.entry(self.rail(d).tor.as_str()).or_default();
                e.0 += 1;
                *e.1.entry(d.host).or_default() += 1;
            }
            by_tor
                .values()
                .map(|(k, per)| choose2(*k) - per.values().map(|&m| choose2(m)).sum::<usize>())
                .sum::<usize>()
        };
        match self.pairs {
            PairSet::All => self.all_pairs(),
            PairSet::SameTor => same_tor(),
            PairSet::CrossTor => self.all_pairs() - same_tor(),
            PairSet::RailAligned => {
                // Host h's rail r pairs with every other host's rail r.
                let mut per_rail: Vec<usize> = Vec::new();
                for h in &self.hosts {
                    for r in 0..h.rails.len() {
                        if per_rail.len() <= r {
                            per_rail.resize(r + 1, 0);
                        }
                        per_rail[r] += 1;
                    }
                }
                per_rail.into_iter().map(choose2).sum()
            }
            PairSet::Sampled => self.devices().len().saturating_mul(2 * self.peers_per_tor),
        }
    }

    /// Every possible pair across hosts (what `all` measures): the denominator of coverage.
    pub fn all_pairs(&self) -> usize {
        let n: Vec<usize> = self.hosts.iter().map(|h| h.rails.len()).collect();
        let total: usize = n.iter().sum();
        (total * total - n.iter().map(|k| k * k).sum::<usize>()) / 2
    }
}

fn mix(seed: u64, a: Dev, b: Dev) -> u64 {
    // SplitMix64 over the inputs: a fixed, well-spread order.
    let mut z = seed
        ^ (a.host as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (a.rail as u64).rotate_left(17)
        ^ (b.host as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (b.rail as u64).rotate_left(41);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Splits `pairs` into rounds of disjoint pairs (no device, and no host pair, twice in a
/// round): the host pairs of a round-robin tournament (N hosts meet in N − 1 rounds, N even;
/// N rounds, N odd), each host pair's device pairs spread so that a device is in one pair per
/// round (rail r of one host with rail r + s of the other in sub-round s).
pub fn rounds(pod: &Pod, pairs: &[(Dev, Dev)]) -> Vec<Vec<(Dev, Dev)>> {
    let n = pod.hosts.len();
    let m = n + n % 2;
    let rails = pod.hosts.iter().map(|h| h.rails.len()).max().unwrap_or(1);
    let mut by_hosts: BTreeMap<(usize, usize), Vec<(Dev, Dev)>> = BTreeMap::new();
    for &(a, b) in pairs {
        let key = (a.host.min(b.host), a.host.max(b.host));
        by_hosts.entry(key).or_default().push((a, b));
    }
    let mut out = Vec::new();
    // The circle method: host 0 stays, the others turn.
    let mut ring: Vec<usize> = (0..m).collect();
    for _ in 0..m - 1 {
        let meet: Vec<(usize, usize)> = (0..m / 2)
            .map(|i| (ring[i], ring[m - 1 - i]))
            .filter(|(a, b)| *a < n && *b < n)
            .map(|(a, b)| (a.min(b), a.max(b)))
            .collect();
        for s in 0..rails {
            let round: Vec<(Dev, Dev)> = meet
                .iter()
                .filter_map(|k| by_hosts.get(k))
                .flatten()
                .copied()
                .filter(|(a, b)| {
                    let (lo, hi) = if a.host < b.host { (a, b) } else { (b, a) };
                    hi.rail == (lo.rail + s) % rails
                })
                .collect();
            if !round.is_empty() {
                out.push(round);
            }
        }
        ring[1..].rotate_right(1);
    }
    out
}

/// Flows of one phase (client → server, all at once) that may meet on a ToR–spine link: per
/// flow, each other cross-ToR flow that leaves from its ToR (they share that ToR's uplinks)
/// or arrives at its ToR (they share the spines' links down to it), with that ToR. Whether
/// two such flows do meet is up to the fabric's ECMP hash: on a non-blocking (1:1) fabric
/// two that hash onto one link get half of it each — a property of the schedule, not a
/// fault of either pair. Flows under one ToR cross no spine link and meet nobody.
pub fn beside(pod: &Pod, flows: &[(Dev, Dev)]) -> Vec<Vec<(usize, String)>> {
    let tor = |d: Dev| pod.rail(d).tor.as_str();
    flows
        .iter()
        .map(|&(c, s)| {
            if pod.same_tor(c, s) {
                return Vec::new();
            }
            flows
                .iter()
                .enumerate()
                .filter(|(_, (c2, s2))| (*c2, *s2) != (c, s) && !pod.same_tor(*c2, *s2))
                .filter_map(|(j, &(c2, s2))| {
                    if tor(c2) == tor(c) {
                        Some((j, tor(c).to_string()))
                    } else if tor(s2) == tor(s) {
                        Some((j, tor(s).to_string()))
                    } else {
                        None
                    }
                })
                .collect()
        })
        .collect()
}

/// Splits `pairs` into rounds that no ECMP hash can make collide: no device twice in a
/// round, and no ToR at an end of two cross-ToR pairs of a round (so no two flows of it,
/// either way, share a ToR–spine link). Pairs under one ToR only need their devices free.
/// Greedy, in the pairs' order: a pair goes into the first round it fits.
pub fn apart(pod: &Pod, pairs: &[(Dev, Dev)]) -> Vec<Vec<(Dev, Dev)>> {
    /// A round being filled: its pairs, their devices, the ToRs its cross-ToR pairs use.
    #[derive(Default)]
    struct Round<'a> {
        pairs: Vec<(Dev, Dev)>,
        devs: BTreeSet<Dev>,
        tors: BTreeSet<&'a str>,
    }
    let mut out: Vec<Round> = Vec::new();
    for &(a, b) in pairs {
        let cross = !pod.same_tor(a, b);
        let tors = [pod.rail(a).tor.as_str(), pod.rail(b).tor.as_str()];
        let taken = |r: &Round| {
            r.devs.contains(&a)
                || r.devs.contains(&b)
                || cross && tors.iter().any(|t| r.tors.contains(t))
        };
        let i = match out.iter().position(|r| !taken(r)) {
            Some(i) => i,
            None => {
                out.push(Round::default());
                out.len() - 1
            }
        };
        let r = &mut out[i];
        r.pairs.push((a, b));
        r.devs.extend([a, b]);
        if cross {
            r.tors.extend(tors);
        }
    }
    out.into_iter().map(|r| r.pairs).collect()
}

/// The bisection: host i of the first half with host i + N/2, every rail to the same rail.
pub fn bisection(pod: &Pod) -> Vec<(Dev, Dev)> {
    let n = pod.hosts.len();
    (0..n / 2)
        .flat_map(|i| {
            let j = i + n / 2;
            let rails = pod.hosts[i].rails.len().min(pod.hosts[j].rails.len());
            (0..rails).map(move |r| (Dev { host: i, rail: r }, Dev { host: j, rail: r }))
        })
        .collect()
}

/// The incasts: per ToR, its first device receives from up to `senders` devices of the same
/// rail on other hosts — under other ToRs only, where there are two or more (the traffic
/// crosses the fabric, every sender's alike).
pub fn incasts(pod: &Pod, senders: usize) -> Vec<(String, Dev, Vec<Dev>)> {
    let mut out = Vec::new();
    for (tor, under) in pod.tors() {
        let Some(&rx) = under.first() else { continue };
        let mut from: Vec<Dev> =
            pod.devices().into_iter().filter(|d| d.host != rx.host && d.rail == rx.rail).collect();
        from.sort_by_key(|d| (pod.same_tor(*d, rx), d.host));
        // Senders of one kind, where two or more cross the spines: a sender under the
        // receiver's ToR offers its whole link while those across an oversubscribed fabric
        // offer a spine link's share, and their shares would differ with no fault.
        if from.iter().filter(|d| !pod.same_tor(**d, rx)).count() >= 2 {
            from.retain(|d| !pod.same_tor(*d, rx));
        }
        from.truncate(senders);
        if !from.is_empty() {
            out.push((tor, rx, from));
        }
    }
    out
}
