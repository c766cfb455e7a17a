//! The memory timeline: live logical bytes over time per device and category (with a min/max
//! band), the peak with its breakdown and the allocations live at it (with the op that produced
//! each), what is still live at the end (possible leaks), and physical device samples reported
//! beside, never mixed with logical bytes.

use crate::model::intern::FastMap;
use serde::Serialize;

use crate::model::intern::Sym;
use trace_record::schema::MemoryCategory;

use crate::events::spans::full_span_path;
use crate::model::trace::{MemEvent, Trace};

/// How many points each device's timeline keeps at most (the maximum in each time bucket).
pub const TIMELINE_POINTS: usize = 512;
/// How many allocations are listed at the peak and at the end.
pub const TOP_ALLOCATIONS: usize = 20;
/// Points of a device's [`MemoryBand`] kept exactly (one per event) up to this many; more
/// events are reduced to this many time buckets, each keeping its smallest and largest total.
pub const BAND_POINTS: usize = 4096;

/// Live logical bytes per category (fields named after [`MemoryCategory::as_str`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ByCategory {
    /// Parameters.
    pub parameter: u64,
    /// Activations.
    pub activation: u64,
    /// Gradients.
    pub gradient: u64,
    /// Optimizer state.
    pub optimizer_state: u64,
    /// Inputs.
    pub input: u64,
    /// Temporaries.
    pub temporary: u64,
    /// Other.
    pub other: u64,
}

impl ByCategory {
    /// From exact (u128) sums, each capped at `u64::MAX`; `saturated` is set when one was.
    fn from_sums(a: &[u128; 7], saturated: &mut bool) -> Self {
        let mut c = |v: u128| capped(v, saturated);
        ByCategory {
            parameter: c(a[0]),
            activation: c(a[1]),
            gradient: c(a[2]),
            optimizer_state: c(a[3]),
            input: c(a[4]),
            temporary: c(a[5]),
            other: c(a[6]),
        }
    }

    /// The bytes of `c`.
    pub fn get(&self, c: MemoryCategory) -> u64 {
        match c {
            MemoryCategory::Parameter => self.parameter,
            MemoryCategory::Activation => self.activation,
            MemoryCategory::Gradient => self.gradient,
            MemoryCategory::OptimizerState => self.optimizer_state,
            MemoryCategory::Input => self.input,
            MemoryCategory::Temporary => self.temporary,
            MemoryCategory::Other => self.other,
        }
    }

    /// The sum over categories (capped at `u64::MAX`).
    pub fn total(&self) -> u64 {
        MemoryCategory::ALL
            .iter()
            .fold(0u64, |a, &c| a.saturating_add(self.get(c)))
    }
}

/// `v` as u64, capped at `u64::MAX` (setting `saturated`) when it does not fit.
fn capped(v: u128, saturated: &mut bool) -> u64 {
    u64::try_from(v).unwrap_or_else(|_| {
        *saturated = true;
        u64::MAX
    })
}

/// One point of a timeline: live logical bytes at `t_ns` (the maximum within its bucket).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TimelinePoint {
    /// Time, ns since session start.
    pub t_ns: u64,
    /// Live logical bytes, all categories.
    pub live_bytes: u64,
    /// Live logical bytes per category at that moment.
    pub by_category: ByCategory,
}

/// Live logical bytes of one device over time as a band: per point (an event, or a time bucket
/// of events) the time, the smallest and largest live total in it, and the live bytes per
/// category at the instant of the smallest total (the floor the band starts from). Unlike the
/// [`DeviceMemory::timeline`], which keeps each bucket's maximum only, the band shows the drops
/// between allocations as well as the peaks. Frees without their allocation are not points.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryBand {
    /// Start of each point (the event time, or the bucket's first event).
    pub t_ns: Vec<u64>,
    /// Smallest live total during each point (including what was live when it began).
    pub lo: Vec<u64>,
    /// Largest live total during each point.
    pub hi: Vec<u64>,
    /// Per category, in [`MemoryCategory::ALL`] order, live bytes at the instant of each `lo`.
    pub by_category_at_lo: Vec<Vec<u64>>,
    /// True when every point is one event (at most [`BAND_POINTS`] events, no bucketing).
    pub exact: bool,
    /// Time of the device's last memory event (0 without any).
    pub end_ns: u64,
}

/// Builds a [`MemoryBand`] one live total at a time.
struct BandBuilder {
    band: MemoryBand,
    t0: u64,
    span: u64,
    open: Option<usize>,
}

impl BandBuilder {
    /// For `events` memory events of a device, the first at `first_ns`, the last at `last_ns`.
    fn new(events: usize, first_ns: u64, last_ns: u64) -> Self {
        let t1 = last_ns.max(first_ns);
        BandBuilder {
            band: MemoryBand {
                by_category_at_lo: vec![Vec::new(); MemoryCategory::ALL.len()],
                exact: events <= BAND_POINTS,
                end_ns: if events > 0 { t1 } else { 0 },
                ..MemoryBand::default()
            },
            t0: first_ns,
            span: (t1 - first_ns).max(1),
            open: None,
        }
    }

    fn bucket_of(&self, t: u64) -> usize {
        if self.band.exact {
            return 0;
        }
        let b = (u128::from(t.saturating_sub(self.t0)) * BAND_POINTS as u128
            / u128::from(self.span)) as usize;
        b.min(BAND_POINTS - 1)
    }

    /// The live `total` and bytes per category (`cats`) just after an event at `t`.
    fn push(&mut self, t: u64, total: u64, cats: &[u64; 7]) {
        let b = self.bucket_of(t);
        let band = &mut self.band;
        if band.exact || self.open != Some(b) {
            // A bucket starts from what was live when it began (the previous point's last
            // value is not lower than its floor, so the floor is at most the running value).
            band.t_ns.push(t);
            band.lo.push(total);
            band.hi.push(total);
            for (series, v) in band.by_category_at_lo.iter_mut().zip(cats) {
                series.push(*v);
            }
            self.open = Some(b);
        } else if let (Some(lo), Some(hi)) = (band.lo.last_mut(), band.hi.last_mut()) {
            if total < *lo {
                *lo = total;
                for (series, v) in band.by_category_at_lo.iter_mut().zip(cats) {
                    if let Some(x) = series.last_mut() {
                        *x = *v;
                    }
                }
            }
            *hi = (*hi).max(total);
        }
    }
}

/// An allocation (logical bytes).
#[derive(Debug, Clone, Serialize)]
pub struct Allocation {
    /// The storage id.
    pub storage: u64,
    /// The tensor id, when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor: Option<u64>,
    /// The tensor's label, when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The tensor's shape, when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// The op that recorded the tensor as an output (the last one, when several did); absent
    /// when no recorded op produced it (a parameter, an input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub produced_by: Option<String>,
    /// The span path (names from the root joined by `/`) that producing op ran in, when it
    /// ran in a known span.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_path: Option<String>,
    /// Logical bytes.
    pub bytes: u64,
    /// The category.
    pub category: MemoryCategory,
    /// When it was allocated, ns since session start.
    pub allocated_at_ns: u64,
}

/// Physical samples of one device (as reported by the device).
#[derive(Debug, Clone, Serialize)]
pub struct PhysicalSummary {
    /// How many samples.
    pub samples: u64,
    /// The largest `used` bytes reported, when any sample had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_used_bytes: Option<u64>,
    /// The largest `reserved` bytes reported, when any sample had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_reserved_bytes: Option<u64>,
    /// The smallest `free` bytes reported, when any sample had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_free_bytes: Option<u64>,
}

/// The memory picture of one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceMemory {
    /// The device label.
    pub device: String,
    /// Allocations seen.
    pub allocs: u64,
    /// Frees seen.
    pub frees: u64,
    /// Frees of a storage that was not live (not counted in live bytes).
    pub unmatched_frees: u64,
    /// Peak live logical bytes.
    pub peak_bytes: u64,
    /// When the peak was first reached.
    pub peak_at_ns: u64,
    /// The peak's breakdown by category.
    pub peak_by_category: ByCategory,
    /// How many allocations were live at the peak.
    pub peak_live_allocations: u64,
    /// The largest allocations live at the peak (largest first, at most [`TOP_ALLOCATIONS`]).
    pub peak_allocations: Vec<Allocation>,
    /// Live logical bytes at the end of the trace.
    pub end_bytes: u64,
    /// Live bytes at the end by category.
    pub end_by_category: ByCategory,
    /// Allocations still live at the end that are not parameters or optimizer state (possible
    /// leaks), largest first, at most [`TOP_ALLOCATIONS`].
    pub possible_leaks: Vec<Allocation>,
    /// How many possible leaks in all, and their bytes.
    pub possible_leak_count: u64,
    /// Bytes of all possible leaks.
    pub possible_leak_bytes: u64,
    /// The timeline (at most [`TIMELINE_POINTS`] points, the maximum of each time bucket).
    pub timeline: Vec<TimelinePoint>,
    /// The min/max band of live bytes (at most [`BAND_POINTS`] points).
    pub band: MemoryBand,
    /// Physical samples for this device, when the trace has any: reported beside the logical
    /// numbers, never added to them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<PhysicalSummary>,
    /// Some live-byte sum exceeded `u64::MAX` (sizes are summed exactly, in 128 bits): the
    /// figures that did are shown as `u64::MAX`, never wrapped. Omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub saturated: bool,
}

/// The memory report. `None` from [`memory_report`] when the trace has no memory events at all
/// (absent, not zero).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    /// Always `logical`: bytes are shape × dtype size, not allocator figures.
    pub bytes_kind: &'static str,
    /// Per device, by device label.
    pub devices: Vec<DeviceMemory>,
    /// Where the activations the recorder found in the autograd graph are placed on the
    /// timeline, when it recorded any (omitted otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autograd: Option<AutogradPlacement>,
}

/// Where the storages of the autograd graph (trace-candle's `Capture::autograd`, just before
/// backward) sit on the memory timeline, summed over the run's walks: those a captured op
/// produced were recorded when they were created; those found only in the graph have no
/// known creation time and were placed at the start of their step's forward phase, or, in a
/// step with no forward phase, at the step's start, or, in the run's first step without one,
/// when they were found (later than they really lived).
///
/// The span tree charges each storage where this timeline places it: to the span open on the
/// recording thread at its placement (the forward phase), not to the backward span the walk
/// wrote it in; one placed at its step's start, when no span is open, is charged to no span.
/// Backward is charged only with what it allocated (the gradients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AutogradPlacement {
    /// Distinct storages the walks found.
    pub storages: u64,
    /// Of those, recorded when they were created (a captured op's or module's output).
    pub at_creation: u64,
    /// Placed at the start of their step's forward phase.
    pub at_forward_start: u64,
    /// Placed at their step's start (no forward phase in their step).
    pub at_step_start: u64,
    /// Placed when they were found (no forward phase, and no step boundary before them).
    pub at_walk: u64,
}

impl AutogradPlacement {
    /// Says where the storages sit on the timeline, one clause per placement that holds
    /// any (the CLI's `memory` and the report print this).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.at_creation > 0 {
            parts.push(format!(
                "{} recorded when created (captured op outputs)",
                self.at_creation
            ));
        }
        if self.at_forward_start > 0 {
            parts.push(format!(
                "{} placed at the start of their step's forward phase (creation time not recorded)",
                self.at_forward_start
            ));
        }
        if self.at_step_start > 0 {
            parts.push(format!(
                "{} placed at the start of their step (creation time not recorded, no forward \
                 phase: capture.phase(\"forward\", ExecStep::Forward) places them closer)",
                self.at_step_start
            ));
        }
        if self.at_walk > 0 {
            parts.push(format!(
                "{} placed when backward began, later than they lived (no forward phase in their \
                 step: open one with capture.phase(\"forward\", ExecStep::Forward))",
                self.at_walk
            ));
        }
        if parts.is_empty() {
            return format!("autograd activations: {} storage(s)", self.storages);
        }
        format!(
            "autograd activations: {} storage(s): {}",
            self.storages,
            parts.join("; ")
        )
    }

    /// Sums the recorder's placement counters; `None` when it wrote none (an older
    /// recorder, or no autograd walk). Counters that are not finite non-negative numbers are
    /// skipped; sums saturate.
    fn of(trace: &Trace) -> Option<Self> {
        use trace_record::schema::{
            AUTOGRAD_AT_FORWARD_START_COUNTER, AUTOGRAD_AT_STEP_START_COUNTER,
            AUTOGRAD_AT_WALK_COUNTER, AUTOGRAD_STORAGES_COUNTER,
        };
        let forward = trace.counter_total(AUTOGRAD_AT_FORWARD_START_COUNTER);
        let step = trace.counter_total(AUTOGRAD_AT_STEP_START_COUNTER);
        let walk = trace.counter_total(AUTOGRAD_AT_WALK_COUNTER);
        if forward.is_none() && step.is_none() && walk.is_none() {
            return None;
        }
        let storages = trace.counter_total(AUTOGRAD_STORAGES_COUNTER).unwrap_or(0);
        let (at_forward_start, at_step_start, at_walk) =
            (forward.unwrap_or(0), step.unwrap_or(0), walk.unwrap_or(0));
        Some(Self {
            storages,
            at_creation: storages.saturating_sub(
                at_forward_start
                    .saturating_add(at_step_start)
                    .saturating_add(at_walk),
            ),
            at_forward_start,
            at_step_start,
            at_walk,
        })
    }
}

struct Live {
    bytes: u64,
    category: MemoryCategory,
    tensor: Option<u64>,
    t_ns: u64,
}

/// Builds the memory report: `None` when the trace has neither memory events nor physical
/// samples. O(n log n) in the number of memory events (two linear passes per device plus
/// sorting the listed allocations).
pub fn memory_report(trace: &Trace) -> Option<MemoryReport> {
    if trace.memory.is_empty() && trace.physical.is_empty() {
        return None;
    }
    // Devices in order of first appearance, then sorted by label.
    let mut device_ids: Vec<Sym> = Vec::new();
    let mut seen: FastMap<Sym, usize> = FastMap::default();
    for e in &trace.memory {
        seen.entry(e.device).or_insert_with(|| {
            device_ids.push(e.device);
            device_ids.len() - 1
        });
    }
    for p in &trace.physical {
        seen.entry(p.device).or_insert_with(|| {
            device_ids.push(p.device);
            device_ids.len() - 1
        });
    }
    device_ids.sort_by(|a, b| trace.str(*a).cmp(trace.str(*b)));
    trace
        .work
        .add((trace.memory.len() + trace.physical.len()) as u64);
    let (t0, t1) = time_range(trace);
    let mut devices: Vec<DeviceMemory> = device_ids
        .iter()
        .map(|&d| device_memory(trace, d, t0, t1))
        .collect();
    name_producers(trace, &mut devices);
    Some(MemoryReport {
        bytes_kind: "logical",
        devices,
        autograd: AutogradPlacement::of(trace),
    })
}

fn time_range(trace: &Trace) -> (u64, u64) {
    let mut lo = u64::MAX;
    let mut hi = 0;
    for e in &trace.memory {
        lo = lo.min(e.t_ns);
        hi = hi.max(e.t_ns);
    }
    if lo == u64::MAX {
        lo = 0;
    }
    (lo, hi.max(lo))
}

fn device_memory(trace: &Trace, device: Sym, t0: u64, t1: u64) -> DeviceMemory {
    let events = || trace.memory.iter().filter(move |e| e.device == device);
    let mut live: FastMap<u64, Live> = FastMap::default();
    // Exact sums: u128 holds the sum of any number of u64 sizes a trace can hold.
    let mut cats = [0u128; 7];
    let mut total = 0u128;
    let mut saturated = false;
    let (mut allocs, mut frees, mut unmatched) = (0u64, 0u64, 0u64);
    let mut peak = 0u128;
    let mut peak_at = 0u64;
    let mut peak_idx: Option<usize> = None;
    let mut peak_cats = [0u128; 7];
    let mut peak_live = 0u64;
    let span = (t1 - t0).max(1);
    let mut buckets: Vec<Option<TimelinePoint>> = vec![None; TIMELINE_POINTS];
    let mut band = {
        let (mut count, mut first, mut last) = (0usize, None, 0u64);
        for e in events() {
            count += 1;
            first.get_or_insert(e.t_ns);
            last = e.t_ns;
        }
        trace.work.add(trace.memory.len() as u64);
        BandBuilder::new(count, first.unwrap_or(0), last)
    };
    let apply = |e: &MemEvent,
                 live: &mut FastMap<u64, Live>,
                 cats: &mut [u128; 7],
                 total: &mut u128|
     -> Option<bool> {
        if e.alloc {
            if let Some(old) = live.insert(
                e.storage,
                Live {
                    bytes: e.bytes,
                    category: e.category,
                    tensor: e.tensor,
                    t_ns: e.t_ns,
                },
            ) {
                // A duplicate allocation replaces the old one.
                cats[old.category.index()] -= u128::from(old.bytes);
                *total -= u128::from(old.bytes);
            }
            cats[e.category.index()] += u128::from(e.bytes);
            *total += u128::from(e.bytes);
            Some(true)
        } else {
            let old = live.remove(&e.storage)?;
            cats[old.category.index()] -= u128::from(old.bytes);
            *total -= u128::from(old.bytes);
            Some(false)
        }
    };
    let mut n = 0u64;
    for (i, e) in events().enumerate() {
        n += 1;
        let matched = match apply(e, &mut live, &mut cats, &mut total) {
            Some(true) => {
                allocs += 1;
                true
            }
            Some(false) => {
                frees += 1;
                true
            }
            None => {
                frees += 1;
                unmatched += 1;
                false
            }
        };
        if matched {
            let mut at = [0u64; 7];
            for (a, c) in at.iter_mut().zip(&cats) {
                *a = capped(*c, &mut saturated);
            }
            band.push(e.t_ns, capped(total, &mut saturated), &at);
        }
        if total > peak {
            peak = total;
            peak_at = e.t_ns;
            peak_idx = Some(i);
            peak_cats = cats;
            peak_live = live.len() as u64;
        }
        let b = ((u128::from(e.t_ns.saturating_sub(t0)) * (TIMELINE_POINTS as u128 - 1))
            / u128::from(span)) as usize;
        let slot = &mut buckets[b.min(TIMELINE_POINTS - 1)];
        let live_bytes = capped(total, &mut saturated);
        if slot.is_none_or(|p| live_bytes > p.live_bytes) {
            *slot = Some(TimelinePoint {
                t_ns: e.t_ns,
                live_bytes,
                by_category: ByCategory::from_sums(&cats, &mut saturated),
            });
        }
    }
    trace.work.add(trace.memory.len() as u64 + n);
    let end_cats = cats;
    let end_bytes = total;
    let mut leaks: Vec<(u64, &Live)> = live
        .iter()
        .filter(|(_, l)| !l.category.is_persistent())
        .map(|(&s, l)| (s, l))
        .collect();
    let possible_leak_count = leaks.len() as u64;
    let possible_leak_bytes = capped(
        leaks.iter().map(|(_, l)| u128::from(l.bytes)).sum(),
        &mut saturated,
    );
    leaks.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
    trace.work.add_sort(leaks.len());
    let possible_leaks = leaks
        .iter()
        .take(TOP_ALLOCATIONS)
        .map(|&(s, l)| allocation(trace, s, l))
        .collect();

    // Second pass up to the peak to list what was live there.
    let mut peak_allocations = Vec::new();
    if let Some(pi) = peak_idx {
        let mut live2: FastMap<u64, Live> = FastMap::default();
        let mut c2 = [0u128; 7];
        let mut t2 = 0u128;
        for e in events().take(pi + 1) {
            let _ = apply(e, &mut live2, &mut c2, &mut t2);
        }
        trace.work.add(trace.memory.len() as u64);
        let mut v: Vec<(u64, &Live)> = live2.iter().map(|(&s, l)| (s, l)).collect();
        v.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        trace.work.add_sort(v.len());
        peak_allocations = v
            .iter()
            .take(TOP_ALLOCATIONS)
            .map(|&(s, l)| allocation(trace, s, l))
            .collect();
    }

    let physical = physical_summary(trace, device);
    DeviceMemory {
        device: trace.str(device).to_string(),
        allocs,
        frees,
        unmatched_frees: unmatched,
        peak_bytes: capped(peak, &mut saturated),
        peak_at_ns: peak_at,
        peak_by_category: ByCategory::from_sums(&peak_cats, &mut saturated),
        peak_live_allocations: peak_live,
        peak_allocations,
        end_bytes: capped(end_bytes, &mut saturated),
        end_by_category: ByCategory::from_sums(&end_cats, &mut saturated),
        possible_leaks,
        possible_leak_count,
        possible_leak_bytes,
        timeline: buckets.into_iter().flatten().collect(),
        band: band.band,
        physical,
        saturated,
    }
}

/// The allocations listed for a device: those live at the peak, then the possible leaks.
fn listed(d: &mut DeviceMemory) -> impl Iterator<Item = &mut Allocation> {
    d.peak_allocations
        .iter_mut()
        .chain(d.possible_leaks.iter_mut())
}

/// Fills in the producing op and its span path of every listed allocation: one pass over the
/// ops' outputs, looking up only the (few) listed tensors; the last op writing a tensor wins.
fn name_producers(trace: &Trace, devices: &mut [DeviceMemory]) {
    let mut wanted: FastMap<u64, Option<usize>> = FastMap::default();
    for d in devices.iter_mut() {
        for a in listed(d) {
            if let Some(t) = a.tensor {
                wanted.insert(t, None);
            }
        }
    }
    if wanted.is_empty() {
        return;
    }
    for (i, op) in trace.ops.iter().enumerate() {
        for t in trace.op_outputs(op) {
            if let Some(p) = wanted.get_mut(t) {
                *p = Some(i);
            }
        }
    }
    trace
        .work
        .add(trace.tensor_refs.len() as u64 + trace.ops.len() as u64);
    for d in devices.iter_mut() {
        for a in listed(d) {
            let Some(op) = a
                .tensor
                .and_then(|t| wanted.get(&t).copied().flatten())
                .and_then(|i| trace.ops.get(i))
            else {
                continue;
            };
            a.produced_by = Some(trace.str(op.name).to_string());
            a.span_path = op
                .span
                .filter(|&s| (s as usize) < trace.spans.len())
                .map(|s| full_span_path(trace, s as usize));
        }
    }
}

fn allocation(trace: &Trace, storage: u64, l: &Live) -> Allocation {
    let info = l.tensor.and_then(|t| trace.tensors.get(&t));
    Allocation {
        storage,
        tensor: l.tensor,
        label: info.and_then(|i| i.label).map(|s| trace.str(s).to_string()),
        shape: info.map(|i| trace.shapes.display(i.shape)),
        produced_by: None,
        span_path: None,
        bytes: l.bytes,
        category: l.category,
        allocated_at_ns: l.t_ns,
    }
}

fn physical_summary(trace: &Trace, device: Sym) -> Option<PhysicalSummary> {
    let mut s = PhysicalSummary {
        samples: 0,
        max_used_bytes: None,
        max_reserved_bytes: None,
        min_free_bytes: None,
    };
    for p in trace.physical.iter().filter(|p| p.device == device) {
        s.samples += 1;
        if let Some(u) = p.used {
            s.max_used_bytes = Some(s.max_used_bytes.map_or(u, |m| m.max(u)));
        }
        if let Some(r) = p.reserved {
            s.max_reserved_bytes = Some(s.max_reserved_bytes.map_or(r, |m| m.max(r)));
        }
        if let Some(f) = p.free {
            s.min_free_bytes = Some(s.min_free_bytes.map_or(f, |m| m.min(f)));
        }
    }
    trace.work.add(trace.physical.len() as u64);
    (s.samples > 0).then_some(s)
}
