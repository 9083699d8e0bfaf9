//! The AOF manifest of Redis 7.0's multi-part AOF, read and written.
//!
//! # Layout
//!
//! The appendonly directory (`appenddirname`, default `appendonlydir`) holds
//! the manifest `<appendfilename>.manifest` and the files it lists. The
//! manifest is text, one file per line, each line space-separated
//! `key value` pairs (at least the three below, in any order; unknown keys
//! are ignored, for forward compatibility):
//!
//! ```text
//! file appendonly.aof.1.base.aof seq 1 type b
//! file appendonly.aof.1.incr.aof seq 1 type h
//! file appendonly.aof.2.incr.aof seq 2 type i
//! ```
//!
//! * `file`: a bare file name inside the directory (never a path). Names that
//!   contain spaces, quotes or unprintable bytes are written quoted with C-like
//!   escapes (`"a b\x01"`), as Redis's `sdscatrepr` does.
//! * `seq`: a positive integer; incr files appear in strictly increasing seq.
//! * `type`: `b` base (at most one, written first), `h` history (left over
//!   from a rewrite, not loaded), `i` incr (loaded after the base, in order).
//!
//! Lines starting with `#` are comments; a line may be at most 1024 bytes; an
//! empty manifest is an error. File names follow
//! `<appendfilename>.<seq>.base.aof` (`.base.rdb` for an RDB base,
//! `aof-use-rdb-preamble yes`) and `<appendfilename>.<seq>.incr.aof`.
//!
//! The manifest is replaced atomically: written to `temp-<appendfilename>.manifest`,
//! fsync'd, renamed over the old one, then the directory is fsync'd (which
//! also makes newly created AOF files' directory entries durable).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::resp::parse_u64;
use crate::BaseFormat;

/// Redis's message for most malformed lines.
const INVALID: &str = "Invalid AOF manifest file format";

/// Redis's `MANIFEST_MAX_LINE`.
const MANIFEST_LINE_MAX: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    Base,
    History,
    Incr,
}

impl FileKind {
    fn letter(self) -> char {
        match self {
            FileKind::Base => 'b',
            FileKind::History => 'h',
            FileKind::Incr => 'i',
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AofInfo {
    pub(crate) name: String,
    pub(crate) seq: u64,
    pub(crate) kind: FileKind,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) base: Option<AofInfo>,
    pub(crate) history: Vec<AofInfo>,
    pub(crate) incr: Vec<AofInfo>,
}

pub(crate) fn manifest_name(appendfilename: &str) -> String {
    format!("{appendfilename}.manifest")
}

pub(crate) fn temp_manifest_name(appendfilename: &str) -> String {
    format!("temp-{appendfilename}.manifest")
}

/// Redis's `getNewBaseFileNameAndMarkPreAsHistory`: the suffix says the
/// format.
pub(crate) fn base_name(appendfilename: &str, seq: u64, format: BaseFormat) -> String {
    let suffix = match format {
        BaseFormat::Aof => "aof",
        BaseFormat::Rdb => "rdb",
    };
    format!("{appendfilename}.{seq}.base.{suffix}")
}

pub(crate) fn incr_name(appendfilename: &str, seq: u64) -> String {
    format!("{appendfilename}.{seq}.incr.aof")
}

/// An incr file not listed in the manifest (yet): Redis's temporary
/// `temp-<appendfilename>.incr`, renamed to its seq's name when a rewrite
/// lists it. A rewrite creates the next before its S while the current one
/// is still appended to, so two alternate: the other gets `.1`.
pub(crate) fn unlisted_incr_name(appendfilename: &str, current: Option<&str>) -> String {
    let name = unlisted_incr_prefix(appendfilename);
    if current == Some(name.as_str()) {
        format!("{name}.1")
    } else {
        name
    }
}

/// What every unlisted incr file's name starts with.
pub(crate) fn unlisted_incr_prefix(appendfilename: &str) -> String {
    format!("temp-{appendfilename}.incr")
}

impl Manifest {
    /// Parses a manifest; the error says which line and why, in Redis's
    /// words (scripts that watch the log match them).
    pub(crate) fn parse(text: &[u8]) -> Result<Manifest, String> {
        let mut m = Manifest::default();
        let mut lines = 0usize;
        let mut max_incr_seq = 0u64;
        let mut rest = text;
        while !rest.is_empty() {
            let (raw, after) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], &rest[i + 1..]),
                None => (rest, &rest[rest.len()..]),
            };
            rest = after;
            lines += 1;
            if raw.first() == Some(&b'#') {
                continue;
            }
            let at = |msg: &str| format!("line {lines}: {msg}");
            if raw.len() > MANIFEST_LINE_MAX || raw.last() != Some(&b'\n') {
                return Err(at("The AOF manifest file contains too long line"));
            }
            let line = trim(raw);
            if line.is_empty() {
                return Err(at(INVALID));
            }
            let args = keel_protocol::split_args(line).ok_or_else(|| at(INVALID))?;
            if args.len() < 6 || args.len() % 2 != 0 {
                return Err(at(INVALID));
            }
            let (mut name, mut seq, mut kind) = (None, 0u64, None);
            for pair in args.chunks(2) {
                let key = String::from_utf8_lossy(&pair[0]).to_ascii_lowercase();
                match key.as_str() {
                    "file" => {
                        let n = String::from_utf8(pair[1].to_vec())
                            .map_err(|_| at("File name is not UTF-8"))?;
                        if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                            return Err(at("File can't be a path, just a filename"));
                        }
                        name = Some(n);
                    }
                    "seq" => {
                        seq = parse_u64(&pair[1]).ok_or_else(|| at(INVALID))?;
                    }
                    "type" => kind = pair[1].first().copied(),
                    _ => {}
                }
            }
            let (Some(name), true, Some(kind)) = (name, seq > 0, kind) else {
                return Err(at(INVALID));
            };
            let info = |kind| AofInfo { name, seq, kind };
            match kind {
                b'b' => {
                    if m.base.is_some() {
                        return Err(at("Found duplicate base file information"));
                    }
                    m.base = Some(info(FileKind::Base));
                }
                b'h' => m.history.push(info(FileKind::History)),
                b'i' => {
                    if seq <= max_incr_seq {
                        return Err(at("Found a non-monotonic sequence number"));
                    }
                    max_incr_seq = seq;
                    m.incr.push(info(FileKind::Incr));
                }
                _ => return Err(at("Unknown AOF file type")),
            }
        }
        if lines == 0 {
            return Err("Found an empty AOF manifest".into());
        }
        Ok(m)
    }

    /// The manifest as text: base first, then history, then incr files.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let all = self.base.iter().chain(&self.history).chain(&self.incr);
        for info in all {
            out.extend_from_slice(b"file ");
            let name = info.name.as_bytes();
            // Quoted where sdssplitargs would not read the name back as it is.
            match keel_protocol::needs_repr(name) {
                true => out.extend_from_slice(keel_protocol::repr(name).as_bytes()),
                false => out.extend_from_slice(name),
            }
            out.extend_from_slice(format!(" seq {} type {}\n", info.seq, info.kind.letter()).as_bytes());
        }
        out
    }

    /// The next incr seq: above every incr or history file's seq, so that a
    /// new incr file never reuses the name of one still on disk.
    pub(crate) fn next_incr_seq(&self) -> u64 {
        let incr = self.incr.iter().map(|i| i.seq);
        let hist = self.history.iter().filter(|i| i.name.ends_with(".incr.aof")).map(|i| i.seq);
        incr.chain(hist).max().unwrap_or(0) + 1
    }

    /// Writes the manifest atomically into `dir` (see the module docs).
    pub(crate) fn persist(&self, dir: &Path, appendfilename: &str) -> io::Result<()> {
        let tmp = dir.join(temp_manifest_name(appendfilename));
        let dst = dir.join(manifest_name(appendfilename));
        {
            let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
            f.write_all(&self.encode())?;
            f.sync_all()?;
        }
        fs::rename(&tmp, &dst)?;
        sync_dir(dir)
    }
}

/// fsyncs a directory, making renames and file creations in it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

pub(crate) fn manifest_path(dir: &Path, appendfilename: &str) -> PathBuf {
    dir.join(manifest_name(appendfilename))
}

fn trim(mut s: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    while s.first().is_some_and(ws) {
        s = &s[1..];
    }
    while s.last().is_some_and(ws) {
        s = &s[..s.len() - 1];
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_what_redis_writes() {
        let text = b"file appendonly.aof.2.base.rdb seq 2 type b\n\
            file appendonly.aof.1.incr.aof seq 1 type h\n\
            # a comment\n\
            file appendonly.aof.2.incr.aof seq 2 type i\n\
            file appendonly.aof.3.incr.aof seq 3 type i future yes\n";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(m.base.as_ref().unwrap().name, "appendonly.aof.2.base.rdb");
        assert_eq!(m.history.len(), 1);
        assert_eq!(m.incr.iter().map(|i| i.seq).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(m.next_incr_seq(), 4);
    }

    #[test]
    fn round_trips_odd_names() {
        let m = Manifest {
            base: Some(AofInfo { name: "my file\x01.1.base.aof".into(), seq: 1, kind: FileKind::Base }),
            history: vec![],
            incr: vec![AofInfo { name: "a\"b.1.incr.aof".into(), seq: 1, kind: FileKind::Incr }],
        };
        let text = m.encode();
        assert_eq!(
            text,
            b"file \"my file\\x01.1.base.aof\" seq 1 type b\nfile \"a\\\"b.1.incr.aof\" seq 1 type i\n"
        );
        assert_eq!(Manifest::parse(&text).unwrap(), m);
    }

    #[test]
    fn rejects_what_redis_rejects() {
        for bad in [
            &b""[..],
            b"\n",
            b"file a seq 1\n",
            b"file a seq 1 type x\n",
            b"file a/b seq 1 type i\n",
            b"file a seq 0 type i\n",
            b"file a seq 2 type i\nfile b seq 2 type i\n",
            b"file a seq 1 type b\nfile b seq 2 type b\n",
            b"file a seq 1 type i",
            b"file \"a seq 1 type i\n",
        ] {
            assert!(Manifest::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
