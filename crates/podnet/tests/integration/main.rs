//! One integration test binary that runs the real `podnet` executable (ripgrep's layout).

mod agent;
mod agent_rxe;
mod analyze;
mod build;
mod burnin;
mod campaign;
mod decode;
mod devices;
mod distrust;
mod doctor;
mod doctor_rxe;
mod emupod;
mod extra;
mod gpu;
mod map;
mod perf;
mod perf_rxe;
mod pingpong;
mod pod_qualify;
mod pod_resilient;
mod pod_watch;
mod qualify;
#[cfg(feature = "rdma-core")]
mod rdma_core_rxe;
mod record;
mod rxe;
mod tshark;
mod util;
