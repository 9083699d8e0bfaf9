//! Lazy freeing: big values and whole tables are dropped on a background
//! thread, off the serving path (Redis's `lazyfree.c`, bio's LAZY_FREE job).
//!
//! Freeing a hash with a million fields, or a database of ten million keys,
//! is a million `free` calls: tens to hundreds of milliseconds during which
//! the worker that runs the command serves nobody, and the shard lock it
//! holds blocks every other worker wanting that shard. UNLINK, FLUSHDB
//! ASYNC, FLUSHALL ASYNC and the `lazyfree-lazy-*` directives hand what
//! they removed to [`drop_value`] or [`drop_async`] instead: the key is gone
//! from the keyspace at once, its memory comes back shortly after.
//!
//! The hand-off is a bounded channel of `QUEUE_MAX` items to one dropper
//! thread. At the bound the caller drops the item itself: the command is
//! slower but memory never piles up behind a dropper that cannot keep up,
//! and nothing blocks. As in Redis, only values whose freeing costs more
//! than `EFFORT_THRESHOLD` allocations travel: for a small value the
//! hand-off costs more than the `free`.
//!
//! The dropper is process-wide (a server has one; tests that start several
//! in one process share it harmlessly: dropping needs no server state).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use keel_engine::{Entry, Value};

/// Items the dropper thread may have queued; past this, callers drop inline.
pub const QUEUE_MAX: usize = 1024;

/// Redis's `LAZYFREE_THRESHOLD`: values whose freeing costs more than this
/// many allocations are freed in the background.
pub const EFFORT_THRESHOLD: usize = 64;

/// Bytes that count as one unit of freeing effort for values whose effort
/// is not an element count (long strings): freeing a 4 MiB buffer returns
/// pages to the kernel and costs about what 64 small frees do.
const BYTES_PER_EFFORT: usize = 64 * 1024;

type Job = (Box<dyn Send>, u64);

struct Dropper {
    tx: SyncSender<Job>,
}

/// Objects handed over and not yet freed (INFO lazyfree_pending_objects).
static PENDING: AtomicU64 = AtomicU64::new(0);
/// Objects freed by the dropper (INFO lazyfreed_objects).
static FREED: AtomicU64 = AtomicU64::new(0);

fn dropper() -> Option<&'static Dropper> {
    static DROPPER: OnceLock<Option<Dropper>> = OnceLock::new();
    DROPPER
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Job>(QUEUE_MAX);
            let spawned = std::thread::Builder::new().name("keel-lazyfree".into()).spawn(move || {
                crate::process::pin_thread(crate::process::CpuRole::Bio);
                while let Ok((item, objects)) = rx.recv() {
                    drop(item);
                    // Counted freed before no longer pending, so that a
                    // reader summing the two never sees the object vanish.
                    FREED.fetch_add(objects, Ordering::Relaxed);
                    PENDING.fetch_sub(objects, Ordering::Relaxed);
                }
            });
            match spawned {
                Ok(_) => Some(Dropper { tx }),
                Err(e) => {
                    tracing::warn!("lazyfree thread did not start, freeing inline: {e}");
                    None
                }
            }
        })
        .as_ref()
}

/// Redis's `lazyfreeGetFreeEffort`: about how many allocations freeing
/// `value` costs.
pub fn free_effort(value: &Value) -> usize {
    match value {
        Value::Str(_) => 1 + value.heap_size() / BYTES_PER_EFFORT,
        // A compact encoding is one allocation; a list one per node.
        _ if matches!(value.encoding(), "listpack" | "intset") => 1,
        // Redis's effort for a quicklist: its node count (O(1)).
        Value::List(l) => l.node_count(),
        // Tables and skiplists: an allocation or more per element.
        _ => value.element_count(),
    }
}

/// Frees a removed entry: in the background if it is big, here otherwise.
/// Returns true if it went to the background.
pub fn drop_value(entry: Entry) -> bool {
    if free_effort(&entry.value) <= EFFORT_THRESHOLD {
        return false;
    }
    drop_async(entry, 1)
}

/// As `drop_value`, for a value overwritten in place.
pub fn drop_overwritten(value: Value) -> bool {
    if free_effort(&value) <= EFFORT_THRESHOLD {
        return false;
    }
    drop_async(value, 1)
}

/// Hands `item` (counting as `objects` for INFO) to the dropper thread;
/// drops it here if the queue is full or the thread is missing. Returns
/// true if it went to the background.
pub fn drop_async<T: Send + 'static>(item: T, objects: u64) -> bool {
    let Some(d) = dropper() else { return false };
    PENDING.fetch_add(objects, Ordering::Relaxed);
    match d.tx.try_send((Box::new(item), objects)) {
        Ok(()) => true,
        Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
            PENDING.fetch_sub(objects, Ordering::Relaxed);
            drop(job);
            false
        }
    }
}

/// INFO memory `lazyfree_pending_objects`.
pub fn pending_objects() -> u64 {
    PENDING.load(Ordering::Relaxed)
}

/// INFO stats `lazyfreed_objects`.
pub fn freed_objects() -> u64 {
    FREED.load(Ordering::Relaxed)
}

/// CONFIG RESETSTAT (Redis's `lazyfreeResetStats`).
pub fn reset_freed_objects() {
    FREED.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_engine::Str;

    #[test]
    fn small_values_are_freed_inline_big_ones_in_the_background() {
        let small = Entry::new(Value::Str(Str::from_bytes(b"hello")), 0);
        assert!(!drop_value(small));
        let big = Entry::new(Value::Str(Str::raw(vec![0u8; 8 << 20])), 0);
        let before = freed_objects();
        assert!(drop_value(big));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while freed_objects() == before {
            assert!(std::time::Instant::now() < deadline, "dropper never freed the value");
            std::thread::yield_now();
        }
    }
}
