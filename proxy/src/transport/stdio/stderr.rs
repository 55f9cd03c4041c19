//! A child's stderr: drained continuously into the proxy's log with a per-child prefix, its
//! last lines kept (secret-like values redacted) for diagnosing a child that fails to start
//! (field cases BR-13 b, BR-34).
//!
//! Draining never waits on anything but the pipe, so a child that floods stderr never blocks on
//! it. Logging is rate-limited ([`LOGGED_PER_SECOND`]); lines past the rate are still read, kept
//! in the tail and counted, just not logged.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, BufReader};

use super::lines::{Line, LineReader};
use crate::observe::metrics::stdio::StdioMetrics;

/// Lines of stderr kept per child.
pub const TAIL_LINES: usize = 20;
/// Longest stderr line kept or logged, in bytes; longer lines are cut.
pub const MAX_STDERR_LINE_BYTES: usize = 512;
/// Most stderr lines logged per child and second.
pub const LOGGED_PER_SECOND: u32 = 50;

/// The last [`TAIL_LINES`] stderr lines of one child, redacted and cut to
/// [`MAX_STDERR_LINE_BYTES`].
#[derive(Debug, Default)]
pub struct StderrTail {
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    /// Keeps `line` (raw; redacted when read).
    fn push(&self, line: String) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The kept lines, redacted, oldest first, joined with ` | ` (empty when the child wrote
    /// nothing).
    pub fn summary(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines
            .iter()
            .map(|l| redact(l))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// The last kept line, redacted, if any.
    pub fn last(&self) -> Option<String> {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.back().map(|l| redact(l))
    }
}

/// Reads `stderr` to its end, logging each line as `child stderr` with `child = label` and
/// keeping the tail in `tail`; cancels `done` at the end.
pub async fn drain(
    stderr: impl AsyncRead + Unpin,
    label: String,
    tail: Arc<StderrTail>,
    metrics: StdioMetrics,
    done: tokio_util::sync::CancellationToken,
) {
    let _done = done.drop_guard();
    let mut lines = LineReader::new(BufReader::new(stderr), MAX_STDERR_LINE_BYTES);
    let mut window = Instant::now();
    let mut logged = 0u32;
    while let Ok(Some(line)) = lines.next_line().await {
        let bytes = match line {
            Line::Complete(bytes) => bytes,
            Line::TooLong { head, .. } => head,
        };
        let end = bytes.len().min(MAX_STDERR_LINE_BYTES);
        let text = redact(String::from_utf8_lossy(&bytes[..end]).trim_end());
        if window.elapsed() >= Duration::from_secs(1) {
            window = Instant::now();
            logged = 0;
        }
        if logged < LOGGED_PER_SECOND {
            logged += 1;
            metrics.stderr_lines.with_label_values(&["logged"]).inc();
            tracing::info!(child = %label, line = %crate::observe::escaped::Escaped(&text), "child stderr");
        } else {
            metrics
                .stderr_lines
                .with_label_values(&["suppressed"])
                .inc();
        }
        tail.push(text);
    }
}

/// Key words whose value is replaced by `[redacted]`.
const SECRET_KEYS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "authorization",
    "bearer",
    "credential",
    "private_key",
];

/// Replaces secret-like values in a log line by `[redacted]`: the value after a secret-like key
/// (`token=…`, `password: …`, `Authorization: Bearer …`), the password of a URL
/// (`scheme://user:pass@host`), and long token-like words (24+ letters, digits, `-`, `_` mixing
/// letters and digits, such as API keys).
pub fn redact(line: &str) -> String {
    let mut out = Vec::new();
    let mut redact_next = false;
    for word in line.split(' ') {
        if redact_next && !word.is_empty() {
            out.push("[redacted]".to_owned());
            let lower = word.to_ascii_lowercase();
            redact_next = lower == "bearer" || lower == "basic";
            continue;
        }
        let lower = word.to_ascii_lowercase();
        let keyed = SECRET_KEYS.iter().any(|key| lower.contains(key));
        if keyed && let Some(at) = word.find(['=', ':']) {
            let value = &word[at + 1..];
            if value.is_empty() || value.starts_with("//") {
                redact_next = value.is_empty();
                out.push(redact_url(word));
            } else {
                out.push(format!("{}[redacted]", &word[..=at]));
            }
            continue;
        }
        redact_next = keyed && (lower == "bearer" || lower.ends_with("token"));
        out.push(if looks_like_token(word) {
            "[redacted]".to_owned()
        } else {
            redact_url(word)
        });
    }
    out.join(" ")
}

fn redact_url(word: &str) -> String {
    if let Some(scheme_end) = word.find("://") {
        let rest = &word[scheme_end + 3..];
        if let Some(at) = rest.find('@')
            && let Some(colon) = rest[..at].find(':')
        {
            return format!(
                "{}{}:[redacted]{}",
                &word[..scheme_end + 3],
                &rest[..colon],
                &rest[at..]
            );
        }
    }
    word.to_owned()
}

fn looks_like_token(word: &str) -> bool {
    let word = word.trim_matches(|c: char| "\"',;()[]{}".contains(c));
    word.len() >= 24
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_secret_like_values_and_keeps_the_rest() {
        let cases = [
            ("no database URL provided", "no database URL provided"),
            ("API_TOKEN=abc123 starting", "API_TOKEN=[redacted] starting"),
            (
                "password: hunter2 rejected",
                "password: [redacted] rejected",
            ),
            (
                "Authorization: Bearer eyJhbGciOi",
                "Authorization: [redacted] [redacted]",
            ),
            (
                "connect postgres://app:s3cret@db:5432/x failed",
                "connect postgres://app:[redacted]@db:5432/x failed",
            ),
            (
                "key sk-live-4f9a8b7c6d5e4f3a2b1c0d9e used",
                "key [redacted] used",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "{input}");
        }
    }

    #[test]
    fn tail_keeps_only_the_last_lines() {
        let tail = StderrTail::default();
        for n in 0..(TAIL_LINES + 5) {
            tail.push(format!("line {n}"));
        }
        assert_eq!(tail.last().as_deref(), Some("line 24"));
        assert!(tail.summary().starts_with("line 5 |"), "{}", tail.summary());
    }
}
