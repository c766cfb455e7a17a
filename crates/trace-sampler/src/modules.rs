//! The module map of raw sampled stacks: which loaded file (executable, shared object) holds
//! each sampled address, at what load bias, with what build id.
//!
//! Read from `/proc/self/maps` by the sampler's own thread (never on the signal path): when it
//! starts, and again (at most once per recorded step) when an address falls in no known
//! mapping (a library loaded later). Each file's GNU build id and load bias come from its ELF
//! header, program headers and note segments, read once per module with a few small positioned
//! reads: no section, no symbol table, no debug information is read. A module's `module` line
//! is queued the first time a raw stack names it, before that stack's `raw_stack` line.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

use trace_record::schema::{Event, ModuleEvent};

/// The next module id: unique in the process, so that a capture that stops sampling and starts
/// again into the same session never defines a module id twice.
static NEXT_MODULE: AtomicU64 = AtomicU64::new(1);

/// The most bytes of program headers or of one note segment read from a file.
const MAX_READ: u64 = 64 * 1024;

/// One file-backed (or `[vdso]`) mapping of the process.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    /// The file offset mapped at `start`.
    offset: u64,
    /// Index into [`Modules::files`].
    file: usize,
}

/// One mapped file.
#[derive(Debug)]
struct FileInfo {
    path: String,
    /// Set when its `module` line was queued.
    written: Option<Written>,
}

#[derive(Debug, Clone, Copy)]
struct Written {
    id: u64,
    bias: u64,
}

/// The process's mapped files, and the `module` lines queued for them.
#[derive(Debug, Default)]
pub(super) struct Modules {
    maps: Vec<Mapping>,
    files: Vec<FileInfo>,
    /// `/proc/self/maps` was read again since the last [`Modules::step_ended`].
    rescanned: bool,
    scanned_once: bool,
}

impl Modules {
    /// The module id and file address of `ip` (module 0 with `ip` itself when no mapped file
    /// holds it), queueing the module's `module` line into `out` when this is its first use.
    pub(super) fn locate(&mut self, ip: usize, out: &mut Vec<Event>) -> [u64; 2] {
        let ip = ip as u64;
        if !self.scanned_once {
            self.scan();
        }
        let mut found = self.find(ip);
        if found.is_none() && !self.rescanned {
            self.scan();
            self.rescanned = true;
            found = self.find(ip);
        }
        let Some(file) = found else {
            return [0, ip];
        };
        let w = match self.files[file].written {
            Some(w) => w,
            None => self.write(file, out),
        };
        [w.id, ip.wrapping_sub(w.bias)]
    }

    /// A recorded step was written: an unknown address may read `/proc/self/maps` again.
    pub(super) fn step_ended(&mut self) {
        self.rescanned = false;
    }

    fn find(&self, ip: u64) -> Option<usize> {
        let i = self.maps.partition_point(|m| m.start <= ip);
        let m = self.maps.get(i.checked_sub(1)?)?;
        (ip < m.end).then_some(m.file)
    }

    /// Reads `/proc/self/maps` (again): mappings of files already known keep their module.
    fn scan(&mut self) {
        self.scanned_once = true;
        let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
            return;
        };
        let mut maps = Vec::new();
        for line in text.lines() {
            let Some((start, end, offset, path)) = parse_maps_line(line) else {
                continue;
            };
            let file = match self.files.iter().position(|f| f.path == path) {
                Some(i) => i,
                None => {
                    self.files.push(FileInfo {
                        path: path.to_string(),
                        written: None,
                    });
                    self.files.len() - 1
                }
            };
            maps.push(Mapping {
                start,
                end,
                offset,
                file,
            });
        }
        maps.sort_unstable_by_key(|m| m.start);
        self.maps = maps;
    }

    /// Queues file `file`'s `module` line (its build id and bias read now) and returns its id.
    fn write(&mut self, file: usize, out: &mut Vec<Event>) -> Written {
        let mine: Vec<Mapping> = self
            .maps
            .iter()
            .filter(|m| m.file == file)
            .copied()
            .collect();
        let lo = mine.iter().map(|m| m.start).min().unwrap_or(0);
        let hi = mine.iter().map(|m| m.end).max().unwrap_or(lo);
        let path = self.files[file].path.clone();
        let elf = if path.starts_with('/') {
            read_elf(&path)
        } else {
            None
        };
        // The lowest mapping: the file offset mapped at its start.
        let first = mine.iter().min_by_key(|m| m.start).copied();
        let bias = match (first, &elf) {
            (Some(m), Some(e)) => e.bias(m.start, m.offset),
            (Some(m), None) => m.start.wrapping_sub(m.offset),
            (None, _) => 0,
        };
        let id = NEXT_MODULE.fetch_add(1, Ordering::Relaxed);
        out.push(Event::Module(ModuleEvent {
            id,
            path: path.clone(),
            build_id: elf.and_then(|e| e.build_id),
            base: bias,
            size: hi - lo,
        }));
        let w = Written { id, bias };
        self.files[file].written = Some(w);
        w
    }
}

/// `start-end perms offset dev inode path` → (start, end, offset, path) for a file-backed
/// mapping (or `[vdso]`); a ` (deleted)` suffix is kept out of the path.
fn parse_maps_line(line: &str) -> Option<(u64, u64, u64, &str)> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let _perms = field();
    let offset = field();
    let _dev = field();
    let _inode = field();
    let path = rest.trim();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    if !(path.starts_with('/') || path == "[vdso]") {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let offset = u64::from_str_radix(offset, 16).ok()?;
    (start < end).then_some((start, end, offset, path))
}

/// What a module line needs from an ELF file's headers.
#[derive(Debug)]
struct ElfInfo {
    /// `(p_offset, p_vaddr, p_filesz, p_align)` of each `PT_LOAD`.
    loads: Vec<(u64, u64, u64, u64)>,
    build_id: Option<String>,
}

impl ElfInfo {
    /// The load bias, given that file offset `offset` is mapped at `start`: the address of a
    /// segment's file offset `p_offset` is `bias + p_vaddr`.
    fn bias(&self, start: u64, offset: u64) -> u64 {
        let seg = self.loads.iter().find(|&&(off, _, size, align)| {
            let slack = align.max(4096);
            (offset <= off && off - offset < slack) || (off <= offset && offset < off + size)
        });
        match seg {
            Some(&(off, vaddr, _, _)) => start
                .wrapping_add(off)
                .wrapping_sub(offset)
                .wrapping_sub(vaddr),
            None => start.wrapping_sub(offset),
        }
    }
}

/// Reads an ELF file's program headers and GNU build-id note (a few small reads).
fn read_elf(path: &str) -> Option<ElfInfo> {
    let f = File::open(path).ok()?;
    let mut ident = [0u8; 64];
    f.read_exact_at(&mut ident, 0).ok()?;
    if &ident[..4] != b"\x7fELF" {
        return None;
    }
    let wide = match ident[4] {
        1 => false,
        2 => true,
        _ => return None,
    };
    let e = Endian(match ident[5] {
        1 => false,
        2 => true,
        _ => return None,
    });
    let (phoff, phentsize, phnum) = if wide {
        (
            e.u64(&ident[32..40]),
            e.u16(&ident[54..56]),
            e.u16(&ident[56..58]),
        )
    } else {
        (
            u64::from(e.u32(&ident[28..32])),
            e.u16(&ident[42..44]),
            e.u16(&ident[44..46]),
        )
    };
    let (phentsize, phnum) = (u64::from(phentsize), u64::from(phnum));
    let need = if wide { 56 } else { 32 };
    if phentsize < need || phentsize * phnum > MAX_READ {
        return None;
    }
    let mut ph = vec![0u8; usize::try_from(phentsize * phnum).ok()?];
    f.read_exact_at(&mut ph, phoff).ok()?;
    let mut loads = Vec::new();
    let mut notes = Vec::new();
    for h in ph.chunks_exact(usize::try_from(phentsize).ok()?) {
        let p_type = e.u32(&h[0..4]);
        let (off, vaddr, filesz, align) = if wide {
            (
                e.u64(&h[8..16]),
                e.u64(&h[16..24]),
                e.u64(&h[32..40]),
                e.u64(&h[48..56]),
            )
        } else {
            (
                u64::from(e.u32(&h[4..8])),
                u64::from(e.u32(&h[8..12])),
                u64::from(e.u32(&h[16..20])),
                u64::from(e.u32(&h[28..32])),
            )
        };
        match p_type {
            1 => loads.push((off, vaddr, filesz, align)),
            4 => notes.push((off, filesz)),
            _ => {}
        }
    }
    let build_id = notes.into_iter().find_map(|(off, size)| {
        if size > MAX_READ {
            return None;
        }
        let mut buf = vec![0u8; usize::try_from(size).ok()?];
        f.read_exact_at(&mut buf, off).ok()?;
        gnu_build_id(&buf, e)
    });
    Some(ElfInfo { loads, build_id })
}

/// The `NT_GNU_BUILD_ID` note of a note segment's bytes, in lowercase hex.
fn gnu_build_id(mut notes: &[u8], e: Endian) -> Option<String> {
    let pad4 = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let namesz = e.u32(&notes[0..4]) as usize;
        let descsz = e.u32(&notes[4..8]) as usize;
        let ty = e.u32(&notes[8..12]);
        let name_end = 12usize.checked_add(pad4(namesz))?;
        let desc_end = name_end.checked_add(pad4(descsz))?;
        if desc_end > notes.len() {
            return None;
        }
        if ty == 3 && notes.get(12..12 + namesz) == Some(b"GNU\0".as_slice()) {
            let desc = &notes[name_end..name_end + descsz];
            let mut hex = String::with_capacity(desc.len() * 2);
            for b in desc {
                use std::fmt::Write as _;
                let _ = write!(hex, "{b:02x}");
            }
            return Some(hex);
        }
        notes = &notes[desc_end..];
    }
    None
}

/// The file's byte order (`true`: big-endian).
#[derive(Debug, Clone, Copy)]
struct Endian(bool);

impl Endian {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        if self.0 {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.0 {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }
    fn u64(self, b: &[u8]) -> u64 {
        let a = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        if self.0 {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_parsed_and_anonymous_ones_skipped() {
        assert_eq!(
            parse_maps_line(
                "55d7c8a00000-55d7c8a2c000 r-xp 00001000 08:01 1234     /usr/bin/my prog (deleted)"
            ),
            Some((
                0x55d7_c8a0_0000,
                0x55d7_c8a2_c000,
                0x1000,
                "/usr/bin/my prog"
            ))
        );
        assert_eq!(
            parse_maps_line("7ffd1000-7ffd3000 r-xp 00000000 00:00 0   [vdso]"),
            Some((0x7ffd_1000, 0x7ffd_3000, 0, "[vdso]"))
        );
        assert_eq!(
            parse_maps_line("7ffd1000-7ffd3000 rw-p 00000000 00:00 0   [heap]"),
            None
        );
        assert_eq!(parse_maps_line("garbage"), None);
    }

    #[test]
    fn this_test_binary_is_a_module_with_a_build_id_and_code_addresses_in_it() {
        let mut m = Modules::default();
        let mut out = Vec::new();
        let here = this_test_binary_is_a_module_with_a_build_id_and_code_addresses_in_it
            as *const () as usize;
        let [id, offset] = m.locate(here, &mut out);
        assert_ne!(id, 0);
        let [Event::Module(module)] = out.as_slice() else {
            panic!("{out:?}");
        };
        assert_eq!(module.id, id);
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        assert_eq!(std::path::Path::new(&module.path), exe);
        // Rust's linker writes a GNU build id: 20 bytes (sha1) or more, in hex.
        let build_id = module.build_id.as_deref().unwrap();
        assert!(build_id.len() >= 16 && build_id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(offset, here as u64 - module.base);
        assert!(offset < module.size);
        // Located again: the same module, no second line.
        assert_eq!(m.locate(here, &mut out)[0], id);
        assert_eq!(out.len(), 1);
        // An address nothing maps: module 0 with the address itself.
        assert_eq!(m.locate(8, &mut out), [0, 8]);
    }
}
