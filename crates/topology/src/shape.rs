//! Fabrics drawn from a seed (issue 44): the shape of a leaf-spine pod — racks, hosts per ToR,
//! rails, spines, how much uplink a ToR has against its hosts, the link rate, the hosts' MTU
//! and the fabric's ECMP hash seed — drawn from ranges by a seed, so that a campaign judges
//! qualify and the agent on fabrics built more than one way, and any draw can be built again
//! from its seed. The emulator builds what [`Shape`] describes; qualify and the agent read the
//! [`Pod`] it gives.

use serde::Serialize;

use crate::fabric::{Host, Pod, PodProgress, Rail};
use crate::pairs::PairSet;

/// A ToR's uplink capacity (over all its spine links) against its hosts' (its ports down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Uplink {
    /// Non-blocking, as production leaf-spine pods are built: uplinks equal the hosts'.
    #[serde(rename = "1:1")]
    OneToOne,
    /// Oversubscribed 2:1.
    #[serde(rename = "2:1")]
    TwoToOne,
    /// Oversubscribed 3:1.
    #[serde(rename = "3:1")]
    ThreeToOne,
    /// `scripts/emupod.sh`'s: each spine link as fast as all of the ToR's hosts together
    /// (uplinks at `spines` times the hosts').
    EachLinkAll,
}

impl Uplink {
    /// Every kind, in order.
    pub const ALL: [Uplink; 4] =
        [Uplink::OneToOne, Uplink::TwoToOne, Uplink::ThreeToOne, Uplink::EachLinkAll];

    /// Its name: `1:1`, `2:1`, `3:1`, `each-link-all`.
    pub fn as_str(self) -> &'static str {
        match self {
            Uplink::OneToOne => "1:1",
            Uplink::TwoToOne => "2:1",
            Uplink::ThreeToOne => "3:1",
            Uplink::EachLinkAll => "each-link-all",
        }
    }

    /// One ToR–spine link's rate, Mbit/s, for `hosts_per_tor` hosts at `host_mbit` each over
    /// `spines` spines (at least 1).
    pub fn spine_link_mbit(self, hosts_per_tor: usize, host_mbit: u32, spines: usize) -> u32 {
        let down = hosts_per_tor as u64 * u64::from(host_mbit);
        let spines = spines.max(1) as u64;
        let per = match self {
            Uplink::OneToOne => down / spines,
            Uplink::TwoToOne => down / (2 * spines),
            Uplink::ThreeToOne => down / (3 * spines),
            Uplink::EachLinkAll => down,
        };
        u32::try_from(per.max(1)).unwrap_or(u32::MAX)
    }
}

/// A pod's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// The seed it was drawn from.
    pub seed: u64,
    /// Racks (a ToR per rack and rail).
    pub racks: usize,
    /// Hosts under each ToR.
    pub hosts_per_tor: usize,
    /// Rails per host (a device each, a plane per rail).
    pub rails: usize,
    /// Spines every ToR links to.
    pub spines: usize,
    /// The ToRs' uplink against their hosts.
    pub uplink: Uplink,
    /// A host link's rate, Mbit/s.
    pub host_mbit: u32,
    /// The hosts' MTU, bytes.
    pub mtu: u32,
    /// The fabric's ECMP hash seed (what the emulator's routers hash with).
    pub ecmp_seed: u64,
}

/// The ranges a shape is drawn from.
pub mod ranges {
    /// Racks.
    pub const RACKS: (usize, usize) = (2, 4);
    /// Hosts per ToR.
    pub const HOSTS_PER_TOR: (usize, usize) = (2, 4);
    /// Rails.
    pub const RAILS: (usize, usize) = (1, 2);
    /// Spines.
    pub const SPINES: (usize, usize) = (2, 4);
    /// Host link rates, Mbit/s.
    pub const HOST_MBIT: [u32; 4] = [100, 200, 500, 1000];
    /// Host MTUs: Ethernet's, and jumbo frames that carry a 4096-byte RoCE MTU.
    pub const MTU: [u32; 2] = [1500, 9000];
}

/// A RoCEv2 packet's bytes besides its payload, IPv4 header on: IP 20, UDP 8, BTH 12, RETH
/// 16 (a WRITE's first packet), ICRC 4.
pub const ROCE_OVERHEAD: u32 = 20 + 8 + 12 + 16 + 4;

/// Senders of an incast round in a plan for an emulated shape.
pub const INCAST_SENDERS: usize = 3;

/// Operations in flight per QP of a plan for an emulated shape (measured on
/// testdata/qualify/emupod.toml's 100 Mbit/s links: 8 × 64 KiB keep one busy).
pub const TX_DEPTH: usize = 8;

/// SplitMix64: a fixed, well-spread sequence from a seed.
pub(crate) struct Draw(pub(crate) u64);

impl Draw {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub(crate) fn between(&mut self, (lo, hi): (usize, usize)) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[(self.next() % of.len() as u64) as usize]
    }
}

impl Shape {
    /// The shape `seed` draws: the same seed, the same shape.
    pub fn draw(seed: u64) -> Shape {
        let mut d = Draw(seed);
        Shape {
            seed,
            racks: d.between(ranges::RACKS),
            hosts_per_tor: d.between(ranges::HOSTS_PER_TOR),
            rails: d.between(ranges::RAILS),
            spines: d.between(ranges::SPINES),
            uplink: d.pick(&Uplink::ALL),
            host_mbit: d.pick(&ranges::HOST_MBIT),
            mtu: d.pick(&ranges::MTU),
            ecmp_seed: d.next(),
        }
    }

    /// The shape `seed` draws with its uplink set to `uplink` (a campaign stratified by
    /// uplink class draws the rest).
    pub fn draw_with(seed: u64, uplink: Uplink) -> Shape {
        Shape { uplink, ..Shape::draw(seed) }
    }

    /// Hosts in all.
    pub fn hosts(&self) -> usize {
        self.racks * self.hosts_per_tor
    }

    /// One ToR–spine link's rate, Mbit/s.
    pub fn spine_link_mbit(&self) -> u32 {
        self.uplink.spine_link_mbit(self.hosts_per_tor, self.host_mbit, self.spines)
    }

    /// The slowest link a flow may cross, Mbit/s: a host's, or a spine link's.
    pub fn slowest_mbit(&self) -> u32 {
        self.host_mbit.min(self.spine_link_mbit())
    }

    /// The RoCE path MTU a soft device takes on the hosts' MTU (the largest of 256 … 4096
    /// whose frame fits).
    pub fn roce_mtu(&self) -> u32 {
        [4096, 2048, 1024, 512, 256]
            .into_iter()
            .find(|m| m + ROCE_OVERHEAD <= self.mtu)
            .unwrap_or(256)
    }

    /// The largest RoCE frame on the wire, IP header on: a full packet of the path MTU.
    pub fn largest_frame(&self) -> u32 {
        self.roce_mtu() + ROCE_OVERHEAD
    }

    /// The RC ACK timeout code for this fabric (4.096 µs × 2^n): twice the longest a
    /// packet may queue — [`INCAST_SENDERS`] senders' [`TX_DEPTH`] × 64 KiB in flight
    /// behind one another on the slowest link (an emulated fabric queues rather than pause
    /// the sender as PFC would, and a timeout shorter than the queue sends it all again).
    pub fn qp_timeout(&self) -> u8 {
        let queued = (INCAST_SENDERS * TX_DEPTH) as f64 * 65536.0 * 8.0;
        let seconds = 2.0 * queued / (f64::from(self.slowest_mbit()) * 1e6);
        (10u8..=24).find(|n| 4.096e-6 * f64::from(1u32 << n) >= seconds).unwrap_or(24)
    }

    /// `scripts/emupod.sh up NAME` and these: hosts, rails, hosts per ToR, spines, the host
    /// and spine link rates, the hosts' MTU and the ECMP hash seed.
    pub fn emupod_args(&self) -> Vec<String> {
        vec![
            self.hosts().to_string(),
            self.rails.to_string(),
            self.hosts_per_tor.to_string(),
            self.spines.to_string(),
            format!("{}mbit", self.host_mbit),
            format!("{}mbit", self.spine_link_mbit()),
            self.mtu.to_string(),
            // The kernel's multipath hash seed is 32 bits.
            (self.ecmp_seed as u32).to_string(),
        ]
    }

    /// The pod qualify and the agent read: host `r<rack>h<i>` has rail k on
    /// `soft:10.<k+1>.<host>.1` under ToR `rack<rack>-rail<k>` (the addresses the emulator
    /// gives), the spines named, the link rate the hosts'.
    pub fn pod(&self) -> Pod {
        let hosts = (0..self.hosts())
            .map(|h| {
                let rack = h / self.hosts_per_tor;
                Host {
                    name: format!("r{rack}h{}", h % self.hosts_per_tor),
                    rails: (0..self.rails)
                        .map(|k| Rail {
                            device: format!("soft:10.{}.{h}.1", k + 1),
                            tor: format!("rack{rack}-rail{k}"),
                        })
                        .collect(),
                }
            })
            .collect();
        Pod {
            pairs: PairSet::RailAligned,
            peers_per_tor: 2,
            seed: self.seed,
            link_gbps: Some(f64::from(self.host_mbit) / 1000.0),
            source_ports: 4,
            spines: Some(self.spines),
            // Below a host link's rate only on an oversubscribed fabric.
            route: None,
            spine_link_gbps: (self.spine_link_mbit() < self.host_mbit)
                .then(|| f64::from(self.spine_link_mbit()) / 1000.0),
            // As testdata/qualify/emupod.toml sets them for 100 Mbit/s links (measured there:
            // 8 messages in flight; an ACK timeout of 268 ms), the timeout scaled to the
            // slowest link (`qp_timeout`).
            progress: PodProgress::Event,
            stall_seconds: 2.0,
            qp_timeout: self.qp_timeout(),
            tx_depth: Some(TX_DEPTH),
            bisection: None,
            incast: None,
            hosts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_one_shape_within_the_ranges_and_seeds_draw_every_kind() {
        assert_eq!(Shape::draw(7), Shape::draw(7), "the same seed, the same shape");
        let shapes: Vec<Shape> = (0..400).map(Shape::draw).collect();
        for s in &shapes {
            assert!((2..=4).contains(&s.racks) && (2..=4).contains(&s.hosts_per_tor), "{s:?}");
            assert!((1..=2).contains(&s.rails) && (2..=4).contains(&s.spines), "{s:?}");
            assert!(ranges::HOST_MBIT.contains(&s.host_mbit) && ranges::MTU.contains(&s.mtu));
            let pod = s.pod();
            assert_eq!(pod.validate(), Ok(()), "{s:?}");
            assert_eq!(pod.hosts.len(), s.hosts());
            assert_eq!(pod.tors().len(), s.racks * s.rails);
        }
        // Every value of every range is drawn somewhere in 400 seeds.
        for u in Uplink::ALL {
            assert!(shapes.iter().any(|s| s.uplink == u), "{u:?} never drawn");
        }
        for (lo, hi, f) in [
            (2, 4, (|s: &Shape| s.racks) as fn(&Shape) -> usize),
            (2, 4, |s: &Shape| s.hosts_per_tor),
            (1, 2, |s: &Shape| s.rails),
            (2, 4, |s: &Shape| s.spines),
        ] {
            for v in lo..=hi {
                assert!(shapes.iter().any(|s| f(s) == v), "{v} never drawn");
            }
        }
        assert_ne!(Shape::draw(1).ecmp_seed, Shape::draw(2).ecmp_seed);
    }

    #[test]
    fn the_ack_timeout_covers_an_incasts_queue_on_the_slowest_link() {
        let mut s = Shape::draw_with(3, Uplink::EachLinkAll);
        s.host_mbit = 100;
        // testdata/qualify/emupod.toml's, measured on 100 Mbit/s links: 268 ms.
        assert_eq!(s.qp_timeout(), 16);
        s.host_mbit = 1000;
        assert_eq!(s.qp_timeout(), 13, "10 x faster, 8 x shorter");
        // 3:1 under 2 hosts and 2 spines: 33 Mbit/s spine links, 3 x 8 x 64 KiB queue there
        // for 0.38 s.
        let s = Shape {
            racks: 2,
            rails: 1,
            host_mbit: 100,
            hosts_per_tor: 2,
            spines: 2,
            uplink: Uplink::ThreeToOne,
            ..s
        };
        assert_eq!(s.spine_link_mbit(), 33);
        assert_eq!(s.qp_timeout(), 18);
        assert_eq!(s.pod().spine_link_gbps, Some(0.033));
        assert_eq!(Shape { mtu: 1500, ..s.clone() }.roce_mtu(), 1024);
        assert_eq!(Shape { mtu: 9000, ..s.clone() }.largest_frame(), 4096 + 60);
        let args = s.emupod_args();
        assert_eq!(args[..6], ["4", "1", "2", "2", "100mbit", "33mbit"].map(String::from));
    }

    #[test]
    fn the_uplink_classes_set_the_spine_links_rate() {
        // 4 hosts at 200 Mbit/s under a ToR, 2 spines: 800 Mbit/s down.
        let link = |u: Uplink| u.spine_link_mbit(4, 200, 2);
        assert_eq!(link(Uplink::OneToOne), 400, "2 x 400 = the hosts' 800");
        assert_eq!(link(Uplink::TwoToOne), 200);
        assert_eq!(link(Uplink::ThreeToOne), 133);
        assert_eq!(link(Uplink::EachLinkAll), 800, "scripts/emupod.sh's: each link all of it");
        let s = Shape::draw_with(3, Uplink::OneToOne);
        let up = u64::from(s.spine_link_mbit()) * s.spines as u64;
        let down = u64::from(s.host_mbit) * s.hosts_per_tor as u64;
        assert!(up <= down && down - up < s.spines as u64, "1:1: {up} up, {down} down");
    }
}
