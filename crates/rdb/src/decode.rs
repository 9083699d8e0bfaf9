//! Decoding one value of a given RDB type into the neutral model; shared by
//! the file reader and `restore_payload`.
//!
//! Every value handed out is well formed: no duplicate set members, hash
//! fields or sorted set members, no NaN score (Redis refuses those files
//! too). Empty collections, which old Redis versions could write by
//! mistake, come back as `None`: Redis skips such keys when loading.

use std::collections::HashSet;
use std::io::BufRead;

use crate::encoded::{intset, listpack, ziplist, zipmap, Elem};
use crate::error::RdbError;
use crate::format::*;
use crate::input::Input;
use crate::RdbValue;

/// Collections announce their size up front; trust it for preallocation
/// only this far, since the elements may never arrive.
fn capacity(n: u64) -> usize {
    n.min(4096) as usize
}

/// Reads the value of type `rdb_type` (whose type byte was at `type_at`).
pub(crate) fn read_value<R: BufRead>(input: &mut Input<R>, rdb_type: u8, type_at: u64) -> Result<Option<RdbValue>, RdbError> {
    let start = input.offset();
    let value = match rdb_type {
        TYPE_STRING => return Ok(Some(RdbValue::String(input.string()?))),
        TYPE_LIST => {
            let n = input.len()?;
            let mut list = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                list.push(input.string()?);
            }
            RdbValue::List(list)
        }
        TYPE_SET => {
            let n = input.len()?;
            let mut set = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                set.push(input.string()?);
            }
            RdbValue::Set(set)
        }
        TYPE_ZSET | TYPE_ZSET_2 => {
            let n = input.len()?;
            let mut zset = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                let member = input.string()?;
                let at = input.offset();
                let score = if rdb_type == TYPE_ZSET_2 { input.binary_double()? } else { input.text_double()? };
                if score.is_nan() {
                    return Err(RdbError::corrupt(at, "sorted set score is NaN").redis_says("Zset with NAN score detected"));
                }
                zset.push((member, score));
            }
            RdbValue::ZSet(zset)
        }
        TYPE_HASH => {
            let n = input.len()?;
            let mut hash = Vec::with_capacity(capacity(n));
            for _ in 0..n {
                let field = input.string()?;
                hash.push((field, input.string()?));
            }
            RdbValue::Hash(hash)
        }
        TYPE_LIST_QUICKLIST | TYPE_LIST_QUICKLIST_2 => {
            let nodes = input.len()?;
            let mut list = Vec::new();
            for _ in 0..nodes {
                let container_at = input.offset();
                let container = if rdb_type == TYPE_LIST_QUICKLIST_2 { input.len()? } else { CONTAINER_PACKED };
                let (node, at) = input.blob()?;
                if node.is_empty() {
                    return Err(RdbError::corrupt(at, "empty quicklist node"));
                }
                match container {
                    CONTAINER_PLAIN => list.push(node),
                    CONTAINER_PACKED if rdb_type == TYPE_LIST_QUICKLIST_2 => {
                        let node = listpack::decode(&node, at).map_err(|e| e.redis_says("Listpack integrity check failed."))?;
                        list.extend(node.into_iter().map(Elem::to_vec));
                    }
                    CONTAINER_PACKED => {
                        let node = ziplist::decode(&node, at).map_err(|e| e.redis_says("Ziplist integrity check failed."))?;
                        list.extend(node.into_iter().map(Elem::to_vec));
                    }
                    other => {
                        let e = RdbError::corrupt(container_at, format!("unknown quicklist container {other}"));
                        return Err(e.redis_says("Quicklist integrity check failed."));
                    }
                }
            }
            RdbValue::List(list)
        }
        TYPE_LIST_ZIPLIST => {
            let (blob, at) = input.blob()?;
            let list = ziplist::decode(&blob, at).map_err(|e| e.redis_says("List ziplist integrity check failed."))?;
            RdbValue::List(list.into_iter().map(Elem::to_vec).collect())
        }
        TYPE_SET_INTSET => {
            let (blob, at) = input.blob()?;
            let set = intset::decode(&blob, at).map_err(|e| e.redis_says("Intset integrity check failed."))?;
            RdbValue::Set(set.into_iter().map(crate::num::i64_bytes).collect())
        }
        TYPE_HASH_ZIPMAP => {
            let (blob, at) = input.blob()?;
            let hash = zipmap::decode(&blob, at).map_err(|e| e.redis_says("Zipmap integrity check failed."))?;
            RdbValue::Hash(hash.into_iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect())
        }
        TYPE_HASH_ZIPLIST | TYPE_HASH_LISTPACK => {
            let (blob, at) = input.blob()?;
            let (elems, phrase) = match rdb_type {
                TYPE_HASH_LISTPACK => (listpack::decode(&blob, at), "Hash listpack integrity check failed."),
                _ => (ziplist::decode(&blob, at), "Hash ziplist integrity check failed."),
            };
            let elems = elems.map_err(|e| e.redis_says(phrase))?;
            let hash = pairs(&elems, at).map_err(|e| e.redis_says(phrase))?.map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            RdbValue::Hash(hash)
        }
        TYPE_ZSET_ZIPLIST | TYPE_ZSET_LISTPACK => {
            let (blob, at) = input.blob()?;
            let (elems, phrase) = match rdb_type {
                TYPE_ZSET_LISTPACK => (listpack::decode(&blob, at), "Zset listpack integrity check failed."),
                _ => (ziplist::decode(&blob, at), "Zset ziplist integrity check failed."),
            };
            let elems = elems.map_err(|e| e.redis_says(phrase))?;
            let mut zset = Vec::with_capacity(elems.len() / 2);
            for (member, score) in pairs(&elems, at).map_err(|e| e.redis_says(phrase))? {
                let score = score.to_f64().ok_or_else(|| RdbError::corrupt(at, "sorted set score is not a number").redis_says(phrase))?;
                if score.is_nan() {
                    return Err(RdbError::corrupt(at, "sorted set score is NaN").redis_says("Zset with NAN score detected"));
                }
                zset.push((member.to_vec(), score));
            }
            RdbValue::ZSet(zset)
        }
        TYPE_STREAM_LISTPACKS | TYPE_STREAM_LISTPACKS_2 => {
            // An empty stream is a value (XTRIM can leave one), kept.
            return Ok(Some(RdbValue::Stream(Box::new(crate::stream::read(input, rdb_type == TYPE_STREAM_LISTPACKS_2)?))));
        }
        TYPE_MODULE | TYPE_MODULE_2 => {
            return Err(RdbError::Unsupported { rdb_type, offset: type_at });
        }
        other => return Err(RdbError::corrupt(type_at, format!("unknown value type {other}"))),
    };
    check_unique(&value, start)?;
    Ok((!is_empty(&value)).then_some(value))
}

/// Entries taken two at a time (field and value, member and score).
fn pairs<'a>(elems: &'a [Elem<'a>], at: u64) -> Result<impl Iterator<Item = (Elem<'a>, Elem<'a>)> + 'a, RdbError> {
    if elems.len() & 1 == 1 {
        return Err(RdbError::corrupt(at, "odd number of entries in a pair encoding"));
    }
    Ok(elems.chunks_exact(2).map(|p| (p[0], p[1])))
}

fn is_empty(value: &RdbValue) -> bool {
    match value {
        RdbValue::String(_) => false,
        RdbValue::List(v) | RdbValue::Set(v) => v.is_empty(),
        RdbValue::Hash(v) => v.is_empty(),
        RdbValue::ZSet(v) => v.is_empty(),
        RdbValue::Stream(_) => false,
    }
}

/// Refuses duplicate set members, hash fields and sorted set members, as
/// Redis does ("Duplicate ... detected").
fn check_unique(value: &RdbValue, at: u64) -> Result<(), RdbError> {
    fn unique<'a>(mut keys: impl ExactSizeIterator<Item = &'a [u8]>, at: u64, phrase: &str) -> Result<(), RdbError> {
        let mut seen = HashSet::with_capacity(keys.len());
        if keys.all(|k| seen.insert(k)) {
            Ok(())
        } else {
            Err(RdbError::corrupt(at, phrase))
        }
    }
    match value {
        RdbValue::String(_) | RdbValue::List(_) | RdbValue::Stream(_) => Ok(()),
        RdbValue::Set(v) => unique(v.iter().map(Vec::as_slice), at, "Duplicate set members detected"),
        RdbValue::Hash(v) => unique(v.iter().map(|(f, _)| f.as_slice()), at, "Duplicate hash fields detected"),
        RdbValue::ZSet(v) => unique(v.iter().map(|(m, _)| m.as_slice()), at, "Duplicate zset fields detected"),
    }
}
