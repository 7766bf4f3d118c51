//! Shadow workflows (`status = "shadow"`): evaluated on every live event as if they were live,
//! never run and never lock. What each would have done is recorded on the delivery's ledger
//! row (`intake.shadow`, JSON) by the intake decision, and counted per workflow for
//! `/v1/workflows` and the console.
//!
//! [`last_day`] reads the verdicts back per workflow (the one store read here).
//!
//! Invariant: a shadow never changes a decision. It is judged against the live workflows only
//! (each shadow on its own, as if it alone were made live), and nothing is evaluated or stored
//! when the revision has no shadow workflow.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use switchyard_core::Event;
use switchyard_router::{Candidate, TriggerIndex};
use switchyard_store::{DbErr, Store};

/// What one shadow workflow would have done with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It outranks the live winner (or nothing live took the event): it would have won.
    WouldWin,
    /// Its condition holds, but the live winner ranks above it.
    Outranked,
    /// It triggers on the event's key, but no condition of it holds for the payload.
    ConditionFailed,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::WouldWin => "would_win",
            Verdict::Outranked => "outranked",
            Verdict::ConditionFailed => "condition_failed",
        }
    }
}

/// One shadow workflow's verdict on one event, as stored in `intake.shadow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShadowVerdict {
    pub workflow_id: String,
    pub verdict: Verdict,
    /// `would_win`: the live workflow it would have taken the event from (absent: no live
    /// workflow took it); `outranked`: the live workflow that outranks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_workflow_id: Option<String>,
    /// `condition_failed`: what of its condition failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The verdict of every shadow workflow that triggers on the event's key, given the live
/// winner; `None` when no shadow triggers on it.
pub fn evaluate(
    shadows: &TriggerIndex,
    event: &Event,
    live_winner: Option<&Candidate>,
) -> Option<Vec<ShadowVerdict>> {
    let candidates = shadows.candidates(&event.tenant_id, event.channel, &event.event_type)?;
    let mut verdicts: Vec<ShadowVerdict> = Vec::new();
    // Candidates come best first; a workflow's first candidate whose condition holds is the
    // one it would claim the event with.
    for candidate in candidates.iter() {
        let holds = candidate
            .when
            .as_ref()
            .is_none_or(|when| when.holds(&event.payload));
        let seen = verdicts
            .iter_mut()
            .find(|v| *v.workflow_id == *candidate.workflow_id);
        match (seen, holds) {
            (Some(seen), true) if seen.verdict == Verdict::ConditionFailed => {
                *seen = judge(candidate, live_winner);
            }
            (Some(_), _) => {}
            (None, true) => verdicts.push(judge(candidate, live_winner)),
            (None, false) => verdicts.push(ShadowVerdict {
                workflow_id: candidate.workflow_id.to_string(),
                verdict: Verdict::ConditionFailed,
                live_workflow_id: live_winner.map(|w| w.workflow_id.to_string()),
                detail: candidate
                    .when
                    .as_ref()
                    .and_then(|when| when.failure(&event.payload)),
            }),
        }
    }
    (!verdicts.is_empty()).then_some(verdicts)
}

/// The stored form of [`evaluate`]'s verdicts (`intake.shadow`).
pub fn stored(verdicts: &[ShadowVerdict]) -> String {
    serde_json::to_string(verdicts).unwrap_or_default()
}

/// Reads a stored `intake.shadow` back; unreadable text reads as no verdicts.
pub fn parse(text: &str) -> Vec<ShadowVerdict> {
    serde_json::from_str(text).unwrap_or_default()
}

/// What one shadow workflow would have done over a window (`/v1/workflows`, the console).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShadowStats {
    /// Since when (RFC 3339).
    pub since: String,
    /// Events it would have taken.
    pub would_win: u64,
    /// Of those, how many from each live workflow (`no_trigger_match`: nothing live took it).
    pub taken_from: BTreeMap<String, u64>,
    /// Events where a live workflow outranks it.
    pub outranked: u64,
    /// Events on its trigger keys where its condition failed.
    pub condition_failed: u64,
    /// Intake ids of the latest events it would have taken (newest first).
    pub examples: Vec<String>,
}

/// Examples kept per shadow workflow.
const EXAMPLES: usize = 10;
/// One day, in milliseconds.
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The smallest UUIDv7 string of millisecond `at`: ledger ids (UUIDv7) at or after it sort
/// at or after this, so a time window is a primary key range.
pub fn uuid7_floor(at: i64) -> String {
    let hex = format!("{:012x}", at.max(0));
    format!("{}-{}-0000-0000-000000000000", &hex[..8], &hex[8..12])
}

/// Per shadow workflow, what it would have done with the last day's events of `tenants`
/// (`None`: every tenant).
pub async fn last_day(
    store: &Store,
    tenants: Option<&[String]>,
    now: i64,
) -> Result<HashMap<String, ShadowStats>, DbErr> {
    let since = now - DAY_MS;
    let mut stats: HashMap<String, ShadowStats> = HashMap::new();
    let mut rows = store.shadow_verdicts(tenants, since).await?;
    rows.sort_by(|a, b| b.0.cmp(&a.0));
    for (id, shadow) in rows {
        for verdict in parse(shadow.as_deref().unwrap_or("[]")) {
            let entry = stats
                .entry(verdict.workflow_id)
                .or_insert_with(|| ShadowStats {
                    since: switchyard_store::millis_rfc3339(since),
                    ..ShadowStats::default()
                });
            match verdict.verdict {
                Verdict::WouldWin => {
                    entry.would_win += 1;
                    *entry
                        .taken_from
                        .entry(
                            verdict
                                .live_workflow_id
                                .unwrap_or_else(|| "no_trigger_match".into()),
                        )
                        .or_default() += 1;
                    if entry.examples.len() < EXAMPLES {
                        entry.examples.push(id.clone());
                    }
                }
                Verdict::Outranked => entry.outranked += 1,
                Verdict::ConditionFailed => entry.condition_failed += 1,
            }
        }
    }
    Ok(stats)
}

/// A shadow candidate whose condition holds, against the live winner: the router's order
/// (priority descending, then workflow id ascending) decides.
fn judge(shadow: &Candidate, live_winner: Option<&Candidate>) -> ShadowVerdict {
    let wins = live_winner.is_none_or(|live| {
        shadow.priority > live.priority
            || (shadow.priority == live.priority && shadow.workflow_id < live.workflow_id)
    });
    ShadowVerdict {
        workflow_id: shadow.workflow_id.to_string(),
        verdict: if wins {
            Verdict::WouldWin
        } else {
            Verdict::Outranked
        },
        live_workflow_id: live_winner.map(|w| w.workflow_id.to_string()),
        detail: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use switchyard_core::{Channel, Trigger, Workflow, WorkflowStatus};

    use super::*;

    fn workflow(id: &str, status: WorkflowStatus, priority: i32, when: Option<&str>) -> Workflow {
        Workflow {
            id: id.into(),
            tenant_id: "acme".into(),
            status,
            lock_ttl: Duration::from_secs(60),
            triggers: vec![Trigger {
                channel: Channel::Webhook,
                event_type: "ticket.created".into(),
                priority,
                when: when.map(|w| toml::from_str::<WhenDoc>(w).expect("condition").when),
            }],
        }
    }

    #[derive(serde::Deserialize)]
    struct WhenDoc {
        when: switchyard_core::Condition,
    }

    fn event(payload: serde_json::Value) -> Event {
        Event {
            channel: Channel::Webhook,
            event_type: "ticket.created".into(),
            tenant_id: "acme".into(),
            target_entity_id: "t1".into(),
            payload,
            raw_ref: "raw:x".into(),
        }
    }

    #[test]
    fn a_shadow_is_judged_against_the_live_winner_only() {
        let workflows = [
            workflow("triage", WorkflowStatus::Live, 100, None),
            workflow(
                "vip",
                WorkflowStatus::Shadow,
                200,
                Some(r#"when = { field = "ticket.priority", equals = "urgent" }"#),
            ),
            workflow("tagging", WorkflowStatus::Shadow, 10, None),
        ];
        let live = TriggerIndex::build("r", &workflows);
        let shadows = TriggerIndex::build_shadows("r", &workflows).expect("shadows");
        assert!(TriggerIndex::build_shadows("r", &workflows[..1]).is_none());
        let urgent = event(serde_json::json!({"ticket": {"priority": "urgent"}}));
        let winner = live.choose_for("acme", Channel::Webhook, "ticket.created", &urgent.payload);
        let verdicts = evaluate(&shadows, &urgent, winner.candidate()).expect("verdicts");
        let got: Vec<(&str, Verdict, Option<&str>)> = verdicts
            .iter()
            .map(|v| {
                (
                    v.workflow_id.as_str(),
                    v.verdict,
                    v.live_workflow_id.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("vip", Verdict::WouldWin, Some("triage")),
                ("tagging", Verdict::Outranked, Some("triage")),
            ]
        );
        let low = event(serde_json::json!({"ticket": {"priority": "low"}}));
        let verdicts = evaluate(&shadows, &low, winner.candidate()).expect("verdicts");
        assert_eq!(verdicts[0].verdict, Verdict::ConditionFailed);
        assert!(verdicts[0].detail.is_some());
        // Nothing live on the key: a shadow whose condition holds would have taken it.
        let verdicts = evaluate(&shadows, &urgent, None).expect("verdicts");
        assert_eq!(verdicts[0].verdict, Verdict::WouldWin);
        assert_eq!(verdicts[0].live_workflow_id, None);
        let stored = stored(&verdicts);
        assert_eq!(parse(&stored), verdicts);
    }

    #[test]
    fn a_uuid7_floor_sorts_before_every_id_of_its_millisecond_and_after_earlier_ones() {
        let at = 1_764_633_600_123;
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            (at / 1000) as u64,
            ((at % 1000) * 1_000_000) as u32,
        ))
        .to_string();
        assert!(uuid7_floor(at).as_str() <= id.as_str(), "{id}");
        assert!(uuid7_floor(at + 1).as_str() > id.as_str(), "{id}");
    }
}
