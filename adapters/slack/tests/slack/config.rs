//! The `[[source]]` entry as an admin writes it, and every way `validate` refuses one.

use switchyard_slack::{SlackError, SlackSourceConfig};

use crate::{File, Source, source};

#[test]
fn the_documented_entry_parses_inside_a_kind_tagged_source() {
    let config = source();
    assert_eq!(config.name, "acme-slack");
    assert_eq!(
        config.signing_secret_env.as_deref(),
        Some("SLACK_SIGNING_SECRET")
    );
    assert_eq!(config.tenant_for("T0123ABC"), Some("acme"));
    assert_eq!(config.tenant_for("T0999XYZ"), Some("globex"));
    assert_eq!(config.tenant_for("T0NOBODY"), None);
    assert_eq!(config.urgent_keywords, ["urgent", ":rotating_light:"]);
    assert_eq!(config.urgent_channels, ["C0INCIDENTS"]);
    assert!(config.ignore_bots, "ignore_bots defaults to true");
}

fn parse(toml_text: &str) -> Result<SlackSourceConfig, toml::de::Error> {
    let file: File = toml::from_str(toml_text)?;
    let Source::Slack(config) = file.source.into_iter().next().unwrap();
    Ok(config)
}

#[test]
fn optional_keys_default_and_typos_are_errors() {
    let minimal = parse(
        r#"
        [[source]]
        kind = "slack"
        name = "s"
        signing_secret_env = "S"
        teams = { T1 = "acme" }
        "#,
    )
    .unwrap();
    assert!(minimal.urgent_keywords.is_empty());
    assert!(minimal.urgent_channels.is_empty());
    assert!(minimal.ignore_bots);
    minimal.validate().unwrap();

    let typo = parse(
        r#"
        [[source]]
        kind = "slack"
        name = "s"
        signing_secret_env = "S"
        teams = { T1 = "acme" }
        ignore_bot = false
        "#,
    )
    .unwrap_err();
    assert!(typo.to_string().contains("ignore_bot"), "{typo}");

    // The secret is required for HTTP callbacks: no secret, no source (fail closed).
    let no_secret = parse(
        r#"
        [[source]]
        kind = "slack"
        name = "s"
        teams = { T1 = "acme" }
        "#,
    )
    .unwrap()
    .validate()
    .unwrap_err();
    assert!(
        no_secret.to_string().contains("signing_secret_env"),
        "{no_secret}"
    );

    // Socket Mode needs the app-level token instead, and keeps two connections by default.
    let socket = parse(
        r#"
        [[source]]
        kind = "slack"
        name = "s"
        mode = "socket"
        app_token_env = "SLACK_APP_TOKEN"
        teams = { T1 = "acme" }
        "#,
    )
    .unwrap();
    socket.validate().unwrap();
    assert_eq!(socket.connections, 2);
    assert_eq!(socket.api_base_url, "https://slack.com/api/");
    let mut no_app_token = socket.clone();
    no_app_token.app_token_env = None;
    assert!(
        no_app_token
            .validate()
            .unwrap_err()
            .to_string()
            .contains("app_token_env"),
    );
    for (connections, api_base_url) in [
        (0, "https://slack.com/api/"),
        (11, "https://slack.com/api/"),
        (2, "ftp://x/"),
        (2, "https://slack.com/api"),
    ] {
        let mut bad = socket.clone();
        bad.connections = connections;
        bad.api_base_url = api_base_url.into();
        assert!(
            matches!(bad.validate(), Err(SlackError::InvalidSetting { .. })),
            "{connections} {api_base_url}"
        );
    }
    // An org-wide install alone is enough to bind tenants.
    let mut grid = socket.clone();
    grid.teams.clear();
    grid.enterprises = [("E0ORG".to_string(), "acme".to_string())].into();
    grid.validate().unwrap();
}

fn valid() -> SlackSourceConfig {
    source()
}

/// A config and a check of the error `validate` must give for it.
type Case = (SlackSourceConfig, fn(&SlackError) -> bool);

#[test]
fn validate_names_each_problem() {
    let cases: Vec<Case> = vec![
        (
            SlackSourceConfig {
                name: "acme slack".into(),
                ..valid()
            },
            |e| matches!(e, SlackError::InvalidName { .. }),
        ),
        (
            SlackSourceConfig {
                name: "acme/slack".into(),
                ..valid()
            },
            |e| matches!(e, SlackError::InvalidName { .. }),
        ),
        (
            SlackSourceConfig {
                name: String::new(),
                ..valid()
            },
            |e| matches!(e, SlackError::InvalidName { .. }),
        ),
        (
            SlackSourceConfig {
                signing_secret_env: Some(String::new()),
                ..valid()
            },
            |e| matches!(e, SlackError::InvalidSecretEnv { .. }),
        ),
        (
            SlackSourceConfig {
                signing_secret_env: Some("8f742231b10e-secret".into()),
                ..valid()
            },
            |e| matches!(e, SlackError::InvalidSecretEnv { .. }),
        ),
        (
            SlackSourceConfig {
                teams: Default::default(),
                ..valid()
            },
            |e| matches!(e, SlackError::NoTeams { .. }),
        ),
        (
            SlackSourceConfig {
                teams: [("T1".to_string(), " ".to_string())].into(),
                ..valid()
            },
            |e| matches!(e, SlackError::BlankTeamEntry { team_id, .. } if team_id == "T1"),
        ),
        (
            SlackSourceConfig {
                urgent_keywords: vec!["urgent".into(), "  ".into()],
                ..valid()
            },
            |e| matches!(e, SlackError::BlankKeyword { .. }),
        ),
        (
            SlackSourceConfig {
                urgent_channels: vec![String::new()],
                ..valid()
            },
            |e| matches!(e, SlackError::BlankChannel { .. }),
        ),
    ];
    for (config, expected) in cases {
        let err = config.validate().unwrap_err();
        assert!(expected(&err), "{config:?} gave {err:?}");
        assert_eq!(err.outcome(), None, "config errors have no intake outcome");
        assert!(!err.to_string().is_empty());
    }
    SlackSourceConfig {
        name: "Acme_slack-2".into(),
        ..valid()
    }
    .validate()
    .unwrap();
}
