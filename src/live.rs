//! The config revision in force: the trigger index, workflows and sources every request reads.
//! A reload swaps the whole revision at once, so a request sees one revision from start to end.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use switchyard_core::Workflow;
use switchyard_router::TriggerIndex;
use switchyard_store::ceilings::MaxRunning;

use crate::authority::Authority;
use crate::bounds::RunBounds;
use crate::config::{BUILTIN_PULL, ResolvedSource, ResolvedTarget, Settings};

/// One config revision, ready to serve.
#[derive(Debug)]
pub struct Live {
    pub settings: Settings,
    pub index: TriggerIndex,
    /// The `shadow` workflows, indexed as if live (`shadow.rs`); `None` when there are none.
    pub shadows: Option<TriggerIndex>,
    pub workflows: Vec<Workflow>,
    /// The principals workflows run as, and the check made at routing and dispatch.
    pub authority: Authority,
    /// Each workflow's principal, deadline and budgets, stamped on its new runs.
    pub bounds: HashMap<String, RunBounds>,
    /// Sources by (kind, name).
    sources: HashMap<(&'static str, String), ResolvedSource>,
    /// Each workflow's target name.
    targets_by_workflow: HashMap<String, String>,
    /// Ceilings, rates and coalescing windows.
    pub flow: crate::config::FlowConfig,
    /// Every workflow's `max_running`, with its target, for the dispatch claims.
    pub max_running: Vec<MaxRunning>,
}

impl Live {
    pub fn new(settings: Settings) -> Self {
        let workflows = settings.loaded.workflows();
        let index = TriggerIndex::build(settings.loaded.revision.clone(), &workflows);
        let shadows = TriggerIndex::build_shadows(settings.loaded.revision.clone(), &workflows);
        let authority = Authority::new(&settings.loaded.config);
        let bounds = RunBounds::of(&settings.loaded.config, &settings.loaded.targets());
        let sources = settings
            .loaded
            .config
            .sources
            .iter()
            .zip(&settings.sources)
            .map(|(config, resolved)| ((config.kind(), config.name().to_owned()), resolved.clone()))
            .collect();
        let targets_by_workflow: HashMap<String, String> = settings
            .loaded
            .config
            .workflows
            .iter()
            .map(|w| {
                let target = w.target.clone().unwrap_or_else(|| BUILTIN_PULL.to_owned());
                (w.id.clone(), target)
            })
            .collect();
        let flow = crate::config::FlowConfig::new(&settings.loaded.config);
        let max_running = settings
            .loaded
            .config
            .workflows
            .iter()
            .filter_map(|w| {
                Some(MaxRunning {
                    workflow_id: w.id.clone(),
                    target: targets_by_workflow.get(&w.id)?.clone(),
                    max: w.max_running?,
                })
            })
            .collect();
        Self {
            max_running,
            settings,
            index,
            shadows,
            workflows,
            authority,
            bounds,
            sources,
            targets_by_workflow,
            flow,
        }
    }

    /// The target runs of `workflow_id` are delivered to.
    pub fn target_of(&self, workflow_id: &str) -> &str {
        self.targets_by_workflow
            .get(workflow_id)
            .map_or(BUILTIN_PULL, String::as_str)
    }

    /// The target named `name`, if in force.
    pub fn target(&self, name: &str) -> Option<&ResolvedTarget> {
        self.settings.targets.iter().find(|t| t.name() == name)
    }

    /// Who may resume the waits of `workflow_id`'s runs (`None`: any actor; see
    /// `WorkflowConfig::approvers`). A workflow no longer configured allows nobody.
    pub fn approvers_of(&self, workflow_id: &str) -> Option<&[String]> {
        match self
            .settings
            .loaded
            .config
            .workflows
            .iter()
            .find(|w| w.id == workflow_id)
        {
            Some(workflow) => workflow.approvers.as_deref(),
            None => Some(&[]),
        }
    }

    pub fn revision(&self) -> &str {
        self.index.revision()
    }

    /// The source of `kind` named `name`, if configured.
    pub fn source(&self, kind: &'static str, name: &str) -> Option<&ResolvedSource> {
        self.sources.get(&(kind, name.to_owned()))
    }

    /// The tenants of the source named `name` (of any kind); empty when there is none.
    pub fn source_tenants(&self, name: &str) -> Vec<String> {
        self.settings
            .loaded
            .config
            .sources
            .iter()
            .filter(|source| source.name() == name)
            .flat_map(|source| source.tenants().into_iter().map(str::to_owned))
            .collect()
    }
}

/// A shared handle on the revision in force.
#[derive(Debug, Clone)]
pub struct LiveConfig(Arc<RwLock<Arc<Live>>>);

impl LiveConfig {
    pub fn new(live: Live) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(live))))
    }

    /// The revision in force now; hold the `Arc` for the length of one decision.
    pub fn current(&self) -> Arc<Live> {
        match self.0.read() {
            Ok(guard) => guard.clone(),
            // A panic while swapping cannot leave a half-written Arc; keep serving.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts a new revision in force.
    pub fn replace(&self, live: Live) {
        let live = Arc::new(live);
        match self.0.write() {
            Ok(mut guard) => *guard = live,
            Err(poisoned) => *poisoned.into_inner() = live,
        }
    }
}
