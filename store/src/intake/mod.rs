//! The intake batch: what a batch of deliveries reads and writes in its one transaction, the
//! order of that transaction's steps (written once, in [`order`]), and the writers that run it
//! on each database (the SQLite writer thread, PostgreSQL's and MySQL's pool writers, in the
//! drivers).
//!
//! The daemon decides a batch ([`Batch`]): it names what to look up ([`Keys`]), decides from
//! what was found ([`Found`]) the rows to write ([`Writes`]), and answers the senders once the
//! store says the batch committed or failed. The store never decides a delivery; the daemon
//! never names a database.
//!
//! Invariant: a batch's transaction takes the steps of [`order::decide_batch`] in that order on
//! every database; a driver may merge steps into fewer statements (PostgreSQL's arrays) or run
//! them on a thread of its own (SQLite), never reorder or skip one.

pub(crate) mod annotate;
pub mod flow;
pub(crate) mod order;
pub(crate) mod pool;

use std::collections::HashMap;

use crate::Millis;
use crate::entities::{dispatch, entity_lock, intake, mailbox_cursor, raw_delivery, run_history};
use crate::leases::LockChanges;

/// `(source, scope, delivery_id)`: a delivery's identity (`intake_delivery_scope`).
pub type DeliveryKey = (String, String, String);

/// `(source, message_key)`: a message that may arrive as several deliveries.
pub type MessageKey = (String, String);

/// What a batch must look up before it can be decided.
#[derive(Debug, Default)]
pub struct Keys<'a> {
    /// `(source, scope, delivery_id)` of every delivery, for duplicates.
    pub deliveries: Vec<(&'a str, &'a str, &'a str)>,
    /// `(source, message_key)` of deliveries that name their message.
    pub messages: Vec<(&'a str, &'a str)>,
    /// `(tenant_id, target_entity_id)` of every event a live workflow triggers on: their lease
    /// rows are read row-locked until the commit.
    pub leases: Vec<(String, String)>,
    /// What flow control needs (empty when none is configured).
    pub flow: flow::FlowKeys,
}

/// The columns of a stored ledger row that its later copies are answered from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub intake_id: String,
    pub outcome: String,
    pub detail: Option<String>,
    pub run_id: Option<String>,
    pub workflow_id: Option<String>,
    pub held_by_run_id: Option<String>,
}

impl StoredAnswer {
    /// The answer columns of a full ledger row.
    pub fn of(row: &intake::Model) -> Self {
        Self {
            intake_id: row.id.clone(),
            outcome: row.outcome.clone(),
            detail: row.detail.clone(),
            run_id: row.run_id.clone(),
            workflow_id: row.workflow_id.clone(),
            held_by_run_id: row.held_by_run_id.clone(),
        }
    }
}

/// What the store held for a batch's [`Keys`].
#[derive(Debug, Default)]
pub struct Found {
    /// The stored answer of each `(source, scope, delivery_id)` already recorded.
    pub seen: HashMap<DeliveryKey, StoredAnswer>,
    /// The stored answer of the routed row that claimed each `(source, message_key)`.
    pub claimed: HashMap<MessageKey, StoredAnswer>,
    /// The lease rows of the batch's entities (row-locked until the commit).
    pub leases: Vec<entity_lock::Model>,
    /// What flow control's keys found (default when it needed nothing).
    pub flow: flow::FlowFound,
}

/// The rows a decided batch writes, in its transaction.
#[derive(Debug, Default)]
pub struct Writes {
    pub ledger: Vec<intake::Model>,
    /// The original bytes of ledger rows that keep them, in the ledger's order, at most one
    /// per row and with its id: written into their row ([`raw_by_row`]).
    pub raw: Vec<raw_delivery::Model>,
    /// At most one per `(source, mailbox)`: the furthest position of the batch.
    pub cursors: Vec<mailbox_cursor::Model>,
    /// New runs, lease changes and the runs whose expired leases were taken over.
    pub locks: LockChanges,
    /// The outbox: one pending dispatch per new run, written with the run (some claimed at
    /// once by this daemon's dispatcher: `claimed_by` set).
    pub dispatches: Vec<dispatch::Model>,
    /// `lease_expired` for each run taken over.
    pub history: Vec<run_history::Model>,
    /// Flow control's rows.
    pub flow: flow::FlowWrites,
}

/// Each ledger row's raw bytes, or `None`, in the ledger's order: what a driver writes into the
/// row's `raw_content_type` and `raw_body`. `raw` must name ledger rows in their order (as
/// [`Writes::raw`] says); bytes that name no row, or come out of order, are refused rather
/// than left unwritten.
pub(crate) fn raw_by_row<R>(
    ledger: &[intake::Model],
    raw: impl IntoIterator<Item = R>,
    id_of: impl Fn(&R) -> &str,
) -> Result<Vec<Option<R>>, String> {
    let mut raw = raw.into_iter().peekable();
    let by_row = ledger
        .iter()
        .map(|row| raw.next_if(|bytes| id_of(bytes) == row.id))
        .collect();
    match raw.next() {
        None => Ok(by_row),
        Some(bytes) => Err(format!(
            "the raw bytes of `{}` name no ledger row of their batch, or come out of its order",
            id_of(&bytes)
        )),
    }
}

/// What a committed batch hands back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Committed {
    /// Active runs it expired by taking over their leases.
    pub expired_runs: usize,
}

/// Why a batch did not commit.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Failure {
    /// A value no column can hold (too long, bytes the encoding refuses): a retry meets it
    /// again, so its deliveries are answered `invalid_event`, not 503.
    #[error("{0}")]
    Unstorable(String),
    /// The connection to the database failed: deciding deliveries one by one would fail too.
    #[error("{0}")]
    Connection(String),
    /// Anything else (after the retries of lost races): the senders retry later.
    #[error("{0}")]
    Other(String),
}

/// One batch of deliveries as the daemon decides it. The store calls, in one transaction:
/// [`Batch::keys`], then [`Batch::decide`] with what it found, [`Batch::claim`], writes the
/// rows, then [`Batch::written`]; and after the transaction ended, [`Batch::committed`] or
/// [`Batch::failed`] (a batch that lost a race is decided again, from `keys`).
pub trait Batch: Send {
    /// How many deliveries.
    fn len(&self) -> usize;

    /// Whether it holds no delivery.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The transaction is about to begin (for the batch's span and commit-time metrics).
    fn starting(&mut self) {}

    /// What to look up.
    fn keys(&mut self, now: Millis) -> Keys<'_>;

    /// Decides every delivery from what the store found; the rows to write.
    fn decide(&mut self, found: Found, now: Millis) -> Writes;

    /// Claims new dispatches for this daemon's dispatcher (sets their `claimed_by`), where it
    /// has a free slot: the run is then sent without a claim transaction of its own.
    fn claim(&mut self, _writes: &mut Writes, _now: Millis) {}

    /// After the writes, before the commit: an error fails the batch (a test hook).
    fn written(&self) -> Result<(), String> {
        Ok(())
    }

    /// The batch committed: answer its senders.
    fn committed(self: Box<Self>, committed: Committed);

    /// The batch failed for good: answer its senders.
    fn failed(self: Box<Self>, failure: Failure);

    /// One batch per delivery, each decided alone after the whole batch failed, so one
    /// poisonous delivery cannot refuse its neighbours.
    fn split(self: Box<Self>) -> Vec<Box<dyn Batch>>;
}

/// Where a writer takes its batches from: the daemon's queue of deliveries, one per writer.
#[async_trait::async_trait]
pub trait Batches: Send + Sync {
    /// The next batch: waits for a delivery, then takes what else is queued (up to the
    /// batch's bound). `None` once every sender is gone.
    async fn next(&mut self) -> Option<Box<dyn Batch>>;

    /// Another batch is already queued (a writer may then begin its transaction early); asked
    /// at the commit, so that deliveries that arrived during the batch count.
    fn more_waiting(&self) -> bool;

    /// A batch panicked (its senders were answered 503 by dropping it).
    fn panicked(&self);
}

impl crate::Store {
    /// How many intake writers commit in parallel: SQLite always 1; PostgreSQL 1 by default (a
    /// batch there is a few fixed statements on a connection the writer keeps, and on two
    /// cores one writer answered more than two or four); MySQL 4.
    pub fn intake_writers(&self, configured: Option<usize>) -> usize {
        match self.backend() {
            crate::handle::Backend::Sqlite => 1,
            crate::handle::Backend::Postgres => configured.unwrap_or(1).max(1),
            crate::handle::Backend::MySql => configured.unwrap_or(4).max(1),
        }
    }

    /// Starts one intake writer per source of batches ([`Store::intake_writers`] of them):
    /// on SQLite a thread with a connection of its own, elsewhere a task on the pool. They run
    /// until their source ends.
    pub fn start_intake(&self, sources: Vec<Box<dyn Batches>>) -> Result<(), sea_orm::DbErr> {
        self.driver().start_intake(self, sources)
    }
}

impl crate::Store {
    /// Records attempts in the intake writer's next transaction where the database has one
    /// writer that carries them (SQLite, whose one write lock they would otherwise queue for
    /// in turn with intake): how many still held their claim. Gives them back where it has
    /// none, or it did not take them in time; the caller then records them itself.
    pub async fn record_in_intake(
        &self,
        attempts: Vec<crate::outbox::Recorded>,
    ) -> Result<usize, Vec<crate::outbox::Recorded>> {
        self.driver().record_in_intake(attempts).await
    }

    /// Claims up to `limit` due dispatches of the uncapped push target `target` for `owner`
    /// in the intake writer's next transaction, where the database has one writer that carries
    /// claims (SQLite); read back as [`crate::outbox::claim_push`] returns them. `None` where
    /// it has none, or it did not take the claim in time: the caller claims itself.
    pub async fn claim_in_intake(
        &self,
        target: &str,
        owner: &str,
        limit: usize,
        claim_until: Millis,
    ) -> Option<Result<Vec<crate::outbox::ClaimedRun>, sea_orm::DbErr>> {
        self.driver()
            .claim_in_intake(target, owner, limit, claim_until)
            .await
            .map(|claimed| claimed.map_err(sea_orm::DbErr::Custom))
    }
}
