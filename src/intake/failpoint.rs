//! A test hook for the writers' panic supervision: with
//! `SWITCHYARD_FAILPOINT=writer_panic:<delivery_id>` in its environment, a writer panics on any
//! batch holding that delivery, so an end-to-end test can prove that a panicking writer answers
//! its senders 503 and goes on. Read once; unset (always, outside tests) it costs one branch per
//! batch.

use std::sync::OnceLock;

use super::Delivery;

fn target() -> Option<&'static str> {
    static TARGET: OnceLock<Option<String>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            std::env::var("SWITCHYARD_FAILPOINT")
                .ok()
                .and_then(|v| v.strip_prefix("writer_panic:").map(str::to_owned))
        })
        .as_deref()
}

/// Panics when the failpoint names a delivery of this batch.
pub(super) fn check(deliveries: &[&Delivery]) {
    if let Some(target) = target()
        && deliveries.iter().any(|d| d.delivery_id == target)
    {
        panic!("failpoint writer_panic hit by delivery {target}");
    }
}
