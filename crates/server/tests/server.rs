//! Black-box tests of the server commands: INFO, CONFIG, COMMAND, TIME,
//! LASTSAVE, SHUTDOWN, MONITOR, DEBUG.

mod common;

use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, simple, Client, Frame, Server};

fn text(frame: Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8(b).expect("utf8"),
        Frame::Verbatim { text, .. } => String::from_utf8(text).expect("utf8"),
        other => panic!("expected text, got {other:?}"),
    }
}

/// The value of `field` in an INFO reply.
fn info_field(c: &mut Client, section: &str, field: &str) -> String {
    let info = text(c.send(&["INFO", section]));
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

fn strings(frame: Frame) -> Vec<String> {
    match frame {
        Frame::Array(items) | Frame::Set(items) => items.into_iter().map(text).collect(),
        other => panic!("expected array, got {other:?}"),
    }
}

#[test]
fn info_sections_follow_redis_selection() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let default = text(c.cmd("INFO"));
    for needle in ["# Server", "redis_version:7.0.15", "keel_version:", "used_memory:", "used_cpu_user:", "role:master"] {
        assert!(default.contains(needle), "{needle} missing");
    }
    assert!(!default.contains("rejected_calls"), "default has no commandstats");
    assert!(default.contains("# Errorstats"));
    for arg in ["all", "everything"] {
        let all = text(c.send(&["INFO", arg]));
        assert!(all.contains("rejected_calls") && all.contains("# Latencystats"), "{arg}");
    }
    let cpu = text(c.send(&["info", "CPU"]));
    assert!(cpu.starts_with("# CPU\r\n") && cpu.contains("used_cpu_sys_main_thread:"));
    assert!(!cpu.contains("used_memory"));
    let two = text(c.send(&["INFO", "cpu", "all"]));
    assert_eq!(two.matches("used_cpu_user_children").count(), 1);
    let cpu_default = text(c.send(&["INFO", "cpu", "default"]));
    assert!(cpu_default.contains("master_repl_offset") && !cpu_default.contains("rejected_calls"));
    // Sections are separated by one blank line, as Redis does.
    let two = text(c.send(&["INFO", "server", "clients"]));
    assert!(two.contains("\r\n\r\n# Clients\r\n"));
    assert_eq!(text(c.send(&["INFO", "nosuchsection"])), "");
}

#[test]
fn info_reports_live_counters() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(info_field(&mut c, "server", "tcp_port"), server.port.to_string());
    assert!(info_field(&mut c, "server", "process_id").parse::<u32>().is_ok());
    c.wait_connected_clients(1);
    let mut other = server.client();
    assert_eq!(other.cmd("PING"), common::simple("PONG"));
    assert_eq!(info_field(&mut c, "clients", "connected_clients"), "2");

    assert_eq!(c.cmd("SET k v"), ok());
    assert_eq!(c.cmd("SET t v EX 100"), ok());
    assert_eq!(c.cmd("GET k"), bulk("v"));
    assert_eq!(c.cmd("GET nokey"), Frame::Null);
    assert_eq!(info_field(&mut c, "stats", "keyspace_hits"), "1");
    assert_eq!(info_field(&mut c, "stats", "keyspace_misses"), "1");
    let db0 = info_field(&mut c, "keyspace", "db0");
    assert!(db0.starts_with("keys=2,expires=1,avg_ttl="), "{db0}");
    let avg: u64 = db0.rsplit('=').next().and_then(|v| v.parse().ok()).expect("avg_ttl");
    assert!(avg > 90_000 && avg <= 100_000, "{avg}");
    assert_eq!(info_field(&mut c, "persistence", "rdb_changes_since_last_save"), "2");
    assert_eq!(info_field(&mut c, "persistence", "aof_enabled"), "1");
    assert_eq!(info_field(&mut c, "persistence", "loading"), "0");

    let processed: u64 = info_field(&mut c, "stats", "total_commands_processed").parse().expect("int");
    assert!(processed >= 10, "{processed}");
    let used: u64 = info_field(&mut c, "memory", "used_memory").parse().expect("int");
    let rss: u64 = info_field(&mut c, "memory", "used_memory_rss").parse().expect("int");
    assert!(used > 0 && rss > 0);

    // Command and error statistics, with subcommands named parent|sub.
    assert!(matches!(c.cmd("CONFIG GET nosuch"), Frame::Array(_) | Frame::Map(_)));
    assert!(matches!(c.cmd("NOSUCHCOMMAND"), Frame::Error(_)));
    assert!(matches!(c.cmd("SET k v XX NX"), Frame::Error(_)));
    let stats = text(c.send(&["INFO", "commandstats"]));
    assert!(stats.contains("cmdstat_config|get:calls=1,"), "{stats}");
    let set = stats.lines().find(|l| l.starts_with("cmdstat_set:")).expect("set stats");
    assert!(set.starts_with("cmdstat_set:calls=3,usec=") && set.ends_with(",rejected_calls=0,failed_calls=1"), "{set}");
    let errors = text(c.send(&["INFO", "errorstats"]));
    assert!(errors.contains("errorstat_ERR:count=2"), "{errors}");
    assert_eq!(info_field(&mut c, "stats", "total_error_replies"), "2");

    assert_eq!(c.cmd("CONFIG RESETSTAT"), ok());
    let stats = text(c.send(&["INFO", "commandstats"]));
    assert!(!stats.contains("cmdstat_set"), "{stats}");
    assert_eq!(info_field(&mut c, "stats", "keyspace_hits"), "0");
    assert!(!text(c.send(&["INFO", "errorstats"])).contains("errorstat_"));
}

/// Redis's accounting of refused and failed calls (unit/info's
/// errorstats tests): a wrong arity is a rejected call of the command,
/// inside MULTI too, and a blocked command ended by CLIENT UNBLOCK ...
/// ERROR failed with an UNBLOCKED error.
#[test]
fn rejected_and_unblocked_calls_are_counted_as_redis_counts_them() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let cmdstat = |c: &mut Client, name: &str| {
        let stats = text(c.send(&["INFO", "commandstats"]));
        let prefix = format!("cmdstat_{name}:");
        stats.lines().find_map(|l| l.strip_prefix(&prefix).map(|s| s.split_once(",usec_per_call").map_or("", |p| p.1).to_string()))
    };
    assert!(matches!(c.cmd("SET k"), Frame::Error(_)));
    assert_eq!(c.cmd("SET k v"), ok());
    assert_eq!(cmdstat(&mut c, "set").as_deref().map(|s| s.split_once(',').map(|p| p.1)), Some(Some("rejected_calls=1,failed_calls=0")));
    assert!(text(c.send(&["INFO", "commandstats"])).contains("cmdstat_set:calls=1,"));
    assert!(matches!(c.cmd("CONFIG GET"), Frame::Error(_)));
    assert!(text(c.send(&["INFO", "commandstats"])).contains("cmdstat_config|get:calls=0,"), "a subcommand's arity");
    assert_eq!(c.cmd("MULTI"), ok());
    assert!(matches!(c.cmd("GET"), Frame::Error(_)));
    assert!(matches!(c.cmd("EXEC"), Frame::Error(_)));
    assert!(text(c.send(&["INFO", "commandstats"])).contains("cmdstat_get:calls=0,"));
    assert!(text(c.send(&["INFO", "errorstats"])).contains("errorstat_EXECABORT:count=1"));

    let mut blocked = server.client();
    let Frame::Integer(id) = blocked.cmd("CLIENT ID") else { panic!("CLIENT ID") };
    blocked.write_command(&["BLPOP", "list", "0"]);
    common::wait_for("blocked", || info_field(&mut c, "clients", "blocked_clients") == "1");
    assert_eq!(c.send(&["CLIENT", "UNBLOCK", &id.to_string(), "ERROR"]), int(1));
    assert_eq!(blocked.read(), err("UNBLOCKED client unblocked via CLIENT UNBLOCK"));
    assert!(text(c.send(&["INFO", "errorstats"])).contains("errorstat_UNBLOCKED:count=1"));
    let blpop = cmdstat(&mut c, "blpop").expect("blpop stats");
    assert!(blpop.ends_with("rejected_calls=0,failed_calls=1"), "{blpop}");
}

/// CONFIG SET's numbers as Redis 7.0 reads them: a number past a long
/// long is no number, one out of range names the range, and `hz` takes
/// any int, clamped to 1..=500 (Redis's updateHZ).
#[test]
fn config_numbers_are_read_and_clamped_as_redis_does() {
    let lines = [
        "CONFIG SET hz 1000",
        "CONFIG GET hz",
        "CONFIG SET hz 0",
        "CONFIG GET hz",
        "CONFIG SET hz -1",
        "CONFIG SET hz 99999999999999999999",
        "CONFIG SET timeout 99999999999999999999",
        "CONFIG SET timeout -1",
        "CONFIG SET hz 10",
        "CONFIG GET hz",
    ];
    let run = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        lines.iter().map(|l| c.cmd(l)).collect()
    };
    let keel = run(&Server::start(&[]));
    assert_eq!(keel[1], Frame::Array(vec![bulk("hz"), bulk("500")]));
    assert_eq!(keel[3], Frame::Array(vec![bulk("hz"), bulk("1")]));
    if let Some(redis) = Server::start_redis(&[]) {
        assert_eq!(keel, run(&redis));
    }
}

/// INFO latencystats: a line of percentiles per command called, subcommands
/// by their full name, in the percentiles configured; none once
/// `latency-tracking` is off or after CONFIG RESETSTAT. DEBUG SLEEP's
/// sleep is in its latency, so the figures are of the command's own time.
#[test]
fn latency_stats_follow_latency_tracking() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    let line = |c: &mut Client, name: &str| {
        let stats = text(c.send(&["INFO", "latencystats"]));
        stats.lines().find_map(|l| l.strip_prefix(&format!("latency_percentiles_usec_{name}:")).map(str::to_string))
    };
    assert_eq!(c.cmd("SET a b"), ok());
    assert_eq!(c.cmd("DEBUG SLEEP 0.05"), ok());
    c.cmd("CLIENT ID");
    let set = line(&mut c, "set").expect("set has latencies");
    assert!(set.starts_with("p50=") && set.contains(",p99=") && set.contains(",p99.9="), "{set}");
    assert!(line(&mut c, "client|id").is_some());
    let p50 = |l: &str| -> f64 { l.strip_prefix("p50=").and_then(|r| r.split(',').next()).expect("p50").parse().expect("number") };
    let debug = line(&mut c, "debug").expect("debug has latencies");
    assert!(p50(&debug) >= 50_000.0 && p50(&debug) >= p50(&set), "{debug} vs {set}");

    assert_eq!(c.send(&["CONFIG", "SET", "latency-tracking-info-percentiles", "0.0 50.0 100.0"]), ok());
    assert_eq!(strings(c.cmd("CONFIG GET latency-tracking-info-percentiles"))[1], "0 50 100");
    let set = line(&mut c, "set").expect("set");
    assert!(set.starts_with("p0=") && set.contains(",p50=") && set.contains(",p100="), "{set}");
    for bad in ["10.0 50.0 a", "10.0 50.0 101.0"] {
        assert!(matches!(c.send(&["CONFIG", "SET", "latency-tracking-info-percentiles", bad]), Frame::Error(_)));
    }
    assert_eq!(strings(c.cmd("CONFIG GET latency-tracking-info-percentiles"))[1], "0 50 100");

    assert_eq!(c.cmd("CONFIG RESETSTAT"), ok());
    assert_eq!(c.cmd("CONFIG SET latency-tracking no"), ok());
    assert_eq!(c.cmd("SET a b"), ok());
    assert_eq!(line(&mut c, "set"), None);
    assert_eq!(c.cmd("CONFIG SET latency-tracking yes"), ok());
    assert_eq!(c.cmd("SET a b"), ok());
    assert!(line(&mut c, "set").is_some());
    assert_eq!(c.cmd("CONFIG RESETSTAT"), ok());
    assert_eq!(line(&mut c, "set"), None);
}

/// `metrics-port` answers `GET /metrics` with INFO's figures in
/// Prometheus's text format: numeric fields as gauges, per-command calls
/// and latency percentiles and keys per database as labelled series; any
/// other path is 404.
#[test]
fn metrics_port_serves_info_to_prometheus() {
    use std::io::{Read, Write};
    let metrics_port = common::free_port();
    let server = Server::start(&["--metrics-port", &metrics_port.to_string()]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET a b"), ok());
    let get = |path: &str| {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).expect("metrics port");
        write!(stream, "GET {path} HTTP/1.1\r\nHost: keel\r\n\r\n").expect("request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("response");
        response
    };
    let response = get("/metrics");
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    let (head, body) = response.split_once("\r\n\r\n").expect("head and body");
    assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
    for line in [
        "keel_connected_clients 1",
        "keel_commands_total{cmd=\"set\"} 1",
        "keel_db_keys{db=\"db0\"} 1",
        "keel_aof_enabled 1",
    ] {
        assert!(body.lines().any(|l| l == line), "no {line} in\n{body}");
    }
    assert!(body.lines().any(|l| l.starts_with("keel_command_latency_seconds{cmd=\"set\",quantile=\"0.99\"} ")), "{body}");
    assert!(body.lines().all(|l| l.starts_with("keel_") && l.split(' ').count() == 2), "{body}");
    assert!(get("/").starts_with("HTTP/1.1 404 "));
}

/// CONFIG SET metrics-port at run time, as `port` moves: scrapes go to the
/// new port once OK comes back, the old one refuses, a taken port leaves
/// the listener where it was, and 0 serves none.
#[test]
fn metrics_port_moves_at_run_time() {
    use std::io::{Read, Write};
    let scrape = |port: u16| -> Option<String> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        write!(stream, "GET /metrics HTTP/1.1\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    };
    let server = Server::start(&[]);
    let mut c = server.client();
    let first = common::free_port();
    assert_eq!(c.send(&["CONFIG", "SET", "metrics-port", &first.to_string()]), ok());
    assert!(scrape(first).is_some_and(|r| r.starts_with("HTTP/1.1 200 OK\r\n")));
    let second = common::free_port();
    assert_eq!(c.send(&["CONFIG", "SET", "metrics-port", &second.to_string()]), ok());
    assert_eq!(scrape(first), None, "the old port still listens");
    assert!(scrape(second).is_some_and(|r| r.starts_with("HTTP/1.1 200 OK\r\n")));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("test setup");
    let taken = taken.local_addr().expect("test setup").port().to_string();
    assert_eq!(
        c.send(&["CONFIG", "SET", "metrics-port", &taken]),
        err("ERR CONFIG SET failed (possibly related to argument 'metrics-port') - Unable to listen on this port. Check server logs.")
    );
    assert!(scrape(second).is_some(), "a refused move leaves the listener where it was");
    assert_eq!(c.cmd("CONFIG SET metrics-port 0"), ok());
    assert_eq!(scrape(second), None);
}

#[test]
fn info_is_verbatim_in_resp3() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    match c.cmd("INFO server") {
        Frame::Verbatim { format, text } => {
            assert_eq!(format, b"txt");
            assert!(text.starts_with(b"# Server"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_get_matches_patterns_and_names() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let port = server.port.to_string();
    // An exact name is echoed as spelled.
    assert_eq!(c.cmd("CONFIG GET PORT"), Frame::Array(vec![bulk("PORT"), bulk(&port)]));
    let reply = strings(c.send(&["CONFIG", "GET", "port", "maxclients", "port"]));
    assert_eq!(reply, ["port", &port, "maxclients", "10000"]);
    let reply = strings(c.send(&["CONFIG", "GET", "max*"]));
    assert!(reply.chunks(2).all(|p| p[0].starts_with("max")) && reply.contains(&"maxclients".to_string()));
    assert_eq!(c.cmd("CONFIG GET nosuch"), Frame::Array(vec![]));
    assert_eq!(c.cmd("CONFIG GET"), err("ERR wrong number of arguments for 'config|get' command"));
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    assert_eq!(c.cmd("CONFIG GET timeout"), Frame::Map(vec![(bulk("timeout"), bulk("0"))]));
}

/// CONFIG SET loglevel takes effect from the next line, as Redis's.
#[test]
fn config_set_loglevel_changes_what_is_logged() {
    let dir = common::temp_dir("loglevel");
    let log = dir.join("keel.log");
    let server = Server::start_last_in(&dir, &["--appendonly", "no", "--save", "", "--logfile", &log.display().to_string()]);
    let mut c = server.client();
    let bgsave_logged = |c: &mut Client| {
        assert_eq!(c.cmd("BGSAVE"), Frame::Simple(b"Background saving started".to_vec()));
        while info_field(c, "persistence", "rdb_bgsave_in_progress") != "0" {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::read_to_string(&log).expect("log").matches("Background saving started").count()
    };
    assert_eq!(c.cmd("CONFIG SET loglevel warning"), ok());
    assert_eq!(bgsave_logged(&mut c), 0);
    assert_eq!(c.cmd("CONFIG SET loglevel notice"), ok());
    assert_eq!(bgsave_logged(&mut c), 1);
    assert_eq!(c.cmd("CONFIG GET loglevel"), Frame::Array(vec![bulk("loglevel"), bulk("notice")]));
}

/// `busy-reply-threshold` and its old name `lua-time-limit` are one
/// setting, with Redis's default and bounds (configuration files carry it;
/// Keel runs no scripts yet, so it bounds nothing).
#[test]
fn busy_reply_threshold_and_lua_time_limit_are_one_setting_as_in_redis() {
    let run = |c: &mut Client| {
        let before = strings(c.send(&["CONFIG", "GET", "busy-reply-threshold"]));
        let set = c.send(&["CONFIG", "SET", "lua-time-limit", "1"]);
        let after = strings(c.send(&["CONFIG", "GET", "busy-reply-threshold"]));
        let bad = c.send(&["CONFIG", "SET", "busy-reply-threshold", "-1"]);
        (before, set, after, bad)
    };
    let keel = Server::start(&["--lua-time-limit", "7"]);
    let got = run(&mut keel.client());
    assert_eq!(got.0, ["busy-reply-threshold", "7"]);
    assert_eq!(got.2, ["busy-reply-threshold", "1"]);
    let Some(redis) = Server::start_redis(&["--lua-time-limit", "7"]) else { return };
    assert_eq!(run(&mut redis.client()), got);
}

#[test]
fn config_set_is_atomic_with_redis_errors() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG SET timeout 30 maxclients 50"), ok());
    assert_eq!(strings(c.cmd("CONFIG GET timeout")), ["timeout", "30"]);
    assert_eq!(c.cmd("CONFIG SET foo bar"), err("ERR Unknown option or number of arguments for CONFIG SET - 'foo'"));
    assert_eq!(c.cmd("CONFIG SET timeout"), err("ERR wrong number of arguments for 'config|set' command"));
    assert_eq!(c.cmd("CONFIG SET timeout 1 hz"), err("ERR syntax error"));
    assert_eq!(
        c.cmd("CONFIG SET maxclients abc"),
        err("ERR CONFIG SET failed (possibly related to argument 'maxclients') - argument couldn't be parsed into an integer")
    );
    assert_eq!(
        c.cmd("CONFIG SET timeout 1 TIMEOUT 2"),
        err("ERR CONFIG SET failed (possibly related to argument 'TIMEOUT') - duplicate parameter")
    );
    assert_eq!(
        c.cmd("CONFIG SET threads 4"),
        err("ERR CONFIG SET failed (possibly related to argument 'threads') - can't set immutable config")
    );
    // One bad value and nothing changes.
    assert!(matches!(c.cmd("CONFIG SET timeout 99 maxclients nope"), Frame::Error(_)));
    assert_eq!(strings(c.cmd("CONFIG GET timeout")), ["timeout", "30"]);
    // Switched at run time (the durability tests cover what it does).
    assert_eq!(c.cmd("CONFIG SET appendonly no"), common::ok());
    assert_eq!(strings(c.cmd("CONFIG GET appendonly")), ["appendonly", "no"]);
    let help = strings(c.cmd("CONFIG HELP"));
    assert_eq!(help[0], "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
    assert_eq!(help.last().map(String::as_str), Some("    Prints this help."));
    assert_eq!(c.cmd("CONFIG NOPE"), err("ERR unknown subcommand 'NOPE'. Try CONFIG HELP."));
}

#[test]
fn config_rewrite_needs_and_updates_the_file() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG REWRITE"), err("ERR The server is running without a config file"));
    drop(c);
    drop(server);

    let dir = std::env::temp_dir().join(format!("keel-rewrite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keel.conf");
    let port = common::free_port();
    std::fs::write(&file, format!("# my settings\nport {port}\nthreads 2\ntimeout 0\n")).expect("write");
    let server = Server::spawn_with(env!("CARGO_BIN_EXE_keel-server").into(), vec![file.display().to_string()], port);
    let mut c = server.client();
    assert!(info_field(&mut c, "server", "config_file").ends_with("keel.conf"));
    assert_eq!(c.cmd("CONFIG SET timeout 77 maxclients 123"), ok());
    assert_eq!(c.cmd("CONFIG REWRITE"), ok());
    let rewritten = std::fs::read_to_string(&file).expect("read");
    assert!(rewritten.starts_with("# my settings\n"), "{rewritten}");
    assert!(rewritten.contains("\ntimeout 77\n") && rewritten.contains("maxclients 123"), "{rewritten}");
    assert!(rewritten.contains(&format!("port {port}")));
    let _ = std::fs::remove_dir_all(&dir);
}

/// CONFIG REWRITE writes lines as Redis's: string settings quoted, numbers
/// not, sizes in Redis's units, lists as their words, one line per output
/// limit class that changed, `dir` always, `bind` at its default never,
/// and an unset string setting left out, its old line gone. The same file
/// and the same CONFIG SETs to Keel and redis-server.
#[test]
fn config_rewrite_writes_lines_as_redis_s() {
    let sets: [&[&str]; 8] = [
        &["CONFIG", "SET", "masteruser", "repl user"],
        &["CONFIG", "SET", "timeout", "77"],
        &["CONFIG", "SET", "replica-announce-ip", "10.0.0.1"],
        &["CONFIG", "SET", "masterauth", ""],
        &["CONFIG", "SET", "maxmemory", "104857600"],
        &["CONFIG", "SET", "client-output-buffer-limit", "normal 1048576 1000 5"],
        &["CONFIG", "SET", "oom-score-adj-values", "0 100 800"],
        &["CONFIG", "SET", "latency-tracking-info-percentiles", "50 99"],
    ];
    let rewrite = |binary: &str| -> Option<Vec<String>> {
        if !std::path::Path::new(binary).exists() {
            return None;
        }
        let dir = common::temp_dir("rewrite-lines");
        let file = dir.join("server.conf");
        let port = common::free_port();
        std::fs::write(&file, format!("port {port}\nmasterauth old\nsave \"\"\nappendonly no\n")).expect("write");
        let args = [file.display().to_string(), "--dir".into(), dir.display().to_string()];
        let server = Server::spawn_with(binary.into(), args.to_vec(), port);
        let mut c = server.client();
        for set in sets {
            assert_eq!(c.send(set), ok(), "{binary}: {set:?}");
        }
        assert_eq!(c.cmd("CONFIG REWRITE"), ok(), "{binary}");
        let text = std::fs::read_to_string(&file).expect("read");
        let wanted = [
            "masteruser ", "timeout ", "replica-announce-ip ", "masterauth ", "dir ", "maxmemory ",
            "client-output-buffer-limit ", "oom-score-adj-values ", "latency-tracking-info-percentiles ", "bind ",
        ];
        let mut lines: Vec<String> = text.lines().filter(|l| wanted.iter().any(|w| l.starts_with(w))).map(String::from).collect();
        lines.sort();
        let canonical = std::fs::canonicalize(&dir).expect("dir");
        let own_dir = format!("dir \"{}\"", canonical.display());
        assert!(lines.contains(&own_dir), "{binary}: {text}");
        lines.retain(|l| *l != own_dir);
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
        Some(lines)
    };
    let keel = rewrite(env!("CARGO_BIN_EXE_keel-server")).expect("keel-server");
    for line in [
        "masteruser \"repl user\"",
        "replica-announce-ip \"10.0.0.1\"",
        "timeout 77",
        "maxmemory 100mb",
        "client-output-buffer-limit normal 1mb 1000 5",
        "oom-score-adj-values 0 100 800",
        "latency-tracking-info-percentiles 50 99",
    ] {
        assert!(keel.contains(&line.to_string()), "{line}: {keel:?}");
    }
    assert!(!keel.iter().any(|l| l.starts_with("masterauth")), "{keel:?}");
    if let Some(redis) = rewrite("/usr/bin/redis-server") {
        assert_eq!(keel, redis);
    }
}

/// DEBUG CONFIG-REWRITE-FORCE-ALL writes every directive, defaults too,
/// and a server started on that file has every setting CONFIG GET *
/// showed before (Redis's "CONFIG REWRITE sanity"). redis-server the same
/// way, where installed.
#[test]
fn every_directive_rewritten_starts_the_same_server() {
    let config_of = |c: &mut Client| -> Vec<(Vec<u8>, Vec<u8>)> {
        let Frame::Array(all) = c.cmd("CONFIG GET *") else { panic!("CONFIG GET *") };
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = all
            .chunks(2)
            .map(|kv| match kv {
                [Frame::Bulk(k), Frame::Bulk(v)] => (k.to_vec(), v.to_vec()),
                other => panic!("a name and a value: {other:?}"),
            })
            .collect();
        pairs.sort();
        pairs
    };
    for binary in [env!("CARGO_BIN_EXE_keel-server"), "/usr/bin/redis-server"] {
        if !std::path::Path::new(binary).exists() {
            continue;
        }
        let dir = common::temp_dir("rewrite-all");
        let file = dir.join("server.conf");
        let port = common::free_port();
        std::fs::write(&file, format!("port {port}\nenable-debug-command yes\nsave \"\"\nappendonly no\ndir {}\n", dir.display()))
            .expect("write");
        let args = vec![file.display().to_string()];
        let server = Server::spawn_with(binary.into(), args.clone(), port);
        let mut c = server.client();
        let before = config_of(&mut c);
        assert_eq!(c.cmd("DEBUG CONFIG-REWRITE-FORCE-ALL"), ok(), "{binary}");
        drop(c);
        drop(server);
        let text = std::fs::read_to_string(&file).expect("read");
        assert!(text.lines().count() > 100, "{binary}: every directive, defaults too: {text}");
        let server = Server::spawn_with(binary.into(), args, port);
        let after = config_of(&mut server.client());
        let changed: Vec<_> = before.iter().zip(&after).filter(|(b, a)| b != a).collect();
        assert!(before.len() == after.len() && changed.is_empty(), "{binary}: {changed:?}\n{text}");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn command_introspection_comes_from_the_table() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let Frame::Integer(count) = c.cmd("COMMAND COUNT") else { panic!("count") };
    let Frame::Array(all) = c.cmd("COMMAND") else { panic!("all") };
    assert_eq!(all.len() as i64, count);
    let Frame::Array(info) = c.cmd("COMMAND INFO get nosuch config|get") else { panic!("info") };
    assert_eq!(info.len(), 3);
    let Frame::Array(get) = &info[0] else { panic!("get") };
    assert_eq!(get.len(), 10);
    assert_eq!(get[0], bulk("get"));
    assert_eq!(get[1], int(2));
    assert_eq!(get[2], Frame::Array(vec![common::simple("readonly"), common::simple("fast")]));
    assert_eq!(&get[3..6], &[int(1), int(1), int(1)]);
    assert_eq!(
        get[6],
        Frame::Array(vec![common::simple("@read"), common::simple("@string"), common::simple("@fast")])
    );
    assert_eq!(info[1], Frame::Null);
    let Frame::Array(config_get) = &info[2] else { panic!("config|get") };
    assert_eq!(config_get[0], bulk("config|get"));
    assert_eq!(config_get[1], int(-3));

    let Frame::Array(config) = c.cmd("COMMAND INFO config") else { panic!("config") };
    let Frame::Array(parts) = &config[0] else { panic!("parts") };
    let Frame::Array(subs) = &parts[9] else { panic!("subcommands") };
    assert!(subs.len() >= 5);

    assert_eq!(c.cmd("COMMAND GETKEYS set k v"), Frame::Array(vec![bulk("k")]));
    assert_eq!(c.cmd("COMMAND GETKEYS ping"), err("ERR wrong number of arguments for 'command|getkeys' command"));
    assert_eq!(c.cmd("COMMAND GETKEYS ping x y"), err("ERR The command has no key arguments"));
    assert_eq!(c.cmd("COMMAND GETKEYS nosuch x y"), err("ERR Invalid command specified"));
    assert_eq!(c.cmd("COMMAND GETKEYS get a b"), err("ERR Invalid number of arguments specified for command"));

    let listed = strings(c.cmd("COMMAND LIST"));
    assert!(listed.contains(&"client|kill".to_string()) && listed.contains(&"get".to_string()));
    let pattern = strings(c.cmd("COMMAND LIST FILTERBY PATTERN config*"));
    assert!(pattern.iter().all(|n| n.starts_with("config")) && pattern.len() >= 6);
    let cat = strings(c.cmd("COMMAND LIST FILTERBY ACLCAT string"));
    assert!(cat.contains(&"get".to_string()) && !cat.contains(&"ping".to_string()));
    assert_eq!(c.cmd("COMMAND LIST FILTERBY MODULE x"), Frame::Array(vec![]));
    assert_eq!(c.cmd("COMMAND LIST FILTERBY x y"), err("ERR syntax error"));

    let Frame::Array(docs) = c.cmd("COMMAND DOCS get") else { panic!("docs") };
    assert_eq!(docs[0], bulk("get"));
    let Frame::Array(fields) = &docs[1] else { panic!("doc map") };
    assert!(fields.contains(&bulk("group")) && fields.contains(&bulk("since")));
}

#[test]
fn time_and_lastsave() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let t = strings(c.cmd("TIME"));
    let secs: u64 = t[0].parse().expect("secs");
    let micros: u64 = t[1].parse().expect("micros");
    assert!(secs.abs_diff(now) <= 2 && micros < 1_000_000);
    let Frame::Integer(last) = c.cmd("LASTSAVE") else { panic!("lastsave") };
    assert!((last as u64).abs_diff(now) <= 60);
}

#[test]
fn shutdown_stops_the_server() {
    let mut server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("SHUTDOWN ABORT"), err("ERR No shutdown in progress."));
    assert_eq!(c.cmd("SHUTDOWN NOSAVE SAVE"), err("ERR syntax error"));
    assert_eq!(c.cmd("SHUTDOWN bogus"), err("ERR syntax error"));
    // SHUTDOWN's final save (and its failure) is tested in rdb_persistence.rs.
    assert!(matches!(c.cmd("MULTI"), Frame::Simple(_)));
    assert!(matches!(c.cmd("SHUTDOWN"), Frame::Error(_)), "SHUTDOWN is no-multi");
    assert!(matches!(c.cmd("DISCARD"), Frame::Simple(_)));
    let mut other = server.client();
    c.write_command(&["SHUTDOWN", "NOSAVE"]);
    assert!(c.read_to_close().is_empty(), "no reply to a successful SHUTDOWN");
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.alive() {
        assert!(Instant::now() < deadline, "server still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(other.read_to_close().is_empty());
}

#[test]
fn monitor_streams_commands_from_every_worker() {
    let server = Server::start(&[]);
    let mut m = server.client();
    assert_eq!(m.cmd("MONITOR"), ok());
    // Several clients so that some land on the other worker thread.
    for i in 0..4 {
        let mut c = server.client();
        assert_eq!(c.send(&["SET", &format!("key{i}"), "va\"l"]), ok());
        let line = text(m.read());
        assert!(line.contains(&format!("\"SET\" \"key{i}\" \"va\\\"l\"")), "{line}");
        assert!(line.contains("[0 127.0.0.1:"), "{line}");
    }
    // A monitor is a replica to Redis: no keyspace access.
    assert_eq!(m.cmd("GET x"), err("ERR Replica can't interact with the keyspace"));
}

/// As Redis's call() feeds them, once run: a transaction's commands show
/// when EXEC runs them, before the EXEC, and a refused command not at all.
#[test]
fn monitor_shows_commands_as_they_run() {
    let server = Server::start(&[]);
    let mut m = server.client();
    assert_eq!(m.cmd("MONITOR"), ok());
    let mut c = server.client();
    let mut expect = |c: &mut Client, lines: &[&str]| {
        for want in lines {
            let line = text(m.read());
            assert!(line.ends_with(want), "{line} is not {want}");
        }
        // Nothing else came: the next line is the PING's.
        assert_eq!(c.cmd("PING"), simple("PONG"));
        assert!(text(m.read()).ends_with("\"PING\""));
    };
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("SET foo bar"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![ok()]));
    expect(&mut c, &["\"MULTI\"", "\"SET\" \"foo\" \"bar\"", "\"EXEC\""]);
    assert_eq!(c.cmd("MULTI"), ok());
    assert!(matches!(c.cmd("NOSUCH x"), Frame::Error(_)));
    assert!(matches!(c.cmd("EXEC"), Frame::Error(_)));
    expect(&mut c, &["\"MULTI\"", "\"EXEC\""]);
    // A script shows before the commands it runs (Redis's evalCommand),
    // even one that fails.
    assert_eq!(c.send(&["EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "foo", "bar"]), ok());
    expect(&mut c, &["\"EVAL\" \"return redis.call('set', KEYS[1], ARGV[1])\" \"1\" \"foo\" \"bar\"", "[0 lua] \"set\" \"foo\" \"bar\""]);
    assert!(matches!(c.cmd("EVALSHA ffffffffffffffffffffffffffffffffffffffff 0"), Frame::Error(_)));
    expect(&mut c, &["\"EVALSHA\" \"ffffffffffffffffffffffffffffffffffffffff\" \"0\""]);
    let library = "#!lua name=lib\nredis.register_function('f', function(keys) return redis.call('get', keys[1]) end)";
    assert_eq!(c.send(&["FUNCTION", "LOAD", library]), bulk("lib"));
    assert_eq!(c.cmd("FCALL f 1 foo"), bulk("bar"));
    expect(&mut c, &["end)\"", "\"FCALL\" \"f\" \"1\" \"foo\"", "[0 lua] \"get\" \"foo\""]);
}

#[test]
fn debug_commands() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("SET k 12345"), ok());
    let object = text(c.cmd("DEBUG OBJECT k"));
    assert!(object.starts_with("Value at:0x") && object.contains(" encoding:int "), "{object}");
    assert_eq!(c.cmd("DEBUG OBJECT nokey"), err("ERR no such key"));
    assert_eq!(c.cmd("DEBUG LOG hello"), ok());
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    assert_eq!(
        c.cmd("DEBUG NOPE"),
        err("ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try DEBUG HELP.")
    );
    assert_eq!(c.cmd("DEBUG PROTOCOL string"), bulk("Hello World"));
    assert_eq!(c.cmd("DEBUG PROTOCOL true"), int(1));
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    assert_eq!(c.cmd("DEBUG PROTOCOL bignum"), Frame::BigNumber(b"1234567999999999999999999999999999999".to_vec()));
    assert_eq!(c.cmd("DEBUG PROTOCOL false"), Frame::Boolean(false));

    // DEBUG SLEEP freezes keyed commands on every worker.
    let mut other: Vec<Client> = (0..4).map(|_| server.client()).collect();
    c.write_command(&["DEBUG", "SLEEP", "0.5"]);
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    for o in other.iter_mut() {
        assert_eq!(o.cmd("GET k"), bulk("12345"));
    }
    assert!(started.elapsed() >= Duration::from_millis(300), "{:?}", started.elapsed());
    assert_eq!(c.read(), ok());
}

#[test]
fn debug_is_refused_unless_enabled() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let Frame::Error(e) = c.cmd("DEBUG SLEEP 0") else { panic!("allowed") };
    assert!(e.starts_with(b"ERR DEBUG command not allowed."));
}

#[test]
fn active_expiry_can_be_switched_off() {
    let server = Server::start(&["--enable-debug-command", "yes", "--hz", "100"]);
    let mut c = server.client();
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 0"), ok());
    for i in 0..20 {
        assert_eq!(c.send(&["SET", &format!("e{i}"), "v", "PX", "10"]), ok());
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(info_field(&mut c, "stats", "expired_keys"), "0");
    assert_eq!(c.cmd("DEBUG SET-ACTIVE-EXPIRE 1"), ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    while info_field(&mut c, "stats", "expired_keys") != "20" {
        assert!(Instant::now() < deadline, "keys not expired");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `maxmemory` with `noeviction`: past the limit, commands that may grow
/// memory get Redis's OOM error, the others run (the other policies:
/// `tests/eviction.rs`).
#[test]
fn maxmemory_refuses_growing_commands_past_the_limit() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    let oom = err("OOM command not allowed when used memory > 'maxmemory'.");
    assert_eq!(c.cmd("SET k v"), ok());
    assert_eq!(c.cmd("CONFIG SET maxmemory 1"), ok());
    assert_eq!(c.cmd("SET k2 v"), oom);
    assert_eq!(c.cmd("LPUSH l x"), oom);
    assert_eq!(c.cmd("GET k"), bulk("v"));
    assert_eq!(c.cmd("DEL k"), int(1));
    assert_eq!(info_field(&mut c, "memory", "maxmemory"), "1");

    // Queueing a growing command fails the transaction (Redis's test in
    // unit/multi); DISCARD still works.
    assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("SET a 1"), Frame::Simple(b"QUEUED".to_vec()));
    let mut other = server.client();
    assert_eq!(other.cmd("CONFIG SET maxmemory 1"), ok());
    assert_eq!(c.cmd("SET b 2"), oom);
    assert_eq!(other.cmd("CONFIG SET maxmemory 0"), ok());
    assert_eq!(c.cmd("EXEC"), err("EXECABORT Transaction discarded because of previous errors."));
    assert_eq!(c.cmd("EXISTS a b"), int(0));
    // An EXEC whose queue grows memory is refused, and the transaction
    // ended, when the limit is passed between MULTI and EXEC.
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("SET a 1"), Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(other.cmd("CONFIG SET maxmemory 1"), ok());
    assert_eq!(
        c.cmd("EXEC"),
        err("EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.")
    );
    // Past the limit nothing queues (queueing takes memory), but an EXEC
    // of a queue that cannot grow memory runs.
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("GET a"), oom);
    assert_eq!(c.cmd("DISCARD"), ok());
    assert_eq!(other.cmd("CONFIG SET maxmemory 0"), ok());
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("GET a"), Frame::Simple(b"QUEUED".to_vec()));
    assert_eq!(other.cmd("CONFIG SET maxmemory 1"), ok());
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![Frame::Null]));

    // A real limit: writes go on until used_memory passes it, then stop.
    assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
    let used: u64 = info_field(&mut c, "memory", "used_memory").parse().expect("int");
    let limit = used + (8 << 20);
    assert_eq!(c.cmd(&format!("CONFIG SET maxmemory {limit}")), ok());
    let value = "x".repeat(1000);
    let mut refused_at = None;
    for i in 0..100_000 {
        match c.send(&["SET", &format!("key:{i}"), &value]) {
            Frame::Simple(_) => {}
            e => {
                assert_eq!(e, oom);
                refused_at = Some(i);
                break;
            }
        }
    }
    let refused_at = refused_at.expect("never refused");
    assert!((4_000..12_000).contains(&refused_at), "refused after {refused_at} writes of 1 KB");
    assert_eq!(c.cmd("GET key:0"), bulk(&value));
    assert_eq!(c.cmd("FLUSHALL"), ok());
    let deadline = Instant::now() + Duration::from_secs(5);
    while c.cmd("SET again 1") != ok() {
        assert!(Instant::now() < deadline, "writes did not resume after FLUSHALL");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `min-replicas-to-write` with no replicas: every write refused, in and
/// out of transactions, as redis-server answers.
fn min_replicas_sequence(server: &Server) -> Vec<Frame> {
    let (mut c, mut admin) = (server.client(), server.client());
    let mut got = vec![c.cmd("SET xx 1"), admin.cmd("CONFIG SET min-replicas-to-write 1")];
    for cmd in ["SET xx 2", "GET xx", "PING", "MULTI", "INCR xx", "GET xx", "EXEC", "MULTI", "GET xx", "EXEC"] {
        got.push(c.cmd(cmd));
    }
    // Queued while writes were allowed, refused when EXEC comes.
    got.push(admin.cmd("CONFIG SET min-replicas-to-write 0"));
    got.extend([c.cmd("MULTI"), c.cmd("INCR xx")]);
    got.push(admin.cmd("CONFIG SET min-slaves-to-write 2"));
    got.extend([c.cmd("EXEC"), c.cmd("GET xx")]);
    got.push(Frame::Bulk(admin.info_field("replication", "min_slaves_good_slaves").into_bytes()));
    // A zero lag turns the check off.
    got.push(admin.cmd("CONFIG SET min-replicas-max-lag 0"));
    got.push(Frame::Bulk(admin.info_field("replication", "min_slaves_good_slaves").into_bytes()));
    got.extend([c.cmd("INCR xx"), admin.cmd("CONFIG GET min-replicas-to-write")]);
    got
}

#[test]
fn min_replicas_to_write_without_replicas_refuses_writes_as_redis() {
    let noreplicas = || err("NOREPLICAS Not enough good replicas to write.");
    let q = || Frame::Simple(b"QUEUED".to_vec());
    let want = vec![
        ok(),
        ok(),
        noreplicas(),
        bulk("1"),
        Frame::Simple(b"PONG".to_vec()),
        ok(),
        noreplicas(),
        q(),
        err("EXECABORT Transaction discarded because of previous errors."),
        ok(),
        q(),
        Frame::Array(vec![bulk("1")]),
        ok(),
        ok(),
        q(),
        ok(),
        err("EXECABORT Transaction discarded because of: NOREPLICAS Not enough good replicas to write."),
        bulk("1"),
        bulk("0"),
        ok(),
        bulk(""),
        int(2),
        Frame::Array(vec![bulk("min-replicas-to-write"), bulk("2")]),
    ];
    assert_eq!(min_replicas_sequence(&Server::start(&[])), want);
    let Some(redis) = Server::start_redis(&[]) else { return };
    assert_eq!(min_replicas_sequence(&redis), want, "redis-server answers the same");
}

/// The incremental-fsync, active-rehashing and lazy-eviction switches, as
/// redis-server answers them.
fn tuning_sequence(server: &Server) -> Vec<Frame> {
    let mut c = server.client();
    [
        "CONFIG GET rdb-save-incremental-fsync",
        "CONFIG GET aof-rewrite-incremental-fsync",
        "CONFIG SET rdb-save-incremental-fsync no",
        "CONFIG GET rdb-save-incremental-fsync",
        "CONFIG SET aof-rewrite-incremental-fsync maybe",
        "CONFIG GET activerehashing",
        "CONFIG SET activerehashing no",
        "CONFIG GET activerehashing",
        // No effect in Keel (no eviction, no replication), as in a Redis
        // that neither evicts nor replicates; their values are kept.
        "CONFIG GET lazyfree-lazy-eviction",
        "CONFIG SET lazyfree-lazy-eviction yes",
        "CONFIG GET lazyfree-lazy-eviction",
        "CONFIG GET rdb-del-sync-files",
        "CONFIG SET rdb-del-sync-files maybe",
    ]
    .iter()
    .map(|line| c.cmd(line))
    .collect()
}

#[test]
fn fsync_and_rehash_directives_are_redis_s() {
    let server = Server::start(&[]);
    let keel = tuning_sequence(&server);
    assert_eq!(keel[0], Frame::Array(vec![bulk("rdb-save-incremental-fsync"), bulk("yes")]));
    // Saving and rewriting without the incremental syncs.
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG SET aof-rewrite-incremental-fsync no"), ok());
    assert_eq!(c.cmd("SET k v"), ok());
    assert_eq!(c.cmd("SAVE"), ok());
    assert_eq!(c.cmd("BGREWRITEAOF"), simple("Background append only file rewriting started"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.info_field("persistence", "aof_rewrite_in_progress") != "0" {
        assert!(Instant::now() < deadline, "rewrite did not end");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.info_field("persistence", "aof_last_bgrewrite_status"), "ok");
    let Some(redis) = Server::start_redis(&[]) else { return };
    assert_eq!(keel, tuning_sequence(&redis), "redis-server answers the same");
}

/// What a client from `ip` gets: PING's reply, or the server's refusal.
fn ping_from(ip: std::net::IpAddr, port: u16) -> Frame {
    let mut c = Client::connect_to(ip, port);
    c.write_command(&["PING"]);
    c.read()
}

/// `protected-mode` (on by default): with no password, a client from
/// outside the loopback interface gets Redis's -DENIED and is closed;
/// turning it off, or setting a password, lets it in. Compared with
/// redis-server under the same flags.
#[test]
fn protected_mode_turns_away_outside_clients_without_a_password() {
    let Some(ip) = common::outside_address() else {
        eprintln!("NOTICE: no non-loopback address; skipping the protected-mode test");
        return;
    };
    let script = |server: &Server| -> Vec<Frame> {
        let mut local = server.client();
        let mut replies = vec![ping_from(ip, server.port), local.cmd("INFO stats")];
        replies.push(local.cmd("CONFIG SET protected-mode no"));
        replies.push(ping_from(ip, server.port));
        replies.push(local.cmd("CONFIG SET protected-mode yes"));
        replies.push(local.cmd("CONFIG SET requirepass sesame"));
        replies.push(ping_from(ip, server.port));
        replies
    };
    let flags = ["--bind", "0.0.0.0"];
    let keel = script(&Server::start(&flags));
    let Frame::Error(denied) = &keel[0] else { panic!("not refused: {:?}", keel[0]) };
    assert!(denied.starts_with(b"DENIED Redis is running in protected mode"), "{}", String::from_utf8_lossy(denied));
    let Frame::Bulk(stats) = &keel[1] else { panic!("INFO") };
    assert!(String::from_utf8_lossy(stats).contains("rejected_connections:1\r\n"));
    assert_eq!(keel[3], simple("PONG"));
    assert!(matches!(&keel[6], Frame::Error(e) if e.starts_with(b"NOAUTH")), "{:?}", keel[6]);
    if let Some(redis) = Server::start_redis(&flags) {
        let redis = script(&redis);
        assert_eq!((&keel[0], &keel[2..]), (&redis[0], &redis[2..]));
    }
}

/// `client-output-buffer-limit`: CONFIG answers as Redis's, and a client
/// that sends requests without reading their replies is closed once its
/// pending output passes the normal class's hard limit, while others go on.
#[test]
fn output_buffer_limit_closes_a_client_that_does_not_read() {
    let config_script = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        let set = |c: &mut Client, v: &str| c.send(&["CONFIG", "SET", "client-output-buffer-limit", v]);
        vec![
            c.cmd("CONFIG GET client-output-buffer-limit"),
            set(&mut c, "normal 1 2"),
            set(&mut c, "master 0 0 0"),
            set(&mut c, "normal 1x 0 0"),
            set(&mut c, "normal 0 0 -1"),
            set(&mut c, "normal 1mb 512kb 10 pubsub 1 2 3"),
            c.cmd("CONFIG GET client-output-buffer-limit"),
        ]
    };
    let keel = Server::start(&[]);
    let got = config_script(&keel);
    if let Some(redis) = Server::start_redis(&[]) {
        assert_eq!(got, config_script(&redis));
    }

    let mut c = keel.client();
    let big = "x".repeat(8 << 20);
    assert_eq!(c.send(&["SET", "big", &big]), ok());
    assert_eq!(c.send(&["CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0"]), ok());
    let mut reader = keel.client();
    // One write: the server may close the connection after the first
    // replies, and a later write would then fail.
    reader.write_raw(&common::encode(&["GET", "big"]).repeat(20));
    // 160 MB of replies: far more than the socket holds, so the rest waits
    // in the server's buffer, past the limit.
    let got = reader.read_to_close().len();
    assert!(got < 20 * big.len(), "the client was not closed ({got} bytes read)");
    assert_eq!(c.cmd("STRLEN big"), int(8 << 20));
    c.wait_connected_clients(1);
}

/// `dynamic-hz` (on by default): with more than 200 clients per tick the
/// cron runs twice as often, as INFO's `hz` shows; off, it keeps `hz`.
/// Redis shows the same (after its next cron tick).
#[test]
fn dynamic_hz_follows_the_number_of_clients() {
    let check = |server: &Server| {
        let mut c = server.client();
        let _others: Vec<Client> = (0..201).map(|_| server.client()).collect();
        let hz = |c: &mut Client| c.info_field("server", "hz");
        let deadline = Instant::now() + Duration::from_secs(10);
        while hz(&mut c) != "2" {
            assert!(Instant::now() < deadline, "hz {} with 202 clients at hz 1", hz(&mut c));
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(c.info_field("server", "configured_hz"), "1");
        assert_eq!(c.cmd("CONFIG SET dynamic-hz no"), ok());
        while hz(&mut c) != "1" {
            assert!(Instant::now() < deadline, "hz {} without dynamic-hz", hz(&mut c));
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    check(&Server::start(&["--hz", "1"]));
    if let Some(redis) = Server::start_redis(&["--hz", "1"]) {
        check(&redis);
    }
}

/// SLOWLOG, beside redis-server: which commands are logged (every one at
/// threshold 0, none at -1, not EXEC itself), their arguments as logged
/// (trimmed, secrets redacted), client names, the length bound, and the
/// replies of LEN, RESET and bad counts.
#[test]
fn slowlog_records_what_redis_s_does() {
    let script = |server: &Server| -> Vec<Frame> {
        let mut c = server.client();
        let mut replies = vec![c.cmd("CONFIG SET slowlog-log-slower-than 0"), c.cmd("SLOWLOG RESET")];
        c.cmd("CLIENT SETNAME logged");
        c.cmd("SET k v");
        c.cmd("AUTH nobody secret");
        c.send(&["CONFIG", "SET", "requirepass", "hunter2", "maxmemory", "0"]);
        c.cmd("AUTH hunter2");
        c.cmd("CONFIG SET requirepass");
        c.send(&["CONFIG", "SET", "requirepass", ""]);
        let long = "x".repeat(200);
        c.send(&["SADD", "s", &long]);
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        let mut sadd = vec!["SADD", "t"];
        sadd.extend(many.iter().map(String::as_str));
        c.send(&sadd);
        c.cmd("MULTI");
        c.cmd("INCR n");
        c.cmd("EXEC");
        replies.push(c.cmd("CONFIG SET slowlog-log-slower-than -1"));
        c.cmd("PING");
        // Each entry without its id, time, duration and client port.
        let Frame::Array(entries) = c.cmd("SLOWLOG GET -1") else { panic!("SLOWLOG GET") };
        for entry in entries {
            let Frame::Array(fields) = entry else { panic!("entry") };
            replies.push(Frame::Array(vec![fields[3].clone(), fields[5].clone()]));
        }
        replies.push(c.cmd("SLOWLOG GET -2"));
        replies.push(c.cmd("SLOWLOG GET 1 2"));
        replies.push(c.cmd("CONFIG SET slowlog-max-len 2"));
        replies.push(c.cmd("SLOWLOG LEN"));
        replies.push(c.cmd("SLOWLOG RESET"));
        replies.push(c.cmd("SLOWLOG LEN"));
        replies
    };
    let keel = script(&Server::start(&[]));
    let text = format!("{keel:?}");
    assert!(!text.contains("secret") && !text.contains("hunter2"), "a password was logged: {text}");
    assert!(keel.len() > 12, "{keel:?}");
    if let Some(redis) = Server::start_redis(&[]) {
        assert_eq!(keel, script(&redis));
    }
}

/// Whether a new connection to `port` on the loopback address is accepted.
fn listens(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// CONFIG SET port and bind at run time, as Redis's updatePort and
/// applyBind: when OK comes back the old port refuses connections and the
/// new one takes them; a port another process holds, or an address that
/// is none, leaves the listeners where they were with Redis's error; an
/// empty `bind` closes every listener while connected clients go on.
/// The replies, and where each server listens after each step, are
/// compared with redis-server's.
#[test]
fn port_and_bind_move_at_run_time() {
    let script = |server: &Server| -> Vec<(Frame, bool, bool)> {
        let (old, new) = (server.port, common::free_port());
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("test setup");
        let taken = taken.local_addr().expect("test setup").port().to_string();
        let mut c = server.client();
        let mut steps = Vec::new();
        let mut step = |c: &mut Client, argv: &[&str]| {
            let reply = c.send(argv);
            steps.push((reply, listens(old), listens(new)));
        };
        step(&mut c, &["CONFIG", "GET", "bind"]);
        step(&mut c, &["CONFIG", "SET", "port", &new.to_string()]);
        let mut c = Client::connect(new);
        step(&mut c, &["CONFIG", "SET", "port", &taken]);
        step(&mut c, &["CONFIG", "SET", "bind", "999.999.999.999"]);
        step(&mut c, &["CONFIG", "SET", "port", &old.to_string(), "bind", "999.999.999.999"]);
        step(&mut c, &["CONFIG", "SET", "bind", "127.0.0.1 -::1"]);
        step(&mut c, &["CONFIG", "GET", "bind"]);
        step(&mut c, &["CONFIG", "SET", "bind", ""]);
        step(&mut c, &["CONFIG", "GET", "bind"]);
        step(&mut c, &["PING"]);
        step(&mut c, &["CONFIG", "SET", "bind", "*", "port", &old.to_string()]);
        step(&mut c, &["CONFIG", "GET", "port"]);
        step(&mut c, &["CONFIG", "SET", "port", "0"]);
        step(&mut c, &["CONFIG", "SET", "bind-source-addr", "127.0.0.2"]);
        step(&mut c, &["CONFIG", "GET", "bind-source-addr"]);
        steps
    };
    let keel = Server::start(&[]);
    let port = keel.port;
    let got = script(&keel);
    assert_eq!(got[0].0, Frame::Array(vec![bulk("bind"), bulk("* -::*")]));
    assert_eq!(got[1], (ok(), false, true));
    assert_eq!(
        got[2],
        (err("ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs."), false, true)
    );
    assert_eq!(
        got[3],
        (err("ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses."), false, true)
    );
    // Blamed on the first of the two given, as Redis applies them in order.
    assert_eq!(
        got[4],
        (err("ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port. Check server logs."), false, true)
    );
    assert_eq!(got[7], (ok(), false, false));
    assert_eq!(got[9], (simple("PONG"), false, false), "a connected client goes on");
    assert_eq!(got[10], (ok(), true, false));
    assert_eq!(got[11].0, Frame::Array(vec![bulk("port"), bulk(&port.to_string())]));
    assert_eq!(got[12], (ok(), false, false));
    if let Some(redis) = Server::start_redis(&[]) {
        let port = redis.port;
        let theirs = script(&redis);
        assert_eq!(got[..11], theirs[..11]);
        assert_eq!(theirs[11].0, Frame::Array(vec![bulk("port"), bulk(&port.to_string())]));
        assert_eq!(got[12..], theirs[12..]);
    }
}

/// CONFIG SET's ranges and value kinds, as Redis 7.0's: memory values for
/// the listpack value sizes, the least `proto-max-bulk-len` and
/// `client-query-buffer-limit` (1 MB: less would close every client),
/// `slowlog-log-slower-than` from -1, a `repl-backlog-ttl` of any long,
/// `rdbchecksum` and `set-proc-title` set at start only, `maxclients`
/// up to 2^32-1, Redis's memory notation edge cases and its errors.
#[test]
fn config_set_takes_what_redis_takes() {
    let lines: &[&[&str]] = &[
        &["CONFIG", "SET", "proto-max-bulk-len", "0"],
        &["CONFIG", "SET", "proto-max-bulk-len", "1k"],
        &["CONFIG", "SET", "proto-max-bulk-len", "2mb"],
        &["CONFIG", "GET", "proto-max-bulk-len"],
        &["CONFIG", "SET", "client-query-buffer-limit", "1000"],
        &["CONFIG", "SET", "client-query-buffer-limit", "1gb"],
        &["CONFIG", "GET", "client-query-buffer-limit"],
        &["CONFIG", "SET", "hash-max-listpack-value", "1k"],
        &["CONFIG", "GET", "hash-max-listpack-value"],
        &["CONFIG", "SET", "hash-max-ziplist-value", "-1"],
        &["CONFIG", "SET", "zset-max-ziplist-value", "2kb"],
        &["CONFIG", "GET", "zset-max-listpack-value"],
        &["CONFIG", "SET", "stream-node-max-bytes", "18446744073709551616"],
        &["CONFIG", "SET", "auto-aof-rewrite-min-size", "18446744073709551616"],
        &["CONFIG", "SET", "maxmemory", "18446744073709551616"],
        &["CONFIG", "GET", "maxmemory"],
        &["CONFIG", "SET", "maxmemory", ""],
        &["CONFIG", "GET", "maxmemory"],
        &["CONFIG", "SET", "slowlog-log-slower-than", "-2"],
        &["CONFIG", "SET", "slowlog-log-slower-than", "-1"],
        &["CONFIG", "SET", "repl-backlog-ttl", "9223372036854775807"],
        &["CONFIG", "GET", "repl-backlog-ttl"],
        &["CONFIG", "SET", "repl-backlog-size", "0"],
        &["CONFIG", "SET", "rdbchecksum", "no"],
        &["CONFIG", "SET", "set-proc-title", "no"],
        &["CONFIG", "SET", "crash-memcheck-enabled", "1"],
        &["CONFIG", "SET", "replica-priority", "-1"],
        &["CONFIG", "SET", "replica-priority", "7"],
        &["CONFIG", "GET", "slave-priority"],
        &["CONFIG", "SET", "repl-disable-tcp-nodelay", "yes"],
        &["CONFIG", "GET", "repl-disable-tcp-nodelay"],
        &["CONFIG", "SET", "maxclients", "0"],
        &["CONFIG", "SET", "maxclients", "4294967296"],
        &["CONFIG", "SET", "maxclients", "2000"],
        &["CONFIG", "GET", "maxclients"],
        &["CONFIG", "SET", "latency-tracking-info-percentiles", "50 abc"],
        &["CONFIG", "SET", "latency-tracking-info-percentiles", "50 101"],
        &["CONFIG", "SET", "active-expire-effort", "0"],
        &["CONFIG", "SET", "active-expire-effort", "11"],
        &["CONFIG", "SET", "active-expire-effort", "10"],
        &["CONFIG", "GET", "active-expire-effort"],
        &["CONFIG", "SET", "replica-announced", "maybe"],
        &["CONFIG", "SET", "replica-announced", "no"],
        &["CONFIG", "GET", "replica-announced"],
        &["CONFIG", "SET", "slave-announce-port", "65536"],
        &["CONFIG", "SET", "slave-announce-port", "7000"],
        &["CONFIG", "GET", "replica-announce-port"],
        &["CONFIG", "SET", "replica-announce-ip", "10.0.0.1"],
        &["CONFIG", "GET", "slave-announce-ip"],
        &["CONFIG", "SET", "replica-announce-ip", ""],
        &["CONFIG", "GET", "replica-announce-ip"],
    ];
    let keel = replies(&Server::start(&[]), lines);
    assert_eq!(keel[3], Frame::Array(vec![bulk("proto-max-bulk-len"), bulk("2097152")]));
    assert_eq!(keel[8], Frame::Array(vec![bulk("hash-max-listpack-value"), bulk("1000")]));
    same_as_redis(&[], lines, &keel);
}

/// What `server` answers to `lines`, in order, on one connection.
fn replies(server: &Server, lines: &[&[&str]]) -> Vec<Frame> {
    let mut c = server.client();
    lines.iter().map(|argv| c.send(argv)).collect()
}

/// Checks `keel`'s replies to `lines` against redis-server's, started
/// with `flags` (where it is installed).
fn same_as_redis(flags: &[&str], lines: &[&[&str]], keel: &[Frame]) {
    if let Some(redis) = Server::start_redis(flags) {
        for ((line, keel), redis) in lines.iter().zip(keel).zip(replies(&redis, lines)) {
            assert_eq!(*keel, redis, "{line:?}");
        }
    }
}

/// The directives of a Redis configuration that Keel reads but that change
/// little or nothing here, as Redis 7.0 answers them: `io-threads` and
/// `socket-mark-id` at start only, `activedefrag yes` refused in the words
/// of a Redis built without its own jemalloc (Debian's), the defrag
/// tunables' ranges, `ignore-warnings`, `crash-log-enabled`,
/// `replica-ignore-disk-write-errors`, and TLS left off (and refused
/// without a certificate).
#[test]
fn config_of_redis_s_other_features_reads_as_redis_s() {
    let lines: &[&[&str]] = &[
        &["CONFIG", "GET", "io-threads"],
        &["CONFIG", "SET", "io-threads", "4"],
        &["CONFIG", "GET", "io-threads-do-reads"],
        &["CONFIG", "SET", "io-threads-do-reads", "yes"],
        &["CONFIG", "SET", "socket-mark-id", "7"],
        &["CONFIG", "GET", "socket-mark-id"],
        &["CONFIG", "SET", "activedefrag", "yes"],
        &["CONFIG", "SET", "activedefrag", "maybe"],
        &["CONFIG", "SET", "activedefrag", "no"],
        &["CONFIG", "GET", "activedefrag"],
        &["CONFIG", "SET", "active-defrag-cycle-min", "0"],
        &["CONFIG", "SET", "active-defrag-cycle-max", "50"],
        &["CONFIG", "SET", "active-defrag-threshold-upper", "1001"],
        &["CONFIG", "SET", "active-defrag-ignore-bytes", "0"],
        &["CONFIG", "SET", "active-defrag-ignore-bytes", "200mb"],
        &["CONFIG", "SET", "active-defrag-max-scan-fields", "0"],
        &["CONFIG", "GET", "active-defrag-ignore-bytes"],
        &["CONFIG", "GET", "active-defrag-threshold-lower"],
        &["CONFIG", "GET", "active-defrag-threshold-upper"],
        &["CONFIG", "GET", "active-defrag-cycle-min"],
        &["CONFIG", "GET", "active-defrag-cycle-max"],
        &["CONFIG", "GET", "active-defrag-max-scan-fields"],
        &["CONFIG", "SET", "ignore-warnings", "ARM64-COW-BUG"],
        &["CONFIG", "GET", "ignore-warnings"],
        &["CONFIG", "SET", "crash-log-enabled", "no"],
        &["CONFIG", "GET", "crash-log-enabled"],
        &["CONFIG", "SET", "replica-ignore-disk-write-errors", "yes"],
        &["CONFIG", "GET", "replica-ignore-disk-write-errors"],
        &["CONFIG", "GET", "tls-port"],
        &["CONFIG", "GET", "tls-auth-clients"],
        &["CONFIG", "GET", "tls-session-cache-size"],
        &["CONFIG", "SET", "tls-port", "0"],
        // No certificate: TLS cannot start (tls.rs tests TLS itself).
        &["CONFIG", "SET", "tls-port", "6380"],
    ];
    let flags = ["--io-threads", "4", "--socket-mark-id", "0", "--tls-replication", "no"];
    let keel = Server::start(&flags);
    let got = replies(&keel, lines);
    assert_eq!(got[0], Frame::Array(vec![bulk("io-threads"), bulk("4")]));
    assert!(keel.log().contains("io-threads 4: each of Keel's 2 workers does its own connections' I/O"), "{}", keel.log());
    let refused = "ERR CONFIG SET failed (possibly related to argument 'tls-port') - Unable to update TLS configuration. Check server logs.";
    assert_eq!(got.last(), Some(&err(refused)));
    same_as_redis(&flags, lines, &got);
}

/// Every directive Debian's redis-server lists in CONFIG GET *, written
/// into a configuration file at redis-server's values, starts Keel, and
/// Keel then reports each as redis-server does. Left out: where to listen,
/// write and log, `replicaof` (listed empty, which no server reads), and
/// `crash-memcheck-enabled yes` (Keel runs no memory test when it
/// crashes, so it takes only `no`).
#[test]
fn every_directive_redis_lists_loads_in_keel_as_redis_reports_it() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let Frame::Array(listed) = redis.client().send(&["CONFIG", "GET", "*"]) else { panic!("CONFIG GET *") };
    let text = |f: &Frame| match f {
        Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{other:?}"),
    };
    let own = ["port", "dir", "daemonize", "logfile", "pidfile", "unixsocket", "slaveof", "replicaof", "crash-memcheck-enabled"];
    let pairs: Vec<(String, String)> =
        listed.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).filter(|(name, _)| !own.contains(&name.as_str())).collect();
    assert!(pairs.len() > 150, "{}", pairs.len());
    let dir = common::temp_dir("every-directive");
    let conf = dir.join("redis.conf");
    let quoted = |v: &str| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""));
    let body: String = pairs.iter().map(|(name, value)| format!("{name} {}\n", quoted(value))).collect();
    std::fs::write(&conf, body).expect("write the file");
    let port = common::free_port();
    let args = [conf.display().to_string(), "--port".into(), port.to_string(), "--dir".into(), dir.display().to_string()];
    let keel = Server::spawn_with(env!("CARGO_BIN_EXE_keel-server").into(), args.to_vec(), port);
    let (mut k, mut r) = (keel.client(), redis.client());
    for (name, _) in &pairs {
        assert_eq!(k.send(&["CONFIG", "GET", name]), r.send(&["CONFIG", "GET", name]), "{name}");
    }
    drop(keel);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The soft open files limit of a process.
fn open_files_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("a NOFILE line");
    line.split_whitespace().nth(3).and_then(|n| n.parse().ok()).expect("a number")
}

/// `maxclients` raises the open files limit to cover it with 32 to spare,
/// at start and at CONFIG SET, as Redis's adjustOpenFilesLimit; where the
/// system refuses that much, maxclients is what the limit allows (at
/// start) or the setting is refused with what it would allow.
#[test]
fn maxclients_raises_the_open_files_limit() {
    let server = Server::start(&["--maxclients", "30000"]);
    let mut c = server.client();
    let maxclients = |c: &mut Client| -> u64 {
        let Frame::Array(pair) = c.cmd("CONFIG GET maxclients") else { panic!("not a pair") };
        match &pair[1] {
            Frame::Bulk(n) => String::from_utf8_lossy(n).parse().expect("a number"),
            other => panic!("{other:?}"),
        }
    };
    let at_start = maxclients(&mut c);
    assert!(at_start + 32 <= open_files_limit(server.pid()), "maxclients {at_start}");
    assert!(at_start == 30000 || server.log().contains("maxclients has been reduced to"), "{}", server.log());
    match c.cmd("CONFIG SET maxclients 40000") {
        Frame::Simple(_) => assert_eq!(maxclients(&mut c), 40000),
        Frame::Error(e) => {
            let e = String::from_utf8_lossy(&e).into_owned();
            assert!(e.contains("The operating system is not able to handle the specified number of clients, try with"), "{e}");
            assert_eq!(maxclients(&mut c), at_start, "a refused setting leaves it as it was");
        }
        other => panic!("{other:?}"),
    }
    assert!(maxclients(&mut c) + 32 <= open_files_limit(server.pid()));
}

/// As Redis, which works in `dir`: a relative logfile and pidfile are
/// under it, and CONFIG SET dir moves the process there.
#[test]
fn relative_paths_are_under_dir() {
    let dir = common::temp_dir("relative");
    let server = Server::start_last_in(&dir, &["--appendonly", "no", "--save", "", "--logfile", "keel.log", "--pidfile", "keel.pid", "--enable-protected-configs", "yes"]);
    let mut c = server.client();
    let log = dir.join("keel.log");
    common::wait_for("the log under dir", || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Ready to accept")));
    assert_eq!(std::fs::read_to_string(dir.join("keel.pid")).expect("pidfile").trim(), server.pid().to_string());
    let cwd = || std::fs::read_link(format!("/proc/{}/cwd", server.pid())).expect("cwd");
    assert_eq!(cwd(), std::fs::canonicalize(&dir).expect("dir"));
    let other = common::temp_dir("relative-other");
    assert_eq!(c.send(&["CONFIG", "SET", "dir", &other.display().to_string()]), ok());
    assert_eq!(cwd(), std::fs::canonicalize(&other).expect("dir"));
    let _ = std::fs::remove_dir_all(&other);
}

/// Starts `binary` on `dir` from `conf` (with `port` in it), as the
/// configuration file.
fn spawn_from_file(binary: &str, dir: &std::path::Path, conf: &str, port: u16) -> Server {
    let file = dir.join("server.conf");
    std::fs::write(&file, conf).expect("write");
    Server::spawn_with(binary.into(), vec![file.display().to_string(), "--dir".into(), dir.display().to_string()], port)
}

fn shut_down(mut server: Server) {
    let mut c = server.client();
    c.write_command(&["SHUTDOWN"]);
    c.read_to_close();
    common::wait_for("the server's exit", || server.exit_status().is_some());
}

/// What clients see of `rename-command`, then what a restart loads
/// from the log the renamed commands wrote.
fn renamed_commands_script(binary: &str) -> Vec<Frame> {
    const SECRET: &str = "Secret_Get_Name_That_Is_Longer_Than_32_Bytes";
    let dir = common::temp_dir("rename-command");
    let port = common::free_port();
    let conf = format!(
        "port {port}\nsave \"\"\nappendonly yes\nrename-command flushdb badger\nrename-command CONFIG \"\"\nrename-command get {SECRET}\n"
    );
    let server = spawn_from_file(binary, &dir, &conf, port);
    let mut c = server.client();
    let secret = SECRET.to_ascii_lowercase();
    let mut replies = Vec::new();
    for line in [
        "SET a 1",
        "FLUSHDB",
        "badger",
        "CONFIG GET port",
        "SET a 1",
        "SET k v EX 100",
        "GET a",
        &format!("{secret} a"),
        "COMMAND INFO get flushdb config",
        "COMMAND LIST FILTERBY PATTERN flush*",
        "COMMAND LIST FILTERBY PATTERN config*",
        "COMMAND GETKEYS get a",
        &format!("COMMAND GETKEYS {SECRET} a"),
        "EVAL \"return redis.pcall('get','a')\" 0",
        &format!("EVAL \"return redis.call('{SECRET}','a')\" 0"),
        "MULTI",
        &format!("{SECRET} a"),
        "EXEC",
        "MULTI",
        "GET a",
        "EXEC",
    ] {
        let reply = match c.cmd(line) {
            Frame::Array(mut names) if line.starts_with("COMMAND LIST") => {
                names.sort_by_key(|n| match n {
                    Frame::Bulk(name) => name.clone(),
                    _ => Vec::new(),
                });
                Frame::Array(names)
            }
            reply => reply,
        };
        replies.push(reply);
    }
    // COMMAND INFO of the renamed FLUSHDB: its own name.
    let Frame::Array(info) = c.send(&["COMMAND", "INFO", "badger"]) else { panic!("COMMAND INFO") };
    let Some(Frame::Array(fields)) = info.first() else { panic!("COMMAND INFO badger: {info:?}") };
    replies.push(fields[0].clone());
    // The log holds what the renamed commands did: a restart loads it.
    shut_down(server);
    let server = spawn_from_file(binary, &dir, &conf, port);
    let mut c = server.client();
    replies.extend(["DBSIZE", &format!("{secret} k"), "TTL k"].map(|line| c.cmd(line)));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    replies
}

/// `rename-command`, against redis-server with the same file: a command
/// renamed is called by its new name only (by clients, scripts and
/// transactions, case-insensitively), one renamed to "" by none; COMMAND
/// lists it by its own name; the log it writes loads again.
#[test]
fn rename_command_renames_as_redis_s() {
    let keel = renamed_commands_script(env!("CARGO_BIN_EXE_keel-server"));
    assert_eq!(keel[1], err("ERR unknown command 'FLUSHDB', with args beginning with: "));
    assert_eq!(keel[2], ok());
    assert_eq!(keel[7], bulk("1"));
    assert_eq!(keel[8], Frame::Array(vec![Frame::Null, Frame::Null, Frame::Null]));
    assert_eq!(keel[9], Frame::Array(vec![bulk("flushall"), bulk("flushdb")]));
    assert_eq!(keel[10], Frame::Array(vec![]));
    assert_eq!(keel[17], Frame::Array(vec![bulk("1")]));
    assert_eq!(keel[21..24], [bulk("flushdb"), int(2), bulk("v")]);
    // The TTL: a second may pass before the restart.
    assert!(matches!(keel[24], Frame::Integer(99..=100)), "{:?}", keel[24]);
    if std::path::Path::new("/usr/bin/redis-server").exists() {
        let redis = renamed_commands_script("/usr/bin/redis-server");
        assert_eq!(keel[..24], redis[..24]);
        assert!(matches!(redis[24], Frame::Integer(99..=100)), "{:?}", redis[24]);
    }
}

/// Keel logs some writes by their own names (a SET with a relative
/// expiry as `SET ... PXAT`): a log loads whatever clients call them.
/// (Redis's own AOF fails to load there: "Unknown command 'SET'".)
#[test]
fn a_log_written_under_renamed_commands_loads() {
    let dir = common::temp_dir("renamed-log");
    let port = common::free_port();
    let conf = format!("port {port}\nrename-command set put\nrename-command expire \"\"\nrename-command multi begin\n");
    let binary = env!("CARGO_BIN_EXE_keel-server");
    let server = spawn_from_file(binary, &dir, &conf, port);
    let mut c = server.client();
    assert_eq!(c.cmd("SET k v"), err("ERR unknown command 'SET', with args beginning with: 'k' 'v' "));
    assert_eq!(c.cmd("PUT k v EX 100"), ok());
    assert_eq!(c.cmd("BEGIN"), ok());
    assert_eq!(c.cmd("PUT j w"), simple("QUEUED"));
    assert_eq!(c.cmd("PEXPIRE j 100000"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![ok(), int(1)]));
    shut_down(server);
    let server = spawn_from_file(binary, &dir, &conf, port);
    let mut c = server.client();
    assert_eq!(c.cmd("MGET k j"), Frame::Array(vec![bulk("v"), bulk("w")]));
    assert!(matches!(c.cmd("PTTL j"), Frame::Integer(90_000..=100_000)));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
