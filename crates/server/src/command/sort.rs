//! SORT and SORT_RO over lists, sets and sorted sets, as Redis 7.0's
//! `sort.c` does them: numeric or ALPHA order with a lexicographic
//! tie-break (so results are deterministic), BY and GET patterns (`*`
//! replaced by the element, `->field` to read a hash field, `#` for the
//! element itself), LIMIT, and STORE into a list.
//!
//! BY and GET name keys that only the arguments' contents reveal, anywhere
//! in the keyspace, so SORT locks every shard (`ALL_SHARDS`).

use keel_engine::value::{List, Value};
use keel_engine::Db;
use smallvec::SmallVec;

use super::parse::eq;
use super::keyspec::*;
use super::{acl, cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("sort", -2, WRITE | DENYOOM | ALL_SHARDS, Keys::Custom(sort_keys), "generic", sort)
        .doc("Sort the elements in a list, set or sorted set", "1.0.0")
        .acl(SORTED_TYPES)
        .specs(&[
            key_at(1, RO | ACCESS),
            BY_GET_KEYS,
            ks(OW | UPDATE, Begin::Unknown, Find::Unknown).notes(
                "For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhere in the argument array",
            ),
        ]),
    cmd("sort_ro", -2, READONLY | ALL_SHARDS, Keys::Custom(sort_ro_keys), "generic", sort_ro)
        .doc("Sort the elements in a list, set or sorted set. Read-only variant of SORT.", "7.0.0")
        .acl(SORTED_TYPES)
        .specs(&[key_at(1, RO | ACCESS), BY_GET_KEYS]),
];

const SORTED_TYPES: u32 = acl::SET | acl::SORTEDSET | acl::LIST | acl::DANGEROUS;
const BY_GET_KEYS: KeySpec = ks(RO | ACCESS, Begin::Unknown, Find::Unknown).notes(
    "For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of the key we sort",
);

/// The sorted key, and the STORE destination when there is one (the last
/// STORE wins, as in Redis).
fn sort_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    let mut keys: SmallVec<[usize; 4]> = SmallVec::from_slice(&[1]);
    let mut store = None;
    let mut i = 2;
    while i < argv.len() {
        let left = argv.len() - i - 1;
        if eq(argv[i], "store") && left >= 1 {
            store = Some(i + 1);
        }
        i += if eq(argv[i], "limit") && left >= 2 {
            3
        } else if ["store", "by", "get"].iter().any(|w| eq(argv[i], w)) && left >= 1 {
            2
        } else {
            1
        };
    }
    keys.extend(store);
    keys
}

fn sort_ro_keys(_argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    SmallVec::from_slice(&[1])
}

fn sort(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    sort_generic(ctx, argv, false)
}

fn sort_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    sort_generic(ctx, argv, true)
}

struct Options<'a> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    store: Option<&'a [u8]>,
    by: Option<&'a [u8]>,
    /// BY with a pattern that has no `*`: keep the native order.
    dont_sort: bool,
    get: Vec<&'a [u8]>,
}

/// SORT's options. `full_read`: the user may read every key, which BY
/// (with a pattern) and GET need, as they read keys the command does not
/// name (Redis's `user_has_full_key_access`).
fn parse_options<'a>(argv: &[&'a [u8]], readonly: bool, full_read: bool) -> Result<Options<'a>, CmdError> {
    let mut o = Options { desc: false, alpha: false, limit: None, store: None, by: None, dont_sort: false, get: Vec::new() };
    let mut j = 2;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let arg = argv[j];
        if eq(arg, "asc") {
            o.desc = false;
        } else if eq(arg, "desc") {
            o.desc = true;
        } else if eq(arg, "alpha") {
            o.alpha = true;
        } else if eq(arg, "limit") && left >= 2 {
            o.limit = Some((super::parse::i64_arg(argv[j + 1])?, super::parse::i64_arg(argv[j + 2])?));
            j += 2;
        } else if !readonly && eq(arg, "store") && left >= 1 {
            o.store = Some(argv[j + 1]);
            j += 1;
        } else if eq(arg, "by") && left >= 1 {
            o.by = Some(argv[j + 1]);
            o.dont_sort = !argv[j + 1].contains(&b'*');
            if !o.dont_sort && !full_read {
                return Err(CmdError::other("ERR BY option of SORT denied due to insufficient ACL permissions."));
            }
            j += 1;
        } else if eq(arg, "get") && left >= 1 {
            if !full_read {
                return Err(CmdError::other("ERR GET option of SORT denied due to insufficient ACL permissions."));
            }
            o.get.push(argv[j + 1]);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// One element being sorted, with its weight.
struct Item {
    element: Vec<u8>,
    score: f64,
    /// The BY value under ALPHA (None: the weight key is missing).
    by: Option<Vec<u8>>,
}

fn sort_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], readonly: bool) -> CmdResult {
    let full_read = ctx.client.user.as_ref().is_none_or(|user| {
        user.unrestricted() || {
            let (index, spec) = super::table().lookup(argv[0]).expect("SORT is in the table");
            user.rules().check_with_all_keys(index, spec, argv, super::keyspec::ACCESS)
        }
    });
    let mut o = parse_options(argv, readonly, full_read)?;
    let now = ctx.now_ms;
    let db = ctx.dbs.of(argv[1]);
    let entry = db.get(argv[1], now);
    ctx.stats.hit(entry.is_some());
    let value = entry.map(|e| &e.value);
    if matches!(value, Some(Value::Str(_)) | Some(Value::Hash(_)) | Some(Value::Stream(_))) {
        return Err(CmdError::WrongType);
    }
    // A set has no native order: with STORE, or in a script, its result
    // must not depend on the table's layout, so sort it, as Redis does.
    if o.dont_sort && matches!(value, Some(Value::Set(_))) && (o.store.is_some() || ctx.in_script) {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    let len = value.map_or(0, Value::element_count) as i64;
    let (limit_start, limit_count) = o.limit.unwrap_or((0, -1));
    let mut start = limit_start.clamp(0, len);
    let count = limit_count.clamp(-1, len);
    let mut end = if count < 0 { len - 1 } else { start + count - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    end = end.min(len - 1);

    // Lists and sorted sets in native order: only the range is loaded.
    let ordered = matches!(value, Some(Value::List(_)) | Some(Value::ZSet(_)));
    let elements: Vec<Vec<u8>> = match value {
        None => Vec::new(),
        Some(v) if ordered && o.dont_sort => {
            let range = if end >= start { native_range(v, start as usize, (end - start + 1) as usize, o.desc) } else { Vec::new() };
            end -= start;
            start = 0;
            range
        }
        Some(v) => all_elements(v),
    };
    let mut items: Vec<Item> = elements.into_iter().map(|element| Item { element, score: 0.0, by: None }).collect();

    if !o.dont_sort {
        let mut conversion_error = false;
        for item in items.iter_mut() {
            let by = match o.by {
                Some(pattern) => match lookup_by_pattern(ctx, pattern, &item.element) {
                    Some(v) => v,
                    None => continue,
                },
                None => item.element.clone(),
            };
            if o.alpha {
                if o.by.is_some() {
                    item.by = Some(by);
                }
            } else {
                match strtod(&by) {
                    Some(score) => item.score = score,
                    None => conversion_error = true,
                }
            }
        }
        if conversion_error {
            return Err(CmdError::other("ERR One or more scores can't be converted into double"));
        }
        let (alpha, by_pattern, desc) = (o.alpha, o.by.is_some(), o.desc);
        items.sort_by(|a, b| {
            let ord = if !alpha {
                a.score.partial_cmp(&b.score).unwrap_or(std::cmp::Ordering::Equal).then_with(|| a.element.cmp(&b.element))
            } else if by_pattern {
                // A missing weight sorts first.
                a.by.cmp(&b.by)
            } else {
                a.element.cmp(&b.element)
            };
            if desc {
                ord.reverse()
            } else {
                ord
            }
        });
    }

    let selected: &[Item] = if end >= start { &items[start as usize..=end as usize] } else { &[] };
    let mut output: Vec<Option<Vec<u8>>> = Vec::new();
    for item in selected {
        if o.get.is_empty() {
            output.push(Some(item.element.clone()));
        }
        for pattern in &o.get {
            output.push(lookup_by_pattern(ctx, pattern, &item.element));
        }
    }
    match o.store {
        None => {
            ctx.out.array(output.len());
            for value in &output {
                match value {
                    Some(v) => ctx.out.bulk(v),
                    None => ctx.out.null(),
                }
            }
        }
        Some(dest) => {
            let lru = ctx.lru_s;
            let limits = ctx.encoding_limits();
            let db = ctx.dbs.of(dest);
            if output.is_empty() {
                if db.remove(dest).is_some() {
                    ctx.wrote(1);
                    ctx.notify(notify::GENERIC, "del", dest);
                }
            } else {
                let mut list = List::new(limits.list_max_listpack_size);
                for value in &output {
                    list.push_back(value.as_deref().unwrap_or_default());
                }
                db.set_key(dest, Value::List(list), now, lru);
                ctx.wrote(output.len() as u64);
                ctx.notify(notify::LIST, "sortstore", dest);
            }
            ctx.out.int(output.len() as i64);
        }
    }
    Ok(())
}

/// Redis's `lookupKeyByPattern`: `#` is the element itself; otherwise the
/// first `*` is replaced by the element and the key read as a string, or
/// as a hash field after `->`. A pattern without `*` names nothing.
fn lookup_by_pattern(ctx: &mut Ctx<'_>, pattern: &[u8], element: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(element.to_vec());
    }
    let star = pattern.iter().position(|&b| b == b'*')?;
    let (key_pattern, field) = match find(&pattern[star + 1..], b"->") {
        Some(at) if star + 1 + at + 2 < pattern.len() => {
            (&pattern[..star + 1 + at], Some(&pattern[star + 1 + at + 2..]))
        }
        _ => (pattern, None),
    };
    let mut key = Vec::with_capacity(key_pattern.len() + element.len());
    key.extend_from_slice(&key_pattern[..star]);
    key.extend_from_slice(element);
    key.extend_from_slice(&key_pattern[star + 1..]);
    let now = ctx.now_ms;
    let db: &mut Db = ctx.dbs.of(&key);
    let entry = db.get(&key, now)?;
    match (&entry.value, field) {
        (Value::Str(s), None) => Some(s.as_bytes(&mut itoa::Buffer::new()).to_vec()),
        (Value::Hash(h), Some(field)) => h.get(field).map(|v| v.to_vec()),
        _ => None,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// C's `strtod` as SORT uses it: leading spaces allowed, the whole rest
/// must be a number, NaN and overflow refused; the empty string is 0.
fn strtod(bytes: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(bytes).ok()?.trim_start();
    if text.is_empty() {
        return Some(0.0);
    }
    let lower = text.to_ascii_lowercase();
    let value = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => return Some(f64::INFINITY),
        "-inf" | "-infinity" => return Some(f64::NEG_INFINITY),
        t if t.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c)) => t.parse::<f64>().ok()?,
        _ => return None,
    };
    // A finite literal that overflows is strtod's ERANGE.
    value.is_finite().then_some(value)
}

/// Every element of a list, set or sorted set (the order matters only
/// for lists and sorted sets in native order, handled by `native_range`).
fn all_elements(value: &Value) -> Vec<Vec<u8>> {
    match value {
        Value::List(l) => l.iter().map(<[u8]>::to_vec).collect(),
        Value::Set(s) => s.iter().map(|m| m.to_vec()).collect(),
        Value::ZSet(z) => z.iter().map(|(m, _)| m.to_vec()).collect(),
        Value::Str(_) | Value::Hash(_) | Value::Stream(_) => Vec::new(),
    }
}

/// `count` elements from rank `start` in native order (from the end when
/// `desc`).
fn native_range(value: &Value, start: usize, count: usize, desc: bool) -> Vec<Vec<u8>> {
    match (value, desc) {
        (Value::List(l), false) => l.iter_from(start).take(count).map(<[u8]>::to_vec).collect(),
        (Value::List(l), true) => l.iter().rev().skip(start).take(count).map(<[u8]>::to_vec).collect(),
        (Value::ZSet(z), false) => z.range(start..start + count).map(|(m, _)| m.to_vec()).collect(),
        (Value::ZSet(z), true) => {
            let len = z.len();
            let hi = len.saturating_sub(start);
            z.range(hi.saturating_sub(count)..hi).rev().map(|(m, _)| m.to_vec()).collect()
        }
        _ => Vec::new(),
    }
}
