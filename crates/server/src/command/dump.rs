//! DUMP and RESTORE: a value serialized as Redis's RDB does it, with the
//! RDB version and a CRC64 footer, so payloads move between Keel and Redis
//! both ways (`keel-rdb` does the format; `crate::rdb` the conversion).
//! MIGRATE sends keys so serialized to another instance as RESTOREs and
//! deletes them here once it took them (`crate::migrate` talks to the
//! target); RESTORE-ASKING is RESTORE, which a cluster's target may run
//! for a slot it is importing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use keel_engine::Entry;
use smallvec::SmallVec;

use super::parse::{eq, i64_arg};
use super::keyspec::*;
use super::{acl, cmd, flags::*, Access, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("dump", 2, READONLY, KEY1, "generic", dump)
        .doc("Return a serialized version of the value stored at the specified key.", "2.6.0")
        .tips(&["nondeterministic_output"]),
    cmd("restore", -4, WRITE | DENYOOM, KEY1, "generic", restore)
        .doc("Create a key using the provided serialized value, previously obtained using DUMP.", "2.6.0")
        .acl(acl::KEYSPACE | acl::DANGEROUS)
        .specs(&[key_at(1, OW | UPDATE)]),
    cmd("migrate", -6, WRITE, Keys::Custom(migrate_keys), "generic", migrate)
        .doc("Atomically transfer a key from a Redis instance to another one.", "2.6.0")
        .acl(acl::KEYSPACE | acl::DANGEROUS)
        .tips(&["nondeterministic_output"])
        .specs(&[
            key_at(3, RW | ACCESS | DELETE),
            ks(RW | ACCESS | DELETE | INCOMPLETE, keyword("KEYS", -2), span(-1, 1, 0)),
        ]),
    cmd("restore-asking", -4, WRITE | DENYOOM | ASKING, KEY1, "server", restore)
        .doc("An internal command for migrating keys in a cluster", "3.0.0")
        .acl(acl::KEYSPACE | acl::DANGEROUS)
        .specs(&[key_at(1, OW | UPDATE)]),
];

/// How DUMP serializes values, as configured now.
fn dump_options(ctx: &Ctx<'_>) -> keel_rdb::EncodeOptions {
    crate::rdb::encode_options(&ctx.encoding_limits(), ctx.server.config.read().rdbcompression)
}

fn dump(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    let options = dump_options(ctx);
    let entry = ctx.dbs.of(argv[1]).get(argv[1], now);
    ctx.stats.hit(entry.is_some());
    match entry {
        Some(e) => {
            let payload = keel_rdb::dump_payload(&crate::rdb::to_rdb(&e.value), &options);
            ctx.out.bulk(&payload);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f], with
/// Redis 7.0's checks in its order. A relative TTL is journaled as an
/// absolute one (`... ABSTTL`), as Redis propagates it.
fn restore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (mut replace, mut absttl) = (false, false);
    let (mut idle, mut freq): (Option<i64>, Option<i64>) = (None, None);
    let mut j = 4;
    while j < argv.len() {
        let more = argv.len() - j - 1;
        if eq(argv[j], "replace") {
            replace = true;
        } else if eq(argv[j], "absttl") {
            absttl = true;
        } else if eq(argv[j], "idletime") && more >= 1 && freq.is_none() {
            let v = i64_arg(argv[j + 1])?;
            if v < 0 {
                return Err(CmdError::other("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = Some(v);
            j += 1;
        } else if eq(argv[j], "freq") && more >= 1 && idle.is_none() {
            let v = i64_arg(argv[j + 1])?;
            if !(0..=255).contains(&v) {
                return Err(CmdError::other("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = Some(v);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let (key, now) = (argv[1], ctx.now_ms);
    if !replace && ctx.dbs.of(key).get(key, now).is_some() {
        return Err(CmdError::other("BUSYKEY Target key name already exists."));
    }
    let ttl = i64_arg(argv[2])?;
    if ttl < 0 {
        return Err(CmdError::other("ERR Invalid TTL value, must be >= 0"));
    }
    let checksum = match ctx.server.skip_dump_checksum.load(Ordering::Relaxed) {
        true => keel_rdb::Checksum::Skip,
        false => keel_rdb::Checksum::Verify,
    };
    let value = keel_rdb::restore_payload_with(argv[3], checksum).map_err(|e| {
        // As Redis's rdbReportCorruptRDB, for whoever reads the log.
        if !matches!(e, keel_rdb::RdbError::BadDumpPayload) {
            tracing::warn!("RESTORE of '{}': payload integrity check failed: {e}", String::from_utf8_lossy(key));
        }
        CmdError::other(format!("ERR {}", e.restore_reply()))
    })?;
    let value = crate::rdb::from_rdb(value, &ctx.encoding_limits());
    let db = ctx.dbs.of(key);
    let deleted = replace && db.remove(key).is_some();
    let expire_at = match ttl {
        0 => 0,
        t if absttl => t as u64,
        t => now.saturating_add(t as u64),
    };
    if expire_at != 0 && expire_at <= now {
        if deleted {
            ctx.propagate_as(vec![vec![b"DEL".to_vec(), key.to_vec()]]);
            ctx.wrote(1);
            ctx.notify(notify::GENERIC, "del", key);
        }
        ctx.out.ok();
        return Ok(());
    }
    // Redis's `objectSetLRUOrLFU`: FREQ sets the counter under an LFU
    // policy, IDLETIME the access time in the past under any other.
    let access_s = match ctx.access {
        Access::Lfu(lfu) => freq.map_or(ctx.lru_s, |f| lfu.word(f.clamp(0, 255) as u8)),
        Access::Lru(now_s) => now_s.saturating_sub(idle.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32),
    };
    let mut entry = Entry::new(value, access_s);
    entry.expire_at_ms = expire_at;
    db.insert_entry(key, entry);
    if expire_at != 0 && !absttl {
        let mut logged: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
        logged[2] = expire_at.to_string().into_bytes();
        logged.push(b"ABSTTL".to_vec());
        ctx.propagate_as(vec![logged]);
    }
    ctx.wrote(1);
    ctx.notify(notify::GENERIC, "restore", key);
    ctx.out.ok();
    Ok(())
}

/// Redis's `migrateGetKeys`: the key argument, or what follows KEYS (none
/// when the key argument is not empty then, which MIGRATE refuses).
fn migrate_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    let mut i = 6;
    while i < argv.len() {
        if eq(argv[i], "keys") {
            return match argv[3].is_empty() {
                true => (i + 1..argv.len()).collect(),
                false => SmallVec::new(),
            };
        }
        i += match () {
            () if eq(argv[i], "auth") => 2,
            () if eq(argv[i], "auth2") => 3,
            () => 1,
        };
    }
    if argv.len() > 3 {
        smallvec::smallvec![3]
    } else {
        SmallVec::new()
    }
}

/// MIGRATE host port key|"" destination-db timeout [COPY] [REPLACE]
/// [AUTH password] [AUTH2 username password] [KEYS key ...], as Redis
/// 7.0's `migrateCommand`: the keys found are sent as RESTOREs (their TTL
/// as the time left, in ms), and unless COPY each the target took is
/// deleted here, journaled and replicated as one DEL of those keys. A key
/// the target refused (BUSYKEY without REPLACE) stays, and the first
/// refusal is the reply.
///
/// The shards of the keys stay locked from the lookup to the deletion,
/// across the exchange with the target, as Redis's one thread holds
/// everything: no client can change a key between its serialization and
/// its deletion (a write in between would be lost with the deletion, or a
/// deleted key's newer value would be on neither side), and the DEL takes
/// its place in the journal where the keys left. Other commands on those
/// shards, and this worker's other clients, wait meanwhile, at most for
/// the exchange's timeouts (connect, each write, each reply). A target
/// that needs those very shards (this server, under another name) answers
/// only once MIGRATE has timed out, as Redis migrating to itself does.
/// The reply waits, as any write's, for the DEL to be durable.
fn migrate(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (mut copy, mut replace) = (false, false);
    let (mut username, mut password): (Option<&[u8]>, Option<&[u8]>) = (None, None);
    let mut keys = &argv[3..4];
    let mut j = 6;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if eq(argv[j], "copy") {
            copy = true;
        } else if eq(argv[j], "replace") {
            replace = true;
        } else if eq(argv[j], "auth") {
            if more == 0 {
                return Err(CmdError::Syntax);
            }
            j += 1;
            password = Some(argv[j]);
        } else if eq(argv[j], "auth2") {
            if more < 2 {
                return Err(CmdError::Syntax);
            }
            (username, password) = (Some(argv[j + 1]), Some(argv[j + 2]));
            j += 2;
        } else if eq(argv[j], "keys") {
            if !argv[3].is_empty() {
                return Err(CmdError::other(
                    "ERR When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            keys = &argv[j + 1..];
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let timeout_ms = i64_arg(argv[5])?;
    let db = i64_arg(argv[4])?;
    let timeout_ms = if timeout_ms <= 0 { 1000 } else { timeout_ms as u64 };

    // Redis answers NOKEY, not an error, when none is here: often they
    // just expired meanwhile.
    let now = ctx.now_ms;
    let options = dump_options(ctx);
    let mut restores = Vec::new();
    let mut moving: Vec<&[u8]> = Vec::new();
    for &key in keys {
        let entry = ctx.dbs.of(key).get(key, now);
        ctx.stats.hit(entry.is_some());
        let Some(entry) = entry else { continue };
        let ttl_ms = match entry.has_expiry() {
            true => entry.expire_at_ms.saturating_sub(now).max(1),
            false => 0,
        };
        let payload = keel_rdb::dump_payload(&crate::rdb::to_rdb(&entry.value), &options);
        // In cluster mode Redis sends RESTORE-ASKING, which a target
        // importing the key's slot serves.
        let ttl = ttl_ms.to_string();
        let name: &[u8] = if ctx.server.cluster.is_some() { b"RESTORE-ASKING" } else { b"RESTORE" };
        let mut restore: SmallVec<[&[u8]; 5]> = smallvec::smallvec![name, key, ttl.as_bytes(), payload.as_slice()];
        if replace {
            restore.push(&b"REPLACE"[..]);
        }
        keel_journal::encode_command(&mut restores, &restore);
        moving.push(key);
    }
    if moving.is_empty() {
        ctx.out.simple("NOKEY");
        return Ok(());
    }
    let request = crate::migrate::Request {
        host: argv[1],
        port: argv[2],
        timeout: Duration::from_millis(timeout_ms),
        auth: password.map(|p| (username, p)),
        db,
        restores: &restores,
        count: moving.len(),
        tls: match ctx.server.config.read().tls.cluster {
            true => ctx.server.tls.read().as_ref().and_then(|c| c.client.clone()),
            false => None,
        },
    };
    let outcome = crate::migrate::exchange(&ctx.server.migrate, &request);
    if !copy {
        let lazy = ctx.server.config.read().lazyfree_lazy_server_del;
        let mut del = vec![b"DEL".to_vec()];
        for (&key, _) in moving.iter().zip(&outcome.acked).filter(|(_, &acked)| acked) {
            if let Some(entry) = ctx.dbs.of(key).remove(key) {
                if lazy {
                    crate::lazyfree::drop_value(entry);
                }
            }
            ctx.notify(notify::GENERIC, "del", key);
            del.push(key.to_vec());
        }
        if del.len() > 1 {
            ctx.wrote(del.len() as u64 - 1);
            ctx.propagate_as(vec![del]);
        }
    }
    if let Some(error) = outcome.target_error {
        return Err(CmdError::other(format!("ERR Target instance replied with error: {error}")));
    }
    if let Some(failure) = outcome.io_failure {
        return Err(CmdError::other(failure.reply()));
    }
    ctx.out.ok();
    Ok(())
}
