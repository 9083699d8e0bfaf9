//! DUMP and RESTORE: a value serialized as Redis's RDB does it, with the
//! RDB version and a CRC64 footer, so payloads move between Keel and Redis
//! both ways (`keel-rdb` does the format; `crate::rdb` the conversion).

use keel_engine::Entry;

use super::parse::{eq, i64_arg};
use super::keyspec::*;
use super::{acl, cmd, flags::*, Access, CmdError, CmdResult, CommandSpec, Ctx, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("dump", 2, READONLY, KEY1, "generic", dump)
        .doc("Return a serialized version of the value stored at the specified key.", "2.6.0")
        .tips(&["nondeterministic_output"]),
    cmd("restore", -4, WRITE | DENYOOM, KEY1, "generic", restore)
        .doc("Create a key using the provided serialized value, previously obtained using DUMP.", "2.6.0")
        .acl(acl::KEYSPACE | acl::DANGEROUS)
        .specs(&[key_at(1, OW | UPDATE)]),
];

fn dump(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    let options = crate::rdb::encode_options(&ctx.encoding_limits(), ctx.server.config.read().rdbcompression);
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
    let value = keel_rdb::restore_payload(argv[3]).map_err(|e| CmdError::other(format!("ERR {}", e.restore_reply())))?;
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
