//! The arguments digest of an audit event (`arguments_sha256`), computed from the arguments'
//! text as received, without a `serde_json::Value` (issue 39, item 1): a `tools/call` of 7.6 MiB
//! built a tree several times its size only to hash it.
//!
//! The digest is the same as before: SHA-256 of the canonical JSON (compact, object keys sorted
//! by their bytes, a repeated key's last value kept, numbers and strings as `serde_json` writes
//! them). It is computed by a `serde` visitor that hashes as it reads: arrays, strings and
//! numbers go straight into the hash; an object holds, for the time it is hashed, only its own
//! members' keys (borrowed from the text when they have no escapes) and the text of their
//! values, sorted, then hashes each value in turn. Text that has no canonical form (nested
//! deeper than [`MAX_DEPTH`], a number out of `f64`'s range, a lone UTF-16 surrogate escape)
//! is digested as received, byte for byte.
//!
//! Not responsible for: when a digest is made (only for requests that reach the call engine;
//! `super::CallFacts`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::transport::upstream::tools::write_string as write_json_string;

/// Deepest nesting given a canonical digest (as deep as `serde_json` parses a `Value`).
pub const MAX_DEPTH: usize = 128;

/// `sha256:<64 hex>` of the canonical JSON of `text` (one JSON value), or of `text` itself when
/// it has none (see the module docs).
pub fn of_text(text: &str) -> String {
    let mut hash = Sha256::new();
    if nested_deeper_than(text, MAX_DEPTH) {
        // Found before any parse: a parse that fails only at the limit cost 35 times the text
        // on the way (each level's value scanned into a raw value, then its error wrapped).
        hash.update(text.as_bytes());
        return crate::transport::upstream::tools::sha256_label(hash);
    }
    let mut reader = serde_json::Deserializer::from_str(text);
    let canonical = Canonical {
        hash: &mut hash,
        comma: false,
        depth: 0,
    }
    .deserialize(&mut reader)
    .and_then(|()| reader.end());
    if canonical.is_err() {
        hash = Sha256::new();
        hash.update(text.as_bytes());
    }
    crate::transport::upstream::tools::sha256_label(hash)
}

/// Whether arrays and objects in `text` nest more than `max` deep (brackets inside strings
/// not counted): one pass, no allocation.
fn nested_deeper_than(text: &str, max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in text.as_bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Hashes one JSON value canonically; `comma`: a `,` goes first (an array's later element).
struct Canonical<'h> {
    hash: &'h mut Sha256,
    comma: bool,
    depth: usize,
}

impl Canonical<'_> {
    fn nested(&mut self, comma: bool) -> Result<Canonical<'_>, &'static str> {
        if self.depth >= MAX_DEPTH {
            return Err("nested too deep for a canonical digest");
        }
        Ok(Canonical {
            hash: &mut *self.hash,
            comma,
            depth: self.depth + 1,
        })
    }

    fn put(&mut self, bytes: &[u8]) {
        self.hash.update(bytes);
    }

    fn put_json<E: de::Error>(&mut self, value: &impl serde::Serialize) -> Result<(), E> {
        serde_json::to_writer(HashOut(self.hash), value).map_err(E::custom)
    }
}

/// An `io::Write` into a hash.
struct HashOut<'h>(&'h mut Sha256);

impl std::io::Write for HashOut<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(mut self, reader: D) -> Result<(), D::Error> {
        if self.comma {
            self.put(b",");
        }
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(mut self, value: bool) -> Result<(), E> {
        self.put(if value { b"true" } else { b"false" });
        Ok(())
    }

    fn visit_i64<E: de::Error>(mut self, value: i64) -> Result<(), E> {
        self.put_json(&value)
    }

    fn visit_u64<E: de::Error>(mut self, value: u64) -> Result<(), E> {
        self.put_json(&value)
    }

    fn visit_f64<E: de::Error>(mut self, value: f64) -> Result<(), E> {
        self.put_json(&value)
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<(), E> {
        write_json_string(value, &mut HashOut(self.hash)).map_err(E::custom)
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.put(b"null");
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut items: A) -> Result<(), A::Error> {
        self.put(b"[");
        let mut comma = false;
        while let Some(()) =
            items.next_element_seed(self.nested(comma).map_err(de::Error::custom)?)?
        {
            comma = true;
        }
        self.put(b"]");
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut members: A) -> Result<(), A::Error> {
        let mut entries: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::new();
        while let Some(key) = members.next_key_seed(Key)? {
            entries.push((key, members.next_value()?));
        }
        // Stable: among equal keys the last stays last, and is the one kept.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        self.put(b"{");
        let mut comma = false;
        for (i, (key, value)) in entries.iter().enumerate() {
            if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if comma {
                self.put(b",");
            }
            comma = true;
            write_json_string(key, &mut HashOut(self.hash)).map_err(de::Error::custom)?;
            self.put(b":");
            let mut reader = serde_json::Deserializer::from_str(value.get());
            self.nested(false)
                .map_err(de::Error::custom)?
                .deserialize(&mut reader)
                .map_err(de::Error::custom)?;
        }
        self.put(b"}");
        Ok(())
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Self::Value, D::Error> {
        reader.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn nesting_is_measured_outside_strings_without_parsing() {
        assert!(!nested_deeper_than(r#"{"a":[1,{"b":2}]}"#, 3));
        assert!(nested_deeper_than(r#"{"a":[1,{"b":[2]}]}"#, 3));
        assert!(
            !nested_deeper_than(r#"{"a":"[[[[\"[[[["}"#, 1),
            "brackets in strings, escaped quotes included, do not count"
        );
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(nested_deeper_than(&deep, MAX_DEPTH));
        assert_eq!(
            of_text(&deep),
            of_text(&deep),
            "digested as received, stably"
        );
    }
    use crate::transport::upstream::tools::canonical_digest;

    #[test]
    fn digest_of_text_equals_the_canonical_digest_of_its_value() {
        let samples = [
            r#"{"b": [1, -2, 3.5, 1e10, true, null], "a": {"z": "q\"\n\u001b", "y": {}}}"#,
            r#"[{"k": 1, "k": 2}, "é", 18446744073709551615, -9223372036854775808, 0.1]"#,
            r#"{"\u0061": 1, "a\\b": [], "": {"x": [[]]}}"#,
            "\"plain\"",
            "  42  ",
        ];
        for text in samples {
            let value: Value = serde_json::from_str(text).expect("json");
            assert_eq!(of_text(text), canonical_digest(&value), "{text}");
        }
    }

    #[test]
    fn digest_of_text_ignores_key_order_and_whitespace() {
        let one = of_text(r#"{"query": "x", "limit": 3}"#);
        assert_eq!(one, of_text(r#"{ "limit":3,"query":"x" }"#));
        assert_eq!(one, canonical_digest(&json!({"limit": 3, "query": "x"})));
        assert_ne!(one, of_text(r#"{"query": "x", "limit": 4}"#));
    }

    #[test]
    fn digest_of_text_too_deep_is_the_digest_of_the_text() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let mut hash = Sha256::new();
        hash.update(deep.as_bytes());
        let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(of_text(&deep), format!("sha256:{hex}"));
        let objects = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
        assert!(of_text(&objects).starts_with("sha256:"));
    }
}
