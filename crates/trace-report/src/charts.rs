//! Chart data computed from the loaded trace: where each tensor came from.

use std::collections::HashMap;

use trace_analyze::{Trace, span_paths};

/// Where tensors came from: tensor id → (producing op name, span path of that op).
pub(crate) struct Producers {
    by_tensor: HashMap<u64, (String, Option<String>)>,
}

impl Producers {
    /// Indexes every op's outputs (the last op writing a tensor id wins). O(n) in the ops.
    pub(crate) fn new(trace: &Trace) -> Producers {
        let (path_of, table) = span_paths(trace);
        let mut names: Vec<String> = Vec::with_capacity(table.len());
        for (parent, name) in &table {
            let s = match parent.and_then(|p| names.get(p as usize)) {
                Some(p) => format!("{p}/{}", trace.str(*name)),
                None => trace.str(*name).to_string(),
            };
            names.push(s);
        }
        let mut by_tensor = HashMap::new();
        for op in &trace.ops {
            let path = op
                .span
                .and_then(|s| path_of.get(s as usize))
                .and_then(|p| names.get(*p as usize))
                .cloned();
            let (a, b) = op.outputs;
            if let Some(outs) = trace.tensor_refs.get(a as usize..b as usize) {
                for id in outs {
                    by_tensor.insert(*id, (trace.str(op.name).to_string(), path.clone()));
                }
            }
        }
        Producers { by_tensor }
    }

    /// The producing op and its span path, when an op recorded the tensor as an output.
    pub(crate) fn of(&self, tensor: u64) -> Option<&(String, Option<String>)> {
        self.by_tensor.get(&tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(lines: &[&str]) -> Trace {
        let mut s = String::from(
            r#"{"type":"header","schema":"tracegraph-trace","version":1,"run":{"run_id":"t","entrypoint":"test","phase":"train","device":"cpu","timing":"host","start_unix_ns":0,"pid":7}}"#,
        );
        for l in lines {
            s.push('\n');
            s.push_str(l);
        }
        s.push('\n');
        trace_analyze::load_str(&s, "t.jsonl", Default::default()).expect("trace")
    }

    #[test]
    fn producers_name_the_op_and_its_span_path() {
        let t = trace(&[
            r#"{"type":"span_start","id":1,"name":"forward","kind":"function","thread":0,"ts":1}"#,
            r#"{"type":"span_start","id":2,"parent":1,"name":"layers.0","kind":"module","thread":0,"ts":2}"#,
            r#"{"type":"op","span":2,"name":"matmul","in":[1,2],"out":[7],"shape":[2,2],"dtype":"f32","ts":3,"dur":1,"in_b":32,"out_b":16}"#,
            r#"{"type":"span_end","id":2,"ts":5}"#,
            r#"{"type":"span_end","id":1,"ts":6}"#,
        ]);
        let p = Producers::new(&t);
        assert_eq!(
            p.of(7),
            Some(&("matmul".to_string(), Some("forward/layers.0".to_string())))
        );
        assert!(p.of(1).is_none());
    }
}
