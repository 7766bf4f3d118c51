//! The run lifecycle after routing: heartbeat (extend the lease), finish (release it), reads.

use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend,
    DbErr, EntityTrait, IsolationLevel, QueryFilter, QueryOrder, QuerySelect,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

use crate::Millis;
use crate::entities::entity_lock;
use crate::entities::run::{self, RunStatus};

/// Why a run operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no run with id `{0}`")]
    NotFound(String),
    #[error("run `{run_id}` is already {}", status.as_str())]
    AlreadyFinished { run_id: String, status: RunStatus },
    #[error("`{}` is not a final status (use completed, failed or cancelled)", .0.as_str())]
    NotFinal(RunStatus),
    #[error("run `{0}` no longer holds its entity lease")]
    LeaseLost(String),
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Starts a transaction that may write: `BEGIN IMMEDIATE` on SQLite (a deferred transaction that
/// reads then writes can fail with SQLITE_BUSY), READ COMMITTED elsewhere so row-locking reads
/// see the latest committed lease.
pub async fn begin_write(db: &DatabaseConnection) -> Result<DatabaseTransaction, DbErr> {
    let options = match db.get_database_backend() {
        DbBackend::Sqlite => TransactionOptions {
            sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
            ..Default::default()
        },
        _ => TransactionOptions {
            isolation_level: Some(IsolationLevel::ReadCommitted),
            ..Default::default()
        },
    };
    db.begin_with_options(options).await
}

/// The lease a heartbeat extended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub fencing_token: i64,
    pub expires_at: Millis,
}

async fn queued_run<C: ConnectionTrait>(db: &C, run_id: &str) -> Result<run::Model, RunError> {
    let run = run::Entity::find_by_id(run_id)
        .lock_exclusive()
        .one(db)
        .await?
        .ok_or_else(|| RunError::NotFound(run_id.to_owned()))?;
    if run.status.is_finished() {
        return Err(RunError::AlreadyFinished {
            run_id: run.id,
            status: run.status,
        });
    }
    Ok(run)
}

fn lease_of(run: &run::Model) -> Condition {
    Condition::all()
        .add(entity_lock::Column::TenantId.eq(run.tenant_id.as_str()))
        .add(entity_lock::Column::TargetEntityId.eq(run.target_entity_id.as_str()))
        .add(entity_lock::Column::RunId.eq(run.id.as_str()))
        .add(entity_lock::Column::FencingToken.eq(run.fencing_token))
}

/// Extends a queued run's lease by its workflow's lock TTL from `now`.
pub async fn heartbeat(
    db: &DatabaseConnection,
    run_id: &str,
    now: Millis,
) -> Result<Lease, RunError> {
    let txn = begin_write(db).await?;
    let run = queued_run(&txn, run_id).await?;
    let expires_at = now.saturating_add(run.lock_ttl_ms);
    let updated = entity_lock::Entity::update_many()
        .col_expr(entity_lock::Column::ExpiresAt, expires_at.into())
        .col_expr(entity_lock::Column::UpdatedAt, now.into())
        .filter(lease_of(&run))
        .exec(&txn)
        .await?;
    if updated.rows_affected == 0 {
        return Err(RunError::LeaseLost(run.id));
    }
    run::Entity::update_many()
        .col_expr(run::Column::UpdatedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(Lease {
        fencing_token: run.fencing_token,
        expires_at,
    })
}

/// Moves a queued run to a final status and releases its lease (if it still holds it). The lease
/// row stays, so the next holder's fencing token is larger.
pub async fn finish(
    db: &DatabaseConnection,
    run_id: &str,
    status: RunStatus,
    now: Millis,
) -> Result<run::Model, RunError> {
    if matches!(status, RunStatus::Queued | RunStatus::Expired) {
        return Err(RunError::NotFinal(status));
    }
    let txn = begin_write(db).await?;
    let mut run = queued_run(&txn, run_id).await?;
    run::Entity::update_many()
        .col_expr(run::Column::Status, status.as_str().into())
        .col_expr(run::Column::UpdatedAt, now.into())
        .col_expr(run::Column::FinishedAt, now.into())
        .filter(run::Column::Id.eq(run.id.as_str()))
        .exec(&txn)
        .await?;
    entity_lock::Entity::update_many()
        .col_expr(entity_lock::Column::RunId, Option::<String>::None.into())
        .col_expr(entity_lock::Column::ExpiresAt, now.into())
        .col_expr(entity_lock::Column::UpdatedAt, now.into())
        .filter(lease_of(&run))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    run.status = status;
    run.updated_at = now;
    run.finished_at = Some(now);
    Ok(run)
}

/// One run by id.
pub async fn get<C: ConnectionTrait>(db: &C, run_id: &str) -> Result<Option<run::Model>, DbErr> {
    run::Entity::find_by_id(run_id).one(db).await
}

/// Runs newest first, optionally of one tenant and status.
pub async fn list<C: ConnectionTrait>(
    db: &C,
    tenant_id: Option<&str>,
    status: Option<RunStatus>,
    limit: u64,
) -> Result<Vec<run::Model>, DbErr> {
    let mut query = run::Entity::find()
        .order_by_desc(run::Column::Id)
        .limit(limit);
    if let Some(tenant_id) = tenant_id {
        query = query.filter(run::Column::TenantId.eq(tenant_id));
    }
    if let Some(status) = status {
        query = query.filter(run::Column::Status.eq(status));
    }
    query.all(db).await
}

/// Entity leases currently held (unexpired with a holder), optionally of one tenant.
pub async fn held_locks<C: ConnectionTrait>(
    db: &C,
    tenant_id: Option<&str>,
    now: Millis,
    limit: u64,
) -> Result<Vec<entity_lock::Model>, DbErr> {
    let mut query = entity_lock::Entity::find()
        .filter(entity_lock::Column::RunId.is_not_null())
        .filter(entity_lock::Column::ExpiresAt.gt(now))
        .order_by_asc(entity_lock::Column::TenantId)
        .order_by_asc(entity_lock::Column::TargetEntityId)
        .limit(limit);
    if let Some(tenant_id) = tenant_id {
        query = query.filter(entity_lock::Column::TenantId.eq(tenant_id));
    }
    query.all(db).await
}

/// The lease row of one entity, for dry runs and the admin API.
pub async fn lock_of<C: ConnectionTrait>(
    db: &C,
    tenant_id: &str,
    target_entity_id: &str,
) -> Result<Option<entity_lock::Model>, DbErr> {
    entity_lock::Entity::find_by_id((tenant_id.to_owned(), target_entity_id.to_owned()))
        .one(db)
        .await
}
