//! Keyspace notifications (`notify-keyspace-events`): a command that
//! changes a key publishes `<event>` on `__keyspace@<db>__:<key>` and
//! `<key>` on `__keyevent@<db>__:<event>`, for the classes of events the
//! directive enables, as Redis's notify.c does. Each command names its
//! own events where Redis's does (`Ctx::notify`); expiry is here.
//!
//! The messages go out as PUBLISH's do (`pubsub::deliver`): after the
//! command, once what it wrote is durable under `appendfsync always`.

use std::sync::atomic::Ordering;

use crate::pubsub::{Delivery, Kind};
use crate::server::Server;

/// Redis's event classes (`NOTIFY_*`), with its bits.
pub const KEYSPACE: u32 = 1 << 0;
pub const KEYEVENT: u32 = 1 << 1;
pub const GENERIC: u32 = 1 << 2;
pub const STRING: u32 = 1 << 3;
pub const LIST: u32 = 1 << 4;
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
pub const EXPIRED: u32 = 1 << 8;
pub const EVICTED: u32 = 1 << 9;
pub const STREAM: u32 = 1 << 10;
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 13;
pub const NEW: u32 = 1 << 14;
/// `A`: every class but key misses and new keys.
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The letters of the classes `A` does not spell, in Redis's output order.
const LETTERS: &[(u8, u32)] = &[
    (b'g', GENERIC),
    (b'$', STRING),
    (b'l', LIST),
    (b's', SET),
    (b'h', HASH),
    (b'z', ZSET),
    (b'x', EXPIRED),
    (b'e', EVICTED),
    (b't', STREAM),
    (b'd', MODULE),
    (b'n', NEW),
];

/// The classes `text` enables (Redis's keyspaceEventsStringToFlags).
/// Key-miss events (`m`) are refused: Keel does not send them yet.
pub fn parse(text: &str) -> Result<u32, String> {
    let mut flags = 0;
    for c in text.bytes() {
        flags |= match c {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => return Err("Keel does not send key-miss events ('m') yet".into()),
            _ => match LETTERS.iter().find(|&&(l, _)| l == c) {
                Some(&(_, flag)) => flag,
                None => return Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into()),
            },
        };
    }
    Ok(flags)
}

/// The directive's text for `flags` (Redis's keyspaceEventsFlagsToString).
pub fn format(flags: u32) -> String {
    let mut text = String::new();
    // As Redis's: with `A`, a new-key flag is not shown.
    if flags & ALL == ALL {
        text.push('A');
    } else {
        text.extend(LETTERS.iter().filter(|&&(_, f)| flags & f != 0).map(|&(l, _)| l as char));
    }
    for (letter, flag) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)] {
        if flags & flag != 0 {
            text.push(letter);
        }
    }
    text
}

/// The messages of one event, when its class is enabled: appended to
/// `out`, to be delivered as PUBLISH's are.
pub fn event(server: &Server, class: u32, event: &str, key: &[u8], db: usize, out: &mut Vec<Delivery>) {
    let flags = server.notify_flags.load(Ordering::Relaxed);
    if flags & class == 0 {
        return;
    }
    if flags & KEYSPACE != 0 {
        let channel = [format!("__keyspace@{db}__:").as_bytes(), key].concat();
        out.extend(server.pubsub.publish(None, Kind::Channel, &channel, event.as_bytes()).others);
    }
    if flags & KEYEVENT != 0 {
        let channel = format!("__keyevent@{db}__:{event}");
        out.extend(server.pubsub.publish(None, Kind::Channel, channel.as_bytes(), key).others);
    }
}

/// `expired` for keys removed outside any command (the cron's active
/// expiry), delivered at once.
pub fn expired(server: &Server, db: usize, key: &[u8]) {
    deliver_now(server, EXPIRED, "expired", db, key);
}

/// `evicted` for a key that made room under `maxmemory`, delivered at once.
pub fn evicted(server: &Server, db: usize, key: &[u8]) {
    deliver_now(server, EVICTED, "evicted", db, key);
}

fn deliver_now(server: &Server, class: u32, name: &str, db: usize, key: &[u8]) {
    let mut out = Vec::new();
    event(server, class, name, key, db, &mut out);
    if !out.is_empty() {
        crate::pubsub::deliver(server, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directive_text_round_trips_as_redis_writes_it() {
        for (given, shown) in [
            ("", ""),
            ("KEA", "AKE"),
            ("Elg", "glE"),
            ("Kx$", "$xK"),
            ("g$lshzxetd", "A"),
            ("EKg", "gKE"),
            ("AnK", "AK"),
            ("nE", "nE"),
        ] {
            assert_eq!(format(parse(given).expect(given)), shown, "{given}");
        }
        assert_eq!(parse("KEA").map(|f| f & NEW), Ok(0));
        assert!(parse("Kq").is_err_and(|e| e.starts_with("Invalid event class character")));
        assert!(parse("Km").is_err());
        assert_eq!(parse("Kn"), Ok(KEYSPACE | NEW));
    }
}
