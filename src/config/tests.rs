//! Config parsing and validation, as an admin's typos would meet them.

use std::path::{Path, PathBuf};

use super::*;

/// The principals the workflows of these tests run as.
const PRINCIPALS: &str = "[[principal]]\nid = \"t-agent\"\ntenant = \"t\"\nkind = \"service\"\n\
                          status = \"active\"\n\n[[principal]]\nid = \"acme-agent\"\n\
                          tenant = \"acme\"\nkind = \"service\"\nstatus = \"active\"\n\n";

fn parse(text: &str) -> Result<LoadedConfig, ConfigError> {
    parse_alone(&format!("{text}\n{PRINCIPALS}"))
}

/// Parses `text` without the tests' principals.
fn parse_alone(text: &str) -> Result<LoadedConfig, ConfigError> {
    LoadedConfig::parse(
        text,
        Path::new("/etc/switchyard/switchyard.toml"),
        PathBuf::from("/etc/switchyard"),
    )
}

fn env(name: &str) -> Option<String> {
    if name == "TRIAGE_WORKER_SECRET"
        || name == "BILLING_EVENTS_SECRET"
        || name == "ALERT_WEBHOOK_SECRET"
    {
        return Some("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".into());
    }
    [
        "SWITCHYARD_API_TOKEN",
        "ZENDESK_ACME_SECRET",
        "SLACK_SIGNING_SECRET",
        "SUPPORT_IMAP_PASSWORD",
        "GITHUB_WEBHOOK_SECRET",
        "STRIPE_WEBHOOK_SECRET",
        "SHOPIFY_WEBHOOK_SECRET",
        "INTERCOM_CLIENT_SECRET",
    ]
    .contains(&name)
    .then(|| format!("value-of-{name}"))
}

#[test]
fn the_example_config_parses_and_resolves() {
    let text = include_str!("../../examples/switchyard.toml");
    let loaded = parse_alone(text).expect("example parses");
    let settings = Settings::resolve(loaded, &env).expect("example resolves");
    assert_eq!(settings.api_token, "value-of-SWITCHYARD_API_TOKEN");
    assert!(!settings.loaded.workflows().is_empty());
}

#[test]
fn the_all_sources_example_parses_and_resolves() {
    let loaded = parse_alone(include_str!("../../examples/all-sources.toml")).expect("parses");
    let kinds: Vec<&str> = loaded
        .config
        .sources
        .iter()
        .map(SourceConfig::kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "webhook",
            "slack",
            "email",
            "cloudevents",
            "json_webhook",
            "json_webhook",
            "json_webhook",
            "json_webhook",
            "web_form"
        ]
    );
    Settings::resolve(loaded, &env).expect("resolves");
}

#[test]
fn defaults_give_an_embedded_sqlite_in_the_data_directory() {
    let loaded = parse("").expect("an empty file is valid");
    assert_eq!(loaded.config.server.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(loaded.config.server.body_limit, 1024 * 1024);
    assert_eq!(loaded.config.database.durability, Durability::Full);
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(
        loaded.database_url_with(&env(&[
            ("STATE_DIRECTORY", "/var/lib/switchyard"),
            ("HOME", "/home/a")
        ])),
        "sqlite:///var/lib/switchyard/switchyard.db?mode=rwc"
    );
    assert_eq!(
        loaded.database_url_with(&env(&[("XDG_DATA_HOME", "/d"), ("HOME", "/home/a")])),
        "sqlite:///d/switchyard/switchyard.db?mode=rwc"
    );
    assert_eq!(
        loaded.database_url_with(&env(&[("XDG_DATA_HOME", "rel"), ("HOME", "/home/a")])),
        "sqlite:///home/a/.local/share/switchyard/switchyard.db?mode=rwc",
        "a relative XDG_DATA_HOME is ignored, as the XDG spec says"
    );
    assert_eq!(
        loaded.database_url_with(&env(&[])),
        "sqlite:///etc/switchyard/switchyard.db?mode=rwc"
    );
    // A database already next to the config file (the old default) stays in use.
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("switchyard.db"), "").expect("write");
    let old = LoadedConfig::parse(
        &format!("\n{PRINCIPALS}"),
        &dir.path().join("s.toml"),
        dir.path().to_path_buf(),
    )
    .expect("valid");
    assert_eq!(
        old.database_url_with(&env(&[("XDG_DATA_HOME", "/d")])),
        format!("sqlite://{}/switchyard.db?mode=rwc", dir.path().display())
    );
    assert_eq!(
        resolve_database_url("sqlite:///var/lib/s.db?mode=rw", Path::new("/x")),
        "sqlite:///var/lib/s.db?mode=rw"
    );
    assert_eq!(
        resolve_database_url("postgres://u@h/db", Path::new("/x")),
        "postgres://u@h/db"
    );
}

#[test]
fn unknown_keys_are_errors_naming_the_key_and_line() {
    let error = parse("[server]\nlisten = \"127.0.0.1:1\"\nlisen = 2\n").expect_err("typo");
    let text = error.to_string();
    assert!(
        text.contains("unknown field `lisen`") && text.contains("line 3"),
        "{text}"
    );

    let error = parse("[[workflow]]\nid = \"a\"\ntenant = \"t\"\nstatus = \"live\"\nrun_as = \"t-agent\"\ntriggers = []\nprioritee = 1\n")
        .expect_err("typo in a workflow");
    assert!(error.to_string().contains("prioritee"), "{error}");
}

#[test]
fn trigger_conditions_are_checked_at_load_and_errors_name_the_line() {
    let workflow = |when: &str| {
        format!(
            "[[workflow]]\nid = \"a\"\ntenant = \"t\"\nstatus = \"live\"\nrun_as = \"t-agent\"\ntriggers = [\n  \
             {{ channel = \"webhook\", event_type = \"ticket.updated\", when = {when} }},\n]\n"
        )
    };
    let loaded = parse(&workflow(
        r#"{ any = [ { field = "priority", equals = "urgent" }, { field = "tags", in = ["vip"] } ] }"#,
    ))
    .expect("a valid condition");
    let when = loaded.workflows()[0].triggers[0]
        .when
        .clone()
        .expect("kept");
    assert!(when.holds(&serde_json::json!({"tags": ["vip"]})));
    for (when, needle) in [
        (
            r#"{ field = "priority", like = "u" }"#,
            "unknown field `like`",
        ),
        (r#"{ field = "a..b", equals = 1 }"#, "field path `a..b`"),
        (r#"{ any = [] }"#, "`any` needs at least one entry"),
        (r#"{ field = "p" }"#, "exactly one operator"),
        (
            r#"{ not = { field = "p", exits = true } }"#,
            "unknown field `exits`",
        ),
    ] {
        let error = parse(&workflow(when)).expect_err(when).to_string();
        assert!(error.contains(needle), "{when}: {error}");
        assert!(
            error.contains("line 7"),
            "{when}: the line is named: {error}"
        );
    }
}

#[test]
fn a_cloudevents_source_parses_and_its_secret_must_be_a_standard_webhooks_key() {
    let text = r#"
[[source]]
kind = "cloudevents"
name = "billing"
tenant = "acme"
signing_secret_env = "BILLING_EVENTS_SECRET"
channel = "chat"
"#;
    let loaded = parse(text).expect("parses");
    let settings = Settings::resolve(loaded, &env).expect("resolves");
    assert!(matches!(
        &settings.sources[0],
        ResolvedSource::CloudEvents { key: Some(_), config } if config.channel == switchyard_core::Channel::Chat
    ));
    let not_whsec = text.replace("BILLING_EVENTS_SECRET", "ZENDESK_ACME_SECRET");
    let error = Settings::resolve(parse(&not_whsec).expect("parses"), &env).expect_err("bad key");
    assert!(error.to_string().contains("`whsec_`"), "{error}");
    let error =
        parse(&text.replace("channel = \"chat\"", "channel = \"sms\"")).expect_err("channel");
    assert!(error.to_string().contains("sms"), "{error}");
    let error = parse(&format!("{text}signing_secret = \"x\"\n")).expect_err("typo");
    assert!(
        error.to_string().contains("unknown field `signing_secret`"),
        "{error}"
    );
}

#[test]
fn each_source_kind_parses_and_a_typo_inside_one_is_refused() {
    let text = r#"
[[source]]
kind = "webhook"
name = "zendesk-acme"
tenant = "acme"
signing_secret_env = "ZENDESK_ACME_SECRET"
account_id = 22129848

[[source]]
kind = "slack"
name = "acme-slack"
signing_secret_env = "SLACK_SIGNING_SECRET"
teams = { T0123ABC = "acme" }

[[source]]
kind = "email"
name = "support-inbox"
tenant = "acme"
host = "imap.example.com"
username = "support@example.com"
password_env = "SUPPORT_IMAP_PASSWORD"
"#;
    let loaded = parse(text).expect("three sources");
    let kinds: Vec<&str> = loaded
        .config
        .sources
        .iter()
        .map(SourceConfig::kind)
        .collect();
    assert_eq!(kinds, ["webhook", "slack", "email"]);
    let settings = Settings::resolve(loaded, &env).expect("secrets present");
    assert!(
        matches!(&settings.sources[0], ResolvedSource::Webhook { secret: Some(s), .. } if s == "value-of-ZENDESK_ACME_SECRET")
    );

    let typo = text.replace("account_id", "acount_id");
    assert!(
        parse(&typo)
            .expect_err("typo")
            .to_string()
            .contains("acount_id")
    );
    let unknown_kind = text.replace("kind = \"slack\"", "kind = \"sms\"");
    assert!(
        parse(&unknown_kind)
            .expect_err("kind")
            .to_string()
            .contains("sms")
    );
}

#[test]
fn semantic_errors_are_all_reported_together() {
    let text = r#"
[[workflow]]
id = "a"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "fax", event_type = "x", priority = 1 } ]

[[workflow]]
id = "a"
tenant = "acme"
status = "live"
run_as = "acme-agent"
lock_ttl = "0s"
triggers = []

[[workflow]]
id = "later"
tenant = "acme"
status = "draft"
triggers = [ { channel = "fax", event_type = "x" } ]

[[source]]
kind = "webhook"
name = "open-door"
tenant = "acme"

[database]
url = "sqlite::memory:"
"#;
    let error = parse(text).expect_err("invalid").to_string();
    for expected in [
        "database.url `sqlite::memory:` is an in-memory SQLite database",
        "unknown channel `fax`",
        "workflow `a` is defined more than once",
        "`lock_ttl` must be longer than 0s",
        "workflow `a` is live but has no triggers",
        "webhook source `open-door`",
    ] {
        assert!(
            error.contains(expected),
            "`{expected}` missing from:\n{error}"
        );
    }
    assert_eq!(
        error.matches("fax").count(),
        1,
        "a draft may name a channel not built yet"
    );
}

#[test]
fn unset_secrets_fail_closed_naming_the_variable() {
    let text = "[[source]]\nkind = \"slack\"\nname = \"s\"\nsigning_secret_env = \"NOT_SET_ANYWHERE\"\nteams = { T1 = \"acme\" }\n";
    let loaded = parse(text).expect("parses");
    let error = Settings::resolve(loaded, &env)
        .expect_err("secret unset")
        .to_string();
    assert!(error.contains("NOT_SET_ANYWHERE"), "{error}");

    let no_token = |_: &str| None;
    let error = Settings::resolve(parse("").expect("parses"), &no_token)
        .expect_err("no token")
        .to_string();
    assert!(error.contains("SWITCHYARD_API_TOKEN"), "{error}");
}

#[test]
fn the_revision_is_the_file_digest() {
    let a = parse("[server]\nbody_limit = 10\n").expect("a");
    let b = parse("[server]\nbody_limit = 10\n").expect("b");
    let c = parse("[server]\nbody_limit = 11\n").expect("c");
    assert_eq!(a.revision, b.revision);
    assert_ne!(a.revision, c.revision);
    assert_eq!(a.revision.len(), 16);
}

#[test]
fn targets_are_checked_and_workflows_must_name_a_defined_one() {
    let workflow = |target: &str| {
        format!(
            "[[workflow]]\nid = \"w\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\ntarget = \"{target}\"\n\
             triggers = [ {{ channel = \"chat\", event_type = \"message\" }} ]\n"
        )
    };
    let cases: &[(&str, &str, Option<&str>)] = &[
        (
            "signed https",
            "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"https://w.example/x\"\nsigning_secret_env = \"S\"\n",
            None,
        ),
        (
            "plain http on loopback",
            "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"http://127.0.0.1:9/x\"\nsigning_secret_env = \"S\"\n",
            None,
        ),
        (
            "no secret",
            "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"https://w.example/x\"\n",
            Some("has no `signing_secret_env`"),
        ),
        (
            "plain http outside loopback",
            "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"http://w.example/x\"\nsigning_secret_env = \"S\"\n",
            Some("plain http outside loopback"),
        ),
        (
            "plain http allowed",
            "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"http://w.example/x\"\nsigning_secret_env = \"S\"\nallow_plain_http = true\n",
            None,
        ),
        (
            "malformed retry",
            "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"https://w.example/x\"\nsigning_secret_env = \"S\"\nretry = [\"5s\", \"soon\"]\n",
            Some("retry step 2 (`soon`) is not a duration"),
        ),
        (
            "zero retry step",
            "[[target]]\nname = \"t\"\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"runs.{tenant}\"\nstream = \"RUNS\"\nretry = [\"0s\"]\n",
            Some("retry step 1 (`0s`) must be longer than 0s"),
        ),
        (
            "bad stream",
            "[[target]]\nname = \"t\"\nkind = \"nats\"\nurl = \"nats://127.0.0.1:4222\"\nsubject = \"runs\"\nstream = \"a.b\"\n",
            Some("`stream` must be a stream name"),
        ),
        (
            "pull",
            "[[target]]\nname = \"t\"\nkind = \"pull\"\nclaim_ttl = \"30s\"\n",
            None,
        ),
        (
            "unknown key",
            "[[target]]\nname = \"t\"\nkind = \"pull\"\nclaim_tll = \"30s\"\n",
            Some("claim_tll"),
        ),
    ];
    for (name, target, expected) in cases {
        let text = format!("{target}\n{}", workflow("t"));
        match (parse(&text), expected) {
            (Ok(_), None) => {}
            (Err(error), Some(needle)) => {
                assert!(error.to_string().contains(needle), "{name}: {error}")
            }
            (result, _) => panic!("{name}: unexpected {result:?}"),
        }
    }
    let error = parse(&workflow("nowhere")).expect_err("unknown target");
    assert!(
        error
            .to_string()
            .contains("names target `nowhere`, which is not defined"),
        "{error}"
    );
    // Without `target` a workflow uses the built-in pull target.
    let loaded = parse(&workflow("pull")).expect("the built-in pull target");
    assert_eq!(loaded.targets().len(), 1);
    assert_eq!(loaded.targets()[0].name(), BUILTIN_PULL);
}

#[test]
fn target_secrets_fail_closed_and_must_be_standard_webhooks_keys() {
    let text = "[[target]]\nname = \"t\"\nkind = \"http\"\nurl = \"https://w.example/x\"\n\
                signing_secret_env = \"WORKER_SECRET\"\n";
    let unset = Settings::resolve(parse(text).expect("parses"), &env).expect_err("unset");
    assert!(
        unset.to_string().contains("`WORKER_SECRET` is not set"),
        "{unset}"
    );
    let not_whsec = |name: &str| match name {
        "SWITCHYARD_API_TOKEN" => Some("value-of-SWITCHYARD_API_TOKEN".to_owned()),
        "WORKER_SECRET" => Some("hunter2".to_owned()),
        _ => None,
    };
    let bad = Settings::resolve(parse(text).expect("parses"), &not_whsec).expect_err("bad key");
    assert!(
        bad.to_string().contains("not a Standard Webhooks secret"),
        "{bad}"
    );
    let good = |name: &str| match name {
        "WORKER_SECRET" => Some("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD".to_owned()),
        "SWITCHYARD_API_TOKEN" => Some("value-of-SWITCHYARD_API_TOKEN".to_owned()),
        _ => None,
    };
    let settings = Settings::resolve(parse(text).expect("parses"), &good).expect("resolves");
    assert_eq!(settings.targets.len(), 2, "t and the built-in pull target");
}

#[test]
fn token_typos_are_errors_naming_the_key_and_line() {
    let scope =
        parse("[[token]]\nname = \"a\"\nsecret_env = \"A\"\nscopes = [\"read\", \"rule:all\"]\n")
            .expect_err("unknown scope")
            .to_string();
    assert!(
        scope.contains("rule:all") && scope.contains("line 4"),
        "{scope}"
    );
    let key = parse(
        "[[token]]\nname = \"a\"\nsecret_env = \"A\"\nscopes = [\"read\"]\ntenant = [\"acme\"]\n",
    )
    .expect_err("unknown key")
    .to_string();
    assert!(
        key.contains("unknown field `tenant`") && key.contains("line 5"),
        "{key}"
    );
    let loaded = parse(
        "[[token]]\nname = \"ops\"\nsecret_env = \"OPS\"\nscopes = [\"read\", \"runs:write\"]\ntenants = [\"acme\"]\n",
    )
    .expect("parses");
    let with_ops = |name: &str| match name {
        "OPS" => Some("ops-token-secret-1".to_owned()),
        other => env(other),
    };
    let settings = Settings::resolve(loaded.clone(), &with_ops).expect("resolves");
    assert_eq!(settings.tokens.len(), 1);
    assert_eq!(settings.tokens[0].name, "ops");
    assert!(settings.tokens[0].scopes.contains(&Scope::RunsWrite));
    let unset = Settings::resolve(loaded, &env)
        .expect_err("OPS unset")
        .to_string();
    assert!(
        unset.contains("secret_env names `OPS`, which is not set"),
        "{unset}"
    );
}

#[test]
fn flow_control_keys_parse_and_their_errors_name_the_key_and_line() {
    let workflow = |extra: &str, trigger: &str| {
        format!(
            "[[workflow]]\nid = \"a\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\n{extra}\ntriggers = [\n  \
             {{ channel = \"webhook\", event_type = \"ticket.updated\"{trigger} }},\n]\n"
        )
    };
    let loaded = parse(&format!(
        "{}\n[rates.tenant]\nacme = {{ limit = 100, per = \"1m\", burst = 20 }}\n[rates.source]\napi = {{ limit = 5, per = \"1s\" }}\n",
        workflow(
            "max_running = 2\nmax_queued = 50",
            ", coalesce = { quiet = \"30s\", max_wait = \"5m\" }"
        )
    ))
    .expect("valid flow control");
    let config = &loaded.config;
    assert_eq!(config.workflows[0].max_running, Some(2));
    assert_eq!(config.workflows[0].max_queued, Some(50));
    assert_eq!(
        config.workflows[0].triggers[0].coalesce.map(|c| c.max_wait),
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(
        config.rates.tenant["acme"].to_string(),
        "100 per 1m, burst 20"
    );

    // Shape errors: the serde message names the key and the line.
    for (text, needle, line) in [
        (
            workflow("", ", coalesce = { quiet = \"0s\", max_wait = \"5m\" }"),
            "`quiet` must be longer than 0s",
            "line 8",
        ),
        (
            workflow("", ", coalesce = { quiet = \"10m\", max_wait = \"5m\" }"),
            "`max_wait` (5m) must be at least `quiet` (10m)",
            "line 8",
        ),
        (
            workflow("", ", coalesce = { quiet = \"1s\", max_wiat = \"5m\" }"),
            "unknown field `max_wiat`",
            "line 8",
        ),
        (
            "[rates.tenant]\nacme = { limit = 0, per = \"1m\" }\n".to_owned(),
            "`limit` must be at least 1",
            "line 2",
        ),
        (
            "[rates.source]\napi = { limit = 3, per = \"1m\", burst = 0 }\n".to_owned(),
            "`burst` must be at least 1",
            "line 2",
        ),
        (
            "[rates]\nworkflow = {}\n".to_owned(),
            "unknown field `workflow`",
            "line 2",
        ),
    ] {
        let error = parse(&text).expect_err(needle).to_string();
        assert!(error.contains(needle), "{needle}: {error}");
        assert!(error.contains(line), "{needle}: the line is named: {error}");
    }

    // Meaning errors: named by workflow, source or tenant.
    let coalesce_messages = "[[workflow]]\nid = \"chat\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\n\
        triggers = [ { channel = \"slack\", event_type = \"message\", coalesce = { quiet = \"5s\", max_wait = \"1m\" } } ]\n\
        [[workflow]]\nid = \"comments\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\nmax_running = 0\n\
        triggers = [ { channel = \"webhook\", event_type = \"ticket.comment_added\", coalesce = { quiet = \"5s\", max_wait = \"1m\" } } ]\n\
        [rates.source]\nzendesk-typo = { limit = 1, per = \"1s\" }\n\
        [rates.tenant]\nnobody = { limit = 1, per = \"1s\" }\n";
    let error = parse(coalesce_messages).expect_err("refused").to_string();
    for needle in [
        "workflow `chat`: `coalesce` is refused on the `slack` channel",
        "workflow `comments`: `coalesce` is refused on `ticket.comment_added`: comments are events whose order",
        "workflow `comments`: `max_running` must be at least 1",
        "rates.source.zendesk-typo: no source is named `zendesk-typo`",
        "rates.tenant.nobody: no source or workflow belongs to tenant `nobody`",
    ] {
        assert!(error.contains(needle), "{needle}: {error}");
    }
}

#[test]
fn live_workflows_need_a_principal_of_their_tenant_with_the_capabilities() {
    let principals = "[[principal]]\nid = \"bot\"\ntenant = \"acme\"\nkind = \"service\"\n\
                      status = \"active\"\ncapabilities = [\"ticket:write\"]\n\n\
                      [[principal]]\nid = \"other\"\ntenant = \"globex\"\nkind = \"delegated\"\n\
                      status = \"suspended\"\nvalid_until = 2030-01-01T00:00:00Z\n\n";
    let workflow = |extra: &str| {
        format!(
            "{principals}[[workflow]]\nid = \"w\"\ntenant = \"acme\"\nstatus = \"live\"\n{extra}\
             triggers = [ {{ channel = \"chat\", event_type = \"message\" }} ]\n"
        )
    };
    let loaded = parse_alone(&workflow(
        "run_as = \"bot\"\nrequires = [\"ticket:write\"]\ndeadline = \"1h\"\n\
         budgets = { steps = 40, cost_usd = 2.5, max_attempts = 3 }\n",
    ))
    .expect("a valid binding");
    let w = &loaded.config.workflows[0];
    assert_eq!(w.deadline, Some(std::time::Duration::from_secs(3600)));
    assert_eq!(w.budgets.get("cost_usd"), Some(&2.5));
    assert_eq!(
        loaded.config.principals[1].valid_until_millis(),
        Some(1_893_456_000_000)
    );
    for (extra, needles) in [
        (
            "",
            &["workflow `w` (line 16) is live but names no principal"][..],
        ),
        (
            "run_as = \"nobody\"\n",
            &["`run_as` names principal `nobody` (line 19), which is not defined"][..],
        ),
        (
            "run_as = \"other\"\n",
            &["runs as principal `other` of tenant `globex` (line 19)"][..],
        ),
        (
            "run_as = \"bot\"\ndeadline = \"0s\"\nbudgets = { steps = -1, max_attempts = 1.5 }\n",
            &[
                "`deadline` must be longer than 0s",
                "budget `steps` must be a number greater than 0",
                "budget `max_attempts` must be a whole number",
            ][..],
        ),
    ] {
        let error = parse_alone(&workflow(extra)).expect_err(extra).to_string();
        for needle in needles {
            assert!(error.contains(needle), "{extra}: {error}");
        }
    }
    // A missing capability loads (a running daemon degrades the workflow) but `check` says so.
    let loaded = parse_alone(&workflow(
        "run_as = \"bot\"\nrequires = [\"ticket:write\", \"ticket:delete\"]\n",
    ))
    .expect("loads");
    assert_eq!(
        loaded.capability_gaps,
        [
            "workflow `w` requires `ticket:delete` that principal `bot` does not hold (line 19): it \
          will not start runs"
        ]
    );
    let report = crate::commands::check::review(&loaded, &env);
    assert_eq!(report.errors, loaded.capability_gaps);
    // A draft may leave `run_as` out.
    parse_alone(&workflow("").replace("\"live\"", "\"draft\"")).expect("a draft without run_as");
    let bad_time = principals.replace("2030-01-01T00:00:00Z", "\"next tuesday\"");
    let error = parse_alone(&bad_time)
        .expect_err("bad valid_until")
        .to_string();
    assert!(
        error.contains("principal `other`: `valid_until` `next tuesday` is not an RFC 3339 time"),
        "{error}"
    );
}

/// `client_share` is a share: refused outside (0, 1], applied with a floor of one connection
/// and one whole body.
#[test]
fn client_share_is_a_share_with_floors() {
    for bad in ["0", "1.5", "-0.25", "nan"] {
        let error = parse(&format!("[server]\nclient_share = {bad}\n"))
            .expect_err("invalid")
            .to_string();
        assert!(
            error.contains("server.client_share must be above 0"),
            "{bad}: {error}"
        );
    }
    let server = ServerConfig {
        max_connections: 16,
        body_limit: 1024,
        unverified_body_budget: 3000,
        client_share: 0.1,
        ..ServerConfig::default()
    };
    assert_eq!(server.max_connections_per_client(), 2, "rounded up");
    assert_eq!(
        server.unverified_body_per_client(),
        1024,
        "at least one body"
    );
    let whole = ServerConfig {
        client_share: 1.0,
        ..server
    };
    assert_eq!(whole.max_connections_per_client(), 16);
    assert_eq!(whole.unverified_body_per_client(), 3000);
}

#[test]
fn alert_rules_and_notifiers_are_checked_and_name_what_is_wrong() {
    let ok = r#"
[[notifier]]
name = "ops-slack"
kind = "slack"
bot_token_env = "SLACK_BOT_TOKEN"
channel = "C0OPS"

[[alert]]
name = "api-quiet"
kind = "source_quiet"
source = "api"
expect_within = "2h"
notify = ["ops-slack"]
"#;
    let loaded = parse(ok).expect("valid");
    assert_eq!(loaded.config.alerts[0].kind, AlertKind::SourceQuiet);
    // The Slack token is looked up like every secret: missing, it fails closed.
    let error = Settings::resolve(loaded, &env).expect_err("no token");
    assert!(error.to_string().contains("SLACK_BOT_TOKEN"), "{error}");
    for (text, expected) in [
        (
            "[[alert]]\nname = \"q\"\nkind = \"source_quiet\"\nsource = \"api\"\n",
            "needs `expect_within`",
        ),
        (
            "[[alert]]\nname = \"q\"\nkind = \"source_quiet\"\nsource = \"nowhere\"\nexpect_within = \"1h\"\n",
            "source `nowhere` is not defined",
        ),
        (
            "[[alert]]\nname = \"q\"\nkind = \"dispatch_lag\"\nexpect_within = \"1h\"\n",
            "`expect_within` does not apply to kind `dispatch_lag`",
        ),
        (
            "[[alert]]\nname = \"q\"\nkind = \"dispatch_lag\"\nnotify = [\"pager\"]\n",
            "notifies `pager`, which is not defined",
        ),
        (
            "[[alert]]\nname = \"builtin:x\"\nkind = \"reload_refused\"\n",
            "not start with `builtin:`",
        ),
        (
            "[[notifier]]\nname = \"w\"\nkind = \"webhook\"\nurl = \"http://ops.example.com/a\"\nsigning_secret_env = \"S\"\n",
            "plain http outside loopback",
        ),
        (
            "[[notifier]]\nname = \"m\"\nkind = \"email\"\nsmtp_host = \"mail.example.com\"\ntls = \"none\"\nfrom = \"a@example.com\"\nto = [\"b@example.com\"]\n",
            "only for a loopback relay",
        ),
        (
            "[[alert]]\nname = \"q\"\nkind = \"source_quiet\"\nsource = \"api\"\nexpect_within = \"1h\"\nbusiness_hours = { time_zone = \"Mars/Base\" }\n",
            "not an IANA time zone",
        ),
    ] {
        let error = parse(text).expect_err(text).to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
}
