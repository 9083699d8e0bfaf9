//! Numbers as Redis writes them inside strings.

/// Redis's `string2ll`: `s` is the canonical decimal form of an `i64` (no
/// `+`, no leading zeros, no `-0`, no spaces). Only such strings may be
/// stored as integers, because reading them back must give the same bytes.
pub(crate) fn parse_i64(s: &[u8]) -> Option<i64> {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    match digits {
        [] => return None,
        [b'0'] => return (s.len() == 1).then_some(0),
        [b'1'..=b'9', rest @ ..] if rest.iter().all(u8::is_ascii_digit) => {}
        _ => return None,
    }
    // Overflow is the only failure left; `parse` reports it.
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// The decimal bytes of `v`, as Redis turns an integer encoding back into
/// a string.
pub(crate) fn i64_bytes(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// A sorted set score stored as text (ziplist/listpack entries, the old
/// `ZSET` type). Redis reads these with `strtod`; every form it writes
/// (`%.17g`, integers, `inf`, `-inf`, `-0`) parses here. `None` for text
/// that is not a number.
pub(crate) fn parse_f64(s: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(s).ok()?.trim_matches(|c: char| c.is_ascii_whitespace());
    s.parse().ok()
}

/// Redis's `d2string` for a score about to go into a listpack: integral
/// values in `±i64::MAX/2` as integers (so the listpack stores them
/// integer-encoded), `inf`/`-inf`, `-0` (keeping the sign), anything else
/// in the shortest form that reads back to the same bits. Redis uses
/// `%.17g` there; the value is the same.
pub(crate) fn f64_bytes(v: f64) -> Vec<u8> {
    const LIMIT: f64 = (i64::MAX / 2) as f64;
    if v.is_infinite() {
        return if v < 0.0 { b"-inf".to_vec() } else { b"inf".to_vec() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { b"-0".to_vec() } else { b"0".to_vec() };
    }
    if (-LIMIT..=LIMIT).contains(&v) && v.fract() == 0.0 {
        return i64_bytes(v as i64);
    }
    // `{:?}` is Rust's shortest round-trip form, switching to an exponent
    // for very large and very small magnitudes ("1e300", "1.5e-7").
    format!("{v:?}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn canonical_integers_only() {
        for (s, v) in [("0", Some(0)), ("-1", Some(-1)), ("123", Some(123)), ("9223372036854775807", Some(i64::MAX))] {
            assert_eq!(parse_i64(s.as_bytes()), v, "{s}");
        }
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for s in ["", "-", "-0", "007", "+1", " 1", "1 ", "9223372036854775808", "1.0", "0x10", "00"] {
            assert_eq!(parse_i64(s.as_bytes()), None, "{s:?}");
        }
    }

    #[test]
    fn scores_as_redis_writes_them() {
        assert_eq!(f64_bytes(3.0), b"3");
        assert_eq!(f64_bytes(-0.0), b"-0");
        assert_eq!(f64_bytes(f64::INFINITY), b"inf");
        assert_eq!(f64_bytes(f64::NEG_INFINITY), b"-inf");
        assert_eq!(f64_bytes(1.5), b"1.5");
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"1.5000000000000000"), Some(1.5));
        assert_eq!(parse_f64(b"abc"), None);
    }

    proptest! {
        #[test]
        fn integers_round_trip(v in any::<i64>()) {
            prop_assert_eq!(parse_i64(&i64_bytes(v)), Some(v));
        }

        #[test]
        fn scores_round_trip_bit_exact(bits in any::<u64>()) {
            let v = f64::from_bits(bits);
            prop_assume!(!v.is_nan());
            let back = parse_f64(&f64_bytes(v)).expect("parses");
            prop_assert_eq!(back.to_bits(), v.to_bits());
        }
    }
}
