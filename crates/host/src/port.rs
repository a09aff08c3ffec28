//! A port's vocabulary, one shape for every reader: the state, physical state, link layer and
//! GID table of an RDMA port as the IBTA and `ibv_port_attr` define them. sysfs
//! ([`crate::rdma`]), the verbs query (`verbs::PortAttr`, from a provider) and telemetry's
//! samples all hold these types; each prints them as `ibv_devinfo` and sysfs do.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// Declares a `#[repr(u8)]` enum of IBTA codes with their sysfs names, `from_id`, `id`,
/// `name`, `parse` (`4: ACTIVE`) and `Display` (the name).
macro_rules! coded {
    ($(#[$m:meta])* $ty:ident { $($(#[$vm:meta])* $v:ident = $id:literal, $name:literal;)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum $ty {
            $($(#[$vm])* $v = $id,)+
        }

        impl $ty {
            /// The variant of an IBTA code.
            pub fn from_id(id: u8) -> Option<Self> {
                match id {
                    $($id => Some(Self::$v),)+
                    _ => None,
                }
            }

            /// Its IBTA code.
            pub fn id(self) -> u8 {
                self as u8
            }

            /// Its name as sysfs prints it after the code.
            pub fn name(self) -> &'static str {
                match self {
                    $(Self::$v => $name,)+
                }
            }

            /// From a sysfs file's text, `<code>: <name>` (the code decides); `None` for
            /// anything else.
            pub fn parse(text: &str) -> Option<Self> {
                let (id, _) = text.trim().split_once(':')?;
                Self::from_id(id.trim().parse().ok()?)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

coded! {
    /// A port's logical state (`ibv_port_state`; sysfs `ports/N/state`).
    PortState {
        /// IBV_PORT_NOP.
        Nop = 0, "NOP";
        /// IBV_PORT_DOWN.
        Down = 1, "DOWN";
        /// IBV_PORT_INIT.
        Init = 2, "INIT";
        /// IBV_PORT_ARMED.
        Armed = 3, "ARMED";
        /// IBV_PORT_ACTIVE: the port carries traffic.
        Active = 4, "ACTIVE";
        /// IBV_PORT_ACTIVE_DEFER.
        ActiveDefer = 5, "ACTIVE_DEFER";
    }
}

coded! {
    /// A port's physical state (IBTA PortPhysicalState; sysfs `ports/N/phys_state`).
    PhysState {
        /// Sleep.
        Sleep = 1, "Sleep";
        /// Polling: no link partner yet.
        Polling = 2, "Polling";
        /// Disabled.
        Disabled = 3, "Disabled";
        /// Link training.
        PortConfigurationTraining = 4, "PortConfigurationTraining";
        /// LinkUp: the physical link works.
        LinkUp = 5, "LinkUp";
        /// LinkErrorRecovery.
        LinkErrorRecovery = 6, "LinkErrorRecovery";
        /// PhyTest.
        PhyTest = 7, "PhyTest";
    }
}

/// A port's link layer (`ibv_port_attr.link_layer`; sysfs `ports/N/link_layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinkLayer {
    /// RoCE.
    Ethernet,
    /// InfiniBand (what sysfs and verbs report when they say nothing).
    #[default]
    InfiniBand,
}

impl LinkLayer {
    /// From sysfs's text: `Ethernet`, anything else InfiniBand (as `ibv_devinfo` reads it).
    pub fn parse(text: &str) -> Self {
        if text.trim() == "Ethernet" { Self::Ethernet } else { Self::InfiniBand }
    }

    /// Its name as sysfs and `ibv_devinfo` print it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ethernet => "Ethernet",
            Self::InfiniBand => "InfiniBand",
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A GID's type (`ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// RoCE v1 (GRH over Ethernet).
    RoceV1,
    /// RoCE v2 (UDP/IP).
    RoceV2,
    /// InfiniBand.
    Ib,
}

impl GidType {
    /// From sysfs's `gid_attrs/types/N` on a port of `link`: `RoCE v2`, or `IB/RoCE v1`
    /// (which names an IB GID on InfiniBand and a RoCE v1 one on Ethernet).
    pub fn parse(text: &str, link: LinkLayer) -> Self {
        match (text.contains("v2"), link) {
            (true, _) => Self::RoceV2,
            (false, LinkLayer::Ethernet) => Self::RoceV1,
            (false, LinkLayer::InfiniBand) => Self::Ib,
        }
    }

    /// Its name as `show_gids` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::RoceV1 => "RoCE v1",
            Self::RoceV2 => "RoCE v2",
            Self::Ib => "IB",
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A 16-byte global identifier; RoCE v2 GIDs are IPv6 addresses, IPv4 ones mapped as
/// `::ffff:a.b.c.d`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 addresses are mapped).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address of a RoCE v2 GID (`None` for the zero GID).
    pub fn to_ip(self) -> Option<IpAddr> {
        let v6 = Ipv6Addr::from(self.0);
        if v6.is_unspecified() {
            return None;
        }
        Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        })
    }

    /// The GID as an IPv6 address (as sysfs prints it, compressed).
    pub fn to_ipv6(self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }

    /// Whether every byte is zero.
    pub fn is_zero(self) -> bool {
        self.0 == [0; 16]
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Gid {
    /// `fe80:0000:…` as `ibv_devinfo -v` prints GIDs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

/// One entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Its index (what `-g` selects).
    pub index: usize,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
    /// The netdev it belongs to (RoCE), where the reader knows it.
    pub netdev: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_from_sysfs_text_and_print_as_sysfs_does() {
        assert_eq!(PortState::parse("4: ACTIVE\n"), Some(PortState::Active));
        assert_eq!(PortState::parse("1: DOWN"), Some(PortState::Down));
        assert_eq!(PortState::parse("9: WHAT"), None);
        assert_eq!(PortState::parse("ACTIVE"), None);
        assert_eq!(PhysState::parse("5: LinkUp"), Some(PhysState::LinkUp));
        assert_eq!(PhysState::parse("3: Disabled"), Some(PhysState::Disabled));
        assert_eq!(PhysState::parse("0: ?"), None);
        assert_eq!(
            (PortState::ActiveDefer.id(), PortState::Armed.to_string()),
            (5, "ARMED".into())
        );
        assert_eq!(PhysState::PortConfigurationTraining.id(), 4);
        for id in 0..=5 {
            assert_eq!(PortState::from_id(id).map(PortState::id), Some(id));
        }
    }

    #[test]
    fn gid_types_follow_the_link_layer_for_the_v1_entry() {
        assert_eq!(GidType::parse("RoCE v2", LinkLayer::Ethernet), GidType::RoceV2);
        assert_eq!(GidType::parse("IB/RoCE v1", LinkLayer::Ethernet), GidType::RoceV1);
        assert_eq!(GidType::parse("IB/RoCE v1", LinkLayer::InfiniBand), GidType::Ib);
        assert_eq!(GidType::parse("", LinkLayer::InfiniBand), GidType::Ib);
        assert_eq!(LinkLayer::parse("Ethernet\n"), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::parse(""), LinkLayer::InfiniBand);
    }

    #[test]
    fn gids_map_ipv4_and_print_as_ibv_devinfo() {
        let g = Gid::from_ip("10.0.0.1".parse().unwrap());
        assert_eq!(g.to_ip(), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(g.to_ipv6().to_string(), "::ffff:10.0.0.1");
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:0a00:0001");
        assert!(Gid::default().is_zero() && Gid::default().to_ip().is_none());
    }
}
