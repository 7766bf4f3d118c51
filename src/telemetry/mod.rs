//! OpenTelemetry traces: W3C trace context in, stored, and out again; and, when
//! `[telemetry] otlp_endpoint` is set, spans exported over OTLP/HTTP.
//!
//! - [`context`]: strict `traceparent`/`tracestate` parsing ([`TraceContext::from_headers`]
//!   takes a header prefix: `""` for HTTP, `"ce-"` for binary-mode CloudEvents).
//! - [`export`]: the exporter (set up once at start from the config file, flushed at shutdown)
//!   and the `tracing` layer that turns this module's spans into OpenTelemetry spans.
//! - [`spans`]: the spans themselves: `intake.delivery` (receive to answer, one per delivery),
//!   `intake.batch_commit` (one per writer transaction), `dispatch.attempt` (one per attempt).
//!
//! Invariant: with tracing off ([`enabled`] false) no span is built and nothing is allocated
//! for one; a delivery's incoming context is still stored and forwarded unchanged. With tracing
//! on, the context stored on the ledger row and the run names the delivery's `intake.delivery`
//! span, and a dispatch sends the context of its own `dispatch.attempt` span, so the sender's,
//! Switchyard's and the worker's spans form one trace. An invalid incoming header is ignored
//! (logged at debug), never a refusal.

pub mod context;
pub mod export;
pub mod spans;

use std::sync::atomic::{AtomicBool, Ordering};

pub use context::{TraceContext, TraceParent, TraceparentError, parse_traceparent};
pub use export::Telemetry;
pub use spans::{DispatchSpan, adopt, batch_commit, incoming, traced_intake};

/// The `tracing` target of every span this module makes: the exporter's layer sees only these.
pub const TARGET: &str = "switchyard::telemetry";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are being exported (set once, at start, when the exporter is installed).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn set_enabled() {
    ENABLED.store(true, Ordering::Relaxed);
}
