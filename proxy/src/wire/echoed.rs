//! Text a client or an upstream chose, cut to a bound before the proxy repeats it (issue 39,
//! item 8): a refusal that names a 4 MiB tool name in its message and its `data` would cost
//! twice the request to answer. [`echoed`] keeps [`MAX_ECHOED_BYTES`], enough for any tool
//! name the MCP specification recommends (at most 128 characters), and says how much it cut.
//!
//! Not responsible for: escaping (answers are JSON, audit lines JSON, log lines go through
//! `observe::escaped`).

use std::borrow::Cow;

/// Most bytes of one chosen text a refusal repeats.
pub const MAX_ECHOED_BYTES: usize = 256;

/// `text` cut to at most `max` bytes at a character boundary, followed by
/// `…[truncated N bytes]` (N: the bytes cut off) when it was longer; `text` itself otherwise.
pub fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!(
        "{}…[truncated {} bytes]",
        &text[..cut],
        text.len() - cut
    ))
}

/// `text` as a refusal may repeat it: [`truncate`] to [`MAX_ECHOED_BYTES`].
pub fn echoed(text: &str) -> Cow<'_, str> {
    truncate(text, MAX_ECHOED_BYTES)
}
