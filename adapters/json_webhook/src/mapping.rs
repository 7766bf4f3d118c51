//! The mapping from a verified body (and its headers) to the canonical event's fields, as a
//! source's config declares it: `event_type`, `target_entity_id`, `delivery_id` and `payload`,
//! each a [`Template`]; `channel` and the tenant come from the source, never the body.
//!
//! Invariant: the tenant is always the source's; a field the mapping cannot fill is a
//! [`MapError`] naming the key and the pointer or header, never a default guessed from the
//! body.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use switchyard_core::{Channel, Event};

use crate::template::{Input, MapError, Template, type_name};

/// `payload`: a pointer to an object in the body, or a table of name = template (a lone
/// pointer keeps its JSON type there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PayloadSpec {
    Pointer(Template),
    Table(BTreeMap<String, Template>),
}

/// The mapping of one source, borrowed from its config.
#[derive(Debug, Clone, Copy)]
pub struct Mapping<'c> {
    pub channel: Channel,
    pub event_type: &'c Template,
    pub target_entity_id: &'c Template,
    /// `None`: the delivery is identified by its body's digest.
    pub delivery_id: Option<&'c Template>,
    /// `None`: the whole body (which must be an object).
    pub payload: Option<&'c PayloadSpec>,
}

/// What a mapping made of one delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    pub event: Event,
    /// The mapped delivery id; `None` when the mapping names none.
    pub delivery_id: Option<String>,
}

impl Mapping<'_> {
    /// The event of `tenant` for this body and these headers.
    pub fn apply(
        &self,
        tenant: &str,
        input: &Input<'_, '_>,
        raw_ref: &str,
    ) -> Result<Mapped, MapError> {
        let event_type = self.event_type.render("event_type", input)?;
        let target_entity_id = self.target_entity_id.render("target_entity_id", input)?;
        let delivery_id = self
            .delivery_id
            .map(|t| t.render("delivery_id", input))
            .transpose()?;
        let payload = match self.payload {
            None => match input.body {
                Value::Object(_) => input.body.clone(),
                other => {
                    return Err(MapError::WrongType {
                        key: "payload".into(),
                        pointer: String::new(),
                        found: type_name(other),
                        expected: "an object (set `payload` to map one)",
                    });
                }
            },
            Some(PayloadSpec::Pointer(template)) => match template.value("payload", input)? {
                Value::Object(map) => Value::Object(map),
                other => {
                    return Err(MapError::WrongType {
                        key: "payload".into(),
                        pointer: template.to_string(),
                        found: type_name(&other),
                        expected: "an object",
                    });
                }
            },
            Some(PayloadSpec::Table(table)) => {
                let mut map = Map::new();
                for (name, template) in table {
                    let key = format!("payload.{name}");
                    map.insert(name.clone(), template.value(&key, input)?);
                }
                Value::Object(map)
            }
        };
        Ok(Mapped {
            event: Event {
                channel: self.channel,
                event_type,
                tenant_id: tenant.to_owned(),
                target_entity_id,
                payload,
                raw_ref: raw_ref.to_owned(),
            },
            delivery_id,
        })
    }

    /// Whether the delivery id comes from something the sender keeps across retries: `None`
    /// when the mapping names no delivery id (the body's digest is used, and `check` warns).
    pub fn has_delivery_id(&self) -> bool {
        self.delivery_id.is_some()
    }
}
