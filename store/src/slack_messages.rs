//! The Slack approval-message outbox (`slack_messages`, m0016): a row is written with its wait
//! (`Store::open_wait` with `NewWait::notify`), claimed by one replica at a time, posted, then
//! updated once its wait ends. Every change but the claim is conditional on the caller's
//! claim, so two replicas never post one message twice while a claim holds.
//!
//! Invariant: a message is posted only while its wait is open, and its `button_value` (the
//! resume token) is cleared when it is posted.

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

use crate::entities::slack_message::{self, status};
use crate::entities::wait::{self, WaitStatus};
use crate::{DbErr, Millis, Store};

/// A message to post with a wait being opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSlackMessage {
    pub source: String,
    pub channel: String,
    pub body: String,
    pub button_value: String,
}

/// A claimed message and its wait as they are now.
#[derive(Debug, Clone)]
pub struct ClaimedMessage {
    pub message: slack_message::Model,
    pub wait: Option<wait::Model>,
}

/// The row written with a wait (inside `open_wait`'s transaction).
pub(crate) fn row_for(
    new: &NewSlackMessage,
    wait: &wait::Model,
    now: Millis,
) -> slack_message::ActiveModel {
    slack_message::Model {
        id: uuid::Uuid::now_v7().to_string(),
        tenant_id: wait.tenant_id.clone(),
        run_id: wait.run_id.clone(),
        wait_row_id: wait.id.clone(),
        source: new.source.clone(),
        channel: new.channel.clone(),
        body: new.body.clone(),
        button_value: Some(new.button_value.clone()),
        status: status::PENDING.into(),
        ts: None,
        attempts: 0,
        due_at: now,
        claimed_until: None,
        last_error: None,
        created_at: now,
        updated_at: now,
    }
    .into()
}

impl Store {
    /// Claims up to `limit` messages with work to do for `lease_ms`: `pending` ones due, and
    /// `posted` ones due whose wait is no longer open. Each claim is a conditional update, so
    /// two replicas never hold one message at once.
    pub async fn claim_slack_messages(
        &self,
        now: Millis,
        lease_ms: i64,
        limit: u64,
    ) -> Result<Vec<ClaimedMessage>, DbErr> {
        let unclaimed = Condition::any()
            .add(slack_message::Column::ClaimedUntil.is_null())
            .add(slack_message::Column::ClaimedUntil.lt(now));
        // Two reads, so posted messages whose waits are still open (any number of them) never
        // hold back new ones: pending messages due, and posted ones whose wait ended.
        let mut candidates = slack_message::Entity::find()
            .filter(slack_message::Column::Status.eq(status::PENDING))
            .filter(slack_message::Column::DueAt.lte(now))
            .filter(unclaimed.clone())
            .order_by_asc(slack_message::Column::DueAt)
            .limit(limit)
            .all(self.db())
            .await?;
        let ended_waits = sea_orm::sea_query::Query::select()
            .column(wait::Column::Id)
            .from(wait::Entity)
            .and_where(wait::Column::Status.ne(WaitStatus::Open.as_str()))
            .to_owned();
        candidates.extend(
            slack_message::Entity::find()
                .filter(slack_message::Column::Status.eq(status::POSTED))
                .filter(slack_message::Column::DueAt.lte(now))
                .filter(unclaimed.clone())
                .filter(slack_message::Column::WaitRowId.in_subquery(ended_waits))
                .order_by_asc(slack_message::Column::DueAt)
                .limit(limit)
                .all(self.db())
                .await?,
        );
        let wait_ids: Vec<String> = candidates.iter().map(|m| m.wait_row_id.clone()).collect();
        let waits = if wait_ids.is_empty() {
            Vec::new()
        } else {
            wait::Entity::find()
                .filter(wait::Column::Id.is_in(wait_ids))
                .all(self.db())
                .await?
        };
        let mut claimed = Vec::new();
        for message in candidates {
            if claimed.len() as u64 >= limit {
                break;
            }
            let wait = waits.iter().find(|w| w.id == message.wait_row_id).cloned();
            let open = wait.as_ref().is_some_and(|w| w.status == WaitStatus::Open);
            if message.status == status::POSTED && open {
                continue;
            }
            let taken = slack_message::Entity::update_many()
                .col_expr(
                    slack_message::Column::ClaimedUntil,
                    Expr::value(now + lease_ms),
                )
                .filter(slack_message::Column::Id.eq(message.id.as_str()))
                .filter(slack_message::Column::Status.eq(message.status.as_str()))
                .filter(unclaimed.clone())
                .exec(self.db())
                .await?;
            if taken.rows_affected == 1 {
                claimed.push(ClaimedMessage {
                    message: slack_message::Model {
                        claimed_until: Some(now + lease_ms),
                        ..message
                    },
                    wait,
                });
            }
        }
        Ok(claimed)
    }

    /// A claimed `pending` message was posted as `ts`: its token is dropped.
    pub async fn slack_message_posted(
        &self,
        claimed: &slack_message::Model,
        ts: &str,
        now: Millis,
    ) -> Result<bool, DbErr> {
        self.finish_claim(
            claimed,
            &[
                (slack_message::Column::Status, Expr::value(status::POSTED)),
                (slack_message::Column::Ts, Expr::value(ts)),
                (
                    slack_message::Column::ButtonValue,
                    Expr::value(Option::<String>::None),
                ),
                (slack_message::Column::Attempts, Expr::value(0)),
                (slack_message::Column::DueAt, Expr::value(now)),
                (
                    slack_message::Column::LastError,
                    Expr::value(Option::<String>::None),
                ),
            ],
            now,
        )
        .await
    }

    /// A claimed message needs nothing more: updated after its wait ended, or its wait ended
    /// before it was posted (`note` says so). Its token is dropped.
    pub async fn slack_message_done(
        &self,
        claimed: &slack_message::Model,
        note: Option<&str>,
        now: Millis,
    ) -> Result<bool, DbErr> {
        self.finish_claim(
            claimed,
            &[
                (slack_message::Column::Status, Expr::value(status::DONE)),
                (
                    slack_message::Column::ButtonValue,
                    Expr::value(Option::<String>::None),
                ),
                (
                    slack_message::Column::LastError,
                    Expr::value(note.map(str::to_owned)),
                ),
            ],
            now,
        )
        .await
    }

    /// A claimed message's attempt failed with `error`: tried again at `retry_at`.
    pub async fn slack_message_failed(
        &self,
        claimed: &slack_message::Model,
        error: &str,
        retry_at: Millis,
        now: Millis,
    ) -> Result<bool, DbErr> {
        self.finish_claim(
            claimed,
            &[
                (
                    slack_message::Column::Attempts,
                    Expr::value(claimed.attempts.saturating_add(1)),
                ),
                (slack_message::Column::DueAt, Expr::value(retry_at)),
                (slack_message::Column::LastError, Expr::value(error)),
            ],
            now,
        )
        .await
    }

    /// The approval messages of a run's waits, oldest first.
    pub async fn slack_messages_of_run(
        &self,
        run_id: &str,
    ) -> Result<Vec<slack_message::Model>, DbErr> {
        slack_message::Entity::find()
            .filter(slack_message::Column::RunId.eq(run_id))
            .order_by_asc(slack_message::Column::Id)
            .all(self.db())
            .await
    }

    /// Applies `changes` and releases the claim, if the caller still holds it.
    async fn finish_claim(
        &self,
        claimed: &slack_message::Model,
        changes: &[(slack_message::Column, sea_orm::sea_query::SimpleExpr)],
        now: Millis,
    ) -> Result<bool, DbErr> {
        let mut update = slack_message::Entity::update_many()
            .col_expr(
                slack_message::Column::ClaimedUntil,
                Expr::value(Option::<i64>::None),
            )
            .col_expr(slack_message::Column::UpdatedAt, Expr::value(now));
        for (column, value) in changes {
            update = update.col_expr(*column, value.clone());
        }
        let done = update
            .filter(slack_message::Column::Id.eq(claimed.id.as_str()))
            .filter(slack_message::Column::Status.eq(claimed.status.as_str()))
            .filter(slack_message::Column::ClaimedUntil.eq(claimed.claimed_until))
            .exec(self.db())
            .await?;
        Ok(done.rows_affected == 1)
    }
}
