//! The `soft` provider: podnet's transport engine behind real UDP sockets — a RoCEv2 device in
//! userspace that talks to Linux rxe and RoCE NICs on the wire.
//!
//! A device is an IP address and a UDP port (`soft:127.0.0.1`, `soft:[fd00::1]:4791`). Its
//! memory regions live in the provider (the "NIC" owns registered memory), so the engine
//! copies payloads straight between them and the sockets. One lock guards the engine; verbs
//! take it briefly. A progress thread per device serves the sockets and the retransmit timers
//! while no application thread does (see [`Progress`]).

mod io;
mod options;
mod tap;

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use transport::{
    Access, Counters, CqId, Endpoint, EndpointConfig, Event, Instant, Memory, MemoryError,
    ModifyQp, MrId, MrInfo, Mtu, PdId, QpAttr, QpState, Qpn, RecvWr, SendWr, SrqId, Transmit,
    WorkCompletion,
};

use verbs::ROCE_PORT;
use verbs::{
    AsyncEvent, DeviceAttr, Error, ErrorKind, Gid, GidEntry, GidType, LinkLayer, PhysState,
    PortAttr, PortState, Provider, QpSpec, Result,
};

/// Maps looked up per packet: foldhash, not SipHash (their keys are the device's own).
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub use io::RxPath as ReceivePath;
pub use options::{FaultInjection, Ipv4Receive, Progress, SoftOptions, UdpOffload};

/// The soft devices this host could open: one per local address (`soft:<ip>`, from
/// `getifaddrs`), described as sysfs describes an RDMA device — a port that is active when the
/// interface is up, the active MTU derived from the interface's as for RoCE, one RoCE v2 GID.
/// MTUs come from `sys` when the kernel cannot be asked.
pub fn soft_devices(sys: &std::path::Path) -> std::io::Result<Vec<host::DeviceInfo>> {
    Ok(host::local_addrs(sys)?
        .into_iter()
        .map(|a| host::DeviceInfo {
            name: format!("soft:{}", a.ip),
            provider: "soft".into(),
            pci: None,
            node_guid: None,
            fw_ver: None,
            ports: vec![host::PortInfo {
                port: 1,
                state: Some(if a.up { PortState::Active } else { PortState::Down }),
                phys_state: Some(if a.up { PhysState::LinkUp } else { PhysState::Disabled }),
                rate: String::new(),
                speed_gbps: None,
                width: None,
                link_layer: LinkLayer::Ethernet,
                active_mtu: a.mtu.and_then(host::active_mtu_for),
                gids: vec![GidEntry {
                    index: 0,
                    gid: Gid::from_ip(a.ip),
                    gid_type: GidType::RoceV2,
                    netdev: Some(a.netdev.clone()),
                }],
                netdev: Some(a.netdev),
            }],
        })
        .collect())
}

/// The one rule for holding back what the engine would send (the ACK of what just arrived,
/// mostly) when a busy poll or a completion-channel wait hands the application completions:
/// the application usually posts at once, and that post's doorbell sends both in one
/// `sendmmsg`. Held at most once: a poll that returns nothing, or the next one that returns
/// something without a post in between, sends. Whatever is held also goes out when a QP or
/// the device is destroyed (`transmit` sends all the engine has).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct HeldBack {
    held: bool,
}

impl HeldBack {
    /// A poll (or wait) returned completions (`returned`) or none: whether to send now.
    fn after_poll(&mut self, returned: bool) -> bool {
        let hold = returned && !self.held;
        self.held = hold;
        !hold
    }

    /// The application posted: its doorbell sent what was held.
    fn sent(&mut self) {
        self.held = false;
    }
}

/// The soft device's registered memory: one zeroed buffer per region it allocated (the
/// region's virtual address is the buffer's real address, as a NIC would see it), or device
/// memory it was given (a GPU's buffer, read and written through its driver's copy engine).
#[derive(Debug, Default)]
struct SoftMemory {
    bufs: HashMap<MrId, Buf>,
    /// The device regions among them: what a completion flushes (none on a host-memory run).
    devices: Vec<Arc<dyn verbs::DeviceMemory>>,
    next: u32,
    /// The fault-injection hook ([`crate::FaultInjection`]).
    fault: Option<Fault>,
}

/// A region's bytes.
#[derive(Debug)]
enum Buf {
    /// Host memory the device allocated.
    Host(Box<[u8]>),
    /// Device memory (a GPU buffer), copied through.
    Device(Arc<dyn verbs::DeviceMemory>),
}

impl Buf {
    fn len(&self) -> usize {
        match self {
            Buf::Host(b) => b.len(),
            Buf::Device(d) => d.len(),
        }
    }
}

/// Corrupts (or, with `drop`, leaves out) every `every`-th payload the transport places,
/// after its ICRC was checked.
#[derive(Debug, Clone, Copy)]
struct Fault {
    every: u64,
    drop: bool,
    placed: u64,
    corrupted: u64,
}

impl SoftMemory {
    /// The region and the start of `[offset, offset + len)` in it, checked.
    fn range(&self, mr: MrId, offset: u64, len: usize) -> Result<(&Buf, usize), MemoryError> {
        let b = self.bufs.get(&mr).ok_or(MemoryError::UnknownRegion(mr))?;
        let s = usize::try_from(offset).map_err(|_| MemoryError::OutOfBounds)?;
        match s.checked_add(len) {
            Some(e) if e <= b.len() => Ok((b, s)),
            _ => Err(MemoryError::OutOfBounds),
        }
    }

    /// Copies every device region's staged writes into the device ([`verbs::DeviceMemory::flush`]).
    /// A failed copy leaves the bytes out: the application's checks see it.
    fn flush_devices(&self) {
        for d in &self.devices {
            let _ = d.flush();
        }
    }

    /// Adds a region (and, if it is device memory, to those a completion flushes).
    fn insert(&mut self, id: MrId, buf: Buf) {
        if let Buf::Device(d) = &buf {
            self.devices.push(d.clone());
        }
        self.bufs.insert(id, buf);
    }

    /// Removes a region.
    fn remove(&mut self, id: MrId) {
        if let Some(Buf::Device(d)) = self.bufs.remove(&id) {
            // One entry per registration: the same memory may be registered twice.
            if let Some(i) = self.devices.iter().position(|x| Arc::ptr_eq(x, &d)) {
                self.devices.swap_remove(i);
            }
        }
    }

    /// Copies `data` in, with no fault injection (the application's own writes).
    fn write_plain(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        let s = self.range(mr, offset, data.len())?.1;
        match self.bufs.get_mut(&mr).ok_or(MemoryError::UnknownRegion(mr))? {
            Buf::Host(b) => b[s..s + data.len()].copy_from_slice(data),
            Buf::Device(d) => d.write(s, data).map_err(|_| MemoryError::Device)?,
        }
        Ok(())
    }

    /// Replaces the 64-bit word at `offset` with `f` of it; returns the original value. On
    /// device memory a read and a write through the copy engine: the soft device serializes
    /// its own accesses, as a NIC's atomics are atomic only among the NIC's.
    fn word(
        &mut self,
        mr: MrId,
        offset: u64,
        f: impl FnOnce(u64) -> u64,
    ) -> Result<u64, MemoryError> {
        let s = self.range(mr, offset, 8)?.1;
        match self.bufs.get_mut(&mr).ok_or(MemoryError::UnknownRegion(mr))? {
            Buf::Host(b) => {
                let w: &mut [u8; 8] =
                    (&mut b[s..s + 8]).try_into().map_err(|_| MemoryError::OutOfBounds)?;
                let orig = u64::from_ne_bytes(*w);
                *w = f(orig).to_ne_bytes();
                Ok(orig)
            }
            Buf::Device(d) => {
                let mut w = [0u8; 8];
                d.read(s, &mut w).map_err(|_| MemoryError::Device)?;
                let orig = u64::from_ne_bytes(w);
                d.write(s, &f(orig).to_ne_bytes()).map_err(|_| MemoryError::Device)?;
                Ok(orig)
            }
        }
    }
}

impl Memory for SoftMemory {
    fn read(&self, mr: MrId, offset: u64, out: &mut [u8]) -> Result<(), MemoryError> {
        match self.range(mr, offset, out.len())? {
            (Buf::Host(b), s) => out.copy_from_slice(&b[s..s + out.len()]),
            (Buf::Device(d), s) => d.read(s, out).map_err(|_| MemoryError::Device)?,
        }
        Ok(())
    }

    fn write(&mut self, mr: MrId, offset: u64, data: &[u8]) -> Result<(), MemoryError> {
        if let Some(f) = &mut self.fault
            && f.drop
            && !data.is_empty()
        {
            f.placed += 1;
            if f.placed.is_multiple_of(f.every) {
                // Checked as a placement would be, then left out.
                f.corrupted += 1;
                return self.range(mr, offset, data.len()).map(|_| ());
            }
        }
        self.write_plain(mr, offset, data)?;
        // The transport places a payload whose ICRC it verified: the hook flips one byte
        // of it, so the damage reaches the application as a bad link past the NIC would.
        if let Some(f) = &mut self.fault
            && !f.drop
            && !data.is_empty()
        {
            f.placed += 1;
            if f.placed.is_multiple_of(f.every) {
                f.corrupted += 1;
                let at = offset + (data.len() / 2) as u64;
                let mut byte = [0u8; 1];
                self.read(mr, at, &mut byte)?;
                self.write_plain(mr, at, &[byte[0] ^ 0x5a])?;
            }
        }
        Ok(())
    }

    fn compare_swap(
        &mut self,
        mr: MrId,
        offset: u64,
        cmp: u64,
        swap: u64,
    ) -> Result<u64, MemoryError> {
        self.word(mr, offset, |v| if v == cmp { swap } else { v })
    }

    fn fetch_add(&mut self, mr: MrId, offset: u64, add: u64) -> Result<u64, MemoryError> {
        self.word(mr, offset, |v| v.wrapping_add(add))
    }
}

/// A completion channel: CQ events wait here.
#[derive(Debug, Default)]
struct Channel {
    events: Mutex<VecDeque<CqId>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct CqMeta {
    channel: Option<u32>,
    armed: bool,
}

/// Counters of the I/O driver, added to the engine's.
#[derive(Debug, Default, Clone, Copy)]
struct DriverCounters {
    /// IPv4 packets whose Identification was recovered from the ICRC (16-bit check).
    icrc_unverified: u64,
    /// Datagrams the socket would not take right away (sent later).
    tx_backlogged: u64,
    /// Datagrams dropped because the network was unreachable.
    tx_unreachable: u64,
}

/// Everything the engine lock guards.
struct State {
    ep: Endpoint<SoftMemory>,
    cqs: HashMap<CqId, CqMeta>,
    armed: Vec<CqId>,
    channels: Vec<Arc<Channel>>,
    rx: io::RxBuffers,
    /// Sealed datagrams the socket had no room for.
    backlog: VecDeque<Transmit>,
    /// The sockets datagrams leave from, by UDP source port.
    ports: io::SourcePorts,
    batch: Vec<Transmit>,
    port_ok: bool,
    driver: DriverCounters,
    /// Whether the engine's datagrams are held back for the application's next post.
    held: HeldBack,
    /// When the device last received a datagram.
    rx_at: Instant,
}

impl State {
    /// Puts the batch's datagrams from `from` on back at the head of the backlog, in order:
    /// the socket did not take them.
    fn requeue(&mut self, from: usize) {
        while self.batch.len() > from {
            if let Some(t) = self.batch.pop() {
                self.backlog.push_front(t);
            }
        }
    }
}

thread_local! {
    /// Whether this thread is the one driving the device from `get_cq_event`.
    static DRIVING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The parts of a device its progress thread shares.
struct Shared {
    name: String,
    /// The port's active MTU: derived from its interface's MTU as the kernel does for RoCE
    /// (4096 on loopback, 1024 on a 1500-byte Ethernet).
    active_mtu: Mtu,
    progress: Progress,
    io: io::Sockets,
    state: Mutex<State>,
    epoch: std::time::Instant,
    stop: AtomicBool,
    /// Moves with every busy poll (or byte watch) by an application thread and every return
    /// from `get_cq_event`: the progress thread serves the device only while it stands still.
    app_active: AtomicU64,
    /// Application threads now waiting in `get_cq_event`, driving the device themselves.
    app_waiters: AtomicU64,
    /// The progress thread sleeps while those threads drive the device.
    parked: AtomicBool,
    /// Wakes the parked progress thread [`LEAVE_GRACE`] after the last of them left; if one
    /// came back meanwhile, it parks again (a timerfd, armed at most once a grace: setting a
    /// timer costs a hypervisor exit in a VM, ~3 µs, too much to pay per event).
    park_timer: RawFd,
    park_armed: AtomicBool,
    /// When the last waiting application thread left `get_cq_event` (ns since `epoch`).
    left_at: AtomicU64,
    /// When an application thread last entered `get_cq_event` (ns since `epoch`).
    entered_at: AtomicU64,
    /// Wakes those threads when another thread delivers a channel event.
    app_wake_fd: RawFd,
    /// When the progress thread will wake up by itself (ns since `epoch`; MAX: never).
    sleeping_until: AtomicU64,
    wake_fd: RawFd,
    events: Mutex<VecDeque<AsyncEvent>>,
    events_cv: Condvar,
}

/// A soft RoCEv2 device.
pub struct SoftDevice {
    sh: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for SoftDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftDevice").field("name", &self.sh.name).finish()
    }
}

impl SoftDevice {
    /// Opens the device at `ip`:`port` (binds its sockets).
    pub fn open(ip: IpAddr, port: u16, opts: &SoftOptions) -> Result<SoftDevice> {
        let name = device_name(ip, port);
        let io = io::Sockets::open(
            ip,
            port,
            opts.ipv4_receive,
            opts.udp_offload == UdpOffload::Auto,
            opts.receive_buffer,
        )
        .map_err(|source| Error::Open { device: name.clone(), source })?;
        SoftDevice::start(name, io, opts)
    }

    /// Opens `soft:127.0.0.1`, or — when another process already holds it — the next
    /// loopback address (127.0.0.2, …, 127.0.0.254), so that two tools on one host just work,
    /// as two processes sharing one RDMA NIC do.
    pub fn open_default_loopback(opts: &SoftOptions) -> Result<SoftDevice> {
        for last in 1..=254u8 {
            let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
            match io::Sockets::open(ip, ROCE_PORT, opts.ipv4_receive, false, opts.receive_buffer) {
                Ok(io) => return SoftDevice::start(device_name(ip, ROCE_PORT), io, opts),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(source) => {
                    return Err(Error::Open { device: device_name(ip, ROCE_PORT), source });
                }
            }
        }
        Err(Error::Open {
            device: "soft".into(),
            source: std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "UDP port 4791 is taken on every loopback address 127.0.0.1-254 (is rdma_rxe \
                 loaded, or another program bound to 0.0.0.0:4791?)",
            ),
        })
    }

    fn start(name: String, mut io: io::Sockets, opts: &SoftOptions) -> Result<SoftDevice> {
        if let Some(path) = &opts.capture {
            let path = std::path::PathBuf::from(
                path.to_string_lossy().replace("{ip}", &io.ip.to_string()),
            );
            let tap = tap::Tap::create(&path, &name)
                .map_err(|source| Error::Open { device: name.clone(), source })?;
            io.tap = Some(tap);
        }
        let mut seed = [0u8; 16];
        getrandom::fill(&mut seed).map_err(|e| Error::Open {
            device: name.clone(),
            source: std::io::Error::other(format!("no random source for keys: {e}")),
        })?;
        let [k, q] =
            [0, 8].map(|i| u64::from_ne_bytes(seed[i..i + 8].try_into().unwrap_or([0; 8])));
        let mut cfg = EndpointConfig::new(io.ip, k);
        // QPNs from a random start: a local process that cannot guess one cannot forge a
        // NAK that ends a connection.
        cfg.first_qpn = EndpointConfig::random_qpn(q);
        // READ responses asked for at once fit the receive buffer: a datagram costs it about
        // twice its payload, and half is left for what else arrives (SENDs, WRITEs, ACKs).
        // Without CAP_NET_ADMIN the buffer is rmem_max (212992 by default, 416 KiB charged):
        // about 100 KiB of READ responses in flight, which a loopback turns round in well
        // under a millisecond.
        cfg.read_window = (io.receive_buffer() as u64 / 4).max(64 << 10);
        cfg.read_window_qp = cfg.read_window_qp.min(cfg.read_window);
        // SENDs and WRITEs from all of its QPs together, the same: the peer's buffer is not
        // known, a like peer's is this one's.
        cfg.send_window_device = cfg.read_window;
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake_fd < 0 {
            return Err(Error::Open { device: name, source: std::io::Error::last_os_error() });
        }
        // SAFETY: as above.
        let app_wake_fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if app_wake_fd < 0 {
            let source = std::io::Error::last_os_error();
            // SAFETY: closes the eventfd opened above, ours alone.
            unsafe { libc::close(wake_fd) };
            return Err(Error::Open { device: name, source });
        }
        // SAFETY: timerfd_create has no memory-safety preconditions; the result is checked.
        let park_timer = unsafe {
            libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
        };
        if park_timer < 0 {
            let source = std::io::Error::last_os_error();
            // SAFETY: closes the eventfds opened above, ours alone.
            unsafe {
                libc::close(wake_fd);
                libc::close(app_wake_fd);
            }
            return Err(Error::Open { device: name, source });
        }
        let (rx, batch) = (io::RxBuffers::for_sockets(&io), Vec::with_capacity(io.collect_len(8)));
        let active_mtu = host::local_addrs(&host::default_root())
            .ok()
            // 127.0.0.2 and the rest of 127/8 answer on lo without being listed.
            .and_then(|v| {
                v.into_iter().find(|a| a.ip == io.ip || io.ip.is_loopback() && a.ip.is_loopback())
            })
            .and_then(|a| a.mtu)
            .and_then(host::active_mtu_for)
            .and_then(Mtu::from_bytes)
            .unwrap_or(Mtu::Mtu1024);
        let sh = Arc::new(Shared {
            name,
            active_mtu,
            progress: opts.progress,
            io,
            state: Mutex::new(State {
                ep: Endpoint::new(
                    cfg,
                    SoftMemory {
                        fault: {
                            let f = opts.fault;
                            let n = |v: Option<u64>| v.filter(|n| *n > 0);
                            n(f.corrupt_every)
                                .map(|every| (every, false))
                                .or(n(f.drop_every).map(|every| (every, true)))
                                .map(|(every, drop)| Fault { every, drop, placed: 0, corrupted: 0 })
                        },
                        ..SoftMemory::default()
                    },
                ),
                cqs: HashMap::default(),
                armed: Vec::new(),
                channels: Vec::new(),
                rx,
                backlog: VecDeque::new(),
                ports: io::SourcePorts::default(),
                batch,
                port_ok: true,
                driver: DriverCounters::default(),
                held: HeldBack::default(),
                rx_at: Instant(0),
            }),
            epoch: std::time::Instant::now(),
            stop: AtomicBool::new(false),
            app_active: AtomicU64::new(0),
            app_waiters: AtomicU64::new(0),
            parked: AtomicBool::new(false),
            park_timer,
            park_armed: AtomicBool::new(false),
            left_at: AtomicU64::new(0),
            entered_at: AtomicU64::new(0),
            app_wake_fd,
            sleeping_until: AtomicU64::new(u64::MAX),
            wake_fd,
            events: Mutex::new(VecDeque::new()),
            events_cv: Condvar::new(),
        });
        let t = sh.clone();
        let thread = std::thread::Builder::new()
            .name(format!("podnet-soft {}", sh.name))
            .spawn(move || t.progress_loop())
            .map_err(|source| Error::Open { device: sh.name.clone(), source })?;
        Ok(SoftDevice { sh, thread: Some(thread) })
    }

    /// How this device receives IPv4 (raw socket, or UDP with the ID recovered).
    pub fn receive_path(&self) -> ReceivePath {
        self.sh.io.rx_path
    }
}

impl Drop for SoftDevice {
    fn drop(&mut self) {
        // What a busy poll held back (the ACK of the last message, typically) still goes out.
        {
            let mut st = lock(&self.sh.state);
            let now = self.sh.now();
            self.sh.transmit(&mut st, now);
        }
        self.sh.stop.store(true, Ordering::SeqCst);
        self.sh.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // SAFETY: the fds are ours, and the progress thread that also used them has exited
        // (no application thread can be waiting: it would hold a reference to the device).
        unsafe {
            libc::close(self.sh.wake_fd);
            libc::close(self.sh.app_wake_fd);
            libc::close(self.sh.park_timer);
        }
    }
}

fn device_name(ip: IpAddr, port: u16) -> String {
    match (ip, port) {
        (_, ROCE_PORT) => format!("soft:{ip}"),
        (IpAddr::V4(_), p) => format!("soft:{ip}:{p}"),
        (IpAddr::V6(_), p) => format!("soft:[{ip}]:{p}"),
    }
}

/// How long the progress thread sleeps while an application thread drives the device; it
/// takes over after a whole nap in which none did.
const APP_NAP: Duration = Duration::from_micros(500);

/// The longest the progress thread sleeps at a time while an application thread waits in
/// `get_cq_event` (this bounds a missed wake-up).
const PARK_MAX: Duration = Duration::from_secs(1);

/// How long after the last application thread left `get_cq_event` the progress thread
/// takes over, unless one came back.
const LEAVE_GRACE: Duration = Duration::from_millis(1);

/// How long a busy device's progress thread keeps receiving without a sleep after the last
/// datagram, while no application thread polls (nanoseconds).
const LINGER_NS: u64 = 2_000_000;

/// `d` as a `timespec` (for `ppoll` and `timerfd_settime`).
fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    }
}

/// Empties an eventfd or timerfd that polled readable (the count is not needed).
fn drain_counter(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64 from a descriptor of ours.
    unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn now(&self) -> Instant {
        Instant(self.epoch.elapsed().as_nanos() as u64)
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.wake_fd, (&raw const one).cast(), 8) };
    }

    /// Wakes the progress thread if the engine now wants a timer earlier than it sleeps.
    fn kick(&self, st: &State) {
        if let Some(t) = st.ep.poll_timeout()
            && t.0 < self.sleeping_until.load(Ordering::Acquire)
        {
            self.wake();
        }
    }

    /// One round of device work: receive what waits (if `rx`), fire due timers, send what
    /// the engine has if `send` (else the caller sends soon), and deliver CQ and async
    /// events. Returns the time it last read.
    fn drive(&self, st: &mut State, rx: bool, send: bool) -> Instant {
        let mut now = self.now();
        if rx {
            let mut got_any = false;
            for _ in 0..8 {
                let State { ep, rx, driver, .. } = &mut *st;
                let got = self.io.recv_batch(rx, |meta, bytes, recovered| {
                    if recovered.is_some() {
                        driver.icrc_unverified += 1;
                    }
                    if let Some(tap) = &self.io.tap {
                        tap.received(meta, bytes);
                    }
                    ep.handle_datagram(now, meta, bytes);
                });
                match got {
                    Ok(n) if n == io::BATCH => {
                        got_any = true;
                        self.transmit(st, now);
                        continue;
                    }
                    Ok(n) => {
                        got_any |= n > 0;
                        break;
                    }
                    _ => break,
                }
            }
            // Reading the clock costs as much as a small packet: only when time passed in work.
            if got_any {
                now = self.now();
                st.rx_at = now;
            }
        }
        if st.ep.poll_timeout().is_some_and(|t| t <= now) {
            st.ep.handle_timeout(now);
        }
        // Completions and events first, so that anything a datagram sent now tells the peer
        // is already visible here; then again for what sending completed.
        self.notify(st);
        if send {
            self.transmit(st, now);
            self.notify(st);
        }
        now
    }

    /// Sends everything the engine has ready, in `sendmmsg` batches.
    fn transmit(&self, st: &mut State, now: Instant) {
        loop {
            // What the last round sent: its buffers go back to the engine.
            let State { batch, ep, .. } = &mut *st;
            for t in batch.drain(..) {
                ep.recycle(t.payload);
            }
            // A sendmmsg's worth per source port in the batch (each connection's go together
            // below), so that many connections cost a sendmmsg each per round, not one per
            // datagram.
            let (mut ports, mut seen) = ([0u16; 8], 0);
            while st.batch.len() < self.io.collect_len(seen) {
                let t = if let Some(t) = st.backlog.pop_front() {
                    t
                } else if let Some(mut t) = st.ep.poll_transmit(now) {
                    st.ports.assign(&self.io, &mut t);
                    t
                } else {
                    break;
                };
                if seen < ports.len() && !ports[..seen].contains(&t.src_port) {
                    ports[seen] = t.src_port;
                    seen += 1;
                }
                st.batch.push(t);
            }
            if st.batch.is_empty() {
                return;
            }
            // One sendmmsg per source port: each connection's datagrams together, in their
            // order (a stable sort; connections' datagrams may pass each other).
            if seen > 1 {
                st.batch.sort_by_key(|t| t.src_port);
            }
            match self.io.send_batch(&mut st.batch, &st.ports) {
                Ok(n) => {
                    self.port_up(st, true);
                    st.requeue(n);
                    if n == 0 {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    st.driver.tx_backlogged += st.batch.len() as u64;
                    st.requeue(0);
                    return;
                }
                Err(e) => {
                    // The network is unreachable (or the peer's family differs): the first
                    // datagram is lost, as on a wire; the transport retransmits.
                    let unreachable = matches!(
                        e.raw_os_error(),
                        Some(libc::ENETUNREACH | libc::ENETDOWN | libc::EHOSTUNREACH)
                    );
                    if unreachable {
                        self.port_up(st, false);
                    }
                    st.driver.tx_unreachable += 1;
                    st.requeue(1);
                }
            }
        }
    }

    fn port_up(&self, st: &mut State, up: bool) {
        if st.port_ok != up {
            st.port_ok = up;
            self.push_event(if up { AsyncEvent::PortActive } else { AsyncEvent::PortErr });
        }
    }

    fn push_event(&self, e: AsyncEvent) {
        self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(e);
        self.events_cv.notify_all();
    }

    /// Fires channel events of armed CQs that have completions; forwards engine events.
    fn notify(&self, st: &mut State) {
        let mut i = 0;
        while i < st.armed.len() {
            let cq = st.armed[i];
            if st.ep.cq_len(cq) == 0 {
                i += 1;
                continue;
            }
            st.armed.swap_remove(i);
            let Some(meta) = st.cqs.get_mut(&cq) else { continue };
            meta.armed = false;
            if let Some(ch) = meta.channel.and_then(|c| st.channels.get(c as usize)) {
                ch.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(cq);
                if self.app_waiters.load(Ordering::Acquire) > 0 && !DRIVING.get() {
                    // A thread waiting in `get_cq_event` sleeps in ppoll, not on the condvar.
                    let one: u64 = 1;
                    // SAFETY: writes 8 bytes from a live u64 to our eventfd.
                    unsafe { libc::write(self.app_wake_fd, (&raw const one).cast(), 8) };
                }
            }
        }
        while let Some(e) = st.ep.poll_event() {
            self.push_event(match e {
                Event::QpFatal(q) => AsyncEvent::QpFatal(q),
                Event::SrqLimitReached(s) => AsyncEvent::SrqLimitReached(s),
            });
        }
    }

    /// An application thread drove the device (see [`Shared::app_active`]). A plain load and
    /// store: writers that race still move it, and a poll pays no locked instruction.
    fn app_drove(&self) {
        let v = self.app_active.load(Ordering::Relaxed);
        self.app_active.store(v.wrapping_add(1), Ordering::Relaxed);
    }

    /// Sleeps while an application thread waits in `get_cq_event`: until [`LEAVE_GRACE`]
    /// after the last one left without another coming back (see [`Shared::app_left`]),
    /// the device is stopped or kicked, or [`PARK_MAX`] passes.
    fn park(&self) {
        // The waiting thread serves the engine's timers meanwhile: no kick for this one.
        self.sleeping_until.store(0, Ordering::Release);
        self.parked.store(true, Ordering::SeqCst);
        // Set, then look: a thread leaving meanwhile sees `parked` (and arms the timer) or
        // this one sees it gone and when it left.
        while !self.stop.load(Ordering::Acquire) {
            if self.app_waiters.load(Ordering::SeqCst) == 0 {
                let since = self.now().0.saturating_sub(self.left_at.load(Ordering::SeqCst));
                let grace = LEAVE_GRACE.as_nanos() as u64;
                if since >= grace {
                    break;
                }
                // Left less than a grace ago (and maybe came and left again since the
                // timer was armed): sleep out the rest.
                if !self.park_armed.swap(true, Ordering::SeqCst) {
                    self.set_park_timer(Duration::from_nanos(grace - since));
                }
            }
            let ts = timespec(PARK_MAX);
            let mut fds = [
                libc::pollfd { fd: self.wake_fd, events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.park_timer, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: `fds` and `ts` live across the call, with their true length.
            unsafe { libc::ppoll(fds.as_mut_ptr(), 2, &raw const ts, std::ptr::null()) };
            let [kick, timer] = fds.map(|f| f.revents & libc::POLLIN != 0);
            if timer {
                drain_counter(self.park_timer);
                self.park_armed.store(false, Ordering::SeqCst);
            }
            if kick {
                drain_counter(self.wake_fd);
                break;
            }
        }
        self.parked.store(false, Ordering::SeqCst);
    }

    /// Arms the park timer to fire once, `after` from now (zero: disarms it).
    fn set_park_timer(&self, after: Duration) {
        let spec =
            libc::itimerspec { it_interval: timespec(Duration::ZERO), it_value: timespec(after) };
        // SAFETY: `spec` lives across the call; the old value is not asked for.
        unsafe { libc::timerfd_settime(self.park_timer, 0, &raw const spec, std::ptr::null_mut()) };
    }

    /// An application thread enters `get_cq_event`: it drives the device from now on. A
    /// wake-up armed when the last one left is called off only when events are sparse (the
    /// last entry a grace ago or more: an agent waiting for probes) — where events are dense
    /// (a latency loop) calling it off would set a timer per event, so it stays armed and the
    /// parked thread, woken at most once a grace, sees a waiter and parks again.
    fn app_entered(&self) {
        self.app_waiters.fetch_add(1, Ordering::SeqCst);
        let now = self.now().0;
        let before = self.entered_at.swap(now, Ordering::Relaxed);
        if now.saturating_sub(before) >= LEAVE_GRACE.as_nanos() as u64
            && self.park_armed.swap(false, Ordering::SeqCst)
        {
            self.set_park_timer(Duration::ZERO);
        }
    }

    /// An application thread leaves `get_cq_event`. The last one out wakes a parked progress
    /// thread [`LEAVE_GRACE`] later unless one comes back first — an application that
    /// waits for events in a loop leaves only to take its completions, and waking the
    /// progress thread each time would cost a wake-up (and a race for the socket) per event.
    fn app_left(&self) {
        if self.app_waiters.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.left_at.store(self.now().0, Ordering::SeqCst);
            if self.parked.load(Ordering::SeqCst) && !self.park_armed.swap(true, Ordering::SeqCst) {
                self.set_park_timer(LEAVE_GRACE);
            }
        }
    }

    fn progress_loop(&self) {
        let mut seen = self.app_active.load(Ordering::Relaxed);
        while !self.stop.load(Ordering::Acquire) {
            // A thread waiting for a CQ event (event mode) drives the device: sleep until
            // shortly after the last such thread left `get_cq_event` for good (see `park`),
            // not in naps — an agent that always waits would otherwise cost a wake-up a nap.
            if self.app_waiters.load(Ordering::SeqCst) > 0 {
                self.park();
                seen = self.app_active.load(Ordering::Relaxed);
                continue;
            }
            // A thread polling its CQ (busy mode) drives it too; stay out of its way while it
            // does, and until it has not for a whole nap.
            let now_seen = self.app_active.load(Ordering::Relaxed);
            if now_seen != seen {
                seen = now_seen;
                std::thread::sleep(APP_NAP);
                continue;
            }
            let (deadline, want_out) = {
                let mut st = lock(&self.state);
                let now = self.drive(&mut st, true, true);
                if self.progress == Progress::Busy && now.0.saturating_sub(st.rx_at.0) < LINGER_NS {
                    // A busy device that just received keeps receiving without a sleep, as
                    // its application would if it polled: a side that waits elsewhere (on a
                    // side channel, a socket) answers as fast as one that polls. It yields
                    // between rounds: an application thread on the same core that wants the
                    // lock gets it (and is then seen driving).
                    drop(st);
                    std::thread::yield_now();
                    continue;
                }
                let d = st.ep.poll_timeout().map_or(u64::MAX, |t| t.0);
                self.sleeping_until.store(d, Ordering::Release);
                (d, !st.backlog.is_empty())
            };
            let mut fds = [
                libc::pollfd { fd: self.io.rx_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.wake_fd, events: libc::POLLIN, revents: 0 },
                libc::pollfd {
                    fd: self.io.tx_fd(),
                    events: if want_out { libc::POLLOUT } else { 0 },
                    revents: 0,
                },
            ];
            let mut busy_cap = None;
            if self.progress == Progress::Busy {
                // Look again soon: the application may start polling.
                busy_cap = Some(Duration::from_millis(1));
            }
            let wait = match deadline {
                u64::MAX => busy_cap,
                d => {
                    let w = Duration::from_nanos(d.saturating_sub(self.now().0));
                    Some(busy_cap.map_or(w, |c| c.min(w)))
                }
            };
            let ts = wait.map(timespec);
            let tsp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
            // SAFETY: `fds` and `ts` live across the call, with their true length.
            unsafe {
                libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tsp, std::ptr::null())
            };
            self.sleeping_until.store(0, Ordering::Release);
            if fds[1].revents & libc::POLLIN != 0 {
                drain_counter(self.wake_fd);
            }
        }
    }
}

/// What a soft device takes (`ibv_query_device`'s answer): rxe's limits where memory allows,
/// and no more than a process should hold (a region of 4 GiB, 4 Mi CQ entries).
pub const LIMITS: DeviceAttr = DeviceAttr {
    max_mr_size: 1 << 32,
    max_qp: 0x4000,
    max_qp_wr: 0x4000,
    max_sge: 32,
    max_cq: 0x4000,
    max_cqe: 0x40_0000,
    max_mr: 0x4_0000,
    max_pd: 0x7ff0,
    max_srq: 0x4000,
    max_srq_wr: 0x4000,
    max_inline_data: Some(verbs::MAX_INLINE_DATA),
};

/// `asked` within `max`, else the verbs error that names both.
fn within(what: &str, asked: u64, unit: &str, max: u64) -> Result<()> {
    if asked <= max {
        return Ok(());
    }
    Err(Error::refused(
        ErrorKind::InvalidArgument,
        format!("a {what} {asked} {unit}: the device takes at most {max} (podnet devices --json)"),
    ))
}

/// Fewer than `max` of `what` exist, else the verbs error.
fn exhausted(what: &str, now: usize, max: u32) -> Result<()> {
    if now < max as usize {
        return Ok(());
    }
    Err(Error::refused(
        ErrorKind::ResourceExhausted,
        format!("{what}: the device has its most, {max}"),
    ))
}

/// Copies bytes out of the region `lkey` names.
fn read_region(st: &State, lkey: u32, offset: usize, out: &mut [u8]) -> Result<()> {
    let id = st.ep.mr(lkey).map(|m| m.id);
    match id.map(|id| st.ep.memory().read(id, offset as u64, out)) {
        Some(Ok(())) => Ok(()),
        _ => Err(Error::OutOfBounds { offset, len: out.len(), region_len: 0 }),
    }
}

impl SoftDevice {
    /// Registers `buf` in `pd`: its address is the host buffer's own, or the device
    /// memory's.
    fn register(&self, pd: PdId, buf: Buf, access: Access) -> Result<MrInfo> {
        let mut st = lock(&self.sh.state);
        exhausted("memory regions", st.ep.memory().bufs.len(), LIMITS.max_mr)?;
        let (addr, len) = match &buf {
            Buf::Host(b) => (b.as_ptr() as u64, b.len()),
            Buf::Device(d) => (d.addr(), d.len()),
        };
        let mem = st.ep.memory_mut();
        let id = MrId(mem.next);
        mem.next = mem.next.wrapping_add(1);
        mem.insert(id, buf);
        match st.ep.register_mr(pd, id, addr, len as u64, access) {
            Ok(info) => Ok(info),
            Err(e) => {
                st.ep.memory_mut().remove(id);
                Err(e.into())
            }
        }
    }
}

impl Provider for SoftDevice {
    fn device_name(&self) -> String {
        self.sh.name.clone()
    }

    fn provider_kind(&self) -> verbs::ProviderKind {
        verbs::ProviderKind::Soft
    }

    fn ip(&self) -> IpAddr {
        self.sh.io.ip
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(LIMITS)
    }

    fn port_attr(&self) -> PortAttr {
        let up = lock(&self.sh.state).port_ok;
        PortAttr {
            state: if up { PortState::Active } else { PortState::Down },
            phys_state: Some(if up { PhysState::LinkUp } else { PhysState::Disabled }),
            max_mtu: Mtu::Mtu4096,
            active_mtu: self.sh.active_mtu,
            lid: 0,
            link_layer: LinkLayer::Ethernet,
        }
    }

    fn gid_table(&self) -> Vec<GidEntry> {
        let gid = Gid::from_ip(self.sh.io.ip);
        vec![GidEntry { index: 0, gid, gid_type: GidType::RoceV2, netdev: None }]
    }

    fn alloc_pd(&self) -> Result<PdId> {
        Ok(lock(&self.sh.state).ep.alloc_pd()?)
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        Ok(lock(&self.sh.state).ep.dealloc_pd(pd)?)
    }

    fn reg_mr(&self, pd: PdId, len: usize, access: Access) -> Result<MrInfo> {
        // Checked before the region's memory is allocated.
        within("memory region of", len as u64, "bytes", LIMITS.max_mr_size)?;
        exhausted("memory regions", lock(&self.sh.state).ep.memory().bufs.len(), LIMITS.max_mr)?;
        self.register(pd, Buf::Host(vec![0u8; len].into_boxed_slice()), access)
    }

    fn reg_device_mr(
        &self,
        pd: PdId,
        device: Arc<dyn verbs::DeviceMemory>,
        access: Access,
    ) -> Result<MrInfo> {
        within("memory region of", device.len() as u64, "bytes", LIMITS.max_mr_size)?;
        self.register(pd, Buf::Device(device), access)
    }

    fn dereg_mr(&self, lkey: u32) {
        let mut st = lock(&self.sh.state);
        if let Some(info) = st.ep.deregister_mr(lkey) {
            st.ep.memory_mut().remove(info.id);
        }
    }

    fn mr_read(&self, lkey: u32, offset: usize, out: &mut [u8]) -> Result<()> {
        read_region(&lock(&self.sh.state), lkey, offset, out)
    }

    fn mr_watch_byte(&self, lkey: u32, offset: usize, want: u8, spins: u32) -> Result<bool> {
        let busy = self.sh.progress == Progress::Busy;
        let mut b = [0u8; 1];
        for _ in 0..spins {
            let mut st = lock(&self.sh.state);
            read_region(&st, lkey, offset, &mut b)?;
            if b[0] == want {
                return Ok(true);
            }
            if !busy {
                continue; // the progress thread receives
            }
            // As a busy poll of an empty CQ does: receive, holding what the engine would
            // send (the ACK of the write just watched for) for the post that follows.
            let now = self.sh.drive(&mut st, true, false);
            self.sh.app_drove();
            read_region(&st, lkey, offset, &mut b)?;
            let landed = b[0] == want;
            if st.held.after_poll(landed) {
                self.sh.transmit(&mut st, now);
            }
            if landed {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn mr_write(&self, lkey: u32, offset: usize, data: &[u8]) -> Result<()> {
        let mut st = lock(&self.sh.state);
        let id = st.ep.mr(lkey).map(|m| m.id);
        let r = id.map(|id| st.ep.memory_mut().write_plain(id, offset as u64, data));
        match r {
            Some(Ok(())) => Ok(()),
            _ => Err(Error::OutOfBounds { offset, len: data.len(), region_len: 0 }),
        }
    }

    fn create_channel(&self) -> Result<u32> {
        let mut st = lock(&self.sh.state);
        st.channels.push(Arc::new(Channel::default()));
        Ok(st.channels.len() as u32 - 1)
    }

    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> Result<CqId> {
        within("completion queue of", u64::from(cqe), "entries", u64::from(LIMITS.max_cqe))?;
        let mut st = lock(&self.sh.state);
        exhausted("completion queues", st.cqs.len(), LIMITS.max_cq)?;
        let cq = st.ep.create_cq();
        st.cqs.insert(cq, CqMeta { channel, armed: false });
        Ok(cq)
    }

    fn destroy_cq(&self, cq: CqId) {
        let mut st = lock(&self.sh.state);
        st.cqs.remove(&cq);
        st.armed.retain(|c| *c != cq);
        while st.ep.poll_completion(cq).is_some() {}
    }

    fn poll_cq(&self, cq: CqId, out: &mut [WorkCompletion]) -> usize {
        let mut st = lock(&self.sh.state);
        let busy = self.sh.progress == Progress::Busy;
        if busy {
            if st.ep.cq_len(cq) == 0 {
                // Receive, but hold what the engine would send (ACKs, mostly): when this poll
                // returns a completion the application usually posts at once, and the post's
                // doorbell sends both in one sendmmsg.
                self.sh.drive(&mut st, true, false);
            }
            self.sh.app_drove();
        }
        let mut n = 0;
        while n < out.len() {
            match st.ep.poll_completion(cq) {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        if n > 0 {
            // What the completions report is in device memory before the application sees
            // them (a GPU kernel may read it next).
            st.ep.memory().flush_devices();
        }
        if busy && st.held.after_poll(n > 0) {
            let now = self.sh.now();
            self.sh.transmit(&mut st, now);
        }
        n
    }

    fn req_notify_cq(&self, cq: CqId) -> Result<()> {
        let mut st = lock(&self.sh.state);
        let Some(meta) = st.cqs.get_mut(&cq) else {
            return Err(transport::Error::NoCq(cq).into());
        };
        if !meta.armed {
            meta.armed = true;
            st.armed.push(cq);
        }
        self.sh.notify(&mut st);
        Ok(())
    }

    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> Option<CqId> {
        let ch = lock(&self.sh.state).channels.get(channel as usize)?.clone();
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        // The waiting thread drives the device itself: it sleeps in ppoll on the receive
        // socket and handles what arrives, so a completion reaches it without a second
        // thread's wake-up in between. The progress thread stays away meanwhile.
        let sh = &self.sh;
        sh.app_entered();
        DRIVING.set(true);
        let pop =
            || ch.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
        let got = loop {
            if let Some(cq) = pop() {
                break Some(cq);
            }
            let next_timer = {
                let mut st = lock(&sh.state);
                // As a busy poll does: hold what the engine would send (the ACK of what just
                // arrived) when there is an event to return; the application's next post
                // sends both in one sendmmsg (and anything held goes out before a sleep).
                sh.drive(&mut st, true, false);
                if let Some(cq) = pop() {
                    if st.held.after_poll(true) {
                        let now = sh.now();
                        sh.transmit(&mut st, now);
                    }
                    break Some(cq);
                }
                st.held.after_poll(false);
                let now = sh.now();
                sh.transmit(&mut st, now);
                sh.notify(&mut st);
                st.ep.poll_timeout().map(|t| t.0)
            };
            if let Some(cq) = pop() {
                break Some(cq);
            }
            let now = std::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break None;
            }
            let mut wait = deadline.map(|d| d - now);
            if let Some(t) = next_timer {
                let w = Duration::from_nanos(t.saturating_sub(sh.now().0));
                wait = Some(wait.map_or(w, |x| x.min(w)));
            }
            let ts = wait.map(timespec);
            let tsp = ts.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
            let mut fds = [
                libc::pollfd { fd: sh.io.rx_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: sh.app_wake_fd, events: libc::POLLIN, revents: 0 },
            ];
            // SAFETY: `fds` and `ts` live across the call, with their true length.
            unsafe {
                libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, tsp, std::ptr::null())
            };
            if fds[1].revents & libc::POLLIN != 0 {
                drain_counter(sh.app_wake_fd);
            }
        };
        DRIVING.set(false);
        sh.app_drove();
        sh.app_left();
        got
    }

    fn create_srq(&self, pd: PdId, max_wr: u32) -> Result<SrqId> {
        let max = u64::from(LIMITS.max_srq_wr);
        within("shared receive queue of", u64::from(max_wr), "work requests", max)?;
        let mut st = lock(&self.sh.state);
        exhausted("shared receive queues", st.ep.srq_count(), LIMITS.max_srq)?;
        Ok(st.ep.create_srq(pd, max_wr)?)
    }

    fn destroy_srq(&self, srq: SrqId) {
        let _ = lock(&self.sh.state).ep.destroy_srq(srq);
    }

    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<()> {
        let mut st = lock(&self.sh.state);
        for wr in wrs {
            st.ep.post_srq_recv(srq, wr.clone())?;
        }
        Ok(())
    }

    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()> {
        Ok(lock(&self.sh.state).ep.arm_srq_limit(srq, limit)?)
    }

    fn create_qp(&self, s: &QpSpec) -> Result<Qpn> {
        let max = u64::from(LIMITS.max_qp_wr);
        within("send queue of", u64::from(s.caps.max_send_wr), "work requests", max)?;
        within("receive queue of", u64::from(s.caps.max_recv_wr), "work requests", max)?;
        let mut st = lock(&self.sh.state);
        exhausted("queue pairs", st.ep.qp_count(), LIMITS.max_qp)?;
        Ok(st.ep.create_qp_with_srq(s.pd, s.qp_type, s.send_cq, s.recv_cq, s.caps, s.srq)?)
    }

    fn modify_qp(&self, qpn: Qpn, attr: &ModifyQp) -> Result<()> {
        let mut st = lock(&self.sh.state);
        st.ep.modify_qp(qpn, attr)?;
        let now = self.sh.now();
        self.sh.transmit(&mut st, now);
        self.sh.notify(&mut st);
        self.sh.kick(&st);
        Ok(())
    }

    fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr)> {
        Ok(lock(&self.sh.state).ep.query_qp(qpn)?)
    }

    fn destroy_qp(&self, qpn: Qpn) {
        let mut st = lock(&self.sh.state);
        // Send what the QP owes its peer first (an ACK a busy poll held back).
        let now = self.sh.now();
        self.sh.transmit(&mut st, now);
        let _ = st.ep.destroy_qp(qpn);
    }

    fn post_send(&self, qpn: Qpn, wrs: &[SendWr]) -> Result<()> {
        let mut st = lock(&self.sh.state);
        let mut r = Ok(());
        for wr in wrs {
            if let Err(e) = st.ep.post_send(qpn, wr.clone()) {
                r = Err(e.into());
                break;
            }
        }
        // The doorbell: send now, from this thread (with anything a busy poll held back).
        let now = self.sh.now();
        self.sh.transmit(&mut st, now);
        st.held.sent();
        self.sh.notify(&mut st);
        self.sh.kick(&st);
        if self.sh.progress == Progress::Busy {
            self.sh.app_drove(); // it polls next
        }
        r
    }

    fn post_recv(&self, qpn: Qpn, wrs: &[RecvWr]) -> Result<()> {
        let mut st = lock(&self.sh.state);
        for wr in wrs {
            st.ep.post_recv(qpn, wr.clone())?;
        }
        self.sh.notify(&mut st);
        Ok(())
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut q = self.sh.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(e) = q.pop_front() {
                return Some(e);
            }
            q = match deadline {
                None => {
                    self.sh.events_cv.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner)
                }
                Some(d) => {
                    let left = d.checked_duration_since(std::time::Instant::now())?;
                    self.sh
                        .events_cv
                        .wait_timeout(q, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    fn counters(&self) -> Counters {
        let st = lock(&self.sh.state);
        let mut c = st.ep.counters().clone();
        c.icrc_unverified += st.driver.icrc_unverified;
        c.rx_socket_drops += self.sh.io.socket_drops();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::HeldBack;

    #[test]
    fn held_back_at_most_once_and_sent_by_the_next_post_or_poll() {
        let mut h = HeldBack::default();
        assert!(!h.after_poll(true), "completions returned: hold for the post");
        assert!(h.after_poll(true), "no post came: the next poll sends, never holds twice");
        assert!(!h.after_poll(true), "sent: the next completions may hold again");
        h.sent();
        assert!(h.after_poll(false), "a poll that returns nothing sends");
        assert!(!h.after_poll(true));
        assert!(h.after_poll(false), "nothing returned: send what is held");
    }
}
