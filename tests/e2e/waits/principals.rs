//! A resume under a suspended principal resumes nothing until the principal is active again.

use super::*;

/// With principals (issue 15): a resume of a run whose principal was suspended meanwhile
/// resumes nothing (recorded `authority_unavailable`, detail `authority_revoked`), the wait
/// stays open, and once the principal is active again the same approval resumes it.
#[tokio::test]
async fn a_resume_under_a_suspended_principal_resumes_nothing() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let active = setup.config();
        let agent = "id = \"acme-agent\"\ntenant = \"acme\"\nkind = \"service\"\nstatus = ";
        let suspended = active.replacen(
            &format!("{agent}\"active\""),
            &format!("{agent}\"suspended\""),
            1,
        );
        assert_ne!(
            suspended, active,
            "the harness's principal is where this test expects it"
        );
        let daemon = setup.daemon_on(&active).await;
        let (run, fencing) = started_run(&daemon, &setup.worker, &unique("ACCT-9-ticket")).await;
        let token = open_wait(&daemon, &run, fencing, "P-17", "48h", "fail").await;

        async fn credit_degraded(daemon: &Daemon) -> bool {
            daemon.get("/v1/workflows").await["workflows"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|w| w["id"] == "credit" && !w["degraded"].is_null())
        }
        async fn until(daemon: &Daemon, degraded: bool) {
            let deadline = Instant::now() + Duration::from_secs(60);
            while credit_degraded(daemon).await != degraded {
                assert!(
                    Instant::now() < deadline,
                    "reload not applied: {}",
                    daemon.logs()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        daemon.reload(&suspended);
        until(&daemon, true).await;
        let (status, refused) =
            resume(&daemon, &unique("k"), &token, &digest("P-17"), "alice").await;
        assert_eq!(
            (status, refused["outcome"].as_str()),
            (StatusCode::OK, Some("authority_unavailable")),
            "{backend:?}: {refused}"
        );
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("authority_revoked")),
            "{refused}"
        );
        assert_eq!(waits_of(&daemon, &run).await[0]["status"], "open");
        assert_eq!(
            daemon.get(&format!("/v1/runs/{run}")).await["status"],
            "needs_input"
        );

        daemon.reload(&active);
        until(&daemon, false).await;
        let (_, resumed) = resume(&daemon, &unique("k"), &token, &digest("P-17"), "alice").await;
        assert_eq!(resumed["outcome"], "resumed", "{resumed}");
        setup.worker.wait_for(&run, "resume").await;
        daemon.stop();
        setup.db.drop_database().await;
    }
}
