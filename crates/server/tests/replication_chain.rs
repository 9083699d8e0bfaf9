//! Chains of replicas, Keel and Debian's redis-server 7.0.15 mixed: a
//! replica serving replicas of its own passes its master's stream on as it
//! came, under the master's replid and offsets, so the whole chain shares
//! one history; a promoted replica keeps serving PSYNCs of the old one.
//! Every wait is on a condition, never a fixed sleep.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;

/// A redis-server replica of `master`, once its link is up; `None`
/// without redis-server.
fn redis_replica_of(master: &Server) -> Option<Server> {
    let replica = Server::start_redis(&["--replicaof", "127.0.0.1", &master.port.to_string()])?;
    replica.wait_link_up();
    Some(replica)
}

/// Waits until every server of the chain shows `top`'s replid and offset.
fn wait_same_history(top: &Server, chain: &[&Server]) {
    let mut t = top.client();
    let replid = t.info_field("replication", "master_replid");
    let offset = t.info_field("replication", "master_repl_offset");
    for server in chain {
        let mut c = server.client();
        wait_for("the chain's history", || {
            c.info_field("replication", "master_replid") == replid && c.info_field("replication", "master_repl_offset") == offset
        });
    }
}

/// SHUTDOWN, which saves (`save` rules are set) and closes the connection.
fn shutdown(c: &mut Client) {
    c.write_command(&["SHUTDOWN"]);
    assert!(c.read_to_close().is_empty(), "no reply to a successful SHUTDOWN");
}

fn stat(server: &Server, field: &str) -> String {
    server.client().info_field("stats", field)
}

/// A Keel master, a Keel replica of it, and below that a Keel and a
/// redis-server replica: the replicas below sync in full from the one in
/// the middle while the master's stream is in database 9, so the stream
/// they get goes on with no SELECT; the RDB's `repl-stream-db` says where
/// (both ways: Keel writes it, redis-server and Keel read it).
#[test]
fn a_replicas_replicas_share_the_masters_history_and_database() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SET zero 0"), ok());
    assert_eq!(m.cmd("SELECT 9"), ok());
    assert_eq!(m.cmd("SET nine 9"), ok());
    let middle = master.start_replica();
    let mut below = vec![middle.start_replica()];
    below.extend(redis_replica_of(&middle));
    assert_eq!(m.cmd("INCR counter"), int(1));
    assert_eq!(m.cmd("MULTI"), ok());
    assert_eq!(m.cmd("INCR counter"), simple("QUEUED"));
    assert_eq!(m.cmd("SET other x"), simple("QUEUED"));
    assert_eq!(m.cmd("EXEC"), Frame::Array(vec![int(2), ok()]));
    let chain: Vec<&Server> = std::iter::once(&middle).chain(&below).collect();
    wait_same_history(&master, &chain);
    for server in &chain {
        let mut c = server.client();
        assert_eq!(c.cmd("GET zero"), bulk("0"), "port {}", server.port);
        assert_eq!(c.cmd("SELECT 9"), ok());
        assert_eq!(c.cmd("MGET nine counter other"), Frame::Array(vec![bulk("9"), bulk("2"), bulk("x")]), "port {}", server.port);
        assert_eq!(c.cmd("SELECT 0"), ok());
        assert_eq!(c.cmd("EXISTS counter"), int(0), "port {}", server.port);
    }
}

/// The same with redis-server in the middle: a Keel replica below it
/// takes the stream's database from redis-server's RDB.
#[test]
fn a_keel_replica_of_a_redis_replica_runs_the_stream_in_its_database() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SELECT 9"), ok());
    assert_eq!(m.cmd("SET nine 9"), ok());
    let Some(middle) = redis_replica_of(&master) else { return };
    let below = middle.start_replica();
    assert_eq!(m.cmd("SET after 1"), ok());
    wait_same_history(&master, &[&middle, &below]);
    let mut b = below.client();
    assert_eq!(b.cmd("SELECT 9"), ok());
    assert_eq!(b.cmd("MGET nine after"), Frame::Array(vec![bulk("9"), bulk("1")]));
    assert_eq!(b.cmd("SELECT 0"), ok());
    assert_eq!(b.cmd("DBSIZE"), int(0));
}

/// A master and three replicas of it (two Keel, one redis-server). One
/// Keel replica is promoted: the old history becomes its secondary id, up
/// to where it left it. The other replicas, then the old master itself
/// (which turns its own history into a cached master, as Redis does), move
/// under it and continue with a partial resync: no full sync anywhere.
#[test]
fn a_promoted_replica_continues_its_siblings_and_its_old_master() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    assert_eq!(m.cmd("SET before 1"), ok());
    let promoted = master.start_replica();
    let mut siblings = vec![master.start_replica()];
    siblings.extend(redis_replica_of(&master));
    assert_eq!(m.cmd("INCR n"), int(1));
    let all: Vec<&Server> = std::iter::once(&promoted).chain(&siblings).collect();
    wait_same_history(&master, &all);
    let old_replid = m.info_field("replication", "master_replid");
    let old_offset: i64 = m.info_field("replication", "master_repl_offset").parse().expect("offset");

    let mut p = promoted.client();
    assert_eq!(p.cmd("REPLICAOF NO ONE"), ok());
    assert_eq!(p.info_field("replication", "master_replid2"), old_replid);
    assert_eq!(p.info_field("replication", "second_repl_offset"), (old_offset + 1).to_string());
    assert_ne!(p.info_field("replication", "master_replid"), old_replid);
    assert_eq!(p.cmd("INCR n"), int(2));

    let port = promoted.port.to_string();
    for server in siblings.iter().chain([&master]) {
        assert_eq!(server.client().send(&["REPLICAOF", "127.0.0.1", &port]), ok());
    }
    let moved: Vec<&Server> = siblings.iter().chain([&master]).collect();
    for server in &moved {
        server.wait_link_up();
    }
    wait_same_history(&promoted, &moved);
    assert_eq!(stat(&promoted, "sync_full"), "0");
    assert_eq!(stat(&promoted, "sync_partial_ok"), moved.len().to_string());
    for server in &moved {
        let mut c = server.client();
        assert_eq!(c.cmd("MGET before n"), Frame::Array(vec![bulk("1"), bulk("2")]), "port {}", server.port);
    }
}

/// A replica whose old master wrote on past the promotion point cannot
/// continue: it asks beyond the secondary id's end, and syncs in full
/// (Redis's words in the log).
#[test]
fn a_psync_past_the_secondary_ids_end_syncs_in_full() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    let promoted = master.start_replica();
    assert_eq!(m.cmd("SET a 1"), ok());
    wait_same_history(&master, &[&promoted]);
    assert_eq!(promoted.client().cmd("REPLICAOF NO ONE"), ok());
    assert_eq!(m.cmd("SET written 1"), ok());
    assert_eq!(m.send(&["REPLICAOF", "127.0.0.1", &promoted.port.to_string()]), ok());
    master.wait_link_up();
    assert_eq!(stat(&promoted, "sync_full"), "1");
    assert_eq!(stat(&promoted, "sync_partial_err"), "1");
    assert_eq!(m.cmd("EXISTS written"), int(0));
    let log = promoted.log();
    assert!(log.contains("Partial resynchronization not accepted: Requested offset for second ID was"), "{log}");
}

/// A Keel replica moved to a promoted redis-server sibling continues with a
/// partial resync: its offsets are its master's, byte for byte.
#[test]
fn a_keel_replica_continues_under_a_promoted_redis_sibling() {
    let Some(master) = Server::start_redis(&["--repl-diskless-sync-delay", "0"]) else { return };
    let mut m = master.client();
    assert_eq!(m.cmd("SELECT 3"), ok());
    assert_eq!(m.cmd("SET a 1"), ok());
    let Some(promoted) = redis_replica_of(&master) else { return };
    let keel = master.start_replica();
    assert_eq!(m.cmd("SET b 2"), ok());
    wait_same_history(&master, &[&promoted, &keel]);
    assert_eq!(promoted.client().cmd("REPLICAOF NO ONE"), ok());
    assert_eq!(keel.client().send(&["REPLICAOF", "127.0.0.1", &promoted.port.to_string()]), ok());
    keel.wait_link_up();
    let mut p = promoted.client();
    assert_eq!(p.cmd("SELECT 3"), ok());
    assert_eq!(p.cmd("SET c 3"), ok());
    wait_same_history(&promoted, &[&keel]);
    assert_eq!(stat(&promoted, "sync_full"), "0");
    assert_eq!(stat(&promoted, "sync_partial_ok"), "1");
    let mut k = keel.client();
    assert_eq!(k.cmd("SELECT 3"), ok());
    assert_eq!(k.cmd("MGET a b c"), Frame::Array(vec![bulk("1"), bulk("2"), bulk("3")]));
}

/// A replica whose master's link is down refuses PSYNC and SYNC, as Redis.
#[test]
fn a_replica_without_its_masters_link_refuses_to_serve_replicas() {
    let nowhere = keel_testkit::free_port().to_string();
    let keel = Server::start(&["--replicaof", "127.0.0.1", &nowhere]);
    let redis = Server::start_redis(&["--replicaof", "127.0.0.1", &nowhere]);
    for server in std::iter::once(&keel).chain(&redis) {
        for request in [&["PSYNC", "?", "-1"][..], &["SYNC"]] {
            let mut link = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            link.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
            link.write_all(&encode(request)).expect("write");
            let mut reply = [0u8; 128];
            let n = link.read(&mut reply).expect("read");
            assert_eq!(
                String::from_utf8_lossy(&reply[..n]),
                "-NOMASTERLINK Can't SYNC while not connected with my master\r\n",
                "port {}",
                server.port
            );
        }
    }
}

/// A master restarted from its RDB keeps the history the file was saved
/// with as its secondary id, and sends first the DELs of the keys its load
/// found expired; a replica restarted from its RDB PSYNCs with the history
/// in it. Neither needs a full sync, as with Redis's RDB aux fields.
#[test]
fn restarts_from_an_rdb_continue_with_a_partial_resync() {
    let args = ["--appendonly", "no", "--save", "3600 1", "--enable-debug-command", "yes"];
    let master_dir = temp_dir("restart-master");
    let master = Server::start_in(&master_dir, &args);
    let mut m = master.client();
    assert_eq!(m.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    assert_eq!(m.cmd("SET kept 1"), ok());
    assert_eq!(m.cmd("SELECT 5"), ok());
    assert_eq!(m.cmd("SET brief x PX 100"), ok());
    let replica_dir = temp_dir("restart-replica");
    let replica_args = |port: u16| [&args[..], &["--replicaof", "127.0.0.1", &port.to_string()]].concat().iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let start_replica = |port: u16| {
        let owned = replica_args(port);
        Server::start_in(&replica_dir, &owned.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let replica = start_replica(master.port);
    replica.wait_link_up();
    wait_same_history(&master, &[&replica]);
    let replid = m.info_field("replication", "master_replid");
    let offset: u64 = m.info_field("replication", "master_repl_offset").parse().expect("offset");
    let mut r = replica.client();
    assert_eq!(r.cmd("SELECT 5"), ok());
    wait_for("the key's time to pass", || r.cmd("EXISTS brief") == int(0));
    assert_eq!(r.cmd("DBSIZE"), int(1), "a replica keeps an expired key for its master's DEL");
    shutdown(&mut m);

    let master = Server::start_last_in(&master_dir, &args);
    let mut m = master.client();
    assert_eq!(m.info_field("replication", "master_replid2"), replid);
    assert_eq!(m.info_field("replication", "second_repl_offset"), (offset + 1).to_string());
    assert_eq!(m.info_field("persistence", "rdb_last_load_keys_expired"), "1");
    let dels: u64 = m.info_field("replication", "repl_backlog_histlen").parse().expect("histlen");
    assert!(dels > 0, "the expired key's DEL is in the backlog");
    assert_eq!(m.info_field("replication", "master_repl_offset"), (offset + dels).to_string());
    assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), ok());
    replica.wait_link_up();
    wait_same_history(&master, &[&replica]);
    assert_eq!(stat(&master, "sync_full"), "0");
    assert_eq!(stat(&master, "sync_partial_ok"), "1");
    assert_eq!(r.cmd("DBSIZE"), int(0), "the master's DEL reached it");

    // The replica restarted from its own RDB continues too.
    shutdown(&mut r);
    let replica = start_replica(master.port);
    replica.wait_link_up();
    assert_eq!(m.cmd("SET after 1"), ok());
    wait_same_history(&master, &[&replica]);
    assert_eq!(stat(&master, "sync_full"), "0");
    assert_eq!(stat(&master, "sync_partial_ok"), "2");
    assert_eq!(replica.client().cmd("MGET kept after"), Frame::Array(vec![bulk("1"), bulk("1")]));
    let _ = std::fs::remove_dir_all(&replica_dir);
}
