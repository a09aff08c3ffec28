//! This host's IP addresses and network interfaces.

use std::net::IpAddr;
use std::path::Path;

use crate::read;

/// The MTU of the netdev `netdev` under `sys` (`class/net/<netdev>/mtu`).
pub fn netdev_mtu(sys: &Path, netdev: &str) -> Option<u32> {
    read(&sys.join("class/net").join(netdev).join("mtu"))?.parse().ok()
}

/// A local IP address: the interface it is on, whether that is up, and its MTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalAddr {
    /// The address.
    pub ip: IpAddr,
    /// The interface.
    pub netdev: String,
    /// Whether the interface is up and running.
    pub up: bool,
    /// The interface's MTU, from `sys` (`class/net/<netdev>/mtu`).
    pub mtu: Option<u32>,
}

/// This host's IP addresses (`getifaddrs`), IPv6 link-local ones left out (a soft device
/// needs a routable address), MTUs from `sys`.
pub fn local_addrs(sys: &Path) -> std::io::Result<Vec<LocalAddr>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `head`; the result is checked.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed; its name is
        // a NUL-terminated string and its address, when non-null, a sockaddr of the family
        // its `sa_family` says, for the length of that family's struct.
        let (name, ip, flags, next) = unsafe {
            let ifa = &*cur;
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned();
            let ip = if ifa.ifa_addr.is_null() {
                None
            } else {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                        Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                    }
                    libc::AF_INET6 => {
                        let a = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                        Some(IpAddr::from(a.sin6_addr.s6_addr))
                    }
                    _ => None,
                }
            };
            (name, ip, ifa.ifa_flags, ifa.ifa_next)
        };
        if let Some(ip) = ip {
            let link_local = matches!(ip, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
            if !link_local {
                let up =
                    flags & (libc::IFF_UP as u32) != 0 && flags & (libc::IFF_RUNNING as u32) != 0;
                // The kernel's answer for this network namespace (sysfs shows the one it
                // was mounted in); sysfs when asking fails.
                let mtu = if_mtu(&name).or_else(|| netdev_mtu(sys, &name));
                out.push(LocalAddr { ip, netdev: name, up, mtu });
            }
        }
        cur = next;
    }
    // SAFETY: frees the list getifaddrs allocated, once, after the last use of its nodes.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// An interface's MTU (`SIOCGIFMTU`).
fn if_mtu(name: &str) -> Option<u32> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).ok()?;
    // SAFETY: all-zero is a valid `ifreq`.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= req.ifr_name.len() {
        return None;
    }
    for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    use std::os::fd::AsRawFd;
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name from `req` and writes the MTU into its
    // union; `req` outlives the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU, &mut req) };
    if rc != 0 {
        return None;
    }
    // SAFETY: after a successful SIOCGIFMTU the union holds `ifru_mtu`.
    Some(unsafe { req.ifr_ifru.ifru_mtu } as u32)
}
