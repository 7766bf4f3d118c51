//! The spans of a delivery's trace and the context each hands on.
//!
//! `intake.delivery` wraps an intake endpoint from receive to answer (a middleware, so every
//! endpoint, present or future, gets it by being measured); the context it stores travels to
//! the handler's [`crate::intake::Delivery`] through a task-local. `intake.batch_commit` is a
//! writer's transaction; `dispatch.attempt` one delivery of a run to its target.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use switchyard_core::Outcome;
use switchyard_router::entities::run;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{TARGET, TraceContext, TraceParent, enabled, parse_traceparent};
use crate::intake::Delivery;

tokio::task_local! {
    /// The context the delivery being handled on this task is stored with.
    static INCOMING: Option<TraceContext>;
}

/// The trace context of the delivery this task is receiving, for [`Delivery::new`]: the
/// incoming one (tracing off) or the `intake.delivery` span's (tracing on); `None` outside an
/// intake endpoint or when there is none.
pub fn incoming() -> Option<TraceContext> {
    INCOMING.try_with(Clone::clone).ok().flatten()
}

/// What an answer tells the delivery span, put on the response by the intake answer.
#[derive(Debug, Clone)]
pub struct AnswerIds {
    pub intake_id: Option<String>,
    pub run_id: Option<String>,
}

/// Wraps one intake request of `source_kind`: reads its trace context (CloudEvents' from the
/// `ce-` headers first), and with tracing on runs it inside an `intake.delivery` span whose
/// parent is that context (or, without one, the root of a new trace).
pub async fn traced_intake(source_kind: &'static str, request: Request, next: Next) -> Response {
    let prefixes: &[&str] = match source_kind {
        "cloudevents" => &["ce-", ""],
        _ => &[""],
    };
    let incoming = prefixes
        .iter()
        .find_map(|prefix| TraceContext::from_headers(request.headers(), prefix));
    if !enabled() {
        return match incoming {
            None => next.run(request).await,
            Some((context, _)) => INCOMING.scope(Some(context), next.run(request)).await,
        };
    }
    let source = source_name(request.uri().path());
    let span = tracing::info_span!(
        target: TARGET,
        "intake.delivery",
        otel.kind = "server",
        source.kind = source_kind,
        source.name = source,
        outcome = Empty,
        intake.id = Empty,
        run.id = Empty,
        http.response.status_code = Empty,
    );
    let tracestate = incoming
        .as_ref()
        .and_then(|(context, _)| context.tracestate.clone());
    if let Some((_, parent)) = &incoming {
        let _ = span.set_parent(remote(parent, tracestate.as_deref()));
    }
    let stored = context_of(&span, tracestate);
    let response = INCOMING.scope(stored, next.run(request)).await;
    if let Some(outcome) = response.extensions().get::<Outcome>() {
        span.record("outcome", outcome.as_str());
    }
    if let Some(ids) = response.extensions().get::<AnswerIds>() {
        if let Some(id) = &ids.intake_id {
            span.record("intake.id", id.as_str());
        }
        if let Some(id) = &ids.run_id {
            span.record("run.id", id.as_str());
        }
    }
    span.record("http.response.status_code", response.status().as_u16());
    if response.status().is_server_error() {
        span.set_status(opentelemetry::trace::Status::error(
            "the delivery was not accepted",
        ));
    }
    response
}

/// The source name in an intake path (`/v1/ingest/<kind>/<name>`), `api` for `/v1/events`.
fn source_name(path: &str) -> &str {
    match path.strip_prefix("/v1/ingest/") {
        Some(rest) => rest.split_once('/').map_or(rest, |(_, name)| name),
        None => "api",
    }
}

/// The `intake.batch_commit` span of a writer's transaction over `deliveries`, while tracing
/// is on and one of them is in a recorded trace: a child of the first recorded delivery span
/// (so the commit shows in that trace), linking to every delivery span of the batch.
pub fn batch_commit(deliveries: &[&Delivery]) -> Option<tracing::Span> {
    if !enabled() {
        return None;
    }
    let parents: Vec<TraceParent> = deliveries
        .iter()
        .filter_map(|d| d.trace.as_ref()?.parent())
        .collect();
    let first = parents.iter().find(|parent| parent.sampled())?;
    let span = tracing::info_span!(
        target: TARGET,
        "intake.batch_commit",
        batch.size = deliveries.len(),
        batch.traced = parents.len(),
    );
    let _ = span.set_parent(remote(first, None));
    for parent in &parents {
        span.add_link(span_context(parent, None));
    }
    Some(span)
}

/// The context a dispatch sends, and the `dispatch.attempt` span it names while tracing is on.
#[derive(Debug)]
pub struct DispatchSpan {
    span: Option<tracing::Span>,
    /// `traceparent` to send: the attempt span's (tracing on) or the run's stored one.
    pub traceparent: Option<String>,
    /// `tracestate` to send: the run's, unchanged.
    pub tracestate: Option<String>,
}

impl DispatchSpan {
    /// Starts attempt `attempt` of `run` to `target`, in the run's trace.
    pub fn start(run: &run::Model, target: &str, attempt: i32) -> Self {
        if !enabled() {
            return Self {
                span: None,
                traceparent: run.traceparent.clone(),
                tracestate: run.tracestate.clone(),
            };
        }
        let span = tracing::info_span!(
            target: TARGET,
            "dispatch.attempt",
            otel.kind = "producer",
            dispatch.target = target,
            dispatch.attempt = attempt,
            run.id = run.id.as_str(),
            workflow.id = run.workflow_id.as_str(),
            result = Empty,
            http.response.status_code = Empty,
        );
        let stored = run
            .traceparent
            .as_deref()
            .and_then(|text| parse_traceparent(text).ok());
        if let Some(parent) = &stored {
            let _ = span.set_parent(remote(parent, run.tracestate.as_deref()));
        }
        let sent = context_of(&span, run.tracestate.clone());
        Self {
            traceparent: sent.as_ref().map(|c| c.traceparent.clone()),
            tracestate: run.tracestate.clone(),
            span: Some(span),
        }
    }

    /// Ends the attempt's span with its result (`delivered`, `retry`, a rejection, `claimed`)
    /// and the target's HTTP status, if it answered one.
    pub fn finish(self, result: &str, status: Option<u16>) {
        let Some(span) = self.span else {
            return;
        };
        span.record("result", result);
        if let Some(status) = status {
            span.record("http.response.status_code", status);
        }
        if !matches!(result, "delivered" | "claimed") {
            span.set_status(opentelemetry::trace::Status::error(result.to_owned()));
        }
    }
}

/// The W3C context naming `span`, with the `tracestate` to carry along.
fn context_of(span: &tracing::Span, tracestate: Option<String>) -> Option<TraceContext> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if !span_context.is_valid() {
        return None;
    }
    Some(TraceContext {
        traceparent: format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        ),
        tracestate,
    })
}

fn span_context(parent: &TraceParent, tracestate: Option<&str>) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.parent_id),
        TraceFlags::new(parent.flags),
        true,
        tracestate
            .and_then(|state| state.parse::<TraceState>().ok())
            .unwrap_or_default(),
    )
}

/// A context whose current span is the remote one `parent` names.
fn remote(parent: &TraceParent, tracestate: Option<&str>) -> opentelemetry::Context {
    opentelemetry::Context::new().with_remote_span_context(span_context(parent, tracestate))
}

#[cfg(test)]
mod tests {
    use super::source_name;

    #[test]
    fn source_names_come_from_the_path() {
        assert_eq!(source_name("/v1/events"), "api");
        assert_eq!(source_name("/v1/ingest/webhook/zendesk"), "zendesk");
        assert_eq!(source_name("/v1/ingest/slack/acme"), "acme");
        assert_eq!(source_name("/v1/ingest/cloudevents/ce"), "ce");
    }
}
