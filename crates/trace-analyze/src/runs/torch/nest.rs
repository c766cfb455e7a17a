//! Nesting, torch's merge of same-named only children, and self times: events to a [`TorchRun`].
//!
//! Each thread's complete events nest by time containment; an event whose parent has the
//! same name and no other child is merged into it (torch's `_remove_dup_nodes`).
//!
//! One sort of every complete event by (start, longest first, thread, index in the file), then
//! one walk with an explicit stack per thread: O(n log n) time, linear memory, any depth.

use std::cmp::Reverse;

use crate::model::intern::{FastMap, Sym};
use crate::runs::torch::model::{
    HEAD, PathNode, TorchDevice, TorchDtype, TorchOp, TorchRange, TorchRun, TorchStep,
    TorchStepMemory, TorchThread, dims_text, dtype_of, step_at,
};
use crate::runs::torch::read::{Builder, NONE, NodeKind};

/// Builds the run from what the reader kept.
pub(crate) fn finish(b: Builder) -> TorchRun {
    let Builder {
        source,
        strings,
        mut nodes,
        memory,
        threads,
        dims,
        types,
        type_uses,
        mut counts,
        cuda,
        trace_name,
        schema_version,
        base_time_ns,
        device_properties,
        ..
    } = b;
    let n = nodes.len();
    let idx = |i: u32| i as usize;

    // Every event once, by start, longest first (a parent before its children), then thread
    // and position in the file: within a thread, torch's and check_self_time.py's order.
    let mut order: Vec<u32> = (0..n).map(|i| i as u32).collect();
    order.sort_unstable_by_key(|&i| {
        let x = &nodes[idx(i)];
        (x.start, Reverse(x.end - x.start), x.thread, i)
    });

    // Nesting by time containment, one explicit stack per thread.
    let mut stacks: Vec<Vec<u32>> = vec![Vec::new(); threads.len()];
    let mut parent = vec![NONE; n];
    let mut kids = vec![0u32; n];
    let mut adjusted = 0u64;
    for &i in &order {
        let (start, thread) = (nodes[idx(i)].start, nodes[idx(i)].thread);
        let Some(stack) = stacks.get_mut(thread as usize) else {
            continue;
        };
        while let Some(&top) = stack.last() {
            if nodes[idx(top)].end <= start {
                stack.pop();
            } else {
                break;
            }
        }
        if let Some(&top) = stack.last() {
            let top_end = nodes[idx(top)].end;
            if nodes[idx(i)].end > top_end {
                // Partly overlapping its parent (torch never writes this): clipped.
                nodes[idx(i)].end = top_end;
                adjusted += 1;
            }
            parent[idx(i)] = top;
            kids[idx(top)] = kids[idx(top)].saturating_add(1);
        }
        stack.push(i);
    }
    drop(stacks);

    // torch's `_remove_dup_nodes`: an event whose parent has its name and no other child is
    // merged into it; its children become the parent's. `rep` is the kept event an event
    // stands for (itself when kept); parents come first in `order`.
    let mut rep = vec![NONE; n];
    let mut merged = 0u64;
    for &i in &order {
        let p = parent[idx(i)];
        let same = p != NONE && nodes[idx(p)].name == nodes[idx(i)].name && kids[idx(p)] == 1;
        if same {
            rep[idx(i)] = rep[idx(p)];
            merged += 1;
        } else {
            rep[idx(i)] = i;
        }
    }
    drop(kids);
    let kept = |i: u32| rep[idx(i)] == i;
    // The kept parent of a kept event.
    let eff_parent = |i: u32| match parent[idx(i)] {
        NONE => NONE,
        p => rep[idx(p)],
    };

    // Self time = duration less the direct (kept) children's durations.
    let mut child_sum = vec![0u64; n];
    for &i in &order {
        if kept(i) {
            let e = eff_parent(i);
            if e != NONE {
                let dur = nodes[idx(i)].end - nodes[idx(i)].start;
                child_sum[idx(e)] = child_sum[idx(e)].saturating_add(dur);
            }
        }
    }
    let self_of = |i: u32| {
        let x = &nodes[idx(i)];
        (x.end - x.start).saturating_sub(child_sum[idx(i)])
    };

    // Steps first: every other record is placed in one by its start.
    let steps: Vec<TorchStep> = order
        .iter()
        .filter(|&&i| kept(i) && nodes[idx(i)].kind == NodeKind::Step)
        .map(|&i| {
            let x = &nodes[idx(i)];
            TorchStep {
                number: x.ext,
                thread: x.thread,
                start_ns: x.start,
                dur_ns: x.end - x.start,
                self_ns: self_of(i),
            }
        })
        .collect();
    let step_of = |t: u64| step_at(&steps, t).and_then(|s| u32::try_from(s).ok());

    // Ranges, their paths and the innermost range and op depth of every kept event; `inner`
    // and `depth` hold, per kept event, the innermost range at or around it and how many ops
    // and ranges enclose it, itself included.
    let mut inner = vec![NONE; n];
    let mut op_depth = vec![0u32; n];
    let mut range_depth = vec![0u32; n];
    let mut path_index: FastMap<(u32, Sym), u32> = FastMap::default();
    let mut paths: Vec<PathNode> = Vec::new();
    let mut range_paths: Vec<u32> = Vec::new();
    let mut ranges: Vec<TorchRange> = Vec::new();
    let mut ops: Vec<TorchOp> = Vec::new();
    let mut thread_ops = vec![0u64; threads.len()];
    for &i in &order {
        if !kept(i) {
            continue;
        }
        let x = nodes[idx(i)];
        let e = eff_parent(i);
        let (up_range, up_ops, up_ranges) = match e {
            NONE => (NONE, 0, 0),
            e => (inner[idx(e)], op_depth[idx(e)], range_depth[idx(e)]),
        };
        inner[idx(i)] = up_range;
        op_depth[idx(i)] = up_ops;
        range_depth[idx(i)] = up_ranges;
        match x.kind {
            NodeKind::Op => {
                op_depth[idx(i)] = up_ops.saturating_add(1);
                if let Some(c) = thread_ops.get_mut(x.thread as usize) {
                    *c += 1;
                }
                ops.push(TorchOp {
                    name: x.name,
                    thread: x.thread,
                    start_ns: x.start,
                    dur_ns: x.end - x.start,
                    self_ns: self_of(i),
                    step: step_of(x.start),
                    depth: up_ops,
                    range: (up_range != NONE).then_some(up_range),
                    inputs: x.dims,
                    input_types: x.types,
                    external_id: (x.ext != u64::MAX).then_some(x.ext),
                });
            }
            NodeKind::Range => {
                let parent_path = match up_range {
                    NONE => NONE,
                    r => range_paths[idx(r)],
                };
                let next = u32::try_from(paths.len()).unwrap_or(NONE);
                let path = *path_index.entry((parent_path, x.name)).or_insert(next);
                if path == next {
                    let up = paths.get(parent_path as usize).copied();
                    let len = up.map_or(1, |u| u.len.saturating_add(1));
                    paths.push(PathNode {
                        parent: up.map(|_| parent_path),
                        name: x.name,
                        len,
                        head: match up {
                            Some(u) if len as usize > HEAD => u.head,
                            _ => path,
                        },
                    });
                }
                let r = u32::try_from(ranges.len()).unwrap_or(NONE);
                inner[idx(i)] = r;
                range_depth[idx(i)] = up_ranges.saturating_add(1);
                range_paths.push(path);
                ranges.push(TorchRange {
                    name: x.name,
                    path,
                    parent: (up_range != NONE).then_some(up_range),
                    thread: x.thread,
                    start_ns: x.start,
                    dur_ns: x.end - x.start,
                    self_ns: self_of(i),
                    step: step_of(x.start),
                    depth: up_ranges,
                });
            }
            NodeKind::Step | NodeKind::Python | NodeKind::Other => {}
        }
    }

    // Memory per step and device.
    let mut mem: FastMap<(u32, i64), TorchStepMemory> = FastMap::default();
    for m in &memory {
        let Some(step) = step_of(m.ts) else {
            counts.memory_outside_steps += 1;
            continue;
        };
        let row = mem.entry((step, m.device_type)).or_insert(TorchStepMemory {
            step,
            device_type: m.device_type,
            events: 0,
            allocated_bytes: 0,
            freed_bytes: 0,
            peak_total_allocated: None,
        });
        row.events += 1;
        if m.bytes >= 0 {
            row.allocated_bytes = row.allocated_bytes.saturating_add(m.bytes.unsigned_abs());
        } else {
            row.freed_bytes = row.freed_bytes.saturating_add(m.bytes.unsigned_abs());
        }
        if let Some(total) = m.total_allocated {
            row.peak_total_allocated =
                Some(row.peak_total_allocated.map_or(total, |p| p.max(total)));
        }
    }
    let mut memory: Vec<TorchStepMemory> = mem.into_values().collect();
    memory.sort_by_key(|m| (m.step, m.device_type));

    // Element types of the ops' inputs.
    let mut dtype_counts: FastMap<&'static str, u64> = FastMap::default();
    for (sig, &uses) in types.iter().zip(&type_uses) {
        for &t in sig {
            if let Some(d) = dtype_of(strings.resolve(t)) {
                *dtype_counts.entry(d).or_default() += uses;
            }
        }
    }
    let mut dtypes: Vec<TorchDtype> = dtype_counts
        .into_iter()
        .map(|(dtype, inputs)| TorchDtype { dtype, inputs })
        .collect();
    dtypes.sort_by(|a, b| b.inputs.cmp(&a.inputs).then(a.dtype.cmp(b.dtype)));

    let threads: Vec<TorchThread> = threads
        .into_iter()
        .zip(thread_ops)
        .map(|(t, ops)| TorchThread {
            pid: t.pid,
            tid: t.tid,
            name: t.name.map(|s| strings.resolve(s).to_string()),
            ops,
        })
        .collect();
    let op_threads = threads.iter().filter(|t| t.ops > 0).count();
    let dims = dims
        .into_iter()
        .map(|flat| {
            let text = dims_text(&flat);
            (flat, text)
        })
        .collect();

    TorchRun {
        source,
        trace_name,
        schema_version,
        base_time_ns,
        device_properties,
        device: if cuda {
            TorchDevice::Cuda
        } else {
            TorchDevice::Cpu
        },
        steps,
        ops,
        ranges,
        memory,
        threads,
        op_threads,
        dtypes,
        counts,
        merged,
        adjusted,
        strings,
        paths,
        dims,
        types,
    }
}
