//! Checkpoints of the SQLite WAL, off the intake writer's thread.
//!
//! By default the connection whose commit makes the WAL exceed 1,000 pages copies the WAL into
//! the database file and syncs it, inside that commit. For the intake writer that meant one
//! batch in about 25 took three to four times as long, and every sender in it waited. The
//! writer's connection turns that off and, after each commit, nudges this thread, which runs a
//! `PASSIVE` checkpoint (it never blocks the writer) at most every [`PAUSE`]. Should the WAL
//! still outgrow [`RESTART_PAGES`] under sustained load, a `RESTART` checkpoint briefly waits for
//! the writer so the file can start over.

use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use rusqlite::Connection;

/// Least time between two checkpoints while the writer keeps committing.
const PAUSE: Duration = Duration::from_millis(100);
/// WAL pages (4 KiB each) beyond which the checkpoint waits for the writer to restart the WAL.
const RESTART_PAGES: i64 = 16_384;

/// Tells the checkpointer that commits happened; never waits.
#[derive(Debug, Clone)]
pub(super) struct Nudge(SyncSender<()>);

impl Nudge {
    pub fn committed(&self) {
        // Full: a checkpoint is already due. Disconnected: the checkpointer has stopped.
        let _ = self.0.try_send(());
    }
}

/// Opens the checkpointer's connection and starts its thread; it ends when every [`Nudge`] is
/// dropped.
pub(super) fn start(path: &Path) -> anyhow::Result<Nudge> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    let (nudge, nudged) = sync_channel(1);
    std::thread::Builder::new()
        .name("sqlite-checkpoint".into())
        .spawn(move || run(conn, nudged))?;
    Ok(Nudge(nudge))
}

fn run(conn: Connection, nudged: Receiver<()>) {
    while nudged.recv().is_ok() {
        if let Err(error) = checkpoint(&conn) {
            tracing::warn!(%error, "WAL checkpoint failed; the next commit retries it");
        }
        std::thread::sleep(PAUSE);
    }
}

fn checkpoint(conn: &Connection) -> rusqlite::Result<()> {
    // (busy, pages in the WAL, pages copied into the database)
    let (_, wal_pages, _): (i64, i64, i64) =
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?;
    if wal_pages > RESTART_PAGES {
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))?;
    }
    Ok(())
}
