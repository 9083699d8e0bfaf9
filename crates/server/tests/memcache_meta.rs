//! Black-box tests of memcached's meta commands (mg, ms, md, ma, mn) on
//! Keel's `--memcached-port`: each flag, the order replies echo them in,
//! `q`, base64 keys, the recache token, and the errors, as memcached
//! 1.6.18 answers them (probed on Debian's memcached); then what only
//! Keel has: the flags it refuses, Redis's view of meta writes, and their
//! durability.
//!
//! With `KEEL_MEMCACHE_REFERENCE=1` the tests that hold for any memcached
//! run against Debian's memcached instead, which checks their
//! expectations.

mod common;

use common::memcache::{reference, start_keel, start_keel_in, start_under_test as start, McClient};
use common::{bulk, temp_dir, Frame};

/// Sends `requests` (lines joined by `\r\n`, data blocks included) and an
/// `mn`, and returns every line that came before its `MN`: a quiet reply
/// shows as a missing line, with no waiting.
fn script(c: &mut McClient, requests: &[&str]) -> Vec<String> {
    let mut bytes = Vec::new();
    for r in requests {
        bytes.extend_from_slice(r.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"mn\r\n");
    c.write_raw(&bytes);
    let mut lines = Vec::new();
    loop {
        let line = c.line();
        if line == "MN" {
            return lines;
        }
        lines.push(line);
    }
}

/// One request, one reply line.
fn one(c: &mut McClient, request: &str) -> String {
    let mut lines = script(c, &[request]);
    assert_eq!(lines.len(), 1, "{request:?} answered {lines:?}");
    lines.remove(0)
}

/// The number after ` <flag>` in a reply line.
fn flag_of(line: &str, flag: char) -> u64 {
    line.split(' ')
        .skip(1)
        .find_map(|w| w.strip_prefix(flag).and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("no {flag} in {line:?}"))
}

/// `line` with the number of its ` c<cas>` flag replaced by `c*`.
fn no_cas(line: &str) -> String {
    line.split(' ').map(|w| if w.starts_with('c') && w[1..].parse::<u64>().is_ok() { "c*" } else { w }).collect::<Vec<_>>().join(" ")
}

/// mg on a hit: HD, or VA with the value; each asked field in the order
/// the flags came (s size, t ttl, f client flags, k key, O opaque, h hit
/// before, l seconds since the last access); v's data after the line.
#[test]
fn mg_answers_each_flag_in_request_order() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 5 F7 T0", "hello"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k"), "HD");
    assert_eq!(script(&mut c, &["mg k v"]), ["VA 5", "hello"]);
    assert_eq!(script(&mut c, &["mg k O99 k s f t v"]), ["VA 5 O99 kk s5 f7 t-1", "hello"]);
    assert_eq!(one(&mut c, "mg k t f s O1 k"), "HD t-1 f7 s5 O1 kk");
    assert_eq!(script(&mut c, &["ms e 0 F4294967295", ""]), ["HD"]);
    assert_eq!(script(&mut c, &["mg e v s f"]), ["VA 0 s0 f4294967295", ""]);
    assert_eq!(script(&mut c, &["ms t 1 T100", "x"]), ["HD"]);
    let t = flag_of(&one(&mut c, "mg t t"), 't');
    assert!((99..=100).contains(&t), "t{t}");
    // A value with line ends inside and binary bytes comes back whole.
    c.write_raw(b"ms bin 6\r\na\r\n\x00\xffz\r\nmg bin v\r\n");
    assert_eq!(c.line(), "HD");
    assert_eq!(c.line(), "VA 6");
    assert_eq!(c.bytes(8), b"a\r\n\x00\xffz\r\n");
}

/// The CAS value mg's c shows is the one gets shows, and ms's C compares
/// against it.
#[test]
fn mg_c_is_the_items_cas() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 2", "v1"]), ["HD"]);
    let cas = flag_of(&one(&mut c, "mg k c"), 'c');
    assert_eq!(c.cas_of("k"), cas);
    assert_eq!(flag_of(&one(&mut c, "mg k c"), 'c'), cas, "a read keeps it");
    assert_eq!(no_cas(&one(&mut c, "mg k c")), "HD c*");
}

/// A miss is EN, with only the O and k flags echoed; q silences EN (and
/// nothing else: a hit still answers). mn answers MN whatever follows it.
#[test]
fn mg_misses_and_quiet_mode() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(one(&mut c, "mg nope"), "EN");
    assert_eq!(one(&mut c, "mg nope v s t c f h l k O5"), "EN knope O5");
    assert_eq!(script(&mut c, &["mg nope q", "mg nope q k O1"]), Vec::<String>::new());
    assert_eq!(script(&mut c, &["ms k 1", "x"]), ["HD"]);
    assert_eq!(script(&mut c, &["mg nope q v", "mg k q v", "mg k q"]), ["VA 1", "x", "HD"]);
    assert_eq!(c.cmd("mn and more"), "MN");
    assert_eq!(script(&mut c, &["get k"]), ["VALUE k 0 1", "x", "END"]);
}

/// h says whether the item was read before (by mg, get, gets, gat or
/// touch) since it was stored; l the seconds since its last access. u
/// reads without counting as a read; the read that asks h sees the state
/// before itself.
#[test]
fn mg_h_l_and_u() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 1", "x"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k h l u"), "HD h0 l0");
    assert_eq!(one(&mut c, "mg k h u"), "HD h0", "u did not count");
    assert_eq!(one(&mut c, "mg k h"), "HD h0");
    assert_eq!(one(&mut c, "mg k h"), "HD h1");
    assert_eq!(script(&mut c, &["ms k 1", "y"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k h"), "HD h0", "a store starts a new item");
    for read in ["get k", "gets k", "gat 0 k", "touch k 0"] {
        assert_eq!(script(&mut c, &["ms k 1", "y"]), ["HD"]);
        let mut reply = script(&mut c, &[read, "mg k h"]);
        assert_eq!(reply.pop().as_deref(), Some("HD h1"), "after {read}");
    }
    assert_eq!(one(&mut c, "mg nope h l u"), "EN");
}

/// T sets a new expiry (0: none; negative: already past) and counts from
/// where it stands: a t before it reports the old time, one after it the
/// new. The item keeps its value, flags and CAS.
#[test]
fn mg_t_touches() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 1 F3", "x"]), ["HD"]);
    let cas = flag_of(&one(&mut c, "mg k c"), 'c');
    assert_eq!(one(&mut c, "mg k t T100 f"), "HD t-1 f3", "t before T: the old time");
    let t = flag_of(&one(&mut c, "mg k t"), 't');
    assert!((99..=100).contains(&t), "t{t}");
    assert_eq!(flag_of(&one(&mut c, "mg k c"), 'c'), cas, "touching kept the CAS value");
    assert_eq!(one(&mut c, "mg k T50 t"), "HD t50", "t after T: the new one");
    assert_eq!(one(&mut c, "mg k T0 t"), "HD t-1");
    assert_eq!(one(&mut c, "mg k t"), "HD t-1");
    assert_eq!(script(&mut c, &["mg k T-1 v"]), ["VA 1", "x"], "the reply still has it");
    assert_eq!(one(&mut c, "mg k"), "EN");
    assert_eq!(one(&mut c, "mg nope T10"), "EN");
}

/// R hands out one recache token: the first mg whose R time is past the
/// item's remaining time wins (W), the next ones see Z; an item with no
/// expiry or with time left never wins. A new store takes the token back.
#[test]
fn mg_r_hands_out_one_recache_token() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 1 T100", "x"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k R30"), "HD");
    assert_eq!(script(&mut c, &["mg k R200 v t"]), ["VA 1 t100 W", "x"]);
    assert_eq!(one(&mut c, "mg k R200 t"), "HD t100 Z");
    assert_eq!(one(&mut c, "mg k"), "HD Z");
    let mut other = McClient::connect(port);
    assert_eq!(one(&mut other, "mg k R200 k"), "HD kk Z");
    // T before R moves the time R compares with.
    assert_eq!(script(&mut c, &["ms k 1 T100", "x"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k T300 R200"), "HD");
    assert_eq!(one(&mut c, "mg k T10 R200"), "HD W");
    assert_eq!(script(&mut c, &["ms k 1", "x"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k R200"), "HD", "no expiry: never a winner");
}

/// ms in each mode: S (set, the default), E (add), R (replace), A
/// (append) and P (prepend, both keeping the item's flags and expiry);
/// HD when stored, NS when not.
#[test]
fn ms_modes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms a 3 ME F1", "abc", "ms a 3 ME", "xyz"]), ["HD", "NS"]);
    assert_eq!(script(&mut c, &["ms b 1 MA", "x", "ms b 1 MP", "x", "ms b 1 MR", "x"]), ["NS", "NS", "NS"]);
    assert_eq!(script(&mut c, &["ms a 1 MA F9 T5", "d", "ms a 1 MP", "z"]), ["HD", "HD"]);
    assert_eq!(script(&mut c, &["mg a v f t"]), ["VA 5 f1 t-1", "zabcd"]);
    assert_eq!(script(&mut c, &["ms a 1 MR F7 T100", "q", "mg a v f"]), ["HD", "VA 1 f7", "q"]);
    assert_eq!(script(&mut c, &["ms a 2 MS", "hi", "ms a 2", "ho", "mg a v f"]), ["HD", "HD", "VA 2 f0", "ho"]);
    // q silences HD only.
    assert_eq!(script(&mut c, &["ms a 2 q", "hi", "ms a 2 q ME", "hi", "ms a 2 q k O1", "hi"]), ["NS"]);
}

/// ms with C is a cas (in S and R modes; A and P compare a non-zero one,
/// E ignores it): HD on a match, EX on another value or a CAS of 0, NF
/// on a missing key. c answers the stored item's new CAS value (c0 when
/// nothing was stored), which the next C matches.
#[test]
fn ms_compare_and_swap() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    let stored = one_with_data(&mut c, "ms k 2 c", "v1");
    assert_eq!(no_cas(&stored), "HD c*");
    let cas = flag_of(&stored, 'c');
    assert_eq!(c.cas_of("k"), cas);
    assert_eq!(one_with_data(&mut c, "ms k 2 C0", "v2"), "EX");
    assert_eq!(one_with_data(&mut c, &format!("ms k 2 C{} c k", cas + 1000), "v2"), "EX c0 kk");
    let next = one_with_data(&mut c, &format!("ms k 2 C{cas} c"), "v2");
    let cas2 = flag_of(&next, 'c');
    assert_ne!(cas2, cas);
    assert_eq!(one_with_data(&mut c, &format!("ms k 2 C{cas}"), "v3"), "EX", "the store changed it");
    assert_eq!(one_with_data(&mut c, &format!("ms k 2 MR C{cas2} c"), "v3").split(' ').next(), Some("HD"));
    assert_eq!(one_with_data(&mut c, "ms nope 2 C5 O1", "v3"), "NF O1");
    assert_eq!(one_with_data(&mut c, "ms nope 2 MR C5", "v3"), "NF");
    assert_eq!(one_with_data(&mut c, "ms nope 2 MA C5", "v3"), "NS");
    let cas3 = c.cas_of("k");
    assert_eq!(one_with_data(&mut c, &format!("ms k 1 MA C{}", cas3 + 1), "x"), "EX");
    assert_eq!(one_with_data(&mut c, "ms k 1 MA C0", "x"), "HD");
    assert_eq!(one_with_data(&mut c, "ms k 1 ME C5", "x"), "NS");
    assert_eq!(script(&mut c, &["mg k v"]), ["VA 3", "v3x"]);
}

/// One ms with its data block, one reply line.
fn one_with_data(c: &mut McClient, line: &str, data: &str) -> String {
    let mut lines = script(c, &[line, data]);
    assert_eq!(lines.len(), 1, "{line:?} answered {lines:?}");
    lines.remove(0)
}

/// md: HD, NF for a missing key, EX when C does not match; q silences HD
/// only; O and k are echoed on every outcome.
#[test]
fn md_outcomes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 1", "x"]), ["HD"]);
    let cas = c.cas_of("k");
    assert_eq!(one(&mut c, &format!("md k C{} k O1", cas + 1)), "EX kk O1");
    assert_eq!(one(&mut c, "md k C0"), "EX");
    assert_eq!(one(&mut c, &format!("md k C{cas} O2 k")), "HD O2 kk");
    assert_eq!(one(&mut c, "md k k O3"), "NF kk O3");
    assert_eq!(one(&mut c, "mg k"), "EN");
    assert_eq!(script(&mut c, &["ms k 1", "x", "md k q", "md k q", "md k T30 q"]), ["HD", "NF", "NF"]);
}

/// ma: incr by 1 by default, D the delta, MD/M- decrement (stopping at
/// 0), MI/M+ increment (wrapping at 2^64); v answers the number; a
/// shorter result keeps the item's length with spaces, as memcached's in
/// place update.
#[test]
fn ma_arithmetic() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms n 2 F5", "10"]), ["HD"]);
    assert_eq!(one(&mut c, "ma n"), "HD");
    assert_eq!(script(&mut c, &["ma n v"]), ["VA 2", "12"]);
    assert_eq!(script(&mut c, &["ma n MD D5 v k O1"]), ["VA 1 kn O1", "7"]);
    assert_eq!(script(&mut c, &["mg n v f"]), ["VA 2 f5", "7 "], "padded, flags kept");
    assert_eq!(script(&mut c, &["ma n M- D50 v t"]), ["VA 1 t-1", "0"]);
    assert_eq!(script(&mut c, &["ma n M+ D18446744073709551615 v"]), ["VA 20", "18446744073709551615"]);
    assert_eq!(script(&mut c, &["ma n MI D2 v"]), ["VA 1", "1"], "wrapped");
    // q silences HD and VA, not NF.
    let padded = format!("3{}", " ".repeat(19));
    assert_eq!(script(&mut c, &["ma n q", "ma n q v", "ma nope q", "mg n v"]), ["NF", "VA 20", &padded]);
    assert_eq!(one(&mut c, "ma nope k O9"), "NF knope O9");
    assert_eq!(script(&mut c, &["ms s 3", "abc"]), ["HD"]);
    assert_eq!(one(&mut c, "ma s"), "CLIENT_ERROR cannot increment or decrement non-numeric value");
    assert_eq!(script(&mut c, &["ms e 0", ""]), ["HD"]);
    assert_eq!(one(&mut c, "ma e C5"), "CLIENT_ERROR cannot increment or decrement non-numeric value");
}

/// ma with C acts only on that CAS value (EX otherwise; C0 does not
/// compare), and c answers the item's new CAS value; N creates a missing
/// item with the J value (0 by default) and that expiry, answered even
/// under q; T sets an expiry, and t reports it where it stands.
#[test]
fn ma_cas_vivify_and_ttl() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms n 1", "5"]), ["HD"]);
    let cas = c.cas_of("n");
    assert_eq!(one(&mut c, &format!("ma n C{}", cas + 1)), "EX");
    assert_eq!(one(&mut c, "ma n C0"), "HD");
    let cas = c.cas_of("n");
    let reply = script(&mut c, &[&format!("ma n C{cas} c v")]);
    assert_eq!(reply[1], "7");
    assert_ne!(flag_of(&reply[0], 'c'), cas);
    assert_eq!(flag_of(&reply[0], 'c'), c.cas_of("n"));
    assert_eq!(script(&mut c, &["ma v N0 J5 q", "ma v q", "mg v v"]), ["HD", "VA 1", "6"]);
    assert_eq!(script(&mut c, &["ma w N100 t v"]), ["VA 1 t100", "0"]);
    let t = flag_of(&one(&mut c, "mg w t"), 't');
    assert!((99..=100).contains(&t), "t{t}");
    assert_eq!(script(&mut c, &["ma x t N100 J9 v"]), ["VA 1 t-1", "9"], "t before N");
    assert_eq!(script(&mut c, &["ma w t T0 v"]), ["VA 1 t100", "1"]);
    assert_eq!(one(&mut c, "mg w t"), "HD t-1");
    assert_eq!(script(&mut c, &["ma w T200 t v"]), ["VA 1 t200", "2"]);
}

/// b: the key is base64 (decoded as memcached does), echoed back encoded
/// and followed by b; the item is the decoded key's.
#[test]
fn base64_keys() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms a2V5 3 b k c O9", "bar"]).iter().map(|l| no_cas(l)).collect::<Vec<_>>(), ["HD ka2V5 b c* O9"]);
    assert_eq!(script(&mut c, &["mg a2V5 b k v s"]), ["VA 3 ka2V5 b s3", "bar"]);
    assert_eq!(one(&mut c, "ma a2V5 b k"), "CLIENT_ERROR cannot increment or decrement non-numeric value");
    assert_eq!(script(&mut c, &["md a2V5 b k q", "mg a2V5 b k"]), ["EN ka2V5 b"]);
    assert_eq!(one(&mut c, "mg AAEC/w== b k"), "EN kAAEC/w== b");
    assert_eq!(one(&mut c, "mg a2V=A b"), "CLIENT_ERROR error decoding key");
    assert_eq!(one(&mut c, "md a2V b"), "CLIENT_ERROR invalid or duplicate flag");
    assert_eq!(script(&mut c, &["ms a2V 1 b", "x", "mg k"]), ["CLIENT_ERROR error decoding key", "EN"]);
}

/// Malformed meta requests, answered as memcached does (errors are sent
/// even under q). A refused ms swallows its data block once its line had
/// a legal key, a valid length and at most 19 tokens; before that the
/// block is read as commands.
#[test]
fn meta_errors() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    let long_key = "k".repeat(251);
    let opaque = format!("O{}", "o".repeat(32));
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("mg".into(), vec!["ERROR"]),
        ("md".into(), vec!["ERROR"]),
        ("ma".into(), vec!["ERROR"]),
        ("mx k".into(), vec!["ERROR"]),
        ("mg k E".into(), vec!["CLIENT_ERROR invalid flag"]),
        ("mg k v v".into(), vec!["CLIENT_ERROR duplicate flag"]),
        ("mg k Tx q".into(), vec!["CLIENT_ERROR bad token in command line format"]),
        ("mg k R".into(), vec!["CLIENT_ERROR bad token in command line format"]),
        (format!("mg {long_key} v"), vec!["CLIENT_ERROR bad command line format"]),
        (format!("mg k{}", " a".repeat(18)), vec!["CLIENT_ERROR options flags are too long"]),
        (format!("md k{}", " a".repeat(18)), vec!["CLIENT_ERROR options flags too long"]),
        (format!("mg k {opaque}"), vec!["CLIENT_ERROR opaque token too long"]),
        (format!("md k {opaque}"), vec!["CLIENT_ERROR opaque token too long"]),
        ("md k x".into(), vec!["CLIENT_ERROR invalid or duplicate flag"]),
        ("md k T".into(), vec!["CLIENT_ERROR invalid or duplicate flag"]),
        ("ma k E".into(), vec!["CLIENT_ERROR invalid or duplicate flag"]),
        ("ma k Dx".into(), vec!["CLIENT_ERROR invalid or duplicate flag"]),
        ("ma k MX".into(), vec!["CLIENT_ERROR invalid mode for ma M token"]),
        ("ms k 2 E\r\nab".into(), vec!["CLIENT_ERROR invalid flag"]),
        ("ms k 2 S\r\nab".into(), vec!["CLIENT_ERROR invalid flag"]),
        ("ms k 2 q MX\r\nab".into(), vec!["CLIENT_ERROR invalid mode for ms M token"]),
        ("ms k 2 Mee\r\nab".into(), vec!["CLIENT_ERROR incorrect length for M token"]),
        ("ms k 2 Fx\r\nab".into(), vec!["CLIENT_ERROR bad command line format"]),
        ("ms k 2 Tx Fx\r\nab".into(), vec!["CLIENT_ERROR bad token in command line format"]),
        ("ms k 2 C-1\r\nab".into(), vec!["CLIENT_ERROR bad token in command line format"]),
        (format!("ms k 2 {opaque}\r\nab"), vec!["CLIENT_ERROR opaque token too long"]),
        ("ms k 2 q\r\nabcd".into(), vec!["CLIENT_ERROR bad data chunk", "ERROR"]),
        ("ms k\r\nab".into(), vec!["CLIENT_ERROR bad command line format", "ERROR"]),
        ("ms k x\r\nab".into(), vec!["CLIENT_ERROR bad command line format", "ERROR"]),
        (format!("ms {long_key} 2\r\nab"), vec!["CLIENT_ERROR bad command line format", "ERROR"]),
        (format!("ms k 2{}\r\nab", " T1".repeat(17)), vec!["CLIENT_ERROR options flags too long", "ERROR"]),
    ];
    for (request, want) in cases {
        assert_eq!(script(&mut c, &[&request]), want, "{request:?}");
    }
    assert_eq!(one(&mut c, "mg k"), "EN", "nothing was stored");
}

/// An ms too large for an item is refused, its block swallowed, and the
/// key's old value removed, in every mode.
#[test]
fn ms_too_large_unlinks() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    let big = "x".repeat(1_048_600);
    for mode in ["", " MA", " ME"] {
        assert_eq!(script(&mut c, &["ms k 1", "v"]), ["HD"]);
        let reply = script(&mut c, &[&format!("ms k {}{mode}", big.len()), &big, "mg k"]);
        assert_eq!(reply, ["SERVER_ERROR object too large for cache", "EN"], "mode {mode:?}");
    }
}

/// What Keel refuses, with a clear error: the I flag (a stale mark) and
/// mg's N (a vivified item's win token) could not survive a restart or
/// reach a replica, where memcached loses the whole item; `me` shows
/// memcached's slab internals, which Keel does not have; mg's l under an
/// LFU maxmemory-policy, where no last access is kept.
#[test]
fn keel_refuses_what_it_cannot_keep() {
    if reference() {
        return;
    }
    let (_server, port) = start_keel(&[]);
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 1", "x"]), ["HD"]);
    assert_eq!(one(&mut c, "md k I"), "CLIENT_ERROR Keel does not support the I flag");
    assert_eq!(one(&mut c, "md k I T30 q"), "CLIENT_ERROR Keel does not support the I flag");
    assert_eq!(script(&mut c, &["ms k 1 C5 I", "y"]), ["CLIENT_ERROR Keel does not support the I flag"]);
    assert_eq!(one(&mut c, "mg nope N30 v"), "CLIENT_ERROR Keel does not support the N flag of mg");
    assert_eq!(one(&mut c, "me k"), "CLIENT_ERROR Keel does not support the me command");
    assert_eq!(script(&mut c, &["mg k v"]), ["VA 1", "x"], "the item is untouched");
    assert_eq!(one(&mut c, "mg nope"), "EN", "nothing was created");
    // Under an LFU policy a key's access word counts, it does not date.
    let (_server, port) = start_keel(&["--maxmemory-policy", "allkeys-lfu"]);
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["ms k 1", "x"]), ["HD"]);
    assert_eq!(one(&mut c, "mg k h l"), "SERVER_ERROR an LFU maxmemory-policy is selected, last access not tracked");
    assert_eq!(one(&mut c, "mg k h"), "HD h0", "the failed read did not count");
}

/// Meta writes are the Redis commands they stand for: Redis clients see
/// their values and expiry times; the command statistics count them.
#[test]
fn meta_writes_are_redis_writes() {
    if reference() {
        return;
    }
    let (server, port) = start_keel(&[]);
    let mut c = McClient::connect(port);
    let mut r = server.client();
    assert_eq!(script(&mut c, &["ms k 5 F3 T1000", "hello"]), ["HD"]);
    assert_eq!(r.send(&["GET", "k"]), bulk("hello"));
    assert!(matches!(r.send(&["TTL", "k"]), Frame::Integer(t) if t > 990));
    assert_eq!(one(&mut c, "mg k T0"), "HD");
    assert_eq!(r.send(&["TTL", "k"]), Frame::Integer(-1));
    assert_eq!(one(&mut c, "ma n N500 J41"), "HD");
    assert_eq!(one(&mut c, "ma n"), "HD");
    assert_eq!(r.send(&["GET", "n"]), bulk("42"));
    assert!(matches!(r.send(&["TTL", "n"]), Frame::Integer(t) if t > 490));
    assert_eq!(one(&mut c, "md k"), "HD");
    assert_eq!(r.send(&["EXISTS", "k"]), Frame::Integer(0));
    let stats = r.info_field("commandstats", "cmdstat_set");
    assert!(stats.starts_with("calls=1,"), "{stats}");
    assert_eq!(one(&mut c, "mg n l"), "HD l0");
}

/// Under `appendfsync always`, an acknowledged ms survives kill -9 with
/// its value, client flags and expiry, and so do ma's and mg's T changes.
/// CAS values are not kept across a restart (as for the classic
/// commands): the item gets a new one, and a CAS value from before no
/// longer matches.
#[test]
fn meta_writes_survive_kill_9() {
    if reference() {
        return;
    }
    let dir = temp_dir("mc-meta-durable");
    let (server, port) = start_keel_in(&dir, &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = McClient::connect(port);
    let reply = script(&mut c, &["ms k 5 F77 T1000 c", "hello"]);
    let cas = flag_of(&reply[0], 'c');
    assert_eq!(script(&mut c, &["ms a 1 F9", "x", "ms a 1 MA", "y"]), ["HD", "HD"]);
    assert_eq!(one(&mut c, "ma n N0 J10 D5"), "HD");
    assert_eq!(one(&mut c, "ma n D1"), "HD");
    assert_eq!(script(&mut c, &["ms t 1 F4", "t"]), ["HD"]);
    assert_eq!(one(&mut c, "mg t T2000"), "HD");
    assert_eq!(one(&mut c, "md gone"), "NF");
    assert_eq!(script(&mut c, &["ms gone 1", "g"]), ["HD"]);
    assert_eq!(one(&mut c, "md gone"), "HD");
    server.kill9();
    let (server, port) = start_keel_in(&dir, &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = McClient::connect(port);
    assert_eq!(script(&mut c, &["mg k v f"]), ["VA 5 f77", "hello"]);
    let t = flag_of(&one(&mut c, "mg k t"), 't');
    assert!((990..=1000).contains(&t), "t{t}");
    assert_eq!(script(&mut c, &["mg a v f"]), ["VA 2 f9", "xy"]);
    assert_eq!(script(&mut c, &["mg n v"]), ["VA 2", "11"]);
    let t = flag_of(&one(&mut c, "mg t t f"), 't');
    assert!((1990..=2000).contains(&t), "t{t}");
    assert_eq!(one(&mut c, "mg t f"), "HD f4");
    assert_eq!(one(&mut c, "mg gone"), "EN");
    assert_ne!(flag_of(&one(&mut c, "mg k c"), 'c'), cas);
    assert_eq!(one_with_data(&mut c, &format!("ms k 1 C{cas}"), "z"), "EX");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
