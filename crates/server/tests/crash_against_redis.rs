//! Crash tests against a model that never crashes. Writers on several
//! connections send Keel commands of every type (transactions, scripts
//! and functions among them, some moving keys between databases) and,
//! once Keel has acknowledged one, send it to Debian's redis-server too,
//! whose reply must match. Keel is killed with `kill -9` at random
//! instants while rewrites and snapshots come and go and `appendfsync`
//! and the base format change under it, then restarted on its directory:
//! its whole dataset must equal Redis's, up to each writer's one command
//! in flight, which may or may not have landed. Each writer owns its keys,
//! so the order between writers does not matter.
//!
//! The second test runs the same cycles on a failing disk: each server
//! after the first starts with journal failpoints (failed writes, short
//! writes and failed cuts after them, failed fsyncs, for a few operations
//! from some point on), so that kills land while the journal refuses
//! writes and repairs its files. A step Keel refuses with -MISCONF is not
//! sent to Redis, so that Keel must hold nothing of it either.
//!
//! For long runs by hand, `KEEL_CRASH_CYCLES` sets the number of cycles
//! (default 30) and `KEEL_CRASH_SEED` the seed of every random choice
//! (default 11).

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::state::{read_state, State};
use common::{copy_dir, temp_dir, Client, Frame, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const WRITERS: usize = 4;

/// Keys per type and writer: few, so that commands meet on keys.
const KEYS_PER_TYPE: usize = 5;

const PUSH_AND_COUNT: &str = "redis.call('incrby', KEYS[1], ARGV[1]) return redis.call('rpush', KEYS[2], ARGV[1])";
const SET_OR_COUNT: &str = "if redis.call('exists', KEYS[1]) == 1 then return redis.call('hincrby', KEYS[2], 'seen', 1) \
                            else return redis.call('set', KEYS[1], ARGV[1]) end";
const LIBRARY: &str = "#!lua name=crashlib\n\
                       redis.register_function('pushlen', function(keys, args) \
                       redis.call('rpush', keys[1], args[1]) return redis.call('llen', keys[1]) end)";

/// One command each. Tokens: `{s}` a string key, `{n}` a key holding a
/// number, `{l}` a list, `{h}` a hash, `{t}` a set, `{z}` a sorted set,
/// `{any}` any of them; `{v}` a value (now and then a big one), `{m}` a
/// member or field, `{many}` two hundred members, `{i}` a small integer,
/// `{c}` a small count, `{f}` a decimal, `{at}` and `{sec}` a time far
/// ahead (ms, s), `{past}` one long gone. TTLs are absolute so that both
/// servers hold the same expiry.
const COMMANDS: &[&[&str]] = &[
    &["SET", "{s}", "{v}"],
    &["SET", "{s}", "{v}", "PXAT", "{at}"],
    &["SET", "{s}", "{v}", "KEEPTTL"],
    &["SET", "{s}", "{v}", "PXAT", "{past}"],
    &["SET", "{s}", "{v}", "XX", "GET"],
    &["APPEND", "{s}", "{v}"],
    &["SETRANGE", "{s}", "{c}", "{v}"],
    &["GETDEL", "{s}"],
    &["GETEX", "{s}", "PXAT", "{at}"],
    &["GETEX", "{s}", "PERSIST"],
    &["MSET", "{s}", "{v}", "{n}", "{i}"],
    &["INCRBY", "{n}", "{i}"],
    &["DECR", "{n}"],
    &["INCRBYFLOAT", "{n}", "{f}"],
    &["SETNX", "{n}", "{i}"],
    &["RPUSH", "{l}", "{v}", "{m}"],
    &["LPUSH", "{l}", "{m}"],
    &["LPOP", "{l}"],
    &["RPOP", "{l}", "{c}"],
    &["LTRIM", "{l}", "0", "30"],
    &["LSET", "{l}", "{i}", "{v}"],
    &["LINSERT", "{l}", "BEFORE", "{m}", "{v}"],
    &["LREM", "{l}", "{i}", "{m}"],
    &["LMOVE", "{l}", "{l}", "LEFT", "RIGHT"],
    &["RPOPLPUSH", "{l}", "{l}"],
    &["HSET", "{h}", "{m}", "{v}", "{m}", "{i}"],
    &["HDEL", "{h}", "{m}", "{m}"],
    &["HINCRBY", "{h}", "{m}", "{i}"],
    &["HINCRBYFLOAT", "{h}", "{m}", "{f}"],
    &["HSETNX", "{h}", "{m}", "{v}"],
    &["SADD", "{t}", "{m}", "{m}", "{m}"],
    &["SADD", "{t}", "{many}"],
    &["SREM", "{t}", "{m}", "{m}"],
    &["SMOVE", "{t}", "{t}", "{m}"],
    &["SINTERSTORE", "{t}", "{t}", "{t}"],
    &["SUNIONSTORE", "{t}", "{t}", "{t}"],
    &["SDIFFSTORE", "{t}", "{t}", "{t}"],
    &["ZADD", "{z}", "{f}", "{m}", "{f}", "{m}"],
    &["ZADD", "{z}", "GT", "CH", "{f}", "{m}"],
    &["ZADD", "{z}", "INCR", "{f}", "{m}"],
    &["ZADD", "{z}", "{many}"],
    &["ZINCRBY", "{z}", "{f}", "{m}"],
    &["ZREM", "{z}", "{m}"],
    &["ZREMRANGEBYRANK", "{z}", "0", "{c}"],
    &["ZPOPMIN", "{z}", "{c}"],
    &["ZUNIONSTORE", "{z}", "2", "{z}", "{z}", "WEIGHTS", "2", "1"],
    &["ZRANGESTORE", "{z}", "{z}", "0", "{c}"],
    &["DEL", "{any}", "{any}"],
    &["UNLINK", "{any}"],
    &["PEXPIREAT", "{any}", "{at}"],
    &["EXPIREAT", "{any}", "{sec}"],
    &["PEXPIREAT", "{any}", "{past}"],
    &["PERSIST", "{any}"],
    &["RENAME", "{h}", "{h}"],
    &["RENAMENX", "{z}", "{z}"],
    &["COPY", "{t}", "{t}", "REPLACE"],
    &["MOVE", "{any}", "1"],
    &["EVAL", PUSH_AND_COUNT, "2", "{n}", "{l}", "{i}"],
    &["EVAL", SET_OR_COUNT, "2", "{s}", "{h}", "{v}"],
    &["FCALL", "pushlen", "1", "{l}", "{v}"],
];

/// A writer's keys of one type (`s`, `n`, `l`, `h`, `t`, `z`).
fn key(writer: usize, kind: char, rng: &mut StdRng) -> String {
    format!("w{writer}:{kind}{}", rng.gen_range(0..KEYS_PER_TYPE))
}

fn value(rng: &mut StdRng) -> String {
    match rng.gen_range(0..200) {
        0 => "b".repeat(rng.gen_range(100_000..300_000)),
        1..=9 => "x".repeat(rng.gen_range(1_000..20_000)),
        10..=59 => rng.gen_range(-100..100).to_string(),
        n => format!("v{n}"),
    }
}

fn member(rng: &mut StdRng) -> String {
    format!("m{}", rng.gen_range(0..300))
}

fn decimal(rng: &mut StdRng) -> String {
    ["1.5", "-2", "3.25", "0.1", "1e3", "7"][rng.gen_range(0..6)].to_string()
}

/// Fills one template for `writer`.
fn expand(template: &[&str], writer: usize, rng: &mut StdRng) -> Vec<String> {
    let mut argv = Vec::new();
    for &token in template {
        match token {
            "{s}" | "{n}" | "{l}" | "{h}" | "{t}" | "{z}" => {
                argv.push(key(writer, token.chars().nth(1).expect("kind"), rng));
            }
            "{any}" => argv.push(key(writer, ['s', 'n', 'l', 'h', 't', 'z'][rng.gen_range(0..6)], rng)),
            "{v}" => argv.push(value(rng)),
            "{m}" => argv.push(member(rng)),
            "{many}" if template[0] == "ZADD" => {
                argv.extend((0..200).flat_map(|i| [i.to_string(), member(rng)]));
            }
            "{many}" => argv.extend((0..200).map(|_| member(rng))),
            "{i}" => argv.push(rng.gen_range(-5..20).to_string()),
            "{c}" => argv.push(rng.gen_range(1..6).to_string()),
            "{f}" => argv.push(decimal(rng)),
            "{at}" => argv.push((4_000_000_000_000u64 + rng.gen_range(0..1_000_000)).to_string()),
            "{sec}" => argv.push((4_000_000_000u64 + rng.gen_range(0..1_000)).to_string()),
            "{past}" => argv.push(rng.gen_range(1..1_000_000).to_string()),
            literal => argv.push(literal.to_string()),
        }
    }
    argv
}

/// One step of a writer: the commands it pipelines, of which at most one
/// writes unless they form a transaction (so a step cut short by the
/// crash either landed or did not).
fn step(writer: usize, rng: &mut StdRng) -> Vec<Vec<String>> {
    let one = |rng: &mut StdRng| expand(COMMANDS[rng.gen_range(0..COMMANDS.len())], writer, rng);
    let word = |w: &str| vec![w.to_string()];
    match rng.gen_range(0..20) {
        0..=2 => {
            let mut cmds = vec![word("MULTI")];
            cmds.extend((0..rng.gen_range(2..5)).map(|_| one(rng)));
            cmds.push(word("EXEC"));
            cmds
        }
        // A transaction that writes in another database, and a key brought
        // back from there: the journal must say which database each write
        // is for.
        3 => vec![word("MULTI"), vec!["SELECT".into(), "1".into()], one(rng), vec!["SELECT".into(), "0".into()], word("EXEC")],
        4 => {
            let back = vec!["MOVE".to_string(), key(writer, ['s', 'l', 'h', 't', 'z'][rng.gen_range(0..5)], rng), "0".into()];
            vec![vec!["SELECT".into(), "1".into()], back, vec!["SELECT".into(), "0".into()]]
        }
        _ => vec![one(rng)],
    }
}

/// Sends `cmds` pipelined; None if the connection fails before every reply.
fn send_all(c: &mut Client, cmds: &[Vec<String>]) -> Option<Vec<Frame>> {
    let bytes: Vec<u8> = cmds.iter().flat_map(|argv| common::encode(argv)).collect();
    c.stream.write_all(&bytes).ok()?;
    cmds.iter().map(|_| c.try_read()).collect()
}

/// What a writer leaves when Keel's connection fails.
struct Report {
    redis: Client,
    /// The steps Keel acknowledged this cycle (arguments cut), for messages.
    acked: Vec<Vec<Vec<String>>>,
    /// The step in flight, if any.
    in_flight: Option<Vec<Vec<String>>>,
}

/// Whether Keel refused the step's write while its journal could not
/// write: -MISCONF to the command, or to the queueing of a transaction's
/// (whose EXEC then answers EXECABORT), or EXECABORT naming MISCONF to
/// an EXEC of writes queued before the failure, or, inside EXEC's reply,
/// to a script without a shebang at its first write (which Redis, too,
/// refuses only there).
fn refused(replies: &[Frame]) -> bool {
    replies.iter().any(|r| match r {
        Frame::Error(e) => String::from_utf8_lossy(e).contains("MISCONF"),
        Frame::Array(inner) => refused(inner),
        _ => false,
    })
}

/// Runs steps against Keel and, once acknowledged, against Redis, until
/// Keel's connection fails.
fn writer(keel_port: u16, mut redis: Client, id: usize, seed: u64, stop: Arc<AtomicBool>) -> Report {
    let mut keel = Client::connect(keel_port);
    let mut rng = StdRng::seed_from_u64(seed);
    assert_eq!(redis.cmd("SELECT 0"), common::ok());
    let mut acked = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let cmds = step(id, &mut rng);
        let Some(got) = send_all(&mut keel, &cmds) else { return Report { redis, acked, in_flight: Some(cmds) } };
        if refused(&got) {
            thread::sleep(Duration::from_millis(5));
            continue;
        }
        let want = send_all(&mut redis, &cmds).expect("redis-server answers");
        assert!(
            want == got,
            "writer {id}: replies differ for {}\n redis: {}\n keel:  {}",
            common::readable(&format!("{:?}", short(&cmds))),
            common::readable(&format!("{want:?}")),
            common::readable(&format!("{got:?}"))
        );
        acked.push(short(&cmds));
    }
    Report { redis, acked, in_flight: None }
}

/// `cmds` with long arguments cut, for messages.
fn short(cmds: &[Vec<String>]) -> Vec<Vec<String>> {
    cmds.iter()
        .map(|argv| argv.iter().map(|a| if a.len() > 40 { format!("{}...({} bytes)", &a[..20], a.len()) } else { a.clone() }).collect())
        .collect()
}

/// Starts and ends rewrites and snapshots, and switches the base format
/// and `appendfsync`, until the server goes.
fn churn(port: u16, seed: u64, stop: Arc<AtomicBool>) {
    let mut c = Client::connect(port);
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(rng.gen_range(5..60)));
        let cmd: &[&str] = match rng.gen_range(0..10) {
            0..=4 => &["BGREWRITEAOF"],
            5 => &["BGSAVE"],
            6 => &["CONFIG", "SET", "aof-use-rdb-preamble", "no"],
            7 => &["CONFIG", "SET", "aof-use-rdb-preamble", "yes"],
            8 => &["CONFIG", "SET", "appendfsync", ["everysec", "no"][rng.gen_range(0..2)]],
            _ => &["CONFIG", "SET", "appendfsync", "always"],
        };
        // Refusals (a rewrite already running) are part of the churn.
        if c.try_send(cmd).is_none() {
            return;
        }
    }
}

/// The keys of `writer`, in every database.
fn owned(state: &State, writer: usize) -> State {
    let prefix = format!("w{writer}:");
    state.iter().filter(|((_, k), _)| k.starts_with(prefix.as_bytes())).map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[test]
fn after_kill_9_keel_holds_what_redis_holds() {
    crash_cycles("crash-model", |_| None);
}

#[test]
fn after_kill_9_on_a_failing_disk_keel_holds_what_redis_holds() {
    crash_cycles("crash-faults", |rng| Some(failpoints(rng)));
}

/// Journal failpoints (`KEEL_JOURNAL_FAILPOINT`), from some operation on,
/// for a few operations: a few fsyncs fail, or writes fail whole or short
/// (and the cut after a short one, now and then), or both.
fn failpoints(rng: &mut StdRng) -> String {
    let rule = |what: &str, first: u64, rng: &mut StdRng| format!("{what}:{}:{}", rng.gen_range(1..first), rng.gen_range(1..5));
    let sync = rule("sync-eio", 40, rng);
    let mut write = rule(["write-eio", "write-enospc", "write-short"][rng.gen_range(0..3)], 400, rng);
    // After a short write the writer cuts what it wrote back off; that
    // may fail too, leaving a correct prefix of the record in the file.
    if write.starts_with("write-short") && rng.gen_bool(0.5) {
        write.push_str(&format!(",setlen-eio:1:{}", rng.gen_range(1..3)));
    }
    match rng.gen_range(0..3) {
        0 => sync,
        1 => write,
        _ => format!("{sync},{write}"),
    }
}

/// Runs the crash cycles in `temp_dir(name)`; `faults` picks the failpoints
/// of each server after the first.
fn crash_cycles(name: &str, faults: impl Fn(&mut StdRng) -> Option<String>) {
    let setting = |name: &str, default: u64| std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    let (cycles, seed) = (setting("KEEL_CRASH_CYCLES", 30), setting("KEEL_CRASH_SEED", 11));
    let Some(redis) = Server::start_redis(&[]) else { return };
    let dir = temp_dir(name);
    let flags = ["--auto-aof-rewrite-min-size", "1mb"];
    let mut redis_conns: Vec<Client> = (0..WRITERS).map(|_| redis.client()).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut check_redis = redis.client();
    let mut keel = Server::start_in(&dir, &flags);
    for c in [&mut keel.client(), &mut check_redis] {
        assert_eq!(c.send(&["FUNCTION", "LOAD", LIBRARY]), Frame::Bulk(b"crashlib".to_vec()));
    }
    let mut last_failpoints = None;
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = redis_conns
            .drain(..)
            .enumerate()
            .map(|(id, conn)| {
                let (port, stop, seed) = (keel.port, stop.clone(), rng.gen());
                thread::spawn(move || writer(port, conn, id, seed, stop))
            })
            .collect();
        let churner = {
            let (port, stop, seed) = (keel.port, stop.clone(), rng.gen());
            thread::spawn(move || churn(port, seed, stop))
        };
        thread::sleep(Duration::from_millis(rng.gen_range(100..600)));
        keel.kill9();
        stop.store(true, Ordering::Relaxed);
        churner.join().expect("churn");
        let reports: Vec<Report> = writers.into_iter().map(|w| w.join().expect("writer")).collect();

        // The files as the crash left them, for a failure to be looked into.
        let crashed = dir.with_extension("crashed");
        let _ = std::fs::remove_dir_all(&crashed);
        copy_dir(&dir, &crashed);
        let failpoints = faults(&mut rng);
        let env: Vec<(&str, &str)> = failpoints.iter().map(|f| ("KEEL_JOURNAL_FAILPOINT", f.as_str())).collect();
        keel = Server::start_in_with_env(&dir, &flags, &env);
        let mut check_keel = keel.client();
        assert_eq!(check_keel.cmd("FUNCTION LIST"), check_redis.cmd("FUNCTION LIST"), "cycle {cycle}: functions");
        let got = read_state(&mut check_keel);
        let mut want = read_state(&mut check_redis);
        for (id, mut report) in reports.into_iter().enumerate() {
            if owned(&got, id) != owned(&want, id) {
                // The step in flight landed in Keel: it must land in Redis too.
                if let Some(cmds) = &report.in_flight {
                    send_all(&mut report.redis, cmds).expect("redis-server answers");
                    want = read_state(&mut check_redis);
                }
            }
            let (got, want) = (owned(&got, id), owned(&want, id));
            if got != want {
                let differ: Vec<&Vec<u8>> = got.keys().chain(want.keys()).filter(|k| got.get(k) != want.get(k)).map(|k| &k.1).collect();
                let touching: Vec<String> = (report.acked.iter().enumerate())
                    .filter(|(_, step)| step.iter().flatten().any(|a| differ.iter().any(|k| a.as_bytes() == &k[..])))
                    .map(|(n, step)| format!("{n}: {step:?}"))
                    .collect();
                let steps: Vec<String> = report.acked.iter().map(|step| format!("{step:?}")).collect();
                let _ = std::fs::write(crashed.join(format!("writer-{id}.steps")), steps.join("\n"));
                eprintln!(
                    "cycle {cycle} (failpoints of the killed server: {last_failpoints:?}): writer {id} acknowledged {} steps (in {}/writer-{id}.steps), {:?} in flight; \
                     files as the crash left them in {}; the steps on the keys that differ:\n  {}",
                    report.acked.len(),
                    crashed.display(),
                    report.in_flight.as_deref().map(short),
                    crashed.display(),
                    touching.join("\n  ")
                );
            }
            common::state::assert_same(&got, &want, &format!("cycle {cycle}: writer {id}"));
            redis_conns.push(report.redis);
        }
        assert!(got.len() > 10, "cycle {cycle}: only {} keys: the writers did little", got.len());
        last_failpoints = failpoints;
    }
    drop(keel);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(dir.with_extension("crashed"));
}
