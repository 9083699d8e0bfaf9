//! Pub/sub commands: SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE, their
//! UNSUBSCRIBE twins, PUBLISH, SPUBLISH and PUBSUB, as Redis 7.0 answers
//! them. Who listens to what, and how messages travel, is `crate::pubsub`.

use super::keyspec::{index, ks, span, KeySpec, NOT_KEY};
use super::{cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::pubsub::Kind;

const SUBSCRIBING: u32 = PUBSUB | NOSCRIPT | LOADING | STALE;
const PUBLISHING: u32 = PUBSUB | LOADING | STALE | FAST;
/// Shard channels are named where keys are, so that a cluster can route
/// them by slot; they are not keys.
const SHARD_CHANNELS: &[KeySpec] = &[ks(NOT_KEY, index(1), span(-1, 1, 0))];
const SHARD_CHANNEL: &[KeySpec] = &[ks(NOT_KEY, index(1), span(0, 1, 0))];

pub static COMMANDS: &[CommandSpec] = &[
    cmd("subscribe", -2, SUBSCRIBING, Keys::None, "pubsub", subscribe)
        .doc("Listen for messages published to the given channels", "2.0.0"),
    cmd("unsubscribe", -1, SUBSCRIBING, Keys::None, "pubsub", unsubscribe)
        .doc("Stop listening for messages posted to the given channels", "2.0.0"),
    cmd("psubscribe", -2, SUBSCRIBING, Keys::None, "pubsub", psubscribe)
        .doc("Listen for messages published to channels matching the given patterns", "2.0.0"),
    cmd("punsubscribe", -1, SUBSCRIBING, Keys::None, "pubsub", punsubscribe)
        .doc("Stop listening for messages posted to channels matching the given patterns", "2.0.0"),
    cmd("ssubscribe", -2, SUBSCRIBING, Keys::None, "pubsub", ssubscribe)
        .doc("Listen for messages published to the given shard channels", "7.0.0")
        .specs(SHARD_CHANNELS),
    cmd("sunsubscribe", -1, SUBSCRIBING, Keys::None, "pubsub", sunsubscribe)
        .doc("Stop listening for messages posted to the given shard channels", "7.0.0")
        .specs(SHARD_CHANNELS),
    cmd("publish", 3, PUBLISHING, Keys::None, "pubsub", publish).doc("Post a message to a channel", "2.0.0"),
    cmd("spublish", 3, PUBLISHING, Keys::None, "pubsub", spublish)
        .doc("Post a message to a shard channel", "7.0.0")
        .specs(SHARD_CHANNEL),
    cmd("pubsub", -2, 0, Keys::None, "pubsub", super::server::container)
        .doc("A container for Pub/Sub commands", "2.8.0")
        .subs(PUBSUB_SUBCOMMANDS),
];

const INTROSPECTION: u32 = PUBSUB | LOADING | STALE;

const PUBSUB_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("pubsub|channels", -2, INTROSPECTION, Keys::None, "pubsub", channels).doc("List active channels", "2.8.0"),
    cmd("pubsub|help", 2, LOADING | STALE, Keys::None, "pubsub", help)
        .doc("Show helpful text about the different subcommands", "6.2.0"),
    cmd("pubsub|numpat", 2, INTROSPECTION, Keys::None, "pubsub", numpat)
        .doc("Get the count of unique patterns pattern subscriptions", "2.8.0"),
    cmd("pubsub|numsub", -2, INTROSPECTION, Keys::None, "pubsub", numsub)
        .doc("Get the count of subscribers for channels", "2.8.0"),
    cmd("pubsub|shardchannels", -2, INTROSPECTION, Keys::None, "pubsub", shardchannels)
        .doc("List active shard channels", "7.0.0"),
    cmd("pubsub|shardnumsub", -2, INTROSPECTION, Keys::None, "pubsub", shardnumsub)
        .doc("Get the count of subscribers for shard channels", "7.0.0"),
];

/// Whether a RESP2 client that listens to something may run `name`
/// (Redis's processCommand): the rest is refused until it listens to
/// nothing. RESP3 clients may run anything.
pub fn allowed_while_subscribed(name: &str) -> bool {
    matches!(
        name,
        "ping" | "subscribe" | "ssubscribe" | "unsubscribe" | "sunsubscribe" | "psubscribe" | "punsubscribe" | "quit" | "reset"
    )
}

fn subscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    subscribe_to(ctx, Kind::Channel, &argv[1..])
}

fn psubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    subscribe_to(ctx, Kind::Pattern, &argv[1..])
}

fn ssubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    // Redis's EXEC marks its client CLIENT_DENY_BLOCKING, and only the
    // older two subscribes make an exception for transactions.
    if ctx.durability.in_transaction {
        return Err(CmdError::other("ERR SSUBSCRIBE isn't allowed for a DENY BLOCKING client"));
    }
    subscribe_to(ctx, Kind::Shard, &argv[1..])
}

fn unsubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    unsubscribe_from(ctx, Kind::Channel, &argv[1..])
}

fn punsubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    unsubscribe_from(ctx, Kind::Pattern, &argv[1..])
}

fn sunsubscribe(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    unsubscribe_from(ctx, Kind::Shard, &argv[1..])
}

fn subscribe_to(ctx: &mut Ctx<'_>, kind: Kind, names: &[&[u8]]) -> CmdResult {
    for name in names {
        ctx.server.pubsub.subscribe(ctx.client, kind, name);
        confirm(ctx, kind, true, Some(name));
    }
    Ok(())
}

/// Without names, from everything of that kind; with nothing to leave, one
/// confirmation naming no channel.
fn unsubscribe_from(ctx: &mut Ctx<'_>, kind: Kind, names: &[&[u8]]) -> CmdResult {
    if !names.is_empty() {
        for name in names {
            ctx.server.pubsub.unsubscribe(ctx.client, kind, name);
            confirm(ctx, kind, false, Some(name));
        }
        return Ok(());
    }
    let all = ctx.client.subscriptions.of(kind);
    if all.is_empty() {
        confirm(ctx, kind, false, None);
    }
    for name in all {
        ctx.server.pubsub.unsubscribe(ctx.client, kind, &name);
        confirm(ctx, kind, false, Some(&name));
    }
    Ok(())
}

/// `[subscribe|unsubscribe|..., name, count]`, a push in RESP3.
fn confirm(ctx: &mut Ctx<'_>, kind: Kind, subscribe: bool, name: Option<&[u8]>) {
    let count = ctx.client.subscriptions.count(kind);
    ctx.out.push(3);
    ctx.out.bulk(kind.confirmation(subscribe).as_bytes());
    match name {
        Some(name) => ctx.out.bulk(name),
        None => ctx.out.null(),
    }
    ctx.out.int(count as i64);
    pushed(ctx);
}

/// Marks the output so far as pub/sub frames, which CLIENT REPLY OFF does
/// not silence (inside EXEC they are part of its reply).
fn pushed(ctx: &mut Ctx<'_>) {
    if !ctx.durability.in_transaction {
        ctx.client.pushed_to = ctx.out.buf.len();
    }
}

fn publish(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    publish_to(ctx, Kind::Channel, argv[1], argv[2])
}

fn spublish(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    publish_to(ctx, Kind::Shard, argv[1], argv[2])
}

/// The publisher's own messages go out before its reply, as in Redis; the
/// others leave with the command (`Ctx::published`), once what it
/// depends on is logged.
fn publish_to(ctx: &mut Ctx<'_>, kind: Kind, channel: &[u8], message: &[u8]) -> CmdResult {
    // A cluster's other nodes hear it on the bus (all of them, or for
    // SPUBLISH the slot's master and replicas), as Redis's
    // clusterPropagatePublish; replicas outside a cluster publish it to
    // their own subscribers, as Redis's do. The journal keeps no message.
    if let Some(cluster) = &ctx.server.cluster {
        cluster.publish(kind == Kind::Shard, channel, message);
    } else if ctx.server.repl.feeding() {
        ctx.durability.forced = true;
        ctx.durability.replicas_only = true;
    }
    let published = ctx.server.pubsub.publish(Some(ctx.client.id), kind, channel, message);
    for frame in &published.own {
        ctx.out.buf.extend_from_slice(frame);
        pushed(ctx);
    }
    ctx.published.extend(published.others);
    ctx.out.int(published.receivers as i64);
    Ok(())
}

fn channels(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    list_names(ctx, Kind::Channel, argv)
}

fn shardchannels(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    list_names(ctx, Kind::Shard, argv)
}

fn list_names(ctx: &mut Ctx<'_>, kind: Kind, argv: &[&[u8]]) -> CmdResult {
    if argv.len() > 3 {
        return Err(syntax_error(argv));
    }
    let names = ctx.server.pubsub.names(kind, argv.get(2).copied());
    ctx.out.array(names.len());
    for name in names {
        ctx.out.bulk(&name);
    }
    Ok(())
}

fn numsub(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    count_subscribers(ctx, Kind::Channel, &argv[2..])
}

fn shardnumsub(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    count_subscribers(ctx, Kind::Shard, &argv[2..])
}

/// A flat array of name and count pairs, as Redis's (not a map in RESP3).
fn count_subscribers(ctx: &mut Ctx<'_>, kind: Kind, names: &[&[u8]]) -> CmdResult {
    let counts = ctx.server.pubsub.subscribers(kind, names);
    ctx.out.array(names.len() * 2);
    for (name, count) in names.iter().zip(counts) {
        ctx.out.bulk(name);
        ctx.out.int(count as i64);
    }
    Ok(())
}

fn numpat(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    ctx.out.int(ctx.server.pubsub.len(Kind::Pattern) as i64);
    Ok(())
}

fn help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    super::server::reply_help(
        ctx,
        argv[0],
        &[
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
        ],
    );
    Ok(())
}

fn syntax_error(argv: &[&[u8]]) -> CmdError {
    CmdError::subcommand_syntax(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp2_subscribers_may_run_only_the_subscription_commands() {
        assert!(allowed_while_subscribed("psubscribe"));
        assert!(allowed_while_subscribed("reset"));
        assert!(!allowed_while_subscribed("publish"));
        assert!(!allowed_while_subscribed("client|list"));
    }
}
