//! Attempts the SQLite writer records in its batch transaction (riders offered by the
//! dispatcher, [`super::riders`]), applied exactly as `outbox::record` applies them, only to a
//! dispatch still held by this claim (same owner, attempt and series, still pending): a
//! delivery makes it `delivered` and its run `dispatched`; a failed attempt gives the claim up
//! with its error and next due time. Each with a history entry; every attempt gets its attempt
//! row, held or not. Dead letters (which release leases) stay with the dispatcher's recorder.

use crate::entities::dispatch::DispatchStatus;
use crate::entities::run::RunStatus;
use crate::outbox::{Recorded, Verdict, attempt_words};
use crate::{Millis, millis_rfc3339};
use rusqlite::{Transaction, params};
use uuid::Uuid;

/// Records `attempts` (deliveries and retries); returns, per attempt, whether it still held its
/// claim.
pub(crate) fn record(
    txn: &Transaction<'_>,
    attempts: &[Recorded],
    now: Millis,
) -> rusqlite::Result<Vec<bool>> {
    let mut held = Vec::with_capacity(attempts.len());
    if attempts.is_empty() {
        return Ok(held);
    }
    let mut deliver = txn.prepare_cached(
        "UPDATE dispatches SET status = ?2, claimed_by = NULL, delivered_at = ?3, \
         updated_at = ?3 WHERE id = ?1 AND status = ?4 AND claimed_by = ?5 AND attempts = ?6 \
         AND series = ?7",
    )?;
    let mut dispatched = txn.prepare_cached(
        "UPDATE runs SET status = ?2, updated_at = ?3 WHERE id = ?1 AND status = ?4",
    )?;
    let mut retry = txn.prepare_cached(
        "UPDATE dispatches SET claimed_by = NULL, last_error = ?2, due_at = ?3, updated_at = ?4 \
         WHERE id = ?1 AND status = ?5 AND claimed_by = ?6 AND attempts = ?7 AND series = ?8",
    )?;
    let mut history = txn.prepare_cached(
        "INSERT INTO run_history (id, run_id, status, cause, detail, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut attempt_row = txn.prepare_cached(
        "INSERT INTO dispatch_attempts (id, dispatch_id, run_id, series, attempt, target, \
         result, status_code, response, error, started_at, duration_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    )?;
    for attempt in attempts {
        let d = &attempt.claimed.dispatch;
        let run_id = &attempt.claimed.run.id;
        let words = attempt_words(attempt);
        // The history entry of an attempt that still held its claim.
        let entry = match &attempt.verdict {
            Verdict::Delivered => {
                let held = deliver.execute(params![
                    d.id,
                    DispatchStatus::Delivered.as_str(),
                    now,
                    DispatchStatus::Pending.as_str(),
                    attempt.owner,
                    d.attempts,
                    d.series,
                ])? == 1;
                if held {
                    dispatched.execute(params![
                        run_id,
                        RunStatus::Dispatched.as_str(),
                        now,
                        RunStatus::Queued.as_str(),
                    ])?;
                }
                held.then_some((RunStatus::Dispatched, "delivered", words))
            }
            Verdict::Retry { next_due } => {
                let held = retry.execute(params![
                    d.id,
                    words,
                    next_due,
                    now,
                    DispatchStatus::Pending.as_str(),
                    attempt.owner,
                    d.attempts,
                    d.series,
                ])? == 1;
                let detail = format!("{words}; next attempt at {}", millis_rfc3339(*next_due));
                held.then_some((RunStatus::Queued, "attempt_failed", detail))
            }
            // Never offered: `Inbox::offer` gives dead letters back to the recorder.
            Verdict::DeadLetter { .. } => None,
        };
        if let Some((status, cause, detail)) = &entry {
            history.execute(params![
                Uuid::now_v7().to_string(),
                run_id,
                status.as_str(),
                cause,
                detail,
                now,
            ])?;
        }
        attempt_row.execute(params![
            Uuid::now_v7().to_string(),
            d.id,
            d.run_id,
            d.series,
            d.attempts,
            d.target,
            attempt.result,
            attempt.status_code,
            attempt.response,
            attempt.error,
            attempt.started_at,
            attempt.duration_ms,
        ])?;
        held.push(entry.is_some());
    }
    Ok(held)
}
