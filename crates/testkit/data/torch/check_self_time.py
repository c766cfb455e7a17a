#!/usr/bin/env python3
"""Checks that self times rebuilt from a torch.profiler Chrome trace match torch's key_averages.

For each fixture NAME in (llama, bert): reads NAME.trace.json.gz and NAME.key_averages.json
(both from one profiler cycle, written by profile_torch.py), and

  1. nests the trace's complete events ("ph": "X") per (pid, tid) by time containment
     (every X event except the "Trace" category, i.e. cpu_op and user_annotation here),
  1b. merges an event into its parent when the parent has the same name and no other child,
     as torch's EventList._remove_dup_nodes does before key_averages (redispatches such as
     aten::div_ -> aten::div_); without this, counts differ though self-time sums agree,
  2. takes each event's self time = dur - sum of its direct children's dur,
  3. sums self time and counts per name, over cpu_op events (ops) and over user_annotation
     events (record_function ranges; torch groups ProfilerStep#N as "ProfilerStep*"),
  4. compares with key_averages' self_cpu_time_total_us and count, per name and in total.

Pass: every count equal, the cpu_op total self time within 1%, the all-events total within 1%,
and every name within 1% or 1 us. This is the property the Rust importer is tested against.
Times are computed in integer nanoseconds (ts and dur are microsecond floats with 3 decimals).

Stdlib only: `python3 crates/testkit/data/torch/check_self_time.py [DIR]`; exits 1 on failure.
"""

import collections
import gzip
import json
import os
import re
import sys


def ns(us):
    return round(us * 1000)


def self_times(events):
    """Per kept event index: self time in ns, and how many events were merged away.

    Events nest per thread by time containment. Then, as torch's EventList._remove_dup_nodes
    does before key_averages, an event whose parent has the same name and no other child is
    merged into that parent (its children become the parent's; repeated to a fixpoint; this
    folds redispatches such as aten::div_ inside aten::div_). Self time = dur - sum of the
    direct children's dur, after merging.
    """
    by_thread = collections.defaultdict(list)
    for i, e in enumerate(events):
        by_thread[(e["pid"], e["tid"])].append(i)
    parent = {}
    children = collections.defaultdict(list)
    for idx in by_thread.values():
        idx.sort(key=lambda i: (ns(events[i]["ts"]), -ns(events[i]["dur"])))
        stack = []  # (index, end_ns)
        for i in idx:
            start, dur = ns(events[i]["ts"]), ns(events[i]["dur"])
            while stack and stack[-1][1] <= start:
                stack.pop()
            parent[i] = stack[-1][0] if stack else None
            if stack:
                if start + dur > stack[-1][1]:
                    raise ValueError(f"event {events[i]['name']} overlaps its parent "
                                     f"{events[stack[-1][0]]['name']} without nesting")
                children[stack[-1][0]].append(i)
            stack.append((i, start + dur))
    live = set(parent)
    merged = 0
    while True:
        gone = set()
        for i in sorted(live):
            p = parent[i]
            if p is not None and events[p]["name"] == events[i]["name"] and len(children[p]) == 1:
                children[p] = children[i]
                for c in children[i]:
                    parent[c] = p
                gone.add(i)
        if not gone:
            break
        live -= gone
        merged += len(gone)
    out = {i: ns(events[i]["dur"]) - sum(ns(events[c]["dur"]) for c in children[i]) for i in live}
    return out, merged


def group_key(name):
    return "ProfilerStep*" if re.fullmatch(r"ProfilerStep#\d+", name) else name


def check(folder, name):
    with gzip.open(os.path.join(folder, f"{name}.trace.json.gz"), "rt") as f:
        trace = json.load(f)
    with open(os.path.join(folder, f"{name}.key_averages.json")) as f:
        ka = json.load(f)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") != "Trace"]
    cats = collections.Counter(e.get("cat") for e in events)
    selfs, merged = self_times(events)
    trace_self = collections.defaultdict(float)  # name -> us
    trace_count = collections.Counter()
    cat_of = {}
    for i, e in enumerate(events):
        if i not in selfs:
            continue  # merged into its same-named parent
        k = group_key(e["name"])
        trace_self[k] += selfs[i] / 1000.0
        trace_count[k] += 1
        cat_of[k] = e["cat"]
    ka_ops = {o["name"]: o for o in ka["ops"]}

    ok = True
    worst = (0.0, None)
    for k in sorted(set(trace_self) | set(ka_ops)):
        if k not in ka_ops or k not in trace_self:
            print(f"  {name}: {k!r} only in {'trace' if k in trace_self else 'key_averages'}")
            ok = False
            continue
        o = ka_ops[k]
        if o["count"] != trace_count[k]:
            print(f"  {name}: {k}: count trace {trace_count[k]} != key_averages {o['count']}")
            ok = False
        a, b = trace_self[k], o["self_cpu_time_total_us"]
        diff = abs(a - b)
        rel = diff / b if b else (0.0 if diff == 0 else float("inf"))
        if rel > worst[0]:
            worst = (rel, k)
        if diff > 1.0 and rel > 0.01:
            print(f"  {name}: {k}: self trace {a:.3f} us vs key_averages {b:.3f} us ({rel:.2%})")
            ok = False

    def total(pred):
        t = sum(v for k, v in trace_self.items() if pred(k))
        a = sum(ka_ops[k]["self_cpu_time_total_us"] for k in ka_ops if pred(k))
        return t, a

    op_t, op_a = total(lambda k: cat_of.get(k) == "cpu_op")
    all_t, all_a = total(lambda k: True)
    for label, t, a in (("cpu_op", op_t, op_a), ("all", all_t, all_a)):
        rel = abs(t - a) / a
        print(f"  {name}: {label:6} self total: trace {t:.3f} us, key_averages {a:.3f} us, "
              f"diff {rel:.4%}")
        ok &= rel <= 0.01
    steps = ka["active_steps"]
    print(f"  {name}: X events {dict(cats)}, {merged} merged into a same-named parent, "
          f"{len(ka_ops)} names, worst per-name diff "
          f"{worst[0]:.4%} ({worst[1]}), all-events self per step {all_a / steps:.1f} us, "
          f"cpu_op self per step {op_a / steps:.1f} us")
    return ok


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    ok = True
    for name in ("llama", "bert"):
        good = check(folder, name)
        print(f"{name}: {'PASS' if good else 'FAIL'}")
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
