//! Shared receive queues (`ibv_srq`).

use std::fmt;
use std::sync::Arc;

use crate::pd::PdLife;
use crate::*;

/// A shared receive queue (`ibv_srq`).
pub struct SharedReceiveQueue {
    pub(crate) dev: Arc<dyn Provider>,
    pub(crate) id: SrqId,
    /// Its protection domain, freed after it.
    pub(crate) _pd: Arc<PdLife>,
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SharedReceiveQueue").field(&self.id.0).finish()
    }
}

impl SharedReceiveQueue {
    /// Posts a receive (`ibv_post_srq_recv`).
    pub fn post_recv(&self, wr: RecvWr) -> Result<()> {
        self.dev.post_srq_recv(self.id, std::slice::from_ref(&wr))
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): one
    /// [`AsyncEvent::SrqLimitReached`] when fewer than `limit` receives remain.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        self.dev.arm_srq_limit(self.id, limit)
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        self.dev.destroy_srq(self.id);
    }
}
