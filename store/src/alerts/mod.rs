//! Alerts: the lifecycle (`fire`, `resolve`, acknowledge, silence) of one row per `(rule,
//! scope)`, its notification outbox ([`notifications`]) and the bounded reads alert rules
//! evaluate ([`signals`]).
//!
//! Invariant: a transition and the notifications it owes are written in one transaction under
//! the alert row's lock (or its unique key, for the first firing), so replicas sharing a
//! database raise one alert and owe one notification per notifier per transition. An alert fed
//! by each replica's own view (an `observer` firing) records that replica's observation in the
//! same transaction, and [`Store::resolve_observed_alert`] resolves it only when no other
//! replica's observation is fresh: one replica recovering does not resolve what another still
//! sees, so the alert does not flap between replicas.

pub mod notifications;
pub mod signals;

use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, SqlErr,
};
use uuid::Uuid;

use crate::entities::{alert, alert_notification, alert_observation};
use crate::runs::begin_write;
use crate::{Millis, Store};

/// `alerts.state` of an alert whose condition holds.
pub const FIRING: &str = "firing";
/// `alerts.state` of an alert whose condition no longer holds.
pub const RESOLVED: &str = "resolved";
/// `alert_notifications.event` of a firing.
pub const FIRED: &str = "fired";

/// What a rule found wrong, to be raised (or kept up to date) as one alert.
#[derive(Debug, Clone)]
pub struct Firing<'a> {
    pub rule: &'a str,
    pub scope: &'a str,
    pub kind: &'a str,
    pub tenant_id: Option<&'a str>,
    pub summary: &'a str,
    /// The numbers behind it, as a JSON object's text.
    pub numbers: &'a str,
    /// When the condition began.
    pub since: Millis,
    /// The notifiers told of a new firing (and later of its resolve).
    pub notifiers: &'a [String],
    /// The replica whose own view found it (rules fed by in-memory health), recorded as an
    /// observation; `None` for rules every replica judges alike from the database.
    pub observer: Option<&'a str>,
}

/// What [`Store::fire_alert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fired {
    /// A new episode began (notifications owed unless silenced): the alert's id and episode.
    New { alert_id: String, episode: i32 },
    /// It was firing already; its numbers were brought up to date.
    Still { alert_id: String },
    /// Another replica raised it at the same moment; that one owes the notifications.
    Raced,
}

/// Why an acknowledgement or silence was refused.
#[derive(Debug, thiserror::Error)]
pub enum AlertChangeError {
    /// No such alert, or not one the caller may see.
    #[error("no alert with this id")]
    NotFound,
    #[error(transparent)]
    Db(#[from] DbErr),
}

/// Which alerts a listing reads.
#[derive(Debug, Clone, Default)]
pub struct AlertFilter {
    /// `firing` or `resolved`; `None` for both.
    pub state: Option<String>,
    /// The tenants a limited caller sees (their alerts only); `None` for every alert.
    pub tenants: Option<Vec<String>>,
    /// Most rows returned, newest first.
    pub limit: u64,
}

fn with_tenants(
    query: sea_orm::Select<alert::Entity>,
    tenants: Option<&[String]>,
) -> sea_orm::Select<alert::Entity> {
    match tenants {
        None => query,
        Some(tenants) => query.filter(alert::Column::TenantId.is_in(tenants.iter().cloned())),
    }
}

async fn owe<C: ConnectionTrait>(
    txn: &C,
    alert_id: &str,
    episode: i32,
    event: &str,
    notifiers: &[String],
    now: Millis,
) -> Result<(), DbErr> {
    if notifiers.is_empty() {
        return Ok(());
    }
    let rows = notifiers
        .iter()
        .map(|notifier| alert_notification::ActiveModel {
            id: Set(Uuid::now_v7().to_string()),
            alert_id: Set(alert_id.to_owned()),
            episode: Set(episode),
            event: Set(event.to_owned()),
            notifier: Set(notifier.clone()),
            status: Set(notifications::PENDING.to_owned()),
            attempts: Set(0),
            due_at: Set(now),
            claim_token: Set(None),
            last_error: Set(None),
            external_ref: Set(None),
            created_at: Set(now),
            delivered_at: Set(None),
        });
    alert_notification::Entity::insert_many(rows)
        .exec_without_returning(txn)
        .await
        .map(|_| ())
}

/// Records that `observer` sees the alert's fault at `now` (an upsert on `(alert, replica)`).
async fn observe<C: ConnectionTrait>(
    txn: &C,
    alert_id: &str,
    observer: Option<&str>,
    now: Millis,
) -> Result<(), DbErr> {
    let Some(replica) = observer else {
        return Ok(());
    };
    alert_observation::Entity::insert(alert_observation::ActiveModel {
        alert_id: Set(alert_id.to_owned()),
        replica: Set(replica.to_owned()),
        observed_at: Set(now),
    })
    .on_conflict(
        OnConflict::columns([
            alert_observation::Column::AlertId,
            alert_observation::Column::Replica,
        ])
        .update_column(alert_observation::Column::ObservedAt)
        .to_owned(),
    )
    .exec_without_returning(txn)
    .await
    .map(|_| ())
}

impl Store {
    /// Raises the alert of `firing.rule` and `firing.scope`, or keeps it up to date when it is
    /// firing already. A new episode owes a `fired` notification to each of `firing.notifiers`
    /// unless the alert is silenced at `now`.
    pub async fn fire_alert(&self, firing: &Firing<'_>, now: Millis) -> Result<Fired, DbErr> {
        match self.fire_once(firing, now).await? {
            // Another replica inserted the row a moment ago: record this replica's observation
            // on it too (the row exists now, so this is an update under its lock).
            Fired::Raced if firing.observer.is_some() => match self.fire_once(firing, now).await? {
                Fired::Still { .. } | Fired::Raced => Ok(Fired::Raced),
                fired => Ok(fired),
            },
            fired => Ok(fired),
        }
    }

    async fn fire_once(&self, firing: &Firing<'_>, now: Millis) -> Result<Fired, DbErr> {
        let txn = begin_write(self.db()).await?;
        let current = alert::Entity::find()
            .filter(alert::Column::Rule.eq(firing.rule))
            .filter(alert::Column::Scope.eq(firing.scope))
            .lock_exclusive()
            .one(&txn)
            .await?;
        let Some(current) = current else {
            let alert_id = Uuid::now_v7().to_string();
            let inserted = alert::Entity::insert(alert::ActiveModel {
                id: Set(alert_id.clone()),
                rule: Set(firing.rule.to_owned()),
                scope: Set(firing.scope.to_owned()),
                kind: Set(firing.kind.to_owned()),
                tenant_id: Set(firing.tenant_id.map(str::to_owned)),
                state: Set(FIRING.to_owned()),
                episode: Set(1),
                summary: Set(firing.summary.to_owned()),
                numbers: Set(firing.numbers.to_owned()),
                since: Set(firing.since),
                fired_at: Set(now),
                resolved_at: Set(None),
                acknowledged_at: Set(None),
                acknowledged_by: Set(None),
                silenced_until: Set(None),
                silenced_by: Set(None),
                updated_at: Set(now),
            })
            .exec_without_returning(&txn)
            .await;
            return match inserted {
                Ok(_) => {
                    observe(&txn, &alert_id, firing.observer, now).await?;
                    owe(&txn, &alert_id, 1, FIRED, firing.notifiers, now).await?;
                    txn.commit().await?;
                    Ok(Fired::New {
                        alert_id,
                        episode: 1,
                    })
                }
                Err(error)
                    if matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) =>
                {
                    Ok(Fired::Raced)
                }
                Err(error) => Err(error),
            };
        };
        let mut update = alert::Entity::update_many()
            .col_expr(alert::Column::Summary, firing.summary.into())
            .col_expr(alert::Column::Numbers, firing.numbers.into())
            .col_expr(alert::Column::UpdatedAt, now.into())
            .filter(alert::Column::Id.eq(&current.id));
        observe(&txn, &current.id, firing.observer, now).await?;
        if current.state == FIRING {
            update.exec(&txn).await?;
            txn.commit().await?;
            return Ok(Fired::Still {
                alert_id: current.id,
            });
        }
        let episode = current.episode + 1;
        update = update
            .col_expr(alert::Column::State, FIRING.into())
            .col_expr(alert::Column::Episode, episode.into())
            .col_expr(alert::Column::Kind, firing.kind.into())
            .col_expr(alert::Column::Since, firing.since.into())
            .col_expr(alert::Column::FiredAt, now.into())
            .col_expr(alert::Column::ResolvedAt, Option::<i64>::None.into())
            .col_expr(alert::Column::AcknowledgedAt, Option::<i64>::None.into())
            .col_expr(alert::Column::AcknowledgedBy, Option::<String>::None.into());
        update.exec(&txn).await?;
        let silenced = current.silenced_until.is_some_and(|until| until > now);
        if !silenced {
            owe(&txn, &current.id, episode, FIRED, firing.notifiers, now).await?;
        }
        txn.commit().await?;
        Ok(Fired::New {
            alert_id: current.id,
            episode,
        })
    }

    /// Resolves the alert of `rule` and `scope` if it is firing; each notifier told of this
    /// episode's firing is owed a `resolved` notification. Whether it was firing.
    pub async fn resolve_alert(&self, rule: &str, scope: &str, now: Millis) -> Result<bool, DbErr> {
        self.resolve_observed_alert(rule, scope, None, now).await
    }

    /// Resolves the alert of `rule` and `scope` as [`Store::resolve_alert`] does, for a
    /// replica that no longer observes its fault: `observed` is that replica and the time
    /// before which another replica's observation is stale. The replica's own observation is
    /// withdrawn; the alert resolves only when no other replica observed the fault after that
    /// time (it stays firing while one still does). Whether it was resolved.
    pub async fn resolve_observed_alert(
        &self,
        rule: &str,
        scope: &str,
        observed: Option<(&str, Millis)>,
        now: Millis,
    ) -> Result<bool, DbErr> {
        let txn = begin_write(self.db()).await?;
        let current = alert::Entity::find()
            .filter(alert::Column::Rule.eq(rule))
            .filter(alert::Column::Scope.eq(scope))
            .lock_exclusive()
            .one(&txn)
            .await?;
        let Some(current) = current.filter(|alert| alert.state == FIRING) else {
            return Ok(false);
        };
        if let Some((replica, fresh_after)) = observed {
            alert_observation::Entity::delete_many()
                .filter(alert_observation::Column::AlertId.eq(&current.id))
                .filter(alert_observation::Column::Replica.eq(replica))
                .exec(&txn)
                .await?;
            let others = alert_observation::Entity::find()
                .filter(alert_observation::Column::AlertId.eq(&current.id))
                .filter(alert_observation::Column::ObservedAt.gt(fresh_after))
                .count(&txn)
                .await?;
            if others > 0 {
                txn.commit().await?;
                return Ok(false);
            }
        }
        alert_observation::Entity::delete_many()
            .filter(alert_observation::Column::AlertId.eq(&current.id))
            .exec(&txn)
            .await?;
        alert::Entity::update_many()
            .col_expr(alert::Column::State, RESOLVED.into())
            .col_expr(alert::Column::ResolvedAt, Some(now).into())
            .col_expr(alert::Column::UpdatedAt, now.into())
            .filter(alert::Column::Id.eq(&current.id))
            .exec(&txn)
            .await?;
        let told: Vec<String> = alert_notification::Entity::find()
            .select_only()
            .column(alert_notification::Column::Notifier)
            .filter(alert_notification::Column::AlertId.eq(&current.id))
            .filter(alert_notification::Column::Episode.eq(current.episode))
            .filter(alert_notification::Column::Event.eq(FIRED))
            .into_tuple()
            .all(&txn)
            .await?;
        owe(&txn, &current.id, current.episode, RESOLVED, &told, now).await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Every firing alert (few: one per rule and scope whose condition holds).
    pub async fn firing_alerts(&self) -> Result<Vec<alert::Model>, DbErr> {
        alert::Entity::find()
            .filter(alert::Column::State.eq(FIRING))
            .all(self.db())
            .await
    }

    /// The replicas observing each of `alert_ids` and when each last did (alerts nobody
    /// observes are absent), ordered by replica.
    pub async fn alert_observers(
        &self,
        alert_ids: &[&str],
    ) -> Result<std::collections::HashMap<String, Vec<(String, Millis)>>, DbErr> {
        let mut observers: std::collections::HashMap<String, Vec<(String, Millis)>> =
            std::collections::HashMap::new();
        for chunk in alert_ids.chunks(200) {
            let rows = alert_observation::Entity::find()
                .filter(alert_observation::Column::AlertId.is_in(chunk.iter().copied()))
                .order_by_asc(alert_observation::Column::Replica)
                .all(self.db())
                .await?;
            for row in rows {
                observers
                    .entry(row.alert_id)
                    .or_default()
                    .push((row.replica, row.observed_at));
            }
        }
        Ok(observers)
    }

    /// Alerts newest first (by when they last changed), as `filter` selects.
    pub async fn list_alerts(&self, filter: &AlertFilter) -> Result<Vec<alert::Model>, DbErr> {
        let mut query = with_tenants(alert::Entity::find(), filter.tenants.as_deref());
        if let Some(state) = &filter.state {
            query = query.filter(alert::Column::State.eq(state.as_str()));
        }
        query
            .order_by_desc(alert::Column::UpdatedAt)
            .order_by_desc(alert::Column::Id)
            .limit(filter.limit)
            .all(self.db())
            .await
    }

    /// One alert, if `tenants` (a limited caller's) may see it.
    pub async fn alert(
        &self,
        id: &str,
        tenants: Option<&[String]>,
    ) -> Result<Option<alert::Model>, DbErr> {
        with_tenants(alert::Entity::find(), tenants)
            .filter(alert::Column::Id.eq(id))
            .one(self.db())
            .await
    }

    /// Marks the alert acknowledged by `by` (until it fires again).
    pub async fn acknowledge_alert(
        &self,
        id: &str,
        tenants: Option<&[String]>,
        by: &str,
        now: Millis,
    ) -> Result<alert::Model, AlertChangeError> {
        self.change_alert(id, tenants, now, |update| {
            update
                .col_expr(alert::Column::AcknowledgedAt, Some(now).into())
                .col_expr(alert::Column::AcknowledgedBy, Some(by.to_owned()).into())
        })
        .await
    }

    /// Silences the alert until `until`: a firing before then notifies no one. `until` at or
    /// before `now` lifts the silence.
    pub async fn silence_alert(
        &self,
        id: &str,
        tenants: Option<&[String]>,
        until: Millis,
        by: &str,
        now: Millis,
    ) -> Result<alert::Model, AlertChangeError> {
        let (until, by) = if until > now {
            (Some(until), Some(by.to_owned()))
        } else {
            (None, None)
        };
        self.change_alert(id, tenants, now, |update| {
            update
                .col_expr(alert::Column::SilencedUntil, until.into())
                .col_expr(alert::Column::SilencedBy, by.into())
        })
        .await
    }

    async fn change_alert(
        &self,
        id: &str,
        tenants: Option<&[String]>,
        now: Millis,
        change: impl FnOnce(sea_orm::UpdateMany<alert::Entity>) -> sea_orm::UpdateMany<alert::Entity>,
    ) -> Result<alert::Model, AlertChangeError> {
        let txn = begin_write(self.db()).await?;
        let found = with_tenants(alert::Entity::find(), tenants)
            .filter(alert::Column::Id.eq(id))
            .lock_exclusive()
            .one(&txn)
            .await?
            .ok_or(AlertChangeError::NotFound)?;
        change(alert::Entity::update_many())
            .col_expr(alert::Column::UpdatedAt, now.into())
            .filter(alert::Column::Id.eq(&found.id))
            .exec(&txn)
            .await?;
        let changed = alert::Entity::find_by_id(found.id)
            .one(&txn)
            .await?
            .ok_or(AlertChangeError::NotFound)?;
        txn.commit().await?;
        Ok(changed)
    }
}
