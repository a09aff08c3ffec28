//! podnet's RDMA telemetry: what the agent collects, how it names it, how it judges a port.
//!
//! - [`sample`]: one scrape of `/sys` (or a recorded tree): RDMA port attributes and
//!   counters, the netdevs under them, ethtool and DCB PFC data; failures become
//!   [`sample::SourceError`]s, never an aborted scrape.
//! - [`sampler`]: the agent's sampling, with a deadline per scrape: a source that does not
//!   answer in time is served from its last good sample and named, one reader stuck at most.
//! - [`names`]: driver-independent series and the mapping from each driver's names.
//! - [`rates`]: rates over a window that survive counter resets and saturation.
//! - [`health`]: `ok | degraded | down` per port, with TOML thresholds.
//! - [`bench`]: benchmark results published to a folder (`podnet perf --publish`), exported
//!   as histograms and gauges.
//! - [`expose`]: the Prometheus exposition.

pub mod bench;
pub mod ethtool;
pub mod expose;
pub mod health;
pub mod names;
pub mod rates;
pub mod sample;
pub mod sampler;
pub mod serve;

/// The Prometheus client this crate encodes with, for callers that register more metrics.
pub use prometheus_client;
