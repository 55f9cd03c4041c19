//! MCP protocol revisions and the per-request fields that tell them apart: the bottom layer that
//! both the fronts (per client) and the upstream transports (per upstream) use.
//!
//! Sources: MCP 2026-07-28 "Versioning" (legacy revisions open a session with `initialize`;
//! the modern revision declares its version on every request), "Basic" (`_meta` keys),
//! "Streamable HTTP" (`Mcp-Method` / `Mcp-Name`, SEP-2243).

use std::borrow::Cow;

use base64::Engine;

use crate::wire::jsonrpc::WireMessage;

/// Protocol revisions that have an `initialize` handshake (legacy), oldest first.
pub const HANDSHAKE_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The legacy revision the proxy asks a legacy upstream for: the newest with a handshake.
pub const REQUESTED_VERSION: &str = "2025-11-25";

/// The modern revisions the proxy serves and speaks, newest first.
pub const MODERN_VERSIONS: &[&str] = &["2026-07-28"];

/// `params._meta` key of a modern request's protocol version (required).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `params._meta` key of a modern request's client capabilities (required).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `params._meta` key of a modern request's client name and version (optional).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `params._meta` key of the lowest log level a modern request wants (optional; without it a
/// modern server sends no `notifications/message` for the request).
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `result._meta` key naming the server (MCP 2026-07-28, "Per-response protocol fields").
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// JSON-RPC error codes the modern revision defines (MCP 2026-07-28, "Error codes"): a server
/// that answers with one of them speaks the modern revision.
pub const MODERN_ERROR_CODES: [i64; 3] = [
    crate::wire::jsonrpc::HEADER_MISMATCH,
    crate::wire::jsonrpc::MISSING_CLIENT_CAPABILITY,
    crate::wire::jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
];

/// Every revision the proxy serves, newest first: the modern ones, then those with a handshake.
pub fn supported_versions() -> Vec<&'static str> {
    let mut versions = MODERN_VERSIONS.to_vec();
    versions.extend(HANDSHAKE_VERSIONS.iter().rev());
    versions
}

/// Whether `version` is a modern revision the proxy speaks.
pub fn is_modern_version(version: &str) -> bool {
    MODERN_VERSIONS.contains(&version)
}

/// The `params` member `Mcp-Name` mirrors for `method`: `name` of `tools/call` and
/// `prompts/get`, `uri` of `resources/read`; `None` for methods without one (MCP 2026-07-28,
/// "Streamable HTTP", "Request Metadata").
fn target_key(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// What `Mcp-Name` mirrors for `request`, whose method is `method`, read through its envelope
/// (no view is built; issue 14): `None` for methods without one (all but `tools/call`,
/// `prompts/get` and `resources/read`), `Some(None)` when the member is absent or not a string
/// of Unicode text.
pub fn named_target<'m>(request: &'m WireMessage, method: &str) -> Option<Option<Cow<'m, str>>> {
    target_key(method).map(|key| request.member_str(&["params", key]))
}

/// A header value for `text`: as is when it is visible ASCII without leading or trailing
/// spaces, otherwise in the `=?base64?…?=` form (MCP 2026-07-28, "Streamable HTTP", "Encoding
/// of header values").
pub fn header_value(text: &str) -> String {
    let plain = text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !text.starts_with(' ')
        && !text.ends_with(' ')
        && !text.starts_with("=?base64?");
    if plain {
        text.to_owned()
    } else {
        let encoded = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
        format!("=?base64?{encoded}?=")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn named_target_mirrors_name_or_uri_only_for_the_three_methods() {
        let request = |params: serde_json::Value| {
            WireMessage::from(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": params}))
        };
        let both = request(json!({"name": "echo", "uri": "file:///a"}));
        assert_eq!(
            named_target(&both, "tools/call").map(|n| n.map(Cow::into_owned)),
            Some(Some("echo".to_owned()))
        );
        assert_eq!(
            named_target(&both, "resources/read").map(|n| n.map(Cow::into_owned)),
            Some(Some("file:///a".to_owned()))
        );
        assert_eq!(named_target(&both, "tools/list"), None);
        assert_eq!(
            named_target(&request(json!({"name": 5})), "prompts/get"),
            Some(None)
        );
        assert_eq!(named_target(&request(json!([])), "tools/call"), Some(None));
    }

    #[test]
    fn header_value_encodes_what_a_header_cannot_carry() {
        assert_eq!(header_value("echo"), "echo");
        assert_eq!(header_value("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_value(" pad"), "=?base64?IHBhZA==?=");
        assert_eq!(header_value("line\nbreak"), "=?base64?bGluZQpicmVhaw==?=");
    }
}
