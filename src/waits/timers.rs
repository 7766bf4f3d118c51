//! Wait timeouts: a background task in every daemon has the store fire the waits whose deadline
//! has passed (`Store::fire_wait`). The wait row is the timer; firing is a conditional update
//! from `open` in the transaction that applies `on_timeout`, so a wait fires once across
//! replicas, and a deadline that passed while no daemon ran fires at the first pass after start.

use std::time::Duration;

use switchyard_store::entities::run::RunStatus;
use switchyard_store::waits::WaitEnd;
use switchyard_store::{DbErr, Millis, Store, now_millis};
use tokio::sync::watch;

use crate::background::Background;
use crate::dispatcher::Wake;
use crate::live::LiveConfig;

/// How often the timer task looks for due waits.
const PASS_EVERY: Duration = Duration::from_millis(500);
/// Most waits one pass fires.
const BATCH: u64 = 100;

/// The timer task of this daemon.
#[derive(Debug)]
pub struct WaitTimers(Background);

impl WaitTimers {
    pub fn start(store: Store, live: LiveConfig, wake: std::sync::Arc<Wake>) -> Self {
        Self(Background::spawn(move |stopped| {
            run(store, live, wake, stopped)
        }))
    }

    pub async fn shutdown(&self) {
        if !self.0.stop(Duration::from_secs(5)).await {
            tracing::warn!("the wait timer task did not stop within 5 s");
        }
    }
}

async fn run(
    store: Store,
    live: LiveConfig,
    wake: std::sync::Arc<Wake>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        match fire_due(&store, &live, now_millis()).await {
            Ok(fired) if fired.resumed > 0 => wake.runs_created(),
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, "wait timer pass failed; the next pass retries it")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(PASS_EVERY) => {}
            _ = stopped.changed() => return,
        }
    }
}

/// What one pass fired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fired {
    /// Runs resumed with decision `timeout`.
    pub resumed: usize,
    /// Runs failed (`on_timeout = "fail"`).
    pub failed: usize,
    /// Waits whose run had already ended.
    pub cancelled: usize,
}

/// Fires every wait due at `now` (up to one batch).
pub async fn fire_due(store: &Store, live: &LiveConfig, now: Millis) -> Result<Fired, DbErr> {
    let mut fired = Fired::default();
    for wait in store.due_waits(now, BATCH).await? {
        // The wait's workflow is its run's: a timeout resume goes to that workflow's target in
        // the revision in force.
        let target = live.current().target_of(&wait.workflow_id).to_owned();
        match store.fire_wait(&wait, &target, now).await? {
            None => {}
            Some(WaitEnd::Cancelled) => fired.cancelled += 1,
            Some(WaitEnd::Resumed) => {
                fired.resumed += 1;
                tracing::info!(run_id = %wait.run_id, wait_id = %wait.wait_id, "wait timed out; run resumed with decision timeout");
            }
            Some(WaitEnd::Failed) => {
                fired.failed += 1;
                crate::metrics::metrics()
                    .workflow_run_finished(&wait.workflow_id, RunStatus::Failed.as_str());
                tracing::info!(run_id = %wait.run_id, wait_id = %wait.wait_id, "wait timed out; run failed and released its entity");
            }
        }
    }
    Ok(fired)
}
