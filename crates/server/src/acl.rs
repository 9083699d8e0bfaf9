//! Users and what they may do: Redis 7.0's ACL (`acl.c`).
//!
//! A user has flags (`on`/`off`, `nopass`, the payload-sanitising pair),
//! SHA-256 password hashes and selectors: the root one, which the rules
//! outside parentheses change, then any `(...)` selectors. Each selector
//! allows commands (a bit per command and subcommand, indexed by the
//! command table's stat indexes, plus Redis's reserved "future commands"
//! bit that only `+@all` sets, and allowed first arguments), keys (glob
//! patterns with read and write permissions, as `%R~`, `%W~` and `~`) and
//! Pub/Sub channels. A command runs if any selector allows it, its keys
//! and its channels.
//!
//! The rule parser (`User::apply`, `set_user`) and the checks are pure
//! functions of the user and the command table; `Acl` is the server's
//! registry of users, the ACL log, and the ACL file. A user is shared by
//! the connections authenticated as it (`UserHandle`): ACL SETUSER changes
//! it in place, as Redis does, and a connection of a user that may do
//! everything (the default user, by default) skips the check on one
//! relaxed load.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};

use crate::command::{self, flags, keyspec, CommandSpec};

/// User flags, in the order Redis describes them (`ACLUserFlags`).
pub const USER_ON: u8 = 1 << 0;
pub const USER_OFF: u8 = 1 << 1;
pub const USER_NOPASS: u8 = 1 << 2;
pub const USER_SKIP_SANITIZE: u8 = 1 << 3;
pub const USER_SANITIZE: u8 = 1 << 4;
const USER_FLAG_NAMES: [(u8, &str); 5] = [
    (USER_ON, "on"),
    (USER_OFF, "off"),
    (USER_NOPASS, "nopass"),
    (USER_SKIP_SANITIZE, "skip-sanitize-payload"),
    (USER_SANITIZE, "sanitize-payload"),
];

/// Key permissions of a pattern (`ACL_READ_PERMISSION`...).
pub const KEY_READ: u8 = 1;
pub const KEY_WRITE: u8 = 2;
pub const KEY_ALL: u8 = KEY_READ | KEY_WRITE;

/// A SHA-256 hash in lower-case hex, as Redis stores passwords.
pub type PasswordHash = [u8; 64];

/// Why a rule was refused: Redis's errno for it, each with Redis's text
/// (`ACLSetUserStringError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// ENOENT
    UnknownCommand,
    /// EINVAL
    Syntax,
    /// EEXIST
    KeyAfterAll,
    /// EISDIR
    ChannelAfterAll,
    /// ENODEV
    NoSuchPassword,
    /// EBADMSG
    BadHash,
    /// ECHILD
    FirstArgOfSubcommand,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeyAfterAll => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any \
                 effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelAfterAll => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have \
                 any effect. Try 'resetchannels' to start with an empty list of channels"
            }
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
            }
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        }
    }
}

/// Why a command was refused, in Redis's order of relevance
/// (`ACL_DENIED_CMD` < `ACL_DENIED_KEY` < `ACL_DENIED_CHANNEL`); keys and
/// channels carry the argument's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denied {
    Command,
    Key(usize),
    Channel(usize),
}

impl Denied {
    /// The NOPERM error a refused command answers (`processCommand`).
    pub fn error(self, spec: &CommandSpec) -> String {
        match self {
            Denied::Command => format!("NOPERM this user has no permissions to run the '{}' command", spec.name),
            Denied::Key(_) => "NOPERM this user has no permissions to access one of the keys used as arguments".into(),
            Denied::Channel(_) => {
                "NOPERM this user has no permissions to access one of the channels used as arguments".into()
            }
        }
    }

    /// The reason a script's refused call gives (`getAclErrorMessage`).
    pub fn script_reason(self) -> &'static str {
        match self {
            Denied::Command => "can't run this command or subcommand",
            Denied::Key(_) => "can't access at least one of the keys mentioned in the command arguments",
            Denied::Channel(_) => "can't publish to the channel mentioned in the command",
        }
    }

    /// The reason EXEC gives for a queued command refused at its run.
    pub fn exec_reason(self) -> &'static str {
        match self {
            Denied::Command => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        }
    }
}

/// The command table seen by the ACL: each command's stat index, its
/// categories, and its subcommands' indexes.
struct Commands {
    /// `acl::*` category bits by stat index.
    categories: Vec<u32>,
    /// Words of a command bitmap: every stat index, plus the future bit.
    words: usize,
}

fn commands() -> &'static Commands {
    static COMMANDS: OnceLock<Commands> = OnceLock::new();
    COMMANDS.get_or_init(|| {
        let table = command::table();
        let categories = table.all.iter().map(|spec| command::server::acl_category_bits(spec)).collect();
        Commands { categories, words: (table.stat_count() + 1).div_ceil(64) }
    })
}

/// Redis's reserved bit for commands that do not exist yet: set by
/// `+@all` alone, it makes a description start from `+@all`.
fn future_bit() -> usize {
    command::table().stat_count()
}

/// The category named `name` (case-insensitive), if any.
pub fn category(name: &[u8]) -> Option<u32> {
    command::acl::NAMES.iter().find(|(_, n)| n.as_bytes().eq_ignore_ascii_case(name)).map(|(bit, _)| *bit)
}

/// A key pattern and the access it grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPattern {
    pub flags: u8,
    pub pattern: Vec<u8>,
}

impl KeyPattern {
    fn describe(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(match self.flags {
            KEY_READ => b"%R~".as_slice(),
            KEY_WRITE => b"%W~",
            _ => b"~",
        });
        out.extend_from_slice(&self.pattern);
    }
}

/// One set of permissions (Redis's `aclSelector`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    root: bool,
    allkeys: bool,
    allchannels: bool,
    allcommands: bool,
    /// A bit per stat index, then the future bit.
    commands: Vec<u64>,
    /// Allowed first arguments of otherwise denied commands, by stat index.
    firstargs: BTreeMap<usize, Vec<Vec<u8>>>,
    patterns: Vec<KeyPattern>,
    channels: Vec<Vec<u8>>,
}

impl Selector {
    /// An empty selector: nothing allowed but, under `acl-pubsub-default
    /// allchannels`, every channel.
    fn new(root: bool, pubsub_all: bool) -> Selector {
        Selector {
            root,
            allkeys: false,
            allchannels: pubsub_all,
            allcommands: false,
            commands: vec![0; commands().words],
            firstargs: BTreeMap::new(),
            patterns: Vec::new(),
            channels: Vec::new(),
        }
    }

    fn bit(&self, id: usize) -> bool {
        self.commands[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, allow: bool) {
        if allow {
            self.commands[id / 64] |= 1 << (id % 64);
        } else {
            self.commands[id / 64] &= !(1 << (id % 64));
            self.allcommands = false;
        }
    }

    /// Allows or denies a command and, for a container, its subcommands
    /// (`ACLChangeSelectorPerm`).
    fn change(&mut self, top: Option<usize>, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.firstargs.remove(&id);
        if let Some(top) = top {
            let table = command::table();
            for sub in 0..table.commands[top].subcommands.len() {
                self.set_bit(table.sub_index(top, sub), allow);
            }
        }
    }

    /// Every command (and, recursively, subcommand) in `category`
    /// (`ACLSetSelectorCommandBitsForCategoryLogic`).
    fn change_category(&mut self, category: u32, allow: bool) {
        let table = command::table();
        let cats = &commands().categories;
        for (top, spec) in table.commands.iter().enumerate() {
            if cats[top] & category != 0 {
                self.change(Some(top), top, allow);
            }
            for sub in 0..spec.subcommands.len() {
                let id = table.sub_index(top, sub);
                if cats[id] & category != 0 {
                    self.change(None, id, allow);
                }
            }
        }
    }

    fn set_all(&mut self, allow: bool) {
        self.commands.iter_mut().for_each(|w| *w = if allow { u64::MAX } else { 0 });
        self.allcommands = allow;
        self.firstargs.clear();
    }

    /// Applies one selector rule (`ACLSetSelector`).
    fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |word: &str| op.eq_ignore_ascii_case(word.as_bytes());
        // An empty rule reaches here only inside a selector (`("")`),
        // where Redis finds no rule it knows.
        if op.is_empty() {
            return Err(RuleError::Syntax);
        }
        if is("allkeys") || is("~*") {
            self.allkeys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.patterns.clear();
        } else if is("allchannels") || is("&*") {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else if op[0] == b'~' || op[0] == b'%' {
            if self.allkeys {
                return Err(RuleError::KeyAfterAll);
            }
            let (flags, pattern) = key_rule(op)?;
            match self.patterns.iter_mut().find(|p| p.pattern == pattern) {
                Some(existing) => existing.flags |= flags,
                None => self.patterns.push(KeyPattern { flags, pattern: pattern.to_vec() }),
            }
        } else if op[0] == b'&' {
            if self.allchannels {
                return Err(RuleError::ChannelAfterAll);
            }
            if has_spaces(&op[1..]) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c[..] == op[1..]) {
                self.channels.push(op[1..].to_vec());
            }
        } else if op[0] == b'+' && op.get(1) != Some(&b'@') {
            self.allow_command(&op[1..])?;
        } else if op[0] == b'-' && op.get(1) != Some(&b'@') {
            let (top, id) = lookup(&op[1..]).ok_or(RuleError::UnknownCommand)?;
            self.change(top, id, false);
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let category = category(&op[2..]).ok_or(RuleError::UnknownCommand)?;
            self.change_category(category, op[0] == b'+');
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// `+name`, `+container|sub` or `+command|first-arg`.
    fn allow_command(&mut self, name: &[u8]) -> Result<(), RuleError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let (top, id) = lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(top, id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let (top, id) = lookup(base).ok_or(RuleError::UnknownCommand)?;
        if top.is_none() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(RuleError::Syntax);
        }
        if !command::table().all[id].subcommands.is_empty() {
            let (top, id) = lookup(name).ok_or(RuleError::UnknownCommand)?;
            self.change(top, id, true);
        } else {
            let allowed = self.firstargs.entry(id).or_default();
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                allowed.push(sub.to_vec());
            }
        }
        Ok(())
    }

    /// Whether this selector lets `spec` (stat index `id`) run with
    /// `argv` (`ACLSelectorCheckCmd`).
    fn check(&self, id: usize, spec: &CommandSpec, argv: &[&[u8]], keys: &mut Option<Vec<(usize, u16)>>) -> Result<(), Denied> {
        if !self.allcommands && !spec.has(flags::NO_AUTH) && !self.bit(id) {
            let at = if spec.name.contains('|') { 2 } else { 1 };
            let allowed = self.firstargs.get(&id).filter(|_| argv.len() >= 2);
            let arg = argv.get(at).copied().unwrap_or_default();
            if !allowed.is_some_and(|a| a.iter().any(|f| f.eq_ignore_ascii_case(arg))) {
                return Err(Denied::Command);
            }
        }
        if !self.allkeys && has_keys(spec) {
            let found = keys.get_or_insert_with(|| {
                let specs = keyspec::key_specs(spec);
                keyspec::keys_and_flags(&specs, argv, &spec.key_indexes(argv))
            });
            for &(at, key_flags) in found.iter() {
                if !self.key_allowed(argv[at], key_flags) {
                    return Err(Denied::Key(at));
                }
            }
        }
        if !self.allchannels {
            for (at, pattern) in channels_of(spec, argv) {
                if !channel_allowed(&self.channels, argv[at], pattern) {
                    return Err(Denied::Channel(at));
                }
            }
        }
        Ok(())
    }

    /// `ACLSelectorCheckKey`: the access a key spec's flags need.
    fn key_allowed(&self, key: &[u8], key_flags: u16) -> bool {
        if self.allkeys {
            return true;
        }
        let needed = needed_access(key_flags);
        self.patterns.iter().any(|p| p.flags & needed == needed && crate::glob::matches(&p.pattern, key, false))
    }

    /// `ACLSelectorHasUnrestrictedKeyAccess`.
    fn all_keys_for(&self, key_flags: u16) -> bool {
        let needed = needed_access(key_flags);
        self.allkeys || self.patterns.iter().any(|p| p.flags & needed == needed && p.pattern == b"*")
    }

    /// Redis's `ACLDescribeSelector`: keys, channels, then commands.
    fn describe(&self, out: &mut Vec<u8>) {
        if self.allkeys {
            out.extend_from_slice(b"~* ");
        } else {
            for p in &self.patterns {
                p.describe(out);
                out.push(b' ');
            }
        }
        if self.allchannels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                out.push(b'&');
                out.extend_from_slice(c);
                out.push(b' ');
            }
        }
        out.extend_from_slice(self.describe_commands().as_bytes());
    }

    /// Redis's `ACLDescribeSelectorCommandRules`: `+@all` or `-@all`, the
    /// categories that best fit the bitmap, then single commands, so that
    /// the rules rebuild exactly this bitmap.
    pub fn describe_commands(&self) -> String {
        let mut rules = String::new();
        let additive = !self.bit(future_bit());
        let mut fake = Selector::new(false, false);
        if additive {
            rules.push_str("-@all ");
        } else {
            rules.push_str("+@all ");
            fake.set_all(true);
        }
        let mut temp = Selector::new(false, false);
        temp.commands.clone_from(&self.commands);
        let mut applied = [false; 32];
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, (bit, _)) in command::acl::NAMES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = temp.count_category(*bit);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some(j);
                    (min_diff, max_same) = (diff, same);
                }
            }
            let Some(best) = best else { break };
            let (bit, name) = command::acl::NAMES[best];
            fake.change_category(bit, additive);
            temp.change_category(bit, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(name);
            rules.push(' ');
            applied[best] = true;
        }
        let table = command::table();
        for (top, spec) in table.commands.iter().enumerate() {
            self.describe_single(&mut fake, &mut rules, Some(top), top);
            for sub in 0..spec.subcommands.len() {
                self.describe_single(&mut fake, &mut rules, None, table.sub_index(top, sub));
            }
        }
        rules.pop();
        // Redis aborts rather than describe a user wrongly: a description
        // that grants other commands is a security hole.
        assert_eq!(fake.commands, self.commands, "ACL rules do not rebuild the user's commands: {rules}");
        rules
    }

    fn describe_single(&self, fake: &mut Selector, rules: &mut String, top: Option<usize>, id: usize) {
        let name = command::table().all[id].name;
        let mine = self.bit(id);
        if mine != fake.bit(id) {
            rules.push(if mine { '+' } else { '-' });
            rules.push_str(name);
            rules.push(' ');
            fake.change(top, id, mine);
        }
        // A container's subcommands come after it: Redis emits the
        // container's first-args there, which only plain commands have.
        if !mine {
            for arg in self.firstargs.get(&id).into_iter().flatten() {
                rules.push('+');
                rules.push_str(name);
                rules.push('|');
                rules.push_str(&String::from_utf8_lossy(arg));
                rules.push(' ');
            }
        }
    }

    /// Commands of `category` allowed and denied (subcommands counted on
    /// their own).
    fn count_category(&self, category: u32) -> (usize, usize) {
        let (mut on, mut off) = (0, 0);
        for (id, cats) in commands().categories.iter().enumerate() {
            if cats & category != 0 {
                if self.bit(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }

    /// The key patterns as ACL GETUSER shows them.
    pub fn keys_text(&self) -> Vec<u8> {
        if self.allkeys {
            return b"~*".to_vec();
        }
        let mut out = Vec::new();
        for (i, p) in self.patterns.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            p.describe(&mut out);
        }
        out
    }

    /// The channel patterns as ACL GETUSER shows them.
    pub fn channels_text(&self) -> Vec<u8> {
        if self.allchannels {
            return b"&*".to_vec();
        }
        let mut out = Vec::new();
        for (i, c) in self.channels.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.push(b'&');
            out.extend_from_slice(c);
        }
        out
    }

    fn unrestricted(&self) -> bool {
        self.allcommands && self.allkeys && self.allchannels
    }
}

/// `%R~pattern`, `%W~`, `%RW~` or `~pattern`: the access and the pattern.
fn key_rule(op: &[u8]) -> Result<(u8, &[u8]), RuleError> {
    let mut flags = 0;
    let mut offset = 1;
    if op[0] == b'%' {
        while offset < op.len() {
            match op[offset].to_ascii_uppercase() {
                b'R' if flags & KEY_READ == 0 => flags |= KEY_READ,
                b'W' if flags & KEY_WRITE == 0 => flags |= KEY_WRITE,
                b'~' => {
                    offset += 1;
                    break;
                }
                _ => return Err(RuleError::Syntax),
            }
            offset += 1;
        }
        // `%~` grants nothing: Redis 7.0 takes it and then cannot
        // describe it; refused here.
        if flags == 0 {
            return Err(RuleError::Syntax);
        }
    } else {
        flags = KEY_ALL;
    }
    let pattern = &op[offset.min(op.len())..];
    if has_spaces(pattern) {
        return Err(RuleError::Syntax);
    }
    Ok((flags, pattern))
}

/// The access a key spec's flags need (`ACLSelectorCheckKey`).
fn needed_access(key_flags: u16) -> u8 {
    let mut needed = 0;
    if key_flags & keyspec::ACCESS != 0 {
        needed |= KEY_READ;
    }
    if key_flags & (keyspec::INSERT | keyspec::DELETE | keyspec::UPDATE) != 0 {
        needed |= KEY_WRITE;
    }
    needed
}

/// Redis's `doesCommandHaveKeys`.
fn has_keys(spec: &CommandSpec) -> bool {
    matches!(spec.keys, command::Keys::Custom(_))
        || keyspec::key_specs(spec).iter().any(|s| s.flags & keyspec::NOT_KEY == 0)
}

/// The channels a command publishes or subscribes to, each with whether
/// it is a pattern (`getChannelsFromCommand`; unsubscribing is free).
fn channels_of(spec: &CommandSpec, argv: &[&[u8]]) -> impl Iterator<Item = (usize, bool)> {
    let (range, pattern) = match spec.name {
        "subscribe" | "ssubscribe" => (1..argv.len(), false),
        "psubscribe" => (1..argv.len(), true),
        "publish" | "spublish" => (1..2.min(argv.len()), false),
        _ => (0..0, false),
    };
    range.map(move |i| (i, pattern))
}

/// `ACLCheckChannelAgainstList`: a channel matches the list's patterns; a
/// subscribed pattern must be one of them literally.
fn channel_allowed(list: &[Vec<u8>], channel: &[u8], pattern: bool) -> bool {
    list.iter().any(|p| if pattern { p[..] == *channel } else { crate::glob::matches(p, channel, false) })
}

/// A command's stat index and, for a top-level one, its table index, by
/// `name` or `container|sub` (`ACLLookupCommand`).
fn lookup(name: &[u8]) -> Option<(Option<usize>, usize)> {
    let table = command::table();
    let mut parts = name.split(|&b| b == b'|');
    let base = parts.next()?;
    let (top, spec) = table.lookup(base)?;
    match (parts.next(), parts.next()) {
        (None, _) => Some((Some(top), top)),
        (Some(sub), None) if !spec.subcommands.is_empty() => {
            let (sub, _) = spec.subcommand(sub)?;
            Some((None, table.sub_index(top, sub)))
        }
        _ => None,
    }
}

/// Redis's `ACLStringHasSpaces`.
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&b| b.is_ascii_whitespace() || b == 0 || b == 0x0b)
}

/// SHA-256 of `password` in lower-case hex (`ACLHashPassword`).
pub fn hash_password(password: &[u8]) -> PasswordHash {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(password);
    let mut out = [0u8; 64];
    for (i, b) in digest.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    out
}

fn parse_hash(hex: &[u8]) -> Result<PasswordHash, RuleError> {
    let hash: PasswordHash = hex.try_into().map_err(|_| RuleError::BadHash)?;
    if hash.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)) {
        Ok(hash)
    } else {
        Err(RuleError::BadHash)
    }
}

/// A user's rules (Redis's `user` less its name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub flags: u8,
    pub passwords: Vec<PasswordHash>,
    /// The root selector first.
    pub selectors: Vec<Selector>,
}

impl User {
    /// A new user: off, no password, nothing allowed (`ACLCreateUser`).
    pub fn new(pubsub_all: bool) -> User {
        User { flags: USER_OFF, passwords: Vec::new(), selectors: vec![Selector::new(true, pubsub_all)] }
    }

    /// The default user as Redis creates it: on, nopass, everything.
    pub fn default_user(pubsub_all: bool) -> User {
        let mut user = User::new(pubsub_all);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            user.apply(op.as_bytes(), pubsub_all).expect("the default user's rules are valid");
        }
        user
    }

    pub fn root(&self) -> &Selector {
        &self.selectors[0]
    }

    pub fn enabled(&self) -> bool {
        self.flags & USER_OFF == 0
    }

    /// Applies one rule (`ACLSetUser`). `pubsub_all` is
    /// `acl-pubsub-default allchannels`: new selectors and `reset` start
    /// with every channel then.
    pub fn apply(&mut self, op: &[u8], pubsub_all: bool) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |word: &str| op.eq_ignore_ascii_case(word.as_bytes());
        if is("on") {
            self.flags = (self.flags | USER_ON) & !USER_OFF;
        } else if is("off") {
            self.flags = (self.flags | USER_OFF) & !USER_ON;
        } else if is("skip-sanitize-payload") {
            self.flags = (self.flags | USER_SKIP_SANITIZE) & !USER_SANITIZE;
        } else if is("sanitize-payload") {
            self.flags = (self.flags | USER_SANITIZE) & !USER_SKIP_SANITIZE;
        } else if is("nopass") {
            self.flags |= USER_NOPASS;
            self.passwords.clear();
        } else if is("resetpass") {
            self.flags &= !USER_NOPASS;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' { hash_password(&op[1..]) } else { parse_hash(&op[1..])? };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.flags &= !USER_NOPASS;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' { hash_password(&op[1..]) } else { parse_hash(&op[1..])? };
            let at = self.passwords.iter().position(|p| *p == hash).ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let mut selector = Selector::new(false, pubsub_all);
            // Redis splits a selector's rules with `sdssplitargs`.
            for rule in keel_protocol::split_args(&op[1..op.len() - 1]).unwrap_or_default() {
                selector.apply(&rule)?;
            }
            self.selectors.push(selector);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            for rule in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply(rule.as_bytes(), pubsub_all)?;
            }
            if pubsub_all {
                self.apply(b"allchannels", pubsub_all)?;
            }
            for rule in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply(rule.as_bytes(), pubsub_all)?;
            }
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    /// Whether `password` is one of the user's (any, under nopass).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        if self.flags & USER_NOPASS != 0 {
            return true;
        }
        let hashed = hash_password(password);
        // Every hash is compared whole, whatever matched: no early exit
        // that times which passwords share a prefix.
        self.passwords.iter().fold(false, |found, p| {
            found | (p.iter().zip(hashed.iter()).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0)
        })
    }

    /// Redis's `ACLDescribeUser`: the rules ACL LIST and the ACL file show.
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (flag, name) in USER_FLAG_NAMES {
            if self.flags & flag != 0 {
                out.extend_from_slice(name.as_bytes());
                out.push(b' ');
            }
        }
        for p in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(p);
            out.push(b' ');
        }
        for s in &self.selectors {
            if s.root {
                s.describe(&mut out);
            } else {
                out.extend_from_slice(b" (");
                s.describe(&mut out);
                out.push(b')');
            }
        }
        out
    }

    /// The flags ACL GETUSER lists.
    pub fn flag_names(&self) -> Vec<&'static str> {
        USER_FLAG_NAMES.iter().filter(|(f, _)| self.flags & f != 0).map(|(_, n)| *n).collect()
    }

    /// Whether the user may run `spec` with `argv` (`ACLCheckAllUserCommandPerm`):
    /// the first selector that allows it wins; otherwise the most
    /// relevant refusal (a key or channel over the command, the later
    /// argument among equals).
    pub fn check(&self, id: usize, spec: &CommandSpec, argv: &[&[u8]]) -> Result<(), Denied> {
        let mut keys = None;
        let mut relevant = Denied::Command;
        for s in &self.selectors {
            match s.check(id, spec, argv, &mut keys) {
                Ok(()) => return Ok(()),
                Err(denied) => relevant = relevant.max(denied),
            }
        }
        Err(relevant)
    }

    /// Whether the user may run `spec` with access `key_flags` to every
    /// key (`ACLUserCheckCmdWithUnrestrictedKeyAccess`: SORT's BY and GET).
    pub fn check_with_all_keys(&self, id: usize, spec: &CommandSpec, argv: &[&[u8]], key_flags: u16) -> bool {
        let mut keys = None;
        self.selectors.iter().any(|s| s.check(id, spec, argv, &mut keys).is_ok() && s.all_keys_for(key_flags))
    }

    /// Whether the user may touch `key` with `key_flags` access
    /// (`ACLUserCheckKeyPerm`).
    pub fn key_allowed(&self, key: &[u8], key_flags: u16) -> bool {
        self.selectors.iter().any(|s| s.key_allowed(key, key_flags))
    }

    /// Whether some selector allows the channel (`ACLUserCheckChannelPerm`).
    pub fn channel_allowed(&self, channel: &[u8], pattern: bool) -> bool {
        self.selectors.iter().any(|s| s.allchannels || channel_allowed(&s.channels, channel, pattern))
    }

    /// Every command, key and channel allowed: the check is skipped.
    pub fn unrestricted(&self) -> bool {
        self.selectors.iter().any(Selector::unrestricted)
    }

    /// Every channel some selector allows, or None when one allows all.
    fn channel_list(&self) -> Option<Vec<&[u8]>> {
        if self.selectors.iter().any(|s| s.allchannels) {
            return None;
        }
        Some(self.selectors.iter().flat_map(|s| s.channels.iter().map(Vec::as_slice)).collect())
    }

    /// Whether a subscriber of `self` may lose subscriptions under `new`
    /// (`ACLKillPubsubClientsIfNeeded`'s test that the new channels are a
    /// superset of the old): None if not, else the new channel list.
    pub fn revoked_channels<'a>(&self, new: &'a User) -> Option<Vec<&'a [u8]>> {
        let upcoming = new.channel_list()?;
        let superset = match self.channel_list() {
            None => false,
            Some(old) => old.iter().all(|c| upcoming.contains(c)),
        };
        (!superset).then_some(upcoming)
    }
}

/// Whether a subscription survives under a channel list (the kill test
/// of `ACLKillPubsubClientsIfNeeded`).
pub fn subscription_allowed(upcoming: &[&[u8]], name: &[u8], pattern: bool) -> bool {
    upcoming.iter().any(|p| if pattern { *p == name } else { crate::glob::matches(p, name, false) })
}

/// Joins `(` ... `)` selectors spread over several arguments
/// (`ACLMergeSelectorArguments`); on an unclosed one, the argument it
/// starts at.
pub fn merge_selectors<'a>(args: &[&'a [u8]]) -> Result<Vec<std::borrow::Cow<'a, [u8]>>, &'a [u8]> {
    use std::borrow::Cow;
    let mut merged = Vec::with_capacity(args.len());
    let mut open: Option<(Vec<u8>, &[u8])> = None;
    for &op in args {
        if let Some((selector, _)) = open.as_mut() {
            selector.push(b' ');
            selector.extend_from_slice(op);
            if op.last() == Some(&b')') {
                merged.push(Cow::Owned(open.take().expect("open").0));
            }
            continue;
        }
        if op.first() == Some(&b'(') && op.last() != Some(&b')') {
            open = Some((op.to_vec(), op));
            continue;
        }
        merged.push(Cow::Borrowed(op));
    }
    match open {
        Some((_, start)) => Err(start),
        None => Ok(merged),
    }
}

/// ACL SETUSER's rules applied to a copy of `user` (a new user if None),
/// all or none (`ACLStringSetUser`): the new rules, or Redis's error.
pub fn set_user(user: Option<&User>, args: &[&[u8]], pubsub_all: bool) -> Result<User, String> {
    let merged = merge_selectors(args).map_err(|start| {
        format!("ERR Unmatched parenthesis in acl selector starting at '{}'.", String::from_utf8_lossy(start))
    })?;
    let mut new = user.cloned().unwrap_or_else(|| User::new(pubsub_all));
    for op in &merged {
        new.apply(op, pubsub_all).map_err(|e| {
            format!("ERR Error in ACL SETUSER modifier '{}': {}", String::from_utf8_lossy(op), e.text())
        })?;
    }
    Ok(new)
}

/// A user as connections hold it: ACL SETUSER changes its rules in place.
#[derive(Debug)]
pub struct UserHandle {
    pub name: Vec<u8>,
    rules: RwLock<User>,
    /// `rules.unrestricted()`, read without the lock on every command.
    unrestricted: AtomicBool,
}

impl UserHandle {
    fn new(name: &[u8], rules: User) -> Arc<UserHandle> {
        let unrestricted = AtomicBool::new(rules.unrestricted());
        Arc::new(UserHandle { name: name.to_vec(), rules: RwLock::new(rules), unrestricted })
    }

    pub fn rules(&self) -> parking_lot::RwLockReadGuard<'_, User> {
        self.rules.read()
    }

    fn replace(&self, rules: User) {
        let mut current = self.rules.write();
        self.unrestricted.store(rules.unrestricted(), Ordering::Relaxed);
        *current = rules;
    }

    /// Whether the user may do everything: a command needs no check.
    #[inline]
    pub fn unrestricted(&self) -> bool {
        self.unrestricted.load(Ordering::Relaxed)
    }

    /// The user's check of a command (see `User::check`).
    pub fn check(&self, id: usize, spec: &CommandSpec, argv: &[&[u8]]) -> Result<(), Denied> {
        if self.unrestricted() {
            return Ok(());
        }
        self.rules.read().check(id, spec, argv)
    }
}

/// Where a denial happened (ACL LOG's `context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Toplevel,
    Lua,
    Multi,
}

/// What was denied (ACL LOG's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Command,
    Key,
    Auth,
    Channel,
}

impl From<Denied> for Reason {
    fn from(d: Denied) -> Reason {
        match d {
            Denied::Command => Reason::Command,
            Denied::Key(_) => Reason::Key,
            Denied::Channel(_) => Reason::Channel,
        }
    }
}

/// One ACL LOG entry (Redis's `ACLLogEntry`).
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub count: u64,
    pub reason: Reason,
    pub context: Context,
    pub object: Vec<u8>,
    pub username: Vec<u8>,
    pub ctime_ms: u64,
    pub client_info: String,
}

/// Entries this close in time, alike otherwise, are one entry counted up.
const LOG_GROUPING_MS: u64 = 60_000;

/// The server's users, the ACL log and the settings they follow.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, Arc<UserHandle>>>,
    default: Arc<UserHandle>,
    /// The default user is on and nopass: connections need no AUTH
    /// (Redis's `authRequired`), read on every command of a connection
    /// that has not authenticated.
    default_open: AtomicBool,
    /// `acl-pubsub-default allchannels`.
    pub pubsub_all: AtomicBool,
    /// `acllog-max-len`.
    pub log_max_len: AtomicU64,
    log: Mutex<VecDeque<LogEntry>>,
}

impl Default for Acl {
    fn default() -> Acl {
        let default = UserHandle::new(b"default", User::default_user(false));
        let users = BTreeMap::from([(b"default".to_vec(), default.clone())]);
        Acl {
            users: RwLock::new(users),
            default,
            default_open: AtomicBool::new(true),
            pubsub_all: AtomicBool::new(false),
            log_max_len: AtomicU64::new(128),
            log: Mutex::new(VecDeque::new()),
        }
    }
}

impl Acl {
    pub fn default_user(&self) -> Arc<UserHandle> {
        self.default.clone()
    }

    pub fn pubsub_all(&self) -> bool {
        self.pubsub_all.load(Ordering::Relaxed)
    }

    /// Whether a connection that has not authenticated may run commands.
    #[inline]
    pub fn default_open(&self) -> bool {
        self.default_open.load(Ordering::Relaxed)
    }

    /// Whether a new connection starts authenticated (as the default user).
    pub fn starts_authenticated(&self) -> bool {
        self.default_open()
    }

    pub fn get(&self, name: &[u8]) -> Option<Arc<UserHandle>> {
        self.users.read().get(name).cloned()
    }

    /// The users, in name order.
    pub fn users(&self) -> Vec<Arc<UserHandle>> {
        self.users.read().values().cloned().collect()
    }

    fn refresh_default(&self) {
        let rules = self.default.rules();
        self.default_open.store(rules.flags & USER_NOPASS != 0 && rules.enabled(), Ordering::Relaxed);
    }

    /// Sets a user's rules, creating the user if it is new. Returns the
    /// user and its previous rules.
    pub fn put(&self, name: &[u8], rules: User) -> (Arc<UserHandle>, Option<User>) {
        let mut users = self.users.write();
        let result = match users.get(name) {
            Some(handle) => {
                let old = handle.rules().clone();
                handle.replace(rules);
                (handle.clone(), Some(old))
            }
            None => {
                let handle = UserHandle::new(name, rules);
                users.insert(name.to_vec(), handle.clone());
                (handle, None)
            }
        };
        drop(users);
        self.refresh_default();
        result
    }

    /// Removes a user (never the default one); the handle, if it existed.
    pub fn remove(&self, name: &[u8]) -> Option<Arc<UserHandle>> {
        self.users.write().remove(name)
    }

    /// `requirepass`: the default user's one password, or nopass
    /// (`ACLUpdateDefaultUserPassword`).
    pub fn set_requirepass(&self, password: Option<&[u8]>) {
        let mut rules = self.default.rules().clone();
        let pubsub_all = self.pubsub_all();
        rules.apply(b"resetpass", pubsub_all).expect("resetpass is valid");
        match password {
            Some(p) => rules.apply(&[b">", p].concat(), pubsub_all).expect("a password is valid"),
            None => rules.apply(b"nopass", pubsub_all).expect("nopass is valid"),
        }
        self.default.replace(rules);
        self.refresh_default();
    }

    /// The user `name` if `password` is one of its and it is on
    /// (`ACLCheckUserCredentials`).
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<UserHandle>> {
        let user = self.get(name)?;
        let rules = user.rules();
        let ok = rules.enabled() && rules.password_ok(password);
        drop(rules);
        ok.then_some(user)
    }

    /// Replaces every user with those of `users` (`user` lines of the
    /// config file or the ACL file), the default user kept as the same
    /// handle so that its connections follow the new rules. Without a
    /// default user among them, it is the stock one.
    pub fn replace_all(&self, users: Vec<(Vec<u8>, User)>) -> Vec<Arc<UserHandle>> {
        let mut map = BTreeMap::new();
        let mut default = User::default_user(self.pubsub_all());
        for (name, rules) in users {
            if name == b"default" {
                default = rules;
            } else {
                map.insert(name.clone(), UserHandle::new(&name, rules));
            }
        }
        self.default.replace(default);
        map.insert(b"default".to_vec(), self.default.clone());
        let old = std::mem::replace(&mut *self.users.write(), map);
        self.refresh_default();
        old.into_values().filter(|u| !Arc::ptr_eq(u, &self.default)).collect()
    }

    /// Adds an entry to the ACL log, or counts up a like one among the
    /// latest ten (`addACLLogEntry`).
    pub fn log(&self, reason: Reason, context: Context, object: &[u8], username: &[u8], client_info: String) {
        let now = crate::server::unix_ms();
        let max = self.log_max_len.load(Ordering::Relaxed) as usize;
        let mut log = self.log.lock();
        let like = log.iter().take(10).position(|e| {
            e.reason == reason
                && e.context == context
                && e.ctime_ms.abs_diff(now) <= LOG_GROUPING_MS
                && e.object == object
                && e.username == username
        });
        if let Some(at) = like {
            let mut entry = log.remove(at).expect("found");
            entry.count += 1;
            entry.ctime_ms = now;
            entry.client_info = client_info;
            log.push_front(entry);
            return;
        }
        log.push_front(LogEntry {
            count: 1,
            reason,
            context,
            object: object.to_vec(),
            username: username.to_vec(),
            ctime_ms: now,
            client_info,
        });
        log.truncate(max);
    }

    /// The newest `count` log entries.
    pub fn log_entries(&self, count: usize) -> Vec<LogEntry> {
        self.log.lock().iter().take(count).cloned().collect()
    }

    pub fn log_reset(&self) {
        self.log.lock().clear();
    }

    /// Trims the log to `acllog-max-len` after CONFIG SET.
    pub fn trim_log(&self) {
        let max = self.log_max_len.load(Ordering::Relaxed) as usize;
        self.log.lock().truncate(max);
    }

    /// The users at start (`ACLLoadUsersAtStartup`): `requirepass` for the
    /// default user, then the config file's `user` lines or the ACL
    /// file, never both. An error stops the server, as Redis exits.
    pub fn start(&self, config: &crate::config::Config) -> Result<(), String> {
        self.pubsub_all.store(config.acl_pubsub_default == "allchannels", Ordering::Relaxed);
        self.set_requirepass(config.requirepass.as_deref());
        if !config.aclfile.is_empty() && !config.users.is_empty() {
            return Err("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path \
                        is invalid. This setup is very likely to lead to configuration errors and security holes, \
                        please define either an ACL file or declare users directly in your redis.conf, but not both."
                .into());
        }
        if !config.users.is_empty() {
            let users = parse_config_users(&config.users, self.pubsub_all())?;
            let mut all: Vec<(Vec<u8>, User)> = vec![(b"default".to_vec(), self.default.rules().clone())];
            for (name, rules) in users {
                match all.iter_mut().find(|(n, _)| *n == name) {
                    Some(slot) => slot.1 = rules,
                    None => all.push((name, rules)),
                }
            }
            self.replace_all(all);
        }
        if !config.aclfile.is_empty() {
            self.load_file(&config.aclfile)
                .map_err(|e| format!("Aborting Redis startup because of ACL errors: {e}"))?;
        }
        Ok(())
    }

    /// ACL LOAD: every user of the file, or none and Redis's errors.
    /// Returns the users that are gone, whose connections must close.
    pub fn load_file(&self, path: &str) -> Result<Vec<Arc<UserHandle>>, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("Error loading ACLs, opening file '{path}': {}", strerror(&e)))?;
        let users = parse_file(&text, path, self.pubsub_all())?;
        Ok(self.replace_all(users))
    }

    /// ACL SAVE: the users to `path`, through a temporary file renamed
    /// over it.
    pub fn save_file(&self, path: &str) -> std::io::Result<()> {
        let tmp = format!("{path}.tmp-{}-{}", std::process::id(), crate::server::unix_ms());
        let result = std::fs::write(&tmp, self.file_text()).and_then(|()| std::fs::rename(&tmp, path));
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// The ACL file's text: one `user` line per user (`ACLSaveToFile`).
    pub fn file_text(&self) -> Vec<u8> {
        let mut text = Vec::new();
        for user in self.users() {
            text.extend_from_slice(b"user ");
            text.extend_from_slice(&user.name);
            text.push(b' ');
            text.extend_from_slice(&user.rules().describe());
            text.push(b'\n');
        }
        text
    }
}

/// An I/O error as C's strerror words it ("No such file or directory").
fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Parses an ACL file (`ACLLoadFromFile`): the users, or Redis's errors,
/// every line checked, as one line of text. `filename` names the file in
/// the errors.
pub fn parse_file(text: &[u8], filename: &str, pubsub_all: bool) -> Result<Vec<(Vec<u8>, User)>, String> {
    let mut errors = String::new();
    let mut users: Vec<(Vec<u8>, User)> = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let linenum = i + 1;
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&[u8]> = line.split(|&b| b == b' ').filter(|w| !w.is_empty()).collect();
        if words.is_empty() {
            continue;
        }
        if words[0] != b"user" || words.len() < 2 {
            errors.push_str(&format!("{filename}:{linenum} should start with user keyword followed by the username. "));
            continue;
        }
        let name = words[1];
        if has_spaces(name) {
            errors.push_str(&format!(
                "'{filename}:{linenum}: username '{}' contains invalid characters. ",
                String::from_utf8_lossy(name)
            ));
            continue;
        }
        if users.iter().any(|(n, _)| n == name) {
            errors.push_str(&format!("WARNING: Duplicate user '{}' found on line {linenum}. ", String::from_utf8_lossy(name)));
            continue;
        }
        let mut user = User::new(pubsub_all);
        match merge_selectors(&words[2..]) {
            Err(_) => errors.push_str(&format!("{filename}:{linenum}: Unmatched parenthesis in selector definition.")),
            Ok(rules) => {
                let mut syntax_error = false;
                for rule in rules {
                    let rule = rule.trim_ascii();
                    match user.apply(rule, pubsub_all) {
                        Ok(()) => {}
                        Err(RuleError::UnknownCommand) => errors.push_str(&format!(
                            "{filename}:{linenum}: Error in applying operation '{}': {}. ",
                            String::from_utf8_lossy(rule),
                            RuleError::UnknownCommand.text()
                        )),
                        Err(e) if !syntax_error => {
                            errors.push_str(&format!("{filename}:{linenum}: {}. ", e.text()));
                            syntax_error = true;
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        users.push((name.to_vec(), user));
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        errors.push_str("WARNING: ACL errors detected, no change to the previously active ACL rules was performed");
        Err(errors)
    }
}

/// The users of `user` lines in the config file, in order, checked as
/// Redis checks them at start (`ACLAppendUserForLoading` then
/// `ACLLoadConfiguredUsers`): Redis's error text on the first bad one.
pub fn parse_config_users(lines: &[Vec<String>], pubsub_all: bool) -> Result<Vec<(Vec<u8>, User)>, String> {
    let mut users: Vec<(Vec<u8>, User)> = Vec::new();
    for words in lines {
        let name = words[0].as_bytes();
        if has_spaces(name) {
            return Err("Spaces not allowed in ACL usernames".into());
        }
        let args: Vec<&[u8]> = words[1..].iter().map(|w| w.as_bytes()).collect();
        let rules = merge_selectors(&args)
            .map_err(|start| format!("Unmatched parenthesis in acl selector starting at '{}'.", String::from_utf8_lossy(start)))?;
        if users.iter().any(|(n, _)| n == name) {
            return Err("Duplicate user found. A user can only be defined once in config files".into());
        }
        // The default user exists already: its line starts from a reset.
        let mut user = User::new(pubsub_all);
        if name == b"default" {
            user = User::default_user(pubsub_all);
            user.apply(b"reset", pubsub_all).expect("reset is valid");
        }
        for rule in &rules {
            user.apply(rule, pubsub_all).map_err(|e| {
                format!(
                    "Error loading ACL rule '{}' for the user named '{}': {}",
                    String::from_utf8_lossy(rule),
                    String::from_utf8_lossy(name),
                    e.text()
                )
            })?;
        }
        users.push((name.to_vec(), user));
    }
    Ok(users)
}

/// ACL GENPASS: `bits` random bits as hex, `(bits + 3) / 4` digits.
pub fn genpass(bits: usize) -> String {
    use rand::RngCore;
    let mut bytes = vec![0u8; bits.div_ceil(8)];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    hex[..bits.div_ceil(4)].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &str) -> Result<User, String> {
        let args: Vec<&[u8]> = rules.split(' ').filter(|r| !r.is_empty()).map(str::as_bytes).collect();
        set_user(None, &args, false)
    }

    fn describe(rules: &str) -> String {
        String::from_utf8(user(rules).expect("valid rules").describe()).expect("utf-8")
    }

    fn allows(u: &User, line: &str) -> Result<(), Denied> {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (id, spec) = command::resolve(&argv).expect("a command");
        u.check(id, spec, &argv)
    }

    #[test]
    fn a_new_user_is_off_with_nothing_allowed() {
        assert_eq!(describe(""), "off resetchannels -@all");
        assert_eq!(describe("on nopass ~* &* +@all"), "on nopass ~* &* +@all");
        let default = User::default_user(false);
        assert_eq!(String::from_utf8(default.describe()).expect("utf-8"), "on nopass ~* &* +@all");
        assert!(default.unrestricted());
    }

    #[test]
    fn passwords_are_sha256_hex() {
        let u = user(">foo").expect("valid");
        assert_eq!(&u.passwords[0][..], b"2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae");
        assert!(u.password_ok(b"foo") && !u.password_ok(b"bar"));
        assert_eq!(user(">foo <foo").expect("valid").passwords.len(), 0);
        assert!(user("<foo").expect_err("refused").contains("The password you are trying to remove"));
        assert!(user("#abc").expect_err("refused").contains("must be exactly 64 characters"));
        let hash = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
        assert!(user(&format!("#{hash} nopass")).expect("valid").password_ok(b"anything"));
        assert!(user(&format!("#{}", hash.to_uppercase())).is_err());
    }

    #[test]
    fn rule_errors_use_redis_texts() {
        assert_eq!(
            user("+nosuchcommand").expect_err("refused"),
            "ERR Error in ACL SETUSER modifier '+nosuchcommand': Unknown command or category name in ACL"
        );
        assert_eq!(user("bogus").expect_err("refused"), "ERR Error in ACL SETUSER modifier 'bogus': Syntax error");
        assert!(user("~* ~foo").expect_err("refused").contains("'allkeys' flag"));
        assert!(user("&* &foo").expect_err("refused").contains("'allchannels' flag"));
        assert!(user("+config|get|x").expect_err("refused").contains("first-arg of a subcommand"));
        assert!(user("+select|").expect_err("refused").contains("Syntax error"));
        assert!(user("-select|0").expect_err("refused").contains("Unknown command"));
        assert!(user("+@nosuch").expect_err("refused").contains("Unknown command"));
        assert_eq!(user("on (").expect_err("refused"), "ERR Unmatched parenthesis in acl selector starting at '('.");
        assert!(user("(this-is-invalid)").expect_err("refused").contains("'(this-is-invalid)': Syntax error"));
        assert!(user("(on)").expect_err("refused").contains("Syntax error"));
        assert!(user("%X~foo").expect_err("refused").contains("Syntax error"));
        // An empty rule inside a selector (found by the fuzzer: it panicked).
        assert!(user("(\"\")").expect_err("refused").contains("Syntax error"));
    }

    #[test]
    fn commands_are_described_as_redis_does() {
        assert_eq!(describe("+@all -debug"), "off resetchannels +@all -debug");
        assert_eq!(describe("+set +get"), "off resetchannels -@all +get +set");
        assert_eq!(describe("+@all -@all +get"), "off resetchannels -@all +get");
        assert_eq!(describe("+config|get"), "off resetchannels -@all +config|get");
        assert_eq!(describe("+select|0"), "off resetchannels -@all +select|0");
        assert_eq!(describe("+@hyperloglog"), "off resetchannels -@all +@hyperloglog");
        // Every category and its inverse rebuild their own bitmap.
        for (_, name) in command::acl::NAMES {
            describe(&format!("+@{name}"));
            describe(&format!("+@all -@{name}"));
        }
    }

    #[test]
    fn keys_and_channels_are_described_as_redis_does() {
        assert_eq!(describe("%R~foo %W~foo %RW~bar"), "off ~foo ~bar resetchannels -@all");
        assert_eq!(describe("%R~r* %W~w* ~baz &ch"), "off %R~r* %W~w* ~baz resetchannels &ch -@all");
        let u = user("on (~a* +get) (%R~b* +@all)").expect("valid");
        assert_eq!(u.selectors.len(), 3);
        assert_eq!(
            String::from_utf8(u.describe()).expect("utf-8"),
            "on resetchannels -@all (~a* resetchannels -@all +get) (%R~b* resetchannels +@all)"
        );
        assert_eq!(user("on (~a* +get) clearselectors").expect("valid").selectors.len(), 1);
        // A selector spread over arguments is one.
        let args: Vec<&[u8]> = vec![b"(~a*", b"+get)"];
        assert_eq!(set_user(None, &args, false).expect("valid").selectors.len(), 2);
    }

    #[test]
    fn checks_follow_commands_keys_and_channels() {
        let u = user("on nopass ~foo* &news.* +get +set +publish +subscribe +psubscribe +client|id").expect("valid");
        assert_eq!(allows(&u, "GET foo1"), Ok(()));
        assert_eq!(allows(&u, "GET bar"), Err(Denied::Key(1)));
        assert_eq!(allows(&u, "DEL foo1"), Err(Denied::Command));
        assert_eq!(allows(&u, "PUBLISH news.1 x"), Ok(()));
        assert_eq!(allows(&u, "PUBLISH other x"), Err(Denied::Channel(1)));
        assert_eq!(allows(&u, "SUBSCRIBE news.1 other"), Err(Denied::Channel(2)));
        assert_eq!(allows(&u, "PSUBSCRIBE news.*"), Ok(()));
        assert_eq!(allows(&u, "PSUBSCRIBE news.1*"), Err(Denied::Channel(1)));
        assert_eq!(allows(&u, "CLIENT ID"), Ok(()));
        assert_eq!(allows(&u, "CLIENT LIST"), Err(Denied::Command));
        // AUTH and HELLO (no_auth) are always allowed.
        assert_eq!(allows(&u, "AUTH x y"), Ok(()));
    }

    #[test]
    fn read_and_write_patterns_follow_key_specs() {
        let u = user("on %R~read* %W~write* +@all").expect("valid");
        assert_eq!(allows(&u, "GET readx"), Ok(()));
        assert_eq!(allows(&u, "SET readx 1"), Err(Denied::Key(1)));
        assert_eq!(allows(&u, "LPUSH writex 1"), Ok(()));
        assert_eq!(allows(&u, "GET writex"), Err(Denied::Key(1)));
        assert_eq!(allows(&u, "COPY readx writey"), Ok(()));
        assert_eq!(allows(&u, "COPY writey readx"), Err(Denied::Key(1)));
        // A selector may allow what the root does not.
        let u = user("on (%R~read* +@all) (%W~write* +@all)").expect("valid");
        assert_eq!(allows(&u, "GET readx"), Ok(()));
        assert_eq!(allows(&u, "SET writex 1"), Ok(()));
        // Each selector refuses a key of its own: the later one is told.
        assert_eq!(allows(&u, "COPY readx writey"), Err(Denied::Key(2)));
        assert_eq!(allows(&u, "COPY writey readx"), Err(Denied::Key(1)));
    }

    #[test]
    fn first_args_allow_a_denied_command() {
        let u = user("on ~* +select|0").expect("valid");
        assert_eq!(allows(&u, "SELECT 0"), Ok(()));
        assert_eq!(allows(&u, "SELECT 1"), Err(Denied::Command));
        // +select then clears them.
        assert_eq!(describe("+select|0 +select"), "off resetchannels -@all +select");
    }

    #[test]
    fn pubsub_default_allchannels_reaches_new_selectors_and_reset() {
        let args: Vec<&[u8]> = vec![b"reset", b"(+get)"];
        let u = set_user(None, &args, true).expect("valid");
        assert!(u.selectors.iter().all(|s| s.allchannels));
    }

    #[test]
    fn revoked_channels_are_found_only_when_some_are_lost() {
        let old = user("&a &b").expect("valid");
        assert!(old.revoked_channels(&user("&a &b &c").expect("valid")).is_none());
        assert!(old.revoked_channels(&user("&*").expect("valid")).is_none());
        let new = user("&a").expect("valid");
        let upcoming = old.revoked_channels(&new).expect("b is lost");
        assert!(subscription_allowed(&upcoming, b"a", false) && !subscription_allowed(&upcoming, b"b", false));
    }

    #[test]
    fn acl_files_parse_with_redis_errors() {
        let users = parse_file(b"user alice on >p ~* +@all\n\nuser default on nopass ~* &* +@all\n", "f.acl", false)
            .expect("valid");
        assert_eq!(users.len(), 2);
        let err = parse_file(b"user a on +nosuch\nuser a on\nbad line\n", "f.acl", false).expect_err("refused");
        assert!(err.starts_with("f.acl:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. "));
        assert!(err.contains("WARNING: Duplicate user 'a' found on line 2. "));
        assert!(err.contains("f.acl:3 should start with user keyword followed by the username. "));
        assert!(err.ends_with("no change to the previously active ACL rules was performed"));
    }

    #[test]
    fn genpass_gives_hex_of_the_bits_asked() {
        assert_eq!(genpass(256).len(), 64);
        assert_eq!(genpass(5).len(), 2);
        assert!(genpass(1).chars().all(|c| c.is_ascii_hexdigit()));
    }
}
