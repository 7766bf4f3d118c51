//! The content of a config revision as the store keeps it: every routing-relevant name and
//! setting of the file in force, never a secret.

use switchyard_store::revisions::{Part, RevisionContent, RevisionPrincipal, RevisionWorkflow};

use super::{BUILTIN_PULL, Settings};

/// What `settings` says, as a stored revision holds it: without its secrets.
pub fn revision_content(settings: &Settings) -> RevisionContent {
    let config = &settings.loaded.config;
    let workflows = config
        .workflows
        .iter()
        .map(|w| RevisionWorkflow {
            workflow: w.to_workflow(),
            target: w.target.clone().unwrap_or_else(|| BUILTIN_PULL.to_owned()),
            run_as: w.run_as.as_ref().map(|r| r.get_ref().clone()),
            requires: w.requires.clone(),
        })
        .collect();
    let principals = config
        .principals
        .iter()
        .map(|p| RevisionPrincipal {
            id: p.id.clone(),
            tenant: p.tenant.clone(),
            kind: p.kind.as_str().to_owned(),
            status: p.status.as_str().to_owned(),
            valid_until: p.valid_until_millis(),
            capabilities: p.capabilities.clone(),
        })
        .collect();
    let schedules = config.schedules.iter().map(|s| Part {
        kind: "schedule".to_owned(),
        name: s.id.clone(),
        tenants: vec![s.tenant.clone()],
    });
    let sources = config
        .sources
        .iter()
        .map(|s| Part {
            kind: s.kind().to_owned(),
            name: s.name().to_owned(),
            tenants: s.tenants().into_iter().map(str::to_owned).collect(),
        })
        .chain(schedules)
        .collect();
    let targets = settings
        .loaded
        .targets()
        .iter()
        .map(|t| Part {
            kind: t.kind().to_owned(),
            name: t.name().to_owned(),
            tenants: Vec::new(),
        })
        .collect();
    RevisionContent {
        workflows,
        sources,
        targets,
        principals,
    }
}
