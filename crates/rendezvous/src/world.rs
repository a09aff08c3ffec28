//! Who am I in the run: rank, world size and the coordinator's address, from `--rank
//! --world-size --coordinator`, from a hostfile (`--hostfile`: one host a line, this host's
//! line is its rank, the first host is the coordinator), or from the launcher's environment —
//! Slurm (`SLURM_PROCID`, `SLURM_NTASKS`), Open MPI (`OMPI_COMM_WORLD_RANK`,
//! `OMPI_COMM_WORLD_SIZE`), torchrun (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) or a
//! Kubernetes Indexed Job (`JOB_COMPLETION_INDEX`; the size from `--world-size` or
//! `PODNET_WORLD_SIZE`: Kubernetes does not tell a pod its Job's completions). Flags win over
//! the environment; the coordinator comes from `--coordinator`, `PODNET_COORDINATOR`,
//! `MASTER_ADDR`/`MASTER_PORT`, or the hostfile's first host at port [`DEFAULT_PORT`].

use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};

/// The coordinator's port when only a host is known (a hostfile's first line).
pub const DEFAULT_PORT: u16 = 29400;

/// The longest hostfile read.
pub const HOSTFILE_LIMIT: u64 = 1 << 20;

/// Where the rank and size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `--rank` and `--world-size`.
    Flags,
    /// `--hostfile`: this host's line.
    Hostfile,
    /// Slurm's `srun`.
    Slurm,
    /// Open MPI's `mpirun`.
    OpenMpi,
    /// torchrun (or anything that sets `RANK`/`WORLD_SIZE`).
    Torchrun,
    /// A Kubernetes Indexed Job (`JOB_COMPLETION_INDEX`).
    Kubernetes,
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
    /// `--hostfile FILE`.
    pub hostfile: Option<PathBuf>,
}

/// Why the world could not be known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorldError {
    /// Neither flags nor a launcher's environment give a rank.
    #[error(
        "no rank: give --rank and --world-size or --hostfile, or run under Slurm (SLURM_PROCID), \
         Open MPI (OMPI_COMM_WORLD_RANK), torchrun (RANK, WORLD_SIZE) or a Kubernetes Indexed \
         Job (JOB_COMPLETION_INDEX)"
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
    #[error(
        "no coordinator: give --coordinator HOST:PORT or --hostfile, or set PODNET_COORDINATOR, \
         or MASTER_ADDR and MASTER_PORT"
    )]
    NoCoordinator,
    /// The coordinator's name did not resolve.
    #[error("coordinator {0:?} does not resolve to an address")]
    Unresolved(String),
    /// The hostfile could not be used.
    #[error("hostfile {path}: {why}")]
    Hostfile {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

fn num(name: &'static str, v: &str) -> Result<u32, WorldError> {
    v.trim().parse().map_err(|_| WorldError::Bad {
        name,
        value: v.to_string(),
        why: "not a number",
    })
}

/// The hosts of a hostfile, in order: the first word of each line (a name or an address;
/// what follows it, such as MPI's `slots=8`, is ignored), `#` comments and blank lines
/// skipped. A host listed twice is an error: a rank is a host.
pub fn read_hostfile(path: &Path) -> Result<Vec<String>, WorldError> {
    use std::io::Read;
    let err = |why: String| WorldError::Hostfile { path: path.display().to_string(), why };
    let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut text = String::new();
    f.take(HOSTFILE_LIMIT + 1).read_to_string(&mut text).map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > HOSTFILE_LIMIT {
        return Err(err(format!("longer than {HOSTFILE_LIMIT} bytes")));
    }
    let mut hosts: Vec<String> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some(h) = line.split('#').next().and_then(|l| l.split_whitespace().next()) else {
            continue;
        };
        if let Some(first) = hosts.iter().position(|x| x == h) {
            return Err(err(format!(
                "line {}: {h} is listed twice (first as host {first}); one rank per host",
                i + 1
            )));
        }
        hosts.push(h.to_string());
    }
    if hosts.is_empty() {
        return Err(err("lists no host".into()));
    }
    Ok(hosts)
}

/// Whether `host` (a name or an address) is this machine: its host name (or that name's
/// first label), or a name or address that resolves to an address of this network namespace
/// (one a socket can bind to).
pub fn is_this_host(host: &str, hostname: &str) -> bool {
    let short = |h: &str| h.split('.').next().unwrap_or(h).to_ascii_lowercase();
    if !hostname.is_empty()
        && (host.eq_ignore_ascii_case(hostname) || short(host) == short(hostname))
    {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            (bare, 0).to_socket_addrs().map(|a| a.map(|s| s.ip()).collect()).unwrap_or_default()
        }
    };
    addrs.iter().any(|ip| !ip.is_unspecified() && UdpSocket::bind((*ip, 0)).is_ok())
}

/// This machine's host name (`/proc/sys/kernel/hostname`), or empty.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| String::new(), |h| h.trim().to_string())
}

/// `host:port` as a socket address string (IPv6 in brackets).
fn host_port(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Resolves the world from `flags` and the environment `env` (a lookup, so tests can give
/// one).
pub fn resolve(flags: &Flags, env: &dyn Fn(&str) -> Option<String>) -> Result<World, WorldError> {
    let hosts = flags.hostfile.as_deref().map(read_hostfile).transpose()?;
    let (launcher, rank, size, rname, sname, sv) = place(flags, env, hosts.as_deref())?;
    if size == 0 {
        return Err(WorldError::Bad {
            name: sname,
            value: sv,
            why: "a world has at least one rank",
        });
    }
    if rank >= size {
        return Err(WorldError::Bad {
            name: rname,
            value: rank.to_string(),
            why: "the rank must be below the world size",
        });
    }
    let coordinator = match (
        &flags.coordinator,
        env("PODNET_COORDINATOR"),
        env("MASTER_ADDR"),
        env("MASTER_PORT"),
    ) {
        (Some(c), _, _, _) => c.clone(),
        (None, Some(c), _, _) => c,
        (None, None, Some(a), Some(p)) => {
            num("MASTER_PORT", &p)?;
            host_port(&a, &p)
        }
        (None, None, Some(_), None) => {
            return Err(WorldError::Half { have: "MASTER_ADDR", missing: "MASTER_PORT" });
        }
        (None, None, None, _) => match hosts.as_deref().and_then(|h| h.first()) {
            Some(first) => host_port(first, &DEFAULT_PORT.to_string()),
            None => return Err(WorldError::NoCoordinator),
        },
    };
    let addr = coordinator
        .to_socket_addrs()
        .map_err(|_| WorldError::Unresolved(coordinator.clone()))?
        .next()
        .ok_or_else(|| WorldError::Unresolved(coordinator.clone()))?;
    Ok(World { rank, size, coordinator: addr, launcher })
}

/// The rank and size, where they came from, and the names to blame for a bad value.
type Place = (Launcher, u32, u32, &'static str, &'static str, String);

fn place(
    flags: &Flags,
    env: &dyn Fn(&str) -> Option<String>,
    hosts: Option<&[String]>,
) -> Result<Place, WorldError> {
    if let (Some(r), Some(n)) = (flags.rank, flags.world_size) {
        return Ok((Launcher::Flags, r, n, "--rank", "--world-size", n.to_string()));
    }
    if let Some(hosts) = hosts {
        let n = hosts.len() as u32;
        if let Some(ws) = flags.world_size.filter(|ws| *ws != n) {
            return Err(WorldError::Bad {
                name: "--world-size",
                value: ws.to_string(),
                why: "the hostfile lists another number of hosts",
            });
        }
        let rank = match flags.rank {
            Some(r) => r,
            None => {
                let me = hostname();
                let mine: Vec<usize> =
                    (0..hosts.len()).filter(|i| is_this_host(&hosts[*i], &me)).collect();
                let path =
                    flags.hostfile.as_ref().map_or_else(String::new, |p| p.display().to_string());
                match mine.as_slice() {
                    [r] => *r as u32,
                    [] => {
                        return Err(WorldError::Hostfile {
                            path,
                            why: format!(
                                "this host ({me}) is none of its {n} hosts, by name or by address: \
                                 give --rank"
                            ),
                        });
                    }
                    many => {
                        return Err(WorldError::Hostfile {
                            path,
                            why: format!(
                                "this host ({me}) is hosts {} ({}): give --rank",
                                many.iter().map(usize::to_string).collect::<Vec<_>>().join(", "),
                                many.iter()
                                    .map(|i| hosts[*i].as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        });
                    }
                }
            }
        };
        return Ok((Launcher::Hostfile, rank, n, "--rank", "--hostfile", n.to_string()));
    }
    if flags.rank.is_some() {
        return Err(WorldError::Half { have: "--rank", missing: "--world-size" });
    }
    let pairs: [(Launcher, &'static str, &'static str); 3] = [
        (Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS"),
        (Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        (Launcher::Torchrun, "RANK", "WORLD_SIZE"),
    ];
    for (launcher, r, s) in pairs {
        match (env(r), env(s)) {
            (Some(rv), Some(sv)) => return Ok((launcher, num(r, &rv)?, num(s, &sv)?, r, s, sv)),
            (Some(_), None) => return Err(WorldError::Half { have: r, missing: s }),
            (None, Some(_)) => return Err(WorldError::Half { have: s, missing: r }),
            (None, None) => {}
        }
    }
    if let Some(rv) = env("JOB_COMPLETION_INDEX") {
        let rank = num("JOB_COMPLETION_INDEX", &rv)?;
        let (size, sname, sv) = match (flags.world_size, env("PODNET_WORLD_SIZE")) {
            (Some(n), _) => (n, "--world-size", n.to_string()),
            (None, Some(v)) => (num("PODNET_WORLD_SIZE", &v)?, "PODNET_WORLD_SIZE", v),
            (None, None) => {
                return Err(WorldError::Half {
                    have: "JOB_COMPLETION_INDEX",
                    missing: "--world-size (or PODNET_WORLD_SIZE: Kubernetes does not tell a \
                              pod its Job's completions)",
                });
            }
        };
        return Ok((Launcher::Kubernetes, rank, size, "JOB_COMPLETION_INDEX", sname, sv));
    }
    if flags.world_size.is_some() {
        return Err(WorldError::Half { have: "--world-size", missing: "--rank" });
    }
    Err(WorldError::NoRank)
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
        let f = Flags {
            rank: Some(2),
            world_size: Some(3),
            coordinator: Some("[::1]:7000".into()),
            ..Default::default()
        };
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
            ..Default::default()
        };
        assert!(e(&f, &[]).contains("does not resolve"));
    }

    #[test]
    fn a_kubernetes_indexed_job() {
        let k = env(&[
            ("JOB_COMPLETION_INDEX", "3"),
            ("PODNET_WORLD_SIZE", "6"),
            ("PODNET_COORDINATOR", "127.0.0.1:29400"),
        ]);
        let w = resolve(&Flags::default(), &k).unwrap();
        assert_eq!((w.rank, w.size, w.launcher), (3, 6, Launcher::Kubernetes));
        assert_eq!(w.coordinator, "127.0.0.1:29400".parse().unwrap());
        // --world-size instead of the variable; a torchrun pair wins over the index.
        let f = Flags { world_size: Some(8), ..Default::default() };
        let w = resolve(
            &f,
            &env(&[("JOB_COMPLETION_INDEX", "7"), ("MASTER_ADDR", "::1"), ("MASTER_PORT", "1")]),
        )
        .unwrap();
        assert_eq!((w.rank, w.size, w.launcher), (7, 8, Launcher::Kubernetes));
        let e = resolve(&Flags::default(), &env(&[("JOB_COMPLETION_INDEX", "0")])).unwrap_err();
        assert!(e.to_string().starts_with("JOB_COMPLETION_INDEX is set but --world-size"), "{e}");
        let e = resolve(
            &f,
            &env(&[("JOB_COMPLETION_INDEX", "8"), ("PODNET_COORDINATOR", "127.0.0.1:1")]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("below the world size"), "{e}");
        // A lone --world-size is still half a pair.
        let e = resolve(&f, &env(&[])).unwrap_err();
        assert_eq!(e.to_string(), "--world-size is set but --rank is not");
    }

    #[test]
    fn a_hostfile_gives_rank_size_and_coordinator() {
        let dir = std::env::temp_dir().join(format!("podnet-hostfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hosts");
        // Three documentation addresses this machine does not have (a test machine may well
        // have one of them: the first free ones are taken), and 127.0.0.1, which it has.
        let away: Vec<String> = (1..=254)
            .flat_map(|i| [format!("203.0.113.{i}"), format!("198.51.100.{i}")])
            .filter(|a| !is_this_host(a, ""))
            .take(3)
            .collect();
        let (a, b, c) = (&away[0], &away[1], &away[2]);
        std::fs::write(&file, format!("# the pod\n{a} slots=8\n\n  127.0.0.1   # this one\n{c}\n"))
            .unwrap();
        let f = Flags { hostfile: Some(file.clone()), ..Default::default() };
        let w = resolve(&f, &env(&[])).unwrap();
        assert_eq!((w.rank, w.size, w.launcher), (1, 3, Launcher::Hostfile));
        assert_eq!(w.coordinator, format!("{a}:{DEFAULT_PORT}").parse().unwrap());
        // --rank picks the line (the same host may be listed by an address it does not have
        // yet, in a namespace not yet up); --coordinator wins.
        let f2 = Flags { rank: Some(2), coordinator: Some("127.0.0.1:7".into()), ..f.clone() };
        let w = resolve(&f2, &env(&[])).unwrap();
        assert_eq!((w.rank, w.size, w.coordinator.port()), (2, 3, 7));
        let bad = |text: &str| {
            std::fs::write(&file, text).unwrap();
            resolve(&f, &env(&[])).unwrap_err().to_string()
        };
        assert!(bad(&format!("{a}\n{b}\n")).contains("this host ("), "none of it");
        assert!(bad(&format!("127.0.0.1\n{b}\n127.0.0.1 slots=2\n")).contains("listed twice"));
        assert!(
            bad("127.0.0.1\n127.0.0.2\n")
                .contains("is hosts 0, 1 (127.0.0.1, 127.0.0.2): give --rank")
        );
        assert!(bad("# nobody\n").contains("lists no host"));
        std::fs::write(&file, "127.0.0.1\n").unwrap();
        let e = resolve(&Flags { world_size: Some(2), ..f.clone() }, &env(&[])).unwrap_err();
        assert!(e.to_string().contains("another number of hosts"), "{e}");
        std::fs::write(&file, vec![b'#'; (HOSTFILE_LIMIT + 1) as usize]).unwrap();
        assert!(resolve(&f, &env(&[])).unwrap_err().to_string().contains("longer than"));
        std::fs::remove_dir_all(&dir).unwrap();
        let e = resolve(&f, &env(&[])).unwrap_err().to_string();
        assert!(e.starts_with("hostfile ") && e.contains("No such file"), "{e}");
    }

    #[test]
    fn this_host_by_name_or_address() {
        assert!(is_this_host("127.0.0.1", ""));
        assert!(is_this_host("[::1]", "") || std::net::UdpSocket::bind("[::1]:0").is_err());
        let away = (1..=254).map(|i| format!("203.0.113.{i}")).find(|a| !is_this_host(a, ""));
        assert!(!is_this_host(&away.unwrap(), "node7"));
        assert!(is_this_host("node7.pod.example", "node7"));
        assert!(is_this_host("NODE7", "node7.pod.example"));
        assert!(!is_this_host("node70", "node7"));
        assert!(!is_this_host("0.0.0.0", ""), "the unspecified address is every host's");
    }
}
