//! `keel-check-aof`: checks a multi-part AOF (given its manifest) or a
//! single AOF file, as Redis's `redis-check-aof` does, and with `fix`
//! truncates the last file at the end of its last valid command (never
//! asking: no stdin). Only the last file may be truncated. A file that
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

/// Checks `path` (a manifest or an AOF file), reporting to `out`.
pub fn check(path: &Path, fix: bool, out: &mut dyn Write) -> io::Result<CheckOutcome> {
    let bytes = fs::read(path)?;
    if !is_manifest(&bytes) {
        writeln!(out, "Start checking Old-Style AOF")?;
        return check_file(path, true, fix, out);
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
    let mut outcome = CheckOutcome::Valid;
    for (i, info) in files.iter().enumerate() {
        let last = i + 1 == files.len();
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
        match check_file(&fpath, last, fix, out)? {
            CheckOutcome::Valid => writeln!(out, "{kind} AOF {} is valid", info.name)?,
            CheckOutcome::Fixed => {
                writeln!(out, "Successfully truncated AOF {}", info.name)?;
                outcome = CheckOutcome::Fixed;
            }
            CheckOutcome::Invalid => return Ok(CheckOutcome::Invalid),
        }
    }
    writeln!(out, "All AOF files and manifest are valid")?;
    Ok(outcome)
}

fn check_file(path: &Path, last: bool, fix: bool, out: &mut dyn Write) -> io::Result<CheckOutcome> {
    let scan = load::scan_aof(path)?;
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into());
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
    if !fix {
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
