//! The command table and dispatch.
//!
//! One table holds every command's name, arity, flags and key positions;
//! `rename-command` changes the names clients call them by ([`Names`]).
//! It drives dispatch, shard locking (which shards a command must hold
//! while it runs), MULTI queueing, and COMMAND INFO/DOCS/GETKEYS, which
//! also report Redis's ACL categories, tips and key specs (`keyspec`) from
//! it. Commands are grouped by data type, one module each.

pub mod bitmaps;
pub mod blocking;
pub mod cluster;
pub mod connection;
pub mod digest;
pub mod dump;
pub mod geo;
pub mod hashes;
pub mod hyperloglog;
pub mod keys;
pub mod keyspec;
pub mod latency;
pub mod lists;
pub mod lolwut;
pub mod memory;
pub mod pubsub;
pub mod replication;
pub mod scripting;
pub mod server;
pub mod sets;
pub mod sort;
pub mod streams;
pub mod strings;
pub mod transactions;
pub mod users;
pub mod zsets;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use keel_engine::lfu::{self, Lfu};
use keel_engine::{Db, Entry, Keyspace, Locked, Shard, Shards};
use keel_protocol::ReplyWriter;
use smallvec::SmallVec;
use thiserror::Error;

use std::sync::atomic::Ordering;

use crate::client::{Client, ReplyMode};
use crate::server::{Server, WorkerStats};

/// Errors a command answers with. The text is Redis's, prefix included, so
/// that clients matching on it keep working.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CmdError {
    #[error("WRONGTYPE Operation against a key holding the wrong kind of value")]
    WrongType,
    #[error("ERR syntax error")]
    Syntax,
    #[error("ERR value is not an integer or out of range")]
    NotInteger,
    #[error("ERR value is not a valid float")]
    NotFloat,
    #[error("ERR increment or decrement would overflow")]
    Overflow,
    #[error("ERR no such key")]
    NoSuchKey,
    #[error("ERR wrong number of arguments for '{0}' command")]
    Arity(String),
    #[error("ERR unknown subcommand '{sub}'. Try {cmd} HELP.")]
    UnknownSubcommand { cmd: String, sub: String },
    #[error("ERR invalid expire time in '{0}' command")]
    InvalidExpire(String),
    #[error("ERR DB index is out of range")]
    DbIndexOutOfRange,
    /// Any other error: the full text, prefix included.
    #[error("{0}")]
    Other(String),
    /// An error already counted in errorstats where it happened (a
    /// script's command), answered as it is and counted only as the
    /// command's failed call (Redis's ERR_REPLY_FLAG_NO_STATS_UPDATE).
    #[error("{0}")]
    Counted(String),
}

impl CmdError {
    pub fn other(text: impl Into<String>) -> CmdError {
        CmdError::Other(text.into())
    }

    /// Adds the error to errorstats unless it was counted already.
    pub fn count(&self, server: &Server) {
        if !matches!(self, CmdError::Counted(_)) {
            server.count_error(&self.to_string());
        }
    }

    /// Redis's addReplySubcommandSyntaxError, for `argv[0] argv[1] ...`.
    pub fn subcommand_syntax(argv: &[&[u8]]) -> CmdError {
        let sub = argv[1];
        CmdError::Other(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
            String::from_utf8_lossy(&sub[..sub.len().min(128)]),
            String::from_utf8_lossy(argv[0]).to_ascii_uppercase()
        ))
    }

    /// The first word of the message (ERR, WRONGTYPE, ...), for INFO errorstats.
    pub fn prefix(text: &str) -> &str {
        text.split(' ').next().unwrap_or("ERR")
    }
}

pub type CmdResult = Result<(), CmdError>;
pub type Handler = fn(&mut Ctx<'_>, &[&[u8]]) -> CmdResult;

/// Command flags, with Redis's names (COMMAND INFO reports them).
pub mod flags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const NOSCRIPT: u32 = 1 << 4;
    pub const LOADING: u32 = 1 << 5;
    pub const STALE: u32 = 1 << 6;
    pub const SKIP_MONITOR: u32 = 1 << 7;
    pub const FAST: u32 = 1 << 8;
    pub const NO_AUTH: u32 = 1 << 9;
    pub const NO_MULTI: u32 = 1 << 10;
    pub const ALLOW_BUSY: u32 = 1 << 11;
    pub const BLOCKING: u32 = 1 << 12;
    pub const PUBSUB: u32 = 1 << 13;
    pub const SKIP_SLOWLOG: u32 = 1 << 14;
    pub const NO_ASYNC_LOADING: u32 = 1 << 15;
    /// A command whose key arguments may all be absent (EVAL with 0 keys).
    pub const NO_MANDATORY_KEYS: u32 = 1 << 16;
    /// Redis's `asking`: in cluster mode the command is served for a slot
    /// being imported after ASKING (RESTORE-ASKING); nothing outside it.
    pub const ASKING: u32 = 1 << 17;
    /// Keel's own: the command touches keys it cannot name up front
    /// (KEYS, DBSIZE, FLUSHALL...), so it locks every shard.
    pub const ALL_SHARDS: u32 = 1 << 24;
    /// Keel's own: the handler takes the shards it needs itself (WATCH,
    /// which beside a busy script leaves its keys to the script).
    pub const OWN_LOCKS: u32 = 1 << 25;

    /// The names in Redis's output order (`addReplyFlagsForCommand`);
    /// `movablekeys`, derived from the key specs, goes before `allow_busy`.
    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (ASKING, "asking"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MULTI, "no_multi"),
        (ALLOW_BUSY, "allow_busy"),
    ];
}

/// ACL categories, in Redis's order (COMMAND INFO lists them so). A
/// command's own are its group's unless its entry names others
/// (`CommandSpec::acl`); Redis adds the rest from its flags
/// (`server::acl_categories`).
pub mod acl {
    pub const NONE: u32 = 0;
    pub const KEYSPACE: u32 = 1 << 0;
    pub const READ: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const SET: u32 = 1 << 3;
    pub const SORTEDSET: u32 = 1 << 4;
    pub const LIST: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const STRING: u32 = 1 << 7;
    pub const BITMAP: u32 = 1 << 8;
    pub const HYPERLOGLOG: u32 = 1 << 9;
    pub const GEO: u32 = 1 << 10;
    pub const STREAM: u32 = 1 << 11;
    pub const PUBSUB: u32 = 1 << 12;
    pub const ADMIN: u32 = 1 << 13;
    pub const FAST: u32 = 1 << 14;
    pub const SLOW: u32 = 1 << 15;
    pub const BLOCKING: u32 = 1 << 16;
    pub const DANGEROUS: u32 = 1 << 17;
    pub const CONNECTION: u32 = 1 << 18;
    pub const TRANSACTION: u32 = 1 << 19;
    pub const SCRIPTING: u32 = 1 << 20;

    pub const NAMES: &[(u32, &str)] = &[
        (KEYSPACE, "keyspace"),
        (READ, "read"),
        (WRITE, "write"),
        (SET, "set"),
        (SORTEDSET, "sortedset"),
        (LIST, "list"),
        (HASH, "hash"),
        (STRING, "string"),
        (BITMAP, "bitmap"),
        (HYPERLOGLOG, "hyperloglog"),
        (GEO, "geo"),
        (STREAM, "stream"),
        (PUBSUB, "pubsub"),
        (ADMIN, "admin"),
        (FAST, "fast"),
        (SLOW, "slow"),
        (BLOCKING, "blocking"),
        (DANGEROUS, "dangerous"),
        (CONNECTION, "connection"),
        (TRANSACTION, "transaction"),
        (SCRIPTING, "scripting"),
    ];
}

/// Where a command's keys are among its arguments.
#[derive(Clone, Copy)]
pub enum Keys {
    None,
    /// Redis's legacy (first, last, step); a negative last counts from the end.
    Range { first: usize, last: isize, step: usize },
    /// Positions computed from the arguments (numkeys forms and the like).
    Custom(fn(&[&[u8]]) -> SmallVec<[usize; 4]>),
}

pub struct CommandSpec {
    /// Lower-case name.
    pub name: &'static str,
    /// Redis arity: N means exactly N arguments (name included), -N at least N.
    pub arity: i32,
    pub flags: u32,
    pub keys: Keys,
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
    pub handler: Handler,
    /// Container commands (CONFIG, CLIENT...): the subcommands, each named
    /// `parent|sub` as Redis 7 names them. The dispatcher picks one by
    /// `argv[1]` and checks its own arity, flags and keys; the parent's
    /// handler then never runs.
    pub subcommands: &'static [CommandSpec],
    /// Redis's command tips (COMMAND INFO, e.g. "nondeterministic_output").
    pub tips: &'static [&'static str],
    /// Redis's key specs; none for a command whose one spec is the one
    /// its `Keys::Range` implies (`keyspec::key_specs`).
    pub key_specs: &'static [keyspec::KeySpec],
    /// Redis's own ACL categories for the command (`acl::*`), where they
    /// are not just its group's.
    pub acl: Option<u32>,
    /// For a whole-keyspace (`ALL_SHARDS`) command: whether, with these
    /// arguments (`argv`, its name first), it reads the data. One whose
    /// reply reveals no key (CONFIG RESETSTAT, INFO without its keyspace
    /// section) says no: its reply then never waits for earlier writes to
    /// be durable, and so answers while a failed disk holds them.
    pub reads_data: fn(&[&[u8]]) -> bool,
}

impl CommandSpec {
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    pub fn arity_ok(&self, argc: usize) -> bool {
        let arity = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            argc == arity
        } else {
            argc >= arity
        }
    }

    /// Indexes of the keys in `argv`, in argument order.
    pub fn key_indexes(&self, argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
        match self.keys {
            Keys::None => SmallVec::new(),
            Keys::Range { first, last, step } => {
                let last = if last < 0 { argv.len() as isize + last } else { last };
                // Past the arguments there are no keys.
                let last = last.min(argv.len() as isize - 1);
                if last < first as isize {
                    return SmallVec::new();
                }
                // Most commands name one key, and this runs several times
                // per command: no iterator for them.
                if last == first as isize {
                    return smallvec::smallvec![first];
                }
                (first..=last as usize).step_by(step.max(1)).collect()
            }
            Keys::Custom(f) => f(argv),
        }
    }

    /// Adds subcommands (see `subcommands`).
    pub const fn subs(self, subcommands: &'static [CommandSpec]) -> CommandSpec {
        CommandSpec { subcommands, ..self }
    }

    /// Sets Redis's key specs (see `key_specs`).
    pub const fn specs(self, key_specs: &'static [keyspec::KeySpec]) -> CommandSpec {
        CommandSpec { key_specs, ..self }
    }

    /// Sets Redis's own ACL categories (see `acl`).
    pub const fn acl(self, categories: u32) -> CommandSpec {
        CommandSpec { acl: Some(categories), ..self }
    }

    /// Says when the command reads the data (`reads_data`); by default it
    /// always may.
    pub const fn reads_data_when(self, reads_data: fn(&[&[u8]]) -> bool) -> CommandSpec {
        CommandSpec { reads_data, ..self }
    }

    /// Adds Redis's command tips.
    pub const fn tips(self, tips: &'static [&'static str]) -> CommandSpec {
        CommandSpec { tips, ..self }
    }

    /// Adds COMMAND DOCS text: the one-line summary and the version since
    /// which Redis has the command.
    pub const fn doc(self, summary: &'static str, since: &'static str) -> CommandSpec {
        CommandSpec { summary, since, ..self }
    }

    /// The subcommand named `name` (the part after `|`), case-insensitively.
    pub fn subcommand(&self, name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        self.subcommands.iter().enumerate().find(|(_, s)| {
            let short = s.name.rsplit('|').next().unwrap_or(s.name);
            short.as_bytes().eq_ignore_ascii_case(name)
        })
    }
}

/// Shorthand for table entries.
pub const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: Keys,
    group: &'static str,
    handler: Handler,
) -> CommandSpec {
    CommandSpec {
        name,
        arity,
        flags,
        keys,
        group,
        summary: "",
        since: "1.0.0",
        handler,
        subcommands: &[],
        tips: &[],
        key_specs: &[],
        acl: None,
        reads_data: |_| true,
    }
}

/// Keys from `first` to `last` (negative counts from the end) every `step`.
pub const fn range(first: usize, last: isize, step: usize) -> Keys {
    Keys::Range { first, last, step }
}

/// The one key at argument 1.
pub const KEY1: Keys = Keys::Range { first: 1, last: 1, step: 1 };

pub struct Table {
    /// Top-level commands, in table order (COMMAND COUNT counts these).
    pub commands: Vec<&'static CommandSpec>,
    /// Indexes into `commands` by [`name_hash`], open addressing; `EMPTY`
    /// marks a free slot. Hand-written because lookup runs twice per
    /// request (prefetch and dispatch): std's map needed the name copied
    /// to lower case and checked as UTF-8 first, some 200 instructions a
    /// lookup under callgrind.
    by_name: Vec<u16>,
    /// Every command and subcommand: `commands` first, then each
    /// container's subcommands. Indexes into this are "stat indexes": the
    /// per-command statistics and a client's last command use them.
    pub all: Vec<&'static CommandSpec>,
    /// For each top-level command, where its subcommands start in `all`.
    sub_base: Vec<usize>,
}

impl Table {
    /// Finds a command by name, case-insensitively, without allocating.
    pub fn lookup(&self, name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        let mask = self.by_name.len() - 1;
        let mut at = name_hash(name) & mask;
        loop {
            let i = *self.by_name.get(at)?;
            if i == EMPTY {
                return None;
            }
            let spec = self.commands[usize::from(i)];
            if spec.name.as_bytes().eq_ignore_ascii_case(name) {
                return Some((usize::from(i), spec));
            }
            at = (at + 1) & mask;
        }
    }

    /// The stat index of subcommand `sub` of top-level command `parent`.
    pub fn sub_index(&self, parent: usize, sub: usize) -> usize {
        self.sub_base[parent] + sub
    }

    /// Number of stat indexes (commands and subcommands).
    pub fn stat_count(&self) -> usize {
        self.all.len()
    }
}

/// A free slot of `Table::by_name`.
const EMPTY: u16 = u16::MAX;

/// `Table::by_name` for `commands`: a quarter full, so probes are short.
fn index_names(commands: &[&'static CommandSpec]) -> Vec<u16> {
    let mut slots = vec![EMPTY; (commands.len() * 4).next_power_of_two()];
    let mask = slots.len() - 1;
    for (i, spec) in commands.iter().enumerate() {
        let mut at = name_hash(spec.name.as_bytes()) & mask;
        while slots[at] != EMPTY {
            at = (at + 1) & mask;
        }
        slots[at] = u16::try_from(i).expect("fewer commands than u16::MAX");
    }
    slots
}

/// FNV-1a of a name with its ASCII letters lowered (`| 0x20`, which also
/// moves a few other bytes: those only collide, and the lookup compares),
/// its high bits spread down by a Fibonacci multiply.
fn name_hash(name: &[u8]) -> usize {
    let fnv = name.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| (h ^ u64::from(b | 0x20)).wrapping_mul(0x100_0000_01b3));
    (fnv.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize
}

/// The names clients call the commands by once `rename-command` moved
/// some (Redis's `server.commands` beside `orig_commands`): a command
/// renamed to "" has none. Set once, at start.
pub struct Renamed {
    by_name: HashMap<String, usize, foldhash::fast::FixedState>,
    /// By table index: whether some name calls the command.
    callable: Vec<bool>,
}

static RENAMED: OnceLock<Renamed> = OnceLock::new();

impl Renamed {
    /// The table's names after `renames` in order, or Redis's error for
    /// the first that cannot apply.
    pub fn new(renames: &[(String, String)]) -> Result<Renamed, &'static str> {
        let mut by_name = table().commands.iter().enumerate().map(|(i, c)| (c.name.to_string(), i)).collect::<HashMap<_, _, _>>();
        for (from, to) in renames {
            let index = by_name.remove(&from.to_ascii_lowercase()).ok_or("No such command in rename-command")?;
            if !to.is_empty() && by_name.insert(to.to_ascii_lowercase(), index).is_some() {
                return Err("Target command name already exists");
            }
        }
        let mut callable = vec![false; table().commands.len()];
        by_name.values().for_each(|&i| callable[i] = true);
        Ok(Renamed { by_name, callable })
    }

    /// Makes these the names clients use, for the life of the process.
    pub fn install(self) {
        let _ = RENAMED.set(self);
    }

    fn lookup(&self, name: &[u8]) -> Option<usize> {
        let name = std::str::from_utf8(name).ok()?;
        // A renamed command's name can be long (a secret): no fixed buffer.
        match name.bytes().any(|b| b.is_ascii_uppercase()) {
            true => self.by_name.get(&name.to_ascii_lowercase()),
            false => self.by_name.get(name),
        }
        .copied()
    }
}

/// Which names a command is looked up by: a client's (after
/// `rename-command`), or those of what was logged or a master sent, where
/// a command's own name is understood too (Redis's
/// `lookupCommandOrOriginal`): Keel logs some commands by their own names
/// (a SET with a relative expiry as `SET ... PXAT`), whatever clients
/// call them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Client,
    Logged,
}

impl Names {
    /// The command `names` calls `name`: its index and spec.
    pub fn lookup(self, name: &[u8]) -> Option<(usize, &'static CommandSpec)> {
        let table = table();
        let Some(renamed) = RENAMED.get() else { return table.lookup(name) };
        match (renamed.lookup(name), self) {
            (Some(i), _) => Some((i, table.commands[i])),
            (None, Names::Client) => None,
            (None, Names::Logged) => table.lookup(name),
        }
    }

    /// The top-level commands some name calls, in table order (COMMAND
    /// lists these, by their own names, as Redis's does).
    pub fn commands(self) -> Vec<&'static CommandSpec> {
        let commands = table().commands.iter().copied();
        match (RENAMED.get(), self) {
            (Some(renamed), Names::Client) => commands.zip(&renamed.callable).filter(|(_, &callable)| callable).map(|(c, _)| c).collect(),
            _ => commands.collect(),
        }
    }

    /// The names a client's commands go by: a master's and the loader's
    /// are what was logged.
    pub fn of(client: &Client) -> Names {
        match client.is_master || client.is_loader {
            true => Names::Logged,
            false => Names::Client,
        }
    }
}

/// The answer to a command that needs the dataset while it loads.
pub const LOADING_ERROR: &str = "LOADING Keel is loading the dataset in memory";

pub fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        let commands: Vec<&'static CommandSpec> = [
            connection::COMMANDS,
            server::COMMANDS,
            latency::COMMANDS,
            cluster::COMMANDS,
            keys::COMMANDS,
            memory::COMMANDS,
            lolwut::COMMANDS,
            dump::COMMANDS,
            strings::COMMANDS,
            bitmaps::COMMANDS,
            hyperloglog::COMMANDS,
            lists::COMMANDS,
            blocking::COMMANDS,
            hashes::COMMANDS,
            sets::COMMANDS,
            zsets::COMMANDS,
            geo::COMMANDS,
            streams::COMMANDS,
            pubsub::COMMANDS,
            replication::COMMANDS,
            sort::COMMANDS,
            scripting::COMMANDS,
            transactions::COMMANDS,
            users::COMMANDS,
        ]
        .iter()
        .flat_map(|group| group.iter())
        .collect();
        let by_name = index_names(&commands);
        let mut all = commands.clone();
        let mut sub_base = Vec::with_capacity(commands.len());
        for c in &commands {
            sub_base.push(all.len());
            all.extend(c.subcommands.iter());
        }
        Table { commands, by_name, all, sub_base }
    })
}

/// The databases a running command may touch: the shards it locked, seen
/// through the client's selected database.
pub struct Dbs<'a> {
    pub keyspace: &'a Keyspace,
    pub locked: Locked<'a>,
    pub selected: usize,
}

impl<'a> Dbs<'a> {
    /// The selected database in the shard that holds `key`.
    pub fn of(&mut self, key: &[u8]) -> &mut Db {
        let selected = self.selected;
        self.locked.shard_for(self.keyspace, key).db(selected)
    }

    /// Database `db` in the shard that holds `key`.
    pub fn of_in(&mut self, db: usize, key: &[u8]) -> &mut Db {
        self.locked.shard_for(self.keyspace, key).db(db)
    }

    /// Every locked shard (all of them for ALL_SHARDS commands).
    pub fn shards(&mut self) -> impl Iterator<Item = &mut Shard> + use<'_, 'a> {
        self.locked.iter_mut()
    }

    pub fn shard(&mut self, index: usize) -> &mut Shard {
        self.locked.shard(index)
    }
}

/// Everything a command handler sees.
pub struct Ctx<'a> {
    pub server: &'a Server,
    /// The counters of the worker running this command.
    pub stats: &'a WorkerStats,
    pub client: &'a mut Client,
    pub out: ReplyWriter<'a>,
    pub dbs: Dbs<'a>,
    /// The time this command runs at (cached once per command, as Redis does).
    pub now_ms: u64,
    /// How this command's lookups record an access to a key.
    pub access: Access,
    /// The access word of a key this command creates (`Entry::access_s`).
    pub lru_s: u32,
    /// Changes the running command made (its share of `dirty`); a Cell so
    /// that handlers holding shared borrows can count.
    pub changes: std::cell::Cell<u64>,
    /// What the command logs to the journal and what its reply depends on.
    pub durability: crate::durability::Pending,
    /// Whether a blocking command may block (not when serving a blocked
    /// client, nor inside EXEC: see `can_block`).
    pub may_block: bool,
    /// Messages PUBLISH and keyspace events addressed to other
    /// connections, sent once the command (or its transaction) is logged
    /// (`pubsub::deliver`).
    pub published: Vec<crate::pubsub::Delivery>,
    /// A Lua script runs this command (Redis's CLIENT_SCRIPT).
    pub in_script: bool,
    /// The running script called a read-only command: a tracking caller
    /// then tracks the script's declared keys, as Redis's `script_caller`.
    pub script_read: bool,
}

impl<'a> Ctx<'a> {
    pub fn new(
        server: &'a Server,
        stats: &'a WorkerStats,
        client: &'a mut Client,
        wbuf: &'a mut Vec<u8>,
        locked: Locked<'a>,
        now_ms: u64,
    ) -> Ctx<'a> {
        let access = Access::of(server, now_ms);
        Ctx {
            server,
            stats,
            out: ReplyWriter::new(wbuf, client.resp3),
            dbs: Dbs { keyspace: &server.keyspace, locked, selected: client.db },
            client,
            now_ms,
            access,
            lru_s: access.new_key(),
            changes: std::cell::Cell::new(0),
            durability: Default::default(),
            may_block: true,
            published: Vec::new(),
            in_script: false,
            script_read: false,
        }
    }

    /// Whether a blocking command that finds nothing may block the client;
    /// inside a transaction it answers at once, as Redis does.
    pub fn can_block(&self) -> bool {
        self.may_block && !self.durability.in_transaction
    }

    /// Every write of every command ends here: `changes` is what Redis adds
    /// to `server.dirty` (INFO rdb_changes_since_last_save), and a non-zero
    /// count makes `run` record the command in the journal.
    pub fn wrote(&self, changes: u64) {
        self.server.dirty.fetch_add(changes, Ordering::Relaxed);
        self.changes.set(self.changes.get() + changes);
    }

    /// Where small collections switch encodings (the `*-max-listpack-*`
    /// directives), as configured now.
    pub fn encoding_limits(&self) -> keel_engine::EncodingLimits {
        self.server.config.read().encoding
    }

    /// Replaces what the running command logs to the journal (and later
    /// sends to replicas): for commands whose effect is not reproduced by
    /// replaying them as they came (SPOP picks at random, a blocking pop
    /// served later logs the pop it made).
    pub fn propagate_as(&mut self, commands: Vec<Vec<Vec<u8>>>) {
        self.durability.replaced = Some(commands);
    }

    /// Logs the memcached flags of the key the running command wrote after
    /// its record, so that a replay gives them back (none for 0).
    pub fn log_item_flags(&mut self, flags: u32) {
        self.durability.item_flags = (flags != 0).then_some(flags);
    }

    /// A keyspace event on `key` of the selected database, where Redis
    /// calls notifyKeyspaceEvent (`crate::notify`); one relaxed load when
    /// notifications are off.
    pub fn notify(&mut self, class: u32, event: &str, key: &[u8]) {
        let db = self.dbs.selected;
        self.notify_in(db, class, event, key);
    }

    /// The event of a command that removed elements of `key`, then the
    /// generic `del` when that emptied the collection (and so deleted it).
    pub fn notify_removal(&mut self, class: u32, event: &str, key: &[u8], emptied: bool) {
        self.notify(class, event, key);
        if emptied {
            self.notify(crate::notify::GENERIC, "del", key);
        }
    }

    /// As `notify`, in database `db` (MOVE, COPY ... DB).
    pub fn notify_in(&mut self, db: usize, class: u32, event: &str, key: &[u8]) {
        let flags = self.server.notify_flags.load(Ordering::Relaxed);
        // Redis announces an expiry at the lookup and a new key as it
        // adds it, both before the event of the command that did so.
        if flags & crate::notify::EXPIRED != 0 {
            self.take_expired();
        }
        if flags & crate::notify::NEW != 0 {
            self.notify_created();
        }
        if flags & class != 0 {
            crate::notify::event(self.server, class, event, key, db, &mut self.published);
        }
    }

    /// Takes the keys found expired so far from the locked shards, for
    /// `durability::log_expired` to journal, and announces them.
    pub fn take_expired(&mut self) {
        let first = self.durability.expired.len();
        for shard in self.dbs.shards() {
            shard.drain_expired(|db, key| self.durability.expired.push((db, key)));
        }
        for (db, key) in &self.durability.expired[first..] {
            crate::notify::event(self.server, crate::notify::EXPIRED, "expired", key, *db, &mut self.published);
        }
    }

    /// `new` for the keys created so far: Redis sends it as it creates a
    /// key, before the event of the command that did.
    pub fn notify_created(&mut self) {
        let mut created = Vec::new();
        for shard in self.dbs.shards() {
            shard.drain_created(|db, key| created.push((db, key)));
        }
        for (db, key) in created {
            crate::notify::event(self.server, crate::notify::NEW, "new", &key, db, &mut self.published);
        }
    }
}

/// A request's command, with the shard of its one key where it names
/// one: found once per request (`worker::process`) for both the prefetch
/// of its key and its run, each of which would otherwise look the name up
/// and hash the key again.
#[derive(Clone, Copy)]
pub struct Resolved {
    /// The stat index.
    pub index: usize,
    pub spec: &'static CommandSpec,
    /// `shards_for`'s answer where that is one shard.
    shard: Option<usize>,
    /// Where its first key is in `argv`, if it names one.
    first_key: Option<usize>,
}

impl Resolved {
    /// `resolve_by`, without the error: what fails to resolve is resolved
    /// again where its error is answered.
    pub fn find(keyspace: &Keyspace, names: Names, argv: &[&[u8]]) -> Option<Resolved> {
        if argv.is_empty() {
            return None;
        }
        let (index, spec) = resolve_by(names, argv).ok()?;
        let keys = spec.key_indexes(argv);
        // As `shards_for` decides.
        let shard = match keys.as_slice() {
            [one] if !spec.has(flags::ALL_SHARDS | flags::OWN_LOCKS) => Some(keyspace.shard_of_key(argv[*one])),
            _ => None,
        };
        Some(Resolved { index, spec, shard, first_key: keys.first().copied() })
    }

    /// A command looked up by other means (a memcached request's).
    pub fn of((index, spec): (usize, &'static CommandSpec)) -> Resolved {
        Resolved { index, spec, shard: None, first_key: None }
    }

    /// The first key of `argv`, the request this resolved, with its shard.
    pub fn first_key<'a>(&self, keyspace: &Keyspace, argv: &[&'a [u8]]) -> Option<(&'a [u8], usize)> {
        let key = argv[self.first_key?];
        Some((key, self.shard.unwrap_or_else(|| keyspace.shard_of_key(key))))
    }

    fn shards(&self, keyspace: &Keyspace, argv: &[&[u8]]) -> Shards {
        match self.shard {
            Some(shard) => Shards::One(shard),
            None => shards_for(keyspace, self.spec, argv),
        }
    }
}

/// The shards `spec` needs for `argv`.
pub fn shards_for(keyspace: &Keyspace, spec: &CommandSpec, argv: &[&[u8]]) -> Shards {
    if spec.has(flags::ALL_SHARDS) {
        return Shards::All;
    }
    if spec.has(flags::OWN_LOCKS) {
        return Shards::Some(SmallVec::new());
    }
    match spec.key_indexes(argv).as_slice() {
        [one] => Shards::One(keyspace.shard_of_key(argv[*one])),
        keys => Shards::Some(keys.iter().map(|&i| keyspace.shard_of_key(argv[i])).collect()),
    }
}

/// Looks `argv[0]` up by a client's names (and `argv[1]` for container
/// commands) and checks the arity, answering Redis's errors. The index
/// is the stat index.
pub fn resolve(argv: &[&[u8]]) -> Result<(usize, &'static CommandSpec), CmdError> {
    resolve_by(Names::Client, argv)
}

/// [`resolve`] by the given names.
pub fn resolve_by(names: Names, argv: &[&[u8]]) -> Result<(usize, &'static CommandSpec), CmdError> {
    let (index, spec) = lookup(names, argv)?;
    if !spec.arity_ok(argv.len()) {
        return Err(CmdError::Arity(spec.name.to_string()));
    }
    Ok((index, spec))
}

/// [`resolve_by`] without the arity check: Redis's lookupCommand, whose
/// command a wrong arity counts as a rejected call.
fn lookup(names: Names, argv: &[&[u8]]) -> Result<(usize, &'static CommandSpec), CmdError> {
    let name = argv[0];
    let table = table();
    let Some((index, spec)) = names.lookup(name) else {
        return Err(unknown_command(argv));
    };
    if spec.subcommands.is_empty() || argv.len() < 2 {
        return Ok((index, spec));
    }
    let Some((sub, subspec)) = spec.subcommand(argv[1]) else {
        return Err(CmdError::UnknownSubcommand {
            cmd: String::from_utf8_lossy(name).to_ascii_uppercase(),
            sub: String::from_utf8_lossy(&argv[1][..argv[1].len().min(128)]).into_owned(),
        });
    };
    Ok((table.sub_index(index, sub), subspec))
}

fn unknown_command(argv: &[&[u8]]) -> CmdError {
    let mut args = String::new();
    for a in argv[1..].iter().take(128) {
        args.push_str(&format!("'{}' ", String::from_utf8_lossy(&a[..a.len().min(128)])));
    }
    CmdError::Other(format!(
        "ERR unknown command '{}', with args beginning with: {args}",
        String::from_utf8_lossy(&argv[0][..argv[0].len().min(128)])
    ))
}

/// Helpers shared by command modules.
pub mod parse {
    use super::CmdError;

    /// Redis's `string2ll`: canonical decimal only ("+1", "01", " 1" fail).
    pub fn i64_arg(arg: &[u8]) -> Result<i64, CmdError> {
        keel_engine::value::parse_canonical_i64(arg).ok_or(CmdError::NotInteger)
    }

    pub fn f64_arg(arg: &[u8]) -> Result<f64, CmdError> {
        parse_f64(arg).ok_or(CmdError::NotFloat)
    }

    /// Redis's `string2ld`/`strtold` acceptance: no spaces, no empty, no
    /// NaN; "inf" and "-inf" allowed.
    pub fn parse_f64(arg: &[u8]) -> Option<f64> {
        let s = std::str::from_utf8(arg).ok()?;
        if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
            return None;
        }
        let v: f64 = match s.to_ascii_lowercase().as_str() {
            "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
            "-inf" | "-infinity" => f64::NEG_INFINITY,
            _ => s.parse().ok()?,
        };
        (!v.is_nan()).then_some(v)
    }

    pub fn eq(arg: &[u8], word: &str) -> bool {
        arg.eq_ignore_ascii_case(word.as_bytes())
    }
}

/// Commands that act on the transaction itself rather than being queued.
/// How an entry records that it was accessed: Redis's robj `lru` field,
/// which holds the LRU clock (OBJECT IDLETIME), or under an LFU
/// `maxmemory-policy` a decaying logarithmic counter (OBJECT FREQ).
#[derive(Debug, Clone, Copy)]
pub enum Access {
    Lru(u32),
    Lfu(Lfu),
}

impl Access {
    fn of(server: &Server, now_ms: u64) -> Access {
        match server.lfu_params() {
            Some((factor, decay)) => Access::Lfu(Lfu::new(now_ms, factor, decay)),
            None => Access::Lru(server.lru_s()),
        }
    }

    /// The access word of a key created now.
    pub fn new_key(self) -> u32 {
        match self {
            Access::Lru(now_s) => now_s,
            Access::Lfu(lfu) => lfu.word(lfu::INIT),
        }
    }

    /// Records one access to `entry`.
    pub fn touch(self, entry: &mut Entry) {
        entry.access_s = match self {
            Access::Lru(now_s) => now_s,
            Access::Lfu(lfu) => lfu.touched(entry.access_s, rand::random()),
        };
    }
}

/// Whether a command's lookups count as accesses to the keys it names: all
/// but those Redis runs with `LOOKUP_NOTOUCH`, and WATCH, which looks
/// nothing up. Keel records the access once
/// per key before the command runs (a key the command creates starts
/// fresh), where Redis does it inside each lookup.
fn touches_keys(spec: &CommandSpec) -> bool {
    !matches!(spec.name, "exists" | "type" | "ttl" | "pttl" | "expiretime" | "pexpiretime" | "memory|usage" | "watch")
        && !spec.name.starts_with("object|")
}

/// Redis's reply to a command that may grow memory past `maxmemory`.
pub(crate) const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// Redis's `shared.noreplicaserr`.
const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";
/// Redis's `shared.roslaveerr`.
pub const READONLY_REPLICA: &str = "READONLY You can't write against a read only replica.";
/// Redis's `shared.masterdownerr`.
const MASTERDOWN: &str = "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.";

/// What Redis's processCommand refuses before running or queueing a
/// command with `flags` (for EXEC, with its queued commands' too; for a
/// script, those it declares), in its order: memory (`oom`: past
/// `maxmemory` with nothing left to evict when the command began,
/// `Client::oom`), then a failed disk (a save, the journal), then missing
/// replicas, then a read-only replica, then a stale one (for a command
/// without the `stale` flag). The master's link (`replica.rs`) is refused
/// none.
pub(crate) fn refusal(server: &Server, from_master: bool, oom: bool, flags: u32, ping: bool) -> Option<Cow<'static, str>> {
    if from_master {
        return None;
    }
    let write = flags & flags::WRITE != 0;
    if flags & flags::DENYOOM != 0 && oom {
        Some(OOM.into())
    } else if let Some(error) = (write || ping).then(|| disk_refusal(server, write)).flatten() {
        Some(error)
    } else if write && server.min_replicas_unmet.load(Ordering::Relaxed) && !server.replica.is_replica() {
        // A replica takes its writes from its master: Redis counts no
        // replicas of its own then.
        Some(NOREPLICAS.into())
    } else if write && server.replica.refuses_writes() {
        Some(READONLY_REPLICA.into())
    } else if flags & flags::STALE == 0 && server.replica.is_stale() {
        Some(MASTERDOWN.into())
    } else {
        None
    }
}

/// Why writes are refused for want of a disk (a failed BGSAVE, a journal
/// that cannot write), if they are. Unless for a `write`, a journal only
/// behind its disk (Keel's back-pressure, `JournalError::Backlog`) refuses
/// nothing: Redis refuses PING for a failed disk, so that monitoring sees
/// it, and a busy one is not failed.
pub(crate) fn disk_refusal(server: &Server, write: bool) -> Option<Cow<'static, str>> {
    if crate::snapshot::refuses_writes(server) {
        return Some(crate::snapshot::MISCONF_RDB.into());
    }
    let error = server.journal()?.health().err()?;
    let failed = matches!(error, keel_journal::JournalError::Poisoned(_));
    (write || failed).then(|| crate::durability::misconf(&error).into())
}

fn runs_inside_multi(spec: &CommandSpec) -> bool {
    matches!(spec.name, "exec" | "discard" | "multi" | "watch" | "quit" | "reset")
}

/// Executes one request at time `now_ms` (read once per batch of
/// pipelined requests: a clock read per command is measurable) and appends
/// its reply to `wbuf`. Returns the journal position the reply depends on
/// (0: none).
pub fn execute(server: &Server, stats: &WorkerStats, client: &mut Client, wbuf: &mut Vec<u8>, argv: &[&[u8]], now_ms: u64) -> u64 {
    execute_resolved(server, stats, client, wbuf, argv, now_ms, None)
}

/// [`execute`] of a request whose command was found already: `resolved`
/// is [`Resolved::find`] of `argv` by the client's names, or None to look
/// it up here.
pub fn execute_resolved(
    server: &Server,
    stats: &WorkerStats,
    client: &mut Client,
    wbuf: &mut Vec<u8>,
    argv: &[&[u8]],
    now_ms: u64,
    resolved: Option<Resolved>,
) -> u64 {
    let mut lsn = 0;
    let reply_start = wbuf.len();
    if client.reply == ReplyMode::SkipNext {
        client.reply = ReplyMode::Skipping;
    }
    if let Err(e) = dispatch(server, stats, client, wbuf, argv, now_ms, &mut lsn, resolved) {
        e.count(server);
        ReplyWriter::new(wbuf, client.resp3).error(&e.to_string());
    }
    // Pub/sub frames come first in a reply, and are not replies.
    let kept = std::mem::take(&mut client.pushed_to).max(reply_start);
    match client.reply {
        ReplyMode::On | ReplyMode::SkipNext => {}
        ReplyMode::Off => wbuf.truncate(kept),
        ReplyMode::Skipping => {
            wbuf.truncate(kept);
            client.reply = ReplyMode::On;
        }
    }
    // Invalidations of what this command changed, the client's own after
    // its reply, even under CLIENT REPLY OFF (Redis's
    // trackingHandlePendingKeyInvalidations after the top-level call).
    if server.tracking.active() {
        crate::tracking::flush(server, Some((client.id, wbuf)));
    }
    if client.info.kill.load(Ordering::Relaxed) {
        client.close_after_reply = true;
    }
    // CLIENT CACHING lasts one command (any CLIENT subcommand keeps it),
    // or one transaction; ASKING likewise. Known by the command, whatever
    // `rename-command` calls it.
    let ran = |client: &Client, name: &str| Names::of(client).lookup(argv[0]).is_some_and(|(_, spec)| spec.name == name);
    if client.caching && client.multi.is_none() && !ran(client, "client") {
        client.caching = false;
    }
    if client.asking && client.multi.is_none() && !ran(client, "asking") {
        client.asking = false;
    }
    lsn
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    server: &Server,
    stats: &WorkerStats,
    client: &mut Client,
    wbuf: &mut Vec<u8>,
    argv: &[&[u8]],
    now_ms: u64,
    lsn: &mut u64,
    found: Option<Resolved>,
) -> CmdResult {
    let names = Names::of(client);
    let resolved = match found {
        Some(found) => Ok((found.index, found.spec)),
        None => resolve_by(names, argv),
    };
    // Redis's `lastcmd`, CLIENT LIST's `cmd`: the command being run (or
    // queued, or refused), not the one before it.
    if let Ok((index, spec)) = resolved {
        client.info.last_cmd.store(index as u16 + 1, Ordering::Relaxed);
        // A RESP2 subscriber cannot be in MULTI: MULTI is refused here.
        if !client.resp3 && client.subscriptions.any() && !pubsub::allowed_while_subscribed(spec.name) {
            stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
            return Err(CmdError::other(format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                spec.name
            )));
        }
    }
    let (index, spec) = match resolved {
        Ok(found) => found,
        Err(e) => {
            if let (CmdError::Arity(_), Ok((index, _))) = (&e, lookup(names, argv)) {
                stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(multi) = client.multi.as_mut() {
                multi.aborted = true;
            }
            return Err(e);
        }
    };
    // Redis's processCommand order: authentication, a command MULTI
    // refuses, then the ACL, then the rest; a refusal inside MULTI makes
    // EXEC abort.
    let authenticated = client.authenticated || server.acl.default_open();
    if !authenticated && !spec.has(flags::NO_AUTH) {
        stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
        return Err(CmdError::other("NOAUTH Authentication required."));
    }
    if let Some(multi) = client.multi.as_mut() {
        if spec.has(flags::NO_MULTI) {
            multi.aborted = true;
            return Err(CmdError::other("ERR Command not allowed inside a transaction"));
        }
    }
    // One relaxed load for a user that may do everything.
    if client.user.as_ref().is_some_and(|u| !u.unrestricted()) {
        let context = if client.multi.is_some() { crate::acl::Context::Multi } else { crate::acl::Context::Toplevel };
        if let Err(denied) = check_acl(server, client, index, spec, argv, context) {
            stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
            if let Some(multi) = client.multi.as_mut() {
                multi.aborted = true;
            }
            return Err(CmdError::other(denied.error(spec)));
        }
    }
    // Cluster mode: a key of another node's slot is redirected there;
    // EXEC is judged by its whole transaction.
    if server.cluster.is_some() && !client.is_master && !client.is_loader {
        let exec = spec.name == "exec";
        let queued = client.multi.as_ref().filter(|_| exec);
        let exists = |key: &[u8]| crate::cluster::key_exists(server, key);
        if let Some(error) = crate::cluster::redirect(server, client, spec, argv, queued, exists) {
            stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
            if exec {
                transactions::discard_state(server, client);
            } else if let Some(multi) = client.multi.as_mut() {
                multi.aborted = true;
            }
            return Err(CmdError::other(error));
        }
    }
    // As Redis, room is made under `maxmemory` before any command runs or
    // queues, and what the command may do is judged by it.
    client.oom = crate::evict::perform(server) == crate::evict::Outcome::Fail;
    // Keys evicted, or forgotten by a table over its limit, are told of
    // before the command's reply (Redis's processCommand).
    if server.tracking.active() {
        if server.tracking.clients() > 0 {
            crate::tracking::limit(server);
        }
        crate::tracking::flush(server, Some((client.id, wbuf)));
        client.pushed_to = wbuf.len();
    }
    let ping = spec.name == "ping";
    // What the master sends and what the journal replays is obeyed, never
    // refused: Redis's master and AOF clients skip processCommand's checks.
    let obeyed = client.is_master || client.is_loader;
    if let Some(multi) = client.multi.as_mut() {
        // Refused, not queued, beside a busy script: the transaction
        // aborts, as Redis's rejectCommand flags it.
        if let Some(error) = crate::scripting::busy_refusal(server, spec).filter(|_| !client.is_master && spec.name != "exec") {
            multi.aborted = true;
            return Err(reject(server, stats, client, index, spec, error));
        }
        if !runs_inside_multi(spec) {
            // A script is queued with the flags it declares, as Redis's
            // getCommandFlags gives them to its MULTI state: EXEC is then
            // refused as a whole, not halfway, where the script would be.
            let own = crate::scripting::effective_flags(server, spec, argv);
            // Queueing itself takes memory: anything is refused past the
            // limit (Redis's reject_cmd_on_oom in MULTI).
            if let Some(error) = refusal(server, obeyed, client.oom, own | flags::DENYOOM, ping) {
                multi.aborted = true;
                return Err(CmdError::other(error));
            }
            let queued: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
            multi.bytes += queued.iter().map(|a| a.len() + std::mem::size_of::<Vec<u8>>()).sum::<usize>()
                + std::mem::size_of::<Vec<Vec<u8>>>();
            multi.queued.push(queued);
            multi.flags |= own;
            multi.all_stale &= own & flags::STALE != 0;
            client.info.multi_len.store(multi.queued.len() as u64, Ordering::Relaxed);
            client.info.multi_mem.store(multi.bytes as u64, Ordering::Relaxed);
            ReplyWriter::new(wbuf, client.resp3).simple("QUEUED");
            return Ok(());
        }
    }
    // EXEC answers for what it would run: it is `stale` only if all of it is.
    let queued = client.multi.as_ref().filter(|_| spec.name == "exec");
    let mut flags = spec.flags | queued.map_or(0, |m| m.flags);
    if queued.is_some_and(|m| !m.all_stale) {
        flags &= !flags::STALE;
    }
    let mut refused = refusal(server, obeyed, client.oom, flags, ping);
    // A script is refused by the flags it declares, as a command that
    // writes, may grow memory or may not run stale would be; they are
    // looked up only when such a command would be refused.
    let strictest = (flags | flags::WRITE | flags::DENYOOM) & !flags::STALE;
    if refused.is_none() && spec.group == "scripting" && refusal(server, obeyed, client.oom, strictest, ping).is_some() {
        if let Some(declared) = crate::scripting::declared_flags(server, spec, argv) {
            refused = refusal(server, obeyed, client.oom, crate::scripting::command_flags(flags, declared), ping);
        }
    }
    if let Some(error) = refused {
        return Err(reject(server, stats, client, index, spec, &error));
    }
    // A busy script holds every shard: answer rather than wait for them.
    // The master's stream waits instead, as Redis defers it until the
    // script ends (answering it -BUSY would lose the command).
    if let Some(error) = crate::scripting::busy_refusal(server, spec).filter(|_| !client.is_master) {
        return Err(reject(server, stats, client, index, spec, error));
    }
    // The master's stream waits for the shards a load holds rather than
    // losing a command to -LOADING.
    if server.loading.load(Ordering::Relaxed) && !client.is_loader && !client.is_master && !spec.has(flags::LOADING) {
        stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
        return Err(CmdError::other(LOADING_ERROR));
    }
    // An async load serves the old data; what would disturb it waits.
    if spec.has(flags::NO_ASYNC_LOADING) && server.async_loading.load(Ordering::Relaxed) {
        stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
        return Err(CmdError::other(LOADING_ERROR));
    }
    // A MONITOR client is a replica to Redis: it may not touch keys.
    if client.info.monitor.load(Ordering::Relaxed) && spec.has(flags::WRITE | flags::READONLY) {
        stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
        return Err(CmdError::other("ERR Replica can't interact with the keyspace"));
    }
    let resolved = found.unwrap_or(Resolved::of((index, spec)));
    run_locked(server, stats, client, wbuf, resolved, argv, now_ms, lsn, spec.handler)
}

/// Checks `argv` against the client's user, logging a denial in the ACL
/// log (Redis's ACLCheckAllPerm and addACLLogEntry).
pub(crate) fn check_acl(
    server: &Server,
    client: &Client,
    index: usize,
    spec: &CommandSpec,
    argv: &[&[u8]],
    context: crate::acl::Context,
) -> Result<(), crate::acl::Denied> {
    let Some(user) = &client.user else { return Ok(()) };
    let denied = match user.check(index, spec, argv) {
        Ok(()) => return Ok(()),
        Err(denied) => denied,
    };
    let object = match denied {
        crate::acl::Denied::Command => spec.name.as_bytes(),
        crate::acl::Denied::Key(at) | crate::acl::Denied::Channel(at) => argv[at],
    };
    let info = connection::client_line(&client.info, crate::server::unix_ms());
    server.acl.log(denied.into(), context, object, &user.name, info);
    Err(denied)
}

/// Runs `handler` as the command `spec` with `argv`: under the locks of
/// `argv`'s keys, then logs what it changed, delivers the messages it
/// published, feeds MONITOR and serves the clients its writes unblocked.
/// `lsn` is the journal position the reply depends on. The memcached
/// commands run through here as the Redis commands they stand for.
#[allow(clippy::too_many_arguments)]
pub fn run_locked(
    server: &Server,
    stats: &WorkerStats,
    client: &mut Client,
    wbuf: &mut Vec<u8>,
    resolved: Resolved,
    argv: &[&[u8]],
    now_ms: u64,
    lsn: &mut u64,
    handler: impl FnOnce(&mut Ctx<'_>, &[&[u8]]) -> CmdResult,
) -> CmdResult {
    let Resolved { index, spec, .. } = resolved;
    let claim = (spec.has(flags::ALL_SHARDS) && spec.group == "scripting").then(|| server.scripts.run.claim());
    let shards = resolved.shards(&server.keyspace, argv);
    let locked = crate::scripting::lock_or_busy(server, (client.is_master, claim.is_some()), shards).inspect_err(|_| {
        stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
    })?;
    let mut ctx = Ctx::new(server, stats, client, wbuf, locked, now_ms);
    crate::durability::check_writable(server, spec, ctx.client.is_master)?;
    let result = run_with(&mut ctx, index, spec, argv, handler);
    *lsn = crate::durability::commit(&mut ctx);
    if !ctx.published.is_empty() {
        crate::pubsub::deliver(server, std::mem::take(&mut ctx.published));
    }
    feed_monitors(server, ctx.client, spec, argv, false);
    if server.blocking.any() {
        let ready = crate::blocking::take_ready(&mut ctx);
        // Serving takes the locks each served command needs: ours go first.
        drop(ctx);
        if !ready.is_empty() {
            crate::blocking::serve(server, stats, ready);
        }
    }
    result
}

/// Counts a refused command; a refused EXEC also ends its transaction
/// (Redis's rejectCommand and execCommandAbort).
fn reject(server: &Server, stats: &WorkerStats, client: &mut Client, index: usize, spec: &CommandSpec, error: &str) -> CmdError {
    stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
    if spec.name == "exec" {
        transactions::discard_state(server, client);
        return CmdError::other(format!("EXECABORT Transaction discarded because of: {error}"));
    }
    CmdError::other(error)
}

/// Runs a resolved command under the locks `ctx` already holds, counting
/// it in the per-command statistics.
pub fn run(ctx: &mut Ctx<'_>, index: usize, spec: &CommandSpec, argv: &[&[u8]]) -> CmdResult {
    run_with(ctx, index, spec, argv, spec.handler)
}

/// Calls the handler of the command `argv` names, within another's run
/// (a memcached request running as that command).
pub fn run_handler(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (_, spec) = table().lookup(argv[0]).ok_or_else(|| unknown_command(argv))?;
    (spec.handler)(ctx, argv)
}

/// `run` with `handler` in place of the command's own.
fn run_with(
    ctx: &mut Ctx<'_>,
    index: usize,
    spec: &CommandSpec,
    argv: &[&[u8]],
    handler: impl FnOnce(&mut Ctx<'_>, &[&[u8]]) -> CmdResult,
) -> CmdResult {
    let started = std::time::Instant::now();
    // A running snapshot must see the keys a write names as they were at
    // its start (`rewrite.rs`); one relaxed load when none runs.
    if spec.has(flags::WRITE) && ctx.server.snapshot_active.load(Ordering::Relaxed) {
        crate::rewrite::preserve_keys(ctx, spec, argv);
    }
    if touches_keys(spec) && !ctx.client.no_touch {
        for i in spec.key_indexes(argv) {
            if let Some(entry) = ctx.dbs.of(argv[i]).peek_mut(argv[i]) {
                ctx.access.touch(entry);
            }
        }
    }
    // A replica's reads see a key past its time as absent and leave it to
    // the master's DEL, as Redis's; its writes (a writable replica's)
    // expire it, and the master's commands never do (`replica.rs`). While
    // clients are paused nothing expires either: the dataset stays as it
    // is (a failover may be under way), as Redis keeps it.
    let hide_expired = !ctx.client.is_master
        && ((!spec.has(flags::WRITE) && ctx.server.replica.is_replica())
            || ctx.server.paused(crate::server::unix_ms).is_some());
    if hide_expired {
        keel_engine::db::hide_expired(true);
    }
    let result = handler(ctx, argv);
    if hide_expired {
        keel_engine::db::hide_expired(false);
    }
    if ctx.server.tracking.active() {
        track(ctx, spec, argv);
    }
    if ctx.server.notify_flags.load(Ordering::Relaxed) & crate::notify::NEW != 0 {
        ctx.notify_created();
    }
    crate::durability::log_expired(ctx);
    let forced = std::mem::take(&mut ctx.durability.forced);
    // Only a writable replica has writes of its own (Redis's setExpire:
    // `masterhost && !repl_slave_ro`); on a read-only one, the journal's
    // replay is the master's writes, whose DELs will come.
    let replica = &ctx.server.replica;
    if ctx.changes.get() > 0 && !ctx.client.is_master && replica.is_replica() && !replica.refuses_writes() {
        crate::replica::note_own_write(ctx, spec, argv);
    }
    if ctx.changes.replace(0) > 0 || forced {
        if crate::durability::changes_logged(ctx.server) && !ctx.server.loading.load(Ordering::Relaxed) {
            crate::durability::record(ctx, spec, argv);
        }
    } else {
        crate::durability::note_reads(ctx, spec, argv);
    }
    ctx.durability.replaced = None;
    ctx.durability.replicas_only = false;
    let stat = &ctx.stats.commands[index];
    stat.calls.fetch_add(1, Ordering::Relaxed);
    let took = started.elapsed();
    let us = took.as_micros() as u64;
    stat.usec.fetch_add(us, Ordering::Relaxed);
    if ctx.server.latency_tracking.load(Ordering::Relaxed) {
        ctx.stats.record_latency(index, took.as_nanos() as u64);
    }
    // The latency monitor's `fast-command` or `command` event, by the
    // command's flag, as Redis's call() records it, and `expire-del` for
    // the keys the command found expired; not for the journal's replay,
    // which Redis's AOF load runs without them.
    let monitor = &ctx.server.latency_monitor;
    if monitor.is_on() && !ctx.server.loading.load(Ordering::Relaxed) {
        monitor.record(if spec.has(flags::FAST) { "fast-command" } else { "command" }, took);
        monitor.record_expired_deletes();
    }
    if ctx.server.slowlog.wants(us) && !spec.has(flags::SKIP_SLOWLOG) {
        let name = ctx.client.info.name.lock().clone().unwrap_or_default();
        let redacted = crate::slowlog::redacted_args(argv);
        ctx.server.slowlog.push(argv, &redacted, us, &ctx.client.info.addr, &name);
    }
    if result.is_err() {
        stat.failed_calls.fetch_add(1, Ordering::Relaxed);
    }
    ctx.stats.total_commands.fetch_add(1, Ordering::Relaxed);
    result
}

/// Client-side caching after a command ran: invalidations for the keys it
/// changed, then the keys it read for a tracking client, in that order so
/// that a transaction's write then read leaves the key tracked. A script
/// (EVAL, FCALL and their `_RO` forms alike) tracks its declared keys if
/// it called a read-only command, as Redis tracks the script caller's.
fn track(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) {
    let current = ctx.client.id;
    crate::tracking::collect(ctx.server, ctx.dbs.shards(), Some(current));
    if ctx.in_script {
        ctx.script_read |= spec.has(flags::READONLY);
        return;
    }
    let script_read = std::mem::take(&mut ctx.script_read);
    let reads = if spec.group == "scripting" { script_read } else { spec.has(flags::READONLY) && !spec.has(flags::PUBSUB) };
    if reads {
        remember(ctx, spec, argv);
    }
}

fn remember(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) {
    let keyspace = ctx.dbs.keyspace;
    for i in spec.key_indexes(argv) {
        let shard = ctx.dbs.locked.shard_for(keyspace, argv[i]);
        crate::tracking::remember(ctx.server, ctx.client, std::iter::once((shard, argv[i])));
    }
}

/// Sends a command that ran to every MONITOR client, as Redis's call()
/// does once it has run it: a command queued by MULTI shows when EXEC runs
/// it (before the EXEC), one refused before running never, and ADMIN and
/// `skip_monitor` commands never here (scripts show through
/// [`send_to_monitors`]). Secrets (AUTH's, MIGRATE's) show as
/// "(redacted)", as in the slow log.
pub(crate) fn feed_monitors(server: &Server, client: &Client, spec: &CommandSpec, argv: &[&[u8]], by_script: bool) {
    if !spec.has(flags::SKIP_MONITOR | flags::ADMIN) {
        send_to_monitors(server, client, argv, by_script);
    }
}

/// Sends `argv` to every MONITOR client now. EVAL, FCALL and their kin
/// (`skip_monitor`) call it as they start, so that the commands their
/// script runs come after them, as Redis's evalCommand does.
/// Who sent it shows as Redis's replicationFeedMonitors names it: `lua`
/// for a script's command, `unix:<path>` for the unix socket.
pub(crate) fn send_to_monitors(server: &Server, client: &Client, argv: &[&[u8]], by_script: bool) {
    if server.clients.monitor_count.load(Ordering::Relaxed) == 0 {
        return;
    }
    let who = match (by_script, client.info.unix) {
        (true, _) => "lua".to_string(),
        (false, true) => {
            let path = server.config.read().unixsocket.clone().unwrap_or_default();
            format!("unix:{}", path.display())
        }
        (false, false) => client.info.addr.clone(),
    };
    let us = crate::server::unix_us();
    let mut line = format!("+{}.{:06} [{} {who}]", us / 1_000_000, us % 1_000_000, client.db);
    let redacted = crate::slowlog::redacted_args(argv);
    for (i, arg) in argv.iter().enumerate() {
        line.push(' ');
        match redacted.contains(&i) {
            true => line.push_str("\"(redacted)\""),
            false => line.push_str(&keel_protocol::repr(arg)),
        }
    }
    line.push_str("\r\n");
    let monitors = server.clients.monitors.lock().clone();
    for (id, worker) in monitors {
        server.send(worker, crate::client::Message::Deliver { client: id, bytes: line.clone().into_bytes() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command is found by its name in any case, at its own index;
    /// a name that differs by a byte, or only in a byte that `| 0x20`
    /// folds as it folds letters (`\r` to `-`), is not.
    #[test]
    fn lookup_finds_each_name_in_any_case_and_nothing_else() {
        let table = table();
        for (i, spec) in table.commands.iter().enumerate() {
            let upper = spec.name.to_ascii_uppercase();
            let mixed: String = spec.name.chars().enumerate().map(|(n, c)| if n % 2 == 0 { c.to_ascii_uppercase() } else { c }).collect();
            for name in [spec.name, &upper, &mixed] {
                assert_eq!(table.lookup(name.as_bytes()).map(|(at, s)| (at, s.name)), Some((i, spec.name)), "{name}");
            }
            let mut longer = spec.name.as_bytes().to_vec();
            longer.push(b'x');
            assert!(table.lookup(&longer).is_none_or(|(_, s)| s.name.as_bytes() == longer));
            assert!(table.lookup(&spec.name.as_bytes()[1..]).is_none_or(|(_, s)| s.name.as_bytes() == &spec.name.as_bytes()[1..]));
        }
        for unknown in [&b""[..], b"ge", b"gett", b"get\0", b"\xffget", b"restore\rasking"] {
            assert!(table.lookup(unknown).is_none(), "{unknown:?}");
        }
    }

    /// `rename-command` lines apply in turn, case-insensitively, with
    /// Redis's errors for a name no command has and one some command has.
    #[test]
    fn renames_apply_in_turn() {
        let renames = |pairs: &[(&str, &str)]| Renamed::new(&pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>());
        let renamed = renames(&[("GET", "fetch"), ("set", ""), ("fetch", "Obtain")]).expect("valid");
        let (get, _) = table().lookup(b"get").expect("in the table");
        assert_eq!(renamed.lookup(b"OBTAIN"), Some(get));
        assert_eq!((renamed.lookup(b"get"), renamed.lookup(b"fetch"), renamed.lookup(b"set")), (None, None, None));
        assert!(renamed.lookup(b"del").is_some());
        let (set, _) = table().lookup(b"set").expect("in the table");
        assert!(!renamed.callable[set] && renamed.callable[get]);
        assert_eq!(renames(&[("set", ""), ("set", "put")]).err(), Some("No such command in rename-command"));
        assert_eq!(renames(&[("config|get", "cg")]).err(), Some("No such command in rename-command"));
        assert_eq!(renames(&[("get", "DEL")]).err(), Some("Target command name already exists"));
    }

    /// Key positions as Redis's (first, last, step) give them, for commands
    /// of one key, several, every other argument, and with missing or extra
    /// arguments.
    #[test]
    fn key_indexes_follow_first_last_step() {
        let indexes = |name: &str, line: &str| -> Vec<usize> {
            let (_, spec) = table().lookup(name.as_bytes()).expect("in the table");
            let argv: Vec<&[u8]> = line.split_whitespace().map(str::as_bytes).collect();
            spec.key_indexes(&argv).to_vec()
        };
        assert_eq!(indexes("get", "GET k"), [1]);
        assert_eq!(indexes("get", "GET"), [0usize; 0]);
        assert_eq!(indexes("set", "SET k v EX 10"), [1]);
        assert_eq!(indexes("del", "DEL a b c"), [1, 2, 3]);
        assert_eq!(indexes("mset", "MSET a 1 b 2"), [1, 3]);
        assert_eq!(indexes("mset", "MSET a 1 b"), [1, 3]);
        assert_eq!(indexes("blpop", "BLPOP a b 0"), [1, 2]);
        assert_eq!(indexes("rename", "RENAME a b"), [1, 2]);
        assert_eq!(indexes("ping", "PING"), [0usize; 0]);
    }
}
