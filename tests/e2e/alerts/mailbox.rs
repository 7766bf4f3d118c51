//! `mailbox_stalled` end to end against a real Dovecot (`.ci/dovecot.sh`): the daemon reaches
//! it through a local TCP gate the test opens and closes. While the gate refuses connections
//! the poller cannot connect and the alert fires (one signed webhook); once the gate lets
//! connections through, the poller signs in and polls again and the alert resolves.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use super::super::email::{fresh_mailbox, imap_server, shared};
use super::super::harness::{Backend, Daemon, TestDb, config};
use super::replicas::wait_observers;
use super::{alerts, env, eventually, notifiers, peers, secret};

/// A TCP gate to `upstream`: closed (each connection is accepted and dropped at once) until
/// the returned switch is set.
async fn gate(upstream: String) -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let open = Arc::new(AtomicBool::new(false));
    let switch = open.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            if !switch.load(Ordering::SeqCst) {
                drop(client);
                continue;
            }
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    (addr, open)
}

/// The state of the alert of `rule`, once it is `state` (or fails after `timeout`).
async fn wait_state(daemon: &Daemon, rule: &str, state: &str, timeout: Duration) {
    let started = Instant::now();
    loop {
        let listed = alerts(daemon).await;
        if listed
            .iter()
            .any(|a| a["rule"] == rule && a["state"] == state)
        {
            return;
        }
        assert!(
            started.elapsed() < timeout,
            "{rule} not {state}: {listed:?}; readyz: {}",
            daemon.get("/readyz").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_stalled_mailbox_alert_fires_while_dovecot_is_unreachable_and_resolves_once_it_polls_again()
 {
    let Some(imap) = imap_server() else {
        return;
    };
    let _server = shared().await;
    let (source, mailbox, _client) = fresh_mailbox(&imap).await;
    let (addr, open) = gate(imap.clone()).await;
    let db = TestDb::create(Backend::Sqlite).await.expect("sqlite");
    let (peers, hook, slack) = peers().await;
    let secret = secret();
    let mut env = env(&secret).to_vec();
    env.push(("INBOX_PASSWORD", "secret".to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let rules = format!(
        r#"
[[source]]
kind = "email"
name = "{source}"
tenant = "acme"
host = "127.0.0.1"
port = {port}
security = "plain"
username = "support@example.com"
password_env = "INBOX_PASSWORD"
mailbox = "{mailbox}"
poll_interval = "200ms"
idle = false

[[alert]]
name = "inbox-stalled"
kind = "mailbox_stalled"
source = "{source}"
max_age = "2s"
notify = ["ops-webhook"]
"#,
        port = addr.port()
    );
    let daemon = Daemon::start(
        &db,
        &config(&db, &format!("{}{rules}", notifiers(&hook, &slack))),
        &env,
    )
    .await;

    // The gate is closed: no session, no successful poll for over 2 s.
    wait_state(&daemon, "inbox-stalled", "firing", Duration::from_secs(30)).await;
    let listed = alerts(&daemon).await;
    let alert = listed
        .iter()
        .find(|a| a["rule"] == "inbox-stalled")
        .expect("the alert");
    assert_eq!(alert["scope"], format!("source={source}"), "{alert}");
    assert!(
        alert["summary"]
            .as_str()
            .is_some_and(|s| s.contains(&source) && s.contains("no successful poll")),
        "{alert}"
    );
    assert_eq!(
        alert["numbers"]["last_successful_poll"],
        serde_json::Value::Null
    );
    // Observed by the replica holding the poller lease.
    assert_eq!(wait_observers(&daemon, "inbox-stalled", 1).await.len(), 1);
    eventually("the firing's webhook", Duration::from_secs(20), || {
        !peers.seen.lock().expect("seen").webhooks.is_empty()
    })
    .await;

    // Dovecot is reachable again: after its backoff the poller signs in, polls, and the
    // alert resolves.
    open.store(true, Ordering::SeqCst);
    wait_state(
        &daemon,
        "inbox-stalled",
        "resolved",
        Duration::from_secs(90),
    )
    .await;
    eventually("the resolve's webhook", Duration::from_secs(20), || {
        peers.seen.lock().expect("seen").webhooks.len() >= 2
    })
    .await;
    // It keeps polling every 200 ms: the alert stays resolved.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let listed = alerts(&daemon).await;
    let alert = listed
        .iter()
        .find(|a| a["rule"] == "inbox-stalled")
        .expect("the alert");
    assert_eq!(alert["state"], "resolved", "{listed:?}");
    assert_eq!(alert["episode"], 1, "{listed:?}");
    let seen = peers.seen.lock().expect("seen");
    assert_eq!(seen.webhooks.len(), 2, "{:?}", seen.webhooks);
    assert_eq!(seen.webhooks[0]["data"]["kind"], "mailbox_stalled");
    assert_eq!(seen.webhooks[1]["type"], "switchyard.alert.resolved");
    drop(seen);
    daemon.stop();
}
