//! The figures perftest reports, computed as perftest 4.5 computes them, so that numbers
//! compare across tools.
//!
//! - Bandwidth (`print_report_bw`): the average over the whole run — bytes of every message
//!   from the first post to the last completion — and the peak: the fastest stretch of
//!   consecutive messages, `min over i ≤ j of (completed[j] − posted[i]) / (j − i + 1)`. Both
//!   in units of 2²⁰ bytes per second: perftest 4.5 labels them `MB/sec` but divides by
//!   1,048,576 (its recorded `ib_write_bw` report, 65,536 B × 5 at 5.3125 "MB/s" and 85.0
//!   messages/s, only agrees that way; upstream later relabelled the column `MiB/sec`).
//!   The message rate is in millions of messages per second.
//! - Latency (`print_report_lat`): the intervals between consecutive posts of a ping-pong,
//!   sorted; `t_typical` is their median (the mean of the middle two for an even count),
//!   `t_avg` and `t_stdev` (population) over all of them, the 99 % and 99.9 % percentiles the
//!   sorted intervals at index ⌈n·p⌉ (clamped to the last), all divided by the round-trip
//!   factor: 2 for SEND and WRITE (one way), 1 for READ and atomics.

/// The bytes in perftest's "MB".
pub const PERFTEST_MB: f64 = 1_048_576.0;

/// A bandwidth test's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bandwidth {
    /// Message size in bytes.
    pub size: u64,
    /// Messages measured.
    pub iters: u64,
    /// Peak bandwidth, perftest MB/s (2²⁰ bytes).
    pub bw_peak: f64,
    /// Average bandwidth, perftest MB/s.
    pub bw_avg: f64,
    /// Average message rate, millions per second.
    pub msg_rate: f64,
}

/// The largest run of messages the exact peak search looks at (it is quadratic); longer
/// runs are searched over windows up to this many messages long.
pub const PEAK_WINDOW: usize = 4096;

/// Runs up to this many messages get the exact peak search; longer ones the linear one.
pub const EXACT_PEAK_UP_TO: usize = 20_000;

impl Bandwidth {
    /// Figures from each message's post and completion times (nanoseconds, any origin).
    /// `None` when there are no messages or no time passed.
    pub fn from_times(size: u64, posted: &[u64], completed: &[u64]) -> Option<Bandwidth> {
        let n = posted.len().min(completed.len());
        if n == 0 {
            return None;
        }
        let total_ns = completed[n - 1].checked_sub(posted[0]).filter(|t| *t > 0)?;
        let secs = total_ns as f64 / 1e9;
        let bw_avg = (size * n as u64) as f64 / secs / PERFTEST_MB;
        let msg_rate = n as f64 / secs / 1e6;
        // The fastest stretch: the smallest time per message over runs i..=j. Exact (up to
        // PEAK_WINDOW long) for runs perftest measures; over stretches of exactly
        // PEAK_WINDOW messages for longer ones, which keeps it linear.
        let mut best = f64::INFINITY;
        if n <= EXACT_PEAK_UP_TO {
            for (i, &p) in posted[..n].iter().enumerate() {
                for (k, &c) in completed[i..n].iter().take(PEAK_WINDOW).enumerate() {
                    let per = c.saturating_sub(p) as f64 / (k + 1) as f64;
                    if per > 0.0 && per < best {
                        best = per;
                    }
                }
            }
        } else {
            for i in 0..=n - PEAK_WINDOW {
                let per = completed[i + PEAK_WINDOW - 1].saturating_sub(posted[i]) as f64
                    / PEAK_WINDOW as f64;
                if per > 0.0 && per < best {
                    best = per;
                }
            }
        }
        let bw_peak =
            if best.is_finite() { size as f64 / (best / 1e9) / PERFTEST_MB } else { bw_avg };
        Some(Bandwidth { size, iters: n as u64, bw_peak, bw_avg, msg_rate })
    }
}

/// A latency test's figures, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Smallest interval.
    pub t_min: f64,
    /// Largest interval.
    pub t_max: f64,
    /// Median interval.
    pub t_typical: f64,
    /// Mean interval.
    pub t_avg: f64,
    /// Standard deviation (population).
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
}

impl Latency {
    /// Figures from the post time of each iteration (nanoseconds): the `iters − 1` intervals
    /// between them, divided by `rtt_factor` (2 for SEND/WRITE, 1 for READ/atomics). `None`
    /// with fewer than two posts.
    pub fn from_post_times(size: u64, posted: &[u64], rtt_factor: f64) -> Option<Latency> {
        if posted.len() < 2 {
            return None;
        }
        let mut d: Vec<f64> = posted
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]) as f64 / 1e3 / rtt_factor)
            .collect();
        d.sort_by(f64::total_cmp);
        let n = d.len();
        let median = if (n - 1) % 2 == 1 { (d[n / 2] + d[n / 2 - 1]) / 2.0 } else { d[n / 2] };
        let avg = d.iter().sum::<f64>() / n as f64;
        let var = d.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let at = |p: f64| d[((n as f64 * p).ceil() as usize).min(n - 1)];
        Some(Latency {
            size,
            iters: posted.len() as u64,
            t_min: d[0],
            t_max: d[n - 1],
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: at(0.99),
            p99_9: at(0.999),
        })
    }
}

/// A cheap clock for per-message timestamps: the CPU's time-stamp counter on x86-64 (what
/// perftest's `get_cycles` reads), elsewhere nanoseconds of the OS clock. Reading the OS clock
/// is a system call where the kernel's clocksource is not the TSC (HPET in VMs and the QEMU
/// guest: BENCHMARKS.md, "Hot paths", H6); a tick is one instruction. Ticks become
/// nanoseconds with a rate measured against the OS clock over the recording itself.
#[derive(Debug, Clone, Copy)]
pub struct TickClock {
    t0: std::time::Instant,
    c0: u64,
}

impl TickClock {
    /// Starts the calibration interval now.
    pub fn start() -> TickClock {
        TickClock { t0: std::time::Instant::now(), c0: ticks() }
    }

    /// Nanoseconds per tick over the interval so far (1 when too short to tell).
    pub fn ns_per_tick(&self) -> f64 {
        let ns = self.t0.elapsed().as_nanos() as f64;
        let dc = ticks().saturating_sub(self.c0);
        if dc == 0 || ns == 0.0 { 1.0 } else { ns / dc as f64 }
    }
}

/// The tick counter now.
#[inline]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions; every x86-64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
    }
}

/// A latency distribution in Prometheus's shape: cumulative counts under each upper bound
/// (seconds), with the count and sum of every observation — what a histogram series exports.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyBuckets {
    /// Message size in bytes.
    pub size: u64,
    /// Upper bounds, seconds, ascending ([`bucket_bounds`]).
    pub le: Vec<f64>,
    /// Observations at or under each bound.
    pub cumulative: Vec<u64>,
    /// Observations (those over the last bound included).
    pub count: u64,
    /// Their sum, seconds.
    pub sum: f64,
}

/// The latency buckets podnet exports: 1 µs to 0.52 s, doubling (the agent's probe uses the
/// same, so the two compare bucket for bucket).
pub fn bucket_bounds() -> Vec<f64> {
    (0..20).map(|i| 1e-6 * f64::from(1u32 << i)).collect()
}

impl LatencyBuckets {
    /// Buckets of `(seconds, how many)` observations.
    pub fn from_observations(size: u64, obs: impl IntoIterator<Item = (f64, u64)>) -> Self {
        let le = bucket_bounds();
        let mut per = vec![0u64; le.len()];
        let (mut count, mut sum) = (0u64, 0.0f64);
        for (v, n) in obs {
            if let Some(i) = le.iter().position(|b| v <= *b) {
                per[i] += n;
            }
            count += n;
            sum += v * n as f64;
        }
        let cumulative = per
            .iter()
            .scan(0u64, |acc, n| {
                *acc += n;
                Some(*acc)
            })
            .collect();
        LatencyBuckets { size, le, cumulative, count, sum }
    }
}

/// Collects a latency test's post times: every one (perftest's exact figures) for a run of
/// iterations, or the intervals in an HDR histogram (3 significant digits) for a run of a
/// duration, which may be any length — so `-D` runs get percentiles too.
#[derive(Debug)]
pub struct LatencyRecorder {
    size: u64,
    rtt_factor: f64,
    clock: TickClock,
    posts: Vec<u64>,
    hist: Option<hdrhistogram::Histogram<u64>>,
    last: Option<u64>,
    count: u64,
}

impl LatencyRecorder {
    /// A recorder for messages of `size` bytes; `histogram` for runs of a duration.
    pub fn new(size: u64, rtt_factor: f64, histogram: bool) -> LatencyRecorder {
        LatencyRecorder {
            size,
            rtt_factor,
            clock: TickClock::start(),
            posts: Vec::new(),
            hist: histogram.then(|| {
                // 1 tick to 10 minutes at 6 GHz, at 3 significant digits.
                hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                    .unwrap_or_else(|_| unreachable!("valid bounds"))
            }),
            last: None,
            count: 0,
        }
    }

    /// Makes room for `posts` post times up front (at most 4 Mi of them, 32 MiB), as perftest
    /// allocates its `tposted` before the loop: no reallocation, and no copy of what was
    /// recorded, between two posts of the run. Nothing for a run of a duration.
    pub fn reserve(&mut self, posts: u64) {
        if self.hist.is_none() {
            self.posts.reserve(posts.min(1 << 22) as usize);
        }
    }

    /// Notes a post now.
    #[inline]
    pub fn post(&mut self) {
        let t = ticks();
        self.count += 1;
        match &mut self.hist {
            None => self.posts.push(t),
            Some(h) => {
                if let Some(l) = self.last {
                    // Saturates at the histogram's top rather than failing.
                    h.saturating_record(t.saturating_sub(l).max(1));
                }
                self.last = Some(t);
            }
        }
    }

    /// Every interval as a histogram of one-way latencies (seconds, divided by the
    /// round-trip factor like the figures); `None` with fewer than two posts.
    pub fn buckets(&self) -> Option<LatencyBuckets> {
        let k = self.clock.ns_per_tick() / 1e9 / self.rtt_factor;
        match &self.hist {
            None if self.posts.len() < 2 => None,
            None => Some(LatencyBuckets::from_observations(
                self.size,
                self.posted_intervals(k).map(|x| (x, 1)),
            )),
            Some(h) if h.is_empty() => None,
            Some(h) => Some(LatencyBuckets::from_observations(
                self.size,
                h.iter_recorded().map(|v| (v.value_iterated_to() as f64 * k, v.count_at_value())),
            )),
        }
    }

    /// Every interval in the order measured, one way in microseconds (divided by the
    /// round-trip factor like the figures) — perftest's `-U` list. `None` for a run of a
    /// duration (its intervals went into a histogram) or with fewer than two posts.
    pub fn intervals(&self) -> Option<Vec<f64>> {
        if self.hist.is_some() || self.posts.len() < 2 {
            return None;
        }
        let k = self.clock.ns_per_tick() / 1e3 / self.rtt_factor;
        Some(self.posted_intervals(k).collect())
    }

    /// The recorded intervals between consecutive posts, in order, each `per_tick` times its
    /// ticks (a run of iterations; empty for a run of a duration).
    fn posted_intervals(&self, per_tick: f64) -> impl Iterator<Item = f64> + '_ {
        self.posts.windows(2).map(move |w| w[1].saturating_sub(w[0]) as f64 * per_tick)
    }

    /// The figures; `None` with fewer than two posts.
    pub fn finish(&self) -> Option<Latency> {
        let k = self.clock.ns_per_tick();
        let Some(h) = &self.hist else {
            let first = self.posts.first().copied().unwrap_or(0);
            let ns: Vec<u64> =
                self.posts.iter().map(|t| (t.saturating_sub(first) as f64 * k) as u64).collect();
            return Latency::from_post_times(self.size, &ns, self.rtt_factor);
        };
        if h.is_empty() {
            return None;
        }
        let us = |ticks: f64| ticks * k / 1e3 / self.rtt_factor;
        Some(Latency {
            size: self.size,
            iters: self.count,
            t_min: us(h.min() as f64),
            t_max: us(h.max() as f64),
            t_typical: us(h.value_at_quantile(0.5) as f64),
            t_avg: us(h.mean()),
            t_stdev: us(h.stdev()),
            p99: us(h.value_at_quantile(0.99) as f64),
            p99_9: us(h.value_at_quantile(0.999) as f64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_every_observation_under_its_bound() {
        let b =
            LatencyBuckets::from_observations(2, [(0.5e-6, 1), (1.5e-6, 2), (3e-6, 1), (1.0, 1)]);
        assert_eq!(b.le.len(), 20);
        assert_eq!((b.le[0], b.le[1], b.le[2]), (1e-6, 2e-6, 4e-6));
        assert_eq!(&b.cumulative[..3], &[1, 3, 4]);
        // One second is over the last bound (0.52 s): counted, in no bucket but +Inf.
        assert_eq!((*b.cumulative.last().unwrap(), b.count), (4, 5));
        assert!((b.sum - (0.5e-6 + 3e-6 + 3e-6 + 1.0)).abs() < 1e-12, "{}", b.sum);
    }

    #[test]
    fn a_recorders_buckets_agree_with_its_figures() {
        for histogram in [false, true] {
            let mut r = LatencyRecorder::new(2, 2.0, histogram);
            for _ in 0..50 {
                r.post();
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            let (b, l) = (r.buckets().unwrap(), r.finish().unwrap());
            assert_eq!(b.count, 49, "every interval once ({histogram})");
            let mean_us = b.sum / b.count as f64 * 1e6;
            assert!((mean_us - l.t_avg).abs() <= 0.01 * l.t_avg, "{mean_us} vs {}", l.t_avg);
            // Half of each 200+ µs interval: nothing under 100 µs.
            let under_64us = b.cumulative[b.le.iter().position(|&x| x >= 64e-6).unwrap()];
            assert_eq!(under_64us, 0, "{b:?}");
        }
        assert!(LatencyRecorder::new(2, 2.0, false).buckets().is_none());
    }

    #[test]
    fn a_reserved_recorder_does_not_move_its_posts_during_the_run() {
        let mut r = LatencyRecorder::new(2, 2.0, false);
        r.reserve(1001);
        let (at, cap) = (r.posts.as_ptr(), r.posts.capacity());
        assert!(cap >= 1001, "{cap}");
        (0..1001).for_each(|_| r.post());
        assert_eq!((r.posts.as_ptr(), r.posts.capacity()), (at, cap), "reallocated mid-run");
        // Room is capped (a run of 10^12 iterations does not ask for 8 TB up front), and a
        // run of a duration keeps no list to make room in.
        let mut big = LatencyRecorder::new(2, 2.0, false);
        big.reserve(1_000_000_000_000);
        assert!(big.posts.capacity() < 1 << 23, "{}", big.posts.capacity());
        let mut h = LatencyRecorder::new(2, 2.0, true);
        h.reserve(1001);
        assert_eq!(h.posts.capacity(), 0);
    }

    #[test]
    fn a_recorders_intervals_are_in_the_order_measured() {
        let mut r = LatencyRecorder::new(2, 2.0, false);
        // Intervals of ~2 ms, ~0 and ~6 ms between four posts: one way, 1 ms, ~0 and 3 ms.
        for pause_ms in [2, 0, 6, 0] {
            r.post();
            std::thread::sleep(std::time::Duration::from_millis(pause_ms));
        }
        let v = r.intervals().unwrap();
        assert_eq!(v.len(), 3, "{v:?}");
        // A sleep lasts at least what was asked, and on a loaded machine much longer (one
        // of 6 ms took 10.6 in CI): lower bounds for the long ones, and the short one
        // between them, in its place.
        assert!(v[0] >= 1000.0 && v[2] >= 3000.0, "{v:?}");
        assert!(v[1] < 1000.0, "{v:?}");
        // Sorted, they are the figures' extremes (each reads the tick rate when called, so
        // within a part in a thousand).
        let l = r.finish().unwrap();
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-3 * b.max(1.0);
        assert!(near(l.t_min, v[1]) && near(l.t_max, v[2]), "{l:?} vs {v:?}");
        // A run of a duration keeps a histogram, not the list.
        let mut h = LatencyRecorder::new(2, 2.0, true);
        (0..3).for_each(|_| h.post());
        assert!(h.intervals().is_none());
    }

    #[test]
    fn steady_messages_give_equal_peak_and_average() {
        // 1,000 messages of 1 MiB, one every millisecond, each taking 1 ms: 1,000 MB/s.
        let posted: Vec<u64> = (0..1000).map(|i| i * 1_000_000).collect();
        let completed: Vec<u64> = posted.iter().map(|p| p + 1_000_000).collect();
        let b = Bandwidth::from_times(1 << 20, &posted, &completed).unwrap();
        // From the first post (0) to the last completion (1 s): 1,000 MiB in 1 s.
        assert!((b.bw_avg - 1000.0).abs() < 1e-9, "{b:?}");
        assert!((b.bw_peak - 1000.0).abs() < 1e-9, "{b:?}");
        assert!((b.msg_rate - 0.001).abs() < 1e-12, "{b:?}");
    }

    #[test]
    fn the_peak_is_the_fastest_stretch() {
        // Ten messages; 3..=6 complete twice as fast as the rest.
        let mut t = 0;
        let (mut p, mut c) = (Vec::new(), Vec::new());
        for i in 0..10 {
            let dt = if (3..=6).contains(&i) { 500 } else { 1000 };
            p.push(t);
            t += dt;
            c.push(t);
        }
        let b = Bandwidth::from_times(1000, &p, &c).unwrap();
        // 1,000 bytes per 500 ns = 2e9 B/s.
        assert!((b.bw_peak - 2e9 / PERFTEST_MB).abs() < 1e-6, "{b:?}");
        assert!(b.bw_avg < b.bw_peak);
        assert!(Bandwidth::from_times(1, &[], &[]).is_none());
        assert!(Bandwidth::from_times(1, &[5], &[5]).is_none(), "no time passed");
    }

    #[test]
    fn latency_follows_perftests_definitions() {
        // Intervals 1..=1000 µs between 1,001 posts, SEND (one way = half).
        let mut posted = vec![0u64];
        for k in 1..=1000u64 {
            let last = *posted.last().unwrap();
            posted.push(last + k * 1000);
        }
        let l = Latency::from_post_times(2, &posted, 2.0).unwrap();
        assert_eq!((l.t_min, l.t_max), (0.5, 500.0));
        // 1,000 intervals: (n − 1) is odd, so the median is the mean of the middle two.
        assert_eq!(l.t_typical, (500.0 + 501.0) / 2.0 / 2.0);
        assert!((l.t_avg - 250.25).abs() < 1e-9);
        assert!((l.t_stdev - 144.3373).abs() < 1e-3, "{l:?}");
        // ⌈1000 × 0.99⌉ = 990 → the 991st smallest; ⌈999⌉ = 999 → the largest.
        assert_eq!((l.p99, l.p99_9), (495.5, 500.0));
        assert_eq!(l.iters, 1001);
        // An odd count of intervals: the middle one.
        let l = Latency::from_post_times(2, &[0, 1000, 3000, 6000], 1.0).unwrap();
        assert_eq!(l.t_typical, 2.0);
        assert!(Latency::from_post_times(2, &[7], 1.0).is_none());
    }
}
