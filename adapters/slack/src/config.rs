//! The `[[source]]` entry for one Slack app (`kind = "slack"`, the tag the daemon's enum adds).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::SlackError;

/// One Slack app delivering Events API callbacks to `POST /v1/ingest/slack/<name>`, or (with
/// `mode = "socket"`) over Socket Mode connections the daemon opens with an app-level token.
///
/// ```toml
/// [[source]]
/// kind = "slack"
/// name = "acme-slack"
/// signing_secret_env = "SLACK_SIGNING_SECRET"
/// teams = { T0123ABC = "acme" }
/// urgent_keywords = ["urgent", ":rotating_light:"]
/// urgent_channels = ["C0INCIDENTS"]
/// ignore_bots = true
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackSourceConfig {
    /// The source's name: the last path segment of its ingest URL and the `source` of its
    /// ledger rows. Only `A-Z a-z 0-9 _ -`.
    pub name: String,
    /// How Slack reaches this source: `events_api` (HTTP callbacks, the default) or `socket`
    /// (Socket Mode: the daemon opens the connections, no public endpoint needed).
    #[serde(default)]
    pub mode: SlackMode,
    /// Name of the environment variable that holds the app's signing secret (never the secret
    /// itself). Required in `events_api` mode; in `socket` mode only when the source also takes
    /// HTTP callbacks (interactivity posted to its URL). Without one, HTTP callbacks are refused.
    #[serde(default)]
    pub signing_secret_env: Option<String>,
    /// Name of the environment variable holding the app-level token (`xapp-...`, scope
    /// `connections:write`) that opens Socket Mode connections. Required in `socket` mode.
    #[serde(default)]
    pub app_token_env: Option<String>,
    /// Slack's Web API base URL (`apps.connections.open`, `chat.postMessage`, `chat.update`).
    /// Default `https://slack.com/api/`; tests point it at a local peer.
    #[serde(default = "default_api_base_url")]
    pub api_base_url: String,
    /// How many Socket Mode connections to keep open (1 to 10, default 2): Slack spreads
    /// envelopes across them, and a refresh of one never leaves the source unconnected.
    #[serde(default = "default_connections")]
    pub connections: u8,
    /// Name of the environment variable holding the bot token (`xoxb-...`) that posts and
    /// updates approval messages (`chat.postMessage`, `chat.update`). Optional: without it,
    /// waits cannot name this source in `notify`.
    #[serde(default)]
    pub bot_token_env: Option<String>,
    /// Slack `team_id` -> tenant. One app can be installed in several workspaces; a callback
    /// from a team not listed here (nor in an org of `enterprises`) is refused as
    /// `unauthorized_source`.
    #[serde(default)]
    pub teams: BTreeMap<String, String>,
    /// Enterprise Grid org-wide installs: `enterprise_id` -> tenant, for events from any
    /// workspace of that org not listed in `teams` (a listed workspace keeps its own tenant).
    /// The org must be among the delivery's `authorizations`.
    #[serde(default)]
    pub enterprises: BTreeMap<String, String>,
    /// Words or emoji codes that make a message `urgent_message`: case-insensitive, matched as
    /// a whole word (`urgent` does not match `urgently`) or, for `:emoji:` codes, anywhere.
    #[serde(default)]
    pub urgent_keywords: Vec<String>,
    /// Channel ids in which every message is `urgent_message`.
    #[serde(default)]
    pub urgent_channels: Vec<String>,
    /// Treat posts by bots and apps (`bot_id`, `bot_message`, Slackbot) as `ineligible`, so a
    /// workflow that posts to Slack can never trigger itself. Default `true`.
    #[serde(default = "default_true")]
    pub ignore_bots: bool,
}

fn default_true() -> bool {
    true
}

/// Slack's public Web API.
pub const DEFAULT_API_BASE_URL: &str = "https://slack.com/api/";

fn default_api_base_url() -> String {
    DEFAULT_API_BASE_URL.to_owned()
}

fn default_connections() -> u8 {
    2
}

/// Slack allows at most this many Socket Mode connections per app.
pub const MAX_CONNECTIONS: u8 = 10;

/// How Slack reaches a source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlackMode {
    /// Slack POSTs Events API callbacks to the source's URL.
    #[default]
    EventsApi,
    /// The daemon opens Socket Mode connections with the app-level token.
    Socket,
}

impl SlackSourceConfig {
    /// Checks what serde cannot: a URL-safe name, an env-var name for the secret, at least one
    /// team, and no blank team ids, tenants, keywords or channels.
    pub fn validate(&self) -> Result<(), SlackError> {
        let url_safe = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if self.name.is_empty() || !self.name.chars().all(url_safe) {
            return Err(SlackError::InvalidName {
                name: self.name.clone(),
            });
        }
        let setting = |detail: String| SlackError::InvalidSetting {
            source_name: self.name.clone(),
            detail,
        };
        match (&self.signing_secret_env, self.mode) {
            (Some(env), _) if !is_env_var_name(env) => {
                return Err(SlackError::InvalidSecretEnv {
                    source_name: self.name.clone(),
                    value: env.clone(),
                });
            }
            (None, SlackMode::EventsApi) => {
                return Err(setting(
                    "`signing_secret_env` is required in mode \"events_api\"".into(),
                ));
            }
            _ => {}
        }
        for (key, env) in [
            ("app_token_env", &self.app_token_env),
            ("bot_token_env", &self.bot_token_env),
        ] {
            if let Some(env) = env
                && !is_env_var_name(env)
            {
                return Err(setting(format!(
                    "`{key}` `{env}` is not an environment variable name"
                )));
            }
        }
        if self.mode == SlackMode::Socket && self.app_token_env.is_none() {
            return Err(setting(
                "`app_token_env` (an app-level xapp- token) is required in mode \"socket\"".into(),
            ));
        }
        if self.connections == 0 || self.connections > MAX_CONNECTIONS {
            return Err(setting(format!(
                "`connections` must be 1 to {MAX_CONNECTIONS}, not {}",
                self.connections
            )));
        }
        match url::Url::parse(&self.api_base_url) {
            Ok(url)
                if matches!(url.scheme(), "https" | "http") && self.api_base_url.ends_with('/') => {
            }
            _ => {
                return Err(setting(format!(
                    "`api_base_url` must be an http(s) URL ending in `/`, not {:?}",
                    self.api_base_url
                )));
            }
        }
        if self.teams.is_empty() && self.enterprises.is_empty() {
            return Err(SlackError::NoTeams {
                source_name: self.name.clone(),
            });
        }
        if let Some((team_id, _)) = self
            .teams
            .iter()
            .chain(&self.enterprises)
            .find(|(team, tenant)| team.trim().is_empty() || tenant.trim().is_empty())
        {
            return Err(SlackError::BlankTeamEntry {
                source_name: self.name.clone(),
                team_id: team_id.clone(),
            });
        }
        if self.urgent_keywords.iter().any(|k| k.trim().is_empty()) {
            return Err(SlackError::BlankKeyword {
                source_name: self.name.clone(),
            });
        }
        if self.urgent_channels.iter().any(|c| c.trim().is_empty()) {
            return Err(SlackError::BlankChannel {
                source_name: self.name.clone(),
            });
        }
        Ok(())
    }

    /// The tenant that owns Slack team `team_id`, if any.
    pub fn tenant_for(&self, team_id: &str) -> Option<&str> {
        self.teams.get(team_id).map(String::as_str)
    }

    /// The tenant of an Enterprise Grid org installed org-wide, if bound.
    pub fn tenant_for_enterprise(&self, enterprise_id: &str) -> Option<&str> {
        self.enterprises.get(enterprise_id).map(String::as_str)
    }

    /// Every tenant this source can deliver for.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.teams
            .values()
            .chain(self.enterprises.values())
            .map(String::as_str)
    }
}

/// POSIX-style names only: a typo such as a pasted secret (`xoxb-...`, spaces) is caught at load.
fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
