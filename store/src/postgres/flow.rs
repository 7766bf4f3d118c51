//! One statement of its own in a batch's transaction: the counts and windows, after the
//! batch's lookup (which locks the gates first, so the counts see every run the previous
//! holder of a gate committed). The gates are locked by that lookup, and the flow writes
//! are clauses of the batch's write (see `batch`); a gate never used before is
//! created before the transaction begins.

use sea_orm::sqlx::{self, PgConnection, Row};

use crate::Millis;
use crate::entities::entity_lock;
use crate::intake::flow::{Counts, FlowFound, FlowKeys, FlowWrites, Window, holders};

type Result<T> = std::result::Result<T, sqlx::Error>;

/// Creates the gates a batch names that do not exist yet, outside its transaction (a
/// new row's time is 0: no history), so the batch only ever locks rows that exist.
pub(super) async fn create_gates(
    conn: &mut PgConnection,
    gates: &[String],
    now: Millis,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO flow_gates (name, tat_us, updated_at) \
         SELECT k, 0, $2 FROM UNNEST($1::text[]) AS k ORDER BY k \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(gates)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// The workflows' counts (each up to its ceiling) and the holders' dispatch rows
/// (row-locked) as windows, in one statement.
///
/// The running count probes once per status (`LATERAL`, an equality on both columns of
/// `runs_workflow_status`): with `status = ANY(..)` the generic plan scanned all of the
/// workflow's runs and filtered on status (34,396 index entries per batch after 8 s of
/// load).
pub(super) async fn counts_and_windows(
    conn: &mut PgConnection,
    needs: &FlowKeys,
    leases: &[entity_lock::Model],
    now: Millis,
    found: &mut FlowFound,
) -> Result<()> {
    let holders = if needs.windows {
        holders(leases, now)
    } else {
        Vec::new()
    };
    if needs.workflows.is_empty() && holders.is_empty() {
        return Ok(());
    }
    // The window columns are `flow::WINDOW_COLUMNS`.
    let rows = sqlx::query(
        "WITH windows AS ( \
            SELECT d.run_id AS holder, d.id, d.workflow_id, d.status, d.claimed_by, \
            d.attempts, d.series, d.due_at, d.created_at FROM UNNEST($5::text[]) AS k(run_id) \
            CROSS JOIN LATERAL (SELECT * FROM dispatches WHERE run_id = k.run_id \
            LIMIT 1 FOR UPDATE) AS d \
         ) \
         SELECT 'count', k.w, NULL::text, NULL::text, NULL::text, NULL::text, NULL::int4, \
            NULL::int4, NULL::int8, NULL::int8, \
            (SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE workflow_id = k.w \
             AND status = 'queued' LIMIT k.q) AS q), \
            (SELECT COUNT(*) FROM (SELECT 1 FROM UNNEST($4::text[]) AS s(status) \
             CROSS JOIN LATERAL (SELECT 1 FROM runs WHERE workflow_id = k.w \
             AND status = s.status LIMIT k.r) AS x LIMIT k.r) AS r) \
         FROM UNNEST($1::text[], $2::int8[], $3::int8[]) AS k(w, q, r) \
         UNION ALL \
         SELECT 'window', holder, id, workflow_id, status, claimed_by, attempts, series, \
            due_at, created_at, NULL::int8, NULL::int8 FROM windows",
    )
    .bind(
        needs
            .workflows
            .iter()
            .map(|w| w.workflow.as_str())
            .collect::<Vec<_>>(),
    )
    .bind(needs.workflows.iter().map(|w| w.queued).collect::<Vec<_>>())
    .bind(
        needs
            .workflows
            .iter()
            .map(|w| w.running)
            .collect::<Vec<_>>(),
    )
    .bind(crate::ceilings::running_statuses())
    .bind(&holders)
    .fetch_all(conn)
    .await?;
    for row in rows {
        let kind: &str = row.try_get(0)?;
        if kind == "count" {
            found.counts.insert(
                row.try_get(1)?,
                Counts {
                    queued: row.try_get(10)?,
                    running: row.try_get(11)?,
                },
            );
            continue;
        }
        let status: String = row.try_get(4)?;
        let w = Window::of(
            row.try_get(2)?,
            row.try_get(3)?,
            &status,
            row.try_get(5)?,
            row.try_get(6)?,
            row.try_get(7)?,
            row.try_get(8)?,
            row.try_get(9)?,
        );
        found.windows.insert(row.try_get(1)?, w);
    }
    Ok(())
}

pub(super) async fn replace(conn: &mut PgConnection, writes: &FlowWrites) -> Result<()> {
    if writes.replaced.is_empty() {
        return Ok(());
    }
    sqlx::query("DELETE FROM intake WHERE id = ANY($1::text[]) AND outcome = 'rate_limited'")
        .bind(&writes.replaced)
        .execute(conn)
        .await?;
    Ok(())
}
