//! `podnet perf`'s library: benchmarks that read and feel like perftest and talk to perftest
//! peers. So far: [`exchange`], perftest 4.5-0.17's TCP side channel; [`stats`], the figures
//! it reports; [`engine`], measurement loops on the verbs API.

pub mod engine;
pub mod exchange;
pub mod pingpong;
pub mod session;
pub mod stats;
