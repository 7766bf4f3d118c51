//! The outbox's named operations on [`Store`]: each one complete unit of work, with this
//! database's claim reads ([`OutboxDriver`]).

use std::collections::HashMap;

use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter};

use super::{ClaimError, ClaimedRun, PullClaim, PullTarget, Recorded, Redispatched};
use crate::ceilings::MaxRunning;
use crate::entities::{dispatch, dispatch_attempt, run, run_history};
use crate::runs::{RunError, begin_write};
use crate::{Millis, Store};

impl Store {
    /// Claims up to `limit` due dispatches of the push target `target` for `owner`, one more
    /// attempt each, until `claim_until` (then another dispatcher may claim them again: a crash
    /// between delivery and record re-delivers under the same id). Dispatches of runs that
    /// ended are cancelled instead; workflows in `capped` get only their free slots, oldest
    /// due first. Two claimers never get one row.
    #[allow(clippy::too_many_arguments)]
    pub async fn claim_push(
        &self,
        target: &str,
        owner: &str,
        limit: u64,
        now: Millis,
        claim_until: Millis,
        capped: &[MaxRunning],
    ) -> Result<Vec<ClaimedRun>, DbErr> {
        self.driver()
            .claim_push(self.db(), target, owner, limit, now, claim_until, capped)
            .await
    }

    /// Claims up to `limit` due runs of `workflows` on the pull targets `targets` for a worker,
    /// each with a new claim token until its target's claim TTL (and, after the first claim, a
    /// new fencing token). A run claimed `max_claims` times without finishing is dead-lettered
    /// instead; workflows in `capped` get only their free slots.
    pub async fn claim_pull(
        &self,
        targets: &[PullTarget],
        workflows: &[String],
        limit: u64,
        now: Millis,
        capped: &[MaxRunning],
    ) -> Result<Vec<PullClaim>, DbErr> {
        super::claim::claim_pull_with(
            self.driver(),
            self.db(),
            targets,
            workflows,
            limit,
            now,
            capped,
        )
        .await
    }

    /// Records a batch of attempts in one transaction: per attempt, whether it still held its
    /// claim (one that lapsed and was claimed again keeps its attempt row, nothing else).
    pub async fn record_attempts(
        &self,
        attempts: &[Recorded],
        now: Millis,
    ) -> Result<Vec<bool>, DbErr> {
        self.driver()
            .record_attempts(self.db(), attempts, now)
            .await
    }

    /// Whether a dispatch of one of `workflows` is due by `now` on one of the targets
    /// `targets`: a read, without a row lock (a waiting pull claim looks before it claims).
    pub async fn any_due(
        &self,
        targets: &[String],
        workflows: &[String],
        now: Millis,
    ) -> Result<bool, DbErr> {
        if targets.is_empty() || workflows.is_empty() {
            return Ok(false);
        }
        let filter = sea_orm::Condition::all()
            .add(dispatch::Column::Target.is_in(targets.iter().map(String::as_str)))
            .add(dispatch::Column::WorkflowId.is_in(workflows.iter().map(String::as_str)));
        Ok(super::due(filter, now, 1).one(self.db()).await?.is_some())
    }

    /// The dispatch that the pull claim `token` was given for, whatever its state now.
    pub async fn dispatch_of_claim(&self, token: &str) -> Result<Option<dispatch::Model>, DbErr> {
        dispatch::Entity::find()
            .filter(dispatch::Column::ClaimToken.eq(token))
            .one(self.db())
            .await
    }

    /// Extends the live pull claim `token` by `ttl_ms` from `now`: the dispatch and its new
    /// expiry.
    pub async fn extend_claim(
        &self,
        token: &str,
        ttl_ms: i64,
        now: Millis,
    ) -> Result<(dispatch::Model, Millis), ClaimError> {
        super::extend_claim(self.db(), token, ttl_ms, now).await
    }

    /// Gives the live pull claim `token` back: pending again after `delay_ms`, the run
    /// `queued`; the dispatch and when it is due.
    pub async fn release_claim(
        &self,
        token: &str,
        delay_ms: i64,
        now: Millis,
    ) -> Result<(dispatch::Model, Millis), ClaimError> {
        super::release_claim(self.db(), token, delay_ms, now).await
    }

    /// Keeps the leases of runs waiting for delivery alive and resets lapsed pull claims:
    /// `(leases extended, claims lapsed)` (see [`super::keep_alive`]).
    pub async fn keep_alive(&self, now: Millis, everything: bool) -> Result<(u64, u64), DbErr> {
        let extended = super::keep_alive::extend_leases(self.db(), now, everything).await?;
        let lapsed = self.reset_lapsed_claims(now).await?;
        Ok((extended, lapsed))
    }

    /// Puts the pull claims that lapsed by `now` back to pending (token cleared, the run
    /// `queued`, a `claim_expired` history entry); how many.
    pub async fn reset_lapsed_claims(&self, now: Millis) -> Result<u64, DbErr> {
        super::keep_alive::reset_lapsed_claims_with(self.driver(), self.db(), now).await
    }

    /// Starts a new attempt series for the dead-lettered run `run_id` under the same dispatch
    /// id, after retaking its entity lease with a larger fencing token; `EntityLocked` while
    /// another active run holds the entity. The `redispatched` history entry names `actor`
    /// (`token:<name>`, who asked), so the run's audit says who did it.
    pub async fn redispatch(
        &self,
        run_id: &str,
        actor: Option<&str>,
        now: Millis,
    ) -> Result<Redispatched, RunError> {
        super::redispatch(self.db(), run_id, actor, now).await
    }

    /// A run's latest dispatch, its attempts and its history (from `routed`), oldest first.
    pub async fn trail(
        &self,
        run: &run::Model,
    ) -> Result<
        (
            Option<dispatch::Model>,
            Vec<dispatch_attempt::Model>,
            Vec<run_history::Model>,
        ),
        DbErr,
    > {
        super::trail(self.db(), run).await
    }

    /// The backlog of each of `targets`, bounded (see [`super::pending_of_targets`]).
    pub async fn pending_of_targets(
        &self,
        targets: &[&str],
    ) -> Result<Vec<super::PendingFigure>, DbErr> {
        super::pending_of_targets(self.db(), targets).await
    }

    /// Pending dispatches per target: `(target, count, oldest created_at)`.
    pub async fn pending_by_target(&self) -> Result<Vec<(String, i64, i64)>, DbErr> {
        super::pending_by_target(self.db()).await
    }

    /// The earliest-due pending dispatch of each workflow of `workflow_ids` that has one (its
    /// dispatch lag), one index seek per workflow (`dispatches_workflow_due`).
    pub async fn pending_heads(
        &self,
        workflow_ids: &[&str],
    ) -> Result<HashMap<String, super::PendingHead>, DbErr> {
        super::lag::pending_heads(self.db(), workflow_ids).await
    }

    /// The slots each workflow of `capped` has free under its `max_running` at `now`.
    pub async fn free_slots(
        &self,
        capped: &[MaxRunning],
        now: Millis,
    ) -> Result<HashMap<String, u64>, DbErr> {
        let txn = begin_write(self.db()).await?;
        let free = crate::ceilings::free_slots(&txn, capped, now).await?;
        txn.commit().await?;
        Ok(free)
    }
}
