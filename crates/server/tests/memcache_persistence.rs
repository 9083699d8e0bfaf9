//! Memcached flags through every way Keel persists and reloads a key: the
//! journal's incr files (`kill -9` just after the reply), an AOF rewrite's
//! base in both formats, dump.rdb (SAVE and BGSAVE with `appendonly no`)
//! and DEBUG RELOAD. A Redis write to a memcached key resets its flags to
//! 0, and that survives too.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use common::memcache::{start_keel_in, McClient};
use common::{ok, simple, temp_dir, Client, Frame};

const T: Duration = Duration::from_secs(30);

/// (flags, value) of `key` over memcached, None if absent.
fn fv(c: &mut McClient, key: &str) -> Option<(u32, String)> {
    c.get(key).map(|item| (item.flags, item.text()))
}

fn some(flags: u32, value: &str) -> Option<(u32, String)> {
    Some((flags, value.to_string()))
}

/// Writes the keys `check` expects: flags small and large, with an expiry
/// time, zero, after an append, and keys whose flags a Redis write reset.
fn populate(c: &mut McClient, r: &mut Client) {
    assert_eq!(c.set("k", 42, 0, "abc"), "STORED");
    assert_eq!(c.set("max", u32::MAX, 0, "m"), "STORED");
    assert_eq!(c.set("ttl", 7, 1000, "t"), "STORED");
    assert_eq!(c.set("zero", 0, 0, "z"), "STORED");
    assert_eq!(c.set("app", 11, 0, "a"), "STORED");
    assert_eq!(c.store("append app 0 0", "b", ""), "STORED");
    assert_eq!(c.set("reset", 5, 0, "old"), "STORED");
    assert_eq!(r.send(&["SET", "reset", "new"]), ok());
    assert_eq!(c.set("reset-ttl", 6, 0, "v"), "STORED");
    assert_eq!(r.send(&["EXPIRE", "reset-ttl", "1000"]), Frame::Integer(1));
    assert_eq!(r.send(&["SET", "plain", "redis"]), ok());
    check(c, r, "written");
}

/// What `populate` wrote, as it should read back after any reload.
fn check(c: &mut McClient, r: &mut Client, after: &str) {
    let want: BTreeMap<&str, Option<(u32, String)>> = [
        ("k", some(42, "abc")),
        ("max", some(u32::MAX, "m")),
        ("ttl", some(7, "t")),
        ("zero", some(0, "z")),
        ("app", some(11, "ab")),
        ("reset", some(0, "new")),
        ("reset-ttl", some(0, "v")),
        ("plain", some(0, "redis")),
    ]
    .into_iter()
    .collect();
    let got: BTreeMap<&str, Option<(u32, String)>> = want.keys().map(|k| (*k, fv(c, k))).collect();
    assert_eq!(got, want, "{after}");
    for key in ["ttl", "reset-ttl"] {
        assert!(matches!(r.send(&["TTL", key]), Frame::Integer(t) if (900..=1000).contains(&t)), "{after}: TTL of {key}");
    }
}

/// Waits until a rewrite started after `before` rewrites has finished, and
/// requires it to have succeeded.
fn wait_rewrite(r: &mut Client, before: u64) {
    let deadline = Instant::now() + T;
    while r.info_field("persistence", "aof_rewrite_in_progress") != "0"
        || r.info_field("persistence", "aof_rewrite_scheduled") != "0"
        || r.info_field("persistence", "aof_rewrites").parse::<u64>().unwrap_or(0) <= before
    {
        assert!(Instant::now() < deadline, "the rewrite never finished");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.info_field("persistence", "aof_last_bgrewrite_status"), "ok");
}

fn aof_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The flags each key of `path` (an RDB file) carries, 0 for none.
fn rdb_flags(path: &Path) -> BTreeMap<String, u32> {
    let reader = keel_rdb::RdbReader::new(std::io::BufReader::new(std::fs::File::open(path).expect("rdb"))).expect("rdb header");
    reader
        .filter_map(|item| match item.expect("rdb item") {
            keel_rdb::RdbItem::Entry(e) => Some((String::from_utf8_lossy(&e.key).into_owned(), e.item_flags.unwrap_or(0))),
            _ => None,
        })
        .collect()
}

/// The flags of `populate`'s keys as a snapshot of them holds them.
fn snapshot_flags() -> BTreeMap<String, u32> {
    [("k", 42), ("max", u32::MAX), ("ttl", 7), ("zero", 0), ("app", 11), ("reset", 0), ("reset-ttl", 0), ("plain", 0)]
        .into_iter()
        .map(|(k, f)| (k.to_string(), f))
        .collect()
}

/// (a) The incr file alone: each memcached write is followed by its flags.
#[test]
fn flags_survive_kill_9_through_the_journal() {
    let dir = temp_dir("mcp-journal");
    let (server, port) = start_keel_in(&dir, &[]);
    let (mut c, mut r) = (McClient::connect(port), server.client());
    populate(&mut c, &mut r);
    server.kill9();
    let (server, port) = start_keel_in(&dir, &[]);
    check(&mut McClient::connect(port), &mut server.client(), "kill -9 and restart");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (b) BGREWRITEAOF, then `kill -9`: the base holds the flags, as an RDB
/// (the `keel-item-flags` aux field) or as commands (an `#item-flags`
/// annotation after the key's last command, its PEXPIREAT included).
/// Writes after the rewrite come from the new incr file.
#[test]
fn flags_survive_an_aof_rewrite_in_both_base_formats() {
    for preamble in ["yes", "no"] {
        let dir = temp_dir("mcp-rewrite");
        let args = ["--aof-use-rdb-preamble", preamble];
        let (server, port) = start_keel_in(&dir, &args);
        let (mut c, mut r) = (McClient::connect(port), server.client());
        populate(&mut c, &mut r);
        let before = r.info_field("persistence", "aof_rewrites").parse().unwrap_or(0);
        assert_eq!(r.send(&["BGREWRITEAOF"]), simple("Background append only file rewriting started"));
        wait_rewrite(&mut r, before);
        assert_eq!(c.set("after", 9, 0, "later"), "STORED");
        server.kill9();

        let ext = if preamble == "yes" { "rdb" } else { "aof" };
        let files = aof_files(&dir);
        let base = files.iter().find(|f| f.ends_with(&format!(".base.{ext}"))).unwrap_or_else(|| panic!("no {ext} base: {files:?}"));
        let base = dir.join("appendonlydir").join(base);
        if preamble == "yes" {
            assert_eq!(rdb_flags(&base), snapshot_flags());
        } else {
            let text = String::from_utf8_lossy(&std::fs::read(&base).expect("base")).into_owned();
            for flags in ["#item-flags:42\r\n", "#item-flags:4294967295\r\n", "#item-flags:7\r\n", "#item-flags:11\r\n"] {
                assert!(text.contains(flags), "{flags:?} missing from the base:\n{text}");
            }
            assert!(!text.contains("#item-flags:0") && !text.contains("#item-flags:5") && !text.contains("#item-flags:6"), "{text}");
            // After the key's PEXPIREAT, which would reset them on replay.
            let ttl = text.find("PEXPIREAT\r\n$3\r\nttl").expect("PEXPIREAT ttl");
            assert!(text[ttl..].find("#item-flags:7").is_some_and(|at| !text[ttl..ttl + at].contains("*3\r\n$3\r\nSET")), "{text}");
        }

        let (server, port) = start_keel_in(&dir, &args);
        let (mut c, mut r) = (McClient::connect(port), server.client());
        check(&mut c, &mut r, &format!("rewrite with aof-use-rdb-preamble {preamble}"));
        assert_eq!(fv(&mut c, "after"), some(9, "later"), "preamble {preamble}: a write after the rewrite");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// (c) dump.rdb with `appendonly no`: written by SAVE, then by BGSAVE, each
/// loaded by a restart.
#[test]
fn flags_survive_save_and_bgsave_to_dump_rdb() {
    let dir = temp_dir("mcp-dump");
    let args = ["--appendonly", "no", "--save", ""];
    let (server, port) = start_keel_in(&dir, &args);
    let (mut c, mut r) = (McClient::connect(port), server.client());
    populate(&mut c, &mut r);
    assert_eq!(r.send(&["SAVE"]), ok());
    assert_eq!(rdb_flags(&dir.join("dump.rdb")), snapshot_flags());
    server.kill9();

    let (server, port) = start_keel_in(&dir, &args);
    let (mut c, mut r) = (McClient::connect(port), server.client());
    check(&mut c, &mut r, "SAVE and restart");
    // A second generation, by BGSAVE, from what the first load restored.
    assert_eq!(c.set("bg", 3, 0, "b"), "STORED");
    assert_eq!(r.send(&["BGSAVE"]), simple("Background saving started"));
    let deadline = Instant::now() + T;
    while r.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "the BGSAVE never finished");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.info_field("persistence", "rdb_last_bgsave_status"), "ok");
    server.kill9();

    let (server, port) = start_keel_in(&dir, &args);
    let (mut c, mut r) = (McClient::connect(port), server.client());
    check(&mut c, &mut r, "BGSAVE and restart");
    assert_eq!(fv(&mut c, "bg"), some(3, "b"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// (d) DEBUG RELOAD saves the dump and loads it back in place.
#[test]
fn flags_survive_debug_reload() {
    let dir = temp_dir("mcp-reload");
    let (server, port) = start_keel_in(&dir, &["--enable-debug-command", "yes"]);
    let (mut c, mut r) = (McClient::connect(port), server.client());
    populate(&mut c, &mut r);
    assert_eq!(r.send(&["DEBUG", "RELOAD"]), ok());
    check(&mut c, &mut r, "DEBUG RELOAD");
    // A Redis write after the reload resets what the reload restored.
    assert_eq!(r.send(&["APPEND", "k", "d"]), Frame::Integer(4));
    assert_eq!(fv(&mut c, "k"), some(0, "abcd"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without its flags a RESTOREd key has none, even over a key that had.
#[test]
fn restore_brings_no_flags() {
    let dir = temp_dir("mcp-restore");
    let (server, port) = start_keel_in(&dir, &[]);
    let (mut c, mut r) = (McClient::connect(port), server.client());
    assert_eq!(c.set("k", 42, 0, "abc"), "STORED");
    let Frame::Bulk(payload) = r.send(&["DUMP", "k"]) else { panic!("DUMP") };
    assert_eq!(r.send(&[&b"RESTORE"[..], b"copy", b"0", payload.as_slice()]), ok());
    assert_eq!(r.send(&[&b"RESTORE"[..], b"k", b"0", payload.as_slice(), b"REPLACE"]), ok());
    assert_eq!(fv(&mut c, "copy"), some(0, "abc"));
    assert_eq!(fv(&mut c, "k"), some(0, "abc"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
