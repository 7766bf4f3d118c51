//! An SQLite VFS that hands each commit's WAL writes to the kernel in a few large writes.
//!
//! SQLite appends a WAL frame with two `pwrite`s, its 24-byte header and then the page, so a
//! commit of 60 pages makes 120 system calls before its `fsync`. Under the intake writer's load
//! those calls were most of the daemon's kernel time (BENCHMARKS.md round 29). This VFS wraps
//! the platform's default one; a file opened as a WAL keeps contiguous writes in memory and
//! writes them (in writes of at most 124 KiB) before anything else is done with the file: a sync, a read, its size, a
//! truncation, a file control or its close. Every other file (the database, journals) is the
//! default VFS's own, untouched.
//!
//! Invariant: a byte written to a WAL file of this VFS is in the file before that file's next
//! sync returns. That is all SQLite needs when every commit syncs the WAL before it makes the
//! commit visible (`synchronous = FULL`: the wal-index header is written after the sync) and an
//! overwrite cannot damage its neighbours (`SQLITE_IOCAP_POWERSAFE_OVERWRITE`, so the sync is
//! the commit's last write). [`register`] is for connections that keep `synchronous = FULL`; a
//! WAL whose device lacks power-safe overwrites is written straight through. What a crash loses
//! is what it loses without this VFS: writes not yet synced, of a transaction not yet committed.
//!
//! The crate also holds the workspace's one other call into a file under SQLite:
//! [`sync_database_file`], for a checkpoint's pages synced off the writer's thread.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

use rusqlite::ffi;

mod sync;
pub use sync::sync_database_file;

/// The name [`register`] gives the VFS, for `Connection::open_with_flags_and_vfs`.
pub const NAME: &CStr = c"switchyard-wal";

/// Most bytes held for one WAL file; more are written at once. A commit of the intake writer's
/// is about 60 frames of 4,120 bytes.
const MAX_HELD: usize = 1 << 20;

/// Most bytes handed to the default VFS in one write: the unix VFS keeps only the low 17 bits
/// of a write's length (`seekAndWriteFd`), so a longer one would come back short (`SQLITE_FULL`).
const MAX_WRITE: usize = 124 << 10;

/// Registers the VFS (once per process; not as the default) and returns its name.
///
/// # Errors
/// When SQLite has no default VFS or refuses the registration: its result code.
pub fn register() -> Result<&'static CStr, c_int> {
    static REGISTERED: OnceLock<Result<(), c_int>> = OnceLock::new();
    (*REGISTERED.get_or_init(|| {
        // SAFETY: sqlite3_initialize and sqlite3_vfs_find take no pointer but the (null) name;
        // the default VFS they return lives as long as the process.
        let inner = unsafe {
            let rc = ffi::sqlite3_initialize();
            if rc != ffi::SQLITE_OK {
                return Err(rc);
            }
            ffi::sqlite3_vfs_find(std::ptr::null())
        };
        if inner.is_null() {
            return Err(ffi::SQLITE_ERROR);
        }
        // SAFETY: `inner` is a registered VFS, never freed; reading its fields copies them.
        let mut vfs = unsafe { *inner };
        vfs.szOsFile = (HEADER + vfs.szOsFile as usize) as c_int;
        vfs.pNext = std::ptr::null_mut();
        vfs.zName = NAME.as_ptr();
        vfs.xOpen = Some(open);
        // The copied methods are the default VFS's and get this VFS as their first argument,
        // which the unix VFS's ignore. `xOpen`, which reads its VFS's `pAppData`, is this
        // crate's and passes the default VFS itself.
        INNER.set(Inner(inner)).map_err(|_| ffi::SQLITE_MISUSE)?;
        let vfs = Box::leak(Box::new(vfs));
        // SAFETY: `vfs` is leaked, so it outlives every connection, as SQLite requires.
        match unsafe { ffi::sqlite3_vfs_register(vfs, 0) } {
            ffi::SQLITE_OK => Ok(()),
            rc => Err(rc),
        }
    }))
    .map(|()| NAME)
}

/// The default VFS this one wraps.
struct Inner(*mut ffi::sqlite3_vfs);
// SAFETY: a registered VFS is an immutable table of functions; SQLite calls it from any thread.
unsafe impl Send for Inner {}
// SAFETY: as for `Send`.
unsafe impl Sync for Inner {}
static INNER: OnceLock<Inner> = OnceLock::new();

/// What this VFS puts before the default VFS's own file object, for a WAL file.
#[repr(C)]
struct WalFile {
    /// SQLite's view of the file: `pMethods` is [`WAL_METHODS`].
    base: ffi::sqlite3_file,
    /// The writes not yet handed to the default VFS's file (null until the file is open).
    held: *mut Held,
}

/// Bytes at the front of the file object before the default VFS's own, 16-byte aligned.
const HEADER: usize = std::mem::size_of::<WalFile>().next_multiple_of(16);

/// Contiguous bytes of the file, from `offset` on, not yet written.
#[derive(Debug, Default)]
struct Held {
    offset: i64,
    bytes: Vec<u8>,
    /// False when the device lacks power-safe overwrites: every write goes straight through.
    holding: bool,
}

impl Held {
    /// Holds `data`, to be written at `offset`, if it continues or overlaps what is held (or
    /// nothing is) and all fits in [`MAX_HELD`]; answers whether it did.
    fn take(&mut self, offset: i64, data: &[u8]) -> bool {
        if !self.holding {
            return false;
        }
        if self.bytes.is_empty() {
            self.offset = offset;
        }
        let Ok(at) = usize::try_from(offset - self.offset) else {
            return false;
        };
        if at > self.bytes.len() || at + data.len() > MAX_HELD {
            return false;
        }
        // Mostly an append; a rewritten frame (or its header) overlaps what is held.
        let overlap = data.len().min(self.bytes.len() - at);
        self.bytes[at..at + overlap].copy_from_slice(&data[..overlap]);
        self.bytes.extend_from_slice(&data[overlap..]);
        true
    }
}

/// The default VFS's file object, after the header.
///
/// # Safety
/// `file` is a [`WalFile`] this VFS opened.
unsafe fn inner_file(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: SQLite allocated `szOsFile` bytes for the file: the header and then the default
    // VFS's own object.
    unsafe { file.cast::<u8>().add(HEADER).cast() }
}

/// The default VFS's methods for its file object.
///
/// # Safety
/// `inner` is an open file of the default VFS.
unsafe fn methods(inner: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    // SAFETY: an open file's `pMethods` points at a static table of its VFS.
    unsafe { &*(*inner).pMethods }
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let Some(Inner(inner_vfs)) = INNER.get() else {
        return ffi::SQLITE_MISUSE;
    };
    // SAFETY: SQLite passes `szOsFile` bytes at `file`; the default VFS's open may use the
    // first `szOsFile` of its own, fewer than this VFS's. `inner_vfs` is registered for good.
    unsafe {
        let x_open = (**inner_vfs).xOpen.expect("every VFS has xOpen");
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            // Not a WAL: the default VFS's file object in place, used as it is.
            return x_open(*inner_vfs, name, file, flags, out_flags);
        }
        let wal = file.cast::<WalFile>();
        (*wal).base.pMethods = std::ptr::null();
        (*wal).held = std::ptr::null_mut();
        let inner = inner_file(file);
        let rc = x_open(*inner_vfs, name, inner, flags, out_flags);
        if rc != ffi::SQLITE_OK {
            if !(*inner).pMethods.is_null()
                && let Some(close) = methods(inner).xClose
            {
                close(inner);
            }
            return rc;
        }
        let device = methods(inner)
            .xDeviceCharacteristics
            .map_or(0, |f| f(inner));
        (*wal).held = Box::into_raw(Box::new(Held {
            holding: device & ffi::SQLITE_IOCAP_POWERSAFE_OVERWRITE != 0,
            ..Held::default()
        }));
        (*wal).base.pMethods = &WAL_METHODS;
        ffi::SQLITE_OK
    }
}

/// A WAL file's parts.
///
/// # Safety
/// `file` is a [`WalFile`] this VFS opened, not yet closed, used by one thread at a time (SQLite
/// calls a file's methods under its connection's mutex).
unsafe fn parts<'f>(file: *mut ffi::sqlite3_file) -> (&'f mut Held, *mut ffi::sqlite3_file) {
    // SAFETY: as the function's contract says; `held` was set by `open` before `pMethods`.
    unsafe { (&mut *(*file.cast::<WalFile>()).held, inner_file(file)) }
}

/// Writes what is held. On failure what was held is dropped: SQLite rolls the transaction back,
/// and the frames were not committed.
///
/// # Safety
/// `inner` is the open default VFS file `held` belongs to.
unsafe fn write_held(held: &mut Held, inner: *mut ffi::sqlite3_file) -> c_int {
    if held.bytes.is_empty() {
        return ffi::SQLITE_OK;
    }
    // SAFETY: as the function's contract says.
    let rc = unsafe { write_at(inner, &held.bytes, held.offset) };
    // Its capacity stays for the next commit: at most twice `MAX_HELD`, which `take` keeps.
    held.bytes.clear();
    rc
}

/// Hands `bytes` to the default VFS's file at `offset`, in writes of at most [`MAX_WRITE`].
///
/// # Safety
/// `inner` is an open file of the default VFS.
unsafe fn write_at(inner: *mut ffi::sqlite3_file, bytes: &[u8], mut offset: i64) -> c_int {
    for chunk in bytes.chunks(MAX_WRITE) {
        #[cfg(test)]
        tests::WRITES.with(|w| w.set(w.get() + 1));
        // SAFETY: `chunk` is valid for its length; the default VFS copies it before returning.
        let rc = unsafe {
            let write = methods(inner).xWrite.expect("every file has xWrite");
            write(inner, chunk.as_ptr().cast(), chunk.len() as c_int, offset)
        };
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        offset += chunk.len() as i64;
    }
    ffi::SQLITE_OK
}

/// Writes what is held, then runs `then` on the default VFS's file.
///
/// # Safety
/// As [`parts`].
unsafe fn written_then(
    file: *mut ffi::sqlite3_file,
    then: impl FnOnce(*mut ffi::sqlite3_file, &'static ffi::sqlite3_io_methods) -> c_int,
) -> c_int {
    // SAFETY: as the function's contract says.
    unsafe {
        let (held, inner) = parts(file);
        match write_held(held, inner) {
            ffi::SQLITE_OK => then(inner, methods(inner)),
            rc => rc,
        }
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file once, with no other call on it.
    unsafe {
        let wal = file.cast::<WalFile>();
        let (held, inner) = parts(file);
        let written = write_held(held, inner);
        let closed = methods(inner).xClose.map_or(ffi::SQLITE_OK, |f| f(inner));
        drop(Box::from_raw((*wal).held));
        (*wal).held = std::ptr::null_mut();
        if written != ffi::SQLITE_OK {
            written
        } else {
            closed
        }
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: SQLite passes `amount` readable bytes at `data`; `file` as in `parts`.
    unsafe {
        let (held, inner) = parts(file);
        let data = std::slice::from_raw_parts(data.cast::<u8>(), amount as usize);
        if held.take(offset, data) {
            return ffi::SQLITE_OK;
        }
        let rc = write_held(held, inner);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
        if held.take(offset, data) {
            return ffi::SQLITE_OK;
        }
        write_at(inner, data, offset)
    }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    data: *mut c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    // SAFETY: as `parts`; the buffer is SQLite's, passed on.
    unsafe {
        written_then(file, |inner, m| {
            m.xRead
                .map_or(ffi::SQLITE_IOERR_READ, |f| f(inner, data, amount, offset))
        })
    }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: i64) -> c_int {
    // SAFETY: as `parts`.
    unsafe {
        written_then(file, |inner, m| {
            m.xTruncate
                .map_or(ffi::SQLITE_IOERR_TRUNCATE, |f| f(inner, size))
        })
    }
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: as `parts`.
    unsafe {
        written_then(file, |inner, m| {
            m.xSync.map_or(ffi::SQLITE_IOERR_FSYNC, |f| f(inner, flags))
        })
    }
}

unsafe extern "C" fn file_size(file: *mut ffi::sqlite3_file, size: *mut i64) -> c_int {
    // SAFETY: as `parts`; `size` is SQLite's, passed on.
    unsafe {
        written_then(file, |inner, m| {
            m.xFileSize
                .map_or(ffi::SQLITE_IOERR_FSTAT, |f| f(inner, size))
        })
    }
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: as `parts`; `arg` is SQLite's, passed on.
    unsafe {
        written_then(file, |inner, m| {
            m.xFileControl
                .map_or(ffi::SQLITE_NOTFOUND, |f| f(inner, op, arg))
        })
    }
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: as `parts`.
    unsafe {
        let inner = inner_file(file);
        methods(inner)
            .xLock
            .map_or(ffi::SQLITE_OK, |f| f(inner, level))
    }
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: as `parts`.
    unsafe {
        let inner = inner_file(file);
        methods(inner)
            .xUnlock
            .map_or(ffi::SQLITE_OK, |f| f(inner, level))
    }
}

unsafe extern "C" fn check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    // SAFETY: as `parts`; `out` is SQLite's, passed on.
    unsafe {
        let inner = inner_file(file);
        match methods(inner).xCheckReservedLock {
            Some(f) => f(inner, out),
            None => {
                *out = 0;
                ffi::SQLITE_OK
            }
        }
    }
}

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as `parts`.
    unsafe {
        let inner = inner_file(file);
        methods(inner).xSectorSize.map_or(4096, |f| f(inner))
    }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: as `parts`.
    unsafe {
        let inner = inner_file(file);
        methods(inner)
            .xDeviceCharacteristics
            .map_or(0, |f| f(inner))
    }
}

/// A WAL file's methods. Version 1: SQLite maps shared memory and pages of the database file
/// only, never of its WAL.
static WAL_METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

#[cfg(test)]
mod tests;
