//! Properties: percentiles and spreads against naive references; op self time never exceeds
//! the duration and self times add up to the top-level durations.

use proptest::prelude::*;
use trace_analyze::percentile;
use trace_analyze::stats::Spread;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn percentile_matches_sorting(mut v in proptest::collection::vec(0u64..1000, 1..200), p in 1u32..=100) {
        let mut sorted = v.clone();
        sorted.sort_unstable();
        let rank = ((f64::from(p) / 100.0) * sorted.len() as f64).ceil() as usize;
        let want = sorted[rank.clamp(1, sorted.len()) - 1];
        prop_assert_eq!(percentile(&mut v, f64::from(p)), Some(want));
    }

    #[test]
    fn spread_matches_naive(v in proptest::collection::vec(0u64..1_000_000, 1..100)) {
        let s = Spread::of(&v).unwrap();
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        prop_assert!((s.mean - mean).abs() <= 1e-6 * mean.max(1.0));
        prop_assert!((s.stddev - var.sqrt()).abs() <= 1e-6 * var.sqrt().max(1.0));
        prop_assert_eq!(s.min, *v.iter().min().unwrap());
        prop_assert_eq!(s.max, *v.iter().max().unwrap());
    }

    /// Random properly nested op intervals: self times are within [0, dur] and sum to the
    /// total duration of the top-level ops.
    #[test]
    fn self_times_partition_top_level_time(splits in proptest::collection::vec((1u64..50, 0usize..3), 1..40)) {
        // Build a nesting by a stack: each entry opens an op of `len` that contains the next
        // `children` entries (as far as they fit), laid out left to right.
        let mut lines = Vec::new();
        let mut ts = 0u64;
        let mut top_total = 0u64;
        let mut i = 0;
        while i < splits.len() {
            let (len, children) = splits[i];
            let start = ts;
            let mut inner = start + 1;
            let mut j = i + 1;
            let mut c = 0;
            while c < children && j < splits.len() {
                let l = splits[j].0;
                lines.push(format!(r#"{{"type":"op","name":"c","in":[],"out":[],"shape":[],"dtype":"f32","ts":{inner},"dur":{l}}}"#));
                inner += l + 1;
                j += 1;
                c += 1;
            }
            let dur = (inner - start) + len;
            lines.push(format!(r#"{{"type":"op","name":"p","in":[],"out":[],"shape":[],"dtype":"f32","ts":{start},"dur":{dur}}}"#));
            top_total += dur;
            ts = start + dur + 1;
            i = j;
        }
        let mut text = String::from(r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"p","entrypoint":"e","phase":"infer","device":"cpu","timing":"host","start_unix_ns":0,"pid":1}}"#);
        text.push('\n');
        for l in &lines { text.push_str(l); text.push('\n'); }
        let t = trace_analyze::load_str(&text, "prop.jsonl", Default::default()).unwrap();
        let selfs = trace_analyze::events::op_self_times(&t);
        for (s, op) in selfs.iter().zip(&t.ops) {
            prop_assert!(*s <= op.dur_ns);
        }
        prop_assert_eq!(selfs.iter().sum::<u64>(), top_total);
    }
}
