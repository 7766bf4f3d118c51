//! Reading fields from raw callback JSON, with `invalid_event` details that name the exact path
//! (`missing_field:event.ts`, `wrong_type:event.files`).

use serde_json::{Map, Value};

use crate::SlackError;

/// A JSON object and where it sits in the callback, for error details.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Obj<'a> {
    map: &'a Map<String, Value>,
    /// Dotted path of this object, empty for the root.
    path: &'static str,
}

impl<'a> Obj<'a> {
    /// The callback's top-level object.
    pub(crate) fn root(value: &'a Value) -> Result<Self, SlackError> {
        match value {
            Value::Object(map) => Ok(Obj { map, path: "" }),
            _ => Err(SlackError::invalid("not_an_object")),
        }
    }

    pub(crate) fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The raw value; JSON `null` reads as absent, as Slack uses both for "no value".
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// An optional string; present with another type is `wrong_type`.
    pub(crate) fn opt_str(&self, key: &str) -> Result<Option<&'a str>, SlackError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong_type(key)),
        }
    }

    /// A required, non-empty string.
    pub(crate) fn req_str(&self, key: &str) -> Result<&'a str, SlackError> {
        match self.opt_str(key)? {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(self.missing(key)),
        }
    }

    /// An optional nested object, known by `path` (the full dotted path, e.g. `event.message`).
    pub(crate) fn opt_obj(
        &self,
        key: &str,
        path: &'static str,
    ) -> Result<Option<Obj<'a>>, SlackError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj { map, path })),
            Some(_) => Err(self.wrong_type(key)),
        }
    }

    /// A required nested object.
    pub(crate) fn req_obj(&self, key: &str, path: &'static str) -> Result<Obj<'a>, SlackError> {
        self.opt_obj(key, path)?.ok_or_else(|| self.missing(key))
    }

    /// An optional array.
    pub(crate) fn opt_array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, SlackError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(self.wrong_type(key)),
        }
    }

    /// `true` only for a JSON `true`.
    pub(crate) fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some(Value::Bool(true)))
    }

    pub(crate) fn missing(&self, key: &str) -> SlackError {
        SlackError::invalid(format!("missing_field:{}", self.path_of(key)))
    }

    fn wrong_type(&self, key: &str) -> SlackError {
        SlackError::invalid(format!("wrong_type:{}", self.path_of(key)))
    }
}
