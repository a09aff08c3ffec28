//! The soft device's sockets: batched sends and receives of RoCEv2 datagrams, with the ICRC
//! sealed on the way out over the exact IP and UDP headers Linux will put on the wire.
//!
//! Receive paths (see `docs/soft-provider-notes.md` for the measurements behind the choice):
//! - IPv6: the UDP socket itself. Every field the ICRC covers is known from the socket
//!   (addresses, ports, lengths); `UDP_NO_CHECK6_RX` lets rxe's zero UDP checksum in.
//! - IPv4, default: a raw IPv4/UDP socket bound to the device address, behind a BPF filter on
//!   the UDP port, so the real IP header (its Identification is covered by the ICRC) is seen.
//!   It sits after netfilter's INPUT hook, as the kernel's own UDP does. The UDP socket stays
//!   bound (no ICMP port-unreachable) and drops its copy in a BPF filter.
//! - IPv4 without `CAP_NET_RAW`: the UDP socket; the Identification is recovered from the
//!   ICRC (`wire::icrc::recover_ipv4_id`), which leaves a 16-bit check: every such packet is
//!   counted in `icrc_unverified`.
//!
//! Sends go out of UDP sockets, unconnected, with `IP_PMTUDISC_DO`: Linux then gives every
//! IPv4 datagram DF and Identification 0, so the ICRC can be computed before `sendmmsg`. Each
//! connection sends from its own UDP source port, as rxe and RoCE NICs do (the transport
//! computes it: `wire::udp_source_port`), so a fabric's ECMP spreads a host pair's QPs: a
//! kernel UDP socket sends from the port it is bound to, so [`SourcePorts`] binds one socket
//! per port in use (receive stays on the device's port, 4791).

use std::io;
use std::mem::{MaybeUninit, size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};

use socket2::{Domain, Protocol, Socket, Type};
use transport::{RecvMeta, Transmit};
use wire::icrc::PseudoHeader;

use crate::HashMap;

/// Datagrams per `recvmmsg`/`sendmmsg` (with segmentation offload: messages, each up to
/// [`GSO_SEGMENTS`] datagrams).
pub(crate) const BATCH: usize = 32;
/// Transmits collected for one `sendmmsg` with segmentation offload.
pub(crate) const GSO_BATCH: usize = 256;
/// Bytes per receive slot: an IP header, UDP, the largest RoCE packet (4096 payload) and room.
const SLOT: usize = 4096 + 512;
/// Bytes per receive slot with UDP GRO: a whole coalesced datagram.
const GRO_SLOT: usize = 65536;
/// Receive slots with UDP GRO.
const GRO_BATCH: usize = 16;
/// Datagrams per GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 before Linux 6.2).
const GSO_SEGMENTS: usize = 64;
/// Datagrams up to this long go in a GSO run as one copied buffer, not an iovec each.
const SMALL: usize = 512;
thread_local! {
    /// Where runs of small datagrams are gathered for one `sendmmsg`.
    static STAGING: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// The fewest datagrams sent as one GSO run.
const MIN_RUN: usize = 4;
/// Bytes of UDP payload per GSO send (an IPv6 payload length is 16 bits).
const GSO_BYTES: usize = 65_000;

/// How IPv4 datagrams are received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxPath {
    /// IPv4 through a raw socket: full IP header, full ICRC check.
    Raw,
    /// IPv6 through the UDP socket: full ICRC check.
    Udp,
    /// The UDP socket, IPv4 Identification recovered from the ICRC (16-bit check).
    UdpRecovered,
}

/// The most source-port sockets one device binds; connections past them share.
pub(crate) const MAX_SOURCE_PORTS: usize = 256;

/// The sockets a device's datagrams leave from, by UDP source port. A connection's port gets
/// a socket bound to it the first time the connection sends, and keeps it; connections with
/// the same port share it. When the port cannot be had (another socket holds it, the device
/// has [`MAX_SOURCE_PORTS`], the process is out of descriptors) the connection sends from a
/// port already bound, picked by its own port (so a host pair's connections still spread),
/// or from the device's own port if none is: its datagrams are valid RoCE either way (the
/// ICRC is sealed over the port they leave from), only the spread is less.
#[derive(Debug, Default)]
pub(crate) struct SourcePorts {
    /// The port each connection's port was given (itself, or a fallback).
    given: HashMap<u16, u16>,
    /// The sockets bound, by port.
    sockets: HashMap<u16, Socket>,
    /// The ports bound, in order (for the fallback pick).
    bound: Vec<u16>,
}

impl SourcePorts {
    /// The port `t` leaves from: its connection's, or the fallback; sets `t.src_port` to it.
    pub(crate) fn assign(&mut self, io: &Sockets, t: &mut Transmit) {
        let want = t.src_port;
        if let Some(&p) = self.given.get(&want) {
            t.src_port = p;
            return;
        }
        let got = if want == io.port {
            io.port
        } else if self.sockets.len() < MAX_SOURCE_PORTS
            && let Ok(s) = io.open_sender(want)
        {
            self.sockets.insert(want, s);
            self.bound.push(want);
            want
        } else {
            match self.bound.len() {
                0 => io.port,
                n => self.bound[usize::from(want) % n],
            }
        };
        // Remember a fallback too: one connection keeps one port (a path), and a port that
        // could not be bound is not tried for every packet.
        self.given.insert(want, got);
        t.src_port = got;
    }

    /// The descriptor to send from port `port` (the device's own socket for its port).
    fn fd(&self, io: &Sockets, port: u16) -> RawFd {
        self.sockets.get(&port).map_or_else(|| io.tx_fd(), AsRawFd::as_raw_fd)
    }
}

/// The sockets of one soft device.
#[derive(Debug)]
pub(crate) struct Sockets {
    udp: Socket,
    raw: Option<Socket>,
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    pub(crate) rx_path: RxPath,
    /// UDP segmentation offload on send (`UDP_SEGMENT`), and on IPv6 on receive (`UDP_GRO`;
    /// IPv4 receives through the raw socket, which sees a run unsegmented where nothing
    /// segmented it, and the transport cuts it).
    pub(crate) offload: bool,
    /// The device's own capture point, when asked for.
    pub(crate) tap: Option<crate::tap::Tap>,
}

/// Receive buffers and the `recvmmsg` headers that describe them, reused across calls (a
/// busy poll calls `recvmmsg` constantly; clearing 8 KiB of headers each time showed in the
/// profile).
pub(crate) struct RxBuffers {
    data: Vec<u8>,
    slot: usize,
    hdrs: Box<[libc::mmsghdr; BATCH]>,
    addrs: Box<[libc::sockaddr_storage; BATCH]>,
    cmsgs: Box<[[u64; 8]; BATCH]>,
    iovs: Box<[libc::iovec; BATCH]>,
}

impl std::fmt::Debug for RxBuffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxBuffers").field("slot", &self.slot).finish_non_exhaustive()
    }
}

// SAFETY: the raw pointers inside the headers point into this same value's boxes and vector,
// which move with it; they are rewritten before every use.
unsafe impl Send for RxBuffers {}

impl RxBuffers {
    /// Buffers for `s`'s datagrams.
    pub(crate) fn for_sockets(s: &Sockets) -> RxBuffers {
        // A raw socket takes a peer's GSO run whole (on loopback or a veth), whatever this
        // device sends.
        let whole_runs = s.offload || s.rx_path == RxPath::Raw;
        let (slot, n) = if whole_runs { (GRO_SLOT, GRO_BATCH) } else { (SLOT, BATCH) };
        RxBuffers {
            data: vec![0; slot * n],
            slot,
            // SAFETY: all-zero is a valid value for these plain C structs.
            hdrs: Box::new(unsafe { zeroed() }),
            // SAFETY: as above.
            addrs: Box::new(unsafe { zeroed() }),
            cmsgs: Box::new([[0u64; 8]; BATCH]),
            iovs: Box::new([libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; BATCH]),
        }
    }
}

fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

fn attach_filter(fd: RawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr().cast_mut() };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&raw const fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// Classic BPF over a raw IPv4 packet: accept unfragmented UDP to `port`.
fn udp_port_filter(port: u16) -> [libc::sock_filter; 7] {
    [
        insn(0x28, 0, 0, 6),               // ldh [6]         flags + fragment offset
        insn(0x45, 4, 0, 0x1fff),          // jset #0x1fff    a fragment: drop
        insn(0xb1, 0, 0, 0),               // ldxb 4*([0]&0xf) IP header length
        insn(0x48, 0, 0, 2),               // ldh [x+2]       UDP destination port
        insn(0x15, 0, 1, u32::from(port)), // jeq #port
        insn(0x06, 0, 0, u32::MAX),        // ret all
        insn(0x06, 0, 0, 0),               // ret 0
    ]
}

impl Sockets {
    /// What the receiving socket holds, bytes of kernel memory (Linux reports twice what was
    /// asked: the buffer is charged per datagram with its overhead).
    pub(crate) fn receive_buffer(&self) -> usize {
        let s = self.raw.as_ref().unwrap_or(&self.udp);
        s.recv_buffer_size().unwrap_or(212_992)
    }

    /// Binds the device's sockets. `EADDRINUSE` comes back as is, so callers can try the next
    /// address.
    pub(crate) fn open(
        ip: IpAddr,
        port: u16,
        v4: crate::Ipv4Receive,
        offload: bool,
        receive_buffer: Option<usize>,
    ) -> io::Result<Sockets> {
        let domain = if ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let udp = Socket::new(domain, Type::DGRAM.nonblocking(), Some(Protocol::UDP))?;
        if ip.is_ipv6() {
            udp.set_only_v6(true)?;
        }
        udp.bind(&SocketAddr::new(ip, port).into())?;
        let fd = udp.as_raw_fd();
        // Big buffers: a window of 4 KiB packets in flight from many QPs (forced past
        // rmem_max when the process may; else rmem_max is what it gets).
        let set_rcvbuf = |fd: RawFd| match receive_buffer {
            Some(n) => setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, n as i32),
            None if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20).is_ok() => {
                Ok(())
            }
            None => setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20),
        };
        set_rcvbuf(fd)?;
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20).is_err() {
            setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20)?;
        }
        let mut rx_path = RxPath::Udp;
        let mut raw = None;
        if ip.is_ipv4() {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
            let raw_sock = match v4 {
                crate::Ipv4Receive::Udp => Err(io::Error::from_raw_os_error(libc::EPERM)),
                _ => Socket::new(Domain::IPV4, Type::RAW.nonblocking(), Some(Protocol::UDP)),
            };
            match raw_sock {
                Ok(r) => {
                    r.bind(&SocketAddr::new(ip, 0).into())?;
                    attach_filter(r.as_raw_fd(), &udp_port_filter(port))?;
                    set_rcvbuf(r.as_raw_fd())?;
                    // The UDP socket keeps the port open; its copy of each datagram is dropped.
                    attach_filter(fd, &[insn(0x06, 0, 0, 0)])?;
                    // Whole: a GSO run that arrives unsegmented (loopback, a veth) would
                    // otherwise be cut into its datagrams in the sender's time, each to be
                    // filtered out (on loopback that was a quarter of a 2-byte sender's
                    // cycles). With UDP_GRO the socket takes, and drops, the run as one.
                    let _ = setsockopt_int(fd, libc::IPPROTO_UDP, UDP_GRO, 1);
                    raw = Some(r);
                    rx_path = RxPath::Raw;
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::EPERM) && v4 != crate::Ipv4Receive::Raw =>
                {
                    rx_path = RxPath::UdpRecovered;
                }
                Err(e) => return Err(e),
            }
        }
        let gso = if ip.is_ipv6() {
            // rxe sends IPv6 UDP with checksum 0, which Linux drops unless told otherwise.
            setsockopt_int(fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            // Segmentation offload needs UDP checksums (the kernel refuses GSO without), so
            // with it podnet sends them; without it, zero as rxe does. Either is valid RoCE.
            let gro = offload && setsockopt_int(fd, libc::IPPROTO_UDP, UDP_GRO, 1).is_ok();
            if !gro {
                setsockopt_int(fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_TX, 1)?;
            }
            gro
        } else {
            // IPv4 UDP carries checksums, which GSO needs; no GRO on the UDP socket (its
            // datagrams come through the raw socket, or singly to recover their IDs).
            offload
        };
        Ok(Sockets { udp, raw, ip, port, rx_path, offload: gso, tap: None })
    }

    /// Datagrams the receiving socket dropped since it opened (the kernel's `sk_drops`, read
    /// with `SO_MEMINFO`: no cost per datagram): for want of buffer room, the receiver having
    /// fallen behind. 0 if the kernel will not say.
    pub(crate) fn socket_drops(&self) -> u64 {
        /// `SO_MEMINFO` and the index of `SK_MEMINFO_DROPS` in what it returns
        /// (`linux/sock_diag.h`).
        const SO_MEMINFO: i32 = 55;
        const SK_MEMINFO_DROPS: usize = 8;
        let mut info = [0u32; 16];
        let mut len = size_of::<[u32; 16]>() as libc::socklen_t;
        // SAFETY: `info` is writable for `len` bytes, both live across the call; the kernel
        // writes at most `len` bytes and sets `len` to what it wrote.
        let rc = unsafe {
            libc::getsockopt(
                self.rx_fd(),
                libc::SOL_SOCKET,
                SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        let have = len as usize / size_of::<u32>();
        if rc == 0 && have > SK_MEMINFO_DROPS { u64::from(info[SK_MEMINFO_DROPS]) } else { 0 }
    }

    /// The descriptor to wait on for received datagrams.
    pub(crate) fn rx_fd(&self) -> RawFd {
        self.raw.as_ref().unwrap_or(&self.udp).as_raw_fd()
    }

    /// The descriptor datagrams are sent from when they leave from the device's port.
    pub(crate) fn tx_fd(&self) -> RawFd {
        self.udp.as_raw_fd()
    }

    /// A socket that sends from `port` on the device's address, set up as the device's own
    /// socket is for sending (DF and Identification 0 on IPv4; zero UDP checksums on IPv6
    /// unless offload needs them), that receives nothing (peers send to the device's port).
    fn open_sender(&self, port: u16) -> io::Result<Socket> {
        let domain = if self.ip.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
        let s = Socket::new(domain, Type::DGRAM.nonblocking(), Some(Protocol::UDP))?;
        if self.ip.is_ipv6() {
            s.set_only_v6(true)?;
        }
        // Two devices on one address (soft:IP:PORT) may want the same source port: both
        // only send from it.
        s.set_reuse_port(true)?;
        s.bind(&SocketAddr::new(self.ip, port).into())?;
        let fd = s.as_raw_fd();
        attach_filter(fd, &[insn(0x06, 0, 0, 0)])?;
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 8 << 20).is_err() {
            setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20)?;
        }
        if self.ip.is_ipv4() {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, libc::IP_PMTUDISC_DO)?;
        } else if !self.offload {
            setsockopt_int(fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_TX, 1)?;
        }
        Ok(s)
    }

    /// Receives one batch without blocking and hands each datagram to `f`; returns how many
    /// arrived (0: nothing waiting).
    pub(crate) fn recv_batch(
        &self,
        bufs: &mut RxBuffers,
        mut f: impl FnMut(&RecvMeta<'_>, &[u8], Option<u16>),
    ) -> io::Result<usize> {
        let slot = bufs.slot;
        let slots = (bufs.data.len() / slot).min(BATCH);
        let RxBuffers { data, hdrs, addrs, cmsgs, iovs, .. } = bufs;
        for (i, chunk) in data.chunks_mut(slot).take(slots).enumerate() {
            iovs[i] = libc::iovec { iov_base: chunk.as_mut_ptr().cast(), iov_len: slot };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&raw mut addrs[i]).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as u32;
            h.msg_iov = &raw mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = cmsgs[i].as_mut_ptr().cast();
            h.msg_controllen = size_of::<[u64; 8]>();
            h.msg_flags = 0;
        }
        // SAFETY: every header points at buffers (`iovs`, `addrs`, `cmsgs`, `data`) that
        // live until the call returns, with their true sizes.
        let n = unsafe {
            libc::recvmmsg(
                self.rx_fd(),
                hdrs.as_mut_ptr(),
                slots as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(e) };
        }
        let n = n as usize;
        for i in 0..n {
            let len = hdrs[i].msg_len as usize;
            let data = &data[i * slot..i * slot + len.min(slot)];
            if hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                continue;
            }
            match self.rx_path {
                RxPath::Raw => self.deliver_raw(data, &mut f),
                RxPath::Udp | RxPath::UdpRecovered => {
                    let src = sockaddr_ip(&addrs[i]);
                    let (tos, seg) = cmsg_tos_and_gro(&hdrs[i].msg_hdr);
                    let meta = RecvMeta {
                        src: src.0,
                        dst: self.ip,
                        src_port: src.1,
                        dst_port: self.port,
                        ecn: tos & 3,
                        ip_header: None,
                    };
                    // A coalesced datagram (UDP GRO) is `seg`-byte datagrams back to back,
                    // the last one possibly shorter.
                    let seg = seg.filter(|&s| s > 0).unwrap_or(data.len().max(1));
                    for d in data.chunks(seg) {
                        if self.rx_path == RxPath::UdpRecovered {
                            deliver_recovered(&meta, d, &mut f);
                        } else {
                            f(&meta, d, None);
                        }
                    }
                }
            }
        }
        // A full batch means more may wait.
        Ok(if n == slots { BATCH } else { n })
    }

    fn deliver_raw(&self, pkt: &[u8], f: &mut impl FnMut(&RecvMeta<'_>, &[u8], Option<u16>)) {
        if pkt.len() < 28 || pkt[0] >> 4 != 4 {
            return;
        }
        let ihl = usize::from(pkt[0] & 0xf) * 4;
        if ihl < 20 || pkt.len() < ihl + 8 {
            return;
        }
        let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]])).min(pkt.len());
        let udp = &pkt[ihl..ihl + 8];
        let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
        if udp_len < 8 || ihl + udp_len > total {
            return;
        }
        let meta = RecvMeta {
            src: IpAddr::V4(Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15])),
            dst: IpAddr::V4(Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19])),
            src_port: u16::from_be_bytes([udp[0], udp[1]]),
            dst_port: u16::from_be_bytes([udp[2], udp[3]]),
            ecn: pkt[1] & 3,
            ip_header: Some(&pkt[..ihl]),
        };
        f(&meta, &pkt[ihl + 8..ihl + udp_len], None);
    }

    /// How many transmits to collect for one [`Sockets::send_batch`] when they leave from
    /// `ports` source ports: a `sendmmsg`'s worth per port, so that sorting them by port
    /// leaves each port a full `sendmmsg` (at most [`GSO_BATCH`]).
    pub(crate) fn collect_len(&self, ports: usize) -> usize {
        (self.batch_len() * ports.max(1)).min(GSO_BATCH.max(self.batch_len()))
    }

    /// How many transmits one `sendmmsg` takes.
    pub(crate) fn batch_len(&self) -> usize {
        if self.offload { GSO_BATCH } else { BATCH }
    }

    /// Seals and sends `batch` (sorted by source port), a `sendmmsg` per run of one source
    /// port; returns how many went out, from the head (the caller keeps the rest, to be
    /// sealed again when they go: an IPv4 ICRC depends on a datagram's place in its GSO run).
    /// `WouldBlock` when the first socket is full and none went.
    pub(crate) fn send_batch(
        &self,
        batch: &mut [Transmit],
        ports: &SourcePorts,
    ) -> io::Result<usize> {
        let mut sent = 0;
        while sent < batch.len() {
            let port = batch[sent].src_port;
            let run = batch[sent..].iter().take_while(|t| t.src_port == port).count();
            match self.send_run(&mut batch[sent..sent + run], ports.fd(self, port)) {
                Ok((n, tried)) => {
                    sent += n;
                    if n < tried {
                        break;
                    }
                }
                // What went out went; the error comes again on the next try.
                Err(_) if sent > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    /// Seals and sends the head of `batch` with one `sendmmsg` on `fd`; returns how many went
    /// out and how many it tried (a `sendmmsg` takes [`BATCH`] messages). With segmentation
    /// offload, runs of datagrams to one destination with one traffic class and one length
    /// (the last may be shorter) go as one message with `UDP_SEGMENT`: the kernel cuts it
    /// into the same datagrams, each with its own UDP header and checksum, the ICRC sealed
    /// here. On IPv4 the kernel numbers a run's datagrams' Identifications from the first's
    /// (0: DF on an unconnected socket), so datagram k is sealed with Identification k; and a
    /// run starts only with a packet whose length its headers give (a FIRST or MIDDLE packet,
    /// an RDMA WRITE ONLY, a READ request, an atomic, an ACK: `wire::roce::len_from_headers`),
    /// which is how a receiver that sees the run unsegmented (loopback, a veth) knows where
    /// to cut it (`transport::Endpoint::handle_datagram`).
    fn send_run(&self, batch: &mut [Transmit], fd: RawFd) -> io::Result<(usize, usize)> {
        // Only the messages used are written (zeroing all of them was 7 KiB per send).
        let mut hdrs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        let mut addrs = [const { MaybeUninit::<libc::sockaddr_storage>::uninit() }; BATCH];
        let mut cmsgs = [const { MaybeUninit::<[u64; 8]>::uninit() }; BATCH];
        let len = batch.len().min(self.batch_len());
        let v4 = self.ip.is_ipv4();
        // Group the transmits: (first, count) per message.
        let mut groups: [(usize, usize); BATCH] = [(0, 0); BATCH];
        let mut msgs = 0;
        let mut i = 0;
        while i < len && msgs < BATCH {
            let t = &batch[i];
            let seg = t.payload.len();
            let mut n = 1;
            let mut bytes = seg;
            let may_lead =
                !v4 || t.payload.first().is_some_and(|&b| wire::Opcode(b).len_in_headers());
            while self.offload && may_lead && i + n < len && n < GSO_SEGMENTS {
                let (prev, u) = (&batch[i + n - 1], &batch[i + n]);
                let len = u.payload.len();
                if u.dst != t.dst
                    || u.tos != t.tos
                    || prev.payload.len() != seg
                    || len > seg
                    || len == 0
                    || bytes + len > GSO_BYTES
                {
                    break;
                }
                bytes += len;
                n += 1;
            }
            // A run of two or three goes as single datagrams: what a latency-bound exchange
            // sends (a reply and an ACK) reaches the peer sooner that way, its first datagram
            // taken while the next is still being sent.
            if n < MIN_RUN {
                n = 1;
            }
            groups[msgs] = (i, n);
            msgs += 1;
            i += n;
        }
        for &(first, n) in &groups[..msgs] {
            for (k, t) in batch[first..first + n].iter_mut().enumerate() {
                self.seal(t, k as u16);
            }
        }
        // A run of small datagrams goes as one buffer (copied here: the kernel's cost per
        // iovec is more than a copy of a hundred bytes); larger ones as an iovec each.
        let small = |&(first, n): &(usize, usize)| n > 1 && batch[first].payload.len() <= SMALL;
        let staged: usize = groups[..msgs]
            .iter()
            .filter(|g| small(g))
            .map(|&(first, n)| {
                batch[first..first + n].iter().map(|t| t.payload.len()).sum::<usize>()
            })
            .sum();
        STAGING.with_borrow_mut(|stage| {
            stage.clear();
            stage.reserve(staged);
            let mut iovs: Vec<libc::iovec> = Vec::with_capacity(i);
            let mut starts = [0usize; BATCH];
            for (k, g @ &(first, n)) in groups[..msgs].iter().enumerate() {
                starts[k] = iovs.len();
                let run = &batch[first..first + n];
                if small(g) {
                    let at = stage.len();
                    for t in run {
                        stage.extend_from_slice(&t.payload);
                    }
                    // The stage holds `staged` bytes without growing: no pointer into it moves.
                    iovs.push(libc::iovec {
                        iov_base: stage[at..].as_ptr().cast_mut().cast(),
                        iov_len: stage.len() - at,
                    });
                } else {
                    iovs.extend(run.iter().map(|t| libc::iovec {
                        iov_base: t.payload.as_ptr().cast_mut().cast(),
                        iov_len: t.payload.len(),
                    }));
                }
            }
            for (k, &(first, n)) in groups[..msgs].iter().enumerate() {
                let t = &batch[first];
                // SAFETY: all-zero is a valid value for these plain C structs.
                let addr = addrs[k].write(unsafe { zeroed() });
                let namelen = write_sockaddr(addr, t.dst, self.port);
                let control = cmsgs[k].write([0; 8]);
                // SAFETY: as above.
                let h = &mut hdrs[k].write(unsafe { zeroed() }).msg_hdr;
                h.msg_name = std::ptr::from_mut(addr).cast();
                h.msg_namelen = namelen;
                h.msg_iov = iovs[starts[k]..].as_mut_ptr();
                h.msg_iovlen = if small(&(first, n)) { 1 } else { n };
                h.msg_control = control.as_mut_ptr().cast();
                let seg = (n > 1).then_some(t.payload.len() as u16);
                h.msg_controllen = write_cmsgs(h, t.dst.is_ipv4(), t.tos, seg);
            }
            // SAFETY: every header points at buffers that live until the call returns
            // (`iovs`, `addrs`, `cmsgs`, the payloads in `batch` and the stage), with their
            // true sizes; the kernel only reads them, and only the first `msgs`, which
            // were written above.
            let rc = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr().cast(), msgs as u32, 0) };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(tap) = &self.tap {
                for &(first, n) in &groups[..rc as usize] {
                    for (k, t) in batch[first..first + n].iter().enumerate() {
                        tap.sent(
                            (self.ip, t.src_port),
                            (t.dst, self.port),
                            t.tos,
                            k as u16,
                            &t.payload,
                        );
                    }
                }
            }
            let sum = |g: &[(usize, usize)]| g.iter().map(|g| g.1).sum();
            Ok((sum(&groups[..rc as usize]), sum(&groups[..msgs])))
        })
    }

    /// Writes the ICRC of `t` as it will be sent: over the IP and UDP headers Linux builds
    /// for the socket of its source port (IPv4: DF, Identification `id`: 0, or the place of
    /// the datagram in its GSO run).
    fn seal(&self, t: &mut Transmit, id: u16) {
        // A peer of the other family: nothing will reach it; the send fails later.
        if let Some(mut h) = PseudoHeader::between(self.ip, t.dst, t.src_port, self.port) {
            h.set_ipv4_id(id);
            let r = h.seal(&mut t.payload);
            debug_assert!(r.is_ok(), "a transmit too short to seal");
        }
    }
}

/// `UDP_NO_CHECK6_TX` / `_RX`, `UDP_SEGMENT`, `UDP_GRO` from `linux/udp.h`.
const UDP_NO_CHECK6_TX: i32 = 101;
const UDP_NO_CHECK6_RX: i32 = 102;
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;

/// IPv4 through a UDP socket: rebuild the header, recover the Identification from the ICRC.
fn deliver_recovered(
    meta: &RecvMeta<'_>,
    roce: &[u8],
    f: &mut impl FnMut(&RecvMeta<'_>, &[u8], Option<u16>),
) {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (meta.src, meta.dst) else { return };
    let header = |df| PseudoHeader::ipv4(s, d, 0, df, meta.src_port, meta.dst_port);
    // rxe and podnet set DF; try that first.
    for df in [true, false] {
        let mut h = header(df);
        if let Ok(Some(id)) = h.recover_ipv4_id(roce) {
            h.set_ipv4_id(id);
            let h = h.for_payload(roce.len());
            let m = RecvMeta { ip_header: Some(h.ip_header()), ..*meta };
            f(&m, roce, Some(id));
            return;
        }
    }
    // No Identification makes the ICRC match: hand it over with ID 0 so it is counted and
    // dropped as an ICRC error.
    let h = header(true).for_payload(roce.len());
    let m = RecvMeta { ip_header: Some(h.ip_header()), ..*meta };
    f(&m, roce, None);
}

fn sockaddr_ip(a: &libc::sockaddr_storage) -> (IpAddr, u16) {
    match i32::from(a.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is big and
            // aligned enough for.
            let s = unsafe { &*(std::ptr::from_ref(a).cast::<libc::sockaddr_in>()) };
            (IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))), u16::from_be(s.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let s = unsafe { &*(std::ptr::from_ref(a).cast::<libc::sockaddr_in6>()) };
            (IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)), u16::from_be(s.sin6_port))
        }
        _ => (IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
    }
}

fn write_sockaddr(a: &mut libc::sockaddr_storage, ip: IpAddr, port: u16) -> libc::socklen_t {
    match ip {
        IpAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is big and aligned enough for a sockaddr_in.
            let s = unsafe { &mut *(std::ptr::from_mut(a).cast::<libc::sockaddr_in>()) };
            s.sin_family = libc::AF_INET as u16;
            s.sin_port = port.to_be();
            s.sin_addr.s_addr = u32::from(v4).to_be();
            size_of::<libc::sockaddr_in>() as u32
        }
        IpAddr::V6(v6) => {
            // SAFETY: as above, for a sockaddr_in6.
            let s = unsafe { &mut *(std::ptr::from_mut(a).cast::<libc::sockaddr_in6>()) };
            s.sin6_family = libc::AF_INET6 as u16;
            s.sin6_port = port.to_be();
            s.sin6_addr.s6_addr = v6.octets();
            size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

/// Writes an `IP_TOS` / `IPV6_TCLASS` control message, and a `UDP_SEGMENT` one when `seg`
/// is given, into `h`'s control buffer (64 bytes); returns their length.
fn write_cmsgs(h: &mut libc::msghdr, v4: bool, tos: u8, seg: Option<u16>) -> usize {
    let (level, ty) =
        if v4 { (libc::IPPROTO_IP, libc::IP_TOS) } else { (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let (int_space, u16_space) = unsafe {
        (
            libc::CMSG_SPACE(size_of::<i32>() as u32) as usize,
            libc::CMSG_SPACE(size_of::<u16>() as u32) as usize,
        )
    };
    let space = int_space + if seg.is_some() { u16_space } else { 0 };
    h.msg_controllen = space;
    // SAFETY: the control buffer is 64 bytes, 8-aligned, and `space` (at most 48) fits in
    // it, so CMSG_FIRSTHDR and the CMSG_NXTHDR after it are non-null and CMSG_DATA points
    // inside the buffer.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(h);
        (*c).cmsg_level = level;
        (*c).cmsg_type = ty;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<i32>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), i32::from(tos));
        if let Some(seg) = seg {
            let c = libc::CMSG_NXTHDR(h, c);
            (*c).cmsg_level = libc::IPPROTO_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
        }
    }
    space
}

/// The TOS / traffic class a received datagram carried (0 when absent), and the segment size
/// of a coalesced one (`UDP_GRO`).
fn cmsg_tos_and_gro(h: &libc::msghdr) -> (u8, Option<usize>) {
    let (mut tos, mut seg) = (0, None);
    // SAFETY: `h` was filled by recvmmsg: its control buffer and length describe valid
    // control messages, which the CMSG macros walk within bounds.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let (l, t) = ((*c).cmsg_level, (*c).cmsg_type);
            if l == libc::IPPROTO_IP && t == libc::IP_TOS {
                tos = *libc::CMSG_DATA(c);
            }
            if l == libc::IPPROTO_IPV6 && t == libc::IPV6_TCLASS {
                tos = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()) as u8;
            }
            if l == libc::IPPROTO_UDP && t == UDP_GRO {
                seg = Some(std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>()) as usize);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (tos, seg)
}
