//! The intake pipeline: every authenticated delivery becomes one ledger row and one answer.
//!
//! Handlers (and the mailbox poller) build a [`Delivery`] and [`Intake::submit`] it. The store's
//! intake writers take whatever deliveries are waiting in their queue ([`batch::Queue`]) and
//! decide them all in one transaction (dedup, route, lock, ledger, raw bytes, mailbox cursor;
//! [`decide`], in the order `switchyard_store::intake::order` gives) and commit once: group
//! commit. Each sender is answered only after that commit. Queues are sharded by entity, one
//! per writer.

mod batch;
mod decide;
mod failpoint;
mod flow;
mod health;
mod preclaim;

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use switchyard_core::{Event, Outcome};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::config::DatabaseConfig;
use crate::dispatcher::Wake;
use crate::live::LiveConfig;
use crate::store::{MAX_KEY_LEN, MAX_RAW_REF_LEN};
pub use flow::FlowConfig;
pub use health::WriterStatus;
use health::{Signals, WriterHealth};

/// One authenticated delivery, ready to be decided.
#[derive(Debug)]
pub struct Delivery {
    /// The ledger row's id; also the raw delivery's id (`raw_ref` = `raw:<id>`).
    pub intake_id: Uuid,
    pub source: String,
    /// With `source` and `scope`, identifies the delivery: a second one is a `duplicate`.
    pub delivery_id: String,
    /// Whose namespace `delivery_id` is in: the caller's tenant where the caller chooses the
    /// id on a source every tenant shares (`api`: [`Delivery::scoped_to`]), else empty.
    pub scope: String,
    pub received_at: i64,
    /// The original bytes, stored for `raw_ref`.
    pub raw: Option<Raw>,
    pub body: DeliveryBody,
    /// The event's payload as the ledger stores it (JSON text), serialised by the sender so the
    /// writer, which decides deliveries one after another, does not have to.
    pub payload_text: Option<String>,
    /// For mailbox deliveries: the cursor to advance in the same transaction.
    pub cursor: Option<CursorAdvance>,
    /// The identity of the message this delivery is about, when the same message can arrive
    /// as several deliveries (Slack's `message` and `app_mention`): the first delivery that
    /// routes claims it, and later ones are `duplicate`s of that one.
    pub message_key: Option<String>,
    /// The W3C trace context to store on the ledger row and the run (`telemetry::incoming`).
    pub trace: Option<crate::telemetry::TraceContext>,
    /// For a delivery a live replay re-admits: the replay and the original ledger row.
    pub replay: Option<ReplayLink>,
}

/// What links a re-admitted delivery to its replay (`intake.replay_id`, `intake.replay_of`).
#[derive(Debug, Clone)]
pub struct ReplayLink {
    pub replay_id: String,
    /// The intake id of the original delivery.
    pub original: String,
}

/// Original bytes of a delivery.
#[derive(Debug, Clone)]
pub struct Raw {
    pub content_type: String,
    pub bytes: Bytes,
}

/// What the adapter made of the delivery.
#[derive(Debug)]
pub enum DeliveryBody {
    /// Route this event.
    Route(Event),
    /// Excluded by rule; recorded as `ineligible`.
    Ineligible {
        detail: String,
        event: Option<Event>,
    },
    /// Authenticated but not normalisable; recorded as `invalid_event`.
    Invalid { detail: String },
    /// Refused at the edge for what the request was, not what it says (a web form posted from
    /// a foreign `Origin`, a client over its rate), and recorded with that `outcome` and the
    /// event its body would have made, if any. Never routed.
    Refused {
        outcome: switchyard_core::Outcome,
        detail: String,
        event: Option<Event>,
    },
}

/// A mailbox cursor position to store with the delivery.
#[derive(Debug, Clone)]
pub struct CursorAdvance {
    pub mailbox: String,
    pub uidvalidity: u32,
    pub uid: u32,
}

impl Delivery {
    /// A delivery received now, recorded under `intake_id` (see [`Delivery::raw_ref`]).
    pub fn new(
        intake_id: Uuid,
        source: impl Into<String>,
        delivery_id: impl Into<String>,
        body: DeliveryBody,
    ) -> Self {
        let body = bounded_body(body);
        Self {
            intake_id,
            source: source.into(),
            delivery_id: bounded_key(delivery_id.into()),
            scope: String::new(),
            received_at: switchyard_store::now_millis(),
            raw: None,
            payload_text: body.event().map(|event| payload_text(&event.payload)),
            body,
            cursor: None,
            message_key: None,
            trace: crate::telemetry::incoming(),
            replay: None,
        }
    }

    /// Puts a caller-chosen delivery id in `tenant`'s namespace: the same id from another
    /// tenant is another delivery, never its duplicate (DESIGN.md promise 9).
    pub fn scoped_to(mut self, tenant: &str) -> Self {
        // Bounded as ids are: a tenant the store cannot hold makes the event `invalid_event`,
        // which must still be recorded.
        self.scope = bounded_key(tenant.to_owned());
        self
    }

    /// The `raw_ref` the stored original will have.
    pub fn raw_ref(intake_id: Uuid) -> String {
        format!("raw:{intake_id}")
    }
}

/// The ledger's text of a payload: compact JSON, the bytes `Value`'s `Display` writes, but
/// serialised straight into a buffer (`Display` goes through `fmt::Write` a token at a time).
pub fn payload_text(payload: &serde_json::Value) -> String {
    // A `Value`'s keys are strings and its numbers finite: serialising it cannot fail.
    serde_json::to_string(payload).unwrap_or_default()
}

/// An id as stored: longer than the store's keys hold (a pathological Message-ID, say), or
/// holding U+0000 (which PostgreSQL text cannot store), it is replaced by its digest, which
/// identifies it just as well and keeps locks and dedup exact.
fn bounded_key(id: String) -> String {
    if id.len() <= MAX_KEY_LEN && !id.contains('\0') {
        id
    } else {
        digest_id(id.as_bytes())
    }
}

/// Keeps every adapter's events within what every store can hold: an over-long entity id is
/// digested (a pathological Message-ID still locks its thread); a tenant or event type no
/// trigger could name (over-long), a `raw_ref` longer than its column, or U+0000 in any of
/// them or in the entity id (which a worker could not look up if it were digested) makes the
/// delivery `invalid_event`, recorded and naming the field, instead of a database error that
/// would refuse it forever.
fn bounded_body(body: DeliveryBody) -> DeliveryBody {
    let Some(event) = body.event() else {
        return body;
    };
    for (field, value, limit) in [
        ("tenant_id", &event.tenant_id, MAX_KEY_LEN),
        ("event_type", &event.event_type, MAX_KEY_LEN),
        ("raw_ref", &event.raw_ref, MAX_RAW_REF_LEN),
        ("target_entity_id", &event.target_entity_id, usize::MAX),
    ] {
        if value.len() > limit {
            return DeliveryBody::Invalid {
                detail: format!("`{field}` is longer than {limit} bytes"),
            };
        }
        if value.contains('\0') {
            return DeliveryBody::Invalid {
                detail: format!("`{field}` contains U+0000, which the store cannot hold"),
            };
        }
    }
    match body {
        DeliveryBody::Route(mut event) => {
            event.target_entity_id = bounded_key(event.target_entity_id);
            DeliveryBody::Route(event)
        }
        DeliveryBody::Ineligible {
            detail,
            event: Some(mut event),
        } => {
            event.target_entity_id = bounded_key(event.target_entity_id);
            DeliveryBody::Ineligible {
                detail,
                event: Some(event),
            }
        }
        DeliveryBody::Refused {
            outcome,
            detail,
            event: Some(mut event),
        } => {
            event.target_entity_id = bounded_key(event.target_entity_id);
            DeliveryBody::Refused {
                outcome,
                detail,
                event: Some(event),
            }
        }
        other => other,
    }
}

/// The answer a stored ledger row gave (for paths that record deliveries outside the writers:
/// resumes, `waits::resume`).
pub fn answer_of_row(row: &crate::store::entities::intake::Model) -> Answer {
    decide::first_answer(row)
}

/// The answer to a copy of the delivery a stored ledger row recorded: `duplicate`, naming it.
pub fn duplicate_of_row(row: &crate::store::entities::intake::Model) -> Answer {
    decide::duplicate_of(&decide::first_answer(row))
}

/// `sha256:<hex>` of some bytes: the delivery id of a delivery that names none.
pub fn digest_id(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl DeliveryBody {
    /// The event this delivery carries, if the adapter made one.
    pub fn event(&self) -> Option<&Event> {
        match self {
            DeliveryBody::Route(event) => Some(event),
            DeliveryBody::Ineligible { event, .. } | DeliveryBody::Refused { event, .. } => {
                event.as_ref()
            }
            DeliveryBody::Invalid { .. } => None,
        }
    }
}

impl From<switchyard_core::Disposition> for DeliveryBody {
    fn from(disposition: switchyard_core::Disposition) -> Self {
        match disposition {
            switchyard_core::Disposition::Route(event) => DeliveryBody::Route(event),
            switchyard_core::Disposition::Ineligible { detail, event } => {
                DeliveryBody::Ineligible { detail, event }
            }
        }
    }
}

/// The answer for one delivery: the JSON object of DESIGN.md section 4.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Answer {
    /// The delivery's outcome (DESIGN.md section 4).
    #[schema(value_type = OutcomeName, inline)]
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by_run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intake_id: Option<String>,
    /// For a `duplicate`: the outcome the first copy got.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<OutcomeName>, inline)]
    pub first_outcome: Option<Outcome>,
    /// For a `routed` run of a workflow at its `max_running`: its dispatch waits for a slot.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
    /// For `rate_limited`: seconds until a retry would be admitted (the `Retry-After`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl Answer {
    /// An answer with only an outcome and a detail (refusals decided before the store).
    pub fn refused(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: Some(detail.into()),
            run_id: None,
            workflow_id: None,
            held_by_run_id: None,
            intake_id: None,
            first_outcome: None,
            deferred: false,
            retry_after: None,
        }
    }
}

/// An outcome in the OpenAPI document: a string of the closed set, read from
/// [`Outcome::ALL`], so a new outcome is in the document the day it exists.
#[derive(Debug)]
pub struct OutcomeName;

impl utoipa::PartialSchema for OutcomeName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Outcome::ALL.map(Outcome::as_str)))
            .into()
    }
}

impl utoipa::ToSchema for OutcomeName {}

/// The store could not commit the delivery; nothing was accepted and the sender should retry.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the store is unavailable: {0}")]
pub struct StoreUnavailable(pub String);

type Reply = oneshot::Sender<Result<Answer, StoreUnavailable>>;

struct Pending {
    delivery: Delivery,
    reply: Reply,
}

impl Pending {
    /// Hands the sender its answer. A sender that went away meanwhile (it timed out, or its
    /// client closed the connection) cannot log the decision, so it is logged here: the
    /// writer does log I/O only for those.
    fn answer(self, result: Result<Answer, StoreUnavailable>) {
        if let Err(Ok(answer)) = self.reply.send(result) {
            LogFields::of(&self.delivery).log(&answer);
        }
    }
}

/// The handle handlers submit deliveries through.
#[derive(Debug, Clone)]
pub struct Intake {
    shards: Arc<[mpsc::Sender<Pending>]>,
    health: Arc<[Arc<WriterHealth>]>,
    hasher: std::collections::hash_map::RandomState,
}

/// Deliveries one writer may hold queued before senders wait: the backpressure bound.
const QUEUE_DEPTH: usize = 4096;
/// Most deliveries decided in one transaction; bounds statement size on every backend.
const MAX_BATCH: usize = 256;
impl Intake {
    /// Starts the store's intake writers (as many as the database takes: `database.writers`),
    /// each with a queue of its own.
    pub fn start(
        store: &switchyard_store::Store,
        config: &DatabaseConfig,
        live: LiveConfig,
        wake: Arc<Wake>,
    ) -> anyhow::Result<Self> {
        let writers = store.intake_writers(config.writers);
        let mut shards = Vec::with_capacity(writers);
        let mut health = Vec::with_capacity(writers);
        let mut queues: Vec<Box<dyn switchyard_store::intake::Batches>> =
            Vec::with_capacity(writers);
        for _ in 0..writers {
            let (tx, rx) = mpsc::channel(QUEUE_DEPTH);
            let signals = Signals {
                wake: wake.clone(),
                health: Arc::new(WriterHealth::default()),
            };
            health.push(signals.health.clone());
            shards.push(tx);
            queues.push(Box::new(batch::Queue {
                queue: rx,
                live: live.clone(),
                signals,
            }));
        }
        store
            .start_intake(queues)
            .map_err(|error| anyhow::anyhow!("cannot start the intake writers: {error}"))?;
        Ok(Self {
            shards: shards.into(),
            health: health.into(),
            hasher: Default::default(),
        })
    }

    /// Decides and durably records one delivery; answers after the commit. Once the delivery
    /// is queued, dropping this future does not stop it: the writer decides it and logs the
    /// decision itself ([`Pending::answer`]). Dropped while the queue is full, it was never
    /// queued, and nothing is recorded.
    pub async fn submit(&self, delivery: Delivery) -> Result<Answer, StoreUnavailable> {
        let (reply, answer) = oneshot::channel();
        let shard = &self.shards[self.shard_of(&delivery)];
        // Logged here, in the sender's task, so the single writer never waits on log I/O.
        let logged = LogFields::of(&delivery);
        shard
            .send(Pending { delivery, reply })
            .await
            .map_err(|_| StoreUnavailable("the intake writer has stopped".into()))?;
        let answer = answer
            .await
            .map_err(|_| StoreUnavailable("the intake writer dropped the delivery".into()))??;
        logged.log(&answer);
        Ok(answer)
    }

    /// Each writer's health and queue depth, for `/readyz`.
    pub fn writers(&self) -> Vec<WriterStatus> {
        self.shards
            .iter()
            .zip(self.health.iter())
            .map(|(shard, health)| {
                let depth = shard.max_capacity() - shard.capacity();
                health.status(depth, !shard.is_closed())
            })
            .collect()
    }

    /// Events on one entity go to one writer, so they never contend across writers; copies of
    /// one delivery carry the same event and land together too.
    fn shard_of(&self, delivery: &Delivery) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        let mut hasher = self.hasher.build_hasher();
        match &delivery.body {
            DeliveryBody::Route(event) => {
                (&event.tenant_id, &event.target_entity_id).hash(&mut hasher)
            }
            _ => (&delivery.source, &delivery.delivery_id).hash(&mut hasher),
        }
        (hasher.finish() % self.shards.len() as u64) as usize
    }
}

/// Whether a decision is logged at info: the outcomes an operator acts on (a sender's bad
/// request or signature, a ceiling or budget refusing work, an approval that came too late or
/// matched nothing). Routine decisions (a run made, a copy recognised, an entity busy, nothing
/// configured for the event, a coalesced or ineligible delivery, a resume) are logged at
/// debug: the ledger records every decision (`GET /v1/intake`, the console), the log what
/// needs a look, as dispatch logs delivered attempts at debug and failed ones at info.
fn logged_at_info(outcome: Outcome) -> bool {
    match outcome {
        Outcome::InvalidEvent
        | Outcome::UnauthorizedSource
        | Outcome::RateLimited
        | Outcome::DeadLettered
        | Outcome::AuthorityUnavailable
        | Outcome::NoWaitMatch
        | Outcome::WaitExpired
        | Outcome::ReapprovalRequired => true,
        Outcome::Routed
        | Outcome::Duplicate
        | Outcome::NoTriggerMatch
        | Outcome::EntityLocked
        | Outcome::Ineligible
        | Outcome::Coalesced
        | Outcome::Resumed => false,
    }
}

/// What the decision log line says about the delivery.
struct LogFields {
    source: String,
    delivery_id: String,
    tenant_id: Option<String>,
}

impl LogFields {
    fn of(delivery: &Delivery) -> Self {
        Self {
            source: delivery.source.clone(),
            delivery_id: delivery.delivery_id.clone(),
            tenant_id: delivery.body.event().map(|e| e.tenant_id.clone()),
        }
    }

    fn log(&self, answer: &Answer) {
        log_decision(
            answer,
            &self.source,
            &self.delivery_id,
            self.tenant_id.as_deref(),
        );
    }
}

/// Logs one decided delivery (`intake decided`, target `switchyard::intake`): at info when
/// [`logged_at_info`], else at debug. Every intake decision is logged here, resumes included.
pub fn log_decision(answer: &Answer, source: &str, delivery_id: &str, tenant_id: Option<&str>) {
    macro_rules! decided {
        ($level:ident) => {
            tracing::$level!(
                outcome = %answer.outcome,
                source = %source,
                delivery_id = %delivery_id,
                tenant_id,
                run_id = answer.run_id.as_deref(),
                workflow_id = answer.workflow_id.as_deref(),
                held_by_run_id = answer.held_by_run_id.as_deref(),
                detail = answer.detail.as_deref(),
                "intake decided"
            )
        };
    }
    if logged_at_info(answer.outcome) {
        decided!(info);
    } else {
        decided!(debug);
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("delivery", &self.delivery)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use switchyard_core::Channel;

    use super::*;

    fn event(event_type: &str, entity: &str) -> Event {
        Event {
            channel: Channel::Email,
            event_type: event_type.into(),
            tenant_id: "acme".into(),
            target_entity_id: entity.into(),
            payload: serde_json::json!({}),
            raw_ref: "raw:x".into(),
        }
    }

    #[test]
    fn over_long_ids_are_digested_and_over_long_types_are_invalid() {
        let long = "m".repeat(MAX_KEY_LEN + 1);
        let delivery = Delivery::new(
            Uuid::now_v7(),
            "inbox",
            long.clone(),
            DeliveryBody::Route(event("email.reply", &long)),
        );
        assert_eq!(delivery.delivery_id, digest_id(long.as_bytes()));
        let DeliveryBody::Route(routed) = &delivery.body else {
            panic!("still routed: {delivery:?}");
        };
        assert_eq!(
            routed.target_entity_id,
            digest_id(long.as_bytes()),
            "the same thread, the same lock key"
        );

        let short = Delivery::new(
            Uuid::now_v7(),
            "inbox",
            "id",
            DeliveryBody::Route(event("email.reply", "t@x")),
        );
        assert_eq!(short.delivery_id, "id");
        assert!(matches!(&short.body, DeliveryBody::Route(e) if e.target_entity_id == "t@x"));

        let invalid = Delivery::new(
            Uuid::now_v7(),
            "inbox",
            "id2",
            DeliveryBody::Route(event(&long, "t@x")),
        );
        assert!(
            matches!(&invalid.body, DeliveryBody::Invalid { detail } if detail.contains("`event_type` is longer than")),
            "{invalid:?}"
        );
    }
}
