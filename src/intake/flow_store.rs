//! Flow control's lookups and writes for each intake writer (SQLite on its own connection,
//! PostgreSQL on the batch connection, MySQL through sea-orm), inside the batch's transaction.
//! Called only when a batch needs them ([`Needs::is_empty`], [`Writes::is_empty`]), so a
//! daemon without flow control runs no statement of this module.
//!
//! The order inside a transaction is fixed: lock the `flow_gates` rows (sorted by name), then
//! count the workflows' runs (a statement after the lock, so PostgreSQL's and MySQL's READ
//! COMMITTED reads see every run the previous holder committed), then the leases, then the
//! windows (the holders' dispatch rows, row-locked so no dispatcher claims them before the
//! commit). Replaced `rate_limited` rows are deleted before the ledger rows are inserted.

use switchyard_store::Millis;
use switchyard_store::entities::entity_lock;

use super::flow::{Counts, Found, Needs, Window, Writes};

/// The holders of the batch's leases (whose dispatch may be an open window).
fn holders(leases: &[entity_lock::Model], now: Millis) -> Vec<String> {
    let mut holders: Vec<String> = leases
        .iter()
        .filter_map(|l| l.held_at(now).map(str::to_owned))
        .collect();
    holders.sort();
    holders.dedup();
    holders
}

/// The statuses of runs that hold a `max_running` slot: active, but no longer queued.
fn running_statuses() -> Vec<&'static str> {
    switchyard_store::ceilings::running_statuses()
}

/// [`running_statuses`] as an SQL list of literals.
fn running_list() -> String {
    running_statuses()
        .iter()
        .map(|s| format!("'{s}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The columns of a holder's dispatch row the window lookups read, in this order.
const WINDOW_COLUMNS: &str =
    "d.id, d.workflow_id, d.status, d.claimed_by, d.attempts, d.series, d.due_at, d.created_at";

/// A holder's dispatch row as a window.
#[allow(clippy::too_many_arguments)]
fn window(
    dispatch_id: String,
    workflow_id: String,
    status: &str,
    claimed_by: Option<String>,
    attempts: i32,
    series: i32,
    due_at: Millis,
    created_at: Millis,
) -> Window {
    Window {
        dispatch_id,
        workflow_id,
        first_at: created_at,
        // Never handed to anyone (no attempt, no claim in flight, first series), and opened
        // as a window: only a coalescing trigger creates a dispatch due after its creation.
        open: status == "pending"
            && claimed_by.is_none()
            && attempts == 0
            && series == 1
            && due_at > created_at,
    }
}

pub(super) mod sqlite {
    use rusqlite::{OptionalExtension, Transaction, params};

    use super::*;

    /// Locks the gates and counts the workflows (before the leases are read).
    pub fn look_up(txn: &Transaction<'_>, needs: &Needs, now: Millis) -> rusqlite::Result<Found> {
        let mut found = Found::default();
        if needs.is_empty() {
            return Ok(found);
        }
        if !needs.gates.is_empty() {
            // `BEGIN IMMEDIATE` already serialises writers: a read is the lock.
            let mut select = txn.prepare_cached("SELECT tat_us FROM flow_gates WHERE name = ?1")?;
            for gate in &needs.gates {
                let tat: Option<i64> = select
                    .query_row(params![gate], |row| row.get(0))
                    .optional()?;
                if tat.is_none() {
                    txn.prepare_cached(
                        "INSERT INTO flow_gates (name, tat_us, updated_at) VALUES (?1, 0, ?2)",
                    )?
                    .execute(params![gate, now])?;
                }
                found.tats.insert(gate.clone(), tat.unwrap_or(0));
            }
        }
        if !needs.workflows.is_empty() {
            let mut count = txn.prepare_cached(&format!(
                "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE workflow_id = ?1 \
                 AND status = 'queued' LIMIT ?2)), (SELECT COUNT(*) FROM (SELECT 1 FROM runs \
                 WHERE workflow_id = ?1 AND status IN ({}) LIMIT ?3))",
                running_list()
            ))?;
            for w in &needs.workflows {
                let (queued, running) = count
                    .query_row(params![w.workflow, w.queued, w.running], |row| {
                        Ok((row.get(0)?, row.get(1)?))
                    })?;
                found
                    .counts
                    .insert(w.workflow.clone(), Counts { queued, running });
            }
        }
        Ok(found)
    }

    /// The windows of the runs holding the batch's entities.
    pub fn windows(
        txn: &Transaction<'_>,
        needs: &Needs,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut Found,
    ) -> rusqlite::Result<()> {
        if !needs.windows {
            return Ok(());
        }
        let mut select = txn.prepare_cached(&format!(
            "SELECT {WINDOW_COLUMNS} FROM dispatches d WHERE d.run_id = ?1"
        ))?;
        for run_id in holders(leases, now) {
            let mut rows = select.query(params![run_id])?;
            if let Some(row) = rows.next()? {
                let status: String = row.get(2)?;
                let w = window(
                    row.get(0)?,
                    row.get(1)?,
                    &status,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                );
                found.windows.insert(run_id, w);
            }
        }
        Ok(())
    }

    /// Deletes replaced refusals (before the ledger rows are inserted).
    pub fn replace(txn: &Transaction<'_>, writes: &Writes) -> rusqlite::Result<()> {
        if writes.replaced.is_empty() {
            return Ok(());
        }
        let mut ledger =
            txn.prepare_cached("DELETE FROM intake WHERE id = ?1 AND outcome = 'rate_limited'")?;
        let mut raw = txn.prepare_cached("DELETE FROM raw_deliveries WHERE id = ?1")?;
        for id in &writes.replaced {
            ledger.execute(params![id])?;
            raw.execute(params![id])?;
        }
        Ok(())
    }

    pub fn write(txn: &Transaction<'_>, writes: &Writes, now: Millis) -> rusqlite::Result<()> {
        if writes.is_empty() {
            return Ok(());
        }
        if !writes.tats.is_empty() {
            let mut update = txn.prepare_cached(
                "UPDATE flow_gates SET tat_us = ?2, updated_at = ?3 WHERE name = ?1",
            )?;
            for (gate, tat) in &writes.tats {
                update.execute(params![gate, tat, now])?;
            }
        }
        if !writes.members.is_empty() {
            let mut insert = txn.prepare_cached(
                "INSERT INTO run_members (run_id, intake_id, version, joined_at) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            for m in &writes.members {
                insert.execute(params![m.run_id, m.intake_id, m.version, m.joined_at])?;
            }
        }
        if !writes.due.is_empty() {
            let mut update = txn.prepare_cached(
                "UPDATE dispatches SET due_at = ?2, updated_at = ?3 \
                 WHERE id = ?1 AND status = 'pending' AND claimed_by IS NULL",
            )?;
            for (dispatch_id, due_at) in &writes.due {
                update.execute(params![dispatch_id, due_at, now])?;
            }
        }
        Ok(())
    }
}

pub(super) mod postgres {
    //! One statement of its own in a batch's transaction: the counts and windows, after the
    //! batch's lookup (which locks the gates first, so the counts see every run the previous
    //! holder of a gate committed). The gates are locked by that lookup, and the flow writes
    //! are clauses of the batch's write (see `postgres_batch`); a gate never used before is
    //! created before the transaction begins.

    use sea_orm::sqlx::{self, PgConnection, Row};

    use super::*;

    type Result<T> = std::result::Result<T, sqlx::Error>;

    /// Creates the gates a batch names that do not exist yet, outside its transaction (a
    /// new row's time is 0: no history), so the batch only ever locks rows that exist.
    pub async fn create_gates(
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
    pub async fn counts_and_windows(
        conn: &mut PgConnection,
        needs: &Needs,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut Found,
    ) -> Result<()> {
        let holders = if needs.windows {
            holders(leases, now)
        } else {
            Vec::new()
        };
        if needs.workflows.is_empty() && holders.is_empty() {
            return Ok(());
        }
        // The window columns are [`WINDOW_COLUMNS`].
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
        .bind(running_statuses())
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
            let w = window(
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

    pub async fn replace(conn: &mut PgConnection, writes: &Writes) -> Result<()> {
        if writes.replaced.is_empty() {
            return Ok(());
        }
        sqlx::query(
            "WITH raw AS (DELETE FROM raw_deliveries WHERE id = ANY($1::text[])) \
             DELETE FROM intake WHERE id = ANY($1::text[]) AND outcome = 'rate_limited'",
        )
        .bind(&writes.replaced)
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// MySQL (and any backend sea-orm speaks with `?` placeholders).
pub(super) mod orm {
    use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, Statement, Value};

    use super::*;

    fn stmt(txn: &DatabaseTransaction, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(txn.get_database_backend(), sql, values)
    }

    pub async fn look_up(
        txn: &DatabaseTransaction,
        needs: &Needs,
        now: Millis,
    ) -> Result<Found, DbErr> {
        let mut found = Found::default();
        if needs.is_empty() {
            return Ok(found);
        }
        for gate in &needs.gates {
            txn.execute_raw(stmt(
                txn,
                "INSERT INTO flow_gates (name, tat_us, updated_at) VALUES (?, 0, ?) \
                 ON DUPLICATE KEY UPDATE name = name",
                vec![gate.clone().into(), now.into()],
            ))
            .await?;
            let row = txn
                .query_one_raw(stmt(
                    txn,
                    "SELECT tat_us FROM flow_gates WHERE name = ? FOR UPDATE",
                    vec![gate.clone().into()],
                ))
                .await?;
            let tat = match row {
                Some(row) => row.try_get_by_index::<i64>(0)?,
                None => 0,
            };
            found.tats.insert(gate.clone(), tat);
        }
        for w in &needs.workflows {
            let sql = format!(
                "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE workflow_id = ? \
                 AND status = 'queued' LIMIT ?) AS q), (SELECT COUNT(*) FROM (SELECT 1 FROM runs \
                 WHERE workflow_id = ? AND status IN ({}) LIMIT ?) AS r)",
                running_list()
            );
            let row = txn
                .query_one_raw(stmt(
                    txn,
                    &sql,
                    vec![
                        w.workflow.clone().into(),
                        w.queued.into(),
                        w.workflow.clone().into(),
                        w.running.into(),
                    ],
                ))
                .await?;
            let counts = match row {
                Some(row) => Counts {
                    queued: row.try_get_by_index(0)?,
                    running: row.try_get_by_index(1)?,
                },
                None => Counts::default(),
            };
            found.counts.insert(w.workflow.clone(), counts);
        }
        Ok(found)
    }

    pub async fn windows(
        txn: &DatabaseTransaction,
        needs: &Needs,
        leases: &[entity_lock::Model],
        now: Millis,
        found: &mut Found,
    ) -> Result<(), DbErr> {
        if !needs.windows {
            return Ok(());
        }
        for run_id in holders(leases, now) {
            let row = txn
                .query_one_raw(stmt(
                    txn,
                    &format!(
                        "SELECT {WINDOW_COLUMNS} FROM dispatches d WHERE d.run_id = ? FOR UPDATE"
                    ),
                    vec![run_id.clone().into()],
                ))
                .await?;
            if let Some(row) = row {
                let status: String = row.try_get_by_index(2)?;
                let w = window(
                    row.try_get_by_index(0)?,
                    row.try_get_by_index(1)?,
                    &status,
                    row.try_get_by_index(3)?,
                    row.try_get_by_index(4)?,
                    row.try_get_by_index(5)?,
                    row.try_get_by_index(6)?,
                    row.try_get_by_index(7)?,
                );
                found.windows.insert(run_id, w);
            }
        }
        Ok(())
    }

    pub async fn replace(txn: &DatabaseTransaction, writes: &Writes) -> Result<(), DbErr> {
        for id in &writes.replaced {
            txn.execute_raw(stmt(
                txn,
                "DELETE FROM intake WHERE id = ? AND outcome = 'rate_limited'",
                vec![id.clone().into()],
            ))
            .await?;
            txn.execute_raw(stmt(
                txn,
                "DELETE FROM raw_deliveries WHERE id = ?",
                vec![id.clone().into()],
            ))
            .await?;
        }
        Ok(())
    }

    pub async fn write(
        txn: &DatabaseTransaction,
        writes: &Writes,
        now: Millis,
    ) -> Result<(), DbErr> {
        for (gate, tat) in &writes.tats {
            txn.execute_raw(stmt(
                txn,
                "UPDATE flow_gates SET tat_us = ?, updated_at = ? WHERE name = ?",
                vec![(*tat).into(), now.into(), gate.clone().into()],
            ))
            .await?;
        }
        for m in &writes.members {
            txn.execute_raw(stmt(
                txn,
                "INSERT INTO run_members (run_id, intake_id, version, joined_at) \
                 VALUES (?, ?, ?, ?)",
                vec![
                    m.run_id.clone().into(),
                    m.intake_id.clone().into(),
                    m.version.clone().into(),
                    m.joined_at.into(),
                ],
            ))
            .await?;
        }
        for (dispatch_id, due_at) in &writes.due {
            txn.execute_raw(stmt(
                txn,
                "UPDATE dispatches SET due_at = ?, updated_at = ? \
                 WHERE id = ? AND status = 'pending' AND claimed_by IS NULL",
                vec![(*due_at).into(), now.into(), dispatch_id.clone().into()],
            ))
            .await?;
        }
        Ok(())
    }
}
