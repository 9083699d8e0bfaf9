//! FAILOVER, as Redis 6.2+ runs it: a master hands over to one of its
//! replicas without losing a write and without a full sync, Keel and
//! Debian's redis-server 7.0.15 on either side. Every wait is on a
//! condition, never a fixed sleep.

mod common;

use common::*;

fn role(server: &Server) -> String {
    server.client().info_field("replication", "role")
}

fn failover_state(server: &Server) -> String {
    server.client().info_field("replication", "master_failover_state")
}

fn stat(server: &Server, field: &str) -> String {
    server.client().info_field("stats", field)
}

/// The refusals, word for word as redis-server's.
#[test]
fn failover_refuses_what_redis_refuses() {
    let keel = Server::start(&["--appendonly", "no"]);
    let Some(redis) = Server::start_redis(&[]) else { return };
    for master in [&keel, &redis] {
        let mut m = master.client();
        let port = master.port.to_string();
        assert_eq!(m.cmd("FAILOVER"), err("ERR FAILOVER requires connected replicas."), "port {port}");
        assert_eq!(m.cmd("FAILOVER ABORT"), err("ERR No failover in progress."));
        assert_eq!(m.cmd("FAILOVER TIMEOUT 0"), err("ERR FAILOVER timeout must be greater than 0"));
        assert_eq!(m.cmd("FAILOVER TIMEOUT x"), err("ERR value is not an integer or out of range"));
        assert_eq!(m.cmd("FAILOVER TO 127.0.0.1 x"), err("ERR value is not an integer or out of range"));
        assert_eq!(m.cmd("FAILOVER FORCE FORCE"), err("ERR syntax error"));
        assert_eq!(m.cmd("FAILOVER TO 127.0.0.1"), err("ERR syntax error"));
        assert_eq!(m.cmd("FAILOVER TIMEOUT 10 TIMEOUT 10"), err("ERR syntax error"));
    }
    let keel_replica = keel.start_replica();
    let Some(redis_replica) = Server::start_redis(&["--replicaof", "127.0.0.1", &redis.port.to_string()]) else { return };
    redis_replica.wait_link_up();
    for (master, replica) in [(&keel, &keel_replica), (&redis, &redis_replica)] {
        let mut m = master.client();
        let port = replica.port.to_string();
        assert_eq!(
            m.cmd("FAILOVER FORCE TIMEOUT 100"),
            err("ERR FAILOVER with force option requires both a timeout and target HOST and IP.")
        );
        assert_eq!(
            m.send(&["FAILOVER", "TO", "127.0.0.1", &port, "FORCE"]),
            err("ERR FAILOVER with force option requires both a timeout and target HOST and IP.")
        );
        assert_eq!(m.cmd("FAILOVER TO 127.0.0.1 1"), err("ERR FAILOVER target HOST and PORT is not a replica."));
        let mut r = replica.client();
        assert_eq!(r.send(&["FAILOVER", "TO", "127.0.0.1", &port]), err("ERR FAILOVER is not valid when server is a replica."));
        // A replica's master that is no replica refuses PSYNC FAILOVER.
        let replid = m.info_field("replication", "master_replid");
        assert_eq!(m.send(&["PSYNC", &replid, "1", "FAILOVER"]), err("ERR PSYNC FAILOVER can't be sent to a master."));
        assert_eq!(r.send(&["PSYNC", &"0".repeat(40), "1", "FAILOVER"]), err("ERR PSYNC FAILOVER replid must match my replid."));
        assert_eq!(role(replica), "slave", "a refused request changes nothing");
    }
}

/// A Keel master, a Keel and a redis-server replica. FAILOVER TO the
/// Keel replica; then, from it, FAILOVER to any replica while only the
/// redis-server one can catch up; then a redis-server master hands back
/// to a Keel replica. Every move is a partial resync, and a write held by
/// the pause is answered once the server is a replica.
#[test]
fn failover_hands_over_both_ways_without_a_full_sync() {
    let keel_a = Server::start(&["--appendonly", "no"]);
    let mut a = keel_a.client();
    assert_eq!(a.cmd("SET before 1"), ok());
    let keel_b = keel_a.start_replica();
    let Some(redis_c) = Server::start_redis(&["--replicaof", "127.0.0.1", &keel_a.port.to_string()]) else { return };
    redis_c.wait_link_up();
    assert_eq!(a.cmd("INCR n"), int(1));
    assert_eq!(a.cmd("WAIT 2 20000"), int(2));

    // A Keel master to a Keel replica.
    assert_eq!(a.send(&["FAILOVER", "TO", "127.0.0.1", &keel_b.port.to_string()]), ok());
    wait_for("the failover's end", || failover_state(&keel_a) == "no-failover");
    assert_eq!(role(&keel_b), "master");
    assert_eq!(role(&keel_a), "slave");
    keel_a.wait_link_up();
    assert!(keel_b.log().contains("MASTER MODE enabled (failover request from"));
    assert_eq!(stat(&keel_b, "sync_full"), "0");
    assert_eq!(stat(&keel_b, "sync_partial_ok"), "1");
    assert_eq!(redis_c.client().send(&["REPLICAOF", "127.0.0.1", &keel_b.port.to_string()]), ok());
    redis_c.wait_link_up();
    assert_eq!(stat(&keel_b, "sync_partial_ok"), "2", "the redis-server replica continued too");
    let mut b = keel_b.client();
    assert_eq!(b.cmd("INCR n"), int(2));
    assert_eq!(b.cmd("WAIT 2 20000"), int(2));

    // To any replica: the Keel one is stopped, so the redis-server one is
    // the first to reach the stream's end.
    keel_a.signal("-STOP");
    assert_eq!(b.cmd("INCR n"), int(3));
    assert_eq!(b.cmd("FAILOVER"), ok());
    wait_for("the failover's end", || failover_state(&keel_b) == "no-failover");
    keel_a.signal("-CONT");
    assert_eq!(role(&redis_c), "master");
    assert_eq!(role(&keel_b), "slave");
    keel_b.wait_link_up();
    assert_eq!(a.send(&["REPLICAOF", "127.0.0.1", &redis_c.port.to_string()]), ok());
    keel_a.wait_link_up();
    assert_eq!(stat(&redis_c, "sync_full"), "0");
    assert_eq!(stat(&redis_c, "sync_partial_ok"), "2");

    // A redis-server master to a Keel replica (which, as the first master,
    // counted two full syncs).
    assert_eq!(stat(&keel_a, "sync_full"), "2");
    let mut c = redis_c.client();
    assert_eq!(c.cmd("INCR n"), int(4));
    assert_eq!(c.cmd("WAIT 2 20000"), int(2));
    assert_eq!(c.send(&["FAILOVER", "TO", "127.0.0.1", &keel_a.port.to_string()]), ok());
    wait_for("the failover's end", || failover_state(&redis_c) == "no-failover");
    assert_eq!(role(&keel_a), "master");
    assert_eq!(stat(&keel_a, "sync_full"), "2");
    assert_eq!(a.cmd("INCR n"), int(5));
    for server in [&keel_a, &keel_b, &redis_c] {
        let mut s = server.client();
        wait_for("the write everywhere", || s.cmd("GET n") == bulk("5"));
        assert_eq!(s.cmd("GET before"), bulk("1"), "port {}", server.port);
    }
}

/// Writes wait while the target catches up; without FORCE a TIMEOUT gives
/// up and they go on; FAILOVER ABORT does the same; a target that refuses
/// the PSYNC makes the master a master again, and the write held meanwhile
/// is answered by it.
#[test]
fn failover_waits_then_gives_up_or_is_aborted_or_refused() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    let replica = master.start_replica();
    let target = ["FAILOVER", "TO", "127.0.0.1", &replica.port.to_string()];

    replica.signal("-STOP");
    assert_eq!(m.cmd("SET case 1"), ok());
    assert_eq!(m.send(&[&target[..], &["TIMEOUT", "300"]].concat()), ok());
    assert_eq!(failover_state(&master), "waiting-for-sync");
    let mut writer = master.client();
    writer.write_command(&["SET", "held", "1"]);
    assert_eq!(m.cmd("GET case"), bulk("1"), "reads go on");
    assert_eq!(writer.read(), ok(), "the write goes on once the failover gave up");
    assert_eq!(failover_state(&master), "no-failover");
    assert!(master.log().contains("aborted: Replica never caught up before timeout"));

    assert_eq!(m.send(&[&target[..], &["TIMEOUT", "60000"]].concat()), ok());
    assert_eq!(m.send(&target), err("ERR FAILOVER already in progress."));
    assert_eq!(m.cmd("REPLICAOF NO ONE"), err("ERR REPLICAOF not allowed while failing over."));
    // The failover's pause and CLIENT PAUSE's each end alone, as Redis's
    // pauses per purpose: CLIENT UNPAUSE leaves the failover's, and
    // FAILOVER ABORT leaves a CLIENT PAUSE's.
    writer.write_command(&["SET", "held", "2"]);
    let blocked = |server: &Server| server.client().info_field("clients", "blocked_clients");
    wait_for("the write to be held", || blocked(&master) == "1");
    assert_eq!(m.cmd("CLIENT PAUSE 60000 WRITE"), ok());
    assert_eq!(m.cmd("CLIENT UNPAUSE"), ok());
    assert_eq!(m.cmd("GET held"), bulk("1"), "the failover still holds the write");
    assert_eq!(blocked(&master), "1");
    assert_eq!(m.cmd("CLIENT PAUSE 60000 WRITE"), ok());
    assert_eq!(m.cmd("FAILOVER ABORT"), ok());
    assert_eq!(failover_state(&master), "no-failover");
    assert_eq!(m.cmd("GET held"), bulk("1"), "CLIENT PAUSE still holds the write");
    assert_eq!(blocked(&master), "1");
    assert_eq!(m.cmd("CLIENT UNPAUSE"), ok());
    assert_eq!(writer.read(), ok());
    assert_eq!(m.cmd("SET after 1"), ok());
    replica.signal("-CONT");
    assert_eq!(m.cmd("WAIT 1 20000"), int(1));

    // The target refuses PSYNC: the master is one again.
    assert_eq!(replica.client().cmd("ACL SETUSER default -psync"), ok());
    assert_eq!(m.send(&target), ok());
    wait_for("the failover's end", || failover_state(&master) == "no-failover");
    assert!(master.log().contains("Failover target rejected psync request"));
    assert_eq!(role(&master), "master");
    assert_eq!(m.cmd("SET again 1"), ok());
    assert_eq!(replica.client().cmd("ACL SETUSER default +psync"), ok());
    replica.wait_link_up();
    assert_eq!(stat(&master, "sync_full"), "1", "only the first sync was full");
    let mut r = replica.client();
    wait_for("the last write", || r.cmd("GET again") == bulk("1"));
}
