//! Black-box tests of streams over real sockets: blocking XREAD and
//! XREADGROUP served by another connection's XADD (and ended by the
//! group's or the key's removal), and a stream's life, groups and pending
//! entries included, through a kill -9 and restart, an AOF rewrite in each
//! base format, an RDB file redis-server 7.0.15 loads (and one it saves),
//! DUMP/RESTORE both ways, and replication both ways. The replies
//! themselves are compared with Redis's in `differential_streams.rs`.

mod common;

use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, simple, temp_dir, Client, Frame, Server};

const NODES: [&str; 2] = ["--stream-node-max-entries", "5"];

/// `extra` and `NODES`.
fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    extra.iter().copied().chain(NODES).collect()
}

fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn blocked_clients(c: &mut Client) -> String {
    c.info_field("clients", "blocked_clients")
}

/// Zeroes the consumers' seen times, the one figure a replay, a load or a
/// replica sets from its own clock.
fn mask_seen(frame: Frame) -> Frame {
    mask_after(frame, &[b"seen-time"])
}

fn mask_radix_nodes(frame: Frame) -> Frame {
    mask_after(frame, &[b"radix-tree-nodes"])
}

/// Zeroes, at any depth, the values that follow the names in `names`.
fn mask_after(frame: Frame, names: &[&[u8]]) -> Frame {
    match frame {
        Frame::Array(items) => {
            let mut out: Vec<Frame> = Vec::with_capacity(items.len());
            for item in items {
                let after = matches!(out.last(), Some(Frame::Bulk(b)) if names.contains(&b.as_slice()));
                out.push(if after { Frame::Integer(0) } else { mask_after(item, names) });
            }
            Frame::Array(out)
        }
        other => other,
    }
}

/// What a stream holds, as the tests compare it: its entries, XINFO
/// STREAM FULL (every group, consumer and pending entry, delivery times
/// and counts) and XINFO GROUPS (entries-read and lag).
fn stream_state(c: &mut Client, key: &str) -> Vec<Frame> {
    vec![
        c.send(&["TYPE", key]),
        c.send(&["XRANGE", key, "-", "+"]),
        mask_seen(c.send(&["XINFO", "STREAM", key, "FULL", "COUNT", "0"])),
        c.send(&["XINFO", "GROUPS", key]),
    ]
}

fn state(c: &mut Client) -> Vec<Frame> {
    ["s", "{t}e", "{t}big", "{t}star"].iter().flat_map(|k| stream_state(c, k)).collect()
}

/// A stream with every kind of state: entries over several nodes, a
/// deleted one, an approximate trim, groups with pending entries owned by
/// two consumers, an idle consumer, a NOACK read, a claim, a group whose
/// entries-read is unknown; an empty stream with a group; a bigger stream.
/// Servers run with `NODES` (the node size is the loader's own setting,
/// so a replay, a replica or a restart must share it to share nodes).
fn fill(c: &mut Client) {
    for i in 1..=30 {
        let id = format!("{i}-1");
        let value = format!("v{i}");
        let reply = if i % 7 == 0 { c.send(&["XADD", "s", &id, "other", &value, "x", "1"]) } else { c.send(&["XADD", "s", &id, "f", &value]) };
        assert_eq!(reply, bulk(&id));
    }
    // IDs the server picks: journaled as the ones they got.
    assert_eq!(c.cmd("XADD s 31-* f star"), bulk("31-0"));
    let Frame::Bulk(_) = c.cmd("XADD {t}star * f now") else { panic!("XADD *") };
    let Frame::Bulk(_) = c.cmd("XADD {t}star MAXLEN ~ 1 * f later") else { panic!("XADD *") };
    assert_eq!(c.cmd("XDEL s 3-1 30-1"), int(2));
    assert!(matches!(c.cmd("XTRIM s MAXLEN ~ 20"), Frame::Integer(n) if n > 0));
    assert_eq!(c.cmd("XGROUP CREATE s g1 0"), ok());
    assert_eq!(c.cmd("XGROUP CREATE s g2 $ ENTRIESREAD 3"), ok());
    assert_eq!(c.cmd("XGROUP CREATE s g3 10-1"), ok());
    assert!(matches!(c.cmd("XREADGROUP GROUP g1 alice COUNT 4 STREAMS s >"), Frame::Array(_)));
    assert!(matches!(c.cmd("XREADGROUP GROUP g1 bob COUNT 3 STREAMS s >"), Frame::Array(_)));
    assert!(matches!(c.cmd("XREADGROUP GROUP g3 carol COUNT 2 NOACK STREAMS s >"), Frame::Array(_)));
    let Frame::Array(pending) = c.cmd("XPENDING s g1 - + 10 alice") else { panic!("XPENDING") };
    let ids: Vec<Vec<u8>> = pending.iter().map(|p| match p {
        Frame::Array(row) => match &row[0] { Frame::Bulk(id) => id.clone(), other => panic!("{other:?}") },
        other => panic!("{other:?}"),
    }).collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(c.send(&[&b"XACK"[..], b"s", b"g1", &ids[0], &ids[1]]), int(2));
    assert!(matches!(c.send(&[&b"XCLAIM"[..], b"s", b"g1", b"bob", b"0", &ids[2], b"RETRYCOUNT", b"5"]), Frame::Array(_)));
    assert!(matches!(c.cmd("XAUTOCLAIM s g1 alice 0 0 COUNT 1 JUSTID"), Frame::Array(_)));
    assert_eq!(c.cmd("XGROUP CREATECONSUMER s g2 idle"), int(1));
    assert_eq!(c.cmd("XADD {t}e MAXLEN 0 5-5 f v"), bulk("5-5"));
    assert_eq!(c.cmd("XGROUP CREATE {t}e g $"), ok());
    assert_eq!(c.cmd("XSETID {t}e 9-9 ENTRIESADDED 7 MAXDELETEDID 6-0"), ok());
    for i in 0..300 {
        c.send(&["XADD", "{t}big", &format!("{}-{}", 1000 + i / 3, i % 3), "field", &"x".repeat(i % 50), "n", &i.to_string()]);
    }
    assert!(matches!(c.cmd("XTRIM {t}big MINID ~ 1020"), Frame::Integer(n) if n > 0));
}

/// Where two replies first differ: the path of indexes to the deepest
/// differing part, and that part on both sides.
fn first_difference(got: &Frame, want: &Frame, path: &mut Vec<usize>) -> (String, String) {
    if let (Frame::Array(g), Frame::Array(w)) = (got, want) {
        if g.len() == w.len() {
            if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
                path.push(i);
                return first_difference(&g[i], &w[i], path);
            }
        }
    }
    let show = |f: &Frame| common::readable(&format!("{f:?}")).chars().take(1500).collect::<String>();
    (show(got), show(want))
}

/// Panics naming where two states first differ, readably.
fn assert_same(got: &[Frame], want: &[Frame], what: &str) {
    let mut path = Vec::new();
    let (g, w) = first_difference(&Frame::Array(got.to_vec()), &Frame::Array(want.to_vec()), &mut path);
    assert!(got == want, "{what}: differs at {path:?}\n got:  {g}\n want: {w}");
}

fn wait_rewrite(c: &mut Client) {
    wait_until("the rewrite", || {
        c.info_field("persistence", "aof_rewrite_in_progress") == "0" && c.info_field("persistence", "aof_rewrites") != "0"
    });
}

#[test]
fn blocking_xread_is_served_by_an_xadd_from_another_connection() {
    let server = Server::start(&[]);
    let (mut a, mut b, mut c) = (server.client(), server.client(), server.client());
    assert_eq!(c.cmd("XADD s 1-1 f old"), bulk("1-1"));
    // `$` is the last ID when the reader blocked: the old entry stays out.
    a.write_command(&["XREAD", "BLOCK", "0", "STREAMS", "s", "other", "$", "$"]);
    wait_until("a blocked reader", || blocked_clients(&mut c) == "1");
    assert_eq!(b.cmd("XADD s 2-1 f new"), bulk("2-1"));
    let served = Frame::Array(vec![Frame::Array(vec![
        bulk("s"),
        Frame::Array(vec![Frame::Array(vec![bulk("2-1"), Frame::Array(vec![bulk("f"), bulk("new")])])]),
    ])]);
    assert_eq!(a.read(), served);
    // A reader waiting for entries past an ID no XADD reaches yet waits on;
    // one the same XADD serves is served.
    a.write_command(&["XREAD", "BLOCK", "0", "STREAMS", "s", "9-0"]);
    b.write_command(&["XREAD", "BLOCK", "0", "COUNT", "1", "STREAMS", "s", "2-1"]);
    wait_until("two blocked readers", || blocked_clients(&mut c) == "2");
    assert_eq!(c.cmd("XADD s 5-0 f x"), bulk("5-0"));
    assert!(matches!(b.read(), Frame::Array(_)));
    assert_eq!(blocked_clients(&mut c), "1");
    assert_eq!(c.cmd("XADD s 10-0 f y"), bulk("10-0"));
    assert!(matches!(a.read(), Frame::Array(_)));
    // A timeout answers a null array.
    assert_eq!(a.cmd("XREAD BLOCK 10 STREAMS s $"), Frame::Null);
}

#[test]
fn blocking_xreadgroup_is_served_and_ended_as_in_redis() {
    let server = Server::start(&[]);
    let (mut a, mut c) = (server.client(), server.client());
    assert_eq!(c.cmd("XGROUP CREATE s g $ MKSTREAM"), ok());
    a.write_command(&["XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">"]);
    wait_until("a blocked reader", || blocked_clients(&mut c) == "1");
    assert_eq!(c.cmd("XADD s 1-1 f v"), bulk("1-1"));
    assert!(matches!(a.read(), Frame::Array(_)));
    // Served as a read of the group: the entry is pending for alice.
    let Frame::Array(summary) = c.cmd("XPENDING s g") else { panic!("XPENDING") };
    assert_eq!(summary[0], int(1));
    // The group's destruction ends the wait with NOGROUP...
    a.write_command(&["XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">"]);
    wait_until("a blocked reader", || blocked_clients(&mut c) == "1");
    assert_eq!(c.cmd("XGROUP DESTROY s g"), int(1));
    assert_eq!(a.read(), err("NOGROUP the consumer group this client was blocked on no longer exists"));
    // ...the key's deletion with UNBLOCKED.
    assert_eq!(c.cmd("XGROUP CREATE s g $"), ok());
    a.write_command(&["XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">"]);
    wait_until("a blocked reader", || blocked_clients(&mut c) == "1");
    assert_eq!(c.cmd("DEL s"), int(1));
    assert_eq!(a.read(), err("UNBLOCKED the stream key no longer exists"));
}

#[test]
fn a_kill_9_keeps_every_acknowledged_stream_write() {
    let dir = temp_dir("streams-kill9");
    let server = Server::start_in(&dir, &args(&["--appendonly", "yes"]));
    let mut c = server.client();
    fill(&mut c);
    let before = state(&mut c);
    server.kill9();
    let server = Server::start_last_in(&dir, &args(&["--appendonly", "yes"]));
    assert_same(&state(&mut server.client()), &before, "after kill -9");
}

#[test]
fn a_rewrite_in_each_base_format_then_a_restart_keep_streams() {
    for preamble in ["yes", "no"] {
        let dir = temp_dir("streams-rewrite");
        let args = args(&["--appendonly", "yes", "--aof-use-rdb-preamble", preamble]);
        let server = Server::start_in(&dir, &args);
        let mut c = server.client();
        fill(&mut c);
        let before = state(&mut c);
        assert_eq!(c.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
        wait_rewrite(&mut c);
        // Writes after the rewrite go to the new incr file.
        assert_eq!(c.cmd("XADD s 300-0 f post"), bulk("300-0"));
        assert!(matches!(c.cmd("XREADGROUP GROUP g2 zed STREAMS s >"), Frame::Array(_)));
        let after = state(&mut c);
        assert_ne!(after, before);
        drop(c);
        server.kill9();
        let base = std::fs::read_dir(dir.join("appendonlydir"))
            .expect("appendonlydir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.contains(".base."))
            .expect("a base");
        assert!(base.ends_with(if preamble == "yes" { ".base.rdb" } else { ".base.aof" }), "{base}");
        let server = Server::start_last_in(&dir, &args);
        let (mut got, mut want) = (state(&mut server.client()), after);
        if preamble == "no" {
            // XADDs build nodes anew, as Redis's rewrite does: their master
            // IDs, and so the radix tree's inner nodes, may differ.
            got = got.into_iter().map(mask_radix_nodes).collect();
            want = want.into_iter().map(mask_radix_nodes).collect();
        }
        assert_same(&got, &want, &format!("aof-use-rdb-preamble {preamble}"));
    }
}

#[test]
fn redis_loads_keels_dump_and_keel_loads_redis_dump() {
    let dir = temp_dir("streams-rdb");
    let before = {
        let server = Server::start_in(&dir, &args(&["--appendonly", "no"]));
        let mut c = server.client();
        fill(&mut c);
        assert_eq!(c.cmd("SAVE"), ok());
        state(&mut c)
    };
    let d = dir.display().to_string();
    let Some(redis) = Server::start_redis(&args(&["--dir", &d, "--dbfilename", "dump.rdb"])) else { return };
    let mut r = redis.client();
    assert_same(&state(&mut r), &before, "redis-server loads Keel's streams");
    // Redis's own writes, saved by Redis, load in Keel.
    assert!(matches!(r.cmd("XREADGROUP GROUP g2 dave STREAMS s 0"), Frame::Array(_)));
    assert_eq!(r.cmd("XADD s 99-0 f after"), bulk("99-0"));
    assert!(matches!(r.cmd("XREADGROUP GROUP g2 dave STREAMS s >"), Frame::Array(_)));
    assert_eq!(r.cmd("XADD {t}new 1-1 a b"), bulk("1-1"));
    let redis_state = state(&mut r);
    assert_eq!(r.cmd("SAVE"), ok());
    drop(redis);
    let server = Server::start_last_in(&dir, &args(&["--appendonly", "no"]));
    let mut c = server.client();
    assert_same(&state(&mut c), &redis_state, "Keel loads Redis's");
    // And Keel goes on from there as Redis would.
    assert_eq!(c.cmd("XADD s 100-0 f more"), bulk("100-0"));
}

#[test]
fn dump_payloads_restore_in_the_other_server() {
    let keel = Server::start(&NODES);
    let mut k = keel.client();
    fill(&mut k);
    let Some(redis) = Server::start_redis(&NODES) else { return };
    let mut r = redis.client();
    for key in ["s", "{t}e", "{t}big", "{t}star"] {
        let Frame::Bulk(payload) = k.send(&["DUMP", key]) else { panic!("DUMP {key}") };
        assert_eq!(r.send(&[b"RESTORE".as_slice(), key.as_bytes(), b"0", &payload]), ok());
        assert_eq!(stream_state(&mut r, key), stream_state(&mut k, key), "{key} in Redis");
        let Frame::Bulk(back) = r.send(&["DUMP", key]) else { panic!("DUMP {key} from Redis") };
        assert_eq!(k.send(&[b"RESTORE".as_slice(), b"copy", b"0", &back, b"REPLACE"]), ok());
        assert_eq!(stream_state(&mut k, "copy"), stream_state(&mut k, key), "{key} back in Keel");
    }
}

#[test]
fn a_redis_replica_of_keel_and_a_keel_replica_of_redis_hold_the_same_streams() {
    let keel = Server::start(&args(&["--appendonly", "no"]));
    let port = keel.port.to_string();
    let Some(redis) = Server::start_redis(&args(&["--replicaof", "127.0.0.1", &port])) else { return };
    let mut r = redis.client();
    wait_until("the Redis replica's sync", || r.info_field("replication", "master_link_status") == "up");
    let mut k = keel.client();
    fill(&mut k);
    // XREADGROUP and XACK after the sync go as the commands they imply.
    assert_eq!(k.cmd("XADD s 200-0 f last"), bulk("200-0"));
    assert!(matches!(k.cmd("XREADGROUP GROUP g2 erin STREAMS s >"), Frame::Array(_)));
    assert_eq!(k.cmd("XACK s g2 200-0"), int(1));
    assert_eq!(k.cmd("SET done 1"), ok());
    wait_until("the Redis replica's catch-up", || r.cmd("GET done") == bulk("1"));
    assert_same(&state(&mut r), &state(&mut k), "a Redis replica of Keel");

    // The other way: Keel following Redis.
    let redis_master = Server::start_redis(&NODES).expect("redis-server is installed");
    let mut m = redis_master.client();
    let port = redis_master.port.to_string();
    let replica = Server::start(&args(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]));
    let mut kr = replica.client();
    wait_until("the Keel replica's sync", || kr.info_field("replication", "master_link_status") == "up");
    fill(&mut m);
    assert_eq!(m.cmd("XADD s 200-0 f last"), bulk("200-0"));
    assert!(matches!(m.cmd("XREADGROUP GROUP g2 erin STREAMS s >"), Frame::Array(_)));
    assert_eq!(m.cmd("SET done 1"), ok());
    wait_until("the Keel replica's catch-up", || kr.cmd("GET done") == bulk("1"));
    // Redis propagates a read as XCLAIMs, which do not carry the group's
    // entries-read: its replicas (Keel or Redis) lose the count, and the
    // lag derived from it. The rest must match.
    let counters = |f: Frame| mask_after(f, &[b"entries-read", b"lag"]);
    let got: Vec<Frame> = state(&mut kr).into_iter().map(counters).collect();
    let want: Vec<Frame> = state(&mut m).into_iter().map(counters).collect();
    assert_same(&got, &want, "a Keel replica of Redis");
}

/// The generic key commands on a stream, and DEBUG DIGEST-VALUE, against
/// redis-server: TYPE, OBJECT ENCODING, COPY, SCAN ... TYPE, MEMORY USAGE,
/// and Redis's digest of the entries (groups are not digested).
#[test]
fn key_commands_and_digests_treat_streams_as_redis_does() {
    let Some(redis) = Server::start_redis(&args(&["--enable-debug-command", "yes"])) else { return };
    let keel = Server::start(&args(&["--enable-debug-command", "yes"]));
    let (mut r, mut k) = (redis.client(), keel.client());
    for c in [&mut r, &mut k] {
        fill(c);
        assert_eq!(c.cmd("SET plain x"), ok());
    }
    for line in [
        "TYPE s",
        "OBJECT ENCODING s",
        "COPY s {t}copy",
        "COPY s plain",
        "XRANGE {t}copy - +",
        "SCAN 0 TYPE stream COUNT 1000",
        "SORT s",
        "XINFO GROUPS {t}copy",
        "DEBUG DIGEST-VALUE s {t}e {t}big {t}copy plain",
        "XADD plain 1-1 f v",
    ] {
        let (want, got) = (r.cmd(line), k.cmd(line));
        let sorted = |f: Frame| match f {
            // SCAN's order is the table's: compare the keys as a set.
            Frame::Array(mut parts) if line.starts_with("SCAN") => {
                if let Frame::Array(keys) = &mut parts[1] {
                    keys.sort_by_key(|k| format!("{k:?}"));
                }
                Frame::Array(parts)
            }
            other => other,
        };
        assert_eq!(sorted(got), sorted(want), "{line}");
    }
    // A copy is a stream of its own, groups included.
    assert_same(&stream_state(&mut k, "{t}copy")[1..], &stream_state(&mut k, "s")[1..], "COPY");
    assert!(matches!(k.cmd("MEMORY USAGE {t}big"), Frame::Integer(n) if n > 9000), "the entries' bytes are counted");
}
