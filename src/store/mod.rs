//! The database: connecting (with SQLite's durability pragmas), migrating, and the entities the
//! daemon owns (the intake ledger, raw deliveries, workflows, mailbox cursors, poller leases).
//! Runs and entity locks belong to the router crate.

pub mod entities;
pub mod ledger;
pub mod mailbox;
pub mod revisions;
pub mod workflows;

use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbErr};
use sea_orm_migration::MigratorTrait;
use switchyard_migrations::Migrator;

use crate::config::{DatabaseConfig, Durability};

/// Longest id or key the indexed columns hold (tenant, event type, entity, delivery id, ...).
pub const MAX_KEY_LEN: usize = switchyard_migrations::KEY_LEN as usize;

/// Longest `raw_ref` the ledger holds (`intake.raw_ref` is `VARCHAR(64)` since m0001).
pub const MAX_RAW_REF_LEN: usize = 64;

/// Prepared statements kept per connection. The MySQL intake writer's multi-row statements
/// differ by batch size (1 to 256 rows, several statements each); sqlx's default of 100
/// re-prepared them. (The SQLite and PostgreSQL writers use fixed statement texts.)
const STATEMENT_CACHE: usize = 2048;

/// PostgreSQL `statement_timeout` and `lock_timeout` of every pooled connection.
const STATEMENT_TIMEOUT: &str = "10s";

/// Opens the pool. SQLite runs in WAL mode with `synchronous` per the configured durability,
/// so a commit is on disk before any answer is sent.
pub async fn connect(url: &str, config: &DatabaseConfig) -> Result<DatabaseConnection, DbErr> {
    let is_sqlite = url.starts_with("sqlite:");
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(
            config
                .max_connections
                .unwrap_or(if is_sqlite { 4 } else { 16 }),
        )
        .min_connections(1)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    if is_sqlite {
        let synchronous = match config.durability {
            Durability::Full => SqliteSynchronous::Full,
            Durability::Normal => SqliteSynchronous::Normal,
        };
        options.map_sqlx_sqlite_opts(move |opts: SqliteConnectOptions| {
            opts.journal_mode(SqliteJournalMode::Wal)
                .synchronous(synchronous)
                .busy_timeout(Duration::from_secs(5))
                .statement_cache_capacity(STATEMENT_CACHE)
        });
    } else {
        // A database that hangs must not hold a connection (and the intake writer) forever.
        options
            .map_sqlx_postgres_opts(|opts| {
                opts.statement_cache_capacity(STATEMENT_CACHE).options([
                    ("statement_timeout", STATEMENT_TIMEOUT),
                    ("lock_timeout", STATEMENT_TIMEOUT),
                    // Every execution planned for its own values. A prepared statement's generic
                    // plan stays cached until something invalidates it; with one, the
                    // recorder's `id IN (...)` statements scanned whole tables, 1.5 s each at
                    // 500,000 rows. The intake writer's fixed array statements are the exception:
                    // its transactions set `force_generic_plan` (`intake/postgres_batch.rs`).
                    ("plan_cache_mode", "force_custom_plan"),
                ])
            })
            .map_sqlx_mysql_opts(|opts| opts.statement_cache_capacity(STATEMENT_CACHE))
            .map_sqlx_mysql_pool_opts(|pool| {
                pool.after_connect(|conn, _| {
                    Box::pin(async move {
                        use sea_orm::sqlx::Executor;
                        conn.execute("SET SESSION innodb_lock_wait_timeout = 5")
                            .await?;
                        // MariaDB only; MySQL has no server-side limit for writes.
                        if let Err(error) =
                            conn.execute("SET SESSION max_statement_time = 10").await
                        {
                            tracing::debug!(%error, "max_statement_time is not supported here");
                        }
                        Ok(())
                    })
                })
            });
    }
    Database::connect(options).await
}

/// Applies every pending migration.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), DbErr> {
    Migrator::up(db, None).await
}

/// Whether the database answers: what `/readyz` reports.
pub async fn ping(db: &DatabaseConnection) -> Result<(), DbErr> {
    db.execute_unprepared("SELECT 1").await.map(|_| ())
}
