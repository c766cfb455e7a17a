//! Order statistics shared by every analysis: spread, nearest-rank percentiles, the median.
//!
//! A spread is the mean, standard deviation, min and max of a per-step figure; the bootstrap
//! comparison of two samples lives with the run comparison (`runs::significance`).

use serde::Serialize;

/// Mean, population standard deviation, minimum and maximum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// How many samples.
    pub count: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation (0 for a single sample).
    pub stddev: f64,
    /// Smallest sample.
    pub min: u64,
    /// Largest sample.
    pub max: u64,
}

impl Spread {
    /// The spread of `samples`; `None` when there are none.
    pub fn of(samples: &[u64]) -> Option<Spread> {
        let mut acc = SpreadAcc::default();
        for &s in samples {
            acc.push(s);
        }
        acc.finish()
    }
}

/// Accumulates a [`Spread`] in one pass (Welford's algorithm).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SpreadAcc {
    count: u64,
    mean: f64,
    m2: f64,
    min: u64,
    max: u64,
}

impl SpreadAcc {
    /// Adds one sample.
    pub(crate) fn push(&mut self, x: u64) {
        if self.count == 0 {
            self.min = x;
            self.max = x;
        } else {
            self.min = self.min.min(x);
            self.max = self.max.max(x);
        }
        self.count += 1;
        let xf = x as f64;
        let delta = xf - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (xf - self.mean);
    }

    /// The spread so far; `None` when no sample was added.
    pub(crate) fn finish(&self) -> Option<Spread> {
        (self.count > 0).then(|| Spread {
            count: self.count,
            mean: self.mean,
            stddev: (self.m2 / self.count as f64).max(0.0).sqrt(),
            min: self.min,
            max: self.max,
        })
    }
}

/// The nearest-rank `p`-th percentile (0 < p ≤ 100) of `samples`: the smallest sample such that
/// at least `p` percent of the samples are less than or equal to it. Reorders `samples`
/// (linear-time selection). `None` for no samples.
///
/// ```
/// let mut v = vec![5, 1, 4, 2, 3];
/// assert_eq!(trace_analyze::percentile(&mut v, 95.0), Some(5));
/// let mut v: Vec<u64> = (1..=100).collect();
/// assert_eq!(trace_analyze::percentile(&mut v, 95.0), Some(95));
/// ```
pub fn percentile(samples: &mut [u64], p: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let n = samples.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    let idx = rank.clamp(1, n) - 1;
    let (_, v, _) = samples.select_nth_unstable(idx);
    Some(*v)
}

/// The median of `v` (mean of the two middle values for an even count); reorders `v`.
/// `None` when empty.
pub fn median(v: &mut [u64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let (lo, mid, _) = v.select_nth_unstable(n / 2);
    let upper = *mid as f64;
    if n % 2 == 1 {
        return Some(upper);
    }
    let lower = lo.iter().copied().max().unwrap_or(*mid) as f64;
    Some(f64::midpoint(lower, upper))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3, 1, 2]), Some(2.0));
        assert_eq!(median(&mut [4, 1, 3, 2]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn spread_matches_hand_values() {
        let s = Spread::of(&[2, 4, 4, 4, 5, 5, 7, 9]).unwrap();
        assert_eq!(s.count, 8);
        assert!((s.mean - 5.0).abs() < 1e-12);
        assert!((s.stddev - 2.0).abs() < 1e-12);
        assert_eq!((s.min, s.max), (2, 9));
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn percentile_nearest_rank() {
        let mut v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&mut v, 95.0), Some(19));
        let mut v = vec![7];
        assert_eq!(percentile(&mut v, 95.0), Some(7));
        assert_eq!(percentile(&mut [], 95.0), None);
    }
}
