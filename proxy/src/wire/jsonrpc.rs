//! JSON-RPC 2.0 message envelopes as the proxy sees them: classification of one message, and
//! construction of the error responses the proxy itself answers with.
//!
//! Messages are kept as [`WireMessage`]s, their exact text with a parsed view, so that
//! everything the proxy does not rewrite (params, results, unknown fields) reaches the other
//! side byte for byte (issue 12, item 6).
//! Source: JSON-RPC 2.0 specification §4–§5; MCP basic protocol (2025-06-18) "Messages".

mod pointer;
mod wire;

use std::borrow::Cow;

use serde_json::{Value, json};

pub use pointer::Pointer;
pub use wire::{ParseError, WireMessage};

/// JSON-RPC "Parse error": the body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request": JSON, but not a valid request for this session.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "Method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "Invalid params" (also what MCP servers answer for an unknown tool).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC "Internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// The request's time budget (`timeouts.call`) ran out. Same code the MCP TypeScript SDK uses.
pub const REQUEST_TIMEOUT: i64 = -32001;
/// No upstream session could be had within the connect budget.
pub const UPSTREAM_UNAVAILABLE: i64 = -32010;
/// The upstream forgot the session while the request was in flight.
pub const SESSION_LOST: i64 = -32011;
/// The upstream answered with an HTTP error or a malformed reply.
pub const UPSTREAM_ERROR: i64 = -32012;
/// `PerClient`: the proxy already serves `session.maxSessions` client sessions.
pub const SESSION_LIMIT: i64 = -32014;
/// The tool drifted from its baseline and `toolsProbe.onDrift` is `FailClosed`.
pub const DRIFT_BLOCKED: i64 = -32013;
/// A `tools/call` over a `tools.rateLimits` limit (issue 15); sent with HTTP 429 and
/// `Retry-After`, `data: {outcome: "rate_limited", tool, retryAfterSeconds}`.
pub const RATE_LIMITED: i64 = -32015;
/// A `tools/call` refused because the audit queue is full and `limits.auditOnOverflow` is
/// `RefuseCalls` (issue 39); `data: {outcome: "rejected", retryable: true, limit:
/// "auditQueueBytes"}`. Nothing reached the upstream.
pub const AUDIT_BACKLOG: i64 = -32016;
/// MCP 2026-07-28 `HeaderMismatch`: a required header (`MCP-Protocol-Version`, `Mcp-Method`,
/// `Mcp-Name`) is missing, malformed or differs from the body ("Streamable HTTP", "Server
/// Validation").
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28 `MissingRequiredClientCapability`: the request lacks a client capability the
/// server needs to serve it.
pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28 `UnsupportedProtocolVersion`: the request names a protocol revision the proxy
/// does not serve; `error.data` carries `supported` (the revisions it does serve) and
/// `requested` ("Versioning", "Protocol Version Negotiation").
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The strings of a JSON array (other members skipped); empty when `value` is no array.
pub fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// One JSON-RPC message, classified by shape (JSON-RPC 2.0 §4).
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// Has `method` and `id`: expects exactly one response.
    Request {
        /// The JSON-RPC request id (string or number).
        id: Value,
        /// Method name, e.g. `tools/call`.
        method: String,
        /// The whole message (a JSON object).
        body: WireMessage,
    },
    /// Has `method` and no `id`: no response.
    Notification {
        /// Method name, e.g. `notifications/initialized`.
        method: String,
        /// The whole message (a JSON object).
        body: WireMessage,
    },
    /// Has `result` or `error` and an `id`.
    Response {
        /// The JSON-RPC request id this answers (`null` only for errors that could not be
        /// correlated).
        id: Value,
        /// The whole message (a JSON object).
        body: WireMessage,
    },
}

/// Why a JSON value is not a JSON-RPC 2.0 message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// A top-level array: a batch, which MCP removed after revision 2025-03-26.
    #[error("JSON-RPC batches are not supported")]
    Batch,
    /// Anything else malformed; carries the request id when one could be read.
    #[error("{reason}")]
    Shape {
        /// What is wrong, for the client.
        reason: &'static str,
        /// The request id, when the message had a usable one.
        id: Option<Value>,
    },
}

impl Message {
    /// Classifies a message by its shape.
    ///
    /// # Errors
    /// [`Invalid`] when the value is a batch or not a JSON-RPC 2.0 message.
    pub fn classify(message: impl Into<WireMessage>) -> Result<Self, Invalid> {
        let body = message.into();
        // Read through the envelope, not the view: the message's `params` stay unparsed
        // (issue 14).
        match body.text().as_bytes().first() {
            Some(b'{') => {}
            Some(b'[') => return Err(Invalid::Batch),
            _ => return Err(shape("message must be a JSON object", None)),
        }
        // An id a `Value` cannot hold reads as `null`, as in the view.
        let id = body
            .member_text(&["id"])
            .map(|text| serde_json::from_str(text).unwrap_or(Value::Null));
        let usable_id = id.clone().filter(is_valid_id);
        if body.member_str(&["jsonrpc"]).as_deref() != Some("2.0") {
            return Err(shape("jsonrpc must be \"2.0\"", usable_id));
        }
        let is_response =
            body.member_text(&["result"]).is_some() || body.member_text(&["error"]).is_some();
        // `Some(None)`: a method that is not a string of Unicode text.
        let method = body
            .member_text(&["method"])
            .map(|_| body.member_str(&["method"]).map(Cow::into_owned));
        if method.is_some() && is_response {
            return Err(shape(
                "a message is a request or a response, never both (method with result/error)",
                usable_id,
            ));
        }
        match (method, id) {
            (Some(Some(method)), Some(_)) if method.starts_with("notifications/") => Err(shape(
                "a notification carries no id (notifications/* with an id)",
                usable_id,
            )),
            (Some(Some(method)), None) => Ok(Self::Notification { method, body }),
            (Some(Some(method)), Some(id)) if is_valid_id(&id) => {
                Ok(Self::Request { id, method, body })
            }
            (Some(Some(_)), Some(_)) if body.has_lone_surrogate(&["id"]) => {
                Err(shape(LONE_SURROGATE_ID, None))
            }
            (Some(Some(_)), Some(_)) => Err(shape("id must be a string or an integer", None)),
            (Some(None), id) if body.has_lone_surrogate(&["method"]) => {
                Err(shape(LONE_SURROGATE_METHOD, id.filter(is_valid_id)))
            }
            (Some(None), id) => Err(shape("method must be a string", id.filter(is_valid_id))),
            (None, Some(id)) if is_response => Ok(Self::Response { id, body }),
            (None, id) => Err(shape(
                "message has neither method nor result/error",
                id.filter(is_valid_id),
            )),
        }
    }

    /// The whole message.
    pub fn body(&self) -> &WireMessage {
        match self {
            Self::Request { body, .. }
            | Self::Notification { body, .. }
            | Self::Response { body, .. } => body,
        }
    }

    /// The method of a request or notification.
    pub fn method(&self) -> Option<&str> {
        match self {
            Self::Request { method, .. } | Self::Notification { method, .. } => Some(method),
            Self::Response { .. } => None,
        }
    }
}

/// The refusal of a request id that is a string no Unicode text can hold.
const LONE_SURROGATE_ID: &str = "id holds a lone UTF-16 surrogate escape, which encodes no \
                                 character; a request id must be a string of Unicode text or an integer";

/// The refusal of a method name that is a string no Unicode text can hold.
const LONE_SURROGATE_METHOD: &str = "method holds a lone UTF-16 surrogate escape, which encodes \
                                     no character; a method name must be Unicode text";

fn shape(reason: &'static str, id: Option<Value>) -> Invalid {
    Invalid::Shape { reason, id }
}

/// MCP request ids are strings or integers, never `null` (MCP basic protocol, "Requests").
fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Builds a JSON-RPC error response `{"jsonrpc":"2.0","id":id,"error":{code,message[,data]}}`.
pub fn error_response(id: &Value, code: i64, message: &str, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(data) = data {
        error["data"] = data;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_request_notification_response() {
        let req = Message::classify(json!({"jsonrpc":"2.0","id":1,"method":"ping"}));
        assert!(matches!(req, Ok(Message::Request { ref method, .. }) if method == "ping"));
        let note = Message::classify(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        assert!(matches!(note, Ok(Message::Notification { .. })));
        let resp = Message::classify(json!({"jsonrpc":"2.0","id":"a","result":{}}));
        assert!(matches!(resp, Ok(Message::Response { .. })));
    }

    #[test]
    fn classify_batch_is_rejected_as_batch() {
        assert_eq!(Message::classify(json!([])), Err(Invalid::Batch));
    }

    #[test]
    fn classify_bad_version_keeps_the_request_id() {
        let err = Message::classify(json!({"jsonrpc":"1.0","id":7,"method":"ping"}));
        assert!(matches!(err, Err(Invalid::Shape { id: Some(ref id), .. }) if id == &json!(7)));
    }

    #[test]
    fn classify_method_with_result_or_error_and_notification_with_id_are_invalid_keeping_the_id() {
        for message in [
            json!({"jsonrpc":"2.0","id":5,"method":"ping","result":{}}),
            json!({"jsonrpc":"2.0","id":5,"method":"ping","error":{"code":1,"message":"x"}}),
            json!({"jsonrpc":"2.0","id":5,"method":"notifications/cancelled",
                "params":{"requestId":62}}),
        ] {
            let err = Message::classify(message.clone());
            assert!(
                matches!(err, Err(Invalid::Shape { id: Some(ref id), .. }) if id == &json!(5)),
                "{message}: {err:?}"
            );
        }
    }

    #[test]
    fn a_lone_surrogate_in_the_method_or_id_is_named_as_the_cause() {
        let parse = |text: &str| WireMessage::parse(text.as_bytes()).expect("valid JSON");
        let method = Message::classify(parse(r#"{"jsonrpc":"2.0","id":3,"method":"\ud800"}"#));
        assert_eq!(
            method,
            Err(shape(LONE_SURROGATE_METHOD, Some(json!(3)))),
            "refused with the request id"
        );
        let id = Message::classify(parse(r#"{"jsonrpc":"2.0","id":"\udfff","method":"ping"}"#));
        assert_eq!(id, Err(shape(LONE_SURROGATE_ID, None)));
        // Values a view cannot hold for another reason keep their own refusal.
        let big = Message::classify(parse(r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#));
        assert_eq!(big, Err(shape("id must be a string or an integer", None)));
        let null = Message::classify(parse(r#"{"jsonrpc":"2.0","id":1,"method":null}"#));
        assert_eq!(null, Err(shape("method must be a string", Some(json!(1)))));
    }

    #[test]
    fn classify_null_or_object_id_is_invalid() {
        for id in [json!(null), json!({"a":1}), json!(1.5)] {
            let err = Message::classify(json!({"jsonrpc":"2.0","id":id,"method":"ping"}));
            assert!(
                matches!(err, Err(Invalid::Shape { id: None, .. })),
                "{err:?}"
            );
        }
    }

    #[test]
    fn error_response_echoes_id_and_data() {
        let e = error_response(
            &json!("x"),
            REQUEST_TIMEOUT,
            "timed out",
            Some(json!({"a":1})),
        );
        assert_eq!(e["id"], json!("x"));
        assert_eq!(e["error"]["code"], json!(REQUEST_TIMEOUT));
        assert_eq!(e["error"]["data"]["a"], json!(1));
    }
}
