//! The file operations the writer needs, behind a trait so that tests (and
//! `KEEL_JOURNAL_FAILPOINT`) can inject I/O errors into the real write path.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::prealloc::PreallocatedFile;

/// A file written at its end by one thread. `&self` methods: the everysec
/// fsync thread syncs the file while the writer thread appends to it.
pub trait LogFile: Send + Sync {
    /// One `write(2)` at the end of the file; may write fewer bytes than
    /// given.
    fn append(&self, buf: &[u8]) -> io::Result<usize>;
    /// `fdatasync(2)`.
    fn sync_data(&self) -> io::Result<()>;
    /// `ftruncate(2)`, after which `len` is the end appends write at: used
    /// to cut a failed, partial write back off.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, over bytes the file already holds:
    /// the same bytes again, after a failed fdatasync, so that the next one
    /// has them to write (writer.rs). Written in place, never cut off and
    /// appended again, so that the file holds them all the while.
    fn rewrite_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Current size in bytes.
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Starts writing `[offset, offset + len)` out to the disk, and with
    /// `wait` waits until it is written: `sync_file_range(2)`, which
    /// flushes neither metadata nor the disk's cache, so it makes nothing
    /// durable. It bounds how much of a big file is in the disk's queue
    /// at once ([`IncrementalSync`]); files that need no bound
    /// (test doubles) may do nothing.
    fn write_out(&self, _offset: u64, _len: u64, _wait: bool) -> io::Result<()> {
        Ok(())
    }
    /// Gives back space written ahead of the end (`prealloc.rs`), for good:
    /// the file is done with (a clean shutdown, a switch to a new file).
    fn release_space(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Opens log files for appending.
pub trait FileFactory: Send + Sync {
    /// Opens `path` for appending, creating it if absent, keeping its content.
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn LogFile>>;
    /// [`FileFactory::open_append`] for an incr file, which the writer
    /// appends to and syncs for as long as it is current, with up to
    /// `space_ahead` bytes written ahead of its end (`prealloc.rs`; read as
    /// it changes).
    fn open_incr(&self, path: &Path, _space_ahead: Arc<AtomicU64>) -> io::Result<Arc<dyn LogFile>> {
        self.open_append(path)
    }
}

/// The real thing: `std::fs::File` written at its end, and for incr files
/// a [`PreallocatedFile`].
#[derive(Clone, Copy, Debug, Default)]
pub struct StdFiles;

struct StdFile(File);

impl LogFile for StdFile {
    fn append(&self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match (&self.0).write(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)?;
        (&self.0).seek(SeekFrom::Start(len)).map(drop)
    }
    fn rewrite_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn write_out(&self, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        write_out(&self.0, offset, len, wait)
    }
}

/// How a big file written in one go (a rewrite's base, a dump) reaches the
/// disk, as Redis's `aof-rewrite-incremental-fsync` and
/// `rdb-save-incremental-fsync` have it: fdatasync'd every `sync_every`
/// bytes, so that no final sync holds the disk for the whole file and no
/// journal fsync queues behind it. And in between at a steady pace: each
/// [`PACE_PIECE`] written is started out at once and the piece before it
/// waited for, so at most two pieces are in flight. Without that the kernel
/// wrote the file out in bursts (at each sync, or by its own writeback),
/// and each journal fdatasync that came in behind one waited for all of it.
#[derive(Debug)]
pub struct IncrementalSync {
    sync_every: u64,
    written: u64,
    started: u64,
    synced: u64,
}

/// [`IncrementalSync`]'s piece.
pub const PACE_PIECE: u64 = 256 << 10;

impl IncrementalSync {
    pub fn new(sync_every: u64) -> IncrementalSync {
        IncrementalSync { sync_every, written: 0, started: 0, synced: 0 }
    }

    /// Counts `n` more bytes written at the end of the file: starts or
    /// waits for pieces through `write_out(offset, len, wait)`
    /// ([`LogFile::write_out`], [`write_out`]) and calls `sync_data` each
    /// time `sync_every` more bytes are written.
    pub fn wrote(
        &mut self,
        n: u64,
        mut write_out: impl FnMut(u64, u64, bool) -> io::Result<()>,
        sync_data: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        self.written += n;
        while self.written - self.started >= PACE_PIECE {
            let piece = self.started;
            write_out(piece, PACE_PIECE, false)?;
            if let Some(previous) = piece.checked_sub(PACE_PIECE) {
                write_out(previous, PACE_PIECE, true)?;
            }
            self.started += PACE_PIECE;
        }
        if self.written - self.synced >= self.sync_every {
            sync_data()?;
            self.synced = self.written;
        }
        Ok(())
    }
}

/// Deletes a file that may be big without a burst of work for the disk:
/// the name goes at once (the directory is then as the manifest says), the
/// blocks go [`REMOVE_SLICE`] at a time from a thread of its own, as
/// Redis's `bg_unlink` closes a big file's last descriptor off the main
/// thread. On a filesystem mounted with `discard`, as this project's is,
/// one unlink of a gigabyte queued the discards of all of it ahead of the
/// next fdatasync: 30-43 ms, where slices of 16 MB cost at most 5
/// (BENCHMARKS.md, "Durable writes during a rewrite").
pub fn remove_gradually(path: &Path) {
    let big = OpenOptions::new().write(true).open(path).ok().filter(|f| f.metadata().is_ok_and(|m| m.len() > REMOVE_SLICE));
    let removed = crate::load::remove_leftover(path);
    // A file whose name stays keeps its blocks too.
    let Some(file) = big.filter(|_| removed) else { return };
    let reaper = crate::spawn_thread("keel-aof-reaper", move || {
        let mut len = file.metadata().map_or(0, |m| m.len());
        while len > 0 {
            len = len.saturating_sub(REMOVE_SLICE);
            if file.set_len(len).is_err() {
                break;
            }
            std::thread::sleep(REMOVE_PAUSE);
        }
    });
    if let Err(e) = reaper {
        tracing::warn!("journal: could not start a thread to free a removed file gradually: {e}");
    }
}

/// [`remove_gradually`] frees this much at a time, and pauses this long
/// between two slices (400 MB/s).
const REMOVE_SLICE: u64 = 8 << 20;
const REMOVE_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// [`LogFile::write_out`] for any file.
pub fn write_out(file: &File, offset: u64, len: u64, wait: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = if wait {
        libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER
    } else {
        libc::SYNC_FILE_RANGE_WRITE
    };
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: a plain syscall on a descriptor `file` owns.
    if unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl FileFactory for StdFiles {
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        // Not `O_APPEND`: Linux's pwrite(2) appends on such a file, whatever
        // the offset, and `rewrite_at` must write in place.
        let mut f = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
        f.seek(SeekFrom::End(0))?;
        Ok(Arc::new(StdFile(f)))
    }
    fn open_incr(&self, path: &Path, space_ahead: Arc<AtomicU64>) -> io::Result<Arc<dyn LogFile>> {
        Ok(Arc::new(PreallocatedFile::open(path, space_ahead)?))
    }
}

/// Which operation a failpoint hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Write,
    Sync,
    SetLen,
}

/// What a failpoint does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail with `EIO`, writing nothing.
    Eio,
    /// Fail with `ENOSPC`, writing nothing.
    Enospc,
    /// (writes only) Really write the first half of the buffer and report
    /// that; the caller's retry of the rest is the next write.
    Short,
}

#[derive(Debug)]
struct Rule {
    op: Op,
    fault: Fault,
    /// Operations of this kind to let through before firing.
    skip: u64,
    /// Times left to fire (`u64::MAX`: until cleared).
    times: u64,
}

/// Switchable I/O faults, shared between a test and the files it injects
/// them into ([`FaultyFiles`]).
///
/// Each rule counts the operations of its kind from the moment it is added:
/// `fail(Op::Write, 3, 2, Fault::Enospc)` lets two writes through, then fails
/// the third and fourth.
#[derive(Debug, Default)]
pub struct Failpoints {
    rules: Mutex<Vec<Rule>>,
    counts: Mutex<[u64; 3]>,
    /// Operations of these kinds wait until released: a disk that does not
    /// answer.
    held: Mutex<[bool; 3]>,
    released: parking_lot::Condvar,
}

impl Failpoints {
    pub fn new() -> Arc<Failpoints> {
        Arc::new(Failpoints::default())
    }

    /// Fails the `nth` (1-based) operation `op` from now, and the `times - 1`
    /// after it (`times == u64::MAX`: all of them, until [`Failpoints::clear`]).
    pub fn fail(&self, op: Op, nth: u64, times: u64, fault: Fault) {
        assert!(nth >= 1, "nth is 1-based");
        self.rules.lock().push(Rule { op, fault, skip: nth - 1, times });
    }

    /// Removes every rule: the "disk" is healthy again.
    pub fn clear(&self) {
        self.rules.lock().clear();
    }

    /// Operations of kind `op` from now on wait until [`Failpoints::release`]
    /// (then meet the rules as they are at that time).
    pub fn hold(&self, op: Op) {
        self.held.lock()[op as usize] = true;
    }

    /// Lets every held operation go on.
    pub fn release(&self) {
        *self.held.lock() = [false; 3];
        self.released.notify_all();
    }

    fn wait_if_held(&self, op: Op) {
        let mut held = self.held.lock();
        while held[op as usize] {
            self.released.wait(&mut held);
        }
    }

    /// Operations of kind `op` seen so far (faulted or not).
    pub fn count(&self, op: Op) -> u64 {
        self.counts.lock()[op as usize]
    }

    /// Parses `KEEL_JOURNAL_FAILPOINT` syntax: comma-separated
    /// `<op>-<fault>:<nth>[:<times>|:inf]` with op `write`, `sync` or
    /// `setlen` and fault `eio`, `enospc` or `short`; e.g.
    /// `write-enospc:100:inf,sync-eio:5`.
    pub fn parse(spec: &str) -> Result<Arc<Failpoints>, String> {
        let fp = Failpoints::new();
        for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || format!("bad failpoint {part:?}: expected <op>-<fault>:<nth>[:<times>|:inf]");
            let mut fields = part.split(':');
            let name = fields.next().ok_or_else(bad)?;
            let (op, fault) = name.split_once('-').ok_or_else(bad)?;
            let op = match op {
                "write" => Op::Write,
                "sync" => Op::Sync,
                "setlen" => Op::SetLen,
                _ => return Err(bad()),
            };
            let fault = match fault {
                "eio" => Fault::Eio,
                "enospc" => Fault::Enospc,
                "short" if op == Op::Write => Fault::Short,
                _ => return Err(bad()),
            };
            let nth: u64 = fields.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
            let times = match fields.next() {
                None => 1,
                Some("inf") => u64::MAX,
                Some(t) => t.parse().map_err(|_| bad())?,
            };
            if nth == 0 || fields.next().is_some() {
                return Err(bad());
            }
            fp.fail(op, nth, times, fault);
        }
        Ok(fp)
    }

    /// Counts one operation and returns the fault to inject, if any.
    fn check(&self, op: Op) -> Option<Fault> {
        self.counts.lock()[op as usize] += 1;
        let mut rules = self.rules.lock();
        let mut fired = None;
        for rule in rules.iter_mut().filter(|r| r.op == op) {
            if rule.skip > 0 {
                rule.skip -= 1;
            } else if rule.times > 0 && fired.is_none() {
                if rule.times != u64::MAX {
                    rule.times -= 1;
                }
                fired = Some(rule.fault);
            }
        }
        rules.retain(|r| r.times > 0);
        fired
    }
}

fn os_error(fault: Fault) -> io::Error {
    io::Error::from_raw_os_error(match fault {
        Fault::Enospc => libc::ENOSPC,
        Fault::Eio | Fault::Short => libc::EIO,
    })
}

/// Wraps another [`FileFactory`]; every operation on its files consults the
/// shared [`Failpoints`] first.
pub struct FaultyFiles {
    pub inner: Arc<dyn FileFactory>,
    pub failpoints: Arc<Failpoints>,
}

struct FaultyFile {
    inner: Arc<dyn LogFile>,
    failpoints: Arc<Failpoints>,
}

impl FileFactory for FaultyFiles {
    fn open_append(&self, path: &Path) -> io::Result<Arc<dyn LogFile>> {
        let inner = self.inner.open_append(path)?;
        Ok(Arc::new(FaultyFile { inner, failpoints: Arc::clone(&self.failpoints) }))
    }
    fn open_incr(&self, path: &Path, space_ahead: Arc<AtomicU64>) -> io::Result<Arc<dyn LogFile>> {
        let inner = self.inner.open_incr(path, space_ahead)?;
        Ok(Arc::new(FaultyFile { inner, failpoints: Arc::clone(&self.failpoints) }))
    }
}

impl LogFile for FaultyFile {
    fn append(&self, buf: &[u8]) -> io::Result<usize> {
        match self.failpoints.check(Op::Write) {
            None => self.inner.append(buf),
            Some(Fault::Short) if buf.len() > 1 => self.inner.append(&buf[..buf.len() / 2]),
            Some(f) => Err(os_error(f)),
        }
    }
    fn sync_data(&self) -> io::Result<()> {
        self.failpoints.wait_if_held(Op::Sync);
        match self.failpoints.check(Op::Sync) {
            None => self.inner.sync_data(),
            Some(f) => Err(os_error(f)),
        }
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        match self.failpoints.check(Op::SetLen) {
            None => self.inner.set_len(len),
            Some(f) => Err(os_error(f)),
        }
    }
    fn rewrite_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        match self.failpoints.check(Op::Write) {
            None => self.inner.rewrite_at(offset, buf),
            Some(Fault::Short) if buf.len() > 1 => {
                self.inner.rewrite_at(offset, &buf[..buf.len() / 2])?;
                Err(os_error(Fault::Short))
            }
            Some(f) => Err(os_error(f)),
        }
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn write_out(&self, offset: u64, len: u64, wait: bool) -> io::Result<()> {
        self.inner.write_out(offset, len, wait)
    }
    fn release_space(&self) -> io::Result<()> {
        self.inner.release_space()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn incremental_sync_paces_pieces_and_syncs_every_so_many_bytes() {
        #[derive(Debug, PartialEq)]
        enum Call {
            Out(u64, u64, bool),
            Sync,
        }
        let p = PACE_PIECE;
        let mut sync = IncrementalSync::new(3 * p);
        let mut wrote = |n: u64| {
            let calls = std::cell::RefCell::new(Vec::new());
            sync.wrote(
                n,
                |at, len, wait| {
                    calls.borrow_mut().push(Call::Out(at, len, wait));
                    Ok(())
                },
                || {
                    calls.borrow_mut().push(Call::Sync);
                    Ok(())
                },
            )
            .unwrap();
            calls.into_inner()
        };
        assert_eq!(wrote(p - 1), [], "no whole piece yet");
        assert_eq!(wrote(1), [Call::Out(0, p, false)]);
        // Through 3 pieces: the third piece starts, the second is waited for,
        // and the sync comes after them.
        assert_eq!(
            wrote(2 * p + 5),
            [Call::Out(p, p, false), Call::Out(0, p, true), Call::Out(2 * p, p, false), Call::Out(p, p, true), Call::Sync]
        );
        assert_eq!(wrote(p), [Call::Out(3 * p, p, false), Call::Out(2 * p, p, true)], "the next sync is 3 pieces on");
        assert_eq!(wrote(2 * p)[2..], [Call::Out(5 * p, p, false), Call::Out(4 * p, p, true), Call::Sync]);
    }

    #[test]
    fn a_big_file_removed_gradually_loses_its_name_at_once_and_its_blocks_soon_after() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.incr.aof");
        let file = File::create(&path).unwrap();
        file.set_len(3 * REMOVE_SLICE + 1).unwrap();
        drop(file);
        remove_gradually(&path);
        assert!(!path.exists());
        // The reaper holds the last descriptor ("<path> (deleted)") until
        // the file is empty.
        let name = path.to_string_lossy().into_owned();
        let open = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .any(|target| target.to_string_lossy().starts_with(&name))
        };
        assert!(open(), "freed a slice at a time, not at once");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while open() {
            assert!(std::time::Instant::now() < deadline, "the reaper never closed the file");
            std::thread::sleep(REMOVE_PAUSE);
        }
        remove_gradually(&path);
    }

    #[test]
    fn rules_count_from_their_creation() {
        let fp = Failpoints::parse("write-enospc:2:2, sync-eio:1").unwrap();
        assert_eq!(fp.check(Op::Write), None);
        assert_eq!(fp.check(Op::Write), Some(Fault::Enospc));
        assert_eq!(fp.check(Op::Write), Some(Fault::Enospc));
        assert_eq!(fp.check(Op::Write), None);
        assert_eq!(fp.check(Op::Sync), Some(Fault::Eio));
        assert_eq!(fp.check(Op::Sync), None);
        assert_eq!(fp.count(Op::Write), 4);
        fp.fail(Op::Write, 1, u64::MAX, Fault::Eio);
        for _ in 0..10 {
            assert_eq!(fp.check(Op::Write), Some(Fault::Eio));
        }
        fp.clear();
        assert_eq!(fp.check(Op::Write), None);
        assert!(Failpoints::parse("write-eio:0").is_err());
        assert!(Failpoints::parse("sync-short:1").is_err());
        assert!(Failpoints::parse("read-eio:1").is_err());
    }

    /// Both kinds of file append at their end, keep their content when
    /// opened again, append after a cut where it was cut, and rewrite in
    /// place (which an `O_APPEND` file could not: pwrite(2) appends there).
    #[test]
    fn files_append_at_their_end_and_rewrite_in_place() {
        let tmp = tempfile::tempdir().unwrap();
        for incr in [false, true] {
            let path = tmp.path().join(format!("f{incr}"));
            let open = || {
                if incr {
                    StdFiles.open_incr(&path, Arc::new(AtomicU64::new(0))).unwrap()
                } else {
                    StdFiles.open_append(&path).unwrap()
                }
            };
            let f = open();
            assert_eq!(f.append(b"hello ").unwrap(), 6);
            f.sync_data().unwrap();
            drop(f);
            let f = open();
            assert_eq!(f.append(b"world, cut").unwrap(), 10);
            f.set_len(11).unwrap();
            assert_eq!(f.append(b"!").unwrap(), 1);
            f.rewrite_at(0, b"HELLO").unwrap();
            assert_eq!(f.len().unwrap(), 12);
            f.release_space().unwrap();
            drop(f);
            assert_eq!(std::fs::read(&path).unwrap(), b"HELLO world!", "incr: {incr}");
        }
    }
}
