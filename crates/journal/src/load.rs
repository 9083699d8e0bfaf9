//! Opening the appendonly directory, checking files, and replaying them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::manifest::{self, AofInfo, FileKind, Manifest};
use keel_rdb::{RdbEntry, RdbItem, RdbReader};

use crate::resp::{Item, Mode, ReadError, RecordReader};
use crate::{BaseFormat, JournalConfig, JournalError};

/// Bytes a base file starts with when Redis wrote it as RDB
/// (`aof-use-rdb-preamble yes`, Redis's default).
const RDB_MAGIC: &[u8; 5] = b"REDIS";

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> JournalError + '_ {
    move |source| JournalError::Io { path: path.to_path_buf(), source }
}

/// What a scan of one AOF file found wrong, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The file ends inside a command, inside a MULTI/EXEC block, or in
    /// zero bytes: what a crash in the middle of a write leaves.
    Torn { offset: u64, reason: String },
    /// Bytes that are not a valid record at `offset`.
    Corrupt { offset: u64, reason: String },
    /// The RDB part of the file is damaged (never truncated: what follows
    /// the damage cannot be trusted, and a base is not a log tail).
    BadRdb { reason: String },
}

#[derive(Debug)]
pub(crate) struct Scan {
    pub(crate) size: u64,
    /// End of the last complete command outside a transaction (or of the
    /// RDB part), annotations after it not counted: where `--fix` and
    /// `aof-load-truncated` cut the file, and where the writer goes on.
    pub(crate) valid_up_to: u64,
    pub(crate) valid_line: u64,
    pub(crate) commands: u64,
    /// Size of the RDB the file starts with, if it does.
    pub(crate) rdb_bytes: Option<u64>,
    pub(crate) problem: Option<Problem>,
    /// Where each timestamp annotation starts, and its Unix time.
    pub(crate) timestamps: Vec<(u64, u64)>,
}

pub(crate) fn is_rdb(path: &Path) -> io::Result<bool> {
    let mut f = File::open(path)?;
    let mut sig = [0u8; 5];
    let mut n = 0;
    while n < sig.len() {
        match f.read(&mut sig[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n == sig.len() && &sig == RDB_MAGIC)
}

fn eq_name(arg: &[u8], name: &[u8]) -> bool {
    arg.eq_ignore_ascii_case(name)
}

/// Which of the listed files (sizes in order, incr files from
/// `first_incr` on) a crash may have left torn: the last incr file with
/// anything in it. A rewrite lists its new incr file before the writer
/// moves to it, so a crash in the middle of a write to the old one leaves
/// that one torn and the new one empty.
pub(crate) fn torn_candidate(sizes: &[u64], first_incr: usize) -> Option<usize> {
    sizes.iter().rposition(|&s| s > 0).filter(|&i| i >= first_incr)
}

/// Whether the byte at `offset` starts an annotation.
fn annotation_at(path: &Path, offset: u64) -> io::Result<bool> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut b = [0u8; 1];
    Ok(f.read(&mut b)? == 1 && b[0] == b'#')
}

/// Whether the file from `offset` on is what a crash in the middle of a
/// write leaves: part of one record (possibly none of it), then only zero
/// bytes (a size the kernel committed before the data) or space written
/// ahead (`prealloc.rs`: `#` and `\n`). `size` is the file's size.
fn torn_from(path: &Path, offset: u64, size: u64) -> io::Result<bool> {
    let mut f = File::open(path)?;
    // Where the run of filler and zero bytes that ends the file starts.
    let mut filler_from = size;
    let mut buf = vec![0u8; 64 * 1024];
    while filler_from > offset {
        let n = (filler_from - offset).min(buf.len() as u64) as usize;
        f.seek(SeekFrom::Start(filler_from - n as u64))?;
        f.read_exact(&mut buf[..n])?;
        match buf[..n].iter().rposition(|&b| !matches!(b, 0 | b'#' | b'\n')) {
            Some(i) => {
                filler_from -= (n - i - 1) as u64;
                break;
            }
            None => filler_from -= n as u64,
        }
    }
    if filler_from == offset {
        return Ok(true);
    }
    // What precedes the filler must end inside one record.
    f.seek(SeekFrom::Start(offset))?;
    let mut r = RecordReader::new(BufReader::new(f), filler_from - offset);
    Ok(matches!(r.next_item(Mode::Skim), Err(ReadError::Eof { .. })))
}

/// Reads a whole AOF file checking its structure (no values are kept). A
/// file that starts with `REDIS` is an RDB (every key decoded, the CRC64
/// checked) followed by commands, as `redis-check-aof` checks a base.
pub(crate) fn scan_aof(path: &Path) -> io::Result<Scan> {
    let f = File::open(path)?;
    let size = f.metadata()?.len();
    let mut input = BufReader::with_capacity(1 << 20, f);
    let mut scan = Scan { size, valid_up_to: 0, valid_line: 1, commands: 0, rdb_bytes: None, problem: None, timestamps: Vec::new() };
    // Offsets in the file of the reader's position 0: past the RDB part.
    let mut origin = 0;
    if is_rdb(path)? {
        match read_rdb(input) {
            Ok((rest, rdb_bytes)) => {
                input = rest;
                origin = rdb_bytes;
                scan.rdb_bytes = Some(rdb_bytes);
                scan.valid_up_to = rdb_bytes;
            }
            Err(e) => {
                scan.problem = Some(Problem::BadRdb { reason: e.to_string() });
                return Ok(scan);
            }
        }
    }
    let mut r = RecordReader::new(input, size - origin);
    let mut multi_start: Option<u64> = None;
    loop {
        let record_start = origin + r.position();
        // Space written ahead whose last line was cut short ends the input
        // as the file's end does: like any annotation, it is not content.
        let item = match r.next_item(Mode::Skim) {
            Err(ReadError::Eof { record_start }) if annotation_at(path, origin + record_start)? => Ok(None),
            item => item,
        };
        match item {
            Ok(None) => {
                if let Some(ms) = multi_start {
                    scan.problem = Some(Problem::Torn {
                        offset: ms,
                        reason: "end of file inside a MULTI/EXEC transaction".into(),
                    });
                }
                break;
            }
            Ok(Some(Item::Annotation(Some(unix_s)))) => {
                scan.timestamps.push((record_start, unix_s));
                continue;
            }
            Ok(Some(Item::Annotation(None))) => continue,
            // Content, unlike other annotations: the file is valid past it.
            Ok(Some(Item::KeyFlags(_))) => {}
            Ok(Some(Item::Command(argv))) => {
                scan.commands += 1;
                if eq_name(&argv[0], b"MULTI") {
                    if multi_start.is_some() {
                        scan.problem = Some(Problem::Corrupt {
                            offset: record_start,
                            reason: "MULTI inside a transaction".into(),
                        });
                        break;
                    }
                    multi_start = Some(record_start);
                } else if eq_name(&argv[0], b"EXEC") && multi_start.take().is_none() {
                    scan.problem = Some(Problem::Corrupt {
                        offset: record_start,
                        reason: "EXEC without MULTI".into(),
                    });
                    break;
                }
            }
            Err(ReadError::Eof { .. }) => {
                scan.problem = Some(Problem::Torn {
                    offset: multi_start.unwrap_or(record_start),
                    reason: "unexpected end of file inside a command".into(),
                });
                break;
            }
            Err(ReadError::Format { record_start, offset, reason }) => {
                let record_start = origin + record_start;
                scan.problem = Some(if torn_from(path, record_start, size)? {
                    Problem::Torn {
                        offset: multi_start.unwrap_or(record_start),
                        reason: "a partial command, then zero bytes or space written ahead, at the end of the file"
                            .into(),
                    }
                } else {
                    Problem::Corrupt { offset: origin + offset, reason }
                });
                break;
            }
            Err(ReadError::Io(e)) => return Err(e),
        }
        if multi_start.is_none() {
            scan.valid_up_to = origin + r.position();
            scan.valid_line = r.line();
        }
    }
    Ok(scan)
}

/// The state of the appendonly directory after [`prepare`].
pub(crate) struct Prepared {
    /// Files to replay, in order: (name, bytes to read).
    pub(crate) files: Vec<(String, u64)>,
    pub(crate) warnings: Vec<String>,
    /// Sum of the sizes of the base and incr files.
    pub(crate) total_size: u64,
    pub(crate) base_size: u64,
    /// The base starts with an RDB.
    pub(crate) base_rdb: bool,
    /// The incr file to append to, and its size.
    pub(crate) incr_name: String,
    pub(crate) incr_size: u64,
    /// That file is not listed in the manifest (`idle`).
    pub(crate) unlisted: bool,
    /// The manifest as it is on disk now (history entries only with
    /// `keep_history`).
    pub(crate) manifest: Manifest,
}

/// Reads a whole RDB, checking every key and the checksum; returns the
/// input positioned just past it, and its size.
fn read_rdb(input: BufReader<File>) -> Result<(BufReader<File>, u64), keel_rdb::RdbError> {
    let mut rdb = RdbReader::new(input)?;
    while rdb.next_item()?.is_some() {}
    let size = rdb.offset();
    Ok((rdb.into_inner(), size))
}

/// Creates an empty base file of `format`, synced: for RDB, a file with
/// no keys (`aof-base` 1), as Redis 7.0 writes one into a fresh directory.
pub(crate) fn create_empty_base(path: &Path, format: BaseFormat) -> Result<(), JournalError> {
    match format {
        BaseFormat::Aof => create_empty(path),
        BaseFormat::Rdb => {
            let f = File::create(path).map_err(io_err(path))?;
            let options = keel_rdb::WriteOptions { aof_base: true, ..keel_rdb::WriteOptions::default() };
            let w = keel_rdb::RdbWriter::new(io::BufWriter::new(f), options).map_err(io_err(path))?;
            let f = w.finish().map_err(io_err(path))?.into_inner().map_err(|e| io_err(path)(e.into_error()))?;
            f.sync_all().map_err(io_err(path))
        }
    }
}

pub(crate) fn create_empty(path: &Path) -> Result<(), JournalError> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_err(path))?;
    f.sync_all().map_err(io_err(path))
}

pub(crate) fn persist(m: &Manifest, config: &JournalConfig) -> Result<(), JournalError> {
    m.persist(&config.dir, &config.filename).map_err(|e| {
        JournalError::Manifest(format!(
            "writing {}: {e}",
            manifest::manifest_path(&config.dir, &config.filename).display()
        ))
    })
}

/// The size of `name`, a file the manifest in `dir` lists.
fn listed_len(dir: &Path, name: &str) -> Result<u64, JournalError> {
    let path = dir.join(name);
    match fs::metadata(&path) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(JournalError::Missing { name: name.into(), source: e }),
        Err(source) => Err(JournalError::Io { path, source }),
    }
}

/// Makes the directory ready to append to and checks the files to replay.
///
/// * No manifest: if an old-style single AOF `<filename>` sits beside the
///   directory, it becomes the base (manifest first, then the rename, as
///   Redis 7 upgrades; a crash in between is finished on the next open).
///   Otherwise an empty base and an empty incr file are created, then the
///   manifest, like a fresh Redis 7 does.
/// * A fresh directory's empty base is in `config.base_format`.
/// * The last file is scanned: a torn tail is cut off when
///   `load_truncated`, otherwise refused; corruption is always refused.
///   Earlier files are checked while they are replayed.
/// * No incr file: a new one is created and added to the manifest.
/// * What a rewrite leaves behind when it is cut short is cleaned up, as
///   Redis does at start: history files (listed `type h`: replaced by a
///   committed rewrite, not yet deleted) are deleted and dropped from the
///   manifest; a temporary base (`temp-rewriteaof-bg-*.aof`) is deleted.
///   Neither is ever loaded. (An incr or base file that a crash left
///   unlisted is harmless too: the next rewrite truncates or replaces it
///   when it reuses its name.) With `keep_history` (`aof-disable-auto-gc`)
///   history files stay.
/// * `idle` (opened while `appendonly no`): the manifest is read, if there
///   is one, and nothing else is created, listed, scanned or cut; appends
///   go to a new unlisted incr file.
pub(crate) fn prepare(config: &JournalConfig) -> Result<Prepared, JournalError> {
    let dir = &config.dir;
    let name = &config.filename;
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let mpath = manifest::manifest_path(dir, name);
    let old_style = dir.parent().map(|p| p.join(name)).filter(|p| p.is_file() && !config.idle);
    let mut warnings = Vec::new();

    let mut m = if mpath.exists() {
        let text = fs::read(&mpath).map_err(io_err(&mpath))?;
        Manifest::parse(&text)
            .map_err(|e| JournalError::Manifest(format!("{}: {e}", mpath.display())))?
    } else if config.idle {
        Manifest::default()
    } else if old_style.is_some() {
        let m = Manifest {
            base: Some(AofInfo { name: name.clone(), seq: 1, kind: FileKind::Base }),
            ..Manifest::default()
        };
        persist(&m, config)?;
        m
    } else {
        let base = manifest::base_name(name, 1, config.base_format);
        let incr = manifest::incr_name(name, 1);
        create_empty_base(&dir.join(&base), config.base_format)?;
        create_empty(&dir.join(&incr))?;
        let m = Manifest {
            base: Some(AofInfo { name: base, seq: 1, kind: FileKind::Base }),
            history: vec![],
            incr: vec![AofInfo { name: incr, seq: 1, kind: FileKind::Incr }],
        };
        persist(&m, config)?;
        m
    };

    // Finish an old-style upgrade: move the old AOF into the directory.
    if let (Some(old), Some(base)) = (&old_style, &m.base) {
        let inside = dir.join(name);
        if m.incr.is_empty() && base.name == *name && !inside.exists() {
            fs::rename(old, &inside).map_err(io_err(old))?;
            manifest::sync_dir(dir).map_err(io_err(dir))?;
            warnings.push(format!(
                "moved the old-style AOF {} into {} as the base file",
                old.display(),
                dir.display()
            ));
        }
    }

    if !m.history.is_empty() && !config.keep_history {
        for h in std::mem::take(&mut m.history) {
            remove_leftover(&dir.join(&h.name));
        }
        persist(&m, config)?;
    }
    let unlisted_prefix = manifest::unlisted_incr_prefix(name);
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if (name.starts_with(TEMP_BASE_PREFIX) && name.ends_with(".aof")) || name.starts_with(&unlisted_prefix) {
                remove_leftover(&entry.path());
            }
        }
    }

    let listed: Vec<String> =
        m.base.iter().chain(&m.incr).map(|i| i.name.clone()).collect();
    let mut sizes = Vec::with_capacity(listed.len());
    for file in &listed {
        sizes.push(listed_len(dir, file)?);
    }
    let base_size = if m.base.is_some() { sizes[0] } else { 0 };
    let base_rdb = match &m.base {
        Some(base) => {
            let path = dir.join(&base.name);
            is_rdb(&path).map_err(io_err(&path))?
        }
        None => false,
    };

    if let Some(tail) = torn_candidate(&sizes, usize::from(m.base.is_some())).filter(|_| !config.idle) {
        let path = dir.join(&listed[tail]);
        let size = &mut sizes[tail];
        let scan = scan_aof(&path).map_err(io_err(&path))?;
        match scan.problem {
            None if scan.valid_up_to < *size => {
                // Annotations after the last command: space the writer
                // wrote ahead (`prealloc.rs`), left by a crash. The
                // writer goes on from the last command.
                let f = OpenOptions::new().write(true).open(&path).map_err(io_err(&path))?;
                f.set_len(scan.valid_up_to).map_err(io_err(&path))?;
                tracing::info!(
                    "journal: {}: cut {} bytes of annotations after the last command",
                    path.display(),
                    *size - scan.valid_up_to
                );
                *size = scan.valid_up_to;
            }
            None => {}
            Some(Problem::Corrupt { offset, reason }) => {
                return Err(JournalError::Corrupt { file: path, offset, reason });
            }
            Some(Problem::BadRdb { reason }) => return Err(JournalError::RdbBase { file: path, reason }),
            Some(Problem::Torn { offset, reason }) if !config.load_truncated => {
                return Err(JournalError::Truncated { file: path, offset, reason });
            }
            Some(Problem::Torn { offset, reason }) => {
                let f = OpenOptions::new().write(true).open(&path).map_err(io_err(&path))?;
                f.set_len(scan.valid_up_to).map_err(io_err(&path))?;
                f.sync_all().map_err(io_err(&path))?;
                let msg = format!(
                    "{}: {reason} at offset {offset}; truncated from {} to {} bytes \
                     (aof-load-truncated yes)",
                    path.display(),
                    *size,
                    scan.valid_up_to
                );
                tracing::warn!("{msg}");
                warnings.push(msg);
                *size = scan.valid_up_to;
            }
        }
    }

    let files: Vec<(String, u64)> = listed.into_iter().zip(sizes.iter().copied()).collect();
    let total_size = sizes.iter().sum();

    if config.idle {
        let incr_name = manifest::unlisted_incr_name(name, None);
        create_empty(&dir.join(&incr_name))?;
        let prepared = Prepared { files, warnings, total_size, base_size, base_rdb, incr_size: 0, manifest: m, unlisted: true, incr_name };
        return Ok(prepared);
    }
    let (incr_name, incr_size) = match m.incr.last() {
        Some(i) => (i.name.clone(), *sizes.last().unwrap_or(&0)),
        None => {
            let seq = m.next_incr_seq();
            let incr = manifest::incr_name(name, seq);
            create_empty(&dir.join(&incr))?;
            m.incr.push(AofInfo { name: incr.clone(), seq, kind: FileKind::Incr });
            persist(&m, config)?;
            (incr, 0)
        }
    };
    Ok(Prepared { files, warnings, total_size, base_size, base_rdb, incr_name, incr_size, manifest: m, unlisted: false })
}

/// How the temporary base of a rewrite is named (Redis's own prefix).
pub(crate) const TEMP_BASE_PREFIX: &str = "temp-rewriteaof-bg-";

/// Deletes a file nothing loads any more; a failure is only logged (the
/// file is harmless where it is). Returns whether the name is gone.
pub(crate) fn remove_leftover(path: &Path) -> bool {
    match fs::remove_file(path) {
        Ok(()) => tracing::info!("journal: removed {}", path.display()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!("journal: could not remove {}: {e}", path.display());
            return false;
        }
    }
    true
}

/// One thing to replay, in order.
#[derive(Debug)]
pub enum Replayed {
    /// A command of an AOF file, executed in database `db`.
    Command { db: usize, argv: Vec<Vec<u8>> },
    /// A key of an RDB base, to insert as it is (keys whose expiry has
    /// passed included: nothing expires while loading, and Redis keeps
    /// them too when it loads an AOF base).
    Key(RdbEntry),
    /// The memcached flags of the key the command before it wrote
    /// (its first argument, in its database).
    ItemFlags { flags: u32 },
    /// An RDB base's RESIZEDB hint: database `db` is about to receive
    /// `keys` keys, `with_expiry` of them with a TTL (to size its tables).
    Resize { db: usize, keys: u64, with_expiry: u64 },
}

pub type ReplayItem = Result<Replayed, JournalError>;

/// The commands and keys to replay, in order: the base file, then each
/// incr file in seq order.
///
/// * A file that starts with `REDIS` is read as an RDB (its keys yielded as
///   [`Replayed::Key`], its RESIZEDB hints as [`Replayed::Resize`], its
///   other items skipped), then as commands from the
///   end of the RDB on, as Redis reads an AOF with an RDB preamble. A
///   damaged RDB gives [`JournalError::RdbBase`].
/// * `SELECT` records are consumed here: they set the db of the items that
///   follow. Every file starts in db 0 (Redis loads each file with a fresh
///   client).
/// * `MULTI` and `EXEC` are yielded as ordinary items, as they are in the
///   file; between them come the transaction's commands (SELECTs inside are
///   consumed as above). Every yielded `MULTI` is followed by its `EXEC`
///   unless the iterator yields an error first: an incomplete transaction at
///   the end of the last file was cut off at open.
/// * Annotations (`#TS:...`) are skipped, but for the memcached flags of
///   the key a command wrote ([`Replayed::ItemFlags`]).
/// * After an error the iterator ends. The caller must treat any error as
///   fatal to loading: the data after it is not replayed.
pub struct Replay {
    dir: PathBuf,
    files: std::vec::IntoIter<(String, u64)>,
    current: Option<Current>,
    db: usize,
    multi_open: bool,
    done: bool,
    warnings: Vec<String>,
    commands: u64,
    keys: u64,
    /// Bytes of RDB read so far (they load at another rate than commands:
    /// the server measures the two apart).
    rdb_bytes: u64,
    /// Sizes of every file to replay, and of those already replayed
    /// (INFO loading_total_bytes / loading_loaded_bytes).
    total_bytes: u64,
    finished_bytes: u64,
}

/// The file being replayed.
struct Current {
    path: PathBuf,
    len: u64,
    reading: Reading,
}

enum Reading {
    Rdb(RdbReader<BufReader<File>>),
    /// Commands; `origin` is the file offset of the reader's position 0
    /// (the end of the RDB part, if any).
    Aof { reader: RecordReader<BufReader<File>>, origin: u64 },
}

impl Current {
    fn position(&self) -> u64 {
        match &self.reading {
            Reading::Rdb(r) => r.offset(),
            Reading::Aof { reader, origin } => origin + reader.position(),
        }
    }
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("dir", &self.dir)
            .field("commands", &self.commands)
            .field("keys", &self.keys)
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

impl Replay {
    pub(crate) fn new(dir: PathBuf, files: Vec<(String, u64)>, warnings: Vec<String>) -> Replay {
        let total_bytes = files.iter().map(|(_, len)| len).sum();
        Replay {
            total_bytes,
            finished_bytes: 0,
            dir,
            files: files.into_iter(),
            current: None,
            db: 0,
            multi_open: false,
            done: false,
            warnings,
            commands: 0,
            keys: 0,
            rdb_bytes: 0,
        }
    }

    /// The files the manifest in `dir` lists, as they are now, to load
    /// again what a running journal has written (DEBUG LOADAOF): nothing is
    /// checked, repaired or created first, as `Journal::open` would. The
    /// caller makes sure nothing is appended meanwhile.
    pub fn listed(dir: &Path, filename: &str) -> Result<Replay, JournalError> {
        let mpath = manifest::manifest_path(dir, filename);
        let text = fs::read(&mpath).map_err(io_err(&mpath))?;
        let m = Manifest::parse(&text).map_err(|e| JournalError::Manifest(format!("{}: {e}", mpath.display())))?;
        let mut files = Vec::new();
        for info in m.base.iter().chain(&m.incr) {
            files.push((info.name.clone(), listed_len(dir, &info.name)?));
        }
        Ok(Replay::new(dir.to_path_buf(), files, Vec::new()))
    }

    /// What open had to repair or wants the operator to know (a truncated
    /// torn tail, an upgraded old-style AOF), one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The file the last item came from.
    pub fn current_file(&self) -> Option<&Path> {
        self.current.as_ref().map(|c| c.path.as_path())
    }

    /// Bytes of every file to replay.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Bytes replayed so far.
    pub fn loaded_bytes(&self) -> u64 {
        self.finished_bytes + self.current.as_ref().map_or(0, Current::position)
    }

    /// Commands yielded so far (SELECTs not counted).
    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// RDB keys yielded so far.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Bytes of RDB read so far (the RDB parts of the files replayed).
    pub fn rdb_bytes(&self) -> u64 {
        self.rdb_bytes
    }

    fn fail(&mut self, e: JournalError) -> Option<ReplayItem> {
        self.done = true;
        Some(Err(e))
    }

    fn open_next(&mut self) -> Result<bool, JournalError> {
        let Some((name, len)) = self.files.next() else { return Ok(false) };
        let path = self.dir.join(&name);
        let io = |source| JournalError::Io { path: path.clone(), source };
        let rdb = is_rdb(&path).map_err(io)?;
        let input = BufReader::with_capacity(1 << 20, File::open(&path).map_err(io)?);
        self.db = 0;
        self.multi_open = false;
        let reading = if rdb {
            // The parsing thread is what a load waits on: the checksum goes to a helper.
            let reader = RdbReader::new(input)
                .map_err(|e| JournalError::RdbBase { file: path.clone(), reason: e.to_string() })?
                .checksum_in_background();
            Reading::Rdb(reader)
        } else {
            Reading::Aof { reader: RecordReader::new(input, len), origin: 0 }
        };
        self.current = Some(Current { path, len, reading });
        Ok(true)
    }

    /// The next key of the RDB being read; at its end, moves on to the
    /// commands after it.
    fn next_rdb(&mut self) -> Result<Option<Replayed>, JournalError> {
        let Some(Current { path, len, reading: Reading::Rdb(reader) }) = self.current.as_mut() else {
            return Ok(None);
        };
        loop {
            match reader.next_item() {
                Ok(Some(RdbItem::Entry(e))) => {
                    self.keys += 1;
                    return Ok(Some(Replayed::Key(e)));
                }
                Ok(Some(RdbItem::SelectDb(db))) => self.db = db as usize,
                Ok(Some(RdbItem::ResizeDb { db_size, expires_size })) => {
                    return Ok(Some(Replayed::Resize { db: self.db, keys: db_size, with_expiry: expires_size }));
                }
                // A base's function library replays as the command that
                // loads it.
                Ok(Some(RdbItem::Function { code })) => {
                    let argv = vec![b"FUNCTION".to_vec(), b"LOAD".to_vec(), b"REPLACE".to_vec(), code];
                    return Ok(Some(Replayed::Command { db: self.db, argv }));
                }
                Ok(Some(RdbItem::ModuleAux { module })) => {
                    return Err(JournalError::RdbBase { file: path.clone(), reason: keel_rdb::no_matching_module(&module) });
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return Err(JournalError::RdbBase { file: path.clone(), reason: e.to_string() }),
            }
        }
        let (path, len) = (path.clone(), *len);
        let Some(Current { reading: Reading::Rdb(reader), .. }) = self.current.take() else {
            unreachable!("matched above")
        };
        let origin = reader.offset();
        self.rdb_bytes += origin;
        // Commands after an RDB preamble start in db 0, as Redis's AOF client.
        self.db = 0;
        let reader = RecordReader::new(reader.into_inner(), len.saturating_sub(origin));
        self.current = Some(Current { path, len, reading: Reading::Aof { reader, origin } });
        Ok(None)
    }
}

impl Iterator for Replay {
    type Item = ReplayItem;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        loop {
            if self.current.is_none() {
                match self.open_next() {
                    Ok(true) => {}
                    Ok(false) => {
                        self.done = true;
                        return None;
                    }
                    Err(e) => return self.fail(e),
                }
            }
            let Some(current) = self.current.as_mut() else { continue };
            let (reader, origin) = match &mut current.reading {
                Reading::Rdb(_) => match self.next_rdb() {
                    Ok(Some(key)) => return Some(Ok(key)),
                    Ok(None) => continue,
                    Err(e) => return self.fail(e),
                },
                Reading::Aof { reader, origin } => (reader, *origin),
            };
            let path = &current.path;
            let corrupt = |offset, reason: &str| JournalError::Corrupt {
                file: path.clone(),
                offset: origin + offset,
                reason: reason.to_string(),
            };
            let record_start = reader.position();
            let err = match reader.next_item(Mode::Full) {
                Ok(Some(Item::Annotation(_))) => continue,
                Ok(Some(Item::KeyFlags(flags))) => return Some(Ok(Replayed::ItemFlags { flags })),
                Ok(Some(Item::Command(argv))) => {
                    let name = &argv[0];
                    if eq_name(name, b"SELECT") {
                        match (argv.len(), argv.get(1).and_then(|d| crate::resp::parse_u64(d))) {
                            (2, Some(db)) if db <= usize::MAX as u64 => {
                                self.db = db as usize;
                                continue;
                            }
                            _ => corrupt(record_start, "invalid SELECT"),
                        }
                    } else if eq_name(name, b"MULTI") && self.multi_open {
                        corrupt(record_start, "MULTI inside a transaction")
                    } else if eq_name(name, b"EXEC") && !self.multi_open {
                        corrupt(record_start, "EXEC without MULTI")
                    } else {
                        if eq_name(name, b"MULTI") {
                            self.multi_open = true;
                        } else if eq_name(name, b"EXEC") {
                            self.multi_open = false;
                        }
                        self.commands += 1;
                        return Some(Ok(Replayed::Command { db: self.db, argv }));
                    }
                }
                Ok(None) if self.multi_open => JournalError::Truncated {
                    file: path.clone(),
                    offset: origin + reader.position(),
                    reason: "end of file inside a MULTI/EXEC transaction".into(),
                },
                Ok(None) => {
                    self.finished_bytes += current.len;
                    self.current = None;
                    continue;
                }
                Err(ReadError::Eof { record_start })
                    if self.files.len() == 0 && annotation_at(path, origin + record_start).unwrap_or(false) =>
                {
                    // A live file read to its current end (`Replay::listed`):
                    // the space written ahead of it may end in a cut-short line.
                    self.finished_bytes += current.len;
                    self.current = None;
                    continue;
                }
                Err(ReadError::Eof { record_start }) => JournalError::Truncated {
                    file: path.clone(),
                    offset: origin + record_start,
                    reason: "end of file inside a command; only the last file may have a torn tail".into(),
                },
                Err(ReadError::Format { offset, reason, .. }) => corrupt(offset, &reason),
                Err(ReadError::Io(source)) => JournalError::Io { path: path.clone(), source },
            };
            return self.fail(err);
        }
    }
}
