//! podnet's burn-in across hosts: [`pattern`], the traffic patterns, [`run`], a rank's
//! part of the run, and [`resilient`], the patterns over the pod agent's channels through a
//! failure. How the ranks find each other and meet is the `rendezvous` crate's.

#![forbid(unsafe_code)]

pub mod pattern;
pub mod resilient;
pub mod run;
