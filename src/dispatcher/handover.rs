//! Sends the dispatches the intake writers pre-claimed the moment they are handed over, on a
//! task of its own. In the dispatcher's loop they waited behind its claim pass or backlog
//! read, each a database round trip: while the database was slow (PostgreSQL checkpointing),
//! a run that needed no claim transaction waited for one anyway.
//!
//! Invariant: a pre-claim is sent through the target the dispatcher published before the
//! writers could claim for it (its slots travel with the claim). One whose target is gone is
//! dropped with its slots; its claim lapses and the run is claimed again, same dispatch id.

use std::sync::Arc;

use switchyard_store::now_millis;
use tokio::sync::watch;

use super::transports::PushTarget;
use super::{Sender, message};
use crate::telemetry::DispatchSpan;

/// Sends every hand-over until the dispatcher stops.
pub(super) async fn run(
    sender: Sender,
    targets: watch::Receiver<Arc<[PushTarget]>>,
    mut stopped: watch::Receiver<bool>,
) {
    while !*stopped.borrow() {
        send_handed_over(&sender, &targets.borrow().clone());
        tokio::select! {
            _ = sender.wake.preclaims.ready.notified() => {}
            _ = stopped.changed() => {}
        }
    }
}

fn send_handed_over(sender: &Sender, targets: &[PushTarget]) {
    let pre_claimed = sender.wake.preclaims.take();
    if pre_claimed.is_empty() {
        return;
    }
    let current = sender.live.current();
    for pre in pre_claimed {
        let Some(target) = targets
            .iter()
            .find(|t| t.name == pre.claimed.dispatch.target)
        else {
            continue;
        };
        let trace = DispatchSpan::start(
            &pre.claimed.run,
            &target.name,
            pre.claimed.dispatch.attempts,
        );
        let message = message::run_start(
            &pre.claimed,
            pre.routed,
            None,
            now_millis(),
            &trace,
            &current.authority,
        )
        .to_json();
        sender.send(target, "intake", pre.claimed, message, trace, pre.permits);
    }
}
