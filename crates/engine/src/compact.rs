//! `CompactBytes`: an owned byte string in 16 bytes, inline when short.
//!
//! Keys and the fields, values and members of big collections are mostly
//! short: Redis's own benchmarks use keys like `memtier-1234567` (15
//! bytes). As a `Box<[u8]>` each costs a 16-byte fat pointer plus an
//! allocation (16 bytes at least in jemalloc's size classes, 32 in glibc's
//! malloc); here a string of up to 15 bytes lives in the 16 bytes
//! themselves, and a longer one costs the same as a `Box<[u8]>`. Hand-written
//! (the crates that inline strings are 24 bytes or limited to UTF-8): the
//! keyspace holds one per key, so the 8 bytes and the allocation matter.
//!
//! Layout: byte 15 tells the two forms apart. Inline, it is `INLINE | len`
//! and bytes `0..len` hold the string. On the heap, bytes `0..8` are the
//! pointer to an exactly sized `Box<[u8]>` and bytes `8..16` its length as
//! a little-endian `u64`, whose top byte (byte 15) is 0 for any length
//! below 2^56.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::ptr::NonNull;
use std::{fmt, mem, ptr};

/// Longest string kept inline.
pub const INLINE_MAX: usize = 15;

const INLINE: u8 = 0x80;

#[derive(Clone, Copy)]
#[repr(C)]
struct Heap {
    ptr: NonNull<u8>,
    len_le: [u8; 8],
}

#[repr(C)]
union Repr {
    inline: [u8; 16],
    heap: Heap,
}

pub struct CompactBytes(Repr);

// SAFETY: a `CompactBytes` owns its bytes (inline or one heap block no one
// else points to), exactly as a `Box<[u8]>` does.
unsafe impl Send for CompactBytes {}
// SAFETY: as above; `&CompactBytes` only gives out `&[u8]`.
unsafe impl Sync for CompactBytes {}

impl CompactBytes {
    fn tag(&self) -> u8 {
        // SAFETY: both forms are 16 initialised bytes, so reading them as
        // `[u8; 16]` is always valid (padding-free `repr(C)` fields).
        unsafe { self.0.inline[15] }
    }

    fn is_inline(&self) -> bool {
        self.tag() & INLINE != 0
    }

    fn inline(bytes: &[u8]) -> CompactBytes {
        debug_assert!(bytes.len() <= INLINE_MAX);
        let mut inline = [0u8; 16];
        inline[..bytes.len()].copy_from_slice(bytes);
        inline[15] = INLINE | bytes.len() as u8;
        CompactBytes(Repr { inline })
    }

    fn heap(boxed: Box<[u8]>) -> CompactBytes {
        let len = boxed.len() as u64;
        assert!(len >> 56 == 0, "byte string of {len} bytes is too long");
        let ptr = NonNull::new(Box::into_raw(boxed).cast::<u8>()).expect("Box pointers are not null");
        CompactBytes(Repr { heap: Heap { ptr, len_le: len.to_le_bytes() } })
    }

    pub fn as_bytes(&self) -> &[u8] {
        if self.is_inline() {
            let len = usize::from(self.tag() & !INLINE);
            // SAFETY: the inline form's first `len` bytes are the string.
            unsafe { &self.0.inline[..len] }
        } else {
            // SAFETY: the heap form holds a pointer to a live, exactly
            // sized `Box<[u8]>` of `len_le` bytes that this value owns.
            unsafe { &*self.heap_ptr() }
        }
    }

    /// The heap form's buffer, as `Box::into_raw` gave it.
    ///
    /// # Safety
    /// `self` must be in the heap form.
    unsafe fn heap_ptr(&self) -> *mut [u8] {
        // SAFETY: the caller says the heap form is the live one.
        let heap = unsafe { self.0.heap };
        ptr::slice_from_raw_parts_mut(heap.ptr.as_ptr(), u64::from_le_bytes(heap.len_le) as usize)
    }

    /// The string as a heap buffer, without copying when it already is one.
    pub fn into_boxed_slice(self) -> Box<[u8]> {
        if self.is_inline() {
            return self.as_bytes().into();
        }
        let me = mem::ManuallyDrop::new(self);
        // SAFETY: heap form; the pointer came from `Box::into_raw` in
        // `heap`, and `ManuallyDrop` hands its ownership over.
        unsafe { Box::from_raw(me.heap_ptr()) }
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.into_boxed_slice().into_vec()
    }

    /// Bytes allocated outside the 16 inline bytes (for MEMORY USAGE).
    pub fn heap_bytes(&self) -> usize {
        if self.is_inline() { 0 } else { self.len() }
    }
}

impl Drop for CompactBytes {
    fn drop(&mut self) {
        if !self.is_inline() {
            // SAFETY: as in `into_boxed_slice`; this is the last use.
            drop(unsafe { Box::from_raw(self.heap_ptr()) });
        }
    }
}

impl Deref for CompactBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for CompactBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Borrow<[u8]> for CompactBytes {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl Default for CompactBytes {
    fn default() -> Self {
        CompactBytes::inline(&[])
    }
}

impl Clone for CompactBytes {
    fn clone(&self) -> Self {
        CompactBytes::from(self.as_bytes())
    }
}

impl From<&[u8]> for CompactBytes {
    fn from(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE_MAX { CompactBytes::inline(bytes) } else { CompactBytes::heap(bytes.into()) }
    }
}

impl<const N: usize> From<&[u8; N]> for CompactBytes {
    fn from(bytes: &[u8; N]) -> Self {
        CompactBytes::from(&bytes[..])
    }
}

impl From<Box<[u8]>> for CompactBytes {
    fn from(bytes: Box<[u8]>) -> Self {
        if bytes.len() <= INLINE_MAX { CompactBytes::inline(&bytes) } else { CompactBytes::heap(bytes) }
    }
}

impl From<Vec<u8>> for CompactBytes {
    fn from(bytes: Vec<u8>) -> Self {
        if bytes.len() <= INLINE_MAX { CompactBytes::inline(&bytes) } else { CompactBytes::heap(bytes.into()) }
    }
}

impl From<CompactBytes> for Vec<u8> {
    fn from(bytes: CompactBytes) -> Self {
        bytes.into_vec()
    }
}

impl PartialEq for CompactBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CompactBytes {}

impl PartialEq<[u8]> for CompactBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

impl PartialOrd for CompactBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CompactBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

/// Hashes as `[u8]` does, so that maps keyed by `CompactBytes` can be
/// searched with a `&[u8]` (the `Borrow` contract).
impl Hash for CompactBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for CompactBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_bytes(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash + ?Sized>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn is_16_bytes() {
        assert_eq!(mem::size_of::<CompactBytes>(), 16);
    }

    #[test]
    fn every_length_round_trips_through_every_constructor() {
        for len in 0..=40usize {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 255) as u8).collect();
            let made = [
                CompactBytes::from(&bytes[..]),
                CompactBytes::from(bytes.clone()),
                CompactBytes::from(bytes.clone().into_boxed_slice()),
            ];
            for c in made {
                assert_eq!(c.as_bytes(), &bytes[..]);
                assert_eq!(c.is_inline(), len <= INLINE_MAX, "{len}");
                assert_eq!(c.heap_bytes(), if len <= INLINE_MAX { 0 } else { len });
                assert_eq!(hash_of(&c), hash_of(&bytes[..]));
                let copy = c.clone();
                assert_eq!(copy, c);
                assert_eq!(c.into_vec(), bytes);
                assert_eq!(&*copy.into_boxed_slice(), &bytes[..]);
            }
        }
    }

    #[test]
    fn orders_and_looks_up_as_byte_slices() {
        use std::collections::{BTreeSet, HashMap};
        let words: Vec<&[u8]> = vec![b"", b"a", b"ab", b"b", b"0123456789abcdef", b"0123456789abcde", b"\xff"];
        let set: BTreeSet<CompactBytes> = words.iter().map(|w| CompactBytes::from(*w)).collect();
        let mut sorted = words.clone();
        sorted.sort();
        assert_eq!(set.iter().map(|c| c.as_bytes()).collect::<Vec<_>>(), sorted);
        let map: HashMap<CompactBytes, usize> = words.iter().enumerate().map(|(i, w)| ((*w).into(), i)).collect();
        for (i, w) in words.iter().enumerate() {
            assert_eq!(map.get(*w), Some(&i));
        }
    }
}
