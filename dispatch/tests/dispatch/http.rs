//! The http transport against a real axum server on 127.0.0.1:0.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::StreamExt as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use switchyard_dispatch::{
    AttemptResult, HttpTarget, HttpTransport, Outbound, Rejection, RetryHint, SigningKey, Transport,
};

const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
const SECOND_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BODY: &[u8] = br#"{"specversion":"1.0","id":"dsp_1"}"#;

#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    body: Vec<u8>,
}

#[derive(Debug, Default)]
struct Server {
    seen: Mutex<Vec<Seen>>,
    ok_hits: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

async fn ok(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    server.ok_hits.fetch_add(1, Ordering::SeqCst);
    server.seen.lock().unwrap().push(Seen {
        headers,
        body: body.to_vec(),
    });
    StatusCode::OK
}

async fn status(Path(code): Path<u16>) -> Response {
    let status = StatusCode::from_u16(code).unwrap();
    match code {
        429 => (status, [("retry-after", "7")], "slow down").into_response(),
        302 => (status, [("location", "/ok")], "").into_response(),
        _ => (status, format!("status {code}")).into_response(),
    }
}

async fn slow() -> StatusCode {
    tokio::time::sleep(Duration::from_secs(5)).await;
    StatusCode::OK
}

/// 200 with the first bytes of a body whose rest never comes.
async fn stalled() -> Response {
    let first = futures::stream::once(async { Ok::<_, std::io::Error>("accepted, ".to_owned()) });
    let body = axum::body::Body::from_stream(first.chain(futures::stream::pending()));
    (StatusCode::OK, body).into_response()
}

async fn big() -> Vec<u8> {
    let mut body = vec![b'a'; 4096];
    body.extend(vec![b'b'; 6000]);
    body
}

async fn gated(State(server): State<Arc<Server>>) -> StatusCode {
    let now = server.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    server.max_in_flight.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.in_flight.fetch_sub(1, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

async fn start() -> (String, Arc<Server>) {
    let server = Arc::new(Server::default());
    let app = Router::new()
        .route("/ok", post(ok))
        .route("/status/{code}", any(status))
        .route("/slow", post(slow))
        .route("/big", post(big))
        .route("/stalled", post(stalled))
        .route("/gated", post(gated))
        .with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), server)
}

fn target(url: String, keys: &[&str]) -> HttpTarget {
    HttpTarget {
        url,
        signing_keys: keys.iter().map(|k| SigningKey::parse(k).unwrap()).collect(),
        timeout: Duration::from_millis(500),
        max_in_flight: 8,
        retry_on_4xx: false,
    }
}

fn outbound(id: &str) -> Outbound<'_> {
    Outbound {
        id,
        tenant_id: "acme",
        workflow_id: "triage",
        body: BODY,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        tracestate: Some("congo=t61rcWkgMzE"),
    }
}

/// Standard Webhooks signature computed here with hmac + sha2, not with the crate.
fn expected_signature(secret: &str, id: &str, timestamp: &str, body: &[u8]) -> String {
    let key = STANDARD
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn signed_post_with_stable_id_across_attempts() {
    let (base, server) = start().await;
    let transport =
        HttpTransport::new(target(format!("{base}/ok"), &[SECRET, SECOND_SECRET])).unwrap();
    for _ in 0..2 {
        let attempt = transport.deliver(outbound("dsp_stable_1")).await;
        assert_eq!(attempt.result, AttemptResult::Delivered, "{attempt:?}");
        assert_eq!(attempt.status, Some(200));
        assert_eq!(attempt.error, None);
    }
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for request in &seen {
        let h = &request.headers;
        assert_eq!(request.body, BODY);
        assert_eq!(header(h, "webhook-id"), "dsp_stable_1");
        assert_eq!(header(h, "content-type"), "application/cloudevents+json");
        assert_eq!(
            header(h, "traceparent"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(header(h, "tracestate"), "congo=t61rcWkgMzE");
        assert!(header(h, "user-agent").starts_with("switchyard/"), "{h:?}");
        let ts = header(h, "webhook-timestamp");
        let ts_num: i64 = ts.parse().unwrap();
        assert!(
            (now - ts_num).abs() <= 60,
            "timestamp {ts} is not now ({now})"
        );
        let entries: Vec<&str> = header(h, "webhook-signature").split(' ').collect();
        assert_eq!(
            entries,
            vec![
                expected_signature(SECRET, "dsp_stable_1", ts, BODY),
                expected_signature(SECOND_SECRET, "dsp_stable_1", ts, BODY),
            ]
        );
    }
}

#[tokio::test]
async fn unsigned_target_sends_no_signature() {
    let (base, server) = start().await;
    let transport = HttpTransport::new(target(format!("{base}/ok"), &[])).unwrap();
    let attempt = transport
        .deliver(Outbound {
            traceparent: None,
            tracestate: None,
            ..outbound("dsp_unsigned")
        })
        .await;
    assert_eq!(attempt.result, AttemptResult::Delivered);
    let seen = server.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(seen[0].headers.get("webhook-signature").is_none());
    assert!(seen[0].headers.get("traceparent").is_none());
    assert_eq!(header(&seen[0].headers, "webhook-id"), "dsp_unsigned");
}

#[tokio::test]
async fn statuses_are_classified() {
    let (base, server) = start().await;
    let retry = |retry_after: Option<u64>, at_least: Option<u64>| {
        AttemptResult::Retry(RetryHint {
            retry_after: retry_after.map(Duration::from_secs),
            at_least: at_least.map(Duration::from_secs),
        })
    };
    #[rustfmt::skip]
    let cases: Vec<(&str, bool, AttemptResult, Option<u16>)> = vec![
        ("/status/200", false, AttemptResult::Delivered, Some(200)),
        ("/status/204", false, AttemptResult::Delivered, Some(204)),
        ("/status/302", false, retry(None, None), Some(302)),
        ("/status/400", false, AttemptResult::Rejected(Rejection::Rejected4xx), Some(400)),
        ("/status/400", true,  retry(None, None), Some(400)),
        ("/status/410", false, AttemptResult::Rejected(Rejection::TargetGone), Some(410)),
        ("/status/429", false, retry(Some(7), Some(60)), Some(429)),
        ("/status/503", false, retry(None, None), Some(503)),
        ("/slow",       false, retry(None, Some(60)), None),
    ];
    for (path, retry_on_4xx, expect, status) in cases {
        let mut target = target(format!("{base}{path}"), &[SECRET]);
        target.retry_on_4xx = retry_on_4xx;
        let transport = HttpTransport::new(target).unwrap();
        let attempt = transport.deliver(outbound("dsp_table")).await;
        assert_eq!(
            attempt.result, expect,
            "{path} (retry_on_4xx {retry_on_4xx}): {attempt:?}"
        );
        assert_eq!(attempt.status, status, "{path}");
        match status {
            Some(code) if code != 204 && code != 302 => assert_eq!(
                attempt.response_excerpt.as_deref(),
                Some(
                    if code == 429 {
                        "slow down".to_owned()
                    } else {
                        format!("status {code}")
                    }
                    .as_str()
                ),
                "{path}"
            ),
            Some(_) => assert_eq!(attempt.response_excerpt.as_deref(), Some("")),
            None => {
                let error = attempt.error.unwrap_or_default();
                assert!(error.contains("timed out"), "{path}: {error}");
            }
        }
    }
    // The 302 pointed at /ok; it must not have been followed.
    assert_eq!(server.ok_hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn closed_port_is_retried_with_an_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let transport = HttpTransport::new(target(format!("http://{addr}/ok"), &[SECRET])).unwrap();
    let attempt = transport.deliver(outbound("dsp_closed")).await;
    assert_eq!(attempt.result, AttemptResult::Retry(RetryHint::default()));
    assert_eq!(attempt.status, None);
    let error = attempt.error.unwrap_or_default();
    assert!(!error.is_empty());
    assert!(error.to_lowercase().contains("connect"), "{error}");
}

#[tokio::test]
async fn response_excerpt_is_capped_at_4096_bytes() {
    let (base, _server) = start().await;
    let transport = HttpTransport::new(target(format!("{base}/big"), &[SECRET])).unwrap();
    let attempt = transport.deliver(outbound("dsp_big")).await;
    assert_eq!(attempt.result, AttemptResult::Delivered);
    let excerpt = attempt.response_excerpt.unwrap();
    assert_eq!(excerpt.len(), 4096);
    assert!(excerpt.bytes().all(|b| b == b'a'));
}

/// The receiver answered 200 and its body stalled past the timeout: the run was accepted (a
/// retry would send it twice), so the attempt is delivered with what arrived of the body and
/// why the rest did not.
#[tokio::test]
async fn a_body_that_stalls_past_the_timeout_keeps_the_answer() {
    let (base, _server) = start().await;
    let transport = HttpTransport::new(target(format!("{base}/stalled"), &[SECRET])).unwrap();
    let attempt = transport.deliver(outbound("dsp_stalled")).await;
    assert_eq!(attempt.result, AttemptResult::Delivered, "{attempt:?}");
    assert_eq!(attempt.status, Some(200));
    assert_eq!(attempt.response_excerpt.as_deref(), Some("accepted, "));
    let error = attempt.error.unwrap_or_default();
    assert!(
        error.contains("reading the response body") && error.contains("timed out"),
        "{error}"
    );
}

#[tokio::test]
async fn in_flight_requests_are_capped() {
    let (base, server) = start().await;
    let mut target = target(format!("{base}/gated"), &[SECRET]);
    target.max_in_flight = 2;
    target.timeout = Duration::from_secs(30);
    let transport = Arc::new(HttpTransport::new(target).unwrap());
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let transport = transport.clone();
            tokio::spawn(async move {
                let id = format!("dsp_gated_{i}");
                transport.deliver(outbound(&id)).await.result
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), AttemptResult::Delivered);
    }
    let max = server.max_in_flight.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&max),
        "saw {max} requests in flight at once"
    );
}

#[test]
fn bad_targets_are_refused() {
    let mut bad = target("not a url".into(), &[]);
    assert!(HttpTransport::new(bad.clone()).is_err());
    bad.url = "ftp://example.com/x".into();
    let err = HttpTransport::new(bad.clone()).unwrap_err();
    assert!(err.to_string().contains("ftp"), "{err}");
    bad.url = "http://127.0.0.1/x".into();
    bad.max_in_flight = 0;
    assert!(HttpTransport::new(bad).is_err());
}

#[test]
fn transport_is_object_safe() {
    let transport: Box<dyn Transport> =
        Box::new(HttpTransport::new(target("http://127.0.0.1:9/x".into(), &[SECRET])).unwrap());
    let shown = format!("{transport:?}");
    assert!(
        !shown.contains("C2FVsBQ"),
        "Debug must not show the secret: {shown}"
    );
}

/// An https target is reached over TLS, and its certificate is checked against the webpki
/// roots: a self-signed one (a local server with a test certificate) is refused, the attempt
/// retried with the reason, and no request reaches the server.
#[tokio::test]
async fn https_target_with_an_untrusted_certificate_is_refused() {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let cert = CertificateDer::from_pem_slice(include_bytes!("fixtures/self_signed.crt")).unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("fixtures/self_signed.key")).unwrap();
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Every handshake's outcome, in order.
    let (handshakes, mut outcomes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let outcome = acceptor.accept(stream).await.map(|_| ());
            let _ = handshakes.send(outcome);
        }
    });

    let transport = HttpTransport::new(target(format!("https://{addr}/runs"), &[SECRET])).unwrap();
    let attempt = transport.deliver(outbound("dsp_tls")).await;
    assert_eq!(attempt.result, AttemptResult::Retry(RetryHint::default()));
    assert_eq!(attempt.status, None);
    let error = attempt.error.unwrap_or_default();
    assert!(error.contains("invalid peer certificate"), "{error}");
    // The server saw a TLS client that gave up on its certificate: a handshake, not plain
    // HTTP, and not one that completed.
    let outcome = tokio::time::timeout(Duration::from_secs(5), outcomes.recv())
        .await
        .expect("a connection reached the server")
        .expect("the server task is running");
    assert!(outcome.is_err(), "the handshake completed: {outcome:?}");
}
