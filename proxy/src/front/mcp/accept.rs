//! What a client's `Accept` header takes, and the case-insensitive matching of header values
//! the front uses (values are read as they came, with no lowercased copy per request). Not
//! responsible for: refusing a request (the front decides from the answer).

use axum::http::HeaderMap;

/// Whether the client takes an SSE reply: no `Accept` header (tolerated as accepting both), or
/// one naming `text/event-stream`, `text/*` or `*/*`.
pub(super) fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get("accept").is_none_or(|accept| {
        ["text/event-stream", "text/*", "*/*"]
            .iter()
            .any(|kind| contains_ignoring_case(accept.as_bytes(), kind.as_bytes()))
    })
}

/// Whether `text` begins with `prefix`, ASCII letters compared without case (header values
/// are read as they came, with no lowercased copy per request).
pub(super) fn starts_with_ignoring_case(text: &[u8], prefix: &[u8]) -> bool {
    text.get(..prefix.len())
        .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

/// Whether `text` contains `part`, ASCII letters compared without case.
pub(super) fn contains_ignoring_case(text: &[u8], part: &[u8]) -> bool {
    text.windows(part.len())
        .any(|window| window.eq_ignore_ascii_case(part))
}
