//! Serving HTTP/1.1 with the limits a daemon reachable by anyone with a TCP connection needs:
//! a header read timeout (which also closes idle keep-alive connections), a cap on open
//! connections and a smaller one per client address (excess ones are closed at once, with a
//! log line), the soft open-files limit raised to the hard one, and a shutdown that drains for
//! at most `shutdown_timeout`, then closes what is left. Every request carries its peer's
//! address (`ConnectInfo<SocketAddr>`), for limits kept per client.
//!
//! Invariant: no client can hold a connection, a file descriptor or a shutdown open for longer
//! than these bounds, whatever it sends or does not send, and no one client address can hold
//! every connection.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_http::add_extension::AddExtension;

/// The bounds one server keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest a client may take to send a request's headers, and longest a keep-alive
    /// connection may sit idle.
    pub header_read_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one client address ([`client_of`]).
    pub max_connections_per_client: usize,
    /// Longest shutdown waits for open requests before closing their connections.
    pub shutdown_timeout: Duration,
}

/// File descriptors kept free for the database pool, mailbox sessions, targets and logs.
const RESERVED_FDS: u64 = 256;

/// Raises the soft open-files limit to the hard one and returns the connection cap that fits
/// under it (at most `wanted`).
pub fn fit_connection_cap(wanted: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "cannot raise the open-files limit");
            return wanted;
        }
    };
    let fits = usize::try_from(limit.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
    if fits < wanted {
        tracing::warn!(
            open_files_limit = limit,
            wanted,
            cap = fits,
            "the open-files limit is lower than server.max_connections needs; capping connections lower"
        );
    }
    wanted.min(fits.max(1))
}

/// The client a peer address stands for, for limits kept per client: an IPv4 address (an
/// IPv4-mapped IPv6 one included) is itself; an IPv6 address stands for its /64, which one
/// subscriber usually holds whole, so hopping across it gains nothing.
pub fn client_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        },
    }
}

/// Open connections per client, within `max_connections_per_client`.
#[derive(Debug)]
struct PerClient {
    open: Mutex<HashMap<IpAddr, usize>>,
    cap: usize,
}

/// One connection counted against its client; uncounted when dropped.
#[derive(Debug)]
struct ClientSlot {
    clients: Arc<PerClient>,
    client: IpAddr,
}

impl PerClient {
    /// A slot for one more connection of `client`, unless it holds its cap already.
    fn admit(self: &Arc<Self>, client: IpAddr) -> Option<ClientSlot> {
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(client).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            clients: self.clone(),
            client,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self
            .clients
            .open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// Keeps the warning about refused connections to one line per ten seconds, with the count of
/// refusals since the last one.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<tokio::time::Instant>,
    since: u64,
}

impl RefusalLog {
    /// Counts one refusal; the count to log when a line is due.
    fn due(&mut self) -> Option<u64> {
        self.since += 1;
        let now = tokio::time::Instant::now();
        if self
            .last
            .is_some_and(|at| now - at <= Duration::from_secs(10))
        {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.since))
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then drains within the limits.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let clients = Arc::new(PerClient {
        open: Mutex::default(),
        cap: limits.max_connections_per_client.max(1),
    });
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let mut cap_log = RefusalLog::default();
    let mut client_cap_log = RefusalLog::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, most likely: back off instead of spinning.
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(refused) = cap_log.due() {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    refused,
                    "connection cap reached: closing new connections until some end"
                );
            }
            drop(stream);
            continue;
        };
        let client = client_of(peer.ip());
        let Some(client_slot) = clients.admit(client) else {
            if let Some(refused) = client_cap_log.due() {
                tracing::warn!(
                    %client,
                    max_connections_per_client = clients.cap,
                    refused,
                    "connection cap reached for one client address (server.client_share): \
                     closing its new connections until some of its own end"
                );
            }
            drop(stream);
            continue;
        };
        // Answers are small and go out whole: never hold one back waiting for an ACK (Nagle).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
        }
        // What `into_make_service_with_connect_info` does for `axum::serve`.
        let service = TowerToHyperService::new(AddExtension::new(app.clone(), ConnectInfo(peer)));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
            drop(client_slot);
            drop(slot);
        });
    }
    drop(listener);
    let open = limits.max_connections - slots.available_permits();
    tracing::info!(
        open_connections = open,
        timeout_secs = limits.shutdown_timeout.as_secs(),
        "stopped accepting; draining open requests"
    );
    if tokio::time::timeout(limits.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        let left = limits.max_connections - slots.available_permits();
        tracing::warn!(
            open_connections = left,
            "server.shutdown_timeout passed; closing the connections that are left"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_is_its_ipv4_address_or_its_ipv6_slash_64() {
        let client = |text: &str| client_of(text.parse().expect("an address"));
        assert_eq!(client("203.0.113.7"), client("203.0.113.7"));
        assert_ne!(client("203.0.113.7"), client("203.0.113.8"));
        assert_eq!(client("::ffff:203.0.113.7"), client("203.0.113.7"));
        assert_eq!(
            client("2001:db8:1:2:aaaa::1"),
            client("2001:db8:1:2:ffff::9")
        );
        assert_ne!(client("2001:db8:1:2::1"), client("2001:db8:1:3::1"));
    }

    #[test]
    fn one_client_holds_at_most_its_cap_and_gets_slots_back() {
        let clients = Arc::new(PerClient {
            open: Mutex::default(),
            cap: 2,
        });
        let a: IpAddr = "192.0.2.1".parse().expect("an address");
        let b: IpAddr = "192.0.2.2".parse().expect("an address");
        let first = clients.admit(a).expect("first");
        let _second = clients.admit(a).expect("second");
        assert!(clients.admit(a).is_none(), "a third of the same client");
        assert!(clients.admit(b).is_some(), "another client is not held up");
        drop(first);
        assert!(
            clients.admit(a).is_some(),
            "a slot comes back when its connection ends"
        );
    }
}
