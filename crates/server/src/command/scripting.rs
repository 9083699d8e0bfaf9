//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT; FCALL, FCALL_RO and
//! FUNCTION (`crate::scripting` runs the scripts and keeps the libraries).
//!
//! The EVAL and FCALL families lock every shard: a script may touch keys
//! it did not declare, and must be atomic. So do the FUNCTION commands
//! that change the libraries, so that a snapshot's instant S orders them
//! (`scripting::functions`).

use super::blocking::mpop_keys;
use super::keyspec::*;
use super::server::{container, reply_help};
use super::{acl, cmd, flags::*, parse::eq, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::scripting::functions::RestorePolicy;

const G: &str = "scripting";
const EVAL_FLAGS: u32 = NOSCRIPT | SKIP_MONITOR | STALE | NO_MANDATORY_KEYS | ALL_SHARDS;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("eval", -3, EVAL_FLAGS, Keys::Custom(mpop_keys), G, eval)
        .doc("Execute a Lua script server side", "2.6.0")
        .specs(&[ks(RW | ACCESS | UPDATE, index(2), keynum(0, 1, 1))
            .notes("We cannot tell how the keys will be used so we assume the worst, RW and UPDATE")])
        .acl(acl::SCRIPTING),
    cmd("evalsha", -3, EVAL_FLAGS, Keys::Custom(mpop_keys), G, evalsha)
        .doc("Execute a Lua script server side", "2.6.0")
        .specs(&[ks(RW | ACCESS | UPDATE, index(2), keynum(0, 1, 1))])
        .acl(acl::SCRIPTING),
    cmd("eval_ro", -3, READONLY | EVAL_FLAGS, Keys::Custom(mpop_keys), G, eval_ro)
        .doc("Execute a read-only Lua script server side", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(2), keynum(0, 1, 1))
            .notes("We cannot tell how the keys will be used so we assume the worst, RO and ACCESS")])
        .acl(acl::SCRIPTING),
    cmd("evalsha_ro", -3, READONLY | EVAL_FLAGS, Keys::Custom(mpop_keys), G, evalsha_ro)
        .doc("Execute a read-only Lua script server side", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(2), keynum(0, 1, 1))])
        .acl(acl::SCRIPTING),
    cmd("script", -2, 0, Keys::None, G, container)
        .doc("A container for Lua scripts management commands", "2.6.0")
        .subs(SCRIPT_SUBCOMMANDS)
        .acl(acl::NONE),
    cmd("fcall", -3, EVAL_FLAGS, Keys::Custom(mpop_keys), G, fcall)
        .doc("Invoke a function", "7.0.0")
        .specs(&[ks(RW | ACCESS | UPDATE, index(2), keynum(0, 1, 1))
            .notes("We cannot tell how the keys will be used so we assume the worst, RW and UPDATE")])
        .acl(acl::SCRIPTING),
    cmd("fcall_ro", -3, READONLY | EVAL_FLAGS, Keys::Custom(mpop_keys), G, fcall_ro)
        .doc("Invoke a read-only function", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(2), keynum(0, 1, 1))
            .notes("We cannot tell how the keys will be used so we assume the worst, RO and ACCESS")])
        .acl(acl::SCRIPTING),
    cmd("function", -2, 0, Keys::None, G, container)
        .doc("A container for function commands", "7.0.0")
        .subs(FUNCTION_SUBCOMMANDS)
        .acl(acl::NONE),
];

/// The FUNCTION commands that change the libraries.
const CHANGES_LIBRARIES: u32 = WRITE | NOSCRIPT | ALL_SHARDS;
const ALL_SHARDS_TIPS: &[&str] = &["request_policy:all_shards", "response_policy:all_succeeded"];

const FUNCTION_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("function|delete", 3, CHANGES_LIBRARIES, Keys::None, G, function_delete)
        .doc("Delete a function by name", "7.0.0")
        .tips(ALL_SHARDS_TIPS)
        .acl(acl::WRITE | acl::SCRIPTING),
    cmd("function|dump", 2, NOSCRIPT, Keys::None, G, function_dump)
        .doc("Dump all functions into a serialized binary payload", "7.0.0"),
    cmd("function|flush", -2, CHANGES_LIBRARIES, Keys::None, G, function_flush)
        .doc("Deleting all functions", "7.0.0")
        .tips(ALL_SHARDS_TIPS)
        .acl(acl::WRITE | acl::SCRIPTING),
    cmd("function|help", 2, LOADING | STALE, Keys::None, G, function_help)
        .doc("Show helpful text about the different subcommands", "7.0.0"),
    cmd("function|kill", 2, NOSCRIPT | ALLOW_BUSY, Keys::None, G, function_kill)
        .doc("Kill the function currently in execution.", "7.0.0")
        .tips(&["request_policy:all_shards", "response_policy:one_succeeded"]),
    cmd("function|list", -2, NOSCRIPT, Keys::None, G, function_list)
        .doc("List information about all the functions", "7.0.0")
        .tips(&["nondeterministic_output_order"]),
    cmd("function|load", -3, CHANGES_LIBRARIES | DENYOOM, Keys::None, G, function_load)
        .doc("Create a function with the given arguments (name, code, description)", "7.0.0")
        .tips(ALL_SHARDS_TIPS)
        .acl(acl::WRITE | acl::SCRIPTING),
    cmd("function|restore", -3, CHANGES_LIBRARIES | DENYOOM, Keys::None, G, function_restore)
        .doc("Restore all the functions on the given payload", "7.0.0")
        .tips(ALL_SHARDS_TIPS)
        .acl(acl::WRITE | acl::SCRIPTING),
    cmd("function|stats", 2, NOSCRIPT | ALLOW_BUSY, Keys::None, G, function_stats)
        .doc("Return information about the function currently running (name, description, duration)", "7.0.0")
        .tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
];

const SCRIPT_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("script|debug", 3, NOSCRIPT, Keys::None, G, script_debug)
        .doc("Set the debug mode for executed scripts.", "3.2.0"),
    cmd("script|exists", -3, NOSCRIPT, Keys::None, G, script_exists)
        .doc("Check existence of scripts in the script cache.", "2.6.0")
        .tips(&["request_policy:all_shards", "response_policy:agg_logical_and"]),
    cmd("script|flush", -2, NOSCRIPT, Keys::None, G, script_flush)
        .doc("Remove all the scripts from the script cache.", "2.6.0")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    cmd("script|help", 2, LOADING | STALE, Keys::None, G, script_help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
    cmd("script|kill", 2, NOSCRIPT | ALLOW_BUSY, Keys::None, G, script_kill)
        .doc("Kill the script currently in execution.", "2.6.0")
        .tips(&["request_policy:all_shards", "response_policy:one_succeeded"]),
    cmd("script|load", 3, NOSCRIPT | STALE, Keys::None, G, script_load)
        .doc("Load the specified Lua script into the script cache.", "2.6.0")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
];

fn eval(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    crate::scripting::eval(ctx, argv, false, false)
}

fn evalsha(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    crate::scripting::eval(ctx, argv, true, false)
}

fn eval_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    crate::scripting::eval(ctx, argv, false, true)
}

fn evalsha_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    crate::scripting::eval(ctx, argv, true, true)
}

fn script_exists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ctx.out.array(argv.len() - 2);
    for sha in &argv[2..] {
        let found = ctx.server.scripts.get(sha).is_some();
        ctx.out.int(i64::from(found));
    }
    Ok(())
}

/// SCRIPT FLUSH [ASYNC|SYNC]: the cache is small, so both modes free it
/// at once.
fn script_flush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    match argv {
        [_, _] => {}
        [_, _, mode] if mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async") => {}
        _ => return Err(CmdError::other("ERR SCRIPT FLUSH only support SYNC|ASYNC option")),
    }
    ctx.server.scripts.flush();
    ctx.out.ok();
    Ok(())
}

fn script_load(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let script = ctx.server.scripts.load(ctx.server, argv[2])?;
    ctx.out.bulk(script.sha.as_bytes());
    Ok(())
}

fn script_kill(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.server.scripts.run.kill(true)?;
    ctx.out.ok();
    Ok(())
}

/// Keel has no Lua debugger: SCRIPT DEBUG NO (the default) is accepted,
/// YES and SYNC are refused.
fn script_debug(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let mode = argv[2];
    if mode.eq_ignore_ascii_case(b"no") {
        ctx.out.ok();
        return Ok(());
    }
    if mode.eq_ignore_ascii_case(b"yes") || mode.eq_ignore_ascii_case(b"sync") {
        return Err(CmdError::other("ERR Keel has no Lua debugger: SCRIPT DEBUG YES and SYNC are not supported"));
    }
    Err(CmdError::other("ERR Use SCRIPT DEBUG YES/SYNC/NO"))
}

fn script_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "DEBUG (YES|SYNC|NO)",
            "    Set the debug mode for subsequent scripts executed.",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache. Very dangerous on replicas.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the scripts cache.",
            "    * SYNC: Synchronously flush the scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
        ],
    );
    Ok(())
}

fn fcall(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    crate::scripting::fcall(ctx, argv, false)
}

fn fcall_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    crate::scripting::fcall(ctx, argv, true)
}

/// FUNCTION LOAD [REPLACE] code.
fn function_load(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (code, options) = argv[2..].split_last().ok_or_else(|| CmdError::other("ERR Function code is missing"))?;
    let mut replace = false;
    for option in options {
        if !eq(option, "replace") {
            return Err(CmdError::other(format!("ERR Unknown option given: {}", String::from_utf8_lossy(option))));
        }
        replace = true;
    }
    let name = ctx.server.scripts.functions.load(ctx.server, code, replace)?;
    ctx.wrote(1);
    ctx.out.bulk(name.as_bytes());
    Ok(())
}

fn function_delete(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ctx.server.scripts.functions.delete(argv[2])?;
    ctx.wrote(1);
    ctx.out.ok();
    Ok(())
}

/// FUNCTION FLUSH [ASYNC|SYNC]: the libraries are small, so both modes
/// free them at once.
fn function_flush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    match argv {
        [_, _] => {}
        [_, _, mode] if eq(mode, "async") || eq(mode, "sync") => {}
        [_, _, _] => return Err(CmdError::other("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")),
        _ => return Err(CmdError::subcommand_syntax(argv)),
    }
    ctx.server.scripts.functions.flush();
    ctx.wrote(1);
    ctx.out.ok();
    Ok(())
}

fn function_dump(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let libraries = ctx.server.scripts.functions.snapshot();
    let payload = keel_rdb::dump_functions(libraries.iter().map(|l| l.code.as_slice()));
    ctx.out.bulk(&payload);
    Ok(())
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE].
fn function_restore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() > 4 {
        return Err(CmdError::subcommand_syntax(argv));
    }
    let policy = match argv.get(3) {
        None => RestorePolicy::Append,
        Some(p) if eq(p, "flush") => RestorePolicy::Flush,
        Some(p) if eq(p, "append") => RestorePolicy::Append,
        Some(p) if eq(p, "replace") => RestorePolicy::Replace,
        Some(_) => {
            return Err(CmdError::other("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."))
        }
    };
    let codes = keel_rdb::restore_functions(argv[2]).map_err(|e| CmdError::other(format!("ERR {e}")))?;
    ctx.server.scripts.functions.restore(ctx.server, &codes, policy)?;
    ctx.wrote(1);
    ctx.out.ok();
    Ok(())
}

fn function_kill(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.server.scripts.run.kill(false)?;
    ctx.out.ok();
    Ok(())
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
fn function_list(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (mut with_code, mut pattern): (bool, Option<&[u8]>) = (false, None);
    let mut rest = &argv[2..];
    while let Some((option, tail)) = rest.split_first() {
        rest = match tail {
            _ if !with_code && eq(option, "withcode") => {
                with_code = true;
                tail
            }
            [name, after @ ..] if pattern.is_none() && eq(option, "libraryname") => {
                pattern = Some(name);
                after
            }
            [] if pattern.is_none() && eq(option, "libraryname") => {
                return Err(CmdError::other("ERR library name argument was not given"))
            }
            _ => return Err(CmdError::other(format!("ERR Unknown argument {}", String::from_utf8_lossy(option)))),
        };
    }
    let libraries: Vec<_> = ctx
        .server
        .scripts
        .functions
        .snapshot()
        .into_iter()
        .filter(|l| pattern.is_none_or(|p| crate::glob::matches(p, l.name.as_bytes(), true)))
        .collect();
    ctx.out.array(libraries.len());
    for library in libraries {
        ctx.out.map(if with_code { 4 } else { 3 });
        ctx.out.bulk(b"library_name");
        ctx.out.bulk(library.name.as_bytes());
        ctx.out.bulk(b"engine");
        ctx.out.bulk(b"LUA");
        ctx.out.bulk(b"functions");
        ctx.out.array(library.functions.len());
        for f in &library.functions {
            ctx.out.map(3);
            ctx.out.bulk(b"name");
            ctx.out.bulk(f.name.as_bytes());
            ctx.out.bulk(b"description");
            match &f.description {
                Some(d) => ctx.out.bulk(d),
                None => ctx.out.null(),
            }
            ctx.out.bulk(b"flags");
            let names: Vec<&str> =
                crate::scripting::flags::NAMES.iter().filter(|(_, bit)| f.flags & bit != 0).map(|(n, _)| *n).collect();
            ctx.out.set(names.len());
            for name in names {
                ctx.out.simple(name);
            }
        }
        if with_code {
            ctx.out.bulk(b"library_code");
            ctx.out.bulk(&library.code);
        }
    }
    Ok(())
}

fn function_stats(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let run = &ctx.server.scripts.run;
    if run.running_eval() {
        return Err(CmdError::other(crate::scripting::BUSY));
    }
    ctx.out.map(2);
    ctx.out.bulk(b"running_script");
    match run.running_function() {
        Some((name, command, ms)) => {
            ctx.out.map(3);
            ctx.out.bulk(b"name");
            ctx.out.bulk(name.as_bytes());
            ctx.out.bulk(b"command");
            ctx.out.array(command.len());
            for arg in &command {
                ctx.out.bulk(arg);
            }
            ctx.out.bulk(b"duration_ms");
            ctx.out.int(ms as i64);
        }
        None => ctx.out.null(),
    }
    let (libraries, functions) = ctx.server.scripts.functions.counts();
    ctx.out.bulk(b"engines");
    ctx.out.map(1);
    ctx.out.bulk(b"LUA");
    ctx.out.map(2);
    ctx.out.bulk(b"libraries_count");
    ctx.out.int(libraries as i64);
    ctx.out.bulk(b"functions_count");
    ctx.out.int(functions as i64);
    Ok(())
}

fn function_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "LOAD [REPLACE] <FUNCTION CODE>",
            "    Create a new library with the given library name and code.",
            "DELETE <LIBRARY NAME>",
            "    Delete the given library.",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "    Return general information on all the libraries:",
            "    * Library name",
            "    * The engine used to run the Library",
            "    * Library description",
            "    * Functions list",
            "    * Library code (if WITHCODE is given)",
            "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
            "STATS",
            "    Return information about the current function running:",
            "    * Function name",
            "    * Command used to run the function",
            "    * Duration in MS that the function is running",
            "    If no function is running, return nil",
            "    In addition, returns a list of available engines.",
            "KILL",
            "    Kill the current running function.",
            "FLUSH [ASYNC|SYNC]",
            "    Delete all the libraries.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the libraries.",
            "    * SYNC: Synchronously flush the libraries.",
            "DUMP",
            "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
            "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
            "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
            "    control how to handle existing libraries (default APPEND):",
            "    * FLUSH: delete all existing libraries.",
            "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
            "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
            "      libraries with the new libraries (notice that even on this option there is a chance of failure",
            "      in case of functions name collision with another library).",
        ],
    );
    Ok(())
}
