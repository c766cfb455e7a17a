//! The scope word: a phase and a span id packed into one `u64`, as the buffer and table keep it.

use trace_record::schema::ExecStep;

/// Packs a phase and a span id into a scope word.
pub(crate) fn pack(phase: Option<ExecStep>, span: Option<u64>) -> u64 {
    let code = match phase {
        None => 0,
        Some(ExecStep::Forward) => 1,
        Some(ExecStep::Backward) => 2,
        Some(ExecStep::Optimizer) => 3,
    };
    let span = span.filter(|&s| s < 1 << 62).unwrap_or(0);
    span << 2 | code
}

/// The phase and span id of a scope word.
pub(crate) fn unpack(v: u64) -> (Option<ExecStep>, Option<u64>) {
    let phase = match v & 0b11 {
        1 => Some(ExecStep::Forward),
        2 => Some(ExecStep::Backward),
        3 => Some(ExecStep::Optimizer),
        _ => None,
    };
    let span = v >> 2;
    (phase, (span != 0).then_some(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_pack_and_unpack() {
        for p in [
            None,
            Some(ExecStep::Forward),
            Some(ExecStep::Backward),
            Some(ExecStep::Optimizer),
        ] {
            assert_eq!(unpack(pack(p, Some(42))), (p, Some(42)));
            assert_eq!(unpack(pack(p, None)), (p, None));
        }
        assert_eq!(unpack(pack(None, Some(1 << 62))), (None, None));
    }
}
