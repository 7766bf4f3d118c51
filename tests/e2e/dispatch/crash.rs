//! A crash mid-delivery, and a backlog behind a slow worker: every run delivered, once.

use super::*;

#[tokio::test]
async fn a_daemon_killed_mid_delivery_delivers_every_run_after_restart() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let (secret, key) = new_secret();
        let worker = Worker::start(key, &[], Duration::from_millis(300)).await;
        let setup = http_setup(
            &worker.url,
            "timeout = \"1s\"\nmax_in_flight = 4\nretry = [\"200ms\", \"500ms\", \"1s\", \"2s\"]",
        );
        let env = [(SECRET_ENV, secret.as_str())];
        let daemon = Daemon::start(&db, &config(&db, &setup), &env).await;
        let config_path = daemon.config_path.clone();

        let entities: Vec<String> = (0..100).map(|n| unique(&format!("e{n}"))).collect();
        let posted = AtomicUsize::new(0);
        let runs: BTreeSet<String> = post_many(&daemon, &entities, 20, &posted)
            .await
            .into_iter()
            .collect();
        assert_eq!(runs.len(), 100);
        let before = worker.wait_for(20, Duration::from_secs(30)).await.len();
        drop(daemon); // SIGKILL
        assert!(
            before < 100,
            "{backend:?}: every run was sent before the kill; nothing was left to test"
        );

        let daemon = Daemon::start_with_file(&config_path, &env).await;
        wait_all_dispatched(&daemon, &runs, Duration::from_secs(90)).await;
        let mut dispatch_ids = BTreeMap::new();
        for run in &runs {
            let trail = daemon.get(&format!("/v1/runs/{run}")).await;
            let id = trail["dispatch"]["id"].as_str().expect("dispatch id");
            dispatch_ids.insert(id.to_owned(), run.clone());
        }
        let seen = worker.seen();
        let mut received: BTreeMap<String, usize> = BTreeMap::new();
        for request in &seen {
            assert_eq!(request.verified, Ok(()), "{backend:?}: {request:#?}");
            let run = dispatch_ids.get(&request.id).unwrap_or_else(|| {
                panic!(
                    "{backend:?}: a request under webhook-id {} that is no run's dispatch id",
                    request.id
                )
            });
            assert_eq!(&request.run_id(), run, "{backend:?}: id and run disagree");
            assert_eq!(request.json()["id"], request.id.as_str());
            *received.entry(request.id.clone()).or_default() += 1;
        }
        let missing: Vec<&String> = dispatch_ids
            .keys()
            .filter(|id| !received.contains_key(*id))
            .collect();
        assert!(
            missing.is_empty(),
            "{backend:?}: {} runs were marked dispatched but never reached the worker: {missing:?}",
            missing.len()
        );
        let duplicates = received.values().filter(|n| **n > 1).count();
        eprintln!(
            "{backend:?}: {} requests for 100 runs ({before} before the kill, {duplicates} runs sent twice)",
            seen.len()
        );

        daemon.stop();
        db.drop_database().await;
    }
}

/// A backlog behind `max_in_flight` is not claimed before it can be sent: a claimed row waiting
/// its turn would see its claim (timeout + 5 s) lapse and be sent twice.
#[tokio::test]
async fn a_slow_worker_with_a_backlog_gets_each_run_once() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (secret, key) = new_secret();
    let worker = Worker::start(key, &[], Duration::from_millis(250)).await;
    let setup = http_setup(
        &worker.url,
        "timeout = \"1s\"\nmax_in_flight = 1\nretry = [\"200ms\"]",
    );
    let daemon = Daemon::start(&db, &config(&db, &setup), &[(SECRET_ENV, secret.as_str())]).await;
    // 30 runs of 250 ms one at a time: 7.5 s of backlog, longer than one claim (6 s).
    let entities: Vec<String> = (0..30).map(|n| unique(&format!("e{n}"))).collect();
    let posted = AtomicUsize::new(0);
    let runs: BTreeSet<String> = post_many(&daemon, &entities, 30, &posted)
        .await
        .into_iter()
        .collect();
    wait_all_dispatched(&daemon, &runs, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let seen = worker.seen();
    let ids: BTreeSet<&str> = seen.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 30, "every run reached the worker");
    assert_eq!(
        seen.len(),
        30,
        "{} requests for 30 runs: queued claims lapsed and were sent again",
        seen.len()
    );
    daemon.stop();
}
