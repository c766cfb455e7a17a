//! trace-report: the self-contained offline HTML report of a trace (and of its comparison).
//!
//! [`build_report`] runs trace-analyze's analyses (summary, op table, span tree, memory
//! report, step graphs, gradients, the sampled flame graph with the sampled op table beside
//! it, the tracked heap, and with a baseline the comparison) and keeps what a person reads
//! in a [`ReportData`] view model, capped for size ([`ReportOptions`]; every cap that cut
//! something is listed on the page). [`ReportData::with_torch`] adds a Candle run's
//! comparison with a torch.profiler run of the same model (trace-analyze's
//! `compare_with_torch`), drawn as `tracegraph compare --against-torch` prints it.
//! [`write_html`] writes one HTML file: inline CSS, the data as JSON in a
//! `<script type="application/json">` element (with `<`, `>` and `&` escaped, so no string
//! in a trace can close the element, see [`embedded_json`]), and a small inline script that
//! draws tables and SVG charts. A Content-Security-Policy forbids every network load; the
//! page works opened from disk. The script marks `<html data-tg-status="ok">` when it has
//! drawn everything and writes any error into
//! `#tg-errors` (what `cargo xtask browser-check` reads).
//!
//! The page template and its CSS and scripts are real files under `src/assets/`, included
//! at compile time.

mod error;
mod flame;
mod gradients;
mod heap;
mod model;
mod page;
mod sampled_ops;
mod sections;
mod torch;

pub use error::ReportError;
pub use model::{
    Badge, Column, ComparisonData, FlameData, FlameHint, GradientsData, GraphsData, HeapData,
    MemoryData, MemoryDevice, ReportData, ReportOptions, StepsData, TableData, TorchData,
    TorchDiagnosis,
};
pub use page::{embedded_json, write_html};
pub use sections::build_report;
