//! What the pool writers (PostgreSQL, MySQL) share: which errors a retry can fix, which mean
//! the delivery can never be stored, and the loop that retries a batch that lost a race.

use std::sync::Arc;

use sea_orm::{DbErr, RuntimeErr, SqlErr};

use super::Failure;

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

/// An error about the delivery's values (SQLSTATE class 22, data exceptions: a value too long,
/// a byte sequence the column's encoding cannot take), which a retry would meet again.
fn is_unstorable(error: &DbErr) -> bool {
    let (DbErr::Query(RuntimeErr::SqlxError(error)) | DbErr::Exec(RuntimeErr::SqlxError(error))) =
        error
    else {
        return false;
    };
    let Some(database) = error.as_database_error() else {
        return false;
    };
    let code = database.code().unwrap_or_default();
    code.starts_with("22")
        || (code == "HY000" && database.message().contains("Incorrect string value"))
}

/// A failed batch as the writer reports it.
pub(crate) fn failure(error: DbErr) -> Failure {
    if matches!(error, DbErr::Conn(_) | DbErr::ConnectionAcquire(_)) {
        Failure::Connection(error.to_string())
    } else if is_unstorable(&error) {
        Failure::Unstorable(error.to_string())
    } else {
        Failure::Other(error.to_string())
    }
}

/// sqlx's error as sea-orm's, so the retry rules apply unchanged: losing the connection is a
/// connection error, anything else a failed query.
pub(crate) fn db_err(error: sea_orm::sqlx::Error) -> DbErr {
    use sea_orm::sqlx::Error;
    let lost_connection = matches!(
        error,
        Error::Io(_)
            | Error::Tls(_)
            | Error::Protocol(_)
            | Error::PoolTimedOut
            | Error::PoolClosed
            | Error::WorkerCrashed
    );
    let error = RuntimeErr::SqlxError(Arc::new(error));
    if lost_connection {
        DbErr::Conn(error)
    } else {
        DbErr::Query(error)
    }
}
