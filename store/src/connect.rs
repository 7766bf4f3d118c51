//! Connecting to the database (with SQLite's durability pragmas, PostgreSQL's and MariaDB's
//! timeouts) and migrating it.

use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbErr};
use sea_orm_migration::MigratorTrait;
use switchyard_migrations::Migrator;

/// How an acknowledged event survives a crash on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// `synchronous = FULL`: an acknowledged event survives power loss.
    #[default]
    Full,
    /// `synchronous = NORMAL`: survives a daemon crash; the last commits may be lost on power loss.
    Normal,
}

/// What the pool is opened with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Pooled connections at most (default 4 on SQLite, 16 elsewhere).
    pub max_connections: Option<u32>,
    pub durability: Durability,
}

/// Prepared statements kept per connection. The MySQL intake writer's multi-row statements
/// differ by batch size (1 to 256 rows, several statements each); sqlx's default of 100
/// re-prepared them. (The SQLite and PostgreSQL writers use fixed statement texts.)
const STATEMENT_CACHE: usize = 2048;

/// PostgreSQL `statement_timeout` and `lock_timeout` of every pooled connection.
const STATEMENT_TIMEOUT: &str = "10s";

/// Opens the pool. SQLite runs in WAL mode with `synchronous` per the configured durability,
/// so a commit is on disk before any answer is sent.
pub async fn connect(url: &str, config: &Options) -> Result<DatabaseConnection, DbErr> {
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
