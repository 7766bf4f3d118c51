//! Prometheus metrics: one registry per daemon process (`prometheus-client`, typed label sets),
//! recorded where things happen (the HTTP edge, the intake writers, the dispatcher) and, for
//! what lives in the database or in other components (pending dispatches, writer queues,
//! mailbox pollers), read at scrape time.
//!
//! Invariant: labels come only from bounded sets (outcomes, source kinds, configured source,
//! target, workflow and token names, run statuses); never tenant, entity or delivery ids.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

mod labels;
pub use labels::*;

/// Every metric the daemon exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub deliveries: Family<DeliveryLabels, Counter>,
    pub answer_seconds: Family<SourceKindLabel, Histogram>,
    pub store_unavailable: Family<SourceKindLabel, Counter>,
    pub batch_size: Histogram,
    pub commit_seconds: Histogram,
    pub runs_created: Counter,
    pub runs_finished: Family<StatusLabel, Counter>,
    pub dispatch_attempts: Family<AttemptLabels, Counter>,
    pub dispatch_claims: Family<ClaimLabels, Counter>,
    pub dispatch_claim_passes: Family<ClaimPassLabels, Counter>,
    pub dead_letters: Family<TargetLabel, Counter>,
    pub schedule_fires: Family<ScheduleFireLabels, Counter>,
    pub pull_claim_transactions: Family<PullClaimLabels, Counter>,
    pub pull_waiting: Family<TokenLabel, Gauge>,
    // Read at scrape time.
    pub writer_queue_depth: Family<WriterLabel, Gauge>,
    pub pending_dispatches: Family<TargetLabel, Gauge>,
    pub oldest_pending_seconds: Family<TargetLabel, Gauge>,
    pub poller_up: Family<SourceLabel, Gauge>,
    pub poller_last_success: Family<SourceLabel, Gauge>,
    pub poller_failures: Family<SourceLabel, Gauge>,
    pub poller_auth_failing: Family<AuthFailureLabels, Gauge>,
    pub mailbox_left_behind: Family<SourceLabel, Gauge>,
    pub config_revision: Family<RevisionLabel, Gauge>,
    pub socket_open: Family<SourceLabel, Gauge>,
    pub socket_last_envelope: Family<SourceLabel, Gauge>,
    pub socket_envelopes: Family<SourceLabel, Counter>,
    pub socket_reconnects: Family<SourceLabel, Counter>,
    /// Alerts firing in the shared database, as this replica last evaluated them.
    pub alerts_firing: Gauge,
    pub source_deliveries: Family<SourceOutcomeLabels, Counter>,
    pub workflow_runs_created: Family<WorkflowLabel, Counter>,
    pub workflow_runs_finished: Family<WorkflowStatusLabels, Counter>,
    pub pull_claims: Family<WorkflowLabel, Counter>,
    pub config_reloads: Family<ReloadLabel, Counter>,
    pub config_reload_refused: Gauge,
}

fn latency_histogram() -> Histogram {
    // 0.5 ms to ~4 s.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 14,
    ))
}

impl Metrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("switchyard");
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        registry.register(
            "deliveries",
            "Deliveries answered, by source kind and outcome",
            deliveries.clone(),
        );
        let answer_seconds =
            Family::<SourceKindLabel, Histogram>::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "receive_to_answer",
            "Time from receiving a delivery to answering it, by source kind",
            Unit::Seconds,
            answer_seconds.clone(),
        );
        let store_unavailable = Family::<SourceKindLabel, Counter>::default();
        registry.register(
            "store_unavailable",
            "Deliveries answered 503 because the store did not commit them",
            store_unavailable.clone(),
        );
        let batch_size = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 9),
        );
        registry.register(
            "intake_batch_size",
            "Deliveries decided per intake transaction",
            batch_size.clone(),
        );
        let commit_seconds = latency_histogram();
        registry.register_with_unit(
            "intake_commit",
            "Time an intake batch took to look up, decide, write and commit",
            Unit::Seconds,
            commit_seconds.clone(),
        );
        let runs_created = Counter::default();
        registry.register(
            "runs_created",
            "Runs created by routing",
            runs_created.clone(),
        );
        let runs_finished = Family::<StatusLabel, Counter>::default();
        registry.register(
            "runs_finished",
            "Runs that reached a final status, by status",
            runs_finished.clone(),
        );
        let dispatch_attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "dispatch_attempts",
            "Delivery attempts to push targets, by target and result",
            dispatch_attempts.clone(),
        );
        let dispatch_claims = Family::<ClaimLabels, Counter>::default();
        registry.register(
            "dispatch_claims",
            "Dispatches sent to push targets, by target and by who claimed them (intake, \
             intake_backlog, dispatcher)",
            dispatch_claims.clone(),
        );
        let dispatch_claim_passes = Family::<ClaimPassLabels, Counter>::default();
        registry.register(
            "dispatch_claim_transactions",
            "Claim transactions the dispatcher ran on the outbox, by target and by what started \
             them (start, new_runs, slot_freed, more, poll)",
            dispatch_claim_passes.clone(),
        );
        let dead_letters = Family::<TargetLabel, Counter>::default();
        registry.register(
            "dead_letters",
            "Runs dead-lettered, by target",
            dead_letters.clone(),
        );
        let schedule_fires = Family::<ScheduleFireLabels, Counter>::default();
        registry.register(
            "schedule_fires",
            "Schedule fires this replica submitted, by schedule and outcome (`ineligible`: \
             recorded as missed; `duplicate`: another replica recorded the fire first)",
            schedule_fires.clone(),
        );
        let pull_claim_transactions = Family::<PullClaimLabels, Counter>::default();
        registry.register(
            "pull_claim_transactions",
            "Claim transactions pull workers' requests ran, by token and by what started them \
             (request, woken, recheck)",
            pull_claim_transactions.clone(),
        );
        let pull_waiting = Family::<TokenLabel, Gauge>::default();
        registry.register(
            "pull_waiting_claims",
            "Claim requests waiting for work (long-polls), by token",
            pull_waiting.clone(),
        );
        let writer_queue_depth = Family::<WriterLabel, Gauge>::default();
        registry.register(
            "intake_writer_queue_depth",
            "Deliveries waiting for an intake writer",
            writer_queue_depth.clone(),
        );
        let pending_dispatches = Family::<TargetLabel, Gauge>::default();
        registry.register(
            "pending_dispatches",
            "Runs waiting for delivery, by target (counted up to 10000: 10000 means at least that many)",
            pending_dispatches.clone(),
        );
        let oldest_pending_seconds = Family::<TargetLabel, Gauge>::default();
        registry.register_with_unit(
            "oldest_pending_dispatch_age",
            "Age of the pending dispatch due first (the oldest unless retried), by target",
            Unit::Seconds,
            oldest_pending_seconds.clone(),
        );
        let poller_up = Family::<SourceLabel, Gauge>::default();
        registry.register(
            "mailbox_poller_up",
            "1 while a mailbox poller is connected",
            poller_up.clone(),
        );
        let poller_last_success = Family::<SourceLabel, Gauge>::default();
        registry.register(
            "mailbox_poller_last_success_timestamp_seconds",
            "Unix time of a mailbox poller's last successful poll",
            poller_last_success.clone(),
        );
        let poller_failures = Family::<SourceLabel, Gauge>::default();
        registry.register(
            "mailbox_poller_consecutive_failures",
            "Polls that failed in a row",
            poller_failures.clone(),
        );
        let poller_auth_failing = Family::<AuthFailureLabels, Gauge>::default();
        registry.register(
            "mailbox_auth_failing",
            "1 while a mailbox cannot sign in with OAuth2, by source and reason",
            poller_auth_failing.clone(),
        );
        let mailbox_left_behind = Family::<SourceLabel, Gauge>::default();
        registry.register(
            "mailbox_left_behind_messages",
            "Messages a mailbox's first connection left behind (start_from)",
            mailbox_left_behind.clone(),
        );
        let socket_open = Family::<SourceLabel, Gauge>::default();
        registry.register(
            "slack_socket_connections_open",
            "Slack Socket Mode connections open (said hello, not asked to disconnect), by source",
            socket_open.clone(),
        );
        let socket_last_envelope = Family::<SourceLabel, Gauge>::default();
        registry.register(
            "slack_socket_last_envelope_timestamp_seconds",
            "Unix time of the last Socket Mode envelope, by source",
            socket_last_envelope.clone(),
        );
        let socket_envelopes = Family::<SourceLabel, Counter>::default();
        registry.register(
            "slack_socket_envelopes",
            "Socket Mode envelopes received, by source",
            socket_envelopes.clone(),
        );
        let socket_reconnects = Family::<SourceLabel, Counter>::default();
        registry.register(
            "slack_socket_reconnects",
            "Socket Mode connections opened again (refresh, drop, failure), by source",
            socket_reconnects.clone(),
        );
        let config_revision = Family::<RevisionLabel, Gauge>::default();
        registry.register(
            "config_revision",
            "1 for the config revision in force",
            config_revision.clone(),
        );
        let alerts_firing = Gauge::default();
        registry.register(
            "alerts_firing",
            "Alerts firing (one per rule and scope, across replicas)",
            alerts_firing.clone(),
        );
        let source_deliveries = Family::<SourceOutcomeLabels, Counter>::default();
        registry.register(
            "source_deliveries",
            "Deliveries recorded, by configured source name and outcome",
            source_deliveries.clone(),
        );
        let workflow_runs_created = Family::<WorkflowLabel, Counter>::default();
        registry.register(
            "workflow_runs_created",
            "Runs created by routing, by workflow",
            workflow_runs_created.clone(),
        );
        let workflow_runs_finished = Family::<WorkflowStatusLabels, Counter>::default();
        registry.register(
            "workflow_runs_finished",
            "Runs that reached a final status, by workflow and status",
            workflow_runs_finished.clone(),
        );
        let pull_claims = Family::<WorkflowLabel, Counter>::default();
        registry.register(
            "pull_claims",
            "Runs handed to pull workers by POST /v1/claims, by workflow",
            pull_claims.clone(),
        );
        let config_reloads = Family::<ReloadLabel, Counter>::default();
        for result in ["applied", "refused"] {
            let _ = config_reloads.get_or_create(&ReloadLabel { result });
        }
        registry.register(
            "config_reloads",
            "Config reloads (SIGHUP), by result (applied, refused)",
            config_reloads.clone(),
        );
        let config_reload_refused = Gauge::default();
        registry.register(
            "config_reload_refused",
            "1 while the latest config reload was refused (the revision before it stays in force)",
            config_reload_refused.clone(),
        );
        // A gauge that is always 1, not an OpenMetrics `info`: the classic text format (and
        // promtool) has no info type.
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("SWITCHYARD_COMMIT"),
            })
            .set(1);
        registry.register("build_info", "The daemon's version and commit", build);
        Self {
            registry,
            deliveries,
            answer_seconds,
            store_unavailable,
            batch_size,
            commit_seconds,
            runs_created,
            runs_finished,
            dispatch_attempts,
            dispatch_claims,
            dispatch_claim_passes,
            dead_letters,
            schedule_fires,
            pull_claim_transactions,
            pull_waiting,
            writer_queue_depth,
            pending_dispatches,
            oldest_pending_seconds,
            poller_up,
            poller_last_success,
            poller_failures,
            poller_auth_failing,
            mailbox_left_behind,
            config_revision,
            socket_open,
            socket_last_envelope,
            socket_envelopes,
            socket_reconnects,
            alerts_firing,
            source_deliveries,
            workflow_runs_created,
            workflow_runs_finished,
            pull_claims,
            config_reloads,
            config_reload_refused,
        }
    }

    /// The per-name series of the config in force at zero (each source's outcomes, each
    /// workflow's runs created, finished and claimed), so they are present from the start.
    /// Names come only from the config, which bounds the series.
    pub fn zero_names<'a>(
        &self,
        sources: impl IntoIterator<Item = &'a str>,
        workflows: impl IntoIterator<Item = &'a str>,
    ) {
        for source in sources {
            for outcome in switchyard_core::Outcome::ALL {
                let _ = self.source_deliveries.get_or_create(&SourceOutcomeLabels {
                    source: source.to_owned(),
                    outcome: outcome.as_str(),
                });
            }
        }
        for workflow in workflows {
            let label = WorkflowLabel {
                workflow: workflow.to_owned(),
            };
            let _ = self.workflow_runs_created.get_or_create(&label);
            let _ = self.pull_claims.get_or_create(&label);
            for status in RUN_FINAL_STATUSES {
                let _ = self
                    .workflow_runs_finished
                    .get_or_create(&WorkflowStatusLabels {
                        workflow: workflow.to_owned(),
                        status,
                    });
            }
        }
    }

    /// One delivery of the source named `source` recorded with `outcome`.
    pub fn source_delivery(&self, source: &str, outcome: switchyard_core::Outcome) {
        self.source_deliveries
            .get_or_create(&SourceOutcomeLabels {
                source: source.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// A run of `workflow` was created by routing.
    pub fn workflow_run_created(&self, workflow: &str) {
        self.workflow_runs_created
            .get_or_create(&WorkflowLabel {
                workflow: workflow.to_owned(),
            })
            .inc();
    }

    /// `count` runs of `workflow` handed to pull workers.
    pub fn pull_claimed(&self, workflow: &str, count: u64) {
        self.pull_claims
            .get_or_create(&WorkflowLabel {
                workflow: workflow.to_owned(),
            })
            .inc_by(count);
    }

    /// A config reload ended: applied (`refused` false) or refused.
    pub fn config_reload(&self, refused: bool) {
        let result = if refused { "refused" } else { "applied" };
        self.config_reloads
            .get_or_create(&ReloadLabel { result })
            .inc();
        self.config_reload_refused.set(i64::from(refused));
    }

    /// The registry in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "cannot encode the metrics");
        }
        text
    }

    /// The registry in the classic Prometheus text format (0.0.4), for scrapers and tools
    /// (`promtool check metrics`) that do not ask for OpenMetrics.
    pub fn encode_classic(&self) -> String {
        to_classic(&self.encode())
    }

    /// Every delivery series of each of `source_kinds` at zero (every outcome, the 503s, the
    /// answer times), so a scrape from the start shows each series a delivery can move, not
    /// an absent one a query or an alert rule cannot tell from a missing daemon.
    pub fn zero_deliveries(&self, source_kinds: impl IntoIterator<Item = &'static str>) {
        for source_kind in source_kinds {
            for outcome in switchyard_core::Outcome::ALL {
                let _ = self.deliveries.get_or_create(&DeliveryLabels {
                    source_kind,
                    outcome: outcome.as_str(),
                });
            }
            let kind = SourceKindLabel { source_kind };
            let _ = self.store_unavailable.get_or_create(&kind);
            let _ = self.answer_seconds.get_or_create(&kind);
        }
    }

    /// One delivery of `source_kind` answered with `outcome` (`None`: the store did not
    /// commit it, answered 503) after `took`.
    pub fn delivery(
        &self,
        source_kind: &'static str,
        outcome: Option<switchyard_core::Outcome>,
        took: Duration,
    ) {
        let kind = SourceKindLabel { source_kind };
        match outcome {
            Some(outcome) => {
                self.deliveries
                    .get_or_create(&DeliveryLabels {
                        source_kind,
                        outcome: outcome.as_str(),
                    })
                    .inc();
            }
            None => {
                self.store_unavailable.get_or_create(&kind).inc();
            }
        }
        self.answer_seconds
            .get_or_create(&kind)
            .observe(took.as_secs_f64());
    }

    /// One schedule fire submitted and answered `outcome`.
    pub fn schedule_fire(&self, schedule: &str, outcome: switchyard_core::Outcome) {
        self.schedule_fires
            .get_or_create(&ScheduleFireLabels {
                schedule: schedule.to_owned(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// One intake batch committed.
    pub fn batch(&self, size: usize, took: Duration) {
        self.batch_size.observe(size as f64);
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// `token` has `count` claim requests waiting for work.
    pub fn pull_waiting(&self, token: &str, count: usize) {
        self.pull_waiting
            .get_or_create(&TokenLabel {
                token: token.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// A pull claim request of `token` ran a claim transaction, started by `cause`.
    pub fn pull_claim_transaction(&self, token: &str, cause: &'static str) {
        self.pull_claim_transactions
            .get_or_create(&PullClaimLabels {
                token: token.to_owned(),
                cause,
            })
            .inc();
    }

    /// One run reached `status`.
    pub fn run_finished(&self, status: &'static str) {
        self.runs_finished
            .get_or_create(&StatusLabel { status })
            .inc();
    }

    /// One run of `workflow` reached `status` (counted by workflow as well as by status).
    pub fn workflow_run_finished(&self, workflow: &str, status: &'static str) {
        self.run_finished(status);
        self.workflow_runs_finished
            .get_or_create(&WorkflowStatusLabels {
                workflow: workflow.to_owned(),
                status,
            })
            .inc();
    }
}

/// The final statuses a run reaches, each a `status` of `switchyard_workflow_runs_finished`.
const RUN_FINAL_STATUSES: [&str; 7] = [
    "completed",
    "failed",
    "cancelled",
    "superseded",
    "dead_lettered",
    "expired",
    "finished_late",
];

/// The daemon's metrics. One registry per process: a process runs one daemon.
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// OpenMetrics text as the classic Prometheus text format: a counter's family is named with
/// its `_total` suffix, and the `# UNIT` and `# EOF` lines go.
fn to_classic(openmetrics: &str) -> String {
    let lines: Vec<&str> = openmetrics.lines().collect();
    let mut out = String::with_capacity(openmetrics.len());
    for (index, line) in lines.iter().enumerate() {
        if *line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let family_line = line
            .strip_prefix("# HELP ")
            .or_else(|| line.strip_prefix("# TYPE "));
        if let Some(rest) = family_line {
            let name = rest.split(' ').next().unwrap_or_default();
            let counter = lines[index..]
                .iter()
                .take(3)
                .any(|l| *l == format!("# TYPE {name} counter"));
            if counter && !name.ends_with("_total") {
                let (kind, tail) = line.split_at(7);
                out.push_str(kind);
                out.push_str(&tail.replacen(name, &format!("{name}_total"), 1));
                out.push('\n');
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_classic;

    #[test]
    fn counters_are_named_with_total_and_openmetrics_lines_go() {
        let openmetrics = "# HELP a_deliveries Deliveries.\n# TYPE a_deliveries counter\n\
                           a_deliveries_total{k=\"v\"} 1\n# HELP a_latency_seconds Time.\n\
                           # TYPE a_latency_seconds histogram\n# UNIT a_latency_seconds seconds\n\
                           a_latency_seconds_count 2\n# EOF\n";
        assert_eq!(
            to_classic(openmetrics),
            "# HELP a_deliveries_total Deliveries.\n# TYPE a_deliveries_total counter\n\
             a_deliveries_total{k=\"v\"} 1\n# HELP a_latency_seconds Time.\n\
             # TYPE a_latency_seconds histogram\na_latency_seconds_count 2\n"
        );
    }
}
