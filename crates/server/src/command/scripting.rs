//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT (`crate::scripting` runs
//! the scripts).
//!
//! The EVAL family locks every shard: a script may touch keys it did not
//! declare, and must be atomic.

use super::blocking::mpop_keys;
use super::keyspec::*;
use super::server::{container, reply_help};
use super::{acl, cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};

const G: &str = "scripting";
const EVAL_FLAGS: u32 = NOSCRIPT | SKIP_MONITOR | STALE | ALL_SHARDS;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("eval", -3, EVAL_FLAGS, Keys::Custom(mpop_keys), G, eval)
        .doc("Execute a Lua script server side", "2.6.0")
        .specs(&[ks(RW | ACCESS | UPDATE, index(2), keynum(0, 1, 1))
            .notes("We cannot tell how the keys will be used so we assume the worst, RW and UPDATE flags")])
        .acl(acl::SCRIPTING),
    cmd("evalsha", -3, EVAL_FLAGS, Keys::Custom(mpop_keys), G, evalsha)
        .doc("Execute a Lua script server side", "2.6.0")
        .specs(&[ks(RW | ACCESS | UPDATE, index(2), keynum(0, 1, 1))])
        .acl(acl::SCRIPTING),
    cmd("eval_ro", -3, READONLY | EVAL_FLAGS, Keys::Custom(mpop_keys), G, eval_ro)
        .doc("Execute a read-only Lua script server side", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(2), keynum(0, 1, 1))
            .notes("We cannot tell how the keys will be used so we assume the worst, RO and ACCESS flags")])
        .acl(acl::SCRIPTING),
    cmd("evalsha_ro", -3, READONLY | EVAL_FLAGS, Keys::Custom(mpop_keys), G, evalsha_ro)
        .doc("Execute a read-only Lua script server side", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(2), keynum(0, 1, 1))])
        .acl(acl::SCRIPTING),
    cmd("script", -2, 0, Keys::None, G, container)
        .doc("A container for Lua scripts management commands", "2.6.0")
        .subs(SCRIPT_SUBCOMMANDS),
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
    ctx.server.scripts.run.kill()?;
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
