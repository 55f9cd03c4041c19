//! A legacy client's requests that have no counterpart on a modern (MCP 2026-07-28) upstream's
//! wire, answered by the proxy (issue 13): `ping` (the revision removed it; the proxy answers
//! for its own hop), `logging/setLevel` (the revision takes the level per request, so the proxy
//! keeps it and sends it as `_meta` `io.modelcontextprotocol/logLevel` on the client's later
//! requests), and `resources/subscribe` / `resources/unsubscribe` (replaced by
//! `subscriptions/listen`, not bridged yet: refused with -32601 naming why, never forwarded to
//! an upstream that would answer them with an error of its own or not at all).

use serde_json::{Value, json};

use crate::jsonrpc::{self, WireMessage};
use crate::sessions::DownstreamSession;

/// What the proxy answers in the upstream's place.
#[derive(Debug, PartialEq)]
pub enum Local {
    /// A result (`{}`).
    Result(Value),
    /// A JSON-RPC error: code and message.
    Refused(i64, String),
}

/// The proxy's answer to `method` from a legacy client over a modern upstream; `None` when the
/// request goes upstream.
pub fn answer(session: &DownstreamSession, method: &str, body: &WireMessage) -> Option<Local> {
    match method {
        "ping" => Some(Local::Result(json!({}))),
        "logging/setLevel" => {
            let level = body.pointer("/params/level").and_then(Value::as_str);
            Some(match level {
                Some(level) => {
                    session.set_log_level(level);
                    Local::Result(json!({}))
                }
                None => Local::Refused(
                    jsonrpc::INVALID_PARAMS,
                    "logging/setLevel needs params.level".to_owned(),
                ),
            })
        }
        "resources/subscribe" | "resources/unsubscribe" => Some(Local::Refused(
            jsonrpc::METHOD_NOT_FOUND,
            format!(
                "{method} is not available: the upstream speaks MCP 2026-07-28, which replaced it \
                 with subscriptions/listen, and the proxy does not bridge resource subscriptions \
                 to it"
            ),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::Sessions;

    #[test]
    fn ping_and_set_level_are_answered_and_subscriptions_refused_clearly() {
        let sessions = Sessions::new(std::time::Duration::from_secs(60));
        let session = sessions.create("2025-06-18", json!({}), None);
        let ping: WireMessage = json!({"jsonrpc":"2.0","id":1,"method":"ping"}).into();
        assert_eq!(
            answer(&session, "ping", &ping),
            Some(Local::Result(json!({})))
        );
        let level: WireMessage =
            json!({"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}})
                .into();
        assert_eq!(
            answer(&session, "logging/setLevel", &level),
            Some(Local::Result(json!({})))
        );
        assert_eq!(session.client_hop().log_level.as_deref(), Some("debug"));
        let subscribe: WireMessage =
            json!({"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"a://b"}})
                .into();
        let Some(Local::Refused(code, message)) =
            answer(&session, "resources/subscribe", &subscribe)
        else {
            panic!("refused");
        };
        assert_eq!(code, jsonrpc::METHOD_NOT_FOUND);
        assert!(message.contains("subscriptions/listen"), "{message}");
        let call: WireMessage =
            json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo"}}).into();
        assert_eq!(answer(&session, "tools/call", &call), None);
    }
}
