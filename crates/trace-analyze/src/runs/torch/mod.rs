//! torch.profiler runs: Chrome traces from `prof.export_chrome_trace` read into a [`TorchRun`].
//!
//! [`load_torch_path`] and [`load_torch_reader`] stream a trace (plain JSON or gzip) event by
//! event (`load`, `read`), nest each thread's complete events and compute self times the way
//! torch's `key_averages` does (`nest`), and keep a compact model: profiler steps
//! ([`TorchStep`]), ops with their input dims and types ([`TorchOp`]), `record_function`
//! ranges with their nested paths ([`TorchRange`]), memory per step ([`TorchStepMemory`]),
//! threads, element types and the device. [`TorchRun::self_by_name`] and its kin give the
//! per-name tables a comparison with a Candle run starts from; op kinds come from
//! [`OpClass`](crate::events::OpClass).

pub(crate) mod load;
pub(crate) mod model;
pub(crate) mod nest;
pub(crate) mod read;

pub use load::{load_torch_path, load_torch_reader};
pub use model::{
    PROFILER_STEP_ROW, TorchClassRow, TorchCounts, TorchDevice, TorchDims, TorchDtype, TorchId,
    TorchOp, TorchRange, TorchRun, TorchSelfRow, TorchStep, TorchStepMemory, TorchThread,
};
pub use read::TORCH_MAX_TIME_NS;
