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

/// The `MCP-Protocol-Version` header of a request on a live session when it names a revision
/// the proxy does not serve; `None` when absent (MCP 2025-06-18 lets the server assume
/// 2025-03-26) or supported.
pub fn unsupported_header(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("mcp-protocol-version")?;
    match value.to_str() {
        Ok(version) if HANDSHAKE_VERSIONS.contains(&version) => None,
        Ok(version) => Some(version.to_owned()),
        Err(_) => Some(String::from_utf8_lossy(value.as_bytes()).into_owned()),
    }
}

/// 400 with -32022 for a live session's request whose `MCP-Protocol-Version` header names
/// `version`, which the proxy does not serve (MCP 2025-06-18, "Protocol Version Header": the
/// server MUST answer 400); `error.data.supported` lists the revisions it does serve.
pub fn unsupported_header_answer(id: &Value, version: &str) -> Answer {
    Answer::error_with_data(
        StatusCode::BAD_REQUEST,
        id,
        jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        &format!("unsupported MCP-Protocol-Version header {version:?}"),
        json!({ "supported": HANDSHAKE_VERSIONS, "requested": version }),
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
    fn unsupported_header_names_only_versions_the_proxy_does_not_serve() {
        let with = |v: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("mcp-protocol-version", v.parse().expect("header"));
            headers
        };
        assert_eq!(unsupported_header(&HeaderMap::new()), None);
        assert_eq!(unsupported_header(&with("2025-06-18")), None);
        assert_eq!(
            unsupported_header(&with("1999-01-01")).as_deref(),
            Some("1999-01-01")
        );
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
