//! `save` rules and their cron, `stop-writes-on-bgsave-error`, SHUTDOWN's
//! final save (and SIGTERM's), DEBUG RELOAD: checked against Keel and,
//! where the behaviour is Redis's, against redis-server 7.0.15 too.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bulk, err, ok, simple, temp_dir, Client, Frame, Server};

/// Waits for a BGSAVE to end.
fn wait_bgsave(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "BGSAVE did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_exit(server: &mut Server) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.alive() {
        assert!(Instant::now() < deadline, "server still running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The keys of database 0 in a dump, sorted.
fn keys_in(path: &Path) -> Vec<Vec<u8>> {
    let file = std::fs::File::open(path).expect("open dump");
    let mut reader = keel_rdb::RdbReader::new(std::io::BufReader::new(file)).expect("header");
    let mut keys = Vec::new();
    while let Some(item) = reader.next_item().expect("valid file") {
        if let keel_rdb::RdbItem::Entry(e) = item {
            keys.push(e.key);
        }
    }
    keys.sort();
    keys
}

fn keys(names: &[&str]) -> Vec<Vec<u8>> {
    let mut k: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
    k.sort();
    k
}

const MISCONF: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

#[test]
fn save_rules_are_read_set_and_shown_as_redis() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    let get_save = |c: &mut Client| c.cmd("CONFIG GET save");
    assert_eq!(get_save(&mut c), Frame::Array(vec![bulk("save"), bulk("3600 1 300 100 60 10000")]));
    assert_eq!(c.send(&["CONFIG", "SET", "save", "100 5 20 1"]), ok());
    assert_eq!(get_save(&mut c), Frame::Array(vec![bulk("save"), bulk("100 5 20 1")]));
    for bad in ["1 2 3", "0 1", "x 1", "1 -1"] {
        assert_eq!(
            c.send(&["CONFIG", "SET", "save", bad]),
            err("ERR CONFIG SET failed (possibly related to argument 'save') - Invalid save parameters"),
            "{bad}"
        );
    }
    assert_eq!(c.send(&["CONFIG", "SET", "save", ""]), ok());
    assert_eq!(get_save(&mut c), Frame::Array(vec![bulk("save"), bulk("")]));
    drop(server);
    let server = Server::start(&["--appendonly", "no", "--save", "10 1", "--save", "20 2"]);
    assert_eq!(get_save(&mut server.client()), Frame::Array(vec![bulk("save"), bulk("10 1 20 2")]));
    let server = Server::start(&["--appendonly", "no", "--save", ""]);
    assert_eq!(get_save(&mut server.client()), Frame::Array(vec![bulk("save"), bulk("")]));
}

/// Watches rdb_saves stay at `saves` for `span`: longer than the rules'
/// seconds, so a rule wrongly met would have fired.
fn assert_no_save_for(c: &mut Client, saves: &str, span: Duration) {
    let until = Instant::now() + span;
    while Instant::now() < until {
        assert_eq!(c.info_field("persistence", "rdb_saves"), saves);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_met_save_rule_starts_a_bgsave() {
    let server = Server::start(&["--appendonly", "no", "--save", "1 2"]);
    let dir = server.dir.clone().expect("dir");
    let mut c = server.client();
    assert_eq!(c.cmd("SET a 1"), ok());
    // One change of two: more than a second passes and no save starts.
    assert_no_save_for(&mut c, "0", Duration::from_millis(1500));
    assert_eq!(c.info_field("persistence", "rdb_changes_since_last_save"), "1");
    assert_eq!(c.cmd("SET b 2"), ok());
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.info_field("persistence", "rdb_saves") != "1" {
        assert!(Instant::now() < deadline, "the rule never fired");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_bgsave(&mut c);
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_status"), "ok");
    assert_eq!(c.info_field("persistence", "rdb_changes_since_last_save"), "0");
    assert_eq!(keys_in(&dir.join("dump.rdb")), keys(&["a", "b"]));
    // No rules: no more saves, however many changes.
    assert_eq!(c.send(&["CONFIG", "SET", "save", ""]), ok());
    for i in 0..10 {
        c.cmd(&format!("SET k{i} v"));
    }
    assert_no_save_for(&mut c, "1", Duration::from_millis(1500));
}

/// A failed BGSAVE, then writes, reads, a transaction, the switches that
/// lift the refusal, and a good save. The dump path is made a directory
/// so that the rename fails even for root. Steps starting with `!` act on
/// the directory or wait; the others are commands, their replies kept.
fn failed_bgsave_sequence(c: &mut Client, dir: &Path) -> Vec<Frame> {
    let steps = [
        "SET x x", "!mkdir", "BGSAVE", "!status", "GET x", "SET x y", "PING", "EXISTS x", "MULTI", "GET x",
        "SET x y", "EXEC", "CONFIG SET stop-writes-on-bgsave-error no", "SET x z",
        "CONFIG SET stop-writes-on-bgsave-error yes", "DEL x", "!rmdir", "BGSAVE", "!status", "SET x w",
    ];
    let dump = dir.join("dump.rdb");
    let mut replies = Vec::new();
    for step in steps {
        match step {
            "!mkdir" => std::fs::create_dir(&dump).expect("mkdir"),
            "!rmdir" => std::fs::remove_dir(&dump).expect("rmdir"),
            "!status" => {
                wait_bgsave(c);
                replies.push(Frame::Bulk(c.info_field("persistence", "rdb_last_bgsave_status").into_bytes()));
            }
            command => replies.push(c.cmd(command)),
        }
    }
    replies
}

#[test]
fn a_failed_bgsave_stops_writes_as_in_redis() {
    let rules = ["--appendonly", "no", "--save", "3600 1"];
    let server = Server::start(&rules);
    let dir = server.dir.clone().expect("dir");
    let got = failed_bgsave_sequence(&mut server.client(), &dir);
    let status = |s: &str| Frame::Bulk(s.as_bytes().to_vec());
    let misconf = err(MISCONF);
    let want = vec![
        ok(),
        simple("Background saving started"),
        status("err"),
        bulk("x"),
        misconf.clone(),
        misconf.clone(),
        Frame::Integer(1),
        ok(),
        simple("QUEUED"),
        misconf.clone(),
        err("EXECABORT Transaction discarded because of previous errors."),
        ok(),
        ok(),
        ok(),
        misconf,
        simple("Background saving started"),
        status("ok"),
        ok(),
    ];
    assert_eq!(got, want);
    let redis_dir = temp_dir("misconf-redis");
    let d = redis_dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d, "--save", "3600 1"]) else { return };
    assert_eq!(failed_bgsave_sequence(&mut redis.client(), &redis_dir), want, "redis-server answers the same");
    drop(redis);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

#[test]
fn a_failed_cron_save_stops_writes_and_retries_after_the_delay() {
    let server = Server::start(&["--appendonly", "no", "--save", "1 1"]);
    let dir = server.dir.clone().expect("dir");
    let mut c = server.client();
    std::fs::create_dir(dir.join("dump.rdb")).expect("mkdir");
    assert_eq!(c.cmd("SET a 1"), ok());
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.info_field("persistence", "rdb_last_bgsave_status") != "err" {
        assert!(Instant::now() < deadline, "the cron save never failed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let failed_at = Instant::now();
    assert_eq!(c.cmd("SET a 2"), err(MISCONF));
    assert_eq!(c.cmd("GET a"), bulk("1"));
    std::fs::remove_dir(dir.join("dump.rdb")).expect("rmdir");
    // The rule is met again at once, but a retry waits CONFIG_BGSAVE_RETRY_DELAY.
    let deadline = Instant::now() + Duration::from_secs(15);
    while c.info_field("persistence", "rdb_last_bgsave_status") != "ok" {
        assert!(Instant::now() < deadline, "the cron never retried");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(failed_at.elapsed() >= Duration::from_secs(4), "retried after {:?}", failed_at.elapsed());
    assert_eq!(c.cmd("SET a 3"), ok());
    assert_eq!(keys_in(&dir.join("dump.rdb")), keys(&["a"]));
}

/// Starts a server on `dir`, writes `key`, sends SHUTDOWN with `args`
/// and waits for the process to end.
fn write_then_shutdown(dir: &Path, save: &str, key: &str, args: &[&str]) {
    let mut server = Server::start_in(dir, &["--appendonly", "no", "--save", save]);
    let mut c = server.client();
    assert_eq!(c.send(&["SET", key, "v"]), ok());
    let mut command = vec!["SHUTDOWN"];
    command.extend(args);
    c.write_command(&command);
    assert!(c.read_to_close().is_empty(), "no reply to a successful SHUTDOWN");
    wait_exit(&mut server);
}

#[test]
fn shutdown_saves_with_rules_or_save_and_not_with_nosave() {
    let dir = temp_dir("shutdown-save");
    let dump = dir.join("dump.rdb");
    write_then_shutdown(&dir, "3600 1", "a", &[]);
    assert_eq!(keys_in(&dump), keys(&["a"]));
    // The dump loads at start; without rules SHUTDOWN does not save...
    write_then_shutdown(&dir, "", "b", &[]);
    assert_eq!(keys_in(&dump), keys(&["a"]));
    // ...unless told to; NOSAVE never does.
    write_then_shutdown(&dir, "", "b", &["SAVE"]);
    assert_eq!(keys_in(&dump), keys(&["a", "b"]));
    write_then_shutdown(&dir, "3600 1", "c", &["NOSAVE"]);
    assert_eq!(keys_in(&dump), keys(&["a", "b"]));
    write_then_shutdown(&dir, "3600 1", "c", &["NOW", "FORCE"]);
    assert_eq!(keys_in(&dump), keys(&["a", "b", "c"]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_final_save_refuses_shutdown_unless_force() {
    let dir = temp_dir("shutdown-fail");
    let mut server = Server::start_in(&dir, &["--appendonly", "no", "--save", "3600 1"]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET a 1"), ok());
    std::fs::create_dir(dir.join("dump.rdb")).expect("mkdir");
    assert_eq!(c.cmd("SHUTDOWN"), err("ERR Errors trying to SHUTDOWN. Check logs."));
    assert_eq!(c.cmd("SHUTDOWN SAVE"), err("ERR Errors trying to SHUTDOWN. Check logs."));
    // Still serving, writes included (a failed final save is not a failed BGSAVE).
    assert_eq!(c.cmd("SET b 2"), ok());
    assert_eq!(c.info_field("persistence", "rdb_last_bgsave_status"), "ok");
    c.write_command(&["SHUTDOWN", "FORCE"]);
    assert!(c.read_to_close().is_empty());
    wait_exit(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

fn kill(server: &mut Server, signal: &str) {
    let pid = server.client().info_field("server", "process_id");
    let status = Command::new("kill").args([signal, &pid]).status().expect("kill");
    assert!(status.success());
}

#[test]
fn sigterm_is_shutdown_with_no_argument() {
    let dir = temp_dir("sigterm");
    let dump = dir.join("dump.rdb");
    let mut server = Server::start_in(&dir, &["--appendonly", "no", "--save", "3600 1"]);
    assert_eq!(server.client().cmd("SET a 1"), ok());
    // A failed final save: the server logs it and goes on.
    std::fs::create_dir(&dump).expect("mkdir");
    kill(&mut server, "-TERM");
    let mut c = server.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(std::env::temp_dir().join("keel-test-logs").join(format!("{}.log", server.port)))
        .unwrap_or_default()
        .contains("SIGTERM received but errors trying to shut down")
    {
        assert!(Instant::now() < deadline, "no failed shutdown logged");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(c.cmd("SET b 2"), ok());
    std::fs::remove_dir(&dump).expect("rmdir");
    kill(&mut server, "-TERM");
    wait_exit(&mut server);
    assert_eq!(keys_in(&dump), keys(&["a", "b"]));
    // SIGINT, without rules: no save.
    let mut server = Server::start_in(&dir, &["--appendonly", "no", "--save", ""]);
    assert_eq!(server.client().cmd("SET c 3"), ok());
    kill(&mut server, "-INT");
    wait_exit(&mut server);
    assert_eq!(keys_in(&dump), keys(&["a", "b"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// DEBUG PAUSE-CRON holds the periodic chores, active expiry and a
/// signal's shutdown among them: SHUTDOWN ABORT cancels a shutdown held so
/// (Redis's unit/shutdown "SHUTDOWN ABORT can cancel SIGTERM"), a signal
/// right after the abort is a new shutdown, not a second signal, and one
/// not aborted goes on once the cron resumes.
#[test]
fn a_paused_cron_holds_a_signals_shutdown_until_aborted_or_resumed() {
    let dir = temp_dir("pause-cron");
    let mut server = Server::start_in(&dir, &["--appendonly", "no", "--save", "", "--enable-debug-command", "yes"]);
    let log = std::env::temp_dir().join("keel-test-logs").join(format!("{}.log", server.port));
    let logged = |line: &str| std::fs::read_to_string(&log).unwrap_or_default().matches(line).count();
    let wait_logged = |line: &str, times: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while logged(line) < times {
            assert!(Instant::now() < deadline, "\"{line}\" not logged {times} times");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let mut c = server.client();
    assert_eq!(c.cmd("SHUTDOWN ABORT"), err("ERR No shutdown in progress."));
    assert_eq!(c.cmd("DEBUG PAUSE-CRON 1"), ok());
    assert_eq!(c.cmd("SET k v PX 1"), ok());
    kill(&mut server, "-TERM");
    wait_logged("Received SIGTERM", 1);
    // Expired, but no cron has deleted it: DBSIZE still counts it.
    assert_eq!(c.cmd("DBSIZE"), Frame::Integer(1));
    assert_eq!(c.cmd("SHUTDOWN ABORT"), ok());
    assert_eq!(logged("Shutdown manually aborted."), 1);

    kill(&mut server, "-INT");
    wait_logged("Received SIGINT", 1);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(c.cmd("PING"), simple("PONG"), "the shutdown did not wait for the cron");
    assert_eq!(logged("You insist"), 0);
    c.write_command(&["DEBUG", "PAUSE-CRON", "0"]);
    wait_exit(&mut server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server whose log pipe was closed (its reader exited) loses log lines,
/// not threads: the worker that logs goes on serving, and the thread that
/// logs SIGTERM still shuts the server down.
#[test]
fn a_closed_log_pipe_loses_lines_not_threads() {
    let mut server = Server::start_logging_to(std::process::Stdio::piped(), &["--threads", "1", "--save", ""]);
    drop(server.log_pipe());
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG SET client-query-buffer-limit 1mb"), ok());
    // Over the limit: the worker logs and closes this client.
    let mut big = server.client();
    big.write_raw(b"*1\r\n$2000000\r\n");
    let _ = big.stream.write_all(&vec![b'x'; 1_500_000]);
    assert!(big.read_to_close().is_empty());
    assert_eq!(server.client().cmd("PING"), simple("PONG"));
    kill(&mut server, "-TERM");
    wait_exit(&mut server);
}

/// DEBUG RELOAD's variants; every reply, and the values read after.
fn reload_sequence(c: &mut Client) -> Vec<Frame> {
    let steps = [
        "SET s 1", "RPUSH l a b c", "HSET h f v", "SADD st 1 2 3", "ZADD z 1 a 2 b", "PEXPIREAT s 4000000000000",
        "DEBUG RELOAD", "GET s", "PEXPIRETIME s", "LRANGE l 0 -1", "HGETALL h", "SMEMBERS st",
        "ZRANGE z 0 -1 WITHSCORES", "DBSIZE",
        // NOSAVE: the file replaces what memory holds.
        "SET extra 1", "DEL l", "DEBUG RELOAD NOSAVE", "EXISTS extra", "LRANGE l 0 -1",
        // MERGE NOFLUSH: the file's keys win, others stay.
        "SET s changed", "SET extra 2", "DEBUG RELOAD NOSAVE NOFLUSH MERGE", "GET s", "GET extra", "DBSIZE",
        "DEBUG RELOAD BOGUS",
    ];
    steps.iter().map(|line| c.cmd(line)).collect()
}

#[test]
fn debug_reload_saves_flushes_and_loads_back_as_redis() {
    let server = Server::start(&["--appendonly", "no", "--enable-debug-command", "yes"]);
    let mut c = server.client();
    let got = reload_sequence(&mut c);
    assert_eq!(got[6], ok(), "{got:?}");
    assert_eq!(got[7], bulk("1"));
    assert_eq!(got[13], Frame::Integer(5));
    assert_eq!(got[17], Frame::Integer(0));
    assert_eq!(got[22], bulk("1"));
    assert_eq!(got[23], bulk("2"));
    assert_eq!(
        got.last(),
        Some(&err("ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."))
    );
    // Without MERGE a key present in both stops the load (Redis would stop
    // the server instead).
    assert_eq!(c.cmd("DEBUG RELOAD NOSAVE NOFLUSH"), err("ERR Error trying to load the RDB dump"));
    let redis_dir = temp_dir("reload-redis");
    let d = redis_dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d, "--enable-debug-command", "yes"]) else { return };
    assert_eq!(reload_sequence(&mut redis.client()), got, "redis-server answers the same");
    drop(redis);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

/// DEBUG RELOAD NOFLUSH meets the file's function library already loaded:
/// without MERGE the load fails, with it the file's library replaces ours,
/// as in Redis (unit/functions, "test debug reload different options").
#[test]
fn debug_reload_without_merge_refuses_a_loaded_library_as_redis() {
    let library = "#!lua name=lib\nredis.register_function('f', function() return 'file' end)";
    let replaced = "#!lua name=lib\nredis.register_function('f', function() return 'memory' end)";
    let steps: &[&[&str]] = &[
        &["FUNCTION", "LOAD", library],
        &["DEBUG", "RELOAD"],
        &["DEBUG", "RELOAD", "NOFLUSH"],
        &["FCALL", "f", "0"],
        &["FUNCTION", "LOAD", "REPLACE", replaced],
        &["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE"],
        &["FCALL", "f", "0"],
        &["FUNCTION", "LIST"],
    ];
    let run = |c: &mut Client| steps.iter().map(|argv| c.send(argv)).collect::<Vec<_>>();
    let keel = Server::start(&["--appendonly", "no", "--enable-debug-command", "yes"]);
    let got = run(&mut keel.client());
    assert_eq!(got[2], err("ERR Error trying to load the RDB dump"));
    assert_eq!(got[6], bulk("file"));
    let redis_dir = temp_dir("reload-functions-redis");
    let d = redis_dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d, "--enable-debug-command", "yes"]) else { return };
    assert_eq!(run(&mut redis.client()), got, "redis-server answers the same");
    drop(redis);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

/// Changes counted after FLUSHALL without and with save rules, and the
/// dump's keys after each (None: no dump written).
fn flushall_sequence(c: &mut Client, dir: &Path) -> Vec<(String, Option<Vec<Vec<u8>>>)> {
    let dump = dir.join("dump.rdb");
    let mut seen = Vec::new();
    let mut step = |c: &mut Client| {
        let keys = dump.exists().then(|| keys_in(&dump));
        seen.push((c.info_field("persistence", "rdb_changes_since_last_save"), keys));
    };
    assert_eq!(c.send(&["CONFIG", "SET", "save", ""]), ok());
    assert_eq!(c.cmd("SET a 1"), ok());
    assert_eq!(c.cmd("FLUSHALL"), ok());
    step(c);
    assert_eq!(c.send(&["CONFIG", "SET", "save", "3600 1"]), ok());
    assert_eq!(c.cmd("SET kept 1"), ok());
    assert_eq!(c.cmd("SAVE"), ok());
    step(c);
    assert_eq!(c.cmd("SET b 2"), ok());
    assert_eq!(c.cmd("FLUSHALL"), ok());
    step(c);
    assert_eq!(c.cmd("FLUSHALL"), ok());
    step(c);
    assert_eq!(c.info_field("persistence", "rdb_saves"), "1", "FLUSHALL's saves are not counted");
    seen
}

#[test]
fn flushall_rewrites_the_dump_when_save_rules_exist_as_redis() {
    let dir = temp_dir("flushall");
    let server = Server::start_in(&dir, &["--appendonly", "no", "--save", ""]);
    let got = flushall_sequence(&mut server.client(), &dir);
    let want = vec![("2".to_string(), None), ("0".into(), Some(keys(&["kept"]))), ("0".into(), Some(vec![])), ("0".into(), Some(vec![]))];
    assert_eq!(got, want);
    // The flushed keys stay gone after a restart.
    drop(server);
    let again = Server::start_in(&dir, &["--appendonly", "no"]);
    assert_eq!(again.client().cmd("DBSIZE"), Frame::Integer(0));
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
    let redis_dir = temp_dir("flushall-redis");
    let d = redis_dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d]) else { return };
    assert_eq!(flushall_sequence(&mut redis.client(), &redis_dir), want, "redis-server answers the same");
    drop(redis);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

/// Writes 100 keys and starts a BGSAVE that takes `delay_us` per key.
fn start_slowed_bgsave(c: &mut Client, delay_us: u64) {
    for i in 0..100 {
        assert_eq!(c.cmd(&format!("SET key:{i} v")), ok());
    }
    assert_eq!(c.cmd(&format!("CONFIG SET rdb-key-save-delay {delay_us}")), ok());
    assert_eq!(c.cmd("BGSAVE"), simple("Background saving started"));
    assert_eq!(c.info_field("persistence", "rdb_bgsave_in_progress"), "1");
}

/// FLUSHALL while a slowed BGSAVE writes: the dump ends empty and the
/// BGSAVE does not count as failed. Returns (dump keys, bgsave status).
fn flushall_during_bgsave(c: &mut Client, dir: &Path) -> (Vec<Vec<u8>>, String) {
    start_slowed_bgsave(c, 20_000);
    assert_eq!(c.cmd("FLUSHALL"), ok());
    assert_eq!(c.cmd("CONFIG SET rdb-key-save-delay 0"), ok());
    wait_bgsave(c);
    (keys_in(&dir.join("dump.rdb")), c.info_field("persistence", "rdb_last_bgsave_status"))
}

/// FLUSHALL ends a BGSAVE under way even without `save` rules (Redis kills
/// its child): at once, as no failure, leaving no dump and the change
/// counter as it was. Returns (dump exists, bgsave status, changes left).
fn flushall_ends_a_bgsave(c: &mut Client, dir: &Path) -> (bool, String, String) {
    // Ten seconds for the whole dump.
    start_slowed_bgsave(c, 100_000);
    assert_eq!(c.cmd("FLUSHALL"), ok());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while c.info_field("persistence", "rdb_bgsave_in_progress") != "0" {
        assert!(std::time::Instant::now() < deadline, "the BGSAVE went on after FLUSHALL");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(c.cmd("SET after v"), ok());
    (
        dir.join("dump.rdb").exists(),
        c.info_field("persistence", "rdb_last_bgsave_status"),
        c.info_field("persistence", "rdb_changes_since_last_save"),
    )
}

#[test]
fn flushall_ends_a_bgsave_under_way_without_save_rules_as_redis() {
    let dir = temp_dir("flushall-ends-bgsave");
    let server = Server::start_in(&dir, &["--appendonly", "no", "--save", ""]);
    let got = flushall_ends_a_bgsave(&mut server.client(), &dir);
    assert_eq!((got.0, got.1.as_str()), (false, "ok"));
    assert!(got.2.parse::<u64>().expect("changes") > 100, "{got:?}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    let redis_dir = temp_dir("flushall-ends-bgsave-redis");
    let d = redis_dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d]) else { return };
    assert_eq!(flushall_ends_a_bgsave(&mut redis.client(), &redis_dir), got, "redis-server ends the same");
    drop(redis);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

#[test]
fn flushall_supersedes_a_bgsave_under_way_as_redis() {
    let dir = temp_dir("flushall-bgsave");
    let server = Server::start_in(&dir, &["--appendonly", "no", "--save", "3600 1"]);
    let want = (vec![], "ok".to_string());
    assert_eq!(flushall_during_bgsave(&mut server.client(), &dir), want);
    drop(server);
    let again = Server::start_in(&dir, &["--appendonly", "no"]);
    assert_eq!(again.client().cmd("DBSIZE"), Frame::Integer(0), "the flushed keys stay gone");
    drop(again);
    let _ = std::fs::remove_dir_all(&dir);
    let redis_dir = temp_dir("flushall-bgsave-redis");
    let d = redis_dir.display().to_string();
    let Some(redis) = Server::start_redis(&["--dir", &d, "--save", "3600 1"]) else { return };
    assert_eq!(flushall_during_bgsave(&mut redis.client(), &redis_dir), want, "redis-server ends the same");
    drop(redis);
    let _ = std::fs::remove_dir_all(&redis_dir);
}

/// Keys a file holds with empty collections (old Redis versions wrote
/// them) are skipped at load, each named in the log and counted, as Redis
/// 7 logs them; the rest loads.
#[test]
fn empty_keys_in_a_file_are_skipped_and_logged() {
    let dir = temp_dir("empty-keys");
    let mut rdb = b"REDIS0010".to_vec();
    rdb.extend_from_slice(&[0xFE, 0]);
    rdb.extend_from_slice(&[2, 3, b's', b'e', b't', 0]);
    rdb.extend_from_slice(&[0, 4, b'k', b'e', b'p', b't', 1, b'v']);
    rdb.push(0xFF);
    let crc = keel_rdb::crc64(0, &rdb);
    rdb.extend_from_slice(&crc.to_le_bytes());
    std::fs::write(dir.join("dump.rdb"), &rdb).expect("test setup");
    let log_path = dir.join("keel.log");
    let log = std::fs::File::create(&log_path).expect("test setup");
    let server = Server::start_logging_to(log.into(), &["--dir", dir.to_str().expect("utf-8"), "--appendonly", "no", "--save", ""]);
    let mut c = server.client();
    assert_eq!(c.cmd("DBSIZE"), Frame::Integer(1));
    assert_eq!(c.cmd("GET kept"), bulk("v"));
    let log = std::fs::read_to_string(&log_path).expect("the log");
    assert!(log.contains("rdbLoadObject skipping empty key: set"), "{log}");
    assert!(log.contains("empty keys skipped: 1"), "{log}");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
