//! A legacy client's requests that have no counterpart on a modern (MCP 2026-07-28) upstream's
//! wire, answered by the proxy (issue 13): `ping` (the revision removed it; the proxy answers
//! for its own hop) and `logging/setLevel` (the revision takes the level per request, so the
//! proxy keeps it and sends it as `_meta` `io.modelcontextprotocol/logLevel` on the client's
//! later requests). `resources/subscribe` is bridged onto the proxy's `subscriptions/listen`
//! stream (`crate::client::subscriptions`).

use crate::wire::jsonrpc::Pointer as _;
use serde_json::{Value, json};

use crate::client::sessions::DownstreamSession;
use crate::wire::jsonrpc::{self, WireMessage};

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
            let level = body.at("/params/level").and_then(Value::as_str);
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
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::sessions::Sessions;

    #[test]
    fn ping_and_set_level_are_answered_here() {
        let sessions = Sessions::new(std::time::Duration::from_secs(60));
        let session = sessions.create("2025-06-18", json!({}), None, None);
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
        let call: WireMessage =
            json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo"}}).into();
        assert_eq!(answer(&session, "tools/call", &call), None);
    }
}
