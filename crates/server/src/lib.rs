//! The Keel server: configuration, worker threads with their event loops,
//! per-connection state, and the command table with every command's
//! implementation. The keyspace itself lives in `keel-engine`; the wire
//! format in `keel-protocol`; the append-only log in `keel-journal`; the
//! RDB format in `keel-rdb` ([`rdb`] converts values to and from it).
//! [`rewrite`] rewrites the log in the background from a forkless snapshot;
//! [`snapshot`] writes and loads `dump.rdb` (SAVE, BGSAVE, the `save`
//! rules, SHUTDOWN's final save); both job threads wait on a
//! [`doorbell`], and both run their snapshot's scan [`behind`] the workers
//! (in the idle scheduling class, stepping aside for busy ones:
//! [`give_way`]) until it must run as their equal. [`signals`] turns SIGTERM and
//! SIGINT into SHUTDOWN, and [`shutdown`] runs it (waiting for replicas
//! to catch up first); [`alloc`] is jemalloc and its counters;
//! [`process`] what the server does to its own process (`daemonize`,
//! `disable-thp`, `oom-score-adj`, `jemalloc-bg-thread`), and
//! [`proc_title`] the title `ps` shows for it; [`supervision`]
//! tells systemd or upstart how start-up and shutdown go; [`syslog`] sends
//! the log to the system logger; [`watchdog`] logs the stack of a worker
//! stuck past `watchdog-period`; [`slowlog`] keeps
//! SLOWLOG's entries; [`latency`] is the latency monitor (LATENCY's
//! events); [`loading`] paces a load and decides what clients
//! see meanwhile; [`pause`] holds clients for CLIENT PAUSE, a shutdown's
//! save and a failover, each its own pause; [`pubsub`] keeps who listens to which channel and
//! carries PUBLISH's messages to them, whatever worker serves them;
//! [`notify`] turns changes to keys into such messages; [`tracking`] is
//! client-side caching (CLIENT TRACKING: who tracks, and the invalidations
//! of the keys each command changed, out of the per-shard tables);
//! [`tls`] speaks TLS with clients on `tls-port`; [`memcache`] runs
//! the requests of memcached clients (on `memcached-port`) as the Redis
//! commands they stand for; [`metrics`] answers Prometheus's scrapes (on
//! `metrics-port`) with INFO's figures; [`replication`] serves replicas
//! (Redis's or Keel's) from the same stream of changes the journal gets,
//! and [`replica`] replicates from a Redis (or Keel) master while
//! `replicaof` is set; [`scripting`] runs Lua scripts (EVAL) and
//! functions (FCALL) in a Lua interpreter per thread, each holding every
//! shard; [`acl`] keeps the users, checks each command against its
//! client's user, and keeps the ACL log; [`evict`] keeps used memory
//! under `maxmemory` by the `maxmemory-policy`, before each command;
//! [`client_memory`] counts what client connections hold and closes the
//! largest past `maxmemory-clients`;
//! [`migrate`] keeps MIGRATE's connections to its targets and talks to
//! them; [`cluster`] is cluster mode (the node's view of the cluster,
//! the bus thread speaking Redis's cluster bus, and the redirection of
//! commands whose keys another node serves); [`listen`] opens the
//! listening sockets (and moves them when CONFIG SET changes `port` or
//! `bind`) and outgoing connections from `bind-source-addr`.
//!
//! A request flows: socket -> [`worker`] reads into the connection's buffer
//! -> `keel_protocol::parse_request` -> [`command::execute`] looks the
//! command up in the one table, checks it against the client's user,
//! in cluster mode redirects it if another node serves its keys,
//! locks the shards its keys live in, runs the
//! handler, appends the reply and, for a write, the journal record
//! ([`durability`]) -> the worker writes the replies the journal's durable
//! position allows (under `everysec` and `no`, all of a loop turn's
//! replies at its end, once it has written the journal itself). A command
//! that creates a key some client is blocked on (or adds to a stream one
//! reads with BLOCK) then serves that client ([`blocking`]).

pub mod acl;
pub mod alloc;
pub mod behind;
pub mod blocking;
pub mod client;
pub mod client_memory;
pub mod command;
pub mod cluster;
pub mod config;
pub mod doorbell;
pub mod give_way;
pub mod durability;
pub mod evict;
pub mod glob;
pub mod latency;
pub mod lazyfree;
pub mod link;
pub mod listen;
pub mod loading;
pub mod memcache;
pub mod metrics;
pub mod migrate;
pub mod notify;
pub mod pause;
pub mod proc_title;
pub mod process;
pub mod pubsub;
pub mod rdb;
pub mod replica;
pub mod replication;
pub mod rewrite;
pub mod scripting;
pub mod server;
pub mod shutdown;
pub mod signals;
pub mod slowlog;
pub mod snapshot;
pub mod supervision;
pub mod syslog;
pub mod tls;
pub mod tracking;
pub mod watchdog;
pub mod worker;

use std::io;
use std::sync::Arc;

use crate::config::Config;
use crate::server::Server;
use crate::worker::{Listeners, Worker};

/// Binds every listener, starts the workers, and blocks until shutdown.
pub fn run(config: Config) -> io::Result<()> {
    // Before any thread starts: they all inherit the mask, and the CPUs.
    signals::block()?;
    process::apply_cpulists(&config);
    keel_journal::set_thread_start(|| process::pin_thread(process::CpuRole::Bio));
    if config.disable_thp {
        process::disable_thp();
    }
    process::apply_jemalloc_bg_thread(&config);
    // As Redis at start: a failure is only logged.
    let _ = process::apply_oom_score(&config);
    if !config.renamed_commands.is_empty() {
        command::Renamed::new(&config.renamed_commands).map_err(io::Error::other)?.install();
    }
    let mut config = config;
    config.maxclients = process::adjust_open_files_limit(config.maxclients).map_err(io::Error::other)?;
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        n => n,
    };
    // Before its port listens, as Redis's.
    let tls = match tls::wanted(&config) {
        true => Some(tls::configure(&config.tls).map_err(|why| {
            tracing::warn!("{why}");
            io::Error::other("Failed to configure TLS. Check logs for more info.")
        })?),
        false => None,
    };
    let tcp = listen::bind_on(&config, config.port, threads)?;
    let memcache = listen::bind_on(&config, config.memcached_port, threads)?;
    let on_tls = listen::bind_on(&config, config.tls.port, threads)?;
    let mut per_worker: Vec<Listeners> = tcp
        .into_iter()
        .zip(memcache)
        .zip(on_tls)
        .map(|((tcp, memcache), tls)| Listeners { tcp, memcache, tls, unix: None })
        .collect();
    if let Some(path) = &config.unixsocket {
        let _ = std::fs::remove_file(path);
        let listener = mio::net::UnixListener::bind(path)?;
        if config.unixsocketperm != 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(config.unixsocketperm))?;
        }
        per_worker[0].unix = Some(listener);
    }
    show_banner(&config);
    let (journal, replay) = match durability::open(&config).map_err(io::Error::other)? {
        Some((journal, replay)) => (Some(Arc::new(journal)), Some(replay)),
        None => (None, None),
    };
    let (cluster, bus) = match config.cluster.enabled {
        true => {
            let (cluster, bus) = cluster::Cluster::open(&config).map_err(io::Error::other)?;
            (Some(cluster), Some(bus))
        }
        false => (None, None),
    };
    let server = Arc::new(Server::new(config, threads, journal, cluster));
    *server.tls.write() = tls;
    let users = server.acl.start(&server.config.read());
    users.map_err(io::Error::other)?;
    // Clients are accepted from the start: while the data loads they wait,
    // then are answered -LOADING ([`loading`]).
    let rdb_path = snapshot::dump_path(&server);
    let rdb_load = replay.is_none() && rdb_path.is_file();
    if replay.is_some() || rdb_load {
        server.begin_load();
    }
    let mut workers = Vec::new();
    for (index, listeners) in per_worker.into_iter().enumerate() {
        workers.push(Worker::new(index, server.clone(), listeners)?);
    }
    let mailboxes: Vec<_> = workers.iter().map(Worker::mailbox).collect();
    *server.mailboxes.write() = mailboxes;
    if let Some(journal) = server.journal() {
        // Each durable advance wakes the workers holding replies for it.
        durability::attach(&server, journal);
    }
    let (port, tls_port) = {
        let config = server.config.read();
        (config.port, config.tls.port)
    };
    match tls_port {
        0 => tracing::info!("Keel listening on port {port} with {threads} threads"),
        _ => tracing::info!("Keel listening on port {port} and TLS port {tls_port} with {threads} threads"),
    }
    let io_threads = server.config.read().io_threads;
    if io_threads > 1 {
        tracing::info!("io-threads {io_threads}: each of Keel's {threads} workers does its own connections' I/O; io-threads changes nothing");
    }
    let handles: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(i, w)| std::thread::Builder::new().name(format!("keel-worker-{i}")).spawn(move || w.run()))
        .collect::<io::Result<_>>()?;
    let metrics = {
        let config = server.config.read();
        listen::bind_on(&config, config.metrics_port, 1)?.pop().unwrap_or_default()
    };
    metrics::spawn(server.clone(), metrics)?;
    let rewriter = rewrite::spawn(server.clone())?;
    let bgsaver = snapshot::spawn(server.clone())?;
    let replica_link = replica::spawn(server.clone())?;
    if let (Some(cluster), Some(bus)) = (&server.cluster, bus) {
        // What nodes.conf said of this node's master takes effect now.
        cluster.with(&server, |_| ());
        bus.spawn(server.clone())?;
    }
    signals::spawn(server.clone())?;
    // Stops everything after a failed load; `main` logs the error.
    let fail = |e: String, handles: Vec<std::thread::JoinHandle<()>>| -> io::Result<()> {
        server.shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
        server.broadcast(|| client::Message::CheckKills);
        for h in handles {
            let _ = h.join();
        }
        server.rewrite.stop();
        server.rdb.stop();
        server.replica.stop();
        Err(io::Error::other(e))
    };
    crate::alloc::note_startup();
    let started = std::time::Instant::now();
    let loaded = if let Some(replay) = replay {
        let loaded = durability::replay(&server, replay);
        Some(loaded.map(|count| format!("DB loaded from append only file: {count} keys and commands")))
    } else if rdb_load {
        // appendonly no: the RDB file is the dataset, as in Redis.
        let loaded = snapshot::load(&server, &rdb_path).map_err(|e| {
            // Why, then Redis's last words on a file it could not read,
            // which scripts match.
            tracing::warn!("{e}");
            "Terminating server after rdb file reading failure.".to_string()
        });
        Some(loaded.map(|(keys, expired, history)| {
            if let Some(history) = history {
                replica::restore_history(&server, history);
            }
            format!("DB loaded from disk: {keys} keys ({expired} expired skipped)")
        }))
    } else {
        None
    };
    let ready = match loaded {
        None => true,
        Some(loaded) => {
            // Logged before anyone is served, as Redis does.
            if let Ok(line) = &loaded {
                tracing::info!("{line} in {:?}", started.elapsed());
            }
            server.end_load();
            match loaded {
                Ok(_) => true,
                // A SIGTERM while loading: the stop goes on, nothing saved.
                Err(_) if server.shutdown.load(std::sync::atomic::Ordering::Relaxed) => false,
                Err(e) => {
                    let r = fail(e, handles);
                    let _ = rewriter.join();
                    let _ = bgsaver.join();
                    let _ = replica_link.join();
                    return r;
                }
            }
        }
    };
    if ready {
        // Redis's words, once the data is in: tools and test harnesses
        // wait for this line.
        tracing::info!("Ready to accept connections");
        supervision::notify_systemd(if server.replica.is_replica() {
            "STATUS=Ready to accept connections in read-only mode. Waiting for MASTER <-> REPLICA sync\n"
        } else {
            "STATUS=Ready to accept connections\n"
        });
        supervision::notify_systemd("READY=1\n");
    }
    for h in handles {
        let _ = h.join();
    }
    // A rewrite under way is aborted: its temporary base is deleted and the
    // files it would have replaced stay.
    server.rewrite.stop();
    let _ = rewriter.join();
    server.rdb.stop();
    let _ = bgsaver.join();
    // Before the journal closes: the link may be applying a command.
    server.replica.stop();
    let _ = replica_link.join();
    server.aof.close();
    if let Some(path) = &server.config.read().unixsocket {
        let _ = std::fs::remove_file(path);
    }
    // Redis's last words, which scripts wait for.
    tracing::warn!("Keel is now ready to exit, bye bye...");
    Ok(())
}

/// The start-up banner, once the listeners are bound and before the data
/// is opened, where Redis shows its logo: always with `always-show-logo
/// yes`, else only when logging to a terminal. Scripts (Redis's own test
/// harness among them) find the server's process by its `PID:` line.
fn show_banner(config: &Config) {
    use std::io::{IsTerminal, Write};
    let to_terminal = config.logfile.is_empty() && io::stdout().is_terminal();
    if !(config.always_show_logo || to_terminal) {
        return;
    }
    let banner = format!(
        "Keel {} (Redis 7.0 compatible)\n    Running in standalone mode\n    Port: {}\n    PID: {}\n",
        env!("CARGO_PKG_VERSION"),
        config.port,
        std::process::id()
    );
    let written = match config.logfile.as_str() {
        "" => io::stdout().write_all(banner.as_bytes()),
        path => std::fs::OpenOptions::new().append(true).open(path).and_then(|mut f| f.write_all(banner.as_bytes())),
    };
    // As any log line: one that cannot be written is dropped.
    let _ = written;
}
