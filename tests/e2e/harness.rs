//! Test harness: throwaway databases on every backend, and the daemon as a child process.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, Database};
use serde_json::{Value, json};

/// The bearer token every test daemon is started with.
/// (16 bytes at least: `serve` refuses shorter tokens.)
pub const TOKEN: &str = "e2e-test-api-token";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    MySql,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Sqlite, Backend::Postgres, Backend::MySql];

    /// Where the shared server is; `SWITCHYARD_TEST_POSTGRES` / `SWITCHYARD_TEST_MYSQL` override.
    fn server_url(self) -> Option<String> {
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

    fn admin_db(self) -> &'static str {
        match self {
            Backend::Postgres => "test",
            Backend::MySql => "test",
            Backend::Sqlite => "",
        }
    }
}

/// True under CI, where a missing database or IMAP server is a failure, never a skip.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Says why a test part was skipped, once per message, past the test harness's output capture
/// (which would hide it in a passing test).
pub fn skipped(message: &str) {
    use std::io::Write;
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    let key: String = message.chars().take(40).collect();
    if !said.contains(&key) {
        said.push(key);
        let _ = writeln!(std::io::stderr(), "{message}");
    }
}

/// A fresh, empty database for one test.
#[derive(Debug)]
pub struct TestDb {
    pub backend: Backend,
    pub url: String,
    name: Option<String>,
    pub dir: Arc<tempfile::TempDir>,
}

impl TestDb {
    /// A new database on `backend`, or `None` (with a visible message) when its server is not
    /// running and this is not CI.
    pub async fn create(backend: Backend) -> Option<TestDb> {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let Some(server) = backend.server_url() else {
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("switchyard.db").display()
            );
            return Some(TestDb {
                backend,
                url,
                name: None,
                dir,
            });
        };
        let admin_url = format!("{server}/{}", backend.admin_db());
        let admin = match Database::connect(&admin_url).await {
            Ok(admin) => admin,
            Err(error) => {
                assert!(
                    !in_ci(),
                    "CI=true but {backend:?} is not reachable at {admin_url}: {error}"
                );
                skipped(&format!(
                    "SKIPPED on {backend:?}: no server at {admin_url} ({error}); set CI=true to make this a failure"
                ));
                return None;
            }
        };
        let name = format!("sy_{}", uuid::Uuid::now_v7().simple());
        admin
            .execute_unprepared(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        Some(TestDb {
            backend,
            url: format!("{server}/{name}"),
            name: Some(name),
            dir,
        })
    }

    /// Every backend that is available here (SQLite always).
    pub async fn all() -> Vec<TestDb> {
        let mut dbs = Vec::new();
        for backend in Backend::ALL {
            if let Some(db) = TestDb::create(backend).await {
                dbs.push(db);
            }
        }
        dbs
    }

    /// The database's name on a shared server (`None` for SQLite).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// A connection to the server's admin database, for tests that act as its operator.
    pub async fn admin(&self) -> sea_orm::DatabaseConnection {
        let server = self.backend.server_url().expect("a shared server");
        Database::connect(format!("{server}/{}", self.backend.admin_db()))
            .await
            .expect("admin connection")
    }

    /// Drops the database (SQLite: the temp dir goes with the value).
    pub async fn drop_database(self) {
        if let (Some(name), Some(server)) = (&self.name, self.backend.server_url()) {
            let admin_url = format!("{server}/{}", self.backend.admin_db());
            if let Ok(admin) = Database::connect(&admin_url).await {
                let force = if self.backend == Backend::Postgres {
                    " WITH (FORCE)"
                } else {
                    ""
                };
                let _ = admin
                    .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name}{force}"))
                    .await;
            }
        }
    }

    /// The `[database]` table for a config using this database.
    pub fn config_section(&self) -> String {
        format!("[database]\nurl = \"{}\"\n", self.url)
    }
}

/// The daemon binary running as a child process.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    pub addr: SocketAddr,
    pub config_path: PathBuf,
    logs: Arc<Mutex<Vec<String>>>,
    client: reqwest::Client,
}

/// The principals the tests' live workflows run as (`run_as = "<tenant>-agent"`): an active
/// service principal for each tenant the tests use.
pub const PRINCIPALS: &str = r#"
[[principal]]
id = "acme-agent"
tenant = "acme"
kind = "service"
status = "active"

[[principal]]
id = "globex-agent"
tenant = "globex"
kind = "service"
status = "active"
"#;

/// Config text for a daemon on `db` with extra tables (workflows, sources) appended, and the
/// tests' [`PRINCIPALS`].
pub fn config(db: &TestDb, rest: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"SWITCHYARD_API_TOKEN\"\n\n{}\n{PRINCIPALS}\n{rest}",
        db.config_section()
    )
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_switchyard")
}

impl Daemon {
    /// Writes `config_text` to a new file in `db`'s folder and starts `switchyard serve` on it.
    pub async fn start(db: &TestDb, config_text: &str, env: &[(&str, &str)]) -> Daemon {
        let config_path = db
            .dir
            .path()
            .join(format!("switchyard-{}.toml", uuid::Uuid::now_v7().simple()));
        std::fs::write(&config_path, config_text).expect("write config");
        Daemon::start_with_file(&config_path, env).await
    }

    pub async fn start_with_file(config_path: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_serving(config_path, &[], env).await
    }

    /// `switchyard serve --config FILE` with extra arguments (`--no-migrate`).
    pub async fn start_serving(config_path: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut command = Command::new(binary());
        command
            .args(["serve", "--config"])
            .arg(config_path)
            .args(args)
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .env("SWITCHYARD_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            // A developer's own overrides must not redirect the tests' daemons.
            .env_remove("SWITCHYARD_LISTEN")
            .env_remove("SWITCHYARD_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn switchyard");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("logs").push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = loop {
            if let Some(addr) = listening_addr(&logs.lock().expect("logs")) {
                break addr;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "switchyard exited with {status} before listening:\n{}",
                    logs.lock().expect("logs").join("\n")
                );
            }
            assert!(
                Instant::now() < deadline,
                "switchyard did not start in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Daemon {
            child,
            addr,
            config_path: config_path.to_owned(),
            logs,
            // Idle connections are dropped before the daemon's 10 s header read timeout closes
            // them: reusing one the server is closing at that moment fails mid-request.
            client: reqwest::Client::builder()
                .pool_idle_timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn logs(&self) -> String {
        self.logs.lock().expect("logs").join("\n")
    }

    /// Waits until a log line contains `needle`.
    pub async fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .logs
                .lock()
                .expect("logs")
                .iter()
                .any(|l| l.contains(needle))
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// `POST /v1/events` with the token and an idempotency key.
    pub async fn post_event(&self, key: &str, event: &Value) -> (StatusCode, Value) {
        self.post_event_as(TOKEN, key, event).await
    }

    /// `POST /v1/events` with the token `secret` and an idempotency key.
    pub async fn post_event_as(
        &self,
        secret: &str,
        key: &str,
        event: &Value,
    ) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url("/v1/events"))
            .bearer_auth(secret)
            .header("Idempotency-Key", key)
            .json(event)
            .send()
            .await
            .expect("POST /v1/events");
        read(response).await
    }

    /// The `/metrics` exposition, scraped with the API token.
    pub async fn metrics(&self) -> String {
        let scrape = self
            .client()
            .get(self.url("/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("scrape");
        assert_eq!(scrape.status(), StatusCode::OK);
        scrape.text().await.expect("metrics text")
    }

    /// An authenticated GET, answered 200 with JSON.
    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.get_status(path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }

    pub async fn get_status(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .client
            .get(self.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("GET");
        read(response).await
    }

    /// An authenticated POST with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let response = self
            .client
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .json(body)
            .send()
            .await
            .expect("POST");
        read(response).await
    }

    /// `GET /v1/raw/{raw_ref}`: the stored original bytes, or the status when there are none.
    pub async fn raw(&self, raw_ref: &str) -> Result<Vec<u8>, StatusCode> {
        let response = self
            .client
            .get(self.url(&format!("/v1/raw/{raw_ref}")))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("GET raw");
        match response.status() {
            StatusCode::OK => Ok(response.bytes().await.expect("raw bytes").to_vec()),
            status => Err(status),
        }
    }

    /// A raw request builder for tests that shape their own request.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The ledger, newest first, with payloads on pages small enough to carry them.
    pub async fn intake(&self, query: &str) -> Vec<Value> {
        let limit = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("limit="))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(100);
        let query = if limit <= 100 {
            format!("{query}&include=payload")
        } else {
            query.to_owned()
        };
        self.get(&format!("/v1/intake?{query}")).await["intake"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    pub async fn runs(&self, query: &str) -> Vec<Value> {
        self.get(&format!("/v1/runs?{query}")).await["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Finishes a run with `status`, as its current holder (the run's own fencing token).
    pub async fn finish(&self, run_id: &str, status: &str) -> (StatusCode, Value) {
        let token = self.fencing_token(run_id).await;
        self.post(
            &format!("/v1/runs/{run_id}/finish"),
            &json!({"status": status, "fencing_token": token}),
        )
        .await
    }

    /// Extends a run's lease as its current holder.
    pub async fn heartbeat(&self, run_id: &str) -> (StatusCode, Value) {
        let token = self.fencing_token(run_id).await;
        self.post(
            &format!("/v1/runs/{run_id}/heartbeat"),
            &json!({"fencing_token": token}),
        )
        .await
    }

    /// The fencing token a run holds now (0 for an unknown run).
    pub async fn fencing_token(&self, run_id: &str) -> i64 {
        self.get_status(&format!("/v1/runs/{run_id}")).await.1["fencing_token"]
            .as_i64()
            .unwrap_or(0)
    }

    /// Claims due runs of `workflows` on pull targets, as a worker would (no waiting).
    pub async fn claim(&self, workflows: &[&str], max: u64) -> Vec<Value> {
        let (status, answer) = self
            .post("/v1/claims", &json!({"workflows": workflows, "max": max}))
            .await;
        assert_eq!(status, StatusCode::OK, "claim: {answer}");
        answer["claims"].as_array().cloned().unwrap_or_default()
    }

    /// Rewrites the config file and sends SIGHUP.
    pub fn reload(&self, config_text: &str) {
        std::fs::write(&self.config_path, config_text).expect("rewrite config");
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("kill -HUP");
        assert!(status.success());
    }

    /// Stops the daemon with SIGTERM and waits for it.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// Stops the daemon with SIGTERM; its log once it has logged its last line (`stopped`) or
    /// 5 s have passed since it exited.
    pub async fn stop_with_logs(mut self) -> String {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        self.wait_for_log(r#""message":"stopped""#, Duration::from_secs(5))
            .await;
        self.logs()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn listening_addr(lines: &[String]) -> Option<SocketAddr> {
    lines.iter().find_map(|line| {
        let value: Value = serde_json::from_str(line).ok()?;
        (value["fields"]["message"] == "listening")
            .then(|| value["fields"]["addr"].as_str()?.parse().ok())
            .flatten()
    })
}

pub async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// A canonical event on `channel`.
pub fn event(channel: &str, event_type: &str, tenant: &str, entity: &str) -> Value {
    json!({
        "channel": channel,
        "event_type": event_type,
        "tenant_id": tenant,
        "target_entity_id": entity,
        "payload": {"subject": "Printer on fire"},
    })
}

/// The `run_id` of a routed answer.
pub fn run_id(answer: &Value) -> String {
    answer["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run_id in {answer}"))
        .to_owned()
}

/// A unique delivery/entity id for one test.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// Serves `app` on a free loopback port, as the test's own worker or collector; the task ends
/// when it is aborted (or the test's runtime stops).
pub async fn serve_local(app: axum::Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("local address");
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("test server");
    });
    (addr, server)
}
