//! Approval messages Switchyard posts itself (issue 34), the credit example end to end in
//! Slack: a wait naming a Slack channel is posted with Approve / Reject buttons through the
//! local Web API (bot token checked, a failed post retried), a click on one message's button
//! (over Socket Mode, or signed over HTTP interactivity) resumes only that message's wait, and
//! each message is updated once its wait ended.

use super::super::slack_socket::peer::{APP_TOKEN, BOT_TOKEN, Peer};
use super::*;

const CHANNEL: &str = "C0APPROVALS";

/// The socket source posting approvals for tenant `acme`'s workspace.
fn socket_source(peer: &Peer) -> String {
    format!(
        r#"
[[source]]
kind = "slack"
name = "ws-socket"
mode = "socket"
app_token_env = "APPROVALS_APP_TOKEN"
bot_token_env = "APPROVALS_BOT_TOKEN"
signing_secret_env = "WAITS_SLACK_SECRET"
api_base_url = "{}"
teams = {{ {SLACK_TEAM} = "acme" }}
"#,
        peer.api_base_url
    )
}

/// Opens wait `approve` on `run` for `proposal`, posted to `source`'s `CHANNEL`.
async fn open_notified(
    daemon: &Daemon,
    run: &str,
    fencing_token: i64,
    proposal: &str,
    source: &str,
) -> (StatusCode, Value) {
    daemon
        .post(
            &format!("/v1/runs/{run}/waits"),
            &json!({
                "fencing_token": fencing_token, "wait_id": "approve", "expects": "approval",
                "proposal": {"id": proposal, "digest": digest(proposal),
                             "summary": format!("Credit *{proposal}* for ACCT-9?")},
                "deadline": "1h", "on_timeout": "fail",
                "notify": {"slack": {"source": source, "channel": CHANNEL}},
            }),
        )
        .await
}

/// Waits until the peer recorded `count` calls of `method`.
async fn calls(peer: &Peer, method: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let calls: Vec<Value> = peer
            .posts()
            .into_iter()
            .filter(|(m, _)| m == method)
            .map(|(_, body)| body)
            .collect();
        if calls.len() >= count {
            return calls;
        }
        assert!(
            Instant::now() < deadline,
            "{count} {method} calls not made in 30 s: {:#?}",
            peer.posts()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The posted message of proposal `proposal`, its button value and its `ts` (the peer numbers
/// posts in order: the n-th post has ts `1764633600.00000n`).
fn posted(posts: &[Value], proposal: &str) -> (Value, String, String) {
    let (index, post) = posts
        .iter()
        .enumerate()
        .find(|(_, p)| p.to_string().contains(&format!("Credit *{proposal}*")))
        .unwrap_or_else(|| panic!("no post for {proposal}: {posts:#?}"));
    let value = post["blocks"][2]["elements"][0]["value"]
        .as_str()
        .expect("a button value")
        .to_owned();
    (post.clone(), value, format!("1764633600.{:06}", index + 1))
}

fn click(user: &str, action: &str, value: &str, ts: &str) -> Value {
    json!({
        "type": "block_actions", "team": {"id": SLACK_TEAM, "domain": "credit"},
        "user": {"id": user, "username": "manager"}, "api_app_id": "A0APP",
        "trigger_id": unique("trigger"),
        "container": {"type": "message", "channel_id": CHANNEL, "message_ts": ts},
        "actions": [{"action_id": action, "block_id": "switchyard_wait", "type": "button",
                     "value": value, "action_ts": "1764633601.000200"}],
    })
}

#[tokio::test]
async fn an_approval_message_is_posted_its_button_resumes_only_its_wait_and_it_is_updated() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(setup) = Setup::new(backend).await else {
            continue;
        };
        let peer = Peer::start().await;
        let text = setup.config() + &socket_source(&peer);
        let daemon = Daemon::start(
            &setup.db,
            &text,
            &[
                (WORKER_SECRET_ENV, &setup.secret),
                ("WAITS_SLACK_SECRET", SLACK_SECRET),
                ("APPROVALS_APP_TOKEN", APP_TOKEN),
                ("APPROVALS_BOT_TOKEN", BOT_TOKEN),
                (ACTORS[0].1, ACTORS[0].2),
                (ACTORS[1].1, ACTORS[1].2),
                (ACTORS[2].1, ACTORS[2].2),
            ],
        )
        .await;
        peer.wait_open(2).await;
        let worker = &setup.worker;
        let (first, first_token) = started_run(&daemon, worker, &unique("ACCT-9-a")).await;
        let (second, second_token) = started_run(&daemon, worker, &unique("ACCT-9-b")).await;

        // A source that cannot post (no bot token) or a bad channel is refused, nothing opened.
        let (status, refused) = open_notified(&daemon, &first, first_token, "P-1", "ws").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        assert!(refused.to_string().contains("bot_token_env"), "{refused}");

        // The first post fails once at Slack: it is retried from the outbox.
        peer.fail_posts(1);
        let (status, opened) =
            open_notified(&daemon, &first, first_token, "P-1", "ws-socket").await;
        assert_eq!(status, StatusCode::CREATED, "{backend:?}: {opened}");
        let (status, opened) =
            open_notified(&daemon, &second, second_token, "P-2", "ws-socket").await;
        assert_eq!(status, StatusCode::CREATED, "{opened}");
        let posts = calls(&peer, "chat.postMessage", 2).await;
        assert_eq!(peer.refused_posts(), 0, "every call carried the bot token");
        let (post, first_value, first_ts) = posted(&posts, "P-1");
        assert_eq!(post["channel"], CHANNEL);
        let bound: Value = serde_json::from_str(&first_value).expect("JSON value");
        assert_eq!(
            (
                &bound["run_id"],
                &bound["wait_id"],
                &bound["proposal_digest"]
            ),
            (&json!(first), &json!("approve"), &json!(digest("P-1"))),
            "{bound}"
        );
        assert_eq!(
            post["blocks"][2]["elements"][1]["action_id"], "reject",
            "{post:#}"
        );
        let (_, second_value, second_ts) = posted(&posts, "P-2");
        assert_ne!(first_value, second_value);

        // The first message's Approve, clicked over Socket Mode, resumes the first run only.
        let envelope = peer
            .envelope(
                "interactive",
                click(MANAGER, "approve", &first_value, &first_ts),
            )
            .await;
        assert!(peer.wait_acked(&envelope, Duration::from_secs(30)).await);
        let resume = worker.wait_for(&first, "resume").await;
        assert_eq!(resume["data"]["resume"]["decision"], "approve");
        assert_eq!(resume["data"]["resume"]["actor"], MANAGER);
        wait_status(&daemon, &second, "needs_input").await;
        assert!(worker.of(&second, "resume").is_empty());

        // Its message is rewritten without buttons; the other one is not touched.
        let updates = calls(&peer, "chat.update", 1).await;
        assert_eq!(updates[0]["ts"], json!(first_ts), "{updates:#?}");
        assert!(
            updates[0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("Approved by <@U0MANAGER>")
        );
        assert!(
            !updates[0].to_string().contains("\"value\""),
            "no buttons left"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(calls(&peer, "chat.update", 1).await.len(), 1);

        // The second message's Reject, clicked over signed HTTP interactivity, resumes the
        // second run with `reject`, and its message is updated too.
        let body = format!(
            "payload={}",
            switchyard_slack::form_encode(
                &click(MANAGER, "reject", &second_value, &second_ts).to_string()
            )
        );
        let timestamp = unix_now();
        let response = daemon
            .client()
            .post(daemon.url("/v1/ingest/slack/ws-socket/interactivity"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("X-Slack-Request-Timestamp", timestamp.to_string())
            .header(
                "X-Slack-Signature",
                switchyard_slack::sign(SLACK_SECRET, timestamp, body.as_bytes()),
            )
            .body(body)
            .send()
            .await
            .expect("POST interactivity");
        let (status, answer) = super::super::harness::read(response).await;
        assert_eq!(
            (status, answer["outcome"].as_str()),
            (StatusCode::OK, Some("resumed")),
            "{answer}"
        );
        let resume = worker.wait_for(&second, "resume").await;
        assert_eq!(resume["data"]["resume"]["decision"], "reject");
        let updates = calls(&peer, "chat.update", 2).await;
        assert_eq!(updates[1]["ts"], json!(second_ts));
        assert!(
            updates[1]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("Rejected by")
        );
        daemon.stop();
        setup.db.drop_database().await;
    }
}
