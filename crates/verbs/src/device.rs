//! Device names and progress modes.

use std::net::IpAddr;

use crate::Error;

/// The UDP port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;

/// A device's limits (`ibv_query_device`: the fields a tool sizes its queues and regions
/// against). A provider refuses to create beyond them, before it allocates anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// The largest memory region, bytes.
    pub max_mr_size: u64,
    /// Queue pairs at once.
    pub max_qp: u32,
    /// Work requests in one send or receive queue.
    pub max_qp_wr: u32,
    /// Scatter/gather elements in one work request.
    pub max_sge: u32,
    /// Completion queues at once.
    pub max_cq: u32,
    /// Entries in one completion queue.
    pub max_cqe: u32,
    /// Memory regions at once.
    pub max_mr: u32,
    /// Protection domains at once.
    pub max_pd: u32,
    /// Shared receive queues at once.
    pub max_srq: u32,
    /// Work requests in one shared receive queue.
    pub max_srq_wr: u32,
    /// The most inline data a send may carry, where the device says (verbs learns it per QP
    /// on rdma-core).
    pub max_inline_data: Option<u32>,
}

/// Which provider drives a device: what a tool asks instead of comparing names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// podnet's userspace RoCEv2 on UDP sockets.
    Soft,
    /// A kernel RDMA device (mlx5, rxe, bnxt_re, …) through libibverbs.
    RdmaCore,
}

impl ProviderKind {
    /// The provider's name in output: `soft`, `rdma-core`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Soft => "soft",
            ProviderKind::RdmaCore => "rdma-core",
        }
    }
}

/// A device name, as `-d` takes it: a soft device (podnet's userspace RoCEv2 on an IP
/// address) or an RDMA device the kernel has (`mlx5_0`, `rxe0`), opened through rdma-core.
/// Every tool decides what a name is by matching on this.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceName {
    /// `soft:<IP>[:<udp-port>]` (IPv6 in brackets when a port follows: `soft:[fd00::1]:4791`).
    Soft {
        /// The device's address.
        ip: IpAddr,
        /// Its UDP port (4791 unless given).
        port: u16,
    },
    /// `soft` alone: the first free loopback address from 127.0.0.1 (see
    /// the soft provider's `SoftDevice::open_default_loopback`).
    SoftDefault,
    /// Any other name: an RDMA device as libibverbs and `/sys/class/infiniband` name it.
    Rdma(String),
}

impl DeviceName {
    /// Parses a device name: `soft`, `soft:<IP>[:<udp-port>]`, or an RDMA device's name (up
    /// to 63 bytes, as the kernel allows, without `/`, `:` or white space).
    pub fn parse(name: &str) -> Result<DeviceName, Error> {
        let bad = |why| Error::BadDeviceName { name: name.to_string(), why };
        if name == "soft" {
            return Ok(DeviceName::SoftDefault);
        }
        if name.is_empty() {
            return Err(bad("empty: give soft, soft:<IP> or an RDMA device (`podnet devices`)"));
        }
        if name.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("soft:"))
            && !name.starts_with("soft:")
        {
            return Err(bad("names are case-sensitive: soft:<IP>"));
        }
        let Some(addr) = name.strip_prefix("soft:") else {
            if name.len() > 63 {
                return Err(bad("an RDMA device name has 1 to 63 bytes"));
            }
            if name.contains(['/', ':']) || name.contains(char::is_whitespace) {
                return Err(bad(
                    "expected soft, soft:<IP>[:<udp-port>] or an RDMA device name (`podnet devices`)",
                ));
            }
            return Ok(DeviceName::Rdma(name.to_string()));
        };
        if addr.contains('%') {
            return Err(bad(
                "a scoped (link-local) address: a soft device cannot name an interface; give a \
                 global or unique-local address",
            ));
        }
        if let Ok(ip) = addr.parse::<IpAddr>() {
            return unicast(ip).map(|ip| DeviceName::Soft { ip, port: ROCE_PORT }).map_err(bad);
        }
        let (host, port) = if let Some(v6) = addr.strip_prefix('[') {
            let (h, p) = v6.split_once(']').ok_or(bad("unclosed '[' in an IPv6 address"))?;
            match p {
                "" => (h, None),
                _ => (h, Some(p.strip_prefix(':').ok_or(bad("after ']' only ':<udp-port>'"))?)),
            }
        } else {
            let (h, p) = addr.rsplit_once(':').ok_or(bad("not an IP address"))?;
            (h, Some(p))
        };
        let ip = host.parse::<IpAddr>().map_err(|_| bad("not an IP address"))?;
        let ip = unicast(ip).map_err(bad)?;
        let port = match port {
            None => ROCE_PORT,
            Some("") => return Err(bad("a ':' with no UDP port after it")),
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or(bad("bad UDP port"))?,
        };
        Ok(DeviceName::Soft { ip, port })
    }
}

/// A soft device is one unicast address: the address a peer sends to and the one it binds,
/// in its canonical form (an IPv4-mapped IPv6 address is the IPv4 address: `soft:::ffff:IP`
/// is `soft:IP`, the same device).
fn unicast(ip: IpAddr) -> Result<IpAddr, &'static str> {
    let ip = ip.to_canonical();
    if let IpAddr::V6(v6) = ip
        && v6.is_unicast_link_local()
    {
        return Err(
            "a link-local address needs a scope (an interface), which a soft device cannot name: \
             give a global or unique-local address",
        );
    }
    if ip.is_unspecified() {
        return Err(
            "the unspecified address is every interface's, not one device's: name the address to use",
        );
    }
    if ip.is_multicast() {
        return Err("a multicast address: a RoCE device needs a unicast address");
    }
    if ip == IpAddr::V4(std::net::Ipv4Addr::BROADCAST) {
        return Err("the broadcast address: a RoCE device needs a unicast address");
    }
    Ok(ip)
}

impl DeviceName {
    /// Whether the soft provider opens it.
    pub fn is_soft(&self) -> bool {
        self.provider_kind() == ProviderKind::Soft
    }

    /// The provider that opens it.
    pub fn provider_kind(&self) -> ProviderKind {
        match self {
            DeviceName::Rdma(_) => ProviderKind::RdmaCore,
            DeviceName::Soft { .. } | DeviceName::SoftDefault => ProviderKind::Soft,
        }
    }

    /// A soft device's address (`soft:10.0.0.1`, `soft:[fd00::1]:5000` → the IP); `None` for
    /// `soft` alone (its address is chosen when it opens) and for an RDMA device.
    pub fn soft_ip(&self) -> Option<IpAddr> {
        match self {
            DeviceName::Soft { ip, .. } => Some(*ip),
            DeviceName::SoftDefault | DeviceName::Rdma(_) => None,
        }
    }
}

impl std::fmt::Display for DeviceName {
    /// The name as `-d` takes it, canonical: `soft:127.0.0.1`, `soft:[fd00::1]:5000`, `mlx5_0`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceName::Soft { ip, port: ROCE_PORT } => write!(f, "soft:{ip}"),
            DeviceName::Soft { ip: IpAddr::V6(v6), port } => write!(f, "soft:[{v6}]:{port}"),
            DeviceName::Soft { ip, port } => write!(f, "soft:{ip}:{port}"),
            DeviceName::SoftDefault => f.write_str("soft"),
            DeviceName::Rdma(n) => f.write_str(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let s = |ip: &str, port| DeviceName::Soft { ip: ip.parse().unwrap(), port };
        assert_eq!(DeviceName::parse("soft:127.0.0.1").unwrap(), s("127.0.0.1", 4791));
        assert_eq!(DeviceName::parse("soft:127.0.0.1:5000").unwrap(), s("127.0.0.1", 5000));
        assert_eq!(DeviceName::parse("soft:fd00::1").unwrap(), s("fd00::1", 4791));
        assert_eq!(DeviceName::parse("soft:[fd00::1]:9").unwrap(), s("fd00::1", 9));
        assert_eq!(DeviceName::parse("soft:[::1]").unwrap(), s("::1", 4791));
        assert_eq!(DeviceName::parse("soft").unwrap(), DeviceName::SoftDefault);
        // Everything else is an RDMA device: an rxe device may well be called `softroce0`.
        for rdma in ["mlx5_0", "rxe0", "softroce0", "irdma-eth2"] {
            assert_eq!(DeviceName::parse(rdma).unwrap(), DeviceName::Rdma(rdma.into()));
            assert!(!DeviceName::parse(rdma).unwrap().is_soft());
        }
        let long = "m".repeat(64);
        for bad in [
            "soft:",
            "soft:1.2.3",
            "soft:1.2.3.4:0",
            "soft:[::1",
            "soft:x:1",
            "",
            "a b",
            "soft:1.2.3.4:",
            "soft:[fd00::1]:",
            "soft:[fd00::1]x",
        ] {
            assert!(DeviceName::parse(bad).is_err(), "{bad}");
        }
        // Each with the reason that fits it.
        for (bad, why) in [
            ("", "empty"),
            ("SOFT:127.0.0.1", "case-sensitive"),
            ("Soft:fd00::1", "case-sensitive"),
            ("soft:0.0.0.0", "unspecified"),
            ("soft:[::]:5000", "unspecified"),
            ("soft:224.0.0.1", "multicast"),
            ("soft:ff02::1", "multicast"),
            ("soft:255.255.255.255", "broadcast"),
            ("soft:fe80::1", "link-local"),
            ("soft:[fe80::1]:4791", "link-local"),
            ("soft:fe80::1%eth0", "scoped"),
            ("soft:1.2.3.4:", "no UDP port"),
        ] {
            let e = DeviceName::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        for bad in ["mlx5_0/1", "host:mlx5_0", long.as_str()] {
            assert!(DeviceName::parse(bad).is_err(), "{bad}");
        }
        // One device, however it is written: the default port, an IPv4-mapped address.
        let one = DeviceName::parse("soft:10.1.0.1").unwrap();
        for same in ["soft:10.1.0.1:4791", "soft:::ffff:10.1.0.1", "soft:[::ffff:10.1.0.1]:4791"] {
            assert_eq!(DeviceName::parse(same).unwrap(), one, "{same}");
        }
        // Display gives back a name that parses to the same device.
        for n in ["soft:127.0.0.1", "soft:[fd00::1]:9", "soft:10.0.0.1:5000", "soft", "mlx5_0"] {
            let d = DeviceName::parse(n).unwrap();
            assert_eq!(d.to_string(), n);
            assert_eq!(DeviceName::parse(&d.to_string()).unwrap(), d);
        }
    }
}
