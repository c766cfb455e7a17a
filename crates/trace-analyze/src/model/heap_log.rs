//! The tracked-heap lines of a loaded trace (schema version 2), as read: the heap analysis's input.
//!
//! [`HeapLog`] is that part of a loaded [`Trace`](crate::Trace): `heap_alloc` and `heap_free`
//! lines in file order (the order the tracker matched them in, which the analysis replays),
//! `heap_small` sums and `heap_account` lines. A leaf module: it imports no other module of
//! the crate, so the model can hold it and the analysis read it.

use serde::Serialize;
use trace_record::schema::{
    Event, HeapAccountEvent, HeapAllocEvent, HeapFreeEvent, HeapSmallEvent,
};

/// A tracked allocation or free, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum HeapEntry {
    /// A `heap_alloc` line.
    Alloc(HeapAllocEvent),
    /// A `heap_free` line.
    Free(HeapFreeEvent),
}

/// The tracked-heap lines of a trace (empty without a tracking allocator).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeapLog {
    /// `heap_alloc` and `heap_free` lines, in file order.
    pub entries: Vec<HeapEntry>,
    /// `heap_small` lines, in file order.
    pub small: Vec<HeapSmallEvent>,
    /// `heap_account` lines, in file order.
    pub accounts: Vec<HeapAccountEvent>,
}

impl HeapLog {
    /// Keeps `e` when it is a tracked-heap line.
    pub fn add(&mut self, e: &Event) {
        match e {
            Event::HeapAlloc(a) => self.entries.push(HeapEntry::Alloc(a.clone())),
            Event::HeapFree(f) => self.entries.push(HeapEntry::Free(f.clone())),
            Event::HeapSmall(s) => self.small.push(s.clone()),
            Event::HeapAccount(a) => self.accounts.push(a.clone()),
            _ => {}
        }
    }

    /// True when the trace has no tracked-heap line.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.small.is_empty() && self.accounts.is_empty()
    }
}
