//! The writer thread (group commit) and the everysec fsync thread.
//!
//! # Flush pipelining
//!
//! Appenders copy their encoded records into `Gather::buf` under one short
//! mutex hold and go on. The writer's state (the file, what is written,
//! what is retained) is a [`Writer`] behind one mutex, held by the writer
//! thread while it takes the gathered bytes and cycles, never while it
//! waits. The writer thread loops:
//!
//! 1. under `always`, let the sync gap pass since the last fdatasync ended
//!    (`JournalConfig::sync_gap`); then sleep on `writer_cv` until there is
//!    something to do (new bytes, a forced sync, shutdown, or the time of a
//!    retry after a failure);
//! 2. seal `Gather::buf` into a batch (one swap for a spare buffer under
//!    the lock) and take it, after any batches appenders sealed meanwhile:
//!    together, everything appended since the last time; enter the
//!    scheduling class asked for (`JournalConfig::writer_batch_class`);
//! 3. one `write(2)` per batch (more on short writes, after a failure, or
//!    when appenders sealed batches meanwhile), then, for `always`, one
//!    `fdatasync(2)`;
//! 4. publish `durable` (Release) and call `on_durable`.
//!
//! While the writer is in 3, appenders fill the next batch: that is the group
//! commit, and its batch size grows by itself with the disk's latency.
//!
//! Under `everysec` and `no` a worker also takes the writer's state, at the
//! end of each loop turn, to write what is gathered before it sends the
//! turn's replies ([`crate::Journal::write_through`], Redis's write in
//! `beforeSleep`): steps 2 and 3 without a sync. It never waits for the
//! disk: while the writer thread's cycle may (`Inner::writer_may_block`:
//! a sync, a repair, a switch of files), and for any work the writer thread
//! must do first, it leaves the bytes to that thread. A write that fails on
//! a worker is the writer thread's to retry (`Gather::replan` wakes it). An
//! appender that brings `Gather::buf` past [`SEAL_AT`] seals it into a batch
//! of its own and goes on in an emptied buffer the writer gave back: a
//! buffer that grew to tens of megabytes (a rewrite's switch syncing a
//! second's worth of everysec writes) was copied at each doubling and its
//! fresh pages faulted in, a fifth of the worker's time under 6000-byte
//! SETs.
//!
//! # What is kept in memory, and why
//!
//! A batch stays in `Writer::retained` until it is known to be on disk: for
//! `always` until its fdatasync returned, for `everysec` until the fsync
//! thread's next fdatasync covering it returned (at most
//! `Tuning::retain_max_bytes`, after which the oldest written bytes are let go
//! and a later fsync failure can only be retried, as Redis does), for `no`
//! until it is written. That is what makes failures survivable:
//!
//! * a failed or short write: the file is truncated back to the end of the
//!   last complete write (Redis's `ftruncate` in `flushAppendOnlyFile`) and
//!   the whole batch is written again at the next retry;
//! * a failed fdatasync: after one, Linux may have dropped the dirty pages
//!   and a second fdatasync can succeed without the data being on disk
//!   ("fsyncgate"). So everything after the last size known to be synced
//!   is written again, in place (`LogFile::rewrite_at`), and synced again.
//!   Not cut off and appended again: under `everysec` and `no` those bytes
//!   are acknowledged once written, and a process crash while the disk
//!   refuses the new writes would have lost them with the cut.
//!
//! While failing, `health()` is `Err` (the server refuses writes), durable
//! stops advancing (nothing new is acknowledged), appenders still never
//! block, and the writer retries every `Tuning::retry_interval`.
//!
//! # Switching files (AOF rewrite)
//!
//! A rewrite starts a new incr file at an LSN `at` chosen by an appender
//! under the `Gather` lock (`Journal::start_rewrite`): the buffer gathered
//! so far is sealed into a batch of its own (so a batch never straddles
//! `at`) and a [`Switch`] is queued. The writer takes both in order. When
//! everything below `at` is written, and before any byte above it is, it
//! swaps files. Under `always` it first fdatasyncs the old file, with the
//! fsync thread paused so that it never syncs the wrong one; a failure on
//! the way (the last writes to the old file, its final sync) is handled as
//! any other, in the old file, and the switch waits for the retry that
//! succeeds. Under `everysec` and `no` nothing waits for that sync, as
//! Redis hands its old incr file to a background fsync-and-close: the old
//! file joins `Inner::closing`. The fsync thread syncs it at once (the
//! current file keeps its own pace: once a second under `everysec`, never
//! under `no`); any sync of a later file, the fsync thread's or the
//! writer's, syncs it first, so that no file is on disk without the ones
//! before it. Workers so write through across a switch, and a process
//! crash during one loses no acknowledged write (it did while the switch
//! synced up to a second's worth of writes first). When such a sync fails,
//! the writer writes the old file's unsynced bytes again from memory and
//! syncs it ([`Writer::repair_closing`]) before it goes on with the
//! current file.
//! LSNs go on across files; each file knows the LSN of its first byte,
//! which is how a repair finds its offsets.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::file::LogFile;
use crate::stats::StatsCells;
use crate::{FsyncPolicy, Lsn};

/// Appenders seal the gathered buffer into a batch once it holds this much.
pub(crate) const SEAL_AT: usize = 1 << 20;
/// A written buffer is given back to appenders for reuse only up to this
/// capacity (one huge record's must not be pinned), and at most
/// `SPARES_MAX` are kept.
const SPARE_CAPACITY_MAX: usize = 4 << 20;
const SPARES_MAX: usize = 8;
/// Redis counts `aof_delayed_fsync` when a background fsync has been running
/// this long and writes go on anyway.
const DELAYED_FSYNC_AFTER: Duration = Duration::from_secs(2);

/// What appenders share with the writer, under `Inner::gather`.
pub(crate) struct Gather {
    /// Batches cut off by a [`Switch`] or at [`SEAL_AT`], in order, before
    /// `buf`.
    pub(crate) sealed: Vec<Batch>,
    /// Emptied buffers, for `buf` to be swapped for.
    pub(crate) spares: Vec<Vec<u8>>,
    /// Files to switch to, each at its LSN, in order.
    pub(crate) switches: VecDeque<Switch>,
    /// Records appended since the writer's last swap.
    pub(crate) buf: Vec<u8>,
    /// Records (SELECTs not counted) in `buf`.
    pub(crate) records: u64,
    /// LSN of `buf[0]`.
    pub(crate) start: Lsn,
    /// Database of the last record, `None` until the first: a SELECT is
    /// emitted whenever the next record's differs.
    pub(crate) selected_db: Option<usize>,
    /// The second of the last timestamp annotation (`Inner::timestamps`).
    pub(crate) last_timestamp_s: u64,
    /// The writer waits on `writer_cv`: whoever adds work must notify it.
    pub(crate) writer_sleeping: bool,
    /// Another thread changed the writer's state (a worker's write
    /// failed): the writer thread must look again before it waits.
    pub(crate) replan: bool,
    pub(crate) shutdown: bool,
    /// `flush_and_sync` wants everything below this written and synced.
    pub(crate) sync_request: Lsn,
}

impl Gather {
    /// Moves `buf`, if it holds anything, into a batch of its own at the
    /// end of `sealed`, and goes on in a spare buffer.
    pub(crate) fn seal(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let fresh = self.spares.pop().unwrap_or_default();
        let bytes = std::mem::replace(&mut self.buf, fresh);
        let batch = Batch { start: self.start, records: self.records, bytes };
        self.start = batch.end();
        self.records = 0;
        self.sealed.push(batch);
    }
}

/// The everysec fsync thread's state, under `Inner::syncer`.
#[derive(Default)]
pub(crate) struct Syncer {
    /// The writer is repairing the file (or syncing it itself): no fsync.
    pub(crate) paused: bool,
    pub(crate) in_flight_since: Option<Instant>,
    pub(crate) shutdown: bool,
}

/// A new incr file the writer moves to once everything below `at` is in
/// the old one.
pub(crate) struct Switch {
    pub(crate) at: Lsn,
    pub(crate) file: Arc<dyn LogFile>,
    pub(crate) name: String,
}

/// The file the writer appends to and the LSN of its first byte.
pub(crate) struct Segment {
    pub(crate) file: Arc<dyn LogFile>,
    pub(crate) start: Lsn,
}

/// A file the writer has moved on from without syncing it (`everysec`,
/// `no`): it holds `[start, end)`, to be fdatasync'd before any file after
/// it (see the module docs).
pub(crate) struct Closing {
    pub(crate) file: Arc<dyn LogFile>,
    pub(crate) start: Lsn,
    pub(crate) end: Lsn,
}

pub(crate) struct Inner {
    /// The [`FsyncPolicy`], changeable at run time (`Journal::set_fsync`).
    /// The writer reads it once per cycle.
    pub(crate) policy: AtomicU8,
    /// `no-appendfsync-on-rewrite` while a save or rewrite runs: nothing is
    /// fdatasync'd unless asked for, and under `Always` replies wait for
    /// the write alone (`Journal::suspend_fsync`).
    pub(crate) fsync_suspended: AtomicBool,
    /// Records are preceded by a `#TS:` annotation whenever the second
    /// changed since the last one, as Redis's `aof-timestamp-enabled`.
    pub(crate) timestamps: AtomicBool,
    /// [`crate::JournalConfig::sync_gap`], in microseconds.
    pub(crate) sync_gap_us: AtomicU64,
    /// DEBUG AOF-FLUSH-SLEEP: microseconds to sleep before each cycle's
    /// writes, for tests that look at the file between a write and its reply.
    pub(crate) flush_sleep_us: AtomicU64,
    /// The writer thread's cycle may wait for the disk, not only for
    /// `write(2)`: a worker's [`crate::Journal::write_through`] does not
    /// wait for it then.
    pub(crate) writer_may_block: AtomicBool,
    /// [`crate::JournalConfig::writer_batch_class`].
    pub(crate) writer_batch_class: AtomicBool,
    pub(crate) retry_interval: Duration,
    pub(crate) everysec_interval: Duration,
    pub(crate) backlog_max_bytes: u64,
    pub(crate) retain_max_bytes: u64,
    /// The file the everysec thread syncs: the writer's current one,
    /// replaced under `syncer`'s lock.
    pub(crate) sync_file: Mutex<Arc<dyn LogFile>>,
    /// Files left behind by switches under `everysec` and `no`, oldest
    /// first, each synced (by the fsync thread, or the writer's own sync)
    /// before the files after it. Added to under `syncer`'s lock; taken
    /// from by whoever syncs (the fsync thread, or the writer with it
    /// paused).
    pub(crate) closing: Mutex<VecDeque<Closing>>,
    /// Name of the incr file being appended to (for messages).
    pub(crate) file_name: Mutex<String>,
    /// The LSN of the last switch the writer has completed: everything
    /// below it is written in the files before, and synced unless they
    /// are still in `closing`.
    pub(crate) switched: AtomicU64,

    pub(crate) gather: Mutex<Gather>,
    pub(crate) writer_cv: Condvar,

    pub(crate) appended: AtomicU64,
    /// Everything below is in the file (in the kernel's page cache).
    pub(crate) written: AtomicU64,
    /// Everything below has been fdatasync'd.
    pub(crate) synced: AtomicU64,
    /// What replies may wait for: `synced` for always, `written` otherwise.
    pub(crate) durable: AtomicU64,

    pub(crate) healthy: AtomicBool,
    pub(crate) last_error: Mutex<Option<String>>,
    pub(crate) on_durable: OnceLock<Box<dyn Fn(Lsn) + Send + Sync>>,
    pub(crate) on_latency: OnceLock<Box<dyn Fn(&'static str, Duration) + Send + Sync>>,
    /// `flush_and_sync` waits here; the writer notifies after every cycle.
    pub(crate) progress: Mutex<()>,
    pub(crate) progress_cv: Condvar,

    pub(crate) syncer: Mutex<Syncer>,
    pub(crate) syncer_cv: Condvar,
    /// Set by the fsync thread when an fdatasync failed; the writer repairs.
    pub(crate) syncer_failed: AtomicBool,

    pub(crate) stats: StatsCells,
}

impl Inner {
    pub(crate) fn policy(&self) -> FsyncPolicy {
        FsyncPolicy::from_u8(self.policy.load(Ordering::Acquire))
    }

    fn report_latency(&self, event: &'static str, took: Duration) {
        if let Some(f) = self.on_latency.get() {
            f(event, took);
        }
    }

    /// Records a failure: `health()` is `Err` from now on. `from_syncer`
    /// also flags the file for repair by the writer (under the same lock as
    /// [`Inner::clear_error`], so a repair never hides a newer failure).
    pub(crate) fn set_error(&self, what: &str, e: &io::Error, from_syncer: bool) {
        let msg = format!("{what} {}: {e}", self.file_name.lock());
        let mut last = self.last_error.lock();
        if from_syncer {
            self.syncer_failed.store(true, Ordering::Release);
        }
        if self.healthy.swap(false, Ordering::AcqRel) {
            tracing::error!("journal: {msg}; refusing writes until a retry succeeds");
        }
        *last = Some(msg);
    }

    /// Back to healthy after a successful retry, unless the fsync thread has
    /// failed meanwhile.
    fn clear_error(&self) {
        let mut last = self.last_error.lock();
        if self.syncer_failed.load(Ordering::Acquire) {
            return;
        }
        *last = None;
        if !self.healthy.swap(true, Ordering::AcqRel) {
            tracing::warn!("journal: writing to {} works again", self.file_name.lock());
        }
    }

    fn notify_progress(&self) {
        let _g = self.progress.lock();
        self.progress_cv.notify_all();
    }

    /// The oldest file in `closing`, which ends at `end`, is synced.
    fn closed_through(&self, end: Lsn) {
        self.closing.lock().pop_front();
        self.synced.fetch_max(end, Ordering::AcqRel);
    }

    pub(crate) fn wake_writer(&self) {
        let mut g = self.gather.lock();
        g.writer_sleeping = false;
        drop(g);
        self.writer_cv.notify_one();
    }
}

pub(crate) struct Batch {
    pub(crate) start: Lsn,
    pub(crate) bytes: Vec<u8>,
    pub(crate) records: u64,
}

impl Batch {
    pub(crate) fn end(&self) -> Lsn {
        self.start + self.bytes.len() as u64
    }
}

pub(crate) struct Writer {
    inner: Arc<Inner>,
    /// The file being written.
    cur: Segment,
    /// Switches taken from `Gather`, not yet made.
    switches: VecDeque<Switch>,
    /// Batches not yet known to be on disk (see the module docs), in order.
    retained: VecDeque<Batch>,
    written: Lsn,
    synced: Lsn,
    /// While failing: when to try again.
    retry_at: Option<Instant>,
    /// After a failed fdatasync: write the file's bytes from this LSN to
    /// `written` again, in place, before the next sync.
    rewrite_from: Option<Lsn>,
    /// An fdatasync failed: sync again before anything counts as synced.
    must_resync: bool,
    last_delayed_count: Option<Instant>,
    /// When the last successful fdatasync returned.
    last_sync_end: Option<Instant>,
    /// Records were appended while the last cycle wrote and synced.
    appends_went_on: bool,
    /// Buffers written and let go since the last `gather_next`, to be
    /// handed to `Gather::spares`.
    emptied: Vec<Vec<u8>>,
    /// Under `everysec`/`no`, after a write the writer lingers briefly
    /// without asking to be woken, so that appenders under load do not pay
    /// a wake-up (a futex syscall) per record and each write(2) carries many
    /// records, as Redis writes once per event-loop turn.
    linger: bool,
    /// The scheduling class this thread is in: `Some(true)` for
    /// `SCHED_BATCH`, `None` before the first cycle sets it.
    batch_class: Option<bool>,
}

/// The writer thread's body. It holds the writer's state only while it
/// takes the gathered bytes and runs a cycle, never while it waits, so
/// that a worker can write through in between.
pub(crate) fn run(io: Arc<Mutex<Writer>>) {
    let inner = Arc::clone(&io.lock().inner);
    loop {
        let (gap, plan) = {
            let mut w = io.lock();
            (w.sync_gap_left(), w.wait_plan())
        };
        if let Some(gap) = gap {
            std::thread::sleep(gap);
        }
        let Some((shutdown, sync_request)) = wait_for_work(&inner, plan) else { continue };
        let mut w = io.lock();
        w.take_gathered(&mut inner.gather.lock());
        // After the wait, so that a change applies to the cycle of the
        // first record appended after it.
        w.apply_batch_class();
        inner.writer_may_block.store(w.may_block(sync_request), Ordering::Release);
        w.cycle(sync_request);
        inner.writer_may_block.store(false, Ordering::Release);
        if shutdown {
            w.finish();
            return;
        }
    }
}

/// What the writer thread knew of its own state when it went to wait.
struct WaitPlan {
    /// While failing: when to try again.
    retry_at: Option<Instant>,
    linger: bool,
    /// Under `everysec`, written batches wait in memory for the fsync
    /// thread: wake now and then to let go of those it synced.
    let_go_later: bool,
    synced: Lsn,
}

/// Waits until there is something to do: new bytes, a switch, a requested
/// sync, a repair, shutdown, the time of a retry, or (`let_go_later`) the
/// fsync thread's interval. Returns whether to shut down, and the sync
/// asked for; `None` if the plan is stale (`Gather::replan`).
fn wait_for_work(inner: &Inner, mut plan: WaitPlan) -> Option<(bool, Lsn)> {
    let mut g = inner.gather.lock();
    loop {
        if std::mem::take(&mut g.replan) {
            return None;
        }
        if let Some(at) = plan.retry_at {
            if g.shutdown || Instant::now() >= at {
                break;
            }
            inner.writer_cv.wait_until(&mut g, at);
            continue;
        }
        let syncer_failed = inner.syncer_failed.load(Ordering::Acquire);
        let switching = !g.switches.is_empty() || !g.sealed.is_empty();
        if !g.buf.is_empty() || switching || g.shutdown || g.sync_request > plan.synced || syncer_failed {
            break;
        }
        if std::mem::take(&mut plan.linger) {
            inner.writer_cv.wait_for(&mut g, LINGER);
            continue;
        }
        g.writer_sleeping = true;
        if plan.let_go_later {
            inner.writer_cv.wait_for(&mut g, inner.everysec_interval);
            g.writer_sleeping = false;
            break;
        }
        inner.writer_cv.wait(&mut g);
        g.writer_sleeping = false;
    }
    Some((g.shutdown, g.sync_request))
}

/// How long the writer gathers after a write when no reply waits for it.
const LINGER: std::time::Duration = std::time::Duration::from_micros(500);

/// `write(2)` until all of `buf` is written; on failure also says how many
/// bytes did reach the file.
pub(crate) fn write_all(file: &dyn LogFile, mut buf: &[u8]) -> Result<(), (io::Error, u64)> {
    let mut done = 0u64;
    while !buf.is_empty() {
        match file.append(buf) {
            Ok(0) => return Err((io::Error::new(io::ErrorKind::WriteZero, "write returned 0"), done)),
            Ok(n) => {
                done += n as u64;
                buf = &buf[n..];
            }
            Err(e) => return Err((e, done)),
        }
    }
    Ok(())
}

impl Writer {
    pub(crate) fn new(inner: Arc<Inner>, start: Lsn, cur: Segment) -> Writer {
        Writer {
            inner,
            cur,
            switches: VecDeque::new(),
            retained: VecDeque::new(),
            written: start,
            synced: start,
            retry_at: None,
            rewrite_from: None,
            must_resync: false,
            last_delayed_count: None,
            last_sync_end: None,
            appends_went_on: false,
            emptied: Vec::new(),
            linger: false,
            batch_class: None,
        }
    }

    fn offset(&self, lsn: Lsn) -> u64 {
        debug_assert!(lsn >= self.cur.start, "offset of an LSN before the current file");
        lsn - self.cur.start
    }

    /// The end of the writer thread: the space written ahead cut off, or
    /// what could not be written reported.
    fn finish(&self) {
        if self.retry_at.is_none() {
            if let Err(e) = self.cur.file.release_space() {
                tracing::warn!("journal: cutting pre-written space off {}: {e}", self.inner.file_name.lock());
            }
        } else {
            tracing::error!(
                "journal: shutting down with {} bytes not on disk: {}",
                self.inner.appended.load(Ordering::Acquire).saturating_sub(self.synced),
                self.inner.last_error.lock().clone().unwrap_or_default()
            );
        }
        self.inner.notify_progress();
    }

    /// What the writer thread waits for next (see [`wait_for_work`]).
    fn wait_plan(&mut self) -> WaitPlan {
        WaitPlan {
            retry_at: self.retry_at,
            linger: std::mem::take(&mut self.linger),
            let_go_later: self.inner.policy() == FsyncPolicy::EverySec && !self.retained.is_empty(),
            synced: self.synced,
        }
    }

    /// Moves the gathered bytes (and switches) into `retained`, and hands
    /// emptied buffers back to appenders.
    fn take_gathered(&mut self, g: &mut Gather) {
        let room = SPARES_MAX.saturating_sub(g.spares.len());
        g.spares.extend(self.emptied.drain(..).take(room));
        if !g.buf.is_empty() {
            self.linger = self.inner.policy() != FsyncPolicy::Always;
            g.seal();
        }
        self.retained.extend(g.sealed.drain(..));
        self.switches.extend(g.switches.drain(..));
    }

    /// Whether the cycle about to run may wait for the disk (a sync, the
    /// fsync thread, a repair, a switch of files), not only `write(2)`.
    fn may_block(&self, sync_request: Lsn) -> bool {
        self.inner.policy() == FsyncPolicy::Always
            || self.retry_at.is_some()
            || self.rewrite_from.is_some()
            || self.must_resync
            || self.switch_may_block(self.switches.len())
            || sync_request > self.synced
            || self.inner.syncer_failed.load(Ordering::Acquire)
            || self.inner.flush_sleep_us.load(Ordering::Relaxed) > 0
    }

    /// Whether `queued` switches may make a cycle wait for the disk: only
    /// under `always`; otherwise the old file's sync is the fsync thread's
    /// ([`Writer::switch_if_due`]).
    fn switch_may_block(&self, queued: usize) -> bool {
        queued > 0 && self.inner.policy() == FsyncPolicy::Always
    }

    /// [`crate::Journal::write_through`] with the writer's state held:
    /// writes what is gathered as the writer thread's cycle does, unless
    /// that cycle could wait for the disk ([`Writer::may_block`]: the
    /// writer thread's work, a retry, a repair, a switch of files that
    /// syncs, a requested sync) or the journal is closing.
    pub(crate) fn write_through(&mut self) {
        self.synced = self.synced.max(self.inner.synced.load(Ordering::Acquire));
        let inner = Arc::clone(&self.inner);
        let mut g = inner.gather.lock();
        if g.shutdown || self.switch_may_block(g.switches.len()) || self.may_block(g.sync_request) {
            return;
        }
        self.take_gathered(&mut g);
        drop(g);
        self.cycle(0);
    }

    fn fail(&mut self, what: &str, e: &io::Error) {
        self.inner.set_error(what, e, false);
        self.retry_at = Some(Instant::now() + self.inner.retry_interval);
        self.inner.notify_progress();
        // A worker's write may have failed while the writer thread sleeps:
        // it must come and retry.
        self.inner.gather.lock().replan = true;
        self.inner.writer_cv.notify_one();
    }

    /// A failed fdatasync (or repair of one): recorded as [`Writer::fail`]
    /// does, then counted, so that whoever sees the count sees the failure.
    fn fail_sync(&mut self, what: &str, e: &io::Error) {
        self.fail(what, e);
        self.inner.stats.fsync_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// First LSN still held in memory (or `written` if none).
    fn retained_from(&self) -> Lsn {
        self.retained.front().map_or(self.written, |b| b.start)
    }

    /// After an fdatasync failure: write everything after the last synced
    /// size again, in place, if it is all still in memory. When what is
    /// unsynced starts in a file in `closing`, that file comes first
    /// ([`Writer::repair_closing`]), and this is planned again after it.
    fn plan_resync(&mut self) {
        self.must_resync = true;
        if self.synced >= self.cur.start && self.retained_from() <= self.synced && self.written > self.synced {
            self.rewrite_from = Some(self.synced);
        }
    }

    /// Writes `[from, to)` of `file`, which starts at `start`, again from
    /// the retained batches, which hold all of it.
    fn rewrite(&self, file: &dyn LogFile, start: Lsn, from: Lsn, to: Lsn) -> io::Result<()> {
        for b in &self.retained {
            let (lo, hi) = (b.start.max(from), b.end().min(to));
            if lo < hi {
                file.rewrite_at(lo - start, &b.bytes[(lo - b.start) as usize..(hi - b.start) as usize])?;
            }
        }
        Ok(())
    }

    /// Unconditional, whatever the policy: it may change between a pause
    /// and its resume.
    fn pause_syncer(&self) {
        let mut s = self.inner.syncer.lock();
        s.paused = true;
        while s.in_flight_since.is_some() {
            self.inner.syncer_cv.wait(&mut s);
        }
    }

    fn resume_syncer(&self) {
        let mut s = self.inner.syncer.lock();
        s.paused = false;
        self.inner.syncer_failed.store(false, Ordering::Release);
        // Only an everysec fsync thread has anything to do now. Under
        // `always` this runs once per batch, and waking the thread only
        // for it to sleep again cost two context switches per batch on the
        // writer's core. The policy is read under the lock `set_fsync`
        // notifies under, so a change to everysec is not missed.
        if self.inner.policy() == FsyncPolicy::EverySec {
            self.inner.syncer_cv.notify_all();
        }
    }

    /// One round of I/O: repair, write, sync, publish.
    fn cycle(&mut self, sync_request: Lsn) {
        let inner = Arc::clone(&self.inner);
        let started = Instant::now();
        let policy = inner.policy();

        if policy != FsyncPolicy::Always {
            self.synced = self.synced.max(inner.synced.load(Ordering::Acquire));
            if inner.syncer_failed.load(Ordering::Acquire) && !self.must_resync {
                // The fsync thread has paused itself: the file is ours.
                self.pause_syncer();
                self.plan_resync();
            }
        }

        if self.must_resync && self.synced < self.cur.start {
            if let Err(e) = self.repair_closing() {
                return self.fail_sync("repairing an earlier file after", &e);
            }
            self.plan_resync();
        }

        if let Some(from) = self.rewrite_from {
            if let Err(e) = self.rewrite(&*self.cur.file, self.cur.start, from, self.written) {
                inner.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                return self.fail("writing unsynced bytes again to", &e);
            }
            self.rewrite_from = None;
        }

        let flush_sleep = inner.flush_sleep_us.load(Ordering::Relaxed);
        if flush_sleep > 0 && self.retained.back().is_some_and(|b| b.end() > self.written) {
            std::thread::sleep(Duration::from_micros(flush_sleep));
        }
        let (mut bytes, mut records) = (0u64, 0u64);
        let writing = Instant::now();
        for i in 0..self.retained.len() {
            if !self.switch_if_due() {
                return;
            }
            let b = &self.retained[i];
            if b.end() <= self.written {
                continue;
            }
            let from = (self.written - b.start) as usize;
            let (end, len, recs) = (b.end(), b.bytes.len() - from, b.records);
            let file = &*self.cur.file;
            if let Err((e, partial)) = write_all(file, &b.bytes[from..]) {
                inner.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                if partial > 0 {
                    // Take the partial write back off, as Redis does; if even
                    // that fails, the bytes are a correct prefix: keep them.
                    if file.set_len(self.offset(self.written)).is_err() {
                        self.written += partial;
                        inner.written.store(self.written, Ordering::Release);
                    }
                }
                return self.fail("writing", &e);
            }
            self.written = end;
            bytes += len as u64;
            records += recs;
            inner.written.store(self.written, Ordering::Release);
        }
        if bytes > 0 {
            inner.report_latency("aof-write", writing.elapsed());
        }
        if !self.switch_if_due() {
            return;
        }
        if bytes > 0 && policy == FsyncPolicy::EverySec {
            self.count_delayed_fsync();
        }

        // Suspended, only an explicit request (shutdown, `appendonly no`)
        // syncs, as Redis flushes then whatever `no-appendfsync-on-rewrite`.
        let suspended = inner.fsync_suspended.load(Ordering::Acquire);
        let requested = sync_request > self.synced;
        let want_sync = self.written > self.synced
            && match policy {
                FsyncPolicy::Always => !suspended || requested,
                _ => requested,
            };
        let resync = self.must_resync;
        if want_sync || resync {
            self.pause_syncer();
            if let Err(e) = self.sync_current() {
                return self.fail_sync("fdatasync of", &e);
            }
            self.resume_syncer();
        }

        let durable = match policy {
            FsyncPolicy::Always if !suspended => self.synced,
            _ => self.written,
        };
        if bytes > 0 {
            inner.stats.record_batch(records, bytes, started.elapsed());
        }
        self.appends_went_on = inner.appended.load(Ordering::Acquire) > self.written;
        if self.retry_at.take().is_some() || resync {
            inner.clear_error();
        }
        if durable > inner.durable.load(Ordering::Acquire) {
            inner.durable.store(durable, Ordering::Release);
            if let Some(f) = inner.on_durable.get() {
                f(durable);
            }
        }
        inner.notify_progress();
        self.trim();
    }

    /// Under `always`, how long until the sync gap has passed since the
    /// last fdatasync returned (the writer thread sleeps that long first);
    /// at most the gap, whatever waits. Only when
    /// records were appended while the last cycle ran: writes that keep
    /// coming are worth gathering for, while clients that all wait for the
    /// sync just made (one client alone, a few in step) would only wait
    /// longer, since their next writes come when it releases their replies.
    fn sync_gap_left(&self) -> Option<Duration> {
        if self.inner.policy() != FsyncPolicy::Always || !self.appends_went_on {
            return None;
        }
        let gap = Duration::from_micros(self.inner.sync_gap_us.load(Ordering::Relaxed));
        if gap.is_zero() {
            return None;
        }
        self.last_sync_end.and_then(|end| (end + gap).checked_duration_since(Instant::now()))
    }

    /// Moves this thread into or out of `SCHED_BATCH` when
    /// [`Inner::writer_batch_class`] changed.
    fn apply_batch_class(&mut self) {
        let want = self.inner.writer_batch_class.load(Ordering::Relaxed);
        if self.batch_class == Some(want) {
            return;
        }
        self.batch_class = Some(want);
        let policy = if want { libc::SCHED_BATCH } else { libc::SCHED_OTHER };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` outlives the call; pid 0 is this thread.
        if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
            tracing::warn!("journal: could not set the writer's scheduling class: {}", io::Error::last_os_error());
        }
    }

    /// fdatasyncs the files in `closing`, oldest first, then the current
    /// file; on success everything written is synced, on failure the files
    /// are to be repaired (`plan_resync`) and the caller records it
    /// ([`Writer::fail_sync`]). The caller has paused the fsync thread.
    /// Its time goes to the fsync figures and, under `always`, to the
    /// `aof-fsync-always` latency event.
    fn sync_current(&mut self) -> io::Result<()> {
        let t0 = Instant::now();
        let res = self.sync_closing().and_then(|()| self.cur.file.sync_data());
        let took = t0.elapsed();
        self.inner.stats.record_fsync(took);
        if self.inner.policy() == FsyncPolicy::Always {
            self.inner.report_latency("aof-fsync-always", took);
        }
        if let Err(e) = res {
            self.plan_resync();
            return Err(e);
        }
        self.synced = self.written;
        self.inner.synced.fetch_max(self.synced, Ordering::AcqRel);
        self.must_resync = false;
        self.last_sync_end = Some(Instant::now());
        Ok(())
    }

    /// Makes the switches due at `written` (see the module docs): under
    /// `always` the old file is synced, then replaced; under `everysec` and
    /// `no` it is replaced at once and joins `closing`. False if a
    /// sync failed (the failure is recorded and retried like any other; the
    /// switch stays queued).
    fn switch_if_due(&mut self) -> bool {
        while self.switches.front().is_some_and(|s| s.at == self.written) {
            let defer = self.inner.policy() != FsyncPolicy::Always
                && !self.must_resync
                && !self.inner.syncer_failed.load(Ordering::Acquire);
            if !defer {
                self.pause_syncer();
                if self.inner.syncer_failed.load(Ordering::Acquire) && !self.must_resync {
                    // The fsync thread failed on this file after the cycle
                    // looked: repair first, from the start of a cycle.
                    self.plan_resync();
                    self.retry_at = Some(Instant::now());
                    return false;
                }
                if self.written > self.synced || self.must_resync {
                    if let Err(e) = self.sync_current() {
                        self.fail_sync("fdatasync of", &e);
                        return false;
                    }
                }
            }
            let Some(sw) = self.switches.pop_front() else { break };
            debug_assert!(self.retained.iter().all(|b| b.end() <= sw.at || b.start >= sw.at));
            if let Err(e) = self.cur.file.release_space() {
                tracing::warn!("journal: cutting pre-written space off {}: {e}", self.inner.file_name.lock());
            }
            let old = std::mem::replace(&mut self.cur, Segment { file: Arc::clone(&sw.file), start: sw.at });
            {
                // Under the fsync thread's lock, so that it takes `closing`
                // and `sync_file` as one.
                let _s = self.inner.syncer.lock();
                *self.inner.sync_file.lock() = sw.file;
                if defer && self.synced < sw.at {
                    self.inner.closing.lock().push_back(Closing { file: old.file, start: old.start, end: sw.at });
                    self.inner.syncer_cv.notify_all();
                }
            }
            *self.inner.file_name.lock() = sw.name.clone();
            if !defer {
                self.resume_syncer();
            }
            self.inner.switched.fetch_max(sw.at, Ordering::AcqRel);
            tracing::info!("journal: appending to {} from LSN {}", sw.name, sw.at);
        }
        true
    }

    /// Syncs the files in `closing`, oldest first, each let go once synced.
    /// The caller has paused the fsync thread.
    fn sync_closing(&mut self) -> io::Result<()> {
        while let Some((file, _, end)) = self.first_closing() {
            file.sync_data()?;
            self.closed_through(end);
        }
        Ok(())
    }

    /// The oldest file in `closing`, with the LSNs it holds.
    fn first_closing(&self) -> Option<(Arc<dyn LogFile>, Lsn, Lsn)> {
        let closing = self.inner.closing.lock();
        closing.front().map(|c| (Arc::clone(&c.file), c.start, c.end))
    }

    /// The oldest file in `closing`, which ends at `end`, is synced.
    fn closed_through(&mut self, end: Lsn) {
        self.inner.closed_through(end);
        self.synced = self.synced.max(end);
    }

    /// After a failed sync of a file in `closing`: each, oldest first, has
    /// its unsynced bytes written again from memory when they are all still
    /// there (as [`Writer::plan_resync`] plans for the current file), then
    /// is synced. The caller has paused the fsync thread.
    fn repair_closing(&mut self) -> io::Result<()> {
        while let Some((file, start, end)) = self.first_closing() {
            let from = self.synced.max(start);
            if self.retained_from() <= from {
                self.rewrite(&*file, start, from, end)?;
            }
            file.sync_data()?;
            self.closed_through(end);
        }
        Ok(())
    }

    /// Lets go of batches that no failure can make us write again.
    fn trim(&mut self) {
        let keep_from = match self.inner.policy() {
            FsyncPolicy::Always | FsyncPolicy::EverySec => self.synced,
            FsyncPolicy::No => self.written,
        };
        let mut written_bytes: u64 = self
            .retained
            .iter()
            .map(|b| b.end().min(self.written).saturating_sub(b.start))
            .sum();
        while let Some(front) = self.retained.front() {
            let synced = front.end() <= keep_from;
            // everysec: bound what waits for the fsync thread.
            let over = front.end() <= self.written && written_bytes > self.inner.retain_max_bytes;
            if !(synced || over) {
                break;
            }
            written_bytes -= front.end().min(self.written).saturating_sub(front.start);
            if let Some(mut b) = self.retained.pop_front() {
                if b.bytes.capacity() <= SPARE_CAPACITY_MAX && self.emptied.len() < SPARES_MAX {
                    b.bytes.clear();
                    self.emptied.push(b.bytes);
                }
            }
        }
    }

    /// Redis's `aof_delayed_fsync`: writes go on while a background fsync
    /// has been running for 2 s or more; counted at most once per 2 s.
    fn count_delayed_fsync(&mut self) {
        let since = self.inner.syncer.lock().in_flight_since;
        let now = Instant::now();
        if let Some(since) = since {
            let recent = self.last_delayed_count.is_some_and(|t| now - t < DELAYED_FSYNC_AFTER);
            if now - since >= DELAYED_FSYNC_AFTER && !recent {
                self.inner.stats.delayed_fsync.fetch_add(1, Ordering::Relaxed);
                self.last_delayed_count = Some(now);
                tracing::warn!(
                    "journal: asynchronous AOF fsync is taking too long (disk is busy?); \
                     writing on without waiting for it"
                );
            }
        }
    }
}

/// The fsync thread: under `everysec`, about once per `everysec_interval`,
/// if anything was written since the last fsync, fdatasync the file; under
/// `everysec` and `no`, at once, the files a switch left behind
/// (`Inner::closing`), oldest first and before the current one. It never
/// holds a lock during the fsync, so neither appenders nor the writer wait
/// for it (except the writer when it repairs the file or syncs itself).
pub(crate) fn run_syncer(inner: Arc<Inner>) {
    let mut last_start = Instant::now();
    loop {
        let target;
        let file;
        let closing;
        let mut current;
        let started;
        {
            let mut s = inner.syncer.lock();
            loop {
                if s.shutdown {
                    return;
                }
                let due = last_start + inner.everysec_interval;
                let now = Instant::now();
                let failed = inner.syncer_failed.load(Ordering::Acquire);
                let suspended = inner.fsync_suspended.load(Ordering::Acquire);
                // The files switches left behind are synced at once (as
                // Redis's switch queues its background fsync); the current
                // file once a second under `everysec`.
                let policy = inner.policy();
                let everysec = policy == FsyncPolicy::EverySec;
                let left_behind = policy != FsyncPolicy::Always && !inner.closing.lock().is_empty();
                let unsynced = inner.written.load(Ordering::Acquire) > inner.synced.load(Ordering::Acquire);
                current = everysec && now >= due && unsynced;
                if s.paused || failed || suspended || !(everysec || left_behind) {
                    inner.syncer_cv.wait(&mut s);
                } else if left_behind || current {
                    break;
                } else if now < due {
                    inner.syncer_cv.wait_until(&mut s, due);
                } else {
                    last_start = now;
                }
            }
            target = inner.written.load(Ordering::Acquire);
            file = Arc::clone(&inner.sync_file.lock());
            closing = inner.closing.lock().iter().map(|c| (Arc::clone(&c.file), c.end)).collect::<Vec<_>>();
            started = Instant::now();
            if current {
                last_start = started;
            }
            s.in_flight_since = Some(started);
        }
        // The files the writer left behind first: a later file must never
        // be on disk without what comes before it.
        let mut res = Ok(());
        for (old, end) in &closing {
            res = old.sync_data();
            if res.is_err() {
                break;
            }
            // Nobody else takes from `closing` while this sync is in flight.
            inner.closed_through(*end);
        }
        let res = res.and_then(|()| if current { file.sync_data() } else { Ok(()) });
        inner.stats.record_fsync(started.elapsed());
        let mut s = inner.syncer.lock();
        s.in_flight_since = None;
        match res {
            Ok(()) if current => {
                inner.synced.fetch_max(target, Ordering::AcqRel);
            }
            Ok(()) => {}
            Err(e) => {
                // Recorded before it is counted: whoever sees the count
                // sees the failure, or its repair.
                inner.set_error("background fdatasync of", &e, true);
                inner.stats.fsync_errors.fetch_add(1, Ordering::Relaxed);
                s.paused = true;
                inner.wake_writer();
            }
        }
        inner.syncer_cv.notify_all();
    }
}
