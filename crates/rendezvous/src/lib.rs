//! How the ranks of a multi-host podnet run find each other. [`world`]: a process's rank,
//! the world size and the coordinator's address, from flags or a launcher's environment.
//! [`bootstrap`]: the ranks meet at rank 0 over TCP, exchange what they need, and notice a rank
//! that never joins or stops answering. Burn-in and qualify across hosts both use it.

#![forbid(unsafe_code)]

pub mod bootstrap;
pub mod world;
