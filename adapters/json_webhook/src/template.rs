//! Where a mapped field's value comes from, as an admin writes it: a JSON Pointer into the body
//! (`"/issue/number"`, RFC 6901), a literal (`"form.submitted"`), or a template joining
//! literals, pointers and headers (`"github.{header:X-GitHub-Event}.{/action}"`; `{{` and `}}`
//! are literal braces).
//!
//! Invariant: a `Template` is checked when deserialised (every pointer starts with `/`, every
//! `{` is closed, every header name is non-empty), and rendering it never panics: a missing
//! value or one of the wrong type is a [`MapError`] naming the mapping key and the pointer or
//! header.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// Text used as written.
    Literal(String),
    /// A JSON Pointer (RFC 6901) into the body.
    Pointer(String),
    /// A request header, by name (case-insensitive).
    Header(String),
}

/// A checked template; serialised back as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Template {
    written: String,
    parts: Vec<Part>,
}

/// A template that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("template `{0}` is empty")]
    Empty(String),
    #[error("template `{0}` has a `{{` that is never closed")]
    Unclosed(String),
    #[error("template `{0}` has a `}}` that closes nothing (write `}}}}` for a literal brace)")]
    Unopened(String),
    #[error(
        "template `{written}`: `{{{inner}}}` is neither a JSON Pointer (`{{/path}}`) nor a header \
         (`{{header:Name}}`)"
    )]
    UnknownPart { written: String, inner: String },
}

/// Why a mapped field has no usable value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("mapping `{key}`: the body has nothing at JSON Pointer `{pointer}`")]
    Missing { key: String, pointer: String },
    #[error("mapping `{key}`: the request has no `{header}` header")]
    MissingHeader { key: String, header: String },
    #[error("mapping `{key}`: JSON Pointer `{pointer}` holds {found}, not {expected}")]
    WrongType {
        key: String,
        pointer: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error("mapping `{key}`: `{template}` renders to an empty string")]
    Empty { key: String, template: String },
    #[error("the body is not JSON: {0}")]
    NotJson(String),
}

impl MapError {
    /// A stable word for logs and ledger details.
    pub fn detail(&self) -> &'static str {
        match self {
            MapError::Missing { .. } | MapError::MissingHeader { .. } => "missing_field",
            MapError::WrongType { .. } => "wrong_type",
            MapError::Empty { .. } => "empty_field",
            MapError::NotJson(_) => "malformed_body",
        }
    }
}

/// Reads a request header by case-insensitive name; what it returns lives as long as the
/// request's headers.
pub type HeaderFn<'h> = dyn Fn(&str) -> Option<&'h str> + 'h;

/// What a template reads: the body as JSON and the request's headers.
pub struct Input<'b, 'h> {
    pub body: &'b Value,
    pub header: &'h HeaderFn<'h>,
}

impl fmt::Debug for Input<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Input").field("body", self.body).finish()
    }
}

impl Template {
    /// The parts, in order.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Whether any part reads a header.
    pub fn reads_header(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Header(_)))
    }

    /// A lone pointer (`"/issue"` or `"{/issue}"`): a value of any JSON type can be taken.
    pub fn lone_pointer(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Pointer(pointer)] => Some(pointer),
            _ => None,
        }
    }

    /// The text for mapping `key`: scalars as text (strings unquoted), never an object, an
    /// array or null; never empty.
    pub fn render(&self, key: &str, input: &Input<'_, '_>) -> Result<String, MapError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Header(name) => match (input.header)(name) {
                    Some(value) => out.push_str(value),
                    None => {
                        return Err(MapError::MissingHeader {
                            key: key.to_owned(),
                            header: name.clone(),
                        });
                    }
                },
                Part::Pointer(pointer) => {
                    let value = lookup(key, pointer, input.body)?;
                    match value {
                        Value::String(s) => out.push_str(s),
                        Value::Number(n) => out.push_str(&n.to_string()),
                        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                        other => {
                            return Err(MapError::WrongType {
                                key: key.to_owned(),
                                pointer: pointer.clone(),
                                found: type_name(other),
                                expected: "a string, number or boolean",
                            });
                        }
                    }
                }
            }
        }
        if out.trim().is_empty() {
            return Err(MapError::Empty {
                key: key.to_owned(),
                template: self.written.clone(),
            });
        }
        Ok(out)
    }

    /// The value for a payload entry: a lone pointer keeps its JSON type (`null` refused as
    /// missing), anything else is rendered as text.
    pub fn value(&self, key: &str, input: &Input<'_, '_>) -> Result<Value, MapError> {
        match self.lone_pointer() {
            Some(pointer) => lookup(key, pointer, input.body).cloned(),
            None => self.render(key, input).map(Value::String),
        }
    }
}

/// The value at `pointer`; absent or `null` is missing.
pub fn lookup<'v>(key: &str, pointer: &str, body: &'v Value) -> Result<&'v Value, MapError> {
    match body.pointer(pointer) {
        Some(Value::Null) | None => Err(MapError::Missing {
            key: key.to_owned(),
            pointer: pointer.to_owned(),
        }),
        Some(value) => Ok(value),
    }
}

/// The JSON type's name, for errors.
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl TryFrom<String> for Template {
    type Error = TemplateError;

    fn try_from(written: String) -> Result<Self, Self::Error> {
        if written.is_empty() {
            return Err(TemplateError::Empty(written));
        }
        if written.starts_with('/') && !written.contains(['{', '}']) {
            return Ok(Template {
                parts: vec![Part::Pointer(written.clone())],
                written,
            });
        }
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = written.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(TemplateError::Unopened(written)),
                '{' => {
                    let mut inner = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        inner.push(c);
                    }
                    if !closed {
                        return Err(TemplateError::Unclosed(written));
                    }
                    let part = if inner.starts_with('/') {
                        Part::Pointer(inner)
                    } else if let Some(name) = inner.strip_prefix("header:")
                        && !name.trim().is_empty()
                    {
                        Part::Header(name.trim().to_owned())
                    } else {
                        return Err(TemplateError::UnknownPart { written, inner });
                    };
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(part);
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Template { written, parts })
    }
}

impl From<Template> for String {
    fn from(template: Template) -> Self {
        template.written
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}
