//! Conformance of the alert lifecycle and its notification outbox: one alert per rule and
//! scope however many replicas raise it at once, one notification per notifier per
//! transition, silence and acknowledgement, tenant-limited reads, claims a second claimer
//! cannot take, one alert's notifications to one notifier claimed in order, the bounded reads
//! rules evaluate, and an alert several replicas observe that resolves only once none of them
//! still does.

use switchyard_store::alerts::notifications::{
    ClaimedNotification, DELIVERED, NotificationOutcome, PENDING,
};
use switchyard_store::alerts::signals::DeliveryScope;
use switchyard_store::alerts::{
    AlertChangeError, AlertFilter, FIRED, FIRING, Fired, Firing, RESOLVED,
};

use crate::fixtures::{id_at, insert_ledger, ledger_row, routed, start};
use crate::harness::TestStore;

/// The notifications due at `at` that `store` claims (30 s claims, at most 10).
async fn claim(store: &switchyard_store::Store, at: i64) -> Vec<ClaimedNotification> {
    store
        .claim_alert_notifications(at, 30_000, 10)
        .await
        .expect("claim")
}

/// Ends `claimed` with `outcome` at `at`: whether its claim still held.
async fn finish(
    store: &switchyard_store::Store,
    claimed: &ClaimedNotification,
    outcome: &NotificationOutcome,
    at: i64,
) -> bool {
    store
        .finish_alert_notification(&claimed.notification.id, &claimed.claim_token, outcome, at)
        .await
        .expect("finish")
}

fn notifiers() -> Vec<String> {
    vec!["ops-webhook".into(), "ops-slack".into()]
}

fn firing<'a>(notifiers: &'a [String], tenant: Option<&'a str>) -> Firing<'a> {
    Firing {
        rule: "api-quiet",
        scope: "source=api",
        kind: "source_quiet",
        tenant_id: tenant,
        summary: "source api has been quiet for 2h",
        numbers: r#"{"quiet_secs":7200}"#,
        since: 1_000,
        notifiers,
        observer: None,
    }
}

#[tokio::test]
async fn two_replicas_raising_one_alert_at_once_make_one_alert_and_one_notification_each() {
    for test in TestStore::all().await {
        let now = start();
        let notifiers = notifiers();
        let replicas = [
            test.store.clone(),
            test.replica().await,
            test.replica().await,
            test.replica().await,
        ];
        let alert = firing(&notifiers, None);
        let raised =
            futures::future::join_all(replicas.iter().map(|store| store.fire_alert(&alert, now)))
                .await;
        let new = raised
            .iter()
            .filter(|fired| matches!(fired, Ok(Fired::New { .. })))
            .count();
        assert_eq!(new, 1, "{:?}: {raised:?}", test.backend);
        for fired in &raised {
            // A loser sees the winner's row, or (PostgreSQL, MariaDB) trips over its key.
            assert!(
                matches!(
                    fired,
                    Ok(Fired::New { .. } | Fired::Still { .. } | Fired::Raced)
                ),
                "{:?}: {fired:?}",
                test.backend
            );
        }
        let alerts = test.store.firing_alerts().await.expect("firing");
        assert_eq!(alerts.len(), 1, "{:?}", test.backend);
        let sent = test
            .store
            .alert_notifications(&alerts[0].id)
            .await
            .expect("notifications");
        let mut to: Vec<_> = sent
            .iter()
            .map(|n| (n.notifier.as_str(), n.event.as_str()))
            .collect();
        to.sort();
        assert_eq!(
            to,
            [("ops-slack", "fired"), ("ops-webhook", "fired")],
            "{:?}",
            test.backend
        );
    }
}

#[tokio::test]
async fn an_observed_alert_stays_firing_while_another_replica_still_observes_its_fault() {
    for test in TestStore::all().await {
        let now = start();
        let notifiers = notifiers();
        let (first, second) = (test.store.clone(), test.replica().await);
        let seen_by = |replica: &'static str| Firing {
            rule: "builtin:intake_unhealthy",
            scope: "intake",
            kind: "intake_unhealthy",
            observer: Some(replica),
            ..firing(&notifiers, None)
        };
        let fired = first.fire_alert(&seen_by("a"), now).await.expect("fire a");
        assert!(matches!(fired, Fired::New { .. }), "{:?}", test.backend);
        let fired = second
            .fire_alert(&seen_by("b"), now + 10)
            .await
            .expect("fire b");
        assert!(matches!(fired, Fired::Still { .. }), "{:?}", test.backend);
        // `a` recovers; `b` observed the fault 10 ms ago: still firing, nothing owed.
        let fresh_after = now - 60_000;
        let resolved = first
            .resolve_observed_alert(
                "builtin:intake_unhealthy",
                "intake",
                Some(("a", fresh_after)),
                now + 20,
            )
            .await
            .expect("resolve a");
        assert!(!resolved, "{:?}", test.backend);
        // `a` sees nothing again and tries again: its withdrawn observation stays withdrawn.
        assert!(
            !first
                .resolve_observed_alert(
                    "builtin:intake_unhealthy",
                    "intake",
                    Some(("a", fresh_after)),
                    now + 30
                )
                .await
                .expect("resolve a again"),
            "{:?}",
            test.backend
        );
        let alerts = first.firing_alerts().await.expect("firing");
        assert_eq!(alerts.len(), 1, "{:?}", test.backend);
        let id = alerts[0].id.clone();
        assert_eq!(
            first.alert_notifications(&id).await.expect("sent").len(),
            2,
            "only the firing's: {:?}",
            test.backend
        );
        // `b` recovers too: resolved once, one `resolved` notification per notifier told.
        assert!(
            second
                .resolve_observed_alert(
                    "builtin:intake_unhealthy",
                    "intake",
                    Some(("b", fresh_after)),
                    now + 40
                )
                .await
                .expect("resolve b"),
            "{:?}",
            test.backend
        );
        assert!(first.firing_alerts().await.expect("firing").is_empty());
        let sent = first.alert_notifications(&id).await.expect("sent");
        assert_eq!(sent.len(), 4, "{:?}: {sent:?}", test.backend);

        // An observation older than the freshness bound (a replica that died) holds nothing.
        first
            .fire_alert(&seen_by("gone"), now + 50)
            .await
            .expect("fire gone");
        assert!(
            second
                .resolve_observed_alert(
                    "builtin:intake_unhealthy",
                    "intake",
                    Some(("b", now + 60)),
                    now + 70
                )
                .await
                .expect("resolve stale"),
            "{:?}",
            test.backend
        );
    }
}

#[tokio::test]
async fn an_alert_fires_resolves_and_fires_again_as_a_new_episode_owing_each_transition_once() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let notifiers = notifiers();
        let Fired::New { alert_id, episode } = store
            .fire_alert(&firing(&notifiers, None), now)
            .await
            .expect("fire")
        else {
            panic!("first firing is new");
        };
        assert_eq!(episode, 1);
        let mut again = firing(&notifiers, None);
        again.numbers = r#"{"quiet_secs":7300}"#;
        assert_eq!(
            store.fire_alert(&again, now + 100).await.expect("again"),
            Fired::Still {
                alert_id: alert_id.clone()
            }
        );
        let alert = store
            .alert(&alert_id, None)
            .await
            .expect("read")
            .expect("alert");
        assert_eq!(
            (alert.state.as_str(), alert.numbers.as_str()),
            (FIRING, r#"{"quiet_secs":7300}"#)
        );
        assert!(
            store
                .resolve_alert("api-quiet", "source=api", now + 200)
                .await
                .expect("resolve")
        );
        assert!(
            !store
                .resolve_alert("api-quiet", "source=api", now + 300)
                .await
                .expect("again")
        );
        let alert = store
            .alert(&alert_id, None)
            .await
            .expect("read")
            .expect("alert");
        assert_eq!(
            (alert.state.as_str(), alert.resolved_at),
            (RESOLVED, Some(now + 200))
        );
        assert_eq!(
            store
                .fire_alert(&firing(&notifiers, None), now + 400)
                .await
                .expect("refire"),
            Fired::New {
                alert_id: alert_id.clone(),
                episode: 2
            }
        );
        let sent = store
            .alert_notifications(&alert_id)
            .await
            .expect("notifications");
        let events: Vec<_> = sent
            .iter()
            .map(|n| (n.episode, n.event.as_str(), n.notifier.as_str()))
            .collect();
        assert_eq!(events.len(), 6, "{:?}: {events:?}", test.backend);
        for episode_event in [(1, "fired"), (1, "resolved"), (2, "fired")] {
            assert_eq!(
                events
                    .iter()
                    .filter(|(e, w, _)| (*e, *w) == episode_event)
                    .count(),
                2,
                "{:?}: {events:?}",
                test.backend
            );
        }
    }
}

#[tokio::test]
async fn a_silenced_alert_fires_without_notifying_and_acknowledgement_lasts_until_it_fires_again() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let notifiers = notifiers();
        let Fired::New { alert_id, .. } = store
            .fire_alert(&firing(&notifiers, Some("acme")), now)
            .await
            .expect("fire")
        else {
            panic!("new");
        };
        let acked = store
            .acknowledge_alert(&alert_id, None, "ops", now + 1)
            .await
            .expect("ack");
        assert_eq!(acked.acknowledged_by.as_deref(), Some("ops"));
        let silenced = store
            .silence_alert(
                &alert_id,
                Some(&["acme".to_owned()]),
                now + 60_000,
                "ops",
                now + 2,
            )
            .await
            .expect("silence");
        assert_eq!(silenced.silenced_until, Some(now + 60_000));
        assert!(
            store
                .resolve_alert("api-quiet", "source=api", now + 3)
                .await
                .expect("resolve")
        );
        let Fired::New { episode, .. } = store
            .fire_alert(&firing(&notifiers, Some("acme")), now + 4)
            .await
            .expect("refire")
        else {
            panic!("new episode");
        };
        let alert = store
            .alert(&alert_id, None)
            .await
            .expect("read")
            .expect("alert");
        assert_eq!(
            alert.acknowledged_at, None,
            "a new episode is not acknowledged"
        );
        let sent = store
            .alert_notifications(&alert_id)
            .await
            .expect("notifications");
        assert!(
            sent.iter().all(|n| n.episode != episode),
            "{:?}: silenced firing notified: {sent:?}",
            test.backend
        );
        // Another tenant's caller neither sees nor changes it.
        let other = ["globex".to_owned()];
        assert_eq!(
            store.alert(&alert_id, Some(&other)).await.expect("read"),
            None
        );
        assert!(matches!(
            store
                .acknowledge_alert(&alert_id, Some(&other), "x", now + 5)
                .await,
            Err(AlertChangeError::NotFound)
        ));
        let listed = store
            .list_alerts(&AlertFilter {
                state: None,
                tenants: Some(other.to_vec()),
                limit: 10,
            })
            .await
            .expect("list");
        assert!(listed.is_empty());
        let listed = store
            .list_alerts(&AlertFilter {
                state: Some(FIRING.into()),
                tenants: Some(vec!["acme".into()]),
                limit: 10,
            })
            .await
            .expect("list");
        assert_eq!(listed.len(), 1);
    }
}

#[tokio::test]
async fn a_claimed_notification_is_not_claimed_again_until_its_claim_lapses_and_is_finished_once() {
    for test in TestStore::all().await {
        let store = &test.store;
        let replica = test.replica().await;
        let now = start();
        let notifiers = vec!["ops-webhook".to_owned()];
        store
            .fire_alert(&firing(&notifiers, None), now)
            .await
            .expect("fire");
        let claimed = claim(store, now).await;
        assert_eq!(claimed.len(), 1, "{:?}", test.backend);
        assert_eq!(claimed[0].alert.rule, "api-quiet");
        assert_eq!(claimed[0].notification.attempts, 1);
        assert!(claim(&replica, now + 1).await.is_empty());
        let retry = NotificationOutcome::Retry {
            due_at: now + 5_000,
            error: "HTTP 503".into(),
        };
        assert!(finish(store, &claimed[0], &retry, now + 2).await);
        assert!(claim(&replica, now + 4_999).await.is_empty());
        let again = claim(&replica, now + 5_000).await;
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].notification.attempts, 2);
        // The first claim's token is stale now: its late outcome changes nothing.
        let delivered = NotificationOutcome::Delivered {
            external_ref: Some("C0OPS 1.2".into()),
        };
        assert!(!finish(store, &claimed[0], &delivered, now + 5_001).await);
        assert!(finish(&replica, &again[0], &delivered, now + 5_002).await);
        let row = &store
            .alert_notifications(&again[0].alert.id)
            .await
            .expect("rows")[0];
        assert_eq!(
            (row.status.as_str(), row.last_error.as_deref()),
            (DELIVERED, Some("HTTP 503"))
        );
        assert_ne!(row.status, PENDING);
        assert_eq!(
            store
                .fired_notification_ref(&again[0].alert.id, 1, "ops-webhook")
                .await
                .expect("ref")
                .as_deref(),
            Some("C0OPS 1.2")
        );
        assert!(claim(store, now + 100_000).await.is_empty());
    }
}

#[tokio::test]
async fn a_resolved_notification_waits_until_its_fired_one_to_the_same_notifier_is_delivered() {
    for test in TestStore::all().await {
        let store = &test.store;
        let replica = test.replica().await;
        let now = start();
        let notifiers = notifiers();
        store
            .fire_alert(&firing(&notifiers, None), now)
            .await
            .expect("fire");
        let claimed = claim(store, now).await;
        assert_eq!(claimed.len(), 2, "{:?}", test.backend);
        let alert_id = claimed[0].alert.id.clone();
        // The webhook refuses its `fired` (retry in 60s); Slack takes its own.
        for claim in &claimed {
            let outcome = if claim.notification.notifier == "ops-webhook" {
                NotificationOutcome::Retry {
                    due_at: now + 60_000,
                    error: "HTTP 503".into(),
                }
            } else {
                NotificationOutcome::Delivered {
                    external_ref: Some("C0OPS 1.2".into()),
                }
            };
            assert!(finish(store, claim, &outcome, now + 1).await);
        }
        assert!(
            store
                .resolve_alert("api-quiet", "source=api", now + 2)
                .await
                .expect("resolve")
        );
        // Both `resolved` are due now; only Slack's `fired` is delivered.
        let pairs = |claimed: &[ClaimedNotification]| {
            claimed
                .iter()
                .map(|c| {
                    (
                        c.notification.notifier.clone(),
                        c.notification.event.clone(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let slack = claim(store, now + 3).await;
        assert_eq!(
            pairs(&slack),
            [("ops-slack".to_owned(), RESOLVED.to_owned())],
            "{:?}",
            test.backend
        );
        assert!(
            finish(
                store,
                &slack[0],
                &NotificationOutcome::Delivered { external_ref: None },
                now + 4
            )
            .await
        );
        for at in [now + 5, now + 59_999] {
            assert!(
                claim(&replica, at).await.is_empty(),
                "the webhook's `resolved` waits for its `fired`: {:?}",
                test.backend
            );
        }
        // The `fired` retry is due: it alone is claimed, and while it is in flight (claimed
        // by one replica) the other replica still holds the `resolved` back.
        let fired = claim(store, now + 60_000).await;
        assert_eq!(
            pairs(&fired),
            [("ops-webhook".to_owned(), FIRED.to_owned())],
            "{:?}",
            test.backend
        );
        assert!(
            claim(&replica, now + 60_001).await.is_empty(),
            "{:?}",
            test.backend
        );
        assert!(
            finish(
                store,
                &fired[0],
                &NotificationOutcome::Delivered { external_ref: None },
                now + 60_002
            )
            .await
        );
        let resolved = claim(&replica, now + 60_003).await;
        assert_eq!(
            pairs(&resolved),
            [("ops-webhook".to_owned(), RESOLVED.to_owned())],
            "{:?}",
            test.backend
        );
        assert_eq!(resolved[0].alert.id, alert_id);
    }
}

#[tokio::test]
async fn rules_read_the_newest_delivery_of_a_scope_and_the_oldest_due_dispatch_of_a_target() {
    for test in TestStore::all().await {
        let store = &test.store;
        let now = start();
        let mut rows = Vec::new();
        for (offset, tenant) in [(-50_000, "acme"), (-40_000, "globex"), (-30_000, "acme")] {
            rows.push(ledger_row(
                &id_at(now + offset),
                Some(tenant),
                "routed",
                None,
                now + offset,
            ));
        }
        insert_ledger(store, &rows).await;
        let scope = |tenant| DeliveryScope {
            source: "github",
            tenant_id: tenant,
            event_type: None,
        };
        assert_eq!(
            store
                .last_delivery(scope(None), 0, None)
                .await
                .expect("last"),
            Some(now - 30_000)
        );
        // A window that ends before the newest row: the newest row inside it.
        assert_eq!(
            store
                .last_delivery(scope(None), 0, Some(now - 35_000))
                .await
                .expect("last"),
            Some(now - 40_000)
        );
        assert_eq!(
            store
                .last_delivery(scope(Some("globex")), 0, None)
                .await
                .expect("last"),
            Some(now - 40_000)
        );
        assert_eq!(
            store
                .last_delivery(scope(Some("globex")), now - 35_000, None)
                .await
                .expect("last"),
            None
        );
        let typed = DeliveryScope {
            source: "github",
            tenant_id: None,
            event_type: Some("other"),
        };
        assert_eq!(
            store.last_delivery(typed, 0, None).await.expect("last"),
            None
        );
        let unknown = DeliveryScope {
            source: "api",
            tenant_id: None,
            event_type: None,
        };
        assert_eq!(
            store.last_delivery(unknown, 0, None).await.expect("last"),
            None
        );

        assert_eq!(
            store.oldest_due_dispatch("crm", now).await.expect("lag"),
            None
        );
        routed(store, 1, "triage", "crm", now - 20_000).await;
        routed(store, 2, "triage", "crm", now - 10_000).await;
        routed(store, 3, "triage", "other", now - 90_000).await;
        assert_eq!(
            store.oldest_due_dispatch("crm", now).await.expect("lag"),
            Some(now - 20_000)
        );
        assert_eq!(
            store
                .oldest_due_dispatch("crm", now - 15_000)
                .await
                .expect("lag"),
            Some(now - 20_000)
        );
        assert_eq!(
            store
                .oldest_due_dispatch("crm", now - 25_000)
                .await
                .expect("lag"),
            None
        );
    }
}
