//! Black-box tests of the list commands over a real socket: replies and
//! error texts, WRONGTYPE, deletion of emptied keys, RESP3 shapes, node
//! sizes, WATCH, the journal (LMPOP logged as the pop it made) and
//! persistence across a restart; scripted comparisons with Debian's
//! redis-server 7.0.15 where it is installed.

mod common;

use common::{bulk, err, int, ok, temp_dir, Client, Frame, Server};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn keel() -> (Server, Client) {
    let server = Server::start(&[]);
    let client = server.client();
    (server, client)
}

fn bulks(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

fn ints(items: &[i64]) -> Frame {
    Frame::Array(items.iter().map(|&i| int(i)).collect())
}

/// Sends each command to redis-server and to Keel on one connection each
/// and requires the same replies.
fn same_as_redis(lines: &[&str]) {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    for line in lines {
        let argv: Vec<&str> = line.split(' ').collect();
        let (want, got) = (r.send(&argv), k.send(&argv));
        assert_eq!(want, got, "reply differs for {line}");
    }
}

#[test]
fn push_pop_and_read() {
    let (_s, mut c) = keel();
    assert_eq!(c.cmd("RPUSH l b c"), int(2));
    assert_eq!(c.cmd("LPUSH l a z"), int(4));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["z", "a", "b", "c"]));
    assert_eq!(c.cmd("LLEN l"), int(4));
    assert_eq!(c.cmd("LINDEX l 0"), bulk("z"));
    assert_eq!(c.cmd("LINDEX l -1"), bulk("c"));
    assert_eq!(c.cmd("LINDEX l 4"), Frame::Null);
    assert_eq!(c.cmd("LPOP l"), bulk("z"));
    assert_eq!(c.cmd("RPOP l"), bulk("c"));
    assert_eq!(c.cmd("RPUSH l c d e"), int(5));
    assert_eq!(c.cmd("RPOP l 2"), bulks(&["e", "d"]));
    assert_eq!(c.cmd("LPOP l 2"), bulks(&["a", "b"]));
    assert_eq!(c.cmd("LPOP l 0"), bulks(&[]));
    assert_eq!(c.cmd("LPOP l 10"), bulks(&["c"]));
    assert_eq!(c.cmd("EXISTS l"), int(0));
    assert_eq!(c.cmd("LPOP l"), Frame::Null);
    assert_eq!(c.cmd("LPOP l 0"), Frame::Null);
    assert_eq!(c.cmd("LLEN l"), int(0));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&[]));
    assert_eq!(c.cmd("LPUSHX l a"), int(0));
    assert_eq!(c.cmd("RPUSHX l a"), int(0));
    assert_eq!(c.cmd("EXISTS l"), int(0));
    assert_eq!(c.cmd("RPUSH l a"), int(1));
    assert_eq!(c.cmd("RPUSHX l b c"), int(3));
    assert_eq!(c.cmd("LPUSHX l z"), int(4));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["z", "a", "b", "c"]));
    assert_eq!(c.cmd("TYPE l"), Frame::Simple(b"list".to_vec()));
}

#[test]
fn ranges_follow_redis_clamping() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH l 0 1 2 3 4 5 6 7 8 9");
    assert_eq!(c.cmd("LRANGE l 2 4"), bulks(&["2", "3", "4"]));
    assert_eq!(c.cmd("LRANGE l -3 -1"), bulks(&["7", "8", "9"]));
    assert_eq!(c.cmd("LRANGE l -100 1"), bulks(&["0", "1"]));
    assert_eq!(c.cmd("LRANGE l 8 100"), bulks(&["8", "9"]));
    assert_eq!(c.cmd("LRANGE l 5 4"), bulks(&[]));
    assert_eq!(c.cmd("LRANGE l 10 20"), bulks(&[]));
    assert_eq!(c.cmd("LRANGE l 0 -11"), bulks(&[]));
    assert_eq!(c.cmd("LTRIM l 1 -2"), ok());
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["1", "2", "3", "4", "5", "6", "7", "8"]));
    assert_eq!(c.cmd("LTRIM l -3 100"), ok());
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["6", "7", "8"]));
    assert_eq!(c.cmd("LTRIM l 2 1"), ok());
    assert_eq!(c.cmd("EXISTS l"), int(0));
    assert_eq!(c.cmd("LTRIM l 0 1"), ok());
}

#[test]
fn lset_linsert_lrem() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH l a b a c a");
    assert_eq!(c.cmd("LSET l 1 B"), ok());
    assert_eq!(c.cmd("LSET l -1 A"), ok());
    assert_eq!(c.cmd("LSET l 5 x"), err("ERR index out of range"));
    assert_eq!(c.cmd("LSET l -6 x"), err("ERR index out of range"));
    assert_eq!(c.cmd("LSET nokey 0 x"), err("ERR no such key"));
    assert_eq!(c.cmd("LSET l x x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["a", "B", "a", "c", "A"]));
    assert_eq!(c.cmd("LINSERT l BEFORE a x"), int(6));
    assert_eq!(c.cmd("LINSERT l after c y"), int(7));
    assert_eq!(c.cmd("LINSERT l AFTER nope y"), int(-1));
    assert_eq!(c.cmd("LINSERT nokey AFTER a y"), int(0));
    assert_eq!(c.cmd("LINSERT l middle a y"), err("ERR syntax error"));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["x", "a", "B", "a", "c", "y", "A"]));
    assert_eq!(c.cmd("LREM l 1 a"), int(1));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["x", "B", "a", "c", "y", "A"]));
    c.cmd("RPUSH l a a");
    assert_eq!(c.cmd("LREM l -2 a"), int(2));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["x", "B", "a", "c", "y", "A"]));
    assert_eq!(c.cmd("LREM l 0 nope"), int(0));
    assert_eq!(c.cmd("LREM nokey 0 a"), int(0));
    assert_eq!(c.cmd("LREM l x a"), err("ERR value is not an integer or out of range"));
    for v in ["x", "B", "a", "c", "y", "A"] {
        assert_eq!(c.send(&["LREM", "l", "0", v]), int(1));
    }
    assert_eq!(c.cmd("EXISTS l"), int(0));
}

#[test]
fn lpos_options() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH l a b c 1 2 3 c c");
    assert_eq!(c.cmd("LPOS l c"), int(2));
    assert_eq!(c.cmd("LPOS l c RANK 2"), int(6));
    assert_eq!(c.cmd("LPOS l c RANK -1"), int(7));
    assert_eq!(c.cmd("LPOS l c RANK -3"), int(2));
    assert_eq!(c.cmd("LPOS l c RANK 4"), Frame::Null);
    assert_eq!(c.cmd("LPOS l c COUNT 0"), ints(&[2, 6, 7]));
    assert_eq!(c.cmd("LPOS l c COUNT 2"), ints(&[2, 6]));
    assert_eq!(c.cmd("LPOS l c COUNT 2 RANK -1"), ints(&[7, 6]));
    assert_eq!(c.cmd("LPOS l c COUNT 0 MAXLEN 7"), ints(&[2, 6]));
    assert_eq!(c.cmd("LPOS l c RANK -1 MAXLEN 1"), int(7));
    assert_eq!(c.cmd("LPOS l x"), Frame::Null);
    assert_eq!(c.cmd("LPOS l x COUNT 1"), ints(&[]));
    assert_eq!(c.cmd("LPOS nokey x"), Frame::Null);
    assert_eq!(c.cmd("LPOS nokey x COUNT 1"), ints(&[]));
    assert_eq!(
        c.cmd("LPOS l c RANK 0"),
        err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list")
    );
    assert_eq!(c.cmd("LPOS l c COUNT -1"), err("ERR COUNT can't be negative"));
    assert_eq!(c.cmd("LPOS l c MAXLEN x"), err("ERR MAXLEN can't be negative"));
    assert_eq!(c.cmd("LPOS l c RANK x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("LPOS l c RANK"), err("ERR syntax error"));
    assert_eq!(c.cmd("LPOS l c FOO 1"), err("ERR syntax error"));
    // Redis's unchecked negation: the most negative rank reaches every match.
    assert_eq!(c.cmd("LPOS l c RANK -9223372036854775808 COUNT 1"), ints(&[7, 6, 2]));
}

#[test]
fn lmove_and_rpoplpush() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH src a b c");
    assert_eq!(c.cmd("LMOVE src dst LEFT RIGHT"), bulk("a"));
    assert_eq!(c.cmd("LMOVE src dst RIGHT LEFT"), bulk("c"));
    assert_eq!(c.cmd("LRANGE dst 0 -1"), bulks(&["c", "a"]));
    assert_eq!(c.cmd("RPOPLPUSH dst dst"), bulk("a"));
    assert_eq!(c.cmd("LRANGE dst 0 -1"), bulks(&["a", "c"]));
    assert_eq!(c.cmd("LMOVE dst dst left left"), bulk("a"));
    assert_eq!(c.cmd("RPOPLPUSH src {src}other"), bulk("b"));
    assert_eq!(c.cmd("EXISTS src"), int(0));
    assert_eq!(c.cmd("LMOVE src dst LEFT LEFT"), Frame::Null);
    assert_eq!(c.cmd("RPOPLPUSH src dst"), Frame::Null);
    assert_eq!(c.cmd("LMOVE src dst UP LEFT"), err("ERR syntax error"));
    assert_eq!(c.cmd("LMOVE src dst LEFT DOWN"), err("ERR syntax error"));
    // A one-element list rotated onto itself keeps its key and TTL.
    c.cmd("RPUSH one x");
    c.cmd("EXPIRE one 1000");
    assert_eq!(c.cmd("LMOVE one one LEFT RIGHT"), bulk("x"));
    assert_eq!(c.cmd("LRANGE one 0 -1"), bulks(&["x"]));
    assert!(matches!(c.cmd("TTL one"), Frame::Integer(t) if t > 990));
    // Type errors on either side change nothing.
    c.cmd("SET str v");
    assert_eq!(c.cmd("LMOVE dst str LEFT LEFT"), err(WRONGTYPE));
    assert_eq!(c.cmd("LMOVE str dst LEFT LEFT"), err(WRONGTYPE));
    assert_eq!(c.cmd("RPOPLPUSH dst str"), err(WRONGTYPE));
    assert_eq!(c.cmd("LMOVE nokey str LEFT LEFT"), Frame::Null);
    assert_eq!(c.cmd("LRANGE dst 0 -1"), bulks(&["a", "c"]));
}

#[test]
fn lmpop_pops_from_the_first_non_empty_list() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH b 1 2 3 4");
    c.cmd("RPUSH c x");
    let reply = |key: &str, items: &[&str]| Frame::Array(vec![bulk(key), bulks(items)]);
    assert_eq!(c.cmd("LMPOP 3 a b c LEFT"), reply("b", &["1"]));
    assert_eq!(c.cmd("LMPOP 3 a b c RIGHT COUNT 2"), reply("b", &["4", "3"]));
    assert_eq!(c.cmd("LMPOP 2 b c left COUNT 10"), reply("b", &["2"]));
    assert_eq!(c.cmd("EXISTS b"), int(0));
    assert_eq!(c.cmd("LMPOP 2 a b LEFT"), Frame::Null);
    assert_eq!(c.cmd("LMPOP 1 c RIGHT"), reply("c", &["x"]));
    c.cmd("SET s v");
    c.cmd("RPUSH l v");
    assert_eq!(c.cmd("LMPOP 2 s l LEFT"), err(WRONGTYPE));
    assert_eq!(c.cmd("LMPOP 2 nokey s LEFT"), err(WRONGTYPE));
    assert_eq!(c.cmd("LMPOP 0 l LEFT"), err("ERR numkeys should be greater than 0"));
    assert_eq!(c.cmd("LMPOP x l LEFT"), err("ERR numkeys should be greater than 0"));
    assert_eq!(c.cmd("LMPOP 2 l LEFT"), err("ERR syntax error"));
    assert_eq!(c.cmd("LMPOP 1 l UP"), err("ERR syntax error"));
    assert_eq!(c.cmd("LMPOP 1 l LEFT COUNT 0"), err("ERR count should be greater than 0"));
    assert_eq!(c.cmd("LMPOP 1 l LEFT COUNT 1 COUNT 1"), err("ERR syntax error"));
    assert_eq!(c.cmd("LMPOP 1 l LEFT COUNT"), err("ERR syntax error"));
    assert_eq!(c.cmd("LMPOP 1 l"), err("ERR wrong number of arguments for 'lmpop' command"));
    assert_eq!(c.cmd("COMMAND GETKEYS LMPOP 2 a b LEFT COUNT 3"), bulks(&["a", "b"]));
}

#[test]
fn argument_errors() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH l a");
    let positive = err("ERR value is out of range, must be positive");
    assert_eq!(c.cmd("LPOP l -1"), positive);
    assert_eq!(c.cmd("RPOP l x"), positive);
    assert_eq!(c.cmd("LPOP nokey x"), positive);
    assert_eq!(c.cmd("LPOP l 1 2"), err("ERR wrong number of arguments for 'lpop' command"));
    assert_eq!(c.cmd("RPOP l 1 2"), err("ERR wrong number of arguments for 'rpop' command"));
    assert_eq!(c.cmd("LPUSH l"), err("ERR wrong number of arguments for 'lpush' command"));
    assert_eq!(c.cmd("LRANGE l 0"), err("ERR wrong number of arguments for 'lrange' command"));
    assert_eq!(c.cmd("LRANGE l x 1"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("LRANGE nokey 0 x"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("LTRIM l 0 x"), err("ERR value is not an integer or out of range"));
    // LINDEX looks the key up before it parses the index.
    assert_eq!(c.cmd("LINDEX nokey x"), Frame::Null);
    assert_eq!(c.cmd("LINDEX l x"), err("ERR value is not an integer or out of range"));
}

#[test]
fn wrong_type_everywhere() {
    let (_s, mut c) = keel();
    c.cmd("SET s v");
    for line in [
        "LPUSH s a",
        "RPUSH s a",
        "LPUSHX s a",
        "RPUSHX s a",
        "LPOP s",
        "RPOP s 2",
        "LRANGE s 0 -1",
        "LINDEX s 0",
        "LSET s 0 a",
        "LLEN s",
        "LREM s 0 a",
        "LTRIM s 0 1",
        "LINSERT s BEFORE a b",
        "LPOS s a",
        "LMOVE s d LEFT LEFT",
        "RPOPLPUSH s d",
        "LMPOP 1 s LEFT",
    ] {
        assert_eq!(c.cmd(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(c.cmd("GET s"), bulk("v"));
    c.cmd("RPUSH l a");
    assert_eq!(c.cmd("GET l"), err(WRONGTYPE));
}

#[test]
fn resp3_shapes() {
    let (_s, mut c) = keel();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    assert_eq!(c.cmd("LPOP nokey"), Frame::Null);
    assert_eq!(c.cmd("LPOP nokey 2"), Frame::Null);
    assert_eq!(c.cmd("LMPOP 1 nokey LEFT"), Frame::Null);
    assert_eq!(c.cmd("LPOS nokey a"), Frame::Null);
    assert_eq!(c.cmd("LINDEX nokey 0"), Frame::Null);
    c.cmd("RPUSH l a b");
    assert_eq!(c.cmd("LPOP l 1"), bulks(&["a"]));
    assert_eq!(c.cmd("LRANGE l 0 -1"), bulks(&["b"]));
    assert_eq!(c.cmd("LMPOP 1 l LEFT"), Frame::Array(vec![bulk("l"), bulks(&["b"])]));
}

#[test]
fn raw_resp_null_forms() {
    // RESP2: a missing key answers `*-1` to the counted pops and `$-1` to
    // the single ones, byte for byte.
    let (_s, mut c) = keel();
    for (cmd, want) in [
        (&["LPOP", "k", "1"][..], &b"*-1\r\n"[..]),
        (&["RPOP", "k"], b"$-1\r\n"),
        (&["LMPOP", "1", "k", "LEFT"], b"*-1\r\n"),
        (&["LPOS", "k", "a"], b"$-1\r\n"),
        (&["LMOVE", "k", "d", "LEFT", "LEFT"], b"$-1\r\n"),
    ] {
        c.write_command(cmd);
        let mut buf = vec![0u8; want.len()];
        std::io::Read::read_exact(&mut c.stream, &mut buf).expect("reply");
        assert_eq!(buf, want, "{cmd:?}");
    }
}

#[test]
fn object_encoding_is_quicklist_at_any_size() {
    let (_s, mut c) = keel();
    c.cmd("RPUSH small a");
    assert_eq!(c.cmd("OBJECT ENCODING small"), bulk("quicklist"));
    let big: Vec<String> = (0..5000).map(|i| format!("element-{i}")).collect();
    let mut argv = vec!["RPUSH".to_string(), "big".into()];
    argv.extend(big.iter().cloned());
    assert_eq!(c.send(&argv), int(5000));
    assert_eq!(c.cmd("OBJECT ENCODING big"), bulk("quicklist"));
    assert_eq!(c.cmd("LINDEX big 2500"), bulk("element-2500"));
    assert_eq!(c.cmd("LINDEX big -1"), bulk("element-4999"));
    assert_eq!(c.cmd("LRANGE big 4998 -1"), bulks(&["element-4998", "element-4999"]));
}

/// The same edits on lists with tiny, count-bounded and byte-bounded nodes
/// give the same contents: node boundaries are invisible.
#[test]
fn node_sizes_are_invisible() {
    let mut seen: Option<Frame> = None;
    for fill in ["1", "2", "5", "-1", "-5", "0"] {
        let (_s, mut c) = keel();
        assert_eq!(c.send(&["CONFIG", "SET", "list-max-listpack-size", fill]), ok());
        for i in 0..300 {
            let v = if i % 7 == 0 { "x".repeat(2000) } else { format!("{}", i % 11) };
            c.send(&["RPUSH", "l", &v]);
            if i % 3 == 0 {
                c.send(&["LPUSH", "l", &format!("{}", i % 5)]);
            }
        }
        c.cmd("LSET l 10 changed");
        c.send(&["LSET", "l", "-10", &"y".repeat(5000)]);
        c.cmd("LINSERT l BEFORE 3 before3");
        c.cmd("LINSERT l AFTER 4 after4");
        c.cmd("LREM l 5 1");
        c.cmd("LREM l -5 2");
        c.cmd("LREM l 0 7");
        c.cmd("LTRIM l 3 -4");
        c.cmd("LMOVE l l LEFT RIGHT");
        c.cmd("RPOP l 7");
        c.cmd("LPOP l 9");
        let now = c.cmd("LRANGE l 0 -1");
        let Frame::Array(items) = &now else { panic!("{now:?}") };
        assert_eq!(c.cmd("LLEN l"), int(items.len() as i64));
        assert_eq!(c.cmd("LINDEX l 77"), items[77]);
        assert_eq!(c.cmd("LINDEX l -77"), items[items.len() - 77]);
        if let Some(first) = &seen {
            assert_eq!(first, &now, "fill {fill}");
        }
        seen = Some(now);
    }
}

#[test]
fn dirty_counts_match_redis() {
    let (_s, mut c) = keel();
    let dirty = |c: &mut Client| -> i64 {
        c.info_field("persistence", "rdb_changes_since_last_save").parse().expect("number")
    };
    let base = dirty(&mut c);
    c.cmd("RPUSH l a b c d e f");
    assert_eq!(dirty(&mut c) - base, 6);
    c.cmd("LPOP l 2");
    assert_eq!(dirty(&mut c) - base, 8);
    c.cmd("LTRIM l 0 -1");
    assert_eq!(dirty(&mut c) - base, 8);
    c.cmd("LTRIM l 1 -2");
    assert_eq!(dirty(&mut c) - base, 10);
    c.cmd("LREM l 0 nope");
    c.cmd("LINSERT l BEFORE nope x");
    c.cmd("LPUSHX nokey a");
    assert_eq!(dirty(&mut c) - base, 10);
    c.cmd("LMOVE l l LEFT RIGHT");
    assert_eq!(dirty(&mut c) - base, 11);
}

#[test]
fn watch_sees_list_changes() {
    let (s, mut c) = keel();
    let mut other = s.client();
    c.cmd("RPUSH l a b");
    // Redis signals the key on LTRIM even when nothing is trimmed.
    for change in ["RPUSH l c", "LPOP l", "LTRIM l 0 -1", "LSET l 0 z", "LMOVE l l LEFT LEFT"] {
        assert_eq!(c.cmd("WATCH l"), ok());
        other.cmd(change);
        c.cmd("MULTI");
        c.cmd("LLEN l");
        assert_eq!(c.cmd("EXEC"), Frame::Null, "{change}");
    }
    // Failed or empty edits leave a WATCH alone.
    for no_change in ["LREM l 0 nope", "LINSERT l AFTER nope x", "LPOP l 0", "LRANGE l 0 -1"] {
        assert_eq!(c.cmd("WATCH l"), ok());
        other.cmd(no_change);
        c.cmd("MULTI");
        c.cmd("LLEN l");
        assert!(matches!(c.cmd("EXEC"), Frame::Array(_)), "{no_change}");
    }
}

#[test]
fn keyspace_hits_and_misses() {
    let (_s, mut c) = keel();
    let stats = |c: &mut Client| -> (i64, i64) {
        let Frame::Bulk(text) = c.cmd("INFO stats") else { panic!() };
        let text = String::from_utf8(text).expect("utf-8");
        let get = |name: &str| -> i64 {
            text.lines().find_map(|l| l.strip_prefix(name)).expect("field").trim().parse().expect("number")
        };
        (get("keyspace_hits:"), get("keyspace_misses:"))
    };
    c.cmd("RPUSH l a");
    let (h0, m0) = stats(&mut c);
    c.cmd("LRANGE l 0 -1");
    c.cmd("LLEN l");
    c.cmd("LINDEX nokey 0");
    c.cmd("LPOS nokey a");
    c.cmd("LPOP nokey");
    let (h1, m1) = stats(&mut c);
    assert_eq!((h1 - h0, m1 - m0), (2, 2));
}

#[test]
fn lists_survive_a_restart() {
    let dir = temp_dir("lists");
    let want;
    {
        let server = Server::start_in(&dir, &[]);
        let mut c = server.client();
        c.cmd("RPUSH l a b c d e f g");
        c.cmd("LPUSH l z");
        c.cmd("LSET l 1 A");
        c.cmd("LINSERT l AFTER c c2");
        c.cmd("LREM l 1 d");
        c.cmd("LTRIM l 0 -2");
        c.cmd("LMOVE l other RIGHT LEFT");
        c.cmd("RPOPLPUSH l other");
        c.cmd("LMPOP 2 nokey l LEFT COUNT 2");
        c.cmd("RPOP l");
        c.cmd("RPUSH gone x");
        c.cmd("LPOP gone");
        want = (c.cmd("LRANGE l 0 -1"), c.cmd("LRANGE other 0 -1"));
        assert_eq!(want.0, bulks(&["b", "c"]));
        assert_eq!(want.1, bulks(&["e", "f"]));
        drop(server);
    }
    // LMPOP is journaled as the pop it made, as Redis propagates it.
    let aof: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("aof dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().to_string_lossy().ends_with(".incr.aof"))
        .flat_map(|e| std::fs::read(e.path()).expect("read aof"))
        .collect();
    let text = String::from_utf8_lossy(&aof).to_ascii_uppercase();
    assert!(!text.contains("LMPOP"), "LMPOP logged as it came");
    assert!(text.contains("$4\r\nLPOP\r\n$1\r\nL\r\n$1\r\n2\r\n"), "{text}");
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!((c.cmd("LRANGE l 0 -1"), c.cmd("LRANGE other 0 -1")), want);
    assert_eq!(c.cmd("EXISTS gone"), int(0));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn command_table_entries() {
    let (_s, mut c) = keel();
    let Frame::Array(info) = c.cmd("COMMAND INFO lpush lrange lmove lmpop") else { panic!() };
    let head = |f: &Frame| -> (Frame, Frame, Frame) {
        let Frame::Array(parts) = f else { panic!("{f:?}") };
        (parts[1].clone(), parts[2].clone(), parts[4].clone())
    };
    let flags = |names: &[&str]| Frame::Set(names.iter().map(|n| Frame::Simple(n.as_bytes().to_vec())).collect());
    let flat = |f: Frame| match f {
        Frame::Set(v) | Frame::Array(v) => Frame::Set(v),
        other => other,
    };
    let (arity, fl, last) = head(&info[0]);
    assert_eq!((arity, flat(fl), last), (int(-3), flags(&["write", "denyoom", "fast"]), int(1)));
    let (arity, fl, _) = head(&info[1]);
    assert_eq!((arity, flat(fl)), (int(4), flags(&["readonly"])));
    let (arity, fl, last) = head(&info[2]);
    assert_eq!((arity, flat(fl), last), (int(5), flags(&["write", "denyoom"]), int(2)));
    let (arity, fl, _) = head(&info[3]);
    assert_eq!((arity, flat(fl)), (int(-4), flags(&["write", "movablekeys"])));
}

#[test]
fn edge_cases_match_redis() {
    same_as_redis(&[
        "RPUSH l a b a c a",
        "LPOS l a RANK -9223372036854775808",
        "LPOS l a RANK -9223372036854775808 COUNT 2",
        "LPOS l a RANK 9223372036854775807 COUNT 0",
        "LPOS l a COUNT 0 COUNT 1",
        "LPOS l a MAXLEN 2 RANK 2",
        "LRANGE l -9223372036854775808 9223372036854775807",
        "LINDEX l -9223372036854775808",
        "LTRIM l -9223372036854775808 9223372036854775807",
        "LREM l -9223372036854775808 a",
        "LRANGE l 0 -1",
        "LPOP l 9223372036854775807",
        "RPUSH l a",
        "LMPOP 9223372036854775807 l LEFT",
        "LMPOP 1 l LEFT COUNT 9223372036854775807",
        "LPOP l 0",
        "LMOVE l l up left",
        "SET s x",
        "LMOVE nokey s LEFT LEFT",
        "RPUSH l a",
        "LMOVE l s LEFT LEFT",
        "LINSERT s foo a b",
        "LINSERT s before a b",
        "LSET s abc x",
        "LINDEX s abc",
        "LREM s x a",
        "LPOS s a rank 0",
        "LMPOP 2 nokey s LEFT",
    ]);
}
