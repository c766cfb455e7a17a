//! The sampler's account over a set of steps: the one rule every reader sums `sampler` lines by.
//!
//! A trace's `sampler` lines ([`SamplerEvent`], one per recorded step) say the rate asked for,
//! the samples taken and lost, the process's CPU time and the sampler's own part of it. Every
//! reader that turns samples into time (the hot-spot report, the sampled op table, the folded
//! export, the HTML report's flame graph) sums them here, so that a missing field means the
//! same everywhere: a figure that some step did not report is absent (`None`), never counted
//! as zero, and the sampled threads' CPU time of a step that does not say the sampler's own
//! part is all of its CPU time ([`SamplerEvent::sampled_cpu_ns`]).

use serde::Serialize;

use crate::schema::{SamplerEvent, SamplingSource};

/// The sampler's own account (honest numbers) over a set of steps: rate requested and
/// achieved, samples lost, and the CPU time its own threads used.
///
/// ```
/// use trace_record::SamplerAccount;
/// use trace_record::schema::SamplerEvent;
/// let line = |step, sampler_cpu_ns| SamplerEvent {
///     step, hz: 1000, taken: 10, lost: 1, cpu_ns: Some(12_000_000), sampler_cpu_ns,
///     ts: 0, dur: 20_000_000, source: None,
/// };
/// let both = [line(1, Some(2_000_000)), line(2, Some(2_000_000))];
/// let acc = SamplerAccount::over(&both);
/// assert_eq!((acc.steps, acc.taken, acc.lost), (2, 20, 2));
/// assert_eq!(acc.sampler_cpu_ns, Some(4_000_000));
/// // 20 samples over 20 ms of the sampled threads' CPU time: 1 kHz, 1 ms a sample.
/// assert_eq!(acc.effective_hz, Some(1000.0));
/// assert_eq!(acc.ns_per_sample(), Some(1_000_000.0));
/// // A step that does not say the sampler's own time: that figure is absent, and the step's
/// // whole CPU time counts as sampled.
/// let mixed = [line(1, Some(2_000_000)), line(2, None)];
/// assert_eq!(SamplerAccount::over(&mixed).sampler_cpu_ns, None);
/// // Lines that do not say their source (written before the field): none known.
/// assert!(acc.sources.is_empty() && !acc.source_unknown_in_some_steps());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SamplerAccount {
    /// Steps the sampler accounted for (in the selection).
    pub steps: u64,
    /// First and last of them.
    pub step_range: Option<(u64, u64)>,
    /// The requested rate (the largest, when steps differ), samples per CPU second.
    pub requested_hz: u64,
    /// Samples taken (the sum over the steps' `sampler` lines).
    pub taken: u64,
    /// Samples lost.
    pub lost: u64,
    /// Process CPU time over the steps, when every step reported it.
    pub cpu_ns: Option<u64>,
    /// The part of `cpu_ns` the sampler's own threads used (never sampled), when every step
    /// reported it (each step's clamped to its CPU time: [`SamplerEvent::own_cpu_ns`]).
    pub sampler_cpu_ns: Option<u64>,
    /// Wall time sampled.
    pub wall_ns: u64,
    /// Samples per second of the sampled threads' CPU time achieved: `taken` ÷ the steps'
    /// [`SamplerEvent::sampled_cpu_ns`] summed; `None` when a step did not report its CPU time
    /// or it was 0.
    pub effective_hz: Option<f64>,
    /// A sum above passed `u64::MAX` and stopped there (hostile or corrupt counts).
    pub saturated: bool,
    /// The sources that took the samples (the steps' `source` fields), each once, in the
    /// order first seen; empty when no step said (traces written before the field).
    pub sources: Vec<SamplingSource>,
    /// Steps whose line did not say its source.
    pub steps_without_source: u64,
}

impl Default for SamplerAccount {
    /// The account of no step: nothing taken, every CPU figure absent.
    fn default() -> Self {
        SamplerAccount::over(std::iter::empty())
    }
}

/// `*acc += x`, stopping at `u64::MAX` and setting `flag` when it would pass it.
fn add_sat(acc: &mut u64, x: u64, flag: &mut bool) {
    if let Some(v) = acc.checked_add(x) {
        *acc = v;
    } else {
        *acc = u64::MAX;
        *flag = true;
    }
}

impl SamplerAccount {
    /// The account over `steps` (each a step's `sampler` line; pass each step once). Linear.
    pub fn over<'a>(steps: impl IntoIterator<Item = &'a SamplerEvent>) -> SamplerAccount {
        let mut acc = SamplerAccount {
            steps: 0,
            step_range: None,
            requested_hz: 0,
            taken: 0,
            lost: 0,
            cpu_ns: Some(0),
            sampler_cpu_ns: Some(0),
            wall_ns: 0,
            effective_hz: None,
            saturated: false,
            sources: Vec::new(),
            steps_without_source: 0,
        };
        // CPU time of the sampled threads (see `SamplerEvent::sampled_cpu_ns`).
        let mut sampled_ns = Some(0u64);
        for st in steps {
            acc.steps += 1;
            acc.step_range = Some(match acc.step_range {
                None => (st.step, st.step),
                Some((a, b)) => (a.min(st.step), b.max(st.step)),
            });
            acc.requested_hz = acc.requested_hz.max(st.hz);
            match st.source {
                // At most three sources: the search is constant time.
                Some(s) if !acc.sources.contains(&s) => acc.sources.push(s),
                Some(_) => {}
                None => acc.steps_without_source += 1,
            }
            add_sat(&mut acc.taken, st.taken, &mut acc.saturated);
            add_sat(&mut acc.lost, st.lost, &mut acc.saturated);
            add_sat(&mut acc.wall_ns, st.dur, &mut acc.saturated);
            let mut sum = |acc_ns: Option<u64>, ns: Option<u64>| match (acc_ns, ns) {
                (Some(mut a), Some(b)) => {
                    add_sat(&mut a, b, &mut acc.saturated);
                    Some(a)
                }
                _ => None,
            };
            acc.cpu_ns = sum(acc.cpu_ns, st.cpu_ns);
            acc.sampler_cpu_ns = sum(acc.sampler_cpu_ns, st.own_cpu_ns());
            sampled_ns = sum(sampled_ns, st.sampled_cpu_ns());
        }
        if acc.steps == 0 {
            acc.cpu_ns = None;
            acc.sampler_cpu_ns = None;
            sampled_ns = None;
        }
        acc.effective_hz = sampled_ns
            .filter(|&ns| ns > 0)
            .map(|ns| acc.taken as f64 / (ns as f64 / 1e9));
        acc
    }

    /// Nanoseconds of the sampled threads' CPU per sample (the inverse of
    /// [`effective_hz`](Self::effective_hz)), else the requested period; `None` when the
    /// sampler said neither.
    pub fn ns_per_sample(&self) -> Option<f64> {
        match self.effective_hz {
            Some(hz) if hz > 0.0 => Some(1e9 / hz),
            _ if self.requested_hz > 0 => Some(1e9 / self.requested_hz as f64),
            _ => None,
        }
    }

    /// Whether some steps said their source and others did not (a trace joined from two
    /// writers); all steps not saying it is a trace written before the field.
    pub fn source_unknown_in_some_steps(&self) -> bool {
        !self.sources.is_empty() && self.steps_without_source > 0
    }

    /// The sources as text: `ticker`, `ticker, itimer`, or `not recorded` (a trace written
    /// before the field).
    pub fn sources_text(&self) -> String {
        if self.sources.is_empty() {
            return "not recorded".to_string();
        }
        let words: Vec<&str> = self.sources.iter().map(|s| s.as_str()).collect();
        words.join(", ")
    }

    /// The sampler's own threads' CPU time and its share of the process's over the steps,
    /// when every step said it and some CPU time was used.
    pub fn sampler_share(&self) -> Option<(u64, f64)> {
        let (own, all) = (self.sampler_cpu_ns?, self.cpu_ns?);
        (all > 0).then(|| (own, own as f64 / all as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(step: u64, taken: u64, cpu_ns: Option<u64>, own: Option<u64>) -> SamplerEvent {
        SamplerEvent {
            step,
            hz: 1000,
            taken,
            lost: 0,
            cpu_ns,
            sampler_cpu_ns: own,
            ts: 0,
            dur: 1,
            source: None,
        }
    }

    #[test]
    fn sources_are_listed_once_each_and_lines_without_one_counted() {
        let with = |step, source| SamplerEvent {
            source,
            ..line(step, 1, Some(1_000_000), None)
        };
        let acc = SamplerAccount::over(&[
            with(1, Some(SamplingSource::Ticker)),
            with(2, Some(SamplingSource::Ticker)),
            with(3, Some(SamplingSource::Itimer)),
        ]);
        assert_eq!(
            acc.sources,
            [SamplingSource::Ticker, SamplingSource::Itimer]
        );
        assert_eq!(acc.sources_text(), "ticker, itimer");
        assert!(!acc.source_unknown_in_some_steps());
        let old = SamplerAccount::over(&[with(1, None)]);
        assert_eq!(
            (old.sources_text().as_str(), old.steps_without_source),
            ("not recorded", 1)
        );
        assert!(!old.source_unknown_in_some_steps());
        let mixed =
            SamplerAccount::over(&[with(1, None), with(2, Some(SamplingSource::PerfEvent))]);
        assert!(mixed.source_unknown_in_some_steps());
        // JSON names the source by its wire word.
        let v = serde_json::to_value(&mixed).unwrap();
        assert_eq!(v["sources"], serde_json::json!(["perf_event"]));
    }

    #[test]
    fn no_step_is_an_account_of_absent_figures() {
        let acc = SamplerAccount::default();
        assert_eq!(acc.steps, 0);
        assert_eq!(
            (acc.cpu_ns, acc.sampler_cpu_ns, acc.effective_hz),
            (None, None, None)
        );
        assert_eq!(acc.ns_per_sample(), None);
        assert_eq!(acc.sampler_share(), None);
    }

    #[test]
    fn a_step_without_cpu_time_makes_the_rate_fall_back_to_the_requested_one() {
        let acc =
            SamplerAccount::over(&[line(1, 5, Some(5_000_000), None), line(2, 5, None, None)]);
        assert_eq!(acc.cpu_ns, None);
        assert_eq!(acc.effective_hz, None);
        assert_eq!(acc.ns_per_sample(), Some(1_000_000.0));
        assert_eq!(acc.step_range, Some((1, 2)));
    }

    #[test]
    fn the_sampler_own_time_is_clamped_per_step_and_left_out_of_the_rate() {
        // Step 2 claims more sampler time than the process used: clamped to its CPU time.
        let acc = SamplerAccount::over(&[
            line(1, 4, Some(6_000_000), Some(2_000_000)),
            line(2, 0, Some(1_000_000), Some(9_000_000)),
        ]);
        assert_eq!(acc.sampler_cpu_ns, Some(3_000_000));
        assert_eq!(acc.sampler_share(), Some((3_000_000, 3.0 / 7.0)));
        // 4 samples over 4 ms of sampled CPU.
        assert_eq!(acc.effective_hz, Some(1000.0));
    }

    #[test]
    fn sums_stop_at_the_top_and_say_so() {
        let acc = SamplerAccount::over(&[line(1, u64::MAX, None, None), line(2, 1, None, None)]);
        assert_eq!(acc.taken, u64::MAX);
        assert!(acc.saturated);
    }
}
