//! Where a rank of a multi-host run stands, from `WorldArgs` and the launcher's environment
//! (`burnin`, and `qualify` with a pod plan).

use std::time::Duration;

use anyhow::ensure;
use rendezvous::bootstrap::{SECRET_ENV, Secret, Timeouts};
use rendezvous::world::{self, Flags, World};

use crate::cli::WorldArgs;

/// `v` seconds, or an error naming the flag.
pub(crate) fn secs(name: &str, v: f64) -> anyhow::Result<Duration> {
    let shown = if v.is_finite() && v.abs() >= 1e7 { format!("{v:e}") } else { v.to_string() };
    ensure!(
        v.is_finite() && v > 0.0 && v < 1e7,
        "{name} must be a positive number of seconds below 10^7, not {shown}"
    );
    Ok(Duration::from_secs_f64(v))
}

/// The rendezvous timeouts the flags ask for.
pub(crate) fn timeouts(w: &WorldArgs) -> anyhow::Result<Timeouts> {
    let t = Timeouts {
        join: secs("--join-timeout", w.join_timeout)?,
        handshake: Timeouts::default().handshake,
        heartbeat: secs("--heartbeat", w.heartbeat)?,
        dead_after: secs("--dead-after", w.dead_after)?,
    };
    ensure!(t.dead_after > t.heartbeat, "--dead-after must be longer than --heartbeat");
    Ok(t)
}

/// This rank's place, from the flags or the launcher's environment.
pub(crate) fn resolve(w: &WorldArgs) -> anyhow::Result<World> {
    let flags = Flags {
        rank: w.rank,
        world_size: w.world_size,
        coordinator: w.coordinator.clone(),
        hostfile: w.hostfile.clone(),
    };
    Ok(world::resolve(&flags, &|k| std::env::var(k).ok())?)
}

/// The run's shared secret, from --secret-file or PODNET_SECRET.
pub(crate) fn secret(w: &WorldArgs) -> anyhow::Result<Option<Secret>> {
    secret_from(w.secret_file.as_deref())
}

/// The shared secret from `file` (a `--secret-file`) or PODNET_SECRET, or none.
pub(crate) fn secret_from(file: Option<&std::path::Path>) -> anyhow::Result<Option<Secret>> {
    let env_secret = std::env::var_os(SECRET_ENV);
    Ok(Secret::from_sources(file, env_secret.as_ref().map(|v| v.as_encoded_bytes()))?)
}
