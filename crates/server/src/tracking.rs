//! Client-side caching (CLIENT TRACKING), as Redis 7.0's `tracking.c`.
//!
//! The table of which clients may cache which keys is per shard, beside
//! the keys (`keel_engine::Shard::track`), so that remembering a read and
//! invalidating on a write happen under the shard lock the command already
//! holds: a global table behind one mutex would serialise every write of
//! every worker. While some client tracks (or the table holds keys), each
//! write notes its key in its database (`Db::modified`); after each command
//! the dispatcher takes those keys from the shards it holds (`collect`),
//! and the clients that tracked them, into this thread's pending
//! invalidations. They leave once the command has been logged (`flush`):
//! the running client's own after its reply (Redis's
//! `trackingHandlePendingKeyInvalidations`), everyone else's through their
//! workers' mailboxes as pub/sub messages travel (`pubsub::deliver`, under
//! `appendfsync always` once the journal is durable). BCAST clients get one
//! message per prefix per command, the keys the command changed under that
//! prefix: Redis gathers them for an event loop turn, which here would mean
//! holding other workers' keys until some worker's turn ends.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use keel_engine::{Key, Shard, Trackers};
use parking_lot::Mutex;

use crate::client::{Client, ClientInfo};
use crate::command::{CmdError, CmdResult};
use crate::pubsub::Delivery;
use crate::server::Server;

/// The tracking flags of a client (`ClientInfo::tracking`), as Redis's
/// `CLIENT_TRACKING*`.
pub mod flags {
    pub const ON: u32 = 1;
    pub const BCAST: u32 = 1 << 1;
    pub const OPTIN: u32 = 1 << 2;
    pub const OPTOUT: u32 = 1 << 3;
    pub const NOLOOP: u32 = 1 << 4;
    pub const BROKEN_REDIR: u32 = 1 << 5;
}

/// The server-wide part: who tracks, the BCAST prefixes and the counts.
#[derive(Default)]
pub struct Tracking {
    /// Clients with tracking on, by id, with their workers.
    clients: Mutex<HashMap<u64, (Arc<ClientInfo>, usize)>>,
    /// BCAST prefixes, each with the ids of its clients.
    prefixes: Mutex<BTreeMap<Box<[u8]>, BTreeSet<u64>>>,
    /// INFO's tracking_clients.
    count: AtomicUsize,
    /// Keys and items over every shard's table (tracking_total_keys,
    /// tracking_total_items).
    keys: AtomicU64,
    items: AtomicU64,
    prefix_count: AtomicUsize,
    /// Someone tracks, or the table holds keys: writes note their keys.
    active: AtomicBool,
    /// `tracking-table-max-keys`, mirrored: read before every command of
    /// a server with tracking clients.
    max_keys: AtomicU64,
    /// Rounds in a row that left the table over `tracking-table-max-keys`
    /// (Redis's `timeout_counter`): each round tries harder.
    over_rounds: AtomicU64,
}

impl Tracking {
    /// Whether anything here needs the dispatcher: one relaxed load.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    pub fn clients(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn total_keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }

    pub fn total_items(&self) -> u64 {
        self.items.load(Ordering::Relaxed)
    }

    pub fn total_prefixes(&self) -> usize {
        self.prefix_count.load(Ordering::Relaxed)
    }

    pub fn set_max_keys(&self, max: u64) {
        self.max_keys.store(max, Ordering::Relaxed);
    }

    /// Turns the noting of written keys on or off as needed; written only
    /// on a change, as every command of every worker reads the flag.
    fn refresh(&self) {
        let on = self.clients() > 0 || self.total_keys() > 0;
        if self.active.load(Ordering::Relaxed) != on {
            self.active.store(on, Ordering::Relaxed);
            keel_engine::db::track_modified(on);
        }
    }

    fn forgot(&self, keys: usize, items: usize) {
        self.keys.fetch_sub(keys as u64, Ordering::Relaxed);
        self.items.fetch_sub(items as u64, Ordering::Relaxed);
    }
}

/// CLIENT TRACKING's options, parsed.
#[derive(Default)]
pub struct Options {
    pub on: bool,
    pub redirect: u64,
    pub flags: u32,
    pub prefixes: Vec<Box<[u8]>>,
}

/// Parses CLIENT TRACKING ON|OFF [options] with Redis's checks and error
/// texts, in its order (`clientCommand`).
pub fn parse(server: &Server, client: &Client, argv: &[&[u8]]) -> Result<Options, CmdError> {
    use crate::command::parse::eq;
    let mut o = Options::default();
    let mut j = 3;
    while j < argv.len() {
        let more = j + 1 < argv.len();
        let arg = argv[j];
        if eq(arg, "redirect") && more {
            j += 1;
            if o.redirect != 0 {
                return Err(CmdError::other("ERR A client can only redirect to a single other client"));
            }
            let id = crate::command::parse::i64_arg(argv[j])?;
            if id <= 0 || server.clients.get(id as u64).is_none() {
                return Err(CmdError::other("ERR The client ID you want redirect to does not exist"));
            }
            o.redirect = id as u64;
        } else if eq(arg, "bcast") {
            o.flags |= flags::BCAST;
        } else if eq(arg, "optin") {
            o.flags |= flags::OPTIN;
        } else if eq(arg, "optout") {
            o.flags |= flags::OPTOUT;
        } else if eq(arg, "noloop") {
            o.flags |= flags::NOLOOP;
        } else if eq(arg, "prefix") && more {
            j += 1;
            o.prefixes.push(argv[j].into());
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if eq(argv[2], "off") {
        return Ok(o);
    }
    if !eq(argv[2], "on") {
        return Err(CmdError::Syntax);
    }
    o.on = true;
    let current = client.info.tracking.load(Ordering::Relaxed);
    if o.flags & flags::BCAST == 0 && !o.prefixes.is_empty() {
        return Err(CmdError::other("ERR PREFIX option requires BCAST mode to be enabled"));
    }
    if current & flags::ON != 0 && (current & flags::BCAST) != (o.flags & flags::BCAST) {
        return Err(CmdError::other(
            "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.",
        ));
    }
    if o.flags & flags::BCAST != 0 && o.flags & (flags::OPTIN | flags::OPTOUT) != 0 {
        return Err(CmdError::other("ERR OPTIN and OPTOUT are not compatible with BCAST"));
    }
    if o.flags & flags::OPTIN != 0 && o.flags & flags::OPTOUT != 0 {
        return Err(CmdError::other("ERR You can't specify both OPTIN mode and OPTOUT mode"));
    }
    if (o.flags & flags::OPTIN != 0 && current & flags::OPTOUT != 0) || (o.flags & flags::OPTOUT != 0 && current & flags::OPTIN != 0) {
        return Err(CmdError::other(
            "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.",
        ));
    }
    if o.flags & flags::BCAST != 0 {
        check_prefixes(&client.tracking_prefixes, &o.prefixes)?;
    }
    Ok(o)
}

/// Redis's `checkPrefixCollisionsOrReply`: two prefixes of one client
/// collide when one starts the other (both would invalidate a key).
fn check_prefixes(existing: &BTreeSet<Box<[u8]>>, new: &[Box<[u8]>]) -> CmdResult {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, prefix) in new.iter().enumerate() {
        if let Some(old) = existing.iter().find(|old| overlap(old, prefix)) {
            return Err(CmdError::other(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(prefix),
                text(old)
            )));
        }
        if let Some(other) = new[i + 1..].iter().find(|other| overlap(prefix, other)) {
            return Err(CmdError::other(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(prefix),
                text(other)
            )));
        }
    }
    Ok(())
}

/// Turns tracking on for `client` with `o` (Redis's `enableTracking`):
/// the mode's flags replace the old ones, prefixes add to the old ones.
pub fn enable(server: &Server, client: &mut Client, o: Options) {
    let t = &server.tracking;
    let old = client.info.tracking.load(Ordering::Relaxed);
    if old & flags::ON == 0 {
        t.clients.lock().insert(client.id, (client.info.clone(), client.worker));
        t.count.fetch_add(1, Ordering::Relaxed);
    }
    client.info.tracking_redirect.store(o.redirect, Ordering::Relaxed);
    if o.flags & flags::BCAST != 0 {
        let mut prefixes = t.prefixes.lock();
        let wanted = if o.prefixes.is_empty() { vec![Box::<[u8]>::default()] } else { o.prefixes };
        for prefix in wanted {
            if prefixes.entry(prefix.clone()).or_default().insert(client.id) {
                client.tracking_prefixes.insert(prefix);
            }
        }
        t.prefix_count.store(prefixes.len(), Ordering::Relaxed);
    }
    client.info.tracking.store(flags::ON | o.flags, Ordering::Relaxed);
    t.refresh();
}

/// Turns tracking off (CLIENT TRACKING OFF, RESET, a disconnect): Redis's
/// `disableTracking`. The keys the client read stay in the table until
/// written or evicted, as in Redis.
pub fn disable(server: &Server, client: &mut Client) {
    let t = &server.tracking;
    if client.info.tracking.swap(0, Ordering::Relaxed) & flags::ON == 0 {
        return;
    }
    client.caching = false;
    if !client.tracking_prefixes.is_empty() {
        let mut prefixes = t.prefixes.lock();
        for prefix in std::mem::take(&mut client.tracking_prefixes) {
            if let Some(ids) = prefixes.get_mut(&prefix) {
                ids.remove(&client.id);
                if ids.is_empty() {
                    prefixes.remove(&prefix);
                }
            }
        }
        t.prefix_count.store(prefixes.len(), Ordering::Relaxed);
    }
    t.clients.lock().remove(&client.id);
    t.count.fetch_sub(1, Ordering::Relaxed);
    t.refresh();
}

/// What waits to be sent, on this thread.
enum Event {
    /// `key` changed: tell the client that tracked it.
    Key(u64, Key),
    /// The keyspace was flushed: tell the client all keys went.
    Null(u64),
}

#[derive(Default)]
struct Pending {
    events: Vec<Event>,
    /// Keys changed while BCAST clients listen, each with the client that
    /// changed it (None: its time ran out, or the server evicted it).
    bcast: Vec<(Key, Option<u64>)>,
}

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::default();
}

/// After a command ran (or the server changed keys itself): takes the
/// keys modified in `shards` and the clients that tracked them into this
/// thread's pending invalidations; nothing to look at unless this thread
/// wrote. `current` is the client whose command
/// ran, which NOLOOP spares.
pub fn collect<'s>(server: &Server, shards: impl Iterator<Item = &'s mut Shard>, current: Option<u64>) {
    if !keel_engine::db::take_noted() {
        return;
    }
    let t = &server.tracking;
    let bcast = t.total_prefixes() > 0;
    PENDING.with(|p| {
        let mut pending = p.borrow_mut();
        for shard in shards {
            shard.take_modified(|key, by_expiry, ids| {
                if bcast {
                    // Expiry is nobody's write (Redis passes no client).
                    pending.bcast.push((key.into(), if by_expiry { None } else { current }));
                }
                if !ids.is_empty() {
                    invalidate(t, &mut pending, key, ids, current);
                }
            });
        }
    });
    t.refresh();
}

/// `key` left the table with `ids`: each still tracking in the default
/// mode hears of it, but a NOLOOP client not of its own change.
fn invalidate(t: &Tracking, pending: &mut Pending, key: &[u8], ids: Trackers, current: Option<u64>) {
    t.forgot(1, ids.len());
    let clients = t.clients.lock();
    for id in ids {
        let Some((info, _)) = clients.get(&id) else { continue };
        let f = info.tracking.load(Ordering::Relaxed);
        if f & flags::BCAST != 0 || (f & flags::NOLOOP != 0 && Some(id) == current) {
            continue;
        }
        pending.events.push(Event::Key(id, key.into()));
    }
}

/// After a read-only command of a tracking client: remembers the keys it
/// read, unless OPTIN without CLIENT CACHING yes or OPTOUT with CLIENT
/// CACHING no (Redis's `trackingRememberKeys`).
pub fn remember<'s>(server: &Server, client: &Client, keys: impl Iterator<Item = (&'s mut Shard, &'s [u8])>) {
    let f = client.info.tracking.load(Ordering::Relaxed);
    if f & flags::ON == 0 || f & flags::BCAST != 0 {
        return;
    }
    if (f & flags::OPTIN != 0 && !client.caching) || (f & flags::OPTOUT != 0 && client.caching) {
        return;
    }
    let t = &server.tracking;
    for (shard, key) in keys {
        let (new_key, new_item) = shard.track(key, client.id);
        t.keys.fetch_add(u64::from(new_key), Ordering::Relaxed);
        t.items.fetch_add(u64::from(new_item), Ordering::Relaxed);
    }
    t.refresh();
}

/// FLUSHALL or FLUSHDB emptied `shards` (every shard): every tracking
/// client is told that all its keys went, and the table is emptied, as
/// Redis's `trackingInvalidateKeysOnFlush`.
pub fn flushed<'s>(server: &Server, shards: impl Iterator<Item = &'s mut Shard>) {
    let t = &server.tracking;
    for shard in shards {
        let (keys, items) = shard.untrack_all();
        t.forgot(keys, items);
    }
    let ids: Vec<u64> = t.clients.lock().keys().copied().collect();
    PENDING.with(|p| p.borrow_mut().events.extend(ids.into_iter().map(Event::Null)));
    t.refresh();
}

/// Redis's `trackingLimitUsedSlots`: past `tracking-table-max-keys`, keys
/// leave the table (their clients told, as if the keys had changed), at
/// most 100 per round more than the round before, until it fits.
pub fn limit(server: &Server) {
    let t = &server.tracking;
    let max = t.max_keys.load(Ordering::Relaxed);
    if max == 0 || t.total_keys() <= max {
        t.over_rounds.store(0, Ordering::Relaxed);
        return;
    }
    let mut effort = 100 * (t.over_rounds.load(Ordering::Relaxed) as usize + 1);
    let keyspace = &server.keyspace;
    let shards = keyspace.shard_count();
    let start = rand::random::<u32>() as usize % shards;
    for i in 0..shards {
        if effort == 0 {
            break;
        }
        let index = (start + i) % shards;
        // A shard held (by a busy script, maybe for long) waits for the
        // next cron.
        let Some(mut locked) = keyspace.try_lock_shards(keel_engine::Shards::One(index)) else { continue };
        let shard = locked.shard(index);
        if shard.tracked_len() == 0 {
            continue;
        }
        let over = (t.total_keys() - max) as usize;
        let gone = shard.untrack_some(over.min(effort));
        effort -= gone.len();
        PENDING.with(|p| {
            let mut pending = p.borrow_mut();
            for (key, ids) in gone {
                invalidate(t, &mut pending, &key, ids, None);
            }
        });
        if t.total_keys() <= max {
            t.over_rounds.store(0, Ordering::Relaxed);
            t.refresh();
            return;
        }
    }
    t.over_rounds.fetch_add(1, Ordering::Relaxed);
    t.refresh();
}

/// Sends this thread's pending invalidations: those for `own` (the client
/// whose command ran, and its output) into that output, the others to
/// their workers.
pub fn flush(server: &Server, own: Option<(u64, &mut Vec<u8>)>) {
    let (events, bcast) = PENDING.with(|p| {
        let mut pending = p.borrow_mut();
        (std::mem::take(&mut pending.events), std::mem::take(&mut pending.bcast))
    });
    if events.is_empty() && bcast.is_empty() {
        return;
    }
    let mut out = Out { own, others: Vec::new() };
    for event in events {
        match event {
            Event::Key(id, key) => {
                let mut payload = Vec::with_capacity(key.len() + 16);
                keel_protocol::ReplyWriter::new(&mut payload, false).array(1);
                keel_protocol::ReplyWriter::new(&mut payload, false).bulk(&key);
                send(server, id, Payload::Keys(&payload), &mut out);
            }
            Event::Null(id) => send(server, id, Payload::Null, &mut out),
        }
    }
    if !bcast.is_empty() {
        broadcast(server, bcast, &mut out);
    }
    if !out.others.is_empty() {
        crate::pubsub::deliver(server, out.others);
    }
}

/// Redis's `trackingBroadcastInvalidationMessages` for one batch: to each
/// BCAST client, per prefix, the keys changed under it in key order, less
/// a NOLOOP client's own changes.
fn broadcast(server: &Server, changed: Vec<(Key, Option<u64>)>, out: &mut Out<'_>) {
    // The last change of a key names its writer, as Redis's radix tree.
    let changed: BTreeMap<Key, Option<u64>> = changed.into_iter().collect();
    let prefixes: Vec<(Box<[u8]>, Vec<u64>)> =
        server.tracking.prefixes.lock().iter().map(|(p, ids)| (p.clone(), ids.iter().copied().collect())).collect();
    let noloop: HashMap<u64, bool> = {
        let clients = server.tracking.clients.lock();
        prefixes
            .iter()
            .flat_map(|(_, ids)| ids.iter())
            .map(|id| (*id, clients.get(id).is_some_and(|(i, _)| i.tracking.load(Ordering::Relaxed) & flags::NOLOOP != 0)))
            .collect()
    };
    for (prefix, ids) in prefixes {
        let keys: Vec<(&Key, Option<u64>)> = changed.iter().filter(|(k, _)| k.starts_with(&prefix)).map(|(k, w)| (k, *w)).collect();
        if keys.is_empty() {
            continue;
        }
        for id in ids {
            let mine = |w: Option<u64>| noloop.get(&id).copied().unwrap_or(false) && w == Some(id);
            let sent: Vec<&Key> = keys.iter().filter(|(_, w)| !mine(*w)).map(|(k, _)| *k).collect();
            if sent.is_empty() {
                continue;
            }
            let mut payload = Vec::new();
            keel_protocol::ReplyWriter::new(&mut payload, false).array(sent.len());
            for key in sent {
                keel_protocol::ReplyWriter::new(&mut payload, false).bulk(key);
            }
            send(server, id, Payload::Keys(&payload), out);
        }
    }
}

/// Where `flush` puts frames.
struct Out<'a> {
    own: Option<(u64, &'a mut Vec<u8>)>,
    others: Vec<Delivery>,
}

enum Payload<'a> {
    /// An array of keys, RESP-encoded.
    Keys(&'a [u8]),
    /// All keys: a null in the tracking client's protocol (even when its
    /// messages go to a client of the other, as Redis sends it).
    Null,
}

/// Redis's `sendTrackingMessage`: to the tracking client `id`, or to its
/// redirection: a push in RESP3, a message on `__redis__:invalidate` to a
/// RESP2 redirection that is subscribed, nothing to a RESP2 client itself.
/// A redirection that is gone marks the client, which hears of it in RESP3.
fn send(server: &Server, id: u64, payload: Payload<'_>, out: &mut Out<'_>) {
    let Some((info, worker)) = server.tracking.clients.lock().get(&id).cloned() else { return };
    let null: &[u8] = if info.resp.load(Ordering::Relaxed) == 3 { b"_\r\n" } else { b"*-1\r\n" };
    let payload = match payload {
        Payload::Keys(bytes) => bytes,
        Payload::Null => null,
    };
    let redirect = info.tracking_redirect.load(Ordering::Relaxed);
    let (to, worker, redirected) = if redirect == 0 {
        (info, worker, false)
    } else {
        match server.clients.get(redirect) {
            Some((target, worker)) => (target, worker, true),
            None => {
                info.tracking.fetch_or(flags::BROKEN_REDIR, Ordering::Relaxed);
                if info.resp.load(Ordering::Relaxed) == 3 {
                    let mut frame = Vec::with_capacity(40);
                    let mut w = keel_protocol::ReplyWriter::new(&mut frame, true);
                    w.push(2);
                    w.bulk(b"tracking-redir-broken");
                    w.int(redirect as i64);
                    put(out, info.id, worker, frame);
                }
                return;
            }
        }
    };
    let mut frame = Vec::with_capacity(payload.len() + 48);
    if to.resp.load(Ordering::Relaxed) == 3 {
        let mut w = keel_protocol::ReplyWriter::new(&mut frame, true);
        w.push(2);
        w.bulk(b"invalidate");
    } else if redirected && to.subscriptions.iter().any(|n| n.load(Ordering::Relaxed) > 0) {
        let mut w = keel_protocol::ReplyWriter::new(&mut frame, false);
        w.array(3);
        w.bulk(b"message");
        w.bulk(b"__redis__:invalidate");
    } else {
        return;
    }
    frame.extend_from_slice(payload);
    put(out, to.id, worker, frame);
}

fn put(out: &mut Out<'_>, id: u64, worker: usize, frame: Vec<u8>) {
    match &mut out.own {
        Some((own, wbuf)) if *own == id => wbuf.extend_from_slice(&frame),
        _ => out.others.push((worker, id, frame)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefixes(p: &[&str]) -> Vec<Box<[u8]>> {
        p.iter().map(|s| s.as_bytes().into()).collect()
    }

    #[test]
    fn prefixes_collide_when_one_starts_the_other() {
        let none = BTreeSet::new();
        assert!(check_prefixes(&none, &prefixes(&["a:", "b:"])).is_ok());
        let e = check_prefixes(&none, &prefixes(&["FOO", "FOOBAR"])).expect_err("they overlap").to_string();
        assert_eq!(e, "ERR Prefix 'FOO' overlaps with another provided prefix 'FOOBAR'. Prefixes for a single client must not overlap.");
        let existing: BTreeSet<Box<[u8]>> = prefixes(&["BAR"]).into_iter().collect();
        let e = check_prefixes(&existing, &prefixes(&["BARB"])).expect_err("it overlaps").to_string();
        assert_eq!(e, "ERR Prefix 'BARB' overlaps with an existing prefix 'BAR'. Prefixes for a single client must not overlap.");
        // The empty prefix collides with any other.
        assert!(check_prefixes(&none, &prefixes(&["", "x"])).is_err());
    }
}
