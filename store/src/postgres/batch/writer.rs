//! The pool writer: its kept connection and the transaction on it between batches, the retry
//! of a batch that lost a race, and a batch's steps ([`order::decide_batch`]) on PostgreSQL.
//!
//! Invariant: the connection goes back to the pool only with no transaction open (see [`Txn`]).

use std::collections::HashSet;

use sea_orm::DbErr;
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{PgConnection, PgPool, Postgres};

use super::super::flow as flow_store;
use super::lookup::look_up;
use super::simple;
use super::write::write;
use crate::entities::entity_lock;
use crate::intake::flow::{FlowFound, FlowKeys};
use crate::intake::order::{self, Steps};
use crate::intake::pool::{db_err, failure};
use crate::intake::{Batch, Committed, Failure, Found, Keys, Writes};
use crate::lost_race::is_lost_race;
use crate::{Millis, now_millis};

/// Row-locking reads see the latest committed lease.
const BEGIN: &str =
    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_generic_plan";
/// A batch's commit and the next batch's [`BEGIN`], in one simple-query message.
const COMMIT_AND_BEGIN: &str = "COMMIT; BEGIN ISOLATION LEVEL READ COMMITTED; \
                                SET LOCAL plan_cache_mode = force_generic_plan";

/// The transaction on a writer's kept connection between batches.
///
/// Invariant: the connection goes back to the pool only with no transaction open ([`Txn::None`]);
/// a batch that fails or panics leaves [`Txn::Unfinished`], rolled back before the next batch
/// uses the connection, which is closed instead if the rollback fails. A transaction is begun
/// ahead of its batch ([`Txn::Begun`]) only when that batch is already queued, so a writer never
/// sits idle inside a transaction (a server's `idle_in_transaction_session_timeout` would close
/// the connection under it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Txn {
    /// No transaction: the next batch sends [`BEGIN`] itself.
    None,
    /// Begun by the previous batch's [`COMMIT_AND_BEGIN`], with nothing in it yet.
    Begun,
    /// A batch began its transaction and has not committed it: if it is still open, it may
    /// hold that batch's writes, which must never be committed by the next one.
    Unfinished,
}

/// A pool writer's connection, kept from batch to batch: taking one from the pool for each
/// batch cost a round trip of its own (the pool pings a connection before handing it out).
pub(crate) struct Writer {
    pool: PgPool,
    held: Option<PoolConnection<Postgres>>,
    txn: Txn,
    /// `flow_gates` rows this writer knows exist (rows are never deleted), so that a batch
    /// creates a gate before its transaction, never inside it after locking leases.
    known_gates: HashSet<String>,
}

impl Writer {
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            held: None,
            txn: Txn::None,
            known_gates: HashSet::new(),
        }
    }

    /// One transaction: the batch's steps ([`order::decide_batch`]), then the commit, which
    /// also begins the next batch's transaction when `more_waiting`. After a connection error
    /// the next batch takes a fresh connection from the pool.
    async fn commit_once(
        &mut self,
        batch: &mut dyn Batch,
        more_waiting: order::MoreWaiting<'_>,
    ) -> Result<Committed, DbErr> {
        // Left by a batch that panicked (a failed one rolled back below).
        if self.txn == Txn::Unfinished {
            self.roll_back().await;
        }
        let conn = match &mut self.held {
            Some(conn) => conn,
            None => self.held.insert(self.pool.acquire().await.map_err(db_err)?),
        };
        let result = commit_batch(
            conn,
            &mut self.txn,
            &mut self.known_gates,
            batch,
            more_waiting,
        )
        .await;
        if matches!(result, Err(DbErr::Conn(_))) {
            self.drop_connection();
        } else if result.is_err() {
            self.roll_back().await;
        }
        result
    }

    /// Ends the transaction a failed batch left, or gives up its connection if that fails.
    async fn roll_back(&mut self) {
        if let Some(conn) = &mut self.held
            && self.txn != Txn::None
            && let Err(error) = simple(conn, "ROLLBACK").await
        {
            tracing::warn!(%error, "an intake writer could not roll back a failed batch; it closes the connection");
            self.drop_connection();
        }
        self.txn = Txn::None;
    }

    /// Lets go of the kept connection; one that may be inside a transaction is closed, never
    /// returned to the pool.
    fn drop_connection(&mut self) {
        if let Some(mut conn) = self.held.take()
            && self.txn != Txn::None
        {
            conn.close_on_drop();
        }
        self.txn = Txn::None;
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.drop_connection();
    }
}

impl order::Writer for Writer {
    async fn commit(
        &mut self,
        batch: &mut dyn Batch,
        more_waiting: order::MoreWaiting<'_>,
    ) -> Result<Committed, Failure> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.commit_once(batch, more_waiting).await {
                Err(error) if attempt < order::ATTEMPTS && is_lost_race(&error) => {
                    tracing::debug!(%error, attempt, "batch lost a race with another writer; retrying");
                    tokio::time::sleep(order::backoff(attempt)).await;
                }
                result => return result.map_err(failure),
            }
        }
    }
}

async fn commit_batch(
    conn: &mut PgConnection,
    txn: &mut Txn,
    known_gates: &mut HashSet<String>,
    batch: &mut dyn Batch,
    more_waiting: order::MoreWaiting<'_>,
) -> Result<Committed, DbErr> {
    let now = now_millis();
    let mut steps = PgSteps {
        conn: &mut *conn,
        txn: &mut *txn,
        known_gates,
    };
    let committed = order::decide_batch(&mut steps, batch, now).await?;
    if more_waiting() {
        simple(conn, COMMIT_AND_BEGIN).await?;
        *txn = Txn::Begun;
    } else {
        simple(conn, "COMMIT").await?;
        *txn = Txn::None;
    }
    Ok(committed)
}

/// A batch's steps on the writer's connection.
struct PgSteps<'c> {
    conn: &'c mut PgConnection,
    txn: &'c mut Txn,
    known_gates: &'c mut HashSet<String>,
}

impl Steps for PgSteps<'_> {
    type Error = DbErr;

    /// A gate never used before is created before the transaction begins, so the batch only
    /// ever locks rows that exist; then the transaction begins (unless the last batch's
    /// commit already began it).
    async fn begin(&mut self, keys: &Keys<'_>, now: Millis) -> Result<(), DbErr> {
        let gates = &keys.flow.gates;
        if gates.iter().any(|g| !self.known_gates.contains(g)) {
            if *self.txn == Txn::Begun {
                *self.txn = Txn::Unfinished;
                simple(self.conn, "COMMIT").await?;
                *self.txn = Txn::None;
            }
            flow_store::create_gates(&mut *self.conn, gates, now)
                .await
                .map_err(db_err)?;
            self.known_gates.extend(gates.iter().cloned());
        }
        let begun = *self.txn == Txn::Begun;
        *self.txn = Txn::Unfinished;
        if !begun {
            simple(self.conn, BEGIN).await?;
        }
        Ok(())
    }

    async fn look_up(&mut self, keys: &Keys<'_>, _now: Millis) -> Result<Found, DbErr> {
        let found = look_up(self.conn, keys).await?;
        if found.flow.tats.len() < keys.flow.gates.len() {
            self.known_gates.clear();
            return Err(DbErr::Custom(
                "a flow_gates row vanished while intake used it; the senders are told to retry"
                    .into(),
            ));
        }
        Ok(found)
    }

    async fn counts_and_windows(
        &mut self,
        flow: &FlowKeys,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut FlowFound,
    ) -> Result<(), DbErr> {
        flow_store::counts_and_windows(self.conn, flow, leases, now, found)
            .await
            .map_err(db_err)
    }

    async fn write(&mut self, mut writes: Writes, now: Millis) -> Result<(), DbErr> {
        let flow = std::mem::take(&mut writes.flow);
        flow_store::replace(self.conn, &flow)
            .await
            .map_err(db_err)?;
        write(self.conn, writes, flow, now).await
    }

    fn refused(detail: String) -> DbErr {
        DbErr::Custom(detail)
    }
}
