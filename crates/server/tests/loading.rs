//! What clients see while the dataset loads at start: as with Redis, a
//! request waits until the load would first serve clients (the first
//! command of the log, or `loading-process-events-interval-bytes` of an
//! RDB), and is answered -LOADING from then on. `key-load-delay` slows the
//! loads down enough to be seen.

mod common;

use std::time::{Duration, Instant};

use common::{bulk, err, ok, temp_dir, Client, Server};
use keel_protocol::Frame;

const LOADING: &str = "LOADING Keel is loading the dataset in memory";

/// A directory whose data is `n` keys `k:i` = `v:i`, in an RDB base (a
/// rewrite after the writes) or as commands in the incr file.
fn dataset(tag: &str, n: usize, in_base: bool) -> std::path::PathBuf {
    let dir = temp_dir(tag);
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    for i in 0..n {
        c.write_command(&["SET", &format!("k:{i}"), &format!("v:{i}")]);
    }
    for _ in 0..n {
        assert_eq!(c.read(), ok());
    }
    if in_base {
        assert_eq!(c.cmd("BGREWRITEAOF"), Frame::Simple("Background append only file rewriting started".into()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.info_field("persistence", "aof_rewrites") != "1" || c.info_field("persistence", "aof_rewrite_in_progress") != "0" {
            assert!(Instant::now() < deadline, "the rewrite never finished");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    server.kill9();
    dir
}

/// The first reply to GET that is not -LOADING, and how many were.
fn get_once_loaded(c: &mut Client, key: &str) -> (Frame, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut refused = 0;
    loop {
        match c.send(&["GET", key]) {
            reply if reply == err(LOADING) => refused += 1,
            reply => return (reply, refused),
        }
        assert!(Instant::now() < deadline, "still loading");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_request_during_a_small_load_waits_for_the_data() {
    let dir = dataset("load-wait", 300, true);
    let log = dir.join("load.log");
    // 300 keys at 10 ms: 3 s of loading, all before 2 MB.
    let mut server = Server::launch_in(&dir, &["--key-load-delay", "10000", "--logfile", &log.display().to_string()]);
    let mut c = server.first_client();
    c.write_command(&["GET", "k:299"]);
    let log_then = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!log_then.contains("DB loaded"), "the load ended before the request was sent: {log_then}");
    // Held, not refused: the reply is the data.
    assert_eq!(c.read(), bulk("v:299"));
    let log_now = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(log_now.contains("DB loaded from append only file"), "{log_now}");
    server.dir = Some(dir);
}

#[test]
fn the_log_s_first_command_starts_answering_loading() {
    let dir = dataset("load-commands", 300, false);
    // 300 commands at 100 ms: 30 s of loading, until the delay is ended.
    let mut server = Server::launch_in(&dir, &["--key-load-delay", "100000"]);
    let mut c = server.first_client();
    assert_eq!(c.cmd("GET k:0"), err(LOADING));
    assert_eq!(c.info_field("persistence", "loading"), "1");
    // Redis's DENY_LOADING_CONFIG: its -LOADING comes before other errors.
    assert_eq!(c.cmd("CONFIG SET dir /tmp"), err(LOADING));
    assert_eq!(c.cmd("CONFIG SET appendonly no nosuch 1"), err(LOADING));
    assert_eq!(c.cmd("CONFIG SET loglevel debug"), ok());
    // The delay is read at every step of a slowed load: ending it ends
    // the wait.
    assert_eq!(c.cmd("CONFIG SET key-load-delay 0"), ok());
    let (reply, _) = get_once_loaded(&mut c, "k:299");
    assert_eq!(reply, bulk("v:299"));
    assert_eq!(c.info_field("persistence", "loading"), "0");
    server.dir = Some(dir);
}

#[test]
fn an_rdb_serves_clients_past_its_interval_bytes() {
    let dir = dataset("load-interval", 3000, true);
    // 3000 keys at 2 ms: 6 s of loading; clients are answered from the
    // first progress note past 1024 bytes, 1024 keys in.
    let mut server = Server::launch_in(&dir, &["--key-load-delay", "2000", "--loading-process-events-interval-bytes", "1024"]);
    let mut c = server.first_client();
    assert_eq!(c.cmd("GET k:2999"), err(LOADING));
    assert_eq!(c.cmd("CONFIG SET key-load-delay 0"), ok());
    let (reply, _) = get_once_loaded(&mut c, "k:2999");
    assert_eq!(reply, bulk("v:2999"));
    server.dir = Some(dir);
}

#[test]
fn test_knobs_are_hidden_from_config_get_patterns() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for name in ["key-load-delay", "loading-process-events-interval-bytes", "rdb-key-save-delay"] {
        let Frame::Array(all) = c.cmd("CONFIG GET *") else { panic!("CONFIG GET *") };
        assert!(!all.contains(&bulk(name)), "{name} in CONFIG GET *");
        let Frame::Array(named) = c.send(&["CONFIG", "GET", name]) else { panic!("CONFIG GET {name}") };
        assert_eq!(named.first(), Some(&bulk(name)));
    }
    assert_eq!(
        c.cmd("CONFIG SET loading-process-events-interval-bytes 1023"),
        err("ERR CONFIG SET failed (possibly related to argument 'loading-process-events-interval-bytes') - argument must be between 1024 and 2147483647 inclusive")
    );
}

/// A SIGTERM while loading stops the load and exits without the final save
/// (Redis's prepareForShutdown forces NOSAVE then): half a dataset never
/// replaces the dump it came from.
#[test]
fn sigterm_while_loading_exits_without_saving_half_a_dataset() {
    let dir = temp_dir("load-sigterm");
    let rdb_only = ["--appendonly", "no", "--save", "3600 1"];
    let server = Server::start_in(&dir, &rdb_only);
    let mut c = server.client();
    for i in 0..300 {
        assert_eq!(c.send(&["SET", &format!("k:{i}"), &format!("v:{i}")]), ok());
    }
    assert_eq!(c.cmd("SAVE"), ok());
    server.kill9();
    let dump = std::fs::read(dir.join("dump.rdb")).expect("dump");
    // 300 keys at 50 ms: 15 s of loading, unless stopped.
    let mut server = Server::launch_in(&dir, &[&rdb_only[..], &["--key-load-delay", "50000"]].concat());
    server.first_client();
    let sent = Instant::now();
    let status = std::process::Command::new("kill").args(["-TERM", &server.pid().to_string()]).status().expect("kill");
    assert!(status.success());
    let exited = loop {
        if let Some(status) = server.exit_status() {
            break status;
        }
        assert!(sent.elapsed() < Duration::from_secs(10), "the load went on after SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(exited.success(), "{exited}");
    assert!(std::fs::read(dir.join("dump.rdb")).expect("dump") == dump, "the dump changed");
    let server = Server::start_last_in(&dir, &rdb_only);
    assert_eq!(server.client().cmd("DBSIZE"), Frame::Integer(300));
}
