//! Tensor metadata: ids, dtype labels, dense bytes and device labels for every Candle dtype.

use candle_core::{DType, Device, DeviceLocation, Tensor, Var};
use trace_candle::{
    ALL_DTYPES, DeviceLabel, TensorMeta, dense_bytes, dtype_bits, dtype_label, tensor_id,
};

/// (dtype, label, bits per element) for every dtype of Candle 0.11.
const TABLE: [(DType, &str, u32); 14] = [
    (DType::U8, "u8", 8),
    (DType::U32, "u32", 32),
    (DType::I16, "i16", 16),
    (DType::I32, "i32", 32),
    (DType::I64, "i64", 64),
    (DType::BF16, "bf16", 16),
    (DType::F16, "f16", 16),
    (DType::F32, "f32", 32),
    (DType::F64, "f64", 64),
    (DType::F8E4M3, "f8e4m3", 8),
    (DType::F6E2M3, "f6e2m3", 6),
    (DType::F6E3M2, "f6e3m2", 6),
    (DType::F4, "f4", 4),
    (DType::F8E8M0, "f8e8m0", 8),
];

#[test]
fn every_dtype_has_a_label_and_dense_bytes() {
    assert_eq!(ALL_DTYPES.len(), TABLE.len());
    for (&dtype, &(expected, label, bits)) in ALL_DTYPES.iter().zip(TABLE.iter()) {
        assert_eq!(dtype, expected);
        assert_eq!(dtype_label(dtype), label);
        assert_eq!(dtype_bits(dtype), bits);
        // 8 elements: `bits` bytes, sub-byte dtypes packed (never zero).
        assert_eq!(dense_bytes(dtype, 8), u64::from(bits), "{label}");
        assert_eq!(dense_bytes(dtype, 0), 0);
    }
    // Odd element counts of sub-byte dtypes round up to whole bytes.
    assert_eq!(dense_bytes(DType::F4, 3), 2);
    assert_eq!(dense_bytes(DType::F6E2M3, 5), 4);
    assert_eq!(dense_bytes(DType::F6E3M2, 6), 5);
    assert_eq!(dense_bytes(DType::F32, 1000), 4000);
    assert_eq!(dense_bytes(DType::F64, usize::MAX), u64::MAX);
}

/// A safetensors buffer holding one tensor `t` of `dtype` (name as safetensors spells it).
fn safetensors_buffer(st_dtype: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let header = format!(
        r#"{{"t":{{"dtype":"{st_dtype}","shape":{shape:?},"data_offsets":[0,{}]}}}}"#,
        data.len()
    );
    let mut header = header.into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut buf = (header.len() as u64).to_le_bytes().to_vec();
    buf.extend_from_slice(&header);
    buf.extend_from_slice(data);
    buf
}

#[test]
fn real_tensors_of_every_dtype_report_labels_and_bytes() {
    let dev = Device::Cpu;
    for (dtype, label, bits) in TABLE {
        let tensor = match dtype {
            DType::F6E2M3 | DType::F6E3M2 | DType::F4 | DType::F8E8M0 => {
                // Candle cannot create these on the CPU except by loading them.
                let st = match dtype {
                    DType::F6E2M3 => "F6_E2M3",
                    DType::F6E3M2 => "F6_E3M2",
                    DType::F4 => "F4",
                    _ => "F8_E8M0",
                };
                let bytes = (8 * bits / 8) as usize;
                let buf = safetensors_buffer(st, &[2, 4], &vec![0u8; bytes]);
                let mut loaded = candle_core::safetensors::load_buffer(&buf, &dev).unwrap();
                loaded.remove("t").unwrap()
            }
            _ => Tensor::zeros((2, 4), dtype, &dev).unwrap(),
        };
        assert_eq!(tensor.dtype(), dtype);
        let meta = TensorMeta::of(&tensor);
        assert_eq!(meta.dtype_label(), label);
        assert_eq!(meta.bytes, u64::from(8 * bits / 8), "{label}");
        assert_eq!(meta.shape, vec![2, 4]);
        assert_eq!(meta.device.as_str(), "cpu");
        assert!(!meta.requires_grad);
        assert!(!meta.is_variable);
        assert_eq!(meta.id, tensor_id(&tensor));
    }
}

#[test]
fn device_labels() {
    assert_eq!(DeviceLabel::of(&Device::Cpu).as_str(), "cpu");
    let check = |loc, want: &str| assert_eq!(DeviceLabel::of_location(loc).to_string(), want);
    check(DeviceLocation::Cpu, "cpu");
    check(DeviceLocation::Cuda { gpu_id: 0 }, "cuda:0");
    check(DeviceLocation::Cuda { gpu_id: 3 }, "cuda:3");
    check(DeviceLocation::Cuda { gpu_id: 15 }, "cuda:15");
    check(DeviceLocation::Cuda { gpu_id: 16 }, "cuda:16");
    check(DeviceLocation::Metal { gpu_id: 0 }, "metal:0");
    check(DeviceLocation::Metal { gpu_id: 123 }, "metal:123");
}

#[test]
fn ids_are_candle_counter_values_unique_and_never_reused() {
    let dev = Device::Cpu;
    let a = Tensor::zeros(4, DType::F32, &dev).unwrap();
    // The id is exactly the integer in Candle's `TensorId(N)`.
    assert_eq!(
        format!("{:?}", a.id()),
        format!("TensorId({})", tensor_id(&a))
    );
    let first = tensor_id(&a);
    // A clone shares the tensor (and its id); a new tensor gets a new id.
    assert_eq!(tensor_id(&a.clone()), first);
    drop(a);
    let mut seen = std::collections::HashSet::new();
    let mut last = first;
    for _ in 0..100 {
        // Freed and reallocated storage may reuse an address, never an id.
        let t = Tensor::zeros(4, DType::F32, &dev).unwrap();
        let id = tensor_id(&t);
        assert!(id > last, "ids increase: {id} after {last}");
        assert!(seen.insert(id));
        last = id;
    }
}

#[test]
fn a_variable_requires_grad_and_its_results_track_ops() {
    let dev = Device::Cpu;
    let var = Var::ones((2, 2), DType::F32, &dev).unwrap();
    let meta = TensorMeta::of(var.as_tensor());
    assert!(meta.is_variable && meta.requires_grad);
    let derived = (var.as_tensor() * 2.0).unwrap();
    let meta = TensorMeta::of(&derived);
    assert!(!meta.is_variable && meta.requires_grad);
    let plain = Tensor::ones((2, 2), DType::F32, &dev).unwrap();
    assert!(!TensorMeta::of(&plain).requires_grad);
}
