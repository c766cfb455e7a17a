//! Arena ids: `ValueId`, `OpId` and `ParentId`, `u32` newtypes indexing a graph's arenas.
//!
//! Ids are positions in one graph's arenas. They are not stable identities: the fingerprint
//! never hashes them (it hashes a canonical renumbering), so they do not implement
//! [`StableHash`](crate::StableHash). `derive(Hash)` is for in-memory maps only.

use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u32);

        impl $name {
            /// The id at arena position `index`; `None` when it does not fit in a `u32`.
            pub fn from_index(index: usize) -> Option<Self> {
                u32::try_from(index).ok().map($name)
            }

            /// The arena position.
            #[inline]
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A value (an input or an operation output) in one graph; shown as `v3`.
    ValueId,
    "v"
);
id_type!(
    /// An operation in one graph; shown as `op3`.
    OpId,
    "op"
);
id_type!(
    /// A parent graph of one graph (an index into [`Graph::parents`](crate::Graph::parents));
    /// shown as `p3`.
    ParentId,
    "p"
);
