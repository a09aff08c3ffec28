//! A fault campaign's driver (issue 44): one draw — a shape and its faults — built by
//! `scripts/emupod.sh`, judged by `podnet qualify` or by `podnet agent --pod`, scored by
//! `topology::score`, with the emulator's own health beside it. The campaign
//! (`benches/campaign.sh`, `cargo bench -p podnet --bench campaign`) runs many; the CI test
//! (tests/integration/campaign.rs) a few.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use topology::fault::{Fault, Kind, Place, Scenario};
use topology::score::{self, Said, Severity, Tool};
use topology::{Component, Shape, Uplink};

/// Where the programs are, and the pod's name.
pub(crate) struct Env {
    /// The podnet binary.
    pub(crate) podnet: PathBuf,
    /// scripts/emupod.sh.
    pub(crate) emupod: PathBuf,
    /// The pod's name (1-8 of [a-z0-9]).
    pub(crate) name: String,
    /// Where plans and reports go.
    pub(crate) dir: PathBuf,
}

/// One draw of a campaign.
#[derive(Debug, Clone)]
pub(crate) struct Draw {
    /// Its id in the campaign's rows (`qualify/1:1/loss/3`).
    pub(crate) id: String,
    /// The tool it judges.
    pub(crate) tool: Tool,
    /// The pod.
    pub(crate) shape: Shape,
    /// The kind drawn (none: a clean pod).
    pub(crate) kind: Option<Kind>,
    /// What goes wrong.
    pub(crate) faults: Vec<Fault>,
    /// A clean pod under load: a burn-in's all-to-all saturates every host's link while the
    /// agents watch (congestion is not a fault).
    pub(crate) load: bool,
}

impl Draw {
    /// The same pod, clean, under a burn-in's load (`agent/1:1/clean-load/0`).
    pub(crate) fn loaded(self) -> Draw {
        Draw { id: self.id.replace("/clean/", "/clean-load/"), faults: vec![], load: true, ..self }
    }
}

/// The largest pod a draw builds on 2 cores: hosts × rails.
pub(crate) const MAX_DEVICES: usize = 12;

/// The seed of the draw `id` (`agent/1:1/flap/0`) of a campaign seeded `seed`: its own,
/// from the two alone (FNV-1a over the id), so that a draw is the same whatever else the
/// flags ask — a miss run again with `--only`, or a campaign resumed with more kinds.
pub(crate) fn draw_seed(seed: u64, id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The draws of a stratified campaign: for each uplink class and each kind (and clean),
/// `per_cell` draws, each its own shape (drawn until it has at most [`MAX_DEVICES`]
/// devices and host links of at most `max_mbit`) and fault, from `seed` and the draw's id.
pub(crate) fn cells(
    seed: u64,
    tool: Tool,
    uplinks: &[Uplink],
    kinds: &[Option<Kind>],
    per_cell: usize,
    max_mbit: u32,
) -> Vec<Draw> {
    let mut out = Vec::new();
    for &u in uplinks {
        for &kind in kinds {
            for k in 0..per_cell {
                let t = if tool == Tool::Qualify { "qualify" } else { "agent" };
                let what = kind.map_or("clean", Kind::as_str);
                let id = format!("{t}/{}/{what}/{k}", u.as_str());
                // A shape small enough for 2 cores, drawn on from the draw's seed.
                let base = draw_seed(seed, &id);
                let mut n = 0u64;
                let shape = loop {
                    n += 1;
                    let s = Shape::draw_with(base.wrapping_mul(1_000_003).wrapping_add(n), u);
                    if s.hosts() * s.rails <= MAX_DEVICES && s.host_mbit <= max_mbit {
                        break s;
                    }
                };
                let faults = match kind {
                    Some(kind) => Scenario::draw(shape.seed, &shape, kind).faults,
                    None => vec![],
                };
                out.push(Draw { id, tool, shape, kind, faults, load: false });
            }
        }
    }
    out
}

impl Env {
    /// An agent draw's folder, its plan and the pod's secret (written).
    fn agent_files(&self, d: &Draw) -> Result<(PathBuf, PathBuf, PathBuf), String> {
        let dir = self.prepare(d)?;
        let secret = dir.join("secret");
        std::fs::write(&secret, "a campaign's pod secret, 32 bytes or more of it\n")
            .map_err(|e| format!("{}: {e}", secret.display()))?;
        Ok((dir.clone(), dir.join("pod.toml"), secret))
    }

    fn emupod(&self, args: &[&str]) -> Output {
        Command::new("bash").arg(&self.emupod).args(args).output().expect("bash runs")
    }

    /// `scripts/emupod.sh` with `NAME` replaced by the pod's name; its error, if it failed.
    fn emu(&self, args: &[String]) -> Result<(), String> {
        emu(&self.emupod, &self.name, args)
    }

    /// The pod of `d` built, a fresh folder for the draw with its qualify plan in it
    /// (`pod.toml`): the folder.
    fn prepare(&self, d: &Draw) -> Result<PathBuf, String> {
        self.up(&d.shape)?;
        let dir = self.dir.join(d.id.replace('/', "_"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let route = format!("{} route {}", self.emupod.display(), self.name);
        std::fs::write(dir.join("pod.toml"), qualify::plan::for_shape(&d.shape, Some(&route)))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(dir)
    }

    fn up(&self, shape: &Shape) -> Result<(), String> {
        let _ = self.emupod(&["down", &self.name]);
        let mut a = vec!["up".to_string(), self.name.clone()];
        a.extend(shape.emupod_args());
        self.emu(&a)
    }

    fn down(&self) {
        let _ = self.emupod(&["down", &self.name]);
    }

    /// Runs `args` in host `h` of the pod.
    fn on(&self, h: usize, args: &[&str]) -> Command {
        let mut c = Command::new("bash");
        c.arg(&self.emupod).args(["exec", &self.name, &h.to_string()]).args(args);
        c
    }

    /// Every fault of `faults` that starts at 0 made now; the others on a thread, each at
    /// its time.
    fn inject(
        &self,
        shape: &Shape,
        faults: &[Fault],
    ) -> Result<Option<std::thread::JoinHandle<()>>, String> {
        for f in faults.iter().filter(|f| f.start_s <= 0.0) {
            for c in f.inject(shape) {
                self.emu(&c)?;
            }
        }
        let later: Vec<Fault> = faults.iter().filter(|f| f.start_s > 0.0).cloned().collect();
        if later.is_empty() {
            return Ok(None);
        }
        let (emupod, name, shape) = (self.emupod.clone(), self.name.clone(), shape.clone());
        Ok(Some(std::thread::spawn(move || {
            let t0 = Instant::now();
            for f in later {
                std::thread::sleep(Duration::from_secs_f64(f.start_s).saturating_sub(t0.elapsed()));
                for c in f.inject(&shape) {
                    let _ = emu(&emupod, &name, &c);
                }
            }
        })))
    }
}

/// `emupod` with `NAME` in `args` replaced by `name`; its error, if it failed.
fn emu(emupod: &Path, name: &str, args: &[String]) -> Result<(), String> {
    let args: Vec<&str> =
        args.iter().map(|a| if a == "NAME" { name } else { a.as_str() }).collect();
    let o = Command::new("bash").arg(emupod).args(&args).output().map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!("emupod.sh {args:?}: {}", String::from_utf8_lossy(&o.stderr).trim()))
    }
}

/// The emulator's health over a draw: CPU idle (of every core) and packets its links'
/// queues dropped.
pub(crate) struct Health {
    idle0: (u64, u64),
    hosts0: (u64, u64),
}

/// Clock ticks a second of `/proc/<pid>/stat`'s times (`getconf CLK_TCK`: 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// The CPU time (user and system, in clock ticks) process `pid` has used; `None` once it is
/// gone.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name (in parentheses, which may hold spaces): state is field 3,
    // utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

impl Health {
    /// (idle, total) jiffies of `/proc/stat`'s line `which` (`cpu`: every CPU).
    fn cpu_of(which: &str) -> (u64, u64) {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let v: Vec<u64> = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(which))
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        (idle, v.iter().sum())
    }

    fn cpu() -> (u64, u64) {
        Health::cpu_of("cpu")
    }

    /// The CPU scripts/emupod.sh puts every host on (EMUPOD_CPU, default the last).
    fn hosts_cpu() -> (u64, u64) {
        let last = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
        let n = std::env::var("EMUPOD_CPU").ok().and_then(|c| c.parse().ok()).unwrap_or(last);
        Health::cpu_of(&format!("cpu{n}"))
    }

    pub(crate) fn start() -> Health {
        Health { idle0: Health::cpu(), hosts0: Health::hosts_cpu() }
    }

    /// The idle percent since the start of the CPU the emulated hosts run on.
    pub(crate) fn hosts_idle(&self) -> f64 {
        let (i, t) = Health::hosts_cpu();
        100.0 * i.saturating_sub(self.hosts0.0) as f64
            / t.saturating_sub(self.hosts0.1).max(1) as f64
    }

    /// (CPU idle percent since the start, qdisc drops in the pod's namespaces now).
    pub(crate) fn now(&self, name: &str) -> (f64, u64) {
        let (i, t) = Health::cpu();
        let idle = 100.0 * (i - self.idle0.0) as f64 / (t - self.idle0.1).max(1) as f64;
        let mut drops = 0;
        let ns = std::fs::read_dir("/run/netns")
            .map(|d| d.flatten().collect::<Vec<_>>())
            .unwrap_or_default();
        for e in ns {
            let n = e.file_name().to_string_lossy().to_string();
            if !n.starts_with(&format!("{name}-")) {
                continue;
            }
            let o = Command::new("ip").args(["-n", &n, "-s", "qdisc", "show"]).output();
            let text =
                o.map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default();
            for w in text.split(", ") {
                if let Some(d) = w.trim().strip_prefix("dropped ") {
                    drops += d
                        .split_whitespace()
                        .next()
                        .and_then(|x| x.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
        (idle, drops)
    }
}

/// A draw in which the emulator's CPUs were this idle or less is invalid (the emulator, not
/// the fabric, set the figures).
pub(crate) const MIN_IDLE_PCT: f64 = 5.0;

/// A finding or suspect as JSON says it: kind, severity, component.
fn said_of(v: &Value, default_severity: Severity) -> Option<Said> {
    let severity = match v["severity"].as_str() {
        Some("error") => Severity::Error,
        Some("warning") => Severity::Warning,
        Some(_) => Severity::Info,
        None => default_severity,
    };
    let at: Component = serde_json::from_value(v["at"].clone()).ok()?;
    Some(Said { kind: v["kind"].as_str()?.to_string(), severity, at })
}

fn faults_json(shape: &Shape, faults: &[Fault]) -> Value {
    faults
        .iter()
        .map(|f| {
            json!({
                "fault": f,
                "what": f.describe(shape),
                "must": score::need(f.kind),
                "right_answer": score::component(shape, &f.at).name(&shape.pod()),
            })
        })
        .collect()
}

/// A draw's row: what it was, `extra`, and the seconds since `t0`.
fn row_of(d: &Draw, tool: &str, t0: Instant, extra: Value) -> Value {
    let kind = if d.load { Some("clean-load") } else { d.kind.map(Kind::as_str) };
    let mut r = json!({
        "id": d.id, "tool": tool, "shape": d.shape, "kind": kind,
        "faults": faults_json(&d.shape, &d.faults),
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        r[k] = v.clone();
    }
    r["seconds"] = json!(t0.elapsed().as_secs_f64());
    r
}

/// Runs `podnet qualify` across the pod of `d` with its faults made: its row.
pub(crate) fn qualify(env: &Env, d: &Draw) -> Value {
    let t0 = Instant::now();
    let row = |extra: Value| row_of(d, "qualify", t0, extra);
    let dir = match env.prepare(d) {
        Ok(dir) => dir,
        Err(e) => return row(json!({ "valid": false, "error": e })),
    };
    let plan = dir.join("pod.toml");
    let hosts = dir.join("hosts");
    let _ = std::fs::write(&hosts, env.emupod(&["hostfile", &env.name]).stdout);
    let health = Health::start();
    // A host killed "before the run" has nothing to kill yet: it is killed 3 s in, once
    // its rank runs.
    let faults: Vec<Fault> = d
        .faults
        .iter()
        .map(|f| match f.kind {
            Kind::HostKilled if f.start_s <= 0.0 => f.clone().starting(3.0),
            _ => f.clone(),
        })
        .collect();
    let later = match env.inject(&d.shape, &faults) {
        Ok(l) => l,
        Err(e) => {
            env.down();
            return row(json!({ "valid": false, "error": e }));
        }
    };
    let p = env.podnet.to_string_lossy().to_string();
    let n = d.shape.hosts();
    let out_of = |h: usize| dir.join(format!("out{h}"));
    let children: Vec<(usize, Child)> = (0..n)
        .rev()
        .filter_map(|h| {
            let out = std::fs::File::create(out_of(h)).ok()?;
            let err = out.try_clone().ok()?;
            env.on(h, &[&p, "qualify", "--plan"])
                .arg(&plan)
                .arg("--report-dir")
                .arg(dir.join("report"))
                .args(["--join-timeout", "30", "--hostfile"])
                .arg(&hosts)
                .stdout(out)
                .stderr(err)
                .spawn()
                .ok()
                .map(|c| (h, c))
        })
        .collect();
    let (exit, left) = wait_ranks(children);
    let out0 = std::fs::read_to_string(out_of(0)).unwrap_or_default();
    if let Some(t) = later {
        let _ = t.join();
    }
    let (idle, drops) = health.now(&env.name);
    let hosts_idle = health.hosts_idle();
    env.down();
    for mut c in left {
        let _ = c.wait();
    }
    let report: Value = std::fs::read_to_string(dir.join("report/report.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let said: Vec<Said> = report["suspects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| said_of(s, Severity::Error))
        .collect();
    let verdict = score::judge(&d.shape, &d.faults, Tool::Qualify, &said);
    let failed = report["summary"]["failed"].as_u64();
    let clean_ok = d.faults.is_empty() && failed == Some(0) && exit == Some(0);
    row(json!({
        "valid": idle > MIN_IDLE_PCT,
        "emulator": { "cpu_idle_pct": idle, "hosts_cpu_idle_pct": hosts_idle, "qdisc_drops": drops },
        "qualify": {
            "exit": exit,
            "failed_checks": failed,
            "contention": report["contention"].as_array().map_or(0, Vec::len),
            "suspects": report["suspects"].as_array().into_iter().flatten()
                .map(|s| json!({"kind": s["kind"], "component": s["component"]})).collect::<Vec<_>>(),
            "evidence": report["suspects"].as_array().into_iter().flatten()
                .map(|s| s["evidence"].as_str().unwrap_or("").chars().take(400).collect::<String>())
                .collect::<Vec<_>>(),
            "failed": report["checks"].as_array().into_iter().flatten()
                .filter(|c| c["status"] == "fail").take(40)
                .map(|c| format!("{} {}", c["name"].as_str().unwrap_or(""), c["measured"]))
                .collect::<Vec<_>>(),
            "output_tail": if report.is_null() { tail(&out0, 600) } else { String::new() },
        },
        "named": verdict.named,
        "rank": verdict.rank,
        "extra": verdict.extra,
        "right": if d.faults.is_empty() { clean_ok } else { verdict.right() },
        "explained_all": verdict.extra.is_empty(),
    }))
}

/// How long an agent draw watches: the pod settling, the fault, the heal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watch {
    /// At most this long for every agent to see every member alive and no finding.
    pub(crate) settle: Duration,
    /// With the fault made (a clean draw: the whole watch).
    pub(crate) fault: Duration,
    /// After the heal.
    pub(crate) after: Duration,
    /// Between two looks at the observer's `pod status`.
    pub(crate) every: Duration,
}

/// A host no fault of `faults` is on (the observer whose `pod status` the draw reads).
fn observer(shape: &Shape, faults: &[Fault]) -> usize {
    (0..shape.hosts())
        .rev()
        .find(|h| {
            !faults.iter().any(|f| match &f.at {
                Place::Host(x) => x == h,
                Place::Cable(dv) => dv.host == *h && shape.rails == 1,
                _ => false,
            })
        })
        .unwrap_or(0)
}

/// A clean pod under load: `podnet burnin --resilient` on every host — the all-to-all
/// over the pod's channels as fast as they go, the pod agent inside each burn-in watching
/// for `w.fault` — and every finding any host's agent raised meanwhile (each one a false
/// alarm: congestion is not a fault): its row.
pub(crate) fn agent_loaded(env: &Env, d: &Draw, w: Watch) -> Value {
    let t0 = Instant::now();
    let row = |extra: Value| row_of(d, "agent", t0, extra);
    let (dir, plan, secret) = match env.agent_files(d) {
        Ok(f) => f,
        Err(e) => return row(json!({ "valid": false, "error": e })),
    };
    let p = env.podnet.to_string_lossy().to_string();
    let pod = d.shape.pod();
    let out_of = |h: usize| dir.join(format!("burnin{h}"));
    let health = Health::start();
    let children: Vec<(usize, Child)> = (0..d.shape.hosts())
        .filter_map(|h| {
            let out = std::fs::File::create(out_of(h)).ok()?;
            let err = std::fs::File::create(out_of(h).with_extension("err")).ok()?;
            env.on(h, &[&p, "burnin", "--resilient", "--pod"])
                .arg(&plan)
                .args(["--pod-host", &pod.hosts[h].name, "--secret-file"])
                .arg(&secret)
                .args(["--probe-large", &d.shape.roce_mtu().to_string()])
                .args(["--duration", &w.fault.as_secs().to_string(), "--rate-mbit", "0"])
                .args(["--join-timeout", "30", "--json"])
                .stdout(out)
                .stderr(err)
                .spawn()
                .ok()
                .map(|c| (h, c))
        })
        .collect();
    let (_, left) = wait_ranks(children);
    let (idle, drops) = health.now(&env.name);
    let hosts_idle = health.hosts_idle();
    env.down();
    for mut c in left {
        let _ = c.wait();
    }
    let reports: Vec<Value> = (0..d.shape.hosts())
        .map(|h| {
            let text = std::fs::read_to_string(out_of(h)).unwrap_or_default();
            serde_json::from_str(text.trim()).unwrap_or(Value::Null)
        })
        .collect();
    let alarms: Vec<Value> = reports
        .iter()
        .flat_map(|r| {
            let host = r["host"].clone();
            r["finding_events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e["kind"] == "finding")
                .map(move |e| json!({"host": host, "at_s": e["at_seconds"], "what": e["text"]}))
        })
        .collect();
    let received: u64 = reports
        .iter()
        .flat_map(|r| r["peers"].as_array().cloned().unwrap_or_default())
        .filter_map(|x| x["received"].as_u64())
        .sum();
    let seconds = reports.iter().filter_map(|r| r["seconds"].as_f64()).fold(0.0, f64::max);
    let all = reports.iter().all(|r| !r.is_null());
    row(json!({
        // The load is the condition measured: where it kept the hosts' CPU busy, the hosts'
        // CPU, not the fabric, delayed the probes.
        "valid": idle > MIN_IDLE_PCT && hosts_idle > MIN_IDLE_PCT && all,
        "emulator": { "cpu_idle_pct": idle, "hosts_cpu_idle_pct": hosts_idle, "qdisc_drops": drops },
        "load": {
            "hosts_reporting": reports.iter().filter(|r| !r.is_null()).count(),
            "every_message_once": reports.iter().all(|r| r["ok"] == true),
            "messages_received": received,
            "seconds": seconds,
            "rank0_error_tail": tail(&std::fs::read_to_string(out_of(0).with_extension("err")).unwrap_or_default(), 400),
        },
        "timelines": [],
        "named": [],
        "extra": alarms,
        "right": all && alarms.is_empty(),
        "explained_all": alarms.is_empty(),
    }))
}

/// Runs an agent on every host of the pod of `d`, makes its faults once the pod settled,
/// heals them after `w.fault`, and times what an observer's `pod status` says: its row.
pub(crate) fn agent(env: &Env, d: &Draw, w: Watch) -> Value {
    let t0 = Instant::now();
    let row = |extra: Value| row_of(d, "agent", t0, extra);
    let (dir, plan, secret) = match env.agent_files(d) {
        Ok(f) => f,
        Err(e) => return row(json!({ "valid": false, "error": e })),
    };
    let p = env.podnet.to_string_lossy().to_string();
    let pod = d.shape.pod();
    // CAMPAIGN_KEEP_STATUS=1: every status the observer gave, and the agents' stderr, in the
    // draw's folder (a miss read back; some MB a draw).
    let keep = std::env::var_os("CAMPAIGN_KEEP_STATUS").is_some_and(|v| v == "1");
    let err = |h: usize| {
        keep.then(|| std::fs::File::create(dir.join(format!("agent{h}.err"))).ok())
            .flatten()
            .map_or_else(Stdio::null, Stdio::from)
    };
    let mut agents: Vec<Child> = (0..d.shape.hosts())
        .filter_map(|h| {
            env.on(h, &[&p, "agent", "--pod"])
                .arg(&plan)
                .args(["--pod-host", &pod.hosts[h].name, "--secret-file"])
                .arg(&secret)
                .args(["--probe-large", &d.shape.roce_mtu().to_string()])
                .stdout(Stdio::null())
                .stderr(err(h))
                .spawn()
                .ok()
        })
        .collect();
    let obs = observer(&d.shape, &d.faults);
    let kept = std::cell::RefCell::new(Vec::<u8>::new());
    let status = || -> Option<Value> {
        let o = Command::new("ip")
            .args(["netns", "exec", &format!("{}-h{obs}", env.name), &p])
            .args(["pod", "status", "--json", "--timeout", "2"])
            .output()
            .ok()?;
        let v: Value = serde_json::from_slice(&o.stdout).ok()?;
        if keep {
            let mut k = kept.borrow_mut();
            let _ = serde_json::to_writer(&mut *k, &v);
            k.push(b'\n');
        }
        Some(v)
    };
    let findings = |v: &Value| -> Vec<Said> {
        v["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|f| said_of(f, Severity::Error))
            .collect()
    };
    // Settle: every member alive, no finding.
    let ts = Instant::now();
    let mut settled = None;
    while ts.elapsed() < w.settle {
        if let Some(v) = status() {
            let alive = v["members"].as_array().is_some_and(|m| {
                m.len() == d.shape.hosts() && m.iter().all(|x| x["health"] == "alive")
            });
            if alive && findings(&v).is_empty() {
                settled = Some(ts.elapsed().as_secs_f64());
                break;
            }
        }
        std::thread::sleep(w.every);
    }
    let health = Health::start();
    let start = Instant::now();
    let cpu0: Vec<Option<u64>> = agents.iter().map(|a| cpu_ticks(a.id())).collect();
    let mut snaps: Vec<(f64, Vec<Said>)> = Vec::new();
    let mut shown: Vec<Value> = Vec::new();
    let mut look = |snaps: &mut Vec<(f64, Vec<Said>)>| {
        let t = start.elapsed().as_secs_f64();
        if let Some(v) = status() {
            for f in v["findings"].as_array().into_iter().flatten() {
                let key = json!({"kind": f["kind"], "component": f["component"], "severity": f["severity"]});
                if !shown.contains(&key) {
                    shown.push(key);
                }
            }
            snaps.push((t, findings(&v)));
        }
    };
    let injected = env.inject(&d.shape, &d.faults);
    let later = match injected {
        Ok(l) => l,
        Err(e) => {
            for a in &mut agents {
                let _ = a.kill();
            }
            env.down();
            return row(json!({ "valid": false, "error": e }));
        }
    };
    while start.elapsed() < w.fault {
        look(&mut snaps);
        std::thread::sleep(w.every);
    }
    if let Some(t) = later {
        let _ = t.join();
    }
    let heal_at = start.elapsed().as_secs_f64();
    let mut heal_err = None;
    for f in &d.faults {
        for c in f.heal(&d.shape) {
            if let Err(e) = env.emu(&c) {
                heal_err = Some(e);
            }
        }
    }
    let healable = !d.faults.iter().any(|f| f.kind == Kind::HostKilled);
    while healable
        && !d.faults.is_empty()
        && start.elapsed().as_secs_f64() < heal_at + w.after.as_secs_f64()
    {
        look(&mut snaps);
        std::thread::sleep(w.every);
    }
    let (idle, drops) = health.now(&env.name);
    let hosts_idle = health.hosts_idle();
    if keep {
        let _ = std::fs::write(dir.join("status.jsonl"), kept.take());
    }
    // Each agent's CPU over the watch, percent of a core (its process: membership, probes,
    // reports, location, its HTTP endpoint).
    let wall = start.elapsed().as_secs_f64();
    let agent_cpu: Vec<Option<f64>> = agents
        .iter()
        .zip(&cpu0)
        .map(|(a, t0)| {
            let ticks = cpu_ticks(a.id())?.checked_sub((*t0)?)?;
            Some((1000.0 * ticks as f64 / TICKS_PER_S / wall).round() / 10.0)
        })
        .collect();
    for a in &mut agents {
        let _ = a.kill();
    }
    // Down first: it thaws and kills what a freeze kept alive; then reap.
    env.down();
    for a in &mut agents {
        let _ = a.wait();
    }
    let times: Vec<Value> = d
        .faults
        .iter()
        .map(|f| {
            let tl = score::timeline(&d.shape, f, f.start_s, healable.then_some(heal_at), &snaps);
            json!({ "must": score::need(f.kind).agent, "timeline": tl })
        })
        .collect();
    // Extras: findings at any look during the fault that no fault explains (a clean draw:
    // every finding of warning or error).
    let mut extra: Vec<Said> = Vec::new();
    for (t, s) in &snaps {
        if *t >= heal_at {
            continue;
        }
        for x in score::judge(&d.shape, &d.faults, Tool::Agent, s).extra {
            if !extra.contains(&x) {
                extra.push(x);
            }
        }
    }
    // What the observer said, each time it changed (the timeline's flickers, read back).
    let mut changes: Vec<Value> = Vec::new();
    let mut last: Option<&Vec<Said>> = None;
    for (t, s) in &snaps {
        if last != Some(s) {
            changes.push(json!({ "t": (t * 10.0).round() / 10.0, "said": s }));
            last = Some(s);
        }
    }
    let named: Vec<Option<bool>> = d
        .faults
        .iter()
        .zip(&times)
        .map(|(f, t)| score::need(f.kind).agent.then(|| !t["timeline"]["named_after"].is_null()))
        .collect();
    let right = if d.faults.is_empty() {
        extra.is_empty()
    } else {
        named.iter().all(|n| n.unwrap_or(true))
    };
    row(json!({
        "valid": idle > MIN_IDLE_PCT && settled.is_some(),
        "settled_after": settled,
        "observer": pod.hosts[obs].name,
        "emulator": { "cpu_idle_pct": idle, "hosts_cpu_idle_pct": hosts_idle, "qdisc_drops": drops },
        "agent_cpu_pct": agent_cpu,
        "heal_at": heal_at,
        "heal_error": heal_err,
        "timelines": times,
        "named": named,
        "extra": extra,
        "shown": shown,
        "changes": changes,
        "right": right,
        "explained_all": extra.is_empty(),
    }))
}

/// Waits for the ranks: until rank 0 ends (then the others have 10 s to follow it out),
/// or every other rank ended 60 s ago (rank 0's host frozen or cut off: it writes no
/// report), or 10 minutes. Rank 0's exit status, and the ranks still running — killed,
/// unreaped (a frozen process dies only once thawed: reap them once the pod is down).
fn wait_ranks(children: Vec<(usize, Child)>) -> (Option<i32>, Vec<Child>) {
    let t0 = Instant::now();
    let mut running: Vec<(usize, Child)> = children;
    let mut exit = None;
    let mut zero_done: Option<Instant> = None;
    let mut others_done: Option<Instant> = None;
    loop {
        running.retain_mut(|(h, c)| match c.try_wait() {
            Ok(Some(st)) => {
                if *h == 0 {
                    exit = st.code();
                    zero_done = Some(Instant::now());
                }
                false
            }
            Ok(None) => true,
            Err(_) => false,
        });
        if running.iter().all(|(h, _)| *h == 0) && others_done.is_none() {
            others_done = Some(Instant::now());
        }
        let over = running.is_empty()
            || zero_done.is_some_and(|t| t.elapsed() > Duration::from_secs(10))
            || others_done.is_some_and(|t| t.elapsed() > Duration::from_secs(60))
            || t0.elapsed() > Duration::from_secs(600);
        if over {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = running
        .into_iter()
        .map(|(_, mut c)| {
            let _ = c.kill();
            c
        })
        .collect();
    (exit, left)
}

fn tail(s: &str, n: usize) -> String {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len()).find(|i| s.is_char_boundary(*i)).unwrap_or(s.len());
    s[start..].to_string()
}

/// The rows of `path` (one JSON object a line), skipping lines that do not parse (a run
/// cut off mid-line).
pub(crate) fn rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
