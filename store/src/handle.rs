//! [`Store`]: the handle the daemon holds. Its methods, grouped by table in this crate's
//! modules, are the named operations; where a database does an operation its own way the
//! method hands it to that database's [`Driver`](crate::driver::Driver).
//!
//! Invariant: a `Store` is cheap to clone and every operation is one complete unit of work (its
//! own transaction where it writes): callers never hold a transaction open across operations.

use std::sync::Arc;

use sea_orm::{DatabaseConnection, DbBackend, DbErr};

use crate::connect::Options;
use crate::driver::{self, Driver};

/// Which database a store runs on. Only this crate looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

/// The database, as named operations.
#[derive(Debug, Clone)]
pub struct Store {
    db: DatabaseConnection,
    backend: Backend,
    #[allow(dead_code)] // Transitional: read once operations move behind the drivers.
    driver: Arc<dyn Driver>,
}

impl Store {
    /// Opens the pool at `url` (SQLite in WAL mode with the configured durability; PostgreSQL
    /// and MariaDB with statement and lock timeouts). Does not migrate.
    pub async fn open(url: &str, options: &Options) -> Result<Self, DbErr> {
        let db = crate::connect::connect(url, options).await?;
        Ok(Self::over(db, url, options))
    }

    /// A store over an open pool (`url` and `options` as it was opened with).
    fn over(db: DatabaseConnection, url: &str, options: &Options) -> Self {
        let backend = match db.get_database_backend() {
            DbBackend::Sqlite => Backend::Sqlite,
            DbBackend::Postgres => Backend::Postgres,
            _ => Backend::MySql,
        };
        let driver = driver::for_backend(backend, url, options);
        Self {
            db,
            backend,
            driver,
        }
    }

    /// Applies every pending migration.
    pub async fn migrate(&self) -> Result<(), DbErr> {
        crate::connect::migrate(&self.db).await
    }

    /// Whether the database answers: what `/readyz` reports.
    pub async fn ping(&self) -> Result<(), DbErr> {
        crate::connect::ping(&self.db).await
    }

    /// Whether this is the embedded SQLite file (one process writes; `serve` says so in its
    /// startup line, and replicas need a server database).
    pub fn is_embedded(&self) -> bool {
        self.backend == Backend::Sqlite
    }

    /// The pool itself, for this crate's conformance suite (which sets up rows and reads them
    /// back directly). The daemon never calls it: `.ci/run` fails if code outside `store/`
    /// does; everything else goes through a named operation.
    #[doc(hidden)]
    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    pub(crate) fn db(&self) -> &DatabaseConnection {
        &self.db
    }

    #[allow(dead_code)] // Transitional: used once operations move behind the drivers.
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    #[allow(dead_code)] // Transitional: used once operations move behind the drivers.
    pub(crate) fn driver(&self) -> &dyn Driver {
        self.driver.as_ref()
    }
}
