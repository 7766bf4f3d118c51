//! Reading one CloudEvent from an HTTP request, in structured or binary content mode
//! (CloudEvents 1.0 HTTP protocol binding, JSON event format). Batched mode is refused.

use serde_json::{Map, Value};

/// Media type of structured mode.
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// Media type of batched mode, which this adapter refuses.
pub const BATCH_CONTENT_TYPE: &str = "application/cloudevents-batch+json";
/// The header whose presence marks binary mode.
pub const SPECVERSION_HEADER: &str = "ce-specversion";

/// The request's headers, as the adapter reads them: lower-case names, values as sent.
pub trait Headers {
    /// The value of `name` (lower case), if present and text.
    fn header(&self, name: &str) -> Option<&str>;
    /// Every `(name, value)` pair, names in lower case.
    fn pairs(&self) -> Vec<(&str, &str)>;
}

impl Headers for [(&str, &str)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    fn pairs(&self) -> Vec<(&str, &str)> {
        self.to_vec()
    }
}

/// How the event arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The whole event in a `application/cloudevents+json` body.
    Structured,
    /// Attributes in `ce-*` headers, `data` as the body.
    Binary,
}

/// A CloudEvent's `data`, as it was carried.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// No data.
    None,
    /// JSON data (`data` in structured mode; a JSON body in binary mode).
    Json(Value),
    /// Text data (a `text/*` body in binary mode).
    Text(String),
    /// Binary data, base64 (`data_base64` in structured mode; any other body in binary mode).
    Base64(String),
}

/// One parsed CloudEvent. Attribute names as in the spec; `event_type` is `type`.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEvent {
    pub mode: Mode,
    pub specversion: String,
    pub id: String,
    pub source: String,
    pub event_type: String,
    pub subject: Option<String>,
    pub time: Option<String>,
    pub datacontenttype: Option<String>,
    pub dataschema: Option<String>,
    pub data: Data,
    /// Extension attributes (`tenantid`, `traceparent`, ...), by name.
    pub extensions: Map<String, Value>,
}

/// Why a request is not one CloudEvent this adapter accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// `application/cloudevents-batch+json`: one event per request only.
    #[error(
        "batched content mode (application/cloudevents-batch+json) is not supported: send one \
         event per request, in structured (application/cloudevents+json) or binary (ce-* headers) mode"
    )]
    Batched,
    /// Neither a structured content type nor `ce-specversion`.
    #[error(
        "not a CloudEvent: expected Content-Type application/cloudevents+json (structured mode) \
         or a ce-specversion header (binary mode), got Content-Type `{0}`"
    )]
    NotACloudEvent(String),
    /// The structured body is not a JSON object.
    #[error("the structured event is not a JSON object: {0}")]
    InvalidJson(String),
    /// A binary-mode body declared as JSON does not parse.
    #[error("the body is declared as JSON ({content_type}) but does not parse: {error}")]
    InvalidJsonData { content_type: String, error: String },
    /// A required attribute is absent or empty.
    #[error("required attribute `{0}` is missing or empty")]
    MissingAttribute(&'static str),
    /// `specversion` is not `1.0`.
    #[error("specversion `{0}` is not supported (only 1.0)")]
    UnsupportedSpecVersion(String),
    /// An attribute has the wrong JSON type or an unreadable value.
    #[error("attribute `{name}`: {problem}")]
    InvalidAttribute { name: String, problem: String },
}

impl ParseError {
    /// A stable machine-readable code for the answer's detail.
    pub fn detail(&self) -> &'static str {
        match self {
            ParseError::Batched => "batched_mode_unsupported",
            ParseError::NotACloudEvent(_) => "not_a_cloudevent",
            ParseError::InvalidJson(_) => "invalid_json",
            ParseError::InvalidJsonData { .. } => "invalid_json_data",
            ParseError::MissingAttribute(_) => "missing_attribute",
            ParseError::UnsupportedSpecVersion(_) => "unsupported_specversion",
            ParseError::InvalidAttribute { .. } => "invalid_attribute",
        }
    }

    /// True when the request is in a content mode this endpoint does not take (answered 415,
    /// nothing recorded); everything else is an authenticated but malformed event.
    pub fn is_unsupported_media_type(&self) -> bool {
        matches!(self, ParseError::Batched | ParseError::NotACloudEvent(_))
    }
}

/// The media type of a Content-Type value: lower case, parameters dropped.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn is_json_media_type(media: &str) -> bool {
    media == "application/json" || media.ends_with("+json") || media == "text/json"
}

/// Reads the event in the mode the request uses: the Content-Type decides structured and
/// batched mode; otherwise `ce-specversion` marks binary mode.
pub fn parse<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> Result<CloudEvent, ParseError> {
    let content_type = headers.header("content-type").unwrap_or("");
    let media = media_type(content_type);
    if media == BATCH_CONTENT_TYPE {
        return Err(ParseError::Batched);
    }
    if media == STRUCTURED_CONTENT_TYPE {
        return parse_structured(body);
    }
    if headers.header(SPECVERSION_HEADER).is_some() {
        return parse_binary(headers, body, content_type);
    }
    Err(ParseError::NotACloudEvent(content_type.to_owned()))
}

fn parse_structured(body: &[u8]) -> Result<CloudEvent, ParseError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ParseError::InvalidJson(e.to_string()))?;
    let Value::Object(mut object) = value else {
        return Err(ParseError::InvalidJson("the body is not an object".into()));
    };
    let mut take = |name: &'static str| -> Result<Option<String>, ParseError> {
        match object.remove(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(ParseError::InvalidAttribute {
                name: name.into(),
                problem: format!("must be a string, got {other}"),
            }),
        }
    };
    let specversion = take("specversion")?;
    let id = take("id")?;
    let source = take("source")?;
    let event_type = take("type")?;
    let subject = take("subject")?;
    let time = take("time")?;
    let datacontenttype = take("datacontenttype")?;
    let dataschema = take("dataschema")?;
    let data_base64 = take("data_base64")?;
    let data = match (object.remove("data").filter(|v| !v.is_null()), data_base64) {
        (Some(_), Some(_)) => {
            return Err(ParseError::InvalidAttribute {
                name: "data".into(),
                problem: "`data` and `data_base64` are mutually exclusive".into(),
            });
        }
        (None, None) => Data::None,
        (None, Some(encoded)) => Data::Base64(encoded),
        (Some(json), None) => Data::Json(json),
    };
    // Null-valued extensions are unset (the spec's own examples use `"unsetextension": null`).
    object.retain(|_, v| !v.is_null());
    build(
        Mode::Structured,
        [specversion, id, source, event_type],
        subject,
        time,
        datacontenttype,
        dataschema,
        data,
        object,
    )
}

fn parse_binary<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    content_type: &str,
) -> Result<CloudEvent, ParseError> {
    let mut attributes = Map::new();
    for (name, value) in headers.pairs() {
        let name = name.to_ascii_lowercase();
        if let Some(attribute) = name.strip_prefix("ce-")
            && !attribute.is_empty()
        {
            attributes.insert(attribute.to_owned(), Value::String(percent_decode(value)));
        }
    }
    let mut take = |name: &str| match attributes.remove(name) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    let specversion = take("specversion");
    let id = take("id");
    let source = take("source");
    let event_type = take("type");
    let subject = take("subject");
    let time = take("time");
    let dataschema = take("dataschema");
    // In binary mode the body's own Content-Type is `datacontenttype`.
    let datacontenttype = (!content_type.is_empty()).then(|| content_type.to_owned());
    let media = media_type(content_type);
    let data = if body.is_empty() {
        Data::None
    } else if is_json_media_type(&media) {
        Data::Json(
            serde_json::from_slice(body).map_err(|e| ParseError::InvalidJsonData {
                content_type: content_type.to_owned(),
                error: e.to_string(),
            })?,
        )
    } else if media.starts_with("text/")
        && let Ok(text) = std::str::from_utf8(body)
    {
        Data::Text(text.to_owned())
    } else {
        use base64::Engine as _;
        Data::Base64(base64::engine::general_purpose::STANDARD.encode(body))
    };
    build(
        Mode::Binary,
        [specversion, id, source, event_type],
        subject,
        time,
        datacontenttype,
        dataschema,
        data,
        attributes,
    )
}

#[allow(clippy::too_many_arguments)]
fn build(
    mode: Mode,
    [specversion, id, source, event_type]: [Option<String>; 4],
    subject: Option<String>,
    time: Option<String>,
    datacontenttype: Option<String>,
    dataschema: Option<String>,
    data: Data,
    extensions: Map<String, Value>,
) -> Result<CloudEvent, ParseError> {
    let required = |name: &'static str, value: Option<String>| {
        value
            .filter(|v| !v.is_empty())
            .ok_or(ParseError::MissingAttribute(name))
    };
    let specversion = required("specversion", specversion)?;
    if specversion != "1.0" {
        return Err(ParseError::UnsupportedSpecVersion(specversion));
    }
    let id = required("id", id)?;
    let source = required("source", source)?;
    let event_type = required("type", event_type)?;
    if let Some(time) = &time
        && let Err(error) = chrono::DateTime::parse_from_rfc3339(time)
    {
        return Err(ParseError::InvalidAttribute {
            name: "time".into(),
            problem: format!("`{time}` is not an RFC 3339 timestamp ({error})"),
        });
    }
    for name in extensions.keys() {
        // Attribute names are lower-case letters and digits (spec section 3.1.1); anything
        // else in a structured body is a mistake worth naming, not an extension.
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        {
            return Err(ParseError::InvalidAttribute {
                name: name.clone(),
                problem: "attribute names are lower-case ASCII letters and digits".into(),
            });
        }
    }
    Ok(CloudEvent {
        mode,
        specversion,
        id,
        source,
        event_type,
        subject: subject.filter(|s| !s.is_empty()),
        time,
        datacontenttype,
        dataschema,
        data,
        extensions,
    })
}

/// Binary-mode header values are percent-encoded where they hold characters outside printable
/// ASCII (HTTP binding section 3.1.3.2); an invalid escape is kept as written.
fn percent_decode(value: &str) -> String {
    if !value.contains('%') {
        return value.to_owned();
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| value.to_owned())
}

fn hex(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn percent_escapes_decode_and_bad_ones_stay() {
        assert_eq!(percent_decode("Euro%20%E2%82%AC"), "Euro €");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("plain"), "plain");
    }
}
