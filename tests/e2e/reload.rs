//! SIGHUP reloads: a valid edit takes effect without restart; an invalid one is refused and
//! routing goes on under the old revision.

use std::time::Duration;

use super::harness::{Backend, Daemon, TestDb, config, event};
use super::spine::WORKED_EXAMPLE;

const ADDED: &str = r#"
[[workflow]]
id = "updates"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "webhook", event_type = "ticket.updated", priority = 5 } ]
"#;

async fn revision(daemon: &Daemon) -> String {
    daemon.get("/v1/workflows").await["config_revision"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn wait_for_revision_change(daemon: &Daemon, old: &str) -> String {
    for _ in 0..250 {
        let now = revision(daemon).await;
        if now != old {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the revision did not change after SIGHUP:\n{}",
        daemon.logs()
    );
}

#[tokio::test]
async fn a_valid_edit_takes_effect_and_an_invalid_one_is_refused() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let original = config(&db, WORKED_EXAMPLE);
    let daemon = Daemon::start(&db, &original, &[]).await;
    let first_revision = revision(&daemon).await;
    let updated = event("webhook", "ticket.updated", "acme", "R-1");
    let (_, before) = daemon.post_event("before", &updated).await;
    assert_eq!(before["outcome"], "no_trigger_match");

    daemon.reload(&format!("{original}\n{ADDED}"));
    let second_revision = wait_for_revision_change(&daemon, &first_revision).await;
    let (_, after) = daemon.post_event("after", &updated).await;
    assert_eq!(after["outcome"], "routed", "{after}");
    assert_eq!(after["workflow_id"], "updates");
    let ledger = daemon.intake("").await;
    assert_eq!(ledger[0]["config_revision"], second_revision.as_str());
    assert_eq!(ledger[1]["config_revision"], first_revision.as_str());

    // A typo: refused, logged, and the second revision stays in force.
    daemon.reload(&format!("{original}\n{ADDED}\n[[workflow]]\nid = \"bad\"\ntenant = \"acme\"\nstatus = \"live\"\nrun_as = \"acme-agent\"\ntriggers = []\nprioritee = 3\n"));
    assert!(
        daemon
            .wait_for_log("the new config was refused", Duration::from_secs(5))
            .await,
        "{}",
        daemon.logs()
    );
    assert!(
        daemon.logs().contains("prioritee"),
        "the error names the bad key"
    );
    assert_eq!(revision(&daemon).await, second_revision);
    let (_, still) = daemon
        .post_event("still", &event("webhook", "ticket.updated", "acme", "R-2"))
        .await;
    assert_eq!(still["outcome"], "routed");
    assert_eq!(still["workflow_id"], "updates");

    // A file that parses but is invalid (a live trigger on an unknown channel) is refused too.
    daemon.reload(&original.replace(
        "channel = \"webhook\", event_type = \"ticket.created\", priority = 100",
        "channel = \"fax\", event_type = \"ticket.created\", priority = 100",
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(revision(&daemon).await, second_revision);
    assert!(
        daemon.logs().contains("unknown channel `fax`"),
        "{}",
        daemon.logs()
    );
    daemon.stop();
}
