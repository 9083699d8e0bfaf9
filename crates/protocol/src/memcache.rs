//! Parsing one client request of the memcached text (ASCII) protocol, as memcached 1.6.18 reads it
//! (`try_read_command_ascii`, `process_command_ascii` and the `process_*_command` functions of
//! `proto_text.c`).
//!
//! A request is one command line ended by `\n` (an `\r` before it is dropped), split into tokens on
//! spaces; the storage commands are followed by a data block of exactly `<bytes>` bytes and `\r\n`:
//!
//! ```text
//! get|gets|bget <key>*           gat|gats <exptime> <key>*
//! set|add|replace|append|prepend <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//! cas <key> <flags> <exptime> <bytes> <cas unique> [noreply]\r\n<data>\r\n
//! delete <key> [0] [noreply]     incr|decr <key> <delta> [noreply]     touch <key> <exptime> [noreply]
//! flush_all [delay] [noreply]    verbosity <level> [noreply]           stats [args]    version    quit
//! mg|md|ma <key> <flag>*         ms <key> <datalen> <flag>*\r\n<data>\r\n                 mn
//! ```
//!
//! A meta command's flags are tokens whose first byte names them, some with an argument (`T30`,
//! `Oabc`); they are read as memcached's `_meta_flag_preparse` reads them ([`Meta`]), and the
//! reply echoes them in the order given, so the tokens are kept. `me` (a debug dump of memcached's
//! item header: slab class, item size) is one Keel does not serve.
//!
//! The parser is a pure function of the bytes buffered so far, like [`crate::request`]: memcached's
//! decisions depend only on the bytes it has seen, so re-parsing from the start of the request when
//! more bytes arrive gives its answers at the same point. What is reproduced on purpose, quirks
//! included (each checked against memcached 1.6.18 by experiment; see the tests):
//!
//! * Only `' '` separates tokens, runs of spaces count as one, and a line of no tokens is `ERROR`.
//!   Tabs, `\r` inside the line, control bytes and bytes >= 0x80 are part of a token: keys are only
//!   checked for length ([`KEY_MAX_LEN`]). The `\r` before `\n` is dropped only when the line holds
//!   more than one byte before the `\n` (so `"\r\n"` alone is the command `"\r"`, `ERROR`).
//! * The line ends at its first NUL (memcached tokenizes a C string); the rest up to `\n` is consumed.
//! * Numbers are read with glibc's `strtol`/`strtoul`/`strtoull` behind memcached's `safe_strto*`:
//!   leading C blanks and a `+` or `-` sign are taken, the number may be followed by a C blank and
//!   anything after it, a `-` is refused only when the unsigned result looks negative (so `-0`,
//!   and `-18446744073709551615` as 1, are taken), and `flags`, `exptime` and `bytes` are silently
//!   truncated to 32 bits (`flags` 4294967301 is 5, `bytes` 4294967297 is 1).
//! * Token counts are checked before anything else, and that `ERROR` is always sent; `noreply` is
//!   the last token, and once seen it silences every later error of the command (`set k 0 0 noreply`
//!   answers nothing and reads no data block). A refused storage command reads no data block, so the
//!   data is then read as a command, except when the value is too large for an item: memcached then
//!   swallows the block (`conn_swallow`). A block not ending in `\r\n` is consumed whole and refused.
//! * memcached tokenizes 24 tokens at a time (`MAX_TOKENS`): a get reads all its keys, but the
//!   `HTTP/` test of an unknown command (which closes the connection) looks at the 23rd token at most.
//! * A line with no `\n` in its first 2048 bytes closes the connection unless it starts, after at
//!   most 100 spaces, with `get ` or `gets ` (multigets are unbounded); a line longer than
//!   memcached's 16 KiB read buffer closes it as well.

use std::borrow::Cow;

use smallvec::SmallVec;

/// Longest key memcached accepts (KEY_MAX_LENGTH).
pub const KEY_MAX_LEN: usize = 250;

/// Tokens memcached splits at a time, its terminal token included (MAX_TOKENS).
const MAX_TOKENS: usize = 24;
/// Bytes memcached buffers without a line end before it closes a connection that is not sending a get.
const LINE_WAIT_MAX: usize = 2048;
/// Leading spaces memcached skips when it looks for `get ` in an over-long line.
const LEADING_SPACES_MAX: usize = 100;
/// memcached's read buffer (READ_BUFFER_SIZE): a line longer than it is never seen whole, except a get.
const READ_BUFFER_SIZE: usize = 16384;
/// `sizeof(item)` on 64-bit plus the CAS value, which memcached adds to the key (with its NUL), the
/// client flags (4 bytes unless 0) and the data (with its `\r\n`) to size an item (`item_size_ok`).
const ITEM_HEADER_LEN: usize = 48 + 8;

const ERROR: &str = "ERROR";
const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const DELETE_USAGE: &str = "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]";
const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";
const BAD_DELTA: &str = "CLIENT_ERROR invalid numeric delta argument";
const BAD_DATA_CHUNK: &str = "CLIENT_ERROR bad data chunk";
/// The refusal of an item over the size limit.
pub const TOO_LARGE: &str = "SERVER_ERROR object too large for cache";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McLimits {
    /// Largest value (memcached's `-I`, item_size_max), default 1 MiB. As in memcached it bounds the
    /// whole item: the data plus 59 bytes, the key, and 4 more when the flags are not 0 (with the
    /// default 1 MiB and a 1-byte key, 1048516 data bytes fit).
    pub max_item_size: usize,
}

impl Default for McLimits {
    fn default() -> Self {
        McLimits { max_item_size: 1024 * 1024 }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// One request, its keys and data borrowed from the read buffer. Numbers are what memcached makes of
/// them: `exptime` and `delay` are 32-bit values (a negative one expires at once), kept in an `i64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McRequest<'a> {
    /// get / gets (cas: true) / gat / gats (touch: Some(exptime)); bget is get. `gat <exptime>` with
    /// no key is valid: memcached answers `END`.
    Get { cas: bool, touch: Option<i64>, keys: SmallVec<[&'a [u8]; 8]> },
    /// set/add/replace/append/prepend/cas; `cas_unique` is 0 except for cas.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: i64,
        data: &'a [u8],
        cas_unique: u64,
        noreply: bool,
    },
    Delete { key: &'a [u8], noreply: bool },
    /// incr / decr.
    Arith { incr: bool, key: &'a [u8], delta: u64, noreply: bool },
    Touch { key: &'a [u8], exptime: i64, noreply: bool },
    /// `flush_all [delay] [noreply]`: a delay <= 0 flushes now. memcached started with `-F` answers
    /// `CLIENT_ERROR flush_all not allowed` before it reads the delay.
    FlushAll { delay: i64, noreply: bool },
    /// `version`, whatever follows it.
    Version,
    Verbosity { noreply: bool },
    /// `stats` with its optional arguments (`stats`, `stats settings`, ...).
    Stats { args: SmallVec<[&'a [u8]; 2]> },
    /// `quit`, whatever follows it: close without a reply.
    Quit,
    /// A `set`, or an `ms` in any mode, whose item would pass the size limit. memcached answers
    /// `SERVER_ERROR object too large for cache` (unless a set's `noreply`), swallows the data block
    /// (`swallow` bytes after `consumed`, which may not have arrived yet), and unlinks the key, so
    /// that the value the set meant to replace does not outlive it. A too-large add, replace,
    /// append, prepend or cas leaves the key alone: that is a [`Refused`].
    SetTooLarge { key: Cow<'a, [u8]>, swallow: usize, noreply: bool },
    /// `mg <key> <flags>*`.
    MetaGet(Meta<'a>),
    /// `ms <key> <datalen> <flags>*\r\n<data>\r\n`.
    MetaSet { meta: Meta<'a>, data: &'a [u8] },
    /// `md <key> <flags>*`.
    MetaDelete(Meta<'a>),
    /// `ma <key> <flags>*`.
    MetaArith(Meta<'a>),
    /// `mn`, whatever follows it: answered `MN`.
    MetaNoop,
    /// A command memcached 1.6.18 knows that Keel does not implement (the debug command `me`,
    /// shutdown, slabs, lru_crawler, watch, cache_memlimit, ...): the server answers a clear error.
    Unsupported { name: &'a [u8] },
}

/// A meta command's key and flags. Flags are single letters, some followed by a token
/// (`T30`, `Oopaque`); each may appear once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta<'a> {
    /// The key, decoded when the `b` flag says it was sent in base64.
    pub key: Cow<'a, [u8]>,
    pub flags: MetaFlags,
    /// The flag tokens in the order sent: replies echo `O`, `k`, `c`, ... in this order, and mg
    /// and ma apply `T` and `N` at their place in it.
    pub tokens: SmallVec<[&'a [u8]; 8]>,
}

/// What the flags of a meta command ask for (memcached's `struct _meta_flags`). Flags that only
/// ask for a field of the reply (`c`, `f`, `h`, `k`, `l`, `O`, `s`, `t`) are read from
/// [`Meta::tokens`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// `b`: the key token is base64.
    pub base64: bool,
    /// `q`: the nominal reply is not sent (mg's EN, ms's and md's HD, ma's HD or VA).
    pub quiet: bool,
    /// `v`: the reply carries the value.
    pub value: bool,
    /// `u`: the read does not count as an access.
    pub no_bump: bool,
    /// `T<exptime>`: a new expiry time.
    pub ttl: Option<i64>,
    /// `N<exptime>`: create the item on a miss, with this expiry time.
    pub vivify: Option<i64>,
    /// `R<exptime>`: win the recache token when the item's remaining time is below this.
    pub recache: Option<i64>,
    /// `F<flags>`: the client flags an ms stores.
    pub client_flags: u32,
    /// `C<cas>`: act only if the item's CAS value is this.
    pub compare_cas: Option<u64>,
    /// `M<mode>`: the mode switch of ms (E A P R S) and ma (I + D -), checked by those commands.
    pub mode: Option<u8>,
    /// `J<initial>`: the value ma creates on a miss.
    pub initial: u64,
    /// `D<delta>`: ma's delta.
    pub delta: Option<u64>,
    /// `I`: invalidate (mark stale) rather than delete or fail; Keel refuses it.
    pub invalidate: bool,
}

/// A request memcached refuses: `reply` is the line it answers (without "\r\n"; None when memcached sends
/// nothing, e.g. noreply), `consumed` the bytes to drop now, `swallow` more bytes to drop that belong to a
/// refused storage command's data block and may not have arrived yet (memcached's conn_swallow), and
/// `close` when memcached closes the connection after it.
///
/// `swallow` counts from the end of `consumed`, whether those bytes are buffered yet or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub reply: Option<&'static str>,
    pub consumed: usize,
    pub swallow: usize,
    pub close: bool,
}

impl Refused {
    /// A refusal answered with `reply` unless the command said `noreply`.
    fn new(reply: &'static str, noreply: bool, consumed: usize) -> Self {
        Refused { reply: (!noreply).then_some(reply), consumed, swallow: 0, close: false }
    }

    fn error(consumed: usize) -> Self {
        Refused::new(ERROR, false, consumed)
    }

    fn close(consumed: usize) -> Self {
        Refused { reply: None, consumed, swallow: 0, close: true }
    }
}

/// Parses the request at the start of `buf`.
///
/// `Ok(None)`: incomplete, nothing consumed; call again with more bytes. `Ok(Some((req, consumed)))`:
/// one request from the first `consumed` bytes. `Err`: a request memcached refuses; drop what it says
/// and go on reading unless it says `close`.
pub fn parse<'a>(buf: &'a [u8], limits: &McLimits) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > LINE_WAIT_MAX && !starts_multiget(buf) {
            return Err(Refused::close(buf.len()));
        }
        return Ok(None);
    };
    let line_len = nl + 1;
    // memcached would have seen the first 16 KiB without a line end and judged them as above.
    if nl >= READ_BUFFER_SIZE && !starts_multiget(buf) {
        return Err(Refused::close(line_len));
    }
    let mut line = &buf[..nl];
    if nl > 1 && line[nl - 1] == b'\r' {
        line = &line[..nl - 1];
    }
    if let Some(nul) = line.iter().position(|&b| b == 0) {
        line = &line[..nul];
    }
    parse_line(buf, line, line_len, limits)
}

/// memcached's exception to its 2048-byte rule: an ASCII multiget may be of any length.
fn starts_multiget(buf: &[u8]) -> bool {
    let spaces = buf.iter().take_while(|&&b| b == b' ').count();
    let rest = &buf[spaces..];
    spaces <= LEADING_SPACES_MAX && (rest.starts_with(b"get ") || rest.starts_with(b"gets "))
}

/// The tokens of a line (without its line end), as memcached's `tokenize_command` finds them.
fn tokens(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|t| !t.is_empty())
}

/// The last token is `noreply` (memcached's `set_noreply_maybe`).
fn noreply(t: &[&[u8]]) -> bool {
    t.last() == Some(&&b"noreply"[..])
}

fn parse_line<'a>(
    buf: &'a [u8],
    line: &'a [u8],
    line_len: usize,
    limits: &McLimits,
) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    // The first window of tokens, as memcached's process_command_ascii sees them: its `ntokens` is
    // `n + 1` (a terminal token), and counts are checked on that window.
    let t: SmallVec<[&[u8]; MAX_TOKENS]> = tokens(line).take(MAX_TOKENS - 1).collect();
    let n = t.len();
    let Some(&cmd) = t.first() else { return Err(Refused::error(line_len)) };
    if cmd.len() < 2 {
        return Err(Refused::error(line_len));
    }
    let done = |req| Ok(Some((req, line_len)));
    let unsupported = || Ok(Some((McRequest::Unsupported { name: cmd }, line_len)));
    // Dispatched as memcached does, by first letter, each branch answering ERROR for the names it
    // does not know; only a name matched by no branch gets the HTTP test.
    match cmd[0] {
        b'm' if cmd.len() == 2 => match cmd[1] {
            b'g' => meta_get(&t, line_len),
            b's' => meta_set(buf, &t, line_len, limits),
            b'd' => meta_delete(&t, line_len),
            b'a' => meta_arith(&t, line_len),
            b'n' => done(McRequest::MetaNoop),
            b'e' => unsupported(),
            _ => Err(Refused::error(line_len)),
        },
        b'g' => {
            if n < 2 {
                return Err(Refused::error(line_len));
            }
            match cmd {
                b"get" => get(line, false, false, line_len),
                b"gets" => get(line, true, false, line_len),
                b"gat" => get(line, false, true, line_len),
                b"gats" => get(line, true, true, line_len),
                _ => Err(Refused::error(line_len)),
            }
        }
        b's' => match cmd {
            b"set" => store(buf, &t, line_len, StoreKind::Set, limits),
            b"stats" => done(McRequest::Stats { args: tokens(line).skip(1).collect() }),
            b"shutdown" | b"slabs" => unsupported(),
            _ => Err(Refused::error(line_len)),
        },
        b'a' => match cmd {
            b"add" => store(buf, &t, line_len, StoreKind::Add, limits),
            b"append" => store(buf, &t, line_len, StoreKind::Append, limits),
            _ => Err(Refused::error(line_len)),
        },
        b'c' => match cmd {
            b"cas" => store(buf, &t, line_len, StoreKind::Cas, limits),
            b"cache_memlimit" => unsupported(),
            _ => Err(Refused::error(line_len)),
        },
        b'i' => match cmd {
            b"incr" => arith(&t, true, line_len),
            _ => Err(Refused::error(line_len)),
        },
        b'd' => match cmd {
            b"delete" => delete(&t, line_len),
            b"decr" => arith(&t, false, line_len),
            _ => Err(Refused::error(line_len)),
        },
        b't' => match cmd {
            b"touch" => touch(&t, line_len),
            _ => Err(Refused::error(line_len)),
        },
        _ => match cmd {
            b"replace" => store(buf, &t, line_len, StoreKind::Replace, limits),
            b"prepend" => store(buf, &t, line_len, StoreKind::Prepend, limits),
            b"bget" if n >= 2 => get(line, false, false, line_len),
            b"flush_all" => flush_all(&t, line_len),
            b"version" => done(McRequest::Version),
            b"quit" => done(McRequest::Quit),
            b"verbosity" => verbosity(&t, line_len),
            // refresh_certs is there in Debian's build, which has TLS.
            b"lru_crawler" | b"watch" | b"lru" | b"refresh_certs" => unsupported(),
            // A browser or HTTP client: close without a word.
            _ if t[n - 1].starts_with(b"HTTP/") => Err(Refused::close(line_len)),
            _ => Err(Refused::error(line_len)),
        },
    }
}

/// get, gets, gat, gats, bget: at least one token after the name (checked by the caller).
fn get<'a>(
    line: &'a [u8],
    cas: bool,
    touch: bool,
    line_len: usize,
) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    // memcached goes on tokenizing past its first window: every token is a key.
    let mut rest = tokens(line).skip(1);
    let touch = if touch {
        // The caller checked that a token follows the name.
        let exptime = rest.next().and_then(safe_strtol).ok_or(Refused::new(BAD_EXPTIME, false, line_len))?;
        Some(i64::from(exptime))
    } else {
        None
    };
    let mut keys = SmallVec::new();
    for key in rest {
        // Keys before a long one have been looked up (and touched): only the error is answered.
        if key.len() > KEY_MAX_LEN {
            return Err(Refused::new(BAD_FORMAT, false, line_len));
        }
        keys.push(key);
    }
    Ok(Some((McRequest::Get { cas, touch, keys }, line_len)))
}

/// Whether memcached's `item_size_ok` refuses an item: `nbytes` counts the data's `\r\n`.
fn too_large(nkey: usize, flags: u32, nbytes: usize, limits: &McLimits) -> bool {
    let suffix = if flags == 0 { 0 } else { 4 };
    ITEM_HEADER_LEN + nkey + 1 + suffix + nbytes > limits.max_item_size
}

/// set, add, replace, append, prepend, cas (memcached's process_update_command).
fn store<'a>(
    buf: &'a [u8],
    t: &[&'a [u8]],
    line_len: usize,
    kind: StoreKind,
    limits: &McLimits,
) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    let args = if kind == StoreKind::Cas { 6 } else { 5 };
    if t.len() != args && t.len() != args + 1 {
        return Err(Refused::error(line_len));
    }
    let noreply = noreply(t);
    let refuse = |reply| Refused::new(reply, noreply, line_len);
    let key = t[1];
    if key.len() > KEY_MAX_LEN {
        return Err(refuse(BAD_FORMAT));
    }
    let (Some(flags), Some(exptime), Some(vlen)) = (safe_strtoul(t[2]), safe_strtol(t[3]), safe_strtol(t[4])) else {
        return Err(refuse(BAD_FORMAT));
    };
    let cas_unique = if kind == StoreKind::Cas { safe_strtoull(t[5]).ok_or(refuse(BAD_FORMAT))? } else { 0 };
    let Some(nbytes) = data_block_len(vlen) else { return Err(refuse(BAD_FORMAT)) };
    if too_large(key.len(), flags, nbytes, limits) {
        if kind == StoreKind::Set {
            return Ok(Some((McRequest::SetTooLarge { key: Cow::Borrowed(key), swallow: nbytes, noreply }, line_len)));
        }
        return Err(Refused { swallow: nbytes, ..refuse(TOO_LARGE) });
    }
    let end = line_len + nbytes;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(Refused::new(BAD_DATA_CHUNK, noreply, end));
    }
    let data = &buf[line_len..end - 2];
    let exptime = i64::from(exptime);
    Ok(Some((McRequest::Store { kind, key, flags, exptime, data, cas_unique, noreply }, end)))
}

/// The data block a `<bytes>` of `vlen` announces, `\r\n` included, or `None` when memcached refuses
/// the length (negative, or above INT_MAX - 2).
fn data_block_len(vlen: i32) -> Option<usize> {
    if !(0..=i32::MAX - 2).contains(&vlen) {
        return None;
    }
    // 0 <= vlen <= i32::MAX - 2.
    Some(vlen as usize + 2)
}

/// The most tokens a meta command may have, its name and the terminal token included
/// (memcached's MFLAG_MAX_OPT_LENGTH against its `ntokens`).
const META_TOKENS_MAX: usize = 20;
/// The longest opaque token (`O...`) a meta reply echoes (MFLAG_MAX_OPAQUE_LENGTH).
pub const OPAQUE_MAX_LEN: usize = 32;

const DUPLICATE_FLAG: &str = "CLIENT_ERROR duplicate flag";
const INVALID_FLAG: &str = "CLIENT_ERROR invalid flag";
const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
const INVALID_OR_DUPLICATE: &str = "CLIENT_ERROR invalid or duplicate flag";
const FLAGS_TOO_LONG: &str = "CLIENT_ERROR options flags too long";
/// The refusal of an `O` token longer than [`OPAQUE_MAX_LEN`].
pub const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";
/// Flags whose meaning Keel cannot keep: the stale mark of `I` and the win token an `mg` with `N`
/// leaves on the empty item it creates would be lost at a restart or on a replica, where memcached
/// loses the whole item; a client would then read a stale or empty value as good.
const NO_INVALIDATE: &str = "CLIENT_ERROR Keel does not support the I flag";
const NO_VIVIFY: &str = "CLIENT_ERROR Keel does not support the N flag of mg";

/// memcached's `_meta_flag_preparse` over the flag tokens: the key (decoded when `b` asks) and the
/// flags, or the error line. A repeated flag, a first byte past 126 or an unknown flag is refused
/// at once; an unreadable number is refused once every flag is read, with the text of the last one.
fn meta_flags<'a>(key: &'a [u8], flag_tokens: &[&'a [u8]]) -> Result<(Cow<'a, [u8]>, MetaFlags), &'static str> {
    let mut f = MetaFlags::default();
    let mut key = Cow::Borrowed(key);
    let mut seen = [false; 127];
    // memcached's has_error and errstr: a bad client flags token fails with whatever text is there.
    let mut error: Option<&'static str> = None;
    let mut errstr = BAD_FORMAT;
    for tok in flag_tokens {
        let o = tok[0];
        if o >= 127 || seen[o as usize] {
            return Err(DUPLICATE_FLAG);
        }
        seen[o as usize] = true;
        let arg = &tok[1..];
        let mut fail = |text: Option<&'static str>| {
            if let Some(text) = text {
                errstr = text;
            }
            error = Some(errstr);
        };
        match o {
            b'b' => {
                f.base64 = true;
                match base64_decode(&key) {
                    Some(decoded) => key = Cow::Owned(decoded),
                    None => fail(Some("CLIENT_ERROR error decoding key")),
                }
            }
            b'N' | b'T' | b'R' => match safe_strtol(arg) {
                Some(t) => {
                    let t = Some(i64::from(t));
                    match o {
                        b'N' => f.vivify = t,
                        b'T' => f.ttl = t,
                        _ => f.recache = t,
                    }
                }
                None => fail(Some(BAD_TOKEN)),
            },
            b'O' | b'P' | b'L' | b'k' | b's' | b't' | b'c' | b'f' | b'h' | b'l' => {}
            b'v' => f.value = true,
            b'u' => f.no_bump = true,
            b'q' => f.quiet = true,
            b'F' => match safe_strtoul(arg) {
                Some(flags) => f.client_flags = flags,
                None => fail(None),
            },
            b'C' => match safe_strtoull(arg) {
                Some(cas) => f.compare_cas = Some(cas),
                None => fail(Some(BAD_TOKEN)),
            },
            b'M' if tok.len() == 2 => f.mode = Some(tok[1]),
            b'M' => fail(Some("CLIENT_ERROR incorrect length for M token")),
            b'J' => match safe_strtoull(arg) {
                Some(initial) => f.initial = initial,
                None => fail(Some("CLIENT_ERROR invalid numeric initial value")),
            },
            b'D' => match safe_strtoull(arg) {
                Some(delta) => f.delta = Some(delta),
                None => fail(Some("CLIENT_ERROR invalid numeric delta value")),
            },
            b'I' => f.invalidate = true,
            _ => return Err(INVALID_FLAG),
        }
    }
    match error {
        Some(text) => Err(text),
        None => Ok((key, f)),
    }
}

/// The checks mg, md and ma share before their flags: a key token of legal length, and at most
/// [`META_TOKENS_MAX`] tokens. `too_long` is the command's text for the second.
fn meta_line(t: &[&[u8]], line_len: usize, too_long: &'static str) -> Result<(), Refused> {
    if t.len() < 2 {
        return Err(Refused::error(line_len));
    }
    if t[1].len() > KEY_MAX_LEN {
        return Err(Refused::new(BAD_FORMAT, false, line_len));
    }
    if t.len() + 1 > META_TOKENS_MAX {
        return Err(Refused::new(too_long, false, line_len));
    }
    Ok(())
}

fn meta_of<'a>(t: &[&'a [u8]], first_flag: usize) -> Result<Meta<'a>, &'static str> {
    let (key, flags) = meta_flags(t[1], &t[first_flag..])?;
    Ok(Meta { key, flags, tokens: t[first_flag..].iter().copied().collect() })
}

/// `mg`. A too-long opaque token is refused by the server when it writes the reply, as memcached
/// does, after the `T` flags before it took effect.
fn meta_get<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    meta_line(t, line_len, "CLIENT_ERROR options flags are too long")?;
    let meta = meta_of(t, 2).map_err(|text| Refused::new(text, false, line_len))?;
    if meta.flags.vivify.is_some() {
        return Err(Refused::new(NO_VIVIFY, false, line_len));
    }
    Ok(Some((McRequest::MetaGet(meta), line_len)))
}

/// Whether a token of `tokens` is an opaque token too long to echo.
pub fn opaque_too_long(tokens: &[&[u8]]) -> bool {
    tokens.iter().any(|t| t[0] == b'O' && t.len() > OPAQUE_MAX_LEN)
}

/// `md`: every flag error reads `invalid or duplicate flag`; the opaque token is checked before
/// the item is looked up.
fn meta_delete<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    meta_line(t, line_len, FLAGS_TOO_LONG)?;
    let meta = meta_of(t, 2).map_err(|_| Refused::new(INVALID_OR_DUPLICATE, false, line_len))?;
    if opaque_too_long(&meta.tokens) {
        return Err(Refused::new(OPAQUE_TOO_LONG, false, line_len));
    }
    if meta.flags.invalidate {
        return Err(Refused::new(NO_INVALIDATE, false, line_len));
    }
    Ok(Some((McRequest::MetaDelete(meta), line_len)))
}

/// `ma`: every flag error reads `invalid or duplicate flag`, then the mode is checked. A too-long
/// opaque token is refused by the server after the arithmetic, as memcached does.
fn meta_arith<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    meta_line(t, line_len, FLAGS_TOO_LONG)?;
    let meta = meta_of(t, 2).map_err(|_| Refused::new(INVALID_OR_DUPLICATE, false, line_len))?;
    if !matches!(meta.flags.mode, None | Some(b'I' | b'+' | b'D' | b'-')) {
        return Err(Refused::new("CLIENT_ERROR invalid mode for ma M token", false, line_len));
    }
    Ok(Some((McRequest::MetaArith(meta), line_len)))
}

/// `ms`. Once the line has a key of legal length, a valid length and at most 19 tokens, every
/// refusal swallows the data block, as memcached does; before that, none does, and the block is
/// then read as commands. Errors are answered even with `q`.
fn meta_set<'a>(
    buf: &'a [u8],
    t: &[&'a [u8]],
    line_len: usize,
    limits: &McLimits,
) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    if t.len() < 2 {
        return Err(Refused::error(line_len));
    }
    let bad_format = Refused::new(BAD_FORMAT, false, line_len);
    if t[1].len() > KEY_MAX_LEN || t.len() == 2 {
        return Err(bad_format);
    }
    if t.len() + 1 > META_TOKENS_MAX {
        return Err(Refused::new(FLAGS_TOO_LONG, false, line_len));
    }
    let Some(nbytes) = safe_strtol(t[2]).and_then(data_block_len) else { return Err(bad_format) };
    let swallowing = |text| Refused { reply: Some(text), consumed: line_len, swallow: nbytes, close: false };
    let meta = meta_of(t, 3).map_err(swallowing)?;
    if opaque_too_long(&meta.tokens) {
        return Err(swallowing(OPAQUE_TOO_LONG));
    }
    if !matches!(meta.flags.mode, None | Some(b'E' | b'A' | b'P' | b'R' | b'S')) {
        return Err(swallowing("CLIENT_ERROR invalid mode for ms M token"));
    }
    if meta.flags.invalidate {
        return Err(swallowing(NO_INVALIDATE));
    }
    if too_large(meta.key.len(), meta.flags.client_flags, nbytes, limits) {
        return Ok(Some((McRequest::SetTooLarge { key: meta.key, swallow: nbytes, noreply: false }, line_len)));
    }
    let end = line_len + nbytes;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(Refused::new(BAD_DATA_CHUNK, false, end));
    }
    Ok(Some((McRequest::MetaSet { meta, data: &buf[line_len..end - 2] }, end)))
}

/// memcached's `base64_decode` of a key: bytes outside the alphabet are skipped, the rest must
/// come in fours, and decoding stops at the first group with padding (`=` counts as a zero digit
/// there). `None` where memcached's returns 0: nothing to decode, a count not a multiple of four,
/// or three or more `=` in a group.
pub fn base64_decode(src: &[u8]) -> Option<Vec<u8>> {
    let digit = |b: u8| match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    };
    let count = src.iter().filter(|&&b| digit(b).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let (mut n, mut pad) = (0, 0);
    for &b in src {
        let Some(d) = digit(b) else { continue };
        if b == b'=' {
            pad += 1;
        }
        block[n] = d;
        n += 1;
        if n == 4 {
            out.extend_from_slice(&[block[0] << 2 | block[1] >> 4, block[1] << 4 | block[2] >> 2, block[2] << 6 | block[3]]);
            n = 0;
            if pad > 0 {
                if pad > 2 {
                    return None;
                }
                out.truncate(out.len() - pad);
                break;
            }
        }
    }
    Some(out)
}

/// memcached's `base64_encode`, as meta replies echo a binary key.
pub fn base64_encode(src: &[u8], out: &mut Vec<u8>) {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in src.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        out.push(TABLE[usize::from(b[0] >> 2)]);
        out.push(TABLE[usize::from((b[0] & 0x03) << 4 | b[1] >> 4)]);
        out.push(if chunk.len() > 1 { TABLE[usize::from((b[1] & 0x0f) << 2 | b[2] >> 6)] } else { b'=' });
        out.push(if chunk.len() > 2 { TABLE[usize::from(b[2] & 0x3f)] } else { b'=' });
    }
}

fn delete<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    let n = t.len();
    if !(2..=4).contains(&n) {
        return Err(Refused::error(line_len));
    }
    // The old hold time is allowed only as 0.
    let mut noreply = false;
    if n > 2 {
        let hold_is_zero = t[2] == b"0";
        noreply = self::noreply(t);
        let valid = (n == 3 && (hold_is_zero || noreply)) || (n == 4 && hold_is_zero && noreply);
        if !valid {
            return Err(Refused::new(DELETE_USAGE, noreply, line_len));
        }
    }
    let key = t[1];
    if key.len() > KEY_MAX_LEN {
        return Err(Refused::new(BAD_FORMAT, noreply, line_len));
    }
    Ok(Some((McRequest::Delete { key, noreply }, line_len)))
}

/// The key and `noreply` of `<name> <key> <number> [noreply]` (incr, decr, touch), once the token
/// count and the key's length pass.
fn key_and_number<'a>(t: &[&'a [u8]], line_len: usize) -> Result<(&'a [u8], bool), Refused> {
    if t.len() != 3 && t.len() != 4 {
        return Err(Refused::error(line_len));
    }
    let noreply = noreply(t);
    let key = t[1];
    if key.len() > KEY_MAX_LEN {
        return Err(Refused::new(BAD_FORMAT, noreply, line_len));
    }
    Ok((key, noreply))
}

fn arith<'a>(t: &[&'a [u8]], incr: bool, line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    let (key, noreply) = key_and_number(t, line_len)?;
    let delta = safe_strtoull(t[2]).ok_or(Refused::new(BAD_DELTA, noreply, line_len))?;
    Ok(Some((McRequest::Arith { incr, key, delta, noreply }, line_len)))
}

fn touch<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    let (key, noreply) = key_and_number(t, line_len)?;
    let exptime = safe_strtol(t[2]).ok_or(Refused::new(BAD_EXPTIME, noreply, line_len))?;
    Ok(Some((McRequest::Touch { key, exptime: i64::from(exptime), noreply }, line_len)))
}

fn flush_all<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    let n = t.len();
    if !(1..=3).contains(&n) {
        return Err(Refused::error(line_len));
    }
    let noreply = noreply(t);
    // A delay is read whenever the line holds more than the name and `noreply`: `flush_all 10 20` is
    // a delay of 10, `flush_all noreply 10` an invalid one.
    let delay = if n != if noreply { 2 } else { 1 } {
        safe_strtol(t[1]).ok_or(Refused::new(BAD_EXPTIME, noreply, line_len))?
    } else {
        0
    };
    Ok(Some((McRequest::FlushAll { delay: i64::from(delay), noreply }, line_len)))
}

fn verbosity<'a>(t: &[&'a [u8]], line_len: usize) -> Result<Option<(McRequest<'a>, usize)>, Refused> {
    if t.len() != 2 && t.len() != 3 {
        return Err(Refused::error(line_len));
    }
    let noreply = noreply(t);
    // The level itself only sets memcached's log verbosity.
    safe_strtoul(t[1]).ok_or(Refused::new(BAD_FORMAT, noreply, line_len))?;
    Ok(Some((McRequest::Verbosity { noreply }, line_len)))
}

/// C `isspace` in the C locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// glibc `strtoull`/`strtol` in base 10 on a token (a C string: the token has no NUL), with the
/// checks memcached's `safe_strto*` add: the sign, the magnitude (`None` past `u64::MAX`: ERANGE) and
/// whether it passed the end check (a C blank or the end of the token right after the digits).
#[inline]
fn c_strto(tok: &[u8]) -> Option<(bool, u64)> {
    let mut i = tok.iter().take_while(|&&b| is_c_space(b)).count();
    let negative = match tok.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let digits = tok[i..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &tok[i..i + digits] {
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    match tok.get(i + digits) {
        None => Some((negative, v)),
        Some(&b) if is_c_space(b) => Some((negative, v)),
        Some(_) => None,
    }
}

/// memcached's `safe_strtoull`: `strtoull`, then a result that looks negative is refused when the
/// token holds a `-` anywhere.
fn safe_strtoull(tok: &[u8]) -> Option<u64> {
    let (negative, magnitude) = c_strto(tok)?;
    let v = if negative { magnitude.wrapping_neg() } else { magnitude };
    if (v as i64) < 0 && tok.contains(&b'-') {
        return None;
    }
    Some(v)
}

/// The number memcached's incr and decr read from an item's value: `safe_strtoull` over its bytes,
/// which memcached keeps followed by `\r\n`. An empty value is not a number; one where `strtoull`
/// converts nothing reads as 0 when its first byte is blank (`strtoull` then leaves its end at the
/// start, which passes memcached's check).
pub fn item_number(value: &[u8]) -> Option<u64> {
    let first = *value.first()?;
    if let Some(n) = safe_strtoull(value) {
        return Some(n);
    }
    let rest = &value[value.iter().take_while(|&&b| is_c_space(b)).count()..];
    let rest = rest.strip_prefix(b"+").or_else(|| rest.strip_prefix(b"-")).unwrap_or(rest);
    let converts = rest.first().is_some_and(u8::is_ascii_digit);
    (!converts && is_c_space(first)).then_some(0)
}

/// memcached's `safe_strtoul` into a `uint32_t`: as [`safe_strtoull`] (`unsigned long` is 64-bit),
/// then truncated to 32 bits.
fn safe_strtoul(tok: &[u8]) -> Option<u32> {
    safe_strtoull(tok).map(|v| v as u32)
}

/// memcached's `safe_strtol` into an `int32_t`: `strtol` (64-bit `long`, ERANGE outside it), then
/// truncated to 32 bits.
fn safe_strtol(tok: &[u8]) -> Option<i32> {
    let (negative, magnitude) = c_strto(tok)?;
    let v = if negative {
        if magnitude > i64::MAX as u64 + 1 {
            return None;
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(v as i32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const LIMITS: McLimits = McLimits { max_item_size: 1024 * 1024 };

    fn ok(buf: &[u8]) -> (McRequest<'_>, usize) {
        parse(buf, &LIMITS).unwrap().unwrap()
    }

    fn refused(buf: &[u8]) -> Refused {
        parse(buf, &LIMITS).unwrap_err()
    }

    fn keys<'a>(list: &[&'a [u8]]) -> SmallVec<[&'a [u8]; 8]> {
        list.iter().copied().collect()
    }

    // The expected replies below are memcached 1.6.18's, probed on Debian's build.

    #[test]
    fn retrievals() {
        assert_eq!(ok(b"get a b\r\n"), (McRequest::Get { cas: false, touch: None, keys: keys(&[b"a", b"b"]) }, 9));
        assert_eq!(ok(b"gets  a\n").0, McRequest::Get { cas: true, touch: None, keys: keys(&[b"a"]) });
        assert_eq!(ok(b"gat -1 a\r\n").0, McRequest::Get { cas: false, touch: Some(-1), keys: keys(&[b"a"]) });
        assert_eq!(ok(b"gats 10\r\n").0, McRequest::Get { cas: true, touch: Some(10), keys: keys(&[]) });
        // Past memcached's 24-token window, every token is still a key.
        let many: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
        let line = format!("get {}\r\n", many.join(" "));
        let McRequest::Get { keys, .. } = ok(line.as_bytes()).0 else { panic!() };
        assert_eq!(keys.len(), 40);
        assert_eq!(refused(b"get\r\n"), Refused::error(5));
        let long = format!("get {}\r\n", "k".repeat(KEY_MAX_LEN + 1));
        assert_eq!(refused(long.as_bytes()).reply, Some(BAD_FORMAT));
        assert_eq!(refused(b"gat x a\r\n").reply, Some(BAD_EXPTIME));
    }

    #[test]
    fn storage() {
        let (req, n) = ok(b"set k 5 100 3\r\nabc\r\nget");
        assert_eq!(n, 20);
        assert_eq!(
            req,
            McRequest::Store {
                kind: StoreKind::Set,
                key: b"k",
                flags: 5,
                exptime: 100,
                data: b"abc",
                cas_unique: 0,
                noreply: false
            }
        );
        let McRequest::Store { kind, cas_unique, noreply, .. } = ok(b"cas k 0 0 1 77 noreply\r\nx\r\n").0 else {
            panic!()
        };
        assert_eq!((kind, cas_unique, noreply), (StoreKind::Cas, 77, true));
        // The data block may hold line ends; it is waited for whole.
        assert_eq!(parse(b"append k 0 0 4\r\na\r\n", &LIMITS), Ok(None));
        assert!(matches!(ok(b"append k 0 0 4\r\na\r\nb\r\n").0, McRequest::Store { data: b"a\r\nb", .. }));
        // flags are truncated to 32 bits, as memcached's safe_strtoul into a uint32_t.
        assert!(matches!(ok(b"set k 4294967301 0 0\r\n\r\n").0, McRequest::Store { flags: 5, .. }));
    }

    #[test]
    fn storage_refusals() {
        assert_eq!(refused(b"set k 0 0\r\n"), Refused::error(11));
        assert_eq!(refused(b"set k x 0 1\r\nx\r\n"), Refused::new(BAD_FORMAT, false, 13));
        assert_eq!(refused(b"set k 0 0 -1\r\n").reply, Some(BAD_FORMAT));
        // A refused line reads no data block: it is then read as a command.
        assert_eq!(refused(b"set k 0 0 1 noreply x\r\n"), Refused::error(23));
        assert_eq!(refused(b"set k 0 0 1\r\nxy\r\n"), Refused::new(BAD_DATA_CHUNK, false, 16));
        assert_eq!(refused(b"set k 0 0 x noreply\r\n"), Refused::new(BAD_FORMAT, true, 21));
        // Too large: swallowed, whether the block has arrived or not; a set also unlinks its key.
        let small = McLimits { max_item_size: 100 };
        let line = b"add k 0 0 100\r\n";
        assert_eq!(parse(line, &small), Err(Refused { reply: Some(TOO_LARGE), consumed: 15, swallow: 102, close: false }));
        assert_eq!(
            parse(b"set k 0 0 100\r\n", &small),
            Ok(Some((McRequest::SetTooLarge { key: Cow::Borrowed(b"k"), swallow: 102, noreply: false }, 15)))
        );
    }

    #[test]
    fn other_commands() {
        assert_eq!(ok(b"delete k\r\n").0, McRequest::Delete { key: b"k", noreply: false });
        assert_eq!(ok(b"delete k 0 noreply\r\n").0, McRequest::Delete { key: b"k", noreply: true });
        assert_eq!(refused(b"delete k 5\r\n").reply, Some(DELETE_USAGE));
        assert_eq!(ok(b"incr k 18446744073709551615\r\n").0, McRequest::Arith { incr: true, key: b"k", delta: u64::MAX, noreply: false });
        assert_eq!(refused(b"decr k abc\r\n").reply, Some(BAD_DELTA));
        assert_eq!(refused(b"incr k -1\r\n").reply, Some(BAD_DELTA));
        assert_eq!(ok(b"touch k 10 noreply\r\n").0, McRequest::Touch { key: b"k", exptime: 10, noreply: true });
        assert_eq!(ok(b"flush_all\r\n").0, McRequest::FlushAll { delay: 0, noreply: false });
        assert_eq!(ok(b"flush_all 10 noreply\r\n").0, McRequest::FlushAll { delay: 10, noreply: true });
        assert_eq!(ok(b"version foo bar\r\n").0, McRequest::Version);
        assert_eq!(ok(b"verbosity 1 noreply\r\n").0, McRequest::Verbosity { noreply: true });
        assert_eq!(refused(b"verbosity\r\n"), Refused::error(11));
        assert_eq!(ok(b"stats\r\n").0, McRequest::Stats { args: SmallVec::new() });
        assert_eq!(ok(b"quit\r\n").0, McRequest::Quit);
        let McRequest::MetaGet(meta) = ok(b"mg k v\r\n").0 else { panic!() };
        assert_eq!((&meta.key[..], meta.flags.value, &meta.tokens[..]), (&b"k"[..], true, &[&b"v"[..]][..]));
        // ms carries a data block: consumed with it.
        let (req, n) = ok(b"ms k 2\r\nab\r\nget k\r\n");
        assert!(matches!(req, McRequest::MetaSet { data: b"ab", .. }) && n == 12);
    }

    #[test]
    fn item_values_read_as_incr_reads_them() {
        for (value, expected) in [
            (&b"0"[..], Some(0)),
            (b"42", Some(42)),
            (b"42  ", Some(42)),
            (b"  7", Some(7)),
            (b"\x0b7", Some(7)),
            (b"+5", Some(5)),
            (b"18446744073709551615", Some(u64::MAX)),
            (b"18446744073709551616", None),
            (b"-1", None),
            (b"abc", None),
            (b"12abc", None),
            (b" 5x", None),
            (b"", None),
            (b" ", Some(0)),
            (b" x5", Some(0)),
            (b"+", None),
        ] {
            assert_eq!(item_number(value), expected, "{}", String::from_utf8_lossy(value));
        }
    }

    #[test]
    fn lines() {
        assert_eq!(parse(b"get k", &LIMITS), Ok(None));
        assert_eq!(refused(b"\r\n"), Refused::error(2));
        assert_eq!(refused(b"\n"), Refused::error(1));
        assert_eq!(refused(b"GET k\r\n"), Refused::error(7));
        assert_eq!(refused(b"bogus\r\n"), Refused::error(7));
        assert_eq!(refused(b"GET / HTTP/1.1\r\n"), Refused::close(16));
        // No line end in 2048 bytes closes, unless the line is a multiget.
        let junk = vec![b'x'; LINE_WAIT_MAX + 1];
        assert_eq!(refused(&junk), Refused::close(junk.len()));
        let mut multiget = b"get ".to_vec();
        multiget.extend(std::iter::repeat_n(b'k', LINE_WAIT_MAX));
        assert_eq!(parse(&multiget, &LIMITS), Ok(None));
    }

    /// A well-formed request: its bytes, and the request they parse to.
    fn request() -> impl Strategy<Value = (Vec<u8>, String)> {
        let key = "[a-z0-9:_]{1,20}";
        let data = proptest::collection::vec(any::<u8>(), 0..64);
        prop_oneof![
            (key, 0u32..u32::MAX, -5i64..100_000, data, any::<bool>(), 0usize..5).prop_map(
                |(key, flags, exptime, data, noreply, kind)| {
                    let name = ["set", "add", "replace", "append", "prepend"][kind];
                    let tail = if noreply { " noreply" } else { "" };
                    let mut bytes = format!("{name} {key} {flags} {exptime} {}{tail}\r\n", data.len()).into_bytes();
                    bytes.extend_from_slice(&data);
                    bytes.extend_from_slice(b"\r\n");
                    (bytes, format!("store {name} {key} {flags} {exptime} {data:?} {noreply}"))
                }
            ),
            proptest::collection::vec(key, 1..30).prop_map(|keys| {
                (format!("get {}\r\n", keys.join(" ")).into_bytes(), format!("get {keys:?}"))
            }),
            (key, any::<u64>(), any::<bool>()).prop_map(|(key, delta, incr)| {
                let name = if incr { "incr" } else { "decr" };
                (format!("{name} {key} {delta}\r\n").into_bytes(), format!("arith {incr} {key} {delta}"))
            }),
        ]
    }

    fn describe(req: &McRequest<'_>) -> String {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match req {
            McRequest::Store { kind, key, flags, exptime, data, noreply, .. } => {
                let name = format!("{kind:?}").to_lowercase();
                format!("store {name} {} {flags} {exptime} {data:?} {noreply}", text(key))
            }
            McRequest::Get { keys, .. } => format!("get {:?}", keys.iter().map(|k| text(k)).collect::<Vec<_>>()),
            McRequest::Arith { incr, key, delta, .. } => format!("arith {incr} {} {delta}", text(key)),
            other => format!("{other:?}"),
        }
    }

    proptest! {
        /// A request parses whole from its bytes, and every strict prefix waits for more.
        #[test]
        fn requests_parse_whole_and_prefixes_wait((bytes, expected) in request()) {
            let (req, consumed) = parse(&bytes, &LIMITS).unwrap().unwrap();
            prop_assert_eq!(consumed, bytes.len());
            prop_assert_eq!(describe(&req), expected);
            for cut in 0..bytes.len() {
                prop_assert_eq!(parse(&bytes[..cut], &LIMITS), Ok(None), "prefix {}", cut);
            }
        }
    }

    // The tests below pin what memcached 1.6.18 (Debian's build) answered when probed with these exact
    // bytes, each followed by `mn\r\n` to see where it went on reading.

    fn store_req(buf: &[u8]) -> McRequest<'_> {
        let (req, n) = ok(buf);
        assert_eq!(n, buf.len(), "{:?}", String::from_utf8_lossy(buf));
        req
    }

    #[test]
    fn probed_retrievals() {
        assert_eq!(ok(b"bget b\r\n").0, McRequest::Get { cas: false, touch: None, keys: keys(&[b"b"]) });
        // gat takes the exptime first: `gat a 100` is an invalid exptime.
        let gat = McRequest::Get { cas: false, touch: Some(100), keys: keys(&[b"a", b"b"]) };
        assert_eq!(ok(b"gat 100 a b\r\n").0, gat);
        assert_eq!(refused(b"gat a 100\r\n"), Refused::new(BAD_EXPTIME, false, 11));
        assert_eq!(ok(b"gat 10\r\n").0, McRequest::Get { cas: false, touch: Some(10), keys: keys(&[]) });
        for bad in [&b"get\r\n"[..], b"gets\r\n", b"gat\r\n", b"gxx a\r\n", b"get\tb\r\n", b"bget\r\n"] {
            assert_eq!(refused(bad), Refused::error(bad.len()), "{:?}", String::from_utf8_lossy(bad));
        }
        // An HTTP request line that starts with `get` is a get.
        let get = McRequest::Get { cas: false, touch: None, keys: keys(&[b"/", b"HTTP/1.1"]) };
        assert_eq!(ok(b"get / HTTP/1.1\r\n").0, get);
        // A key of 251 bytes anywhere refuses the whole get; 250 is fine.
        let k250 = "k".repeat(KEY_MAX_LEN);
        let k251 = "k".repeat(KEY_MAX_LEN + 1);
        assert!(matches!(ok(format!("get {k250}\r\n").as_bytes()).0, McRequest::Get { .. }));
        for line in [format!("get a {k251} b\r\n"), format!("gets {k251}\r\n"), format!("gat 10 {k251}\r\n")] {
            assert_eq!(refused(line.as_bytes()), Refused::new(BAD_FORMAT, false, line.len()));
        }
        // Keys are borrowed from the buffer.
        let buf = b"get abc\r\n";
        let McRequest::Get { keys, .. } = ok(buf).0 else { panic!() };
        assert!(std::ptr::eq(keys[0].as_ptr(), buf[4..].as_ptr()));
    }

    #[test]
    fn probed_line_ends_spaces_and_nul() {
        assert_eq!(ok(b"set b 0 0 1\nx\r\n"), (store_req(b"set b 0 0 1\nx\r\n"), 15));
        assert_eq!(ok(b"   get    b   \r\n").0, McRequest::Get { cas: false, touch: None, keys: keys(&[b"b"]) });
        for bad in [&b"\r\n"[..], b"\n", b" \r\n", b"\r\r\n", b"x\r\n", b"foo\r\n", b"GET b\r\n"] {
            assert_eq!(refused(bad), Refused::error(bad.len()), "{:?}", String::from_utf8_lossy(bad));
        }
        // Only one `\r` is dropped, and only `' '` separates: `\r` and `\t` belong to keys.
        let get = |buf| match ok(buf).0 {
            McRequest::Get { keys, .. } => keys.to_vec(),
            other => panic!("{other:?}"),
        };
        assert_eq!(get(b"get b\r\r\n"), [&b"b\r"[..]]);
        assert_eq!(get(b"get b\rc\r\n"), [&b"b\rc"[..]]);
        assert_eq!(get(b"get b\tc\r\n"), [&b"b\tc"[..]]);
        assert_eq!(get(b"get \x01\x7f\xff\r\n"), [&b"\x01\x7f\xff"[..]]);
        // The line ends at a NUL; the bytes after it up to `\n` are consumed.
        assert_eq!(ok(b"get b\x00junk\r\n"), (McRequest::Get { cas: false, touch: None, keys: keys(&[b"b"]) }, 12));
        assert_eq!(refused(b"g\x00et b\r\n"), Refused::error(8));
        assert!(matches!(store_req(b"set e 0 0 1\x00junk\r\nx\r\n"), McRequest::Store { key: b"e", data: b"x", .. }));
    }

    #[test]
    fn probed_token_counts_and_noreply() {
        // A wrong count is ERROR, noreply or not, and the data block is then read as a command.
        for bad in [
            &b"set f 0 0\r\n"[..],
            b"set f 0 0 1 noreply extra\r\n",
            b"set f 0 0 \r\n",
            b"cas f 0 0 1\r\n",
            b"cas f 0 0 1 5 noreply x\r\n",
            b"delete\r\n",
            b"delete a b c d\r\n",
            b"incr n\r\n",
            b"incr n 1 2 3\r\n",
            b"touch n\r\n",
            b"verbosity\r\n",
            b"verbosity 1 2 3\r\n",
            b"flush_all 1 2 3\r\n",
        ] {
            assert_eq!(refused(bad), Refused::error(bad.len()), "{:?}", String::from_utf8_lossy(bad));
        }
        // The optional last token is `noreply` only when it says so.
        assert!(matches!(store_req(b"set f 0 0 1 foo\r\nx\r\n"), McRequest::Store { noreply: false, .. }));
        assert!(matches!(store_req(b"set f 0 0 1 noreply\r\nx\r\n"), McRequest::Store { noreply: true, .. }));
        let cas = store_req(b"cas f 0 0 1 5 junk\r\nx\r\n");
        assert!(matches!(cas, McRequest::Store { cas_unique: 5, noreply: false, .. }));
        // `noreply` in the place of a number silences the error it causes; no data block is read.
        assert_eq!(refused(b"set f 0 0 noreply\r\nx\r\n"), Refused::new(BAD_FORMAT, true, 19));
        assert_eq!(refused(b"cas f 0 0 1 noreply\r\nx\r\n"), Refused::new(BAD_FORMAT, true, 21));
        assert_eq!(refused(b"set f abc 0 1 noreply\r\n"), Refused::new(BAD_FORMAT, true, 23));
        assert_eq!(refused(b"set f 0 0 -1 noreply\r\n"), Refused::new(BAD_FORMAT, true, 22));
        assert_eq!(refused(b"incr n abc noreply\r\n"), Refused::new(BAD_DELTA, true, 20));
        assert_eq!(refused(b"touch n abc noreply\r\n"), Refused::new(BAD_EXPTIME, true, 21));
        assert_eq!(refused(b"verbosity noreply\r\n"), Refused::new(BAD_FORMAT, true, 19));
        assert_eq!(ok(b"incr n 1 foo\r\n").0, McRequest::Arith { incr: true, key: b"n", delta: 1, noreply: false });
        assert_eq!(ok(b"decr n 1 noreply\r\n").0, McRequest::Arith { incr: false, key: b"n", delta: 1, noreply: true });
        assert_eq!(ok(b"touch n 10 foo\r\n").0, McRequest::Touch { key: b"n", exptime: 10, noreply: false });
    }

    #[test]
    fn probed_numbers() {
        let flags = |tok: &str| match parse(format!("set f {tok} 0 1\r\nx\r\n").as_bytes(), &LIMITS) {
            Ok(Some((McRequest::Store { flags, .. }, _))) => Some(flags),
            Err(r) if r.reply == Some(BAD_FORMAT) => None,
            other => panic!("{other:?}"),
        };
        for (tok, want) in [
            ("-1", None),
            ("-0", Some(0)),
            ("+7", Some(7)),
            ("4294967295", Some(u32::MAX)),
            ("4294967296", Some(0)),
            ("4294967301", Some(5)),
            ("18446744073709551615", Some(u32::MAX)),
            ("18446744073709551616", None),
            ("-18446744073709551615", Some(1)),
            ("5\t-junk", Some(5)),
            ("5\tjunk", Some(5)),
            ("\t9", Some(9)),
            ("5x", None),
            ("0x5", None),
            ("abc", None),
        ] {
            assert_eq!(flags(tok), want, "flags {tok:?}");
        }
        let exptime = |tok: &str| match parse(format!("set f 0 {tok} 1\r\nx\r\n").as_bytes(), &LIMITS) {
            Ok(Some((McRequest::Store { exptime, .. }, _))) => Some(exptime),
            Err(r) if r.reply == Some(BAD_FORMAT) => None,
            other => panic!("{other:?}"),
        };
        for (tok, want) in [("-1", Some(-1)), ("4294967296", Some(0)), ("9223372036854775808", None), ("abc", None)] {
            assert_eq!(exptime(tok), want, "exptime {tok:?}");
        }
        // `<bytes>`: the data block read is the one the truncated number announces.
        assert!(matches!(store_req(b"set f 0 0 4294967297\r\nx\r\n"), McRequest::Store { data: b"x", .. }));
        assert!(matches!(store_req(b"set f 0 0 1\r\r\nx\r\n"), McRequest::Store { data: b"x", .. }));
        assert!(matches!(store_req(b"set f 0 0 +1\r\nx\r\n"), McRequest::Store { data: b"x", .. }));
        assert!(matches!(store_req(b"set f 0 0 01\r\nx\r\n"), McRequest::Store { data: b"x", .. }));
        for bad in [&b"set f 0 0 abc\r\n"[..], b"set f 0 0 -1\r\n", b"set f 0 0 2147483647\r\n"] {
            assert_eq!(refused(bad), Refused::new(BAD_FORMAT, false, bad.len()));
        }
        let cas = |tok: &str| match parse(format!("cas f 0 0 1 {tok}\r\nx\r\n").as_bytes(), &LIMITS) {
            Ok(Some((McRequest::Store { cas_unique, .. }, _))) => Some(cas_unique),
            Err(r) if r.reply == Some(BAD_FORMAT) => None,
            other => panic!("{other:?}"),
        };
        for (tok, want) in
            [("abc", None), ("-1", None), ("18446744073709551616", None), ("18446744073709551615", Some(u64::MAX))]
        {
            assert_eq!(cas(tok), want, "cas {tok:?}");
        }
        let delta = |tok: &str| match parse(format!("incr n {tok}\r\n").as_bytes(), &LIMITS) {
            Ok(Some((McRequest::Arith { delta, .. }, _))) => Some(delta),
            Err(r) if r.reply == Some(BAD_DELTA) => None,
            other => panic!("{other:?}"),
        };
        for (tok, want) in [
            ("abc", None),
            ("-1", None),
            ("-0", Some(0)),
            ("18446744073709551616", None),
            ("18446744073709551615", Some(u64::MAX)),
            ("-18446744073709551615", Some(1)),
        ] {
            assert_eq!(delta(tok), want, "delta {tok:?}");
        }
    }

    #[test]
    fn probed_key_length() {
        let k250 = "k".repeat(KEY_MAX_LEN);
        let k251 = "k".repeat(KEY_MAX_LEN + 1);
        assert!(matches!(store_req(format!("set {k250} 0 0 1\r\nx\r\n").as_bytes()), McRequest::Store { .. }));
        // A set refused for its key reads no data block: memcached runs it as the next command.
        let buf = format!("set {k251} 0 0 9\r\nget a b c\r\n");
        let line = 4 + k251.len() + 8;
        assert_eq!(refused(buf.as_bytes()), Refused::new(BAD_FORMAT, false, line));
        assert!(matches!(ok(&buf.as_bytes()[line..]).0, McRequest::Get { .. }));
        for (line, noreply) in [
            (format!("set {k251} 0 0 1 noreply\r\n"), true),
            (format!("set {k251} abc 0 1\r\n"), false),
            (format!("delete {k251}\r\n"), false),
            (format!("delete {k251} noreply\r\n"), true),
            (format!("incr {k251} 1\r\n"), false),
            // The key is judged before the number.
            (format!("incr {k251} abc\r\n"), false),
            (format!("touch {k251} abc\r\n"), false),
            (format!("touch {k251} 1 noreply\r\n"), true),
        ] {
            assert_eq!(refused(line.as_bytes()), Refused::new(BAD_FORMAT, noreply, line.len()), "{line}");
        }
    }

    #[test]
    fn probed_data_blocks() {
        // The block is `<bytes>` + 2 bytes whatever they hold; what follows is the next command.
        let buf = b"set d 0 0 3\r\nabcde\r\nmn\r\n";
        assert_eq!(refused(buf), Refused::new(BAD_DATA_CHUNK, false, 18));
        assert_eq!(refused(&buf[18..]), Refused::error(2));
        let buf = b"set d 0 0 3\r\nab\r\n\r\nmn\r\n";
        assert_eq!(refused(buf), Refused::new(BAD_DATA_CHUNK, false, 18));
        assert_eq!(refused(&buf[18..]), Refused::error(1));
        let buf = b"set d 0 0 3\r\nabc\nmn\r\n";
        assert_eq!(refused(buf), Refused::new(BAD_DATA_CHUNK, false, 18));
        assert_eq!(refused(&buf[18..]), Refused::error(3));
        assert_eq!(refused(b"set d 0 0 3\r\nabc\r\r\n"), Refused::new(BAD_DATA_CHUNK, false, 18));
        assert_eq!(refused(b"set d 0 0 3 noreply\r\nabcde\r\n"), Refused::new(BAD_DATA_CHUNK, true, 26));
        assert!(matches!(store_req(b"set d 0 0 0\r\n\r\n"), McRequest::Store { data: b"", .. }));
        assert!(matches!(store_req(b"set d 0 0 3\r\na\r\n\r\n"), McRequest::Store { data: b"a\r\n", .. }));
    }

    #[test]
    fn probed_item_size() {
        // Largest value that fits the default 1 MiB: 1048576 - 59 - key, less 4 more with flags.
        let fits = |line: String| match parse(line.as_bytes(), &LIMITS) {
            Ok(None) => true,
            Ok(Some((McRequest::SetTooLarge { .. }, _))) => false,
            Err(r) if r.reply == Some(TOO_LARGE) => false,
            other => panic!("{other:?}"),
        };
        for (key, flags, largest) in [
            ("a".to_string(), "0", 1048516),
            ("a".to_string(), "1", 1048512),
            ("abcdefghij".to_string(), "0", 1048507),
            ("k".repeat(250), "0", 1048267),
            // Flags that truncate to 0 cost nothing.
            ("k".repeat(250), "4294967296", 1048267),
            ("k".repeat(250), "-0", 1048267),
        ] {
            for cmd in ["set", "append"] {
                assert!(fits(format!("{cmd} {key} {flags} 0 {largest}\r\n")), "{cmd} {} {flags}", key.len());
                assert!(!fits(format!("{cmd} {key} {flags} 0 {}\r\n", largest + 1)), "{cmd} {} {flags}", key.len());
            }
        }
        // Decided on the line alone, the whole block swallowed, noreply or not.
        let line = b"set a 0 0 2147483645\r\n";
        let key = Cow::Borrowed(&b"a"[..]);
        assert_eq!(ok(line), (McRequest::SetTooLarge { key: key.clone(), swallow: 2147483647, noreply: false }, line.len()));
        let mut buf = b"set a 0 0 2000000 noreply\r\n".to_vec();
        let want = (McRequest::SetTooLarge { key, swallow: 2000002, noreply: true }, buf.len());
        buf.extend_from_slice(b"xxxx");
        assert_eq!(parse(&buf, &LIMITS), Ok(Some(want)));
        let line = b"cas a 0 0 2000000 1\r\n";
        let too_large = Refused { reply: Some(TOO_LARGE), consumed: line.len(), swallow: 2000002, close: false };
        assert_eq!(refused(line), too_large);
        let line = b"append a 0 0 2000000 noreply\r\n";
        assert_eq!(refused(line), Refused { reply: None, consumed: line.len(), swallow: 2000002, close: false });
    }

    fn request_of(buf: &[u8]) -> Result<Option<McRequest<'_>>, Refused> {
        parse(buf, &LIMITS).map(|r| r.map(|(req, _)| req))
    }

    #[test]
    fn probed_delete_flush_verbosity_stats() {
        let del = request_of;
        assert_eq!(del(b"delete a 0\r\n"), Ok(Some(McRequest::Delete { key: b"a", noreply: false })));
        assert_eq!(del(b"delete a noreply\r\n"), Ok(Some(McRequest::Delete { key: b"a", noreply: true })));
        assert_eq!(del(b"delete a 5\r\n"), Err(Refused::new(DELETE_USAGE, false, 12)));
        assert_eq!(del(b"delete a 5 noreply\r\n"), Err(Refused::new(DELETE_USAGE, true, 20)));
        assert_eq!(del(b"delete a noreply 0\r\n"), Err(Refused::new(DELETE_USAGE, false, 20)));
        assert_eq!(del(b"delete a 0 0\r\n"), Err(Refused::new(DELETE_USAGE, false, 14)));
        let flush = request_of;
        let f = |delay, noreply| Ok(Some(McRequest::FlushAll { delay, noreply }));
        assert_eq!(flush(b"flush_all 10\r\n"), f(10, false));
        assert_eq!(flush(b"flush_all noreply\r\n"), f(0, true));
        assert_eq!(flush(b"flush_all -1\r\n"), f(-1, false));
        assert_eq!(flush(b"flush_all 0\r\n"), f(0, false));
        assert_eq!(flush(b"flush_all 10 20\r\n"), f(10, false));
        assert_eq!(flush(b"flush_all abc\r\n"), Err(Refused::new(BAD_EXPTIME, false, 15)));
        assert_eq!(flush(b"flush_all noreply 10\r\n"), Err(Refused::new(BAD_EXPTIME, false, 22)));
        assert_eq!(flush(b"flush_all abc noreply\r\n"), Err(Refused::new(BAD_EXPTIME, true, 23)));
        assert_eq!(ok(b"verbosity 1\r\n").0, McRequest::Verbosity { noreply: false });
        assert_eq!(ok(b"verbosity 1 foo\r\n").0, McRequest::Verbosity { noreply: false });
        assert_eq!(refused(b"verbosity abc\r\n"), Refused::new(BAD_FORMAT, false, 15));
        let args = |list: &[&'static [u8]]| McRequest::Stats { args: list.iter().copied().collect() };
        assert_eq!(ok(b"stats foo\r\n").0, args(&[b"foo"]));
        assert_eq!(ok(b"stats  detail  on\r\n").0, args(&[b"detail", b"on"]));
        assert_eq!(ok(b"quit foo\r\n").0, McRequest::Quit);
        assert_eq!(ok(b"version\r\n").0, McRequest::Version);
    }

    #[test]
    fn probed_unknown_commands_and_http() {
        // Debug and extstore builds' names are unknown to Debian's; each first letter's branch has its ERROR.
        let unknown = [&b"mx\r\n"[..], b"m\r\n", b"extstore foo\r\n", b"misbehave\r\n", b"debugtime 1\r\n"];
        for bad in unknown.into_iter().chain([&b"sfoo a HTTP/1.1\r\n"[..]]) {
            assert_eq!(refused(bad), Refused::error(bad.len()), "{:?}", String::from_utf8_lossy(bad));
        }
        let admin = ["me", "shutdown", "lru", "lru_crawler", "slabs", "cache_memlimit", "watch", "refresh_certs"];
        for name in admin {
            let line = format!("{name}\r\n");
            assert_eq!(ok(line.as_bytes()), (McRequest::Unsupported { name: name.as_bytes() }, line.len()));
        }
        // The last token of memcached's first 23 decides: HTTP/ closes without a reply.
        assert_eq!(refused(b"HTTP/1.1\r\n"), Refused::close(10));
        assert_eq!(refused(b"foo HTTP/\r\n"), Refused::close(11));
        assert_eq!(refused(b"foo HTTP/x bar\r\n"), Refused::error(16));
        let ts = |n: usize| vec!["t"; n].join(" ");
        let line = format!("foo {} HTTP/1.1\r\n", ts(21));
        assert_eq!(refused(line.as_bytes()), Refused::close(line.len()));
        let line = format!("foo {} HTTP/1.1\r\n", ts(22));
        assert_eq!(refused(line.as_bytes()), Refused::error(line.len()));
        let line = format!("foo {} HTTP/1.1 x y\r\n", ts(21));
        assert_eq!(refused(line.as_bytes()), Refused::close(line.len()));
        assert_eq!(ok(format!("version {}\r\n", ts(40)).as_bytes()).0, McRequest::Version);
        let line = format!("delete a{}\r\n", " noreply".repeat(30));
        assert_eq!(refused(line.as_bytes()), Refused::error(line.len()));
    }

    #[test]
    fn probed_long_lines() {
        let k = |n| "k".repeat(n);
        // Without a line end: more than 2048 bytes close, unless the line is a get or gets after at
        // most 100 spaces (gat is no exception).
        let buf = format!("set {}", k(2045));
        assert_eq!(refused(buf.as_bytes()), Refused::close(2049));
        assert_eq!(parse(format!("set {}", k(2044)).as_bytes(), &LIMITS), Ok(None));
        assert_eq!(refused(format!("foo{}", k(2046)).as_bytes()), Refused::close(2049));
        let keys = "k ".repeat(1500);
        for (line, waits) in [
            (format!("get {keys}"), true),
            (format!("gets {keys}"), true),
            (format!("gat 1 {keys}"), false),
            (format!("{}get {keys}", " ".repeat(100)), true),
            (format!("{}get {keys}", " ".repeat(101)), false),
            (format!("\tget {keys}"), false),
            (format!("get{}", " ".repeat(3000)), true),
        ] {
            let want = if waits { Ok(None) } else { Err(Refused::close(line.len())) };
            assert_eq!(parse(line.as_bytes(), &LIMITS), want, "{:?}", &line[..8]);
        }
        // With its line end, a long line is judged by its content, up to memcached's 16 KiB buffer.
        let line = format!("set {} 0 0 1\r\n", k(3000));
        assert_eq!(refused(line.as_bytes()), Refused::new(BAD_FORMAT, false, line.len()));
        let line = format!("foo {}\r\n", k(5000));
        assert_eq!(refused(line.as_bytes()), Refused::error(line.len()));
        let line = format!("foo {}\r\n", k(20000));
        assert_eq!(refused(line.as_bytes()), Refused::close(line.len()));
        let line = format!("get {}\r\n", "k ".repeat(20000));
        assert!(matches!(ok(line.as_bytes()), (McRequest::Get { .. }, n) if n == line.len()));
    }

    fn meta(req: McRequest<'_>) -> Meta<'_> {
        match req {
            McRequest::MetaGet(m) | McRequest::MetaDelete(m) | McRequest::MetaArith(m) => m,
            McRequest::MetaSet { meta, .. } => meta,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn probed_meta_set() {
        let ms = |buf: &'static [u8], consumed| {
            let (req, n) = ok(buf);
            assert!(matches!(req, McRequest::MetaSet { .. }), "{req:?}");
            assert_eq!(n, consumed);
        };
        ms(b"ms key 3\r\nabc\r\nmn\r\n", 15);
        ms(b"ms key 3 q\r\nabc\r\nmn\r\n", 17);
        ms(b"ms key 4294967299\r\nabc\r\nmn\r\n", 24);
        let line = format!("ms key 3{}\r\n", " T1".repeat(16));
        assert_eq!(refused(format!("{line}abc\r\n").as_bytes()), Refused { swallow: 5, ..Refused::new(DUPLICATE_FLAG, false, line.len()) });
        // Refused before the length is known: no block is read, it is then read as commands.
        for (buf, reply) in [
            (&b"ms key abc\r\nabc\r\n"[..], BAD_FORMAT),
            (b"ms key -1\r\nabc\r\n", BAD_FORMAT),
            (b"ms key\r\nabc\r\n", BAD_FORMAT),
        ] {
            let line = buf.iter().position(|&b| b == b'\n').unwrap() + 1;
            assert_eq!(refused(buf), Refused::new(reply, false, line), "{:?}", String::from_utf8_lossy(buf));
        }
        assert_eq!(refused(b"ms\r\nabc\r\n"), Refused::error(4));
        let line = format!("ms key 3{}\r\n", " T1".repeat(17));
        assert_eq!(refused(line.as_bytes()), Refused::new(FLAGS_TOO_LONG, false, line.len()));
        let line = format!("ms {} 3\r\n", "k".repeat(KEY_MAX_LEN + 1));
        assert_eq!(refused(line.as_bytes()), Refused::new(BAD_FORMAT, false, line.len()));
        // After it, every refusal swallows the block, answered even under q.
        let swallowed = |reply, line: &str| Refused { reply: Some(reply), consumed: line.len(), swallow: 5, close: false };
        for (line, reply) in [
            ("ms k 3 E q\r\n", INVALID_FLAG),
            ("ms k 3 S\r\n", INVALID_FLAG),
            ("ms k 3 T1 T2\r\n", DUPLICATE_FLAG),
            ("ms k 3 \u{7f}\r\n", DUPLICATE_FLAG),
            ("ms k 3 Fx\r\n", BAD_FORMAT),
            ("ms k 3 Tx Fx\r\n", BAD_TOKEN),
            ("ms k 3 C-1\r\n", BAD_TOKEN),
            ("ms k 3 b\r\n", "CLIENT_ERROR error decoding key"),
            ("ms k 3 MX\r\n", "CLIENT_ERROR invalid mode for ms M token"),
            ("ms k 3 Mee\r\n", "CLIENT_ERROR incorrect length for M token"),
            ("ms k 3 I\r\n", NO_INVALIDATE),
        ] {
            assert_eq!(refused(format!("{line}abc\r\n").as_bytes()), swallowed(reply, line), "{line:?}");
        }
        let line = format!("ms k 3 O{}\r\n", "o".repeat(OPAQUE_MAX_LEN));
        assert_eq!(refused(line.as_bytes()), swallowed(OPAQUE_TOO_LONG, &line));
        // A bad data chunk is answered even under q.
        assert_eq!(refused(b"ms k 3 q\r\nabcde\r\n"), Refused::new(BAD_DATA_CHUNK, false, 15));
        assert_eq!(parse(b"ms key 3\r\nab", &LIMITS), Ok(None));
        // Too large in any mode, judged on the decoded key and the F flags: unlinked and swallowed.
        let line = b"ms key 2000000 MA\r\n";
        assert_eq!(ok(line), (McRequest::SetTooLarge { key: Cow::Borrowed(b"key"), swallow: 2000002, noreply: false }, line.len()));
        let (req, _) = ok(b"ms a2V5 3 b F1 T-1 C9 MR q k c O1\r\nabc\r\n");
        let m = meta(req);
        assert_eq!(&m.key[..], b"key");
        let f = MetaFlags {
            base64: true,
            quiet: true,
            ttl: Some(-1),
            client_flags: 1,
            compare_cas: Some(9),
            mode: Some(b'R'),
            ..MetaFlags::default()
        };
        assert_eq!(m.flags, f);
        assert_eq!(m.tokens.len(), 9);
    }

    #[test]
    fn probed_meta_get_delete_arith() {
        let m = meta(ok(b"mg k s v t c f h l k O123 q u P L T30 R-5\r\n").0);
        let f = MetaFlags { quiet: true, value: true, no_bump: true, ttl: Some(30), recache: Some(-5), ..MetaFlags::default() };
        assert_eq!((m.flags, m.tokens.len()), (f, 15));
        for (line, reply) in [
            ("mg k E\r\n", INVALID_FLAG),
            ("mg k x\r\n", INVALID_FLAG),
            ("mg k v v\r\n", DUPLICATE_FLAG),
            ("mg k \u{80}\r\n", DUPLICATE_FLAG),
            ("mg k Tx Nx\r\n", BAD_TOKEN),
            ("mg k T\r\n", BAD_TOKEN),
            ("mg a2V=A b\r\n", "CLIENT_ERROR error decoding key"),
            ("mg k N30\r\n", NO_VIVIFY),
            ("mg k q Fx\r\n", BAD_FORMAT),
            ("md k x\r\n", INVALID_OR_DUPLICATE),
            ("md k Tx\r\n", INVALID_OR_DUPLICATE),
            ("md k I T30\r\n", NO_INVALIDATE),
            ("ma k Dx\r\n", INVALID_OR_DUPLICATE),
            ("ma k Jx\r\n", INVALID_OR_DUPLICATE),
            ("ma k MX\r\n", "CLIENT_ERROR invalid mode for ma M token"),
        ] {
            assert_eq!(refused(line.as_bytes()), Refused::new(reply, false, line.len()), "{line:?}");
        }
        let line = format!("md k O{}\r\n", "o".repeat(OPAQUE_MAX_LEN));
        assert_eq!(refused(line.as_bytes()), Refused::new(OPAQUE_TOO_LONG, false, line.len()));
        // mg and ma answer a long opaque token themselves, after what comes before it.
        let line = format!("mg k O{}\r\n", "o".repeat(OPAQUE_MAX_LEN));
        assert!(opaque_too_long(&meta(ok(line.as_bytes()).0).tokens));
        assert_eq!(refused(b"mg\r\n"), Refused::error(4));
        assert_eq!(refused(b"md\r\n"), Refused::error(4));
        let too_many = format!("mg k{}\r\n", " a".repeat(18));
        assert_eq!(refused(too_many.as_bytes()), Refused::new("CLIENT_ERROR options flags are too long", false, too_many.len()));
        let too_many = format!("md k{}\r\n", " a".repeat(18));
        assert_eq!(refused(too_many.as_bytes()), Refused::new(FLAGS_TOO_LONG, false, too_many.len()));
        let line = format!("mg {}\r\n", "k".repeat(KEY_MAX_LEN + 1));
        assert_eq!(refused(line.as_bytes()), Refused::new(BAD_FORMAT, false, line.len()));
        let m = meta(ok(b"ma k N0 J5 D7 M- C3 q\r\n").0);
        let f = MetaFlags {
            quiet: true,
            vivify: Some(0),
            initial: 5,
            delta: Some(7),
            mode: Some(b'-'),
            compare_cas: Some(3),
            ..MetaFlags::default()
        };
        assert_eq!(m.flags, f);
        assert_eq!(ok(b"mn foo\r\n"), (McRequest::MetaNoop, 8));
        assert_eq!(ok(b"me k\r\n").0, McRequest::Unsupported { name: b"me" });
    }

    #[test]
    fn base64_keys_decode_as_memcached_does() {
        for (text, want) in [
            (&b"a2V5"[..], Some(&b"key"[..])),
            (b"Zm9vYg==", Some(b"foob")),
            (b"Zm9vYmE=", Some(b"fooba")),
            (b"Zm9v\x01YmE=", Some(b"fooba")),
            (b"A=AA", Some(b"\x00\x00")),
            (b"AA==BBBB", Some(b"\x00")),
            (b"A===", None),
            (b"a2V", None),
            (b"", None),
            (b"!!!!", None),
        ] {
            assert_eq!(base64_decode(text).as_deref(), want, "{:?}", String::from_utf8_lossy(text));
        }
        for key in [&b""[..], b"k", b"ke", b"key", b"\x00\xff\x10binary"] {
            let mut text = Vec::new();
            base64_encode(key, &mut text);
            assert_eq!(base64_decode(&text).unwrap_or_default(), key);
        }
    }

    #[test]
    fn refusals_reparse_from_their_bytes() {
        for buf in [
            &b"set k 0 0 1\r\nxy\r\n"[..],
            b"set k x 0 1\r\nx\r\n",
            b"bogus\r\nget a\r\n",
            b"add k 0 0 2000000\r\nxxx",
            b"GET / HTTP/1.1\r\n",
            b"delete a 5 noreply\r\n",
        ] {
            let r = refused(buf);
            assert_eq!(refused(&buf[..r.consumed]), r, "{:?}", String::from_utf8_lossy(buf));
        }
    }

    /// Any well-formed request, as fields, encoded with `spaces` between tokens and `lead` before them.
    #[derive(Debug, Clone)]
    enum Spec {
        Get { name: usize, exptime: i32, keys: Vec<Vec<u8>> },
        Store { kind: usize, key: Vec<u8>, flags: u32, exptime: i32, data: Vec<u8>, cas: u64, noreply: bool },
        Delete { key: Vec<u8>, zero: bool, noreply: bool },
        Arith { incr: bool, key: Vec<u8>, delta: u64, noreply: bool },
        Touch { key: Vec<u8>, exptime: i32, noreply: bool },
        FlushAll { delay: Option<i32>, noreply: bool },
        Verbosity { level: u32, noreply: bool },
        Stats { args: Vec<Vec<u8>> },
        Version,
        Quit,
        MetaSet { key: Vec<u8>, data: Vec<u8>, flags: MetaSpec },
        /// mg, md, ma (`name` 0, 1, 2).
        Meta { name: usize, key: Vec<u8>, flags: MetaSpec },
        MetaNoop,
    }

    const META_NAMES: [&str; 3] = ["mg", "md", "ma"];

    /// Flags every meta command accepts: what they read as, and their tokens in order.
    #[derive(Debug, Clone)]
    struct MetaSpec {
        plain: Vec<u8>,
        ttl: Option<i32>,
        cas: Option<u64>,
        delta: Option<u64>,
        tokens: Vec<Vec<u8>>,
    }

    fn meta_spec() -> impl Strategy<Value = MetaSpec> {
        let plain = proptest::sample::subsequence(b"kstcfhlqvu".to_vec(), 0..=10);
        let opaque = proptest::collection::vec(b'!'..=b'~', 0..OPAQUE_MAX_LEN);
        (plain, proptest::option::of(any::<i32>()), proptest::option::of(any::<u64>()), proptest::option::of(any::<u64>()), proptest::option::of(opaque))
            .prop_map(|(plain, ttl, cas, delta, opaque)| {
                let mut tokens: Vec<Vec<u8>> = plain.iter().map(|&b| vec![b]).collect();
                tokens.extend(ttl.map(|v| format!("T{v}").into_bytes()));
                tokens.extend(cas.map(|v| format!("C{v}").into_bytes()));
                tokens.extend(delta.map(|v| format!("D{v}").into_bytes()));
                tokens.extend(opaque.iter().map(|o| [&b"O"[..], o].concat()));
                MetaSpec { plain, ttl, cas, delta, tokens }
            })
    }

    impl MetaSpec {
        fn tokens(&self) -> Vec<Vec<u8>> {
            self.tokens.clone()
        }

        fn expected<'a>(&'a self, key: &'a [u8]) -> Meta<'a> {
            let has = |b: u8| self.plain.contains(&b);
            let flags = MetaFlags {
                quiet: has(b'q'),
                value: has(b'v'),
                no_bump: has(b'u'),
                ttl: self.ttl.map(i64::from),
                compare_cas: self.cas,
                delta: self.delta,
                ..MetaFlags::default()
            };
            Meta { key: Cow::Borrowed(key), flags, tokens: self.tokens.iter().map(|t| &t[..]).collect() }
        }
    }

    const GETS: [&str; 5] = ["get", "gets", "gat", "gats", "bget"];
    const STORES: [(&str, StoreKind); 6] = [
        ("set", StoreKind::Set),
        ("add", StoreKind::Add),
        ("replace", StoreKind::Replace),
        ("append", StoreKind::Append),
        ("prepend", StoreKind::Prepend),
        ("cas", StoreKind::Cas),
    ];

    /// A key: any bytes but space, `\n` and NUL (memcached checks nothing else), short or near the limit.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        let byte = any::<u8>().prop_filter("separator", |b| ![b' ', b'\n', 0].contains(b));
        prop_oneof![
            9 => proptest::collection::vec(byte.clone(), 1..=20),
            1 => proptest::collection::vec(byte, KEY_MAX_LEN - 10..=KEY_MAX_LEN),
        ]
    }

    fn spec() -> impl Strategy<Value = Spec> {
        let data = proptest::collection::vec(any::<u8>(), 0..80);
        let word = proptest::collection::vec(b'a'..=b'z', 1..8);
        prop_oneof![
            (0..GETS.len(), any::<i32>(), proptest::collection::vec(key(), 1..30))
                .prop_map(|(name, exptime, keys)| Spec::Get { name, exptime, keys }),
            (0..STORES.len(), key(), any::<u32>(), any::<i32>(), data.clone(), any::<u64>(), any::<bool>()).prop_map(
                |(kind, key, flags, exptime, data, cas, noreply)| {
                    Spec::Store { kind, key, flags, exptime, data, cas, noreply }
                }
            ),
            (key(), any::<bool>(), any::<bool>()).prop_map(|(key, zero, noreply)| Spec::Delete { key, zero, noreply }),
            (any::<bool>(), key(), any::<u64>(), any::<bool>())
                .prop_map(|(incr, key, delta, noreply)| Spec::Arith { incr, key, delta, noreply }),
            (key(), any::<i32>(), any::<bool>())
                .prop_map(|(key, exptime, noreply)| Spec::Touch { key, exptime, noreply }),
            (proptest::option::of(any::<i32>()), any::<bool>())
                .prop_map(|(delay, noreply)| Spec::FlushAll { delay, noreply }),
            (any::<u32>(), any::<bool>()).prop_map(|(level, noreply)| Spec::Verbosity { level, noreply }),
            proptest::collection::vec(word, 0..4).prop_map(|args| Spec::Stats { args }),
            Just(Spec::Version),
            Just(Spec::Quit),
            (key(), data, meta_spec()).prop_map(|(key, data, flags)| Spec::MetaSet { key, data, flags }),
            (0usize..3, key(), meta_spec()).prop_map(|(name, key, flags)| Spec::Meta { name, key, flags }),
            Just(Spec::MetaNoop),
        ]
    }

    fn encode(spec: &Spec, spaces: usize, lead: usize) -> Vec<u8> {
        let num = |n: &dyn std::fmt::Display| n.to_string().into_bytes();
        let opt = |on: bool, word: &[u8]| if on { vec![word.to_vec()] } else { vec![] };
        let (tokens, block): (Vec<Vec<u8>>, Option<&Vec<u8>>) = match spec {
            Spec::Get { name, exptime, keys } => {
                let mut t = vec![GETS[*name].as_bytes().to_vec()];
                t.extend(opt(*name == 2 || *name == 3, &num(exptime)));
                t.extend(keys.iter().cloned());
                (t, None)
            }
            Spec::Store { kind, key, flags, exptime, data, cas, noreply } => {
                let name = STORES[*kind].0.as_bytes().to_vec();
                let mut t = vec![name, key.clone(), num(flags), num(exptime), num(&data.len())];
                t.extend(opt(STORES[*kind].1 == StoreKind::Cas, &num(cas)));
                t.extend(opt(*noreply, b"noreply"));
                (t, Some(data))
            }
            Spec::Delete { key, zero, noreply } => {
                let mut t = vec![b"delete".to_vec(), key.clone()];
                t.extend(opt(*zero, b"0"));
                t.extend(opt(*noreply, b"noreply"));
                (t, None)
            }
            Spec::Arith { incr, key, delta, noreply } => {
                let name: &[u8] = if *incr { b"incr" } else { b"decr" };
                let mut t = vec![name.to_vec(), key.clone(), num(delta)];
                t.extend(opt(*noreply, b"noreply"));
                (t, None)
            }
            Spec::Touch { key, exptime, noreply } => {
                let mut t = vec![b"touch".to_vec(), key.clone(), num(exptime)];
                t.extend(opt(*noreply, b"noreply"));
                (t, None)
            }
            Spec::FlushAll { delay, noreply } => {
                let mut t = vec![b"flush_all".to_vec()];
                t.extend(delay.iter().map(|d| num(d)));
                t.extend(opt(*noreply, b"noreply"));
                (t, None)
            }
            Spec::Verbosity { level, noreply } => {
                let mut t = vec![b"verbosity".to_vec(), num(level)];
                t.extend(opt(*noreply, b"noreply"));
                (t, None)
            }
            Spec::Stats { args } => (std::iter::once(b"stats".to_vec()).chain(args.iter().cloned()).collect(), None),
            Spec::Version => (vec![b"version".to_vec()], None),
            Spec::Quit => (vec![b"quit".to_vec()], None),
            Spec::MetaSet { key, data, flags } => {
                let mut t = vec![b"ms".to_vec(), key.clone(), num(&data.len())];
                t.extend(flags.tokens());
                (t, Some(data))
            }
            Spec::Meta { name, key, flags } => {
                let mut t = vec![META_NAMES[*name].as_bytes().to_vec(), key.clone()];
                t.extend(flags.tokens());
                (t, None)
            }
            Spec::MetaNoop => (vec![b"mn".to_vec()], None),
        };
        let mut out = vec![b' '; lead];
        out.extend(tokens.join(&vec![b' '; spaces][..]));
        // `\n` alone ends a line as well, unless the line's last byte is an `\r` (it would be dropped).
        let lf_only = spaces == 2 && out.last() != Some(&b'\r');
        out.extend_from_slice(if lf_only { b"\n" } else { b"\r\n" });
        if let Some(data) = block {
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn expected(spec: &Spec) -> McRequest<'_> {
        match spec {
            Spec::Get { name, exptime, keys } => McRequest::Get {
                cas: *name == 1 || *name == 3,
                touch: (*name == 2 || *name == 3).then_some(i64::from(*exptime)),
                keys: keys.iter().map(|k| &k[..]).collect(),
            },
            Spec::Store { kind, key, flags, exptime, data, cas, noreply } => {
                let kind = STORES[*kind].1;
                let cas_unique = if kind == StoreKind::Cas { *cas } else { 0 };
                let (flags, exptime, noreply) = (*flags, i64::from(*exptime), *noreply);
                McRequest::Store { kind, key, flags, exptime, data, cas_unique, noreply }
            }
            Spec::Delete { key, noreply, .. } => McRequest::Delete { key, noreply: *noreply },
            Spec::Arith { incr, key, delta, noreply } => {
                McRequest::Arith { incr: *incr, key, delta: *delta, noreply: *noreply }
            }
            Spec::Touch { key, exptime, noreply } => {
                McRequest::Touch { key, exptime: i64::from(*exptime), noreply: *noreply }
            }
            Spec::FlushAll { delay, noreply } => {
                McRequest::FlushAll { delay: i64::from(delay.unwrap_or(0)), noreply: *noreply }
            }
            Spec::Verbosity { noreply, .. } => McRequest::Verbosity { noreply: *noreply },
            Spec::Stats { args } => McRequest::Stats { args: args.iter().map(|a| &a[..]).collect() },
            Spec::Version => McRequest::Version,
            Spec::Quit => McRequest::Quit,
            Spec::MetaSet { key, data, flags } => McRequest::MetaSet { meta: flags.expected(key), data },
            Spec::Meta { name: 0, key, flags } => McRequest::MetaGet(flags.expected(key)),
            Spec::Meta { name: 1, key, flags } => McRequest::MetaDelete(flags.expected(key)),
            Spec::Meta { key, flags, .. } => McRequest::MetaArith(flags.expected(key)),
            Spec::MetaNoop => McRequest::MetaNoop,
        }
    }

    /// Whether a strict prefix of a request may be refused: only a line past 2048 bytes without its
    /// line end, closed unless it is a get or gets.
    fn prefix_ok(prefix: &[u8], got: &Result<Option<(McRequest<'_>, usize)>, Refused>) -> bool {
        match got {
            Ok(None) => true,
            Err(r) => prefix.len() > LINE_WAIT_MAX && !prefix.contains(&b'\n') && *r == Refused::close(prefix.len()),
            Ok(Some(_)) => false,
        }
    }

    proptest! {
        /// Every request, with any spacing, parses whole from its bytes to its fields, and every
        /// strict prefix waits for more (or, for a long non-get line, is closed as memcached does).
        #[test]
        fn all_requests_parse_whole_and_prefixes_wait(spec in spec(), spaces in 1usize..4, lead in 0usize..3) {
            let bytes = encode(&spec, spaces, lead);
            prop_assert_eq!(parse(&bytes, &LIMITS), Ok(Some((expected(&spec), bytes.len()))));
            for cut in 0..bytes.len() {
                let got = parse(&bytes[..cut], &LIMITS);
                prop_assert!(prefix_ok(&bytes[..cut], &got), "prefix {}: {:?}", cut, got);
            }
        }

        /// A pipeline parses back request by request, whatever follows the last one.
        #[test]
        fn pipelines_parse_in_order(specs in proptest::collection::vec(spec(), 1..8), tail in "[a-z ]{0,10}") {
            let mut bytes: Vec<u8> = specs.iter().flat_map(|s| encode(s, 1, 0)).collect();
            let len = bytes.len();
            bytes.extend_from_slice(tail.as_bytes());
            let mut pos = 0;
            for spec in &specs {
                let (req, n) = parse(&bytes[pos..], &LIMITS).unwrap().unwrap();
                prop_assert_eq!(req, expected(spec));
                pos += n;
            }
            prop_assert_eq!(pos, len);
        }

        /// Damaged requests: no panic, consumption within the buffer, and whatever is decided (a request
        /// or a refusal) is decided again from exactly the bytes it consumed.
        #[test]
        fn damaged_requests_are_judged_consistently(
            spec in spec(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            small in any::<bool>(),
        ) {
            let mut bytes = encode(&spec, 1, 0);
            for (at, b) in flips {
                let i = at % bytes.len();
                bytes[i] = b;
            }
            let limits = if small { McLimits { max_item_size: 96 } } else { LIMITS };
            let got = parse(&bytes, &limits);
            match got {
                Ok(Some((req, n))) => {
                    prop_assert!(n > 0 && n <= bytes.len());
                    prop_assert_eq!(parse(&bytes[..n], &limits), Ok(Some((req, n))));
                    for cut in 0..n {
                        prop_assert!(!matches!(parse(&bytes[..cut], &limits), Ok(Some(_))), "prefix {}", cut);
                    }
                }
                Ok(None) => {}
                Err(r) => {
                    prop_assert!(r.consumed > 0 && r.consumed <= bytes.len());
                    prop_assert_eq!(parse(&bytes[..r.consumed], &limits), Err(r));
                }
            };
        }
    }
}
