//! Sampling with a deadline: what the agent scrapes with.
//!
//! Reads are bounded in size ([`crate::sample`]), but nothing bounds how long a sysfs read
//! stalled in firmware (or a `dcb` that never answers) takes. So every source — an RDMA
//! device with its ports, a netdev — is read by a reader thread, and a scrape waits for them
//! until a deadline:
//! - a source that answered in time is served fresh;
//! - one that did not is served from its last good sample, and named in the snapshot's
//!   errors (`source = "stalled"`) and [`Snapshot::stale`] with how old that sample is;
//! - a source whose reader is still at work is not read again: at most one reader is ever
//!   stuck per source, however many scrapes come, and it is read afresh once that reader
//!   returns.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::sample::{self, NetdevSample, PortSample, Roots, Snapshot, SourceError, Stale};

/// Readers a scrape starts at most (a host with many ports has thousands of counter files).
const READERS: usize = 8;

/// One source: what one reader reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Source {
    Device(String),
    Netdev(String),
}

impl Source {
    fn kind(&self) -> &'static str {
        match self {
            Source::Device(_) => "device",
            Source::Netdev(_) => "netdev",
        }
    }

    fn name(&self) -> &str {
        match self {
            Source::Device(n) | Source::Netdev(n) => n,
        }
    }

    fn path(&self) -> String {
        match self {
            Source::Device(n) => format!("class/infiniband/{n}"),
            Source::Netdev(n) => format!("class/net/{n}"),
        }
    }

    fn read(&self, roots: &Roots) -> Part {
        match self {
            Source::Device(d) => {
                let (ports, errors) = sample::read_device(roots, d);
                Part::Device(ports, errors)
            }
            Source::Netdev(n) => {
                let (s, errors) = sample::read_netdev(roots, n);
                Part::Netdev(Box::new(s), errors)
            }
        }
    }
}

/// What a reader brought back.
#[derive(Debug, Clone)]
enum Part {
    Device(Vec<PortSample>, Vec<SourceError>),
    Netdev(Box<NetdevSample>, Vec<SourceError>),
}

#[derive(Default)]
struct Shared {
    /// Sources a reader is at work on, since when.
    busy: HashMap<Source, Instant>,
    /// Each source's latest answer, and when it came.
    last: HashMap<Source, (Instant, Part)>,
}

/// Samples a host with a deadline per scrape (see the module).
pub struct Sampler {
    roots: Arc<Roots>,
    deadline: Duration,
    shared: Arc<Mutex<Shared>>,
    /// One scrape at a time: a second waits for the first (each is bounded by the deadline),
    /// so a source a concurrent scrape is reading is never mistaken for a stuck one.
    turn: Mutex<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Sampler {
    /// A sampler of `roots` whose scrapes wait at most `deadline` for each stage (the RDMA
    /// devices, then the netdevs under them).
    pub fn new(roots: Roots, deadline: Duration) -> Sampler {
        Sampler { roots: Arc::new(roots), deadline, shared: Arc::default(), turn: Mutex::new(()) }
    }

    /// How many sources have a reader at work now (stuck ones included).
    pub fn readers_at_work(&self) -> usize {
        lock(&self.shared).busy.len()
    }

    /// One scrape: every source that answers within the deadline, the last good sample of
    /// each that did not.
    pub fn collect(&self) -> Snapshot {
        let _turn = lock(&self.turn);
        let mut snap = Snapshot::default();
        let devices: Vec<Source> = sample::list_devices(&self.roots, &mut snap.errors)
            .into_iter()
            .map(Source::Device)
            .collect();
        for part in self.gather(&devices, &mut snap) {
            if let Part::Device(ports, errors) = part {
                snap.ports.extend(ports);
                snap.errors.extend(errors);
            }
        }
        snap.ports.sort_by(|a, b| (&a.device, a.info.port).cmp(&(&b.device, b.info.port)));
        let netdevs: Vec<Source> =
            sample::netdevs_of(&snap.ports).into_iter().map(Source::Netdev).collect();
        for part in self.gather(&netdevs, &mut snap) {
            if let Part::Netdev(s, errors) = part {
                snap.errors.extend(errors);
                snap.netdevs.insert(s.name.clone(), *s);
            }
        }
        let mut shared = lock(&self.shared);
        // Forget what is gone (a device removed, a netdev renamed).
        shared.last.retain(|s, _| devices.contains(s) || netdevs.contains(s));
        snap
    }

    /// Reads `sources` with readers, waits until the deadline, and returns a part for each
    /// source that answered or answered before; what is late is named in `snap`.
    fn gather(&self, sources: &[Source], snap: &mut Snapshot) -> Vec<Part> {
        let start = Instant::now();
        let end = start + self.deadline;
        // The sources no reader is at work on.
        let mut todo = VecDeque::new();
        {
            let mut shared = lock(&self.shared);
            for s in sources {
                if !shared.busy.contains_key(s) {
                    shared.busy.insert(s.clone(), start);
                    todo.push_back(s.clone());
                }
            }
        }
        let wanted = todo.len();
        let queue = Arc::new(Mutex::new(todo));
        let (tx, rx) = mpsc::channel::<Source>();
        for i in 0..wanted.min(READERS) {
            let (roots, shared, queue, tx) =
                (self.roots.clone(), self.shared.clone(), queue.clone(), tx.clone());
            let started = std::thread::Builder::new()
                .name(format!("reader-{i}"))
                .spawn(move || reader(&roots, &shared, &queue, &tx));
            if started.is_err() {
                break;
            }
        }
        drop(tx);
        let mut answered = 0;
        while answered < wanted {
            match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(_) => answered += 1,
                Err(_) => break,
            }
        }
        let mut shared = lock(&self.shared);
        // What no reader took (every reader stuck, or none started) is not at work.
        for s in lock(&queue).drain(..) {
            shared.busy.remove(&s);
        }
        let now = Instant::now();
        let mut parts = Vec::with_capacity(sources.len());
        for s in sources {
            let last = shared.last.get(s);
            if let Some((_, part)) = last.filter(|(at, _)| *at >= start) {
                parts.push(part.clone());
                continue;
            }
            let busy_for = shared.busy.get(s).map(|since| now.duration_since(*since));
            let reading =
                busy_for.map(|d| format!(" (its reader has been at it {:.1} s)", d.as_secs_f64()));
            let served = match last {
                Some((at, part)) => {
                    let age = now.duration_since(*at).as_secs_f64();
                    snap.stale.push(Stale {
                        source: s.kind(),
                        device: s.name().to_string(),
                        age_seconds: age,
                    });
                    parts.push(part.clone());
                    format!("serving its sample from {age:.1} s ago")
                }
                None => "no earlier sample to serve".to_string(),
            };
            snap.errors.push(SourceError {
                source: "stalled",
                device: s.name().to_string(),
                port: None,
                path: s.path(),
                error: format!(
                    "no answer within {:.1} s{}; {served}",
                    self.deadline.as_secs_f64(),
                    reading.unwrap_or_default()
                ),
            });
        }
        parts
    }
}

/// A reader: takes sources off the queue until it is empty, records each answer.
fn reader(
    roots: &Roots,
    shared: &Mutex<Shared>,
    queue: &Mutex<VecDeque<Source>>,
    tx: &mpsc::Sender<Source>,
) {
    loop {
        let Some(s) = lock(queue).pop_front() else { return };
        let part = s.read(roots);
        {
            let mut sh = lock(shared);
            sh.busy.remove(&s);
            sh.last.insert(s.clone(), (Instant::now(), part));
        }
        // The scrape that asked may have given up; the answer is kept for the next.
        let _ = tx.send(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for dev in ["a_0", "b_0"] {
            let p = dir.path().join(format!("class/infiniband/{dev}/ports/1/counters"));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("port_rcv_data"), "7\n").unwrap();
            std::fs::write(p.join("../state"), "4: ACTIVE\n").unwrap();
        }
        dir
    }

    fn roots(dir: &tempfile::TempDir) -> Roots {
        Roots { sys: dir.path().to_path_buf(), proc: dir.path().join("proc"), live: false }
    }

    #[test]
    fn every_source_answers_in_time_nothing_is_stale() {
        let dir = tree();
        let s = Sampler::new(roots(&dir), Duration::from_secs(5));
        let snap = s.collect();
        assert_eq!(snap.ports.len(), 2, "{snap:?}");
        assert!(snap.stale.is_empty() && snap.errors.iter().all(|e| e.source != "stalled"));
        assert_eq!(s.readers_at_work(), 0);
    }

    /// A source whose reader is at work (stuck) is served from its last sample, named, and
    /// not read again by the next scrapes; once the reader returns it is fresh again.
    #[test]
    fn a_busy_source_is_served_stale_and_never_read_twice() {
        let dir = tree();
        let s = Sampler::new(roots(&dir), Duration::from_millis(100));
        assert!(s.collect().stale.is_empty());
        // Stand for a stuck reader of a_0: mark it at work, as a reader does.
        let a = Source::Device("a_0".into());
        lock(&s.shared).busy.insert(a.clone(), Instant::now());
        std::fs::write(dir.path().join("class/infiniband/a_0/ports/1/counters/port_rcv_data"), "9")
            .unwrap();
        for _ in 0..3 {
            let snap = s.collect();
            assert_eq!(snap.stale.len(), 1, "{snap:?}");
            assert_eq!(snap.stale[0].device, "a_0");
            let a_port = snap.ports.iter().find(|p| p.device == "a_0").unwrap();
            assert_eq!(a_port.counters["port_rcv_data"], 7, "the last good sample");
            let e = snap.errors.iter().find(|e| e.source == "stalled").unwrap();
            assert_eq!(e.path, "class/infiniband/a_0");
            assert!(e.error.contains("serving its sample from"), "{}", e.error);
            assert_eq!(s.readers_at_work(), 1);
        }
        lock(&s.shared).busy.remove(&a);
        let snap = s.collect();
        assert!(snap.stale.is_empty(), "{snap:?}");
        let a_port = snap.ports.iter().find(|p| p.device == "a_0").unwrap();
        assert_eq!(a_port.counters["port_rcv_data"], 9);
    }
}
