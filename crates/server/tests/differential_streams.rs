//! Differential tests of the stream commands against Debian's
//! redis-server 7.0.15: seeded scripts of XADD (explicit IDs, trims of
//! every kind), XRANGE, XREVRANGE, XDEL, XTRIM, XSETID, XREAD, the
//! consumer-group commands and XINFO, with errors among them, go to both
//! servers and every reply must match. Idle and seen times, which depend
//! on when each server got the command, are masked; everything else is
//! compared byte for byte, XINFO's radix-tree figures included. A second
//! run compares the keyspace notifications, a third speaks RESP3.

mod common;

use std::cell::Cell;

use common::diff::Stream;
use common::{Frame, Server};
use rand::rngs::StdRng;
use rand::Rng;

thread_local! {
    /// The next ID of a slowly rising sequence, so that most XADDs succeed
    /// while some still go below the top (per test thread, so that a seed
    /// gives the same script whatever runs beside it).
    static NEXT_MS: Cell<u64> = const { Cell::new(1) };
}

fn next_ms(step: u64) -> u64 {
    NEXT_MS.with(|n| {
        let ms = n.get();
        n.set(ms + step);
        ms
    })
}

fn fill(token: &str, rng: &mut StdRng) -> Option<String> {
    Some(match token {
        "{sk}" => ["s1", "s2", "{t}s", "{t}s", "str"][rng.gen_range(0..5)].to_string(),
        "{xid}" => {
            let ms = next_ms(rng.gen_range(0..3));
            match rng.gen_range(0..12) {
                0 => format!("{ms}-*"),
                1 => ms.to_string(),
                2 => format!("{}-{}", rng.gen_range(0..ms + 1), rng.gen_range(0..3)),
                3 => "0-0".into(),
                4 => "abc".into(),
                _ => format!("{ms}-{}", rng.gen_range(0..4)),
            }
        }
        // An ID somewhere in what has been added.
        "{id}" => {
            let top = next_ms(0);
            match rng.gen_range(0..10) {
                0 => rng.gen_range(0..top + 2).to_string(),
                1 => "x-1".into(),
                _ => format!("{}-{}", rng.gen_range(0..top + 2), rng.gen_range(0..4)),
            }
        }
        "{rid}" => {
            let top = next_ms(0);
            match rng.gen_range(0..10) {
                0 => "-".into(),
                1 => "+".into(),
                2 => format!("({}-{}", rng.gen_range(0..top + 2), rng.gen_range(0..3)),
                3 => rng.gen_range(0..top + 2).to_string(),
                4 => "(0-0".into(),
                5 => "(18446744073709551615-18446744073709551615".into(),
                _ => format!("{}-{}", rng.gen_range(0..top + 2), rng.gen_range(0..3)),
            }
        }
        "{fld}" => ["f", "g", "field", "1", "-7", "long-field-name-that-goes-on"][rng.gen_range(0..6)].to_string(),
        "{n}" => ["0", "1", "2", "3", "5", "10", "-1", "x"][rng.gen_range(0..8)].to_string(),
        "{ml}" => ["0", "1", "3", "5", "20", "100", "-1"][rng.gen_range(0..7)].to_string(),
        "{g}" => ["g1", "g2", "nogroup"][rng.gen_range(0..3)].to_string(),
        "{c}" => ["alice", "bob", "carol"][rng.gen_range(0..3)].to_string(),
        "{gid}" => {
            let top = next_ms(0);
            match rng.gen_range(0..5) {
                0 => "$".into(),
                1 => "0".into(),
                2 => "-".into(),
                _ => format!("{}-0", rng.gen_range(0..top + 1)),
            }
        }
        "{rgid}" => [">", ">", ">", "0", "0-0", "$"][rng.gen_range(0..6)].to_string(),
        _ => return None,
    })
}

/// Zeroes what depends on when each server ran the command: idle and
/// seen times, and the delivery times of XINFO FULL and XPENDING.
fn mask(command: &str, frame: Frame) -> Frame {
    fn zero_times(frame: Frame, in_pending: bool) -> Frame {
        match frame {
            Frame::Array(items) if in_pending => Frame::Array(
                items
                    .into_iter()
                    .map(|row| match row {
                        Frame::Array(mut r) if r.len() == 4 => {
                            r[2] = Frame::Integer(0);
                            Frame::Array(r)
                        }
                        Frame::Array(mut r) if r.len() == 3 => {
                            r[1] = Frame::Integer(0);
                            Frame::Array(r)
                        }
                        other => other,
                    })
                    .collect(),
            ),
            Frame::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                let mut key: Option<Vec<u8>> = None;
                for item in items {
                    let masked = mask_value(key.as_deref(), item);
                    key = match &masked {
                        Frame::Bulk(b) => Some(b.clone()),
                        _ => None,
                    };
                    out.push(masked);
                }
                Frame::Array(out)
            }
            Frame::Map(pairs) => Frame::Map(
                pairs
                    .into_iter()
                    .map(|(k, v)| {
                        let name = match &k {
                            Frame::Bulk(b) => Some(b.clone()),
                            _ => None,
                        };
                        let v = mask_value(name.as_deref(), v);
                        (k, v)
                    })
                    .collect(),
            ),
            other => other,
        }
    }
    fn mask_value(key: Option<&[u8]>, v: Frame) -> Frame {
        match key {
            Some(b"seen-time" | b"idle") => Frame::Integer(0),
            Some(b"pending") => zero_times(v, true),
            _ => zero_times(v, false),
        }
    }
    match command {
        "XINFO" => zero_times(frame, false),
        "XPENDING" => match frame {
            Frame::Array(rows) if rows.iter().all(|r| matches!(r, Frame::Array(x) if x.len() == 4)) => {
                zero_times(Frame::Array(rows), true)
            }
            other => other,
        },
        _ => frame,
    }
}

const WRITES: &[&str] = &[
    "XADD {sk} {xid} {fld} {v}",
    "XADD {sk} {xid} {fld} {v} {fld} {v}",
    "XADD {sk} {xid} f {v} g {v}",
    "XADD {sk} {xid} f {v} g {v}",
    "XADD {sk} [NOMKSTREAM] [MAXLEN {ml}|MAXLEN = {ml}|MAXLEN ~ {ml}|MINID {id}|MINID ~ {id}|MAXLEN ~ {ml} LIMIT {n}] {xid} f {v}",
    "XADD {sk} {xid} f",
    "XADD {sk} MAXLEN ~ {ml} LIMIT {n} MINID {id} {xid} f {v}",
    "XDEL {sk} {id} [{id}|{rid}]",
    "XTRIM {sk} [MAXLEN|MINID] [~|=] {ml} [LIMIT {n}]",
    "XTRIM {sk} MINID [~|=] {id}",
    "XSETID {sk} {id} [ENTRIESADDED {n}] [MAXDELETEDID {id}]",
    "DEL {sk}",
];

const READS: &[&str] = &[
    "XLEN {sk}",
    "XRANGE {sk} {rid} {rid} [COUNT {n}]",
    "XRANGE {sk} - + [COUNT {n}]",
    "XREVRANGE {sk} {rid} {rid} [COUNT {n}]",
    "XREVRANGE {sk} + - [COUNT {n}|COUNT]",
    "XREAD [COUNT {n}] STREAMS {sk} [{id}|$|0|-]",
    "XREAD COUNT {n} STREAMS s1 {t}s {id} {id}",
    "XREAD STREAMS {sk}",
    "XINFO STREAM {sk} [FULL|FULL COUNT {n}|FULL COUNT|FOO]",
    "XINFO HELP",
    "TYPE {sk}",
    "OBJECT ENCODING {sk}",
    "EXISTS {sk}",
];

const GROUPS: &[&str] = &[
    "XGROUP CREATE {sk} {g} {gid} [MKSTREAM] [ENTRIESREAD {n}]",
    "XGROUP SETID {sk} {g} {gid} [ENTRIESREAD {n}]",
    "XGROUP DESTROY {sk} {g}",
    "XGROUP CREATECONSUMER {sk} {g} {c}",
    "XGROUP DELCONSUMER {sk} {g} {c}",
    "XGROUP HELP",
    "XGROUP NOSUCH {sk}",
    "XREADGROUP GROUP {g} {c} [COUNT {n}] [NOACK] STREAMS {sk} {rgid}",
    "XREADGROUP GROUP {g} {c} STREAMS {sk} >",
    "XREADGROUP GROUP {g} {c} COUNT 2 STREAMS s1 {t}s > >",
    "XACK {sk} {g} {id} [{id}]",
    "XPENDING {sk} {g}",
    "XPENDING {sk} {g} [IDLE 0] {rid} {rid} {n} [{c}]",
    "XPENDING {sk} {g} - + 10 [{c}]",
    "XCLAIM {sk} {g} {c} 0 {id} [{id}] [JUSTID] [FORCE] [RETRYCOUNT {n}] [LASTID {id}]",
    "XAUTOCLAIM {sk} {g} {c} 0 [0-0|{rid}] [COUNT {n}] [JUSTID]",
    "XINFO GROUPS {sk}",
    "XINFO CONSUMERS {sk} {g}",
    "XINFO STREAM {sk} FULL",
];

fn stream(families: &'static [&'static [&'static str]]) -> Stream<'static> {
    let mut s = Stream::new(families);
    s.fill = fill;
    s.normalize = mask;
    s.prelude = &["SET str notastream", "CONFIG SET stream-node-max-entries 4"];
    s
}

#[test]
fn stream_commands_match_redis() {
    let s = stream(&[WRITES, WRITES, READS]);
    for seed in 0..4 {
        s.run(seed, 1500);
    }
}

#[test]
fn consumer_groups_match_redis() {
    let s = stream(&[WRITES, READS, GROUPS, GROUPS]);
    for seed in 100..104 {
        s.run(seed, 1500);
    }
}

/// XCLAIM FORCE of an entry no consumer read, which the random streams
/// reach rarely: the new pending record counts one delivery, and the
/// claim one more unless JUSTID, as Redis's streamCreateNACK.
#[test]
fn forced_claims_count_deliveries_as_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let (mut r, mut k) = (redis.client(), keel.client());
    let lines = [
        "XADD s 1-1 f v",
        "XADD s 2-1 f v",
        "XGROUP CREATE s g 0",
        "XCLAIM s g alice 0 1-1 FORCE",
        "XCLAIM s g alice 0 2-1 FORCE JUSTID",
        "XCLAIM s g bob 0 3-1 FORCE",
        "XPENDING s g - + 10",
        "XINFO STREAM s FULL",
    ];
    for line in lines {
        let argv: Vec<&str> = line.split(' ').collect();
        let name = argv[0].to_ascii_uppercase();
        assert_eq!(mask(&name, k.send(&argv)), mask(&name, r.send(&argv)), "{line}");
    }
}

#[test]
fn stream_notifications_match_redis() {
    let mut s = stream(&[WRITES, GROUPS]);
    s.notify = true;
    s.run(200, 600);
}

#[test]
fn stream_replies_match_redis_in_resp3() {
    let mut s = stream(&[WRITES, READS, GROUPS]);
    s.resp3 = true;
    s.run(300, 800);
}

#[test]
fn default_node_sizes_match_redis() {
    let mut s = Stream::new(&[WRITES, WRITES, WRITES, READS]);
    s.fill = fill;
    s.normalize = mask;
    s.prelude = &["SET str notastream"];
    s.run(400, 2000);
}
