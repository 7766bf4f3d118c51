//! The reads alert rules evaluate: each one index probe with a `LIMIT 1`, never a count of a
//! backlog or a scan of the ledger, so evaluating rules every few seconds costs intake nothing
//! it would notice.

use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::entities::dispatch::{self, DispatchStatus};
use crate::entities::intake;
use crate::{Millis, Store};

/// Which deliveries a `source_quiet` rule watches.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryScope<'a> {
    pub source: &'a str,
    pub tenant_id: Option<&'a str>,
    pub event_type: Option<&'a str>,
}

impl Store {
    /// When the newest delivery of `scope` received at or after `not_before` arrived. No index
    /// serves it (one leading with `source` slowed the intake writer's probes on PostgreSQL,
    /// see m0014), so it reads the source's rows: run off the intake path, once per evaluation,
    /// and keep `not_before` recent.
    pub async fn last_delivery(
        &self,
        scope: DeliveryScope<'_>,
        not_before: Millis,
    ) -> Result<Option<Millis>, DbErr> {
        let mut query = intake::Entity::find()
            .select_only()
            .column(intake::Column::ReceivedAt)
            .filter(intake::Column::Source.eq(scope.source))
            .filter(intake::Column::ReceivedAt.gte(not_before));
        if let Some(tenant) = scope.tenant_id {
            query = query.filter(intake::Column::TenantId.eq(tenant));
        }
        if let Some(event_type) = scope.event_type {
            query = query.filter(intake::Column::EventType.eq(event_type));
        }
        query
            .order_by_desc(intake::Column::ReceivedAt)
            .limit(1)
            .into_tuple::<Millis>()
            .one(self.db())
            .await
    }

    /// When the longest-waiting due dispatch of `target` became due (pending with `due_at` at
    /// or before `now`; a claimed row's `due_at` is its claim's expiry, in the future): one
    /// probe of `dispatches_due (status, target, due_at)`.
    pub async fn oldest_due_dispatch(
        &self,
        target: &str,
        now: Millis,
    ) -> Result<Option<Millis>, DbErr> {
        dispatch::Entity::find()
            .select_only()
            .column(dispatch::Column::DueAt)
            .filter(dispatch::Column::Status.eq(DispatchStatus::Pending))
            .filter(dispatch::Column::Target.eq(target))
            .filter(dispatch::Column::DueAt.lte(now))
            .order_by_asc(dispatch::Column::DueAt)
            .limit(1)
            .into_tuple::<Millis>()
            .one(self.db())
            .await
    }
}
