//! Client- and upstream-chosen audit fields cut to a bound (`limits.auditFieldBytes`, issue 39):
//! a 1 MiB tool name must not become a 1 MiB audit line.
//!
//! Not responsible for: escaping (the line is JSON; `serde_json` escapes control characters),
//! or which fields are cut (the auditor).

use std::borrow::Cow;

use serde_json::Value;

pub use crate::wire::echoed::truncate;

/// A client's JSON-RPC request id, bounded: a string cut as [`truncate`] cuts it, a number,
/// `null` or a boolean as it is, anything else (not a valid id) as its JSON text, cut.
pub fn truncate_id(id: &Value, max: usize) -> Cow<'_, Value> {
    match id {
        Value::String(text) if text.len() > max => {
            Cow::Owned(Value::String(truncate(text, max).into_owned()))
        }
        Value::Array(_) | Value::Object(_) => {
            let text = id.to_string();
            Cow::Owned(Value::String(truncate(&text, max).into_owned()))
        }
        _ => Cow::Borrowed(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_short_text_is_unchanged() {
        assert!(matches!(truncate("echo", 4), Cow::Borrowed("echo")));
    }

    #[test]
    fn truncate_long_text_cuts_at_a_char_boundary_and_counts_the_rest() {
        // "é" is two bytes: a cut at byte 3 of "aéé" falls inside the second one.
        assert_eq!(truncate("aéé", 4), "aé…[truncated 2 bytes]");
        let long = "x".repeat(1 << 20);
        let cut = truncate(&long, 256);
        assert!(cut.len() < 300, "{}", cut.len());
        assert!(cut.ends_with(&format!("…[truncated {} bytes]", (1 << 20) - 256)));
    }

    #[test]
    fn truncate_id_bounds_strings_and_keeps_numbers() {
        assert_eq!(*truncate_id(&Value::from(7), 4), Value::from(7));
        let id = Value::String("y".repeat(100));
        let cut = truncate_id(&id, 8);
        assert_eq!(*cut, Value::String("yyyyyyyy…[truncated 92 bytes]".into()));
    }
}
