//! Black-box tests of Keel's memcached text protocol (`--memcached-port`)
//! over real sockets: each command's outcomes and exact replies as
//! memcached 1.6.18 gives them (probed on Debian's memcached), expiry,
//! noreply, bad input, the keyspace shared with Redis, and durability.
//!
//! With `KEEL_MEMCACHE_REFERENCE=1` the tests that hold for any memcached
//! run against Debian's memcached instead: their expectations are
//! memcached's, and this checks them.

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::memcache::{start_keel, start_keel_in, start_under_test as start, Item, McClient};
use common::{bulk, int, ok, temp_dir, Client, Frame, Server};
use rand::{Rng, SeedableRng};

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs() as i64
}

/// `key`'s (flags, value), None when missing.
fn fv(c: &mut McClient, key: &str) -> Option<(u32, String)> {
    c.get(key).map(|i| (i.flags, i.text()))
}

fn some(flags: u32, value: &str) -> Option<(u32, String)> {
    Some((flags, value.to_string()))
}

/// The keys and values of a retrieval's items, in order.
fn kv(items: &[Item]) -> Vec<(String, String)> {
    items.iter().map(|i| (i.key.clone(), i.text())).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// set stores always; add only a missing key; replace, append and prepend
/// only an existing one. append and prepend keep the item's flags (theirs
/// are ignored), and set replaces both value and flags.
#[test]
fn storage_commands_store_where_memcached_does() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 5, 0, "abc"), "STORED");
    assert_eq!(c.store("add a 0 0", "x", ""), "NOT_STORED");
    assert_eq!(c.store("add b 7 0", "new", ""), "STORED");
    assert_eq!(c.store("replace zz 0 0", "x", ""), "NOT_STORED");
    assert_eq!(c.store("replace b 8 0", "newer", ""), "STORED");
    assert_eq!(c.store("append zz 0 0", "x", ""), "NOT_STORED");
    assert_eq!(c.store("prepend zz 0 0", "x", ""), "NOT_STORED");
    assert_eq!(c.store("append a 9 0", "de", ""), "STORED");
    assert_eq!(c.store("prepend a 9 0", "<", ""), "STORED");
    assert_eq!(fv(&mut c, "a"), some(5, "<abcde"));
    assert_eq!(fv(&mut c, "b"), some(8, "newer"));
    assert_eq!(fv(&mut c, "zz"), None, "a NOT_STORED left nothing");
    assert_eq!(c.set("a", 4294967295, 0, "v"), "STORED");
    assert_eq!(fv(&mut c, "a"), some(4294967295, "v"));
}

/// Values are length-delimited: empty, binary, `\r\n` inside, all come
/// back as stored.
#[test]
fn values_are_any_bytes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("empty", 0, 0, ""), "STORED");
    assert_eq!(fv(&mut c, "empty"), some(0, ""));
    let binary: Vec<u8> = (0..=255u8).chain(*b"\r\nEND\r\n").collect();
    c.write_raw(&McClient::storage("set bin 1 0", &binary, ""));
    assert_eq!(c.line(), "STORED");
    assert_eq!(c.get("bin").expect("bin").value, binary);
    assert_eq!(c.store("append empty 0 0", "a\r\nb", ""), "STORED");
    assert_eq!(fv(&mut c, "empty"), some(0, "a\r\nb"));
}

/// cas stores only when the item still has the CAS value given: STORED,
/// then EXISTS for the same value again (the store changed it), EXISTS
/// after another client's set, NOT_FOUND for a missing key; a CAS value
/// of 0, never handed out, is EXISTS even before anyone asked for one.
#[test]
fn cas_outcomes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("k", 1, 0, "v1"), "STORED");
    assert_eq!(c.store("cas k 0 0", "x", "0"), "EXISTS");
    let c1 = c.cas_of("k");
    assert_eq!(c.store("cas k 3 0", "v2", &c1.to_string()), "STORED");
    assert_eq!(fv(&mut c, "k"), some(3, "v2"));
    assert_eq!(c.store("cas k 3 0", "v3", &c1.to_string()), "EXISTS");
    assert_eq!(fv(&mut c, "k"), some(3, "v2"));
    let c2 = c.cas_of("k");
    assert_ne!(c2, c1);
    let mut other = McClient::connect(port);
    assert_eq!(other.set("k", 0, 0, "theirs"), "STORED");
    assert_eq!(c.store("cas k 0 0", "mine", &c2.to_string()), "EXISTS");
    assert_eq!(fv(&mut c, "k"), some(0, "theirs"));
    let c3 = c.cas_of("k");
    c.write_raw(&McClient::storage("cas k 0 0", b"mine", &format!("{c3} noreply")));
    assert_eq!(fv(&mut c, "k"), some(0, "mine"), "a noreply cas stores, silently");
    assert_eq!(c.store("cas missing 0 0", "x", &c3.to_string()), "NOT_FOUND");
    assert_eq!(c.store("cas k 0 0", "x", "abc"), "CLIENT_ERROR bad command line format");
    assert_eq!(c.line(), "ERROR", "the data line, read as a command");
}

/// Every change of an item's value gives it a new CAS value (set, add,
/// replace, append, prepend, cas, incr, decr), never one another key has;
/// reading it (get, gets) and moving its expiry (touch, gat, gats) keep it,
/// as in memcached, and so do failed commands.
#[test]
fn every_change_and_only_a_change_gives_a_new_cas() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("k", 0, 0, "1"), "STORED");
    assert_eq!(c.set("other", 0, 0, "1"), "STORED");
    let mut seen = vec![c.cas_of("other"), c.cas_of("k")];
    assert_ne!(seen[0], seen[1], "two keys share a CAS value");
    let changes: Vec<(&str, Vec<u8>, &str)> = vec![
        ("set", McClient::storage("set k 0 0", b"2", ""), "STORED"),
        ("replace", McClient::storage("replace k 0 0", b"3", ""), "STORED"),
        ("append", McClient::storage("append k 0 0", b"4", ""), "STORED"),
        ("prepend", McClient::storage("prepend k 0 0", b"5", ""), "STORED"),
        ("incr", b"incr k 1\r\n".to_vec(), "535"),
        ("decr", b"decr k 5\r\n".to_vec(), "530"),
    ];
    for (name, bytes, reply) in changes {
        c.write_raw(&bytes);
        assert_eq!(c.line(), reply, "{name}");
        let cas = c.cas_of("k");
        assert!(!seen.contains(&cas), "{name} kept or reused a CAS value ({cas}, seen {seen:?})");
        seen.push(cas);
    }
    let last = *seen.last().expect("some");
    assert_eq!(c.store("cas k 0 0", "6", &last.to_string()), "STORED");
    let cas = c.cas_of("k");
    assert!(!seen.contains(&cas), "cas kept or reused a CAS value");
    assert_eq!(c.cmd("delete k"), "DELETED");
    assert_eq!(c.store("add k 0 0", "7", ""), "STORED");
    let cas = c.cas_of("k");
    assert!(!seen.contains(&cas), "add kept or reused a CAS value");
    let unchanged: &[(&str, &str)] = &[
        ("touch k 1000", "TOUCHED"),
        ("incr k abc", "CLIENT_ERROR invalid numeric delta argument"),
        ("verbosity 1", "OK"),
    ];
    for (line, reply) in unchanged {
        assert_eq!(c.cmd(line), *reply);
        assert_eq!(c.cas_of("k"), cas, "`{line}` changed the CAS value");
    }
    assert_eq!(c.store("add k 0 0", "x", ""), "NOT_STORED");
    assert_eq!(c.cas_of("k"), cas, "a NOT_STORED add changed the CAS value");
    assert_eq!(c.retrieve("gat 2000 k").len(), 1);
    assert_eq!(c.retrieve("gats 3000 k")[0].cas, Some(cas), "gats changed the CAS value");
    assert_eq!(c.cas_of("k"), cas, "gat/gats changed the CAS value");
    assert_eq!(c.set("s", 0, 0, "abc"), "STORED");
    let s = c.cas_of("s");
    assert_eq!(c.cmd("incr s 1"), "CLIENT_ERROR cannot increment or decrement non-numeric value");
    assert_eq!(c.cas_of("s"), s, "a failed incr changed the CAS value");
}

/// A multi-key get answers the hits in request order (a key asked twice
/// comes twice), skips the misses, and ends with END; gets adds the CAS
/// values; a get of misses only is END alone.
#[test]
fn get_and_gets_many_keys_with_misses() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    for (k, f) in [("a", 1), ("b", 2), ("c", 3)] {
        assert_eq!(c.set(k, f, 0, &format!("v{k}")), "STORED");
    }
    let items = c.retrieve("get a nope1 b nope2 c");
    assert_eq!(kv(&items), pairs(&[("a", "va"), ("b", "vb"), ("c", "vc")]));
    assert_eq!(items.iter().map(|i| i.flags).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert!(items.iter().all(|i| i.cas.is_none()), "get shows no CAS values: {items:?}");
    let items = c.retrieve("gets c nope a");
    assert_eq!(kv(&items), pairs(&[("c", "vc"), ("a", "va")]));
    assert!(items[0].cas.is_some() && items[1].cas.is_some() && items[0].cas != items[1].cas, "{items:?}");
    assert_eq!(kv(&c.retrieve("get b b")), pairs(&[("b", "vb"), ("b", "vb")]));
    assert_eq!(c.retrieve("get x y z"), vec![]);
    c.write_raw(b"get a\r\n");
    let raw = c.bytes(b"VALUE a 1 2\r\nva\r\nEND\r\n".len());
    assert_eq!(String::from_utf8_lossy(&raw), "VALUE a 1 2\r\nva\r\nEND\r\n", "the exact bytes of a get");
    c.expect_silence(Duration::from_millis(100));
}

/// gat and gats return the hits as get and gets do and set their expiry
/// times; a past time expires them after they were returned.
#[test]
fn gat_and_gats_touch_and_return() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 4, 0, "va"), "STORED");
    assert_eq!(c.set("b", 5, 0, "vb"), "STORED");
    let items = c.retrieve("gat 100 a nope b");
    assert_eq!(kv(&items), pairs(&[("a", "va"), ("b", "vb")]));
    assert_eq!(items.iter().map(|i| (i.flags, i.cas)).collect::<Vec<_>>(), vec![(4, None), (5, None)]);
    let cas = c.cas_of("a");
    let items = c.retrieve("gats 100 a");
    assert_eq!(items[0].cas, Some(cas));
    assert_eq!(c.retrieve("gat 100 nope"), vec![]);
    assert_eq!(kv(&c.retrieve("gat -1 a")), pairs(&[("a", "va")]), "a past time still returns the item");
    assert_eq!(c.get("a"), None, "gat -1 expired it");
    assert_eq!(c.cmd("gat x b"), "CLIENT_ERROR invalid exptime argument");
    assert_eq!(fv(&mut c, "b"), some(5, "vb"));
}

/// Expiry times as Redis TTLs (the keyspace is shared): relative up to 30
/// days, absolute Unix times above; touch and gat move them, 0 removes
/// them; append keeps the item's.
#[test]
fn expiry_times_are_redis_ttls() {
    let (server, port) = start_keel(&[]);
    let mut c = McClient::connect(port);
    let mut r = server.client();
    let ttl = |r: &mut Client, key: &str| match r.send(&["TTL", key]) {
        Frame::Integer(t) => t,
        other => panic!("TTL {key}: {other:?}"),
    };
    let near = |t: i64, want: i64| (want - 3..=want).contains(&t);
    assert_eq!(c.set("rel", 0, 100, "x"), "STORED");
    assert!(near(ttl(&mut r, "rel"), 100), "{}", ttl(&mut r, "rel"));
    assert_eq!(c.set("none", 0, 0, "x"), "STORED");
    assert_eq!(ttl(&mut r, "none"), -1);
    assert_eq!(c.set("abs", 0, now() + 1000, "x"), "STORED");
    assert!(near(ttl(&mut r, "abs"), 1000), "{}", ttl(&mut r, "abs"));
    assert_eq!(c.set("month", 0, 2_592_000, "x"), "STORED");
    assert!(near(ttl(&mut r, "month"), 2_592_000), "30 days is still relative: {}", ttl(&mut r, "month"));
    assert_eq!(c.set("past", 0, 2_592_001, "x"), "STORED");
    assert_eq!(ttl(&mut r, "past"), -2, "just over 30 days is a Unix time: 1970");
    assert_eq!(c.cmd("touch none 200"), "TOUCHED");
    assert!(near(ttl(&mut r, "none"), 200), "{}", ttl(&mut r, "none"));
    assert_eq!(c.retrieve("gat 0 none").len(), 1);
    assert_eq!(ttl(&mut r, "none"), -1, "gat 0 removes the expiry time");
    assert_eq!(c.retrieve("gats 300 rel").len(), 1);
    assert!(near(ttl(&mut r, "rel"), 300), "{}", ttl(&mut r, "rel"));
    assert_eq!(c.store("append rel 0 5", "y", ""), "STORED");
    assert!(near(ttl(&mut r, "rel"), 300), "append changed the expiry time: {}", ttl(&mut r, "rel"));
    assert_eq!(c.set("n", 0, 400, "1"), "STORED");
    assert_eq!(c.cmd("incr n 1"), "2");
    assert!(near(ttl(&mut r, "n"), 400), "incr changed the expiry time: {}", ttl(&mut r, "n"));
}

/// delete answers DELETED, then NOT_FOUND; memcached's old `delete key 0`
/// form is accepted, any other time refused with its usage line.
#[test]
fn delete_outcomes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    assert_eq!(c.cmd("delete a"), "DELETED");
    assert_eq!(c.get("a"), None);
    assert_eq!(c.cmd("delete a"), "NOT_FOUND");
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    assert_eq!(c.cmd("delete a 0"), "DELETED");
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    assert_eq!(c.cmd("delete a 1"), "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
    assert_eq!(c.cmd("delete a b c d e"), "ERROR");
    assert_eq!(c.cmd("delete"), "ERROR");
    assert_eq!(fv(&mut c, "a"), some(0, "x"));
}

/// incr/decr as memcached: unsigned 64-bit; incr wraps, decr stops at 0;
/// a shorter result is padded with spaces to the value's length, a longer
/// one grows it; a value is numeric if strtoull takes all of it but
/// whitespace (leading spaces, `+`, leading zeros and trailing spaces
/// allowed; `-`, other bytes, an empty value, an overflow not); a bad delta
/// is its own error; flags are kept.
#[test]
fn incr_and_decr_edge_cases() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("n", 7, 0, "100"), "STORED");
    assert_eq!(c.cmd("decr n 1"), "99");
    assert_eq!(fv(&mut c, "n"), some(7, "99 "));
    assert_eq!(c.cmd("incr n 1"), "100");
    assert_eq!(fv(&mut c, "n"), some(7, "100"));
    assert_eq!(c.cmd("decr n 200"), "0");
    assert_eq!(fv(&mut c, "n"), some(7, "0  "));
    assert_eq!(c.cmd("decr n 1"), "0", "decr stops at 0");
    assert_eq!(c.cmd("incr n 18446744073709551615"), "18446744073709551615");
    assert_eq!(fv(&mut c, "n"), some(7, "18446744073709551615"), "a longer result grows the value");
    assert_eq!(c.cmd("incr n 2"), "1", "incr wraps at 2^64");
    assert_eq!(fv(&mut c, "n"), some(7, &format!("1{}", " ".repeat(19))));
    assert_eq!(c.cmd("incr n 0"), "1", "a padded value is numeric");
    assert_eq!(c.set("x", 0, 0, "9"), "STORED");
    assert_eq!(c.cmd("incr x 1"), "10");
    assert_eq!(fv(&mut c, "x"), some(0, "10"));
    assert_eq!(c.cmd("incr missing 1"), "NOT_FOUND");
    assert_eq!(c.cmd("decr missing 1"), "NOT_FOUND");
    for delta in ["abc", "-1", "18446744073709551616", "1.5"] {
        assert_eq!(c.cmd(&format!("incr x {delta}")), "CLIENT_ERROR invalid numeric delta argument", "delta {delta}");
    }
    assert_eq!(c.cmd("incr x"), "ERROR");
    for (value, want, after) in [(" 12", "13", "13 "), ("12  ", "13", "13  "), ("+12", "13", "13 "), ("07", "8", "8 ")] {
        assert_eq!(c.set("v", 0, 0, value), "STORED");
        assert_eq!(c.cmd("incr v 1"), want, "incr of {value:?}");
        assert_eq!(fv(&mut c, "v"), some(0, after), "after incr of {value:?}");
    }
    for value in ["abc", "-5", "12ab", "", "184467440737095516150", "0x10"] {
        assert_eq!(c.set("v", 0, 0, value), "STORED");
        for verb in ["incr", "decr"] {
            assert_eq!(
                c.cmd(&format!("{verb} v 1")),
                "CLIENT_ERROR cannot increment or decrement non-numeric value",
                "{verb} of {value:?}"
            );
        }
        assert_eq!(fv(&mut c, "v"), some(0, value), "a failed incr left the value");
    }
}

/// touch answers TOUCHED or NOT_FOUND and keeps the value and flags; a
/// past time expires the item; a bad time is refused.
#[test]
fn touch_outcomes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 3, 0, "x"), "STORED");
    assert_eq!(c.cmd("touch a 100"), "TOUCHED");
    assert_eq!(fv(&mut c, "a"), some(3, "x"));
    assert_eq!(c.cmd("touch nope 100"), "NOT_FOUND");
    assert_eq!(c.cmd("touch a x"), "CLIENT_ERROR invalid exptime argument");
    assert_eq!(c.cmd("touch a"), "ERROR");
    assert_eq!(c.cmd("touch a -1"), "TOUCHED");
    assert_eq!(c.get("a"), None, "touch -1 expired it");
    assert_eq!(c.cmd("touch a 100"), "NOT_FOUND");
}

/// An item set with exptime 1 disappears within a second or two (polled,
/// no fixed sleep), while one set for longer stays; a negative exptime, or
/// an absolute time in the past, stores an item already gone (STORED, and
/// an add then finds the key free); an absolute time ahead keeps it.
#[test]
fn items_expire() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("short", 0, 1, "x"), "STORED");
    assert_eq!(c.set("long", 0, 100, "y"), "STORED");
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.get("short").is_some() {
        assert!(Instant::now() < deadline, "an item with exptime 1 still there after 5 s");
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fv(&mut c, "long"), some(0, "y"));
    assert_eq!(c.set("neg", 0, -1, "x"), "STORED");
    assert_eq!(c.get("neg"), None);
    assert_eq!(c.store("add neg 0 0", "z", ""), "STORED", "an expired item leaves its key free");
    assert_eq!(fv(&mut c, "neg"), some(0, "z"));
    assert_eq!(c.set("old", 0, 1_000_000_000, "x"), "STORED");
    assert_eq!(c.get("old"), None, "an absolute time in 2001");
    assert_eq!(c.set("ahead", 0, now() + 1000, "x"), "STORED");
    assert_eq!(fv(&mut c, "ahead"), some(0, "x"));
    assert_eq!(c.store("replace neg 0 -1", "gone", ""), "STORED");
    assert_eq!(c.get("neg"), None, "replace with a past time");
}

/// A `noreply` command sends nothing: each is followed by a plain command
/// whose reply must be the next thing read, and nothing is left over.
#[test]
fn noreply_commands_answer_nothing() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    // The command, the key read after it, and what that read must find.
    type Step<'a> = (Vec<u8>, &'a str, Option<(u32, &'a str)>);
    let steps: Vec<Step> = vec![
        (McClient::storage("set a 1 0", b"x", "noreply"), "a", Some((1, "x"))),
        (McClient::storage("add a 2 0", b"y", "noreply"), "a", Some((1, "x"))),
        (McClient::storage("add b 2 0", b"y", "noreply"), "b", Some((2, "y"))),
        (McClient::storage("replace b 3 0", b"z", "noreply"), "b", Some((3, "z"))),
        (McClient::storage("replace nope 3 0", b"z", "noreply"), "nope", None),
        (McClient::storage("append b 0 0", b"1", "noreply"), "b", Some((3, "z1"))),
        (McClient::storage("prepend b 0 0", b"0", "noreply"), "b", Some((3, "0z1"))),
        (McClient::storage("set n 0 0", b"10", "noreply"), "n", Some((0, "10"))),
        (b"incr n 5 noreply\r\n".to_vec(), "n", Some((0, "15"))),
        (b"decr n 3 noreply\r\n".to_vec(), "n", Some((0, "12"))),
        (b"touch n 100 noreply\r\n".to_vec(), "n", Some((0, "12"))),
        (b"delete n noreply\r\n".to_vec(), "n", None),
        (b"delete n noreply\r\n".to_vec(), "n", None),
        (b"verbosity 1 noreply\r\n".to_vec(), "a", Some((1, "x"))),
        (b"flush_all noreply\r\n".to_vec(), "a", None),
    ];
    for (bytes, key, want) in steps {
        c.write_raw(&bytes);
        let got = fv(&mut c, key);
        let want = want.map(|(f, v)| (f, v.to_string()));
        assert_eq!(got, want, "after {:?}", String::from_utf8_lossy(&bytes));
    }
    assert_eq!(c.set("c", 0, 0, "1"), "STORED");
    let cas = c.cas_of("c");
    c.write_raw(&McClient::storage("cas c 9 0", b"2", &format!("{cas} noreply")));
    c.write_raw(&McClient::storage("cas c 9 0", b"3", &format!("{cas} noreply")));
    assert_eq!(fv(&mut c, "c"), some(9, "2"), "a stored and a refused noreply cas");
    c.expect_silence(Duration::from_millis(200));
}

/// memcached 1.6 keeps quiet under `noreply` even when the command fails.
#[test]
fn noreply_silences_errors_too() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("s", 0, 0, "abc"), "STORED");
    c.write_raw(b"incr s 1 noreply\r\n");
    c.write_raw(b"incr s abc noreply\r\n");
    c.write_raw(b"touch s abc noreply\r\n");
    c.write_raw(b"incr nope 1 noreply\r\n");
    c.write_raw(&McClient::storage("cas s 0 0", b"x", "1 noreply"));
    c.write_raw(&McClient::storage("cas nope 0 0", b"x", "1 noreply"));
    assert_eq!(c.retrieve("get nope"), vec![]);
    c.expect_silence(Duration::from_millis(200));
}

/// flush_all (and `flush_all 0`) empties the cache at once; what is set
/// after it stays.
#[test]
fn flush_all_empties() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    assert_eq!(c.set("b", 0, 0, "y"), "STORED");
    assert_eq!(c.cmd("flush_all"), "OK");
    assert_eq!(c.retrieve("get a b"), vec![]);
    assert_eq!(c.set("a", 0, 0, "after"), "STORED");
    assert_eq!(fv(&mut c, "a"), some(0, "after"));
    assert_eq!(c.cmd("flush_all 0"), "OK");
    assert_eq!(c.get("a"), None);
    assert_eq!(c.cmd("flush_all x"), "CLIENT_ERROR invalid exptime argument");
}

/// flush_all with a delay leaves the cache as it is until then, then
/// empties it; what is stored after that stays. A later flush_all
/// replaces a pending one. (Polls, with memcached's second-grained clock
/// in mind: the delays are whole seconds.)
#[test]
fn a_delayed_flush_all_empties_the_cache_when_its_time_comes() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    assert_eq!(c.cmd("flush_all 100"), "OK");
    assert_eq!(c.cmd("flush_all 2"), "OK", "replaces the first");
    assert_eq!(fv(&mut c, "a"), some(0, "x"), "nothing goes before the time");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c.get("a").is_some() {
        assert!(std::time::Instant::now() < deadline, "the delayed flush never came");
        std::thread::sleep(Duration::from_millis(50));
    }
    // memcached's clock counts seconds: what is stored in the flush's own
    // second goes too, so the next item comes a second later.
    std::thread::sleep(Duration::from_millis(1_100));
    assert_eq!(c.set("b", 0, 0, "y"), "STORED");
    assert_eq!(fv(&mut c, "b"), some(0, "y"), "stored after the flush, kept");
    // An immediate flush_all cancels a pending one.
    assert_eq!(c.cmd("flush_all 1"), "OK");
    assert_eq!(c.cmd("flush_all"), "OK");
    assert_eq!(c.set("c", 0, 0, "z"), "STORED");
    std::thread::sleep(Duration::from_millis(2_100));
    assert_eq!(fv(&mut c, "c"), some(0, "z"));
}

/// version, verbosity and stats: stats lists pid, uptime, curr_connections,
/// cmd_get, cmd_set, get_hits, get_misses and curr_items, and the counters
/// move as memcached's: per key for retrievals, per command for storage.
#[test]
fn version_verbosity_and_stats() {
    let Some((server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    let version = c.cmd("version");
    assert!(version.starts_with("VERSION ") && version.len() > 8, "{version}");
    assert_eq!(c.cmd("verbosity 1"), "OK");
    assert_eq!(c.cmd("verbosity 0"), "OK");
    assert_eq!(c.cmd("verbosity"), "ERROR");
    let n = |stats: &HashMap<String, String>, name: &str| stats[name].parse::<u64>().expect("a number");
    // A connection counts once the server has taken it: poll.
    let _second = McClient::connect(port);
    let deadline = Instant::now() + Duration::from_secs(5);
    while n(&c.stats(), "curr_connections") < 2 {
        assert!(Instant::now() < deadline, "two connections open, curr_connections {}", c.stats()["curr_connections"]);
        thread::sleep(Duration::from_millis(10));
    }
    let before = c.stats();
    for name in ["pid", "uptime", "curr_connections", "cmd_get", "cmd_set", "get_hits", "get_misses", "curr_items"] {
        let value = before.get(name).unwrap_or_else(|| panic!("no STAT {name} in {before:?}"));
        assert!(value.parse::<u64>().is_ok(), "STAT {name} {value}");
    }
    assert_eq!(before["pid"], server.pid().to_string());
    assert_eq!(n(&before, "curr_items"), 0);
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    assert_eq!(c.set("b", 0, 0, "x"), "STORED");
    assert_eq!(c.store("add a 0 0", "x", ""), "NOT_STORED");
    assert_eq!(c.retrieve("get a nope b").len(), 2);
    assert_eq!(c.retrieve("gets nope").len(), 0);
    let after = c.stats();
    let delta = |name: &str| n(&after, name) - n(&before, name);
    assert_eq!(delta("cmd_set"), 3, "every storage command counts");
    assert_eq!(delta("cmd_get"), 4, "every key of a retrieval counts");
    assert_eq!(delta("get_hits"), 2);
    assert_eq!(delta("get_misses"), 2);
    assert_eq!(n(&after, "curr_items"), 2);
    assert_eq!(c.cmd("delete a"), "DELETED");
    assert_eq!(n(&c.stats(), "curr_items"), 1);
    assert_eq!(c.cmd("stats nonsense"), "ERROR");
}

/// The keyspace is Redis's database 0: a value set over RESP reads over
/// memcached with flags 0, an item set over memcached is a Redis string,
/// counters and deletes work across, and other databases are not seen.
#[test]
fn memcached_and_redis_share_database_0() {
    let (server, port) = start_keel(&[]);
    let mut c = McClient::connect(port);
    let mut r = server.client();
    assert_eq!(r.cmd("SET fromredis hello"), ok());
    assert_eq!(fv(&mut c, "fromredis"), some(0, "hello"));
    assert_eq!(c.set("frommc", 9, 0, "world"), "STORED");
    assert_eq!(r.cmd("GET frommc"), bulk("world"));
    assert_eq!(r.cmd("TYPE frommc"), common::simple("string"));
    assert_eq!(r.cmd("SET counter 10"), ok());
    assert_eq!(c.cmd("incr counter 5"), "15");
    assert_eq!(r.cmd("GET counter"), bulk("15"));
    assert_eq!(c.set("n", 0, 0, "5"), "STORED");
    assert_eq!(r.cmd("INCR n"), int(6));
    assert_eq!(fv(&mut c, "n"), some(0, "6"));
    assert_eq!(c.cmd("delete fromredis"), "DELETED");
    assert_eq!(r.cmd("EXISTS fromredis"), int(0));
    assert_eq!(r.cmd("DEL frommc"), int(1));
    assert_eq!(c.get("frommc"), None);
    assert_eq!(r.cmd("SELECT 1"), ok());
    assert_eq!(r.cmd("SET only1 x"), ok());
    assert_eq!(c.get("only1"), None, "database 1 is not memcached's");
    assert_eq!(c.set("only0", 0, 0, "y"), "STORED");
    assert_eq!(r.cmd("EXISTS only0"), int(0));
    assert_eq!(c.cmd("flush_all"), "OK");
    assert_eq!(r.cmd("EXISTS only1"), int(1), "flush_all flushed database 1");
}

/// A Redis write to a key drops its memcached flags (back to 0) and gives
/// it a new CAS value: a cas with the old one fails. A key written over
/// RESP gets a CAS value like any item; Redis reads change nothing.
#[test]
fn a_redis_write_resets_flags_and_cas() {
    let (server, port) = start_keel(&[]);
    let mut c = McClient::connect(port);
    let mut r = server.client();
    assert_eq!(c.set("k", 42, 0, "v"), "STORED");
    let before = c.cas_of("k");
    assert_eq!(r.cmd("APPEND k w"), int(2));
    let item = c.gets("k").expect("k");
    assert_eq!((item.flags, item.text()), (0, "vw".to_string()));
    assert_ne!(item.cas, Some(before), "a Redis APPEND kept the CAS value");
    assert_eq!(c.store("cas k 0 0", "x", &before.to_string()), "EXISTS");
    assert_eq!(c.set("k", 42, 0, "v"), "STORED");
    assert_eq!(r.cmd("SET k z"), ok());
    assert_eq!(fv(&mut c, "k"), some(0, "z"));
    assert_eq!(c.set("k", 42, 0, "1"), "STORED");
    assert_eq!(r.cmd("INCR k"), int(2));
    assert_eq!(fv(&mut c, "k"), some(0, "2"));
    assert_eq!(r.cmd("SET fresh v"), ok());
    assert_eq!(c.store("cas fresh 0 0", "x", "0"), "EXISTS", "a key written over RESP has no CAS value 0");
    let fresh = c.cas_of("fresh");
    assert_eq!(c.cas_of("fresh"), fresh, "the CAS value of a key written over RESP stays");
    assert_eq!(c.store("cas fresh 5 0", "x", &fresh.to_string()), "STORED");
    assert_eq!(fv(&mut c, "fresh"), some(5, "x"));
    assert_eq!(c.set("k", 42, 0, "v"), "STORED");
    let cas = c.cas_of("k");
    assert_eq!(r.cmd("GET k"), bulk("v"));
    assert_eq!(c.cas_of("k"), cas, "a Redis read changed the CAS value");
    assert_eq!(fv(&mut c, "k"), some(42, "v"), "a Redis read dropped the flags");
}

/// The admin commands Keel lacks (and memcached's debug command `me`)
/// answer a line starting CLIENT_ERROR (not ERROR, which says "unknown
/// command"), and the connection goes on. The meta commands have their
/// own tests (`memcache_meta.rs`).
#[test]
fn admin_commands_are_refused_with_client_error() {
    let (_server, port) = start_keel(&[]);
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    for line in ["me a", "lru_crawler metadump all", "slabs automove 1", "cache_memlimit 100", "lru mode flat", "watch"] {
        let reply = c.cmd(line);
        assert!(reply.starts_with("CLIENT_ERROR "), "`{line}`: {reply}");
        assert_eq!(fv(&mut c, "a"), some(0, "x"), "after `{line}`");
    }
}

/// Unknown commands and lines without enough tokens are ERROR (commands
/// are lowercase, as memcached's), and the connection goes on.
#[test]
fn unknown_commands_are_error() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    for line in ["foo", "", "   ", "GET a", "Set a 0 0 1", "get", "gets", "gat 10", "set a 0 0", "incr a", "cas a 0 0 1", "verbosity", "stats noreply"] {
        assert_eq!(c.cmd(line), if line == "gat 10" { "END" } else { "ERROR" }, "`{line}`");
    }
    assert_eq!(c.set("a", 0, 0, "x"), "STORED");
    c.write_raw(b"get a\n");
    assert_eq!(kv(&c.items()), pairs(&[("a", "x")]), "a bare \\n ends a line too");
    assert_eq!(kv(&c.retrieve("get  a   a ")), pairs(&[("a", "x"), ("a", "x")]), "runs of spaces");
}

/// A data block not followed by `\r\n` is "bad data chunk": memcached reads
/// exactly <bytes>+2 bytes, refuses them, and reads on from there (the
/// rest of the line is then a command line, here an empty one: ERROR); the
/// old value stays.
#[test]
fn a_bad_data_chunk() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 3, 0, "x"), "STORED");
    for bytes in [&b"set a 0 0 3\r\nabcde\r\n"[..], b"set a 0 0 3\r\nabcd\r\n", b"append a 0 0 2\r\nxyz\r\n"] {
        c.write_raw(bytes);
        c.write_raw(b"get a\r\n");
        let want = "CLIENT_ERROR bad data chunk\r\nERROR\r\nVALUE a 3 1\r\nx\r\nEND\r\n";
        let got = c.bytes(want.len());
        assert_eq!(String::from_utf8_lossy(&got), want, "after {:?}", String::from_utf8_lossy(bytes));
    }
    c.expect_silence(Duration::from_millis(100));
}

/// A value over the item size limit (1 MiB) is refused with memcached's
/// SERVER_ERROR, its data swallowed (not run as commands); a refused set
/// removes the old item, as memcached does so as not to leave stale data,
/// while a refused add or append leaves it.
#[test]
fn a_too_large_value_is_swallowed() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    let big = vec![b'x'; 2 << 20];
    for head in ["append a 0 0", "add a 0 0", "set a 0 0"] {
        assert_eq!(c.set("a", 1, 0, "old"), "STORED");
        c.write_raw(&McClient::storage(head, &big, ""));
        assert_eq!(c.line(), "SERVER_ERROR object too large for cache", "`{head}` of 2 MiB");
        let want = if head.starts_with("set") { None } else { some(1, "old") };
        assert_eq!(fv(&mut c, "a"), want, "after `{head}` of 2 MiB");
    }
    let mut data = b"get a\r\n".repeat(1000);
    data.resize(2 << 20, b'y');
    c.write_raw(&McClient::storage("set b 0 0", &data, ""));
    assert_eq!(c.line(), "SERVER_ERROR object too large for cache");
    assert_eq!(c.set("c", 0, 0, "fine"), "STORED", "the data was not run as commands");
    let under = vec![b'z'; 1000 << 10];
    c.write_raw(&McClient::storage("set d 0 0", &under, ""));
    assert_eq!(c.line(), "STORED", "1000 KiB fits");
    assert_eq!(c.get("d").expect("d").value, under);
}

/// Keys are up to 250 bytes: a longer one is "bad command line format",
/// and memcached then reads the data block as a command line (ERROR).
/// Malformed numbers are the same error.
#[test]
fn long_keys_and_malformed_numbers() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    let k250 = "k".repeat(250);
    let k251 = "k".repeat(251);
    assert_eq!(c.set(&k250, 0, 0, "x"), "STORED");
    assert_eq!(fv(&mut c, &k250), some(0, "x"));
    assert_eq!(c.cmd(&format!("get {k251}")), "CLIENT_ERROR bad command line format");
    assert_eq!(c.cmd(&format!("delete {k251}")), "CLIENT_ERROR bad command line format");
    assert_eq!(c.cmd(&format!("incr {k251} 1")), "CLIENT_ERROR bad command line format");
    assert_eq!(c.cmd(&format!("touch {k251} 1")), "CLIENT_ERROR bad command line format");
    for head in [format!("set {k251} 0 0"), "set a x 0".into(), "set a -1 0".into(), "set a 0 x".into()] {
        assert_eq!(c.store(&head, "x", ""), "CLIENT_ERROR bad command line format", "`{head}`");
        assert_eq!(c.line(), "ERROR", "the data line of `{head}`, read as a command");
    }
    assert_eq!(c.cmd("set a 0 0 -1"), "CLIENT_ERROR bad command line format");
    assert_eq!(c.cmd("set a 0 0 abc"), "CLIENT_ERROR bad command line format");
    assert_eq!(c.get("a"), None);
    assert_eq!(c.set("a", 0, 0, "fine"), "STORED");
}

/// Pipelined requests in one write are answered in order; a request split
/// across writes (line, then the data in pieces) is put back together.
#[test]
fn pipelined_and_split_requests() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    c.write_raw(b"set a 0 0 1\r\n1\r\nincr a 1\r\nget a\r\ndelete a\r\nget a\r\nversion\r\n");
    assert_eq!(c.line(), "STORED");
    assert_eq!(c.line(), "2");
    assert_eq!(kv(&c.items()), pairs(&[("a", "2")]));
    assert_eq!(c.line(), "DELETED");
    assert_eq!(c.items(), vec![]);
    assert!(c.line().starts_with("VERSION "));
    for piece in [&b"set b 5 0 "[..], b"11\r", b"\nhello", b" world", b"\r", b"\nget", b" b\r\n"] {
        c.write_raw(piece);
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.line(), "STORED");
    assert_eq!(kv(&c.items()), pairs(&[("b", "hello world")]));
}

/// quit closes the connection without a reply.
#[test]
fn quit_closes_the_connection() {
    let Some((_server, port)) = start() else { return };
    let mut c = McClient::connect(port);
    c.write_raw(b"quit\r\nversion\r\n");
    assert_eq!(c.read_to_close(), b"");
}

/// With four workers, a multi-key get over keys on every shard returns
/// every hit, in request order.
#[test]
fn a_multi_key_get_across_shards_returns_every_hit_in_order() {
    let (_server, port) = start_keel(&["--threads", "4"]);
    let mut c = McClient::connect(port);
    let keys: Vec<String> = (0..200).map(|i| format!("key:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        if i % 3 != 0 {
            assert_eq!(c.set(k, i as u32, 0, &format!("v{i}")), "STORED");
        }
    }
    let mut line = "get".to_string();
    for k in keys.iter().rev() {
        line.push(' ');
        line.push_str(k);
    }
    let items = c.retrieve(&line);
    let want: Vec<(String, u32, String)> =
        (0..200).rev().filter(|i| i % 3 != 0).map(|i| (format!("key:{i}"), i as u32, format!("v{i}"))).collect();
    let got: Vec<(String, u32, String)> = items.iter().map(|i| (i.key.clone(), i.flags, i.text())).collect();
    assert_eq!(got, want);
    let mut other = McClient::connect(port);
    assert_eq!(other.retrieve(&line).len(), want.len(), "another connection, maybe another worker");
}

const WRITERS: usize = 4;

/// What one memcached writer had acknowledged: sets of `w{id}:{0..sets}`,
/// the deletes of those with `i % 4 == 3` up to `deleted`, and its incrs.
struct Acked {
    sets: AtomicU64,
    deleted: AtomicU64,
    incrs: AtomicU64,
    incrs_sent: AtomicU64,
}

/// The flags writer `id` gives key `i`.
fn flags_of(id: usize, i: u64) -> u32 {
    (i as u32).wrapping_mul(2_654_435_761) ^ id as u32
}

fn mc_writer(port: u16, id: usize, first: u64, acked: Arc<Acked>, stop: Arc<AtomicBool>) {
    let mut c = McClient::connect(port);
    let mut i = first;
    while !stop.load(Ordering::Relaxed) {
        match c.try_set(&format!("w{id}:{i}"), flags_of(id, i), &format!("v{i}")) {
            Some(line) if line == "STORED" => acked.sets.store(i + 1, Ordering::SeqCst),
            _ => return,
        }
        if i % 4 == 3 {
            if !c.try_write(format!("delete w{id}:{i}\r\n").as_bytes()) {
                return;
            }
            match c.try_line() {
                Some(line) if line == "DELETED" => acked.deleted.store(i + 1, Ordering::SeqCst),
                _ => return,
            }
        }
        acked.incrs_sent.fetch_add(1, Ordering::SeqCst);
        if !c.try_write(format!("incr c{id} 1\r\n").as_bytes()) {
            return;
        }
        match c.try_line() {
            Some(line) if line.parse::<u64>().is_ok() => {
                acked.incrs.fetch_add(1, Ordering::SeqCst);
            }
            _ => return,
        }
        i += 1;
    }
}

/// Checks writer `id`'s keys below `sets`: each set acknowledged is there
/// with its value and flags, each delete acknowledged gone; a key whose
/// delete was sent but not acknowledged (in `uncertain`) may be either.
fn check_writer(c: &mut McClient, id: usize, sets: u64, uncertain: &[u64]) {
    let mut i = 0;
    while i < sets {
        let end = (i + 100).min(sets);
        let mut line = "get".to_string();
        for n in i..end {
            line.push_str(&format!(" w{id}:{n}"));
        }
        let items: HashMap<String, Item> = c.retrieve(&line).into_iter().map(|it| (it.key.clone(), it)).collect();
        for n in i..end {
            let key = format!("w{id}:{n}");
            let got = items.get(&key).map(|it| (it.flags, it.text()));
            let want = Some((flags_of(id, n), format!("v{n}")));
            if uncertain.contains(&n) {
                assert!(got.is_none() || got == want, "{key}: {got:?}");
            } else if n % 4 == 3 {
                assert_eq!(got, None, "acknowledged delete of {key} undone");
            } else {
                assert_eq!(got, want, "acknowledged set of {key} lost (or its flags)");
            }
        }
        i = end;
    }
}

/// Memcached writes go through the journal: under Keel's defaults
/// (`appendfsync always`) every STORED, DELETED and incr reply outlives a
/// `kill -9` at a random instant, flags included. Ten cycles of writers
/// on several connections, a kill, a restart on the same directory.
#[test]
fn kill_9_never_loses_an_acknowledged_memcached_write() {
    let dir = temp_dir("mc-crash");
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    let mut sets = [0u64; WRITERS];
    let mut deleted = [0u64; WRITERS];
    let mut uncertain: [Vec<u64>; WRITERS] = Default::default();
    let mut incrs = [0u64; WRITERS];
    let mut sent_incrs = [0u64; WRITERS];
    for cycle in 0..10 {
        let (server, port) = start_keel_in(&dir, &[]);
        let mut check = McClient::connect(port);
        for id in 0..WRITERS {
            check_writer(&mut check, id, sets[id], &uncertain[id]);
            let added = check.store(&format!("add c{id} 0 0"), "0", "");
            assert!(added == "STORED" || added == "NOT_STORED", "{added}");
            let n: u64 = check.cmd(&format!("incr c{id} 0")).parse().expect("a counter");
            assert!(n >= incrs[id], "cycle {cycle}: counter {id} = {n}, acknowledged {}", incrs[id]);
            assert!(n <= sent_incrs[id], "cycle {cycle}: counter {id} = {n}, only {} sent", sent_incrs[id]);
            incrs[id] = n;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Vec<Arc<Acked>> = (0..WRITERS)
            .map(|id| {
                Arc::new(Acked {
                    sets: AtomicU64::new(sets[id]),
                    deleted: AtomicU64::new(deleted[id]),
                    incrs: AtomicU64::new(0),
                    incrs_sent: AtomicU64::new(0),
                })
            })
            .collect();
        let handles: Vec<_> = (0..WRITERS)
            .map(|id| {
                let (a, s, first) = (acked[id].clone(), stop.clone(), sets[id]);
                thread::spawn(move || mc_writer(port, id, first, a, s))
            })
            .collect();
        thread::sleep(Duration::from_millis(rng.gen_range(50..300)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        for (id, a) in acked.iter().enumerate() {
            sets[id] = a.sets.load(Ordering::SeqCst);
            deleted[id] = a.deleted.load(Ordering::SeqCst);
            // The last key set needed a delete that was not acknowledged.
            if sets[id] % 4 == 0 && sets[id] > 0 && deleted[id] < sets[id] {
                uncertain[id].push(sets[id] - 1);
            }
            incrs[id] += a.incrs.load(Ordering::SeqCst);
            sent_incrs[id] += a.incrs_sent.load(Ordering::SeqCst);
        }
    }
    let (server, port) = start_keel_in(&dir, &[]);
    let mut check = McClient::connect(port);
    for id in 0..WRITERS {
        check_writer(&mut check, id, sets[id], &uncertain[id]);
    }
    assert!(sets.iter().sum::<u64>() > 0, "the writers never got an acknowledgement");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flags (and values, expiry times) survive a clean restart (SHUTDOWN over
/// RESP), a `kill -9` just after the reply, and an AOF rewrite.
#[test]
fn flags_survive_restarts() {
    let dir = temp_dir("mc-flags");
    let (server, port) = start_keel_in(&dir, &[]);
    let mut c = McClient::connect(port);
    assert_eq!(c.set("a", 123, 0, "x"), "STORED");
    assert_eq!(c.set("b", u32::MAX, 0, "y"), "STORED");
    assert_eq!(c.set("n", 77, 0, "5"), "STORED");
    assert_eq!(c.cmd("incr n 1"), "6");
    assert_eq!(c.store("append a 0 0", "z", ""), "STORED");
    assert_eq!(c.set("exp", 5, 1000, "e"), "STORED");
    assert_eq!(c.set("zero", 0, 0, "0"), "STORED");
    let mut r = server.client();
    r.write_command(&["SHUTDOWN"]);
    r.read_to_close();
    wait_exit(server);
    let want = |c: &mut McClient, after: &str| {
        assert_eq!(fv(c, "a"), some(123, "xz"), "after {after}");
        assert_eq!(fv(c, "b"), some(u32::MAX, "y"), "after {after}");
        assert_eq!(fv(c, "n"), some(77, "6"), "after {after}");
        assert_eq!(fv(c, "exp"), some(5, "e"), "after {after}");
        assert_eq!(fv(c, "zero"), some(0, "0"), "after {after}");
    };
    let (server, port) = start_keel_in(&dir, &[]);
    let mut c = McClient::connect(port);
    want(&mut c, "SHUTDOWN");
    assert!(matches!(server.client().send(&["TTL", "exp"]), Frame::Integer(t) if t > 900), "the expiry time survived");
    assert_eq!(c.set("c", 9, 0, "after"), "STORED");
    server.kill9();
    let (server, port) = start_keel_in(&dir, &[]);
    let mut c = McClient::connect(port);
    want(&mut c, "kill -9");
    assert_eq!(fv(&mut c, "c"), some(9, "after"), "flags of a set acknowledged just before kill -9");
    let mut r = server.client();
    let rewrites: u64 = r.info_field("persistence", "aof_rewrites").parse().unwrap_or(0);
    assert_eq!(r.cmd("BGREWRITEAOF"), common::simple("Background append only file rewriting started"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while r.info_field("persistence", "aof_rewrite_in_progress") != "0"
        || r.info_field("persistence", "aof_rewrite_scheduled") != "0"
        || r.info_field("persistence", "aof_rewrites").parse::<u64>().unwrap_or(0) <= rewrites
    {
        assert!(Instant::now() < deadline, "the rewrite never finished");
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(r.info_field("persistence", "aof_last_bgrewrite_status"), "ok");
    server.kill9();
    let (server, port) = start_keel_in(&dir, &[]);
    let mut c = McClient::connect(port);
    want(&mut c, "an AOF rewrite");
    assert_eq!(fv(&mut c, "c"), some(9, "after"), "flags after an AOF rewrite");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits for a server told to SHUTDOWN to exit.
fn wait_exit(mut server: Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.exit_status().is_none() {
        assert!(Instant::now() < deadline, "the server did not exit after SHUTDOWN");
        thread::sleep(Duration::from_millis(10));
    }
}

/// libmemcached's `memccapable -a` (its ASCII protocol conformance tests:
/// version, quit, verbosity, set/get/gets/multi-get, flush_all, add,
/// replace, cas, delete, incr, decr, append, prepend, each with noreply,
/// and stats) passes against Keel. Skipped when libmemcached-tools is not
/// installed.
#[test]
fn memccapable_ascii_passes() {
    let tool = std::path::Path::new("/usr/bin/memccapable");
    if !tool.exists() {
        eprintln!("memccapable not installed: skipping (scripts/test.sh installs libmemcached-tools)");
        return;
    }
    let Some((_server, port)) = start() else { return };
    let mut child = std::process::Command::new(tool)
        .args(["-a", "-t", "5", "-h", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run memccapable");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("memccapable") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("memccapable ran for two minutes");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    let _ = child.stdout.take().expect("stdout").read_to_string(&mut out);
    let _ = child.stderr.take().expect("stderr").read_to_string(&mut err);
    assert!(status.success() && out.contains("All tests passed"), "memccapable -a failed ({status}):\n{out}\n{err}");
    assert!(!out.contains("[fail]"), "{out}");
}

/// CONFIG SET memcached-port at run time, as `port` moves: when OK comes
/// back the protocol is served on the new port and the old one refuses,
/// connections made before go on, a port another process holds leaves
/// the listeners where they were with `port`'s error, 0 stops serving,
/// and `bind` moves them with the RESP ones.
#[test]
fn memcached_port_moves_at_run_time() {
    let listens = |port: u16| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    let server = Server::start(&[]);
    let mut r = server.client();
    assert_eq!(r.cmd("CONFIG GET memcached-port"), Frame::Array(vec![bulk("memcached-port"), bulk("0")]));
    let first = common::free_port();
    assert_eq!(r.send(&["CONFIG", "SET", "memcached-port", &first.to_string()]), ok());
    let mut before = McClient::connect(first);
    assert_eq!(before.set("k", 3, 0, "v"), "STORED");

    let second = common::free_port();
    assert_eq!(r.send(&["CONFIG", "SET", "memcached-port", &second.to_string()]), ok());
    assert!(!listens(first), "the old port still listens");
    assert_eq!(fv(&mut McClient::connect(second), "k"), some(3, "v"));
    assert_eq!(fv(&mut before, "k"), some(3, "v"), "a connection made before goes on");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("test setup");
    let taken = taken.local_addr().expect("test setup").port().to_string();
    assert_eq!(
        r.send(&["CONFIG", "SET", "memcached-port", &taken]),
        common::err("ERR CONFIG SET failed (possibly related to argument 'memcached-port') - Unable to listen on this port. Check server logs.")
    );
    assert_eq!(r.cmd("CONFIG GET memcached-port"), Frame::Array(vec![bulk("memcached-port"), bulk(&second.to_string())]));
    assert!(listens(second), "a refused move leaves the listeners where they were");

    assert_eq!(r.cmd("CONFIG SET bind 127.0.0.2"), ok());
    assert!(!listens(second), "bind moved the memcached listeners too");
    assert_eq!(r.cmd("CONFIG SET bind 127.0.0.1"), ok());
    assert!(listens(second));
    assert_eq!(r.cmd("CONFIG SET memcached-port 0"), ok());
    assert!(!listens(second), "memcached-port 0 serves none");
    assert_eq!(fv(&mut before, "k"), some(3, "v"));
}
