//! Physical memory: the process's resident set (Linux), a CUDA device's used and free bytes.

use candle_core::Device;

use crate::Capture;
use crate::meta::DeviceLabel;

/// The process's resident set size in bytes (resident pages of `/proc/self/statm` times the
/// page size), where the OS says (Linux); `None` elsewhere or when it cannot be read.
///
/// `statm` is read rather than `status` because it is one short line of numbers, and the
/// file is opened once per process (again in a forked child, whose `/proc/self` is another)
/// and re-read from offset 0 (procfs makes the text anew on every read), so a sample is one
/// `pread` instead of open, read and close: this matters when a sample is taken every decode
/// step.
#[cfg(target_os = "linux")]
pub fn process_resident_bytes() -> Option<u64> {
    use std::os::unix::fs::FileExt;
    use std::sync::Mutex;
    static STATM: Mutex<Option<(u32, std::fs::File)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut statm = STATM
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if statm.as_ref().is_none_or(|(p, _)| *p != pid) {
        *statm = Some((pid, std::fs::File::open("/proc/self/statm").ok()?));
    }
    let (_, file) = statm.as_ref()?;
    // `size resident shared text lib data dt`, in pages; well under 128 bytes.
    let mut buf = [0u8; 128];
    let mut len = 0;
    while len < buf.len() {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    resident_bytes_from_statm(&buf[..len], rustix::param::page_size() as u64)
}

/// The process's resident set size in bytes; `None`: not known on this platform.
#[cfg(not(target_os = "linux"))]
pub fn process_resident_bytes() -> Option<u64> {
    None
}

/// Resident bytes from the text of `/proc/self/statm` (its second field, in pages).
fn resident_bytes_from_statm(statm: &[u8], page_size: u64) -> Option<u64> {
    let text = std::str::from_utf8(statm).ok()?;
    let pages: u64 = text.split_ascii_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(page_size)
}

/// `(used, free)` bytes of a CUDA device as its driver reports them (`cuMemGetInfo`: free
/// and total of the device, so `used` counts every process on it).
#[cfg(feature = "cuda")]
fn cuda_used_free(device: &Device) -> Option<(u64, u64)> {
    let cuda = device.as_cuda_device().ok()?;
    let stream = cuda.cuda_stream();
    let (free, total) = stream.context().mem_get_info().ok()?;
    Some(((total.saturating_sub(free)) as u64, free as u64))
}

/// The least time between two physical-memory samples at step ends (1 ms), see
/// [`Capture::sampling_memory`].
pub const MEMORY_SAMPLE_EVERY_NS: u64 = 1_000_000;

impl Capture {
    /// Records one physical-memory sample of `device` (`device_memory` event): on the CPU,
    /// the process's resident set size as `used` ([`process_resident_bytes`]; Linux); on a
    /// CUDA device (feature `cuda`), the driver's used and free bytes of the device. A figure
    /// the platform cannot give is left absent, never zero; returns whether a sample was
    /// written.
    pub fn sample_memory(&self, device: &Device) -> bool {
        if !self.is_active() {
            return false;
        }
        let label = DeviceLabel::of(device);
        let (used, free) = match device {
            Device::Cpu => (process_resident_bytes(), None),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => match cuda_used_free(device) {
                Some((u, f)) => (Some(u), Some(f)),
                None => (None, None),
            },
            _ => (None, None),
        };
        if used.is_none() && free.is_none() {
            return false;
        }
        self.session()
            .record_device_memory(label.as_str(), used, free, None);
        true
    }

    /// The physical-memory samples of a step's end: at the run's end (`last`) always, else
    /// when the last sample is at least [`MEMORY_SAMPLE_EVERY_NS`] ago.
    pub(crate) fn sample_step_memory(&self, last: bool) {
        let now = self.session().now_ns();
        let sampled = {
            let mut p = self.inner().persist();
            let due = p
                .sampled_at
                .is_none_or(|t| now.saturating_sub(t) >= MEMORY_SAMPLE_EVERY_NS);
            if p.sampled.is_empty() || !(last || due) {
                return;
            }
            p.sampled_at = Some(now);
            p.sampled.clone()
        };
        for d in &sampled {
            self.sample_memory(d);
        }
    }

    /// Samples `device`'s physical memory ([`Capture::sample_memory`]) at the end of every
    /// step that ends at least a millisecond ([`MEMORY_SAMPLE_EVERY_NS`]) after the last
    /// sample, and at [`Capture::finish`]: a training step gets a sample at its end, while a
    /// decode loop of 200 µs steps gets one every few steps rather than paying a procfs read
    /// (a few µs) per token. Chains after [`Capture::open`] / [`Capture::new`].
    pub fn sampling_memory(self, device: &Device) -> Self {
        self.inner().persist().sampled.push(device.clone());
        self
    }
}

#[cfg(test)]
mod statm_tests {
    use super::resident_bytes_from_statm;

    #[test]
    fn resident_pages_times_page_size() {
        let cases: [(&[u8], u64, Option<u64>); 5] = [
            (b"5374 2011 1342 342 0 1097 0\n", 4096, Some(2011 * 4096)),
            (b"5374 2011 1342 342 0 1097 0", 65536, Some(2011 * 65536)),
            (b"5374", 4096, None),
            (b"5374 x 1", 4096, None),
            (b"1 18446744073709551615 0", 4096, None),
        ];
        for (text, page, want) in cases {
            assert_eq!(resident_bytes_from_statm(text, page), want, "{text:?}");
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_a_plausible_resident_size() {
        let bytes = super::process_resident_bytes().expect("statm is readable on Linux");
        // A test binary holds at least a megabyte and far less than a terabyte.
        assert!((1 << 20..1 << 40).contains(&bytes), "{bytes}");
        // And it agrees with the kernel's own VmRSS (kB) read right after (pages may come and
        // go in between, so within 25%).
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        let vm = kib * 1024;
        assert!(
            bytes.abs_diff(vm) * 4 <= vm,
            "statm {bytes} B vs VmRSS {vm} B"
        );
    }

    /// The file is kept open and re-read: a sample after touching 64 MiB more sees them.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_kept_open_statm_reads_fresh_values() {
        let before = super::process_resident_bytes().expect("statm is readable on Linux");
        let block = vec![1u8; 64 << 20];
        let after = super::process_resident_bytes().expect("statm is readable on Linux");
        std::hint::black_box(&block);
        assert!(after >= before + (48 << 20), "{before} B then {after} B");
    }
}
