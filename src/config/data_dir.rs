//! Where an unset `[database] url` keeps its SQLite file, and the command line's overrides of
//! `server.listen` and `database.url` (`--listen`/`SWITCHYARD_LISTEN`,
//! `--database`/`SWITCHYARD_DATABASE_URL`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{ConfigError, EnvLookup, LoadedConfig};

/// The SQLite file an unset `[database] url` names.
pub const DEFAULT_FILE: &str = "switchyard.db";

/// The folder holding the default SQLite file: a `switchyard.db` already next to the config
/// file (where releases before 0.x kept it, so an existing database is never left behind), else
/// systemd's `$STATE_DIRECTORY`, else `$XDG_DATA_HOME/switchyard`, else
/// `$HOME/.local/share/switchyard`, else the config file's folder.
pub fn default_data_dir(base_dir: &Path, env: EnvLookup<'_>) -> PathBuf {
    if base_dir.join(DEFAULT_FILE).exists() {
        return base_dir.to_path_buf();
    }
    let absolute = |value: String| Some(PathBuf::from(value)).filter(|path| path.is_absolute());
    if let Some(dir) = env("STATE_DIRECTORY")
        .and_then(|dirs| dirs.split(':').next().map(str::to_owned))
        .and_then(absolute)
    {
        return dir;
    }
    if let Some(dir) = env("XDG_DATA_HOME").and_then(absolute) {
        return dir.join("switchyard");
    }
    if let Some(home) = env("HOME").and_then(absolute) {
        return home.join(".local/share/switchyard");
    }
    base_dir.to_path_buf()
}

/// Command-line values that win over the config file (and over their environment variables,
/// which clap reads into the same fields).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen ADDR` or `SWITCHYARD_LISTEN`.
    pub listen: Option<String>,
    /// `--database URL` or `SWITCHYARD_DATABASE_URL`; a relative SQLite path is relative to the
    /// current directory.
    pub database: Option<String>,
}

impl Overrides {
    /// Puts the overrides into a loaded config; a bad address is a config error (exit 78).
    pub fn apply(&self, loaded: &mut LoadedConfig) -> Result<(), ConfigError> {
        if let Some(listen) = &self.listen {
            let addr: SocketAddr = listen.trim().parse().map_err(|error| {
                ConfigError::Invalid(format!(
                    "--listen / SWITCHYARD_LISTEN `{listen}` is not an address and port such as \
                     127.0.0.1:8080 or [::1]:8080: {error}"
                ))
            })?;
            loaded.config.server.listen = addr;
        }
        if let Some(url) = &self.database {
            let url = url.trim();
            let known = [
                "sqlite:",
                "postgres://",
                "postgresql://",
                "mysql://",
                "mariadb://",
            ];
            if !known.iter().any(|scheme| url.starts_with(scheme)) {
                return Err(ConfigError::Invalid(format!(
                    "--database / SWITCHYARD_DATABASE_URL `{url}` is not a database URL: use \
                     sqlite://FILE, postgres://... or mysql://..."
                )));
            }
            if super::is_in_memory_sqlite(url) {
                return Err(ConfigError::Invalid(format!(
                    "--database / SWITCHYARD_DATABASE_URL `{url}` is an in-memory SQLite \
                     database, which loses every delivery at exit; use sqlite://FILE"
                )));
            }
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            loaded.config.database.url = Some(super::resolve_database_url(url, &cwd));
        }
        Ok(())
    }
}

/// Creates the folder of a SQLite file that may be created (`mode=rwc`): the data directory
/// need not exist on a fresh machine.
pub fn create_sqlite_folder(url: &str) -> std::io::Result<()> {
    let Some(rest) = url.strip_prefix("sqlite://") else {
        return Ok(());
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if !query.split('&').any(|pair| pair == "mode=rwc") || path.is_empty() {
        return Ok(());
    }
    match Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent),
        _ => Ok(()),
    }
}
