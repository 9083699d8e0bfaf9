//! What the server does to its own process, against Debian's redis-server
//! under the same directives: `oom-score-adj` and `oom-score-adj-values`,
//! `disable-thp`, `jemalloc-bg-thread`, and `daemonize` with `pidfile`.

mod common;

use std::time::{Duration, Instant};

use common::{temp_dir, Frame, Server};

fn proc_file(pid: u32, name: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{name}")).unwrap_or_default()
}

fn oom_score(pid: u32) -> i32 {
    proc_file(pid, "oom_score_adj").trim().parse().expect("oom_score_adj")
}

/// CONFIG SET and GET of the OOM directives, each reply beside the
/// process's `oom_score_adj` right after it.
fn oom_script(server: &Server) -> Vec<(Frame, i32)> {
    let mut c = server.client();
    let mut steps = vec![(Frame::Simple("start".into()), oom_score(server.pid()))];
    for line in [
        "CONFIG SET oom-score-adj-values 7 200 800",
        "CONFIG SET oom-score-adj relative",
        "CONFIG GET oom-score-adj",
        "CONFIG SET oom-score-adj-values 1 2",
        "CONFIG SET oom-score-adj-values 3000 0 0",
        "CONFIG SET oom-score-adj maybe",
        "CONFIG GET oom-score-adj-values",
        "CONFIG SET oom-score-adj no",
        "CONFIG SET oom-score-adj absolute",
        "REPLICAOF 127.0.0.1 1",
        "REPLICAOF NO ONE",
        "CONFIG SET disable-thp no",
        "CONFIG SET daemonize yes",
    ] {
        let argv: Vec<&str> = match line.strip_prefix("CONFIG SET oom-score-adj-values ") {
            Some(values) => vec!["CONFIG", "SET", "oom-score-adj-values", values],
            None => line.split(' ').collect(),
        };
        let reply = c.send(&argv);
        steps.push((reply, oom_score(server.pid())));
    }
    steps
}

#[test]
fn oom_score_adj_follows_its_directives_as_redis_s() {
    let base = oom_score(std::process::id());
    let flags = ["--oom-score-adj", "absolute", "--oom-score-adj-values", "5 200 800"];
    let keel = Server::start(&flags);
    let got = oom_script(&keel);
    let scores: Vec<i32> = got.iter().map(|(_, s)| *s).collect();
    // absolute 5; values 7; relative: base + 7; no: back to base; absolute
    // 7; a replica's 200, then the master's 7 again.
    assert_eq!(scores, [5, 7, base + 7, base + 7, base + 7, base + 7, base + 7, base + 7, base, 7, 200, 7, 7, 7]);
    assert_eq!(got[3].0, Frame::Array(vec![common::bulk("oom-score-adj"), common::bulk("yes")]));
    if let Some(redis) = Server::start_redis(&flags) {
        assert_eq!(got, oom_script(&redis));
    }
}

fn thp_enabled(pid: u32) -> String {
    proc_file(pid, "status").lines().find(|l| l.starts_with("THP_enabled")).unwrap_or_default().to_string()
}

fn jemalloc_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .filter_map(Result::ok)
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "jemalloc_bg_thd"))
        .count()
}

/// `disable-thp` turns huge pages off exactly where Redis does (only when
/// the system gives them to every process); `jemalloc-bg-thread` starts and
/// stops jemalloc's purging threads.
#[test]
fn thp_and_jemalloc_background_threads_follow_their_directives() {
    for flags in [&[][..], &["--disable-thp", "no"][..]] {
        let keel = Server::start(flags);
        if let Some(redis) = Server::start_redis(flags) {
            assert_eq!(thp_enabled(keel.pid()), thp_enabled(redis.pid()), "{flags:?}");
        }
    }
    let keel = Server::start(&[]);
    let pid = keel.pid();
    // A new thread names itself once it runs: wait for its name.
    let wait_threads = |running: bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while (jemalloc_threads(pid) > 0) != running {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_threads(true, "background threads are on by default");
    let mut c = keel.client();
    assert_eq!(c.cmd("CONFIG SET jemalloc-bg-thread no"), common::ok());
    wait_threads(false, "jemalloc's background threads did not stop");
    assert_eq!(c.cmd("CONFIG SET jemalloc-bg-thread yes"), common::ok());
    wait_threads(true, "jemalloc's background threads did not start again");
}

/// `daemonize yes`: the command returns at once, successfully; the server
/// runs on in a session of its own, its pid in `pidfile`, which a SHUTDOWN
/// removes.
#[test]
fn daemonize_detaches_and_keeps_a_pidfile() {
    let dir = temp_dir("daemon");
    let port = common::free_port();
    let pidfile = dir.join("keel.pid");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_keel-server"))
        .args(["--port", &port.to_string(), "--daemonize", "yes", "--pidfile"])
        .arg(&pidfile)
        .arg("--dir")
        .arg(&dir)
        .status()
        .expect("run keel-server");
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid: u32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "no pidfile");
        std::thread::sleep(Duration::from_millis(10));
    };
    let stat = proc_file(pid, "stat");
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(fields.get(3), Some(&pid.to_string().as_str()), "a session leader: {stat}");
    // Serving starts before the journal is loaded: PONG once it is.
    let mut c = loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            let mut c = common::Client::connect(port);
            if c.cmd("PING") == Frame::Simple("PONG".into()) {
                break c;
            }
        }
        assert!(Instant::now() < deadline, "the daemon does not answer");
        std::thread::sleep(Duration::from_millis(10));
    };
    c.write_command(&["SHUTDOWN", "NOSAVE"]);
    c.read_to_close();
    while pidfile.exists() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "the daemon did not stop, or left its pidfile");
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Debian's stock /etc/redis/redis.conf starts Keel (with the directives a
/// test must override: where to listen, log and write), and its settings
/// apply: the directives of features Keel lacks are at their defaults.
#[test]
fn debian_s_stock_redis_conf_starts_keel() {
    let conf = std::path::Path::new("/etc/redis/redis.conf");
    if !conf.exists() {
        eprintln!("redis-server not installed: skipping (scripts/test.sh installs it)");
        return;
    }
    let dir = temp_dir("stock-conf");
    let port = common::free_port();
    let mut args = vec![conf.display().to_string()];
    for (name, value) in [
        ("--port", port.to_string()),
        ("--dir", dir.display().to_string()),
        ("--daemonize", "no".into()),
        ("--logfile", String::new()),
        ("--pidfile", dir.join("keel.pid").display().to_string()),
    ] {
        args.extend([name.to_string(), value]);
    }
    let server = Server::spawn_with(env!("CARGO_BIN_EXE_keel-server").into(), args, port);
    let mut c = server.client();
    let get = |c: &mut common::Client, name: &str| c.send(&["CONFIG", "GET", name]);
    let pair = |name: &str, value: &str| Frame::Array(vec![common::bulk(name), common::bulk(value)]);
    assert_eq!(get(&mut c, "appendonly"), pair("appendonly", "no"), "the file's setting");
    assert_eq!(get(&mut c, "notify-keyspace-events"), pair("notify-keyspace-events", ""));
    assert_eq!(get(&mut c, "repl-diskless-load"), pair("repl-diskless-load", "disabled"));
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
