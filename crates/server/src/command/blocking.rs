//! The blocking pops: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN,
//! BZPOPMAX and BZMPOP.
//!
//! Each handler first tries to pop as its non-blocking twin would (the pop
//! itself is the list or sorted-set module's); if every key is empty it
//! blocks the client through `crate::blocking`, or, where it may not block
//! (inside EXEC, or while serving a blocked client), answers as a timeout
//! would. What reaches the journal is always the non-blocking command the
//! pop amounts to: replaying a blocking command could block the replay.

use smallvec::SmallVec;

use super::lists::{self, End};
use super::zsets;
use super::keyspec::*;
use super::{cmd, flags::*, range, CmdResult, CommandSpec, Ctx, Keys};
use crate::blocking::{block, parse_timeout};

pub static COMMANDS: &[CommandSpec] = &[
    cmd("blpop", -3, WRITE | NOSCRIPT | BLOCKING, range(1, -2, 1), "list", blpop)
        .doc("Remove and get the first element in a list, or block until one is available", "2.0.0")
        .specs(&[ks(RW | ACCESS | DELETE, index(1), span(-2, 1, 0))]),
    cmd("brpop", -3, WRITE | NOSCRIPT | BLOCKING, range(1, -2, 1), "list", brpop)
        .doc("Remove and get the last element in a list, or block until one is available", "2.0.0")
        .specs(&[ks(RW | ACCESS | DELETE, index(1), span(-2, 1, 0))]),
    cmd("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING, range(1, 2, 1), "list", brpoplpush)
        .doc(
            "Pop an element from a list, push it to another list and return it; or block until one is available",
            "2.2.0",
        )
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, RW | INSERT)]),
    cmd("blmove", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING, range(1, 2, 1), "list", blmove)
        .doc(
            "Pop an element from a list, push it to another list and return it; or block until one is available",
            "6.2.0",
        )
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, RW | INSERT)]),
    cmd("blmpop", -5, WRITE | BLOCKING, Keys::Custom(mpop_keys), "list", blmpop)
        .doc("Pop elements from a list, or block until one is available", "7.0.0")
        .specs(&[ks(RW | ACCESS | DELETE, index(2), keynum(0, 1, 1))]),
    cmd("bzpopmin", -3, WRITE | NOSCRIPT | FAST | BLOCKING, range(1, -2, 1), "sorted-set", bzpopmin)
        .doc(
            "Remove and return the member with the lowest score from one or more sorted sets, or block until one is available",
            "5.0.0",
        )
        .specs(&[ks(RW | ACCESS | DELETE, index(1), span(-2, 1, 0))]),
    cmd("bzpopmax", -3, WRITE | NOSCRIPT | FAST | BLOCKING, range(1, -2, 1), "sorted-set", bzpopmax)
        .doc(
            "Remove and return the member with the highest score from one or more sorted sets, or block until one is available",
            "5.0.0",
        )
        .specs(&[ks(RW | ACCESS | DELETE, index(1), span(-2, 1, 0))]),
    cmd("bzmpop", -5, WRITE | BLOCKING, Keys::Custom(mpop_keys), "sorted-set", bzmpop)
        .doc("Remove and return members with scores in a sorted set or block until one is available", "7.0.0")
        .specs(&[ks(RW | ACCESS | DELETE, index(2), keynum(0, 1, 1))]),
];

/// BLMPOP and BZMPOP: `timeout numkeys key...` (EVAL: `script numkeys key...`).
pub fn mpop_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    let numkeys = argv.get(2).and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok()).unwrap_or(0);
    (3..3usize.saturating_add(numkeys).min(argv.len())).collect()
}

/// Nothing to pop: block, or answer as a timeout would where blocking is
/// not allowed.
fn wait(ctx: &mut Ctx<'_>, argv: &[&[u8]], keys: &[&[u8]], deadline_ms: u64) -> CmdResult {
    if ctx.can_block() {
        block(ctx, argv, keys, deadline_ms);
    } else {
        ctx.out.null_array();
    }
    Ok(())
}

fn end_name(end: End) -> &'static [u8] {
    match end {
        End::Left => b"LEFT",
        End::Right => b"RIGHT",
    }
}

fn blpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    pop_list(ctx, argv, End::Left)
}

fn brpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    pop_list(ctx, argv, End::Right)
}

/// BLPOP/BRPOP key... timeout: replies [key, element] from the first
/// non-empty key, in argument order.
fn pop_list(ctx: &mut Ctx<'_>, argv: &[&[u8]], end: End) -> CmdResult {
    let deadline = parse_timeout(argv[argv.len() - 1], ctx.now_ms)?;
    let keys = &argv[1..argv.len() - 1];
    for &key in keys {
        if let Some(items) = lists::pop(ctx, key, end, 1)? {
            let pop: &[u8] = if end == End::Left { b"LPOP" } else { b"RPOP" };
            ctx.propagate_as(vec![vec![pop.to_vec(), key.to_vec()]]);
            ctx.out.array(2);
            ctx.out.bulk(key);
            ctx.out.bulk(&items[0]);
            return Ok(());
        }
    }
    wait(ctx, argv, keys, deadline)
}

fn blmove(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let from = lists::parse_end(argv[3])?;
    let to = lists::parse_end(argv[4])?;
    move_list(ctx, argv, from, to)
}

fn brpoplpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    move_list(ctx, argv, End::Right, End::Left)
}

/// BLMOVE/BRPOPLPUSH: LMOVE once the source has an element.
fn move_list(ctx: &mut Ctx<'_>, argv: &[&[u8]], from: End, to: End) -> CmdResult {
    let deadline = parse_timeout(argv[argv.len() - 1], ctx.now_ms)?;
    let (src, dst) = (argv[1], argv[2]);
    match lists::lmove(ctx, src, dst, from, to)? {
        Some(element) => {
            // As Redis's: the non-blocking form of the same command.
            let logged: &[&[u8]] = match argv.len() {
                4 => &[b"RPOPLPUSH", src, dst],
                _ => &[b"LMOVE", src, dst, end_name(from), end_name(to)],
            };
            ctx.propagate_as(vec![logged.iter().map(|a| a.to_vec()).collect()]);
            ctx.out.bulk(&element);
            Ok(())
        }
        // Inside EXEC an empty source answers as LMOVE does: a null bulk.
        None if !ctx.can_block() => {
            ctx.out.null();
            Ok(())
        }
        None => wait(ctx, argv, &[src], deadline),
    }
}

/// BLMPOP timeout numkeys key... LEFT|RIGHT [COUNT count]: replies
/// [key, [elements]] as LMPOP.
fn blmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (numkeys, end, count) = lists::parse_mpop(&argv[2..])?;
    let deadline = parse_timeout(argv[1], ctx.now_ms)?;
    let keys = &argv[3..3 + numkeys];
    for &key in keys {
        if let Some(items) = lists::pop(ctx, key, end, count)? {
            let pop: &[u8] = if end == End::Left { b"LPOP" } else { b"RPOP" };
            ctx.propagate_as(vec![vec![pop.to_vec(), key.to_vec(), items.len().to_string().into_bytes()]]);
            ctx.out.array(2);
            ctx.out.bulk(key);
            ctx.out.array(items.len());
            for item in &items {
                ctx.out.bulk(item);
            }
            return Ok(());
        }
    }
    wait(ctx, argv, keys, deadline)
}

fn bzpopmin(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    pop_zset(ctx, argv, false)
}

fn bzpopmax(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    pop_zset(ctx, argv, true)
}

fn zpop_name(max: bool) -> &'static [u8] {
    if max {
        b"ZPOPMAX"
    } else {
        b"ZPOPMIN"
    }
}

/// BZPOPMIN/BZPOPMAX key... timeout: replies [key, member, score].
fn pop_zset(ctx: &mut Ctx<'_>, argv: &[&[u8]], max: bool) -> CmdResult {
    let deadline = parse_timeout(argv[argv.len() - 1], ctx.now_ms)?;
    let keys = &argv[1..argv.len() - 1];
    for &key in keys {
        if let Some(popped) = zsets::pop(ctx, key, max, 1)? {
            ctx.propagate_as(vec![vec![zpop_name(max).to_vec(), key.to_vec()]]);
            let (member, score) = &popped[0];
            ctx.out.array(3);
            ctx.out.bulk(key);
            ctx.out.bulk(member);
            zsets::reply_score(&mut ctx.out, *score);
            return Ok(());
        }
    }
    wait(ctx, argv, keys, deadline)
}

/// BZMPOP timeout numkeys key... MIN|MAX [COUNT count]: replies
/// [key, [[member, score]...]] as ZMPOP.
fn bzmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (numkeys, max, count) = zsets::parse_mpop(&argv[2..])?;
    let deadline = parse_timeout(argv[1], ctx.now_ms)?;
    let keys = &argv[3..3 + numkeys];
    for &key in keys {
        if let Some(popped) = zsets::pop(ctx, key, max, count)? {
            let logged = vec![zpop_name(max).to_vec(), key.to_vec(), popped.len().to_string().into_bytes()];
            ctx.propagate_as(vec![logged]);
            ctx.out.array(2);
            ctx.out.bulk(key);
            ctx.out.array(popped.len());
            for (member, score) in &popped {
                ctx.out.array(2);
                ctx.out.bulk(member);
                zsets::reply_score(&mut ctx.out, *score);
            }
            return Ok(());
        }
    }
    wait(ctx, argv, keys, deadline)
}
