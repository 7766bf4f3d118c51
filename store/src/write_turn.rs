//! This process's turns at SQLite's one write lock, handed out in arrival order.
//!
//! SQLite lets one connection write at a time; a connection that finds the lock taken sleeps in
//! SQLite's busy handler, in steps that grow to 100 ms. Under sustained intake the intake writer
//! (its own `rusqlite` connection) takes the lock again within microseconds of each commit, so a
//! pooled connection (the dispatcher's claims and records, heartbeats, retention) that lost the
//! race once could sleep through dozens of intake batches: delivery fell to a few hundred runs
//! per second while intake routed thousands (BENCHMARKS.md, round 5).
//!
//! *Invariant: every write transaction this process starts on SQLite begins while holding a
//! turn, and the turns queue first come, first served (tokio's mutex is fair). The intake writer
//! holds its turn until it commits, so a pooled connection that gets a turn finds the lock free
//! and never sleeps in the busy handler behind it; a pooled transaction gives its turn back once
//! `BEGIN IMMEDIATE` has taken the lock, and the intake writer then waits for that commit in a
//! busy handler of short steps of its own.* Other processes on the same file still meet in
//! SQLite's busy handler, as before.

use tokio::sync::{Mutex, MutexGuard};

static TURN: Mutex<()> = Mutex::const_new(());

/// Waits for this process's next turn to begin a SQLite write transaction.
pub async fn take() -> MutexGuard<'static, ()> {
    TURN.lock().await
}

/// [`take`] for a thread outside the async runtime (the intake writer); blocks it.
pub fn take_blocking() -> MutexGuard<'static, ()> {
    TURN.blocking_lock()
}
