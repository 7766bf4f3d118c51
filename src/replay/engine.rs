//! Deciding stored deliveries again, in memory: the adapter's normalisation
//! ([`super::normalize`]), the trigger index of the revision replayed under, duplicate claims,
//! and the entity locks recorded at the time (the store's `Holders`). Reads only.
//!
//! Invariant: under the revision that decided a delivery, with the source settings it was
//! received under, this decides it as the intake writer did (the e2e tests replay a mixed day
//! and compare every outcome); flow control's outcomes, whose state is not rebuilt, are
//! reproduced from the recorded holder (`coalesced`) or reported as recorded
//! (`rate_limited`) when routing still agrees ([`flow_control`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use switchyard_core::{Outcome, Workflow};
use switchyard_router::{Choice, TriggerIndex};
use switchyard_store::entities::intake;
use switchyard_store::replays::Holders;
use switchyard_store::{DbErr, Store};

use super::normalize::{Renormalized, renormalize};
use super::reread::Rereader;
use crate::authority::Authority;
use crate::config::{LoadedConfig, SourceConfig};
use crate::intake::DeliveryBody;

/// What a replay routes with: one revision's trigger index and the source settings its
/// adapters normalise with.
#[derive(Debug)]
pub struct Routing {
    /// How the report names it: `current <hash>`, `candidate <hash>`, `original <hash>`.
    pub label: String,
    pub index: TriggerIndex,
    pub sources: Arc<[SourceConfig]>,
    /// The principals the winners run as (`authority_unavailable` at the delivery's time).
    pub authority: Arc<Authority>,
    /// Check only workflows `authority` binds: a stored past revision keeps no principals, so
    /// its workflows are checked against the principals in force when they still exist.
    pub bound_only: bool,
}

impl Routing {
    pub fn of_config(label: &str, loaded: &LoadedConfig) -> Self {
        Self::new(
            format!("{label} {}", loaded.revision),
            &loaded.revision,
            &loaded.workflows(),
            loaded.config.sources.clone().into(),
            Arc::new(Authority::new(&loaded.config)),
        )
    }

    pub fn new(
        label: String,
        revision: &str,
        workflows: &[Workflow],
        sources: Arc<[SourceConfig]>,
        authority: Arc<Authority>,
    ) -> Self {
        Self {
            label,
            index: TriggerIndex::build(revision.to_owned(), workflows),
            sources,
            authority,
            bound_only: false,
        }
    }

    /// Why the winner `workflow_id` could not start a run at `at`, if it could not.
    fn refusal(&self, workflow_id: &str, at: i64) -> Option<String> {
        if self.bound_only && self.authority.run_as(workflow_id).is_none() {
            return None;
        }
        self.authority
            .refusal_at_routing(workflow_id, at)
            .map(|refusal| {
                format!(
                    "workflow `{workflow_id}` runs as {refusal} ({})",
                    refusal.reason_word()
                )
            })
    }
}

/// Which revision decides each delivery.
#[derive(Debug)]
pub enum Under {
    /// The revision each delivery was decided under (`intake.config_revision`), read from
    /// `config_revisions`; its sources normalise with `sources` (a stored revision keeps only
    /// source names). A revision that is not stored falls back to `fallback`, and says so.
    Original {
        revisions: HashMap<String, Option<Arc<Routing>>>,
        sources: Arc<[SourceConfig]>,
        authority: Arc<Authority>,
        fallback: Arc<Routing>,
    },
    /// One revision for every delivery (`current` or a candidate).
    Fixed(Arc<Routing>),
}

impl Under {
    pub fn original(fallback: Routing) -> Self {
        Under::Original {
            revisions: HashMap::new(),
            sources: fallback.sources.clone(),
            authority: fallback.authority.clone(),
            fallback: Arc::new(fallback),
        }
    }

    /// The routing of `row`, and a note when it is not the one asked for.
    async fn routing_for(
        &mut self,
        store: &Store,
        row: &intake::Model,
    ) -> Result<(Arc<Routing>, Option<String>), DbErr> {
        match self {
            Under::Fixed(routing) => Ok((routing.clone(), None)),
            Under::Original {
                revisions,
                sources,
                authority,
                fallback,
            } => {
                let hash = &row.config_revision;
                if !revisions.contains_key(hash) {
                    let stored = store.revision_by_hash(hash).await?.map(|stored| {
                        let mut routing = Routing::new(
                            format!("original {hash}"),
                            hash,
                            &stored.content.domain_workflows(),
                            sources.clone(),
                            authority.clone(),
                        );
                        routing.bound_only = true;
                        Arc::new(routing)
                    });
                    revisions.insert(hash.clone(), stored);
                }
                match revisions.get(hash).cloned().flatten() {
                    Some(routing) => Ok((routing, None)),
                    None => Ok((
                        fallback.clone(),
                        Some(format!(
                            "revision {hash} is not stored; decided under {}",
                            fallback.label
                        )),
                    )),
                }
            }
        }
    }
}

/// One delivery decided again.
#[derive(Debug)]
pub struct Replayed {
    pub original: intake::Model,
    pub outcome: Outcome,
    pub workflow_id: Option<String>,
    pub held_by_run_id: Option<String>,
    pub detail: Option<String>,
    pub differs: bool,
    /// Why it differs, or how it was replayed when that needs saying.
    pub why: Option<String>,
    /// The normalised delivery (for a live replay to re-admit).
    pub body: Option<DeliveryBody>,
    pub message_key: Option<String>,
}

/// What carries over from one batch to the next: past holders and message claims.
#[derive(Debug, Default)]
pub struct Memory {
    holders: Holders,
    /// `(source, message_key)` claimed by a delivery this replay routed: its intake id.
    claims: HashMap<(String, String), String>,
    /// Intake ids this replay decided that name a message (their ledger claims are replaced
    /// by this replay's).
    replayed_messages: HashSet<String>,
}

/// Decides `rows` (oldest first) again under `under`.
pub async fn decide(
    store: &Store,
    under: &mut Under,
    memory: &mut Memory,
    rows: Vec<intake::Model>,
    channels: &dyn Rereader,
) -> Result<Vec<Replayed>, DbErr> {
    // A row's own bytes are stored under its own id. Its `raw_ref` is never followed: on an
    // old row a sender may have chosen it, naming bytes that are not the row's own.
    let wanted: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let raws = store.raw_deliveries(&wanted).await?;
    // A resume (an answer to a run's wait) was decided against waits, which a replay does not
    // rebuild: it is reported as recorded and never re-admitted.
    let (resumes, rows): (Vec<intake::Model>, Vec<intake::Model>) =
        rows.into_iter().partition(|row| {
            matches!(
                row.outcome.parse::<Outcome>(),
                Ok(Outcome::Resumed
                    | Outcome::NoWaitMatch
                    | Outcome::WaitExpired
                    | Outcome::ReapprovalRequired)
            )
        });
    // Normalise and choose.
    let mut staged = Vec::with_capacity(rows.len());
    for (n, row) in rows.into_iter().enumerate() {
        // Normalising is CPU work: let the runtime's other tasks (live intake) in between.
        if n % 8 == 7 {
            tokio::task::yield_now().await;
        }
        let (routing, note) = under.routing_for(store, &row).await?;
        let raw = raws.get(&row.id);
        let mut normalized = renormalize(&row, raw, &routing.sources, channels);
        // The same bounds intake applies (over-long ids digested, unstorable values invalid).
        normalized.body = crate::intake::Delivery::new(
            uuid::Uuid::nil(),
            row.source.clone(),
            row.delivery_id.clone(),
            normalized.body,
        )
        .body;
        let choice = match &normalized.body {
            DeliveryBody::Route(event) => routing.index.choose_for(
                &event.tenant_id,
                event.channel,
                &event.event_type,
                &event.payload,
            ),
            _ => Choice::NoTrigger,
        };
        let note = [note, normalized.note.take()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        staged.push((row, normalized, choice, note, routing));
    }
    let lock_keys = staged
        .iter()
        .filter_map(|(_, n, choice, ..)| match (&n.body, choice) {
            (DeliveryBody::Route(event), Choice::Chosen(_)) => {
                Some((event.tenant_id.clone(), event.target_entity_id.clone()))
            }
            _ => None,
        });
    memory
        .holders
        .load(store, lock_keys.collect::<Vec<_>>())
        .await?;
    let message_keys: Vec<(&str, &str)> = staged
        .iter()
        .filter_map(|(row, n, ..)| Some((row.source.as_str(), n.message_key.as_deref()?)))
        .collect();
    let ledger_claims = if message_keys.is_empty() {
        HashMap::new()
    } else {
        store.message_claims(&message_keys).await?
    };

    let mut replayed = Vec::with_capacity(staged.len() + resumes.len());
    for row in resumes {
        replayed.push(Replayed {
            outcome: row.outcome.parse().unwrap_or(Outcome::Resumed),
            workflow_id: row.workflow_id.clone(),
            held_by_run_id: None,
            detail: row.detail.clone(),
            differs: false,
            why: Some("a resume of a run's wait: reported as recorded, not decided again".into()),
            body: None,
            message_key: None,
            original: row,
        });
    }
    for (row, normalized, choice, mut notes, routing) in staged {
        let Renormalized {
            body,
            message_key,
            refused,
            ..
        } = normalized;
        let claim_key = message_key.clone().map(|k| (row.source.clone(), k));
        let claimed_by = claim_key.as_ref().and_then(|key| {
            memory.claims.get(key).cloned().or_else(|| {
                ledger_claims
                    .get(key)
                    .filter(|first| {
                        first.id < row.id && !memory.replayed_messages.contains(&first.id)
                    })
                    .map(|first| first.id.clone())
            })
        });
        if message_key.is_some() {
            memory.replayed_messages.insert(row.id.clone());
        }
        let (outcome, workflow_id, held_by_run_id, detail) =
            if let Some((outcome, detail)) = refused {
                (outcome, None, None, Some(detail))
            } else if let Some(first) = claimed_by {
                (
                    Outcome::Duplicate,
                    None,
                    None,
                    Some(format!("message already claimed by intake {first}")),
                )
            } else {
                match (&body, &choice) {
                    (DeliveryBody::Invalid { detail }, _) => {
                        (Outcome::InvalidEvent, None, None, Some(detail.clone()))
                    }
                    (DeliveryBody::Ineligible { detail, .. }, _) => {
                        (Outcome::Ineligible, None, None, Some(detail.clone()))
                    }
                    (
                        DeliveryBody::Refused {
                            outcome, detail, ..
                        },
                        _,
                    ) => (*outcome, None, None, Some(detail.clone())),
                    (DeliveryBody::Route(_), Choice::NoTrigger) => {
                        (Outcome::NoTriggerMatch, None, None, None)
                    }
                    (DeliveryBody::Route(_), Choice::NoConditionHeld(detail)) => {
                        (Outcome::NoTriggerMatch, None, None, Some(detail.clone()))
                    }
                    (DeliveryBody::Route(event), Choice::Chosen(candidate)) => {
                        let workflow = Some(candidate.workflow_id.to_string());
                        let holder = memory.holders.holder_at(
                            &event.tenant_id,
                            &event.target_entity_id,
                            &row.id,
                            row.decided_at,
                        );
                        match (
                            routing.refusal(&candidate.workflow_id, row.decided_at),
                            holder,
                        ) {
                            (Some(refusal), _) => {
                                (Outcome::AuthorityUnavailable, workflow, None, Some(refusal))
                            }
                            (None, Some(holder)) => (
                                Outcome::EntityLocked,
                                workflow,
                                Some(holder.to_owned()),
                                None,
                            ),
                            (None, None) => (Outcome::Routed, workflow, None, None),
                        }
                    }
                }
            };
        if outcome == Outcome::Routed
            && let Some(key) = claim_key
        {
            memory.claims.insert(key, row.id.clone());
        }
        let (outcome, held_by_run_id, detail) = match flow_control(
            &row,
            outcome,
            workflow_id.as_deref(),
            held_by_run_id.as_deref(),
        ) {
            Some(FlowDecided { outcome, note }) => {
                notes.push(note);
                (outcome, None, row.detail.clone())
            }
            None => (outcome, held_by_run_id, detail),
        };
        let differs = outcome.as_str() != row.outcome
            || (matches!(
                outcome,
                Outcome::Routed | Outcome::EntityLocked | Outcome::AuthorityUnavailable
            ) && workflow_id != row.workflow_id);
        if differs {
            notes.insert(
                0,
                why(
                    &row,
                    outcome,
                    workflow_id.as_deref(),
                    held_by_run_id.as_deref(),
                    detail.as_deref(),
                ),
            );
        }
        replayed.push(Replayed {
            original: row,
            outcome,
            workflow_id,
            held_by_run_id,
            detail,
            differs,
            why: (!notes.is_empty()).then(|| notes.join("; ")),
            body: Some(body),
            message_key,
        });
    }
    Ok(replayed)
}

/// A delivery flow control decided, as a replay reports it.
struct FlowDecided {
    outcome: Outcome,
    note: String,
}

/// Flow control's outcomes in a replay, which rebuilds routing and past lease holders but not
/// flow control's state (rates' times, queue counts, whether a window was still open):
/// - `coalesced` into run R is reproduced when the replayed decision is R holding the entity
///   for the same workflow (what joining a window is), and reported as that otherwise;
/// - `rate_limited` is reported as recorded (with this revision's routing in the note) when
///   the replayed routing would still have started a run of the same workflow: only the
///   refusal is not modelled. A live replay re-admits it through intake, whose flow control
///   decides it for real.
fn flow_control(
    row: &intake::Model,
    outcome: Outcome,
    workflow_id: Option<&str>,
    held_by: Option<&str>,
) -> Option<FlowDecided> {
    let same_workflow = row.workflow_id.is_none() || row.workflow_id.as_deref() == workflow_id;
    match (row.outcome.parse::<Outcome>().ok()?, outcome) {
        (Outcome::Coalesced, Outcome::EntityLocked)
            if same_workflow && held_by.is_some() && held_by == row.run_id.as_deref() =>
        {
            Some(FlowDecided {
                outcome: Outcome::Coalesced,
                note: format!(
                    "run {} of `{}` held the entity then and coalesced it (whether its window \
                     was still open is as recorded)",
                    held_by.unwrap_or("?"),
                    workflow_id.unwrap_or("?")
                ),
            })
        }
        (Outcome::RateLimited, Outcome::Routed | Outcome::EntityLocked) if same_workflow => {
            Some(FlowDecided {
                outcome: Outcome::RateLimited,
                note: format!(
                    "refused by flow control then, as recorded (a replay does not model rates \
                     or queue ceilings); this revision's routing: {}",
                    bucket(outcome.as_str(), workflow_id)
                ),
            })
        }
        _ => None,
    }
}

/// A label for an outcome: the workflow for `routed`, the outcome word otherwise.
pub fn bucket(outcome: &str, workflow_id: Option<&str>) -> String {
    match (outcome, workflow_id) {
        ("routed", Some(workflow)) => workflow.to_owned(),
        ("entity_locked", Some(workflow)) => format!("entity_locked ({workflow})"),
        (outcome, _) => outcome.to_owned(),
    }
}

/// Why a delivery comes out differently, in a sentence.
fn why(
    row: &intake::Model,
    outcome: Outcome,
    workflow_id: Option<&str>,
    held_by: Option<&str>,
    detail: Option<&str>,
) -> String {
    let was = bucket(&row.outcome, row.workflow_id.as_deref());
    let now = bucket(outcome.as_str(), workflow_id);
    let reason = match (outcome, row.outcome.as_str()) {
        (Outcome::EntityLocked, _) => {
            format!("run {} held the entity then", held_by.unwrap_or("?"))
        }
        (Outcome::Routed, "entity_locked") => {
            "no run held the entity then under this revision's choice".to_owned()
        }
        (Outcome::Routed, "routed") => format!(
            "`{}` now ranks first for this event",
            workflow_id.unwrap_or("?")
        ),
        (Outcome::Routed, _) => format!("`{}` now triggers on it", workflow_id.unwrap_or("?")),
        (Outcome::NoTriggerMatch, _) => detail
            .map(str::to_owned)
            .unwrap_or_else(|| "no live workflow triggers on it now".to_owned()),
        (_, _) => detail.unwrap_or("decided differently").to_owned(),
    };
    format!("{was} -> {now}: {reason}")
}
