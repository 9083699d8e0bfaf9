//! Loading the dataset (the journal's replay or `dump.rdb` at start, DEBUG
//! LOADAOF, DEBUG RELOAD): its progress for INFO, what clients see
//! meanwhile, `key-load-delay`, and a shutdown's stop ([`Stopped`]).
//!
//! Redis loads on its one thread and serves clients only from time to
//! time: once per `loading-process-events-interval-bytes` of an RDB (2 MB)
//! and at every 1024th command of an AOF, the first included. Until then a
//! request simply waits, and a load that ends sooner is never seen at all.
//! Keel's workers run beside the load, so they hold what arrives until the
//! load would first serve clients (`LoadProgress::serving`), then answer
//! -LOADING as Redis does from that point (commands flagged `loading`
//! still run).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::client::Message;
use crate::server::{unix_ms, Server};

/// A load given up for a shutdown (SIGTERM while loading), as Redis
/// exits then without saving what it half loaded.
#[derive(Debug, thiserror::Error)]
#[error("loading stopped by a shutdown")]
pub struct Stopped;

/// How far the load under way has come.
#[derive(Default)]
pub struct LoadProgress {
    /// Unix seconds when loading began.
    pub started_s: AtomicU64,
    pub total_bytes: AtomicU64,
    pub loaded_bytes: AtomicU64,
    /// Whether the load has reached a point where Redis would serve
    /// clients: until then their requests wait for it.
    serving: AtomicBool,
}

impl Server {
    /// A load begins: clients' requests wait ([`Server::held_by_load`]).
    pub fn begin_load(&self) {
        let progress = &self.load_progress;
        progress.started_s.store(unix_ms() / 1000, Ordering::Relaxed);
        progress.serving.store(false, Ordering::Relaxed);
        self.loading.store(true, Ordering::Release);
    }

    /// The load is over, done or failed: held requests run.
    pub fn end_load(&self) {
        self.loading.store(false, Ordering::Release);
        self.broadcast(|| Message::Resume);
    }

    /// Whether requests wait for the load instead of being answered.
    pub fn held_by_load(&self) -> bool {
        self.loading.load(Ordering::Acquire) && !self.load_progress.serving.load(Ordering::Acquire)
    }

    /// Held requests are answered from now on (-LOADING for most).
    fn serve_during_load(&self) {
        if !self.load_progress.serving.swap(true, Ordering::AcqRel) {
            self.broadcast(|| Message::Resume);
        }
    }
}

/// What a load does between the keys and commands it reads, as Redis's
/// loading loops: note its progress (for INFO, and to start serving
/// clients), and sleep `key-load-delay`.
pub struct Pacer<'a> {
    server: &'a Server,
    items: u64,
    /// `key-load-delay`, read again with each progress note, and at each
    /// step while it is set.
    delay_us: i64,
    /// `loading-process-events-interval-bytes`, read with each progress
    /// note.
    interval_bytes: u64,
    /// Whether this load has started serving clients.
    served: bool,
}

/// How often, in keys and commands, the progress is noted.
const NOTE_EVERY: u64 = 1024;

impl<'a> Pacer<'a> {
    /// For a load of `total` bytes.
    pub fn new(server: &'a Server, total: u64) -> Pacer<'a> {
        server.load_progress.total_bytes.store(total, Ordering::Relaxed);
        server.load_progress.loaded_bytes.store(0, Ordering::Relaxed);
        Pacer { server, items: 0, delay_us: 0, interval_bytes: u64::MAX, served: false }
    }

    /// Before each command of an AOF: Redis serves clients at the first.
    pub fn command(&mut self, loaded_bytes: impl FnOnce() -> u64) -> Result<(), Stopped> {
        self.serve();
        self.key(loaded_bytes)
    }

    fn serve(&mut self) {
        if !self.served {
            self.served = true;
            self.server.serve_during_load();
        }
    }

    /// Before each key, with the bytes read so far (a cheap call: it is
    /// made at every key, so that a load of big values starts serving
    /// after `loading-process-events-interval-bytes` as Redis's does,
    /// however few keys that is).
    pub fn key(&mut self, loaded_bytes: impl FnOnce() -> u64) -> Result<(), Stopped> {
        if self.server.shutdown.load(Ordering::Relaxed) {
            return Err(Stopped);
        }
        let loaded = loaded_bytes();
        if self.items.is_multiple_of(NOTE_EVERY) {
            self.server.load_progress.loaded_bytes.store(loaded, Ordering::Relaxed);
            let config = self.server.config.read();
            (self.delay_us, self.interval_bytes) = (config.key_load_delay_us, config.loading_process_events_interval_bytes);
        }
        if !self.served && loaded >= self.interval_bytes {
            self.server.load_progress.loaded_bytes.store(loaded, Ordering::Relaxed);
            self.serve();
        }
        self.items += 1;
        if self.delay_us != 0 {
            // A slowed load (tests) reads the delay at every step, so that
            // setting it to 0 speeds up the very next one.
            self.delay_us = self.server.config.read().key_load_delay_us;
        }
        match self.delay_us {
            0 => {}
            // Redis's debugDelay: a negative -n sleeps 1 us once in n.
            n if n < 0 => {
                if self.items.is_multiple_of(n.unsigned_abs()) {
                    std::thread::sleep(std::time::Duration::from_micros(1));
                }
            }
            n => std::thread::sleep(std::time::Duration::from_micros(n as u64)),
        }
        Ok(())
    }

    /// The whole file is read.
    pub fn done(&self, total: u64) {
        self.server.load_progress.loaded_bytes.store(total, Ordering::Relaxed);
    }
}
