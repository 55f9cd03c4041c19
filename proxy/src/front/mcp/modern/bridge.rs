//! What differs between a modern (MCP 2026-07-28) client and a legacy upstream session on the
//! way back, and how the proxy bridges it: the reply gains what the modern revision requires of
//! a result (`resultType`, cache hints, `serverInfo`) and the modern error code for a missing
//! resource. A modern upstream's reply already has them and passes as it came. Everything else
//! is carried byte for byte (issue 12, item 6). The request side (the client-hop `_meta`
//! fields, removed for a legacy upstream, filled in for a modern one) is the call engine's, as
//! it depends on the upstream that serves the call ([`crate::transport::upstream::era`]).

use crate::wire::jsonrpc::Pointer as _;
use serde_json::{Value, json};

use crate::front::mcp::era::META_SERVER_INFO;
use crate::wire::jsonrpc::{self, WireMessage};

/// Methods whose results carry cache hints (MCP 2026-07-28, "Caching", "Cacheable Results").
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

/// The legacy "resource not found" code (MCP 2025-11-25); 2026-07-28 uses -32602.
const LEGACY_RESOURCE_NOT_FOUND: i64 = -32002;

/// Shapes a legacy upstream's final response to a modern client's `method` request: a result
/// gains `resultType: "complete"`, for cacheable methods `ttlMs: 0` and `cacheScope: "private"`
/// (immediately stale and never shared: a legacy upstream gives no hints, so the proxy promises
/// nothing), and `_meta.serverInfo` (the upstream's, from its handshake) when it has none; a
/// `resources/read` error -32002 becomes -32602. Members the upstream sent are never replaced.
pub fn shape_response(message: &mut WireMessage, method: &str, server_info: Option<&Value>) {
    if message.get("result").is_some_and(Value::is_object) {
        if CACHEABLE.contains(&method) {
            message.insert_member(&["result"], "cacheScope", &json!("private"));
            message.insert_member(&["result"], "ttlMs", &json!(0));
        }
        if let Some(info) = server_info {
            if message.at("/result/_meta").is_some_and(Value::is_object) {
                message.insert_member(&["result", "_meta"], META_SERVER_INFO, info);
            } else if message.at("/result/_meta").is_none() {
                message.insert_member(&["result"], "_meta", &json!({ META_SERVER_INFO: info }));
            }
        }
        message.insert_member(&["result"], "resultType", &json!("complete"));
    } else if method == "resources/read"
        && message.at("/error/code").and_then(Value::as_i64) == Some(LEGACY_RESOURCE_NOT_FOUND)
    {
        message.set(&["error", "code"], &json!(jsonrpc::INVALID_PARAMS));
    }
}

/// The `server/discover` result for a legacy upstream, built from its `initialize` result:
/// the revisions the proxy serves, the upstream's capabilities and instructions, its
/// `serverInfo` in `_meta` (MCP 2026-07-28, "Discovery").
pub fn discover_result(initialize_result: &Value, supported: &[&str]) -> Value {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": supported,
        "capabilities": initialize_result.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(info) = initialize_result.get("serverInfo") {
        result["_meta"] = json!({ META_SERVER_INFO: info });
    }
    if let Some(instructions) = initialize_result.get("instructions") {
        result["instructions"] = instructions.clone();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_response_adds_what_the_modern_revision_requires_and_replaces_nothing() {
        let info = json!({"name": "up", "version": "1"});
        let mut list: WireMessage =
            WireMessage::parse(br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ttlMs":5}}"#)
                .expect("parse");
        shape_response(&mut list, "tools/list", Some(&info));
        assert_eq!(
            list["result"],
            json!({"resultType":"complete","_meta":{META_SERVER_INFO: info},
                "cacheScope":"private","ttlMs":5,"tools":[]})
        );
        let mut call: WireMessage =
            json!({"jsonrpc":"2.0","id":2,"result":{"content":[],"_meta":{"k":1}}}).into();
        shape_response(&mut call, "tools/call", Some(&info));
        assert_eq!(call["result"]["resultType"], json!("complete"));
        assert_eq!(call["result"]["_meta"]["k"], json!(1));
        assert!(
            call["result"].get("ttlMs").is_none(),
            "tools/call is not cacheable"
        );
        let mut missing: WireMessage =
            json!({"jsonrpc":"2.0","id":3,"error":{"code":-32002,"message":"nope"}}).into();
        shape_response(&mut missing, "resources/read", None);
        assert_eq!(missing["error"]["code"], json!(-32602));
    }

    #[test]
    fn discover_result_is_built_from_the_upstream_handshake() {
        let init = json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}},
            "serverInfo":{"name":"up","version":"1"},"instructions":"be nice"});
        let result = discover_result(&init, &["2026-07-28", "2025-11-25"]);
        assert_eq!(
            result["supportedVersions"],
            json!(["2026-07-28", "2025-11-25"])
        );
        assert_eq!(result["capabilities"], json!({"tools":{}}));
        assert_eq!(result["_meta"][META_SERVER_INFO]["name"], json!("up"));
        assert_eq!(result["instructions"], json!("be nice"));
        assert_eq!(result["resultType"], json!("complete"));
    }
}
