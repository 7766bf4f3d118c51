//! The daemons' configs: the load config with the winning workflow's runs going to a push
//! target (http to the sink, or nats).

use std::net::SocketAddr;

use crate::args::DispatchKind;
use crate::config;

use super::{STREAM, TARGET};

/// The `[[target]]` table of `kind`, pointing at the sink. An http target may send as many
/// runs at once as the load has requests in flight (`concurrency`): the sink takes any number,
/// so neither side's window caps the other's rate.
pub(super) fn target_toml(
    kind: DispatchKind,
    sink: Option<SocketAddr>,
    nats_url: &str,
    concurrency: usize,
) -> String {
    let retry = r#"retry = ["1s", "2s", "5s", "10s", "30s", "60s", "60s"]"#;
    match (kind, sink) {
        (DispatchKind::Http, Some(addr)) => format!(
            "\n[[target]]\nname = \"{TARGET}\"\nkind = \"http\"\nurl = \"http://{addr}/runs\"\n\
             signing_secret_env = \"{}\"\ntimeout = \"5s\"\nmax_in_flight = {concurrency}\n{retry}\n",
            config::SINK_SECRET_ENV
        ),
        _ => format!(
            "\n[[target]]\nname = \"{TARGET}\"\nkind = \"nats\"\nurl = \"{nats_url}\"\n\
             subject = \"bench.{{tenant}}.{{workflow}}\"\nstream = \"{STREAM}\"\ncreate_stream = true\n{retry}\n"
        ),
    }
}

/// One daemon's load config, with the winning workflow's runs going to `target` (None: the
/// built-in pull target).
pub(super) fn daemon_config(database_url: &str, durability: &str, target: Option<&str>) -> String {
    let text = config::load_config(database_url, durability);
    match target {
        None => text,
        Some(table) => {
            text.replacen(
                "id = \"triage\"\n",
                &format!("id = \"triage\"\ntarget = \"{TARGET}\"\n"),
                1,
            ) + table
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dispatch_config_names_the_target_for_the_winning_workflow() {
        let addr: SocketAddr = "127.0.0.1:9".parse().expect("address");
        let text = daemon_config(
            "sqlite://x.db",
            "full",
            Some(&target_toml(
                DispatchKind::Http,
                Some(addr),
                "nats://127.0.0.1:4222",
                64,
            )),
        );
        let value: toml::Value = toml::from_str(&text).expect("TOML");
        assert_eq!(value["workflow"][0]["target"].as_str(), Some(TARGET));
        assert!(value["workflow"][1].get("target").is_none());
        assert_eq!(value["target"][0]["kind"].as_str(), Some("http"));
        assert_eq!(value["target"][0]["max_in_flight"].as_integer(), Some(64));
        let nats = target_toml(DispatchKind::Nats, None, "nats://127.0.0.1:4222", 64);
        let value: toml::Value = toml::from_str(&nats).expect("TOML");
        assert_eq!(
            value["target"][0]["subject"].as_str(),
            Some("bench.{tenant}.{workflow}")
        );
    }
}
