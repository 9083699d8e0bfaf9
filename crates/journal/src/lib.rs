//! `keel-journal`: Keel's one ordered stream of changes, and the append-only
//! files it is written to.
//!
//! The server calls [`Journal::append`] while it holds the shard lock of the
//! keys a write touched (so the journal's order is the order of execution),
//! then holds the reply until [`Journal::durable_lsn`] covers the returned
//! [`Lsn`]. Execution never waits for the disk: `append` copies bytes into a
//! memory buffer; a writer thread writes and syncs them with group commit
//! (see `writer.rs` for the design, and the failure handling). Under
//! `everysec` and `no`, where replies do not wait for a sync, the server
//! calls [`Journal::write_through`] before it sends them instead, so that
//! what it acknowledged is at least in the kernel, as Redis does.
//!
//! # Files
//!
//! Exactly Redis 7.0's multi-part AOF, so a directory moves between Redis
//! and Keel both ways: `<dir>/<filename>.manifest` (format in
//! `manifest.rs`), one base file and incr files. Incr files are a plain
//! sequence of RESP commands (format in `resp.rs`). The base is either an
//! RDB file, `<filename>.<seq>.base.rdb` (Redis 7.0's default,
//! `aof-use-rdb-preamble yes`; format in `keel-rdb`), or RESP commands like
//! the incr files, `<filename>.<seq>.base.aof` ([`BaseFormat`]). Any file
//! that starts with `REDIS` is read as an RDB followed by RESP commands,
//! as Redis reads it; replay yields its keys as [`Replayed::Key`]. An incr
//! file that a rewrite will list only at its commit (turning the AOF on),
//! or never (BGREWRITEAOF with the AOF off), is `temp-<filename>.incr`
//! meanwhile, as Redis names it; opening deletes such leftovers.
//!
//! One Keel extension: the memcached flags of the key a record wrote follow
//! it as an annotation line, `#item-flags:<flags>`
//! ([`Journal::append_with_item_flags`], [`Replayed::ItemFlags`]). Redis
//! skips it as it skips `#TS:` annotations, and so loads the file with
//! every value, without the flags it has nowhere to keep.
//!
//! The incr file being written has space written ahead of its last record
//! (`prealloc.rs`: annotation lines, which Redis skips, written around the
//! page cache), so that each fdatasync flushes data only; it is cut off at
//! start and by
//! [`Journal::close`]. [`JournalConfig::space_ahead`] says how much (0:
//! none), [`Journal::set_space_ahead`] changes it.
//!
//! # Rewrite
//!
//! [`Journal::prepare_rewrite`], [`PreparedRewrite::start`] (the instant S:
//! appends from then on go to a new incr file), [`Rewrite::write`] of the
//! base, then [`Rewrite::commit`] or [`Rewrite::abort`]: Redis 7.0's
//! rewrite, with every intermediate state loadable. See `rewrite.rs` for
//! the steps and what a crash at each leaves, and `writer.rs` for how the
//! writer moves to the new file without weakening any durability level.
//! The base goes to the disk at a steady pace ([`IncrementalSync`]) and the
//! files a rewrite replaces are freed a slice at a time
//! (`file::remove_gradually`), so that the journal's own fdatasyncs never
//! queue behind a burst of either.
//!
//! # Durability levels ([`FsyncPolicy`])
//!
//! * `Always`: `durable_lsn` covers a record once it is written and
//!   fdatasync'd.
//! * `EverySec`: once written to the kernel; a separate thread fdatasyncs
//!   about once a second.
//! * `No`: once written to the kernel; the kernel decides when to flush.
//!
//! [`Journal::set_fsync`] changes the level at run time.
//!
//! # Failpoints
//!
//! `KEEL_JOURNAL_FAILPOINT` (read by [`Journal::open`]) injects I/O errors
//! into the real write path, e.g. `write-enospc:100:inf` (every write from
//! the 100th on fails with ENOSPC) or `sync-eio:3` (the third fdatasync fails
//! with EIO); see [`testing::Failpoints::parse`]. Tests inject them directly
//! with [`Journal::open_with`] and [`testing::FaultyFiles`].

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub mod check;
mod file;
mod load;
mod manifest;
mod prealloc;
mod resp;
mod rewrite;
mod stats;
mod writer;

pub use file::{write_out, IncrementalSync};
pub use load::{Replay, ReplayItem, Replayed};
/// The stream's record format, for whoever else carries the stream (replicas).
pub use resp::{encode_command, encode_select};
pub use rewrite::{BaseBuffer, BaseWriter, IncrListing, PreparedRewrite, Rewrite, RewriteOptions, RewriteSummary, Sizes, BASE_SYNC_EVERY_BYTES};
pub use stats::JournalStats;

use writer::{Gather, Inner, Syncer, Writer};

/// While another thread holds the writer's state, how often
/// [`Journal::write_through`] looks whether that thread has begun to wait
/// for the disk.
const WRITE_THROUGH_POLL: Duration = Duration::from_micros(100);

/// Entry points for the fuzz targets in `fuzz/`: the journal's own parsers
/// (its record reader and the manifest), which read files a crash or a
/// user may have damaged.
pub mod fuzzing {
    use crate::resp::{Item, Mode, RecordReader};

    /// Reads every record of `bytes` in both modes; returns how many
    /// commands were read before the end or the first error. Must never
    /// panic, and must not read past `bytes`.
    pub fn read_records(bytes: &[u8]) -> usize {
        let mut commands = 0;
        for mode in [Mode::Full, Mode::Skim] {
            let mut reader = RecordReader::new(bytes, bytes.len() as u64);
            while let Ok(Some(item)) = reader.next_item(mode) {
                if matches!(item, Item::Command(_)) {
                    commands += 1;
                }
                assert!(reader.position() <= bytes.len() as u64, "reader went past its input");
            }
        }
        commands
    }

    /// Scans `bytes` as start-up scans the last incr file (torn tails,
    /// zero bytes, space written ahead): must never panic, and where it
    /// would cut the file must lie within it.
    pub fn scan_file(bytes: &[u8]) {
        let path = std::env::temp_dir().join(format!("keel-fuzz-scan-{}.aof", std::process::id()));
        std::fs::write(&path, bytes).expect("write the input");
        let scan = crate::load::scan_aof(&path).expect("scan");
        assert!(scan.valid_up_to <= bytes.len() as u64, "cut past the end");
        if let Some(crate::load::Problem::Torn { offset, .. }) = scan.problem {
            assert!(offset <= bytes.len() as u64 && scan.valid_up_to <= offset, "torn at {offset}");
        }
    }

    /// Parses `bytes` as a manifest; true if it was accepted.
    pub fn parse_manifest(bytes: &[u8]) -> bool {
        crate::manifest::Manifest::parse(bytes).is_ok()
    }
}

/// File-level hooks for tests and fault injection.
pub mod testing {
    pub use crate::file::{Failpoints, Fault, FaultyFiles, FileFactory, LogFile, Op, StdFiles};
}

/// A position in the stream of changes, in bytes. It starts, when the
/// journal is opened, at the total size of the files it recovered (so it
/// equals Redis's `aof_current_size` until a rewrite) and only grows.
pub type Lsn = u64;

/// Redis's `appendfsync`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FsyncPolicy {
    Always,
    EverySec,
    No,
}

impl FsyncPolicy {
    fn from_u8(v: u8) -> FsyncPolicy {
        match v {
            0 => FsyncPolicy::Always,
            1 => FsyncPolicy::EverySec,
            _ => FsyncPolicy::No,
        }
    }
}

/// The format base files are written in: Redis's `aof-use-rdb-preamble`
/// (`Rdb` when yes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseFormat {
    /// RESP commands, `<filename>.<seq>.base.aof`.
    Aof,
    /// An RDB file, `<filename>.<seq>.base.rdb`.
    Rdb,
}

/// What each of the journal's threads runs first: the server pins them to
/// its background I/O CPUs there (`bio_cpulist`).
static THREAD_START: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets what every thread the journal starts from now on runs first; once
/// per process.
pub fn set_thread_start(hook: fn()) {
    let _ = THREAD_START.set(hook);
}

/// Starts one of the journal's threads (writer, syncer, space helper,
/// reaper).
pub(crate) fn spawn_thread<T: Send + 'static>(
    name: &str,
    run: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<JoinHandle<T>> {
    std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Some(start) = THREAD_START.get() {
            start();
        }
        run()
    })
}

#[derive(Clone, Debug)]
pub struct JournalConfig {
    /// The appendonly directory, e.g. `<dir>/appendonlydir`.
    pub dir: PathBuf,
    /// `appendfilename`, default `appendonly.aof`.
    pub filename: String,
    pub fsync: FsyncPolicy,
    /// `aof-load-truncated`: cut a torn tail off the last incr file with
    /// anything in it (with a warning) instead of refusing to open.
    pub load_truncated: bool,
    /// The format of the empty base a fresh directory starts with (as
    /// Redis 7.0 creates one at start). Rewrites choose theirs
    /// ([`RewriteOptions`]).
    pub base_format: BaseFormat,
    /// `aof-timestamp-enabled`: a `#TS:<unix seconds>` annotation before
    /// the first record of each second ([`Journal::set_timestamps`]).
    pub timestamps: bool,
    /// Bytes of space to keep written ahead of the incr file's end
    /// (`prealloc.rs`); 0 for none. It pays under `Always` only: under
    /// `EverySec` the helper's fdatasync of each piece flushes the log's
    /// unsynced pages with it, each time, which the server avoids by
    /// asking for none.
    pub space_ahead: u64,
    /// Under `Always`, the least time from the end of one fdatasync to the
    /// start of the next ([`Journal::set_sync_gap`]), as PostgreSQL's
    /// `commit_delay`: each sync then carries more records and the writer
    /// wakes less often, which pays on saturated cores and costs latency
    /// elsewhere. Only while records keep being appended during the syncs:
    /// a client writing alone never waits for it.
    pub sync_gap: Duration,
    /// Whether the writer thread runs in Linux's `SCHED_BATCH` class
    /// ([`Journal::set_writer_batch_class`]): at the workers' weight, so
    /// never starved, but its wake-ups (records to write, an fdatasync
    /// returning) do not preempt the thread running on its core. Sharing
    /// a core with a busy worker, it runs when that worker sleeps or its
    /// time slice ends, and each sync carries everything the worker
    /// gathered meanwhile: fewer syncs and context switches for the same
    /// writes. A durable write that comes alone while its core is
    /// saturated by other work waits up to a time slice longer.
    pub writer_batch_class: bool,
    /// Opened while `appendonly no`, for turning it on or for BGREWRITEAOF:
    /// the directory's files are listed but left as they are (nothing is
    /// created, listed or cut), and appends, none before a rewrite's S, go
    /// to an unlisted temporary incr file that rewrite lists or replaces
    /// ([`RewriteOptions::incr`]).
    pub idle: bool,
    /// `aof-disable-auto-gc`: history files (what a rewrite replaced) stay
    /// on disk and in the manifest ([`Journal::set_keep_history`]).
    pub keep_history: bool,
}

/// Knobs that are not Redis configuration, and the file factory.
#[derive(Clone)]
pub struct Tuning {
    pub files: Arc<dyn testing::FileFactory>,
    /// How often a failed write or fsync is retried.
    pub retry_interval: Duration,
    /// How often the everysec thread fdatasyncs.
    pub everysec_interval: Duration,
    /// Above this many appended-but-not-durable bytes, `health()` reports
    /// [`JournalError::Backlog`] (appenders are never blocked).
    pub backlog_max_bytes: u64,
    /// `everysec`: most written-but-unsynced bytes kept in memory to be
    /// written again if the background fdatasync fails.
    pub retain_max_bytes: u64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            files: Arc::new(testing::StdFiles),
            retry_interval: Duration::from_secs(1),
            everysec_interval: Duration::from_secs(1),
            backlog_max_bytes: 64 << 20,
            retain_max_bytes: 64 << 20,
        }
    }
}

impl Tuning {
    /// The defaults, with `KEEL_JOURNAL_FAILPOINT` applied if set.
    pub fn from_env() -> Result<Tuning, JournalError> {
        let mut t = Tuning::default();
        if let Ok(spec) = std::env::var("KEEL_JOURNAL_FAILPOINT") {
            let failpoints = testing::Failpoints::parse(&spec).map_err(JournalError::Config)?;
            tracing::warn!("journal: failpoints enabled: {spec}");
            t.files = Arc::new(testing::FaultyFiles { inner: t.files, failpoints });
        }
        Ok(t)
    }
}

#[derive(thiserror::Error, Debug)]
pub enum JournalError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// Redis's words for both, with the offset and the reason added.
    #[error(
        "Bad file format reading the append only file {} at offset {offset} ({reason}): make a backup of \
         your AOF file, then use keel-check-aof --fix <filename.manifest>",
        file.display()
    )]
    Corrupt { file: PathBuf, offset: u64, reason: String },
    /// A file ends inside a command or transaction where a torn tail may
    /// not be cut (a file before the last one with anything in it, or
    /// `aof-load-truncated no`).
    #[error(
        "Unexpected end of file reading the append only file {} at offset {offset} ({reason}). You can: \
         1) Make a backup of your AOF file, then use keel-check-aof --fix <filename.manifest>. \
         2) Alternatively you can set the 'aof-load-truncated' configuration option to yes and restart the server.",
        file.display()
    )]
    Truncated { file: PathBuf, offset: u64, reason: String },
    /// The last write or fsync failed; writes must be refused until a retry
    /// succeeds (the server answers `-MISCONF`).
    #[error("AOF write error: {0}")]
    Poisoned(String),
    /// More appended bytes wait for the disk than `Tuning::backlog_max_bytes`.
    #[error("AOF backlog of {pending_bytes} bytes exceeds {limit_bytes} bytes: the disk is too slow")]
    Backlog { pending_bytes: u64, limit_bytes: u64 },
    /// A file the manifest lists is not in the directory (Redis's words).
    #[error("The append log file {name} doesn't exist: {source}")]
    Missing { name: String, source: std::io::Error },
    #[error("AOF manifest: {0}")]
    Manifest(String),
    /// The RDB part of a base file is damaged: loading stops (it cannot be
    /// truncated, unlike a torn tail of commands).
    #[error("bad RDB in the AOF base file {}: {reason}", file.display())]
    RdbBase { file: PathBuf, reason: String },
    #[error("journal configuration: {0}")]
    Config(String),
    /// `start_rewrite` while a rewrite runs: one at a time.
    #[error("Background append only file rewriting already in progress")]
    RewriteInProgress,
}

/// The journal. `Send + Sync`: share it with `Arc`. Dropping it writes and
/// syncs what is pending (best effort) and stops its threads.
pub struct Journal {
    inner: Arc<Inner>,
    /// The writer's state: its thread's while it cycles, a worker's while
    /// it writes through.
    io: Arc<Mutex<Writer>>,
    /// The manifest and the files it lists, and the rewrite in progress.
    files: Arc<rewrite::Files>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Journal>();
};

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("file", &*self.inner.file_name.lock())
            .field("appended", &self.appended_lsn())
            .field("durable", &self.durable_lsn())
            .finish_non_exhaustive()
    }
}

impl Journal {
    /// Opens the appendonly directory (creating the directory, an empty base
    /// file, an empty incr file and the manifest if absent) and returns the
    /// commands to replay. Honours `KEEL_JOURNAL_FAILPOINT`.
    pub fn open(config: JournalConfig) -> Result<(Journal, Replay), JournalError> {
        Journal::open_with(config, Tuning::from_env()?)
    }

    /// [`Journal::open`] with explicit tuning and file factory.
    pub fn open_with(config: JournalConfig, tuning: Tuning) -> Result<(Journal, Replay), JournalError> {
        let prepared = load::prepare(&config)?;
        let incr_path = config.dir.join(&prepared.incr_name);
        let space_ahead = Arc::new(AtomicU64::new(config.space_ahead));
        let file = tuning
            .files
            .open_incr(&incr_path, Arc::clone(&space_ahead))
            .map_err(|source| JournalError::Io { path: incr_path.clone(), source })?;
        let start = prepared.total_size;
        let inner = Arc::new(Inner {
            policy: std::sync::atomic::AtomicU8::new(config.fsync as u8),
            timestamps: AtomicBool::new(config.timestamps),
            sync_gap_us: AtomicU64::new(config.sync_gap.as_micros() as u64),
            flush_sleep_us: AtomicU64::new(0),
            writer_batch_class: AtomicBool::new(config.writer_batch_class),
            writer_may_block: AtomicBool::new(false),
            fsync_suspended: AtomicBool::new(false),
            retry_interval: tuning.retry_interval,
            everysec_interval: tuning.everysec_interval,
            backlog_max_bytes: tuning.backlog_max_bytes,
            retain_max_bytes: tuning.retain_max_bytes,
            sync_file: Mutex::new(Arc::clone(&file)),
            closing: Mutex::new(std::collections::VecDeque::new()),
            file_name: Mutex::new(prepared.incr_name.clone()),
            switched: AtomicU64::new(0),
            gather: Mutex::new(Gather {
                sealed: Vec::new(),
                spares: Vec::new(),
                switches: std::collections::VecDeque::new(),
                buf: Vec::new(),
                records: 0,
                start,
                selected_db: None,
                last_timestamp_s: 0,
                writer_sleeping: false,
                replan: false,
                shutdown: false,
                sync_request: 0,
            }),
            writer_cv: Condvar::new(),
            appended: AtomicU64::new(start),
            written: AtomicU64::new(start),
            synced: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            healthy: AtomicBool::new(true),
            last_error: Mutex::new(None),
            on_durable: OnceLock::new(),
            on_latency: OnceLock::new(),
            progress: Mutex::new(()),
            progress_cv: Condvar::new(),
            syncer: Mutex::new(Syncer::default()),
            syncer_cv: Condvar::new(),
            syncer_failed: AtomicBool::new(false),
            stats: stats::StatsCells::new(),
        });
        let files = Arc::new(rewrite::Files::new(
            &config,
            Arc::clone(&tuning.files),
            space_ahead,
            prepared.manifest.clone(),
            prepared.base_size,
            prepared.base_rdb,
            prepared.unlisted.then(|| prepared.incr_name.clone()),
        ));
        let mut threads = Vec::new();
        let segment = writer::Segment { file, start: start - prepared.incr_size };
        let io = Arc::new(Mutex::new(Writer::new(Arc::clone(&inner), start, segment)));
        let spawn_err = |source| JournalError::Io { path: incr_path.clone(), source };
        let writer_io = Arc::clone(&io);
        threads.push(spawn_thread("keel-aof-writer", move || writer::run(writer_io)).map_err(spawn_err)?);
        // Idle unless the policy is (or becomes) everysec.
        let i = Arc::clone(&inner);
        threads.push(spawn_thread("keel-aof-fsync", move || writer::run_syncer(i)).map_err(spawn_err)?);
        let replay = Replay::new(config.dir.clone(), prepared.files, prepared.warnings);
        Ok((Journal { inner, io, files, threads: Mutex::new(threads) }, replay))
    }

    /// Appends one write command, in its final deterministic form (e.g. SET
    /// with an absolute PXAT), executed in database `db`. Emits `SELECT db`
    /// first when `db` differs from the previous record's. Returns the LSN at
    /// the end of this record: the reply may leave once
    /// `durable_lsn() >= lsn`. O(bytes), one short mutex hold, no syscalls.
    pub fn append<A: AsRef<[u8]>>(&self, db: usize, argv: &[A]) -> Lsn {
        self.append_record(db, argv, None)
    }

    /// `append`, then the memcached flags of the key `argv` wrote (an
    /// annotation, which Redis skips), in one piece so that nothing comes
    /// between the two.
    pub fn append_with_item_flags<A: AsRef<[u8]>>(&self, db: usize, argv: &[A], flags: u32) -> Lsn {
        self.append_record(db, argv, Some(flags))
    }

    fn append_record<A: AsRef<[u8]>>(&self, db: usize, argv: &[A], item_flags: Option<u32>) -> Lsn {
        let mut g = self.inner.gather.lock();
        self.stamp(&mut g);
        if g.selected_db != Some(db) {
            resp::encode_select(&mut g.buf, db);
            g.selected_db = Some(db);
        }
        resp::encode_command(&mut g.buf, argv);
        if let Some(flags) = item_flags {
            resp::encode_item_flags(&mut g.buf, flags);
        }
        g.records += 1;
        self.publish_append(g)
    }

    /// The `#TS:` annotation a record needs first, if timestamps are on
    /// and the second changed (Redis puts it before the SELECT too).
    fn stamp(&self, g: &mut Gather) {
        if self.inner.timestamps.load(Ordering::Relaxed) {
            let now = resp::unix_s();
            if now > g.last_timestamp_s {
                resp::encode_timestamp(&mut g.buf, now);
                g.last_timestamp_s = now;
            }
        }
    }

    /// Writes everything appended so far to the file now, on the calling
    /// thread, under `everysec` and `no`: Redis writes its AOF buffer
    /// before it sends a loop turn's replies, so a process crash (kill -9,
    /// the OOM killer) loses no acknowledged write, and a worker calls
    /// this before it sends its own. It waits for another thread's
    /// `write(2)` but never for the disk: it leaves the bytes to the
    /// writer thread, and returns false, under `always` and while that
    /// thread's cycle may wait for the disk (a sync begun under `always`,
    /// a repair, a requested sync). Replies that depend on what it left
    /// then wait until [`Journal::written_lsn`] covers them (Redis sends
    /// them with its write postponed). Returns whether everything appended
    /// before the call is written.
    pub fn write_through(&self) -> bool {
        let inner = &self.inner;
        let target = inner.appended.load(Ordering::Acquire);
        if inner.written.load(Ordering::Acquire) >= target {
            return true;
        }
        if inner.policy() == FsyncPolicy::Always {
            return false;
        }
        let mut w = loop {
            if inner.writer_may_block.load(Ordering::Acquire) {
                return false;
            }
            if let Some(w) = self.io.try_lock_for(WRITE_THROUGH_POLL) {
                break w;
            }
        };
        // The thread that held it may have written ours too: workers that
        // finish their turns together make one write, not one each.
        if inner.written.load(Ordering::Acquire) >= target {
            return true;
        }
        w.write_through();
        drop(w);
        inner.written.load(Ordering::Acquire) >= target
    }

    /// Redis's `no-appendfsync-on-rewrite` while a BGSAVE or a rewrite
    /// runs: with `on`, the journal writes but does not fdatasync (under
    /// `Always`, `durable_lsn` follows what is written), except when asked
    /// ([`Journal::flush_and_sync`]); with `off`, the next cycle syncs again.
    pub fn suspend_fsync(&self, on: bool) {
        let inner = &self.inner;
        if inner.fsync_suspended.swap(on, Ordering::AcqRel) && !on {
            // The everysec thread sleeps until told.
            let _s = inner.syncer.lock();
            inner.syncer_cv.notify_all();
        }
    }

    /// [`JournalConfig::sync_gap`] at run time.
    pub fn set_sync_gap(&self, gap: Duration) {
        self.inner.sync_gap_us.store(gap.as_micros() as u64, Ordering::Relaxed);
    }

    /// DEBUG AOF-FLUSH-SLEEP: the writer sleeps this long before each
    /// cycle's writes (0: never), as Redis's `aof_flush_sleep`.
    pub fn set_flush_sleep(&self, sleep: Duration) {
        self.inner.flush_sleep_us.store(sleep.as_micros() as u64, Ordering::Relaxed);
    }

    /// [`JournalConfig::writer_batch_class`] at run time, from the writer's
    /// next cycle.
    pub fn set_writer_batch_class(&self, on: bool) {
        self.inner.writer_batch_class.store(on, Ordering::Relaxed);
    }

    /// `aof-timestamp-enabled` at run time ([`JournalConfig::timestamps`]).
    pub fn set_timestamps(&self, on: bool) {
        self.inner.timestamps.store(on, Ordering::Relaxed);
    }

    fn publish_append(&self, mut g: parking_lot::MutexGuard<'_, Gather>) -> Lsn {
        if g.buf.len() >= writer::SEAL_AT {
            g.seal();
        }
        let end = g.start + g.buf.len() as u64;
        self.inner.appended.store(end, Ordering::Release);
        let wake = std::mem::replace(&mut g.writer_sleeping, false);
        drop(g);
        if wake {
            self.inner.writer_cv.notify_one();
        }
        end
    }

    /// Starts a transaction: commands pushed to it are encoded without any
    /// lock and appended as one unit (`MULTI ... EXEC`) by
    /// [`Transaction::commit`].
    pub fn transaction(&self) -> Transaction<'_> {
        Transaction { journal: self, first_db: None, db: 0, bytes: Vec::new(), records: 0 }
    }

    /// Appends several commands as one unit, `MULTI`, the commands, `EXEC`,
    /// as Redis writes a transaction. Returns the end LSN (the current
    /// appended LSN if `commands` is empty).
    pub fn append_transaction<A: AsRef<[u8]>>(&self, commands: &[(usize, Vec<A>)]) -> Lsn {
        let mut tx = self.transaction();
        for (db, argv) in commands {
            tx.push(*db, argv);
        }
        tx.commit()
    }

    /// Changes the fsync policy at run time (`CONFIG SET appendfsync`).
    /// The writer applies it from its next cycle; `durable_lsn` never goes
    /// back, so a switch to `Always` strengthens what is appended from
    /// then on, and a switch away from it acknowledges what was written.
    pub fn set_fsync(&self, policy: FsyncPolicy) {
        let inner = &self.inner;
        inner.policy.store(policy as u8, Ordering::Release);
        {
            // Under the lock the fsync thread sleeps on, so it cannot miss it.
            let _s = inner.syncer.lock();
            inner.syncer_cv.notify_all();
        }
        inner.wake_writer();
    }

    pub fn fsync(&self) -> FsyncPolicy {
        self.inner.policy()
    }

    /// Everything below this LSN is durable: fdatasync'd for `Always`,
    /// written to the kernel for `EverySec` and `No`. Acquire ordering.
    pub fn durable_lsn(&self) -> Lsn {
        self.inner.durable.load(Ordering::Acquire)
    }

    /// Everything below this LSN is written to the file (in the kernel's
    /// page cache), synced or not: what a process crash cannot take away.
    pub fn written_lsn(&self) -> Lsn {
        self.inner.written.load(Ordering::Acquire)
    }

    pub fn appended_lsn(&self) -> Lsn {
        self.inner.appended.load(Ordering::Acquire)
    }

    /// Appended but not yet written to the file: what the gathering
    /// buffers hold (Redis's `mem_aof_buffer`).
    pub fn unwritten_bytes(&self) -> u64 {
        self.appended_lsn().saturating_sub(self.inner.written.load(Ordering::Acquire))
    }

    /// Sets the function the writer thread calls, with the new durable LSN,
    /// after each advance (the server wakes its workers with it). Only the
    /// first call counts; set it before appending. It runs on the writer
    /// thread: keep it short and never call back into the journal's waits.
    pub fn on_durable(&self, f: Box<dyn Fn(Lsn) + Send + Sync>) {
        if self.inner.on_durable.set(f).is_err() {
            tracing::warn!("journal: on_durable set twice; keeping the first");
        }
    }

    /// Sets the function the writer thread calls with how long each round
    /// of writes (`aof-write`) and each fdatasync under `always`
    /// (`aof-fsync-always`) took, Redis's latency events of the same names
    /// (the server's latency monitor keeps those past its threshold). Only
    /// the first call counts; like `on_durable`, it runs on the writer
    /// thread.
    pub fn on_latency(&self, f: Box<dyn Fn(&'static str, Duration) + Send + Sync>) {
        if self.inner.on_latency.set(f).is_err() {
            tracing::warn!("journal: on_latency set twice; keeping the first");
        }
    }

    /// `Err` while the last write or fsync failed (until a retry succeeds)
    /// or while the backlog exceeds its bound: the server refuses writes
    /// then. Two atomic loads when healthy.
    pub fn health(&self) -> Result<(), JournalError> {
        if !self.inner.healthy.load(Ordering::Acquire) {
            let msg = self.inner.last_error.lock().clone();
            return Err(JournalError::Poisoned(msg.unwrap_or_else(|| "write failed".into())));
        }
        let pending = self.appended_lsn().saturating_sub(self.durable_lsn());
        if pending > self.inner.backlog_max_bytes {
            return Err(JournalError::Backlog {
                pending_bytes: pending,
                limit_bytes: self.inner.backlog_max_bytes,
            });
        }
        Ok(())
    }

    pub fn stats(&self) -> JournalStats {
        let inner = &self.inner;
        let appended = self.appended_lsn();
        let durable = self.durable_lsn();
        let mut s = JournalStats {
            appended_lsn: appended,
            durable_lsn: durable,
            pending_bytes: appended.saturating_sub(durable),
            backlog_max_bytes: inner.backlog_max_bytes,
            aof_last_write_status_ok: inner.healthy.load(Ordering::Acquire),
            last_error: inner.last_error.lock().clone(),
            ..JournalStats::default()
        };
        inner.stats.fill(&mut s);
        self.files.fill_stats(&mut s, inner.written.load(Ordering::Acquire));
        s
    }

    /// Starts the counters and the fsync latencies afresh (`CONFIG
    /// RESETSTAT`, which zeroes Redis's `aof_delayed_fsync`); positions,
    /// sizes and health are state, not statistics, and stay.
    pub fn reset_stats(&self) {
        self.inner.stats.reset();
    }

    /// The sizes automatic rewrites are decided on, without the locks and
    /// the histogram `stats` reads: cheap enough for a cron.
    pub fn sizes(&self) -> Sizes {
        self.files.sizes(self.inner.written.load(Ordering::Acquire))
    }

    /// Writes and fdatasyncs everything appended before the call, whatever
    /// the policy (for shutdown). Returns `Err` at once if the journal is
    /// failing (the writer keeps retrying in the background).
    pub fn flush_and_sync(&self) -> Result<(), JournalError> {
        let inner = &self.inner;
        let target = self.appended_lsn();
        {
            let mut g = inner.gather.lock();
            g.sync_request = g.sync_request.max(target);
            g.writer_sleeping = false;
        }
        inner.writer_cv.notify_one();
        let mut p = inner.progress.lock();
        loop {
            self.health_poisoned()?;
            if inner.synced.load(Ordering::Acquire) >= target && self.durable_lsn() >= target {
                return Ok(());
            }
            // The writer notifies after every cycle; the timeout only guards
            // against a wakeup lost between the check and the wait.
            inner.progress_cv.wait_for(&mut p, Duration::from_millis(50));
        }
    }

    fn health_poisoned(&self) -> Result<(), JournalError> {
        match self.health() {
            Err(e @ JournalError::Poisoned(_)) => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.close();
    }
}

impl Journal {
    /// Changes how much space incr files keep written ahead of their end
    /// ([`JournalConfig::space_ahead`]); space already written stays.
    pub fn set_space_ahead(&self, bytes: u64) {
        self.files.space_ahead.store(bytes, Ordering::Relaxed);
    }

    /// Writes and syncs everything appended, cuts off the space written
    /// ahead (`prealloc.rs`) and stops the journal's threads: the files are
    /// then as a clean shutdown leaves them. Appends after this are never
    /// written. Idempotent; dropping the journal does it too.
    pub fn close(&self) {
        {
            let mut g = self.inner.gather.lock();
            g.shutdown = true;
            g.sync_request = g.sync_request.max(self.inner.appended.load(Ordering::Acquire));
            g.writer_sleeping = false;
        }
        self.inner.writer_cv.notify_one();
        let mut threads = std::mem::take(&mut *self.threads.lock());
        // The writer first (it may need the fsync thread paused), then the
        // fsync thread.
        if !threads.is_empty() {
            let _ = threads.remove(0).join();
        }
        {
            let mut s = self.inner.syncer.lock();
            s.shutdown = true;
        }
        self.inner.syncer_cv.notify_all();
        for t in threads {
            let _ = t.join();
        }
    }
}

/// A transaction being built: see [`Journal::transaction`].
///
/// In the file: `SELECT` (if the first command's db differs from the last
/// record's), `MULTI`, each command (preceded by `SELECT` where the db
/// changes), `EXEC`. Replay yields MULTI and EXEC as items.
pub struct Transaction<'j> {
    journal: &'j Journal,
    first_db: Option<usize>,
    db: usize,
    bytes: Vec<u8>,
    records: u64,
}

impl Transaction<'_> {
    pub fn push<A: AsRef<[u8]>>(&mut self, db: usize, argv: &[A]) {
        match self.first_db {
            None => self.first_db = Some(db),
            Some(_) if self.db != db => resp::encode_select(&mut self.bytes, db),
            Some(_) => {}
        }
        self.db = db;
        resp::encode_command(&mut self.bytes, argv);
        self.records += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.first_db.is_none()
    }

    /// Appends the transaction as one unit and returns its end LSN.
    pub fn commit(self) -> Lsn {
        let Some(first_db) = self.first_db else {
            return self.journal.appended_lsn();
        };
        let mut g = self.journal.inner.gather.lock();
        self.journal.stamp(&mut g);
        if g.selected_db != Some(first_db) {
            resp::encode_select(&mut g.buf, first_db);
        }
        resp::encode_command(&mut g.buf, &[b"MULTI"]);
        g.buf.extend_from_slice(&self.bytes);
        resp::encode_command(&mut g.buf, &[b"EXEC"]);
        g.selected_db = Some(self.db);
        g.records += self.records + 2;
        self.journal.publish_append(g)
    }
}
