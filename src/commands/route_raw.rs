//! `switchyard route --source NAME --body FILE [--header K:V ...] [--skip-verify]`: a dry run of
//! a raw body as a source's sender would send it. The source's channel verifies it (with the
//! real secrets from the environment, or not at all with `--skip-verify`) and normalises it
//! exactly as the daemon does (`edge::Channel::dry_run`); the event it makes is then explained
//! as `route --event` explains one. Writes nothing, submits nothing.

use std::path::Path;

use anyhow::Context;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::config::{LoadedConfig, Settings, process_env};
use crate::edge::{DryRun, Unverified, channel_of};
use crate::intake::DeliveryBody;
use crate::live::Live;

/// What `route` was given for a raw body.
#[derive(Debug)]
pub struct RawArgs<'a> {
    pub source: &'a str,
    pub body: &'a Path,
    /// `Name:Value` each.
    pub headers: &'a [String],
    pub skip_verify: bool,
    pub revision: Option<&'a str>,
}

/// Prints what the source's channel made of the body, and where its event would go.
pub async fn route_raw(config_path: &Path, args: RawArgs<'_>) -> anyhow::Result<()> {
    let loaded = LoadedConfig::load(config_path)?;
    let body =
        std::fs::read(args.body).with_context(|| format!("cannot read {}", args.body.display()))?;
    let headers = parse_headers(args.headers)?;
    let candidates: Vec<_> = loaded
        .config
        .sources
        .iter()
        .filter(|s| s.name() == args.source)
        .collect();
    let source = match candidates.as_slice() {
        [] => anyhow::bail!(
            "no [[source]] is named `{}` (sources: {})",
            args.source,
            loaded
                .config
                .sources
                .iter()
                .map(|s| format!("{} ({})", s.name(), s.kind()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        [one] => *one,
        [first, ..] => {
            println!(
                "note: several sources are named `{}`; trying the first, of kind {}",
                args.source,
                first.kind()
            );
            *first
        }
    };
    // The source's own secrets, from the environment: verifying needs them. A source that
    // signs nothing (a mailbox's password is for IMAP) needs none for a dry run.
    let verifies = !args.skip_verify && source.settings().signing_secret_env().is_some();
    let resolved = if verifies {
        source.resolve(&process_env)
    } else {
        source.resolve(&stand_in_env)
    }
    .map_err(|error| {
        anyhow::anyhow!("{error} (set it to verify, or pass --skip-verify to map the body alone)")
    })?;
    // The rest of the config needs no real secret for a dry run.
    let settings =
        Settings::resolve(loaded.clone(), &stand_in_env).context("the config does not resolve")?;
    let live = Live::new(settings);
    let channel = channel_of(source).context("the source's kind has no channel")?;
    let request = Unverified::detached(headers, body.into());
    let run = DryRun {
        name: source.name(),
        request: &request,
        live: &live,
        skip_verify: args.skip_verify,
    };
    println!(
        "source: {} source `{}` ({})",
        source.kind(),
        source.name(),
        if args.skip_verify {
            "verification skipped"
        } else {
            "verified with the secrets in the environment"
        }
    );
    let delivery = match channel.dry_run(&resolved, &run) {
        None => anyhow::bail!("{} sources cannot be dry-run from a body", source.kind()),
        Some(Err(answer)) => {
            let status = answer.status();
            let text = axum::body::to_bytes(answer.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            println!(
                "refused before intake: HTTP {status} {}",
                String::from_utf8_lossy(&text)
            );
            return Ok(());
        }
        Some(Ok(delivery)) => delivery,
    };
    println!("delivery_id: {}", delivery.delivery_id);
    if let Some(key) = &delivery.message_key {
        println!("message_key: {key}");
    }
    match &delivery.body {
        DeliveryBody::Route(event) => {
            println!(
                "event: {}",
                serde_json::to_string_pretty(event).unwrap_or_default()
            );
            super::route::explain_event(
                &loaded,
                event.channel,
                &event.event_type,
                &event.tenant_id,
                &event.target_entity_id,
                &event.payload,
                args.revision,
            )
            .await
        }
        DeliveryBody::Ineligible { detail, .. } => {
            println!("outcome: ineligible ({detail})");
            Ok(())
        }
        DeliveryBody::Invalid { detail } => {
            println!("outcome: invalid_event ({detail})");
            Ok(())
        }
        DeliveryBody::Refused {
            outcome, detail, ..
        } => {
            println!("outcome: {outcome} ({detail})");
            Ok(())
        }
    }
}

/// `Name:Value` pairs as a header map.
fn parse_headers(pairs: &[String]) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for pair in pairs {
        let (name, value) = pair
            .split_once(':')
            .with_context(|| format!("--header `{pair}` is not `Name:Value`"))?;
        headers.append(
            HeaderName::from_bytes(name.trim().as_bytes())
                .with_context(|| format!("`{name}` is no header name"))?,
            HeaderValue::from_str(value.trim())
                .with_context(|| format!("`{value}` is no header value"))?,
        );
    }
    Ok(headers)
}

/// The environment, with a stand-in for every variable it lacks: distinct per name (tokens
/// may not share secrets) and shaped as a Standard Webhooks key (`whsec_` + base64 of 32
/// bytes), which every other secret accepts too. Never used to verify.
fn stand_in_env(var: &str) -> Option<String> {
    process_env(var).or_else(|| {
        let bytes = Sha256::digest(format!("switchyard route stand-in {var}").as_bytes());
        Some(format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ))
    })
}
