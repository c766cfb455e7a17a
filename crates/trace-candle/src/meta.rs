//! Owned tensor metadata: process-unique ids, dtype and device labels, dense byte sizes.

use std::hash::{Hash, Hasher};

use candle_core::{DType, Device, DeviceLocation, Tensor};

/// Every dtype Candle 0.11 knows, in declaration order.
pub const ALL_DTYPES: [DType; 14] = [
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::BF16,
    DType::F16,
    DType::F32,
    DType::F64,
    DType::F8E4M3,
    DType::F6E2M3,
    DType::F6E3M2,
    DType::F4,
    DType::F8E8M0,
];

/// A [`Hasher`] that keeps the last `usize` written to it: recovers `TensorId`'s counter value.
struct IdCapture(u64);

impl Hasher for IdCapture {
    fn finish(&self) -> u64 {
        self.0
    }

    // Only reached if a future Candle hashes something other than one `usize`: fold the bytes
    // so the result is still a deterministic function of the id.
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

/// The process-unique, never-reused integer id of a tensor (Candle's `TensorId` counter).
///
/// Candle gives every [`Tensor`] a [`candle_core::TensorId`] drawn from one process-wide
/// `AtomicUsize` counter that starts at 1 and only ever increments (`fetch_add(1)`): an id is
/// never reused, not even after the tensor and its storage are freed. The counter's value is
/// private to Candle, but `TensorId` derives `Hash` over its single `usize` field, so feeding it
/// to a [`Hasher`] that keeps the value of `write_usize` recovers the integer exactly, without
/// allocating. This function does that.
///
/// trace-candle uses that integer both as the tensor id and as the **storage id** of the
/// allocation a captured tensor stands for. Raw storage addresses are never used: an allocator
/// hands the same address to the next allocation after a free, which would make two unrelated
/// allocations look like one. Because views (`reshape`, `narrow`, `t()`) get fresh tensor ids in
/// Candle, bytes recorded for a view are *logical* bytes (shape × dtype), not a new physical
/// allocation; the trace labels them as logical.
pub fn tensor_id(tensor: &Tensor) -> u64 {
    let mut h = IdCapture(0);
    tensor.id().hash(&mut h);
    h.finish()
}

/// The label of a dtype in traces: `u8`, `u32`, `i16`, `i32`, `i64`, `bf16`, `f16`, `f32`,
/// `f64`, `f8e4m3`, `f6e2m3`, `f6e3m2`, `f4`, `f8e8m0` (Candle's own names).
pub fn dtype_label(dtype: DType) -> &'static str {
    dtype.as_str()
}

/// Bits one element of `dtype` takes in dense storage (6 for the MX6 floats, 4 for `f4`).
pub fn dtype_bits(dtype: DType) -> u32 {
    match dtype {
        DType::U8 | DType::F8E4M3 | DType::F8E8M0 => 8,
        DType::I16 | DType::BF16 | DType::F16 => 16,
        DType::U32 | DType::I32 | DType::F32 => 32,
        DType::I64 | DType::F64 => 64,
        DType::F6E2M3 | DType::F6E3M2 => 6,
        DType::F4 => 4,
        // A dtype added after Candle 0.11: trust Candle's own byte size.
        other => u32::try_from(other.size_in_bytes().saturating_mul(8)).unwrap_or(u32::MAX),
    }
}

/// Dense bytes of `elem_count` elements of `dtype`: `ceil(elem_count × bits / 8)`, so sub-byte
/// dtypes are counted packed (as Candle stores them), never as zero. Saturates at `u64::MAX`.
pub fn dense_bytes(dtype: DType, elem_count: usize) -> u64 {
    let bits = (elem_count as u128).saturating_mul(u128::from(dtype_bits(dtype)));
    u64::try_from(bits.div_ceil(8)).unwrap_or(u64::MAX)
}

/// Dense bytes of a tensor's logical extent (shape × dtype).
pub(crate) fn tensor_bytes(tensor: &Tensor) -> u64 {
    dense_bytes(tensor.dtype(), tensor.elem_count())
}

const CUDA_LABELS: [&str; 16] = [
    "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:4", "cuda:5", "cuda:6", "cuda:7", "cuda:8",
    "cuda:9", "cuda:10", "cuda:11", "cuda:12", "cuda:13", "cuda:14", "cuda:15",
];
const METAL_LABELS: [&str; 16] = [
    "metal:0", "metal:1", "metal:2", "metal:3", "metal:4", "metal:5", "metal:6", "metal:7",
    "metal:8", "metal:9", "metal:10", "metal:11", "metal:12", "metal:13", "metal:14", "metal:15",
];

/// A device label (`cpu`, `cuda:N`, `metal:N`) that borrows a static string for the first 16
/// ordinals of each backend, so labelling allocates nothing in the common case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLabel(DeviceLabelRepr);

#[derive(Debug, Clone, PartialEq, Eq)]
enum DeviceLabelRepr {
    Static(&'static str),
    Owned(String),
}

impl DeviceLabel {
    /// The label of a device location.
    pub fn of_location(location: DeviceLocation) -> Self {
        let (table, prefix, ordinal) = match location {
            DeviceLocation::Cpu => return DeviceLabel(DeviceLabelRepr::Static("cpu")),
            DeviceLocation::Cuda { gpu_id } => (&CUDA_LABELS, "cuda", gpu_id),
            DeviceLocation::Metal { gpu_id } => (&METAL_LABELS, "metal", gpu_id),
        };
        match table.get(ordinal) {
            Some(s) => DeviceLabel(DeviceLabelRepr::Static(s)),
            None => DeviceLabel(DeviceLabelRepr::Owned(format!("{prefix}:{ordinal}"))),
        }
    }

    /// The label of a device.
    pub fn of(device: &Device) -> Self {
        Self::of_location(device.location())
    }

    /// The label as text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            DeviceLabelRepr::Static(s) => s,
            DeviceLabelRepr::Owned(s) => s,
        }
    }
}

impl std::fmt::Display for DeviceLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Owned metadata of one tensor. Holds no reference to the tensor or its storage, so taking a
/// snapshot never keeps a tensor alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Process-unique tensor id (see [`tensor_id`]).
    pub id: u64,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Element type.
    pub dtype: DType,
    /// Device label.
    pub device: DeviceLabel,
    /// True when Candle tracks gradients through this tensor (a variable, or computed from one).
    pub requires_grad: bool,
    /// True when the tensor is a variable (`Var`): a trainable parameter.
    pub is_variable: bool,
    /// Dense logical bytes (shape × dtype).
    pub bytes: u64,
}

impl TensorMeta {
    /// A snapshot of `tensor`'s metadata.
    pub fn of(tensor: &Tensor) -> Self {
        TensorMeta {
            id: tensor_id(tensor),
            shape: tensor.dims().to_vec(),
            dtype: tensor.dtype(),
            device: DeviceLabel::of(tensor.device()),
            requires_grad: tensor.track_op(),
            is_variable: tensor.is_variable(),
            bytes: tensor_bytes(tensor),
        }
    }

    /// The dtype label (see [`dtype_label`]).
    pub fn dtype_label(&self) -> &'static str {
        dtype_label(self.dtype)
    }
}
