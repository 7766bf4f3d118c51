//! `[[principal]]` entries: the named authorities live workflows run as (`run_as`), each of one
//! tenant, with a status, an optional end of validity and the capabilities it holds.
//!
//! Invariant: a live workflow names a principal of its own tenant that holds every capability
//! the workflow `requires`; anything else is refused when the file is loaded, naming the
//! workflow and the line.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use switchyard_core::WorkflowStatus;

use super::WorkflowConfig;
use crate::store::MAX_KEY_LEN;

/// Whose authority a principal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    /// A service account of the tenant (the automation acts as itself).
    Service,
    /// Authority delegated by a person, who can lose it.
    Delegated,
}

impl PrincipalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalKind::Service => "service",
            PrincipalKind::Delegated => "delegated",
        }
    }
}

/// Whether a principal may act now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalStatus {
    Active,
    /// Its workflows are not started (`authority_unavailable`) and its queued runs are
    /// cancelled at dispatch (`authority_revoked`).
    Suspended,
}

impl PrincipalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PrincipalStatus::Active => "active",
            PrincipalStatus::Suspended => "suspended",
        }
    }
}

/// An RFC 3339 time written as a TOML datetime (`2027-01-01T00:00:00Z`) or a string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TimeValue {
    Datetime(toml::value::Datetime),
    Text(String),
}

impl TimeValue {
    /// Unix milliseconds, or why the value is not an RFC 3339 time with an offset.
    pub fn millis(&self) -> Result<i64, String> {
        let text = match self {
            TimeValue::Datetime(datetime) => datetime.to_string(),
            TimeValue::Text(text) => text.clone(),
        };
        chrono::DateTime::parse_from_rfc3339(&text)
            .map(|time| time.timestamp_millis())
            .map_err(|error| format!("`{text}` is not an RFC 3339 time with an offset ({error})"))
    }
}

/// One `[[principal]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalConfig {
    /// Unique across the file; workflows name it in `run_as`, runs record it.
    pub id: String,
    /// The tenant it acts for; only that tenant's workflows may run as it.
    pub tenant: String,
    /// `service` or `delegated`.
    pub kind: PrincipalKind,
    /// `active` or `suspended`.
    pub status: PrincipalStatus,
    /// After this time (RFC 3339) the principal is expired, as if suspended.
    #[serde(default)]
    pub valid_until: Option<TimeValue>,
    /// Free-form capability names (e.g. `ticket:write`) workflows may `require`.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

impl PrincipalConfig {
    /// `valid_until` in Unix milliseconds (`None` when unset or invalid: invalid is refused
    /// at load).
    pub fn valid_until_millis(&self) -> Option<i64> {
        self.valid_until.as_ref().and_then(|v| v.millis().ok())
    }
}

/// Everything that makes the file unusable about the principals and the workflows' `run_as`,
/// each naming the principal or workflow (and the line of `run_as` when there is one); `text`
/// is the file. Missing capabilities are [`capability_gaps`]: an error for `switchyard check`,
/// but a running daemon takes such a file (the revoked capability must stop runs, not keep the
/// old revision and its broader authority in force) and degrades the workflow.
pub fn problems(
    principals: &[PrincipalConfig],
    workflows: &[WorkflowConfig],
    text: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_id: HashMap<&str, &PrincipalConfig> = HashMap::new();
    for principal in principals {
        let id = &principal.id;
        for (field, value) in [("id", id), ("tenant", &principal.tenant)] {
            if value.trim().is_empty() {
                problems.push(format!("principal `{id}`: `{field}` must not be empty"));
            } else if value.len() > MAX_KEY_LEN || value.contains('\u{1f}') {
                problems.push(format!(
                    "principal `{id}`: `{field}` must be at most {MAX_KEY_LEN} bytes of printable text"
                ));
            }
        }
        if by_id.insert(id.as_str(), principal).is_some() {
            problems.push(format!("principal `{id}` is defined more than once"));
        }
        if let Some(Err(error)) = principal.valid_until.as_ref().map(TimeValue::millis) {
            problems.push(format!("principal `{id}`: `valid_until` {error}"));
        }
        if principal.capabilities.iter().any(|c| c.trim().is_empty()) {
            problems.push(format!("principal `{id}`: a capability must not be empty"));
        }
    }
    for workflow in workflows {
        let id = &workflow.id;
        let Some(run_as) = &workflow.run_as else {
            if workflow.status == WorkflowStatus::Live {
                problems.push(format!(
                    "workflow `{id}`{} is live but names no principal: add `run_as = \"<principal>\"` \
                     naming a [[principal]] of tenant `{}`",
                    line_of_workflow(text, id),
                    workflow.tenant
                ));
            }
            continue;
        };
        // Counted only for a problem: counting every workflow's line made a 10,000-workflow
        // file take seconds to check (quadratic in its length).
        let line = || format!(" (line {})", line_at(text, run_as.span().start));
        let Some(principal) = by_id.get(run_as.get_ref().as_str()) else {
            problems.push(format!(
                "workflow `{id}`: `run_as` names principal `{}`{}, which is not defined",
                run_as.get_ref(),
                line()
            ));
            continue;
        };
        if principal.tenant != workflow.tenant {
            problems.push(format!(
                "workflow `{id}` of tenant `{}` runs as principal `{}` of tenant `{}`{}: a \
                 workflow may only run as a principal of its own tenant",
                workflow.tenant,
                principal.id,
                principal.tenant,
                line()
            ));
        }
    }
    problems
}

/// Each live workflow whose principal lacks a capability it `requires`, naming the workflow, the
/// capabilities and the line of `run_as`.
pub fn capability_gaps(
    principals: &[PrincipalConfig],
    workflows: &[WorkflowConfig],
    text: &str,
) -> Vec<String> {
    let mut gaps = Vec::new();
    for workflow in workflows {
        let Some(run_as) = &workflow.run_as else {
            continue;
        };
        let Some(principal) = principals.iter().find(|p| &p.id == run_as.get_ref()) else {
            continue;
        };
        let held: BTreeSet<&str> = principal.capabilities.iter().map(String::as_str).collect();
        let missing: Vec<String> = workflow
            .requires
            .iter()
            .filter(|c| !held.contains(c.as_str()))
            .map(|c| format!("`{c}`"))
            .collect();
        if !missing.is_empty() {
            gaps.push(format!(
                "workflow `{}` requires {} that principal `{}` does not hold (line {}): it will \
                 not start runs",
                workflow.id,
                missing.join(", "),
                principal.id,
                line_at(text, run_as.span().start)
            ));
        }
    }
    gaps
}

/// The 1-based line of byte `offset` in `text`.
fn line_at(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(0, |before| before.matches('\n').count())
        + 1
}

/// ` (line N)` for the `id = "<id>"` line of a `[[workflow]]`, or nothing when it cannot be
/// found (an inline table, an unusual spelling).
fn line_of_workflow(text: &str, id: &str) -> String {
    let mut in_workflow = false;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_workflow = trimmed == "[[workflow]]";
            continue;
        }
        if in_workflow
            && let Some((key, value)) = trimmed.split_once('=')
            && key.trim() == "id"
            && value.trim().trim_matches(|c| c == '"' || c == '\'') == id
        {
            return format!(" (line {})", index + 1);
        }
    }
    String::new()
}
