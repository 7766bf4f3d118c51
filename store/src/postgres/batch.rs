//! One batch on PostgreSQL: the pool writer's lookups and writes as two fixed statements over
//! arrays (`UNNEST`), so each is parsed and planned once per connection, not once per batch size.
//!
//! A batch is `BEGIN`, one lookup (stored answers for duplicates and claimed messages, and the
//! row-locked leases), one statement that writes every table through data-modifying `WITH`
//! clauses, and `COMMIT`: four round trips (five when an expired lease is taken over). When
//! another batch is already queued behind it, the `COMMIT` carries the next batch's `BEGIN`
//! in the same message, so a busy writer spends three round trips a batch (see [`Txn`]).
//! Multi-row `VALUES` lists and `IN (...)` lists made PostgreSQL parse and plan a new statement
//! text for almost every batch, which cost it more CPU than the rows themselves.
//!
//! The statements run with their generic plan (`plan_cache_mode = force_generic_plan`):
//! planning them anew for each batch's array sizes took a quarter of PostgreSQL's CPU. A generic
//! plan is made once per connection, with the table statistics of that moment, often an empty
//! table's, so no statement leaves the planner a choice that depends on them: each lookup
//! probes a unique index once per key (`LATERAL ... LIMIT 1`, never turned into a hash join),
//! and every write is an `INSERT` whose conflicts go through a unique index. (Plain joins
//! against `UNNEST` got sequential scans and hash joins, planned on empty tables and kept while
//! the tables grew: 1,546 webhooks/s against 6,184 for the baseline.) The rare expiry of runs
//! whose lease was taken over is its own statement, planned with its values.

use std::collections::{BTreeSet, HashMap, HashSet};

use sea_orm::DbErr;
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::postgres::PgRow;
use sea_orm::sqlx::{self, PgConnection, PgPool, Postgres, Row};

use super::flow as flow_store;
use crate::entities::entity_lock;
use crate::entities::run::RunStatus;
use crate::intake::flow::{FlowFound, FlowKeys, FlowWrites};
use crate::intake::order::{self, Steps};
use crate::intake::pool::{db_err, failure, is_lost_race};
use crate::intake::{Batch, Committed, Failure, Found, Keys, MessageKey, StoredAnswer, Writes};
use crate::{ACTIVE, Millis, now_millis};

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
enum Txn {
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
        more_waiting: bool,
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
        more_waiting: bool,
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
    more_waiting: bool,
) -> Result<Committed, DbErr> {
    let now = now_millis();
    let mut steps = PgSteps {
        conn: &mut *conn,
        txn: &mut *txn,
        known_gates,
    };
    let committed = order::decide_batch(&mut steps, batch, now).await?;
    if more_waiting {
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

/// Sends `sql` (one or more statements without parameters) in one simple-query message.
async fn simple(conn: &mut PgConnection, sql: &'static str) -> Result<(), DbErr> {
    sqlx::raw_sql(sql).execute(conn).await.map_err(db_err)?;
    Ok(())
}

/// Everything a batch needs to know, in one round trip: the flow-control gates it names
/// (`gate`, row-locked, first and in name order: every writer locks gates before leases), the
/// stored answer of each `(source, scope, delivery_id)` (`delivery` rows), of the routed row that
/// claimed each `(source, message_key)` (`message`), and the lease row of each `(tenant_id,
/// target_entity_id)` that has one (`lease`), row-locked until the commit.
const LOOK_UP: &str = "\
WITH gates AS ( \
    SELECT g.name, g.tat_us FROM UNNEST($7::text[]) AS k(name) \
    CROSS JOIN LATERAL ( \
        SELECT name, tat_us FROM flow_gates WHERE name = k.name LIMIT 1 FOR UPDATE \
    ) AS g \
), leases AS ( \
    SELECT l.* \
    FROM UNNEST($5::text[], $6::text[]) AS k(tenant_id, target_entity_id) \
    CROSS JOIN LATERAL ( \
        SELECT tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at \
        FROM entity_locks \
        WHERE target_entity_id = k.target_entity_id AND tenant_id = k.tenant_id \
        LIMIT 1 FOR UPDATE \
    ) AS l \
) \
SELECT 'gate', name::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, \
       NULL::text, NULL::text, tat_us, NULL::int8, NULL::int8, NULL::text \
FROM gates \
UNION ALL \
SELECT 'delivery', k.source, k.key, i.id, i.outcome, i.detail, i.run_id, i.workflow_id, \
       i.held_by_run_id, NULL::int8, NULL::int8, NULL::int8, k.scope \
FROM UNNEST($1::text[], $2::text[], $8::text[]) AS k(source, key, scope) \
CROSS JOIN LATERAL ( \
    SELECT id, outcome, detail, run_id, workflow_id, held_by_run_id FROM intake \
    WHERE delivery_id = k.key AND source = k.source AND scope = k.scope LIMIT 1 \
) AS i \
UNION ALL \
SELECT 'message', k.source, k.key, i.id, i.outcome, i.detail, i.run_id, i.workflow_id, \
       i.held_by_run_id, NULL, NULL, NULL, NULL \
FROM UNNEST($3::text[], $4::text[]) AS k(source, key) \
CROSS JOIN LATERAL ( \
    SELECT id, outcome, detail, run_id, workflow_id, held_by_run_id FROM intake \
    WHERE message_key = k.key AND source = k.source LIMIT 1 \
) AS i \
UNION ALL \
SELECT 'lease', tenant_id, target_entity_id, NULL, NULL, NULL, run_id, NULL, NULL, \
       fencing_token, expires_at, updated_at, NULL \
FROM leases";

/// Runs [`LOOK_UP`] for a batch's [`Keys`]. Lease keys go in sorted, so two replicas lock
/// shared rows in the same order.
async fn look_up(conn: &mut PgConnection, lookups: &Keys<'_>) -> Result<Found, DbErr> {
    let mut delivery_sources = Vec::with_capacity(lookups.deliveries.len());
    let mut delivery_scopes = Vec::with_capacity(lookups.deliveries.len());
    let mut delivery_ids = Vec::with_capacity(lookups.deliveries.len());
    for &(source, scope, id) in &lookups.deliveries {
        delivery_sources.push(source);
        delivery_scopes.push(scope);
        delivery_ids.push(id);
    }
    let (message_sources, message_keys): (Vec<&str>, Vec<&str>) =
        lookups.messages.iter().copied().unzip();
    let (tenants, entities): (Vec<&str>, Vec<&str>) = lookups
        .leases
        .iter()
        .map(|(tenant, entity)| (tenant.as_str(), entity.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .unzip();
    let rows = sqlx::query(LOOK_UP)
        .bind(delivery_sources)
        .bind(delivery_ids)
        .bind(message_sources)
        .bind(message_keys)
        .bind(tenants)
        .bind(entities)
        .bind(&lookups.flow.gates)
        .bind(delivery_scopes)
        .fetch_all(&mut *conn)
        .await
        .map_err(db_err)?;
    let mut found = Found {
        seen: HashMap::new(),
        claimed: HashMap::new(),
        leases: Vec::new(),
        flow: Default::default(),
    };
    for row in rows {
        found_row(&mut found, &row).map_err(db_err)?;
    }
    Ok(found)
}

/// Adds one row of [`LOOK_UP`] to what was found.
fn found_row(found: &mut Found, row: &PgRow) -> Result<(), sqlx::Error> {
    let kind: &str = row.try_get(0)?;
    if kind == "gate" {
        found.flow.tats.insert(row.try_get(1)?, row.try_get(9)?);
        return Ok(());
    }
    let key: MessageKey = (row.try_get(1)?, row.try_get(2)?);
    if kind == "lease" {
        let (tenant_id, target_entity_id) = key;
        found.leases.push(entity_lock::Model {
            tenant_id,
            target_entity_id,
            run_id: row.try_get(6)?,
            fencing_token: row.try_get(9)?,
            expires_at: row.try_get(10)?,
            updated_at: row.try_get(11)?,
        });
        return Ok(());
    }
    let answer = StoredAnswer {
        intake_id: row.try_get(3)?,
        outcome: row.try_get(4)?,
        detail: row.try_get(5)?,
        run_id: row.try_get(6)?,
        workflow_id: row.try_get(7)?,
        held_by_run_id: row.try_get(8)?,
    };
    if kind == "message" {
        found.claimed.insert(key, answer);
    } else {
        let (source, id) = key;
        found.seen.insert((source, row.try_get(12)?, id), answer);
    }
    Ok(())
}

/// Every write of a batch but the expiry of runs, in one statement; each `WITH` clause is a
/// no-op for empty arrays. A lease created meanwhile by another replica makes `created` fail
/// and the batch retry; the `changed` rows are row-locked by [`LOOK_UP`].
///
/// Flow control's writes (`gates`, `members`, `due`) update rows [`LOOK_UP`] and
/// [`flow_store::counts_and_windows`] locked: each is found by one probe of its primary key
/// and updated by `ctid` (a TID scan), as `= ANY(..)` got generic plans that scanned the
/// table (and, with `status = 'pending'` added, every pending dispatch on `dispatches_due`).
/// A dispatch's due time is written only for an open window, still pending and unclaimed
/// under its row lock.
const WRITE: &str = "\
WITH created AS ( \
    INSERT INTO entity_locks \
        (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[], \
                         $6::int8[]) \
), changed AS ( \
    INSERT INTO entity_locks \
        (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
    SELECT * FROM UNNEST($7::text[], $8::text[], $9::text[], $10::int8[], $11::int8[], \
                         $12::int8[]) \
    ON CONFLICT (target_entity_id, tenant_id) DO UPDATE SET run_id = excluded.run_id, \
        fencing_token = excluded.fencing_token, expires_at = excluded.expires_at, \
        updated_at = excluded.updated_at \
), new_runs AS ( \
    INSERT INTO runs (id, tenant_id, workflow_id, target_entity_id, intake_id, status, \
                      fencing_token, lock_ttl_ms, created_at, updated_at, finished_at, \
                      traceparent, tracestate, config_revision, principal_id, deadline_at, \
                      budgets) \
    SELECT * FROM UNNEST($13::text[], $14::text[], $15::text[], $16::text[], $17::text[], \
                         $18::text[], $19::int8[], $20::int8[], $21::int8[], $22::int8[], \
                         $23::int8[], $69::text[], $70::text[], $73::text[], $74::text[], \
                         $75::int8[], $76::text[]) \
), raw AS ( \
    INSERT INTO raw_deliveries (id, source, content_type, body, received_at) \
    SELECT * FROM UNNEST($24::text[], $25::text[], $26::text[], $27::bytea[], $28::int8[]) \
), cursors AS ( \
    INSERT INTO mailbox_cursors (source, mailbox, uidvalidity, last_uid, updated_at) \
    SELECT * FROM UNNEST($29::text[], $30::text[], $31::int8[], $32::int8[], $33::int8[]) \
    ON CONFLICT (source, mailbox) DO UPDATE SET uidvalidity = excluded.uidvalidity, \
        last_uid = excluded.last_uid, updated_at = excluded.updated_at \
), outbox AS ( \
    INSERT INTO dispatches (id, run_id, tenant_id, workflow_id, target, status, attempts, \
                            series, due_at, created_at, updated_at, claimed_by) \
    SELECT * FROM UNNEST($52::text[], $53::text[], $54::text[], $55::text[], $56::text[], \
                         $57::text[], $58::int4[], $59::int4[], $60::int8[], $61::int8[], \
                         $62::int8[], $86::text[]) \
), history AS ( \
    INSERT INTO run_history (id, run_id, status, cause, detail, at) \
    SELECT * FROM UNNEST($63::text[], $64::text[], $65::text[], $66::text[], $67::text[], \
                         $68::int8[]) \
), gates AS ( \
    UPDATE flow_gates SET tat_us = k.tat_us, updated_at = $77 \
    FROM UNNEST($78::text[], $79::int8[]) AS k(name, tat_us) \
    CROSS JOIN LATERAL (SELECT ctid AS row FROM flow_gates WHERE name = k.name LIMIT 1) AS g \
    WHERE flow_gates.ctid = g.row \
), members AS ( \
    INSERT INTO run_members (run_id, intake_id, version, joined_at) \
    SELECT * FROM UNNEST($80::text[], $81::text[], $82::text[], $83::int8[]) \
), due AS ( \
    UPDATE dispatches SET due_at = k.due_at, updated_at = $77 \
    FROM UNNEST($84::text[], $85::int8[]) AS k(id, due_at) \
    CROSS JOIN LATERAL (SELECT ctid AS row FROM dispatches WHERE id = k.id LIMIT 1) AS d \
    WHERE dispatches.ctid = d.row \
) \
INSERT INTO intake (id, source, delivery_id, outcome, detail, channel, event_type, tenant_id, \
                    target_entity_id, payload, raw_ref, run_id, workflow_id, held_by_run_id, \
                    message_key, config_revision, received_at, decided_at, traceparent, \
                    tracestate, scope) \
SELECT * FROM UNNEST($34::text[], $35::text[], $36::text[], $37::text[], $38::text[], \
                     $39::text[], $40::text[], $41::text[], $42::text[], $43::text[], \
                     $44::text[], $45::text[], $46::text[], $47::text[], $48::text[], \
                     $49::text[], $50::int8[], $51::int8[], $71::text[], $72::text[], \
                     $87::text[])";

/// Active runs whose expired lease another run took over (and their pending dispatches), found
/// by key alone with the status checked in `SET` (`switchyard_store::by_key`). Rare, so also
/// planned with its values each time ([`CUSTOM_PLANS`]).
const CUSTOM_PLANS: &str = "SET LOCAL plan_cache_mode = force_custom_plan";
const EXPIRE_RUNS: &str = "\
    WITH cancelled AS ( \
        UPDATE dispatches SET \
            status = CASE WHEN status = 'pending' THEN 'cancelled' ELSE status END, \
            reason = CASE WHEN status = 'pending' THEN 'lease_expired' ELSE reason END, \
            claim_token = CASE WHEN status = 'pending' THEN NULL ELSE claim_token END, \
            updated_at = CASE WHEN status = 'pending' THEN $2 ELSE updated_at END \
        WHERE run_id = ANY($3::text[]) \
    ) \
    UPDATE runs SET \
        status = CASE WHEN status = ANY($4::text[]) THEN $1 ELSE status END, \
        updated_at = CASE WHEN status = ANY($4::text[]) THEN $2 ELSE updated_at END, \
        finished_at = CASE WHEN status = ANY($4::text[]) THEN $2 ELSE finished_at END \
    WHERE id = ANY($3::text[])";

/// Writes everything the batch decided (leases, runs, raw bytes, cursors, ledger rows, flow
/// control's rows).
async fn write(
    conn: &mut PgConnection,
    decided: Writes,
    flow: FlowWrites,
    now: Millis,
) -> Result<(), DbErr> {
    let Writes {
        mut ledger,
        mut raw,
        mut cursors,
        locks,
        mut dispatches,
        mut history,
        flow: _,
    } = decided;
    let FlowWrites {
        mut tats,
        mut members,
        mut due,
        ..
    } = flow;
    let annotations = crate::intake::annotate::of(&ledger);
    let (mut created, mut changed, mut runs) = (locks.created, locks.changed, locks.new_runs);
    let query = sqlx::query(WRITE);
    let query = bind_leases(query, &mut created);
    let query = bind_leases(query, &mut changed);
    query
        .bind(take(&mut runs, |r| std::mem::take(&mut r.id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.tenant_id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.workflow_id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.target_entity_id)))
        .bind(take(&mut runs, |r| std::mem::take(&mut r.intake_id)))
        .bind(take(&mut runs, |r| r.status.as_str()))
        .bind(take(&mut runs, |r| r.fencing_token))
        .bind(take(&mut runs, |r| r.lock_ttl_ms))
        .bind(take(&mut runs, |r| r.created_at))
        .bind(take(&mut runs, |r| r.updated_at))
        .bind(take(&mut runs, |r| r.finished_at))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.id)))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.source)))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.content_type)))
        .bind(take(&mut raw, |r| std::mem::take(&mut r.body)))
        .bind(take(&mut raw, |r| r.received_at))
        .bind(take(&mut cursors, |c| std::mem::take(&mut c.source)))
        .bind(take(&mut cursors, |c| std::mem::take(&mut c.mailbox)))
        .bind(take(&mut cursors, |c| c.uidvalidity))
        .bind(take(&mut cursors, |c| c.last_uid))
        .bind(take(&mut cursors, |c| c.updated_at))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.id)))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.source)))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.delivery_id)))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.outcome)))
        .bind(take(&mut ledger, |r| r.detail.take()))
        .bind(take(&mut ledger, |r| r.channel.take()))
        .bind(take(&mut ledger, |r| r.event_type.take()))
        .bind(take(&mut ledger, |r| r.tenant_id.take()))
        .bind(take(&mut ledger, |r| r.target_entity_id.take()))
        .bind(take(&mut ledger, |r| r.payload.take()))
        .bind(take(&mut ledger, |r| r.raw_ref.take()))
        .bind(take(&mut ledger, |r| r.run_id.take()))
        .bind(take(&mut ledger, |r| r.workflow_id.take()))
        .bind(take(&mut ledger, |r| r.held_by_run_id.take()))
        .bind(take(&mut ledger, |r| r.message_key.take()))
        .bind(take(&mut ledger, |r| {
            std::mem::take(&mut r.config_revision)
        }))
        .bind(take(&mut ledger, |r| r.received_at))
        .bind(take(&mut ledger, |r| r.decided_at))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.id)))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.run_id)))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.tenant_id)))
        .bind(take(&mut dispatches, |d| {
            std::mem::take(&mut d.workflow_id)
        }))
        .bind(take(&mut dispatches, |d| std::mem::take(&mut d.target)))
        .bind(take(&mut dispatches, |d| d.status.as_str()))
        .bind(take(&mut dispatches, |d| d.attempts))
        .bind(take(&mut dispatches, |d| d.series))
        .bind(take(&mut dispatches, |d| d.due_at))
        .bind(take(&mut dispatches, |d| d.created_at))
        .bind(take(&mut dispatches, |d| d.updated_at))
        .bind(take(&mut history, |h| std::mem::take(&mut h.id)))
        .bind(take(&mut history, |h| std::mem::take(&mut h.run_id)))
        .bind(take(&mut history, |h| h.status.as_str()))
        .bind(take(&mut history, |h| std::mem::take(&mut h.cause)))
        .bind(take(&mut history, |h| h.detail.take()))
        .bind(take(&mut history, |h| h.at))
        .bind(take(&mut runs, |r| r.traceparent.take()))
        .bind(take(&mut runs, |r| r.tracestate.take()))
        .bind(take(&mut ledger, |r| r.traceparent.take()))
        .bind(take(&mut ledger, |r| r.tracestate.take()))
        .bind(take(&mut runs, |r| r.config_revision.take()))
        .bind(take(&mut runs, |r| r.principal_id.take()))
        .bind(take(&mut runs, |r| r.deadline_at))
        .bind(take(&mut runs, |r| r.budgets.take()))
        .bind(now)
        .bind(take(&mut tats, |(gate, _)| std::mem::take(gate)))
        .bind(take(&mut tats, |(_, tat)| *tat))
        .bind(take(&mut members, |m| std::mem::take(&mut m.run_id)))
        .bind(take(&mut members, |m| std::mem::take(&mut m.intake_id)))
        .bind(take(&mut members, |m| m.version.take()))
        .bind(take(&mut members, |m| m.joined_at))
        .bind(take(&mut due, |(id, _)| std::mem::take(id)))
        .bind(take(&mut due, |(_, at)| *at))
        .bind(take(&mut dispatches, |d| d.claimed_by.take()))
        .bind(take(&mut ledger, |r| std::mem::take(&mut r.scope)))
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    for annotation in annotations {
        sqlx::query(crate::intake::annotate::POSTGRES)
            .bind(annotation.shadow)
            .bind(annotation.replay_id)
            .bind(annotation.replay_of)
            .bind(annotation.id)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !locks.expired_runs.is_empty() {
        simple(conn, CUSTOM_PLANS).await?;
        sqlx::query(EXPIRE_RUNS)
            .bind(RunStatus::Expired.as_str())
            .bind(locks.now)
            .bind(locks.expired_runs)
            .bind(&ACTIVE[..])
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok(())
}

type Query = sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments>;

/// Binds `(tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at)`.
fn bind_leases(query: Query, leases: &mut [entity_lock::Model]) -> Query {
    query
        .bind(take(leases, |l| std::mem::take(&mut l.tenant_id)))
        .bind(take(leases, |l| std::mem::take(&mut l.target_entity_id)))
        .bind(take(leases, |l| l.run_id.take()))
        .bind(take(leases, |l| l.fencing_token))
        .bind(take(leases, |l| l.expires_at))
        .bind(take(leases, |l| l.updated_at))
}

/// One column of `rows`, moved out of them: an array parameter.
fn take<T, U>(rows: &mut [T], column: impl FnMut(&mut T) -> U) -> Vec<U> {
    rows.iter_mut().map(column).collect()
}
