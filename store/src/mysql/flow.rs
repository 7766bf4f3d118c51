//! MySQL's statements for flow control in a batch's transaction (sea-orm's raw statements
//! with `?` placeholders): gates locked `FOR UPDATE` (inserted first if missing), counts up to
//! each ceiling, the holders' dispatches row-locked as windows.

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbErr, Statement, Value};

use crate::Millis;
use crate::entities::entity_lock;
use crate::intake::flow::{
    Counts, FlowFound, FlowKeys, FlowWrites, WINDOW_COLUMNS, Window, holders, running_list,
};

fn stmt(txn: &DatabaseTransaction, sql: &str, values: Vec<Value>) -> Statement {
    Statement::from_sql_and_values(txn.get_database_backend(), sql, values)
}

/// Step 1: locks the gates (inserted first if missing), sorted.
pub(super) async fn lock_gates(
    txn: &DatabaseTransaction,
    needs: &FlowKeys,
    now: Millis,
    found: &mut FlowFound,
) -> Result<(), DbErr> {
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
    Ok(())
}

/// Step 4: each capped workflow's runs, up to its ceiling.
pub(super) async fn counts(
    txn: &DatabaseTransaction,
    needs: &FlowKeys,
    found: &mut FlowFound,
) -> Result<(), DbErr> {
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
    Ok(())
}

pub(super) async fn windows(
    txn: &DatabaseTransaction,
    needs: &FlowKeys,
    leases: &[entity_lock::Model],
    now: Millis,
    found: &mut FlowFound,
) -> Result<(), DbErr> {
    if !needs.windows {
        return Ok(());
    }
    for run_id in holders(leases, now) {
        let row = txn
            .query_one_raw(stmt(
                txn,
                &format!("SELECT {WINDOW_COLUMNS} FROM dispatches d WHERE d.run_id = ? FOR UPDATE"),
                vec![run_id.clone().into()],
            ))
            .await?;
        if let Some(row) = row {
            let status: String = row.try_get_by_index(2)?;
            let w = Window::of(
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

pub(super) async fn replace(txn: &DatabaseTransaction, writes: &FlowWrites) -> Result<(), DbErr> {
    for id in &writes.replaced {
        txn.execute_raw(stmt(
            txn,
            "DELETE FROM intake WHERE id = ? AND outcome = 'rate_limited'",
            vec![id.clone().into()],
        ))
        .await?;
    }
    Ok(())
}

pub(super) async fn write(
    txn: &DatabaseTransaction,
    writes: &FlowWrites,
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
