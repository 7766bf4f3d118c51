//! The systemd notify protocol (`Type=notify`), with a datagram socket standing in for systemd:
//! READY=1 only once the daemon answers, RELOADING=1 (with MONOTONIC_USEC) then READY=1 around
//! every SIGHUP, refused or not, and STOPPING=1 on SIGTERM.

use std::time::Duration;

use tokio::net::UnixDatagram;

use super::harness::{Backend, Daemon, TestDb, config};

/// Longest any one notification may take to arrive (startup includes migrations).
const WAIT: Duration = Duration::from_secs(60);

/// The systemd side of `NOTIFY_SOCKET`: every datagram received, in order.
struct Manager {
    socket: UnixDatagram,
    seen: Vec<String>,
}

impl Manager {
    /// The next datagram, as text; panics after `WAIT` naming what was awaited.
    async fn next(&mut self, awaited: &str, daemon: Option<&Daemon>) -> String {
        let mut buf = vec![0u8; 4096];
        let len = match tokio::time::timeout(WAIT, self.socket.recv(&mut buf)).await {
            Ok(Ok(len)) => len,
            Ok(Err(error)) => {
                panic!("cannot read NOTIFY_SOCKET while waiting for {awaited}: {error}")
            }
            Err(_) => panic!(
                "no notification within {WAIT:?} while waiting for {awaited}; so far {:?}; logs:\n{}",
                self.seen,
                daemon.map(Daemon::logs).unwrap_or_default()
            ),
        };
        let text = String::from_utf8_lossy(&buf[..len]).into_owned();
        self.seen.push(text.clone());
        text
    }

    /// Reads datagrams until one carries `state` (`READY=1`, ...) and returns it.
    async fn until(&mut self, state: &str, daemon: Option<&Daemon>) -> String {
        loop {
            let datagram = self.next(state, daemon).await;
            if assignments(&datagram).any(|line| line == state) {
                return datagram;
            }
        }
    }
}

fn assignments(datagram: &str) -> impl Iterator<Item = &str> {
    datagram.lines().filter(|line| !line.is_empty())
}

/// The value of `KEY=` in a datagram.
fn value<'a>(datagram: &'a str, key: &str) -> Option<&'a str> {
    assignments(datagram).find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
}

/// CLOCK_MONOTONIC now, in µs: the clock MONOTONIC_USEC must come from.
fn monotonic_usec() -> i128 {
    match sd_notify::NotifyState::monotonic_usec_now() {
        Ok(sd_notify::NotifyState::MonotonicUsec(usec)) => usec,
        other => panic!("cannot read the monotonic clock: {other:?}"),
    }
}

#[tokio::test]
async fn the_daemon_speaks_the_notify_protocol_through_reload_and_stop() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let socket_dir = tempfile::tempdir().expect("temp dir");
    let socket_path = socket_dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).expect("bind NOTIFY_SOCKET");
    socket.set_nonblocking(true).expect("nonblocking socket");
    let mut manager = Manager {
        socket: UnixDatagram::from_std(socket).expect("tokio socket"),
        seen: Vec::new(),
    };
    let text = config(&db, "");

    // Start the daemon beside the socket reader, so READY=1 is seen as soon as it is sent,
    // not after the harness has found the "listening" log line.
    let starting = {
        let text = text.clone();
        let path = socket_path.to_str().expect("utf-8 socket path").to_owned();
        tokio::spawn(async move {
            let daemon = Daemon::start(&db, &text, &[("NOTIFY_SOCKET", &path)]).await;
            (db, daemon)
        })
    };
    let ready = manager.until("READY=1", None).await;
    // Ready means serving: the address in the status answers at once, migrations are done.
    let status =
        value(&ready, "STATUS").unwrap_or_else(|| panic!("READY=1 without STATUS: {ready:?}"));
    let addr = status
        .strip_prefix("Serving on ")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("the READY=1 status does not name the address: {status:?}"));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .expect("client");
    let health = client
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap_or_else(|error| panic!("READY=1 was sent but /healthz does not answer: {error}"));
    assert_eq!(health.status(), reqwest::StatusCode::OK);
    let (_db, daemon) = tokio::time::timeout(WAIT, starting)
        .await
        .expect("the harness saw the daemon start")
        .expect("the start task");
    assert_eq!(addr, daemon.addr.to_string(), "READY=1 names the listener");
    assert!(
        status.contains("config revision "),
        "the status names the revision: {status:?}"
    );

    // SIGHUP with the same file: RELOADING=1 stamped with the monotonic clock, then READY=1.
    let before = monotonic_usec();
    daemon.reload(&text);
    let reloading = manager.until("RELOADING=1", Some(&daemon)).await;
    let after = monotonic_usec();
    let stamp: i128 = value(&reloading, "MONOTONIC_USEC")
        .unwrap_or_else(|| panic!("RELOADING=1 without MONOTONIC_USEC: {reloading:?}"))
        .parse()
        .unwrap_or_else(|error| panic!("MONOTONIC_USEC is not a number ({error}): {reloading:?}"));
    assert!(
        (before..=after).contains(&stamp),
        "MONOTONIC_USEC={stamp} is CLOCK_MONOTONIC at the reload (between {before} and {after})"
    );
    let reloaded = manager
        .next("READY=1 after the reload", Some(&daemon))
        .await;
    assert!(
        assignments(&reloaded).any(|line| line == "READY=1"),
        "READY=1 follows RELOADING=1 at once: {reloaded:?}"
    );
    let status = value(&reloaded, "STATUS").unwrap_or_default();
    assert!(status.contains("(reloaded)"), "{status:?}");
    assert!(!status.contains("REFUSED"), "{status:?}");

    // SIGHUP with a broken file: refused, but the daemon is ready again and says why.
    daemon.reload(&format!("{text}\nthis is = not [ toml\n"));
    let reloading = manager.until("RELOADING=1", Some(&daemon)).await;
    assert!(
        value(&reloading, "MONOTONIC_USEC").is_some(),
        "{reloading:?}"
    );
    let refused = manager
        .next("READY=1 after a refused reload", Some(&daemon))
        .await;
    assert!(
        assignments(&refused).any(|line| line == "READY=1"),
        "READY=1 follows a refused reload: {refused:?}"
    );
    let status = value(&refused, "STATUS").unwrap_or_default();
    assert!(
        status.contains("REFUSED") && status.contains("old revision stays in force"),
        "the status names the refusal: {status:?}"
    );
    assert_eq!(
        assignments(&refused).count(),
        2,
        "the error text cannot add assignments: {refused:?}"
    );

    // SIGTERM: STOPPING=1, and it is the last word.
    daemon.stop();
    manager.until("STOPPING=1", None).await;
    let states: Vec<&str> = manager
        .seen
        .iter()
        .flat_map(|datagram| assignments(datagram))
        .filter(|line| matches!(*line, "READY=1" | "RELOADING=1" | "STOPPING=1"))
        .collect();
    assert_eq!(
        states,
        [
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "RELOADING=1",
            "READY=1",
            "STOPPING=1"
        ],
        "every notification, in order: {:?}",
        manager.seen
    );
}
