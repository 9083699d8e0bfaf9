//! Black-box and differential tests of MEMORY (STATS, DOCTOR, PURGE,
//! MALLOC-STATS, HELP), of INFO memory's breakdown, and of the commands
//! Redis has beside them: MODULE, LOLWUT, and the protected settings.

mod common;

use common::{ok, Client, Frame, Server};

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// MEMORY STATS as (name, value) pairs; a database's map as its name and
/// its own pairs flattened after it (`db.0.overhead.hashtable.main`).
fn memory_stats(c: &mut Client) -> Vec<(String, Frame)> {
    let Frame::Array(items) = c.cmd("MEMORY STATS") else { panic!("MEMORY STATS is a flat map in RESP2") };
    let mut pairs = Vec::new();
    for pair in items.chunks(2) {
        let name = text(&pair[0]);
        match &pair[1] {
            Frame::Array(inner) => {
                for sub in inner.chunks(2) {
                    pairs.push((format!("{name}.{}", text(&sub[0])), sub[1].clone()));
                }
            }
            value => pairs.push((name, value.clone())),
        }
    }
    pairs
}

fn stat(stats: &[(String, Frame)], name: &str) -> i64 {
    match stats.iter().find(|(n, _)| n == name).map(|(_, v)| v) {
        Some(Frame::Integer(i)) => *i,
        other => panic!("{name}: {other:?}"),
    }
}

fn info_u64(c: &mut Client, field: &str) -> u64 {
    c.info_field("memory", field).parse().unwrap_or_else(|_| panic!("{field} is a number"))
}

/// What an empty server answers, compared with redis-server: the texts
/// and errors whole, MEMORY STATS by its names, LOLWUT's art where it
/// draws without chance (Schotter's first two rows never move).
#[test]
fn memory_module_and_lolwut_answer_as_redis_does() {
    let lines: &[&[&str]] = &[
        &["MEMORY", "HELP"],
        &["MEMORY", "DOCTOR"],
        &["MEMORY", "PURGE"],
        &["MEMORY", "STATS", "x"],
        &["MEMORY", "NOSUCH"],
        &["MEMORY", "USAGE", "nokey"],
        &["MODULE", "HELP"],
        &["MODULE", "LIST"],
        &["MODULE", "LIST", "x"],
        &["MODULE", "LOAD", "/nonexistent.so"],
        &["MODULE", "LOADEX", "/nonexistent.so", "CONFIG", "a", "b"],
        &["MODULE", "UNLOAD", "nosuch"],
        &["MODULE", "LOAD"],
        &["LOLWUT"],
        &["LOLWUT", "VERSION", "7"],
        &["LOLWUT", "VERSION", "5", "66", "8", "2"],
        &["LOLWUT", "VERSION", "5", "20", "3", "1"],
        &["LOLWUT", "VERSION", "5", "0", "-4", "1"],
        &["LOLWUT", "VERSION", "5", "1000", "300", "2"],
        &["LOLWUT", "VERSION", "4294967301", "9", "2", "2"],
        &["LOLWUT", "VERSION", "5", "x"],
        &["LOLWUT", "VERSION", "x"],
        &["LOLWUT", "VERSION"],
        &["CONFIG", "SET", "dir", "/tmp"],
        &["CONFIG", "SET", "dbfilename", "other.rdb"],
        &["CONFIG", "SET", "enable-protected-configs", "yes"],
        &["CONFIG", "SET", "enable-module-command", "yes"],
        &["CONFIG", "GET", "enable-module-command"],
        &["CONFIG", "GET", "enable-protected-configs"],
        &["CONFIG", "GET", "dbfilename"],
    ];
    let run = |server: &Server| -> (Vec<Frame>, Vec<String>) {
        let mut c = server.client();
        let replies = lines.iter().map(|argv| c.send(argv)).collect();
        (replies, memory_stats(&mut c).into_iter().map(|(name, _)| name).collect())
    };
    let (keel, keel_stats) = run(&Server::start(&[]));
    assert!(text(&keel[1]).starts_with("Hi Sam, this instance is empty"), "{:?}", keel[1]);
    assert!(text(&keel[15]).contains("\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15\n"));
    assert!(keel_stats.contains(&"dataset.bytes".to_string()), "{keel_stats:?}");
    let Some(redis) = Server::start_redis(&[]) else { return };
    let (redis, redis_stats) = run(&redis);
    for ((line, keel), redis) in lines.iter().zip(&keel).zip(&redis) {
        assert_eq!(keel, redis, "{line:?}");
    }
    assert_eq!(keel_stats, redis_stats);
}

/// With `enable-module-command` and `enable-protected-configs`, a load
/// fails as a module that does not load fails in Redis, and the files'
/// place may move.
#[test]
fn the_protected_commands_run_where_their_settings_allow() {
    let flags = ["--enable-module-command", "yes", "--enable-protected-configs", "local"];
    let lines: &[&[&str]] = &[
        &["MODULE", "LOAD", "/nonexistent.so"],
        &["MODULE", "LOADEX", "/nonexistent.so"],
        &["MODULE", "UNLOAD", "nosuch"],
        &["CONFIG", "SET", "dbfilename", "other.rdb"],
        &["CONFIG", "GET", "dbfilename"],
        &["CONFIG", "SET", "dbfilename", "../x.rdb"],
    ];
    let run = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        lines.iter().map(|argv| c.send(argv)).collect()
    };
    let keel_server = Server::start(&flags);
    let keel = run(&keel_server);
    assert_eq!(keel[3], ok());
    let mut c = keel_server.client();
    let Frame::Array(dir) = c.cmd("CONFIG GET dir") else { panic!("CONFIG GET is an array") };
    assert_eq!(c.send(&["CONFIG", "SET", "dir", &text(&dir[1])]), ok());
    let Some(redis) = Server::start_redis(&flags) else { return };
    for ((line, keel), redis) in lines.iter().zip(&keel).zip(run(&redis)) {
        assert_eq!(*keel, redis, "{line:?}");
    }
}

/// MEMORY STATS and INFO memory account for what the server holds: the
/// tables of each database with keys, the clients, the script caches, the
/// interpreter; the dataset is what is left of the allocated bytes.
#[test]
fn memory_stats_account_for_the_dataset_and_its_overheads() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let before = memory_stats(&mut c);
    assert_eq!(stat(&before, "keys.count"), 0);
    assert!(stat(&before, "startup.allocated") > 0);
    assert!(stat(&before, "clients.normal") > 0, "this connection's buffers");
    assert!(!before.iter().any(|(n, _)| n.starts_with("db.")), "no database has keys");

    let value = "v".repeat(1000);
    for i in 0..20_000 {
        c.write_command(&["SET", &format!("key:{i}"), &value]);
    }
    for i in 0..5_000 {
        c.write_command(&["EXPIRE", &format!("key:{i}"), "1000"]);
    }
    for _ in 0..25_000 {
        c.read();
    }
    assert_eq!(c.cmd("SELECT 3"), ok());
    assert_eq!(c.cmd("SET other 1"), ok());
    assert_eq!(c.send(&["SCRIPT", "LOAD", "return 1"]), Frame::Bulk(b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db".to_vec()));
    assert_eq!(c.send(&["EVAL", "return #KEYS", "0"]), Frame::Integer(0));
    let library = "#!lua name=lib\nredis.register_function('f', function() return 1 end)";
    assert_eq!(c.send(&["FUNCTION", "LOAD", library]), Frame::Bulk(b"lib".to_vec()));

    let stats = memory_stats(&mut c);
    assert_eq!(stat(&stats, "keys.count"), 20_001);
    assert!(stat(&stats, "db.0.overhead.hashtable.main") > 20_000 * 16);
    assert!(stat(&stats, "db.0.overhead.hashtable.expires") > 5_000 * 8);
    assert!(stat(&stats, "db.3.overhead.hashtable.main") > 0);
    assert!(stat(&stats, "db.3.overhead.hashtable.expires") < 1_000, "an empty table of expiries");
    assert!(stat(&stats, "lua.caches") >= 8 + 40, "the script and its SHA");
    assert!(stat(&stats, "functions.caches") >= library.len() as i64);
    let (total, overhead, dataset) =
        (stat(&stats, "total.allocated"), stat(&stats, "overhead.total"), stat(&stats, "dataset.bytes"));
    assert_eq!(dataset, total - overhead);
    assert!(dataset > 20_000 * 1000, "the values are in the dataset: {dataset}");
    assert!(stat(&stats, "peak.allocated") >= total);
    assert!(stat(&stats, "keys.bytes-per-key") > 1000);

    assert!(info_u64(&mut c, "used_memory_overhead") > 20_000 * 16);
    assert!(info_u64(&mut c, "used_memory_dataset") > 20_000 * 1000);
    assert!(info_u64(&mut c, "used_memory_startup") > 0);
    assert!(info_u64(&mut c, "used_memory_vm_eval") > 0, "the interpreter that ran the scripts");
    assert!(info_u64(&mut c, "used_memory_scripts") > library.len() as u64);
    assert_eq!(c.cmd("MEMORY PURGE"), ok());
    let report = text(&c.cmd("MEMORY MALLOC-STATS"));
    assert!(report.contains("Begin jemalloc statistics"), "{report}");
}

/// MEMORY DOCTOR reads the same figures: a server that held three times
/// what it holds now is told of its peak, in Redis's words.
#[test]
fn the_memory_doctor_reports_a_past_peak() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let value = "p".repeat(10_000);
    for i in 0..3_000 {
        c.write_command(&["SET", &format!("peak:{i}"), &value]);
    }
    for _ in 0..3_000 {
        c.read();
    }
    // The peak is read with the allocator's counters.
    assert!(info_u64(&mut c, "used_memory_peak") > 30_000_000);
    for i in 1_000..3_000 {
        c.write_command(&["DEL", &format!("peak:{i}")]);
    }
    for _ in 1_000..3_000 {
        c.read();
    }
    let report = text(&c.cmd("MEMORY DOCTOR"));
    assert!(report.starts_with("Sam, I detected a few issues in this Redis instance memory implants:"), "{report}");
    assert!(report.contains(" * Peak memory: In the past this instance used more than 150%"), "{report}");
    // CONFIG RESETSTAT starts the peak again from now.
    assert_eq!(c.cmd("CONFIG RESETSTAT"), ok());
    let peak = info_u64(&mut c, "used_memory_peak");
    assert!(peak < 30_000_000, "{peak}");
    assert!(!text(&c.cmd("MEMORY DOCTOR")).contains("Peak memory"));
}
