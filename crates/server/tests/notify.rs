//! Black-box tests of keyspace notifications (`notify-keyspace-events`):
//! the directive's text as Redis shows it and its refusals, keyspace and
//! keyevent channels, classes filtering events, `expired` from a lookup
//! and from the active cycle, `new`, events in other databases, and
//! subscribers on other workers. Which command sends which event is
//! checked against redis-server by the differential tests (`notify: true`
//! streams in `differential*.rs`).

mod common;

use common::{bulk, err, ok, Client, Frame, Server};

/// `[pmessage, pattern, channel, message]`.
fn pmessage(pattern: &str, channel: &str, message: &str) -> Frame {
    Frame::Array(vec![bulk("pmessage"), bulk(pattern), bulk(channel), bulk(message)])
}

/// A client subscribed to every keyspace channel.
fn listener(server: &Server) -> Client {
    let mut c = server.client();
    c.cmd("PSUBSCRIBE __key*__:*");
    c
}

fn space(key: &str, event: &str) -> Frame {
    pmessage("__key*__:*", &format!("__keyspace@0__:{key}"), event)
}

fn event(key: &str, event: &str) -> Frame {
    pmessage("__key*__:*", &format!("__keyevent@0__:{event}"), key)
}

#[test]
fn the_directive_reads_back_as_redis_writes_it() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for (given, shown) in [("KEA", "AKE"), ("Elg", "glE"), ("Kx$", "$xK"), ("AnK", "AK"), ("", "")] {
        assert_eq!(c.send(&["CONFIG", "SET", "notify-keyspace-events", given]), ok(), "{given}");
        assert_eq!(
            c.send(&["CONFIG", "GET", "notify-keyspace-events"]),
            Frame::Array(vec![bulk("notify-keyspace-events"), bulk(shown)]),
            "{given}"
        );
    }
    assert_eq!(
        c.cmd("CONFIG SET notify-keyspace-events Kq"),
        err(
            "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - Invalid event class \
             character. Use 'Ag$lshzxeKEtmdn'."
        )
    );
    // Key misses are not sent yet: refused, not silently ignored.
    assert!(matches!(c.cmd("CONFIG SET notify-keyspace-events KEm"), Frame::Error(e) if e.ends_with(b"yet")));
}

#[test]
fn a_write_publishes_on_the_keyspace_and_keyevent_channels_of_its_database() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let mut l = listener(&server);
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events KEA"), ok());
    assert_eq!(c.cmd("SET k v"), ok());
    assert_eq!(l.read(), space("k", "set"));
    assert_eq!(l.read(), event("k", "set"));
    c.cmd("SELECT 3");
    c.cmd("LPUSH l a");
    assert_eq!(l.read(), pmessage("__key*__:*", "__keyspace@3__:l", "lpush"));
    assert_eq!(l.read(), pmessage("__key*__:*", "__keyevent@3__:lpush", "l"));
    // Only the classes asked for: strings and keyspace channels alone.
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events K$"), ok());
    c.cmd("SELECT 0");
    c.cmd("LPUSH l b");
    c.cmd("INCR n");
    assert_eq!(l.read(), space("n", "incrby"));
    c.cmd("PING");
    l.write_command(&["PING", "end"]);
    assert_eq!(l.read(), Frame::Array(vec![bulk("pong"), bulk("end")]));
}

#[test]
fn expiry_publishes_expired_from_a_lookup_and_from_the_active_cycle() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    let mut l = listener(&server);
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events Ex"), ok());
    // Found expired by a lookup, with the active cycle off.
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    c.cmd("SET lazy v PX 1");
    while c.cmd("GET lazy") != Frame::Null {}
    assert_eq!(l.read(), event("lazy", "expired"));
    // Removed by the cron, untouched by any command.
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    c.cmd("SET active v PX 5");
    assert_eq!(l.read(), event("active", "expired"));
}

#[test]
fn a_new_key_is_announced_before_the_event_that_created_it() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let mut l = listener(&server);
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events En$"), ok());
    c.cmd("SET k v");
    assert_eq!(l.read(), event("k", "new"));
    assert_eq!(l.read(), event("k", "set"));
    // Overwritten, not new.
    c.cmd("SET k w");
    assert_eq!(l.read(), event("k", "set"));
    c.cmd("MSET a 1 b 2");
    let got: Vec<Frame> = (0..4).map(|_| l.read()).collect();
    assert_eq!(got, [event("a", "new"), event("a", "set"), event("b", "new"), event("b", "set")]);
}

#[test]
fn subscribers_on_every_worker_get_the_events() {
    let server = Server::start(&["--threads", "4"]);
    let mut c = server.client();
    let mut listeners: Vec<Client> = (0..8).map(|_| listener(&server)).collect();
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events Eg"), ok());
    for n in 0..20 {
        c.send(&["SET", &format!("k{n}"), "v"]);
        assert_eq!(c.send(&["DEL", &format!("k{n}")]), Frame::Integer(1));
    }
    for l in listeners.iter_mut() {
        for n in 0..20 {
            assert_eq!(l.read(), event(&format!("k{n}"), "del"));
        }
    }
}
