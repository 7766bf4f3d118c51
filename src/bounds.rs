//! What bounds a run: each workflow's principal, deadline and budgets as one revision defines
//! them, stamped on every new run at routing (with the revision) and never changed after.
//!
//! Invariant: computed once per revision ([`RunBounds::of`]); stamping a run copies three
//! strings and adds one number, whatever the workflow declares.

use std::collections::HashMap;

use switchyard_store::Millis;
use switchyard_store::entities::run;

use crate::config::{Config, MAX_ATTEMPTS, TargetConfig};

/// One workflow's bounds in one revision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunBounds {
    pub principal_id: Option<String>,
    /// How long a run may take from routing to finish.
    pub deadline_ms: Option<Millis>,
    /// The budgets as stored and sent: a JSON object of numbers, `max_attempts` always among
    /// them (the workflow's, else its target's own bound).
    pub budgets: String,
}

impl RunBounds {
    /// Every workflow's bounds, by id, given the targets in force.
    pub fn of(config: &Config, targets: &[TargetConfig]) -> HashMap<String, RunBounds> {
        config
            .workflows
            .iter()
            .map(|w| {
                let target = w.target.as_deref().unwrap_or(crate::config::BUILTIN_PULL);
                let target_bound = targets
                    .iter()
                    .find(|t| t.name() == target)
                    .map_or(1.0, |t| match t {
                        TargetConfig::Pull(pull) => f64::from(pull.max_claims),
                        // The first attempt and one per retry step.
                        push => (push.retry().len() + 1) as f64,
                    });
                let mut budgets: serde_json::Map<String, serde_json::Value> = w
                    .budgets
                    .iter()
                    .map(|(key, limit)| (key.clone(), number(*limit)))
                    .collect();
                budgets
                    .entry(MAX_ATTEMPTS)
                    .or_insert_with(|| number(target_bound));
                let bounds = RunBounds {
                    principal_id: w.run_as.as_ref().map(|r| r.get_ref().clone()),
                    deadline_ms: w
                        .deadline
                        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)),
                    budgets: serde_json::Value::Object(budgets).to_string(),
                };
                (w.id.clone(), bounds)
            })
            .collect()
    }
}

/// Whole numbers as integers (`40`, not `40.0`), the rest as they are.
fn number(value: f64) -> serde_json::Value {
    if value.fract() == 0.0 && value.abs() < 9e15 {
        serde_json::Value::from(value as i64)
    } else {
        serde_json::Value::from(value)
    }
}

/// Records on each new run the revision that routed it and its workflow's bounds, deadline
/// counted from `now`.
pub fn stamp(
    new_runs: &mut [run::Model],
    revision: &str,
    bounds: &HashMap<String, RunBounds>,
    now: Millis,
) {
    for run in new_runs {
        run.config_revision = Some(revision.to_owned());
        if let Some(bounds) = bounds.get(&run.workflow_id) {
            run.principal_id.clone_from(&bounds.principal_id);
            run.deadline_at = bounds.deadline_ms.map(|ms| now.saturating_add(ms));
            run.budgets = Some(bounds.budgets.clone());
        }
    }
}

/// The budgets a run recorded, by key (empty when it recorded none).
pub fn budgets_of(run: &run::Model) -> serde_json::Map<String, serde_json::Value> {
    parse_object(run.budgets.as_deref())
}

/// The usage a run reported so far, by key.
pub fn usage_of(run: &run::Model) -> serde_json::Map<String, serde_json::Value> {
    parse_object(run.run_usage.as_deref())
}

fn parse_object(text: Option<&str>) -> serde_json::Map<String, serde_json::Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}
