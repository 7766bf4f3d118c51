//! The command line: `check` on good and bad files, `route` as a dry run, `migrate`, and
//! `serve`'s `--listen`/`--database` overrides on the README's quick start.

use std::process::Command;

use super::harness::{Backend, Daemon, PRINCIPALS, TOKEN, TestDb, binary, config, event};
use super::spine::WORKED_EXAMPLE;

fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut command = Command::new(binary());
    command
        .args(args)
        .env_remove("SWITCHYARD_API_TOKEN")
        .env_remove("SWITCHYARD_LISTEN")
        .env_remove("SWITCHYARD_DATABASE_URL");
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("run switchyard");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn example() -> String {
    format!("{}/examples/switchyard.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn check_accepts_the_example_and_warns_about_its_draft() {
    let (ok, out) = run(
        &["check", "--config", &example()],
        &[
            ("SWITCHYARD_API_TOKEN", TOKEN),
            ("ZENDESK_ACME_SECRET", "s"),
            ("SLACK_SIGNING_SECRET", "s"),
            ("SUPPORT_IMAP_PASSWORD", "s"),
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("is a draft"), "{out}");
    assert!(out.contains("OK"), "{out}");
}

#[test]
fn check_refuses_typos_naming_the_line_and_unset_secrets() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n").expect("write");
    let (ok, out) = run(
        &["check", "--config", path.to_str().unwrap_or_default()],
        &[],
    );
    assert!(!ok);
    assert!(
        out.contains("unknown field `lisen`") && out.contains("line 3"),
        "{out}"
    );

    std::fs::write(&path, format!("{PRINCIPALS}{WORKED_EXAMPLE}")).expect("write");
    let (ok, out) = run(
        &["check", "--config", path.to_str().unwrap_or_default()],
        &[],
    );
    assert!(!ok, "no API token set: serve would refuse to start");
    assert!(out.contains("SWITCHYARD_API_TOKEN"), "{out}");

    let duplicate = format!(
        "{PRINCIPALS}{WORKED_EXAMPLE}\n[[workflow]]\nid = \"triage\"\ntenant = \"x\"\nstatus = \"draft\"\ntriggers = []\n"
    );
    std::fs::write(&path, duplicate).expect("write");
    let (ok, out) = run(
        &["check", "--config", path.to_str().unwrap_or_default()],
        &[("SWITCHYARD_API_TOKEN", TOKEN)],
    );
    assert!(!ok);
    assert!(
        out.contains("workflow `triage` is defined more than once"),
        "{out}"
    );
}

#[test]
fn check_warns_about_ties_and_triggers_no_source_produces() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("ties.toml");
    std::fs::write(
        &path,
        r#"
[[principal]]
id = "acme-agent"
tenant = "acme"
kind = "service"
status = "active"

[[workflow]]
id = "b"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "x", priority = 7 } ]

[[workflow]]
id = "a"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "chat", event_type = "x", priority = 7 }, { channel = "slack", event_type = "message", priority = 1 } ]
"#,
    )
    .expect("write");
    let (ok, out) = run(
        &["check", "--config", path.to_str().unwrap_or_default()],
        &[("SWITCHYARD_API_TOKEN", TOKEN)],
    );
    assert!(ok, "{out}");
    assert!(out.contains("priority tie: workflows a, b"), "{out}");
    assert!(out.contains("`a` wins"), "{out}");
    assert!(
        out.contains("no configured slack source of tenant `acme`"),
        "{out}"
    );
}

#[tokio::test]
async fn route_explains_the_choice_and_sees_a_held_lock_without_writing() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = config(&db, WORKED_EXAMPLE);
    let config_path = db.dir.path().join("route.toml");
    std::fs::write(&config_path, &text).expect("write");
    let event_path = db.dir.path().join("event.json");
    std::fs::write(
        &event_path,
        event("webhook", "ticket.created", "acme", "TCK-5510").to_string(),
    )
    .expect("write");
    let args = [
        "route",
        "--config",
        config_path.to_str().unwrap_or_default(),
        "--event",
        event_path.to_str().unwrap_or_default(),
    ];

    // Before any database exists: explains the choice and creates no file.
    let (ok, out) = run(&args, &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("1. `triage` at priority 100  <- wins"),
        "{out}"
    );
    assert!(out.contains("2. `tagging` at priority 50"), "{out}");
    assert!(out.contains("ignored: `experimental` is draft"), "{out}");
    assert!(
        !db.dir.path().join("switchyard.db").exists(),
        "a dry run writes nothing"
    );

    let daemon = Daemon::start_with_file(&config_path, &[]).await;
    let (_, routed) = daemon
        .post_event(
            "r1",
            &event("webhook", "ticket.created", "acme", "TCK-5510"),
        )
        .await;
    let run_id = routed["run_id"].as_str().expect("routed").to_owned();
    let (ok, out) = run(&args, &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "outcome: entity_locked (`triage` would be chosen, but run {run_id} holds TCK-5510"
        )),
        "{out}"
    );
    assert_eq!(daemon.intake("").await.len(), 1, "route recorded nothing");

    std::fs::write(
        &event_path,
        event("webhook", "ticket.exploded", "acme", "X").to_string(),
    )
    .expect("write");
    let (_, out) = run(&args, &[]);
    assert!(out.contains("outcome: no_trigger_match"), "{out}");
    daemon.stop();
}

#[tokio::test]
async fn migrate_then_serve_without_migrating() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let path = db.dir.path().join("m.toml");
    std::fs::write(&path, config(&db, WORKED_EXAMPLE)).expect("write");
    let path_arg = path.to_str().unwrap_or_default();

    // Without migrations, `serve --no-migrate` refuses to start and says what to do.
    let (ok, out) = run(
        &["serve", "--no-migrate", "--config", path_arg],
        &[("SWITCHYARD_API_TOKEN", TOKEN)],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("switchyard migrate"), "{out}");

    let (ok, out) = run(&["migrate", "--config", path_arg], &[]);
    assert!(ok, "{out}");
    assert!(out.contains("up to date"), "{out}");
    let daemon = Daemon::start_serving(&path, &["--no-migrate"], &[]).await;
    assert!(!daemon.logs().contains("Applying"), "{}", daemon.logs());
    let (_, routed) = daemon
        .post_event("m", &event("webhook", "ticket.created", "acme", "M"))
        .await;
    assert_eq!(routed["outcome"], "routed");
    daemon.stop();
}

#[test]
fn version_names_the_commit_and_a_bad_config_exits_78() {
    let output = Command::new(binary())
        .arg("--version")
        .output()
        .expect("run --version");
    let version = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{version}");
    assert!(
        version.starts_with(&format!(
            "switchyard {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[server]\nlisten = \"127.0.0.1:0\"\nlisten_typo = 1\n",
    )
    .expect("write");
    let output = Command::new(binary())
        .args(["serve", "--config"])
        .arg(&path)
        .env("SWITCHYARD_API_TOKEN", TOKEN)
        .output()
        .expect("run serve");
    assert_eq!(output.status.code(), Some(78), "EX_CONFIG");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("listen_typo"),
        "the error names the key"
    );
}

/// A suspended principal is a warning for `check` (the file is valid: suspending is how an
/// admin stops a workflow's authority) and `route` says the winner would not start; a missing
/// capability is an error.
#[test]
fn check_and_route_name_a_principal_that_may_not_act() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("suspended.toml");
    let file = |status: &str, requires: &str| {
        format!(
            "[[principal]]\nid = \"bot\"\ntenant = \"acme\"\nkind = \"service\"\n\
             status = \"{status}\"\ncapabilities = [\"ticket:write\"]\n\n[[workflow]]\n\
             id = \"triage\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"bot\"\n\
             requires = [{requires}]\n\
             triggers = [ {{ channel = \"chat\", event_type = \"x\", priority = 7 }} ]\n"
        )
    };
    std::fs::write(&path, file("suspended", "\"ticket:write\"")).expect("write");
    let config = path.to_str().unwrap_or_default();
    let (ok, out) = run(
        &["check", "--config", config],
        &[("SWITCHYARD_API_TOKEN", TOKEN)],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "warning: live workflow `triage` will not start runs: principal `bot` is suspended"
        ),
        "{out}"
    );
    let event_path = dir.path().join("event.json");
    std::fs::write(&event_path, event("chat", "x", "acme", "E-1").to_string()).expect("write");
    let (ok, out) = run(
        &[
            "route",
            "--config",
            config,
            "--event",
            event_path.to_str().unwrap_or_default(),
        ],
        &[],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("outcome: authority_unavailable (`triage` would be chosen, but it runs as principal `bot` is suspended)"),
        "{out}"
    );

    std::fs::write(&path, file("active", "\"ticket:write\", \"ticket:delete\"")).expect("write");
    let (ok, out) = run(
        &["check", "--config", config],
        &[("SWITCHYARD_API_TOKEN", TOKEN)],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("error: workflow `triage` requires `ticket:delete` that principal `bot` does not hold (line 12)"),
        "{out}"
    );
}

/// The README's quick start: `serve --config examples/switchyard.toml` with only the API token
/// set. Its SQLite file goes to the data directory, never into `examples/`; `--listen` and
/// `SWITCHYARD_LISTEN` move the listener (flag over environment over config).
#[tokio::test]
async fn the_quick_start_serves_from_the_data_directory_on_the_given_address() {
    let home = tempfile::tempdir().expect("dir");
    let data = home.path().join("data");
    let in_examples =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/switchyard.db");
    let examples_had_a_db = in_examples.exists();
    let example = std::path::PathBuf::from(example());
    let data_str = data.to_str().unwrap_or_default();
    let home_str = home.path().to_str().unwrap_or_default();
    let env = [
        ("XDG_DATA_HOME", data_str),
        ("HOME", home_str),
        ("STATE_DIRECTORY", ""),
    ];

    // The environment moves the listener off the example's 127.0.0.1:8080.
    let mut with_env = env.to_vec();
    with_env.push(("SWITCHYARD_LISTEN", "127.0.0.1:0"));
    let daemon = Daemon::start_serving(&example, &[], &with_env).await;
    assert_ne!(daemon.addr.port(), 8080, "SWITCHYARD_LISTEN took effect");
    let (_, routed) = daemon
        .post_event("q", &event("webhook", "ticket.created", "acme", "Q-1"))
        .await;
    assert_eq!(routed["outcome"], "routed", "{routed}");
    daemon.stop();
    if examples_had_a_db {
        println!(
            "SKIPPED the examples/ check: {} exists from an earlier run, and is kept in use",
            in_examples.display()
        );
    } else {
        assert!(
            data.join("switchyard/switchyard.db").exists(),
            "the database is in $XDG_DATA_HOME/switchyard"
        );
        assert!(!in_examples.exists(), "nothing written into examples/");
    }

    // The flag wins over the environment (whose bad value is then never read).
    let mut bad_env = env.to_vec();
    bad_env.push(("SWITCHYARD_LISTEN", "not-an-address"));
    let daemon = Daemon::start_serving(&example, &["--listen", "127.0.0.1:0"], &bad_env).await;
    assert_ne!(daemon.addr.port(), 8080, "--listen took effect");
    let (_, duplicate) = daemon
        .post_event("q", &event("webhook", "ticket.created", "acme", "Q-1"))
        .await;
    assert_eq!(
        duplicate["outcome"], "duplicate",
        "the same database: {duplicate}"
    );
    daemon.stop();
}

/// A bad `--listen`, `SWITCHYARD_LISTEN` or `--database` is a config error (exit 78) that names
/// the value; a relative `--database` SQLite path is relative to the current directory.
#[test]
fn bad_listen_and_database_overrides_exit_78_and_a_relative_database_is_in_the_cwd() {
    let dir = tempfile::tempdir().expect("dir");
    let serve = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(binary());
        command
            .args(["serve", "--config", &example()])
            .args(args)
            .current_dir(dir.path())
            .env("SWITCHYARD_API_TOKEN", TOKEN)
            .env("XDG_DATA_HOME", dir.path())
            .env_remove("SWITCHYARD_LISTEN")
            .env_remove("SWITCHYARD_DATABASE_URL");
        for (k, v) in env {
            command.env(k, v);
        }
        let output = command.output().expect("run serve");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, err) = serve(&["--listen", "localhost"], &[]);
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("--listen / SWITCHYARD_LISTEN `localhost` is not an address and port"),
        "{err}"
    );
    let (code, err) = serve(&[], &[("SWITCHYARD_LISTEN", "127.0.0.1:99999")]);
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("`127.0.0.1:99999` is not an address and port"),
        "{err}"
    );
    let (code, err) = serve(&["--database", "switchyard.db"], &[]);
    assert_eq!(code, Some(78), "{err}");
    assert!(
        err.contains("`switchyard.db` is not a database URL"),
        "{err}"
    );
    let (code, err) = serve(&[], &[("SWITCHYARD_DATABASE_URL", "sqlite::memory:")]);
    assert_eq!(code, Some(78), "{err}");
    assert!(err.contains("in-memory SQLite"), "{err}");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "a refused override creates nothing"
    );

    let output = Command::new(binary())
        .args([
            "migrate",
            "--config",
            &example(),
            "--database",
            "sqlite://here/q.db",
        ])
        .current_dir(dir.path())
        .env_remove("SWITCHYARD_DATABASE_URL")
        .output()
        .expect("run migrate");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(dir.path().join("here/q.db").exists(), "{text}");
    assert!(text.contains("here/q.db"), "{text}");
}
