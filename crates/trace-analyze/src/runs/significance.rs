//! Whether a change is real: bootstrap intervals of the change in a median, verdicts, seeds.

use rand_xoshiro::SplitMix64;
use rand_xoshiro::rand_core::{Rng, SeedableRng};
use serde::Serialize;

use crate::stats::median;

/// The seed of the bootstrap in [`compare_samples`]: fixed, so one pair of traces always gives
/// the same intervals and verdicts.
pub const BOOTSTRAP_SEED: u64 = 0x7472_6163_6567_7261; // "tracegra"

/// The confidence level of [`Change::ci_low`] / [`Change::ci_high`]: 95 %.
pub const CONFIDENCE: f64 = 0.95;

/// The fewest samples on each side for a verdict other than [`Verdict::TooFewSamples`].
pub const MIN_SAMPLES: usize = 3;

/// What a change in medians amounts to, given the noise of the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The confidence interval of the relative change contains 0: the difference is within
    /// the step-to-step noise. Also a change whose interval excludes 0 but whose size is below
    /// the minimum effect ([`Change::negligible`]).
    WithinNoise,
    /// The candidate is slower (larger): the whole interval is above 0.
    Regression,
    /// The candidate is faster (smaller): the whole interval is below 0.
    Improvement,
    /// Fewer than [`MIN_SAMPLES`] samples on a side: no interval, no verdict.
    TooFewSamples,
}

impl Verdict {
    /// A short label for tables: `within noise`, `regression`, `improvement`, `too few steps`.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::WithinNoise => "within noise",
            Verdict::Regression => "regression",
            Verdict::Improvement => "improvement",
            Verdict::TooFewSamples => "too few steps",
        }
    }
}

/// The change of a per-step figure from a base to a candidate sample: medians, the relative
/// change of the medians and its bootstrap confidence interval over steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Change {
    /// Samples (steps) in the base.
    pub base_n: usize,
    /// Samples (steps) in the candidate.
    pub candidate_n: usize,
    /// The base's median.
    pub base_median: f64,
    /// The candidate's median.
    pub candidate_median: f64,
    /// `(candidate_median - base_median) / base_median` (0.25 = 25 % more); `None` when the
    /// base median is 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Lower bound of the [`CONFIDENCE`] interval of `ratio` (percentile bootstrap, both
    /// samples resampled with replacement); absent with too few samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_low: Option<f64>,
    /// Upper bound of the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_high: Option<f64>,
    /// Regression, improvement, within noise, or too few samples to say.
    pub verdict: Verdict,
    /// Runs on each side, when the interval resampled runs and then steps within them
    /// ([`compare_run_samples`]); absent for one trace a side (the interval then covers the
    /// step-to-step spread only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<(usize, usize)>,
    /// True when the runs were paired by position (base run `i` with candidate run `i`,
    /// recorded one after the other) and the interval resampled pairs, so that what the
    /// machine did while a pair ran hits both sides alike. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub paired: bool,
    /// True when the interval lies on one side of 0 but the change of the medians is below
    /// the minimum effect ([`Change::with_min_effect`]): then the verdict is
    /// [`Verdict::WithinNoise`]. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub negligible: bool,
}

impl Change {
    /// The verdict as the tables show it: [`Verdict::label`], or `below min effect` for a
    /// [`Change::negligible`] change (never a regression).
    pub fn label(&self) -> &'static str {
        if self.negligible {
            "below min effect"
        } else {
            self.verdict.label()
        }
    }

    /// The smallest change of a median, in nanoseconds per step, that a comparison of times calls
    /// a regression or an improvement ([`Change::with_min_effect`]): 1 µs. A shift below it (e.g.
    /// +11 ns on a 370 ns span) is [`Verdict::WithinNoise`] with [`Change::negligible`] set, however
    /// narrow its interval: timer resolution, cache state and frequency scaling move sub-µs figures
    /// by that much between runs of one program.
    pub const MIN_EFFECT_NS: f64 = 1_000.0;

    /// The smallest relative change of a median that a comparison of times calls a regression or
    /// an improvement ([`Change::with_min_effect`]): 1 % of the base's median. A machine that is
    /// busier or cooler between two runs shifts every figure by about that much.
    pub const MIN_EFFECT_RATIO: f64 = 0.01;

    /// The same change with a minimum effect: a [`Verdict::Regression`] or
    /// [`Verdict::Improvement`] whose medians differ by less than `abs` (in the samples' unit,
    /// e.g. [`Change::MIN_EFFECT_NS`]) or by less than `ratio` of the base's median (e.g.
    /// [`Change::MIN_EFFECT_RATIO`]) becomes [`Verdict::WithinNoise`] with [`Change::negligible`] set.
    /// Both floors apply: a change must clear the larger one.
    ///
    /// ```
    /// use trace_analyze::runs::{BOOTSTRAP_SEED, compare_samples};
    /// use trace_analyze::{Change, Verdict};
    /// // A 370 ns span 3 % slower (+11 ns) with a tight interval: real, but below 1 µs.
    /// let base = [370u64, 371, 369, 370, 370, 371, 369, 370];
    /// let cand = [381u64, 382, 380, 381, 381, 382, 380, 381];
    /// let c = compare_samples(&base, &cand, BOOTSTRAP_SEED).unwrap();
    /// assert_eq!(c.verdict, Verdict::Regression);
    /// let c = c.with_min_effect(Change::MIN_EFFECT_NS, Change::MIN_EFFECT_RATIO);
    /// assert_eq!(c.verdict, Verdict::WithinNoise);
    /// assert!(c.negligible && !c.regresses_beyond(1.0));
    /// ```
    #[must_use]
    pub fn with_min_effect(mut self, abs: f64, ratio: f64) -> Change {
        if matches!(self.verdict, Verdict::Regression | Verdict::Improvement) {
            let shift = (self.candidate_median - self.base_median).abs();
            let floor = abs.max(ratio * self.base_median.abs());
            // A NaN shift (never from finite medians) is no effect either.
            if shift.is_nan() || shift < floor {
                self.verdict = Verdict::WithinNoise;
                self.negligible = true;
            }
        }
        self
    }

    /// True when this is a [`Verdict::Regression`] whose relative change is larger than
    /// `pct` percent *and* whose whole confidence interval lies above 0 (outside the noise).
    /// A comparison's changes carry the minimum effect already ([`Change::with_min_effect`]),
    /// so a change below it never counts, whatever `pct`.
    pub fn regresses_beyond(&self, pct: f64) -> bool {
        self.verdict == Verdict::Regression && self.ratio.is_some_and(|r| r * 100.0 > pct)
    }
}

/// Uniform in `0..n` (n > 0), by multiply-shift, from the workspace's one seeded generator
/// (SplitMix64: a fixed, portable algorithm, so the bootstrap gives the same interval for a
/// seed on every platform).
fn below(rng: &mut SplitMix64, n: usize) -> usize {
    ((u128::from(rng.next_u64()) * n as u128) >> 64) as usize
}

/// How many bootstrap resamples [`compare_samples`] draws for samples of `n` values in all:
/// 2,000, fewer for very long runs so that one comparison stays O(10^7) work per row (at least
/// 200).
pub(crate) fn bootstrap_resamples(n: usize) -> usize {
    (20_000_000 / n.max(1)).clamp(200, 2_000)
}

/// Compares two samples of a per-step figure (e.g. step time, or an op's time per step):
/// medians, the relative change of the medians, and its percentile-bootstrap [`CONFIDENCE`]
/// interval from resampling both with replacement (2,000 times, fewer for very long runs but at
/// least 200; generator seeded with `seed`). The verdict is [`Verdict::WithinNoise`] when the interval contains 0.
/// `None` when either sample is empty.
///
/// ```
/// use trace_analyze::runs::{BOOTSTRAP_SEED, compare_samples};
/// use trace_analyze::Verdict;
/// let base = [100, 103, 98, 101, 99, 102, 100, 97];
/// let same = [101, 99, 100, 102, 98, 100, 103, 97];
/// let slower = [130, 133, 128, 131, 129, 132, 130, 127];
/// assert_eq!(compare_samples(&base, &same, BOOTSTRAP_SEED).unwrap().verdict, Verdict::WithinNoise);
/// assert_eq!(compare_samples(&base, &slower, BOOTSTRAP_SEED).unwrap().verdict, Verdict::Regression);
/// ```
pub fn compare_samples(base: &[u64], candidate: &[u64], seed: u64) -> Option<Change> {
    let (mut rb, mut rc) = (vec![0u64; base.len()], vec![0u64; candidate.len()]);
    bootstrap_change(base.to_vec(), candidate.to_vec(), None, seed, |rng| {
        for x in &mut rb {
            *x = base[below(rng, base.len())];
        }
        for x in &mut rc {
            *x = candidate[below(rng, candidate.len())];
        }
        Some((median(&mut rb)?, median(&mut rc)?))
    })
}

/// The change of two pooled samples (`base`, `candidate`, reordered here) with its bootstrap
/// interval: `draw` makes one resample (with the generator seeded by `seed`) and returns its
/// two medians. The one place where the point estimate, the too-few-samples and zero-base
/// rules, the number of resamples and the percentile interval are decided, for
/// [`compare_samples`] and [`compare_run_samples`] alike.
fn bootstrap_change(
    mut base: Vec<u64>,
    mut candidate: Vec<u64>,
    runs: Option<(usize, usize)>,
    seed: u64,
    mut draw: impl FnMut(&mut SplitMix64) -> Option<(f64, f64)>,
) -> Option<Change> {
    let (nb, nc) = (base.len(), candidate.len());
    let base_median = median(&mut base)?;
    let candidate_median = median(&mut candidate)?;
    let rel = |bm: f64, cm: f64| (bm != 0.0).then(|| (cm - bm) / bm);
    let ratio = rel(base_median, candidate_median);
    let mut change = Change {
        base_n: nb,
        candidate_n: nc,
        base_median,
        candidate_median,
        ratio,
        ci_low: None,
        ci_high: None,
        verdict: Verdict::TooFewSamples,
        runs,
        paired: false,
        negligible: false,
    };
    if nb < MIN_SAMPLES || nc < MIN_SAMPLES {
        return Some(change);
    }
    let Some(ratio) = ratio else {
        change.verdict = zero_base_verdict(candidate_median);
        return Some(change);
    };
    let rounds = bootstrap_resamples(nb + nc);
    let mut rng = SplitMix64::seed_from_u64(seed);
    let mut stats: Vec<f64> = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let Some((bm, cm)) = draw(&mut rng) else {
            continue;
        };
        // A resampled base median of 0 (many zero samples): the change is unbounded.
        stats.push(rel(bm, cm).unwrap_or(if cm > 0.0 { f64::INFINITY } else { 0.0 }));
    }
    set_interval(&mut change, stats, ratio);
    Some(change)
}

/// The verdict when the base median is 0 (no relative change): equal medians are within
/// noise, a larger candidate is a regression.
fn zero_base_verdict(candidate_median: f64) -> Verdict {
    if candidate_median == 0.0 {
        Verdict::WithinNoise
    } else {
        Verdict::Regression
    }
}

/// Sets `change`'s [`CONFIDENCE`] interval from the bootstrap ratios `stats` (percentiles;
/// `ratio` when there are none) and its verdict from where the interval lies.
fn set_interval(change: &mut Change, mut stats: Vec<f64>, ratio: f64) {
    stats.sort_by(f64::total_cmp);
    let tail = (1.0 - CONFIDENCE) / 2.0;
    let at = |q: f64| -> f64 {
        let i = ((q * stats.len() as f64).floor() as usize).min(stats.len().saturating_sub(1));
        stats.get(i).copied().unwrap_or(ratio)
    };
    let (lo, hi) = (at(tail), at(1.0 - tail));
    change.ci_low = Some(lo);
    change.ci_high = Some(hi);
    change.verdict = if lo > 0.0 {
        Verdict::Regression
    } else if hi < 0.0 {
        Verdict::Improvement
    } else {
        Verdict::WithinNoise
    };
}

/// Compares a per-step figure measured in several runs on each side (`base[r]`: the samples
/// of base run `r`): medians of all steps pooled, their relative change, and a [`CONFIDENCE`]
/// interval from a two-level bootstrap that resamples runs with replacement and then steps
/// within each chosen run, so that run-to-run variation (another machine state, another
/// process) widens the interval as much as the steps' own spread does. With one run a side
/// it is [`compare_samples`]. Runs without samples are left out; `None` when a side has none.
///
/// ```
/// use trace_analyze::runs::{BOOTSTRAP_SEED, compare_run_samples};
/// use trace_analyze::Verdict;
/// // Two runs each side whose levels differ by 20 % from run to run: within noise.
/// let (a1, a2) = ([100u64, 101, 99, 100], [120u64, 121, 119, 120]);
/// let (b1, b2) = ([121u64, 119, 120, 120], [100u64, 99, 101, 100]);
/// let c = compare_run_samples(&[&a1, &a2], &[&b1, &b2], BOOTSTRAP_SEED).unwrap();
/// assert_eq!(c.verdict, Verdict::WithinNoise);
/// assert_eq!(c.runs, Some((2, 2)));
/// ```
pub fn compare_run_samples(base: &[&[u64]], candidate: &[&[u64]], seed: u64) -> Option<Change> {
    let base: Vec<&[u64]> = base.iter().copied().filter(|r| !r.is_empty()).collect();
    let candidate: Vec<&[u64]> = candidate
        .iter()
        .copied()
        .filter(|r| !r.is_empty())
        .collect();
    if base.len() <= 1 && candidate.len() <= 1 {
        return compare_samples(base.first()?, candidate.first()?, seed);
    }
    let pooled =
        |runs: &[&[u64]]| -> Vec<u64> { runs.iter().flat_map(|r| r.iter().copied()).collect() };
    let (pb, pc) = (pooled(&base), pooled(&candidate));
    let (mut rb, mut rc) = (Vec::with_capacity(pb.len()), Vec::with_capacity(pc.len()));
    // Runs with replacement, then steps with replacement within each chosen run.
    let resample = |runs: &[&[u64]], out: &mut Vec<u64>, rng: &mut SplitMix64| {
        out.clear();
        for _ in 0..runs.len() {
            let run = runs[below(rng, runs.len())];
            for _ in 0..run.len() {
                out.push(run[below(rng, run.len())]);
            }
        }
    };
    let runs = Some((base.len(), candidate.len()));
    bootstrap_change(pb, pc, runs, seed, |rng| {
        resample(&base, &mut rb, rng);
        resample(&candidate, &mut rc, rng);
        Some((median(&mut rb)?, median(&mut rc)?))
    })
}

/// Compares a per-step figure measured in runs recorded in pairs (`base[i]` and
/// `candidate[i]` one right after the other, the order alternating from pair to pair): the
/// medians of all steps pooled and their relative change, as [`compare_run_samples`], but the
/// [`CONFIDENCE`] interval resamples *pairs* with replacement (the same pairs on both sides)
/// and then steps within each chosen run. A machine that is slower while one pair runs slows
/// both of its runs, so its drift moves both resampled medians together and cancels in their
/// ratio, where resampling each side's runs on its own would count it as noise (or, when all
/// base runs came before all candidate runs, as a change). Pairs where a side has no samples
/// are left out; with fewer than two pairs it is [`compare_run_samples`]. `None` when no pair
/// has samples on both sides.
pub(crate) fn compare_paired_run_samples(
    base: &[&[u64]],
    candidate: &[&[u64]],
    seed: u64,
) -> Option<Change> {
    let pairs: Vec<(&[u64], &[u64])> = base
        .iter()
        .zip(candidate)
        .filter(|(b, c)| !b.is_empty() && !c.is_empty())
        .map(|(b, c)| (*b, *c))
        .collect();
    if pairs.len() < 2 {
        let (b, c): (Vec<&[u64]>, Vec<&[u64]>) = pairs.into_iter().unzip();
        return compare_run_samples(&b, &c, seed);
    }
    let pooled = |side: usize| -> Vec<u64> {
        pairs
            .iter()
            .flat_map(|p| if side == 0 { p.0 } else { p.1 }.iter().copied())
            .collect()
    };
    let (pb, pc) = (pooled(0), pooled(1));
    let (mut rb, mut rc) = (Vec::with_capacity(pb.len()), Vec::with_capacity(pc.len()));
    let n = pairs.len();
    let mut change = bootstrap_change(pb, pc, Some((n, n)), seed, |rng| {
        rb.clear();
        rc.clear();
        // Pairs with replacement, then steps with replacement within each run of the pair.
        for _ in 0..n {
            let (b, c) = pairs[below(rng, n)];
            for _ in 0..b.len() {
                rb.push(b[below(rng, b.len())]);
            }
            for _ in 0..c.len() {
                rc.push(c[below(rng, c.len())]);
            }
        }
        Some((median(&mut rb)?, median(&mut rc)?))
    })?;
    change.paired = true;
    Some(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic "noisy" samples around `center` (±spread).
    fn noisy(center: u64, spread: u64, n: usize, seed: u64) -> Vec<u64> {
        let mut r = SplitMix64::seed_from_u64(seed);
        (0..n)
            .map(|_| center - spread + r.next_u64() % (2 * spread + 1))
            .collect()
    }

    #[test]
    fn bootstrap_says_within_noise_for_an_equal_pair_and_regression_for_a_shifted_one() {
        let base = noisy(1_000_000, 200_000, 40, 1);
        let same = noisy(1_000_000, 200_000, 40, 2);
        let c = compare_samples(&base, &same, BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.verdict, Verdict::WithinNoise, "{c:?}");
        let (lo, hi) = (c.ci_low.unwrap(), c.ci_high.unwrap());
        assert!(lo < 0.0 && hi > 0.0 && lo < c.ratio.unwrap() && c.ratio.unwrap() < hi);
        assert!(!c.regresses_beyond(0.0));

        let shifted: Vec<u64> = same.iter().map(|x| x + 400_000).collect();
        let c = compare_samples(&base, &shifted, BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.verdict, Verdict::Regression, "{c:?}");
        assert!(c.ci_low.unwrap() > 0.0);
        assert!(c.regresses_beyond(10.0));
        assert!(!c.regresses_beyond(80.0));

        let faster: Vec<u64> = same.iter().map(|x| x - 400_000).collect();
        let c = compare_samples(&base, &faster, BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.verdict, Verdict::Improvement, "{c:?}");
        assert!(!c.regresses_beyond(0.0));
    }

    #[test]
    fn bootstrap_is_reproducible_with_its_fixed_seed() {
        let base = noisy(500, 100, 25, 3);
        let cand = noisy(520, 100, 25, 4);
        let a = compare_samples(&base, &cand, BOOTSTRAP_SEED).unwrap();
        let b = compare_samples(&base, &cand, BOOTSTRAP_SEED).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn one_outlier_step_is_noise_not_a_huge_regression() {
        // An op that takes ~10 µs but once 500 µs (host-timing noise): the median does not move.
        let base = vec![10_000, 10_200, 9_900, 10_100, 10_050, 9_950];
        let cand = vec![10_100, 500_000, 9_800, 10_000, 10_150, 9_900];
        let c = compare_samples(&base, &cand, BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.verdict, Verdict::WithinNoise, "{c:?}");
        assert!(c.ratio.unwrap().abs() < 0.05);
    }

    #[test]
    fn too_few_samples_give_no_interval() {
        let c = compare_samples(&[10, 12], &[30, 31], BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.verdict, Verdict::TooFewSamples);
        assert!(c.ci_low.is_none() && !c.regresses_beyond(0.0));
        assert!(compare_samples(&[], &[1], BOOTSTRAP_SEED).is_none());
    }

    /// Pairs whose level moves by ±30 % with the machine (the same for both runs of a pair),
    /// the candidate 10 % slower in every pair: resampling each side's runs on its own counts
    /// the machine's swings as noise and sees nothing; resampling pairs cancels them and sees
    /// the regression.
    #[test]
    fn pairs_cancel_a_drift_both_runs_of_a_pair_share() {
        let levels = [1_000_000u64, 1_300_000, 700_000, 1_200_000, 800_000];
        let runs = |pct: u64| -> Vec<Vec<u64>> {
            levels
                .iter()
                .enumerate()
                .map(|(i, &l)| noisy(l * pct / 100, 5_000, 10, i as u64 + pct))
                .collect()
        };
        let (a, b) = (runs(100), runs(110));
        let (sa, sb): (Vec<&[u64]>, Vec<&[u64]>) = (
            a.iter().map(Vec::as_slice).collect(),
            b.iter().map(Vec::as_slice).collect(),
        );
        let unpaired = compare_run_samples(&sa, &sb, BOOTSTRAP_SEED).unwrap();
        assert_eq!(unpaired.verdict, Verdict::WithinNoise, "{unpaired:?}");
        let paired = compare_paired_run_samples(&sa, &sb, BOOTSTRAP_SEED).unwrap();
        assert_eq!(paired.verdict, Verdict::Regression, "{paired:?}");
        assert!(paired.paired && paired.runs == Some((5, 5)));
        assert!(paired.regresses_beyond(5.0));
        // An empty run drops its pair.
        let mut sb2 = sb.clone();
        sb2[0] = &[];
        let c = compare_paired_run_samples(&sa, &sb2, BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.runs, Some((4, 4)));
    }

    #[test]
    fn the_minimum_effect_applies_to_both_directions_and_both_floors() {
        let base = noisy(100_000, 100, 30, 5);
        // 500 ns (0.5 %) faster: below both floors.
        let faster: Vec<u64> = base.iter().map(|x| x - 500).collect();
        let c = compare_samples(&base, &faster, BOOTSTRAP_SEED).unwrap();
        assert_eq!(c.verdict, Verdict::Improvement, "{c:?}");
        let c = c.with_min_effect(Change::MIN_EFFECT_NS, Change::MIN_EFFECT_RATIO);
        assert_eq!(c.verdict, Verdict::WithinNoise);
        assert!(c.negligible);
        // 0.8 % slower on a 1 ms median: 8 µs clears 1 µs but not 1 %.
        let base = noisy(1_000_000, 100, 30, 6);
        let slower: Vec<u64> = base.iter().map(|x| x + 8_000).collect();
        let c = compare_samples(&base, &slower, BOOTSTRAP_SEED)
            .unwrap()
            .with_min_effect(Change::MIN_EFFECT_NS, Change::MIN_EFFECT_RATIO);
        assert!(c.negligible && c.verdict == Verdict::WithinNoise, "{c:?}");
        // 2 % slower: clears both.
        let slower: Vec<u64> = base.iter().map(|x| x + 20_000).collect();
        let c = compare_samples(&base, &slower, BOOTSTRAP_SEED)
            .unwrap()
            .with_min_effect(Change::MIN_EFFECT_NS, Change::MIN_EFFECT_RATIO);
        assert!(!c.negligible && c.verdict == Verdict::Regression, "{c:?}");
    }

    #[test]
    fn long_runs_draw_fewer_resamples() {
        assert_eq!(bootstrap_resamples(10), 2_000);
        assert_eq!(bootstrap_resamples(1_000_000), 200);
    }
}
