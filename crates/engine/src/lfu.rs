//! Redis's LFU counter (`evict.c`): under an LFU `maxmemory-policy` an
//! entry's access word (`Entry::access_s`) holds, as Redis's robj `lru`
//! field does, the minute of its last decay in 16 bits and a logarithmic
//! access counter in 8. OBJECT FREQ reads the counter; every lookup that
//! touches a key bumps it with probability `1 / ((counter - 5) * factor +
//! 1)`, after taking off one per `lfu-decay-time` minutes idle.

/// Redis's `LFU_INIT_VAL`: the counter of a new key, so that it is not the
/// first to go before it had a chance to be read.
pub const INIT: u8 = 5;

/// `lfu-log-factor` and `lfu-decay-time`, with the time of the access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lfu {
    /// Minutes since the Unix epoch, modulo 2^16 (`LFUGetTimeInMinutes`).
    pub now_min: u16,
    pub log_factor: u32,
    pub decay_minutes: u32,
}

impl Lfu {
    pub fn new(now_ms: u64, log_factor: u32, decay_minutes: u32) -> Lfu {
        Lfu { now_min: (now_ms / 60_000) as u16, log_factor, decay_minutes }
    }

    /// The access word of a key with `counter`, decayed as of now.
    pub fn word(self, counter: u8) -> u32 {
        (u32::from(self.now_min) << 8) | u32::from(counter)
    }

    /// The counter in `word`, less its decay since (`LFUDecrAndReturn`).
    pub fn counter(self, word: u32) -> u8 {
        let (ldt, counter) = ((word >> 8) as u16, (word & 0xff) as u8);
        if self.decay_minutes == 0 {
            return counter;
        }
        // Minutes wrap at 2^16, as Redis's `LFUTimeElapsed` allows for.
        let elapsed = u32::from(self.now_min.wrapping_sub(ldt));
        let periods = elapsed / self.decay_minutes;
        counter.saturating_sub(periods.min(255) as u8)
    }

    /// `word` after one access (`updateLFU`); `r` is uniform in [0, 1).
    pub fn touched(self, word: u32, r: f64) -> u32 {
        let counter = self.counter(word);
        let base = f64::from(counter.saturating_sub(INIT));
        let bumped = if counter < 255 && r < 1.0 / (base * f64::from(self.log_factor) + 1.0) { counter + 1 } else { counter };
        self.word(bumped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_keys_start_at_init_and_decay_one_per_period() {
        let at = |min: u64| Lfu::new(min * 60_000, 10, 2);
        let word = at(100).word(INIT);
        assert_eq!(at(100).counter(word), 5);
        assert_eq!(at(103).counter(word), 4);
        assert_eq!(at(110).counter(word), 0);
        // The minute clock wraps at 2^16.
        let late = at(65_535).word(9);
        assert_eq!(at(65_536 + 3).counter(late), 7);
        assert_eq!(Lfu { decay_minutes: 0, ..at(5000) }.counter(word), 5);
    }

    #[test]
    fn counts_logarithmically_as_redis() {
        // Redis's documented table for lfu-log-factor 10: about 100 hits
        // reach 10 (here: between 8 and 12 with a fixed sequence).
        let lfu = Lfu::new(0, 10, 1);
        let mut word = lfu.word(INIT);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            word = lfu.touched(word, (x >> 11) as f64 / (1u64 << 53) as f64);
        }
        let c = lfu.counter(word);
        assert!((8..=12).contains(&c), "{c}");
        // Below INIT + 1 every access counts; 255 is the ceiling.
        assert_eq!(lfu.counter(lfu.touched(lfu.word(0), 0.999)), 1);
        assert_eq!(lfu.counter(lfu.touched(lfu.word(255), 0.0)), 255);
    }
}
