//! The report's view model: what the page shows, serialized into it as JSON ([`ReportData`]).

use serde::Serialize;
use serde_json::Value;

/// How much detail the page keeps.
#[derive(Debug, Clone, Copy)]
pub struct ReportOptions {
    /// Op table rows (by total time).
    pub max_op_rows: usize,
    /// Span tree rows (depth-first, children by total time).
    pub max_span_rows: usize,
    /// Bars of the step-time chart (more steps are grouped, each bar the slowest of its group).
    pub max_step_bars: usize,
    /// Rows of the step-graph table (changed steps first).
    pub max_graph_rows: usize,
    /// Rows of each comparison table.
    pub max_comparison_rows: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            max_op_rows: 300,
            max_span_rows: 1500,
            max_step_bars: 600,
            max_graph_rows: 400,
            max_comparison_rows: 200,
        }
    }
}

/// A column of a [`TableData`].
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// The header text.
    pub label: String,
    /// How the page formats the cells: `text`, `name` (monospace), `int`, `ns`, `bytes`,
    /// `pct` (a fraction), `float`, `delta_ns`, `delta_bytes`, `delta_pct`; `figure` and
    /// `delta_figure` are strings trace-analyze's formatters wrote, drawn as given (right
    /// aligned; a `delta_figure` coloured by its leading `+` or `-`).
    pub kind: &'static str,
    /// Draw a bar proportional to the column's largest value.
    pub bar: bool,
    /// What the column means (the header's tooltip, and the table's legend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A key column: one a reader needs to tell rows apart, which must be on screen without
    /// scrolling sideways (the page marks its header `data-key`; `cargo xtask browser-check`
    /// measures it). A table that marks none must fit its box whole. Key columns come first.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub key: bool,
}

impl Column {
    /// The column with an explanation.
    pub(crate) fn explained(mut self, title: &str) -> Column {
        self.title = Some(title.to_string());
        self
    }

    /// The column as a key column ([`Column::key`]).
    pub(crate) fn keyed(mut self) -> Column {
        self.key = true;
        self
    }
}

pub(crate) fn col(label: &str, kind: &'static str) -> Column {
    Column {
        label: label.to_string(),
        kind,
        bar: false,
        title: None,
        key: false,
    }
}

pub(crate) fn bar(label: &str, kind: &'static str) -> Column {
    Column {
        label: label.to_string(),
        kind,
        bar: true,
        title: None,
        key: false,
    }
}

/// A table drawn by the page.
#[derive(Debug, Clone, Serialize)]
pub struct TableData {
    /// A title (shown above comparison tables).
    pub title: String,
    /// The columns.
    pub columns: Vec<Column>,
    /// The rows: one JSON value per column (number, string or null = absent).
    pub rows: Vec<Vec<Value>>,
    /// For a tree: the depth of each row (rows in depth-first order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub depth: Option<Vec<u32>>,
    /// For a tree: the tooltip of each row's first cell (the full path).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub titles: Option<Vec<String>>,
    /// Rows before capping.
    pub total_rows: usize,
    /// Sortable by clicking a header.
    pub sortable: bool,
    /// Has a filter box on the first column.
    pub filter: bool,
    /// A note shown above the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What to show when there are no rows.
    pub empty: String,
    /// A CSS class per row (`regression`, `improvement`, `noise`; a gradient verdict), when
    /// rows are marked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_class: Option<Vec<&'static str>>,
}

impl TableData {
    pub(crate) fn new(columns: Vec<Column>) -> Self {
        TableData {
            title: String::new(),
            columns,
            rows: Vec::new(),
            depth: None,
            titles: None,
            total_rows: 0,
            sortable: false,
            filter: false,
            note: None,
            empty: "None.".to_string(),
            row_class: None,
        }
    }
}

/// A health badge.
#[derive(Debug, Clone, Serialize)]
pub struct Badge {
    /// `ok`, `warn` or `bad`.
    pub level: &'static str,
    /// The text.
    pub text: String,
}

/// The step-time chart.
#[derive(Debug, Clone, Serialize)]
pub struct StepsData {
    /// The (first) step index of each bar.
    pub index: Vec<u64>,
    /// The last step index of each bar (equal to `index` unless steps are grouped).
    pub last_index: Vec<u64>,
    /// The bar's duration (the slowest step of its group).
    pub duration_ns: Vec<Option<u64>>,
    /// The bar's step split by phase: forward, backward, optimizer, other (ns; the rest of
    /// the step), for the step drawn (the slowest of a group).
    pub phases_ns: Vec<[u64; 4]>,
    /// Ranges of step indices `[first, last]` that the trace did not record (between
    /// schedule windows): drawn as gaps.
    pub unrecorded: Vec<[u64; 2]>,
    /// The baseline's step times by step index, when comparing: `[index, ns]` pairs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Vec<[u64; 2]>>,
    /// Whether the step graph changed in the bar's group.
    pub changed: Vec<bool>,
    /// Ops in the bar's group.
    pub ops: Vec<u64>,
    /// A note (grouping, timing).
    pub note: String,
}

/// The memory chart and tables of one device.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryDevice {
    /// The device label.
    pub device: String,
    /// The categories drawn, bottom first.
    pub categories: Vec<&'static str>,
    /// Point times (an event each, or the start of a time bucket).
    pub t_ns: Vec<u64>,
    /// The time of the last memory event (the chart's end).
    pub end_ns: u64,
    /// Smallest live total during each point.
    pub lo: Vec<u64>,
    /// Largest live total during each point.
    pub hi: Vec<u64>,
    /// Per category (as `categories`), live bytes at the instant of each point's `lo`.
    pub series: Vec<Vec<u64>>,
    /// True when every point is one event; false when events were bucketed (min/max kept).
    pub exact: bool,
    /// The peak: time, bytes and bytes per category (as `categories`).
    pub peak: Value,
    /// Figures shown beside the chart.
    pub stats: Vec<(String, String)>,
    /// The peak by category.
    pub peak_breakdown: TableData,
    /// The largest allocations live at the peak.
    pub peak_allocations: TableData,
    /// Possible leaks.
    pub leaks: TableData,
    /// Physical figures, when the device reported any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<Vec<(String, String)>>,
}

/// The memory section.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryData {
    /// Always `logical`.
    pub bytes_kind: &'static str,
    /// A note about the numbers.
    pub note: String,
    /// Per device.
    pub devices: Vec<MemoryDevice>,
}

/// The step-graph section.
#[derive(Debug, Clone, Serialize)]
pub struct GraphsData {
    /// Key figures.
    pub summary: Vec<(String, String)>,
    /// Per step.
    pub table: TableData,
}

/// The comparison section: what `tracegraph compare BASELINE TRACE` prints, with its
/// verdicts (trace-analyze's `compare`, nothing re-judged here) and its caveat.
#[derive(Debug, Clone, Serialize)]
pub struct ComparisonData {
    /// Key figures.
    pub summary: Vec<(String, String)>,
    /// What the intervals cover (one run a side: the step-to-step spread only), shown above
    /// the tables as `compare` prints it.
    pub caveat: String,
    /// How a row's change and verdict are read, as `compare` ends its output.
    pub legend: String,
    /// Span, op, memory and graph tables.
    pub tables: Vec<TableData>,
}

/// The gradients section: parameters that never received a gradient first, non-finite ones
/// flagged, norms per step, and the autograd graph per step.
#[derive(Debug, Clone, Serialize)]
pub struct GradientsData {
    /// Key figures.
    pub summary: Vec<(String, String)>,
    /// Per parameter, worst first: verdict, facts by state, last and largest norm, then the
    /// norm in each step shown (or the state when there is no norm). `row_class` holds each
    /// row's verdict (`never`, `non_finite`, `sometimes`, `always_zero`, `ok`).
    pub params: TableData,
    /// The autograd graph kept alive at each step's backward.
    pub autograd: TableData,
}

/// The sampled flame graph: a CPU sampler's call stacks with their sample counts per phase
/// (estimates of where CPU time went, not durations). The page builds the tree of the
/// selected phases from `stacks` and `counts`.
#[derive(Debug, Clone, Serialize)]
pub struct FlameData {
    /// Key figures: samples, steps, requested and achieved rate, samples lost, the CPU time
    /// of one sample.
    pub summary: Vec<(String, String)>,
    /// What the numbers are (shown above the graph).
    pub note: String,
    /// Frame names as `tracegraph hot` shows them (an unqualified function with its source
    /// file), indexed by `stacks`.
    pub names: Vec<String>,
    /// Per name: the label drawn in a bar (generic arguments elided).
    pub labels: Vec<String>,
    /// Per name: the crate group of `tracegraph hot` (`candle_core`, `gemm`, `candle_nn`,
    /// `model`, `allocator`, `other`), the bar's colour.
    pub groups: Vec<&'static str>,
    /// Distinct stacks: name indices, outermost (the thread's entry) first.
    pub stacks: Vec<Vec<u32>>,
    /// Per stack: samples in each phase, in the order of `phases`.
    pub counts: Vec<[u64; 4]>,
    /// The phases (`forward`, `backward`, `optimizer`, `unknown`) and their samples.
    pub phases: Vec<(String, u64)>,
    /// Samples in all.
    pub samples: u64,
    /// Estimated CPU time of one sample (ns): the sampled threads' CPU time (the process's
    /// less the sampler's own threads') over samples taken, else the requested period;
    /// absent when neither is known.
    pub ns_per_sample: Option<f64>,
    /// What `tracegraph hot` recognises in these samples (its hints: a recognised cost, with
    /// its rule and evidence), in its order; empty when none fires.
    pub hints: Vec<FlameHint>,
    /// The sampled op table drawn beside the graph (what `tracegraph ops --sampled` prints):
    /// per span path a row (`row_class` `span`), then its Candle ops (`op`); absent when the
    /// analysis found no samples.
    pub ops: Option<TableData>,
}

/// One hint of `tracegraph hot` (trace-analyze's `HotHint`), as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlameHint {
    /// The rule's name (trace-analyze's `HINT_RULES`).
    pub rule: &'static str,
    /// The hint, one line, as `hot` prints it.
    pub hint: String,
    /// The samples that are its evidence.
    pub samples: u64,
}

/// Everything the page shows (embedded in it as JSON).
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    /// The page title.
    pub title: String,
    /// The line under the title.
    pub subtitle: String,
    /// Run header figures.
    pub run: Vec<(String, String)>,
    /// Health badges.
    pub health: Vec<Badge>,
    /// What was capped for size.
    pub caps: Vec<String>,
    /// The step-time chart; absent when the trace has no steps.
    pub steps: Option<StepsData>,
    /// The op table.
    pub ops: TableData,
    /// The span tree.
    pub spans: TableData,
    /// Memory; absent when the trace has no memory events.
    pub memory: Option<MemoryData>,
    /// Step graphs; absent when no step has ops.
    pub graphs: Option<GraphsData>,
    /// The comparison with a baseline, when one was given.
    pub comparison: Option<ComparisonData>,
    /// Gradients; absent when the trace has no gradient facts and no autograd graph.
    pub gradients: Option<GradientsData>,
    /// The sampled flame graph; absent when the trace has no sampled stacks.
    pub flame: Option<FlameData>,
    /// The tracked heap; absent (and left out of the page's data) without heap lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap: Option<HeapData>,
    /// The run beside a torch.profiler run of the same model; absent (and left out of the
    /// page's data) unless one was given ([`ReportData::with_torch`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch: Option<TorchData>,
}

/// The run beside a torch.profiler run of the same model: what `tracegraph compare
/// --against-torch` prints, in its order and with its figures (trace-analyze's
/// `TorchComparison`, formatted by trace-analyze's formatters, nothing recomputed).
#[derive(Debug, Clone, Serialize)]
pub struct TorchData {
    /// Each side's trace, mean step time over the steps compared, threads, element type and
    /// device (`Candle`, `torch`), then Candle's step against torch's (`Candle's step`).
    pub summary: Vec<(String, String)>,
    /// What makes the two runs less than like with like.
    pub warnings: Vec<String>,
    /// Op kinds per step, by what Candle loses: kind, Candle (with the sampled estimate's
    /// 95 % interval when Candle's side is sampled), torch, Candle − torch, ratio, each
    /// side's top ops. The note says where Candle's figures come from.
    pub kinds: TableData,
    /// Copy/layout's share of each side's step.
    pub copy_layout: String,
    /// Layers both sides name, per step, by what Candle loses: layer, Candle, torch,
    /// Candle − torch, ratio; `empty` says how to name or map layers when none match.
    pub layers: TableData,
    /// How many span paths and range paths only one side names; absent when none.
    pub unmatched: Option<String>,
    /// The diagnoses, by what Candle loses (largest first).
    pub diagnoses: Vec<TorchDiagnosis>,
    /// What the page says when there is no diagnosis.
    pub no_diagnosis: String,
}

/// One diagnosis of the torch comparison: the sentence and the figures behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorchDiagnosis {
    /// The rule (`kind_slower`, `copy_layout`, `matmul_rate`, `layer_slower`).
    pub rule: &'static str,
    /// What Candle loses per step on it (signed).
    pub loss: String,
    /// The sentence.
    pub text: String,
    /// The evidence: figures, their source, the ops and paths behind them.
    pub evidence: Vec<String>,
}

/// The tracked-heap view (heap bytes from a tracking allocator, never summed with the memory
/// section's logical bytes).
#[derive(Debug, Clone, Serialize)]
pub struct HeapData {
    /// Always `heap (tracked)`.
    pub bytes_kind: &'static str,
    /// A note about the numbers.
    pub note: String,
    /// Point times of the live-bytes line.
    pub t_ns: Vec<u64>,
    /// Live tracked bytes at each point.
    pub live: Vec<u64>,
    /// The peak: time and bytes.
    pub peak: Value,
    /// Figures shown beside the chart.
    pub stats: Vec<(String, String)>,
    /// What was live at the peak, by span path.
    pub peak_by_span: TableData,
    /// Allocated, freed, temporary and outlived bytes per span path.
    pub spans: TableData,
}
