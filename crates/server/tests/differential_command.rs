//! Differential test of Keel's command table against Debian's
//! redis-server 7.0.15: for every command and subcommand Keel lists,
//! COMMAND INFO (arity, flags, key range, ACL categories, tips, key specs,
//! subcommands) and COMMAND DOCS (summary, since, group) must be Redis's,
//! and COMMAND GETKEYSANDFLAGS must give Redis's keys and per-key flags.
//! Commands Redis has and Keel lacks are out of scope; so are the DOCS
//! fields Keel does not give (complexity, arguments, history, doc_flags).
//!
//! Each check gathers every difference before failing, so that one run
//! lists all of them.

mod common;

use common::{Client, Frame, Server};

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

fn items(frame: &Frame) -> &[Frame] {
    match frame {
        Frame::Array(items) | Frame::Set(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

/// The words of an unordered reply (flags, categories, tips), sorted.
fn word_set(frame: &Frame) -> Vec<String> {
    let mut words: Vec<String> = items(frame).iter().map(text).collect();
    words.sort();
    words
}

/// Keel's COMMAND LIST: every command and subcommand, `parent|sub`.
fn keel_names(k: &mut Client) -> Vec<String> {
    let mut names: Vec<String> = items(&k.cmd("COMMAND LIST")).iter().map(text).collect();
    names.sort();
    names
}

/// The differences between two COMMAND INFO entries, field by field.
fn info_differences(redis: &[Frame], keel: &[Frame]) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, want: String, got: String| {
        if want != got {
            out.push(format!("{name}: redis {want} keel {got}"));
        }
    };
    field("arity", format!("{:?}", redis[1]), format!("{:?}", keel[1]));
    field("flags", format!("{:?}", word_set(&redis[2])), format!("{:?}", word_set(&keel[2])));
    field("first/last/step", format!("{:?}", &redis[3..6]), format!("{:?}", &keel[3..6]));
    field("acl categories", format!("{:?}", word_set(&redis[6])), format!("{:?}", word_set(&keel[6])));
    field("tips", format!("{:?}", word_set(&redis[7])), format!("{:?}", word_set(&keel[7])));
    field("key specs", format!("{:?}", redis[8]), format!("{:?}", keel[8]));
    // Redis's subcommands that Keel lacks are out of scope.
    let names = |f: &Frame| -> Vec<String> { items(f).iter().map(|s| text(&items(s)[0])).collect() };
    let (redis_subs, keel_subs) = (names(&redis[9]), names(&keel[9]));
    let extra: Vec<&String> = keel_subs.iter().filter(|s| !redis_subs.contains(s)).collect();
    if !extra.is_empty() {
        out.push(format!("subcommands Redis lacks: {extra:?}"));
    }
    out
}

#[test]
fn command_info_matches_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let mut differences = Vec::new();
    for name in keel_names(&mut k) {
        let want = r.send(&["COMMAND", "INFO", &name]);
        let got = k.send(&["COMMAND", "INFO", &name]);
        let (want, got) = (&items(&want)[0], &items(&got)[0]);
        if *want == Frame::Null {
            continue;
        }
        if *got == Frame::Null {
            differences.push(format!("{name}: missing from Keel's COMMAND INFO"));
            continue;
        }
        for d in info_differences(items(want), items(got)) {
            differences.push(format!("{name}: {d}"));
        }
    }
    assert!(differences.is_empty(), "COMMAND INFO differs from Redis's:\n{}", differences.join("\n"));
}

#[test]
fn command_docs_match_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let fields = |reply: Frame| -> Vec<(String, Frame)> {
        // RESP2: a flat [name, docs] array, docs a flat [field, value...].
        let docs = items(&reply).get(1).cloned().unwrap_or(Frame::Null);
        if docs == Frame::Null {
            return Vec::new();
        }
        items(&docs).chunks(2).map(|kv| (text(&kv[0]), kv[1].clone())).collect()
    };
    let mut differences = Vec::new();
    for name in keel_names(&mut k) {
        let want = fields(r.send(&["COMMAND", "DOCS", &name]));
        if want.is_empty() {
            continue;
        }
        let got = fields(k.send(&["COMMAND", "DOCS", &name]));
        for (field, value) in &got {
            // Subcommands are compared under their own names.
            if field == "subcommands" {
                continue;
            }
            match want.iter().find(|(f, _)| f == field) {
                Some((_, v)) if v == value => {}
                Some((_, v)) => differences.push(format!("{name}: {field}: redis {v:?} keel {value:?}")),
                None => differences.push(format!("{name}: {field}: Redis has no such field")),
            }
        }
        for field in ["summary", "since", "group"] {
            if want.iter().any(|(f, _)| f == field) && !got.iter().any(|(f, _)| f == field) {
                differences.push(format!("{name}: {field}: missing from Keel's COMMAND DOCS"));
            }
        }
    }
    assert!(differences.is_empty(), "COMMAND DOCS differs from Redis's:\n{}", differences.join("\n"));
}

/// COMMAND COUNT counts the top-level commands COMMAND and COMMAND LIST
/// give, each of which Redis has too.
#[test]
fn command_count_agrees_with_the_lists() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let top_level: Vec<String> = keel_names(&mut k).into_iter().filter(|n| !n.contains('|')).collect();
    assert_eq!(k.cmd("COMMAND COUNT"), Frame::Integer(top_level.len() as i64));
    assert_eq!(items(&k.cmd("COMMAND")).len(), top_level.len());
    let redis_names: Vec<String> = items(&r.cmd("COMMAND LIST")).iter().map(text).collect();
    let unknown: Vec<&String> = top_level.iter().filter(|n| !redis_names.contains(n)).collect();
    assert!(unknown.is_empty(), "commands Redis does not have: {unknown:?}");
}

#[test]
fn getkeysandflags_matches_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let lines = [
        "GET k",
        "SET k v",
        "SET k v EX 10 GET",
        "GETEX k PERSIST",
        "MSET a 1 b 2 c 3",
        "MSETNX a 1 b 2",
        "DEL a b c",
        "EXISTS a b",
        "RENAME a b",
        "COPY a b REPLACE",
        "LMOVE a b LEFT RIGHT",
        "BLPOP a b 0",
        "LMPOP 2 a b LEFT COUNT 2",
        "BLMPOP 0 2 a b LEFT",
        "BZMPOP 0 1 a MIN",
        "SINTERCARD 2 a b LIMIT 1",
        "SDIFFSTORE d a b",
        "ZUNIONSTORE d 2 a b WEIGHTS 1 2",
        "ZUNION 2 a b WITHSCORES",
        "ZRANGESTORE d s 0 -1",
        "BITOP AND d a b",
        "BITFIELD k GET u8 0 OVERFLOW SAT",
        "BITFIELD k GET u8 0 SET u8 0 1",
        "BITFIELD k INCRBY u8",
        "BITFIELD_RO k GET u8 0",
        "SORT a BY w:* GET o:* STORE b",
        "SORT a LIMIT 0 1",
        "SORT_RO a BY w:*",
        "MEMORY USAGE k",
        "OBJECT ENCODING k",
        "WATCH a b",
        "PING",
        "ZUNION 3 a b",
        "EVAL s 0",
        "EVAL s 2 a b",
        "FCALL_RO f 0",
    ];
    let mut differences = Vec::new();
    for line in lines {
        for sub in ["GETKEYSANDFLAGS", "GETKEYS"] {
            let argv: Vec<&str> = ["COMMAND", sub].into_iter().chain(line.split(' ')).collect();
            let (want, got) = (r.send(&argv), k.send(&argv));
            if want != got {
                differences.push(format!("COMMAND {sub} {line}:\n  redis {want:?}\n  keel  {got:?}"));
            }
        }
    }
    assert!(differences.is_empty(), "COMMAND GETKEYS(ANDFLAGS) differs from Redis's:\n{}", differences.join("\n"));
}
