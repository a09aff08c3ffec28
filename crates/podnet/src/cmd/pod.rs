//! `podnet agent --pod PLAN` (the pod monitor inside the agent: its series and /pod) and
//! `podnet pod status`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use pod::agent::{AgentConfig, Observer, PodAgent, Status};
use pod::probe::{Answered, Lost, Outgoing};
use qualify::plan::Plan;
use telemetry::prometheus_client::metrics::counter::{ConstCounter, Counter};
use telemetry::prometheus_client::metrics::family::Family;
use telemetry::prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use telemetry::prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use telemetry::prometheus_client::registry::Registry;
use topology::{Dev, Pod};

use crate::cli::{AgentArgs, PodOpts, PodStatusArgs};

type Labels = Vec<(String, String)>;

/// The agent's series of what the probes meet.
struct Series {
    rtt: Family<Labels, Histogram>,
    sent: Family<Labels, Counter>,
    lost: Family<Labels, Counter>,
}

fn labels(pod: &Pod, rail: Dev, peer: Dev, large: bool) -> Labels {
    vec![
        ("rail".into(), pod.name(rail)),
        ("peer".into(), pod.name(peer)),
        ("size".into(), if large { "large" } else { "small" }.into()),
    ]
}

struct Obs {
    me: usize,
    series: Arc<Series>,
    /// Each path's series, looked up once (a lookup formats and hashes its labels).
    paths: Mutex<HashMap<PathKey, PathSeries>>,
}

/// (this host's rail, peer host, peer rail, near-MTU).
type PathKey = (usize, usize, usize, bool);

/// One path's series (clones share the family's metric).
#[derive(Clone)]
struct PathSeries {
    rtt: Histogram,
    sent: Counter,
    lost: Counter,
}

impl Obs {
    fn path(&self, pod: &Pod, rail: usize, dst: Dev, large: bool) -> PathSeries {
        let key = (rail, dst.host, dst.rail, large);
        let mut paths = self.paths.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        paths
            .entry(key)
            .or_insert_with(|| {
                let l = labels(pod, Dev { host: self.me, rail }, dst, large);
                PathSeries {
                    rtt: self.series.rtt.get_or_create(&l).clone(),
                    sent: self.series.sent.get_or_create(&l).clone(),
                    lost: self.series.lost.get_or_create(&l).clone(),
                }
            })
            .clone()
    }
}

impl Observer for Obs {
    fn answered(&self, pod: &Pod, a: &Answered) {
        self.path(pod, a.rail, a.dst, a.large).rtt.observe(a.rtt.as_secs_f64());
    }
    fn lost(&self, pod: &Pod, x: &Lost) {
        self.path(pod, x.rail, x.dst, x.large).lost.inc();
    }
    fn sent(&self, pod: &Pod, o: &Outgoing) {
        self.path(pod, o.rail, o.dst, o.packet.large).sent.inc();
    }
}

/// The pod monitor of an agent.
pub(crate) struct Monitor {
    agent: PodAgent,
    series: Arc<Series>,
}

/// The pod monitor's configuration from a pod plan and the `--pod-*` flags.
pub(crate) fn agent_config(
    path: &std::path::Path,
    o: &PodOpts,
    secret: Option<&rendezvous::bootstrap::Secret>,
) -> anyhow::Result<AgentConfig> {
    let plan = Plan::load(path)?;
    let Some(pod) = plan.pod else {
        bail!("{}: no [pod] section (the pod's hosts and rails, as for qualify)", path.display())
    };
    let period = crate::cmd::world::secs("--probe-period", o.probe_period)?;
    if !(0.01..=10.0).contains(&o.probe_period) {
        bail!("--probe-period must be between 0.01 and 10 seconds, not {}", o.probe_period);
    }
    if o.probe_large != 0 && !(pod::probe::HEADER..=4096).contains(&o.probe_large) {
        bail!(
            "--probe-large must be 0 or {}-4096 bytes, not {}",
            pod::probe::HEADER,
            o.probe_large
        );
    }
    let me = this_host(&pod, o.pod_host.as_deref())?;
    for r in &pod.hosts[me].rails {
        if r.soft_ip().is_none() {
            bail!(
                "rail {:?}: the pod monitor probes from soft devices for now (soft:<rail \
                 address>); an RDMA device's address comes from its GID, not yet read here",
                r.device
            );
        }
    }
    let mut cfg = AgentConfig::new(pod, me);
    cfg.key = secret.map(|s| pod::seal::PodKey::new(s.derive_key("podnet-pod/1")));
    if cfg.key.is_none() {
        eprintln!(
            "podnet: WARNING: the pod's membership, gossip and probes are NOT authenticated \
             (no --secret-file or {}): anyone who can reach UDP port {} can speak for a host \
             of the plan",
            rendezvous::bootstrap::SECRET_ENV,
            o.pod_port
        );
    }
    cfg.control_port = o.pod_port;
    cfg.probe.large = o.probe_large;
    if o.probe_tors == 0 {
        bail!("--probe-tors must be at least 1");
    }
    cfg.probe.calm_inter_tor = o.probe_tors;
    cfg.probe.min_small = o.probe_min;
    cfg.probe.period = period;
    cfg.timeouts.probe_period = period;
    cfg.timeouts.probe_rtt = period * 2 / 5;
    cfg.timeouts.suspect_to_down = period * 3;
    cfg.report_every = period * 2;
    cfg.settle = period * 4;
    cfg.clear_after = period * 10;
    if let Some(cmd) = cfg.pod.route.clone() {
        cfg.routes = agent_routes(&cfg.pod, &cmd, &cfg.probe)?;
    }
    Ok(cfg)
}

/// The spines the agent's probes cross, from the plan's route command: every pair of
/// devices of one rail under two ToRs, over each probe port, both ways.
fn agent_routes(
    pod: &Pod,
    cmd: &str,
    probe: &pod::probe::ProbeConfig,
) -> anyhow::Result<topology::route::Routes> {
    let devs = pod.devices();
    let pairs: Vec<(topology::Dev, topology::Dev)> = devs
        .iter()
        .flat_map(|a| devs.iter().map(move |b| (*a, *b)))
        .filter(|(a, b)| a < b && a.rail == b.rail && !pod.same_tor(*a, *b))
        .collect();
    let ports: Vec<u16> = (0..probe.ports).map(|i| probe.port(i)).collect();
    let flows = topology::route::flows(pod, &pairs, &ports);
    let answers =
        qualify::podrun::ask_routes(cmd, &flows).map_err(|e| anyhow::anyhow!("pod.route: {e}"))?;
    let routes = topology::route::routes(pod, &pairs, &ports, &answers);
    eprintln!(
        "podnet: the routes of {} pairs over {} probe ports from `{cmd}`: findings name a \
         ToR's link to a spine, or a spine",
        pairs.len(),
        ports.len()
    );
    Ok(routes)
}

/// Which host of `pod` this is: `--pod-host` (a name or an index), else the host with this
/// host name, else the launcher's rank.
fn this_host(pod: &Pod, named: Option<&str>) -> anyhow::Result<usize> {
    if let Some(n) = named {
        if let Some(i) = pod.hosts.iter().position(|h| h.name == n) {
            return Ok(i);
        }
        if let Ok(i) = n.parse::<usize>()
            && i < pod.hosts.len()
        {
            return Ok(i);
        }
        bail!("--pod-host {n:?}: no such host in the plan ({} hosts)", pod.hosts.len());
    }
    let hostname = rendezvous::world::hostname();
    if let Some(i) = pod.hosts.iter().position(|h| h.name == hostname) {
        return Ok(i);
    }
    for k in ["SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "RANK", "JOB_COMPLETION_INDEX"] {
        if let Some(v) = std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok()) {
            if v < pod.hosts.len() {
                return Ok(v);
            }
            bail!("{k} = {v}, but the plan has {} hosts", pod.hosts.len());
        }
    }
    bail!(
        "which host of the pod is this? The plan names no host {hostname:?} and no launcher \
         rank is set: give --pod-host NAME"
    )
}

impl Monitor {
    /// Starts the pod monitor of `podnet agent --pod`.
    pub(crate) fn start(args: &AgentArgs) -> anyhow::Result<Option<Monitor>> {
        let Some(path) = &args.pod else { return Ok(None) };
        let secret = crate::cmd::world::secret_from(args.secret_file.as_deref())?;
        let cfg = agent_config(path, &args.pod_opts, secret.as_ref())?;
        let me = cfg.me;
        let o = &args.pod_opts;
        let series = Arc::new(Series {
            rtt: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1e-6, 2.0, 22))
            }),
            sent: Family::default(),
            lost: Family::default(),
        });
        let obs = Arc::new(Obs { me, series: series.clone(), paths: Mutex::default() });
        let agent = PodAgent::start(cfg, obs).context("cannot start the pod monitor")?;
        eprintln!(
            "podnet agent: watching pod host {} ({me} of {}), membership on UDP port {}",
            agent.pod().hosts[me].name,
            agent.pod().hosts.len(),
            o.pod_port
        );
        if agent.probe_large() < o.probe_large {
            eprintln!(
                "podnet agent: near-MTU probes of {} bytes, this host's rails' active MTU (not \
                 the {} asked: larger ones would be lost on every path)",
                agent.probe_large(),
                o.probe_large
            );
        }
        Ok(Some(Monitor { agent, series }))
    }

    /// The pod agent's threads that ended on their own (see [`PodAgent::ended_threads`]).
    pub(crate) fn ended_threads(&self) -> Vec<String> {
        self.agent.ended_threads()
    }

    /// The monitor's view, as /pod serves it.
    pub(crate) fn status(&self) -> Status {
        self.agent.status()
    }
}

impl telemetry::expose::Extra for Monitor {
    fn register(&self, r: &mut Registry) {
        let s = self.agent.status();
        r.register(
            "podnet_pod_probe_rtt_seconds",
            "Network round trips of the pod probes (UD SEND and its answer), the responder's time taken out, by this host's rail, the peer device and probe size",
            self.series.rtt.clone(),
        );
        r.register("podnet_pod_probes_sent", "Pod probes sent", self.series.sent.clone());
        r.register(
            "podnet_pod_probes_lost",
            "Pod probes unanswered within the probe timeout",
            self.series.lost.clone(),
        );
        let member: Family<Labels, Gauge> = Family::default();
        for m in &s.members {
            let up = i64::from(m.health != pod::member::Health::Down);
            member
                .get_or_create(&vec![
                    ("host".into(), m.host.clone()),
                    ("state".into(), format!("{:?}", m.health).to_lowercase()),
                ])
                .set(up);
        }
        r.register(
            "podnet_pod_member_up",
            "1 while a pod member is alive or suspected, 0 once declared down (SWIM), with its state",
            member,
        );
        let finding: Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
        for f in &s.findings {
            finding
                .get_or_create(&vec![
                    ("kind".into(), f.kind.clone()),
                    ("component".into(), f.component.clone()),
                    ("severity".into(), f.severity.clone()),
                ])
                .set(f.confidence);
        }
        r.register(
            "podnet_pod_finding",
            "A fault the pod's probes and membership point at, its value the confidence (0-1); gone when it clears",
            finding,
        );
        let paths: Family<Labels, Gauge> = Family::default();
        for (k, v) in [
            ("ok", s.paths.ok),
            ("lossy", s.paths.lossy),
            ("dead", s.paths.dead),
            ("large-lost", s.paths.large_lost),
        ] {
            paths.get_or_create(&vec![("state".into(), k.into())]).set(v as i64);
        }
        r.register(
            "podnet_pod_paths",
            "The pod's probed paths by state, from every host's report",
            paths,
        );
        r.register(
            "podnet_pod_local_health",
            "This host's local health multiplier: 0 while its monitoring loop runs on time",
            ConstGauge::new(i64::from(s.host_loop.local_health)),
        );
        r.register(
            "podnet_pod_events",
            "Membership and finding changes this host has seen",
            ConstCounter::new(s.events.len() as u64),
        );
        let bytes: Family<Labels, Gauge> = Family::default();
        for (k, v) in [
            ("small", s.cost.probe_bytes.0),
            ("large", s.cost.probe_bytes.1),
            ("membership", s.cost.control_bytes),
        ] {
            bytes.get_or_create(&vec![("kind".into(), k.into())]).set(v as i64);
        }
        r.register(
            "podnet_pod_authenticated",
            "1 when the pod's datagrams are authenticated with its shared secret, 0 when anyone who reaches the membership port can speak for a host",
            ConstGauge::new(i64::from(s.authenticated)),
        );
        let refused: Family<Labels, Gauge> = Family::default();
        let x = &s.refused;
        for (k, v) in [
            ("malformed", x.malformed),
            ("unauthenticated", x.unauthenticated),
            ("bad-tag", x.bad_tag),
            ("unknown-sender", x.unknown_sender),
            ("replayed", x.replayed),
            ("implausible", x.implausible),
        ] {
            refused.get_or_create(&vec![("why".into(), k.into())]).set(v as i64);
        }
        r.register(
            "podnet_pod_refused_datagrams",
            "Membership, gossip, probe and handshake datagrams this host refused since it started, by why",
            refused,
        );
        r.register(
            "podnet_pod_sent_bytes",
            "Bytes this host sent to watch the pod (frames: probes and answers, membership datagrams)",
            bytes,
        );
    }
}

/// `podnet pod status`.
pub(crate) fn status(args: &PodStatusArgs) -> anyhow::Result<ExitCode> {
    let t = crate::cmd::world::secs("--timeout", args.timeout)?;
    let body = match fetch(args.agent, "/pod", t) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("podnet pod status: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let v: serde_json::Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("podnet pod status: the agent at {} answered no pod status: {e}", args.agent);
            return Ok(ExitCode::from(2));
        }
    };
    let error =
        v["findings"].as_array().is_some_and(|f| f.iter().any(|x| x["severity"] == "error"));
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        print_status(&mut out, &v)?;
    }
    Ok(if error { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

fn print_status(out: &mut impl Write, v: &serde_json::Value) -> std::io::Result<()> {
    let s = |x: &serde_json::Value| x.as_str().unwrap_or("").to_string();
    let n = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let members = v["members"].as_array().cloned().unwrap_or_default();
    let down = members.iter().filter(|m| m["health"] == "down").count();
    writeln!(
        out,
        "pod as {} sees it: {} members, {} down; its loop woke late {}% of the time (worst {} ms)",
        s(&v["host"]),
        members.len(),
        down,
        n(&v["host_loop"]["late_pct"]),
        n(&v["host_loop"]["worst_lag_ms"])
    )?;
    let refused = &v["refused"];
    let refused_total: f64 =
        ["malformed", "unauthenticated", "bad_tag", "unknown_sender", "replayed", "implausible"]
            .iter()
            .map(|k| n(&refused[*k]))
            .sum();
    if v["authenticated"] == true {
        writeln!(
            out,
            "membership: authenticated (the pod's secret); {refused_total} datagrams refused"
        )?;
    } else {
        writeln!(
            out,
            "membership: NOT AUTHENTICATED — no shared secret: anyone who reaches the membership \
             port can speak for a host ({refused_total} datagrams refused)"
        )?;
    }
    if refused_total > 0.0 {
        writeln!(
            out,
            "  refused: {} unauthenticated, {} wrong tag, {} not from a plan host at its address, {} replayed, {} implausible, {} malformed",
            n(&refused["unauthenticated"]),
            n(&refused["bad_tag"]),
            n(&refused["unknown_sender"]),
            n(&refused["replayed"]),
            n(&refused["implausible"]),
            n(&refused["malformed"])
        )?;
    }
    writeln!(out, "\nMEMBERS")?;
    for m in &members {
        writeln!(
            out,
            "  {:<16} {:<9} for {:>7.1} s",
            s(&m["host"]),
            s(&m["health"]),
            n(&m["for_seconds"])
        )?;
    }
    let p = &v["paths"];
    writeln!(
        out,
        "\nPATHS  {} reported by {} hosts: {} ok, {} lossy, {} dead, {} losing near-MTU frames; median RTT {} µs",
        n(&p["paths"]),
        n(&p["reporting"]),
        n(&p["ok"]),
        n(&p["lossy"]),
        n(&p["dead"]),
        n(&p["large_lost"]),
        n(&p["rtt_p50_us"])
    )?;
    let findings = v["findings"].as_array().cloned().unwrap_or_default();
    writeln!(out, "\nFINDINGS")?;
    if findings.is_empty() && down == 0 {
        writeln!(out, "  none: every member alive, every probed path answering")?;
    } else if findings.is_empty() {
        writeln!(out, "  none yet, though {down} member(s) are down")?;
    }
    for f in &findings {
        writeln!(
            out,
            "  {:<7} {:<10} {}  (confidence {:.2})\n          {}",
            s(&f["severity"]),
            s(&f["kind"]),
            s(&f["component"]),
            n(&f["confidence"]),
            s(&f["evidence"])
        )?;
    }
    let bad: Vec<&serde_json::Value> = v["my_paths"]
        .as_array()
        .map(|a| a.iter().filter(|x| x["state"] != "ok").collect())
        .unwrap_or_default();
    if !bad.is_empty() {
        writeln!(out, "\nTHIS HOST'S FAILING PATHS")?;
        for x in bad {
            writeln!(
                out,
                "  {:<24} {:<10} lost {}/{} small, {}/{} near-MTU",
                s(&x["path"]),
                s(&x["state"]),
                n(&x["lost"]),
                n(&x["sent"]),
                n(&x["large_lost"]),
                n(&x["large_sent"])
            )?;
        }
    }
    let routes = v["routes"].as_object().cloned().unwrap_or_default();
    let route = |r: &serde_json::Value| match r["kind"].as_str() {
        Some("direct") => format!(
            "rail {} to its rail {}, UDP source port {}",
            r["rail"], r["peer_rail"], r["port"]
        ),
        Some("relay") => {
            format!("rail {} through the host of index {}, port {}", r["rail"], r["via"], r["port"])
        }
        _ => "none: unreachable".to_string(),
    };
    writeln!(out, "\nROUTES (pod channels)")?;
    for (peer, r) in &routes {
        writeln!(out, "  {peer:<16} {}", route(r))?;
    }
    let moved = v["route_events"].as_array().cloned().unwrap_or_default();
    for e in moved.iter().rev().take(5).rev() {
        writeln!(out, "  changed: {} -> {} ({})", s(&e["peer"]), route(&e["to"]), s(&e["why"]))?;
    }
    let events = v["events"].as_array().cloned().unwrap_or_default();
    if !events.is_empty() {
        writeln!(out, "\nEVENTS (last {})", events.len().min(10))?;
        for e in events.iter().rev().take(10).rev() {
            writeln!(
                out,
                "  {:>8.2} s  {:<15} {}",
                n(&e["at_seconds"]),
                s(&e["kind"]),
                s(&e["text"])
            )?;
        }
    }
    Ok(())
}

/// GET `path` from the agent at `addr`: the body of a 200 answer.
fn fetch(addr: std::net::SocketAddr, path: &str, t: Duration) -> anyhow::Result<String> {
    let mut c = TcpStream::connect_timeout(&addr, t)
        .with_context(|| format!("no agent at {addr} (podnet agent --pod PLAN)"))?;
    c.set_read_timeout(Some(t))?;
    c.set_write_timeout(Some(t))?;
    write!(c, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).with_context(|| format!("the agent at {addr} did not answer"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or("");
    if !status.contains(" 200 ") {
        bail!("the agent at {addr} answered {status:?} for {path}: {}", body.trim());
    }
    Ok(body.to_string())
}

/// `podnet pod shape`: a shape drawn from a seed, as text, JSON, emupod.sh's arguments or a
/// qualify plan.
pub(crate) fn shape(args: &crate::cli::PodShapeArgs) -> anyhow::Result<ExitCode> {
    let shape = match args.uplink {
        Some(u) => topology::Shape::draw_with(args.seed, u),
        None => topology::Shape::draw(args.seed),
    };
    let mut out = std::io::stdout().lock();
    if args.emupod {
        writeln!(out, "{}", shape.emupod_args().join(" "))?;
    } else if args.plan {
        write!(out, "{}", qualify::plan::for_shape(&shape, args.route.as_deref()))?;
    } else if args.json {
        let mut v = serde_json::to_value(&shape)?;
        v["hosts"] = shape.hosts().into();
        v["spine_link_mbit"] = shape.spine_link_mbit().into();
        v["roce_mtu"] = shape.roce_mtu().into();
        v["emupod"] = shape.emupod_args().into();
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(
            out,
            "seed {}: {} racks x {} hosts per ToR ({} hosts), {} rail(s), {} spines\n\
             uplinks {} ({} Mbit/s to each spine), host links {} Mbit/s, MTU {} (RoCE {}), \
             ECMP hash seed {}\nscripts/emupod.sh up NAME {}",
            shape.seed,
            shape.racks,
            shape.hosts_per_tor,
            shape.hosts(),
            shape.rails,
            shape.spines,
            shape.uplink.as_str(),
            shape.spine_link_mbit(),
            shape.host_mbit,
            shape.mtu,
            shape.roce_mtu(),
            shape.ecmp_seed as u32,
            shape.emupod_args().join(" ")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
