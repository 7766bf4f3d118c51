//! Real concurrency: many simultaneous requests, spread over two daemons on one database.

use std::collections::BTreeMap;

use futures::future::join_all;
use serde_json::Value;

use super::harness::{Backend, Daemon, TestDb, config, event, unique};
use super::spine::WORKED_EXAMPLE;

/// Sends `count` events concurrently, alternating between the daemons, and tallies outcomes.
async fn storm(
    daemons: &[&Daemon],
    count: usize,
    key: impl Fn(usize) -> String,
    body: &Value,
) -> BTreeMap<String, usize> {
    let requests = (0..count).map(|n| {
        let daemon = daemons[n % daemons.len()];
        let key = key(n);
        async move { daemon.post_event(&key, body).await }
    });
    let mut tally = BTreeMap::new();
    for (status, answer) in join_all(requests).await {
        assert!(status.is_success(), "{status}: {answer}");
        *tally
            .entry(answer["outcome"].as_str().unwrap_or("?").to_owned())
            .or_insert(0) += 1;
    }
    tally
}

async fn two_daemons_on(db: &TestDb) -> (Daemon, Daemon) {
    let text = config(db, WORKED_EXAMPLE);
    let a = Daemon::start(db, &text, &[]).await;
    let b = Daemon::start(db, &text, &[]).await;
    (a, b)
}

fn expect(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// 100 concurrent events on one entity over two daemons: exactly one run.
#[tokio::test]
async fn one_entity_hundred_events_two_daemons_exactly_one_routed() {
    for backend in Backend::ALL {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (a, b) = two_daemons_on(&db).await;
        let ticket = event("webhook", "ticket.created", "acme", &unique("HOT"));
        let tally = storm(&[&a, &b], 100, |n| format!("event-{n}"), &ticket).await;
        assert_eq!(
            tally,
            expect(&[("routed", 1), ("entity_locked", 99)]),
            "{backend:?}"
        );
        assert_eq!(a.runs("").await.len(), 1, "{backend:?}");
        assert_eq!(b.intake("limit=1000").await.len(), 100);
        a.stop();
        b.stop();
        db.drop_database().await;
    }
}

/// 100 concurrent copies of one delivery over two daemons: one routed, 99 duplicates.
#[tokio::test]
async fn one_delivery_hundred_copies_two_daemons_one_routed() {
    for backend in Backend::ALL {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (a, b) = two_daemons_on(&db).await;
        let ticket = event("webhook", "ticket.created", "acme", &unique("DUP"));
        let tally = storm(&[&a, &b], 100, |_| "the-one-delivery".into(), &ticket).await;
        assert_eq!(
            tally,
            expect(&[("duplicate", 99), ("routed", 1)]),
            "{backend:?}"
        );
        assert_eq!(a.runs("").await.len(), 1);
        assert_eq!(
            a.intake("limit=1000").await.len(),
            1,
            "duplicates create nothing"
        );
        a.stop();
        b.stop();
        db.drop_database().await;
    }
}

/// Distinct entities under the same load all route: the batch writers (four per daemon here,
/// sharded by entity; SQLite has one) do not serialise them into conflicts.
#[tokio::test]
async fn distinct_entities_all_route_under_concurrency() {
    for backend in Backend::ALL {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let text = config(&db, WORKED_EXAMPLE).replace("[database]\n", "[database]\nwriters = 4\n");
        assert!(text.contains("writers = 4"), "{text}");
        let a = Daemon::start(&db, &text, &[]).await;
        let b = Daemon::start(&db, &text, &[]).await;
        let requests = (0..100).map(|n| {
            let daemon = if n % 2 == 0 { &a } else { &b };
            async move {
                daemon
                    .post_event(
                        &format!("d-{n}"),
                        &event("webhook", "ticket.created", "acme", &format!("E-{n}")),
                    )
                    .await
            }
        });
        let answers = join_all(requests).await;
        assert!(
            answers.iter().all(|(_, a)| a["outcome"] == "routed"),
            "{backend:?}: {answers:?}"
        );
        assert_eq!(a.runs("limit=1000").await.len(), 100);
        a.stop();
        b.stop();
        db.drop_database().await;
    }
}
