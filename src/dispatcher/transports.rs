//! The push transports of the revision in force, built from its `[[target]]`s. A reload
//! rebuilds them; a NATS connection whose target did not change is kept.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use switchyard_dispatch::{
    HttpTarget, HttpTransport, NatsTarget, NatsTransport, RetrySchedule, SigningKey, Transport,
};
use tokio::sync::Semaphore;

use crate::config::{NatsTargetConfig, ResolvedTarget};
use crate::live::Live;

/// One push target ready to deliver.
#[derive(Debug, Clone)]
pub struct PushTarget {
    pub name: String,
    pub transport: Arc<dyn Transport>,
    pub schedule: Arc<RetrySchedule>,
    /// How long a claim for one attempt lasts: past it, another dispatcher may try again.
    pub claim_for: Duration,
    /// Claims this target may hold at once: [`CLAIM_WINDOW`] times what its transport sends at
    /// once, so the next attempts are claimed and read while the current ones are in flight.
    pub in_flight: Arc<Semaphore>,
}

/// The push targets of one revision.
#[derive(Debug, Default)]
pub struct Transports {
    revision: String,
    targets: Vec<PushTarget>,
    nats: HashMap<String, (NatsTargetConfig, Arc<NatsTransport>)>,
}

/// Slack on top of an attempt's longest duration before its claim lapses: time to record it.
/// Past it, an unrecorded attempt (a crash, a store outage) is delivered again under its id.
const CLAIM_SLACK: Duration = Duration::from_secs(5);
/// Claims an http target may hold, in multiples of its `max_in_flight`. The transport sends
/// `max_in_flight` at once, in claim order, so a claimed attempt waits behind at most
/// `CLAIM_WINDOW - 1` rounds of attempts of at most `timeout` each: its claim lasts
/// `CLAIM_WINDOW` timeouts plus the slack, and never lapses while it waits its turn.
const CLAIM_WINDOW: u32 = 4;
/// Longest NATS attempt: the transport's connect grace (2 s) plus its publish timeout (10 s).
const NATS_ATTEMPT: Duration = Duration::from_secs(12);
/// In-flight cap of a NATS target (publishes pipeline on one connection).
const NATS_IN_FLIGHT: usize = 1024;

impl Transports {
    /// Builds the transports of `live` unless they are already those of its revision.
    pub async fn refresh(&mut self, live: &Live) {
        if self.revision == live.revision() && !self.revision.is_empty() {
            return;
        }
        let mut targets = Vec::new();
        let mut nats = HashMap::new();
        for target in &live.settings.targets {
            match self.build(target, &mut nats).await {
                Ok(Some(push)) => targets.push(push),
                Ok(None) => {}
                Err(error) => tracing::error!(
                    target = target.name(),
                    %error,
                    "cannot build the target's transport; its runs wait until the config is fixed"
                ),
            }
        }
        self.targets = targets;
        self.nats = nats;
        self.revision = live.revision().to_owned();
    }

    async fn build(
        &self,
        target: &ResolvedTarget,
        nats: &mut HashMap<String, (NatsTargetConfig, Arc<NatsTransport>)>,
    ) -> anyhow::Result<Option<PushTarget>> {
        let (transport, retry, claim_for, in_flight): (
            Arc<dyn Transport>,
            &[String],
            Duration,
            usize,
        ) = match target {
            ResolvedTarget::Pull(_) => return Ok(None),
            ResolvedTarget::Http { config, secrets } => {
                let signing_keys = secrets
                    .iter()
                    .map(|secret| SigningKey::parse(secret))
                    .collect::<Result<Vec<_>, _>>()?;
                let transport = HttpTransport::new(HttpTarget {
                    url: config.url.clone(),
                    signing_keys,
                    timeout: config.timeout,
                    max_in_flight: config.max_in_flight,
                    retry_on_4xx: config.retry_on_4xx,
                })?;
                (
                    Arc::new(transport),
                    &config.retry,
                    config.timeout * CLAIM_WINDOW + CLAIM_SLACK,
                    config.max_in_flight * CLAIM_WINDOW as usize,
                )
            }
            ResolvedTarget::Nats(config) => {
                let transport = match self.nats.get(&config.name) {
                    Some((old, transport)) if old == config => transport.clone(),
                    _ => Arc::new(
                        NatsTransport::connect(NatsTarget {
                            url: config.url.clone(),
                            subject: config.subject.clone(),
                            stream: config.stream.clone(),
                            create_stream: config.create_stream,
                        })
                        .await?,
                    ),
                };
                nats.insert(config.name.clone(), (config.clone(), transport.clone()));
                (
                    transport,
                    &config.retry,
                    NATS_ATTEMPT + CLAIM_SLACK,
                    NATS_IN_FLIGHT,
                )
            }
        };
        Ok(Some(PushTarget {
            name: target.name().to_owned(),
            transport,
            schedule: Arc::new(RetrySchedule::parse(retry)?),
            claim_for,
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
        }))
    }

    pub fn push(&self) -> &[PushTarget] {
        &self.targets
    }
}
