//! Encoding replies, RESP2 or RESP3, byte for byte as Redis 7.0 does.
//!
//! Wire forms written here (`\r\n` ends every line):
//!
//! | call            | RESP2                 | RESP3                 |
//! |-----------------|-----------------------|-----------------------|
//! | `ok`, `simple`  | `+text`               | same                  |
//! | `error`         | `-msg`                | same                  |
//! | `int`           | `:i`                  | same                  |
//! | `bulk`          | `$len` CRLF bytes     | same                  |
//! | `null`          | `$-1`                 | `_`                   |
//! | `null_array`    | `*-1`                 | `_`                   |
//! | `array`         | `*n`                  | same                  |
//! | `map`           | `*2n`                 | `%n`                  |
//! | `set`           | `*n`                  | `~n`                  |
//! | `push`          | `*n`                  | `>n`                  |
//! | `double`        | bulk of `%.17g`       | `,%.17g`              |
//! | `boolean`       | `:1` / `:0`           | `#t` / `#f`           |
//! | `verbatim`      | bulk of text          | `=len` CRLF `fmt:text`|
//! | `big_number`    | bulk of digits        | `(digits`             |
//!
//! Aggregate calls write only the header; the caller writes the elements.

use std::fmt::Write as _;

/// Appends replies to `buf` in the protocol the connection speaks.
pub struct ReplyWriter<'a> {
    pub buf: &'a mut Vec<u8>,
    /// RESP3 (after `HELLO 3`); RESP2 otherwise.
    pub resp3: bool,
}

const CRLF: &[u8] = b"\r\n";

impl<'a> ReplyWriter<'a> {
    pub fn new(buf: &'a mut Vec<u8>, resp3: bool) -> Self {
        ReplyWriter { buf, resp3 }
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// A simple string. `s` must not hold `\r` or `\n` (debug-asserted).
    pub fn simple(&mut self, s: &str) {
        debug_assert!(!s.contains(['\r', '\n']), "simple string with a line end");
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(CRLF);
    }

    /// An error; `msg` carries its code, e.g. `"ERR syntax error"` or
    /// `"WRONGTYPE Operation ..."`. A leading `-` is not doubled. `\r` and
    /// `\n` become spaces, as Redis does, so that the reply stays one line.
    pub fn error(&mut self, msg: &str) {
        let msg = msg.strip_prefix('-').unwrap_or(msg);
        self.buf.push(b'-');
        let start = self.buf.len();
        self.buf.extend_from_slice(msg.as_bytes());
        for b in &mut self.buf[start..] {
            if *b == b'\r' || *b == b'\n' {
                *b = b' ';
            }
        }
        self.buf.extend_from_slice(CRLF);
    }

    /// `:i`.
    pub fn int(&mut self, i: i64) {
        self.buf.push(b':');
        push_i64(self.buf, i);
        self.buf.extend_from_slice(CRLF);
    }

    /// `$len` then the bytes.
    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len());
        // With its CRLF: a big value that fills the buffer exactly would
        // otherwise double it for two bytes (and a doubled buffer of 8 MB
        // or more comes from jemalloc's oversize arena, whose pages are
        // mapped afresh each time: milliseconds for one reply).
        self.buf.reserve(b.len() + CRLF.len());
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(CRLF);
    }

    /// An integer's decimal text as a bulk string.
    pub fn bulk_int(&mut self, i: i64) {
        let mut tmp = [0u8; 20];
        let digits = format_i64(&mut tmp, i);
        self.bulk(digits);
    }

    /// The null reply: RESP2 `$-1`, RESP3 `_`.
    pub fn null(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// The null array: RESP2 `*-1`, RESP3 `_`.
    pub fn null_array(&mut self) {
        self.buf
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    /// Array header; `len` elements follow.
    pub fn array(&mut self, len: usize) {
        self.header(b'*', len);
    }

    /// Map header; `pairs` key-value pairs follow (RESP2: a flat array).
    pub fn map(&mut self, pairs: usize) {
        if self.resp3 {
            self.header(b'%', pairs);
        } else {
            self.header(b'*', pairs * 2);
        }
    }

    /// Set header; `len` elements follow.
    pub fn set(&mut self, len: usize) {
        self.header(if self.resp3 { b'~' } else { b'*' }, len);
    }

    /// Push header (pub/sub messages); `len` elements follow.
    pub fn push(&mut self, len: usize) {
        self.header(if self.resp3 { b'>' } else { b'*' }, len);
    }

    /// A double as Redis 7.0 `addReplyDouble` writes it: `%.17g` text,
    /// `inf`/`-inf` for infinities and glibc's `nan`/`-nan` for NaN.
    pub fn double(&mut self, d: f64) {
        let mut text = Vec::with_capacity(32);
        format_double_g17(d, &mut text);
        if self.resp3 {
            self.buf.push(b',');
            self.buf.extend_from_slice(&text);
            self.buf.extend_from_slice(CRLF);
        } else {
            self.bulk(&text);
        }
    }

    /// RESP3 `#t`/`#f`, RESP2 `:1`/`:0`.
    pub fn boolean(&mut self, b: bool) {
        let out: &[u8] = match (self.resp3, b) {
            (true, true) => b"#t\r\n",
            (true, false) => b"#f\r\n",
            (false, true) => b":1\r\n",
            (false, false) => b":0\r\n",
        };
        self.buf.extend_from_slice(out);
    }

    /// Verbatim string: RESP3 `=len` CRLF `fmt:text` where `fmt` is
    /// `format`'s first three bytes, padded with spaces (as Redis does);
    /// RESP2 a plain bulk string of `text`.
    pub fn verbatim(&mut self, format: &str, text: &[u8]) {
        if !self.resp3 {
            self.bulk(text);
            return;
        }
        self.header(b'=', text.len() + 4);
        let f = format.as_bytes();
        for i in 0..3 {
            self.buf.push(f.get(i).copied().unwrap_or(b' '));
        }
        self.buf.push(b':');
        self.buf.extend_from_slice(text);
        self.buf.extend_from_slice(CRLF);
    }

    /// Big number: RESP3 `(digits`, RESP2 a bulk string of the digits.
    pub fn big_number(&mut self, digits: &str) {
        if self.resp3 {
            self.buf.push(b'(');
            self.buf.extend_from_slice(digits.as_bytes());
            self.buf.extend_from_slice(CRLF);
        } else {
            self.bulk(digits.as_bytes());
        }
    }

    #[inline]
    fn header(&mut self, prefix: u8, len: usize) {
        self.buf.push(prefix);
        push_u64(self.buf, len as u64);
        self.buf.extend_from_slice(CRLF);
    }
}

const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Writes `n` in decimal at the end of `tmp`; returns the digits.
#[inline]
fn format_u64(tmp: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut pos = tmp.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        pos -= 2;
        tmp[pos..pos + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        pos -= 2;
        tmp[pos..pos + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        pos -= 1;
        tmp[pos] = b'0' + n as u8;
    }
    &tmp[pos..]
}

/// Like [`format_u64`] for a signed value; `i64::MIN` has 19 digits and
/// the sign, so 20 bytes suffice.
#[inline]
fn format_i64(tmp: &mut [u8; 20], i: i64) -> &[u8] {
    let n = format_u64(tmp, i.unsigned_abs()).len();
    let start = tmp.len() - n;
    if i < 0 {
        tmp[start - 1] = b'-';
        &tmp[start - 1..]
    } else {
        &tmp[start..]
    }
}

#[inline]
fn push_u64(out: &mut Vec<u8>, n: u64) {
    let mut tmp = [0u8; 20];
    out.extend_from_slice(format_u64(&mut tmp, n));
}

#[inline]
fn push_i64(out: &mut Vec<u8>, i: i64) {
    let mut tmp = [0u8; 20];
    out.extend_from_slice(format_i64(&mut tmp, i));
}

/// A `fmt::Write` into a fixed stack buffer, so that formatting a double
/// allocates nothing.
struct StackBuf {
    bytes: [u8; 40],
    len: usize,
}

impl std::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.bytes.len() {
            return Err(std::fmt::Error);
        }
        self.bytes[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// C `printf("%.17g", d)` as glibc writes it, which is what Redis sends for
/// doubles: 17 significant digits, correctly rounded (ties to even);
/// fixed notation when the decimal exponent X is in -4 <= X < 17, otherwise
/// `d.ddde±XX` with at least two exponent digits; trailing zeros and a
/// trailing `.` removed. `-0.0` is `-0`, infinities `inf`/`-inf`, NaN
/// `nan`, or `-nan` when its sign bit is set (glibc).
///
/// Examples: 0.1 → `0.10000000000000001`, 1.5 → `1.5`, 100 → `100`,
/// 1e20 → `1e+20`, 1e-5 → `1.0000000000000001e-05`.
pub fn format_double_g17(d: f64, out: &mut Vec<u8>) {
    format_double_g(d, 17, out)
}

/// C `printf("%.<precision>g", d)`, `precision` 1 to 17, as
/// [`format_double_g17`] describes for 17 (Lua's cjson writes `%.14g`).
pub fn format_double_g(d: f64, precision: usize, out: &mut Vec<u8>) {
    let precision = precision.clamp(1, 17);
    if d.is_sign_negative() {
        out.push(b'-');
    }
    if d.is_nan() {
        out.extend_from_slice(b"nan");
        return;
    }
    if d.is_infinite() {
        out.extend_from_slice(b"inf");
        return;
    }
    // Rust's exact-precision formatting is correctly rounded with ties to
    // even, as glibc's is in the default rounding mode: it gives the
    // digits and the exponent %g decides on.
    let mut sb = StackBuf {
        bytes: [0; 40],
        len: 0,
    };
    // Cannot fail: at most 1 + 1 + 16 + 1 + 4 = 23 bytes.
    let _ = write!(sb, "{:.*e}", precision - 1, d.abs());
    let text = &sb.bytes[..sb.len];
    let e_at = text.iter().position(|&b| b == b'e').unwrap_or(text.len());
    let mut digits = [0u8; 17];
    digits[0] = text[0];
    if precision > 1 {
        digits[1..precision].copy_from_slice(&text[2..e_at]);
    }
    let digits = &digits[..precision];
    let exp: i32 = std::str::from_utf8(&text[e_at + 1..])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // Significant digits left once trailing zeros go.
    let sig = digits.iter().rposition(|&b| b != b'0').map_or(1, |p| p + 1);
    if (-4..precision as i32).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            out.extend_from_slice(&digits[..int_len]);
            if sig > int_len {
                out.push(b'.');
                out.extend_from_slice(&digits[int_len..sig]);
            }
        } else {
            out.extend_from_slice(b"0.");
            for _ in 0..(-exp - 1) {
                out.push(b'0');
            }
            out.extend_from_slice(&digits[..sig]);
        }
    } else {
        out.push(digits[0]);
        if sig > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..sig]);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push(b'0');
        }
        push_u64(out, u64::from(e));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn w(resp3: bool, f: impl FnOnce(&mut ReplyWriter<'_>)) -> Vec<u8> {
        let mut buf = Vec::new();
        f(&mut ReplyWriter::new(&mut buf, resp3));
        buf
    }

    fn both(f: impl Fn(&mut ReplyWriter<'_>)) -> (Vec<u8>, Vec<u8>) {
        (w(false, &f), w(true, &f))
    }

    fn g17(d: f64) -> String {
        let mut out = Vec::new();
        format_double_g17(d, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn simple_types() {
        assert_eq!(both(|r| r.ok()), (b"+OK\r\n".to_vec(), b"+OK\r\n".to_vec()));
        assert_eq!(w(false, |r| r.simple("PONG")), b"+PONG\r\n");
        assert_eq!(
            w(false, |r| r.error("ERR syntax error")),
            b"-ERR syntax error\r\n"
        );
        assert_eq!(w(false, |r| r.error("-ERR x")), b"-ERR x\r\n");
        assert_eq!(w(false, |r| r.error("ERR a\r\nb\nc")), b"-ERR a  b c\r\n");
    }

    #[test]
    fn integers() {
        for i in [
            0i64,
            1,
            -1,
            9,
            10,
            99,
            100,
            12345,
            -12345,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(w(false, |r| r.int(i)), format!(":{i}\r\n").into_bytes());
            let s = i.to_string();
            assert_eq!(
                w(true, |r| r.bulk_int(i)),
                format!("${}\r\n{s}\r\n", s.len()).into_bytes()
            );
        }
        let mut tmp = [0u8; 20];
        for n in (0..2000u64).chain([u64::MAX, 10u64.pow(19), 10u64.pow(19) - 1]) {
            assert_eq!(format_u64(&mut tmp, n), n.to_string().as_bytes());
        }
    }

    #[test]
    fn bulks_and_nulls() {
        assert_eq!(w(false, |r| r.bulk(b"")), b"$0\r\n\r\n");
        assert_eq!(w(false, |r| r.bulk(b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(both(|r| r.null()), (b"$-1\r\n".to_vec(), b"_\r\n".to_vec()));
        assert_eq!(
            both(|r| r.null_array()),
            (b"*-1\r\n".to_vec(), b"_\r\n".to_vec())
        );
    }

    #[test]
    fn aggregates() {
        assert_eq!(
            both(|r| r.array(3)),
            (b"*3\r\n".to_vec(), b"*3\r\n".to_vec())
        );
        assert_eq!(both(|r| r.map(2)), (b"*4\r\n".to_vec(), b"%2\r\n".to_vec()));
        assert_eq!(both(|r| r.set(0)), (b"*0\r\n".to_vec(), b"~0\r\n".to_vec()));
        assert_eq!(
            both(|r| r.push(3)),
            (b"*3\r\n".to_vec(), b">3\r\n".to_vec())
        );
    }

    #[test]
    fn resp3_types() {
        assert_eq!(
            both(|r| r.boolean(true)),
            (b":1\r\n".to_vec(), b"#t\r\n".to_vec())
        );
        assert_eq!(
            both(|r| r.boolean(false)),
            (b":0\r\n".to_vec(), b"#f\r\n".to_vec())
        );
        assert_eq!(
            both(|r| r.verbatim("txt", b"hi")),
            (b"$2\r\nhi\r\n".to_vec(), b"=6\r\ntxt:hi\r\n".to_vec())
        );
        assert_eq!(w(true, |r| r.verbatim("m", b"x")), b"=5\r\nm  :x\r\n");
        assert_eq!(w(true, |r| r.verbatim("mkdn", b"x")), b"=5\r\nmkd:x\r\n");
        assert_eq!(
            both(|r| r.big_number("-123")),
            (b"$4\r\n-123\r\n".to_vec(), b"(-123\r\n".to_vec())
        );
    }

    #[test]
    fn doubles() {
        assert_eq!(
            both(|r| r.double(1.5)),
            (b"$3\r\n1.5\r\n".to_vec(), b",1.5\r\n".to_vec())
        );
        assert_eq!(
            both(|r| r.double(f64::INFINITY)),
            (b"$3\r\ninf\r\n".to_vec(), b",inf\r\n".to_vec())
        );
        assert_eq!(
            both(|r| r.double(f64::NEG_INFINITY)),
            (b"$4\r\n-inf\r\n".to_vec(), b",-inf\r\n".to_vec())
        );
        assert_eq!(w(true, |r| r.double(f64::NAN)), b",nan\r\n");
        assert_eq!(
            w(false, |r| r.double(0.1)),
            b"$19\r\n0.10000000000000001\r\n"
        );
    }

    #[test]
    fn g17_known_values() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-1.0, "-1"),
            (100.0, "100"),
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (-0.1, "-0.10000000000000001"),
            (1e20, "1e+20"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e-4, "0.0001"),
            (1e-5, "1.0000000000000001e-05"),
            (0.00012345, "0.00012344999999999999"),
            (1e100, "1e+100"),
            (5e-324, "4.9406564584124654e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (3.0, "3"),
            (1.0 / 3.0, "0.33333333333333331"),
            (2.5, "2.5"),
            (1234.5678, "1234.5678"),
            (99999999999999999.0, "1e+17"),
            (9007199254740993.0, "9007199254740992"),
            // A tie at the 18th digit: rounds to even, as glibc does.
            (1_000_000_000.0 + 1.0 / 256.0, "1000000000.0039062"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (-f64::NAN, "-nan"),
        ];
        for &(d, text) in cases {
            assert_eq!(g17(d), text, "{d:e}");
        }
    }

    /// `snprintf("%.17g")` from the C library, the reference.
    fn libc_g17(d: f64) -> String {
        let mut buf = [0u8; 64];
        // SAFETY: the buffer is 64 bytes, more than any %.17g output (at
        // most 24), the format is a NUL-terminated literal taking one
        // double.
        let n = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), c"%.17g".as_ptr(), d) };
        String::from_utf8(buf[..n as usize].to_vec()).unwrap()
    }

    #[test]
    fn g17_matches_libc() {
        // xorshift: deterministic, no extra dependency.
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut checked = 0;
        for i in 0..200_000u64 {
            let d = match i % 4 {
                // Any bit pattern: all exponents, subnormals, NaNs.
                0 => f64::from_bits(next()),
                // Human-sized numbers with short decimal forms.
                1 => (next() % 2_000_000) as f64 / 1000.0 - 1000.0,
                // Around the fixed/exponential boundaries.
                2 => {
                    let e = (next() % 50) as i32 - 25;
                    (1.0 + (next() % 1000) as f64 / 1000.0) * 10f64.powi(e)
                }
                // Integers, some above 2^53.
                _ => (next() >> (next() % 64)) as f64,
            };
            assert_eq!(g17(d), libc_g17(d), "bits {:#x}", d.to_bits());
            checked += 1;
        }
        // Ties at the 18th digit: integers plus k/256 near 1e9 have exactly
        // 18 significant digits.
        for k in 0..256 {
            let d = 1_000_000_000.0 + f64::from(k) / 256.0;
            assert_eq!(g17(d), libc_g17(d), "{d}");
            let d = 1_234_567_890.0 + f64::from(k) / 256.0;
            assert_eq!(g17(d), libc_g17(d), "{d}");
        }
        for e in -330..=310 {
            for m in [1.0, 5.0, 9.999_999_999_999_999, 0.999_999_999_999_999_9] {
                let d = m * 10f64.powi(e);
                assert_eq!(g17(d), libc_g17(d), "{d:e}");
                assert_eq!(g17(-d), libc_g17(-d), "{d:e}");
            }
        }
        assert!(checked > 1000);
    }
}
