//! Test hooks for the writers' failure handling, set by `SWITCHYARD_FAILPOINT` in the daemon's
//! environment and read once; unset (always, outside tests) each costs one branch per batch.
//! - `writer_panic:<delivery_id>`: a writer panics on any batch holding that delivery, so an
//!   end-to-end test can prove that a panicking writer answers its senders 503 and goes on.
//! - `writer_error_after_write:<delivery_id>`: the PostgreSQL writer fails any batch holding
//!   that delivery after its writes, before its commit, so a test can prove that nothing of a
//!   failed batch is ever committed by the next one on the kept connection.

use std::sync::OnceLock;

use super::Delivery;

/// The failpoint's kind and the delivery id it names.
fn failpoint() -> Option<(&'static str, &'static str)> {
    static FAILPOINT: OnceLock<Option<(String, String)>> = OnceLock::new();
    FAILPOINT
        .get_or_init(|| {
            let value = std::env::var("SWITCHYARD_FAILPOINT").ok()?;
            let (kind, id) = value.split_once(':')?;
            Some((kind.to_owned(), id.to_owned()))
        })
        .as_ref()
        .map(|(kind, id)| (kind.as_str(), id.as_str()))
}

/// The delivery id a failpoint of `kind` names, when it names one of this batch.
fn hit(kind: &str, deliveries: &[&Delivery]) -> Option<&'static str> {
    failpoint()
        .filter(|(set, id)| *set == kind && deliveries.iter().any(|d| d.delivery_id == *id))
        .map(|(_, id)| id)
}

/// Panics when `writer_panic` names a delivery of this batch.
pub(super) fn check(deliveries: &[&Delivery]) {
    if let Some(target) = hit("writer_panic", deliveries) {
        panic!("failpoint writer_panic hit by delivery {target}");
    }
}

/// An error when `writer_error_after_write` names a delivery of this batch.
pub(super) fn error_after_write(deliveries: &[&Delivery]) -> Result<(), String> {
    match hit("writer_error_after_write", deliveries) {
        Some(target) => Err(format!(
            "failpoint writer_error_after_write hit by delivery {target}"
        )),
        None => Ok(()),
    }
}
