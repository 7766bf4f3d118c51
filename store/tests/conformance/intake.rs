//! Conformance of the intake batch (`Store::start_intake`), on every backend: a batch finds the
//! stored answers of its deliveries by their whole identity and its entities' leases, writes
//! every row it decided in one transaction, leaves nothing behind when it fails after its
//! writes, and, when two writers race for one entity, the loser is decided again and sees the
//! winner's lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sea_orm::EntityTrait;
use switchyard_store::entities::dispatch::{self, DispatchStatus};
use switchyard_store::entities::run::{self, RunStatus};
use switchyard_store::entities::{entity_lock, intake, raw_delivery};
use switchyard_store::intake::{Batch, Batches, Committed, Failure, Found, Keys, Writes};
use switchyard_store::{Millis, Store};
use tokio::sync::{mpsc, oneshot};

use crate::fixtures::*;
use crate::harness::TestStore;

const SOURCE: &str = "zendesk";

/// What a batch found, as the test reads it.
#[derive(Debug, Clone, Default)]
struct Seen {
    /// `(source, scope, delivery_id)` → the stored row's intake id.
    answers: HashMap<(String, String, String), String>,
    /// The lease rows found: `(entity, holder)`.
    leases: Vec<(String, Option<String>)>,
    /// How many times it was decided (a lost race decides it again).
    decided: usize,
}

type Decide = Arc<dyn Fn(&Found, Millis) -> Writes + Send + Sync>;

/// One batch whose keys and writes the test scripts.
struct Scripted {
    deliveries: Vec<(String, String, String)>,
    leases: Vec<(String, String)>,
    decide: Decide,
    fail_after_writes: bool,
    seen: Arc<Mutex<Seen>>,
    done: Option<oneshot::Sender<Result<Committed, Failure>>>,
}

impl Batch for Scripted {
    fn len(&self) -> usize {
        1
    }

    fn keys(&mut self, _now: Millis) -> Keys<'_> {
        Keys {
            deliveries: self
                .deliveries
                .iter()
                .map(|(s, c, d)| (s.as_str(), c.as_str(), d.as_str()))
                .collect(),
            leases: self.leases.clone(),
            ..Keys::default()
        }
    }

    fn decide(&mut self, found: Found, now: Millis) -> Writes {
        let mut seen = self.seen.lock().expect("not poisoned");
        seen.decided += 1;
        seen.answers = found
            .seen
            .iter()
            .map(|(key, answer)| (key.clone(), answer.intake_id.clone()))
            .collect();
        seen.leases = found
            .leases
            .iter()
            .map(|l| (l.target_entity_id.clone(), l.run_id.clone()))
            .collect();
        (self.decide)(&found, now)
    }

    fn written(&self) -> Result<(), String> {
        if self.fail_after_writes {
            Err("failpoint: after the writes".into())
        } else {
            Ok(())
        }
    }

    fn committed(mut self: Box<Self>, committed: Committed) {
        let _ = self.done.take().expect("answered once").send(Ok(committed));
    }

    fn failed(mut self: Box<Self>, failure: Failure) {
        let _ = self.done.take().expect("answered once").send(Err(failure));
    }

    fn split(self: Box<Self>) -> Vec<Box<dyn Batch>> {
        vec![self]
    }
}

/// The queue a writer takes the test's batches from.
struct Queue(mpsc::UnboundedReceiver<Box<dyn Batch>>);

#[async_trait::async_trait]
impl Batches for Queue {
    async fn next(&mut self) -> Option<Box<dyn Batch>> {
        self.0.recv().await
    }

    fn more_waiting(&self) -> bool {
        !self.0.is_empty()
    }

    fn panicked(&self) {}
}

/// Starts `store`'s intake writers; the test submits to the first (the others end at once).
fn writers(store: &Store) -> mpsc::UnboundedSender<Box<dyn Batch>> {
    let mut first = None;
    let mut queues: Vec<Box<dyn Batches>> = Vec::new();
    for _ in 0..store.intake_writers(None) {
        let (tx, rx) = mpsc::unbounded_channel();
        first.get_or_insert(tx);
        queues.push(Box::new(Queue(rx)));
    }
    store.start_intake(queues).expect("start the writers");
    first.expect("at least one writer")
}

/// Submits a scripted batch to `writer`; what it found, and how it ended.
async fn submit(
    writer: &mpsc::UnboundedSender<Box<dyn Batch>>,
    delivery: (&str, &str),
    entity: &str,
    fail_after_writes: bool,
    decide: Decide,
) -> (Seen, Result<Committed, Failure>) {
    let (done, answer) = oneshot::channel();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (scope, id) = delivery;
    writer
        .send(Box::new(Scripted {
            deliveries: vec![(SOURCE.into(), scope.into(), id.into())],
            leases: vec![("acme".into(), entity.into())],
            decide,
            fail_after_writes,
            seen: seen.clone(),
            done: Some(done),
        }))
        .map_err(|_| "the writer stopped")
        .expect("submit");
    let ended = answer.await.expect("the batch is answered");
    let seen = seen.lock().expect("not poisoned").clone();
    (seen, ended)
}

/// The rows of delivery `id` (scope `scope`) routed to a new run `run_id` on `entity`, taking
/// the entity's free lease.
fn routed_writes(scope: &str, id: &str, run_id: &str, entity: &str, now: Millis) -> Writes {
    let mut row = ledger_row(id, Some("acme"), "routed", Some(run_id), now);
    row.source = SOURCE.into();
    row.scope = scope.into();
    row.delivery_id = id.into();
    row.target_entity_id = Some(entity.into());
    let run = run::Model {
        target_entity_id: entity.into(),
        intake_id: id.into(),
        status: RunStatus::Queued,
        fencing_token: 1,
        lock_ttl_ms: TTL,
        created_at: now,
        updated_at: now,
        ..new_run(run_id, WORKFLOW)
    };
    let mut writes = Writes::default();
    writes.locks.now = now;
    writes.locks.created.push(entity_lock::Model {
        tenant_id: "acme".into(),
        target_entity_id: entity.into(),
        run_id: Some(run_id.into()),
        fencing_token: 1,
        expires_at: now + TTL,
        updated_at: now,
    });
    writes.dispatches.push(dispatch::Model {
        id: format!("dispatch-{run_id}"),
        run_id: run_id.into(),
        tenant_id: "acme".into(),
        workflow_id: WORKFLOW.into(),
        target: HOOK.into(),
        status: DispatchStatus::Pending,
        due_at: now,
        created_at: now,
        updated_at: now,
        ..dispatch::Model::default()
    });
    writes.locks.new_runs.push(run);
    writes.raw.push(raw_delivery::Model {
        id: id.into(),
        source: SOURCE.into(),
        content_type: "application/json".into(),
        body: br#"{"ticket":1}"#.to_vec(),
        received_at: now,
    });
    writes.ledger.push(row);
    writes
}

/// A run of `workflow` with every column at its default.
fn new_run(id: &str, workflow: &str) -> run::Model {
    run::Model {
        id: id.into(),
        tenant_id: "acme".into(),
        workflow_id: workflow.into(),
        ..run::Model::default()
    }
}

/// An `entity_locked` ledger row for delivery `id`, held by the run the batch found.
fn locked_writes(id: &str, found: &Found, now: Millis) -> Writes {
    let holder = found.leases.first().and_then(|l| l.run_id.clone());
    let mut row = ledger_row(id, Some("acme"), "entity_locked", None, now);
    row.source = SOURCE.into();
    row.held_by_run_id = holder;
    Writes {
        ledger: vec![row],
        ..Writes::default()
    }
}

async fn ledger(store: &Store, id: &str) -> Option<intake::Model> {
    intake::Entity::find_by_id(id.to_owned())
        .one(store.connection())
        .await
        .expect("read the ledger")
}

#[tokio::test]
async fn a_batch_writes_every_row_it_decided_and_later_batches_find_them_by_their_whole_identity() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let writer = writers(store);

        let (seen, ended) = submit(
            &writer,
            ("", "d-1"),
            "ticket-1",
            false,
            Arc::new(move |_, now| routed_writes("", "d-1", "run-1", "ticket-1", now)),
        )
        .await;
        assert!(ended.is_ok(), "{backend:?}: {ended:?}");
        assert!(seen.answers.is_empty(), "{backend:?}: nothing stored yet");
        assert!(seen.leases.is_empty(), "{backend:?}: no lease yet");

        let row = ledger(store, "d-1").await.expect("the ledger row");
        assert_eq!(
            (row.outcome.as_str(), row.run_id.as_deref()),
            ("routed", Some("run-1"))
        );
        let raw = raw_delivery::Entity::find_by_id("d-1".to_owned())
            .one(store.connection())
            .await
            .expect("read raw")
            .expect("the raw bytes");
        assert_eq!(raw.body, br#"{"ticket":1}"#, "{backend:?}");
        let run = run_of(store, "run-1").await;
        assert_eq!(run.status, RunStatus::Queued, "{backend:?}");
        assert_eq!(
            lease_of(store, &run).await.run_id.as_deref(),
            Some("run-1"),
            "{backend:?}"
        );
        assert_eq!(
            dispatch_of(store, "dispatch-run-1").await.status,
            DispatchStatus::Pending,
            "{backend:?}"
        );

        // The same delivery id under another scope is another delivery; under its own scope
        // it is found, with the lease its run holds.
        for (scope, stored) in [("", Some("d-1")), ("globex", None)] {
            let (seen, ended) = submit(
                &writer,
                (scope, "d-1"),
                "ticket-1",
                false,
                Arc::new(|_, _| Writes::default()),
            )
            .await;
            assert!(ended.is_ok(), "{backend:?}: {ended:?}");
            let key = (SOURCE.to_owned(), scope.to_owned(), "d-1".to_owned());
            assert_eq!(
                seen.answers.get(&key).map(String::as_str),
                stored,
                "{backend:?}: scope `{scope}`"
            );
            assert_eq!(
                seen.leases,
                [("ticket-1".to_owned(), Some("run-1".to_owned()))],
                "{backend:?}"
            );
        }
    }
}

/// One batch of 21 routed deliveries, more rows than one multi-row statement of each size the
/// SQLite writer uses (16, 4 and 1) carries: every row lands in every table with its own values.
#[tokio::test]
async fn a_large_batch_writes_every_row_with_its_own_values() {
    const ROWS: usize = 21;
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let writer = writers(store);
        let (_, ended) = submit(
            &writer,
            ("", "big-0"),
            "big-ticket-0",
            false,
            Arc::new(|_, now| {
                let mut all = Writes::default();
                all.locks.now = now;
                for n in 0..ROWS {
                    let mut one = routed_writes(
                        "",
                        &format!("big-{n}"),
                        &format!("big-run-{n}"),
                        &format!("big-ticket-{n}"),
                        now + n as Millis,
                    );
                    one.raw[0].body = format!("{{\"ticket\":{n}}}").into_bytes();
                    all.locks.created.append(&mut one.locks.created);
                    all.locks.new_runs.append(&mut one.locks.new_runs);
                    all.dispatches.append(&mut one.dispatches);
                    all.raw.append(&mut one.raw);
                    all.ledger.append(&mut one.ledger);
                }
                all
            }),
        )
        .await;
        assert!(ended.is_ok(), "{backend:?}: {ended:?}");
        let now = ledger(store, "big-0").await.expect("row 0").received_at;
        for n in 0..ROWS {
            let (id, run_id, entity) = (
                format!("big-{n}"),
                format!("big-run-{n}"),
                format!("big-ticket-{n}"),
            );
            let row = ledger(store, &id).await.expect("the ledger row");
            assert_eq!(
                (
                    row.outcome.as_str(),
                    row.run_id.as_deref(),
                    row.target_entity_id.as_deref(),
                    row.received_at - now,
                ),
                (
                    "routed",
                    Some(run_id.as_str()),
                    Some(entity.as_str()),
                    n as Millis
                ),
                "{backend:?}: row {n}"
            );
            let raw = raw_delivery::Entity::find_by_id(id.clone())
                .one(store.connection())
                .await
                .expect("read raw")
                .expect("the raw bytes");
            assert_eq!(
                raw.body,
                format!("{{\"ticket\":{n}}}").into_bytes(),
                "{backend:?}"
            );
            let run = run_of(store, &run_id).await;
            assert_eq!(
                (
                    run.target_entity_id.as_str(),
                    run.intake_id.as_str(),
                    run.status
                ),
                (entity.as_str(), id.as_str(), RunStatus::Queued),
                "{backend:?}: run {n}"
            );
            let lease = lease_of(store, &run).await;
            assert_eq!(
                (lease.run_id.as_deref(), lease.expires_at - now),
                (Some(run_id.as_str()), TTL + n as Millis),
                "{backend:?}: lease {n}"
            );
            let dispatch = dispatch_of(store, &format!("dispatch-{run_id}")).await;
            assert_eq!(
                (dispatch.run_id.as_str(), dispatch.status),
                (run_id.as_str(), DispatchStatus::Pending),
                "{backend:?}: dispatch {n}"
            );
        }
    }
}

#[tokio::test]
async fn a_batch_that_fails_after_its_writes_leaves_nothing_behind() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let writer = writers(store);

        let (_, ended) = submit(
            &writer,
            ("", "d-2"),
            "ticket-2",
            true,
            Arc::new(|_, now| routed_writes("", "d-2", "run-2", "ticket-2", now)),
        )
        .await;
        assert!(
            matches!(&ended, Err(Failure::Other(detail)) if detail.contains("failpoint")),
            "{backend:?}: {ended:?}"
        );
        assert!(ledger(store, "d-2").await.is_none(), "{backend:?}: no row");
        assert!(
            run::Entity::find_by_id("run-2".to_owned())
                .one(store.connection())
                .await
                .expect("read runs")
                .is_none(),
            "{backend:?}: no run"
        );
        assert!(
            entity_lock::Entity::find_by_id(("acme".to_owned(), "ticket-2".to_owned()))
                .one(store.connection())
                .await
                .expect("read leases")
                .is_none(),
            "{backend:?}: no lease"
        );

        // The writer goes on: the same batch without the failure commits.
        let (_, ended) = submit(
            &writer,
            ("", "d-2"),
            "ticket-2",
            false,
            Arc::new(|_, now| routed_writes("", "d-2", "run-2", "ticket-2", now)),
        )
        .await;
        assert!(ended.is_ok(), "{backend:?}: {ended:?}");
        assert!(ledger(store, "d-2").await.is_some(), "{backend:?}");
    }
}

/// A batch whose run is already stored fails at that row's insert, after its lease went in:
/// nothing of it stays (on SQLite `OR ROLLBACK` ended the transaction there), and the writer
/// goes on with the next batch on the same connection.
#[tokio::test]
async fn a_batch_meeting_a_stored_row_leaves_nothing_behind_and_the_writer_goes_on() {
    for test in TestStore::all().await {
        let (store, backend) = (&test.store, test.backend);
        let writer = writers(store);
        let now = start();
        let stored = routed(store, 3, WORKFLOW, HOOK, now).await;

        let taken = stored.run.id.clone();
        let (_, ended) = submit(
            &writer,
            ("", "d-3"),
            "ticket-new",
            false,
            Arc::new(move |_, now| routed_writes("", "d-3", &taken, "ticket-new", now)),
        )
        .await;
        assert!(ended.is_err(), "{backend:?}: {ended:?}");
        assert!(ledger(store, "d-3").await.is_none(), "{backend:?}: no row");
        assert!(
            entity_lock::Entity::find_by_id(("acme".to_owned(), "ticket-new".to_owned()))
                .one(store.connection())
                .await
                .expect("read leases")
                .is_none(),
            "{backend:?}: the lease inserted before the failing run is gone"
        );
        assert_eq!(
            run_of(store, &stored.run.id).await,
            stored.run,
            "{backend:?}"
        );

        let (_, ended) = submit(
            &writer,
            ("", "d-4"),
            "ticket-new",
            false,
            Arc::new(|_, now| routed_writes("", "d-4", "run-4", "ticket-new", now)),
        )
        .await;
        assert!(ended.is_ok(), "{backend:?}: {ended:?}");
        assert!(ledger(store, "d-4").await.is_some(), "{backend:?}");
    }
}

#[tokio::test]
async fn two_writers_racing_for_one_entity_make_one_run_and_the_loser_sees_its_lease() {
    for test in TestStore::all().await {
        let backend = test.backend;
        let other = test.replica().await;
        let (first, second) = (writers(&test.store), writers(&other));

        // Each decides from what it found: the entity's lease if there is one, else a new run.
        let decide = |id: &'static str, run_id: &'static str| -> Decide {
            Arc::new(move |found: &Found, now| {
                if found.leases.is_empty() {
                    routed_writes("", id, run_id, "ticket-3", now)
                } else {
                    locked_writes(id, found, now)
                }
            })
        };
        let ((seen_a, a), (seen_b, b)) = tokio::join!(
            submit(
                &first,
                ("", "d-3a"),
                "ticket-3",
                false,
                decide("d-3a", "run-3a")
            ),
            submit(
                &second,
                ("", "d-3b"),
                "ticket-3",
                false,
                decide("d-3b", "run-3b")
            ),
        );
        assert!(a.is_ok() && b.is_ok(), "{backend:?}: {a:?} {b:?}");

        let rows = [
            ledger(&test.store, "d-3a").await.expect("row a"),
            ledger(&test.store, "d-3b").await.expect("row b"),
        ];
        let routed: Vec<&intake::Model> = rows.iter().filter(|r| r.outcome == "routed").collect();
        assert_eq!(
            routed.len(),
            1,
            "{backend:?}: one run for one entity: {rows:?}"
        );
        let winner = routed[0].run_id.clone().expect("the winner's run");
        let loser = rows.iter().find(|r| r.outcome != "routed").expect("loser");
        assert_eq!(loser.outcome, "entity_locked", "{backend:?}");
        assert_eq!(loser.held_by_run_id.as_ref(), Some(&winner), "{backend:?}");
        let lease = entity_lock::Entity::find_by_id(("acme".to_owned(), "ticket-3".to_owned()))
            .one(test.store.connection())
            .await
            .expect("read leases")
            .expect("the lease");
        assert_eq!(lease.run_id, Some(winner), "{backend:?}");
        // Each writer decided at least once; a loser that lost at its commit decided again.
        assert!(seen_a.decided >= 1 && seen_b.decided >= 1, "{backend:?}");
    }
}
