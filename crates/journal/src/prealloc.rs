//! Incr files with pre-written space past their end, so that the fdatasync
//! after a write flushes data and nothing else.
//!
//! # Why
//!
//! An fdatasync after an append must also make the file's new size and its
//! newly allocated blocks durable: a metadata write with every sync.
//! Overwriting blocks that are already written and synced leaves no metadata
//! to flush. On this project's machine (ext4 on a virtio disk) an 18 KB
//! write + fdatasync takes 185-240 us at the median appending and 122-130
//! us overwriting (`scripts/bench_fsync_overwrite.py`); BENCHMARKS.md has
//! what it does to `appendfsync always`.
//! Databases do the same with their logs (PostgreSQL's pre-zeroed WAL
//! segments, RocksDB's recycled log files).
//!
//! # The filler, and Redis
//!
//! The space holds annotation lines, which Redis's AOF loader skips, as
//! Keel's does: `#` bytes with a `\n` at every file offset that is 511 mod
//! 512 ([`filler`]). Each write that lands inside the filler carries one
//! more `#` past its end, so whatever offset the last record ends at, what
//! follows it reads as annotations: a file cut off by a crash between two
//! writes loads as it is in redis-server 7.0, and Keel's loader drops the
//! filler (`load::prepare`). A crash in the middle of a write leaves a
//! partial record followed by filler: Keel reads that as a torn tail
//! (`aof-load-truncated`); Redis's loader calls it a format error until
//! Keel has started once on the directory, or `keel-check-aof --fix` has
//! cut it. A clean close ([`LogFile::release_space`]) cuts the filler off.
//!
//! Space is added only to a file that gets synced (after each
//! `sync_data`): under `appendfsync no` nothing is pre-written. The helper
//! syncs each piece with fdatasync, which also flushes whatever the log
//! has not synced: the server asks for space under `always` alone.
//!
//! # Never the room a rewrite needs
//!
//! Before each piece the helper checks the filesystem: after the piece,
//! at least as much must stay free as the log's directory holds, about
//! what a rewrite's base needs. On a nearly full disk it so writes nothing
//! ahead, as Redis never does, rather than take the room that would let a
//! rewrite, or the log itself, go on.
//!
//! # Around the page cache
//!
//! A piece's whole blocks are written with direct I/O, then read back
//! into the page cache (`POSIX_FADV_WILLNEED`), clean. Written through the
//! cache, they were dirty pages of the log's own file, which whichever
//! fdatasync of the writer's came first had to flush (and allocate blocks
//! for), the reply-gating sync waiting for a quarter of a megabyte of
//! filler: p99 of durable writes at 40k requests/s went from 2.3 to 1.0
//! ms without that (BENCHMARKS.md). Read back, the pages are there when
//! the writer's records land in them a few bytes at a time, which would
//! otherwise read each block from the disk first. A filesystem without
//! direct I/O (tmpfs) gets the filler through the cache.
//!
//! # Who writes which bytes
//!
//! `end` is where the next record goes; only the writer thread moves it.
//! `filled` is how far the file is written. The helper thread writes
//! filler only past `filled`, and only while `extending` is set, which the
//! writer's writes past `filled` wait out under the mutex: the two never
//! write the same byte. `filled` moves as soon as a piece is written; the
//! helper syncs the piece afterwards, outside the mutex, so the writer
//! never waits for a helper's fdatasync (it did, and under write rates that
//! keep the writer at the helper's heels, 6000-byte values at 300 MB/s,
//! that halved what `appendfsync always` sustained). The writer may so
//! overwrite filler not yet synced: correct all the same, and its own
//! fdatasync then flushes what an append's would, no less.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::file::LogFile;

/// Filler is written, then synced, this much at a time: the writer's own
/// fdatasync, when it runs meanwhile, flushes at most this much filler.
const PIECE: u64 = 256 << 10;
/// Filler lines are this long, `\n` included; Redis reads annotations of up
/// to 1023 bytes.
const LINE: u64 = 512;
/// After a failed extension (a full disk), wait this long before the next.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Direct writes go in blocks of this size and alignment (in memory and
/// in the file): the largest logical block size of common disks.
const BLOCK: u64 = 4096;

/// The filler of the piece `[k * PIECE, (k + 1) * PIECE)`, any `k`: lines
/// of `#` each ended by `\n` (a piece holds whole lines). Made once: built
/// byte by byte for every piece it took a quarter of the helper's time.
/// Aligned to [`BLOCK`], so that a direct write can take any aligned
/// stretch of it.
fn filler() -> &'static [u8] {
    #[repr(C, align(4096))]
    struct Aligned([u8; PIECE as usize]);
    static FILLER: std::sync::OnceLock<Box<Aligned>> = std::sync::OnceLock::new();
    &FILLER.get_or_init(|| {
        let mut piece = Box::new(Aligned([b'#'; PIECE as usize]));
        for line_end in (LINE - 1..PIECE).step_by(LINE as usize) {
            piece.0[line_end as usize] = b'\n';
        }
        piece
    }).0
}

struct Tail {
    filled: u64,
    /// The helper is writing past `filled`.
    extending: bool,
    /// The helper should extend when it can.
    wanted: bool,
    closed: bool,
    /// No extension before this (after a failure).
    quiet_until: Option<Instant>,
    /// The helper's fdatasync failed. Both threads sync one open file,
    /// whose write-back error Linux reports to the first fdatasync after
    /// it: the writer's own sync could then succeed over its lost pages,
    /// so the writer's next `sync_data` returns this error instead.
    failed_sync: Option<io::Error>,
}

struct Shared {
    file: File,
    /// The log's directory, whose size the helper leaves free.
    dir: PathBuf,
    /// The same file opened `O_DIRECT`, for the filler's whole blocks;
    /// `None` where the filesystem has no direct I/O (tmpfs) or it failed.
    direct: Mutex<Option<File>>,
    /// Space to keep written ahead of `end`; the helper is woken once less
    /// than half of it is left.
    ahead: Arc<AtomicU64>,
    end: AtomicU64,
    tail: Mutex<Tail>,
    cv: Condvar,
}

/// An incr file the writer appends to, with filler kept ahead of its end by
/// a helper thread (see the module docs).
pub(crate) struct PreallocatedFile {
    shared: Arc<Shared>,
}

impl PreallocatedFile {
    /// Opens `path` for writing at its current end, creating it if absent.
    pub(crate) fn open(path: &Path, ahead: Arc<AtomicU64>) -> io::Result<PreallocatedFile> {
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
        let len = file.metadata()?.len();
        let direct = OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path).ok();
        let shared = Arc::new(Shared {
            file,
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            direct: Mutex::new(direct),
            ahead,
            end: AtomicU64::new(len),
            tail: Mutex::new(Tail {
                filled: len,
                extending: false,
                wanted: false,
                closed: false,
                quiet_until: None,
                failed_sync: None,
            }),
            cv: Condvar::new(),
        });
        let helper = Arc::clone(&shared);
        crate::spawn_thread("keel-aof-prealloc", move || helper.run())?;
        Ok(PreallocatedFile { shared })
    }
}

impl Drop for PreallocatedFile {
    fn drop(&mut self) {
        self.shared.tail.lock().closed = true;
        self.shared.cv.notify_all();
    }
}

impl Shared {
    /// The helper thread: extends the filler while less than `AHEAD` is left.
    fn run(&self) {
        let mut tail = self.tail.lock();
        loop {
            if tail.closed {
                return;
            }
            if let Some(until) = tail.quiet_until {
                if Instant::now() < until {
                    self.cv.wait_until(&mut tail, until);
                    continue;
                }
                tail.quiet_until = None;
            }
            let end = self.end.load(Ordering::Acquire);
            let want_to = end + self.ahead.load(Ordering::Relaxed);
            if !tail.wanted || tail.filled >= want_to {
                tail.wanted = false;
                self.cv.wait(&mut tail);
                continue;
            }
            let from = tail.filled;
            tail.extending = true;
            drop(tail);
            let result = match self.room_to_spare(want_to - from) {
                true => self.write_piece(from, want_to, from == end),
                false => Err(io::Error::new(io::ErrorKind::StorageFull, "leaving the room a rewrite needs")),
            };
            tail = self.tail.lock();
            tail.extending = false;
            match result {
                Ok(to) => {
                    tail.filled = to;
                    self.cv.notify_all();
                    drop(tail);
                    let synced = self.file.sync_data();
                    tail = self.tail.lock();
                    if let Err(e) = synced {
                        // Handed to the writer: this sync may have been
                        // the one that flushed its records, so it writes
                        // what is unsynced again. Filler left unwritten
                        // on the disk reads as zeros, which the loader
                        // drops with the filler.
                        tracing::debug!("journal: syncing pre-written space: {e}");
                        tail.failed_sync = Some(e);
                        tail.quiet_until = Some(Instant::now() + RETRY_AFTER);
                    }
                }
                Err(e) => {
                    // The space is an optimisation: a full disk only stops
                    // it for a while. Cut off any partial filler, so that
                    // no half line is left past the next record.
                    if let Err(e) = self.file.set_len(from) {
                        tracing::warn!("journal: cutting back pre-written space: {e}");
                    }
                    tracing::debug!("journal: pre-writing space: {e}");
                    tail.quiet_until = Some(Instant::now() + RETRY_AFTER);
                }
            }
            self.cv.notify_all();
        }
    }

    /// Whether the filesystem keeps free, after up to `piece` more bytes
    /// of filler, at least what the log's directory holds (see the module
    /// docs). Where it cannot tell, it lets the filler be written.
    fn room_to_spare(&self, piece: u64) -> bool {
        // SAFETY: statvfs is plain data, which fstatvfs fills.
        let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a plain syscall on a descriptor `self.file` owns.
        if unsafe { libc::fstatvfs(self.file.as_raw_fd(), &mut fs) } != 0 {
            return true;
        }
        let free = fs.f_bavail as u64 * fs.f_frsize as u64;
        let files = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        let log: u64 = files.filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
        free >= piece.min(PIECE) + log
    }

    /// Writes filler from `from` to the next `PIECE` boundary, or to the
    /// end of the line that reaches `want_to` if that comes first; returns
    /// where it ends (the caller syncs it). It ends at a line's end: Redis
    /// appends to a file it took over, and a command after a cut line would
    /// read as part of that annotation. `at_end`: nothing but records precede `from`, so
    /// its first byte is `#` whatever the offset (a `\n` there would be an
    /// empty line after the last record, which Redis refuses).
    fn write_piece(&self, from: u64, want_to: u64, at_end: bool) -> io::Result<u64> {
        let to = ((from / PIECE + 1) * PIECE).min(want_to.div_ceil(LINE) * LINE);
        let mut start = from;
        if at_end && filler()[(from % PIECE) as usize] != b'#' {
            self.file.write_all_at(b"#", from)?;
            start += 1;
        }
        // Whole blocks go around the page cache (see the module docs).
        // In the file's order, so that a crash between two writes leaves
        // filler up to the file's end and no hole.
        let (body_start, body_end) = (start.next_multiple_of(BLOCK), to / BLOCK * BLOCK);
        let mut cached_from = start;
        if body_start < body_end {
            self.write_filler(start, body_start)?;
            cached_from = body_start;
            if self.write_direct(body_start, body_end)? {
                cached_from = body_end;
                // Read back in, clean: the writer's records, which land
                // in these pages a few bytes at a time, need them cached.
                // SAFETY: a plain syscall on a descriptor `self.file` owns.
                unsafe {
                    libc::posix_fadvise(
                        self.file.as_raw_fd(),
                        body_start as libc::off_t,
                        (body_end - body_start) as libc::off_t,
                        libc::POSIX_FADV_WILLNEED,
                    );
                }
            }
        }
        self.write_filler(cached_from, to)?;
        Ok(to)
    }

    /// Writes the filler of `[from, to)` through the page cache.
    fn write_filler(&self, from: u64, to: u64) -> io::Result<()> {
        if from >= to {
            return Ok(());
        }
        let in_piece = (from % PIECE) as usize;
        self.file.write_all_at(&filler()[in_piece..in_piece + (to - from) as usize], from)
    }

    /// Writes the filler of `[from, to)`, whole blocks, with direct I/O;
    /// `Ok(false)` (and never again) where the file takes no direct
    /// writes of such blocks.
    fn write_direct(&self, from: u64, to: u64) -> io::Result<bool> {
        let mut direct = self.direct.lock();
        let Some(file) = direct.as_ref() else { return Ok(false) };
        let in_piece = (from % PIECE) as usize;
        match file.write_all_at(&filler()[in_piece..in_piece + (to - from) as usize], from) {
            Ok(()) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!("journal: no direct writes of pre-written space ({e}); writing it through the page cache");
                *direct = None;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Writes all of `buf` at `end`, inside the filler, with one `#`
    /// after it; returns the bytes of `buf` written.
    fn write_in_filler(&self, buf: &[u8], end: u64) -> io::Result<usize> {
        let hash = b"#";
        let iov = [
            libc::iovec { iov_base: buf.as_ptr() as *mut libc::c_void, iov_len: buf.len() },
            libc::iovec { iov_base: hash.as_ptr() as *mut libc::c_void, iov_len: 1 },
        ];
        loop {
            // SAFETY: both iovecs point into live slices of their stated
            // lengths, which pwritev only reads.
            let n = unsafe { libc::pwritev(self.file.as_raw_fd(), iov.as_ptr(), 2, end as libc::off_t) };
            if n >= 0 {
                return Ok((n as usize).min(buf.len()));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl LogFile for PreallocatedFile {
    fn append(&self, buf: &[u8]) -> io::Result<usize> {
        let s = &*self.shared;
        let end = s.end.load(Ordering::Relaxed);
        let mut tail = s.tail.lock();
        let n = if end + (buf.len() as u64) < tail.filled {
            // `buf` and its `#` lie below `filled`: the helper never writes there.
            drop(tail);
            s.write_in_filler(buf, end)?
        } else {
            while tail.extending {
                s.cv.wait(&mut tail);
            }
            let n = loop {
                match s.file.write_at(buf, end) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other?,
                }
            };
            tail.filled = tail.filled.max(end + n as u64);
            n
        };
        s.end.store(end + n as u64, Ordering::Release);
        Ok(n)
    }

    fn sync_data(&self) -> io::Result<()> {
        let s = &*self.shared;
        s.file.sync_data()?;
        let mut tail = s.tail.lock();
        if let Some(e) = tail.failed_sync.take() {
            return Err(e);
        }
        let low_water = s.ahead.load(Ordering::Relaxed) / 2;
        if !tail.wanted && tail.filled < s.end.load(Ordering::Acquire) + low_water {
            tail.wanted = true;
            s.cv.notify_all();
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let s = &*self.shared;
        let mut tail = s.tail.lock();
        while tail.extending {
            s.cv.wait(&mut tail);
        }
        s.file.set_len(len)?;
        tail.filled = len;
        s.end.store(len, Ordering::Release);
        Ok(())
    }

    fn rewrite_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        // Below `end`, where the helper never writes.
        debug_assert!(offset + buf.len() as u64 <= self.shared.end.load(Ordering::Acquire));
        self.shared.file.write_all_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.shared.end.load(Ordering::Acquire))
    }

    fn release_space(&self) -> io::Result<()> {
        let s = &*self.shared;
        let mut tail = s.tail.lock();
        tail.closed = true;
        s.cv.notify_all();
        while tail.extending {
            s.cv.wait(&mut tail);
        }
        let end = s.end.load(Ordering::Acquire);
        if tail.filled > end {
            s.file.set_len(end)?;
            tail.filled = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn physical_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    /// Waits until the helper has written at least `bytes` past the end.
    fn wait_ahead(f: &PreallocatedFile, bytes: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while f.shared.tail.lock().filled < f.len().unwrap() + bytes {
            assert!(Instant::now() < deadline, "no space written ahead");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Reads what follows `end` as Redis 7.0's AOF loader would (`fgets`
    /// into 1024 bytes, a line that does not start with `#` is an error)
    /// for the next `lines` lines.
    fn assert_reads_as_annotations(path: &Path, end: u64, lines: usize) {
        let file = File::open(path).unwrap();
        let mut buf = vec![0u8; 1024 * (lines + 1)];
        let n = file.read_at(&mut buf, end).unwrap();
        let mut rest = &buf[..n];
        for i in 0..lines {
            if rest.is_empty() {
                return;
            }
            let line_len = rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |p| p + 1);
            assert!(line_len <= 1023, "line {i} after {end} is {line_len} bytes long");
            assert_eq!(rest[0], b'#', "line {i} after {end} starts with {:?}", rest[0] as char);
            rest = &rest[line_len..];
        }
    }


    const AHEAD: u64 = 4 << 20;
    const LOW_WATER: u64 = AHEAD / 2;

    #[test]
    fn whatever_offset_a_write_ends_at_the_filler_after_it_reads_as_annotations() {
        // With direct writes where the filesystem has them, and without.
        for direct in [true, false] {
            filler_after_any_write_reads_as_annotations(direct);
        }
    }

    fn filler_after_any_write_reads_as_annotations(direct: bool) {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.aof");
        let f = PreallocatedFile::open(&path, Arc::new(AtomicU64::new(AHEAD))).unwrap();
        if !direct {
            *f.shared.direct.lock() = None;
        }
        // The first extension starts right at the end, on a `\n` offset.
        assert_eq!(f.append(&[b'x'; 511]).unwrap(), 511);
        f.sync_data().unwrap();
        wait_ahead(&f, LOW_WATER);
        assert_reads_as_annotations(&path, 511, 3);
        for residue in 0..LINE {
            let end = f.len().unwrap();
            let step = (residue + LINE - end % LINE) % LINE + LINE;
            let n = f.append(&vec![b'y'; step as usize]).unwrap();
            assert_eq!(n as u64, step);
            assert_eq!(f.len().unwrap() % LINE, residue);
            assert_reads_as_annotations(&path, f.len().unwrap(), 3);
        }
        let end = f.len().unwrap();
        let mut content = vec![0u8; end as usize];
        File::open(&path).unwrap().read_exact_at(&mut content, 0).unwrap();
        assert!(content[..511].iter().all(|&b| b == b'x') && content[511..].iter().all(|&b| b == b'y'));
        assert!(physical_len(&path) > end);
        f.release_space().unwrap();
        assert_eq!(physical_len(&path), end);
    }

    #[test]
    fn writes_past_the_space_and_cuts_keep_the_file_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.aof");
        let ahead = Arc::new(AtomicU64::new(AHEAD));
        let f = PreallocatedFile::open(&path, Arc::clone(&ahead)).unwrap();
        f.append(b"abc").unwrap();
        f.sync_data().unwrap();
        wait_ahead(&f, LOW_WATER);
        // One write longer than all the space: past `filled`, no `#` after.
        let big = vec![b'z'; (AHEAD + PIECE) as usize];
        let mut done = 0;
        while done < big.len() {
            done += f.append(&big[done..]).unwrap();
        }
        let end = f.len().unwrap();
        assert_eq!(end, 3 + big.len() as u64);
        assert!(physical_len(&path) >= end);
        f.sync_data().unwrap();
        wait_ahead(&f, LOW_WATER);
        assert_reads_as_annotations(&path, end, 3);
        // A cut (a failed write taken back) drops the space; writing goes on.
        // No new space after it (the helper may still be adding some up to
        // AHEAD), so that the file's length can be checked.
        ahead.store(0, Ordering::Relaxed);
        f.set_len(10).unwrap();
        assert_eq!((f.len().unwrap(), physical_len(&path)), (10, 10));
        f.append(b"tail").unwrap();
        let mut got = vec![0u8; 14];
        File::open(&path).unwrap().read_exact_at(&mut got, 0).unwrap();
        assert_eq!(&got, b"abczzzzzzztail");
    }

    #[test]
    fn a_failed_sync_of_the_helper_fails_the_writers_next_sync() {
        let tmp = tempfile::tempdir().unwrap();
        let f = PreallocatedFile::open(&tmp.path().join("a.aof"), Arc::new(AtomicU64::new(0))).unwrap();
        f.append(b"abc").unwrap();
        f.shared.tail.lock().failed_sync = Some(io::Error::from_raw_os_error(libc::EIO));
        let e = f.sync_data().expect_err("the helper's failure reaches the writer");
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        f.sync_data().expect("reported once");
    }

    #[test]
    fn the_space_follows_its_setting_and_only_synced_files_get_any() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.aof");
        let ahead = Arc::new(AtomicU64::new(AHEAD));
        let f = PreallocatedFile::open(&path, Arc::clone(&ahead)).unwrap();
        for _ in 0..100 {
            f.append(&[b'q'; 1000]).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(physical_len(&path), 100_000, "never synced");
        ahead.store(0, Ordering::Relaxed);
        f.sync_data().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(physical_len(&path), 100_000, "none asked for");
        ahead.store(10_000, Ordering::Relaxed);
        f.sync_data().unwrap();
        wait_ahead(&f, 5_000);
        std::thread::sleep(Duration::from_millis(50));
        let len = physical_len(&path);
        assert!((110_000..110_000 + LINE).contains(&len), "{len}");
        let mut last = [0u8; 1];
        File::open(&path).unwrap().read_exact_at(&mut last, len - 1).unwrap();
        assert_eq!(last[0], b'\n', "the space ends at a line's end");
        assert_reads_as_annotations(&path, 100_000, 30);
    }
}
