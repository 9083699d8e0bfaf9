//! Black-box tests of client-side caching (CLIENT TRACKING) over real
//! sockets, as Redis 7.0.15 behaves: invalidations in the default mode
//! (RESP3 pushes, REDIRECT to a RESP2 subscriber or a RESP3 client, a
//! broken redirection), the order of a client's own invalidations after
//! its reply (a command, a transaction), BCAST with prefixes, NOLOOP,
//! OPTIN / OPTOUT with CLIENT CACHING, FLUSHALL's null, expiry, memcached
//! and script writes, `tracking-table-max-keys`, INFO, CLIENT LIST,
//! GETREDIR, TRACKINGINFO, RESET and disconnects, and cluster mode. The
//! servers run several workers so that writers and trackers are served by
//! different threads.

mod common;

use common::{bulk, err, int, ok, readable, Client, Frame, Server};

macro_rules! check {
    ($got:expr, $want:expr $(,)?) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            panic!("\n  got:  {}\n  want: {}", readable(&format!("{got:?}")), readable(&format!("{want:?}")));
        }
    }};
}

/// A bulk or verbatim reply's text.
fn text(frame: Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("not text: {other:?}"),
    }
}

fn server() -> Server {
    Server::start(&["--threads", "3"])
}

fn resp3(server: &Server) -> Client {
    let mut c = server.client();
    assert!(matches!(c.send(&["HELLO", "3"]), Frame::Map(_)));
    c
}

fn id_of(c: &mut Client) -> String {
    let Frame::Integer(id) = c.send(&["CLIENT", "ID"]) else { panic!("CLIENT ID") };
    id.to_string()
}

/// `>2 invalidate [keys...]`.
fn invalidate(keys: &[&str]) -> Frame {
    Frame::Push(vec![bulk("invalidate"), Frame::Array(keys.iter().map(|k| bulk(k)).collect())])
}

/// `*3 message __redis__:invalidate [keys...]`, a RESP2 redirection's.
fn message(keys: &[&str]) -> Frame {
    Frame::Array(vec![bulk("message"), bulk("__redis__:invalidate"), Frame::Array(keys.iter().map(|k| bulk(k)).collect())])
}

/// A RESP2 client subscribed to `__redis__:invalidate`, and its id.
fn redirection(server: &Server) -> (Client, String) {
    let mut c = server.client();
    let id = id_of(&mut c);
    check!(c.send(&["SUBSCRIBE", "__redis__:invalidate"]), Frame::Array(vec![bulk("subscribe"), bulk("__redis__:invalidate"), int(1)]));
    (c, id)
}

#[test]
fn a_write_on_another_worker_invalidates_a_read_key_once() {
    let server = server();
    let mut reader = resp3(&server);
    let mut writer = server.client();
    check!(reader.send(&["CLIENT", "TRACKING", "on"]), ok());
    writer.send(&["SET", "a", "1"]);
    writer.send(&["SET", "b", "1"]);
    check!(reader.send(&["GET", "a"]), bulk("1"));
    // b was never read: no message for it.
    writer.send(&["INCR", "b"]);
    writer.send(&["INCR", "a"]);
    check!(reader.read(), invalidate(&["a"]));
    // The key left the table: a second write sends nothing more.
    writer.send(&["INCR", "a"]);
    check!(reader.send(&["PING"]), Frame::Simple(b"PONG".to_vec()));
    // Any write path: DEL, EXPIRE, a collection command.
    reader.send(&["MGET", "a", "b"]);
    writer.send(&["EXPIRE", "a", "100"]);
    check!(reader.read(), invalidate(&["a"]));
    writer.send(&["DEL", "b"]);
    check!(reader.read(), invalidate(&["b"]));
}

#[test]
fn own_invalidations_follow_the_reply_of_a_command_and_of_a_transaction() {
    let server = server();
    let mut c = resp3(&server);
    c.send(&["CLIENT", "TRACKING", "on"]);
    c.send(&["HSET", "h", "f", "1"]);
    c.send(&["HGET", "h", "f"]);
    check!(c.send(&["HDEL", "h", "f"]), int(1));
    check!(c.read(), invalidate(&["h"]));
    c.send(&["MSET", "a{t}", "1", "b{t}", "2"]);
    c.send(&["GET", "a{t}"]);
    c.send(&["MULTI"]);
    c.send(&["INCR", "a{t}"]);
    c.send(&["GET", "b{t}"]);
    check!(c.send(&["EXEC"]), Frame::Array(vec![int(2), bulk("2")]));
    check!(c.read(), invalidate(&["a{t}"]));
    // FLUSHDB inside a transaction: the null comes after EXEC's reply.
    c.send(&["GET", "a{t}"]);
    c.send(&["MULTI"]);
    c.send(&["FLUSHDB"]);
    check!(c.send(&["EXEC"]), Frame::Array(vec![ok()]));
    check!(c.read(), Frame::Push(vec![bulk("invalidate"), Frame::Null]));
}

#[test]
fn redirection_to_a_resp2_subscriber_or_a_resp3_client() {
    let server = server();
    let (mut sub, sub_id) = redirection(&server);
    let mut c = server.client();
    let mut writer = server.client();
    check!(c.send(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id]), ok());
    check!(c.send(&["CLIENT", "GETREDIR"]), Frame::Integer(sub_id.parse().expect("an id")));
    writer.send(&["SET", "k", "v"]);
    c.send(&["GET", "k"]);
    writer.send(&["SET", "k", "w"]);
    check!(sub.read(), message(&["k"]));
    // A RESP3 target gets pushes, from several clients redirecting to it.
    let mut target = resp3(&server);
    let target_id = id_of(&mut target);
    let mut other = server.client();
    check!(c.send(&["CLIENT", "TRACKING", "on", "REDIRECT", &target_id]), ok());
    check!(other.send(&["CLIENT", "TRACKING", "on", "REDIRECT", &target_id]), ok());
    c.send(&["GET", "x"]);
    other.send(&["GET", "y"]);
    writer.send(&["MSET", "x", "1"]);
    check!(target.read(), invalidate(&["x"]));
    writer.send(&["SET", "y", "1"]);
    check!(target.read(), invalidate(&["y"]));
    // FLUSHALL: the null in the tracking client's protocol (RESP2 here).
    c.send(&["GET", "x"]);
    writer.send(&["FLUSHALL"]);
    let mut nulls = 0;
    while nulls < 2 {
        check!(target.read(), Frame::Push(vec![bulk("invalidate"), Frame::Null]));
        nulls += 1;
    }
}

#[test]
fn a_broken_redirection_is_told_to_a_resp3_client_and_shown() {
    let server = server();
    let (mut sub, sub_id) = redirection(&server);
    let mut c = resp3(&server);
    let mut writer = server.client();
    c.send(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id]);
    writer.send(&["SET", "k", "1"]);
    c.send(&["GET", "k"]);
    check!(sub.send(&["QUIT"]), ok());
    common::wait_for("the redirection to go", || text(writer.send(&["CLIENT", "LIST"])).lines().count() == 2);
    writer.send(&["SET", "k", "2"]);
    check!(c.read(), Frame::Push(vec![bulk("tracking-redir-broken"), Frame::Integer(sub_id.parse().expect("an id"))]));
    let info = c.send(&["CLIENT", "TRACKINGINFO"]);
    check!(
        info,
        Frame::Map(vec![
            (bulk("flags"), Frame::Set(vec![bulk("on"), bulk("broken_redirect")])),
            (bulk("redirect"), Frame::Integer(sub_id.parse().expect("an id"))),
            (bulk("prefixes"), Frame::Array(vec![])),
        ])
    );
    let line = text(c.send(&["CLIENT", "INFO"]));
    assert!(line.contains(" flags=tR ") && line.contains(&format!(" redir={sub_id} ")), "{line}");
}

#[test]
fn bcast_prefixes_noloop_and_collisions() {
    let server = server();
    let (mut sub, sub_id) = redirection(&server);
    let mut c = server.client();
    let mut writer = server.client();
    check!(c.send(&["CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", &sub_id, "PREFIX", "a:", "PREFIX", "b:"]), ok());
    c.send(&["MULTI"]);
    for key in ["a:2{t}", "a:1{t}", "b:1{t}", "c:1{t}"] {
        c.send(&["INCR", key]);
    }
    c.send(&["EXEC"]);
    // One message per prefix, its keys in key order.
    check!(sub.read(), message(&["a:1{t}", "a:2{t}"]));
    check!(sub.read(), message(&["b:1{t}"]));
    check!(c.send(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "c"]), ok());
    check!(c.send(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a"]), err("ERR Prefix 'a' overlaps with an existing prefix 'a:'. Prefixes for a single client must not overlap."));
    check!(text(c.send(&["INFO", "stats"])).contains("tracking_total_prefixes:3"), true);
    // The redirection was reset by the last ON: nothing to the subscriber
    // now, and this RESP2 client cannot be told itself.
    check!(c.send(&["CLIENT", "TRACKING", "off"]), ok());
    check!(c.send(&["CLIENT", "TRACKING", "on", "BCAST", "NOLOOP", "REDIRECT", &sub_id]), ok());
    writer.send(&["SET", "other1", "1"]);
    check!(sub.read(), message(&["other1"]));
    c.send(&["SET", "loop", "1"]);
    writer.send(&["SET", "other2", "1"]);
    check!(sub.read(), message(&["other2"]));
    // Expiry is nobody's write: a NOLOOP client hears of its own key.
    c.send(&["SET", "gone", "v", "PX", "1"]);
    check!(sub.read(), message(&["gone"]));
}

#[test]
fn optin_and_optout_follow_client_caching() {
    let server = server();
    let mut c = resp3(&server);
    let mut writer = server.client();
    check!(c.send(&["CLIENT", "CACHING", "yes"]), err("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"));
    c.send(&["CLIENT", "TRACKING", "on", "OPTIN"]);
    check!(c.send(&["CLIENT", "CACHING", "no"]), err("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."));
    c.send(&["GET", "skipped"]);
    c.send(&["CLIENT", "CACHING", "yes"]);
    c.send(&["GET", "cached"]);
    writer.send(&["MSET", "skipped", "1", "cached", "1"]);
    check!(c.read(), invalidate(&["cached"]));
    // CACHING lasts a whole transaction.
    c.send(&["CLIENT", "CACHING", "yes"]);
    c.send(&["MULTI"]);
    c.send(&["GET", "t1"]);
    c.send(&["GET", "t2"]);
    c.send(&["EXEC"]);
    c.send(&["GET", "t3"]);
    writer.send(&["MSET", "t3", "1", "t1", "1"]);
    check!(c.read(), invalidate(&["t1"]));
    check!(c.send(&["CLIENT", "TRACKING", "on", "OPTOUT"]), err("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."));
    c.send(&["CLIENT", "TRACKING", "off"]);
    c.send(&["CLIENT", "TRACKING", "on", "OPTOUT"]);
    c.send(&["CLIENT", "CACHING", "no"]);
    c.send(&["GET", "skipped"]);
    c.send(&["GET", "cached"]);
    writer.send(&["MSET", "skipped", "2", "cached", "2"]);
    check!(c.read(), invalidate(&["cached"]));
}

#[test]
fn expiry_memcached_and_scripts_invalidate() {
    let (server, mc_port) = common::memcache::start_keel(&["--threads", "2"]);
    let mut c = resp3(&server);
    let mut writer = server.client();
    c.send(&["CLIENT", "TRACKING", "on"]);
    // The active expiry cycle.
    writer.send(&["SET", "soon", "v", "PX", "20"]);
    c.send(&["GET", "soon"]);
    check!(c.read(), invalidate(&["soon"]));
    // A memcached write.
    writer.send(&["SET", "item", "v"]);
    c.send(&["GET", "item"]);
    let mut mc = common::memcache::McClient::connect(mc_port);
    mc.write_raw(b"set item 0 0 1\r\nw\r\n");
    check!(c.read(), invalidate(&["item"]));
    // A script that reads tracks its declared keys; one that only writes
    // does not.
    c.send(&["EVAL", "redis.call('set', 'k3{t}', 'x')", "2", "k1{t}", "k2{t}"]);
    writer.send(&["MSET", "k2{t}", "1", "k1{t}", "1"]);
    c.send(&["EVAL", "redis.call('get', 'k3{t}')", "2", "k1{t}", "k2{t}"]);
    writer.send(&["MSET", "k2{t}", "2", "k1{t}", "2"]);
    check!(c.read(), invalidate(&["k2{t}"]));
    check!(c.read(), invalidate(&["k1{t}"]));
}

#[test]
fn the_table_limit_evicts_keys_with_invalidations() {
    let server = server();
    let (mut sub, sub_id) = redirection(&server);
    let mut c = server.client();
    check!(c.send(&["CONFIG", "GET", "tracking-table-max-keys"]), Frame::Array(vec![bulk("tracking-table-max-keys"), bulk("1000000")]));
    c.send(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id]);
    let keys: Vec<String> = (0..250).map(|i| format!("key{i}")).collect();
    for key in &keys {
        c.send(&["GET", key]);
    }
    check!(c.info_field("stats", "tracking_total_keys"), "250");
    check!(c.info_field("stats", "tracking_total_items"), "250");
    c.send(&["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    // Rounds of 100, 200...: every key but one goes, each told once.
    let mut told = std::collections::BTreeSet::new();
    while told.len() < 249 {
        let Frame::Array(items) = sub.read() else { panic!("a message") };
        let Frame::Array(keys) = &items[2] else { panic!("keys") };
        for key in keys {
            assert!(told.insert(format!("{key:?}")), "told twice");
        }
        if told.len() < 249 {
            c.send(&["PING"]);
        }
    }
    check!(c.info_field("stats", "tracking_total_keys"), "1");
    check!(sub.send(&["PING"]), Frame::Array(vec![bulk("pong"), bulk("")]));
}

#[test]
fn info_client_list_reset_and_disconnect() {
    let server = server();
    let mut c = resp3(&server);
    let mut other = server.client();
    let mut admin = server.client();
    check!(c.send(&["CLIENT", "GETREDIR"]), int(-1));
    check!(
        c.send(&["CLIENT", "TRACKINGINFO"]),
        Frame::Map(vec![
            (bulk("flags"), Frame::Set(vec![bulk("off")])),
            (bulk("redirect"), int(-1)),
            (bulk("prefixes"), Frame::Array(vec![])),
        ])
    );
    c.send(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "foo", "PREFIX", "bar", "NOLOOP"]);
    check!(
        c.send(&["CLIENT", "TRACKINGINFO"]),
        Frame::Map(vec![
            (bulk("flags"), Frame::Set(vec![bulk("on"), bulk("bcast"), bulk("noloop")])),
            (bulk("redirect"), int(0)),
            (bulk("prefixes"), Frame::Array(vec![bulk("bar"), bulk("foo")])),
        ])
    );
    let line = text(c.send(&["CLIENT", "INFO"]));
    assert!(line.contains(" flags=tB ") && line.contains(" redir=0 "), "{line}");
    other.send(&["CLIENT", "TRACKING", "on"]);
    other.send(&["GET", "k"]);
    check!(admin.info_field("clients", "tracking_clients"), "2");
    check!(admin.info_field("stats", "tracking_total_prefixes"), "2");
    check!(admin.info_field("stats", "tracking_total_keys"), "1");
    check!(c.send(&["RESET"]), Frame::Simple(b"RESET".to_vec()));
    check!(admin.info_field("clients", "tracking_clients"), "1");
    check!(admin.info_field("stats", "tracking_total_prefixes"), "0");
    drop(other);
    common::wait_for("the tracking client to go", || admin.info_field("clients", "tracking_clients") == "0");
    // Its key stays until written, as in Redis.
    check!(admin.info_field("stats", "tracking_total_keys"), "1");
    admin.send(&["SET", "k", "1"]);
    check!(admin.info_field("stats", "tracking_total_keys"), "0");
}

#[test]
fn cluster_mode_tracks_per_key() {
    let bus = common::free_port().to_string();
    let server = Server::start(&["--threads", "2", "--cluster-enabled", "yes", "--cluster-port", &bus]);
    let mut admin = server.client();
    check!(admin.send(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), ok());
    common::wait_for("the cluster to be ok", || text(admin.send(&["CLUSTER", "INFO"])).contains("cluster_state:ok"));
    let mut c = resp3(&server);
    c.send(&["CLIENT", "TRACKING", "on"]);
    check!(c.send(&["MGET", "{x}1", "{x}2"]), Frame::Array(vec![Frame::Null, Frame::Null]));
    check!(c.send(&["GET", "y"]), Frame::Null);
    admin.send(&["SET", "y", "1"]);
    check!(c.read(), invalidate(&["y"]));
    admin.send(&["MSET", "{x}2", "1", "{x}1", "1"]);
    check!(c.read(), invalidate(&["{x}2"]));
    check!(c.read(), invalidate(&["{x}1"]));
}
