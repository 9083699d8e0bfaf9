//! Blocking pops over real sockets: serving order, timeouts, wake-ups by
//! any client or by EXEC, MULTI, CLIENT KILL / UNBLOCK, disconnects,
//! keys on different shards, and the journal after a served pop.

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{bulk, int, ok, Client, Frame, Server};

/// Waits until the server reports `n` blocked clients (polling INFO: the
/// blocking command was sent, and must have reached the server).
fn wait_blocked(c: &mut Client, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.info_field("clients", "blocked_clients") != n.to_string() {
        assert!(Instant::now() < deadline, "never saw {n} blocked clients");
        std::thread::yield_now();
    }
}

/// Asserts that nothing arrives on `c` for `ms` milliseconds.
fn assert_silent(c: &mut Client, ms: u64) {
    c.stream.set_read_timeout(Some(Duration::from_millis(ms))).expect("read timeout");
    let mut byte = [0u8; 1];
    let got = c.stream.read(&mut byte);
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    assert!(got.is_err(), "unexpected reply byte {:?}", got.map(|_| byte[0] as char));
}

fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

#[test]
fn blpop_is_served_by_a_push_from_another_client() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut pusher = server.client();
    waiter.write_command(&["BLPOP", "q", "0"]);
    wait_blocked(&mut pusher, 1);
    assert_silent(&mut waiter, 50);
    assert_eq!(pusher.cmd("RPUSH q a b"), int(2));
    assert_eq!(waiter.read(), arr(&["q", "a"]));
    assert_eq!(pusher.cmd("LRANGE q 0 -1"), arr(&["b"]));
    assert_eq!(pusher.info_field("clients", "blocked_clients"), "0");
}

#[test]
fn first_blocked_is_first_served() {
    let server = Server::start(&[]);
    let mut waiters: Vec<Client> = (0..3).map(|_| server.client()).collect();
    let mut pusher = server.client();
    for (i, w) in waiters.iter_mut().enumerate() {
        w.write_command(&["BRPOP", "q", "0"]);
        wait_blocked(&mut pusher, i + 1);
    }
    // One push of three: each waiter gets one, in blocking order.
    assert_eq!(pusher.cmd("LPUSH q x y z"), int(3));
    assert_eq!(waiters[0].read(), arr(&["q", "x"]));
    assert_eq!(waiters[1].read(), arr(&["q", "y"]));
    assert_eq!(waiters[2].read(), arr(&["q", "z"]));
    assert_eq!(pusher.cmd("EXISTS q"), int(0));
}

#[test]
fn timeouts_are_to_the_millisecond() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let started = Instant::now();
    assert_eq!(c.cmd("BLPOP q 0.05"), Frame::Null);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_millis(1000), "{waited:?}");
    assert_eq!(c.cmd("BZPOPMIN z 0.01"), Frame::Null);
    assert_eq!(c.cmd("BLMOVE a b LEFT LEFT 0.01"), Frame::Null);
    assert_eq!(c.cmd("BLPOP q -1"), common::err("ERR timeout is negative"));
    assert_eq!(c.cmd("BLPOP q abc"), common::err("ERR timeout is not a float or out of range"));
    // The connection goes on normally after a timeout.
    assert_eq!(c.cmd("PING"), Frame::Simple(b"PONG".to_vec()));
}

#[test]
fn exec_wakes_and_multi_never_blocks() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut other = server.client();
    // Inside MULTI a blocking pop with nothing to pop answers at once.
    assert_eq!(other.cmd("MULTI"), ok());
    other.cmd("BLPOP q 0");
    other.cmd("BLMOVE q r LEFT LEFT 0");
    other.cmd("BZPOPMAX z 0");
    assert_eq!(other.cmd("EXEC"), Frame::Array(vec![Frame::Null, Frame::Null, Frame::Null]));

    waiter.write_command(&["BLPOP", "q", "0"]);
    wait_blocked(&mut other, 1);
    assert_eq!(other.cmd("MULTI"), ok());
    other.cmd("RPUSH q 1");
    other.cmd("RPUSH q 2");
    assert_eq!(other.cmd("EXEC"), Frame::Array(vec![int(1), int(2)]));
    // Served after the whole transaction: it sees both pushes.
    assert_eq!(waiter.read(), arr(&["q", "1"]));
    assert_eq!(other.cmd("LRANGE q 0 -1"), arr(&["2"]));
}

#[test]
fn keys_on_different_shards_wait_as_one_keyspace() {
    let server = Server::start(&["--threads", "2"]);
    let mut waiter = server.client();
    let mut pusher = server.client();
    // Many keys: some certainly live on other shards than the others.
    let keys: Vec<String> = (0..20).map(|i| format!("key:{i}")).collect();
    let mut argv: Vec<&str> = vec!["BLPOP"];
    argv.extend(keys.iter().map(String::as_str));
    argv.push("0");
    waiter.write_command(&argv);
    wait_blocked(&mut pusher, 1);
    assert_eq!(pusher.cmd("RPUSH key:13 v"), int(1));
    assert_eq!(waiter.read(), arr(&["key:13", "v"]));
    // The wait is over on every key: a later push stays put.
    assert_eq!(pusher.cmd("RPUSH key:4 w"), int(1));
    assert_eq!(pusher.cmd("LLEN key:4"), int(1));
}

#[test]
fn blmove_chains_into_a_waiter_on_its_destination() {
    let server = Server::start(&[]);
    let mut mover = server.client();
    let mut popper = server.client();
    let mut pusher = server.client();
    mover.write_command(&["BLMOVE", "src", "dst", "RIGHT", "LEFT", "0"]);
    wait_blocked(&mut pusher, 1);
    popper.write_command(&["BLPOP", "dst", "0"]);
    wait_blocked(&mut pusher, 2);
    assert_eq!(pusher.cmd("RPUSH src e"), int(1));
    assert_eq!(mover.read(), bulk("e"));
    assert_eq!(popper.read(), arr(&["dst", "e"]));
    assert_eq!(pusher.cmd("EXISTS src dst"), int(0));
}

#[test]
fn sorted_set_pops_block_too() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut writer = server.client();
    waiter.write_command(&["BZPOPMIN", "z1", "z2", "0"]);
    wait_blocked(&mut writer, 1);
    assert_eq!(writer.cmd("ZADD z2 2 two 1 one"), int(2));
    assert_eq!(waiter.read(), Frame::Array(vec![bulk("z2"), bulk("one"), bulk("1")]));
    waiter.write_command(&["BZMPOP", "0", "1", "z3", "MAX", "COUNT", "5"]);
    wait_blocked(&mut writer, 1);
    assert_eq!(writer.cmd("ZADD z3 1 a 2 b"), int(2));
    let pairs = |items: &[(&str, &str)]| {
        Frame::Array(items.iter().map(|(m, s)| Frame::Array(vec![bulk(m), bulk(s)])).collect())
    };
    assert_eq!(waiter.read(), Frame::Array(vec![bulk("z3"), pairs(&[("b", "2"), ("a", "1")])]));
}

#[test]
fn a_killed_or_departed_waiter_takes_nothing() {
    let server = Server::start(&[]);
    let mut killed = server.client();
    let mut admin = server.client();
    killed.write_command(&["CLIENT", "ID"]);
    let Frame::Integer(id) = killed.read() else { panic!("CLIENT ID") };
    killed.write_command(&["BLPOP", "q", "0"]);
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&format!("CLIENT KILL ID {id}")), int(1));
    wait_blocked(&mut admin, 0);
    {
        let departed = server.client();
        let mut departed = departed;
        departed.write_command(&["BLPOP", "q", "0"]);
        wait_blocked(&mut admin, 1);
    }
    wait_blocked(&mut admin, 0);
    assert_eq!(admin.cmd("RPUSH q v"), int(1));
    assert_eq!(admin.cmd("LLEN q"), int(1));
}

#[test]
fn client_unblock_ends_a_wait_as_timeout_or_error() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut admin = server.client();
    let Frame::Integer(id) = waiter.cmd("CLIENT ID") else { panic!("CLIENT ID") };
    waiter.write_command(&["BLPOP", "q", "0"]);
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&format!("CLIENT UNBLOCK {id}")), int(1));
    assert_eq!(waiter.read(), Frame::Null);
    waiter.write_command(&["BZPOPMAX", "z", "0"]);
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&format!("CLIENT UNBLOCK {id} ERROR")), int(1));
    assert_eq!(waiter.read(), common::err("UNBLOCKED client unblocked via CLIENT UNBLOCK"));
    assert_eq!(admin.cmd(&format!("CLIENT UNBLOCK {id}")), int(0));
}

#[test]
fn requests_pipelined_behind_a_blocked_pop_wait_for_it() {
    let server = Server::start(&[]);
    let mut waiter = server.client();
    let mut pusher = server.client();
    let mut pipeline = common::encode(&["BLPOP", "q", "0"]);
    pipeline.extend(common::encode(&["LLEN", "q"]));
    waiter.write_raw(&pipeline);
    wait_blocked(&mut pusher, 1);
    assert_silent(&mut waiter, 50);
    assert_eq!(pusher.cmd("RPUSH q a b"), int(2));
    assert_eq!(waiter.read(), arr(&["q", "a"]));
    assert_eq!(waiter.read(), int(1));
}

#[test]
fn a_served_pop_is_in_the_journal() {
    let dir = common::temp_dir("blocking-journal");
    {
        let server = Server::start_in(&dir, &[]);
        let mut waiter = server.client();
        let mut pusher = server.client();
        waiter.write_command(&["BLMPOP", "0", "2", "x", "q", "LEFT", "COUNT", "2"]);
        wait_blocked(&mut pusher, 1);
        assert_eq!(pusher.cmd("RPUSH q a b c"), int(3));
        assert_eq!(waiter.read(), Frame::Array(vec![bulk("q"), arr(&["a", "b"])]));
        server.kill9();
    }
    let server = Server::start_last_in(&dir, &[]);
    let mut c = server.client();
    assert_eq!(c.cmd("LRANGE q 0 -1"), arr(&["c"]));
}
