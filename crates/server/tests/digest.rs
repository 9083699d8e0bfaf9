//! DEBUG DIGEST and DEBUG DIGEST-VALUE against Debian's redis-server
//! 7.0.15: the same data gives the same digests (Redis's own tests compare
//! them before and after a reload), every type in each of its encodings,
//! keys with a TTL, several databases.

mod common;

use common::{Client, Frame, Server};

/// Writes the same dataset through `c`: every type, small and large (each
/// Redis encoding), integer-like strings and members, special scores,
/// TTLs, three databases.
fn fill(c: &mut Client) {
    let big = 1_000u64;
    let mut commands: Vec<Vec<String>> = vec![
        vec!["SET".into(), "s".into(), "plain".into()],
        vec!["SET".into(), "int".into(), "-12345".into()],
        vec!["SET".into(), "bin".into(), "a\u{0}b\r\n".into()],
        vec!["RPUSH".into(), "l".into(), "x".into(), "42".into(), "".into(), "y".into()],
        vec!["SADD".into(), "intset".into(), "3".into(), "-1".into(), "7".into()],
        vec!["SADD".into(), "smallset".into(), "a".into(), "b".into(), "10".into()],
        vec!["ZADD".into(), "z".into(), "1".into(), "one".into(), "1.5".into(), "7".into(), "-0.1".into(), "neg"
            .into(), "inf".into(), "top".into(), "-inf".into(), "bottom".into(), "1e20".into(), "huge".into()],
        vec!["HSET".into(), "h".into(), "f".into(), "v".into(), "n".into(), "12".into()],
        vec!["SET".into(), "ttl".into(), "v".into(), "PXAT".into(), "4102444800000".into()],
        vec!["RPUSH".into(), "ttl-list".into(), "a".into()],
        vec!["PEXPIREAT".into(), "ttl-list".into(), "4102444800000".into()],
    ];
    for i in 0..big {
        commands.push(vec!["RPUSH".into(), "biglist".into(), format!("element-{i}")]);
        commands.push(vec!["SADD".into(), "bigset".into(), format!("member-{i}")]);
        commands.push(vec!["SADD".into(), "bigintset".into(), (i * 7).to_string()]);
        commands.push(vec!["ZADD".into(), "bigzset".into(), format!("{}", i as f64 / 3.0), format!("m{i}")]);
        commands.push(vec!["HSET".into(), "bighash".into(), format!("field-{i}"), format!("value-{i}")]);
    }
    commands.push(vec!["SELECT".into(), "1".into()]);
    commands.push(vec!["SET".into(), "s".into(), "plain".into()]);
    commands.push(vec!["SELECT".into(), "5".into()]);
    commands.push(vec!["ZADD".into(), "z".into(), "2".into(), "b".into(), "2".into(), "a".into()]);
    commands.push(vec!["SELECT".into(), "0".into()]);
    for argv in &commands {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        if let Frame::Error(e) = c.send(&argv) {
            panic!("{argv:?}: {}", String::from_utf8_lossy(&e));
        }
    }
}

const KEYS: &[&str] = &[
    "s", "int", "bin", "l", "intset", "smallset", "z", "h", "ttl", "ttl-list", "biglist", "bigset", "bigintset",
    "bigzset", "bighash", "missing",
];

/// DEBUG DIGEST, then DEBUG DIGEST-VALUE of every key.
fn digests(c: &mut Client) -> (Frame, Frame) {
    let mut argv = vec!["DEBUG", "DIGEST-VALUE"];
    argv.extend_from_slice(KEYS);
    (c.send(&["DEBUG", "DIGEST"]), c.send(&argv))
}

#[test]
fn digests_are_redis_digests() {
    let Some(redis) = Server::start_redis(&["--enable-debug-command", "yes"]) else { return };
    let keel = Server::start(&["--enable-debug-command", "yes"]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let empty = Frame::Simple("0".repeat(40).into_bytes());
    assert_eq!(r.send(&["DEBUG", "DIGEST"]), empty);
    assert_eq!(k.send(&["DEBUG", "DIGEST"]), empty);
    fill(&mut r);
    fill(&mut k);
    let (want, got) = (digests(&mut r), digests(&mut k));
    assert_ne!(want.0, empty);
    assert_eq!(want, got);
    // One element more changes both the same way.
    for c in [&mut r, &mut k] {
        assert_eq!(c.send(&["ZADD", "bigzset", "0.1", "extra"]), Frame::Integer(1));
    }
    assert_ne!(digests(&mut r).0, want.0);
    assert_eq!(digests(&mut r), digests(&mut k));
}
