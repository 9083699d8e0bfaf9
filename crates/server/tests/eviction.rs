//! `maxmemory` with each `maxmemory-policy`, over real sockets: used
//! memory held near the limit, only the keys a policy may take taken, the
//! ones it should keep kept, OOM past what may go, and evictions journaled,
//! replicated and notified as DELs.

mod common;

use std::time::Duration;

use common::memcache::{start_keel, McClient};
use common::{bulk, err, int, ok, readable, simple, temp_dir, wait_for, Client, Frame, Server};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

fn used_memory(c: &mut Client) -> u64 {
    c.info_field("memory", "used_memory").parse().expect("used_memory")
}

fn evicted_keys(c: &mut Client) -> u64 {
    c.info_field("stats", "evicted_keys").parse().expect("evicted_keys")
}

/// Sets the limit `headroom` bytes above what is used now.
fn limit_above_now(c: &mut Client, policy: &str, headroom: u64) -> u64 {
    let limit = used_memory(c) + headroom;
    assert_eq!(c.cmd(&format!("CONFIG SET maxmemory-policy {policy}")), ok());
    assert_eq!(c.cmd(&format!("CONFIG SET maxmemory {limit}")), ok());
    limit
}

/// Writes keys `<prefix>0..n` with `size`-byte values (and a TTL of a day
/// when `ttl`), pipelined; returns each distinct reply that was not OK
/// with how many times it came.
fn fill(c: &mut Client, prefix: &str, n: usize, size: usize, ttl: bool) -> Vec<(Frame, usize)> {
    let value = "v".repeat(size);
    let mut failed: Vec<(Frame, usize)> = Vec::new();
    for batch in (0..n).collect::<Vec<_>>().chunks(50) {
        for i in batch {
            let key = format!("{prefix}{i}");
            match ttl {
                true => c.write_command(&["SET", &key, &value, "EX", "86400"]),
                false => c.write_command(&["SET", &key, &value]),
            }
        }
        for _ in batch {
            let reply = c.read();
            if reply == ok() {
                continue;
            }
            match failed.iter_mut().find(|(f, _)| *f == reply) {
                Some((_, count)) => *count += 1,
                None => failed.push((reply, 1)),
            }
        }
    }
    failed
}

/// How many of `<prefix>0..n` are still there.
fn surviving(c: &mut Client, prefix: &str, n: usize) -> usize {
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let mut argv = vec!["EXISTS"];
    argv.extend(keys.iter().map(String::as_str));
    match c.send(&argv) {
        Frame::Integer(found) => found as usize,
        other => panic!("EXISTS answered {other:?}"),
    }
}

#[test]
fn every_policy_holds_used_memory_near_the_limit() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"] {
        assert_eq!(c.cmd("FLUSHALL"), ok());
        assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
        let limit = limit_above_now(&mut c, policy, 4 << 20);
        let before = evicted_keys(&mut c);
        // 16 MB of values against 4 MB of room.
        let failed = fill(&mut c, "k", 16_000, 1000, true);
        assert_eq!(failed, [], "{policy}: every write made room for itself");
        let used = used_memory(&mut c);
        assert!(used <= limit + (1 << 20), "{policy}: used {used} against a limit of {limit}");
        // The cron may evict meanwhile: count keys and evictions at one instant.
        assert_eq!(c.cmd("MULTI"), ok());
        assert_eq!(c.cmd("DBSIZE"), simple("QUEUED"));
        assert_eq!(c.cmd("INFO stats"), simple("QUEUED"));
        let (keys, evicted) = match c.cmd("EXEC") {
            Frame::Array(replies) => match &replies[..] {
                [Frame::Integer(keys), Frame::Bulk(info)] => {
                    let info = String::from_utf8_lossy(info).into_owned();
                    let evicted = info.lines().find_map(|l| l.strip_prefix("evicted_keys:")).expect("evicted_keys");
                    (*keys as u64, evicted.trim().parse::<u64>().expect("a count"))
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        assert!(keys < 8_000, "{policy}: {keys} keys stayed");
        assert_eq!(evicted - before + keys, 16_000, "{policy}: every key gone was counted");
    }
}

/// What one command allocates counts at the very next command's check
/// (Redis's counter is exact): a SETBIT that grows a string by 4 MB past
/// the limit has the only volatile key evicted before the command after
/// it runs, whichever it is. Repeated, as a figure stale by up to a
/// millisecond would pass now and then. (The limit is 1 MB above what is
/// used: jemalloc's figure moves by tens of KB as thread caches fill.)
#[test]
fn a_command_sees_what_the_one_before_it_allocated() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    for round in 0..20 {
        assert_eq!(c.cmd("FLUSHALL"), ok());
        assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
        limit_above_now(&mut c, "volatile-random", 1 << 20);
        assert_eq!(c.cmd("SETEX volatile-key 10000 x"), ok());
        assert_eq!(c.cmd("SETBIT big-key 33554432 0"), int(0));
        assert_eq!(c.cmd("EXISTS volatile-key"), int(0), "round {round}: not evicted before the next command");
    }
}

#[test]
fn volatile_policies_take_only_keys_with_a_ttl_then_refuse_writes() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    for policy in ["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"] {
        assert_eq!(c.cmd("FLUSHALL"), ok());
        assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
        limit_above_now(&mut c, policy, 4 << 20);
        assert_eq!(fill(&mut c, "keep", 1_000, 1000, false), [], "{policy}");
        assert_eq!(fill(&mut c, "ttl", 8_000, 1000, true), [], "{policy}");
        assert_eq!(surviving(&mut c, "keep", 1_000), 1_000, "{policy}: a key without a TTL went");
        // Past the keys with a TTL, nothing may go: writes are refused,
        // reads served.
        let failed = fill(&mut c, "more", 8_000, 1000, false);
        assert!(
            matches!(&failed[..], [(e, _)] if *e == err(OOM)),
            "{policy}: the keys without a TTL outgrew the limit, refused as {failed:?}"
        );
        assert_eq!(surviving(&mut c, "keep", 1_000), 1_000, "{policy}");
        assert_eq!(c.cmd("GET keep7"), bulk(&"v".repeat(1000)));
    }
    // noeviction takes nothing: over the limit, writes that may grow
    // memory are refused, the rest served.
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy noeviction"), ok());
    assert_eq!(c.cmd("CONFIG SET maxmemory 1"), ok());
    assert_eq!(c.cmd("SET x y"), err(OOM));
    assert_eq!(c.cmd("DEL keep1"), int(1));
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("GET keep2"), err(OOM), "queueing is refused past the limit, as in Redis");
    assert_eq!(c.cmd("EXEC"), err("EXECABORT Transaction discarded because of previous errors."));
    assert!(matches!(
        c.send(&["EVAL", "return redis.call('set', 'x', 'y')", "0"]),
        Frame::Error(e) if e.starts_with(b"OOM command not allowed when used memory > 'maxmemory'")
    ));
}

/// Writes `n` cold keys, waits for the LRU clock (seconds) to move past
/// them, reads `hot` of them, then writes new keys until `evict` keys
/// went. Returns how many (hot, cold) keys went.
fn lost_after_pressure(c: &mut Client, policy: &str, n: usize, hot: usize, evict: u64, between: impl FnOnce(&mut Client)) -> (usize, usize) {
    assert_eq!(fill(c, "old", n, 1000, true), []);
    between(c);
    for i in 0..hot {
        c.write_command(&["GET", &format!("old{i}")]);
    }
    for _ in 0..hot {
        assert!(matches!(c.read(), Frame::Bulk(_)));
    }
    limit_above_now(c, policy, 64 << 10);
    let mut i = 0;
    while evicted_keys(c) < evict {
        assert_eq!(fill(c, &format!("new{i}-"), 20, 1000, true), []);
        i += 1;
    }
    let hot_lost = hot - (0..hot).filter(|i| c.cmd(&format!("EXISTS old{i}")) == int(1)).count();
    let cold_lost = (n - hot) - (hot..n).filter(|i| c.cmd(&format!("EXISTS old{i}")) == int(1)).count();
    (hot_lost, cold_lost)
}

#[test]
fn lru_policies_take_the_keys_idle_longest() {
    for policy in ["allkeys-lru", "volatile-lru"] {
        let server = Server::start(&["--appendonly", "no"]);
        let mut c = server.client();
        let (hot_lost, cold_lost) = lost_after_pressure(&mut c, policy, 2_000, 1_000, 600, |_| {
            // The LRU clock counts seconds.
            std::thread::sleep(Duration::from_millis(2_100));
        });
        assert!(cold_lost >= 300 && hot_lost * 5 < cold_lost, "{policy}: lost {hot_lost} read keys, {cold_lost} idle ones");
    }
}

#[test]
fn lfu_policies_take_the_keys_read_least() {
    for policy in ["allkeys-lfu", "volatile-lfu"] {
        let server = Server::start(&["--appendonly", "no", "--lfu-log-factor", "0"]);
        let mut c = server.client();
        // Counters are kept once an LFU policy is chosen.
        assert_eq!(c.cmd(&format!("CONFIG SET maxmemory-policy {policy}")), ok());
        let (hot_lost, cold_lost) = lost_after_pressure(&mut c, policy, 2_000, 1_000, 600, |c| {
            // Ten more reads for the keys read: counters far above a new key's.
            for _ in 0..10 {
                for i in 0..1_000 {
                    c.write_command(&["GET", &format!("old{i}")]);
                }
                for _ in 0..1_000 {
                    c.read();
                }
            }
        });
        assert!(cold_lost >= 100 && hot_lost * 5 < cold_lost, "{policy}: lost {hot_lost} read keys, {cold_lost} others");
    }
}

#[test]
fn volatile_ttl_takes_the_keys_that_expire_soonest() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    let value = "v".repeat(1000);
    for i in 0..2_000 {
        let ttl = if i % 2 == 0 { "1000" } else { "100000" };
        c.write_command(&["SET", &format!("t{i}"), &value, "EX", ttl]);
    }
    for _ in 0..2_000 {
        assert_eq!(c.read(), ok());
    }
    limit_above_now(&mut c, "volatile-ttl", 64 << 10);
    let mut i = 0;
    while evicted_keys(&mut c) < 600 {
        for j in 0..20 {
            c.write_command(&["SET", &format!("n{i}-{j}"), &value, "EX", "50000"]);
        }
        for _ in 0..20 {
            assert_eq!(c.read(), ok());
        }
        i += 1;
    }
    let lost = |c: &mut Client, parity: usize| (0..2_000).filter(|i| i % 2 == parity && c.cmd(&format!("EXISTS t{i}")) == int(0)).count();
    let (soon, late) = (lost(&mut c, 0), lost(&mut c, 1));
    assert!(soon >= 300 && late * 5 < soon, "lost {soon} keys with 1000 s left, {late} with 100000 s");
}

#[test]
fn evictions_are_journaled_replicated_and_notified() {
    let dir = temp_dir("eviction-aof");
    let server = Server::start_in(&dir, &["--appendonly", "yes", "--appendfsync", "always"]);
    let mut c = server.client();
    let redis = Server::start_redis(&[]);
    if let Some(redis) = &redis {
        let mut r = redis.client();
        assert_eq!(r.cmd(&format!("REPLICAOF 127.0.0.1 {}", server.port)), ok());
        wait_for("the Redis replica synced", || r.info_field("replication", "master_link_status") == "up");
    }
    assert_eq!(c.cmd("CONFIG SET notify-keyspace-events Ee"), ok());
    let mut events = server.client();
    assert!(matches!(events.cmd("SUBSCRIBE __keyevent@0__:evicted"), Frame::Array(_)));
    // The replication backlog and the journal's buffers grow with the
    // first writes, up to their sizes: grown first, they leave the limit
    // to the keys.
    assert_eq!(fill(&mut c, "warm", 4_000, 1000, false), []);
    assert_eq!(c.cmd("FLUSHALL"), ok());
    limit_above_now(&mut c, "allkeys-random", 2 << 20);
    assert_eq!(fill(&mut c, "k", 8_000, 1000, false), []);
    let evicted = evicted_keys(&mut c);
    assert!(evicted > 4_000, "{evicted} evicted");
    // Each eviction says so, naming its key.
    for _ in 0..10 {
        match events.read() {
            Frame::Array(parts) => assert_eq!(parts[1], bulk("__keyevent@0__:evicted")),
            other => panic!("{other:?}"),
        }
    }
    // No more evictions from here: the survivors stay as they are.
    assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
    let mut survivors: Vec<usize> = (0..8_000).filter(|i| c.cmd(&format!("EXISTS k{i}")) == int(1)).collect();
    survivors.sort_unstable();
    assert_eq!(c.cmd("DBSIZE"), int(survivors.len() as i64));
    if let Some(redis) = &redis {
        let mut r = redis.client();
        assert_eq!(c.cmd("SET done 1"), ok());
        wait_for("the Redis replica caught up", || r.cmd("GET done") == bulk("1"));
        let on_replica: Vec<usize> = (0..8_000).filter(|i| r.cmd(&format!("EXISTS k{i}")) == int(1)).collect();
        assert_eq!(on_replica, survivors, "the replica took the master's evictions");
        assert_eq!(c.cmd("DEL done"), int(1));
    }
    // Every eviction was acknowledged with the write that caused it:
    // after kill -9 and a restart without a limit, the same keys are there.
    server.kill9();
    let server = Server::start_last_in(&dir, &["--appendonly", "yes"]);
    let mut c = server.client();
    let after: Vec<usize> = (0..8_000).filter(|i| c.cmd(&format!("EXISTS k{i}")) == int(1)).collect();
    assert_eq!(after, survivors);
}

#[test]
fn lazyfree_eviction_journals_unlink() {
    let dir = temp_dir("eviction-unlink");
    let server = Server::start_in(&dir, &["--appendonly", "yes", "--lazyfree-lazy-eviction", "yes"]);
    let mut c = server.client();
    limit_above_now(&mut c, "allkeys-lru", 1 << 20);
    assert_eq!(fill(&mut c, "k", 4_000, 1000, false), []);
    assert!(evicted_keys(&mut c) > 1_000);
    let log: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("appendonlydir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".incr.aof"))
        .flat_map(|e| std::fs::read(e.path()).expect("incr file"))
        .collect();
    let text = String::from_utf8_lossy(&log);
    assert!(text.contains("$6\r\nUNLINK\r\n"), "evictions are journaled as UNLINK");
    assert!(!text.contains("$3\r\nDEL\r\n"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_replica_leaves_eviction_to_its_master() {
    let master = Server::start(&["--appendonly", "no"]);
    let port = master.port.to_string();
    let replica = Server::start(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    let mut m = master.client();
    let mut r = replica.client();
    wait_for("the replica synced", || r.info_field("replication", "master_link_status") == "up");
    // The replica's own limit is far below its data: it evicts nothing
    // (replica-ignore-maxmemory yes) and takes all its master sends.
    limit_above_now(&mut r, "allkeys-random", 0);
    assert_eq!(r.cmd("CONFIG SET maxmemory 1"), ok());
    assert_eq!(fill(&mut m, "k", 2_000, 1000, false), []);
    assert_eq!(m.cmd("SET done 1"), ok());
    wait_for("the replica caught up", || r.cmd("GET done") == bulk("1"));
    assert_eq!(r.cmd("DBSIZE"), int(2_001));
    assert_eq!(evicted_keys(&mut r), 0);
}

#[test]
fn memcached_clients_see_items_evicted_or_refused() {
    let (server, mc_port) = start_keel(&["--appendonly", "no"]);
    let mut c = server.client();
    limit_above_now(&mut c, "allkeys-lru", 2 << 20);
    let mut mc = McClient::connect(mc_port);
    let value = "v".repeat(1000);
    for i in 0..8_000 {
        mc.write_raw(format!("set m{i} 7 0 1000\r\n{value}\r\n").as_bytes());
        assert_eq!(mc.line(), "STORED", "item {i}");
    }
    assert!(evicted_keys(&mut c) > 4_000);
    mc.write_raw(b"get m7999\r\n");
    assert_eq!(mc.line(), "VALUE m7999 7 1000");
    assert_eq!(mc.line(), value);
    assert_eq!(mc.line(), "END");
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy noeviction"), ok());
    assert_eq!(c.cmd("CONFIG SET maxmemory 1"), ok());
    mc.write_raw(format!("set m0 0 0 1000\r\n{value}\r\n").as_bytes());
    assert_eq!(mc.line(), format!("SERVER_ERROR {OOM}"));
}

/// What a client sees of the limit that does not depend on what is
/// sampled: the settings, their errors, and with a limit of one byte, the
/// volatile key evicted, then OOM for everything that may grow memory, in
/// commands, transactions and scripts, the same from Keel and Redis.
#[test]
fn settings_and_refusals_match_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&["--appendonly", "no"]);
    let mut r = redis.client();
    let mut k = keel.client();
    let commands: &[&[&str]] = &[
        &["CONFIG", "GET", "maxmemory-samples"],
        &["CONFIG", "GET", "maxmemory-eviction-tenacity"],
        &["CONFIG", "GET", "replica-ignore-maxmemory"],
        &["CONFIG", "GET", "slave-ignore-maxmemory"],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys"],
        &["CONFIG", "SET", "maxmemory-samples", "0"],
        &["CONFIG", "SET", "maxmemory-samples", "64"],
        &["CONFIG", "SET", "maxmemory-eviction-tenacity", "101"],
        &["CONFIG", "SET", "maxmemory-eviction-tenacity", "100"],
        &["CONFIG", "SET", "maxmemory", "-1"],
        &["CONFIG", "SET", "maxmemory-policy", "VOLATILE-LRU"],
        &["CONFIG", "GET", "maxmemory-policy"],
        &["SET", "a", "1"],
        &["SET", "b", "2", "EX", "1000"],
        &["CONFIG", "SET", "maxmemory", "1"],
        &["GET", "a"],
        &["SET", "c", "3"],
        &["EXISTS", "b"],
        &["DBSIZE"],
        &["INCR", "a"],
        &["MULTI"],
        &["GET", "a"],
        &["EXEC"],
        &["MULTI"],
        &["EXEC"],
        &["EVAL", "return redis.call('get', 'a')", "0"],
        &["EVAL", "return redis.call('set', 'a', 'b')", "0"],
        &["EVAL", "return redis.pcall('set', 'a', 'b')", "0"],
        &["EVAL", "#!lua\nreturn 1", "0"],
        &["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', 'a')", "0"],
        &["EVAL", "#!lua flags=allow-oom\nreturn redis.call('set', 'a', 'b')", "0"],
        &["GET", "a"],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
        &["SET", "d", "4"],
        &["DBSIZE"],
        &["DEL", "a"],
        &["CONFIG", "SET", "maxmemory", "0"],
        &["SET", "d", "4"],
        &["OBJECT", "FREQ", "d"],
    ];
    for argv in commands {
        let (got, want) = (k.send(argv), r.send(argv));
        assert!(got == want, "`{}`: keel {}, redis {}", argv.join(" "), readable(&format!("{got:?}")), readable(&format!("{want:?}")));
    }
    assert_eq!(evicted_keys(&mut k), evicted_keys(&mut r));
}
