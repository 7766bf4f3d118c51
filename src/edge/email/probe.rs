//! `switchyard mailbox test --config F --source S`: signs in to one email source's mailbox once
//! (getting an OAuth2 token first if it uses one), examines the mailbox read-only and prints its
//! message count and UIDVALIDITY, or exactly which step failed. Writes nothing but a refresh
//! token the provider rotated to (kept, as the daemon would, so the daemon can still sign in).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use switchyard_email::{
    Auth, Credentials, EmailSourceConfig, OAuth2Flow, SinkError, TokenStore, probe,
};
use switchyard_store::Store;

use super::StoredTokens;
use crate::config::{LoadedConfig, ResolvedSource, SourceConfig, process_env};

/// The longest one IMAP step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// For flows without a refresh token: nothing to keep.
struct NoTokens;

impl TokenStore for NoTokens {
    async fn stored_refresh_token(&self, _: &str, _: &str) -> Result<Option<String>, SinkError> {
        Ok(None)
    }

    async fn store_refresh_token(&self, _: &str, _: &str, _: &str) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Runs the test and prints what it found; an error names the step that failed.
pub async fn mailbox_test(config_path: &Path, source: &str) -> anyhow::Result<()> {
    let loaded = LoadedConfig::load(config_path)?;
    let Some(config) = loaded.config.sources.iter().find_map(|s| match s {
        SourceConfig::Email(c) if c.name == source => Some(c.clone()),
        _ => None,
    }) else {
        bail!(
            "{} has no email source named `{source}`",
            config_path.display()
        );
    };
    config
        .validate()
        .with_context(|| format!("email source `{source}`"))?;
    let ResolvedSource::Email { credentials, .. } = SourceConfig::Email(config.clone())
        .resolve(&process_env)
        .map_err(anyhow::Error::msg)?
    else {
        bail!("email source `{source}` did not resolve to a mailbox");
    };
    println!(
        "mailbox `{source}`: {} at {}:{} ({}), as {}",
        config.mailbox,
        config.host,
        config.port(),
        describe_auth(&config),
        config.username
    );
    let rotates = matches!(&config.oauth2, Some(o) if o.flow == OAuth2Flow::RefreshToken);
    let found = if rotates {
        // A rotated refresh token lives in the database: read it, and keep a new one.
        let url = loaded.database_url().replace("mode=rwc", "mode=rw");
        let store = Store::open(&url, &loaded.config.database.store_options())
            .await
            .context("step `database` failed: cannot open the database (where rotated refresh tokens are kept; run `switchyard migrate` first)")?;
        probe(&config, &credentials, &StoredTokens(store), STEP_TIMEOUT).await
    } else {
        probe(&config, &credentials, &NoTokens, STEP_TIMEOUT).await
    };
    let found = found.map_err(|error| {
        anyhow::anyhow!("step `{}` failed: {}", error.step, error.error.chain())
    })?;
    if matches!(credentials, Credentials::OAuth2(_)) {
        println!("  token:   ok");
    }
    println!("  sign-in: ok ({})", found.signed_in_with);
    println!(
        "  select:  ok: {} messages, UIDVALIDITY {}, UIDNEXT {}",
        found.messages,
        found.uidvalidity.map_or("?".into(), |v| v.to_string()),
        found.uid_next.map_or("?".into(), |v| v.to_string()),
    );
    println!(
        "  start_from = \"beginning\" would take {} message{}; \"now\" (the default) takes only mail that arrives later",
        found.messages,
        if found.messages == 1 { "" } else { "s" }
    );
    Ok(())
}

fn describe_auth(config: &EmailSourceConfig) -> String {
    match (&config.auth, &config.oauth2) {
        (Auth::Oauth2, Some(oauth2)) => format!("oauth2, flow {}", oauth2.flow.as_str()),
        _ => "password".into(),
    }
}
