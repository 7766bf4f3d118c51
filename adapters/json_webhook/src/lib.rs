//! Any signed JSON webhook and any web form, by configuration: verification presets
//! ([`verify`]), a mapping from body and headers to the canonical event ([`mapping`],
//! [`template`]), and a form's fields ([`form`]). Pure functions; the daemon's registrations
//! (`src/edge/json_webhook.rs`, `src/edge/web_form.rs`) call them.
//!
//! Invariant: tenancy comes from the source's config, never the body; nothing is read from a
//! body before its source's verification accepted it.

pub mod config;
pub mod form;
pub mod mapping;
pub mod template;
pub mod verify;

pub use config::{ConfigError, JsonWebhookSourceConfig, WebFormSourceConfig};
pub use form::{Submission, normalize_form, urlencoded_fields};
pub use mapping::{Mapped, Mapping, PayloadSpec};
pub use template::{HeaderFn, Input, MapError, Template};
pub use verify::{Encoding, Preset, Verified, Verifier, VerifyConfig, VerifyError};

/// A verified JSON body mapped by `config` (`header` reads the request's headers).
pub fn normalize_json<'h>(
    config: &JsonWebhookSourceConfig,
    body: &[u8],
    header: &'h template::HeaderFn<'h>,
    raw_ref: &str,
) -> Result<Mapped, MapError> {
    let body: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| MapError::NotJson(e.to_string()))?;
    let input = Input {
        body: &body,
        header,
    };
    config.mapping().apply(&config.tenant, &input, raw_ref)
}

/// The mapped delivery id alone, for a delivery the rest of the mapping could not read (it is
/// recorded `invalid_event` under the sender's id, so its retry is a duplicate of it).
pub fn delivery_id_of<'h>(
    config: &JsonWebhookSourceConfig,
    body: &[u8],
    header: &'h template::HeaderFn<'h>,
) -> Option<String> {
    let template = config.delivery_id.as_ref()?;
    let body = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
    let input = Input {
        body: &body,
        header,
    };
    template.render("delivery_id", &input).ok()
}
