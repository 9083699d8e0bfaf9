//! A server's whole dataset, read over the wire and compared, and a fill
//! of every type and encoding: for tests that move data between servers
//! or through files.

use std::collections::BTreeMap;

use super::{encode, ok, Client, Frame};

/// A value as compared: collections in a canonical order, scores as bits.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    ZSet(Vec<(Vec<u8>, u64)>),
}

/// (db, key) -> (value, expiry in Unix ms).
pub type State = BTreeMap<(u64, Vec<u8>), (Val, Option<u64>)>;

pub fn bulk_bytes(f: &Frame) -> Vec<u8> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => b.clone(),
        other => panic!("not a bulk: {other:?}"),
    }
}

pub fn array(f: Frame) -> Vec<Frame> {
    match f {
        Frame::Array(items) | Frame::Set(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

pub fn score_bits(text: &[u8]) -> u64 {
    let t = String::from_utf8_lossy(text);
    let v: f64 = match t.as_ref() {
        "inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        s => s.parse().expect("score"),
    };
    // 0.0 and -0.0 compare as one.
    if v == 0.0 { 0 } else { v.to_bits() }
}

/// Sends `commands` pipelined and returns the replies.
pub fn pipeline(c: &mut Client, commands: &[Vec<Vec<u8>>]) -> Vec<Frame> {
    let mut bytes = Vec::new();
    for cmd in commands {
        bytes.extend(encode(cmd));
    }
    c.write_raw(&bytes);
    commands.iter().map(|_| c.read()).collect()
}

pub fn argv(words: &[&[u8]]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.to_vec()).collect()
}

/// Everything in every database of the server `c` talks to.
pub fn read_state(c: &mut Client) -> State {
    let mut state = State::new();
    for db in 0..16u64 {
        assert_eq!(c.cmd(&format!("SELECT {db}")), ok());
        let keys: Vec<Vec<u8>> = array(c.cmd("KEYS *")).iter().map(bulk_bytes).collect();
        for chunk in keys.chunks(500) {
            let types = pipeline(c, &chunk.iter().map(|k| argv(&[b"TYPE", k])).collect::<Vec<_>>());
            let mut cmds = Vec::new();
            for (k, t) in chunk.iter().zip(&types) {
                let t = bulk_bytes(t);
                cmds.push(match &t[..] {
                    b"string" => argv(&[b"GET", k]),
                    b"list" => argv(&[b"LRANGE", k, b"0", b"-1"]),
                    b"set" => argv(&[b"SMEMBERS", k]),
                    b"hash" => argv(&[b"HGETALL", k]),
                    b"zset" => argv(&[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"]),
                    other => panic!("type {}", String::from_utf8_lossy(other)),
                });
                cmds.push(argv(&[b"PEXPIRETIME", k]));
            }
            let replies = pipeline(c, &cmds);
            for (i, (k, t)) in chunk.iter().zip(&types).enumerate() {
                let (value, ttl) = (replies[2 * i].clone(), replies[2 * i + 1].clone());
                let val = match &bulk_bytes(t)[..] {
                    b"string" => Val::Str(bulk_bytes(&value)),
                    b"list" => Val::List(array(value).iter().map(bulk_bytes).collect()),
                    b"set" => {
                        let mut m: Vec<_> = array(value).iter().map(bulk_bytes).collect();
                        m.sort();
                        Val::Set(m)
                    }
                    b"hash" => {
                        let items: Vec<_> = array(value).iter().map(bulk_bytes).collect();
                        let mut pairs: Vec<_> = items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
                        pairs.sort();
                        Val::Hash(pairs)
                    }
                    _ => {
                        let items: Vec<_> = array(value).iter().map(bulk_bytes).collect();
                        let mut pairs: Vec<_> = items.chunks(2).map(|p| (p[0].clone(), score_bits(&p[1]))).collect();
                        pairs.sort();
                        Val::ZSet(pairs)
                    }
                };
                let Frame::Integer(ttl) = ttl else { panic!("PEXPIRETIME: {ttl:?}") };
                let ttl = (ttl >= 0).then_some(ttl as u64);
                state.insert((db, k.clone()), (val, ttl));
            }
        }
    }
    assert_eq!(c.cmd("SELECT 0"), ok());
    state
}

/// Asserts `got == want`, naming the first few keys that differ (the
/// states are too big to print whole).
pub fn assert_same(got: &State, want: &State, what: &str) {
    let short = |v: Option<&(Val, Option<u64>)>| {
        let t = format!("{v:?}");
        if t.len() > 300 { format!("{}...", &t[..300]) } else { t }
    };
    let mut diffs = Vec::new();
    for k in got.keys().chain(want.keys()) {
        if got.get(k) != want.get(k) && diffs.len() < 5 {
            diffs.push(format!(
                "db {} key {:?}: got {} want {}",
                k.0,
                String::from_utf8_lossy(&k.1),
                short(got.get(k)),
                short(want.get(k))
            ));
        }
    }
    assert!(diffs.is_empty(), "{what}: {} vs {} keys; {}", got.len(), want.len(), diffs.join("\n"));
}

/// Every type in small and big encodings, several databases, TTLs.
pub fn fill_every_type(c: &mut Client) {
    let far = 4_000_000_000_000u64; // year 2096, in ms
    for db in [0, 3, 15] {
        assert_eq!(c.cmd(&format!("SELECT {db}")), ok());
        c.cmd("SET int 12345");
        c.cmd("SET neg -7");
        c.cmd("SET str hello");
        let big = "x".repeat(20_000);
        c.send(&["SET", "bigstr", &big]);
        let compressible: String = (0..2000).map(|i| format!("abc{}", i % 10)).collect();
        c.send(&["SET", "lzf", &compressible]);
        c.cmd("RPUSH smalllist a b c 1 2 3");
        let items: Vec<String> = (0..2000).map(|i| format!("item-{i}")).collect();
        let mut cmd = vec!["RPUSH".to_string(), "biglist".into()];
        cmd.extend(items.iter().cloned());
        c.send(&cmd);
        c.cmd("SADD intset 1 2 3 -100 99999");
        c.cmd("SADD smallset a b c");
        let mut cmd = vec!["SADD".to_string(), "bigset".into()];
        cmd.extend((0..1000).map(|i| format!("m{i}")));
        c.send(&cmd);
        let mut cmd = vec!["SADD".to_string(), "bigintset".into()];
        cmd.extend((0..1000).map(|i| i.to_string()));
        c.send(&cmd);
        c.cmd("HSET smallhash f1 v1 f2 2");
        let mut cmd = vec!["HSET".to_string(), "bighash".into()];
        cmd.extend((0..1000).flat_map(|i| [format!("f{i}"), format!("v{i}")]));
        c.send(&cmd);
        c.cmd("ZADD smallz 1.5 a -inf b 3 c 0.1 d");
        let mut cmd = vec!["ZADD".to_string(), "bigz".into()];
        cmd.extend((0..1000).flat_map(|i| [format!("{}", i as f64 / 7.0), format!("z{i}")]));
        c.send(&cmd);
        c.cmd(&format!("PEXPIREAT str {far}"));
        c.cmd(&format!("PEXPIREAT biglist {far}"));
        c.cmd(&format!("PEXPIREAT smallz {}", far + 1));
        c.cmd(&format!("SET db{db} only-here"));
    }
    assert_eq!(c.cmd("SELECT 0"), ok());
}

