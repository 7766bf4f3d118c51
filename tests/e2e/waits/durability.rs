//! Waits across restarts and replicas: they survive a `kill -9`, and every timer fires once.

use super::*;

/// Waits, tokens and timers survive a `kill -9`; a timer due while no daemon ran fires once
/// after the start.
#[tokio::test]
async fn waits_survive_a_kill_and_a_timer_due_meanwhile_fires_once() {
    for backend in Backend::ALL {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let daemon = setup.daemon().await;
        let worker = &setup.worker;
        let (waiting, t1) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let (timing, t2) = started_run(&daemon, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &waiting, t1, "P-17", "48h", "fail").await;
        open_wait(&daemon, &timing, t2, "P-22", "2s", "resume").await;
        drop(daemon); // SIGKILL
        tokio::time::sleep(Duration::from_secs(3)).await; // the deadline passes while down

        let daemon = setup.daemon().await;
        let message = worker.wait_for(&timing, "resume").await;
        assert_eq!(message["data"]["resume"]["decision"], "timeout");
        let (status, answer) =
            resume(&daemon, &unique("k"), &token, &digest("P-17"), "alice").await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{backend:?}: {answer}"
        );
        worker.wait_for(&waiting, "resume").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let view = daemon.get(&format!("/v1/runs/{timing}")).await;
        assert_eq!(
            history_causes(&view, "resumed"),
            1,
            "the timer fired once: {view:#}"
        );
        assert_eq!(worker.of(&timing, "resume").len(), 1);
        daemon.stop();
        setup.db.drop_database().await;
    }
}

/// Two daemons on one PostgreSQL (and MariaDB): every due timer fires once, and concurrent
/// resumes of one wait resume it once.
#[tokio::test]
async fn two_replicas_fire_each_timer_once_and_racing_resumes_resume_once() {
    for backend in [Backend::Postgres, Backend::MySql] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let first = setup.daemon().await;
        let second = setup.daemon().await;
        let worker = &setup.worker;
        let mut timed = Vec::new();
        for _ in 0..6 {
            let (run, fencing) = started_run(&first, worker, &unique("ACCT-9-ticket")).await;
            open_wait(&first, &run, fencing, "P-1", "2s", "resume").await;
            timed.push(run);
        }
        let (raced, fencing) = started_run(&first, worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&second, &raced, fencing, "P-9", "48h", "fail").await;
        let attempts =
            (0..8).map(|i| {
                let daemon = if i % 2 == 0 { &first } else { &second };
                let token = token.clone();
                async move {
                    settled_resume(daemon, &unique("race"), &token, &digest("P-9"), "alice").await
                }
            });
        let answers = futures::future::join_all(attempts).await;
        let resumed = answers
            .iter()
            .filter(|(_, a)| a["outcome"] == "resumed")
            .count();
        let duplicates = answers
            .iter()
            .filter(|(_, a)| a["outcome"] == "duplicate")
            .count();
        assert_eq!((resumed, duplicates), (1, 7), "{backend:?}: {answers:#?}");

        // A resume sent by the other replica the moment the opening answers: the token exists
        // only from the opening's commit, which also made the run `needs_input`, so the
        // resume finds the whole wait or nothing; it is never half-open and never lost.
        let mut opened_then_resumed = Vec::new();
        for _ in 0..4 {
            opened_then_resumed.push(started_run(&first, worker, &unique("ACCT-9-ticket")).await);
        }
        let races = opened_then_resumed.iter().map(|(run, fencing)| {
            let (first, second) = (&first, &second);
            async move {
                let token = open_wait(first, run, *fencing, "P-3", "48h", "fail").await;
                settled_resume(second, &unique("fast"), &token, &digest("P-3"), "alice").await
            }
        });
        for (status, answer) in futures::future::join_all(races).await {
            assert_eq!(
                (status, answer["outcome"].as_str()),
                (StatusCode::OK, Some("resumed")),
                "{answer}"
            );
        }
        for (run, _) in &opened_then_resumed {
            worker.wait_for(run, "resume").await;
            let view = wait_status(&second, run, "dispatched").await;
            assert_eq!(history_causes(&view, "resumed"), 1, "{view:#}");
        }

        for run in &timed {
            worker.wait_for(run, "resume").await;
        }
        worker.wait_for(&raced, "resume").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        for run in timed.iter().chain([&raced]) {
            let view = first.get(&format!("/v1/runs/{run}")).await;
            assert_eq!(history_causes(&view, "resumed"), 1, "{backend:?}: {view:#}");
            assert_eq!(worker.of(run, "resume").len(), 1);
        }
        first.stop();
        second.stop();
        setup.db.drop_database().await;
    }
}
