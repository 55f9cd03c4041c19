//! One JSON-RPC message as it crossed the wire: its exact text, and a parsed view for reading.
//!
//! A proxy must not change the data it carries (issue 12, item 6): `params` and `result` reach
//! the other side byte for byte, so big integers beyond 2^53 or 2^64, `-0.0`, exponents, escaped
//! Unicode and key order survive. The proxy reads a message through its parsed view
//! ([`WireMessage::view`], also `Deref`) and rewrites only the members it owns (the JSON-RPC
//! request id, `_meta.progressToken`, `params.requestId` of a cancellation) by splicing the new
//! value into the text at the member's exact byte range ([`WireMessage::set`]). A message the
//! proxy builds itself ([`From<Value>`]) or rewrites by policy ([`WireMessage::rebuild`], e.g. a
//! `tools/list` result without the tools the policy hides) is serialized from its view.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON-RPC message: the exact text it arrived as (outer whitespace trimmed) and its parsed
/// view. Invariant: parsing `text` gives `view`.
///
/// Cloning is a reference count (a message is kept for resumption and relayed at once, issue
/// 14); a rewrite of a shared message copies it first.
#[derive(Clone, Debug)]
pub struct WireMessage {
    inner: Arc<Parsed>,
}

#[derive(Clone, Debug)]
struct Parsed {
    text: String,
    view: Value,
    /// Some member could not be held by the view (see [`WireMessage::parse`]).
    partial: bool,
}

/// A shared message's text as bytes ([`WireMessage::to_bytes`]).
struct TextOf(Arc<Parsed>);

impl AsRef<[u8]> for TextOf {
    fn as_ref(&self) -> &[u8] {
        self.0.text.as_bytes()
    }
}

/// How many levels of a message the view holds member by member when the whole message does
/// not fit a `Value`; the envelope and `params`/`result` members the proxy reads are within.
const PARTIAL_VIEW_LEVELS: usize = 4;

/// Why bytes are not one JSON value.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The bytes are not UTF-8 (JSON text is UTF-8; RFC 8259 §8.1).
    #[error("not UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    /// Not one JSON value (serde_json's message, with line and column).
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl WireMessage {
    /// Parses one JSON value from `bytes`, keeping its text.
    ///
    /// JSON that a `serde_json::Value` cannot hold is still carried (issue 12, items 6 and
    /// 8): nesting deeper than serde_json's 128 levels, numbers beyond the range of `f64`
    /// (`1e400`), lone UTF-16 surrogates in escapes. The view then holds the outer levels member
    /// by member and `null` in place of each member it cannot hold ([`Self::is_partial`]); the
    /// text is untouched.
    ///
    /// # Errors
    /// [`ParseError`] when `bytes` are not UTF-8 or not exactly one JSON value.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let text = std::str::from_utf8(bytes)?.trim_matches([' ', '\t', '\n', '\r']);
        let (view, partial) = match serde_json::from_str(text) {
            Ok(view) => (view, false),
            Err(error) => {
                // Syntax errors are errors; anything else is JSON a `Value` cannot hold.
                serde_json::from_str::<IgnoredAny>(text).map_err(|_| error)?;
                (partial_view(text, PARTIAL_VIEW_LEVELS), true)
            }
        };
        Ok(Self::new(text.to_owned(), view, partial))
    }

    /// Whether some member of the message could not be held by the view (it reads as `null`
    /// there; the text keeps it). A rewrite by [`Self::rebuild`] would lose it.
    pub fn is_partial(&self) -> bool {
        self.inner.partial
    }

    fn new(text: String, view: Value, partial: bool) -> Self {
        Self {
            inner: Arc::new(Parsed {
                text,
                view,
                partial,
            }),
        }
    }

    /// The exact text of the message.
    pub fn text(&self) -> &str {
        &self.inner.text
    }

    /// The text, for writing to the wire (copied only while a clone of the message is alive).
    pub fn into_text(self) -> String {
        Arc::try_unwrap(self.inner).map_or_else(|shared| shared.text.clone(), |own| own.text)
    }

    /// The text as bytes for a request body: shares the message, no copy (issue 14).
    pub fn to_bytes(&self) -> bytes::Bytes {
        bytes::Bytes::from_owner(TextOf(Arc::clone(&self.inner)))
    }

    /// The parsed view, for reading.
    pub fn view(&self) -> &Value {
        &self.inner.view
    }

    /// The parsed view, owned (copied only while a clone of the message is alive).
    pub fn into_view(self) -> Value {
        Arc::try_unwrap(self.inner).map_or_else(|shared| shared.view.clone(), |own| own.view)
    }

    /// Replaces the member at `path` (object keys from the top, e.g. `["params", "_meta",
    /// "progressToken"]`) with `value`, leaving every other byte as it was. Returns `false`, and
    /// changes nothing, when the member is absent (a missing key, or a step that is not an
    /// object). With duplicate keys the last one counts, as in the view.
    pub fn set(&mut self, path: &[&str], value: &Value) -> bool {
        let Some(range) = span(self.text(), path) else {
            return false;
        };
        let inner = Arc::make_mut(&mut self.inner);
        inner.text.replace_range(range, &value.to_string());
        let mut target = &mut inner.view;
        for key in path {
            match target.get_mut(*key) {
                Some(next) => target = next,
                None => return true,
            }
        }
        *target = value.clone();
        true
    }

    /// Adds the member `key: value` as the first member of the object at `path` (`[]`: the
    /// message itself), leaving every other byte as it was: for members one protocol revision
    /// requires and another lacks (MCP 2026-07-28 `resultType`, issue 13). Returns `false`, and
    /// changes nothing, when there is no object at `path` or it already has `key`.
    pub fn insert_member(&mut self, path: &[&str], key: &str, value: &Value) -> bool {
        let Some(range) = span(self.text(), path) else {
            return false;
        };
        if !self.text()[range.clone()].starts_with('{') {
            return false;
        }
        // A shared message is copied here even when the member turns out to be present: this
        // rewrite is rare (a modern result for a legacy peer).
        let inner = Arc::make_mut(&mut self.inner);
        let mut target = &mut inner.view;
        for step in path {
            match target.get_mut(*step) {
                Some(next) => target = next,
                None => return false,
            }
        }
        let Some(object) = target.as_object_mut().filter(|o| !o.contains_key(key)) else {
            return false;
        };
        let empty = object.is_empty();
        object.insert(key.to_owned(), value.clone());
        let member = format!(
            "{}:{value}{}",
            Value::String(key.to_owned()),
            if empty { "" } else { "," }
        );
        inner.text.insert_str(range.start + 1, &member);
        true
    }

    /// Sets the JSON-RPC request id: spliced in place when the message has one, added (and
    /// the message serialized from its view) when it has none.
    pub fn set_id(&mut self, id: &Value) {
        if !self.set(&["id"], id) {
            self.rebuild(|view| {
                if let Some(object) = view.as_object_mut() {
                    object.insert("id".into(), id.clone());
                }
            });
        }
    }

    /// Changes the view with `change` and serializes the message from it: for rewrites the
    /// proxy makes by policy, where byte-for-byte is given up on purpose.
    pub fn rebuild(&mut self, change: impl FnOnce(&mut Value)) {
        let inner = Arc::make_mut(&mut self.inner);
        change(&mut inner.view);
        inner.text = inner.view.to_string();
    }

    /// The text for one SSE `data` field: carriage returns can only be JSON whitespace (inside
    /// strings they are escaped) and SSE cannot carry them, so they are left out.
    pub fn sse_data(&self) -> Cow<'_, str> {
        let text = self.text();
        if text.contains('\r') {
            Cow::Owned(text.replace('\r', ""))
        } else {
            Cow::Borrowed(text)
        }
    }

    /// The text for one line of the stdio transport, which frames messages by newlines (MCP
    /// 2025-06-18, "Transports: stdio": messages contain no embedded newlines): line breaks can
    /// only be JSON whitespace, so each becomes a space.
    pub fn line(&self) -> Cow<'_, str> {
        let text = self.text();
        if text.contains(['\n', '\r']) {
            Cow::Owned(text.replace(['\n', '\r'], " "))
        } else {
            Cow::Borrowed(text)
        }
    }

    /// The first member name that appears twice in the envelope, in `params` or in
    /// `params._meta`, as a path such as `params.name`: parsers differ on which duplicate counts
    /// (serde_json and most take the last, some the first), so such a message means different
    /// things to the proxy and to the upstream, and a tool policy could be bypassed with
    /// `"name":"hidden","name":"allowed"`. `None` when every name is unique.
    pub fn duplicate_member(&self) -> Option<String> {
        let text = self.text();
        for path in [&[][..], &["params"], &["params", "_meta"]] {
            let range = if path.is_empty() {
                0..text.len()
            } else {
                span(text, path)?
            };
            let mut deserializer = serde_json::Deserializer::from_str(&text[range]);
            let Ok(keys) = KeysSeed.deserialize(&mut deserializer) else {
                continue;
            };
            if let Some(key) = first_repeated(&keys) {
                let mut name = path.join(".");
                if !name.is_empty() {
                    name.push('.');
                }
                return Some(name + key);
            }
        }
        None
    }

    /// Splits a JSON array (a batch) into its members, each with its exact text; `None` when
    /// the message is not an array.
    pub fn members(&self) -> Option<Vec<Self>> {
        let raws: Vec<&RawValue> = serde_json::from_str(self.text()).ok()?;
        let views = self.view().as_array()?;
        Some(
            raws.into_iter()
                .zip(views)
                .map(|(raw, view)| Self::new(raw.get().to_owned(), view.clone(), self.is_partial()))
                .collect(),
        )
    }
}

impl From<Value> for WireMessage {
    /// A message the proxy builds: its text is the view serialized.
    fn from(view: Value) -> Self {
        Self::new(view.to_string(), view, false)
    }
}

impl Deref for WireMessage {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.view()
    }
}

impl PartialEq for WireMessage {
    /// Equal when the texts are equal: two messages that mean the same but are written
    /// differently are different on the wire.
    fn eq(&self, other: &Self) -> bool {
        self.text() == other.text()
    }
}

impl fmt::Display for WireMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// The view of valid JSON `text` that a `Value` cannot hold whole: objects and arrays member by
/// member for `levels` levels, `null` for what still does not fit.
fn partial_view(text: &str, levels: usize) -> Value {
    if let Ok(view) = serde_json::from_str(text) {
        return view;
    }
    if levels == 0 {
        return Value::Null;
    }
    if let Ok(members) = serde_json::from_str::<std::collections::BTreeMap<String, &RawValue>>(text)
    {
        return Value::Object(
            members
                .into_iter()
                .map(|(key, raw)| (key, partial_view(raw.get(), levels - 1)))
                .collect(),
        );
    }
    if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(text) {
        return Value::Array(
            items
                .into_iter()
                .map(|raw| partial_view(raw.get(), levels - 1))
                .collect(),
        );
    }
    Value::Null
}

/// The byte range in `text` of the member at `path`.
fn span(text: &str, path: &[&str]) -> Option<Range<usize>> {
    let mut start = 0;
    let mut slice = text;
    for key in path {
        let member = member(slice, key)?;
        // `member` borrows from `slice`, so its offset is where it starts inside `slice`.
        start += member.get().as_ptr() as usize - slice.as_ptr() as usize;
        slice = member.get();
    }
    Some(start..start + slice.len())
}

/// The raw text of the last member named `key` of the JSON object `object`.
fn member<'a>(object: &'a str, key: &str) -> Option<&'a RawValue> {
    let mut deserializer = serde_json::Deserializer::from_str(object);
    MemberSeed(key)
        .deserialize(&mut deserializer)
        .ok()
        .flatten()
}

/// The first name in `keys` that an earlier one repeats. Without allocating for the few
/// members an envelope has; a set past [`SCAN_MEMBERS`], so a message with many members costs
/// linear time.
fn first_repeated<'k>(keys: &'k [Key<'_>]) -> Option<&'k str> {
    if keys.len() <= SCAN_MEMBERS {
        return keys
            .iter()
            .enumerate()
            .find(|(i, key)| keys[..*i].contains(key))
            .map(|(_, key)| key.as_str());
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    keys.iter()
        .find(|key| !seen.insert(key.as_str()))
        .map(Key::as_str)
}

/// Members compared pairwise by [`first_repeated`] before it uses a set.
const SCAN_MEMBERS: usize = 16;

/// A member name, borrowed from the message text unless it has escapes to decode.
#[derive(PartialEq, Eq)]
struct Key<'de>(Cow<'de, str>);

impl Key<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, name: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(name)))
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(name.to_owned())))
    }

    fn visit_string<E: serde::de::Error>(self, name: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(name)))
    }
}

/// The member names of a JSON object, in order, duplicates kept.
struct KeysSeed;

impl<'de> DeserializeSeed<'de> for KeysSeed {
    type Value = Vec<Key<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeysSeed {
    type Value = Vec<Key<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut keys = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            map.next_value::<IgnoredAny>()?;
            keys.push(key);
        }
        Ok(keys)
    }
}

struct MemberSeed<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for MemberSeed<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MemberSeed<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.as_str() == self.0 {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Numbers and strings a `Value` round trip changes: big integers, `-0.0`, exponents,
    /// escapes, key order, whitespace.
    const TRICKY: &str = r#"{"z":123456789012345678901234567890,"a":9007199254740993,"n":-0.0,"e":1e2,"E":2.50E-3,"u":"\u00e9\ud83d\ude00 é","s":"\/x","k":{"b":1,"a":[1.0, 2]}}"#;

    #[test]
    fn parse_keeps_the_exact_text() {
        let message = WireMessage::parse(format!(" \n{TRICKY}\r\n").as_bytes()).expect("parse");
        assert_eq!(message.text(), TRICKY);
        assert_eq!(message["k"]["b"], json!(1));
    }

    #[test]
    fn insert_member_adds_one_member_and_keeps_every_other_byte() {
        let text = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{TRICKY}}}"#);
        let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert!(message.insert_member(&["result"], "resultType", &json!("complete")));
        assert_eq!(
            message.text(),
            text.replace(r#""result":{"#, r#""result":{"resultType":"complete","#)
        );
        assert_eq!(message["result"]["resultType"], json!("complete"));
        assert!(
            !message.insert_member(&["result"], "resultType", &json!("x")),
            "present"
        );
        assert!(
            !message.insert_member(&["id"], "k", &json!(1)),
            "not an object"
        );
        let mut empty = WireMessage::parse(br#"{"id":2,"result": {} }"#).expect("parse");
        assert!(empty.insert_member(&["result"], "ttlMs", &json!(0)));
        assert_eq!(empty.text(), r#"{"id":2,"result": {"ttlMs":0} }"#);
        assert_eq!(
            WireMessage::parse(empty.text().as_bytes())
                .expect("valid")
                .view(),
            empty.view()
        );
    }

    #[test]
    fn set_splices_only_the_member() {
        let text = format!(
            r#"{{"jsonrpc":"2.0","id":"client-7","method":"tools/call","params":{{"name":"echo","arguments":{TRICKY},"_meta":{{"progressToken":"p1","x":1e2}}}}}}"#
        );
        let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert!(message.set(&["id"], &json!(41)));
        assert!(message.set(&["params", "_meta", "progressToken"], &json!("berth-41")));
        let expected = text
            .replace(r#""id":"client-7""#, r#""id":41"#)
            .replace(r#""progressToken":"p1""#, r#""progressToken":"berth-41""#);
        assert_eq!(message.text(), expected);
        assert_eq!(message["id"], json!(41));
        assert_eq!(
            message["params"]["_meta"]["progressToken"],
            json!("berth-41")
        );
    }

    #[test]
    fn set_of_an_absent_member_changes_nothing() {
        let text = r#"{"id":1,"params":{"_meta":5,"x":{"progressToken":1}}}"#;
        let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert!(!message.set(&["params", "_meta", "progressToken"], &json!("t")));
        assert!(!message.set(&["params", "progressToken"], &json!("t")));
        assert_eq!(message.text(), text);
    }

    #[test]
    fn set_takes_the_last_duplicate_and_escaped_keys_like_the_view() {
        let text = r#"{"\u0069d":1,"id":2}"#;
        let mut message = WireMessage::parse(text.as_bytes()).expect("parse");
        assert_eq!(message["id"], json!(2));
        message.set_id(&json!("x"));
        assert_eq!(message.text(), r#"{"\u0069d":1,"id":"x"}"#);
    }

    #[test]
    fn set_id_adds_an_absent_id() {
        let mut message = WireMessage::parse(br#"{"jsonrpc":"2.0","result":{}}"#).expect("parse");
        message.set_id(&json!(3));
        assert_eq!(message["id"], json!(3));
        assert_eq!(
            WireMessage::parse(message.text().as_bytes()).expect("parse")["id"],
            json!(3)
        );
    }

    #[test]
    fn members_of_a_batch_keep_their_text() {
        let batch = WireMessage::parse(br#"[{"id":1,"result":{"n":1e2}} , {"id":2,"result":{}}]"#)
            .expect("parse");
        let members = batch.members().expect("array");
        assert_eq!(members[0].text(), r#"{"id":1,"result":{"n":1e2}}"#);
        assert_eq!(members[1]["id"], json!(2));
        assert!(WireMessage::from(json!({})).members().is_none());
    }

    #[test]
    fn sse_data_drops_carriage_returns_only() {
        let message = WireMessage::parse(b"{\r\n\"a\":\"x\\r\"\r\n}").expect("parse");
        assert_eq!(message.sse_data(), "{\n\"a\":\"x\\r\"\n}");
    }

    #[test]
    fn line_turns_line_breaks_into_spaces() {
        let message = WireMessage::parse(b"{\r\n\"a\":\"x\\n\"\n}").expect("parse");
        assert_eq!(message.line(), "{  \"a\":\"x\\n\" }");
        assert_eq!(
            WireMessage::parse(message.line().as_bytes()).expect("parse")["a"],
            json!("x\n")
        );
    }

    #[test]
    fn json_a_value_cannot_hold_is_carried_with_a_partial_view() {
        let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
        for member in [deep.as_str(), "1e400", r#""\ud800""#] {
            let text = format!(
                r#"{{"jsonrpc":"2.0","id":5,"result":{{"isError":true,"deep":{{"x":{member}}}}}}}"#
            );
            let mut message = WireMessage::parse(text.as_bytes()).expect("carried");
            assert!(message.is_partial());
            assert_eq!(message["result"]["isError"], json!(true));
            message.set_id(&json!("client"));
            assert_eq!(
                message.text(),
                text.replace(r#""id":5"#, r#""id":"client""#)
            );
        }
        assert!(
            !WireMessage::parse(br#"{"a":[1]}"#)
                .expect("parse")
                .is_partial()
        );
    }

    #[test]
    fn duplicate_member_names_the_first_repeated_name_of_envelope_params_and_meta() {
        let cases = [
            (r#"{"id":1,"id":2,"method":"ping"}"#, Some("id")),
            (
                r#"{"id":1,"params":{"name":"a","\u006eame":"b"}}"#,
                Some("params.name"),
            ),
            (
                r#"{"id":1,"params":{"_meta":{"progressToken":1,"progressToken":2}}}"#,
                Some("params._meta.progressToken"),
            ),
            (r#"{"id":1,"params":{"arguments":{"x":1,"x":2}}}"#, None),
            (r#"{"id":1,"params":[1,1]}"#, None),
            (
                r#"{"id":1,"method":"ping","params":{"a":1,"b":{"a":1}}}"#,
                None,
            ),
        ];
        for (text, expected) in cases {
            let message = WireMessage::parse(text.as_bytes()).expect("parse");
            assert_eq!(message.duplicate_member().as_deref(), expected, "{text}");
        }
    }

    #[test]
    fn duplicate_member_is_found_past_the_pairwise_scan_and_in_escaped_names() {
        let members: Vec<String> = (0..40).map(|i| format!(r#""m{i}":{i}"#)).collect();
        let unique = format!(r#"{{"id":1,"params":{{{}}}}}"#, members.join(","));
        let message = WireMessage::parse(unique.as_bytes()).expect("parse");
        assert_eq!(message.duplicate_member(), None);
        let repeated = format!(
            r#"{{"id":1,"params":{{{},"m\u0035":0}}}}"#,
            members.join(",")
        );
        let message = WireMessage::parse(repeated.as_bytes()).expect("parse");
        assert_eq!(message.duplicate_member().as_deref(), Some("params.m5"));
    }

    #[test]
    fn a_clone_shares_the_message_until_one_is_rewritten() {
        let original = WireMessage::parse(br#"{"id":1,"result":{"n":1e2}}"#).expect("parse");
        let mut rewritten = original.clone();
        rewritten.set_id(&json!("client"));
        assert_eq!(original.text(), r#"{"id":1,"result":{"n":1e2}}"#);
        assert_eq!(original["id"], json!(1));
        assert_eq!(rewritten.text(), r#"{"id":"client","result":{"n":1e2}}"#);
        assert_eq!(original.clone().into_text(), original.text());
    }

    #[test]
    fn parse_refuses_non_utf8_and_non_json() {
        assert!(matches!(
            WireMessage::parse(b"\xff"),
            Err(ParseError::Utf8(_))
        ));
        assert!(matches!(
            WireMessage::parse(b"{\"a\":"),
            Err(ParseError::Json(_))
        ));
    }
}
