//! Inference traffic as who sends to whom: each pattern is a set of directed edges between
//! ranks, every edge a stream of SENDs whose every byte the receiver checks — and the
//! KV-cache transfer of disaggregated inference, one-sided READs and WRITEs between prefill
//! and decode ranks under all-to-all load.

/// A traffic pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pattern {
    /// Every rank to every other (MoE dispatch and combine).
    AllToAll,
    /// Each rank to the next, the last to the first (the phases of a ring all-reduce).
    Ring,
    /// Each rank to the next, no wrap (pipeline-parallel send/recv chains).
    Pipeline,
    /// Every rank to rank 0 (N → 1).
    Incast,
    /// The first half to the second, both ways (pairs across a bisection).
    Bisection,
    /// Disaggregated inference's KV-cache transfer: each prefill rank (the first half) to
    /// each decode rank (the second half), small one-sided READs and WRITEs (4–64 KiB) over
    /// many QPs with their tail latency, while every rank runs all-to-all SENDs beside them.
    /// Not among [`Pattern::ALL`]: asked for by name.
    KvCache,
}

impl Pattern {
    /// Every pattern.
    pub const ALL: [Pattern; 5] =
        [Pattern::AllToAll, Pattern::Ring, Pattern::Pipeline, Pattern::Incast, Pattern::Bisection];

    /// Its name (`all-to-all`, `ring`, `pipeline`, `incast`, `bisection`).
    pub fn name(self) -> &'static str {
        match self {
            Pattern::AllToAll => "all-to-all",
            Pattern::Ring => "ring",
            Pattern::Pipeline => "pipeline",
            Pattern::Incast => "incast",
            Pattern::Bisection => "bisection",
            Pattern::KvCache => "kv-cache",
        }
    }

    /// The pattern called `s`.
    pub fn from_name(s: &str) -> Option<Pattern> {
        Pattern::ALL.into_iter().chain([Pattern::KvCache]).find(|p| p.name() == s)
    }

    /// Its edges (source, destination) among `n` ranks.
    pub fn edges(self, n: u32) -> Vec<(u32, u32)> {
        match self {
            Pattern::AllToAll => {
                (0..n).flat_map(|i| (0..n).filter(move |j| *j != i).map(move |j| (i, j))).collect()
            }
            Pattern::Ring if n >= 2 => {
                (0..n).map(|i| (i, (i + 1) % n)).filter(|(a, b)| a != b).collect()
            }
            Pattern::Pipeline => (0..n.saturating_sub(1)).map(|i| (i, i + 1)).collect(),
            Pattern::Incast => (1..n).map(|i| (i, 0)).collect(),
            Pattern::Bisection => {
                let h = n / 2;
                (0..h).flat_map(|i| [(i, i + h), (i + h, i)]).collect()
            }
            Pattern::Ring => Vec::new(),
            Pattern::KvCache => {
                let h = n / 2;
                (0..h).flat_map(|p| (h..n).map(move |d| (p, d))).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_of_four() {
        assert_eq!(Pattern::AllToAll.edges(4).len(), 12);
        assert_eq!(Pattern::Ring.edges(4), [(0, 1), (1, 2), (2, 3), (3, 0)]);
        assert_eq!(Pattern::Pipeline.edges(4), [(0, 1), (1, 2), (2, 3)]);
        assert_eq!(Pattern::Incast.edges(4), [(1, 0), (2, 0), (3, 0)]);
        assert_eq!(Pattern::Bisection.edges(4), [(0, 2), (2, 0), (1, 3), (3, 1)]);
        assert_eq!(Pattern::Ring.edges(2), [(0, 1), (1, 0)]);
        assert_eq!(Pattern::KvCache.edges(4), [(0, 2), (0, 3), (1, 2), (1, 3)]);
        assert_eq!(Pattern::KvCache.edges(2), [(0, 1)]);
        assert!(Pattern::KvCache.edges(1).is_empty());
        assert_eq!(Pattern::from_name("kv-cache"), Some(Pattern::KvCache));
        assert!(Pattern::Ring.edges(1).is_empty());
        for p in Pattern::ALL {
            assert_eq!(Pattern::from_name(p.name()), Some(p));
        }
    }
}
