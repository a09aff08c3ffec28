//! Shared receive queues.

use super::*;

impl RdmaCoreDevice {
    pub(crate) fn create_srq(&self, pd: PdId, max_wr: u32) -> Result<SrqId> {
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

    pub(crate) fn destroy_srq(&self, srq: SrqId) {
        if let Some(s) = write_tables(&self.tables).srqs.remove(&srq.0) {
            // SAFETY: out of the table; the QPs using it are gone (they borrow its owner).
            unsafe { sys::ibv_destroy_srq(s.ptr()) };
        }
    }

    pub(crate) fn post_srq_recv(&self, srq: SrqId, wrs: &[RecvWr]) -> Result<()> {
        let t = read_tables(&self.tables);
        let s = t.srqs.get(&srq.0).ok_or(Error::no_such(format_args!("SRQ {:?}", srq)))?;
        with_recv_wrs(wrs, |head| {
            let mut bad = ptr::null_mut();
            // SAFETY: the SRQ is alive and `head` is a valid, null-terminated chain.
            let rc = unsafe { sys::ibv_post_srq_recv(s.ptr(), head, &mut bad) };
            if rc == 0 { Ok(()) } else { Err(self.errno("ibv_post_srq_recv", rc)) }
        })
    }

    pub(crate) fn arm_srq_limit(&self, srq: SrqId, limit: u32) -> Result<()> {
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
}
