//! The one formatter of durations, byte counts and ratios for people (the CLI and the report).
//!
//! Shared by the CLI and the report so that a figure reads the same in both.

/// A duration in nanoseconds for people: `850 ns`, `12.5 µs`, `1.234 ms`, `2.10 s`.
pub fn format_ns(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2} s", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.3} ms", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.1} µs", v / 1e3)
    } else {
        format!("{v:.0} ns")
    }
}

/// A byte count for people, in binary units: `512 B`, `12.0 KiB`, `1.50 MiB`, `2.00 GiB`.
pub fn format_bytes(v: f64) -> String {
    const KIB: f64 = 1024.0;
    const MIB: f64 = KIB * 1024.0;
    const GIB: f64 = MIB * 1024.0;
    let a = v.abs();
    if a >= GIB {
        format!("{:.2} GiB", v / GIB)
    } else if a >= MIB {
        format!("{:.2} MiB", v / MIB)
    } else if a >= KIB {
        format!("{:.1} KiB", v / KIB)
    } else {
        format!("{v:.0} B")
    }
}

/// A share of a whole for people: `12.3%` (`x` = 0.123); the one way a share is written.
pub fn format_share(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A signed duration for people: `+1.2 µs`, `-300 ns` (what one side takes more than the
/// other).
pub fn format_signed_ns(v: f64) -> String {
    if v >= 0.0 {
        format!("+{}", format_ns(v))
    } else {
        format!("-{}", format_ns(-v))
    }
}

/// A ratio of times for people, as the slower or faster side: `2.50× slower` (`r` = 2.5),
/// `2.00× faster` (`r` = 0.5); `None` for a ratio that is not positive and finite.
pub fn format_times(r: f64) -> Option<String> {
    if !r.is_finite() || r <= 0.0 {
        None
    } else if r >= 1.0 {
        Some(format!("{r:.2}× slower"))
    } else {
        Some(format!("{:.2}× faster", 1.0 / r))
    }
}

/// A relative change for people: `+12.3%`, `-4.0%` (`r` = 0.123 is +12.3%).
pub fn format_pct(r: f64) -> String {
    format!("{:+.1}%", r * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_switch_at_their_thresholds() {
        let cases: [(f64, &str); 7] = [
            (850.0, "850 ns"),
            (999.0, "999 ns"),
            (1_000.0, "1.0 µs"),
            (12_500.0, "12.5 µs"),
            (1_234_000.0, "1.234 ms"),
            (2_100_000_000.0, "2.10 s"),
            (-1_500.0, "-1.5 µs"),
        ];
        for (v, want) in cases {
            assert_eq!(format_ns(v), want, "{v}");
        }
        let cases: [(f64, &str); 5] = [
            (512.0, "512 B"),
            (1024.0, "1.0 KiB"),
            (12.0 * 1024.0, "12.0 KiB"),
            (1.5 * 1024.0 * 1024.0, "1.50 MiB"),
            (2.0 * 1024.0 * 1024.0 * 1024.0, "2.00 GiB"),
        ];
        for (v, want) in cases {
            assert_eq!(format_bytes(v), want, "{v}");
        }
        assert_eq!(format_pct(0.123), "+12.3%");
        assert_eq!(format_pct(-0.04), "-4.0%");
    }
}
