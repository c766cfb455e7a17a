//! Streaming reader of torch.profiler Chrome traces: `traceEvents` visited one event at a time.
//!
//! The top-level object is deserialized with serde_json's `Deserializer::from_reader` and
//! hand-written seeds ([`DeserializeSeed`]): each element of `traceEvents` is read field by
//! field into one reused set of fields, names are interned straight from the parser's buffer,
//! input dims and types into reused scratch vectors, and only what the model keeps is
//! retained (one small record per complete event, one per memory event). Every error is a
//! serde_json error (so it carries a line and column), located by the event index and field
//! the reader was at.

use std::fmt;
use std::io::Read;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::AnalyzeError;
use crate::model::intern::{FastMap, Interner, Sym};
use crate::runs::torch::model::{DIMS_LIST, DIMS_TENSOR, TorchCounts, TorchId};

/// The largest `ts` or `dur` a torch trace may hold, ns (2^62, about 146 years): starts plus
/// durations never overflow.
pub const TORCH_MAX_TIME_NS: u64 = 1 << 62;

/// "No index" in the reader's and nesting's `u32` columns.
pub(crate) const NONE: u32 = u32::MAX;

/// Reads the JSON of a trace from `reader` into the builder that nesting finishes (`gzip`:
/// the stream was decompressed, for the error's wording).
pub(crate) fn read_json<R: Read>(
    reader: R,
    source: &str,
    gzip: bool,
) -> Result<Builder, AnalyzeError> {
    let mut b = Builder::new(source);
    let mut de = serde_json::Deserializer::from_reader(reader);
    let result = TopSeed(&mut b).deserialize(&mut de).and_then(|()| de.end());
    match result {
        Ok(()) => Ok(b),
        Err(error) => Err(b.error(error, gzip)),
    }
}

/// What kind of complete event a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    /// A `cpu_op`.
    Op,
    /// A `ProfilerStep#N` (`ext` holds `N`).
    Step,
    /// A `user_annotation` other than a step: a `record_function` range.
    Range,
    /// A `python_function`.
    Python,
    /// Any other host-side complete event (CUDA runtime calls, uncategorised).
    Other,
}

/// One complete event kept for nesting.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The external id of an op (`u64::MAX`: none), the number of a step.
    pub(crate) ext: u64,
    pub(crate) name: Sym,
    pub(crate) thread: u32,
    /// Input dims signature (ops; [`NONE`] otherwise).
    pub(crate) dims: u32,
    /// Input types signature (ops; [`NONE`] otherwise).
    pub(crate) types: u32,
    pub(crate) kind: NodeKind,
}

/// A `[memory]` instant event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemSample {
    pub(crate) ts: u64,
    pub(crate) device_type: i64,
    pub(crate) bytes: i64,
    pub(crate) total_allocated: Option<i64>,
}

/// A thread seen in the trace.
#[derive(Debug, Clone)]
pub(crate) struct ThreadInfo {
    pub(crate) pid: TorchId,
    pub(crate) tid: TorchId,
    pub(crate) name: Option<Sym>,
}

/// The phase of an event (`ph`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ph {
    Complete,
    Instant,
    Metadata,
    Other,
}

/// The category of an event (`cat`), as far as the reader cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cat {
    CpuOp,
    UserAnnotation,
    PythonFunction,
    /// The profiler's own span (`PyTorch Profiler (0)`): never nested.
    Trace,
    /// Device-side events: kernels, copies, sets, GPU annotations.
    Device,
    /// Host-side CUDA calls (`cuda_runtime`, `cuda_driver`).
    CudaHost,
    Other,
}

impl Cat {
    fn of(s: &str) -> Cat {
        match s {
            "cpu_op" => Cat::CpuOp,
            "user_annotation" => Cat::UserAnnotation,
            "python_function" => Cat::PythonFunction,
            "Trace" => Cat::Trace,
            "kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation" | "ac2g" => Cat::Device,
            "cuda_runtime" | "cuda_driver" => Cat::CudaHost,
            _ => Cat::Other,
        }
    }
}

/// The fields of the event being read (reset per event; scratch vectors reused).
#[derive(Debug, Default)]
struct EventFields {
    ph: Option<Ph>,
    cat: Option<Cat>,
    name: Option<Sym>,
    pid: Option<TorchId>,
    tid: Option<TorchId>,
    ts: Option<u64>,
    dur: Option<u64>,
    has_dims: bool,
    has_types: bool,
    external_id: Option<u64>,
    bytes: Option<i64>,
    total_allocated: Option<i64>,
    device_type: Option<i64>,
    arg_name: Option<Sym>,
}

impl EventFields {
    fn reset(&mut self) {
        *self = EventFields::default();
    }
}

/// Why an event cannot be kept.
enum EventError {
    /// A field the event needs is missing.
    Missing(&'static str),
    /// More complete events than the model's `u32` indices hold.
    TooMany,
}

/// How a user annotation's name reads: a step (`ProfilerStep#N`) or a range.
#[derive(Debug, Clone, Copy)]
enum NameKind {
    Unknown,
    Step(u64),
    Range,
}

/// Everything read so far, and where the reader is (for errors).
pub(crate) struct Builder {
    pub(crate) source: String,
    pub(crate) strings: Interner,
    pub(crate) nodes: Vec<Node>,
    pub(crate) memory: Vec<MemSample>,
    pub(crate) threads: Vec<ThreadInfo>,
    thread_index: FastMap<(TorchId, TorchId), u32>,
    /// The last thread looked up (most events repeat it).
    last_thread: Option<(TorchId, TorchId, u32)>,
    pub(crate) dims: Vec<Box<[i64]>>,
    dims_index: FastMap<Box<[i64]>, u32>,
    pub(crate) types: Vec<Box<[Sym]>>,
    types_index: FastMap<Box<[Sym]>, u32>,
    /// Ops (merged ones too) per input types signature.
    pub(crate) type_uses: Vec<u64>,
    /// Per name (by [`Sym`]), how it reads as a user annotation.
    name_kinds: Vec<NameKind>,
    pub(crate) counts: TorchCounts,
    pub(crate) cuda: bool,
    pub(crate) trace_name: Option<String>,
    pub(crate) schema_version: Option<u64>,
    pub(crate) base_time_ns: Option<u64>,
    pub(crate) device_properties: Option<u64>,
    saw_events: bool,
    memory_sym: Sym,
    thread_name_sym: Sym,
    ev: EventFields,
    dims_scratch: Vec<i64>,
    types_scratch: Vec<Sym>,
    /// Where the reader is: the event's index in `traceEvents` and the field.
    loc_event: Option<u64>,
    loc_field: Option<&'static str>,
}

impl Builder {
    fn new(source: &str) -> Self {
        let mut strings = Interner::new();
        let memory_sym = strings.intern("[memory]");
        let thread_name_sym = strings.intern("thread_name");
        Builder {
            source: source.to_string(),
            strings,
            nodes: Vec::new(),
            memory: Vec::new(),
            threads: Vec::new(),
            thread_index: FastMap::default(),
            last_thread: None,
            dims: Vec::new(),
            dims_index: FastMap::default(),
            types: Vec::new(),
            types_index: FastMap::default(),
            type_uses: Vec::new(),
            name_kinds: Vec::new(),
            counts: TorchCounts::default(),
            cuda: false,
            trace_name: None,
            schema_version: None,
            base_time_ns: None,
            device_properties: None,
            saw_events: false,
            memory_sym,
            thread_name_sym,
            ev: EventFields::default(),
            dims_scratch: Vec::new(),
            types_scratch: Vec::new(),
            loc_event: None,
            loc_field: None,
        }
    }

    /// The error for `error`, located where the reader was.
    fn error(&self, error: serde_json::Error, gzip: bool) -> AnalyzeError {
        let file = self.source.clone();
        if error.is_io() {
            let error = std::io::Error::from(error);
            let corrupt = matches!(
                error.kind(),
                std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::UnexpectedEof
            );
            return if gzip && corrupt {
                AnalyzeError::Gzip { file, error }
            } else {
                AnalyzeError::Io { file, error }
            };
        }
        AnalyzeError::Torch {
            file,
            event: self.loc_event,
            field: self.loc_field,
            error,
        }
    }

    /// The index of thread (`pid`, `tid`), adding it when new.
    fn thread(&mut self, pid: TorchId, tid: TorchId) -> u32 {
        if let Some((p, t, i)) = &self.last_thread
            && *p == pid
            && *t == tid
        {
            return *i;
        }
        let next = u32::try_from(self.threads.len()).unwrap_or(NONE);
        let i = *self
            .thread_index
            .entry((pid.clone(), tid.clone()))
            .or_insert(next);
        if i == next {
            self.threads.push(ThreadInfo {
                pid: pid.clone(),
                tid: tid.clone(),
                name: None,
            });
        }
        self.last_thread = Some((pid, tid, i));
        i
    }

    /// How `name` reads as a user annotation (cached per name).
    fn name_kind(&mut self, name: Sym) -> NameKind {
        let i = name.0 as usize;
        if self.name_kinds.len() <= i {
            self.name_kinds.resize(i + 1, NameKind::Unknown);
        }
        if let NameKind::Unknown = self.name_kinds[i] {
            let s = self.strings.resolve(name);
            self.name_kinds[i] = match s.strip_prefix("ProfilerStep#") {
                Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                    n.parse().map_or(NameKind::Range, NameKind::Step)
                }
                _ => NameKind::Range,
            };
        }
        self.name_kinds[i]
    }

    /// The id of the input dims in the scratch vector, adding it when new.
    fn intern_dims(&mut self) -> u32 {
        if let Some(&id) = self.dims_index.get(self.dims_scratch.as_slice()) {
            return id;
        }
        let id = u32::try_from(self.dims.len()).unwrap_or(NONE);
        let key: Box<[i64]> = self.dims_scratch.as_slice().into();
        self.dims.push(key.clone());
        self.dims_index.insert(key, id);
        id
    }

    /// The id of the input types in the scratch vector, adding it when new.
    fn intern_types(&mut self) -> u32 {
        if let Some(&id) = self.types_index.get(self.types_scratch.as_slice()) {
            return id;
        }
        let id = u32::try_from(self.types.len()).unwrap_or(NONE);
        let key: Box<[Sym]> = self.types_scratch.as_slice().into();
        self.types.push(key.clone());
        self.types_index.insert(key, id);
        self.type_uses.push(0);
        id
    }

    /// Keeps what the model needs of the event just read.
    fn finish_event(&mut self) -> Result<(), EventError> {
        let missing = |field| Err(EventError::Missing(field));
        let Some(ph) = self.ev.ph else {
            return missing("ph");
        };
        match ph {
            Ph::Complete => {
                let cat = self.ev.cat.unwrap_or(Cat::Other);
                match cat {
                    Cat::Trace => {
                        self.counts.unused += 1;
                        return Ok(());
                    }
                    Cat::Device => {
                        self.cuda = true;
                        self.counts.device_events += 1;
                        return Ok(());
                    }
                    _ => {}
                }
                let Some(name) = self.ev.name else {
                    return missing("name");
                };
                let Some(ts) = self.ev.ts else {
                    return missing("ts");
                };
                let Some(dur) = self.ev.dur else {
                    return missing("dur");
                };
                let Some(pid) = self.ev.pid.take() else {
                    return missing("pid");
                };
                let Some(tid) = self.ev.tid.take() else {
                    return missing("tid");
                };
                if self.nodes.len() >= (NONE - 1) as usize {
                    return Err(EventError::TooMany);
                }
                let thread = self.thread(pid, tid);
                let (kind, ext) = match cat {
                    Cat::CpuOp => (NodeKind::Op, self.ev.external_id.unwrap_or(u64::MAX)),
                    Cat::UserAnnotation => match self.name_kind(name) {
                        NameKind::Step(n) => (NodeKind::Step, n),
                        _ => (NodeKind::Range, u64::MAX),
                    },
                    Cat::PythonFunction => {
                        self.counts.python_functions += 1;
                        (NodeKind::Python, u64::MAX)
                    }
                    _ => {
                        if cat == Cat::CudaHost {
                            self.cuda = true;
                        }
                        self.counts.other_complete += 1;
                        (NodeKind::Other, u64::MAX)
                    }
                };
                let (mut dims, mut types) = (NONE, NONE);
                if kind == NodeKind::Op {
                    if self.ev.has_dims {
                        dims = self.intern_dims();
                    }
                    if self.ev.has_types {
                        types = self.intern_types();
                        if let Some(uses) = self.type_uses.get_mut(types as usize) {
                            *uses += 1;
                        }
                    }
                }
                self.counts.complete += 1;
                self.nodes.push(Node {
                    start: ts,
                    // Both at most 2^62: no overflow.
                    end: ts + dur,
                    ext,
                    name,
                    thread,
                    dims,
                    types,
                    kind,
                });
            }
            Ph::Instant if self.ev.name == Some(self.memory_sym) => {
                let Some(ts) = self.ev.ts else {
                    return missing("ts");
                };
                let Some(bytes) = self.ev.bytes else {
                    return missing("args.Bytes");
                };
                self.counts.memory_events += 1;
                self.memory.push(MemSample {
                    ts,
                    device_type: self.ev.device_type.unwrap_or(0),
                    bytes,
                    total_allocated: self.ev.total_allocated,
                });
            }
            Ph::Metadata if self.ev.name == Some(self.thread_name_sym) => {
                match (self.ev.pid.take(), self.ev.tid.take(), self.ev.arg_name) {
                    (Some(pid), Some(tid), Some(name)) => {
                        let t = self.thread(pid, tid) as usize;
                        if let Some(info) = self.threads.get_mut(t) {
                            info.name = Some(name);
                        }
                    }
                    _ => self.counts.unused += 1,
                }
            }
            Ph::Instant | Ph::Metadata | Ph::Other => self.counts.unused += 1,
        }
        Ok(())
    }
}

// ---- The top-level object ------------------------------------------------------------------

/// The keys of the top-level object the reader keeps.
enum TopKey {
    TraceEvents,
    BaseTime,
    DeviceProperties,
    SchemaVersion,
    TraceName,
    Other,
}

impl<'de> de::Deserialize<'de> for TopKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TopKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TopKey, E> {
                Ok(match s {
                    "traceEvents" => TopKey::TraceEvents,
                    "baseTimeNanoseconds" => TopKey::BaseTime,
                    "deviceProperties" => TopKey::DeviceProperties,
                    "schemaVersion" => TopKey::SchemaVersion,
                    "traceName" => TopKey::TraceName,
                    _ => TopKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

struct TopSeed<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Chrome trace: a JSON object with \"traceEvents\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::TraceEvents => {
                    b.loc_field = Some("traceEvents");
                    map.next_value_seed(EventsSeed(&mut *b))?;
                    b.saw_events = true;
                    b.loc_event = None;
                }
                TopKey::BaseTime => {
                    b.loc_field = Some("baseTimeNanoseconds");
                    b.base_time_ns = Some(map.next_value::<u64>()?);
                }
                TopKey::DeviceProperties => {
                    b.loc_field = Some("deviceProperties");
                    b.device_properties = Some(map.next_value_seed(CountSeq)?);
                }
                TopKey::SchemaVersion => {
                    b.loc_field = Some("schemaVersion");
                    b.schema_version = Some(map.next_value::<u64>()?);
                }
                TopKey::TraceName => {
                    b.loc_field = Some("traceName");
                    b.trace_name = Some(map.next_value::<String>()?);
                }
                TopKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            b.loc_field = None;
        }
        if !b.saw_events {
            b.loc_field = Some("traceEvents");
            return Err(de::Error::custom(
                "not a torch.profiler Chrome trace: no \"traceEvents\" array",
            ));
        }
        Ok(())
    }
}

/// Counts the elements of an array, ignoring them.
struct CountSeq;

impl<'de> DeserializeSeed<'de> for CountSeq {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for CountSeq {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut n = 0u64;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

// ---- traceEvents ---------------------------------------------------------------------------

struct EventsSeed<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let b = self.0;
        loop {
            b.loc_event = Some(b.counts.events);
            b.loc_field = None;
            b.ev.reset();
            if seq.next_element_seed(EventSeed(&mut *b))?.is_none() {
                break;
            }
            b.counts.events += 1;
        }
        b.loc_event = None;
        b.loc_field = Some("traceEvents");
        Ok(())
    }
}

/// The fields of an event the reader reads.
enum EventKey {
    Ph,
    Cat,
    Name,
    Pid,
    Tid,
    Ts,
    Dur,
    Args,
    Other,
}

impl<'de> de::Deserialize<'de> for EventKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EventKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EventKey, E> {
                Ok(match s {
                    "ph" => EventKey::Ph,
                    "cat" => EventKey::Cat,
                    "name" => EventKey::Name,
                    "pid" => EventKey::Pid,
                    "tid" => EventKey::Tid,
                    "ts" => EventKey::Ts,
                    "dur" => EventKey::Dur,
                    "args" => EventKey::Args,
                    _ => EventKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

struct EventSeed<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for EventSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EventSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trace event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while let Some(key) = map.next_key::<EventKey>()? {
            match key {
                EventKey::Ph => {
                    b.loc_field = Some("ph");
                    b.ev.ph = Some(map.next_value_seed(PhSeed)?);
                }
                EventKey::Cat => {
                    b.loc_field = Some("cat");
                    b.ev.cat = Some(map.next_value_seed(CatSeed)?);
                }
                EventKey::Name => {
                    b.loc_field = Some("name");
                    b.ev.name = Some(map.next_value_seed(SymSeed(&mut b.strings))?);
                }
                EventKey::Pid => {
                    b.loc_field = Some("pid");
                    b.ev.pid = Some(map.next_value_seed(IdSeed)?);
                }
                EventKey::Tid => {
                    b.loc_field = Some("tid");
                    b.ev.tid = Some(map.next_value_seed(IdSeed)?);
                }
                EventKey::Ts => {
                    b.loc_field = Some("ts");
                    b.ev.ts = Some(map.next_value_seed(TimeSeed)?);
                }
                EventKey::Dur => {
                    b.loc_field = Some("dur");
                    b.ev.dur = Some(map.next_value_seed(TimeSeed)?);
                }
                EventKey::Args => {
                    b.loc_field = Some("args");
                    map.next_value_seed(ArgsSeed(&mut *b))?;
                }
                EventKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            b.loc_field = None;
        }
        match b.finish_event() {
            Ok(()) => {}
            Err(EventError::Missing(field)) => {
                b.loc_field = Some(field);
                return Err(de::Error::missing_field(field));
            }
            Err(EventError::TooMany) => {
                return Err(de::Error::custom(format_args!(
                    "more than {} complete events are not supported",
                    NONE - 1
                )));
            }
        }
        Ok(())
    }
}

/// `ph`: a string.
struct PhSeed;

impl<'de> DeserializeSeed<'de> for PhSeed {
    type Value = Ph;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Ph, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for PhSeed {
    type Value = Ph;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a phase string")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Ph, E> {
        Ok(match s {
            "X" => Ph::Complete,
            "i" | "I" => Ph::Instant,
            "M" => Ph::Metadata,
            _ => Ph::Other,
        })
    }
}

/// `cat`: a string.
struct CatSeed;

impl<'de> DeserializeSeed<'de> for CatSeed {
    type Value = Cat;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cat, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for CatSeed {
    type Value = Cat;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a category string")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Cat, E> {
        Ok(Cat::of(s))
    }
}

/// A string, interned without allocating when already known.
struct SymSeed<'a>(&'a mut Interner);

impl<'de> DeserializeSeed<'de> for SymSeed<'_> {
    type Value = Sym;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Sym, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for SymSeed<'_> {
    type Value = Sym;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Sym, E> {
        Ok(self.0.intern(s))
    }
}

/// `pid` or `tid`: an integer or a string.
struct IdSeed;

impl<'de> DeserializeSeed<'de> for IdSeed {
    type Value = TorchId;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<TorchId, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for IdSeed {
    type Value = TorchId;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer or a string")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<TorchId, E> {
        Ok(TorchId::Num(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<TorchId, E> {
        i64::try_from(v)
            .map(TorchId::Num)
            .map_err(|_| E::custom(format_args!("id {v} is out of range")))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<TorchId, E> {
        Ok(TorchId::Text(s.to_string()))
    }
}

/// `ts` or `dur`: microseconds (a number), returned as whole nanoseconds, rounded.
struct TimeSeed;

impl<'de> DeserializeSeed<'de> for TimeSeed {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for TimeSeed {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number of microseconds")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        v.checked_mul(1000)
            .filter(|&ns| ns <= TORCH_MAX_TIME_NS)
            .ok_or_else(|| too_large(v as f64))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format_args!("{v} is negative"))),
        }
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        if !v.is_finite() {
            return Err(E::custom(format_args!("{v} is not a finite number")));
        }
        if v < 0.0 {
            return Err(E::custom(format_args!("{v} is negative")));
        }
        let ns = (v * 1000.0).round();
        if ns > TORCH_MAX_TIME_NS as f64 {
            return Err(too_large(v));
        }
        // In range and non-negative: the conversion is exact for whole numbers.
        Ok(ns as u64)
    }
}

fn too_large<E: de::Error>(us: f64) -> E {
    E::custom(format_args!(
        "{us} µs is too large (at most 2^62 ns, {} µs)",
        TORCH_MAX_TIME_NS / 1000
    ))
}

// ---- args ----------------------------------------------------------------------------------

/// The fields of `args` the reader reads.
enum ArgKey {
    InputDims,
    InputType,
    ExternalId,
    Bytes,
    TotalAllocated,
    DeviceType,
    Name,
    Other,
}

impl<'de> de::Deserialize<'de> for ArgKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ArgKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<ArgKey, E> {
                Ok(match s {
                    "Input Dims" => ArgKey::InputDims,
                    "Input type" => ArgKey::InputType,
                    "External id" => ArgKey::ExternalId,
                    "Bytes" => ArgKey::Bytes,
                    "Total Allocated" => ArgKey::TotalAllocated,
                    "Device Type" => ArgKey::DeviceType,
                    "name" => ArgKey::Name,
                    _ => ArgKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

struct ArgsSeed<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for ArgsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ArgsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while let Some(key) = map.next_key::<ArgKey>()? {
            match key {
                ArgKey::InputDims => {
                    b.loc_field = Some("args.Input Dims");
                    b.dims_scratch.clear();
                    map.next_value_seed(DimsSeed(&mut b.dims_scratch))?;
                    b.ev.has_dims = true;
                }
                ArgKey::InputType => {
                    b.loc_field = Some("args.Input type");
                    b.types_scratch.clear();
                    map.next_value_seed(TypesSeed {
                        strings: &mut b.strings,
                        out: &mut b.types_scratch,
                    })?;
                    b.ev.has_types = true;
                }
                ArgKey::ExternalId => {
                    b.loc_field = Some("args.External id");
                    b.ev.external_id = Some(map.next_value::<u64>()?);
                }
                ArgKey::Bytes => {
                    b.loc_field = Some("args.Bytes");
                    b.ev.bytes = Some(map.next_value::<i64>()?);
                }
                ArgKey::TotalAllocated => {
                    b.loc_field = Some("args.Total Allocated");
                    b.ev.total_allocated = Some(map.next_value::<i64>()?);
                }
                ArgKey::DeviceType => {
                    b.loc_field = Some("args.Device Type");
                    b.ev.device_type = Some(map.next_value::<i64>()?);
                }
                ArgKey::Name => {
                    // A thread's name in metadata events; anything else is not read.
                    b.loc_field = Some("args.name");
                    b.ev.arg_name = map.next_value_seed(MaybeSymSeed(&mut b.strings))?;
                }
                ArgKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            b.loc_field = Some("args");
        }
        Ok(())
    }
}

/// A string interned, or anything else skipped (`None`).
struct MaybeSymSeed<'a>(&'a mut Interner);

impl<'de> DeserializeSeed<'de> for MaybeSymSeed<'_> {
    type Value = Option<Sym>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Sym>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MaybeSymSeed<'_> {
    type Value = Option<Sym>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Option<Sym>, E> {
        Ok(Some(self.0.intern(s)))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<Sym>, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<Sym>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<Sym>, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<Sym>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<Sym>, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Option<Sym>, A::Error> {
        IgnoredAny.visit_seq(seq).map(|_| None)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Option<Sym>, A::Error> {
        IgnoredAny.visit_map(map).map(|_| None)
    }
}

/// `Input types`: an array of strings, interned into `out`.
struct TypesSeed<'a> {
    strings: &'a mut Interner,
    out: &'a mut Vec<Sym>,
}

impl<'de> DeserializeSeed<'de> for TypesSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TypesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of type names")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(sym) = seq.next_element_seed(SymSeed(&mut *self.strings))? {
            self.out.push(sym);
        }
        Ok(())
    }
}

/// `Input Dims`: an array with one entry per argument, each an array of integers (a
/// tensor's dims) or of arrays of integers (a tensor list's), written to the flat encoding
/// (see [`DIMS_TENSOR`]).
struct DimsSeed<'a>(&'a mut Vec<i64>);

impl<'de> DeserializeSeed<'de> for DimsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DimsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of dims per argument")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(ArgDimsSeed(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

/// One argument's dims.
struct ArgDimsSeed<'a>(&'a mut Vec<i64>);

impl<'de> DeserializeSeed<'de> for ArgDimsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ArgDimsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of integers or of arrays of integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.0;
        let header = out.len();
        out.extend([DIMS_TENSOR, 0]);
        let mut list: Option<bool> = None;
        let mut n = 0i64;
        while let Some(item) = seq.next_element_seed(DimItemSeed(&mut *out))? {
            let is_list = matches!(item, DimItem::List);
            if list.is_some_and(|l| l != is_list) {
                return Err(de::Error::custom(
                    "an argument's dims mix integers and arrays",
                ));
            }
            list = Some(is_list);
            n += 1;
        }
        out[header] = if list == Some(true) {
            DIMS_LIST
        } else {
            DIMS_TENSOR
        };
        out[header + 1] = n;
        Ok(())
    }
}

/// One item of an argument's dims: a dim (pushed) or a tensor's dims (pushed as
/// `[len, dims...]`).
enum DimItem {
    Dim,
    List,
}

struct DimItemSeed<'a>(&'a mut Vec<i64>);

impl<'de> DeserializeSeed<'de> for DimItemSeed<'_> {
    type Value = DimItem;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<DimItem, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DimItemSeed<'_> {
    type Value = DimItem;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer or an array of integers")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<DimItem, E> {
        self.0.push(v);
        Ok(DimItem::Dim)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<DimItem, E> {
        let v = i64::try_from(v).map_err(|_| E::custom(format_args!("dim {v} is too large")))?;
        self.visit_i64(v)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DimItem, A::Error> {
        let out = self.0;
        let at = out.len();
        out.push(0);
        let mut n = 0i64;
        while let Some(v) = seq.next_element::<i64>()? {
            out.push(v);
            n += 1;
        }
        out[at] = n;
        Ok(DimItem::List)
    }
}
