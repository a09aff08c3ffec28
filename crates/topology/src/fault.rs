//! The fault catalogue (issue 44): what goes wrong in a leaf-spine pod every week — a dirty
//! optic losing a few percent, a cable at part of its rate, an MTU set lower on one link, a
//! link down or flapping, a spine black-holing some flows or all, a ToR dropping at every
//! port, a corrupting cable, a host killed, frozen or starved of CPU — each at a strength
//! drawn from a range, on a place drawn from a [`Shape`], from a seed; and how
//! `scripts/emupod.sh` makes it and heals it. The scorer ([`crate::score`]) says what each
//! must be named as.

use serde::{Deserialize, Serialize};

use crate::fabric::Dev;
use crate::shape::{Draw, Shape};

/// A ToR: the one of `rail` in `rack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TorId {
    /// The rack.
    pub rack: usize,
    /// The rail.
    pub rail: usize,
}

impl TorId {
    /// Its name in the shape's pod: `rack1-rail0`.
    pub fn name(self) -> String {
        format!("rack{}-rail{}", self.rack, self.rail)
    }

    /// Its index in `scripts/emupod.sh` (`t<index>`): rack × rails + rail.
    pub fn emupod(self, shape: &Shape) -> usize {
        self.rack * shape.rails + self.rail
    }

    /// The ToR of device `d`.
    pub fn of(shape: &Shape, d: Dev) -> TorId {
        TorId { rack: d.host / shape.hosts_per_tor, rail: d.rail }
    }
}

/// Where a fault is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Place {
    /// A device's cable to its ToR (the host–ToR link of its rail).
    Cable(Dev),
    /// A ToR's link to a spine.
    SpineLink {
        /// The ToR.
        tor: TorId,
        /// The spine's index.
        spine: usize,
    },
    /// A spine.
    Spine(usize),
    /// A ToR.
    Tor(TorId),
    /// A host (its index).
    Host(usize),
}

impl Place {
    /// Its `scripts/emupod.sh link` name, for a link: `h3r0`, `t2s1`.
    pub fn emupod_link(&self, shape: &Shape) -> Option<String> {
        match self {
            Place::Cable(d) => Some(format!("h{}r{}", d.host, d.rail)),
            Place::SpineLink { tor, spine } => Some(format!("t{}s{spine}", tor.emupod(shape))),
            _ => None,
        }
    }
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Random loss on a cable (a host's or a ToR's to a spine), one direction or both:
    /// strength, percent of packets (0.5–5).
    Loss,
    /// A cable at part of its rate: strength, the share left (0.25–0.75).
    Slow,
    /// A smaller MTU on a link's fabric end: strength, bytes (from 1500, or half the largest
    /// frame where that is less, to one byte under the largest RoCE frame).
    Mtu,
    /// A link down.
    Down,
    /// A link that goes down and up: strength, seconds between changes (1–5).
    Flap,
    /// A spine dropping some flows only (by their hash): strength, the share of flows (0.25–0.75).
    PartialBlackhole,
    /// A spine forwarding nothing (its links stay up: the ToRs keep hashing onto it).
    SpineDown,
    /// A ToR dropping at every port: strength, percent of packets (0.5–5).
    TorLoss,
    /// Bit errors on a cable: strength, percent of packets with a flipped bit (0.5–3).
    Corrupt,
    /// A host killed.
    HostKilled,
    /// A host frozen (every process stopped at once).
    HostFrozen,
    /// A host starved of CPU: strength, percent of one core left (2–10).
    HostStarved,
}

impl Kind {
    /// Every kind, in order.
    pub const ALL: [Kind; 12] = [
        Kind::Loss,
        Kind::Slow,
        Kind::Mtu,
        Kind::Down,
        Kind::Flap,
        Kind::PartialBlackhole,
        Kind::SpineDown,
        Kind::TorLoss,
        Kind::Corrupt,
        Kind::HostKilled,
        Kind::HostFrozen,
        Kind::HostStarved,
    ];

    /// Its name in tables: `loss`, `partial-blackhole`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Loss => "loss",
            Kind::Slow => "slow",
            Kind::Mtu => "mtu",
            Kind::Down => "down",
            Kind::Flap => "flap",
            Kind::PartialBlackhole => "partial-blackhole",
            Kind::SpineDown => "spine-down",
            Kind::TorLoss => "tor-loss",
            Kind::Corrupt => "corrupt",
            Kind::HostKilled => "host-killed",
            Kind::HostFrozen => "host-frozen",
            Kind::HostStarved => "host-starved",
        }
    }
}

/// Which way a link fault acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Both ways.
    Both,
    /// Into the fabric's router end only (from the host, or from the ToR to the spine).
    In,
    /// Out of the router end only (to the host, or from the spine to the ToR).
    Out,
}

/// One fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// What.
    pub kind: Kind,
    /// Where.
    pub at: Place,
    /// How strong (its unit is the kind's; 0 where a kind has none).
    pub strength: f64,
    /// Which way, for a link fault.
    pub direction: Direction,
    /// Seconds into the run it starts (0: before).
    pub start_s: f64,
}

/// The ranges strengths are drawn from.
pub mod ranges {
    /// Loss, percent.
    pub const LOSS_PCT: (f64, f64) = (0.5, 5.0);
    /// The share of a slow cable's rate left.
    pub const SLOW_SHARE: (f64, f64) = (0.25, 0.75);
    /// Seconds between a flapping link's changes.
    pub const FLAP_S: (f64, f64) = (1.0, 5.0);
    /// The share of flows a partial black hole drops.
    pub const BLACKHOLE_SHARE: (f64, f64) = (0.25, 0.75);
    /// Corrupted packets, percent.
    pub const CORRUPT_PCT: (f64, f64) = (0.5, 3.0);
    /// CPU left to a starved host, percent of one core.
    pub const STARVED_PCT: (f64, f64) = (2.0, 10.0);
    /// A fault that starts mid-run starts this many seconds in (a small pod's qualify run
    /// takes 15-30 s).
    pub const START_S: (f64, f64) = (3.0, 10.0);
}

impl Draw {
    /// A number in `lo..hi`, to one part in a million.
    fn real(&mut self, (lo, hi): (f64, f64)) -> f64 {
        lo + (hi - lo) * (self.next() % 1_000_000) as f64 / 1e6
    }
}

impl Fault {
    /// The fault of `kind` that `seed` draws on `shape`: a place the kind can be at, a
    /// strength from its range, a direction for a link fault. It starts before the run.
    pub fn draw(seed: u64, shape: &Shape, kind: Kind) -> Fault {
        let mut d = Draw(seed ^ 0xFA17_FA17_FA17_FA17);
        let host = d.between((0, shape.hosts() - 1));
        let dev = Dev { host, rail: d.between((0, shape.rails - 1)) };
        let tor =
            TorId { rack: d.between((0, shape.racks - 1)), rail: d.between((0, shape.rails - 1)) };
        let spine = d.between((0, shape.spines - 1));
        let spine_link = Place::SpineLink { tor, spine };
        // A link fault: a host's cable or a ToR's link to a spine, half each.
        let link = if d.next().is_multiple_of(2) { Place::Cable(dev) } else { spine_link.clone() };
        let direction = [Direction::Both, Direction::In, Direction::Out][(d.next() % 3) as usize];
        let (at, strength, direction) = match kind {
            Kind::Loss => (link, round2(d.real(ranges::LOSS_PCT)), direction),
            Kind::Slow => (link, round2(d.real(ranges::SLOW_SHARE)), Direction::Both),
            Kind::Mtu => {
                let frame = shape.largest_frame();
                let lo = 1500.min(frame / 2);
                (link, d.between((lo as usize, frame as usize - 1)) as f64, Direction::Both)
            }
            Kind::Down => (link, 0.0, Direction::Both),
            Kind::Flap => (link, round2(d.real(ranges::FLAP_S)), Direction::Both),
            Kind::PartialBlackhole => {
                (Place::Spine(spine), round2(d.real(ranges::BLACKHOLE_SHARE)), Direction::Both)
            }
            Kind::SpineDown => (Place::Spine(spine), 0.0, Direction::Both),
            Kind::TorLoss => (Place::Tor(tor), round2(d.real(ranges::LOSS_PCT)), Direction::Both),
            Kind::Corrupt => {
                (Place::Cable(dev), round2(d.real(ranges::CORRUPT_PCT)), Direction::Both)
            }
            Kind::HostKilled | Kind::HostFrozen => (Place::Host(host), 0.0, Direction::Both),
            Kind::HostStarved => {
                (Place::Host(host), d.real(ranges::STARVED_PCT).round(), Direction::Both)
            }
        };
        Fault { kind, at, strength, direction, start_s: 0.0 }
    }

    /// The same, starting `start_s` seconds into the run.
    pub fn starting(self, start_s: f64) -> Fault {
        Fault { start_s, ..self }
    }

    /// `scripts/emupod.sh` commands (after `emupod.sh`, the pod's name given as `NAME`)
    /// that make it.
    pub fn inject(&self, shape: &Shape) -> Vec<Vec<String>> {
        self.commands(shape, false)
    }

    /// … and that heal it (none for a killed host: it stays dead).
    pub fn heal(&self, shape: &Shape) -> Vec<Vec<String>> {
        self.commands(shape, true)
    }

    fn commands(&self, shape: &Shape, heal: bool) -> Vec<Vec<String>> {
        let v = |xs: &[&str]| -> Vec<String> { xs.iter().map(|x| x.to_string()).collect() };
        let dir = match self.direction {
            Direction::Both => "both",
            Direction::In => "in",
            Direction::Out => "out",
        };
        let link = self.at.emupod_link(shape).unwrap_or_default();
        let strength = format!("{}", self.strength);
        let rate = |mbit: u32| format!("{}kbit", (f64::from(mbit) * 1000.0 * self.strength) as u64);
        let link_mbit = match self.at {
            Place::SpineLink { .. } => shape.spine_link_mbit(),
            _ => shape.host_mbit,
        };
        match (self.kind, &self.at) {
            (Kind::Loss, _) if heal => vec![v(&["link", "NAME", &link, "loss", "0"])],
            (Kind::Loss, _) => vec![v(&["link", "NAME", &link, "loss", &strength, dir])],
            (Kind::Slow, _) if heal => {
                vec![v(&["link", "NAME", &link, "rate", &format!("{link_mbit}mbit")])]
            }
            (Kind::Slow, _) => vec![v(&["link", "NAME", &link, "rate", &rate(link_mbit)])],
            (Kind::Mtu, Place::Cable(_)) if heal => {
                vec![v(&["link", "NAME", &link, "mtu", &shape.mtu.to_string(), "fabric"])]
            }
            (Kind::Mtu, _) if heal => {
                let m = shape.mtu.max(4200).to_string();
                vec![v(&["link", "NAME", &link, "mtu", &m, "fabric"])]
            }
            // At the fabric's end only: a switch port set lower, which the host (or the far
            // router) does not know of — its large frames vanish there.
            (Kind::Mtu, _) => vec![v(&["link", "NAME", &link, "mtu", &strength, "fabric"])],
            (Kind::Down | Kind::Flap, _) if heal => vec![v(&["link", "NAME", &link, "up"])],
            (Kind::Down, _) => vec![v(&["link", "NAME", &link, "down"])],
            (Kind::Flap, _) => vec![v(&["link", "NAME", &link, "flap", &strength])],
            (Kind::PartialBlackhole, Place::Spine(j)) if heal => {
                vec![v(&["spine", "NAME", &j.to_string(), "up"])]
            }
            (Kind::PartialBlackhole, Place::Spine(j)) => {
                let pct = format!("{}", (self.strength * 100.0).round());
                vec![v(&["spine", "NAME", &j.to_string(), "partial", &pct])]
            }
            (Kind::SpineDown, Place::Spine(j)) => {
                vec![v(&["spine", "NAME", &j.to_string(), if heal { "up" } else { "down" }])]
            }
            (Kind::TorLoss, Place::Tor(t)) => {
                let pct = if heal { "0".to_string() } else { strength };
                vec![v(&["tor", "NAME", &t.emupod(shape).to_string(), "loss", &pct])]
            }
            (Kind::Corrupt, _) => {
                let pct = if heal { "0".to_string() } else { strength };
                vec![v(&["link", "NAME", &link, "corrupt", &pct])]
            }
            (Kind::HostKilled, Place::Host(h)) if !heal => {
                vec![v(&["host", "NAME", &h.to_string(), "kill"])]
            }
            (Kind::HostFrozen, Place::Host(h)) => {
                vec![v(&["host", "NAME", &h.to_string(), if heal { "thaw" } else { "freeze" }])]
            }
            (Kind::HostStarved, Place::Host(h)) => {
                let pct = if heal { "100".to_string() } else { format!("{}", self.strength) };
                vec![v(&["host", "NAME", &h.to_string(), "cpu", &pct])]
            }
            _ => vec![],
        }
    }

    /// In words: `2.3 % loss on r1h0.r0's cable (in)`.
    pub fn describe(&self, shape: &Shape) -> String {
        let pod = shape.pod();
        let place = match &self.at {
            Place::Cable(d) => format!("{}'s cable", pod.name(*d)),
            Place::SpineLink { tor, spine } => format!("{}'s link to spine {spine}", tor.name()),
            Place::Spine(j) => format!("spine {j}"),
            Place::Tor(t) => t.name(),
            Place::Host(h) => pod.hosts[*h].name.clone(),
        };
        let dir = match self.direction {
            Direction::Both => "",
            Direction::In => " (into the fabric)",
            Direction::Out => " (out of the fabric)",
        };
        let what = match self.kind {
            Kind::Loss => format!("{} % loss on {place}{dir}", self.strength),
            Kind::Slow => format!("{place} at {:.0} % of its rate", self.strength * 100.0),
            Kind::Mtu => format!("MTU {} on {place}", self.strength),
            Kind::Down => format!("{place} down"),
            Kind::Flap => format!("{place} flapping every {} s", self.strength),
            Kind::PartialBlackhole => {
                format!("{place} dropping {:.0} % of flows", self.strength * 100.0)
            }
            Kind::SpineDown => format!("{place} forwarding nothing"),
            Kind::TorLoss => format!("{place} dropping {} % at every port", self.strength),
            Kind::Corrupt => format!("{} % of packets corrupted on {place}", self.strength),
            Kind::HostKilled => format!("{place} killed"),
            Kind::HostFrozen => format!("{place} frozen"),
            Kind::HostStarved => format!("{place} starved to {} % of a core", self.strength),
        };
        if self.start_s > 0.0 { format!("{what}, from {:.0} s in", self.start_s) } else { what }
    }
}

/// Two decimals.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A campaign's draw: a shape and what goes wrong in it (nothing, for a clean run; two
/// faults at once, now and then).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The faults (none: a clean pod).
    pub faults: Vec<Fault>,
}

impl Scenario {
    /// The scenario `seed` draws for a fault of `kind` on `shape`: one in eight draws adds a
    /// second fault of another kind elsewhere, one in five starts its fault mid-run.
    pub fn draw(seed: u64, shape: &Shape, kind: Kind) -> Scenario {
        let mut d = Draw(seed ^ 0x5CE7_A210);
        let mut first = Fault::draw(seed, shape, kind);
        if d.next().is_multiple_of(5) {
            first = first.starting(d.real(ranges::START_S).round());
        }
        let mut faults = vec![first];
        if d.next().is_multiple_of(8) {
            // A second fault: a kind that kills nothing (a dead host hides the rest).
            let others: Vec<Kind> = Kind::ALL
                .into_iter()
                .filter(|k| *k != kind && !matches!(k, Kind::HostKilled | Kind::HostFrozen))
                .collect();
            let k = others[(d.next() % others.len() as u64) as usize];
            let second = Fault::draw(d.next(), shape, k);
            if second.at != faults[0].at {
                faults.push(second);
            }
        }
        Scenario { seed, faults }
    }
}
