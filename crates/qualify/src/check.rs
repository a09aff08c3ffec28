//! One check abstraction: a name, what was measured (a figure with its unit, or words), the
//! threshold it is held to, and a verdict computed from them — at once for an absolute or
//! calibrated threshold, or once every measurement of the run is in for a threshold relative to
//! the pod's own distribution ([`Threshold::VsPod`]: the median of the same figure on every
//! pair). Every check of a plan is built here; [`crate::report::Check`] is its verdict.
//!
//! ```
//! use qualify::check::{Measurement, Threshold};
//! let c = Measurement::new("device/mlx5_0/active_mtu")
//!     .figure(1024.0, "bytes")
//!     .want(Threshold::AtLeast(4096.0))
//!     .judge(None);
//! assert_eq!((c.status.as_str(), c.threshold.as_deref()), ("fail", Some(">= 4096")));
//! ```

use std::time::Duration;

use crate::report::{Check, Status};

/// What a measurement is held to.
#[derive(Debug, Clone, PartialEq)]
pub enum Threshold {
    /// None: the figure is reported and the check passes.
    None,
    /// At least this.
    AtLeast(f64),
    /// At most this.
    AtMost(f64),
    /// The measurement in words must be this (`ACTIVE`, `4X`, `performance`).
    Is(String),
    /// At least (`higher`) or at most `factor` × the median of the same figure across the
    /// checks of one group (every pair of a test and size): the pod is its own reference.
    /// Judged once all of the group are measured.
    VsPod {
        /// The factor.
        factor: f64,
        /// Whether more is better.
        higher: bool,
    },
    /// A threshold that could not be set (a relative one whose reference has no figure): the
    /// check fails, saying why.
    Unset(String),
}

/// What was measured.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    None,
    Figure(f64),
    Words(String),
}

/// A measurement on its way to a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    name: String,
    value: Value,
    unit: String,
    threshold: Threshold,
    /// How the threshold reads in the report, when not from the threshold alone
    /// (`>= 574.2 (0.2 x calibration 2871.0)`).
    threshold_text: Option<String>,
    detail: String,
    fail_detail: Option<String>,
    took: Duration,
    group: Option<String>,
}

impl Measurement {
    /// A check named `name` that measured nothing yet and has no threshold.
    pub fn new(name: impl Into<String>) -> Measurement {
        Measurement {
            name: name.into(),
            value: Value::None,
            unit: String::new(),
            threshold: Threshold::None,
            threshold_text: None,
            detail: String::new(),
            fail_detail: None,
            took: Duration::ZERO,
            group: None,
        }
    }

    /// A figure in `unit`.
    pub fn figure(mut self, value: f64, unit: &str) -> Measurement {
        self.value = Value::Figure(value);
        self.unit = unit.to_string();
        self
    }

    /// A measurement in words (compared with [`Threshold::Is`]).
    pub fn words(mut self, words: impl Into<String>) -> Measurement {
        self.value = Value::Words(words.into());
        self
    }

    /// The threshold.
    pub fn want(mut self, threshold: Threshold) -> Measurement {
        self.threshold = threshold;
        self
    }

    /// How the threshold reads in the report.
    pub fn threshold_text(mut self, text: impl Into<String>) -> Measurement {
        self.threshold_text = Some(text.into());
        self
    }

    /// What the report says beside the verdict.
    pub fn detail(mut self, detail: impl Into<String>) -> Measurement {
        self.detail = detail.into();
        self
    }

    /// What the report says instead when the check fails.
    pub fn on_fail(mut self, detail: impl Into<String>) -> Measurement {
        self.fail_detail = Some(detail.into());
        self
    }

    /// How long the measurement took.
    pub fn took(mut self, took: Duration) -> Measurement {
        self.took = took;
        self
    }

    /// The group whose median a [`Threshold::VsPod`] compares with.
    pub fn group(mut self, group: impl Into<String>) -> Measurement {
        self.group = Some(group.into());
        self
    }

    /// The check's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the verdict waits for the rest of the run (the pod's median).
    pub fn needs_the_pod(&self) -> bool {
        matches!(self.threshold, Threshold::VsPod { .. })
    }

    /// The figure, and the group it belongs to, for the pod's medians.
    pub fn grouped_figure(&self) -> Option<(&str, f64)> {
        match (&self.group, &self.value) {
            (Some(g), Value::Figure(v)) => Some((g.as_str(), *v)),
            _ => None,
        }
    }

    /// The verdict; `pod_median` is the median of this check's group ([`Threshold::VsPod`]).
    pub fn judge(&self, pod_median: Option<f64>) -> Check {
        let measured = match &self.value {
            Value::Figure(v) => Some(*v),
            _ => None,
        };
        let words = match &self.value {
            Value::Words(w) => Some(w.as_str()),
            _ => None,
        };
        let bound = |limit: f64, higher: bool, text: String| {
            let ok = measured.is_some_and(|m| if higher { m >= limit } else { m <= limit });
            (ok, Some(text))
        };
        let cmp = |higher: bool| if higher { ">=" } else { "<=" };
        let (ok, text, why) = match &self.threshold {
            Threshold::None => (true, None, None),
            Threshold::AtLeast(l) => {
                let (ok, t) = bound(*l, true, format!(">= {l}"));
                (ok, t, None)
            }
            Threshold::AtMost(l) => {
                let (ok, t) = bound(*l, false, format!("<= {l}"));
                (ok, t, None)
            }
            Threshold::Is(want) => (words == Some(want.as_str()), Some(want.clone()), None),
            Threshold::VsPod { factor, higher } => match pod_median {
                Some(m) => {
                    let limit = factor * m;
                    let text =
                        format!("{} {limit:.2} ({factor} x pod median {m:.2})", cmp(*higher));
                    let (ok, t) = bound(limit, *higher, text);
                    (ok, t, None)
                }
                None => (false, None, Some("no other figure in the pod to compare with".into())),
            },
            Threshold::Unset(why) => (false, None, Some(why.clone())),
        };
        let status = if ok { Status::Pass } else { Status::Fail };
        let detail = match (status, &self.fail_detail, why) {
            (_, _, Some(why)) => why,
            (Status::Fail, Some(d), _) => d.clone(),
            _ => self.detail.clone(),
        };
        Check {
            name: self.name.clone(),
            status,
            measured,
            threshold: self.threshold_text.clone().or(text),
            unit: self.unit.clone(),
            detail,
            seconds: self.took.as_secs_f64(),
        }
    }
}

/// The median of `v` (the mean of the middle two for an even count); `None` for none.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_give_their_verdicts() {
        let m = |v| Measurement::new("x").figure(v, "MB/s");
        assert_eq!(m(5.0).want(Threshold::AtLeast(5.0)).judge(None).status, Status::Pass);
        assert_eq!(m(4.9).want(Threshold::AtLeast(5.0)).judge(None).status, Status::Fail);
        assert_eq!(m(4.9).want(Threshold::AtMost(5.0)).judge(None).status, Status::Pass);
        let c = m(7.0).judge(None);
        assert_eq!((c.status, c.threshold, c.measured), (Status::Pass, None, Some(7.0)));
        let w = |s: &str| Measurement::new("w").words(s).want(Threshold::Is("ACTIVE".into()));
        assert_eq!(w("ACTIVE").judge(None).status, Status::Pass);
        let c = w("DOWN").detail("port up").on_fail("port 1 is DOWN").judge(None);
        assert_eq!((c.status, c.detail.as_str()), (Status::Fail, "port 1 is DOWN"));
        let c = m(1.0).want(Threshold::Unset("no calibration figure".into())).judge(None);
        assert_eq!((c.status, c.detail.as_str()), (Status::Fail, "no calibration figure"));
        // A figure held to a bound has no verdict without the figure.
        let c = Measurement::new("n").want(Threshold::AtLeast(1.0)).judge(None);
        assert_eq!(c.status, Status::Fail);
    }

    #[test]
    fn a_pod_relative_threshold_waits_for_the_pod() {
        // Five pairs; one at half the others' bandwidth fails against 0.8 x the median.
        let figures = [100.0, 98.0, 102.0, 50.0, 101.0];
        let checks: Vec<Measurement> = figures
            .iter()
            .enumerate()
            .map(|(i, v)| {
                Measurement::new(format!("pair{i}"))
                    .figure(*v, "MB/s")
                    .want(Threshold::VsPod { factor: 0.8, higher: true })
                    .group("write-bw/65536")
            })
            .collect();
        assert!(checks.iter().all(Measurement::needs_the_pod));
        let mut all: Vec<f64> =
            checks.iter().filter_map(|c| c.grouped_figure()).map(|g| g.1).collect();
        let med = median(&mut all);
        assert_eq!(med, Some(100.0));
        let verdicts: Vec<Status> = checks.iter().map(|c| c.judge(med).status).collect();
        assert_eq!(
            verdicts,
            [Status::Pass, Status::Pass, Status::Pass, Status::Fail, Status::Pass]
        );
        assert_eq!(
            checks[3].judge(med).threshold.as_deref(),
            Some(">= 80.00 (0.8 x pod median 100.00)")
        );
        assert_eq!(checks[0].judge(None).status, Status::Fail, "no pod, no verdict but a failure");
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), Some(2.5));
    }
}
