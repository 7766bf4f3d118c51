//! The audit of one run: the five questions every run answers (what happened, why work
//! started, whose authority constrained it, which version ran, how it ended), built from the
//! run, its ledger row, the stored config revision that routed it and its history. Shared by
//! `GET /v1/runs/{id}` and the console's run page.
//!
//! Invariant: every answer comes from rows written when the thing happened (the ledger row, the
//! run's creation columns, the revision as stored, the history), never from the revision in
//! force now.

use serde::Serialize;
use serde_json::Value;
use switchyard_store::entities::{intake, run, run_history};
use switchyard_store::millis_rfc3339;
use switchyard_store::revisions::RevisionContent;
use switchyard_store::runs::RunRecord;

/// The five answers.
#[derive(Debug, Clone, Serialize)]
pub struct Audit {
    pub what_happened: WhatHappened,
    pub why: Why,
    pub authority: AuthorityAnswer,
    pub version: VersionAnswer,
    pub ending: Ending,
}

/// The event, and where its original bytes are.
#[derive(Debug, Clone, Serialize)]
pub struct WhatHappened {
    pub intake_id: String,
    pub source: Option<String>,
    pub delivery_id: Option<String>,
    pub received_at: Option<String>,
    /// The canonical event as the ledger recorded it (absent if the row was pruned).
    pub event: Option<Value>,
    /// The stored original delivery (`GET /v1/raw/{intake_id}` with `raw:read`).
    pub raw_ref: Option<String>,
}

/// The routing decision and the revision that made it.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    pub outcome: Option<String>,
    pub detail: Option<String>,
    pub workflow_id: String,
    pub config_revision: Option<String>,
    pub decided_at: Option<String>,
    /// The winning trigger as that revision defined it (channel, event type, priority, when).
    pub trigger: Option<Value>,
}

/// The principal the run acted under, as the routing revision defined it.
#[derive(Debug, Clone, Serialize)]
pub struct AuthorityAnswer {
    pub principal_id: Option<String>,
    pub config_revision: Option<String>,
    pub kind: Option<String>,
    pub status: Option<String>,
    pub valid_until: Option<String>,
    pub capabilities: Vec<String>,
    /// What the workflow required of it.
    pub requires: Vec<String>,
}

/// Which code and configuration ran.
#[derive(Debug, Clone, Serialize)]
pub struct VersionAnswer {
    pub config_revision: Option<String>,
    /// As the worker reported it on finish.
    pub worker_version: Option<String>,
}

/// The final (or current) state and its cause.
#[derive(Debug, Clone, Serialize)]
pub struct Ending {
    pub status: String,
    pub finished: bool,
    pub finished_at: Option<String>,
    /// Why the daemon ended it (`authority_revoked`, `budget_exhausted`, `deadline_exceeded`).
    pub reason: Option<String>,
    /// The last history entry's cause and detail.
    pub cause: Option<String>,
    pub detail: Option<String>,
    /// For `superseded`: the subject version that made it unnecessary.
    pub subject_version: Option<String>,
    pub deadline: Option<String>,
    pub budgets: Option<Value>,
    pub usage: Option<Value>,
}

/// The audit of a run, from its record (read from one snapshot, for a consistent answer): its
/// ledger row, the revision that routed it as stored, and its history (oldest first).
pub fn of(record: &RunRecord) -> Audit {
    let run = &record.run;
    let row = record.ledger_row.as_ref();
    let hash = run
        .config_revision
        .clone()
        .or_else(|| row.map(|r| r.config_revision.clone()));
    let content = record.revision.as_ref().map(|r| &r.content);
    build(run, row, content, hash, &record.history)
}

fn json(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

fn build(
    run: &run::Model,
    row: Option<&intake::Model>,
    content: Option<&RevisionContent>,
    hash: Option<String>,
    history: &[run_history::Model],
) -> Audit {
    let workflow = content.and_then(|c| {
        c.workflows
            .iter()
            .find(|w| w.workflow.id == run.workflow_id)
    });
    let trigger = row.zip(workflow).and_then(|(row, w)| {
        w.workflow
            .triggers
            .iter()
            .filter(|t| {
                Some(t.channel.as_str()) == row.channel.as_deref()
                    && Some(t.event_type.as_str()) == row.event_type.as_deref()
            })
            .max_by_key(|t| t.priority)
            .and_then(|t| serde_json::to_value(t).ok())
    });
    let principal = run
        .principal_id
        .as_deref()
        .and_then(|id| content.and_then(|c| c.principals.iter().find(|p| p.id == id)));
    let event = row.and_then(|row| {
        Some(serde_json::json!({
            "channel": row.channel.as_deref()?,
            "event_type": row.event_type.as_deref()?,
            "tenant_id": row.tenant_id.as_deref()?,
            "target_entity_id": row.target_entity_id.as_deref()?,
            "payload": json(row.payload.as_deref()).unwrap_or(Value::Null),
            "raw_ref": row.raw_ref,
        }))
    });
    let last = history.last();
    Audit {
        what_happened: WhatHappened {
            intake_id: run.intake_id.clone(),
            source: row.map(|r| r.source.clone()),
            delivery_id: row.map(|r| r.delivery_id.clone()),
            received_at: row.map(|r| millis_rfc3339(r.received_at)),
            event,
            raw_ref: row.and_then(|r| r.raw_ref.clone()),
        },
        why: Why {
            outcome: row.map(|r| r.outcome.clone()),
            detail: row.and_then(|r| r.detail.clone()),
            workflow_id: run.workflow_id.clone(),
            config_revision: row.map(|r| r.config_revision.clone()).or(hash.clone()),
            decided_at: row.map(|r| millis_rfc3339(r.decided_at)),
            trigger,
        },
        authority: AuthorityAnswer {
            principal_id: run.principal_id.clone(),
            config_revision: hash.clone(),
            kind: principal.map(|p| p.kind.clone()),
            status: principal.map(|p| p.status.clone()),
            valid_until: principal.and_then(|p| p.valid_until.map(millis_rfc3339)),
            capabilities: principal
                .map(|p| p.capabilities.clone())
                .unwrap_or_default(),
            requires: workflow.map(|w| w.requires.clone()).unwrap_or_default(),
        },
        version: VersionAnswer {
            config_revision: hash,
            worker_version: run.worker_version.clone(),
        },
        ending: Ending {
            status: run.status.as_str().to_owned(),
            finished: run.status.is_finished(),
            finished_at: run.finished_at.map(millis_rfc3339),
            reason: run.end_reason.clone(),
            cause: last.map(|h| h.cause.clone()),
            detail: last.and_then(|h| h.detail.clone()),
            subject_version: run.subject_version.clone(),
            deadline: run.deadline_at.map(millis_rfc3339),
            budgets: json(run.budgets.as_deref()),
            usage: json(run.run_usage.as_deref()),
        },
    }
}

impl Audit {
    /// The five answers as (question, rows of (label, value)) for the console.
    pub fn sections(&self) -> Vec<(&'static str, Vec<(&'static str, String)>)> {
        let text = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".into());
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(", ")
            }
        };
        let w = &self.what_happened;
        let event = w.event.as_ref();
        let field = |name: &str| {
            event
                .and_then(|e| e[name].as_str())
                .unwrap_or("—")
                .to_owned()
        };
        vec![
            (
                "What happened",
                vec![
                    (
                        "Event",
                        format!("{} {}", field("channel"), field("event_type")),
                    ),
                    ("Entity", field("target_entity_id")),
                    ("Source", text(&w.source)),
                    ("Delivery id", text(&w.delivery_id)),
                    ("Received (UTC)", text(&w.received_at)),
                    ("Raw bytes", text(&w.raw_ref)),
                ],
            ),
            (
                "Why work started",
                vec![
                    ("Decision", text(&self.why.outcome)),
                    ("Workflow", self.why.workflow_id.clone()),
                    (
                        "Trigger",
                        self.why
                            .trigger
                            .as_ref()
                            .map(|t| {
                                format!(
                                    "{} {} @ {}",
                                    t["channel"].as_str().unwrap_or(""),
                                    t["event_type"].as_str().unwrap_or(""),
                                    t["priority"]
                                )
                            })
                            .unwrap_or_else(|| "—".into()),
                    ),
                    ("Detail", text(&self.why.detail)),
                    ("Config revision", text(&self.why.config_revision)),
                    ("Decided (UTC)", text(&self.why.decided_at)),
                ],
            ),
            (
                "Whose authority",
                vec![
                    ("Principal", text(&self.authority.principal_id)),
                    ("Kind", text(&self.authority.kind)),
                    ("Status then", text(&self.authority.status)),
                    ("Valid until", text(&self.authority.valid_until)),
                    ("Capabilities", list(&self.authority.capabilities)),
                    ("Required", list(&self.authority.requires)),
                    ("As of revision", text(&self.authority.config_revision)),
                ],
            ),
            (
                "Which version ran",
                vec![
                    ("Config revision", text(&self.version.config_revision)),
                    ("Worker version", text(&self.version.worker_version)),
                ],
            ),
            (
                "How it ended",
                vec![
                    ("Status", self.ending.status.clone()),
                    ("Reason", text(&self.ending.reason)),
                    ("Last change", text(&self.ending.cause)),
                    ("Detail", text(&self.ending.detail)),
                    ("Subject version", text(&self.ending.subject_version)),
                    ("Finished (UTC)", text(&self.ending.finished_at)),
                    ("Deadline (UTC)", text(&self.ending.deadline)),
                    (
                        "Budgets",
                        self.ending
                            .budgets
                            .as_ref()
                            .map_or("—".into(), ToString::to_string),
                    ),
                    (
                        "Usage",
                        self.ending
                            .usage
                            .as_ref()
                            .map_or("—".into(), ToString::to_string),
                    ),
                ],
            ),
        ]
    }
}
