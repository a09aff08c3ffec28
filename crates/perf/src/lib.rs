//! `podnet perf`'s library: benchmarks that read and feel like perftest and talk to perftest
//! peers. So far: [`exchange`], perftest 4.5-0.17's TCP side channel.

pub mod exchange;
