//! The object tables QPs share: completion queues, shared receive queues and their events,
//! and memory regions with the key, bounds, access and PD checks every access passes.

use std::collections::VecDeque;

use wire::RKey;

use verbs::{Access, Counters, MrId, MrInfo, PdId, RecvWr, Sge, WorkCompletion};

use crate::memory::Memory;

use super::*;

/// What every QP of a device works on besides itself: the provider's memory and the regions
/// registered in it, the completion and shared receive queues, the counters. Apart from the
/// QP table, so that a QP and these can be borrowed at once.
#[derive(Debug)]
pub(super) struct Device<M> {
    pub(super) mem: M,
    pub(super) mrs: MrTable,
    pub(super) cqs: CqTable,
    pub(super) counters: Counters,
}

/// A shared receive queue's state.
#[derive(Debug)]
pub(super) struct Srq {
    pub(super) pd: PdId,
    pub(super) rq: VecDeque<RecvWr>,
    pub(super) max_wr: u32,
    /// Raise [`Event::SrqLimitReached`] when fewer remain; 0: disarmed.
    pub(super) limit: u32,
}

/// What QPs share: completion queues, shared receive queues and the events they raise, and
/// the device's READ and send windows.
#[derive(Debug, Default)]
pub(super) struct CqTable {
    pub(super) queues: Vec<VecDeque<WorkCompletion>>,
    pub(super) srqs: Vec<Option<Srq>>,
    pub(super) events: VecDeque<Event>,
    /// READ response bytes the QPs have asked for and not yet received, together.
    pub(super) read_inflight: u64,
    /// QPs waiting for the device's READ window to open.
    pub(super) read_waiters: Vec<Qpn>,
    /// RC SEND and WRITE bytes (packets × MTU) the QPs have sent and not had acknowledged,
    /// together.
    pub(super) send_inflight: u64,
    /// QPs waiting for the device's send window to open.
    pub(super) send_waiters: Vec<Qpn>,
}

impl CqTable {
    /// Counts `req`'s READ responses and SEND/WRITE packets in flight again, after it sent
    /// or its oldest unacknowledged PSN moved.
    pub(super) fn account(&mut self, req: &mut Requester, mtu: u64) {
        let reads = req.read_end.diff(req.una).max(0);
        let now = reads as u64 * mtu;
        self.read_inflight = self.read_inflight.saturating_sub(req.read_inflight) + now;
        req.read_inflight = now;
        // The PSNs in flight that are not READ responses: SEND and WRITE packets (and
        // atomics, one PSN each).
        let sends = (req.next_psn.diff(req.una) - reads).max(0) as u64 * mtu;
        self.send_inflight = self.send_inflight.saturating_sub(req.send_inflight) + sends;
        req.send_inflight = sends;
    }

    /// `req`'s READ responses and acknowledgements will not come (an error, a reset): they
    /// leave the counts.
    pub(super) fn release(&mut self, req: &mut Requester) {
        self.read_inflight = self.read_inflight.saturating_sub(req.read_inflight);
        req.read_inflight = 0;
        req.read_end = req.una;
        self.send_inflight = self.send_inflight.saturating_sub(req.send_inflight);
        req.send_inflight = 0;
    }

    pub(super) fn srq(&self, id: SrqId) -> Option<&Srq> {
        self.srqs.get(id.0 as usize)?.as_ref()
    }

    pub(super) fn srq_mut(&mut self, id: SrqId) -> Option<&mut Srq> {
        self.srqs.get_mut(id.0 as usize)?.as_mut()
    }

    pub(super) fn srq_pop(&mut self, id: SrqId) -> Option<RecvWr> {
        let srq = self.srq_mut(id)?;
        let r = srq.rq.pop_front()?;
        if srq.limit != 0 && (srq.rq.len() as u64) < u64::from(srq.limit) {
            srq.limit = 0;
            self.events.push_back(Event::SrqLimitReached(id));
        }
        Some(r)
    }
}

impl core::ops::Deref for CqTable {
    type Target = [VecDeque<WorkCompletion>];
    fn deref(&self) -> &Self::Target {
        &self.queues
    }
}

impl core::ops::DerefMut for CqTable {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.queues
    }
}

#[derive(Debug, Default)]
pub(super) struct MrTable {
    pub(super) by_lkey: HashMap<u32, MrInfo>,
    pub(super) by_rkey: HashMap<u32, u32>,
    /// The region found last by local and by remote key: a stream of packets names the same
    /// one again and again, and one compare beats a hash probe. Cleared on every change.
    pub(super) hot_l: std::cell::Cell<Option<MrInfo>>,
    pub(super) hot_r: std::cell::Cell<Option<MrInfo>>,
}

impl MrTable {
    pub(super) fn insert(&mut self, mr: MrInfo) {
        self.by_lkey.insert(mr.lkey, mr);
        if mr.rkey != 0 {
            self.by_rkey.insert(mr.rkey, mr.lkey);
        }
        self.hot_l.set(None);
        self.hot_r.set(None);
    }

    pub(super) fn remove(&mut self, lkey: u32) -> Option<MrInfo> {
        let mr = self.by_lkey.remove(&lkey)?;
        self.by_rkey.remove(&mr.rkey);
        self.hot_l.set(None);
        self.hot_r.set(None);
        Some(mr)
    }

    /// The region with local key `lkey`.
    pub(super) fn by_l(&self, lkey: u32) -> Option<MrInfo> {
        if let Some(mr) = self.hot_l.get().filter(|m| m.lkey == lkey) {
            return Some(mr);
        }
        let mr = *self.by_lkey.get(&lkey)?;
        self.hot_l.set(Some(mr));
        Some(mr)
    }

    /// The region with remote key `rkey` (never 0: regions without remote access have none).
    pub(super) fn by_r(&self, rkey: u32) -> Option<MrInfo> {
        if let Some(mr) = self.hot_r.get().filter(|m| m.rkey == rkey && rkey != 0) {
            return Some(mr);
        }
        let mr = *self.by_lkey.get(self.by_rkey.get(&rkey)?)?;
        self.hot_r.set(Some(mr));
        Some(mr)
    }

    /// Checks a local scatter/gather list: keys, PD, bounds and, when `write`, LOCAL_WRITE.
    pub(super) fn check_sgl(&self, pd: PdId, sgl: &[Sge], write: bool) -> bool {
        sgl.iter().all(|s| {
            self.by_l(s.lkey).is_some_and(|mr| {
                mr.pd == pd
                    && mr.offset_of(s.addr, u64::from(s.length)).is_some()
                    && (!write || mr.access.contains(Access::LOCAL_WRITE))
            })
        })
    }

    /// The region a remote request of `len` bytes targets, and the offset in it. A zero-length
    /// request touches no memory, so it needs no valid key (IBTA); any other must pass
    /// [`MrTable::check_remote`].
    pub(super) fn target(
        &self,
        pd: PdId,
        rkey: RKey,
        addr: u64,
        len: u64,
        need: Access,
        qp_access: Access,
    ) -> Option<(MrInfo, u64)> {
        if len == 0 {
            let none =
                MrInfo { id: MrId(0), pd, addr: 0, len: 0, access: Access(0), lkey: 0, rkey: 0 };
            return Some((none, 0));
        }
        self.check_remote(pd, rkey, addr, len, need, qp_access)
    }

    /// Checks a remote access; returns the region and the offset in it.
    pub(super) fn check_remote(
        &self,
        pd: PdId,
        rkey: RKey,
        addr: u64,
        len: u64,
        need: Access,
        qp_access: Access,
    ) -> Option<(MrInfo, u64)> {
        let mr = self.by_r(rkey.0)?;
        if mr.pd != pd || !mr.access.contains(need) || !qp_access.contains(need) {
            return None;
        }
        Some((mr, mr.offset_of(addr, len)?))
    }
}

/// Copies bytes `[off, off + out.len())` of a scatter list out of memory.
pub(super) fn gather<M: Memory>(
    mrs: &MrTable,
    mem: &M,
    sgl: &[Sge],
    mut off: u64,
    out: &mut [u8],
) -> bool {
    let mut done = 0usize;
    for s in sgl {
        let len = u64::from(s.length);
        if off >= len {
            off -= len;
            continue;
        }
        let Some(mr) = mrs.by_l(s.lkey) else { return false };
        let n = ((len - off) as usize).min(out.len() - done);
        let Some(base) = mr.offset_of(s.addr, len) else { return false };
        if mem.read(mr.id, base + off, &mut out[done..done + n]).is_err() {
            return false;
        }
        done += n;
        off = 0;
        if done == out.len() {
            break;
        }
    }
    done == out.len()
}

/// Copies `data` into a scatter list at byte `off`; `Err(true)` when it does not fit.
pub(super) fn scatter<M: Memory>(
    mrs: &MrTable,
    mem: &mut M,
    sgl: &[Sge],
    mut off: u64,
    data: &[u8],
) -> Result<(), bool> {
    let mut done = 0usize;
    for s in sgl {
        if done == data.len() {
            break;
        }
        let len = u64::from(s.length);
        if off >= len {
            off -= len;
            continue;
        }
        let mr = mrs.by_l(s.lkey).ok_or(false)?;
        let base = mr.offset_of(s.addr, len).ok_or(false)?;
        let n = ((len - off) as usize).min(data.len() - done);
        mem.write(mr.id, base + off, &data[done..done + n]).map_err(|_| false)?;
        done += n;
        off = 0;
    }
    if done == data.len() { Ok(()) } else { Err(true) }
}
