//! A JSON object read on demand: its keys borrowed from the body, each value kept as its raw
//! JSON text and parsed only when the normaliser reads it. A Zendesk body carries many fields
//! the payload never uses; parsing the whole body into a `Value` allocated every key and value
//! of it. Invariant: a key reads as it would from `serde_json::Map` (the last of duplicate keys
//! wins), and every value read is the `Value` a whole-body parse would have given it.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON object's entries in body order, each value unparsed.
#[derive(Debug, Default)]
pub(crate) struct Object<'a> {
    entries: Vec<(Key<'a>, &'a RawValue)>,
}

impl<'a> Object<'a> {
    /// `text` as an object. `Err` for text that is not JSON, and for JSON that is not an object
    /// (`serde_json::error::Category::Data`).
    pub(crate) fn parse(text: &'a [u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(text)
    }

    fn raw(&self, key: &str) -> Option<&'a RawValue> {
        self.entries
            .iter()
            .rev()
            .find(|(name, _)| name.0 == key)
            .map(|(_, value)| *value)
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// The value of `key`. The body was read as JSON already, so only a value no `Value` can
    /// hold (a number beyond `f64`) fails to parse here; it reads as absent.
    pub(crate) fn get(&self, key: &str) -> Option<Value> {
        self.raw(key)
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// The object at `key`, when the value there is one.
    pub(crate) fn object(&self, key: &str) -> Option<Object<'a>> {
        self.raw(key)
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
    }

    /// The string at `key`, when the value there is one.
    pub(crate) fn string(&self, key: &str) -> Option<Cow<'a, str>> {
        self.raw(key)
            .and_then(|raw| serde_json::from_str::<Key<'a>>(raw.get()).ok())
            .map(|text| text.0)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Object<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Object<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(entry) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    entries.push(entry);
                }
                Ok(Object { entries })
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// A JSON string, borrowed from the body unless it holds escapes.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_as_a_whole_body_parse_does() {
        let body = br#"{"a":1,"s":"x\"y","o":{"k":[1,{"n":null}]},"a":"last","big":1e400}"#;
        let object = Object::parse(body).expect("an object");
        // The last of duplicate keys wins, as in `serde_json::Map`.
        assert_eq!(object.get("a"), Some(Value::from("last")));
        assert_eq!(object.string("s").as_deref(), Some("x\"y"));
        assert_eq!(
            object.get("o"),
            Some(serde_json::json!({"k": [1, {"n": null}]}))
        );
        let inner = object.object("o").expect("an object");
        assert_eq!(inner.get("k"), Some(serde_json::json!([1, {"n": null}])));
        assert!(object.object("a").is_none(), "a string is not an object");
        assert!(object.string("o").is_none(), "an object is not a string");
        assert!(object.get("missing").is_none() && !object.contains_key("missing"));
        // Out of `f64`'s range: a `Value` cannot hold it, so it reads as absent.
        assert!(object.contains_key("big") && object.get("big").is_none());
    }

    #[test]
    fn tells_text_that_is_not_json_from_json_that_is_not_an_object() {
        use serde_json::error::Category;
        for (text, category) in [
            (&b"ticket 5158"[..], Category::Syntax),
            (b"", Category::Eof),
            (b"{\"a\":", Category::Eof),
            (b"[1,2]", Category::Data),
            (b"\"text\"", Category::Data),
        ] {
            let error = Object::parse(text).expect_err("not an object");
            assert_eq!(
                error.classify(),
                category,
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }
}
