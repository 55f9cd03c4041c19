//! Reading a JSON object's members straight from a message's text, without building a
//! `Value`: the byte range of a member (where [`WireMessage::set`](super::WireMessage::set)
//! splices) and every member of an object with its raw text, in order, duplicates kept (for
//! [`WireMessage::duplicate_member`](super::WireMessage::duplicate_member) and partial views).
//!
//! With duplicate names the last member counts, as in serde_json's view.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::ops::Range;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The byte range in `text` of the member at `path`. The first `unique` steps may stop at the
/// first member of the name: the caller knows no name repeats at those levels (the envelope's
/// check, [`super::envelope`]); past them the last member counts.
pub(super) fn span(text: &str, path: &[&str], unique: usize) -> Option<Range<usize>> {
    let mut start = 0;
    let mut slice = text;
    for (step, key) in path.iter().enumerate() {
        let member = member(slice, key, step < unique)?;
        // `member` borrows from `slice`, so its offset is where it starts inside `slice`.
        start += member.get().as_ptr() as usize - slice.as_ptr() as usize;
        slice = member.get();
    }
    Some(start..start + slice.len())
}

/// The raw text of the member named `key` of the JSON object `object`: the last one, or with
/// `first` the first one, without reading the members after it.
fn member<'a>(object: &'a str, key: &str, first: bool) -> Option<&'a RawValue> {
    let found = Cell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(object);
    // Stopping at the first member ends the read with an error (serde has no other way to
    // leave an object part-read); what was found is in `found` either way.
    let _ = MemberSeed {
        key,
        first,
        found: &found,
    }
    .deserialize(&mut deserializer);
    found.get()
}

/// The JSON object `object` without its members named in `names`, every other member's text
/// as written (its name, the whitespace around its colon, its value; the whitespace between
/// members is not kept). `None` when `object` is not an object or has no such member.
pub(super) fn without(object: &str, names: &[&str]) -> Option<String> {
    let mut deserializer = serde_json::Deserializer::from_str(object);
    let members = RawMembers.deserialize(&mut deserializer).ok()?;
    let named = |key: &Key<'_>| names.iter().any(|name| key.is(name));
    if !members.iter().any(|(key, _)| named(key)) {
        return None;
    }
    let mut kept = String::with_capacity(object.len());
    kept.push('{');
    // Where the text before the next member's name starts: after `{`, then after each value.
    let mut boundary = object.find('{')? + 1;
    for (key, value) in &members {
        // `value` borrows from `object`, so its offset is where it starts there.
        let end = value.get().as_ptr() as usize - object.as_ptr() as usize + value.get().len();
        // Only whitespace and one comma come before a name's opening quote.
        let start = boundary + object[boundary..].find('"')?;
        if !named(key) {
            if kept.len() > 1 {
                kept.push(',');
            }
            kept.push_str(&object[start..end]);
        }
        boundary = end;
    }
    kept.push('}');
    Some(kept)
}

/// Whether a member name repeats in some object within the JSON value `text`, down to
/// `depth` levels of objects and arrays (`text` itself is the first).
pub(super) fn repeats_within(text: &str, depth: usize) -> bool {
    if depth == 0 {
        return false;
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    if let Ok(members) = RawMembers.deserialize(&mut deserializer) {
        return first_repeated(&members).is_some()
            || members
                .iter()
                .any(|(_, value)| repeats_within(value.get(), depth - 1));
    }
    serde_json::from_str::<Vec<&RawValue>>(text).is_ok_and(|items| {
        items
            .iter()
            .any(|item| repeats_within(item.get(), depth - 1))
    })
}

/// The first name among `members` that an earlier one repeats. Without allocating for the few
/// members an envelope has; a set past [`SCAN_MEMBERS`], so a message with many members costs
/// linear time.
pub(super) fn first_repeated<'m, 'de>(members: &'m [RawMember<'de>]) -> Option<&'m Key<'de>> {
    if members.len() <= SCAN_MEMBERS {
        return members
            .iter()
            .enumerate()
            .find(|(i, (key, _))| members[..*i].iter().any(|(earlier, _)| earlier == key))
            .map(|(_, (key, _))| key);
    }
    let mut seen = std::collections::HashSet::with_capacity(members.len());
    members
        .iter()
        .map(|(key, _)| key)
        .find(|key| !seen.insert(key.as_bytes()))
}

/// Members compared pairwise by [`first_repeated`] before it uses a set.
pub(super) const SCAN_MEMBERS: usize = 16;

/// A member name with its escapes decoded, as bytes, borrowed from the message text unless it
/// has escapes. A lone UTF-16 surrogate escape (`"\ud800"`, which no `str` can hold) is kept as
/// its WTF-8 bytes, so such a name is still read, compared and skipped over, and the members
/// around it are found (found by a new user: one such name made the whole envelope unreadable,
/// and the refusal lost the request id).
#[derive(PartialEq, Eq)]
pub(super) struct Key<'de>(Cow<'de, [u8]>);

impl<'de> Key<'de> {
    /// The decoded name.
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The name as written in the text, when it has no escapes.
    pub(super) fn borrowed(&self) -> Option<&'de [u8]> {
        match self.0 {
            Cow::Borrowed(bytes) => Some(bytes),
            Cow::Owned(_) => None,
        }
    }

    /// Whether this is the name `name`.
    pub(super) fn is(&self, name: &str) -> bool {
        self.as_bytes() == name.as_bytes()
    }

    /// The name for people and for the view: a lone surrogate reads as U+FFFD.
    pub(super) fn lossy(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // As bytes, serde_json decodes escapes without refusing lone surrogates.
        deserializer.deserialize_bytes(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_borrowed_bytes<E: serde::de::Error>(self, name: &'de [u8]) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(name)))
    }

    fn visit_bytes<E: serde::de::Error>(self, name: &[u8]) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(name.to_vec())))
    }

    fn visit_borrowed_str<E: serde::de::Error>(self, name: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(name.as_bytes())))
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(name.as_bytes().to_vec())))
    }
}

/// One member of a JSON object: its name and its raw text.
pub(super) type RawMember<'de> = (Key<'de>, &'de RawValue);

/// Every member of a JSON object, in order, duplicates kept: what the duplicate check reads
/// (names, and the next level's text found in the same pass) and what a partial view is built
/// from.
pub(super) struct RawMembers;

impl<'de> DeserializeSeed<'de> for RawMembers {
    type Value = Vec<RawMember<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RawMembers {
    type Value = Vec<RawMember<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            members.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(members)
    }
}

/// Finds the member `key`, leaving it in `found`.
struct MemberSeed<'k, 'de> {
    key: &'k str,
    first: bool,
    found: &'k Cell<Option<&'de RawValue>>,
}

impl<'de> DeserializeSeed<'de> for MemberSeed<'_, 'de> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MemberSeed<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            if key.is(self.key) {
                self.found.set(Some(map.next_value::<&'de RawValue>()?));
                if self.first {
                    return Err(A::Error::custom("found"));
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}
