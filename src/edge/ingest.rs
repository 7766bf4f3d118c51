//! The steps every signed HTTP ingest endpoint takes, written once: find the named source and
//! read its bounded body (`body::receive`), verify the request, normalise it into a
//! [`Delivery`] that carries its raw bytes, and submit it. An [`Endpoint`] supplies only its
//! channel's own steps; [`serve`] runs them in this order for every channel.
//!
//! Invariant: nothing reads a request's content before its endpoint's `verify` accepted it, and
//! a refusal decided before the store (a bad signature, a body that is no CloudEvent, Slack's
//! challenge) is the endpoint's finished answer, recorded nowhere.

use axum::extract::{Extension, Path, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use uuid::Uuid;

use super::body::{self, Unverified, UnverifiedBudget};
use crate::config::ResolvedSource;
use crate::http::AppState;
use crate::http::intake_answer::{self, Style};
use crate::intake::{Delivery, Raw};
use crate::live::Live;
use crate::waits::resume::ResumeClaim;

/// A step's result: `Err` is the request's answer, decided without the store. Unboxed, as
/// the handlers always answered: a refusal is answered at once, and boxing it would only add
/// an allocation to every refused request.
pub type Step<T> = Result<T, Response>;

/// One HTTP ingest endpoint's own steps.
#[allow(clippy::result_large_err)] // `Step`'s answer, see there.
pub trait Endpoint: 'static {
    /// The kind of source it serves (`[[source]] kind`).
    const KIND: &'static str;

    /// The source's resolved settings it reads.
    type Source<'l>: Copy + Send;

    /// What verifying the request established (the signed parts, who sent it), and what of
    /// the request it read on the way, for `normalize`.
    type Verified<'r>;

    /// The settings of `source` when it is of this endpoint's kind.
    fn source(source: &ResolvedSource) -> Option<Self::Source<'_>>;

    /// Authenticates the request before anything reads it; a refusal is logged here.
    fn verify<'r>(
        source: Self::Source<'_>,
        name: &str,
        request: &'r Unverified,
        live: &Live,
    ) -> Step<Self::Verified<'r>>;

    /// The delivery of source `name`, and how it is submitted.
    fn normalize<'r>(
        source: Self::Source<'_>,
        verified: Self::Verified<'r>,
        name: String,
        intake_id: Uuid,
        request: &'r Unverified,
    ) -> Step<(Delivery, Submit)>;

    /// What `switchyard route --skip-verify` hands `normalize` in place of a verified request;
    /// `None`: this endpoint cannot normalise a request it did not verify.
    fn unverified(_request: &Unverified) -> Option<Self::Verified<'_>> {
        None
    }

    /// The content type its raw bytes are stored under (replay reads them back by it).
    fn content_type(_headers: &HeaderMap) -> String {
        "application/json".into()
    }
}

/// How a normalised delivery is decided.
#[derive(Debug)]
pub enum Submit {
    /// By intake (the router), answered in the sender's style.
    Intake(Style),
    /// As a resume when its payload carries `resume` at `at`, sent by `caller` (a token's name
    /// or `source:<name>`, which a resume's actor is bound to); by intake otherwise.
    ResumeOrIntake {
        at: &'static [&'static str],
        caller: String,
        style: Style,
    },
    /// As the resume `claim` (a Slack button click).
    Resume(ResumeClaim, Style),
}

/// The handler of every endpoint: `post(serve::<E>)`.
pub async fn serve<E: Endpoint>(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Extension(budget): Extension<UnverifiedBudget>,
    request: Request,
) -> Response {
    let live = state.live.current();
    let received = body::receive(&budget, &live, E::KIND, &name, request, E::source).await;
    // `request` holds the body's share of the budget until the answer is decided.
    let (source, request) = match received {
        Ok(received) => received,
        Err(refused) => return refused,
    };
    let (delivery, submit) = match decide::<E>(source, name, &request, &live) {
        Ok(decided) => decided,
        Err(answer) => return answer,
    };
    match submit {
        Submit::Intake(style) => intake_answer::submit(&state, delivery, style).await,
        Submit::ResumeOrIntake { at, caller, style } => {
            crate::http::waits::resume_or_submit(&state, delivery, at, &caller, style).await
        }
        Submit::Resume(claim, style) => {
            crate::http::waits::submit_resume(&state, delivery, claim, style).await
        }
    }
}

/// Verifies and normalises; the delivery carries the request's bytes.
#[allow(clippy::result_large_err)] // `Step`'s answer, see there.
fn decide<E: Endpoint>(
    source: E::Source<'_>,
    name: String,
    request: &Unverified,
    live: &Live,
) -> Step<(Delivery, Submit)> {
    let verified = E::verify(source, &name, request, live)?;
    let intake_id = Uuid::now_v7();
    let (mut delivery, submit) = E::normalize(source, verified, name, intake_id, request)?;
    delivery.raw = Some(Raw {
        content_type: E::content_type(&request.headers),
        bytes: request.body.clone(),
    });
    Ok((delivery, submit))
}

/// A dry run of endpoint `E` on a request read from files (`switchyard route --body`): verified
/// (or, with `skip_verify`, not) and normalised exactly as `serve` does, never submitted.
/// `None` when `resolved` is not of `E`'s kind; `Err` is the answer a sender would get.
#[allow(clippy::result_large_err)] // `Step`'s answer, see there.
pub fn dry_run<E: Endpoint>(
    resolved: &ResolvedSource,
    name: &str,
    request: &Unverified,
    live: &Live,
    skip_verify: bool,
) -> Option<Step<Delivery>> {
    let source = E::source(resolved)?;
    let verified = if skip_verify {
        match E::unverified(request) {
            Some(verified) => verified,
            None => {
                return Some(Err(intake_answer::refuse(
                    switchyard_core::Outcome::UnauthorizedSource,
                    format!("{} endpoints cannot be read without verifying", E::KIND),
                    Style::Standard,
                )));
            }
        }
    } else {
        match E::verify(source, name, request, live) {
            Ok(verified) => verified,
            Err(refused) => return Some(Err(refused)),
        }
    };
    Some(
        E::normalize(source, verified, name.to_owned(), Uuid::now_v7(), request)
            .map(|(delivery, _)| delivery),
    )
}
