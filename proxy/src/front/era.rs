//! Protocol eras. MCP 2026-07-28 is session-less: no `initialize`, the protocol version travels
//! in `params._meta` and the `MCP-Protocol-Version` header. Until the proxy bridges that era, such
//! requests get a clear error naming the revisions it serves, so clients can fall back to the
//! `initialize` handshake (never a request forwarded to a stateful upstream without one: field
//! case BR-22).

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::answer::Answer;
use crate::jsonrpc::{self, Message};
use crate::upstream::session::HANDSHAKE_VERSIONS;

/// The `_meta` key carrying the protocol version in the session-less era (SEP-2567).
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// Whether a request without a session id is in the session-less (2026-07-28) form.
pub fn is_stateless(headers: &HeaderMap, message: &Message) -> bool {
    let header_version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let body = match message {
        Message::Request { body, .. } | Message::Notification { body, .. } => body,
        Message::Response { .. } => return false,
    };
    let meta_version = body
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .is_some();
    meta_version
        || message.method() == Some("server/discover")
        || (!header_version.is_empty() && !HANDSHAKE_VERSIONS.contains(&header_version))
}

/// 400 with -32022 and `error.data.supported`.
pub fn unsupported(id: &Value) -> Answer {
    Answer::error_with_data(
        StatusCode::BAD_REQUEST,
        id,
        jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        "session-less protocol revisions are not served by this proxy; send initialize with one of the supported versions",
        json!({ "supported": HANDSHAKE_VERSIONS }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(v: Value) -> Message {
        Message::classify(v).expect("valid message")
    }

    #[test]
    fn meta_protocol_version_or_new_header_is_stateless() {
        let meta = classify(json!({"jsonrpc":"2.0","id":1,"method":"tools/list",
            "params":{"_meta":{META_PROTOCOL_VERSION:"2026-07-28"}}}));
        assert!(is_stateless(&HeaderMap::new(), &meta));
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-protocol-version",
            "2026-07-28".parse().expect("header"),
        );
        let plain = classify(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        assert!(is_stateless(&headers, &plain));
    }

    #[test]
    fn handshake_era_request_is_not_stateless() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "mcp-protocol-version",
            "2025-06-18".parse().expect("header"),
        );
        let plain = classify(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        assert!(!is_stateless(&headers, &plain));
        assert!(!is_stateless(&HeaderMap::new(), &plain));
    }
}
