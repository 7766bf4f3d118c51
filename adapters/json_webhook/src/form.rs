//! Web form submissions as the mapping reads them: the fields of an
//! `application/x-www-form-urlencoded` body (or of a multipart one, which the daemon reads) as
//! one flat JSON object, a repeated name becoming an array of its values in order; and the
//! honeypot rule.
//!
//! Invariant: the honeypot field never reaches the payload, and a submission with it filled
//! is never routed.

use serde_json::{Map, Value};

use crate::config::WebFormSourceConfig;
use crate::mapping::Mapped;
use crate::template::{HeaderFn, Input, MapError};

/// The fields of a urlencoded body, as a flat object.
pub fn urlencoded_fields(body: &[u8]) -> Map<String, Value> {
    let mut fields = Map::new();
    for (name, value) in url::form_urlencoded::parse(body) {
        add_field(
            &mut fields,
            name.into_owned(),
            Value::String(value.into_owned()),
        );
    }
    fields
}

/// Adds one field; a second value of a name turns it into an array.
pub fn add_field(fields: &mut Map<String, Value>, name: String, value: Value) {
    match fields.get_mut(&name) {
        None => {
            fields.insert(name, value);
        }
        Some(Value::Array(values)) => values.push(value),
        Some(first) => {
            let first = first.take();
            fields.insert(name, Value::Array(vec![first, value]));
        }
    }
}

/// What a submission is.
#[derive(Debug, Clone, PartialEq)]
pub enum Submission {
    /// Mapped: route it.
    Mapped(Mapped),
    /// The honeypot was filled: a bot. The event is kept for the ledger.
    Bot {
        detail: String,
        mapped: Option<Mapped>,
    },
}

/// The submission `fields` of `config`'s form, mapped; the honeypot removed first.
pub fn normalize_form<'h>(
    config: &WebFormSourceConfig,
    mut fields: Map<String, Value>,
    header: &'h HeaderFn<'h>,
    raw_ref: &str,
) -> Result<Submission, MapError> {
    let bot = config.honeypot.as_ref().and_then(|name| {
        let filled = match fields.remove(name)? {
            Value::String(s) => !s.trim().is_empty(),
            Value::Null => false,
            _ => true,
        };
        filled.then(|| format!("honeypot field `{name}` is filled in: a bot's submission"))
    });
    let body = Value::Object(fields);
    let input = Input {
        body: &body,
        header,
    };
    let mapped = config.mapping().apply(&config.tenant, &input, raw_ref);
    match bot {
        Some(detail) => Ok(Submission::Bot {
            detail,
            mapped: mapped.ok(),
        }),
        None => mapped.map(Submission::Mapped),
    }
}
