//! Publish/subscribe: who listens to which channels, patterns and shard
//! channels, whatever worker serves them, and the messages PUBLISH sends.
//!
//! The registry is one map per kind behind one mutex: subscribing and
//! publishing are rare next to keyspace commands, and a publisher must see
//! every subscriber at once. A message for a client served by another
//! worker (or by the publisher's own, on another connection) travels in
//! that worker's mailbox (`Message::Publish`), one message per worker per
//! PUBLISH; a client publishing to itself gets its message in its own
//! output, before the PUBLISH reply, as in Redis.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use indexmap::IndexSet;
use parking_lot::Mutex;

use crate::client::{Client, ClientInfo, Message};
use crate::server::Server;

/// Redis 7.0's three kinds of subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Channel, Kind::Pattern, Kind::Shard];

    fn index(self) -> usize {
        self as usize
    }

    /// The first element of the confirmation a (un)subscribe sends.
    pub fn confirmation(self, subscribe: bool) -> &'static str {
        match (self, subscribe) {
            (Kind::Channel, true) => "subscribe",
            (Kind::Channel, false) => "unsubscribe",
            (Kind::Pattern, true) => "psubscribe",
            (Kind::Pattern, false) => "punsubscribe",
            (Kind::Shard, true) => "ssubscribe",
            (Kind::Shard, false) => "sunsubscribe",
        }
    }
}

/// A client's own subscriptions, each kind in the order they were made
/// (Redis keeps patterns in a list, channels in a hash table whose order
/// is arbitrary: this order is one of those).
#[derive(Default)]
pub struct Subscriptions {
    names: [IndexSet<Box<[u8]>>; 3],
}

impl Subscriptions {
    /// The count a (un)subscribe confirmation carries: channels and
    /// patterns together, shard channels apart (Redis's
    /// `clientSubscriptionsCount` and `clientShardSubscriptionsCount`).
    pub fn count(&self, kind: Kind) -> usize {
        match kind {
            Kind::Channel | Kind::Pattern => self.names[0].len() + self.names[1].len(),
            Kind::Shard => self.names[2].len(),
        }
    }

    /// Whether the client listens to anything: Redis's `CLIENT_PUBSUB`,
    /// which in RESP2 limits it to the subscription commands.
    pub fn any(&self) -> bool {
        self.names.iter().any(|n| !n.is_empty())
    }

    pub fn of(&self, kind: Kind) -> Vec<Box<[u8]>> {
        self.names[kind.index()].iter().cloned().collect()
    }
}

/// A subscribed client as publishers reach it.
#[derive(Clone)]
struct Subscriber {
    info: Arc<ClientInfo>,
    worker: usize,
}

/// A message on its way to a client of another connection: its worker,
/// its id and the frame.
pub type Delivery = (usize, u64, Vec<u8>);

/// One kind's names, each with its subscribers in the order they came.
type Names = HashMap<Box<[u8]>, Vec<Subscriber>>;

/// The server-wide subscriptions, by kind.
#[derive(Default)]
pub struct Registry {
    maps: Mutex<[Names; 3]>,
    /// Held while one PUBLISH's messages go into the mailboxes, so that
    /// every subscriber sees concurrent publishes in one order, as Redis's
    /// one thread gives them.
    delivering: Mutex<()>,
}

impl Registry {
    /// Subscribes `client` to `name`; false if it already was.
    pub fn subscribe(&self, client: &mut Client, kind: Kind, name: &[u8]) -> bool {
        if !client.subscriptions.names[kind.index()].insert(name.into()) {
            return false;
        }
        let subscriber = Subscriber { info: client.info.clone(), worker: client.worker };
        self.maps.lock()[kind.index()].entry(name.into()).or_default().push(subscriber);
        publish_counts(client);
        true
    }

    /// Unsubscribes `client` from `name`; false if it was not subscribed.
    pub fn unsubscribe(&self, client: &mut Client, kind: Kind, name: &[u8]) -> bool {
        if !client.subscriptions.names[kind.index()].shift_remove(name) {
            return false;
        }
        let mut maps = self.maps.lock();
        let map = &mut maps[kind.index()];
        if let Some(subscribers) = map.get_mut(name) {
            subscribers.retain(|s| s.info.id != client.id);
            // No entry outlives its last subscriber, or channels nobody
            // listens to would pile up (Redis deletes them likewise).
            if subscribers.is_empty() {
                map.remove(name);
            }
        }
        drop(maps);
        publish_counts(client);
        true
    }

    /// Ends every subscription of `client`, without confirmations (RESET,
    /// or the connection closing).
    pub fn forget(&self, client: &mut Client) {
        for kind in Kind::ALL {
            for name in client.subscriptions.of(kind) {
                self.unsubscribe(client, kind, &name);
            }
        }
    }

    /// The frames PUBLISH (`Kind::Channel`) or SPUBLISH (`Kind::Shard`)
    /// sends: to subscribers of `channel`, then, for PUBLISH, to those of
    /// every pattern that matches it. Returns how many frames there are
    /// (PUBLISH's reply), those of the publishing client (None: the server
    /// itself) encoded for it, and the others.
    pub fn publish(&self, publisher: Option<u64>, kind: Kind, channel: &[u8], message: &[u8]) -> Published {
        let mut published = Published::default();
        let maps = self.maps.lock();
        let mut send = |subscriber: &Subscriber, pattern: Option<&[u8]>| {
            let resp3 = subscriber.info.resp.load(Ordering::Relaxed) == 3;
            let frame = message_frame(resp3, kind, pattern, channel, message);
            if Some(subscriber.info.id) == publisher {
                published.own.push(frame);
            } else {
                published.others.push((subscriber.worker, subscriber.info.id, frame));
            }
            published.receivers += 1;
        };
        for subscriber in maps[kind.index()].get(channel).into_iter().flatten() {
            send(subscriber, None);
        }
        if kind == Kind::Channel {
            for (pattern, subscribers) in &maps[Kind::Pattern.index()] {
                if crate::glob::matches(pattern, channel, false) {
                    subscribers.iter().for_each(|s| send(s, Some(pattern)));
                }
            }
        }
        published
    }

    /// How many clients listen to each of `names` (PUBSUB NUMSUB and
    /// SHARDNUMSUB).
    pub fn subscribers(&self, kind: Kind, names: &[&[u8]]) -> Vec<usize> {
        let maps = self.maps.lock();
        names.iter().map(|n| maps[kind.index()].get(*n).map_or(0, Vec::len)).collect()
    }

    /// The names some client listens to, those matching `pattern` if given
    /// (PUBSUB CHANNELS and SHARDCHANNELS).
    pub fn names(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Box<[u8]>> {
        let maps = self.maps.lock();
        maps[kind.index()]
            .keys()
            .filter(|name| pattern.is_none_or(|p| crate::glob::matches(p, name, false)))
            .cloned()
            .collect()
    }

    /// The subscribed clients of `user` with a subscription `allowed`
    /// refuses (a name, and whether it is a pattern), each once.
    pub fn subscribers_of(
        &self,
        user: &Arc<crate::acl::UserHandle>,
        allowed: impl Fn(&[u8], bool) -> bool,
    ) -> Vec<(Arc<ClientInfo>, usize)> {
        let maps = self.maps.lock();
        let mut found: Vec<(Arc<ClientInfo>, usize)> = Vec::new();
        for kind in Kind::ALL {
            for (name, subscribers) in &maps[kind.index()] {
                for s in subscribers {
                    let theirs = s.info.user.lock().as_ref().is_some_and(|u| Arc::ptr_eq(u, user));
                    if theirs && !found.iter().any(|(i, _)| i.id == s.info.id) && !allowed(name, kind == Kind::Pattern) {
                        found.push((s.info.clone(), s.worker));
                    }
                }
            }
        }
        found
    }

    /// How many distinct names some client listens to (PUBSUB NUMPAT, INFO).
    pub fn len(&self, kind: Kind) -> usize {
        self.maps.lock()[kind.index()].len()
    }
}

/// What a PUBLISH produced.
#[derive(Default)]
pub struct Published {
    pub receivers: usize,
    pub own: Vec<Vec<u8>>,
    pub others: Vec<Delivery>,
}

/// Sends PUBLISH's messages to the workers of their clients, one mailbox
/// message per worker. Under `appendfsync always` they leave once the
/// journal is durable as far as it is written now: a message may tell of
/// a write its publisher made (in the same transaction, or just before),
/// and no client may learn of a write a crash could still take away. Redis
/// holds them likewise, its replies waiting for the fsync of their event
/// loop turn.
pub fn deliver(server: &Server, mut deliveries: Vec<Delivery>) {
    let lsn = match server.journal() {
        Some(journal) if server.gate_replies() => journal.appended_lsn(),
        _ => 0,
    };
    // Stable: each client's messages stay in publishing order.
    deliveries.sort_by_key(|&(worker, _, _)| worker);
    let _one_order = server.pubsub.delivering.lock();
    let mut deliveries = deliveries.into_iter().peekable();
    while let Some((worker, client, frame)) = deliveries.next() {
        let mut messages = vec![(client, frame)];
        while let Some((_, client, frame)) = deliveries.next_if(|d| d.0 == worker) {
            messages.push((client, frame));
        }
        server.send(worker, Message::Publish { messages, lsn });
    }
}

/// Redis's removeChannelsInSlot: the shard channels of `slot`, which left
/// this node's shard, lose their subscribers, each told by its worker
/// (`Message::ShardChannelsGone`).
pub fn drop_slot_channels(server: &Server, slot: u16) {
    let mut gone: HashMap<(usize, u64), Vec<Box<[u8]>>> = HashMap::new();
    {
        let maps = server.pubsub.maps.lock();
        for (name, subscribers) in &maps[Kind::Shard.index()] {
            if keel_engine::slot::key_slot(name) == slot {
                for s in subscribers {
                    gone.entry((s.worker, s.info.id)).or_default().push(name.clone());
                }
            }
        }
    }
    for ((worker, client), channels) in gone {
        server.send(worker, Message::ShardChannelsGone { client, channels });
    }
}

/// Unsubscribes `client` from the shard `channels` whose slot went,
/// writing to `out` the `sunsubscribe` confirmation of each it still had.
pub fn unsubscribe_gone(server: &Server, client: &mut Client, channels: &[Box<[u8]>], out: &mut Vec<u8>) {
    for channel in channels {
        if server.pubsub.unsubscribe(client, Kind::Shard, channel) {
            let mut reply = keel_protocol::ReplyWriter::new(out, client.resp3);
            reply.push(3);
            reply.bulk(Kind::Shard.confirmation(false).as_bytes());
            reply.bulk(channel);
            reply.int(client.subscriptions.count(Kind::Shard) as i64);
        }
    }
}

/// `message`, `pmessage` or `smessage`, as an array (RESP2) or a push
/// (RESP3).
fn message_frame(resp3: bool, kind: Kind, pattern: Option<&[u8]>, channel: &[u8], message: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(32 + channel.len() + message.len());
    let mut out = keel_protocol::ReplyWriter::new(&mut frame, resp3);
    out.push(3 + usize::from(pattern.is_some()));
    match (kind, pattern) {
        (Kind::Shard, _) => out.bulk(b"smessage"),
        (_, Some(pattern)) => {
            out.bulk(b"pmessage");
            out.bulk(pattern);
        }
        (_, None) => out.bulk(b"message"),
    }
    out.bulk(channel);
    out.bulk(message);
    frame
}

/// Mirrors a client's subscription counts for CLIENT LIST.
fn publish_counts(client: &Client) {
    for kind in Kind::ALL {
        client.info.subscriptions[kind.index()].store(client.subscriptions.names[kind.index()].len() as u32, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: u64, worker: usize) -> Client {
        let mut c = Client::new(Arc::new(ClientInfo::detached(id)), true);
        c.worker = worker;
        c
    }

    #[test]
    fn a_message_reaches_channel_and_pattern_subscribers_once_each() {
        let registry = Registry::default();
        let (mut a, mut b, publisher) = (client(1, 0), client(2, 1), client(3, 0));
        assert!(registry.subscribe(&mut a, Kind::Channel, b"news.art"));
        assert!(!registry.subscribe(&mut a, Kind::Channel, b"news.art"));
        assert!(registry.subscribe(&mut a, Kind::Pattern, b"news.*"));
        assert!(registry.subscribe(&mut b, Kind::Pattern, b"news.*"));
        assert!(registry.subscribe(&mut b, Kind::Shard, b"news.art"));
        assert_eq!((a.subscriptions.count(Kind::Channel), b.subscriptions.count(Kind::Shard)), (2, 1));
        let published = registry.publish(Some(publisher.id), Kind::Channel, b"news.art", b"hi");
        assert_eq!(published.receivers, 3);
        let to: Vec<(usize, u64)> = published.others.iter().map(|&(w, id, _)| (w, id)).collect();
        assert_eq!(to, [(0, 1), (0, 1), (1, 2)]);
        assert_eq!(published.others[0].2, b"*3\r\n$7\r\nmessage\r\n$8\r\nnews.art\r\n$2\r\nhi\r\n");
        assert_eq!(published.others[1].2, b"*4\r\n$8\r\npmessage\r\n$6\r\nnews.*\r\n$8\r\nnews.art\r\n$2\r\nhi\r\n");
        // Shard channels are apart: patterns never match them.
        let shard = registry.publish(Some(publisher.id), Kind::Shard, b"news.art", b"hi");
        assert_eq!((shard.receivers, shard.others[0].1), (1, 2));
        assert_eq!(registry.subscribers(Kind::Pattern, &[b"news.*"]), [2]);
    }

    #[test]
    fn the_last_unsubscribe_removes_the_name() {
        let registry = Registry::default();
        let (mut a, mut b) = (client(1, 0), client(2, 0));
        registry.subscribe(&mut a, Kind::Channel, b"x");
        registry.subscribe(&mut b, Kind::Channel, b"x");
        assert!(registry.unsubscribe(&mut a, Kind::Channel, b"x"));
        assert!(!registry.unsubscribe(&mut a, Kind::Channel, b"x"));
        assert_eq!(registry.len(Kind::Channel), 1);
        registry.forget(&mut b);
        assert_eq!(registry.len(Kind::Channel), 0);
        assert!(!b.subscriptions.any());
        assert_eq!(b.info.subscriptions[0].load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_resp3_subscriber_gets_pushes_and_the_publisher_its_own_frame() {
        let registry = Registry::default();
        let mut a = client(1, 0);
        a.info.resp.store(3, Ordering::Relaxed);
        registry.subscribe(&mut a, Kind::Shard, b"s");
        let published = registry.publish(Some(a.id), Kind::Shard, b"s", b"m");
        assert_eq!(published.own, [b">3\r\n$8\r\nsmessage\r\n$1\r\ns\r\n$1\r\nm\r\n".to_vec()]);
        assert!(published.others.is_empty());
    }
}
