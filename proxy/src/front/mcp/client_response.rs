//! A client's answer to a server request the proxy relayed (sampling, elicitation, roots): checked,
//! then sent upstream under the upstream's original id (field case BR-27), or, for an input
//! request of a modern upstream's `input_required` result, handed to the call that asked.
//!
//! Only a well-formed answer reaches the upstream (issue 12, item 8): a usable id (a string or
//! an integer; the proxy's own server-request ids are strings), and exactly one of a `result`
//! object (MCP 2025-06-18 "Messages": results are objects) or an `error` object with an integer
//! `code` and a string `message` (JSON-RPC 2.0 §5.1). Anything else is refused with 400 and
//! -32600 under the id when it is usable (`id: null` otherwise), counted as
//! `berth_proxy_invalid_messages_total{reason="shape"}`, and the server request stays pending,
//! so the client can still answer it properly.
//! Not responsible for: routing server requests to clients (`engine/forward/relay`,
//! `engine/fanout`).

use axum::http::StatusCode;
use serde_json::Value;

use super::refusal::refused;
use crate::client::sessions::{DownstreamSession, ServerRequest};
use crate::front::mcp::state::Front;
use crate::transport::upstream::UpstreamError;
use crate::wire::answer::Answer;
use crate::wire::jsonrpc;

/// Sends the client's answer `body` (classified as a response under `id`) upstream, or refuses
/// it; 202 once it was handed on. When the upstream does not take it, the client gets 502 with
/// -32010 under `id`, never a 202: after an error status or no answer within
/// `timeouts.connect`, `retryable: true` and the server request stays pending, so the answer
/// can be sent again; when the upstream session that asked has ended (lost, or its stdio child
/// gone), `retryable: false` and the request is gone with it.
///
/// Cancellation safety: dropping the future after the pending request was taken loses the
/// answer (the upstream's request then runs into its own timeout).
pub(super) async fn relay(
    proxy: &Front,
    session: &DownstreamSession,
    id: &Value,
    mut body: jsonrpc::WireMessage,
) -> Answer {
    if let Some(problem) = malformed(id, &body) {
        let id = if usable_id(id) { id } else { &Value::Null };
        return refused(
            &proxy.engine.metrics,
            "shape",
            StatusCode::BAD_REQUEST,
            id,
            jsonrpc::INVALID_REQUEST,
            problem,
        );
    }
    let Some(pending) = session.take_server_request(id) else {
        return refused(
            &proxy.engine.metrics,
            "unexpected_response",
            StatusCode::BAD_REQUEST,
            id,
            jsonrpc::INVALID_REQUEST,
            "no server request is pending with this id",
        );
    };
    let (upstream, upstream_id) = match pending {
        ServerRequest::Upstream {
            upstream,
            upstream_id,
        } => (upstream, upstream_id),
        ServerRequest::Input(waiting) => {
            // The call that bridges a modern upstream's input request takes it from here.
            let _ = waiting.send(body);
            return Answer::Accepted;
        }
    };
    body.set_id(&upstream_id);
    let sent = tokio::time::timeout(proxy.engine.connect_budget, upstream.send(&body)).await;
    let (error, ended) = match sent {
        Ok(Ok(_)) => return Answer::Accepted,
        Ok(Err(error)) => {
            let ended = matches!(error, UpstreamError::SessionLost | UpstreamError::Gone(_))
                || upstream.is_lost();
            (error.to_string(), ended)
        }
        // It may have reached the upstream; a second copy of an answer is ignored there, a
        // lost one leaves its request waiting.
        Err(_) => (
            format!(
                "no answer within timeouts.connect ({} ms)",
                proxy.engine.connect_budget.as_millis()
            ),
            false,
        ),
    };
    tracing::warn!(
        mcp.session_id = session.id(),
        %error,
        ended,
        "failed to relay a client response upstream"
    );
    let message = if ended {
        // The upstream session that asked is gone, and its request with it.
        "the answer could not be forwarded: the upstream session that asked has ended"
    } else {
        session.restore_server_request(
            id,
            ServerRequest::Upstream {
                upstream,
                upstream_id,
            },
        );
        "the answer could not be forwarded to the upstream MCP server; send it again"
    };
    Answer::error_with_data(
        StatusCode::BAD_GATEWAY,
        id,
        jsonrpc::UPSTREAM_UNAVAILABLE,
        message,
        serde_json::json!({
            "outcome": crate::wire::outcome::Outcome::UpstreamUnavailable.as_label(),
            "retryable": !ended,
        }),
    )
}

/// MCP request ids are strings or integers (MCP 2025-06-18 "Messages").
fn usable_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// What is wrong with a response, if anything.
fn malformed(id: &Value, body: &Value) -> Option<&'static str> {
    if !usable_id(id) {
        return Some("a response's id must be a string or an integer");
    }
    match (body.get("result"), body.get("error")) {
        (Some(_), Some(_)) => Some("a response carries result or error, never both"),
        (Some(result), None) if !result.is_object() => {
            Some("a response's result must be an object")
        }
        (None, Some(error))
            if !(error.get("code").is_some_and(Value::is_i64)
                && error.get("message").is_some_and(Value::is_string)) =>
        {
            Some("a response's error must be an object with an integer code and a string message")
        }
        (None, None) => Some("a response carries result or error"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problem(message: Value) -> Option<&'static str> {
        malformed(&message["id"], &message)
    }

    #[test]
    fn malformed_accepts_a_result_object_or_an_error_object() {
        assert_eq!(
            problem(json!({"jsonrpc":"2.0","id":"berth-s1","result":{}})),
            None
        );
        assert_eq!(
            problem(json!({"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"no"}})),
            None
        );
    }

    #[test]
    fn malformed_refuses_both_neither_wrong_types_and_unusable_ids() {
        for message in [
            json!({"jsonrpc":"2.0","id":"s","result":{},"error":{"code":1,"message":"x"}}),
            json!({"jsonrpc":"2.0","id":"s","result":5}),
            json!({"jsonrpc":"2.0","id":"s","error":true}),
            json!({"jsonrpc":"2.0","id":"s","error":{"code":"1","message":"x"}}),
            json!({"jsonrpc":"2.0","id":"s","error":{"code":1}}),
            json!({"jsonrpc":"2.0","id":[],"result":{}}),
            json!({"jsonrpc":"2.0","id":null,"result":{}}),
            json!({"jsonrpc":"2.0","id":1.5,"result":{}}),
        ] {
            assert!(problem(message.clone()).is_some(), "{message}");
        }
    }
}
