//! Throwaway PostgreSQL (and MariaDB) databases: one per run, created and dropped by the bench.

use std::time::{Duration, Instant};

use anyhow::Context;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};

/// `CHECKPOINT` on the server at `server_url` (through `admin_db`), waiting for it to end; the
/// time it took. It is an immediate checkpoint: one under way is hurried to its end, not spread.
pub async fn checkpoint(server_url: &str, admin_db: &str) -> anyhow::Result<Duration> {
    let (_, admin) = connect_admin(server_url, admin_db).await?;
    let started = Instant::now();
    admin
        .execute_unprepared("CHECKPOINT")
        .await
        .context("CHECKPOINT failed (it needs a superuser or the pg_checkpoint role)")?;
    let took = started.elapsed();
    admin.close().await?;
    Ok(took)
}

/// A connection to `admin_db` on the server at `server_url`, and that database's URL.
async fn connect_admin(
    server_url: &str,
    admin_db: &str,
) -> anyhow::Result<(String, DatabaseConnection)> {
    let admin_url = format!("{}/{admin_db}", server_url.trim_end_matches('/'));
    let admin = Database::connect(&admin_url)
        .await
        .with_context(|| format!("cannot connect to the database server at {admin_url}"))?;
    Ok((admin_url, admin))
}

/// A database created for this run; [`TempDatabase::drop_database`] removes it.
#[derive(Debug)]
pub struct TempDatabase {
    admin_url: String,
    name: String,
    pub url: String,
}

impl TempDatabase {
    /// `CREATE DATABASE bench_<uuid>_<label>` on the server at `server_url`.
    pub async fn create(server_url: &str, admin_db: &str, label: &str) -> anyhow::Result<Self> {
        let (admin_url, admin) = connect_admin(server_url, admin_db).await?;
        let name = format!("bench_{}_{label}", uuid::Uuid::now_v7().simple());
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("cannot create database {name}"))?;
        admin.close().await?;
        Ok(Self {
            url: format!("{}/{name}", server_url.trim_end_matches('/')),
            admin_url,
            name,
        })
    }

    /// `DROP DATABASE` (`WITH (FORCE)` on PostgreSQL); failures are reported, not fatal.
    pub async fn drop_database(self) {
        let force = if self.admin_url.starts_with("postgres") {
            " WITH (FORCE)"
        } else {
            ""
        };
        let result = async {
            let admin = Database::connect(&self.admin_url).await?;
            admin
                .execute_unprepared(&format!("DROP DATABASE IF EXISTS {}{force}", self.name))
                .await?;
            admin.close().await
        }
        .await;
        if let Err(error) = result {
            eprintln!("warning: cannot drop database {}: {error}", self.name);
        }
    }
}
