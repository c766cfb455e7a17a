//! Read-time symbolization: the raw sampled stacks (`raw_stack`, `module`) that no `stack` line
//! defines, resolved from the module files on disk.
//!
//! A run killed before its sampler stopped has `samples` lines naming stacks that only its
//! `raw_stack` lines describe (per frame: a module and a file address). Once a trace is loaded,
//! [`resolve_raw`] opens each module those stacks name (once per module, for this load), checks
//! that its GNU build id is the one recorded, and symbolizes as the sampler does when it stops:
//! the DWARF line tables (inlined functions as frames of their own) else the symbol table,
//! Rust names demangled without their hash, the same shortened source paths, the sampler's
//! signal handler and the signal trampoline cut off. A module whose file is gone, unreadable
//! or of another build gives frames named `file+0xaddress`, and [`ReadTimeSymbols`] says which.

use std::collections::HashSet;

use addr2line::gimli;
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};

use crate::model::intern::FastMap;
use crate::model::samples::{ReadTimeSymbols, SampledStacks, UnresolvedModule};

/// The largest module file read (a path in a hostile trace may name anything).
const MAX_MODULE_BYTES: u64 = 4 << 30;

/// One module file, read and parsed.
struct Loaded<'a> {
    cx: Option<addr2line::Context<gimli::EndianSlice<'a, gimli::RunTimeEndian>>>,
    /// (address, size, name) from `.symtab` (else `.dynsym`), by address.
    syms: Vec<(u64, u64, &'a [u8])>,
}

/// How one module's frames are named.
enum Module<'a> {
    Resolved(Loaded<'a>),
    /// Frames named `label+0xaddress`.
    Raw(String),
    /// Frames named `[unknown]` (an address in no module, or the vDSO: as when resolved at
    /// finish).
    Unknown,
}

/// Resolved address: frames (outermost first) and whether it is the handler or trampoline.
#[derive(Clone)]
struct IpInfo {
    frames: Vec<u32>,
    handler: bool,
    trampoline: bool,
}

impl SampledStacks {
    /// Symbolizes, from the module files on disk, every stack that `samples` lines name and
    /// only `raw_stack` lines describe (a run killed before its sampler stopped; see
    /// [`read_time`](Self::read_time) for what was done), then drops the raw lines. Call it
    /// once every event was [`add`](Self::add)ed: loading a trace does; a reader that streams
    /// the events itself (an export) calls it at the end. A second call does nothing.
    pub fn resolve_read_time(&mut self) {
        resolve_raw(self);
    }
}

/// Resolves every raw stack that `samples` lines name and no `stack` line defined; records
/// what it did in [`SampledStacks::read_time`]. The raw lines are dropped afterwards.
pub(crate) fn resolve_raw(s: &mut SampledStacks) {
    let raw = std::mem::take(&mut s.raw);
    let named: HashSet<u64, foldhash::fast::FixedState> =
        s.samples.iter().map(|r| r.stack).collect();
    let todo: Vec<_> = raw
        .stacks
        .into_iter()
        .filter(|r| named.contains(&r.id) && !s.has_stack(r.id))
        .collect();
    if todo.is_empty() {
        return;
    }
    let mut needed: HashSet<u64, foldhash::fast::FixedState> = HashSet::default();
    for r in &todo {
        needed.extend(r.frames.iter().map(|f| f[0]));
    }
    // Every needed module's bytes, read first (the parsed contexts borrow them).
    let mut report = ReadTimeSymbols::default();
    let mut datas: FastMap<u64, Result<ModuleBytes, String>> = FastMap::default();
    let mut by_id: FastMap<u64, &trace_record::schema::ModuleEvent> = FastMap::default();
    for m in &raw.modules {
        by_id.entry(m.id).or_insert(m);
    }
    let mut ids: Vec<u64> = needed.into_iter().collect();
    ids.sort_unstable();
    for &id in &ids {
        let Some(m) = by_id.get(&id) else { continue };
        if !m.path.starts_with('/') {
            continue;
        }
        let r = read_module(&m.path, m.build_id.as_deref());
        if let Err(reason) = &r {
            report.unresolved.push(UnresolvedModule {
                path: m.path.clone(),
                reason: reason.clone(),
            });
        }
        datas.insert(id, r);
    }
    let mut modules: FastMap<u64, Module<'_>> = FastMap::default();
    for &id in &ids {
        let module = match (by_id.get(&id), datas.get(&id)) {
            (Some(_), Some(Ok(mb))) => match parse(mb) {
                Some(l) => Module::Resolved(l),
                None => Module::Raw(label(&by_id[&id].path)),
            },
            (Some(m), Some(Err(_))) => Module::Raw(label(&m.path)),
            _ => Module::Unknown,
        };
        modules.insert(id, module);
    }
    let mut r = Resolver {
        modules,
        by_ip: FastMap::default(),
        frames: FastMap::default(),
    };
    for st in &todo {
        let frames = r.stack(s, &st.frames);
        s.push_stack(st.id, frames);
        report.stacks += 1;
    }
    s.read_time = Some(report);
}

/// A module file's bytes, those of its separate debug file, if any, and the DWARF sections
/// of the one read for symbols that are stored zlib-compressed (`SHF_COMPRESSED`, as Debian's
/// `-dbg` packages ship them), decompressed.
struct ModuleBytes {
    bytes: Vec<u8>,
    debug: Option<Vec<u8>>,
    sections: Vec<(String, Vec<u8>)>,
}

/// The most bytes one compressed debug section may expand to (a hostile file may declare
/// anything).
const MAX_SECTION_BYTES: u64 = 1 << 30;

/// The zlib-compressed `.debug_*` sections of `file`, decompressed (a section that does not
/// decompress to its declared size is left out: its frames fall back to the symbol table).
fn decompressed_sections(file: &[u8]) -> Vec<(String, Vec<u8>)> {
    use object::{Object as _, ObjectSection as _};
    use std::io::Read as _;
    let Ok(obj) = object::File::parse(file) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for sec in obj.sections() {
        let (Ok(name), Ok(c)) = (sec.name(), sec.compressed_data()) else {
            continue;
        };
        if !name.starts_with(".debug_")
            || c.format != object::CompressionFormat::Zlib
            || c.uncompressed_size > MAX_SECTION_BYTES
        {
            continue;
        }
        let size = usize::try_from(c.uncompressed_size).unwrap_or(0);
        let mut data = Vec::with_capacity(size);
        let read = flate2::read::ZlibDecoder::new(c.data)
            .take(c.uncompressed_size)
            .read_to_end(&mut data);
        if read.is_ok() && data.len() == size {
            out.push((name.to_string(), data));
        }
    }
    out
}

/// `libfoo.so` of `/usr/lib/libfoo.so`.
fn label(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// The module's bytes (and those of its separate debug file, when one is installed under
/// `/usr/lib/debug/.build-id`), when the file is there and of the recorded build.
fn read_module(path: &str, build_id: Option<&str>) -> Result<ModuleBytes, String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("missing".into()),
        Err(_) => return Err("unreadable".into()),
    };
    if !meta.is_file() || meta.len() > MAX_MODULE_BYTES {
        return Err("unreadable".into());
    }
    let bytes = std::fs::read(path).map_err(|_| "unreadable".to_string())?;
    let found = {
        let obj = object::File::parse(bytes.as_slice()).map_err(|_| "not ELF".to_string())?;
        obj.build_id().ok().flatten().map(hex)
    };
    if found.as_deref() != build_id {
        return Err("build id differs".into());
    }
    let debug = found.as_deref().and_then(|id| {
        let (a, b) = (id.get(..2)?, id.get(2..)?);
        std::fs::read(format!("/usr/lib/debug/.build-id/{a}/{b}.debug")).ok()
    });
    let sections = decompressed_sections(debug.as_deref().unwrap_or(&bytes));
    Ok(ModuleBytes {
        bytes,
        debug,
        sections,
    })
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// The DWARF context and symbol table of a module (from its debug file when there is one, as
/// the sampler's symbolizer does).
fn parse(mb: &ModuleBytes) -> Option<Loaded<'_>> {
    let main = object::File::parse(mb.bytes.as_slice()).ok()?;
    let from = mb
        .debug
        .as_deref()
        .and_then(|d| object::File::parse(d).ok())
        .unwrap_or(main);
    let endian = if from.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
        let data = section(&from, id.name())
            .or_else(|| {
                mb.sections
                    .iter()
                    .find(|(n, _)| n == id.name())
                    .map(|(_, d)| d.as_slice())
            })
            .unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(data, endian))
    })
    .ok()?;
    let cx = addr2line::Context::from_dwarf(dwarf).ok();
    let table = from
        .symbol_table()
        .filter(|t| t.symbols().next().is_some())
        .or_else(|| from.dynamic_symbol_table());
    // Exactly backtrace's table (the sampler's symbolizer at finish): the defined STT_FUNC and
    // STT_OBJECT symbols in file order, sorted unstably by address, so that where aliases
    // share an address (`madvise`, `__madvise`) the same one is found.
    let mut syms: Vec<(u64, u64, &[u8])> = table
        .map(|t| {
            t.symbols()
                .filter(|s| {
                    let object::SymbolFlags::Elf { st_info, .. } = s.flags() else {
                        return false;
                    };
                    let st_type = st_info.st_type();
                    (st_type == object::elf::STT_FUNC || st_type == object::elf::STT_OBJECT)
                        && !s.is_undefined()
                })
                .map(|s| (s.address(), s.size(), s.name_bytes().unwrap_or(b"")))
                .collect()
        })
        .unwrap_or_default();
    syms.sort_unstable_by_key(|&(a, _, _)| a);
    Some(Loaded { cx, syms })
}

/// A section's bytes when stored uncompressed (a compressed one comes from
/// [`ModuleBytes::sections`]).
fn section<'a>(obj: &object::File<'a>, name: &str) -> Option<&'a [u8]> {
    let sec = obj.section_by_name(name)?;
    let c = sec.compressed_data().ok()?;
    match c.format {
        object::CompressionFormat::None => Some(c.data),
        _ => None,
    }
}

impl Loaded<'_> {
    /// backtrace's symbol-table search: the last symbol at or below `addr`, when `addr` is
    /// within its size (inclusive).
    fn symtab(&self, addr: u64) -> Option<&[u8]> {
        // backtrace's search, to the letter: among symbols at `addr`, the one the binary
        // search lands on.
        let i = match self.syms.binary_search_by_key(&addr, |&(a, _, _)| a) {
            Ok(i) => i,
            Err(i) => i.checked_sub(1)?,
        };
        let &(a, size, name) = self.syms.get(i)?;
        (a <= addr && addr <= a.saturating_add(size)).then_some(name)
    }

    /// What `svma` resolves to: innermost (inlined) function first, as backtrace lists it.
    fn resolve(&self, svma: u64) -> Vec<(String, Option<String>)> {
        let mut found = Vec::new();
        if let Some(cx) = &self.cx
            && let Ok(mut frames) = cx.find_frames(svma).skip_all_loads()
        {
            while let Ok(Some(frame)) = frames.next() {
                let name = match &frame.function {
                    Some(f) => Some(f.name.slice()),
                    None => self.symtab(svma),
                };
                let func = name.map_or_else(|| "[unknown]".to_string(), demangled);
                let file = frame
                    .location
                    .and_then(|l| l.file)
                    .map(trace_record::schema::short_source_path);
                found.push((func, file));
            }
        }
        if found.is_empty()
            && let Some(name) = self.symtab(svma)
        {
            found.push((demangled(name), None));
        }
        found
    }
}

/// A symbol's name as the sampler shows it: demangled without its hash (`{:#}`), else as is.
fn demangled(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    match rustc_demangle::try_demangle(&s) {
        Ok(d) => format!("{d:#}"),
        Err(_) => s.into_owned(),
    }
}

struct Resolver<'a> {
    modules: FastMap<u64, Module<'a>>,
    /// (module, lookup address) → what it resolved to.
    by_ip: FastMap<(u64, u64), IpInfo>,
    /// (function, file, inlined) → frame index.
    frames: FastMap<(String, Option<String>, bool), u32>,
}

impl Resolver<'_> {
    fn intern(&mut self, s: &mut SampledStacks, key: (String, Option<String>, bool)) -> u32 {
        if let Some(&i) = self.frames.get(&key) {
            return i;
        }
        let i = s.push_frame(&key.0, key.1.as_deref(), key.2);
        self.frames.insert(key, i);
        i
    }

    /// `lookup` in `module`: like the sampler, the byte before it (a return address's call).
    fn resolve(&mut self, s: &mut SampledStacks, module: u64, lookup: u64) -> IpInfo {
        if let Some(info) = self.by_ip.get(&(module, lookup)) {
            return info.clone();
        }
        let mut found = match self.modules.get(&module) {
            Some(Module::Resolved(l)) => l.resolve(lookup.saturating_sub(1)),
            Some(Module::Raw(label)) => vec![(format!("{label}+{lookup:#x}"), None)],
            Some(Module::Unknown) | None => Vec::new(),
        };
        if found.is_empty() {
            found.push(("[unknown]".to_string(), None));
        }
        // The sampler's signal handler and the unwinder it calls, however the debug
        // information names the handler (with its path, or bare with line tables only).
        let handler = found.iter().any(|(f, _)| {
            f.contains("trace_sampler::signal::on_sigprof")
                || f == "on_sigprof"
                || f.starts_with("backtrace::")
        });
        let trampoline = found
            .iter()
            .all(|(f, _)| f == "__restore_rt" || f == "[unknown]");
        let last = found.len() - 1;
        let mut frames = Vec::with_capacity(found.len());
        for (i, (func, file)) in found.into_iter().enumerate().rev() {
            frames.push(self.intern(s, (func, file, i != last)));
        }
        let info = IpInfo {
            frames,
            handler,
            trampoline,
        };
        self.by_ip.insert((module, lookup), info.clone());
        info
    }

    /// The frames of a raw stack (innermost first, from inside the signal handler), outermost
    /// first, the handler and the trampoline cut off, as the sampler's own `stack` lines are.
    fn stack(&mut self, s: &mut SampledStacks, raw: &[[u64; 2]]) -> Vec<u32> {
        let mut start = 0;
        for (i, &[m, a]) in raw.iter().enumerate().take(16) {
            if self.resolve(s, m, a).handler {
                start = i + 1;
            }
        }
        if start > 0
            && let Some(&[m, a]) = raw.get(start)
            && self.resolve(s, m, a).trampoline
        {
            start += 1;
        }
        let interrupted = (start > 0).then_some(start);
        let mut frames = Vec::new();
        for (i, &[m, a]) in raw.iter().enumerate().skip(start).rev() {
            let lookup = if interrupted == Some(i) {
                a.saturating_add(1)
            } else {
                a
            };
            frames.extend_from_slice(&self.resolve(s, m, lookup).frames);
        }
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_names_lose_their_hash_and_modules_are_labelled_by_file_name() {
        assert_eq!(
            demangled(b"_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangled(b"memcpy"), "memcpy");
        assert_eq!(label("/usr/lib/libc.so.6"), "libc.so.6");
    }

    #[test]
    fn a_missing_module_and_a_foreign_build_are_refused() {
        assert_eq!(
            read_module("/nonexistent/tracegraph/libgone.so", Some("ab")).err(),
            Some("missing".to_string())
        );
        let exe = std::env::current_exe().unwrap();
        let exe = exe.to_str().unwrap();
        assert_eq!(
            read_module(exe, Some("00")).err(),
            Some("build id differs".to_string())
        );
    }
}
