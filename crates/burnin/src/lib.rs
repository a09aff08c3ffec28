//! podnet's burn-in across hosts: [`pattern`], the traffic patterns, and [`run`], a rank's
//! part of the run. How the ranks find each other and meet is the `rendezvous` crate's.

#![forbid(unsafe_code)]

pub mod pattern;
pub mod run;
