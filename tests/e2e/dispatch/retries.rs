//! Retries: a worker down for the first attempts, and a drained backlog.

use super::*;

#[tokio::test]
async fn a_worker_down_for_the_first_attempts_gets_the_run_once_it_is_back() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (secret, key) = new_secret();
        let worker = Worker::start(
            key,
            &[(503, "warming up"), (503, "warming up")],
            Duration::ZERO,
        )
        .await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"5s\"\nretry = [\"200ms\", \"200ms\", \"500ms\", \"1s\"]",
        );
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;

        let (_, answer) = daemon
            .post_event(
                &unique("m"),
                &event("chat", "message", "acme", &unique("conv")),
            )
            .await;
        let run_id = run_id(&answer);
        let run = wait_run(&daemon, &run_id, "dispatched", Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_millis(600)).await;

        let seen = worker.seen();
        assert_eq!(seen.len(), 3, "{backend:?}: 503, 503, 200; got {seen:#?}");
        let dispatch_id = run["dispatch"]["id"].as_str().expect("dispatch id");
        for (n, request) in seen.iter().enumerate() {
            assert_eq!(request.verified, Ok(()), "{backend:?} request {n}");
            assert_eq!(
                request.id, dispatch_id,
                "request {n} has another webhook-id"
            );
            let body = request.json();
            assert_eq!(body["id"], dispatch_id, "request {n}: {body:#}");
            assert_eq!(body["data"]["run"]["id"], run_id.as_str());
            assert_eq!(body["data"]["run"]["attempt"], n + 1, "{body:#}");
        }

        let attempts = run["attempts"].as_array().expect("attempts");
        let summary: Vec<(String, i64, i64)> = attempts
            .iter()
            .map(|a| {
                (
                    a["result"].as_str().unwrap_or_default().to_owned(),
                    a["status_code"].as_i64().unwrap_or(-1),
                    a["attempt"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("retry".to_owned(), 503, 1),
                ("retry".to_owned(), 503, 2),
                ("delivered".to_owned(), 200, 3)
            ],
            "{backend:?}: {run:#}"
        );
        assert!(
            attempts.iter().all(|a| a["series"] == 1),
            "one series: {run:#}"
        );
        assert_eq!(attempts[0]["response"], "warming up", "{run:#}");
        assert_eq!(run["dispatch"]["status"], "delivered", "{run:#}");
        assert_eq!(run["dispatch"]["attempts"], 3, "{run:#}");
        assert_history_in_order(
            &run,
            &["routed", "attempt_failed", "attempt_failed", "delivered"],
        );
        // Each attempt is counted once, by who claimed it: only the first can be claimed in
        // its run's own intake transaction (not when the dispatcher had not yet published its
        // targets to the writer); retries come from the backlog, claimed by the SQLite intake
        // writer or by the dispatcher itself (the only way on PostgreSQL).
        let metrics = daemon.metrics().await;
        let samples = super::super::metrics::samples(&metrics);
        let claimed_by = |by: &str| {
            let name = format!(r#"switchyard_dispatch_claims_total{{target="worker",by="{by}"}}"#);
            samples.get(&name).copied().unwrap_or(0.0)
        };
        let (intake, backlog, dispatcher) = (
            claimed_by("intake"),
            claimed_by("intake_backlog"),
            claimed_by("dispatcher"),
        );
        assert_eq!(intake + backlog + dispatcher, 3.0, "{backend:?}: {metrics}");
        assert!(intake <= 1.0, "{backend:?}: {metrics}");
        if backend != Backend::Sqlite {
            assert_eq!(backlog, 0.0, "{backend:?}: {metrics}");
        }

        daemon.stop();
        db.drop_database().await;
    }
}

/// Where no SQLite writer claims the backlog (PostgreSQL, MariaDB), the dispatcher's own claim
/// pass does, and it clears the flag that a pre-claim finding no free slot raised. Left raised,
/// every delivery that ended started a claim transaction of its own, long after the backlog was
/// gone: database load, and runs handed over meanwhile waited behind it.
#[tokio::test]
async fn a_drained_backlog_starts_no_claim_transaction_per_delivery() {
    for backend in [Backend::Postgres, Backend::MySql] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (secret, key) = new_secret();
        let worker = Worker::start(key, &[], Duration::from_millis(200)).await;
        // One request at a time: four claims (max_in_flight times the claim window).
        let setup = http_setup(&worker.url, "timeout = \"5s\"\nmax_in_flight = 1");
        let daemon =
            Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;
        // Ten runs at once: four pre-claimed, the rest find no slot and wait in the backlog.
        let entities: Vec<String> = (0..10).map(|n| unique(&format!("b{n}"))).collect();
        let posted = AtomicUsize::new(0);
        let backlog: BTreeSet<String> = post_many(&daemon, &entities, 10, &posted)
            .await
            .into_iter()
            .collect();
        wait_all_dispatched(&daemon, &backlog, Duration::from_secs(60)).await;
        let passes = |metrics: &str, wake: &str| {
            let name = format!(
                r#"switchyard_dispatch_claim_transactions_total{{target="worker",wake="{wake}"}}"#
            );
            super::super::metrics::samples(metrics)
                .get(&name)
                .copied()
                .unwrap_or(0.0)
        };
        let before = daemon.metrics().await;
        assert!(
            passes(&before, "slot_freed") >= 1.0,
            "{backend:?}: the backlog was claimed when slots were freed: {before}"
        );
        // Then one run at a time, each delivered before the next is posted.
        for n in 0..8 {
            let (_, answer) = daemon
                .post_event(
                    &unique("one"),
                    &event("chat", "message", "acme", &unique(&format!("o{n}"))),
                )
                .await;
            wait_run(
                &daemon,
                &run_id(&answer),
                "dispatched",
                Duration::from_secs(30),
            )
            .await;
        }
        let after = daemon.metrics().await;
        let freed = passes(&after, "slot_freed") - passes(&before, "slot_freed");
        assert!(
            freed <= 1.0,
            "{backend:?}: {freed} claim transactions for freed slots while no run waited for \
             one (8 deliveries): {after}"
        );
        assert_eq!(worker.seen().len(), 18, "{backend:?}: each run sent once");
        // The dispatcher's tasks (its loop, the hand-over, the recorder) end at shutdown.
        let logs = daemon.stop_with_logs().await;
        assert!(
            logs.contains(r#""message":"stopped""#) && !logs.contains("did not stop in time"),
            "{backend:?}: the daemon did not stop cleanly:\n{logs}"
        );
        db.drop_database().await;
    }
}
