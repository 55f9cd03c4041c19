//! The reader task of a stdio connection: one line at a time from the child's stdout (or the
//! stdio host's socket), each routed to the pending request it belongs to or to the standalone
//! channel, and an over-long line failing the request it answers. Lines that are not
//! JSON-RPC are skipped and counted.

use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncRead, BufReader};
use tokio::sync::mpsc;

use super::shared::{EndReason, Shared};
use crate::transport::stdio::lines::{Line, LineReader};
use crate::transport::upstream::UpstreamError;
use crate::wire::jsonrpc::Pointer as _;
use crate::wire::jsonrpc::{ParseError, WireMessage};

/// Prefix of the line a `berth-proxy stdio-host` sends before closing a connection it refuses.
pub const REFUSAL_PREFIX: &str = "berth-stdio-host: refused: ";

/// The reader task: routes each line until the connection ends or the stream does (then
/// `eof` fires). On a stdio host's socket (`socket`), a first line with [`REFUSAL_PREFIX`] ends
/// the connection as refused.
pub(super) async fn read_lines(
    shared: Arc<Shared>,
    read: impl AsyncRead + Unpin,
    standalone: mpsc::Sender<WireMessage>,
    socket: bool,
) {
    let mut lines = LineReader::new(BufReader::new(read), shared.max_line_bytes);
    let mut first = true;
    loop {
        let line = tokio::select! {
            () = shared.ended.cancelled() => break,
            line = lines.next_line() => line,
        };
        match line {
            Ok(Some(Line::Complete(bytes))) => {
                if socket
                    && first
                    && let Some(reason) = refusal(&bytes)
                {
                    shared.metrics.refusals.inc();
                    shared.end(EndReason::Refused(reason));
                    break;
                }
                route(&shared, bytes, &standalone).await;
            }
            Ok(Some(Line::TooLong { bytes, head, tail })) => {
                too_long(&shared, bytes, &head, &tail).await;
            }
            Ok(None) | Err(_) => break,
        }
        first = false;
    }
    shared.eof.cancel();
}

fn refusal(line: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    text.strip_prefix(REFUSAL_PREFIX).map(str::to_owned)
}

async fn route(shared: &Shared, bytes: Vec<u8>, standalone: &mpsc::Sender<WireMessage>) {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        shared
            .metrics
            .skipped_lines
            .with_label_values(&["blank"])
            .inc();
        return;
    }
    let message = match WireMessage::parse_unambiguous(&bytes) {
        Ok(message) => message,
        // A member name twice: JSON, but no unambiguous JSON-RPC message.
        Err(ParseError::Repeated(_)) => return shared.skip("not_jsonrpc", &bytes),
        Err(_) => return shared.skip("not_json", &bytes),
    };
    // A JSON-RPC batch (an array, as servers of revision 2025-03-26 may send): each member is
    // routed on its own, so a response inside one still completes its call at once (BR-23). A
    // member naming a member twice is skipped as a whole line would be: the proxy would route
    // it by the last name while the client it goes to may read the first.
    if let Some(members) = message.members() {
        for member in members {
            let raw = member.text().as_bytes().to_vec();
            if member.duplicate_member().is_some() {
                shared.skip("not_jsonrpc", &raw);
                continue;
            }
            route_message(shared, member, &raw, standalone).await;
        }
        return;
    }
    route_message(shared, message, &bytes, standalone).await;
}

/// Routes one JSON-RPC message from the child; `bytes` is its text, for skip logs.
async fn route_message(
    shared: &Shared,
    message: WireMessage,
    bytes: &[u8],
    standalone: &mpsc::Sender<WireMessage>,
) {
    if !message.is_object() {
        return shared.skip("not_jsonrpc", bytes);
    }
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").filter(|id| !id.is_null());
    let is_response = message.get("result").is_some() || message.get("error").is_some();
    match (method, id) {
        (None, Some(id)) if is_response => {
            let key = id.to_string();
            match shared.take_pending(&key) {
                Some(tx) => {
                    let _ = tx.send(Ok(message)).await;
                }
                None => shared.skip("unmatched", bytes),
            }
        }
        (Some(_), Some(_)) => match shared.only_pending() {
            // A server request during exactly one call belongs to that call's client.
            Some((_, tx)) => {
                let _ = tx.send(Ok(message)).await;
            }
            None => deliver_standalone(shared, standalone, message),
        },
        (Some(_), None) => {
            let token = message
                .at("/params/progressToken")
                .and_then(Value::as_str)
                .and_then(|t| t.strip_prefix("berth-"));
            // A log message during exactly one call is that call's, as a server request is:
            // stdio has no per-call stream, and the client reads the call's (MCP
            // "Streamable HTTP": messages related to a request go on its stream).
            let owner = match token {
                Some(key) => shared.pending_sender(key),
                None if method == Some("notifications/message") => {
                    shared.only_pending().map(|(_, tx)| tx)
                }
                None => None,
            };
            match owner {
                Some(tx) => {
                    if tx.try_send(Ok(message)).is_err() {
                        tracing::debug!(child = %shared.label, "dropped a call notification for a slow reader");
                    }
                }
                None => deliver_standalone(shared, standalone, message),
            }
        }
        // An error the child could not tie to a request (`id: null`, JSON-RPC 2.0 section 5)
        // answers the only request pending, the proxy's own included, as that request's own
        // HTTP reply would carry it (field case BR-01); with several pending, or once anything
        // else was written after that request, it answers none (issue 39, item 11).
        (None, None)
            if message.get("error").is_some() && message.get("id") == Some(&Value::Null) =>
        {
            match shared
                .null_id_target()
                .and_then(|key| shared.take_pending(&key))
            {
                Some(tx) => {
                    let _ = tx.send(Ok(message)).await;
                }
                None => shared.skip("unmatched", bytes),
            }
        }
        _ => shared.skip("not_jsonrpc", bytes),
    }
}

fn deliver_standalone(
    shared: &Shared,
    standalone: &mpsc::Sender<WireMessage>,
    message: WireMessage,
) {
    if standalone.try_send(message).is_err() {
        tracing::debug!(child = %shared.label, "dropped a server message: standalone buffer full or unread");
    }
}

/// An over-long line: the request it answers (found by its id at either end of the line, or
/// the only pending request) fails with [`UpstreamError::TooLong`]; otherwise it is skipped.
/// A line whose start names a `method` (a notification such as a long log message, or a server
/// request) answers no request, and fails none.
async fn too_long(shared: &Shared, bytes: u64, head: &[u8], tail: &[u8]) {
    shared.skip("too_long", head);
    if names_a_method(head) {
        return;
    }
    let target = response_id(head, tail)
        .and_then(|key| shared.take_pending(&key))
        .or_else(|| {
            let (key, _) = shared.only_pending()?;
            shared.take_pending(&key)
        });
    if let Some(tx) = target {
        let error = UpstreamError::TooLong {
            bytes,
            limit: shared.max_line_bytes,
        };
        let _ = tx.send(Err(error)).await;
    }
}

/// The JSON-RPC id of a message cut to its two ends: after a leading `{"jsonrpc":"2.0","id":`
/// or `{"id":` (Python SDK order), or before a trailing `}` as the last `"id":` (Node SDK
/// order). Returned in the form of `Value::to_string` (`7` or `"abc"`).
pub(super) fn response_id(head: &[u8], tail: &[u8]) -> Option<String> {
    let compact = compact(head, 64);
    for prefix in [r#"{"jsonrpc":"2.0","id":"#, r#"{"id":"#] {
        if let Some(rest) = compact.strip_prefix(prefix) {
            return id_token(rest);
        }
    }
    let tail = String::from_utf8_lossy(tail);
    let tail = tail.trim_end();
    let body = tail.strip_suffix('}')?;
    let at = body.rfind("\"id\":")?;
    let token = body[at + 5..].trim();
    id_token(token).filter(|t| t.len() == token.len())
}

/// Whether the start of a message cut short names a top-level `"method"` before any
/// `"result"` or `"error"`: a request or notification, in the member orders SDKs write
/// (`{"jsonrpc":"2.0","id":0,"method":…}`, `{"method":…,"params":…}`).
pub(super) fn names_a_method(head: &[u8]) -> bool {
    let compact = compact(head, 256);
    let Some(method) = compact.find(r#""method":"#) else {
        return false;
    };
    // Only the message's own brace before it: `method` is a top-level member.
    let before = &compact[..method];
    before.matches('{').count() == 1
        && !before.contains(r#""result":"#)
        && !before.contains(r#""error":"#)
}

/// The first `chars` characters of `head` that are not whitespace (outside strings or in
/// them: enough to read the start of an envelope).
fn compact(head: &[u8], chars: usize) -> String {
    String::from_utf8_lossy(head)
        .chars()
        .filter(|c| !c.is_whitespace())
        .take(chars)
        .collect()
}

fn id_token(rest: &str) -> Option<String> {
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    let token = rest[..end].trim();
    let valid = serde_json::from_str::<Value>(token).is_ok_and(|v| v.is_number() || v.is_string());
    valid.then(|| token.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_id_is_found_at_either_end() {
        assert_eq!(
            response_id(br#"{"jsonrpc":"2.0","id":12,"result":{"x":"#, b"").as_deref(),
            Some("12")
        );
        assert_eq!(
            response_id(
                br#"{"result":{"content":[{"id":99"#,
                br#"xx"}]},"jsonrpc":"2.0","id":"a-1"}"#
            )
            .as_deref(),
            Some(r#""a-1""#)
        );
        assert_eq!(response_id(b"garbage", b"more garbage"), None);
    }

    #[test]
    fn a_cut_message_names_a_method_only_at_its_top_level() {
        for request in [
            &br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"xx"#[..],
            br#"{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":"#,
            br#"{ "method" : "notifications/message", "params": {"#,
        ] {
            assert!(
                names_a_method(request),
                "{}",
                String::from_utf8_lossy(request)
            );
        }
        for response in [
            &br#"{"jsonrpc":"2.0","id":12,"result":{"method":"x","#[..],
            br#"{"result":{"content":[{"method":"x"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"method"#,
            b"garbage",
        ] {
            assert!(
                !names_a_method(response),
                "{}",
                String::from_utf8_lossy(response)
            );
        }
    }
}
