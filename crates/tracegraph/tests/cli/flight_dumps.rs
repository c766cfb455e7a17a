//! `summary` on flight-recorder dumps: one dump names its trigger and the triggering step
//! against the dump's other steps; a directory of dumps is listed with their triggers.

use std::time::Duration;

use trace_record::schema::{Phase, SpanKind};
use trace_record::{FlightConfig, OpRecord, Run, TraceSession};

use crate::{run_in, stderr, stdout};

#[test]
fn summary_names_a_dumps_trigger_and_lists_a_directory_of_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let session = TraceSession::flight(
        Run::new("tests::flight_dumps", Phase::Train, "cpu").run_id("job"),
        FlightConfig::new(&dumps)
            .before(2)
            .min_interval(Duration::ZERO),
    )
    .unwrap();
    for step in 0..12u64 {
        {
            let _s = session.span("forward", SpanKind::Module, None);
            let start = session.now_ns();
            session.record_op(&OpRecord {
                name: "matmul",
                inputs: &[1, 2],
                outputs: &[3],
                shape: &[4, 4],
                dtype: "f32",
                device: "cpu",
                start_ns: start,
                dur_ns: 10,
                in_bytes: 128,
                out_bytes: 64,
                category: None,
                flops: None,
            });
        }
        if step == 5 {
            assert!(session.dump("first look"));
        }
        session.record_loss(if step == 9 { f64::NAN } else { 1.0 });
        session.step();
    }
    session.finish().unwrap();
    let stats = session.flight_stats().unwrap();
    assert_eq!(stats.dumps.len(), 2, "{stats:?}");

    let call = stats
        .dumps
        .iter()
        .find(|p| p.to_string_lossy().contains("-call-"))
        .unwrap();
    let o = run_in(dir.path(), &["summary", call.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("dump      #1 by call at step 5"), "{text}");
    assert!(text.contains("first look"), "{text}");
    assert!(text.contains("steps 3–5"), "{text}");
    let o = run_in(
        dir.path(),
        &["validate", "--strict", call.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", stdout(&o));

    let o = run_in(dir.path(), &["summary", "dumps"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("2 flight-recorder dump(s)"), "{text}");
    assert!(text.contains("non_finite_loss"), "{text}");
    assert!(text.contains("call"), "{text}");
    let o = run_in(dir.path(), &["summary", "dumps", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["schema"], "tracegraph.dumps/1", "{v}");
}
