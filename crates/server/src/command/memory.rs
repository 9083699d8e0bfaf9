//! MEMORY: USAGE of a key, and the server's memory as Redis 7.0's
//! `memoryCommand` reports it (STATS, DOCTOR, MALLOC-STATS, PURGE).
//!
//! [`Overhead`] is Redis's `redisMemOverhead`: what the allocated bytes go
//! to besides the dataset. MEMORY STATS, MEMORY DOCTOR and INFO memory all
//! read it, so the three agree.

use std::sync::atomic::Ordering;

use super::keys::object_lookup;
use super::parse::{eq, i64_arg};
use super::server::reply_help;
use super::{cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::alloc::AllocStats;
use keel_engine::Entry;

pub static COMMANDS: &[CommandSpec] = &[cmd("memory", -2, 0, Keys::None, "server", super::server::container)
    .doc("A container for memory diagnostics commands", "4.0.0")
    .subs(SUBCOMMANDS)];

/// MEMORY USAGE names its key at argument 2.
const KEY2: Keys = Keys::Range { first: 2, last: 2, step: 1 };
/// The tips of the subcommands whose reply each node answers for itself.
const PER_SHARD: &[&str] = &["nondeterministic_output", "request_policy:all_shards", "response_policy:special"];

const SUBCOMMANDS: &[CommandSpec] = &[
    cmd("memory|doctor", 2, ALL_SHARDS, Keys::None, "server", doctor)
        .doc("Outputs memory problems report", "4.0.0")
        .tips(PER_SHARD)
        .reads_data_when(|_| false),
    cmd("memory|help", 2, LOADING | STALE, Keys::None, "server", help)
        .doc("Show helpful text about the different subcommands", "4.0.0"),
    cmd("memory|malloc-stats", 2, 0, Keys::None, "server", malloc_stats)
        .doc("Show allocator internal stats", "4.0.0")
        .tips(PER_SHARD),
    cmd("memory|purge", 2, 0, Keys::None, "server", purge)
        .doc("Ask the allocator to release memory", "4.0.0")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("memory|stats", 2, ALL_SHARDS, Keys::None, "server", stats)
        .doc("Show memory usage details", "4.0.0")
        .tips(PER_SHARD),
    cmd("memory|usage", -3, READONLY, KEY2, "server", usage)
        .doc("Estimate the memory usage of a key", "4.0.0")
        .specs(&[super::keyspec::key_at(2, super::keyspec::RO)]),
];

/// Redis's `redisMemOverhead`, gathered with every shard held.
pub(super) struct Overhead {
    pub alloc: AllocStats,
    pub rss: u64,
    pub peak: u64,
    pub startup: u64,
    /// The replication buffer up to `repl-backlog-size`, and what
    /// attached replicas keep beyond it.
    pub replication_backlog: u64,
    pub clients_replicas: u64,
    /// The replication buffer whole (INFO mem_total_replication_buffers).
    pub replication_buffers: u64,
    pub clients_normal: u64,
    pub cluster_links: u64,
    pub aof_buffer: u64,
    pub lua_caches: u64,
    pub functions_caches: u64,
    /// Per database with keys: (number, its tables' bytes).
    pub dbs: Vec<(usize, keel_engine::TableBytes)>,
    pub keys: u64,
}

impl Overhead {
    pub fn gather(ctx: &mut Ctx<'_>) -> Overhead {
        let server = ctx.server;
        let alloc = crate::alloc::stats();
        let (replication_backlog, clients_replicas, replication_buffers) = match server.repl.buffer_memory() {
            // As Redis: the replicas' share is what the buffer holds beyond
            // the backlog's size, while any replica is attached.
            Some((buffer, size)) if buffer > size && !server.repl.replicas().is_empty() => (size, buffer - size, buffer),
            Some((buffer, _)) => (buffer, 0, buffer),
            None => (0, 0, 0),
        };
        // Each database's tables and keys, summed over the shards.
        let mut per_db = vec![(keel_engine::TableBytes { main: 0, expires: 0 }, 0u64); server.keyspace.databases()];
        for shard in ctx.dbs.shards() {
            for ((sum, keys), db) in per_db.iter_mut().zip(shard.dbs()).filter(|(_, db)| !db.is_empty()) {
                let tables = db.table_bytes();
                sum.main += tables.main;
                sum.expires += tables.expires;
                *keys += db.len() as u64;
            }
        }
        Overhead {
            alloc,
            rss: super::server::rss_bytes(),
            peak: crate::alloc::peak().max(alloc.allocated),
            startup: crate::alloc::startup(),
            replication_backlog,
            clients_replicas,
            replication_buffers,
            clients_normal: server.clients.memory.total(),
            cluster_links: server.cluster.as_ref().map_or(0, |c| c.links_memory()),
            aof_buffer: server.aof.enabled().map_or(0, |j| j.unwritten_bytes()),
            lua_caches: server.scripts.cached().1 as u64,
            functions_caches: server.scripts.functions.memory() as u64,
            keys: per_db.iter().map(|(_, keys)| keys).sum(),
            dbs: per_db.into_iter().enumerate().filter(|(_, (_, keys))| *keys > 0).map(|(n, (tables, _))| (n, tables)).collect(),
        }
    }

    pub fn used(&self) -> u64 {
        self.alloc.allocated
    }

    /// Redis's `overhead_total`.
    pub fn total(&self) -> u64 {
        let tables: u64 = self.dbs.iter().map(|(_, t)| (t.main + t.expires) as u64).sum();
        self.startup
            + self.replication_backlog
            + self.clients_replicas
            + self.clients_normal
            + self.cluster_links
            + self.aof_buffer
            + self.lua_caches
            + self.functions_caches
            + tables
    }

    pub fn dataset(&self) -> u64 {
        self.used().saturating_sub(self.total())
    }

    /// What the server holds beyond its start-up figure (at least 1).
    fn net_usage(&self) -> u64 {
        self.used().saturating_sub(self.startup).max(1)
    }

    pub fn dataset_percentage(&self) -> f64 {
        self.dataset() as f64 * 100.0 / self.net_usage() as f64
    }

    fn bytes_per_key(&self) -> u64 {
        self.net_usage().checked_div(self.keys).unwrap_or(0)
    }

    pub fn peak_percentage(&self) -> f64 {
        self.used() as f64 * 100.0 / self.peak.max(1) as f64
    }

    // The ratios and differences between the allocator's and the system's
    // figures, as INFO and MEMORY STATS name them.
    pub fn allocator_fragmentation(&self) -> (f64, i64) {
        ratio_and_difference(self.alloc.active, self.alloc.allocated)
    }

    pub fn allocator_rss(&self) -> (f64, i64) {
        ratio_and_difference(self.alloc.resident, self.alloc.active)
    }

    pub fn rss_overhead(&self) -> (f64, i64) {
        ratio_and_difference(self.rss, self.alloc.resident)
    }

    pub fn fragmentation(&self) -> (f64, i64) {
        ratio_and_difference(self.rss, self.used())
    }
}

fn ratio_and_difference(a: u64, b: u64) -> (f64, i64) {
    let ratio = if b == 0 { 0.0 } else { a as f64 / b as f64 };
    (ratio, a as i64 - b as i64)
}

/// MEMORY USAGE key [SAMPLES n]: the bytes the key costs: its name, its
/// entry in the table and what its value owns (Keel measures the whole
/// value, so SAMPLES is checked and otherwise ignored).
fn usage(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let mut j = 3;
    while j < argv.len() {
        if eq(argv[j], "samples") && j + 1 < argv.len() {
            if i64_arg(argv[j + 1])? < 0 {
                return Err(CmdError::Syntax);
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let key_len = argv[2].len();
    match object_lookup(ctx, argv[2]) {
        Some(entry) => {
            let bytes = key_len + std::mem::size_of::<Entry>() + entry.value.heap_size();
            ctx.out.int(bytes as i64);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// MEMORY STATS: Redis's fields, in Redis's order.
fn stats(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let o = Overhead::gather(ctx);
    let out = &mut ctx.out;
    out.map(27 + o.dbs.len());
    let int = |out: &mut keel_protocol::ReplyWriter<'_>, name: &str, value: u64| {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    };
    int(out, "peak.allocated", o.peak);
    int(out, "total.allocated", o.used());
    int(out, "startup.allocated", o.startup);
    int(out, "replication.backlog", o.replication_backlog);
    int(out, "clients.slaves", o.clients_replicas);
    int(out, "clients.normal", o.clients_normal);
    int(out, "cluster.links", o.cluster_links);
    int(out, "aof.buffer", o.aof_buffer);
    int(out, "lua.caches", o.lua_caches);
    int(out, "functions.caches", o.functions_caches);
    for (number, tables) in &o.dbs {
        out.bulk(format!("db.{number}").as_bytes());
        out.map(3);
        int(out, "overhead.hashtable.main", tables.main as u64);
        int(out, "overhead.hashtable.expires", tables.expires as u64);
        // A cluster node keeps a table per slot, not links from keys to
        // their slots: nothing to count beyond the tables above.
        int(out, "overhead.hashtable.slot-to-keys", 0);
    }
    int(out, "overhead.total", o.total());
    int(out, "keys.count", o.keys);
    int(out, "keys.bytes-per-key", o.bytes_per_key());
    int(out, "dataset.bytes", o.dataset());
    let signed = |out: &mut keel_protocol::ReplyWriter<'_>, name: &str, value: i64| {
        out.bulk(name.as_bytes());
        out.int(value);
    };
    let double = |out: &mut keel_protocol::ReplyWriter<'_>, name: &str, value: f64| {
        out.bulk(name.as_bytes());
        out.double(value);
    };
    double(out, "dataset.percentage", o.dataset_percentage());
    double(out, "peak.percentage", o.peak_percentage());
    int(out, "allocator.allocated", o.alloc.allocated);
    int(out, "allocator.active", o.alloc.active);
    int(out, "allocator.resident", o.alloc.resident);
    for (name, (ratio, bytes)) in [
        ("allocator-fragmentation", o.allocator_fragmentation()),
        ("allocator-rss", o.allocator_rss()),
        ("rss-overhead", o.rss_overhead()),
    ] {
        double(out, &format!("{name}.ratio"), ratio);
        signed(out, &format!("{name}.bytes"), bytes);
    }
    let (ratio, bytes) = o.fragmentation();
    double(out, "fragmentation", ratio);
    signed(out, "fragmentation.bytes", bytes);
    Ok(())
}

/// MEMORY DOCTOR: Redis's `getMemoryDoctorReport`, on Keel's figures.
fn doctor(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let o = Overhead::gather(ctx);
    let server = ctx.server;
    let replicas = server.repl.replicas().len() as u64;
    let clients = (server.clients.connected.load(Ordering::Relaxed) as u64).max(1);
    let findings = Findings {
        empty: o.used() < 5 << 20,
        big_peak: o.peak as f64 / o.used().max(1) as f64 > 1.5,
        high_frag: exceeds(o.fragmentation(), 1.4),
        high_alloc_frag: exceeds(o.allocator_fragmentation(), 1.1),
        high_alloc_rss: exceeds(o.allocator_rss(), 1.1),
        high_proc_rss: exceeds(o.rss_overhead(), 1.1),
        big_client_buf: o.clients_normal / clients > 200 << 10,
        big_replica_buf: replicas > 0 && o.clients_replicas > 10 << 20,
        many_scripts: server.scripts.cached().0 > 1000,
    };
    ctx.out.verbatim("txt", findings.report().as_bytes());
    Ok(())
}

/// A ratio above `limit` over more than 10 MB.
fn exceeds((ratio, bytes): (f64, i64), limit: f64) -> bool {
    ratio > limit && bytes > 10 << 20
}

/// What MEMORY DOCTOR found.
struct Findings {
    empty: bool,
    big_peak: bool,
    high_frag: bool,
    high_alloc_frag: bool,
    high_alloc_rss: bool,
    high_proc_rss: bool,
    big_client_buf: bool,
    big_replica_buf: bool,
    many_scripts: bool,
}

impl Findings {
    /// Redis's report, word for word: tools and people read it as Redis's.
    fn report(&self) -> String {
        if self.empty {
            return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in \
                    these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam \
                    and I will be back to our programming as soon as I finished rebooting.\n"
                .into();
        }
        let sections: [(bool, String); 8] = [
            (self.big_peak, PEAK.into()),
            (self.high_frag, HIGH_TOTAL_RSS.replace("{allocator}", crate::alloc::NAME)),
            (self.high_alloc_frag, ALLOCATOR_FRAGMENTATION.into()),
            (self.high_alloc_rss, ALLOCATOR_RSS.into()),
            (self.high_proc_rss, PROCESS_RSS.into()),
            (self.big_replica_buf, REPLICA_BUFFERS.into()),
            (self.big_client_buf, CLIENT_BUFFERS.into()),
            (self.many_scripts, MANY_SCRIPTS.into()),
        ];
        if sections.iter().all(|(found, _)| !found) {
            return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this \
                    base.\n"
                .into();
        }
        let mut s = String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
        for (_, text) in sections.iter().filter(|(found, _)| *found) {
            s.push_str(" * ");
            s.push_str(text);
            s.push_str("\n\n");
        }
        s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
        s
    }
}

const PEAK: &str = "Peak memory: In the past this instance used more than 150% the memory that is currently using. The \
    allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, \
    however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size \
    (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more \
    data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE \
    command, otherwise the only other option is to shutdown and restart the instance.";
const HIGH_TOTAL_RSS: &str = "High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 \
    (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations \
    Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry \
    above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the \
    problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator \
    and not the default libc malloc. Note: The currently used allocator is \"{allocator}\".";
const ALLOCATOR_FRAGMENTATION: &str = "High allocator fragmentation: This instance has an allocator external \
    fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak \
    memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. \
    You can try enabling 'activedefrag' config option.";
const ALLOCATOR_RSS: &str = "High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 \
    (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually \
    holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the \
    report), you can try the MEMORY PURGE command to reclaim it.";
const PROCESS_RSS: &str = "High process RSS overhead: This instance has non-allocator RSS memory overhead is greater \
    than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator \
    holds). This problem may be due to Lua scripts or Modules.";
const REPLICA_BUFFERS: &str = "Big replica buffers: The replica output buffers in this instance are greater than 10MB \
    for each replica (on average). This likely means that there is some replica instance that is struggling receiving \
    data, either because it is too slow or because of networking issues. As a result, data piles on the master output \
    buffers. Please try to identify what replica is not receiving data correctly and why. You can use the INFO output in \
    order to check the replicas delays and the CLIENT LIST command to check the output buffers of each replica.";
const CLIENT_BUFFERS: &str = "Big client buffers: The clients output buffers in this instance are greater than 200K per \
    client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not \
    receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with \
    large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order \
    to investigate the issue if it causes problems in your instance, or to understand better why certain clients are \
    using a big amount of memory.";
const MANY_SCRIPTS: &str = "Many scripts: There seem to be many cached scripts in this instance (more than 1000). This \
    may be because scripts are generated and `EVAL`ed, instead of being parameterized (with KEYS and ARGV), `SCRIPT \
    LOAD`ed and `EVALSHA`ed. Unless `SCRIPT FLUSH` is called periodically, the scripts' caches may end up consuming \
    most of your memory.";

fn malloc_stats(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let report = crate::alloc::report().map_err(|e| CmdError::other(format!("ERR {e}")))?;
    ctx.out.verbatim("txt", &report);
    Ok(())
}

fn purge(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    crate::alloc::purge().map_err(|_| CmdError::other("ERR Error purging dirty pages"))?;
    ctx.out.ok();
    Ok(())
}

fn help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> Findings {
        Findings {
            empty: false,
            big_peak: false,
            high_frag: false,
            high_alloc_frag: false,
            high_alloc_rss: false,
            high_proc_rss: false,
            big_client_buf: false,
            big_replica_buf: false,
            many_scripts: false,
        }
    }

    #[test]
    fn the_doctor_reports_what_it_found_in_redis_words() {
        assert!(none().report().starts_with("Hi Sam, I can't find any memory issue"));
        let empty = Findings { empty: true, big_peak: true, ..none() };
        assert!(empty.report().starts_with("Hi Sam, this instance is empty"), "empty wins over the rest");
        let found = Findings { big_peak: true, high_frag: true, many_scripts: true, ..none() }.report();
        assert!(found.starts_with("Sam, I detected a few issues"));
        let items: Vec<&str> = found.lines().filter(|l| l.starts_with(" * ")).collect();
        assert_eq!(items.len(), 3, "{found}");
        assert!(items[0].starts_with(" * Peak memory:") && items[2].starts_with(" * Many scripts:"));
        assert!(items[1].contains("\"jemalloc-5.3.0\""), "{}", items[1]);
        assert!(found.ends_with("\n\nI'm here to keep you safe, Sam. I want to help you.\n"));
    }

    #[test]
    fn ratios_over_nothing_are_zero() {
        assert_eq!(ratio_and_difference(10, 0), (0.0, 10));
        assert_eq!(ratio_and_difference(30, 20), (1.5, 10));
    }
}
