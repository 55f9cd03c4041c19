//! JSON Pointer lookups (RFC 6901) that allocate nothing: `serde_json::Value::pointer` builds a
//! `String` per reference token (it unescapes `~1` and `~0` with `str::replace`), which made
//! every envelope read on the hot path allocate (issue 14).

use serde_json::Value;

/// [`Value::pointer`] without its allocations; the same answers for every pointer.
pub trait Pointer {
    /// The value `pointer` (e.g. `/result/isError`) names, as [`Value::pointer`] finds it.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl Pointer for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.contains('~') {
            // Escaped tokens are rare: serde_json's own lookup unescapes them.
            return self.pointer(pointer);
        }
        if pointer.is_empty() {
            return Some(self);
        }
        pointer
            .strip_prefix('/')?
            .split('/')
            .try_fold(self, |target, token| match target {
                Value::Object(map) => map.get(token),
                Value::Array(list) => index(token).and_then(|i| list.get(i)),
                _ => None,
            })
    }
}

/// An array index token: digits without a sign or a leading zero (RFC 6901 §4).
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn at_answers_as_value_pointer_does() {
        let value = json!({
            "result": {"isError": true, "tools": [{"name": "a"}, {"name": "b"}]},
            "a/b": 1, "m~n": 2, "": {"": 3}, "01": 4,
        });
        let pointers = [
            "",
            "/",
            "//",
            "/result",
            "/result/isError",
            "/result/tools/1/name",
            "/result/tools/01",
            "/result/tools/+1",
            "/result/tools/2",
            "/result/tools/-",
            "/a~1b",
            "/m~0n",
            "/01",
            "result",
            "/result/isError/x",
            "/missing/x",
        ];
        for pointer in pointers {
            assert_eq!(value.at(pointer), value.pointer(pointer), "{pointer:?}");
        }
    }
}
