//! Gradients you can act on: per parameter its state and norm per step, and the autograd graph.
//!
//! Parameters that never received a gradient come first, non-finite ones are flagged; the
//! autograd graph's size and fingerprint are given per step.

use graph_core::StableHasher;
use serde::Serialize;
use trace_record::schema::GradientState;

use crate::model::intern::{FastMap, Sym};
use crate::model::trace::Trace;

/// One gradient fact of a parameter in one step.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct GradientPoint {
    /// The recorded step index (absent when the fact lies outside any step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// What was found.
    pub state: GradientState,
    /// The L2 norm, when recorded (finite gradients only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub norm: Option<f64>,
}

/// What a parameter's gradients say over the run, worst first.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum GradientVerdict {
    /// Never received a gradient (every fact `missing`): the parameter is not trained.
    Never,
    /// At least one gradient had NaN or infinite entries, or the recorder wrote a norm that no
    /// gradient can have (negative or non-finite: [`ParamGradients::invalid_norms`]). Either
    /// way the parameter's gradients cannot be trusted, so it is never [`GradientVerdict::Ok`].
    NonFinite,
    /// Some facts were `missing` and others not: gradients come and go.
    Sometimes,
    /// Every gradient was exactly zero.
    AlwaysZero,
    /// Finite gradients (present, possibly zero in some steps).
    Ok,
}

impl GradientVerdict {
    /// `never`, `non_finite`, `sometimes`, `always_zero`, `ok`.
    pub fn as_str(self) -> &'static str {
        match self {
            GradientVerdict::Never => "never",
            GradientVerdict::NonFinite => "non_finite",
            GradientVerdict::Sometimes => "sometimes",
            GradientVerdict::AlwaysZero => "always_zero",
            GradientVerdict::Ok => "ok",
        }
    }
}

/// One parameter's gradients.
#[derive(Debug, Clone, Serialize)]
pub struct ParamGradients {
    /// The parameter's name.
    pub param: String,
    /// The verdict over the run.
    pub verdict: GradientVerdict,
    /// Facts by state.
    pub present: u64,
    /// `missing` facts.
    pub missing: u64,
    /// `zero` facts.
    pub zero: u64,
    /// `non_finite` facts.
    pub non_finite: u64,
    /// Facts whose recorded norm is invalid: negative, NaN or infinite (an L2 norm is a finite
    /// number ≥ 0 for a finite gradient). Such a parameter is [`GradientVerdict::NonFinite`];
    /// the invalid norms stay in `per_step` and are left out of `last_norm` and `max_norm`.
    /// Omitted when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub invalid_norms: u64,
    /// The last recorded (valid) norm, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_norm: Option<f64>,
    /// The largest recorded (valid) norm, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_norm: Option<f64>,
    /// Every fact, in trace order.
    pub per_step: Vec<GradientPoint>,
}

/// True for 0 (serde's `skip_serializing_if`).
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// True for a norm an L2 norm can be: finite and not negative.
fn valid_norm(n: f64) -> bool {
    n.is_finite() && n >= 0.0
}

/// The autograd graph kept alive at one step's backward (from trace-candle's `autograd`
/// tensor events).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AutogradStep {
    /// The recorded step index (absent outside any step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Tensors the graph kept alive (variables excluded).
    pub nodes: u64,
    /// Their logical bytes, each tensor counted in full (views included).
    pub tensor_bytes: u64,
    /// Distinct storages behind them (views share their base's; views of parameters are
    /// none), when the recorder reported them (trace-candle's autograd counters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storages: Option<u64>,
    /// The logical bytes of those storages, each counted once: what the graph really keeps
    /// alive, the figure the memory timeline adds up. Absent in traces without the counter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_bytes: Option<u64>,
    /// A fingerprint (32 hex digits) over the nodes' shapes and dtypes in execution order:
    /// equal for steps whose backward keeps the same structure alive.
    pub fingerprint: String,
}

/// The gradients report: parameters worst first (never trained, non-finite, intermittent,
/// always zero, fine), then by name.
#[derive(Debug, Clone, Serialize)]
pub struct GradientReport {
    /// Parameters with at least one gradient fact.
    pub params: Vec<ParamGradients>,
    /// How many never received a gradient.
    pub never: usize,
    /// How many had a non-finite gradient or an invalid norm ([`GradientVerdict::NonFinite`]).
    pub non_finite: usize,
    /// Recorded step indices that hold gradient facts, in order.
    pub steps: Vec<u64>,
    /// The autograd graph per step that recorded one.
    pub autograd: Vec<AutogradStep>,
    /// The recorder ran a backward with no registered parameter (so it had no gradient to
    /// look up): why a trace with a backward has no gradient facts. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub backward_without_parameters: bool,
}

/// What to tell a user whose trace has no gradient facts, given whether the recorder ran a
/// backward with no registered parameter ([`GradientReport::backward_without_parameters`]).
pub fn no_gradient_facts_reason(backward_without_parameters: bool) -> &'static str {
    if backward_without_parameters {
        "no gradient facts: backward was recorded, but no parameters were registered to look \
         gradients up for (register them with trace-candle's capture.parameters_varmap(&varmap) \
         or capture.parameters(..))"
    } else {
        "no gradient facts recorded (record them with trace-candle's Capture::backward or \
         record_gradients)"
    }
}

/// Builds the gradients report. O(n log n) in the gradient facts and autograd nodes.
pub fn gradient_report(trace: &Trace) -> GradientReport {
    let step_index = |s: Option<u32>| s.and_then(|i| trace.steps.get(i as usize)).map(|s| s.index);
    let mut by_param: FastMap<Sym, usize> = FastMap::default();
    let mut params: Vec<(Sym, Vec<GradientPoint>)> = Vec::new();
    let mut steps: Vec<u64> = Vec::new();
    for g in &trace.gradient_facts {
        let i = *by_param.entry(g.param).or_insert_with(|| {
            params.push((g.param, Vec::new()));
            params.len() - 1
        });
        let step = step_index(g.step);
        if let Some(s) = step
            && steps.last() != Some(&s)
            && !steps.contains(&s)
        {
            steps.push(s);
        }
        params[i].1.push(GradientPoint {
            step,
            state: g.state,
            norm: g.norm,
        });
    }
    trace.work.add(trace.gradient_facts.len() as u64);
    steps.sort_unstable();
    let mut out: Vec<ParamGradients> = params
        .into_iter()
        .map(|(sym, per_step)| {
            let count =
                |st: GradientState| per_step.iter().filter(|p| p.state == st).count() as u64;
            let (present, missing, zero, non_finite) = (
                count(GradientState::Present),
                count(GradientState::Missing),
                count(GradientState::Zero),
                count(GradientState::NonFinite),
            );
            let total = per_step.len() as u64;
            let invalid_norms = per_step
                .iter()
                .filter(|p| p.norm.is_some_and(|n| !valid_norm(n)))
                .count() as u64;
            let verdict = if missing == total {
                GradientVerdict::Never
            } else if non_finite > 0 || invalid_norms > 0 {
                GradientVerdict::NonFinite
            } else if missing > 0 {
                GradientVerdict::Sometimes
            } else if zero == total {
                GradientVerdict::AlwaysZero
            } else {
                GradientVerdict::Ok
            };
            let norms = per_step
                .iter()
                .filter_map(|p| p.norm)
                .filter(|&n| valid_norm(n));
            ParamGradients {
                param: trace.str(sym).to_string(),
                verdict,
                present,
                missing,
                zero,
                non_finite,
                invalid_norms,
                last_norm: per_step
                    .iter()
                    .rev()
                    .find_map(|p| p.norm.filter(|&n| valid_norm(n))),
                max_norm: norms.fold(None, |m: Option<f64>, n| Some(m.map_or(n, |m| m.max(n)))),
                per_step,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        a.verdict
            .cmp(&b.verdict)
            .then_with(|| a.param.cmp(&b.param))
    });
    trace.work.add_sort(out.len());
    let never = out
        .iter()
        .filter(|p| p.verdict == GradientVerdict::Never)
        .count();
    let non_finite = out
        .iter()
        .filter(|p| p.verdict == GradientVerdict::NonFinite)
        .count();
    GradientReport {
        params: out,
        never,
        non_finite,
        steps,
        autograd: autograd_steps(trace),
        backward_without_parameters: trace
            .counter(trace_record::schema::BACKWARD_WITHOUT_PARAMETERS_COUNTER)
            .is_some(),
    }
}

/// The autograd graph per step: node count, bytes and a fingerprint over the nodes' shapes
/// and dtypes in record order (domain `tracegraph.autograd`, version 1).
fn autograd_steps(trace: &Trace) -> Vec<AutogradStep> {
    // The recorder's distinct-storage counters per step (summed: a step may walk the graph
    // more than once, as with gradient accumulation), keyed like the nodes' steps.
    let mut per_step: FastMap<Option<u32>, (Option<u64>, Option<u64>)> = FastMap::default();
    for c in &trace.counters {
        if !(c.value.is_finite() && c.value >= 0.0) {
            continue;
        }
        let name = trace.str(c.name);
        let e = per_step.entry(c.step).or_default();
        let slot = if name == trace_record::schema::AUTOGRAD_STORAGES_COUNTER {
            &mut e.0
        } else if name == trace_record::schema::AUTOGRAD_STORAGE_BYTES_COUNTER {
            &mut e.1
        } else {
            continue;
        };
        *slot = Some(slot.unwrap_or(0).saturating_add(c.value as u64));
    }
    trace.work.add(trace.counters.len() as u64);
    let mut out: Vec<AutogradStep> = Vec::new();
    let mut cur: Option<(Option<u32>, u64, u64, StableHasher)> = None;
    let finish = |c: (Option<u32>, u64, u64, StableHasher), out: &mut Vec<AutogradStep>| {
        let (step, nodes, bytes, h) = c;
        let (storages, storage_bytes) = per_step.get(&step).copied().unwrap_or_default();
        out.push(AutogradStep {
            step: step
                .and_then(|i| trace.steps.get(i as usize))
                .map(|s| s.index),
            nodes,
            tensor_bytes: bytes,
            storages,
            storage_bytes,
            fingerprint: h.finish().to_string(),
        });
    };
    for n in &trace.autograd {
        if cur.as_ref().is_some_and(|c| c.0 != n.step)
            && let Some(c) = cur.take()
        {
            finish(c, &mut out);
        }
        let c = cur.get_or_insert_with(|| {
            (
                n.step,
                0,
                0,
                StableHasher::with_domain("tracegraph.autograd", 1),
            )
        });
        c.1 += 1;
        c.2 = c.2.saturating_add(n.bytes);
        let shape = trace.shapes.resolve(n.shape);
        c.3.write_len(shape.len());
        for &d in shape {
            c.3.write_u64(d);
        }
        c.3.write_str(trace.str(n.dtype));
    }
    if let Some(c) = cur {
        finish(c, &mut out);
    }
    trace.work.add(trace.autograd.len() as u64);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoadOptions, load_str};

    /// A gradient norm of −3 (what no L2 norm can be) is not `ok`: the parameter is flagged
    /// with its invalid norm counted, and the norm is kept out of `last_norm` / `max_norm`.
    #[test]
    fn a_negative_norm_is_invalid_not_ok() {
        let text = [
            r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
            r#"{"type":"step","index":0,"ts":0}"#,
            r#"{"type":"gradient","param":"bad","state":"present","norm":-3,"ts":10}"#,
            r#"{"type":"gradient","param":"good","state":"present","norm":0.5,"ts":11}"#,
            r#"{"type":"step","index":1,"ts":20}"#,
            r#"{"type":"gradient","param":"bad","state":"present","norm":2.0,"ts":30}"#,
            r#"{"type":"gradient","param":"good","state":"present","norm":0.25,"ts":31}"#,
        ]
        .join("\n");
        let t = load_str(&text, "t.jsonl", LoadOptions::default()).unwrap();
        let r = gradient_report(&t);
        let by = |name: &str| r.params.iter().find(|p| p.param == name).unwrap();
        let bad = by("bad");
        assert_eq!(bad.verdict, GradientVerdict::NonFinite);
        assert_eq!(bad.invalid_norms, 1);
        assert_eq!(bad.max_norm, Some(2.0));
        assert_eq!(bad.last_norm, Some(2.0));
        assert_eq!(r.non_finite, 1);
        let good = by("good");
        assert_eq!(good.verdict, GradientVerdict::Ok);
        assert_eq!(good.invalid_norms, 0);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["params"][0]["invalid_norms"], 1);
        assert!(v["params"][1].get("invalid_norms").is_none());
    }
}
