//! Server commands: INFO, CONFIG, SLOWLOG, COMMAND, DBSIZE, TIME,
//! LASTSAVE, SHUTDOWN, MONITOR, DEBUG.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::parse::eq;
use super::digest;
use super::keyspec::{self, Begin, Find, KeySpec};
use super::{acl, cmd, flags, flags::*, table, CmdError, Names, CmdResult, CommandSpec, Ctx, Keys};
use crate::server::{unix_ms, unix_us, Metric, REDIS_VERSION};

pub static COMMANDS: &[CommandSpec] = &[
    cmd("dbsize", 1, READONLY | FAST | ALL_SHARDS, Keys::None, "server", dbsize)
        .doc("Return the number of keys in the selected database", "1.0.0")
        .tips(&["request_policy:all_shards", "response_policy:agg_sum"])
        .acl(acl::KEYSPACE),
    cmd("info", -1, LOADING | STALE | ALL_SHARDS, Keys::None, "server", info)
        .doc("Get information and statistics about the server", "1.0.0")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"])
        .acl(acl::DANGEROUS)
        .reads_data_when(info_reads_keyspace),
    cmd("config", -2, 0, Keys::None, "server", container)
        .doc("A container for server configuration commands", "2.0.0")
        .subs(CONFIG_SUBCOMMANDS),
    cmd("slowlog", -2, 0, Keys::None, "server", container)
        .doc("A container for slow log commands", "2.2.12")
        .subs(SLOWLOG_SUBCOMMANDS),
    cmd("command", -1, LOADING | STALE, Keys::None, "server", command_all)
        .doc("Get array of Redis command details", "2.8.13")
        .tips(&["nondeterministic_output_order"])
        .subs(COMMAND_SUBCOMMANDS)
        .acl(acl::CONNECTION),
    cmd("time", 1, LOADING | STALE | FAST, Keys::None, "server", time)
        .doc("Return the current server time", "2.6.0")
        .tips(&["nondeterministic_output"]),
    cmd("lastsave", 1, LOADING | STALE | FAST, Keys::None, "server", lastsave)
        .doc("Get the UNIX time stamp of the last successful save to disk", "1.0.0")
        .tips(&["nondeterministic_output"])
        .acl(acl::ADMIN | acl::DANGEROUS),
    cmd("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | ALLOW_BUSY, Keys::None, "server", shutdown)
        .doc("Synchronously save the dataset to disk and then shut down the server", "1.0.0"),
    cmd("monitor", 1, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", monitor)
        .doc("Listen for all requests received by the server in real time", "1.0.0"),
    cmd("save", 1, NO_ASYNC_LOADING | ADMIN | NOSCRIPT | NO_MULTI, Keys::None, "server", save)
        .doc("Synchronously save the dataset to disk", "1.0.0"),
    cmd("bgsave", -1, NO_ASYNC_LOADING | ADMIN | NOSCRIPT, Keys::None, "server", bgsave)
        .doc("Asynchronously save the dataset to disk", "1.0.0"),
    cmd("bgrewriteaof", 1, NO_ASYNC_LOADING | ADMIN | NOSCRIPT, Keys::None, "server", bgrewriteaof)
        .doc("Asynchronously rewrite the append-only file", "1.0.0"),
    cmd("replicaof", 3, NO_ASYNC_LOADING | ADMIN | NOSCRIPT | STALE, Keys::None, "server", crate::replica::replicaof)
        .doc("Make the server a replica of another instance, or promote it as master.", "5.0.0"),
    cmd("slaveof", 3, NO_ASYNC_LOADING | ADMIN | NOSCRIPT | STALE, Keys::None, "server", crate::replica::replicaof)
        .doc("Make the server a replica of another instance, or promote it as master.", "1.0.0"),
    // Every shard is locked while DEBUG runs: DEBUG SLEEP freezes the
    // keyspace as Redis's single thread does, and DEBUG OBJECT can look
    // anywhere.
    cmd("debug", -2, ADMIN | NOSCRIPT | LOADING | STALE | ALL_SHARDS, Keys::None, "server", debug)
        .doc("A container for debugging commands", "1.0.0")
        .reads_data_when(debug_reads_data),
    cmd("module", -2, 0, Keys::None, "server", container)
        .doc("A container for module commands", "4.0.0")
        .subs(MODULE_SUBCOMMANDS),
];

/// MODULE: Keel loads no Redis modules (they are C libraries written
/// against Redis's own structures), so the list is empty and a load fails
/// as a module that does not load fails in Redis.
const MODULE_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("module|help", 2, LOADING | STALE, Keys::None, "server", module_help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
    cmd("module|list", 2, ADMIN | NOSCRIPT, Keys::None, "server", module_list)
        .doc("List all modules loaded by the server", "4.0.0")
        .tips(&["nondeterministic_output_order"]),
    cmd("module|load", -3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, Keys::None, "server", module_load)
        .doc("Load a module", "4.0.0"),
    cmd("module|loadex", -3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, Keys::None, "server", module_load)
        .doc("Load a module with extended parameters", "7.0.0"),
    cmd("module|unload", 3, ADMIN | NOSCRIPT | NO_ASYNC_LOADING, Keys::None, "server", module_unload)
        .doc("Unload a module", "4.0.0"),
];

const CONFIG_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("config|get", -3, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", config_get)
        .doc("Get the values of configuration parameters", "2.0.0"),
    cmd("config|set", -4, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", config_set)
        .doc("Set configuration parameters to the given values", "2.0.0")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    // Locks every shard to zero the per-database expiry counters.
    cmd("config|resetstat", 2, ADMIN | NOSCRIPT | LOADING | STALE | ALL_SHARDS, Keys::None, "server", config_resetstat)
        .doc("Reset the stats returned by INFO", "2.0.0")
        .reads_data_when(|_| false),
    cmd("config|rewrite", 2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", config_rewrite)
        .doc("Rewrite the configuration file with the in memory configuration", "2.8.0"),
    cmd("config|help", 2, LOADING | STALE, Keys::None, "server", config_help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
];

const SLOWLOG_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("slowlog|get", -2, ADMIN | LOADING | STALE, Keys::None, "server", slowlog_get)
        .doc("Get the slow log's entries", "2.2.12")
        .tips(&["request_policy:all_nodes", "nondeterministic_output"]),
    cmd("slowlog|len", 2, ADMIN | LOADING | STALE, Keys::None, "server", slowlog_len)
        .doc("Get the slow log's length", "2.2.12")
        .tips(&["request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"]),
    cmd("slowlog|reset", 2, ADMIN | LOADING | STALE, Keys::None, "server", slowlog_reset)
        .doc("Clear all entries from the slow log", "2.2.12")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    cmd("slowlog|help", 2, LOADING | STALE, Keys::None, "server", slowlog_help)
        .doc("Show helpful text about the different subcommands", "6.2.0"),
];

const COMMAND_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("command|count", 2, LOADING | STALE, Keys::None, "server", command_count)
        .doc("Get total number of Redis commands", "2.8.13")
        .acl(acl::CONNECTION),
    cmd("command|docs", -2, LOADING | STALE, Keys::None, "server", command_docs)
        .doc("Get array of specific Redis command documentation", "7.0.0")
        .tips(&["nondeterministic_output_order"])
        .acl(acl::CONNECTION),
    cmd("command|getkeys", -4, LOADING | STALE, Keys::None, "server", command_getkeys)
        .doc("Extract keys given a full Redis command", "2.8.13")
        .acl(acl::CONNECTION),
    cmd("command|getkeysandflags", -4, LOADING | STALE, Keys::None, "server", command_getkeysandflags)
        .doc("Extract keys and access flags given a full Redis command", "7.0.0")
        .acl(acl::CONNECTION),
    cmd("command|help", 2, LOADING | STALE, Keys::None, "server", command_help)
        .doc("Show helpful text about the different subcommands", "5.0.0")
        .acl(acl::CONNECTION),
    cmd("command|info", -2, LOADING | STALE, Keys::None, "server", command_info)
        .doc("Get array of specific Redis command details, or all when no argument is given.", "2.8.13")
        .tips(&["nondeterministic_output_order"])
        .acl(acl::CONNECTION),
    cmd("command|list", -2, LOADING | STALE, Keys::None, "server", command_list)
        .doc("Get an array of Redis command names", "7.0.0")
        .tips(&["nondeterministic_output_order"])
        .acl(acl::CONNECTION),
];

/// Client names may not contain spaces, newlines or special characters.
pub fn validate_client_name(name: &[u8]) -> CmdResult {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(CmdError::other("ERR Client names cannot contain spaces, newlines or special characters."));
    }
    Ok(())
}


/// The handler of a container command. The dispatcher always picks a
/// subcommand (or answers an error) first, so this never runs.
pub fn container(_ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    Err(CmdError::Arity(String::from_utf8_lossy(argv[0]).to_ascii_lowercase()))
}

/// Redis's `addReplyHelp`: a header naming the command, the lines, and
/// the HELP entry every container has.
pub fn reply_help(ctx: &mut Ctx<'_>, command: &[u8], lines: &[&str]) {
    let name = String::from_utf8_lossy(command).to_ascii_uppercase();
    ctx.out.array(lines.len() + 3);
    ctx.out.simple(&format!("{name} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"));
    for line in lines {
        ctx.out.simple(line);
    }
    ctx.out.simple("HELP");
    ctx.out.simple("    Prints this help.");
}

fn dbsize(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.selected;
    let n: usize = ctx.dbs.shards().map(|s| s.db(db).len()).sum();
    ctx.out.int(n as i64);
    Ok(())
}

fn time(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let us = unix_us();
    ctx.out.array(2);
    ctx.out.bulk_int((us / 1_000_000) as i64);
    ctx.out.bulk_int((us % 1_000_000) as i64);
    Ok(())
}

fn lastsave(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.int(ctx.server.lastsave_s.load(Ordering::Relaxed) as i64);
    Ok(())
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT], as Redis 7.0
/// (`crate::shutdown`): unless NOW, a wait for lagging replicas; a final
/// synchronous save when save rules exist (or SAVE), none with NOSAVE; a
/// failed save refuses the shutdown unless FORCE. ABORT ends a wait for
/// replicas, or a signal's wait for DEBUG PAUSE-CRON (`crate::signals`).
fn shutdown(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    use crate::snapshot::FinalSave;
    let mut flags = crate::shutdown::Flags::default();
    let (mut abort, mut any) = (false, false);
    let (mut nosave, mut save) = (false, false);
    for arg in &argv[1..] {
        if eq(arg, "nosave") {
            nosave = true;
            flags.save = FinalSave::NoSave;
        } else if eq(arg, "save") {
            save = true;
            flags.save = FinalSave::Save;
        } else if eq(arg, "now") {
            flags.now = true;
        } else if eq(arg, "force") {
            flags.force = true;
        } else if eq(arg, "abort") {
            abort = true;
            continue;
        } else {
            return Err(CmdError::Syntax);
        }
        any = true;
    }
    if (abort && any) || (nosave && save) {
        return Err(CmdError::Syntax);
    }
    if abort {
        // A shutdown waiting for replicas, or a signal's waiting for the cron.
        let aborted = crate::shutdown::abort(ctx.server) | ctx.server.shutdown_asap.swap(false, Ordering::AcqRel);
        if !aborted {
            return Err(CmdError::other("ERR No shutdown in progress."));
        }
        tracing::info!("Shutdown manually aborted.");
        ctx.out.ok();
        return Ok(());
    }
    if !flags.now && !ctx.can_block() {
        return Err(CmdError::other("ERR SHUTDOWN without NOW or ABORT isn't allowed for DENY BLOCKING client"));
    }
    // Beside a busy script only NOSAVE may stop the server, as in Redis:
    // a save would wait for the shards the script holds.
    let run = &ctx.server.scripts.run;
    if run.busy() && flags.save != FinalSave::NoSave {
        return Err(CmdError::other(run.busy_error()));
    }
    // Blocked until the server stops, or answered if it cannot.
    let waiter = crate::blocking::block_for_shutdown(ctx, argv);
    crate::shutdown::begin(ctx.server, flags, Some(waiter));
    Ok(())
}

/// SAVE: a synchronous snapshot to `<dir>/<dbfilename>` (`crate::snapshot`).
fn save(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    crate::snapshot::save(ctx.server).map_err(CmdError::other)?;
    ctx.out.ok();
    Ok(())
}

/// BGSAVE [SCHEDULE]: hands the snapshot to the BGSAVE thread.
fn bgsave(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let schedule = match argv.len() {
        1 => false,
        2 if eq(argv[1], "schedule") => true,
        _ => return Err(CmdError::Syntax),
    };
    use crate::snapshot::BgsaveReply;
    match crate::snapshot::bgsave(ctx.server, schedule, ctx.durability.in_transaction) {
        BgsaveReply::Started => ctx.out.simple("Background saving started"),
        BgsaveReply::Scheduled => ctx.out.simple("Background saving scheduled"),
        BgsaveReply::AlreadyInProgress => return Err(CmdError::other("ERR Background save already in progress")),
        BgsaveReply::OtherChild => {
            return Err(CmdError::other(
                "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.",
            ))
        }
    }
    Ok(())
}

/// BGREWRITEAOF: hands the rewrite to its thread (`crate::rewrite`).
fn bgrewriteaof(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let status = crate::rewrite::bgrewriteaof(ctx)?;
    ctx.out.simple(status);
    Ok(())
}

fn monitor(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    if ctx.client.info.monitor.load(Ordering::Relaxed) {
        return Ok(());
    }
    let Some((_, worker)) = ctx.server.clients.get(ctx.client.id) else {
        return Ok(());
    };
    ctx.client.info.monitor.store(true, Ordering::Relaxed);
    ctx.server.clients.add_monitor(ctx.client.id, worker);
    ctx.out.ok();
    Ok(())
}

// ---------------------------------------------------------------- INFO

/// INFO's sections in output order; `true` for those "default" includes.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("modules", true),
    ("commandstats", false),
    ("errorstats", true),
    ("latencystats", false),
    ("cluster", true),
    ("keyspace", true),
];

/// Which sections an INFO request names, following Redis's rules: none
/// means "default"; "all" is every section but modules' own; "everything"
/// is all of them; names are case-insensitive; unknown names add nothing.
fn selected_sections(args: &[&[u8]]) -> Vec<&'static str> {
    let mut all = false;
    let mut named: Vec<&'static str> = Vec::new();
    let mut add_default = args.is_empty();
    for arg in args {
        let arg = String::from_utf8_lossy(arg).to_ascii_lowercase();
        match arg.as_str() {
            "default" => add_default = true,
            "all" | "everything" => all = true,
            // Redis names the modules section "module_list" in its default set.
            "module_list" => named.push("modules"),
            name => named.extend(SECTIONS.iter().filter(|(s, _)| *s == name).map(|(s, _)| *s)),
        }
    }
    SECTIONS
        .iter()
        .filter(|(name, default)| all || (add_default && *default) || named.contains(name))
        .map(|(name, _)| *name)
        .collect()
}

/// Whether INFO with these arguments reads the data (its keyspace
/// section counts keys): only then does its reply wait for the writes it
/// counts to be durable, so that a failing disk leaves the rest of INFO,
/// `aof_last_write_status` among it, answering.
fn info_reads_keyspace(argv: &[&[u8]]) -> bool {
    selected_sections(&argv[1..]).contains(&"keyspace")
}

fn info(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let sections = selected_sections(&argv[1..]);
    let mut text = String::new();
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            text.push_str("\r\n");
        }
        write_section(ctx, section, &mut text);
    }
    ctx.out.verbatim("txt", text.as_bytes());
    Ok(())
}

/// `key:value\r\n`.
macro_rules! field {
    ($out:expr, $name:expr, $value:expr) => {
        let _ = write!($out, "{}:{}\r\n", $name, $value);
    };
}

fn write_section(ctx: &mut Ctx<'_>, section: &str, out: &mut String) {
    let server = ctx.server;
    let now_ms = unix_ms();
    match section {
        "server" => {
            let config = server.config.read();
            let uptime = server.started.elapsed().as_secs();
            out.push_str("# Server\r\n");
            field!(out, "redis_version", REDIS_VERSION);
            field!(out, "redis_git_sha1", "00000000");
            field!(out, "redis_git_dirty", 0);
            field!(out, "redis_build_id", "0");
            field!(out, "redis_mode", if server.cluster.is_some() { "cluster" } else { "standalone" });
            field!(out, "os", uname());
            field!(out, "arch_bits", usize::BITS);
            field!(out, "monotonic_clock", "POSIX clock_gettime");
            field!(out, "multiplexing_api", "epoll");
            field!(out, "atomicvar_api", "c11-builtin");
            field!(out, "gcc_version", "0.0.0");
            field!(out, "process_id", std::process::id());
            field!(out, "process_supervised", crate::supervision::supervisor().map_or("no", |s| s.name()));
            field!(out, "run_id", server.run_id);
            field!(out, "tcp_port", config.port);
            field!(out, "server_time_usec", unix_us());
            field!(out, "uptime_in_seconds", uptime);
            field!(out, "uptime_in_days", uptime / 86_400);
            field!(out, "hz", config.effective_hz(server.clients.connected.load(Ordering::Relaxed)));
            field!(out, "configured_hz", config.hz);
            field!(out, "lru_clock", server.lru_s());
            let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
            field!(out, "executable", exe);
            let file = config.config_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            field!(out, "config_file", file);
            field!(out, "io_threads_active", 0);
            if let Some(ms) = server.shutting_down.remaining_ms(now_ms) {
                field!(out, "shutdown_in_milliseconds", ms);
            }
            field!(out, "keel_version", env!("CARGO_PKG_VERSION"));
            field!(out, "keel_threads", server.thread_count);
        }
        "clients" => {
            let clients = server.clients.list();
            let max_in = clients.iter().map(|(c, _)| c.qbuf.load(Ordering::Relaxed)).max().unwrap_or(0);
            let max_out = clients.iter().map(|(c, _)| c.obl.load(Ordering::Relaxed)).max().unwrap_or(0);
            let blocked = clients.iter().filter(|(c, _)| c.blocked.load(Ordering::Relaxed)).count();
            out.push_str("# Clients\r\n");
            // The master's client counts, as Redis's; replicas do not.
            let master_client = usize::from(server.replica.master_client().is_some());
            field!(out, "connected_clients", clients.len() + master_client);
            field!(out, "cluster_connections", server.cluster.as_ref().map_or(0, |c| c.links()));
            field!(out, "maxclients", server.config.read().maxclients);
            field!(out, "client_recent_max_input_buffer", max_in);
            field!(out, "client_recent_max_output_buffer", max_out);
            field!(out, "blocked_clients", blocked);
            field!(out, "tracking_clients", server.tracking.clients());
            // Redis 7.4's field, for watches left behind to be seen.
            let watched: usize = ctx.dbs.shards().map(|shard| shard.dbs().iter().map(keel_engine::Db::watched_keys).sum::<usize>()).sum();
            field!(out, "total_watched_keys", watched);
            field!(out, "clients_in_timeout_table", 0);
            let mut per_thread = vec![0usize; server.thread_count];
            for (_, worker) in &clients {
                if let Some(n) = per_thread.get_mut(*worker) {
                    *n += 1;
                }
            }
            let per_thread: Vec<String> = per_thread.iter().map(usize::to_string).collect();
            field!(out, "keel_clients_per_thread", per_thread.join(","));
        }
        "memory" => write_memory(ctx, out),
        "persistence" => {
            out.push_str("# Persistence\r\n");
            for (name, value) in [
                ("loading", if server.loading.load(Ordering::Relaxed) { "1" } else { "0" }),
                ("async_loading", if server.async_loading.load(Ordering::Relaxed) { "1" } else { "0" }),
            ] {
                field!(out, name, value);
            }
            // How far the running snapshot has come and what it keeps, as
            // Redis's child reports them (`SnapshotProgress`). INFO holds
            // every shard: the size is exact, never stale.
            let progress = &server.snapshot_progress;
            let kept: u64 = ctx.dbs.shards().map(|sh| sh.snapshot_saved_bytes() as u64).sum();
            let peak = if server.snapshot_active.load(Ordering::Acquire) { progress.note_kept(kept) } else { 0 };
            field!(out, "current_cow_peak", peak);
            field!(out, "current_cow_size", kept);
            field!(out, "current_cow_size_age", 0);
            let total = progress.keys_total.load(Ordering::Relaxed);
            let processed = progress.keys_processed.load(Ordering::Relaxed).min(total);
            let perc = if total == 0 { 0.0 } else { processed as f64 * 100.0 / total as f64 };
            field!(out, "current_fork_perc", format!("{perc:.2}"));
            field!(out, "current_save_keys_processed", processed);
            field!(out, "current_save_keys_total", total);
            let rdb = server.rdb.info();
            field!(out, "rdb_changes_since_last_save", server.dirty.load(Ordering::Relaxed));
            field!(out, "rdb_bgsave_in_progress", u8::from(rdb.in_progress));
            field!(out, "rdb_last_save_time", server.lastsave_s.load(Ordering::Relaxed));
            field!(out, "rdb_last_bgsave_status", if rdb.last_ok { "ok" } else { "err" });
            field!(out, "rdb_last_bgsave_time_sec", rdb.last_s);
            field!(out, "rdb_current_bgsave_time_sec", rdb.current_s);
            field!(out, "rdb_saves", rdb.saves);
            field!(out, "rdb_last_cow_size", progress.last_bgsave_kept.load(Ordering::Relaxed));
            field!(out, "rdb_last_load_keys_expired", server.rdb.last_load_keys_expired.load(Ordering::Relaxed));
            field!(out, "rdb_last_load_keys_loaded", server.rdb.last_load_keys_loaded.load(Ordering::Relaxed));
            // Redis's aof_state != AOF_OFF: 1 from CONFIG SET appendonly yes on.
            let aof_enabled = server.aof.state() != crate::durability::AofState::Off;
            field!(out, "aof_enabled", u8::from(aof_enabled));
            let rw = server.rewrite.info();
            field!(out, "aof_rewrite_in_progress", u8::from(rw.in_progress));
            field!(out, "aof_rewrite_scheduled", u8::from(rw.scheduled));
            field!(out, "aof_last_rewrite_time_sec", rw.last_s);
            field!(out, "aof_current_rewrite_time_sec", rw.current_s);
            field!(out, "aof_last_bgrewrite_status", if rw.last_ok { "ok" } else { "err" });
            field!(out, "aof_rewrites", rw.rewrites);
            field!(out, "aof_rewrites_consecutive_failures", rw.consecutive_failures);
            let journal = server.aof.enabled();
            let stats = journal.map(|j| j.stats());
            let write_ok = stats.as_ref().is_none_or(|s| s.aof_last_write_status_ok);
            field!(out, "aof_last_write_status", if write_ok { "ok" } else { "err" });
            field!(out, "aof_last_cow_size", progress.last_rewrite_kept.load(Ordering::Relaxed));
            for (name, value) in [
                ("module_fork_in_progress", "0"),
                ("module_fork_last_cow_size", "0"),
            ] {
                field!(out, name, value);
            }
            if let Some((journal, s)) = journal.zip(stats) {
                field!(out, "aof_current_size", s.aof_current_size);
                field!(out, "aof_base_size", s.aof_base_size);
                field!(out, "aof_pending_rewrite", 0);
                field!(out, "aof_buffer_length", s.pending_bytes);
                field!(out, "aof_pending_bio_fsync", 0);
                field!(out, "aof_delayed_fsync", s.aof_delayed_fsync);
                // Keel's own: the journal's positions and group commit.
                field!(out, "keel_aof_appended_lsn", s.appended_lsn);
                field!(out, "keel_aof_durable_lsn", s.durable_lsn);
                field!(out, "keel_aof_fsyncs", s.fsync_count);
                field!(out, "keel_aof_fsync_p50_us", s.fsync_latency_p50_us);
                field!(out, "keel_aof_fsync_p99_us", s.fsync_latency_p99_us);
                field!(out, "keel_aof_fsync_max_us", s.fsync_latency_max_us);
                field!(out, "keel_aof_batches", s.batch_count);
                field!(out, "keel_aof_batch_records_avg", format!("{:.2}", s.batch_records_avg));
                field!(out, "keel_aof_batch_records_max", s.batch_records_max);
                field!(out, "keel_aof_batch_bytes_avg", format!("{:.0}", s.batch_bytes_avg));
                field!(out, "keel_aof_write_errors", s.write_errors);
                field!(out, "keel_aof_fsync_errors", s.fsync_errors);
                if let Some(e) = &s.last_error {
                    field!(out, "keel_aof_last_error", e);
                }
                // What the automatic rewrites go by (`rewrite.rs`).
                let (rates, measured, rdb_measured) = server.rewrite.replay_rates(&server.config.read());
                field!(out, "keel_aof_base_file_size", s.base_file_size);
                field!(out, "keel_aof_replay_rate", rates.commands);
                field!(out, "keel_aof_replay_rate_measured", u8::from(measured));
                field!(out, "keel_aof_rdb_load_rate", rates.rdb);
                field!(out, "keel_aof_rdb_load_rate_measured", u8::from(rdb_measured));
                let estimate_s = rates.estimate_s(&journal.sizes());
                field!(out, "keel_aof_recovery_estimate_sec", format!("{estimate_s:.2}"));
                let (trigger, at) = rw.last_auto.map_or(("none", 0), |(t, at)| (t.name(), at));
                field!(out, "keel_aof_last_auto_rewrite", trigger);
                field!(out, "keel_aof_last_auto_rewrite_size", at);
                // 1 while the running rewrite's scan runs behind the workers.
                field!(out, "keel_aof_rewrite_behind_workers", u8::from(rw.behind_workers));
            }
            // 1 while the running BGSAVE's scan runs behind the workers.
            field!(out, "keel_rdb_bgsave_behind_workers", u8::from(rdb.behind_workers));
            // Memory the running snapshot holds besides the dataset: old
            // versions of keys written since it began (`current_cow_size`).
            field!(out, "keel_snapshot_saved_bytes", kept);
            if server.loading.load(Ordering::Relaxed) || server.async_loading.load(Ordering::Relaxed) {
                // Redis's loading progress fields, shown while loading.
                let p = &server.load_progress;
                let (total, loaded) = (p.total_bytes.load(Ordering::Relaxed), p.loaded_bytes.load(Ordering::Relaxed));
                let started = p.started_s.load(Ordering::Relaxed);
                let elapsed = (crate::server::unix_ms() / 1000).saturating_sub(started).max(1);
                let perc = if total == 0 { 0.0 } else { loaded as f64 * 100.0 / total as f64 };
                let eta = if loaded == 0 { 1 } else { (total.saturating_sub(loaded)) / (loaded / elapsed).max(1) };
                field!(out, "loading_start_time", started);
                field!(out, "loading_total_bytes", total);
                field!(out, "loading_rdb_used_mem", 0);
                field!(out, "loading_loaded_bytes", loaded);
                field!(out, "loading_loaded_perc", format!("{perc:.2}"));
                field!(out, "loading_eta_seconds", eta);
            }
        }
        "stats" => {
            let meter = server.meter.lock();
            let errors: u64 = server.errorstats.lock().values().sum();
            let expired: u64 = ctx.dbs.shards().flat_map(|s| s.dbs().iter()).map(|d| d.expired_keys).sum();
            out.push_str("# Stats\r\n");
            field!(out, "total_connections_received", server.total(|w| &w.connections_received));
            field!(out, "total_commands_processed", server.total(|w| &w.total_commands));
            field!(out, "instantaneous_ops_per_sec", meter.rate(Metric::Commands));
            field!(out, "total_net_input_bytes", server.total(|w| &w.net_input_bytes));
            field!(out, "total_net_output_bytes", server.total(|w| &w.net_output_bytes));
            field!(out, "total_net_repl_input_bytes", 0);
            field!(out, "total_net_repl_output_bytes", 0);
            field!(out, "instantaneous_input_kbps", format!("{:.2}", meter.rate(Metric::NetInput) as f64 / 1024.0));
            field!(out, "instantaneous_output_kbps", format!("{:.2}", meter.rate(Metric::NetOutput) as f64 / 1024.0));
            field!(out, "instantaneous_input_repl_kbps", "0.00");
            field!(out, "instantaneous_output_repl_kbps", "0.00");
            field!(out, "rejected_connections", server.total(|w| &w.rejected_connections));
            field!(out, "sync_full", server.repl.sync_full.load(Ordering::Relaxed));
            field!(out, "sync_partial_ok", server.repl.sync_partial_ok.load(Ordering::Relaxed));
            field!(out, "sync_partial_err", server.repl.sync_partial_err.load(Ordering::Relaxed));
            field!(out, "expired_keys", expired);
            field!(out, "expired_stale_perc", "0.00");
            field!(out, "expired_time_cap_reached_count", 0);
            field!(out, "expire_cycle_cpu_milliseconds", 0);
            let (exceeded_total_ms, exceeded_now_ms) = server.evictor.exceeded_ms(crate::server::unix_ms());
            field!(out, "evicted_keys", server.evictor.evicted_keys.load(Ordering::Relaxed));
            field!(out, "evicted_clients", server.clients.memory.evicted.load(Ordering::Relaxed));
            field!(out, "total_eviction_exceeded_time", exceeded_total_ms);
            field!(out, "current_eviction_exceeded_time", exceeded_now_ms);
            field!(out, "keyspace_hits", server.total(|w| &w.keyspace_hits));
            field!(out, "keyspace_misses", server.total(|w| &w.keyspace_misses));
            field!(out, "pubsub_channels", server.pubsub.len(crate::pubsub::Kind::Channel));
            field!(out, "pubsub_patterns", server.pubsub.len(crate::pubsub::Kind::Pattern));
            field!(out, "pubsubshard_channels", server.pubsub.len(crate::pubsub::Kind::Shard));
            field!(out, "latest_fork_usec", 0);
            field!(out, "total_forks", 0);
            field!(out, "migrate_cached_sockets", server.migrate.len());
            field!(out, "slave_expires_tracked_keys", server.replica.own_volatile_keys());
            for name in [
                "active_defrag_hits",
                "active_defrag_misses",
                "active_defrag_key_hits",
                "active_defrag_key_misses",
                "total_active_defrag_time",
                "current_active_defrag_time",
            ] {
                field!(out, name, 0);
            }
            field!(out, "tracking_total_keys", server.tracking.total_keys());
            field!(out, "tracking_total_items", server.tracking.total_items());
            field!(out, "tracking_total_prefixes", server.tracking.total_prefixes());
            field!(out, "unexpected_error_replies", server.unexpected_error_replies.load(Ordering::Relaxed));
            field!(out, "total_error_replies", errors);
            field!(out, "dump_payload_sanitizations", 0);
            field!(out, "total_reads_processed", server.total(|w| &w.reads_processed));
            field!(out, "total_writes_processed", server.total(|w| &w.writes_processed));
            field!(out, "io_threaded_reads_processed", 0);
            field!(out, "io_threaded_writes_processed", 0);
            field!(out, "reply_buffer_shrinks", 0);
            field!(out, "reply_buffer_expands", 0);
        }
        "replication" => {
            out.push_str("# Replication\r\n");
            let repl = &server.repl;
            let replicas = repl.replicas();
            let following = crate::replica::status(server);
            if following.is_some() {
                field!(out, "role", "slave");
                crate::replica::info(server, out);
            } else {
                field!(out, "role", "master");
            }
            field!(out, "connected_slaves", replicas.len());
            let (min_to_write, min_max_lag, backlog_size) = {
                let c = server.config.read();
                (c.min_replicas_to_write, c.min_replicas_max_lag, c.repl_backlog_size)
            };
            if min_to_write > 0 && min_max_lag > 0 {
                field!(out, "min_slaves_good_slaves", repl.good_replicas.load(Ordering::Relaxed));
            }
            let now_s = now_ms / 1000;
            for (i, r) in replicas.iter().enumerate() {
                let line = format!(
                    "ip={},port={},state={},offset={},lag={}",
                    r.ip,
                    r.port,
                    r.state().name(),
                    r.ack(),
                    now_s.saturating_sub(r.ack_ms() / 1000)
                );
                field!(out, format!("slave{i}"), line);
            }
            // A replica's are its master's: it proxies its master's stream.
            let (replid, replid2, second_offset) = repl.ids();
            let offset = repl.end();
            let (active, size, first_byte, held) = repl.backlog_info(backlog_size);
            field!(out, "master_failover_state", repl.failover.state().name());
            field!(out, "master_replid", replid);
            field!(out, "master_replid2", replid2);
            field!(out, "master_repl_offset", offset);
            field!(out, "second_repl_offset", second_offset);
            field!(out, "repl_backlog_active", u8::from(active));
            field!(out, "repl_backlog_size", size);
            field!(out, "repl_backlog_first_byte_offset", first_byte);
            field!(out, "repl_backlog_histlen", held);
        }
        "cpu" => {
            out.push_str("# CPU\r\n");
            let (sys, user) = rusage(libc::RUSAGE_SELF);
            field!(out, "used_cpu_sys", sys);
            field!(out, "used_cpu_user", user);
            let (sys, user) = rusage(libc::RUSAGE_CHILDREN);
            field!(out, "used_cpu_sys_children", sys);
            field!(out, "used_cpu_user_children", user);
            let (sys, user) = rusage(libc::RUSAGE_THREAD);
            field!(out, "used_cpu_sys_main_thread", sys);
            field!(out, "used_cpu_user_main_thread", user);
        }
        "modules" => out.push_str("# Modules\r\n"),
        "commandstats" => {
            out.push_str("# Commandstats\r\n");
            for (index, spec) in table().all.iter().enumerate() {
                let sum = |f: fn(&crate::server::CommandStats) -> &std::sync::atomic::AtomicU64| -> u64 {
                    server.workers.iter().map(|w| f(&w.commands[index]).load(Ordering::Relaxed)).sum()
                };
                let calls = sum(|c| &c.calls);
                let rejected = sum(|c| &c.rejected_calls);
                let failed = sum(|c| &c.failed_calls);
                if calls == 0 && rejected == 0 && failed == 0 {
                    continue;
                }
                let usec = sum(|c| &c.usec);
                let per_call = if calls == 0 { 0.0 } else { usec as f64 / calls as f64 };
                let _ = write!(
                    out,
                    "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per_call:.2},rejected_calls={rejected},failed_calls={failed}\r\n",
                    safe_info_string(spec.name)
                );
            }
        }
        "errorstats" => {
            out.push_str("# Errorstats\r\n");
            for (prefix, count) in server.errorstats.lock().iter() {
                let _ = write!(out, "errorstat_{}:count={count}\r\n", safe_info_string(prefix));
            }
        }
        "latencystats" => {
            out.push_str("# Latencystats\r\n");
            let percentiles = server.config.read().latency_tracking_info_percentiles.clone();
            for (spec, merged) in table().all.iter().zip(server.command_latencies()) {
                let Some(merged) = merged else { continue };
                let _ = write!(out, "latency_percentiles_usec_{}:", safe_info_string(spec.name));
                for (i, p) in percentiles.iter().enumerate() {
                    let sep = if i + 1 < percentiles.len() { "," } else { "" };
                    let us = merged.value_at_quantile(p / 100.0) as f64 / 1000.0;
                    let _ = write!(out, "p{}={us:.3}{sep}", crate::config::format_percentile(*p));
                }
                out.push_str("\r\n");
            }
        }
        "cluster" => {
            out.push_str("# Cluster\r\n");
            field!(out, "cluster_enabled", u8::from(ctx.server.cluster.is_some()));
        }
        "keyspace" => {
            out.push_str("# Keyspace\r\n");
            let databases = ctx.server.keyspace.databases();
            for (db, keys, expires, avg_ttl) in super::keys::keyspace_info(ctx.dbs.shards(), databases, now_ms) {
                let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n");
            }
        }
        _ => {}
    }
}


fn write_memory(ctx: &mut Ctx<'_>, out: &mut String) {
    let server = ctx.server;
    let o = super::memory::Overhead::gather(ctx);
    let (used, peak, rss) = (o.used(), o.peak, o.rss);
    let total_system = total_system_memory();
    let (maxmemory, policy) = {
        let config = server.config.read();
        (config.maxmemory, config.maxmemory_policy.name())
    };
    out.push_str("# Memory\r\n");
    field!(out, "used_memory", used);
    field!(out, "used_memory_human", bytes_to_human(used));
    field!(out, "used_memory_rss", rss);
    field!(out, "used_memory_rss_human", bytes_to_human(rss));
    field!(out, "used_memory_peak", peak);
    field!(out, "used_memory_peak_human", bytes_to_human(peak));
    field!(out, "used_memory_peak_perc", format!("{:.2}%", o.peak_percentage()));
    field!(out, "used_memory_overhead", o.total());
    field!(out, "used_memory_startup", o.startup);
    field!(out, "used_memory_dataset", o.dataset());
    field!(out, "used_memory_dataset_perc", format!("{:.2}%", o.dataset_percentage()));
    field!(out, "allocator_allocated", o.alloc.allocated);
    field!(out, "allocator_active", o.alloc.active);
    field!(out, "allocator_resident", o.alloc.resident);
    field!(out, "total_system_memory", total_system);
    field!(out, "total_system_memory_human", bytes_to_human(total_system));
    // One interpreter per worker runs both scripts and functions: Redis's
    // two VMs' figures are all in the eval one's.
    let vm = ctx.server.scripts.interpreter_memory();
    field!(out, "used_memory_lua", vm);
    field!(out, "used_memory_vm_eval", vm);
    field!(out, "used_memory_lua_human", bytes_to_human(vm));
    let (scripts, script_bytes) = ctx.server.scripts.cached();
    field!(out, "used_memory_scripts_eval", script_bytes);
    field!(out, "number_of_cached_scripts", scripts);
    let (libraries, functions) = ctx.server.scripts.functions.counts();
    field!(out, "number_of_functions", functions);
    field!(out, "number_of_libraries", libraries);
    field!(out, "used_memory_vm_functions", 0);
    field!(out, "used_memory_vm_total", vm);
    field!(out, "used_memory_vm_total_human", bytes_to_human(vm));
    field!(out, "used_memory_functions", o.functions_caches);
    let scripts = o.lua_caches + o.functions_caches;
    field!(out, "used_memory_scripts", scripts);
    field!(out, "used_memory_scripts_human", bytes_to_human(scripts));
    field!(out, "maxmemory", maxmemory);
    field!(out, "maxmemory_human", bytes_to_human(maxmemory));
    field!(out, "maxmemory_policy", policy);
    for (name, (ratio, bytes)) in [
        ("allocator_frag", o.allocator_fragmentation()),
        ("allocator_rss", o.allocator_rss()),
        ("rss_overhead", o.rss_overhead()),
    ] {
        field!(out, format!("{name}_ratio"), format!("{ratio:.2}"));
        field!(out, format!("{name}_bytes"), bytes);
    }
    let (ratio, bytes) = o.fragmentation();
    field!(out, "mem_fragmentation_ratio", format!("{ratio:.2}"));
    field!(out, "mem_fragmentation_bytes", bytes);
    // INFO holds every shard: what the snapshot keeps is summed here.
    let snapshot_kept: u64 = ctx.dbs.shards().map(|sh| sh.snapshot_saved_bytes() as u64).sum();
    field!(out, "mem_not_counted_for_evict", crate::evict::not_counted(server, Some(snapshot_kept)));
    field!(out, "mem_replication_backlog", o.replication_backlog);
    field!(out, "mem_total_replication_buffers", o.replication_buffers);
    field!(out, "mem_clients_slaves", o.clients_replicas);
    field!(out, "mem_clients_normal", o.clients_normal);
    field!(out, "mem_cluster_links", o.cluster_links);
    field!(out, "mem_aof_buffer", o.aof_buffer);
    field!(out, "mem_allocator", crate::alloc::NAME);
    field!(out, "active_defrag_running", 0);
    field!(out, "lazyfree_pending_objects", crate::lazyfree::pending_objects());
    field!(out, "lazyfreed_objects", crate::lazyfree::freed_objects());
}

/// Redis's `getSafeInfoString`: INFO's separators become `_`.
fn safe_info_string(s: &str) -> String {
    s.chars().map(|c| if matches!(c, '#' | ':' | '\n' | '\r') { '_' } else { c }).collect()
}

/// Redis's `bytesToHuman`.
pub fn bytes_to_human(n: u64) -> String {
    let n_f = n as f64;
    const UNITS: [(f64, char); 5] = [
        (1024.0, 'K'),
        (1024.0 * 1024.0, 'M'),
        (1024.0 * 1024.0 * 1024.0, 'G'),
        (1024.0 * 1024.0 * 1024.0 * 1024.0, 'T'),
        (1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0, 'P'),
    ];
    if n < 1024 {
        return format!("{n}B");
    }
    for (i, (size, unit)) in UNITS.iter().enumerate() {
        let next = UNITS.get(i + 1).map(|u| u.0).unwrap_or(f64::INFINITY);
        if n_f < next {
            return format!("{:.2}{unit}", n_f / size);
        }
    }
    format!("{n}B")
}

fn uname() -> String {
    // SAFETY: `uname` fills the zeroed struct; its fields are NUL-terminated.
    unsafe {
        let mut name: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut name) != 0 {
            return String::new();
        }
        let field = |f: &[libc::c_char]| std::ffi::CStr::from_ptr(f.as_ptr()).to_string_lossy().into_owned();
        format!("{} {} {}", field(&name.sysname), field(&name.release), field(&name.machine))
    }
}

/// (system, user) CPU time as Redis prints it: `seconds.micros`.
fn rusage(who: libc::c_int) -> (String, String) {
    // SAFETY: `getrusage` fills the zeroed struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let fmt = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (fmt(ru.ru_stime), fmt(ru.ru_utime))
}

/// Resident set size from /proc/self/statm (pages) times the page size.
pub(super) fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(0) as u64
}

fn total_system_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    pages.max(0) as u64 * page.max(0) as u64
}

// ---------------------------------------------------------------- CONFIG

/// SLOWLOG GET [count]: the newest `count` entries (10; -1: all), each
/// [id, unix time, microseconds, arguments, client address, client name].
fn slowlog_get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let count = match argv.get(2) {
        None => Some(10),
        Some(arg) => match super::parse::i64_arg(arg) {
            Ok(-1) => None,
            Ok(n) if n >= 0 => Some(n as usize),
            _ => return Err(CmdError::other("ERR count should be greater than or equal to -1")),
        },
    };
    if argv.len() > 3 {
        return Err(CmdError::other(
            "ERR unknown subcommand or wrong number of arguments for 'GET'. Try SLOWLOG HELP.",
        ));
    }
    let entries = ctx.server.slowlog.newest(count);
    ctx.out.array(entries.len());
    for e in entries {
        ctx.out.array(6);
        ctx.out.int(e.id as i64);
        ctx.out.int(e.time_s as i64);
        ctx.out.int(e.duration_us as i64);
        ctx.out.array(e.args.len());
        for arg in &e.args {
            ctx.out.bulk(arg);
        }
        ctx.out.bulk(e.addr.as_bytes());
        ctx.out.bulk(&e.name);
    }
    Ok(())
}

fn slowlog_len(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.int(ctx.server.slowlog.len() as i64);
    Ok(())
}

fn slowlog_reset(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.server.slowlog.reset();
    ctx.out.ok();
    Ok(())
}

fn slowlog_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
        ],
    );
    Ok(())
}

fn config_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    );
    Ok(())
}

/// CONFIG GET pattern [pattern ...]: a name without glob characters is
/// looked up exactly and reported as the client spelled it; a pattern
/// matches directive names case-insensitively. Each directive once.
fn config_get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let config = ctx.server.config.read();
    let mut found: Vec<(String, &'static str, String)> = Vec::new();
    for arg in &argv[2..] {
        if !arg.iter().any(|b| matches!(b, b'[' | b'*' | b'?')) {
            let name = String::from_utf8_lossy(arg).into_owned();
            if let Some(d) = crate::config::find(&name) {
                if !found.iter().any(|(_, n, _)| *n == d.name) {
                    found.push((name, d.name, config.get(d.name).unwrap_or_default()));
                }
            }
            continue;
        }
        for (name, value) in config.matching(arg) {
            if !found.iter().any(|(_, n, _)| *n == name) {
                found.push((name.to_string(), name, value));
            }
        }
    }
    drop(config);
    ctx.out.map(found.len());
    for (name, _, value) in found {
        ctx.out.bulk(name.as_bytes());
        ctx.out.bulk(value.as_bytes());
    }
    Ok(())
}

/// CONFIG SET name value [name value ...]: all or nothing.
fn config_set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    use crate::config::ConfigError;
    if !argv.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let pairs: Vec<(String, String)> = argv[2..]
        .chunks(2)
        .map(|p| (String::from_utf8_lossy(p[0]).into_owned(), String::from_utf8_lossy(p[1]).into_owned()))
        .collect();
    let failed = |arg: &str, why: &str| {
        CmdError::other(format!("ERR CONFIG SET failed (possibly related to argument '{arg}') - {why}"))
    };
    // Redis's DENY_LOADING_CONFIG, whose error comes before any other.
    let denied_while_loading = |name: &String| crate::config::find(name).is_some_and(|d| crate::config::DENIED_WHILE_LOADING.contains(&d.name));
    let loading = ctx.server.loading.load(Ordering::Relaxed) || ctx.server.async_loading.load(Ordering::Relaxed);
    if loading && pairs.iter().any(|(name, _)| denied_while_loading(name)) {
        return Err(CmdError::other(super::LOADING_ERROR));
    }
    // Then every name must be known, settable and given once.
    if let Some((name, _)) = pairs.iter().find(|(n, _)| crate::config::find(n).is_none()) {
        return Err(CmdError::other(format!("ERR Unknown option or number of arguments for CONFIG SET - '{name}'")));
    }
    let mut seen: Vec<&'static str> = Vec::new();
    for (name, _) in &pairs {
        let Some(d) = crate::config::find(name) else { continue };
        if !d.mutable {
            return Err(failed(name, "can't set immutable config"));
        }
        if crate::config::PROTECTED.contains(&d.name) && !protected_action_allowed(ctx, |c| &c.enable_protected_configs) {
            return Err(failed(name, "can't set protected config"));
        }
        if seen.contains(&d.name) {
            return Err(failed(name, "duplicate parameter"));
        }
        seen.push(d.name);
    }
    let mut config = ctx.server.config.write();
    let mut next = config.clone();
    for (name, value) in &pairs {
        let canonical = crate::config::find(name).map(|d| d.name).unwrap_or("");
        match next.set_at_runtime(name, value) {
            Ok(()) => {}
            Err(ConfigError::Invalid(why)) => return Err(failed(canonical, &why)),
            Err(ConfigError::Immutable) => return Err(failed(name, "can't set immutable config")),
            Err(ConfigError::Unknown) => return Err(failed(canonical, "Bad directive or wrong number of arguments")),
        }
    }
    // Redis's apply functions. First applyTlsCfg, before `tls-port`
    // listens: TLS is made again whenever a `tls-*` setting is named,
    // changed or not, as Redis's VOLATILE file settings are (a certificate
    // replaced in place is read again); put back if a later step fails.
    let server = ctx.server;
    let old_tls = server.tls.read().clone();
    let restore_tls = || *server.tls.write() = old_tls.clone();
    if let Some((name, _)) = pairs.iter().find(|(n, _)| n.to_ascii_lowercase().starts_with("tls-")) {
        if crate::tls::wanted(&next) {
            match crate::tls::configure(&next.tls) {
                Ok(made) => *server.tls.write() = Some(made),
                Err(why) => {
                    tracing::warn!("{why}");
                    return Err(failed(name, crate::tls::UPDATE_FAILED));
                }
            }
        }
    }
    // Then updatePort and applyBind: the listeners move (Keel's memcached
    // and metrics ports as `port`), or stay where they were; moved back if
    // a later step fails.
    let sets = [
        ("port", &server.listeners),
        ("tls-port", &server.tls_listeners),
        ("memcached-port", &server.memcache_listeners),
        ("metrics-port", &server.metrics_listeners),
    ];
    let mut moved = Vec::new();
    let move_back = |moved: &[&crate::listen::PortListeners]| {
        restore_tls();
        for set in moved.iter().rev() {
            if let Err(again) = set.rebind(&next, &config) {
                tracing::warn!("CONFIG SET could not listen on port {} again: {again}", set.port(&config));
            }
        }
    };
    for (name, set) in sets {
        if !set.moves(&config, &next) {
            continue;
        }
        if let Err(e) = set.rebind(&config, &next) {
            tracing::warn!("CONFIG SET could not listen on port {} of {:?} ({e}); listening as before", set.port(&next), next.bind);
            move_back(&moved);
            // Blamed on the first given of the two, which Redis applies first.
            let port_first = pairs
                .iter()
                .map(|(n, _)| crate::config::find(n).map(|d| d.name))
                .find(|&n| n == Some("bind") || (n == Some(name) && set.port(&next) != set.port(&config)))
                == Some(Some(name));
            return Err(match port_first {
                true => failed(name, "Unable to listen on this port. Check server logs."),
                false => failed("bind", "Failed to bind to specified addresses."),
            });
        }
        moved.push(set);
    }
    let unbind = |e: CmdError| {
        move_back(&moved);
        e
    };
    // Redis's updateMaxclients: the open files limit rises with it, or
    // the setting is refused.
    if next.maxclients != config.maxclients {
        let allowed = crate::process::adjust_open_files_limit(next.maxclients).unwrap_or(0);
        if allowed != next.maxclients {
            let why = format!("The operating system is not able to handle the specified number of clients, try with {allowed}");
            return Err(unbind(failed("maxclients", &why)));
        }
    }
    // The AOF switched on or off, its fsync policy.
    if let Err(why) = crate::durability::apply_config(ctx.server, &config, &next) {
        let name = if next.appendonly != config.appendonly { "appendonly" } else { "appendfsync" };
        return Err(unbind(failed(name, &why)));
    }
    if (next.oom_score_adj, next.oom_score_adj_values) != (config.oom_score_adj, config.oom_score_adj_values) {
        if let Err(why) = crate::process::apply_oom_score(&next) {
            let name = if next.oom_score_adj != config.oom_score_adj { "oom-score-adj" } else { "oom-score-adj-values" };
            return Err(unbind(failed(name, &why)));
        }
    }
    if next.jemalloc_bg_thread != config.jemalloc_bg_thread {
        crate::process::apply_jemalloc_bg_thread(&next);
    }
    if next.loglevel != config.loglevel {
        crate::process::apply_loglevel(&next);
    }
    if next.proc_title_template != config.proc_title_template {
        crate::proc_title::apply(&next);
    }
    // Redis's CONFIG SET dir chdir()s there.
    if next.dir != config.dir {
        if let Err(e) = std::env::set_current_dir(&next.dir) {
            return Err(unbind(failed("dir", &e.to_string())));
        }
    }
    ctx.server.mirror_config(&next);
    // Redis's updateRequirePass: the default user's password follows.
    if seen.contains(&"requirepass") {
        ctx.server.acl.set_requirepass(next.requirepass.as_deref());
    }
    let aof_turned_off = config.appendonly && !next.appendonly;
    let clients_limit_moved = (next.maxmemory_clients, next.maxmemory) != (config.maxmemory_clients, config.maxmemory);
    *config = next;
    drop(config);
    if clients_limit_moved {
        crate::client_memory::evict(ctx.server, true);
    }
    if aof_turned_off {
        crate::rewrite::wait_cancelled(ctx.server);
    }
    ctx.out.ok();
    Ok(())
}

fn config_resetstat(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let server = ctx.server;
    for worker in &server.workers {
        worker.reset();
    }
    server.errorstats.lock().clear();
    server.meter.lock().reset();
    if let Some(journal) = server.aof.opened() {
        journal.reset_stats();
    }
    crate::alloc::reset_peak();
    server.repl.reset_stats();
    server.evictor.reset_stats();
    server.clients.memory.evicted.store(0, Ordering::Relaxed);
    crate::lazyfree::reset_freed_objects();
    for shard in ctx.dbs.shards() {
        for db in shard.dbs_mut().iter_mut() {
            db.expired_keys = 0;
        }
    }
    ctx.out.ok();
    Ok(())
}

fn config_rewrite(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    rewrite_config_file(ctx, false).map_err(|e| CmdError::other(format!("ERR {e}")))
}

/// CONFIG REWRITE, or with `every_directive` DEBUG
/// CONFIG-REWRITE-FORCE-ALL; the error's text without its code.
fn rewrite_config_file(ctx: &mut Ctx<'_>, every_directive: bool) -> Result<(), String> {
    let config = ctx.server.config.read();
    let Some(path) = config.config_file.clone() else {
        return Err("The server is running without a config file".into());
    };
    // Without an aclfile the users live in the config file, as `user`
    // lines (Redis's rewriteConfigUserOption).
    let users: Option<Vec<String>> = config.aclfile.is_empty().then(|| {
        let text = ctx.server.acl.file_text();
        String::from_utf8_lossy(&text).lines().map(str::to_string).collect()
    });
    match config.rewrite(&path, users.as_deref(), every_directive) {
        Ok(()) => {
            drop(config);
            tracing::info!("CONFIG REWRITE executed with success.");
            ctx.out.ok();
            Ok(())
        }
        Err(e) => {
            tracing::warn!("CONFIG REWRITE failed: {e}");
            Err(format!("Rewriting config file: {e}"))
        }
    }
}

// ---------------------------------------------------------------- COMMAND

/// A command's ACL categories: its own (`CommandSpec::acl`, else its
/// group's) plus those Redis derives from its flags
/// (`setImplicitACLCategories`), in Redis's order.
pub fn acl_categories(spec: &CommandSpec) -> Vec<&'static str> {
    let cats = acl_category_bits(spec);
    acl::NAMES.iter().filter(|(c, _)| cats & c != 0).map(|(_, name)| *name).collect()
}

/// A command's ACL categories as `acl::*` bits: its own or its group's,
/// and those Redis derives from its flags (`setImplicitACLCategories`).
pub fn acl_category_bits(spec: &CommandSpec) -> u32 {
    let mut cats = spec.acl.unwrap_or(match spec.group {
        "generic" => acl::KEYSPACE,
        "string" => acl::STRING,
        "list" => acl::LIST,
        "hash" => acl::HASH,
        "set" => acl::SET,
        "sorted-set" => acl::SORTEDSET,
        "geo" => acl::GEO,
        "bitmap" => acl::BITMAP,
        "hyperloglog" => acl::HYPERLOGLOG,
        "stream" => acl::STREAM,
        "transactions" => acl::TRANSACTION,
        "scripting" => acl::SCRIPTING,
        "connection" => acl::CONNECTION,
        _ => acl::NONE,
    });
    if spec.has(flags::WRITE) {
        cats |= acl::WRITE;
    }
    if spec.has(flags::READONLY) && cats & acl::SCRIPTING == 0 {
        cats |= acl::READ;
    }
    if spec.has(flags::ADMIN) {
        cats |= acl::ADMIN | acl::DANGEROUS;
    }
    if spec.has(flags::PUBSUB) {
        cats |= acl::PUBSUB;
    }
    if spec.has(flags::FAST) {
        cats |= acl::FAST;
    }
    if spec.has(flags::BLOCKING) {
        cats |= acl::BLOCKING;
    }
    if cats & acl::FAST == 0 {
        cats |= acl::SLOW;
    }
    cats
}

/// Redis's flag names in its output order, `movablekeys` included.
fn flag_names(spec: &CommandSpec, movable: bool) -> Vec<&'static str> {
    let mut names = Vec::new();
    for &(flag, name) in flags::NAMES {
        if flag == flags::ALLOW_BUSY && movable {
            names.push("movablekeys");
        }
        if spec.has(flag) {
            names.push(name);
        }
    }
    names
}

fn reply_key_flags(ctx: &mut Ctx<'_>, flags: u16) {
    let names: Vec<&str> = keyspec::FLAG_NAMES.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| *n).collect();
    ctx.out.set(names.len());
    for n in names {
        ctx.out.simple(n);
    }
}

fn reply_command_info(ctx: &mut Ctx<'_>, spec: &CommandSpec) {
    let specs = keyspec::key_specs(spec);
    let ((first, last, step), movable) = keyspec::legacy_range(&specs);
    ctx.out.array(10);
    ctx.out.bulk(spec.name.as_bytes());
    ctx.out.int(i64::from(spec.arity));
    let names = flag_names(spec, movable);
    ctx.out.set(names.len());
    for n in names {
        ctx.out.simple(n);
    }
    ctx.out.int(first);
    ctx.out.int(last);
    ctx.out.int(step);
    let cats = acl_categories(spec);
    ctx.out.set(cats.len());
    for c in cats {
        ctx.out.simple(&format!("@{c}"));
    }
    ctx.out.set(spec.tips.len());
    for tip in spec.tips {
        ctx.out.bulk(tip.as_bytes());
    }
    ctx.out.set(specs.len());
    for key_spec in specs.iter() {
        reply_key_spec(ctx, key_spec);
    }
    if spec.subcommands.is_empty() {
        ctx.out.set(0);
    } else {
        ctx.out.array(spec.subcommands.len());
        for sub in spec.subcommands {
            reply_command_info(ctx, sub);
        }
    }
}

/// One key spec as Redis's `addReplyCommandKeySpecs` writes it.
fn reply_key_spec(ctx: &mut Ctx<'_>, spec: &KeySpec) {
    ctx.out.map(if spec.notes.is_empty() { 3 } else { 4 });
    if !spec.notes.is_empty() {
        ctx.out.bulk(b"notes");
        ctx.out.bulk(spec.notes.as_bytes());
    }
    ctx.out.bulk(b"flags");
    reply_key_flags(ctx, spec.flags);
    let out = &mut ctx.out;
    out.bulk(b"begin_search");
    out.map(2);
    out.bulk(b"type");
    match spec.begin {
        Begin::Index(pos) => {
            out.bulk(b"index");
            out.bulk(b"spec");
            out.map(1);
            out.bulk(b"index");
            out.int(pos as i64);
        }
        Begin::Keyword { keyword, startfrom } => {
            out.bulk(b"keyword");
            out.bulk(b"spec");
            out.map(2);
            out.bulk(b"keyword");
            out.bulk(keyword.as_bytes());
            out.bulk(b"startfrom");
            out.int(startfrom as i64);
        }
        Begin::Unknown => {
            out.bulk(b"unknown");
            out.bulk(b"spec");
            out.map(0);
        }
    }
    out.bulk(b"find_keys");
    out.map(2);
    out.bulk(b"type");
    let fields: &[(&str, i64)] = match spec.find {
        Find::Range { lastkey, keystep, limit } => {
            out.bulk(b"range");
            &[("lastkey", lastkey as i64), ("keystep", keystep as i64), ("limit", limit as i64)]
        }
        Find::Keynum { keynumidx, firstkey, keystep } => {
            out.bulk(b"keynum");
            &[("keynumidx", keynumidx as i64), ("firstkey", firstkey as i64), ("keystep", keystep as i64)]
        }
        Find::Unknown => {
            out.bulk(b"unknown");
            &[]
        }
    };
    out.bulk(b"spec");
    out.map(fields.len());
    for (name, value) in fields {
        out.bulk(name.as_bytes());
        out.int(*value);
    }
}

fn reply_command_docs(ctx: &mut Ctx<'_>, spec: &CommandSpec) {
    let mut len = 2;
    if !spec.summary.is_empty() {
        len += 1;
    }
    if !spec.subcommands.is_empty() {
        len += 1;
    }
    ctx.out.map(len);
    if !spec.summary.is_empty() {
        ctx.out.bulk(b"summary");
        ctx.out.bulk(spec.summary.as_bytes());
    }
    ctx.out.bulk(b"since");
    ctx.out.bulk(spec.since.as_bytes());
    ctx.out.bulk(b"group");
    ctx.out.bulk(spec.group.as_bytes());
    if !spec.subcommands.is_empty() {
        ctx.out.bulk(b"subcommands");
        ctx.out.map(spec.subcommands.len());
        for sub in spec.subcommands {
            ctx.out.bulk(sub.name.as_bytes());
            reply_command_docs(ctx, sub);
        }
    }
}

/// A command by the full name a client calls it: "get", or "config|get"
/// for a subcommand.
pub(super) fn lookup_full_name(name: &[u8]) -> Option<&'static CommandSpec> {
    let mut parts = name.splitn(2, |&b| b == b'|');
    let (_, parent) = Names::Client.lookup(parts.next()?)?;
    match parts.next() {
        None => Some(parent),
        Some(sub) => parent.subcommand(sub).map(|(_, s)| s),
    }
}

fn command_all(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let commands = Names::Client.commands();
    ctx.out.array(commands.len());
    for spec in commands {
        reply_command_info(ctx, spec);
    }
    Ok(())
}

fn command_count(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.int(Names::Client.commands().len() as i64);
    Ok(())
}

fn command_info(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() == 2 {
        return command_all(ctx, argv);
    }
    ctx.out.array(argv.len() - 2);
    for name in &argv[2..] {
        match lookup_full_name(name) {
            Some(spec) => reply_command_info(ctx, spec),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

fn command_docs(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let specs: Vec<&CommandSpec> = if argv.len() == 2 {
        Names::Client.commands()
    } else {
        argv[2..].iter().filter_map(|n| lookup_full_name(n)).collect()
    };
    ctx.out.map(specs.len());
    for spec in specs {
        ctx.out.bulk(spec.name.as_bytes());
        reply_command_docs(ctx, spec);
    }
    Ok(())
}

/// The keys of the command `argv[2..]` names (indexes into `argv[2..]`)
/// and their key-spec flags, or Redis's error.
fn getkeys(argv: &[&[u8]]) -> Result<Vec<(usize, u16)>, CmdError> {
    let inner = &argv[2..];
    let Some((_, parent)) = Names::Client.lookup(inner[0]) else {
        return Err(CmdError::other("ERR Invalid command specified"));
    };
    let spec = match (parent.subcommands.is_empty(), inner.get(1)) {
        (false, Some(sub)) => match parent.subcommand(sub) {
            Some((_, s)) => s,
            None => return Err(CmdError::other("ERR Invalid command specified")),
        },
        _ => parent,
    };
    if matches!(spec.keys, Keys::None) {
        return Err(CmdError::other("ERR The command has no key arguments"));
    }
    if !spec.arity_ok(inner.len()) {
        return Err(CmdError::other("ERR Invalid number of arguments specified for command"));
    }
    let keys = keyspec::keys_and_flags(&keyspec::key_specs(spec), inner, &spec.key_indexes(inner));
    // No key is an answer for a command whose keys are optional (EVAL's).
    if keys.is_empty() && !spec.has(super::flags::NO_MANDATORY_KEYS) {
        return Err(CmdError::other("ERR Invalid arguments specified for command"));
    }
    Ok(keys)
}

fn command_getkeys(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let keys = getkeys(argv)?;
    ctx.out.array(keys.len());
    for (i, _) in keys {
        ctx.out.bulk(argv[2 + i]);
    }
    Ok(())
}

fn command_getkeysandflags(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let keys = getkeys(argv)?;
    ctx.out.array(keys.len());
    for (i, flags) in keys {
        ctx.out.array(2);
        ctx.out.bulk(argv[2 + i]);
        reply_key_flags(ctx, flags);
    }
    Ok(())
}

fn command_list(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    enum Filter<'a> {
        None,
        Module,
        AclCat(String),
        Pattern(&'a [u8]),
    }
    let mut filter = Filter::None;
    let mut i = 2;
    while i < argv.len() {
        if eq(argv[i], "filterby") && argv.len() - 1 - i == 2 {
            let arg = argv[i + 2];
            filter = if eq(argv[i + 1], "module") {
                Filter::Module
            } else if eq(argv[i + 1], "aclcat") {
                Filter::AclCat(String::from_utf8_lossy(arg).to_ascii_lowercase())
            } else if eq(argv[i + 1], "pattern") {
                Filter::Pattern(arg)
            } else {
                return Err(CmdError::Syntax);
            };
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let names: Vec<&str> = Names::Client
        .commands()
        .into_iter()
        .flat_map(|c| std::iter::once(c).chain(c.subcommands.iter()))
        .filter(|spec| match &filter {
            Filter::None => true,
            // Keel loads no modules.
            Filter::Module => false,
            Filter::AclCat(cat) => acl_categories(spec).contains(&cat.as_str()),
            Filter::Pattern(p) => crate::glob::matches(p, spec.name.as_bytes(), true),
        })
        .map(|spec| spec.name)
        .collect();
    ctx.out.array(names.len());
    for n in names {
        ctx.out.bulk(n.as_bytes());
    }
    Ok(())
}

fn command_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------- DEBUG

/// Redis's `allowProtectedAction`: whether `setting` (`yes`, `no` or
/// `local`) lets this client do what it guards (DEBUG, MODULE LOAD, CONFIG
/// SET of a protected setting).
pub(super) fn protected_action_allowed(ctx: &Ctx<'_>, setting: impl Fn(&crate::config::Config) -> &String) -> bool {
    match setting(&ctx.server.config.read()).as_str() {
        "yes" => true,
        "local" => {
            let addr = &ctx.client.info.addr;
            ctx.client.info.unix || addr.starts_with("127.") || addr.starts_with("::1")
        }
        _ => false,
    }
}

// ---------------------------------------------------------------- MODULE

fn module_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "LIST",
            "    Return a list of loaded modules.",
            "LOAD <path> [<arg> ...]",
            "    Load a module library from <path>, passing to it any optional arguments.",
            "LOADEX <path> [[CONFIG NAME VALUE] [CONFIG NAME VALUE]] [ARGS ...]",
            "    Load a module library from <path>, while passing it module configurations and optional arguments.",
            "UNLOAD <name>",
            "    Unload a module.",
        ],
    );
    Ok(())
}

fn module_list(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.array(0);
    Ok(())
}

/// Redis's check of `enable-module-command` before MODULE LOAD, LOADEX
/// and UNLOAD.
fn module_command_allowed(ctx: &Ctx<'_>) -> CmdResult {
    if protected_action_allowed(ctx, |c| &c.enable_module_command) {
        return Ok(());
    }
    Err(CmdError::other(
        "ERR MODULE command not allowed. If the enable-module-command option is set to \"local\", you can run it \
         from a local connection, otherwise you need to set this option in the configuration file, and then \
         restart the server.",
    ))
}

/// MODULE LOAD and LOADEX: Redis's failure, its reason in the log.
fn module_load(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    module_command_allowed(ctx)?;
    tracing::warn!("Module {} failed to load: Keel does not load Redis modules", String::from_utf8_lossy(argv[2]));
    Err(CmdError::other("ERR Error loading the extension. Please check the server logs."))
}

fn module_unload(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    module_command_allowed(ctx)?;
    Err(CmdError::other("ERR Error unloading module: no such module with that name"))
}

/// Whether a DEBUG subcommand reads the data: all but those that only
/// set, sleep or answer something fixed.
fn debug_reads_data(argv: &[&[u8]]) -> bool {
    const READ_NONE: &[&str] = &[
        "help",
        "sleep",
        "log",
        "protocol",
        "set-active-expire",
        "pause-cron",
        "aof-flush-sleep",
        "set-skip-checksum-validation",
        "set-disable-deny-scripts",
        "quicklist-packed-threshold",
        "replybuffer",
        "drop-cluster-packet-filter",
        "clusterlink",
    ];
    !argv.get(1).is_some_and(|sub| READ_NONE.iter().any(|name| eq(sub, name)))
}

fn debug(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if !protected_action_allowed(ctx, |c| &c.enable_debug_command) {
        return Err(CmdError::other(
            "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it \
             from a local connection, otherwise you need to set this option in the configuration file, and then \
             restart the server.",
        ));
    }
    let sub = argv[1];
    match argv.len() {
        2 if eq(sub, "help") => {
            reply_help(
                ctx,
                argv[0],
                &[
                    "AOF-FLUSH-SLEEP <microsec>",
                    "    Server will sleep before flushing the AOF, this is used for testing.",
                    "ASSERT",
                    "    Crash by assertion failed.",
                    "CLUSTERLINK KILL <to|from|all> <node-id>",
                    "    Kills the link based on the direction to/from (both) with the provided node.",
                    "CONFIG-REWRITE-FORCE-ALL",
                    "    Like CONFIG REWRITE but writes all configuration options, including",
                    "    keywords not listed in original configuration file or default values.",
                    "DIGEST",
                    "    Output a hex signature representing the current DB content.",
                    "DROP-CLUSTER-PACKET-FILTER <packet-type>",
                    "    Drop all packets that match the filtered type. Set to -1 allow all packets.",
                    "DIGEST-VALUE <key> [<key> ...]",
                    "    Output a hex signature of the values of all the specified keys.",
                    "PANIC",
                    "    Crash the server simulating a panic.",
                    "POPULATE <count> [<prefix>] [<size>]",
                    "    Create <count> string keys named key:<num>. If <prefix> is specified then",
                    "    it is used instead of the 'key' prefix. These are not propagated to",
                    "    replicas. Cluster slots are not respected so keys not belonging to the",
                    "    current node can be created in cluster mode.",
                    "LOADAOF",
                    "    Flush the AOF buffers on disk and reload the AOF in memory.",
                    "LOG <message>",
                    "    Write <message> to the server log.",
                    "OBJECT <key>",
                    "    Show low level info about the `key` and associated value.",
                    "RELOAD [option ...]",
                    "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
                    "    * MERGE: conflicting keys will be loaded from RDB.",
                    "    * NOFLUSH: the existing database will not be removed before load, but",
                    "      conflicting keys will make the load fail (Keel keeps running).",
                    "    * NOSAVE: the database will be loaded from an existing RDB file.",
                    "    Examples:",
                    "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
                    "      the database.",
                    "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
                    "      existing RDB file.",
                    "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
                    "      file to the database.",
                    "PAUSE-CRON <0|1>",
                    "    Stop periodic cron job processing.",
                    "PROTOCOL <type>",
                    "    Reply with a test value of the specified type. <type> can be: string,",
                    "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
                    "    true, false.",
                    "QUICKLIST-PACKED-THRESHOLD <size>",
                    "    Sets the threshold for elements to be inserted as plain vs packed nodes",
                    "    Default value is 1GB, allows values up to 4GB. Setting to 0 restores to default.",
                    "REPLICATE <command> [<arg> ...]",
                    "    Send <command> to the replicas, through the replication stream only.",
                    "REPLYBUFFER RESIZING <0|1>",
                    "    Enable or disable giving back drained reply buffers over 1 MB.",
                    "SEGFAULT",
                    "    Crash the server with sigsegv.",
                    "SET-DISABLE-DENY-SCRIPTS <0|1>",
                    "    Enable or disable calling commands flagged noscript from scripts.",
                    "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
                    "    Enables or disables the checksum check of RESTORE's payload.",
                    "SET-ACTIVE-EXPIRE <0|1>",
                    "    Setting it to 0 disables expiring keys in background when they are not",
                    "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
                    "    default.",
                    "SLEEP <seconds>",
                    "    Stop the server for <seconds>. Decimals allowed.",
                ],
            );
            Ok(())
        }
        3 if eq(sub, "sleep") => {
            let secs = parse_strtod(argv[2]);
            let micros = (secs * 1_000_000.0) as i64;
            if micros > 0 {
                // Every shard stays locked meanwhile: the keyspace freezes,
                // and the replication links wait (`Server::sleeping`).
                let server = ctx.server;
                server.sleeping_until_ms.store(unix_ms() + (micros as u64).div_ceil(1000), Ordering::Release);
                std::thread::sleep(std::time::Duration::from_micros(micros as u64));
                server.sleeping_until_ms.store(0, Ordering::Release);
            }
            ctx.out.ok();
            Ok(())
        }
        5 if eq(sub, "clusterlink") && eq(argv[2], "kill") => {
            let Some(cluster) = &ctx.server.cluster else {
                return Err(CmdError::other("ERR Debug option only available for cluster mode enabled setup!"));
            };
            let (direction, node) = (argv[3], argv[4]);
            cluster.with(ctx.server, |st| st.kill_links(direction, node)).map_err(|e| CmdError::other(format!("ERR {e}")))?;
            ctx.out.ok();
            Ok(())
        }
        2 if eq(sub, "config-rewrite-force-all") => rewrite_config_file(ctx, true)
            .map_err(|e| CmdError::other(format!("ERR CONFIG-REWRITE-FORCE-ALL failed: {e}"))),
        3 if eq(sub, "drop-cluster-packet-filter") => {
            let kind = super::parse::i64_arg(argv[2])?;
            if let Some(cluster) = &ctx.server.cluster {
                cluster.with(ctx.server, |st| st.drop_filter = kind);
            }
            ctx.out.ok();
            Ok(())
        }
        4 if eq(sub, "replybuffer") && eq(argv[2], "resizing") => {
            crate::worker::REPLY_BUFFER_RESIZING.store(parse_atoi(argv[3]) != 0, Ordering::Relaxed);
            ctx.out.ok();
            Ok(())
        }
        n if n >= 3 && eq(sub, "replicate") => {
            // Into the replication stream as it is, and not the journal
            // (tests: what a replica does with a command that fails there).
            if ctx.server.repl.feeding() {
                ctx.propagate_as(vec![argv[2..].iter().map(|a| a.to_vec()).collect()]);
                ctx.durability.forced = true;
                ctx.durability.replicas_only = true;
            }
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "quicklist-packed-threshold") => {
            let bytes = std::str::from_utf8(argv[2]).ok().and_then(|v| crate::config::parse_memory(v).ok());
            if !bytes.is_some_and(keel_engine::list::set_packed_threshold) {
                return Err(CmdError::other("ERR argument must be a memory value bigger than 1 and smaller than 4gb"));
            }
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "set-disable-deny-scripts") => {
            ctx.server.scripts.allow_noscript.store(parse_atoi(argv[2]) != 0, Ordering::Relaxed);
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "set-skip-checksum-validation") => {
            ctx.server.skip_dump_checksum.store(parse_atoi(argv[2]) != 0, Ordering::Relaxed);
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "pause-cron") => {
            ctx.server.cron_paused.store(parse_atoi(argv[2]) != 0, Ordering::Release);
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "set-active-expire") => {
            let on = parse_atoi(argv[2]) != 0;
            ctx.server.active_expire.store(on, Ordering::Relaxed);
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "aof-flush-sleep") => {
            ctx.server.aof.set_flush_sleep(parse_atoi(argv[2]).max(0) as u64);
            ctx.out.ok();
            Ok(())
        }
        2 if eq(sub, "panic") => {
            crate::process::server_panic(&format!("DEBUG PANIC called at Unix time {}", unix_ms() / 1000))
        }
        2 if eq(sub, "segfault") => crate::process::segfault(),
        2 if eq(sub, "assert") => panic!("'1 == 2' is not true (DEBUG ASSERT)"),
        3 if eq(sub, "log") => {
            tracing::warn!("DEBUG LOG: {}", String::from_utf8_lossy(argv[2]));
            ctx.out.ok();
            Ok(())
        }
        2 if eq(sub, "digest") => {
            let digest = dataset_digest(ctx);
            ctx.out.simple(&digest::hex(&digest));
            Ok(())
        }
        _ if eq(sub, "digest-value") => {
            ctx.out.array(argv.len() - 2);
            for key in &argv[2..] {
                let digest = digest::value_digest(ctx.dbs.of(key).peek(key));
                ctx.out.simple(&digest::hex(&digest));
            }
            Ok(())
        }
        3..=5 if eq(sub, "populate") => debug_populate(ctx, &argv[2..]),
        2 if eq(sub, "loadaof") => {
            crate::durability::debug_loadaof(ctx).map_err(CmdError::other)?;
            ctx.out.ok();
            Ok(())
        }
        3 if eq(sub, "object") => debug_object(ctx, argv[2]),
        _ if eq(sub, "reload") => debug_reload(ctx, &argv[2..]),
        3 if eq(sub, "protocol") => debug_protocol(ctx, argv[2]),
        _ => Err(CmdError::subcommand_syntax(argv)),
    }
}

/// DEBUG POPULATE count [prefix] [size], as Redis's: keys `prefix:N`
/// (the name cut at 127 bytes, as Redis's buffer cuts it) holding
/// `value:N`, cut or padded with zero bytes to `size` when given; existing
/// keys are left alone. Not logged, as Redis does not propagate it.
fn debug_populate(ctx: &mut Ctx<'_>, args: &[&[u8]]) -> CmdResult {
    // Redis answers this for anything but a non-negative integer.
    let positive = |arg: &[u8]| match super::parse::i64_arg(arg) {
        Ok(n) if n >= 0 => Ok(n as u64),
        _ => Err(CmdError::other("ERR value is out of range, must be positive")),
    };
    let count = positive(args[0])?;
    let size = args.get(2).map(|a| positive(a)).transpose()?.unwrap_or(0) as usize;
    // Redis formats the prefix as a C string.
    let prefix = args.get(1).map_or(&b"key"[..], |p| p.split(|&b| b == 0).next().unwrap_or(&[]));
    let (now_ms, lru_s) = (ctx.now_ms, ctx.lru_s);
    let mut key = Vec::new();
    for n in 0..count {
        key.clear();
        key.extend_from_slice(prefix);
        key.extend_from_slice(format!(":{n}").as_bytes());
        key.truncate(127);
        let db = ctx.dbs.of(&key);
        if db.get(&key, now_ms).is_some() {
            continue;
        }
        let mut value = format!("value:{n}").into_bytes();
        if size > 0 {
            value.resize(size, 0);
        }
        db.set(&key, keel_engine::Value::Str(keel_engine::Str::from_bytes(&value)), false, lru_s);
        db.signal_modified(&key);
    }
    ctx.out.ok();
    Ok(())
}

/// DEBUG DIGEST's digest of every database, from the keys as stored in
/// every shard (DEBUG holds them all).
fn dataset_digest(ctx: &mut Ctx<'_>) -> digest::Digest {
    let mut dataset = [0u8; 20];
    for db in 0..ctx.server.keyspace.databases() {
        let mut keys = [0u8; 20];
        let mut any = false;
        for shard in ctx.dbs.shards() {
            for (key, entry) in shard.db(db).iter() {
                digest::fold_key(&mut keys, key, entry);
                any = true;
            }
        }
        if any {
            digest::fold_database(&mut dataset, db as u32, &keys);
        }
    }
    dataset
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE] (`snapshot::debug_reload`),
/// under every shard's lock as DEBUG runs.
fn debug_reload(ctx: &mut Ctx<'_>, options: &[&[u8]]) -> CmdResult {
    let (mut save, mut flush, mut merge) = (true, true, false);
    for option in options {
        if eq(option, "merge") {
            merge = true;
        } else if eq(option, "noflush") {
            flush = false;
        } else if eq(option, "nosave") {
            save = false;
        } else {
            return Err(CmdError::other("ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."));
        }
    }
    crate::snapshot::debug_reload(ctx.server, &mut ctx.dbs.locked, save, flush, merge).map_err(CmdError::other)?;
    ctx.out.ok();
    Ok(())
}

fn debug_object(ctx: &mut Ctx<'_>, key: &[u8]) -> CmdResult {
    let lru_now = ctx.lru_s;
    let db = ctx.dbs.of(key);
    let Some(entry) = db.peek(key) else {
        return Err(CmdError::NoSuchKey);
    };
    let address = entry as *const keel_engine::Entry as usize;
    let line = format!(
        "Value at:0x{address:x} refcount:1 encoding:{} serializedlength:{} lru:{} lru_seconds_idle:{}",
        entry.value.encoding(),
        entry.value.heap_size().max(1),
        entry.access_s,
        lru_now.saturating_sub(entry.access_s)
    );
    ctx.out.simple(&line);
    Ok(())
}

fn debug_protocol(ctx: &mut Ctx<'_>, kind: &[u8]) -> CmdResult {
    let kind = String::from_utf8_lossy(kind).to_ascii_lowercase();
    let out = &mut ctx.out;
    match kind.as_str() {
        "string" => out.bulk(b"Hello World"),
        "integer" => out.int(12345),
        // Redis's own test value, not an approximation of pi.
        #[allow(clippy::approx_constant)]
        "double" => out.double(3.141),
        "bignum" => out.big_number("1234567999999999999999999999999999999"),
        "null" => out.null(),
        "array" | "set" => {
            if kind == "array" {
                out.array(3);
            } else {
                out.set(3);
            }
            for j in 0..3 {
                out.int(j);
            }
        }
        "map" => {
            out.map(3);
            for j in 0..3 {
                out.int(j);
                out.boolean(j == 1);
            }
        }
        "attrib" => {
            if out.resp3 {
                // An attribute (RESP3 `|`) precedes the real reply.
                out.buf.extend_from_slice(b"|1\r\n");
                out.bulk(b"key-popularity");
                out.array(2);
                out.bulk(b"key:123");
                out.int(90);
            }
            out.bulk(b"Some real reply following the attribute");
        }
        "push" => {
            if !out.resp3 {
                return Err(CmdError::other("ERR RESP2 is not supported by this command"));
            }
            out.push(2);
            out.bulk(b"server-cpu-usage");
            out.int(42);
            out.bulk(b"Some real reply following the push reply");
        }
        "true" => out.boolean(true),
        "false" => out.boolean(false),
        "verbatim" => out.verbatim("txt", b"This is a verbatim\nstring"),
        _ => {
            return Err(CmdError::other(
                "ERR Wrong protocol type name. Please use one of the following: \
                 string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
            ))
        }
    }
    Ok(())
}

/// C's `strtod` leniency: the longest numeric prefix, 0 if none.
fn parse_strtod(arg: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(arg);
    let s = s.trim_start();
    (1..=s.len()).rev().find_map(|n| s.get(..n).and_then(|p| p.parse::<f64>().ok())).unwrap_or(0.0)
}

/// C's `atoi`: optional sign and leading digits, 0 if none.
fn parse_atoi(arg: &[u8]) -> i64 {
    let s = String::from_utf8_lossy(arg);
    let s = s.trim_start();
    let (sign, digits) = match s.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, s.strip_prefix('+').unwrap_or(s)),
    };
    let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
    digits[..end].parse::<i64>().map(|n| sign * n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_follow_redis_selection_rules() {
        let default = selected_sections(&[]);
        assert!(default.contains(&"server") && default.contains(&"keyspace"));
        assert!(!default.contains(&"commandstats") && !default.contains(&"latencystats"));
        assert_eq!(selected_sections(&[b"CPU"]), ["cpu"]);
        assert_eq!(selected_sections(&[b"cpu", b"sentinel"]), ["cpu"]);
        let all = selected_sections(&[b"cpu", b"all"]);
        assert_eq!(all.len(), SECTIONS.len());
        assert_eq!(all.iter().filter(|s| **s == "cpu").count(), 1);
        let cpu_default = selected_sections(&[b"cpu", b"default"]);
        assert_eq!(cpu_default, selected_sections(&[]));
    }

    #[test]
    fn human_sizes_match_redis() {
        assert_eq!(bytes_to_human(0), "0B");
        assert_eq!(bytes_to_human(1023), "1023B");
        assert_eq!(bytes_to_human(1024), "1.00K");
        assert_eq!(bytes_to_human(1536 * 1024), "1.50M");
        assert_eq!(bytes_to_human(3 << 30), "3.00G");
    }

    #[test]
    fn c_number_parsing_is_lenient() {
        assert_eq!(parse_strtod(b"0.5"), 0.5);
        assert_eq!(parse_strtod(b"2abc"), 2.0);
        assert_eq!(parse_strtod(b"x"), 0.0);
        assert_eq!(parse_atoi(b"1"), 1);
        assert_eq!(parse_atoi(b"0"), 0);
        assert_eq!(parse_atoi(b"12x"), 12);
        assert_eq!(parse_atoi(b"no"), 0);
    }

    #[test]
    fn every_command_name_is_lowercase_and_subcommands_are_qualified() {
        for spec in &table().commands {
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            for sub in spec.subcommands {
                assert!(sub.name.starts_with(&format!("{}|", spec.name)), "{}", sub.name);
            }
        }
    }
}
