//! Sorted sets: a listpack of (member, score) pairs in score order while
//! small, a skiplist with a member index past `zset-max-listpack-*`.
//!
//! # Encodings
//!
//! - `listpack`: entries alternate member and score, sorted by (score,
//!   member). The score is kept as text, as Redis keeps it: an integer when
//!   it is one (`-0` included, which thereby reads back as `0`, as in
//!   Redis), else a shortest round-trip decimal. Every operation is a
//!   linear scan over at most `zset-max-listpack-entries` pairs.
//! - `skiplist`: Redis's `zskiplist` (Pugh's skiplist with a span per link,
//!   so that ranks cost O(log N)), plus a [`Dict`] from member to score for
//!   O(1) ZSCORE and membership. Unlike Redis's, every level is doubly
//!   linked (see below).
//!
//! Conversion is one way, listpack to skiplist, when an insertion would
//! pass either limit (Redis's `zsetAdd`); a set built whole (the STORE
//! commands) gets the encoding its final size calls for.
//!
//! # The skiplist's memory layout
//!
//! Nodes live in an arena of fixed-size chunks, linked by `u32` indices
//! (the header is index 0, which doubles as "no link"): no allocation per
//! insert beyond the member's bytes, and growth never copies the nodes.
//! Levels are a `SmallVec` of two inline (94% of nodes have at most two
//! levels at p = 1/4). Removal moves the arena's last node into the hole,
//! so memory shrinks back with the set and the arena never has holes; the
//! back link every level keeps (4 bytes a level, where Redis keeps one
//! 8-byte pointer a node) is what re-points the links to the moved node in
//! O(its height), without a second descent. The node and the dict key each
//! hold the member as a [`CompactBytes`]: inline up to 15 bytes, so a short
//! member costs no allocation at all (Redis shares one sds between the two,
//! which costs an allocation and two pointers).
//!
//! # Ranks as the common currency
//!
//! Range queries (by score, by lex) answer a range of ranks, `lo..hi`;
//! [`ZSet::range`] iterates any rank range in either direction and
//! [`ZSet::remove_ranks`] deletes one. Both encodings implement the three
//! primitives, and every command is built on them.

use std::fmt;
use std::ops::Range;

use smallvec::{smallvec, SmallVec};

use crate::compact::CompactBytes;
use crate::dict::Dict;
use crate::listpack::Listpack;
use crate::value::{parse_canonical_i64, EncodingLimits};

/// Redis refuses to grow a listpack past 1 GiB (`lpSafeToAdd`).
const LISTPACK_MAX_BYTES: usize = 1 << 30;

/// A score interval: `min`/`max` with either bound exclusive (`(1.5`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreRange {
    pub min: f64,
    pub max: f64,
    pub min_ex: bool,
    pub max_ex: bool,
}

impl ScoreRange {
    pub fn above_min(&self, score: f64) -> bool {
        if self.min_ex {
            score > self.min
        } else {
            score >= self.min
        }
    }

    pub fn below_max(&self, score: f64) -> bool {
        if self.max_ex {
            score < self.max
        } else {
            score <= self.max
        }
    }
}

/// One end of a lex range: `-`, `+`, `[member` or `(member`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LexBound<'a> {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    Incl(&'a [u8]),
    Excl(&'a [u8]),
}

impl LexBound<'_> {
    /// Orders `member` against the bound's value (`Min` < all < `Max`).
    fn cmp_member(&self, member: &[u8]) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        match self {
            LexBound::Min => Ordering::Greater,
            LexBound::Max => Ordering::Less,
            LexBound::Incl(v) | LexBound::Excl(v) => member.cmp(v),
        }
    }

    fn exclusive(&self) -> bool {
        !matches!(self, LexBound::Incl(_))
    }

    /// Rank of the bound among bounds: `Min` lowest, `Max` highest.
    fn cmp_bound(&self, other: &LexBound<'_>) -> std::cmp::Ordering {
        fn key<'b>(b: &LexBound<'b>) -> (u8, &'b [u8]) {
            match *b {
                LexBound::Min => (0, b""),
                LexBound::Incl(v) | LexBound::Excl(v) => (1, v),
                LexBound::Max => (2, b""),
            }
        }
        key(self).cmp(&key(other))
    }
}

/// A lex interval, as ZRANGEBYLEX takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LexRange<'a> {
    pub min: LexBound<'a>,
    pub max: LexBound<'a>,
}

impl LexRange<'_> {
    pub fn above_min(&self, member: &[u8]) -> bool {
        let c = self.min.cmp_member(member);
        if self.min.exclusive() {
            c.is_gt()
        } else {
            c.is_ge()
        }
    }

    pub fn below_max(&self, member: &[u8]) -> bool {
        let c = self.max.cmp_member(member);
        if self.max.exclusive() {
            c.is_lt()
        } else {
            c.is_le()
        }
    }

    /// Ranges that hold nothing whatever the set (`zslIsInLexRange`).
    fn is_void(&self) -> bool {
        let c = self.min.cmp_bound(&self.max);
        c.is_gt() || (c.is_eq() && (self.min.exclusive() || self.max.exclusive()))
    }
}

/// ZADD's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddFlags {
    /// Only add new members.
    pub nx: bool,
    /// Only update existing members.
    pub xx: bool,
    /// Update only if the new score is greater.
    pub gt: bool,
    /// Update only if the new score is lower.
    pub lt: bool,
    /// Add the score to the current one (ZINCRBY).
    pub incr: bool,
}

/// What [`ZSet::add`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AddOutcome {
    Added(f64),
    /// The score changed to this.
    Updated(f64),
    /// The member exists with this very score already.
    Unchanged(f64),
    /// NX, XX, GT or LT ruled the change out.
    Skipped,
}

/// The score, or the result of an increment, is NaN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotANumber;

#[derive(Clone)]
pub enum ZSet {
    Listpack(Listpack),
    SkipList(Box<SkipList>),
}

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Listpack(Listpack::new())
    }
}

impl fmt::Debug for ZSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(m, s)| (String::from_utf8_lossy(m), s))).finish()
    }
}

/// Redis's `double2ll`: integers within ±2^62 are stored (and ZSCAN
/// reports them on a listpack) in integer form.
pub fn score_as_integer(score: f64) -> Option<i64> {
    const LIMIT: f64 = (i64::MAX / 2) as f64;
    if !(-LIMIT..=LIMIT).contains(&score) {
        return None;
    }
    let i = score as i64;
    (i as f64 == score).then_some(i)
}

/// The text a listpack keeps for `score`: integer form when it is one,
/// else a shortest round-trip decimal (exponent form when far from 1).
fn format_score(score: f64) -> String {
    if let Some(i) = score_as_integer(score) {
        return itoa::Buffer::new().format(i).to_string();
    }
    let a = score.abs();
    if a.is_infinite() || (1e-4..1e16).contains(&a) {
        format!("{score}")
    } else {
        format!("{score:e}")
    }
}

fn parse_score(text: &[u8]) -> f64 {
    if let Some(i) = parse_canonical_i64(text) {
        return i as f64;
    }
    std::str::from_utf8(text).ok().and_then(|s| s.parse().ok()).expect("listpack scores are written by format_score")
}

const PAIRED: &str = "a listpack zset holds member-score pairs";

/// The member entry holding `member` and its score.
fn lp_find(lp: &Listpack, member: &[u8]) -> Option<(usize, f64)> {
    let mut at = lp.first();
    while let Some(m) = at {
        let s = lp.next(m).expect(PAIRED);
        if lp.at(m) == member {
            return Some((m, parse_score(lp.at(s))));
        }
        at = lp.next(s);
    }
    None
}

/// Inserts a pair at its place in (score, member) order (`zzlInsert`).
fn lp_insert(lp: &mut Listpack, member: &[u8], score: f64) {
    let mut at = lp.first();
    while let Some(m) = at {
        let s = lp.next(m).expect(PAIRED);
        let cur = parse_score(lp.at(s));
        if cur > score || (cur == score && lp.at(m) > member) {
            break;
        }
        at = lp.next(s);
    }
    let text = format_score(score);
    lp.insert_many_at(at.unwrap_or(lp.bytes()), &[member, text.as_bytes()]);
}

/// What ZADD's flags make of one member (the common part of `zsetAdd`).
enum Step {
    Skip,
    Keep(f64),
    Update { from: f64, to: f64 },
    Insert,
}

fn decide(current: Option<f64>, score: f64, flags: AddFlags) -> Result<Step, NotANumber> {
    let Some(cur) = current else {
        return Ok(if flags.xx { Step::Skip } else { Step::Insert });
    };
    if flags.nx {
        return Ok(Step::Skip);
    }
    let new = if flags.incr { score + cur } else { score };
    if new.is_nan() {
        return Err(NotANumber);
    }
    if (flags.lt && new >= cur) || (flags.gt && new <= cur) {
        return Ok(Step::Skip);
    }
    Ok(if new == cur { Step::Keep(new) } else { Step::Update { from: cur, to: new } })
}

impl ZSet {
    /// An empty set in the encoding Redis gives a new key whose first
    /// member is `first_len` bytes long (ZADD on a missing key).
    pub fn for_first_member(limits: &EncodingLimits, first_len: usize) -> ZSet {
        if limits.zset_max_listpack_entries == 0 || first_len > limits.zset_max_listpack_value {
            ZSet::SkipList(Box::default())
        } else {
            ZSet::default()
        }
    }

    /// A set holding `items`, which must be sorted by (score, member) with
    /// distinct members: a listpack if it fits the limits, else a skiplist
    /// (`zsetConvertToListpackIfNeeded` on a STORE result).
    pub fn from_sorted<M: AsRef<[u8]>>(items: &[(M, f64)], limits: &EncodingLimits) -> ZSet {
        let fits = items.len() <= limits.zset_max_listpack_entries
            && items.iter().all(|(m, _)| m.as_ref().len() <= limits.zset_max_listpack_value)
            && items.iter().map(|(m, _)| m.as_ref().len() + 24).sum::<usize>() < LISTPACK_MAX_BYTES;
        if fits {
            let texts: Vec<String> = items.iter().map(|(_, s)| format_score(*s)).collect();
            let entries = items.iter().zip(&texts).flat_map(|((m, _), t)| [m.as_ref(), t.as_bytes()]);
            ZSet::Listpack(Listpack::from_iter(entries))
        } else {
            let mut sl = SkipList::default();
            for (m, s) in items {
                sl.insert(m.as_ref(), *s);
            }
            ZSet::SkipList(Box::new(sl))
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ZSet::Listpack(lp) => lp.len() / 2,
            ZSet::SkipList(sl) => sl.list.length,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Listpack(_) => "listpack",
            ZSet::SkipList(_) => "skiplist",
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            ZSet::Listpack(lp) => lp.heap_size(),
            ZSet::SkipList(sl) => std::mem::size_of::<SkipList>() + sl.list.nodes.bytes() + sl.dict.memory_usage(),
        }
    }

    /// The score of `member`: O(1) on a skiplist.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Listpack(lp) => lp_find(lp, member).map(|(_, s)| s),
            ZSet::SkipList(sl) => sl.dict.get(member).copied(),
        }
    }

    /// The 0-based rank of `member` from the lowest score: O(log N).
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        match self {
            ZSet::Listpack(lp) => lp.iter().step_by(2).position(|m| m == member),
            ZSet::SkipList(sl) => {
                let score = *sl.dict.get(member)?;
                Some(sl.list.rank(score, member) - 1)
            }
        }
    }

    /// Redis's `zsetAdd`: adds or updates `member` as `flags` allow,
    /// converting to a skiplist first when a new member would pass the
    /// listpack limits.
    pub fn add(
        &mut self,
        member: &[u8],
        score: f64,
        flags: AddFlags,
        limits: &EncodingLimits,
    ) -> Result<AddOutcome, NotANumber> {
        if score.is_nan() {
            return Err(NotANumber);
        }
        if let ZSet::Listpack(lp) = self {
            let found = lp_find(lp, member);
            match decide(found.map(|(_, s)| s), score, flags)? {
                Step::Skip => return Ok(AddOutcome::Skipped),
                Step::Keep(s) => return Ok(AddOutcome::Unchanged(s)),
                Step::Update { to, .. } => {
                    let (at, _) = found.expect("an update is of a member found");
                    lp.remove_at(at, 2);
                    lp_insert(lp, member, to);
                    return Ok(AddOutcome::Updated(to));
                }
                Step::Insert => {
                    let fits = lp.len() / 2 < limits.zset_max_listpack_entries
                        && member.len() <= limits.zset_max_listpack_value
                        && lp.bytes() + Listpack::entry_size(member) + 32 < LISTPACK_MAX_BYTES;
                    if fits {
                        lp_insert(lp, member, score);
                        return Ok(AddOutcome::Added(score));
                    }
                    self.convert_to_skiplist();
                }
            }
        }
        let ZSet::SkipList(sl) = self else { unreachable!("converted above") };
        match decide(sl.dict.get(member).copied(), score, flags)? {
            Step::Skip => Ok(AddOutcome::Skipped),
            Step::Keep(s) => Ok(AddOutcome::Unchanged(s)),
            Step::Update { from, to } => {
                sl.list.update_score(from, member, to);
                *sl.dict.get_mut(member).expect("updated member is indexed") = to;
                Ok(AddOutcome::Updated(to))
            }
            Step::Insert => {
                sl.insert(member, score);
                Ok(AddOutcome::Added(score))
            }
        }
    }

    fn convert_to_skiplist(&mut self) {
        if let ZSet::Listpack(lp) = self {
            let mut sl = SkipList::default();
            let mut it = lp.iter();
            while let (Some(m), Some(s)) = (it.next(), it.next()) {
                sl.insert(m, parse_score(s));
            }
            *self = ZSet::SkipList(Box::new(sl));
        }
    }

    /// Removes `member`; true if it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self {
            ZSet::Listpack(lp) => match lp_find(lp, member) {
                Some((at, _)) => {
                    lp.remove_at(at, 2);
                    true
                }
                None => false,
            },
            ZSet::SkipList(sl) => sl.remove(member),
        }
    }

    /// Every (member, score) from the lowest score up (ties by member);
    /// double-ended, so `.rev()` walks from the highest.
    pub fn iter(&self) -> Iter<'_> {
        self.range(0..self.len())
    }

    /// The members of ranks `ranks` (0-based, clamped to the set), in
    /// either direction: O(log N) to position, O(1) per step on a skiplist.
    pub fn range(&self, ranks: Range<usize>) -> Iter<'_> {
        let len = self.len();
        let (lo, hi) = (ranks.start.min(len), ranks.end.min(len));
        let left = hi.saturating_sub(lo);
        match self {
            ZSet::Listpack(lp) => {
                let seek = |rank: usize| {
                    // Walk from whichever end is nearer.
                    let index = if rank < len / 2 { 2 * rank as isize } else { 2 * rank as isize - 2 * len as isize };
                    lp.seek(index).unwrap_or(0)
                };
                let (front, back) = if left == 0 { (0, 0) } else { (seek(lo), seek(hi - 1)) };
                Iter { kind: IterKind::Listpack { lp, front, back }, left }
            }
            ZSet::SkipList(sl) => {
                let list = &sl.list;
                let (front, back) = if left == 0 {
                    (HEAD, HEAD)
                } else {
                    let front = if lo == 0 { list.fwd(HEAD, 0) } else { list.by_rank(lo + 1) };
                    let back = if hi == len { list.tail } else { list.by_rank(hi) };
                    (front, back)
                };
                Iter { kind: IterKind::SkipList { list, front, back }, left }
            }
        }
    }

    /// The ranks whose scores lie in `range`: O(log N) on a skiplist.
    pub fn score_ranks(&self, range: &ScoreRange) -> Range<usize> {
        let lo = self.count_prefix(|_, s| !range.above_min(s));
        let hi = self.count_prefix(|_, s| range.below_max(s));
        lo..hi.max(lo)
    }

    /// The ranks whose members lie in `range`, for a set whose members
    /// all have the same score (otherwise the answer is Redis's: defined by
    /// its scan in the given direction on a listpack, by the descent on a
    /// skiplist). `rev`: the range as a reverse scan from the top finds it.
    pub fn lex_ranks(&self, range: &LexRange<'_>, rev: bool) -> Range<usize> {
        if range.is_void() || self.is_empty() {
            return 0..0;
        }
        match self {
            ZSet::Listpack(lp) => {
                // `zzlFirstInLexRange`/`zzlLastInLexRange`, then a run.
                let members: Vec<&[u8]> = lp.iter().step_by(2).collect();
                let (first, last) = (members[0], members[members.len() - 1]);
                if !range.above_min(last) || !range.below_max(first) {
                    return 0..0;
                }
                if rev {
                    let Some(top) = members.iter().rposition(|m| range.below_max(m)) else { return 0..0 };
                    let run = members[..=top].iter().rev().take_while(|m| range.above_min(m)).count();
                    top + 1 - run..top + 1
                } else {
                    let Some(start) = members.iter().position(|m| range.above_min(m)) else { return 0..0 };
                    let run = members[start..].iter().take_while(|m| range.below_max(m)).count();
                    start..start + run
                }
            }
            ZSet::SkipList(_) => {
                let lo = self.count_prefix(|m, _| !range.above_min(m));
                let hi = self.count_prefix(|m, _| range.below_max(m));
                lo..hi.max(lo)
            }
        }
    }

    /// How many members from the lowest satisfy `pred`, which must hold
    /// for a prefix of the order.
    fn count_prefix(&self, pred: impl Fn(&[u8], f64) -> bool) -> usize {
        match self {
            ZSet::Listpack(_) => self.iter().take_while(|&(m, s)| pred(m, s)).count(),
            ZSet::SkipList(sl) => sl.list.count_while(|n| pred(&n.member, n.score)),
        }
    }

    /// Removes the members of ranks `ranks`; returns how many went.
    /// O(log N + M) on a skiplist.
    pub fn remove_ranks(&mut self, ranks: Range<usize>) -> usize {
        let len = self.len();
        let (lo, hi) = (ranks.start.min(len), ranks.end.min(len));
        if lo >= hi {
            return 0;
        }
        match self {
            ZSet::Listpack(lp) => lp.remove_range(2 * lo, 2 * (hi - lo)),
            ZSet::SkipList(sl) => sl.remove_ranks(lo, hi),
        }
        hi - lo
    }

    /// A uniformly random member: O(1) on a skiplist, O(N) on a listpack.
    pub fn random_entry<R: rand::Rng>(&self, rng: &mut R) -> Option<(&[u8], f64)> {
        match self {
            ZSet::Listpack(_) => {
                let len = self.len();
                (len > 0).then(|| self.range(0..len).nth(rng.gen_range(0..len))).flatten()
            }
            ZSet::SkipList(sl) => sl.dict.random_entry(rng).map(|(m, s)| (&m[..], *s)),
        }
    }

    /// One step of ZSCAN: on a skiplist, Redis's reverse-binary cursor over
    /// the member index (see `Dict::scan`); a listpack is returned whole,
    /// with cursor 0.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], f64)) -> u64 {
        match self {
            ZSet::Listpack(_) => {
                self.iter().for_each(|(m, s)| f(m, s));
                0
            }
            ZSet::SkipList(sl) => sl.dict.scan(cursor, |m, s| f(m, *s)),
        }
    }
}

/// Iterator over (member, score) pairs of a rank range.
pub struct Iter<'a> {
    kind: IterKind<'a>,
    left: usize,
}

enum IterKind<'a> {
    /// Offsets of the next members at either end.
    Listpack {
        lp: &'a Listpack,
        front: usize,
        back: usize,
    },
    SkipList {
        list: &'a Zsl,
        front: u32,
        back: u32,
    },
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let more = self.left > 0;
        match &mut self.kind {
            IterKind::Listpack { lp, front, .. } => {
                let lp: &'a Listpack = lp;
                let m = *front;
                let s = lp.next(m).expect(PAIRED);
                if more {
                    *front = lp.next(s).expect(PAIRED);
                }
                Some((lp.at(m), parse_score(lp.at(s))))
            }
            IterKind::SkipList { list, front, .. } => {
                let list: &'a Zsl = list;
                let n = list.nodes.get(*front);
                *front = n.levels[0].forward;
                Some((&n.member, n.score))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<'a> DoubleEndedIterator for Iter<'a> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let more = self.left > 0;
        match &mut self.kind {
            IterKind::Listpack { lp, back, .. } => {
                let lp: &'a Listpack = lp;
                let m = *back;
                let s = lp.next(m).expect(PAIRED);
                if more {
                    *back = lp.prev(lp.prev(m).expect(PAIRED)).expect(PAIRED);
                }
                Some((lp.at(m), parse_score(lp.at(s))))
            }
            IterKind::SkipList { list, back, .. } => {
                let list: &'a Zsl = list;
                let n = list.nodes.get(*back);
                *back = n.levels[0].back;
                Some((&n.member, n.score))
            }
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

// ---------------------------------------------------------------------------
// The skiplist encoding.

/// The skiplist encoding: the ordered list and the member index.
#[derive(Clone, Default)]
pub struct SkipList {
    list: Zsl,
    dict: Dict<CompactBytes, f64>,
}

impl SkipList {
    fn insert(&mut self, member: &[u8], score: f64) {
        let member = CompactBytes::from(member);
        self.list.insert(member.clone(), score);
        self.dict.insert(member, score);
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.dict.remove(member) {
            Some(score) => {
                self.list.delete(score, member);
                true
            }
            None => false,
        }
    }

    /// Removes ranks `lo..hi` (0-based), `zslDeleteRangeByRank`.
    fn remove_ranks(&mut self, lo: usize, hi: usize) {
        let removed = self.list.unlink_ranks(lo, hi);
        for &x in &removed {
            self.dict.remove(&self.list.nodes.get(x).member[..]);
        }
        self.list.free_slots(removed);
    }
}

/// Highest level a node may have (Redis's `ZSKIPLIST_MAXLEVEL`).
const MAX_LEVEL: usize = 32;

/// The header's index; as a link it means "none".
const HEAD: u32 = 0;

#[derive(Debug, Clone, Copy, Default)]
struct Level {
    forward: u32,
    /// Nodes crossed by following `forward` (for a last link, the nodes
    /// after this one, as in Redis).
    span: u32,
    /// The previous node at this level; `HEAD` for the first.
    back: u32,
}

#[derive(Clone)]
struct Node {
    member: CompactBytes,
    score: f64,
    levels: SmallVec<[Level; 2]>,
}

impl Node {
    /// Whether this node sorts before (score, member).
    fn before(&self, score: f64, member: &[u8]) -> bool {
        self.score < score || (self.score == score && &self.member[..] < member)
    }

    /// Heap bytes the node owns besides its slot (for memory accounting).
    fn heap(&self) -> usize {
        let levels = if self.levels.spilled() { self.levels.capacity() * std::mem::size_of::<Level>() } else { 0 };
        // The dict's copy of the member costs as much again.
        2 * self.member.heap_bytes() + levels
    }
}

/// Arena chunk size in nodes: 64 nodes' worth of bytes would be too small
/// to matter; 1024 nodes (56 KiB) keeps a chunk allocation cheap.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Dense node storage in fixed-size chunks (see the module doc).
#[derive(Clone, Default)]
struct Arena {
    chunks: Vec<Vec<Node>>,
    len: usize,
    /// Sum of `Node::heap` over the nodes, for O(1) memory accounting.
    heap: usize,
}

impl Arena {
    fn get(&self, i: u32) -> &Node {
        let i = i as usize;
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }

    fn get_mut(&mut self, i: u32) -> &mut Node {
        let i = i as usize;
        &mut self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }

    fn push(&mut self, node: Node) -> u32 {
        let i = self.len;
        let c = i >> CHUNK_BITS;
        if c == self.chunks.len() {
            // Only chunk 0 starts small (and doubles up to CHUNK).
            self.chunks.push(Vec::with_capacity(if c == 0 { 4 } else { CHUNK }));
        }
        self.heap += node.heap();
        self.chunks[c].push(node);
        self.len += 1;
        u32::try_from(i).expect("a sorted set holds fewer than 2^32 members")
    }

    /// Removes node `i`, moving the last node into its slot.
    fn swap_remove(&mut self, i: u32) -> Node {
        self.len -= 1;
        let last = self.chunks[self.len >> CHUNK_BITS].pop().expect("the last chunk is non-empty");
        // One spare empty chunk at most: a set hovering at a chunk
        // boundary does not allocate on every other write.
        self.chunks.truncate(self.len.div_ceil(CHUNK) + 1);
        let removed = if i as usize == self.len { last } else { std::mem::replace(self.get_mut(i), last) };
        self.heap -= removed.heap();
        removed
    }

    fn bytes(&self) -> usize {
        let slots: usize = self.chunks.iter().map(Vec::capacity).sum();
        slots * std::mem::size_of::<Node>() + self.heap
    }
}

/// Redis's `zskiplist`, over the arena.
#[derive(Clone)]
struct Zsl {
    nodes: Arena,
    /// Levels in use (at least 1).
    level: usize,
    /// Linked nodes (the arena also holds the header).
    length: usize,
    /// Last node; `HEAD` when empty.
    tail: u32,
    /// xorshift64* state for node levels.
    rng: u64,
}

impl Default for Zsl {
    fn default() -> Self {
        let mut nodes = Arena::default();
        nodes.push(Node { member: CompactBytes::default(), score: 0.0, levels: smallvec![Level::default(); MAX_LEVEL] });
        Zsl { nodes, level: 1, length: 0, tail: HEAD, rng: rand::random::<u64>() | 1 }
    }
}

impl Zsl {
    fn fwd(&self, x: u32, i: usize) -> u32 {
        self.nodes.get(x).levels[i].forward
    }

    fn span(&self, x: u32, i: usize) -> u32 {
        self.nodes.get(x).levels[i].span
    }

    fn lvl_mut(&mut self, x: u32, i: usize) -> &mut Level {
        &mut self.nodes.get_mut(x).levels[i]
    }

    /// A level in 1..=32, each further level with probability 1/4.
    fn random_level(&mut self) -> usize {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let r = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (1 + r.trailing_zeros() as usize / 2).min(MAX_LEVEL)
    }

    fn insert(&mut self, member: CompactBytes, score: f64) {
        let height = self.random_level();
        let x = self.nodes.push(Node { member, score, levels: smallvec![Level::default(); height] });
        self.link(x);
    }

    /// Links arena node `x` (unlinked, with its levels sized) at its place
    /// (`zslInsert`).
    fn link(&mut self, x: u32) {
        let mut update = [HEAD; MAX_LEVEL];
        let mut rank = [0u32; MAX_LEVEL];
        let (score, member) = (self.nodes.get(x).score, self.nodes.get(x).member.clone());
        let mut p = HEAD;
        for i in (0..self.level).rev() {
            rank[i] = if i == self.level - 1 { 0 } else { rank[i + 1] };
            loop {
                let f = self.fwd(p, i);
                if f == HEAD || !self.nodes.get(f).before(score, &member) {
                    break;
                }
                rank[i] += self.span(p, i);
                p = f;
            }
            update[i] = p;
        }
        let height = self.nodes.get(x).levels.len();
        if height > self.level {
            for i in self.level..height {
                rank[i] = 0;
                update[i] = HEAD;
                self.lvl_mut(HEAD, i).span = self.length as u32;
            }
            self.level = height;
        }
        for i in 0..height {
            let u = update[i];
            let before = self.nodes.get(u).levels[i];
            *self.lvl_mut(x, i) = Level { forward: before.forward, span: before.span - (rank[0] - rank[i]), back: u };
            let ul = self.lvl_mut(u, i);
            ul.forward = x;
            ul.span = rank[0] - rank[i] + 1;
            if before.forward != HEAD {
                self.lvl_mut(before.forward, i).back = x;
            }
        }
        for (i, &u) in update.iter().enumerate().take(self.level).skip(height) {
            self.lvl_mut(u, i).span += 1;
        }
        if self.fwd(x, 0) == HEAD {
            self.tail = x;
        }
        self.length += 1;
    }

    /// For each level, the last node before (score, member).
    fn predecessors(&self, score: f64, member: &[u8]) -> [u32; MAX_LEVEL] {
        let mut update = [HEAD; MAX_LEVEL];
        let mut p = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.fwd(p, i);
                if f == HEAD || !self.nodes.get(f).before(score, member) {
                    break;
                }
                p = f;
            }
            update[i] = p;
        }
        update
    }

    /// `zslDeleteNode`: takes `x` out of the list, leaving its slot.
    fn unlink(&mut self, x: u32, update: &[u32; MAX_LEVEL]) {
        for (i, &u) in update.iter().enumerate().take(self.level) {
            if self.fwd(u, i) == x {
                let xl = self.nodes.get(x).levels[i];
                let ul = self.lvl_mut(u, i);
                ul.span = ul.span + xl.span - 1;
                ul.forward = xl.forward;
                if xl.forward != HEAD {
                    self.lvl_mut(xl.forward, i).back = u;
                }
            } else {
                self.lvl_mut(u, i).span -= 1;
            }
        }
        if self.fwd(x, 0) == HEAD {
            self.tail = self.nodes.get(x).levels[0].back;
        }
        while self.level > 1 && self.fwd(HEAD, self.level - 1) == HEAD {
            self.level -= 1;
        }
        self.length -= 1;
    }

    /// Frees the slots of unlinked nodes, compacting the arena: the last
    /// node moves into each hole and the links to it are re-pointed.
    fn free_slots(&mut self, mut slots: Vec<u32>) {
        // Highest first: the arena's last node is then always either the
        // slot being freed or a linked node.
        slots.sort_unstable_by(|a, b| b.cmp(a));
        for x in slots {
            self.free_slot(x);
        }
    }

    /// Frees the slot of unlinked node `x`; the arena's last node, if
    /// another, must be linked: its neighbours at every level are
    /// re-pointed to the slot it moves to.
    fn free_slot(&mut self, x: u32) {
        let last = (self.nodes.len - 1) as u32;
        if x != last {
            for i in 0..self.nodes.get(last).levels.len() {
                let Level { forward, back, .. } = self.nodes.get(last).levels[i];
                debug_assert_eq!(self.fwd(back, i), last);
                self.lvl_mut(back, i).forward = x;
                if forward != HEAD {
                    self.lvl_mut(forward, i).back = x;
                }
            }
            if self.tail == last {
                self.tail = x;
            }
        }
        self.nodes.swap_remove(x);
    }

    /// Deletes the node (score, member), which must be linked.
    fn delete(&mut self, score: f64, member: &[u8]) {
        let update = self.predecessors(score, member);
        let x = self.fwd(update[0], 0);
        debug_assert!(x != HEAD && self.nodes.get(x).score == score && &self.nodes.get(x).member[..] == member);
        self.unlink(x, &update);
        self.free_slot(x);
    }

    /// `zslUpdateScore`: moves (from, member) to score `to`, in place when
    /// its neighbours allow.
    fn update_score(&mut self, from: f64, member: &[u8], to: f64) {
        let update = self.predecessors(from, member);
        let x = self.fwd(update[0], 0);
        debug_assert!(x != HEAD && &self.nodes.get(x).member[..] == member);
        let (back, next) = (self.nodes.get(x).levels[0].back, self.fwd(x, 0));
        if (back == HEAD || self.nodes.get(back).score < to) && (next == HEAD || self.nodes.get(next).score > to) {
            self.nodes.get_mut(x).score = to;
            return;
        }
        self.unlink(x, &update);
        self.nodes.get_mut(x).score = to;
        self.link(x);
    }

    /// 1-based rank of the linked node (score, member) (`zslGetRank`).
    fn rank(&self, score: f64, member: &[u8]) -> usize {
        let mut rank = 0usize;
        let mut p = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.fwd(p, i);
                if f == HEAD {
                    break;
                }
                let n = self.nodes.get(f);
                if !(n.score < score || (n.score == score && &n.member[..] <= member)) {
                    break;
                }
                rank += self.span(p, i) as usize;
                p = f;
            }
        }
        debug_assert!(p != HEAD && &self.nodes.get(p).member[..] == member);
        rank
    }

    /// The node of 1-based `rank`, which must be in 1..=length.
    fn by_rank(&self, rank: usize) -> u32 {
        let mut traversed = 0usize;
        let mut p = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.fwd(p, i);
                if f == HEAD || traversed + self.span(p, i) as usize > rank {
                    break;
                }
                traversed += self.span(p, i) as usize;
                p = f;
            }
            if traversed == rank {
                return p;
            }
        }
        unreachable!("rank {rank} out of 1..={}", self.length)
    }

    /// How many nodes from the first satisfy `pred` (true on a prefix).
    fn count_while(&self, pred: impl Fn(&Node) -> bool) -> usize {
        let mut rank = 0usize;
        let mut p = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.fwd(p, i);
                if f == HEAD || !pred(self.nodes.get(f)) {
                    break;
                }
                rank += self.span(p, i) as usize;
                p = f;
            }
        }
        rank
    }

    /// Unlinks ranks `lo..hi` (0-based, within the list) and returns their
    /// slots, still to be freed.
    fn unlink_ranks(&mut self, lo: usize, hi: usize) -> Vec<u32> {
        let mut update = [HEAD; MAX_LEVEL];
        let mut traversed = 0usize;
        let mut p = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.fwd(p, i);
                if f == HEAD || traversed + self.span(p, i) as usize > lo {
                    break;
                }
                traversed += self.span(p, i) as usize;
                p = f;
            }
            update[i] = p;
        }
        let mut removed = Vec::with_capacity(hi - lo);
        let mut x = self.fwd(p, 0);
        for _ in lo..hi {
            let next = self.fwd(x, 0);
            self.unlink(x, &update);
            removed.push(x);
            x = next;
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(entries: usize, value: usize) -> EncodingLimits {
        EncodingLimits { zset_max_listpack_entries: entries, zset_max_listpack_value: value, ..Default::default() }
    }

    fn add(z: &mut ZSet, m: &str, s: f64) -> AddOutcome {
        z.add(m.as_bytes(), s, AddFlags::default(), &EncodingLimits::default()).expect("not NaN")
    }

    fn members<'a>(it: impl Iterator<Item = (&'a [u8], f64)>) -> Vec<String> {
        it.map(|(m, _)| String::from_utf8_lossy(m).into_owned()).collect()
    }

    /// Checks every structural invariant of the skiplist: O(N).
    fn check(z: &ZSet) {
        let ZSet::SkipList(sl) = z else { return };
        let l = &sl.list;
        assert_eq!(l.nodes.len, l.length + 1, "arena is dense");
        assert_eq!(sl.dict.len(), l.length);
        // Level 0 walk: order, tail, dict agreement.
        let mut order = vec![];
        let (mut p, mut prev) = (l.fwd(HEAD, 0), HEAD);
        while p != HEAD {
            let n = l.nodes.get(p);
            assert_eq!(sl.dict.get(&n.member[..]), Some(&n.score));
            order.push(p);
            prev = p;
            p = n.levels[0].forward;
        }
        assert_eq!(l.tail, prev);
        assert_eq!(order.len(), l.length);
        for w in order.windows(2) {
            let (a, b) = (l.nodes.get(w[0]), l.nodes.get(w[1]));
            assert!(a.before(b.score, &b.member), "sorted");
        }
        // At every level: spans equal the rank distance, back links mirror
        // forward links, and every node of that height is linked.
        let rank_of = |x: u32| if x == HEAD { 0 } else { order.iter().position(|&o| o == x).expect("linked") + 1 };
        for i in 0..MAX_LEVEL {
            let mut p = HEAD;
            let mut linked = 0;
            loop {
                let lv = l.nodes.get(p).levels.get(i).copied();
                let Some(lv) = lv else { break };
                if lv.forward == HEAD {
                    break;
                }
                assert!(i < l.level, "no links above the level in use");
                assert_eq!(lv.span as usize, rank_of(lv.forward) - rank_of(p), "span at level {i}");
                assert_eq!(l.nodes.get(lv.forward).levels[i].back, p, "back link at level {i}");
                linked += 1;
                p = lv.forward;
            }
            let tall = order.iter().filter(|&&o| l.nodes.get(o).levels.len() > i).count();
            assert_eq!(linked, tall, "nodes linked at level {i}");
        }
    }

    #[test]
    fn listpack_keeps_score_order_and_converts_past_the_limits() {
        let lim = limits(3, 5);
        let mut z = ZSet::default();
        for (m, s) in [("c", 3.0), ("a", 1.0), ("b", 1.0)] {
            assert_eq!(z.add(m.as_bytes(), s, AddFlags::default(), &lim), Ok(AddOutcome::Added(s)));
        }
        assert_eq!(z.encoding(), "listpack");
        assert_eq!(members(z.iter()), ["a", "b", "c"]);
        assert_eq!(members(z.iter().rev()), ["c", "b", "a"]);
        // An update is not an insertion: no conversion.
        assert_eq!(z.add(b"a", 5.0, AddFlags::default(), &lim), Ok(AddOutcome::Updated(5.0)));
        assert_eq!(z.encoding(), "listpack");
        assert_eq!(z.add(b"d", 0.0, AddFlags::default(), &lim), Ok(AddOutcome::Added(0.0)));
        assert_eq!(z.encoding(), "skiplist");
        assert_eq!(members(z.iter()), ["d", "b", "c", "a"]);
        check(&z);
        let mut long = ZSet::default();
        long.add(b"abcdef", 1.0, AddFlags::default(), &lim).expect("not NaN");
        assert_eq!(long.encoding(), "skiplist");
    }

    #[test]
    fn scores_read_back_exactly() {
        for s in [0.1, 1.5, 1e20, -1e-300, f64::INFINITY, f64::NEG_INFINITY, 4611686018427387904.0, 1e300, 5e-324] {
            let mut z = ZSet::default();
            add(&mut z, "m", s);
            assert_eq!(z.score(b"m"), Some(s), "{s}");
        }
        // -0 is stored as the integer 0 in a listpack, as in Redis.
        let mut z = ZSet::default();
        add(&mut z, "m", -0.0);
        assert!(z.score(b"m").expect("present").is_sign_positive());
        assert_eq!(score_as_integer(-0.0), Some(0));
        assert_eq!(score_as_integer(4611686018427387904.0), Some(1 << 62));
        assert_eq!(score_as_integer(9223372036854775807.0), None);
        assert_eq!(score_as_integer(0.5), None);
    }

    #[test]
    fn add_flags_follow_zadd() {
        let mut z = ZSet::default();
        let lim = EncodingLimits::default();
        let f = |nx, xx, gt, lt, incr| AddFlags { nx, xx, gt, lt, incr };
        assert_eq!(z.add(b"a", 1.0, f(false, true, false, false, false), &lim), Ok(AddOutcome::Skipped));
        assert_eq!(z.add(b"a", 1.0, f(true, false, false, false, false), &lim), Ok(AddOutcome::Added(1.0)));
        assert_eq!(z.add(b"a", 2.0, f(true, false, false, false, false), &lim), Ok(AddOutcome::Skipped));
        assert_eq!(z.add(b"a", 0.0, f(false, false, true, false, false), &lim), Ok(AddOutcome::Skipped));
        assert_eq!(z.add(b"a", 3.0, f(false, false, true, false, false), &lim), Ok(AddOutcome::Updated(3.0)));
        assert_eq!(z.add(b"a", 3.0, f(false, false, false, false, false), &lim), Ok(AddOutcome::Unchanged(3.0)));
        assert_eq!(z.add(b"a", 2.0, f(false, false, false, false, true), &lim), Ok(AddOutcome::Updated(5.0)));
        assert_eq!(z.add(b"a", 1.0, f(false, false, false, true, true), &lim), Ok(AddOutcome::Skipped));
        assert_eq!(z.add(b"a", f64::NAN, AddFlags::default(), &lim), Err(NotANumber));
        add(&mut z, "inf", f64::INFINITY);
        assert_eq!(z.add(b"inf", f64::NEG_INFINITY, f(false, false, false, false, true), &lim), Err(NotANumber));
    }

    #[test]
    fn ranges_by_score_and_lex() {
        for entries in [128, 0] {
            let lim = limits(entries, 64);
            let mut z = ZSet::default();
            for (i, m) in ["a", "b", "c", "d", "e"].iter().enumerate() {
                z.add(m.as_bytes(), i as f64, AddFlags::default(), &lim).expect("not NaN");
            }
            let r = |min, max, min_ex, max_ex| ScoreRange { min, max, min_ex, max_ex };
            assert_eq!(z.score_ranks(&r(1.0, 3.0, false, false)), 1..4);
            assert_eq!(z.score_ranks(&r(1.0, 3.0, true, true)), 2..3);
            assert_eq!(z.score_ranks(&r(3.0, 1.0, false, false)).len(), 0);
            assert_eq!(z.score_ranks(&r(f64::NEG_INFINITY, f64::INFINITY, false, false)), 0..5);
            let mut flat = ZSet::default();
            for m in ["a", "b", "c", "d", "e"] {
                flat.add(m.as_bytes(), 0.0, AddFlags::default(), &lim).expect("not NaN");
            }
            let lex = |min, max| LexRange { min, max };
            let range = lex(LexBound::Incl(b"b"), LexBound::Excl(b"d"));
            assert_eq!(flat.lex_ranks(&range, false), 1..3);
            assert_eq!(flat.lex_ranks(&range, true), 1..3);
            assert_eq!(flat.lex_ranks(&lex(LexBound::Min, LexBound::Max), false), 0..5);
            assert_eq!(flat.lex_ranks(&lex(LexBound::Max, LexBound::Min), false), 0..0);
            assert_eq!(flat.lex_ranks(&lex(LexBound::Excl(b"b"), LexBound::Incl(b"b")), false), 0..0);
            assert_eq!(members(flat.range(1..3)), ["b", "c"]);
            assert_eq!(members(flat.range(1..3).rev()), ["c", "b"]);
            assert_eq!(flat.remove_ranks(1..3), 2);
            assert_eq!(members(flat.iter()), ["a", "d", "e"]);
            check(&flat);
        }
    }

    #[test]
    fn listpack_lex_scan_follows_redis_on_mixed_scores() {
        // Members out of lex order (scores differ): Redis's forward scan
        // takes the first member >= min, then a run of members <= max.
        let mut z = ZSet::default();
        for (m, s) in [("b", 1.0), ("a", 2.0), ("c", 3.0)] {
            add(&mut z, m, s);
        }
        let range = LexRange { min: LexBound::Incl(b"b"), max: LexBound::Max };
        assert_eq!(z.lex_ranks(&range, false), 0..3);
        let range = LexRange { min: LexBound::Min, max: LexBound::Excl(b"c") };
        assert_eq!(z.lex_ranks(&range, true), 0..2);
    }

    #[test]
    fn skiplist_survives_many_operations() {
        let lim = limits(0, 0);
        let mut z = ZSet::default();
        for i in 0..3000u32 {
            let m = format!("m{}", (i * 7919) % 3000);
            z.add(m.as_bytes(), f64::from(i % 97), AddFlags::default(), &lim).expect("not NaN");
        }
        check(&z);
        assert_eq!(z.len(), 3000);
        for i in (0..3000u32).step_by(3) {
            assert!(z.remove(format!("m{i}").as_bytes()));
        }
        check(&z);
        for i in 0..500u32 {
            let m = format!("m{}", i * 3 + 1);
            z.add(m.as_bytes(), f64::from(i) * 0.5, AddFlags { incr: true, ..AddFlags::default() }, &lim)
                .expect("not NaN");
        }
        check(&z);
        let n = z.len();
        assert_eq!(z.remove_ranks(100..1500), 1400);
        assert_eq!(z.len(), n - 1400);
        check(&z);
        let ranked: Vec<_> = z.iter().map(|(m, _)| m.to_vec()).collect();
        for (i, m) in ranked.iter().enumerate() {
            assert_eq!(z.rank(m), Some(i));
        }
        z.remove_ranks(0..z.len());
        assert!(z.is_empty());
        check(&z);
    }

    #[test]
    fn iterators_are_exact_in_both_directions() {
        for entries in [128, 0] {
            let lim = limits(entries, 64);
            let mut z = ZSet::default();
            for i in 0..50 {
                z.add(format!("{i:02}").as_bytes(), f64::from(i), AddFlags::default(), &lim).expect("not NaN");
            }
            let mut it = z.range(10..20);
            assert_eq!(it.len(), 10);
            assert_eq!(it.next().map(|(m, _)| m.to_vec()), Some(b"10".to_vec()));
            assert_eq!(it.next_back().map(|(m, _)| m.to_vec()), Some(b"19".to_vec()));
            assert_eq!(it.len(), 8);
            assert_eq!(members(z.range(48..60)), ["48", "49"]);
            assert_eq!(z.range(60..70).count(), 0);
            let mut rng = rand::thread_rng();
            let (m, s) = z.random_entry(&mut rng).expect("non-empty");
            assert_eq!(z.score(m), Some(s));
            let mut seen = 0;
            let mut cursor = 0;
            loop {
                cursor = z.scan(cursor, |_, _| seen += 1);
                if cursor == 0 {
                    break;
                }
            }
            assert_eq!(seen, 50);
        }
    }

    #[test]
    fn from_sorted_picks_the_encoding() {
        let items: Vec<(Vec<u8>, f64)> = (0..5).map(|i| (vec![b'a' + i], f64::from(i))).collect();
        assert_eq!(ZSet::from_sorted(&items, &limits(5, 64)).encoding(), "listpack");
        let z = ZSet::from_sorted(&items, &limits(4, 64));
        assert_eq!(z.encoding(), "skiplist");
        check(&z);
        assert_eq!(ZSet::from_sorted(&items, &limits(5, 0)).encoding(), "skiplist");
        assert_eq!(members(ZSet::from_sorted(&items, &limits(5, 64)).iter()), ["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn zset_fits_in_a_value() {
        assert!(std::mem::size_of::<ZSet>() <= 24);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, i8, bool),
        Remove(u8),
        RemoveRanks(u8, u8),
        ScoreRange(i8, i8, bool, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), any::<i8>(), any::<bool>()).prop_map(|(m, s, i)| Op::Add(m, s, i)),
            2 => any::<u8>().prop_map(Op::Remove),
            1 => (any::<u8>(), 0u8..8).prop_map(|(a, n)| Op::RemoveRanks(a, n)),
            1 => (any::<i8>(), any::<i8>(), any::<bool>(), any::<bool>()).prop_map(|(a, b, x, y)| Op::ScoreRange(a, b, x, y)),
        ]
    }

    proptest! {
        /// Both encodings against a sorted Vec model.
        #[test]
        fn matches_a_model(ops in prop::collection::vec(op(), 0..300), entries in prop_oneof![Just(0usize), Just(16), Just(1000)]) {
            let lim = limits(entries, 64);
            let mut z = ZSet::default();
            let mut model: Vec<(f64, Vec<u8>)> = vec![];
            for op in ops {
                match op {
                    Op::Add(m, s, incr) => {
                        let member = vec![b'a' + m % 40];
                        let flags = AddFlags { incr, ..AddFlags::default() };
                        let out = z.add(&member, f64::from(s), flags, &lim).expect("no NaN");
                        let old = model.iter().position(|(_, x)| *x == member);
                        let new = match old { Some(i) if incr => model[i].0 + f64::from(s), _ => f64::from(s) };
                        match old {
                            Some(i) if model[i].0 == new => prop_assert_eq!(out, AddOutcome::Unchanged(new)),
                            Some(_) => prop_assert_eq!(out, AddOutcome::Updated(new)),
                            None => prop_assert_eq!(out, AddOutcome::Added(new)),
                        }
                        if let Some(i) = old { model.remove(i); }
                        model.push((new, member));
                        model.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    }
                    Op::Remove(m) => {
                        let member = vec![b'a' + m % 40];
                        let old = model.iter().position(|(_, x)| *x == member);
                        prop_assert_eq!(z.remove(&member), old.is_some());
                        if let Some(i) = old { model.remove(i); }
                    }
                    Op::RemoveRanks(a, n) => {
                        let lo = a as usize % (model.len() + 1);
                        let hi = (lo + n as usize).min(model.len());
                        prop_assert_eq!(z.remove_ranks(lo..lo + n as usize), hi - lo);
                        model.drain(lo..hi);
                    }
                    Op::ScoreRange(a, b, min_ex, max_ex) => {
                        let r = ScoreRange { min: f64::from(a), max: f64::from(b), min_ex, max_ex };
                        let want: Vec<_> = model.iter().enumerate()
                            .filter(|(_, (s, _))| r.above_min(*s) && r.below_max(*s)).map(|(i, _)| i).collect();
                        let got = z.score_ranks(&r);
                        prop_assert_eq!(got.clone().collect::<Vec<_>>(), want);
                        let got_members: Vec<_> = z.range(got.clone()).rev().map(|(m, _)| m.to_vec()).collect();
                        let want_members: Vec<_> = got.rev().map(|i| model[i].1.clone()).collect();
                        prop_assert_eq!(got_members, want_members);
                    }
                }
                prop_assert_eq!(z.len(), model.len());
                let all: Vec<(f64, Vec<u8>)> = z.iter().map(|(m, s)| (s, m.to_vec())).collect();
                prop_assert_eq!(&all, &model);
                for (i, (s, m)) in model.iter().enumerate() {
                    prop_assert_eq!(z.score(m), Some(*s));
                    prop_assert_eq!(z.rank(m), Some(i));
                }
                check(&z);
            }
        }
    }
}
