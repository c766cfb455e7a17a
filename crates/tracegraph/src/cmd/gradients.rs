//! `tracegraph gradients`.
//!
//! Per parameter its gradient state and norm per step, parameters that never received a gradient
//! first, non-finite ones flagged; the autograd graph per step.

use std::fmt::Write as _;
use std::path::PathBuf;

use trace_analyze::{GradientVerdict, gradient_report};

use super::{Status, Table, bytesu, load, print_json, write_stdout};

/// Arguments of `tracegraph gradients`.
#[derive(clap::Args, Debug)]
pub(crate) struct GradientsArgs {
    /// The trace file (JSON Lines).
    pub(crate) trace: PathBuf,
    /// Print JSON (schema `tracegraph.gradients/1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A norm for people: 4 significant digits, `-` when absent.
fn norm(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |n| format!("{n:.4e}"))
}

/// Runs `tracegraph gradients`.
pub(crate) fn run(args: &GradientsArgs) -> anyhow::Result<Status> {
    let trace = load(&args.trace, false)?;
    let r = gradient_report(&trace);
    if args.json {
        print_json("gradients", &r)?;
        return Ok(Status::Ok);
    }
    let mut o = String::new();
    if r.params.is_empty() {
        let _ = writeln!(
            o,
            "{}",
            trace_analyze::no_gradient_facts_reason(r.backward_without_parameters)
        );
    } else {
        let _ = writeln!(
            o,
            "{} parameter(s) over {} step(s): {} never received a gradient, {} non-finite or with an invalid norm",
            r.params.len(),
            r.steps.len(),
            r.never,
            r.non_finite
        );
        let never: Vec<&str> = r
            .params
            .iter()
            .filter(|p| p.verdict == GradientVerdict::Never)
            .map(|p| p.param.as_str())
            .collect();
        if !never.is_empty() {
            let _ = writeln!(o, "never received a gradient (not trained):");
            for p in &never {
                let _ = writeln!(o, "  {p}");
            }
        }
        for p in r
            .params
            .iter()
            .filter(|p| p.verdict == GradientVerdict::NonFinite)
        {
            let steps: Vec<String> = p
                .per_step
                .iter()
                .filter(|g| g.state == trace_record::schema::GradientState::NonFinite)
                .map(|g| g.step.map_or("-".into(), |s| s.to_string()))
                .collect();
            if !steps.is_empty() {
                let _ = writeln!(o, "NON-FINITE: {} in step(s) {}", p.param, steps.join(", "));
            }
            // A norm no gradient can have: the recorder's figure is wrong, not "ok".
            let invalid: Vec<String> = p
                .per_step
                .iter()
                .filter_map(|g| {
                    let n = g.norm.filter(|n| !n.is_finite() || *n < 0.0)?;
                    Some(format!(
                        "{} (norm {n})",
                        g.step.map_or("-".into(), |s| s.to_string())
                    ))
                })
                .collect();
            if !invalid.is_empty() {
                let _ = writeln!(
                    o,
                    "INVALID NORM: {} in step(s) {}: a gradient norm is never negative or non-finite",
                    p.param,
                    invalid.join(", ")
                );
            }
        }
        let mut t = Table::new(&[
            "parameter",
            "verdict",
            ">present",
            ">missing",
            ">zero",
            ">non-finite",
            ">last norm",
            ">max norm",
            "norm per step",
        ]);
        for p in &r.params {
            let per_step: Vec<String> = p
                .per_step
                .iter()
                .map(|g| match g.norm {
                    Some(n) => format!("{n:.3e}"),
                    None => g.state.as_str().to_string(),
                })
                .collect();
            t.row(vec![
                p.param.clone(),
                p.verdict.as_str().to_string(),
                p.present.to_string(),
                p.missing.to_string(),
                p.zero.to_string(),
                p.non_finite.to_string(),
                norm(p.last_norm),
                norm(p.max_norm),
                per_step.join(" "),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
    }
    if !r.autograd.is_empty() {
        let _ = writeln!(
            o,
            "autograd graph kept alive at backward (tensors; distinct storages and their logical \
             bytes, each storage once, views of parameters excluded: as the memory timeline counts):"
        );
        let mut t = Table::new(&["step", ">tensors", ">storages", ">bytes", "fingerprint"]);
        for a in &r.autograd {
            t.row(vec![
                a.step.map_or("-".into(), |s| s.to_string()),
                a.nodes.to_string(),
                a.storages.map_or("-".into(), |n| n.to_string()),
                // Traces recorded before the storage counters: every tensor counted in full.
                a.storage_bytes.map_or_else(
                    || format!("{} (tensors, views counted)", bytesu(a.tensor_bytes)),
                    bytesu,
                ),
                a.fingerprint.clone(),
            ]);
        }
        let _ = writeln!(o, "{}", t.render());
    }
    write_stdout(o.trim_end())?;
    Ok(Status::Ok)
}
