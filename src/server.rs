//! Serving HTTP/1.1 with the limits a daemon reachable by anyone with a TCP connection needs:
//! a header read timeout (which also closes idle keep-alive connections), a cap on open
//! connections (excess ones are closed at once, with a log line), the soft open-files limit
//! raised to the hard one, and a shutdown that drains for at most `shutdown_timeout`, then
//! closes what is left.
//!
//! Invariant: no client can hold a connection, a file descriptor or a shutdown open for longer
//! than these bounds, whatever it sends or does not send.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The bounds one server keeps.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest a client may take to send a request's headers, and longest a keep-alive
    /// connection may sit idle.
    pub header_read_timeout: Duration,
    /// Most connections open at once.
    pub max_connections: usize,
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

/// Serves `app` on `listener` until `shutdown` completes, then drains within the limits.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let service = TowerToHyperService::new(app);
    let mut last_refusal_log: Option<tokio::time::Instant> = None;
    let mut refused_since_log = 0u64;
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
            refused_since_log += 1;
            let now = tokio::time::Instant::now();
            if last_refusal_log.is_none_or(|at| now - at > Duration::from_secs(10)) {
                tracing::warn!(
                    max_connections = limits.max_connections,
                    refused = refused_since_log,
                    "connection cap reached: closing new connections until some end"
                );
                last_refusal_log = Some(now);
                refused_since_log = 0;
            }
            drop(stream);
            continue;
        };
        // Answers are small and go out whole: never hold one back waiting for an ACK (Nagle).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
        }
        // Handlers see the client's address as axum's `ConnectInfo`.
        let service = service.clone();
        let service = hyper::service::service_fn(move |mut request| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            hyper::service::Service::call(&service, request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
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
