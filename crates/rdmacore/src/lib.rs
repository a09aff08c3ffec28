//! The rdma-core provider: real RDMA devices (mlx5, rxe, …) through libibverbs.
//!
//! `sideway` finds and opens devices and owns protection domains and memory registrations
//! (plain and dma-buf); the objects sideway does not cover the way podnet needs them — CQs on
//! a completion channel, UD QPs and their address handles, SRQs, classic `ibv_post_send` work
//! requests, asynchronous events — are made through sideway's own `rdma-mummy-sys` layer, each
//! behind this module's safe [`Provider`] methods. libibverbs is loaded at run time (the
//! `rdma-mummy-sys` shim `dlopen`s `libibverbs.so.1`), so a podnet built with this provider
//! starts on a host without rdma-core and says so when asked to open a device.
//!
//! Objects are named by the ids the verbs API already uses: a CQ by a counter, a QP by its
//! QP number, an SRQ by a counter, a region by its local key. The tables are behind a
//! read-write lock: posting and polling take it shared, creating and destroying exclusively,
//! so no object is destroyed while another thread uses it.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use rdma_mummy_sys as sys;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::DeviceContext;
use sideway::ibverbs::memory_region::MemoryRegion as SwMr;
use sideway::ibverbs::protection_domain::ProtectionDomain as SwPd;
use smallvec::SmallVec;
use verbs::{
    Access, Counters, CqId, ModifyQp, MrId, MrInfo, PdId, QKey, QpAttr, QpState, QpType, Qpn,
    RecvWr, SendOp, SendWr, SrqId, UdDest, WcOpcode, WcStatus, WorkCompletion,
};

use verbs::{
    AsyncEvent, DeviceAttr, Error, ErrorKind, FastPath, Gid, GidEntry, GidType, Handle, LinkLayer,
    Mtu, PhysState, PortAttr, PortState, PostFailure, PreparedRaw, PreparedRecv, PreparedSend,
    Provider, Psn, QpSpec, Result,
};

/// The port every RoCE device here is driven on.
const PORT: u8 = 1;

/// The RDMA devices libibverbs sees, by name.
pub fn device_names() -> Result<Vec<String>> {
    let list = device_list(None)?;
    Ok(list.iter().map(|d| d.name()).collect())
}

fn device_list(wanted: Option<&str>) -> Result<DeviceList> {
    DeviceList::new().map_err(|e| {
        let wanted = wanted.map(str::to_string);
        let sideway::ibverbs::device::GetDeviceListErrorKind::Ibverbs(io) = e.0 else {
            return Error::NoRdmaDevice { wanted, found: Vec::new(), why: e.to_string() };
        };
        match io.raw_os_error() {
            // The shim answers EOPNOTSUPP when it could not dlopen libibverbs.so.1.
            Some(libc::EOPNOTSUPP) => Error::NoLibibverbs,
            // libibverbs answers ENOSYS when the kernel has no RDMA support at all.
            Some(libc::ENOSYS) => Error::NoRdmaDevice {
                wanted,
                found: Vec::new(),
                why: "this kernel has no RDMA support loaded (ENOSYS)".into(),
            },
            _ => Error::NoRdmaDevice { wanted, found: Vec::new(), why: io.to_string() },
        }
    })
}

/// A raw libibverbs object pointer that may cross threads: libibverbs objects are
/// thread-safe (every verb may be called from any thread), and this provider's lock keeps an
/// object alive while any thread uses it.
struct Raw<T>(NonNull<T>);

impl<T> Clone for Raw<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Raw<T> {}

impl<T> std::fmt::Debug for Raw<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

// SAFETY: libibverbs objects may be used from any thread (rdma-core documents its verbs as
// thread-safe); the pointer is only dereferenced while the provider's tables hold it.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Raw<T> {}

impl<T> Raw<T> {
    fn new(p: *mut T) -> Option<Raw<T>> {
        NonNull::new(p).map(Raw)
    }

    fn ptr(self) -> *mut T {
        self.0.as_ptr()
    }
}

/// What the endpoint knows of a registration: its keys (the remote key only with a remote
/// right), its range and rights.
fn mr_info(mr: &SwMr, pd: PdId, addr: u64, len: usize, access: Access) -> MrInfo {
    MrInfo {
        id: MrId(mr.lkey()),
        pd,
        addr,
        len: len as u64,
        access,
        lkey: mr.lkey(),
        rkey: if access.0 & !Access::LOCAL_WRITE.0 != 0 { mr.rkey() } else { 0 },
    }
}

/// The kernel modules that let `ibv_reg_mr` take a GPU's address (GPUDirect RDMA without
/// dma-buf): NVIDIA's current one and the older Mellanox one.
const PEER_MEMORY: &[&str] = &["nvidia_peermem", "nv_peer_mem"];

/// Registered memory: this provider's own allocation (page-aligned, zeroed, unmapped after
/// deregistration) or a dma-buf (no host mapping).
#[derive(Debug)]
struct Region {
    /// The registration: the table holds its only reference.
    mr: Option<Arc<SwMr>>,
    /// The mapping, for host-memory regions.
    map: Option<(Raw<u8>, usize)>,
    /// Device (GPU) memory registered through its dma-buf or a peer-memory module: the
    /// region's bytes are copied through it.
    device: Option<Arc<dyn verbs::DeviceMemory>>,
}

impl Region {
    /// The host bytes of the region, if it has any.
    fn bytes(&self) -> Option<(*mut u8, usize)> {
        self.map.map(|(p, len)| (p.ptr(), len))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Deregister first (the table held the only reference): the device may touch the
        // pages until then.
        drop(self.mr.take());
        if let Some((p, len)) = self.map.take() {
            // SAFETY: `p` and `len` are what `mmap` returned for this region, and with the
            // registration gone neither the device nor the provider uses them any more.
            unsafe { libc::munmap(p.ptr().cast(), len) };
        }
    }
}

#[derive(Debug)]
struct QpEntry {
    qp: Raw<sys::ibv_qp>,
    qp_type: QpType,
    pd: PdId,
    /// The traffic class of packets (and of UD address handles).
    traffic_class: u8,
    /// UD: address handles by destination.
    /// Address handles by (destination, flow label).
    ahs: Mutex<HashMap<(IpAddr, u32), Raw<sys::ibv_ah>>>,
}

/// The maps posting and polling look into: a fast hash (the keys are ours or the device's,
/// not an attacker's), not SipHash.
type Map<V> = HashMap<u32, V, foldhash::fast::FixedState>;

#[derive(Debug, Default)]
struct Tables {
    next_id: u32,
    pds: Map<Arc<SwPd>>,
    mrs: Map<Region>,
    channels: Map<Raw<sys::ibv_comp_channel>>,
    cqs: Map<Raw<sys::ibv_cq>>,
    srqs: Map<Raw<sys::ibv_srq>>,
    qps: Map<QpEntry>,
}

impl Tables {
    /// The protection domain `pd`.
    fn pd(&self, pd: PdId) -> Result<Arc<SwPd>> {
        self.pds
            .get(&pd.0)
            .cloned()
            .ok_or(Error::no_such(format_args!("protection domain {:?}", pd)))
    }

    fn id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }
}

/// An RDMA device opened through libibverbs.
#[derive(Debug)]
pub struct RdmaCoreDevice {
    name: String,
    /// The GID the device's address comes from.
    gid: GidEntry,
    gids: Vec<GidEntry>,
    tables: RwLock<Tables>,
    ctx_raw: Raw<sys::ibv_context>,
    /// Owned by sideway; dropped last (`ibv_close_device`).
    ctx: Arc<DeviceContext>,
}

fn read_tables(t: &RwLock<Tables>) -> RwLockReadGuard<'_, Tables> {
    t.read().unwrap_or_else(PoisonError::into_inner)
}

fn write_tables(t: &RwLock<Tables>) -> RwLockWriteGuard<'_, Tables> {
    t.write().unwrap_or_else(PoisonError::into_inner)
}

fn mtu_from_ibv(m: u32) -> Mtu {
    match m {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

fn mtu_to_ibv(m: Mtu) -> u32 {
    match m {
        Mtu::Mtu256 => 1,
        Mtu::Mtu512 => 2,
        Mtu::Mtu1024 => 3,
        Mtu::Mtu2048 => 4,
        Mtu::Mtu4096 => 5,
    }
}

fn state_to_ibv(s: QpState) -> u32 {
    use sys::ibv_qp_state::*;
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Sqd => IBV_QPS_SQD,
        QpState::Err => IBV_QPS_ERR,
    }
}

#[inline]
fn state_from_ibv(s: u32) -> QpState {
    use sys::ibv_qp_state::*;
    match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_SQD => QpState::Sqd,
        // SQE (send queue error) and anything newer: the QP no longer sends.
        _ => QpState::Err,
    }
}

// Both conversions run for every completion polled. A compare for the common case and a
// table load keep them free of the jump tables a `match` over many values compiles to: an
// indirect jump is a hash lookup under QEMU's TCG, where the rxe tests run (BENCHMARKS.md,
// "Hot paths", H3).
#[inline]
fn status_from_ibv(s: u32) -> WcStatus {
    use sys::ibv_wc_status::*;
    if s == IBV_WC_SUCCESS {
        return WcStatus::Success;
    }
    match s {
        IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
        IBV_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
        IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        IBV_WC_BAD_RESP_ERR => WcStatus::BadRespErr,
        IBV_WC_LOC_ACCESS_ERR => WcStatus::LocAccessErr,
        IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
        IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        IBV_WC_REM_OP_ERR => WcStatus::RemOpErr,
        IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        IBV_WC_FATAL_ERR => WcStatus::FatalErr,
        IBV_WC_GENERAL_ERR => WcStatus::GeneralErr,
        other => WcStatus::Other(other),
    }
}

#[inline]
fn opcode_from_ibv(o: u32) -> WcOpcode {
    use sys::ibv_wc_opcode::*;
    // Send-side opcodes by value (IBV_WC_SEND 0 … IBV_WC_FETCH_ADD 4, IBV_WC_BIND_MW 5).
    const SEND_SIDE: [WcOpcode; 6] = [
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::CompSwap,
        WcOpcode::FetchAdd,
        WcOpcode::Send,
    ];
    if o == IBV_WC_RECV {
        WcOpcode::Recv
    } else if o == IBV_WC_RECV_RDMA_WITH_IMM {
        WcOpcode::RecvRdmaWithImm
    } else {
        // The undefined opcode of some error completions reads as a SEND.
        SEND_SIDE.get(o as usize).copied().unwrap_or(WcOpcode::Send)
    }
}

fn access_flags(a: Access) -> AccessFlags {
    let mut f = AccessFlags::none();
    for (ours, theirs) in [
        (Access::LOCAL_WRITE, AccessFlags::LocalWrite),
        (Access::REMOTE_WRITE, AccessFlags::RemoteWrite),
        (Access::REMOTE_READ, AccessFlags::RemoteRead),
        (Access::REMOTE_ATOMIC, AccessFlags::RemoteAtomic),
    ] {
        if a.contains(ours) {
            f |= theirs;
        }
    }
    f
}

/// Waits until `fd` is readable or `timeout` passes (`None`: forever).
fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> bool {
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
            }
        };
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc > 0 {
            return true;
        }
        if rc == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

impl RdmaCoreDevice {
    /// Opens `name` (the first device when `None`). The device's address is the RoCE v2 GID
    /// at `gid_index`, or the first RoCE v2 GID (IPv4 before IPv6).
    pub fn open(name: Option<&str>, gid_index: Option<usize>) -> Result<RdmaCoreDevice> {
        let list = device_list(name)?;
        let found: Vec<String> = list.iter().map(|d| d.name()).collect();
        let dev = list.iter().find(|d| name.is_none_or(|n| d.name() == n)).ok_or_else(|| {
            Error::NoRdmaDevice {
                wanted: name.map(str::to_string),
                found: found.clone(),
                why: String::new(),
            }
        })?;
        let dev_name = dev.name();
        let ctx = dev.open().map_err(|e| Error::Open {
            device: dev_name.clone(),
            source: io::Error::other(e.to_string()),
        })?;
        // SAFETY: sideway hands out the context pointer it owns; `ctx` (kept in the device)
        // keeps it open for as long as the pointer is used.
        let ctx_raw = Raw(unsafe { ctx.context() });
        let gids = gid_table(ctx_raw.ptr(), &dev_name);
        let gid = match gid_index {
            Some(i) => gids.iter().find(|g| g.index == i).cloned().ok_or(Error::NoGid {
                device: dev_name.clone(),
                index: i,
                len: gids.len(),
            })?,
            None => gids
                .iter()
                .filter(|g| g.gid_type == GidType::RoceV2)
                .min_by_key(|g| (g.gid.to_ip().is_none_or(|ip| ip.is_ipv6()), g.index))
                .or(gids.first())
                .cloned()
                .ok_or(Error::Unsupported {
                    device: dev_name.clone(),
                    what: "a GID on port 1 (is its netdev up, with an address?)",
                })?,
        };
        Ok(RdmaCoreDevice {
            name: dev_name,
            gid,
            gids,
            tables: RwLock::new(Tables::default()),
            ctx_raw,
            ctx,
        })
    }

    fn call_err(&self, verb: &'static str, source: io::Error) -> Error {
        Error::Call { device: self.name.clone(), verb, source }
    }

    fn errno(&self, verb: &'static str, rc: i32) -> Error {
        match rc {
            libc::ENOMEM => Error::refused(
                ErrorKind::ResourceExhausted,
                format!(
                    "the {} queue is full",
                    if verb.contains("recv") { "receive" } else { "send" }
                ),
            ),
            _ => self.call_err(verb, io::Error::from_raw_os_error(rc)),
        }
    }

    /// The source GID index for packets to `ip`: the device's own GID when the families
    /// match, else the first RoCE v2 GID of `ip`'s family.
    fn sgid_for(&self, ip: IpAddr) -> u8 {
        let fam = |g: &GidEntry| g.gid.to_ip().map(|a| a.is_ipv4());
        if fam(&self.gid) == Some(ip.is_ipv4()) {
            return self.gid.index as u8;
        }
        self.gids
            .iter()
            .find(|g| g.gid_type == GidType::RoceV2 && fam(g) == Some(ip.is_ipv4()))
            .map_or(self.gid.index as u8, |g| g.index as u8)
    }

    fn ah_attr(&self, ip: IpAddr, flow_label: u32, traffic_class: u8) -> sys::ibv_ah_attr {
        sys::ibv_ah_attr {
            grh: sys::ibv_global_route {
                dgid: sys::ibv_gid { raw: Gid::from_ip(ip).0 },
                flow_label: flow_label & 0xf_ffff,
                sgid_index: self.sgid_for(ip),
                hop_limit: 64,
                traffic_class,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: PORT,
        }
    }

    /// The address handle for UD sends from `qp` to `ip` with `flow_label` (its UDP source
    /// port on RoCEv2), made on first use.
    fn ah(
        &self,
        t: &Tables,
        qp: &QpEntry,
        ip: IpAddr,
        flow_label: u32,
    ) -> Result<Raw<sys::ibv_ah>> {
        let mut ahs = qp.ahs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ah) = ahs.get(&(ip, flow_label)) {
            return Ok(*ah);
        }
        let pd = t
            .pds
            .get(&qp.pd.0)
            .ok_or(Error::no_such(format_args!("protection domain {:?}", qp.pd)))?;
        let mut attr = self.ah_attr(ip, flow_label, qp.traffic_class);
        // SAFETY: the PD is alive (held by the table under our read lock) and `attr` is a
        // fully initialized address vector.
        let ah = unsafe { sys::ibv_create_ah(pd.pd().as_ptr(), &mut attr) };
        let ah = Raw::new(ah)
            .ok_or_else(|| self.call_err("ibv_create_ah", io::Error::last_os_error()))?;
        ahs.insert((ip, flow_label), ah);
        Ok(ah)
    }

    fn hw_counters_dir(&self) -> PathBuf {
        PathBuf::from("/sys/class/infiniband").join(&self.name).join("ports/1/hw_counters")
    }

    /// Registers a dma-buf (`ibv_reg_dmabuf_mr`): `len` bytes at `offset` of the buffer `fd`
    /// exports, seen by the device at `iova`.
    pub(crate) fn reg_dmabuf(
        &self,
        pd: PdId,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MrInfo> {
        let mut t = write_tables(&self.tables);
        let swpd = t.pd(pd)?;
        // SAFETY: the caller's `fd` is borrowed for the call; the kernel takes its own
        // reference to the dma-buf it names.
        let mr = unsafe { swpd.reg_dmabuf_mr(offset, len, iova, fd, access_flags(access)) };
        let mr = mr.map_err(|e| {
            let io = match e.0 {
                sideway::ibverbs::memory_region::RegisterMemoryRegionErrorKind::Ibverbs(io) => io,
                other => io::Error::other(other.to_string()),
            };
            match io.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT) => {
                    Error::Unsupported {
                        device: self.name.clone(),
                        what: "dma-buf memory registration (ibv_reg_dmabuf_mr)",
                    }
                }
                _ => self.call_err("ibv_reg_dmabuf_mr", io),
            }
        })?;
        let info = mr_info(&mr, pd, iova, len, access);
        t.mrs.insert(info.lkey, Region { mr: Some(mr), map: None, device: None });
        Ok(info)
    }
}

/// The GID table of port 1 (zero GIDs left out): one `ibv_query_gid_table` (a single uverbs
/// ioctl), or, where that is missing (a kernel before 5.9, an older libibverbs), the device's
/// sysfs files. The ioctl matters where the table is long: rxe's has 1024 entries, a file
/// each, and reading them took ~0.3 s per device in the QEMU guest, at every start.
fn gid_table(ctx: *mut sys::ibv_context, dev: &str) -> Vec<GidEntry> {
    let mut port = MaybeUninit::<sys::ibv_port_attr>::zeroed();
    // SAFETY: the context is open (the caller's) and `port` is a writable ibv_port_attr.
    let len = match unsafe { sys::ibv_query_port(ctx, PORT, port.as_mut_ptr()) } {
        // SAFETY: filled by ibv_query_port.
        0 => usize::try_from(unsafe { port.assume_init() }.gid_tbl_len).unwrap_or(0),
        _ => 0,
    };
    let mut dev_attr = MaybeUninit::<sys::ibv_device_attr>::zeroed();
    // SAFETY: the context is open and `dev_attr` is a writable ibv_device_attr.
    let ports = match unsafe { sys::ibv_query_device(ctx, dev_attr.as_mut_ptr()) } {
        // SAFETY: filled by ibv_query_device.
        0 => usize::from(unsafe { dev_attr.assume_init() }.phys_port_cnt).max(1),
        _ => 1,
    };
    // Room for every port's entries (the call fails with fewer), within what one ioctl
    // attribute can carry (a 16-bit length: 2047 entries of 32 bytes); beyond it, sysfs.
    let room = len * ports;
    if room == 0 || room * size_of::<sys::ibv_gid_entry>() > usize::from(u16::MAX) {
        return gid_table_sysfs(dev);
    }
    // SAFETY: all-zero is a valid ibv_gid_entry (integers and a byte array).
    let mut raw = vec![unsafe { MaybeUninit::<sys::ibv_gid_entry>::zeroed().assume_init() }; room];
    // SAFETY: the context is open and `raw` has room for `room` entries of the size passed.
    let n = unsafe { sys::ibv_query_gid_table(ctx, raw.as_mut_ptr(), room, 0) };
    let Ok(n) = usize::try_from(n) else { return gid_table_sysfs(dev) };
    raw.truncate(n);
    raw.iter()
        .filter(|e| e.port_num == u32::from(PORT))
        .filter_map(|e| {
            // SAFETY: every bit pattern of the union is a valid byte array.
            let gid = Gid(unsafe { e.gid.raw });
            (gid.0 != [0; 16]).then_some(GidEntry {
                index: e.gid_index as usize,
                gid,
                gid_type: match e.gid_type {
                    sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                    sys::IBV_GID_TYPE_IB => GidType::Ib,
                    _ => GidType::RoceV1,
                },
                netdev: None,
            })
        })
        .collect()
}

/// [`gid_table`] from sysfs, as `ibv_query_gid_table` reads it on older kernels.
fn gid_table_sysfs(dev: &str) -> Vec<GidEntry> {
    let Some(d) = host::rdma_device(&host::default_root(), dev) else {
        return Vec::new();
    };
    let Some(p) = d.ports.into_iter().find(|p| p.port == PORT) else { return Vec::new() };
    p.gids
}

impl Drop for RdmaCoreDevice {
    fn drop(&mut self) {
        // Every verbs object holds the device, so by now the objects are gone; whatever a
        // leaked handle left behind is destroyed in dependency order before sideway
        // deallocates the PDs and closes the device.
        let t = self.tables.get_mut().unwrap_or_else(PoisonError::into_inner);
        for (_, q) in t.qps.drain() {
            destroy_qp_entry(q);
        }
        for (_, s) in t.srqs.drain() {
            // SAFETY: no QP uses the SRQ any more (all destroyed above).
            unsafe { sys::ibv_destroy_srq(s.ptr()) };
        }
        for (_, c) in t.cqs.drain() {
            // SAFETY: no QP uses the CQ any more.
            unsafe { sys::ibv_destroy_cq(c.ptr()) };
        }
        for (_, ch) in t.channels.drain() {
            // SAFETY: no CQ uses the channel any more.
            unsafe { sys::ibv_destroy_comp_channel(ch.ptr()) };
        }
        t.mrs.clear();
        t.pds.clear();
    }
}

fn destroy_qp_entry(q: QpEntry) {
    // SAFETY: the QP came out of the table (no other thread can reach it); its address
    // handles are destroyed after it, as libibverbs requires nothing of the order.
    unsafe { sys::ibv_destroy_qp(q.qp.ptr()) };
    for (_, ah) in q.ahs.into_inner().unwrap_or_else(PoisonError::into_inner) {
        // SAFETY: the AH was made by ibv_create_ah and its only user, the QP, is gone.
        unsafe { sys::ibv_destroy_ah(ah.ptr()) };
    }
}

impl Provider for RdmaCoreDevice {
    fn device_name(&self) -> String {
        self.name.clone()
    }

    fn provider_kind(&self) -> verbs::ProviderKind {
        verbs::ProviderKind::RdmaCore
    }

    fn ip(&self) -> IpAddr {
        self.gid.gid.to_ip().unwrap_or(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED))
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        let a = self
            .ctx
            .query_device()
            .map_err(|e| Error::refused(ErrorKind::Io, format!("ibv_query_device: {e}")))?;
        // libibverbs gives ints; a negative one (no device reports any) reads as 0.
        let n = |v: i32| u32::try_from(v).unwrap_or(0);
        Ok(DeviceAttr {
            max_mr_size: a.max_mr_size(),
            max_qp: n(a.max_qp()),
            max_qp_wr: n(a.max_qp_wr()),
            max_sge: n(a.max_sge()),
            max_cq: n(a.max_cq()),
            max_cqe: n(a.max_cqe()),
            max_mr: n(a.max_mr()),
            max_pd: n(a.max_pd()),
            max_srq: n(a.max_srq()),
            max_srq_wr: n(a.max_srq_wr()),
            max_inline_data: None,
        })
    }

    fn port_attr(&self) -> PortAttr {
        let mut a = MaybeUninit::<sys::ibv_port_attr>::zeroed();
        // SAFETY: the context is open and `a` is a writable ibv_port_attr.
        let rc = unsafe { sys::ibv_query_port(self.ctx_raw.ptr(), PORT, a.as_mut_ptr()) };
        if rc != 0 {
            return PortAttr {
                state: PortState::Down,
                phys_state: None,
                max_mtu: Mtu::Mtu256,
                active_mtu: Mtu::Mtu256,
                lid: 0,
                link_layer: LinkLayer::Ethernet,
            };
        }
        // SAFETY: ibv_query_port filled it (and it was zeroed before).
        let a = unsafe { a.assume_init() };
        PortAttr {
            state: PortState::from_id(a.state as u8).unwrap_or(PortState::Down),
            phys_state: PhysState::from_id(a.phys_state),
            max_mtu: mtu_from_ibv(a.max_mtu),
            active_mtu: mtu_from_ibv(a.active_mtu),
            lid: a.lid,
            link_layer: if a.link_layer == sys::IBV_LINK_LAYER_INFINIBAND {
                LinkLayer::InfiniBand
            } else {
                LinkLayer::Ethernet
            },
        }
    }

    fn gid_index(&self) -> usize {
        self.gid.index
    }

    fn gid_table(&self) -> Vec<GidEntry> {
        self.gids.clone()
    }

    fn alloc_pd(&self) -> Result<PdId> {
        let pd = self
            .ctx
            .alloc_pd()
            .map_err(|e| self.call_err("ibv_alloc_pd", io::Error::other(e.to_string())))?;
        let mut t = write_tables(&self.tables);
        let id = t.id();
        t.pds.insert(id, pd);
        Ok(PdId(id))
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        let mut t = write_tables(&self.tables);
        let p = t.pds.get(&pd.0).ok_or(Error::no_such(format_args!("protection domain {pd:?}")))?;
        // Its regions, QPs and SRQs hold it too: sideway deallocates it with the last.
        if Arc::strong_count(p) > 1 {
            return Err(Error::refused(
                ErrorKind::Busy,
                format!("protection domain {pd:?} still has memory regions, QPs or SRQs"),
            ));
        }
        drop(t.pds.remove(&pd.0));
        Ok(())
    }

    fn reg_mr(&self, pd: PdId, len: usize, access: Access) -> Result<MrInfo> {
        if len == 0 {
            return Err(Error::refused(
                ErrorKind::InvalidArgument,
                concat!("invalid memory region: ", "zero length"),
            ));
        }
        let mut t = write_tables(&self.tables);
        let swpd = t.pd(pd)?;
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(self.call_err("mmap", io::Error::last_os_error()));
        }
        let map = (Raw::new(p.cast::<u8>()).expect("mmap never returns NULL on success"), len);
        // SAFETY: the mapping is `len` bytes, readable and writable, and lives until the
        // region is dropped, which deregisters it first.
        let mr = unsafe { swpd.reg_mr(p as usize, len, access_flags(access)) };
        let mr = match mr {
            Ok(mr) => mr,
            Err(e) => {
                // SAFETY: the mapping was made above and nothing else knows it.
                unsafe { libc::munmap(p, len) };
                return Err(self.call_err("ibv_reg_mr", io::Error::other(e.to_string())));
            }
        };
        let info = mr_info(&mr, pd, p as u64, len, access);
        t.mrs.insert(info.lkey, Region { mr: Some(mr), map: Some(map), device: None });
        Ok(info)
    }

    fn dereg_mr(&self, lkey: u32) {
        let r = write_tables(&self.tables).mrs.remove(&lkey);
        drop(r);
    }

    fn mr_read(&self, lkey: u32, offset: usize, out: &mut [u8]) -> Result<()> {
        let t = read_tables(&self.tables);
        if let Some(d) = t.mrs.get(&lkey).and_then(|r| r.device.clone()) {
            drop(t);
            // The NIC writes the GPU itself: nothing read ahead may be served.
            return self.device_copy(&d, offset, out.len(), |d| {
                d.flush()?;
                d.read(offset, out)
            });
        }
        let (p, len) = self.host_bytes(&t, lkey)?;
        if offset.checked_add(out.len()).is_none_or(|end| end > len) {
            return Err(Error::OutOfBounds { offset, len: out.len(), region_len: len });
        }
        // SAFETY: the range lies inside the live mapping (checked above; the read lock keeps
        // the region registered). The device may write concurrently, as with any RDMA buffer.
        unsafe { ptr::copy_nonoverlapping(p.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn mr_write(&self, lkey: u32, offset: usize, data: &[u8]) -> Result<()> {
        let t = read_tables(&self.tables);
        if let Some(d) = t.mrs.get(&lkey).and_then(|r| r.device.clone()) {
            drop(t);
            // The NIC reads the GPU's memory itself: nothing may stay staged.
            return self.device_copy(&d, offset, data.len(), |d| {
                d.write(offset, data)?;
                d.flush()
            });
        }
        let (p, len) = self.host_bytes(&t, lkey)?;
        if offset.checked_add(data.len()).is_none_or(|end| end > len) {
            return Err(Error::OutOfBounds { offset, len: data.len(), region_len: len });
        }
        // SAFETY: as in mr_read.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), p.add(offset), data.len()) };
        Ok(())
    }

    fn reg_dmabuf_mr(
        &self,
        pd: PdId,
        fd: RawFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MrInfo> {
        self.reg_dmabuf(pd, fd, offset, len, iova, access)
    }

    fn reg_device_mr(
        &self,
        pd: PdId,
        mem: Arc<dyn verbs::DeviceMemory>,
        access: Access,
    ) -> Result<MrInfo> {
        use std::os::fd::AsRawFd;
        let (addr, len) = (mem.addr(), mem.len());
        let info = match mem.dmabuf() {
            // The GPU exports its memory as a dma-buf: the NIC's driver maps its pages.
            Ok(fd) => self.reg_dmabuf(pd, fd.as_raw_fd(), 0, len, addr, access)?,
            // Else a peer-memory module lets ibv_reg_mr take the GPU's address itself.
            Err(_) if PEER_MEMORY.iter().any(|m| Path::new("/sys/module").join(m).exists()) => {
                let mut t = write_tables(&self.tables);
                let swpd = t.pd(pd)?;
                // SAFETY: `addr` is the GPU allocation `mem` keeps alive for as long as the
                // region holds it (the table's entry, dropped after deregistration); the
                // peer-memory module pins its pages for the device.
                let mr = unsafe { swpd.reg_mr(addr as usize, len, access_flags(access)) }
                    .map_err(|e| self.call_err("ibv_reg_mr", io::Error::other(e.to_string())))?;
                let info = mr_info(&mr, pd, addr, len, access);
                t.mrs.insert(info.lkey, Region { mr: Some(mr), map: None, device: None });
                info
            }
            Err(_) => {
                return Err(Error::Unsupported {
                    device: self.name.clone(),
                    what: "GPU memory registration: the GPU exports no dma-buf and no \
                           peer-memory module (nvidia_peermem) is loaded",
                });
            }
        };
        if let Some(r) = write_tables(&self.tables).mrs.get_mut(&info.lkey) {
            r.device = Some(mem);
        }
        Ok(info)
    }

    fn create_channel(&self) -> Result<u32> {
        // SAFETY: the context is open.
        let ch = unsafe { sys::ibv_create_comp_channel(self.ctx_raw.ptr()) };
        let ch = Raw::new(ch)
            .ok_or_else(|| self.call_err("ibv_create_comp_channel", io::Error::last_os_error()))?;
        let mut t = write_tables(&self.tables);
        let id = t.id();
        t.channels.insert(id, ch);
        Ok(id)
    }

    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> Result<CqId> {
        let mut t = write_tables(&self.tables);
        let ch = match channel {
            Some(c) => t.channels.get(&c).ok_or(Error::ForeignObject("completion channel"))?.ptr(),
            None => ptr::null_mut(),
        };
        let id = t.id();
        let cqe = i32::try_from(cqe.max(1)).unwrap_or(i32::MAX);
        // SAFETY: the context and channel are alive; the CQ context carries our id, which
        // ibv_get_cq_event hands back.
        let cq = unsafe {
            sys::ibv_create_cq(self.ctx_raw.ptr(), cqe, id as usize as *mut libc::c_void, ch, 0)
        };
        let cq = Raw::new(cq)
            .ok_or_else(|| self.call_err("ibv_create_cq", io::Error::last_os_error()))?;
        t.cqs.insert(id, cq);
        Ok(CqId(id))
    }

    fn destroy_cq(&self, cq: CqId) {
        if let Some(c) = write_tables(&self.tables).cqs.remove(&cq.0) {
            // SAFETY: out of the table, so no other thread polls it; QPs using it are gone
            // (they hold the CQ's Rust owner).
            unsafe { sys::ibv_destroy_cq(c.ptr()) };
        }
    }

    fn poll_cq(&self, cq: CqId, out: &mut [WorkCompletion]) -> usize {
        let t = read_tables(&self.tables);
        let Some(c) = t.cqs.get(&cq.0).copied() else { return 0 };
        // SAFETY: the CQ is alive (read lock).
        unsafe { poll_raw(c.ptr(), out) }
    }

    fn req_notify_cq(&self, cq: CqId) -> Result<()> {
        let t = read_tables(&self.tables);
        let c = t.cqs.get(&cq.0).ok_or(Error::no_such(format_args!("CQ {:?}", cq)))?;
        // SAFETY: the CQ is alive (read lock).
        let rc = unsafe { sys::ibv_req_notify_cq(c.ptr(), 0) };
        if rc != 0 {
            return Err(self.errno("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> Option<CqId> {
        let ch = read_tables(&self.tables).channels.get(&channel).copied()?;
        // SAFETY: the channel stays alive while the CompletionChannel that calls this exists.
        let fd = unsafe { (*ch.ptr()).fd };
        if !wait_readable(fd, timeout) {
            return None;
        }
        let mut cq: *mut sys::ibv_cq = ptr::null_mut();
        let mut cq_ctx: *mut libc::c_void = ptr::null_mut();
        // SAFETY: the fd is readable, so this does not block; both out-pointers are valid.
        let rc = unsafe { sys::ibv_get_cq_event(ch.ptr(), &mut cq, &mut cq_ctx) };
        if rc != 0 || cq.is_null() {
            return None;
        }
        // SAFETY: the event names a CQ of this channel, alive while its owner exists.
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Some(CqId(cq_ctx as usize as u32))
    }

    fn create_srq(&self, pd: PdId, max_wr: u32) -> Result<SrqId> {
        let mut t = write_tables(&self.tables);
        let swpd = t.pd(pd)?;
        let id = t.id();
        let mut attr = sys::ibv_srq_init_attr {
            srq_context: id as usize as *mut libc::c_void,
            attr: sys::ibv_srq_attr { max_wr, max_sge: 4, srq_limit: 0 },
        };
        // SAFETY: the PD is alive and `attr` is initialized.
        let srq = unsafe { sys::ibv_create_srq(swpd.pd().as_ptr(), &mut attr) };
        let srq = Raw::new(srq)
            .ok_or_else(|| self.call_err("ibv_create_srq", io::Error::last_os_error()))?;
        t.srqs.insert(id, srq);
        Ok(SrqId(id))
    }

    fn destroy_srq(&self, srq: SrqId) {
        if let Some(s) = write_tables(&self.tables).srqs.remove(&srq.0) {
            // SAFETY: out of the table; the QPs using it are gone (they borrow its owner).
            unsafe { sys::ibv_destroy_srq(s.ptr()) };
        }
    }

    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<()> {
        let t = read_tables(&self.tables);
        let s = t.srqs.get(&srq.0).ok_or(Error::no_such(format_args!("SRQ {:?}", srq)))?;
        with_recv_wrs(wrs, |head| {
            let mut bad = ptr::null_mut();
            // SAFETY: the SRQ is alive and `head` is a valid, null-terminated chain.
            let rc = unsafe { sys::ibv_post_srq_recv(s.ptr(), head, &mut bad) };
            if rc == 0 { Ok(()) } else { Err(self.errno("ibv_post_srq_recv", rc)) }
        })
    }

    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()> {
        let t = read_tables(&self.tables);
        let s = t.srqs.get(&srq.0).ok_or(Error::no_such(format_args!("SRQ {:?}", srq)))?;
        let mut attr = sys::ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: limit };
        // SAFETY: the SRQ is alive and `attr` initialized.
        let rc = unsafe {
            sys::ibv_modify_srq(s.ptr(), &mut attr, sys::ibv_srq_attr_mask::IBV_SRQ_LIMIT.0 as i32)
        };
        if rc != 0 {
            return Err(self.errno("ibv_modify_srq", rc));
        }
        Ok(())
    }

    fn create_qp(&self, spec: &QpSpec) -> Result<Qpn> {
        let mut t = write_tables(&self.tables);
        let swpd = t
            .pds
            .get(&spec.pd.0)
            .ok_or(Error::no_such(format_args!("protection domain {:?}", spec.pd)))?
            .clone();
        let cq = |id: CqId| t.cqs.get(&id.0).map(|c| c.ptr()).ok_or(Error::ForeignObject("CQ"));
        let (send_cq, recv_cq) = (cq(spec.send_cq)?, cq(spec.recv_cq)?);
        let srq = match spec.srq {
            Some(s) => t.srqs.get(&s.0).ok_or(Error::ForeignObject("SRQ"))?.ptr(),
            None => ptr::null_mut(),
        };
        let mut init = sys::ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq,
            recv_cq,
            srq,
            cap: sys::ibv_qp_cap {
                max_send_wr: spec.caps.max_send_wr,
                max_recv_wr: if srq.is_null() { spec.caps.max_recv_wr } else { 0 },
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: spec.caps.max_inline_data,
            },
            qp_type: match spec.qp_type {
                QpType::Rc => sys::ibv_qp_type::IBV_QPT_RC,
                QpType::Uc => sys::ibv_qp_type::IBV_QPT_UC,
                QpType::Ud => sys::ibv_qp_type::IBV_QPT_UD,
            },
            sq_sig_all: 0,
        };
        // SAFETY: the PD, CQs and SRQ are alive (held in the table under the write lock).
        let qp = unsafe { sys::ibv_create_qp(swpd.pd().as_ptr(), &mut init) };
        let qp = Raw::new(qp)
            .ok_or_else(|| self.call_err("ibv_create_qp", io::Error::last_os_error()))?;
        // SAFETY: a QP libibverbs just created.
        let qpn = unsafe { (*qp.ptr()).qp_num };
        t.qps.insert(
            qpn,
            QpEntry {
                qp,
                qp_type: spec.qp_type,
                pd: spec.pd,
                traffic_class: QpAttr::default().traffic_class,
                ahs: Mutex::new(HashMap::new()),
            },
        );
        Ok(Qpn::new(qpn))
    }

    fn modify_qp(&self, qpn: Qpn, m: &ModifyQp) -> Result<()> {
        use sys::ibv_qp_attr_mask as k;
        let mut t = write_tables(&self.tables);
        let q = t.qps.get_mut(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        if let Some(tc) = m.traffic_class {
            q.traffic_class = tc;
        }
        let (qp, ty, tclass) = (q.qp, q.qp_type, q.traffic_class);
        // SAFETY: all-zero is a valid ibv_qp_attr (plain integers and pointers).
        let mut a: sys::ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut mask = 0u32;
        let ud = ty == QpType::Ud;
        if let Some(s) = m.state {
            a.qp_state = state_to_ibv(s);
            mask |= k::IBV_QP_STATE.0;
            if s == QpState::Init {
                a.pkey_index = 0;
                a.port_num = PORT;
                mask |= k::IBV_QP_PKEY_INDEX.0 | k::IBV_QP_PORT.0;
                if ud {
                    a.qkey = m.qkey.unwrap_or(QKey(0)).0;
                    mask |= k::IBV_QP_QKEY.0;
                } else {
                    a.qp_access_flags = m.access.map_or(0, |x| access_flags(x).bits() as u32);
                    mask |= k::IBV_QP_ACCESS_FLAGS.0;
                }
            }
        }
        if ud {
            if let Some(qk) = m.qkey {
                a.qkey = qk.0;
                mask |= k::IBV_QP_QKEY.0;
            }
        } else if let Some(acc) = m.access {
            a.qp_access_flags = access_flags(acc).bits() as u32;
            mask |= k::IBV_QP_ACCESS_FLAGS.0;
        }
        // A UD QP's path MTU is the port's: ibv_modify_qp takes none.
        if let (Some(mtu), false) = (m.path_mtu, ud) {
            a.path_mtu = mtu_to_ibv(mtu);
            mask |= k::IBV_QP_PATH_MTU.0;
        }
        if let (Some(d), false) = (m.dest, ud) {
            // On RoCEv2 the flow label sets the UDP source port (rdma_get_udp_sport).
            a.ah_attr = self.ah_attr(d.ip, d.flow_label, tclass);
            a.dest_qp_num = d.qpn.get();
            mask |= k::IBV_QP_AV.0 | k::IBV_QP_DEST_QPN.0;
        }
        if let (Some(p), false) = (m.rq_psn, ud) {
            a.rq_psn = p.get();
            mask |= k::IBV_QP_RQ_PSN.0;
        }
        if let Some(p) = m.sq_psn {
            a.sq_psn = p.get();
            mask |= k::IBV_QP_SQ_PSN.0;
        }
        let rc_only: [(Option<u8>, &mut u8, u32); 6] = [
            (m.timeout, &mut a.timeout, k::IBV_QP_TIMEOUT.0),
            (m.retry_cnt, &mut a.retry_cnt, k::IBV_QP_RETRY_CNT.0),
            (m.rnr_retry, &mut a.rnr_retry, k::IBV_QP_RNR_RETRY.0),
            (m.min_rnr_timer, &mut a.min_rnr_timer, k::IBV_QP_MIN_RNR_TIMER.0),
            (m.max_rd_atomic, &mut a.max_rd_atomic, k::IBV_QP_MAX_QP_RD_ATOMIC.0),
            (m.max_dest_rd_atomic, &mut a.max_dest_rd_atomic, k::IBV_QP_MAX_DEST_RD_ATOMIC.0),
        ];
        for (v, field, bit) in rc_only {
            if let (Some(v), QpType::Rc) = (v, ty) {
                *field = v;
                mask |= bit;
            }
        }
        // SAFETY: the QP is alive (write lock) and `a` holds every attribute `mask` names.
        let rc = unsafe { sys::ibv_modify_qp(qp.ptr(), &mut a, mask as i32) };
        if rc != 0 {
            // SAFETY: the QP is alive; libibverbs keeps `state` current.
            let from = state_from_ibv(unsafe { (*qp.ptr()).state });
            return Err(match (rc, m.state) {
                (libc::EINVAL, Some(to)) => Error::refused(
                    ErrorKind::InvalidState,
                    format!("invalid QP transition {from:?} -> {to:?}"),
                ),
                _ => self.errno("ibv_modify_qp", rc),
            });
        }
        Ok(())
    }

    fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr)> {
        let t = read_tables(&self.tables);
        let q = t.qps.get(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        // SAFETY: all-zero is a valid value of both attribute structs.
        let (mut a, mut init): (sys::ibv_qp_attr, sys::ibv_qp_init_attr) =
            unsafe { (MaybeUninit::zeroed().assume_init(), MaybeUninit::zeroed().assume_init()) };
        let mask = 0x3f_ffff;
        // SAFETY: the QP is alive and both structs are writable.
        let rc = unsafe { sys::ibv_query_qp(q.qp.ptr(), &mut a, mask, &mut init) };
        if rc != 0 {
            return Err(self.errno("ibv_query_qp", rc));
        }
        // SAFETY: the GID union is 16 plain bytes.
        let dgid = Gid(unsafe { a.ah_attr.grh.dgid.raw });
        let dest = (q.qp_type != QpType::Ud).then(|| dgid.to_ip()).flatten().map(|ip| {
            verbs::Path { ip, qpn: Qpn::new(a.dest_qp_num), flow_label: a.ah_attr.grh.flow_label }
        });
        let mut access = Access(0);
        for bit in
            [Access::LOCAL_WRITE, Access::REMOTE_WRITE, Access::REMOTE_READ, Access::REMOTE_ATOMIC]
        {
            if a.qp_access_flags & bit.0 != 0 {
                access = access | bit;
            }
        }
        let attr = QpAttr {
            path_mtu: mtu_from_ibv(a.path_mtu),
            dest,
            rq_psn: Psn::new(a.rq_psn),
            sq_psn: Psn::new(a.sq_psn),
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            qkey: QKey(a.qkey),
            traffic_class: a.ah_attr.grh.traffic_class,
            access,
        };
        Ok((state_from_ibv(a.qp_state), attr))
    }

    fn destroy_qp(&self, qpn: Qpn) {
        if let Some(q) = write_tables(&self.tables).qps.remove(&qpn.get()) {
            destroy_qp_entry(q);
        }
    }

    fn post_send(&self, qpn: Qpn, wrs: &[SendWr]) -> Result<()> {
        let t = read_tables(&self.tables);
        let q = t.qps.get(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        let ud = q.qp_type == QpType::Ud;
        // SAFETY: the QP is alive (read lock).
        unsafe {
            self.post_send_raw(q.qp.ptr(), qpn, wrs, ud, &|d| self.ah(&t, q, d.ip, d.flow_label))
        }
    }

    fn post_recv(&self, qpn: Qpn, wrs: &[RecvWr]) -> Result<()> {
        let t = read_tables(&self.tables);
        let q = t.qps.get(&qpn.get()).ok_or(Error::no_such(format_args!("QP {}", qpn)))?;
        // SAFETY: the QP is alive (read lock).
        unsafe { self.post_recv_raw(q.qp.ptr(), qpn, wrs) }
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        // SAFETY: the context is open.
        let fd = unsafe { (*self.ctx_raw.ptr()).async_fd };
        if !wait_readable(fd, timeout) {
            return None;
        }
        let mut ev = MaybeUninit::<sys::ibv_async_event>::zeroed();
        // SAFETY: the fd is readable, so this does not block; `ev` is writable.
        if unsafe { sys::ibv_get_async_event(self.ctx_raw.ptr(), ev.as_mut_ptr()) } != 0 {
            return None;
        }
        let p = ev.as_mut_ptr();
        // SAFETY: filled by ibv_get_async_event; the type is read as the integer it is on the
        // wire of the ABI, so an event type newer than the bindings is not undefined behaviour.
        let (ty, element) = unsafe {
            (
                ptr::addr_of!((*p).event_type).cast::<u32>().read(),
                ptr::addr_of!((*p).element).read(),
            )
        };
        let t = read_tables(&self.tables);
        let out = match ty {
            // QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR: the QP went to the error state.
            1..=3 => {
                // SAFETY: for QP events the element is the QP.
                let qp = unsafe { element.qp };
                // SAFETY: the QP is alive until the event is acknowledged below.
                Some(AsyncEvent::QpFatal(Qpn::new(unsafe { (*qp).qp_num })))
            }
            15 => {
                // SAFETY: for SRQ events the element is the SRQ.
                let srq = unsafe { element.srq };
                t.srqs
                    .iter()
                    .find(|(_, s)| s.ptr() == srq)
                    .map(|(id, _)| AsyncEvent::SrqLimitReached(SrqId(*id)))
            }
            9 => Some(AsyncEvent::PortActive),
            10 => Some(AsyncEvent::PortErr),
            _ => None,
        };
        // SAFETY: every event got must be acknowledged once.
        unsafe { sys::ibv_ack_async_event(ev.as_mut_ptr()) };
        out.or_else(|| self.get_async_event(Some(Duration::ZERO)))
    }

    fn counters(&self) -> Counters {
        let dir = self.hw_counters_dir();
        let mut c = Counters::default();
        let names: Vec<&'static str> = c.iter().map(|(n, _)| n).collect();
        for n in names {
            if let Some(v) =
                std::fs::read_to_string(dir.join(n)).ok().and_then(|s| s.trim().parse().ok())
            {
                c.set(n, v);
            }
        }
        c
    }

    fn fast_path(self: Arc<Self>) -> Option<Arc<dyn FastPath>> {
        Some(self)
    }
}

impl FastPath for RdmaCoreDevice {
    fn mr_handle(&self, lkey: u32) -> Handle {
        let t = read_tables(&self.tables);
        // A dma-buf region has no host mapping: no handle, and its accesses say so.
        self.host_bytes(&t, lkey).map_or(Handle::NONE, |(p, _)| Handle::new(p as usize))
    }

    fn mr_mapping(&self, h: Handle) -> Option<*mut u8> {
        (h != Handle::NONE).then_some(h.get() as *mut u8)
    }

    fn post_errno(&self, verb: &'static str, rc: i32) -> Error {
        self.errno(if verb == "post_recv" { "ibv_post_recv" } else { "ibv_post_send" }, rc)
    }

    unsafe fn mr_read(&self, lkey: u32, h: Handle, offset: usize, out: &mut [u8]) -> Result<()> {
        if h == Handle::NONE {
            return Provider::mr_read(self, lkey, offset, out);
        }
        let src = (h.get() as *const u8).wrapping_add(offset);
        // SAFETY: `h` is the region's mapping and the range lies inside the region (the
        // caller's promise); the device may write concurrently, as with any RDMA buffer.
        unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    unsafe fn mr_watch_byte(
        &self,
        lkey: u32,
        h: Handle,
        offset: usize,
        want: u8,
        spins: u32,
    ) -> Result<bool> {
        if h == Handle::NONE {
            // No mapping to spin on: the looked-up reads, as mr_read and mr_write fall back.
            return Provider::mr_watch_byte(self, lkey, offset, want, spins);
        }
        let at = (h.get() as *const u8).wrapping_add(offset);
        // A loop of one load and one compare, as perftest's `while (*poll_buf != rcnt)`: under
        // TCG it runs as one translated block chained to itself, where a call per read leaves
        // it for a lookup at every return.
        for _ in 0..spins {
            // SAFETY: `h` is the region's mapping and `offset` lies inside it (the caller's
            // promise); volatile, since the device writes it behind the compiler's back.
            if unsafe { ptr::read_volatile(at) } == want {
                return Ok(true);
            }
        }
        Ok(false)
    }

    unsafe fn mr_write(&self, lkey: u32, h: Handle, offset: usize, data: &[u8]) -> Result<()> {
        if h == Handle::NONE {
            return Provider::mr_write(self, lkey, offset, data);
        }
        let dst = (h.get() as *mut u8).wrapping_add(offset);
        if let [b] = data {
            // SAFETY: as in `FastPath::mr_read` (a WRITE-latency side's counter byte).
            unsafe { ptr::write_volatile(dst, *b) };
            return Ok(());
        }
        // SAFETY: as in `FastPath::mr_read`.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn cq_handle(&self, cq: CqId) -> Handle {
        read_tables(&self.tables)
            .cqs
            .get(&cq.0)
            .map_or(Handle::NONE, |c| Handle::new(c.ptr() as usize))
    }

    unsafe fn poll_cq(&self, cq: CqId, h: Handle, out: &mut [WorkCompletion]) -> usize {
        if h == Handle::NONE {
            return Provider::poll_cq(self, cq, out);
        }
        // SAFETY: the caller vouches that `h` is the live CQ's pointer (cq_handle's).
        unsafe { poll_raw(h.get() as *mut sys::ibv_cq, out) }
    }

    fn qp_handle(&self, qpn: Qpn) -> Handle {
        read_tables(&self.tables)
            .qps
            .get(&qpn.get())
            .map_or(Handle::NONE, |q| Handle::new(q.qp.ptr() as usize))
    }

    unsafe fn post_send(&self, qpn: Qpn, h: Handle, wrs: &[SendWr]) -> Result<()> {
        let qp = h.get() as *mut sys::ibv_qp;
        // SAFETY: the caller vouches that `h` is the live QP's pointer (qp_handle's).
        if h == Handle::NONE || unsafe { (*qp).qp_type } == sys::ibv_qp_type::IBV_QPT_UD {
            // UD looks its address handles up in the table.
            return Provider::post_send(self, qpn, wrs);
        }
        // SAFETY: as above.
        unsafe { self.post_send_raw(qp, qpn, wrs, false, &no_ah) }
    }

    fn prepare_send(&self, wr: &SendWr) -> Result<Option<PreparedRaw>> {
        // UD sends look their address handles up at each post; long lists take the
        // general path.
        if wr.ud.is_some() || wr.sgl.len() > FEW_SGES {
            return Ok(None);
        }
        let mut r = Box::new(RawSend {
            wr: raw_send_wr(wr, false, &no_ah)?,
            sges: few_sges(&wr.sgl),
            flags: 0,
        });
        r.wr.num_sge = wr.sgl.len() as i32;
        // Points into the same box, which does not move.
        r.wr.sg_list = if wr.sgl.is_empty() { ptr::null_mut() } else { r.sges.as_mut_ptr() };
        r.flags = r.wr.send_flags & !sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        // SAFETY: `direct_post_send` takes a `RawSend` and this provider's QP handles.
        Ok(Some(unsafe { PreparedRaw::new(r, Some(direct_post_send)) }))
    }

    fn prepare_recv(&self, wr: &RecvWr) -> Result<Option<PreparedRaw>> {
        if wr.sgl.len() > FEW_SGES {
            return Ok(None);
        }
        let mut r = Box::new(RawRecv {
            wr: sys::ibv_recv_wr {
                wr_id: wr.wr_id,
                next: ptr::null_mut(),
                sg_list: ptr::null_mut(),
                num_sge: wr.sgl.len() as i32,
            },
            sges: few_sges(&wr.sgl),
        });
        if !wr.sgl.is_empty() {
            // Points into the same box, which does not move.
            r.wr.sg_list = r.sges.as_mut_ptr();
        }
        // SAFETY: `direct_post_recv` takes a `RawRecv` and this provider's QP handles.
        Ok(Some(unsafe { PreparedRaw::new(r, Some(direct_post_recv)) }))
    }

    unsafe fn post_prepared_send(&self, qpn: Qpn, h: Handle, p: &mut PreparedSend) -> Result<()> {
        let (wr_id, signaled) = (p.wr().wr_id, p.wr().signaled);
        let raw = p.raw_mut().and_then(|b| b.form_mut::<RawSend>());
        let Some(r) = raw.filter(|_| h != Handle::NONE) else {
            // SAFETY: the caller's promise, passed on.
            return unsafe { FastPath::post_send(self, qpn, h, std::slice::from_ref(p.wr())) };
        };
        // SAFETY: `r` is a `RawSend`; the QP is alive (the caller's promise).
        unsafe { direct_post_send((r as *mut RawSend).cast(), h, wr_id, signaled) }
            .map_err(|f| f.into_error(self, qpn, "post_send"))
    }

    unsafe fn post_prepared_recv(&self, qpn: Qpn, h: Handle, p: &mut PreparedRecv) -> Result<()> {
        let wr_id = p.wr().wr_id;
        let raw = p.raw_mut().and_then(|b| b.form_mut::<RawRecv>());
        let Some(r) = raw.filter(|_| h != Handle::NONE) else {
            // SAFETY: the caller's promise, passed on.
            return unsafe { FastPath::post_recv(self, qpn, h, std::slice::from_ref(p.wr())) };
        };
        // SAFETY: `r` is a `RawRecv`; the QP is alive (the caller's promise).
        unsafe { direct_post_recv((r as *mut RawRecv).cast(), h, wr_id, false) }
            .map_err(|f| f.into_error(self, qpn, "post_recv"))
    }

    unsafe fn post_recv(&self, qpn: Qpn, h: Handle, wrs: &[RecvWr]) -> Result<()> {
        if h == Handle::NONE {
            return Provider::post_recv(self, qpn, wrs);
        }
        // SAFETY: the caller vouches that `h` is the live QP's pointer (qp_handle's).
        unsafe { self.post_recv_raw(h.get() as *mut sys::ibv_qp, qpn, wrs) }
    }
}

impl RdmaCoreDevice {
    /// Posts `wrs` on the QP `qp` (`ud`: each needs an address handle, from `ah`).
    ///
    /// # Safety
    /// `qp` is a live QP of this device.
    unsafe fn post_send_raw(
        &self,
        qp: *mut sys::ibv_qp,
        qpn: Qpn,
        wrs: &[SendWr],
        ud: bool,
        ah: &dyn Fn(&UdDest) -> Result<Raw<sys::ibv_ah>>,
    ) -> Result<()> {
        // SAFETY: the QP is alive (the caller's promise).
        unsafe { check_send_state(qp, qpn)? };
        let mut bad = ptr::null_mut();
        // One WR of a few SGEs (every latency test's post) is built on the stack, without
        // the general path's vectors (BENCHMARKS.md, "Hot paths", H4).
        if let [wr] = wrs
            && wr.sgl.len() <= FEW_SGES
        {
            let mut sges = few_sges(&wr.sgl);
            let mut r = raw_send_wr(wr, ud, ah)?;
            r.num_sge = wr.sgl.len() as i32;
            r.sg_list = if wr.sgl.is_empty() { ptr::null_mut() } else { sges.as_mut_ptr() };
            // SAFETY: the QP is alive (the caller's promise); `r` is a one-WR chain whose
            // scatter list is `sges`, both alive until the call returns (the device copies
            // WQEs at post).
            let rc = unsafe { sys::ibv_post_send(qp, &mut r, &mut bad) };
            return if rc == 0 { Ok(()) } else { Err(self.errno("ibv_post_send", rc)) };
        }
        let mut sges = raw_sges(wrs.iter().map(|w| &w.sgl));
        let mut raw: SmallVec<[sys::ibv_send_wr; 1]> = SmallVec::with_capacity(wrs.len());
        let mut at = 0;
        for wr in wrs {
            let n = wr.sgl.len();
            let mut r = raw_send_wr(wr, ud, ah)?;
            r.num_sge = n as i32;
            // Points into `sges`, which is complete and no longer moves.
            r.sg_list = if n == 0 { ptr::null_mut() } else { sges[at..].as_mut_ptr() };
            at += n;
            raw.push(r);
        }
        for i in 1..raw.len() {
            let next: *mut sys::ibv_send_wr = &mut raw[i];
            raw[i - 1].next = next;
        }
        if raw.is_empty() {
            return Ok(());
        }
        // SAFETY: the QP is alive (the caller's promise); `raw` is a null-terminated chain
        // whose scatter lists point into `sges`, both alive until the call returns (the
        // device copies WQEs at post).
        let rc = unsafe { sys::ibv_post_send(qp, raw.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(self.errno("ibv_post_send", rc));
        }
        Ok(())
    }

    /// Posts receives on the QP `qp`.
    ///
    /// # Safety
    /// `qp` is a live QP of this device.
    unsafe fn post_recv_raw(&self, qp: *mut sys::ibv_qp, qpn: Qpn, wrs: &[RecvWr]) -> Result<()> {
        // SAFETY: the QP is alive (the caller's promise).
        unsafe { check_recv_state(qp, qpn)? };
        let post = |head| {
            let mut bad = ptr::null_mut();
            // SAFETY: the QP is alive and `head` is a valid, null-terminated chain.
            let rc = unsafe { sys::ibv_post_recv(qp, head, &mut bad) };
            if rc == 0 { Ok(()) } else { Err(self.errno("ibv_post_recv", rc)) }
        };
        // One receive of a few SGEs (a SEND-latency side reposts one per message) is built
        // on the stack, without the general path's vectors (BENCHMARKS.md, "Hot paths", H5).
        if let [wr] = wrs
            && wr.sgl.len() <= FEW_SGES
        {
            let mut sges = few_sges(&wr.sgl);
            let mut r = sys::ibv_recv_wr {
                wr_id: wr.wr_id,
                next: ptr::null_mut(),
                sg_list: if wr.sgl.is_empty() { ptr::null_mut() } else { sges.as_mut_ptr() },
                num_sge: wr.sgl.len() as i32,
            };
            return post(&mut r);
        }
        with_recv_wrs(wrs, post)
    }

    /// A copy of `len` bytes at `offset` through a device region's memory, bounds checked.
    fn device_copy(
        &self,
        d: &Arc<dyn verbs::DeviceMemory>,
        offset: usize,
        len: usize,
        copy: impl FnOnce(&dyn verbs::DeviceMemory) -> io::Result<()>,
    ) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > d.len()) {
            return Err(Error::OutOfBounds { offset, len, region_len: d.len() });
        }
        copy(d.as_ref()).map_err(|e| self.call_err("a GPU copy", e))
    }

    fn host_bytes(&self, t: &Tables, lkey: u32) -> Result<(*mut u8, usize)> {
        let r = t.mrs.get(&lkey).ok_or(Error::refused(
            ErrorKind::InvalidArgument,
            concat!("invalid memory region: ", "unknown key"),
        ))?;
        r.bytes().ok_or(Error::Unsupported {
            device: self.name.clone(),
            what: "host access to a dma-buf region",
        })
    }
}

/// A prepared send as libibverbs takes it ([`Provider::prepare_send`]), its scatter list
/// beside it in the same box.
struct RawSend {
    wr: sys::ibv_send_wr,
    sges: [sys::ibv_sge; FEW_SGES],
    /// `wr.send_flags` without `IBV_SEND_SIGNALED` (each post sets that one).
    flags: u32,
}

// SAFETY: the only pointer in `wr` that is not null points into the same box (`sges`), which
// moves with it; nothing else refers to either.
unsafe impl Send for RawSend {}

/// A prepared receive as libibverbs takes it ([`Provider::prepare_recv`]).
struct RawRecv {
    wr: sys::ibv_recv_wr,
    sges: [sys::ibv_sge; FEW_SGES],
}

// SAFETY: as for `RawSend`.
unsafe impl Send for RawRecv {}

/// Scatter/gather elements a single posted WR carries on the stack (the fast path of
/// `post_send_raw`); more take the general path.
const FEW_SGES: usize = 4;

/// Up to [`FEW_SGES`] scatter/gather elements as libibverbs takes them, the rest zero.
#[inline]
fn few_sges(sgl: &verbs::Sgl) -> [sys::ibv_sge; FEW_SGES] {
    let mut sges = [sys::ibv_sge { addr: 0, length: 0, lkey: 0 }; FEW_SGES];
    for (d, s) in sges.iter_mut().zip(sgl) {
        *d = raw_sge(s);
    }
    sges
}

/// The state of a QP not yet ready to send (RESET, INIT, RTR), which refuses a send with the
/// state error the soft provider gives; `None` when it takes one.
///
/// # Safety
/// `qp` is a live QP.
#[inline]
unsafe fn refuses_sends(qp: *mut sys::ibv_qp) -> Option<QpState> {
    // SAFETY: the QP is alive (the caller's promise); libibverbs keeps `state` current.
    let state = state_from_ibv(unsafe { (*qp).state });
    matches!(state, QpState::Reset | QpState::Init | QpState::Rtr).then_some(state)
}

/// The state of a QP in RESET, which refuses a receive, as [`refuses_sends`].
///
/// # Safety
/// `qp` is a live QP.
#[inline]
unsafe fn refuses_receives(qp: *mut sys::ibv_qp) -> Option<QpState> {
    // SAFETY: the QP is alive (the caller's promise).
    let state = state_from_ibv(unsafe { (*qp).state });
    (state == QpState::Reset).then_some(state)
}

/// Refuses a send on a QP not yet ready to send ([`refuses_sends`]).
///
/// # Safety
/// `qp` is a live QP.
#[inline]
unsafe fn check_send_state(qp: *mut sys::ibv_qp, qpn: Qpn) -> Result<()> {
    // SAFETY: the caller's promise, passed on.
    match unsafe { refuses_sends(qp) } {
        Some(state) => Err(Error::bad_state(qpn, state, "post_send")),
        None => Ok(()),
    }
}

/// Refuses a receive on a QP in RESET ([`refuses_receives`]).
///
/// # Safety
/// `qp` is a live QP.
#[inline]
unsafe fn check_recv_state(qp: *mut sys::ibv_qp, qpn: Qpn) -> Result<()> {
    // SAFETY: the caller's promise, passed on.
    match unsafe { refuses_receives(qp) } {
        Some(state) => Err(Error::bad_state(qpn, state, "post_recv")),
        None => Ok(()),
    }
}

/// [`crate::DirectPost`] for a [`RawSend`]: its id and signaled flag set, one `ibv_post_send`.
///
/// # Safety
/// As for [`crate::DirectPost`]: `form` points at a `RawSend`, `qp` is a live QP's handle.
unsafe fn direct_post_send(
    form: *mut (),
    qp: Handle,
    wr_id: u64,
    signaled: bool,
) -> std::result::Result<(), PostFailure> {
    let qp = qp.get() as *mut sys::ibv_qp;
    // SAFETY: the QP is alive (the caller's promise).
    if let Some(state) = unsafe { refuses_sends(qp) } {
        return Err(PostFailure::State(state));
    }
    // SAFETY: `form` is a `RawSend`'s box, not otherwise borrowed during the call.
    let r = unsafe { &mut *form.cast::<RawSend>() };
    r.wr.wr_id = wr_id;
    r.wr.send_flags = r.flags | if signaled { sys::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 };
    let mut bad = ptr::null_mut();
    // SAFETY: the QP is alive; `r.wr` is a one-WR chain whose scatter list is `r.sges`, in the
    // same box (the device copies WQEs at post).
    let rc = unsafe { sys::ibv_post_send(qp, &mut r.wr, &mut bad) };
    if rc == 0 { Ok(()) } else { Err(PostFailure::Errno(rc)) }
}

/// [`crate::DirectPost`] for a [`RawRecv`]: its id set, one `ibv_post_recv`.
///
/// # Safety
/// As for [`direct_post_send`], `form` pointing at a `RawRecv`.
unsafe fn direct_post_recv(
    form: *mut (),
    qp: Handle,
    wr_id: u64,
    _signaled: bool,
) -> std::result::Result<(), PostFailure> {
    let qp = qp.get() as *mut sys::ibv_qp;
    // SAFETY: the QP is alive (the caller's promise).
    if let Some(state) = unsafe { refuses_receives(qp) } {
        return Err(PostFailure::State(state));
    }
    // SAFETY: `form` is a `RawRecv`'s box, not otherwise borrowed during the call.
    let r = unsafe { &mut *form.cast::<RawRecv>() };
    r.wr.wr_id = wr_id;
    let mut bad = ptr::null_mut();
    // SAFETY: the QP is alive; `r.wr` is a one-WR chain whose scatter list is `r.sges`, in the
    // same box.
    let rc = unsafe { sys::ibv_post_recv(qp, &mut r.wr, &mut bad) };
    if rc == 0 { Ok(()) } else { Err(PostFailure::Errno(rc)) }
}

/// The address-handle lookup of a QP that is not UD: a send that names a destination is
/// refused.
fn no_ah(_: &UdDest) -> Result<Raw<sys::ibv_ah>> {
    Err(Error::refused(ErrorKind::InvalidArgument, "invalid work request: not a UD QP"))
}

/// `wr` as libibverbs takes it, without its scatter list (`num_sge`, `sg_list`) or chain
/// link; `ud`: its destination's address handle comes from `ah`.
#[inline]
fn raw_send_wr(
    wr: &SendWr,
    ud: bool,
    ah: &dyn Fn(&UdDest) -> Result<Raw<sys::ibv_ah>>,
) -> Result<sys::ibv_send_wr> {
    // SAFETY: all-zero is a valid ibv_send_wr (integers, null pointers, unions of them).
    let mut r: sys::ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
    r.wr_id = wr.wr_id;
    r.send_flags = if wr.signaled { sys::ibv_send_flags::IBV_SEND_SIGNALED.0 } else { 0 }
        | if wr.solicited { sys::ibv_send_flags::IBV_SEND_SOLICITED.0 } else { 0 }
        | if wr.inline { sys::ibv_send_flags::IBV_SEND_INLINE.0 } else { 0 };
    use sys::ibv_wr_opcode::*;
    let rdma = |remote_addr: u64, rkey: verbs::RKey| sys::wr_t {
        rdma: sys::rdma_t { remote_addr, rkey: rkey.0 },
    };
    match wr.op {
        SendOp::Send => r.opcode = IBV_WR_SEND,
        SendOp::SendWithImm(imm) => {
            r.opcode = IBV_WR_SEND_WITH_IMM;
            r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        SendOp::Write { remote_addr, rkey } => {
            r.opcode = IBV_WR_RDMA_WRITE;
            r.wr = rdma(remote_addr, rkey);
        }
        SendOp::WriteWithImm { remote_addr, rkey, imm } => {
            r.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            r.wr = rdma(remote_addr, rkey);
            r.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
        }
        SendOp::Read { remote_addr, rkey } => {
            r.opcode = IBV_WR_RDMA_READ;
            r.wr = rdma(remote_addr, rkey);
        }
        SendOp::CompareSwap { remote_addr, rkey, compare, swap } => {
            r.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
            r.wr = sys::wr_t {
                atomic: sys::atomic_t { remote_addr, compare_add: compare, swap, rkey: rkey.0 },
            };
        }
        SendOp::FetchAdd { remote_addr, rkey, add } => {
            r.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            r.wr = sys::wr_t {
                atomic: sys::atomic_t { remote_addr, compare_add: add, swap: 0, rkey: rkey.0 },
            };
        }
    }
    if ud {
        let d = wr.ud.ok_or(Error::refused(
            ErrorKind::InvalidArgument,
            concat!("invalid work request: ", "a UD send needs a destination"),
        ))?;
        let ah = ah(&d)?;
        r.wr = sys::wr_t {
            ud: sys::ud_t { ah: ah.ptr(), remote_qpn: d.qpn.get(), remote_qkey: d.qkey.0 },
        };
    }
    Ok(r)
}

/// Polls `cq` into `out`, converting each `ibv_wc`.
///
/// # Safety
/// `cq` is a live CQ of this process.
#[inline]
unsafe fn poll_raw(cq: *mut sys::ibv_cq, out: &mut [WorkCompletion]) -> usize {
    let mut raw = [MaybeUninit::<sys::ibv_wc>::uninit(); 32];
    let want = out.len().min(raw.len());
    // SAFETY: the caller's CQ is alive and `raw` has room for `want` entries.
    let n = unsafe { sys::ibv_poll_cq(cq, want as i32, raw.as_mut_ptr().cast()) };
    let n = usize::try_from(n).unwrap_or(0);
    for (o, r) in out.iter_mut().zip(&raw[..n]) {
        // SAFETY: ibv_poll_cq initialized the first `n` entries.
        let wc = unsafe { r.assume_init() };
        let with_imm = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0;
        // Only UD receives carry a GRH (RoCE always has one), and only they a source QP.
        let grh = wc.wc_flags & sys::ibv_wc_flags::IBV_WC_GRH.0 != 0;
        let recv = wc.opcode & sys::ibv_wc_opcode::IBV_WC_RECV != 0;
        *o = WorkCompletion {
            wr_id: wc.wr_id,
            status: status_from_ibv(wc.status),
            opcode: opcode_from_ibv(wc.opcode),
            byte_len: wc.byte_len,
            // SAFETY: with IBV_WC_WITH_IMM the union holds the immediate data.
            imm: with_imm
                .then(|| u32::from_be(unsafe { wc.imm_data_invalidated_rkey_union.imm_data })),
            qp_num: Qpn::new(wc.qp_num),
            src_qp: (grh && recv).then(|| Qpn::new(wc.src_qp)),
            grh,
        };
    }
    n
}

/// Every scatter/gather element of `sgls`, in order, as libibverbs takes them.
fn raw_sges<'a>(sgls: impl Iterator<Item = &'a verbs::Sgl>) -> SmallVec<[sys::ibv_sge; 4]> {
    sgls.flatten().map(raw_sge).collect()
}

/// One scatter/gather element as libibverbs takes it.
#[inline]
fn raw_sge(s: &verbs::Sge) -> sys::ibv_sge {
    sys::ibv_sge { addr: s.addr, length: s.length, lkey: s.lkey }
}

/// Builds the `ibv_recv_wr` chain of `wrs` and calls `post` with its head.
fn with_recv_wrs(
    wrs: &[RecvWr],
    post: impl FnOnce(*mut sys::ibv_recv_wr) -> Result<()>,
) -> Result<()> {
    if wrs.is_empty() {
        return Ok(());
    }
    let mut sges = raw_sges(wrs.iter().map(|w| &w.sgl));
    let mut raw: SmallVec<[sys::ibv_recv_wr; 4]> = SmallVec::with_capacity(wrs.len());
    let mut at = 0;
    for wr in wrs {
        let n = wr.sgl.len();
        raw.push(sys::ibv_recv_wr {
            wr_id: wr.wr_id,
            next: ptr::null_mut(),
            sg_list: if n == 0 { ptr::null_mut() } else { sges[at..].as_mut_ptr() },
            num_sge: n as i32,
        });
        at += n;
    }
    for i in 1..raw.len() {
        let next: *mut sys::ibv_recv_wr = &mut raw[i];
        raw[i - 1].next = next;
    }
    post(raw.as_mut_ptr())
}
