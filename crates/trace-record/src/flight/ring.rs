//! The ring of a flight recorder: whole steps' encoded lines, oldest evicted first.

use std::collections::VecDeque;
use std::sync::Arc;

/// One finished step's lines (its `step` line first, except step 0's).
#[derive(Debug, Clone)]
pub(crate) struct Block {
    /// The step's index.
    pub(crate) index: u64,
    /// When the step ended (the next step's boundary), ns since the session's start.
    pub(crate) end_ns: u64,
    /// The step's lines, shared with dumps being written (the session's buffer itself, moved
    /// in without a copy).
    pub(crate) bytes: Arc<Vec<u8>>,
}

/// Whole steps, bounded in bytes (the capacity of their buffers) and optionally in steps;
/// the newest step always stays.
#[derive(Debug)]
pub(crate) struct Ring {
    blocks: VecDeque<Block>,
    bytes: usize,
    max_bytes: usize,
    max_steps: Option<usize>,
    evicted: u64,
}

impl Ring {
    pub(crate) fn new(max_bytes: usize, max_steps: Option<usize>) -> Self {
        Ring {
            blocks: VecDeque::new(),
            bytes: 0,
            max_bytes,
            max_steps: max_steps.map(|s| s.max(1)),
            evicted: 0,
        }
    }

    /// Adds a finished step and evicts whole oldest steps past the bounds; returns the buffer
    /// of the last step evicted when no dump holds it any more, for the next step to reuse.
    pub(crate) fn push(&mut self, block: Block) -> Option<Vec<u8>> {
        self.bytes += block.bytes.capacity();
        self.blocks.push_back(block);
        let mut spare = None;
        while self.blocks.len() > 1
            && (self.bytes > self.max_bytes
                || self.max_steps.is_some_and(|m| self.blocks.len() > m))
        {
            if let Some(old) = self.blocks.pop_front() {
                self.bytes -= old.bytes.capacity();
                self.evicted += 1;
                spare = Arc::try_unwrap(old.bytes).ok();
            }
        }
        spare
    }

    /// The steps from `first` to `last` that are still in the ring, oldest first.
    pub(crate) fn range(&self, first: u64, last: u64) -> Vec<Block> {
        self.blocks
            .iter()
            .filter(|b| b.index >= first && b.index <= last)
            .cloned()
            .collect()
    }

    /// Bytes of the steps from `first` on.
    pub(crate) fn bytes_from(&self, first: u64) -> usize {
        self.blocks
            .iter()
            .filter(|b| b.index >= first)
            .map(|b| b.bytes.capacity())
            .sum()
    }

    /// Steps in the ring.
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Bytes of the steps in the ring (their buffers' capacity).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Steps evicted so far.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(index: u64, n: usize) -> Block {
        Block {
            index,
            end_ns: index,
            bytes: Arc::new(vec![b'x'; n]),
        }
    }

    #[test]
    fn whole_oldest_steps_leave_past_the_byte_bound() {
        let mut r = Ring::new(100, None);
        for i in 0..10 {
            let spare = r.push(block(i, 30));
            // Each evicted buffer comes back for reuse: no dump holds it.
            assert_eq!(spare.map(|v| v.len()), (i >= 3).then_some(30));
        }
        assert_eq!((r.len(), r.bytes(), r.evicted()), (3, 90, 7));
        assert_eq!(r.range(0, 100)[0].index, 7);
        // A step larger than the bound stays alone.
        r.push(block(10, 500));
        assert_eq!((r.len(), r.bytes()), (1, 500));
    }

    #[test]
    fn the_step_bound_applies_too() {
        let mut r = Ring::new(usize::MAX, Some(4));
        for i in 0..10 {
            r.push(block(i, 1));
        }
        assert_eq!(r.len(), 4);
        let got: Vec<u64> = r.range(5, 8).iter().map(|b| b.index).collect();
        assert_eq!(got, [6, 7, 8]);
    }
}
