//! Command-line flags, parsed once.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// RDMA pod networking: verbs, benchmarks, qualification, burn-in, telemetry and capture
/// analysis for RoCEv2 and InfiniBand pods.
#[derive(Debug, Parser)]
#[command(name = "podnet", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// RoCEv2 packet-capture analysis.
    #[command(subcommand)]
    Capture(CaptureCommand),

    /// RC ping-pong between two hosts: a port of rdma-core's ibv_rc_pingpong.
    ///
    /// Without SERVER it waits for a client on TCP port --port of the device's address; with
    /// SERVER it connects there. The two sides swap `LID:QPN:PSN:GID` over TCP exactly as
    /// ibv_rc_pingpong does, so either side can be ibv_rc_pingpong on a real RDMA device or
    /// Linux rxe. Then each side sends --size bytes and waits for the other's, --iters times,
    /// and prints the same summary lines (`N bytes in S seconds = M Mbit/sec`, `N iters in S
    /// seconds = U usec/iter`).
    ///
    /// The default device is `soft`: the soft RoCEv2 provider on 127.0.0.1, or on the next
    /// free loopback address (127.0.0.2, …) when another process holds it — so `podnet
    /// pingpong` and `podnet pingpong localhost` on one machine just work. Elsewhere name the
    /// device by its address: `-d soft:10.0.0.1` (IPv6: `-d soft:fd00::1`).
    ///
    /// Exit status: 0 done, 1 a completion failed or --verify found a damaged payload, 2 bad
    /// input, the peer could not be reached, or no progress for --timeout seconds.
    #[command(after_help = "Examples:\n  podnet pingpong &  podnet pingpong localhost\n  \
        podnet pingpong -d soft:10.0.0.1 -g 0 -s 65536 -n 100 --verify\n  \
        podnet pingpong -d soft:10.0.0.2 -g 0 10.0.0.1   # against ibv_rc_pingpong -g 1 there")]
    Pingpong(PingpongArgs),

    /// perftest-compatible RDMA benchmarks: bandwidth and latency of WRITE, READ, SEND and
    /// atomics.
    ///
    /// Without HOST it waits for a client on TCP port --port of the device's address; with
    /// HOST it connects there. The two sides speak perftest 4.5's TCP exchange, so either
    /// side can be perftest (`ib_write_bw`, `ib_send_lat`, …) on a real RDMA device or Linux
    /// rxe, and they print perftest's banner and tables. Options are perftest's, with its
    /// defaults; both sides must be given the same test and options, as with perftest.
    ///
    /// Beyond perftest: percentiles in -D mode too (HDR histogram), several QPs in one
    /// process, --json (one object per result row), valid --out_json, and --data-validation
    /// (every payload carries a seeded pattern checked where it lands; both sides podnet).
    ///
    /// The default device is `soft`: the soft RoCEv2 provider on 127.0.0.1, or the next free
    /// loopback address when another process holds it, so `podnet perf write-bw` and `podnet
    /// perf write-bw localhost` on one machine just work. Elsewhere: `-d soft:<IP>`.
    ///
    /// Exit status: 0 done, 1 data validation found a damaged or missing byte, 2 bad input,
    /// the peer could not be reached, disagreed, or stopped answering.
    #[command(
        after_help = "Tests: write-bw write-lat read-bw read-lat send-bw send-lat atomic-bw \
        atomic-lat (ib_write_bw, … are accepted too).\n\nExamples:\n  \
        podnet perf write-bw &  podnet perf write-bw localhost\n  \
        podnet perf send-lat -d soft:10.0.0.2 -x 0 10.0.0.1   # against ib_send_lat -x 1 there\n  \
        podnet perf read-bw -a -q 4 --data-validation localhost\n  \
        podnet perf write-lat -D 10 --json localhost | jq .t_typical"
    )]
    Perf(PerfArgs),

    /// RDMA devices and their ports: what `ibv_devinfo` and `ibdev2netdev` tell, in one table.
    ///
    /// Lists the kernel's RDMA devices (from sysfs: mlx5, rxe, …) and the soft devices this
    /// host could open (one per local address, `soft:<IP>`): provider, port, state, physical
    /// state, active MTU, speed and width, link layer, netdev, firmware, node GUID. On RoCE
    /// the active MTU is derived from the netdev's as the kernel does (1500 gives 1024).
    /// `--gids` adds each port's GID table with the GID type and netdev of every entry.
    #[command(after_help = "Examples:\n  podnet devices\n  podnet devices --gids\n  \
        podnet devices --json | jq '.[] | select(.provider != \"soft\") | .name'")]
    Devices(DevicesArgs),

    /// RDMA health and performance telemetry, served to Prometheus.
    ///
    /// Reads every RDMA port's attributes and counters (sysfs `counters/` and `hw_counters/`),
    /// the statistics of the netdevs under them, ethtool statistics and DCB PFC per priority,
    /// and exports them at http://LISTEN/metrics: normalized series that mean the same on
    /// every driver (`podnet_rdma_out_of_sequence_total{device,port,netdev}`, …), every raw
    /// counter (`podnet_rdma_hw_counters_total{device,port,counter}`), and each port's health —
    /// `down` from its state, `degraded` when a counter's rate over the window passes its
    /// threshold (`--thresholds`). A source that cannot be read is reported by
    /// `podnet_agent_source_error{source,device,port,path}` and the rest is served. A source
    /// (an RDMA device, a netdev) whose read does not return within --sample-deadline (a read
    /// stalled in firmware) is served from its last good sample, its age in
    /// `podnet_agent_source_age_seconds`; it is not read again until that read returns.
    /// Metrics are defined in docs/metrics.md.
    ///
    /// The HTTP server answers GET /metrics, /health and / only, and bounds what a client can
    /// make it hold: 8 KiB of request line and headers, 32 headers, no body, 5 s to send
    /// them, 150 s per connection, 64 connections at once (more are answered 503 and closed).
    ///
    /// `--once` prints each port's health instead of serving (two samples `--interval` apart
    /// give the rates); exit status 0 when every port is ok, 1 when one is degraded or down,
    /// 2 on bad input.
    #[command(
        after_help = "Examples:\n  podnet agent                       # http://127.0.0.1:9464/metrics\n  \
        podnet agent --listen 10.0.0.5:9464 --thresholds /etc/podnet/health.toml\n  \
        podnet agent --once\n  podnet agent --once --json --sysfs-root recorded-host/sys"
    )]
    Agent(AgentArgs),

    /// Qualify hosts, NICs, links and device pairs against a plan, and report.
    ///
    /// Runs a plan's checks: host (CPU governor, NUMA locality of each NIC, netdev MTUs),
    /// device (present, port ACTIVE, speed/width/MTU, a RoCE v2 GID), performance (bandwidth
    /// per size, median and p99.9 latency, on every pair, with the perf engine; thresholds
    /// absolute or relative to a calibration measured first in the same run) and an
    /// integrity run (SEND with every byte checked). Without --plan it runs the built-in plan:
    /// four soft devices on loopback, every pair, under a minute.
    ///
    /// Writes report.json, junit.xml and report.html (SVG charts) to --report-dir, or to a
    /// new timestamped folder it names. Exit status: 0 every check passed, 1 a check failed,
    /// 2 the plan could not run.
    #[command(
        after_help = "Examples:\n  podnet qualify\n  podnet qualify --plan rack12.toml --report-dir /srv/qual/rack12\n  \
        podnet qualify --print-plan > my-plan.toml   # the built-in plan, to edit"
    )]
    Qualify(QualifyArgs),

    /// Burn-in across hosts: inference traffic patterns at load, every byte checked.
    ///
    /// Every rank runs the same patterns one after another — all-to-all (MoE dispatch and
    /// combine), ring (all-reduce phases), pipeline chains, incast (N → 1), bisection pairs —
    /// each edge a stream of SENDs over its own RC connection with a seeded pattern in every
    /// message and its sequence number in the immediate data, every byte checked by the
    /// receiver; `--extreme` adds every edge of every pattern at once with more QPs and
    /// deeper queues. A damaged byte is reported with the peer, QP, message and byte offset,
    /// and fails the run.
    ///
    /// Ranks learn their place from --rank/--world-size/--coordinator, a --hostfile, or from
    /// Slurm (SLURM_PROCID, SLURM_NTASKS), Open MPI (OMPI_COMM_WORLD_RANK,
    /// OMPI_COMM_WORLD_SIZE), torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or a
    /// Kubernetes Indexed Job (JOB_COMPLETION_INDEX with --world-size or PODNET_WORLD_SIZE,
    /// and --coordinator or PODNET_COORDINATOR), and meet at rank 0 over TCP (rank 0 listens
    /// on the coordinator address only). A rank that never joins (--join-timeout) or
    /// stops answering (--dead-after) is named by rank and host, and every rank stops with
    /// exit status 1. Rank 0 serves joiners concurrently, each within 10 s and a size cap; it
    /// turns away a rank already claimed, another world size or podnet version, and — with a
    /// shared secret (--secret-file or PODNET_SECRET) — a joiner that cannot prove it.
    /// Exit status: 0 clean, 1 damage or a lost rank, 2 bad input or a rank turned away.
    #[command(after_help = "Examples:\n  \
        podnet burnin --rank 0 --world-size 2 --coordinator 10.0.0.1:29400 -d soft:10.0.0.1 &\n  \
        podnet burnin --rank 1 --world-size 2 --coordinator 10.0.0.1:29400 -d soft:10.0.0.2\n  \
        srun -N 16 podnet burnin --coordinator node001:29400 -d mlx5_0 --extreme --duration 3600\n  \
        podnet burnin --hostfile pod.hosts -d mlx5_0      (on every host of pod.hosts)")]
    Burnin(BurninArgs),

    /// The pod watching itself: membership, RDMA path probing, fault localization.
    #[command(subcommand)]
    Pod(PodCommand),

    /// Why a host or NIC underperforms for RDMA: configuration, PCIe, and the kernel log.
    ///
    /// One pass over the host: CPU governors, turbo, idle states, NUMA balancing, transparent
    /// huge pages, SMT and the kernel command line; each RDMA device's and GPU's PCIe link (current speed and
    /// width against its capability) and AER error counters (with their rate since boot);
    /// the netdevs under the RDMA devices (MTU against RoCE's 4096, RoCE v2 GIDs, IRQs on the
    /// NIC's NUMA node, and on a host with several RDMA netdevs rp_filter, arp_ignore and
    /// arp_announce); and the kernel log (`/dev/kmsg`, root only): PCIe links limited at
    /// boot, AER errors, NIC firmware health and asserts, failed firmware commands, cable
    /// module events, transmit timeouts, error CQEs and link flaps, grouped per device with
    /// their count and first and last time, and the lines of mlx5, bnxt, irdma and AER that
    /// no pattern knows, counted and shown. Each finding says what was seen, why it matters
    /// for RDMA, the command that fixes it, and its evidence (the file and value, or the log
    /// line).
    ///
    /// `--record DIR` writes everything read (the files under their own paths, `sys/…`,
    /// `proc/…`, and the kernel log as `kmsg`) into DIR, to attach to a bug report; `--root
    /// DIR` diagnoses such a recording (or a tree written by hand) as it would the live host.
    ///
    /// Exit status: 0 no error-severity finding, 1 at least one, 2 bad input.
    #[command(after_help = "Examples:\n  sudo podnet doctor\n  \
        sudo podnet doctor --record gpu07-doctor && tar czf gpu07-doctor.tgz gpu07-doctor\n  \
        podnet doctor --root gpu07-doctor --json | jq '.findings[] | select(.severity == \"error\")'\n  \
        podnet doctor --compare gpu0*-doctor\n  \
        podnet doctor --hostfile pod.hosts      (on every host of pod.hosts; rank 0 reports)")]
    Doctor(DoctorArgs),

    /// Run-time tuning for RDMA: what doctor finds wrong in the settings, changed and put back.
    ///
    /// `check` lists what `apply --profile` would change and exits 1 when something would;
    /// `apply` changes it — every CPU's governor to `performance`, turbo on, automatic NUMA
    /// balancing off, transparent huge pages to `madvise` (latency profile), the IRQs of the RDMA
    /// devices and of the netdevs under them onto the device's NUMA-local CPUs, the RDMA
    /// netdevs' RX and TX rings to their maximum (throughput profile, `ethtool -G`), and on a
    /// host with several RDMA netdevs `rp_filter` 2, `arp_ignore` 1 and `arp_announce` 2 on
    /// each — writing every original value to the state file (--state) before the first
    /// change; a change the kernel refuses puts back every change of that apply. `apply` again
    /// keeps the first originals; `restore` writes them back and removes the state file.
    /// Nothing is changed without `apply`. DCB (PFC, ECN, DSCP trust), FEC and the NIC's
    /// firmware settings are left to the operator: they must match the switch. Exit status:
    /// 0 done (check: nothing to change), 1 check found changes or apply was refused and
    /// rolled back, 2 bad input.
    #[command(subcommand)]
    Tune(TuneCommand),
}

/// `podnet tune` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TuneCommand {
    /// What `apply` would change, and why; exit 1 if anything.
    Check(TuneArgs),
    /// Change it, the original values first written to the state file.
    Apply(TuneArgs),
    /// Put back what the state file holds.
    Restore(TuneArgs),
}

/// How a tuning profile is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TuneProfile {
    /// Small messages, busy polling.
    Latency,
    /// Large transfers.
    Throughput,
}

/// `podnet tune` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct TuneArgs {
    /// What to tune for.
    #[arg(long, value_enum, default_value = "latency")]
    pub(crate) profile: TuneProfile,

    /// The state file: the original of every changed setting.
    #[arg(long, value_name = "FILE", default_value = "/var/lib/podnet/tune-state.json")]
    pub(crate) state: PathBuf,

    /// Tune the host tree in DIR (`DIR/sys`, `DIR/proc`: a recording or a test tree) instead
    /// of this host.
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,

    /// JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `podnet doctor` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct DoctorArgs {
    /// Diagnose the host recorded in DIR (`DIR/sys`, `DIR/proc`, `DIR/kmsg`) instead of this
    /// one.
    #[arg(long, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,

    /// Also write everything read into DIR (created; it must be empty), mirroring the paths.
    #[arg(long, value_name = "DIR")]
    pub(crate) record: Option<PathBuf>,

    /// One JSON object (host, devices, findings, the kernel log's events) instead of text.
    #[arg(long)]
    pub(crate) json: bool,

    /// Compare the recordings in DIR… (one per host of a pod, from `doctor --record`): the
    /// kernel, driver and NIC firmware versions side by side, and each one a host does not
    /// share with most of the others (`version-mismatch`), beside each host's error count.
    #[arg(long, value_name = "DIR", num_args = 2.., conflicts_with_all = ["root", "record"])]
    pub(crate) compare: Vec<PathBuf>,

    /// A pod at once: with --hostfile (or --rank/--world-size/--coordinator) every host runs
    /// the same command, diagnoses itself and sends its report to rank 0, which prints each
    /// host's findings, the versions side by side and the hosts that differ.
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

impl WorldArgs {
    /// Whether any flag asks for a multi-host run.
    pub(crate) fn given(&self) -> bool {
        self.rank.is_some()
            || self.world_size.is_some()
            || self.hostfile.is_some()
            || self.coordinator.is_some()
    }
}

/// Where a rank of a multi-host run stands, and how the ranks meet (`burnin`, and `qualify`
/// with a pod plan).
#[derive(Debug, Clone, Args)]
pub(crate) struct WorldArgs {
    /// This rank (with --world-size; else from the launcher's environment).
    #[arg(long)]
    pub(crate) rank: Option<u32>,

    /// How many ranks.
    #[arg(long)]
    pub(crate) world_size: Option<u32>,

    /// Rank 0's bootstrap address, HOST:PORT [default: PODNET_COORDINATOR, else
    /// MASTER_ADDR:MASTER_PORT, else the hostfile's first host at port 29400].
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) coordinator: Option<String>,

    /// The run's hosts, one a line (a name or an address; what follows it, as MPI's
    /// `slots=8`, is ignored; `#` comments): the world size is their number, this host's
    /// line (by host name or by one of its addresses) its rank, the first host the
    /// coordinator. Every host runs the same command.
    #[arg(long, value_name = "FILE")]
    pub(crate) hostfile: Option<PathBuf>,

    /// The run's shared secret, in a file (every rank the same; or set PODNET_SECRET to the
    /// secret itself). A joiner proves it with an HMAC-SHA256 over nonces from both sides and
    /// rank 0 proves it back, so the secret never crosses the wire and no rank follows an
    /// impostor. Without one, any host that reaches the coordinator address may claim a free
    /// rank.
    #[arg(long, value_name = "FILE", env = "PODNET_SECRET_FILE")]
    pub(crate) secret_file: Option<PathBuf>,

    /// Seconds rank 0 waits for every rank to join (and a rank tries to reach it).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub(crate) join_timeout: f64,

    /// Seconds between heartbeats.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub(crate) heartbeat: f64,

    /// Seconds of silence after which a rank is lost. Heartbeats have their own threads;
    /// with 4 ranks of --extreme on 2 cores the longest silence measured was 1.011 s at
    /// --heartbeat 1, so the default leaves about 4 s of margin. Each run reports its own
    /// (`longest_silence_ms`, the `burnin/heartbeat` check).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub(crate) dead_after: f64,
}

/// `podnet burnin` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct BurninArgs {
    /// This rank's device: `soft:<IP>` or an RDMA device [default: soft, the first free
    /// loopback address].
    #[arg(short = 'd', long = "ib-dev", value_name = "DEVICE", default_value = "soft")]
    pub(crate) ib_dev: String,

    /// Patterns, comma-separated: all-to-all, ring, pipeline, incast, bisection, or all
    /// (those five); and kv-cache, by name only: disaggregated inference's KV-cache transfer,
    /// each prefill rank (the first half) to each decode rank (the second) with READ and
    /// WRITE latency (4, 16, 64 KiB: p50, p99, p99.9 under load) and READ and WRITE
    /// bandwidth on 8 QPs (or --qps), from --memory (GPU memory where there is one), while
    /// every rank runs all-to-all SENDs beside them; every byte checked.
    #[arg(long, value_name = "PATTERNS", default_value = "all")]
    pub(crate) patterns: String,

    /// After the patterns, every edge of every pattern at once, more QPs, deeper queues.
    #[arg(long)]
    pub(crate) extreme: bool,

    /// The message-size mix, comma-separated bytes.
    #[arg(long, value_name = "SIZES", default_value = "4096,65536,1048576")]
    pub(crate) sizes: String,

    /// Seconds per pattern.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub(crate) duration: f64,

    /// Instead of --duration: this many messages per edge, QP and size.
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    pub(crate) count: Option<u64>,

    /// QPs per edge.
    #[arg(long, default_value_t = 1)]
    pub(crate) qps: usize,

    /// Where this rank's buffers are: `host`, or `cuda[:GPU]` (GPU memory, CUDA device GPU
    /// [default: 0]: the soft provider copies through the GPU's copy engine, rdma-core
    /// registers it with the NIC). Ranks may differ. Every message is checked after a copy
    /// back from the GPU.
    #[arg(long, value_name = "WHERE", default_value = "host")]
    pub(crate) memory: String,

    /// The first TCP port of this rank's side channels (one per incoming edge above it).
    #[arg(long, default_value_t = 18600)]
    pub(crate) port: u16,

    #[command(flatten)]
    pub(crate) world: WorldArgs,

    /// One JSON object (every edge) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Write report.json, junit.xml and report.html (as `podnet qualify` does) here.
    #[arg(long, value_name = "DIR")]
    pub(crate) report_dir: Option<PathBuf>,

    /// Go on through failures: run over pod channels (reliable, ordered messages over RC
    /// QPs that fail over along each host's route table: another UDP source port, another
    /// rail, a relay) with the pod plan --pod, instead of one RC connection per edge. A host
    /// that dies has its messages reported undeliverable by number; among the survivors
    /// every message must arrive once. One size (--sizes, at most 16 KiB); patterns
    /// all-to-all (the default) and ring.
    #[arg(long, requires = "pod")]
    pub(crate) resilient: bool,

    /// The pod plan (`[pod]`, as for qualify and `agent --pod`), with --resilient.
    #[arg(long, value_name = "PLAN", requires = "resilient")]
    pub(crate) pod: Option<PathBuf>,

    /// With --resilient: this host sends at most this many Mbit/s in all (0: as fast as the
    /// channels go). A burn-in below line rate keeps the fabric's queues short, so the
    /// pod's probes measure the fabric rather than the burn-in's own queues.
    #[arg(long, value_name = "MBIT", default_value_t = 0.0, requires = "resilient")]
    pub(crate) rate_mbit: f64,

    #[command(flatten)]
    pub(crate) pod_opts: PodOpts,
}

/// `--publish[=DIR]`, as `podnet perf` and `podnet qualify` take it.
#[derive(Debug, Clone, Args)]
pub(crate) struct PublishArg {
    /// Leave the results for `podnet agent` to export (`podnet_bench_*`: every latency
    /// iteration as a histogram, the bandwidth as a gauge): one JSON file per test, device,
    /// peer and size in DIR [default DIR: /run/podnet/bench; give another as --publish=DIR].
    #[arg(long, value_name = "DIR", num_args = 0..=1, require_equals = true,
          default_missing_value = telemetry::bench::DEFAULT_DIR)]
    pub(crate) publish: Option<PathBuf>,
}

/// `podnet qualify` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct QualifyArgs {
    /// The plan (TOML) [default: the built-in plan].
    #[arg(long, value_name = "FILE")]
    pub(crate) plan: Option<PathBuf>,

    /// Write report.json, junit.xml and report.html here [default: a new
    /// podnet-qualify-<date>-<time> folder in the current one].
    #[arg(long, value_name = "DIR")]
    pub(crate) report_dir: Option<PathBuf>,

    /// Print the report as JSON (report.json's content) instead of the summary.
    #[arg(long)]
    pub(crate) json: bool,

    /// Read sysfs from DIR instead of /sys (host and device checks).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub(crate) sysfs_root: PathBuf,

    #[command(flatten)]
    pub(crate) publish: PublishArg,

    /// Print the built-in plan and exit; with --hostfile, a pod plan's template for its
    /// hosts (edit the devices and ToRs).
    #[arg(long)]
    pub(crate) print_plan: bool,

    /// With --print-plan --hostfile: rails per host (devices mlx5_0, mlx5_1, …).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(crate) rails: usize,

    /// With --print-plan --hostfile: hosts per rack (a ToR per rack and rail).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(crate) hosts_per_tor: usize,

    /// A pod plan: where this rank stands and how the ranks meet (every host runs the same
    /// command; rank 0 runs the plan and writes the reports).
    #[command(flatten)]
    pub(crate) world: WorldArgs,
}

/// `podnet agent` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct AgentArgs {
    /// Where to serve /metrics (loopback unless you name another address).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub(crate) listen: std::net::SocketAddr,

    /// Read sysfs from DIR instead of /sys (DIR/class/infiniband, DIR/class/net, and the
    /// fixtures DIR/podnet/ethtool/<netdev>, DIR/podnet/dcb/<netdev>): a recorded host.
    #[arg(long, value_name = "DIR")]
    pub(crate) sysfs_root: Option<PathBuf>,

    /// Read procfs from DIR instead of /proc (DIR/net/dev, for netdevs whose sysfs
    /// statistics are missing).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub(crate) procfs_root: PathBuf,

    /// Health thresholds (TOML; see docs/metrics.md for the keys and defaults).
    #[arg(long, value_name = "FILE")]
    pub(crate) thresholds: Option<PathBuf>,

    /// Seconds between samples for the rates [default: 5; with --once or --print: 2].
    #[arg(long, value_name = "SECONDS")]
    pub(crate) interval: Option<f64>,

    /// Seconds a sample waits for each source before serving its last good sample instead.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0)]
    pub(crate) sample_deadline: f64,

    /// Print each port's health once (a table) and exit.
    #[arg(long)]
    pub(crate) once: bool,

    /// With --once: one JSON object instead of the table.
    #[arg(long, requires = "once")]
    pub(crate) json: bool,

    /// Also probe podnet's own RoCE stack: two soft devices on loopback addresses, an RC
    /// ping-pong burst each sample; round trips in `podnet_probe_rtt_seconds`, the devices'
    /// transport counters as ports (driver `soft`).
    #[arg(long)]
    pub(crate) probe: bool,

    /// Export the benchmark results published here (`podnet perf --publish`, `podnet
    /// qualify --publish`) as `podnet_bench_*` series, read at every scrape.
    #[arg(long, value_name = "DIR", default_value = telemetry::bench::DEFAULT_DIR)]
    pub(crate) bench_dir: PathBuf,

    /// Print what a scrape of /metrics returns (Prometheus text; two samples --interval
    /// apart, so rates and health are there) and exit.
    #[arg(long, conflicts_with = "once")]
    pub(crate) print: bool,

    /// Watch the pod this plan's `[pod]` names (the same plan as `podnet qualify`): join its
    /// membership, probe every peer's rails over RDMA, locate faults; served as
    /// `podnet_pod_*` series and at /pod (what `podnet pod status` prints).
    #[arg(long, value_name = "PLAN", conflicts_with_all = ["once", "print"])]
    pub(crate) pod: Option<PathBuf>,

    /// With --pod: the pod's shared secret, in a file (every host the same; or set
    /// PODNET_SECRET to the secret itself). Every membership, gossip, probe and handshake
    /// datagram is then authenticated (HMAC-SHA256 with a key derived from it) and replays
    /// are refused; without one, anyone who can reach the membership port can speak for a
    /// host of the plan, and the agent says so.
    #[arg(long, value_name = "FILE", requires = "pod")]
    pub(crate) secret_file: Option<PathBuf>,

    #[command(flatten)]
    pub(crate) pod_opts: PodOpts,
}

/// Which host of the pod this is, and how it watches.
#[derive(Debug, Clone, Args)]
pub(crate) struct PodOpts {
    /// This host in the pod plan, by name or index [default: the plan's host with this host
    /// name; else the launcher's rank (SLURM_PROCID, OMPI_COMM_WORLD_RANK, RANK,
    /// JOB_COMPLETION_INDEX)].
    #[arg(long, value_name = "NAME|INDEX", requires = "pod")]
    pub(crate) pod_host: Option<String>,

    /// The membership channel's UDP port, on every rail's address.
    #[arg(long, value_name = "PORT", default_value_t = pod::agent::CONTROL_PORT, requires = "pod")]
    pub(crate) pod_port: u16,

    /// Seconds between probe rounds (and the failure detector's probe period).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.1, requires = "pod")]
    pub(crate) probe_period: f64,

    /// Bytes of the near-MTU probe (0: none; at most 4096, and at most the rails' active
    /// MTU: the smaller is sent, and said at start): each rail sends one every fourth round
    /// while the pod is healthy, every round while something is wrong.
    #[arg(long, value_name = "BYTES", default_value_t = 4096, requires = "pod")]
    pub(crate) probe_large: usize,

    /// Other ToRs each rail probes per round while the pod is healthy, in turn (a device of
    /// each); from the first loss seen anywhere, every other ToR (up to 16) in each round
    /// until it clears. Every device under the rail's own ToR, and every peer this host has
    /// pod-channel traffic for, is probed every round regardless.
    #[arg(long, value_name = "N", default_value_t = pod::probe::ProbeConfig::default().calm_inter_tor, requires = "pod")]
    pub(crate) probe_tors: usize,

    /// Small probes each rail sends per round, at least: a rail with fewer peers to probe
    /// (a small pod) probes them again over other UDP source ports. These extra probes feed
    /// only the pod's per-cable and per-link loss tests, whose power is the probes sent: at
    /// the default (100 a second at the default period) 1 % loss one way on a cable is
    /// named within 30 s about 19 times in 20. 0: only the round's peers, once each.
    #[arg(long, value_name = "N", default_value_t = pod::probe::ProbeConfig::default().min_small, requires = "pod")]
    pub(crate) probe_min: usize,
}

/// `podnet pod` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum PodCommand {
    /// The pod as this host's agent sees it: members, paths, suspected faults, events.
    ///
    /// Asks the agent (`podnet agent --pod PLAN`) at --agent for its view: every member's
    /// health (SWIM), the pod's path matrix in sum (ok, lossy, dead, losing near-MTU frames),
    /// this host's paths, what the probes and membership point at (a host that left, a host
    /// starved of CPU, a rail, a host, a ToR, a spine path, a spine, an MTU) with the
    /// evidence, and the last events. Exit status: 0 no fault, 1 a fault of error severity,
    /// 2 the agent could not be asked.
    #[command(
        after_help = "Examples:\n  podnet pod status\n  podnet pod status --json | jq '.findings'\n  \
        podnet pod status --agent 10.0.0.5:9464"
    )]
    Status(PodStatusArgs),

    /// A leaf-spine pod's shape drawn from a seed: to emulate it and to qualify it.
    ///
    /// A seed draws racks (2-4), hosts per ToR (2-4), rails (1-2), spines (2-4), the ToRs'
    /// uplink against their hosts (1:1 non-blocking, 2:1, 3:1, or each spine link as fast as
    /// all of a ToR's hosts), the host link rate (100, 200, 500 or 1000 Mbit/s), the hosts'
    /// MTU (1500 or 9000) and the fabric's ECMP hash seed; the same seed, the same shape.
    /// `--emupod` prints the arguments of `scripts/emupod.sh up NAME` that build it, `--plan`
    /// the qualify plan for it (the emulated pod's thresholds, the shape's link rates, spines
    /// and ACK timeout, its hosts), `--json` the shape itself.
    #[command(after_help = "Examples:\n  podnet pod shape --seed 7\n  \
        scripts/emupod.sh up p7 $(podnet pod shape --seed 7 --emupod)\n  \
        podnet pod shape --seed 7 --uplink 1:1 --plan > pod.toml")]
    Shape(PodShapeArgs),
}

/// `podnet pod shape` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct PodShapeArgs {
    /// The seed the shape is drawn from.
    #[arg(long, value_name = "N")]
    pub(crate) seed: u64,

    /// The ToRs' uplink against their hosts, instead of the drawn one: 1:1, 2:1, 3:1 or
    /// each-link-all.
    #[arg(long, value_name = "RATIO", value_parser = parse_uplink)]
    pub(crate) uplink: Option<topology::Uplink>,

    /// Print the arguments of `scripts/emupod.sh up NAME` that build the shape.
    #[arg(long, conflicts_with_all = ["plan", "json"])]
    pub(crate) emupod: bool,

    /// Print the qualify plan for the shape.
    #[arg(long, conflicts_with = "json")]
    pub(crate) plan: bool,

    /// With --plan: the plan's `pod.route`, the command that says which spine a flow
    /// crosses (for a pod `scripts/emupod.sh up NAME` built: `scripts/emupod.sh route NAME`).
    #[arg(long, value_name = "CMD", requires = "plan")]
    pub(crate) route: Option<String>,

    /// Print the shape as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_uplink(s: &str) -> Result<topology::Uplink, String> {
    topology::Uplink::ALL
        .into_iter()
        .find(|u| u.as_str() == s)
        .ok_or_else(|| format!("{s:?}: one of 1:1, 2:1, 3:1, each-link-all"))
}

/// `podnet pod status` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct PodStatusArgs {
    /// The agent's HTTP address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub(crate) agent: std::net::SocketAddr,

    /// The agent's view as JSON instead of the tables.
    #[arg(long)]
    pub(crate) json: bool,

    /// Seconds to wait for the agent.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    pub(crate) timeout: f64,
}

/// `podnet devices` flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct DevicesArgs {
    /// Also print each port's GID table.
    #[arg(long)]
    pub(crate) gids: bool,

    /// One JSON array of devices (with ports and GIDs) instead of the table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Read sysfs from DIR instead of /sys (DIR/class/infiniband, DIR/class/net): a recorded
    /// host's tree.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub(crate) sysfs_root: PathBuf,

    /// Leave out the soft devices.
    #[arg(long)]
    pub(crate) no_soft: bool,

    /// List the GPUs instead (NVIDIA and AMD, from sysfs: no driver needed): each one's PCI
    /// address, NUMA node, and the RDMA NIC nearest it with their distance as
    /// `nvidia-smi topo -m` names it (PIX: one PCIe switch, PXB: several bridges, PHB: the
    /// CPU's host bridge, NODE: another root complex, SYS: another NUMA node). The table
    /// without --gpus lists them too, after the devices.
    #[arg(long)]
    pub(crate) gpus: bool,

    /// With --gpus: also ask the CUDA driver — each GPU's CUDA ordinal, name, whether it
    /// exports dma-bufs (GPUDirect RDMA without a peer-memory module), and what its copy
    /// engine moves between pinned host memory and the GPU (64 MiB copies, GB/s each way:
    /// the ceiling of the soft provider's GPU path). Exit 2 without the CUDA driver.
    #[arg(long, requires = "gpus")]
    pub(crate) cuda: bool,
}

/// `podnet perf` flags, named as perftest's.
#[derive(Debug, Clone, Args)]
pub(crate) struct PerfArgs {
    /// The test: write-bw, write-lat, read-bw, read-lat, send-bw, send-lat, atomic-bw,
    /// atomic-lat.
    #[arg(value_name = "TEST")]
    pub(crate) test: String,

    /// The server to connect to; without it, act as the server.
    #[arg(value_name = "HOST")]
    pub(crate) server: Option<String>,

    #[command(flatten)]
    pub(crate) dev: DeviceArgs,

    /// Bytes per message [default: 65536 for bandwidth, 2 for latency; atomics are 8].
    #[arg(short = 's', long)]
    pub(crate) size: Option<usize>,

    /// Messages per QP [default: 5000 for write-bw, 1000 otherwise].
    #[arg(short = 'n', long)]
    pub(crate) iters: Option<u64>,

    /// Run for this many seconds instead of -n messages.
    #[arg(short = 'D', long, value_name = "SECONDS")]
    pub(crate) duration: Option<f64>,

    /// Every size from 2 to 2^23 bytes (at most 1 GiB of messages per size).
    #[arg(short = 'a', long)]
    pub(crate) all: bool,

    /// QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub(crate) qps: usize,

    /// The local GID index [default: the soft device's one GID, 0; on an RDMA device its
    /// first RoCE v2 GID, IPv4 before IPv6].
    #[arg(short = 'x', long = "gid-index")]
    pub(crate) gid_index: Option<usize>,

    /// The RC local ACK timeout: 4.096 µs × 2^N (perftest's `-u`).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(1..=31))]
    pub(crate) qp_timeout: u8,

    /// SENDs and WRITEs up to this many bytes go inline (IBV_SEND_INLINE: copied into the
    /// work request at the post, no DMA read of the payload). perftest's `-I` [default:
    /// perftest's — for the SEND and WRITE latency tests on the NICs it knows, 220 (WRITE),
    /// 236 (SEND) or 188 (SEND over UD) bytes on mlx4/mlx5, its own figure on bnxt_re, efa,
    /// erdma, hns, qedr and irdma; 0 for the other tests and on rxe, siw and soft devices].
    #[arg(short = 'I', long = "inline_size", value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub(crate) inline_size: Option<u32>,

    /// Operations in flight per QP [default: 128 for bandwidth, 1 for latency].
    #[arg(short = 't', long = "tx-depth")]
    pub(crate) tx_depth: Option<usize>,

    /// Bandwidth tests: post lists of up to N work requests per ibv_post_send call
    /// (perftest's `--post_list`) [default: perftest's 1 on an RDMA device — on Linux rxe
    /// each call runs the kernel's requester in the caller's time; on a soft device all the
    /// TX depth allows, as its post sends at once, one sendmmsg per list]. As perftest
    /// has it, -n must then be a multiple of N, and N of any -Q.
    #[arg(short = 'l', long = "post_list", value_name = "N")]
    pub(crate) post_list: Option<usize>,

    /// Bandwidth tests: ask for a completion every N messages (perftest's `--cq-mod`, 1 to
    /// 1024; at most the TX depth) [default: perftest's — the -l size when it is more than
    /// 1; else 1 for one size above 8 KiB over RC/UC, 100 otherwise].
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    pub(crate) cq_mod: Option<usize>,

    /// Receives posted per QP (SEND tests).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    pub(crate) rx_depth: usize,

    /// Both directions at once (bandwidth tests); the row is the sum.
    #[arg(short = 'b', long)]
    pub(crate) bidirectional: bool,

    /// Path MTU: 256, 512, 1024, 2048 or 4096 [default: the smaller active MTU of the two
    /// ports].
    #[arg(short = 'm', long)]
    pub(crate) mtu: Option<u32>,

    /// Transport: RC, UC or UD (WRITE: RC/UC; READ and atomics: RC; SEND: all). UD uses
    /// perftest's fixed Q_Key, so any process that can reach the device can send to its QP:
    /// such SENDs count as received, unless --data-validation is on, which checks each
    /// message's source QP and address and reports any other (docs/security.md).
    #[arg(short = 'c', long, default_value = "RC", value_parser = ["RC", "UC", "UD", "rc", "uc", "ud"])]
    pub(crate) connection: String,

    /// Accepted for perftest compatibility (podnet does not warn about cpufreq).
    #[arg(short = 'F', long = "CPU-freq")]
    pub(crate) cpu_freq: bool,

    /// Sleep on completion events instead of busy-polling.
    #[arg(short = 'e', long)]
    pub(crate) events: bool,

    /// The atomic: FETCH_AND_ADD or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", default_value = "FETCH_AND_ADD",
          value_parser = ["FETCH_AND_ADD", "CMP_AND_SWAP"])]
    pub(crate) atomic_type: String,

    /// Bandwidth in Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits")]
    pub(crate) report_gbits: bool,

    /// Latency tests: also print every iteration's latency (one way, µs) in the order
    /// measured, before the row, as perftest's `-U` does (with --json, the row's
    /// `unsorted_usec`). Shows whether a run was slow throughout or in a stretch.
    #[arg(short = 'U', long = "report-unsorted")]
    pub(crate) report_unsorted: bool,

    /// Print only this figure, one line per size: bandwidth (average), message_rate or
    /// latency (typical).
    #[arg(long, value_parser = ["bandwidth", "message_rate", "latency"])]
    pub(crate) output: Option<String>,

    /// With -D: measure again and print a row every -D seconds, for ever (bandwidth).
    #[arg(long = "run_infinitely")]
    pub(crate) run_infinitely: bool,

    /// Also write the results as JSON to --out_json_file, with perftest's keys.
    #[arg(long = "out_json")]
    pub(crate) out_json: bool,

    /// Where --out_json writes.
    #[arg(long = "out_json_file", value_name = "FILE", default_value = "perftest_out.json")]
    pub(crate) out_json_file: std::path::PathBuf,

    /// One JSON object per result row on stdout instead of the banner and table.
    #[arg(long)]
    pub(crate) json: bool,

    #[command(flatten)]
    pub(crate) publish: PublishArg,

    /// The IP traffic class (DSCP << 2 | ECN) of the QPs' packets.
    #[arg(long = "tclass", value_name = "TCLASS")]
    pub(crate) tclass: Option<u8>,

    /// Soft devices: one datagram per send instead of UDP segmentation offload (GSO; GRO on
    /// IPv6), to measure what offload gains.
    #[arg(long = "no-udp-offload")]
    pub(crate) no_udp_offload: bool,

    /// Check every payload: each message carries a seeded pattern checked where it lands
    /// (SEND at the receiver, READ and atomics at the initiator, WRITE and atomic targets by
    /// a follow-up exchange). Both sides must be podnet and pass it.
    #[arg(long = "data-validation")]
    pub(crate) data_validation: bool,

    /// Put this side's buffers in GPU memory, CUDA device GPU [default: 0] (perftest's
    /// flag). The soft provider copies each payload through the GPU's copy engine (any host
    /// with a GPU, with or without an RDMA NIC); the rdma-core provider registers the GPU
    /// memory with the NIC (GPUDirect RDMA: its dma-buf, or a peer-memory module). The two
    /// sides may differ. --data-validation checks the bytes copied back from the GPU. On a
    /// host without CUDA: one line saying so, exit 2.
    #[arg(long = "use_cuda", value_name = "GPU", num_args = 0..=1, default_missing_value = "0", require_equals = true)]
    pub(crate) use_cuda: Option<u32>,

    /// With --use_cuda: register the GPU buffer through its dma-buf
    /// (`cuMemGetHandleForAddressRange`, `ibv_reg_dmabuf_mr`); refused where the GPU exports
    /// none.
    #[arg(long = "use_cuda_dmabuf", requires = "use_cuda")]
    pub(crate) use_cuda_dmabuf: bool,

    /// Give up when the peer does not answer or nothing completes for this many seconds
    /// [default: 10]. Given, it also bounds how long a server waits for its client and a
    /// passive side for the measuring one (otherwise: until the peer closes the connection).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<f64>,
}

/// A verbs provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProviderKind {
    /// podnet's userspace RoCEv2 on UDP sockets.
    Soft,
    /// Real RDMA devices through rdma-core's libibverbs.
    RdmaCore,
}

/// Where a two-sided tool runs and meets its peer: the flags ibv_rc_pingpong and perftest
/// share.
#[derive(Debug, Clone, Args)]
pub(crate) struct DeviceArgs {
    /// TCP port of the connection exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub(crate) port: u16,

    /// The RDMA device: `soft` (first free loopback address), `soft:<IP>[:<udp-port>]`, or
    /// an RDMA device's name (`mlx5_0`, `rxe0`; `podnet devices` lists them) [default: soft,
    /// or with --provider rdma-core the first RDMA device].
    #[arg(short = 'd', long = "ib-dev", value_name = "DEVICE")]
    pub(crate) ib_dev: Option<String>,

    /// Which provider drives the device: `soft` (podnet's userspace RoCEv2) or `rdma-core`
    /// (real RDMA devices through libibverbs) [default: from the device's name].
    #[arg(long, value_enum, value_name = "PROVIDER")]
    pub(crate) provider: Option<ProviderKind>,

    /// The device port (RoCE devices here have one: 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub(crate) ib_port: u8,
}

/// `podnet pingpong` flags, named as ibv_rc_pingpong's.
#[derive(Debug, Clone, Args)]
pub(crate) struct PingpongArgs {
    /// The server to connect to (host name or address); without it, act as the server.
    pub(crate) server: Option<String>,

    #[command(flatten)]
    pub(crate) dev: DeviceArgs,

    /// Bytes per message.
    #[arg(short = 's', long, default_value_t = 4096)]
    pub(crate) size: u32,

    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub(crate) mtu: u32,

    /// Receives kept posted.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub(crate) rx_depth: u32,

    /// Messages each way.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub(crate) iters: u32,

    /// Service level (carried for compatibility; RoCE maps it to a VLAN priority, which the
    /// soft provider does not set).
    #[arg(short = 'l', long, default_value_t = 0)]
    pub(crate) sl: u8,

    /// Sleep on completion events instead of busy-polling the CQ.
    #[arg(short = 'e', long)]
    pub(crate) events: bool,

    /// Local GID index (the soft device has one GID, index 0; an RDMA device's default is its
    /// first RoCE v2 GID). A peer's zero GID means "the address it connected from".
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX")]
    pub(crate) gid_idx: Option<usize>,

    /// ibv_rc_pingpong's check: the client marks the first byte of each page, the server
    /// looks at those bytes once at the end (it proves little; see --verify).
    #[arg(short = 'c', long)]
    pub(crate) chk: bool,

    /// Check every payload byte received: the client sends a fresh pattern each iteration
    /// and expects it echoed; the server checks the client's pattern (or, against
    /// ibv_rc_pingpong, that its buffer comes back unchanged).
    #[arg(long)]
    pub(crate) verify: bool,

    /// Give up when no completion arrives for this many seconds (also bounds connecting and
    /// the exchange; a server waits for its client without limit unless this is given).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<f64>,

    /// One JSON object on stdout instead of the text lines: addresses, results, the
    /// device's transport counters.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum CaptureCommand {
    /// Decode every RoCEv2 frame of a pcap or pcapng file.
    ///
    /// Reads captures of the link types tcpdump writes (Ethernet with 802.1Q/QinQ tags, Linux
    /// cooked SLL and SLL2 from `tcpdump -i any`, raw IP), IPv4 and IPv6. A frame is RoCEv2 when
    /// it is UDP to the RoCEv2 port. Each frame's ICRC is checked; frames whose trailer the
    /// capture's snap length cut are reported as unchecked. The last line counts RoCEv2 frames,
    /// ICRC results and frames that are not RoCEv2 (on stderr with --json).
    ///
    /// Exit status: 0 when the file was read to its end, 2 when it is missing, empty,
    /// truncated or not a capture.
    #[command(after_help = "Examples:\n  podnet capture decode roce.pcap\n  \
        tcpdump -i any -w - udp port 4791 | podnet capture decode --json - | jq .opcode_name")]
    Decode(DecodeArgs),

    /// Look across a capture's frames: connections, losses, resends, NAKs, RNR, congestion,
    /// latencies — and what went wrong, worst first.
    ///
    /// Connections: the two directions of an RC QP pair (matched by addresses, QPNs and the
    /// PSNs of the responses), UC and UD flows; CNPs are counted for the flow they throttle.
    /// Per direction: messages and bytes by opcode, goodput over time, PSN gaps, packets
    /// lost before or after the capture point, packets the capture itself missed, go-back-N
    /// resend bursts and what set them off (NAK, RNR NAK, timeout), NAKs by code, RNR NAKs
    /// and their timers, out-of-order and duplicated packets, ACK, READ and atomic
    /// latencies, ACK coalescing, CE marks and CNPs, ICRC failures, requests still
    /// unanswered at the end. Findings name the QP, the frames and a probable cause.
    ///
    /// Exit status: 0 when no finding has error severity, 1 when one does (an access error,
    /// an invalid request, unanswered requests, corrupted packets), 2 when the file cannot be
    /// read.
    #[command(after_help = "Examples:\n  podnet capture analyze roce.pcap\n  \
        podnet capture analyze --json roce.pcapng | jq '.findings[0]'\n  \
        podnet capture analyze --html report.html mirror.pcap")]
    Analyze(AnalyzeArgs),

    /// Record RoCEv2 off an interface to pcapng: an AF_PACKET socket with a BPF filter for
    /// UDP to the RoCEv2 port, kernel timestamps in nanoseconds, each frame's direction.
    ///
    /// Sees what goes through the kernel's network stack: podnet's soft devices, Linux
    /// Soft-RoCE (rxe), a veth, loopback, a switch mirror's port. A NIC that carries RoCE in
    /// hardware (mlx5, bnxt_re, irdma) hands its RoCE packets to no socket: on such an
    /// interface recording is refused with the reason (exit 2) rather than an empty file.
    /// Segmentation-offload runs are kept as the kernel saw them (`capture decode` and
    /// `analyze` cut them) unless --split-gso writes each packet as the wire carries it.
    /// Stops after --duration, --count, or Ctrl-C, the file complete in every case: what the
    /// kernel had queued by then is written first. The last line (or the JSON object with
    /// --json) says how many frames went to which files and how many the kernel dropped
    /// because the recording fell behind (raise --buffer).
    ///
    /// A soft device can also record itself, both directions, from inside the device: run any
    /// tool with PODNET_CAPTURE=FILE ({ip} in FILE becomes the device's address).
    #[command(after_help = "Examples:\n  \
        podnet capture record -i eth0 -w roce.pcapng --duration 10\n  \
        podnet capture record -i ens1f0 -w ring.pcapng --ring 8 --file-size 100\n  \
        podnet capture record -i lo -w lo.pcapng --count 10000 --split-gso")]
    Record(RecordArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// The interface to record on.
    #[arg(short = 'i', long, value_name = "NETDEV")]
    pub(crate) interface: String,

    /// The pcapng file to write (with --ring: NAME.0.EXT, NAME.1.EXT, …).
    #[arg(short = 'w', long, value_name = "FILE")]
    pub(crate) write: PathBuf,

    /// Keep a ring of this many files of --file-size each, the oldest overwritten.
    #[arg(long, value_name = "N")]
    pub(crate) ring: Option<u32>,

    /// With --ring: start the next file after this many MB.
    #[arg(long, value_name = "MB", default_value_t = 100)]
    pub(crate) file_size: u64,

    /// Stop after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) duration: Option<f64>,

    /// Stop after this many frames.
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,

    /// Bytes kept of each frame (a segmentation-offload run can be 64 KiB).
    #[arg(long, value_name = "BYTES", default_value_t = 262_144)]
    pub(crate) snaplen: u32,

    /// Write each packet of a segmentation-offload run as its own frame, with the lengths
    /// and IPv4 Identification the wire would carry.
    #[arg(long)]
    pub(crate) split_gso: bool,

    /// The kernel's queue for this recording, in MiB (as tcpdump's -B): frames that arrive
    /// while it is full are dropped by the kernel, and counted.
    #[arg(long, value_name = "MIB", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=2048))]
    pub(crate) buffer: u32,

    /// The summary as one JSON object on stdout.
    #[arg(long)]
    pub(crate) json: bool,

    /// UDP destination port that marks RoCEv2.
    #[arg(long, value_name = "PORT", default_value_t = wire::ROCEV2_UDP_PORT)]
    pub(crate) roce_port: u16,
}

#[derive(Debug, Args)]
pub(crate) struct AnalyzeArgs {
    /// The capture file (pcap or pcapng); `-` reads standard input.
    pub(crate) file: PathBuf,

    /// The whole report as one JSON object on stdout (connections, their directions'
    /// statistics, findings).
    #[arg(long)]
    pub(crate) json: bool,

    /// Also write an HTML report: the findings, then each connection's timeline (PSN over
    /// time with losses, resends, NAKs and CNPs marked) as SVG.
    #[arg(long, value_name = "FILE")]
    pub(crate) html: Option<PathBuf>,

    /// A request still unacknowledged this many milliseconds before the capture's last frame
    /// is reported as unanswered (the responder or the path gone: retry exhaustion).
    #[arg(long, value_name = "MS", default_value_t = 100.0)]
    pub(crate) grace: f64,

    /// UDP destination port that marks RoCEv2.
    #[arg(long, value_name = "PORT", default_value_t = wire::ROCEV2_UDP_PORT)]
    pub(crate) roce_port: u16,
}

#[derive(Debug, Args)]
pub(crate) struct DecodeArgs {
    /// The capture file (pcap or pcapng); `-` reads standard input.
    pub(crate) file: PathBuf,

    /// One JSON object per RoCEv2 frame on stdout (keys: frame, ip_version, src, dst, src_port,
    /// dst_port, opcode, opcode_name, se, migreq, pad_count, tver, pkey, fecn, becn, dest_qp,
    /// ack_req, psn, reth, aeth, deth, immdt, ieth, atomic_eth, atomic_ack_eth, rdeth, xrceth,
    /// payload_len, icrc, icrc_ok); the summary goes to stderr.
    #[arg(long)]
    pub(crate) json: bool,

    /// UDP destination port that marks RoCEv2.
    #[arg(long, value_name = "PORT", default_value_t = wire::ROCEV2_UDP_PORT)]
    pub(crate) roce_port: u16,
}
