//! The daemon's generated `switchyard.toml`, its secrets, and how it is started.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::args::BenchArgs;

/// Bearer token for `/v1/events` and `/readyz`'s detail (passed in `BENCH_API_TOKEN`; at least
/// 16 bytes, or the daemon refuses it).
pub const API_TOKEN: &str = "bench-api-token-0001";
/// Signing secret of the webhook source (passed in `BENCH_ZENDESK_SECRET`).
pub const WEBHOOK_SECRET: &str = "bench-zendesk-signing-secret";
/// Environment variable of the http dispatch target's signing secret.
pub const SINK_SECRET_ENV: &str = "BENCH_SINK_SECRET";
/// Its value: `whsec_` + base64 of 32 bytes.
pub const SINK_SECRET: &str = "whsec_c3dpdGNoeWFyZC1iZW5jaC1zaW5rLXNlY3JldC0zMmI=";
/// Name of the webhook source: `POST /v1/ingest/webhook/zendesk`.
pub const WEBHOOK_SOURCE: &str = "zendesk";

/// A config with the webhook source and the two live workflows the load triggers (`triage`
/// wins, `tagging` is outranked), on `database_url`.
pub fn load_config(database_url: &str, durability: &str) -> String {
    format!(
        r#"[server]
listen = "127.0.0.1:0"
api_token_env = "BENCH_API_TOKEN"

[database]
url = "{database_url}"
durability = "{durability}"

[[source]]
kind = "webhook"
name = "{WEBHOOK_SOURCE}"
tenant = "acme"
signing_secret_env = "BENCH_ZENDESK_SECRET"
account_id = 22129848
# A soak run reuses nothing, but a long run must not outlive the default 5-minute window
# because of the generator's clock: signatures are made per request with the current time.
timestamp_tolerance = "1h"

[[principal]]
id = "acme-agent"
tenant = "acme"
kind = "service"
status = "active"

[[workflow]]
id = "triage"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [
  {{ channel = "webhook", event_type = "ticket.created", priority = 100 }},
  {{ channel = "web_form", event_type = "ticket.created", priority = 100 }},
]

[[workflow]]
id = "tagging"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ {{ channel = "webhook", event_type = "ticket.created", priority = 50 }} ]
"#
    )
}

/// [`load_config`] with flow control on the winning workflow: a condition every request
/// meets, a `max_running` ceiling (no worker claims, so runs past it are created deferred:
/// intake counts the workflow's runs in every batch), a tenant `rate` that admits everything
/// (its row is locked and moved in every batch) and a coalescing window (requests on the hot
/// ticket join its pending run instead of `entity_locked`).
pub fn flow_control_config(database_url: &str, durability: &str) -> String {
    let plain = load_config(database_url, durability);
    let controlled = plain.replace(
        "id = \"triage\"\ntenant = \"acme\"\nstatus = \"live\"\n",
        "id = \"triage\"\ntenant = \"acme\"\nstatus = \"live\"\nmax_running = 64\n",
    );
    let when = r#"when = { field = "priority", in = ["low", "normal", "high", "urgent"] }, coalesce = { quiet = "1s", max_wait = "1m" }"#;
    let controlled = controlled
        .replace(
            r#"{ channel = "webhook", event_type = "ticket.created", priority = 100 }"#,
            &format!(r#"{{ channel = "webhook", event_type = "ticket.created", priority = 100, {when} }}"#),
        )
        .replace(
            r#"{ channel = "web_form", event_type = "ticket.created", priority = 100 }"#,
            &format!(r#"{{ channel = "web_form", event_type = "ticket.created", priority = 100, {when} }}"#),
        );
    format!("{controlled}\n[rates.tenant]\nacme = {{ limit = 10000000, per = \"1s\" }}\n")
}

/// Event types the startup config spreads its triggers over.
const EVENT_TYPES: [&str; 10] = [
    "ticket.created",
    "ticket.updated",
    "ticket.solved",
    "ticket.comment_added",
    "ticket.status_changed",
    "ticket.priority_changed",
    "urgent_message",
    "message",
    "email.received",
    "form.submitted",
];
const CHANNELS: [&str; 5] = ["webhook", "slack", "email", "web_form", "chat"];

/// A config with `count` live workflows over 100 tenants, two triggers each.
pub fn many_workflows_config(database_url: &str, count: usize) -> String {
    let mut text = load_config(database_url, "full");
    for tenant in 0..count.min(100) {
        let _ = write!(
            text,
            "\n[[principal]]\nid = \"tenant-{tenant:03}-agent\"\ntenant = \"tenant-{tenant:03}\"\n\
             kind = \"service\"\nstatus = \"active\"\n"
        );
    }
    for i in 0..count {
        let tenant = i % 100;
        let (a, b) = (i % EVENT_TYPES.len(), (i / 7) % EVENT_TYPES.len());
        let _ = write!(
            text,
            "\n[[workflow]]\nid = \"wf-{i:05}\"\ntenant = \"tenant-{tenant:03}\"\nstatus = \"live\"\nrun_as = \"tenant-{tenant:03}-agent\"\n\
             lock_ttl = \"10m\"\ntriggers = [\n  {{ channel = \"{}\", event_type = \"{}\", priority = {} }},\n  \
             {{ channel = \"{}\", event_type = \"{}\", priority = {} }},\n]\n",
            CHANNELS[i % CHANNELS.len()],
            EVENT_TYPES[a],
            i % 1000,
            CHANNELS[(i / 3) % CHANNELS.len()],
            EVENT_TYPES[b],
            (i * 7) % 1000,
        );
    }
    text
}

/// The release daemon: `--daemon-bin`/`SWITCHYARD_BIN`, else `switchyard` beside this binary
/// (both are in target/release after `cargo build --release`), else target/release of the
/// workspace or `CARGO_TARGET_DIR`.
pub fn daemon_binary(args: &BenchArgs) -> anyhow::Result<PathBuf> {
    if let Some(path) = &args.daemon_bin {
        return Ok(path.clone());
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
        && dir.ends_with("release")
    {
        candidates.push(dir.join("switchyard"));
    }
    if let Ok(dir) = std::env::var("CARGO_TARGET_DIR") {
        candidates.push(Path::new(&dir).join("release/switchyard"));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/switchyard"));
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => Ok(path.clone()),
        None => bail!(
            "no release daemon binary at {}: run `cargo build --release -p switchyard` first, \
             or pass --daemon-bin",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `switchyard serve` on `config_path`, with the bench's secrets, JSON logs and `--daemon-env`.
pub fn daemon_command(args: &BenchArgs, binary: &Path, config_path: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--config"])
        .arg(config_path)
        .env("BENCH_API_TOKEN", API_TOKEN)
        .env("BENCH_ZENDESK_SECRET", WEBHOOK_SECRET)
        .env(SINK_SECRET_ENV, SINK_SECRET)
        .env("SWITCHYARD_LOG_FORMAT", "json")
        .env("RUST_LOG", &args.daemon_log)
        .envs(args.daemon_env.iter().map(|(name, value)| (name, value)));
    command
}

/// Writes `text` as `switchyard.toml` in `dir`.
pub fn write_config(dir: &Path, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("switchyard.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flow_control_config_controls_the_winning_workflow() {
        let text = flow_control_config("sqlite://x.db", "full");
        let value: toml::Value = toml::from_str(&text).expect("TOML");
        let triage = &value["workflow"][0];
        assert_eq!(triage["max_running"].as_integer(), Some(64));
        for trigger in triage["triggers"].as_array().expect("triggers") {
            assert!(trigger.get("when").is_some() && trigger.get("coalesce").is_some());
        }
        assert!(value["rates"]["tenant"]["acme"].is_table());
    }

    #[test]
    fn the_startup_config_has_the_requested_workflows() {
        let text = many_workflows_config("sqlite://x.db", 50);
        let value: toml::Value = toml::from_str(&text).expect("TOML");
        assert_eq!(value["workflow"].as_array().map(Vec::len), Some(52));
        // Every live workflow runs as a principal of its own tenant (the daemon refuses
        // anything else).
        let principals = value["principal"].as_array().expect("principals");
        for workflow in value["workflow"].as_array().expect("workflows") {
            let run_as = workflow["run_as"].as_str().expect("run_as");
            let principal = principals
                .iter()
                .find(|p| p["id"].as_str() == Some(run_as))
                .expect("a defined principal");
            assert_eq!(principal["tenant"], workflow["tenant"], "{run_as}");
        }
    }
}
