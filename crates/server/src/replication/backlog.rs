//! The replication backlog: the stream of changes as replicas read it.
//!
//! Offsets are Redis's: `end` counts every byte ever fed (INFO
//! master_repl_offset), and a replica that has applied the stream up to
//! offset `o` is at position `o`; PSYNC asks for byte `o + 1`. The backlog
//! holds the last bytes of the stream: at least `repl-backlog-size` of
//! them (for partial resyncs after a dropped link, as Redis's), and
//! everything from the oldest position an attached replica still has to
//! be sent (as Redis's replication buffer, which replicas share).
//!
//! Under `appendfsync always` a record may be sent to replicas only once
//! the journal has it on disk: a replica must never show a write that the
//! master's crash could still take away. Each record fed then carries a
//! mark, its start offset and the journal position it needs;
//! [`Backlog::sendable_end`] stops before the first record not yet durable.
//! The stream's order and the journal's can differ between records of
//! different keys (each is appended under the keys' shard locks, to two
//! buffers), so marks are scanned in stream order, not searched by LSN.

use std::collections::VecDeque;

/// Below this many consumed bytes at its front, the buffer is not moved.
const COMPACT_AT: usize = 64 << 10;

pub struct Backlog {
    /// The held bytes are `buf[head..]`: offsets `end - held + 1 ..= end`.
    buf: Vec<u8>,
    head: usize,
    end: u64,
    /// The database of the stream's last record; `None` makes the next
    /// record begin with a SELECT (a new replica needs one).
    pub selected_db: Option<usize>,
    /// `repl-backlog-size`.
    size: u64,
    /// (start offset of a record, journal position it needs on disk).
    marks: VecDeque<(u64, u64)>,
    /// (replica id, position it has been sent up to): bytes after the
    /// smallest are kept whatever `size` says.
    pins: Vec<(u64, u64)>,
}

impl Backlog {
    /// A backlog whose stream goes on from offset `end`.
    pub fn new(end: u64, size: u64) -> Backlog {
        Backlog { buf: Vec::new(), head: 0, end, selected_db: None, size, marks: VecDeque::new(), pins: Vec::new() }
    }

    /// A backlog of a master's stream proxied from `end` on, in database `db`.
    pub fn proxied(end: u64, size: u64, db: usize) -> Backlog {
        Backlog { selected_db: Some(db), ..Backlog::new(end, size) }
    }

    /// Offset of the last byte fed (master_repl_offset).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes held (repl_backlog_histlen).
    pub fn held(&self) -> u64 {
        (self.buf.len() - self.head) as u64
    }

    /// Offset of the first byte held (repl_backlog_first_byte_offset).
    pub fn first_byte_offset(&self) -> u64 {
        self.end - self.held() + 1
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes the buffer holds beyond `repl-backlog-size`: what pinned
    /// replicas keep and the room consumed bytes still take before a
    /// compaction. Eviction does not count them (Redis's replicas'
    /// share of its replication buffer): they come and go with the
    /// replicas' progress, and evicting keys for them would evict the
    /// dataset away while a replica lags.
    pub fn beyond_size(&self) -> u64 {
        self.memory().saturating_sub(self.size)
    }

    /// The buffer's bytes, whatever of them are held (Redis's
    /// `mem_total_replication_buffers`).
    pub fn memory(&self) -> u64 {
        self.buf.capacity() as u64
    }

    pub fn set_size(&mut self, size: u64) {
        self.size = size;
        self.trim();
    }

    /// Appends a record: a SELECT first when `db` is not the stream's
    /// current database (`None`: the record runs in no database), then
    /// what `encode` writes. `lsn` is the journal position the record
    /// needs durable before it is sent (0: none). Returns the new end.
    pub fn feed(&mut self, db: Option<usize>, lsn: u64, encode: impl FnOnce(&mut Vec<u8>, &mut Option<usize>)) -> u64 {
        let start = self.end;
        let before = self.buf.len();
        if let Some(db) = db {
            if self.selected_db != Some(db) {
                keel_journal::encode_select(&mut self.buf, db);
                self.selected_db = Some(db);
            }
        }
        encode(&mut self.buf, &mut self.selected_db);
        self.end += (self.buf.len() - before) as u64;
        if lsn > 0 {
            self.marks.push_back((start, lsn));
        }
        self.trim();
        self.end
    }

    /// The bytes after position `pos`, at most `max`; `None` if some of
    /// them are no longer held.
    pub fn read(&self, pos: u64, upto: u64) -> Option<&[u8]> {
        let first = self.end - self.held();
        if pos < first || upto > self.end || pos > upto {
            return None;
        }
        let from = self.head + (pos - first) as usize;
        Some(&self.buf[from..from + (upto - pos) as usize])
    }

    /// Where a replica at `pos` may be sent up to when the journal is
    /// durable up to `durable`: the stream's end, or the start of the
    /// first record after `pos` still waiting for the disk.
    pub fn sendable_end(&self, pos: u64, durable: u64) -> u64 {
        let first = self.marks.partition_point(|&(start, _)| start < pos);
        self.marks.range(first..).find(|&&(_, lsn)| lsn > durable).map_or(self.end, |&(start, _)| start)
    }

    /// Keeps the bytes after `pos` for replica `id` (replacing its pin).
    pub fn pin(&mut self, id: u64, pos: u64) {
        match self.pins.iter_mut().find(|p| p.0 == id) {
            Some(p) => p.1 = pos,
            None => self.pins.push((id, pos)),
        }
        self.trim();
    }

    pub fn unpin(&mut self, id: u64) {
        self.pins.retain(|p| p.0 != id);
        self.trim();
    }

    /// The pinned replica furthest behind, and how far: the one a
    /// `client-output-buffer-limit` may have to drop.
    pub fn furthest_behind(&self) -> Option<(u64, u64)> {
        self.pins.iter().min_by_key(|p| p.1).map(|&(id, pos)| (id, self.end - pos))
    }

    /// How far replica `id` is behind the stream's end, while it is
    /// pinned: from its sync's start until its link is dropped.
    pub fn behind(&self, id: u64) -> Option<u64> {
        self.pins.iter().find(|p| p.0 == id).map(|&(_, pos)| self.end - pos)
    }

    /// Drops what neither `size` nor a pin keeps.
    fn trim(&mut self) {
        let mut keep_from = self.end.saturating_sub(self.size);
        if let Some(min) = self.pins.iter().map(|p| p.1).min() {
            keep_from = keep_from.min(min);
        }
        let first = self.end - self.held();
        if keep_from > first {
            self.head += (keep_from - first) as usize;
            while self.marks.front().is_some_and(|&(start, _)| start < keep_from) {
                self.marks.pop_front();
            }
        }
        if self.head >= COMPACT_AT && self.head * 2 >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
            // What a lagging replica made the buffer grow to goes back
            // once nobody needs it, as Redis frees its blocks; the room
            // left is more than a steady stream regrows to before its
            // next compaction, so that this does not repeat every time.
            let room = 2 * self.buf.len().max(self.size as usize).max(COMPACT_AT);
            if self.buf.capacity() > 2 * room {
                self.buf.shrink_to(room);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(b: &mut Backlog, db: usize, key: &str, lsn: u64) -> u64 {
        b.feed(Some(db), lsn, |out, _| keel_journal::encode_command(out, &[b"SET".as_slice(), key.as_bytes(), b"v"]))
    }

    #[test]
    fn offsets_follow_bytes_and_select_comes_when_the_db_changes() {
        let mut b = Backlog::new(100, 1 << 20);
        let end = set(&mut b, 0, "a", 0);
        let select = b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n";
        let record = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nv\r\n";
        assert_eq!(end, 100 + (select.len() + record.len()) as u64);
        assert_eq!(b.first_byte_offset(), 101);
        let end2 = set(&mut b, 0, "a", 0);
        assert_eq!(end2 - end, record.len() as u64, "no second SELECT");
        assert_eq!(b.read(end, end2), Some(&record[..]));
        assert_eq!(b.read(99, end2), None, "before the stream held");
    }

    #[test]
    fn keeps_size_bytes_and_whatever_a_pin_needs() {
        let mut b = Backlog::new(0, 100);
        b.pin(7, 0);
        for i in 0..100 {
            set(&mut b, 0, &format!("k{i}"), 0);
        }
        assert_eq!(b.first_byte_offset(), 1, "the pin keeps everything");
        assert_eq!(b.furthest_behind(), Some((7, b.end())));
        b.unpin(7);
        assert_eq!(b.held(), 100);
        assert!(b.read(b.end() - 100, b.end()).is_some());
        assert!(b.read(b.end() - 101, b.end()).is_none());
    }

    #[test]
    fn memory_a_pin_held_is_given_back_once_unpinned() {
        let mut b = Backlog::new(0, 16 << 10);
        b.pin(7, 0);
        assert_eq!(b.behind(7), Some(0));
        let value = vec![b'x'; 1 << 20];
        b.feed(Some(0), 0, |out, _| keel_journal::encode_command(out, &[b"SET".as_slice(), b"k", &value]));
        assert!(b.memory() > 1 << 20);
        assert!(b.behind(7) > Some(1 << 20));
        b.unpin(7);
        assert_eq!(b.behind(7), None);
        assert_eq!(b.held(), 16 << 10);
        assert!(b.memory() < 1 << 18, "{} bytes kept", b.memory());
        // A steady stream without replicas settles: no shrink and regrow
        // at every compaction.
        let mut capacities = Vec::new();
        for i in 0..20_000 {
            set(&mut b, 0, &format!("k{i}"), 0);
            capacities.push(b.memory());
        }
        capacities.dedup();
        assert!(capacities.len() < 5, "capacity went through {capacities:?}");
    }

    #[test]
    fn sends_nothing_past_the_first_record_not_yet_durable() {
        let mut b = Backlog::new(0, 1 << 20);
        let first = set(&mut b, 0, "a", 10);
        let second = set(&mut b, 0, "b", 30);
        set(&mut b, 0, "c", 20);
        assert_eq!(b.sendable_end(0, 0), 0);
        assert_eq!(b.sendable_end(0, 10), first);
        assert_eq!(b.sendable_end(0, 25), first, "c is durable but b before it is not");
        assert_eq!(b.sendable_end(first, 30), b.end());
        assert_eq!(b.sendable_end(second, 20), b.end());
    }
}
