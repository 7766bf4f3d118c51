//! The pull API end to end: workers claim, extend, release and finish runs.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TOKEN, TestDb, config, event, read, unique};
use super::security_pull::{WAITING, metrics_until, sample};

/// One workflow on `target` (the built-in pull target when `None`), with `[[target]]`s.
fn workflow(target: Option<&str>, targets: &str) -> String {
    let target = target.map_or(String::new(), |t| format!("target = \"{t}\"\n"));
    format!(
        r#"{targets}
[[workflow]]
id = "work"
tenant = "acme"
status = "live"
run_as = "acme-agent"
{target}triggers = [ {{ channel = "webhook", event_type = "job.created", priority = 10 }} ]
"#
    )
}

/// A pull target `quick` with a short claim TTL.
fn quick(ttl: &str, max_claims: u32) -> String {
    workflow(
        Some("quick"),
        &format!(
            "[[target]]\nname = \"quick\"\nkind = \"pull\"\nclaim_ttl = \"{ttl}\"\nmax_claims = {max_claims}\n"
        ),
    )
}

fn job(entity: &str) -> Value {
    event("webhook", "job.created", "acme", entity)
}

/// Posts one job and returns its run id.
async fn route(daemon: &Daemon, entity: &str) -> String {
    let (status, answer) = daemon.post_event(&unique("d"), &job(entity)).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    answer["run_id"].as_str().expect("run_id").to_owned()
}

/// `POST /v1/claims` for `work`, answered 200.
async fn claim(daemon: &Daemon, max: u64, wait: &str) -> Vec<Value> {
    let (status, answer) = daemon
        .post(
            "/v1/claims",
            &json!({"workflows": ["work"], "max": max, "wait": wait}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "claim: {answer}");
    answer["claims"].as_array().cloned().expect("claims")
}

/// What a claim carries, by name.
struct Claim {
    token: String,
    dispatch_id: String,
    run_id: String,
    attempt: i64,
    fencing_token: i64,
}

fn parse(claim: &Value) -> Claim {
    let run = &claim["message"]["data"]["run"];
    let text = |v: &Value| {
        v.as_str()
            .unwrap_or_else(|| panic!("missing field in {claim}"))
            .to_owned()
    };
    assert_eq!(claim["message"]["type"], "switchyard.run.start", "{claim}");
    Claim {
        token: text(&claim["token"]),
        dispatch_id: text(&claim["message"]["id"]),
        run_id: text(&run["id"]),
        attempt: run["attempt"].as_i64().expect("attempt"),
        fencing_token: run["fencing_token"].as_i64().expect("fencing_token"),
    }
}

/// The one claim a request must return.
async fn claim_one(daemon: &Daemon, wait: &str) -> Claim {
    let claims = claim(daemon, 10, wait).await;
    assert_eq!(claims.len(), 1, "expected one claim: {claims:?}");
    parse(&claims[0])
}

/// A claim now gets nothing; `why` says what it would mean if it did.
async fn nothing_due(daemon: &Daemon, backend: Backend, why: &str) {
    let claims = claim(daemon, 10, "0s").await;
    assert!(claims.is_empty(), "{backend:?}: {why}: {claims:?}");
}

async fn finish(daemon: &Daemon, run_id: &str, fencing_token: i64) -> (StatusCode, Value) {
    daemon
        .post(
            &format!("/v1/runs/{run_id}/finish"),
            &json!({"status": "completed", "fencing_token": fencing_token}),
        )
        .await
}

async fn run(daemon: &Daemon, run_id: &str) -> Value {
    daemon.get(&format!("/v1/runs/{run_id}")).await
}

/// The history causes of a run, oldest first.
fn causes(run: &Value) -> Vec<String> {
    run["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|h| h["cause"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Waits (up to 10 s) until the run's history has `count` entries with `cause`.
async fn wait_for_cause(daemon: &Daemon, run_id: &str, cause: &str, count: usize) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let view = run(daemon, run_id).await;
        if causes(&view).iter().filter(|c| *c == cause).count() >= count {
            // Read again: GET /v1/runs/{id} reads the run, its dispatch and its history in
            // separate statements, so the view that first shows a commit may be torn.
            return run(daemon, run_id).await;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} has no {count}x `{cause}` in its history after 10 s: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn extend(daemon: &Daemon, token: &str) -> (StatusCode, Value) {
    daemon
        .post(&format!("/v1/claims/{token}/extend"), &json!({}))
        .await
}

async fn release(daemon: &Daemon, token: &str, delay: &str) -> (StatusCode, Value) {
    daemon
        .post(
            &format!("/v1/claims/{token}/release"),
            &json!({"delay": delay}),
        )
        .await
}

fn assert_claim_lost(what: &str, (status, body): (StatusCode, Value)) {
    assert_eq!(status, StatusCode::CONFLICT, "{what}: {body}");
    assert_eq!(body["error"], "claim_lost", "{what}: {body}");
}

const RUNS: usize = 500;
const WORKERS_PER_DAEMON: usize = 4;

/// 500 runs, two daemons on one database, eight workers: each run is claimed exactly once.
#[tokio::test]
async fn eight_workers_on_two_daemons_claim_each_run_exactly_once() {
    for backend in Backend::ALL {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let a = Daemon::start(&db, &config(&db, &workflow(None, "")), &[]).await;
        let b = Daemon::start_with_file(&a.config_path, &[]).await;
        let daemons = [&a, &b];
        let prefix = unique("JOB");

        let finished = AtomicUsize::new(0);
        // (run id, dispatch id, attempt, finish status) of every claim any worker got.
        let claimed: Mutex<Vec<(String, String, i64, StatusCode)>> = Mutex::new(Vec::new());
        let deadline = Instant::now() + Duration::from_secs(90);
        let workers = (0..2 * WORKERS_PER_DAEMON).map(|n| {
            let daemon = daemons[n % 2];
            let (finished, claimed) = (&finished, &claimed);
            async move {
                while finished.load(Ordering::SeqCst) < RUNS && Instant::now() < deadline {
                    let (status, answer) = daemon
                        .post(
                            "/v1/claims",
                            &json!({"workflows": ["work"], "max": 10, "wait": "1s"}),
                        )
                        .await;
                    assert_eq!(status, StatusCode::OK, "{backend:?} worker {n}: {answer}");
                    for got in answer["claims"].as_array().expect("claims") {
                        let got = parse(got);
                        let (status, body) = finish(daemon, &got.run_id, got.fencing_token).await;
                        assert!(
                            status == StatusCode::OK || status == StatusCode::CONFLICT,
                            "{backend:?} finish {}: {status} {body}",
                            got.run_id
                        );
                        if status == StatusCode::OK {
                            finished.fetch_add(1, Ordering::SeqCst);
                        }
                        claimed.lock().expect("claimed").push((
                            got.run_id,
                            got.dispatch_id,
                            got.attempt,
                            status,
                        ));
                    }
                }
            }
        });
        // Workers are already polling while the events arrive, 16 at a time over both daemons.
        let posting = futures::stream::iter(0..RUNS)
            .map(|n| {
                let daemon = daemons[n % 2];
                let entity = format!("{prefix}-{n}");
                async move {
                    // A 503 ("retry later": not committed within the intake timeout on a
                    // loaded machine) is retried as a sender would; the retry is the same
                    // delivery, so it is still one run.
                    loop {
                        let answer = daemon.post_event(&format!("d-{n}"), &job(&entity)).await;
                        if answer.0 != reqwest::StatusCode::SERVICE_UNAVAILABLE {
                            break answer;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>();
        let (answers, _) = futures::join!(posting, join_all(workers));
        let routed: BTreeSet<String> = answers
            .iter()
            .map(|(status, answer)| {
                // Routed, or (a retry after a 503 whose delivery committed late) the
                // duplicate of a routed one, naming the same run.
                let routed = answer["outcome"] == "routed"
                    || (answer["outcome"] == "duplicate" && answer["first_outcome"] == "routed");
                assert!(routed, "{backend:?}: {status} {answer}");
                answer["run_id"].as_str().expect("run_id").to_owned()
            })
            .collect();
        assert_eq!(routed.len(), RUNS, "{backend:?}: distinct routed runs");

        let claimed = claimed.into_inner().expect("claimed");
        let finished = finished.into_inner();
        assert_eq!(
            finished,
            RUNS,
            "{backend:?}: only {finished} of {RUNS} runs finished in 90 s ({} claims)",
            claimed.len()
        );
        let run_ids: BTreeSet<&str> = claimed.iter().map(|c| c.0.as_str()).collect();
        let dispatch_ids: BTreeSet<&str> = claimed.iter().map(|c| c.1.as_str()).collect();
        let twice: Vec<_> = claimed
            .iter()
            .filter(|c| claimed.iter().filter(|o| o.0 == c.0).count() > 1)
            .collect();
        assert!(
            twice.is_empty(),
            "{backend:?}: {} claims of runs claimed more than once, first: {:?}",
            twice.len(),
            &twice[..twice.len().min(6)]
        );
        assert_eq!(claimed.len(), RUNS, "{backend:?}: claims");
        assert_eq!(run_ids.len(), RUNS, "{backend:?}: distinct claimed runs");
        assert_eq!(
            dispatch_ids.len(),
            RUNS,
            "{backend:?}: distinct dispatch ids"
        );
        assert!(
            run_ids.iter().all(|id| routed.contains(*id)),
            "{backend:?}: a claimed run that was not routed"
        );
        assert!(
            claimed.iter().all(|c| c.2 == 1 && c.3 == StatusCode::OK),
            "{backend:?}: every claim is a first attempt that finished: {claimed:?}"
        );
        let runs = b.runs("limit=1000").await;
        assert_eq!(runs.len(), RUNS, "{backend:?}");
        assert!(
            runs.iter().all(|r| r["status"] == "completed"),
            "{backend:?}: {:?}",
            runs.iter().find(|r| r["status"] != "completed")
        );
        // Each run's own dispatch is the one that was claimed, delivered after one claim.
        let views = futures::stream::iter(claimed.iter())
            .map(|c| {
                let a = &a;
                async move { (c, run(a, &c.0).await) }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        for (c, view) in views {
            let dispatch = &view["dispatch"];
            assert_eq!(dispatch["id"], c.1.as_str(), "{backend:?}: {view}");
            assert_eq!(dispatch["status"], "delivered", "{backend:?}: {view}");
            assert_eq!(dispatch["attempts"], 1, "{backend:?}: {view}");
            assert_eq!(dispatch["target"], "pull", "{backend:?}: {view}");
        }
        a.stop();
        b.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn an_expired_claim_is_claimed_again_and_a_stale_token_is_refused() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, &quick("1s", 20)), &[]).await;
        let run_id = route(&daemon, "TCK-1").await;
        let first = claim_one(&daemon, "0s").await;
        assert_eq!(first.run_id, run_id, "{backend:?}");
        assert_eq!(first.attempt, 1, "{backend:?}");
        assert_eq!(run(&daemon, &run_id).await["status"], "dispatched");
        // Claimed, it is nobody else's while the claim lasts.
        nothing_due(
            &daemon,
            backend,
            "a claimed run is claimed again while its claim lasts",
        )
        .await;

        // Not extended, the claim lapses and the run is pending again.
        tokio::time::sleep(Duration::from_millis(1800)).await;
        let second = claim_one(&daemon, "0s").await;
        assert_eq!(second.run_id, run_id, "{backend:?}");
        assert_eq!(second.dispatch_id, first.dispatch_id, "{backend:?}");
        assert_eq!(second.attempt, 2, "{backend:?}");
        assert_ne!(second.token, first.token, "{backend:?}");

        assert_claim_lost("stale extend", extend(&daemon, &first.token).await);
        assert_claim_lost("stale release", release(&daemon, &first.token, "0s").await);
        assert_claim_lost("unknown token", extend(&daemon, &"0".repeat(64)).await);
        // The stale token's release did not hand the run back.
        nothing_due(
            &daemon,
            backend,
            "a stale token's release handed the run back",
        )
        .await;

        let view = run(&daemon, &run_id).await;
        assert!(
            causes(&view).contains(&"claim_expired".to_owned()),
            "{backend:?}: {view}"
        );
        assert_eq!(view["dispatch"]["attempts"], 2, "{view}");
        // The new holder has a new fencing token: the worker whose claim lapsed is stale.
        assert!(
            second.fencing_token > first.fencing_token,
            "{backend:?}: {} then {}",
            first.fencing_token,
            second.fencing_token
        );
        let (status, body) = finish(&daemon, &run_id, first.fencing_token).await;
        assert_eq!(status, StatusCode::CONFLICT, "{backend:?}: {body}");
        assert_eq!(body["error"], "lease_lost", "{body}");
        let (status, body) = finish(&daemon, &run_id, second.fencing_token).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {body}");
        let view = run(&daemon, &run_id).await;
        assert_eq!(view["status"], "completed", "{view}");
        assert_eq!(view["dispatch"]["status"], "delivered", "{view}");
        // Finished, the live claim is gone too.
        assert_claim_lost("extend after finish", extend(&daemon, &second.token).await);
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn extend_keeps_a_claim_and_release_hands_the_run_back() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, &quick("1s", 20)), &[]).await;
        let run_id = route(&daemon, "TCK-2").await;
        let first = claim_one(&daemon, "0s").await;

        // Extended every 400 ms for 2.4 s (over twice the TTL), nobody else gets it.
        let mut expires = Vec::new();
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let (status, body) = extend(&daemon, &first.token).await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {body}");
            assert_eq!(body["run_id"], run_id.as_str());
            expires.push(body["expires_at"].as_str().expect("expires_at").to_owned());
            nothing_due(
                &daemon,
                backend,
                "an extended claim was claimed by another worker",
            )
            .await;
        }
        assert!(
            expires.windows(2).all(|w| w[0] < w[1]),
            "each extend moves the expiry on: {expires:?}"
        );
        let view = run(&daemon, &run_id).await;
        assert_eq!(view["dispatch"]["attempts"], 1, "{backend:?}: {view}");
        assert!(
            !causes(&view).contains(&"claim_expired".to_owned()),
            "{backend:?}: {view}"
        );

        // Released with a delay: pending again only after it.
        let (status, body) = release(&daemon, &first.token, "1s").await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {body}");
        assert_eq!(body["run_id"], run_id.as_str());
        assert_eq!(run(&daemon, &run_id).await["status"], "queued");
        nothing_due(
            &daemon,
            backend,
            "a run released with a 1s delay is claimed at once",
        )
        .await;
        assert_claim_lost("released token", extend(&daemon, &first.token).await);
        assert_claim_lost("released twice", release(&daemon, &first.token, "0s").await);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let second = claim_one(&daemon, "0s").await;
        assert_eq!(second.run_id, run_id);
        assert_eq!(second.dispatch_id, first.dispatch_id);
        assert_eq!(second.attempt, 2, "{backend:?}");

        let view = run(&daemon, &run_id).await;
        let released: Vec<&Value> = view["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .filter(|a| a["result"] == "released")
            .collect();
        assert_eq!(released.len(), 1, "{backend:?}: {view}");
        assert_eq!(released[0]["attempt"], 1, "{view}");
        assert!(causes(&view).contains(&"released".to_owned()), "{view}");

        // Released without delay, a waiting worker is woken and gets it at once.
        let waiting = claim(&daemon, 10, "5s");
        let releasing = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // No body: the default delay is none.
            let response = daemon
                .client()
                .post(daemon.url(&format!("/v1/claims/{}/release", second.token)))
                .bearer_auth(TOKEN)
                .send()
                .await
                .expect("POST release");
            read(response).await
        };
        let (claims, (status, body)) = futures::join!(waiting, releasing);
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(claims.len(), 1, "{backend:?}: {claims:?}");
        let third = parse(&claims[0]);
        assert_eq!(third.attempt, 3, "{backend:?}");
        assert_eq!(
            finish(&daemon, &run_id, third.fencing_token).await.0,
            StatusCode::OK
        );
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn a_run_claimed_max_claims_times_is_dead_lettered() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, &quick("1s", 2)), &[]).await;
        let run_id = route(&daemon, "TCK-3").await;
        for attempt in 1..=2 {
            let got = claim_one(&daemon, "5s").await;
            assert_eq!(got.run_id, run_id, "{backend:?}");
            assert_eq!(got.attempt, attempt, "{backend:?}");
            let (_, held) = daemon.post_event(&unique("d"), &job("TCK-3")).await;
            assert_eq!(held["outcome"], "entity_locked", "{backend:?}: {held}");
            let lapsed = wait_for_cause(&daemon, &run_id, "claim_expired", attempt as usize).await;
            assert_eq!(lapsed["status"], "queued", "{backend:?}: {lapsed}");
            assert_eq!(lapsed["dispatch"]["claimed"], false, "{lapsed}");
        }
        nothing_due(
            &daemon,
            backend,
            "a run claimed max_claims times is claimed again",
        )
        .await;
        let view = run(&daemon, &run_id).await;
        assert_eq!(view["status"], "dead_lettered", "{backend:?}: {view}");
        assert_eq!(view["dispatch"]["status"], "dead_lettered", "{view}");
        assert_eq!(view["dispatch"]["reason"], "max_attempts", "{view}");
        assert_eq!(view["dispatch"]["attempts"], 2, "{view}");
        nothing_due(&daemon, backend, "a dead-lettered run is claimed").await;
        // Its entity is free again.
        let next = route(&daemon, "TCK-3").await;
        assert_ne!(next, run_id);
        daemon.stop();
        db.drop_database().await;
    }
}

#[tokio::test]
async fn bad_claim_requests_are_refused_naming_the_field() {
    for db in TestDb::all().await {
        let backend = db.backend;
        let daemon = Daemon::start(&db, &config(&db, &workflow(None, "")), &[]).await;
        let run_id = route(&daemon, "TCK-4").await;
        let cases = [
            (json!({"workflows": []}), "workflows"),
            (json!({"max": 1}), "workflows"),
            (json!({"workflows": ["work"], "max": 0}), "max"),
            (json!({"workflows": ["work"], "max": 1000}), "max"),
            (json!({"workflows": ["work"], "max": -1}), "max"),
            (json!({"workflows": ["work"], "wait": "10m"}), "wait"),
            (json!({"workflows": ["work"], "wait": "soon"}), "wait"),
            (json!({"workflows": ["work"], "maximum": 5}), "maximum"),
            (json!({"workflows": "work"}), "workflows"),
            // A workflow that is not in force is named, not claimed from forever.
            (
                json!({"workflows": ["work", "no-such-workflow"]}),
                "`no-such-workflow`, which is no workflow in force",
            ),
        ];
        for (body, field) in cases {
            let (status, answer) = daemon.post("/v1/claims", &body).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{backend:?} {body}: {answer}"
            );
            assert_eq!(answer["error"], "bad_request", "{body}: {answer}");
            let detail = answer["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains(field),
                "{body}: the detail names `{field}`: {answer}"
            );
        }
        // Release with a bad body is refused the same way, and keeps the claim.
        let held = claim_one(&daemon, "0s").await;
        for (body, field) in [
            (json!({"delay": "soon"}), "delay"),
            (json!({"dealy": "1s"}), "dealy"),
        ] {
            let (status, answer) = daemon
                .post(&format!("/v1/claims/{}/release", held.token), &body)
                .await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{backend:?} {body}: {answer}"
            );
            assert!(
                answer["detail"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(field),
                "{body}: {answer}"
            );
        }
        let (status, body) = extend(&daemon, &held.token).await;
        assert_eq!(status, StatusCode::OK, "the claim is still held: {body}");
        // Nothing was claimed by the refused requests: the first claim was attempt 1.
        assert_eq!(held.run_id, run_id);
        assert_eq!(held.attempt, 1, "{backend:?}");
        daemon.stop();
        db.drop_database().await;
    }
}

/// SIGTERM while a worker long-polls: the waiting claim is answered at once with no runs (the
/// worker claims again, from another replica), and the daemon stops without the drain waiting
/// out `shutdown_timeout`. Before, the request held the drain until the timeout closed its
/// connection unanswered.
#[tokio::test]
async fn a_stopping_daemon_answers_its_waiting_claims_at_once() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = Daemon::start(&db, &config(&db, &workflow(None, "")), &[]).await;
    let client = daemon.client().clone();
    let url = daemon.url("/v1/claims");
    let poll = tokio::spawn(async move {
        let sent = client
            .post(url)
            .bearer_auth(TOKEN)
            .json(&json!({"workflows": ["work"], "wait": "60s"}))
            .send()
            .await;
        match sent {
            Ok(response) => Ok(read(response).await),
            Err(error) => Err(error.to_string()),
        }
    });
    metrics_until(&daemon, "the claim waiting", |m| {
        sample(m, WAITING, "api_token", None) == 1.0
    })
    .await;

    let logs = daemon.stop_with_logs().await;
    let answered = poll.await.expect("the long-poll's task");
    let (status, body) = answered.expect("the waiting claim is answered, not cut off");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({"claims": []}));
    assert!(
        !logs.contains("shutdown_timeout passed"),
        "the drain did not wait for the claim:\n{logs}"
    );
    assert!(logs.contains(r#""message":"stopped""#), "{logs}");
    db.drop_database().await;
}
