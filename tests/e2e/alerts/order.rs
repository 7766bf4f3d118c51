//! Notifications of one alert to one notifier arrive in order: a webhook peer refuses the
//! alert's `fired` (503) until the alert has resolved and one more `fired` attempt came after
//! that, so the `resolved` is owed while its `fired` waits out a retry; the peer must still
//! receive `fired` before `resolved`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;

use super::super::harness::{Backend, Daemon, TestDb, config, event, serve_local, unique};
use super::{QUIET_RULE, alerts, env, eventually, notifiers, secret, verify};

/// What the peer saw, in arrival order: each request's `type` and whether it was accepted.
#[derive(Debug, Default)]
struct Peer {
    seen: Mutex<Vec<(String, bool)>>,
    hold_fired: AtomicBool,
}

impl Peer {
    fn accepted(&self) -> Vec<String> {
        let seen = self.seen.lock().expect("seen");
        seen.iter()
            .filter(|(_, accepted)| *accepted)
            .map(|(kind, _)| kind.clone())
            .collect()
    }

    fn refused_fired(&self) -> usize {
        let seen = self.seen.lock().expect("seen");
        seen.iter()
            .filter(|(kind, accepted)| !accepted && kind == "switchyard.alert.fired")
            .count()
    }
}

async fn hook(
    State(peer): State<Arc<Peer>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    if !verify(&headers, &body) {
        return StatusCode::UNAUTHORIZED;
    }
    let body: Value = serde_json::from_slice(&body).expect("JSON body");
    let kind = body["type"].as_str().unwrap_or_default().to_owned();
    let refuse = kind == "switchyard.alert.fired" && peer.hold_fired.load(Ordering::SeqCst);
    peer.seen.lock().expect("seen").push((kind, !refuse));
    if refuse {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

#[tokio::test]
async fn a_resolved_notification_reaches_a_webhook_after_its_fired_one_that_was_retried() {
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let peer = Arc::new(Peer {
        hold_fired: AtomicBool::new(true),
        ..Peer::default()
    });
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .with_state(peer.clone());
    let (addr, _server) = serve_local(app).await;
    let secret = secret();
    let env = env(&secret);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Only the webhook is told (the Slack notifier is configured but no rule names it).
    let rule = QUIET_RULE.replace(r#"["ops-webhook", "ops-slack"]"#, r#"["ops-webhook"]"#);
    let daemon = Daemon::start(
        &db,
        &config(
            &db,
            &format!(
                "{}{rule}",
                notifiers(&format!("http://{addr}/hook"), "http://127.0.0.1:9/api/")
            ),
        ),
        &env,
    )
    .await;
    let (status, _) = daemon
        .post_event(
            &unique("order"),
            &event("web_form", "ticket.created", "acme", "t-1"),
        )
        .await;
    assert!(status.is_success());

    // Quiet for 2 s: the alert fires and the peer refuses its `fired`.
    eventually("a refused `fired`", Duration::from_secs(30), || {
        peer.refused_fired() >= 1
    })
    .await;
    // A delivery resolves the alert while the `fired` waits out its retry.
    let (status, _) = daemon
        .post_event(
            &unique("order"),
            &event("web_form", "ticket.created", "acme", "t-2"),
        )
        .await;
    assert!(status.is_success());
    let started = Instant::now();
    loop {
        let listed = alerts(&daemon).await;
        if listed.iter().any(|a| a["state"] == "resolved") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the alert did not resolve: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The `resolved` is owed now; one more `fired` attempt is refused after that, so a
    // notifier that did not keep the order would have sent the `resolved` meanwhile.
    let refused = peer.refused_fired();
    eventually("another refused `fired`", Duration::from_secs(60), || {
        peer.refused_fired() > refused
    })
    .await;
    peer.hold_fired.store(false, Ordering::SeqCst);
    eventually(
        "both notifications accepted",
        Duration::from_secs(60),
        || peer.accepted().len() >= 2,
    )
    .await;
    assert_eq!(
        peer.accepted(),
        ["switchyard.alert.fired", "switchyard.alert.resolved"],
        "{:?}",
        peer.seen.lock().expect("seen")
    );
    daemon.stop();
}
