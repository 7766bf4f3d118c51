//! W3C Trace Context (`traceparent`, `tracestate`): strict parsing of what a sender sent and the
//! canonical text that is stored and sent on. Pure; no exporter needed.

use std::borrow::Cow;

use axum::http::HeaderMap;

/// A trace context as stored on the ledger row and the run and sent with every dispatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// A valid version-00 `traceparent` (55 characters, lowercase hex).
    pub traceparent: String,
    /// The `tracestate` that came with it, when it was well-formed.
    pub tracestate: Option<String>,
}

/// The fields of a valid `traceparent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub flags: u8,
}

impl TraceParent {
    /// The `sampled` flag: the sender recorded this trace.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The canonical header text (`00-<trace-id>-<parent-id>-<flags>`).
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex::encode(self.trace_id),
            hex::encode(self.parent_id),
            self.flags
        )
    }
}

/// Why a `traceparent` was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TraceparentError {
    #[error("a version-00 traceparent is 55 characters, this one is {0}")]
    Length(usize),
    #[error("the fields must be separated by `-`")]
    Delimiters,
    #[error("only version 00 is understood")]
    Version,
    #[error("the {0} is not lowercase hex")]
    NotLowercaseHex(&'static str),
    #[error("the trace-id is all zeros")]
    ZeroTraceId,
    #[error("the parent-id is all zeros")]
    ZeroParentId,
    #[error("more than one traceparent header")]
    Repeated,
}

/// Parses a `traceparent` strictly, per the W3C Trace Context spec: version `00`, then
/// 32 and 16 lowercase hex digits that are not all zero, then two of flags.
pub fn parse_traceparent(text: &str) -> Result<TraceParent, TraceparentError> {
    let bytes = text.as_bytes();
    if bytes.len() != 55 {
        return Err(TraceparentError::Length(bytes.len()));
    }
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return Err(TraceparentError::Delimiters);
    }
    let version = hex_field::<1>(&bytes[0..2], "version")?;
    if version != [0] {
        return Err(TraceparentError::Version);
    }
    let trace_id = hex_field::<16>(&bytes[3..35], "trace-id")?;
    let parent_id = hex_field::<8>(&bytes[36..52], "parent-id")?;
    let [flags] = hex_field::<1>(&bytes[53..55], "trace-flags")?;
    if trace_id == [0; 16] {
        return Err(TraceparentError::ZeroTraceId);
    }
    if parent_id == [0; 8] {
        return Err(TraceparentError::ZeroParentId);
    }
    Ok(TraceParent {
        trace_id,
        parent_id,
        flags,
    })
}

fn hex_field<const N: usize>(
    digits: &[u8],
    field: &'static str,
) -> Result<[u8; N], TraceparentError> {
    if !digits
        .iter()
        .all(|d| d.is_ascii_digit() || (b'a'..=b'f').contains(d))
    {
        return Err(TraceparentError::NotLowercaseHex(field));
    }
    let mut out = [0; N];
    hex::decode_to_slice(digits, &mut out).map_err(|_| TraceparentError::NotLowercaseHex(field))?;
    Ok(out)
}

/// Most characters of `tracestate` kept (the spec asks vendors to propagate at least 512).
const MAX_TRACESTATE: usize = 512;
/// Most list members of a `tracestate`.
const MAX_MEMBERS: usize = 32;

/// Whether `text` is a well-formed `tracestate` list: at most 32 `key=value` members,
/// lowercase keys (optionally `tenant@system`), printable values without `,` or `=`.
pub fn valid_tracestate(text: &str) -> bool {
    if text.len() > MAX_TRACESTATE {
        return false;
    }
    let mut members = 0;
    for member in text.split(',') {
        let member = member.trim_matches([' ', '\t']);
        if member.is_empty() {
            continue;
        }
        members += 1;
        let Some((key, value)) = member.split_once('=') else {
            return false;
        };
        if !valid_key(key) || !valid_value(value) {
            return false;
        }
    }
    members <= MAX_MEMBERS
}

fn valid_key(key: &str) -> bool {
    // simple-key = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/");
    // multi-tenant-key = (lcalpha / DIGIT) 0*240(...) "@" lcalpha 0*13(...).
    let rest_ok = |part: &[u8]| {
        part.iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/".contains(b))
    };
    let part = |part: &str, max: usize, digit_first: bool| {
        let bytes = part.as_bytes();
        match bytes.split_first() {
            Some((first, rest)) => {
                (first.is_ascii_lowercase() || (digit_first && first.is_ascii_digit()))
                    && bytes.len() <= max
                    && rest_ok(rest)
            }
            None => false,
        }
    };
    match key.split_once('@') {
        None => part(key, 256, false),
        Some((tenant, system)) => part(tenant, 241, true) && part(system, 14, false),
    }
}

fn valid_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 256
        && bytes.last() != Some(&b' ')
        && bytes
            .iter()
            .all(|&b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=')
}

impl TraceContext {
    /// The context of `traceparent` (and `tracestate`) text as a sender wrote it; an invalid
    /// traceparent is ignored, and so is its tracestate; an invalid tracestate alone is
    /// dropped. Each is logged at debug level, never refused.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<(Self, TraceParent)> {
        let parent = match parse_traceparent(traceparent) {
            Ok(parent) => parent,
            Err(error) => {
                tracing::debug!(%error, traceparent, "ignoring an invalid traceparent");
                return None;
            }
        };
        let tracestate = tracestate.filter(|state| {
            let valid = valid_tracestate(state);
            if !valid {
                tracing::debug!(tracestate = state, "ignoring an invalid tracestate");
            }
            valid
        });
        Some((
            Self {
                traceparent: parent.header(),
                tracestate: tracestate.map(str::to_owned),
            },
            parent,
        ))
    }

    /// The context in `headers`: `<prefix>traceparent` and `<prefix>tracestate` (the prefix is
    /// empty for plain HTTP, `ce-` for a binary-mode CloudEvent). Repeated `tracestate`
    /// headers are one list; a repeated `traceparent` is invalid.
    pub fn from_headers(headers: &HeaderMap, prefix: &str) -> Option<(Self, TraceParent)> {
        // The usual prefixes cost no allocation: this runs for every intake request.
        let (parent_name, state_name): (Cow<'_, str>, Cow<'_, str>) = match prefix {
            "" => ("traceparent".into(), "tracestate".into()),
            "ce-" => ("ce-traceparent".into(), "ce-tracestate".into()),
            _ => (
                format!("{prefix}traceparent").into(),
                format!("{prefix}tracestate").into(),
            ),
        };
        let mut parents = headers.get_all(parent_name.as_ref()).iter();
        let parent = parents.next()?;
        if parents.next().is_some() {
            tracing::debug!(error = %TraceparentError::Repeated, "ignoring the traceparent");
            return None;
        }
        let Ok(parent) = parent.to_str() else {
            tracing::debug!("ignoring a traceparent that is not ASCII text");
            return None;
        };
        let states: Vec<&str> = headers
            .get_all(state_name.as_ref())
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect();
        let state = match states.as_slice() {
            [] => None,
            [one] => Some((*one).to_owned()),
            many => Some(many.join(",")),
        };
        Self::parse(parent, state.as_deref())
    }

    /// The parsed `traceparent` (always valid: it was checked when the context was made, or
    /// read back from the store, where only valid ones are written).
    pub fn parent(&self) -> Option<TraceParent> {
        parse_traceparent(&self.traceparent).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read_field_by_field() {
        let parent = parse_traceparent(VALID).expect("valid");
        assert_eq!(
            hex::encode(parent.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(hex::encode(parent.parent_id), "00f067aa0ba902b7");
        assert!(parent.sampled());
        assert_eq!(parent.header(), VALID);
        let unsampled =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .expect("valid");
        assert!(!unsampled.sampled());
        // Flags other than `sampled` are kept as they came.
        let other = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03")
            .expect("valid");
        assert!(other.sampled());
        assert_eq!(other.flags, 3);
    }

    #[test]
    fn every_kind_of_invalid_traceparent_is_refused() {
        use TraceparentError::*;
        let cases: &[(&str, TraceparentError)] = &[
            ("", Length(0)),
            (&VALID[..54], Length(54)),
            (&format!("{VALID}-01"), Length(58)),
            (
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Version,
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Version,
            ),
            (
                "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                NotLowercaseHex("version"),
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                NotLowercaseHex("trace-id"),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
                NotLowercaseHex("trace-id"),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
                NotLowercaseHex("parent-id"),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0Z",
                NotLowercaseHex("trace-flags"),
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                ZeroTraceId,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                ZeroParentId,
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Delimiters,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
                Delimiters,
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
                Delimiters,
            ),
            (
                " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b701",
                Delimiters,
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_traceparent(text), Err(*expected), "{text:?}");
        }
    }

    #[test]
    fn tracestate_is_kept_only_when_well_formed() {
        for valid in [
            "congo=t61rcWkgMzE",
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            "rojo=1 , congo=2",
            "tenant1@vendor=x",
            "a_b-c*d/e=v",
            "",
        ] {
            assert!(valid_tracestate(valid), "{valid:?}");
        }
        let too_many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        let too_long = format!("k={}", "v".repeat(600));
        for invalid in [
            "Congo=t61",
            "congo",
            "congo=",
            "congo=a,b",
            "congo=a=b",
            "1abc=x",
            "k=v\u{7f}",
            too_many.as_str(),
            too_long.as_str(),
        ] {
            assert!(!valid_tracestate(invalid), "{invalid:?}");
        }
    }

    #[test]
    fn headers_give_the_context_or_nothing() {
        let mut headers = HeaderMap::new();
        assert!(TraceContext::from_headers(&headers, "").is_none());
        headers.insert("traceparent", VALID.parse().expect("header"));
        headers.append("tracestate", "rojo=1".parse().expect("header"));
        headers.append("tracestate", "congo=2".parse().expect("header"));
        let (context, parent) = TraceContext::from_headers(&headers, "").expect("valid");
        assert_eq!(context.traceparent, VALID);
        assert_eq!(context.tracestate.as_deref(), Some("rojo=1,congo=2"));
        assert!(parent.sampled());
        assert!(
            TraceContext::from_headers(&headers, "ce-").is_none(),
            "a CloudEvent's context is in ce- headers"
        );

        let mut ce = HeaderMap::new();
        ce.insert("ce-traceparent", VALID.parse().expect("header"));
        ce.insert("ce-tracestate", "Bad State".parse().expect("header"));
        let (context, _) = TraceContext::from_headers(&ce, "ce-").expect("valid");
        assert_eq!(context.tracestate, None, "an invalid tracestate is dropped");

        let mut twice = HeaderMap::new();
        twice.append("traceparent", VALID.parse().expect("header"));
        twice.append("traceparent", VALID.parse().expect("header"));
        assert!(TraceContext::from_headers(&twice, "").is_none());

        let mut invalid = HeaderMap::new();
        invalid.insert(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
                .parse()
                .expect("header"),
        );
        invalid.insert("tracestate", "rojo=1".parse().expect("header"));
        assert!(TraceContext::from_headers(&invalid, "").is_none());
    }
}
