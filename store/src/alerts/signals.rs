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
    /// When the newest delivery of `scope` recorded in `[from, before)` (`None`: up to now)
    /// arrived. Ledger ids are UUIDv7, so the window is a range of the primary key, read newest
    /// first until a row of the scope: an active source stops at once, a quiet one reads the
    /// window's rows. No index leads with `source` (one slowed the intake writer's probes on
    /// PostgreSQL, see m0014), so callers keep windows short and never read the same old rows
    /// twice (`alerts::findings` remembers how far back it has searched).
    pub async fn last_delivery(
        &self,
        scope: DeliveryScope<'_>,
        from: Millis,
        before: Option<Millis>,
    ) -> Result<Option<Millis>, DbErr> {
        let mut query = intake::Entity::find()
            .select_only()
            .column(intake::Column::ReceivedAt)
            .filter(intake::Column::Id.gte(crate::cutoff_id(from)))
            .filter(intake::Column::Source.eq(scope.source));
        if let Some(before) = before {
            query = query.filter(intake::Column::Id.lt(crate::cutoff_id(before)));
        }
        if let Some(tenant) = scope.tenant_id {
            query = query.filter(intake::Column::TenantId.eq(tenant));
        }
        if let Some(event_type) = scope.event_type {
            query = query.filter(intake::Column::EventType.eq(event_type));
        }
        query
            .order_by_desc(intake::Column::Id)
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
