//! The device: opening it, its attributes, port and GID table, address handles, counters and asynchronous events.

use super::*;

/// The GID table of port 1 (zero GIDs left out): one `ibv_query_gid_table` (a single uverbs
/// ioctl), or, where that is missing (a kernel before 5.9, an older libibverbs), the device's
/// sysfs files. The ioctl matters where the table is long: rxe's has 1024 entries, a file
/// each, and reading them took ~0.3 s per device in the QEMU guest, at every start.
pub(crate) fn gid_table(sys_root: &Path, ctx: *mut sys::ibv_context, dev: &str) -> Vec<GidEntry> {
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
        return gid_table_sysfs(sys_root, dev);
    }
    // SAFETY: all-zero is a valid ibv_gid_entry (integers and a byte array).
    let mut raw = vec![unsafe { MaybeUninit::<sys::ibv_gid_entry>::zeroed().assume_init() }; room];
    // SAFETY: the context is open and `raw` has room for `room` entries of the size passed.
    let n = unsafe { sys::ibv_query_gid_table(ctx, raw.as_mut_ptr(), room, 0) };
    let Ok(n) = usize::try_from(n) else { return gid_table_sysfs(sys_root, dev) };
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
pub(crate) fn gid_table_sysfs(sys_root: &Path, dev: &str) -> Vec<GidEntry> {
    let Some(d) = host::rdma_device(sys_root, dev) else {
        return Vec::new();
    };
    let Some(p) = d.ports.into_iter().find(|p| p.port == PORT) else { return Vec::new() };
    p.gids
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
        let sys_root = host::default_root();
        let gids = gid_table(&sys_root, ctx_raw.ptr(), &dev_name);
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
            sysfs: sys_root,
            name: dev_name,
            gid,
            gids,
            tables: RwLock::new(Tables::default()),
            ctx_raw,
            ctx,
        })
    }

    pub(crate) fn call_err(&self, verb: &'static str, source: io::Error) -> Error {
        Error::Call { device: self.name.clone(), verb, source }
    }

    pub(crate) fn errno(&self, verb: &'static str, rc: i32) -> Error {
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
    pub(crate) fn sgid_for(&self, ip: IpAddr) -> u8 {
        let fam = |g: &GidEntry| g.gid.to_ip().map(|a| a.is_ipv4());
        if fam(&self.gid) == Some(ip.is_ipv4()) {
            return self.gid.index as u8;
        }
        self.gids
            .iter()
            .find(|g| g.gid_type == GidType::RoceV2 && fam(g) == Some(ip.is_ipv4()))
            .map_or(self.gid.index as u8, |g| g.index as u8)
    }

    pub(crate) fn ah_attr(
        &self,
        ip: IpAddr,
        flow_label: u32,
        traffic_class: u8,
    ) -> sys::ibv_ah_attr {
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
    pub(crate) fn ah(
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

    pub(crate) fn hw_counters_dir(&self) -> PathBuf {
        host::device_dir(&self.sysfs, &self.name).join("ports/1/hw_counters")
    }

    pub(crate) fn query_device(&self) -> Result<DeviceAttr> {
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

    pub(crate) fn port_attr(&self) -> PortAttr {
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

    pub(crate) fn gid_table(&self) -> Vec<GidEntry> {
        self.gids.clone()
    }

    pub(crate) fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
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

    pub(crate) fn counters(&self) -> Counters {
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
}
