//! What the server does to its own process, against Debian's redis-server
//! under the same directives: `oom-score-adj` and `oom-score-adj-values`,
//! `disable-thp`, `jemalloc-bg-thread`, `daemonize` with `pidfile`, and
//! the process title.

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

/// The datagrams a server sends its `NOTIFY_SOCKET`, collected as they come.
struct NotifySocket {
    socket: std::os::unix::net::UnixDatagram,
    got: Vec<String>,
}

impl NotifySocket {
    fn bind(path: &std::path::Path) -> NotifySocket {
        let socket = std::os::unix::net::UnixDatagram::bind(path).expect("bind the notify socket");
        socket.set_read_timeout(Some(Duration::from_millis(100))).expect("test setup");
        NotifySocket { socket, got: Vec::new() }
    }

    /// Reads until `last` has come (within 10 s); returns everything so far.
    fn until(&mut self, last: &str) -> &[String] {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 512];
        while !self.got.iter().any(|m| m == last) {
            assert!(Instant::now() < deadline, "no {last:?} among {:?}", self.got);
            if let Ok(n) = self.socket.recv(&mut buf) {
                self.got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        &self.got
    }
}

/// What a server under `supervised systemd` tells systemd from start to
/// SHUTDOWN, with `daemonize yes` (which supervision overrides: the
/// process must stay the one started, or `spawn` would see it exit).
fn systemd_session(start: impl FnOnce(&[(&str, &str)]) -> Option<Server>, socket: &std::path::Path) -> Option<(Vec<String>, String)> {
    let mut notify = NotifySocket::bind(socket);
    let target = socket.display().to_string();
    let mut server = start(&[("NOTIFY_SOCKET", &target)])?;
    notify.until("READY=1\n");
    assert!(server.alive(), "a supervised server stays in the foreground");
    let supervised = server.client().info_field("server", "process_supervised");
    let mut c = server.client();
    c.write_command(&["SHUTDOWN", "NOSAVE"]);
    c.read_to_close();
    Some((notify.until("STOPPING=1\n").to_vec(), supervised))
}

/// `supervised systemd`: Keel tells systemd what Debian's redis-server
/// does, in the same order (its first status names the server).
#[test]
fn supervised_systemd_notifies_as_redis_does() {
    let dir = temp_dir("systemd");
    let flags = ["--supervised", "systemd", "--daemonize", "yes"];
    let (keel, supervised) =
        systemd_session(|env| Some(Server::start_in_with_env(&dir, &flags, env)), &dir.join("keel.sock")).expect("keel");
    assert_eq!(supervised, "systemd");
    assert_eq!(
        keel,
        [
            "STATUS=Keel is loading...\n",
            "STATUS=Ready to accept connections\n",
            "READY=1\n",
            "STOPPING=1\n"
        ]
    );
    if let Some((redis, supervised)) = systemd_session(|env| Server::start_redis_with_env(&flags, env), &dir.join("redis.sock")) {
        assert_eq!(supervised, "systemd");
        assert_eq!(redis[0], "STATUS=Redis is loading...\n");
        assert_eq!(redis[1..], keel[1..]);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `supervised auto` finds systemd by its variable, here an abstract
/// socket (`@name`, as systemd may pass); without the variable a server
/// under `supervised systemd` says so and runs unsupervised.
#[test]
fn supervised_auto_finds_an_abstract_notify_socket() {
    let name = format!("keel-test-notify-{}", std::process::id());
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
    let socket = std::os::unix::net::UnixDatagram::bind_addr(&addr).expect("bind");
    socket.set_read_timeout(Some(Duration::from_secs(10))).expect("test setup");
    let target = format!("@{name}");
    let server = Server::start_in_with_env(&temp_dir("systemd-auto"), &["--supervised", "auto"], &[("NOTIFY_SOCKET", &target)]);
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("the first notification");
    assert_eq!(&buf[..n], b"STATUS=Keel is loading...\n");
    assert_eq!(server.client().info_field("server", "process_supervised"), "systemd");
    drop(server);

    let server = Server::start(&["--supervised", "systemd"]);
    assert_eq!(server.client().info_field("server", "process_supervised"), "no");
    assert!(server.log().contains("systemd supervision error: NOTIFY_SOCKET not found!"), "{}", server.log());
}

/// `supervised upstart`: the server stops itself once (upstart's `expect
/// stop`) and, let go on, serves.
#[test]
fn supervised_upstart_stops_itself_until_continued() {
    let dir = temp_dir("upstart");
    let port = common::free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_keel-server"))
        .args(["--port", &port.to_string(), "--supervised", "upstart", "--daemonize", "yes", "--dir"])
        .arg(&dir)
        .env("UPSTART_JOB", "keel")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let state = || proc_file(pid, "stat").rsplit(')').next().unwrap_or_default().split_whitespace().next().map(str::to_owned);
    common::wait_for("the server to stop itself", || state().as_deref() == Some("T"));
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "stopped before it listens");
    let status = std::process::Command::new("kill").args(["-CONT", &pid.to_string()]).status().expect("kill");
    assert!(status.success());
    common::wait_for("the server to listen", || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    let mut c = common::Client::connect(port);
    common::wait_for("the load", || c.info_field("persistence", "loading") == "0");
    assert_eq!(c.info_field("server", "process_supervised"), "upstart");
    assert_eq!(c.info_field("server", "process_id"), pid.to_string(), "not daemonized");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// DEBUG PANIC ends the server as Redis's does (exit code 1 under
/// `use-exit-on-panic`), its report in the log: the stack trace only
/// under `crash-log-enabled`.
#[test]
fn debug_panic_reports_as_crash_log_enabled_says() {
    for crash_log in ["yes", "no"] {
        let flags = ["--enable-debug-command", "yes", "--use-exit-on-panic", "yes", "--crash-log-enabled", crash_log];
        let keel = Server::start(&flags);
        let redis = Server::start_redis(&flags);
        for mut server in [Some(keel), redis].into_iter().flatten() {
            let mut c = server.client();
            c.write_command(&["DEBUG", "PANIC"]);
            c.read_to_close();
            common::wait_for("the panic to end the process", || !server.alive());
            assert_eq!(server.exit_status().and_then(|s| s.code()), Some(1));
            let log = server.log();
            assert!(log.contains("Guru Meditation: DEBUG PANIC called at Unix time "), "{log}");
            assert_eq!(log.contains("------ STACK TRACE ------"), crash_log == "yes", "{log}");
        }
    }
}

/// `Cpus_allowed_list` of each of a process's threads whose name starts
/// with `prefix`.
fn cpus_of_threads(pid: u32, prefix: &str) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    let mut lists = Vec::new();
    for task in tasks.filter_map(|t| t.ok()) {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim().starts_with(prefix) {
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("?");
            lists.push(cpus.trim().to_string());
        }
    }
    lists
}

/// Whether this test process may run on CPUs 0 and 1, to pin a server's
/// threads to one or the other; says why not if not.
fn two_cpus_to_pin() -> bool {
    let ours = cpus_of_threads(std::process::id(), "");
    if std::thread::available_parallelism().map_or(true, |n| n.get() < 2) || ours.iter().any(|l| !l.starts_with("0-")) {
        eprintln!("fewer than two CPUs (from 0) to pin threads to: skipping");
        return false;
    }
    true
}

/// `server_cpulist`, `bio_cpulist`, `aof_rewrite_cpulist` and
/// `bgsave_cpulist` pin each kind of thread, as Redis's pin its main and
/// background threads (on a machine with two CPUs or more).
#[test]
fn cpulists_pin_each_kind_of_thread() {
    if !two_cpus_to_pin() {
        return;
    }
    let flags = ["--server_cpulist", "0", "--bio_cpulist", "1", "--aof_rewrite_cpulist", "1", "--bgsave_cpulist", "0-1"];
    let keel = Server::start(&flags);
    let pid = keel.pid();
    let one = |prefix: &str, want: &str| {
        let got = cpus_of_threads(pid, prefix);
        assert!(!got.is_empty() && got.iter().all(|l| l == want), "{prefix}: {got:?}");
    };
    one("keel-worker-", "0");
    one("keel-aof-writer", "1");
    one("keel-aof-fsync", "1");
    one("keel-rewrite", "1");
    one("keel-bgsave", "0-1");
    assert_eq!(keel.client().cmd("CONFIG GET server_cpulist"), Frame::Array(vec![common::bulk("server_cpulist"), common::bulk("0")]));
    if let Some(redis) = Server::start_redis(&flags) {
        let main = proc_file(redis.pid(), "status");
        assert!(main.lines().any(|l| l == "Cpus_allowed_list:\t0"), "{main}");
        // Each bio thread names itself once it runs, maybe after the
        // server answers.
        common::wait_for("Redis's bio threads", || !cpus_of_threads(redis.pid(), "bio_").is_empty());
        let bio = cpus_of_threads(redis.pid(), "bio_");
        assert!(bio.iter().all(|l| l == "1"), "{bio:?}");
    }
}

/// A diskless sync runs on `bgsave_cpulist`, as Redis's fork child for
/// one does; the replica's thread is back on `server_cpulist` after it.
#[test]
fn diskless_syncs_follow_bgsave_cpulist() {
    if !two_cpus_to_pin() {
        return;
    }
    // 50 keys at 20 ms each: a sync of about a second.
    let flags = ["--server_cpulist", "0", "--bgsave_cpulist", "1", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"];
    let master = Server::start(&[&flags[..], &["--rdb-key-save-delay", "20000"]].concat());
    let mut c = master.client();
    for i in 0..50 {
        assert_eq!(c.send(&["SET", &format!("k{i}"), "v"]), common::ok());
    }
    let replica = Server::start(&[]);
    let mut r = replica.client();
    assert_eq!(r.send(&["REPLICAOF", "127.0.0.1", &master.port.to_string()]), common::ok());
    let syncing = || cpus_of_threads(master.pid(), "keel-repl-out");
    common::wait_for("the sync on bgsave_cpulist", || syncing() == ["1"]);
    common::wait_for("the sync's end", || r.info_field("replication", "master_link_status") == "up");
    assert_eq!(syncing(), ["0"]);
    assert_eq!(r.cmd("DBSIZE"), common::int(50));
}

/// `syslog-enabled yes`: the log's lines go to the system logger too,
/// under `syslog-ident` (with the pid) and `syslog-facility`, as Redis
/// sends them. Where no syslog daemon holds /dev/log and the test may
/// create it (root), the test listens there itself.
#[test]
fn syslog_enabled_sends_the_log_to_dev_log() {
    let path = std::path::Path::new("/dev/log");
    let Ok(socket) = std::os::unix::net::UnixDatagram::bind(path) else {
        eprintln!("/dev/log is taken or cannot be created: skipping");
        return;
    };
    // Gone however the test ends: a socket file nobody reads would take
    // every other program's syslog lines.
    struct Remove(&'static std::path::Path);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    let _remove = Remove(path);
    socket.set_read_timeout(Some(Duration::from_millis(200))).expect("test setup");
    let mut lines = Vec::new();
    for (program, ident) in [(Some(env!("CARGO_BIN_EXE_keel-server")), "keel-syslog-test"), (None, "redis-syslog-test")] {
        let flags = ["--syslog-enabled", "yes", "--syslog-ident", ident, "--syslog-facility", "local3"];
        let server = match program {
            Some(_) => Some(Server::start(&flags)),
            None => Server::start_redis(&flags),
        };
        let Some(server) = server else { continue };
        // local3 (19) * 8 + notice (5), then the ident with the pid.
        let head = "<157>";
        let tag = format!("{ident}[{}]: ", server.pid());
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 4096];
        let ready = loop {
            assert!(Instant::now() < deadline, "no ready line from {ident} among {lines:?}");
            let Ok(n) = socket.recv(&mut buf) else { continue };
            let line = String::from_utf8_lossy(&buf[..n]).into_owned();
            if line.contains(&tag) && line.contains("Ready to accept connections") {
                break line;
            }
            lines.push(line);
        };
        assert!(ready.starts_with(head), "{ready}");
        assert!(ready.ends_with(&format!("{tag}Ready to accept connections")), "{ready}");
    }
}

/// Redis's crash log: a crash signal (sent, or DEBUG SEGFAULT's fault)
/// writes what crashed and the stack trace to the log, then ends the
/// process by that signal. No core is left: the limit for one is 0 here.
#[test]
fn a_crash_signal_is_reported_in_the_log_then_ends_the_process() {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: lowers this process's core size limit, which the servers inherit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &libc::rlimit { rlim_cur: 0, rlim_max: 0 }) };
    let flags = ["--enable-debug-command", "yes"];
    for (how, signal) in [("-ABRT", libc::SIGABRT), ("-SEGV", libc::SIGSEGV), ("DEBUG SEGFAULT", libc::SIGSEGV)] {
        let keel = Server::start(&flags);
        let redis = Server::start_redis(&flags);
        for mut server in [Some(keel), redis].into_iter().flatten() {
            if let Some(argv) = how.strip_prefix("DEBUG ") {
                let mut c = server.client();
                c.write_command(&["DEBUG", argv]);
                c.read_to_close();
            } else {
                server.signal(how);
            }
            common::wait_for("the crash to end the process", || !server.alive());
            assert_eq!(server.exit_status().and_then(|s| s.signal()), Some(signal), "{how}");
            let log = server.log();
            assert!(log.contains(&format!("crashed by signal: {signal}")), "{how}: {log}");
            assert!(log.contains("------ STACK TRACE ------"), "{how}: {log}");
        }
    }
}

/// A failed assertion (DEBUG ASSERT; any panic of a worker) ends the whole
/// server, as Redis's does: exit code 1 under `use-exit-on-panic`, SIGABRT
/// otherwise, its report in the log. A worker left dead would leave its
/// clients unanswered.
#[test]
fn a_failed_assertion_ends_the_server_as_redis_s_does() {
    use std::os::unix::process::ExitStatusExt;
    // SAFETY: lowers this process's core size limit, which the servers inherit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &libc::rlimit { rlim_cur: 0, rlim_max: 0 }) };
    for exit_on_panic in ["yes", "no"] {
        let flags = ["--enable-debug-command", "yes", "--use-exit-on-panic", exit_on_panic];
        let keel = Server::start(&flags);
        let redis = Server::start_redis(&flags);
        for mut server in [Some(keel), redis].into_iter().flatten() {
            let mut c = server.client();
            c.write_command(&["DEBUG", "ASSERT"]);
            c.read_to_close();
            common::wait_for("the assertion to end the process", || !server.alive());
            let status = server.exit_status().expect("ended");
            match exit_on_panic {
                "yes" => assert_eq!(status.code(), Some(1)),
                _ => assert_eq!(status.signal(), Some(libc::SIGABRT)),
            }
            let log = server.log();
            assert!(log.contains("=== ASSERTION FAILED ==="), "{log}");
            assert_eq!(log.matches("=== ASSERTION FAILED ===").count(), 1, "reported once: {log}");
        }
    }
}

/// `watchdog-period`: a worker stuck in one command past the period logs
/// its stack trace, as Redis's main thread does, and goes on; the period
/// is raised to two cron periods and hidden from CONFIG GET *, as in
/// Redis.
#[test]
fn the_watchdog_logs_a_stuck_workers_stack_as_redis_s_does() {
    let flags = ["--enable-debug-command", "yes"];
    let keel = Server::start(&flags);
    let redis = Server::start_redis(&flags);
    for server in [Some(keel), redis].into_iter().flatten() {
        let mut c = server.client();
        assert_eq!(c.cmd("CONFIG SET watchdog-period 50"), common::ok());
        assert_eq!(c.cmd("CONFIG GET watchdog-period"), Frame::Array(vec![common::bulk("watchdog-period"), common::bulk("200")]));
        let Frame::Array(all) = c.cmd("CONFIG GET *") else { panic!("CONFIG GET *") };
        assert!(!all.contains(&common::bulk("watchdog-period")), "hidden");
        assert!(matches!(c.cmd("CONFIG SET watchdog-period -1"), Frame::Error(_)));
        assert_eq!(c.cmd("DEBUG SLEEP 1"), common::ok());
        assert_eq!(c.cmd("PING"), common::simple("PONG"));
        common::wait_for("the watchdog's report", || server.log().contains("--- WATCHDOG TIMER EXPIRED ---"));
        let log = server.log();
        assert!(log.contains("------ STACK TRACE ------"), "{log}");
        // Redis's function, or Keel's (named in full or, in debug builds, alone).
        let stuck = ["debugCommand", "command::server::debug", ": debug\n"];
        assert!(stuck.iter().any(|f| log.contains(f)), "the stuck command in the trace: {log}");
        assert_eq!(c.cmd("CONFIG SET watchdog-period 0"), common::ok());
        assert_eq!(c.cmd("CONFIG GET watchdog-period"), Frame::Array(vec![common::bulk("watchdog-period"), common::bulk("0")]));
    }
}

/// The command line read as Redis's (its "command line arguments - error
/// cases"): a `--name` with no value yet takes the next argument as its
/// value even when that starts with `--`, and each failure names the line
/// it built. Keel and redis-server, each refusing to start.
#[test]
fn command_line_arguments_are_read_as_redis_s() {
    let arity = "wrong number of arguments";
    let one_of = "argument(s) must be one of the following";
    let cases: [(&[&str], &str, &str); 10] = [
        (&["--port"], "'port'", arity),
        (&["--port", "6380", "--loglevel"], "'loglevel'", arity),
        (&["--port", "6379", "6380"], r#"'port "6379" "6380"'"#, arity),
        (&["--port", "--loglevel", "verbose"], r#"'port "--loglevel" "verbose"'"#, arity),
        (&["--port", "--bla", "--loglevel", "verbose"], r#"'port "--bla"'"#, "argument couldn't be parsed into an integer"),
        (&["--logfile", "--my--log--file", "--loglevel", "--bla"], r#"'loglevel "--bla"'"#, one_of),
        (&["--shutdown-on-sigint"], "'shutdown-on-sigint'", one_of),
        (&["--shutdown-on-sigint", "now force", "--shutdown-on-sigterm"], "'shutdown-on-sigterm'", one_of),
        (&["--rename-command", "nosuch", "x"], r#"'rename-command "nosuch" "x"'"#, "No such command in rename-command"),
        (&["--rename-command", "get", "x", "--rename-command", "x", "SET"], r#"'rename-command "x" "SET"'"#, "Target command name already exists"),
    ];
    let binaries = [env!("CARGO_BIN_EXE_keel-server"), "/usr/bin/redis-server"];
    for binary in binaries.into_iter().filter(|b| std::path::Path::new(b).exists()) {
        let dir = temp_dir("command-line");
        for (args, line, why) in cases {
            let mut child = std::process::Command::new(binary)
                .args(args)
                .current_dir(&dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn");
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().expect("wait").is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("{binary} {args:?} started");
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let output = child.wait_with_output().expect("output");
            let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{binary} {args:?}: {text}");
            assert!(text.contains(line) && text.contains(why), "{binary} {args:?}: {line}, {why} in {text}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The words of the process's command line, as `ps` shows them.
fn command_line_words(pid: u32) -> Vec<String> {
    proc_file(pid, "cmdline").split(['\0', ' ']).filter(|w| !w.is_empty()).map(String::from).collect()
}

/// What `ps` shows: the default template at start, then one CONFIG SET
/// gives; a bad template is refused and changes nothing.
fn process_titles(server: &Server, socket: &str) -> Vec<Vec<String>> {
    let mut c = server.client();
    let mut titles = vec![command_line_words(server.pid())];
    let template = "TEST {title} {listen-addr} {port} {tls-port} {unixsocket} {config-file} {server-mode} {{x}";
    assert_eq!(c.send(&["CONFIG", "SET", "proc-title-template", template]), Frame::Simple(b"OK".to_vec()));
    titles.push(command_line_words(server.pid()));
    let refused = c.send(&["CONFIG", "SET", "proc-title-template", "{invalid-var}"]);
    assert!(
        matches!(&refused, Frame::Error(e) if String::from_utf8_lossy(e).contains("template format is invalid or contains unknown variables")),
        "{refused:?}"
    );
    let got = c.send(&["CONFIG", "GET", "proc-title-template"]);
    assert_eq!(got, Frame::Array(vec![common::bulk("proc-title-template"), common::bulk(template)]));
    titles.push(command_line_words(server.pid()));
    // Placeholders for what differs between the two servers.
    titles
        .into_iter()
        .map(|t| t.into_iter().map(|w| w.replace(&server.port.to_string(), "PORT").replace(socket, "SOCKET")).collect())
        .collect()
}

#[test]
fn the_process_title_follows_its_template_as_redis_s() {
    let dir = temp_dir("proc-title");
    let socket = dir.join("keel.sock").display().to_string();
    let flags = ["--unixsocket", &socket];
    let keel = Server::start(&flags);
    let program = env!("CARGO_BIN_EXE_keel-server");
    let titles = process_titles(&keel, &socket);
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert_eq!(titles[0], words(&format!("{program} *:PORT")));
    assert_eq!(titles[1], words(&format!("TEST {program} *:PORT PORT 0 SOCKET - {{x}}")));
    assert_eq!(titles[2], titles[1]);
    if let Some(redis) = Server::start_redis(&flags) {
        let with_keel_s_name = |t: &Vec<String>| t.iter().map(|w| w.replace("/usr/bin/redis-server", program)).collect::<Vec<_>>();
        assert_eq!(titles, process_titles(&redis, &socket).iter().map(with_keel_s_name).collect::<Vec<_>>());
    }
    // `set-proc-title no` leaves the command line as it was given.
    let keel = Server::start(&["--set-proc-title", "no"]);
    assert_eq!(command_line_words(keel.pid()).iter().rev().take(2).collect::<Vec<_>>(), ["no", "--set-proc-title"]);
    let _ = std::fs::remove_dir_all(&dir);
}
