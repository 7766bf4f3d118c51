//! Tenancy from the authenticated context of a delivery, Enterprise Grid included: the
//! workspace an event happened in (`context_team_id`, else `team_id`) maps through `teams`; a
//! workspace not listed there maps through `enterprises` when its org (`context_enterprise_id`,
//! else `enterprise_id`) is bound and, where the envelope lists `authorizations`, one of them is
//! that org's install. An event in an externally shared channel (`is_ext_shared_channel`)
//! whose author belongs to a team this source does not bind is `ineligible`
//! (`external_shared_channel:<team>`), recorded with its event.
//!
//! Invariant: the tenant comes from the source's config and the envelope's context, never from
//! message text or a field a user can type.

use serde_json::Value;

use crate::{SlackError, SlackSourceConfig};

/// The workspace a delivery belongs to, and its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Workspace<'a> {
    pub team_id: &'a str,
    pub tenant_id: &'a str,
}

fn text<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut at = value;
    for key in path {
        at = at.get(*key)?;
    }
    at.as_str().filter(|s| !s.is_empty())
}

/// The tenant of an `event_callback` envelope (or an `app_rate_limited` notice).
pub(crate) fn event_workspace<'a>(
    source: &'a SlackSourceConfig,
    root: &'a Value,
) -> Result<Workspace<'a>, SlackError> {
    let team_id = text(root, &["context_team_id"])
        .or_else(|| text(root, &["team_id"]))
        .ok_or_else(|| SlackError::invalid("missing_field:team_id"))?;
    if let Some(tenant_id) = source.tenant_for(team_id) {
        return Ok(Workspace { team_id, tenant_id });
    }
    let enterprise =
        text(root, &["context_enterprise_id"]).or_else(|| text(root, &["enterprise_id"]));
    let authorised = |enterprise: &str| match root.get("authorizations").and_then(Value::as_array) {
        None => true,
        Some(list) => list
            .iter()
            .any(|a| text(a, &["enterprise_id"]) == Some(enterprise)),
    };
    match enterprise {
        Some(enterprise) if authorised(enterprise) => source
            .tenant_for_enterprise(enterprise)
            .map(|tenant_id| Workspace { team_id, tenant_id })
            .ok_or_else(|| unknown(team_id)),
        _ => Err(unknown(team_id)),
    }
}

/// The tenant of an interaction payload (`team.id`, `enterprise.id`).
pub(crate) fn interaction_workspace<'a>(
    source: &'a SlackSourceConfig,
    payload: &'a Value,
) -> Result<Workspace<'a>, SlackError> {
    let team_id = text(payload, &["team", "id"])
        .or_else(|| text(payload, &["user", "team_id"]))
        .ok_or_else(|| SlackError::invalid("missing_field:team.id"))?;
    if let Some(tenant_id) = source.tenant_for(team_id) {
        return Ok(Workspace { team_id, tenant_id });
    }
    text(payload, &["enterprise", "id"])
        .and_then(|enterprise| source.tenant_for_enterprise(enterprise))
        .map(|tenant_id| Workspace { team_id, tenant_id })
        .ok_or_else(|| unknown(team_id))
}

fn unknown(team_id: &str) -> SlackError {
    SlackError::UnknownTeam {
        team_id: team_id.to_owned(),
    }
}

/// Why an event of an externally shared channel is not this source's work: its author's team
/// (`event.user_team`, else `event.team`) is neither the workspace it was delivered for nor a
/// team in `teams`. `None` when the channel is not externally shared or the author is ours.
pub(crate) fn foreign_author(
    source: &SlackSourceConfig,
    root: &Value,
    workspace: &Workspace<'_>,
) -> Option<String> {
    if root.get("is_ext_shared_channel").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let event = root.get("event")?;
    let author_team = text(event, &["user_team"]).or_else(|| text(event, &["team"]))?;
    (author_team != workspace.team_id && source.tenant_for(author_team).is_none())
        .then(|| format!("external_shared_channel:{author_team}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config() -> SlackSourceConfig {
        let mut config: SlackSourceConfig = serde_json::from_value(json!({
            "name": "grid", "mode": "socket", "app_token_env": "APP",
            "teams": {"T0EAST": "east"}, "enterprises": {"E0ORG": "org"},
        }))
        .unwrap();
        config.urgent_keywords.clear();
        config
    }

    #[test]
    fn a_listed_workspace_keeps_its_tenant_and_others_of_the_org_take_the_orgs() {
        let config = config();
        let east = json!({"team_id": "T0EAST", "enterprise_id": "E0ORG",
            "authorizations": [{"enterprise_id": "E0ORG", "team_id": null, "is_enterprise_install": true}]});
        assert_eq!(event_workspace(&config, &east).unwrap().tenant_id, "east");
        let west = json!({"team_id": "T0EAST", "context_team_id": "T0WEST", "context_enterprise_id": "E0ORG",
            "authorizations": [{"enterprise_id": "E0ORG", "team_id": null, "is_enterprise_install": true}]});
        let west = event_workspace(&config, &west).unwrap();
        assert_eq!((west.team_id, west.tenant_id), ("T0WEST", "org"));
    }

    #[test]
    fn an_org_not_among_the_authorizations_or_not_bound_is_refused() {
        let config = config();
        let unauthorised = json!({"team_id": "T0WEST", "enterprise_id": "E0ORG",
            "authorizations": [{"enterprise_id": "E0OTHER", "team_id": "T0WEST"}]});
        assert!(event_workspace(&config, &unauthorised).is_err());
        let other = json!({"team_id": "T0X", "enterprise_id": "E0OTHER"});
        assert_eq!(
            event_workspace(&config, &other).unwrap_err().detail(),
            "no tenant claims team T0X"
        );
    }

    #[test]
    fn foreign_authors_in_shared_channels_are_named() {
        let config = config();
        let root = json!({"team_id": "T0EAST", "is_ext_shared_channel": true,
            "event": {"type": "message", "user_team": "T0PARTNER"}});
        let ws = event_workspace(&config, &root).unwrap();
        assert_eq!(
            foreign_author(&config, &root, &ws).as_deref(),
            Some("external_shared_channel:T0PARTNER")
        );
        let ours = json!({"team_id": "T0EAST", "is_ext_shared_channel": true,
            "event": {"type": "message", "user_team": "T0EAST"}});
        assert_eq!(foreign_author(&config, &ours, &ws), None);
        let unshared = json!({"team_id": "T0EAST", "event": {"user_team": "T0PARTNER"}});
        assert_eq!(foreign_author(&config, &unshared, &ws), None);
    }
}
