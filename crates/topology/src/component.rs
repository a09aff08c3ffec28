//! The parts of a pod a fault is named on: the one vocabulary of qualify's suspects and the
//! pod agent's findings. Each has a kind and a name in reports, and stands for fabric
//! [`Link`]s where it is made of links.

use serde::{Deserialize, Serialize};

use crate::fabric::{Dev, Link, Pod};

/// A part of the pod a fault points at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Component {
    /// Most of the pod: `flagged` of its `devices` devices (no one part stands out).
    Pod {
        /// Devices whose pairs failed.
        flagged: usize,
        /// Devices measured.
        devices: usize,
    },
    /// A host (its index): every rail of it.
    Host(usize),
    /// A ToR: every device under it.
    Tor(String),
    /// A rail: the device, its port or its cable to its ToR.
    Rail(Dev),
    /// One ToR's links to the spines.
    SpineLinks(String),
    /// The ECMP paths between two ToRs (the lower name first).
    SpinePath(String, String),
    /// One ToR's link to one spine.
    TorSpine {
        /// The ToR.
        tor: String,
        /// The spine's index.
        spine: usize,
    },
    /// A spine (or every link of one): the ECMP paths between all of `tors` ToRs.
    Spine {
        /// The ToRs whose paths through it fail.
        tors: usize,
        /// Which spine, where the evidence says.
        spine: Option<usize>,
    },
    /// The path between two devices, nothing else explaining it.
    Path(Dev, Dev),
}

impl Component {
    /// Its kind in reports: `pod`, `host`, `tor`, `rail`, `spine-path` (a ToR's spine links
    /// too), `spine-link` (one ToR's link to one spine), `spine` or `link`.
    pub fn kind(&self) -> &'static str {
        match self {
            Component::Pod { .. } => "pod",
            Component::Host(_) => "host",
            Component::Tor(_) => "tor",
            Component::Rail(_) => "rail",
            Component::SpineLinks(_) | Component::SpinePath(..) => "spine-path",
            Component::TorSpine { .. } => "spine-link",
            Component::Spine { .. } => "spine",
            Component::Path(..) => "link",
        }
    }

    /// Its name in reports: `node03`, `node03.r1 (mlx5_1, ToR rack2-rail1)`, `rack2-rail1`,
    /// `the spine links of rack2-rail1`, `rack1-rail0 <-> rack2-rail0`,
    /// `node01.r0 <-> node04.r0`.
    pub fn name(&self, pod: &Pod) -> String {
        match self {
            Component::Pod { flagged, devices } => format!("{flagged} of {devices} devices"),
            Component::Host(h) => {
                pod.hosts.get(*h).map_or_else(|| format!("host {h}"), |x| x.name.clone())
            }
            Component::Tor(t) => t.clone(),
            Component::Rail(d) => {
                let r = pod.rail(*d);
                format!("{} ({}, ToR {})", pod.name(*d), r.device, r.tor)
            }
            Component::SpineLinks(t) => format!("the spine links of {t}"),
            Component::SpinePath(a, b) => format!("{a} <-> {b}"),
            Component::TorSpine { tor, spine } => format!("{tor}'s link to spine {spine}"),
            Component::Spine { tors, spine: None } => {
                format!("a spine: ECMP paths between all {tors} ToRs")
            }
            Component::Spine { spine: Some(j), .. } => format!("spine {j}"),
            Component::Path(a, b) => format!("{} <-> {}", pod.name(*a), pod.name(*b)),
        }
    }

    /// The ToRs it lies under or between (none for a host, a spine or the pod).
    pub fn tors<'a>(&'a self, pod: &'a Pod) -> Vec<&'a str> {
        match self {
            Component::Tor(t) | Component::SpineLinks(t) | Component::TorSpine { tor: t, .. } => {
                vec![t]
            }
            Component::SpinePath(a, b) => vec![a, b],
            Component::Rail(d) => vec![&pod.rail(*d).tor],
            Component::Path(a, b) => {
                let (ta, tb) = (pod.rail(*a).tor.as_str(), pod.rail(*b).tor.as_str());
                if ta == tb { vec![ta] } else { vec![ta, tb] }
            }
            Component::Pod { .. } | Component::Host(_) | Component::Spine { .. } => vec![],
        }
    }

    /// The fabric links it stands for: a rail's cable; a ToR's links to each spine; the
    /// links of every ECMP path between two ToRs' devices or two devices. Empty for what is
    /// not made of links (the pod, a host, a ToR or a spine itself).
    pub fn links(&self, pod: &Pod) -> Vec<Link> {
        let mut out: Vec<Link> = match self {
            Component::Rail(d) => vec![Link::HostTor(*d)],
            Component::SpineLinks(t) => pod.spine_links(t),
            Component::TorSpine { tor, spine } => {
                vec![Link::TorSpine { tor: tor.clone(), spine: Some(*spine) }]
            }
            Component::SpinePath(a, b) => {
                pod.spine_links(a).into_iter().chain(pod.spine_links(b)).collect()
            }
            Component::Path(a, b) => pod.ecmp_paths(*a, *b).into_iter().flatten().collect(),
            Component::Pod { .. } | Component::Host(_) | Component::Tor(_) => vec![],
            Component::Spine { .. } => vec![],
        };
        out.sort();
        out.dedup();
        out
    }
}
