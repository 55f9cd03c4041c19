//! Protocol eras on one endpoint (MCP 2026-07-28, "Versioning", "Backward Compatibility"):
//! **legacy** revisions open a session with `initialize` (2025-11-25 and earlier); the
//! **modern** revision (2026-07-28) has no session and declares its version on every request,
//! in `params._meta` and the `MCP-Protocol-Version` header. The front decides the era per
//! request ([`is_modern`]) and serves both at once, for different clients.

use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::observe::metrics::Metrics;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc::{self, Message};
use crate::wire::revision::HANDSHAKE_VERSIONS;

pub use crate::wire::revision::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
    META_SERVER_INFO, MODERN_VERSIONS, supported_versions,
};

/// Whether a request that names no live session is in the modern form: its `params._meta`
/// carries a protocol version, or it is `server/discover`, or its `MCP-Protocol-Version` names a
/// revision without a handshake. `initialize` is modern only with the `_meta` version: a dual-era
/// client falling back to the handshake may still send the modern header.
pub fn is_modern(headers: &HeaderMap, message: &Message) -> bool {
    let body = match message {
        Message::Request { body, .. } | Message::Notification { body, .. } => body,
        Message::Response { .. } => return header_version(headers).is_some_and(is_modern_header),
    };
    // Read through the envelope: nothing is parsed (issue 14).
    if body
        .member_text(&["params", "_meta", META_PROTOCOL_VERSION])
        .is_some()
    {
        return true;
    }
    match message.method() {
        Some("initialize") => false,
        Some("server/discover") => true,
        _ => header_version(headers).is_some_and(is_modern_header),
    }
}

/// Whether a GET or DELETE without a live session is a modern client's (its
/// `MCP-Protocol-Version` names a revision without a handshake): answered 405 (MCP 2026-07-28,
/// "Earlier Streamable HTTP Revisions").
pub fn is_modern_without_body(headers: &HeaderMap) -> bool {
    header_version(headers).is_some_and(is_modern_header)
}

fn is_modern_header(version: &str) -> bool {
    !HANDSHAKE_VERSIONS.contains(&version)
}

/// The `MCP-Protocol-Version` header as text (lossy when it is not UTF-8); `None` when absent.
pub fn header_version(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(crate::wire::headers::PROTOCOL_VERSION_HEADER)
        .map(|v| v.to_str().unwrap_or("(not UTF-8)"))
}

/// 400 with -32022 for a request naming revision `requested`, which the proxy does not serve;
/// `error.data` carries `supported` (every revision served, newest first) and `requested`, as
/// MCP 2026-07-28's `UnsupportedProtocolVersionError` requires.
pub fn unsupported(id: &Value, requested: &str) -> Answer {
    Answer::error_with_data(
        StatusCode::BAD_REQUEST,
        id,
        jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
        &format!(
            "unsupported protocol version {:?}",
            crate::wire::echoed::echoed(requested)
        ),
        json!({ "supported": supported_versions(), "requested": crate::wire::echoed::echoed(requested) }),
    )
}

/// The `MCP-Protocol-Version` header of a request on a live (legacy) session when it names a
/// revision the proxy does not serve; `None` when absent (MCP 2025-06-18 lets the server assume
/// 2025-03-26) or supported.
pub fn unsupported_header(headers: &HeaderMap) -> Option<String> {
    let version = header_version(headers)?;
    (!HANDSHAKE_VERSIONS.contains(&version)).then(|| version.to_owned())
}

/// 400 (-32022, counted as `protocol_version`) when the request's `MCP-Protocol-Version` names
/// a revision the proxy does not serve ([`unsupported_header`]).
pub(super) fn unsupported_version(
    metrics: &Metrics,
    headers: &HeaderMap,
    id: &Value,
) -> Option<Answer> {
    let version = unsupported_header(headers)?;
    metrics
        .invalid_messages
        .with_label_values(&["protocol_version"])
        .inc();
    Some(unsupported(id, &version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classify(v: Value) -> Message {
        Message::classify(v).expect("valid message")
    }

    fn with_header(version: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("mcp-protocol-version", version.parse().expect("header"));
        headers
    }

    #[test]
    fn meta_protocol_version_or_new_header_is_modern() {
        let meta = classify(json!({"jsonrpc":"2.0","id":1,"method":"tools/list",
            "params":{"_meta":{META_PROTOCOL_VERSION:"2026-07-28"}}}));
        assert!(is_modern(&HeaderMap::new(), &meta));
        let plain = classify(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        assert!(is_modern(&with_header("2026-07-28"), &plain));
        let discover = classify(json!({"jsonrpc":"2.0","id":1,"method":"server/discover"}));
        assert!(is_modern(&HeaderMap::new(), &discover));
    }

    #[test]
    fn handshake_era_request_and_initialize_with_a_modern_header_are_legacy() {
        let plain = classify(json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}));
        assert!(!is_modern(&with_header("2025-06-18"), &plain));
        assert!(!is_modern(&HeaderMap::new(), &plain));
        let initialize = classify(json!({"jsonrpc":"2.0","id":1,"method":"initialize",
            "params":{"protocolVersion":"2025-11-25"}}));
        assert!(!is_modern(&with_header("2026-07-28"), &initialize));
    }

    #[test]
    fn unsupported_names_supported_and_requested_versions() {
        let Answer::Json { status, body, .. } = unsupported(&json!(4), "1999-01-01") else {
            panic!("a JSON answer");
        };
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["id"], json!(4));
        assert_eq!(body["error"]["data"]["requested"], json!("1999-01-01"));
        assert_eq!(body["error"]["data"]["supported"][0], json!("2026-07-28"));
        assert!(
            body["error"]["data"]["supported"]
                .as_array()
                .is_some_and(|v| v.contains(&json!("2025-06-18")))
        );
        assert_eq!(unsupported_header(&HeaderMap::new()), None);
        assert_eq!(unsupported_header(&with_header("2025-06-18")), None);
        assert_eq!(
            unsupported_header(&with_header("1999-01-01")).as_deref(),
            Some("1999-01-01")
        );
    }
}
