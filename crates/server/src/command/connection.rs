//! Connection commands: PING, ECHO, SELECT, HELLO, AUTH, QUIT, RESET,
//! CLIENT.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::parse::{eq, i64_arg};
use super::{acl, cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::acl::{Context, Reason};
use crate::client::{ClientInfo, LinkRole, Message, ReplyMode};
use crate::pause::{Mode, Purpose};
use crate::server::unix_ms;
use crate::tracking::flags as tracking;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("ping", -1, FAST, Keys::None, "connection", ping)
        .doc("Ping the server", "1.0.0")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    cmd("echo", 2, LOADING | STALE | FAST, Keys::None, "connection", echo)
        .doc("Echo the given string", "1.0.0"),
    cmd("select", 2, LOADING | STALE | FAST, Keys::None, "connection", select)
        .doc("Change the selected database for the current connection", "1.0.0"),
    cmd("hello", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, Keys::None, "connection", hello)
        .doc("Handshake with Redis", "6.0.0"),
    cmd("auth", -2, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, Keys::None, "connection", auth)
        .doc("Authenticate to the server", "1.0.0"),
    cmd("quit", -1, ALLOW_BUSY | NOSCRIPT | LOADING | STALE | FAST | NO_AUTH, Keys::None, "connection", quit)
        .doc("Close the connection", "1.0.0"),
    cmd("reset", 1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, Keys::None, "connection", reset)
        .doc("Reset the connection", "6.2.0"),
    cmd("client", -2, 0, Keys::None, "connection", super::server::container)
        .doc("A container for client connection commands", "2.4.0")
        .subs(CLIENT_SUBCOMMANDS)
        .acl(acl::NONE),
];

const CLIENT_FLAGS: u32 = NOSCRIPT | LOADING | STALE;

const CLIENT_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("client|caching", 3, CLIENT_FLAGS, Keys::None, "connection", client_caching)
        .doc("Instruct the server about tracking or not keys in the next request", "6.0.0"),
    cmd("client|getredir", 2, CLIENT_FLAGS, Keys::None, "connection", client_getredir)
        .doc("Get tracking notifications redirection client ID if any", "6.0.0"),
    cmd("client|getname", 2, CLIENT_FLAGS, Keys::None, "connection", client_getname)
        .doc("Get the current connection name", "2.6.9"),
    cmd("client|help", 2, LOADING | STALE, Keys::None, "connection", client_help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
    cmd("client|id", 2, CLIENT_FLAGS, Keys::None, "connection", client_id)
        .doc("Returns the client ID for the current connection", "5.0.0"),
    cmd("client|info", 2, CLIENT_FLAGS, Keys::None, "connection", client_info)
        .doc("Returns information about the current client connection.", "6.2.0")
        .tips(&["nondeterministic_output"]),
    cmd("client|kill", -3, ADMIN | CLIENT_FLAGS, Keys::None, "connection", client_kill)
        .doc("Kill the connection of a client", "2.4.0"),
    cmd("client|list", -2, ADMIN | CLIENT_FLAGS, Keys::None, "connection", client_list)
        .doc("Get the list of client connections", "2.4.0")
        .tips(&["nondeterministic_output"]),
    cmd("client|no-evict", 3, ADMIN | CLIENT_FLAGS, Keys::None, "connection", client_no_evict)
        .doc("Set client eviction mode for the current connection", "7.0.0"),
    cmd("client|pause", -3, ADMIN | CLIENT_FLAGS, Keys::None, "connection", client_pause)
        .doc("Stop processing commands from clients for some time", "2.9.50"),
    cmd("client|reply", 3, CLIENT_FLAGS, Keys::None, "connection", client_reply)
        .doc("Instruct the server whether to reply to commands", "3.2.0"),
    cmd("client|setname", 3, CLIENT_FLAGS, Keys::None, "connection", client_setname)
        .doc("Set the current connection name", "2.6.9"),
    cmd("client|tracking", -3, CLIENT_FLAGS, Keys::None, "connection", client_tracking)
        .doc("Enable or disable server assisted client side caching support", "6.0.0"),
    cmd("client|trackinginfo", 2, CLIENT_FLAGS, Keys::None, "connection", client_trackinginfo)
        .doc("Return information about server assisted client side caching for the current connection", "6.2.0"),
    cmd("client|unblock", -3, ADMIN | CLIENT_FLAGS, Keys::None, "connection", client_unblock)
        .doc("Unblock a client blocked in a blocking command from a different connection", "5.0.0"),
    cmd("client|unpause", 2, ADMIN | CLIENT_FLAGS, Keys::None, "connection", client_unpause)
        .doc("Resume processing of clients that were paused", "6.2.0"),
];

fn ping(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    // A RESP2 subscriber can only read arrays: Redis answers `[pong, msg]`.
    if !ctx.client.resp3 && ctx.client.subscriptions.any() && argv.len() <= 2 {
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out.bulk(argv.get(1).copied().unwrap_or_default());
        return Ok(());
    }
    match argv {
        [_] => ctx.out.simple("PONG"),
        [_, msg] => ctx.out.bulk(msg),
        _ => return Err(CmdError::Arity("ping".into())),
    }
    Ok(())
}

fn echo(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ctx.out.bulk(argv[1]);
    Ok(())
}

fn select(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let index = i64_arg(argv[1])?;
    if ctx.server.cluster.is_some() && index != 0 {
        return Err(CmdError::other("ERR SELECT is not allowed in cluster mode"));
    }
    if index < 0 || index as usize >= ctx.server.keyspace.databases() {
        return Err(CmdError::DbIndexOutOfRange);
    }
    ctx.client.db = index as usize;
    ctx.dbs.selected = index as usize;
    ctx.client.info.db.store(index as usize, Ordering::Relaxed);
    ctx.out.ok();
    Ok(())
}

/// Authenticates the client as `user` (`ACLAuthenticateUser`): a failure
/// is logged in the ACL log and answers WRONGPASS.
fn authenticate(ctx: &mut Ctx<'_>, command: &[u8], user: &[u8], password: &[u8]) -> CmdResult {
    match ctx.server.acl.authenticate(user, password) {
        Some(handle) => {
            ctx.client.authenticated = true;
            ctx.client.set_user(handle);
            Ok(())
        }
        None => {
            let context = if ctx.client.multi.is_some() { Context::Multi } else { Context::Toplevel };
            let info = client_line(&ctx.client.info, unix_ms());
            ctx.server.acl.log(Reason::Auth, context, command, user, info);
            Err(CmdError::other("WRONGPASS invalid username-password pair or user is disabled."))
        }
    }
}

fn auth(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (user, password) = match argv {
        [_, password] => {
            if ctx.server.acl.default_user().rules().flags & crate::acl::USER_NOPASS != 0 {
                return Err(CmdError::other(
                    "ERR AUTH <password> called without any password configured for the default user. \
                     Are you sure your configuration is correct?",
                ));
            }
            (&b"default"[..], *password)
        }
        [_, user, password] => (*user, *password),
        _ => return Err(CmdError::Syntax),
    };
    authenticate(ctx, argv[0], user, password)?;
    ctx.out.ok();
    Ok(())
}

fn hello(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let mut resp3 = ctx.client.resp3;
    let mut rest = &argv[1..];
    if let Some((version, tail)) = rest.split_first() {
        resp3 = match i64_arg(version) {
            Ok(2) => false,
            Ok(3) => true,
            Ok(_) => return Err(CmdError::other("NOPROTO unsupported protocol version")),
            Err(_) => return Err(CmdError::other("ERR Protocol version is not an integer or out of range")),
        };
        rest = tail;
    }
    // As Redis 7.0: every option parses first, then AUTH, then SETNAME.
    let mut name = None;
    let mut credentials = None;
    while let Some((option, tail)) = rest.split_first() {
        match tail {
            [user, password, after @ ..] if eq(option, "auth") => {
                credentials = Some((*user, *password));
                rest = after;
            }
            [value, after @ ..] if eq(option, "setname") => {
                name = Some(value.to_vec());
                rest = after;
            }
            _ => {
                return Err(CmdError::other(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(option)
                )))
            }
        }
    }
    if let Some((user, password)) = credentials {
        authenticate(ctx, argv[0], user, password)?;
    }
    if let Some(name) = &name {
        super::server::validate_client_name(name)?;
    }
    if !ctx.client.authenticated {
        return Err(CmdError::other(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> \
             AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol \
             version at the same time",
        ));
    }
    if let Some(name) = name {
        *ctx.client.info.name.lock() = (!name.is_empty()).then_some(name);
    }
    ctx.client.resp3 = resp3;
    ctx.out.resp3 = resp3;
    ctx.client.info.resp.store(if resp3 { 3 } else { 2 }, Ordering::Relaxed);
    let out = &mut ctx.out;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(crate::server::REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(if resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(ctx.client.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
    Ok(())
}

fn quit(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.client.close_after_reply = true;
    // QUIT's reply is sent even under CLIENT REPLY OFF.
    ctx.client.reply = ReplyMode::On;
    ctx.out.ok();
    Ok(())
}

fn reset(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    super::transactions::discard_state(ctx.server, ctx.client);
    ctx.client.db = 0;
    ctx.dbs.selected = 0;
    ctx.client.info.db.store(0, Ordering::Relaxed);
    ctx.client.resp3 = false;
    ctx.out.resp3 = false;
    ctx.client.info.resp.store(2, Ordering::Relaxed);
    ctx.client.reply = ReplyMode::On;
    *ctx.client.info.name.lock() = None;
    ctx.client.info.no_evict.store(false, Ordering::Relaxed);
    if ctx.client.info.monitor.swap(false, Ordering::Relaxed) {
        ctx.server.clients.unregister_monitor(ctx.client.id);
    }
    ctx.server.pubsub.forget(ctx.client);
    crate::tracking::disable(ctx.server, ctx.client);
    // Redis's clientSetDefaultAuth.
    ctx.client.set_user(ctx.server.acl.default_user());
    ctx.client.authenticated = ctx.server.acl.starts_authenticated();
    ctx.out.simple("RESET");
    Ok(())
}

// ---------------------------------------------------------------- CLIENT

fn client_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    super::server::reply_help(
        ctx,
        argv[0],
        &[
            "CACHING (YES|NO)",
            "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
            "GETREDIR",
            "    Return the client ID we are redirecting to when tracking is enabled.",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are:",
            "    * ADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made from the specified address",
            "    * LADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made to specified local address",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Kill connections by type.",
            "    * USER <username>",
            "      Kill connections authenticated by <username>.",
            "    * SKIPME (YES|NO)",
            "      Skip killing current connection (default: yes).",
            "LIST [options ...]",
            "    Return information about client connections. Options:",
            "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
            "UNPAUSE",
            "    Stop the current client pause, resuming traffic.",
            "PAUSE <timeout> [WRITE|ALL]",
            "    Suspend all, or just write, clients for <timeout> milliseconds.",
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "    Unblock the specified blocked client.",
            "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
            "         [OPTIN] [OPTOUT] [NOLOOP]",
            "    Control server assisted client side caching.",
            "TRACKINGINFO",
            "    Report tracking status for the current connection.",
            "NO-EVICT (ON|OFF)",
            "    Protect current client connection from eviction.",
        ],
    );
    Ok(())
}

fn client_id(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.int(ctx.client.id as i64);
    Ok(())
}

fn client_getname(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    match ctx.client.name() {
        Some(name) => ctx.out.bulk(&name),
        None => ctx.out.null(),
    }
    Ok(())
}

fn client_setname(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    super::server::validate_client_name(argv[2])?;
    *ctx.client.info.name.lock() = (!argv[2].is_empty()).then(|| argv[2].to_vec());
    ctx.out.ok();
    Ok(())
}

/// Client types as CLIENT LIST/KILL TYPE name them: a replication link's
/// client is `replica` or `master`, another `pubsub` while it listens to
/// something, else `normal`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientType {
    Normal,
    Replica,
    Master,
    PubSub,
}

fn client_type(name: &[u8]) -> Result<ClientType, CmdError> {
    let lower = String::from_utf8_lossy(name).to_ascii_lowercase();
    match lower.as_str() {
        "normal" => Ok(ClientType::Normal),
        "slave" | "replica" => Ok(ClientType::Replica),
        "master" => Ok(ClientType::Master),
        "pubsub" => Ok(ClientType::PubSub),
        _ => Err(CmdError::other(format!("ERR Unknown client type '{}'", String::from_utf8_lossy(name)))),
    }
}

fn type_of(info: &ClientInfo) -> ClientType {
    match info.link_role() {
        Some(LinkRole::Master) => return ClientType::Master,
        Some(LinkRole::Replica) => return ClientType::Replica,
        None => {}
    }
    if info.subscriptions.iter().any(|n| n.load(Ordering::Relaxed) > 0) {
        ClientType::PubSub
    } else {
        ClientType::Normal
    }
}

/// Redis's PROTO_REPLY_CHUNK_BYTES: the reply buffer output fills first.
const REPLY_BUFFER_BYTES: u64 = 16 * 1024;

/// One CLIENT LIST / CLIENT INFO line, fields in Redis 7.0's order.
pub fn client_line(info: &ClientInfo, now_ms: u64) -> String {
    let mut flags = String::new();
    match info.link_role() {
        Some(LinkRole::Replica) => flags.push('S'),
        Some(LinkRole::Master) => flags.push('M'),
        None if info.monitor.load(Ordering::Relaxed) => flags.push('O'),
        None => {}
    }
    let [sub, psub, ssub] = [0, 1, 2].map(|i| info.subscriptions[i].load(Ordering::Relaxed));
    if sub + psub + ssub > 0 {
        flags.push('P');
    }
    let in_multi = info.in_multi.load(Ordering::Relaxed);
    if in_multi {
        flags.push('x');
    }
    if info.blocked.load(Ordering::Relaxed) {
        flags.push('b');
    }
    let tracking = info.tracking.load(Ordering::Relaxed);
    for (flag, letter) in [(tracking::ON, 't'), (tracking::BROKEN_REDIR, 'R'), (tracking::BCAST, 'B')] {
        if tracking & flag != 0 {
            flags.push(letter);
        }
    }
    if info.kill.load(Ordering::Relaxed) {
        flags.push('A');
    }
    if info.unix {
        flags.push('U');
    }
    if info.no_evict.load(Ordering::Relaxed) {
        flags.push('e');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let qbuf = info.qbuf.load(Ordering::Relaxed);
    let qbuf_free = info.qbuf_free.load(Ordering::Relaxed);
    let rbs = info.rbs.load(Ordering::Relaxed);
    // Pending output, shown as Redis's: up to its 16 KB reply buffer
    // (`obl`), the rest as the list of 16 KB blocks past it (`oll`,
    // `omem`), which is what the output limits count.
    let pending = info.obl.load(Ordering::Relaxed);
    let obl = pending.min(REPLY_BUFFER_BYTES);
    let omem = pending - obl;
    let oll = omem.div_ceil(REPLY_BUFFER_BYTES);
    let multi_mem = info.multi_mem.load(Ordering::Relaxed);
    let last_cmd = info.last_cmd.load(Ordering::Relaxed) as usize;
    let cmd_name = match last_cmd {
        0 => "NULL",
        n => super::table().all.get(n - 1).map(|s| s.name).unwrap_or("NULL"),
    };
    let name = info.name.lock().as_deref().map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
    // None: the server's own client (the master's, on a replica), as Redis.
    let user = info.user.lock().as_ref().map_or_else(|| "(superuser)".into(), |u| String::from_utf8_lossy(&u.name).into_owned());
    let age = now_ms.saturating_sub(info.created_ms) / 1000;
    let idle = now_ms.saturating_sub(info.last_interaction_ms.load(Ordering::Relaxed)) / 1000;
    let mut line = String::with_capacity(256);
    let _ = write!(
        line,
        "id={} addr={} laddr={} fd={} name={name} age={age} idle={idle} flags={flags} db={} sub={sub} psub={psub} ssub={ssub} \
         multi={} qbuf={qbuf} qbuf-free={qbuf_free} argv-mem=0 multi-mem={multi_mem} rbs={rbs} rbp={rbs} \
         obl={obl} oll={oll} omem={omem} tot-mem={} events=r{} cmd={cmd_name} user={user} redir={} resp={}",
        info.id,
        info.addr,
        info.laddr,
        info.fd,
        info.db.load(Ordering::Relaxed),
        if in_multi { info.multi_len.load(Ordering::Relaxed) as i64 } else { -1 },
        info.memory.load(Ordering::Relaxed),
        if pending > 0 { "w" } else { "" },
        redirection(info),
        info.resp.load(Ordering::Relaxed),
    );
    line
}

fn client_info(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let mut line = client_line(&ctx.client.info, unix_ms());
    line.push('\n');
    ctx.out.verbatim("txt", line.as_bytes());
    Ok(())
}

/// The replication links' clients, which no worker serves: each
/// replica's connection, and the master's on a replica while it streams.
fn link_clients(server: &crate::server::Server) -> Vec<Arc<ClientInfo>> {
    let replicas = server.repl.replicas().into_iter().map(|r| Arc::clone(&r.info));
    replicas.chain(server.replica.master_client()).collect()
}

fn client_list(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = unix_ms();
    // A client killed (CLIENT KILL, ACL, client eviction) is gone in
    // Redis at once; here its worker closes it a moment later.
    let alive = |info: &Arc<ClientInfo>| !info.kill.load(Ordering::Acquire);
    let clients: Vec<Arc<ClientInfo>> =
        ctx.server.clients.list().into_iter().map(|(info, _)| info).filter(alive).chain(link_clients(ctx.server)).collect();
    let mut text = String::new();
    let mut push = |info: &ClientInfo| {
        text.push_str(&client_line(info, now));
        text.push('\n');
    };
    if argv.len() == 4 && eq(argv[2], "type") {
        let wanted = client_type(argv[3])?;
        clients.iter().filter(|i| type_of(i) == wanted).for_each(|i| push(i));
    } else if argv.len() > 3 && eq(argv[2], "id") {
        let mut ids = Vec::new();
        for arg in &argv[3..] {
            ids.push(i64_arg(arg).map_err(|_| CmdError::other("ERR Invalid client ID"))?);
        }
        for id in ids {
            clients.iter().filter(|i| i.id as i64 == id).for_each(|i| push(i));
        }
    } else if argv.len() != 2 {
        return Err(CmdError::Syntax);
    } else {
        clients.iter().for_each(|i| push(i));
    }
    ctx.out.verbatim("txt", text.as_bytes());
    Ok(())
}

/// CLIENT KILL addr (old form: may kill the caller, errors when nothing
/// matched) or CLIENT KILL [ID id] [ADDR a] [LADDR a] [TYPE t] [USER u]
/// [SKIPME yes|no] (new form: answers the number killed). A client served
/// by another worker is flagged and its worker told to close it.
fn client_kill(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let mut addr: Option<&[u8]> = None;
    let mut laddr: Option<&[u8]> = None;
    let mut ctype: Option<ClientType> = None;
    let mut id: Option<u64> = None;
    let mut user: Option<std::sync::Arc<crate::acl::UserHandle>> = None;
    let mut skipme = true;
    let old_form = argv.len() == 3;
    if old_form {
        addr = Some(argv[2]);
        skipme = false;
    } else {
        let mut i = 2;
        while i < argv.len() {
            let (opt, value) = match argv.get(i + 1) {
                Some(v) => (argv[i], *v),
                None => return Err(CmdError::Syntax),
            };
            if eq(opt, "id") {
                let n = i64_arg(value).ok().filter(|&n| n >= 1);
                id = Some(n.ok_or_else(|| CmdError::other("ERR client-id should be greater than 0"))? as u64);
            } else if eq(opt, "type") {
                ctype = Some(client_type(value)?);
            } else if eq(opt, "addr") {
                addr = Some(value);
            } else if eq(opt, "laddr") {
                laddr = Some(value);
            } else if eq(opt, "user") {
                let found = ctx.server.acl.get(value);
                user = Some(found.ok_or_else(|| {
                    CmdError::other(format!("ERR No such user '{}'", String::from_utf8_lossy(value)))
                })?);
            } else if eq(opt, "skipme") {
                skipme = if eq(value, "yes") {
                    true
                } else if eq(value, "no") {
                    false
                } else {
                    return Err(CmdError::Syntax);
                };
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
    }
    let me = ctx.client.id;
    let mut killed = 0;
    let mut kill_me = false;
    let mut workers_to_tell = Vec::new();
    let matches = |info: &ClientInfo| {
        addr.is_none_or(|a| a == info.addr.as_bytes())
            && laddr.is_none_or(|a| a == info.laddr.as_bytes())
            && ctype.is_none_or(|t| t == type_of(info))
            && id.is_none_or(|i| i == info.id)
            && user.as_ref().is_none_or(|u| info.user.lock().as_ref().is_some_and(|mine| Arc::ptr_eq(u, mine)))
            && !(skipme && info.id == me)
    };
    for (info, worker) in ctx.server.clients.list() {
        if !matches(&info) {
            continue;
        }
        if info.id == me {
            kill_me = true;
        } else {
            info.kill.store(true, Ordering::Release);
            if !workers_to_tell.contains(&worker) {
                workers_to_tell.push(worker);
            }
        }
        killed += 1;
    }
    for worker in workers_to_tell {
        ctx.server.send(worker, Message::CheckKills);
    }
    // Replication links are no clients of a worker: their own threads
    // end them.
    for replica in ctx.server.repl.replicas() {
        if matches(&replica.info) {
            ctx.server.repl.drop_replica(&replica);
            killed += 1;
        }
    }
    if ctx.server.replica.master_client().is_some_and(|info| matches(&info)) {
        killed += i64::from(ctx.server.replica.kill_link());
    }
    if old_form {
        if killed == 0 {
            return Err(CmdError::other("ERR No such client"));
        }
        ctx.out.ok();
    } else {
        ctx.out.int(killed);
    }
    if kill_me {
        ctx.client.close_after_reply = true;
    }
    Ok(())
}

fn client_reply(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let mode = argv[2];
    if eq(mode, "on") {
        ctx.client.reply = ReplyMode::On;
        ctx.out.ok();
    } else if eq(mode, "off") {
        ctx.client.reply = ReplyMode::Off;
    } else if eq(mode, "skip") {
        if ctx.client.reply != ReplyMode::Off {
            ctx.client.reply = ReplyMode::SkipNext;
        }
    } else {
        return Err(CmdError::Syntax);
    }
    Ok(())
}

fn client_no_evict(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let on = if eq(argv[2], "on") {
        true
    } else if eq(argv[2], "off") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    ctx.client.info.no_evict.store(on, Ordering::Relaxed);
    if !on {
        crate::client_memory::evict(ctx.server, true);
    }
    ctx.out.ok();
    Ok(())
}

/// CLIENT PAUSE timeout-ms [WRITE|ALL]. A pause in effect only widens:
/// the later deadline and the stricter mode win, as in Redis. The workers
/// hold back affected requests themselves (see `worker::held_by_pause`).
fn client_pause(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() > 4 {
        return Err(CmdError::Syntax);
    }
    let mut mode = Mode::All;
    if let Some(arg) = argv.get(3) {
        if eq(arg, "write") {
            mode = Mode::Writes;
        } else if !eq(arg, "all") {
            return Err(CmdError::other("ERR CLIENT PAUSE mode must be WRITE or ALL"));
        }
    }
    let timeout = i64_arg(argv[2]).map_err(|_| CmdError::other("ERR timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(CmdError::other("ERR timeout is negative"));
    }
    let now = unix_ms();
    let end = if timeout > 0 { now.saturating_add(timeout as u64) } else { 0 };
    ctx.server.pauses.pause(Purpose::ClientCommand, end, mode, now);
    ctx.out.ok();
    Ok(())
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends another client's blocking pop
/// as a timeout would, or with an error. Answers 1 if it was blocked.
fn client_unblock(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let id = super::parse::i64_arg(argv[2])?;
    let error = match argv.get(3) {
        None => false,
        Some(a) if eq(a, "timeout") => false,
        Some(a) if eq(a, "error") => true,
        Some(_) => return Err(CmdError::other("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
    };
    if argv.len() > 4 {
        return Err(CmdError::Syntax);
    }
    let waiter = u64::try_from(id).ok().and_then(|id| ctx.server.blocking.get(id));
    match waiter {
        Some(w) if w.wait_for != crate::blocking::WaitFor::Shutdown && w.claim() => {
            let reply = if error {
                let message = "UNBLOCKED client unblocked via CLIENT UNBLOCK";
                // An error reply of the blocked command: counted as its
                // failure, as Redis's updateStatsOnUnblock does.
                ctx.server.count_error(message);
                let argv: Vec<&[u8]> = w.argv.iter().map(Vec::as_slice).collect();
                if let Ok((index, _)) = super::resolve(&argv) {
                    ctx.stats.commands[index].failed_calls.fetch_add(1, Ordering::Relaxed);
                }
                let mut out = Vec::new();
                keel_protocol::ReplyWriter::new(&mut out, w.resp3).error(message);
                out
            } else {
                crate::blocking::timeout_reply(ctx.server, &w)
            };
            ctx.server.send(w.worker, Message::Unblock { client: w.client, reply, lsn: 0 });
            ctx.out.int(1);
        }
        _ => ctx.out.int(0),
    }
    Ok(())
}

fn client_unpause(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.server.pauses.unpause(Purpose::ClientCommand);
    ctx.server.broadcast(|| Message::Resume);
    ctx.out.ok();
    Ok(())
}

/// CLIENT GETREDIR's answer, CLIENT LIST's `redir`: the client
/// invalidations go to, 0 for none, -1 with tracking off.
fn redirection(info: &ClientInfo) -> i64 {
    if info.tracking.load(Ordering::Relaxed) & tracking::ON == 0 {
        return -1;
    }
    info.tracking_redirect.load(Ordering::Relaxed) as i64
}

fn client_tracking(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let options = crate::tracking::parse(ctx.server, ctx.client, argv)?;
    if options.on {
        crate::tracking::enable(ctx.server, ctx.client, options);
    } else {
        crate::tracking::disable(ctx.server, ctx.client);
    }
    ctx.out.ok();
    Ok(())
}

fn client_caching(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let f = ctx.client.info.tracking.load(Ordering::Relaxed);
    if f & tracking::ON == 0 {
        return Err(CmdError::other(
            "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        ));
    }
    if eq(argv[2], "yes") {
        if f & tracking::OPTIN == 0 {
            return Err(CmdError::other("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."));
        }
    } else if eq(argv[2], "no") {
        if f & tracking::OPTOUT == 0 {
            return Err(CmdError::other("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."));
        }
    } else {
        return Err(CmdError::Syntax);
    }
    ctx.client.caching = true;
    ctx.out.ok();
    Ok(())
}

fn client_getredir(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.int(redirection(&ctx.client.info));
    Ok(())
}

fn client_trackinginfo(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let f = ctx.client.info.tracking.load(Ordering::Relaxed);
    let caching = ctx.client.caching;
    let mut names: Vec<&[u8]> = vec![if f & tracking::ON != 0 { b"on" } else { b"off" }];
    let named = [
        (f & tracking::BCAST != 0, &b"bcast"[..]),
        (f & tracking::OPTIN != 0, b"optin"),
        (f & tracking::OPTIN != 0 && caching, b"caching-yes"),
        (f & tracking::OPTOUT != 0, b"optout"),
        (f & tracking::OPTOUT != 0 && caching, b"caching-no"),
        (f & tracking::NOLOOP != 0, b"noloop"),
        (f & tracking::BROKEN_REDIR != 0, b"broken_redirect"),
    ];
    names.extend(named.iter().filter(|(on, _)| *on).map(|(_, name)| *name));
    let redirect = redirection(&ctx.client.info);
    let out = &mut ctx.out;
    out.map(3);
    out.bulk(b"flags");
    out.set(names.len());
    for name in names {
        out.bulk(name);
    }
    out.bulk(b"redirect");
    out.int(redirect);
    out.bulk(b"prefixes");
    out.array(ctx.client.tracking_prefixes.len());
    for prefix in &ctx.client.tracking_prefixes {
        out.bulk(prefix);
    }
    Ok(())
}
