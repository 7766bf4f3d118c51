//! Which errors mean a transaction lost a race to another one (a unique key taken meanwhile, a
//! deadlock, a serialisation failure, a busy database), so doing it again sees the winner's
//! committed result; and the loop that does it again. Every store operation that retries asks
//! this one test.
//!
//! Invariant: only an error of this kind is retried, and only a whole transaction: each try
//! begins its own, the refused one having been rolled back.

use std::future::Future;

use sea_orm::{DbErr, SqlErr};

/// A conflict another transaction caused: trying again will see its committed result.
pub(crate) fn is_lost_race(error: &DbErr) -> bool {
    if matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_))) {
        return true;
    }
    let text = error.to_string().to_ascii_lowercase();
    [
        "deadlock",
        "40001",
        "40p01",
        "serialize",
        "database is locked",
        "lock wait timeout",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// Runs `attempt` (one whole transaction) up to `tries` times while it fails with an error
/// `lost` calls a lost race; any other result, or the last try's error, is returned.
pub(crate) async fn retried<T, E, F, Fut>(
    tries: usize,
    lost: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut tried = 1;
    loop {
        match attempt().await {
            Err(error) if tried < tries && lost(&error) => tried += 1,
            other => return other,
        }
    }
}
