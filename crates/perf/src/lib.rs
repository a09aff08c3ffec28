//! `podnet perf`'s library: benchmarks that read and feel like perftest and talk to perftest
//! peers. So far: [`exchange`], perftest 4.5-0.17's TCP side channel, and [`stats`], the
//! figures it reports.

pub mod exchange;
pub mod stats;
