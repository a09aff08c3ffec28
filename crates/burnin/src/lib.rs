//! podnet's burn-in across hosts. So far: [`world`], how a process learns its rank, the world
//! size and the coordinator (flags, Slurm, Open MPI, torchrun), and [`bootstrap`], how the
//! ranks meet at rank 0 over TCP, exchange what they need, and notice a rank that never joins
//! or stops answering.

pub mod bootstrap;
pub mod pattern;
pub mod run;
pub mod world;
