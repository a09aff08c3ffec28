//! Recording RoCEv2 off a live interface: an `AF_PACKET` socket with a classic BPF filter
//! for UDP to the RoCEv2 port (so the kernel hands over nothing else), kernel receive
//! timestamps in nanoseconds, the direction of each frame, and the kernel's drop count. The
//! thin I/O driver behind `podnet capture record`; what it records goes to a
//! [`crate::write::RingWriter`].
//!
//! What an `AF_PACKET` socket cannot see is said, not recorded as nothing: a NIC that carries
//! RoCE in hardware (mlx5, bnxt_re, irdma, …) hands its RoCE packets to no socket
//! ([`offloaded_rdma_device`]); Soft-RoCE (rxe) and podnet's soft devices go through the
//! kernel's UDP stack and are seen.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use wire::frame::LinkType;

/// Why recording could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// No interface of that name.
    #[error("no interface {0}")]
    NoInterface(String),
    /// The interface's RoCE is in hardware: its packets never reach a socket.
    #[error(
        "{netdev} carries RoCE in hardware ({device}): its RoCE packets never reach the kernel's \
         network stack, so a capture of {netdev} would hold none; capture on a switch mirror \
         (ERSPAN, which `podnet capture analyze` reads) or on the peer if it is Soft-RoCE"
    )]
    Offloaded {
        /// The interface.
        netdev: String,
        /// Its RDMA device.
        device: String,
    },
    /// A link type this recorder does not frame.
    #[error("{netdev} has link type {arphrd}: only Ethernet and loopback interfaces are recorded")]
    LinkType {
        /// The interface.
        netdev: String,
        /// Its ARPHRD_* type.
        arphrd: u32,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

fn os(what: &'static str) -> LiveError {
    LiveError::Os { what, source: io::Error::last_os_error() }
}

/// The RDMA device that carries `netdev`'s RoCE in hardware, if any: a device under the
/// netdev's parent (`/sys/class/net/<netdev>/device/infiniband/<dev>`), as mlx5, bnxt_re and
/// irdma register theirs. Soft-RoCE (rxe, siw) sits on no parent and is not offloaded.
pub fn offloaded_rdma_device(sys: &Path, netdev: &str) -> Option<String> {
    let dir = sys.join("class/net").join(netdev).join("device/infiniband");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names.into_iter().next()
}

// Classic BPF opcodes (linux/bpf_common.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const LD_H_IND: u16 = 0x48;
const LDX_B_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;
// Ancillary loads (linux/filter.h): the offset of the ancillary area, and the packet type.
const SKF_AD_OFF: i32 = -0x1000;
const SKF_AD_PKTTYPE: i32 = 4;

const fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A classic BPF program that accepts Ethernet frames carrying UDP to `port` (IPv4, first
/// fragments or whole datagrams; IPv6 with UDP as the first next header), up to `snaplen`
/// bytes of each, and drops everything else; with `incoming_only`, also every frame this
/// host sent (loopback passes each packet twice, out and in: the kernel then neither queues
/// nor counts as dropped the copy a reader would throw away).
pub fn udp_port_filter(port: u16, snaplen: u32, incoming_only: bool) -> Vec<libc::sock_filter> {
    let port = u32::from(port);
    let mut prog = Vec::new();
    if incoming_only {
        // The packet type (an ancillary load): this host's own → reject (16 on from the
        // jump below: the body's reject).
        prog.push(ins(LD_W_ABS, 0, 0, (SKF_AD_OFF + SKF_AD_PKTTYPE) as u32));
        prog.push(ins(JEQ_K, 14, 0, u32::from(libc::PACKET_OUTGOING)));
    }
    prog.extend([
        // 0: the EtherType.
        ins(LD_H_ABS, 0, 0, 12),
        // 1: IPv4 → 3, else 2.
        ins(JEQ_K, 1, 0, 0x0800),
        // 2: IPv6 → 10, else reject.
        ins(JEQ_K, 7, 11, 0x86dd),
        // 3: IPv4: protocol UDP, else reject.
        ins(LD_B_ABS, 0, 0, 23),
        ins(JEQ_K, 0, 9, 17),
        // 5: a later fragment has no UDP header: reject.
        ins(LD_H_ABS, 0, 0, 20),
        ins(JSET_K, 7, 0, 0x1fff),
        // 7: X = the IPv4 header's length; the destination port is at 14 + X + 2.
        ins(LDX_B_MSH, 0, 0, 14),
        ins(LD_H_IND, 0, 0, 16),
        // 9: the port → accept, else reject.
        ins(JEQ_K, 5, 4, port),
        // 10: IPv6: next header UDP, else reject.
        ins(LD_B_ABS, 0, 0, 20),
        ins(JEQ_K, 0, 2, 17),
        // 12: the destination port at 14 + 40 + 2.
        ins(LD_H_ABS, 0, 0, 56),
        // 13: the port → accept, else reject.
        ins(JEQ_K, 1, 0, port),
        // 14: reject.
        ins(RET_K, 0, 0, 0),
        // 15: accept.
        ins(RET_K, 0, 0, snaplen),
    ]);
    prog
}

/// One frame read.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    /// Bytes of it in the buffer.
    pub len: usize,
    /// Its length on the wire.
    pub orig_len: usize,
    /// When the kernel received (or sent) it, ns since the epoch.
    pub ts_ns: u64,
    /// Sent by this host rather than received.
    pub outgoing: bool,
}

/// An `AF_PACKET` socket bound to one interface, filtered to RoCEv2.
#[derive(Debug)]
pub struct Sniffer {
    fd: OwnedFd,
    /// The link type of what it reads.
    pub link: LinkType,
}

/// The socket's receive buffer by default: a burst at line rate outruns a reader that is
/// scheduled out for a few milliseconds (64 MiB; with CAP_NET_ADMIN, else what `rmem_max`
/// allows).
pub const DEFAULT_BUFFER: usize = 64 << 20;

impl Sniffer {
    /// Opens `netdev` for frames of UDP to `port`, each cut to `snaplen` bytes, queued in a
    /// receive buffer of `buffer` bytes ([`DEFAULT_BUFFER`]: what the kernel drops when it
    /// is full, [`Sniffer::drops`] counts). Refuses an interface whose RoCE is offloaded (see
    /// [`offloaded_rdma_device`]; `sys` is `/sys`).
    pub fn open(
        sys: &Path,
        netdev: &str,
        port: u16,
        snaplen: u32,
        buffer: usize,
    ) -> Result<Sniffer, LiveError> {
        if let Some(device) = offloaded_rdma_device(sys, netdev) {
            return Err(LiveError::Offloaded { netdev: netdev.into(), device });
        }
        let name = CString::new(netdev).map_err(|_| LiveError::NoInterface(netdev.into()))?;
        // SAFETY: `name` is a NUL-terminated string that outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(LiveError::NoInterface(netdev.into()));
        }
        let arphrd = std::fs::read_to_string(sys.join("class/net").join(netdev).join("type"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(u32::from(libc::ARPHRD_ETHER));
        if arphrd != u32::from(libc::ARPHRD_ETHER) && arphrd != u32::from(libc::ARPHRD_LOOPBACK) {
            return Err(LiveError::LinkType { netdev: netdev.into(), arphrd });
        }
        // Loopback passes every packet twice, out and in: only the in copy is kept (as
        // libpcap does), by the filter.
        let loopback = arphrd == u32::from(libc::ARPHRD_LOOPBACK);
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // Protocol 0: the socket receives nothing until bind names the protocol and the
        // interface, so the filter is in place before the first frame is queued (no
        // unfiltered frame to read away, and none of the interface's lost to doing so).
        // SAFETY: plain socket(2); the descriptor is owned at once below.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(os("cannot open an AF_PACKET socket (needs CAP_NET_RAW)"));
        }
        // SAFETY: `raw` is a descriptor this function just opened and nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut prog = udp_port_filter(port, snaplen, loopback);
        let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_mut_ptr() };
        setsockopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog,
            "cannot attach the BPF filter",
        )?;
        setsockopt(
            &fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &1i32,
            "cannot ask for timestamps",
        )?;
        // (The kernel doubles it for its bookkeeping, as it does tcpdump's -B.)
        let rcvbuf = i32::try_from(buffer).unwrap_or(i32::MAX).max(1);
        if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf, "").is_err() {
            setsockopt(
                &fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &rcvbuf,
                "cannot size the receive buffer",
            )?;
        }
        // SAFETY: all-zero is a valid sockaddr_ll, filled in below.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its true size is given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&sll).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        if rc < 0 {
            return Err(os("cannot bind to the interface"));
        }
        Ok(Sniffer { fd, link: LinkType::Ethernet })
    }

    /// The next frame into `buf`, waiting at most `wait`; `None` when none came (or a signal
    /// cut the wait short).
    pub fn next(&mut self, buf: &mut [u8], wait: Duration) -> Result<Option<Frame>, LiveError> {
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(LiveError::Os { what: "poll", source: e })
            };
        }
        if n == 0 {
            return Ok(None);
        }
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let mut control = [0u64; 8];
        // SAFETY: all-zero is a valid sockaddr_ll and msghdr.
        let mut from: libc::sockaddr_ll = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msg: libc::msghdr = unsafe { zeroed() };
        msg.msg_name = std::ptr::from_mut(&mut from).cast();
        msg.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = size_of::<[u64; 8]>();
        // SAFETY: every pointer in `msg` is to a live buffer of the size given; MSG_TRUNC
        // makes the return the frame's whole length.
        let got = unsafe {
            libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC | libc::MSG_DONTWAIT)
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(LiveError::Os { what: "recvmsg", source: e }),
            };
        }
        let outgoing = from.sll_pkttype == libc::PACKET_OUTGOING;
        let orig_len = got as usize;
        let mut ts_ns = None;
        // SAFETY: `msg` was filled by recvmsg: its control buffer and length describe valid
        // control messages, walked with the kernel's macros.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                    let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    ts_ns = Some(t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64);
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        let ts_ns = ts_ns.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        Ok(Some(Frame { len: orig_len.min(buf.len()), orig_len, ts_ns, outgoing }))
    }

    /// Frames the kernel dropped because this socket's queue was full, since the last call.
    pub fn drops(&self) -> Result<u64, LiveError> {
        // SAFETY: all-zero is a valid tpacket_stats.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as u32;
        // SAFETY: `st` is writable for `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                std::ptr::from_mut(&mut st).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(os("cannot read the socket's statistics"));
        }
        Ok(u64::from(st.tp_drops))
    }
}

fn setsockopt<T>(
    fd: &OwnedFd,
    level: i32,
    name: i32,
    v: &T,
    what: &'static str,
) -> Result<(), LiveError> {
    // SAFETY: `v` points at a live value of its type's size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(v).cast(),
            size_of::<T>() as u32,
        )
    };
    if rc < 0 { Err(os(what)) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_netdev_with_rdma_in_hardware_is_refused_with_the_reason() {
        let sys = tempfile::tempdir().unwrap();
        let nic = sys.path().join("class/net/ens1f0np0");
        std::fs::create_dir_all(nic.join("device/infiniband/mlx5_0")).unwrap();
        std::fs::write(nic.join("type"), "1\n").unwrap();
        // rxe: its netdev has no RDMA device under its parent.
        std::fs::create_dir_all(sys.path().join("class/net/eth0/device")).unwrap();
        assert_eq!(offloaded_rdma_device(sys.path(), "ens1f0np0").as_deref(), Some("mlx5_0"));
        assert_eq!(offloaded_rdma_device(sys.path(), "eth0"), None);
        let e = Sniffer::open(sys.path(), "ens1f0np0", 4791, 65535, DEFAULT_BUFFER).unwrap_err();
        assert!(matches!(e, LiveError::Offloaded { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("ens1f0np0 carries RoCE in hardware (mlx5_0)"), "{text}");
        assert!(text.contains("switch mirror"), "{text}");
    }

    #[test]
    fn an_unknown_interface_is_named() {
        let e =
            Sniffer::open(Path::new("/sys"), "nosuchif0", 4791, 65535, DEFAULT_BUFFER).unwrap_err();
        assert_eq!(e.to_string(), "no interface nosuchif0");
    }
}
