//! Text a client, an upstream or a stdio child chose, made safe for a log line (issue 39,
//! item 7): a tracing field recorded with `%` (Display) is written raw, so a tool name holding
//! `\n` and an ANSI escape would start a forged line of the proxy's log. [`Escaped`] writes it
//! with every control character escaped (`\n`, `\u{1b}`, as [`str::escape_debug`] does) and cut
//! to [`MAX_LOGGED_BYTES`].
//!
//! Not responsible for: audit events (JSON lines, escaped by `serde_json`, cut by
//! `client::audit::field`), or text the proxy chose itself.

use std::fmt;

/// Most bytes of one chosen text a log line keeps; the rest is counted, not written.
pub const MAX_LOGGED_BYTES: usize = 1024;

/// Chosen text for a log field: `tracing::info!(tool = %Escaped(tool), ...)`. Displays the
/// first [`MAX_LOGGED_BYTES`] bytes (cut at a character boundary) with control characters,
/// quotes and backslashes escaped, then `…[truncated N bytes]` when there was more.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        let mut cut = text.len().min(MAX_LOGGED_BYTES);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        write!(f, "{}", text[..cut].escape_debug())?;
        if cut < text.len() {
            write!(f, "…[truncated {} bytes]", text.len() - cut)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_control_characters_never_reach_the_line() {
        let forged = "echo\n2026-12-07T00:00:00Z  WARN forged\x1b[31m\r\t";
        let shown = Escaped(forged).to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(
            shown,
            "echo\\n2026-12-07T00:00:00Z  WARN forged\\u{1b}[31m\\r\\t"
        );
    }

    #[test]
    fn escaped_long_text_is_cut_and_counted() {
        let long = "é".repeat(1000);
        let shown = Escaped(&long).to_string();
        assert!(shown.starts_with(&"é".repeat(512)), "{shown}");
        assert!(shown.ends_with("…[truncated 976 bytes]"), "{shown}");
    }
}
