//! The SQLite writer claims the oldest due rows of each push target's backlog for this
//! daemon's dispatcher, in its transaction, when the dispatcher asked (`dispatcher::preclaim`):
//! rows as `outbox::claim_push` leaves them (one more attempt, claimed by the dispatcher, due
//! when the claim lapses), each only with a free slot, dispatches of ended runs cancelled.

use rusqlite::{Transaction, params};
use switchyard_store::entities::dispatch::DispatchStatus;
use switchyard_store::{ACTIVE, Millis};

use crate::dispatcher::preclaim::{BacklogClaim, PreClaims};

/// Claims what may be claimed now if the dispatcher asked; nothing (and no statement) if not.
pub(super) fn claim(
    txn: &Transaction<'_>,
    claims: &PreClaims,
    now: Millis,
) -> rusqlite::Result<Vec<BacklogClaim>> {
    let mut claimed = Vec::new();
    if !claims.wants_backlog() {
        return Ok(claimed);
    }
    let mut left = false;
    for (target, free) in claims.backlog_targets() {
        if free == 0 {
            left = true;
            continue;
        }
        let mut due = txn.prepare_cached(
            "SELECT d.id, d.workflow_id, r.status FROM dispatches d \
             JOIN runs r ON r.id = d.run_id \
             WHERE d.status = ?1 AND d.target = ?2 AND d.due_at <= ?3 \
             ORDER BY d.due_at LIMIT ?4",
        )?;
        let rows = due
            .query_map(
                params![DispatchStatus::Pending.as_str(), target, now, free as i64],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let filled = rows.len() == free;
        for (dispatch_id, workflow_id, run_status) in rows {
            if !ACTIVE.contains(&run_status.as_str()) {
                txn.prepare_cached(
                    "UPDATE dispatches SET status = ?2, reason = 'run_ended', \
                     claim_token = NULL, updated_at = ?3 WHERE id = ?1",
                )?
                .execute(params![
                    dispatch_id,
                    DispatchStatus::Cancelled.as_str(),
                    now
                ])?;
                continue;
            }
            let Some(claim) = claims.try_claim(&target, &workflow_id, now) else {
                left = true;
                break;
            };
            txn.prepare_cached(
                "UPDATE dispatches SET attempts = attempts + 1, claimed_by = ?2, due_at = ?3, \
                 updated_at = ?4 WHERE id = ?1",
            )?
            .execute(params![dispatch_id, claim.owner, claim.until, now])?;
            claimed.push(BacklogClaim {
                target: target.clone(),
                dispatch_id,
                permits: claim.permits,
            });
        }
        if filled {
            // More may be due: look again at the next transaction.
            left = true;
            claims.want_backlog();
        }
    }
    claims.set_backlog_left(left);
    Ok(claimed)
}
