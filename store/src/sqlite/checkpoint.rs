//! Checkpoints of the SQLite WAL, mostly off the intake writer's thread.
//!
//! By default the connection whose commit makes the WAL exceed 1,000 pages copies the WAL into
//! the database file and syncs it, inside that commit. For the intake writer that meant one
//! batch in about 25 took three to four times as long, and every sender in it waited. The
//! writer's connection turns that off and, after each commit, nudges this thread, which runs a
//! `PASSIVE` checkpoint (it never blocks the writer) at most every [`PAUSE`].
//!
//! Under sustained load that pass never catches up: the writer appends while it copies, and
//! the WAL starts over only when a write transaction begins with every frame copied. So after
//! each pass the writer itself copies the few frames written meanwhile, between two batches
//! ([`Nudge::catch_up`]), and its next transaction starts the WAL over. (A `RESTART`
//! checkpoint from this thread did the same by taking the write lock, but it had to wait for a
//! gap between batches and then made the writer wait in SQLite's busy handler: stalls of 0.2 to
//! 3.5 s, measured.) A pass ends by syncing the database file, so that the catch-up, which
//! SQLite ends with a sync of it, writes back only its own few pages.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::failure_streak::FailureStreak;

/// Least time between two checkpoints while the writer keeps committing. Each pass ends in a
/// sync of the pages it copied, which the writer's next commits queue behind on the device: the
/// shorter the pause, the smaller each sync and the shorter the writer's stalls, but the more
/// often a page is copied again. Under the concurrency-64 load (BENCHMARKS.md round 30) 100 ms
/// put the webhook p99 at 10.3-11.0 ms, 50 ms at 9.0-9.95 ms for 2.5-9% fewer webhook answers
/// a second (by sitting), 30 ms at 7.6-8.5 ms for about 7% fewer in the 2.5% sitting.
const PAUSE: Duration = Duration::from_millis(50);

/// The writer's side: tells the checkpointer that commits happened, and finishes its passes.
#[derive(Debug)]
pub(crate) struct Nudge {
    commits: SyncSender<()>,
    /// Set when a pass ended; the writer copies what was written since.
    passed: Arc<AtomicBool>,
    /// The writer's catch-ups failing in a row.
    catch_up_failures: FailureStreak,
}

impl Nudge {
    /// Never waits.
    pub fn committed(&self) {
        // Full: a checkpoint is already due. Disconnected: the checkpointer has stopped.
        let _ = self.commits.try_send(());
    }

    /// On the writer's connection, between transactions: if a pass ended since the last call,
    /// copies the frames committed since it began, so the next transaction starts the WAL over.
    pub fn catch_up(&mut self, conn: &Connection) {
        if !self.passed.swap(false, Ordering::Relaxed) {
            return;
        }
        let caught_up = checkpoint(conn, "writer");
        self.catch_up_failures.log(
            &caught_up,
            "the writer's WAL checkpoint",
            "the next pass retries it",
        );
    }
}

/// Opens the checkpointer's connection and starts its thread; it ends when every [`Nudge`] is
/// dropped.
pub(crate) fn start(path: &Path) -> std::io::Result<Nudge> {
    let conn = Connection::open(path).map_err(std::io::Error::other)?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(std::io::Error::other)?;
    let (commits, nudged) = sync_channel(1);
    let passed = Arc::new(AtomicBool::new(false));
    let checkpointer_passed = passed.clone();
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || run(conn, nudged, &checkpointer_passed))?;
    Ok(Nudge {
        commits,
        passed,
        catch_up_failures: FailureStreak::default(),
    })
}

/// The checkpointer's loop. A failure that repeats is logged once a minute with how many
/// were not ([`FailureStreak`]), not on every pass.
fn run(conn: Connection, nudged: Receiver<()>, passed: &AtomicBool) {
    let mut failures = Failures::default();
    while nudged.recv().is_ok() {
        let passed_now = pass(&conn, &mut failures.syncs);
        if passed_now.is_ok() {
            passed.store(true, Ordering::Relaxed);
        }
        failures.checkpoints.log(
            &passed_now,
            "a WAL checkpoint",
            "the next commit retries it",
        );
        std::thread::sleep(PAUSE);
    }
}

/// The checkpointer's two kinds of failure, each with its own streak.
#[derive(Debug, Default)]
struct Failures {
    checkpoints: FailureStreak,
    syncs: FailureStreak,
}

/// Checkpoints again while the last checkpoint found many new frames, so the writer's
/// [`Nudge::catch_up`] has only the few committed during a short last one to copy; then syncs
/// the database file, so that the catch-up's own sync has only those few pages to write.
fn pass(conn: &Connection, sync_failures: &mut FailureStreak) -> rusqlite::Result<()> {
    let mut copied = checkpoint(conn, "checkpointer")?;
    for _ in 1..MAX_CHECKPOINTS_PER_PASS {
        let before = copied;
        copied = checkpoint(conn, "checkpointer")?;
        if copied - before < CATCH_UP_PAGES {
            break;
        }
    }
    sync_copied_pages(conn, sync_failures);
    Ok(())
}

/// Syncs the pages a pass copied into the database file. SQLite syncs the database only at the
/// end of a checkpoint that copied the whole WAL, which under load is the writer's catch-up:
/// without this it wrote back every page of the pass (megabytes) while every sender waited.
/// A failure is only logged: the catch-up's own sync still covers the pages.
fn sync_copied_pages(conn: &Connection, failures: &mut FailureStreak) {
    let started = Instant::now();
    let synced = switchyard_wal_vfs::sync_database_file(conn, c"main")
        .map_err(|code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None));
    if synced.is_ok() {
        tracing::debug!(
            micros = started.elapsed().as_micros() as u64,
            "database file synced after a checkpoint"
        );
    }
    failures.log(
        &synced,
        "the checkpointer's sync of the database file",
        "the writer's catch-up syncs it",
    );
}

/// New WAL pages few enough for the writer to copy between two batches.
const CATCH_UP_PAGES: i64 = 256;
const MAX_CHECKPOINTS_PER_PASS: usize = 4;

/// A `PASSIVE` checkpoint: copies what no reader still needs, waits for nobody. Returns the
/// number of WAL pages now copied into the database.
fn checkpoint(conn: &Connection, by: &'static str) -> rusqlite::Result<i64> {
    let started = Instant::now();
    // (busy, pages in the WAL, pages copied into the database)
    let (busy, wal_pages, copied): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
    tracing::debug!(
        by,
        busy,
        wal_pages,
        copied,
        micros = started.elapsed().as_micros() as u64,
        "WAL checkpointed"
    );
    Ok(copied)
}
