//! The [`Provider`] trait, answered verb by verb by the object modules.

use super::*;

/// Each verb is answered by its object's module (`pd`, `mr`, `cq`, `srq`, `qp`, `post`,
/// `device`); the trait is the list of them.
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
        RdmaCoreDevice::query_device(self)
    }

    fn port_attr(&self) -> PortAttr {
        RdmaCoreDevice::port_attr(self)
    }

    fn gid_index(&self) -> usize {
        self.gid.index
    }

    fn gid_table(&self) -> Vec<GidEntry> {
        RdmaCoreDevice::gid_table(self)
    }

    fn alloc_pd(&self) -> Result<PdId> {
        RdmaCoreDevice::alloc_pd(self)
    }

    fn dealloc_pd(&self, pd: PdId) -> Result<()> {
        RdmaCoreDevice::dealloc_pd(self, pd)
    }

    fn reg_mr(&self, pd: PdId, len: usize, access: Access) -> Result<MrInfo> {
        RdmaCoreDevice::reg_mr(self, pd, len, access)
    }

    fn dereg_mr(&self, lkey: u32) {
        RdmaCoreDevice::dereg_mr(self, lkey)
    }

    fn mr_read(&self, lkey: u32, offset: usize, out: &mut [u8]) -> Result<()> {
        RdmaCoreDevice::mr_read(self, lkey, offset, out)
    }

    fn mr_write(&self, lkey: u32, offset: usize, data: &[u8]) -> Result<()> {
        RdmaCoreDevice::mr_write(self, lkey, offset, data)
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
        RdmaCoreDevice::reg_device_mr(self, pd, mem, access)
    }

    fn create_channel(&self) -> Result<u32> {
        RdmaCoreDevice::create_channel(self)
    }

    fn create_cq(&self, cqe: u32, channel: Option<u32>) -> Result<CqId> {
        RdmaCoreDevice::create_cq(self, cqe, channel)
    }

    fn destroy_cq(&self, cq: CqId) {
        RdmaCoreDevice::destroy_cq(self, cq)
    }

    fn poll_cq(&self, cq: CqId, out: &mut [WorkCompletion]) -> usize {
        RdmaCoreDevice::poll_cq(self, cq, out)
    }

    fn req_notify_cq(&self, cq: CqId) -> Result<()> {
        RdmaCoreDevice::req_notify_cq(self, cq)
    }

    fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> Option<CqId> {
        RdmaCoreDevice::get_cq_event(self, channel, timeout)
    }

    fn create_srq(&self, pd: PdId, max_wr: u32) -> Result<SrqId> {
        RdmaCoreDevice::create_srq(self, pd, max_wr)
    }

    fn destroy_srq(&self, srq: SrqId) {
        RdmaCoreDevice::destroy_srq(self, srq)
    }

    fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<()> {
        RdmaCoreDevice::post_srq_recv(self, srq, wrs)
    }

    fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()> {
        RdmaCoreDevice::arm_srq_limit(self, srq, limit)
    }

    fn create_qp(&self, spec: &QpSpec) -> Result<Qpn> {
        RdmaCoreDevice::create_qp(self, spec)
    }

    fn modify_qp(&self, qpn: Qpn, m: &ModifyQp) -> Result<()> {
        RdmaCoreDevice::modify_qp(self, qpn, m)
    }

    fn query_qp(&self, qpn: Qpn) -> Result<(QpState, QpAttr)> {
        RdmaCoreDevice::query_qp(self, qpn)
    }

    fn destroy_qp(&self, qpn: Qpn) {
        RdmaCoreDevice::destroy_qp(self, qpn)
    }

    fn post_send(&self, qpn: Qpn, wrs: &[SendWr]) -> Result<()> {
        RdmaCoreDevice::post_send(self, qpn, wrs)
    }

    fn post_recv(&self, qpn: Qpn, wrs: &[RecvWr]) -> Result<()> {
        RdmaCoreDevice::post_recv(self, qpn, wrs)
    }

    fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        RdmaCoreDevice::get_async_event(self, timeout)
    }

    fn counters(&self) -> Counters {
        RdmaCoreDevice::counters(self)
    }

    fn fast_path(self: Arc<Self>) -> Option<Arc<dyn FastPath>> {
        Some(self)
    }
}
