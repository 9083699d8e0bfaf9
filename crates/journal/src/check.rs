//! `keel-check-aof`: checks a multi-part AOF (given its manifest) or a
//! single AOF file, as Redis's `redis-check-aof` does. [`Repair::Fix`]
//! truncates the last file at the end of its last valid command (never
//! asking: no stdin); [`Repair::ToTimestamp`] cuts it at its first
//! timestamp annotation (`aof-timestamp-enabled`) later than a given time,
//! to undo what was written after it. Only the last file may be truncated. A file that
//! starts with an RDB (an RDB base, or an old-style AOF with an RDB
//! preamble) has its RDB checked whole (every key decoded, the checksum
//! compared) and then its command tail; a bad RDB is never fixed.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::load::{self, Problem};
use crate::manifest::Manifest;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// Every file is valid.
    Valid,
    /// The last file had a bad tail and `fix` truncated it.
    Fixed,
    /// Something is wrong and was not (or could not be) fixed.
    Invalid,
}

/// Redis's test: a manifest has a line starting with `file`.
fn is_manifest(bytes: &[u8]) -> bool {
    bytes.split(|&b| b == b'\n').any(|l| l.first() != Some(&b'#') && l.starts_with(b"file"))
}

/// What to do besides checking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Report only.
    Nothing,
    /// `--fix`: truncate a bad tail of the last file.
    Fix,
    /// `--truncate-to-timestamp <unix seconds>`: cut the last file at its
    /// first timestamp annotation later than this.
    ToTimestamp(u64),
}

/// Checks `path` (a manifest or an AOF file), reporting to `out`.
pub fn check(path: &Path, repair: Repair, out: &mut dyn Write) -> io::Result<CheckOutcome> {
    let bytes = fs::read(path)?;
    if !is_manifest(&bytes) {
        writeln!(out, "Start checking Old-Style AOF")?;
        let outcome = check_file(path, true, repair, out)?;
        match outcome {
            CheckOutcome::Valid => writeln!(out, "AOF {} is valid", path.display())?,
            // (A cut at a timestamp said so itself.)
            CheckOutcome::Fixed if repair == Repair::Fix => writeln!(out, "Successfully truncated AOF {}", path.display())?,
            CheckOutcome::Fixed => {}
            CheckOutcome::Invalid => {}
        }
        return Ok(outcome);
    }
    writeln!(out, "Start checking Multi Part AOF")?;
    let m = match Manifest::parse(&bytes) {
        Ok(m) => m,
        Err(e) => {
            writeln!(out, "Invalid manifest {}: {e}", path.display())?;
            return Ok(CheckOutcome::Invalid);
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let files: Vec<_> = m.base.iter().chain(&m.incr).collect();
    let sizes: Vec<u64> = files.iter().map(|f| fs::metadata(dir.join(&f.name)).map_or(0, |m| m.len())).collect();
    let tail = load::torn_candidate(&sizes, usize::from(m.base.is_some())).unwrap_or(files.len().saturating_sub(1));
    let mut outcome = CheckOutcome::Valid;
    for (i, info) in files.iter().enumerate() {
        // The file a torn tail may be cut from (as the server's start does).
        let last = i == tail;
        let fpath = dir.join(&info.name);
        let kind = if info.kind == crate::manifest::FileKind::Base { "BASE" } else { "INCR" };
        if !fpath.exists() {
            writeln!(out, "{kind} AOF {} is listed in the manifest but missing", info.name)?;
            return Ok(CheckOutcome::Invalid);
        }
        if info.kind == crate::manifest::FileKind::Base {
            let format = if load::is_rdb(&fpath)? { "RDB" } else { "RESP" };
            writeln!(out, "Start to check BASE AOF ({format} format).")?;
        } else if i == usize::from(m.base.is_some()) {
            writeln!(out, "Start to check INCR files.")?;
        }
        match check_file(&fpath, last, repair, out)? {
            CheckOutcome::Valid => writeln!(out, "{kind} AOF {} is valid", info.name)?,
            CheckOutcome::Fixed => {
                if repair == Repair::Fix {
                    writeln!(out, "Successfully truncated AOF {}", info.name)?;
                }
                outcome = CheckOutcome::Fixed;
            }
            CheckOutcome::Invalid => return Ok(CheckOutcome::Invalid),
        }
    }
    writeln!(out, "All AOF files and manifest are valid")?;
    Ok(outcome)
}

fn check_file(path: &Path, last: bool, repair: Repair, out: &mut dyn Write) -> io::Result<CheckOutcome> {
    let scan = load::scan_aof(path)?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
    if let Repair::ToTimestamp(unix_s) = repair {
        // Damage after the cut goes with what is cut.
        let cut = scan.timestamps.iter().find(|&&(_, t)| t > unix_s).map(|&(offset, _)| offset);
        let damage = match &scan.problem {
            Some(Problem::Torn { offset, .. } | Problem::Corrupt { offset, .. }) => Some(*offset),
            Some(Problem::BadRdb { .. }) => Some(0),
            None => None,
        };
        match cut {
            Some(cut) if damage.is_none_or(|d| d >= cut) => return cut_at_timestamp(path, &name, cut, unix_s, last, out),
            None if damage.is_none() => {
                writeln!(out, "Truncate nothing in AOF {name} to timestamp {unix_s}")?;
                return Ok(CheckOutcome::Valid);
            }
            _ => {}
        }
    }
    if let Some(Problem::BadRdb { reason }) = &scan.problem {
        writeln!(out, "{name}: {reason}")?;
        writeln!(out, "RDB preamble of AOF file is not sane, aborting.")?;
        return Ok(CheckOutcome::Invalid);
    }
    if scan.rdb_bytes.is_some() {
        writeln!(out, "RDB preamble is OK, proceeding with AOF tail...")?;
    }
    if let Some(p) = &scan.problem {
        let (what, offset, reason) = match p {
            Problem::Torn { offset, reason } => ("torn tail", offset, reason),
            Problem::Corrupt { offset, reason } => ("bad command", offset, reason),
            Problem::BadRdb { .. } => unreachable!("returned above"),
        };
        writeln!(out, "0x{offset:16x}: {what} in {name} at offset {offset}: {reason}")?;
    }
    let diff = scan.size - scan.valid_up_to;
    writeln!(
        out,
        "AOF analyzed: filename={name}, size={}, ok_up_to={}, ok_up_to_line={}, diff={diff}",
        scan.size, scan.valid_up_to, scan.valid_line
    )?;
    if scan.problem.is_none() {
        return Ok(CheckOutcome::Valid);
    }
    if repair != Repair::Fix {
        writeln!(out, "AOF {name} is not valid. Use the --fix option to try fixing it.")?;
        return Ok(CheckOutcome::Invalid);
    }
    if !last {
        writeln!(out, "Failed to truncate AOF {name} because it is not the last file")?;
        return Ok(CheckOutcome::Invalid);
    }
    writeln!(
        out,
        "This will shrink the AOF {name} from {} bytes, with {diff} bytes, to {} bytes",
        scan.size, scan.valid_up_to
    )?;
    let f = OpenOptions::new().write(true).open(path)?;
    f.set_len(scan.valid_up_to)?;
    f.sync_all()?;
    Ok(CheckOutcome::Fixed)
}

/// `--truncate-to-timestamp`: cuts `path` at `cut`, the start of its first
/// timestamp annotation later than `unix_s` (Redis's words throughout).
fn cut_at_timestamp(path: &Path, name: &str, cut: u64, unix_s: u64, last: bool, out: &mut dyn Write) -> io::Result<CheckOutcome> {
    if cut == 0 {
        writeln!(out, "AOF {name} has nothing before timestamp {unix_s}, aborting...")?;
        return Ok(CheckOutcome::Invalid);
    }
    if !last {
        writeln!(
            out,
            "Failed to truncate AOF {name} to timestamp {unix_s} to offset {cut} because it is not the last file."
        )?;
        writeln!(
            out,
            "If you insist, please delete all files after this file according to the manifest file and delete \
             the corresponding records in manifest file manually. Then re-run keel-check-aof."
        )?;
        return Ok(CheckOutcome::Invalid);
    }
    let f = OpenOptions::new().write(true).open(path)?;
    f.set_len(cut)?;
    f.sync_all()?;
    writeln!(out, "Successfully truncated AOF {name} to timestamp {unix_s}")?;
    Ok(CheckOutcome::Fixed)
}
