//! The outbox inside the SQLite intake writer's batch transaction: recording the attempts the
//! dispatcher offered, and claiming the oldest due rows of an uncapped push target for this
//! daemon's dispatcher. Both apply `outbox::machine`'s changes ([`super::apply`]), so each
//! leaves exactly the rows, and returns exactly what, the pooled `outbox::record` and
//! `outbox::claim_push` would.
//!
//! Invariant: a push target with a workflow under `max_running` is never claimed here (its
//! slots are counted by the pooled claim); every row read is changed in the same transaction,
//! under SQLite's one write lock, so no other claimer can take it meanwhile.

use std::str::FromStr;

use rusqlite::types::Type;
use rusqlite::{OptionalExtension, Row, Transaction, params};

use super::apply::apply;
use crate::Millis;
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::run::{self, RunStatus};
use crate::outbox::machine::{self, PushStep};
use crate::outbox::{ClaimedRun, Recorded};

/// Records `attempts` (deliveries, retries and dead letters) as `outbox::record` does; per
/// attempt, whether it still held its claim (every one gets its attempt row).
pub(crate) fn record(
    txn: &Transaction<'_>,
    attempts: &[Recorded],
    now: Millis,
) -> rusqlite::Result<Vec<bool>> {
    attempts
        .iter()
        .map(|attempt| Ok(apply(txn, &machine::recorded(attempt, now))?.held))
        .collect()
}

/// The oldest due rows of a push target, with their runs (if any).
const DUE: &str = "SELECT d.id, d.run_id, d.tenant_id, d.workflow_id, d.target, d.status, \
     d.attempts, d.series, d.due_at, d.claimed_by, d.claim_token, d.reason, d.last_error, \
     d.created_at, d.updated_at, d.delivered_at, d.wait_id, \
     r.id, r.tenant_id, r.workflow_id, r.target_entity_id, r.intake_id, r.status, \
     r.fencing_token, r.lock_ttl_ms, r.created_at, r.updated_at, r.finished_at, r.traceparent, \
     r.tracestate, r.config_revision, r.principal_id, r.deadline_at, r.budgets, r.run_usage, \
     r.end_reason, r.worker_version, r.subject_version \
     FROM dispatches d LEFT JOIN runs r ON r.id = d.run_id \
     WHERE d.status = 'pending' AND d.target = ?1 AND d.due_at <= ?2 \
     ORDER BY d.due_at LIMIT ?3";

/// Where the run's columns start in [`DUE`].
const RUN_COLUMNS: usize = 17;

const LEASE_EXPIRY: &str = "SELECT expires_at FROM entity_locks \
     WHERE tenant_id = ?1 AND target_entity_id = ?2 AND run_id = ?3";

/// Claims up to `limit` of the oldest due dispatches of the push target `target` (one with no
/// workflow under `max_running`) for `owner` until `claim_until`, as `outbox::claim_push` does:
/// one more attempt each, dispatches of ended runs cancelled; the claimed rows with their runs
/// and lease expiries.
pub(crate) fn claim_push(
    txn: &Transaction<'_>,
    target: &str,
    owner: &str,
    limit: usize,
    now: Millis,
    claim_until: Millis,
) -> rusqlite::Result<Vec<ClaimedRun>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = txn
        .prepare_cached(DUE)?
        .query_map(params![target, now, limit], |row| {
            Ok((dispatch_of(row)?, run_of(row, RUN_COLUMNS)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut claimed = Vec::with_capacity(rows.len());
    for (row, run) in rows {
        match machine::claim_push(row, run.as_ref(), owner, claim_until, now) {
            PushStep::Claimed {
                change,
                claimed: mut claim,
            } => {
                apply(txn, &change)?;
                claim.lease_expires_at = lease_expiry(txn, &claim.run)?;
                claimed.push(*claim);
            }
            PushStep::Cancelled(change) => {
                apply(txn, &change)?;
            }
        }
    }
    Ok(claimed)
}

/// The expiry of the lease `run` still holds, else 0.
fn lease_expiry(txn: &Transaction<'_>, run: &run::Model) -> rusqlite::Result<Millis> {
    Ok(txn
        .prepare_cached(LEASE_EXPIRY)?
        .query_row(
            params![run.tenant_id, run.target_entity_id, run.id],
            |row| row.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

fn unknown(column: usize, what: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(column, Type::Text, what.to_owned().into())
}

/// A stored dispatch status.
fn dispatch_status(value: &str) -> Option<DispatchStatus> {
    [
        DispatchStatus::Pending,
        DispatchStatus::Delivered,
        DispatchStatus::DeadLettered,
        DispatchStatus::Cancelled,
    ]
    .into_iter()
    .find(|status| status.as_str() == value)
}

/// A dispatch row from columns 0..17 of [`DUE`].
fn dispatch_of(row: &Row<'_>) -> rusqlite::Result<dispatch::Model> {
    let status: String = row.get(5)?;
    Ok(dispatch::Model {
        id: row.get(0)?,
        run_id: row.get(1)?,
        tenant_id: row.get(2)?,
        workflow_id: row.get(3)?,
        target: row.get(4)?,
        status: dispatch_status(&status)
            .ok_or_else(|| unknown(5, &format!("unknown dispatch status `{status}`")))?,
        attempts: row.get(6)?,
        series: row.get(7)?,
        due_at: row.get(8)?,
        claimed_by: row.get(9)?,
        claim_token: row.get(10)?,
        reason: row.get(11)?,
        last_error: row.get(12)?,
        created_at: row.get(13)?,
        updated_at: row.get(14)?,
        delivered_at: row.get(15)?,
        wait_id: row.get(16)?,
    })
}

/// A run row from the columns at `at..` (none if its id is NULL: no such run).
fn run_of(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<run::Model>> {
    let Some(id) = row.get::<_, Option<String>>(at)? else {
        return Ok(None);
    };
    let status: String = row.get(at + 5)?;
    Ok(Some(run::Model {
        id,
        tenant_id: row.get(at + 1)?,
        workflow_id: row.get(at + 2)?,
        target_entity_id: row.get(at + 3)?,
        intake_id: row.get(at + 4)?,
        status: RunStatus::from_str(&status).map_err(|error| unknown(at + 5, &error))?,
        fencing_token: row.get(at + 6)?,
        lock_ttl_ms: row.get(at + 7)?,
        created_at: row.get(at + 8)?,
        updated_at: row.get(at + 9)?,
        finished_at: row.get(at + 10)?,
        traceparent: row.get(at + 11)?,
        tracestate: row.get(at + 12)?,
        config_revision: row.get(at + 13)?,
        principal_id: row.get(at + 14)?,
        deadline_at: row.get(at + 15)?,
        budgets: row.get(at + 16)?,
        run_usage: row.get(at + 17)?,
        end_reason: row.get(at + 18)?,
        worker_version: row.get(at + 19)?,
        subject_version: row.get(at + 20)?,
    }))
}
