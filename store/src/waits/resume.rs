//! Applying a resume: one delivery, one ledger row, decided in a transaction of its own that
//! writes the ledger row together with the resume's effects. The daemon judges (which outcome,
//! what the row says); this module reads what the judgement needs under row locks, asks for
//! it, and writes it, so the judgement is written once and the transaction stays one.

use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};

use crate::entities::wait::{self, WaitStatus};
use crate::entities::{intake, raw_delivery, run};
use crate::lost_race::{is_lost_race, retried};
use crate::runs::begin_write;
use crate::{Millis, Store};

/// How often a transaction that lost a race (a unique key, a deadlock) is decided again.
const RETRIES: usize = 5;

/// Which delivery a resume is, and which wait its token names.
#[derive(Debug, Clone, Copy)]
pub struct ResumeKey<'a> {
    /// The delivery's identity: a copy of a recorded one is answered from the first.
    pub source: &'a str,
    pub scope: &'a str,
    pub delivery_id: &'a str,
    /// SHA-256 (hex) of the resume token, and the tenant the resume is for.
    pub token_hash: &'a str,
    pub tenant_id: &'a str,
}

/// What the daemon decided about a resume: written in the transaction that read the wait.
#[derive(Debug, Clone)]
pub struct ResumeWrite {
    /// `Some` to resume: the wait ends `resumed` and its run gets a resume dispatch.
    pub resume: Option<Resume>,
    /// The delivery's ledger row.
    pub row: intake::Model,
    /// Its original bytes, stored under the row's id.
    pub raw: Option<raw_delivery::Model>,
}

/// How a wait is resumed.
#[derive(Debug, Clone)]
pub struct Resume {
    pub decision: String,
    pub actor: Option<String>,
    /// The target the resume message goes to (the run's workflow's).
    pub target: String,
    /// The run's history entry.
    pub history_detail: String,
}

/// How a resume delivery was recorded.
#[derive(Debug, Clone)]
pub enum Resolution<T> {
    /// A copy of a recorded delivery: the first copy's ledger row; nothing was written.
    Duplicate(intake::Model),
    /// Judged and committed: the ledger row written, whether a run was resumed, and what the
    /// judgement returned alongside.
    Decided {
        row: intake::Model,
        resumed: bool,
        with: T,
    },
}

impl Store {
    /// Records one resume delivery in one transaction: a copy of a recorded delivery is
    /// answered from the first ([`Resolution::Duplicate`]); otherwise the wait the token names
    /// in the tenant and its run are read under row locks and `judge` decides what to write
    /// (it may be called again when a racing transaction won: it must only decide). A resume
    /// ends the wait with a conditional update from `open`, so two racing resumes resume once.
    pub async fn resume_wait<T, F>(
        &self,
        key: &ResumeKey<'_>,
        now: Millis,
        judge: F,
    ) -> Result<Resolution<T>, DbErr>
    where
        F: Fn(Option<&wait::Model>, Option<&run::Model>) -> (ResumeWrite, T) + Sync,
        T: Send,
    {
        retried(RETRIES, is_lost_race, || self.resume_once(key, now, &judge)).await
    }

    async fn resume_once<T, F>(
        &self,
        key: &ResumeKey<'_>,
        now: Millis,
        judge: &F,
    ) -> Result<Resolution<T>, DbErr>
    where
        F: Fn(Option<&wait::Model>, Option<&run::Model>) -> (ResumeWrite, T) + Sync,
        T: Send,
    {
        let txn = begin_write(self.db()).await?;
        if let Some(first) = intake::Entity::find()
            .filter(intake::Column::DeliveryId.eq(key.delivery_id))
            .filter(intake::Column::Source.eq(key.source))
            .filter(intake::Column::Scope.eq(key.scope))
            .one(&txn)
            .await?
        {
            txn.rollback().await?;
            return Ok(Resolution::Duplicate(first));
        }
        let found = wait::Entity::find()
            .filter(wait::Column::TokenHash.eq(key.token_hash))
            .filter(wait::Column::TenantId.eq(key.tenant_id))
            .lock_exclusive()
            .one(&txn)
            .await?;
        let run = match &found {
            Some(wait) => {
                run::Entity::find_by_id(wait.run_id.as_str())
                    .lock_exclusive()
                    .one(&txn)
                    .await?
            }
            None => None,
        };
        let (write, with) = judge(found.as_ref(), run.as_ref());
        let mut resumed = false;
        if let (Some(resume), Some(wait), Some(run)) = (write.resume, &found, &run) {
            let dispatch_id = super::resume_dispatch_id(&run.id, &wait.wait_id);
            let ended = wait::Entity::update_many()
                .col_expr(wait::Column::Status, WaitStatus::Resumed.as_str().into())
                .col_expr(wait::Column::Decision, resume.decision.into())
                .col_expr(wait::Column::Actor, resume.actor.into())
                .col_expr(wait::Column::ResumedBy, write.row.id.clone().into())
                .col_expr(wait::Column::DispatchId, dispatch_id.into())
                .col_expr(wait::Column::EndedAt, now.into())
                .filter(wait::Column::Id.eq(wait.id.as_str()))
                .filter(wait::Column::Status.eq(WaitStatus::Open))
                .exec(&txn)
                .await?;
            if ended.rows_affected != 1 {
                // Another delivery or the timer ended it between our read and our write (only
                // possible without row locks): decide again and see how.
                txn.rollback().await?;
                return Err(DbErr::Custom("deadlock: the wait ended meanwhile".into()));
            }
            super::resume_run(&txn, run, wait, &resume.target, resume.history_detail, now).await?;
            resumed = true;
        }
        crate::ledger::insert_with_raw(
            &txn,
            vec![write.row.clone()],
            write.raw.into_iter().collect(),
        )
        .await?;
        txn.commit().await?;
        Ok(Resolution::Decided {
            row: write.row,
            resumed,
            with,
        })
    }
}
