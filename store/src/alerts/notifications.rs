//! The alert notification outbox: due rows claimed by one notifier loop at a time (the claim
//! is a token and a `due_at` in the future, so a crashed claimer's rows come back by
//! themselves), then delivered or given a retry time.
//!
//! Invariants: a row is changed only by the holder of its current claim token, so two replicas
//! never both count one delivery. The notifications of one alert to one notifier are delivered
//! in order (episode by episode, `fired` before `resolved`): a row is claimed only once every
//! earlier row of its alert and notifier is no longer pending (delivered or dropped), so a
//! `resolved` never overtakes its `fired` while that one waits out a retry or is in flight.

use sea_orm::sea_query::{Expr, LockBehavior, LockType, SimpleExpr};
use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use crate::entities::{alert, alert_notification};
use crate::runs::begin_write;
use crate::{Millis, Store};

/// `alert_notifications.status` of a row still owed (claimed or not).
pub const PENDING: &str = "pending";
/// `alert_notifications.status` of a row its notifier accepted.
pub const DELIVERED: &str = "delivered";
/// `alert_notifications.status` of a row whose notifier is no longer configured.
pub const DROPPED: &str = "dropped";

/// A notification claimed for one attempt, with its alert as it is now.
#[derive(Debug, Clone)]
pub struct ClaimedNotification {
    pub notification: alert_notification::Model,
    /// The token that attempt's outcome must carry.
    pub claim_token: String,
    pub alert: alert::Model,
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotificationOutcome {
    /// The notifier has it; `external_ref` finds the message again (Slack's `channel ts`).
    Delivered { external_ref: Option<String> },
    /// Try again at `due_at`.
    Retry { due_at: Millis, error: String },
    /// The notifier is gone from the config: nobody is left to tell.
    Dropped { error: String },
}

/// No earlier notification of the row's alert to its notifier is still pending: an earlier
/// episode's, or this episode's `fired` when the row is its `resolved`. The subquery is a plain
/// read even inside `FOR UPDATE SKIP LOCKED`, so an earlier row another replica has claimed
/// (locked, still pending) holds the later one back too.
fn nothing_earlier_pending() -> SimpleExpr {
    Expr::cust(format!(
        "NOT EXISTS (SELECT 1 FROM alert_notifications earlier \
         WHERE earlier.alert_id = alert_notifications.alert_id \
         AND earlier.notifier = alert_notifications.notifier \
         AND earlier.status = '{PENDING}' \
         AND (earlier.episode < alert_notifications.episode \
         OR (earlier.episode = alert_notifications.episode \
         AND earlier.event = '{fired}' AND alert_notifications.event = '{resolved}')))",
        fired = super::FIRED,
        resolved = super::RESOLVED,
    ))
}

impl Store {
    /// Claims up to `limit` due notifications until `now + claim_ms`, oldest due first
    /// (`SKIP LOCKED` where the database has it, so replicas share them); a notification
    /// waits while an earlier one of its alert and notifier is pending.
    pub async fn claim_alert_notifications(
        &self,
        now: Millis,
        claim_ms: i64,
        limit: u64,
    ) -> Result<Vec<ClaimedNotification>, DbErr> {
        // A read without a transaction first: most ticks find nothing due.
        let any_due = alert_notification::Entity::find()
            .select_only()
            .column(alert_notification::Column::Id)
            .filter(alert_notification::Column::Status.eq(PENDING))
            .filter(alert_notification::Column::DueAt.lte(now))
            .filter(nothing_earlier_pending())
            .limit(1)
            .into_tuple::<String>()
            .one(self.db())
            .await?;
        if any_due.is_none() {
            return Ok(Vec::new());
        }
        let txn = begin_write(self.db()).await?;
        let due = alert_notification::Entity::find()
            .filter(alert_notification::Column::Status.eq(PENDING))
            .filter(alert_notification::Column::DueAt.lte(now))
            .filter(nothing_earlier_pending())
            .order_by_asc(alert_notification::Column::DueAt)
            .limit(limit)
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked)
            .all(&txn)
            .await?;
        let mut claimed = Vec::with_capacity(due.len());
        for notification in due {
            let token = Uuid::new_v4().simple().to_string();
            alert_notification::Entity::update_many()
                .col_expr(
                    alert_notification::Column::ClaimToken,
                    Some(token.clone()).into(),
                )
                .col_expr(
                    alert_notification::Column::DueAt,
                    now.saturating_add(claim_ms).into(),
                )
                .col_expr(
                    alert_notification::Column::Attempts,
                    (notification.attempts + 1).into(),
                )
                .filter(alert_notification::Column::Id.eq(&notification.id))
                .exec(&txn)
                .await?;
            let Some(alert) = alert::Entity::find_by_id(&notification.alert_id)
                .one(&txn)
                .await?
            else {
                continue;
            };
            claimed.push(ClaimedNotification {
                notification: alert_notification::Model {
                    attempts: notification.attempts + 1,
                    ..notification
                },
                claim_token: token,
                alert,
            });
        }
        txn.commit().await?;
        Ok(claimed)
    }

    /// Records how a claimed notification's attempt ended; whether the claim was still this
    /// one's (a lapsed claim changes nothing).
    pub async fn finish_alert_notification(
        &self,
        id: &str,
        claim_token: &str,
        outcome: &NotificationOutcome,
        now: Millis,
    ) -> Result<bool, DbErr> {
        let update = alert_notification::Entity::update_many()
            .col_expr(
                alert_notification::Column::ClaimToken,
                Option::<String>::None.into(),
            )
            .filter(alert_notification::Column::Id.eq(id))
            .filter(alert_notification::Column::ClaimToken.eq(claim_token));
        let update = match outcome {
            NotificationOutcome::Delivered { external_ref } => update
                .col_expr(alert_notification::Column::Status, DELIVERED.into())
                .col_expr(alert_notification::Column::DeliveredAt, Some(now).into())
                .col_expr(
                    alert_notification::Column::ExternalRef,
                    external_ref.clone().into(),
                ),
            NotificationOutcome::Retry { due_at, error } => update
                .col_expr(alert_notification::Column::DueAt, (*due_at).into())
                .col_expr(
                    alert_notification::Column::LastError,
                    Some(error.clone()).into(),
                ),
            NotificationOutcome::Dropped { error } => update
                .col_expr(alert_notification::Column::Status, DROPPED.into())
                .col_expr(
                    alert_notification::Column::LastError,
                    Some(error.clone()).into(),
                ),
        };
        Ok(update.exec(self.db()).await?.rows_affected == 1)
    }

    /// What the delivered `fired` notification of an episode gave back (Slack's message), so
    /// its resolve can update that message.
    pub async fn fired_notification_ref(
        &self,
        alert_id: &str,
        episode: i32,
        notifier: &str,
    ) -> Result<Option<String>, DbErr> {
        let found: Option<Option<String>> = alert_notification::Entity::find()
            .select_only()
            .column(alert_notification::Column::ExternalRef)
            .filter(alert_notification::Column::AlertId.eq(alert_id))
            .filter(alert_notification::Column::Episode.eq(episode))
            .filter(alert_notification::Column::Event.eq(super::FIRED))
            .filter(alert_notification::Column::Notifier.eq(notifier))
            .into_tuple()
            .one(self.db())
            .await?;
        Ok(found.flatten())
    }

    /// Every notification of one alert, oldest first (for its page and for tests).
    pub async fn alert_notifications(
        &self,
        alert_id: &str,
    ) -> Result<Vec<alert_notification::Model>, DbErr> {
        alert_notification::Entity::find()
            .filter(alert_notification::Column::AlertId.eq(alert_id))
            .order_by_asc(alert_notification::Column::Id)
            .all(self.db())
            .await
    }
}
