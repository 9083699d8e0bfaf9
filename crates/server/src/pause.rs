//! Client pauses, one per purpose, as Redis 7.0's `pauseClients`: CLIENT
//! PAUSE, a shutdown's final save and a failover (FAILOVER, or a cluster
//! manual failover) each hold their own, and requests are held by the
//! strictest one in effect. So ending one (CLIENT UNPAUSE, FAILOVER ABORT)
//! leaves the others as they were.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Why clients are paused (Redis's `pause_purpose`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    ClientCommand,
    Shutdown,
    Failover,
}

/// What a pause holds back, the weaker first (Redis's `pause_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Writes, and commands that may feed the replication stream.
    Writes,
    All,
}

#[derive(Clone, Copy, Debug)]
struct Pause {
    until_ms: u64,
    mode: Mode,
}

#[derive(Default)]
pub struct Pauses {
    by_purpose: Mutex<[Option<Pause>; 3]>,
    /// The earliest end of a purpose's pause, 0 when there is none: the
    /// one atomic load every request pays when nothing is paused. Until
    /// then the pause in effect is `strictest` (0 none, 1 WRITE, 2 ALL),
    /// read without the lock.
    earliest_end_ms: AtomicU64,
    strictest: AtomicU8,
    /// Counts the times the pause in effect got weaker (ALL to WRITE, or
    /// ended), so that a worker knows to look at what it holds again, as
    /// Redis's `unblockPostponedClients`.
    weakened: AtomicU64,
}

impl Pauses {
    /// Pauses for `purpose` until `until_ms` (Unix ms; `u64::MAX`: until
    /// unpaused). A purpose paused already keeps the later end and the
    /// stricter mode of the two; one that has ended by `now_ms` is
    /// replaced.
    pub fn pause(&self, purpose: Purpose, until_ms: u64, mode: Mode, now_ms: u64) {
        let mut by_purpose = self.by_purpose.lock();
        let slot = &mut by_purpose[purpose as usize];
        *slot = match slot.filter(|p| p.until_ms > now_ms) {
            Some(p) => Some(Pause { until_ms: p.until_ms.max(until_ms), mode: p.mode.max(mode) }),
            // One that ends at once (CLIENT PAUSE 0) is none.
            None => (until_ms > now_ms).then_some(Pause { until_ms, mode }),
        };
        self.settle(&by_purpose, None, now_ms);
    }

    /// Ends `purpose`'s pause. Workers learn of it from
    /// `Message::Resume`, which the caller sends.
    pub fn unpause(&self, purpose: Purpose) {
        let mut by_purpose = self.by_purpose.lock();
        let before = strictest(&by_purpose, 0);
        by_purpose[purpose as usize] = None;
        self.settle(&by_purpose, before, 0);
    }

    /// The strictest pause in effect at `now_ms`, if any. Costs one atomic
    /// load and no clock read when nothing is paused, and takes no lock
    /// until a pause's end.
    pub fn in_effect(&self, now_ms: impl FnOnce() -> u64) -> Option<Mode> {
        let earliest = self.earliest_end_ms.load(Ordering::Acquire);
        if earliest == 0 {
            return None;
        }
        let now = now_ms();
        if now < earliest {
            return match self.strictest.load(Ordering::Acquire) {
                1 => Some(Mode::Writes),
                2 => Some(Mode::All),
                _ => None,
            };
        }
        let mut by_purpose = self.by_purpose.lock();
        let before = strictest(&by_purpose, 0);
        for slot in by_purpose.iter_mut() {
            if slot.is_some_and(|p| p.until_ms <= now) {
                *slot = None;
            }
        }
        self.settle(&by_purpose, before, now)
    }

    /// When the pause in effect may next change by itself: the earliest
    /// end of a purpose's pause (Unix ms), if any.
    pub fn next_end_ms(&self) -> Option<u64> {
        Some(self.earliest_end_ms.load(Ordering::Acquire)).filter(|&end| end != 0)
    }

    /// How many times the pause in effect has got weaker.
    pub fn weakened(&self) -> u64 {
        self.weakened.load(Ordering::Acquire)
    }

    /// Recomputes what readers see without the lock after a change, and
    /// counts a weakening.
    fn settle(&self, by_purpose: &[Option<Pause>; 3], before: Option<Mode>, now: u64) -> Option<Mode> {
        let after = strictest(by_purpose, now);
        self.strictest.store(after.map_or(0, |mode| mode as u8 + 1), Ordering::Release);
        let earliest = by_purpose.iter().flatten().map(|p| p.until_ms).min().unwrap_or(0);
        self.earliest_end_ms.store(earliest, Ordering::Release);
        if after < before {
            self.weakened.fetch_add(1, Ordering::AcqRel);
        }
        after
    }
}

/// The strictest mode among the pauses that last past `now_ms` (`None` <
/// `Some(Writes)` < `Some(All)`).
fn strictest(by_purpose: &[Option<Pause>; 3], now_ms: u64) -> Option<Mode> {
    by_purpose.iter().flatten().filter(|p| p.until_ms > now_ms).map(|p| p.mode).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strictest_pause_in_effect_holds_and_each_purpose_ends_alone() {
        let pauses = Pauses::default();
        assert_eq!(pauses.in_effect(|| 0), None);
        pauses.pause(Purpose::Failover, u64::MAX, Mode::Writes, 0);
        pauses.pause(Purpose::ClientCommand, 2_000, Mode::All, 0);
        assert_eq!(pauses.in_effect(|| 1_000), Some(Mode::All));
        assert_eq!(pauses.next_end_ms(), Some(2_000));
        let weakened = pauses.weakened();
        // CLIENT UNPAUSE ends the command's pause, not the failover's.
        pauses.unpause(Purpose::ClientCommand);
        assert_eq!(pauses.in_effect(|| 1_000), Some(Mode::Writes));
        assert_eq!(pauses.weakened(), weakened + 1);
        pauses.unpause(Purpose::Failover);
        assert_eq!(pauses.in_effect(|| 1_000), None);
        assert_eq!(pauses.weakened(), weakened + 2);
    }

    #[test]
    fn a_pause_ends_at_its_time_and_a_repeated_one_widens() {
        let pauses = Pauses::default();
        pauses.pause(Purpose::ClientCommand, 2_000, Mode::All, 0);
        pauses.pause(Purpose::ClientCommand, 1_500, Mode::Writes, 1_000);
        pauses.pause(Purpose::Shutdown, 3_000, Mode::Writes, 1_000);
        assert_eq!(pauses.in_effect(|| 1_999), Some(Mode::All));
        assert_eq!(pauses.in_effect(|| 2_000), Some(Mode::Writes));
        assert_eq!(pauses.next_end_ms(), Some(3_000));
        assert_eq!(pauses.in_effect(|| 3_000), None);
        assert_eq!(pauses.next_end_ms(), None);
        assert_eq!(pauses.weakened(), 2);
        // A pause that ends at once hides no other.
        pauses.pause(Purpose::Failover, u64::MAX, Mode::Writes, 3_000);
        pauses.pause(Purpose::ClientCommand, 0, Mode::Writes, 3_000);
        assert_eq!(pauses.in_effect(|| 3_000), Some(Mode::Writes));
        pauses.unpause(Purpose::Failover);
        // A pause that has ended lends a new one of its purpose nothing.
        pauses.pause(Purpose::ClientCommand, 5_000, Mode::All, 4_000);
        pauses.pause(Purpose::ClientCommand, 7_000, Mode::Writes, 6_000);
        assert_eq!(pauses.in_effect(|| 6_000), Some(Mode::Writes));
    }
}
