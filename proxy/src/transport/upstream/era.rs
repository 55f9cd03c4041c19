//! Which protocol era an upstream speaks, and a request as that era wants it.
//!
//! An upstream is **legacy** (an `initialize` handshake and, over HTTP, a session) or **modern**
//! (MCP 2026-07-28: no handshake, no session, the revision and the client's capabilities in
//! every request's `params._meta`). The proxy learns which with the probe the revision defines
//! (MCP 2026-07-28, "Versioning", "Backward Compatibility"; "stdio" and "Streamable HTTP",
//! "Backward Compatibility"): a `server/discover` that a modern server answers with its
//! `DiscoverResult` or a recognized modern error; anything else, a silent server included, means
//! legacy and the proxy falls back to `initialize`. The result is cached per upstream endpoint
//! and learned again each time the shared upstream session is re-established (issue 13).

use crate::wire::jsonrpc::Pointer as _;
use std::borrow::Cow;
use std::sync::atomic::{AtomicU8, Ordering};

use serde_json::{Map, Value, json};

use crate::wire::jsonrpc::{WireMessage, strings};
use crate::wire::revision::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_LOG_LEVEL, META_PROTOCOL_VERSION,
    MODERN_ERROR_CODES, MODERN_VERSIONS,
};

/// The era an upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamEra {
    /// `initialize` first; a session over HTTP (MCP 2025-11-25 and earlier).
    Legacy,
    /// Per-request `_meta`, no session (MCP 2026-07-28).
    Modern,
}

impl UpstreamEra {
    /// `legacy` or `modern`, as metric labels and the admin endpoint show it.
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Legacy => "legacy",
            Self::Modern => "modern",
        }
    }
}

/// The era last learned for one endpoint, shared by its clones (the supervisor's and every
/// `PerClient` session's), so only the supervisor pays for the probe.
#[derive(Debug, Default)]
pub struct EraCache(AtomicU8);

impl EraCache {
    /// The era learned last; `None` before the first probe or after [`Self::forget`].
    pub fn get(&self) -> Option<UpstreamEra> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(UpstreamEra::Legacy),
            2 => Some(UpstreamEra::Modern),
            _ => None,
        }
    }

    /// Records what the probe found.
    pub fn set(&self, era: UpstreamEra) {
        let value = match era {
            UpstreamEra::Legacy => 1,
            UpstreamEra::Modern => 2,
        };
        self.0.store(value, Ordering::Relaxed);
    }

    /// Forgets the era, so the next upstream session probes again (after a restart, or when
    /// the cached assumption failed).
    pub fn forget(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// What a `server/discover` probe found.
#[derive(Debug, Clone, PartialEq)]
pub enum Probe {
    /// A `DiscoverResult` naming a modern revision the proxy speaks (`version`).
    Modern {
        version: &'static str,
        result: Value,
    },
    /// A modern server that speaks none of the proxy's modern revisions but offers a legacy one:
    /// the proxy falls back to `initialize` like for a legacy server.
    ModernWithoutCommonVersion {
        legacy_offered: bool,
        supported: Vec<String>,
    },
    /// Anything else: a legacy server.
    Legacy,
}

/// Classifies the JSON-RPC response to the probe (`None` when the upstream gave no usable
/// JSON-RPC response: an HTTP error without one, a silent or ended server).
pub fn classify(response: Option<&Value>) -> Probe {
    let Some(response) = response else {
        return Probe::Legacy;
    };
    if let Some(result) = response.get("result") {
        let supported = strings(result.get("supportedVersions"));
        return match common_version(&supported) {
            Some(version) => Probe::Modern {
                version,
                result: result.clone(),
            },
            None if supported.is_empty() => Probe::Legacy,
            None => without_common(supported),
        };
    }
    let code = response.at("/error/code").and_then(Value::as_i64);
    if !code.is_some_and(|code| MODERN_ERROR_CODES.contains(&code)) {
        return Probe::Legacy;
    }
    let supported = strings(response.at("/error/data/supported"));
    match common_version(&supported) {
        // A modern error despite a version the proxy speaks (a header it disliked, say): the
        // server is modern, and the proxy's own request is what it should have sent.
        Some(version) => Probe::Modern {
            version,
            result: Value::Null,
        },
        None => without_common(supported),
    }
}

fn without_common(supported: Vec<String>) -> Probe {
    let legacy_offered = supported
        .iter()
        .any(|v| crate::wire::revision::HANDSHAKE_VERSIONS.contains(&v.as_str()));
    Probe::ModernWithoutCommonVersion {
        legacy_offered,
        supported,
    }
}

fn common_version(supported: &[String]) -> Option<&'static str> {
    MODERN_VERSIONS
        .iter()
        .copied()
        .find(|ours| supported.iter().any(|theirs| theirs == ours))
}

/// The hop a request comes from, as a modern upstream must be told on every request: the
/// client's capabilities and `clientInfo` (a legacy client's from its `initialize`, the proxy's
/// own for its requests) and the log level a legacy client set with `logging/setLevel`.
#[derive(Debug, Clone, Default)]
pub struct ClientHop {
    /// `io.modelcontextprotocol/clientCapabilities` (an object).
    pub capabilities: Value,
    /// `io.modelcontextprotocol/clientInfo` (an object; left out when not one).
    pub info: Value,
    /// `io.modelcontextprotocol/logLevel`, if the client asked for log messages.
    pub log_level: Option<String>,
}

impl ClientHop {
    /// The proxy's own hop: the capabilities whose server requests it can route (sampling,
    /// elicitation, roots) and its name.
    pub fn proxy() -> Self {
        Self {
            capabilities: json!({ "sampling": {}, "elicitation": {}, "roots": {} }),
            info: json!({ "name": "berth-proxy", "version": env!("CARGO_PKG_VERSION") }),
            log_level: None,
        }
    }
}

/// A legacy client's `initialize` capabilities as a modern upstream should read them: an empty
/// `elicitation` (MCP 2025-06-18 had no modes; 2025-11-25 and 2026-07-28 read `{}` as form mode
/// only) is spelled out as `{"form": {}}`, so a server that checks the mode finds it. The rest is
/// as the client declared it.
pub fn modern_capabilities(legacy: &Value) -> Value {
    let mut capabilities = if legacy.is_object() {
        legacy.clone()
    } else {
        json!({})
    };
    if capabilities
        .get("elicitation")
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        capabilities["elicitation"] = json!({ "form": {} });
    }
    capabilities
}

/// The request's `params._meta` as a modern upstream on revision `version` needs it: the
/// revision always (the upstream's, whatever the client named), and the client's capabilities,
/// `clientInfo` and log level from `hop` where the request carries none. Every other member,
/// `params` beyond `_meta` included, stays byte for byte; nothing is re-serialized when
/// nothing changes (issue 12, item 6). Reads the request through its envelope: `params._meta`
/// alone is parsed (issue 14).
pub fn fill_meta(body: &mut WireMessage, version: &str, hop: &ClientHop) {
    let meta = body.member(&["params", "_meta"]).map(Cow::into_owned);
    let meta = meta.as_ref().and_then(Value::as_object);
    let has = |key: &str| meta.is_some_and(|m| m.contains_key(key));
    let version_right = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        == Some(version);
    let info_due = !has(META_CLIENT_INFO) && hop.info.is_object();
    let level_due = !has(META_LOG_LEVEL) && hop.log_level.is_some();
    if version_right && has(META_CLIENT_CAPABILITIES) && !info_due && !level_due {
        return;
    }
    let fields = [
        (!version_right).then(|| (META_PROTOCOL_VERSION, json!(version))),
        (!has(META_CLIENT_CAPABILITIES)).then(|| {
            let capabilities = Some(&hop.capabilities).filter(|c| c.is_object());
            let capabilities = capabilities.cloned().unwrap_or_else(|| json!({}));
            (META_CLIENT_CAPABILITIES, capabilities)
        }),
        info_due.then(|| (META_CLIENT_INFO, hop.info.clone())),
        (hop.log_level.as_ref())
            .filter(|_| level_due)
            .map(|level| (META_LOG_LEVEL, json!(level))),
    ];
    if meta.is_some() {
        // Set or added member by member: the client's own members keep their text as written
        // (found by a new user: `_meta` was re-serialized from its view).
        for (key, value) in fields.into_iter().flatten() {
            if !body.set(&["params", "_meta", key], &value) {
                body.insert_member(&["params", "_meta"], key, &value);
            }
        }
        return;
    }
    let filled: Map<String, Value> = fields
        .into_iter()
        .flatten()
        .map(|(key, value)| (key.to_owned(), value))
        .collect();
    let filled = Value::Object(filled);
    let params_object = body.member_text(&["params"]).map(|p| p.starts_with('{'));
    match params_object {
        // `_meta` that is not an object: replaced.
        Some(true) if body.member_text(&["params", "_meta"]).is_some() => {
            body.set(&["params", "_meta"], &filled);
        }
        Some(true) => {
            body.insert_member(&["params"], "_meta", &filled);
        }
        // Not an object: an invalid request the upstream answers for itself.
        Some(false) => {}
        None => {
            body.insert_member(&[], "params", &json!({ "_meta": filled }));
        }
    }
}

/// The `_meta` keys of a modern request that describe the client's hop to the proxy, not the
/// request: removed before a legacy upstream sees it (its session already has a protocol
/// version, client info and capabilities). Progress tokens, trace context and vendor keys stay.
const CLIENT_HOP_KEYS: [&str; 4] = [
    META_PROTOCOL_VERSION,
    META_CLIENT_INFO,
    META_CLIENT_CAPABILITIES,
    META_LOG_LEVEL,
];

/// Removes the client-hop `_meta` keys from a modern client's request before it goes to a
/// legacy upstream. Every other member of `params._meta` (the progress token, trace context,
/// vendor keys) keeps its text as the client wrote it.
pub fn strip_client_hop(body: &mut WireMessage) {
    body.remove_members(&["params", "_meta"], &CLIENT_HOP_KEYS);
}

/// Whether a message the proxy would send a modern upstream has a place on its wire: requests
/// always; of the notifications only `notifications/cancelled`, and only over stdio (over HTTP,
/// closing the response stream is the cancellation: MCP 2026-07-28, "Cancellation"). The
/// handshake's and roots' notifications and responses to server requests (a modern server
/// sends none) are left out.
pub fn has_place_on_modern_wire(message: &WireMessage, stdio: bool) -> bool {
    if message.member_text(&["id"]).is_some() && message.member_text(&["method"]).is_some() {
        return true;
    }
    stdio && message.member_str(&["method"]).as_deref() == Some("notifications/cancelled")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_discover_result_or_a_modern_error_is_modern_anything_else_legacy() {
        let result = json!({"jsonrpc":"2.0","id":0,"result":{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{}}});
        assert!(matches!(
            classify(Some(&result)),
            Probe::Modern {
                version: "2026-07-28",
                ..
            }
        ));
        let unsupported = json!({"jsonrpc":"2.0","id":0,"error":{"code":-32022,"message":"no",
            "data":{"supported":["2027-01-01"],"requested":"2026-07-28"}}});
        assert_eq!(
            classify(Some(&unsupported)),
            Probe::ModernWithoutCommonVersion {
                legacy_offered: false,
                supported: vec!["2027-01-01".to_owned()]
            }
        );
        let not_found =
            json!({"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"Method not found"}});
        assert_eq!(classify(Some(&not_found)), Probe::Legacy);
        let invalid = json!({"jsonrpc":"2.0","id":0,"error":{"code":-32602,"message":"Invalid request parameters"}});
        assert_eq!(classify(Some(&invalid)), Probe::Legacy);
        assert_eq!(classify(None), Probe::Legacy);
        let odd_result = json!({"jsonrpc":"2.0","id":0,"result":{}});
        assert_eq!(classify(Some(&odd_result)), Probe::Legacy);
    }

    #[test]
    fn fill_meta_adds_the_hop_fields_and_keeps_what_the_request_has() {
        let hop = ClientHop {
            capabilities: json!({"sampling": {}}),
            info: json!({"name": "legacy-client", "version": "1"}),
            log_level: Some("debug".to_owned()),
        };
        let mut body = WireMessage::parse(
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"n":12345678901234567890},"_meta":{"progressToken":"p"}}}"#,
        )
        .expect("parse");
        fill_meta(&mut body, "2026-07-28", &hop);
        let meta = body.pointer("/params/_meta").expect("meta");
        assert_eq!(meta[META_PROTOCOL_VERSION], json!("2026-07-28"));
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({"sampling": {}}));
        assert_eq!(meta[META_CLIENT_INFO]["name"], json!("legacy-client"));
        assert_eq!(meta[META_LOG_LEVEL], json!("debug"));
        assert_eq!(meta["progressToken"], json!("p"));
        assert!(
            body.text()
                .contains(r#""arguments":{"n":12345678901234567890}"#),
            "arguments byte for byte: {}",
            body.text()
        );
        let mut bare: WireMessage = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}).into();
        fill_meta(&mut bare, "2026-07-28", &ClientHop::proxy());
        assert_eq!(
            bare.pointer("/params/_meta/io.modelcontextprotocol~1clientInfo/name"),
            Some(&json!("berth-proxy"))
        );
        let modern_text = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"m"}}}}"#;
        let mut modern = WireMessage::parse(modern_text.as_bytes()).expect("parse");
        fill_meta(&mut modern, "2026-07-28", &ClientHop::proxy());
        assert_eq!(
            modern.text(),
            modern_text,
            "a complete modern request is untouched"
        );
    }

    #[test]
    fn a_call_goes_to_a_modern_upstream_through_its_envelope_and_no_view_is_built() {
        // issue 14: what the proxy reads and fills on every call to a modern upstream.
        let text = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"},"_meta":{"progressToken":"p"}}}"#;
        let mut body = WireMessage::parse(text.as_bytes()).expect("parse");
        assert!(has_place_on_modern_wire(&body, false));
        fill_meta(&mut body, "2026-07-28", &ClientHop::proxy());
        assert_eq!(
            crate::wire::revision::named_target(&body, "tools/call")
                .flatten()
                .as_deref(),
            Some("echo")
        );
        assert!(!body.view_is_built(), "the request's view was built");
        let meta = body.pointer("/params/_meta").expect("meta");
        assert_eq!(meta[META_PROTOCOL_VERSION], json!("2026-07-28"));
        assert_eq!(meta["progressToken"], json!("p"));
        // Without `_meta`, and with `params` missing, not an object, or `_meta` not an object:
        // filled as from the view.
        for text in [
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo"}}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"_meta":"no"}}"#,
        ] {
            let mut body = WireMessage::parse(text.as_bytes()).expect("parse");
            fill_meta(&mut body, "2026-07-28", &ClientHop::proxy());
            if text.contains("[1]") {
                assert_eq!(body.text(), text, "an array `params` is left alone");
            } else {
                let meta = body.pointer("/params/_meta").expect(text);
                assert_eq!(meta[META_PROTOCOL_VERSION], json!("2026-07-28"), "{text}");
            }
        }
        let notification = |method: &str| {
            WireMessage::parse(format!(r#"{{"jsonrpc":"2.0","method":"{method}"}}"#).as_bytes())
                .expect("parse")
        };
        assert!(has_place_on_modern_wire(
            &notification("notifications/cancelled"),
            true
        ));
        assert!(!has_place_on_modern_wire(
            &notification("notifications/cancelled"),
            false
        ));
        assert!(!has_place_on_modern_wire(
            &notification("notifications/initialized"),
            true
        ));
    }

    #[test]
    fn an_empty_legacy_elicitation_capability_is_form_mode() {
        assert_eq!(
            modern_capabilities(&json!({"elicitation": {}, "roots": {"listChanged": true}})),
            json!({"elicitation": {"form": {}}, "roots": {"listChanged": true}})
        );
        let both = json!({"elicitation": {"form": {}, "url": {}}});
        assert_eq!(modern_capabilities(&both), both);
        assert_eq!(modern_capabilities(&Value::Null), json!({}));
    }

    #[test]
    fn strip_client_hop_keeps_progress_token_trace_context_and_vendor_keys() {
        let text = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"n":12345678901234567890},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"c"},"progressToken":"p","traceparent":"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01","com.example/x":1}}}"#;
        let mut body = WireMessage::parse(text.as_bytes()).expect("parse");
        strip_client_hop(&mut body);
        let meta = body.pointer("/params/_meta").expect("meta kept");
        assert_eq!(
            meta,
            &json!({"progressToken":"p","traceparent":"00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01","com.example/x":1})
        );
        assert!(
            body.text()
                .contains(r#""arguments":{"n":12345678901234567890}"#),
            "the rest is byte for byte: {}",
            body.text()
        );
    }

    #[test]
    fn the_hop_fields_change_and_every_other_meta_member_keeps_its_text() {
        // Values a parsed view changes or cannot hold (found by a new user: `_meta` was
        // re-serialized, so these arrived as `1.5`, `"é"`, `null`, `[null]`).
        let vendor = format!(
            r#""com.x/v":1.50,"com.x/e":"\u00e9","com.x/s":"\ud800","\udc00":1,"com.x/d":{}1{}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let modern = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28",{vendor},"io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        );
        let mut body = WireMessage::parse(modern.as_bytes()).expect("parse");
        strip_client_hop(&mut body);
        assert_eq!(
            body.text(),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","_meta":{{{vendor}}}}}}}"#
            )
        );
        let hop = ClientHop {
            capabilities: json!({}),
            info: Value::Null,
            log_level: None,
        };
        let legacy = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","_meta":{{"io.modelcontextprotocol/protocolVersion":"2025-06-18",{vendor}}}}}}}"#
        );
        let mut body = WireMessage::parse(legacy.as_bytes()).expect("parse");
        fill_meta(&mut body, "2026-07-28", &hop);
        assert_eq!(
            body.text(),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","_meta":{{"io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/protocolVersion":"2026-07-28",{vendor}}}}}}}"#
            )
        );
    }

    #[test]
    fn only_requests_and_stdio_cancellations_reach_a_modern_upstream() {
        let request: WireMessage = json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}).into();
        let cancelled: WireMessage =
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}})
                .into();
        let initialized: WireMessage =
            json!({"jsonrpc":"2.0","method":"notifications/initialized"}).into();
        let response: WireMessage = json!({"jsonrpc":"2.0","id":3,"result":{}}).into();
        assert!(has_place_on_modern_wire(&request, false));
        assert!(has_place_on_modern_wire(&cancelled, true));
        assert!(!has_place_on_modern_wire(&cancelled, false));
        assert!(!has_place_on_modern_wire(&initialized, true));
        assert!(!has_place_on_modern_wire(&response, true));
    }
}
