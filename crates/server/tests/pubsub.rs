//! Black-box tests of Pub/Sub over real sockets, as Redis 7.0.15 behaves:
//! SUBSCRIBE / PSUBSCRIBE / SSUBSCRIBE and their UNSUBSCRIBEs (replies,
//! counts, duplicates, never-subscribed names, no arguments, a thousand
//! channels at once), PUBLISH and SPUBLISH (receiver counts, `message` /
//! `pmessage` / `smessage` frames, glob patterns and their corner cases,
//! the empty channel name, a channel and a pattern both matching), many
//! subscribers spread over worker threads, concurrent publishers and
//! subscribers coming and going, the PUBSUB introspection subcommands and a
//! subscriber's disconnect (closed, QUIT, CLIENT KILL, or past the pubsub
//! output buffer limit), RESP2 subscribed mode (allowed commands, PING,
//! RESET, HELLO), RESP3 pushes (a client publishing to itself, blocked, or
//! in MULTI), CLIENT REPLY OFF, CLIENT PAUSE WRITE, CLIENT LIST and INFO
//! counters, PUBLISH in MULTI/EXEC (also with the journal's fsync on the
//! way), and arity errors.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, readable, simple, Client, Frame, Server};

/// The server most tests run against: Keel with its defaults. (Swapped
/// for `Server::start_redis(&[]).unwrap()` to check the expectations
/// against Redis 7.0.15; tests of Keel-only things start Keel themselves.)
fn server() -> Server {
    Server::start(&[])
}

/// `assert_eq!` with frames shown readably (byte strings as text).
macro_rules! check {
    ($got:expr, $want:expr $(,)?) => {
        check!($got, $want, "")
    };
    ($got:expr, $want:expr, $($arg:tt)+) => {{
        let (got, want) = (&$got, &$want);
        if got != want {
            panic!(
                "{}\n  got:  {}\n  want: {}",
                format!($($arg)+),
                readable(&format!("{got:?}")),
                readable(&format!("{want:?}"))
            );
        }
    }};
}

/// The error a RESP2 client in subscribed mode gets for `cmd`.
fn subscribed_mode_error(cmd: &str) -> Frame {
    err(&format!(
        "ERR Can't execute '{cmd}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this \
         context"
    ))
}

/// An array of bulk strings.
fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(|s| bulk(s)).collect())
}

/// A RESP2 `[kind, name, count]` (subscribe, unsubscribe, ...) reply.
fn sub_reply(kind: &str, name: &str, count: i64) -> Frame {
    Frame::Array(vec![bulk(kind), bulk(name), int(count)])
}

/// A RESP2 `[message, channel, payload]`.
fn message(channel: &str, payload: &str) -> Frame {
    arr(&["message", channel, payload])
}

/// A RESP2 `[pmessage, pattern, channel, payload]`.
fn pmessage(pattern: &str, channel: &str, payload: &str) -> Frame {
    arr(&["pmessage", pattern, channel, payload])
}

/// A RESP2 `[smessage, channel, payload]`.
fn smessage(channel: &str, payload: &str) -> Frame {
    arr(&["smessage", channel, payload])
}

/// The RESP3 push with the same items as `frame` (an array).
fn push(frame: Frame) -> Frame {
    let Frame::Array(items) = frame else { panic!("not an array: {frame:?}") };
    Frame::Push(items)
}

/// Sends `line` (split on spaces) and reads `n` frames.
fn send_n(c: &mut Client, line: &str, n: usize) -> Vec<Frame> {
    let argv: Vec<&str> = line.split_whitespace().collect();
    c.write_command(&argv);
    read_n(c, n)
}

fn read_n(c: &mut Client, n: usize) -> Vec<Frame> {
    (0..n).map(|_| c.read()).collect()
}

/// Sends a (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE with names, reading one reply
/// per name.
fn subscribe(c: &mut Client, line: &str) -> Vec<Frame> {
    let n = line.split_whitespace().count() - 1;
    assert!(n > 0, "`{line}` has no names: use send_n");
    send_n(c, line, n)
}

/// Asserts that nothing arrives on `c` for `ms` milliseconds (nor was
/// left over from an earlier read).
fn assert_silent(c: &mut Client, ms: u64) {
    c.stream.set_read_timeout(Some(Duration::from_millis(ms))).expect("read timeout");
    let got = c.try_read();
    c.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    if let Some(frame) = got {
        panic!("unexpected frame {}", readable(&format!("{frame:?}")));
    }
}

/// The frames as a sorted list of their debug forms, for comparing what
/// may come in any order.
fn multiset(frames: &[Frame]) -> Vec<String> {
    let mut out: Vec<String> = frames.iter().map(|f| format!("{f:?}")).collect();
    out.sort();
    out
}

/// The bulk strings of an array, sorted.
fn sorted_names(frame: Frame) -> Vec<String> {
    let Frame::Array(items) = frame else { panic!("not an array: {frame:?}") };
    let mut names: Vec<String> = items
        .into_iter()
        .map(|f| match f {
            Frame::Bulk(b) => String::from_utf8(b).expect("utf-8"),
            other => panic!("not a bulk string: {other:?}"),
        })
        .collect();
    names.sort();
    names
}

/// Checks the replies of an UNSUBSCRIBE-like command without arguments:
/// one per name, in any order (Redis walks a hash table), counts going
/// down by one to `last`.
fn assert_unsubscribed_all(replies: &[Frame], kind: &str, names: &[&str], last: i64) {
    check!(replies.len(), names.len(), "{replies:?}");
    let mut seen = BTreeSet::new();
    for (i, reply) in replies.iter().enumerate() {
        let Frame::Array(items) = reply else { panic!("not an array: {reply:?}") };
        check!(items.len(), 3, "{reply:?}");
        check!(items[0], bulk(kind), "{reply:?}");
        let Frame::Bulk(name) = &items[1] else { panic!("no name in {reply:?}") };
        seen.insert(String::from_utf8(name.clone()).expect("utf-8"));
        let left = (replies.len() - 1 - i) as i64;
        check!(items[2], int(last + left), "{replies:?}");
    }
    let want: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
    check!(seen, want, "{replies:?}");
}

/// Polls `line` on `c` until it answers `want` (the registry forgets a
/// closed connection once the server notices the close).
fn wait_for(c: &mut Client, line: &str, want: Frame) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = c.cmd(line);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "`{line}` still answers {}, not {}",
            readable(&format!("{got:?}")),
            readable(&format!("{want:?}"))
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn subscribe_replies_count_channels_and_patterns() {
    let server = server();
    let mut c = server.client();
    // One reply per channel; subscribing again does not grow the count.
    check!(
        subscribe(&mut c, "SUBSCRIBE x y x"),
        vec![sub_reply("subscribe", "x", 1), sub_reply("subscribe", "y", 2), sub_reply("subscribe", "x", 2)]
    );
    check!(subscribe(&mut c, "SUBSCRIBE y"), vec![sub_reply("subscribe", "y", 2)]);
    // Patterns count together with channels.
    check!(subscribe(&mut c, "PSUBSCRIBE n*"), vec![sub_reply("psubscribe", "n*", 3)]);
    check!(subscribe(&mut c, "PSUBSCRIBE n*"), vec![sub_reply("psubscribe", "n*", 3)]);
    check!(subscribe(&mut c, "SUBSCRIBE z"), vec![sub_reply("subscribe", "z", 4)]);
    // Shard channels count apart: SSUBSCRIBE counts shard channels only,
    // and SUBSCRIBE's count leaves them out.
    check!(
        subscribe(&mut c, "SSUBSCRIBE s1 s2 s1"),
        vec![sub_reply("ssubscribe", "s1", 1), sub_reply("ssubscribe", "s2", 2), sub_reply("ssubscribe", "s1", 2)]
    );
    check!(subscribe(&mut c, "SUBSCRIBE w"), vec![sub_reply("subscribe", "w", 5)]);
    check!(subscribe(&mut c, "PSUBSCRIBE m?"), vec![sub_reply("psubscribe", "m?", 6)]);
    check!(subscribe(&mut c, "SSUBSCRIBE s3"), vec![sub_reply("ssubscribe", "s3", 3)]);
    assert_silent(&mut c, 50);
}

#[test]
fn publish_counts_receivers_and_the_subscriber_reads_the_message() {
    let server = server();
    let mut sub = server.client();
    let mut publisher = server.client();
    check!(subscribe(&mut sub, "SUBSCRIBE chan"), vec![sub_reply("subscribe", "chan", 1)]);
    check!(publisher.cmd("PUBLISH chan hello"), int(1));
    check!(sub.read(), message("chan", "hello"));
    // Nobody listens on another channel.
    check!(publisher.cmd("PUBLISH other hello"), int(0));
    // Payloads are binary-safe: empty, CRLF inside, big.
    check!(publisher.send(&["PUBLISH", "chan", ""]), int(1));
    check!(sub.read(), message("chan", ""));
    check!(publisher.send(&["PUBLISH", "chan", "a\r\nb\0c"]), int(1));
    check!(sub.read(), message("chan", "a\r\nb\0c"));
    let big = "x".repeat(100_000);
    check!(publisher.send(&["PUBLISH", "chan", big.as_str()]), int(1));
    check!(sub.read(), message("chan", &big));
    // Channel names are case-sensitive.
    check!(publisher.cmd("PUBLISH CHAN hello"), int(0));
    assert_silent(&mut sub, 50);
    // The publisher itself is not in subscribed mode.
    check!(publisher.cmd("SET k v"), ok());
}

#[test]
fn two_subscribers_both_get_each_message() {
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let mut publisher = server.client();
    check!(subscribe(&mut a, "SUBSCRIBE news"), vec![sub_reply("subscribe", "news", 1)]);
    check!(
        subscribe(&mut b, "SUBSCRIBE news sports"),
        vec![sub_reply("subscribe", "news", 1), sub_reply("subscribe", "sports", 2)]
    );
    check!(publisher.cmd("PUBLISH news one"), int(2));
    check!(publisher.cmd("PUBLISH sports two"), int(1));
    check!(publisher.cmd("PUBLISH news three"), int(2));
    check!(read_n(&mut a, 2), vec![message("news", "one"), message("news", "three")]);
    check!(read_n(&mut b, 3), vec![message("news", "one"), message("sports", "two"), message("news", "three")]);
    assert_silent(&mut a, 30);
    assert_silent(&mut b, 30);
}

#[test]
fn subscribers_on_every_worker_get_every_message_in_order() {
    // Keel-only flag: connections spread over four workers.
    let server = Server::start(&["--threads", "4"]);
    let mut subs: Vec<Client> = (0..20).map(|_| server.client()).collect();
    for sub in &mut subs {
        check!(subscribe(sub, "SUBSCRIBE fan"), vec![sub_reply("subscribe", "fan", 1)]);
    }
    let mut publishers: Vec<Client> = (0..3).map(|_| server.client()).collect();
    for i in 0..60 {
        let publisher = &mut publishers[i % 3];
        check!(publisher.send(&["PUBLISH", "fan", &format!("m{i}")]), int(20), "message {i}");
    }
    for (n, sub) in subs.iter_mut().enumerate() {
        for i in 0..60 {
            check!(sub.read(), message("fan", &format!("m{i}")), "subscriber {n}, message {i}");
        }
    }
    for sub in &mut subs {
        assert_silent(sub, 5);
    }
}

#[test]
fn unsubscribe_with_and_without_arguments() {
    let server = server();
    let mut c = server.client();
    // Nothing subscribed: one reply with a null channel.
    check!(send_n(&mut c, "UNSUBSCRIBE", 1), vec![Frame::Array(vec![bulk("unsubscribe"), Frame::Null, int(0)])]);
    // A channel never subscribed still gets its reply.
    check!(subscribe(&mut c, "UNSUBSCRIBE nope"), vec![sub_reply("unsubscribe", "nope", 0)]);
    // Neither left the connection in subscribed mode.
    check!(c.cmd("GET x"), Frame::Null);

    subscribe(&mut c, "SUBSCRIBE a b c d");
    check!(
        subscribe(&mut c, "UNSUBSCRIBE b nope"),
        vec![sub_reply("unsubscribe", "b", 3), sub_reply("unsubscribe", "nope", 3)]
    );
    check!(subscribe(&mut c, "UNSUBSCRIBE b"), vec![sub_reply("unsubscribe", "b", 3)]);
    // Without arguments: every channel left, in any order, down to 0.
    let replies = send_n(&mut c, "UNSUBSCRIBE", 3);
    assert_unsubscribed_all(&replies, "unsubscribe", &["a", "c", "d"], 0);
    check!(send_n(&mut c, "UNSUBSCRIBE", 1), vec![Frame::Array(vec![bulk("unsubscribe"), Frame::Null, int(0)])]);
    assert_silent(&mut c, 30);
    // Out of subscribed mode: normal commands work again.
    check!(c.cmd("SET x 1"), ok());
    check!(c.cmd("GET x"), bulk("1"));

    // UNSUBSCRIBE leaves the patterns: the count stays at them, and the
    // connection is still subscribed.
    let mut publisher = server.client();
    subscribe(&mut c, "SUBSCRIBE a b");
    check!(subscribe(&mut c, "PSUBSCRIBE p*"), vec![sub_reply("psubscribe", "p*", 3)]);
    let replies = send_n(&mut c, "UNSUBSCRIBE", 2);
    assert_unsubscribed_all(&replies, "unsubscribe", &["a", "b"], 1);
    check!(c.cmd("GET x"), subscribed_mode_error("get"));
    check!(publisher.cmd("PUBLISH a m"), int(0));
    check!(publisher.cmd("PUBLISH pa m"), int(1));
    check!(c.read(), pmessage("p*", "pa", "m"));
}

#[test]
fn psubscribe_punsubscribe_and_glob_patterns() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    check!(send_n(&mut c, "PUNSUBSCRIBE", 1), vec![Frame::Array(vec![bulk("punsubscribe"), Frame::Null, int(0)])]);
    check!(
        subscribe(&mut c, "PSUBSCRIBE news.* h?llo h[ae]llo news.*"),
        vec![
            sub_reply("psubscribe", "news.*", 1),
            sub_reply("psubscribe", "h?llo", 2),
            sub_reply("psubscribe", "h[ae]llo", 3),
            sub_reply("psubscribe", "news.*", 3),
        ]
    );
    check!(publisher.cmd("PUBLISH news.art a"), int(1));
    check!(c.read(), pmessage("news.*", "news.art", "a"));
    check!(publisher.cmd("PUBLISH news. b"), int(1));
    check!(c.read(), pmessage("news.*", "news.", "b"));
    check!(publisher.cmd("PUBLISH news c"), int(0));
    check!(publisher.cmd("PUBLISH newsxart c"), int(0));
    // Two patterns of one client match: two messages, in any order.
    check!(publisher.cmd("PUBLISH hello d"), int(2));
    let got = read_n(&mut c, 2);
    check!(multiset(&got), multiset(&[pmessage("h?llo", "hello", "d"), pmessage("h[ae]llo", "hello", "d")]));
    check!(publisher.cmd("PUBLISH hallo e"), int(2));
    let got = read_n(&mut c, 2);
    check!(multiset(&got), multiset(&[pmessage("h?llo", "hallo", "e"), pmessage("h[ae]llo", "hallo", "e")]));
    check!(publisher.cmd("PUBLISH hxllo f"), int(1));
    check!(c.read(), pmessage("h?llo", "hxllo", "f"));
    check!(publisher.cmd("PUBLISH hllo g"), int(0));
    check!(publisher.cmd("PUBLISH heello g"), int(0));
    check!(publisher.cmd("PUBLISH Hello g"), int(0));
    assert_silent(&mut c, 30);

    // PUNSUBSCRIBE with arguments, one never subscribed.
    check!(
        subscribe(&mut c, "PUNSUBSCRIBE h?llo nope"),
        vec![sub_reply("punsubscribe", "h?llo", 2), sub_reply("punsubscribe", "nope", 2)]
    );
    check!(publisher.cmd("PUBLISH hxllo f"), int(0));
    // Without arguments: the rest, in any order.
    let replies = send_n(&mut c, "PUNSUBSCRIBE", 2);
    assert_unsubscribed_all(&replies, "punsubscribe", &["news.*", "h[ae]llo"], 0);
    check!(publisher.cmd("PUBLISH hello x"), int(0));
    check!(c.cmd("GET x"), Frame::Null);
}

#[test]
fn a_channel_and_a_pattern_of_one_client_deliver_twice() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    subscribe(&mut c, "SUBSCRIBE a");
    check!(subscribe(&mut c, "PSUBSCRIBE a*"), vec![sub_reply("psubscribe", "a*", 2)]);
    check!(publisher.cmd("PUBLISH a m"), int(2));
    // Channel subscribers are served before pattern subscribers.
    check!(read_n(&mut c, 2), vec![message("a", "m"), pmessage("a*", "a", "m")]);
    // A pattern equal to a channel name matches it literally.
    check!(subscribe(&mut c, "PSUBSCRIBE a"), vec![sub_reply("psubscribe", "a", 3)]);
    check!(publisher.cmd("PUBLISH a n"), int(3));
    let got = read_n(&mut c, 3);
    check!(got[0], message("a", "n"));
    check!(multiset(&got[1..]), multiset(&[pmessage("a*", "a", "n"), pmessage("a", "a", "n")]));
    check!(publisher.cmd("PUBLISH ab o"), int(1));
    check!(c.read(), pmessage("a*", "ab", "o"));
    assert_silent(&mut c, 30);
}

#[test]
fn shard_channels_are_apart_from_channels_and_patterns() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    check!(send_n(&mut c, "SUNSUBSCRIBE", 1), vec![Frame::Array(vec![bulk("sunsubscribe"), Frame::Null, int(0)])]);
    check!(subscribe(&mut c, "SSUBSCRIBE s t"), vec![sub_reply("ssubscribe", "s", 1), sub_reply("ssubscribe", "t", 2)]);
    check!(publisher.cmd("SPUBLISH s one"), int(1));
    check!(c.read(), smessage("s", "one"));
    // PUBLISH does not reach a shard subscriber.
    check!(publisher.cmd("PUBLISH s two"), int(0));
    // The same name as a plain channel, and a pattern matching everything.
    check!(subscribe(&mut c, "SUBSCRIBE s"), vec![sub_reply("subscribe", "s", 1)]);
    check!(subscribe(&mut c, "PSUBSCRIBE *"), vec![sub_reply("psubscribe", "*", 2)]);
    // SPUBLISH reaches the shard subscription only; patterns never match
    // shard channels.
    check!(publisher.cmd("SPUBLISH s three"), int(1));
    check!(c.read(), smessage("s", "three"));
    check!(publisher.cmd("SPUBLISH u four"), int(0));
    // PUBLISH reaches the channel and the pattern, not the shard channel.
    check!(publisher.cmd("PUBLISH s five"), int(2));
    check!(read_n(&mut c, 2), vec![message("s", "five"), pmessage("*", "s", "five")]);
    assert_silent(&mut c, 30);
    // SUNSUBSCRIBE counts shard channels only.
    check!(
        subscribe(&mut c, "SUNSUBSCRIBE t nope"),
        vec![sub_reply("sunsubscribe", "t", 1), sub_reply("sunsubscribe", "nope", 1)]
    );
    check!(publisher.cmd("SPUBLISH t six"), int(0));
    check!(send_n(&mut c, "SUNSUBSCRIBE", 1), vec![sub_reply("sunsubscribe", "s", 0)]);
    check!(publisher.cmd("SPUBLISH s seven"), int(0));
    // The plain subscriptions are untouched.
    check!(publisher.cmd("PUBLISH s eight"), int(2));
    check!(read_n(&mut c, 2), vec![message("s", "eight"), pmessage("*", "s", "eight")]);
}

#[test]
fn shard_subscriptions_alone_keep_subscribed_mode() {
    let server = server();
    let mut c = server.client();
    subscribe(&mut c, "SUBSCRIBE x");
    subscribe(&mut c, "SSUBSCRIBE s");
    // The channel count reaches 0, but a shard channel is left.
    check!(subscribe(&mut c, "UNSUBSCRIBE x"), vec![sub_reply("unsubscribe", "x", 0)]);
    check!(c.cmd("GET x"), subscribed_mode_error("get"));
    check!(subscribe(&mut c, "SUNSUBSCRIBE s"), vec![sub_reply("sunsubscribe", "s", 0)]);
    check!(c.cmd("GET x"), Frame::Null);
}

#[test]
fn pubsub_introspection() {
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let mut q = server.client();
    check!(q.cmd("PUBSUB CHANNELS"), Frame::Array(vec![]));
    check!(q.cmd("PUBSUB NUMPAT"), int(0));
    check!(q.cmd("PUBSUB NUMSUB"), Frame::Array(vec![]));
    check!(q.cmd("PUBSUB SHARDCHANNELS"), Frame::Array(vec![]));
    check!(q.cmd("PUBSUB SHARDNUMSUB"), Frame::Array(vec![]));
    check!(q.cmd("PUBSUB NUMSUB x"), Frame::Array(vec![bulk("x"), int(0)]));

    subscribe(&mut a, "SUBSCRIBE news.1 news.2 sport");
    subscribe(&mut b, "SUBSCRIBE news.1 other");
    subscribe(&mut a, "PSUBSCRIBE n* s?ort");
    subscribe(&mut b, "PSUBSCRIBE n* x");
    subscribe(&mut a, "SSUBSCRIBE sh.1 sh.2");
    subscribe(&mut b, "SSUBSCRIBE sh.1");

    check!(sorted_names(q.cmd("PUBSUB CHANNELS")), ["news.1", "news.2", "other", "sport"]);
    check!(sorted_names(q.cmd("PUBSUB CHANNELS news.*")), ["news.1", "news.2"]);
    check!(sorted_names(q.cmd("PUBSUB CHANNELS *t")), ["sport"]);
    check!(sorted_names(q.cmd("PUBSUB CHANNELS nothing*")), Vec::<String>::new());
    // Shard channels are not channels, and the other way round.
    check!(sorted_names(q.cmd("PUBSUB CHANNELS sh*")), Vec::<String>::new());
    check!(sorted_names(q.cmd("PUBSUB SHARDCHANNELS")), ["sh.1", "sh.2"]);
    check!(sorted_names(q.cmd("PUBSUB SHARDCHANNELS *2")), ["sh.2"]);
    check!(sorted_names(q.cmd("PUBSUB SHARDCHANNELS news*")), Vec::<String>::new());
    // Counts are integers, in the order asked, repeats included.
    check!(
        q.cmd("PUBSUB NUMSUB news.1 news.2 nope sh.1 news.1"),
        Frame::Array(vec![
            bulk("news.1"),
            int(2),
            bulk("news.2"),
            int(1),
            bulk("nope"),
            int(0),
            bulk("sh.1"),
            int(0),
            bulk("news.1"),
            int(2),
        ])
    );
    check!(
        q.cmd("PUBSUB SHARDNUMSUB sh.1 sh.2 news.1"),
        Frame::Array(vec![bulk("sh.1"), int(2), bulk("sh.2"), int(1), bulk("news.1"), int(0)])
    );
    // Unique patterns across clients: n*, s?ort, x.
    check!(q.cmd("PUBSUB NUMPAT"), int(3));

    // Errors.
    check!(q.cmd("PUBSUB"), err("ERR wrong number of arguments for 'pubsub' command"));
    check!(q.cmd("PUBSUB NUMPAT x"), err("ERR wrong number of arguments for 'pubsub|numpat' command"));
    check!(
        q.cmd("PUBSUB CHANNELS a b"),
        err("ERR unknown subcommand or wrong number of arguments for 'CHANNELS'. Try PUBSUB HELP.")
    );
    check!(q.cmd("PUBSUB FOO"), err("ERR unknown subcommand 'FOO'. Try PUBSUB HELP."));

    // Unsubscribing updates them at once.
    subscribe(&mut b, "PUNSUBSCRIBE n*");
    check!(q.cmd("PUBSUB NUMPAT"), int(3));
    subscribe(&mut a, "PUNSUBSCRIBE n*");
    check!(q.cmd("PUBSUB NUMPAT"), int(2));
    subscribe(&mut a, "UNSUBSCRIBE news.1");
    check!(q.cmd("PUBSUB NUMSUB news.1"), Frame::Array(vec![bulk("news.1"), int(1)]));
    subscribe(&mut b, "UNSUBSCRIBE news.1");
    check!(q.cmd("PUBSUB NUMSUB news.1"), Frame::Array(vec![bulk("news.1"), int(0)]));
    check!(sorted_names(q.cmd("PUBSUB CHANNELS")), ["news.2", "other", "sport"]);
    subscribe(&mut a, "SUNSUBSCRIBE sh.2");
    check!(sorted_names(q.cmd("PUBSUB SHARDCHANNELS")), ["sh.1"]);
}

#[test]
fn a_disconnected_subscriber_leaves_the_registry() {
    let server = server();
    let mut q = server.client();
    let mut stays = server.client();
    subscribe(&mut stays, "SUBSCRIBE both");
    {
        let mut gone = server.client();
        subscribe(&mut gone, "SUBSCRIBE both mine");
        subscribe(&mut gone, "PSUBSCRIBE gone*");
        subscribe(&mut gone, "SSUBSCRIBE shard");
        check!(q.cmd("PUBSUB NUMSUB both mine"), Frame::Array(vec![bulk("both"), int(2), bulk("mine"), int(1)]));
        check!(q.cmd("PUBSUB NUMPAT"), int(1));
        check!(q.cmd("PUBSUB SHARDNUMSUB shard"), Frame::Array(vec![bulk("shard"), int(1)]));
        // Dropped here: the connection closes.
    }
    wait_for(&mut q, "PUBSUB NUMSUB both mine", Frame::Array(vec![bulk("both"), int(1), bulk("mine"), int(0)]));
    wait_for(&mut q, "PUBSUB NUMPAT", int(0));
    wait_for(&mut q, "PUBSUB SHARDNUMSUB shard", Frame::Array(vec![bulk("shard"), int(0)]));
    check!(q.cmd("PUBSUB CHANNELS"), arr(&["both"]));
    check!(q.cmd("PUBSUB SHARDCHANNELS"), Frame::Array(vec![]));
    check!(q.cmd("PUBLISH mine m"), int(0));
    check!(q.cmd("PUBLISH gone1 m"), int(0));
    check!(q.cmd("SPUBLISH shard m"), int(0));
    check!(q.cmd("PUBLISH both m"), int(1));
    check!(stays.read(), message("both", "m"));

    // QUIT from subscribed mode closes, and forgets, too.
    let mut quits = server.client();
    subscribe(&mut quits, "SUBSCRIBE mine");
    check!(q.cmd("PUBSUB NUMSUB mine"), Frame::Array(vec![bulk("mine"), int(1)]));
    check!(quits.cmd("QUIT"), ok());
    wait_for(&mut q, "PUBSUB NUMSUB mine", Frame::Array(vec![bulk("mine"), int(0)]));
}

#[test]
fn resp2_subscribed_mode_allows_only_pubsub_commands() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    check!(c.cmd("SET x 1"), ok());
    subscribe(&mut c, "SUBSCRIBE ch");
    check!(c.cmd("GET x"), subscribed_mode_error("get"));
    check!(c.cmd("SET x 2"), subscribed_mode_error("set"));
    check!(c.cmd("PUBLISH ch m"), subscribed_mode_error("publish"));
    check!(c.cmd("SPUBLISH ch m"), subscribed_mode_error("spublish"));
    check!(c.cmd("MULTI"), subscribed_mode_error("multi"));
    check!(c.cmd("CLIENT REPLY OFF"), subscribed_mode_error("client|reply"));
    // PING answers as a message-like array.
    check!(c.cmd("PING"), arr(&["pong", ""]));
    check!(c.cmd("PING hi"), arr(&["pong", "hi"]));
    // Messages still flow in between.
    check!(publisher.cmd("PUBLISH ch m"), int(1));
    check!(c.read(), message("ch", "m"));
    // Patterns keep the mode too.
    subscribe(&mut c, "PSUBSCRIBE p*");
    check!(subscribe(&mut c, "UNSUBSCRIBE ch"), vec![sub_reply("unsubscribe", "ch", 1)]);
    check!(c.cmd("GET x"), subscribed_mode_error("get"));
    check!(subscribe(&mut c, "PUNSUBSCRIBE p*"), vec![sub_reply("punsubscribe", "p*", 0)]);
    // After unsubscribing everything, normal commands work again.
    check!(c.cmd("GET x"), bulk("1"));
    check!(c.cmd("PING"), simple("PONG"));
    check!(c.cmd("PING hi"), bulk("hi"));
    check!(c.cmd("PUBLISH ch m"), int(0));
}

#[test]
fn reset_leaves_subscribed_mode() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    subscribe(&mut c, "SUBSCRIBE ch");
    subscribe(&mut c, "PSUBSCRIBE c*");
    subscribe(&mut c, "SSUBSCRIBE sh");
    check!(c.cmd("RESET"), simple("RESET"));
    check!(publisher.cmd("PUBLISH ch m"), int(0));
    check!(publisher.cmd("SPUBLISH sh m"), int(0));
    check!(publisher.cmd("PUBSUB NUMPAT"), int(0));
    assert_silent(&mut c, 30);
    check!(c.cmd("SET x 1"), ok());
    check!(c.cmd("PING"), simple("PONG"));
    // Subscribing again starts the counts from zero.
    check!(subscribe(&mut c, "SUBSCRIBE other"), vec![sub_reply("subscribe", "other", 1)]);
}

#[test]
fn resp3_subscriptions_are_pushes_and_commands_still_work() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    check!(
        subscribe(&mut c, "SUBSCRIBE ch other"),
        vec![push(sub_reply("subscribe", "ch", 1)), push(sub_reply("subscribe", "other", 2))]
    );
    // Any command works while subscribed; PING answers as usual.
    check!(c.cmd("SET x 1"), ok());
    check!(c.cmd("GET x"), bulk("1"));
    check!(c.cmd("PING"), simple("PONG"));
    check!(c.cmd("PING hi"), bulk("hi"));
    check!(publisher.cmd("PUBLISH ch m"), int(1));
    check!(c.read(), push(message("ch", "m")));
    // Publishing to itself: the push comes before PUBLISH's reply.
    c.write_command(&["PUBLISH", "ch", "self"]);
    check!(c.read(), push(message("ch", "self")));
    check!(c.read(), int(1));
    check!(subscribe(&mut c, "PSUBSCRIBE c*"), vec![push(sub_reply("psubscribe", "c*", 3))]);
    c.write_command(&["PUBLISH", "ch", "twice"]);
    check!(read_n(&mut c, 3), vec![push(message("ch", "twice")), push(pmessage("c*", "ch", "twice")), int(2)]);
    check!(subscribe(&mut c, "SSUBSCRIBE sh"), vec![push(sub_reply("ssubscribe", "sh", 1))]);
    c.write_command(&["SPUBLISH", "sh", "s"]);
    check!(read_n(&mut c, 2), vec![push(smessage("sh", "s")), int(1)]);
    // Unsubscribing: pushes too, the null channel included.
    check!(subscribe(&mut c, "UNSUBSCRIBE ch"), vec![push(sub_reply("unsubscribe", "ch", 2))]);
    let replies = send_n(&mut c, "UNSUBSCRIBE", 1);
    check!(replies, vec![push(sub_reply("unsubscribe", "other", 1))]);
    check!(send_n(&mut c, "UNSUBSCRIBE", 1), vec![Frame::Push(vec![bulk("unsubscribe"), Frame::Null, int(1)])]);
    check!(send_n(&mut c, "PUNSUBSCRIBE", 1), vec![push(sub_reply("punsubscribe", "c*", 0))]);
    check!(send_n(&mut c, "SUNSUBSCRIBE", 1), vec![push(sub_reply("sunsubscribe", "sh", 0))]);
    check!(c.cmd("GET x"), bulk("1"));
    assert_silent(&mut c, 30);
}

#[test]
fn pubsub_messages_with_client_reply_off() {
    // Redis's own test, in RESP3.
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    c.write_command(&["CLIENT", "REPLY", "OFF"]);
    // The subscribe notifications still come.
    check!(subscribe(&mut c, "SUBSCRIBE channel"), vec![push(sub_reply("subscribe", "channel", 1))]);
    check!(subscribe(&mut c, "PSUBSCRIBE ch*"), vec![push(sub_reply("psubscribe", "ch*", 2))]);
    // So do messages.
    check!(publisher.cmd("PUBLISH channel hello"), int(2));
    check!(read_n(&mut c, 2), vec![push(message("channel", "hello")), push(pmessage("ch*", "channel", "hello"))]);
    // Ordinary replies do not.
    c.write_command(&["PING"]);
    c.write_command(&["GET", "x"]);
    check!(subscribe(&mut c, "UNSUBSCRIBE channel"), vec![push(sub_reply("unsubscribe", "channel", 1))]);
    check!(subscribe(&mut c, "PUNSUBSCRIBE ch*"), vec![push(sub_reply("punsubscribe", "ch*", 0))]);
    c.write_command(&["CLIENT", "REPLY", "ON"]);
    check!(c.read(), ok());
    assert_silent(&mut c, 30);

    // RESP2: turned off before subscribing (CLIENT is refused once
    // subscribed), confirmations and messages still come.
    let mut c2 = server.client();
    c2.write_command(&["CLIENT", "REPLY", "OFF"]);
    check!(subscribe(&mut c2, "SUBSCRIBE channel"), vec![sub_reply("subscribe", "channel", 1)]);
    check!(publisher.cmd("PUBLISH channel again"), int(1));
    check!(c2.read(), message("channel", "again"));
    assert_silent(&mut c2, 30);
}

/// The CLIENT LIST line of the connection called `name`.
fn client_line(q: &mut Client, name: &str) -> String {
    let Frame::Bulk(text) = q.cmd("CLIENT LIST") else { panic!("CLIENT LIST is a bulk string") };
    let text = String::from_utf8(text).expect("utf-8");
    let needle = format!(" name={name} ");
    text.lines().find(|l| l.contains(&needle)).unwrap_or_else(|| panic!("no {name} in {text}")).to_string()
}

/// The value of `field=` in a CLIENT LIST line.
fn client_field(line: &str, field: &str) -> String {
    let prefix = format!("{field}=");
    line.split(' ').find_map(|w| w.strip_prefix(&prefix)).unwrap_or_else(|| panic!("no {field} in {line}")).to_string()
}

#[test]
fn client_list_and_info_count_subscriptions() {
    let server = server();
    let mut a = server.client();
    let mut b = server.client();
    let mut q = server.client();
    check!(a.cmd("CLIENT SETNAME suba"), ok());
    check!(b.cmd("CLIENT SETNAME subb"), ok());
    let line = client_line(&mut q, "suba");
    check!(
        (client_field(&line, "sub"), client_field(&line, "psub"), client_field(&line, "ssub")),
        ("0".into(), "0".into(), "0".into()),
        "{line}"
    );
    assert!(!client_field(&line, "flags").contains('P'), "{line}");
    check!(q.info_field("stats", "pubsub_channels"), "0");
    check!(q.info_field("stats", "pubsub_patterns"), "0");
    check!(q.info_field("stats", "pubsubshard_channels"), "0");

    subscribe(&mut a, "SUBSCRIBE x y");
    subscribe(&mut a, "PSUBSCRIBE p*");
    subscribe(&mut a, "SSUBSCRIBE s1 s2 s3");
    subscribe(&mut b, "SUBSCRIBE y z");
    subscribe(&mut b, "PSUBSCRIBE p* q*");
    subscribe(&mut b, "SSUBSCRIBE s3");
    let line = client_line(&mut q, "suba");
    check!(
        (client_field(&line, "sub"), client_field(&line, "psub"), client_field(&line, "ssub")),
        ("2".into(), "1".into(), "3".into()),
        "{line}"
    );
    assert!(client_field(&line, "flags").contains('P'), "{line}");
    let line = client_line(&mut q, "subb");
    check!(
        (client_field(&line, "sub"), client_field(&line, "psub"), client_field(&line, "ssub")),
        ("2".into(), "2".into(), "1".into()),
        "{line}"
    );
    // Distinct server-wide: x y z, p* q*, s1 s2 s3.
    check!(q.info_field("stats", "pubsub_channels"), "3");
    check!(q.info_field("stats", "pubsub_patterns"), "2");
    check!(q.info_field("stats", "pubsubshard_channels"), "3");

    send_n(&mut a, "UNSUBSCRIBE", 2);
    send_n(&mut a, "PUNSUBSCRIBE", 1);
    send_n(&mut a, "SUNSUBSCRIBE", 3);
    let line = client_line(&mut q, "suba");
    check!(
        (client_field(&line, "sub"), client_field(&line, "psub"), client_field(&line, "ssub")),
        ("0".into(), "0".into(), "0".into()),
        "{line}"
    );
    assert!(!client_field(&line, "flags").contains('P'), "{line}");
    check!(q.info_field("stats", "pubsub_channels"), "2");
    check!(q.info_field("stats", "pubsub_patterns"), "2");
    check!(q.info_field("stats", "pubsubshard_channels"), "1");
}

#[test]
fn publish_inside_multi_exec_delivers() {
    let server = server();
    let mut sub = server.client();
    let mut c = server.client();
    subscribe(&mut sub, "SUBSCRIBE ch");
    subscribe(&mut sub, "PSUBSCRIBE c*");
    check!(c.cmd("MULTI"), ok());
    check!(c.cmd("PUBLISH ch one"), simple("QUEUED"));
    check!(c.cmd("PUBLISH nobody two"), simple("QUEUED"));
    check!(c.cmd("PUBLISH cx three"), simple("QUEUED"));
    check!(c.cmd("EXEC"), Frame::Array(vec![int(2), int(0), int(1)]));
    check!(read_n(&mut sub, 3), vec![message("ch", "one"), pmessage("c*", "ch", "one"), pmessage("c*", "cx", "three")]);
    // DISCARD delivers nothing.
    check!(c.cmd("MULTI"), ok());
    check!(c.cmd("PUBLISH ch gone"), simple("QUEUED"));
    check!(c.cmd("DISCARD"), ok());
    assert_silent(&mut sub, 50);
    // SUBSCRIBE inside MULTI: EXEC's array holds the confirmation, and the
    // connection is subscribed afterwards.
    check!(c.cmd("MULTI"), ok());
    check!(c.cmd("SUBSCRIBE q"), simple("QUEUED"));
    check!(c.cmd("EXEC"), Frame::Array(vec![sub_reply("subscribe", "q", 1)]));
    check!(c.cmd("GET x"), subscribed_mode_error("get"));
}

#[test]
fn wrong_arity_and_unknown_subcommands() {
    let server = server();
    let mut c = server.client();
    for (line, name) in [
        ("PUBLISH", "publish"),
        ("PUBLISH ch", "publish"),
        ("PUBLISH ch a b", "publish"),
        ("SPUBLISH ch", "spublish"),
        ("SUBSCRIBE", "subscribe"),
        ("PSUBSCRIBE", "psubscribe"),
        ("SSUBSCRIBE", "ssubscribe"),
        ("PUBSUB", "pubsub"),
    ] {
        check!(c.cmd(line), err(&format!("ERR wrong number of arguments for '{name}' command")), "{line}");
    }
    // None of them subscribed the connection.
    check!(c.cmd("GET x"), Frame::Null);
}

#[test]
fn a_durable_transaction_with_publish_delivers() {
    // Keel's defaults: appendonly yes, appendfsync always.
    let server = Server::start(&[]);
    let mut sub = server.client();
    let mut c = server.client();
    assert!(matches!(sub.cmd("HELLO 3"), Frame::Map(_)));
    check!(subscribe(&mut sub, "SUBSCRIBE ch"), vec![push(sub_reply("subscribe", "ch", 1))]);
    check!(c.cmd("MULTI"), ok());
    check!(c.cmd("SET k v"), simple("QUEUED"));
    check!(c.cmd("PUBLISH ch v"), simple("QUEUED"));
    check!(c.cmd("EXEC"), Frame::Array(vec![ok(), int(1)]));
    check!(sub.read(), push(message("ch", "v")));
    check!(sub.cmd("GET k"), bulk("v"));
    // Outside a transaction too, after a write.
    check!(c.cmd("SET k w"), ok());
    check!(c.cmd("PUBLISH ch w"), int(1));
    check!(sub.read(), push(message("ch", "w")));
    check!(sub.cmd("GET k"), bulk("w"));
}

#[test]
fn glob_pattern_edge_cases() {
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    subscribe(&mut c, r"PSUBSCRIBE a\*b [^x]y [a-c]z *");
    // An escaped star matches a star only.
    check!(publisher.cmd("PUBLISH a*b 1"), int(2));
    check!(multiset(&read_n(&mut c, 2)), multiset(&[pmessage("*", "a*b", "1"), pmessage(r"a\*b", "a*b", "1")]));
    check!(publisher.cmd("PUBLISH aXb 2"), int(1));
    check!(c.read(), pmessage("*", "aXb", "2"));
    // Negated and ranged classes.
    check!(publisher.cmd("PUBLISH zy 3"), int(2));
    check!(multiset(&read_n(&mut c, 2)), multiset(&[pmessage("*", "zy", "3"), pmessage("[^x]y", "zy", "3")]));
    check!(publisher.cmd("PUBLISH xy 4"), int(1));
    check!(c.read(), pmessage("*", "xy", "4"));
    check!(publisher.cmd("PUBLISH bz 5"), int(2));
    check!(multiset(&read_n(&mut c, 2)), multiset(&[pmessage("*", "bz", "5"), pmessage("[a-c]z", "bz", "5")]));
    check!(publisher.cmd("PUBLISH dz 6"), int(1));
    check!(c.read(), pmessage("*", "dz", "6"));
    assert_silent(&mut c, 30);
}

#[test]
fn the_empty_channel_name_is_a_channel_that_stars_do_not_match() {
    // Redis's stringmatchlen: with an empty string the loop never runs,
    // so `*` (and `**`) do not match "", while the empty pattern does.
    let server = server();
    let mut c = server.client();
    let mut publisher = server.client();
    check!(c.send(&["SUBSCRIBE", ""]), sub_reply("subscribe", "", 1));
    check!(c.send(&["PSUBSCRIBE", "*", "**", ""]), sub_reply("psubscribe", "*", 2));
    check!(read_n(&mut c, 2), vec![sub_reply("psubscribe", "**", 3), sub_reply("psubscribe", "", 4)]);
    check!(publisher.send(&["PUBLISH", "", "m"]), int(2));
    check!(read_n(&mut c, 2), vec![message("", "m"), pmessage("", "", "m")]);
    assert_silent(&mut c, 30);
    check!(publisher.send(&["PUBSUB", "NUMSUB", ""]), Frame::Array(vec![bulk(""), int(1)]));
    check!(publisher.cmd("PUBSUB CHANNELS"), arr(&[""]));
    check!(publisher.send(&["PUBSUB", "CHANNELS", ""]), arr(&[""]));
    check!(publisher.cmd("PUBSUB CHANNELS *"), Frame::Array(vec![]));
    // Any other name: `*` and `**` match, the empty pattern does not.
    check!(publisher.cmd("PUBLISH x n"), int(2));
    check!(multiset(&read_n(&mut c, 2)), multiset(&[pmessage("*", "x", "n"), pmessage("**", "x", "n")]));
    assert_silent(&mut c, 30);
}

#[test]
fn hello_and_reset_switch_protocols_while_subscribed() {
    let server = server();
    let mut c = server.client();
    let mut q = server.client();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    check!(c.cmd("CLIENT SETNAME r3"), ok());
    check!(subscribe(&mut c, "SUBSCRIBE x"), vec![push(sub_reply("subscribe", "x", 1))]);
    // A RESP3 subscriber is flagged too.
    let line = client_line(&mut q, "r3");
    assert!(client_field(&line, "flags").contains('P'), "{line}");
    check!(client_field(&line, "sub"), "1");
    // Back to RESP2 while subscribed: subscribed mode's rules apply.
    assert!(matches!(c.cmd("HELLO 2"), Frame::Array(_)));
    check!(c.cmd("GET x"), subscribed_mode_error("get"));
    check!(c.cmd("PING"), arr(&["pong", ""]));
    check!(q.cmd("PUBLISH x m"), int(1));
    check!(c.read(), message("x", "m"));
    // HELLO is not one of the commands RESP2 subscribed mode allows.
    check!(c.cmd("HELLO 3"), subscribed_mode_error("hello"));
    check!(c.cmd("RESET"), simple("RESET"));
    // RESET from RESP3 subscribed mode: RESP2, nothing subscribed.
    let mut d = server.client();
    assert!(matches!(d.cmd("HELLO 3"), Frame::Map(_)));
    check!(subscribe(&mut d, "SUBSCRIBE x"), vec![push(sub_reply("subscribe", "x", 1))]);
    check!(d.cmd("RESET"), simple("RESET"));
    check!(q.cmd("PUBLISH x o"), int(0));
    check!(d.cmd("GET x"), Frame::Null);
    check!(subscribe(&mut d, "SUBSCRIBE y"), vec![sub_reply("subscribe", "y", 1)]);
}

#[test]
fn client_kill_removes_a_subscriber() {
    let server = server();
    let mut sub = server.client();
    let mut q = server.client();
    let Frame::Integer(id) = sub.cmd("CLIENT ID") else { panic!("CLIENT ID is an integer") };
    subscribe(&mut sub, "SUBSCRIBE k");
    subscribe(&mut sub, "PSUBSCRIBE k*");
    check!(q.cmd(&format!("CLIENT KILL ID {id}")), int(1));
    wait_for(&mut q, "PUBSUB NUMSUB k", Frame::Array(vec![bulk("k"), int(0)]));
    wait_for(&mut q, "PUBSUB NUMPAT", int(0));
    check!(q.cmd("PUBLISH k m"), int(0));
    // The killed connection is closed.
    let rest = sub.read_to_close();
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
}

#[test]
fn a_subscriber_that_never_reads_is_disconnected_past_the_pubsub_limit() {
    // Redis's default: client-output-buffer-limit pubsub 32mb 8mb 60.
    let server = server();
    let mut sleeper = server.client();
    let mut publisher = server.client();
    subscribe(&mut sleeper, "SUBSCRIBE flood");
    let payload = "x".repeat(1 << 20);
    // 96 MiB: past the 32 MiB hard limit plus whatever the sockets hold.
    for _ in 0..96 {
        let got = publisher.send(&["PUBLISH", "flood", payload.as_str()]);
        assert!(got == int(1) || got == int(0), "{}", readable(&format!("{got:?}")));
    }
    wait_for(&mut publisher, "PUBSUB NUMSUB flood", Frame::Array(vec![bulk("flood"), int(0)]));
    check!(publisher.cmd("PUBLISH flood late"), int(0));
    // What it had been sent before the limit ends in a close.
    sleeper.stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let got = sleeper.read_to_close();
    assert!(got.len() < 96 << 20, "the whole flood was delivered: {} bytes", got.len());
}

/// A server with four workers (Keel-only flag).
fn threaded_server() -> Server {
    Server::start(&["--threads", "4"])
}

#[test]
fn concurrent_publishers_keep_each_publishers_order() {
    let server = threaded_server();
    const PUBLISHERS: usize = 4;
    const MESSAGES: usize = 200;
    let mut subs: Vec<Client> = (0..8).map(|_| server.client()).collect();
    for (i, sub) in subs.iter_mut().enumerate() {
        if i % 2 == 0 {
            subscribe(sub, "SUBSCRIBE race");
        } else {
            subscribe(sub, "PSUBSCRIBE ra*");
        }
    }
    let port = server.port;
    let publishers: Vec<_> = (0..PUBLISHERS)
        .map(|p| {
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                for n in 0..MESSAGES {
                    let got = c.send(&["PUBLISH", "race", &format!("{p}:{n}")]);
                    assert_eq!(got, int(8), "publisher {p}, message {n}");
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().expect("publisher");
    }
    for (i, sub) in subs.iter_mut().enumerate() {
        let mut next = [0usize; PUBLISHERS];
        for _ in 0..PUBLISHERS * MESSAGES {
            let frame = sub.read();
            let items = match &frame {
                Frame::Array(items) if i % 2 == 0 && items.len() == 3 && items[0] == bulk("message") => items,
                Frame::Array(items) if i % 2 == 1 && items.len() == 4 && items[0] == bulk("pmessage") => items,
                _ => panic!("subscriber {i}: {}", readable(&format!("{frame:?}"))),
            };
            let Some(Frame::Bulk(payload)) = items.last() else { panic!("no payload") };
            let payload = String::from_utf8(payload.clone()).expect("utf-8");
            let (p, n) = payload.split_once(':').expect("p:n");
            let (p, n): (usize, usize) = (p.parse().expect("p"), n.parse().expect("n"));
            assert_eq!(n, next[p], "subscriber {i}: publisher {p}'s messages out of order");
            next[p] += 1;
        }
        assert_silent(sub, 5);
    }
}

#[test]
fn subscribers_coming_and_going_while_messages_flow() {
    let server = threaded_server();
    let mut stable = server.client();
    subscribe(&mut stable, "SUBSCRIBE churn");
    let mut admin = server.client();
    let mut info = |field: &str| -> u64 {
        let Frame::Bulk(info) = admin.cmd("INFO") else { panic!("INFO") };
        let info = String::from_utf8_lossy(&info).into_owned();
        let prefix = format!("{field}:");
        info.lines().find_map(|l| l.strip_prefix(&prefix)).expect("field").trim().parse().expect("count")
    };
    let before = info("total_connections_received");
    let port = server.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churners: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut c = Client::connect(port);
                    if t == 2 {
                        assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
                    }
                    c.write_command(&["SUBSCRIBE", "churn", "other"]);
                    c.write_command(&["PSUBSCRIBE", "ch*"]);
                    c.write_command(&["SSUBSCRIBE", "churn"]);
                    if round % 3 == 0 {
                        // Leave by unsubscribing, then by closing.
                        c.write_command(&["UNSUBSCRIBE"]);
                        c.write_command(&["PUNSUBSCRIBE"]);
                        c.write_command(&["SUNSUBSCRIBE"]);
                    } else if round % 3 == 1 {
                        c.write_command(&["RESET"]);
                    }
                    // Otherwise just close, unread messages and all.
                    round += 1;
                    drop(c);
                }
                round
            })
        })
        .collect();
    let mut publisher = server.client();
    for n in 0..500 {
        let Frame::Integer(got) = publisher.send(&["PUBLISH", "churn", &n.to_string()]) else {
            panic!("PUBLISH answers an integer")
        };
        assert!(got >= 1, "message {n} reached {got} subscribers");
        if n % 5 == 0 {
            let Frame::Integer(_) = publisher.send(&["SPUBLISH", "churn", "s"]) else { panic!("SPUBLISH") };
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let churned: u64 = churners.into_iter().map(|c| c.join().expect("churner")).sum();
    for n in 0..500 {
        check!(stable.read(), message("churn", &n.to_string()));
    }
    // Everyone else is gone, once the server has noticed: every churner's
    // connection accepted (a worker may not have read one yet, whose
    // SUBSCRIBE would still count) and closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while info("total_connections_received") < before + churned + 1 || info("connected_clients") > 3 {
        assert!(Instant::now() < deadline, "the churners' connections never all came and went");
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for(
        &mut publisher,
        "PUBSUB NUMSUB churn other",
        Frame::Array(vec![bulk("churn"), int(1), bulk("other"), int(0)]),
    );
    wait_for(&mut publisher, "PUBSUB NUMPAT", int(0));
    wait_for(&mut publisher, "PUBSUB SHARDNUMSUB churn", Frame::Array(vec![bulk("churn"), int(0)]));
    check!(publisher.cmd("PUBLISH churn last"), int(1));
    check!(stable.read(), message("churn", "last"));
    assert_silent(&mut stable, 30);
}

#[test]
fn resp3_messages_reach_a_client_that_is_blocked_or_in_multi() {
    let server = server();
    let mut c = server.client();
    let mut other = server.client();
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    subscribe(&mut c, "SUBSCRIBE x");
    // Blocked in BLPOP: the message comes at once, the pop's reply later.
    c.write_command(&["BLPOP", "q", "0"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while other.info_field("clients", "blocked_clients") != "1" {
        assert!(Instant::now() < deadline, "BLPOP never blocked");
        std::thread::yield_now();
    }
    check!(other.cmd("PUBLISH x 1"), int(1));
    check!(c.read(), push(message("x", "1")));
    check!(other.cmd("RPUSH q v"), int(1));
    check!(c.read(), arr(&["q", "v"]));
    // Queueing a transaction: messages still come.
    check!(c.cmd("MULTI"), ok());
    check!(other.cmd("PUBLISH x 2"), int(1));
    check!(c.read(), push(message("x", "2")));
    check!(c.cmd("SET k v"), simple("QUEUED"));
    check!(c.cmd("EXEC"), Frame::Array(vec![ok()]));
    assert_silent(&mut c, 30);
}

#[test]
fn client_pause_write_holds_publish_but_not_subscribing() {
    let server = server();
    let mut admin = server.client();
    let mut sub = server.client();
    let mut publisher = server.client();
    let mut shard_publisher = server.client();
    subscribe(&mut sub, "SUBSCRIBE x");
    subscribe(&mut sub, "SSUBSCRIBE s");
    check!(admin.cmd("CLIENT PAUSE 10000 WRITE"), ok());
    // PUBLISH and SPUBLISH may replicate: held like writes.
    publisher.write_command(&["PUBLISH", "x", "held"]);
    shard_publisher.write_command(&["SPUBLISH", "s", "held"]);
    // Subscribing and introspection go on meanwhile.
    check!(subscribe(&mut sub, "SUBSCRIBE y"), vec![sub_reply("subscribe", "y", 2)]);
    check!(admin.cmd("PUBSUB NUMSUB x y"), Frame::Array(vec![bulk("x"), int(1), bulk("y"), int(1)]));
    check!(admin.cmd("PUBSUB NUMPAT"), int(0));
    assert_silent(&mut publisher, 50);
    assert_silent(&mut shard_publisher, 10);
    assert_silent(&mut sub, 10);
    check!(admin.cmd("CLIENT UNPAUSE"), ok());
    check!(publisher.read(), int(1));
    check!(shard_publisher.read(), int(1));
    let got = read_n(&mut sub, 2);
    check!(multiset(&got), multiset(&[message("x", "held"), smessage("s", "held")]));
}

#[test]
fn many_channels_in_one_command() {
    let server = server();
    let mut c = server.client();
    let mut q = server.client();
    let names: Vec<String> = (0..1000).map(|i| format!("ch:{i}")).collect();
    let mut argv = vec!["SUBSCRIBE".to_string()];
    argv.extend(names.iter().cloned());
    c.write_command(&argv);
    for (i, name) in names.iter().enumerate() {
        check!(c.read(), sub_reply("subscribe", name, i as i64 + 1));
    }
    check!(q.cmd("PUBSUB NUMSUB ch:0 ch:999"), Frame::Array(vec![bulk("ch:0"), int(1), bulk("ch:999"), int(1)]));
    check!(q.cmd("PUBLISH ch:500 m"), int(1));
    check!(c.read(), message("ch:500", "m"));
    let Frame::Array(all) = q.cmd("PUBSUB CHANNELS ch:*") else { panic!("PUBSUB CHANNELS is an array") };
    check!(all.len(), 1000);
    let replies = send_n(&mut c, "UNSUBSCRIBE", 1000);
    let want: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_unsubscribed_all(&replies, "unsubscribe", &want, 0);
    check!(q.cmd("PUBSUB CHANNELS"), Frame::Array(vec![]));
    check!(c.cmd("GET x"), Frame::Null);
}

/// Redis is single-threaded: every subscriber of a channel sees concurrent
/// publishes in one and the same order. Keel's workers must too.
#[test]
fn concurrent_publishes_reach_every_subscriber_in_one_order() {
    let server = threaded_server();
    let mut subs: Vec<Client> = (0..8).map(|_| server.client()).collect();
    for sub in subs.iter_mut() {
        subscribe(sub, "SUBSCRIBE race");
    }
    let port = server.port;
    let publishers: Vec<_> = (0..4)
        .map(|p| {
            std::thread::spawn(move || {
                let mut c = Client::connect(port);
                // Pipelined, so that the publishes really overlap.
                for n in 0..500 {
                    c.write_command(&["PUBLISH", "race", &format!("{p}:{n}")]);
                }
                for n in 0..500 {
                    assert_eq!(c.read(), int(8), "publisher {p}, message {n}");
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().expect("publisher");
    }
    let orders: Vec<Vec<Frame>> = subs.iter_mut().map(|s| read_n(s, 2000)).collect();
    for (i, order) in orders.iter().enumerate() {
        if let Some(at) = order.iter().zip(&orders[0]).position(|(a, b)| a != b) {
            panic!(
                "subscriber {i} saw another order than subscriber 0: message {at} is {} for 0, {} for {i}",
                readable(&format!("{:?}", orders[0][at])),
                readable(&format!("{:?}", order[at]))
            );
        }
    }
}

/// The names in a CLIENT LIST reply, sorted.
fn client_names(frame: Frame) -> Vec<String> {
    let Frame::Bulk(text) = frame else { panic!("CLIENT LIST is a bulk string") };
    let text = String::from_utf8(text).expect("utf-8");
    let mut names: Vec<String> = text.lines().map(|l| client_field(l, "name")).collect();
    names.sort();
    names
}

#[test]
fn client_list_and_kill_by_type_pubsub() {
    let server = server();
    let mut q = server.client();
    let mut two = server.client();
    let mut three = server.client();
    let mut normal = server.client();
    let mut shard = server.client();
    check!(q.cmd("CLIENT SETNAME q"), ok());
    check!(two.cmd("CLIENT SETNAME two"), ok());
    assert!(matches!(three.cmd("HELLO 3"), Frame::Map(_)));
    check!(three.cmd("CLIENT SETNAME three"), ok());
    check!(normal.cmd("CLIENT SETNAME normal"), ok());
    check!(shard.cmd("CLIENT SETNAME shard"), ok());
    subscribe(&mut two, "SUBSCRIBE x");
    subscribe(&mut three, "PSUBSCRIBE x*");
    subscribe(&mut shard, "SSUBSCRIBE s");
    // RESP2 and RESP3 subscribers alike are of type pubsub, and not normal.
    check!(client_names(q.cmd("CLIENT LIST TYPE pubsub")), ["shard", "three", "two"]);
    check!(client_names(q.cmd("CLIENT LIST TYPE normal")), ["normal", "q"]);
    check!(q.cmd("CLIENT KILL TYPE pubsub"), int(3));
    wait_for(&mut q, "PUBSUB NUMSUB x", Frame::Array(vec![bulk("x"), int(0)]));
    wait_for(&mut q, "PUBSUB NUMPAT", int(0));
    wait_for(&mut q, "PUBSUB SHARDNUMSUB s", Frame::Array(vec![bulk("s"), int(0)]));
    check!(client_names(q.cmd("CLIENT LIST")), ["normal", "q"]);
    check!(normal.cmd("PING"), simple("PONG"));
}

#[test]
fn pipelined_commands_follow_the_mode_the_previous_ones_left() {
    let server = server();
    let mut c = server.client();
    check!(c.cmd("SET x 1"), ok());
    let mut pipeline = Vec::new();
    for argv in
        [&["SUBSCRIBE", "a"][..], &["GET", "x"], &["UNSUBSCRIBE"], &["GET", "x"], &["PSUBSCRIBE", "p*"], &["PING"]]
    {
        pipeline.extend(common::encode(argv));
    }
    c.write_raw(&pipeline);
    check!(
        read_n(&mut c, 6),
        vec![
            sub_reply("subscribe", "a", 1),
            subscribed_mode_error("get"),
            sub_reply("unsubscribe", "a", 0),
            bulk("1"),
            sub_reply("psubscribe", "p*", 1),
            arr(&["pong", ""]),
        ]
    );
    assert_silent(&mut c, 30);
}
