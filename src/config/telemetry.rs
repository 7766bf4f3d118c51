//! `[telemetry]`: where OpenTelemetry spans are exported (OTLP/HTTP) and how many are kept.
//! Without `otlp_endpoint` tracing is off: no exporter, no spans; incoming trace context is
//! still stored and forwarded.
//!
//! Every value is checked while the file is parsed, so a bad one is a parse error naming its
//! key and line (and `serve` exits 78 like for any config error).

use serde::{Deserialize, Deserializer};

/// `[telemetry]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Base URL of an OTLP/HTTP collector, e.g. `http://127.0.0.1:4318`; spans are POSTed to
    /// `<otlp_endpoint>/v1/traces` as protobuf. Absent (the default): tracing is off.
    #[serde(default, deserialize_with = "endpoint")]
    pub otlp_endpoint: Option<OtlpEndpoint>,
    /// Share of new traces recorded, from 0.0 to 1.0 (default 1.0). A delivery that arrives
    /// with a `traceparent` follows its sender's sampled flag instead (parent-based sampling).
    #[serde(default = "TelemetryConfig::default_ratio", deserialize_with = "ratio")]
    pub sampling_ratio: f64,
    /// `service.name` of the exported spans (default `switchyard`).
    #[serde(
        default = "TelemetryConfig::default_service_name",
        deserialize_with = "service_name"
    )]
    pub service_name: String,
}

impl TelemetryConfig {
    fn default_ratio() -> f64 {
        1.0
    }
    fn default_service_name() -> String {
        "switchyard".into()
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            sampling_ratio: Self::default_ratio(),
            service_name: Self::default_service_name(),
        }
    }
}

/// A checked collector URL: `http://host[:port][/path]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpEndpoint {
    /// As written in the file.
    pub base: String,
    /// Where trace exports are POSTed: the base with `/v1/traces` appended (unless the base
    /// already ends with it).
    pub traces_url: String,
    /// `host:port` to connect to (port 80 when none is written).
    pub authority: String,
}

impl OtlpEndpoint {
    /// Checks a collector URL as an admin writes it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = url::Url::parse(text).map_err(|error| {
            format!("otlp_endpoint `{text}` is not a URL ({error}); e.g. \"http://127.0.0.1:4318\"")
        })?;
        if url.scheme() != "http" {
            return Err(format!(
                "otlp_endpoint `{text}` has scheme `{}`: only http:// is supported (run the \
                 collector, or a local agent of it, next to the daemon)",
                url.scheme()
            ));
        }
        let Some(host) = url.host_str() else {
            return Err(format!("otlp_endpoint `{text}` names no host"));
        };
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(format!(
                "otlp_endpoint `{text}` must be a plain http://host:port[/path] URL"
            ));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let path = url.path().trim_end_matches('/');
        let traces_path = if path.ends_with("/v1/traces") {
            path.to_owned()
        } else {
            format!("{path}/v1/traces")
        };
        let authority = match url.host() {
            Some(url::Host::Ipv6(address)) => format!("[{address}]:{port}"),
            _ => format!("{host}:{port}"),
        };
        Ok(Self {
            base: text.to_owned(),
            traces_url: format!("http://{authority}{traces_path}"),
            authority,
        })
    }
}

fn endpoint<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<OtlpEndpoint>, D::Error> {
    let text = String::deserialize(deserializer)?;
    OtlpEndpoint::parse(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

fn ratio<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    let ratio = f64::deserialize(deserializer)?;
    if (0.0..=1.0).contains(&ratio) {
        Ok(ratio)
    } else {
        Err(serde::de::Error::custom(format!(
            "sampling_ratio must be from 0.0 to 1.0, not {ratio}"
        )))
    }
}

fn service_name<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let name = String::deserialize(deserializer)?;
    if name.trim().is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(serde::de::Error::custom(
            "service_name must be 1 to 255 characters of text, without control characters",
        ));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        telemetry: TelemetryConfig,
    }

    fn parse(text: &str) -> Result<TelemetryConfig, String> {
        toml::from_str::<File>(text)
            .map(|file| file.telemetry)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn off_by_default() {
        let config = parse("").expect("no section");
        assert_eq!(config, TelemetryConfig::default());
        assert!(config.otlp_endpoint.is_none());
        assert_eq!(config.sampling_ratio, 1.0);
        assert_eq!(config.service_name, "switchyard");
    }

    #[test]
    fn endpoint_gets_the_traces_path() {
        let config = parse("[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n")
            .expect("valid endpoint");
        let endpoint = config.otlp_endpoint.expect("set");
        assert_eq!(endpoint.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(endpoint.authority, "127.0.0.1:4318");
        let given = OtlpEndpoint::parse("http://collector/otlp/v1/traces/").expect("valid");
        assert_eq!(given.traces_url, "http://collector:80/otlp/v1/traces");
        let v6 = OtlpEndpoint::parse("http://[::1]:4318/").expect("valid");
        assert_eq!(v6.authority, "[::1]:4318");
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let cases = [
            (
                "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nsampling_ratio = 1.5\n",
                "sampling_ratio must be from 0.0 to 1.0, not 1.5",
                "line 3",
            ),
            (
                "[telemetry]\nsampling_ratio = -0.1\n",
                "sampling_ratio must be from 0.0 to 1.0",
                "line 2",
            ),
            (
                "[telemetry]\notlp_endpoint = \"https://collector:4318\"\n",
                "only http:// is supported",
                "line 2",
            ),
            (
                "[telemetry]\n\notlp_endpoint = \"127.0.0.1:4318\"\n",
                "is not a URL",
                "line 3",
            ),
            (
                "[telemetry]\nservice_name = \"\"\n",
                "service_name must be",
                "line 2",
            ),
            (
                "[telemetry]\nsample_ratio = 0.5\n",
                "unknown field `sample_ratio`",
                "line 2",
            ),
        ];
        for (text, expected, line) in cases {
            let error = parse(text).expect_err(text);
            assert!(error.contains(expected), "{text}: {error}");
            assert!(error.contains(line), "{text}: {error}");
        }
    }
}
