//! podnet's qualification: plans ([`plan`]), the run ([`run`]) and the reports ([`report`],
//! [`html`]).

pub mod check;
pub mod html;
pub mod plan;
pub mod report;
pub mod run;
