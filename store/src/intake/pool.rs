//! What the pool writers (PostgreSQL, MySQL) share: how an error fails a batch (a value the
//! database cannot store fails it for good) and sqlx's errors as sea-orm's. Which errors a retry
//! can fix is [`crate::lost_race`]'s to say.

use std::sync::Arc;

use sea_orm::{DbErr, RuntimeErr};

use super::Failure;

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
