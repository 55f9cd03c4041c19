//! Reading a message's envelope in one pass over its text, without building a `Value` (issue 14:
//! no `Value` tree of `params` or `result` on the hot path): the byte range of every member of
//! the envelope, of `params`, of `params._meta` and of `result`, where the proxy reads the
//! JSON-RPC request id, the method, the tool name, the progress token and `isError`, and splices
//! its own values; and the first member name repeated in the envelope, in `params` or in
//! `params._meta` (the levels [`super::WireMessage::duplicate_member`] answers for). The same
//! pass checks that the text is one JSON value: a member the envelope does not descend into is
//! read as raw text, which serde_json checks without building anything.
//!
//! Names are compared decoded (`"a"` and `"\u0061"` are one name), as a `Value` keys them; a
//! lone UTF-16 surrogate escape in a name is kept as its WTF-8 bytes. With duplicate names the
//! last member counts, as in serde_json's own view.

use std::fmt;
use std::ops::Range;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::members::{Key, SCAN_MEMBERS};

/// What is known of a message's member names at the levels the duplicate check covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Names {
    /// No name repeats in the envelope, `params` or `params._meta`.
    Unique,
    /// The first repeated name, as a path such as `params.name`.
    Repeated(String),
    /// Not read when the message was parsed (its envelope could not be read member by member):
    /// [`super::WireMessage::duplicate_member`] reads the text.
    Unchecked,
}

/// The members of a message's envelope and of the objects it descends into, with their byte
/// ranges in the text. Ranges follow the text through splices ([`Self::shift`]).
#[derive(Clone, Debug)]
pub(super) struct Envelope {
    names: Names,
    /// The message is an object and its members are in `members`; otherwise nothing is known
    /// and every member is looked for in the text.
    read: bool,
    members: Vec<Member>,
}

#[derive(Clone, Debug)]
struct Member {
    /// The index of the member whose object holds this one; `None` for the envelope's own.
    parent: Option<u32>,
    name: Name,
    value: Held,
}

/// A member name: its range in the text when written without escapes, else decoded.
#[derive(Clone, Debug)]
enum Name {
    At(Range<usize>),
    Decoded(Box<[u8]>),
}

/// How a member's value is known.
#[derive(Clone, Debug)]
enum Held {
    /// As its byte range.
    Raw(Range<usize>),
    /// An object whose members are recorded, with its byte range when it could be told (its
    /// name written without escapes); else its range is looked for in the text.
    Object(Option<Range<usize>>),
    /// Descended into but not an object: no members (its range is looked for in the text).
    Other,
}

/// Where the member at a path is, as far as the envelope knows.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// At this byte range.
    At(Range<usize>),
    /// An object the envelope descends into, at this byte range: replacing it replaces
    /// recorded members.
    Object(Range<usize>),
    /// Not in the message (a missing name, or a step into something that is not an object).
    Absent,
    /// Inside the member at this byte range, at the path's steps from the index on.
    Within(Range<usize>, usize),
    /// Not known: look for the whole path in the text.
    Unknown,
}

/// The level of an object the envelope descends into.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Envelope,
    Params,
    Meta,
    Result,
}

impl Level {
    /// The level of the member `name` of an object at this level, when the envelope descends
    /// into it.
    fn child(self, name: &[u8]) -> Option<Self> {
        match (self, name) {
            (Self::Envelope, b"params") => Some(Self::Params),
            (Self::Envelope, b"result") => Some(Self::Result),
            (Self::Params, b"_meta") => Some(Self::Meta),
            _ => None,
        }
    }

    /// When the duplicate check covers this level: its place in the order the check reports
    /// repeated names, and the path a name repeated here is reported under.
    fn checked(self) -> Option<(usize, &'static str)> {
        match self {
            Self::Envelope => Some((0, "")),
            Self::Params => Some((1, "params.")),
            Self::Meta => Some((2, "params._meta.")),
            Self::Result => None,
        }
    }
}

impl Envelope {
    /// Reads the envelope of `text`.
    ///
    /// # Errors
    /// serde_json's error when `text` is not one JSON value, or when a value the envelope
    /// descends into cannot be read member by member (a lone surrogate or a number beyond
    /// `f64` there); the caller tells the two apart and uses [`Self::unread`] for the second.
    pub(super) fn scan(text: &str) -> serde_json::Result<Self> {
        let mut scan = Scan {
            text,
            // A request's envelope has about eight members, a reply's about five.
            members: Vec::with_capacity(12),
            repeated: [None, None, None],
        };
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let read = LevelSeed {
            level: Level::Envelope,
            parent: None,
            scan: &mut scan,
        }
        .deserialize(&mut deserializer)?;
        deserializer.end()?;
        let [envelope, params, meta] = scan.repeated;
        let names = envelope
            .or(params)
            .or(meta)
            .map_or(Names::Unique, Names::Repeated);
        Ok(Self {
            names,
            read,
            members: scan.members,
        })
    }

    /// The envelope of valid JSON text [`Self::scan`] could not read: nothing known.
    pub(super) fn unread() -> Self {
        Self {
            names: Names::Unchecked,
            read: false,
            members: Vec::new(),
        }
    }

    pub(super) fn names(&self) -> &Names {
        &self.names
    }

    /// Where the member at `path` (object keys from the top) is in `text`, the text this
    /// envelope was read from.
    pub(super) fn find(&self, text: &str, path: &[&str]) -> Found {
        if !self.read {
            return Found::Unknown;
        }
        let mut parent = None;
        for (step, key) in path.iter().enumerate() {
            let found = self
                .members
                .iter()
                .rposition(|m| m.parent == parent && m.name.is(text, key));
            let Some(index) = found else {
                return Found::Absent;
            };
            let last = step + 1 == path.len();
            match (&self.members[index].value, last) {
                (Held::Raw(range), true) => return Found::At(range.clone()),
                (Held::Raw(range), false) => return Found::Within(range.clone(), step + 1),
                (Held::Object(Some(range)), true) => return Found::Object(range.clone()),
                (Held::Object(None) | Held::Other, true) => return Found::Unknown,
                (Held::Other, false) => return Found::Absent,
                (Held::Object(_), false) => parent = u32::try_from(index).ok(),
            }
        }
        // The empty path: the message itself.
        Found::Unknown
    }

    /// Follows a splice of `new_len` bytes over `replaced` in the text. Returns `false` when
    /// the splice replaced recorded members (a whole object the envelope descends into): the
    /// envelope must then be read again.
    pub(super) fn shift(&mut self, replaced: &Range<usize>, new_len: usize) -> bool {
        let inside = |range: &Range<usize>| {
            range != replaced && range.start >= replaced.start && range.end <= replaced.end
        };
        // Splices replace a whole value, never nothing: `replaced` is not empty.
        let moved = |at: usize| at >= replaced.end;
        let move_to = |at: usize| at - replaced.end + replaced.start + new_len;
        for member in &self.members {
            let name_inside = matches!(&member.name, Name::At(r) if inside(r));
            let value_inside = member.value.range().is_some_and(inside);
            if name_inside || value_inside {
                return false;
            }
        }
        for member in &mut self.members {
            if let Name::At(range) = &mut member.name
                && moved(range.start)
            {
                *range = move_to(range.start)..move_to(range.end);
            }
            if let Held::Raw(range) | Held::Object(Some(range)) = &mut member.value {
                if range == replaced {
                    range.end = range.start + new_len;
                } else if moved(range.start) {
                    *range = move_to(range.start)..move_to(range.end);
                } else if range.start <= replaced.start && range.end >= replaced.end {
                    range.end = move_to(range.end);
                }
            }
        }
        true
    }
}

impl Held {
    fn range(&self) -> Option<&Range<usize>> {
        match self {
            Self::Raw(range) | Self::Object(Some(range)) => Some(range),
            Self::Object(None) | Self::Other => None,
        }
    }
}

impl Name {
    /// Whether this is the name `key`, in `text` (the text the envelope was read from).
    fn is(&self, text: &str, key: &str) -> bool {
        self.bytes(text) == key.as_bytes()
    }

    fn bytes<'t>(&'t self, text: &'t str) -> &'t [u8] {
        match self {
            Self::At(range) => &text.as_bytes()[range.clone()],
            Self::Decoded(bytes) => bytes,
        }
    }
}

/// What one pass collects.
struct Scan<'t> {
    text: &'t str,
    members: Vec<Member>,
    /// The first repeated name in the envelope, `params` and `params._meta`, as paths.
    repeated: [Option<String>; 3],
}

impl Scan<'_> {
    /// The range of `slice`, which borrows from the text.
    fn range_of(&self, slice: &[u8]) -> Range<usize> {
        let start = slice.as_ptr() as usize - self.text.as_ptr() as usize;
        start..start + slice.len()
    }

    /// Notes the first name of the object `parent` (its members read at `level`) that an
    /// earlier one repeats: pairwise for the few members an envelope has, with a set past
    /// [`SCAN_MEMBERS`] so that an object with many members costs linear time.
    fn note_repeats(&mut self, level: Level, parent: Option<u32>, first: usize) {
        let Some((slot, prefix)) = level.checked() else {
            return;
        };
        if self.repeated[slot].is_some() {
            return;
        }
        let text = self.text;
        let names = || {
            self.members[first..]
                .iter()
                .filter(move |m| m.parent == parent)
                .map(move |m| m.name.bytes(text))
        };
        let repeated = if names().nth(SCAN_MEMBERS).is_none() {
            names()
                .enumerate()
                .find(|(i, name)| names().take(*i).any(|earlier| earlier == *name))
                .map(|(_, name)| name)
        } else {
            let mut seen = std::collections::HashSet::new();
            names().find(|name| !seen.insert(*name))
        };
        if let Some(name) = repeated {
            self.repeated[slot] = Some(format!("{prefix}{}", String::from_utf8_lossy(name)));
        }
    }
}

impl Scan<'_> {
    /// The byte range of the object the member at `index` holds, its members just read: from
    /// the `{` after the member's name to the `}` after its last member. `None` when the name
    /// has escapes (its place is not known) or a member's end is not known.
    fn object_range(&self, index: u32) -> Option<Range<usize>> {
        let bytes = self.text.as_bytes();
        let Name::At(name) = &self.members[index as usize].name else {
            return None;
        };
        // After the name: its closing quote, the colon, and whitespace around it.
        let mut at = name.end + 1;
        at = skip_whitespace(bytes, at);
        (bytes.get(at) == Some(&b':')).then_some(())?;
        at = skip_whitespace(bytes, at + 1);
        (bytes.get(at) == Some(&b'{')).then_some(())?;
        let start = at;
        let last = self.members[index as usize + 1..]
            .iter()
            .rfind(|m| m.parent == Some(index));
        let after = match last {
            Some(member) => member.value.range()?.end,
            None => start + 1,
        };
        let end = skip_whitespace(bytes, after);
        (bytes.get(end) == Some(&b'}')).then_some(start..end + 1)
    }
}

/// The first position from `at` on that is not JSON whitespace.
fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Reads one value the envelope descends into: an object member by member; anything else is
/// passed over. Its value is whether it was an object.
struct LevelSeed<'s, 't> {
    level: Level,
    parent: Option<u32>,
    scan: &'s mut Scan<'t>,
}

impl<'de> DeserializeSeed<'de> for LevelSeed<'_, '_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LevelSeed<'_, '_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let first = self.scan.members.len();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let name = match key.borrowed() {
                Some(bytes) => Name::At(self.scan.range_of(bytes)),
                None => Name::Decoded(key.as_bytes().into()),
            };
            let index = u32::try_from(self.scan.members.len()).map_err(serde::de::Error::custom)?;
            let child = self.level.child(key.as_bytes());
            self.scan.members.push(Member {
                parent: self.parent,
                name,
                value: Held::Other,
            });
            let value = match child {
                Some(level) => {
                    let object = map.next_value_seed(LevelSeed {
                        level,
                        parent: Some(index),
                        scan: self.scan,
                    })?;
                    if object {
                        Held::Object(self.scan.object_range(index))
                    } else {
                        Held::Other
                    }
                }
                None => {
                    let raw = map.next_value::<&'de RawValue>()?;
                    Held::Raw(self.scan.range_of(raw.get().as_bytes()))
                }
            };
            self.scan.members[index as usize].value = value;
        }
        self.scan.note_repeats(self.level, self.parent, first);
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
}
