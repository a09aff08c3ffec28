//! Work requests prepared once and posted many times, in a provider's own form.

use std::fmt;

use crate::*;

/// A provider's own form of a prepared work request (for rdma-core, the libibverbs
/// `ibv_send_wr` or `ibv_recv_wr` with its scatter list), and where the provider has one, the
/// function that posts it directly.
pub struct PreparedRaw {
    pub(crate) form: Box<dyn std::any::Any + Send>,
    pub(crate) post: Option<DirectPost>,
    /// The QP it was prepared on: the only one [`DirectPost`] posts it on (another QP takes
    /// it through its provider's table, which looks at what the form is).
    pub(crate) qp: Handle,
}

/// How a provider posts its prepared form without a call through its method table: `form`
/// points at the form [`PreparedRaw::new`] boxed, `qp` is the QP's handle (never
/// [`Handle::NONE`]), with the request's current id and (for a send) signaled flag. A
/// failure comes back as [`PostFailure`] ([`PostFailure::into_error`] names it).
///
/// On a latency test's critical path each call through the table, and each look at a boxed
/// form's type, costs under emulation what a handful of instructions cost natively (measured:
/// BENCHMARKS.md, "Hot paths", H1).
///
/// # Safety
/// `form` is the pointer [`PreparedRaw`] holds for this function's own form, and `qp` is a
/// live QP's handle from the provider that made both.
pub type DirectPost =
    unsafe fn(form: *mut (), qp: Handle, wr_id: u64, signaled: bool) -> Result<(), PostFailure>;

/// Why a [`DirectPost`] posted nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostFailure {
    /// The QP is in a state that takes no such request.
    State(QpState),
    /// The provider's verb failed with this error number.
    Errno(i32),
}

impl PostFailure {
    /// The error a post of `verb` (`post_send`, `post_recv`) on QP `qpn` of `dev` gives for
    /// this failure: the state error, as the soft provider's, or the provider's
    /// ([`FastPath::post_errno`]).
    pub fn into_error(self, dev: &(impl FastPath + ?Sized), qpn: Qpn, verb: &'static str) -> Error {
        match self {
            PostFailure::State(state) => Error::bad_state(qpn, state, verb),
            PostFailure::Errno(rc) => dev.post_errno(verb, rc),
        }
    }
}

impl PreparedRaw {
    /// A provider's form, with the function that posts it directly where there is one.
    ///
    /// # Safety
    /// `post`, if given, takes a pointer to a `T` as its form, and a handle of a live QP of the
    /// provider that returns this from [`FastPath::prepare_send`] or
    /// [`FastPath::prepare_recv`].
    pub unsafe fn new<T: std::any::Any + Send>(
        form: Box<T>,
        post: Option<DirectPost>,
    ) -> PreparedRaw {
        PreparedRaw { form, post, qp: Handle::NONE }
    }

    /// The form, if it is a `T`.
    pub fn form_mut<T: std::any::Any>(&mut self) -> Option<&mut T> {
        self.form.downcast_mut()
    }

    /// Posts through [`DirectPost`] on `qp`, where the provider gave one and `qp` is the
    /// handle of the QP it was prepared on; `None` otherwise.
    ///
    /// # Safety
    /// `qp` is [`Handle::NONE`] or a live QP's handle.
    #[inline]
    unsafe fn post_direct(
        &mut self,
        qp: Handle,
        wr_id: u64,
        signaled: bool,
    ) -> Option<Result<(), PostFailure>> {
        let post = self.post.filter(|_| qp != Handle::NONE && qp == self.qp)?;
        let form = (&mut *self.form as *mut dyn std::any::Any).cast::<()>();
        // SAFETY: `form` is this form's and `post` the function its provider gave with it
        // (`new`'s promise); `qp` is live (the caller's) and the QP it was prepared on, so
        // that provider's.
        Some(unsafe { post(form, qp, wr_id, signaled) })
    }
}

/// A work request built once and posted many times ([`QueuePair::prepare_send`],
/// [`QueuePair::prepare_recv`]): a post may change only its id (and a send's signaled flag),
/// as perftest's latency loops change only those of their `ctx->wr`. The provider keeps it
/// in its own form, so a post skips the conversion (BENCHMARKS.md, "Hot paths", H2).
pub struct Prepared<W> {
    pub(crate) wr: W,
    pub(crate) raw: Option<PreparedRaw>,
}

/// A prepared send work request.
pub type PreparedSend = Prepared<SendWr>;

/// A prepared receive work request.
pub type PreparedRecv = Prepared<RecvWr>;

impl<W> Prepared<W> {
    /// The request as posted.
    pub fn wr(&self) -> &W {
        &self.wr
    }

    /// The provider's own form of it, if the provider made one ([`FastPath::prepare_send`]).
    pub fn raw_mut(&mut self) -> Option<&mut PreparedRaw> {
        self.raw.as_mut()
    }
}

impl PreparedSend {
    /// Sets the id the next post's completion carries.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr.wr_id = wr_id;
    }

    /// Sets whether the next post asks for a completion.
    #[inline]
    pub fn set_signaled(&mut self, signaled: bool) {
        self.wr.signaled = signaled;
    }
}

impl PreparedRecv {
    /// Sets the id the next post's completion carries.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.wr.wr_id = wr_id;
    }
}

impl<W: fmt::Debug> fmt::Debug for Prepared<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("wr", &self.wr)
            .field("provider_form", &self.raw.is_some())
            .finish()
    }
}

impl QueuePair {
    /// Builds `wr` into the provider's form once, to be posted many times with
    /// [`QueuePair::post_prepared_send`].
    pub fn prepare_send(&self, wr: SendWr) -> Result<PreparedSend> {
        let mut raw = match &self.fast {
            Some(f) => f.prepare_send(&wr)?,
            None => None,
        };
        if let Some(r) = &mut raw {
            r.qp = self.h;
        }
        Ok(PreparedSend { wr, raw })
    }

    /// Posts a prepared send, with its current id and signaled flag (`ibv_post_send`).
    #[inline]
    pub fn post_prepared_send(&self, p: &mut PreparedSend) -> Result<()> {
        let Some(fast) = &self.fast else {
            return self.dev.post_send(self.qpn, std::slice::from_ref(&p.wr));
        };
        let (wr_id, signaled) = (p.wr.wr_id, p.wr.signaled);
        if let Some(raw) = &mut p.raw
            // SAFETY: the handle is this QP's, which only `self`'s drop destroys.
            && let Some(r) = unsafe { raw.post_direct(self.h, wr_id, signaled) }
        {
            return r.map_err(|f| f.into_error(&**fast, self.qpn, "post_send"));
        }
        // SAFETY: as in `post_send_batch`.
        unsafe { fast.post_prepared_send(self.qpn, self.h, p) }
    }

    /// Builds `wr` into the provider's form once, to be posted many times with
    /// [`QueuePair::post_prepared_recv`].
    pub fn prepare_recv(&self, wr: RecvWr) -> Result<PreparedRecv> {
        let mut raw = match &self.fast {
            Some(f) => f.prepare_recv(&wr)?,
            None => None,
        };
        if let Some(r) = &mut raw {
            r.qp = self.h;
        }
        Ok(PreparedRecv { wr, raw })
    }

    /// Posts a prepared receive, with its current id (`ibv_post_recv`).
    #[inline]
    pub fn post_prepared_recv(&self, p: &mut PreparedRecv) -> Result<()> {
        let Some(fast) = &self.fast else {
            return self.dev.post_recv(self.qpn, std::slice::from_ref(&p.wr));
        };
        let wr_id = p.wr.wr_id;
        if let Some(raw) = &mut p.raw
            // SAFETY: as in `post_prepared_send`.
            && let Some(r) = unsafe { raw.post_direct(self.h, wr_id, false) }
        {
            return r.map_err(|f| f.into_error(&**fast, self.qpn, "post_recv"));
        }
        // SAFETY: as in `post_send_batch`.
        unsafe { fast.post_prepared_recv(self.qpn, self.h, p) }
    }
}
