//! ACL: users and their permissions (the rules and checks are `acl.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::parse::{eq, i64_arg};
use super::{cmd, flags::*, table, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::acl::{self, Context, LogEntry, Reason, User, UserHandle};
use crate::client::{ClientInfo, Message};
use crate::server::Server;

const ACL_FLAGS: u32 = NOSCRIPT | LOADING | STALE;

pub static COMMANDS: &[CommandSpec] = &[cmd("acl", -2, 0, Keys::None, "server", super::server::container)
    .doc("A container for Access List Control commands ", "6.0.0")
    .subs(ACL_SUBCOMMANDS)];

const ACL_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("acl|cat", -2, ACL_FLAGS, Keys::None, "server", acl_cat)
        .doc("List the ACL categories or the commands inside a category", "6.0.0"),
    cmd("acl|deluser", -3, ADMIN | ACL_FLAGS, Keys::None, "server", acl_deluser)
        .doc("Remove the specified ACL users and the associated rules", "6.0.0"),
    cmd("acl|dryrun", -4, ADMIN | ACL_FLAGS, Keys::None, "server", acl_dryrun)
        .doc("Returns whether the user can execute the given command without executing the command.", "7.0.0"),
    cmd("acl|genpass", -2, ACL_FLAGS, Keys::None, "server", acl_genpass)
        .doc("Generate a pseudorandom secure password to use for ACL users", "6.0.0"),
    cmd("acl|getuser", 3, ADMIN | ACL_FLAGS, Keys::None, "server", acl_getuser)
        .doc("Get the rules for a specific ACL user", "6.0.0"),
    cmd("acl|help", 2, LOADING | STALE, Keys::None, "server", acl_help)
        .doc("Show helpful text about the different subcommands", "6.0.0"),
    cmd("acl|list", 2, ADMIN | ACL_FLAGS, Keys::None, "server", acl_list)
        .doc("List the current ACL rules in ACL config file format", "6.0.0"),
    cmd("acl|load", 2, ADMIN | ACL_FLAGS, Keys::None, "server", acl_load)
        .doc("Reload the ACLs from the configured ACL file", "6.0.0"),
    cmd("acl|log", -2, ADMIN | ACL_FLAGS, Keys::None, "server", acl_log)
        .doc("List latest events denied because of ACLs in place", "6.0.0"),
    cmd("acl|save", 2, ADMIN | ACL_FLAGS, Keys::None, "server", acl_save)
        .doc("Save the current ACL rules in the configured ACL file", "6.0.0"),
    cmd("acl|setuser", -3, ADMIN | ACL_FLAGS, Keys::None, "server", acl_setuser)
        .doc("Modify or create the rules for a specific ACL user", "6.0.0"),
    cmd("acl|users", 2, ADMIN | ACL_FLAGS, Keys::None, "server", acl_users)
        .doc("List the username of all the configured ACL rules", "6.0.0"),
    cmd("acl|whoami", 2, ACL_FLAGS, Keys::None, "server", acl_whoami)
        .doc("Return the name of the user associated to the current connection", "6.0.0"),
];

fn acl_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    super::server::reply_help(
        ctx,
        argv[0],
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
    Ok(())
}

fn acl_setuser(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let name = argv[2];
    if acl::has_spaces(name) {
        return Err(CmdError::other("ERR Usernames can't contain spaces or null characters"));
    }
    let server = ctx.server;
    let existing = server.acl.get(name);
    let old = existing.as_ref().map(|u| u.rules().clone());
    let new = acl::set_user(old.as_ref(), &argv[3..], server.acl.pubsub_all()).map_err(CmdError::Other)?;
    let (handle, old) = server.acl.put(name, new.clone());
    // Subscribers whose channels were taken away are disconnected
    // (`ACLKillPubsubClientsIfNeeded`).
    if let Some(upcoming) = old.as_ref().and_then(|old| old.revoked_channels(&new)) {
        let victims = server.pubsub.subscribers_of(&handle, |name, pattern| acl::subscription_allowed(&upcoming, name, pattern));
        kill(server, victims);
    }
    ctx.out.ok();
    Ok(())
}

/// Closes the connections of `victims`: each worker looks at its kill
/// flags; the running client closes after its reply.
pub(crate) fn kill(server: &Server, victims: Vec<(Arc<ClientInfo>, usize)>) {
    let mut workers = Vec::new();
    for (info, worker) in victims {
        info.kill.store(true, Ordering::Release);
        if !workers.contains(&worker) {
            workers.push(worker);
        }
    }
    for worker in workers {
        server.send(worker, Message::CheckKills);
    }
}

/// The connections authenticated as any of `users`.
fn clients_of(server: &Server, users: &[Arc<UserHandle>]) -> Vec<(Arc<ClientInfo>, usize)> {
    server
        .clients
        .list()
        .into_iter()
        .filter(|(info, _)| info.user.lock().as_ref().is_some_and(|u| users.iter().any(|d| Arc::ptr_eq(u, d))))
        .collect()
}

fn acl_deluser(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv[2..].iter().any(|name| *name == b"default") {
        return Err(CmdError::other("ERR The 'default' user cannot be removed"));
    }
    let removed: Vec<Arc<UserHandle>> = argv[2..].iter().filter_map(|name| ctx.server.acl.remove(name)).collect();
    kill(ctx.server, clients_of(ctx.server, &removed));
    ctx.out.int(removed.len() as i64);
    Ok(())
}

fn acl_getuser(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let Some(user) = ctx.server.acl.get(argv[2]) else {
        ctx.out.null();
        return Ok(());
    };
    let rules = user.rules().clone();
    let out = &mut ctx.out;
    out.map(6);
    out.bulk(b"flags");
    let names = rules.flag_names();
    out.set(names.len());
    for name in names {
        out.bulk(name.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(rules.passwords.len());
    for p in &rules.passwords {
        out.bulk(p);
    }
    reply_selector(ctx, &rules.selectors[0]);
    ctx.out.bulk(b"selectors");
    ctx.out.array(rules.selectors.len() - 1);
    for s in &rules.selectors[1..] {
        ctx.out.map(3);
        reply_selector(ctx, s);
    }
    Ok(())
}

/// A selector's commands, keys and channels (`aclAddReplySelectorDescription`).
fn reply_selector(ctx: &mut Ctx<'_>, s: &acl::Selector) {
    ctx.out.bulk(b"commands");
    ctx.out.bulk(s.describe_commands().as_bytes());
    ctx.out.bulk(b"keys");
    ctx.out.bulk(&s.keys_text());
    ctx.out.bulk(b"channels");
    ctx.out.bulk(&s.channels_text());
}

fn acl_list(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let users = ctx.server.acl.users();
    ctx.out.array(users.len());
    for user in users {
        let line = [b"user ".as_slice(), &user.name, b" ", &user.rules().describe()].concat();
        ctx.out.bulk(&line);
    }
    Ok(())
}

fn acl_users(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let users = ctx.server.acl.users();
    ctx.out.array(users.len());
    for user in users {
        ctx.out.bulk(&user.name);
    }
    Ok(())
}

fn acl_whoami(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let name = ctx.client.user_name();
    ctx.out.bulk(&name);
    Ok(())
}

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users \
                           via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis \
                           configuration file set) in order to store users in the Redis configuration.";

fn acl_file(ctx: &Ctx<'_>) -> Result<String, CmdError> {
    let path = ctx.server.config.read().aclfile.clone();
    if path.is_empty() {
        return Err(CmdError::other(NO_ACL_FILE));
    }
    Ok(path)
}

fn acl_load(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let path = acl_file(ctx)?;
    let gone = ctx.server.acl.load_file(&path).map_err(|e| CmdError::other(format!("ERR {e}")))?;
    kill(ctx.server, clients_of(ctx.server, &gone));
    ctx.out.ok();
    Ok(())
}

fn acl_save(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let path = acl_file(ctx)?;
    if let Err(e) = ctx.server.acl.save_file(&path) {
        tracing::warn!("Writing ACL file for ACL SAVE: {e}");
        return Err(CmdError::other(
            "ERR There was an error trying to save the ACLs. Please check the server logs for more information",
        ));
    }
    ctx.out.ok();
    Ok(())
}

fn acl_cat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    match argv {
        [_, _] => {
            ctx.out.array(super::acl::NAMES.len());
            for (_, name) in super::acl::NAMES {
                ctx.out.bulk(name.as_bytes());
            }
        }
        [_, _, category] => {
            let Some(bit) = acl::category(category) else {
                return Err(CmdError::other(format!(
                    "ERR Unknown category '{}'",
                    String::from_utf8_lossy(&category[..category.len().min(128)])
                )));
            };
            // Each command, then its subcommands, as Redis walks them.
            let names: Vec<&str> = table()
                .commands
                .iter()
                .flat_map(|c| std::iter::once(*c).chain(c.subcommands.iter()))
                .filter(|c| super::server::acl_category_bits(c) & bit != 0)
                .map(|c| c.name)
                .collect();
            ctx.out.array(names.len());
            for name in names {
                ctx.out.bulk(name.as_bytes());
            }
        }
        _ => return Err(CmdError::subcommand_syntax(argv)),
    }
    Ok(())
}

fn acl_genpass(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    const MAX_BITS: i64 = 4096;
    let bits = match argv {
        [_, _] => 256,
        [_, _, bits] => i64_arg(bits)?,
        _ => return Err(CmdError::subcommand_syntax(argv)),
    };
    if bits <= 0 || bits > MAX_BITS {
        return Err(CmdError::other(format!(
            "ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to {MAX_BITS}"
        )));
    }
    ctx.out.bulk(acl::genpass(bits as usize).as_bytes());
    Ok(())
}

fn acl_log(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let count = match argv {
        [_, _] => 10,
        [_, _, arg] if eq(arg, "reset") => {
            ctx.server.acl.log_reset();
            ctx.out.ok();
            return Ok(());
        }
        [_, _, count] => i64_arg(count)?.max(0) as usize,
        _ => return Err(CmdError::subcommand_syntax(argv)),
    };
    let entries = ctx.server.acl.log_entries(count);
    let now = crate::server::unix_ms();
    ctx.out.array(entries.len());
    for entry in entries {
        reply_log_entry(ctx, &entry, now);
    }
    Ok(())
}

fn reply_log_entry(ctx: &mut Ctx<'_>, e: &LogEntry, now_ms: u64) {
    let out = &mut ctx.out;
    out.map(7);
    out.bulk(b"count");
    out.int(e.count as i64);
    out.bulk(b"reason");
    out.bulk(match e.reason {
        Reason::Command => b"command".as_slice(),
        Reason::Key => b"key",
        Reason::Auth => b"auth",
        Reason::Channel => b"channel",
    });
    out.bulk(b"context");
    out.bulk(match e.context {
        Context::Toplevel => b"toplevel".as_slice(),
        Context::Multi => b"multi",
        Context::Lua => b"lua",
    });
    out.bulk(b"object");
    out.bulk(&e.object);
    out.bulk(b"username");
    out.bulk(&e.username);
    out.bulk(b"age-seconds");
    out.double(now_ms.saturating_sub(e.ctime_ms) as f64 / 1000.0);
    out.bulk(b"client-info");
    out.bulk(e.client_info.as_bytes());
}

fn acl_dryrun(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let Some(user) = ctx.server.acl.get(argv[2]) else {
        return Err(CmdError::other(format!("ERR User '{}' not found", String::from_utf8_lossy(argv[2]))));
    };
    let args = &argv[3..];
    let not_found = || CmdError::other(format!("ERR Command '{}' not found", String::from_utf8_lossy(args[0])));
    // Redis's lookupCommand: a container's subcommand when one is named.
    let table = table();
    let (top, spec) = table.lookup(args[0]).ok_or_else(not_found)?;
    let (id, spec) = match (spec.subcommands.is_empty(), args.get(1)) {
        (false, Some(sub)) => {
            let (sub, subspec) = spec.subcommand(sub).ok_or_else(not_found)?;
            (table.sub_index(top, sub), subspec)
        }
        _ => (top, spec),
    };
    if !spec.arity_ok(args.len()) {
        return Err(CmdError::other(format!("ERR wrong number of arguments for '{}' command", spec.name)));
    }
    let rules: User = user.rules().clone();
    match rules.check(id, spec, args) {
        Ok(()) => ctx.out.ok(),
        Err(acl::Denied::Command) => {
            ctx.out.bulk(format!("This user has no permissions to run the '{}' command", spec.name).as_bytes())
        }
        Err(acl::Denied::Key(at)) => ctx.out.bulk(
            format!("This user has no permissions to access the '{}' key", String::from_utf8_lossy(args[at])).as_bytes(),
        ),
        Err(acl::Denied::Channel(at)) => ctx.out.bulk(
            format!("This user has no permissions to access the '{}' channel", String::from_utf8_lossy(args[at]))
                .as_bytes(),
        ),
    }
    Ok(())
}
