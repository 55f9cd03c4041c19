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
//!
//! The view is built only when something reads it (issue 14: no `Value` tree of `params` or
//! `result` on the hot path). What the proxy reads on every call (the JSON-RPC request id, the
//! method, the tool name, the progress token, `isError`) it reads through the message's
//! envelope, the byte ranges of its members found in one pass when the message is parsed
//! ([`WireMessage::member_text`]); that pass also checks the text is JSON and notes repeated
//! member names.
//!
//! Finding a member in the text (its byte range, repeated names) without building a `Value` is
//! the child modules `envelope` and `members`; this module does not reach into JSON text
//! otherwise.

mod envelope;
mod members;

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::de::{DeserializeSeed, IgnoredAny};
use serde_json::Value;
use serde_json::value::RawValue;

use envelope::{Envelope, Found, Names};
use members::{RawMembers, first_repeated, span, without};

/// A JSON-RPC message: the exact text it arrived as (outer whitespace trimmed), its envelope and,
/// once read, its parsed view. Invariant: parsing `text` gives `view` and `envelope`.
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
    /// Built from `text` when first read.
    view: OnceLock<View>,
    /// The members' byte ranges and repeated names.
    envelope: Envelope,
}

#[derive(Clone, Debug)]
struct View {
    value: Value,
    /// Some member could not be held by the value (see [`WireMessage::parse`]).
    partial: bool,
}

impl View {
    /// The view of valid JSON `text`.
    fn of(text: &str) -> Self {
        match serde_json::from_str(text) {
            Ok(value) => Self {
                value,
                partial: false,
            },
            // JSON a `Value` cannot hold.
            Err(_) => Self {
                value: partial_view(text, PARTIAL_VIEW_LEVELS),
                partial: true,
            },
        }
    }
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
    /// A member name given twice in the envelope, `params` or `params._meta`
    /// ([`WireMessage::parse_unambiguous`]).
    #[error("member {0:?} appears twice; parsers differ on which one counts")]
    Repeated(String),
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
        let envelope = match Envelope::scan(text) {
            Ok(envelope) => envelope,
            Err(error) => {
                // Syntax errors are errors (reported as a `Value` parse reports them);
                // anything else is JSON the envelope cannot be read member by member from.
                if serde_json::from_str::<IgnoredAny>(text).is_err() {
                    let error = serde_json::from_str::<Value>(text).err().unwrap_or(error);
                    return Err(error.into());
                }
                Envelope::unread()
            }
        };
        Ok(Self::new(text.to_owned(), envelope, OnceLock::new()))
    }

    /// As [`Self::parse`], refusing a message in which a member name appears twice in the
    /// envelope, `params` or `params._meta` ([`Self::duplicate_member`]): for what an upstream
    /// sends, which the proxy reads by the last duplicate while a client may read the first
    /// (found by a new user: an upstream's reply with two `id`s reached the client with the
    /// upstream's id first).
    ///
    /// # Errors
    /// As [`Self::parse`], and [`ParseError::Repeated`].
    pub fn parse_unambiguous(bytes: &[u8]) -> Result<Self, ParseError> {
        let message = Self::parse(bytes)?;
        match message.duplicate_member() {
            Some(name) => Err(ParseError::Repeated(name)),
            None => Ok(message),
        }
    }

    /// Whether a member name repeats in some object within the value at `path`, down to
    /// `depth` levels of objects and arrays (the value itself is the first): for a rewrite by
    /// policy that must show the client only what the proxy read.
    pub fn repeats_within(&self, path: &[&str], depth: usize) -> bool {
        self.locate(path)
            .is_some_and(|range| members::repeats_within(&self.text()[range], depth))
    }

    /// Whether some member of the message could not be held by the view (it reads as `null`
    /// there; the text keeps it). A rewrite by [`Self::rebuild`] would lose it.
    pub fn is_partial(&self) -> bool {
        self.whole_view().partial
    }

    fn new(text: String, envelope: Envelope, view: OnceLock<View>) -> Self {
        Self {
            inner: Arc::new(Parsed {
                text,
                view,
                envelope,
            }),
        }
    }

    /// The envelope of `text`, which is valid JSON.
    fn envelope_of(text: &str) -> Envelope {
        Envelope::scan(text).unwrap_or_else(|_| Envelope::unread())
    }

    /// The byte range of the member at `path` (the last one with duplicate keys): from the
    /// envelope where it holds the member, else read from the text no further than that member
    /// at the levels where no name repeats (issue 14: each such read of a large message costs a
    /// pass over it).
    fn locate(&self, path: &[&str]) -> Option<std::ops::Range<usize>> {
        self.resolve(self.inner.envelope.find(self.text(), path), path)
    }

    /// The byte range of the member at `path` that the envelope found as `found`, read from
    /// the text where the envelope does not hold it.
    fn resolve(&self, found: Found, path: &[&str]) -> Option<std::ops::Range<usize>> {
        let text = self.text();
        let envelope = &self.inner.envelope;
        match found {
            Found::At(range) | Found::Object(range) => Some(range),
            Found::Absent => None,
            Found::Within(outer, step) => {
                let inner = span(&text[outer.clone()], &path[step..], 0)?;
                Some(outer.start + inner.start..outer.start + inner.end)
            }
            Found::Unknown => {
                // Steps taken in the envelope, `params` and `params._meta`, the levels the
                // names were checked at.
                let unique = match (envelope.names(), path) {
                    (Names::Unique, ["params", "_meta", ..]) => 3,
                    (Names::Unique, ["params", ..]) => 2,
                    (Names::Unique, _) => 1,
                    _ => 0,
                };
                span(text, path, unique)
            }
        }
    }

    /// The exact text of the member at `path` (object keys from the top; the last one with
    /// duplicate keys), without building the view: for what the proxy reads on every call.
    /// `None` when the member is absent.
    pub fn member_text(&self, path: &[&str]) -> Option<&str> {
        self.locate(path).map(|range| &self.text()[range])
    }

    /// The member at `path` parsed on its own, without building the whole view: for a small
    /// member read on every call (the JSON-RPC request id). `None` when it is absent or a
    /// `Value` cannot hold it.
    pub fn member_value(&self, path: &[&str]) -> Option<Value> {
        // A whole view already built answers at once; a partial one may hold `null` where
        // the text holds what a `Value` cannot.
        if let Some(view) = self.inner.view.get().filter(|view| !view.partial) {
            return view_at(&view.value, path).cloned();
        }
        serde_json::from_str(self.member_text(path)?).ok()
    }

    /// Whether this is the response to the request whose JSON-RPC request id is `id`: a
    /// `result` or an `error` under that id, or an `error` whose id is `null`, which a peer sends
    /// when it could not read the request's id (JSON-RPC 2.0, section 5). Only a caller that
    /// reads a channel carrying one request's messages (that request's reply, or a stdio child
    /// while it is the only one pending) may take the second for that request (field case
    /// BR-01: the client gets it under its own id, never `id: null`).
    pub fn is_response_to(&self, id: &Value) -> bool {
        let is_error = self.member_text(&["error"]).is_some();
        if !is_error && self.member_text(&["result"]).is_none() {
            return false;
        }
        match self.member_value(&["id"]) {
            Some(Value::Null) => is_error,
            Some(own) => own == *id,
            None => false,
        }
    }

    /// The member at `path` exactly as the view has it, parsing that member alone while it can:
    /// for a small part of a message read per call (a modern request's `params._meta`, a
    /// tool's annotated `arguments`; issue 14). Where a `Value` cannot hold part of the member
    /// (a lone surrogate, a number beyond `f64`) the view is built and answers, with `null`
    /// there, as [`Self::view`] would. `None` when the member is absent.
    pub fn member(&self, path: &[&str]) -> Option<Cow<'_, Value>> {
        if let Some(view) = self.inner.view.get() {
            return view_at(&view.value, path).map(Cow::Borrowed);
        }
        match serde_json::from_str(self.member_text(path)?) {
            Ok(value) => Some(Cow::Owned(value)),
            Err(_) => self.view_at(path).map(Cow::Borrowed),
        }
    }

    /// The string member at `path`, without building the whole view: `None` when it is absent,
    /// not a string, or not Unicode text (a lone surrogate).
    pub fn member_str(&self, path: &[&str]) -> Option<Cow<'_, str>> {
        let raw = self.member_text(path)?;
        let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
        if inner.contains(['\\', '"']) {
            return serde_json::from_str::<String>(raw).ok().map(Cow::Owned);
        }
        Some(Cow::Borrowed(inner))
    }

    /// Whether the view has been built (for tests of what reads the envelope only).
    #[cfg(test)]
    pub(crate) fn view_is_built(&self) -> bool {
        self.inner.view.get().is_some()
    }

    fn whole_view(&self) -> &View {
        self.inner.view.get_or_init(|| View::of(&self.inner.text))
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

    /// The parsed view, for reading; built when first read.
    pub fn view(&self) -> &Value {
        &self.whole_view().value
    }

    /// The member of the view at `path` (object keys from the top).
    fn view_at(&self, path: &[&str]) -> Option<&Value> {
        view_at(self.view(), path)
    }

    /// The parsed view, owned (copied only while a clone of the message is alive).
    pub fn into_view(self) -> Value {
        match Arc::try_unwrap(self.inner) {
            Ok(own) => match own.view.into_inner() {
                Some(view) => view.value,
                None => View::of(&own.text).value,
            },
            Err(shared) => WireMessage { inner: shared }.view().clone(),
        }
    }

    /// Replaces the member at `path` (object keys from the top, e.g. `["params", "_meta",
    /// "progressToken"]`) with `value`, leaving every other byte as it was. Returns `false`, and
    /// changes nothing, when the member is absent (a missing key, or a step that is not an
    /// object). With duplicate keys the last one counts, as in the view.
    pub fn set(&mut self, path: &[&str], value: &Value) -> bool {
        self.splice(path, &value.to_string(), || Some(value.clone()))
    }

    /// As [`Self::set`], with the exact JSON text `raw` (e.g. a client's progress token as the
    /// client wrote it, from [`Self::raw_member`]): a value that a `Value` would change, such
    /// as `-0`, `1e2`, an integer beyond 2^64 or a lone UTF-16 surrogate, goes back byte for
    /// byte (issue 12, item 6). When the view cannot hold `raw`, it reads `null` there and the
    /// message is [partial](Self::is_partial).
    pub fn set_raw(&mut self, path: &[&str], raw: &RawValue) -> bool {
        let spliced = self.splice(path, raw.get(), || serde_json::from_str(raw.get()).ok());
        if spliced && raw.get().starts_with('{') {
            // Its members were not read.
            self.read_envelope_again();
        }
        spliced
    }

    /// The exact text of the member at `path` (the last one with duplicate keys), owned: for
    /// keeping a value the proxy must give back unchanged ([`Self::set_raw`]). `None` when the
    /// member is absent.
    pub fn raw_member(&self, path: &[&str]) -> Option<Box<RawValue>> {
        let range = self.locate(path)?;
        RawValue::from_string(self.text()[range].to_owned()).ok()
    }

    /// Whether the member at `path` is a JSON string the view could not hold: one with a lone
    /// UTF-16 surrogate escape (`"\ud800"`), which encodes no Unicode character, so it reads as
    /// `null` in the view. For a refusal that names the cause instead of calling the member
    /// missing (found by a new user).
    pub fn has_lone_surrogate(&self, path: &[&str]) -> bool {
        self.is_partial()
            && self.view_at(path).is_none_or(Value::is_null)
            && self
                .raw_member(path)
                .is_some_and(|raw| raw.get().starts_with('"'))
    }

    /// Splices `text` over the member at `path`, and, when the view has been built, `view`
    /// (`null` and partial when `None`) into it.
    fn splice(&mut self, path: &[&str], text: &str, view: impl FnOnce() -> Option<Value>) -> bool {
        let found = self.inner.envelope.find(self.text(), path);
        // The recorded ranges can follow a splice of a member the envelope holds as text;
        // replacing one it descends into (`params._meta`, say) means reading it again.
        let follows = matches!(found, Found::At(_) | Found::Within(..));
        let Some(range) = self.resolve(found, path) else {
            return false;
        };
        let inner = Arc::make_mut(&mut self.inner);
        inner.text.replace_range(range.clone(), text);
        if !(follows && inner.envelope.shift(&range, text.len())) {
            inner.envelope = Self::envelope_of(&inner.text);
        }
        if let Some(built) = inner.view.get_mut() {
            let value = view();
            built.partial |= value.is_none();
            if let Some(target) = view_at_mut(&mut built.value, path) {
                *target = value.unwrap_or(Value::Null);
            }
        }
        true
    }

    /// Reads the envelope from the text again, after a change [`Envelope::shift`] cannot
    /// follow.
    fn read_envelope_again(&mut self) {
        let inner = Arc::make_mut(&mut self.inner);
        inner.envelope = Self::envelope_of(&inner.text);
    }

    /// Adds the member `key: value` as the first member of the object at `path` (`[]`: the
    /// message itself), leaving every other byte as it was: for members one protocol revision
    /// requires and another lacks (MCP 2026-07-28 `resultType`, issue 13). Returns `false`, and
    /// changes nothing, when there is no object at `path` or it already has `key`.
    pub fn insert_member(&mut self, path: &[&str], key: &str, value: &Value) -> bool {
        let Some(range) = self.locate(path) else {
            return false;
        };
        if !self.text()[range.clone()].starts_with('{') {
            return false;
        }
        let mut member_path = path.to_vec();
        member_path.push(key);
        if self.locate(&member_path).is_some() {
            return false;
        }
        let empty = self.text()[range.start + 1..range.end]
            .trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('}');
        let member = format!(
            "{}:{value}{}",
            Value::String(key.to_owned()),
            if empty { "" } else { "," }
        );
        let at = range.start + 1;
        self.rewrite_object(at..at, &member, path, |object| {
            object.insert(key.to_owned(), value.clone());
        });
        true
    }

    /// Removes the members named in `names` from the object at `path` (e.g. a modern client's
    /// hop fields from `params._meta` for a legacy upstream, issue 13), keeping every other
    /// member's text as written: values a view would change or cannot hold (`1.50`, `\u00e9`,
    /// a lone surrogate, deep nesting) stay as they are (found by a new user: `_meta` was
    /// re-serialized from its view). The whitespace between the object's members is not kept.
    /// Returns `false`, and changes nothing, when there is no object at `path` or it has none
    /// of `names`.
    pub fn remove_members(&mut self, path: &[&str], names: &[&str]) -> bool {
        let Some(range) = self.locate(path) else {
            return false;
        };
        let Some(kept) = without(&self.text()[range.clone()], names) else {
            return false;
        };
        self.rewrite_object(range, &kept, path, |object| {
            object.retain(|key, _| !names.contains(&key.as_str()));
        });
        true
    }

    /// Replaces `range` of the text with `text`, a change to the members of the object at
    /// `path`, reads the envelope again, and makes the same `change` to that object in the view
    /// when the view has been built.
    fn rewrite_object(
        &mut self,
        range: std::ops::Range<usize>,
        text: &str,
        path: &[&str],
        change: impl FnOnce(&mut serde_json::Map<String, Value>),
    ) {
        let inner = Arc::make_mut(&mut self.inner);
        inner.text.replace_range(range, text);
        inner.envelope = Self::envelope_of(&inner.text);
        if let Some(object) = inner
            .view
            .get_mut()
            .and_then(|built| view_at_mut(&mut built.value, path))
            .and_then(Value::as_object_mut)
        {
            change(object);
        }
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
        self.whole_view();
        let inner = Arc::make_mut(&mut self.inner);
        let Some(built) = inner.view.get_mut() else {
            return;
        };
        change(&mut built.value);
        inner.text = built.value.to_string();
        inner.envelope = Self::envelope_of(&inner.text);
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
        match self.inner.envelope.names() {
            Names::Unique => None,
            Names::Repeated(path) => Some(path.clone()),
            Names::Unchecked => repeated_in_text(self.text()),
        }
    }

    /// Splits a JSON array (a batch) into its members, each with its exact text; `None` when
    /// the message is not an array.
    pub fn members(&self) -> Option<Vec<Self>> {
        let raws: Vec<&RawValue> = serde_json::from_str(self.text()).ok()?;
        let views = self.view().as_array()?;
        Some(
            raws.into_iter()
                .zip(views)
                .map(|(raw, view)| {
                    let text = raw.get().to_owned();
                    let envelope = Self::envelope_of(&text);
                    let view = View {
                        value: view.clone(),
                        partial: self.is_partial(),
                    };
                    Self::new(text, envelope, OnceLock::from(view))
                })
                .collect(),
        )
    }
}

impl From<Value> for WireMessage {
    /// A message the proxy builds: its text is the view serialized.
    fn from(view: Value) -> Self {
        let text = view.to_string();
        let envelope = Self::envelope_of(&text);
        let view = View {
            value: view,
            partial: false,
        };
        Self::new(text, envelope, OnceLock::from(view))
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

/// The member of `view` at `path` (object keys from the top).
fn view_at<'v>(view: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(view, |view, key| view.get(*key))
}

/// The member of `view` at `path` (object keys from the top), for changing it.
fn view_at_mut<'v>(view: &'v mut Value, path: &[&str]) -> Option<&'v mut Value> {
    path.iter().try_fold(view, |view, key| view.get_mut(*key))
}

/// [`WireMessage::duplicate_member`] read from `text`, for a message whose parse did not check
/// its names: each level's names, and the text of the next level, in one pass over that level.
fn repeated_in_text(text: &str) -> Option<String> {
    let mut object = text;
    let mut prefix = String::new();
    for next in [Some("params"), Some("_meta"), None] {
        let mut deserializer = serde_json::Deserializer::from_str(object);
        let members = RawMembers.deserialize(&mut deserializer).ok()?;
        if let Some(key) = first_repeated(&members) {
            return Some(prefix + &key.lossy());
        }
        let Some(next) = next else {
            break;
        };
        // With no name repeated, the member named `next` is the only one.
        object = members.iter().find(|(key, _)| key.is(next))?.1.get();
        prefix.push_str(next);
        prefix.push('.');
    }
    None
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
    let mut deserializer = serde_json::Deserializer::from_str(text);
    if let Ok(members) = RawMembers.deserialize(&mut deserializer) {
        // With duplicate names the last one counts, as in a whole view.
        return Value::Object(
            members
                .into_iter()
                .map(|(key, raw)| {
                    (
                        key.lossy().into_owned(),
                        partial_view(raw.get(), levels - 1),
                    )
                })
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

#[cfg(test)]
mod tests;
