//! Durable waits: a dispatched run pauses for input (an approval, an answer) and resumes only on
//! the delivery meant for it.
//!
//! - [`open`]: `POST /v1/runs/{id}/waits` checks the request and has the store write the wait
//!   row, the run's `needs_input` status, its history entry and the expiry timer (the wait
//!   row's `deadline`) in one transaction; it hands out a resume token whose SHA-256 is all
//!   that is stored.
//! - [`resume`]: every resume attempt (API, canonical event, CloudEvent, Slack button) is one
//!   authenticated delivery judged here and recorded by the store in one transaction that also
//!   writes its ledger row, with one named outcome: `no_wait_match`, `duplicate`, `wait_expired`, `reapproval_required`,
//!   `unauthorized_source` or `resumed`.
//! - [`timers`]: the background task that has the store fire due waits (`on_timeout`: fail or
//!   resume).
//!
//! *Invariant: a wait ends once* (`switchyard_store::waits`): every change to a wait is a
//! conditional update from `open` inside the transaction that writes its effects, so racing
//! resumes, timers on several replicas and a resume racing the opening resolve in the database.

pub mod open;
pub mod resume;
pub mod timers;

pub use switchyard_store::waits::resume_dispatch_id;
use uuid::Uuid;

/// A new resume token: opaque, 244 random bits (two v4 UUIDs), prefixed so it is recognisable
/// in logs and secret scanners.
pub fn new_token() -> String {
    format!(
        "swyw_{}{}",
        Uuid::new_v4().simple(),
        Uuid::new_v4().simple()
    )
}

/// What is stored of a token: its SHA-256, hex.
pub fn token_hash(token: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_only_their_hash_is_kept() {
        let (a, b) = (new_token(), new_token());
        assert_ne!(a, b);
        assert!(a.starts_with("swyw_") && a.len() == 5 + 64, "{a}");
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), token_hash(&b));
        assert!(!token_hash(&a).contains(&a[5..]));
    }
}
