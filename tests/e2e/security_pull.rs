//! The pull API under attack from one tenant, with two tenants (acme, globex) and
//! tenant-limited worker tokens: idle long-polls of one tenant cost the other nothing, a token
//! gets at most its cap of waiting claims, oversized claim and release requests are refused,
//! and a stale worker is not told the current fencing token.

use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::harness::{Backend, Daemon, TestDb, config, event, read, unique};

const GLOBEX_1: &str = "globex-worker-1-secret-0123456789abcdef";
const GLOBEX_2: &str = "globex-worker-2-secret-0123456789abcdef";
const ACME: &str = "acme-worker-secret-0123456789abcdef01";

/// Most waiting claims per token (`MAX_WAITING_PER_TOKEN` in `src/http/claims.rs`).
const CAP: usize = 64;

const SETUP: &str = r#"
[[token]]
name = "globex-worker-1"
secret_env = "SY_GLOBEX_1"
scopes = ["runs:write"]
tenants = ["globex"]

[[token]]
name = "globex-worker-2"
secret_env = "SY_GLOBEX_2"
scopes = ["runs:write"]
tenants = ["globex"]

[[token]]
name = "acme-worker"
secret_env = "SY_ACME_WORKER"
scopes = ["runs:write", "read"]
tenants = ["acme"]

[[target]]
name = "quick"
kind = "pull"
claim_ttl = "1s"
max_claims = 20

[[workflow]]
id = "acme-work"
tenant = "acme"
status = "live"
run_as = "acme-agent"
target = "quick"
triggers = [ { channel = "webhook", event_type = "job.created", priority = 10 } ]

[[workflow]]
id = "globex-work"
tenant = "globex"
status = "live"
run_as = "globex-agent"
target = "quick"
triggers = [ { channel = "webhook", event_type = "job.created", priority = 10 } ]
"#;

async fn start(db: &TestDb) -> Daemon {
    Daemon::start(
        db,
        &config(db, SETUP),
        &[
            ("SY_GLOBEX_1", GLOBEX_1),
            ("SY_GLOBEX_2", GLOBEX_2),
            ("SY_ACME_WORKER", ACME),
        ],
    )
    .await
}

/// `POST /v1/claims` with the token `secret`.
async fn claim_as(daemon: &Daemon, secret: &str, body: &Value) -> (StatusCode, Value) {
    let response = daemon
        .client()
        .post(daemon.url("/v1/claims"))
        .bearer_auth(secret)
        .json(body)
        .send()
        .await
        .expect("POST /v1/claims");
    read(response).await
}

/// Routes one job of `tenant` and returns its run id.
async fn route(daemon: &Daemon, tenant: &str) -> String {
    let (status, answer) = daemon
        .post_event(
            &unique("d"),
            &event("webhook", "job.created", tenant, &unique("JOB")),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["outcome"], "routed", "{answer}");
    answer["run_id"].as_str().expect("run_id").to_owned()
}

/// The sum of the samples of `family` whose labels include `token="{token}"` (and `cause`,
/// when given).
pub(super) fn sample(metrics: &str, family: &str, token: &str, cause: Option<&str>) -> f64 {
    let token = format!("token=\"{token}\"");
    metrics
        .lines()
        .filter(|line| line.starts_with(&format!("{family}{{")))
        .filter(|line| line.contains(&token))
        .filter(|line| cause.is_none_or(|c| line.contains(&format!("cause=\"{c}\""))))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub(super) const WAITING: &str = "switchyard_pull_waiting_claims";
const CLAIMS: &str = "switchyard_pull_claim_transactions_total";

/// Claim transactions globex's two worker tokens have run.
fn globex_claims(metrics: &str) -> f64 {
    sample(metrics, CLAIMS, "globex-worker-1", None)
        + sample(metrics, CLAIMS, "globex-worker-2", None)
}

/// Waits until `done` holds for the metrics, and returns them.
pub(super) async fn metrics_until(
    daemon: &Daemon,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = daemon.metrics().await;
        if done(&metrics) {
            return metrics;
        }
        assert!(Instant::now() < deadline, "{what} within 30 s:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `count` long-polls of the token `secret` on globex's workflow, each answered with what it
/// claimed (or an error once the daemon stops).
fn long_polls(
    daemon: &Daemon,
    secret: &'static str,
    count: usize,
) -> Vec<tokio::task::JoinHandle<Option<Vec<Value>>>> {
    (0..count)
        .map(|_| {
            let client = daemon.client().clone();
            let url = daemon.url("/v1/claims");
            tokio::spawn(async move {
                let response = client
                    .post(url)
                    .bearer_auth(secret)
                    .json(&json!({"workflows": ["globex-work"], "max": 1, "wait": "60s"}))
                    .send()
                    .await
                    .ok()?;
                let (status, body) = read(response).await;
                assert_eq!(status, StatusCode::OK, "a globex long-poll: {body}");
                body["claims"].as_array().cloned()
            })
        })
        .collect()
}

/// 100 idle long-polls of globex's tenant-limited tokens on globex's workflow: acme's events
/// are routed and acme's worker claims every run, while globex's waiters run no claim
/// transaction at all (before, each new run woke every waiter, and each waiter also ran a
/// claim transaction every 200 ms). A globex run still reaches a globex waiter at once.
#[tokio::test]
async fn idle_long_polls_of_one_tenant_cost_another_tenant_nothing() {
    const ACME_RUNS: usize = 20;
    for backend in Backend::ALL {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let daemon = start(&db).await;
        let mut polls = long_polls(&daemon, GLOBEX_1, 50);
        polls.extend(long_polls(&daemon, GLOBEX_2, 50));
        // Every waiter is registered and has made its first look.
        let idle = metrics_until(&daemon, "100 globex long-polls waiting", |m| {
            ["globex-worker-1", "globex-worker-2"].iter().all(|t| {
                sample(m, WAITING, t, None) == 50.0 && sample(m, CLAIMS, t, Some("request")) == 50.0
            })
        })
        .await;
        let before = globex_claims(&idle);
        assert_eq!(before, 100.0, "{backend:?}: one look each:\n{idle}");

        // Acme's intake and acme's worker, while globex's waiters idle.
        let answers = futures::stream::iter(0..ACME_RUNS)
            .map(|_| route(&daemon, "acme"))
            .buffer_unordered(5)
            .collect::<Vec<_>>()
            .await;
        assert_eq!(answers.len(), ACME_RUNS);
        let mut claimed = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while claimed.len() < ACME_RUNS {
            assert!(Instant::now() < deadline, "{backend:?}: {claimed:?}");
            let (status, body) = claim_as(
                &daemon,
                ACME,
                &json!({"workflows": ["acme-work"], "max": 100}),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{backend:?}: {body}");
            for got in body["claims"].as_array().expect("claims") {
                claimed.push(got["message"]["data"]["run"]["id"].clone());
            }
        }
        let mut claimed: Vec<String> = claimed
            .iter()
            .map(|id| id.as_str().expect("run id").to_owned())
            .collect();
        let mut routed = answers.clone();
        claimed.sort();
        routed.sort();
        assert_eq!(
            claimed, routed,
            "{backend:?}: acme's worker claims acme's runs"
        );
        // Past at least one periodic look of every waiter (every 2 s): a read finding nothing.
        tokio::time::sleep(Duration::from_millis(2600)).await;
        let after = daemon.metrics().await;
        assert_eq!(
            globex_claims(&after) - before,
            0.0,
            "{backend:?}: globex's idle waiters ran claim transactions for acme's runs:\n{after}"
        );
        assert_eq!(
            sample(&after, WAITING, "globex-worker-1", None)
                + sample(&after, WAITING, "globex-worker-2", None),
            100.0,
            "{backend:?}: {after}"
        );

        // Globex's own run wakes a globex waiter (not all 100) and is claimed at once.
        let globex_run = route(&daemon, "globex").await;
        let woken = metrics_until(&daemon, "a globex waiter took globex's run", |m| {
            sample(m, WAITING, "globex-worker-1", None)
                + sample(m, WAITING, "globex-worker-2", None)
                == 99.0
        })
        .await;
        let spent = globex_claims(&woken) - before;
        assert!(
            (1.0..10.0).contains(&spent),
            "{backend:?}: one new run cost globex's waiters {spent} claim transactions"
        );
        let mut got = Vec::new();
        for poll in polls {
            if poll.is_finished() {
                got.extend(poll.await.expect("long-poll task").unwrap_or_default());
            } else {
                poll.abort();
            }
        }
        assert_eq!(got.len(), 1, "{backend:?}: {got:?}");
        assert_eq!(
            got[0]["message"]["data"]["run"]["id"], globex_run,
            "{backend:?}"
        );
        daemon.stop();
        db.drop_database().await;
    }
}

/// One token may hold at most its cap of waiting claims: one more is 429
/// `too_many_waiting_claims` naming the cap, the gauge shows the count, and neither a claim
/// without `wait` nor another token's long-poll is refused.
#[tokio::test]
async fn a_token_gets_at_most_its_cap_of_waiting_claims() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let polls = long_polls(&daemon, GLOBEX_1, CAP);
    metrics_until(&daemon, "the cap of globex long-polls waiting", |m| {
        sample(m, WAITING, "globex-worker-1", None) == CAP as f64
    })
    .await;
    let body = json!({"workflows": ["globex-work"], "wait": "5s"});
    let (status, refused) = claim_as(&daemon, GLOBEX_1, &body).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"], "too_many_waiting_claims", "{refused}");
    let detail = refused["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("globex-worker-1") && detail.contains(&CAP.to_string()),
        "the detail names the token and the cap: {detail}"
    );
    let metrics = daemon.metrics().await;
    assert_eq!(
        sample(&metrics, WAITING, "globex-worker-1", None),
        CAP as f64,
        "{metrics}"
    );
    // A claim that does not wait is not held back.
    let (status, answer) =
        claim_as(&daemon, GLOBEX_1, &json!({"workflows": ["globex-work"]})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    // Another token's long-poll is not either, and gets its run.
    let acme_body = json!({"workflows": ["acme-work"], "wait": "20s"});
    let acme_wait = claim_as(&daemon, ACME, &acme_body);
    let routing = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        route(&daemon, "acme").await
    };
    let ((status, answer), run_id) = futures::join!(acme_wait, routing);
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["claims"][0]["message"]["data"]["run"]["id"], run_id);
    // Waiters whose clients went away are no longer counted.
    for poll in polls {
        poll.abort();
    }
    metrics_until(&daemon, "the gauge back at 0", |m| {
        sample(m, WAITING, "globex-worker-1", None) == 0.0
    })
    .await;
    daemon.stop();
    db.drop_database().await;
}

/// 40,000 workflow names in one claim are a 400 naming the bound, not a 503 (a SQL statement
/// past the database's variable limit); the same name 40,000 times is one name. A release
/// delay of 100 years is a 400, and the run stays claimable.
#[tokio::test]
async fn oversized_claims_and_release_delays_are_refused() {
    for backend in Backend::ALL {
        let Some(db) = TestDb::create(backend).await else {
            continue;
        };
        let daemon = start(&db).await;
        let run_id = route(&daemon, "acme").await;
        let many: Vec<String> = (0..40_000).map(|n| format!("workflow-{n}")).collect();
        let (status, answer) = daemon.post("/v1/claims", &json!({"workflows": many})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{backend:?}: {answer}");
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("workflows") && detail.contains("1000"),
            "{backend:?}: {detail}"
        );
        let same = vec!["acme-work"; 40_000];
        let (status, answer) = daemon.post("/v1/claims", &json!({"workflows": same})).await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
        let claims = answer["claims"].as_array().expect("claims");
        assert_eq!(claims.len(), 1, "{backend:?}: {answer}");
        assert_eq!(claims[0]["message"]["data"]["run"]["id"], run_id.as_str());
        let token = claims[0]["token"].as_str().expect("token").to_owned();

        for delay in ["100years", "2h"] {
            let (status, answer) = daemon
                .post(
                    &format!("/v1/claims/{token}/release"),
                    &json!({"delay": delay}),
                )
                .await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{backend:?}: {answer}");
            let detail = answer["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("delay") && detail.contains("1h"),
                "{backend:?}: {detail}"
            );
        }
        // Nothing changed: the claim is still the worker's, and releasing it within the bound
        // makes the run claimable again.
        let (status, answer) = daemon
            .post(&format!("/v1/claims/{token}/extend"), &json!({}))
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
        let (status, answer) = daemon
            .post(
                &format!("/v1/claims/{token}/release"),
                &json!({"delay": "0s"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{backend:?}: {answer}");
        let again = daemon.claim(&["acme-work"], 1).await;
        assert_eq!(again.len(), 1, "{backend:?}");
        assert_eq!(again[0]["message"]["data"]["run"]["id"], run_id.as_str());
        assert!(
            !daemon.logs().contains("too many SQL variables"),
            "{backend:?}"
        );
        daemon.stop();
        db.drop_database().await;
    }
}

/// Whether `text` has `number` as a word of its own (not inside an id).
fn names_number(text: &str, number: i64) -> bool {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| word == number.to_string())
}

/// A worker whose claim lapsed holds a stale fencing token: its heartbeat, finish and wait
/// are refused `lease_lost`, and no answer names the token the run holds now.
#[tokio::test]
async fn a_stale_worker_is_not_told_the_current_fencing_token() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let daemon = start(&db).await;
    let run_id = route(&daemon, "acme").await;
    let (_, first) = claim_as(&daemon, ACME, &json!({"workflows": ["acme-work"]})).await;
    let stale = first["claims"][0]["message"]["data"]["run"]["fencing_token"]
        .as_i64()
        .expect("fencing token");
    // The claim lapses (claim_ttl 1s); another worker claims the run with a new token.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, second) = claim_as(
        &daemon,
        ACME,
        &json!({"workflows": ["acme-work"], "wait": "5s"}),
    )
    .await;
    let current = second["claims"][0]["message"]["data"]["run"]["fencing_token"]
        .as_i64()
        .expect("the new holder's fencing token");
    assert!(current > stale, "{stale} then {current}");

    let digest = format!("sha256:{}", "0".repeat(64));
    let attempts = [
        ("heartbeat", json!({"fencing_token": stale})),
        (
            "finish",
            json!({"status": "completed", "fencing_token": stale}),
        ),
        (
            "waits",
            json!({"fencing_token": stale, "wait_id": "approve", "expects": "approval",
                   "proposal": {"id": "P-1", "digest": digest}, "deadline": "1h"}),
        ),
    ];
    for (path, body) in attempts {
        let response = daemon
            .client()
            .post(daemon.url(&format!("/v1/runs/{run_id}/{path}")))
            .bearer_auth(ACME)
            .json(&body)
            .send()
            .await
            .expect("POST");
        let (status, refusal) = read(response).await;
        assert_eq!(status, StatusCode::CONFLICT, "{path}: {refusal}");
        assert_eq!(refusal["error"], "lease_lost", "{path}: {refusal}");
        let text = refusal.to_string();
        assert!(
            !names_number(&text, current),
            "{path}: the refusal names the current token {current}: {text}"
        );
        assert!(text.contains("stale"), "{path}: {text}");
    }
    // The holder of the current token is unaffected.
    let (status, finished) = daemon
        .post(
            &format!("/v1/runs/{run_id}/finish"),
            &json!({"status": "completed", "fencing_token": current}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{finished}");
    daemon.stop();
    db.drop_database().await;
}
