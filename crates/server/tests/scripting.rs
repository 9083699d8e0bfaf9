//! Lua scripting over real sockets: EVAL and EVALSHA with the script
//! cache, read-only runs, a script's writes as one atomic, durable unit
//! (kill -9, the journal's MULTI ... EXEC, a Redis replica), -BUSY and
//! SCRIPT KILL; functions (FUNCTION LOAD, FCALL) and their libraries
//! through kill -9, rewrites, dump.rdb, FUNCTION DUMP and replication,
//! to and from Redis.

mod common;

use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, simple, temp_dir, Client, Frame, Server};

fn error_text(frame: &Frame) -> String {
    match frame {
        Frame::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn eval_runs_with_keys_and_args_and_caches_the_script() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let script = "redis.call('set', KEYS[1], ARGV[1]); return {KEYS[1], ARGV[1], #KEYS, #ARGV}";
    let reply = c.send(&["EVAL", script, "1", "k", "v"]);
    assert_eq!(reply, Frame::Array(vec![bulk("k"), bulk("v"), int(1), int(1)]));
    assert_eq!(c.cmd("GET k"), bulk("v"));
    let sha = "1b1a3e29aa2bb86d6bb86edfc7dfd6fe1af9e5d2";
    let Frame::Bulk(loaded) = c.send(&["SCRIPT", "LOAD", script]) else { panic!("SCRIPT LOAD") };
    assert_eq!(loaded.len(), 40);
    let sha_loaded = String::from_utf8(loaded).expect("hex");
    assert_ne!(sha_loaded, sha, "a different body has a different SHA1");
    assert_eq!(c.send(&["SCRIPT", "EXISTS", &sha_loaded, &sha_loaded.to_uppercase(), sha]), Frame::Array(vec![int(1), int(1), int(0)]));
    assert_eq!(c.send(&["EVALSHA", &sha_loaded, "1", "k2", "w"]), Frame::Array(vec![bulk("k2"), bulk("w"), int(1), int(1)]));
    assert_eq!(c.cmd("SCRIPT FLUSH"), ok());
    assert_eq!(c.send(&["EVALSHA", &sha_loaded, "0"]), err("NOSCRIPT No matching script. Please use EVAL."));
    assert_eq!(c.send(&["SCRIPT", "EXISTS", &sha_loaded]), Frame::Array(vec![int(0)]));
    assert_eq!(c.send(&["EVAL", "return 1", "2", "a"]), err("ERR Number of keys can't be greater than number of args"));
    assert_eq!(c.send(&["EVAL", "return 1", "-1"]), err("ERR Number of keys can't be negative"));
    let compile = error_text(&c.send(&["EVAL", "return (", "0"]));
    assert!(compile.starts_with("ERR Error compiling script (new function): user_script:1:"), "{compile}");
}

#[test]
fn scripts_see_a_sandbox_and_redis_errors() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let global = error_text(&c.send(&["EVAL", "x = 1", "0"]));
    assert!(global.contains("Attempt to modify a readonly table"), "{global}");
    let missing = error_text(&c.send(&["EVAL", "return undefined_name", "0"]));
    assert!(missing.contains("Script attempted to access nonexistent global variable 'undefined_name'"), "{missing}");
    let library = error_text(&c.send(&["EVAL", "string.len = nil", "0"]));
    assert!(library.contains("Attempt to modify a readonly table"), "{library}");
    c.cmd("LPUSH list a");
    let wrongtype = error_text(&c.send(&["EVAL", "return redis.call('get', 'list')", "0"]));
    assert!(wrongtype.starts_with("WRONGTYPE Operation against a key holding the wrong kind of value script: "), "{wrongtype}");
    assert!(wrongtype.ends_with(", on @user_script:1."), "{wrongtype}");
    // pcall keeps the script going with the error as a table.
    let caught = c.send(&["EVAL", "local r = redis.pcall('get', 'list'); return r.err", "0"]);
    assert_eq!(caught, bulk("WRONGTYPE Operation against a key holding the wrong kind of value"));
    let noscript = error_text(&c.send(&["EVAL", "return redis.call('multi')", "0"]));
    assert!(noscript.starts_with("ERR This Redis command is not allowed from script"), "{noscript}");
    assert_eq!(c.send(&["EVAL", "return {1, 'two', {3}, nil, 5}", "0"]), Frame::Array(vec![int(1), bulk("two"), Frame::Array(vec![int(3)])]));
    assert_eq!(c.send(&["EVAL", "return redis.status_reply('FINE')", "0"]), simple("FINE"));
    assert_eq!(c.send(&["EVAL", "return cjson.encode({1, 'a/b', {x = true}})", "0"]), bulk("[1,\"a\\/b\",{\"x\":true}]"));
    assert_eq!(c.send(&["EVAL", "return bit.bor(1, 2, 4)", "0"]), int(7));
}

#[test]
fn read_only_runs_refuse_writes() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.cmd("SET k v");
    assert_eq!(c.send(&["EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"]), bulk("v"));
    let refused = error_text(&c.send(&["EVAL_RO", "return redis.call('del', KEYS[1])", "1", "k"]));
    assert!(refused.starts_with("ERR Write commands are not allowed from read-only scripts."), "{refused}");
    let flagged = error_text(&c.send(&["EVAL", "#!lua flags=no-writes\nreturn redis.call('del', KEYS[1])", "1", "k"]));
    assert!(flagged.starts_with("ERR Write commands are not allowed from read-only scripts."), "{flagged}");
    assert_eq!(
        c.send(&["EVAL_RO", "#!lua\nreturn 1", "0"]),
        err("ERR Can not execute a script with write flag using *_ro command.")
    );
    assert_eq!(c.send(&["EVAL", "#!python\nreturn 1", "0"]), err("ERR Unexpected engine in script shebang: #!python"));
    assert_eq!(c.cmd("GET k"), bulk("v"));
}

/// Every write of a script is journaled as one MULTI ... EXEC unit, and
/// survives kill -9 once acknowledged (`appendfsync always`, the default).
#[test]
fn a_scripts_writes_are_one_durable_unit() {
    let dir = temp_dir("scripting-durable");
    let server = Server::start_in(&dir, &[]);
    let mut c = server.client();
    let script = "for i = 1, tonumber(ARGV[1]) do redis.call('rpush', KEYS[1], i) end redis.call('set', KEYS[2], 'done') return redis.call('llen', KEYS[1])";
    for round in 0..20 {
        let list = format!("list{round}");
        let marker = format!("marker{round}");
        assert_eq!(c.send(&["EVAL", script, "2", &list, &marker, "50"]), int(50));
    }
    server.kill9();
    let incr = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(".incr.aof"))
        .expect("an incr file");
    let log = std::fs::read(incr.path()).expect("read the incr file");
    let text = String::from_utf8_lossy(&log);
    assert_eq!(text.matches("MULTI").count(), 20, "one unit per script");
    assert!(!text.contains("EVAL"), "effects are logged, not the script");
    let server = Server::start_last_in(&dir, &[]);
    let mut c = server.client();
    for round in 0..20 {
        assert_eq!(c.cmd(&format!("LLEN list{round}")), int(50));
        assert_eq!(c.cmd(&format!("GET marker{round}")), bulk("done"));
    }
}

/// Inside MULTI, a script runs when EXEC does, with the other commands.
#[test]
fn scripts_run_inside_transactions() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.cmd("MULTI");
    c.send(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"]);
    c.cmd("INCR n");
    c.send(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"]);
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![int(1), int(2), int(3)]));
}

/// A Redis replica of Keel gets a script's effects.
#[test]
fn a_redis_replica_gets_a_scripts_effects() {
    let master = Server::start(&[]);
    let Some(replica) = Server::start_redis(&["--replicaof", "127.0.0.1", &master.port.to_string()]) else { return };
    let mut r = replica.client();
    let mut m = master.client();
    let script = "redis.call('set', KEYS[1], 'a') redis.call('append', KEYS[1], 'b') return redis.call('get', KEYS[1])";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(m.send(&["EVAL", script, "1", "k"]), bulk("ab"));
        if r.cmd("GET k") == bulk("ab") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica never got the script's writes");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(r.cmd("SCRIPT EXISTS 0000000000000000000000000000000000000000"), Frame::Array(vec![int(0)]));
}

/// Past busy-reply-threshold other connections get -BUSY, those open
/// before and those that connect meanwhile alike; SCRIPT KILL stops a
/// script that has not written, and refuses one that has. One worker:
/// the script's hook serves the other clients, as Redis's does.
#[test]
fn busy_scripts_answer_busy_and_can_be_killed() {
    let server = Server::start(&["--threads", "1", "--busy-reply-threshold", "50"]);
    let mut runner = server.client();
    let mut before = server.client();
    assert_eq!(before.cmd("SCRIPT KILL"), err("NOTBUSY No scripts in execution right now."));
    // The runner's next command waits for the script, then runs.
    runner.write_raw(&[common::encode(&["EVAL", "while true do end", "0"]), common::encode(&["PING"])].concat());
    wait_busy(&mut before);
    let mut during = server.client();
    assert!(error_text(&during.cmd("GET k")).starts_with("BUSY"));
    assert!(error_text(&during.cmd("FUNCTION KILL")).starts_with("BUSY"), "FUNCTION KILL stops functions only");
    assert_eq!(during.cmd("SCRIPT KILL"), ok());
    let killed = error_text(&runner.read());
    assert!(killed.contains("Script killed by user with SCRIPT KILL"), "{killed}");
    assert_eq!(runner.read(), simple("PONG"));
    assert_eq!(before.cmd("PING"), simple("PONG"));
    assert_eq!(during.cmd("PING"), simple("PONG"));

    // A script that catches the kill with pcall meets it again outside.
    let catching = "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end";
    runner.write_command(&["EVAL", catching, "0"]);
    wait_busy(&mut before);
    assert_eq!(during.cmd("SCRIPT KILL"), ok());
    let killed = error_text(&runner.read());
    assert!(killed.starts_with("ERR Script killed by user with SCRIPT KILL"), "{killed}");

    runner.write_command(&["EVAL", "redis.call('set', 'x', 1) while true do end", "0"]);
    wait_busy(&mut before);
    let refused = error_text(&before.cmd("SCRIPT KILL"));
    assert!(refused.starts_with("UNKILLABLE"), "{refused}");
    // Only SHUTDOWN NOSAVE (here, the end of the process) ends it, as in Redis.
    let busy = error_text(&before.cmd("SHUTDOWN"));
    assert!(busy.starts_with("BUSY"), "a save would wait for the script: {busy}");
}

/// With several workers, a client whose command met the script's locks
/// before it turned busy is answered -BUSY once it does, rather than
/// waiting for its end on whichever worker serves it; so are clients of
/// the script's own worker.
#[test]
fn commands_waiting_for_a_script_are_answered_busy_once_it_is() {
    let server = Server::start(&["--threads", "2", "--busy-reply-threshold", "1000"]);
    let mut runner = server.client();
    let mut writers: Vec<Client> = (0..6).map(|_| server.client()).collect();
    runner.write_command(&["EVAL", "while true do end", "0"]);
    // Well after the script took the locks, well before it is busy.
    std::thread::sleep(Duration::from_millis(200));
    for writer in &mut writers {
        writer.write_command(&["SET", "k", "v"]);
    }
    for writer in &mut writers {
        let refused = error_text(&writer.read());
        assert!(refused.starts_with("BUSY"), "{refused}");
    }
    // A client that connects now is served too, wherever it lands.
    for _ in 0..4 {
        assert!(error_text(&server.client().cmd("PING")).starts_with("BUSY"));
    }
    assert_eq!(writers[0].cmd("SCRIPT KILL"), ok());
    assert!(error_text(&runner.read()).contains("Script killed"));
    for writer in &mut writers {
        assert_eq!(writer.cmd("SET k v"), ok());
    }
}

/// SHUTDOWN NOSAVE beside a busy script that wrote stops the server with
/// none of the script's writes in the journal (Redis exits before it
/// propagates them): the script is atomic on disk as in memory.
#[test]
fn shutdown_nosave_ends_a_busy_script_that_wrote_without_its_writes() {
    let dir = temp_dir("scripting-shutdown-busy");
    let args = ["--threads", "1", "--busy-reply-threshold", "50"];
    let mut server = Server::start_in(&dir, &args);
    let mut runner = server.client();
    let mut other = server.client();
    assert_eq!(other.cmd("SET kept 1"), ok());
    runner.write_command(&["EVAL", "redis.call('set', 'kept', 2) redis.call('set', 'lost', 1) while true do end", "0"]);
    wait_busy(&mut other);
    other.write_command(&["SHUTDOWN", "NOSAVE"]);
    common::wait_for("the server to stop", || !server.alive());
    let server = Server::start_in(&dir, &args);
    let mut c = server.client();
    assert_eq!(c.cmd("GET kept"), bulk("1"));
    assert_eq!(c.cmd("EXISTS lost"), int(0));
}

/// A client beside a busy script may drop its watches (UNWATCH, and
/// DISCARD or a refused EXEC, or by leaving) although the script's thread
/// holds the shards: its next transaction no longer sees the watched key,
/// and the script drops what was left behind at its end, keys never
/// written again included (INFO's `total_watched_keys`).
#[test]
fn watches_dropped_beside_a_busy_script_are_gone_after_it() {
    let server = Server::start(&["--threads", "1", "--busy-reply-threshold", "50"]);
    let mut runner = server.client();
    let mut watcher = server.client();
    let mut leaver = server.client();
    assert_eq!(watcher.cmd("WATCH w quiet"), ok());
    assert_eq!(leaver.cmd("WATCH gone1 gone2"), ok());
    let watched = |c: &mut Client| c.info_field("clients", "total_watched_keys");
    assert_eq!(watched(&mut watcher), "4");
    runner.write_command(&["EVAL", "while true do end", "0"]);
    wait_busy(&mut watcher);
    assert_eq!(watcher.cmd("UNWATCH"), ok());
    drop(leaver);
    assert_eq!(server.client().cmd("SCRIPT KILL"), ok());
    runner.read();
    let deadline = Instant::now() + Duration::from_secs(10);
    while watched(&mut runner) != "0" {
        assert!(Instant::now() < deadline, "watches left behind: {}", watched(&mut runner));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(runner.cmd("SET w changed"), ok());
    assert_eq!(exec_set(&mut watcher, "w"), Frame::Array(vec![ok()]));
    assert_eq!(watcher.cmd("GET w"), bulk("mine"));
}

/// WATCH beside a busy script answers +OK, as Redis's does, on the
/// script's worker and on others: the script's writes after it abort the
/// watcher's EXEC, those before it do not, and a watch the script still
/// holds when it ends (here killed, between two of its commands) holds
/// for the writes after it.
#[test]
fn watches_taken_beside_a_busy_script_see_its_later_writes() {
    // Spins on TIME for ARGV[1] ms between its two writes.
    let spin = "redis.call('set', 'early', 1) \
        local function ms() local t = redis.call('time') return t[1] * 1000 + t[2] / 1000 end \
        local start = ms() while ms() - start < tonumber(ARGV[1]) do end \
        redis.call('set', 'late', 1)";
    for threads in ["1", "2"] {
        let server = Server::start(&["--threads", threads, "--busy-reply-threshold", "50"]);
        let mut runner = server.client();
        let mut watchers: Vec<Client> = (0..4).map(|_| server.client()).collect();
        runner.write_command(&["EVAL", spin, "0", "1500"]);
        wait_busy(&mut watchers[0]);
        for (i, watcher) in watchers.iter_mut().enumerate() {
            let key = if i % 2 == 0 { "late" } else { "early" };
            assert_eq!(watcher.cmd(&format!("WATCH {key} {key}")), ok(), "{threads} threads");
        }
        assert_eq!(runner.read(), Frame::Null);
        for (i, watcher) in watchers.iter_mut().enumerate() {
            let expected = if i % 2 == 0 { Frame::Null } else { Frame::Array(vec![ok()]) };
            assert_eq!(exec_set(watcher, "mine"), expected, "watcher {i}, {threads} threads");
        }

        runner.write_command(&["EVAL", "while true do end", "0"]);
        wait_busy(&mut watchers[0]);
        for (i, watcher) in watchers.iter_mut().enumerate() {
            assert_eq!(watcher.cmd(&format!("WATCH w{}", i % 2)), ok());
        }
        assert_eq!(server.client().cmd("SCRIPT KILL"), ok());
        assert!(error_text(&runner.read()).contains("Script killed"));
        assert_eq!(runner.cmd("SET w0 changed"), ok());
        for (i, watcher) in watchers.iter_mut().enumerate() {
            let expected = if i % 2 == 0 { Frame::Null } else { Frame::Array(vec![ok()]) };
            assert_eq!(exec_set(watcher, "mine"), expected, "watcher {i} after a kill, {threads} threads");
        }
    }
}

/// MULTI, SET `key` mine, EXEC: EXEC's reply.
fn exec_set(client: &mut Client, key: &str) -> Frame {
    assert_eq!(client.cmd("MULTI"), ok());
    assert_eq!(client.cmd(&format!("SET {key} mine")), simple("QUEUED"));
    client.cmd("EXEC")
}

/// A blocked client's wait that ends while a script holds every shard
/// (here its timeout) does not hold its worker until the script ends:
/// that worker's clients are answered -BUSY meanwhile, and the queue
/// place the wait leaves behind goes once the script ends.
#[test]
fn waits_ending_beside_a_busy_script_hold_no_worker() {
    let server = Server::start(&["--threads", "2", "--busy-reply-threshold", "100"]);
    let mut runner = server.client();
    // Two more connections: one at least lands on the other worker.
    let mut waiters: Vec<Client> = (0..2).map(|_| server.client()).collect();
    for waiter in &mut waiters {
        waiter.write_command(&["BLPOP", "q", "0.3"]);
    }
    // Blocked before the script starts: a BLPOP that came after it would
    // be answered -BUSY.
    common::wait_for("the waits", || runner.info_field("clients", "blocked_clients") == "2");
    runner.write_command(&["EVAL", "while true do end", "0"]);
    wait_busy(&mut server.client());
    // Past the waits' timeouts: a worker that waited for the script's
    // shards to end one would leave new connections unanswered.
    std::thread::sleep(Duration::from_millis(400));
    for _ in 0..4 {
        assert!(error_text(&server.client().cmd("PING")).starts_with("BUSY"));
    }
    assert_eq!(server.client().cmd("SCRIPT KILL"), ok());
    assert!(error_text(&runner.read()).contains("Script killed"));
    for waiter in &mut waiters {
        assert_eq!(waiter.read(), Frame::Null);
    }
    // No stale place in q's queue delays the next wait.
    waiters[0].write_command(&["BLPOP", "q", "0"]);
    common::wait_for("the wait", || runner.info_field("clients", "blocked_clients") == "1");
    assert_eq!(runner.cmd("RPUSH q x"), int(1));
    assert_eq!(waiters[0].read(), Frame::Array(vec![bulk("q"), bulk("x")]));
}

/// A reply larger than its socket's buffers, sent before a script turned
/// busy, reaches its reader in full while the script still runs, as from
/// Redis, whose loop writes replies beside a busy script.
#[test]
fn replies_leave_beside_a_busy_script_as_from_redis() {
    let big = "x".repeat(32 << 20);
    let keel = Server::start(&["--threads", "1", "--busy-reply-threshold", "50"]);
    let redis = Server::start_redis(&["--busy-reply-threshold", "50"]);
    for server in std::iter::once(&keel).chain(&redis) {
        let mut runner = server.client();
        assert_eq!(runner.send(&["SET", "big", &big]), ok());
        let mut reader = server.client();
        reader.write_command(&["GET", "big"]);
        // The socket takes what it can before the script starts.
        std::thread::sleep(Duration::from_millis(200));
        runner.write_command(&["EVAL", "while true do end", "0"]);
        let mut other = server.client();
        wait_busy(&mut other);
        assert_eq!(reader.read(), bulk(&big), "port {}", server.port);
        assert_eq!(other.cmd("SCRIPT KILL"), ok(), "the script ran until the reply was read");
        assert!(error_text(&runner.read()).contains("Script killed"));
    }
}

fn wait_busy(client: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.cmd("PING") {
            Frame::Error(e) if e.starts_with(b"BUSY") => return,
            _ => assert!(Instant::now() < deadline, "the script never became busy"),
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

const LIBRARY: &str = "#!lua name=counters\n\
redis.register_function('bump', function(keys, args) return redis.call('incrby', keys[1], args[1]) end)\n\
redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}";

#[test]
fn functions_load_run_list_and_delete() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.send(&["FUNCTION", "LOAD", LIBRARY]), bulk("counters"));
    assert_eq!(c.send(&["FCALL", "bump", "1", "n", "5"]), int(5));
    assert_eq!(c.send(&["FCALL_RO", "peek", "1", "n"]), bulk("5"));
    assert_eq!(c.send(&["FCALL_RO", "bump", "1", "n", "1"]), err("ERR Can not execute a script with write flag using *_ro command."));
    assert_eq!(c.send(&["FUNCTION", "LOAD", LIBRARY]), err("ERR Library 'counters' already exists"));
    assert_eq!(c.send(&["FUNCTION", "LOAD", "REPLACE", LIBRARY]), bulk("counters"));
    let clash = "#!lua name=other\nredis.register_function('bump', function() return 0 end)";
    assert_eq!(c.send(&["FUNCTION", "LOAD", clash]), err("ERR Function bump already exists"));
    assert_eq!(c.send(&["FCALL", "nosuch", "0"]), err("ERR Function not found"));
    let Frame::Array(libraries) = c.cmd("FUNCTION LIST") else { panic!("FUNCTION LIST") };
    assert_eq!(libraries.len(), 1);
    assert_eq!(c.info_field("memory", "number_of_libraries"), "1");
    assert_eq!(c.info_field("memory", "number_of_functions"), "2");
    let failing = "#!lua name=failing\nredis.register_function('fail', function() return redis.call('incr', 'list') end)";
    c.send(&["FUNCTION", "LOAD", failing]);
    c.cmd("LPUSH list x");
    let error = error_text(&c.send(&["FCALL", "fail", "0"]));
    assert!(error.starts_with("WRONGTYPE") && error.ends_with("script: fail, on @user_function:2."), "{error}");
    assert_eq!(c.cmd("FUNCTION DELETE counters"), ok());
    assert_eq!(c.send(&["FCALL", "bump", "1", "n", "5"]), err("ERR Function not found"));
    assert_eq!(c.cmd("FUNCTION FLUSH"), ok());
    assert_eq!(c.cmd("FUNCTION LIST"), Frame::Array(vec![]));
}

/// Libraries survive kill -9 (the journal's FUNCTION LOAD), a rewrite
/// with either base format, and a dump.rdb; Redis 7.0 loads Keel's
/// dump.rdb and FUNCTION DUMP payload with the same functions.
#[test]
fn functions_are_durable_and_move_to_redis() {
    for preamble in ["yes", "no"] {
        let dir = temp_dir("scripting-functions");
        let args = ["--aof-use-rdb-preamble", preamble];
        let server = Server::start_in(&dir, &args);
        let mut c = server.client();
        assert_eq!(c.send(&["FUNCTION", "LOAD", LIBRARY]), bulk("counters"));
        server.kill9();
        let server = Server::start_in(&dir, &args);
        let mut c = server.client();
        assert_eq!(c.send(&["FCALL", "bump", "1", "n", "2"]), int(2), "after kill -9 ({preamble})");
        let before = c.info_field("persistence", "aof_rewrites").parse().unwrap_or(0);
        c.cmd("BGREWRITEAOF");
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.info_field("persistence", "aof_rewrites").parse().unwrap_or(0) <= before {
            assert!(Instant::now() < deadline, "the rewrite never ended");
            std::thread::sleep(Duration::from_millis(20));
        }
        server.kill9();
        let server = Server::start_in(&dir, &args);
        let mut c = server.client();
        assert_eq!(c.send(&["FCALL", "bump", "1", "n", "3"]), int(5), "after a rewrite ({preamble})");
        assert_eq!(c.cmd("SAVE"), ok());
        let Frame::Bulk(payload) = c.cmd("FUNCTION DUMP") else { panic!("FUNCTION DUMP") };
        drop(server);
        let Some(redis) = Server::start_redis(&["--dir", &dir.display().to_string()]) else { return };
        let mut r = redis.client();
        assert_eq!(r.send(&["FCALL", "bump", "1", "n", "1"]), int(6), "Redis loads Keel's dump.rdb");
        assert_eq!(r.cmd("FUNCTION FLUSH"), ok());
        assert_eq!(r.send(&[b"FUNCTION" as &[u8], b"RESTORE", &payload]), ok());
        assert_eq!(r.send(&["FCALL_RO", "peek", "1", "n"]), bulk("6"));
        drop(redis);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Replicas get libraries both ways: a Redis replica of Keel through the
/// stream (FUNCTION LOAD) and the full sync's RDB; a Keel replica of Redis
/// through the RDB, which replaces the libraries it had.
#[test]
fn functions_replicate_both_ways() {
    let master = Server::start(&[]);
    let mut m = master.client();
    assert_eq!(m.send(&["FUNCTION", "LOAD", LIBRARY]), bulk("counters"));
    let Some(redis) = Server::start_redis(&["--replicaof", "127.0.0.1", &master.port.to_string()]) else { return };
    let mut r = redis.client();
    let late = "#!lua name=late\nredis.register_function{function_name='late', callback=function() return 'late' end, flags={'no-writes'}}";
    assert_eq!(m.send(&["FUNCTION", "LOAD", late]), bulk("late"));
    wait_for(|| r.send(&["FCALL_RO", "peek", "1", "missing"]) == Frame::Null && r.send(&["FCALL", "late", "0"]) == bulk("late"));

    let keel = Server::start(&[]);
    let mut k = keel.client();
    let own = "#!lua name=own\nredis.register_function('own', function() return 1 end)";
    assert_eq!(k.send(&["FUNCTION", "LOAD", own]), bulk("own"));
    assert_eq!(k.send(&["REPLICAOF", "127.0.0.1", &redis.port.to_string()]), ok());
    wait_for(|| k.send(&["FCALL", "late", "0"]) == bulk("late"));
    assert_eq!(k.send(&["FCALL", "own", "0"]), err("ERR Function not found"));
}

fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out");
        std::thread::sleep(Duration::from_millis(50));
    }
}
