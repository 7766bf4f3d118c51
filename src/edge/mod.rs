//! The edge: where a channel's payload becomes a [`Delivery`](crate::intake::Delivery). A
//! channel is its adapter crate plus one registration here, `<kind>.rs`, which says how its
//! `[[source]]` entries are configured and checked (`config::SourceSettings` on its adapter's
//! config struct), how it is reached (HTTP routes under `/v1/ingest/<kind>/{name}`, or
//! pollers), verified and normalised (`ingest::Endpoint`), and normalised again on replay
//! ([`Channel::renormalize`], handed to replay as [`REGISTERED`]). The steps all HTTP channels
//! share are written once (`ingest`, `body`), and so is the supervision of pollers (`pollers`).
//!
//! Invariant: outside `edge/` and the `SourceConfig` enum nothing names a channel (but the
//! console's sources page, which renders `email`'s poller status, and the `mailbox test`
//! command, which calls [`mailbox_test`]); the server, the daemon's
//! pollers, replay, `check`, metrics and spans find every channel in [`CHANNELS`], once each.

mod body;
mod cloudevents;
mod email;
mod ingest;
mod json_webhook;
mod openapi;
mod pollers;
pub mod schedule;
mod slack;
mod web_form;
mod webhook;

use axum::Router;
use axum::middleware::from_fn;

pub use email::mailbox_test;
pub use openapi::document as openapi_document;
pub use pollers::{Handles, Poll, Pollers, SourceStatuses, StartPollers};
pub use slack::approvals::Approvals;
pub use slack::socket::SocketMode;

pub use body::Unverified;

use crate::config::{ResolvedSource, ServerConfig, SourceConfig};
use crate::http::AppState;
use crate::http::intake_answer;
pub use crate::replay::{Again, Rereader, Stored};

/// Every channel, once: the order routes are merged in, nothing more.
pub static CHANNELS: &[&dyn Channel] = &[
    &webhook::Webhook,
    &slack::Slack,
    &email::Email,
    &cloudevents::CloudEvents,
    &json_webhook::JsonWebhook,
    &web_form::WebForm,
    &schedule::Schedule,
];

/// What the daemon does with one channel beyond its config (`config::SourceSettings`).
pub trait Channel: Sync {
    /// Its `[[source]]` kind, path segment under `/v1/ingest/` and `source_kind` label.
    fn kind(&self) -> &'static str;

    /// The config table its entries are (`source`: `[[source]]` entries of its kind;
    /// `schedule`: `[[schedule]]`).
    fn config_table(&self) -> &'static str {
        "source"
    }

    /// Its HTTP ingest routes; `None` for a channel that is polled.
    fn routes(&self) -> Option<Router<AppState>> {
        None
    }

    /// How its pollers start, for a channel that pulls rather than being called (one poller
    /// per source, recording through the daemon's handles); `None` for a channel reached over
    /// HTTP. A channel has routes or pollers, never both.
    fn pollers(&self) -> Option<StartPollers> {
        None
    }

    /// The prefixes of the headers an incoming delivery's trace context is read from, tried in
    /// order (`""`: `traceparent` itself).
    fn trace_headers(&self) -> &'static [&'static str] {
        crate::telemetry::spans::PLAIN_TRACE_HEADERS
    }

    /// A stored delivery of `source` normalised again (replay), with `source`'s settings of the
    /// revision replayed under; `None` when `source` is not of this channel. Signatures are not
    /// checked again: the delivery was authenticated when received.
    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again>;

    /// A request read from files (`switchyard route --source --body`), verified (unless
    /// `skip_verify`) and normalised as a delivery would be, never submitted; `None` when
    /// `source` is not of this channel. `Err` is the answer its sender would get.
    fn dry_run(&self, _source: &ResolvedSource, _request: &DryRun<'_>) -> Option<DryRunResult> {
        None
    }

    /// Whether its HTTP endpoints authenticate by signature alone, never by a bearer token: the
    /// failure throttle then never blocks their senders (shared egress addresses) for someone
    /// else's failed tokens.
    fn signed_only(&self) -> bool {
        false
    }

    /// Whether bytes stored as `content_type` came from this channel, to tell which of several
    /// sources sharing a name (of different kinds) received a delivery.
    fn stored_here(&self, _content_type: &str) -> bool {
        false
    }
}

/// A request read from files, for [`Channel::dry_run`].
#[derive(Debug)]
pub struct DryRun<'a> {
    pub name: &'a str,
    pub request: &'a Unverified,
    pub live: &'a crate::live::Live,
    pub skip_verify: bool,
}

/// What a dry run made of a request: the delivery, or the answer its sender would get.
pub type DryRunResult = Result<crate::intake::Delivery, axum::response::Response>;

/// The registration of `source`'s channel.
pub fn channel_of(source: &SourceConfig) -> Option<&'static dyn Channel> {
    let kind = source.kind();
    CHANNELS
        .iter()
        .copied()
        .find(|channel| channel.kind() == kind)
}

/// Whether `path` is an ingest endpoint of a channel that authenticates by signature alone.
pub fn signed_only(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/v1/ingest/") else {
        return false;
    };
    let kind = rest.split_once('/').map_or(rest, |(kind, _)| kind);
    // A kind without a trailing `/` is no endpoint of it, as `/v1/ingest/<kind>/{name}` says.
    rest.len() > kind.len()
        && CHANNELS
            .iter()
            .any(|channel| channel.kind() == kind && channel.signed_only())
}

/// Every channel's ingest routes, each counted and traced under its kind
/// (`intake_answer::measured`), behind the unverified-body budget (`body`).
pub fn routes(server: &ServerConfig) -> Router<AppState> {
    CHANNELS
        .iter()
        .filter_map(|channel| Some((*channel, channel.routes()?)))
        .fold(Router::new(), |all, (channel, routes)| {
            let (kind, trace_headers) = (channel.kind(), channel.trace_headers());
            all.merge(routes.route_layer(from_fn(move |request, next| {
                intake_answer::measured(kind, trace_headers, request, next)
            })))
        })
        .route_layer(axum::Extension(body::UnverifiedBudget::new(server)))
}

/// The registrations, as replay reads stored bytes again through them: the daemon hands this
/// to the replayer, so replay itself names no channel.
#[derive(Debug)]
pub struct Registered;

/// [`Registered`], for `Replayer::new`.
pub static REGISTERED: &Registered = &Registered;

impl Rereader for Registered {
    fn renormalize(&self, source: &SourceConfig, stored: &Stored<'_>) -> Option<Again> {
        channel_of(source)?.renormalize(source, stored)
    }

    fn stored_here(&self, source: &SourceConfig, content_type: &str) -> bool {
        channel_of(source).is_some_and(|channel| channel.stored_here(content_type))
    }
}

#[cfg(test)]
mod tests;
