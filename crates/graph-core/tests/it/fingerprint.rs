//! Fingerprints: golden values, byte encodings, canonical renumbering and sensitivity.
//!
//! The golden values are the cross-process, cross-platform pin of encoding version 1.

use std::sync::Arc;

use graph_core::{
    FINGERPRINT_VERSION, Fingerprint, Graph, GraphBuilder, Role, StableHash, StableHasher,
    UnorderedFingerprint, ValueRef, structural_eq,
};

use crate::common::{TOp, mlp};

/// Golden values: changing the encoding means bumping `FINGERPRINT_VERSION`, the version in
/// docs/fingerprint.md, and these values together.
const GOLDEN_EMPTY: &str = "37d2f266cf7d3a978886d4b4bb209868";
const GOLDEN_MLP: &str = "ac68b5534187348ad5b5d456568e63f0";
const GOLDEN_ROLES: &str = "17a626a59b5c2dda3f8e3b8c9b9c5aa5";
const GOLDEN_CHILD: &str = "531b6a58cebb393494a6f80b87d10081";
const GOLDEN_UNORDERED: &str = "f891e0fc35284a388842d475bd021bee";
const GOLDEN_TUPLE: &str = "ea4f91e194fae4e554797499d115918f";

fn roles_graph() -> Graph<TOp> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(7);
    let t = b.add_input(8);
    let (_, outs) = b.add_op(
        TOp::Shape(vec![2, 3]),
        &[x.into(), t.into()],
        2,
        Role::Linearized {
            active: vec![false, true],
        },
    );
    let (_, y) = b.add_op1(TOp::Scale(-0.5), &[outs[1].into()], Role::Transposed);
    let (_, z) = b.add_op1(TOp::Const(-3), &[y.into(), x.into()], Role::Primary);
    b.set_outputs(&[z, outs[0], x]);
    b.build().expect("valid")
}

fn child_graph(parent: Arc<Graph<TOp>>) -> Graph<TOp> {
    let mut b = GraphBuilder::new();
    let p = b.add_parent(parent.clone());
    let g = b.add_input(0);
    let (_, y) = b.add_op1(
        TOp::Mul,
        &[
            g.into(),
            ValueRef::Parent {
                parent: p,
                value: parent.outputs()[0],
            },
        ],
        Role::Primary,
    );
    b.set_outputs(&[y]);
    b.build().expect("valid")
}

#[test]
fn goldens() {
    let empty = GraphBuilder::<TOp>::new().build().expect("empty");
    let mlp = Arc::new(mlp());
    let child = child_graph(mlp.clone());
    let unordered = Fingerprint::of_unordered([(1u64, "weight"), (2, "bias"), (3, "bias")]);
    let tuple = Fingerprint::of(&(1u8, -2i32, "s", Some(vec![3usize]), None::<u16>, true));
    let got = [
        ("empty", empty.fingerprint(), GOLDEN_EMPTY),
        ("mlp", mlp.fingerprint(), GOLDEN_MLP),
        ("roles", roles_graph().fingerprint(), GOLDEN_ROLES),
        ("child", child.fingerprint(), GOLDEN_CHILD),
        ("unordered", unordered, GOLDEN_UNORDERED),
        ("tuple", tuple, GOLDEN_TUPLE),
    ];
    let mut bad = Vec::new();
    for (name, fp, golden) in got {
        if fp.to_string() != golden {
            bad.push(format!("{name}: got {fp}, golden {golden}"));
        }
    }
    assert!(
        bad.is_empty(),
        "fingerprints changed (version {FINGERPRINT_VERSION}):\n{}",
        bad.join("\n")
    );
}

#[test]
fn repeat_query_and_recompute_agree() {
    let g = roles_graph();
    assert_eq!(g.fingerprint(), g.fingerprint());
    assert_eq!(g.compute_fingerprint(), g.fingerprint());
    let h = g.clone();
    assert_eq!(h.fingerprint(), g.fingerprint());
    assert!(structural_eq(&g, &h));
}

#[test]
fn graph_encoding_is_the_documented_byte_layout() {
    // x (key 5) -> op Const(9) (Primary) -> output; rebuilt by hand from docs/fingerprint.md.
    let mut b = GraphBuilder::new();
    let x = b.add_input(5);
    let (_, y) = b.add_op1(TOp::Const(9), &[x.into()], Role::Primary);
    b.set_outputs(&[y]);
    let g = b.build().expect("valid");

    let mut bytes = Vec::new();
    let domain = b"tracegraph.graph-core.fingerprint";
    bytes.extend_from_slice(&(domain.len() as u64).to_le_bytes());
    bytes.extend_from_slice(domain);
    bytes.extend_from_slice(&1u32.to_le_bytes()); // version
    bytes.extend_from_slice(&1u64.to_le_bytes()); // one input
    bytes.extend_from_slice(&5u64.to_le_bytes()); // its key
    // Op record header: tag 1, role 0 (Primary), 2 zero bytes, 1 output (u32), 1 operand (u64).
    bytes.extend_from_slice(&[1, 0, 0, 0]);
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes()); // local operand: canonical index 0 (x)
    bytes.push(2); // payload: TOp::Const tag
    bytes.extend_from_slice(&9i64.to_le_bytes());
    // End record: tag 2, 7 zero bytes, 1 live op (u64).
    bytes.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes()); // one graph output
    bytes.extend_from_slice(&1u32.to_le_bytes()); // canonical index of y
    assert_eq!(g.fingerprint(), Fingerprint::of_bytes(&bytes));
}

#[test]
fn parent_operand_and_mask_layout() {
    // g (key 0) and value `r` of the parent -> Mul, Linearized [true, false] -> y.
    let parent = Arc::new(mlp());
    let r = parent.outputs()[0];
    let mut b = GraphBuilder::new();
    let p = b.add_parent(parent.clone());
    let g = b.add_input(0);
    let (_, y) = b.add_op1(
        TOp::Mul,
        &[
            g.into(),
            ValueRef::Parent {
                parent: p,
                value: r,
            },
        ],
        Role::Linearized {
            active: vec![true, false],
        },
    );
    b.set_outputs(&[y]);
    let child = b.build().expect("valid");

    let mut bytes = Vec::new();
    let domain = b"tracegraph.graph-core.fingerprint";
    bytes.extend_from_slice(&(domain.len() as u64).to_le_bytes());
    bytes.extend_from_slice(domain);
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&[1, 1, 0, 0]); // op record, role 1 (Linearized)
    bytes.extend_from_slice(&1u32.to_le_bytes()); // one output
    bytes.extend_from_slice(&2u64.to_le_bytes()); // two operands
    bytes.extend_from_slice(&0u64.to_le_bytes()); // local g
    let idx = u64::from(parent.canonical_index(r).expect("live"));
    bytes.extend_from_slice(&(idx | 1 << 32).to_le_bytes()); // parent operand
    bytes.extend_from_slice(&parent.fingerprint().to_le_bytes());
    bytes.extend_from_slice(&[1, 0]); // active mask
    bytes.push(1); // payload: TOp::Mul tag
    bytes.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&1u32.to_le_bytes());
    assert_eq!(idx, 5);
    assert_eq!(child.fingerprint(), Fingerprint::of_bytes(&bytes));
}

#[test]
fn primitive_encodings() {
    fn bytes_of<T: StableHash + ?Sized>(x: &T) -> Fingerprint {
        Fingerprint::of(x)
    }
    let cases: Vec<(Fingerprint, Vec<u8>)> = vec![
        (bytes_of(&0x0102u16), vec![2, 1]),
        (bytes_of(&-1i8), vec![0xff]),
        (bytes_of(&true), vec![1]),
        (bytes_of(&7usize), 7u64.to_le_bytes().to_vec()),
        (bytes_of(&-2isize), (-2i64).to_le_bytes().to_vec()),
        (bytes_of("ab"), [&2u64.to_le_bytes()[..], b"ab"].concat()),
        (
            bytes_of(&String::from("ab")),
            [&2u64.to_le_bytes()[..], b"ab"].concat(),
        ),
        (
            bytes_of(&[1u8, 2][..]),
            [&2u64.to_le_bytes()[..], &[1, 2]].concat(),
        ),
        (
            bytes_of(&vec![1u8, 2]),
            [&2u64.to_le_bytes()[..], &[1, 2]].concat(),
        ),
        (
            bytes_of(&[1u8, 2]),
            [&2u64.to_le_bytes()[..], &[1, 2]].concat(),
        ),
        (bytes_of(&None::<u8>), vec![0]),
        (bytes_of(&Some(3u8)), vec![1, 3]),
        (bytes_of(&(1u8, 2u16)), vec![1, 2, 0]),
        (bytes_of(&'A'), 65u32.to_le_bytes().to_vec()),
        (bytes_of(&1.5f64), 1.5f64.to_bits().to_le_bytes().to_vec()),
        (bytes_of(&1.5f32), 1.5f32.to_bits().to_le_bytes().to_vec()),
        (bytes_of(&u128::MAX), u128::MAX.to_le_bytes().to_vec()),
        (bytes_of(&Fingerprint(5)), 5u128.to_le_bytes().to_vec()),
        (bytes_of(&()), vec![]),
    ];
    for (i, (fp, bytes)) in cases.into_iter().enumerate() {
        assert_eq!(fp, Fingerprint::of_bytes(&bytes), "case {i}");
    }
    // The hash is XXH3-128 (reference vector for the empty input).
    assert_eq!(
        Fingerprint::of_bytes(&[]),
        Fingerprint(0x99aa_06d3_0147_98d8_6001_c324_468d_497f)
    );
    // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
    assert_ne!(Fingerprint::of(&("ab", "c")), Fingerprint::of(&("a", "bc")));
    assert_ne!(Fingerprint::of(&0.0f64), Fingerprint::of(&-0.0f64));
}

#[test]
fn hasher_streams_large_inputs_like_one_shot() {
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut h = StableHasher::new();
    for chunk in data.chunks(7) {
        h.write_bytes(chunk);
    }
    assert_eq!(h.finish(), Fingerprint::of_bytes(&data));
    // finish does not consume: more writes continue the stream.
    h.write_u8(1);
    let mut more = data.clone();
    more.push(1);
    assert_eq!(h.finish(), Fingerprint::of_bytes(&more));
    h.reset();
    assert_eq!(h.finish(), Fingerprint::of_bytes(&[]));
}

#[test]
fn fingerprint_text_and_bytes_round_trip() {
    let fp = Fingerprint(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
    assert_eq!(fp.to_string(), "0123456789abcdef0011223344556677");
    assert_eq!(Fingerprint::from_hex(&fp.to_string()), Some(fp));
    assert_eq!(Fingerprint::from_le_bytes(fp.to_le_bytes()), fp);
    assert_eq!(fp.to_le_bytes()[0], 0x77);
    assert_eq!(Fingerprint::from_hex("xyz"), None);
    assert_eq!(
        Fingerprint::from_hex("+123456789abcdef0011223344556677"),
        None
    );
    assert!(format!("{fp:?}").contains("0123456789abcdef"));
}

#[test]
fn unordered_is_a_multiset() {
    let a = Fingerprint::of_unordered(["x", "y", "z"]);
    assert_eq!(a, Fingerprint::of_unordered(["z", "x", "y"]));
    assert_ne!(a, Fingerprint::of_unordered(["x", "y"]));
    assert_ne!(a, Fingerprint::of_unordered(["x", "y", "z", "z"]));
    // xor alone would cancel the pair; count and sum keep it.
    assert_ne!(
        Fingerprint::of_unordered(["x", "x"]),
        Fingerprint::of_unordered(Vec::<&str>::new())
    );
    let mut u = UnorderedFingerprint::new();
    assert!(u.is_empty());
    u.add("x");
    let mut v = UnorderedFingerprint::new();
    v.add_fingerprint(Fingerprint::of("y"));
    v.add("z");
    u.merge(&v);
    assert_eq!(u.len(), 3);
    assert_eq!(u.finish(), a);
}

#[test]
fn unordered_pairs_that_cancel_in_the_xor_stay_apart() {
    // Multisets with equal counts and equal XORs (pairs cancel): only the sum tells them
    // apart, and it must.
    let of = |items: &[&str]| Fingerprint::of_unordered(items.iter().copied());
    assert_ne!(of(&["x", "x"]), of(&["y", "y"]));
    assert_ne!(of(&["x", "y", "y"]), of(&["x", "z", "z"]));
    assert_ne!(of(&["x", "x", "y", "y"]), of(&["z", "z", "w", "w"]));
    assert_ne!(of(&["x", "x", "y", "y"]), of(&["x", "x", "x", "x"]));
    // Equal XORs from different counts.
    assert_ne!(of(&["x"]), of(&["x", "y", "y"]));
}

#[test]
fn canonical_under_renumbering() {
    // The MLP built with its operations and values created in a different order.
    let mut b = GraphBuilder::new();
    let r2 = b.add_value();
    let h = b.add_value();
    let w = b.add_value();
    let h2 = b.add_value();
    let x = b.add_value();
    let r = b.add_value();
    b.add_op_with_outputs(
        TOp::Named("relu".into()),
        &[h2.into()],
        &[r2],
        Role::Primary,
    );
    b.add_op_with_outputs(
        TOp::Named("matmul".into()),
        &[r.into(), w.into()],
        &[h2],
        Role::Primary,
    );
    b.add_op_with_outputs(TOp::Named("relu".into()), &[h.into()], &[r], Role::Primary);
    b.add_op_with_outputs(
        TOp::Named("matmul".into()),
        &[x.into(), w.into()],
        &[h],
        Role::Primary,
    );
    b.set_input(x, 0);
    b.set_input(w, 1);
    b.set_outputs(&[r2]);
    let g = b.build().expect("valid");
    assert_eq!(g.fingerprint(), mlp().fingerprint());
    assert!(structural_eq(&g, &mlp()));
}

fn one_op(
    payload: TOp,
    role: Role,
    keys: [u64; 2],
    swap_operands: bool,
    swap_outputs: bool,
) -> Graph<TOp> {
    let mut b = GraphBuilder::new();
    let x = b.add_input(keys[0]);
    let y = b.add_input(keys[1]);
    let ops = if swap_operands { [y, x] } else { [x, y] };
    let (_, outs) = b.add_op(payload, &[ops[0].into(), ops[1].into()], 2, role);
    if swap_outputs {
        b.set_outputs(&[outs[1], outs[0]]);
    } else {
        b.set_outputs(&outs);
    }
    b.build().expect("valid")
}

#[test]
fn sensitive_to_every_part() {
    let base = one_op(TOp::Add, Role::Primary, [1, 2], false, false);
    let variants = [
        (
            "payload",
            one_op(TOp::Mul, Role::Primary, [1, 2], false, false),
        ),
        (
            "role",
            one_op(TOp::Add, Role::Transposed, [1, 2], false, false),
        ),
        (
            "mask",
            one_op(
                TOp::Add,
                Role::Linearized {
                    active: vec![true, true],
                },
                [1, 2],
                false,
                false,
            ),
        ),
        (
            "input keys",
            one_op(TOp::Add, Role::Primary, [2, 1], false, false),
        ),
        (
            "edges",
            one_op(TOp::Add, Role::Primary, [1, 2], true, false),
        ),
        (
            "output order",
            one_op(TOp::Add, Role::Primary, [1, 2], false, true),
        ),
    ];
    let mut seen = vec![base.fingerprint()];
    for (what, g) in &variants {
        assert_ne!(g.fingerprint(), base.fingerprint(), "{what}");
        assert!(!structural_eq(g, &base), "{what}");
        seen.push(g.fingerprint());
    }
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen.len(),
        variants.len() + 1,
        "all variants differ pairwise"
    );
    let masks = [
        Role::Linearized {
            active: vec![true, false],
        },
        Role::Linearized {
            active: vec![false, true],
        },
    ]
    .map(|r| one_op(TOp::Add, r, [1, 2], false, false).fingerprint());
    assert_ne!(masks[0], masks[1]);
}

#[test]
fn parents_enter_through_their_fingerprint() {
    let p1 = Arc::new(mlp());
    let p1_again = Arc::new(mlp());
    let p2 = Arc::new(roles_graph());
    let c1 = child_graph(p1.clone());
    let c1_again = child_graph(p1_again);
    assert_eq!(c1.fingerprint(), c1_again.fingerprint());
    assert!(structural_eq(&c1, &c1_again));
    let c2 = child_graph(p2);
    assert_ne!(c1.fingerprint(), c2.fingerprint());
    assert!(!structural_eq(&c1, &c2));

    // Reading a different (live) value of the same parent changes the fingerprint.
    let mut b = GraphBuilder::new();
    let p = b.add_parent(p1.clone());
    let g = b.add_input(0);
    let (_, y) = b.add_op1(
        TOp::Mul,
        &[
            g.into(),
            ValueRef::Parent {
                parent: p,
                value: p1.inputs()[1],
            },
        ],
        Role::Primary,
    );
    b.set_outputs(&[y]);
    assert_ne!(b.build().expect("valid").fingerprint(), c1.fingerprint());
}

#[test]
fn dead_code_does_not_contribute() {
    let mut b = GraphBuilder::new();
    let x = b.add_input(0);
    let w = b.add_input(1);
    let (_, h) = b.add_op1(
        TOp::Named("matmul".into()),
        &[x.into(), w.into()],
        Role::Primary,
    );
    let (_, _dead) = b.add_op1(TOp::Const(1), &[h.into()], Role::Primary);
    let (_, r) = b.add_op1(TOp::Named("relu".into()), &[h.into()], Role::Primary);
    let (_, h2) = b.add_op1(
        TOp::Named("matmul".into()),
        &[r.into(), w.into()],
        Role::Primary,
    );
    let (_, r2) = b.add_op1(TOp::Named("relu".into()), &[h2.into()], Role::Primary);
    b.set_outputs(&[r2]);
    let g = b.build().expect("valid");
    assert_eq!(g.fingerprint(), mlp().fingerprint());
    assert!(structural_eq(&g, &mlp()));
}

#[test]
fn wide_operations_and_long_encodings_keep_the_documented_layout() {
    // One op with 1000 operands (alternating the input and a parent value: over 16 KiB of
    // operands, written outside the reserved fast path), then 600 narrow ops, so the
    // encoding spans several 16 KiB chunks. Rebuilt by hand from docs/fingerprint.md.
    let parent = Arc::new(mlp());
    let r = parent.outputs()[0];
    let pidx = u64::from(parent.canonical_index(r).expect("live"));
    let mut b = GraphBuilder::new();
    let p = b.add_parent(parent.clone());
    let x = b.add_input(7);
    let operands: Vec<ValueRef> = (0..1000)
        .map(|i| {
            if i % 2 == 0 {
                x.into()
            } else {
                ValueRef::Parent {
                    parent: p,
                    value: r,
                }
            }
        })
        .collect();
    let (_, mut v) = b.add_op1(TOp::Add, &operands, Role::Primary);
    for i in 0..600 {
        v = b.add_op1(TOp::Const(i), &[v.into()], Role::Transposed).1;
    }
    b.set_outputs(&[v]);
    let g = b.build().expect("valid");

    let mut bytes = Vec::new();
    let domain = b"tracegraph.graph-core.fingerprint";
    bytes.extend_from_slice(&(domain.len() as u64).to_le_bytes());
    bytes.extend_from_slice(domain);
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&7u64.to_le_bytes());
    bytes.extend_from_slice(&[1, 0, 0, 0]); // op record, role 0
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&1000u64.to_le_bytes());
    for i in 0..1000 {
        if i % 2 == 0 {
            bytes.extend_from_slice(&0u64.to_le_bytes());
        } else {
            bytes.extend_from_slice(&(pidx | 1 << 32).to_le_bytes());
            bytes.extend_from_slice(&parent.fingerprint().to_le_bytes());
        }
    }
    bytes.push(0); // payload: TOp::Add
    for i in 0..600u64 {
        bytes.extend_from_slice(&[1, 2, 0, 0]); // op record, role 2 (Transposed)
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&(i + 1).to_le_bytes()); // the previous op's output
        bytes.push(2);
        bytes.extend_from_slice(&(i as i64).to_le_bytes());
    }
    bytes.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&601u64.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&601u32.to_le_bytes());
    assert!(bytes.len() > 2 * 16 * 1024);
    assert_eq!(g.fingerprint(), Fingerprint::of_bytes(&bytes));
    assert_eq!(g.compute_fingerprint(), g.fingerprint());
}

/// A chain over input key 3: op `i` reads the previous value; its record is built by hand.
fn chain_and_bytes(payloads: &[(TOp, Role)]) -> (graph_core::Graph<TOp>, Vec<u8>) {
    let mut b = GraphBuilder::new();
    let mut v = b.add_input(3);
    for (p, role) in payloads {
        v = b.add_op1(p.clone(), &[v.into()], role.clone()).1;
    }
    b.set_outputs(&[v]);
    let g = b.build().expect("valid");
    let mut bytes = Vec::new();
    let domain = b"tracegraph.graph-core.fingerprint";
    bytes.extend_from_slice(&(domain.len() as u64).to_le_bytes());
    bytes.extend_from_slice(domain);
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&3u64.to_le_bytes());
    for (i, (p, role)) in payloads.iter().enumerate() {
        let (tag, mask): (u8, &[bool]) = match role {
            Role::Linearized { active } => (1, active),
            Role::Transposed => (2, &[]),
            _ => (0, &[]),
        };
        bytes.extend_from_slice(&[1, tag, 0, 0]);
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&(i as u64).to_le_bytes());
        bytes.extend(mask.iter().map(|&a| u8::from(a)));
        match p {
            TOp::Add => bytes.push(0),
            TOp::Const(c) => {
                bytes.push(2);
                bytes.extend_from_slice(&c.to_le_bytes());
            }
            TOp::Named(n) => {
                bytes.push(3);
                bytes.extend_from_slice(&(n.len() as u64).to_le_bytes());
                bytes.extend_from_slice(n.as_bytes());
            }
            other => panic!("not used here: {other:?}"),
        }
    }
    let n = payloads.len() as u64;
    bytes.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
    bytes.extend_from_slice(&n.to_le_bytes());
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&(n as u32).to_le_bytes());
    (g, bytes)
}

#[test]
fn payloads_of_every_length_keep_the_documented_layout() {
    // The builder keeps each operation's mask and payload bytes for the walk; payloads of
    // 1 to 49 bytes (the walk copies short ones specially), with and without masks.
    let mut payloads = vec![
        (TOp::Add, Role::Primary),
        (TOp::Const(-5), Role::Transposed),
    ];
    for len in 0..=40 {
        let role = if len % 3 == 0 {
            Role::Linearized {
                active: vec![len % 2 == 0],
            }
        } else {
            Role::Primary
        };
        payloads.push((TOp::Named("n".repeat(len)), role));
    }
    let (g, bytes) = chain_and_bytes(&payloads);
    assert_eq!(g.fingerprint(), Fingerprint::of_bytes(&bytes));
    assert_eq!(g.compute_fingerprint(), g.fingerprint());
}

#[test]
fn a_payload_over_16_kib_keeps_the_documented_layout() {
    // Larger than the hasher's 16 KiB chunk: the builder keeps it all the same, and the
    // walk writes it outside the reserved fast path.
    let payloads = vec![
        (TOp::Const(1), Role::Primary),
        (TOp::Named("x".repeat(20_000)), Role::Transposed),
        (TOp::Add, Role::Linearized { active: vec![true] }),
    ];
    let (g, bytes) = chain_and_bytes(&payloads);
    assert_eq!(g.fingerprint(), Fingerprint::of_bytes(&bytes));
    assert_eq!(g.compute_fingerprint(), g.fingerprint());
    // The kept bytes are arena memory, counted (at the capacity the buffer grew to: at most
    // twice what was written).
    let small = chain_and_bytes(&payloads[..1]).0;
    let kept = g.arena_heap_bytes() - small.arena_heap_bytes();
    assert!((20_000..2 * 20_100 + 4096).contains(&kept), "{kept}");
}
