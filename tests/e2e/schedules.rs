//! Schedules (issue 35): each fire is one delivery of source `schedule:<id>` whose delivery id
//! is its instant, so replicas on one database record each second once, with no gap, even when
//! one of them is killed; missed fires follow `catch_up`; DST through the CLI; reloads.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::harness::{Backend, Daemon, TestDb, binary, config};

/// A workflow every schedule's fires route to (as the tenant's service principal).
const WORKFLOW: &str = r#"
[[workflow]]
id = "sweeper"
tenant = "acme"
status = "live"
run_as = "acme-agent"
triggers = [ { channel = "schedule", event_type = "sweep", priority = 1 } ]
"#;

fn every_second(id: &str, catch_up: &str) -> String {
    format!(
        r#"
[[schedule]]
id = "{id}"
tenant = "acme"
every = "1s"
event_type = "sweep"
target_entity_id = "sweep-{id}"
payload = {{ scope = "priority" }}
catch_up = "{catch_up}"
max_catch_up = 3
"#
    )
}

/// One recorded fire.
#[derive(Debug, Clone)]
struct Fire {
    at: DateTime<Utc>,
    outcome: String,
    detail: Option<String>,
    caught_up: bool,
    run_id: Option<String>,
}

/// The schedule's ledger rows, oldest fire first.
async fn fires(daemon: &Daemon, id: &str) -> Vec<Fire> {
    let rows = daemon
        .intake(&format!("source=schedule:{id}&limit=100"))
        .await;
    let mut fires: Vec<Fire> = rows
        .iter()
        .map(|row: &Value| {
            let at: DateTime<Utc> = row["delivery_id"]
                .as_str()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("a fire's delivery id is its instant: {row}"));
            let payload = &row["event"]["payload"];
            assert_eq!(
                payload["scheduled_for"], row["delivery_id"],
                "the event carries its instant: {row}"
            );
            assert_eq!(payload["scope"], "priority", "{row}");
            assert_eq!(row["event"]["channel"], "schedule");
            Fire {
                at,
                outcome: row["outcome"].as_str().unwrap_or_default().to_owned(),
                detail: row["detail"].as_str().map(str::to_owned),
                caught_up: payload["caught_up"] == true,
                run_id: row["run_id"].as_str().map(str::to_owned),
            }
        })
        .collect();
    fires.sort_by_key(|fire| fire.at);
    fires
}

/// Every second from the first fire to the last is there, once.
fn assert_no_gap(fires: &[Fire], what: &str) {
    for pair in fires.windows(2) {
        assert_eq!(
            (pair[1].at - pair[0].at).num_seconds(),
            1,
            "{what}: a gap or a second fire between {} and {}: {fires:#?}",
            pair[0].at,
            pair[1].at
        );
    }
}

/// Two daemons on one database, an every-second schedule for about 15 s, one replica killed
/// (SIGKILL) midway: one row per second, none missing, none missed.
async fn two_replicas_fire_each_second_once(backend: Backend) {
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let text = config(&db, &format!("{WORKFLOW}{}", every_second("tick", "none")));
    let a = Daemon::start(&db, &text, &[]).await;
    let b = Daemon::start(&db, &text, &[]).await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    drop(a); // SIGKILL
    tokio::time::sleep(Duration::from_secs(8)).await;
    let fires = fires(&b, "tick").await;
    let logs = b.stop_with_logs().await;
    assert!(
        fires.len() >= 13,
        "{backend:?}: {} fires in 15 s: {fires:#?}",
        fires.len()
    );
    assert_no_gap(&fires, &format!("{backend:?}"));
    assert!(
        fires
            .iter()
            .all(|f| f.outcome != "ineligible" && f.outcome != "duplicate"),
        "{backend:?}: nothing missed while a replica was up: {fires:#?}"
    );
    // The first fire runs; later ones find its run holding the entity.
    assert_eq!(fires[0].outcome, "routed", "{backend:?}: {fires:#?}");
    assert!(
        fires[1..].iter().all(|f| f.outcome == "entity_locked"),
        "{fires:#?}"
    );
    // The other replica's attempts are silent: no decision line for them at info.
    let duplicate_lines = logs
        .lines()
        .filter(|l| l.contains("intake decided") && l.contains("\"duplicate\""))
        .count();
    assert_eq!(
        duplicate_lines, 0,
        "{backend:?}: duplicates are not logged at info"
    );
    db.drop_database().await;
}

#[tokio::test]
async fn two_replicas_on_postgres_record_each_second_once_through_a_kill() {
    two_replicas_fire_each_second_once(Backend::Postgres).await;
}

#[tokio::test]
async fn two_replicas_on_mariadb_record_each_second_once_through_a_kill() {
    two_replicas_fire_each_second_once(Backend::MySql).await;
}

#[tokio::test]
async fn one_daemon_on_sqlite_records_each_second_once() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let text = config(&db, &format!("{WORKFLOW}{}", every_second("tick", "none")));
    let daemon = Daemon::start(&db, &text, &[]).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let fires = fires(&daemon, "tick").await;
    assert!(fires.len() >= 4, "{fires:#?}");
    assert_no_gap(&fires, "sqlite");
    let run = fires[0].run_id.clone().expect("the first fire routed");
    let run = daemon.get(&format!("/v1/runs/{run}")).await;
    assert_eq!(run["workflow_id"], "sweeper", "{run}");
    assert_eq!(
        run["principal"]["id"], "acme-agent",
        "a schedule's run acts as its workflow's principal: {run}"
    );
    assert_eq!(run["audit"]["authority"]["kind"], "service", "{run}");
    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains(r#"switchyard_schedule_fires_total{schedule="tick",outcome="routed"} 1"#),
        "{metrics}"
    );
    daemon.stop();
}

/// Every replica down for several fires, then one starts: per schedule, the fires older than the
/// grace are missed (`ineligible`, `missed`, no run) but for the latest `none`/1/3 that run
/// (`caught_up`), and the ledger has every second.
#[tokio::test]
async fn missed_fires_are_recorded_by_catch_up_policy() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let schedules = ["none", "latest", "all"]
        .map(|policy| every_second(policy, policy))
        .concat();
    let text = config(&db, &format!("{WORKFLOW}{schedules}"));
    let daemon = Daemon::start(&db, &text, &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    daemon.stop();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let daemon = Daemon::start(&db, &text, &[]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (policy, runs) in [("none", 0), ("latest", 1), ("all", 3)] {
        let fires = fires(&daemon, policy).await;
        assert_no_gap(&fires, policy);
        let missed: Vec<&Fire> = fires.iter().filter(|f| f.outcome == "ineligible").collect();
        let caught_up: Vec<&Fire> = fires.iter().filter(|f| f.caught_up).collect();
        assert!(
            missed.len() + caught_up.len() >= 5,
            "{policy}: about 8 s down, 2 s of grace: {fires:#?}"
        );
        assert_eq!(caught_up.len(), runs, "{policy}: {fires:#?}");
        for fire in &missed {
            assert_eq!(fire.detail.as_deref(), Some("missed"), "{policy}: {fire:?}");
            assert_eq!(fire.run_id, None, "{policy}: a missed fire runs nothing");
        }
        // The missed fires come first, then the caught-up ones: the latest of the gap run.
        let first_missed = fires.iter().position(|f| f.outcome == "ineligible");
        let gap = &fires[first_missed.unwrap_or(0)..];
        let block = missed.len() + caught_up.len();
        assert!(
            gap[..missed.len()]
                .iter()
                .all(|f| f.outcome == "ineligible")
                && gap[missed.len()..block]
                    .iter()
                    .all(|f| f.caught_up && f.outcome != "ineligible"),
            "{policy}: {fires:#?}"
        );
    }
    daemon.stop();
}

/// The DST cases of 2027 (and weekdays, and `every`) as the admin checks them: `schedule
/// --from`, in UTC with `Z` and in local time.
#[test]
fn the_cli_prints_next_fires_across_both_dst_changes() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        (
            r#"cron = "0 30 2 * * *""#,
            "Europe/Berlin",
            "2027-03-27T00:00:00Z",
            &[
                "2027-03-27T01:30:00Z  2027-03-27T02:30:00+01:00 CET",
                "2027-03-28T01:00:00Z  2027-03-28T03:00:00+02:00 CEST",
                "2027-03-29T00:30:00Z  2027-03-29T02:30:00+02:00 CEST",
            ],
        ),
        (
            r#"cron = "0 30 2 * * *""#,
            "Europe/Berlin",
            "2027-10-30T00:00:00Z",
            &[
                "2027-10-30T00:30:00Z  2027-10-30T02:30:00+02:00 CEST",
                "2027-10-31T00:30:00Z  2027-10-31T02:30:00+02:00 CEST",
                "2027-11-01T01:30:00Z  2027-11-01T02:30:00+01:00 CET",
            ],
        ),
        (
            r#"cron = "0 30 2 * * *""#,
            "America/New_York",
            "2027-03-13T12:00:00Z",
            &[
                "2027-03-14T07:00:00Z  2027-03-14T03:00:00-04:00 EDT",
                "2027-03-15T06:30:00Z  2027-03-15T02:30:00-04:00 EDT",
            ],
        ),
        (
            r#"cron = "0 30 1 * * *""#,
            "America/New_York",
            "2027-11-06T12:00:00Z",
            &[
                "2027-11-07T05:30:00Z  2027-11-07T01:30:00-04:00 EDT",
                "2027-11-08T06:30:00Z  2027-11-08T01:30:00-05:00 EST",
            ],
        ),
        (
            r#"cron = "0 0 9 * * Mon-Fri""#,
            "Europe/Berlin",
            "2027-01-08T12:00:00Z",
            &[
                "2027-01-11T08:00:00Z  2027-01-11T09:00:00+01:00 CET",
                "2027-01-12T08:00:00Z  2027-01-12T09:00:00+01:00 CET",
            ],
        ),
        (
            r#"every = "15m""#,
            "America/New_York",
            "2027-03-14T06:50:00Z",
            &[
                "2027-03-14T07:00:00Z  2027-03-14T03:00:00-04:00 EDT",
                "2027-03-14T07:15:00Z  2027-03-14T03:15:00-04:00 EDT",
            ],
        ),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    for (rule, zone, from, expected) in cases {
        let path = dir.path().join("schedule.toml");
        std::fs::write(
            &path,
            format!(
                "[[schedule]]\nid = \"s\"\ntenant = \"acme\"\n{rule}\ntime_zone = \"{zone}\"\nevent_type = \"sweep\"\n"
            ),
        )
        .expect("write config");
        let output = Command::new(binary())
            .args(["schedule", "--config"])
            .arg(&path)
            .args(["--from", from, "--next", &expected.len().to_string()])
            .output()
            .expect("run switchyard schedule");
        assert!(output.status.success(), "{output:?}");
        let text = String::from_utf8_lossy(&output.stdout);
        let lines: Vec<&str> = text.lines().skip(1).map(str::trim).collect();
        assert_eq!(&lines, expected, "{rule} in {zone} from {from}:\n{text}");
    }
    // A bad zone is refused naming the schedule, as `check` would.
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[schedule]]\nid = \"s\"\ntenant = \"acme\"\ncron = \"0 0 9 * * *\"\ntime_zone = \"Mars/Olympus\"\nevent_type = \"sweep\"\n",
    )
    .expect("write config");
    let output = Command::new(binary())
        .args(["schedule", "--config"])
        .arg(&path)
        .output()
        .expect("run switchyard schedule");
    assert_eq!(output.status.code(), Some(78), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("schedule `s`: `time_zone` `Mars/Olympus`")
    );
}

/// SIGHUP: a changed timing takes effect from its next fire (no fire twice), a removed
/// schedule stops, an added one (`catch_up = "none"`) starts from now.
#[tokio::test]
async fn reload_changes_removes_and_adds_schedules() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let schedule = |id: &str, every: &str| {
        format!(
            "\n[[schedule]]\nid = \"{id}\"\ntenant = \"acme\"\nevery = \"{every}\"\nevent_type = \"sweep\"\npayload = {{ scope = \"priority\" }}\ncatch_up = \"none\"\n"
        )
    };
    let before = config(
        &db,
        &format!(
            "{WORKFLOW}{}{}",
            schedule("changed", "2s"),
            schedule("gone", "1s")
        ),
    );
    let daemon = Daemon::start(&db, &before, &[]).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = config(
        &db,
        &format!(
            "{WORKFLOW}{}{}",
            schedule("changed", "3s"),
            schedule("added", "1s")
        ),
    );
    let reloaded_at = Utc::now();
    daemon.reload(&after);
    assert!(
        daemon
            .wait_for_log("schedule removed", Duration::from_secs(10))
            .await,
        "{}",
        daemon.logs()
    );
    tokio::time::sleep(Duration::from_secs(7)).await;
    let changed = fires(&daemon, "changed").await;
    let gone = fires(&daemon, "gone").await;
    let added = fires(&daemon, "added").await;
    daemon.stop();

    let seconds: Vec<i64> = changed.iter().map(|f| f.at.timestamp()).collect();
    let switch = seconds
        .iter()
        .position(|s| s % 2 != 0)
        .unwrap_or_else(|| panic!("no fire on the new timing: {seconds:?}"));
    assert!(
        seconds[..switch].iter().all(|s| s % 2 == 0),
        "old timing before the switch: {seconds:?}"
    );
    assert!(
        seconds[switch..].iter().all(|s| s % 3 == 0),
        "new timing after it: {seconds:?}"
    );
    assert!(
        seconds[..switch].iter().any(|s| s % 3 != 0),
        "the old timing fired: {seconds:?}"
    );
    let mut counted = BTreeMap::new();
    for s in &seconds {
        *counted.entry(s).or_insert(0) += 1;
    }
    assert!(counted.values().all(|n| *n == 1), "{seconds:?}");

    assert!(gone.len() >= 3, "{gone:#?}");
    let last_gone = gone.last().expect("fires").at;
    assert!(
        last_gone <= reloaded_at + chrono::Duration::seconds(2),
        "a removed schedule stops: last fire {last_gone}, reloaded at {reloaded_at}"
    );
    assert!(added.len() >= 5, "{added:#?}");
    assert_no_gap(&added, "added");
    assert!(
        added.iter().all(
            |f| f.outcome != "ineligible" && f.at >= reloaded_at - chrono::Duration::seconds(1)
        ),
        "an added schedule starts from now, nothing missed: {added:#?}"
    );
}

/// `/v1/schedules` and the console list each schedule with its last fire (outcome, run) and its
/// next fire, only for the caller's tenants; `/metrics` counts fires by outcome.
#[tokio::test]
async fn schedules_are_listed_per_tenant_with_last_and_next_fire() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let rest = format!(
        r#"{WORKFLOW}{}
[[schedule]]
id = "globex-nightly"
tenant = "globex"
cron = "0 30 2 * * *"
time_zone = "Europe/Berlin"
event_type = "nightly"

[[token]]
name = "globex-ops"
secret_env = "SY_GLOBEX_OPS"
scopes = ["read"]
tenants = ["globex"]
"#,
        every_second("tick", "none")
    );
    const GLOBEX: &str = "globex-ops-secret-0123456789";
    let daemon = Daemon::start(&db, &config(&db, &rest), &[("SY_GLOBEX_OPS", GLOBEX)]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let listed = daemon.get("/v1/schedules").await;
    let schedules = listed["schedules"].as_array().expect("schedules");
    assert_eq!(schedules.len(), 2, "{listed}");
    let tick = &schedules[0];
    assert_eq!(tick["id"], "tick");
    assert_eq!(tick["source"], "schedule:tick");
    assert_eq!(tick["every"], "1s");
    let last = &tick["last_fire"];
    assert!(
        last["outcome"] == "routed" || last["outcome"] == "entity_locked",
        "{listed}"
    );
    assert!(
        last["scheduled_for"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z')),
        "{listed}"
    );
    let next = tick["next_fire"].as_str().expect("a next fire");
    assert!(next.ends_with('Z') && next > last["scheduled_for"].as_str().unwrap_or_default());
    let nightly = &schedules[1];
    assert!(nightly["last_fire"].is_null(), "{listed}");
    let local = nightly["next_fire_local"].as_str().expect("local time");
    assert!(local.contains("T02:30:00+0"), "02:30 in Berlin: {local}");

    let limited = daemon
        .client()
        .get(daemon.url("/v1/schedules"))
        .bearer_auth(GLOBEX)
        .send()
        .await
        .expect("GET /v1/schedules");
    let limited: Value = limited.json().await.expect("json");
    let ids: Vec<&str> = limited["schedules"]
        .as_array()
        .expect("schedules")
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["globex-nightly"],
        "another tenant's schedule is not shown"
    );

    let console = super::console::Console::login(&daemon, super::harness::TOKEN).await;
    let page = console.page("/ui/schedules").await;
    assert!(
        page.contains("tick") && page.contains("globex-nightly"),
        "{page}"
    );
    assert!(page.contains("never fired"), "{page}");
    let limited_console = super::console::Console::login(&daemon, GLOBEX).await;
    let page = limited_console.page("/ui/schedules").await;
    assert!(
        page.contains("globex-nightly") && !page.contains(">tick<"),
        "{page}"
    );

    // No caller can make a schedule's events: its runs are started by time alone.
    let forged = super::harness::event("schedule", "sweep", "acme", "sweep-tick");
    let (status, answer) = daemon.post_event("forged-fire", &forged).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["outcome"], "invalid_event", "{answer}");

    let metrics = daemon.metrics().await;
    assert!(
        metrics.contains(
            r#"switchyard_schedule_fires_total{schedule="tick",outcome="entity_locked"}"#
        ),
        "{metrics}"
    );
    daemon.stop();
}
