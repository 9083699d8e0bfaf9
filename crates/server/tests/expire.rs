//! Black-box tests of expiry over real sockets: the EXPIRE and TTL
//! families, PERSIST, lazy and active expiry, and WATCH of keys that
//! expire. Timed tests use TTLs of a few milliseconds and poll with a
//! deadline instead of sleeping long.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{bulk, err, int, ok, simple, Client, Frame, Server};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as i64
}

fn integer(f: Frame) -> i64 {
    match f {
        Frame::Integer(i) => i,
        other => panic!("not an integer: {other:?}"),
    }
}

/// Polls `cond` every few ms until it holds, failing after `limit`.
fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pipeline(c: &mut Client, commands: &[Vec<String>]) -> Vec<Frame> {
    let mut bytes = Vec::new();
    for argv in commands {
        bytes.extend(common::encode(argv));
    }
    c.write_raw(&bytes);
    commands.iter().map(|_| c.read()).collect()
}

#[test]
fn ttl_family_reports() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET x foobar"), ok());
    assert_eq!(c.cmd("TTL x"), int(-1));
    assert_eq!(c.cmd("PTTL x"), int(-1));
    assert_eq!(c.cmd("EXPIRETIME x"), int(-1));
    assert_eq!(c.cmd("PEXPIRETIME x"), int(-1));
    for cmd in ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"] {
        assert_eq!(c.cmd(&format!("{cmd} nokey")), int(-2));
    }
    assert_eq!(c.cmd("EXPIRE x 5"), int(1));
    assert_eq!(c.cmd("TTL x"), int(5));
    assert_eq!(c.cmd("EXPIRE x 10"), int(1));
    assert_eq!(c.cmd("TTL x"), int(10));
    let pttl = integer(c.cmd("PTTL x"));
    assert!(pttl > 9000 && pttl <= 10_000, "{pttl}");
    assert_eq!(c.cmd("GET x"), bulk("foobar"));

    let abs = now_ms() / 1000 + 100;
    assert_eq!(c.cmd(&format!("SET y v EXAT {abs}")), ok());
    assert_eq!(c.cmd("EXPIRETIME y"), int(abs));
    let pabs = now_ms() + 100_000;
    assert_eq!(c.cmd(&format!("PEXPIREAT y {pabs}")), int(1));
    assert_eq!(c.cmd("PEXPIRETIME y"), int(pabs));
    assert_eq!(c.cmd(&format!("EXPIREAT y {}", now_ms() / 1000 + 15)), int(1));
    let ttl = integer(c.cmd("TTL y"));
    assert!((13..=15).contains(&ttl), "{ttl}");
    // The largest expiry Redis accepts still reports without overflow.
    assert_eq!(c.cmd("PEXPIREAT y 9223372036854775807"), int(1));
    assert_eq!(c.cmd("EXPIRETIME y"), int(9_223_372_036_854_776));
    assert_eq!(c.cmd("PEXPIRETIME y"), int(i64::MAX));
    assert_eq!(c.cmd("TTL"), err("ERR wrong number of arguments for 'ttl' command"));
}

#[test]
fn persist() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET x foo"), ok());
    assert_eq!(c.cmd("EXPIRE x 50"), int(1));
    assert_eq!(c.cmd("TTL x"), int(50));
    assert_eq!(c.cmd("PERSIST x"), int(1));
    assert_eq!(c.cmd("TTL x"), int(-1));
    assert_eq!(c.cmd("GET x"), bulk("foo"));
    assert_eq!(c.cmd("PERSIST x"), int(0));
    assert_eq!(c.cmd("PERSIST nokey"), int(0));
}

#[test]
fn expire_options() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let ttl = |c: &mut Client| integer(c.cmd("TTL foo"));
    assert_eq!(c.cmd("SET foo bar EX 100"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 NX"), int(0));
    assert!((50..=100).contains(&ttl(&mut c)));
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 NX"), int(1));
    assert!((100..=200).contains(&ttl(&mut c)));
    assert_eq!(c.cmd("SET foo bar EX 100"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 XX"), int(1));
    assert!((100..=200).contains(&ttl(&mut c)));
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 XX"), int(0));
    assert_eq!(ttl(&mut c), -1);
    assert_eq!(c.cmd("SET foo bar EX 100"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 GT"), int(1));
    assert_eq!(c.cmd("SET foo bar EX 200"), ok());
    assert_eq!(c.cmd("EXPIRE foo 100 GT"), int(0));
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 GT"), int(0));
    assert_eq!(ttl(&mut c), -1);
    assert_eq!(c.cmd("SET foo bar EX 100"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 LT"), int(0));
    assert_eq!(c.cmd("SET foo bar EX 200"), ok());
    assert_eq!(c.cmd("EXPIRE foo 100 LT"), int(1));
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo 100 LT"), int(1));
    assert!((50..=100).contains(&ttl(&mut c)));
    assert_eq!(c.cmd("SET foo bar EX 200"), ok());
    assert_eq!(c.cmd("EXPIRE foo 100 LT XX"), int(1));
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo 200 LT XX"), int(0));
    for opt in ["NX", "XX", "GT", "LT"] {
        assert_eq!(c.cmd(&format!("EXPIRE none 100 {opt}")), int(0));
    }

    let nx = "ERR NX and XX, GT or LT options at the same time are not compatible";
    assert_eq!(c.cmd("EXPIRE foo 200 LT GT"), err("ERR GT and LT options at the same time are not compatible"));
    assert_eq!(c.cmd("EXPIRE foo 200 NX GT"), err(nx));
    assert_eq!(c.cmd("EXPIRE foo 200 NX LT"), err(nx));
    assert_eq!(c.cmd("EXPIRE foo 200 NX XX"), err(nx));
    assert_eq!(c.cmd("EXPIRE foo 200 AB"), err("ERR Unsupported option AB"));
    assert_eq!(c.cmd("EXPIRE foo 200 XX AB"), err("ERR Unsupported option AB"));
    // Options are checked before the time.
    assert_eq!(c.cmd("EXPIRE foo abc NX XX"), err(nx));
    assert_eq!(c.cmd("EXPIRE foo abc"), err("ERR value is not an integer or out of range"));
    assert_eq!(c.send(&["EXPIRE", "foo", ""]), err("ERR value is not an integer or out of range"));
    assert_eq!(c.cmd("EXPIRE foo"), err("ERR wrong number of arguments for 'expire' command"));

    // A time in the past deletes the key.
    assert_eq!(c.cmd("SET foo bar EX 100"), ok());
    assert_eq!(c.cmd("EXPIRE foo -10 LT"), int(1));
    assert_eq!(ttl(&mut c), -2);
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo -10 LT"), int(1));
    assert_eq!(ttl(&mut c), -2);
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("PEXPIREAT foo -9223372036854770000"), int(1));
    assert_eq!(ttl(&mut c), -2);
    assert_eq!(c.cmd("SET foo bar"), ok());
    assert_eq!(c.cmd("EXPIRE foo 0"), int(1));
    assert_eq!(c.cmd("EXISTS foo"), int(0));
}

#[test]
fn expire_overflow_errors() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET foo bar"), ok());
    for t in ["9223370399119966", "9223372036854776", "10000000000000000", "18446744073709561", "-9223372036854776", "-9999999999999999"] {
        assert_eq!(c.cmd(&format!("EXPIRE foo {t}")), err("ERR invalid expire time in 'expire' command"), "{t}");
    }
    assert_eq!(c.cmd("TTL foo"), int(-1));
    assert_eq!(c.cmd("PEXPIRE foo 9223372036854770000"), err("ERR invalid expire time in 'pexpire' command"));
    assert_eq!(c.cmd("EXPIREAT foo 9223372036854776"), err("ERR invalid expire time in 'expireat' command"));
    assert_eq!(c.cmd("PEXPIREAT foo 9223372036854770000"), int(1));
}

#[test]
fn millisecond_expiry_is_lazy_and_exact() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    for i in 0..3 {
        assert_eq!(c.cmd(&format!("PSETEX key{{t}}{i} 300 a")), ok());
    }
    assert_eq!(c.cmd("GET key{t}0"), bulk("a"));
    std::thread::sleep(Duration::from_millis(350));
    // No access yet: still counted, then gone on access.
    assert_eq!(c.cmd("DBSIZE"), int(3));
    assert_eq!(c.cmd("MGET key{t}0 key{t}1 key{t}2"), Frame::Array(vec![Frame::Null, Frame::Null, Frame::Null]));
    assert_eq!(c.cmd("DBSIZE"), int(0));
    // An expired key is not resurrected by EXPIRE.
    assert_eq!(c.cmd("SET foo bar PX 5"), ok());
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(c.cmd("EXPIRE foo 10"), int(0));
    assert_eq!(c.cmd("EXISTS foo"), int(0));
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    // PEXPIRE of a few ms: present before, absent after, polled.
    assert_eq!(c.cmd("SET x v"), ok());
    // The clock starts before the command: its reply may leave later than
    // it ran (it waits for the journal to be durable).
    let set_at = Instant::now();
    assert_eq!(c.cmd("PEXPIRE x 30"), int(1));
    let first = c.cmd("GET x");
    if set_at.elapsed() < Duration::from_millis(25) {
        assert_eq!(first, bulk("v"));
    }
    wait_for(Duration::from_secs(2), "x to expire", || c.cmd("GET x") == Frame::Null);
    assert!(set_at.elapsed() >= Duration::from_millis(29), "expired early: {:?}", set_at.elapsed());
}

#[test]
fn active_expiry_reclaims_without_access() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for i in 0..3 {
        assert_eq!(c.cmd(&format!("PSETEX key{i} 50 a")), ok());
    }
    assert_eq!(c.cmd("DBSIZE"), int(3));
    wait_for(Duration::from_secs(2), "active expiry", || c.cmd("DBSIZE") == int(0));
}

#[test]
fn active_expiry_keeps_up_with_a_mass_expiry() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for batch in 0..10 {
        let commands: Vec<Vec<String>> = (0..5000)
            .map(|i| vec!["SET".into(), format!("m{batch}:{i}"), "v".into(), "PX".into(), "50".into()])
            .collect();
        pipeline(&mut c, &commands);
    }
    let commands: Vec<Vec<String>> = (0..100).map(|i| vec!["SET".into(), format!("keep{i}"), "v".into()]).collect();
    pipeline(&mut c, &commands);
    wait_for(Duration::from_secs(3), "50000 keys to expire actively", || c.cmd("DBSIZE") == int(100));
    assert!(c.cmd("INFO keyspace") != Frame::Null);
}

#[test]
fn watch_and_expiry() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    let exec_pong = |c: &mut Client| {
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd("PING"), simple("QUEUED"));
        c.cmd("EXEC")
    };
    let pong = Frame::Array(vec![simple("PONG")]);

    // A key that expires after WATCH aborts EXEC, even without access.
    assert_eq!(c.cmd("SET key 1 PX 20"), ok());
    assert_eq!(c.cmd("WATCH key"), ok());
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("INCR key"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Null);

    // A key already expired when WATCHed does not.
    assert_eq!(c.cmd("SET x foo PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(exec_pong(&mut c), pong);

    // Nor does its lazy deletion after WATCH.
    assert_eq!(c.cmd("SET x foo PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("EXISTS x"), int(0));
    assert_eq!(exec_pong(&mut c), pong);

    // Nor FLUSHDB of it.
    assert_eq!(c.cmd("SET x foo PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("FLUSHDB"), ok());
    assert_eq!(exec_pong(&mut c), pong);

    // But bringing it back to life does.
    assert_eq!(c.cmd("SET x foo PX 1"), ok());
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd("WATCH x"), ok());
    let mut other = server.client();
    assert_eq!(other.cmd("SET x again"), ok());
    assert_eq!(exec_pong(&mut c), Frame::Null);

    // EXPIRE of a watched key touches it.
    assert_eq!(c.cmd("SET x foo"), ok());
    assert_eq!(c.cmd("WATCH x"), ok());
    assert_eq!(c.cmd("EXPIRE x 10"), int(1));
    assert_eq!(exec_pong(&mut c), Frame::Null);
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());

    // Active expiry of a watched key touches it.
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("SET x foo PX 20"), ok());
    assert_eq!(c.cmd("WATCH x"), ok());
    wait_for(Duration::from_secs(2), "x to expire actively", || other.cmd("DBSIZE") == int(0));
    assert_eq!(exec_pong(&mut c), Frame::Null);
}
