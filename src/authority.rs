//! Whose authority a run acts under: the principals of the revision in force and the one check
//! made at routing (`authority_unavailable`), at dispatch (`authority_revoked`) and, once waits
//! exist, at every resume.
//!
//! Invariant: the check is a pure function of the revision in force and the clock
//! ([`check`]); routing pays nothing for it while every live workflow's principal is active,
//! capable and unexpired ([`Authority::refusal_at_routing`] compares one number).

use std::collections::HashMap;

use switchyard_core::WorkflowStatus;
use switchyard_store::{Millis, millis_rfc3339};

use crate::config::{Config, PrincipalKind, PrincipalStatus};

/// A principal as the revision in force defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    pub id: String,
    pub tenant: String,
    pub kind: PrincipalKind,
    pub status: PrincipalStatus,
    /// Unix ms after which it is expired.
    pub valid_until: Option<Millis>,
    pub capabilities: Vec<String>,
}

/// Why a principal may not act now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    Suspended,
    /// Its `valid_until` (Unix ms) has passed.
    Expired(Millis),
    /// It lacks these capabilities the workflow requires.
    MissingCapabilities(Vec<String>),
    /// The revision in force defines no principal by that id (removed since the run began), or
    /// a live workflow names none.
    Unknown,
}

/// A refused principal and why: what `authority_unavailable` and `authority_revoked` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub principal: String,
    pub reason: Reason,
}

impl Refusal {
    /// The reason as one word (`suspended`, `expired`, `missing_capability`, `unknown`).
    pub fn reason_word(&self) -> &'static str {
        match self.reason {
            Reason::Suspended => "suspended",
            Reason::Expired(_) => "expired",
            Reason::MissingCapabilities(_) => "missing_capability",
            Reason::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let principal = &self.principal;
        match &self.reason {
            Reason::Suspended => write!(f, "principal `{principal}` is suspended"),
            Reason::Expired(at) => write!(
                f,
                "principal `{principal}` expired at {}",
                millis_rfc3339(*at)
            ),
            Reason::MissingCapabilities(missing) => write!(
                f,
                "principal `{principal}` lacks {}",
                missing
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Reason::Unknown => write!(
                f,
                "principal `{principal}` is not defined in the revision in force"
            ),
        }
    }
}

/// Whether `principal` (as the revision in force defines it, `None` if it does not) may act
/// at `now` for a workflow that requires `requires`. `id` names it in the refusal.
pub fn check(
    id: &str,
    principal: Option<&Principal>,
    requires: &[String],
    now: Millis,
) -> Result<(), Refusal> {
    let refuse = |reason| {
        Err(Refusal {
            principal: id.to_owned(),
            reason,
        })
    };
    let Some(principal) = principal else {
        return refuse(Reason::Unknown);
    };
    if principal.status == PrincipalStatus::Suspended {
        return refuse(Reason::Suspended);
    }
    if let Some(until) = principal.valid_until
        && now >= until
    {
        return refuse(Reason::Expired(until));
    }
    let missing: Vec<String> = requires
        .iter()
        .filter(|c| !principal.capabilities.contains(c))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return refuse(Reason::MissingCapabilities(missing));
    }
    Ok(())
}

/// Which principal a workflow runs as, and what it requires of it.
#[derive(Debug, Clone)]
struct Binding {
    run_as: Option<String>,
    requires: Vec<String>,
    live: bool,
}

/// The principals and workflow bindings of one revision.
#[derive(Debug, Default)]
pub struct Authority {
    principals: HashMap<String, Principal>,
    bindings: HashMap<String, Binding>,
    /// Before this time no live workflow's principal refuses: routing checks nothing.
    /// `Millis::MIN` when one refuses already (suspended, lacking a capability).
    all_fine_until: Millis,
}

impl Authority {
    pub fn new(config: &Config) -> Self {
        let principals: HashMap<String, Principal> = config
            .principals
            .iter()
            .map(|p| {
                (
                    p.id.clone(),
                    Principal {
                        id: p.id.clone(),
                        tenant: p.tenant.clone(),
                        kind: p.kind,
                        status: p.status,
                        valid_until: p.valid_until_millis(),
                        capabilities: p.capabilities.clone(),
                    },
                )
            })
            .collect();
        let bindings: HashMap<String, Binding> = config
            .workflows
            .iter()
            .map(|w| {
                (
                    w.id.clone(),
                    Binding {
                        run_as: w.run_as.as_ref().map(|r| r.get_ref().clone()),
                        requires: w.requires.clone(),
                        live: w.status == WorkflowStatus::Live,
                    },
                )
            })
            .collect();
        let mut authority = Self {
            principals,
            bindings,
            all_fine_until: Millis::MAX,
        };
        let mut all_fine_until = Millis::MAX;
        for (workflow_id, binding) in authority.bindings.iter().filter(|(_, b)| b.live) {
            let principal = binding
                .run_as
                .as_deref()
                .and_then(|id| authority.principals.get(id));
            match principal {
                Some(p)
                    if p.status == PrincipalStatus::Active
                        && binding.requires.iter().all(|c| p.capabilities.contains(c)) =>
                {
                    if let Some(until) = p.valid_until {
                        all_fine_until = all_fine_until.min(until);
                    }
                }
                _ => {
                    tracing::debug!(workflow_id = %workflow_id, "a live workflow's principal refuses");
                    all_fine_until = Millis::MIN;
                }
            }
        }
        authority.all_fine_until = all_fine_until;
        authority
    }

    /// The principal `id` in this revision.
    pub fn principal(&self, id: &str) -> Option<&Principal> {
        self.principals.get(id)
    }

    /// The principal `workflow_id` runs as, if it names one that exists.
    pub fn run_as(&self, workflow_id: &str) -> Option<&Principal> {
        self.bindings
            .get(workflow_id)
            .and_then(|b| b.run_as.as_deref())
            .and_then(|id| self.principals.get(id))
    }

    /// Why the live workflow `workflow_id` may not start a run at `now`, or `None`. Free while
    /// every live workflow's principal is fine (one comparison, no lookup).
    pub fn refusal_at_routing(&self, workflow_id: &str, now: Millis) -> Option<Refusal> {
        if now < self.all_fine_until {
            return None;
        }
        self.check_workflow(workflow_id, now).err()
    }

    /// Whether the workflow's principal may act at `now` (a workflow not in this revision, or
    /// without `run_as`, is refused as `unknown`).
    pub fn check_workflow(&self, workflow_id: &str, now: Millis) -> Result<(), Refusal> {
        let binding = self.bindings.get(workflow_id);
        let id = binding.and_then(|b| b.run_as.as_deref()).unwrap_or("");
        let requires = binding.map_or(&[][..], |b| b.requires.as_slice());
        check(id, self.principals.get(id), requires, now)
    }

    /// Whether a run of `workflow_id` that records `principal_id` may go on at `now`: that
    /// principal as this revision defines it, against what the workflow requires now.
    pub fn check_run(
        &self,
        workflow_id: &str,
        principal_id: &str,
        now: Millis,
    ) -> Result<(), Refusal> {
        let requires = self
            .bindings
            .get(workflow_id)
            .map_or(&[][..], |b| b.requires.as_slice());
        check(
            principal_id,
            self.principals.get(principal_id),
            requires,
            now,
        )
    }

    /// Why each live workflow may not start runs at `now` (for `/v1/workflows`, `/readyz` and
    /// the console), by workflow id.
    pub fn degraded(&self, now: Millis) -> HashMap<&str, Refusal> {
        if now < self.all_fine_until {
            return HashMap::new();
        }
        self.bindings
            .iter()
            .filter(|(_, b)| b.live)
            .filter_map(|(id, _)| Some((id.as_str(), self.check_workflow(id, now).err()?)))
            .collect()
    }
}

/// Checks a run about to reach its worker against the revision in force: a run whose principal
/// may no longer act is ended `cancelled` (`authority_revoked`, the refusal in its history),
/// its entity released and its dispatch closed, and `true` is returned: the caller must not
/// deliver it. Runs from before principals existed (none recorded) go on.
pub async fn revoke_if_refused(
    store: &switchyard_store::Store,
    authority: &Authority,
    run: &switchyard_store::entities::run::Model,
    now: Millis,
) -> Result<bool, switchyard_store::runs::RunError> {
    let Some(principal_id) = run.principal_id.as_deref() else {
        return Ok(false);
    };
    let Err(refusal) = authority.check_run(&run.workflow_id, principal_id, now) else {
        return Ok(false);
    };
    let detail = format!("{refusal} ({}) before delivery", refusal.reason_word());
    let ended = store
        .end_run(
            &run.id,
            switchyard_store::entities::run::RunStatus::Cancelled,
            REVOKED,
            Some(detail),
            now,
        )
        .await?;
    if ended {
        crate::metrics::metrics().workflow_run_finished(&run.workflow_id, "cancelled");
        tracing::warn!(run_id = %run.id, tenant_id = %run.tenant_id, principal = %refusal.principal, reason = refusal.reason_word(), "run cancelled before delivery: {refusal}");
    }
    Ok(true)
}

/// The reason (and history cause) of a run cancelled because its principal may no longer act.
pub const REVOKED: &str = "authority_revoked";

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(status: PrincipalStatus, valid_until: Option<Millis>) -> Principal {
        Principal {
            id: "bot".into(),
            tenant: "acme".into(),
            kind: PrincipalKind::Service,
            status,
            valid_until,
            capabilities: vec!["ticket:write".into()],
        }
    }

    #[test]
    fn check_refuses_suspended_expired_incapable_and_unknown_principals() {
        let write = vec!["ticket:write".to_owned()];
        let active = principal(PrincipalStatus::Active, Some(1_000));
        type Case<'a> = (Option<&'a Principal>, &'a [String], Millis, Option<&'a str>);
        let cases: [Case; 6] = [
            (Some(&active), &write, 999, None),
            (Some(&active), &write, 1_000, Some("expired")),
            (
                Some(&principal(PrincipalStatus::Suspended, None)),
                &write,
                0,
                Some("suspended"),
            ),
            (
                Some(&active),
                &["ticket:delete".to_owned()],
                0,
                Some("missing_capability"),
            ),
            (None, &write, 0, Some("unknown")),
            (
                Some(&principal(PrincipalStatus::Active, None)),
                &[],
                0,
                None,
            ),
        ];
        for (principal, requires, now, expected) in cases {
            let got = check("bot", principal, requires, now).err();
            assert_eq!(got.as_ref().map(Refusal::reason_word), expected, "{got:?}");
        }
        let refusal = check("bot", Some(&active), &["a".into(), "b".into()], 0).unwrap_err();
        assert_eq!(refusal.to_string(), "principal `bot` lacks `a`, `b`");
    }
}
