//! The poller against a real Dovecot: each test owns a mailbox (and source name), so they run
//! in parallel; the one that restarts the server runs alone (`harness::exclusive`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use switchyard_email::{AfterIntake, Security};

use super::harness::{
    self, Delivery, Store, TestSink, append, client, config, message, messages, options, recreate,
    start, wait_until,
};

const WAIT: Duration = Duration::from_secs(15);

fn uids(deliveries: &[Delivery]) -> Vec<u32> {
    deliveries.iter().map(|d| d.uid).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delivers_new_mail_in_uid_order_exactly_once() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "order").await;
    for n in 1..=5 {
        append(&mut imap, "order", &message("order", n)).await;
    }

    let sink = TestSink::new();
    let poller = start(
        config(&server, "order", "order"),
        harness::PASSWORD,
        &sink,
        options(),
    );
    wait_until("5 delivered", WAIT, || sink.delivered().len() == 5).await;
    // New mail while the poller waits in IDLE wakes it up.
    for n in 6..=8 {
        append(&mut imap, "order", &message("order", n)).await;
    }
    wait_until("8 delivered", WAIT, || sink.delivered().len() == 8).await;
    // A few more cycles (lease renewals, IDLE re-issues) repeat nothing.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let status = sink.status();
    poller.stop().await;

    let delivered = sink.delivered();
    assert_eq!(uids(&delivered), (1..=8).collect::<Vec<_>>());
    assert!(sink.duplicates().is_empty(), "{:?}", sink.duplicates());
    assert!(delivered.iter().all(|d| d.outcome == "route"));
    assert_eq!(delivered[0].delivery_id, "order-1@test.example");
    assert_eq!(delivered[7].subject.as_deref(), Some("order message 8"));
    assert!(
        status.connected && status.holds_lease && status.idle,
        "{status:?}"
    );
    assert_eq!(status.consecutive_failures, 0);
    assert!(status.last_successful_poll.is_some());
    // After shutdown the status says so, and the lease is free for another replica.
    let last = sink.status();
    assert!(!last.connected && !last.holds_lease, "{last:?}");
    // Fetching used BODY.PEEK[]: nothing was marked \Seen with after_intake = none.
    let flags = messages(&mut imap, "order").await;
    assert!(flags.iter().all(|(_, f)| f.is_empty()), "{flags:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_without_idle_too() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "polling").await;
    append(&mut imap, "polling", &message("polling", 1)).await;

    let mut config = config(&server, "polling", "polling");
    config.idle = false;
    let sink = TestSink::new();
    let poller = start(config, harness::PASSWORD, &sink, options());
    wait_until("1 delivered", WAIT, || sink.delivered().len() == 1).await;
    append(&mut imap, "polling", &message("polling", 2)).await;
    wait_until("2 delivered", WAIT, || sink.delivered().len() == 2).await;
    assert!(!sink.status().idle);
    poller.stop().await;
    assert_eq!(uids(&sink.delivered()), vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_stream_keeps_the_cursor_no_loss_no_repeat() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "restart").await;
    for n in 1..=6 {
        append(&mut imap, "restart", &message("restart", n)).await;
    }
    let config = config(&server, "restart", "restart");

    // Deliveries wait until released, so the stop lands in the middle of the stream.
    let sink = TestSink::new();
    sink.hold.send_replace(true);
    let poller = start(config.clone(), harness::PASSWORD, &sink, options());
    wait_until("the first delivery started", WAIT, || {
        sink.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let stopping = tokio::spawn(poller.stop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    sink.hold.send_replace(false);
    stopping.await.unwrap();
    let first_run = sink.delivered().len();
    assert!(
        (1..6).contains(&first_run),
        "stopped mid-stream, got {first_run}"
    );

    // Mail that arrives while no poller runs is not lost.
    append(&mut imap, "restart", &message("restart", 7)).await;
    let poller = start(config, harness::PASSWORD, &sink, options());
    wait_until("7 delivered", WAIT, || sink.delivered().len() == 7).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    poller.stop().await;
    assert_eq!(uids(&sink.delivered()), (1..=7).collect::<Vec<_>>());
    assert!(sink.duplicates().is_empty(), "{:?}", sink.duplicates());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_mailbox_is_rescanned_and_dedup_stops_repeats() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "validity").await;
    for n in 1..=2 {
        append(&mut imap, "validity", &message("validity", n)).await;
    }
    let sink = TestSink::new();
    let poller = start(
        config(&server, "validity", "validity"),
        harness::PASSWORD,
        &sink,
        options(),
    );
    wait_until("2 delivered", WAIT, || sink.delivered().len() == 2).await;
    let old_validity = sink.delivered()[0].uidvalidity;

    // Recreated under the running poller: same messages again, plus a new one.
    recreate(&mut imap, "validity").await;
    for n in 1..=3 {
        append(&mut imap, "validity", &message("validity", n)).await;
    }
    wait_until("the new message delivered", WAIT, || {
        sink.delivered().len() == 3
    })
    .await;
    wait_until("the rescan saw the old two", WAIT, || {
        sink.duplicates().len() == 2
    })
    .await;
    poller.stop().await;

    let delivered = sink.delivered();
    assert_eq!(delivered[2].delivery_id, "validity-3@test.example");
    assert_ne!(delivered[2].uidvalidity, old_validity);
    let repeats: Vec<_> = sink.duplicates().iter().map(|d| d.uid).collect();
    assert_eq!(repeats, vec![1, 2], "rescanned from UID 1 in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_message_does_not_block_the_ones_after_it() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "bad").await;
    let garbage: Vec<u8> = (0..400u32).map(|i| (i * 37 % 251) as u8).collect();
    append(&mut imap, "bad", &message("bad", 1)).await;
    append(&mut imap, "bad", &garbage).await;
    append(
        &mut imap,
        "bad",
        b"Subject: nothing\r\nX-Mailer: broken\r\n\r\n",
    )
    .await;
    append(&mut imap, "bad", &message("bad", 4)).await;

    let sink = TestSink::new();
    let poller = start(
        config(&server, "bad", "bad"),
        harness::PASSWORD,
        &sink,
        options(),
    );
    wait_until("4 delivered", WAIT, || sink.delivered().len() == 4).await;
    poller.stop().await;

    let outcomes: Vec<_> = sink
        .delivered()
        .iter()
        .map(|d| (d.uid, d.outcome.clone()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (1, "route".to_owned()),
            (2, "invalid:no_headers".to_owned()),
            (3, "invalid:no_sender_no_body".to_owned()),
            (4, "route".to_owned()),
        ]
    );
    assert_eq!(sink.status().consecutive_failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seen_is_set_only_after_the_delivery_is_recorded() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "seen").await;
    append(&mut imap, "seen", &message("seen", 1)).await;

    let mut config = config(&server, "seen", "seen");
    config.after_intake = AfterIntake::Seen;
    let sink = TestSink::new();
    // The store fails once: the message must stay unseen, then be delivered once.
    sink.fail_deliveries.store(1, Ordering::SeqCst);
    sink.hold.send_replace(true);
    let poller = start(config, harness::PASSWORD, &sink, options());
    wait_until("a delivery started", WAIT, || {
        sink.entered.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert_eq!(messages(&mut imap, "seen").await, vec![(1, vec![])]);
    sink.hold.send_replace(false);
    wait_until("the failure reported", WAIT, || {
        sink.any_status(|s| s.consecutive_failures > 0)
    })
    .await;
    wait_until("1 delivered", WAIT, || sink.delivered().len() == 1).await;

    let mut flags = Vec::new();
    for _ in 0..100 {
        flags = messages(&mut imap, "seen").await;
        if flags[0].1.iter().any(|f| f == "Seen") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    poller.stop().await;
    assert_eq!(flags, vec![(1, vec!["Seen".to_owned()])]);
    assert!(sink.duplicates().is_empty());
    assert!(
        sink.entered.load(Ordering::SeqCst) >= 2,
        "retried after the failure"
    );
    let error = sink
        .statuses
        .lock()
        .unwrap()
        .iter()
        .find_map(|s| s.last_error.clone())
        .unwrap();
    assert!(error.contains("the test store is down"), "{error}");
}

async fn moves_after_delivery(mailbox: &str, use_move: bool) {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    let done = format!("{mailbox}-done");
    recreate(&mut imap, mailbox).await;
    let _ = imap.delete(&done).await; // the poller creates it
    for n in 1..=3 {
        append(&mut imap, mailbox, &message(mailbox, n)).await;
    }
    let mut config = config(&server, mailbox, mailbox);
    config.after_intake = AfterIntake::Move(done.clone());
    config.validate().unwrap();
    let mut options = options();
    options.use_move = use_move;
    let sink = TestSink::new();
    let poller = start(config, harness::PASSWORD, &sink, options);
    wait_until("3 delivered", WAIT, || sink.delivered().len() == 3).await;
    let mut left = Vec::new();
    for _ in 0..100 {
        left = messages(&mut imap, mailbox).await;
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    poller.stop().await;
    assert!(left.is_empty(), "still in {mailbox}: {left:?}");
    assert_eq!(messages(&mut imap, &done).await.len(), 3);
    assert_eq!(uids(&sink.delivered()), vec![1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_moves_delivered_mail_to_the_folder() {
    moves_after_delivery("moving", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_without_the_move_extension_copies_and_expunges() {
    moves_after_delivery("copying", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_lease_holder_polls_and_another_replica_takes_over() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "lease").await;
    for n in 1..=3 {
        append(&mut imap, "lease", &message("lease", n)).await;
    }
    let config = config(&server, "lease", "lease");
    let store = Arc::new(Store::default());
    let a = TestSink::replica(store.clone(), "replica-a");
    let b = TestSink::replica(store.clone(), "replica-b");
    let poller_a = start(config.clone(), harness::PASSWORD, &a, options());
    wait_until("a holds the lease", WAIT, || a.status().holds_lease).await;
    let poller_b = start(config, harness::PASSWORD, &b, options());
    wait_until("3 delivered", WAIT, || a.delivered().len() == 3).await;
    wait_until("b stands by", WAIT, || {
        !b.statuses.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let standby = b.status();
    assert!(!standby.holds_lease && !standby.connected, "{standby:?}");
    assert_eq!(
        standby.consecutive_failures, 0,
        "standing by is not a failure"
    );

    // A stops and releases the lease; B takes over from the shared cursor.
    poller_a.stop().await;
    wait_until("b holds the lease", WAIT, || b.status().holds_lease).await;
    append(&mut imap, "lease", &message("lease", 4)).await;
    wait_until("4 delivered", WAIT, || b.delivered().len() == 4).await;
    poller_b.stop().await;

    let owners: Vec<_> = b
        .delivered()
        .iter()
        .map(|d| (d.uid, d.owner.clone()))
        .collect();
    assert_eq!(
        owners,
        vec![
            (1, "replica-a".to_owned()),
            (2, "replica-a".to_owned()),
            (3, "replica-a".to_owned()),
            (4, "replica-b".to_owned()),
        ]
    );
    assert!(b.duplicates().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_and_tls_failures_are_reported_and_retried_until_shutdown() {
    let Some(server) = harness::server() else {
        return;
    };
    let _shared = harness::shared().await;

    let sink = TestSink::new();
    let poller = start(
        config(&server, "badlogin", "INBOX"),
        "wrong-password",
        &sink,
        options(),
    );
    wait_until("3 failures", WAIT, || {
        sink.status().consecutive_failures >= 3
    })
    .await;
    poller.stop().await;
    let status = sink.status();
    let error = status.last_error.unwrap();
    assert!(
        error.contains("login as `support@example.com` failed"),
        "{error}"
    );
    assert!(!status.connected);

    // TLS spoken to a plain-text port: the handshake fails, and is retried.
    let mut config = config(&server, "badtls", "INBOX");
    config.security = Security::Tls;
    let sink = TestSink::new();
    let poller = start(config, harness::PASSWORD, &sink, options());
    wait_until("2 failures", WAIT, || {
        sink.status().consecutive_failures >= 2
    })
    .await;
    poller.stop().await;
    let error = sink.status().last_error.unwrap();
    assert!(
        error.contains("TLS handshake with 127.0.0.1 failed"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovers_after_the_server_restarts() {
    let Some(server) = harness::server() else {
        return;
    };
    let _alone = harness::exclusive().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "outage").await;
    append(&mut imap, "outage", &message("outage", 1)).await;
    drop(imap);

    let sink = TestSink::new();
    let poller = start(
        config(&server, "outage", "outage"),
        harness::PASSWORD,
        &sink,
        options(),
    );
    wait_until("1 delivered", WAIT, || sink.delivered().len() == 1).await;

    harness::dovecot("stop");
    // Whatever happens next, the other tests need the server back.
    let _restart = harness::StartOnDrop;
    wait_until("failures reported", WAIT, || {
        let s = sink.status();
        s.consecutive_failures >= 2 && s.last_error.is_some() && !s.connected
    })
    .await;
    harness::dovecot("start");

    let mut imap = client(&server).await;
    append(&mut imap, "outage", &message("outage", 2)).await;
    wait_until("2 delivered", WAIT, || sink.delivered().len() == 2).await;
    wait_until("healthy again", WAIT, || {
        let s = sink.status();
        s.consecutive_failures == 0 && s.connected
    })
    .await;
    poller.stop().await;
    assert_eq!(uids(&sink.delivered()), vec![1, 2]);
    assert!(sink.duplicates().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_starttls_deliver_with_a_private_ca() {
    let Some(server) = harness::server() else {
        return;
    };
    let Some((tls_server, ca)) = harness::tls_server() else {
        return;
    };
    let _shared = harness::shared().await;
    let mut imap = client(&server).await;
    recreate(&mut imap, "tls").await;
    append(&mut imap, "tls", &message("tls", 1)).await;

    // TLS from the first byte, to an IP address (the certificate names 127.0.0.1).
    let mut tls = config(&tls_server, "tls", "tls");
    tls.security = Security::Tls;
    tls.tls_ca_file = Some(ca.clone());
    tls.validate().unwrap();
    let sink = TestSink::new();
    let poller = start(tls, harness::PASSWORD, &sink, options());
    wait_until("delivered over TLS", WAIT, || sink.delivered().len() == 1).await;
    poller.stop().await;

    // STARTTLS on the plain port, to a host name (the certificate names localhost).
    append(&mut imap, "tls", &message("tls", 2)).await;
    let mut starttls = config(&server, "tls", "tls");
    starttls.host = "localhost".into();
    starttls.security = Security::Starttls;
    starttls.tls_ca_file = Some(ca);
    starttls.validate().unwrap();
    let poller = start(starttls, harness::PASSWORD, &sink, options());
    wait_until("delivered after STARTTLS", WAIT, || {
        sink.delivered().len() == 2
    })
    .await;
    poller.stop().await;
    assert_eq!(uids(&sink.delivered()), vec![1, 2]);
    assert!(
        sink.statuses
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.last_error.is_none())
    );

    // Without the private CA the certificate is not trusted: a reported failure.
    let mut untrusted = config(&tls_server, "tls-untrusted", "tls");
    untrusted.security = Security::Tls;
    let sink = TestSink::new();
    let poller = start(untrusted, harness::PASSWORD, &sink, options());
    wait_until("the failure reported", WAIT, || {
        sink.status().consecutive_failures >= 1
    })
    .await;
    poller.stop().await;
    let error = sink.status().last_error.unwrap();
    assert!(
        error.contains("TLS handshake with 127.0.0.1 failed"),
        "{error}"
    );
    assert!(error.contains("UnknownIssuer"), "{error}");
    assert!(sink.delivered().is_empty());
}
