//! Reads of runs and leases: one run, a page of runs, the leases held, one entity's lease, and
//! one run with everything recorded about it, read from one snapshot.

use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};

use crate::Millis;
use crate::Store;
use crate::entities::run::{self, RunStatus};
use crate::entities::{dispatch, dispatch_attempt, entity_lock, intake, run_history, wait};
use crate::revisions::Revision;

/// One run by id.
pub async fn get<C: ConnectionTrait>(db: &C, run_id: &str) -> Result<Option<run::Model>, DbErr> {
    run::Entity::find_by_id(run_id).one(db).await
}

/// Runs newest first, optionally of one tenant and status, older than `before` (a run id:
/// the next page's cursor).
pub async fn list<C: ConnectionTrait>(
    db: &C,
    tenant_id: Option<&str>,
    status: Option<RunStatus>,
    before: Option<&str>,
    limit: u64,
) -> Result<Vec<run::Model>, DbErr> {
    let tenants = tenant_id.map(|t| vec![t.to_owned()]);
    let filter = RunFilter {
        tenants: tenants.as_deref(),
        status,
        before,
        ..RunFilter::default()
    };
    list_filtered(db, &filter, limit).await
}

/// Which runs a listing shows.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunFilter<'a> {
    /// Only these tenants' runs (`None`: every tenant; empty: none).
    pub tenants: Option<&'a [String]>,
    pub status: Option<RunStatus>,
    pub workflow_id: Option<&'a str>,
    pub target_entity_id: Option<&'a str>,
    /// Only runs with a smaller (older) id: the next page's cursor.
    pub before: Option<&'a str>,
}

/// Runs newest first, as `filter` says.
pub async fn list_filtered<C: ConnectionTrait>(
    db: &C,
    filter: &RunFilter<'_>,
    limit: u64,
) -> Result<Vec<run::Model>, DbErr> {
    let mut query = run::Entity::find()
        .order_by_desc(run::Column::Id)
        .limit(limit);
    if let Some(before) = filter.before {
        query = query.filter(run::Column::Id.lt(before));
    }
    if let Some(tenants) = filter.tenants {
        if tenants.is_empty() {
            return Ok(Vec::new());
        }
        query = query.filter(run::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    if let Some(status) = filter.status {
        query = query.filter(run::Column::Status.eq(status));
    }
    if let Some(workflow_id) = filter.workflow_id {
        query = query.filter(run::Column::WorkflowId.eq(workflow_id));
    }
    if let Some(entity) = filter.target_entity_id {
        query = query.filter(run::Column::TargetEntityId.eq(entity));
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
    let tenants = tenant_id.map(|t| vec![t.to_owned()]);
    held_locks_of(db, tenants.as_deref(), now, limit).await
}

/// Entity leases currently held, of these tenants (`None`: every tenant; empty: none).
pub async fn held_locks_of<C: ConnectionTrait>(
    db: &C,
    tenants: Option<&[String]>,
    now: Millis,
    limit: u64,
) -> Result<Vec<entity_lock::Model>, DbErr> {
    match held_locks_select(tenants, now, limit) {
        Some(query) => query.all(db).await,
        None => Ok(Vec::new()),
    }
}

/// The statement behind [`held_locks_of`] (`None`: the tenant filter lets nothing through):
/// in `entity_locks_held`'s order, so SQLite and PostgreSQL read the first held leases and
/// stop. Public so the query-plan tests can check it.
pub fn held_locks_select(
    tenants: Option<&[String]>,
    now: Millis,
    limit: u64,
) -> Option<sea_orm::Select<entity_lock::Entity>> {
    let mut query = entity_lock::Entity::find()
        .filter(entity_lock::Column::RunId.is_not_null())
        .filter(entity_lock::Column::ExpiresAt.gt(now))
        .order_by_asc(entity_lock::Column::TenantId)
        .order_by_asc(entity_lock::Column::TargetEntityId)
        .limit(limit);
    if let Some(tenants) = tenants {
        if tenants.is_empty() {
            return None;
        }
        query =
            query.filter(entity_lock::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    Some(query)
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

/// One run with everything recorded about it, as of one moment: what `GET /v1/runs/{id}` and
/// the console's run page show, and what its audit is built from.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub run: run::Model,
    /// Its latest dispatch (the start, or the resume of its last resumed wait).
    pub dispatch: Option<dispatch::Model>,
    pub attempts: Vec<dispatch_attempt::Model>,
    /// Oldest first.
    pub history: Vec<run_history::Model>,
    /// Its waits, oldest first.
    pub waits: Vec<wait::Model>,
    /// The ledger row of the delivery that started it (absent once retention pruned it).
    pub ledger_row: Option<intake::Model>,
    /// The config revision that routed it, as stored (absent when not stored).
    pub revision: Option<Revision>,
    /// The lease row of its entity (whoever holds it now).
    pub lease: Option<entity_lock::Model>,
}

/// A run's waits, oldest first.
pub(crate) async fn waits_of<C: ConnectionTrait>(
    db: &C,
    run_id: &str,
) -> Result<Vec<wait::Model>, DbErr> {
    wait::Entity::find()
        .filter(wait::Column::RunId.eq(run_id))
        .order_by_asc(wait::Column::Id)
        .all(db)
        .await
}

impl Store {
    /// One run by id.
    pub async fn run(&self, run_id: &str) -> Result<Option<run::Model>, DbErr> {
        get(self.db(), run_id).await
    }

    /// Runs newest first, as `filter` says (at most `limit`).
    pub async fn runs(&self, filter: &RunFilter<'_>, limit: u64) -> Result<Vec<run::Model>, DbErr> {
        list_filtered(self.db(), filter, limit).await
    }

    /// Entity leases held at `now` (unexpired, with a holder), of `tenants` (`None`: every
    /// tenant; empty: none), by tenant and entity.
    pub async fn held_leases(
        &self,
        tenants: Option<&[String]>,
        now: Millis,
        limit: u64,
    ) -> Result<Vec<entity_lock::Model>, DbErr> {
        held_locks_of(self.db(), tenants, now, limit).await
    }

    /// The lease row of one entity, held or not.
    pub async fn lease_of(
        &self,
        tenant_id: &str,
        target_entity_id: &str,
    ) -> Result<Option<entity_lock::Model>, DbErr> {
        lock_of(self.db(), tenant_id, target_entity_id).await
    }

    /// A run's waits, oldest first.
    pub async fn waits_of_run(&self, run_id: &str) -> Result<Vec<wait::Model>, DbErr> {
        waits_of(self.db(), run_id).await
    }

    /// One run with its dispatch, attempts, history, waits, ledger row, routing revision and
    /// lease, all read from one snapshot (never torn by a write in between), if it exists and
    /// its tenant is one of `tenants` (`None`: every tenant).
    pub async fn run_record(
        &self,
        run_id: &str,
        tenants: Option<&[String]>,
    ) -> Result<Option<RunRecord>, DbErr> {
        let txn = self
            .db()
            .begin_with_options(self.driver().snapshot())
            .await?;
        let Some(run) = get(&txn, run_id)
            .await?
            .filter(|run| crate::ledger::visible(tenants, Some(&run.tenant_id)))
        else {
            txn.commit().await?;
            return Ok(None);
        };
        let (dispatch, attempts, history) = crate::outbox::trail(&txn, &run).await?;
        let waits = waits_of(&txn, &run.id).await?;
        let ledger_row = intake::Entity::find_by_id(run.intake_id.as_str())
            .one(&txn)
            .await?;
        let hash = run
            .config_revision
            .clone()
            .or_else(|| ledger_row.as_ref().map(|r| r.config_revision.clone()));
        let revision = match &hash {
            Some(hash) => crate::revisions::by_hash(&txn, hash).await?,
            None => None,
        };
        let lease = lock_of(&txn, &run.tenant_id, &run.target_entity_id).await?;
        txn.commit().await?;
        Ok(Some(RunRecord {
            run,
            dispatch,
            attempts,
            history,
            waits,
            ledger_row,
            revision,
            lease,
        }))
    }
}
