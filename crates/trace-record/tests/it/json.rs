//! The public JSON writer: the same bytes as serde_json / `to_string` / ryu, exact microseconds.

use proptest::prelude::*;
use trace_record::json::{self, Object};

fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
    let mut out = b"prefix ".to_vec();
    f(&mut out);
    let text = String::from_utf8(out).unwrap();
    text.strip_prefix("prefix ").unwrap().to_string()
}

proptest! {
    #[test]
    fn strings_are_what_serde_json_writes(v in any::<String>()) {
        prop_assert_eq!(s(|o| json::push_str(o, &v)), serde_json::to_string(&v).unwrap());
    }

    #[test]
    fn integers_are_to_string(u in any::<u64>(), i in any::<i64>()) {
        prop_assert_eq!(s(|o| json::push_u64(o, u)), u.to_string());
        prop_assert_eq!(s(|o| json::push_i64(o, i)), i.to_string());
    }

    #[test]
    fn floats_are_shortest_round_trip(v in any::<f64>()) {
        let text = s(|o| json::push_f64(o, v));
        if v.is_finite() {
            let mut buf = ryu::Buffer::new();
            prop_assert_eq!(text.as_str(), buf.format_finite(v));
            prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), v.to_bits());
        } else {
            prop_assert_eq!(text, "null");
        }
    }

    #[test]
    fn micros_are_exact(ns in any::<u64>()) {
        let text = s(|o| json::push_micros(o, ns));
        prop_assert_eq!(text, format!("{}.{:03}", ns / 1000, ns % 1000));
    }
}

#[test]
fn every_control_character_is_escaped() {
    for b in 0u8..0x20 {
        let v = format!("a{}b", b as char);
        assert_eq!(
            s(|o| json::push_str(o, &v)),
            serde_json::to_string(&v).unwrap()
        );
    }
    assert_eq!(s(|o| json::push_str(o, "\u{8}\u{c}")), r#""\b\f""#);
    assert_eq!(s(|o| json::push_str(o, "\u{7f}é🦀")), "\"\u{7f}é🦀\"");
}

#[test]
fn edge_numbers() {
    for (v, text) in [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (0.25, "0.25"),
        (1e-7, "1e-7"),
        (1e16, "1e16"),
        (f64::INFINITY, "null"),
        (f64::NAN, "null"),
    ] {
        assert_eq!(s(|o| json::push_f64(o, v)), text, "{v}");
    }
    assert_eq!(s(|o| json::push_i64(o, i64::MIN)), i64::MIN.to_string());
    assert_eq!(s(|o| json::push_micros(o, 0)), "0.000");
    assert_eq!(s(|o| json::push_micros(o, 5)), "0.005");
    assert_eq!(s(|o| json::push_micros(o, 1_234_567)), "1234.567");
    assert_eq!(s(|o| json::push_u64_array(o, [])), "[]");
    assert_eq!(s(|o| json::push_bool(o, false)), "false");
}

#[test]
fn objects_parse_back() {
    let mut out = Vec::new();
    let mut o = Object::new(&mut out);
    o.str("k\"ey", "v\n")
        .u64("u", u64::MAX)
        .i64("i", -3)
        .f64("nan", f64::NAN)
        .micros("ts", 1500)
        .bool("b", true)
        .raw("pre", "[1,{}]");
    Object::new(o.key("inner")).finish();
    o.finish();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v,
        serde_json::json!({
            "k\"ey": "v\n", "u": u64::MAX, "i": -3, "nan": null, "ts": 1.5, "b": true,
            "pre": [1, {}], "inner": {}
        })
    );
    let mut empty = Vec::new();
    Object::new(&mut empty).finish();
    assert_eq!(empty, b"{}");
}
