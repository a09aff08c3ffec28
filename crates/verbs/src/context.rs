//! An open device (`ibv_context`) and how it is opened.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::pd::PdLife;
use crate::*;

/// An open device: the root of every other verbs object (`ibv_context`).
#[derive(Clone)]
pub struct Context {
    pub(crate) dev: Arc<dyn Provider>,
    /// The provider's hot paths, handed to every object created here.
    pub(crate) fast: Option<Arc<dyn FastPath>>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").field("device", &self.dev.device_name()).finish()
    }
}

impl Context {
    /// Wraps a provider's device: how a provider hands out a context.
    pub fn from_provider(dev: Arc<dyn Provider>) -> Context {
        let fast = dev.clone().fast_path();
        Context { dev, fast }
    }

    /// The device's name (`soft:127.0.0.1`).
    pub fn device_name(&self) -> String {
        self.dev.device_name()
    }

    /// Which provider drives the device: what a tool decides on.
    pub fn provider_kind(&self) -> crate::ProviderKind {
        self.dev.provider_kind()
    }

    /// The provider's name in output (`soft`, `rdma-core`).
    pub fn provider_name(&self) -> &'static str {
        self.dev.provider_kind().as_str()
    }

    /// The device's IP address (RoCE).
    pub fn ip(&self) -> std::net::IpAddr {
        self.dev.ip()
    }

    /// The port's attributes (`ibv_query_port`; RoCE devices here have one port, 1).
    pub fn query_port(&self) -> PortAttr {
        self.dev.port_attr()
    }

    /// The index of the GID the device's address ([`Context::ip`]) comes from: the one its
    /// packets are sent from.
    pub fn gid_index(&self) -> usize {
        self.dev.gid_index()
    }

    /// The device's limits (`ibv_query_device`): the most QPs, work requests per queue,
    /// CQ entries, region size, … it takes.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.dev.query_device()
    }

    /// The port's GID table.
    pub fn gid_table(&self) -> Vec<GidEntry> {
        self.dev.gid_table()
    }

    /// The GID at `index` (`ibv_query_gid`).
    pub fn query_gid(&self, index: usize) -> Result<GidEntry> {
        let mut t = self.gid_table();
        let len = t.len();
        match t.iter().position(|g| g.index == index) {
            Some(i) => Ok(t.swap_remove(i)),
            None => Err(Error::NoGid { device: self.device_name(), index, len }),
        }
    }

    /// A new protection domain.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        let id = self.dev.alloc_pd()?;
        let life = Arc::new(PdLife { dev: self.dev.clone(), id, freed: false });
        Ok(ProtectionDomain { dev: self.dev.clone(), fast: self.fast.clone(), id, life })
    }

    /// A completion channel: a place to block until a CQ armed with
    /// [`CompletionQueue::req_notify`] gets a completion.
    pub fn create_comp_channel(&self) -> Result<CompletionChannel> {
        Ok(CompletionChannel { dev: self.dev.clone(), id: self.dev.create_channel()? })
    }

    /// A completion queue of at least `cqe` entries, reporting to `channel` if given.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue> {
        if let Some(ch) = channel
            && !Arc::ptr_eq(&ch.dev, &self.dev)
        {
            return Err(Error::ForeignObject("completion channel"));
        }
        let id = self.dev.create_cq(cqe, channel.map(|c| c.id))?;
        let h = self.fast.as_ref().map_or(Handle::NONE, |f| f.cq_handle(id));
        Ok(CompletionQueue { h, fast: self.fast.clone(), dev: self.dev.clone(), id })
    }

    /// The next asynchronous event, waiting up to `timeout` (`None`: forever).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        self.dev.get_async_event(timeout)
    }

    /// The device's transport counters (named as rxe's `hw_counters` where they overlap).
    pub fn counters(&self) -> Counters {
        self.dev.counters()
    }
}
