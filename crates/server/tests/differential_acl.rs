//! Differential test of the ACL against Debian's redis-server 7.0.15: ACL
//! SETUSER (good rules and bad, with Redis's errors), GETUSER, LIST, CAT,
//! DRYRUN and WHOAMI, then the NOPERM and WRONGPASS replies of users'
//! connections and the ACL LOG they leave, go to both servers, and every
//! reply must be the same. Masked or normalised where Redis itself is not
//! repeatable: ACL LOG's age and client-info, GENPASS's random digits, the
//! order of single commands in a rule description (Redis walks its command
//! table, a hash table with a random seed), and ACL CAT of a category
//! (Keel's commands only: Redis has more, cluster and streams among them).

mod common;

use common::{Client, Frame, Server};

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

/// A rule description with the words of each part (outside and inside
/// each selector's parentheses) sorted: `+@all -get -set` and `+@all
/// -set -get` are one.
fn sorted_words(s: &[u8]) -> Vec<u8> {
    let s = String::from_utf8_lossy(s).replace('(', "( ").replace(')', " )");
    let mut parts: Vec<Vec<&str>> = vec![Vec::new()];
    for word in s.split(' ').filter(|w| !w.is_empty()) {
        match word {
            "(" => parts.push(vec!["("]),
            ")" => {
                parts.last_mut().expect("a part").push(")");
                parts.push(Vec::new());
            }
            _ => parts.last_mut().expect("a part").push(word),
        }
    }
    for part in &mut parts {
        part.sort_unstable();
    }
    parts.concat().join(" ").into_bytes()
}

/// Every bulk string of a reply, rule words sorted.
fn normalize_rules(frame: Frame) -> Frame {
    match frame {
        Frame::Bulk(b) => Frame::Bulk(sorted_words(&b)),
        Frame::Array(items) => Frame::Array(items.into_iter().map(normalize_rules).collect()),
        Frame::Set(items) => Frame::Set(items.into_iter().map(normalize_rules).collect()),
        Frame::Map(pairs) => Frame::Map(pairs.into_iter().map(|(k, v)| (k, normalize_rules(v))).collect()),
        other => other,
    }
}

/// ACL LOG entries with `age-seconds` and `client-info` masked.
fn mask_log(frame: Frame) -> Frame {
    let mask = |items: Vec<Frame>| -> Vec<Frame> {
        let mut out = Vec::new();
        let mut masked = false;
        for item in items {
            if masked {
                out.push(Frame::Null);
                masked = false;
                continue;
            }
            masked = matches!(&item, Frame::Bulk(b) if b == b"age-seconds" || b == b"client-info");
            out.push(item);
        }
        out
    };
    match frame {
        Frame::Array(entries) => Frame::Array(
            entries
                .into_iter()
                .map(|e| match e {
                    Frame::Array(items) => Frame::Array(mask(items)),
                    other => other,
                })
                .collect(),
        ),
        other => other,
    }
}

struct Pair {
    redis: Client,
    keel: Client,
}

impl Pair {
    fn send(&mut self, line: &str) -> (Frame, Frame) {
        let argv = split(line);
        (self.redis.send(&argv), self.keel.send(&argv))
    }

    /// Sends `line` to both and asserts the replies agree after `normalize`.
    fn same_by(&mut self, line: &str, normalize: fn(Frame) -> Frame) {
        let (redis, keel) = self.send(line);
        let (redis, keel) = (normalize(redis), normalize(keel));
        assert_eq!(common::readable(&format!("{keel:?}")), common::readable(&format!("{redis:?}")), "{line}");
    }

    fn same(&mut self, line: &str) {
        self.same_by(line, |f| f);
    }
}

/// Words split on spaces, with "double quoted" words kept whole.
fn split(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').expect("closing quote");
            words.push(quoted[..end].to_string());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            words.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    words
}

fn servers() -> Option<(Server, Server)> {
    let redis = Server::start_redis(&[])?;
    let keel = Server::start(&["--appendonly", "no"]);
    Some((redis, keel))
}

const RULES: &[&str] = &[
    "ACL SETUSER u1",
    "ACL SETUSER u2 on >pass nopass",
    "ACL SETUSER u3 on >a >b <a #2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
    "ACL SETUSER u4 +@all -debug -flushall",
    "ACL SETUSER u5 -@all +get +set +select|0 +select|1",
    "ACL SETUSER u6 +@hyperloglog +@string -append",
    "ACL SETUSER u7 +@all -@list -@hash",
    "ACL SETUSER u8 +@set +@sortedset +@geo +@bitmap",
    "ACL SETUSER u9 +config|get +client|id +client|setname",
    "ACL SETUSER u10 ~a* %R~r* %W~w* %RW~rw* %R~a* &ch1 &ch2",
    "ACL SETUSER u11 allkeys allchannels allcommands",
    "ACL SETUSER u12 reset on",
    "ACL SETUSER u13 (~x* +get) (%R~y* +@read +@write)",
    "ACL SETUSER u13 clearselectors",
    "ACL SETUSER u14 skip-sanitize-payload sanitize-payload",
    "ACL SETUSER u15 \"(~x* +get\" \"+set)\"",
    "ACL SETUSER u16 +@all -@all +ping nocommands +echo",
    "ACL SETUSER u17 +config -config|set",
    "ACL SETUSER u18 +select +select|0",
    "ACL SETUSER u19 +select|0 +select",
    "ACL SETUSER u2 resetpass",
    // Refused, with Redis's errors; nothing changes.
    "ACL SETUSER bad1 +nosuchcommand",
    "ACL SETUSER bad2 +@nosuchcategory",
    "ACL SETUSER bad3 bogus",
    "ACL SETUSER bad4 ~* ~foo",
    "ACL SETUSER bad5 &* &foo",
    "ACL SETUSER bad6 <notapassword",
    "ACL SETUSER bad7 #tooshort",
    "ACL SETUSER bad8 +config|get|x",
    "ACL SETUSER bad9 +select|",
    "ACL SETUSER bad10 -select|0",
    "ACL SETUSER bad11 (",
    "ACL SETUSER bad12 )",
    "ACL SETUSER bad13 (on)",
    "ACL SETUSER bad14 \" () \"",
    "ACL SETUSER bad15 %X~foo",
    "ACL SETUSER \"bad 16\" on",
    "ACL SETUSER u1 on +get nosuchrule",
];

#[test]
fn setuser_getuser_and_list_agree() {
    let Some((redis, keel)) = servers() else { return };
    let mut p = Pair { redis: redis.client(), keel: keel.client() };
    for line in RULES {
        p.same(line);
    }
    let names: Vec<String> = (1..=19).map(|i| format!("u{i}")).chain(["bad1".into(), "default".into()]).collect();
    for name in &names {
        p.same_by(&format!("ACL GETUSER {name}"), normalize_rules);
    }
    p.same_by("ACL LIST", normalize_rules);
    p.same("ACL USERS");
    p.same("ACL WHOAMI");
    p.same("ACL DELUSER u1 u2 nosuch");
    p.same("ACL DELUSER default");
    p.same("ACL USERS");
    // RESP3: flags are a set, the user a map.
    p.send("HELLO 3");
    p.same_by("ACL GETUSER u13", normalize_rules);
    p.same_by("ACL GETUSER u10", normalize_rules);
}

#[test]
fn dryrun_cat_and_the_rest_agree() {
    let Some((redis, keel)) = servers() else { return };
    let mut p = Pair { redis: redis.client(), keel: keel.client() };
    p.same("ACL SETUSER d on nopass ~k* %R~r* &ch* +get +set +publish +subscribe +psubscribe +copy +client|id");
    for line in [
        "ACL DRYRUN d GET k1",
        "ACL DRYRUN d GET x1",
        "ACL DRYRUN d SET r1 v",
        "ACL DRYRUN d GET r1",
        "ACL DRYRUN d COPY r1 k2",
        "ACL DRYRUN d COPY k1 r2",
        "ACL DRYRUN d DEL k1",
        "ACL DRYRUN d PUBLISH ch1 m",
        "ACL DRYRUN d PUBLISH other m",
        "ACL DRYRUN d SUBSCRIBE ch1 other",
        "ACL DRYRUN d PSUBSCRIBE ch*",
        "ACL DRYRUN d PSUBSCRIBE ch1*",
        "ACL DRYRUN d CLIENT ID",
        "ACL DRYRUN d CLIENT LIST",
        "ACL DRYRUN d CLIENT nosuch",
        "ACL DRYRUN d GET",
        "ACL DRYRUN d nosuch",
        "ACL DRYRUN nobody GET k",
        "ACL CAT",
        "ACL CAT nosuch",
        "ACL GENPASS 0",
        "ACL GENPASS 4097",
        "ACL GENPASS x",
        "ACL LOG x",
        "ACL LOG 0",
        "ACL NOSUCH",
        "ACL LOAD",
        "ACL SAVE",
        "ACL GETUSER",
        "ACL HELP",
        "AUTH onlypass",
    ] {
        p.same(line);
    }
    // GENPASS: the length only.
    for bits in ["", " 1", " 5", " 64", " 4096"] {
        let (redis, keel) = p.send(&format!("ACL GENPASS{bits}"));
        assert_eq!(text(&keel).len(), text(&redis).len(), "GENPASS{bits}");
    }
    // Each category: Keel's commands in it are Redis's.
    let Frame::Array(cats) = p.send("ACL CAT").1 else { panic!("categories") };
    // Keel's commands and subcommands, from COMMAND's entries.
    let Frame::Array(entries) = p.keel.cmd("COMMAND") else { panic!("COMMAND") };
    let mut ours: Vec<String> = Vec::new();
    for entry in &entries {
        let Frame::Array(fields) = entry else { panic!("{entry:?}") };
        ours.push(text(&fields[0]));
        if let Frame::Array(subs) = &fields[9] {
            for sub in subs {
                let Frame::Array(sub_fields) = sub else { panic!("{sub:?}") };
                ours.push(text(&sub_fields[0]));
            }
        }
    }
    for cat in cats {
        let cat = text(&cat);
        let (redis, keel) = p.send(&format!("ACL CAT {cat}"));
        let sorted = |f: &Frame| -> Vec<String> {
            let Frame::Array(items) = f else { panic!("{f:?}") };
            let mut names: Vec<String> = items.iter().map(text).collect();
            names.sort();
            names
        };
        let redis: Vec<String> = sorted(&redis).into_iter().filter(|n| ours.contains(n)).collect();
        assert_eq!(sorted(&keel), redis, "ACL CAT {cat}");
    }
}

#[test]
fn noperm_wrongpass_and_the_log_agree() {
    let Some((redis, keel)) = servers() else { return };
    let mut admin = Pair { redis: redis.client(), keel: keel.client() };
    admin.same("ACL SETUSER n on >pw ~k* &ch +get +set +publish +subscribe +multi +exec +eval +client|id");
    let mut user = Pair { redis: redis.client(), keel: keel.client() };
    for line in [
        "AUTH n wrong",
        "AUTH nobody pw",
        "HELLO 2 AUTH n wrong",
        "AUTH n pw",
        "ACL WHOAMI",
        "GET k1",
        "GET x1",
        "SET x1 v",
        "DEL k1",
        "CLIENT LIST",
        "PUBLISH ch m",
        "PUBLISH other m",
        "MULTI",
        "GET k1",
        "GET x2",
        "DEL k1",
        "EXEC",
        "EVAL \"return redis.call('get', 'x3')\" 0",
        "EVAL \"return redis.call('del', 'k1')\" 0",
        "EVAL \"return redis.acl_check_cmd('get', 'k1')\" 0",
        "EVAL \"return redis.acl_check_cmd('get', 'x1')\" 0",
        "EVAL \"return redis.acl_check_cmd('nosuch')\" 0",
    ] {
        user.same(line);
    }
    admin.same_by("ACL LOG", mask_log);
    admin.same_by("ACL LOG 2", mask_log);
    admin.same("ACL LOG RESET");
    admin.same("ACL LOG");
    // requirepass is the default user's password.
    admin.same("CONFIG SET requirepass sesame");
    admin.same_by("ACL GETUSER default", normalize_rules);
    let mut fresh = Pair { redis: redis.client(), keel: keel.client() };
    fresh.same("GET k");
    fresh.same("AUTH wrong");
    fresh.same("AUTH sesame");
    fresh.same("GET k");
    admin.same("CONFIG GET requirepass");
    admin.same("CONFIG SET requirepass \"\"");
    admin.same_by("ACL GETUSER default", normalize_rules);
}
