//! The pod's topology, without I/O — what qualify measures across and what the pod agent
//! watches: its hosts, their rails (a device each, a plane per rail), the ToR each rail's port
//! is cabled to, the spines, the host–ToR and ToR–spine links and a pair's ECMP paths over
//! them ([`fabric`]); the parts a fault is named on ([`component`]); the pairs of devices measured and the rounds of disjoint pairs
//! that measure them at once ([`pairs`]); the attribution of failed pairs to the component
//! at fault ([`locate`]), which qualify's report and the agent's findings both name; and, to
//! judge both, pods drawn from a seed ([`shape`]), the faults a pod meets ([`fault`]) and the
//! scorer of a fault campaign ([`score`]); and, where the fabric says which spine a flow
//! crosses, the routes of a pod's pairs ([`route`]).

#![forbid(unsafe_code)]

pub mod component;
pub mod fabric;
pub mod fault;
pub mod locate;
pub mod pairs;
pub mod route;
pub mod score;
pub mod shape;
mod tomo;

pub use component::Component;
pub use fabric::{Bisection, Dev, Host, Incast, Link, Pod, PodProgress, Rail};
pub use locate::{
    DEVICE_SHARE, PairOutcome, Suspect, attribute, attribute_mtu, attribute_with_spines, lies_on,
};
pub use pairs::{PairSet, apart, beside, bisection, incasts, rounds};
pub use shape::{Shape, Uplink};

#[cfg(test)]
mod tests;
