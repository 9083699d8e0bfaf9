//! Redis 7's key specs: where a command's keys are among its arguments and
//! how it uses each of them (`src/commands/*.json` "key_specs").
//!
//! They are what COMMAND INFO and COMMAND GETKEYSANDFLAGS report, and the
//! (first, last, step) and `movablekeys` that COMMAND INFO derives from
//! them. The dispatcher does not read them: it locks and touches the keys
//! that `Keys` finds, which must be the same keys.

use std::borrow::Cow;

use super::{CommandSpec, Keys};

/// Key-spec flags, with Redis's names (`CMD_KEY_*`): one of RO/RW/OW/RM
/// says whether the key is read, changed, overwritten or removed; the
/// rest refine that.
pub const RO: u16 = 1 << 0;
pub const RW: u16 = 1 << 1;
pub const OW: u16 = 1 << 2;
pub const RM: u16 = 1 << 3;
pub const ACCESS: u16 = 1 << 4;
pub const UPDATE: u16 = 1 << 5;
pub const INSERT: u16 = 1 << 6;
pub const DELETE: u16 = 1 << 7;
pub const NOT_KEY: u16 = 1 << 8;
pub const INCOMPLETE: u16 = 1 << 9;
/// The flags depend on the arguments (SET with GET, BITFIELD with SET):
/// `KeySpec::flags_by` computes them.
pub const VARIABLE_FLAGS: u16 = 1 << 10;

/// The flags' names in Redis's output order (`addReplyFlagsForKeyArgs`).
pub const FLAG_NAMES: &[(u16, &str)] = &[
    (RO, "RO"),
    (RW, "RW"),
    (OW, "OW"),
    (RM, "RM"),
    (ACCESS, "access"),
    (UPDATE, "update"),
    (INSERT, "insert"),
    (DELETE, "delete"),
    (NOT_KEY, "not_key"),
    (INCOMPLETE, "incomplete"),
    (VARIABLE_FLAGS, "variable_flags"),
];

/// Where the search for a spec's keys starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Begin {
    /// At argument `pos`.
    Index(usize),
    /// After `keyword`, searched from argument `startfrom` (negative: from
    /// the end, backwards).
    Keyword { keyword: &'static str, startfrom: isize },
    /// Only the command knows (SORT's BY, GET and STORE).
    Unknown,
}

/// Which arguments from the start are keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Find {
    /// Up to `lastkey` past the start (negative: counted from the end;
    /// with a `limit`, a 1/limit share of what follows) every `keystep`.
    Range {
        lastkey: isize,
        keystep: usize,
        limit: usize,
    },
    /// The argument `keynumidx` past the start counts the keys, which
    /// begin `firstkey` past the start, every `keystep`.
    Keynum {
        keynumidx: usize,
        firstkey: usize,
        keystep: usize,
    },
    Unknown,
}

#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub flags: u16,
    pub begin: Begin,
    pub find: Find,
    /// Redis's note on the spec ("" for none).
    pub notes: &'static str,
    /// For VARIABLE_FLAGS: the key's actual flags given the arguments.
    pub flags_by: Option<KeyFlagsFn>,
}

/// Computes a VARIABLE_FLAGS key's flags from the command's arguments.
pub type KeyFlagsFn = fn(&[&[u8]]) -> u16;

impl KeySpec {
    pub const fn notes(self, notes: &'static str) -> KeySpec {
        KeySpec { notes, ..self }
    }

    pub const fn flags_by(self, f: KeyFlagsFn) -> KeySpec {
        KeySpec { flags_by: Some(f), ..self }
    }

    fn is_locatable(&self) -> bool {
        self.begin != Begin::Unknown && self.find != Find::Unknown
    }

    /// The flags of a key this spec finds in `argv` (GETKEYSANDFLAGS).
    pub fn flags_for(&self, argv: &[&[u8]]) -> u16 {
        match self.flags_by {
            Some(f) => f(argv),
            None => self.flags,
        }
    }

    /// The argument indexes this spec spans in `argv` (every `step`-th is
    /// a key), as Redis's `getKeysUsingKeySpecs` finds them: empty when
    /// the keyword is absent, None when the arguments do not fit.
    fn locate(&self, argv: &[&[u8]]) -> Option<std::ops::Range<usize>> {
        let argc = argv.len() as isize;
        let first = match self.begin {
            Begin::Index(pos) => pos as isize,
            Begin::Keyword { keyword, startfrom } => {
                let is_keyword = |&i: &isize| argv[i as usize].eq_ignore_ascii_case(keyword.as_bytes());
                // Forwards up to the last argument but one, backwards down
                // to argument 2: a keyword needs a key after it.
                let found = if startfrom > 0 {
                    (startfrom..argc - 1).find(is_keyword)
                } else {
                    (2..=argc + startfrom).rev().find(is_keyword)
                };
                match found {
                    Some(at) => at + 1,
                    None => return Some(0..0),
                }
            }
            Begin::Unknown => return None,
        };
        let (first, last) = match self.find {
            Find::Range { lastkey, limit, .. } => {
                let last = if lastkey >= 0 {
                    first + lastkey
                } else if limit == 0 {
                    argc + lastkey
                } else {
                    first + ((argc - first) / limit as isize + lastkey)
                };
                (first, last)
            }
            Find::Keynum { keynumidx, firstkey, .. } => {
                let count = argv.get((first as usize).checked_add(keynumidx)?)?;
                let count = keel_engine::value::parse_canonical_i64(count).filter(|&n| n >= 0)?;
                let first = first + firstkey as isize;
                (first, first + count as isize - 1)
            }
            Find::Unknown => return None,
        };
        (first >= 1 && last >= first && last < argc).then_some(first as usize..last as usize + 1)
    }

    /// The key indexes this spec names in `argv`; None as for `locate`.
    fn keys_in(&self, argv: &[&[u8]]) -> Option<impl Iterator<Item = usize>> {
        Some(self.locate(argv)?.step_by(self.step()))
    }

    fn step(&self) -> usize {
        match self.find {
            Find::Range { keystep, .. } | Find::Keynum { keystep, .. } => keystep.max(1),
            Find::Unknown => 1,
        }
    }
}

/// A key spec (table shorthand).
pub const fn ks(flags: u16, begin: Begin, find: Find) -> KeySpec {
    KeySpec { flags, begin, find, notes: "", flags_by: None }
}

/// The one key at argument `pos`.
pub const fn key_at(pos: usize, flags: u16) -> KeySpec {
    ks(flags, index(pos), span(0, 1, 0))
}

pub const fn index(pos: usize) -> Begin {
    Begin::Index(pos)
}

pub const fn keyword(keyword: &'static str, startfrom: isize) -> Begin {
    Begin::Keyword { keyword, startfrom }
}

/// `Find::Range`: keys up to `lastkey` past the start, every `keystep`.
pub const fn span(lastkey: isize, keystep: usize, limit: usize) -> Find {
    Find::Range { lastkey, keystep, limit }
}

pub const fn keynum(keynumidx: usize, firstkey: usize, keystep: usize) -> Find {
    Find::Keynum { keynumidx, firstkey, keystep }
}

/// A command's key specs: its own, or for a command that names none, the
/// one a plain `Keys::Range` implies (read and accessed, or read, written
/// and updated), which is Redis's spec for most single-key commands.
pub fn key_specs(spec: &CommandSpec) -> Cow<'static, [KeySpec]> {
    if !spec.key_specs.is_empty() {
        return Cow::Borrowed(spec.key_specs);
    }
    match spec.keys {
        Keys::Range { first, last, step } => {
            let flags = if spec.has(super::flags::WRITE) { RW | UPDATE } else { RO | ACCESS };
            let lastkey = if last < 0 { last } else { last - first as isize };
            Cow::Owned(vec![ks(flags, index(first), span(lastkey, step, 0))])
        }
        Keys::None | Keys::Custom(_) => Cow::Borrowed(&[]),
    }
}

/// The (first, last, step) COMMAND INFO reports and whether the command
/// has `movablekeys`, derived from the key specs as Redis's
/// `populateCommandLegacyRangeSpec` does: the consecutive plain range
/// specs make the legacy range; any other spec makes the keys movable.
pub fn legacy_range(specs: &[KeySpec]) -> ((i64, i64, i64), bool) {
    if let [only] = specs {
        if let (Begin::Index(pos), Find::Range { lastkey, keystep, .. }) = (only.begin, only.find) {
            let last = if lastkey >= 0 { lastkey + pos as isize } else { lastkey };
            return ((pos as i64, last as i64, keystep as i64), only.flags & INCOMPLETE != 0);
        }
    }
    let mut movable = false;
    let (mut first, mut last): (Option<usize>, isize) = (None, 0);
    let mut prev_last = 0isize;
    for s in specs {
        let (Begin::Index(pos), Find::Range { lastkey, keystep, .. }) = (s.begin, s.find) else {
            movable = true;
            continue;
        };
        if keystep != 1 || (prev_last != 0 && prev_last != pos as isize - 1) {
            movable = true;
            continue;
        }
        movable |= s.flags & INCOMPLETE != 0;
        first = Some(first.map_or(pos, |f| f.min(pos)));
        let abs_last = if lastkey >= 0 { lastkey + pos as isize } else { lastkey };
        // Redis compares unsigned: a negative (from the end) last wins.
        last = if (abs_last as usize) > (last as usize) { abs_last } else { last };
        prev_last = last;
    }
    match first {
        Some(first) => ((first as i64, last as i64, 1), movable),
        None => ((0, 0, 0), !specs.is_empty()),
    }
}

/// The keys COMMAND GETKEYS and GETKEYSANDFLAGS report for `argv` and
/// their flags, as Redis finds them: from the specs alone when they can
/// place every key with fixed flags (none where the arguments do not fit
/// them), else from the command's own key finding (`keys`, the positions
/// `Keys` gives), as Redis then calls the command's getkeys function.
pub fn keys_and_flags(specs: &[KeySpec], argv: &[&[u8]], keys: &[usize]) -> Vec<(usize, u16)> {
    if let Some(found) = keys_by_specs(specs, argv) {
        return found;
    }
    // A key no spec can place is one only the command finds, which Redis
    // describes by its last unlocatable spec (SORT's STORE destination).
    let unplaced = specs.iter().rev().find(|s| !s.is_locatable());
    keys.iter()
        .map(|&i| {
            let placed = specs
                .iter()
                .filter(|s| s.is_locatable())
                .find(|s| s.keys_in(argv).is_some_and(|mut k| k.any(|k| k == i)));
            let flags = placed.or(unplaced).map_or(0, |s| s.flags_for(argv));
            (i, flags & !(INCOMPLETE | VARIABLE_FLAGS))
        })
        .collect()
}

/// The keys the specs alone place, or None where Redis's
/// `getKeysUsingKeySpecs` gives up for the command's own key finding: a
/// spec that cannot place its keys, flags that depend on the arguments,
/// or an INCOMPLETE spec that found some (MIGRATE's KEYS, whose list the
/// options before it may hide).
fn keys_by_specs(specs: &[KeySpec], argv: &[&[u8]]) -> Option<Vec<(usize, u16)>> {
    if !specs.iter().all(|s| s.is_locatable() && s.flags & VARIABLE_FLAGS == 0) {
        return None;
    }
    let mut found = Vec::new();
    for s in specs.iter().filter(|s| s.flags & NOT_KEY == 0) {
        let Some(indexes) = s.locate(argv) else { return Some(Vec::new()) };
        if s.flags & INCOMPLETE != 0 && !indexes.is_empty() {
            return None;
        }
        found.extend(indexes.step_by(s.step()).map(|i| (i, s.flags)));
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn legacy_range_follows_redis() {
        // MSET: one range spec with a step.
        assert_eq!(legacy_range(&[ks(OW | UPDATE, index(1), span(-1, 2, 0))]), ((1, -1, 2), false));
        // LMOVE: two consecutive single keys.
        assert_eq!(legacy_range(&[key_at(1, RW), key_at(2, RW | INSERT)]), ((1, 2, 1), false));
        // ZUNIONSTORE: the destination, then a numkeys group.
        assert_eq!(legacy_range(&[key_at(1, OW), ks(RO, index(2), keynum(0, 1, 1))]), ((1, 1, 1), true));
        // ZUNION: numkeys only.
        assert_eq!(legacy_range(&[ks(RO, index(1), keynum(0, 1, 1))]), ((0, 0, 0), true));
        // BLPOP: keys up to the timeout.
        assert_eq!(legacy_range(&[ks(RW, index(1), span(-2, 1, 0))]), ((1, -2, 1), false));
        assert_eq!(legacy_range(&[]), ((0, 0, 0), false));
    }

    #[test]
    fn locate_follows_redis() {
        let zunion = ks(RO, index(1), keynum(0, 1, 1));
        assert_eq!(zunion.locate(&argv("zunion 2 a b WEIGHTS 1 2")), Some(2..4));
        assert_eq!(zunion.locate(&argv("zunion 3 a b")), None);
        assert_eq!(zunion.locate(&argv("zunion x a b")), None);
        let blpop = ks(RW, index(1), span(-2, 1, 0));
        assert_eq!(blpop.locate(&argv("blpop a b c 0")), Some(1..4));
        let streams = ks(RO, keyword("STREAMS", 1), span(-1, 1, 2));
        assert_eq!(streams.locate(&argv("xread count 1 streams a b 0 0")), Some(4..6));
        assert_eq!(streams.locate(&argv("xread count 1 a")).map(|r| r.count()), Some(0));
        let mset = ks(OW, index(1), span(-1, 2, 0));
        assert_eq!(mset.keys_in(&argv("mset a 1 b 2")).map(Iterator::collect::<Vec<_>>), Some(vec![1, 3]));
    }

    /// The specs report what the dispatcher locks: a command whose keys
    /// are computed has specs, and a fixed range is the specs' range.
    #[test]
    fn every_command_has_specs_that_agree_with_its_keys() {
        for spec in &super::super::table().all {
            let specs = key_specs(spec);
            match spec.keys {
                // Shard channels: named where keys are, but not keys.
                Keys::None => assert!(specs.iter().all(|s| s.flags & NOT_KEY != 0), "{} has no keys", spec.name),
                Keys::Custom(_) => assert!(!specs.is_empty(), "{} needs key specs", spec.name),
                Keys::Range { first, last, step } => {
                    let want = ((first as i64, last as i64, step as i64), false);
                    assert_eq!(legacy_range(&specs), want, "{}", spec.name);
                }
            }
        }
    }

    /// MIGRATE: the key argument unless KEYS is found, then the
    /// command's own finding (which skips AUTH's password).
    #[test]
    fn an_incomplete_spec_that_finds_keys_defers_to_the_command() {
        let migrate = [
            key_at(3, RW | ACCESS | DELETE),
            ks(RW | ACCESS | DELETE | INCOMPLETE, keyword("KEYS", -2), span(-1, 1, 0)),
        ];
        assert_eq!(keys_and_flags(&migrate, &argv("migrate h p k 0 0"), &[]), vec![(3, RW | ACCESS | DELETE)]);
        let found = keys_and_flags(&migrate, &argv("migrate h p  0 0 auth keys a"), &[3]);
        assert_eq!(found, vec![(3, RW | ACCESS | DELETE)]);
        let found = keys_and_flags(&migrate, &argv("migrate h p  0 0 keys a b"), &[7, 8]);
        assert_eq!(found, vec![(7, RW | ACCESS | DELETE), (8, RW | ACCESS | DELETE)]);
    }

    #[test]
    fn unplaced_keys_take_the_last_unknown_spec() {
        let sort = [
            key_at(1, RO | ACCESS),
            ks(RO | ACCESS, Begin::Unknown, Find::Unknown),
            ks(OW | UPDATE, Begin::Unknown, Find::Unknown),
        ];
        let keys = keys_and_flags(&sort, &argv("sort a by x store b"), &[1, 5]);
        assert_eq!(keys, vec![(1, RO | ACCESS), (5, OW | UPDATE)]);
    }
}
