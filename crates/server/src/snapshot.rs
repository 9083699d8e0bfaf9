//! RDB snapshots: SAVE, BGSAVE [SCHEDULE], and loading `dump.rdb` at start.
//!
//! A save is a forkless point-in-time snapshot (`keel_engine`'s
//! `snapshot.rs`), driven as the AOF rewrite drives one (`rewrite.rs`):
//! the `Server::snapshot_active` token is taken with a compare-exchange so
//! that one snapshot runs at a time, then `prepare_snapshot`,
//! `begin_snapshot` (the instant S), and shard by shard `snapshot_step`s of
//! [`STEP_ENTRIES`] entries under that shard's lock alone, converted to
//! `keel-rdb`'s model into a buffer; the buffer is encoded and written once
//! the lock is released. Keys that had expired at S are left out.
//!
//! The file goes to `temp-<pid>.rdb` in `dir`, is fsynced, and renamed over
//! `<dir>/<dbfilename>`; a failure deletes the temporary file and leaves the
//! old dump as it was.
//!
//! SAVE runs the snapshot on the calling worker's thread (other clients
//! keep being served by the other workers, and between steps). BGSAVE hands
//! it to the `keel-bgsave` thread. While an AOF rewrite holds the token,
//! BGSAVE SCHEDULE's save waits on that thread until it ends, and SAVE
//! waits on its own thread.
//!
//! Within a shard `snapshot_step` emits entries grouped by database in
//! increasing order, but shards follow one another, so a database can come
//! back after another: the file then has a `SELECTDB` each time the
//! database changes (valid RDB: Redis and `RdbReader` simply switch
//! database). Its `RESIZEDB` hint is the database's key count at S.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_engine::value::Entry;
use keel_rdb::{RdbItem, RdbReader, RdbValue, RdbWriter, WriteOptions};
use parking_lot::{Condvar, Mutex};

use crate::server::{unix_ms, Server};

/// Entries per `snapshot_step`, i.e. per hold of one shard's lock.
pub const STEP_ENTRIES: usize = 1000;
/// Buckets per `finish_rehash_step` before S.
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
    state: Mutex<State>,
    wake: Condvar,
    /// Keys loaded and expired keys skipped by the load at start
    /// (rdb_last_load_keys_loaded, rdb_last_load_keys_expired).
    pub last_load_keys_loaded: AtomicU64,
    pub last_load_keys_expired: AtomicU64,
}

#[derive(Default)]
struct State {
    requested: bool,
    stop: bool,
    started: Option<Instant>,
    /// Duration and outcome of the last BGSAVE.
    last: Option<(Duration, bool)>,
    /// Successful saves, SAVE and BGSAVE (rdb_saves).
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
}

impl Saver {
    pub fn info(&self) -> SaveInfo {
        let st = self.state.lock();
        SaveInfo {
            in_progress: self.in_progress.load(Ordering::Acquire),
            scheduled: self.scheduled.load(Ordering::Relaxed),
            current_s: st.started.map_or(-1, |t| t.elapsed().as_secs() as i64),
            last_s: st.last.map_or(-1, |(d, _)| d.as_secs() as i64),
            last_ok: st.last.is_none_or(|(_, ok)| ok),
            saves: st.saves,
        }
    }

    pub fn in_progress(&self) -> bool {
        self.in_progress.load(Ordering::Acquire)
    }

    /// Stops the thread (a save under way is aborted at its next step).
    pub fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_one();
    }

    fn stopping(&self) -> bool {
        self.state.lock().stop
    }

    fn count_save(&self) {
        self.state.lock().saves += 1;
    }
}

/// BGSAVE's outcome for the reply.
pub enum BgsaveReply {
    Started,
    Scheduled,
    AlreadyInProgress,
    OtherChild,
}

/// BGSAVE [SCHEDULE].
pub fn bgsave(server: &Server, schedule: bool) -> BgsaveReply {
    let saver = &server.rdb;
    if saver.in_progress() {
        return BgsaveReply::AlreadyInProgress;
    }
    let other = server.snapshot_active.load(Ordering::Acquire) || server.rewrite.in_progress();
    if saver.requested.load(Ordering::Acquire) {
        // Accepted, waiting for the rewrite: as Redis, SCHEDULE again is fine.
        return if schedule { BgsaveReply::Scheduled } else { BgsaveReply::OtherChild };
    }
    if other && !schedule {
        return BgsaveReply::OtherChild;
    }
    if saver.requested.swap(true, Ordering::AcqRel) {
        return BgsaveReply::AlreadyInProgress;
    }
    saver.scheduled.store(other, Ordering::Relaxed);
    if !other {
        // In progress from the reply on, for whoever polls INFO.
        saver.in_progress.store(true, Ordering::Release);
    }
    saver.state.lock().requested = true;
    saver.wake.notify_one();
    if other {
        BgsaveReply::Scheduled
    } else {
        BgsaveReply::Started
    }
}

/// SAVE: a synchronous save on the caller's thread. `Err` carries the
/// error reply.
pub fn save(server: &Server) -> Result<(), String> {
    loop {
        if server.rdb.in_progress() || server.rdb.requested.load(Ordering::Acquire) && !server.rdb.scheduled.load(Ordering::Relaxed) {
            return Err("ERR Background save already in progress".into());
        }
        if server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            break;
        }
        if server.shutdown.load(Ordering::Relaxed) {
            return Err("ERR the server is shutting down".into());
        }
        // An AOF rewrite holds the snapshot: wait for its end.
        std::thread::sleep(Duration::from_millis(5));
    }
    let result = save_to_file(server, &|| server.shutdown.load(Ordering::Relaxed));
    server.snapshot_active.store(false, Ordering::Release);
    match result {
        Ok(bytes) => {
            tracing::info!("DB saved on disk ({bytes} bytes)");
            Ok(())
        }
        Err(e) => {
            tracing::error!("SAVE failed: {e}");
            Err("ERR".into())
        }
    }
}

/// Starts the BGSAVE thread. It lives as long as the server; `stop` ends it.
pub fn spawn(server: Arc<Server>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("keel-bgsave".into()).spawn(move || run(&server))
}

fn run(server: &Server) {
    let saver = &server.rdb;
    loop {
        {
            let mut st = saver.state.lock();
            while !st.requested && !st.stop {
                saver.wake.wait(&mut st);
            }
            if st.stop {
                return;
            }
            st.requested = false;
        }
        // Wait for the token (an AOF rewrite may hold it).
        let mut got = false;
        while !saver.stopping() && !server.shutdown.load(Ordering::Relaxed) {
            if server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                got = true;
                break;
            }
            let mut st = saver.state.lock();
            saver.wake.wait_for(&mut st, Duration::from_millis(5));
        }
        if !got {
            saver.scheduled.store(false, Ordering::Relaxed);
            saver.requested.store(false, Ordering::Release);
            continue;
        }
        saver.scheduled.store(false, Ordering::Relaxed);
        saver.in_progress.store(true, Ordering::Release);
        saver.state.lock().started = Some(Instant::now());
        tracing::info!("Background saving started");
        let result = save_to_file(server, &|| saver.stopping() || server.shutdown.load(Ordering::Relaxed));
        server.snapshot_active.store(false, Ordering::Release);
        let ok = match result {
            Ok(bytes) => {
                tracing::info!("Background saving terminated with success ({bytes} bytes)");
                true
            }
            Err(e) => {
                tracing::error!("Background saving error: {e}");
                false
            }
        };
        {
            let mut st = saver.state.lock();
            let took = st.started.take().map_or(Duration::ZERO, |t| t.elapsed());
            st.last = Some((took, ok));
        }
        // In this order: whoever sees the save ended may SAVE at once.
        saver.requested.store(false, Ordering::Release);
        saver.in_progress.store(false, Ordering::Release);
    }
}

/// One save with the token held: snapshot, temp file, fsync, rename. On
/// success resets `dirty`, sets `lastsave_s`, counts the save, and returns
/// the file's size.
fn save_to_file(server: &Server, stop: &dyn Fn() -> bool) -> Result<u64, String> {
    let (dir, name, options) = {
        let c = server.config.read();
        let options = WriteOptions {
            encode: crate::rdb::encode_options(&c.encoding, c.rdbcompression),
            checksum: c.rdbchecksum,
            ..WriteOptions::default()
        };
        (c.dir.clone(), c.dbfilename.clone(), options)
    };
    let temp = dir.join(format!("temp-{}.rdb", std::process::id()));
    let target = dir.join(&name);
    // `dirty` as it was at S is what the file covers.
    let mut dirty_at_s = 0;
    let result = write_snapshot(server, &temp, options, stop, &mut dirty_at_s);
    match result {
        Ok(bytes) => {
            if let Err(e) = fs::rename(&temp, &target) {
                let _ = fs::remove_file(&temp);
                return Err(format!("rename {} to {}: {e}", temp.display(), target.display()));
            }
            if let Ok(d) = File::open(&dir) {
                let _ = d.sync_all();
            }
            server.dirty.fetch_sub(dirty_at_s.min(server.dirty.load(Ordering::Relaxed)), Ordering::Relaxed);
            server.lastsave_s.store(unix_ms() / 1000, Ordering::Relaxed);
            server.rdb.count_save();
            Ok(bytes)
        }
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}

fn write_snapshot(
    server: &Server,
    temp: &Path,
    options: WriteOptions,
    stop: &dyn Fn() -> bool,
    dirty_at_s: &mut u64,
) -> Result<u64, String> {
    let file = File::create(temp).map_err(|e| format!("create {}: {e}", temp.display()))?;
    let keyspace = &server.keyspace;
    keyspace.prepare_snapshot(PREPARE_BUDGET);
    let (s_ms, counts) = keyspace.begin_snapshot(|all| {
        let dbs = keyspace.databases();
        let mut counts = vec![(0u64, 0u64); dbs];
        for shard in all.iter_mut() {
            for (db, count) in counts.iter_mut().enumerate() {
                let d = shard.db(db);
                count.0 += d.len() as u64;
                count.1 += d.expires_len() as u64;
            }
        }
        *dirty_at_s = server.dirty.load(Ordering::Relaxed);
        (unix_ms(), counts)
    });
    let result = stream(server, file, options, s_ms, &counts, stop);
    if result.is_err() {
        for index in 0..keyspace.shard_count() {
            let leftovers = keyspace.lock_one(index).shard(index).abort_snapshot();
            drop(leftovers);
        }
    }
    result
}

fn stream(
    server: &Server,
    file: File,
    options: WriteOptions,
    s_ms: u64,
    counts: &[(u64, u64)],
    stop: &dyn Fn() -> bool,
) -> Result<u64, String> {
    let io_err = |e: io::Error| e.to_string();
    let keyspace = &server.keyspace;
    let mut w = RdbWriter::new(BufWriter::with_capacity(256 << 10, file), options).map_err(io_err)?;
    let mut current_db: Option<usize> = None;
    let mut buf: Vec<(usize, Vec<u8>, RdbValue, Option<u64>)> = Vec::with_capacity(STEP_ENTRIES);
    for index in 0..keyspace.shard_count() {
        loop {
            if stop() {
                return Err("the server is shutting down".into());
            }
            let done = {
                let mut locked = keyspace.lock_one(index);
                locked.shard(index).snapshot_step(STEP_ENTRIES, |db, key, entry: &Entry| {
                    if entry.is_expired(s_ms) {
                        return;
                    }
                    let expire = entry.has_expiry().then_some(entry.expire_at_ms);
                    buf.push((db, key.to_vec(), crate::rdb::to_rdb(&entry.value), expire));
                })
            };
            for (db, key, value, expire) in buf.drain(..) {
                if current_db != Some(db) {
                    let (keys, expires) = counts.get(db).copied().unwrap_or((0, 0));
                    w.select_db(db as u64, keys, expires).map_err(io_err)?;
                    current_db = Some(db);
                }
                w.write_key(&key, &value, expire).map_err(io_err)?;
            }
            if done {
                break;
            }
        }
    }
    let bytes = w.bytes_written() + 9;
    let out = w.finish().map_err(io_err)?;
    let file = out.into_inner().map_err(|e| e.error().to_string())?;
    file.sync_all().map_err(io_err)?;
    Ok(bytes)
}

/// Where `dump.rdb` is, from the configuration.
pub fn dump_path(server: &Server) -> PathBuf {
    let c = server.config.read();
    c.dir.join(&c.dbfilename)
}

/// Loads `path` into the (empty) keyspace: keys that have expired are
/// skipped. Returns (keys loaded, keys expired), or an error naming the
/// file and the offset.
pub fn load(server: &Server, path: &Path) -> Result<(u64, u64), String> {
    let file = File::open(path).map_err(|e| format!("Fatal error loading the DB {}: {e}", path.display()))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    server.load_progress.total_bytes.store(total, Ordering::Relaxed);
    let fail = |e: keel_rdb::RdbError| match e.offset() {
        Some(off) => format!("Fatal error loading the DB {} at offset {off}: {e}", path.display()),
        None => format!("Fatal error loading the DB {}: {e}", path.display()),
    };
    let mut reader = RdbReader::new(BufReader::with_capacity(256 << 10, file)).map_err(fail)?;
    let limits = server.config.read().encoding;
    let now = unix_ms();
    let lru = server.lru_s();
    let (mut loaded, mut expired) = (0u64, 0u64);
    while let Some(item) = reader.next_item().map_err(fail)? {
        let RdbItem::Entry(e) = item else { continue };
        if e.expire_at_ms.is_some_and(|at| at <= now) {
            expired += 1;
            continue;
        }
        if e.db as usize >= server.keyspace.databases() {
            return Err(format!(
                "Fatal error loading the DB {} at offset {}: database {} out of range",
                path.display(),
                reader.offset(),
                e.db
            ));
        }
        let access_s = lru.saturating_sub(e.idle_s.unwrap_or(0).min(u64::from(u32::MAX)) as u32);
        let mut entry = Entry::new(crate::rdb::from_rdb(e.value, &limits), access_s);
        entry.expire_at_ms = e.expire_at_ms.unwrap_or(0);
        let index = server.keyspace.shard_of_key(&e.key);
        server.keyspace.lock_one(index).shard(index).db(e.db as usize).insert_entry(&e.key, entry);
        loaded += 1;
        if loaded % 1024 == 0 {
            server.load_progress.loaded_bytes.store(reader.offset(), Ordering::Relaxed);
        }
    }
    server.load_progress.loaded_bytes.store(total, Ordering::Relaxed);
    server.rdb.last_load_keys_loaded.store(loaded, Ordering::Relaxed);
    server.rdb.last_load_keys_expired.store(expired, Ordering::Relaxed);
    Ok((loaded, expired))
}
