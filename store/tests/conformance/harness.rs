//! A fresh, migrated database per test on each backend, opened as a [`Store`].

use sea_orm::{ConnectionTrait, Database};
use switchyard_store::Store;
use switchyard_store::connect::Options;

/// The backends every operation is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Postgres, Backend::MySql];

    /// The shared server (`SWITCHYARD_TEST_POSTGRES` / `SWITCHYARD_TEST_MYSQL` override).
    fn server(self) -> Option<String> {
        match self {
            Backend::Sqlite => None,
            Backend::Postgres => Some(
                std::env::var("SWITCHYARD_TEST_POSTGRES")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into()),
            ),
            Backend::MySql => Some(
                std::env::var("SWITCHYARD_TEST_MYSQL")
                    .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into()),
            ),
        }
    }
}

/// True under CI, where a missing database is a failure.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A migrated store on a database of its own; the database is dropped with it.
#[derive(Debug)]
pub struct TestStore {
    pub backend: Backend,
    pub store: Store,
    pub url: String,
    name: Option<(String, String)>,
    _dir: tempfile::TempDir,
}

impl TestStore {
    /// A new migrated store on `backend`, or `None` (said on stderr) when its server is not
    /// running outside CI.
    pub async fn create(backend: Backend) -> Option<TestStore> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (url, name) = match backend.server() {
            None => (
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("store.db").display()
                ),
                None,
            ),
            Some(server) => {
                let admin_url = format!("{server}/test");
                let admin = match Database::connect(&admin_url).await {
                    Ok(admin) => admin,
                    Err(error) => {
                        assert!(
                            !in_ci(),
                            "CI=true but {backend:?} is not reachable: {error}"
                        );
                        eprintln!("SKIPPED on {backend:?}: {error}");
                        return None;
                    }
                };
                let name = format!("sy_store_{}", uuid::Uuid::now_v7().simple());
                admin
                    .execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create database");
                (format!("{server}/{name}"), Some((admin_url, name)))
            }
        };
        let store = Store::open(&url, &Options::default())
            .await
            .expect("open store");
        store.migrate().await.expect("migrate");
        Some(TestStore {
            backend,
            store,
            url,
            name,
            _dir: dir,
        })
    }

    /// A store on every backend that is reachable (SQLite always).
    pub async fn all() -> Vec<TestStore> {
        let mut stores = Vec::new();
        for backend in Backend::ALL {
            if let Some(store) = Self::create(backend).await {
                stores.push(store);
            }
        }
        stores
    }

    /// A second store on the same database (another replica's pool).
    pub async fn replica(&self) -> Store {
        Store::open(&self.url, &Options::default())
            .await
            .expect("open replica")
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.name.take() else {
            return;
        };
        let force = if self.backend == Backend::Postgres {
            " WITH (FORCE)"
        } else {
            ""
        };
        let backend = self.backend;
        // Dropped on a thread of its own: a test's runtime may be shutting down.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                if let Ok(admin) = Database::connect(&admin_url).await {
                    if backend == Backend::MySql {
                        // What PostgreSQL's FORCE does: a pooled connection whose rollback
                        // has not run yet (its runtime is this drop's caller) would hold a
                        // metadata lock that DROP DATABASE waits for.
                        kill_sessions(&admin, &name).await;
                    }
                    let _ = admin
                        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name}{force}"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// Ends every MySQL session on the database `name`.
async fn kill_sessions(admin: &sea_orm::DatabaseConnection, name: &str) {
    use sea_orm::{ConnectionTrait, Statement};
    let Ok(rows) = admin
        .query_all_raw(Statement::from_string(
            admin.get_database_backend(),
            format!(
                "SELECT CAST(id AS CHAR) FROM information_schema.processlist WHERE db = '{name}'"
            ),
        ))
        .await
    else {
        return;
    };
    for row in rows {
        if let Ok(id) = row.try_get_by_index::<String>(0) {
            let _ = admin.execute_unprepared(&format!("KILL {id}")).await;
        }
    }
}
