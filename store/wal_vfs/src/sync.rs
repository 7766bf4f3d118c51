//! A database file's sync, asked for from a connection other than the one that will need it.
//!
//! A `PASSIVE` checkpoint under a steady writer copies pages into the database file but never
//! syncs it: SQLite syncs the database only when a checkpoint has copied the whole WAL, and the
//! writer keeps appending. So the intake writer's own catch-up, the checkpoint that lets the WAL
//! start over, paid for the writeback of every page the checkpointer had copied (megabytes),
//! while every sender waited. [`sync_database_file`] lets the checkpointer's thread pay it.
//!
//! Invariant: only a sync, of the connection's own open file, through its VFS's `xSync`. An
//! extra sync never changes what a crash keeps of a committed transaction; it only makes bytes
//! already written durable sooner.

use std::ffi::{CStr, c_int, c_void};

use rusqlite::{Connection, ffi};

/// Syncs the file of `schema` (`c"main"` for the database a connection opened) through its
/// VFS, as SQLite itself does at the end of a checkpoint. Answers whether there was a file to
/// sync: an in-memory database has none.
///
/// # Errors
/// The SQLite result code: `SQLITE_ERROR` for a schema the connection does not have, an
/// `SQLITE_IOERR_FSYNC` family code when the sync fails.
pub fn sync_database_file(conn: &Connection, schema: &CStr) -> Result<bool, c_int> {
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: `conn` is open for the borrow; `SQLITE_FCNTL_FILE_POINTER` writes one pointer to
    // the `sqlite3_file` SQLite keeps for the schema (or leaves it null), owned by the
    // connection, so it outlives this call, which holds `conn` borrowed and so unused elsewhere.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            schema.as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast::<c_void>(),
        )
    };
    if rc != ffi::SQLITE_OK {
        return Err(rc);
    }
    // SAFETY: a non-null `file` is the connection's; a closed or never-opened one (an
    // in-memory database) has no methods, and a non-null `pMethods` is a static table.
    let sync = unsafe { file.as_ref().and_then(|f| f.pMethods.as_ref()) }.and_then(|m| m.xSync);
    let Some(sync) = sync else {
        return Ok(false);
    };
    // SAFETY: the file is open and belongs to `conn`, which this thread alone uses while it
    // is borrowed; `xSync` takes no pointer but the file.
    match unsafe { sync(file, ffi::SQLITE_SYNC_NORMAL) } {
        ffi::SQLITE_OK => Ok(true),
        rc => Err(rc),
    }
}
