//! ad-cache: a bounded, collision-safe cache of derived graph transforms.
