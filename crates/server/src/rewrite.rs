//! AOF rewrite: BGREWRITEAOF and the automatic rewrites, on a thread of
//! their own, without fork and without a pause.
//!
//! # One rewrite
//!
//! 1. `Journal::prepare_rewrite`: the next incr file is created and listed
//!    in the manifest (file I/O and fsyncs, no lock of the keyspace held).
//! 2. `Keyspace::prepare_snapshot`, then `Keyspace::begin_snapshot`: with
//!    every shard locked, each shard's snapshot begins and the journal
//!    switches to the new incr file (`PreparedRewrite::start`). That is the
//!    instant S. Every write appends under its shards' locks, so every
//!    record before S is in the old files and every later one in the new.
//! 3. Shard by shard, under that shard's lock alone, `Shard::snapshot_step`
//!    hands out about [`STEP_ENTRIES`] entries as they were at S; once the
//!    lock is released they are written to the temporary base, as an RDB
//!    (`aof-use-rdb-preamble yes`, the default: the same encoder as SAVE,
//!    `aof-base` 1) or as the commands that recreate them ([`emit`]).
//!    Clients run between the steps. This scan runs behind the workers
//!    (see below) unless the rewrite must keep a bound.
//!
//! # Behind the workers, then as their equal
//!
//! Steps 1, 2 and 4 run on the rewrite thread, an ordinary one; the scan
//! of step 3, nearly all of the work, runs behind the workers
//! ([`crate::behind`]) and moves up to the rewrite thread once the
//! snapshot keeps too much memory, or from the start for a rewrite the
//! greedy policy starts: its bounds (recovery time, disk) are promises a
//! starved rewrite would break. Steps 1, 2 and 4 stay out of the idle
//! class: they take locks the journal's writer takes too, and with the
//! whole rewrite in the idle class W1's p99 under memtier went from 2.8 to
//! 7.3 ms (most likely a holder starved by a busy worker holding up the
//! writer, and with it every durable reply; with the scan alone behind,
//! p99 stayed at 2.7).
//!
//! While the snapshot runs, a write command first saves the state at S of
//! every key it names (`command::run` calls [`preserve_keys`] when
//! `Server::snapshot_active` is set: one relaxed load otherwise), so the
//! snapshot keeps reading S however the keys change. Whole-shard writes
//! (FLUSHALL, FLUSHDB, SWAPDB) need nothing: the engine hands the flushed
//! contents to the snapshot.
//!
//! A key that had expired at S is left out: from S on every command sees
//! it absent. A key with a TTL gets `PEXPIREAT` with its absolute time. A
//! key with memcached flags gets them as the incr files log them (an
//! `#item-flags` annotation after its last command) or, in an RDB base, as
//! `keel-rdb`'s `keel-item-flags` aux field; the snapshot gives their value at S
//! (see `keel_engine::snapshot`).
//!
//! # When rewrites start by themselves
//!
//! Checked every cron tick of worker 0 ([`cron`]). Two policies, never both:
//!
//! * **Redis's** (`auto-aof-rewrite-percentage`, default 100, and
//!   `auto-aof-rewrite-min-size`, default 64mb): when the AOF is larger than
//!   the minimum and has grown by the percentage over its size right after
//!   the last rewrite (at start, the base's size). 0 turns it off.
//! * **Greedy** (Keel's own), as soon as `keel-aof-max-recovery-seconds` or
//!   `keel-aof-max-disk-bytes` is non-zero: a rewrite costs CPU, disk
//!   bandwidth and snapshot memory, so it is put off for as long as the
//!   bounds allow, and Redis's percentage rule is not used. A rewrite
//!   starts only when one of them would otherwise be passed, that is, at
//!   [`GREEDY_MARGIN`] (90%) of it:
//!   - recovery: the estimated replay time reaches 90% of the bound. An
//!     RDB base and commands load at different rates per byte (measured
//!     here: the RDB at 0.6x to 0.9x the commands' rate, being denser),
//!     so the two are estimated apart ([`ReplayRates`]): the RDB base's
//!     size over the RDB rate plus the rest over the command rate, each
//!     measured at start-up when at least 1 MiB of it was read, else
//!     configured (`keel-aof-rdb-load-rate`, `keel-aof-replay-rate`);
//!   - disk: the AOF's size plus the base the rewrite would write (a
//!     rewrite needs room for both until it commits) reaches 90% of the
//!     bound. The new base is estimated as the AOF's size times the last
//!     rewrite's output/input ratio (1 before the first rewrite: the
//!     conservative guess that nothing is redundant).
//!
//!   A greedy rewrite also needs the AOF to have grown by 10% since the
//!   last rewrite: a dataset whose base alone passes a bound would
//!   otherwise be rewritten back to back, for nothing.
//!
//! After three consecutive failures, automatic and scheduled rewrites
//! (among them the retries of a failed one that `appendonly yes` waits
//! for) wait 1, 2, 4 ... up to 60 minutes between attempts, as Redis does
//! (BGREWRITEAOF still runs at once).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_engine::set::Member;
use keel_engine::{Entry, Value};
use keel_journal::{BaseBuffer, BaseFormat, IncrListing, Journal, JournalError, Rewrite, RewriteOptions, RewriteSummary, Sizes};
use keel_rdb::{RdbWriter, WriteOptions};
use parking_lot::Mutex;

use crate::command::{CmdError, CommandSpec, Ctx};
use crate::rdb::Gathered;
use crate::config::Config;
use crate::doorbell::Doorbell;
use crate::durability::AofState;
use crate::scripting::functions::Library;
use crate::server::{unix_ms, Server};
use crate::snapshot::STEP_ENTRIES;

/// Buckets per `finish_shrink_step` before S.
const PREPARE_BUDGET: usize = 1024;
/// The base is written once this much is gathered (and at the end).
const WRITE_BYTES: usize = 256 << 10;
/// Elements per command for collections: Redis's `AOF_REWRITE_ITEMS_PER_CMD`.
pub const ITEMS_PER_CMD: usize = 64;
/// A greedy rewrite starts at this fraction of a bound.
pub const GREEDY_MARGIN: f64 = 0.9;
/// Start-up must replay at least this much for its rate to count.
const REPLAY_MEASURE_MIN_BYTES: u64 = 1 << 20;
/// Redis's `AOF_REWRITE_LIMITE_THRESHOLD` and `..._MAX_MINUTES`.
const FAILURES_BEFORE_BACKOFF: u64 = 3;
const BACKOFF_MAX_MINUTES: u64 = 60;

/// Why a rewrite starts by itself.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// Redis's rule: grown by this percentage.
    Growth { percent: u64 },
    /// Greedy: the estimated replay time, in seconds, nears the bound.
    Recovery { estimate_s: f64 },
    /// Greedy: the files plus the base to write, in bytes, near the bound.
    Disk { projected_bytes: u64 },
}

/// The knobs of the automatic rewrites, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoPolicy {
    pub percentage: u64,
    pub min_size: u64,
    pub max_recovery_s: u64,
    pub max_disk_bytes: u64,
}

impl AutoPolicy {
    pub fn from_config(c: &Config) -> AutoPolicy {
        AutoPolicy {
            percentage: c.auto_aof_rewrite_percentage,
            min_size: c.auto_aof_rewrite_min_size,
            max_recovery_s: c.keel_aof_max_recovery_seconds,
            max_disk_bytes: c.keel_aof_max_disk_bytes,
        }
    }

    pub fn greedy(&self) -> bool {
        self.max_recovery_s > 0 || self.max_disk_bytes > 0
    }

    /// Whether a rewrite is due for files of `sizes`, replayed at `rates`
    /// (see the module docs).
    pub fn due(&self, sizes: &Sizes, rates: ReplayRates) -> Option<Trigger> {
        if self.greedy() {
            let grown = sizes.current > sizes.rewrite_base + sizes.rewrite_base / 10;
            if !grown {
                return None;
            }
            if self.max_recovery_s > 0 {
                let estimate_s = rates.estimate_s(sizes);
                if estimate_s >= GREEDY_MARGIN * self.max_recovery_s as f64 {
                    return Some(Trigger::Recovery { estimate_s });
                }
            }
            if self.max_disk_bytes > 0 {
                let ratio = if sizes.last_input > 0 {
                    (sizes.last_output as f64 / sizes.last_input as f64).min(1.0)
                } else {
                    1.0
                };
                let projected_bytes = sizes.current + (sizes.current as f64 * ratio) as u64;
                if projected_bytes as f64 >= GREEDY_MARGIN * self.max_disk_bytes as f64 {
                    return Some(Trigger::Disk { projected_bytes });
                }
            }
            return None;
        }
        if self.percentage > 0 && sizes.current > self.min_size {
            let base = sizes.rewrite_base.max(1);
            let percent = (sizes.current * 100 / base).saturating_sub(100);
            if percent >= self.percentage {
                return Some(Trigger::Growth { percent });
            }
        }
        None
    }
}

/// How fast start-up replays, in bytes per second: commands, and an RDB
/// base (measured apart: their rates per byte differ).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayRates {
    pub commands: u64,
    pub rdb: u64,
}

impl ReplayRates {
    /// The estimated replay time of files of `sizes`, in seconds: the RDB
    /// base at the RDB rate, everything else at the command rate.
    pub fn estimate_s(&self, sizes: &Sizes) -> f64 {
        let rdb = if sizes.base_rdb { sizes.base.min(sizes.current) } else { 0 };
        rdb as f64 / self.rdb.max(1) as f64 + (sizes.current - rdb) as f64 / self.commands.max(1) as f64
    }
}

/// The rewrite thread's state and INFO's figures.
#[derive(Default)]
pub struct Rewriter {
    /// From the acceptance of a request until its rewrite ended.
    in_progress: AtomicBool,
    /// Redis's `aof_rewrite_scheduled`: wanted, to start when possible.
    scheduled: AtomicBool,
    /// The running rewrite is to stop at its next step and abort
    /// (`appendonly` switched: Redis kills the rewrite child).
    cancelled: AtomicBool,
    /// The scan runs (or is to run, from its next step) on the rewrite
    /// thread, as an equal of the workers, not behind them.
    urgent: AtomicBool,
    /// Bytes per second of commands replayed at start (0: not measured).
    replay_rate_measured: AtomicU64,
    /// Bytes per second of RDB base loaded at start (0: not measured).
    rdb_rate_measured: AtomicU64,
    state: Mutex<State>,
    /// Wakes the rewrite thread.
    bell: Doorbell,
}

#[derive(Default)]
struct State {
    started: Option<Instant>,
    last: Option<(Duration, bool)>,
    rewrites: u64,
    consecutive_failures: u64,
    /// Automatic rewrites wait until then after repeated failures.
    auto_not_before: Option<Instant>,
    backoff_minutes: u64,
    /// The last automatic rewrite's trigger and the AOF's size then.
    last_auto: Option<(Trigger, u64)>,
}

/// INFO persistence's rewrite fields.
#[derive(Clone, Copy, Debug, Default)]
pub struct RewriteInfo {
    pub in_progress: bool,
    pub scheduled: bool,
    /// Seconds, -1 when none.
    pub current_s: i64,
    pub last_s: i64,
    pub last_ok: bool,
    pub rewrites: u64,
    pub consecutive_failures: u64,
    /// The last automatic rewrite's trigger and the AOF's size when it fired.
    pub last_auto: Option<(Trigger, u64)>,
    /// A rewrite runs and its scan runs, or will, behind the workers.
    pub behind_workers: bool,
}

impl Trigger {
    /// A greedy trigger fires at [`GREEDY_MARGIN`] of a bound the
    /// configuration promises; Redis's rule promises nothing.
    fn keeps_a_bound(&self) -> bool {
        !matches!(self, Trigger::Growth { .. })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Trigger::Growth { .. } => "growth",
            Trigger::Recovery { .. } => "recovery",
            Trigger::Disk { .. } => "disk",
        }
    }
}

impl Rewriter {
    pub fn info(&self) -> RewriteInfo {
        let st = self.state.lock();
        RewriteInfo {
            in_progress: self.in_progress.load(Ordering::Acquire),
            scheduled: self.scheduled.load(Ordering::Relaxed),
            current_s: st.started.map_or(-1, |t| t.elapsed().as_secs() as i64),
            last_s: st.last.map_or(-1, |(d, _)| d.as_secs() as i64),
            last_ok: st.last.is_none_or(|(_, ok)| ok),
            rewrites: st.rewrites,
            consecutive_failures: st.consecutive_failures,
            last_auto: st.last_auto,
            behind_workers: self.in_progress() && !self.urgent.load(Ordering::Relaxed),
        }
    }

    pub fn in_progress(&self) -> bool {
        self.in_progress.load(Ordering::Acquire)
    }

    /// Records how fast start-up replayed the journal's commands and its
    /// RDB base, each as (bytes, time taken).
    pub fn note_replay(&self, commands: (u64, Duration), rdb: (u64, Duration)) {
        for ((bytes, took), cell, what) in
            [(commands, &self.replay_rate_measured, "commands"), (rdb, &self.rdb_rate_measured, "RDB base")]
        {
            if bytes >= REPLAY_MEASURE_MIN_BYTES && !took.is_zero() {
                let rate = (bytes as f64 / took.as_secs_f64()) as u64;
                cell.store(rate.max(1), Ordering::Relaxed);
                tracing::info!("journal replayed {what} at {rate} bytes/s");
            }
        }
    }

    /// The replay rates recovery estimates use, each measured if start-up
    /// measured it, else configured; and which were measured.
    pub fn replay_rates(&self, config: &Config) -> (ReplayRates, bool, bool) {
        let pick = |cell: &AtomicU64, configured: u64| match cell.load(Ordering::Relaxed) {
            0 => (configured.max(1), false),
            r => (r, true),
        };
        let (commands, commands_measured) = pick(&self.replay_rate_measured, config.keel_aof_replay_rate);
        let (rdb, rdb_measured) = pick(&self.rdb_rate_measured, config.keel_aof_rdb_load_rate);
        (ReplayRates { commands, rdb }, commands_measured, rdb_measured)
    }

    /// Hands a rewrite to the thread unless one is under way; `urgent`
    /// for one that keeps a bound (see "Behind the workers"). True if
    /// accepted.
    fn request(&self, urgent: bool) -> bool {
        if self.in_progress.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.urgent.store(urgent, Ordering::Relaxed);
        self.scheduled.store(false, Ordering::Relaxed);
        self.cancelled.store(false, Ordering::Release);
        self.bell.ring();
        true
    }

    /// Stops the thread (at its next step if a rewrite runs: it is aborted).
    pub fn stop(&self) {
        self.bell.stop();
    }

    fn stopping(&self) -> bool {
        self.bell.stopping() || self.cancelled.load(Ordering::Acquire)
    }

    fn began(&self) {
        let mut st = self.state.lock();
        st.started = Some(Instant::now());
        st.rewrites += 1;
    }

    /// The rewrite is over. A cancelled one, as Redis's killed child, leaves
    /// the last rewrite's status and the failure count as they were.
    fn ended(&self, outcome: Outcome) {
        let mut st = self.state.lock();
        let took = st.started.take().map_or(Duration::ZERO, |t| t.elapsed());
        match outcome {
            Outcome::Cancelled => {}
            Outcome::Done => {
                st.last = Some((took, true));
                st.consecutive_failures = 0;
                st.backoff_minutes = 0;
                st.auto_not_before = None;
            }
            Outcome::Failed => {
                st.last = Some((took, false));
                st.consecutive_failures += 1;
                if st.consecutive_failures >= FAILURES_BEFORE_BACKOFF {
                    st.backoff_minutes = (st.backoff_minutes * 2).clamp(1, BACKOFF_MAX_MINUTES);
                    st.auto_not_before = Some(Instant::now() + Duration::from_secs(st.backoff_minutes * 60));
                    tracing::warn!(
                        "AOF rewrite has failed {} times in a row: automatic rewrites wait {} minutes",
                        st.consecutive_failures,
                        st.backoff_minutes
                    );
                }
            }
        }
        drop(st);
        self.in_progress.store(false, Ordering::Release);
    }

    fn auto_allowed(&self) -> bool {
        self.state.lock().auto_not_before.is_none_or(|t| Instant::now() >= t)
    }
}

/// BGREWRITEAOF: the reply's status text, or Redis's error.
pub fn bgrewriteaof(ctx: &mut Ctx<'_>) -> Result<&'static str, CmdError> {
    let server = ctx.server;
    // With appendonly off too: the rewrite writes a new base of the data
    // as it is (Redis's does; nothing is logged after it).
    let opened = crate::durability::open_journal(server, &server.config.read());
    if let Err(e) = opened {
        tracing::warn!("BGREWRITEAOF: can't open the AOF directory: {e}");
        return Err(CmdError::other(
            "ERR Can't execute an AOF background rewriting. Please check the server logs for more information.",
        ));
    }
    let rewriter = &server.rewrite;
    if rewriter.in_progress() {
        return Err(CmdError::other("ERR Background append only file rewriting already in progress"));
    }
    // Inside EXEC, or while another snapshot (a future BGSAVE) runs, it
    // waits for the cron, as Redis schedules it while a child runs.
    if ctx.durability.in_transaction || server.snapshot_active.load(Ordering::Acquire) {
        rewriter.scheduled.store(true, Ordering::Relaxed);
        rewriter.state.lock().auto_not_before = None;
        return Ok("Background append only file rewriting scheduled");
    }
    if rewriter.request(false) {
        Ok("Background append only file rewriting started")
    } else {
        Err(CmdError::other("ERR Background append only file rewriting already in progress"))
    }
}

/// `CONFIG SET appendonly yes`: the rewrite that writes the base from the
/// current data, as Redis's `startAppendOnly`. A rewrite under way (an old
/// one, not logging for the new state) is cancelled and a new one
/// scheduled; while another snapshot runs, it is scheduled.
pub fn start_for_enable(server: &Server) {
    let rewriter = &server.rewrite;
    rewriter.state.lock().auto_not_before = None;
    if rewriter.in_progress() {
        tracing::warn!("AOF was enabled but there is already an AOF rewriting in background. Stopping background AOF and starting a rewrite now.");
        rewriter.cancelled.store(true, Ordering::Release);
        rewriter.scheduled.store(true, Ordering::Relaxed);
    } else if server.snapshot_active.load(Ordering::Acquire) || !rewriter.request(false) {
        tracing::warn!("AOF was enabled but there is already another background operation. An AOF background was scheduled to start when possible.");
        rewriter.scheduled.store(true, Ordering::Relaxed);
    }
}

/// `CONFIG SET appendonly no`: a rewrite under way is aborted, none is
/// scheduled any more.
pub fn cancel(server: &Server) {
    let rewriter = &server.rewrite;
    rewriter.scheduled.store(false, Ordering::Relaxed);
    if rewriter.in_progress() {
        rewriter.cancelled.store(true, Ordering::Release);
    }
}

/// How a rewrite ended.
enum Outcome {
    Done,
    Failed,
    /// `appendonly` switched under it ([`cancel`], [`start_for_enable`]).
    Cancelled,
}

/// After [`cancel`], with no lock held: waits for the rewrite to be gone,
/// as Redis's killAppendOnlyChild waits for its child, so that a
/// BGREWRITEAOF right after is not refused. One still stopping after
/// [`CANCEL_WAIT`] (its file operations stuck on a failing disk) goes on
/// stopping alone.
pub fn wait_cancelled(server: &Server) {
    let rewriter = &server.rewrite;
    if !rewriter.in_progress() || !rewriter.cancelled.load(Ordering::Acquire) {
        return;
    }
    let deadline = Instant::now() + CANCEL_WAIT;
    while rewriter.in_progress() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Redis's words, which tools (and its unit/aofrw) look for in the log;
    // there is no child here.
    tracing::info!("Killing running AOF rewrite child: the rewrite thread stopped it");
}

/// See [`wait_cancelled`]; a cancelled rewrite stops at its next step.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Worker 0's cron: starts a scheduled rewrite, or an automatic one.
pub fn cron(server: &Server) {
    let rewriter = &server.rewrite;
    if rewriter.in_progress() || server.loading.load(Ordering::Relaxed) || server.snapshot_active.load(Ordering::Acquire) {
        return;
    }
    if rewriter.scheduled.load(Ordering::Relaxed) {
        // Held back, like the automatic ones, after repeated failures.
        if rewriter.auto_allowed() {
            rewriter.request(false);
        }
        return;
    }
    let Some(journal) = server.aof.enabled() else { return };
    if server.aof.state() != AofState::On {
        return;
    }
    let (policy, rate) = {
        let config = server.config.read();
        (AutoPolicy::from_config(&config), rewriter.replay_rates(&config).0)
    };
    if !policy.greedy() && policy.percentage == 0 {
        return;
    }
    let sizes = journal.sizes();
    if let Some(trigger) = policy.due(&sizes, rate) {
        if rewriter.auto_allowed() {
            // Recorded before the request wakes the thread, so that no INFO
            // shows the rewrite counted but not why it ran.
            let previous = rewriter.state.lock().last_auto.replace((trigger, sizes.current));
            if rewriter.request(trigger.keeps_a_bound()) {
                tracing::info!("starting automatic rewriting of AOF of {} bytes: {trigger:?}", sizes.current);
            } else {
                rewriter.state.lock().last_auto = previous;
            }
        }
    }
}

/// Before a write command runs while a snapshot is active: keeps the state
/// at S of every key it names (`Shard::preserve` covers all databases of
/// the key's shard, for MOVE and COPY).
pub fn preserve_keys(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) {
    for i in spec.key_indexes(argv) {
        let key = argv[i];
        ctx.dbs.locked.shard_for(ctx.dbs.keyspace, key).preserve(key);
    }
}

/// Starts the rewrite thread. It lives as long as the server; `stop` ends it.
/// An ordinary thread: see "Behind the workers, then as their equal".
pub fn spawn(server: Arc<Server>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("keel-rewrite".into()).spawn(move || run(&server))
}

fn run(server: &Server) {
    crate::process::pin_thread(crate::process::CpuRole::AofRewrite);
    let rewriter = &server.rewrite;
    while rewriter.bell.wait() {
        let Some(journal) = server.aof.opened() else {
            rewriter.ended(Outcome::Failed);
            continue;
        };
        rewriter.began();
        crate::durability::suspend_fsync_while_saving(server, true);
        let outcome = match rewrite_once(server, journal) {
            Ok(s) => {
                tracing::info!(
                    "Background AOF rewrite finished successfully: {} of {} bytes replaces {} bytes in {:?}",
                    s.base_name,
                    s.base_bytes,
                    s.input_bytes,
                    s.took
                );
                Outcome::Done
            }
            Err(e) if rewriter.cancelled.load(Ordering::Acquire) => {
                tracing::info!("Background AOF rewrite cancelled: {e}");
                Outcome::Cancelled
            }
            Err(e) => {
                tracing::error!("Background AOF rewrite failed: {e}");
                // As Redis: the AOF waiting for its base to switch on tries
                // again (after repeated failures, the cron's back-off).
                if server.aof.state() == AofState::WaitRewrite {
                    rewriter.scheduled.store(true, Ordering::Relaxed);
                }
                Outcome::Failed
            }
        };
        rewriter.ended(outcome);
        crate::durability::suspend_fsync_while_saving(server, false);
    }
}

/// One rewrite, steps 1 to 4 of the module docs.
fn rewrite_once(server: &Server, journal: &Journal) -> Result<RewriteSummary, String> {
    // One snapshot at a time: the flag is the token (and the write path's
    // signal to preserve).
    if server.snapshot_active.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
        server.rewrite.scheduled.store(true, Ordering::Relaxed);
        return Err("another snapshot is running; rescheduled".into());
    }
    let result = snapshot_into_base(server, journal);
    let kept = server.snapshot_progress.end();
    server.snapshot_progress.last_rewrite_kept.store(kept, Ordering::Relaxed);
    server.snapshot_active.store(false, Ordering::Release);
    result
}

fn snapshot_into_base(server: &Server, journal: &Journal) -> Result<RewriteSummary, String> {
    let (format, rdb_options, fsync, incremental_fsync) = {
        let c = server.config.read();
        let options = WriteOptions {
            encode: crate::rdb::encode_options(&c.encoding, c.rdbcompression),
            checksum: c.rdbchecksum,
            aof_base: true,
            ..WriteOptions::default()
        };
        (crate::durability::base_format(&c), options, c.appendfsync, c.aof_rewrite_incremental_fsync)
    };
    // Turning the AOF on: the files on disk miss what changed while it was
    // off, so the new incr file is listed only with the new base. With the
    // AOF off, nothing is logged: the base is listed alone.
    let incr = match server.aof.state() {
        AofState::On => IncrListing::AtOnce,
        AofState::WaitRewrite => IncrListing::AtCommit,
        AofState::Off => IncrListing::Never,
    };
    let options = RewriteOptions { base_format: format, incr, incremental_fsync };
    let prepared = journal.prepare_rewrite_with(options).map_err(|e| e.to_string())?;
    let keyspace = &server.keyspace;
    keyspace.prepare_snapshot(PREPARE_BUDGET);
    let (mut rewrite, s_ms, counts, enabling, libraries) = keyspace.begin_snapshot(|all| {
        // RDB's per-database sizing hints: the key counts at S.
        let counts = crate::snapshot::db_counts(all.iter_mut(), keyspace.databases());
        // The function libraries at S (the commands that change them hold
        // every shard).
        let libraries = server.scripts.functions.snapshot();
        server.snapshot_progress.begin(counts.iter().map(|c| c.0).sum());
        let rewrite = prepared.start();
        // Logging for `appendonly yes` starts exactly here: the base holds
        // everything before, the new incr file everything after.
        let enabling = crate::durability::begin_logging_at_s(server, fsync);
        (rewrite, unix_ms(), counts, enabling, libraries)
    });
    let written = match format {
        BaseFormat::Aof => write_aof_base(server, &mut rewrite, s_ms, &libraries),
        BaseFormat::Rdb => write_rdb_base(server, &mut rewrite, s_ms, &counts, &libraries, rdb_options),
    };
    if let Err(e) = written {
        for index in 0..keyspace.shard_count() {
            let leftovers = keyspace.lock_one(index).shard(index).abort_snapshot();
            // Freed here, on the rewrite thread, with no lock held.
            drop(leftovers);
        }
        rewrite.abort();
        return Err(e);
    }
    let summary = rewrite.commit().map_err(|e: JournalError| e.to_string())?;
    if enabling {
        crate::durability::rewrite_committed(server);
    }
    Ok(summary)
}

/// Reads the snapshot shard by shard, [`STEP_ENTRIES`] entries per hold of
/// a shard's lock: `emit` runs under the lock for each entry, `after_step`
/// once it is released (with whether the last step was done), to write
/// what was gathered. Behind the workers, then on this thread if the
/// rewrite becomes urgent (see "Behind the workers"). Stops with an error
/// when the server shuts down or the rewrite is cancelled.
fn scan_snapshot<S: Send>(
    server: &Server,
    state: &mut S,
    mut emit: impl FnMut(&mut S, usize, &[u8], &Entry, u32) + Send,
    mut after_step: impl FnMut(&mut S, bool) -> Result<(), String> + Send,
) -> Result<(), String> {
    crate::behind::scan(server, "keel-rewrite-bg", &server.rewrite.urgent, |behind| {
        scan_steps(server, state, &mut emit, &mut after_step, behind)
    })
}

/// The scan's loop. True once every shard is read; false when, `behind`
/// the workers, it hands the rest to the rewrite thread (urgent).
fn scan_steps<S>(
    server: &Server,
    state: &mut S,
    emit: &mut impl FnMut(&mut S, usize, &[u8], &Entry, u32),
    after_step: &mut impl FnMut(&mut S, bool) -> Result<(), String>,
    behind: bool,
) -> Result<bool, String> {
    let keyspace = &server.keyspace;
    // A shard already read answers its next step at once, as done.
    for index in 0..keyspace.shard_count() {
        loop {
            if server.rewrite.stopping() || server.shutdown.load(Ordering::Relaxed) {
                return Err("stopped: the server is shutting down, or appendonly was switched".into());
            }
            if behind && server.rewrite.urgent.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let mut emitted = 0;
            let done = {
                let mut locked = keyspace.lock_one(index);
                locked.shard(index).snapshot_step(STEP_ENTRIES, |db, key, entry, flags| {
                    emit(state, db, key, entry, flags);
                    emitted += 1;
                })
            };
            server.snapshot_progress.keys_processed.fetch_add(emitted, Ordering::Relaxed);
            after_step(state, index + 1 == keyspace.shard_count() && done)?;
            delay_keys(server, emitted);
            if behind {
                server.worker_cores.give_way();
            }
            if done {
                break;
            }
        }
    }
    Ok(true)
}

/// `rdb-key-save-delay` (for tests), as Redis's rewrite child waits after
/// each key: the wait for `keys` keys, in slices that end it early once the
/// delay is set back to 0 or the rewrite is to stop.
fn delay_keys(server: &Server, keys: u64) {
    const SLICE: Duration = Duration::from_millis(50);
    let delay_us = |server: &Server| server.config.read().rdb_key_save_delay_us;
    let Ok(per_key) = u64::try_from(delay_us(server)) else { return };
    let mut owed = Duration::from_micros(per_key.saturating_mul(keys));
    while !owed.is_zero() && delay_us(server) > 0 && !server.rewrite.stopping() {
        let nap = owed.min(SLICE);
        std::thread::sleep(nap);
        owed -= nap;
    }
}

/// The base as commands (`aof-use-rdb-preamble no`), after a `#TS:`
/// annotation under `aof-timestamp-enabled`, as Redis's: the function
/// libraries first (FUNCTION LOAD), then the keys.
fn write_aof_base(server: &Server, rewrite: &mut Rewrite, s_ms: u64, libraries: &[Arc<Library>]) -> Result<(), String> {
    let mut buf = BaseBuffer::new();
    if server.config.read().aof_timestamp_enabled {
        buf.push_timestamp();
    }
    for library in libraries {
        buf.push(0, &[b"FUNCTION" as &[u8], b"LOAD", &library.code]);
    }
    scan_snapshot(
        server,
        &mut buf,
        |buf, db, key, entry, flags| emit(buf, db, key, entry, flags, s_ms),
        |buf, last| {
            if last || buf.len() >= WRITE_BYTES {
                rewrite.write(buf).map_err(|e| e.to_string())?;
            }
            Ok(())
        },
    )
}

/// The base as an RDB file (`aof-use-rdb-preamble yes`), written by the
/// same encoder as SAVE. Within a shard entries come grouped by database,
/// but shards follow one another, so a database can come back: a
/// `SELECTDB` (with its RESIZEDB hint) is written each time it changes.
/// Keys that had expired at S are left out, as in the AOF base.
fn write_rdb_base(
    server: &Server,
    rewrite: &mut Rewrite,
    s_ms: u64,
    counts: &[(u64, u64)],
    libraries: &[Arc<Library>],
    options: WriteOptions,
) -> Result<(), String> {
    let io_err = |e: std::io::Error| e.to_string();
    let out = std::io::BufWriter::with_capacity(WRITE_BYTES, rewrite.base_writer());
    let mut writer = RdbWriter::new(out, options).map_err(io_err)?;
    for library in libraries {
        writer.function(&library.code).map_err(io_err)?;
    }
    struct State<W: std::io::Write> {
        writer: RdbWriter<W>,
        db: Option<usize>,
        entries: Gathered,
    }
    let mut state = State { writer, db: None, entries: Gathered::default() };
    scan_snapshot(
        server,
        &mut state,
        |g, db, key, entry, flags| {
            if !entry.is_expired(s_ms) {
                g.entries.push(db, key, entry, flags);
            }
        },
        |g, _| {
            let State { writer, db: current, entries } = g;
            entries.drain(|db, key, value, expire, flags| {
                if *current != Some(db) {
                    let (keys, expires) = counts.get(db).copied().unwrap_or((0, 0));
                    writer.select_db(db as u64, keys, expires).map_err(io_err)?;
                    *current = Some(db);
                }
                value.write(writer, key, expire, flags).map_err(io_err)
            })
        },
    )?;
    let out = state.writer.finish().map_err(io_err)?;
    out.into_inner().map_err(|e| e.error().to_string())?;
    Ok(())
}

/// Appends the commands that recreate `key` as `entry` has it, in database
/// `db`, unless it had expired at S (`s_ms`). Collections go
/// [`ITEMS_PER_CMD`] elements (or pairs) per command, as Redis writes them.
/// Non-zero memcached `flags` follow as the incr files log them, after the
/// key's last command: a PEXPIREAT after them would reset them on replay.
pub fn emit(buf: &mut BaseBuffer, db: usize, key: &[u8], entry: &Entry, flags: u32, s_ms: u64) {
    if entry.is_expired(s_ms) {
        return;
    }
    match &entry.value {
        Value::Str(s) => {
            let mut scratch = itoa::Buffer::new();
            buf.push(db, &[&b"SET"[..], key, s.as_bytes(&mut scratch)]);
        }
        Value::List(l) => push_batched(buf, db, b"RPUSH", key, 1, l.iter().map(Cow::Borrowed)),
        Value::Hash(h) => push_batched(
            buf,
            db,
            b"HSET",
            key,
            2,
            h.iter().flat_map(|(f, v)| [Cow::Borrowed(f), Cow::Borrowed(v)]),
        ),
        Value::Set(s) => {
            let mut scratch = itoa::Buffer::new();
            let members = s.iter().map(|m| match m {
                Member::Bytes(b) => Cow::Borrowed(b),
                Member::Int(_) => Cow::Owned(m.as_bytes(&mut scratch).to_vec()),
            });
            push_batched(buf, db, b"SADD", key, 1, members)
        }
        // ZADD wants score first, written as %.17g so that it reads back as
        // the same double.
        Value::ZSet(z) => {
            let pairs = z.iter().map(|(member, score)| {
                let mut text = Vec::new();
                keel_protocol::reply::format_double_g17(score, &mut text);
                [Cow::Owned(text), Cow::Borrowed(member)]
            });
            push_batched(buf, db, b"ZADD", key, 2, pairs.flatten());
        }
        Value::Stream(s) => emit_stream(buf, db, key, s),
    }
    if entry.has_expiry() {
        let mut scratch = itoa::Buffer::new();
        buf.push(db, &[&b"PEXPIREAT"[..], key, scratch.format(entry.expire_at_ms).as_bytes()]);
    }
    if flags != 0 {
        buf.push_item_flags(flags);
    }
}

/// What Redis's `rewriteStreamObject` writes: an XADD per entry (an empty
/// stream as `XADD key MAXLEN 0 0-1 x y`), the XSETID that restores the
/// last ID and counters, then each group's XGROUP CREATE with its
/// entries-read, an XCLAIM ... FORCE for each pending entry and XGROUP
/// CREATECONSUMER for each consumer that owns none.
fn emit_stream(buf: &mut BaseBuffer, db: usize, key: &[u8], s: &keel_engine::Stream) {
    use keel_engine::stream::StreamId;
    let text = |id: StreamId| id.to_string().into_bytes();
    if s.is_empty() {
        buf.push(db, &[&b"XADD"[..], key, b"MAXLEN", b"0", b"0-1", b"x", b"y"]);
    } else {
        s.for_range(StreamId::MIN, StreamId::MAX, false, 0, |e| {
            let id = text(e.id);
            let mut argv: Vec<&[u8]> = vec![b"XADD", key, &id];
            argv.extend(e.fields.iter().map(Vec::as_slice));
            buf.push(db, &argv);
        });
    }
    let mut scratch = itoa::Buffer::new();
    let (last, max_deleted) = (text(s.last_id), text(s.max_deleted_entry_id));
    let added = scratch.format(s.entries_added).as_bytes().to_vec();
    buf.push(db, &[&b"XSETID"[..], key, &last, b"ENTRIESADDED", &added, b"MAXDELETEDID", &max_deleted]);
    for (name, g) in &s.groups {
        let read = scratch.format(g.entries_read).as_bytes().to_vec();
        buf.push(db, &[&b"XGROUP"[..], b"CREATE", key, name, &text(g.last_id), b"ENTRIESREAD", &read]);
        for (consumer, c) in &g.consumers {
            if c.pel.is_empty() {
                buf.push(db, &[&b"XGROUP"[..], b"CREATECONSUMER", key, name, consumer]);
                continue;
            }
            for id in &c.pel {
                let p = &g.pel[id];
                let time = scratch.format(p.delivery_time).as_bytes().to_vec();
                let count = scratch.format(p.delivery_count).as_bytes().to_vec();
                let argv: [&[u8]; 12] =
                    [b"XCLAIM", key, name, consumer, b"0", &text(*id), b"TIME", &time, b"RETRYCOUNT", &count, b"JUSTID", b"FORCE"];
                buf.push(db, &argv);
            }
        }
    }
}

/// `cmd key item...` with at most `ITEMS_PER_CMD` groups of `group` items
/// per command.
fn push_batched<'a>(
    buf: &mut BaseBuffer,
    db: usize,
    cmd: &'static [u8],
    key: &'a [u8],
    group: usize,
    items: impl Iterator<Item = Cow<'a, [u8]>>,
) {
    let mut argv: Vec<Cow<'a, [u8]>> = Vec::with_capacity(2 + ITEMS_PER_CMD * group);
    argv.push(Cow::Borrowed(cmd));
    argv.push(Cow::Borrowed(key));
    for item in items {
        argv.push(item);
        if argv.len() == 2 + ITEMS_PER_CMD * group {
            buf.push(db, &argv);
            argv.truncate(2);
        }
    }
    if argv.len() > 2 {
        buf.push(db, &argv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(current: u64, rewrite_base: u64) -> Sizes {
        Sizes { current, rewrite_base, ..Sizes::default() }
    }

    /// The same rate for commands and RDB.
    fn rates(bytes_per_s: u64) -> ReplayRates {
        ReplayRates { commands: bytes_per_s, rdb: bytes_per_s }
    }

    #[test]
    fn recovery_estimate_counts_an_rdb_base_at_its_own_rate() {
        let rates = ReplayRates { commands: 1_000_000, rdb: 4_000_000 };
        let aof = Sizes { current: 10_000_000, base: 8_000_000, ..Sizes::default() };
        assert_eq!(rates.estimate_s(&aof), 10.0);
        let rdb = Sizes { base_rdb: true, ..aof };
        assert_eq!(rates.estimate_s(&rdb), 2.0 + 2.0);
        let p = AutoPolicy { max_recovery_s: 5, ..REDIS };
        assert!(matches!(p.due(&Sizes { current: 10_000_000, ..Sizes::default() }, rates), Some(Trigger::Recovery { .. })));
        assert_eq!(p.due(&rdb, rates), None, "4 s of replay is under 90% of 5 s");
    }

    const REDIS: AutoPolicy = AutoPolicy { percentage: 100, min_size: 64 << 20, max_recovery_s: 0, max_disk_bytes: 0 };

    #[test]
    fn redis_rule_needs_min_size_and_growth() {
        assert_eq!(REDIS.due(&sizes(60 << 20, 1), rates(1)), None, "below the minimum size");
        assert_eq!(REDIS.due(&sizes(100 << 20, 60 << 20), rates(1)), None, "grown 66%");
        assert_eq!(REDIS.due(&sizes(120 << 20, 60 << 20), rates(1)), Some(Trigger::Growth { percent: 100 }));
        let off = AutoPolicy { percentage: 0, ..REDIS };
        assert_eq!(off.due(&sizes(1 << 40, 1), rates(1)), None);
    }

    #[test]
    fn greedy_recovery_bound_replaces_the_percentage_rule() {
        // 10 s bound at 1 MB/s: due at 9 MB, not before, whatever the growth.
        let p = AutoPolicy { max_recovery_s: 10, ..REDIS };
        let rate = 1_000_000;
        assert_eq!(p.due(&sizes(8_900_000, 1), rates(rate)), None);
        assert_eq!(p.due(&sizes(200 << 20, 100 << 20), rates(100 << 20)), None, "Redis's rule would fire here");
        assert!(matches!(p.due(&sizes(9_000_000, 1), rates(rate)), Some(Trigger::Recovery { .. })));
        // Not again right after a rewrite whose result alone passes it.
        assert_eq!(p.due(&sizes(9_500_000, 9_000_000), rates(rate)), None);
        assert!(p.due(&sizes(9_950_000, 9_000_000), rates(rate)).is_some());
    }

    #[test]
    fn greedy_disk_bound_counts_the_base_to_write() {
        let p = AutoPolicy { max_disk_bytes: 1_000_000, ..REDIS };
        // Before any rewrite the new base may be as large as the files.
        assert_eq!(p.due(&sizes(440_000, 0), rates(1)), None);
        assert_eq!(p.due(&sizes(450_000, 0), rates(1)), Some(Trigger::Disk { projected_bytes: 900_000 }));
        // After one that compacted 10:1, much later.
        let compacting = Sizes { last_input: 1000, last_output: 100, ..sizes(800_000, 50_000) };
        assert_eq!(p.due(&compacting, rates(1)), None);
        let compacting = Sizes { current: 820_000, ..compacting };
        assert_eq!(p.due(&compacting, rates(1)), Some(Trigger::Disk { projected_bytes: 902_000 }));
    }

    /// The commands in `buf`, as text, SELECTs included, and its
    /// annotations as they are.
    fn commands(buf: &BaseBuffer) -> Vec<String> {
        use keel_protocol::frame::{parse_frame, Frame};
        let mut bytes = buf.as_bytes();
        let mut out = Vec::new();
        loop {
            if bytes.first() == Some(&b'#') {
                let end = bytes.windows(2).position(|w| w == b"\r\n").expect("annotation line") + 2;
                out.push(String::from_utf8_lossy(&bytes[..end - 2]).into_owned());
                bytes = &bytes[end..];
                continue;
            }
            let Ok(Some((Frame::Array(items), used))) = parse_frame(bytes) else { break };
            let words: Vec<String> = items
                .iter()
                .map(|f| match f {
                    Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("not a bulk: {other:?}"),
                })
                .collect();
            out.push(words.join(" "));
            bytes = &bytes[used..];
        }
        assert!(bytes.is_empty(), "trailing bytes");
        out
    }

    #[test]
    fn every_type_is_written_as_the_commands_that_recreate_it() {
        use keel_engine::{Hash, List, Set, Str, ZSet};
        let entry = |value| Entry::new(value, 0);
        let mut buf = BaseBuffer::new();
        let now = 1_000_000;
        emit(&mut buf, 0, b"int", &entry(Value::Str(Str::from_bytes(b"-42"))), 0, now);
        let mut ttl = entry(Value::Str(Str::from_bytes(b"a b")));
        ttl.expire_at_ms = now + 5;
        emit(&mut buf, 0, b"ttl", &ttl, 0, now);
        let mut gone = entry(Value::Str(Str::from_bytes(b"x")));
        gone.expire_at_ms = now;
        emit(&mut buf, 0, b"gone", &gone, 0, now);
        let mut list = List::new(-2);
        for i in 0..70 {
            list.push_back(i.to_string().as_bytes());
        }
        emit(&mut buf, 1, b"list", &entry(Value::List(list)), 0, now);
        let limits = keel_engine::EncodingLimits::default();
        let pairs = [(&b"f1"[..], &b"v1"[..]), (b"f2", b"v2")];
        emit(&mut buf, 1, b"hlp", &entry(Value::Hash(Hash::from_pairs(pairs, &limits))), 0, now);
        let table_limits = keel_engine::EncodingLimits { hash_max_listpack_entries: 0, ..limits };
        let table = Hash::from_pairs([(&b"f"[..], &b"v"[..])], &table_limits);
        assert_eq!(table.encoding(), "hashtable");
        emit(&mut buf, 1, b"hht", &entry(Value::Hash(table)), 0, now);
        let ints = Set::from_members([Member::Int(-1), Member::Int(7)], 512);
        emit(&mut buf, 2, b"si", &entry(Value::Set(ints)), 0, now);
        emit(&mut buf, 2, b"st", &entry(Value::Set(Set::from_members([Member::Bytes(b"m")], 512))), 0, now);
        let scores = [(&b"c"[..], f64::NEG_INFINITY), (b"b", 0.1), (b"a", 1.5)];
        emit(&mut buf, 2, b"z", &entry(Value::ZSet(ZSet::from_sorted(&scores, &limits))), 0, now);
        // Memcached flags, after the key's last command; none for an expired key.
        emit(&mut buf, 2, b"mc", &entry(Value::Str(Str::from_bytes(b"abc"))), 42, now);
        emit(&mut buf, 2, b"mcttl", &ttl, u32::MAX, now);
        emit(&mut buf, 2, b"mcgone", &gone, 7, now);
        let got = commands(&buf);
        let list_first: Vec<String> = (0..64).map(|i| i.to_string()).collect();
        let list_rest: Vec<String> = (64..70).map(|i| i.to_string()).collect();
        let expected = vec![
            "SELECT 0".to_string(),
            "SET int -42".into(),
            "SET ttl a b".into(),
            format!("PEXPIREAT ttl {}", now + 5),
            "SELECT 1".into(),
            format!("RPUSH list {}", list_first.join(" ")),
            format!("RPUSH list {}", list_rest.join(" ")),
            "HSET hlp f1 v1 f2 v2".into(),
            "HSET hht f v".into(),
            "SELECT 2".into(),
            "SADD si -1 7".into(),
            "SADD st m".into(),
            "ZADD z -inf c 0.10000000000000001 b 1.5 a".into(),
            "SET mc abc".into(),
            "#item-flags:42".into(),
            "SET mcttl a b".into(),
            format!("PEXPIREAT mcttl {}", now + 5),
            "#item-flags:4294967295".into(),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn collections_are_written_in_batches_of_64() {
        let mut buf = BaseBuffer::new();
        let items: Vec<Vec<u8>> = (0..130).map(|i: i32| i.to_string().into_bytes()).collect();
        push_batched(&mut buf, 0, b"RPUSH", b"l", 1, items.iter().map(|i| Cow::Borrowed(&i[..])));
        assert_eq!(buf.commands(), 3);
        let mut buf = BaseBuffer::new();
        push_batched(&mut buf, 0, b"HSET", b"h", 2, items.iter().map(|i| Cow::Borrowed(&i[..])));
        assert_eq!(buf.commands(), 2, "64 pairs per command");
    }
}
