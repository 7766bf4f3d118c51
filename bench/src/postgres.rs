//! Throwaway PostgreSQL databases: one per run, created and dropped by the bench.

use std::time::{Duration, Instant};

use anyhow::Context;
use sea_orm::{ConnectionTrait, Database};

/// `CHECKPOINT` on the server at `server_url` (through `admin_db`), waiting for it to end; the
/// time it took. A checkpoint already under way is finished at once rather than spread.
pub async fn checkpoint(server_url: &str, admin_db: &str) -> anyhow::Result<Duration> {
    let admin_url = format!("{}/{admin_db}", server_url.trim_end_matches('/'));
    let admin = Database::connect(&admin_url)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {admin_url}"))?;
    let started = Instant::now();
    admin
        .execute_unprepared("CHECKPOINT")
        .await
        .context("CHECKPOINT failed (it needs a superuser or the pg_checkpoint role)")?;
    let took = started.elapsed();
    admin.close().await?;
    Ok(took)
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
        let server_url = server_url.trim_end_matches('/');
        let admin_url = format!("{server_url}/{admin_db}");
        let name = format!("bench_{}_{label}", uuid::Uuid::now_v7().simple());
        let admin = Database::connect(&admin_url)
            .await
            .with_context(|| format!("cannot connect to PostgreSQL at {admin_url}"))?;
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("cannot create database {name}"))?;
        admin.close().await?;
        Ok(Self {
            url: format!("{server_url}/{name}"),
            admin_url,
            name,
        })
    }

    /// `DROP DATABASE ... WITH (FORCE)`; failures are reported, not fatal.
    pub async fn drop_database(self) {
        let result = async {
            let admin = Database::connect(&self.admin_url).await?;
            admin
                .execute_unprepared(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await?;
            admin.close().await
        }
        .await;
        if let Err(error) = result {
            eprintln!("warning: cannot drop database {}: {error}", self.name);
        }
    }
}
