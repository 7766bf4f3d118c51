//! Trigger conditions (`when`): a small deterministic predicate over an event's normalised
//! payload, parsed and checked once at config load, evaluated per event without allocating.
//!
//! As an admin writes it (TOML inline tables):
//!
//! ```toml
//! when = { field = "priority", equals = "urgent" }
//! when = { field = "priority", in = ["urgent", "high"] }
//! when = { field = "assignee_id", exists = true }
//! when = { not = { field = "status", equals = "closed" } }
//! when = { any = [ { field = "priority", equals = "urgent" }, { field = "tags", equals = "vip" } ] }
//! ```
//!
//! `field` is a dot-separated path into the payload (`data.priority`, `event.comment.is_public`;
//! a numeric segment indexes an array). `equals` holds when the value there is equal (numbers by
//! value, strings exactly), or, when it is an array, when one of its elements is (so
//! `tags equals "vip"` means "tagged vip"); `in` holds when `equals` holds for one of the
//! listed values; `exists = true` holds when the path leads to a non-null value. `all` and
//! `any` take a non-empty list, `not` one condition.
//!
//! Invariant: evaluation is a pure function of the condition and the payload; it never
//! allocates, never fails and never panics (an absent path is simply "not equal").

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A checked condition. Built only through [`TryFrom<ConditionSpec>`] (serde does it), so every
/// path is valid and every list non-empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ConditionSpec", into = "ConditionSpec")]
pub enum Condition {
    /// `field = value`.
    Equals {
        path: FieldPath,
        value: Value,
    },
    /// `field in [..]`.
    In {
        path: FieldPath,
        values: Vec<Value>,
    },
    /// `field exists` (or, with `false`, does not).
    Exists {
        path: FieldPath,
        exists: bool,
    },
    Not(Box<Condition>),
    All(Vec<Condition>),
    Any(Vec<Condition>),
}

/// A path into the payload: non-empty segments of letters, digits, `_` and `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    segments: Vec<String>,
}

/// The form as written: one operator per table, `deny_unknown_fields` so an unknown operator
/// is an error naming itself (and, through the TOML parser, its line).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionSpec {
    /// The payload path `equals`, `in` and `exists` test.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Holds when the field equals this value (or, for an array field, contains it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    /// Holds when the field equals one of these values.
    #[serde(default, rename = "in", skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Value>>,
    /// `true`: the field is present and not null; `false`: it is absent or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
    /// Holds when this condition does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not: Option<Box<ConditionSpec>>,
    /// Holds when every one of these holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<Vec<ConditionSpec>>,
    /// Holds when at least one of these holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<ConditionSpec>>,
}

/// Why a written condition was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error(
        "a condition needs exactly one operator (`equals`, `in`, `exists`, `not`, `all` or \
         `any`), found {0}"
    )]
    Operators(String),
    #[error("`{0}` needs a `field` to test")]
    MissingField(&'static str),
    #[error("`{0}` takes no `field`: it combines other conditions")]
    UnexpectedField(&'static str),
    #[error(
        "field path `{0}` is not valid: use dot-separated names of letters, digits, `_` and `-` \
         (e.g. `data.priority`)"
    )]
    BadPath(String),
    #[error("`{0}` needs at least one entry")]
    Empty(&'static str),
    #[error("`{0}` compares with strings, numbers, booleans or null only, found {1}")]
    NotScalar(&'static str, String),
}

impl FieldPath {
    /// Parses `a.b.0.c`.
    pub fn parse(text: &str) -> Result<Self, ConditionError> {
        let valid = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
        if text.is_empty() || !segments.iter().all(|s| valid(s)) {
            return Err(ConditionError::BadPath(text.to_owned()));
        }
        Ok(Self {
            text: text.to_owned(),
            segments,
        })
    }

    /// The value at this path, if every segment leads somewhere.
    pub fn resolve<'v>(&self, payload: &'v Value) -> Option<&'v Value> {
        self.segments
            .iter()
            .try_fold(payload, |value, segment| match value {
                Value::Object(map) => map.get(segment),
                Value::Array(items) => items.get(segment.parse::<usize>().ok()?),
                _ => None,
            })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

fn scalar(operator: &'static str, value: &Value) -> Result<(), ConditionError> {
    match value {
        Value::Array(_) | Value::Object(_) => {
            Err(ConditionError::NotScalar(operator, value.to_string()))
        }
        _ => Ok(()),
    }
}

impl TryFrom<ConditionSpec> for Condition {
    type Error = ConditionError;

    fn try_from(spec: ConditionSpec) -> Result<Self, Self::Error> {
        let mut operators = Vec::new();
        for (name, present) in [
            ("equals", spec.equals.is_some()),
            ("in", spec.one_of.is_some()),
            ("exists", spec.exists.is_some()),
            ("not", spec.not.is_some()),
            ("all", spec.all.is_some()),
            ("any", spec.any.is_some()),
        ] {
            if present {
                operators.push(name);
            }
        }
        if operators.len() != 1 {
            let found = if operators.is_empty() {
                "none".to_owned()
            } else {
                operators.join(", ")
            };
            return Err(ConditionError::Operators(found));
        }
        let path = |operator: &'static str| match &spec.field {
            Some(text) => FieldPath::parse(text),
            None => Err(ConditionError::MissingField(operator)),
        };
        let no_field = |operator: &'static str| match spec.field {
            Some(_) => Err(ConditionError::UnexpectedField(operator)),
            None => Ok(()),
        };
        let list = |operator: &'static str, items: Vec<ConditionSpec>| {
            if items.is_empty() {
                return Err(ConditionError::Empty(operator));
            }
            items.into_iter().map(Condition::try_from).collect()
        };
        Ok(if let Some(value) = spec.equals.clone() {
            scalar("equals", &value)?;
            Condition::Equals {
                path: path("equals")?,
                value,
            }
        } else if let Some(values) = spec.one_of.clone() {
            if values.is_empty() {
                return Err(ConditionError::Empty("in"));
            }
            for value in &values {
                scalar("in", value)?;
            }
            Condition::In {
                path: path("in")?,
                values,
            }
        } else if let Some(exists) = spec.exists {
            Condition::Exists {
                path: path("exists")?,
                exists,
            }
        } else if let Some(inner) = spec.not {
            no_field("not")?;
            Condition::Not(Box::new(Condition::try_from(*inner)?))
        } else if let Some(items) = spec.all {
            no_field("all")?;
            Condition::All(list("all", items)?)
        } else if let Some(items) = spec.any {
            no_field("any")?;
            Condition::Any(list("any", items)?)
        } else {
            return Err(ConditionError::Operators("none".into()));
        })
    }
}

impl From<Condition> for ConditionSpec {
    fn from(condition: Condition) -> Self {
        let field = |path: FieldPath| Some(path.text);
        match condition {
            Condition::Equals { path, value } => ConditionSpec {
                field: field(path),
                equals: Some(value),
                ..Default::default()
            },
            Condition::In { path, values } => ConditionSpec {
                field: field(path),
                one_of: Some(values),
                ..Default::default()
            },
            Condition::Exists { path, exists } => ConditionSpec {
                field: field(path),
                exists: Some(exists),
                ..Default::default()
            },
            Condition::Not(inner) => ConditionSpec {
                not: Some(Box::new((*inner).into())),
                ..Default::default()
            },
            Condition::All(items) => ConditionSpec {
                all: Some(items.into_iter().map(Into::into).collect()),
                ..Default::default()
            },
            Condition::Any(items) => ConditionSpec {
                any: Some(items.into_iter().map(Into::into).collect()),
                ..Default::default()
            },
        }
    }
}

/// Scalar equality: numbers by value (so `5` equals `5.0`), everything else exactly.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// `found` equals `wanted`, or is an array with an element that does.
fn matches(found: &Value, wanted: &Value) -> bool {
    match found {
        Value::Array(items) => items.iter().any(|item| same(item, wanted)),
        _ => same(found, wanted),
    }
}

impl Condition {
    /// Whether the condition holds for `payload`.
    pub fn holds(&self, payload: &Value) -> bool {
        match self {
            Condition::Equals { path, value } => path
                .resolve(payload)
                .is_some_and(|found| matches(found, value)),
            Condition::In { path, values } => path
                .resolve(payload)
                .is_some_and(|found| values.iter().any(|value| matches(found, value))),
            Condition::Exists { path, exists } => {
                path.resolve(payload).is_some_and(|v| !v.is_null()) == *exists
            }
            Condition::Not(inner) => !inner.holds(payload),
            Condition::All(items) => items.iter().all(|c| c.holds(payload)),
            Condition::Any(items) => items.iter().any(|c| c.holds(payload)),
        }
    }

    /// `None` when the condition holds; otherwise the part that failed, with what the payload
    /// had there: `priority = "urgent" (found "low")`. Only called on the slow path (a refusal
    /// to explain, `switchyard route`).
    pub fn failure(&self, payload: &Value) -> Option<String> {
        if self.holds(payload) {
            return None;
        }
        let found = |path: &FieldPath| match path.resolve(payload) {
            Some(value) => format!("found {value}"),
            None => "absent".to_owned(),
        };
        Some(match self {
            Condition::Equals { path, .. }
            | Condition::In { path, .. }
            | Condition::Exists { path, .. } => format!("{self} ({})", found(path)),
            Condition::All(items) => items
                .iter()
                .find_map(|c| c.failure(payload))
                .unwrap_or_else(|| self.to_string()),
            Condition::Not(_) | Condition::Any(_) => format!("{self} does not hold"),
        })
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, name: &str, items: &[Condition]| {
            write!(f, "{name}(")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{item}")?;
            }
            f.write_str(")")
        };
        match self {
            Condition::Equals { path, value } => write!(f, "{} = {value}", path.as_str()),
            Condition::In { path, values } => {
                write!(f, "{} in {}", path.as_str(), Value::Array(values.clone()))
            }
            Condition::Exists { path, exists: true } => write!(f, "{} exists", path.as_str()),
            Condition::Exists {
                path,
                exists: false,
            } => write!(f, "{} does not exist", path.as_str()),
            Condition::Not(inner) => write!(f, "not({inner})"),
            Condition::All(items) => list(f, "all", items),
            Condition::Any(items) => list(f, "any", items),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn condition(value: Value) -> Result<Condition, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// One row per rule: the condition, the payload, whether it holds.
    #[test]
    fn conditions_evaluate_as_documented() {
        let ticket = json!({
            "priority": "urgent",
            "tags": ["vip", "billing"],
            "assignee_id": null,
            "count": 5,
            "event": {"comment": {"is_public": true}},
            "items": [{"sku": "A"}, {"sku": "B"}],
        });
        let cases: &[(Value, bool)] = &[
            (json!({"field": "priority", "equals": "urgent"}), true),
            (json!({"field": "priority", "equals": "Urgent"}), false),
            (json!({"field": "priority", "in": ["high", "urgent"]}), true),
            (json!({"field": "priority", "in": ["low"]}), false),
            (json!({"field": "tags", "equals": "vip"}), true),
            (json!({"field": "tags", "in": ["gold", "billing"]}), true),
            (json!({"field": "tags", "equals": "gold"}), false),
            (json!({"field": "count", "equals": 5.0}), true),
            (json!({"field": "count", "equals": "5"}), false),
            (
                json!({"field": "event.comment.is_public", "equals": true}),
                true,
            ),
            (json!({"field": "items.1.sku", "equals": "B"}), true),
            (json!({"field": "items.9.sku", "equals": "B"}), false),
            (json!({"field": "priority.deeper", "equals": "x"}), false),
            (json!({"field": "assignee_id", "exists": true}), false),
            (json!({"field": "assignee_id", "exists": false}), true),
            (json!({"field": "missing", "exists": false}), true),
            (json!({"field": "priority", "exists": true}), true),
            (json!({"not": {"field": "priority", "equals": "low"}}), true),
            (
                json!({"all": [{"field": "priority", "equals": "urgent"}, {"field": "tags", "equals": "vip"}]}),
                true,
            ),
            (
                json!({"all": [{"field": "priority", "equals": "urgent"}, {"field": "tags", "equals": "gold"}]}),
                false,
            ),
            (
                json!({"any": [{"field": "priority", "equals": "low"}, {"field": "tags", "equals": "vip"}]}),
                true,
            ),
            (
                json!({"any": [{"field": "priority", "equals": "low"}, {"field": "tags", "equals": "gold"}]}),
                false,
            ),
        ];
        for (spec, expected) in cases {
            let condition = condition(spec.clone()).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(condition.holds(&ticket), *expected, "{spec} ({condition})");
            assert_eq!(condition.failure(&ticket).is_none(), *expected, "{spec}");
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let cases: &[(Value, &str)] = &[
            (
                json!({"field": "priority", "like": "u%"}),
                "unknown field `like`",
            ),
            (json!({"field": "priority"}), "exactly one operator"),
            (
                json!({"field": "p", "equals": 1, "exists": true}),
                "found equals, exists",
            ),
            (json!({"equals": "x"}), "`equals` needs a `field`"),
            (json!({"field": "a..b", "equals": "x"}), "field path `a..b`"),
            (json!({"field": "", "equals": "x"}), "field path ``"),
            (json!({"field": "a b", "equals": "x"}), "field path `a b`"),
            (json!({"any": []}), "`any` needs at least one"),
            (json!({"field": "p", "in": []}), "`in` needs at least one"),
            (
                json!({"field": "p", "all": [{"field": "q", "exists": true}]}),
                "takes no `field`",
            ),
            (json!({"field": "p", "equals": ["a"]}), "strings, numbers"),
            (
                json!({"not": {"field": "p", "like": 1}}),
                "unknown field `like`",
            ),
        ];
        for (spec, needle) in cases {
            let error = condition(spec.clone()).expect_err("refused");
            assert!(error.contains(needle), "{spec}: {error}");
        }
    }

    #[test]
    fn failures_say_what_failed_and_what_was_found() {
        let payload = json!({"priority": "low", "tags": []});
        let c = condition(json!({"field": "priority", "equals": "urgent"})).unwrap();
        assert_eq!(
            c.failure(&payload).unwrap(),
            r#"priority = "urgent" (found "low")"#
        );
        let c = condition(
            json!({"all": [{"field": "tags", "exists": true}, {"field": "vip", "equals": true}]}),
        )
        .unwrap();
        assert_eq!(c.failure(&payload).unwrap(), "vip = true (absent)");
        let c = condition(json!({"any": [{"field": "priority", "equals": "urgent"}, {"field": "tags", "equals": "vip"}]})).unwrap();
        assert_eq!(
            c.failure(&payload).unwrap(),
            r#"any(priority = "urgent", tags = "vip") does not hold"#
        );
    }

    #[test]
    fn conditions_round_trip_through_their_written_form() {
        let spec = json!({"any": [{"field": "priority", "in": ["urgent"]}, {"not": {"field": "x", "exists": true}}]});
        let c = condition(spec.clone()).unwrap();
        assert_eq!(serde_json::to_value(&c).unwrap(), spec);
    }
}
