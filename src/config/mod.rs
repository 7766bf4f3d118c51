//! The admin's config file (`switchyard.toml`): its shape, validation, and the resolution of
//! secrets named by environment variable into the [`Settings`] the daemon runs on.

pub mod alerts;
mod data_dir;
mod flow;
pub mod hours;
mod lines;
pub mod notifiers;
mod principals;
mod retention;
mod revision;
pub mod schedules;
mod sources;
mod targets;
mod telemetry;
mod tokens;
mod workflows;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use switchyard_core::Workflow;

pub use alerts::{AlertConfig, AlertKind, AlertingConfig};
pub use data_dir::{Overrides, create_sqlite_folder, default_data_dir};
pub use flow::{Ceiling, FlowConfig, RatesConfig, coalesce_refusal};
pub use notifiers::{NotifierConfig, ResolvedNotifier, SmtpTls};
pub use principals::{PrincipalConfig, PrincipalKind, PrincipalStatus};
pub use retention::{RetentionConfig, format_window};
pub use revision::revision_content;
pub use schedules::{CatchUp, ScheduleConfig};
pub use sources::{
    API_SOURCE, ResolvedSource, SenderPolicy, SourceConfig, SourceSettings, check_approval_notify,
};
pub use targets::{
    BUILTIN_PULL, DEFAULT_RETRY, HttpTargetConfig, NatsTargetConfig, PullTargetConfig,
    ResolvedTarget, TargetConfig,
};
pub use telemetry::{OtlpEndpoint, TelemetryConfig};
pub use tokens::{API_TOKEN_NAME, ResolvedToken, Scope, TokenConfig, resolve as resolve_tokens};
pub use workflows::{MAX_ATTEMPTS, WorkflowConfig};

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the HTTP server listens and how it authenticates admin callers.
    #[serde(default)]
    pub server: ServerConfig,
    /// Where runs, locks and the ledger are stored.
    #[serde(default)]
    pub database: DatabaseConfig,
    /// Channels events arrive from (`kind = "webhook" | "slack" | "email" | "cloudevents"`).
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceConfig>,
    /// Where routed runs are delivered (`kind = "http" | "nats" | "pull"`).
    #[serde(default, rename = "target")]
    pub targets: Vec<TargetConfig>,
    /// Workflows and the triggers that select them.
    #[serde(default, rename = "workflow")]
    pub workflows: Vec<WorkflowConfig>,
    /// How long the ledger, raw deliveries and finished runs are kept.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// OpenTelemetry trace export (off unless `otlp_endpoint` is set).
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Scoped bearer tokens for the admin API and the console.
    #[serde(default, rename = "token")]
    pub tokens: Vec<TokenConfig>,
    /// Intake rates per tenant and per source (`[rates.tenant]`, `[rates.source]`).
    #[serde(default)]
    pub rates: RatesConfig,
    /// The authorities workflows run as (`run_as`).
    #[serde(default, rename = "principal")]
    pub principals: Vec<PrincipalConfig>,
    /// Where alerts are sent (`kind = "webhook" | "slack" | "email"`).
    #[serde(default, rename = "notifier")]
    pub notifiers: Vec<NotifierConfig>,
    /// Alert rules (`kind = "source_quiet" | "dispatch_lag" | ...`).
    #[serde(default, rename = "alert")]
    pub alerts: Vec<AlertConfig>,
    /// How rules are evaluated, and the built-in ones.
    #[serde(default)]
    pub alerting: AlertingConfig,
    /// Schedules: time as a trigger (`[[schedule]]`, channel `schedule`).
    #[serde(default, rename = "schedule")]
    pub schedules: Vec<ScheduleConfig>,
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address and port of the HTTP server.
    #[serde(default = "ServerConfig::default_listen")]
    pub listen: SocketAddr,
    /// Environment variable holding the bearer token for `/v1/events` and the admin API.
    #[serde(default = "ServerConfig::default_api_token_env")]
    pub api_token_env: String,
    /// Largest request body accepted, in bytes; larger ones are answered 413.
    #[serde(default = "ServerConfig::default_body_limit")]
    pub body_limit: usize,
    /// Longest a sender waits for its delivery to be committed before it is answered 503 +
    /// Retry-After (default 2s, under Slack's 3 s). A commit that lands later still counts:
    /// the retry answers `duplicate`.
    #[serde(
        default = "ServerConfig::default_intake_timeout",
        with = "humantime_serde"
    )]
    pub intake_timeout: std::time::Duration,
    /// Longest a client may take to send a request's headers; also how long an idle
    /// keep-alive connection stays open (default 10s).
    #[serde(
        default = "ServerConfig::default_read_timeout",
        with = "humantime_serde"
    )]
    pub header_read_timeout: std::time::Duration,
    /// Longest a client may take to send a whole request body, counted from the end of its
    /// headers (default 10s): a deadline over the body, not an idle timeout between its bytes.
    /// Slower ones get 408 and their connection is closed.
    #[serde(
        default = "ServerConfig::default_read_timeout",
        with = "humantime_serde"
    )]
    pub body_read_timeout: std::time::Duration,
    /// Most connections open at once (default 4096); new ones past it are closed at once. The
    /// soft open-files limit is raised to the hard one at start, and the cap lowered to fit.
    #[serde(default = "ServerConfig::default_max_connections")]
    pub max_connections: usize,
    /// Bytes of not-yet-verified request bodies (signed ingest endpoints) buffered at once,
    /// across all connections (default 64 MiB); past it such requests get 503 `overloaded` +
    /// Retry-After. Reserved only once the named source is known to exist.
    #[serde(default = "ServerConfig::default_unverified_body_budget")]
    pub unverified_body_budget: usize,
    /// The largest share of `max_connections` and of `unverified_body_budget` one client
    /// address (an IPv6 /64) may hold at once, from 0 to 1 (default 0.25; at least one
    /// connection and one `body_limit`). Behind a reverse proxy every request comes from the
    /// proxy's address: set 1.0 there and limit clients at the proxy.
    #[serde(default = "ServerConfig::default_client_share")]
    pub client_share: f64,
    /// Longest a shutdown waits for open requests before closing their connections
    /// (default 30s).
    #[serde(
        default = "ServerConfig::default_shutdown_timeout",
        with = "humantime_serde"
    )]
    pub shutdown_timeout: std::time::Duration,
    /// A separate address serving only `GET /metrics`, without a token (for a scraper on a
    /// private network); unset (the default), `/metrics` is on the main listener behind the
    /// API token.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
}

impl ServerConfig {
    fn default_listen() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 8080))
    }
    fn default_api_token_env() -> String {
        "SWITCHYARD_API_TOKEN".into()
    }
    fn default_body_limit() -> usize {
        1024 * 1024
    }
    fn default_intake_timeout() -> std::time::Duration {
        std::time::Duration::from_secs(2)
    }
    fn default_read_timeout() -> std::time::Duration {
        std::time::Duration::from_secs(10)
    }
    fn default_max_connections() -> usize {
        4096
    }
    fn default_unverified_body_budget() -> usize {
        64 * 1024 * 1024
    }
    fn default_client_share() -> f64 {
        0.25
    }

    /// `client_share` of `max_connections`: at least one.
    pub fn max_connections_per_client(&self) -> usize {
        share_of(self.max_connections, self.client_share).max(1)
    }

    /// `client_share` of `unverified_body_budget`: at least one whole body, at most all of it.
    pub fn unverified_body_per_client(&self) -> usize {
        share_of(self.unverified_body_budget, self.client_share)
            .max(self.body_limit)
            .min(self.unverified_body_budget)
    }
    fn default_shutdown_timeout() -> std::time::Duration {
        std::time::Duration::from_secs(30)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: Self::default_listen(),
            api_token_env: Self::default_api_token_env(),
            body_limit: Self::default_body_limit(),
            intake_timeout: Self::default_intake_timeout(),
            header_read_timeout: Self::default_read_timeout(),
            body_read_timeout: Self::default_read_timeout(),
            max_connections: Self::default_max_connections(),
            unverified_body_budget: Self::default_unverified_body_budget(),
            client_share: Self::default_client_share(),
            shutdown_timeout: Self::default_shutdown_timeout(),
            metrics_listen: None,
        }
    }
}

/// `share` of `total`, rounded up; a share outside 0..=1 (refused by `check`) counts as all.
fn share_of(total: usize, share: f64) -> usize {
    if !(share > 0.0 && share < 1.0) {
        return total;
    }
    // Exact for any total below 2^53, far past what a connection cap or a budget can be.
    let part = (total as f64 * share).ceil() as usize;
    part.min(total)
}

/// How an acknowledged event survives a crash on SQLite (the store's own setting).
pub use switchyard_store::connect::Durability;

/// `[database]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://FILE` (relative to the config file), `postgres://...` or `mysql://...`; unset,
    /// `switchyard.db` in the data directory ([`default_data_dir`]).
    #[serde(default)]
    pub url: Option<String>,
    /// SQLite only: when a commit is on disk. PostgreSQL and MySQL follow their server settings.
    #[serde(default)]
    pub durability: Durability,
    /// Connection pool size (default 4 on SQLite, 16 otherwise).
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// Intake writers committing in parallel (SQLite always 1; default 1 on PostgreSQL, 4 on
    /// MySQL).
    #[serde(default)]
    pub writers: Option<usize>,
}

impl DatabaseConfig {
    /// What the store's pool is opened with.
    pub fn store_options(&self) -> switchyard_store::connect::Options {
        switchyard_store::connect::Options {
            max_connections: self.max_connections,
            durability: self.durability,
        }
    }
}

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// A parsed, validated config file and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    pub config: Config,
    /// The file it was read from.
    pub path: PathBuf,
    /// The folder relative paths (the SQLite file) are resolved against.
    pub base_dir: PathBuf,
    /// First 16 hex digits of the file's SHA-256: the same file gives the same revision on
    /// every replica.
    pub revision: String,
    /// Live workflows whose principal lacks a required capability: errors for `check`,
    /// degraded workflows for a running daemon (`principals::capability_gaps`).
    pub capability_gaps: Vec<String>,
}

impl LoadedConfig {
    /// Reads, parses and validates the file; secrets are not looked up yet.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Self::parse(&text, path, base_dir)
    }

    /// Parses and validates config text as if read from `path`.
    pub fn parse(text: &str, path: &Path, base_dir: PathBuf) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        config.validate(text)?;
        let revision = hex::encode(&Sha256::digest(text.as_bytes())[..8]);
        let capability_gaps =
            principals::capability_gaps(&config.principals, &config.workflows, text);
        Ok(Self {
            config,
            path: path.to_owned(),
            base_dir,
            revision,
            capability_gaps,
        })
    }

    /// The database URL with a relative SQLite path resolved against the config's folder and the
    /// file created when missing; unset, `switchyard.db` in the data directory.
    pub fn database_url(&self) -> String {
        self.database_url_with(&process_env)
    }

    /// [`Self::database_url`] with the environment given (tests).
    pub fn database_url_with(&self, env: EnvLookup<'_>) -> String {
        match &self.config.database.url {
            Some(url) => resolve_database_url(url, &self.base_dir),
            None => resolve_database_url(
                &format!("sqlite://{}", data_dir::DEFAULT_FILE),
                &default_data_dir(&self.base_dir, env),
            ),
        }
    }

    /// This daemon's name in poller leases: the host and the config file. A daemon restarted on
    /// the same host with the same file reclaims its own leases at once instead of waiting for
    /// them to expire; replicas on other hosts are told apart by the host name.
    pub fn replica_id(&self) -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "localhost".into());
        let path = std::fs::canonicalize(&self.path).unwrap_or_else(|_| self.path.clone());
        let digest = Sha256::digest(path.to_string_lossy().as_bytes());
        format!("{}:{}", host.trim(), hex::encode(&digest[..6]))
    }

    /// Every target in force: the configured ones, and the built-in pull target unless one is
    /// configured under its name.
    pub fn targets(&self) -> Vec<TargetConfig> {
        let mut targets = self.config.targets.clone();
        if !targets.iter().any(|t| t.name() == BUILTIN_PULL) {
            targets.push(TargetConfig::Pull(PullTargetConfig::builtin()));
        }
        targets
    }

    /// The workflows in domain form.
    pub fn workflows(&self) -> Vec<Workflow> {
        self.config
            .workflows
            .iter()
            .map(WorkflowConfig::to_workflow)
            .collect()
    }
}

impl Config {
    fn validate(&self, text: &str) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut workflow_ids = HashSet::new();
        for workflow in &self.workflows {
            if !workflow_ids.insert(workflow.id.as_str()) {
                problems.push(format!(
                    "workflow `{}` is defined more than once",
                    workflow.id
                ));
            }
            problems.extend(workflow.problems());
        }
        let mut target_names = HashSet::new();
        for target in &self.targets {
            if !target_names.insert(target.name()) {
                problems.push(format!(
                    "target `{}` is defined more than once",
                    target.name()
                ));
            }
            problems.extend(target.problems());
        }
        for workflow in &self.workflows {
            if let Some(target) = &workflow.target
                && target != BUILTIN_PULL
                && !target_names.contains(target.as_str())
            {
                problems.push(format!(
                    "workflow `{}` names target `{target}`, which is not defined (add a \
                     [[target]] with that name, or leave `target` out for the built-in pull \
                     target)",
                    workflow.id
                ));
            }
        }
        let mut source_names = HashSet::new();
        for source in &self.sources {
            if !source_names.insert((source.kind(), source.name())) {
                problems.push(format!(
                    "{} source `{}` is defined more than once",
                    source.kind(),
                    source.name()
                ));
            }
            if let Err(problem) = source.validate() {
                problems.push(format!(
                    "{} source `{}`: {problem}",
                    source.kind(),
                    source.name()
                ));
            }
        }
        if self.server.body_limit == 0 {
            problems.push("server.body_limit must be greater than 0".into());
        }
        for (key, value) in [
            ("intake_timeout", self.server.intake_timeout),
            ("header_read_timeout", self.server.header_read_timeout),
            ("body_read_timeout", self.server.body_read_timeout),
        ] {
            if value.is_zero() {
                problems.push(format!("server.{key} must be longer than 0s"));
            }
        }
        if self.server.max_connections == 0 {
            problems.push("server.max_connections must be at least 1".into());
        }
        if !(self.server.client_share > 0.0 && self.server.client_share <= 1.0) {
            problems.push(format!(
                "server.client_share must be above 0 and at most 1 (a share of the connection \
                 cap and of the unverified-body budget), not {}",
                self.server.client_share
            ));
        }
        if self.server.unverified_body_budget < self.server.body_limit {
            problems.push(
                "server.unverified_body_budget must be at least server.body_limit (one whole \
                 body must fit)"
                    .into(),
            );
        }
        problems.extend(self.rates.problems(&self.sources, &self.workflows));
        let mut source_names: HashSet<&str> = self.sources.iter().map(SourceConfig::name).collect();
        source_names.insert(API_SOURCE);
        target_names.insert(BUILTIN_PULL);
        problems.extend(alerts::problems(
            &self.notifiers,
            &self.alerts,
            &self.alerting,
            &source_names,
            &target_names,
        ));
        problems.extend(self.retention.problems());
        problems.extend(tokens::problems(&self.tokens));
        problems.extend(schedules::problems(&self.schedules));
        problems.extend(principals::problems(
            &self.principals,
            &self.workflows,
            text,
        ));
        if self.database.writers == Some(0) {
            problems.push("database.writers must be at least 1".into());
        }
        if let Some(url) = &self.database.url
            && is_in_memory_sqlite(url)
        {
            problems.push(format!(
                "database.url `{url}` is an in-memory SQLite database, which loses every delivery \
                 at exit; use `sqlite://FILE`"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            let located: Vec<String> = problems
                .into_iter()
                .map(|problem| lines::locate(problem, text))
                .collect();
            Err(ConfigError::Invalid(located.join("\n")))
        }
    }
}

pub(crate) fn is_in_memory_sqlite(url: &str) -> bool {
    url.starts_with("sqlite:") && (url.contains(":memory:") || url.contains("mode=memory"))
}

pub(crate) fn resolve_database_url(url: &str, base_dir: &Path) -> String {
    let Some(rest) = url.strip_prefix("sqlite://") else {
        return url.to_owned();
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path.starts_with(':') {
        return url.to_owned();
    }
    let path = Path::new(path);
    let path = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base_dir.join(path)
    };
    // Without `mode=rwc` sqlx refuses a missing file; the embedded default should just work.
    let query = if query.split('&').any(|pair| pair.starts_with("mode=")) {
        query.to_owned()
    } else if query.is_empty() {
        "mode=rwc".to_owned()
    } else {
        format!("{query}&mode=rwc")
    };
    format!("sqlite://{}?{query}", path.display())
}

/// Looks up an environment variable by name; tests pass their own.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// A config with every secret looked up: what the daemon runs on.
#[derive(Debug, Clone)]
pub struct Settings {
    pub loaded: LoadedConfig,
    pub api_token: String,
    /// The `[[token]]` entries with their secrets (the API token is not among them).
    pub tokens: Vec<ResolvedToken>,
    pub sources: Vec<ResolvedSource>,
    /// Every target in force ([`LoadedConfig::targets`]) with its secrets.
    pub targets: Vec<ResolvedTarget>,
    /// The `[[notifier]]` entries with their secrets.
    pub notifiers: Vec<ResolvedNotifier>,
}

impl Settings {
    /// Looks up every secret the config names; a missing one is an error naming the variable.
    pub fn resolve(loaded: LoadedConfig, env: EnvLookup<'_>) -> Result<Self, ConfigError> {
        let token_env = &loaded.config.server.api_token_env;
        let api_token = env(token_env).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "server.api_token_env names `{token_env}`, which is not set: the admin API \
                 and /v1/events need a bearer token"
            ))
        })?;
        let tokens = tokens::resolve(&loaded.config.tokens, &api_token, env)
            .map_err(|problems| ConfigError::Invalid(problems.join("\n")))?;
        let sources = loaded
            .config
            .sources
            .iter()
            .map(|source| source.resolve(env))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ConfigError::Invalid)?;
        let targets = loaded
            .targets()
            .iter()
            .map(|target| target.resolve(env))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ConfigError::Invalid)?;
        let notifiers = loaded
            .config
            .notifiers
            .iter()
            .map(|notifier| notifier.resolve(env))
            .collect::<Result<Vec<_>, _>>()
            .map_err(ConfigError::Invalid)?;
        Ok(Self {
            loaded,
            api_token,
            tokens,
            sources,
            targets,
            notifiers,
        })
    }
}

#[cfg(test)]
mod tests;
