//! SHUTDOWN and SIGTERM with replicas, as Redis 7.0 runs them: a master
//! waits (writes paused) for lagging replicas up to `shutdown-timeout`
//! before it stops, SHUTDOWN ABORT ends the wait, and the clients blocked
//! in SHUTDOWN hear when it fails. A replica is made to lag by stopping
//! its process (SIGSTOP); every wait is on a condition.

mod common;

use std::time::{Duration, Instant};

use common::*;

/// A master and a replica that has acknowledged `k` = 1, then stopped.
fn master_with_a_stopped_replica(master_flags: &[&str]) -> (Server, Server, Client) {
    let master = Server::start(master_flags);
    let replica = master.start_replica();
    let mut m = master.client();
    assert_eq!(m.cmd("SET k 1"), ok());
    assert_eq!(m.cmd("WAIT 1 20000"), int(1));
    replica.signal("-STOP");
    (master, replica, m)
}

fn wait_exit(server: &mut Server) -> Duration {
    let start = Instant::now();
    wait_for("the server to exit", || !server.alive());
    start.elapsed()
}

#[test]
fn shutdown_waits_for_a_lagging_replica_to_catch_up() {
    for how in ["shutdown", "sigterm"] {
        let (mut master, replica, mut m) = master_with_a_stopped_replica(&["--shutdown-timeout", "300"]);
        assert_eq!(m.cmd("INCR k"), int(2));
        let mut blocked = master.client();
        match how {
            "shutdown" => blocked.write_command(&["SHUTDOWN"]),
            _ => master.signal("-TERM"),
        }
        wait_for("the shutdown to wait", || !m.info_field("server", "shutdown_in_milliseconds").is_empty());
        let left: u64 = m.info_field("server", "shutdown_in_milliseconds").parse().expect("a number");
        assert!(left > 200_000, "{left}");
        if how == "shutdown" {
            assert_eq!(m.info_field("clients", "blocked_clients"), "1");
        }
        // Writes wait while the master waits; reads go on.
        assert_eq!(m.cmd("GET k"), bulk("2"));
        replica.signal("-CONT");
        wait_exit(&mut master);
        assert_eq!(replica.client().cmd("GET k"), bulk("2"), "{how}: the replica had the last write");
        let log = master.log();
        assert!(log.contains("Waiting for replicas before shutting down."), "{log}");
        assert!(log.contains("1 of 1 replicas are in sync when shutting down."), "{log}");
        assert!(!log.contains("Lagging replica"), "{log}");
    }
}

#[test]
fn shutdown_stops_waiting_after_shutdown_timeout() {
    let (mut master, replica, mut m) = master_with_a_stopped_replica(&["--shutdown-timeout", "1"]);
    assert_eq!(m.cmd("INCR k"), int(2));
    master.signal("-TERM");
    let waited = wait_exit(&mut master);
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    let log = master.log();
    assert!(log.contains("Lagging replica 127.0.0.1:"), "{log}");
    assert!(log.contains("0 of 1 replicas are in sync when shutting down."), "{log}");
    replica.signal("-CONT");
}

#[test]
fn now_and_a_zero_timeout_do_not_wait() {
    for flags in [&["--shutdown-timeout", "0"][..], &["--shutdown-on-sigterm", "now"][..]] {
        let (mut master, replica, mut m) = master_with_a_stopped_replica(flags);
        assert_eq!(m.cmd("INCR k"), int(2));
        master.signal("-TERM");
        wait_exit(&mut master);
        assert!(!master.log().contains("Waiting for replicas"), "{flags:?}");
        replica.signal("-CONT");
    }
}

#[test]
fn shutdown_abort_ends_the_wait_and_answers_every_blocked_shutdown() {
    let (mut master, replica, mut m) = master_with_a_stopped_replica(&[]);
    assert_eq!(m.cmd("INCR k"), int(2));
    let (mut first, mut second) = (master.client(), master.client());
    let Frame::Integer(first_id) = first.cmd("CLIENT ID") else { panic!("CLIENT ID") };
    first.write_command(&["SHUTDOWN"]);
    wait_for("the first to block", || m.info_field("clients", "blocked_clients") == "1");
    // Not a wait that times out: CLIENT UNBLOCK passes it by (Redis 7.0.15
    // would stop on a panic there).
    assert_eq!(m.send(&["CLIENT", "UNBLOCK", &first_id.to_string()]), int(0));
    second.write_command(&["SHUTDOWN", "SAVE"]);
    wait_for("both to block", || m.info_field("clients", "blocked_clients") == "2");
    assert_eq!(m.cmd("SHUTDOWN ABORT"), ok());
    let failed = err("ERR Errors trying to SHUTDOWN. Check logs.");
    assert_eq!(first.read(), failed);
    assert_eq!(second.read(), failed);
    assert_eq!(m.cmd("SHUTDOWN ABORT"), err("ERR No shutdown in progress."));
    // Writes go on, and the server with them.
    assert_eq!(m.cmd("INCR k"), int(3));
    assert_eq!(m.info_field("server", "shutdown_in_milliseconds"), "");
    assert!(master.alive());
    assert!(master.log().contains("Shutdown manually aborted."));
    replica.signal("-CONT");
}

/// An AOF turned on is not on disk until its first rewrite has written
/// it: a shutdown then would lose the dataset at the next start, so it
/// fails (unless FORCE), after its wait for the replica.
#[test]
fn a_shutdown_during_the_first_aof_rewrite_fails_unless_forced() {
    let (mut master, replica, mut m) = master_with_a_stopped_replica(&["--appendonly", "no"]);
    let mut blocked = master.client();
    blocked.write_command(&["SHUTDOWN"]);
    wait_for("the shutdown to wait", || m.info_field("clients", "blocked_clients") == "1");
    // The rewrite crawls, 10 s per key: still under way when the replica,
    // let go below, has caught up, however slow a loaded machine is.
    assert_eq!(m.cmd("CONFIG SET rdb-key-save-delay 10000000"), ok());
    assert_eq!(m.cmd("CONFIG SET appendonly yes"), ok());
    replica.signal("-CONT");
    assert_eq!(blocked.read(), err("ERR Errors trying to SHUTDOWN. Check logs."));
    let log = master.log();
    assert!(log.contains("Writing initial AOF, can't exit."), "{log}");
    assert!(log.contains("Errors trying to shut down the server"), "{log}");
    assert!(master.alive());
    m.write_command(&["SHUTDOWN", "NOSAVE", "FORCE"]);
    wait_exit(&mut master);
    assert!(master.log().contains("Writing initial AOF. Exit anyway."));
}

#[test]
fn the_shutdown_settings_take_what_redis_takes() {
    let lines: &[&[&str]] = &[
        &["CONFIG", "GET", "shutdown-timeout"],
        &["CONFIG", "SET", "shutdown-timeout", "-1"],
        &["CONFIG", "SET", "shutdown-timeout", "5"],
        &["CONFIG", "GET", "shutdown-timeout"],
        &["CONFIG", "GET", "shutdown-on-sigterm"],
        &["CONFIG", "SET", "shutdown-on-sigterm", "nosave now"],
        &["CONFIG", "GET", "shutdown-on-sigterm"],
        &["CONFIG", "SET", "shutdown-on-sigint", "force SAVE"],
        &["CONFIG", "GET", "shutdown-on-sigint"],
        &["CONFIG", "SET", "shutdown-on-sigint", "save nosave"],
        &["CONFIG", "SET", "shutdown-on-sigint", "later"],
        &["CONFIG", "SET", "shutdown-on-sigint", "default"],
        &["CONFIG", "GET", "shutdown-on-sigint"],
        &["SHUTDOWN", "ABORT"],
        &["SHUTDOWN", "ABORT", "NOW"],
        &["SHUTDOWN", "SAVE", "NOSAVE"],
    ];
    let run = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        lines.iter().map(|argv| c.send(argv)).collect()
    };
    let keel = run(&Server::start(&[]));
    assert_eq!(keel[6], Frame::Array(vec![bulk("shutdown-on-sigterm"), bulk("nosave now")]));
    let Some(redis) = Server::start_redis(&[]) else { return };
    for ((line, keel), redis) in lines.iter().zip(&keel).zip(run(&redis)) {
        assert_eq!(*keel, redis, "{line:?}");
    }
}
