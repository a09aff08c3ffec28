//! Device names and progress modes.

use std::net::IpAddr;

use crate::Error;

/// The UDP port of RoCEv2.
pub const ROCE_PORT: u16 = 4791;

/// A device name, as `-d` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceName {
    /// `soft:<IP>[:<udp-port>]` (IPv6 in brackets when a port follows: `soft:[fd00::1]:4791`).
    Soft {
        /// The device's address.
        ip: IpAddr,
        /// Its UDP port (4791 unless given).
        port: u16,
    },
    /// `soft` alone: the first free loopback address from 127.0.0.1 (see
    /// [`crate::soft::SoftDevice::open_default_loopback`]).
    SoftDefault,
}

impl DeviceName {
    /// Parses a device name.
    pub fn parse(name: &str) -> Result<DeviceName, Error> {
        let bad = |why| Error::BadDeviceName { name: name.to_string(), why };
        let Some(rest) = name.strip_prefix("soft") else {
            return Err(bad("expected soft:<IP>[:<udp-port>] (other providers are not built in)"));
        };
        if rest.is_empty() {
            return Ok(DeviceName::SoftDefault);
        }
        let Some(addr) = rest.strip_prefix(':') else {
            return Err(bad("expected soft:<IP>[:<udp-port>]"));
        };
        if let Ok(ip) = addr.parse::<IpAddr>() {
            return Ok(DeviceName::Soft { ip, port: ROCE_PORT });
        }
        let (host, port) = if let Some(v6) = addr.strip_prefix('[') {
            let (h, p) = v6.split_once(']').ok_or(bad("unclosed '[' in an IPv6 address"))?;
            (h, p.strip_prefix(':').unwrap_or(p))
        } else {
            addr.rsplit_once(':').ok_or(bad("not an IP address"))?
        };
        let ip = host.parse::<IpAddr>().map_err(|_| bad("not an IP address"))?;
        let port = if port.is_empty() {
            ROCE_PORT
        } else {
            port.parse::<u16>().ok().filter(|p| *p != 0).ok_or(bad("bad UDP port"))?
        };
        Ok(DeviceName::Soft { ip, port })
    }
}

/// How a context makes progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// Completion polling drives the device's I/O in the polling thread: lowest latency, one
    /// core busy while polling. A helper thread serves the device while nobody polls.
    Busy,
    /// A progress thread sleeps in `poll(2)` until a packet or a timer is due and wakes
    /// completion channels: idle costs no CPU.
    #[default]
    Event,
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
        for bad in ["mlx5_0", "soft:", "soft:1.2.3", "soft:1.2.3.4:0", "soft:[::1", "soft:x:1"] {
            assert!(DeviceName::parse(bad).is_err(), "{bad}");
        }
    }
}
