//! The `nats` transport: publish the run message to a JetStream stream and count it delivered
//! only once the stream's PubAck says it is stored.

use std::time::{Duration, Instant};

use async_nats::connection::State;
use async_nats::jetstream::{self, ErrorCode, context::GetStreamErrorKind};
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use crate::DispatchError;
use crate::message;
use crate::schedule::RetryHint;
use crate::transport::{Attempt, AttemptResult, Outbound, Transport, error_chain};

/// Bound on one publish and its PubAck (and on the first-contact stream check).
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an attempt waits for a connection that is being (re)established before it gives
/// up; short, because the retry is durable and the next one comes from the schedule.
const CONNECT_GRACE: Duration = Duration::from_secs(2);
const CONNECT_POLL: Duration = Duration::from_millis(20);

/// A JetStream stream runs are published to.
#[derive(Debug, Clone)]
pub struct NatsTarget {
    /// Server URL, e.g. `nats://127.0.0.1:4222`.
    pub url: String,
    /// Subject template with `{tenant}` and `{workflow}`, e.g. `runs.{tenant}.{workflow}`.
    pub subject: String,
    /// Name of the stream that must capture the subjects.
    pub stream: String,
    /// Create the stream (subjects = the template with `*` for each placeholder) if missing.
    pub create_stream: bool,
}

/// Delivers to one [`NatsTarget`]. One connection; concurrent deliveries pipeline on it.
#[derive(Debug)]
pub struct NatsTransport {
    target: NatsTarget,
    client: async_nats::Client,
    jetstream: jetstream::Context,
    /// Set once the stream has been seen (or created); until then every attempt checks again.
    stream_ready: OnceCell<()>,
}

impl NatsTransport {
    /// Must not fail when the server is down at start (async-nats retry_on_initial_connect):
    /// attempts made while it is unreachable return Retry with an error in words; the stream is
    /// checked (or created with create_stream, subjects "<subject with {tenant}/{workflow}
    /// replaced by *>") at first contact and a missing stream is an Attempt error naming it.
    pub async fn connect(target: NatsTarget) -> Result<Self, DispatchError> {
        validate(&target)?;
        let client = async_nats::ConnectOptions::new()
            .name("switchyard")
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connect(target.url.as_str())
            .await
            .map_err(|source| DispatchError::NatsConnect {
                url: target.url.clone(),
                source,
            })?;
        let jetstream = jetstream::ContextBuilder::new()
            .timeout(PUBLISH_TIMEOUT)
            .build(client.clone());
        Ok(NatsTransport {
            target,
            client,
            jetstream,
            stream_ready: OnceCell::new(),
        })
    }

    /// The subject for one run; tokens sanitised: any char outside [A-Za-z0-9_-] becomes '_'
    /// (an empty token becomes `_`), so ids can neither add subject levels nor wildcards.
    pub fn subject_for(&self, tenant_id: &str, workflow_id: &str) -> String {
        self.target
            .subject
            .replace("{tenant}", &token(tenant_id))
            .replace("{workflow}", &token(workflow_id))
    }

    /// The subjects a created stream captures.
    fn stream_subjects(&self) -> String {
        self.target
            .subject
            .replace("{tenant}", "*")
            .replace("{workflow}", "*")
    }

    async fn attempt(&self, out: Outbound<'_>) -> Attempt {
        let started = Instant::now();
        if !self.wait_connected().await {
            return Attempt::failed(
                RetryHint::default(),
                format!("not connected to NATS server {}", self.target.url),
                started.elapsed(),
            );
        }
        match tokio::time::timeout(PUBLISH_TIMEOUT, self.publish(out)).await {
            Ok(Ok(ack)) => Attempt {
                result: AttemptResult::Delivered,
                status: None,
                response_excerpt: Some(format!(
                    "stream {} sequence {}{}",
                    ack.stream,
                    ack.sequence,
                    if ack.duplicate { " (duplicate)" } else { "" }
                )),
                error: None,
                duration: started.elapsed(),
            },
            Ok(Err(words)) => Attempt::failed(RetryHint::default(), words, started.elapsed()),
            Err(_) => Attempt::failed(
                RetryHint::default(),
                format!(
                    "no PubAck from stream `{}` within {} s",
                    self.target.stream,
                    PUBLISH_TIMEOUT.as_secs()
                ),
                started.elapsed(),
            ),
        }
    }

    /// True once connected, waiting up to [`CONNECT_GRACE`] for a connection in progress.
    async fn wait_connected(&self) -> bool {
        let deadline = Instant::now() + CONNECT_GRACE;
        loop {
            if self.client.connection_state() == State::Connected {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(CONNECT_POLL).await;
        }
    }

    async fn publish(&self, out: Outbound<'_>) -> Result<jetstream::publish::PublishAck, String> {
        self.stream_ready
            .get_or_try_init(|| self.ensure_stream())
            .await?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, out.id);
        headers.insert("Content-Type", message::CONTENT_TYPE);
        if let Some(traceparent) = out.traceparent {
            headers.insert("traceparent", traceparent);
        }
        if let Some(tracestate) = out.tracestate {
            headers.insert("tracestate", tracestate);
        }
        let subject = self.subject_for(out.tenant_id, out.workflow_id);
        let ack = self
            .jetstream
            .publish_with_headers(subject.clone(), headers, Bytes::copy_from_slice(out.body))
            .await
            .map_err(|e| format!("publishing to `{subject}`: {}", error_chain(&e)))?;
        ack.await.map_err(|e| {
            format!(
                "waiting for the PubAck of `{subject}` from stream `{}`: {}",
                self.target.stream,
                error_chain(&e)
            )
        })
    }

    async fn ensure_stream(&self) -> Result<(), String> {
        let name = &self.target.stream;
        if self.target.create_stream {
            let subjects = self.stream_subjects();
            self.jetstream
                .get_or_create_stream(jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![subjects.clone()],
                    ..Default::default()
                })
                .await
                .map_err(|e| {
                    format!(
                        "creating JetStream stream `{name}` for `{subjects}`: {}",
                        error_chain(&e)
                    )
                })?;
            return Ok(());
        }
        match self.jetstream.get_stream(name).await {
            Ok(_) => Ok(()),
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(js)
                    if js.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Err(format!(
                        "JetStream stream `{name}` does not exist (create_stream is false)"
                    ))
                }
                _ => Err(format!(
                    "looking up JetStream stream `{name}`: {}",
                    error_chain(&e)
                )),
            },
        }
    }
}

impl Transport for NatsTransport {
    fn deliver<'a>(&'a self, out: Outbound<'a>) -> BoxFuture<'a, Attempt> {
        Box::pin(self.attempt(out))
    }
}

/// One subject token: `[A-Za-z0-9_-]` kept, anything else `_`.
fn token(raw: &str) -> String {
    if raw.is_empty() {
        return "_".to_owned();
    }
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn validate(target: &NatsTarget) -> Result<(), DispatchError> {
    let bad = |why: String| Err(DispatchError::InvalidNatsTarget(why));
    let stream = &target.stream;
    if stream.is_empty()
        || stream
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '.' | '*' | '>' | '/' | '\\'))
    {
        return bad(format!(
            "stream name `{stream}` must be non-empty without spaces, `.`, `*`, `>`, `/` or `\\`"
        ));
    }
    let subject = &target.subject;
    if subject.is_empty()
        || subject.chars().any(char::is_whitespace)
        || subject.split('.').any(str::is_empty)
    {
        return bad(format!(
            "subject template `{subject}` must be dot-separated non-empty tokens without spaces"
        ));
    }
    if subject.contains('*') || subject.contains('>') {
        return bad(format!(
            "subject template `{subject}` must not contain wildcards; use {{tenant}} and {{workflow}}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_sanitised() {
        assert_eq!(token("acme"), "acme");
        assert_eq!(token("a.b*c>d e"), "a_b_c_d_e");
        assert_eq!(token("wf_1-x"), "wf_1-x");
        assert_eq!(token("ünï"), "_n_");
        assert_eq!(token(""), "_");
    }

    #[test]
    fn targets_are_validated() {
        let target = |subject: &str, stream: &str| NatsTarget {
            url: "nats://127.0.0.1:4222".into(),
            subject: subject.into(),
            stream: stream.into(),
            create_stream: false,
        };
        assert!(validate(&target("runs.{tenant}.{workflow}", "RUNS")).is_ok());
        assert!(validate(&target("runs.{tenant}.{workflow}", "RU.NS")).is_err());
        assert!(validate(&target("runs.{tenant}.{workflow}", "")).is_err());
        assert!(validate(&target("runs..x", "RUNS")).is_err());
        assert!(validate(&target("runs.>", "RUNS")).is_err());
        assert!(validate(&target("", "RUNS")).is_err());
    }
}
