//! The `[[source]]` entry for one Slack app (`kind = "slack"`, the tag the daemon's enum adds).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::SlackError;

/// One Slack app delivering Events API callbacks to `POST /v1/ingest/slack/<name>`.
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
    /// Name of the environment variable that holds the app's signing secret (never the secret
    /// itself). Required: a source without a secret refuses everything.
    pub signing_secret_env: String,
    /// Slack `team_id` -> tenant. One app can be installed in several workspaces; a callback
    /// from a team not listed here is refused as `unauthorized_source`.
    pub teams: BTreeMap<String, String>,
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
        if !is_env_var_name(&self.signing_secret_env) {
            return Err(SlackError::InvalidSecretEnv {
                source_name: self.name.clone(),
                value: self.signing_secret_env.clone(),
            });
        }
        if self.teams.is_empty() {
            return Err(SlackError::NoTeams {
                source_name: self.name.clone(),
            });
        }
        if let Some((team_id, _)) = self
            .teams
            .iter()
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
}

/// POSIX-style names only: a typo such as a pasted secret (`xoxb-...`, spaces) is caught at load.
fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
