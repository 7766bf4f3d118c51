//! The span exporter: an OpenTelemetry SDK tracer provider (parent-based ratio sampling, a
//! batch span processor on its own thread) exporting OTLP/HTTP protobuf through the hyper
//! client already in the tree, and the `tracing-opentelemetry` layer that feeds it.
//!
//! Set up once, before logging starts, from the config file `serve` is given: the layer must
//! be part of the subscriber from the start. A SIGHUP reload does not change it (the daemon
//! says so when `[telemetry]` changed); a restart does.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{LoadedConfig, TelemetryConfig};

/// Longest one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The installed exporter: spans go out while this lives; [`Telemetry::shutdown`] flushes.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    shutdown_timeout: Duration,
    endpoint: String,
}

impl Telemetry {
    /// The exporter the config file at `path` asks for, or `None` when it sets no
    /// `otlp_endpoint` (or cannot be read: `serve` then reports that file's error itself).
    /// Exports run on `runtime`.
    pub fn from_config_file(
        path: &Path,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<Option<Self>> {
        let Ok(loaded) = LoadedConfig::load(path) else {
            return Ok(None);
        };
        Self::start(
            &loaded.config.telemetry,
            loaded.config.server.shutdown_timeout,
            runtime,
        )
    }

    /// Builds the exporter of `config`; `None` when tracing is off.
    pub fn start(
        config: &TelemetryConfig,
        shutdown_timeout: Duration,
        runtime: tokio::runtime::Handle,
    ) -> anyhow::Result<Option<Self>> {
        let Some(endpoint) = &config.otlp_endpoint else {
            return Ok(None);
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_http_client(TokioHyper { runtime })
            .build()?;
        let sampler =
            Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sampling_ratio)));
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_sampler(sampler)
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("switchyard");
        super::set_enabled();
        Ok(Some(Self {
            provider,
            tracer,
            shutdown_timeout,
            endpoint: endpoint.traces_url.clone(),
        }))
    }

    /// The layer that turns the spans of [`super::TARGET`] (and only those) into exported
    /// OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_filter(Targets::new().with_target(super::TARGET, tracing::Level::TRACE))
    }

    /// Where spans are exported to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Exports what is still queued and stops the exporter, waiting at most the server's
    /// `shutdown_timeout`.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(self.shutdown_timeout, flushed).await {
            Ok(Ok(Ok(()))) => tracing::info!("exported the remaining spans"),
            Ok(Ok(Err(error))) => tracing::warn!(%error, "cannot export the remaining spans"),
            Ok(Err(error)) => tracing::warn!(%error, "the span exporter failed at shutdown"),
            Err(_) => tracing::warn!(
                timeout = %humantime::format_duration(self.shutdown_timeout),
                "spans not exported within server.shutdown_timeout are dropped"
            ),
        }
    }
}

/// OTLP/HTTP requests over hyper (already the daemon's HTTP stack) on the daemon's runtime.
/// The SDK's batch processor calls it from its own thread, outside any runtime: each request
/// runs as a task on `runtime` and is awaited through a channel.
#[derive(Debug, Clone)]
struct TokioHyper {
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for TokioHyper {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let task = self.runtime.spawn(async move {
            tokio::time::timeout(EXPORT_TIMEOUT, post(request))
                .await
                .map_err(|_| HttpError::from("the OTLP export timed out"))?
        });
        task.await
            .map_err(|error| HttpError::from(format!("the OTLP export task failed: {error}")))?
    }
}

/// One request on a fresh HTTP/1.1 connection: exports are batched (seconds apart), so a pool
/// would save little.
async fn post(request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
    let authority = request
        .uri()
        .authority()
        .ok_or("the OTLP endpoint has no host")?
        .to_string();
    let stream = tokio::net::TcpStream::connect(&authority).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "the OTLP connection ended with an error");
        }
    });
    let (mut parts, body) = request.into_parts();
    parts
        .headers
        .entry(hyper::header::HOST)
        .or_insert(authority.parse()?);
    let response = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Response::from_parts(parts, body))
}
