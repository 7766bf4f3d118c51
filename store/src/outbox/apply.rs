//! The portable applier: writes [`Change`]s on a sea-orm transaction (PostgreSQL, MySQL, and
//! SQLite's pooled connections). Changes that set the same fields are written set-wise, one
//! statement per table (a batch of deliveries, a claim batch); a change of its own with one
//! statement guarded by its [`Expect`].
//!
//! Invariant: it decides nothing. A change applies only while its row is as it expects
//! (checked in the update's WHERE clause for a single row, or on the rows read under lock in
//! this transaction for a set), and everything but its attempt row follows from that; lists
//! of keys are filtered on the key alone ([`crate::by_key`]).
//!
//! Lock order: the runs it changes, then their dispatches, then leases: the order of every
//! transaction that changes a run and its dispatch (a worker's finish or heartbeat, a wait
//! opened or fired, a deadline's end). A recording that locked the dispatch first would wait
//! for a finish that waits for it, until the database refused one of them.

use std::collections::HashMap;

use sea_orm::sea_query::{Expr, ExprTrait, SimpleExpr};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbBackend, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, UpdateMany, Value,
};

use super::machine::{
    Applied, Attempts, Change, DispatchSet, Expect, Finished, Held, LeaseChange, RunChange,
};
use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::{dispatch_attempt, entity_lock, run, run_history};

/// Applies `changes` in `txn`: per change, whether it applied and what it moved.
pub(crate) async fn apply<C: ConnectionTrait>(
    txn: &C,
    changes: &[Change],
) -> Result<Vec<Applied>, DbErr> {
    let mut applied = vec![Applied::default(); changes.len()];
    if changes.is_empty() {
        return Ok(applied);
    }
    lock_runs(txn, changes).await?;
    apply_dispatches(txn, changes, &mut applied).await?;
    let ended = apply_runs(txn, changes, &applied).await?;
    let mut history: Vec<run_history::ActiveModel> = Vec::new();
    for (at, change) in changes.iter().enumerate() {
        if !applied[at].held {
            continue;
        }
        if let Some(lease) = &change.lease {
            applied[at].token_moved = apply_lease(txn, lease).await?;
        }
        history.extend(change.history.iter().cloned().map(Into::into));
    }
    for ended in ended {
        apply_lease(txn, &ended.release).await?;
        history.push(ended.history.clone().into());
    }
    if !history.is_empty() {
        run_history::Entity::insert_many(history)
            .exec_without_returning(txn)
            .await?;
    }
    let attempts: Vec<dispatch_attempt::ActiveModel> = changes
        .iter()
        .filter_map(|change| change.attempt.clone().map(Into::into))
        .collect();
    if !attempts.is_empty() {
        dispatch_attempt::Entity::insert_many(attempts)
            .exec_without_returning(txn)
            .await?;
    }
    Ok(applied)
}

/// Locks the rows of the runs `changes` change, in id order, before anything else (the lock
/// order above). SQLite needs none: its writers take turns.
async fn lock_runs<C: ConnectionTrait>(txn: &C, changes: &[Change]) -> Result<(), DbErr> {
    if txn.get_database_backend() == DbBackend::Sqlite {
        return Ok(());
    }
    let mut ids: Vec<String> = changes
        .iter()
        .filter_map(|change| change.run.as_ref().map(|run| run.run_id.clone()))
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    ids.sort_unstable();
    ids.dedup();
    crate::by_key::runs(ids)
        .select_only()
        .column(run::Column::Id)
        .order_by_asc(run::Column::Id)
        .lock_exclusive()
        .into_tuple::<String>()
        .all(txn)
        .await?;
    Ok(())
}

/// Writes the dispatch rows: changes that set the same fields together, each only while its
/// row is as it expects. Marks the changes that applied.
async fn apply_dispatches<C: ConnectionTrait>(
    txn: &C,
    changes: &[Change],
    applied: &mut [Applied],
) -> Result<(), DbErr> {
    let mut groups: Vec<(&DispatchSet, Vec<usize>)> = Vec::new();
    let mut group_of: HashMap<&DispatchSet, usize> = HashMap::new();
    for (at, change) in changes.iter().enumerate() {
        let group = *group_of.entry(&change.set).or_insert_with(|| {
            groups.push((&change.set, Vec::new()));
            groups.len() - 1
        });
        groups[group].1.push(at);
    }
    // A set of changes that expect a claim: their rows are read under lock, then checked.
    let checked: Vec<String> = groups
        .iter()
        .filter(|(_, members)| members.len() > 1)
        .flat_map(|(_, members)| members.iter())
        .filter(|at| changes[**at].expect != Expect::AsRead)
        .map(|at| changes[*at].dispatch_id.clone())
        .collect();
    let current: HashMap<String, dispatch::Model> = if checked.is_empty() {
        HashMap::new()
    } else {
        dispatch::Entity::find()
            .filter(dispatch::Column::Id.is_in(checked))
            .lock_exclusive()
            .all(txn)
            .await?
            .into_iter()
            .map(|row| (row.id.clone(), row))
            .collect()
    };
    for (set, members) in groups {
        if let [at] = members[..] {
            let change = &changes[at];
            let mut update =
                dispatch_update(set).filter(dispatch::Column::Id.eq(change.dispatch_id.as_str()));
            if let Some((owner, attempts, series)) = change.expect.claim() {
                update = update
                    .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
                    .filter(dispatch::Column::ClaimedBy.eq(owner))
                    .filter(dispatch::Column::Attempts.eq(attempts))
                    .filter(dispatch::Column::Series.eq(series));
            }
            let updated = update.exec(txn).await?;
            applied[at].held = change.expect == Expect::AsRead || updated.rows_affected > 0;
            continue;
        }
        let held: Vec<usize> = members
            .into_iter()
            .filter(|at| {
                let change = &changes[*at];
                change.expect == Expect::AsRead
                    || current
                        .get(&change.dispatch_id)
                        .is_some_and(|row| change.expect.holds(row))
            })
            .collect();
        if held.is_empty() {
            continue;
        }
        dispatch_update(set)
            .filter(
                dispatch::Column::Id.is_in(held.iter().map(|at| changes[*at].dispatch_id.clone())),
            )
            .exec(txn)
            .await?;
        for at in held {
            applied[at].held = true;
        }
    }
    Ok(())
}

/// The update that sets `set`'s fields.
fn dispatch_update(set: &DispatchSet) -> UpdateMany<dispatch::Entity> {
    use dispatch::Column;
    let mut update = dispatch::Entity::update_many();
    if let Some(status) = set.status {
        update = update.col_expr(Column::Status, status.as_str().into());
    }
    match set.attempts {
        Some(Attempts::OneMore) => {
            update = update.col_expr(Column::Attempts, Expr::col(Column::Attempts).add(1));
        }
        Some(Attempts::Reset) => update = update.col_expr(Column::Attempts, 0.into()),
        None => {}
    }
    if let Some(series) = set.series {
        update = update.col_expr(Column::Series, series.into());
    }
    if let Some(claimed_by) = &set.claimed_by {
        update = update.col_expr(Column::ClaimedBy, claimed_by.clone().into());
    }
    if let Some(claim_token) = &set.claim_token {
        update = update.col_expr(Column::ClaimToken, claim_token.clone().into());
    }
    if let Some(due_at) = set.due_at {
        update = update.col_expr(Column::DueAt, due_at.into());
    }
    if let Some(reason) = &set.reason {
        update = update.col_expr(Column::Reason, reason.clone().into());
    }
    if let Some(last_error) = &set.last_error {
        update = update.col_expr(Column::LastError, last_error.clone().into());
    }
    if let Some(delivered_at) = set.delivered_at {
        update = update.col_expr(Column::DeliveredAt, delivered_at.into());
    }
    update.col_expr(Column::UpdatedAt, set.updated_at.into())
}

/// Writes the run changes of the changes that applied: those that end a run one by one (what
/// follows depends on whether it was still active), the others set-wise where they agree.
/// Returns the endings that happened.
async fn apply_runs<'a, C: ConnectionTrait>(
    txn: &C,
    changes: &'a [Change],
    applied: &[Applied],
) -> Result<Vec<&'a super::machine::Ended>, DbErr> {
    let mut ended = Vec::new();
    let mut groups: Vec<(&RunChange, Vec<String>)> = Vec::new();
    for (at, change) in changes.iter().enumerate() {
        let Some(run) = change.run.as_ref().filter(|_| applied[at].held) else {
            continue;
        };
        if let Some(ending) = &run.ended {
            if run_update(run).exec(txn).await?.rows_affected > 0 {
                ended.push(ending);
            }
            continue;
        }
        match groups
            .iter_mut()
            .find(|(other, _)| same_statement(other, run))
        {
            Some((_, ids)) => ids.push(run.run_id.clone()),
            None => groups.push((run, vec![run.run_id.clone()])),
        }
    }
    for (run, ids) in groups {
        if ids.len() == 1 {
            run_update(run).exec(txn).await?;
            continue;
        }
        // By key alone ([`crate::by_key`]): a run in another status keeps its values.
        let from: Vec<&str> = run.from.iter().map(|s| s.as_str()).collect();
        crate::by_key::update_where_status::<run::Entity>(
            run::Column::Id,
            ids,
            run::Column::Status,
            &from,
            run_columns(run),
        )
        .exec(txn)
        .await?;
    }
    Ok(ended)
}

/// Whether two run changes are written by one statement (all but the run id agree).
fn same_statement(a: &RunChange, b: &RunChange) -> bool {
    a.from == b.from
        && a.to == b.to
        && a.finished == b.finished
        && a.fencing_token == b.fencing_token
        && a.updated_at == b.updated_at
}

/// The columns a run change sets.
fn run_columns(change: &RunChange) -> Vec<(run::Column, Value)> {
    let mut columns = vec![
        (run::Column::Status, change.to.as_str().into()),
        (run::Column::UpdatedAt, change.updated_at.into()),
    ];
    match change.finished {
        Finished::Keep => {}
        Finished::At(at) => columns.push((run::Column::FinishedAt, at.into())),
        Finished::Reopened => {
            columns.push((run::Column::FinishedAt, Option::<i64>::None.into()));
            columns.push((run::Column::EndReason, Option::<String>::None.into()));
        }
    }
    if let Some(token) = change.fencing_token {
        columns.push((run::Column::FencingToken, token.into()));
    }
    columns
}

/// One run's change, only while it is in one of the statuses it changes from.
fn run_update(change: &RunChange) -> UpdateMany<run::Entity> {
    run_columns(change)
        .into_iter()
        .fold(run::Entity::update_many(), |update, (column, value)| {
            update.col_expr(column, SimpleExpr::from(value))
        })
        .filter(run::Column::Id.eq(change.run_id.as_str()))
        .filter(run::Column::Status.is_in(change.from.iter().map(|s| s.as_str())))
}

/// The lease row `held` names, only while it still does.
fn still_held(
    update: UpdateMany<entity_lock::Entity>,
    held: &Held,
) -> UpdateMany<entity_lock::Entity> {
    update
        .filter(entity_lock::Column::TenantId.eq(held.tenant_id.as_str()))
        .filter(entity_lock::Column::TargetEntityId.eq(held.target_entity_id.as_str()))
        .filter(entity_lock::Column::RunId.eq(held.run_id.as_str()))
        .filter(entity_lock::Column::FencingToken.eq(held.fencing_token))
}

/// Writes a lease change; whether it moved the lease to the next fencing token.
async fn apply_lease<C: ConnectionTrait>(txn: &C, lease: &LeaseChange) -> Result<bool, DbErr> {
    match lease {
        LeaseChange::Release { held, at } => {
            let release = entity_lock::Entity::update_many()
                .col_expr(entity_lock::Column::RunId, Option::<String>::None.into())
                .col_expr(entity_lock::Column::ExpiresAt, (*at).into())
                .col_expr(entity_lock::Column::UpdatedAt, (*at).into());
            still_held(release, held).exec(txn).await?;
            Ok(false)
        }
        LeaseChange::NextToken { held, at } => {
            let next = held.fencing_token + 1;
            let moved = entity_lock::Entity::update_many()
                .col_expr(entity_lock::Column::FencingToken, next.into())
                .col_expr(entity_lock::Column::UpdatedAt, (*at).into());
            if still_held(moved, held).exec(txn).await?.rows_affected == 0 {
                return Ok(false);
            }
            run::Entity::update_many()
                .col_expr(run::Column::FencingToken, next.into())
                .col_expr(run::Column::UpdatedAt, (*at).into())
                .filter(run::Column::Id.eq(held.run_id.as_str()))
                .exec(txn)
                .await?;
            Ok(true)
        }
        LeaseChange::Retaken { lease, existed } => {
            let mut changes = crate::leases::LockChanges {
                now: lease.updated_at,
                ..Default::default()
            };
            if *existed {
                changes.changed.push(lease.clone());
            } else {
                changes.created.push(lease.clone());
            }
            changes.persist(txn).await?;
            Ok(false)
        }
    }
}
