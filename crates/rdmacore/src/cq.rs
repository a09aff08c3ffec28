//! Completion queues and completion channels.

use super::*;

/// Waits until `fd` is readable or `timeout` passes (`None`: forever).
pub(crate) fn wait_readable(fd: RawFd, timeout: Option<Duration>) -> bool {
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
    pub(crate) fn create_channel(&self) -> Result<u32> {
        // SAFETY: the context is open.
        let ch = unsafe { sys::ibv_create_comp_channel(self.ctx_raw.ptr()) };
        let ch = Raw::new(ch)
            .ok_or_else(|| self.call_err("ibv_create_comp_channel", io::Error::last_os_error()))?;
        let mut t = write_tables(&self.tables);
        let id = t.id();
        t.channels.insert(id, ch);
        Ok(id)
    }

    pub(crate) fn create_cq(&self, cqe: u32, channel: Option<u32>) -> Result<CqId> {
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

    pub(crate) fn destroy_cq(&self, cq: CqId) {
        if let Some(c) = write_tables(&self.tables).cqs.remove(&cq.0) {
            // SAFETY: out of the table, so no other thread polls it; QPs using it are gone
            // (they hold the CQ's Rust owner).
            unsafe { sys::ibv_destroy_cq(c.ptr()) };
        }
    }

    pub(crate) fn poll_cq(&self, cq: CqId, out: &mut [WorkCompletion]) -> usize {
        let t = read_tables(&self.tables);
        let Some(c) = t.cqs.get(&cq.0).copied() else { return 0 };
        // SAFETY: the CQ is alive (read lock).
        unsafe { poll_raw(c.ptr(), out) }
    }

    pub(crate) fn req_notify_cq(&self, cq: CqId) -> Result<()> {
        let t = read_tables(&self.tables);
        let c = t.cqs.get(&cq.0).ok_or(Error::no_such(format_args!("CQ {:?}", cq)))?;
        // SAFETY: the CQ is alive (read lock).
        let rc = unsafe { sys::ibv_req_notify_cq(c.ptr(), 0) };
        if rc != 0 {
            return Err(self.errno("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    pub(crate) fn get_cq_event(&self, channel: u32, timeout: Option<Duration>) -> Option<CqId> {
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
}
