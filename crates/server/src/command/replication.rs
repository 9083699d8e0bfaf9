//! Replication commands, master side: REPLCONF, PSYNC and SYNC (which a
//! replica sends), WAIT and ROLE, as Redis 7.0 answers them. Serving a
//! replica is `crate::replication`.

use super::parse::{eq, i64_arg};
use super::{acl, cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::replication::master::ReplConf;
use crate::replication::Handoff;

const HANDSHAKE: u32 = ADMIN | NOSCRIPT | NO_ASYNC_LOADING | NO_MULTI;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("replconf", -1, ADMIN | NOSCRIPT | LOADING | STALE | ALLOW_BUSY, Keys::None, "server", replconf)
        .doc("An internal command for configuring the replication stream", "3.0.0"),
    cmd("psync", -3, HANDSHAKE, Keys::None, "server", psync)
        .doc("Internal command used for replication", "2.8.0"),
    cmd("sync", 1, HANDSHAKE, Keys::None, "server", sync).doc("Internal command used for replication", "1.0.0"),
    cmd("wait", 3, NOSCRIPT, Keys::None, "generic", wait)
        .doc("Wait for the synchronous replication of all the write commands sent in the context of the current connection", "3.0.0")
        .acl(acl::CONNECTION)
        .tips(&["request_policy:all_shards", "response_policy:agg_min"]),
    cmd("failover", -1, ADMIN | NOSCRIPT | STALE, Keys::None, "server", crate::replication::failover::command)
        .doc("Start a coordinated failover between this server and one of its replicas.", "6.2.0"),
    cmd("role", 1, NOSCRIPT | LOADING | STALE | FAST, Keys::None, "server", role)
        .doc("Return the role of the instance in the context of replication", "2.8.12")
        .acl(acl::ADMIN | acl::DANGEROUS),
];

/// REPLCONF <option> <value> ...: what a replica says of itself before its
/// PSYNC. `ack` and `getack` belong to a replication link and are answered
/// there; from an ordinary connection they get no reply, as in Redis.
fn replconf(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len().is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    let mut conf = ctx.client.replconf.as_deref().cloned().unwrap_or_default();
    for pair in argv[1..].chunks(2) {
        let (option, value) = (pair[0], pair[1]);
        if eq(option, "listening-port") {
            conf.listening_port = u16::try_from(i64_arg(value)?).map_err(|_| CmdError::NotInteger)?;
        } else if eq(option, "ip-address") {
            if value.len() >= 46 {
                return Err(CmdError::other(format!(
                    "ERR REPLCONF ip-address provided by replica instance is too long: {} bytes",
                    value.len()
                )));
            }
            conf.ip = Some(String::from_utf8_lossy(value).into_owned());
        } else if eq(option, "capa") {
            conf.capa_eof |= eq(value, "eof");
            conf.capa_psync2 |= eq(value, "psync2");
        } else if eq(option, "rdb-only") {
            conf.rdb_only = match i64_arg(value)? {
                0 => false,
                1 => true,
                _ => return Err(CmdError::Syntax),
            };
        } else if eq(option, "rdb-filter-only") {
            // Everything is left out but what a filter names.
            let filters = crate::config::split_config_line(&String::from_utf8_lossy(value))
                .ok_or_else(|| CmdError::other("ERR Missing rdb-filter-only values"))?;
            conf.parts = crate::snapshot::RdbParts { keys: false, functions: false };
            for filter in &filters {
                if !filter.eq_ignore_ascii_case("functions") {
                    return Err(CmdError::other(format!("ERR Unsupported rdb-filter-only option: {filter}")));
                }
                conf.parts.functions = true;
            }
        } else if eq(option, "ack") || eq(option, "getack") {
            return Ok(());
        } else {
            return Err(CmdError::other(format!("ERR Unrecognized REPLCONF option: {}", String::from_utf8_lossy(option))));
        }
    }
    ctx.client.replconf = Some(Box::new(conf));
    ctx.out.ok();
    Ok(())
}

/// PSYNC <replid> <offset>: the worker hands the connection to
/// replication once this returns; the replies come from there.
fn psync(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let offset = i64_arg(argv[2]).inspect_err(|_| {
        let conf = ctx.client.replconf.as_deref();
        let ip = conf.and_then(|c| c.ip.as_deref()).unwrap_or(ctx.client.info.ip());
        let port = conf.map_or(0, |c| c.listening_port);
        tracing::warn!("Replica {ip}:{port} asks for synchronization but with a wrong offset");
    })?;
    let replid = String::from_utf8_lossy(argv[1]).into_owned();
    if argv.get(3).is_some_and(|a| eq(a, "failover")) {
        take_over(ctx, &replid)?;
    }
    hand_off(ctx, replid, offset, false)
}

/// `PSYNC <replid> <offset> FAILOVER`: our master, in a FAILOVER, asks us
/// to become the master of the history we share with it, then continue
/// it as our replica (Redis's syncCommand).
fn take_over(ctx: &mut Ctx<'_>, replid: &str) -> Result<(), CmdError> {
    let server = ctx.server;
    tracing::warn!("Failover request received for replid {replid}.");
    if !server.replica.is_replica() {
        return Err(CmdError::other("ERR PSYNC FAILOVER can't be sent to a master."));
    }
    if server.repl.replid() != replid {
        return Err(CmdError::other("ERR PSYNC FAILOVER replid must match my replid."));
    }
    crate::replica::stop_following(server);
    let client = super::connection::client_line(&ctx.client.info, crate::server::unix_ms());
    tracing::info!("MASTER MODE enabled (failover request from '{client}')");
    Ok(())
}

/// SYNC: the pre-PSYNC protocol, a full sync with no `+FULLRESYNC` line.
fn sync(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    hand_off(ctx, "?".into(), -1, true)
}

/// A replica serves replicas of its own only while its master's link is
/// up: before, it has no history to give them (Redis's syncCommand).
fn hand_off(ctx: &mut Ctx<'_>, replid: String, offset: i64, pre_psync: bool) -> CmdResult {
    if ctx.server.repl.failover.state() != crate::replication::failover::State::None {
        return Err(CmdError::other("NOMASTERLINK Can't SYNC while failing over"));
    }
    let replica = &ctx.server.replica;
    if replica.is_replica() && !replica.link_up() {
        return Err(CmdError::other("NOMASTERLINK Can't SYNC while not connected with my master"));
    }
    let conf: ReplConf = ctx.client.replconf.as_deref().cloned().unwrap_or_default();
    if conf.parts != crate::snapshot::RdbParts::ALL && !conf.capa_eof {
        return Err(CmdError::other("ERR Filtered replica requires EOF capability"));
    }
    ctx.client.replconf = None;
    ctx.client.handoff = Some(Box::new(Handoff { replid, offset, pre_psync, conf }));
    Ok(())
}

/// WAIT numreplicas timeout: the number of replicas that acknowledged
/// this client's writes, once `numreplicas` have or the timeout (ms; 0
/// for ever) passes. Inside a transaction it answers at once, as Redis.
fn wait(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if ctx.server.replica.is_replica() {
        return Err(CmdError::other(
            "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.",
        ));
    }
    let wanted = i64_arg(argv[1])?;
    let timeout_ms = i64_arg(argv[2]).map_err(|_| CmdError::other("ERR timeout is not an integer or out of range"))?;
    if timeout_ms < 0 {
        return Err(CmdError::other("ERR timeout is negative"));
    }
    let repl = &ctx.server.repl;
    let offset = ctx.client.woff;
    let acked = repl.acked(offset);
    if acked as i64 >= wanted || !ctx.can_block() {
        ctx.out.int(acked as i64);
        return Ok(());
    }
    let deadline = match timeout_ms {
        0 => 0,
        ms => ctx.now_ms.saturating_add(ms as u64),
    };
    let waiter = crate::blocking::block_for_acks(ctx, argv, offset, wanted as u64, deadline);
    repl.add_wait(waiter);
    Ok(())
}

/// ROLE: `master`, the stream's offset, and each replica's address and
/// acknowledged offset; or `slave`, its master, the link's state and the
/// offset applied.
fn role(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    if let Some(status) = crate::replica::status(ctx.server) {
        ctx.out.array(5);
        ctx.out.bulk(b"slave");
        ctx.out.bulk(status.host.as_bytes());
        ctx.out.int(i64::from(status.port));
        ctx.out.bulk(status.state.as_bytes());
        ctx.out.int(status.offset);
        return Ok(());
    }
    let repl = &ctx.server.repl;
    let replicas = repl.replicas();
    ctx.out.array(3);
    ctx.out.bulk(b"master");
    ctx.out.int(repl.end() as i64);
    ctx.out.array(replicas.len());
    for r in replicas {
        ctx.out.array(3);
        ctx.out.bulk(r.ip.as_bytes());
        ctx.out.bulk_int(i64::from(r.port));
        ctx.out.bulk_int(r.ack() as i64);
    }
    Ok(())
}
