//! The trigger index: live workflows keyed by (tenant, channel, event_type), best first.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use switchyard_core::{Channel, Condition, Workflow, WorkflowStatus};

/// A workflow that triggers on a key, with the priority it claims it at.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub workflow_id: Arc<str>,
    pub priority: i32,
    pub lock_ttl: Duration,
    /// The trigger's condition (`when`); `None` claims every event on the key.
    pub when: Option<Arc<Condition>>,
}

/// What the index chose for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// The highest-priority candidate whose condition holds.
    Chosen(Candidate),
    /// No live workflow triggers on the key at all.
    NoTrigger,
    /// Candidates exist but no condition held: the detail names each and what failed.
    NoConditionHeld(String),
}

impl Choice {
    pub fn candidate(&self) -> Option<&Candidate> {
        match self {
            Choice::Chosen(candidate) => Some(candidate),
            _ => None,
        }
    }
}

/// One candidate's verdict for an event, for `switchyard route`.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub candidate: Candidate,
    /// `None`: its condition holds (or it has none); else what failed.
    pub failed: Option<String>,
}

/// Live workflows by trigger, rebuilt whole for every config revision.
///
/// Each key's candidates are sorted once at build time (priority descending, then workflow id
/// ascending), so choosing is one map lookup.
#[derive(Debug)]
pub struct TriggerIndex {
    revision: String,
    by_trigger: DashMap<String, Arc<[Candidate]>>,
}

/// The `no_trigger_match` detail when every candidate's condition failed: each candidate, its
/// priority and the part of its condition that failed.
fn explain(candidates: &[Candidate], payload: &serde_json::Value) -> String {
    let mut detail = String::from("no trigger condition holds: ");
    for (i, candidate) in candidates.iter().enumerate() {
        if i > 0 {
            detail.push_str("; ");
        }
        let failed = candidate
            .when
            .as_ref()
            .and_then(|when| when.failure(payload))
            .unwrap_or_default();
        detail.push_str(&format!(
            "`{}` (priority {}) needs {failed}",
            candidate.workflow_id, candidate.priority
        ));
    }
    detail
}

/// Two or more live workflows claiming one trigger key at the same priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityTie {
    pub tenant_id: String,
    pub channel: Channel,
    pub event_type: String,
    pub priority: i32,
    pub workflow_ids: Vec<String>,
}

fn key(tenant_id: &str, channel: Channel, event_type: &str) -> String {
    // The unit separator cannot appear in a configured tenant or event type.
    let mut key = String::with_capacity(tenant_id.len() + event_type.len() + 12);
    key.push_str(tenant_id);
    key.push('\u{1f}');
    key.push_str(channel.as_str());
    key.push('\u{1f}');
    key.push_str(event_type);
    key
}

impl TriggerIndex {
    /// Indexes the live workflows among `workflows`; drafts and disabled ones never match.
    pub fn build(revision: impl Into<String>, workflows: &[Workflow]) -> Self {
        Self::build_of(revision, workflows, WorkflowStatus::Live)
    }

    /// Indexes the `shadow` workflows among `workflows` as if they were live, for evaluating
    /// what they would have done; `None` when there is none (nothing to evaluate per event).
    pub fn build_shadows(revision: impl Into<String>, workflows: &[Workflow]) -> Option<Self> {
        workflows
            .iter()
            .any(|w| w.status == WorkflowStatus::Shadow)
            .then(|| Self::build_of(revision, workflows, WorkflowStatus::Shadow))
    }

    fn build_of(
        revision: impl Into<String>,
        workflows: &[Workflow],
        status: WorkflowStatus,
    ) -> Self {
        let mut grouped: std::collections::HashMap<String, Vec<Candidate>> =
            std::collections::HashMap::new();
        for workflow in workflows.iter().filter(|w| w.status == status) {
            let workflow_id: Arc<str> = Arc::from(workflow.id.as_str());
            for trigger in &workflow.triggers {
                let candidates = grouped
                    .entry(key(
                        &workflow.tenant_id,
                        trigger.channel,
                        &trigger.event_type,
                    ))
                    .or_default();
                // One workflow listing the same trigger (and condition) twice keeps its highest
                // priority; the same key under different conditions is one candidate each.
                let when = trigger.when.clone().map(Arc::new);
                match candidates
                    .iter_mut()
                    .find(|c| c.workflow_id == workflow_id && c.when == when)
                {
                    Some(existing) => existing.priority = existing.priority.max(trigger.priority),
                    None => candidates.push(Candidate {
                        workflow_id: workflow_id.clone(),
                        priority: trigger.priority,
                        lock_ttl: workflow.lock_ttl,
                        when,
                    }),
                }
            }
        }
        let by_trigger = DashMap::with_capacity(grouped.len());
        for (key, mut candidates) in grouped {
            candidates.sort_by(|a, b| {
                b.priority
                    .cmp(&a.priority)
                    .then_with(|| a.workflow_id.cmp(&b.workflow_id))
            });
            by_trigger.insert(key, Arc::from(candidates));
        }
        Self {
            revision: revision.into(),
            by_trigger,
        }
    }

    /// The config revision this index was built from.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// How many distinct trigger keys are indexed.
    pub fn len(&self) -> usize {
        self.by_trigger.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_trigger.is_empty()
    }

    /// Every live candidate for the key, best first; empty when nothing triggers on it.
    pub fn candidates(
        &self,
        tenant_id: &str,
        channel: Channel,
        event_type: &str,
    ) -> Option<Arc<[Candidate]>> {
        self.by_trigger
            .get(&key(tenant_id, channel, event_type))
            .map(|entry| entry.value().clone())
    }

    /// The workflow that wins the key, ignoring conditions: highest priority, ties broken by
    /// the smaller id.
    pub fn choose(&self, tenant_id: &str, channel: Channel, event_type: &str) -> Option<Candidate> {
        self.by_trigger
            .get(&key(tenant_id, channel, event_type))
            .and_then(|entry| entry.value().first().cloned())
    }

    /// The workflow that wins this event: the highest-priority candidate whose condition holds
    /// for `payload`. Without conditions this is [`TriggerIndex::choose`] (no allocation);
    /// conditions are evaluated in priority order and only until one holds.
    pub fn choose_for(
        &self,
        tenant_id: &str,
        channel: Channel,
        event_type: &str,
        payload: &serde_json::Value,
    ) -> Choice {
        let Some(entry) = self.by_trigger.get(&key(tenant_id, channel, event_type)) else {
            return Choice::NoTrigger;
        };
        let candidates = entry.value();
        match candidates
            .iter()
            .find(|c| c.when.as_ref().is_none_or(|when| when.holds(payload)))
        {
            Some(winner) => Choice::Chosen(winner.clone()),
            None if candidates.is_empty() => Choice::NoTrigger,
            None => Choice::NoConditionHeld(explain(candidates, payload)),
        }
    }

    /// Every candidate for the event, best first, with its verdict.
    pub fn verdicts(
        &self,
        tenant_id: &str,
        channel: Channel,
        event_type: &str,
        payload: &serde_json::Value,
    ) -> Vec<Verdict> {
        self.candidates(tenant_id, channel, event_type)
            .unwrap_or_default()
            .iter()
            .map(|candidate| Verdict {
                candidate: candidate.clone(),
                failed: candidate
                    .when
                    .as_ref()
                    .and_then(|when| when.failure(payload)),
            })
            .collect()
    }

    /// Every key where live workflows share a priority, for `switchyard check` to warn about.
    pub fn priority_ties(&self) -> Vec<PriorityTie> {
        let mut ties = Vec::new();
        for entry in self.by_trigger.iter() {
            let mut parts = entry.key().split('\u{1f}');
            let (Some(tenant_id), Some(channel), Some(event_type)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(channel) = channel.parse::<Channel>() else {
                continue;
            };
            for group in entry.value().chunk_by(|a, b| a.priority == b.priority) {
                let mut workflow_ids: Vec<String> =
                    group.iter().map(|c| c.workflow_id.to_string()).collect();
                workflow_ids.dedup();
                if workflow_ids.len() > 1 {
                    ties.push(PriorityTie {
                        tenant_id: tenant_id.to_owned(),
                        channel,
                        event_type: event_type.to_owned(),
                        priority: group[0].priority,
                        workflow_ids,
                    });
                }
            }
        }
        ties.sort_by(|a, b| {
            (&a.tenant_id, a.channel, &a.event_type).cmp(&(&b.tenant_id, b.channel, &b.event_type))
        });
        ties
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::Trigger;

    fn workflow(
        id: &str,
        tenant: &str,
        status: WorkflowStatus,
        triggers: &[(&str, i32)],
    ) -> Workflow {
        Workflow {
            id: id.into(),
            tenant_id: tenant.into(),
            status,
            lock_ttl: Workflow::DEFAULT_LOCK_TTL,
            triggers: triggers
                .iter()
                .map(|(event_type, priority)| Trigger {
                    channel: Channel::Webhook,
                    event_type: (*event_type).into(),
                    priority: *priority,
                    when: None,
                })
                .collect(),
        }
    }

    /// One routing rule per row: the event (tenant, event_type) and the workflow that must win.
    #[test]
    fn choose_follows_status_tenant_and_priority() {
        use WorkflowStatus::*;
        let workflows = [
            workflow("triage", "acme", Live, &[("ticket.created", 100)]),
            workflow(
                "tagging",
                "acme",
                Live,
                &[("ticket.created", 50), ("ticket.updated", 10)],
            ),
            workflow("experimental", "acme", Draft, &[("ticket.created", 1000)]),
            workflow(
                "retired",
                "acme",
                Disabled,
                &[("ticket.created", 2000), ("ticket.solved", 5)],
            ),
            workflow("other-tenant", "globex", Live, &[("ticket.created", 500)]),
            workflow("b-tied", "acme", Live, &[("ticket.merged", 7)]),
            workflow("a-tied", "acme", Live, &[("ticket.merged", 7)]),
        ];
        let index = TriggerIndex::build("rev1", &workflows);
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("acme", "ticket.created", Some("triage")),
            ("acme", "ticket.updated", Some("tagging")),
            ("acme", "ticket.solved", None),
            ("acme", "ticket.deleted", None),
            ("globex", "ticket.created", Some("other-tenant")),
            ("globex", "ticket.updated", None),
            ("initech", "ticket.created", None),
            ("acme", "ticket.merged", Some("a-tied")),
        ];
        for (tenant, event_type, expected) in cases {
            let chosen = index.choose(tenant, Channel::Webhook, event_type);
            assert_eq!(
                chosen.as_ref().map(|c| &*c.workflow_id),
                *expected,
                "{tenant} {event_type}"
            );
        }
        assert_eq!(index.choose("acme", Channel::Slack, "ticket.created"), None);
        assert_eq!(index.revision(), "rev1");
    }

    #[test]
    fn ties_are_reported_once_per_key() {
        use WorkflowStatus::*;
        let workflows = [
            workflow("b", "acme", Live, &[("x", 7), ("y", 1)]),
            workflow("a", "acme", Live, &[("x", 7), ("y", 2)]),
            workflow("c", "acme", Draft, &[("x", 7)]),
        ];
        let ties = TriggerIndex::build("r", &workflows).priority_ties();
        assert_eq!(ties.len(), 1);
        assert_eq!(ties[0].event_type, "x");
        assert_eq!(ties[0].workflow_ids, ["a", "b"]);
    }
}

#[cfg(test)]
mod condition_tests {
    use serde_json::{Value, json};
    use switchyard_core::{Trigger, Workflow, WorkflowStatus};

    use super::*;

    fn trigger(priority: i32, when: Option<Value>) -> Trigger {
        Trigger {
            channel: Channel::Webhook,
            event_type: "ticket.updated".into(),
            priority,
            when: when.map(|w| serde_json::from_value(w).expect("condition")),
        }
    }

    fn workflow(id: &str, triggers: Vec<Trigger>) -> Workflow {
        Workflow {
            id: id.into(),
            tenant_id: "acme".into(),
            status: WorkflowStatus::Live,
            lock_ttl: Workflow::DEFAULT_LOCK_TTL,
            triggers,
        }
    }

    /// One row per event: its payload and the workflow that must win (or the failure named).
    #[test]
    fn the_highest_priority_trigger_whose_condition_holds_wins() {
        let index = TriggerIndex::build(
            "r",
            &[
                workflow(
                    "urgent",
                    vec![trigger(
                        100,
                        Some(json!({"any": [
                            {"field": "priority", "equals": "urgent"},
                            {"field": "tags", "equals": "vip"}
                        ]})),
                    )],
                ),
                workflow(
                    "billing",
                    vec![trigger(
                        50,
                        Some(json!({"field": "group", "in": ["billing", "finance"]})),
                    )],
                ),
                workflow("catch-all", vec![trigger(1, None)]),
                // Same workflow, same key, two conditions: one candidate each.
                workflow(
                    "split",
                    vec![
                        trigger(70, Some(json!({"field": "region", "equals": "eu"}))),
                        trigger(20, Some(json!({"field": "region", "equals": "us"}))),
                    ],
                ),
            ],
        );
        let cases: &[(Value, &str)] = &[
            (json!({"priority": "urgent", "group": "billing"}), "urgent"),
            (json!({"priority": "low", "tags": ["vip"]}), "urgent"),
            (json!({"priority": "low", "group": "finance"}), "billing"),
            (json!({"region": "eu", "group": "finance"}), "split"),
            (json!({"region": "us", "group": "finance"}), "billing"),
            (json!({"region": "us"}), "split"),
            (json!({"priority": "low"}), "catch-all"),
            (json!({}), "catch-all"),
        ];
        for (payload, expected) in cases {
            let choice = index.choose_for("acme", Channel::Webhook, "ticket.updated", payload);
            assert_eq!(
                choice.candidate().map(|c| &*c.workflow_id),
                Some(*expected),
                "{payload}"
            );
        }
        assert_eq!(
            index.choose_for("acme", Channel::Webhook, "ticket.created", &json!({})),
            Choice::NoTrigger
        );
    }

    #[test]
    fn when_no_condition_holds_the_detail_names_each_candidate() {
        let index = TriggerIndex::build(
            "r",
            &[
                workflow(
                    "urgent",
                    vec![trigger(
                        100,
                        Some(json!({"field": "priority", "equals": "urgent"})),
                    )],
                ),
                workflow(
                    "vip",
                    vec![trigger(50, Some(json!({"field": "tags", "equals": "vip"})))],
                ),
            ],
        );
        let payload = json!({"priority": "low", "tags": []});
        let Choice::NoConditionHeld(detail) =
            index.choose_for("acme", Channel::Webhook, "ticket.updated", &payload)
        else {
            panic!("no condition holds");
        };
        assert_eq!(
            detail,
            r#"no trigger condition holds: `urgent` (priority 100) needs priority = "urgent" (found "low"); `vip` (priority 50) needs tags = "vip" (found [])"#
        );
        let verdicts = index.verdicts(
            "acme",
            Channel::Webhook,
            "ticket.updated",
            &json!({"tags": ["vip"]}),
        );
        let shown: Vec<(&str, bool)> = verdicts
            .iter()
            .map(|v| (&*v.candidate.workflow_id, v.failed.is_none()))
            .collect();
        assert_eq!(shown, [("urgent", false), ("vip", true)]);
    }
}
