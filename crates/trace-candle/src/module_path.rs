//! The profiled modules open on each thread, so a module's span is named relative to its parent.
//!
//! A leaf of the crate (it imports nothing of it): the capture asks it when a profiled module's
//! forward opens its span, and the module wrappers need nothing from it.

use std::cell::RefCell;

/// The paths of the profiled modules open on this thread, innermost last; the strings are
/// reused, so steady state allocates nothing.
#[derive(Default)]
struct OpenModules {
    paths: Vec<String>,
    len: usize,
}

thread_local! {
    static OPEN_MODULES: RefCell<OpenModules> = RefCell::new(OpenModules::default());
}

/// Closes what [`enter_module`] opened when dropped (also while unwinding).
pub(crate) struct ModuleExit {
    depth: usize,
}

impl Drop for ModuleExit {
    fn drop(&mut self) {
        OPEN_MODULES.with(|m| {
            if let Ok(mut m) = m.try_borrow_mut() {
                m.len = m.len.min(self.depth);
            }
        });
    }
}

/// Opens module `path` on this thread; returns the guard that closes it and the byte offset
/// in `path` of its span name: past the innermost open module's path and a `/` when `path`
/// extends it, else 0 (the whole path).
pub(crate) fn enter_module(path: &str) -> (ModuleExit, usize) {
    OPEN_MODULES.with(|m| {
        let Ok(mut m) = m.try_borrow_mut() else {
            return (ModuleExit { depth: usize::MAX }, 0);
        };
        let depth = m.len;
        let at = match depth.checked_sub(1).and_then(|i| m.paths.get(i)) {
            Some(outer)
                if path.len() > outer.len() + 1
                    && path.starts_with(outer.as_str())
                    && path.as_bytes()[outer.len()] == b'/' =>
            {
                outer.len() + 1
            }
            _ => 0,
        };
        if let Some(slot) = m.paths.get_mut(depth) {
            slot.clear();
            slot.push_str(path);
        } else {
            m.paths.push(path.to_string());
        }
        m.len = depth + 1;
        (ModuleExit { depth }, at)
    })
}
