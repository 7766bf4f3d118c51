//! The VFS against real SQLite databases: one write per commit, every commit readable by other
//! connections on the default VFS, transactions that spill and rewrite frames, checkpoints that
//! start the WAL over, and a process that dies with writes held.

use std::cell::Cell;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

thread_local! {
    /// Writes this thread's WAL files handed to the default VFS.
    pub(crate) static WRITES: Cell<u64> = const { Cell::new(0) };
}

fn writes() -> u64 {
    WRITES.with(Cell::get)
}

/// A connection on this VFS, as the intake writer opens one.
fn writer(path: &Path) -> Connection {
    let name = super::register().expect("the VFS registers");
    let conn = Connection::open_with_flags_and_vfs(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        name,
    )
    .expect("open on the VFS");
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .expect("WAL");
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("synchronous");
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .expect("no automatic checkpoint");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);
         CREATE INDEX IF NOT EXISTS t_body ON t (body);",
    )
    .expect("schema");
    conn
}

fn insert_rows(conn: &Connection, from: i64, count: i64) {
    let mut insert = conn
        .prepare_cached("INSERT INTO t (id, body) VALUES (?1, ?2)")
        .expect("prepare");
    for id in from..from + count {
        insert
            .execute((id, format!("{id:08}-{}", "x".repeat(400))))
            .expect("insert");
    }
}

fn count(conn: &Connection) -> i64 {
    conn.query_row("SELECT count(*) FROM t", [], |row| row.get(0))
        .expect("count")
}

fn integrity(path: &Path) -> String {
    Connection::open(path)
        .expect("open on the default VFS")
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity_check")
}

/// Commits `rows` rows; answers the frames it added to the WAL and the writes it took.
fn commit_rows(conn: &mut Connection, path: &Path, from: i64, rows: i64) -> (u64, u64) {
    let wal = path.with_extension("db-wal");
    let before = std::fs::metadata(&wal).map_or(0, |m| m.len());
    let writes_before = writes();
    let txn = conn.transaction().expect("begin");
    insert_rows(&txn, from, rows);
    txn.commit().expect("commit");
    let frames = (std::fs::metadata(&wal).expect("the WAL").len() - before) / 4120;
    (frames, writes() - writes_before)
}

#[test]
fn a_commits_frames_go_to_the_file_in_writes_of_124_kib() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("one.db");
    let mut conn = writer(&path);
    let reader = Connection::open(&path).expect("a reader on the default VFS");
    // Under 124 KiB: one write where SQLite makes two per frame.
    let (frames, writes) = commit_rows(&mut conn, &path, 0, 100);
    assert!(
        (20..=30).contains(&frames),
        "the commit wrote {frames} frames"
    );
    assert_eq!(writes, 1, "{frames} frames in one write");
    assert_eq!(count(&reader), 100);
    // Past what the unix VFS takes in one write (it keeps 17 bits of a length).
    let (frames, writes) = commit_rows(&mut conn, &path, 100, 1000);
    assert!(frames >= 150, "the commit wrote {frames} frames");
    let bytes = frames * 4120;
    assert_eq!(writes, bytes.div_ceil(124 << 10), "{frames} frames");
    assert_eq!(count(&reader), 1100);
}

#[test]
fn every_commit_is_readable_from_the_default_vfs_while_checkpoints_start_the_wal_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("readers.db");
    let mut conn = writer(&path);
    let reader = Connection::open(&path).expect("a reader on the default VFS");
    let checkpointer = Connection::open(&path).expect("a checkpointer on the default VFS");
    for round in 0..60 {
        let txn = conn.transaction().expect("begin");
        insert_rows(&txn, round * 20, 20);
        txn.commit().expect("commit");
        assert_eq!(count(&reader), (round + 1) * 20, "after commit {round}");
        if round % 7 == 3 {
            checkpointer
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .expect("checkpoint");
        }
        if round % 11 == 5 {
            // On the writer's connection, as its catch-up does: the next commit starts the WAL
            // over, from its first byte.
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .expect("checkpoint");
        }
    }
    drop(conn);
    assert_eq!(integrity(&path), "ok");
    assert_eq!(count(&Connection::open(&path).expect("reopen")), 1200);
}

#[test]
fn spilled_rewritten_and_rolled_back_frames_leave_a_sound_database() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("spills.db");
    let mut conn = writer(&path);
    // A cache of a few pages: a transaction writes frames before its commit (spills), and
    // pages changed again after their spill overwrite their frames, read back to checksum.
    conn.pragma_update(None, "cache_size", 8)
        .expect("cache_size");
    let txn = conn.transaction().expect("begin");
    insert_rows(&txn, 0, 500);
    txn.execute("UPDATE t SET body = body || 'y' WHERE id % 3 = 0", [])
        .expect("update");
    txn.commit().expect("commit");
    let txn = conn.transaction().expect("begin");
    insert_rows(&txn, 1000, 500);
    txn.rollback().expect("rollback");
    let txn = conn.transaction().expect("begin");
    insert_rows(&txn, 2000, 300);
    txn.execute("DELETE FROM t WHERE id % 5 = 0", [])
        .expect("delete");
    txn.commit().expect("commit");
    let expected = 500 - 100 + 300 - 60;
    assert_eq!(count(&conn), expected);
    let reader = Connection::open(&path).expect("a reader on the default VFS");
    assert_eq!(count(&reader), expected);
    drop(reader);
    drop(conn);
    assert_eq!(integrity(&path), "ok");
}

/// The child of [`a_process_that_dies_keeps_every_commit`]: commits, then dies in a transaction
/// whose spilled frames are still held.
#[test]
#[ignore = "run by a_process_that_dies_keeps_every_commit in a process of its own"]
fn child_commits_then_dies() {
    let Some(path) = std::env::var_os("SWITCHYARD_WAL_VFS_CHILD_DB") else {
        return;
    };
    let mut conn = writer(Path::new(&path));
    for round in 0..30 {
        let txn = conn.transaction().expect("begin");
        insert_rows(&txn, round * 10, 10);
        txn.commit().expect("commit");
    }
    conn.pragma_update(None, "cache_size", 8)
        .expect("cache_size");
    let txn = conn.transaction().expect("begin");
    insert_rows(&txn, 10_000, 200);
    // No destructor, no close: as `kill -9` would leave it.
    std::process::abort();
}

#[test]
fn a_process_that_dies_keeps_every_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("crash.db");
    let status = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--exact",
            "tests::child_commits_then_dies",
            "--ignored",
            "--nocapture",
        ])
        .env("SWITCHYARD_WAL_VFS_CHILD_DB", &path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("the child runs");
    assert!(!status.success(), "the child aborted");
    assert_eq!(integrity(&path), "ok");
    let conn = Connection::open(&path).expect("reopen");
    assert_eq!(
        count(&conn),
        300,
        "every commit, none of the open transaction"
    );
}

#[test]
fn held_bytes_take_appends_and_overlaps_and_refuse_gaps_and_excess() {
    let mut held = super::Held {
        holding: true,
        ..super::Held::default()
    };
    assert!(held.take(32, b"abcd"));
    assert!(held.take(36, b"ef"), "an append");
    assert!(
        held.take(34, b"XYZW"),
        "an overlap that reaches past the end"
    );
    assert_eq!((held.offset, &held.bytes[..]), (32, &b"abXYZW"[..]));
    assert!(!held.take(39, b"g"), "a gap");
    assert!(!held.take(31, b"g"), "before what is held");
    assert!(
        !held.take(38, &vec![0; super::MAX_HELD]),
        "past the most held"
    );
    held.bytes.clear();
    assert!(held.take(4096, b"h"), "anywhere once nothing is held");
    let mut through = super::Held::default();
    assert!(
        !through.take(0, b"a"),
        "a device without power-safe overwrites"
    );
}

/// The pages of `path` in the page cache not yet written back: `cachestat(2)` (Linux 6.5),
/// `nr_dirty` plus `nr_writeback`. (On tmpfs nothing is ever written back: the test using it
/// needs the temporary directory on a disk.)
#[cfg(target_os = "linux")]
fn unsynced_pages(path: &Path) -> u64 {
    use std::os::fd::AsRawFd;
    /// `struct cachestat_range` and `struct cachestat` of `<linux/mman.h>`.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        cache: u64,
        dirty: u64,
        writeback: u64,
        evicted: u64,
        recently_evicted: u64,
    }
    /// `__NR_cachestat`, the same on every architecture; libc names it on only some.
    const SYS_CACHESTAT: libc::c_long = 451;
    // Closing this descriptor drops every POSIX lock the process holds on the file, SQLite's
    // included (the reason `sync_database_file` goes through SQLite's own file). Harmless here:
    // nothing else takes the test's database, and the test only reads the page cache after.
    let file = std::fs::File::open(path).expect("open the database file");
    let range = Range { off: 0, len: 0 };
    let mut stat = Stat::default();
    // SAFETY: both structs are the kernel's layout and outlive the call; the fd is open.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &raw const range,
            &raw mut stat,
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "cachestat(2) (Linux 6.5 or later) failed: {}",
        std::io::Error::last_os_error()
    );
    stat.dirty + stat.writeback
}

#[cfg(target_os = "linux")]
#[test]
fn a_checkpoints_pages_are_synced_from_another_connection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("synced.db");
    let mut conn = writer(&path);
    commit_rows(&mut conn, &path, 0, 500);
    // As the checkpointer's connection: a PASSIVE checkpoint that copies pages into the
    // database file and does not sync it (`synchronous = OFF` here; under load, because the
    // writer's appends keep any pass from copying the whole WAL).
    let checkpointer = Connection::open(&path).expect("open on the default VFS");
    checkpointer
        .pragma_update(None, "synchronous", "OFF")
        .expect("synchronous");
    checkpointer
        .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .expect("checkpoint");
    let before = unsynced_pages(&path);
    assert!(
        before > 0,
        "the checkpoint left its pages for the next sync"
    );
    assert_eq!(super::sync_database_file(&checkpointer, c"main"), Ok(true));
    assert_eq!(unsynced_pages(&path), 0, "{before} pages were unsynced");
}

#[test]
fn a_sync_answers_whether_there_was_a_file_and_names_a_missing_schema() {
    let memory = Connection::open_in_memory().expect("in memory");
    memory
        .execute_batch("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        .expect("schema");
    assert_eq!(super::sync_database_file(&memory, c"main"), Ok(false));
    assert_eq!(
        super::sync_database_file(&memory, c"elsewhere"),
        Err(rusqlite::ffi::SQLITE_ERROR)
    );
}
