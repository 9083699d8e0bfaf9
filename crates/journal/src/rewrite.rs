//! AOF rewrite, the Redis 7.0 way: rotate to a new incr file at the instant
//! S, write a new base holding the dataset as it was at S, then make the
//! manifest say "new base + the incr files opened since S" and delete the
//! files it replaced.
//!
//! # Steps, and what a crash at each leaves
//!
//! 1. [`Journal::prepare_rewrite`] (no lock of the server's held): creates
//!    the temporary base `temp-rewriteaof-bg-<pid>.aof` and the next incr
//!    file (empty, fsync'd), then atomically replaces the manifest with
//!    (old base, old incr files, new incr file). Crash: the manifest lists
//!    an empty last incr file; loading reads exactly what it read before.
//! 2. [`PreparedRewrite::start`], the instant S, called while the server
//!    holds every shard lock (appends happen under shard locks, so no write
//!    is half-done): every record appended from now on goes to the new incr
//!    file, the ones before to the old one (see `writer.rs` for how the
//!    writer finishes and fsyncs the old file before it moves on). No I/O,
//!    no failure: a few pointer moves under the `Gather` lock.
//! 3. The server writes the dataset at S into the temporary base, as RESP
//!    commands ([`Rewrite::write`], `SELECT` where the database changes) or
//!    as an RDB ([`Rewrite::base_writer`]), as [`RewriteOptions`] said.
//!    Crash: the temporary file is not listed; the next open deletes it.
//! 4. [`Rewrite::commit`]: waits until the writer has moved to the new
//!    file (everything before S is written and synced in the old files),
//!    fdatasyncs the base, renames it to `<appendfilename>.<seq>.base.aof`
//!    (`.base.rdb` for an RDB),
//!    atomically replaces the manifest with (new base, old base and old
//!    incr files as `type h` history, incr files opened since S), fsyncs
//!    the directory, then deletes the history files and writes the manifest
//!    once more without them (unless `aof-disable-auto-gc` keeps them:
//!    [`Journal::set_keep_history`]). Crash before the manifest's rename: the old
//!    manifest, still complete (the renamed base is an unlisted leftover
//!    that the next rewrite's rename replaces). After it: the new one; the
//!    history files are never loaded, and the next open deletes them.
//!
//! With [`IncrListing::AtCommit`] step 1 does not touch the manifest: the
//! new incr file, created under a temporary name, is renamed and listed by
//! step 4, with the base. With [`IncrListing::Never`] it is never listed,
//! and step 4 leaves the base alone in the manifest.
//!
//! Seqs are Redis's: the base's is one above the last base's; an incr
//! file's is one above every incr file the manifest lists (history
//! included), taken when the file is listed.
//!
//! [`Rewrite::abort`] (or dropping a `Rewrite`) deletes the temporary base
//! and keeps everything else: the rotation stays, as in Redis, and the
//! manifest keeps listing every incr file.
//!
//! Durability is never weaker across the switch: records before S are
//! acknowledged as they were (the old file is synced before the writer
//! moves on), records after it only once synced in the new file; the
//! files a commit deletes hold nothing that is not in the new base.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::file::{FileFactory, IncrementalSync, LogFile};
use crate::load::{self, TEMP_BASE_PREFIX};
use crate::manifest::{self, AofInfo, FileKind, Manifest};
use crate::writer::{Inner, Switch};
use crate::{resp, BaseFormat, Journal, JournalConfig, JournalError, JournalStats, Lsn};

/// The manifest and the sizes of the files it lists, shared by the journal
/// and its rewrite.
pub(crate) struct Files {
    config: JournalConfig,
    factory: Arc<dyn FileFactory>,
    /// What incr files keep written ahead (`JournalConfig::space_ahead`,
    /// changed by `Journal::set_space_ahead`).
    pub(crate) space_ahead: Arc<AtomicU64>,
    /// The manifest as on disk. Held across file operations by the rewrite
    /// steps only (never by appenders, `stats` or `sizes`).
    manifest: Mutex<Manifest>,
    rewriting: AtomicBool,
    base_size: AtomicU64,
    /// The base is an RDB (replay reads it faster per byte than commands).
    base_rdb: AtomicBool,
    /// The name of the incr file appended to when the manifest does not
    /// list it (opened `idle`, or by a rewrite that lists its file at
    /// commit or never). Until a commit lists one, every rewrite lists its
    /// incr file at commit, if at all.
    unlisted: Mutex<Option<String>>,
    /// `aof-disable-auto-gc`: a commit leaves its history files.
    keep_history: AtomicBool,
    /// `aof_current_size` is `written + size_adj`: LSNs count every byte
    /// ever appended, the files hold the base and what came after S.
    size_adj: AtomicI64,
    /// Redis's `aof_rewrite_base_size`: the size right after the last
    /// rewrite (at open, the base's), for `auto-aof-rewrite-percentage`.
    rewrite_base_size: AtomicU64,
    counters: Mutex<Counters>,
}

#[derive(Default)]
struct Counters {
    started: u64,
    running_since: Option<Instant>,
    last_ok: Option<bool>,
    last_duration: Option<Duration>,
    consecutive_failures: u64,
    /// Size of the files the last successful rewrite replaced (at S) and of
    /// the base it wrote: how much a rewrite compacts.
    last_input_bytes: u64,
    last_output_bytes: u64,
}

/// What automatic rewrites are decided on (`Journal::sizes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Redis's `aof_current_size`: base plus incr files.
    pub current: u64,
    /// The base file's size.
    pub base: u64,
    /// Redis's `aof_rewrite_base_size` (INFO's `aof_base_size`).
    pub rewrite_base: u64,
    pub rewriting: bool,
    /// The last successful rewrite's input (files replaced, at S) and
    /// output (the base) sizes; 0 when there was none since open.
    pub last_input: u64,
    pub last_output: u64,
    /// The base is an RDB.
    pub base_rdb: bool,
}

impl Files {
    pub(crate) fn new(
        config: &JournalConfig,
        factory: Arc<dyn FileFactory>,
        space_ahead: Arc<AtomicU64>,
        manifest: Manifest,
        base_size: u64,
        base_rdb: bool,
        unlisted: Option<String>,
    ) -> Files {
        Files {
            config: config.clone(),
            factory,
            space_ahead,
            manifest: Mutex::new(manifest),
            rewriting: AtomicBool::new(false),
            base_size: AtomicU64::new(base_size),
            base_rdb: AtomicBool::new(base_rdb),
            unlisted: Mutex::new(unlisted),
            keep_history: AtomicBool::new(config.keep_history),
            size_adj: AtomicI64::new(0),
            rewrite_base_size: AtomicU64::new(base_size),
            counters: Mutex::new(Counters::default()),
        }
    }

    fn current_size(&self, written: Lsn) -> u64 {
        (written as i64).saturating_add(self.size_adj.load(Ordering::Acquire)).max(0) as u64
    }

    pub(crate) fn sizes(&self, written: Lsn) -> Sizes {
        let c = self.counters.lock();
        Sizes {
            current: self.current_size(written),
            base: self.base_size.load(Ordering::Acquire),
            rewrite_base: self.rewrite_base_size.load(Ordering::Acquire),
            rewriting: self.rewriting.load(Ordering::Acquire),
            last_input: c.last_input_bytes,
            last_output: c.last_output_bytes,
            base_rdb: self.base_rdb.load(Ordering::Acquire),
        }
    }

    pub(crate) fn fill_stats(&self, s: &mut JournalStats, written: Lsn) {
        s.aof_current_size = self.current_size(written);
        s.aof_base_size = self.rewrite_base_size.load(Ordering::Acquire);
        s.base_file_size = self.base_size.load(Ordering::Acquire);
        let c = self.counters.lock();
        s.aof_rewrites = c.started;
        s.aof_rewrite_in_progress = c.running_since.is_some();
        s.aof_current_rewrite_ms = c.running_since.map(|t| t.elapsed().as_millis() as u64);
        s.aof_last_rewrite_ms = c.last_duration.map(|d| d.as_millis() as u64);
        s.aof_last_rewrite_ok = c.last_ok.unwrap_or(true);
        s.aof_rewrites_consecutive_failures = c.consecutive_failures;
    }

    fn path(&self, name: &str) -> PathBuf {
        self.config.dir.join(name)
    }

    /// Creates `path` empty and opens it: the incr file the writer will
    /// move to (`incr`), or a base.
    fn open_file(&self, path: &std::path::Path, incr: bool) -> Result<Arc<dyn LogFile>, JournalError> {
        load::create_empty(path)?;
        let opened = if incr {
            self.factory.open_incr(path, Arc::clone(&self.space_ahead))
        } else {
            self.factory.open_append(path)
        };
        opened.map_err(|source| JournalError::Io { path: path.to_path_buf(), source })
    }

    /// Deletes the history files `m` lists and writes it without them (a
    /// failure there is only logged: history files are never loaded).
    fn drop_history(&self, m: &mut Manifest) {
        if m.history.is_empty() {
            return;
        }
        for h in std::mem::take(&mut m.history) {
            crate::file::remove_gradually(&self.path(&h.name));
        }
        if let Err(e) = self.persist(m) {
            tracing::warn!("journal: rewriting the manifest without its history files: {e}");
        }
    }

    /// Replaces the manifest on disk. A failure after the rename (the
    /// directory fsync) leaves the new manifest in place: that counts as
    /// done, since deleting what it lists would break the directory.
    fn persist(&self, m: &Manifest) -> Result<(), JournalError> {
        match load::persist(m, &self.config) {
            Ok(()) => Ok(()),
            Err(e) => {
                let path = manifest::manifest_path(&self.config.dir, &self.config.filename);
                if fs::read(&path).is_ok_and(|on_disk| on_disk == m.encode()) {
                    tracing::error!("journal: {e}; the new manifest is in place, going on");
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    fn finish(&self, ok: bool, started: Instant) {
        let mut c = self.counters.lock();
        c.running_since = None;
        c.last_ok = Some(ok);
        c.last_duration = Some(started.elapsed());
        c.consecutive_failures = if ok { 0 } else { c.consecutive_failures + 1 };
        drop(c);
        self.rewriting.store(false, Ordering::Release);
    }
}

/// Commands of a base file being built, encoded, for [`Rewrite::write`].
/// The server fills it while it holds a shard's lock and writes it after
/// letting go. It remembers the database of the last command across
/// writes, so `SELECT` appears only where the database changes.
#[derive(Debug, Default)]
pub struct BaseBuffer {
    bytes: Vec<u8>,
    db: Option<usize>,
    commands: u64,
}

impl BaseBuffer {
    pub fn new() -> BaseBuffer {
        BaseBuffer::default()
    }

    /// Adds Redis's `#TS:` annotation with the current time, which an
    /// AOF-format base starts with under `aof-timestamp-enabled`.
    pub fn push_timestamp(&mut self) {
        resp::encode_timestamp(&mut self.bytes, resp::unix_s());
    }

    /// Adds one command, executed in database `db`.
    pub fn push<A: AsRef<[u8]>>(&mut self, db: usize, argv: &[A]) {
        if self.db != Some(db) {
            resp::encode_select(&mut self.bytes, db);
            self.db = Some(db);
        }
        resp::encode_command(&mut self.bytes, argv);
        self.commands += 1;
    }

    /// Adds the memcached flags of the key the last command pushed wrote,
    /// as the incr files log them after a memcached write (an annotation,
    /// which Redis skips): after the key's last command, since a later
    /// write to it (a PEXPIREAT) would reset them on replay.
    pub fn push_item_flags(&mut self, flags: u32) {
        resp::encode_item_flags(&mut self.bytes, flags);
    }

    /// The encoded commands not yet written.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes not yet written.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Commands pushed so far (SELECTs not counted).
    pub fn commands(&self) -> u64 {
        self.commands
    }
}

/// How a rewrite writes its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RewriteOptions {
    /// The format the caller writes the base in; it names the file.
    pub base_format: BaseFormat,
    /// When the new incr file is listed in the manifest.
    pub incr: IncrListing,
    /// Fdatasync the base every [`BASE_SYNC_EVERY_BYTES`] written
    /// (`aof-rewrite-incremental-fsync`).
    pub incremental_fsync: bool,
}

/// When a rewrite lists the incr file it creates (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncrListing {
    /// At once, beside the files it will replace (`appendonly yes`).
    AtOnce,
    /// Only at the commit, with the base (Redis's temporary incr file of
    /// `AOF_WAIT_REWRITE`). For a journal that was not logging before S
    /// (`CONFIG SET appendonly yes`): the files on disk then miss what
    /// changed meanwhile, and the records after S make sense only on top
    /// of the new base. A crash before the commit loads the old files
    /// alone; after a failed rewrite the next one's commit covers the
    /// unlisted file's records with its base.
    AtCommit,
    /// Never (BGREWRITEAOF with `appendonly no`): nothing is logged, and the
    /// manifest ends up listing the base alone, as Redis's.
    Never,
}

/// What `Journal::prepare_rewrite` made ready; see the module docs. Dropping
/// it without `start` makes the switch anyway (the manifest already lists
/// the new file, which must therefore be the one appended to) and abandons
/// the rewrite.
pub struct PreparedRewrite {
    parts: Option<Parts>,
}

struct Parts {
    inner: Arc<Inner>,
    files: Arc<Files>,
    incr: Switch,
    incr_seq: u64,
    options: RewriteOptions,
    replaces_unlisted: Option<String>,
    base_file: Arc<dyn LogFile>,
    temp_path: PathBuf,
    started: Instant,
}

/// With `incremental_fsync` the base is fdatasync'd each time this much
/// more is written, as Redis's `aof-rewrite-incremental-fsync` does: one
/// big sync at the commit would hold the disk for as long as the whole base
/// takes to reach it, and the journal's own fsyncs (acknowledgements under
/// `always`) would queue behind it. It also goes out to the disk at a
/// steady pace ([`IncrementalSync`]), so these syncs find little to write.
pub const BASE_SYNC_EVERY_BYTES: u64 = 4 << 20;

/// [`Rewrite::base_writer`].
pub struct BaseWriter<'r> {
    rewrite: &'r mut Rewrite,
}

impl std::io::Write for BaseWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.rewrite.write_bytes(buf).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A rewrite between the instant S and its commit or abort.
pub struct Rewrite {
    inner: Arc<Inner>,
    files: Arc<Files>,
    at: Lsn,
    /// The new incr file: its seq (`AtOnce`) or its temporary name.
    incr_seq: u64,
    incr_name: String,
    options: RewriteOptions,
    /// The unlisted incr file appended to before S (opened `idle`, or by an
    /// earlier rewrite that failed), deleted at the commit.
    replaces_unlisted: Option<String>,
    base_file: Arc<dyn LogFile>,
    temp_path: PathBuf,
    base_bytes: u64,
    /// `None` without `incremental_fsync`.
    base_sync: Option<IncrementalSync>,
    input_bytes: u64,
    started: Instant,
    finished: bool,
}

/// What a committed rewrite did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RewriteSummary {
    /// The new base file's name and size.
    pub base_name: String,
    pub base_bytes: u64,
    /// Size of the files it replaced, as they were at S.
    pub input_bytes: u64,
    pub took: Duration,
}

impl Journal {
    /// Step 1 of a rewrite (see the module docs): file creation and the
    /// manifest update, with their fsyncs. Call it before taking the
    /// server's locks; then call [`PreparedRewrite::start`] under them.
    /// Fails with [`JournalError::RewriteInProgress`] while a rewrite runs.
    /// The base is AOF-format, the new incr file listed at once.
    pub fn prepare_rewrite(&self) -> Result<PreparedRewrite, JournalError> {
        self.prepare_rewrite_with(RewriteOptions {
            base_format: BaseFormat::Aof,
            incr: IncrListing::AtOnce,
            incremental_fsync: true,
        })
    }

    /// [`Journal::prepare_rewrite`] with a choice of base format and of
    /// when the new incr file is listed.
    pub fn prepare_rewrite_with(&self, options: RewriteOptions) -> Result<PreparedRewrite, JournalError> {
        let files = &self.files;
        if files.rewriting.swap(true, Ordering::AcqRel) {
            return Err(JournalError::RewriteInProgress);
        }
        let started = Instant::now();
        files.counters.lock().running_since = Some(started);
        match self.prepare_files(started, options) {
            Ok(p) => Ok(p),
            Err(e) => {
                tracing::error!("journal: cannot start a rewrite: {e}");
                files.finish(false, started);
                Err(e)
            }
        }
    }

    fn prepare_files(&self, started: Instant, mut options: RewriteOptions) -> Result<PreparedRewrite, JournalError> {
        let files = &self.files;
        let unlisted = files.unlisted.lock().clone();
        if unlisted.is_some() && options.incr == IncrListing::AtOnce {
            options.incr = IncrListing::AtCommit;
        }
        let mut m = files.manifest.lock();
        let temp_path = files.path(&format!("{TEMP_BASE_PREFIX}{}.aof", std::process::id()));
        let base_file = files.open_file(&temp_path, false)?;
        let (seq, name) = match options.incr {
            IncrListing::AtOnce => {
                let seq = m.next_incr_seq();
                (seq, manifest::incr_name(&files.config.filename, seq))
            }
            IncrListing::AtCommit | IncrListing::Never => {
                (0, manifest::unlisted_incr_name(&files.config.filename, unlisted.as_deref()))
            }
        };
        let incr_path = files.path(&name);
        let incr_file = match files.open_file(&incr_path, true) {
            Ok(f) => f,
            Err(e) => {
                load::remove_leftover(&temp_path);
                return Err(e);
            }
        };
        if options.incr != IncrListing::AtOnce {
            *files.unlisted.lock() = Some(name.clone());
        } else {
            let mut next = m.clone();
            next.incr.push(AofInfo { name: name.clone(), seq, kind: FileKind::Incr });
            if let Err(e) = files.persist(&next) {
                load::remove_leftover(&temp_path);
                load::remove_leftover(&incr_path);
                return Err(e);
            }
            *m = next;
        }
        tracing::info!("journal: rewrite: created incr file {name}");
        Ok(PreparedRewrite {
            parts: Some(Parts {
                inner: Arc::clone(&self.inner),
                files: Arc::clone(&self.files),
                incr: Switch { at: 0, file: incr_file, name },
                incr_seq: seq,
                options,
                replaces_unlisted: unlisted,
                base_file,
                temp_path,
                started,
            }),
        })
    }

    /// Steps 1 and 2 at once, for callers that do not mind the file
    /// operations and fsyncs of step 1 inside their critical section.
    pub fn start_rewrite(&self) -> Result<Rewrite, JournalError> {
        Ok(self.prepare_rewrite()?.start())
    }

    /// `aof-disable-auto-gc`: with `true`, rewrites leave the files they
    /// replace on disk and listed as history; `false` deletes those listed
    /// now, as Redis does when the option is set back to `no`.
    pub fn set_keep_history(&self, keep: bool) {
        let files = &self.files;
        files.keep_history.store(keep, Ordering::Release);
        if !keep {
            files.drop_history(&mut files.manifest.lock());
        }
    }
}

impl PreparedRewrite {
    /// The instant S: from now on appends go to the new incr file. Call it
    /// while every appender is excluded (the server holds every shard lock),
    /// so that S falls between two commands. No I/O; cannot fail.
    pub fn start(mut self) -> Rewrite {
        let Some(p) = self.parts.take() else {
            unreachable!("a PreparedRewrite is started once: start consumes it")
        };
        let inner = p.inner;
        let mut g = inner.gather.lock();
        // A batch never straddles a switch.
        g.seal();
        let at = g.start;
        let incr_name = p.incr.name.clone();
        g.switches.push_back(Switch { at, ..p.incr });
        // Each file is replayed from database 0: the new one starts with a
        // SELECT of its first record's database.
        g.selected_db = None;
        g.writer_sleeping = false;
        drop(g);
        inner.writer_cv.notify_one();
        p.files.counters.lock().started += 1;
        let input_bytes = (at as i64).saturating_add(p.files.size_adj.load(Ordering::Acquire)).max(0) as u64;
        Rewrite {
            inner,
            files: p.files,
            at,
            incr_seq: p.incr_seq,
            incr_name,
            options: p.options,
            replaces_unlisted: p.replaces_unlisted,
            base_file: p.base_file,
            temp_path: p.temp_path,
            base_bytes: 0,
            base_sync: p.options.incremental_fsync.then(|| IncrementalSync::new(BASE_SYNC_EVERY_BYTES)),
            input_bytes,
            started: p.started,
            finished: false,
        }
    }
}

impl Drop for PreparedRewrite {
    fn drop(&mut self) {
        if self.parts.is_some() {
            let parts = PreparedRewrite { parts: self.parts.take() };
            parts.start().abort();
        }
    }
}

impl Rewrite {
    /// The LSN of S: records below it are in the files this rewrite
    /// replaces, records from it on in the new incr file.
    pub fn at(&self) -> Lsn {
        self.at
    }

    /// Bytes of base written so far.
    pub fn base_bytes(&self) -> u64 {
        self.base_bytes
    }

    /// The options it was prepared with.
    pub fn options(&self) -> RewriteOptions {
        self.options
    }

    /// Appends what `buf` holds to the temporary base and empties it
    /// (fdatasyncing every [`BASE_SYNC_EVERY_BYTES`]).
    pub fn write(&mut self, buf: &mut BaseBuffer) -> Result<(), JournalError> {
        self.write_bytes(&buf.bytes)?;
        buf.bytes.clear();
        Ok(())
    }

    /// The temporary base as an `io::Write`, for an encoder that writes
    /// to one (the RDB writer); errors come back as `io::Error`s wrapping
    /// the [`JournalError`].
    pub fn base_writer(&mut self) -> BaseWriter<'_> {
        BaseWriter { rewrite: self }
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<(), JournalError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let err = |source| JournalError::Io { path: self.temp_path.clone(), source };
        crate::writer::write_all(&*self.base_file, bytes).map_err(|(source, _)| err(source))?;
        self.base_bytes += bytes.len() as u64;
        if let Some(sync) = &mut self.base_sync {
            let file = &self.base_file;
            sync.wrote(bytes.len() as u64, |at, len, wait| file.write_out(at, len, wait), || file.sync_data()).map_err(err)?;
        }
        Ok(())
    }

    /// Step 4 (see the module docs). On error nothing is lost: the old
    /// manifest still lists every file, and the temporary base is deleted.
    pub fn commit(mut self) -> Result<RewriteSummary, JournalError> {
        self.finished = true;
        let result = self.commit_files();
        if let Err(e) = &result {
            tracing::error!("journal: rewrite failed: {e}");
            load::remove_leftover(&self.temp_path);
        }
        self.files.finish(result.is_ok(), self.started);
        result
    }

    /// Abandons the rewrite: deletes the temporary base and keeps the
    /// current files (and the rotation).
    pub fn abort(mut self) {
        self.abort_files();
    }

    fn abort_files(&mut self) {
        self.finished = true;
        load::remove_leftover(&self.temp_path);
        self.files.finish(false, self.started);
        tracing::warn!("journal: rewrite aborted");
    }

    /// Waits until the writer has moved to the new incr file: the old files
    /// then hold, written and synced, everything before S. Fails while the
    /// journal cannot write (the rewrite is better retried later than kept
    /// waiting on a failing disk).
    fn wait_for_switch(&self) -> Result<(), JournalError> {
        let inner = &self.inner;
        let mut p = inner.progress.lock();
        loop {
            if inner.switched.load(Ordering::Acquire) >= self.at {
                return Ok(());
            }
            if !inner.healthy.load(Ordering::Acquire) {
                let msg = inner.last_error.lock().clone();
                return Err(JournalError::Poisoned(msg.unwrap_or_else(|| "write failed".into())));
            }
            // The writer notifies after each cycle; the timeout guards a
            // wakeup lost between the check and the wait.
            inner.progress_cv.wait_for(&mut p, Duration::from_millis(50));
        }
    }

    fn commit_files(&mut self) -> Result<RewriteSummary, JournalError> {
        self.wait_for_switch()?;
        let io = |path: &PathBuf| {
            let path = path.clone();
            move |source| JournalError::Io { path, source }
        };
        self.base_file.sync_data().map_err(io(&self.temp_path))?;
        let files = Arc::clone(&self.files);
        let mut m = files.manifest.lock();
        let base_seq = m.base.as_ref().map_or(0, |b| b.seq) + 1;
        let base_name = manifest::base_name(&files.config.filename, base_seq, self.options.base_format);
        let base_path = files.path(&base_name);
        fs::rename(&self.temp_path, &base_path).map_err(io(&self.temp_path))?;

        // The files replaced go to the front of the history, incr files
        // (oldest first) before the old base, as Redis orders them.
        let listing = self.options.incr;
        let (kept, replaced): (Vec<AofInfo>, Vec<AofInfo>) =
            m.incr.iter().cloned().partition(|i| listing == IncrListing::AtOnce && i.seq >= self.incr_seq);
        let history = replaced.into_iter().chain(m.base.clone()).chain(m.history.iter().cloned());
        let mut next = Manifest {
            base: Some(AofInfo { name: base_name.clone(), seq: base_seq, kind: FileKind::Base }),
            history: history.map(|info| AofInfo { kind: FileKind::History, ..info }).collect(),
            incr: kept,
        };
        // `AtCommit`: the writer appends to the new incr file through its
        // descriptor; the rename gives it the name that lists it.
        let mut renamed = None;
        if listing == IncrListing::AtCommit {
            let seq = next.next_incr_seq();
            let name = manifest::incr_name(&files.config.filename, seq);
            let (from, to) = (files.path(&self.incr_name), files.path(&name));
            if let Err(e) = fs::rename(&from, &to) {
                load::remove_leftover(&base_path);
                return Err(io(&from)(e));
            }
            next.incr.push(AofInfo { name: name.clone(), seq, kind: FileKind::Incr });
            renamed = Some((from, to, name));
        }
        if let Err(e) = files.persist(&next) {
            load::remove_leftover(&base_path);
            if let Some((from, to, _)) = &renamed {
                if let Err(e) = fs::rename(to, from) {
                    tracing::warn!("journal: could not rename {} back: {e}", to.display());
                }
            }
            return Err(e);
        }
        // Committed. What follows only tidies up.
        if let Some((_, _, name)) = renamed {
            *files.unlisted.lock() = None;
            *self.inner.file_name.lock() = name;
        }
        if !files.keep_history.load(Ordering::Acquire) {
            files.drop_history(&mut next);
        }
        *m = next;
        drop(m);

        let base = self.base_bytes;
        let written = self.inner.written.load(Ordering::Acquire);
        files.size_adj.store(base as i64 - self.at as i64, Ordering::Release);
        files.base_size.store(base, Ordering::Release);
        files.base_rdb.store(self.options.base_format == BaseFormat::Rdb, Ordering::Release);
        if let Some(name) = &self.replaces_unlisted {
            // Written before S only, so covered by the base.
            load::remove_leftover(&files.path(name));
        }
        files.rewrite_base_size.store(files.current_size(written), Ordering::Release);
        {
            let mut c = files.counters.lock();
            c.last_input_bytes = self.input_bytes;
            c.last_output_bytes = base;
        }
        let took = self.started.elapsed();
        tracing::info!(
            "journal: rewrite done in {took:?}: base {base_name} of {base} bytes replaces {} bytes",
            self.input_bytes
        );
        Ok(RewriteSummary { base_name, base_bytes: base, input_bytes: self.input_bytes, took })
    }
}

impl Drop for Rewrite {
    fn drop(&mut self) {
        if !self.finished {
            self.abort_files();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_flags_follow_the_command_as_the_incr_files_have_them() {
        let mut buf = BaseBuffer::new();
        buf.push(1, &[&b"SET"[..], b"k", b"v"]);
        buf.push_item_flags(42);
        let mut want = Vec::new();
        resp::encode_select(&mut want, 1);
        resp::encode_command(&mut want, &[&b"SET"[..], b"k", b"v"]);
        want.extend_from_slice(b"#item-flags:42\r\n");
        assert_eq!(buf.as_bytes(), want);
        assert_eq!(buf.commands(), 1);
    }
}
