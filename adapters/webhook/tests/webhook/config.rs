//! WebhookSourceConfig: what parses, its defaults, and what validate() refuses.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use switchyard_webhook::{ConfigError, WebhookSourceConfig};

use super::source;

fn parse(value: serde_json::Value) -> Result<WebhookSourceConfig, serde_json::Error> {
    serde_json::from_value(value)
}

#[test]
fn the_documented_entry_parses() {
    let config = parse(json!({
        "name": "zendesk-acme",
        "tenant": "acme",
        "signing_secret_env": "ZENDESK_ACME_SECRET",
        "account_id": 22129848,
        "timestamp_tolerance": "5m",
        "insecure_skip_signature": false,
    }))
    .unwrap();
    assert_eq!(config.account_id, Some(22129848));
    assert_eq!(config.timestamp_tolerance, Duration::from_secs(300));
    config.validate().unwrap();
    assert!(config.requires_signature());
}

#[test]
fn optional_keys_have_safe_defaults() {
    let config = parse(json!({
        "name": "zendesk-acme",
        "tenant": "acme",
        "signing_secret_env": "ZENDESK_ACME_SECRET",
    }))
    .unwrap();
    assert_eq!(config, source());
    assert_eq!(config.timestamp_tolerance, Duration::from_secs(300));
    assert!(!config.insecure_skip_signature);
    assert_eq!(config.account_id, None);

    let config = parse(json!({
        "name": "n", "tenant": "t", "signing_secret_env": "S", "timestamp_tolerance": "90s",
    }))
    .unwrap();
    assert_eq!(config.timestamp_tolerance, Duration::from_secs(90));
}

#[test]
fn typos_and_bad_values_are_errors() {
    let typo = parse(json!({
        "name": "n", "tenant": "t", "signing_secret": "S",
    }))
    .unwrap_err();
    assert!(
        typo.to_string().contains("unknown field `signing_secret`"),
        "{typo}"
    );

    let duration = parse(json!({
        "name": "n", "tenant": "t", "signing_secret_env": "S", "timestamp_tolerance": "5 parsecs",
    }));
    assert!(duration.is_err());
}

#[test]
fn the_daemon_can_wrap_it_in_an_enum_tagged_by_kind() {
    #[derive(Debug, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Source {
        Webhook(WebhookSourceConfig),
    }
    let Source::Webhook(config) = serde_json::from_value(json!({
        "kind": "webhook",
        "name": "zendesk-acme",
        "tenant": "acme",
        "signing_secret_env": "ZENDESK_ACME_SECRET",
    }))
    .unwrap();
    assert_eq!(config, source());

    let typo = serde_json::from_value::<Source>(json!({
        "kind": "webhook", "name": "n", "tenant": "t", "signing_secret_env": "S", "tennant": "x",
    }));
    assert!(typo.is_err());
}

#[test]
fn validate_refuses_what_would_be_unsafe_or_unreachable() {
    let cases: Vec<(WebhookSourceConfig, ConfigError)> = vec![
        (
            WebhookSourceConfig {
                signing_secret_env: None,
                ..source()
            },
            ConfigError::MissingSecret("zendesk-acme".into()),
        ),
        (
            WebhookSourceConfig {
                name: String::new(),
                ..source()
            },
            ConfigError::EmptyName,
        ),
        (
            WebhookSourceConfig {
                name: "zendesk/acme".into(),
                ..source()
            },
            ConfigError::NameNotUrlSafe("zendesk/acme".into()),
        ),
        (
            WebhookSourceConfig {
                name: "zendesk acme".into(),
                ..source()
            },
            ConfigError::NameNotUrlSafe("zendesk acme".into()),
        ),
        (
            WebhookSourceConfig {
                tenant: " ".into(),
                ..source()
            },
            ConfigError::EmptyTenant("zendesk-acme".into()),
        ),
        (
            WebhookSourceConfig {
                signing_secret_env: Some(String::new()),
                ..source()
            },
            ConfigError::MalformedSecretEnv("zendesk-acme".into()),
        ),
        (
            WebhookSourceConfig {
                insecure_skip_signature: true,
                ..source()
            },
            ConfigError::ConflictingSignatureSettings("zendesk-acme".into()),
        ),
        (
            WebhookSourceConfig {
                timestamp_tolerance: Duration::ZERO,
                ..source()
            },
            ConfigError::ZeroTolerance("zendesk-acme".into()),
        ),
    ];
    for (config, expected) in cases {
        assert_eq!(config.validate(), Err(expected), "{config:?}");
    }

    let message = ConfigError::MissingSecret("zendesk-acme".into()).to_string();
    assert!(
        message.contains("webhook source `zendesk-acme` needs a secret"),
        "{message}"
    );
}

#[test]
fn unsigned_deliveries_need_the_explicit_opt_in() {
    let insecure = WebhookSourceConfig {
        signing_secret_env: None,
        insecure_skip_signature: true,
        ..source()
    };
    insecure.validate().unwrap();
    assert!(!insecure.requires_signature());
    assert!(source().requires_signature());
}
