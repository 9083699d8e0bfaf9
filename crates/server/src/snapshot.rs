//! RDB snapshots: SAVE, BGSAVE [SCHEDULE], the `save` rules' cron,
//! `stop-writes-on-bgsave-error`, SHUTDOWN's final save, DEBUG RELOAD,
//! loading `dump.rdb` at start, and a replica's loads of its master's RDB
//! (from a file, or off the link into a [`Detached`] dataset).
//!
//! A save is a forkless point-in-time snapshot (`keel_engine`'s
//! `snapshot.rs`), driven as the AOF rewrite drives one (`rewrite.rs`):
//! the `Server::snapshot_active` token is taken with a compare-exchange so
//! that one snapshot runs at a time, then `prepare_snapshot`,
//! `begin_snapshot` (the instant S), and shard by shard `snapshot_step`s of
//! [`STEP_ENTRIES`] entries under that shard's lock alone, copied into a
//! [`Gathered`] buffer (strings as bytes, other values in `keel-rdb`'s
//! model); the buffer is encoded and written once the lock is released.
//! Keys whose TTL has passed but that no access or active expiry has
//! deleted yet are written too, as Redis writes them: a load skips them
//! and counts them (`rdb_last_load_keys_expired`).
//!
//! The file goes to `temp-<pid>.rdb` in `dir`, is fsynced, and renamed over
//! `<dir>/<dbfilename>`; a failure deletes the temporary file and leaves the
//! old dump as it was.
//!
//! SAVE runs the snapshot on the calling worker's thread (other clients
//! keep being served by the other workers, and between steps). BGSAVE
//! takes S on the calling thread before it replies (as Redis forks before
//! replying: no write acknowledged after the reply is in the file) and
//! hands the writing to the `keel-bgsave` thread, whose scan runs behind
//! the workers until the snapshot keeps too much memory
//! ([`crate::behind`]). While an AOF rewrite
//! holds the token, BGSAVE SCHEDULE's save (and a BGSAVE inside EXEC)
//! waits on that thread, taking S when it can, and SAVE waits on its own
//! thread.
//!
//! The BGSAVE thread is also the cron of the `save` rules (every `1000/hz`
//! ms, as Redis's serverCron): a rule met starts a BGSAVE, and after a
//! failed one the rules wait `BGSAVE_RETRY_DELAY_S`. A failed BGSAVE, while
//! rules exist and `stop-writes-on-bgsave-error` is on, makes the
//! dispatcher refuse writes with Redis's -MISCONF ([`refuses_writes`])
//! until a SAVE or BGSAVE succeeds. `dirty` (rdb_changes_since_last_save)
//! loses, when a save succeeds, what it was at S: writes made during the
//! save stay counted, as Redis's `dirty_before_bgsave`.
//!
//! Loading at start uses every core: the main thread parses the file (its
//! CRC64 computed on a helper thread, `keel_rdb`'s `crc_thread.rs`) and
//! routes each entry, in batches over bounded channels, to one of
//! `--threads` inserter threads by its shard, which builds the value and
//! inserts it; inserters own disjoint shards. DEBUG RELOAD runs with every
//! shard locked (as DEBUG does), so it saves and loads under those locks.
//!
//! Within a shard `snapshot_step` emits entries grouped by database in
//! increasing order, but shards follow one another, so a database can come
//! back after another: the file then has a `SELECTDB` each time the
//! database changes (valid RDB: Redis and `RdbReader` simply switch
//! database). Its `RESIZEDB` hint is the database's key count at S.
//!
//! A key's memcached flags go with it, as `keel-rdb`'s `keel-item-flags`
//! aux field (which Redis skips); every load gives them back. RESTORE
//! takes none: its payload has no place for them.

use crate::pause::{Mode, Purpose};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_engine::value::{EncodingLimits, Entry};
use keel_engine::Locked;
use keel_journal::IncrementalSync;
use keel_rdb::{RdbEntry, RdbItem, RdbReader, RdbWriter, WriteOptions};
use parking_lot::Mutex;
use thiserror::Error;

use crate::config::SaveRule;

use crate::doorbell::{Doorbell, Wake};
use crate::rdb::{Gathered, GatheredValue};
use crate::replication::SyncPoint;
use crate::scripting::functions::Library;
use crate::server::{unix_ms, Server};

/// Entries per `snapshot_step`, i.e. per hold of one shard's lock: few,
/// because a worker that wants the shard meanwhile waits for the rest of
/// the step (1000 gave W1's p99 during a BGSAVE 3.6 ms against 3.2 at 64).
pub const STEP_ENTRIES: usize = 64;
/// Buckets per `finish_shrink_step` before S.
const PREPARE_BUDGET: usize = 1024;

/// The BGSAVE thread's state and INFO's figures.
#[derive(Default)]
pub struct Saver {
    /// A BGSAVE was accepted and has not ended (scheduled or running).
    requested: AtomicBool,
    /// The accepted BGSAVE waits for another snapshot (an AOF rewrite).
    scheduled: AtomicBool,
    /// A BGSAVE holds the snapshot token and writes (rdb_bgsave_in_progress).
    in_progress: AtomicBool,
    /// A replica's full sync holds it: INFO counts that as a save in
    /// progress too, as Redis counts its RDB child for a replica.
    for_sync: AtomicBool,
    /// The last BGSAVE failed (rdb_last_bgsave_status:err); a successful
    /// SAVE or BGSAVE clears it.
    last_failed: AtomicBool,
    /// SHUTDOWN aborts a BGSAVE under way (Redis kills its child) without
    /// counting it as failed.
    abort: AtomicBool,
    /// A FLUSHALL came while a save held the snapshot: that save shows the
    /// data from before it, so a BGSAVE stops at its next step (Redis kills
    /// its child) and no save replaces the file. Set by FLUSHALL and
    /// cleared at each save's S, both under every shard lock; read under
    /// shard 0's lock just before the rename.
    superseded: AtomicBool,
    /// The running BGSAVE's scan runs (or is to run, from its next step)
    /// on the BGSAVE thread, as an equal of the workers, not behind them.
    urgent: AtomicBool,
    state: Mutex<State>,
    /// Wakes the BGSAVE thread for an accepted BGSAVE, or to stop.
    bell: Doorbell,
    /// Keys loaded and expired keys skipped by the load at start
    /// (rdb_last_load_keys_loaded, rdb_last_load_keys_expired).
    pub last_load_keys_loaded: AtomicU64,
    pub last_load_keys_expired: AtomicU64,
}

#[derive(Default)]
struct State {
    /// The snapshot BGSAVE began before its reply (token held), for the
    /// thread to write.
    begun: Option<Begun>,
    started: Option<Instant>,
    /// Duration of the last BGSAVE that ended (rdb_last_bgsave_time_sec).
    last_took: Option<Duration>,
    /// Unix seconds when the last BGSAVE started (Redis's `lastbgsave_try`).
    last_try_s: u64,
    /// SAVEs and BGSAVEs started (rdb_saves, counted as Redis does).
    saves: u64,
}

/// INFO persistence's rdb_* figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct SaveInfo {
    pub in_progress: bool,
    pub scheduled: bool,
    pub current_s: i64,
    pub last_s: i64,
    pub last_ok: bool,
    pub saves: u64,
    /// A BGSAVE runs and its scan runs behind the workers.
    pub behind_workers: bool,
}

/// A failed BGSAVE waits this long before the save rules may start
/// another (Redis's `CONFIG_BGSAVE_RETRY_DELAY`).
const BGSAVE_RETRY_DELAY_S: u64 = 5;

/// Redis's `shared.bgsaveerr`, answered to writes after a failed BGSAVE.
pub const MISCONF_RDB: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";

impl Saver {
    pub fn info(&self) -> SaveInfo {
        let st = self.state.lock();
        SaveInfo {
            in_progress: self.in_progress.load(Ordering::Acquire) || self.for_sync.load(Ordering::Acquire),
            scheduled: self.scheduled.load(Ordering::Relaxed),
            current_s: st.started.map_or(-1, |t| t.elapsed().as_secs() as i64),
            last_s: st.last_took.map_or(-1, |d| d.as_secs() as i64),
            last_ok: !self.last_failed.load(Ordering::Relaxed),
            saves: st.saves,
            behind_workers: self.in_progress() && !self.urgent.load(Ordering::Relaxed),
        }
    }

    pub fn in_progress(&self) -> bool {
        self.in_progress.load(Ordering::Acquire)
    }

    /// Stops the thread (a save under way is aborted at its next step).
    pub fn stop(&self) {
        self.bell.stop();
    }

    fn stopping(&self) -> bool {
        self.bell.stopping()
    }

    fn count_save(&self) {
        self.state.lock().saves += 1;
    }
}

/// Redis's `writeCommandsDeniedByDiskError` for RDB: after a failed BGSAVE,
/// while save rules exist and `stop-writes-on-bgsave-error` is on, writes
/// (and PING, as Redis) are refused until a save succeeds. One relaxed load
/// when the last BGSAVE did not fail.
pub fn refuses_writes(server: &Server) -> bool {
    if !server.rdb.last_failed.load(Ordering::Relaxed) {
        return false;
    }
    let c = server.config.read();
    c.stop_writes_on_bgsave_error && !c.save.is_empty()
}

/// BGSAVE's outcome for the reply.
pub enum BgsaveReply {
    Started,
    Scheduled,
    AlreadyInProgress,
    OtherChild,
}

/// BGSAVE [SCHEDULE]. A BGSAVE that starts now takes its instant S here,
/// before the reply, as Redis forks before replying: a write acknowledged
/// after "Background saving started" is never in the file. The thread then
/// writes the file. A scheduled one takes S when the other snapshot ends;
/// inside EXEC (whose shard locks S would wait for) it is always
/// scheduled, as Redis schedules a BGSAVE run by EXEC.
pub fn bgsave(server: &Server, schedule: bool, in_exec: bool) -> BgsaveReply {
    let saver = &server.rdb;
    if saver.in_progress() {
        return BgsaveReply::AlreadyInProgress;
    }
    if saver.requested.load(Ordering::Acquire) {
        // Accepted, waiting for the rewrite: as Redis, SCHEDULE again is fine.
        return if schedule { BgsaveReply::Scheduled } else { BgsaveReply::OtherChild };
    }
    if saver.requested.swap(true, Ordering::AcqRel) {
        return BgsaveReply::AlreadyInProgress;
    }
    let now = !in_exec
        && !server.rewrite.in_progress()
        && server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok();
    if !now && !schedule && !in_exec {
        saver.requested.store(false, Ordering::Release);
        return BgsaveReply::OtherChild;
    }
    saver.scheduled.store(!now, Ordering::Relaxed);
    let begun = now.then(|| {
        // In progress from the reply on, for whoever polls INFO (fsyncs
        // suspended first, under no-appendfsync-on-rewrite).
        crate::durability::suspend_fsync_while_saving(server, true);
        saver.in_progress.store(true, Ordering::Release);
        begin(server)
    });
    saver.state.lock().begun = begun;
    saver.bell.ring();
    if now {
        BgsaveReply::Started
    } else {
        BgsaveReply::Scheduled
    }
}

/// Why a synchronous save did not write the file.
#[derive(Debug, Error)]
pub enum SaveError {
    #[error("Background save already in progress")]
    BgsaveInProgress,
    #[error("the server is shutting down")]
    ShuttingDown,
    /// DEBUG RELOAD holds every shard: it cannot wait for a BGSAVE or an
    /// AOF rewrite to let go of the snapshot.
    #[error("a BGSAVE or an AOF rewrite is running")]
    SnapshotBusy,
    /// The snapshot or the file failed; the old dump is untouched.
    #[error("{0}")]
    Write(String),
}

/// SAVE: a synchronous save on the caller's thread, counted in rdb_saves
/// as Redis's `saveCommand` counts it. `Err` carries the error reply.
pub fn save(server: &Server) -> Result<(), String> {
    if bgsave_busy(server) {
        return Err(format!("ERR {}", SaveError::BgsaveInProgress));
    }
    server.rdb.count_save();
    save_sync(server).map(|_| ()).map_err(|_| "ERR".to_string())
}

/// A BGSAVE runs, or was accepted and is not waiting for another snapshot.
fn bgsave_busy(server: &Server) -> bool {
    let saver = &server.rdb;
    saver.in_progress() || saver.requested.load(Ordering::Acquire) && !saver.scheduled.load(Ordering::Relaxed)
}

/// A synchronous save (SAVE, SHUTDOWN, DEBUG RELOAD): waits for an AOF
/// rewrite that holds the snapshot token to end, then saves on this
/// thread. Returns the file's size.
pub fn save_sync(server: &Server) -> Result<u64, SaveError> {
    loop {
        if bgsave_busy(server) {
            return Err(SaveError::BgsaveInProgress);
        }
        if server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            break;
        }
        if server.shutdown.load(Ordering::Relaxed) {
            return Err(SaveError::ShuttingDown);
        }
        // An AOF rewrite holds the snapshot: wait for its end.
        std::thread::sleep(Duration::from_millis(5));
    }
    let stop = || server.shutdown.load(Ordering::Relaxed);
    let begun = begin(server);
    let write = |temp: &Path, settings| write_snapshot(server, begun, temp, settings, &stop, false);
    let result = save_to_file(server, Saving::Snapshot, Box::new(write));
    end_sync_save(server, result)
}

/// What SHUTDOWN's arguments say about the final save.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalSave {
    /// No argument (and SIGTERM, SIGINT): save if save rules exist.
    IfRules,
    Save,
    NoSave,
}

/// Redis's `finishShutdown`, for the RDB: aborts a BGSAVE under way, then
/// (with save rules or SAVE, unless NOSAVE or while loading) saves
/// synchronously. Writes are paused first (as CLIENT PAUSE WRITE) so that
/// a write acknowledged after the snapshot's start cannot be missing from
/// the file; a write already past the pause check when it was set may
/// still land after S, a window of one command per worker. `Err`: the save
/// failed without FORCE; writes resume and the server goes on, as Redis.
pub fn prepare_shutdown(server: &Server, mode: FinalSave, force: bool) -> Result<(), SaveError> {
    abort_bgsave(server);
    let rules = !server.config.read().save.is_empty();
    let loading = server.loading.load(Ordering::Relaxed);
    if loading || mode == FinalSave::NoSave || mode == FinalSave::IfRules && !rules {
        return Ok(());
    }
    tracing::info!("Saving the final RDB snapshot before exiting.");
    crate::supervision::notify_systemd("STATUS=Saving the final RDB snapshot\n");
    server.pauses.pause(Purpose::Shutdown, u64::MAX, Mode::Writes, unix_ms());
    match save_sync(server) {
        Ok(_) => Ok(()),
        Err(e) if force => {
            tracing::warn!("Error trying to save the DB ({e}). Exit anyway.");
            Ok(())
        }
        Err(e) => {
            tracing::warn!("Error trying to save the DB, can't exit.");
            crate::supervision::notify_systemd("STATUS=Error trying to save the DB, can't exit.\n");
            server.pauses.unpause(Purpose::Shutdown);
            server.broadcast(|| crate::client::Message::Resume);
            Err(e)
        }
    }
}

/// Stops a BGSAVE that is under way or scheduled, and waits for its thread
/// to let it go (within one snapshot step).
fn abort_bgsave(server: &Server) {
    let saver = &server.rdb;
    if !saver.requested.load(Ordering::Acquire) {
        return;
    }
    tracing::warn!("There is a background save under way. Aborting it!");
    saver.abort.store(true, Ordering::Relaxed);
    while saver.requested.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    saver.abort.store(false, Ordering::Relaxed);
}

/// Lets go of the snapshot token after a synchronous save, and as Redis's
/// rdbSave lifts -MISCONF when it succeeded.
fn end_sync_save(server: &Server, result: Result<u64, String>) -> Result<u64, SaveError> {
    // Nothing is written while a synchronous save holds the shards: it
    // keeps nothing, and Redis's SAVE has no child to report.
    server.snapshot_progress.end();
    server.snapshot_active.store(false, Ordering::Release);
    match result {
        Ok(bytes) => {
            server.rdb.last_failed.store(false, Ordering::Relaxed);
            tracing::info!("DB saved on disk ({bytes} bytes)");
            Ok(bytes)
        }
        Err(e) => {
            tracing::error!("Write error saving DB on disk: {e}");
            Err(SaveError::Write(e))
        }
    }
}

/// Starts the BGSAVE thread, an ordinary one (its scan runs behind the
/// workers on a helper). It lives as long as the server; `stop` ends it.
/// Between saves it is also the cron of the `save` rules.
pub fn spawn(server: Arc<Server>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("keel-bgsave".into()).spawn(move || run(&server))
}

/// The first `save` rule that is met now, as Redis's serverCron decides:
/// enough changes, more than `seconds` since the last successful save, no
/// other snapshot running, and after a failed BGSAVE a retry delay.
fn due_rule(server: &Server) -> Option<SaveRule> {
    if server.loading.load(Ordering::Relaxed)
        || server.snapshot_active.load(Ordering::Acquire)
        || server.rewrite.in_progress()
        || server.rdb.requested.load(Ordering::Acquire)
    {
        return None;
    }
    let now_s = unix_ms() / 1000;
    let since_save_s = now_s.saturating_sub(server.lastsave_s.load(Ordering::Relaxed));
    let retry_ok = !server.rdb.last_failed.load(Ordering::Relaxed)
        || now_s.saturating_sub(server.rdb.state.lock().last_try_s) > BGSAVE_RETRY_DELAY_S;
    let dirty = server.dirty.load(Ordering::Relaxed);
    let c = server.config.read();
    c.save.iter().copied().find(|r| dirty >= r.changes && since_save_s > r.seconds && retry_ok)
}

fn run(server: &Server) {
    crate::process::pin_thread(crate::process::CpuRole::Bgsave);
    let saver = &server.rdb;
    loop {
        let hz = u64::from(server.config.read().hz.max(1));
        match saver.bell.wait_up_to(Duration::from_millis(1000 / hz)) {
            Wake::Stop => return,
            Wake::Idle => {
                if server.cron_paused.load(Ordering::Relaxed) {
                    continue;
                }
                if let Some(rule) = due_rule(server) {
                    tracing::info!("{} changes in {} seconds. Saving...", rule.changes, rule.seconds);
                    bgsave(server, false, false);
                }
                continue;
            }
            Wake::Rung => {}
        }
        let begun = saver.state.lock().begun.take();
        let stop = || saver.stopping() || saver.abort.load(Ordering::Relaxed) || server.shutdown.load(Ordering::Relaxed);
        let begun = match begun {
            Some(begun) => begun,
            None => {
                // Scheduled: wait for the token (an AOF rewrite holds it).
                let mut got = false;
                while !stop() {
                    if server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        got = true;
                        break;
                    }
                    saver.bell.nap(Duration::from_millis(5));
                }
                if !got {
                    saver.scheduled.store(false, Ordering::Relaxed);
                    saver.requested.store(false, Ordering::Release);
                    continue;
                }
                begin(server)
            }
        };
        saver.scheduled.store(false, Ordering::Relaxed);
        saver.urgent.store(false, Ordering::Relaxed);
        crate::durability::suspend_fsync_while_saving(server, true);
        saver.in_progress.store(true, Ordering::Release);
        {
            let mut st = saver.state.lock();
            st.started = Some(Instant::now());
            st.last_try_s = unix_ms() / 1000;
            st.saves += 1;
        }
        tracing::info!("Background saving started");
        let stopped = || stop() || saver.superseded.load(Ordering::Relaxed);
        let write = |temp: &Path, settings| write_snapshot(server, begun, temp, settings, &stopped, true);
        let result = save_to_file(server, Saving::Snapshot, Box::new(write));
        let kept = server.snapshot_progress.end();
        server.snapshot_progress.last_bgsave_kept.store(kept, Ordering::Relaxed);
        server.snapshot_active.store(false, Ordering::Release);
        match result {
            Ok(bytes) => {
                tracing::info!("Background saving terminated with success ({bytes} bytes)");
                saver.last_failed.store(false, Ordering::Relaxed);
            }
            // Aborted for SHUTDOWN or superseded by FLUSHALL, as Redis's
            // SIGUSR1 to its child: no error.
            Err(e) if saver.abort.load(Ordering::Relaxed) || saver.superseded.load(Ordering::Relaxed) || e == SUPERSEDED => {
                tracing::warn!("Background saving aborted: {e}")
            }
            Err(e) => {
                tracing::error!("Background saving error: {e}");
                saver.last_failed.store(true, Ordering::Relaxed);
            }
        }
        {
            let mut st = saver.state.lock();
            st.last_took = Some(st.started.take().map_or(Duration::ZERO, |t| t.elapsed()));
        }
        // In this order: whoever sees the save ended may SAVE at once.
        saver.requested.store(false, Ordering::Release);
        saver.in_progress.store(false, Ordering::Release);
        crate::durability::suspend_fsync_while_saving(server, false);
    }
}

/// What writes a dump's contents into the temporary file: given its path
/// and the settings read when the save started, returns the file's size and
/// `dirty` as it was at the instant the contents show.
type WriteDump<'a> = dyn FnOnce(&Path, DumpSettings) -> Result<(u64, u64), String> + 'a;

/// Who is saving, which decides the temporary file's name and how the
/// rename is kept in order with FLUSHALL.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Saving {
    /// A snapshot job (BGSAVE, SAVE), with the snapshot token.
    Snapshot,
    /// A caller holding every shard (DEBUG RELOAD, FLUSHALL), with or
    /// without the token; such saves never overlap one another.
    AllShardsHeld,
}

/// Why a snapshot job's file did not replace the dump because a FLUSHALL
/// wrote a newer one meanwhile: not a failure (Redis's FLUSHALL kills its
/// BGSAVE child with SIGUSR1, which is not counted as one either).
pub const SUPERSEDED: &str = "superseded by FLUSHALL's dump";

/// One save: contents, temp file, fsync, rename. On success takes what the
/// file covers off `dirty`, sets `lastsave_s`, and returns the file's size.
fn save_to_file(server: &Server, saving: Saving, write: Box<WriteDump<'_>>) -> Result<u64, String> {
    let settings = dump_settings(server);
    let (dir, name) = {
        let c = server.config.read();
        (c.dir.clone(), c.dbfilename.clone())
    };
    let temp = match saving {
        Saving::Snapshot => temp_in(&dir),
        Saving::AllShardsHeld => dir.join(format!("temp-held-{}.rdb", std::process::id())),
    };
    let target = dir.join(&name);
    match write(&temp, settings) {
        Ok((bytes, dirty_at_s)) => {
            // In order with FLUSHALL, which holds every shard.
            let shard0 = (saving == Saving::Snapshot).then(|| server.keyspace.lock_one(0));
            if saving == Saving::Snapshot && server.rdb.superseded.load(Ordering::Relaxed) {
                let _ = fs::remove_file(&temp);
                return Err(SUPERSEDED.into());
            }
            if let Err(e) = fs::rename(&temp, &target) {
                let _ = fs::remove_file(&temp);
                return Err(format!("rename {} to {}: {e}", temp.display(), target.display()));
            }
            drop(shard0);
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
            server.dirty.fetch_sub(dirty_at_s.min(server.dirty.load(Ordering::Relaxed)), Ordering::Relaxed);
            server.lastsave_s.store(unix_ms() / 1000, Ordering::Relaxed);
            Ok(bytes)
        }
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}

/// The configuration's [`DumpSettings`], read as a save starts.
fn dump_settings(server: &Server) -> DumpSettings {
    let c = server.config.read();
    DumpSettings {
        options: WriteOptions {
            encode: crate::rdb::encode_options(&c.encoding, c.rdbcompression),
            checksum: c.rdbchecksum,
            ..WriteOptions::default()
        },
        key_delay_us: c.rdb_key_save_delay_us,
        incremental_fsync: c.rdb_save_incremental_fsync,
    }
}

/// How a dump is written, read from the configuration when a save starts.
#[derive(Clone, Copy)]
struct DumpSettings {
    options: WriteOptions,
    /// `rdb-key-save-delay`: microseconds to sleep after each key (tests).
    key_delay_us: i64,
    /// `rdb-save-incremental-fsync`.
    incremental_fsync: bool,
}

/// Redis's `REDIS_AUTOSYNC_BYTES`: with `rdb-save-incremental-fsync`, a
/// dump is fdatasync'd each time this much more is written.
const SAVE_SYNC_EVERY_BYTES: u64 = 4 << 20;

/// A dump's file, synced as it is written when asked
/// (`rdb-save-incremental-fsync`, on by default as in Redis:
/// [`IncrementalSync`]), for Redis's reason: a save then never leaves
/// gigabytes of dirty pages for the final fsync, nor for the journal's own
/// fsyncs to queue behind. The AOF rewrite's base does the same
/// (`aof-rewrite-incremental-fsync`).
struct SyncedFile {
    file: File,
    /// `None` without `rdb-save-incremental-fsync`.
    sync: Option<IncrementalSync>,
}

impl Write for SyncedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        if let Some(sync) = &mut self.sync {
            let file = &self.file;
            sync.wrote(n as u64, |at, len, wait| keel_journal::write_out(file, at, len, wait), || file.sync_data())?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An RDB being written (a file, or a replica's socket), with a
/// `SELECTDB` (and its `RESIZEDB` hint, the database's key count) each
/// time the database changes.
struct DumpWriter<W: Write> {
    w: RdbWriter<W>,
    current_db: Option<usize>,
    /// (keys, keys with a TTL) per database.
    counts: Vec<(u64, u64)>,
    key_delay_us: i64,
}

impl DumpWriter<BufWriter<SyncedFile>> {
    fn create(temp: &Path, settings: DumpSettings) -> Result<Self, String> {
        let file = File::create(temp).map_err(|e| format!("create {}: {e}", temp.display()))?;
        let file = SyncedFile { file, sync: settings.incremental_fsync.then(|| IncrementalSync::new(SAVE_SYNC_EVERY_BYTES)) };
        DumpWriter::new(BufWriter::with_capacity(256 << 10, file), settings)
    }

    /// Writes the trailer and fsyncs; returns the file's size.
    fn finish(self) -> Result<u64, String> {
        let bytes = self.w.bytes_written() + 9;
        let out = self.finish_into()?;
        let file = out.into_inner().map_err(|e| e.error().to_string())?.file;
        file.sync_all().map_err(|e| e.to_string())?;
        Ok(bytes)
    }
}

impl<W: Write> DumpWriter<W> {
    fn new(sink: W, settings: DumpSettings) -> Result<Self, String> {
        let w = RdbWriter::new(sink, settings.options).map_err(|e| e.to_string())?;
        Ok(DumpWriter { w, current_db: None, counts: Vec::new(), key_delay_us: settings.key_delay_us })
    }

    fn key(&mut self, db: usize, key: &[u8], value: GatheredValue<'_>, expire: Option<u64>, flags: u32) -> Result<(), String> {
        if self.current_db != Some(db) {
            let (keys, expires) = self.counts.get(db).copied().unwrap_or((0, 0));
            self.w.select_db(db as u64, keys, expires).map_err(|e| e.to_string())?;
            self.current_db = Some(db);
        }
        value.write(&mut self.w, key, expire, flags).map_err(|e| e.to_string())?;
        if self.key_delay_us > 0 {
            std::thread::sleep(Duration::from_micros(self.key_delay_us as u64));
        }
        Ok(())
    }

    /// The aux fields Redis writes into a full sync's RDB, and a save's
    /// where there is a history: the stream's database after it (which a
    /// replica's replica needs, its stream being proxied without a SELECT
    /// first), its history and offset (a restart continues from there).
    fn sync_point(&mut self, point: &SyncPoint) -> Result<(), String> {
        let fields = [("repl-stream-db", point.stream_db.to_string()), ("repl-id", point.replid.clone()), ("repl-offset", point.offset.to_string())];
        for (name, value) in fields {
            self.w.aux(name.as_bytes(), value.as_bytes()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The function libraries, before the databases as Redis writes them.
    fn functions(&mut self, libraries: &[Arc<Library>]) -> Result<(), String> {
        for library in libraries {
            self.w.function(&library.code).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Writes the trailer; returns the sink.
    fn finish_into(self) -> Result<W, String> {
        self.w.finish().map_err(|e| e.to_string())
    }
}

/// (keys, keys with a TTL) per database of `shards`.
pub(crate) fn db_counts<'s>(shards: impl Iterator<Item = &'s mut keel_engine::Shard>, databases: usize) -> Vec<(u64, u64)> {
    let mut counts = vec![(0u64, 0u64); databases];
    for shard in shards {
        for (db, count) in counts.iter_mut().enumerate() {
            let d = shard.db(db);
            count.0 += d.len() as u64;
            count.1 += d.expires_len() as u64;
        }
    }
    counts
}

/// A snapshot's instant S, taken: what writing it needs.
struct Begun {
    /// (keys, keys with a TTL) per database at S.
    counts: Vec<(u64, u64)>,
    /// The function libraries at S (the commands that change them hold
    /// every shard).
    libraries: Vec<Arc<Library>>,
    /// `dirty` at S: what a successful save takes off it.
    dirty_at_s: u64,
    /// The replication history at S, which the file records.
    repl: Option<SyncPoint>,
}

/// How long a save waits for a replica's link to hold its master's
/// stream still for S: a piece of it is applied in well under this, and a
/// link that holds it longer is loading a full sync, whose history is not
/// yet this server's (the save then records none).
const STREAM_HOLD_WAIT: Duration = Duration::from_millis(200);

/// Takes S (with the snapshot token held): every shard locked an instant.
fn begin(server: &Server) -> Begun {
    let held = server.replica.hold_stream_for(STREAM_HOLD_WAIT);
    begin_with(server, held.is_some(), || {})
}

/// `begin`, running `at_s` at S, under every shard lock. `stream_held`:
/// the replica's link holds its master's stream still (always so on a
/// master), so the history at S can be recorded.
fn begin_with(server: &Server, stream_held: bool, at_s: impl FnOnce()) -> Begun {
    let keyspace = &server.keyspace;
    keyspace.prepare_snapshot(PREPARE_BUDGET);
    keyspace.begin_snapshot(|all| {
        at_s();
        server.rdb.superseded.store(false, Ordering::Relaxed);
        let counts = db_counts(all.iter_mut(), keyspace.databases());
        server.snapshot_progress.begin(counts.iter().map(|c| c.0).sum());
        Begun {
            counts,
            libraries: server.scripts.functions.snapshot(),
            dirty_at_s: server.dirty.load(Ordering::Relaxed),
            repl: if stream_held { server.repl.save_point() } else { None },
        }
    })
}

/// Writes the forkless snapshot begun at S into `temp`; on failure every
/// shard's snapshot is aborted. `stop` is asked before each piece of the
/// work (a step under a shard's lock, an entry written): true stops the
/// save. A `background` save (BGSAVE) scans behind the workers.
fn write_snapshot(
    server: &Server,
    begun: Begun,
    temp: &Path,
    settings: DumpSettings,
    stop: &(dyn Fn() -> bool + Sync),
    background: bool,
) -> Result<(u64, u64), String> {
    let keyspace = &server.keyspace;
    let result = DumpWriter::create(temp, settings).and_then(|mut out| {
        out.counts = begun.counts;
        if let Some(point) = &begun.repl {
            out.sync_point(point)?;
        }
        out.functions(&begun.libraries)?;
        if background {
            crate::behind::scan(server, "keel-bgsave-bg", &server.rdb.urgent, |behind| stream(server, &mut out, stop, behind.then_some(&server.rdb.urgent)))?;
        } else {
            stream(server, &mut out, stop, None)?;
        }
        out.finish()
    });
    if result.is_err() {
        for index in 0..keyspace.shard_count() {
            let leftovers = keyspace.lock_one(index).shard(index).abort_snapshot();
            drop(leftovers);
        }
    }
    Ok((result?, begun.dirty_at_s))
}

/// The scan: true once every shard is written; false when, behind the
/// workers (with their `urgent` flag: stepping aside for busy ones before
/// each piece), it stops before a step, the flag set, to hand the rest to
/// the thread that started it.
fn stream<W: Write>(server: &Server, out: &mut DumpWriter<W>, stop: &dyn Fn() -> bool, urgent: Option<&AtomicBool>) -> Result<bool, String> {
    let behind = urgent.is_some();
    let stopped = || "stopped for a shutdown or a FLUSHALL".to_string();
    let next_piece = || {
        if behind {
            server.worker_cores.give_way();
        }
        stop()
    };
    let keyspace = &server.keyspace;
    let mut buf = Gathered::default();
    // A shard already written answers its next step at once, as done.
    for index in 0..keyspace.shard_count() {
        loop {
            if urgent.is_some_and(|u| u.load(Ordering::Relaxed)) {
                return Ok(false);
            }
            if next_piece() {
                return Err(stopped());
            }
            let done = {
                let mut locked = keyspace.lock_one(index);
                locked.shard(index).snapshot_step(STEP_ENTRIES, |db, key, entry: &Entry, flags| buf.push(db, key, entry, flags))
            };
            buf.drain(|db, key, value, expire, flags| {
                if next_piece() {
                    return Err(stopped());
                }
                out.key(db, key, value, expire, flags)?;
                server.snapshot_progress.keys_processed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })?;
            if done {
                break;
            }
        }
    }
    Ok(true)
}

/// A snapshot taken for a replica's full sync, not yet written.
pub struct SyncSnapshot(Begun);

/// Takes the snapshot token (waiting while a BGSAVE or an AOF rewrite
/// holds it) and a full sync's instant S, running `at_s` under every
/// shard lock. On a replica, S falls between two pieces of its master's
/// stream, each applied and proxied as one (`Replica::hold_stream`), so
/// that the backlog's end is the master's offset of what the snapshot
/// holds. `None` if `stop` said so before the token came.
pub fn take_for_sync(server: &Server, at_s: impl FnOnce(), stop: &dyn Fn() -> bool) -> Option<SyncSnapshot> {
    while server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
        if stop() {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    server.rdb.for_sync.store(true, Ordering::Release);
    let _stream = server.replica.hold_stream();
    Some(SyncSnapshot(begin_with(server, true, at_s)))
}

/// What of the dataset a replica's RDB holds: all of it, unless the
/// replica asked for less (`REPLCONF rdb-filter-only`, Redis's include
/// filters, of which there is one: `functions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdbParts {
    pub keys: bool,
    pub functions: bool,
}

impl RdbParts {
    pub const ALL: RdbParts = RdbParts { keys: true, functions: true };
}

impl Default for RdbParts {
    fn default() -> RdbParts {
        RdbParts::ALL
    }
}

/// Writes `parts` of a snapshot taken by [`take_for_sync`] into `sink` as
/// an RDB, its scan behind the workers as BGSAVE's, and gives the token
/// back. On failure (or `stop`), or without the keys, every shard's
/// snapshot is aborted.
pub fn write_for_sync<W: Write + Send>(
    server: &Server,
    taken: SyncSnapshot,
    point: &SyncPoint,
    parts: RdbParts,
    sink: W,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<W, String> {
    let urgent = AtomicBool::new(false);
    let result = DumpWriter::new(sink, dump_settings(server)).and_then(|mut out| {
        if parts.keys {
            out.counts = taken.0.counts;
        }
        out.sync_point(point)?;
        if parts.functions {
            out.functions(&taken.0.libraries)?;
        }
        if parts.keys {
            crate::behind::scan(server, "keel-repl-sync-bg", &urgent, |behind| stream(server, &mut out, stop, behind.then_some(&urgent)))?;
        }
        out.finish_into()
    });
    if result.is_err() || !parts.keys {
        for index in 0..server.keyspace.shard_count() {
            let leftovers = server.keyspace.lock_one(index).shard(index).abort_snapshot();
            drop(leftovers);
        }
    }
    server.snapshot_progress.end();
    server.rdb.for_sync.store(false, Ordering::Release);
    server.snapshot_active.store(false, Ordering::Release);
    result
}

/// A save from shards the caller holds, every one of them (DEBUG RELOAD
/// runs with every shard locked, as Redis's single thread): nothing can
/// change meanwhile, so the keys are written as they are, without the
/// snapshot machinery. Needs the snapshot token, which it cannot wait for
/// (its holder would need these locks).
fn save_held(server: &Server, locked: &mut Locked<'_>) -> Result<u64, SaveError> {
    if server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return Err(SaveError::SnapshotBusy);
    }
    // With every shard held, the link's hold can only be tried: waiting
    // for it would reverse the order in which the link takes both.
    let repl = server.replica.hold_stream_for(Duration::ZERO).and_then(|_stream| server.repl.save_point());
    let write = |temp: &Path, settings: DumpSettings| -> Result<(u64, u64), String> {
        let mut out = DumpWriter::create(temp, settings)?;
        out.counts = db_counts(locked.iter_mut(), server.keyspace.databases());
        if let Some(point) = &repl {
            out.sync_point(point)?;
        }
        out.functions(&server.scripts.functions.snapshot())?;
        for shard in locked.iter_mut() {
            for (db, d) in shard.dbs().iter().enumerate() {
                for (key, entry) in d.iter() {
                    let expire = entry.has_expiry().then_some(entry.expire_at_ms);
                    let flags = d.item_meta(key).flags;
                    out.key(db, key, GatheredValue::Other(&crate::rdb::to_rdb(&entry.value)), expire, flags)?;
                }
            }
        }
        Ok((out.finish()?, server.dirty.load(Ordering::Relaxed)))
    };
    let result = save_to_file(server, Saving::AllShardsHeld, Box::new(write));
    end_sync_save(server, result)
}

/// The file a save writes before renaming it over the dump.
fn temp_in(dir: &Path) -> PathBuf {
    dir.join(format!("temp-{}.rdb", std::process::id()))
}

/// `temp_in` the configured `dir`.
pub fn temp_path(server: &Server) -> PathBuf {
    temp_in(&server.config.read().dir)
}

/// Where `dump.rdb` is, from the configuration.
pub fn dump_path(server: &Server) -> PathBuf {
    let c = server.config.read();
    c.dir.join(&c.dbfilename)
}

/// Entries per batch handed from the reader to an inserter: enough that
/// the channel costs little per key.
const LOAD_BATCH: usize = 256;
/// Batches queued per inserter before the reader waits: the bound on the
/// memory a load holds beyond the keyspace.
const LOAD_QUEUE_BATCHES: usize = 16;

/// Why a load stopped; the caller prefixes the file's name.
type LoadError = String;

/// What `read_dump` hands on, in file order.
enum Read {
    /// An entry that has not expired.
    Entry(RdbEntry),
    /// A database's RESIZEDB hint, per shard: size each shard's tables.
    Reserve { db: usize, keys: usize, with_expiry: usize },
    /// A function library's code.
    Function(Vec<u8>),
}

/// What a read RDB said besides its keys.
struct RdbRead {
    /// Keys skipped because they had expired.
    expired: u64,
    /// Its `repl-stream-db`: where a full sync's stream goes on.
    stream_db: Option<usize>,
    /// Its `repl-id` and `repl-offset`.
    history: (Option<String>, Option<u64>),
    /// The keys skipped as expired, when asked for.
    expired_keys: Vec<(usize, Vec<u8>)>,
}

/// The replication history an RDB was saved with (`repl-id`,
/// `repl-offset`, `repl-stream-db`), and the keys its load skipped as
/// expired, whose DELs a restarted master owes its replicas.
#[derive(Debug)]
pub struct SavedHistory {
    pub replid: String,
    pub offset: u64,
    pub stream_db: usize,
    pub expired: Vec<(usize, Vec<u8>)>,
}

/// A load's outcome: keys loaded and skipped as expired, and where a full
/// sync's stream goes on (the RDB's `repl-stream-db`).
#[derive(Debug, Clone, Copy)]
pub struct Loaded {
    pub keys: u64,
    pub expired: u64,
    pub stream_db: Option<usize>,
}

/// Reads `path`, handing what it holds to `sink`; an error names the
/// offset. `expired_keys`: keep the keys skipped as expired.
fn read_dump(server: &Server, path: &Path, expired_keys: bool, sink: &mut dyn FnMut(Read) -> Result<(), LoadError>) -> Result<RdbRead, LoadError> {
    let (reader, total) = open_dump(path)?;
    read_rdb(server, reader, total, &path.display().to_string(), expired_keys, sink)
}

/// A reader of the RDB at `path`, and the file's size.
fn open_dump(path: &Path) -> Result<(RdbReader<BufReader<File>>, u64), LoadError> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    // The parsing thread is what a load waits on: the checksum goes to a helper.
    let reader = RdbReader::new(BufReader::with_capacity(256 << 10, file)).map_err(located)?.checksum_in_background();
    Ok((reader, total))
}

/// An RDB error with the offset it was met at, where known.
fn located(e: keel_rdb::RdbError) -> LoadError {
    match e.offset() {
        Some(off) => format!("at offset {off}: {e}"),
        None => e.to_string(),
    }
}

/// Reads an RDB of `total` bytes (0: unknown) from `reader`, named
/// `source` in the log, handing what it holds to `sink`. A master skips
/// the keys already expired; with `keep_expired`, it keeps their names,
/// once the file has named a history (a restarted master owes its
/// replicas their DELs).
fn read_rdb<R: io::BufRead>(
    server: &Server,
    mut reader: RdbReader<R>,
    total: u64,
    source: &str,
    keep_expired: bool,
    sink: &mut dyn FnMut(Read) -> Result<(), LoadError>,
) -> Result<RdbRead, LoadError> {
    let mut pacer = crate::loading::Pacer::new(server, total);
    let now = unix_ms();
    let replica = server.replica.is_replica();
    let mut expired = 0u64;
    let mut stream_db = None;
    let mut history = (None, None);
    let mut expired_keys = Vec::new();
    let mut db = 0;
    while let Some(item) = reader.next_item().map_err(located)? {
        let e = match item {
            RdbItem::Entry(e) => e,
            RdbItem::SelectDb(n) => {
                db = n as usize;
                continue;
            }
            RdbItem::ResizeDb { db_size, expires_size } if db < server.keyspace.databases() => {
                let per_shard = |n| keys_per_shard(server, n, total);
                sink(Read::Reserve { db, keys: per_shard(db_size), with_expiry: per_shard(expires_size) })?;
                continue;
            }
            RdbItem::ModuleAux { module } => return Err(keel_rdb::no_matching_module(&module)),
            // The first ten by name, as Redis logs them.
            RdbItem::EmptyKeySkipped { key } => {
                if reader.empty_keys_skipped() <= 10 {
                    tracing::info!("rdbLoadObject skipping empty key: {}", String::from_utf8_lossy(&key));
                }
                continue;
            }
            RdbItem::Function { code } => {
                sink(Read::Function(code))?;
                continue;
            }
            RdbItem::Aux { name, value } => {
                let text = String::from_utf8_lossy(&value);
                match &name[..] {
                    b"repl-stream-db" => stream_db = text.parse().ok().filter(|&n| n < server.keyspace.databases()),
                    b"repl-id" => history.0 = Some(text.into_owned()),
                    b"repl-offset" => history.1 = text.parse().ok(),
                    _ => {}
                }
                continue;
            }
            _ => continue,
        };
        // A replica keeps keys already expired, as Redis's rdbLoad does
        // unless iAmMaster(): the master's DEL for each is still to come,
        // and the commands before it may touch the key.
        if !replica && e.expire_at_ms.is_some_and(|at| at <= now) {
            expired += 1;
            if keep_expired && history.0.is_some() {
                expired_keys.push((e.db as usize, e.key));
            }
            continue;
        }
        if e.db as usize >= server.keyspace.databases() {
            return Err(format!("at offset {}: database {} out of range", reader.offset(), e.db));
        }
        pacer.key(|| reader.offset()).map_err(|e| e.to_string())?;
        sink(Read::Entry(e))?;
    }
    pacer.done(reader.offset());
    if reader.empty_keys_skipped() > 0 {
        tracing::info!("{source}: empty keys skipped: {}", reader.empty_keys_skipped());
    }
    Ok(RdbRead { expired, stream_db, history, expired_keys })
}

/// Adds a function library read from a file to the server's. One of the
/// same name already loaded is replaced only when `replace` (DEBUG RELOAD
/// MERGE), else the load fails, as Redis's `rdbLoad` without
/// `RDBFLAGS_ALLOW_DUP` does.
fn load_function(server: &Server, code: &[u8], replace: bool) -> Result<(), LoadError> {
    server.scripts.functions.load(server, code, replace).map(drop).map_err(|e| format!("function library: {e}"))
}

/// A database's share of an RDB file's RESIZEDB hint for one shard (keys
/// spread evenly over the shards by hash slot). A hint is the file's word:
/// no more keys than `file_bytes` has room for, three bytes each at least.
pub fn keys_per_shard(server: &Server, keys: u64, file_bytes: u64) -> usize {
    (keys.min(file_bytes / 3) as usize).div_ceil(server.keyspace.shard_count())
}

/// A read entry as the keyspace holds it, in the encodings the current
/// limits give it (built off any lock), and its memcached flags.
fn build_entry(e: RdbEntry, limits: &EncodingLimits, lru_s: u32) -> (usize, Vec<u8>, Entry, u32) {
    let access_s = lru_s.saturating_sub(e.idle_s.unwrap_or(0).min(u64::from(u32::MAX)) as u32);
    let mut entry = Entry::new(crate::rdb::from_rdb(e.value, limits), access_s);
    entry.expire_at_ms = e.expire_at_ms.unwrap_or(0);
    (e.db as usize, e.key, entry, e.item_flags.unwrap_or(0))
}

/// Inserts a read entry into the shards the caller holds (DEBUG RELOAD,
/// DEBUG LOADAOF), refusing a key the dataset already has unless `replace`.
pub fn insert_held(
    server: &Server,
    locked: &mut Locked<'_>,
    e: RdbEntry,
    limits: &EncodingLimits,
    lru_s: u32,
    replace: bool,
) -> Result<(), LoadError> {
    let (db, key, entry, flags) = build_entry(e, limits, lru_s);
    insert_into(locked.shard_for(&server.keyspace, &key).db(db), &key, entry, flags, replace)
}

/// Inserts into `db` with its memcached flags (0: none), refusing a key
/// the dataset already has (Redis stops on a duplicated key too) unless
/// `replace`.
fn insert_into(db: &mut keel_engine::Db, key: &[u8], entry: Entry, flags: u32, replace: bool) -> Result<(), LoadError> {
    if !replace && db.peek(key).is_some() {
        return Err(format!("duplicated key '{}'", String::from_utf8_lossy(key)));
    }
    db.insert_entry(key, entry);
    // After the insert, which drops a replaced key's flags.
    if flags != 0 {
        db.set_item_meta(key, keel_engine::ItemMeta { flags, ..Default::default() });
    }
    Ok(())
}

/// Threads that build loaded entries' values and insert them, one per
/// worker thread, each owning the shards whose index is its own modulo
/// their number, so they never contend for a lock. Entries travel to them
/// in batches over bounded channels. Used by every load at start: dump.rdb
/// and an AOF's RDB base.
pub struct Inserters<'scope> {
    server: &'scope Server,
    senders: Vec<std::sync::mpsc::SyncSender<Vec<RdbEntry>>>,
    handles: Vec<std::thread::ScopedJoinHandle<'scope, Result<u64, LoadError>>>,
    batches: Vec<Vec<RdbEntry>>,
}

impl<'scope> Inserters<'scope> {
    /// Starts them in `scope`. With `replace`, a key already present is
    /// replaced (an AOF base); without, it stops the load (Redis stops on
    /// a duplicated key in dump.rdb too).
    pub fn start<'env>(scope: &'scope std::thread::Scope<'scope, 'env>, server: &'env Server, replace: bool) -> Result<Self, LoadError>
    where
        'env: 'scope,
    {
        let count = server.thread_count.max(1);
        let limits = server.config.read().encoding;
        let lru_s = server.lru_s();
        let keyspace = &server.keyspace;
        let mut senders = Vec::with_capacity(count);
        let mut handles = Vec::with_capacity(count);
        for i in 0..count {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<RdbEntry>>(LOAD_QUEUE_BATCHES);
            senders.push(tx);
            let spawned = std::thread::Builder::new().name(format!("keel-load-{i}")).spawn_scoped(scope, move || {
                crate::process::panic_fails_this_thread_only();
                let mut loaded = 0u64;
                for batch in rx {
                    for e in batch {
                        let (db, key, entry, flags) = build_entry(e, &limits, lru_s);
                        let index = keyspace.shard_of_key(&key);
                        insert_into(keyspace.lock_one(index).shard(index).db(db), &key, entry, flags, replace)?;
                        loaded += 1;
                    }
                }
                Ok::<u64, LoadError>(loaded)
            });
            handles.push(spawned.map_err(|e| e.to_string())?);
        }
        Ok(Inserters { server, senders, handles, batches: (0..count).map(|_| Vec::with_capacity(LOAD_BATCH)).collect() })
    }

    /// Queues an entry (its database in range) for its shard's inserter.
    pub fn send(&mut self, e: RdbEntry) -> Result<(), LoadError> {
        let to = self.server.keyspace.shard_of_key(&e.key) % self.senders.len();
        self.batches[to].push(e);
        if self.batches[to].len() == LOAD_BATCH {
            let full = std::mem::replace(&mut self.batches[to], Vec::with_capacity(LOAD_BATCH));
            // A closed channel: that inserter stopped on an error, which
            // `finish` reports.
            self.senders[to].send(full).map_err(|_| LoadError::new())?;
        }
        Ok(())
    }

    /// Sizes database `db` in every (still empty) shard before its keys
    /// come: the inserters are between databases then, so the locks are free.
    pub fn reserve(&self, db: usize, keys_per_shard: usize, with_expiry_per_shard: usize) {
        let keyspace = &self.server.keyspace;
        for index in 0..keyspace.shard_count() {
            keyspace.lock_one(index).shard(index).db(db).reserve_when_empty(keys_per_shard, with_expiry_per_shard);
        }
    }

    /// Sends what is left, waits for every inserter, and returns the keys
    /// inserted or the first inserter's error.
    pub fn finish(self) -> Result<u64, LoadError> {
        for (tx, batch) in self.senders.iter().zip(self.batches) {
            let _ = tx.send(batch);
        }
        drop(self.senders);
        let mut loaded = 0u64;
        let mut result: Result<(), LoadError> = Ok(());
        for h in self.handles {
            match h.join() {
                Ok(Ok(n)) => loaded += n,
                Ok(Err(e)) => result = result.and(Err(e)),
                Err(_) => result = result.and(Err("a loading thread panicked".into())),
            }
        }
        result.map(|()| loaded)
    }
}

/// Loads `path` into the (empty) keyspace at start, with every core: this
/// thread parses and [`Inserters`] insert. Keys that have expired are
/// skipped, unless this server is a replica. Returns (keys loaded, keys
/// expired) and the replication history the file was saved with, or an
/// error naming the file and the offset.
pub fn load(server: &Server, path: &Path) -> Result<(u64, u64, Option<SavedHistory>), String> {
    let result = std::thread::scope(|scope| {
        let mut inserters = Inserters::start(scope, server, false)?;
        let mut route = |read: Read| match read {
            Read::Entry(e) => inserters.send(e),
            Read::Reserve { db, keys, with_expiry } => {
                inserters.reserve(db, keys, with_expiry);
                Ok(())
            }
            Read::Function(code) => load_function(server, &code, true),
        };
        let read = read_dump(server, path, true, &mut route);
        // An inserter's error is the cause of the reader's closed channel.
        let loaded = inserters.finish()?;
        Ok((loaded, read?))
    });
    let (loaded, read) = result.map_err(|e: LoadError| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    server.rdb.last_load_keys_loaded.store(loaded, Ordering::Relaxed);
    server.rdb.last_load_keys_expired.store(read.expired, Ordering::Relaxed);
    let history = match (read.history, read.stream_db) {
        ((Some(replid), Some(offset)), Some(stream_db)) => Some(SavedHistory { replid, offset, stream_db, expired: read.expired_keys }),
        _ => None,
    };
    Ok((loaded, read.expired, history))
}

/// FLUSHALL's save, with every shard held by the caller and the dataset
/// just emptied: as Redis's `flushAllDataAndResetRDB`, when `save` rules
/// exist, the dump is rewritten (empty) at once so that a restart does
/// not bring the flushed keys back, and `dirty` drops to 0; not counted in
/// rdb_saves. A BGSAVE under way shows the data from before: it is marked
/// superseded, stops at its next step and will not replace the file, with
/// `save` rules or without (Redis kills its child either way). An AOF
/// rewrite holding the snapshot is unaffected.
pub fn save_after_flushall(server: &Server, locked: &mut Locked<'_>) {
    server.rdb.superseded.store(true, Ordering::Relaxed);
    if server.config.read().save.is_empty() {
        return;
    }
    let result = match save_held(server, locked) {
        Err(SaveError::SnapshotBusy) => {
            // Nothing to write but the header and trailer: the shards are empty.
            let counts = db_counts(locked.iter_mut(), server.keyspace.databases());
            let write = |temp: &Path, settings: DumpSettings| -> Result<(u64, u64), String> {
                let mut out = DumpWriter::create(temp, settings)?;
                out.counts = counts;
                Ok((out.finish()?, server.dirty.load(Ordering::Relaxed)))
            };
            save_to_file(server, Saving::AllShardsHeld, Box::new(write)).map(|_| ())
        }
        other => other.map(|_| ()).map_err(|e| e.to_string()),
    };
    if let Err(e) = result {
        tracing::warn!("FLUSHALL did not save the empty dataset: {e}");
    }
}

/// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE] with every shard held by the
/// caller: saves the dump (unless NOSAVE), empties the dataset (unless
/// NOFLUSH) and loads the dump back. Without MERGE a key already present
/// stops the load (Redis would stop the server). `Err` is the reply.
pub fn debug_reload(server: &Server, locked: &mut Locked<'_>, save: bool, flush: bool, merge: bool) -> Result<(), String> {
    if save {
        save_held(server, locked).map_err(|_| "ERR".to_string())?;
    }
    if flush {
        for shard in locked.iter_mut() {
            for d in shard.dbs_mut().iter_mut() {
                drop(d.take_all());
            }
        }
        if server.tracking.active() {
            crate::tracking::flushed(server, locked.iter_mut());
        }
        // The file's function libraries replace ours, as Redis's emptyData
        // takes them with the keys.
        server.scripts.functions.flush();
    }
    let path = dump_path(server);
    keel_engine::db::loading(true);
    let loaded = load_held(server, locked, &path, merge);
    keel_engine::db::loading(false);
    match loaded {
        Ok(_) => {
            tracing::warn!("DB reloaded by DEBUG RELOAD");
            Ok(())
        }
        Err(e) => {
            tracing::error!("DEBUG RELOAD of {}: {e}", path.display());
            Err("ERR Error trying to load the RDB dump".into())
        }
    }
}

/// Loads `path` into the shards the caller holds (all of them), refusing
/// a key already present unless `replace`.
fn load_held(server: &Server, locked: &mut Locked<'_>, path: &Path, replace: bool) -> Result<Loaded, LoadError> {
    let limits = server.config.read().encoding;
    let lru_s = server.lru_s();
    let mut loaded = 0u64;
    let mut insert = |read: Read| match read {
        Read::Entry(e) => {
            loaded += 1;
            insert_held(server, locked, e, &limits, lru_s, replace)
        }
        Read::Reserve { db, keys, with_expiry } => {
            for shard in locked.iter_mut() {
                shard.db(db).reserve_when_empty(keys, with_expiry);
            }
            Ok(())
        }
        Read::Function(code) => load_function(server, &code, replace),
    };
    let read = read_dump(server, path, false, &mut insert)?;
    Ok(Loaded { keys: loaded, expired: read.expired, stream_db: read.stream_db })
}

/// A dataset read beside the serving one (a replica's diskless load):
/// shards of its own, not yet seen by any client, and its function
/// libraries' code.
pub struct Detached {
    shards: Vec<keel_engine::Shard>,
    functions: Vec<Vec<u8>>,
    pub loaded: Loaded,
}

/// Reads an RDB of `total` bytes (0: unknown) from `input` into a
/// [`Detached`] dataset, taking no lock: the serving dataset stays as it
/// is whatever happens. `input` is left just past the RDB's checksum.
pub fn load_detached<R: io::BufRead>(server: &Server, input: R, total: u64) -> Result<Detached, LoadError> {
    let reader = RdbReader::new(input).map_err(located)?;
    read_detached(server, reader, total, "the master's RDB")
}

/// [`load_detached`] from a file.
fn load_file_detached(server: &Server, path: &Path) -> Result<Detached, LoadError> {
    let (reader, total) = open_dump(path)?;
    read_detached(server, reader, total, &path.display().to_string())
}

fn read_detached<R: io::BufRead>(server: &Server, reader: RdbReader<R>, total: u64, source: &str) -> Result<Detached, LoadError> {
    let limits = server.config.read().encoding;
    let lru_s = server.lru_s();
    let databases = server.keyspace.databases();
    let mut shards: Vec<keel_engine::Shard> = (0..server.keyspace.shard_count()).map(|i| keel_engine::Shard::new(i, databases)).collect();
    let mut functions = Vec::new();
    let mut keys = 0u64;
    let mut sink = |read: Read| match read {
        Read::Entry(e) => {
            keys += 1;
            let (db, key, entry, flags) = build_entry(e, &limits, lru_s);
            insert_into(shards[server.keyspace.shard_of_key(&key)].db(db), &key, entry, flags, false)
        }
        Read::Reserve { db, keys, with_expiry } => {
            for shard in &mut shards {
                shard.db(db).reserve_when_empty(keys, with_expiry);
            }
            Ok(())
        }
        Read::Function(code) => {
            functions.push(code);
            Ok(())
        }
    };
    keel_engine::db::loading(true);
    let read = read_rdb(server, reader, total, source, false, &mut sink);
    keel_engine::db::loading(false);
    match read {
        Ok(read) => Ok(Detached { shards, functions, loaded: Loaded { keys, expired: read.expired, stream_db: read.stream_db } }),
        Err(e) => {
            // What was read goes off this thread: clients wait for it.
            crate::lazyfree::drop_async(shards, keys);
            Err(e)
        }
    }
}

/// Puts `detached` in place of the dataset, with every shard held by the
/// caller (the end of Redis's `swapdb` load): its function libraries
/// first, all or none, then each database's contents, so that watchers and
/// blocked clients hear of the change as from SWAPDB. A BGSAVE under way
/// shows the data from before: it is superseded, as by FLUSHALL. Returns
/// the old contents, for the caller to drop off the locks, and their keys.
pub fn install_held(server: &Server, locked: &mut Locked<'_>, detached: Detached) -> Result<(Vec<keel_engine::db::DbData>, u64), String> {
    let policy = crate::scripting::functions::RestorePolicy::Flush;
    server.scripts.functions.restore(server, &detached.functions, policy).map_err(|e| format!("function library: {e}"))?;
    server.rdb.superseded.store(true, Ordering::Relaxed);
    let now = unix_ms();
    let mut new = detached.shards;
    let (mut old, mut old_keys) = (Vec::new(), 0);
    for shard in locked.iter_mut() {
        let loaded = &mut new[shard.index];
        for (live, read) in shard.dbs_mut().iter_mut().zip(loaded.dbs_mut().iter_mut()) {
            old_keys += live.len() as u64;
            old.push(live.take_all());
            keel_engine::Db::swap_data(live, read, now);
        }
    }
    Ok((old, old_keys))
}

/// Tracking clients learn that every key went, as from a FLUSHALL.
pub fn forget_tracked(server: &Server, locked: &mut Locked<'_>) {
    if server.tracking.active() {
        crate::tracking::flushed(server, locked.iter_mut());
        crate::tracking::flush(server, None);
    }
}

/// A replica's full sync from disk (`replica.rs`): the file received from
/// the master, `received`, is renamed over `dbfilename` (as Redis's
/// replica does: a restart with `appendonly no` loads it), the dataset
/// emptied, then loaded from it. The shards are held only to empty them
/// and to install what was read: meanwhile clients are answered -LOADING
/// and the commands allowed while loading (INFO) are answered, as between
/// Redis's `processEventsWhileBlocked` calls. A BGSAVE under way shows the
/// data from before: it is superseded, as by FLUSHALL, so that it does not
/// replace the new file. The old data goes on the lazyfree thread under
/// `replica-lazy-flush`. An error leaves the dataset empty.
pub fn replace_from_file(server: &Server, received: &Path) -> Result<Loaded, String> {
    let path = dump_path(server);
    fs::rename(received, &path).map_err(|e| format!("rename {} to {}: {e}", received.display(), path.display()))?;
    // The rename must survive a crash, as the file it names does.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    let (mut old, mut old_keys) = (Vec::new(), 0);
    {
        let mut locked = server.keyspace.lock_all();
        server.rdb.superseded.store(true, Ordering::Relaxed);
        for shard in locked.iter_mut() {
            for d in shard.dbs_mut().iter_mut() {
                old_keys += d.len() as u64;
                old.push(d.take_all());
            }
        }
        forget_tracked(server, &mut locked);
    }
    if server.config.read().replica_lazy_flush {
        crate::lazyfree::drop_async(old, old_keys);
    } else {
        drop(old);
    }
    // The master's function libraries replace ours too.
    server.scripts.functions.flush();
    let detached = load_file_detached(server, &path).map_err(|e| format!("loading {}: {e}", path.display()))?;
    let loaded = detached.loaded;
    let (written, written_keys) = install_held(server, &mut server.keyspace.lock_all(), detached)?;
    // Nothing writes while loading; whatever did is not the master's.
    crate::lazyfree::drop_async(written, written_keys);
    Ok(loaded)
}
