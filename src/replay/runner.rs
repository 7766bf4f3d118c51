//! Running a replay: in the background (the daemon's `POST /v1/replays`) or in the foreground
//! (`switchyard replay`), in bounded batches of ledger rows, oldest first, each recorded with
//! the replay's progress in one short transaction, cancellable between batches.
//!
//! Live intake comes first: after every batch the replay sleeps twice as long as the batch
//! took (at most a third of one core), and waits while the intake writers have deliveries
//! queued, so a large replay does not take live intake's turns at the database.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchyard_store::entities::{replay, replay_result};
use switchyard_store::{DbErr, Store, now_millis};
use uuid::Uuid;

use super::engine::{self, Memory, Replayed, Routing, Under};
use super::reread::Rereader;
use super::{Filters, Mode, RevisionChoice, replay_delivery_id};
use crate::config::LoadedConfig;
use crate::intake::{Delivery, Intake, ReplayLink};

/// Ledger rows per diagnostic batch: small, so one batch's decisions and its one write
/// transaction never hold a runtime thread or the write lock long.
const DIAGNOSTIC_BATCH: u64 = 64;
/// Deliveries re-admitted per live batch (submitted together, so they share commits).
const LIVE_BATCH: u64 = 64;
/// The longest a batch waits for the intake writers' queues to drain.
const MAX_YIELD: Duration = Duration::from_secs(1);

/// What to replay, as asked.
#[derive(Debug, Clone)]
pub struct Request {
    pub mode: Mode,
    pub revision: RevisionChoice,
    /// The candidate file's text, for `RevisionChoice::Candidate`.
    pub candidate: Option<String>,
    pub filters: Filters,
    /// `token:<name>` or `cli:<user>`.
    pub actor: String,
}

/// Why a replay cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] DbErr),
}

/// Progress as a replay reports it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    pub total: u64,
    pub done: u64,
    pub differ: u64,
}

/// Starts, tracks and cancels replays on one database.
#[derive(Debug, Clone)]
pub struct Replayer {
    store: Store,
    /// The intake live replays re-admit through (`None`: diagnostic only).
    intake: Option<Intake>,
    /// The channels that read stored bytes again (the daemon's registrations).
    channels: &'static dyn Rereader,
    /// The cancel flag of each replay running in this process.
    running: Arc<Mutex<HashMap<String, Arc<AtomicBool>>>>,
}

/// A replay ready to run: its row and what decides it.
#[derive(Debug)]
pub struct Prepared {
    pub row: replay::Model,
    under: Under,
    filters: Filters,
    mode: Mode,
}

impl Replayer {
    pub fn new(store: Store, intake: Option<Intake>, channels: &'static dyn Rereader) -> Self {
        Self {
            store,
            intake,
            channels,
            running: Arc::default(),
        }
    }

    /// Checks a request against the config in force (`current`) and records the replay.
    pub async fn prepare(
        &self,
        request: Request,
        current: &LoadedConfig,
    ) -> Result<Prepared, StartError> {
        let candidate = match (&request.revision, &request.candidate) {
            (RevisionChoice::Candidate, Some(text)) => Some(parse_candidate(text, current)?),
            (RevisionChoice::Candidate, None) => {
                return Err(StartError::Invalid(
                    "`revision = \"candidate\"` needs the candidate file's text in `candidate`"
                        .into(),
                ));
            }
            (_, Some(_)) => {
                return Err(StartError::Invalid(
                    "`candidate` is only read with `revision = \"candidate\"`".into(),
                ));
            }
            (_, None) => None,
        };
        if request.mode == Mode::Live {
            if request.revision != RevisionChoice::Current {
                return Err(StartError::Invalid(
                    "a live replay re-admits deliveries through intake, where the revision in \
                     force decides them: use `revision = \"current\"` (original revisions and \
                     candidates are for diagnostic replays)"
                        .into(),
                ));
            }
            if self.intake.is_none() {
                return Err(StartError::Invalid(
                    "live replays need the daemon's intake".into(),
                ));
            }
        }
        if let (Some(since), Some(until)) = (request.filters.since, request.filters.until)
            && since >= until
        {
            return Err(StartError::Invalid("`since` must be before `until`".into()));
        }
        let under = under(request.revision, current, candidate.as_ref());
        let id = Uuid::now_v7().to_string();
        let total = self
            .store
            .replay_count(&request.filters, &id, request.mode.originals_only())
            .await?;
        let now = now_millis();
        let row = replay::Model {
            id,
            actor: request.actor.clone(),
            mode: request.mode.as_str().to_owned(),
            revision: request.revision.as_str().to_owned(),
            candidate_revision: candidate.as_ref().map(|c| c.revision.clone()),
            candidate: request.candidate.clone(),
            filters: serde_json::to_string(&request.filters).unwrap_or_default(),
            status: "running".into(),
            total: total as i64,
            done: 0,
            differ: 0,
            last_intake_id: None,
            error: None,
            created_at: now,
            started_at: Some(now),
            finished_at: None,
        };
        self.store.create_replay(row.clone()).await?;
        Ok(Prepared {
            row,
            under,
            filters: request.filters,
            mode: request.mode,
        })
    }

    /// Prepares a stored replay to run again, from the start, under the same parameters; a
    /// live replay re-admits under the same delivery ids, so what it admitted before comes
    /// back `duplicate`.
    pub async fn prepare_rerun(
        &self,
        id: &str,
        current: &LoadedConfig,
    ) -> Result<Prepared, StartError> {
        let Some(row) = self.store.replay(id).await? else {
            return Err(StartError::Invalid(format!("no replay `{id}`")));
        };
        if row.status == "running" && self.is_running(id) {
            return Err(StartError::Invalid(format!("replay `{id}` is running")));
        }
        let revision: RevisionChoice = row.revision.parse().map_err(StartError::Invalid)?;
        let candidate = match &row.candidate {
            Some(text) => Some(parse_candidate(text, current)?),
            None => None,
        };
        let filters: Filters = serde_json::from_str(&row.filters).map_err(|e| {
            StartError::Invalid(format!("replay `{id}` has unreadable filters: {e}"))
        })?;
        let mode = if row.mode == "live" {
            Mode::Live
        } else {
            Mode::Diagnostic
        };
        if mode == Mode::Live && self.intake.is_none() {
            return Err(StartError::Invalid(
                "live replays need the daemon's intake".into(),
            ));
        }
        let total = self
            .store
            .replay_count(&filters, id, mode.originals_only())
            .await?;
        self.store
            .start_replay(id, total as i64, now_millis())
            .await?;
        let row = self.store.replay(id).await?.unwrap_or(row);
        Ok(Prepared {
            under: under(revision, current, candidate.as_ref()),
            row,
            filters,
            mode,
        })
    }

    /// Runs a prepared replay in the background; returns at once. The replay can be
    /// cancelled from the moment this returns (its cancel flag is registered here, not when
    /// the task first runs, which on a busy runtime may be after a cancel request).
    pub fn spawn(&self, prepared: Prepared) {
        let cancel = self.register(&prepared.row.id);
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.run_registered(prepared, cancel, |_| {}).await;
        });
    }

    /// A new cancel flag for replay `id`, listed as running in this process.
    fn register(&self, id: &str) -> Arc<AtomicBool> {
        let cancel = Arc::new(AtomicBool::new(false));
        self.lock_running().insert(id.to_owned(), cancel.clone());
        cancel
    }

    /// Runs a prepared replay to its end, reporting progress after each batch; records how
    /// it ended and returns its final row.
    pub async fn run(
        &self,
        prepared: Prepared,
        progress: impl Fn(Progress),
    ) -> Result<replay::Model, DbErr> {
        let cancel = self.register(&prepared.row.id);
        self.run_registered(prepared, cancel, progress).await
    }

    /// [`Replayer::run`], with its cancel flag already registered.
    async fn run_registered(
        &self,
        prepared: Prepared,
        cancel: Arc<AtomicBool>,
        progress: impl Fn(Progress),
    ) -> Result<replay::Model, DbErr> {
        let id = prepared.row.id.clone();
        let result = self.drive(prepared, &cancel, &progress).await;
        self.lock_running().remove(&id);
        let (status, error) = match &result {
            Ok(()) if cancel.load(Ordering::Relaxed) => ("cancelled", None),
            Ok(()) => ("completed", None),
            Err(error) => {
                tracing::warn!(replay_id = %id, %error, "replay failed");
                ("failed", Some(error.to_string()))
            }
        };
        self.store
            .finish_replay(&id, status, error, now_millis())
            .await?;
        tracing::info!(replay_id = %id, status, "replay ended");
        self.store
            .replay(&id)
            .await?
            .ok_or_else(|| DbErr::RecordNotFound(format!("replay {id}")))
    }

    /// Asks a replay running in this process to stop after its current batch.
    pub fn cancel(&self, id: &str) -> bool {
        match self.lock_running().get(id) {
            Some(flag) => {
                flag.store(true, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    pub fn is_running(&self, id: &str) -> bool {
        self.lock_running().contains_key(id)
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<AtomicBool>>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn drive(
        &self,
        prepared: Prepared,
        cancel: &AtomicBool,
        progress: &impl Fn(Progress),
    ) -> Result<(), DbErr> {
        let Prepared {
            row,
            mut under,
            filters,
            mode,
        } = prepared;
        let batch = match mode {
            Mode::Diagnostic => DIAGNOSTIC_BATCH,
            Mode::Live => LIVE_BATCH,
        };
        let mut memory = Memory::default();
        let mut state = Progress {
            total: row.total.max(0) as u64,
            ..Progress::default()
        };
        let mut after: Option<String> = None;
        loop {
            if cancel.load(Ordering::Relaxed) {
                return Ok(());
            }
            let started = Instant::now();
            let rows = self
                .store
                .replay_page(
                    &filters,
                    &row.id,
                    mode.originals_only(),
                    after.as_deref(),
                    batch,
                )
                .await?;
            let Some(last) = rows.last().map(|r| r.id.clone()) else {
                return Ok(());
            };
            let replayed =
                engine::decide(&self.store, &mut under, &mut memory, rows, self.channels).await?;
            let results = match mode {
                Mode::Diagnostic => replayed
                    .into_iter()
                    .map(|r| result_of(&row.id, r))
                    .collect(),
                Mode::Live => self.readmit(&row.id, replayed).await,
            };
            let results: Vec<replay_result::Model> = results;
            state.done += results.len() as u64;
            state.differ += results.iter().filter(|r| r.differs).count() as u64;
            self.store
                .record_replay_batch(&row.id, results, &last)
                .await?;
            progress(state);
            after = Some(last);
            self.yield_to_intake(started.elapsed()).await;
        }
    }

    /// Re-admits a batch through intake, all at once (they share the writers' commits).
    async fn readmit(&self, replay_id: &str, replayed: Vec<Replayed>) -> Vec<replay_result::Model> {
        let Some(intake) = &self.intake else {
            return Vec::new();
        };
        let submitted = replayed.into_iter().map(|mut r| async move {
            let refused = r.outcome == switchyard_core::Outcome::UnauthorizedSource;
            let body = r.body.take();
            let (Some(body), false) = (body, refused) else {
                return result_of(replay_id, r);
            };
            let mut delivery = Delivery::new(
                Uuid::now_v7(),
                r.original.source.clone(),
                replay_delivery_id(replay_id, &r.original.delivery_id),
                body,
            )
            .scoped_to(&r.original.scope);
            delivery.message_key = r
                .message_key
                .as_ref()
                .map(|key| replay_delivery_id(replay_id, key));
            delivery.replay = Some(ReplayLink {
                replay_id: replay_id.to_owned(),
                original: r.original.id.clone(),
            });
            match intake.submit(delivery).await {
                Ok(answer) => {
                    r.outcome = answer.outcome;
                    r.workflow_id = answer.workflow_id;
                    r.held_by_run_id = answer.held_by_run_id;
                    let mut result = live_result(replay_id, r);
                    result.new_intake_id = answer.intake_id;
                    result.new_run_id = answer.run_id;
                    result
                }
                Err(error) => {
                    let mut result = result_of(replay_id, r);
                    result.replayed_outcome = "store_unavailable".into();
                    result.differs = true;
                    result.why = Some(format!("not re-admitted: {error}"));
                    result
                }
            }
        });
        futures::future::join_all(submitted).await
    }

    /// Gives live intake the database: sleeps twice as long as the batch took (at least 5 ms),
    /// then waits (bounded) while intake writers have deliveries queued.
    async fn yield_to_intake(&self, batch_took: Duration) {
        tokio::time::sleep((batch_took * 2).max(Duration::from_millis(5))).await;
        let Some(intake) = &self.intake else {
            return;
        };
        let deadline = Instant::now() + MAX_YIELD;
        while Instant::now() < deadline && intake.writers().iter().any(|w| w.queue_depth > 0) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// What decides a replay under `revision`.
fn under(
    revision: RevisionChoice,
    current: &LoadedConfig,
    candidate: Option<&LoadedConfig>,
) -> Under {
    match (revision, candidate) {
        (RevisionChoice::Candidate, Some(candidate)) => {
            Under::Fixed(Arc::new(Routing::of_config("candidate", candidate)))
        }
        (RevisionChoice::Original, _) => Under::original(Routing::of_config("current", current)),
        _ => Under::Fixed(Arc::new(Routing::of_config("current", current))),
    }
}

/// A candidate file's text, checked like `switchyard check` checks a file (secrets are not
/// needed: a diagnostic replay sends nothing).
pub fn parse_candidate(text: &str, current: &LoadedConfig) -> Result<LoadedConfig, StartError> {
    LoadedConfig::parse(
        text,
        std::path::Path::new("candidate.toml"),
        current.base_dir.clone(),
    )
    .map_err(|error| StartError::Invalid(format!("the candidate is not a valid config: {error}")))
}

/// A diagnostic result row.
fn result_of(replay_id: &str, r: Replayed) -> replay_result::Model {
    let o = &r.original;
    replay_result::Model {
        id: Uuid::now_v7().to_string(),
        replay_id: replay_id.to_owned(),
        intake_id: o.id.clone(),
        source: o.source.clone(),
        delivery_id: o.delivery_id.clone(),
        tenant_id: o.tenant_id.clone(),
        event_type: o.event_type.clone(),
        received_at: o.received_at,
        original_outcome: o.outcome.clone(),
        original_workflow_id: o.workflow_id.clone(),
        replayed_outcome: r.outcome.as_str().to_owned(),
        replayed_workflow_id: r.workflow_id.clone(),
        differs: r.differs,
        why: r.why.clone(),
        new_intake_id: None,
        new_run_id: None,
    }
}

/// A live result: compared with the original after intake decided it.
fn live_result(replay_id: &str, mut r: Replayed) -> replay_result::Model {
    let o = &r.original;
    r.differs = r.outcome.as_str() != o.outcome
        || (matches!(
            r.outcome,
            switchyard_core::Outcome::Routed | switchyard_core::Outcome::EntityLocked
        ) && r.workflow_id != o.workflow_id);
    r.why = match (r.differs, r.outcome) {
        (false, _) => None,
        (true, switchyard_core::Outcome::Duplicate) => {
            Some("already re-admitted by an earlier run of this replay".into())
        }
        (true, switchyard_core::Outcome::EntityLocked) => Some(format!(
            "run {} holds the entity now",
            r.held_by_run_id.as_deref().unwrap_or("?")
        )),
        (true, _) => Some(format!(
            "{} -> {} under the revision in force",
            engine::bucket(&o.outcome, o.workflow_id.as_deref()),
            engine::bucket(r.outcome.as_str(), r.workflow_id.as_deref())
        )),
    };
    result_of(replay_id, r)
}
