//! Values to and from Debian's `redis-server` (keel-testkit's wrapper)
//! through the commands of their types.

use keel_rdb::RdbValue;
use keel_testkit::redis::{Redis, Reply};

/// Each value type read and written with its own commands.
pub trait Values {
    /// Stores `value` at `key` in the selected database (replacing it).
    fn store(&mut self, key: &[u8], value: &RdbValue);
    /// The value at `key` in the selected database, read with the commands
    /// of its type.
    fn fetch(&mut self, key: &[u8]) -> Option<RdbValue>;
    /// The key's expiry in Unix milliseconds (`PEXPIRETIME`).
    fn expire_at_ms(&mut self, key: &[u8]) -> Option<u64>;
    /// Every key of the selected database.
    fn keys(&mut self) -> Vec<Vec<u8>>;
    fn encoding(&mut self, key: &[u8]) -> String;
}

impl Values for Redis {
    fn store(&mut self, key: &[u8], value: &RdbValue) {
        self.cmd(&[b"DEL", key]);
        match value {
            RdbValue::String(s) => self.ok(&[b"SET", key, s]),
            RdbValue::List(items) => {
                for chunk in items.chunks(100) {
                    let mut argv: Vec<&[u8]> = vec![b"RPUSH", key];
                    argv.extend(chunk.iter().map(Vec::as_slice));
                    self.cmd(&argv).int();
                }
            }
            RdbValue::Set(members) => {
                for chunk in members.chunks(100) {
                    let mut argv: Vec<&[u8]> = vec![b"SADD", key];
                    argv.extend(chunk.iter().map(Vec::as_slice));
                    self.cmd(&argv).int();
                }
            }
            RdbValue::Hash(pairs) => {
                for chunk in pairs.chunks(100) {
                    let mut argv: Vec<&[u8]> = vec![b"HSET", key];
                    for (f, v) in chunk {
                        argv.push(f);
                        argv.push(v);
                    }
                    self.cmd(&argv).int();
                }
            }
            RdbValue::ZSet(pairs) => {
                for chunk in pairs.chunks(100) {
                    let scores: Vec<Vec<u8>> = chunk.iter().map(|(_, s)| score_arg(*s)).collect();
                    let mut argv: Vec<&[u8]> = vec![b"ZADD", key];
                    for ((m, _), s) in chunk.iter().zip(&scores) {
                        argv.push(s);
                        argv.push(m);
                    }
                    self.cmd(&argv).int();
                }
            }
            // Streams carry Redis's own nodes: the tests hand them to Redis
            // in files, never through commands.
            RdbValue::Stream(_) => panic!("streams are stored through RDB files"),
        }
    }

    fn fetch(&mut self, key: &[u8]) -> Option<RdbValue> {
        let t = self.cmd(&[b"TYPE", key]).status();
        let all = |r: Reply| -> Vec<Vec<u8>> { r.array().into_iter().map(Reply::bulk).collect() };
        Some(match t.as_str() {
            "none" => return None,
            "string" => RdbValue::String(self.cmd(&[b"GET", key]).bulk()),
            "list" => RdbValue::List(all(self.cmd(&[b"LRANGE", key, b"0", b"-1"]))),
            "set" => RdbValue::Set(all(self.cmd(&[b"SMEMBERS", key]))),
            "hash" => {
                let flat = all(self.cmd(&[b"HGETALL", key]));
                RdbValue::Hash(flat.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect())
            }
            "zset" => {
                let flat = all(self.cmd(&[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"]));
                RdbValue::ZSet(
                    flat.chunks(2)
                        .map(|p| (p[0].clone(), std::str::from_utf8(&p[1]).unwrap().parse::<f64>().unwrap()))
                        .collect(),
                )
            }
            other => panic!("unexpected type {other}"),
        })
    }

    fn expire_at_ms(&mut self, key: &[u8]) -> Option<u64> {
        let t = self.cmd(&[b"PEXPIRETIME", key]).int();
        u64::try_from(t).ok()
    }

    fn keys(&mut self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.cmd(&[b"KEYS", b"*"]).array().into_iter().map(Reply::bulk).collect();
        keys.sort();
        keys
    }

    fn encoding(&mut self, key: &[u8]) -> String {
        String::from_utf8(self.cmd(&[b"OBJECT", b"ENCODING", key]).bulk()).unwrap()
    }
}

/// A score as a command argument that Redis parses back to the same bits.
pub fn score_arg(s: f64) -> Vec<u8> {
    if s.is_infinite() {
        return if s > 0.0 { b"inf".to_vec() } else { b"-inf".to_vec() };
    }
    if s == 0.0 && s.is_sign_negative() {
        return b"-0".to_vec();
    }
    format!("{s:?}").into_bytes()
}
