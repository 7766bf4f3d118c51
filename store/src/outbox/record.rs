//! Recording attempts: what each came to (delivered, a retry, a dead letter), applied only to a
//! dispatch still held by the claim that made it, and an attempt row for every one.
//!
//! Invariant: a batch is one transaction; an attempt whose claim lapsed and was taken again
//! keeps its attempt row and changes nothing else.

use sea_orm::{DatabaseConnection, DbErr};

use super::{ClaimedRun, apply, machine};
use crate::Millis;
use crate::runs::begin_write;

/// What one attempt came to, as the dispatcher decided from the transport's answer and the
/// retry schedule.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Delivered,
    /// Try again at `next_due`.
    Retry {
        next_due: Millis,
    },
    /// Dead-letter with this reason (`max_attempts`, `rejected_4xx`, `target_gone`).
    DeadLetter {
        reason: &'static str,
    },
}

/// One attempt to record.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub claimed: ClaimedRun,
    /// The replica that claimed it.
    pub owner: String,
    pub verdict: Verdict,
    /// `delivered`, `retry`, `rejected_4xx`, `target_gone`.
    pub result: String,
    pub status_code: Option<i32>,
    pub response: Option<String>,
    pub error: Option<String>,
    pub started_at: Millis,
    pub duration_ms: i64,
}

/// How an attempt reads in its run's history.
pub fn attempt_words(attempt: &Recorded) -> String {
    let mut words = format!(
        "attempt {} of series {}: {}",
        attempt.claimed.dispatch.attempts, attempt.claimed.dispatch.series, attempt.result
    );
    if let Some(code) = attempt.status_code {
        words.push_str(&format!(" (HTTP {code})"));
    }
    if let Some(error) = &attempt.error {
        words.push_str(&format!(": {error}"));
    }
    words
}

/// Records a batch of attempts in one transaction. Returns how many still held their claim
/// (the others were re-claimed after their claim lapsed; their attempt row is kept, their
/// verdict not applied).
pub async fn record(
    db: &DatabaseConnection,
    attempts: Vec<Recorded>,
    now: Millis,
) -> Result<usize, DbErr> {
    let held = super::pooled(db)
        .record_attempts(db, &attempts, now)
        .await?;
    Ok(held.into_iter().filter(|held| *held).count())
}

/// [`record`] in a transaction of the pool: per attempt, whether it still held its claim.
pub(crate) async fn record_with(
    db: &DatabaseConnection,
    attempts: &[Recorded],
    now: Millis,
) -> Result<Vec<bool>, DbErr> {
    let changes: Vec<machine::Change> = attempts
        .iter()
        .map(|attempt| machine::recorded(attempt, now))
        .collect();
    let txn = begin_write(db).await?;
    let applied = apply::apply(&txn, &changes).await?;
    txn.commit().await?;
    Ok(applied.into_iter().map(|a| a.held).collect())
}
