//! The CRC64 of an RDB stream, on the reading thread or on a helper thread.
//!
//! Loading a big file at start is bound by the one thread that parses it
//! (others build and insert the values), and the checksum is a fifth of
//! that thread's work. [`Crc::background`] moves it to a helper thread:
//! the reader copies the bytes it consumes into 1 MB batches (a memcpy is
//! several times cheaper than the CRC) and hands them over a channel
//! bounded to [`BATCHES_IN_FLIGHT`], so the helper never falls more than
//! 4 MB behind and the memory stays bounded; emptied batches come back to
//! be refilled.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use crate::crc64::crc64;

/// Bytes gathered before a batch goes to the helper.
const BATCH_BYTES: usize = 1 << 20;
/// Batches queued for the helper before the reader waits for it.
const BATCHES_IN_FLIGHT: usize = 4;

pub(crate) enum Crc {
    /// Computed on the reading thread as the bytes are consumed.
    Inline(u64),
    Background(Helper),
}

pub(crate) struct Helper {
    pending: Vec<u8>,
    to_helper: SyncSender<Vec<u8>>,
    emptied: Receiver<Vec<u8>>,
    helper: JoinHandle<u64>,
}

impl Crc {
    /// Continues `crc` (what was consumed so far) on a helper thread; stays
    /// inline if the thread cannot start.
    pub(crate) fn background(crc: u64) -> Crc {
        let (to_helper, batches) = sync_channel::<Vec<u8>>(BATCHES_IN_FLIGHT);
        let (give_back, emptied) = sync_channel::<Vec<u8>>(BATCHES_IN_FLIGHT + 1);
        let spawned = std::thread::Builder::new().name("keel-rdb-crc".into()).spawn(move || {
            let mut crc = crc;
            for mut batch in batches {
                crc = crc64(crc, &batch);
                batch.clear();
                // Full: the reader allocates another batch instead.
                let _ = give_back.try_send(batch);
            }
            crc
        });
        match spawned {
            Ok(helper) => Crc::Background(Helper { pending: Vec::with_capacity(BATCH_BYTES), to_helper, emptied, helper }),
            Err(_) => Crc::Inline(crc),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Crc::Inline(crc) => *crc = crc64(*crc, bytes),
            Crc::Background(h) => {
                h.pending.extend_from_slice(bytes);
                if h.pending.len() >= BATCH_BYTES {
                    let next = h.emptied.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH_BYTES));
                    let full = std::mem::replace(&mut h.pending, next);
                    // The helper only stops when this sender is dropped.
                    let _ = h.to_helper.send(full);
                }
            }
        }
    }

    /// The CRC of everything consumed so far. A background CRC waits for
    /// its helper and continues inline from here.
    pub(crate) fn value(&mut self) -> u64 {
        let crc = match std::mem::replace(self, Crc::Inline(0)) {
            Crc::Inline(crc) => crc,
            Crc::Background(h) => {
                let Helper { pending, to_helper, helper, .. } = h;
                let _ = to_helper.send(pending);
                drop(to_helper);
                // A helper that panicked cannot have computed anything else.
                helper.join().unwrap_or_else(|_| panic!("the CRC64 thread panicked"))
            }
        };
        *self = Crc::Inline(crc);
        crc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_equals_inline() {
        let data: Vec<u8> = (0..5 * BATCH_BYTES + 12345).map(|i| (i * 7 + i / 3) as u8).collect();
        let mut inline = Crc::Inline(0);
        let mut background = Crc::background(0);
        for chunk in data.chunks(777) {
            inline.update(chunk);
            background.update(chunk);
        }
        assert_eq!(background.value(), inline.value());
        assert_eq!(background.value(), crc64(0, &data));
        // After the value, updates go on inline.
        background.update(b"more");
        assert_eq!(background.value(), crc64(crc64(0, &data), b"more"));
    }
}
