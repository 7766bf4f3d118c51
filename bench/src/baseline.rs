//! The baselines that show the machine's limit, each served by this binary re-run as a child
//! process (`serve-baseline`), on the daemon's routes:
//!
//! - `bare`: axum parses the JSON body and answers 200; nothing is stored or verified.
//! - `sqlite`: plus one durable insert per request (WAL, `synchronous = FULL`, one transaction
//!   per request, so one fsync per request).
//! - `postgres`: plus one insert per request into PostgreSQL through a connection pool.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use sea_orm::sqlx::postgres::PgPoolOptions;
use sea_orm::sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sea_orm::sqlx::{self, PgPool, SqlitePool};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::args::{BaselineKind, ServeBaselineArgs};

#[derive(Debug, Clone)]
enum Store {
    None,
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, \
    delivery_id TEXT NOT NULL UNIQUE, body BYTEA NOT NULL, received_at BIGINT NOT NULL)";
const CREATE_TABLE_SQLITE: &str = "CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, \
    delivery_id TEXT NOT NULL UNIQUE, body BLOB NOT NULL, received_at INTEGER NOT NULL)";

/// Runs a baseline server until SIGTERM, on the same kind of runtime the daemon uses.
pub fn serve(args: ServeBaselineArgs) -> anyhow::Result<()> {
    tokio::runtime::Runtime::new()?.block_on(async move {
        let store = open(&args).await?;
        let app = Router::new()
            .route("/v1/events", post(accept))
            .route("/v1/ingest/webhook/{name}", post(accept))
            .route("/readyz", get(|| async { "ok" }))
            .with_state(store);
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        // The line the bench reads the port from, in the daemon's log shape.
        eprintln!(
            "{}",
            serde_json::json!({"fields": {"message": "listening", "addr": listener.local_addr()?.to_string()}})
        );
        // As the daemon does: answers are never held back waiting for an ACK.
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        axum::serve(listener, app)
            .with_graceful_shutdown(terminated())
            .await?;
        Ok(())
    })
}

async fn terminated() {
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
    }
}

async fn open(args: &ServeBaselineArgs) -> anyhow::Result<Store> {
    Ok(match args.kind {
        BaselineKind::Bare => Store::None,
        BaselineKind::Sqlite => {
            let options = SqliteConnectOptions::from_str(&args.database)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(5));
            let pool = SqlitePoolOptions::new()
                .max_connections(args.connections)
                .connect_with(options)
                .await
                .context("cannot open the SQLite baseline database")?;
            sqlx::query(CREATE_TABLE_SQLITE).execute(&pool).await?;
            Store::Sqlite(pool)
        }
        BaselineKind::Postgres => {
            let pool = PgPoolOptions::new()
                .max_connections(args.connections)
                .connect(&args.database)
                .await
                .context("cannot open the PostgreSQL baseline database")?;
            sqlx::query(CREATE_TABLE).execute(&pool).await?;
            Store::Postgres(pool)
        }
    })
}

/// Parses the body as the daemon would have to, stores it if this baseline stores, answers.
async fn accept(
    State(store): State<Store>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, r#"{"outcome":"invalid_event"}"#);
    };
    let delivery_id = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| value.get("id").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned();
    let id = uuid::Uuid::now_v7().to_string();
    let now = chrono::Utc::now().timestamp_millis();
    let stored = match &store {
        Store::None => Ok(()),
        Store::Sqlite(pool) => sqlx::query(
            "INSERT INTO deliveries (id, delivery_id, body, received_at) VALUES (?, ?, ?, ?)",
        )
        .bind(id)
        .bind(delivery_id)
        .bind(body.to_vec())
        .bind(now)
        .execute(pool)
        .await
        .map(|_| ()),
        Store::Postgres(pool) => sqlx::query(
            "INSERT INTO deliveries (id, delivery_id, body, received_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(id)
        .bind(delivery_id)
        .bind(body.to_vec())
        .bind(now)
        .execute(pool)
        .await
        .map(|_| ()),
    };
    match stored {
        Ok(()) => (StatusCode::OK, r#"{"outcome":"accepted"}"#),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"outcome":"store_unavailable"}"#,
        ),
    }
}
