//! The SQLite applier: writes `outbox::machine` [`Change`]s on a `rusqlite` transaction (the
//! intake writer's), one change at a time with cached single-row statements. Each statement's
//! text is fixed (a field a change leaves alone is bound as "keep"), so it is prepared once per
//! connection whatever the change.
//!
//! Invariant: it decides nothing and writes exactly the rows `outbox::apply` writes for the
//! same changes (`tests` checks it): a dispatch changes only while its row is as the change
//! expects, and everything but the attempt row follows from that.

use rusqlite::{Transaction, params};

use crate::entities::dispatch_attempt;
use crate::entities::run_history;
use crate::outbox::machine::{
    Applied, Attempts, Change, DispatchSet, Expect, Finished, Held, LeaseChange, RunChange,
};

/// Every dispatch change: `?3` 1 = one more attempt, 2 = reset; a `?n` flag before a nullable
/// field says whether it is set; the claim guard (`?15`..`?17`) is skipped when `?15` is NULL.
const DISPATCH: &str = "UPDATE dispatches SET \
     status = COALESCE(?2, status), \
     attempts = CASE ?3 WHEN 1 THEN attempts + 1 WHEN 2 THEN 0 ELSE attempts END, \
     series = COALESCE(?4, series), \
     claimed_by = CASE WHEN ?5 THEN ?6 ELSE claimed_by END, \
     claim_token = CASE WHEN ?7 THEN ?8 ELSE claim_token END, \
     due_at = COALESCE(?9, due_at), \
     reason = CASE WHEN ?10 THEN ?11 ELSE reason END, \
     last_error = COALESCE(?12, last_error), \
     delivered_at = COALESCE(?13, delivered_at), \
     updated_at = ?14 \
     WHERE id = ?1 AND (?15 IS NULL OR \
     (status = 'pending' AND claimed_by = ?15 AND attempts = ?16 AND series = ?17))";

/// Every run status change: `?4` 1 = finished at `?5`, 2 = reopened; `from` is up to three
/// statuses (`?7`..`?9`, repeated to fill).
const RUN: &str = "UPDATE runs SET status = ?2, updated_at = ?3, \
     finished_at = CASE ?4 WHEN 1 THEN ?5 WHEN 2 THEN NULL ELSE finished_at END, \
     end_reason = CASE ?4 WHEN 2 THEN NULL ELSE end_reason END, \
     fencing_token = COALESCE(?6, fencing_token) \
     WHERE id = ?1 AND status IN (?7, ?8, ?9)";

const RELEASE: &str = "UPDATE entity_locks SET run_id = NULL, expires_at = ?5, updated_at = ?5 \
     WHERE tenant_id = ?1 AND target_entity_id = ?2 AND run_id = ?3 AND fencing_token = ?4";

const NEXT_TOKEN: &str = "UPDATE entity_locks SET fencing_token = ?4 + 1, updated_at = ?5 \
     WHERE tenant_id = ?1 AND target_entity_id = ?2 AND run_id = ?3 AND fencing_token = ?4";

const RUN_TOKEN: &str = "UPDATE runs SET fencing_token = ?2, updated_at = ?3 WHERE id = ?1";

const LEASE_CREATED: &str = "INSERT INTO entity_locks \
     (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

const LEASE_CHANGED: &str = "INSERT INTO entity_locks \
     (tenant_id, target_entity_id, run_id, fencing_token, expires_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (tenant_id, target_entity_id) DO UPDATE SET \
     run_id = excluded.run_id, fencing_token = excluded.fencing_token, \
     expires_at = excluded.expires_at, updated_at = excluded.updated_at";

const HISTORY: &str = "INSERT INTO run_history (id, run_id, status, cause, detail, at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

const ATTEMPT: &str = "INSERT INTO dispatch_attempts (id, dispatch_id, run_id, series, attempt, \
     target, result, status_code, response, error, started_at, duration_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// Applies one change in `txn`.
pub(crate) fn apply(txn: &Transaction<'_>, change: &Change) -> rusqlite::Result<Applied> {
    let updated = update_dispatch(txn, &change.dispatch_id, &change.set, change)?;
    let mut applied = Applied {
        held: change.expect == Expect::AsRead || updated == 1,
        token_moved: false,
    };
    if applied.held {
        let mut ended = None;
        if let Some(run) = &change.run {
            let changed = update_run(txn, run)? == 1;
            ended = run.ended.as_ref().filter(|_| changed);
        }
        if let Some(lease) = &change.lease {
            applied.token_moved = apply_lease(txn, lease)?;
        }
        for entry in &change.history {
            history(txn, entry)?;
        }
        if let Some(ended) = ended {
            apply_lease(txn, &ended.release)?;
            history(txn, &ended.history)?;
        }
    }
    if let Some(attempt) = &change.attempt {
        attempt_row(txn, attempt)?;
    }
    Ok(applied)
}

/// Whether a nullable field is set, and to what.
fn nullable(field: &Option<Option<String>>) -> (bool, Option<&str>) {
    match field {
        None => (false, None),
        Some(value) => (true, value.as_deref()),
    }
}

fn update_dispatch(
    txn: &Transaction<'_>,
    id: &str,
    set: &DispatchSet,
    change: &Change,
) -> rusqlite::Result<usize> {
    let attempts = match set.attempts {
        None => 0,
        Some(Attempts::OneMore) => 1,
        Some(Attempts::Reset) => 2,
    };
    let (claimed_by_set, claimed_by) = nullable(&set.claimed_by);
    let (token_set, token) = nullable(&set.claim_token);
    let (reason_set, reason) = nullable(&set.reason);
    let (owner, claim_attempts, claim_series) = match change.expect.claim() {
        Some((owner, attempts, series)) => (Some(owner), Some(attempts), Some(series)),
        None => (None, None, None),
    };
    txn.prepare_cached(DISPATCH)?.execute(params![
        id,
        set.status.map(|s| s.as_str()),
        attempts,
        set.series,
        claimed_by_set,
        claimed_by,
        token_set,
        token,
        set.due_at,
        reason_set,
        reason,
        set.last_error,
        set.delivered_at,
        set.updated_at,
        owner,
        claim_attempts,
        claim_series,
    ])
}

fn update_run(txn: &Transaction<'_>, run: &RunChange) -> rusqlite::Result<usize> {
    let (finished, at) = match run.finished {
        Finished::Keep => (0, None),
        Finished::At(at) => (1, Some(at)),
        Finished::Reopened => (2, None),
    };
    let from = |n: usize| run.from.get(n).or(run.from.first()).map(|s| s.as_str());
    txn.prepare_cached(RUN)?.execute(params![
        run.run_id,
        run.to.as_str(),
        run.updated_at,
        finished,
        at,
        run.fencing_token,
        from(0),
        from(1),
        from(2),
    ])
}

fn held_params(held: &Held) -> (&str, &str, &str, i64) {
    (
        &held.tenant_id,
        &held.target_entity_id,
        &held.run_id,
        held.fencing_token,
    )
}

/// Writes a lease change; whether it moved the lease to the next fencing token.
fn apply_lease(txn: &Transaction<'_>, lease: &LeaseChange) -> rusqlite::Result<bool> {
    match lease {
        LeaseChange::Release { held, at } => {
            let (tenant, entity, run_id, token) = held_params(held);
            txn.prepare_cached(RELEASE)?
                .execute(params![tenant, entity, run_id, token, at])?;
            Ok(false)
        }
        LeaseChange::NextToken { held, at } => {
            let (tenant, entity, run_id, token) = held_params(held);
            let moved = txn
                .prepare_cached(NEXT_TOKEN)?
                .execute(params![tenant, entity, run_id, token, at])?
                == 1;
            if moved {
                txn.prepare_cached(RUN_TOKEN)?
                    .execute(params![run_id, token + 1, at])?;
            }
            Ok(moved)
        }
        LeaseChange::Retaken { lease, existed } => {
            let sql = if *existed {
                LEASE_CHANGED
            } else {
                LEASE_CREATED
            };
            txn.prepare_cached(sql)?.execute(params![
                lease.tenant_id,
                lease.target_entity_id,
                lease.run_id,
                lease.fencing_token,
                lease.expires_at,
                lease.updated_at,
            ])?;
            Ok(false)
        }
    }
}

fn history(txn: &Transaction<'_>, entry: &run_history::Model) -> rusqlite::Result<()> {
    txn.prepare_cached(HISTORY)?.execute(params![
        entry.id,
        entry.run_id,
        entry.status.as_str(),
        entry.cause,
        entry.detail,
        entry.at,
    ])?;
    Ok(())
}

fn attempt_row(txn: &Transaction<'_>, row: &dispatch_attempt::Model) -> rusqlite::Result<()> {
    txn.prepare_cached(ATTEMPT)?.execute(params![
        row.id,
        row.dispatch_id,
        row.run_id,
        row.series,
        row.attempt,
        row.target,
        row.result,
        row.status_code,
        row.response,
        row.error,
        row.started_at,
        row.duration_ms,
    ])?;
    Ok(())
}
