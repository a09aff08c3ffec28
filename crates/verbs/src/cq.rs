//! Completion queues (`ibv_cq`) and completion channels (`ibv_comp_channel`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::*;

/// A completion queue (`ibv_cq`).
pub struct CompletionQueue {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) id: CqId,
    /// The provider's hot paths and its direct reference to the CQ.
    pub(crate) fast: Option<Arc<dyn FastPath>>,
    pub(crate) h: Handle,
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CompletionQueue").field(&self.id.0).finish()
    }
}

impl CompletionQueue {
    /// The CQ's id (what [`CompletionChannel::get_cq_event`] returns).
    pub fn id(&self) -> CqId {
        self.id
    }

    /// Moves up to `out.len()` completions into `out` and returns how many (`ibv_poll_cq`).
    /// On a busy-poll context this also drives the device's I/O.
    #[inline]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        match &self.fast {
            // SAFETY: the handle is this CQ's, which only `self`'s drop destroys.
            Some(f) => unsafe { f.poll_cq(self.id, self.h, out) },
            None => self.dev.poll_cq(self.id, out),
        }
    }

    /// Polls until one completion arrives or `timeout` passes.
    pub fn poll_one_blocking(&self, timeout: Duration) -> Option<WorkCompletion> {
        let deadline = std::time::Instant::now() + timeout;
        let mut wc = [empty_wc()];
        loop {
            if self.poll(&mut wc) == 1 {
                return Some(wc[0]);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    /// Arms the CQ: its channel gets one event when the next completion arrives (or at once
    /// if completions are already waiting) (`ibv_req_notify_cq`).
    pub fn req_notify(&self) -> Result<()> {
        self.dev.req_notify_cq(self.id)
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.dev.destroy_cq(self.id);
    }
}

/// A zeroed completion, to size poll buffers.
pub const fn empty_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm: None,
        qp_num: Qpn::new(0),
        src_qp: None,
        grh: false,
    }
}

/// A completion channel (`ibv_comp_channel`).
pub struct CompletionChannel {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) id: u32,
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CompletionChannel").field(&self.id).finish()
    }
}

impl CompletionChannel {
    /// Blocks (no spinning) until an armed CQ of this channel has a completion, or `timeout`
    /// passes; returns the CQ (`ibv_get_cq_event`). Re-arm the CQ before polling it empty.
    pub fn get_cq_event(&self, timeout: Option<Duration>) -> Option<CqId> {
        self.dev.get_cq_event(self.id, timeout)
    }
}
