//! Who am I in the run: rank, world size and the coordinator's address, from `--rank
//! --world-size --coordinator`, or from the launcher's environment — Slurm (`SLURM_PROCID`,
//! `SLURM_NTASKS`), Open MPI (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`) or torchrun
//! (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`). Flags win over the environment; the
//! coordinator comes from `--coordinator` or `MASTER_ADDR`/`MASTER_PORT` (Slurm and Open MPI
//! do not name one).

use std::net::{SocketAddr, ToSocketAddrs};

/// Where the rank and size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `--rank` and `--world-size`.
    Flags,
    /// Slurm's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// torchrun (or anything that sets `RANK`/`WORLD_SIZE`).
    Torchrun,
}

/// This process's place in the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    /// This rank (0 is the coordinator).
    pub rank: u32,
    /// How many ranks.
    pub size: u32,
    /// Rank 0's bootstrap address.
    pub coordinator: SocketAddr,
    /// Where `rank` and `size` came from.
    pub launcher: Launcher,
}

/// What the flags say.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--rank`.
    pub rank: Option<u32>,
    /// `--world-size`.
    pub world_size: Option<u32>,
    /// `--coordinator HOST:PORT`.
    pub coordinator: Option<String>,
}

/// Why the world could not be known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorldError {
    /// Neither flags nor a launcher's environment give a rank.
    #[error(
        "no rank: give --rank and --world-size, or run under Slurm (SLURM_PROCID), Open MPI \
         (OMPI_COMM_WORLD_RANK) or torchrun (RANK, WORLD_SIZE)"
    )]
    NoRank,
    /// One of the pair is missing.
    #[error("{have} is set but {missing} is not")]
    Half {
        /// The one given.
        have: &'static str,
        /// The one missing.
        missing: &'static str,
    },
    /// A value is not a number, or out of range.
    #[error("{name} = {value:?}: {why}")]
    Bad {
        /// The flag or variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
    /// No coordinator address.
    #[error("no coordinator: give --coordinator HOST:PORT, or set MASTER_ADDR and MASTER_PORT")]
    NoCoordinator,
    /// The coordinator's name did not resolve.
    #[error("coordinator {0:?} does not resolve to an address")]
    Unresolved(String),
}

fn num(name: &'static str, v: &str) -> Result<u32, WorldError> {
    v.trim().parse().map_err(|_| WorldError::Bad {
        name,
        value: v.to_string(),
        why: "not a number",
    })
}

/// Resolves the world from `flags` and the environment `env` (a lookup, so tests can give
/// one).
pub fn resolve(flags: &Flags, env: &dyn Fn(&str) -> Option<String>) -> Result<World, WorldError> {
    let pairs: [(Launcher, &'static str, &'static str); 4] = [
        (Launcher::Flags, "--rank", "--world-size"),
        (Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS"),
        (Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        (Launcher::Torchrun, "RANK", "WORLD_SIZE"),
    ];
    let mut found = None;
    for (launcher, r, s) in pairs {
        let (rv, sv) = if launcher == Launcher::Flags {
            (flags.rank.map(|x| x.to_string()), flags.world_size.map(|x| x.to_string()))
        } else {
            (env(r), env(s))
        };
        match (rv, sv) {
            (Some(rv), Some(sv)) => {
                found = Some((launcher, num(r, &rv)?, num(s, &sv)?, r, s, sv));
                break;
            }
            (Some(_), None) => return Err(WorldError::Half { have: r, missing: s }),
            (None, Some(_)) => return Err(WorldError::Half { have: s, missing: r }),
            (None, None) => {}
        }
    }
    let (launcher, rank, size, _, sname, sv) = found.ok_or(WorldError::NoRank)?;
    if size == 0 {
        return Err(WorldError::Bad {
            name: sname,
            value: sv,
            why: "a world has at least one rank",
        });
    }
    if rank >= size {
        return Err(WorldError::Bad {
            name: if launcher == Launcher::Flags {
                "--rank"
            } else {
                pairs.iter().find(|p| p.0 == launcher).map_or("rank", |p| p.1)
            },
            value: rank.to_string(),
            why: "the rank must be below the world size",
        });
    }
    let coordinator = match (&flags.coordinator, env("MASTER_ADDR"), env("MASTER_PORT")) {
        (Some(c), _, _) => c.clone(),
        (None, Some(a), Some(p)) => {
            num("MASTER_PORT", &p)?;
            if a.contains(':') && !a.starts_with('[') {
                format!("[{a}]:{p}")
            } else {
                format!("{a}:{p}")
            }
        }
        (None, Some(_), None) => {
            return Err(WorldError::Half { have: "MASTER_ADDR", missing: "MASTER_PORT" });
        }
        _ => return Err(WorldError::NoCoordinator),
    };
    let addr = coordinator
        .to_socket_addrs()
        .map_err(|_| WorldError::Unresolved(coordinator.clone()))?
        .next()
        .ok_or_else(|| WorldError::Unresolved(coordinator.clone()))?;
    Ok(World { rank, size, coordinator: addr, launcher })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| v.iter().find(|(n, _)| n == k).map(|(_, x)| x.clone())
    }

    #[test]
    fn each_launcher() {
        let c = Flags { coordinator: Some("127.0.0.1:29500".into()), ..Default::default() };
        let w = resolve(&c, &env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4")])).unwrap();
        assert_eq!((w.rank, w.size, w.launcher), (3, 4, Launcher::Slurm));
        let w = resolve(&c, &env(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "2")]))
            .unwrap();
        assert_eq!((w.rank, w.size, w.launcher), (1, 2, Launcher::OpenMpi));
        let t = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "8"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29501"),
        ]);
        let w = resolve(&Flags::default(), &t).unwrap();
        assert_eq!(
            (w.rank, w.size, w.launcher, w.coordinator.port()),
            (0, 8, Launcher::Torchrun, 29501)
        );
        // Flags win over the environment.
        let f =
            Flags { rank: Some(2), world_size: Some(3), coordinator: Some("[::1]:7000".into()) };
        let w = resolve(&f, &t).unwrap();
        assert_eq!(
            (w.rank, w.size, w.launcher, w.coordinator),
            (2, 3, Launcher::Flags, "[::1]:7000".parse().unwrap())
        );
    }

    #[test]
    fn bad_worlds_say_what_is_wrong() {
        let c = Flags { coordinator: Some("127.0.0.1:1".into()), ..Default::default() };
        let e = |f: &Flags, vars: &[(&str, &str)]| resolve(f, &env(vars)).unwrap_err().to_string();
        assert!(e(&c, &[]).starts_with("no rank"));
        assert_eq!(e(&c, &[("RANK", "1")]), "RANK is set but WORLD_SIZE is not");
        assert_eq!(
            e(&c, &[("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")]),
            "SLURM_PROCID = \"x\": not a number"
        );
        assert!(e(&c, &[("RANK", "4"), ("WORLD_SIZE", "4")]).contains("below the world size"));
        assert!(e(&c, &[("RANK", "0"), ("WORLD_SIZE", "0")]).contains("at least one rank"));
        assert!(
            e(&Flags::default(), &[("RANK", "0"), ("WORLD_SIZE", "2")])
                .starts_with("no coordinator")
        );
        assert_eq!(
            e(&Flags::default(), &[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "x")]),
            "MASTER_ADDR is set but MASTER_PORT is not"
        );
        let f = Flags {
            rank: Some(0),
            world_size: Some(2),
            coordinator: Some("no-such-host.invalid:1".into()),
        };
        assert!(e(&f, &[]).contains("does not resolve"));
    }
}
