//! Building a message's view in one pass over its text, noting on the way the first member name
//! repeated in the envelope, in `params` and in `params._meta`: the levels
//! [`WireMessage::duplicate_member`](super::WireMessage::duplicate_member) answers for. The
//! check then costs no reading of the text of its own (issue 14: a request with large arguments
//! was read twice more for it).
//!
//! Names are compared decoded, as the view keys them; with duplicate names the last member
//! counts, as in serde_json's own view. Text whose names a `String` cannot hold (a lone UTF-16
//! surrogate) is not read here: it fails like serde_json's `Value`, and the caller falls back
//! to a partial view.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// What is known of a message's member names at the levels the duplicate check covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Names {
    /// No name repeats in the envelope, `params` or `params._meta`.
    Unique,
    /// The first repeated name, as a path such as `params.name`.
    Repeated(String),
    /// Not read when the message was parsed (a partial view, a batch's member, a spliced raw
    /// object): [`super::WireMessage::duplicate_member`] reads the text.
    Unchecked,
}

/// `text` parsed into a `Value` with what is known of its names, or serde_json's error where a
/// `Value` would fail.
pub(super) fn parse(text: &str) -> serde_json::Result<(Value, Names)> {
    let mut repeats = Repeats::default();
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let view = Level::Envelope
        .seed(&mut repeats)
        .deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok((view, repeats.first()))
}

/// The first repeated name found at each level, in the order the check reports them: a name
/// repeated in the envelope comes before one inside `params`.
#[derive(Default)]
struct Repeats([Option<String>; 3]);

impl Repeats {
    fn first(self) -> Names {
        let [envelope, params, meta] = self.0;
        envelope
            .or_else(|| params.map(|name| format!("params.{name}")))
            .or_else(|| meta.map(|name| format!("params._meta.{name}")))
            .map_or(Names::Unique, Names::Repeated)
    }
}

/// A level the duplicate check covers.
#[derive(Clone, Copy)]
enum Level {
    Envelope = 0,
    Params = 1,
    Meta = 2,
}

impl Level {
    /// The level of the member `name` of an object at this level, when the check covers it.
    fn child(self, name: &str) -> Option<Self> {
        match (self, name) {
            (Self::Envelope, "params") => Some(Self::Params),
            (Self::Params, "_meta") => Some(Self::Meta),
            _ => None,
        }
    }

    fn seed(self, repeats: &mut Repeats) -> LevelSeed<'_> {
        LevelSeed {
            level: self,
            repeats,
        }
    }
}

/// Reads one value at a covered level: an object member by member, noting a repeated name;
/// anything else as a plain `Value`.
struct LevelSeed<'r> {
    level: Level,
    repeats: &'r mut Repeats,
}

impl<'de> DeserializeSeed<'de> for LevelSeed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LevelSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let value = match self.level.child(&name) {
                Some(level) => map.next_value_seed(level.seed(self.repeats))?,
                None => map.next_value::<Value>()?,
            };
            if object.contains_key(&name) {
                self.repeats.0[self.level as usize].get_or_insert_with(|| name.clone());
            }
            object.insert(name, value);
        }
        Ok(Value::Object(object))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: serde::de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Value, E> {
        // As serde_json's own view (JSON text has no NaN or infinity).
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }
}
