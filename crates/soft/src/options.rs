//! How a soft device is opened: its progress model, receive path, offload, fault injection.

/// How a soft device is opened.
#[derive(Debug, Clone, Default)]
pub struct SoftOptions {
    /// Busy-poll or event-driven.
    pub progress: Progress,
    /// How the device receives on an IPv4 address.
    pub ipv4_receive: Ipv4Receive,
    /// Whether the device uses UDP segmentation offload.
    pub udp_offload: UdpOffload,
    /// A fault to inject, for tests of what must catch it.
    pub fault: FaultInjection,
    /// The receive buffer to ask for (`SO_RCVBUF`, bytes) instead of 8 MiB forced with
    /// `CAP_NET_ADMIN`: 212992 is what an unprivileged process gets under default sysctls
    /// (`rmem_max`). The device's READ window follows what it gets.
    pub receive_buffer: Option<usize>,
    /// Record every datagram the device sends and receives to this pcapng file (`{ip}` in
    /// it becomes the device's address): the device's own capture point, both directions.
    pub capture: Option<std::path::PathBuf>,
}

/// A fault a soft device injects, for tests: the burn-in's integrity checks must catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultInjection {
    /// Flip one byte of every `n`-th payload the transport places into memory — after its
    /// ICRC was verified, so no transport check can see it and the application gets damaged
    /// data (what a flaky PCIe link or a memory fault past the NIC does). `None`: never.
    pub corrupt_every: Option<u64>,
    /// Place nothing of every `n`-th payload, the receive completing as if it had landed
    /// (what a path that loses data past the ICRC check does): a checker that trusts a
    /// buffer's old contents is caught. `None`: never. `corrupt_every` wins if both are set.
    pub drop_every: Option<u64>,
}

/// UDP segmentation offload for a soft device: one `sendmsg` carries a run of equal-sized
/// datagrams to one peer (`UDP_SEGMENT`) and one receive takes a run back (`UDP_GRO`), so
/// the kernel's per-datagram costs are paid once per run. On IPv4 only the send side: the
/// receive path is a raw socket (for the Identification the ICRC covers), which takes a run
/// whole where nothing segmented it (loopback, a veth) and the transport cuts it; an IPv4
/// run starts with a packet whose length its headers give (a FIRST or MIDDLE packet, an RDMA
/// WRITE ONLY, a READ request, an atomic, an ACK), so the cut is known, and datagram k of a run carries Identification k, as Linux numbers them. With offload an
/// IPv6 device sends UDP checksums, which GSO requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpOffload {
    /// Send runs on both families; receive them with `UDP_GRO` on IPv6 when the kernel
    /// accepts it.
    #[default]
    Auto,
    /// Never: one datagram per message, zero IPv6 UDP checksums as rxe sends.
    Off,
}

/// How a soft device receives IPv4 RoCE datagrams, whose ICRC covers the IP Identification
/// that a UDP socket does not show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ipv4Receive {
    /// A raw socket when the process may open one (`CAP_NET_RAW`), else the UDP socket.
    #[default]
    Auto,
    /// A raw IPv4 socket: the real IP header, a full 32-bit ICRC check.
    Raw,
    /// The UDP socket, the Identification recovered from the ICRC: a 16-bit check, every
    /// packet counted in `icrc_unverified`.
    Udp,
}

/// How a context makes progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Progress {
    /// Completion polling (and watching a region's byte) drives the device's I/O in the
    /// polling thread: lowest latency, one core busy while polling. A helper thread serves the
    /// device while nobody polls, spinning while datagrams arrive (a core busy, as a NIC's
    /// would be) and sleeping in `poll(2)` 2 ms after the last: the application need not
    /// know that polling moves the device.
    Busy,
    /// A progress thread sleeps in `poll(2)` until a packet or a timer is due and wakes
    /// completion channels: idle costs no CPU.
    #[default]
    Event,
}
