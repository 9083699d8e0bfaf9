//! `Listpack`: a list of byte strings packed into one allocation, the
//! compact encoding of small hashes, sorted sets and list nodes.
//!
//! Redis's listpack idea, simplified to what Keel needs. The buffer is
//!
//! ```text
//! [count: u16 LE] [entry] [entry] ...
//! entry = [len: LEB128] [bytes; len] [backlen: reversed LEB128]
//! ```
//!
//! `count` saturates at `COUNT_UNKNOWN` (as Redis's listpack header does):
//! only listpacks of more than 65534 entries, which need limits far above
//! the defaults, are then counted by walking them.
//!
//! where `backlen` is the size of `len` + `bytes`, written so that it can
//! be decoded from its last byte backwards. Entries can therefore be walked
//! from either end, which the list commands need (RPOP, LRANGE with negative
//! indexes) without a second index. A 10-byte entry costs 12 bytes; a Rust
//! `Vec<Box<[u8]>>` would cost 16 bytes of pointer plus an allocation each.
//!
//! The buffer is exactly sized (`Box<[u8]>`, 16 bytes inline): small
//! collections are the many ones, so per-collection overhead matters more
//! than the realloc each edit costs on at most a few kilobytes.
//!
//! Offsets returned by the cursor API point at an entry's first byte; they
//! stay valid until the next edit.

use std::fmt;

use smallvec::SmallVec;

const HEADER: usize = 2;

/// The header's count when the listpack holds at least this many entries.
const COUNT_UNKNOWN: u16 = u16::MAX;

#[derive(Clone, PartialEq, Eq)]
pub struct Listpack {
    buf: Box<[u8]>,
}

impl Default for Listpack {
    fn default() -> Self {
        Listpack::new()
    }
}

impl fmt::Debug for Listpack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(String::from_utf8_lossy)).finish()
    }
}

fn leb_len(mut v: usize) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// `v` in LEB128 (7 bits per byte, low bits first, high bit = more).
fn leb(mut v: usize) -> ([u8; 10], usize) {
    let mut out = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        out[n] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        n += 1;
    }
    out[n] = v as u8;
    (out, n + 1)
}

/// Encodes one entry.
fn encode(out: &mut impl Extend<u8>, data: &[u8]) {
    let (header, n) = leb(data.len());
    out.extend(header[..n].iter().copied());
    out.extend(data.iter().copied());
    let (mut back, m) = leb(n + data.len());
    back[..m].reverse();
    out.extend(back[..m].iter().copied());
}

fn encoded_len(data: &[u8]) -> usize {
    let inner = leb_len(data.len()) + data.len();
    inner + leb_len(inner)
}

impl Listpack {
    pub fn new() -> Listpack {
        Listpack { buf: vec![0; HEADER].into_boxed_slice() }
    }

    /// A listpack holding `items` in order.
    #[expect(clippy::should_implement_trait, reason = "FromIterator would need owned items")]
    pub fn from_iter<'a>(items: impl IntoIterator<Item = &'a [u8]>) -> Listpack {
        let mut buf = vec![0; HEADER];
        let mut count = 0;
        for item in items {
            encode(&mut buf, item);
            count += 1;
        }
        Self::set_len(&mut buf, count);
        Listpack { buf: buf.into_boxed_slice() }
    }

    pub fn len(&self) -> usize {
        match u16::from_le_bytes(self.buf[..HEADER].try_into().expect("header")) {
            COUNT_UNKNOWN => self.count_by_walking(),
            n => usize::from(n),
        }
    }

    fn count_by_walking(&self) -> usize {
        let (mut n, mut off) = (0, HEADER);
        while off < self.buf.len() {
            off = self.entry_at(off).1;
            n += 1;
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total encoded size in bytes (what `list-max-listpack-size` limits).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    fn set_len(buf: &mut [u8], len: usize) {
        let count = u16::try_from(len).unwrap_or(COUNT_UNKNOWN);
        buf[..HEADER].copy_from_slice(&count.to_le_bytes());
    }

    /// The entry at `offset` and the offset of the next one.
    fn entry_at(&self, offset: usize) -> (&[u8], usize) {
        let (len, hdr) = read_leb(&self.buf[offset..]);
        let start = offset + hdr;
        let end = start + len;
        (&self.buf[start..end], end + leb_len(hdr + len))
    }

    /// Offset of the entry that ends just before `end`.
    fn entry_before(&self, end: usize) -> usize {
        let mut v = 0usize;
        let mut shift = 0;
        let mut p = end;
        loop {
            p -= 1;
            let b = self.buf[p];
            v |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        p - v
    }

    pub fn first(&self) -> Option<usize> {
        (!self.is_empty()).then_some(HEADER)
    }

    pub fn last(&self) -> Option<usize> {
        (!self.is_empty()).then(|| self.entry_before(self.buf.len()))
    }

    /// The offset after the entry at `offset`, if there is another entry.
    pub fn next(&self, offset: usize) -> Option<usize> {
        let (_, next) = self.entry_at(offset);
        (next < self.buf.len()).then_some(next)
    }

    pub fn prev(&self, offset: usize) -> Option<usize> {
        (offset > HEADER).then(|| self.entry_before(offset))
    }

    /// The bytes of the entry at `offset`.
    pub fn at(&self, offset: usize) -> &[u8] {
        self.entry_at(offset).0
    }

    /// Offset of entry `index`; negative indexes count from the end.
    pub fn seek(&self, index: isize) -> Option<usize> {
        let len = self.len() as isize;
        if index >= len || index < -len {
            return None;
        }
        if index >= 0 {
            let mut off = HEADER;
            for _ in 0..index {
                off = self.entry_at(off).1;
            }
            Some(off)
        } else {
            let mut off = self.buf.len();
            for _ in 0..-index {
                off = self.entry_before(off);
            }
            Some(off)
        }
    }

    pub fn get(&self, index: isize) -> Option<&[u8]> {
        self.seek(index).map(|o| self.at(o))
    }

    pub fn iter(&self) -> Iter<'_> {
        Iter { lp: self, front: HEADER, back: self.buf.len(), left: self.len() }
    }

    /// Replaces the bytes `[from, to)` with `insert` encoded, in place: the
    /// buffer is resized with `realloc` (which often grows or shrinks in
    /// place) and the tail moved once, instead of building a new buffer.
    fn splice(&mut self, from: usize, to: usize, insert: &[&[u8]], count_delta: isize) {
        let mut encoded: SmallVec<[u8; 64]> = SmallVec::new();
        for d in insert {
            encode(&mut encoded, d);
        }
        let added = encoded.len();
        let len = (self.len() as isize + count_delta) as usize;
        let mut buf = std::mem::take(&mut self.buf).into_vec();
        let old_len = buf.len();
        let new_len = old_len - (to - from) + added;
        if new_len > old_len {
            buf.reserve_exact(new_len - old_len);
            buf.resize(new_len, 0);
            buf.copy_within(to..old_len, from + added);
        } else {
            buf.copy_within(to..old_len, from + added);
            buf.truncate(new_len);
        }
        buf[from..from + added].copy_from_slice(&encoded);
        Self::set_len(&mut buf, len);
        self.buf = buf.into_boxed_slice();
    }

    /// Inserts `data` before the entry at `offset` (or at the end when
    /// `offset == self.bytes()`). Returns the new entry's offset.
    pub fn insert_at(&mut self, offset: usize, data: &[u8]) -> usize {
        self.splice(offset, offset, &[data], 1);
        offset
    }

    /// Inserts several entries before `offset` in one reallocation.
    pub fn insert_many_at(&mut self, offset: usize, items: &[&[u8]]) {
        self.splice(offset, offset, items, items.len() as isize);
    }

    pub fn push_back(&mut self, data: &[u8]) {
        self.insert_at(self.buf.len(), data);
    }

    pub fn push_front(&mut self, data: &[u8]) {
        self.insert_at(HEADER, data);
    }

    /// Replaces the entry at `offset`; returns the offset (unchanged).
    pub fn replace_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let (_, end) = self.entry_at(offset);
        self.splice(offset, end, &[data], 0);
        offset
    }

    /// Removes `count` consecutive entries starting at `offset`. Returns the
    /// offset of the entry that followed them, if any.
    pub fn remove_at(&mut self, offset: usize, count: usize) -> Option<usize> {
        let mut end = offset;
        for _ in 0..count {
            end = self.entry_at(end).1;
        }
        self.splice(offset, end, &[], -(count as isize));
        (offset < self.buf.len()).then_some(offset)
    }

    /// Removes entries `[start, start + count)` by index.
    pub fn remove_range(&mut self, start: usize, count: usize) {
        if count == 0 {
            return;
        }
        if let Some(off) = self.seek(start as isize) {
            self.remove_at(off, count.min(self.len() - start));
        }
    }

    /// Keeps the entries for which `keep` is true, in one pass.
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        let mut buf = Vec::with_capacity(self.buf.len());
        buf.extend_from_slice(&[0; HEADER]);
        let mut count = 0;
        for item in self.iter() {
            if keep(item) {
                encode(&mut buf, item);
                count += 1;
            }
        }
        Self::set_len(&mut buf, count);
        self.buf = buf.into_boxed_slice();
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let off = self.first()?;
        let v = self.at(off).to_vec();
        self.remove_at(off, 1);
        Some(v)
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let off = self.last()?;
        let v = self.at(off).to_vec();
        self.remove_at(off, 1);
        Some(v)
    }

    /// Heap bytes owned (for memory accounting).
    pub fn heap_size(&self) -> usize {
        self.buf.len()
    }

    /// Bytes `data` would add as an entry.
    pub fn entry_size(data: &[u8]) -> usize {
        encoded_len(data)
    }
}

fn read_leb(bytes: &[u8]) -> (usize, usize) {
    let mut v = 0usize;
    let mut shift = 0;
    for (i, &b) in bytes.iter().enumerate() {
        v |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return (v, i + 1);
        }
        shift += 7;
    }
    unreachable!("listpack entry header is always terminated")
}

pub struct Iter<'a> {
    lp: &'a Listpack,
    front: usize,
    back: usize,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (data, next) = self.lp.entry_at(self.front);
        self.front = next;
        Some(data)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.back = self.lp.entry_before(self.back);
        Some(self.lp.entry_at(self.back).0)
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn walks_both_ways() {
        let big = vec![b'x'; 300];
        let lp = Listpack::from_iter([b"a".as_slice(), b"", &big, b"dd"]);
        assert_eq!(lp.len(), 4);
        let fwd: Vec<_> = lp.iter().collect();
        let mut back: Vec<_> = lp.iter().rev().collect();
        back.reverse();
        assert_eq!(fwd, back);
        assert_eq!(lp.get(-2), Some(big.as_slice()));
        assert_eq!(lp.get(1), Some(b"".as_slice()));
        assert_eq!(lp.get(4), None);
        assert_eq!(lp.get(-5), None);
    }

    #[test]
    fn counts_past_the_header_by_walking() {
        let n = usize::from(COUNT_UNKNOWN) + 10;
        let items: Vec<Vec<u8>> = (0..n).map(|i| i.to_string().into_bytes()).collect();
        let mut lp = Listpack::from_iter(items.iter().map(|v| v.as_slice()));
        assert_eq!(lp.len(), n);
        lp.push_back(b"x");
        assert_eq!((lp.len(), lp.get(-1)), (n + 1, Some(&b"x"[..])));
        lp.remove_range(0, 12);
        // Below the saturation point the header counts exactly again.
        assert_eq!(lp.len(), n - 11);
        assert_eq!(u16::from_le_bytes([lp.buf[0], lp.buf[1]]), COUNT_UNKNOWN - 1);
        assert_eq!(lp.iter().count(), n - 11);
    }

    #[test]
    fn empty_listpack_has_only_its_header() {
        let mut lp = Listpack::new();
        assert_eq!((lp.len(), lp.bytes(), lp.first(), lp.last()), (0, HEADER, None, None));
        lp.push_back(b"1");
        assert_eq!(lp.pop_back(), Some(b"1".to_vec()));
        assert_eq!(lp.bytes(), HEADER);
    }

    proptest! {
        #[test]
        fn edits_match_a_vec(ops in prop::collection::vec((0u8..6, any::<u16>(), prop::collection::vec(any::<u8>(), 0..200)), 0..60)) {
            let mut lp = Listpack::new();
            let mut model: Vec<Vec<u8>> = Vec::new();
            for (op, at, data) in ops {
                let i = if model.is_empty() { 0 } else { at as usize % model.len() };
                match op {
                    0 => { lp.push_back(&data); model.push(data); }
                    1 => { lp.push_front(&data); model.insert(0, data); }
                    2 if !model.is_empty() => { let o = lp.seek(i as isize).expect("index in range"); lp.replace_at(o, &data); model[i] = data; }
                    3 if !model.is_empty() => { lp.remove_range(i, 2); model.drain(i..(i + 2).min(model.len())); }
                    4 => { let o = lp.seek(i as isize).unwrap_or(lp.bytes()); lp.insert_at(o, &data); model.insert(i.min(model.len()), data); }
                    5 => { lp.retain(|e| e.len() % 2 == 0); model.retain(|e| e.len() % 2 == 0); }
                    _ => {}
                }
                prop_assert_eq!(lp.len(), model.len());
                prop_assert!(lp.iter().eq(model.iter().map(Vec::as_slice)));
                prop_assert!(lp.iter().rev().eq(model.iter().rev().map(Vec::as_slice)));
            }
        }
    }
}
