//! The SQLite intake writer: one thread with its own connection decides each batch in one
//! `BEGIN IMMEDIATE` transaction with cached statements (`intake.rs`).
//!
//! SQLite has one writer at a time, so the whole group commit runs on this thread: no statement
//! crosses to another thread and back (sqlx runs each statement on its own worker thread, and on
//! a loaded two-core machine every such hop waits for a core). The outbox work the dispatcher
//! would otherwise do in write transactions of its own (claims of due dispatches, recorded
//! attempts: [`super::riders`]) rides in this thread's next transaction, so on SQLite every turn
//! at the one write lock is this thread's. The pool keeps serving every other query; both open
//! the same WAL database.
//!
//! Invariant: the batch's steps are `intake::order`'s; a rider is answered only after the
//! transaction that carried it ended (committed, or rolled back and given back).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use super::checkpoint::{self, Nudge};
use super::intake::TxnSteps;
use super::riders::{Riders, Taken};
use crate::connect::Durability;
use crate::intake::order::{self, ATTEMPTS, Writer};
use crate::intake::{Batch, Batches, Committed, Failure};
use crate::now_millis;

fn open(path: &Path, durability: Durability) -> Result<Connection, String> {
    let open = || -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = match durability {
            // Every commit syncs the WAL, so its frames can reach the file in a few large writes
            // just before that sync (`switchyard_wal_vfs`).
            Durability::Full => {
                let vfs = switchyard_wal_vfs::register().map_err(|code| {
                    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
                })?;
                Connection::open_with_flags_and_vfs(path, flags, vfs)?
            }
            Durability::Normal => Connection::open_with_flags(path, flags)?,
        };
        // A pooled connection holds the write lock only between its turn (`write_turn`) and its
        // commit, usually a millisecond or two: wait for it in short steps, not SQLite's default
        // steps of up to 100 ms, for at most 5 s as before.
        conn.busy_handler(Some(wait_briefly))?;
        conn.pragma_update(
            None,
            "synchronous",
            match durability {
                Durability::Full => "FULL",
                Durability::Normal => "NORMAL",
            },
        )?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.set_prepared_statement_cache_capacity(64);
        // Checkpoints run on their own thread (`checkpoint`).
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        Ok(conn)
    };
    let conn = open().map_err(|e| e.to_string())?;
    // `journal_mode` answers with the mode now in force.
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| e.to_string())?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!(
            "the database stays in journal mode `{mode}`; WAL is required"
        ));
    }
    Ok(conn)
}

/// The busy handler: sleep 100 µs per call, give up (SQLITE_BUSY) after 5 s.
fn wait_briefly(calls: i32) -> bool {
    std::thread::sleep(Duration::from_micros(100));
    calls < 50_000
}

/// Opens the writer's and the checkpointer's connections to the (migrated) database file and
/// starts their threads; they run until `batches` ends.
pub(crate) fn start(
    path: PathBuf,
    durability: Durability,
    riders: std::sync::Arc<Riders>,
    batches: Box<dyn Batches>,
) -> Result<(), String> {
    let conn = open(&path, durability)
        .map_err(|e| format!("cannot open {} for the intake writer: {e}", path.display()))?;
    let checkpoints = checkpoint::start(&path).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("intake-sqlite".into())
        .spawn(move || run(conn, batches, checkpoints, &riders))
        .map_err(|e| e.to_string())?;
    Ok(())
}

fn run(
    mut conn: Connection,
    mut batches: Box<dyn Batches>,
    mut checkpoints: Nudge,
    riders: &Riders,
) {
    riders.open();
    loop {
        // Deliveries first; riders wake an idle writer too.
        let next = futures::executor::block_on(async {
            tokio::select! {
                biased;
                batch = batches.next() => Some(batch),
                () = riders.woken() => None,
            }
        });
        let batch = match next {
            Some(Some(batch)) => Some(batch),
            Some(None) => break,
            None => None,
        };
        let more_waiting = || batches.more_waiting();
        let mut writer = SqliteWriter {
            conn: &mut conn,
            riders: Some(riders.take()),
        };
        // A panic on one batch drops its replies (its senders answer 503, retry safe) and
        // leaves the transaction rolled back; the writer goes on with the next batch.
        let decided = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match batch {
            Some(batch) => {
                futures::executor::block_on(order::decide(&mut writer, batch, &more_waiting))
            }
            None => writer.riders_alone(),
        }));
        if decided.is_err() {
            batches.panicked();
            tracing::error!(
                "the intake writer panicked on a batch; its senders were answered 503 and it goes on"
            );
        } else if let Some(taken) = writer.riders.take() {
            // Not carried (the batch was decided one delivery at a time): given back.
            taken.failed("the batch that was to carry them was decided one delivery at a time");
        }
        checkpoints.committed();
        checkpoints.catch_up(&conn);
    }
    riders.close();
}

/// The writer thread's connection for one batch, with the riders taken for it.
struct SqliteWriter<'c> {
    conn: &'c mut Connection,
    /// Claims and attempts to carry in the batch's transaction (taken by the first try).
    riders: Option<Taken>,
}

impl SqliteWriter<'_> {
    /// The riders in a transaction of their own, while no delivery waits.
    fn riders_alone(&mut self) {
        let Some(taken) = self.riders.take() else {
            return;
        };
        if taken.is_empty() {
            return;
        }
        let done = (|| {
            let _turn = crate::write_turn::take_blocking();
            let now = now_millis();
            let txn = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let carried = taken.apply(&txn, now)?;
            txn.commit()?;
            Ok::<_, rusqlite::Error>(carried)
        })();
        match done {
            Ok(carried) => taken.answer(carried),
            Err(error) => {
                tracing::warn!(%error, "cannot claim or record for the dispatcher; it does so itself");
                taken.failed(&error.to_string());
            }
        }
    }

    /// One transaction: the riders, the batch's steps, commit.
    async fn try_once(
        &mut self,
        batch: &mut dyn Batch,
        riders: Option<&Taken>,
    ) -> rusqlite::Result<(Committed, Option<super::riders::Carried>)> {
        // Held until the commit: a pooled connection waiting for a turn then finds the lock free.
        let _turn = crate::write_turn::take_blocking();
        let now = now_millis();
        let txn = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        // The backlog's oldest rows are claimed before the batch's new runs.
        let carried = riders.map(|r| r.apply(&txn, now)).transpose()?;
        let committed = order::decide_batch(&mut TxnSteps(&txn), batch, now).await?;
        txn.commit()?;
        Ok((committed, carried))
    }
}

impl Writer for SqliteWriter<'_> {
    async fn commit(
        &mut self,
        batch: &mut dyn Batch,
        _more_waiting: order::MoreWaiting<'_>,
    ) -> Result<Committed, Failure> {
        let riders = self.riders.take();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_once(batch, riders.as_ref()).await {
                Ok((committed, carried)) => {
                    if let (Some(riders), Some(carried)) = (riders, carried) {
                        riders.answer(carried);
                    }
                    return Ok(committed);
                }
                Err(error) if attempt < ATTEMPTS && is_lost_race(&error) => {
                    tracing::debug!(%error, attempt, "batch lost a race with another writer; retrying");
                    std::thread::sleep(order::backoff(attempt));
                }
                Err(error) => {
                    if let Some(riders) = riders {
                        riders.failed("the batch transaction that carried them failed");
                    }
                    return Err(if is_unstorable(&error) {
                        Failure::Unstorable(error.to_string())
                    } else {
                        Failure::Other(error.to_string())
                    });
                }
            }
        }
    }
}

/// An error about the delivery's values, which a retry would meet again.
fn is_unstorable(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::TooBig | ErrorCode::TypeMismatch | ErrorCode::ParameterOutOfRange)
    ) || matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.code == ErrorCode::ConstraintViolation && !is_lost_race(error)
    )
}

/// Another connection (a second daemon on the same file, or the busy timeout running out)
/// got in the way: trying again will see its committed result.
fn is_lost_race(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    ) || matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}
