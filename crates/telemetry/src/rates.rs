//! Rates of change over a window, robust to what counters do in the field: a counter that
//! goes backwards was reset (the driver reloaded, someone cleared it) and counts from zero
//! again, as Prometheus's `rate()` assumes; a PMA counter at its saturation value has stopped
//! counting, so its rate is unknown rather than zero. No rate is ever negative.

use std::collections::{HashMap, VecDeque};

/// Names one series: a device (or netdev), a port (or priority), a counter.
pub type SeriesKey = (String, u8, String);

#[derive(Debug, Clone, Copy)]
struct Point {
    t: f64,
    value: u64,
    saturated: bool,
}

/// A rate over the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Increments per second.
    pub per_second: f64,
    /// The increments counted.
    pub increase: u64,
    /// Resets seen in the window (each counted as a restart from zero).
    pub resets: u32,
    /// Seconds the rate spans.
    pub span: f64,
}

/// Why a series has no rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRate {
    /// Fewer than two samples, or no time between them.
    TooFewSamples,
    /// The counter sat at its saturation value: it no longer counts.
    Saturated,
}

/// Samples of every series over the last `window` seconds.
#[derive(Debug, Clone)]
pub struct Tracker {
    window: f64,
    series: HashMap<SeriesKey, VecDeque<Point>>,
}

impl Tracker {
    /// A tracker keeping `window` seconds of samples.
    pub fn new(window: f64) -> Tracker {
        Tracker { window: window.max(0.0), series: HashMap::new() }
    }

    /// The window, in seconds.
    pub fn window(&self) -> f64 {
        self.window
    }

    /// Records `value` of `key` at time `t` (seconds, monotonic).
    pub fn observe(&mut self, key: SeriesKey, t: f64, value: u64, saturated: bool) {
        let q = self.series.entry(key).or_default();
        if q.back().is_some_and(|p| t < p.t) {
            q.clear(); // time went backwards: start over
        }
        q.push_back(Point { t, value, saturated });
        // Keep the newest sample at or before the window's start, so the rate spans it.
        while q.len() > 2 && q.get(1).is_some_and(|p| p.t <= t - self.window) {
            q.pop_front();
        }
    }

    /// The rate of `key` over the window.
    pub fn rate(&self, key: &SeriesKey) -> Result<Rate, NoRate> {
        let q = self.series.get(key).ok_or(NoRate::TooFewSamples)?;
        if q.iter().any(|p| p.saturated) {
            return Err(NoRate::Saturated);
        }
        let (first, last) =
            (q.front().ok_or(NoRate::TooFewSamples)?, q.back().ok_or(NoRate::TooFewSamples)?);
        let span = last.t - first.t;
        if q.len() < 2 || span <= 0.0 {
            return Err(NoRate::TooFewSamples);
        }
        let (mut increase, mut resets) = (0u64, 0u32);
        for (a, b) in q.iter().zip(q.iter().skip(1)) {
            if b.value >= a.value {
                increase = increase.saturating_add(b.value - a.value);
            } else {
                resets += 1;
                increase = increase.saturating_add(b.value);
            }
        }
        Ok(Rate { per_second: increase as f64 / span, increase, resets, span })
    }

    /// Forgets series not observed since `t`.
    pub fn prune(&mut self, t: f64) {
        self.series.retain(|_, q| q.back().is_some_and(|p| p.t >= t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SeriesKey {
        ("mlx5_0".into(), 1, "out_of_sequence".into())
    }

    #[test]
    fn steady_counting() {
        let mut t = Tracker::new(60.0);
        for i in 0..=10u64 {
            t.observe(key(), i as f64, 100 + 5 * i, false);
        }
        let r = t.rate(&key()).unwrap();
        assert_eq!((r.per_second, r.increase, r.resets), (5.0, 50, 0));
    }

    #[test]
    fn a_reset_counts_from_zero_and_is_never_negative() {
        let mut t = Tracker::new(60.0);
        t.observe(key(), 0.0, 1_000_000, false);
        t.observe(key(), 1.0, 1_000_010, false);
        t.observe(key(), 2.0, 4, false); // cleared, then 4 more
        t.observe(key(), 3.0, 10, false);
        let r = t.rate(&key()).unwrap();
        assert_eq!((r.increase, r.resets), (10 + 4 + 6, 1));
        assert!(r.per_second > 0.0 && r.per_second < 10.0, "{r:?}");
    }

    #[test]
    fn a_saturated_counter_has_no_rate() {
        let mut t = Tracker::new(60.0);
        t.observe(key(), 0.0, 65_000, false);
        t.observe(key(), 1.0, 65_535, true);
        assert_eq!(t.rate(&key()), Err(NoRate::Saturated));
        assert_eq!(Tracker::new(1.0).rate(&key()), Err(NoRate::TooFewSamples));
    }

    #[test]
    fn the_window_slides() {
        let mut t = Tracker::new(10.0);
        for i in 0..100u64 {
            // 1/s for the first 50 s, then 0.
            t.observe(key(), i as f64, i.min(50), false);
        }
        let r = t.rate(&key()).unwrap();
        assert_eq!(r.increase, 0, "{r:?}");
        assert!((r.span - 10.0).abs() < 1e-9, "{r:?}");
    }
}
