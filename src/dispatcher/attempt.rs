//! One delivery attempt of a claimed run over its target's transport, and what it means for
//! the dispatch: delivered, retried at the schedule's next time, or dead-lettered.
//!
//! Invariant: every outcome is an attempt to record; none is dropped.

use switchyard_dispatch::schedule::jitter;
use switchyard_dispatch::{AttemptResult, Outbound};
use switchyard_store::now_millis;
use switchyard_store::outbox::{ClaimedRun, Recorded, Verdict};

use super::millis;
use super::transports::PushTarget;
use crate::telemetry::DispatchSpan;

/// One attempt, and what it means for the dispatch.
pub(super) async fn deliver(
    target: &PushTarget,
    claimed: ClaimedRun,
    body: Vec<u8>,
    trace: DispatchSpan,
    owner: String,
) -> Recorded {
    let started_at = now_millis();
    let attempt = target
        .transport
        .deliver(Outbound {
            id: &claimed.dispatch.id,
            tenant_id: &claimed.run.tenant_id,
            workflow_id: &claimed.run.workflow_id,
            body: &body,
            traceparent: trace.traceparent.as_deref(),
            tracestate: trace.tracestate.as_deref(),
        })
        .await;
    let failed_attempts = u32::try_from(claimed.dispatch.attempts).unwrap_or(u32::MAX);
    let (verdict, result) = match &attempt.result {
        AttemptResult::Delivered => (Verdict::Delivered, "delivered".to_owned()),
        AttemptResult::Retry(_) if failed_attempts >= budgeted_attempts(&claimed.run) => (
            Verdict::DeadLetter {
                reason: "max_attempts",
            },
            "retry".to_owned(),
        ),
        AttemptResult::Retry(hint) => {
            match target.schedule.next_delay(failed_attempts, hint, jitter()) {
                Some(delay) => (
                    Verdict::Retry {
                        next_due: now_millis().saturating_add(millis(delay)),
                    },
                    "retry".to_owned(),
                ),
                None => (
                    Verdict::DeadLetter {
                        reason: "max_attempts",
                    },
                    "retry".to_owned(),
                ),
            }
        }
        AttemptResult::Rejected(rejection) => (
            Verdict::DeadLetter {
                reason: rejection.as_str(),
            },
            rejection.as_str().to_owned(),
        ),
    };
    // A delivery is routine (its run history keeps it); a failure is news, a dead letter a warning.
    macro_rules! log_attempt {
        ($level:ident) => {
            tracing::event!(
                tracing::Level::$level,
                run_id = %claimed.run.id,
                dispatch_id = %claimed.dispatch.id,
                target = %target.name,
                attempt = claimed.dispatch.attempts,
                result = %result,
                status = attempt.status,
                error = attempt.error.as_deref(),
                "dispatch attempt"
            )
        };
    }
    match verdict {
        Verdict::Delivered => log_attempt!(DEBUG),
        Verdict::Retry { .. } => log_attempt!(INFO),
        Verdict::DeadLetter { .. } => log_attempt!(WARN),
    }
    trace.finish(&result, attempt.status);
    Recorded {
        claimed,
        owner,
        verdict,
        result,
        status_code: attempt.status.map(i32::from),
        response: attempt.response_excerpt,
        error: attempt.error,
        started_at,
        duration_ms: millis(attempt.duration),
    }
}

/// The run's `max_attempts` budget (no bound for runs that recorded none).
fn budgeted_attempts(run: &switchyard_store::entities::run::Model) -> u32 {
    crate::bounds::budgets_of(run)
        .get(crate::config::MAX_ATTEMPTS)
        .and_then(serde_json::Value::as_u64)
        .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
}
