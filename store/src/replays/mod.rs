//! Replays and their results, and the ledger pages a replay reads (oldest first, after a
//! cursor); [`holders`] rebuilds who held an entity when, from runs and their history.
//!
//! Invariant: a replay reads only rows recorded before it started (`id < upto`, ids are
//! UUIDv7), so a live replay never reads back what it re-admitted; and a diagnostic replay
//! writes only `replays` and `replay_results`.

mod holders;

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder,
    QuerySelect, Select,
};
use serde::{Deserialize, Serialize};

pub use holders::Holders;

use crate::Store;
use crate::entities::{intake, replay, replay_result};
use crate::runs::begin_write;

/// Which stored deliveries a replay takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filters {
    /// Received at or after (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// Received before (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The original outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The target entity id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// One delivery id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
    /// The tenants the actor may see (`None`: every tenant); set from the caller's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenants: Option<Vec<String>>,
}

/// `(event_type, original outcome, original workflow, replayed outcome, replayed workflow,
/// count)`: one cell of a replay's moves table.
pub type Move = (
    Option<String>,
    String,
    Option<String>,
    String,
    Option<String>,
    i64,
);

/// The ledger rows `filters` take among those recorded before the replay `upto` started;
/// `originals_only` (a live replay) takes only original deliveries, never another replay's
/// re-admissions.
fn filtered(filters: &Filters, upto: &str, originals_only: bool) -> Select<intake::Entity> {
    let mut query = intake::Entity::find().filter(intake::Column::Id.lt(upto));
    if originals_only {
        query = query.filter(intake::Column::ReplayId.is_null());
    }
    if let Some(tenants) = &filters.tenants {
        query = query.filter(intake::Column::TenantId.is_in(tenants.iter().map(String::as_str)));
    }
    if let Some(tenant) = &filters.tenant {
        query = query.filter(intake::Column::TenantId.eq(tenant.as_str()));
    }
    if let Some(since) = filters.since {
        query = query.filter(intake::Column::ReceivedAt.gte(since));
    }
    if let Some(until) = filters.until {
        query = query.filter(intake::Column::ReceivedAt.lt(until));
    }
    if let Some(source) = &filters.source {
        query = query.filter(intake::Column::Source.eq(source.as_str()));
    }
    if let Some(outcome) = &filters.outcome {
        query = query.filter(intake::Column::Outcome.eq(outcome.as_str()));
    }
    if let Some(entity) = &filters.entity {
        query = query.filter(intake::Column::TargetEntityId.eq(entity.as_str()));
    }
    if let Some(delivery) = &filters.delivery {
        query = query.filter(intake::Column::DeliveryId.eq(delivery.as_str()));
    }
    query
}

impl Store {
    /// How many ledger rows `filters` take before `upto` (see [`Store::replay_page`]).
    pub async fn replay_count(
        &self,
        filters: &Filters,
        upto: &str,
        originals_only: bool,
    ) -> Result<u64, DbErr> {
        if filters.tenants.as_ref().is_some_and(Vec::is_empty) {
            return Ok(0);
        }
        filtered(filters, upto, originals_only)
            .count(self.db())
            .await
    }

    /// The next `limit` ledger rows `filters` take, oldest first, after the row `after`, among
    /// those recorded before `upto` (a replay's id); `originals_only` skips re-admissions.
    pub async fn replay_page(
        &self,
        filters: &Filters,
        upto: &str,
        originals_only: bool,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Vec<intake::Model>, DbErr> {
        if filters.tenants.as_ref().is_some_and(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let mut query = filtered(filters, upto, originals_only)
            .order_by_asc(intake::Column::Id)
            .limit(limit);
        if let Some(after) = after {
            query = query.filter(intake::Column::Id.gt(after));
        }
        query.all(self.db()).await
    }

    /// Records a new replay.
    pub async fn create_replay(&self, row: replay::Model) -> Result<(), DbErr> {
        let txn = begin_write(self.db()).await?;
        replay::ActiveModel::from(row).insert(&txn).await?;
        txn.commit().await
    }

    /// Stores a batch's results and the replay's progress in one transaction; a rerun's
    /// results replace what an earlier run recorded for the same deliveries.
    pub async fn record_replay_batch(
        &self,
        replay_id: &str,
        results: Vec<replay_result::Model>,
        last_intake_id: &str,
    ) -> Result<(), DbErr> {
        let done = results.len() as i64;
        let differ = results.iter().filter(|r| r.differs).count() as i64;
        let txn = begin_write(self.db()).await?;
        if !results.is_empty() {
            replay_result::Entity::delete_many()
                .filter(replay_result::Column::ReplayId.eq(replay_id))
                .filter(
                    replay_result::Column::IntakeId
                        .is_in(results.iter().map(|r| r.intake_id.clone())),
                )
                .exec(&txn)
                .await?;
            replay_result::Entity::insert_many(
                results.into_iter().map(replay_result::ActiveModel::from),
            )
            .exec_without_returning(&txn)
            .await?;
        }
        replay::Entity::update_many()
            .col_expr(
                replay::Column::Done,
                Expr::col(replay::Column::Done).add(done),
            )
            .col_expr(
                replay::Column::Differ,
                Expr::col(replay::Column::Differ).add(differ),
            )
            .col_expr(replay::Column::LastIntakeId, Expr::value(last_intake_id))
            .filter(replay::Column::Id.eq(replay_id))
            .exec(&txn)
            .await?;
        txn.commit().await
    }

    /// Marks a replay started (again): counters from zero, its total as counted now.
    pub async fn start_replay(&self, id: &str, total: i64, now: i64) -> Result<(), DbErr> {
        let txn = begin_write(self.db()).await?;
        replay::Entity::update_many()
            .col_expr(replay::Column::Status, Expr::value("running"))
            .col_expr(replay::Column::Total, Expr::value(total))
            .col_expr(replay::Column::Done, Expr::value(0))
            .col_expr(replay::Column::Differ, Expr::value(0))
            .col_expr(
                replay::Column::LastIntakeId,
                Expr::value(Option::<String>::None),
            )
            .col_expr(replay::Column::Error, Expr::value(Option::<String>::None))
            .col_expr(replay::Column::StartedAt, Expr::value(now))
            .col_expr(replay::Column::FinishedAt, Expr::value(Option::<i64>::None))
            .filter(replay::Column::Id.eq(id))
            .exec(&txn)
            .await?;
        txn.commit().await
    }

    /// Ends a replay: `completed`, `cancelled`, `failed` (with the error) or `interrupted`.
    pub async fn finish_replay(
        &self,
        id: &str,
        status: &str,
        error: Option<String>,
        now: i64,
    ) -> Result<(), DbErr> {
        let txn = begin_write(self.db()).await?;
        replay::Entity::update_many()
            .col_expr(replay::Column::Status, Expr::value(status))
            .col_expr(replay::Column::Error, Expr::value(error))
            .col_expr(replay::Column::FinishedAt, Expr::value(now))
            .filter(replay::Column::Id.eq(id))
            .exec(&txn)
            .await?;
        txn.commit().await
    }

    /// Replays still `running` when a daemon starts were interrupted (by a stop or a crash):
    /// marks them so, and they can be rerun.
    pub async fn interrupt_replays(&self, now: i64) -> Result<(), DbErr> {
        replay::Entity::update_many()
            .col_expr(replay::Column::Status, Expr::value("interrupted"))
            .col_expr(replay::Column::FinishedAt, Expr::value(now))
            .filter(replay::Column::Status.eq("running"))
            .exec(self.db())
            .await
            .map(|_| ())
    }

    /// One replay by id.
    pub async fn replay(&self, id: &str) -> Result<Option<replay::Model>, DbErr> {
        replay::Entity::find_by_id(id).one(self.db()).await
    }

    /// Replays newest first, older than `before`, at most `limit`.
    pub async fn replays(
        &self,
        before: Option<&str>,
        limit: u64,
    ) -> Result<Vec<replay::Model>, DbErr> {
        let mut query = replay::Entity::find()
            .order_by_desc(replay::Column::Id)
            .limit(limit);
        if let Some(before) = before {
            query = query.filter(replay::Column::Id.lt(before));
        }
        query.all(self.db()).await
    }

    /// A replay's results in ledger order (oldest first), after the original intake id
    /// `after`, only those that differ if `only_differing`.
    pub async fn replay_results(
        &self,
        replay_id: &str,
        only_differing: bool,
        after: Option<&str>,
        limit: u64,
    ) -> Result<Vec<replay_result::Model>, DbErr> {
        let mut query = replay_result::Entity::find()
            .filter(replay_result::Column::ReplayId.eq(replay_id))
            .order_by_asc(replay_result::Column::IntakeId)
            .limit(limit);
        if only_differing {
            query = query.filter(replay_result::Column::Differs.eq(true));
        }
        if let Some(after) = after {
            query = query.filter(replay_result::Column::IntakeId.gt(after));
        }
        query.all(self.db()).await
    }

    /// The results of every replay that took the ledger row `intake_id`, newest replay first
    /// (at most `limit`): what became of a delivery each time it was replayed or re-admitted.
    /// Read through `replay_results_intake`.
    pub async fn replays_of_delivery(
        &self,
        intake_id: &str,
        limit: u64,
    ) -> Result<Vec<replay_result::Model>, DbErr> {
        replay_result::Entity::find()
            .filter(replay_result::Column::IntakeId.eq(intake_id))
            .order_by_desc(replay_result::Column::ReplayId)
            .limit(limit)
            .all(self.db())
            .await
    }

    /// How a replay's deliveries moved: its results counted per cell ([`Move`]).
    pub async fn replay_moves(&self, replay_id: &str) -> Result<Vec<Move>, DbErr> {
        replay_result::Entity::find()
            .select_only()
            .column(replay_result::Column::EventType)
            .column(replay_result::Column::OriginalOutcome)
            .column(replay_result::Column::OriginalWorkflowId)
            .column(replay_result::Column::ReplayedOutcome)
            .column(replay_result::Column::ReplayedWorkflowId)
            .column_as(replay_result::Column::Id.count(), "n")
            .filter(replay_result::Column::ReplayId.eq(replay_id))
            .group_by(replay_result::Column::EventType)
            .group_by(replay_result::Column::OriginalOutcome)
            .group_by(replay_result::Column::OriginalWorkflowId)
            .group_by(replay_result::Column::ReplayedOutcome)
            .group_by(replay_result::Column::ReplayedWorkflowId)
            .into_tuple()
            .all(self.db())
            .await
    }
}
